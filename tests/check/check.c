/* The harness's helpers for the ops' input makers, and one case run: see check.h and check_run.h. */
#include "check_run.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers of the input makers ---------------------------------------------------------------- */

uint64_t check_mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t check_rand(check_world *w) { return gpu_rand(&w->rng); }

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (p == NULL) {
    fprintf(stderr, "check: out of host memory (%zu bytes)\n", n);
    abort();
  }
  return p;
}

int check_buf_add(check_world *w, const char *name, check_where where, size_t bytes, unsigned offset, int64_t row,
                  int output) {
  if (w->num_bufs >= CHECK_MAX_BUFS) {
    fprintf(stderr, "check: more than %d buffers in one case\n", CHECK_MAX_BUFS);
    abort();
  }
  check_buf *b = &w->bufs[w->num_bufs];
  memset(b, 0, sizeof *b);
  snprintf(b->name, sizeof b->name, "%s", name);
  b->where = where;
  b->bytes = bytes;
  b->offset = offset;
  b->row = row;
  b->output = output;
  return w->num_bufs++;
}

void check_buf_pool(check_world *w, int i, size_t bytes) {
  if (w->timing && i >= 0) w->bufs[i].pool = bytes;
}

void check_buf_random(check_world *w, int i) {
  check_buf *b = &w->bufs[i];
  if (b->init == NULL) return; /* timing: an output without a host copy */
  gpu_fill_random(b->init, b->bytes, &w->rng);
  if (b->output) memcpy(b->want, b->init, b->bytes);
}

void check_distinct_slots(check_world *w, int64_t *out, int64_t batch, int64_t num_slots) {
  int64_t *perm = xmalloc((size_t)(num_slots > 0 ? num_slots : 1) * sizeof *perm);
  for (int64_t i = 0; i < num_slots; i++) perm[i] = i;
  for (int64_t i = 0; i < batch && i < num_slots; i++) {
    int64_t j = i + (int64_t)(check_rand(w) % (uint64_t)(num_slots - i));
    int64_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
    out[i] = perm[i];
  }
  for (int64_t i = num_slots; i < batch; i++) out[i] = -1; /* more items than slots: padding */
  free(perm);
}

void check_write_ids(unsigned char *out, const int64_t *ids, int64_t batch, int64_t stride, kvjit_index_type type) {
  for (int64_t i = 0; i < batch; i++) {
    if (type == KVJIT_INDEX_INT32) {
      int32_t s = (int32_t)ids[i];
      memcpy(out + (size_t)(i * stride) * 4, &s, 4);
    } else {
      memcpy(out + (size_t)(i * stride) * 8, &ids[i], 8);
    }
  }
}

/* ---- buffers ------------------------------------------------------------------------------------- */

#define CHECK_TIMING_PAGE ((size_t)2 << 20)

/* @p bytes rounded up to whole CHECK_TIMING_PAGEs, at least one. */
static size_t timing_pages(size_t bytes) {
  const size_t pages = (bytes + CHECK_TIMING_PAGE - 1) / CHECK_TIMING_PAGE;
  return (pages ? pages : 1) * CHECK_TIMING_PAGE;
}

