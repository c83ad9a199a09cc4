/*
 * bench_overlap: what a host-link copy costs the model running beside it (issue 29). A bf16 GEMM
 * loop runs on one stream while transfer_kv copies K/V rows between the GPU and pinned host
 * memory on another, back to back for longer than the loop; the GEMM loop's time against its time
 * alone is the copy's cost to the model. Each copy is also timed alone (its bandwidth).
 *
 * Copies: kvjit's default plan (few CTAs over the host link), kvjit's all-SM plan (max_ctas
 * KVJIT_TRANSFER_KV_ALL_CTAS), and SGLang's hierarchical-cache kernel at its default quota of 2
 * blocks (bench/ref_transfer_kv.cuh through bench_peers.c's "ref_quota2"). Cells, buffers, ids and
 * arguments are the check harness's transfer_kv bench cells (check_transfer.c), timing mode.
 *
 * --shapes adds launch shapes of kvjit's own template (overlap_shapes.h: CTAs, threads per CTA,
 * accesses per lane, PDL, cache-streaming mode; registers reported) and a control that only holds
 * SMs (spin:CTAS:THREADS, for as long as the default copy), each timed alone and beside the GEMM:
 * what decides the plan's shape over the host link. --gemms 0 times the copies alone.
 *
 * The GEMM is cuBLAS's (cublasGemmEx, bf16 in and out, fp32 accumulation), dlopen'd from the
 * toolkit: the model's own GEMMs are cuBLAS's, so its slowdown is what a serving runtime sees; a
 * GEMM of our own would measure how a weaker kernel shares the SMs. Without libcublas the bench
 * says so and exits 77. Public API and test helpers only.
 *
 *   usage: bench_overlap [--dirs d2h,h2d] [--rows LIST] [--batches LIST] [--gemm N] [--gemms N]
 *                        [--reps N] [--shapes C:T:CPL:PDL:STREAM|spin:C:T,...] [--out DIR]
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_PROGRAM "bench_overlap"
#include "bench_peers.h"
#include "bench_util.h"
#include "check/check_run.h"
#include "check/check_transfer.h"
#include "overlap_shapes.h"

#define MAX_LIST 8
#define MAX_REPS 15
#define MAX_SHAPES 40

/* The three copies of record, then the shapes (impl NUM_IMPLS + i: shape i). */
enum { IMPL_KVJIT, IMPL_KVJIT_ALL, IMPL_REF_Q2, NUM_IMPLS };
#define MAX_IMPLS (NUM_IMPLS + MAX_SHAPES)
static const char *const impl_names[NUM_IMPLS] = {"kvjit", "kvjit_all_sms", "ref_sglang_q2"};

typedef struct options {
  int dirs[2]; /* d2h, h2d */
  int64_t rows[MAX_LIST], batches[MAX_LIST];
  size_t nrows, nbatches;
  int gemm_n, gemms, reps; /* gemms 0: the copies alone */
  overlap_shape shapes[MAX_SHAPES];
  int nshapes;
  const char *out;
} options;

static const gpu_env *env;

/* transfer_kv's entry of the check harness's table of ops. */
static const check_op *transfer_op(void) {
  for (size_t i = 0; i < check_num_ops; i++)
    if (strcmp(check_ops[i]->name, "transfer_kv") == 0) return check_ops[i];
  abort();
}

/* ---- cuBLAS, dlopen'd (values from the toolkit's cublas_api.h and library_types.h) ------------- */

typedef int (*cublas_create_fn)(void **handle);
typedef int (*cublas_destroy_fn)(void *handle);
typedef int (*cublas_set_stream_fn)(void *handle, CUstream stream);
typedef int (*cublas_gemm_ex_fn)(void *handle, int transa, int transb, int m, int n, int k, const void *alpha,
                                 const void *a, int a_type, int lda, const void *b, int b_type, int ldb,
                                 const void *beta, void *c, int c_type, int ldc, int compute_type, int algo);
enum { CUBLAS_OP_N = 0, CUDA_R_16BF = 14, CUBLAS_COMPUTE_32F = 68, CUBLAS_GEMM_DEFAULT = -1 };

typedef struct gemm {
  void *lib, *handle;
  cublas_gemm_ex_fn gemm_ex;
  cublas_destroy_fn destroy;
  CUdeviceptr a, b, c;
  int n;
} gemm;

