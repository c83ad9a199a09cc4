/* NVRTC through the public loader, no GPU needed: real compiles for several archs and every target
 * kind, disk hits, PTX fallback, compile-only objects and their logs, remembered failures,
 * canonical name expressions, memory-only mode, and a process without NVRTC. */
#include <dirent.h>
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

/* kvjit_context_reset_stats(): the counters start from zero again, and count on from there. */
static void test_reset_stats_starts_the_counters_again(void **state) {
  (void)state;
  kvjit_context *ctx = make_ctx("reset", 1);
  kvjit_program_desc d = desc_for(90);
  kvjit_program *p = NULL;
  assert_int_equal(kvjit_program_build(ctx, &p, NULL, &d), KVJIT_OK);
  kvjit_stats s = KVJIT_STATS_INIT;
  assert_int_equal(kvjit_context_stats(ctx, &s), KVJIT_OK);
  assert_int_equal(s.compiles, 1);
  assert_int_equal(kvjit_context_reset_stats(ctx), KVJIT_OK);
  assert_int_equal(kvjit_context_stats(ctx, &s), KVJIT_OK);
  assert_int_equal(s.compiles, 0);
  assert_int_equal(s.memory_hits, 0);
  assert_int_equal(kvjit_program_build(ctx, &p, NULL, &d), KVJIT_OK);
  assert_int_equal(kvjit_context_stats(ctx, &s), KVJIT_OK);
  assert_int_equal(s.compiles, 0);
  assert_int_equal(s.memory_hits, 1);
  assert_int_equal(kvjit_context_reset_stats(NULL), KVJIT_ERR_INVALID_ARGUMENT);
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

/* ---- the four kernels, built without a GPU ----------------------------------------- */

static const char *four_source =
    "#include <cuda_bf16.h>\n"
    "template <int N, typename T> __global__ void scale(T *x, T s) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < N) x[i] *= s; }\n"
    "extern \"C\" __global__ void to_bf16(__nv_bfloat16 *y, const float *x, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = __float2bfloat16(x[i]); }\n"
    "extern \"C\" __global__ void __launch_bounds__(256) block_sum(float *out, const float *in) {\n"
    "  extern __shared__ float tile[];\n"
    "  tile[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x]; __syncthreads();\n"
    "  for (unsigned s = blockDim.x / 2; s; s /= 2) {\n"
    "    if (threadIdx.x < s) tile[threadIdx.x] += tile[threadIdx.x + s]; __syncthreads(); }\n"
    "  if (threadIdx.x == 0) out[blockIdx.x] = tile[0]; }\n";

static void test_four_kernels_build_without_a_gpu(void **state) {
  (void)state;
  kvjit_context *ctx = make_ctx("four", 0);
  const char *names[] = {"scale<256, float>", "to_bf16", "block_sum"};
  kvjit_program_desc d = desc_for(90);
  d.source = four_source;
  d.kernels = names;
  d.num_kernels = 3;
  kvjit_program *p = NULL;
  kvjit_origin origin = 0;
  assert_int_equal(kvjit_program_build(ctx, &p, &origin, &d), KVJIT_OK);
  assert_int_equal(origin, KVJIT_FROM_COMPILE);
  assert_int_equal(kvjit_program_status(p), KVJIT_OK);
  assert_int_equal(kvjit_program_arch(p), 90);
  assert_int_equal(strlen(kvjit_program_key(p)), 32);
  assert_int_equal(kvjit_program_num_kernels(p), 3);
  assert_string_equal(kvjit_program_kernel_name(p, 0), "scale<256,float>");
  assert_string_equal(kvjit_program_lowered_name(p, 0), "_Z5scaleILi256EfEvPT0_S0_");
  assert_string_equal(kvjit_program_lowered_name(p, 2), "block_sum");
  assert_null(kvjit_program_lowered_name(p, 3));
  const void *bin = NULL;
  size_t bytes = 0;
  assert_int_equal(kvjit_program_binary(p, &bin, &bytes), KVJIT_OK);
  assert_true(bytes > 64);
  assert_memory_equal(bin, "\177ELF", 4); /* a cubin */
  kvjit_kernel *k = NULL;
  assert_int_equal(kvjit_program_kernel(p, &k, NULL, 0), KVJIT_ERR_INVALID_ARGUMENT); /* built, not loaded */
  assert_non_null(strstr(kvjit_last_error(), "not loaded"));

  /* A new context finds the same program on disk: same key, same bytes. */
  kvjit_context *other = make_ctx("four", 0);
  kvjit_program *q = NULL;
  assert_int_equal(kvjit_program_build(other, &q, &origin, &d), KVJIT_OK);
  assert_int_equal(origin, KVJIT_FROM_DISK);
  assert_string_equal(kvjit_program_key(p), kvjit_program_key(q));
  const void *bin2 = NULL;
  size_t bytes2 = 0;
  assert_int_equal(kvjit_program_binary(q, &bin2, &bytes2), KVJIT_OK);
  assert_int_equal(bytes, bytes2);
  assert_memory_equal(bin, bin2, bytes);
  assert_string_equal(kvjit_program_lowered_name(q, 0), "_Z5scaleILi256EfEvPT0_S0_");
  assert_string_equal(kvjit_program_log(q), ""); /* from disk */
  kvjit_context_destroy(other);
  kvjit_context_destroy(ctx);
}

static void test_a_failed_build_keeps_its_full_log_and_is_remembered(void **state) {
  (void)state;
  kvjit_context *ctx = make_ctx("fail", 0);
  kvjit_program_desc d = desc_for(90);
  d.source = "extern \"C\" __global__ void fill(int *x) {\n  x[0] = first_undefined;\n  x[1] = second_undefined;\n}\n";
  const char *k[] = {"fill"};
  d.kernels = k;
  d.num_kernels = 1;
  for (int i = 0; i < 3; i++) {
    assert_int_equal(kvjit_program_compile(ctx, NULL, &d), KVJIT_ERR_COMPILE);
    assert_non_null(strstr(kvjit_last_error(), "first_undefined")); /* the first error line */
  }
  kvjit_program *p = NULL;
  kvjit_origin origin = 0;
  assert_int_equal(kvjit_program_build(ctx, &p, &origin, &d), KVJIT_ERR_COMPILE);
  assert_non_null(p);
  assert_int_equal(origin, KVJIT_FROM_MEMORY);
  assert_int_equal(kvjit_program_status(p), KVJIT_ERR_COMPILE);
  /* The whole log, both errors with their positions in the user's file. */
  assert_non_null(strstr(kvjit_program_log(p), "test.cu(2): error"));
  assert_non_null(strstr(kvjit_program_log(p), "test.cu(3): error"));
  assert_non_null(strstr(kvjit_program_log(p), "second_undefined"));
  const void *bin;
  size_t bytes;
  assert_int_equal(kvjit_program_binary(p, &bin, &bytes), KVJIT_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvjit_program_num_kernels(p), 0);
  kvjit_stats s = KVJIT_STATS_INIT;
  assert_int_equal(kvjit_context_stats(ctx, &s), KVJIT_OK);
  assert_int_equal(s.compile_failures, 1); /* 4 calls, 1 NVRTC run */
  assert_int_equal(s.compiles, 0);
  kvjit_context_destroy(ctx);
}

static void test_name_expression_errors_point_at_the_callers_text(void **state) {
  (void)state;
  kvjit_context *ctx = make_ctx("names", 0);
  kvjit_program_desc d = desc_for(90);
  const char *k[] = {"fill", "scale<256, flot>"};
  d.kernels = k;
  kvjit_program *p = NULL;
  assert_int_equal(kvjit_program_build(ctx, &p, NULL, &d), KVJIT_ERR_COMPILE);
  assert_non_null(strstr(kvjit_last_error(), "kernels[1] \"scale<256, flot>\""));
  assert_non_null(strstr(kvjit_last_error(), "flot"));
  assert_null(strstr(kvjit_program_log(p), "__nv_name_map"));
  assert_non_null(strstr(kvjit_program_log(p), "kernels[1] \"scale<256, flot>\": error"));
  kvjit_context_destroy(ctx);
}

static void test_name_expressions_are_canonical(void **state) {
  (void)state;
  kvjit_context *ctx = make_ctx("canonical", 0);
  const char *spellings[][2] = {{"scale<128, float>", "fill"}, {"scale<128,float>", " fill "},
                                {"scale< 128 , float >", "&fill"}};
  char first[33] = "";
  for (int i = 0; i < 3; i++) {
    kvjit_program_desc d = desc_for(90);
    d.kernels = spellings[i];
    kvjit_program *p = NULL;
    kvjit_origin origin = 0;
    assert_int_equal(kvjit_program_build(ctx, &p, &origin, &d), KVJIT_OK);
    assert_int_equal(origin, i == 0 ? KVJIT_FROM_COMPILE : KVJIT_FROM_MEMORY);
    if (i == 0) snprintf(first, sizeof first, "%s", kvjit_program_key(p));
    assert_string_equal(kvjit_program_key(p), first);
    assert_int_equal(kvjit_program_compile(ctx, &origin, &d), KVJIT_OK);
    assert_int_equal(origin, KVJIT_FROM_DISK);
  }
  int counts[3] = {0, 0, 0};
  assert_int_equal(kvjit_cache_list(ctx, 0, 0, count_entry, counts, NULL), KVJIT_OK);
  assert_int_equal(counts[0], 1); /* one entry for the three spellings */
  kvjit_context_destroy(ctx);
}

/* ---- targets ------------------------------------------------------------------------------ */

typedef struct listed {
  int codes[32];
  int count;
} listed;

static int list_codes(const kvjit_cache_entry_info *e, void *user) {
  listed *l = user;
  if (l->count < 32) l->codes[l->count++] = e->arch;
  return 0;
}

static void test_every_target_kind_for_sm80_sm90_sm100(void **state) {
  (void)state;
  kvjit_context *ctx = make_ctx("kinds", 0);
  static const struct {
    const char *name;
    kvjit_status expect;
  } cases[] = {
      {"sm_80", KVJIT_OK},        {"sm_80a", KVJIT_ERR_UNSUPPORTED},  {"sm_80f", KVJIT_ERR_UNSUPPORTED},
      {"compute_80", KVJIT_OK},   {"sm_90", KVJIT_OK},                {"sm_90a", KVJIT_OK},
      {"sm_90f", KVJIT_ERR_UNSUPPORTED}, {"compute_90", KVJIT_OK},    {"compute_90a", KVJIT_OK},
      {"sm_100", KVJIT_OK},       {"sm_100a", KVJIT_OK},              {"sm_100f", KVJIT_OK},
      {"compute_100", KVJIT_OK},  {"compute_100a", KVJIT_OK},         {"compute_100f", KVJIT_OK},
  };
  char keys[16][33];
  int built = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int code = 0;
    assert_int_equal(kvjit_parse_target(cases[i].name, &code), KVJIT_OK);
    kvjit_program_desc d = desc_for(code);
    kvjit_program *p = NULL;
    kvjit_status st = kvjit_program_build(ctx, &p, NULL, &d);
    if (st != cases[i].expect) fail_msg("%s: %s (%s)", cases[i].name, kvjit_status_name(st), kvjit_last_error());
    if (st != KVJIT_OK) {
      /* One line that says what this NVRTC builds. */
      assert_non_null(strstr(kvjit_last_error(), cases[i].name));
      assert_non_null(strstr(kvjit_last_error(), "builds sm_XY for XY in {"));
      assert_non_null(strstr(kvjit_last_error(), "90"));
      assert_null(strchr(kvjit_last_error(), '\n'));
      continue;
    }
    assert_int_equal(kvjit_program_arch(p), code);
    const void *bin;
    size_t bytes;
    assert_int_equal(kvjit_program_binary(p, &bin, &bytes), KVJIT_OK);
    if (code & KVJIT_TARGET_PTX) {
      assert_non_null(strstr(bin, ".version"));
      char target_line[64];
      snprintf(target_line, sizeof target_line, ".target sm_%d%s", code & KVJIT_TARGET_CC_MASK,
               (code & KVJIT_TARGET_ARCH_SPECIFIC) ? "a" : (code & KVJIT_TARGET_FAMILY) ? "f" : "");
      assert_non_null(strstr(bin, target_line));
    } else {
      assert_memory_equal(bin, "\177ELF", 4);
    }
    snprintf(keys[built], 33, "%s", kvjit_program_key(p));
    for (int j = 0; j < built; j++) assert_string_not_equal(keys[j], keys[built]);
    built++;
  }
  /* Each kind is its own entry, listed with its own target code. */
  listed l = {{0}, 0};
  assert_int_equal(kvjit_cache_list(ctx, 0, 1, list_codes, &l, NULL), KVJIT_OK);
  assert_int_equal(l.count, built);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (cases[i].expect != KVJIT_OK) continue;
    int code = 0, found = 0;
    kvjit_parse_target(cases[i].name, &code);
    for (int j = 0; j < l.count; j++) found += l.codes[j] == code;
    if (found != 1) fail_msg("%s listed %d times", cases[i].name, found);
  }
  kvjit_context_destroy(ctx);
}

