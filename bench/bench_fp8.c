/*
 * bench_fp8: quantize on store (bf16 K/V -> fp8 e4m3 cache, x / scale in the store kernel) against
 *  - the unfused sequence a runtime runs without it (SGLang: divide, cast, store): a division
 *    kernel (bf16 out, as `k / k_scale` in PyTorch), a cast kernel (bf16 -> fp8 with the same
 *    saturating conversion) and kvjit's plain store of the fp8 rows: three launches;
 *  - the plain copy that writes the same bytes (fp8 rows in, fp8 rows out);
 *  - the plain copy that reads the same bytes (bf16 rows in, bf16 rows out).
 * Per launch inside a CUDA graph of back-to-back launches, each launch on fresh rows and slots
 * (the inputs rotate through pools; the slots are consecutive slices of one random permutation),
 * median of several replays. One process, one GPU, one table: the peers side by side.
 *
 * usage: bench_fp8 [--quick] [--md FILE] [--csv FILE]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_PROGRAM "bench_fp8"
#include "bench_util.h"
#include "driver.h"
#include "gpu_driver.h"
#include "program.h"
#include "kvjit.h"

#define REPS 7
#define TARGET_US 3000.0
#define MAX_LAUNCHES 256
#define MIN_LAUNCHES 6

static const gpu_driver *drv;

static void die(const char *what, const char *detail) {
  fprintf(stderr, "bench_fp8: %s: %s\n", what, detail);
  exit(2);
}
#define KV(call)                                                                                                       \
  do {                                                                                                                 \
    kvjit_status kv_st_ = (call);                                                                                      \
    if (kv_st_ != KVJIT_OK) die(#call, kvjit_last_error());                                                            \
  } while (0)

/* The unfused peers' kernels: 8 bf16 per thread (16-byte loads), grid-stride. */
static const char *const helper_source =
    "typedef unsigned long long u64;\n"
    "struct __align__(16) v16 { unsigned a, b, c, d; };\n"
    "__device__ __forceinline__ float bf(unsigned h) { return __uint_as_float(h << 16); }\n"
    "__device__ __forceinline__ unsigned to_bf(float f) {\n"
    "  unsigned short r; asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(r) : \"f\"(f)); return r; }\n"
    "extern \"C\" __global__ void bench_fill(unsigned *w, u64 n, u64 seed) {\n"
    "  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {\n"
    "    u64 x = seed * 0x100000001b3ull + i + 0x9e3779b97f4a7c15ull;\n"
    "    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull; x = (x ^ (x >> 27)) * 0x94d049bb133111ebull; x ^= x >> 31;\n"
    "    unsigned r = (unsigned)x; \n"
    "    // bf16 pairs with exponents near 1.0 (no NaN/Inf floods): sign | exp 120..135 | mantissa\n"
    "    unsigned lo = (r & 0x807f) | ((120 + ((r >> 7) & 15)) << 7), hi = ((r >> 16) & 0x807f) | ((120 + ((r >> 23) & 15)) << 7);\n"
    "    w[i] = lo | hi << 16; } }\n"
    "// y = x / s[0], bf16 in, bf16 out (PyTorch's `k / k_scale` on a bf16 tensor)\n"
    "extern \"C\" __global__ void bench_div(const v16 *x, v16 *y, const float *s, u64 n16) {\n"
    "  const float sc = *s;\n"
    "  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n16; i += (u64)gridDim.x * blockDim.x) {\n"
    "    v16 in = x[i], out; unsigned *pi = &in.a, *po = &out.a;\n"
    "    for (int j = 0; j < 4; j++) po[j] = to_bf(bf(pi[j] & 0xffff) / sc) | to_bf(bf(pi[j] >> 16) / sc) << 16;\n"
    "    y[i] = out; } }\n"
    "// bf16 -> fp8 e4m3 (saturating, nearest even), 8 per thread\n"
    "extern \"C\" __global__ void bench_cast(const v16 *x, u64 *y, u64 n16) {\n"
    "  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n16; i += (u64)gridDim.x * blockDim.x) {\n"
    "    v16 in = x[i]; unsigned *pi = &in.a; u64 out = 0;\n"
    "    for (int j = 0; j < 4; j++) { unsigned short r;\n"
    "      asm(\"cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\" : \"=h\"(r) : \"f\"(bf(pi[j] >> 16)), \"f\"(bf(pi[j] & 0xffff)));\n"
    "      out |= (u64)r << (16 * j); }\n"
    "    y[i] = out; } }\n";
