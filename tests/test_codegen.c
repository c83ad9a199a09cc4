/*
 * store_kv_cache code generation without a GPU: plans (automatic split, lanes, vector width, PDL),
 * the generated source, fast keys and cache keys, and real NVRTC compiles through prewarm.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "codegen.h"
#include "key.h"
#include "kvjit.h"

static kvjit_store_kv_plan make(int arch, int64_t k, int64_t v, int vec, kvjit_index_type it, kvjit_pdl_mode pdl,
                                int split, int cls) {
  kvjit_store_kv_plan p;
  kvjit_status st = kvjit_store_kv_plan_make(&p, arch, k, v, vec, it, pdl, split, cls);
  if (st != KVJIT_OK) fail_msg("plan_make(%d, %lld, %lld, %d, split %d, class %d): %s", arch, (long long)k,
                               (long long)v, vec, split, cls, kvjit_last_error());
  return p;
}

static void test_vec_of(void **state) {
  (void)state;
  assert_int_equal(kvjit_store_kv_vec_of(0), 16);
  assert_int_equal(kvjit_store_kv_vec_of(256), 16);
  assert_int_equal(kvjit_store_kv_vec_of(0x1000 | 8), 8);
  assert_int_equal(kvjit_store_kv_vec_of(196), 4);
  assert_int_equal(kvjit_store_kv_vec_of(0x7f0000000002ull), 2);
  assert_int_equal(kvjit_store_kv_vec_of(3), 1);
}

static void test_auto_split(void **state) {
  (void)state;
  /* Decode class (1 access per lane per row): slices of at most 32 x 16 B. */
  assert_int_equal(kvjit_store_kv_auto_split(128, 128, 16, 1), 1);
  assert_int_equal(kvjit_store_kv_auto_split(512, 512, 16, 1), 1);
  assert_int_equal(kvjit_store_kv_auto_split(1024, 1024, 16, 1), 2);
  assert_int_equal(kvjit_store_kv_auto_split(2048, 2048, 16, 1), 4);
  assert_int_equal(kvjit_store_kv_auto_split(8192, 8192, 16, 1), 16);
  /* Large class (2 per lane): half the split. */
  assert_int_equal(kvjit_store_kv_auto_split(8192, 8192, 16, 2), 8);
  assert_int_equal(kvjit_store_kv_auto_split(1024, 1024, 16, 2), 1);
  /* Odd rows: 196 B at 4 B is 49 vectors, split 7 gives slices of 7. */
  assert_int_equal(kvjit_store_kv_auto_split(196, 196, 4, 1), 7);
  /* Asymmetric rows: the split divides both (72 and 64 vectors); the wider row sets the size. */
  assert_int_equal(kvjit_store_kv_auto_split(1152, 1024, 16, 1), 4);
  /* K only. */
  assert_int_equal(kvjit_store_kv_auto_split(4096, 0, 16, 1), 8);
  /* A prime number of vectors: the next divisor up (one vector per slice); none at all: 1. */
  assert_int_equal(kvjit_store_kv_auto_split(16 * 1031, 16 * 1031, 16, 1), 1031);
  assert_int_equal(kvjit_store_kv_auto_split(16 * 1031, 16, 16, 1), 1);
}

static void test_lanes(void **state) {
  (void)state;
  assert_int_equal(kvjit_store_kv_lanes(8, 1), 8);
  assert_int_equal(kvjit_store_kv_lanes(8, 2), 4);
  assert_int_equal(kvjit_store_kv_lanes(7, 1), 8);
  assert_int_equal(kvjit_store_kv_lanes(32, 1), 32);
  assert_int_equal(kvjit_store_kv_lanes(512, 1), 32);
  assert_int_equal(kvjit_store_kv_lanes(1, 1), 1);
}