static void test_an_sm_90a_instruction_needs_the_sm_90a_target(void **state) {
  (void)state;
  kvjit_context *ctx = make_ctx("hopper", 1);
  const char *k[] = {"hopper"};
  kvjit_program_desc d = desc_for(90);
  d.source = "extern \"C\" __global__ void hopper(unsigned *out) {\n"
             "  asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");\n"
             "  out[threadIdx.x] = threadIdx.x; }\n";
  d.kernels = k;
  d.num_kernels = 1;
  kvjit_program *p = NULL;
  assert_int_equal(kvjit_program_build(ctx, &p, NULL, &d), KVJIT_ERR_COMPILE);
  assert_non_null(strstr(kvjit_program_log(p), "not supported on .target 'sm_90'"));
  d.arch = 90 | KVJIT_TARGET_ARCH_SPECIFIC;
  assert_int_equal(kvjit_program_build(ctx, &p, NULL, &d), KVJIT_OK);
  kvjit_context_destroy(ctx);
}

static void test_arch_0_without_a_gpu_says_so_once(void **state) {
  (void)state;
  int sm = 0;
  if (kvjit_current_sm(&sm) == KVJIT_OK) skip();
  kvjit_context *ctx = make_ctx("arch0", 0);
  kvjit_program_desc d = desc_for(0);
  assert_int_not_equal(kvjit_program_compile(ctx, NULL, &d), KVJIT_OK);
  const char *e = kvjit_last_error();
  assert_non_null(strstr(e, "no GPU"));
  const char *first = strstr(e, "desc->arch");
  assert_non_null(first);
  assert_null(strstr(first + 1, "desc->arch")); /* the message does not contain itself */
  kvjit_context_destroy(ctx);
}

