/*
 * The instructions of the op kernels do not depend on how they are compiled (issue 19): each
 * kernel's code (every .text section of its one-kernel cubin) is byte for byte the same
 *  - when it is one of many instances in one program (a prewarm bundle) as when it is alone, for
 *    sm_80, sm_90 and sm_100, over store plans of every kind and transfer plans;
 *  - with and without each compile-speed option kvjit may pass (a speed option never changes a
 *    kernel silently), -pch after another compile made the precompiled header in this process.
 * Real NVRTC, no GPU. A speed option is measured by bench/bench_jit.c.
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

#include "compile.h"
#include "cubin_util.h"
#include "internal_util.h"
#include "kvjit.h"
#include "store_kv_plan.h"
#include "transfer_kv_plan.h"

enum { MAX_PLANS = 16 };

/* One arch's programs: name expressions and the template they instantiate. */
typedef struct plan_set {
  kvjit_op_program store[MAX_PLANS], transfer[MAX_PLANS];
  size_t num_store, num_transfer;
} plan_set;

static void add_store(plan_set *s, int arch, int64_t k, int64_t v, int vec, kvjit_pdl_mode pdl, int split, int cls,
                      kvjit_dtype src, kvjit_dtype cache, kvjit_scale_kind scale, int64_t heads) {
  kvjit_store_kv_quant q;
  int quantize = 0;
  assert_int_equal(kvjit_store_kv_quant_resolve(&q, &quantize, src, cache, scale, heads), KVJIT_OK);
  kvjit_store_kv_plan plan;
  kvjit_status st = kvjit_store_kv_plan_make_quant(&plan, arch, k, v, vec, KVJIT_INDEX_INT64, pdl, split, cls,
                                                   quantize ? &q : NULL);
  if (st != KVJIT_OK) fail_msg("store plan sm_%d %lld: %s", arch, (long long)k, kvjit_last_error());
  assert_true(s->num_store < MAX_PLANS);
  assert_int_equal(kvjit_store_kv_program(&plan, &s->store[s->num_store++]), KVJIT_OK);
}

static void add_transfer_shape(plan_set *s, int arch, const kvjit_transfer_kv_shape *shape, int cls) {
  kvjit_transfer_kv_plan plan;
  if (kvjit_transfer_kv_plan_make(&plan, arch, shape, cls) != KVJIT_OK) fail_msg("transfer plan: %s", kvjit_last_error());
  assert_true(s->num_transfer < MAX_PLANS);
  assert_int_equal(kvjit_transfer_kv_program(&plan, &s->transfer[s->num_transfer++]), KVJIT_OK);
}

static void add_transfer(plan_set *s, int arch, int64_t k, int64_t v, kvjit_location src, kvjit_location dst,
                         int table, int split, int cls) {
  kvjit_transfer_kv_shape shape;
  kvjit_transfer_kv_shape_plain(&shape, k, v, src, dst);
  shape.index_type = KVJIT_INDEX_INT32;
  shape.split = split;
  shape.table = table;
  add_transfer_shape(s, arch, &shape, cls);
}

/* A converting transfer (issue 29): dequantizing fp8 on a load, quantizing on an offload. */
static void add_transfer_convert(plan_set *s, int arch, kvjit_dtype from, kvjit_dtype to, kvjit_scale_kind scale,
                                 int64_t heads, kvjit_location src, kvjit_location dst) {
  kvjit_transfer_kv_shape shape;
  kvjit_transfer_kv_shape_plain(&shape, 1024, 1024, src, dst);
  shape.src_dtype = from;
  shape.dst_dtype = to;
  shape.scale_kind = scale;
  shape.num_heads = heads;
  assert_int_equal(kvjit_transfer_kv_convert_resolve(&shape), KVJIT_OK);
  add_transfer_shape(s, arch, &shape, KVJIT_TRANSFER_KV_CLASS_MID);
}

/* Plans of every kind the store has (plain with and without PDL, evict-first, pairs, K only, a
 * masked tail, rounds; fp8 from f16/bf16/f32, per tensor / per head / none, the integer
 * conversion before sm_89) and the transfer's (host link, tables, pairs, rounds). */
