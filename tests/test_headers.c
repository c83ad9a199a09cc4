/* Header keying with real NVRTC (no GPU): in-memory, -I, toolkit; what may not be keyed is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvjit.h"
#include "test_util.h"

static char tmpdir[256];

static int setup(void **state) {
  (void)state;
  return test_dir_make(tmpdir, sizeof tmpdir, "headers");
}

static int teardown(void **state) {
  (void)state;
  test_dir_remove(tmpdir);
  return 0;
}

static void write_file(const char *dir, const char *name, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  char *slash = strrchr(path, '/');
  *slash = '\0';
  char cmd[600];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
  assert_int_equal(system(cmd), 0);
  *slash = '/';
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void sub_dir(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", tmpdir, name); }

static kvjit_context *make_ctx(const char *sub) {
  char dir[512];
  sub_dir(dir, sizeof dir, sub);
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.cache_dir = dir;
  o.cache_path = "";
  o.disable_cache = 0;
  o.log = 0;
  kvjit_context *ctx = NULL;
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_OK);
  return ctx;
}

static const char *one_kernel[] = {"k"};

static kvjit_program_desc desc_of(const char *source, const char *const *options, size_t num_options) {
  kvjit_program_desc d = KVJIT_PROGRAM_DESC_INIT;
  d.name = "headers_test.cu";
  d.source = source;
  d.options = options;
  d.num_options = num_options;
  d.kernels = one_kernel;
  d.num_kernels = 1;
  d.arch = 90;
  return d;
}

/* kvjit_program_build, returning the key (copied) and the origin. */
static kvjit_status build(kvjit_context *ctx, const kvjit_program_desc *d, char key[33], kvjit_origin *origin) {
  kvjit_program *p = NULL;
  kvjit_status st = kvjit_program_build(ctx, &p, origin, d);
  key[0] = '\0';
  if (st == KVJIT_OK) snprintf(key, 33, "%s", kvjit_program_key(p));
  return st;
}

static void test_toolkit_headers_need_no_option(void **state) {
  (void)state;
  kvjit_context *ctx = make_ctx("toolkit");
  kvjit_program_desc d = desc_of("#include <cuda_bf16.h>\n#include <cuda/std/cstdint>\n"
                                 "extern \"C\" __global__ void k(cuda::std::int64_t *x, __nv_bfloat16 *y) {\n"
                                 "  *x = 7; *y = __float2bfloat16(2.0f); }\n",
                                 NULL, 0);
  char key[33], again[33];
  kvjit_origin origin = 0;
  assert_int_equal(build(ctx, &d, key, &origin), KVJIT_OK);
  assert_int_equal(origin, KVJIT_FROM_COMPILE);
  kvjit_context_destroy(ctx);
  ctx = make_ctx("toolkit"); /* another process, in effect: the toolkit digest gives the same key */
  assert_int_equal(build(ctx, &d, again, &origin), KVJIT_OK);
  assert_int_equal(origin, KVJIT_FROM_DISK);
  assert_string_equal(key, again);
  kvjit_context_destroy(ctx);
}

static void test_editing_an_include_dir_header_rebuilds(void **state) {
  (void)state;
  char inc[512], opt[600];
  sub_dir(inc, sizeof inc, "inc-a");
  write_file(inc, "sub/val.h", "#pragma once\n#include \"other.h\"\n#define VAL (40 + OTHER)\n");
  write_file(inc, "sub/other.h", "#define OTHER 2\n");
  write_file(inc, "other.h", "#error the includer's own dir comes first for \"...\"\n");
  snprintf(opt, sizeof opt, "-I%s", inc);
  const char *options[] = {opt};
  kvjit_program_desc d = desc_of("#include \"sub/val.h\"\nextern \"C\" __global__ void k(int *x) { *x = VAL; }\n",
                                 options, 1);
  kvjit_context *ctx = make_ctx("edit");
  char k1[33], k2[33], k3[33];
  kvjit_origin origin = 0;
  assert_int_equal(build(ctx, &d, k1, &origin), KVJIT_OK);
  assert_int_equal(origin, KVJIT_FROM_COMPILE);
  assert_int_equal(build(ctx, &d, k2, &origin), KVJIT_OK);
  assert_int_equal(origin, KVJIT_FROM_MEMORY);
  assert_string_equal(k1, k2);

  /* The header the program includes from its own dir changes: a new key, a new compile. */
  write_file(inc, "sub/other.h", "#define OTHER 3 /* edited */\n");
  assert_int_equal(build(ctx, &d, k3, &origin), KVJIT_OK);
  assert_int_equal(origin, KVJIT_FROM_COMPILE);
  assert_string_not_equal(k1, k3);

  /* Even to something that does not compile: never the old cubin from disk. */
  write_file(inc, "sub/other.h", "#error edited to an error\n");
  kvjit_context_destroy(ctx);
  ctx = make_ctx("edit");
  kvjit_program *p = NULL;
  assert_int_equal(kvjit_program_build(ctx, &p, &origin, &d), KVJIT_ERR_COMPILE);
  assert_non_null(strstr(kvjit_program_log(p), "edited to an error"));
  assert_non_null(strstr(kvjit_program_log(p), "sub/other.h")); /* a readable name, not a path */
  assert_null(strstr(kvjit_program_log(p), tmpdir));
  kvjit_context_destroy(ctx);
}

