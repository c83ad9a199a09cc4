/* The .c files of examples/ build against the public header alone and behave on every path: the
 * build-only example runs here with real NVRTC; the launching ones fail cleanly without a GPU (the gpu
 * suite runs them on one: test_gpu_loader.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "examples.h"
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

static void test_launching_examples_without_a_gpu(void **state) {
  (void)state;
  int sm;
  if (kvjit_current_sm(&sm) == KVJIT_OK) skip(); /* the gpu suite runs them */
  assert_int_equal(example_scale(ctx, NULL, 1, 2.0f, NULL), KVJIT_ERR_NO_DRIVER);
  kvjit_program_handle *h = NULL;
  assert_int_equal(example_block_sum_prepare(ctx, &h), KVJIT_OK); /* preparing needs no driver */
  assert_int_equal(example_block_sum(h, NULL, NULL, 1, 1024, 64 * 1024, NULL), KVJIT_ERR_NO_DRIVER);
  kvjit_program_handle_destroy(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_build_example),
      cmocka_unit_test(test_launching_examples_without_a_gpu),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
