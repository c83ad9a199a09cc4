/*
 * Hostile round three (issue 24), the library's side: the one check of every file kvjit writes
 * outside its entries, packs that lie about their size refused at once, NVRTC options that write
 * files, an include that would block NVRTC, and a truthful origin when nothing was compiled.
 * (The CLI's side, the budget and -j are in test_cli.sh; the remote's in test_remote.c.)
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache.h"
#include "cache_target.h"
#include "kvjit.h"
#include "test_util.h"

static char tmp[256];

static int setup(void **state) {
  (void)state;
  return test_dir_make(tmp, sizeof tmp, "hostile3");
}

static int teardown(void **state) {
  (void)state;
  return test_dir_remove(tmp);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static kvjit_context *ctx_at(const char *dir, kvjit_compile_mode mode) {
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.cache_dir = dir;
  o.cache_path = "";
  o.log = 0;
  o.compile_mode = mode;
  kvjit_context *ctx = NULL;
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_OK);
  return ctx;
}

static kvjit_program_desc simple_desc(const char *source, const char *const *options, size_t num_options) {
  static const char *names[] = {"k"};
  kvjit_program_desc d = KVJIT_PROGRAM_DESC_INIT;
  d.name = "hostile3.cu";
  d.source = source;
  d.kernels = names;
  d.num_kernels = 1;
  d.options = options;
  d.num_options = num_options;
  d.arch = 90;
  return d;
}

/* Every kind of target a write outside kvjit's entries must refuse, made here (a FIFO, a char
 * device node when mknod is allowed, a dir, a link, and paths inside a cache dir). */
static void test_write_targets(void **state) {
  (void)state;
  char path[512], cache_dir[512];
  snprintf(cache_dir, sizeof cache_dir, "%s/cache", tmp);
  kvjit_context *ctx = ctx_at(cache_dir, KVJIT_COMPILE_ALWAYS);
  char src[] = "extern \"C\" __global__ void k(int *x) { x[0] = 1; }\n";
  kvjit_program_desc d = simple_desc(src, NULL, 0);
  assert_int_equal(kvjit_program_compile(ctx, NULL, &d), KVJIT_OK);
  const char *names[] = {"fifo", "chardev", "dir", "link", "cache/v2/lock", "cache/v2/x.pack", "cache/x.pack"};
  snprintf(path, sizeof path, "%s/fifo", tmp);
  assert_int_equal(mkfifo(path, 0600), 0);
  snprintf(path, sizeof path, "%s/chardev", tmp);
  int have_dev = mknod(path, S_IFCHR | 0600, makedev(1, 7)) == 0;
  snprintf(path, sizeof path, "%s/dir", tmp);
  assert_int_equal(mkdir(path, 0700), 0);
  snprintf(path, sizeof path, "%s/link", tmp);
  assert_int_equal(symlink("/nonexistent-kvjit-target", path), 0);
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (strcmp(names[i], "chardev") == 0 && !have_dev) continue;
    snprintf(path, sizeof path, "%s/%s", tmp, names[i]);
    struct stat before, after;
    int existed = lstat(path, &before) == 0;
    assert_int_equal(kvjit_cache_check_target(path, "test"), KVJIT_ERR_INVALID_ARGUMENT);
    uint64_t n = 99;
    assert_int_not_equal(kvjit_cache_export(ctx, path, 0, &n), KVJIT_OK);
    assert_non_null(strstr(kvjit_last_error(), "refused"));
    if (existed) {
      assert_int_equal(lstat(path, &after), 0);
      assert_int_equal(before.st_mode, after.st_mode);
      assert_int_equal(before.st_ino, after.st_ino);
    } else {
      assert_int_equal(lstat(path, &after), -1);
    }
  }
  /* Absent and regular targets outside a cache dir are fine. */
  snprintf(path, sizeof path, "%s/out.pack", tmp);
  assert_int_equal(kvjit_cache_check_target(path, "test"), KVJIT_OK);
  uint64_t n = 0;
  assert_int_equal(kvjit_cache_export(ctx, path, 0, &n), KVJIT_OK);
  assert_int_equal(n, 1);
  assert_int_equal(kvjit_cache_export(ctx, path, 0, &n), KVJIT_OK); /* replaces a regular file */
  kvjit_context_destroy(ctx);
}

/* A sparse 3 GiB pack that lies (about its count, or an entry's length) is refused in < 1 s. */
static void test_lying_packs_refused_fast(void **state) {
  (void)state;
  char path[512], dir[512];
  snprintf(path, sizeof path, "%s/lying.pack", tmp);
  snprintf(dir, sizeof dir, "%s/import", tmp);
  kvjit_context *ctx = ctx_at(dir, KVJIT_COMPILE_ALWAYS);
  const uint32_t counts[] = {0xffffffffu, 0x2000000u, 1u};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    uint8_t head[16] = {'K', 'V', 'J', 'I', 'T', 'P', 'A', 'K', 1, 0, 0, 0};
    for (int i = 0; i < 4; i++) head[12 + i] = (uint8_t)(counts[c] >> (8 * i));
    assert_int_equal(write(fd, head, sizeof head), (ssize_t)sizeof head);
    assert_int_equal(ftruncate(fd, (off_t)3 << 30), 0);
    close(fd);
    uint64_t imported = 9, present = 9, bad = 9;
    double t0 = now_s();
    kvjit_status st = kvjit_cache_import(ctx, path, &imported, &present, &bad);
    double took = now_s() - t0;
    printf("# 3 GiB sparse pack claiming %u entries: %s in %.3f s\n", counts[c], kvjit_status_name(st), took);
    assert_int_equal(st, KVJIT_ERR_CORRUPT);
    assert_true(took < 1.0);
    assert_int_equal(imported, 0);
  }
  unlink(path);
  kvjit_context_destroy(ctx);
}

