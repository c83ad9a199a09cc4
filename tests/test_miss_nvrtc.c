/*
 * Misses that explain themselves, end to end with real NVRTC compiles (no GPU): a lookup whose
 * program was cached with other options, source or target misses, names what differs, logs it once,
 * counts it by cause (kvjit_stats) and lists it (kvjit_context_misses()); under KVJIT_COMPILE=never
 * the refusal says it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvjit.h"
#include "kvjit_tools.h"
#include "test_util.h"

static char tmpdir[256];

static int setup(void **state) {
  (void)state;
  return test_dir_make(tmpdir, sizeof tmpdir, "miss-nvrtc");
}

static int teardown(void **state) {
  (void)state;
  return test_dir_remove(tmpdir);
}

static kvjit_context *ctx_at(const char *dir, kvjit_compile_mode mode) {
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.cache_dir = dir;
  o.cache_path = "";
  o.log = 0;
  o.disable_cache = 0;
  o.compile_mode = mode;
  kvjit_context *ctx = NULL;
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_OK);
  return ctx;
}

static const char source[] = "extern \"C\" __global__ void k(int *x) { x[threadIdx.x] = VALUE; }\n";
static const char other_source[] = "extern \"C\" __global__ void k(int *x) { x[threadIdx.x] = VALUE + 1; }\n";
static const char *const names[] = {"k"};

static kvjit_program_desc desc(const char *src, const char *define, int arch) {
  static const char *options[1];
  options[0] = define;
  kvjit_program_desc d = KVJIT_PROGRAM_DESC_INIT;
  d.name = "miss_nvrtc.cu";
  d.source = src;
  d.kernels = names;
  d.num_kernels = 1;
  d.options = options;
  d.num_options = 1;
  d.arch = arch;
  return d;
}

static kvjit_origin build(kvjit_context *ctx, kvjit_program_desc d) {
  kvjit_program *p = NULL;
  kvjit_origin origin = 0;
  assert_int_equal(kvjit_program_build(ctx, &p, &origin, &d), KVJIT_OK);
  return origin;
}

static void test_runtime_misses_explained(void **state) {
  (void)state;
  char dir[300];
  snprintf(dir, sizeof dir, "%s/c", tmpdir);
  kvjit_context *warm = ctx_at(dir, KVJIT_COMPILE_ALWAYS);
  assert_int_equal(build(warm, desc(source, "-DVALUE=1", 90)), KVJIT_FROM_COMPILE);
  kvjit_stats s = KVJIT_STATS_INIT;
  assert_int_equal(kvjit_context_stats(warm, &s), KVJIT_OK);
  assert_int_equal(s.misses_cold, 1);
  kvjit_context_destroy(warm);

  kvjit_context *ctx = ctx_at(dir, KVJIT_COMPILE_ALWAYS);
  assert_int_equal(build(ctx, desc(source, "-DVALUE=1", 90)), KVJIT_FROM_DISK);
  assert_int_equal(build(ctx, desc(source, "-DVALUE=2", 90)), KVJIT_FROM_COMPILE);
  assert_int_equal(build(ctx, desc(other_source, "-DVALUE=1", 90)), KVJIT_FROM_COMPILE);
  assert_int_equal(build(ctx, desc(source, "-DVALUE=1", 100)), KVJIT_FROM_COMPILE);
  /* Asked again: a memory hit, not a second miss. */
  assert_int_equal(build(ctx, desc(source, "-DVALUE=2", 90)), KVJIT_FROM_MEMORY);
  s = (kvjit_stats)KVJIT_STATS_INIT;
  assert_int_equal(kvjit_context_stats(ctx, &s), KVJIT_OK);
  assert_int_equal(s.misses_options, 1);
  assert_int_equal(s.misses_source, 1);
  assert_int_equal(s.misses_target, 1);
  assert_int_equal(s.misses_cold + s.misses_nvrtc + s.misses_toolkit + s.misses_other, 0);
  kvjit_miss_info misses[8];
  size_t n = 0;
  assert_int_equal(kvjit_context_misses(ctx, misses, 8, &n), KVJIT_OK);
  assert_int_equal(n, 3);
  assert_int_equal(misses[0].cause, KVJIT_MISS_OPTIONS);
  assert_non_null(strstr(misses[0].message, "program miss_nvrtc.cu for sm_90"));
  assert_non_null(strstr(misses[0].message, "other compile options"));
  assert_int_equal(misses[1].cause, KVJIT_MISS_SOURCE);
  assert_int_equal(misses[2].cause, KVJIT_MISS_TARGET);
  assert_non_null(strstr(misses[2].message, "cached for sm_90, this lookup is for sm_100"));
  /* A caller of stats version 2 gets no new fields written. */
  kvjit_stats old;
  memset(&old, 0xab, sizeof old);
  old.version = 2;
  assert_int_equal(kvjit_context_stats(ctx, &old), KVJIT_OK);
  assert_int_equal(old.misses_cold, 0xababababababababull);
  assert_int_equal(kvjit_context_reset_stats(ctx), KVJIT_OK);
  assert_int_equal(kvjit_context_stats(ctx, &s), KVJIT_OK);
  assert_int_equal(s.misses_options, 0);
  kvjit_context_destroy(ctx);

  /* Under KVJIT_COMPILE=never the refusal carries the explanation. */
  kvjit_context *never = ctx_at(dir, KVJIT_COMPILE_NEVER);
  kvjit_program *p = NULL;
  kvjit_program_desc d = desc(source, "-DVALUE=3", 90);
  assert_int_equal(kvjit_program_build(never, &p, NULL, &d), KVJIT_ERR_NOT_CACHED);
  assert_non_null(strstr(kvjit_last_error(), "KVJIT_COMPILE=never"));
  assert_non_null(strstr(kvjit_last_error(), "other compile options"));
  s = (kvjit_stats)KVJIT_STATS_INIT;
  assert_int_equal(kvjit_context_stats(never, &s), KVJIT_OK);
  assert_int_equal(s.misses_options, 1);
  assert_int_equal(s.not_cached, 1);
  kvjit_context_destroy(never);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_runtime_misses_explained),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