static void test_the_same_headers_elsewhere_hit(void **state) {
  (void)state;
  char a[512], b[512], opt_a[600], opt_b[600];
  sub_dir(a, sizeof a, "copy-a");
  sub_dir(b, sizeof b, "elsewhere/copy-b");
  const char *h = "#define WIDTH 128\n";
  write_file(a, "w.h", h);
  write_file(b, "w.h", h);
  snprintf(opt_a, sizeof opt_a, "-I%s", a);
  snprintf(opt_b, sizeof opt_b, "--include-path=%s", b);
  const char *src = "#include <w.h>\nextern \"C\" __global__ void k(int *x) { *x = WIDTH; }\n";
  const char *options_a[] = {"-DUNUSED=1", opt_a};
  const char *options_b[] = {"-DUNUSED=1", "-I", b};
  const char *options_c[] = {"-DUNUSED=1", opt_b};
  kvjit_program_desc da = desc_of(src, options_a, 2), db = desc_of(src, options_b, 3), dc = desc_of(src, options_c, 2);
  kvjit_context *ctx = make_ctx("copies");
  char ka[33], kb[33], kc[33];
  kvjit_origin origin = 0;
  assert_int_equal(build(ctx, &da, ka, &origin), KVJIT_OK);
  assert_int_equal(origin, KVJIT_FROM_COMPILE);
  kvjit_context_destroy(ctx);
  ctx = make_ctx("copies");
  assert_int_equal(build(ctx, &db, kb, &origin), KVJIT_OK);
  assert_int_equal(origin, KVJIT_FROM_DISK);
  assert_int_equal(build(ctx, &dc, kc, &origin), KVJIT_OK);
  assert_int_equal(origin, KVJIT_FROM_MEMORY);
  assert_string_equal(ka, kb);
  assert_string_equal(ka, kc);
  kvjit_context_destroy(ctx);
}

static void test_in_memory_headers_and_absent_ones(void **state) {
  (void)state;
  kvjit_context *ctx = make_ctx("memory");
  /* "c.h" from a/b.h is a/c.h, as it would be on disk. */
  kvjit_header h[] = {{"a/b.h", "#include \"c.h\"\n#define B (C + 1)\n"}, {"a/c.h", "#define C 4\n"}};
  kvjit_program_desc d = desc_of("#include \"a/b.h\"\n#if 0\n#include \"nowhere.h\"\n#endif\n"
                                 "extern \"C\" __global__ void k(int *x) { *x = B; }\n",
                                 NULL, 0);
  d.headers = h;
  d.num_headers = 2;
  char k1[33], k2[33];
  kvjit_origin origin = 0;
  assert_int_equal(build(ctx, &d, k1, &origin), KVJIT_OK);
  h[1].source = "#define C 5\n";
  assert_int_equal(build(ctx, &d, k2, &origin), KVJIT_OK);
  assert_string_not_equal(k1, k2);

  /* An absent header is keyed as absent: once it exists in an include dir, the key changes. */
  char inc[512], opt[600], k3[33], k4[33];
  sub_dir(inc, sizeof inc, "absent");
  assert_int_equal(mkdir(inc, 0700), 0);
  snprintf(opt, sizeof opt, "-I%s", inc);
  const char *options[] = {opt};
  d.options = options;
  d.num_options = 1;
  assert_int_equal(build(ctx, &d, k3, &origin), KVJIT_OK);
  assert_string_equal(k2, k3); /* an include dir with nothing the program reads changes nothing */
  write_file(inc, "nowhere.h", "#error never read: under #if 0\n");
  assert_int_equal(build(ctx, &d, k4, &origin), KVJIT_OK);
  assert_string_not_equal(k3, k4);
  kvjit_context_destroy(ctx);
}

