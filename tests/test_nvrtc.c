/* NVRTC through the public loader, no GPU needed: real compiles for several archs, disk hits,
 * PTX fallback, compile errors, name expressions, memory-only mode. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "compile.h"
#include "target.h"
#include "kvjit.h"
#include "test_util.h"

static const char *source =
    "template <int N, typename T> __global__ void scale(T *x, T s) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < N) x[i] *= s; }\n"
    "extern \"C\" __global__ void fill(int *x, int v) { x[threadIdx.x] = v; }\n";
static const char *kernels[] = {"scale<128, float>", "fill"};

static char tmpdir[256];

static int setup(void **state) {
  (void)state;
  return test_dir_make(tmpdir, sizeof tmpdir, "nvrtc");
}

static int teardown(void **state) {
  (void)state;
  test_dir_remove(tmpdir);
  return 0;
}

static kvjit_context *make_ctx(const char *sub, int disable) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/%s", tmpdir, sub);
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.cache_dir = dir;
  o.cache_path = "";
  o.disable_cache = disable;
  o.log = 0;
  kvjit_context *ctx = NULL;
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_OK);
  return ctx;
}

static kvjit_program_desc desc_for(int arch) {
  kvjit_program_desc d = KVJIT_PROGRAM_DESC_INIT;
  d.name = "test.cu";
  d.source = source;
  d.kernels = kernels;
  d.num_kernels = 2;
  d.arch = arch;
  return d;
}

static void test_versions_and_archs(void **state) {
  (void)state;
  int major = 0, minor = 0;
  assert_int_equal(kvjit_nvrtc_version(&major, &minor), KVJIT_OK);
  assert_true(major >= 12);
  int archs[64];
  size_t n = 0;
  assert_int_equal(kvjit_nvrtc_archs(archs, 64, &n), KVJIT_OK);
  assert_true(n > 3);
  int has90 = 0;
  for (size_t i = 0; i < n && i < 64; i++) has90 |= archs[i] == 90;
  assert_true(has90);
}

static void test_compile_for_several_archs_then_hit(void **state) {
  (void)state;
  kvjit_context *ctx = make_ctx("archs", 0);
  const int targets[] = {80, 90, 100};
  for (size_t i = 0; i < 3; i++) {
    kvjit_program_desc d = desc_for(targets[i]);
    kvjit_origin origin = 0;
    assert_int_equal(kvjit_program_compile(ctx, &origin, &d), KVJIT_OK);
    assert_int_equal(origin, KVJIT_FROM_COMPILE);
    assert_int_equal(kvjit_program_compile(ctx, &origin, &d), KVJIT_OK);
    assert_int_equal(origin, KVJIT_FROM_DISK);
  }
  kvjit_stats s = KVJIT_STATS_INIT;
  assert_int_equal(kvjit_context_stats(ctx, &s), KVJIT_OK);
  assert_int_equal(s.compiles, 3);
  assert_int_equal(s.disk_hits, 3);
  assert_int_equal(s.disk_writes, 3);
  assert_true(s.compile_ns > 0);
  kvjit_context_destroy(ctx);

  /* A new context (another process, in effect) hits the same files. */
  ctx = make_ctx("archs", 0);
  kvjit_program_desc d = desc_for(90);
  kvjit_origin origin = 0;
  assert_int_equal(kvjit_program_compile(ctx, &origin, &d), KVJIT_OK);
  assert_int_equal(origin, KVJIT_FROM_DISK);
  kvjit_context_destroy(ctx);
}

static int count_entry(const kvjit_cache_entry_info *e, void *user) {
  int *arches = user;
  arches[0]++;
  if (e->arch & KVJIT_TARGET_PTX) arches[1]++;
  if (strstr(e->kernels, "scale<128,float>") && strstr(e->kernels, "fill")) arches[2]++; /* canonical names */
  return 0;
}

static void test_ptx_fallback_for_a_newer_gpu(void **state) {
  (void)state;
  kvjit_key_target t;
  int note = 0;
  assert_int_equal(kvjit_target_resolve(&t, 990, &note), KVJIT_OK);
  assert_int_equal(note, 1);
  assert_int_equal(t.kind, KVJIT_PAYLOAD_PTX);
  assert_int_equal(kvjit_target_resolve(&t, 90, &note), KVJIT_OK);
  assert_int_equal(note, 0);
  assert_int_equal(t.kind, KVJIT_PAYLOAD_CUBIN);
  assert_int_equal(kvjit_target_resolve(&t, 20, &note), KVJIT_ERR_UNSUPPORTED);

  kvjit_context *ctx = make_ctx("ptx", 0);
  kvjit_program_desc d = desc_for(990);
  kvjit_origin origin = 0;
  assert_int_equal(kvjit_program_compile(ctx, &origin, &d), KVJIT_OK);
  int counts[3] = {0, 0, 0};
  uint64_t bad = 0;
  assert_int_equal(kvjit_cache_list(ctx, 0, 1, count_entry, counts, &bad), KVJIT_OK);
  assert_int_equal(counts[0], 1);
  assert_int_equal(counts[1], 1); /* stored as PTX */
  assert_int_equal(counts[2], 1); /* both kernel names recorded */
  assert_int_equal(bad, 0);
  kvjit_context_destroy(ctx);
}