static const char *const helper_names[] = {"bench_fill", "bench_div", "bench_cast"};

typedef struct bench {
  kvjit_context *ctx;
  CUstream stream;
  CUevent ev[REPS + 1];
  const kvjit_kernel *fill, *div, *cast;
  int sm;
  CUdeviceptr src_pool;   /* bf16 rows, K then V halves */
  CUdeviceptr fp8_pool;   /* fp8 rows (the plain fp8 copy's input) */
  CUdeviceptr tmp_bf16, tmp_fp8; /* the unfused sequence's intermediates (K and V) */
  CUdeviceptr k_cache, v_cache;  /* sized for the bf16 plain copy; the fp8 stores use the front */
  CUdeviceptr idx, scale;
  size_t pool_bytes, cache_bytes, tmp_bytes;
  int64_t idx_count;
} bench;

static void launch(const bench *b, const kvjit_kernel *k, unsigned blocks, void **args) {
  kvjit_launch_config cfg = KVJIT_LAUNCH_CONFIG_INIT;
  cfg.grid[0] = blocks;
  cfg.block[0] = 256;
  cfg.stream = b->stream;
  KV(kvjit_launch(k, &cfg, args));
}

static unsigned blocks_for(uint64_t items) {
  uint64_t blocks = (items + 255) / 256;
  return blocks > 132 * 16 ? 132 * 16 : blocks ? (unsigned)blocks : 1;
}

typedef enum impl { FUSED_TENSOR, FUSED_HEAD, UNFUSED, PLAIN_FP8, PLAIN_BF16, NUM_IMPLS } impl;
static const char *const impl_names[NUM_IMPLS] = {"fused/tensor", "fused/head", "unfused x3", "plain fp8",
                                                  "plain bf16"};

typedef struct cell {
  int64_t elems, batch;
  int launches;
  int64_t src_rows; /* rows in the rotating source pool */
} cell;

/* Launch number j of implementation @p im for @p c (K and V). */
static void run_one(const bench *b, impl im, const cell *c, int j) {
  int64_t first_row = ((int64_t)j * c->batch) % (c->src_rows - c->batch + 1);
  int64_t bf_row = c->elems * 2, fp8_row = c->elems;
  CUdeviceptr k_src = b->src_pool + (CUdeviceptr)(first_row * bf_row);
  CUdeviceptr v_src = k_src + b->pool_bytes / 2;
  CUdeviceptr idx = b->idx + (CUdeviceptr)((int64_t)j * c->batch * 8);
  kvjit_store_kv_args a = KVJIT_STORE_KV_ARGS_INIT;
  a.indices = (const void *)(uintptr_t)idx;
  a.batch = c->batch;
  a.num_slots = (int64_t)(b->cache_bytes / (size_t)bf_row);
  a.stream = b->stream;
  a.k_cache = (void *)(uintptr_t)b->k_cache;
  a.v_cache = (void *)(uintptr_t)b->v_cache;
  switch (im) {
  case FUSED_TENSOR:
  case FUSED_HEAD:
    a.k = (const void *)(uintptr_t)k_src;
    a.v = (const void *)(uintptr_t)v_src;
    a.k_row_bytes = a.v_row_bytes = bf_row;
    a.dtype = KVJIT_DTYPE_BF16;
    a.cache_dtype = KVJIT_DTYPE_FP8_E4M3;
    a.scale_kind = im == FUSED_TENSOR ? KVJIT_SCALE_PER_TENSOR : KVJIT_SCALE_PER_HEAD;
    a.num_heads = im == FUSED_HEAD ? c->elems / 64 : 0;
    a.k_scale = a.v_scale = (const float *)(uintptr_t)b->scale;
    KV(kvjit_store_kv_cache(b->ctx, &a));
    break;
  case UNFUSED: {
    uint64_t n16 = (uint64_t)(c->batch * bf_row / 16);
    CUdeviceptr srcs[2] = {k_src, v_src};
    for (int s = 0; s < 2; s++) {
      CUdeviceptr bf = b->tmp_bf16 + (CUdeviceptr)s * b->tmp_bytes, f8 = b->tmp_fp8 + (CUdeviceptr)s * b->tmp_bytes;
      CUdeviceptr scale = b->scale;
      void *dargs[] = {&srcs[s], &bf, &scale, &n16};
      launch(b, b->div, blocks_for(n16), dargs);
      void *cargs[] = {&bf, &f8, &n16};
      launch(b, b->cast, blocks_for(n16), cargs);
    }
    a.k = (const void *)(uintptr_t)b->tmp_fp8;
    a.v = (const void *)(uintptr_t)(b->tmp_fp8 + b->tmp_bytes);
    a.k_row_bytes = a.v_row_bytes = fp8_row;
    KV(kvjit_store_kv_cache(b->ctx, &a));
    break;
  }
  case PLAIN_FP8:
    a.k = (const void *)(uintptr_t)(b->fp8_pool + (CUdeviceptr)(first_row * fp8_row));
    a.v = (const void *)(uintptr_t)(b->fp8_pool + b->pool_bytes / 4 + (CUdeviceptr)(first_row * fp8_row));
    a.k_row_bytes = a.v_row_bytes = fp8_row;
    KV(kvjit_store_kv_cache(b->ctx, &a));
    break;
  case PLAIN_BF16:
    a.k = (const void *)(uintptr_t)k_src;
    a.v = (const void *)(uintptr_t)v_src;
    a.k_row_bytes = a.v_row_bytes = bf_row;
    KV(kvjit_store_kv_cache(b->ctx, &a));
    break;
  default:
    break;
  }
}

