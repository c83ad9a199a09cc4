/*
 * Issue 19 item 4: NVRTC 13.0 leaks state from a compile with --Ofast-compile into every later
 * compile of the process. Detected here on the NVRTC in use (in a child process, so the suite's
 * own process stays clean): the same kernel compiled before and after one --Ofast-compile=max
 * compile, its .text section compared. Then the loader's answer, in another child: once a
 * state-leaking compile ran, later compiles are kept in memory, not published, and counted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "store_kv_plan.h"
#include "compile.h"
#include "cubin_util.h"
#include "internal_util.h"
#include "kvjit.h"
#include "test_util.h"

static char tmpdir[256];

/* A kernel whose code depends on optimisation: a by-value struct parameter and a loop. */
static const char *kernel_source =
    "struct params { const float *x; float *y; int n; float a, b; };\n"
    "extern \"C\" __global__ void saxpb(params p) {\n"
    "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += gridDim.x * blockDim.x)\n"
    "    p.y[i] = p.a * p.x[i] + p.b; }\n";
static const char *other_source = "extern \"C\" __global__ void other(int *x) { x[threadIdx.x] = threadIdx.x * 3; }\n";

static int compile_raw(const char *source, const char *kernel, const char *option, kvjit_compiled *out) {
  const char *options[] = {option ? option : "-std=c++17"};
  kvjit_compile_input in = {0};
  const char *kernels[] = {kernel};
  in.name = "leak.cu";
  in.source = source;
  in.options = options;
  in.num_options = 1;
  in.kernels = kernels;
  in.kernels_given = kernels;
  in.num_kernels = 1;
  in.leaks_state = option ? kvjit_nvrtc_leaks_state(option) : 0;
  kvjit_key_target t = {90, KVJIT_PAYLOAD_CUBIN, 0, 0, 0};
  kvjit_nvrtc_version(&t.nvrtc_major, &t.nvrtc_minor);
  return kvjit_nvrtc_compile(out, &in, &t) == KVJIT_OK;
}

/* Did @p kernel's code (.text.<kernel>) change across one --Ofast-compile=max compile? -1: error. */
static int changes(const char *source, const char *kernel, int *publishable_ok) {
  kvjit_compiled before, fast, after;
  if (!compile_raw(source, kernel, NULL, &before)) return -1;
  if (!compile_raw(other_source, "other", "--Ofast-compile=max", &fast)) return -1;
  if (!compile_raw(source, kernel, NULL, &after)) return -1;
  char section[320];
  snprintf(section, sizeof section, ".text.%s", before.lowered[0]);
  size_t a_len = 0, b_len = 0;
  const uint8_t *a = cubin_section(before.payload, before.payload_len, section, &a_len);
  const uint8_t *b = cubin_section(after.payload, after.payload_len, section, &b_len);
  if (a == NULL || b == NULL) return -1;
  int changed = a_len != b_len || memcmp(a, b, a_len) != 0;
  printf("leak: %s %zu bytes before, %zu after a --Ofast-compile=max compile: %s\n", section, a_len, b_len,
         changed ? "CHANGED (NVRTC leaks state)" : "identical");
  /* The loader's own flags: every compile after a leaking one is unpublishable. */
  *publishable_ok &= !after.publishable && fast.publishable == before.publishable;
  kvjit_compiled_free(&before);
  kvjit_compiled_free(&fast);
  kvjit_compiled_free(&after);
  return changed;
}

/* Child (a fresh process per kernel, so "before" is clean): exit 0 when its code is unchanged,
 * 10 when it changed, else a failure. @p which: "toy", or "store" (the store_kv_cache kernel,
 * where the leak was first seen). */
static int detect_child(const char *which) {
  int ok = 1, changed;
  if (strcmp(which, "store") == 0) {
    kvjit_store_kv_plan plan;
    if (kvjit_store_kv_plan_make(&plan, 90, 1024, 1024, 16, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 0, 0) != KVJIT_OK) return 2;
    kvjit_op_program store;
    if (kvjit_store_kv_program(&plan, &store) != KVJIT_OK) return 2;
    changed = changes(store.desc.source, store.kernel, &ok);
  } else {
    changed = changes(kernel_source, "saxpb", &ok);
  }
  if (changed < 0) return 3;
  if (!ok) return 4;
  return changed ? 10 : 0;
}

static int count_entries(const kvjit_cache_entry_info *e, void *user) {
  (void)e;
  ++*(int *)user;
  return 0;
}