static void test_the_working_directory_is_never_searched(void **state) {
  (void)state;
  char dir[512], cwd[1024];
  sub_dir(dir, sizeof dir, "cwd");
  write_file(dir, "cwd_only.h", "#define FROM_CWD 1\n");
  assert_non_null(getcwd(cwd, sizeof cwd));
  assert_int_equal(chdir(dir), 0);
  kvjit_context *ctx = make_ctx("cwd-cache");
  kvjit_program_desc d = desc_of("#include \"cwd_only.h\"\nextern \"C\" __global__ void k(int *x) { *x = FROM_CWD; }\n",
                                 NULL, 0);
  kvjit_program *p = NULL;
  kvjit_status st = kvjit_program_build(ctx, &p, NULL, &d);
  assert_int_equal(chdir(cwd), 0);
  /* NVRTC itself would read ./cwd_only.h, which no key covers. */
  assert_int_equal(st, KVJIT_ERR_COMPILE);
  assert_non_null(strstr(kvjit_program_log(p), "cwd_only.h"));
  kvjit_context_destroy(ctx);
}

static void test_what_cannot_be_keyed_is_refused(void **state) {
  (void)state;
  kvjit_context *ctx = make_ctx("refused");
  kvjit_program_desc d = desc_of("#define H <cuda_fp16.h>\n#include H\nextern \"C\" __global__ void k() {}\n", NULL, 0);
  kvjit_program *p = NULL;
  assert_int_equal(kvjit_program_build(ctx, &p, NULL, &d), KVJIT_ERR_UNSUPPORTED);
  assert_non_null(strstr(kvjit_last_error(), "headers_test.cu:2"));
  assert_non_null(strstr(kvjit_last_error(), "computed"));
  const char *pch[] = {"--pch"}, *create[] = {"--create-pch=x.pch"}, *syntax[] = {"-fdevice-syntax-only"};
  const char *const *bad[] = {pch, create, syntax};
  for (int i = 0; i < 3; i++) {
    d = desc_of("extern \"C\" __global__ void k() {}\n", bad[i], 1);
    assert_int_equal(kvjit_program_build(ctx, &p, NULL, &d), KVJIT_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(kvjit_last_error(), "desc->options[0]"));
  }
  const char *no_dir[] = {"-I"};
  d = desc_of("extern \"C\" __global__ void k() {}\n", no_dir, 1);
  assert_int_equal(kvjit_program_build(ctx, &p, NULL, &d), KVJIT_ERR_INVALID_ARGUMENT);
  kvjit_context_destroy(ctx);
}

static void test_pre_include_resolves_like_an_include(void **state) {
  (void)state;
  char inc[512], opt[600];
  sub_dir(inc, sizeof inc, "pre");
  write_file(inc, "config.h", "#define CONFIGURED 9\n");
  snprintf(opt, sizeof opt, "-I%s", inc);
  const char *options[] = {opt, "--pre-include=config.h"};
  kvjit_program_desc d = desc_of("extern \"C\" __global__ void k(int *x) { *x = CONFIGURED; }\n", options, 2);
  kvjit_context *ctx = make_ctx("pre-cache");
  char k1[33], k2[33];
  kvjit_origin origin = 0;
  assert_int_equal(build(ctx, &d, k1, &origin), KVJIT_OK);
  write_file(inc, "config.h", "#define CONFIGURED 10\n");
  assert_int_equal(build(ctx, &d, k2, &origin), KVJIT_OK);
  assert_int_equal(origin, KVJIT_FROM_COMPILE);
  assert_string_not_equal(k1, k2);
  kvjit_context_destroy(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_toolkit_headers_need_no_option),
      cmocka_unit_test(test_editing_an_include_dir_header_rebuilds),
      cmocka_unit_test(test_the_same_headers_elsewhere_hit),
      cmocka_unit_test(test_in_memory_headers_and_absent_ones),
      cmocka_unit_test(test_the_working_directory_is_never_searched),
      cmocka_unit_test(test_what_cannot_be_keyed_is_refused),
      cmocka_unit_test(test_pre_include_resolves_like_an_include),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