static void test_plan_rules(void **state) {
  (void)state;
  /* 128 B rows: 8 lanes x 16 B, one access per lane, in every batch class. */
  kvjit_store_kv_plan p = make(90, 128, 128, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 0);
  assert_int_equal(p.split, 1);
  assert_int_equal(p.vec, 16);
  assert_int_equal(p.lanes, 8);
  assert_int_equal(p.pdl, 1);
  assert_int_equal(p.block, KVJIT_STORE_KV_BLOCK);
  p = make(90, 128, 128, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 2);
  assert_int_equal(p.lanes, 8);
  assert_int_equal(p.pdl, 1); /* PDL stays on for large batches of narrow rows (measured faster) */
  p = make(90, 8192, 8192, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 2);
  assert_int_equal(p.pdl, 1);
  assert_int_equal(p.split, 16);
  p = make(90, 8192, 8192, 16, KVJIT_INDEX_INT32, KVJIT_PDL_AUTO, 0, 0);
  assert_int_equal(p.split, 16);
  assert_int_equal(p.lanes, 32);
  assert_int_equal(p.index64, 0);
  /* PDL auto before sm_90 is off; forced off stays off. */
  assert_int_equal(make(80, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 0).pdl, 0);
  assert_int_equal(make(90, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_OFF, 0, 0).pdl, 0);
  assert_int_equal(make(90, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 0, 2).pdl, 1);
  /* Rows narrow the vector: 196 B -> 4 B; pointers narrow it too. */
  p = make(90, 196, 196, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 0);
  assert_int_equal(p.vec, 4);
  assert_int_equal(p.split, 7);
  assert_int_equal(p.lanes, 8);
  assert_int_equal(make(90, 256, 256, 2, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 0).vec, 2);
  /* An explicit split with slices that are not whole 16 B vectors narrows the vector. */
  p = make(90, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 64, 0);
  assert_int_equal(p.split, 64);
  assert_int_equal(p.vec, 4);
  assert_int_equal(p.lanes, 1);
  /* K only. */
  p = make(90, 576, 0, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 0);
  assert_int_equal(p.v_row_bytes, 0);
  assert_int_equal(p.split, 2);
  assert_int_equal(p.lanes, 32);
}

static void test_plan_errors(void **state) {
  (void)state;
  kvjit_store_kv_plan p;
  assert_int_equal(kvjit_store_kv_plan_make(&p, 80, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 0, 0),
                   KVJIT_ERR_UNSUPPORTED);
  assert_non_null(strstr(kvjit_last_error(), "pdl"));
  assert_int_equal(kvjit_store_kv_plan_make(&p, 90, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 3, 0),
                   KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "split: 3"));
  assert_int_equal(kvjit_store_kv_plan_make(&p, 90, 256, 128, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 256, 0),
                   KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "v_row_bytes 128"));
  assert_int_equal(kvjit_store_kv_plan_make(&p, 90, 0, 128, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 0),
                   KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "k_row_bytes"));
  assert_int_equal(kvjit_store_kv_plan_make(&p, 90, 256, 256, 12, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 0),
                   KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "vector_bytes"));
  assert_int_equal(kvjit_store_kv_plan_make(&p, 90, 256, 256, 16, (kvjit_index_type)7, KVJIT_PDL_AUTO, 0, 0),
                   KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "index_type"));
  assert_int_equal(kvjit_store_kv_plan_make(&p, 90, 256, 256, 16, KVJIT_INDEX_INT64, (kvjit_pdl_mode)5, 0, 0),
                   KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "pdl"));
  assert_int_equal(kvjit_store_kv_plan_make(&p, 0, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 0),
                   KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "arch"));
}

static void test_batch_classes(void **state) {
  (void)state;
  assert_int_equal(kvjit_store_kv_batch_class(1), 0);
  assert_int_equal(kvjit_store_kv_batch_class(16), 0);
  assert_int_equal(kvjit_store_kv_batch_class(17), 1);
  assert_int_equal(kvjit_store_kv_batch_class(4096), 1);
  assert_int_equal(kvjit_store_kv_batch_class(4097), 2);
  assert_int_equal(kvjit_store_kv_batch_class(INT64_MAX), 2);
  for (int c = 0; c < KVJIT_STORE_KV_BATCH_CLASSES; c++) {
    const kvjit_store_kv_class_rule *r = kvjit_store_kv_class_rule_get(c);
    assert_non_null(r);
    assert_int_equal(kvjit_store_kv_batch_class(r->max_batch), c);
  }
  assert_null(kvjit_store_kv_class_rule_get(KVJIT_STORE_KV_BATCH_CLASSES));
}