/* Median microseconds per launch (per sequence for UNFUSED) in a graph of c->launches. */
static double time_graph(const bench *b, impl im, const cell *c) {
  CUgraph graph;
  CUgraphExec exec;
  CU(drv->cuStreamBeginCapture(b->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  for (int j = 0; j < c->launches; j++) run_one(b, im, c, j);
  CU(drv->cuStreamEndCapture(b->stream, &graph));
  CU(drv->cuGraphInstantiateWithFlags(&exec, graph, 0));
  CU(drv->cuGraphLaunch(exec, b->stream));
  CU(drv->cuEventRecord(b->ev[0], b->stream));
  for (int r = 0; r < REPS; r++) {
    CU(drv->cuGraphLaunch(exec, b->stream));
    CU(drv->cuEventRecord(b->ev[r + 1], b->stream));
  }
  CU(drv->cuEventSynchronize(b->ev[REPS]));
  double us[REPS];
  for (int r = 0; r < REPS; r++) {
    float ms;
    CU(drv->cuEventElapsedTime(&ms, b->ev[r], b->ev[r + 1]));
    us[r] = (double)ms * 1000.0 / c->launches;
  }
  CU(drv->cuGraphExecDestroy(exec));
  CU(drv->cuGraphDestroy(graph));
  return bench_summarize(us, REPS).median;
}

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

int main(int argc, char **argv) {
  int quick = 0;
  const char *md_path = NULL, *csv_path = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      quick = 1;
    } else if (strcmp(argv[i], "--md") == 0 && i + 1 < argc) {
      md_path = argv[++i];
    } else if (strcmp(argv[i], "--csv") == 0 && i + 1 < argc) {
      csv_path = argv[++i];
    } else {
      fprintf(stderr, "usage: bench_fp8 [--quick] [--md FILE] [--csv FILE]\n");
      return 2;
    }
  }
  kvjit_status st = gpu_driver_get(&drv);
  if (st != KVJIT_OK) {
    fprintf(stderr, "bench_fp8: no driver (%s): nothing to measure\n", gpu_driver_error());
    return 77;
  }
  bench b;
  memset(&b, 0, sizeof b);
  CUdevice dev;
  CUcontext cuctx;
  CU(drv->cuDeviceGet(&dev, 0));
  CU(drv->cuDevicePrimaryCtxRetain(&cuctx, dev));
  CU(drv->cuCtxSetCurrent(cuctx));
  char gpu[128] = "?";
  KV(kvjit_device_info(0, gpu, sizeof gpu, &b.sm));
  KV(kvjit_context_create(&b.ctx, NULL));
  CU(drv->cuStreamCreate(&b.stream, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i <= REPS; i++) CU(drv->cuEventCreate(&b.ev[i], CU_EVENT_DEFAULT));

  const kvjit_kernel **helpers[] = {&b.fill, &b.div, &b.cast};
  kvjit_program_desc d = KVJIT_PROGRAM_DESC_INIT;
  d.name = "bench_fp8_helpers.cu";
  d.source = helper_source;
  d.kernels = helper_names;
  d.num_kernels = 3;
  kvjit_program *prog;
  st = kvjit_program_get(b.ctx, &prog, NULL, &d);
  if (st != KVJIT_OK) die("helpers", prog ? kvjit_program_log(prog) : kvjit_last_error());
  for (int i = 0; i < 3; i++) {
    kvjit_kernel *k;
    KV(kvjit_program_kernel(prog, &k, helper_names[i], 0));
    *helpers[i] = k;
  }

  static const int64_t all_elems[] = {64, 128, 512, 1024, 2048, 4096}; /* bf16 rows of 128 .. 8192 B */
  static const int64_t all_batches[] = {1, 16, 256, 4096, 65536};
  size_t n_elems = quick ? 3 : 6, n_batches = quick ? 3 : 5;
  static const int64_t quick_elems[] = {64, 1024, 4096}, quick_batches[] = {1, 16, 65536};
  const int64_t *elems = quick ? quick_elems : all_elems, *batches = quick ? quick_batches : all_batches;

  /* Pools: 1 GiB of bf16 source (K half, V half), 512 MiB of fp8 rows, caches for 4 GiB of bf16
   * slots each way (the fp8 stores use the first half of them), intermediates for the largest cell. */
  b.pool_bytes = (size_t)1 << 30;
  b.cache_bytes = (size_t)2 << 30;
  int64_t max_batch = batches[n_batches - 1], max_elems = elems[n_elems - 1];
  b.tmp_bytes = (size_t)(max_batch * max_elems * 2);
  CU(drv->cuMemAlloc(&b.src_pool, b.pool_bytes));
  CU(drv->cuMemAlloc(&b.fp8_pool, b.pool_bytes / 2));
  CU(drv->cuMemAlloc(&b.k_cache, b.cache_bytes));
  CU(drv->cuMemAlloc(&b.v_cache, b.cache_bytes));
  CU(drv->cuMemAlloc(&b.tmp_bf16, 2 * b.tmp_bytes));
  CU(drv->cuMemAlloc(&b.tmp_fp8, 2 * b.tmp_bytes));
  CU(drv->cuMemAlloc(&b.scale, 4 * 64));
  float scales[64];
  for (int i = 0; i < 64; i++) scales[i] = 0.02f + 0.001f * (float)i;
  CU(drv->cuMemcpyHtoD(b.scale, scales, sizeof scales));
  CUdeviceptr fills[] = {b.src_pool, b.fp8_pool, b.k_cache, b.v_cache};
  size_t fill_bytes[] = {b.pool_bytes, b.pool_bytes / 2, b.cache_bytes, b.cache_bytes};
  for (int i = 0; i < 4; i++) {
    uint64_t words = fill_bytes[i] / 4, seed = (uint64_t)i + 1;
    void *args[] = {&fills[i], &words, &seed};
    launch(&b, b.fill, blocks_for(words), args);
  }
  /* Slot ids: one random permutation prefix per row size; the largest cell needs batch x launches. */
  b.idx_count = (int64_t)1 << 22;
  int64_t *idx = malloc(sizeof(int64_t) * (size_t)b.idx_count);
  if (idx == NULL) die("malloc", "indices");
  CU(drv->cuMemAlloc(&b.idx, sizeof(int64_t) * (size_t)b.idx_count));
  CU(drv->cuCtxSynchronize());

  FILE *csv = csv_path ? fopen(csv_path, "w") : NULL;
  FILE *md = md_path ? fopen(md_path, "w") : NULL;
  if (csv) fprintf(csv, "elems,bf16_row_bytes,batch,impl,us_per_store\n");
  if (md) {
    fprintf(md, "# Quantize on store: fused vs unfused (bench_fp8, %s, sm_%d)\n\n", gpu, b.sm);
    fprintf(md, "bf16 K and V rows -> fp8 e4m3 caches, x / scale; per launch in a CUDA graph (µs, median of %d "
                "replays). `unfused` = divide + cast + plain store (5 launches for K and V). `plain fp8` writes the "
                "same bytes, `plain bf16` reads the same bytes. TB/s counts bytes read + written.\n\n", REPS);
    fprintf(md, "| bf16 row B | batch | fused/tensor | fused/head | unfused | plain fp8 | plain bf16 | fused / plain fp8 "
                "| fused / plain bf16 | unfused / fused | fused TB/s | plain fp8 TB/s |\n");
    fprintf(md, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  printf("%8s %7s %12s %12s %12s %12s %12s %8s %8s %8s\n", "row B", "batch", impl_names[0], impl_names[1],
         impl_names[2], impl_names[3], impl_names[4], "f/p8", "f/p16", "unf/f");
  for (size_t e = 0; e < n_elems; e++) {
    int64_t bf_row = elems[e] * 2;
    int64_t slots = (int64_t)(b.cache_bytes / 2 / (size_t)bf_row); /* rows the fp8 and bf16 stores both fit */
    for (int64_t i = 0; i < b.idx_count; i++) idx[i] = i < slots ? i : -1;
    /* Fisher-Yates over the slots, keeping a prefix of idx_count. */
    int64_t n = slots < b.idx_count ? slots : b.idx_count;
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)slots);
    if (perm == NULL) die("malloc", "permutation");
    for (int64_t i = 0; i < slots; i++) perm[i] = i;
    for (int64_t i = slots - 1; i > 0; i--) {
      int64_t j = (int64_t)(mix((uint64_t)i * 7919u + (uint64_t)bf_row) % (uint64_t)(i + 1));
      int64_t t = perm[i];
      perm[i] = perm[j];
      perm[j] = t;
    }
    for (int64_t i = 0; i < n; i++) idx[i] = perm[i];
    free(perm);
    CU(drv->cuMemcpyHtoD(b.idx, idx, sizeof(int64_t) * (size_t)n));
    for (size_t bi = 0; bi < n_batches; bi++) {
      cell c = {elems[e], batches[bi], MIN_LAUNCHES, (int64_t)(b.pool_bytes / 2 / (size_t)bf_row)};
      if (c.batch > c.src_rows || c.batch * 2 > n) continue;
      /* Launches: ~TARGET_US of work per graph, bounded by the distinct slots and the pools. */
      double est_us = 1.0 + (double)(c.batch * bf_row * 3) / 3.5e6;
      int launches = (int)(TARGET_US / est_us);
      if (launches > MAX_LAUNCHES) launches = MAX_LAUNCHES;
      if (launches < MIN_LAUNCHES) launches = MIN_LAUNCHES;
      while (launches > 1 && c.batch * launches > n) launches--;
      c.launches = launches;
      double us[NUM_IMPLS];
      for (int im = 0; im < NUM_IMPLS; im++) {
        run_one(&b, (impl)im, &c, 0); /* load the variants outside the capture */
        CU(drv->cuCtxSynchronize());
        us[im] = time_graph(&b, (impl)im, &c);
        if (csv) fprintf(csv, "%lld,%lld,%lld,%s,%.4f\n", (long long)c.elems, (long long)bf_row, (long long)c.batch,
                         impl_names[im], us[im]);
      }
      double bytes_fused = (double)(c.batch * c.elems * 3 * 2), bytes_fp8 = (double)(c.batch * c.elems * 2 * 2);
      printf("%8lld %7lld %12.2f %12.2f %12.2f %12.2f %12.2f %8.2f %8.2f %8.2f\n", (long long)bf_row,
             (long long)c.batch, us[0], us[1], us[2], us[3], us[4], us[0] / us[3], us[0] / us[4], us[2] / us[0]);
      if (md) {
        fprintf(md, "| %lld | %lld | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
                (long long)bf_row, (long long)c.batch, us[0], us[1], us[2], us[3], us[4], us[0] / us[3], us[0] / us[4],
                us[2] / us[0], bytes_fused / us[0] * 1e-6, bytes_fp8 / us[3] * 1e-6);
      }
    }
  }
  if (csv) fclose(csv);
  if (md) fclose(md);
  free(idx);
  kvjit_context_destroy(b.ctx);
  return 0;
}
