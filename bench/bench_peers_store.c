/*
 * store_kv_cache's peers beyond the reference (bench_peers.c's table), on the cell's own buffers:
 *  - kvjit with each fixed split (1..16) and its automatic choice timed again (bench_store's
 *    fixed-split pass: auto/best compares with a timing taken next to the fixed ones);
 *  - at the largest batch (int64, PDL on), the bounds: kvjit's own store with consecutive slots
 *    (where the rows land is the only difference from the cell) and two cuMemcpyDtoDAsync of the
 *    same bytes; both write consecutive blocks that rotate through the cell's caches;
 *  - quantizing cells (per-tensor scale): the unfused sequence a runtime runs without kvjit's fused
 *    store (a division kernel with bf16 output as `k / k_scale`, a cast to fp8, kvjit's plain store
 *    of the fp8 rows: 5 launches for K and V), the plain copy that writes the same bytes (fp8 rows
 *    in) and the one that reads the same bytes (bf16 rows in, into bf16 caches of its own).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_peers.h"
#include "check/check_store.h"

#define LARGEST_BATCH 65536

typedef struct store_peer {
  kvjit_context *ctx;
  int split;
  CUdeviceptr buf[2]; /* consecutive ids | the fp8 rows | intermediates | bf16 caches */
  size_t half;        /* bytes of each half of buf[1] (K, then V) */
  const kvjit_kernel *div, *cast;
} store_peer;

static int quantizing(const store_case *c) { return c->cache_dtype != KVJIT_DTYPE_BYTES; }
/* The peers stand beside the flat cells (a laid-out cache's have vLLM's kernels: bench_layouts.py). */
static int flat(const store_case *c) { return !c->layout; }

static store_peer *peer_new(kvjit_context *ctx) {
  store_peer *p = calloc(1, sizeof *p);
  if (p == NULL) abort();
  p->ctx = ctx;
  return p;
}

void store_peer_release(void *state) {
  store_peer *p = state;
  if (p == NULL) return;
  for (int i = 0; i < 2; i++) gpu_free(p->buf[i]);
  free(p);
}

static void *prepared_or_null(store_peer *p, const kvjit_store_kv_args *a) {
  if (kvjit_store_kv_cache_prepare(p->ctx, a) == KVJIT_OK) return p;
  fprintf(stderr, "bench_ops: a peer's store: %s\n", kvjit_last_error());
  store_peer_release(p);
  return NULL;
}

static int set_of(const check_world *w, const check_launch *l) { return w->sets > 1 ? l->step % w->sets : 0; }

/* ---- fixed splits and the automatic choice again (arg 0) ------------------------------------------- */

int store_peer_split(const bench_peer *self, const void *cv) {
  const store_case *c = cv;
  return flat(c) && !quantizing(c) && (self->arg == 0 || c->k_row % self->arg == 0);
}

void *store_peer_split_prepare(const bench_peer *self, kvjit_context *ctx, const void *c, const check_world *w) {
  store_peer *p = peer_new(ctx);
  p->split = self->arg;
  kvjit_store_kv_args a;
  check_launch l = {((const check_common *)c)->pdl, NULL, 0, 1};
  check_store_args(c, w, &l, &a);
  a.split = p->split;
  /* A fixed split kvjit does not offer for this row is left out, not a failure. */
  if (kvjit_store_kv_cache_prepare(ctx, &a) != KVJIT_OK) {
    store_peer_release(p);
    return NULL;
  }
  return p;
}

kvjit_status store_peer_split_launch(void *state, const void *c, const check_world *w, const check_launch *l) {
  const store_peer *p = state;
  kvjit_store_kv_args a;
  check_store_args(c, w, l, &a);
  a.split = p->split;
  return kvjit_store_kv_cache(p->ctx, &a);
}

/* ---- the bounds at the largest batch: consecutive slots, plain copies ------------------------------ */

int store_peer_largest(const bench_peer *self, const void *cv) {
  (void)self;
  const store_case *c = cv;
  return flat(c) && !quantizing(c) && !c->hot_inputs && c->batch == LARGEST_BATCH && c->index_type == KVJIT_INDEX_INT64 &&
         c->common.pdl == KVJIT_PDL_ON && c->v_row == c->k_row;
}

/* Launch @p l's consecutive block of slots: block j % (slots / batch) of each cache. */
static void consecutive_args(const store_peer *p, const void *c, const check_world *w, const check_launch *l,
                             kvjit_store_kv_args *a) {
  check_store_args(c, w, l, a);
  const int64_t blocks = a->num_slots / a->batch, block = l->step % (blocks > 0 ? blocks : 1);
  a->k_cache = (char *)a->k_cache + block * a->batch * a->k_cache_stride;
  a->v_cache = (char *)a->v_cache + block * a->batch * a->v_cache_stride;
  a->num_slots = a->batch;
  a->indices = (const void *)(uintptr_t)p->buf[0];
  a->index_type = KVJIT_INDEX_INT64;
  a->index_stride = 1;
  a->skip_slot = KVJIT_NO_SKIP_SLOT;
}

