/*
 * bench_ops: the one bench driver over the check harness's table of ops (tests/check/check_ops.c).
 * Per op and cell (the op's bench_get()): the cell checked first through the harness (every byte,
 * the counter), then, on inputs rotating through input sets (check_world.sets), kvjit's call timed
 * per launch in a CUDA graph and as eager calls on a stream (the host's launch rate), and the same
 * for each peer of the op (bench_peers.c); the bounds of the machine once (the copy bandwidth, the
 * empty-kernel floor in a graph and on a stream with PDL on and off, the host link each way); in
 * the cells the op marks (bench_host_cost), the host's cost of one eager call against a raw
 * cuLaunchKernelEx of the kernel that call launched (read back from a captured graph node).
 * Public API and test helpers only. Writes OUT/OP.csv per op (bench/ops_table.py renders it).
 *
 *   bench_ops --out DIR [--op NAME] [--where COLUMN=V1|V2 ...] [--reps N] [--deadline S] [--list]
 *          [--host-only]
 *
 * --list prints every cell with the implementations it times (no GPU needed).
 * --host-only: only the cells with a host cost, checked, then their host cost (bench_host_cost.h);
 * no bounds, no device timings, no peers.
 * --where keeps the cells whose column (the op's bench_columns) has one of the values, e.g.
 * --where row_bytes=128|1024|8192 --where batch=1|128|65536 --where index=int64 --where pdl=on.
 */
#define BENCH_PROGRAM "bench_ops"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_host_cost.h"
#include "bench_peers.h"
#include "bench_util.h"
#include "check/check_run.h"

#define TARGET_LOOP_US 3000.0
#define MIN_LAUNCHES 8
#define MAX_LAUNCHES 320
#define MAX_REPS 64
#define MAX_WHERE 8

typedef struct options {
  const char *out, *op;
  const char *where[MAX_WHERE];
  int nwhere, reps, list, host_only;
  double deadline;
} options;

#define LINK_BYTES ((size_t)512 << 20)
#define DTOD_BYTES ((size_t)1 << 30)

typedef struct bounds {
  bench_stats dtod_us, h2d_us, d2h_us; /* one copy of DTOD_BYTES / LINK_BYTES */
  bench_stats ctx_device_us;           /* one cuCtxGetDevice: the driver call an op call makes besides the launch */
  bench_stats empty_us[2][2];          /* [pdl][graph] */
} bounds;

static const gpu_env *env;
static CUstream stream;
static CUevent ev[MAX_REPS + 1];
static double t_start;

static double now_s(void) { return (double)bench_now_ns() * 1e-9; }

/* ---- cells ---------------------------------------------------------------------------------------------- */

/* Value of column @p name in the op's CSV cell @p cell (columns @p header), into @p out. */
static int column(const char *header, const char *cell, const char *name, char *out, size_t cap) {
  char h[256], c[256];
  snprintf(h, sizeof h, "%s", header);
  snprintf(c, sizeof c, "%s", cell);
  char *hs = NULL, *cs = NULL;
  for (char *hn = strtok_r(h, ",", &hs), *cv = strtok_r(c, ",", &cs); hn && cv;
       hn = strtok_r(NULL, ",", &hs), cv = strtok_r(NULL, ",", &cs)) {
    if (strcmp(hn, name) == 0) {
      snprintf(out, cap, "%s", cv);
      return 1;
    }
  }
  return 0;
}

static int selected(const options *o, const check_op *op, const char *cell) {
  for (int i = 0; i < o->nwhere; i++) {
    char name[64], value[64];
    const char *eq = strchr(o->where[i], '=');
    snprintf(name, sizeof name, "%.*s", (int)(eq - o->where[i]), o->where[i]);
    if (!column(op->bench_columns, cell, name, value, sizeof value)) continue; /* another op's column */
    char list[256];
    snprintf(list, sizeof list, "%s", eq + 1);
    int hit = 0;
    char *save = NULL;
    for (char *v = strtok_r(list, "|", &save); v; v = strtok_r(NULL, "|", &save)) hit |= strcmp(v, value) == 0;
    if (!hit) return 0;
  }
  return 1;
}

