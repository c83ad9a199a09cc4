/*
 * The bench driver's peers: the references reimplemented from SGLang's algorithms (ref_store_kv.cuh,
 * ref_transfer_kv.cuh), compiled through kvjit's generic loader and launched on the very arguments
 * kvjit's call gets for the same launch (check_store_args(), check_transfer_args()); and the table
 * of every peer (the others: bench_peers_store.c, bench_peers_transfer.c).
 */
#include "bench_peers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "check/check_store.h"
#include "check/check_transfer.h"

/* The standard kvjit's own op is compiled with, for the references too. */
static const char *const nvrtc_options[] = {"-std=c++17"};

int bench_peer_kernels(kvjit_context *ctx, const char *name, const char *source, const char **kernels, int count,
                       const kvjit_kernel **out) {
  kvjit_program_desc d = KVJIT_PROGRAM_DESC_INIT;
  d.name = name;
  d.source = source;
  d.options = nvrtc_options;
  d.num_options = 1;
  d.kernels = kernels;
  d.num_kernels = (size_t)count;
  kvjit_program *prog = NULL;
  kvjit_status st = kvjit_program_get(ctx, &prog, NULL, &d);
  if (st != KVJIT_OK) {
    fprintf(stderr, "bench_ops: %s: %s\n%s\n", name, kvjit_last_error(), prog ? kvjit_program_log(prog) : "");
    return 0;
  }
  for (int i = 0; i < count; i++) {
    kvjit_kernel *k = NULL;
    if (kvjit_program_kernel(prog, &k, kernels[i], 0) != KVJIT_OK) return 0;
    out[i] = k;
  }
  return 1;
}

/* ---- store_kv_cache: SGLang's JIT store_kvcache, reimplemented --------------------------------------- */

/* Mirrors struct RefStoreKVParams of ref_store_kv.cuh. */
typedef struct ref_store_params {
  const void *k, *v;
  void *k_cache, *v_cache;
  const void *indices;
  int64_t stride_k_bytes, stride_v_bytes, stride_cache_bytes, stride_indices;
  uint32_t batch_size;
  int64_t size_limit;
} ref_store_params;

typedef struct store_state {
  const kvjit_kernel *kernel;
  int split;
} store_state;

static int store_applies(const bench_peer *self, const void *cv) {
  (void)self;
  const store_case *c = cv;
  return c->cache_dtype == KVJIT_DTYPE_BYTES && c->v_row == c->k_row && c->k_row % 4 == 0 && !c->layout;
}

static void *store_prepare(const bench_peer *self, kvjit_context *ctx, const void *c, const check_world *w) {
  (void)self;
  kvjit_store_kv_args a;
  check_launch l = {KVJIT_PDL_AUTO, NULL, 0, 0};
  check_store_args(c, w, &l, &a);
  const store_case *sc = c;
  /* The reference copies bytes, K and V rows of one size, a multiple of 4 B, into flat caches. */
  if (a.dtype != KVJIT_DTYPE_BYTES || a.v == NULL || a.v_row_bytes != a.k_row_bytes || a.k_row_bytes % 4 ||
      a.k_cache_layout != NULL)
    return NULL;
  store_state *s = calloc(1, sizeof *s);
  if (s == NULL) abort();
  s->split = bench_ref_split(a.k_row_bytes);
  char name[96];
  bench_ref_kernel_name(name, sizeof name, a.k_row_bytes, s->split, sc->common.pdl != KVJIT_PDL_OFF,
                        a.index_type == KVJIT_INDEX_INT64);
  const char *kernels[] = {name};
  if (!bench_peer_kernels(ctx, "ref_store_kv.cu", bench_src_ref_store_kv, kernels, 1, &s->kernel)) {
    free(s);
    return NULL;
  }
  return s;
}