static void make_plans(plan_set *s, int arch) {
  memset(s, 0, sizeof *s);
  const kvjit_pdl_mode pdl = arch >= 90 ? KVJIT_PDL_AUTO : KVJIT_PDL_OFF;
  const kvjit_dtype B = KVJIT_DTYPE_BYTES;
  add_store(s, arch, 1024, 1024, 16, pdl, 0, KVJIT_STORE_KV_CLASS_DECODE, B, B, KVJIT_SCALE_NONE, 0);
  add_store(s, arch, 1024, 1024, 16, KVJIT_PDL_OFF, 0, KVJIT_STORE_KV_CLASS_MID, B, B, KVJIT_SCALE_NONE, 0);
  add_store(s, arch, 128, 128, 16, pdl, 0, KVJIT_STORE_KV_CLASS_LARGE, B, B, KVJIT_SCALE_NONE, 0);
  add_store(s, arch, 576, 0, 8, pdl, 0, KVJIT_STORE_KV_CLASS_MID_SMALL, B, B, KVJIT_SCALE_NONE, 0);
  add_store(s, arch, 196, 196, 4, pdl, 0, KVJIT_STORE_KV_CLASS_DECODE, B, B, KVJIT_SCALE_NONE, 0);
  add_store(s, arch, 16384, 16384, 16, pdl, 1, KVJIT_STORE_KV_CLASS_MID, B, B, KVJIT_SCALE_NONE, 0);
  add_store(s, arch, 2048, 2048, 16, pdl, 0, KVJIT_STORE_KV_CLASS_DECODE, KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3,
            KVJIT_SCALE_PER_TENSOR, 0);
  add_store(s, arch, 1024, 1024, 16, pdl, 0, KVJIT_STORE_KV_CLASS_MID, KVJIT_DTYPE_F16, KVJIT_DTYPE_FP8_E5M2,
            KVJIT_SCALE_PER_HEAD, 8);
  add_store(s, arch, 512, 512, 16, pdl, 0, KVJIT_STORE_KV_CLASS_LARGE, KVJIT_DTYPE_F32, KVJIT_DTYPE_FP8_E4M3,
            KVJIT_SCALE_NONE, 0);
  add_store(s, arch, 8192, 8192, 16, pdl, 1, KVJIT_STORE_KV_CLASS_MID, KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E5M2,
            KVJIT_SCALE_PER_HEAD, 4);
  add_transfer(s, arch, 2048, 2048, KVJIT_LOCATION_DEVICE, KVJIT_LOCATION_HOST, 0, 0, 1);
  add_transfer(s, arch, 128, 128, KVJIT_LOCATION_DEVICE, KVJIT_LOCATION_DEVICE, 1, 0, 2);
  add_transfer(s, arch, 16384, 0, KVJIT_LOCATION_HOST, KVJIT_LOCATION_DEVICE, 1, 1, 0);
  add_transfer_convert(s, arch, KVJIT_DTYPE_FP8_E4M3, KVJIT_DTYPE_BF16, KVJIT_SCALE_PER_TENSOR, 0, KVJIT_LOCATION_HOST,
                       KVJIT_LOCATION_DEVICE);
  add_transfer_convert(s, arch, KVJIT_DTYPE_F16, KVJIT_DTYPE_FP8_E5M2, KVJIT_SCALE_PER_HEAD, 8, KVJIT_LOCATION_DEVICE,
                       KVJIT_LOCATION_HOST);
}

/* Compile @p n kernels of @p progs (one template) as one program, with @p extra options after the
 * op's own, leaving out the op's option @p without (when not NULL). */
static void compile_without(const kvjit_op_program *progs, size_t n, const char *const *extra, size_t num_extra,
                            const char *without, kvjit_compiled *out) {
  const char *kernels[MAX_PLANS], *options[8];
  for (size_t i = 0; i < n; i++) kernels[i] = progs[i].kernel;
  const kvjit_program_desc *d = &progs[0].desc;
  size_t num_options = 0;
  for (size_t i = 0; i < d->num_options; i++) {
    if (without == NULL || strcmp(d->options[i], without) != 0) options[num_options++] = d->options[i];
  }
  for (size_t i = 0; i < num_extra; i++) options[num_options++] = extra[i];
  kvjit_compile_input in = {0};
  in.name = d->name;
  in.source = d->source;
  in.options = options;
  in.num_options = num_options;
  in.kernels = kernels;
  in.kernels_given = kernels;
  in.num_kernels = n;
  kvjit_key_target t = {d->arch, KVJIT_PAYLOAD_CUBIN, 0, 0, 0};
  assert_int_equal(kvjit_nvrtc_version(&t.nvrtc_major, &t.nvrtc_minor), KVJIT_OK);
  kvjit_status st = kvjit_nvrtc_compile(out, &in, &t);
  if (st != KVJIT_OK) fail_msg("%s: %s\n%s", d->name, kvjit_last_error(), out->log);
}

