/*
 * bench_ops: the one bench driver over the check harness's table of ops (tests/check/check_ops.c).
 * Per op and cell (the op's bench_get()): the cell checked first through the harness (every byte,
 * the counter), then, on inputs rotating through input sets (check_world.sets), kvjit's call timed
 * per launch in a CUDA graph and as eager calls on a stream (the host's launch rate), and the same
 * for each peer of the op (bench_peers.c); the bounds of the machine once (the copy bandwidth, the
 * empty-kernel floor in a graph and on a stream with PDL on and off, the host link each way).
 * Public API and test helpers only. Writes OUT/OP.csv and OP.md per op.
 *
 *   bench_ops --out DIR [--op NAME] [--where COLUMN=V1|V2 ...] [--reps N] [--deadline S] [--list]
 *
 * --where keeps the cells whose column (the op's bench_columns) has one of the values, e.g.
 * --where row_bytes=128|1024|8192 --where batch=1|128|65536 --where index=int64 --where pdl=on.
 */
#define BENCH_PROGRAM "bench_ops"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
  int nwhere, reps, list;
  double deadline;
} options;

typedef struct bounds {
  bench_stats memcpy_tbps, h2d_gbps, d2h_gbps;
  bench_stats empty_us[2][2]; /* [pdl][graph] */
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
 * warm up, then @p reps replays back to back. @return -1 when a launch failed. */
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

static void measure_bounds(kvjit_context *ctx, int reps, bounds *b) {
  double v[MAX_REPS];
  /* Device copy of 1 GiB, counted as read + write. */
  const size_t gib = (size_t)1 << 30;
  CUdeviceptr a = gpu_alloc(gib), c = gpu_alloc(gib);
  CU(env->drv->cuMemcpyDtoDAsync(c, a, gib, stream));
  for (int r = 0; r < reps; r++) {
    CU(env->drv->cuEventRecord(ev[0], stream));
    CU(env->drv->cuMemcpyDtoDAsync(c, a, gib, stream));
    CU(env->drv->cuEventRecord(ev[1], stream));
    CU(env->drv->cuEventSynchronize(ev[1]));
    float ms;
    CU(env->drv->cuEventElapsedTime(&ms, ev[0], ev[1]));
    v[r] = 2.0 * (double)gib / ((double)ms * 1e-3) / 1e12;
  }
  b->memcpy_tbps = bench_summarize(v, (size_t)reps);
  gpu_free(c);
  /* The host link: 512 MiB of pinned memory each way, GB/s one way. */
  const size_t half = (size_t)512 << 20;
  void *pinned = NULL;
  CU(env->drv->cuMemHostAlloc(&pinned, half, CU_MEMHOSTALLOC_PORTABLE));
  memset(pinned, 1, half);
  for (int dir = 0; dir < 2; dir++) {
    for (int r = 0; r < reps; r++) {
      CU(env->drv->cuEventRecord(ev[0], stream));
      if (dir == 0) CU(env->drv->cuMemcpyHtoDAsync(a, pinned, half, stream));
      else CU(env->drv->cuMemcpyDtoHAsync(pinned, a, half, stream));
      CU(env->drv->cuEventRecord(ev[1], stream));
      CU(env->drv->cuEventSynchronize(ev[1]));
      float ms;
      CU(env->drv->cuEventElapsedTime(&ms, ev[0], ev[1]));
      v[r] = (double)half / ((double)ms * 1e-3) / 1e9;
    }
    *(dir == 0 ? &b->h2d_gbps : &b->d2h_gbps) = bench_summarize(v, (size_t)reps);
  }
  CU(env->drv->cuMemFreeHost(pinned));
  gpu_free(a);
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

/* ---- one op ---------------------------------------------------------------------------------------------- */

typedef struct row {
  char cell[128], impl[32];
  bench_stats graph, eager;
  double bytes;
  int ok;
} row;

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
  bench_stats us = b->memcpy_tbps; /* already TB/s: written as its own column */
  bench_stats per = {2.0 * (double)(1u << 30) / (us.median * 1e12) * 1e6, 0, 0, 0};
  per.min = per.max = per.median;
  csv_row(f, op, "bound", "memcpy_dtod", NULL, "stream", 1, reps, &per, 2.0 * (double)(1u << 30), "ok");
  static const char *const modes[2] = {"stream", "graph"};
  for (int pdl = 0; pdl < 2; pdl++)
    for (int g = 0; g < 2; g++)
      csv_row(f, op, "bound", pdl ? "empty_kernel_pdl" : "empty_kernel", NULL, modes[g], MAX_LAUNCHES, reps,
              &b->empty_us[pdl][g], 0, "ok");
}

static void write_md(const char *path, const check_op *op, const row *rows, size_t n, const bounds *b) {
  FILE *f = fopen(path, "w");
  if (f == NULL) {
    perror(path);
    return;
  }
  fprintf(f, "# %s on %s (sm_%d)\n\nbench_ops: kvjit's call per launch in a CUDA graph (inputs rotating), its peers on "
             "the same buffers and ids, eager calls on a stream; µs per launch, median of the replays.\n\n",
          op->name, env->name, env->sm);
  fprintf(f, "## Bounds\n\n| bound | value |\n| --- | --- |\n| cuMemcpyDtoD 1 GiB (read + write) | %.3f TB/s |\n"
             "| pinned host -> device, 512 MiB | %.1f GB/s |\n| device -> pinned host, 512 MiB | %.1f GB/s |\n",
          b->memcpy_tbps.median, b->h2d_gbps.median, b->d2h_gbps.median);
  fprintf(f, "| empty kernel, graph / stream | %.3f / %.3f µs |\n"
             "| empty kernel with PDL, graph / stream | %.3f / %.3f µs |\n\n",
          b->empty_us[0][1].median, b->empty_us[0][0].median, b->empty_us[1][1].median, b->empty_us[1][0].median);
  fprintf(f, "## Cells\n\n| %s | impl | check | graph µs | TB/s | of memcpy | vs kvjit | eager µs |\n",
          op->bench_columns);
  int cols = 1;
  for (const char *p = op->bench_columns; *p; p++) cols += *p == ',';
  fputs("|", f);
  for (int i = 0; i < cols + 6; i++) fputs(" --- |", f);
  fputs("\n", f);
  const row *kv = NULL;
  for (size_t i = 0; i < n; i++) {
    const row *r = &rows[i];
    if (strcmp(r->impl, "kvjit") == 0) kv = r;
    char cell[160];
    snprintf(cell, sizeof cell, "%s", r->cell);
    for (char *p = cell; *p; p++)
      if (*p == ',') *p = '|';
    double tbps = r->graph.median > 0 ? r->bytes / (r->graph.median * 1e-6) / 1e12 : 0;
    char vs[32] = "";
    if (kv && kv != r && strcmp(kv->cell, r->cell) == 0 && kv->graph.median > 0)
      snprintf(vs, sizeof vs, "%.3f", kv->graph.median / r->graph.median);
    fprintf(f, "| %s | %s | %s | %.3f | %.3f | %.3f | %s | %.3f |\n", cell, r->impl, r->ok ? "ok" : "FAIL",
            r->graph.median, tbps, b->memcpy_tbps.median > 0 ? tbps / b->memcpy_tbps.median : 0, vs, r->eager.median);
  }
  fprintf(f, "\n\"vs kvjit\": kvjit's time over the peer's (< 1: kvjit is faster).\n");
  fclose(f);
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
    fprintf(csv, "section,impl,split,%s,mode,launches,reps,us_median,us_min,us_max,bytes_per_launch,tbps_median,"
                 "check\n", op->bench_columns);
    bounds_rows(csv, op, b, o->reps);
  }
  size_t count = op->bench_count(), nrows = 0, failures = 0;
  row *rows = calloc(count * (1 + bench_num_peers) + 1, sizeof *rows);
  void *c = malloc(op->case_size), *small = malloc(op->case_size);
  if (rows == NULL || c == NULL || small == NULL) abort();
  for (size_t i = 0; i < count; i++) {
    op->bench_get(i, c, 1);
    op->bench_get(i, small, 0);
    char cell[128];
    op->bench_cell(c, cell, sizeof cell);
    if (!selected(o, op, cell)) continue;
    if (o->list) {
      printf("%s: %s\n", op->name, cell);
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
    failures += !ok;
    const double bytes = op->bench_bytes(c);
    const kvjit_pdl_mode pdl = r.pdl;
    const int max_launches = op->bench_max_launches > 0 ? op->bench_max_launches : MAX_LAUNCHES;
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
    row *kr = &rows[nrows++];
    snprintf(kr->cell, sizeof kr->cell, "%s", cell);
    snprintf(kr->impl, sizeof kr->impl, "kvjit");
    kr->bytes = bytes;
    kr->ok = ok && op->launch(ctx, c, w, &prep) == KVJIT_OK &&
             time_graph(launch_kvjit, &ks, pdl, launches, o->reps, &kr->graph) == 0 &&
             time_stream(launch_kvjit, &ks, pdl, launches, o->reps, &kr->eager) == 0;
    csv_row(csv, op, "cell", "kvjit", cell, "graph", launches, o->reps, &kr->graph, bytes, kr->ok ? "ok" : "FAIL");
    csv_row(csv, op, "cell", "kvjit", cell, "stream", launches, o->reps, &kr->eager, bytes, kr->ok ? "ok" : "FAIL");
    printf("%s %s: kvjit %.3f us (graph), %.3f us (eager), %d launches over %d sets%s\n", op->name, cell,
           kr->graph.median, kr->eager.median, launches, w->sets, kr->ok ? "" : " FAILED");
    for (size_t p = 0; p < bench_num_peers; p++) {
      if (strcmp(bench_peers[p].op, op->name) != 0) continue;
      peer_self ps = {&bench_peers[p], bench_peers[p].prepare(ctx, c, w), c, w};
      if (ps.state == NULL) continue;
      row *pr = &rows[nrows++];
      snprintf(pr->cell, sizeof pr->cell, "%s", cell);
      snprintf(pr->impl, sizeof pr->impl, "%s", bench_peers[p].impl);
      pr->bytes = bytes;
      pr->ok = time_graph(launch_peer, &ps, pdl, launches, o->reps, &pr->graph) == 0 &&
               time_stream(launch_peer, &ps, pdl, launches, o->reps, &pr->eager) == 0;
      csv_row(csv, op, "cell", pr->impl, cell, "graph", launches, o->reps, &pr->graph, bytes, pr->ok ? "ok" : "FAIL");
      csv_row(csv, op, "cell", pr->impl, cell, "stream", launches, o->reps, &pr->eager, bytes, pr->ok ? "ok" : "FAIL");
      printf("%s %s: %s %.3f us (graph), %.3f us (eager)\n", op->name, cell, pr->impl, pr->graph.median,
             pr->eager.median);
      free(ps.state);
    }
    check_world_destroy(w);
  }
  if (!o->list) {
    fclose(csv);
    snprintf(path, sizeof path, "%s/%s.md", o->out, op->name);
    write_md(path, op, rows, nrows, b);
  }
  free(rows);
  free(c);
  free(small);
  return failures != 0;
}

static void usage(FILE *f) {
  fprintf(f, "usage: bench_ops --out DIR [--op NAME] [--where COLUMN=V1|V2 ...] [--reps N] [--deadline S] "
             "[--list]\n");
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  options o = {.out = ".", .reps = 15};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--list") == 0) {
      o.list = 1;
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
  bounds b;
  memset(&b, 0, sizeof b);
  measure_bounds(ctx, o.reps, &b);
  printf("bounds: memcpy %.3f TB/s, host link %.1f / %.1f GB/s, empty kernel %.3f us (graph) %.3f us (stream)\n",
         b.memcpy_tbps.median, b.h2d_gbps.median, b.d2h_gbps.median, b.empty_us[0][1].median, b.empty_us[0][0].median);
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