static kvjit_status store_launch(void *state, const void *c, const check_world *w, const check_launch *l) {
  const store_state *s = state;
  kvjit_store_kv_args a;
  check_store_args(c, w, l, &a);
  ref_store_params p = {a.k, a.v, a.k_cache, a.v_cache, a.indices, a.k_stride ? a.k_stride : a.k_row_bytes,
                        a.v_stride ? a.v_stride : a.v_row_bytes,
                        a.k_cache_stride ? a.k_cache_stride : a.k_row_bytes, a.index_stride ? a.index_stride : 1,
                        (uint32_t)a.batch, a.num_slots};
  kvjit_launch_config cfg = KVJIT_LAUNCH_CONFIG_INIT;
  cfg.grid[0] = (unsigned)((a.batch * s->split + 3) / 4);
  cfg.block[0] = 128;
  cfg.stream = l->stream;
  /* The attribute only with the kernel compiled with the PDL wait (the reference ties both). */
  cfg.programmatic_serialization = l->pdl != KVJIT_PDL_OFF;
  void *args[] = {&p};
  return kvjit_launch(s->kernel, &cfg, args);
}

/* ---- transfer_kv: SGLang's hierarchical-cache per-layer kernel, reimplemented ----------------------- */

typedef struct ref_transfer_params {
  void *k_dst, *v_dst;
  const void *i_dst, *k_src, *v_src, *i_src;
  uint64_t length, src_stride, dst_stride, num_layers;
} ref_transfer_params;

typedef struct transfer_state {
  const kvjit_kernel *kernel;
  int threads, unroll, quota;
  uint64_t layers;
} transfer_state;

static int sm_count(void) {
  int n = 0;
  const gpu_env *env = gpu_current();
  if (env->drv->cuDeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, env->device) != CUDA_SUCCESS) n = 1;
  return n;
}

static int ref_unroll(int64_t row) { return row <= 512 ? 4 : row <= 1024 ? 2 : 1; }

static int transfer_applies(const bench_peer *self, const void *cv) {
  (void)self;
  const transfer_case *c = cv;
  return c->index_type == KVJIT_INDEX_INT64 && c->k_row % 128 == 0 && c->v_row == c->k_row && c->src_pad == 0 &&
         c->dst_pad == 0 && c->src_index_stride == 1 && c->dst_index_stride == 1 && c->src_dtype == c->dst_dtype &&
         c->host.kind == KVJIT_HOST_FLAT;
}

/* SGLang's default block quota (arg 2), or one that fills the GPU (arg 0: two 1024-thread blocks
 * per SM); its per-layer kernel for one layer, its all-layer kernel through pointer tables. */
static void *transfer_prepare(const bench_peer *self, kvjit_context *ctx, const void *c, const check_world *w) {
  kvjit_transfer_kv_args a;
  check_launch l = {KVJIT_PDL_AUTO, NULL, 0, 0};
  check_transfer_args(c, w, &l, &a);
  transfer_state *s = calloc(1, sizeof *s);
  if (s == NULL) abort();
  s->threads = 1024;
  s->unroll = ref_unroll(a.k_row_bytes);
  s->quota = self->arg > 0 ? self->arg : 2 * sm_count();
  s->layers = a.num_layers > 0 ? (uint64_t)a.num_layers : 1;
  char name[160];
  snprintf(name, sizeof name, "ref_transfer_%s<long long, %lld, %d, %d, 1024>",
           a.num_layers > 0 ? "all_layer" : "per_layer", (long long)a.k_row_bytes, s->unroll, s->quota);
  const char *kernels[] = {name};
  if (!bench_peer_kernels(ctx, "bench_ref_transfer_kv.cu", bench_src_ref_transfer_kv, kernels, 1, &s->kernel)) {
    free(s);
    return NULL;
  }
  return s;
}