static int gemm_open(gemm *g, int n, CUstream stream) {
  static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
  memset(g, 0, sizeof *g);
  for (size_t i = 0; i < sizeof names / sizeof names[0] && g->lib == NULL; i++) g->lib = dlopen(names[i], RTLD_NOW);
  if (g->lib == NULL) return 0;
  cublas_create_fn create = (cublas_create_fn)dlsym(g->lib, "cublasCreate_v2");
  cublas_set_stream_fn set_stream = (cublas_set_stream_fn)dlsym(g->lib, "cublasSetStream_v2");
  g->gemm_ex = (cublas_gemm_ex_fn)dlsym(g->lib, "cublasGemmEx");
  g->destroy = (cublas_destroy_fn)dlsym(g->lib, "cublasDestroy_v2");
  if (!create || !set_stream || !g->gemm_ex || !g->destroy || create(&g->handle) != 0 ||
      set_stream(g->handle, stream) != 0)
    return 0;
  g->n = n;
  const size_t bytes = (size_t)n * (size_t)n * 2;
  CU(env->drv->cuMemAlloc(&g->a, bytes));
  CU(env->drv->cuMemAlloc(&g->b, bytes));
  CU(env->drv->cuMemAlloc(&g->c, bytes));
  /* Two bf16 2^-7 (0x3c00) per word: finite sums; a GEMM's time does not depend on its values. */
  CU(env->drv->cuMemsetD32(g->a, 0x3c003c00u, bytes / 4));
  CU(env->drv->cuMemsetD32(g->b, 0x3c003c00u, bytes / 4));
  return 1;
}