/* ---- timing --------------------------------------------------------------------------------------------- */

typedef kvjit_status (*launch_fn)(void *self, const check_launch *l);

/* Per-launch microseconds of each of @p reps rounds of @p launches (events between rounds). */
static bench_stats read_rounds(int reps, int launches) {
  double us[MAX_REPS];
  CU(env->drv->cuEventSynchronize(ev[reps]));
  for (int r = 0; r < reps; r++) {
    float ms;
    CU(env->drv->cuEventElapsedTime(&ms, ev[r], ev[r + 1]));
    us[r] = (double)ms * 1000.0 / launches;
  }
  return bench_summarize(us, (size_t)reps);
}

/* @p launches launches (launch j: input set j % sets) captured into one graph, replayed twice to
 * warm up, then @p reps replays back to back. @return -1 when a launch failed. (~20 ms of warm-up
 * replays instead of 2 changed no cell beyond 1 % on the H200, 2026-12-02: 128 B x 1, fp8 2048 B x 16.) */
static int time_graph(launch_fn fn, void *self, kvjit_pdl_mode pdl, int launches, int reps, bench_stats *out) {
  CUgraph graph;
  CUgraphExec exec;
  CU(env->drv->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  int bad = 0;
  for (int j = 0; j < launches && !bad; j++) {
    check_launch l = {pdl, (struct CUstream_st *)stream, j, 0};
    bad = fn(self, &l) != KVJIT_OK;
  }
  CU(env->drv->cuStreamEndCapture(stream, &graph));
  if (bad) {
    fprintf(stderr, "bench_ops: a launch failed in capture: %s\n", kvjit_last_error());
    CU(env->drv->cuGraphDestroy(graph));
    return -1;
  }
  CU(env->drv->cuGraphInstantiateWithFlags(&exec, graph, 0));
  for (int w = 0; w < 2; w++) CU(env->drv->cuGraphLaunch(exec, stream));
  CU(env->drv->cuEventRecord(ev[0], stream));
  for (int r = 0; r < reps; r++) {
    CU(env->drv->cuGraphLaunch(exec, stream));
    CU(env->drv->cuEventRecord(ev[r + 1], stream));
  }
  *out = read_rounds(reps, launches);
  CU(env->drv->cuGraphExecDestroy(exec));
  CU(env->drv->cuGraphDestroy(graph));
  return 0;
}

/* The same launches as eager calls on the stream, @p reps rounds: for small cells, the host's rate. */
static int time_stream(launch_fn fn, void *self, kvjit_pdl_mode pdl, int launches, int reps, bench_stats *out) {
  for (int j = 0; j < launches; j++) { /* warm-up round */
    check_launch l = {pdl, (struct CUstream_st *)stream, j, 0};
    if (fn(self, &l) != KVJIT_OK) return -1;
  }
  CU(env->drv->cuEventRecord(ev[0], stream));
  for (int r = 0; r < reps; r++) {
    for (int j = 0; j < launches; j++) {
      check_launch l = {pdl, (struct CUstream_st *)stream, j, 0};
      if (fn(self, &l) != KVJIT_OK) return -1;
    }
    CU(env->drv->cuEventRecord(ev[r + 1], stream));
  }
  *out = read_rounds(reps, launches);
  return 0;
}

typedef struct kvjit_self {
  kvjit_context *ctx;
  const check_op *op;
  const void *c;
  const check_world *w;
} kvjit_self;

static kvjit_status launch_kvjit(void *self, const check_launch *l) {
  const kvjit_self *k = self;
  return k->op->launch(k->ctx, k->c, k->w, l);
}

typedef struct peer_self {
  const bench_peer *peer;
  void *state;
  const void *c;
  const check_world *w;
} peer_self;

static kvjit_status launch_peer(void *self, const check_launch *l) {
  const peer_self *p = self;
  return p->peer->launch(p->state, p->c, p->w, l);
}

/* ---- bounds --------------------------------------------------------------------------------------------- */

/* One async copy timed @p reps times between events: microseconds per copy. */
static bench_stats time_copies(int kind, CUdeviceptr dev, CUdeviceptr dev2, void *host, size_t bytes, int reps) {
  double v[MAX_REPS];
  for (int r = 0; r < reps; r++) {
    CU(env->drv->cuEventRecord(ev[0], stream));
    if (kind == 0) CU(env->drv->cuMemcpyDtoDAsync(dev2, dev, bytes, stream));
    else if (kind == 1) CU(env->drv->cuMemcpyHtoDAsync(dev, host, bytes, stream));
    else CU(env->drv->cuMemcpyDtoHAsync(host, dev, bytes, stream));
    CU(env->drv->cuEventRecord(ev[1], stream));
    CU(env->drv->cuEventSynchronize(ev[1]));
    float ms;
    CU(env->drv->cuEventElapsedTime(&ms, ev[0], ev[1]));
    v[r] = (double)ms * 1e3;
  }
  return bench_summarize(v, (size_t)reps);
}

static void measure_bounds(kvjit_context *ctx, int reps, bounds *b) {
  /* Device copy of 1 GiB (counted as read + write); the host link: 512 MiB of pinned memory each way. */
  CUdeviceptr a = gpu_alloc(DTOD_BYTES), c = gpu_alloc(DTOD_BYTES);
  CU(env->drv->cuMemcpyDtoDAsync(c, a, DTOD_BYTES, stream));
  b->dtod_us = time_copies(0, a, c, NULL, DTOD_BYTES, reps);
  gpu_free(c);
  void *pinned = NULL;
  CU(env->drv->cuMemHostAlloc(&pinned, LINK_BYTES, CU_MEMHOSTALLOC_PORTABLE));
  memset(pinned, 1, LINK_BYTES);
  b->h2d_us = time_copies(1, a, 0, pinned, LINK_BYTES, reps);
  b->d2h_us = time_copies(2, a, 0, pinned, LINK_BYTES, reps);
  CU(env->drv->cuMemFreeHost(pinned));
  gpu_free(a);
  /* What one current-device query costs on this host (an op call picks its arch's variant by it). */
  double ns[HOST_GROUPS];
  for (int g = 0; g < HOST_GROUPS; g++) {
    CUdevice dev;
    const uint64_t t0 = bench_now_ns();
    for (int i = 0; i < HOST_CALLS; i++) CU(env->drv->cuCtxGetDevice(&dev));
    ns[g] = (double)(bench_now_ns() - t0) / HOST_CALLS * 1e-3;
  }
  b->ctx_device_us = bench_summarize(ns, HOST_GROUPS);
  /* The launch floor: an empty kernel, with and without the PDL attribute, in a graph and on a stream. */
  static const char *const names[] = {"bench_empty", "bench_empty_pdl"};
  static const char *const nvrtc_options[] = {"-std=c++17"};
  kvjit_program_desc d = KVJIT_PROGRAM_DESC_INIT;
  d.name = "bench_kernels.cu";
  d.source = bench_src_kernels;
  d.options = nvrtc_options;
  d.num_options = 1;
  d.kernels = names;
  d.num_kernels = 2;
  kvjit_program *prog = NULL;
  if (kvjit_program_get(ctx, &prog, NULL, &d) != KVJIT_OK) {
    fprintf(stderr, "bench_ops: empty kernels: %s\n", kvjit_last_error());
    return;
  }
  for (int pdl = 0; pdl < 2; pdl++) {
    kvjit_kernel *k = NULL;
    if (kvjit_program_kernel(prog, &k, names[pdl], 0) != KVJIT_OK) continue;
    kvjit_launch_config cfg = KVJIT_LAUNCH_CONFIG_INIT;
    cfg.stream = (struct CUstream_st *)stream;
    cfg.block[0] = 128; /* one block of 4 warps, as bench_store timed it */
    cfg.programmatic_serialization = pdl;
    for (int graph = 0; graph < 2; graph++) {
      CUgraph g = NULL;
      CUgraphExec exec = NULL;
      if (graph) CU(env->drv->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
      for (int rep = 0; rep < (graph ? 1 : reps + 1); rep++) {
        if (!graph && rep > 0) CU(env->drv->cuEventRecord(ev[rep - 1], stream));
        for (int j = 0; j < MAX_LAUNCHES; j++)
          if (kvjit_launch(k, &cfg, NULL) != KVJIT_OK) break;
      }
      if (!graph) {
        CU(env->drv->cuEventRecord(ev[reps], stream));
        b->empty_us[pdl][0] = read_rounds(reps, MAX_LAUNCHES);
        continue;
      }
      CU(env->drv->cuStreamEndCapture(stream, &g));
      CU(env->drv->cuGraphInstantiateWithFlags(&exec, g, 0));
      for (int w = 0; w < 2; w++) CU(env->drv->cuGraphLaunch(exec, stream));
      CU(env->drv->cuEventRecord(ev[0], stream));
      for (int r = 0; r < reps; r++) {
        CU(env->drv->cuGraphLaunch(exec, stream));
        CU(env->drv->cuEventRecord(ev[r + 1], stream));
      }
      b->empty_us[pdl][1] = read_rounds(reps, MAX_LAUNCHES);
      CU(env->drv->cuGraphExecDestroy(exec));
      CU(env->drv->cuGraphDestroy(g));
    }
  }
}

/* ---- host cost ------------------------------------------------------------------------------------------- */

typedef struct host_self {
  kvjit_self *k;
  const void *args;
  check_launch l;
} host_self;

/* One eager call for the host cost: the op's bare public call on arguments built once (what
 * bench_store timed), or launch() where the op has none. */
static kvjit_status host_call(void *self) {
  host_self *h = self;
  return h->args ? h->k->op->bench_call(h->k->ctx, h->args) : launch_kvjit(h->k, &h->l);
}

/* The host cost of cell @p k's call with PDL mode @p pdl (bench_host_cost.h). */
static int measure_host_cost(kvjit_self *k, kvjit_pdl_mode pdl, host_cost *out) {
  host_self h = {k, NULL, {pdl, (struct CUstream_st *)stream, 0, 0}};
  void *args = k->op->bench_args && k->op->bench_call ? k->op->bench_args(k->c, k->w, &h.l) : NULL;
  h.args = args;
  int rc = host_cost_measure(env->drv, stream, host_call, &h, pdl != KVJIT_PDL_OFF, out);
  free(args);
  return rc;
}

/* ---- one op ---------------------------------------------------------------------------------------------- */

static void csv_row(FILE *f, const check_op *op, const char *section, const char *impl, const char *cell,
                    const char *mode, int launches, int reps, const bench_stats *s, double bytes, const char *check) {
  int commas = 0;
  for (const char *p = op->bench_columns; *p; p++) commas += *p == ',';
  fprintf(f, "%s,%s,auto,", section, impl);
  if (cell) fprintf(f, "%s", cell);
  else
    for (int i = 0; i < commas; i++) fputc(',', f);
  fprintf(f, ",%s,%d,%d,%.4f,%.4f,%.4f,%.0f,%.4f,%s\n", mode, launches, reps, s->median, s->min, s->max, bytes,
          s->median > 0 && bytes > 0 ? bytes / (s->median * 1e-6) / 1e12 : 0.0, check);
}

static void bounds_rows(FILE *f, const check_op *op, const bounds *b, int reps) {
  csv_row(f, op, "bound", "memcpy_dtod", NULL, "stream", 1, reps, &b->dtod_us, 2.0 * (double)DTOD_BYTES, "ok");
  csv_row(f, op, "bound", "memcpy_htod_pinned", NULL, "stream", 1, reps, &b->h2d_us, (double)LINK_BYTES, "ok");
  csv_row(f, op, "bound", "memcpy_dtoh_pinned", NULL, "stream", 1, reps, &b->d2h_us, (double)LINK_BYTES, "ok");
  csv_row(f, op, "bound", "cuCtxGetDevice", NULL, "cpu", HOST_CALLS, HOST_GROUPS, &b->ctx_device_us, 0, "ok");
  static const char *const modes[2] = {"stream", "graph"};
  for (int pdl = 0; pdl < 2; pdl++)
    for (int g = 0; g < 2; g++)
      csv_row(f, op, "bound", pdl ? "empty_kernel_pdl" : "empty_kernel", NULL, modes[g], MAX_LAUNCHES, reps,
              &b->empty_us[pdl][g], 0, "ok");
}

/* The host rows of a cell: every mode and kind; the rows of record (mode cpu: kvjit_call and
 * raw_cuLaunchKernelEx) as bench_store wrote them. The spread and the paired differences go to
 * OUT/OP_host.csv (bench/host_cost_table.py reads it). */
static void host_rows(FILE *csv, FILE *spread, const check_op *op, const char *cell, const host_cost *h) {
  for (int m = 0; m < HOST_MODES; m++)
    for (int kind = 0; kind < HOST_KINDS; kind++) {
      const bench_stats us = host_cost_us(&h->ns[m][kind]);
      const char *check = !h->done ? "FAIL" : kind == HOST_KVJIT ? "ok" : "same_kernel";
      csv_row(csv, op, "host", host_kind_names[kind], cell, host_mode_names[m], h->calls[m], h->samples[m], &us, 0,
              check);
    }
  char label[256];
  snprintf(label, sizeof label, "%s %s", op->name, cell);
  if (spread) host_cost_csv(spread, cell, h);
  host_cost_print(stdout, label, h);
  const double call = h->ns[HOST_MODE_GROUPS][HOST_KVJIT].s.median, raw = h->ns[HOST_MODE_GROUPS][HOST_RAW].s.median;
  printf("%s %s: host cost: call %.0f ns, raw cuLaunchKernelEx %.0f ns, ratio %.3f (target <= 1.03, issue 17)\n",
         op->name, cell, call, raw, raw > 0 ? call / raw : 0.0);
}

/* Time one implementation of a cell, graph then stream, and write its rows. @return 1 when it ran. */
static int time_impl(FILE *csv, const options *o, const check_op *op, const char *section, const char *impl,
                     const char *cell, launch_fn fn, void *self, kvjit_pdl_mode pdl, int launches, int stream_only,
                     double bytes, int checked) {
  bench_stats graph = {0, 0, 0, 0}, eager = {0, 0, 0, 0};
  int ok = checked && (stream_only || time_graph(fn, self, pdl, launches, o->reps, &graph) == 0) &&
           time_stream(fn, self, pdl, launches, o->reps, &eager) == 0;
  if (!stream_only)
    csv_row(csv, op, section, impl, cell, "graph", launches, o->reps, &graph, bytes, ok ? "ok" : "FAIL");
  csv_row(csv, op, section, impl, cell, "stream", launches, o->reps, &eager, bytes, ok ? "ok" : "FAIL");
  printf("%s %s: %s %.3f us (graph), %.3f us (eager)%s\n", op->name, cell, impl, graph.median, eager.median,
         ok ? "" : " FAILED");
  return ok;
}

static int peer_applies(const bench_peer *p, const check_op *op, const void *c) {
  return strcmp(p->op, op->name) == 0 && p->applies(p, c);
}

static void list_cell(const check_op *op, const void *c, const char *cell) {
  printf("%s: %s: kvjit", op->name, cell);
  for (size_t p = 0; p < bench_num_peers; p++)
    if (peer_applies(&bench_peers[p], op, c)) printf(" %s", bench_peers[p].impl);
  for (int kind = 0; kind < HOST_KINDS && op->bench_host_cost && op->bench_host_cost(c); kind++)
    printf(" %s", host_kind_names[kind]);
  printf("\n");
}

static int run_op(const options *o, const check_op *op, kvjit_context *ctx, const bounds *b) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s.csv", o->out, op->name);
  FILE *csv = o->list ? NULL : fopen(path, "w");
  if (csv == NULL && !o->list) {
    perror(path);
    return 1;
  }
  if (csv) {
    setvbuf(csv, NULL, _IOLBF, 0); /* a run cut short by a timeout keeps every row it measured */
    fprintf(csv, "section,impl,split,%s,mode,launches,reps,us_median,us_min,us_max,bytes_per_launch,tbps_median,"
                 "check\n", op->bench_columns);
    if (!o->host_only) bounds_rows(csv, op, b, o->reps);
  }
  FILE *spread = NULL; /* OUT/OP_host.csv, from the first cell with a host cost */
  size_t count = op->bench_count(), failures = 0;
  void *c = malloc(op->case_size), *small = malloc(op->case_size);
  if (c == NULL || small == NULL) abort();
  for (size_t i = 0; i < count; i++) {
    op->bench_get(i, c, 1);
    op->bench_get(i, small, 0);
    char cell[128];
    op->bench_cell(c, cell, sizeof cell);
    if (!selected(o, op, cell)) continue;
    const int host = op->bench_host_cost && op->bench_host_cost(c);
    if (o->host_only && !host) continue;
    if (o->list) {
      list_cell(op, c, cell);
      continue;
    }
    if (o->deadline > 0 && now_s() - t_start > o->deadline) {
      printf("%s: deadline reached, cells from %s on not run\n", op->name, cell);
      break;
    }
    /* The cell checked first: every byte and the counter, through the harness. */
    check_totals t;
    memset(&t, 0, sizeof t);
    check_case_run r;
    check_plan_run(&r, op, i, small, env->sm, stream);
    r.pdl = ((const check_common *)c)->pdl;
    r.graph = 0;
    r.stream = (struct CUstream_st *)stream;
    r.program = BENCH_PROGRAM;
    int ok = check_run_case(&t, &r, ctx) == 0;
    const double bytes = op->bench_bytes(c);
    const kvjit_pdl_mode pdl = r.pdl;
    const int cap = op->bench_max_launches ? op->bench_max_launches(c) : 0;
    const int max_launches = cap > 0 ? cap : MAX_LAUNCHES;
    check_world *w = check_world_make(op, c, i, op->bench_sets(c, max_launches), 1);
    kvjit_self ks = {ctx, op, c, w};
    check_launch prep = {pdl, (struct CUstream_st *)stream, 0, 1};
    double est_us = bytes / 3.0e6; /* ~3 TB/s */
    if (op->bench_launches_measured && op->launch(ctx, c, w, &prep) == KVJIT_OK) {
      bench_stats one;
      if (time_stream(launch_kvjit, &ks, pdl, 1, 3, &one) == 0) est_us = one.median;
    }
    if (est_us < 1.0) est_us = 1.0;
    int launches = (int)(TARGET_LOOP_US / est_us);
    launches = launches < MIN_LAUNCHES ? MIN_LAUNCHES : launches > max_launches ? max_launches : launches;
    ok = ok && op->launch(ctx, c, w, &prep) == KVJIT_OK;
    if (!o->host_only) ok = time_impl(csv, o, op, "cell", "kvjit", cell, launch_kvjit, &ks, pdl, launches, 0, bytes, ok);
    failures += !ok;
    if (ok && host) {
      if (spread == NULL) {
        snprintf(path, sizeof path, "%s/%s_host.csv", o->out, op->name);
        if ((spread = fopen(path, "w")) != NULL) fprintf(spread, "%s,%s\n", op->bench_columns, HOST_COST_CSV_COLUMNS);
        else perror(path);
      }
      host_cost h;
      measure_host_cost(&ks, pdl, &h);
      host_rows(csv, spread, op, cell, &h);
    }
    for (size_t p = 0; p < bench_num_peers && !o->host_only; p++) {
      const bench_peer *peer = &bench_peers[p];
      if (!peer_applies(peer, op, c)) continue;
      peer_self ps = {peer, peer->prepare(peer, ctx, c, w), c, w};
      if (ps.state == NULL) continue;
      int n = peer->max_launches > 0 && peer->max_launches < launches ? peer->max_launches : launches;
      /* A peer far slower than kvjit (SGLang's quota of 2 blocks at 65536 items: 38 ms) runs
       * fewer launches per round: about the same ~3 ms, at least one (bench_transfer's rule). */
      bench_stats one;
      if (n > 1 && time_stream(launch_peer, &ps, pdl, 1, 1, &one) == 0 && one.median * n > 4 * TARGET_LOOP_US) {
        n = (int)(TARGET_LOOP_US / one.median);
        n = n < 1 ? 1 : n;
      }
      time_impl(csv, o, op, peer->section, peer->impl, cell, launch_peer, &ps, pdl, n, peer->stream_only, bytes, 1);
      CU(env->drv->cuStreamSynchronize(stream));
      if (peer->release) peer->release(ps.state);
      else free(ps.state);
    }
    check_world_destroy(w);
    printf("%s %s: done at %.1f s\n", op->name, cell, now_s() - t_start);
  }
  if (csv) fclose(csv);
  if (spread) fclose(spread);
  free(c);
  free(small);
  return failures != 0;
}

static void usage(FILE *f) {
  fprintf(f, "usage: bench_ops --out DIR [--op NAME] [--where COLUMN=V1|V2 ...] [--reps N] [--deadline S] "
             "[--list] [--host-only]\n");
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  options o = {.out = ".", .reps = 15};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--list") == 0) {
      o.list = 1;
    } else if (strcmp(a, "--host-only") == 0) {
      o.host_only = 1;
    } else if (v == NULL) {
      usage(stderr);
      return 2;
    } else if (strcmp(a, "--out") == 0) {
      o.out = v, i++;
    } else if (strcmp(a, "--op") == 0) {
      o.op = v, i++;
    } else if (strcmp(a, "--where") == 0 && strchr(v, '=') && o.nwhere < MAX_WHERE) {
      o.where[o.nwhere++] = v, i++;
    } else if (strcmp(a, "--reps") == 0 && atoi(v) >= 3 && atoi(v) <= MAX_REPS) {
      o.reps = atoi(v), i++;
    } else if (strcmp(a, "--deadline") == 0) {
      o.deadline = atof(v), i++;
    } else {
      usage(stderr);
      return 2;
    }
  }
  t_start = now_s();
  if (o.list) {
    for (size_t k = 0; k < check_num_ops; k++)
      if (!o.op || strcmp(o.op, check_ops[k]->name) == 0) run_op(&o, check_ops[k], NULL, NULL);
    return 0;
  }
  gpu_env e;
  int rc = gpu_setup(&e);
  if (rc != 0) return rc;
  env = &e;
  kvjit_context *ctx = NULL;
  char dir[64];
  if (gpu_context_create(&ctx, dir, sizeof dir, "bench", NULL) != 0) return 1;
  CU(env->drv->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i <= MAX_REPS; i++) CU(env->drv->cuEventCreate(&ev[i], CU_EVENT_DEFAULT));
  printf("bench_ops: %s, sm_%d, %d reps\n", env->name, env->sm, o.reps);
  Dl_info lib; /* which libkvjit ran: a before/after run may swap it under the same driver (LD_PRELOAD) */
  if (dladdr((void *)kvjit_last_error, &lib) && lib.dli_fname) printf("bench_ops: library %s\n", lib.dli_fname);
  bounds b;
  memset(&b, 0, sizeof b);
  if (!o.host_only) {
    measure_bounds(ctx, o.reps, &b);
    printf("bounds: memcpy %.3f TB/s, host link %.1f / %.1f GB/s, empty kernel %.3f us (graph) %.3f us (stream)\n",
           2.0 * (double)DTOD_BYTES / (b.dtod_us.median * 1e6), (double)LINK_BYTES / (b.h2d_us.median * 1e3),
           (double)LINK_BYTES / (b.d2h_us.median * 1e3), b.empty_us[0][1].median, b.empty_us[0][0].median);
  }
  int failed = 0;
  for (size_t k = 0; k < check_num_ops; k++)
    if (!o.op || strcmp(o.op, check_ops[k]->name) == 0) failed |= run_op(&o, check_ops[k], ctx, &b);
  for (int i = 0; i <= MAX_REPS; i++) CU(env->drv->cuEventDestroy(ev[i]));
  CU(env->drv->cuStreamDestroy(stream));
  gpu_context_destroy(ctx, dir);
  gpu_teardown(&e);
  printf("bench_ops: %.1f s%s\n", now_s() - t_start, failed ? ", some cells FAILED their check" : "");
  return failed;
}