void *store_peer_consecutive_prepare(const bench_peer *self, kvjit_context *ctx, const void *c,
                                     const check_world *w) {
  (void)self;
  const store_case *sc = c;
  store_peer *p = peer_new(ctx);
  int64_t *seq = malloc(sizeof(int64_t) * (size_t)sc->batch);
  if (seq == NULL) abort();
  for (int64_t i = 0; i < sc->batch; i++) seq[i] = i;
  p->buf[0] = gpu_alloc(sizeof(int64_t) * (size_t)sc->batch);
  gpu_upload(p->buf[0], seq, sizeof(int64_t) * (size_t)sc->batch);
  free(seq);
  kvjit_store_kv_args a;
  check_launch l = {sc->common.pdl, NULL, 0, 1};
  consecutive_args(p, c, w, &l, &a);
  return prepared_or_null(p, &a);
}

kvjit_status store_peer_consecutive_launch(void *state, const void *c, const check_world *w,
                                           const check_launch *l) {
  const store_peer *p = state;
  kvjit_store_kv_args a;
  consecutive_args(p, c, w, l, &a);
  return kvjit_store_kv_cache(p->ctx, &a);
}

/* The same bytes as two plain copies (K and V) into the same consecutive blocks. */
kvjit_status store_peer_copy_launch(void *state, const void *c, const check_world *w, const check_launch *l) {
  const store_peer *p = state;
  kvjit_store_kv_args a;
  consecutive_args(p, c, w, l, &a);
  const gpu_driver *drv = gpu_current()->drv;
  const size_t bytes = (size_t)(a.batch * a.k_row_bytes);
  CUstream s = (CUstream)l->stream;
  if (drv->cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)a.k_cache, (CUdeviceptr)(uintptr_t)a.k, bytes, s) != CUDA_SUCCESS ||
      drv->cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)a.v_cache, (CUdeviceptr)(uintptr_t)a.v, bytes, s) != CUDA_SUCCESS)
    return KVJIT_ERR_CUDA;
  return KVJIT_OK;
}

/* ---- quantizing cells: unfused, and the plain copies of the same bytes ---------------------------- */

int store_peer_fp8(const bench_peer *self, const void *cv) {
  (void)self;
  const store_case *c = cv;
  return flat(c) && quantizing(c) && c->dtype == KVJIT_DTYPE_BF16 && c->scale == KVJIT_SCALE_PER_TENSOR && c->v_row == c->k_row;
}

/* 8 bf16 per thread (16-byte loads), grid-stride; the cast is the saturating nearest-even one of
 * kvjit's fp8 path. */
static const char *const unfused_source =
    "typedef unsigned long long u64;\n"
    "struct __align__(16) v16 { unsigned a, b, c, d; };\n"
    "__device__ __forceinline__ float bf(unsigned h) { return __uint_as_float(h << 16); }\n"
    "__device__ __forceinline__ unsigned to_bf(float f) {\n"
    "  unsigned short r; asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(r) : \"f\"(f)); return r; }\n"
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

/* A plain byte copy: no conversion, no scales (what the peers' stores of ready rows are). */
static void plain_copy(kvjit_store_kv_args *a) {
  a->dtype = a->cache_dtype = KVJIT_DTYPE_BYTES;
  a->scale_kind = KVJIT_SCALE_NONE;
  a->num_heads = 0;
  a->k_scale = a->v_scale = NULL;
}

/* The plain store of fp8 rows at @p k / @p v into the cell's caches, ids and stream. */
static void fp8_rows_args(const void *c, const check_world *w, const check_launch *l, CUdeviceptr k, CUdeviceptr v,
                          kvjit_store_kv_args *a) {
  check_store_args(c, w, l, a);
  const int64_t row = a->k_cache_stride; /* one fp8 row: the cache's slot */
  a->k = (const void *)(uintptr_t)k;
  a->v = (const void *)(uintptr_t)v;
  a->k_row_bytes = a->v_row_bytes = a->k_stride = a->v_stride = row;
  plain_copy(a);
}

void *store_peer_unfused_prepare(const bench_peer *self, kvjit_context *ctx, const void *c, const check_world *w) {
  (void)self;
  const store_case *sc = c;
  store_peer *p = peer_new(ctx);
  const char *names[] = {"bench_div", "bench_cast"};
  const kvjit_kernel *k[2];
  if (!bench_peer_kernels(ctx, "bench_unfused.cu", unfused_source, names, 2, k)) {
    store_peer_release(p);
    return NULL;
  }
  p->div = k[0];
  p->cast = k[1];
  /* buf[0]: the bf16 quotients of K then V; buf[1]: their fp8 casts. */
  p->half = (size_t)(sc->batch * sc->k_row);
  p->buf[0] = gpu_alloc(2 * p->half);
  p->buf[1] = gpu_alloc(p->half);
  kvjit_store_kv_args a;
  check_launch l = {sc->common.pdl, NULL, 0, 1};
  fp8_rows_args(c, w, &l, p->buf[1], p->buf[1] + p->half / 2, &a);
  return prepared_or_null(p, &a);
}