/* Child: the loader keeps every compile after a leaking one out of the cache, and counts it. */
static int guard_child(const char *dir) {
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.cache_dir = dir;
  o.cache_path = "";
  o.disable_cache = 0;
  o.log = 0;
  kvjit_context *ctx = NULL;
  if (kvjit_context_create(&ctx, &o) != KVJIT_OK) return 2;
  const char *saxpb[] = {"saxpb"}, *other[] = {"other"};
  const char *fast_opts[] = {"--Ofast-compile=max"};
  kvjit_program_desc clean = KVJIT_PROGRAM_DESC_INIT, fast = KVJIT_PROGRAM_DESC_INIT, later = KVJIT_PROGRAM_DESC_INIT;
  clean.name = fast.name = later.name = "leak.cu";
  clean.source = later.source = kernel_source;
  clean.kernels = later.kernels = saxpb;
  clean.num_kernels = fast.num_kernels = later.num_kernels = 1;
  clean.arch = fast.arch = later.arch = 90;
  later.options = (const char *[]){"-DLATER=1"};
  later.num_options = 1;
  fast.source = other_source;
  fast.kernels = other;
  fast.options = fast_opts;
  fast.num_options = 1;
  kvjit_origin origin;
  if (kvjit_program_compile(ctx, &origin, &clean) != KVJIT_OK) return 3;
  if (kvjit_program_compile(ctx, &origin, &fast) != KVJIT_OK) return 4;
  kvjit_program *p = NULL;
  if (kvjit_program_build(ctx, &p, &origin, &later) != KVJIT_OK || origin != KVJIT_FROM_COMPILE) return 5;
  kvjit_stats s = KVJIT_STATS_INIT;
  kvjit_context_stats(ctx, &s);
  int entries = 0;
  kvjit_cache_list(ctx, 0, 1, count_entries, &entries, NULL);
  printf("guard: %llu compiles, %llu published, %llu kept in memory, %d entries\n", (unsigned long long)s.compiles,
         (unsigned long long)s.disk_writes, (unsigned long long)s.unpublished_compiles, entries);
  /* The first two were compiled by a clean process (the --Ofast-compile one too: it is keyed by
   * its option); the third is in memory only, and compile() of it does not publish it either. */
  if (s.compiles != 3 || s.disk_writes != 2 || s.unpublished_compiles != 1 || entries != 2) return 6;
  if (kvjit_program_compile(ctx, &origin, &later) != KVJIT_OK || origin != KVJIT_FROM_MEMORY) return 7;
  entries = 0;
  kvjit_cache_list(ctx, 0, 1, count_entries, &entries, NULL);
  kvjit_context_stats(ctx, &s);
  if (entries != 2 || s.unpublished_compiles != 1) return 8;
  kvjit_context_destroy(ctx);
  return 0;
}

static int run_self(const char *mode, const char *dir) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    execl("/proc/self/exe", "test_nvrtc_leak", mode, dir, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void test_detect_the_leak_on_this_nvrtc(void **state) {
  (void)state;
  int toy = run_self("detect", "toy"), store = run_self("detect", "store");
  if (toy != 0 && toy != 10) fail_msg("detection child (toy kernel) failed with %d", toy);
  if (store != 0 && store != 10) fail_msg("detection child (store kernel) failed with %d", store);
  int major = 0, minor = 0;
  kvjit_nvrtc_version(&major, &minor);
  printf("NVRTC %d.%d: a --Ofast-compile compile %s later compiles of the process\n", major, minor,
         toy == 10 || store == 10 ? "CHANGES" : "does not change");
}

static void test_the_loader_keeps_tainted_compiles_out_of_the_cache(void **state) {
  (void)state;
  char dir[512];
  snprintf(dir, sizeof dir, "%s/guard", tmpdir);
  assert_int_equal(run_self("guard", dir), 0);
}

static void test_which_options_leak(void **state) {
  (void)state;
  assert_true(kvjit_nvrtc_leaks_state("--Ofast-compile=max"));
  assert_true(kvjit_nvrtc_leaks_state("--Ofast-compile=mid"));
  assert_true(kvjit_nvrtc_leaks_state("-Ofc=min"));
  assert_false(kvjit_nvrtc_leaks_state("--Ofast-compile=0"));
  assert_false(kvjit_nvrtc_leaks_state("-O3"));
  assert_false(kvjit_nvrtc_leaks_state("-std=c++17"));
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "detect") == 0) return detect_child(argv[2]);
  if (argc == 3 && strcmp(argv[1], "guard") == 0) return guard_child(argv[2]);
  if (test_dir_make(tmpdir, sizeof tmpdir, "leak") != 0) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_which_options_leak),
      cmocka_unit_test(test_detect_the_leak_on_this_nvrtc),
      cmocka_unit_test(test_the_loader_keeps_tainted_compiles_out_of_the_cache),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  test_dir_remove(tmpdir);
  return failed ? 1 : 0;
}