static void world_alloc(check_world *w) {
  const gpu_driver *drv = gpu_current()->drv;
  for (int i = 0; i < w->num_bufs; i++) {
    check_buf *b = &w->bufs[i];
    size_t bytes = b->bytes + b->offset + 16;
    /* Timing: whole 2 MiB pages of its own for each buffer (so it starts on one), as the old
     * benchmarks' pools and caches had them, not the CUDA driver's sub-allocation of small buffers
     * beside their neighbours (which moved the 128 B and 1024 B x 1-token cells by ~1 % on the
     * H200, in opposite directions: where the rows land, not the method). */
    if (w->timing) bytes = timing_pages(b->pool > b->bytes + b->offset ? b->pool : b->bytes + b->offset);
    if (b->where == CHECK_HOST) {
      GPU_CU(drv->cuMemHostAlloc(&b->host_alloc, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
      b->alloc = (uint64_t)(uintptr_t)b->host_alloc; /* unified addressing: the same address */
    } else {
      b->alloc = gpu_alloc(bytes);
    }
    b->ptr = b->alloc + b->offset;
    if (w->timing && (b->output || b->row > 0)) { /* rows whose bytes do not matter to a timing */
      /* Outputs zeroed; inputs 0x3f80 in every 16 bits: a normal number as bf16 (1.0), f16 and f32
       * pairs, so no peer's arithmetic times the slow path of zeros (IEEE division takes it). */
      const uint32_t fill = b->output ? 0 : 0x3f803f80u;
      if (b->host_alloc)
        for (size_t k = 0; k < bytes / 4; k++) memcpy((unsigned char *)b->host_alloc + 4 * k, &fill, 4);
      else GPU_CU(drv->cuMemsetD32(b->alloc, fill, bytes / 4));
      continue;
    }
    b->init = xmalloc(b->bytes);
    b->want = b->output ? xmalloc(b->bytes) : NULL;
    memset(b->init, 0, b->bytes);
    if (b->want) memset(b->want, 0, b->bytes);
  }
}

static void world_free(check_world *w) {
  const gpu_driver *drv = gpu_current()->drv;
  for (int i = 0; i < w->num_bufs; i++) {
    check_buf *b = &w->bufs[i];
    if (b->host_alloc) GPU_CU(drv->cuMemFreeHost(b->host_alloc));
    else gpu_free(b->alloc);
    free(b->init);
    free(b->want);
  }
  w->num_bufs = 0;
}

static void world_upload(const check_world *w) {
  for (int i = 0; i < w->num_bufs; i++) {
    const check_buf *b = &w->bufs[i];
    if (b->init == NULL) continue;
    if (b->where == CHECK_HOST) memcpy((unsigned char *)b->host_alloc + b->offset, b->init, b->bytes);
    else gpu_upload(b->ptr, b->init, b->bytes);
  }
}

/* ---- one case ------------------------------------------------------------------------------------- */

__attribute__((format(printf, 4, 5))) static void fail(check_totals *t, const check_case_run *r, const char *when,
                                                       const char *fmt, ...);
static void fail(check_totals *t, const check_case_run *r, const char *when, const char *fmt, ...) {
  char what[640];
  r->op->describe(r->c, what, sizeof what);
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL %s #%zu [%s pdl=%s stream=%s] %s: ", r->op->name, r->index, what, check_pdl_name(r->pdl),
          r->stream ? "own" : "default", when);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n  rerun: %s --op %s --case %zu\n", r->program, r->op->name, r->index);
  t->failures++;
}

/* Every byte of every buffer: outputs against the reference, inputs against what was uploaded. */
static int world_compare(check_totals *t, const check_case_run *r, const check_world *w, const char *when) {
  for (int i = 0; i < w->num_bufs; i++) {
    const check_buf *b = &w->bufs[i];
    const unsigned char *want = b->output ? b->want : b->init;
    unsigned char *got = xmalloc(b->bytes);
    if (b->where == CHECK_HOST) memcpy(got, (unsigned char *)b->host_alloc + b->offset, b->bytes);
    else gpu_download(got, b->ptr, b->bytes);
    t->bytes += b->bytes;
    int bad = memcmp(got, want, b->bytes) != 0;
    if (bad) {
      size_t first = 0, count = 0;
      while (got[first] == want[first]) first++;
      for (size_t j = first; j < b->bytes; j++) count += got[j] != want[j];
      char where[80] = "";
      if (b->row > 0) {
        snprintf(where, sizeof where, " (row %zu, byte %zu of it)", first / (size_t)b->row, first % (size_t)b->row);
      }
      fail(t, r, when, "%s %s: byte %zu%s is 0x%02x, expected 0x%02x; %zu bytes differ", b->output ? "output" : "input",
           b->name, first, where, got[first], want[first], count);
    }
    free(got);
    if (bad) return 1;
  }
  return 0;
}

static int check_counter(check_totals *t, const check_case_run *r, kvjit_context *ctx, const check_world *w,
                         const char *when) {
  uint64_t n = 0;
  kvjit_status st = kvjit_op_oob_count(ctx, r->op->name, &n, 1);
  if (st != KVJIT_OK) {
    fail(t, r, when, "kvjit_op_oob_count: %s: %s", kvjit_status_name(st), kvjit_last_error());
    return 1;
  }
  if (w->expected_oob != CHECK_OOB_UNCHECKED && n != w->expected_oob) {
    fail(t, r, when, "bad-slot counter %llu, expected %llu", (unsigned long long)n,
         (unsigned long long)w->expected_oob);
    return 1;
  }
  return 0;
}

static int launch_all(check_totals *t, const check_case_run *r, kvjit_context *ctx, const check_world *w,
                      int prepare, const char *when) {
  const check_common *common = r->c;
  int steps = common->steps > 0 ? common->steps : 1;
  for (int s = 0; s < steps; s++) {
    check_launch l = {r->pdl, r->stream, s, prepare};
    kvjit_status st = r->op->launch(ctx, r->c, w, &l);
    if (st != KVJIT_OK) {
      fail(t, r, when, "%s step %d: %s: %s", prepare ? "prepare" : "launch", s, kvjit_status_name(st),
           kvjit_last_error());
      return 1;
    }
    if (!prepare) t->launches++;
  }
  return 0;
}

static void sync_stream(const check_case_run *r) {
  if (r->stream) GPU_CU(gpu_current()->drv->cuStreamSynchronize((CUstream)r->stream));
  gpu_sync();
}

/* The graph part: prepared, captured once, replayed with new data at the same addresses. */
static int run_graph(check_totals *t, const check_case_run *r, kvjit_context *ctx, check_world *w, int replays) {
  const gpu_driver *drv = gpu_current()->drv;
  CUstream stream = (CUstream)r->stream;
  if (launch_all(t, r, ctx, w, 1, "graph") != 0) return 1;
  CUgraph graph = NULL;
  CUgraphExec exec = NULL;
  GPU_CU(drv->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  uint64_t launches = t->launches;
  int bad = launch_all(t, r, ctx, w, 0, "graph capture");
  t->launches = launches; /* captured, not run */
  GPU_CU(drv->cuStreamEndCapture(stream, &graph));
  if (bad) {
    if (graph) GPU_CU(drv->cuGraphDestroy(graph));
    return 1;
  }
  GPU_CU(drv->cuGraphInstantiateWithFlags(&exec, graph, 0));
  const check_common *common = r->c;
  for (int rep = 0; rep < replays && !bad; rep++) {
    char when[32];
    snprintf(when, sizeof when, "graph replay %d", rep + 1);
    r->op->fill(r->c, w);
    world_upload(w);
    GPU_CU(drv->cuGraphLaunch(exec, stream));
    GPU_CU(drv->cuStreamSynchronize(stream));
    t->launches += (uint64_t)(common->steps > 0 ? common->steps : 1);
    t->runs++;
    bad = world_compare(t, r, w, when) || check_counter(t, r, ctx, w, when);
  }
  GPU_CU(drv->cuGraphExecDestroy(exec));
  GPU_CU(drv->cuGraphDestroy(graph));
  t->graph_cases++;
  return bad;
}

check_world *check_world_make(const check_op *op, const void *c, size_t index, int sets, int timing) {
  check_world *w = xmalloc(sizeof *w);
  memset(w, 0, sizeof *w);
  w->sm = gpu_current()->sm;
  w->rng = check_mix(check_op_seed(op) ^ check_mix(index)) | 1;
  w->sets = sets > 0 ? sets : 1;
  w->timing = timing;
  op->layout(c, w);
  world_alloc(w);
  op->fill(c, w);
  world_upload(w);
  return w;
}

void check_world_destroy(check_world *w) {
  if (w == NULL) return;
  world_free(w);
  free(w);
}

int check_run_case(check_totals *t, const check_case_run *r, kvjit_context *ctx) {
  check_world *w = check_world_make(r->op, r->c, r->index, 1, 0);
  t->cases++;
  t->pdl[r->pdl]++;
  int bad = 0;
  uint64_t stale = 0;
  if (kvjit_op_oob_count(ctx, r->op->name, &stale, 1) != KVJIT_OK) {
    fail(t, r, "before", "kvjit_op_oob_count: %s", kvjit_last_error());
    bad = 1;
  }
  if (!bad) bad = launch_all(t, r, ctx, w, 0, "eager");
  if (!bad) {
    sync_stream(r);
    t->runs++;
    t->rows += w->rows;
    bad = world_compare(t, r, w, "eager") || check_counter(t, r, ctx, w, "eager");
  }
  if (!bad && r->graph > 0) bad = run_graph(t, r, ctx, w, r->graph);
  check_world_destroy(w);
  t->failed_cases += bad != 0;
  return bad;
}

const char *check_pdl_name(kvjit_pdl_mode pdl) {
  return pdl == KVJIT_PDL_ON ? "on" : pdl == KVJIT_PDL_OFF ? "off" : "auto";
}

uint64_t check_op_seed(const check_op *op) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a of the op's name */
  for (const char *p = op->name; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
  return h;
}

void check_plan_run(check_case_run *r, const check_op *op, size_t index, const void *c, int sm, CUstream stream) {
  const check_common *common = c;
  uint64_t h = check_mix(check_op_seed(op) ^ check_mix(index ^ 0x5eedull));
  r->op = op;
  r->index = index;
  r->c = c;
  r->pdl = common->pdl;
  if (r->pdl == KVJIT_PDL_AUTO) { /* the harness's choice: every mode over the whole space */
    static const kvjit_pdl_mode modes[] = {KVJIT_PDL_AUTO, KVJIT_PDL_ON, KVJIT_PDL_OFF};
    r->pdl = modes[h % 3];
  }
  if (r->pdl == KVJIT_PDL_ON && sm < 90) r->pdl = KVJIT_PDL_OFF; /* refused there: tests/test_gpu_ops.c */
  /* One case in eight is also replayed in a graph; graphs need a stream of their own, and every
   * other case takes one or the legacy default stream by its index. */
  r->graph = common->graph > 0 ? common->graph : ((h >> 8) % 8 == 0 ? 1 : 0);
  r->stream = (r->graph > 0 || (h >> 16) % 2) ? (struct CUstream_st *)stream : NULL;
}