/* ---- without NVRTC --------------------------------------------------------------------------- */

#define CHILD_CHECK(cond)                                                                        \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "no-nvrtc child: %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, #cond,  \
              kvjit_last_error());                                                               \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

/* Runs in a process started with KVJIT_NVRTC=/nonexistent over the cache dir @p dir. */
static int no_nvrtc_child(const char *dir) {
  int major, minor;
  CHILD_CHECK(kvjit_nvrtc_version(&major, &minor) == KVJIT_ERR_NO_NVRTC);
  CHILD_CHECK(strstr(kvjit_last_error(), "/nonexistent") != NULL);
  size_t n = 0;
  CHILD_CHECK(kvjit_nvrtc_archs(NULL, 0, &n) == KVJIT_ERR_NO_NVRTC);
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.cache_dir = dir;
  o.cache_path = "";
  o.disable_cache = 0;
  o.log = 0;
  kvjit_context *ctx = NULL;
  CHILD_CHECK(kvjit_context_create(&ctx, &o) == KVJIT_OK);
  kvjit_program_desc d = desc_for(90);
  kvjit_origin origin = 0;
  /* A warm cache serves: the key is computed for the NVRTC version the library was built for. */
  CHILD_CHECK(kvjit_program_compile(ctx, &origin, &d) == KVJIT_OK && origin == KVJIT_FROM_DISK);
  kvjit_program *p = NULL;
  CHILD_CHECK(kvjit_program_build(ctx, &p, &origin, &d) == KVJIT_OK && origin == KVJIT_FROM_DISK);
  const void *bin;
  size_t bytes;
  CHILD_CHECK(kvjit_program_binary(p, &bin, &bytes) == KVJIT_OK && bytes > 4);
  /* A miss is a clear error naming what was tried. */
  d = desc_for(80);
  CHILD_CHECK(kvjit_program_compile(ctx, &origin, &d) == KVJIT_ERR_NO_NVRTC);
  CHILD_CHECK(strstr(kvjit_last_error(), "/nonexistent") != NULL);
  CHILD_CHECK(kvjit_program_build(ctx, &p, &origin, &d) == KVJIT_ERR_NO_NVRTC);
  kvjit_stats s = KVJIT_STATS_INIT;
  CHILD_CHECK(kvjit_context_stats(ctx, &s) == KVJIT_OK && s.compile_failures == 0 && s.disk_hits == 2);
  kvjit_context_destroy(ctx);
  return 0;
}