static void compile(const kvjit_op_program *progs, size_t n, const char *const *extra, size_t num_extra,
                    kvjit_compiled *out) {
  compile_without(progs, n, extra, num_extra, NULL, out);
}

/* Each of @p n kernels alone against all of them in one program. */
static size_t compare_group(const kvjit_op_program *progs, size_t n) {
  kvjit_compiled group;
  compile(progs, n, NULL, 0, &group);
  size_t differ = 0;
  for (size_t i = 0; i < n; i++) {
    kvjit_compiled alone;
    compile(&progs[i], 1, NULL, 0, &alone);
    char why[512];
    if (cubin_text_differs(alone.payload, alone.payload_len, group.payload, group.payload_len, why, sizeof why)) {
      printf("sm_%d %s: alone and in a group of %zu differ: %s\n", progs[i].desc.arch, progs[i].kernel, n, why);
      differ++;
    }
    kvjit_compiled_free(&alone);
  }
  kvjit_compiled_free(&group);
  return differ;
}

static void test_group_code_is_the_kernels_own(void **state) {
  (void)state;
  static const int archs[] = {80, 90, 100};
  size_t differ = 0, kernels = 0;
  for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
    plan_set s;
    make_plans(&s, archs[a]);
    differ += compare_group(s.store, s.num_store) + compare_group(s.transfer, s.num_transfer);
    kernels += s.num_store + s.num_transfer;
  }
  printf("group vs alone: %zu kernels of sm_80/90/100, %zu differ\n", kernels, differ);
  assert_int_equal(differ, 0);
}

/* The speed options: each kernel alone with and without the option (the ops' own options lose
 * it for "without": -minimal is one of them). */
static const char *const speed_options[] = {"-minimal", "-pch"};

/* In a child process (a precompiled header is process state): 0 when every kernel's code is the
 * same with @p option, 10 when one differs. */
static int option_child(const char *option) {
  plan_set s;
  make_plans(&s, 90);
  int differ = 0;
  const char *extra[] = {option};
  kvjit_op_program *all[2] = {s.store, s.transfer};
  size_t counts[2] = {s.num_store, s.num_transfer};
  for (int o = 0; o < 2; o++) {
    for (size_t i = 0; i < counts[o]; i++) {
      kvjit_compiled plain, fast;
      /* Without: the op's options less this one; with: the op's options and this one, once. */
      const kvjit_program_desc *d = &all[o][i].desc;
      int has = 0;
      for (size_t j = 0; j < d->num_options; j++) has |= strcmp(d->options[j], option) == 0;
      compile_without(&all[o][i], 1, NULL, 0, option, &plain);
      compile(&all[o][i], 1, extra, has ? 0 : 1, &fast);
      char why[512];
      if (cubin_text_differs(plain.payload, plain.payload_len, fast.payload, fast.payload_len, why, sizeof why)) {
        printf("%s changes %s: %s\n", option, all[o][i].kernel, why);
        differ = 1;
      }
      kvjit_compiled_free(&plain);
      kvjit_compiled_free(&fast);
    }
  }
  fflush(stdout);
  return differ ? 10 : 0;
}

static void test_speed_options_keep_the_code(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof speed_options / sizeof speed_options[0]; i++) {
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    /* exit(), not _exit(): NVRTC removes the automatic PCH files it made at exit (else 4-7 MB are
     * left in /tmp per process). */
    if (pid == 0) exit(option_child(speed_options[i]));
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    printf("%s: %s\n", speed_options[i], WEXITSTATUS(status) == 0 ? "every kernel's code unchanged" : "CHANGES CODE");
    assert_int_equal(WEXITSTATUS(status), 0);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_group_code_is_the_kernels_own),
      cmocka_unit_test(test_speed_options_keep_the_code),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