static void test_blocks(void **state) {
  (void)state;
  kvjit_store_kv_plan p = make(90, 128, 128, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 0);
  /* 8 lanes: 16 items per 128-thread block. */
  assert_int_equal(kvjit_store_kv_blocks(&p, 1), 1);
  assert_int_equal(kvjit_store_kv_blocks(&p, 16), 1);
  assert_int_equal(kvjit_store_kv_blocks(&p, 17), 2);
  p = make(90, 8192, 8192, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 0);
  /* split 16 x 32 lanes = 512 threads per item. */
  assert_int_equal(kvjit_store_kv_blocks(&p, 1), 4);
  assert_int_equal(kvjit_store_kv_blocks(&p, 0), 0);
  assert_int_equal(kvjit_store_kv_blocks(&p, INT64_MAX / 2), 0);
}

static int contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

static void test_source(void **state) {
  (void)state;
  kvjit_store_kv_plan p = make(90, 256, 512, 16, KVJIT_INDEX_INT32, KVJIT_PDL_ON, 2, 0);
  char *src = kvjit_store_kv_source(&p);
  assert_non_null(src);
  assert_true(contains(src, "#define KVJIT_K_ROW_BYTES 256\n"));
  assert_true(contains(src, "#define KVJIT_V_ROW_BYTES 512\n"));
  assert_true(contains(src, "#define KVJIT_SPLIT 2\n"));
  assert_true(contains(src, "#define KVJIT_VEC 16\n"));
  assert_true(contains(src, "#define KVJIT_LANES 16\n"));
  assert_true(contains(src, "#define KVJIT_BLOCK 128\n"));
  assert_true(contains(src, "#define KVJIT_INDEX_INT64 0\n"));
  assert_true(contains(src, "#define KVJIT_PDL 1\n"));
  /* The embedded template follows the prelude. */
  assert_true(contains(src, "kvjit_store_kv(const __grid_constant__ kvjit_store_kv_params p)"));
  assert_true(contains(src, "griddepcontrol.wait"));
  assert_true(contains(src, KVJIT_STORE_KV_OOB_COUNTER));
  assert_true(strstr(src, "#define KVJIT_PDL") < strstr(src, "extern \"C\" __global__"));
  free(src);

  p = make(90, 576, 0, 8, KVJIT_INDEX_INT64, KVJIT_PDL_OFF, 0, 0);
  src = kvjit_store_kv_source(&p);
  assert_non_null(src);
  assert_true(contains(src, "#define KVJIT_V_ROW_BYTES 0\n"));
  assert_true(contains(src, "#define KVJIT_VEC 8\n"));
  assert_true(contains(src, "#define KVJIT_INDEX_INT64 1\n"));
  assert_true(contains(src, "#define KVJIT_PDL 0\n"));
  free(src);
}

/* Each field on its own changes the source, the cache key and the fast key. */
static void test_distinct_keys(void **state) {
  (void)state;
  kvjit_store_kv_plan plans[] = {
      make(90, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 1, 0),
      make(89, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_OFF, 1, 0),
      make(90, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_OFF, 1, 0),
      make(90, 256, 256, 16, KVJIT_INDEX_INT32, KVJIT_PDL_ON, 1, 0),
      make(90, 256, 256, 8, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 1, 0),
      make(90, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 2, 0),
      make(90, 256, 256, 4, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 1, 2), /* narrower vector, large class */
      make(90, 256, 128, 16, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 1, 0),
      make(90, 128, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 1, 0),
      make(90, 256, 0, 16, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 1, 0),
  };
  enum { N = sizeof plans / sizeof plans[0] };
  kvjit_key keys[N];
  kvjit_fast_key fast[N];
  char *sources[N];
  for (int i = 0; i < N; i++) {
    sources[i] = kvjit_store_kv_source(&plans[i]);
    assert_non_null(sources[i]);
    kvjit_program_desc desc;
    kvjit_store_kv_desc(&plans[i], sources[i], &desc);
    assert_string_equal(desc.kernels[0], KVJIT_STORE_KV_KERNEL);
    assert_int_equal(desc.arch, plans[i].arch);
    kvjit_key_target target = {plans[i].arch, KVJIT_PAYLOAD_CUBIN, 13, 0};
    kvjit_key_compute(&keys[i], &desc, &target);
    fast[i] = kvjit_store_kv_plan_key(&plans[i]);
  }
  for (int i = 0; i < N; i++) {
    for (int j = i + 1; j < N; j++) {
      if (plans[i].arch == plans[j].arch) {
        if (strcmp(sources[i], sources[j]) == 0) fail_msg("plans %d and %d generate the same source", i, j);
      }
      if (kvjit_key_equal(&keys[i], &keys[j])) fail_msg("plans %d and %d share a cache key", i, j);
      if (fast[i].a == fast[j].a && fast[i].b == fast[j].b) fail_msg("plans %d and %d share a fast key", i, j);
    }
  }
  /* Same plan, same keys (deterministic). */
  kvjit_store_kv_plan again = make(90, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 1, 0);
  kvjit_fast_key f = kvjit_store_kv_plan_key(&again);
  assert_true(f.a == fast[0].a && f.b == fast[0].b);
  char *src = kvjit_store_kv_source(&again);
  assert_string_equal(src, sources[0]);
  free(src);
  for (int i = 0; i < N; i++) free(sources[i]);
}