static int run_self(const char *mode, const char *dir, const char *env_name, const char *env_value) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv(env_name, env_value, 1);
    execl("/proc/self/exe", "test_nvrtc", mode, dir, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void test_a_process_without_nvrtc_serves_a_warm_cache(void **state) {
  (void)state;
  kvjit_context *ctx = make_ctx("no-nvrtc", 0);
  kvjit_program_desc d = desc_for(90);
  assert_int_equal(kvjit_program_compile(ctx, NULL, &d), KVJIT_OK);
  kvjit_context_destroy(ctx);
  char dir[512];
  snprintf(dir, sizeof dir, "%s/no-nvrtc", tmpdir);
  assert_int_equal(run_self("no-nvrtc", dir, "KVJIT_NVRTC", "/nonexistent"), 0);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "no-nvrtc") == 0) return no_nvrtc_child(argv[2]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_versions_and_archs),
      cmocka_unit_test(test_compile_for_several_archs_then_hit),
      cmocka_unit_test(test_ptx_fallback_for_a_newer_gpu),
      cmocka_unit_test(test_compile_error_is_reported_and_remembered_in_counts),
      cmocka_unit_test(test_reset_stats_starts_the_counters_again),
      cmocka_unit_test(test_bad_descriptions),
      cmocka_unit_test(test_headers_and_options_reach_nvrtc),
      cmocka_unit_test(test_memory_only_mode),
      cmocka_unit_test(test_four_kernels_build_without_a_gpu),
      cmocka_unit_test(test_a_failed_build_keeps_its_full_log_and_is_remembered),
      cmocka_unit_test(test_name_expression_errors_point_at_the_callers_text),
      cmocka_unit_test(test_name_expressions_are_canonical),
      cmocka_unit_test(test_every_target_kind_for_sm80_sm90_sm100),
      cmocka_unit_test(test_an_sm_90a_instruction_needs_the_sm_90a_target),
      cmocka_unit_test(test_arch_0_without_a_gpu_says_so_once),
      cmocka_unit_test(test_a_process_without_nvrtc_serves_a_warm_cache),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