/* NVRTC options that write files are refused like -o, before anything is compiled or written. */
static void test_file_writing_options_refused(void **state) {
  (void)state;
  char out[512], opt[600];
  snprintf(out, sizeof out, "%s/written-by-nvrtc", tmp);
  kvjit_context *ctx = ctx_at(tmp, KVJIT_COMPILE_ALWAYS);
  char src[] = "extern \"C\" __global__ void k(int *x) { x[0] = 2; }\n";
  const char *forms[] = {"--time=",       "-time=",       "--fdevice-time-trace=",         "-fdevice-time-trace=",
                         "--dependency-output=", "-Xptxas=-o", "--ptxas-options=--output-file=", "-Xptxas=--options-file="};
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    snprintf(opt, sizeof opt, "%s%s", forms[i], out);
    const char *options[] = {opt};
    kvjit_program_desc d = simple_desc(src, options, 1);
    assert_int_equal(kvjit_program_compile(ctx, NULL, &d), KVJIT_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(kvjit_last_error(), "refused"));
  }
  /* The separate-value form too. */
  const char *two[] = {"--time", out};
  kvjit_program_desc d = simple_desc(src, two, 2);
  assert_int_equal(kvjit_program_compile(ctx, NULL, &d), KVJIT_ERR_INVALID_ARGUMENT);
  struct stat st;
  assert_int_equal(stat(out, &st), -1);
  /* A harmless ptxas option still passes. */
  const char *fine[] = {"-Xptxas=-O3"};
  d = simple_desc(src, fine, 1);
  assert_int_equal(kvjit_program_compile(ctx, NULL, &d), KVJIT_OK);
  kvjit_context_destroy(ctx);
}

/* An include that names a FIFO (absolute, next to the source's include dir, or by -I) is refused
 * before NVRTC could open it and block. */
static void test_special_includes_refused(void **state) {
  (void)state;
  char fifo[512], incdir[512], src[1024], opt[600];
  snprintf(incdir, sizeof incdir, "%s/inc", tmp);
  assert_int_equal(mkdir(incdir, 0700), 0);
  snprintf(fifo, sizeof fifo, "%s/blocking.h", incdir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  kvjit_context *ctx = ctx_at(tmp, KVJIT_COMPILE_ALWAYS);
  alarm(60); /* a regression would hang in NVRTC's open: fail, do not hang CI */
  snprintf(src, sizeof src, "#include \"%s\"\nextern \"C\" __global__ void k(int *x) { x[0] = 3; }\n", fifo);
  kvjit_program_desc d = simple_desc(src, NULL, 0);
  assert_int_equal(kvjit_program_compile(ctx, NULL, &d), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "not a regular file"));
  snprintf(src, sizeof src, "#include <blocking.h>\nextern \"C\" __global__ void k(int *x) { x[0] = 4; }\n");
  snprintf(opt, sizeof opt, "-I%s", incdir);
  const char *options[] = {opt};
  d = simple_desc(src, options, 1);
  assert_int_equal(kvjit_program_compile(ctx, NULL, &d), KVJIT_ERR_INVALID_ARGUMENT);
  alarm(0);
  kvjit_context_destroy(ctx);
}

/* KVJIT_COMPILE=never and a miss: nothing was compiled, and the origin says so. */
static void test_origin_truthful_when_not_cached(void **state) {
  (void)state;
  char dir[512];
  snprintf(dir, sizeof dir, "%s/never", tmp);
  kvjit_context *ctx = ctx_at(dir, KVJIT_COMPILE_NEVER);
  char src[] = "extern \"C\" __global__ void k(int *x) { x[0] = 5; }\n";
  kvjit_program_desc d = simple_desc(src, NULL, 0);
  kvjit_program *p = NULL;
  kvjit_origin origin = KVJIT_FROM_COMPILE;
  assert_int_equal(kvjit_program_build(ctx, &p, &origin, &d), KVJIT_ERR_NOT_CACHED);
  assert_int_equal(origin, KVJIT_FROM_NOWHERE);
  origin = KVJIT_FROM_COMPILE;
  assert_int_equal(kvjit_program_compile(ctx, &origin, &d), KVJIT_ERR_NOT_CACHED);
  assert_int_not_equal(origin, KVJIT_FROM_COMPILE);
  kvjit_context_destroy(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_write_targets),
      cmocka_unit_test(test_lying_packs_refused_fast),
      cmocka_unit_test(test_file_writing_options_refused),
      cmocka_unit_test(test_special_includes_refused),
      cmocka_unit_test(test_origin_truthful_when_not_cached),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