static kvjit_status transfer_launch(void *state, const void *c, const check_world *w, const check_launch *l) {
  const transfer_state *s = state;
  kvjit_transfer_kv_args a;
  check_transfer_args(c, w, l, &a);
  ref_transfer_params p = {a.dst_k, a.dst_v, a.dst_indices, a.src_k, a.src_v, a.src_indices, (uint64_t)a.batch,
                           (uint64_t)a.src_k_stride, (uint64_t)a.dst_k_stride, s->layers};
  const int workers_per_block = s->threads / (32 / s->unroll);
  int64_t blocks = (a.batch + workers_per_block - 1) / workers_per_block;
  if (blocks > s->quota) blocks = s->quota;
  kvjit_launch_config cfg = KVJIT_LAUNCH_CONFIG_INIT;
  cfg.grid[0] = (unsigned)blocks;
  cfg.block[0] = (unsigned)s->threads;
  cfg.stream = l->stream;
  void *args[] = {&p};
  return kvjit_launch(s->kernel, &cfg, args);
}

/* The table: per op, in the order the driver times them after kvjit. The old bench_store's
 * fixed-split pass and bounds, bench_fp8's peers and bench_transfer's are all here. */
const bench_peer bench_peers[] = {
    {"store_kv_cache", "ref_reimpl", "cell", store_applies, store_prepare, store_launch, NULL, 0, 0, 0},
/* kvjit with split N (0: its automatic choice, timed again next to the fixed ones). */
#define STORE_SPLIT_PEER(impl, n)                                                                                      \
  {"store_kv_cache", impl, "cell", store_peer_split, store_peer_split_prepare, store_peer_split_launch,                \
   store_peer_release, 0, 0, n}
    STORE_SPLIT_PEER("kvjit_auto_again", 0), STORE_SPLIT_PEER("kvjit_split1", 1), STORE_SPLIT_PEER("kvjit_split2", 2),
    STORE_SPLIT_PEER("kvjit_split4", 4),     STORE_SPLIT_PEER("kvjit_split8", 8), STORE_SPLIT_PEER("kvjit_split16", 16),
    {"store_kv_cache", "unfused_x3", "cell", store_peer_fp8, store_peer_unfused_prepare, store_peer_unfused_launch,
     store_peer_release, 0, 0, 0},
    {"store_kv_cache", "plain_fp8", "cell", store_peer_fp8, store_peer_plain_fp8_prepare, store_peer_plain_fp8_launch,
     store_peer_release, 0, 0, 0},
    {"store_kv_cache", "plain_bf16", "cell", store_peer_fp8, store_peer_plain_bf16_prepare,
     store_peer_plain_bf16_launch, store_peer_release, 0, 0, 0},
    {"store_kv_cache", "kvjit_consecutive_slots", "bound", store_peer_largest, store_peer_consecutive_prepare,
     store_peer_consecutive_launch, store_peer_release, 0, 0, 0},
    {"store_kv_cache", "copy_same_size", "bound", store_peer_largest, store_peer_consecutive_prepare,
     store_peer_copy_launch, store_peer_release, 0, 0, 0},
    {"transfer_kv", "ref_quota2", "cell", transfer_applies, transfer_prepare, transfer_launch, NULL, 0, 0, 2},
    {"transfer_kv", "ref_quota_full", "cell", transfer_applies, transfer_prepare, transfer_launch, NULL, 0, 0, 0},
    {"transfer_kv", "kvjit_all_sms", "cell", transfer_peer_host, transfer_peer_all_sms_prepare,
     transfer_peer_all_sms_launch, transfer_peer_release, 0, 0, 0},
    {"transfer_kv", "memcpy_per_row", "cell", transfer_peer_per_row, transfer_peer_per_row_prepare,
     transfer_peer_per_row_launch, transfer_peer_release, 1, 1, 0},
    {"transfer_kv", "kvjit_consecutive_slots", "bound", transfer_peer_any, transfer_peer_consecutive_prepare,
     transfer_peer_consecutive_launch, transfer_peer_release, 0, 0, 0},
};
const size_t bench_num_peers = sizeof bench_peers / sizeof bench_peers[0];
