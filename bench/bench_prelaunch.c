/*
 * bench_prelaunch: the host work an op call does before cuLaunchKernelEx -- validate the
 * arguments, key the request, look it up, size the grid -- in ns per call, on the CPU alone (no
 * driver, no GPU: the entry is planted in the context's table as a load would leave it). The
 * driver calls of a real call (cuCtxGetDevice, the launch) are not in it; bench_ops' host-cost
 * rows measure the whole call against a raw cuLaunchKernelEx on a GPU.
 *
 *   usage: bench_prelaunch [--calls N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvjit.h"
#include "op.h"
#include "registry.h"
#include "variant.h"
#include "store_kv_op.h"
#include "transfer_kv_op.h"

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

#define FAKE(n) ((void *)(uintptr_t)(0x7f0000000000ull + (uint64_t)(n)*0x100000ull))
#define ROUNDS 15

/* Plant the entry a load of (values, class) would publish, with a plan's real geometry. */
static void plant(kvjit_context *ctx, const kvjit_op *op, const int64_t *request, int batch_class) {
  static kvjit_kernel fake_kernel;
  int64_t values[KVJIT_VARIANT_MAX_FIELDS];
  memcpy(values, request, op->info.num_fields * sizeof values[0]);
  if (kvjit_op_check_values(op, values, KVJIT_OP_ALL_GIVEN) != KVJIT_OK) {
    fprintf(stderr, "bench_prelaunch: %s\n", kvjit_last_error());
    exit(2);
  }
  union {
    unsigned char bytes[KVJIT_OP_MAX_PLAN];
    int64_t align;
  } plan;
  memset(&plan, 0, sizeof plan);
  if (op->plan(values, (int)values[0], batch_class, plan.bytes) != KVJIT_OK) exit(2);
  kvjit_op_entry *e = malloc(sizeof *e);
  if (e == NULL) exit(2);
  kvjit_op_entry_init(e, &fake_kernel);
  op->geometry(plan.bytes, &e->geo);
  const kvjit_fast_key key = op->key(request, batch_class);
  if (kvjit_fast_map_insert(kvjit_op_tables_of(ctx)->variants, &key, e, NULL, NULL) != KVJIT_OK)
    exit(2);
}

static double store_case(kvjit_context *ctx, const kvjit_store_kv_args *a, long calls) {
  kvjit_store_kv_request r;
  if (kvjit_store_kv_validate(ctx, a, &r) != KVJIT_OK) {
    fprintf(stderr, "bench_prelaunch: %s\n", kvjit_last_error());
    exit(2);
  }
  r.values[STORE_F_ARCH] = 90;
  plant(ctx, &kvjit_op_store_kv, r.values, r.batch_class);
  double best = 1e30;
  volatile uint64_t sink = 0;
  for (int round = 0; round < ROUNDS; round++) {
    const uint64_t t0 = now_ns();
    for (long i = 0; i < calls; i++) {
      kvjit_store_kv_validate(ctx, a, &r);
      r.values[STORE_F_ARCH] = 90;
      const kvjit_op_entry *e = NULL;
      if (kvjit_op_find_entry(ctx, &kvjit_op_store_kv, r.values, r.batch_class, &e) != KVJIT_OK) exit(2);
      sink += kvjit_op_blocks(&e->geo, a->batch) + (uint64_t)r.params.base.batch;
    }
    const double ns = (double)(now_ns() - t0) / (double)calls;
    if (ns < best) best = ns;
  }
  (void)sink;
  return best;
}

static double transfer_case(kvjit_context *ctx, const kvjit_transfer_kv_args *a, long calls) {
  kvjit_transfer_kv_request r;
  if (kvjit_transfer_kv_validate(a, &r) != KVJIT_OK) {
    fprintf(stderr, "bench_prelaunch: %s\n", kvjit_last_error());
    exit(2);
  }
  r.values[TRANSFER_F_ARCH] = 90;
  plant(ctx, &kvjit_op_transfer_kv, r.values, r.batch_class);
  double best = 1e30;
  volatile uint64_t sink = 0;
  for (int round = 0; round < ROUNDS; round++) {
    const uint64_t t0 = now_ns();
    for (long i = 0; i < calls; i++) {
      kvjit_transfer_kv_validate(a, &r);
      r.values[TRANSFER_F_ARCH] = 90;
      const kvjit_op_entry *e = NULL;
      if (kvjit_op_find_entry(ctx, &kvjit_op_transfer_kv, r.values, r.batch_class, &e) != KVJIT_OK) exit(2);
      sink += kvjit_op_blocks(&e->geo, a->batch) + (uint64_t)r.params.batch;
    }
    const double ns = (double)(now_ns() - t0) / (double)calls;
    if (ns < best) best = ns;
  }
  (void)sink;
  return best;
}