static kvjit_status launch_kernel(const kvjit_kernel *k, uint64_t n16, void **args, struct CUstream_st *stream) {
  uint64_t blocks = (n16 + 255) / 256;
  kvjit_launch_config cfg = KVJIT_LAUNCH_CONFIG_INIT;
  cfg.grid[0] = blocks > 132 * 16 ? 132 * 16 : blocks ? (unsigned)blocks : 1;
  cfg.block[0] = 256;
  cfg.stream = stream;
  return kvjit_launch(k, &cfg, args);
}

kvjit_status store_peer_unfused_launch(void *state, const void *c, const check_world *w, const check_launch *l) {
  const store_peer *p = state;
  kvjit_store_kv_args a;
  check_store_args(c, w, l, &a);
  uint64_t n16 = p->half / 16;
  const void *srcs[2] = {a.k, a.v};
  kvjit_status st = KVJIT_OK;
  for (int t = 0; t < 2 && st == KVJIT_OK; t++) {
    CUdeviceptr x = (CUdeviceptr)(uintptr_t)srcs[t], bf = p->buf[0] + t * p->half,
                f8 = p->buf[1] + t * (p->half / 2), scale = (CUdeviceptr)(uintptr_t)(t ? a.v_scale : a.k_scale);
    void *dargs[] = {&x, &bf, &scale, &n16};
    void *cargs[] = {&bf, &f8, &n16};
    st = launch_kernel(p->div, n16, dargs, l->stream);
    if (st == KVJIT_OK) st = launch_kernel(p->cast, n16, cargs, l->stream);
  }
  if (st != KVJIT_OK) return st;
  fp8_rows_args(c, w, l, p->buf[1], p->buf[1] + p->half / 2, &a);
  return kvjit_store_kv_cache(p->ctx, &a);
}

/* fp8 rows in (K then V of every input set): the plain copy writing the same bytes. */
void *store_peer_plain_fp8_prepare(const bench_peer *self, kvjit_context *ctx, const void *c, const check_world *w) {
  (void)self;
  const store_case *sc = c;
  store_peer *p = peer_new(ctx);
  /* K's rows at the front of a pool, V's at the front of its second half (bench_fp8's fp8 pool). */
  const size_t rows = (size_t)(sc->batch * sc->k_row / 2) * (size_t)w->sets;
  p->half = rows > CHECK_STORE_INPUT_POOL ? rows : CHECK_STORE_INPUT_POOL;
  p->buf[1] = gpu_alloc(2 * p->half);
  const gpu_driver *drv = gpu_current()->drv;
  if (drv->cuMemsetD8(p->buf[1], 0x3c, 2 * p->half) != CUDA_SUCCESS) abort();
  kvjit_store_kv_args a;
  check_launch l = {sc->common.pdl, NULL, 0, 1};
  fp8_rows_args(c, w, &l, p->buf[1], p->buf[1] + p->half, &a);
  return prepared_or_null(p, &a);
}

kvjit_status store_peer_plain_fp8_launch(void *state, const void *c, const check_world *w, const check_launch *l) {
  const store_peer *p = state;
  const store_case *sc = c;
  const size_t off = (size_t)set_of(w, l) * (size_t)(sc->batch * sc->k_row / 2);
  kvjit_store_kv_args a;
  fp8_rows_args(c, w, l, p->buf[1] + off, p->buf[1] + p->half + off, &a);
  return kvjit_store_kv_cache(p->ctx, &a);
}

/* bf16 rows in and out, into bf16 caches of the cell's slots: the plain copy reading the same bytes. */
static void bf16_args(const store_peer *p, const void *c, const check_world *w, const check_launch *l,
                      kvjit_store_kv_args *a) {
  check_store_args(c, w, l, a);
  a->k_cache = (void *)(uintptr_t)p->buf[1];
  a->v_cache = (void *)(uintptr_t)(p->buf[1] + p->half);
  a->k_cache_stride = a->v_cache_stride = a->k_row_bytes;
  plain_copy(a);
}

void *store_peer_plain_bf16_prepare(const bench_peer *self, kvjit_context *ctx, const void *c, const check_world *w) {
  (void)self;
  const store_case *sc = c;
  store_peer *p = peer_new(ctx);
  kvjit_store_kv_args a;
  check_launch l = {sc->common.pdl, NULL, 0, 1};
  check_store_args(c, w, &l, &a);
  /* K's cache, then V's: the cell's slots at the front of the benchmarks' cache size. */
  const size_t rows = (size_t)(a.num_slots * sc->k_row);
  p->half = rows > CHECK_STORE_CACHE_POOL ? rows : CHECK_STORE_CACHE_POOL;
  p->buf[1] = gpu_alloc(2 * p->half);
  bf16_args(p, c, w, &l, &a);
  return prepared_or_null(p, &a);
}

kvjit_status store_peer_plain_bf16_launch(void *state, const void *c, const check_world *w, const check_launch *l) {
  const store_peer *p = state;
  kvjit_store_kv_args a;
  bf16_args(p, c, w, l, &a);
  return kvjit_store_kv_cache(p->ctx, &a);
}
