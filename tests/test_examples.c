/* The .c files of examples/ (the README's C code) build against the public header alone and behave
 * on every path: the build-only example runs with real NVRTC; the launching ones run on the GPU
 * with real buffers where there is one, and fail cleanly without a driver where there is none. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "examples.h"
#include "gpu_util.h"
#include "kvjit_tools.h"
#include "test_util.h"

static char tmpdir[256];
static kvjit_context *ctx;

static int setup(void **state) {
  (void)state;
  if (test_dir_make(tmpdir, sizeof tmpdir, "examples") != 0) return -1;
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.cache_dir = tmpdir;
  o.cache_path = "";
  o.disable_cache = 0;
  o.log = 0;
  return kvjit_context_create(&ctx, &o) == KVJIT_OK ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  kvjit_context_destroy(ctx);
  test_dir_remove(tmpdir);
  return 0;
}

static void test_build_example(void **state) {
  (void)state;
  char inc[512], path[600];
  snprintf(inc, sizeof inc, "%s/include", tmpdir);
  snprintf(path, sizeof path, "mkdir -p '%s'", inc);
  assert_int_equal(system(path), 0);
  snprintf(path, sizeof path, "%s/tile_config.h", inc);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("#define TILE 64\n", f);
  fclose(f);
  assert_int_equal(example_build(ctx, inc), KVJIT_OK);
  kvjit_stats s = KVJIT_STATS_INIT;
  assert_int_equal(kvjit_context_stats(ctx, &s), KVJIT_OK);
  assert_int_equal(s.compiles, 1);
  assert_int_equal(example_build(ctx, inc), KVJIT_OK); /* from memory now */
  assert_int_equal(example_build(ctx, "/nonexistent-include-dir"), KVJIT_ERR_COMPILE); /* log on stderr */
}

/* On a GPU: scale 8 x 256 floats in place, then block_sum with 64 KiB of dynamic shared memory
 * (past the 48 KiB default); every value checked, and the words past the sums untouched. */
