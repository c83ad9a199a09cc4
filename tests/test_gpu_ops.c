/*
 * The op calls on a real GPU beyond the check harness's case space (gpu suite; exits 77 without a
 * driver or device): batch 0 with NULL pointers, PDL refused before sm_90, prepare then a hot path
 * that neither compiles nor loads, a call with no current CUDA context, stores of a fresh context
 * served by a prewarmed cache (bundles and aliases) without a compile, the manifest, a second GPU,
 * transfer_kv's device check on one GPU.
 * The data of every store here is checked by the harness (check_run_case()).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "check/check_run.h"
#include "check/check_store.h"
#include "variant_util.h"

extern const check_op check_store_op;

static gpu_env env;
static kvjit_context *ctx;
static char cache_dir[64];
static char manifest_path[128];

static store_case plain(int64_t batch, int64_t row) { return store_case_plain("ops", batch, row); }

/* One store through the harness, with PDL automatic on the legacy default stream, no graph. */
static int run_store(kvjit_context *on, const store_case *c) {
  check_totals t;
  memset(&t, 0, sizeof t);
  check_case_run r;
  memset(&r, 0, sizeof r);
  r.op = &check_store_op;
  r.c = c;
  r.pdl = c->common.pdl;
  r.program = "test_gpu_ops";
  return check_run_case(&t, &r, on);
}

static void test_batch_zero_null_pointers(void **state) {
  (void)state;
  kvjit_store_kv_args s = KVJIT_STORE_KV_ARGS_INIT;
  s.k_row_bytes = 256;
  s.num_slots = 8;
  assert_int_equal(kvjit_store_kv_cache(ctx, &s), KVJIT_OK);
  kvjit_transfer_kv_args a = KVJIT_TRANSFER_KV_ARGS_INIT;
  a.k_row_bytes = 256;
  a.src_num_slots = a.dst_num_slots = 4;
  assert_int_equal(kvjit_transfer_kv(ctx, &a), KVJIT_OK);
  /* Batch 0 prepares every class; nothing is dereferenced. */
  assert_int_equal(kvjit_transfer_kv_prepare(ctx, &a), KVJIT_OK);
}

static void test_pdl_on_old_gpu(void **state) {
  (void)state;
  if (env.sm >= 90) return; /* nothing to refuse here; the harness runs PDL on */
  kvjit_store_kv_args a = KVJIT_STORE_KV_ARGS_INIT;
  CUdeviceptr buf = gpu_alloc(4096);
  a.k = a.v = (const void *)(uintptr_t)buf;
  a.k_cache = a.v_cache = (void *)(uintptr_t)buf;
  a.indices = (const void *)(uintptr_t)buf;
  a.batch = 1;
  a.k_row_bytes = 256;
  a.num_slots = 1;
  a.pdl = KVJIT_PDL_ON;
  assert_int_equal(kvjit_store_kv_cache(ctx, &a), KVJIT_ERR_UNSUPPORTED);
  assert_non_null(strstr(kvjit_last_error(), "pdl"));
  gpu_free(buf);
}

/* prepare() loads every class; afterwards stores neither compile nor touch the loader. */
static void test_prepare_then_hot_path(void **state) {
  (void)state;
  CUdeviceptr buf = gpu_alloc(4096);
  kvjit_store_kv_args a = KVJIT_STORE_KV_ARGS_INIT;
  a.k = a.v = (const void *)(uintptr_t)buf;
  a.k_cache = a.v_cache = (void *)(uintptr_t)buf;
  a.indices = (const void *)(uintptr_t)buf;
  a.index_type = KVJIT_INDEX_INT32;
  a.batch = 0; /* every batch class */
  a.k_row_bytes = 640;
  a.v_row_bytes = 320;
  a.num_slots = 1;
  assert_int_equal(kvjit_store_kv_cache_prepare(ctx, &a), KVJIT_OK);
  gpu_free(buf);
  kvjit_stats s0 = KVJIT_STATS_INIT, s1 = KVJIT_STATS_INIT;
  assert_int_equal(kvjit_context_stats(ctx, &s0), KVJIT_OK);
  /* Every class and its edges: 16 | 17, 512 | 513, 32768 | 32769. */
  const int64_t batches[] = {1, 16, 17, 512, 513, 4096, 9000, 32768, 32769, 40001};
  for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
    store_case c = plain(batches[b], 640);
    c.v_row = 320;
    c.index_type = KVJIT_INDEX_INT32;
    assert_int_equal(run_store(ctx, &c), 0);
  }
  assert_int_equal(kvjit_context_stats(ctx, &s1), KVJIT_OK);
  assert_int_equal(s1.compiles, s0.compiles);
  assert_int_equal(s1.disk_hits, s0.disk_hits);
  assert_int_equal(s1.memory_hits, s0.memory_hits);
  assert_int_equal(s1.loads, s0.loads);
}