int main(int argc, char **argv) {
  long calls = 200000;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--calls") == 0 && i + 1 < argc) {
      calls = strtol(argv[++i], NULL, 10);
    } else {
      fprintf(stderr, "usage: bench_prelaunch [--calls N]\n");
      return 2;
    }
  }
  if (calls < 1) calls = 1;
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.disable_cache = 1;
  o.log = 0;
  kvjit_context *ctx;
  if (kvjit_context_create(&ctx, &o) != KVJIT_OK) return 2;

  kvjit_store_kv_args a = KVJIT_STORE_KV_ARGS_INIT;
  a.k = FAKE(1);
  a.v = FAKE(2);
  a.k_cache = FAKE(3);
  a.v_cache = FAKE(4);
  a.indices = FAKE(5);
  a.batch = 1;
  a.k_row_bytes = a.v_row_bytes = 1024;
  a.num_slots = 1 << 20;
  printf("pre-launch host work, ns per call (best of %d rounds of %ld calls; no driver calls)\n", ROUNDS, calls);
  a.pdl = KVJIT_PDL_ON;
  printf("store_kv_cache  plain 1024 B batch 1     pdl on  : %6.1f\n", store_case(ctx, &a, calls));
  a.pdl = KVJIT_PDL_OFF;
  printf("store_kv_cache  plain 1024 B batch 1     pdl off : %6.1f\n", store_case(ctx, &a, calls));
  a.batch = 4096;
  a.pdl = KVJIT_PDL_AUTO;
  printf("store_kv_cache  plain 1024 B batch 4096  pdl auto: %6.1f\n", store_case(ctx, &a, calls));
  a.batch = 16;
  a.k_row_bytes = a.v_row_bytes = 2048;
  a.dtype = KVJIT_DTYPE_BF16;
  a.cache_dtype = KVJIT_DTYPE_FP8_E4M3;
  a.scale_kind = KVJIT_SCALE_PER_HEAD;
  a.num_heads = 8;
  a.k_scale = FAKE(6);
  a.v_scale = FAKE(7);
  printf("store_kv_cache  bf16->e4m3 per head 2048 B batch 16: %6.1f\n", store_case(ctx, &a, calls));
  /* vLLM's FlashAttention cache [blocks, 8, 16, 2 x 128] of bf16: K and V views of one tensor (the
   * views checked on every call: each apart from the other, no byte shared). */
  kvjit_store_kv_args f = KVJIT_STORE_KV_ARGS_INIT;
  kvjit_layout kl = KVJIT_LAYOUT_INIT;
  kl.page_size = 16;
  kl.page_stride = 8 * 16 * 512;
  kl.slot_stride = 512;
  kl.element_bytes = 2;
  kl.num_row_dims = 2;
  kl.row_extents[0] = 8;
  kl.row_extents[1] = 128;
  kl.row_strides[0] = 16 * 512;
  kl.row_strides[1] = 2;
  f.k = FAKE(1);
  f.v = FAKE(2);
  f.k_cache = FAKE(3);
  f.v_cache = (char *)FAKE(3) + 256;
  f.k_cache_layout = f.v_cache_layout = &kl;
  f.indices = FAKE(5);
  f.batch = 16;
  f.k_row_bytes = f.v_row_bytes = 2048;
  f.num_slots = 1 << 20;
  printf("store_kv_cache  flash layout 2048 B batch 16: %6.1f\n", store_case(ctx, &f, calls));

  kvjit_transfer_kv_args t = KVJIT_TRANSFER_KV_ARGS_INIT;
  t.src_k = FAKE(1);
  t.src_v = FAKE(2);
  t.dst_k = FAKE(3);
  t.dst_v = FAKE(4);
  t.src_indices = FAKE(5);
  t.dst_indices = FAKE(6);
  t.batch = 4096;
  t.k_row_bytes = 4096;
  t.src_num_slots = t.dst_num_slots = 1 << 20;
  t.dst = KVJIT_LOCATION_HOST;
  printf("transfer_kv     D2H 4096 B batch 4096 one layer : %6.1f\n", transfer_case(ctx, &t, calls));
  kvjit_context_destroy(ctx);
  return 0;
}