static void test_compile_error_is_reported_and_remembered_in_counts(void **state) {
  (void)state;
  kvjit_context *ctx = make_ctx("err", 0);
  kvjit_program_desc d = desc_for(90);
  d.source = "extern \"C\" __global__ void fill(int *x) { x[0] = undefined_thing; }\n";
  const char *k[] = {"fill"};
  d.kernels = k;
  d.num_kernels = 1;
  assert_int_equal(kvjit_program_compile(ctx, NULL, &d), KVJIT_ERR_COMPILE);
  assert_non_null(strstr(kvjit_last_error(), "undefined_thing"));
  assert_non_null(strstr(kvjit_last_error(), "test.cu"));
  kvjit_stats s = KVJIT_STATS_INIT;
  kvjit_context_stats(ctx, &s);
  assert_int_equal(s.compile_failures, 1);
  assert_int_equal(s.disk_writes, 0);

  /* A kernel name that is not in the source. */
  d = desc_for(90);
  const char *missing[] = {"nope"};
  d.kernels = missing;
  d.num_kernels = 1;
  assert_int_not_equal(kvjit_program_compile(ctx, NULL, &d), KVJIT_OK);
  kvjit_context_destroy(ctx);
}

static void test_bad_descriptions(void **state) {
  (void)state;
  kvjit_context *ctx = make_ctx("bad", 0);
  kvjit_program_desc d = desc_for(90);
  d.version = 7;
  assert_int_equal(kvjit_program_compile(ctx, NULL, &d), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "desc->version"));
  d = desc_for(90);
  d.num_kernels = 0;
  assert_int_equal(kvjit_program_compile(ctx, NULL, &d), KVJIT_ERR_INVALID_ARGUMENT);
  d = desc_for(90);
  const char *opts[] = {"--gpu-architecture=sm_80"};
  d.options = opts;
  d.num_options = 1;
  assert_int_equal(kvjit_program_compile(ctx, NULL, &d), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "desc->arch"));
  d = desc_for(12);
  assert_int_equal(kvjit_program_compile(ctx, NULL, &d), KVJIT_ERR_UNSUPPORTED);
  assert_non_null(strstr(kvjit_last_error(), "sm_12"));
  assert_int_equal(kvjit_program_compile(NULL, NULL, &d), KVJIT_ERR_INVALID_ARGUMENT);
  kvjit_context_destroy(ctx);
}

static void test_headers_and_options_reach_nvrtc(void **state) {
  (void)state;
  kvjit_context *ctx = make_ctx("hdr", 0);
  kvjit_program_desc d = desc_for(90);
  d.source = "#include \"val.h\"\nextern \"C\" __global__ void fill(int *x) { x[0] = VAL + EXTRA; }\n";
  const kvjit_header h[] = {{"val.h", "#define VAL 42\n"}};
  const char *opts[] = {"-DEXTRA=1", "-std=c++17"};
  const char *k[] = {"fill"};
  d.headers = h;
  d.num_headers = 1;
  d.options = opts;
  d.num_options = 2;
  d.kernels = k;
  d.num_kernels = 1;
  assert_int_equal(kvjit_program_compile(ctx, NULL, &d), KVJIT_OK);
  d.num_options = 1; /* without -DEXTRA the source does not compile */
  const char *only_std[] = {"-std=c++17"};
  d.options = only_std;
  assert_int_equal(kvjit_program_compile(ctx, NULL, &d), KVJIT_ERR_COMPILE);
  kvjit_context_destroy(ctx);
}

static void test_memory_only_mode(void **state) {
  (void)state;
  kvjit_context *ctx = make_ctx("disabled", 1);
  kvjit_cache_info info;
  assert_int_equal(kvjit_context_cache_info(ctx, &info), KVJIT_OK);
  assert_null(info.write_dir);
  assert_non_null(info.degraded_reason);
  kvjit_program_desc d = desc_for(90);
  kvjit_origin origin = 0;
  assert_int_equal(kvjit_program_compile(ctx, &origin, &d), KVJIT_OK);
  assert_int_equal(origin, KVJIT_FROM_COMPILE);
  kvjit_stats s = KVJIT_STATS_INIT;
  kvjit_context_stats(ctx, &s);
  assert_int_equal(s.disk_writes, 0);
  char dir[512];
  snprintf(dir, sizeof dir, "%s/disabled", tmpdir);
  assert_int_not_equal(access(dir, F_OK), 0); /* nothing created */
  kvjit_context_destroy(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_versions_and_archs),
      cmocka_unit_test(test_compile_for_several_archs_then_hit),
      cmocka_unit_test(test_ptx_fallback_for_a_newer_gpu),
      cmocka_unit_test(test_compile_error_is_reported_and_remembered_in_counts),
      cmocka_unit_test(test_bad_descriptions),
      cmocka_unit_test(test_headers_and_options_reach_nvrtc),
      cmocka_unit_test(test_memory_only_mode),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