/* Real NVRTC compiles for sm_90 into a temp cache dir: no driver needed. */
static void test_prewarm_compiles(void **state) {
  (void)state;
  char dir[] = "/tmp/kvjit-test-codegen-XXXXXX";
  assert_non_null(mkdtemp(dir));
  kvjit_context_options opt = KVJIT_CONTEXT_OPTIONS_INIT;
  opt.cache_dir = dir;
  opt.disable_cache = 0;
  opt.log = 0;
  kvjit_context *ctx = NULL;
  assert_int_equal(kvjit_context_create(&ctx, &opt), KVJIT_OK);

  kvjit_store_kv_variant variants[] = {
      {90, 256, 256, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 16}, /* auto: classes differ (lanes) */
      {90, 196, 196, KVJIT_INDEX_INT32, KVJIT_PDL_ON, 0, 16},   /* tail, 4 B accesses */
      {90, 576, 0, KVJIT_INDEX_INT64, KVJIT_PDL_OFF, 0, 4},     /* K only, narrow pointers */
      {90, 8192, 8192, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 1, 16}, /* wide slices: the round-by-round path */
  };
  for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
    unsigned compiled = 99, cached = 99;
    kvjit_status st = kvjit_store_kv_cache_prewarm(ctx, &variants[i], &compiled, &cached);
    if (st != KVJIT_OK) fail_msg("prewarm %zu: %s: %s", i, kvjit_status_name(st), kvjit_last_error());
    assert_true(compiled >= 1);
    assert_int_equal(cached, 0);
    unsigned compiled2 = 99, cached2 = 99;
    assert_int_equal(kvjit_store_kv_cache_prewarm(ctx, &variants[i], &compiled2, &cached2), KVJIT_OK);
    assert_int_equal(compiled2, 0);
    assert_int_equal(cached2, compiled);
  }
  /* Automatic 256 B rows: every batch class picks 16 lanes x 16 B, so one kernel serves all. */
  unsigned compiled = 0, cached = 0;
  kvjit_store_kv_variant sm80 = {80, 256, 256, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 16};
  assert_int_equal(kvjit_store_kv_cache_prewarm(ctx, &sm80, &compiled, &cached), KVJIT_OK);
  assert_int_equal(compiled, 1);
  /* PDL forced on before sm_90: refused before any compile. */
  kvjit_store_kv_variant bad = {80, 256, 256, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 0, 16};
  assert_int_equal(kvjit_store_kv_cache_prewarm(ctx, &bad, &compiled, &cached), KVJIT_ERR_UNSUPPORTED);
  assert_int_equal(compiled, 0);
  bad.pdl = KVJIT_PDL_AUTO;
  bad.split = 3;
  assert_int_equal(kvjit_store_kv_cache_prewarm(ctx, &bad, NULL, NULL), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "split"));
  assert_int_equal(kvjit_store_kv_cache_prewarm(NULL, &sm80, NULL, NULL), KVJIT_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvjit_store_kv_cache_prewarm(ctx, NULL, NULL, NULL), KVJIT_ERR_INVALID_ARGUMENT);

  kvjit_stats stats;
  assert_int_equal(kvjit_context_stats(ctx, &stats), KVJIT_OK);
  assert_int_equal(stats.compile_failures, 0);
  uint64_t removed = 0;
  kvjit_cache_clear(ctx, &removed);
  kvjit_context_destroy(ctx);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vec_of),          cmocka_unit_test(test_auto_split),
      cmocka_unit_test(test_lanes),           cmocka_unit_test(test_plan_rules),
      cmocka_unit_test(test_plan_errors),     cmocka_unit_test(test_batch_classes),
      cmocka_unit_test(test_blocks),          cmocka_unit_test(test_source),
      cmocka_unit_test(test_distinct_keys),   cmocka_unit_test(test_prewarm_compiles),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