/* A call that arrives with no current context (its variant already loaded) makes device 0's
 * primary context current itself, once, and stores (issue 27: bindings no longer do it). */
static void test_no_current_context(void **state) {
  (void)state;
  store_case c = plain(7, 256);
  assert_int_equal(run_store(ctx, &c), 0); /* the variant is loaded, the arch is known */
  const size_t in = 7 * 256, cache = 16 * 256;
  unsigned char *rows = malloc(in), *host = malloc(cache), *got = malloc(cache);
  uint64_t rng = 0x0c7c0c7cull;
  gpu_fill_random(rows, in, &rng);
  gpu_fill_random(host, cache, &rng);
  CUdeviceptr k = gpu_alloc(in), kc = gpu_alloc(cache), idx = gpu_alloc(7 * 8);
  int64_t ids[7] = {0, 3, 5, 7, 9, 11, 15};
  gpu_upload(idx, ids, sizeof ids);
  gpu_upload(k, rows, in);
  gpu_upload(kc, host, cache);
  kvjit_store_kv_args a = KVJIT_STORE_KV_ARGS_INIT;
  a.k = (const void *)(uintptr_t)k;
  a.k_cache = (void *)(uintptr_t)kc;
  a.indices = (const void *)(uintptr_t)idx;
  a.batch = 7;
  a.k_row_bytes = 256;
  a.num_slots = 16;
  GPU_CU(env.drv->cuCtxSetCurrent(NULL));
  kvjit_status st = kvjit_store_kv_cache(ctx, &a);
  CUcontext now = NULL;
  GPU_CU(env.drv->cuCtxGetCurrent(&now));
  printf("no current context: %s; current after the call: %s\n", kvjit_status_name(st),
         now == env.context ? "the primary context" : "another");
  assert_int_equal(st, KVJIT_OK);
  assert_true(now == env.context); /* env.context is device 0's primary context */
  gpu_sync();
  gpu_download(got, kc, cache);
  for (int i = 0; i < 7; i++) memcpy(host + ids[i] * 256, rows + i * 256, 256);
  assert_memory_equal(got, host, cache); /* the rows stored, nothing else changed */
  gpu_free(k);
  gpu_free(kc);
  gpu_free(idx);
  free(rows);
  free(host);
  free(got);
}

static void test_stores_from_bundles(void **state) {
  (void)state;
  static const int64_t rows[] = {128, 256, 1024, 2048};
  kvjit_variant variants[8];
  size_t count = 0;
  for (size_t r = 0; r < 4; r++) {
    for (int it = 0; it < 2; it++) {
      kvjit_variant *v = &variants[count++];
      assert_int_equal(store_variant(v, env.sm, rows[r], rows[r], it ? KVJIT_INDEX_INT64 : KVJIT_INDEX_INT32,
                                     KVJIT_PDL_AUTO, 0, 16),
                       KVJIT_OK);
      assert_int_equal(kvjit_variant_check(v), KVJIT_OK);
    }
  }
  kvjit_context *built_ctx = NULL;
  char dir[64];
  assert_int_equal(gpu_context_create(&built_ctx, dir, sizeof dir, "bundles", NULL), 0);
  kvjit_prewarm_result results[8];
  assert_int_equal(kvjit_variants_prewarm(built_ctx, variants, count, 0, 1, results), KVJIT_OK);
  kvjit_stats built = KVJIT_STATS_INIT;
  assert_int_equal(kvjit_context_stats(built_ctx, &built), KVJIT_OK);
  kvjit_context_destroy(built_ctx);
  /* A fresh context over the same dir: the stores' kernels come from the bundles. */
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.cache_dir = dir;
  o.cache_path = "";
  o.disable_cache = 0;
  o.log = 0;
  kvjit_context *fresh = NULL;
  assert_int_equal(kvjit_context_create(&fresh, &o), KVJIT_OK);
  static const int64_t batches[] = {1, 16, 17, 300, 513, 4097, 32769};
  int failed = 0;
  for (size_t v = 0; v < count; v++) {
    for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
      store_case c = plain(batches[b], rows[v / 2]);
      c.index_type = v % 2 ? KVJIT_INDEX_INT64 : KVJIT_INDEX_INT32;
      c.bad_indices = b % 2;
      failed |= run_store(fresh, &c);
    }
  }
  kvjit_stats s = KVJIT_STATS_INIT;
  assert_int_equal(kvjit_context_stats(fresh, &s), KVJIT_OK);
  printf("stores from bundles: prewarm wrote %llu entries from %llu programs; a fresh context: %llu compiles, %llu "
         "disk hits, %llu loads\n",
         (unsigned long long)built.disk_writes, (unsigned long long)built.compiles, (unsigned long long)s.compiles,
         (unsigned long long)s.disk_hits, (unsigned long long)s.loads);
  gpu_context_destroy(fresh, dir);
  assert_int_equal(failed, 0);
  assert_int_equal(s.compiles, 0);
  assert_true(s.disk_hits > 0);
  assert_true(s.loads <= built.compiles); /* one load per bundle at most */
}