static void run_on_the_gpu(void) {
  enum { BLOCKS = 8, N = BLOCKS * 256 };
  static float host[N], back[N];
  uint64_t seed = 99;
  for (int i = 0; i < N; i++) host[i] = (float)(gpu_rand(&seed) % 4096) * 0.5f;
  CUdeviceptr x = gpu_alloc(sizeof host);
  gpu_upload(x, host, sizeof host);
  assert_int_equal(example_scale(ctx, (float *)(uintptr_t)x, BLOCKS, 0.25f, NULL), KVJIT_OK);
  gpu_sync();
  gpu_download(back, x, sizeof back);
  for (int i = 0; i < N; i++) assert_true(back[i] == host[i] * 0.25f);

  kvjit_program_handle *h = NULL;
  assert_int_equal(example_block_sum_prepare(ctx, &h), KVJIT_OK);
  CUdeviceptr sums = gpu_alloc(BLOCKS * 4 * sizeof(float));
  GPU_CU(gpu_current()->drv->cuMemsetD32(sums, 0xdeadbeef, BLOCKS * 4));
  for (int i = 0; i < N; i++) host[i] = (float)(i % 7); /* small integers: exact sums */
  gpu_upload(x, host, sizeof host);
  assert_int_equal(example_block_sum(h, (float *)(uintptr_t)sums, (const float *)(uintptr_t)x, BLOCKS, 256,
                                     64 * 1024, NULL),
                   KVJIT_OK);
  gpu_sync();
  float got[BLOCKS * 4];
  gpu_download(got, sums, sizeof got);
  for (int b = 0; b < BLOCKS; b++) {
    float want = 0;
    for (int i = 0; i < 256; i++) want += host[b * 256 + i];
    assert_true(got[b] == want);
  }
  uint32_t poison;
  memcpy(&poison, &got[BLOCKS], 4);
  assert_int_equal(poison, 0xdeadbeef);
  kvjit_program_handle_destroy(h);
  gpu_free(sums);
  gpu_free(x);

  /* The FlashAttention store: 5 tokens (one padding) into 4 blocks; every byte of the cache checked. */
  enum { HEADS = 8, DIM = 128, BLOCK = 16, BLOCKS_ = 4, ROW = HEADS * DIM * 2, TOKENS = 5 };
  static unsigned char cache[BLOCKS_ * HEADS * BLOCK * 2 * DIM * 2], want[sizeof cache], kv[2][TOKENS * ROW];
  const int64_t slots[TOKENS] = {5, 17, -1, 63, 40};
  gpu_fill_random(cache, sizeof cache, &seed);
  gpu_fill_random(kv, sizeof kv, &seed);
  memcpy(want, cache, sizeof cache);
  for (int i = 0; i < TOKENS; i++) {
    if (slots[i] < 0) continue;
    const int64_t blk = slots[i] / BLOCK, pos = slots[i] % BLOCK;
    for (int t = 0; t < 2; t++)
      for (int hd = 0; hd < HEADS; hd++)
        memcpy(want + (((blk * HEADS + hd) * BLOCK + pos) * 2 * DIM + t * DIM) * 2, kv[t] + i * ROW + hd * DIM * 2,
               DIM * 2);
  }
  CUdeviceptr dc = gpu_alloc(sizeof cache), dk = gpu_alloc(sizeof kv[0]), dv = gpu_alloc(sizeof kv[1]),
              ds = gpu_alloc(sizeof slots);
  gpu_upload(dc, cache, sizeof cache);
  gpu_upload(dk, kv[0], sizeof kv[0]);
  gpu_upload(dv, kv[1], sizeof kv[1]);
  gpu_upload(ds, slots, sizeof slots);
  assert_int_equal(example_store_flash(ctx, (void *)(uintptr_t)dc, (const void *)(uintptr_t)dk,
                                       (const void *)(uintptr_t)dv, (const int64_t *)(uintptr_t)ds, TOKENS, BLOCKS_,
                                       NULL),
                   KVJIT_OK);
  gpu_sync();
  gpu_download(cache, dc, sizeof cache);
  assert_memory_equal(cache, want, sizeof cache);
  gpu_free(dc);
  gpu_free(dk);
  gpu_free(dv);
  gpu_free(ds);
  printf("the launching examples ran on %s (sm_%d)\n", gpu_current()->name, gpu_current()->sm);
}

static void test_launching_examples(void **state) {
  (void)state;
  int version = 0;
  if (kvjit_driver_version(&version) == KVJIT_OK) {
    gpu_env env;
    int rc = gpu_setup(&env);
    if (rc == GPU_SKIP) skip(); /* a driver without a device: nothing to launch on */
    assert_int_equal(rc, 0);
    run_on_the_gpu();
    gpu_teardown(&env);
    return;
  }
  assert_int_equal(example_scale(ctx, NULL, 1, 2.0f, NULL), KVJIT_ERR_NO_DRIVER);
  kvjit_program_handle *h = NULL;
  assert_int_equal(example_block_sum_prepare(ctx, &h), KVJIT_OK); /* preparing needs no driver */
  assert_int_equal(example_block_sum(h, NULL, NULL, 1, 1024, 64 * 1024, NULL), KVJIT_ERR_NO_DRIVER);
  kvjit_program_handle_destroy(h);
  /* The FlashAttention store's arguments pass validation (views apart), then need the driver. */
  assert_int_equal(example_store_flash(ctx, (void *)(uintptr_t)0x7f0000000000ull, (const void *)(uintptr_t)0x7f1000000000ull,
                                       (const void *)(uintptr_t)0x7f2000000000ull,
                                       (const int64_t *)(uintptr_t)0x7f3000000000ull, 5, 4, NULL),
                   KVJIT_ERR_NO_DRIVER);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_build_example),
      cmocka_unit_test(test_launching_examples),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