static void gemm_run(const gemm *g) {
  const float alpha = 1.0f, beta = 0.0f;
  const int st = g->gemm_ex(g->handle, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->n, g->n, &alpha, (const void *)g->a,
                            CUDA_R_16BF, g->n, (const void *)g->b, CUDA_R_16BF, g->n, &beta, (void *)g->c, CUDA_R_16BF,
                            g->n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (st != 0) {
    fprintf(stderr, "bench_overlap: cublasGemmEx: status %d\n", st);
    exit(2);
  }
}

static void gemm_close(gemm *g) {
  if (g->handle) g->destroy(g->handle);
  if (g->a) env->drv->cuMemFree(g->a);
  if (g->b) env->drv->cuMemFree(g->b);
  if (g->c) env->drv->cuMemFree(g->c);
}

/* ---- the copies -------------------------------------------------------------------------------- */

typedef struct copy {
  kvjit_context *ctx;
  const void *c;
  const check_world *w;
  int impl;
  const bench_peer *peer;
  void *peer_state;
  const overlap_kernel *shape; /* impl >= NUM_IMPLS */
} copy;

static kvjit_status copy_launch(const copy *k, CUstream stream, int prepare) {
  check_launch l = {KVJIT_PDL_AUTO, (struct CUstream_st *)stream, 0, prepare};
  if (k->impl == IMPL_REF_Q2) return prepare ? KVJIT_OK : k->peer->launch(k->peer_state, k->c, k->w, &l);
  kvjit_transfer_kv_args a;
  check_transfer_args(k->c, k->w, &l, &a);
  if (k->shape != NULL) return prepare ? KVJIT_OK : overlap_kernel_launch(k->shape, &a, stream);
  a.max_ctas = k->impl == IMPL_KVJIT_ALL ? KVJIT_TRANSFER_KV_ALL_CTAS : 0;
  return prepare ? kvjit_transfer_kv_prepare(k->ctx, &a) : kvjit_transfer_kv(k->ctx, &a);
}

static const bench_peer *find_peer(const char *impl) {
  for (size_t i = 0; i < bench_num_peers; i++)
    if (strcmp(bench_peers[i].op, "transfer_kv") == 0 && strcmp(bench_peers[i].impl, impl) == 0) return &bench_peers[i];
  return NULL;
}

/* Milliseconds between two events once the later one completed. */
static double elapsed_ms(CUevent a, CUevent b) {
  float ms = 0;
  CU(env->drv->cuEventSynchronize(b));
  CU(env->drv->cuEventElapsedTime(&ms, a, b));
  return (double)ms;
}

typedef struct cell_result {
  char cell[64];
  double copy_us[MAX_IMPLS], gbps[MAX_IMPLS];
  double gemm_alone_ms[MAX_IMPLS], gemm_with_ms[MAX_IMPLS]; /* the loop alone just before it ran beside each copy */
  int regs[MAX_IMPLS];                                      /* shapes: registers per thread */
} cell_result;

typedef struct timing {
  CUstream gemm_stream, copy_stream;
  CUevent e[4];
} timing;

/* One copy alone: the median per-launch microseconds of @p reps rounds of 8 launches, each round
 * behind one launch more, so that the stream is busy while the host enqueues them (the host's
 * launch latency is not the copy's time). */
static double time_copy_alone(const timing *t, const copy *k, int reps) {
  double us[MAX_REPS];
  for (int r = 0; r < reps; r++) {
    if (copy_launch(k, t->copy_stream, 0) != KVJIT_OK) return -1;
    CU(env->drv->cuEventRecord(t->e[0], t->copy_stream));
    for (int j = 0; j < 8; j++)
      if (copy_launch(k, t->copy_stream, 0) != KVJIT_OK) return -1;
    CU(env->drv->cuEventRecord(t->e[1], t->copy_stream));
    us[r] = elapsed_ms(t->e[0], t->e[1]) * 1000.0 / 8;
  }
  return bench_summarize(us, (size_t)reps).median;
}

/* The GEMM loop alone (@p k NULL), or beside copies launched back to back for 1.5 times as long as
 * the loop takes alone (@p copy_us each): the loop's median milliseconds over @p reps rounds. */
static double time_gemm_loop(const timing *t, const gemm *g, int gemms, const copy *k, double copy_us,
                             double alone_ms, int reps) {
  double ms[MAX_REPS];
  for (int r = 0; r < reps; r++) {
    if (k != NULL) {
      int launches = (int)(1.5 * alone_ms * 1000.0 / (copy_us > 1 ? copy_us : 1)) + 4;
      if (launches > 20000) launches = 20000;
      /* The copies first, then the GEMMs: the copies run the whole time the GEMMs do. */
      for (int j = 0; j < launches; j++)
        if (copy_launch(k, t->copy_stream, 0) != KVJIT_OK) return -1;
    }
    CU(env->drv->cuEventRecord(t->e[2], t->gemm_stream));
    for (int j = 0; j < gemms; j++) gemm_run(g);
    CU(env->drv->cuEventRecord(t->e[3], t->gemm_stream));
    ms[r] = elapsed_ms(t->e[2], t->e[3]);
    CU(env->drv->cuStreamSynchronize(t->copy_stream));
  }
  return bench_summarize(ms, (size_t)reps).median;
}

static double slowdown_pct(const cell_result *r, int i) {
  return r->gemm_with_ms[i] > 0 ? 100.0 * (r->gemm_with_ms[i] / r->gemm_alone_ms[i] - 1.0) : 0;
}

static int run_cell(const options *o, const timing *t, const gemm *g, kvjit_context *ctx, size_t index,
                    cell_result *out) {
  const check_op *op = transfer_op();
  void *c = calloc(1, op->case_size);
  if (c == NULL) abort();
  op->bench_get(index, c, 1);
  op->bench_cell(c, out->cell, sizeof out->cell);
  check_world *w = check_world_make(op, c, index, 1, 1);
  const double bytes = op->bench_bytes(c) / 2; /* each row crosses the link once */
  /* The shapes, made for the cell's rows (flat caches, plain copies, one layer, K = V only). */
  overlap_kernel shapes[MAX_SHAPES];
  int nshapes = 0;
  if (o->nshapes > 0) {
    kvjit_transfer_kv_args a;
    check_launch l = {KVJIT_PDL_AUTO, NULL, 0, 1};
    check_transfer_args(c, w, &l, &a);
    const int flat = a.src_dtype == a.dst_dtype && a.num_layers == 0 && a.src_k_layout == NULL &&
                     a.dst_k_layout == NULL && (a.v_row_bytes == 0 || a.v_row_bytes == a.k_row_bytes) && a.src_v;
    if (flat && overlap_kernels_make(ctx, o->shapes, o->nshapes, a.k_row_bytes, a.index_type == KVJIT_INDEX_INT64,
                                     shapes))
      nshapes = o->nshapes;
  }
  int bad = 0;
  for (int i = 0; i < NUM_IMPLS + nshapes && !bad; i++) {
    copy k = {ctx, c, w, i, NULL, NULL, i >= NUM_IMPLS ? &shapes[i - NUM_IMPLS] : NULL};
    if (k.shape != NULL) {
      if (k.shape->kernel == NULL) continue; /* a shape the row does not take */
      out->regs[i] = k.shape->regs;
      /* The control holds its SMs as long as the default plan's copy does. */
      shapes[i - NUM_IMPLS].spin_ns = (unsigned long long)(out->copy_us[IMPL_KVJIT] * 1000.0);
    }
    if (i == IMPL_REF_Q2) {
      k.peer = find_peer("ref_quota2");
      k.peer_state = k.peer ? k.peer->prepare(k.peer, ctx, c, w) : NULL;
      if (k.peer_state == NULL) continue; /* rows SGLang's kernel does not take */
    }
    const char *name = i < NUM_IMPLS ? impl_names[i] : k.shape->shape->name;
    if (copy_launch(&k, t->copy_stream, 1) != KVJIT_OK) {
      fprintf(stderr, "bench_overlap: %s %s: %s\n", name, out->cell, kvjit_last_error());
      bad = 1;
      break;
    }
    out->copy_us[i] = time_copy_alone(t, &k, o->reps);
    out->gbps[i] = out->copy_us[i] > 0 && !(k.shape && k.shape->shape->spin) ? bytes / out->copy_us[i] * 1e-3 : 0;
    bad = out->copy_us[i] < 0;
    if (o->gemms > 0 && !bad) {
      /* Alone right before beside the copy: clocks and temperature drift between cells (run E showed
       * "-10 %" slowdowns against one measurement at the start). */
      out->gemm_alone_ms[i] = time_gemm_loop(t, g, o->gemms, NULL, 0, 0, o->reps);
      out->gemm_with_ms[i] = time_gemm_loop(t, g, o->gemms, &k, out->copy_us[i], out->gemm_alone_ms[i], o->reps);
      bad = out->gemm_with_ms[i] < 0;
    }
    if (k.shape != NULL)
      printf("  %-18s %-16s split %d lanes %2d regs %3d local %d B | copy %9.2f us %6.1f GB/s | GEMM %+6.1f %%\n",
             out->cell, name, k.shape->split, k.shape->lanes, k.shape->regs, k.shape->local_bytes, out->copy_us[i],
             out->gbps[i], slowdown_pct(out, i));
    free(k.peer_state);
  }
  check_world_destroy(w);
  free(c);
  return bad;
}

/* ---- output ------------------------------------------------------------------------------------ */

static void write_outputs(const options *o, const cell_result *rs, size_t n) {
  char path[512];
  snprintf(path, sizeof path, "%s/overlap.csv", o->out);
  FILE *f = fopen(path, "w");
  if (f) {
    fprintf(f, "impl,direction,row_bytes,batch,layers,copy_us,copy_gbps,gemm_ms_alone,gemm_ms_with,gemm_slowdown_pct,"
               "regs\n");
    for (size_t r = 0; r < n; r++)
      for (int i = 0; i < NUM_IMPLS + o->nshapes; i++)
        if (rs[r].copy_us[i] > 0)
          fprintf(f, "%s,%s,%.3f,%.2f,%.3f,%.3f,%.2f,%d\n",
                  i < NUM_IMPLS ? impl_names[i] : o->shapes[i - NUM_IMPLS].name, rs[r].cell, rs[r].copy_us[i],
                  rs[r].gbps[i], rs[r].gemm_alone_ms[i], rs[r].gemm_with_ms[i], slowdown_pct(&rs[r], i),
                  rs[r].regs[i]);
    fclose(f);
  }
  snprintf(path, sizeof path, "%s/overlap.md", o->out);
  if ((f = fopen(path, "w")) == NULL) return;
  fprintf(f, "# bench_overlap: a host-link copy beside a bf16 GEMM loop (%s, sm_%d, kvjit %s)\n\n", env->name, env->sm,
          kvjit_version_string());
  fprintf(f, "cuBLAS bf16 GEMM %d x %d x %d, %d per loop on one stream; the copy back to back on another for 1.5x "
             "the loop. Slowdown: the loop's time beside the copy over its time alone. Default: kvjit's plan (at "
             "most %d CTAs reading host memory, %d writing it); all SMs: max_ctas = KVJIT_TRANSFER_KV_ALL_CTAS; SGLang: its "
             "hicache kernel at its default 2 blocks of 1024 threads.\n\n",
          o->gemm_n, o->gemm_n, o->gemm_n, o->gemms, KVJIT_TRANSFER_KV_HOST_CTAS, KVJIT_TRANSFER_KV_HOST_WRITE_CTAS);
  fprintf(f, "| direction,row B,batch | GEMM loop alone ms (before kvjit's) | default GB/s | all SMs GB/s | default / all SMs | "
             "SGLang q2 GB/s | GEMM slowdown: default | all SMs | SGLang q2 |\n"
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  double worst_ratio = 1e9;
  for (size_t r = 0; r < n; r++) {
    const cell_result *x = &rs[r];
    const double ratio = x->gbps[IMPL_KVJIT_ALL] > 0 ? x->gbps[IMPL_KVJIT] / x->gbps[IMPL_KVJIT_ALL] : 0;
    long long batch = 0;
    const char *last = strrchr(x->cell, ',');
    if (last) batch = atoll(last + 1);
    if (batch >= 1024 && ratio > 0 && ratio < worst_ratio) worst_ratio = ratio;
    fprintf(f, "| %s | %.2f | %.1f | %.1f | %.3f | %.1f | %+.1f %% | %+.1f %% | %+.1f %% |\n", x->cell,
            x->gemm_alone_ms[IMPL_KVJIT], x->gbps[IMPL_KVJIT], x->gbps[IMPL_KVJIT_ALL], ratio, x->gbps[IMPL_REF_Q2],
            slowdown_pct(x, IMPL_KVJIT), slowdown_pct(x, IMPL_KVJIT_ALL),
            x->copy_us[IMPL_REF_Q2] > 0 ? slowdown_pct(x, IMPL_REF_Q2) : 0.0);
  }
  if (worst_ratio < 1e9)
    fprintf(f, "\n- batches >= 1024: the default plan's worst cell reaches %.1f %% of the all-SM plan's bandwidth "
               "(target >= 97 %%): %s\n",
            100.0 * worst_ratio, worst_ratio >= 0.97 ? "met" : "NOT met");
  fclose(f);
}

/* ---- main -------------------------------------------------------------------------------------- */

static void usage(void) {
  fprintf(stderr, "usage: bench_overlap [--dirs d2h,h2d] [--rows LIST] [--batches LIST] [--gemm N] [--gemms N] "
                  "[--reps N] [--shapes C:T:CPL:PDL:STREAM|spin:C:T,...] [--out DIR]\n");
  exit(2);
}

/* The cell's direction, row and batch from its CSV columns ("d2h,2048,4096"). */
static int wanted(const options *o, const char *cell) {
  char dir[8];
  long long row = 0, batch = 0, layers = 1;
  if (sscanf(cell, "%7[^,],%lld,%lld,%lld", dir, &row, &batch, &layers) < 3 || layers != 1) return 0; /* one layer */
  const int d = strcmp(dir, "d2h") == 0 ? 0 : strcmp(dir, "h2d") == 0 ? 1 : -1;
  if (d < 0 || !o->dirs[d]) return 0;
  int r_ok = 0, b_ok = 0;
  for (size_t i = 0; i < o->nrows; i++) r_ok |= o->rows[i] == row;
  for (size_t i = 0; i < o->nbatches; i++) b_ok |= o->batches[i] == batch;
  return r_ok && b_ok;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  options o = {.dirs = {1, 1}, .rows = {2048, 4096}, .nrows = 2, .batches = {1024, 4096, 16384}, .nbatches = 3,
               .gemm_n = 8192, .gemms = 20, .reps = 5, .out = "."};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v == NULL) usage();
    i++;
    if (strcmp(a, "--dirs") == 0) {
      o.dirs[0] = strstr(v, "d2h") != NULL;
      o.dirs[1] = strstr(v, "h2d") != NULL;
    } else if (strcmp(a, "--rows") == 0) {
      if ((o.nrows = bench_parse_list(v, o.rows, MAX_LIST)) == 0) usage();
    } else if (strcmp(a, "--batches") == 0) {
      if ((o.nbatches = bench_parse_list(v, o.batches, MAX_LIST)) == 0) usage();
    } else if (strcmp(a, "--gemm") == 0 && atoi(v) >= 256 && atoi(v) <= 32768) {
      o.gemm_n = atoi(v);
    } else if (strcmp(a, "--gemms") == 0 && atoi(v) >= 0 && atoi(v) <= 1000 && *v >= '0' && *v <= '9') {
      o.gemms = atoi(v);
    } else if (strcmp(a, "--shapes") == 0) {
      char list[2048];
      snprintf(list, sizeof list, "%s", v);
      for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        if (o.nshapes == MAX_SHAPES || !overlap_shape_parse(tok, &o.shapes[o.nshapes++])) usage();
    } else if (strcmp(a, "--reps") == 0 && atoi(v) >= 1 && atoi(v) <= MAX_REPS) {
      o.reps = atoi(v);
    } else if (strcmp(a, "--out") == 0) {
      o.out = v;
    } else {
      usage();
    }
  }
  gpu_env e;
  int rc = gpu_setup(&e);
  if (rc != 0) return rc;
  env = &e;
  timing t;
  CU(env->drv->cuStreamCreate(&t.gemm_stream, CU_STREAM_NON_BLOCKING));
  CU(env->drv->cuStreamCreate(&t.copy_stream, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i < 4; i++) CU(env->drv->cuEventCreate(&t.e[i], CU_EVENT_DEFAULT));
  gemm g;
  memset(&g, 0, sizeof g);
  if (o.gemms > 0 && !gemm_open(&g, o.gemm_n, t.gemm_stream)) {
    printf("bench_overlap: no usable libcublas (dlopen libcublas.so.13/.12): skipped\n");
    gpu_teardown(&e);
    return 77;
  }
  kvjit_context *ctx = NULL;
  char dir[64];
  if (gpu_context_create(&ctx, dir, sizeof dir, "overlap", NULL) != 0) return 1;
  if (o.gemms > 0) {
    for (int j = 0; j < 3; j++) gemm_run(&g); /* cuBLAS picks and loads its kernel */
    CU(env->drv->cuStreamSynchronize(t.gemm_stream));
    const double alone_ms = time_gemm_loop(&t, &g, o.gemms, NULL, 0, 0, o.reps);
    printf("bench_overlap: %s, sm_%d; GEMM loop alone %.2f ms (%d x bf16 %d^3, %.0f TFLOP/s)\n", env->name, env->sm,
           alone_ms, o.gemms, o.gemm_n, 2.0 * o.gemm_n * (double)o.gemm_n * o.gemm_n * o.gemms / (alone_ms * 1e9));
  } else {
    printf("bench_overlap: %s, sm_%d; the copies alone (--gemms 0)\n", env->name, env->sm);
  }
  const check_op *op = transfer_op();
  cell_result *rs = calloc(op->bench_count(), sizeof *rs);
  size_t n = 0;
  int bad = 0;
  void *c = calloc(1, op->case_size);
  for (size_t i = 0; i < op->bench_count() && rs && c; i++) {
    char cell[64];
    op->bench_get(i, c, 1);
    op->bench_cell(c, cell, sizeof cell);
    if (!wanted(&o, cell)) continue;
    cell_result *r = &rs[n++];
    bad |= run_cell(&o, &t, &g, ctx, i, r);
    printf("%-18s copy GB/s: default %6.1f  all SMs %6.1f  SGLang q2 %6.1f | GEMM slowdown: default %+5.1f %%  all "
           "SMs %+5.1f %%  SGLang q2 %+5.1f %%\n",
           r->cell, r->gbps[IMPL_KVJIT], r->gbps[IMPL_KVJIT_ALL], r->gbps[IMPL_REF_Q2], slowdown_pct(r, IMPL_KVJIT),
           slowdown_pct(r, IMPL_KVJIT_ALL), r->copy_us[IMPL_REF_Q2] > 0 ? slowdown_pct(r, IMPL_REF_Q2) : 0.0);
  }
  free(c);
  write_outputs(&o, rs, n);
  free(rs);
  gemm_close(&g);
  gpu_context_destroy(ctx, dir);
  for (int i = 0; i < 4; i++) CU(env->drv->cuEventDestroy(t.e[i]));
  CU(env->drv->cuStreamDestroy(t.gemm_stream));
  CU(env->drv->cuStreamDestroy(t.copy_stream));
  gpu_teardown(&e);
  return bad;
}