/* One context, one prepared variant, two GPUs of one process. */
static void test_second_gpu(void **state) {
  (void)state;
  if (env.device_count < 2) {
    printf("second GPU: only %d device, not run\n", env.device_count);
    return;
  }
  CUdevice dev1;
  CUcontext ctx1;
  GPU_CU(env.drv->cuDeviceGet(&dev1, 1));
  GPU_CU(env.drv->cuDevicePrimaryCtxRetain(&ctx1, dev1));
  for (int round = 0; round < 2; round++) {
    GPU_CU(env.drv->cuCtxSetCurrent(round ? env.context : ctx1));
    store_case c = plain(333, 1024);
    c.bad_indices = 1;
    assert_int_equal(run_store(ctx, &c), 0);
  }
  GPU_CU(env.drv->cuCtxSetCurrent(env.context));
  GPU_CU(env.drv->cuDevicePrimaryCtxRelease(dev1));
  printf("second GPU: ok\n");
}

/* kvjit_transfer_kv_check_devices() on one GPU: caches of the launching device pass (either flag);
 * a pointer the driver does not know (plain malloc) is refused, naming it. */
static void test_check_devices_one_gpu(void **state) {
  (void)state;
  CUdeviceptr buf = gpu_alloc(1 << 16);
  kvjit_transfer_kv_args a = KVJIT_TRANSFER_KV_ARGS_INIT;
  a.src_k = (const void *)(uintptr_t)buf;
  a.dst_k = (void *)(uintptr_t)(buf + 8192);
  a.src_indices = a.dst_indices = (const void *)(uintptr_t)(buf + 16384);
  a.batch = 4;
  a.k_row_bytes = 256;
  a.src_num_slots = a.dst_num_slots = 8;
  assert_int_equal(kvjit_transfer_kv_check_devices(ctx, &a, 0), KVJIT_OK);
  assert_int_equal(kvjit_transfer_kv_check_devices(ctx, &a, KVJIT_TRANSFER_KV_ENABLE_PEER_ACCESS), KVJIT_OK);
  void *host = malloc(8192);
  a.dst_k = host;
  kvjit_status st = kvjit_transfer_kv_check_devices(ctx, &a, 0);
  /* Where the driver maps pageable memory for the device (HMM), it reports it as host memory the
   * launch can reach: then it passes. */
  printf("check_devices, a malloc'd dst_k: %s %s\n", kvjit_status_name(st), st == KVJIT_OK ? "" : kvjit_last_error());
  if (st != KVJIT_OK && (st != KVJIT_ERR_INVALID_ARGUMENT || strstr(kvjit_last_error(), "dst_k: ") == NULL))
    fail_msg("a malloc'd dst_k: %s \"%s\"", kvjit_status_name(st), kvjit_last_error());
  free(host);
  gpu_free(buf);
}

/* Each variant first loaded in this process was recorded once; every line parses. */
static void test_manifest(void **state) {
  (void)state;
  FILE *f = fopen(manifest_path, "r");
  assert_non_null(f);
  char line[512];
  int lines = 0;
  while (fgets(line, sizeof line, f)) {
    kvjit_variant v;
    kvjit_status st = kvjit_variant_parse(&v, line);
    if (st != KVJIT_OK) fail_msg("manifest line \"%s\": %s", line, kvjit_last_error());
    assert_int_equal(v.values[0], env.sm); /* fields[0] is the arch */
    lines++;
  }
  fclose(f);
  printf("manifest: %d lines\n", lines);
  assert_true(lines >= 2); /* 640/320 int32, 256 B K only (no context), transfer_kv's batch-0 prepare */
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int rc = gpu_setup(&env);
  if (rc != 0) return rc;
  if (gpu_context_create(&ctx, cache_dir, sizeof cache_dir, "ops", "manifest.txt") != 0) return 1;
  snprintf(manifest_path, sizeof manifest_path, "%s-manifest.txt", cache_dir);
  printf("device 0: %s, sm_%d, %d device(s)\n", env.name, env.sm, env.device_count);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_batch_zero_null_pointers), cmocka_unit_test(test_pdl_on_old_gpu),
      cmocka_unit_test(test_prepare_then_hot_path),    cmocka_unit_test(test_no_current_context),
      cmocka_unit_test(test_stores_from_bundles),      cmocka_unit_test(test_second_gpu),
      cmocka_unit_test(test_check_devices_one_gpu),   cmocka_unit_test(test_manifest),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  gpu_context_destroy(ctx, cache_dir);
  gpu_teardown(&env);
  return failed ? 1 : 0;
}
