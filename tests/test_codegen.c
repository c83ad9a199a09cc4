/*
 * store_kv_cache code generation without a GPU: plans (automatic split, lanes, vector width, PDL),
 * the kernel each plan names and the cache keys, and real NVRTC compiles through prewarm.
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

#include "store_kv_plan.h"
#include "fp8_ref.h"
#include "key.h"
#include "internal_util.h"
#include "kvjit.h"
#include "test_util.h"
#include "variant_util.h"


/* Batches of the classes in the tests below. */
#define DECODE 16
#define MID 1000
#define LARGE 65536

/* The plan a plain store of @p batch items gets. */
static kvjit_store_kv_plan make(int arch, int64_t k, int64_t v, int vec, kvjit_index_type it, kvjit_pdl_mode pdl,
                                int split, int64_t batch) {
  kvjit_store_kv_plan p;
  int cls = kvjit_store_kv_batch_class(batch);
  kvjit_status st = kvjit_store_kv_plan_make(&p, arch, k, v, vec, it, pdl, split, cls);
  if (st != KVJIT_OK) fail_msg("plan_make(%d, %lld, %lld, %d, split %d, batch %lld): %s", arch, (long long)k,
                               (long long)v, vec, split, (long long)batch, kvjit_last_error());
  return p;
}

static void test_vec_of(void **state) {
  (void)state;
  assert_int_equal(kvjit_rows_vec_of(0), 16);
  assert_int_equal(kvjit_rows_vec_of(256), 16);
  assert_int_equal(kvjit_rows_vec_of(0x1000 | 8), 8);
  assert_int_equal(kvjit_rows_vec_of(196), 4);
  assert_int_equal(kvjit_rows_vec_of(0x7f0000000002ull), 2);
  assert_int_equal(kvjit_rows_vec_of(3), 1);
}

static void test_auto_split(void **state) {
  (void)state;
  /* Decode class (1 access per lane per row): slices of at most 32 x 16 B. */
  assert_int_equal(kvjit_rows_auto_split(128, 128, 16, 1), 1);
  assert_int_equal(kvjit_rows_auto_split(512, 512, 16, 1), 1);
  assert_int_equal(kvjit_rows_auto_split(1024, 1024, 16, 1), 2);
  assert_int_equal(kvjit_rows_auto_split(2048, 2048, 16, 1), 4);
  assert_int_equal(kvjit_rows_auto_split(8192, 8192, 16, 1), 16);
  /* Large class (2 per lane): half the split. */
  assert_int_equal(kvjit_rows_auto_split(8192, 8192, 16, 2), 8);
  assert_int_equal(kvjit_rows_auto_split(1024, 1024, 16, 2), 1);
  /* Odd rows: 196 B at 4 B is 49 vectors, split 7 gives slices of 7. */
  assert_int_equal(kvjit_rows_auto_split(196, 196, 4, 1), 7);
  /* Asymmetric rows: the split divides both (72 and 64 vectors); the wider row sets the size. */
  assert_int_equal(kvjit_rows_auto_split(1152, 1024, 16, 1), 4);
  /* K only. */
  assert_int_equal(kvjit_rows_auto_split(4096, 0, 16, 1), 8);
  /* A prime number of vectors: the next divisor up (one vector per slice); none at all: 1. */
  assert_int_equal(kvjit_rows_auto_split(16 * 1031, 16 * 1031, 16, 1), 1031);
  assert_int_equal(kvjit_rows_auto_split(16 * 1031, 16, 16, 1), 1);
}

static void test_whole_split(void **state) {
  (void)state;
  assert_int_equal(kvjit_rows_whole_split(128, 128, 8, 1), 1);   /* 16 vectors: one slice */
  assert_int_equal(kvjit_rows_whole_split(96, 96, 8, 1), 3);     /* 12: 3 x 4 */
  assert_int_equal(kvjit_rows_whole_split(192, 192, 8, 1), 3);   /* 24: 3 x 8 */
  assert_int_equal(kvjit_rows_whole_split(1152, 1152, 16, 1), 9); /* 72: 9 x 8 */
  assert_int_equal(kvjit_rows_whole_split(8192, 8192, 16, 1), 16); /* 512: 16 x 32 */
  assert_int_equal(kvjit_rows_whole_split(8192, 8192, 16, 2), 8);
  assert_int_equal(kvjit_rows_whole_split(1152, 0, 16, 1), 9);    /* K only */
  assert_int_equal(kvjit_rows_whole_split(1152, 1024, 16, 1), 0); /* 72 and 64: none */
  assert_int_equal(kvjit_rows_whole_split(196, 196, 4, 1), 49);   /* 49: 49 x 1 */
  assert_int_equal(kvjit_rows_whole_split(100, 100, 16, 1), 0);   /* not whole vectors */
  assert_int_equal(kvjit_rows_whole_split(64, 128, 16, 1), 1);    /* 4 and 8: both powers of two */
}

static void test_lanes(void **state) {
  (void)state;
  assert_int_equal(kvjit_rows_lanes(8, 1), 8);
  assert_int_equal(kvjit_rows_lanes(8, 2), 4);
  assert_int_equal(kvjit_rows_lanes(7, 1), 8);
  assert_int_equal(kvjit_rows_lanes(32, 1), 32);
  assert_int_equal(kvjit_rows_lanes(512, 1), 32);
  assert_int_equal(kvjit_rows_lanes(1, 1), 1);
}

static void test_plan_rules(void **state) {
  (void)state;
  /* 128 B rows: one access per lane in every class; batches up to 512 take 8 B accesses (16
   * lanes), the others 16 B (8 lanes). */
  kvjit_store_kv_plan p = make(90, 128, 128, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, DECODE);
  assert_int_equal(p.split, 1);
  assert_int_equal(p.vec, 8);
  assert_int_equal(p.lanes, 16);
  assert_int_equal(p.pdl, 1);
  assert_int_equal(p.block, KVJIT_STORE_KV_BLOCK);
  assert_int_equal(p.items, 1);
  /* Slicing: {k row, v row, pointer vec, batch, vec, split, lanes}. Decode batches take
   * 8 B accesses for rows up to 256 B and slices that fill their lane groups (96 B at 8 B = 12
   * vectors: 3 slices of 4 lanes, not 16 lanes with 4 idle; 1152 B = 72 vectors: 9 slices of 8;
   * 196 B at 4 B = 49: 49 slices of one lane); the other classes take the fewest slices (7 x 8 lanes
   * for 196 B, one idle; 2 x 32 for a 576 B K-only row, 14 idle). Batches 17..512 follow both
   * decode rules. One access per lane at every size, 8 MiB and more per tensor included. */
  static const struct {
    int64_t k, v;
    int ptr_vec;
    int64_t batch;
    int vec, split, lanes;
  } slicing[] = {
      {128, 128, 16, MID, 16, 1, 8},      {256, 256, 16, DECODE, 8, 1, 32}, {512, 512, 16, DECODE, 16, 1, 32},
      {256, 256, 4, DECODE, 4, 2, 32},    {96, 96, 16, DECODE, 8, 3, 4},    {1152, 1152, 16, DECODE, 16, 9, 8},
      {1152, 1152, 16, MID, 16, 3, 32},   {196, 196, 16, MID, 4, 7, 8},     {196, 196, 16, DECODE, 4, 49, 1},
      {576, 0, 16, MID, 16, 2, 32},       {576, 0, 16, DECODE, 16, 9, 4},
      {8192, 8192, 16, 1024, 16, 16, 32}, {1024, 512, 16, 8192, 16, 2, 32},  {512, 512, 16, 16384, 16, 1, 32},
      {256, 256, 16, 32768, 16, 1, 16},   {2048, 2048, 16, 32768, 16, 4, 32}, {1152, 0, 16, 8192, 16, 3, 32},
      {128, 128, 16, 512, 8, 1, 16},      {256, 256, 16, 17, 8, 1, 32},     {196, 196, 16, 100, 4, 49, 1},
      {512, 512, 16, 100, 16, 1, 32},     {64, 0, 16, 200, 8, 1, 8},        {128, 128, 16, 513, 16, 1, 8},
      {96, 96, 16, 512, 8, 3, 4},         {96, 96, 16, 513, 16, 1, 8},      {1152, 1152, 16, 64, 16, 9, 8},
      {576, 0, 16, 300, 16, 9, 4},        {192, 192, 16, 17, 8, 3, 8},      {192, 192, 16, 4096, 16, 1, 16},
  };
  for (size_t i = 0; i < sizeof slicing / sizeof slicing[0]; i++) {
    p = make(90, slicing[i].k, slicing[i].v, slicing[i].ptr_vec, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, slicing[i].batch);
    if (p.vec != slicing[i].vec || p.split != slicing[i].split || p.lanes != slicing[i].lanes)
      fail_msg("slicing case %zu: vec %d split %d lanes %d, want %d %d %d", i, p.vec, p.split, p.lanes,
               slicing[i].vec, slicing[i].split, slicing[i].lanes);
  }
  p = make(90, 128, 128, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, LARGE);
  assert_int_equal(p.lanes, 8);
  assert_int_equal(p.pdl, 1); /* PDL stays on for large batches of narrow rows (measured faster) */
  assert_int_equal(p.items, 2); /* the largest batches of narrow rows: two items per lane group */
  assert_int_equal(make(90, 128, 128, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, MID).items, 1);
  /* One access per lane in every class: 8192 B rows in 16 slices of 32 lanes x 16 B. */
  static const int64_t one_access[] = {1, DECODE, 17, 512, MID, 1024, 32768, LARGE};
  for (size_t i = 0; i < sizeof one_access / sizeof one_access[0]; i++) {
    p = make(90, 8192, 8192, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, one_access[i]);
    assert_int_equal(p.pdl, 1);
    assert_int_equal(p.split, 16);
    assert_int_equal(p.lanes, 32);
    assert_int_equal(p.items, 1);
  }
  /* Items per group and evict-first stores: {arch, k row, v row, split, batch, items, evict_first}.
   * Two items only with one access per lane (an explicit split 1 of a 1 KiB row has more); evict-
   * first for decode batches of rows >= 1 KiB and every row at 17..32768, none beyond, sm_80+. */
  static const struct {
    int arch;
    int64_t k, v;
    int split;
    int64_t batch;
    int items, evict;
  } policy[] = {
      {90, 1024, 1024, 1, LARGE, 1, 0}, {90, 64, 64, 0, LARGE, 2, 0},       {90, 256, 256, 0, LARGE, 1, 0},
      {90, 1024, 1024, 0, DECODE, 1, 1}, {90, 576, 1024, 0, DECODE, 1, 1},  {90, 512, 512, 0, DECODE, 1, 0},
      {90, 128, 128, 0, MID, 1, 1},     {90, 8192, 8192, 0, MID, 1, 1},     {90, 8192, 8192, 0, LARGE, 1, 0},
      {90, 128, 128, 0, LARGE, 2, 0},   {75, 1024, 1024, 0, DECODE, 1, 0},  {75, 128, 128, 0, MID, 1, 0},
      {80, 1024, 1024, 0, DECODE, 1, 1}, {90, 8192, 8192, 0, 1024, 1, 1},
  };
  for (size_t i = 0; i < sizeof policy / sizeof policy[0]; i++) {
    p = make(policy[i].arch, policy[i].k, policy[i].v, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, policy[i].split,
             policy[i].batch);
    if (p.items != policy[i].items || p.evict_first != policy[i].evict)
      fail_msg("policy case %zu: items %d evict_first %d, want %d %d", i, p.items, p.evict_first, policy[i].items,
               policy[i].evict);
  }
  /* PDL trigger before the wait: decode-sized plain copies with PDL only. */
  static const int64_t trigger_batches[] = {1, DECODE, 17, MID, 8192, LARGE};
  for (size_t i = 0; i < sizeof trigger_batches / sizeof trigger_batches[0]; i++) {
    int64_t b = trigger_batches[i];
    assert_int_equal(make(90, 1024, 1024, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, b).pdl_trigger_first, b <= 16);
    assert_int_equal(make(90, 1024, 1024, 16, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 4, b).pdl_trigger_first, b <= 16);
    assert_int_equal(make(90, 1024, 1024, 16, KVJIT_INDEX_INT64, KVJIT_PDL_OFF, 0, b).pdl_trigger_first, 0);
    assert_int_equal(make(80, 1024, 1024, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, b).pdl_trigger_first, 0);
  }
  p = make(90, 8192, 8192, 16, KVJIT_INDEX_INT32, KVJIT_PDL_AUTO, 0, DECODE);
  assert_int_equal(p.split, 16);
  assert_int_equal(p.lanes, 32);
  assert_int_equal(p.index64, 0);
  /* PDL auto before sm_90 is off; forced off stays off. */
  assert_int_equal(make(80, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, DECODE).pdl, 0);
  assert_int_equal(make(90, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_OFF, 0, DECODE).pdl, 0);
  assert_int_equal(make(90, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 0, LARGE).pdl, 1);
  /* Rows narrow the vector (196 B -> 4 B, in the slicing table above); pointers narrow it too. */
  assert_int_equal(make(90, 256, 256, 2, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, DECODE).vec, 2);
  /* An explicit split with slices that are not whole 16 B vectors narrows the vector. */
  p = make(90, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 64, DECODE);
  assert_int_equal(p.split, 64);
  assert_int_equal(p.vec, 4);
  assert_int_equal(p.lanes, 1);
  /* K only (its slicing is in the table above). */
  p = make(90, 576, 0, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, MID);
  assert_int_equal(p.v_row_bytes, 0);
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
  static const struct {
    int64_t batch;
    int cls;
  } cases[] = {
      {1, KVJIT_STORE_KV_CLASS_DECODE},      {16, KVJIT_STORE_KV_CLASS_DECODE},
      {17, KVJIT_STORE_KV_CLASS_MID_SMALL},  {512, KVJIT_STORE_KV_CLASS_MID_SMALL},
      {513, KVJIT_STORE_KV_CLASS_MID},       {32768, KVJIT_STORE_KV_CLASS_MID},
      {32769, KVJIT_STORE_KV_CLASS_LARGE},   {INT64_MAX, KVJIT_STORE_KV_CLASS_LARGE},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int got = kvjit_store_kv_batch_class(cases[i].batch);
    if (got != cases[i].cls) fail_msg("batch %lld: class %d, want %d", (long long)cases[i].batch, got, cases[i].cls);
  }
  for (int c = 0; c < KVJIT_STORE_KV_CLASSES; c++) {
    const kvjit_store_kv_class_rule *r = kvjit_store_kv_class_rule_get(c);
    assert_non_null(r);
    assert_int_equal(kvjit_store_kv_batch_class(r->max_batch), c);
    if (c > 0) assert_true(r->max_batch > kvjit_store_kv_class_rule_get(c - 1)->max_batch);
  }
  assert_int_equal(kvjit_store_kv_class_rule_get(KVJIT_STORE_KV_CLASSES - 1)->max_batch, INT64_MAX);
  assert_null(kvjit_store_kv_class_rule_get(KVJIT_STORE_KV_CLASSES));
  assert_null(kvjit_store_kv_class_rule_get(-1));
}

static void test_blocks(void **state) {
  (void)state;
  kvjit_store_kv_plan p = make(90, 128, 128, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, MID);
  /* 8 lanes: 16 items per 128-thread block. */
  assert_int_equal(kvjit_store_kv_blocks(&p, 1), 1);
  assert_int_equal(kvjit_store_kv_blocks(&p, 16), 1);
  assert_int_equal(kvjit_store_kv_blocks(&p, 17), 2);
  assert_int_equal(kvjit_store_kv_blocks(&p, 65536), 4096);
  /* Two items per group halve the groups. */
  p = make(90, 128, 128, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, LARGE);
  assert_int_equal(p.items, 2);
  assert_int_equal(kvjit_store_kv_blocks(&p, 65536), 2048);
  assert_int_equal(kvjit_store_kv_blocks(&p, 65535), 2048);
  assert_int_equal(kvjit_store_kv_blocks(&p, 33), 2);
  assert_int_equal(kvjit_store_kv_blocks(&p, 1), 1);
  p = make(90, 8192, 8192, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, DECODE);
  /* split 16 x 32 lanes = 512 threads per item. */
  assert_int_equal(kvjit_store_kv_blocks(&p, 1), 4);
  assert_int_equal(kvjit_store_kv_blocks(&p, 0), 0);
  assert_int_equal(kvjit_store_kv_blocks(&p, INT64_MAX / 2), 0);
}

static int contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

/* The kernel a plan names: the template's arguments in its order, after the template as the source. */
static const char *kernel_of(const kvjit_store_kv_plan *p, kvjit_op_program *prog) {
  assert_int_equal(kvjit_store_kv_program(p, prog), KVJIT_OK);
  assert_ptr_equal(prog->desc.kernels[0], prog->kernel);
  assert_int_equal(prog->desc.num_kernels, 1);
  return prog->kernel;
}

static void test_source(void **state) {
  (void)state;
  kvjit_op_program prog;
  /* k, v, split, vec, lanes, block, int64, pdl, src dtype, fp8, scale, k head, v head, soft, items, evict, first */
  kvjit_store_kv_plan p = make(90, 256, 512, 16, KVJIT_INDEX_INT32, KVJIT_PDL_ON, 2, DECODE);
  assert_string_equal(kernel_of(&p, &prog), "kvjit_store_kv<256,512,2,16,16,128,0,1,0,0,0,0,0,0,1,0,1>");
  /* The source is the embedded template itself, the same for every plan. */
  const char *src = prog.desc.source;
  assert_true(contains(src, "kvjit_store_kv(const __grid_constant__ kvjit_store_kv_params p)"));
  assert_true(contains(src, "template <kvjit_i64 KRowBytes, kvjit_i64 VRowBytes, int Split, int Vec, int Lanes"));
  assert_true(contains(src, "griddepcontrol.wait"));
  assert_true(contains(src, KVJIT_STORE_KV_OOB_COUNTER));
  assert_null(strstr(src, "#define KVJIT_"));
  assert_string_equal(prog.desc.name, "kvjit_store_kv_cache.cu");
  assert_int_equal(prog.desc.arch, 90);

  p = make(90, 576, 0, 8, KVJIT_INDEX_INT64, KVJIT_PDL_OFF, 0, DECODE);
  assert_string_equal(kernel_of(&p, &prog), "kvjit_store_kv<576,0,9,8,8,128,1,0,0,0,0,0,0,0,1,0,0>");
  assert_ptr_equal(prog.desc.source, src);

  p = make(90, 128, 128, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, LARGE);
  assert_true(contains(kernel_of(&p, &prog), ",2,0,0>")); /* two items, plain stores, trigger after */
  p = make(90, 2048, 2048, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, DECODE);
  assert_true(contains(kernel_of(&p, &prog), ",1,1,1>")); /* one item, evict-first, trigger first */
  /* A name that cannot fit is an error, never a cut name. */
  char small[16];
  assert_int_equal(kvjit_store_kv_kernel_name(&p, small, sizeof small), -1);
}

/* Each field on its own changes the plan, the source and the cache key. */
static void test_distinct_keys(void **state) {
  (void)state;
  kvjit_store_kv_plan plans[] = {
      make(90, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 1, DECODE),
      make(89, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_OFF, 1, DECODE),
      make(90, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_OFF, 1, DECODE),
      make(90, 256, 256, 16, KVJIT_INDEX_INT32, KVJIT_PDL_ON, 1, DECODE),
      make(90, 256, 256, 4, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 1, DECODE), /* decode plans of 256 B rows take 8 B */
      make(90, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 2, DECODE),
      make(90, 256, 256, 4, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 1, LARGE), /* narrower vector, large class */
      make(90, 128, 128, 16, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 1, DECODE), /* one item, plain stores */
      make(90, 128, 128, 16, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 1, LARGE), /* two: only items differs */
      make(90, 128, 128, 16, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 1, MID), /* evict-first: only it differs */
      make(90, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 1, LARGE), /* trigger after the wait: only it differs
                                                                        from the first */
      make(90, 256, 128, 16, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 1, DECODE),
      make(90, 128, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 1, DECODE),
      make(90, 256, 0, 16, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 1, DECODE),
  };
  enum { N = sizeof plans / sizeof plans[0] };
  kvjit_key keys[N];
  char kernels[N][KVJIT_OP_MAX_KERNEL_NAME];
  for (int i = 0; i < N; i++) {
    kvjit_op_program prog;
    snprintf(kernels[i], sizeof kernels[i], "%s", kernel_of(&plans[i], &prog));
    assert_true(strncmp(kernels[i], KVJIT_STORE_KV_KERNEL "<", strlen(KVJIT_STORE_KV_KERNEL) + 1) == 0);
    assert_int_equal(prog.desc.arch, plans[i].arch);
    kvjit_key_target target = {plans[i].arch, KVJIT_PAYLOAD_CUBIN, 0, 13, 0};
    kvjit_key_compute(&keys[i], &prog.desc, &target);
  }
  for (int i = 0; i < N; i++) {
    for (int j = i + 1; j < N; j++) {
      if (plans[i].arch == plans[j].arch) {
        if (strcmp(kernels[i], kernels[j]) == 0) fail_msg("plans %d and %d name the same kernel", i, j);
      }
      if (kvjit_key_equal(&keys[i], &keys[j])) fail_msg("plans %d and %d share a cache key", i, j);
      if (memcmp(&plans[i], &plans[j], sizeof plans[i]) == 0) fail_msg("plans %d and %d are equal", i, j);
    }
  }
  /* Same plan, same kernel (deterministic). */
  kvjit_store_kv_plan again = make(90, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 1, DECODE);
  assert_memory_equal(&again, &plans[0], sizeof again);
  kvjit_op_program prog;
  assert_string_equal(kernel_of(&again, &prog), kernels[0]);
}

/* A context on a fresh temp cache dir (no driver needed), and its removal. */
static kvjit_context *temp_cache_context(char *dir, size_t capacity) {
  assert_int_equal(test_dir_make(dir, capacity, "codegen"), 0);
  kvjit_context_options opt = KVJIT_CONTEXT_OPTIONS_INIT;
  opt.cache_dir = dir;
  opt.disable_cache = 0;
  opt.log = 0;
  kvjit_context *ctx = NULL;
  assert_int_equal(kvjit_context_create(&ctx, &opt), KVJIT_OK);
  return ctx;
}

static void drop_temp_cache_context(kvjit_context *ctx, const char *dir) {
  kvjit_stats stats = KVJIT_STATS_INIT;
  assert_int_equal(kvjit_context_stats(ctx, &stats), KVJIT_OK);
  assert_int_equal(stats.compile_failures, 0);
  kvjit_cache_clear(ctx, NULL);
  kvjit_context_destroy(ctx);
  assert_int_equal(test_dir_remove(dir), 0);
}

/* Real NVRTC compiles for sm_90 into a temp cache dir: no driver needed. */
static void test_prewarm_compiles(void **state) {
  (void)state;
  char dir[256];
  kvjit_context *ctx = temp_cache_context(dir, sizeof dir);

  kvjit_variant variants[4];
  /* auto: classes differ (lanes); a tail, 4 B accesses; K only, narrow pointers; wide slices: the
   * round-by-round path. */
  assert_int_equal(store_variant(&variants[0], 90, 256, 256, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 16), KVJIT_OK);
  assert_int_equal(store_variant(&variants[1], 90, 196, 196, KVJIT_INDEX_INT32, KVJIT_PDL_ON, 0, 16), KVJIT_OK);
  assert_int_equal(store_variant(&variants[2], 90, 576, 0, KVJIT_INDEX_INT64, KVJIT_PDL_OFF, 0, 4), KVJIT_OK);
  assert_int_equal(store_variant(&variants[3], 90, 8192, 8192, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 1, 16), KVJIT_OK);
  for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
    unsigned compiled = 99, cached = 99;
    kvjit_status st = kvjit_variant_prewarm(ctx, &variants[i], &compiled, &cached);
    if (st != KVJIT_OK) fail_msg("prewarm %zu: %s: %s", i, kvjit_status_name(st), kvjit_last_error());
    assert_true(compiled >= 1);
    assert_int_equal(cached, 0);
    unsigned compiled2 = 99, cached2 = 99;
    assert_int_equal(kvjit_variant_prewarm(ctx, &variants[i], &compiled2, &cached2), KVJIT_OK);
    assert_int_equal(compiled2, 0);
    assert_int_equal(cached2, compiled);
  }
  /* Automatic 256 B rows: batches up to 512 take 32 lanes x 8 B, the others 16 lanes x 16 B, and
   * batches 17..32768 add evict-first stores: four kernels for the four classes. */
  unsigned compiled = 0, cached = 0;
  kvjit_variant sm80;
  assert_int_equal(store_variant(&sm80, 80, 256, 256, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 16), KVJIT_OK);
  assert_int_equal(kvjit_variant_prewarm(ctx, &sm80, &compiled, &cached), KVJIT_OK);
  assert_int_equal(compiled, 4);
  /* 1 KiB rows on sm_80: large (plain stores) and one plan for decode and both mid classes
   * (evict-first, 16 B; no PDL, so no trigger difference): two kernels. */
  kvjit_variant kib;
  assert_int_equal(store_variant(&kib, 80, 1024, 1024, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 16), KVJIT_OK);
  assert_int_equal(kvjit_variant_prewarm(ctx, &kib, &compiled, &cached), KVJIT_OK);
  assert_int_equal(compiled, 2);
  /* PDL forced on before sm_90: refused before any compile. */
  kvjit_variant bad;
  assert_int_equal(store_variant(&bad, 80, 256, 256, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 0, 16), KVJIT_OK);
  assert_int_equal(kvjit_variant_prewarm(ctx, &bad, &compiled, &cached), KVJIT_ERR_UNSUPPORTED);
  assert_int_equal(compiled, 0);
  variant_set(&bad, "pdl", KVJIT_PDL_AUTO);
  variant_set(&bad, "split", 3);
  assert_int_equal(kvjit_variant_prewarm(ctx, &bad, NULL, NULL), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "split"));
  assert_int_equal(kvjit_variant_prewarm(NULL, &sm80, NULL, NULL), KVJIT_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvjit_variant_prewarm(ctx, NULL, NULL, NULL), KVJIT_ERR_INVALID_ARGUMENT);

  drop_temp_cache_context(ctx, dir);
}

/* ---- quantize on store ------------------------------------------------------------------------ */

static kvjit_store_kv_plan make_q(int arch, int64_t k, int64_t v, int vec, int split, kvjit_dtype src,
                                  kvjit_dtype cache, kvjit_scale_kind scale, int64_t heads) {
  kvjit_store_kv_quant q = {src, cache, scale, heads};
  kvjit_store_kv_plan p;
  kvjit_status st = kvjit_store_kv_plan_make_quant(&p, arch, k, v, vec, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, split, 0, &q);
  if (st != KVJIT_OK) fail_msg("plan_make_quant(%d, %lld, %lld): %s", arch, (long long)k, (long long)v, kvjit_last_error());
  return p;
}

static void test_fp8_reference(void **state) {
  (void)state;
  static const struct {
    float x;
    uint8_t e4m3, e5m2;
  } cases[] = {
      {1.0f, 0x38, 0x3c},         {-1.0f, 0xb8, 0xbc},         {448.0f, 0x7e, 0x5f},
      {449.0f, 0x7e, 0x5f},       {464.0f, 0x7e, 0x5f},         {1e9f, 0x7e, 0x7b},
      {57344.0f, 0x7e, 0x7b},     {61440.0f, 0x7e, 0x7b},       {0.0f, 0x00, 0x00},
      {-0.0f, 0x80, 0x80},        {0x1p-9f, 0x01, 0x18},        {0x1p-10f, 0x00, 0x14},
      {0x1.8p-9f, 0x02, 0x1a},    {0x1p-6f, 0x08, 0x24},        {0x1p-16f, 0x00, 0x01},
      {0x1p-17f, 0x00, 0x00},     {0x1.8p-16f, 0x00, 0x02},     {1.0625f, 0x38, 0x3c},
      {1.1875f, 0x3a, 0x3d},      {1.125f, 0x39, 0x3c},         {1.375f, 0x3b, 0x3e},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint8_t a = fp8_ref_encode(cases[i].x, 1), b = fp8_ref_encode(cases[i].x, 0);
    if (a != cases[i].e4m3 || b != cases[i].e5m2) {
      fail_msg("%a: e4m3 0x%02x (want 0x%02x), e5m2 0x%02x (want 0x%02x)", (double)cases[i].x, a, cases[i].e4m3, b,
               cases[i].e5m2);
    }
  }
  assert_int_equal(fp8_ref_encode(INFINITY, 1), 0x7e);
  assert_int_equal(fp8_ref_encode(-INFINITY, 1), 0xfe);
  assert_int_equal(fp8_ref_encode(INFINITY, 0), 0x7b);
  assert_int_equal(fp8_ref_encode(NAN, 1), 0x7f);
  assert_int_equal(fp8_ref_encode(-NAN, 0), 0x7f);
  /* Every finite code decodes and encodes back to itself. */
  for (unsigned code = 0; code < 256; code++) {
    for (int e4m3 = 0; e4m3 <= 1; e4m3++) {
      double v = fp8_ref_decode((uint8_t)code, e4m3);
      if (isnan(v) || isinf(v)) continue;
      if (fp8_ref_encode((float)v, e4m3) != code) fail_msg("code 0x%02x (e4m3 %d) does not round-trip", code, e4m3);
    }
  }
  /* The fast search agrees with the exhaustive definition on random fp32 patterns. */
  uint64_t r = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 200000; i++) {
    r ^= r << 13;
    r ^= r >> 7;
    r ^= r << 17;
    uint32_t u = (uint32_t)r;
    if (i & 1) u = (u & 0x807fffffu) | (uint32_t)(100 + (r >> 40) % 50) << 23; /* near the fp8 ranges */
    float x = fp8_ref_bits_to_float(u);
    for (int e4m3 = 0; e4m3 <= 1; e4m3++) {
      if (fp8_ref_encode(x, e4m3) != fp8_ref_encode_slow(x, e4m3)) fail_msg("%a: fast and slow differ", (double)x);
    }
  }
  assert_true(fp8_ref_f16_to_float(0x3c00) == 1.0f);
  assert_true(fp8_ref_f16_to_float(0x0001) == 0x1p-24f);
  assert_true(fp8_ref_f16_to_float(0xfbff) == -65504.0f);
  assert_true(isinf(fp8_ref_f16_to_float(0x7c00)));
  assert_true(fp8_ref_bf16_to_float(0x3f80) == 1.0f);
}

static void test_fp8_plans(void **state) {
  (void)state;
  kvjit_store_kv_plan p = make_q(90, 256, 256, 16, 0, KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_TENSOR, 0);
  assert_int_equal(p.vec, 8); /* decode class: 4 bf16 per access, a shorter conversion chain per lane */
  assert_int_equal(p.evict_first, 0); /* quantizing plans keep plain stores and one item per group */
  assert_int_equal(p.pdl_trigger_first, 0); /* and the trigger after the wait */
  assert_int_equal(p.items, 1);
  kvjit_store_kv_plan wide = make_q(90, 2048, 2048, 16, 0, KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3,
                                    KVJIT_SCALE_PER_TENSOR, 0);
  assert_int_equal(wide.evict_first, 0);
  kvjit_store_kv_quant q_large = {KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_TENSOR, 0};
  kvjit_store_kv_plan large;
  assert_int_equal(kvjit_store_kv_plan_make_quant(&large, 90, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 2,
                                                  &q_large),
                   KVJIT_OK);
  assert_int_equal(large.vec, 16); /* large batches: 8 bf16 in, 8 fp8 bytes out per access */
  kvjit_store_kv_quant q_f32 = {KVJIT_DTYPE_F32, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_NONE, 0};
  assert_int_equal(kvjit_store_kv_plan_make_quant(&large, 90, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 0,
                                                  &q_f32),
                   KVJIT_OK);
  assert_int_equal(large.vec, 8); /* f32 at decode: 2 elements */
  assert_int_equal(p.fp8_soft, 0);
  assert_int_equal(p.src_dtype, KVJIT_DTYPE_BF16);
  p = make_q(80, 256, 256, 16, 0, KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_TENSOR, 0);
  assert_int_equal(p.fp8_soft, 1); /* no cvt before sm_89 */
  p = make_q(89, 256, 256, 16, 0, KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_TENSOR, 0);
  assert_int_equal(p.fp8_soft, 0);
  /* Per head: 8 heads of 12 f16 = 24 bytes: an access may not straddle two heads -> 8 bytes. */
  p = make_q(90, 192, 192, 16, 0, KVJIT_DTYPE_F16, KVJIT_DTYPE_FP8_E5M2, KVJIT_SCALE_PER_HEAD, 8);
  assert_int_equal(p.vec, 8);
  assert_int_equal(p.num_heads, 8);
  kvjit_op_program prog;
  /* Source dtype f16 (1), e5m2 (2), per head (2), 24-byte heads of K and V, the cvt instruction. */
  assert_true(contains(kernel_of(&p, &prog), ",1,2,2,24,24,0,"));
  assert_string_equal(prog.desc.name, "kvjit_store_kv_cache.cu");
  /* A plain plan's kernel says so: no source dtype, no fp8, no scale. */
  kvjit_store_kv_plan plain = make(90, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, DECODE);
  assert_true(contains(kernel_of(&plain, &prog), ",0,0,0,0,0,0,"));
  /* Errors. */
  kvjit_store_kv_quant q = {KVJIT_DTYPE_F32, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_NONE, 0};
  assert_int_equal(kvjit_store_kv_plan_make_quant(&p, 90, 256, 256, 2, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 0, &q),
                   KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "vector_bytes: 2 is narrower than one 4-byte f32 element"));
  assert_int_equal(kvjit_store_kv_plan_make_quant(&p, 90, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 128, 0, &q),
                   KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "split: 128 cuts"));
  int quantize = 7;
  kvjit_store_kv_quant out;
  assert_int_equal(kvjit_store_kv_quant_resolve(&out, &quantize, KVJIT_DTYPE_F16, KVJIT_DTYPE_F16, KVJIT_SCALE_NONE, 0),
                   KVJIT_OK);
  assert_int_equal(quantize, 0);
  kvjit_dtype d;
  assert_true(kvjit_dtype_parse("bfloat16", &d) == KVJIT_OK && d == KVJIT_DTYPE_BF16);
  assert_true(kvjit_dtype_parse("fp8_e5m2", &d) == KVJIT_OK && d == KVJIT_DTYPE_FP8_E5M2);
  assert_int_equal(kvjit_dtype_parse("int8", &d), KVJIT_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvjit_dtype_bytes(KVJIT_DTYPE_F32), 4);
  assert_int_equal(kvjit_dtype_bytes((kvjit_dtype)42), 0);
}

/* Every quantizing field on its own changes the plan and the cache key, and none collides with a
 * plain plan of the same rows. */
static void test_fp8_distinct_keys(void **state) {
  (void)state;
  kvjit_store_kv_plan plans[] = {
      make(90, 256, 256, 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, DECODE),
      make_q(90, 256, 256, 16, 0, KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_TENSOR, 0),
      make_q(90, 256, 256, 16, 0, KVJIT_DTYPE_F16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_TENSOR, 0),
      make_q(90, 256, 256, 16, 0, KVJIT_DTYPE_F32, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_TENSOR, 0),
      make_q(90, 256, 256, 16, 0, KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E5M2, KVJIT_SCALE_PER_TENSOR, 0),
      make_q(90, 256, 256, 16, 0, KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_NONE, 0),
      make_q(90, 256, 256, 16, 0, KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_HEAD, 2),
      make_q(90, 256, 256, 16, 0, KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_HEAD, 4),
      make_q(80, 256, 256, 16, 0, KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_TENSOR, 0),
      make_q(90, 256, 128, 16, 0, KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_TENSOR, 0),
      make_q(90, 256, 256, 16, 2, KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_TENSOR, 0),
  };
  enum { N = sizeof plans / sizeof plans[0] };
  kvjit_key keys[N];
  for (int i = 0; i < N; i++) {
    kvjit_op_program prog;
    kernel_of(&plans[i], &prog);
    kvjit_key_target target = {plans[i].arch, KVJIT_PAYLOAD_CUBIN, 0, 13, 0};
    kvjit_key_compute(&keys[i], &prog.desc, &target);
  }
  for (int i = 0; i < N; i++) {
    for (int j = i + 1; j < N; j++) {
      if (memcmp(&plans[i], &plans[j], sizeof plans[i]) == 0) fail_msg("plans %d and %d are equal", i, j);
      if (kvjit_key_equal(&keys[i], &keys[j])) fail_msg("plans %d and %d share a cache key", i, j);
    }
  }
}

/* Real compiles of the quantizing kernel: the cvt path (sm_90) and the integer path (sm_80),
 * every source dtype, both fp8 kinds, every scale kind, K only, and the round-by-round path. */
static void test_fp8_prewarm_compiles(void **state) {
  (void)state;
  char dir[256];
  kvjit_context *ctx = temp_cache_context(dir, sizeof dir);
  const int archs[] = {80, 90};
  const kvjit_dtype srcs[] = {KVJIT_DTYPE_F16, KVJIT_DTYPE_BF16, KVJIT_DTYPE_F32};
  const kvjit_dtype caches[] = {KVJIT_DTYPE_FP8_E4M3, KVJIT_DTYPE_FP8_E5M2};
  unsigned total = 0;
  for (size_t a = 0; a < 2; a++) {
    for (size_t s = 0; s < 3; s++) {
      for (size_t c = 0; c < 2; c++) {
        kvjit_scale_kind scale = (kvjit_scale_kind)((s + c) % 3);
        kvjit_variant v;
        assert_int_equal(store_variant(&v, archs[a], 1024, 1024, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 16), KVJIT_OK);
        store_variant_quantize(&v, srcs[s], caches[c], scale, scale == KVJIT_SCALE_PER_HEAD ? 4 : 0);
        unsigned compiled = 0;
        kvjit_status st = kvjit_variant_prewarm(ctx, &v, &compiled, NULL);
        if (st != KVJIT_OK) fail_msg("prewarm sm_%d %d->%d: %s", archs[a], srcs[s], caches[c], kvjit_last_error());
        total += compiled;
      }
    }
  }
  assert_true(total >= 12);
  /* K only with per-head scales, 2-byte accesses; wide slices through the round-by-round path. */
  kvjit_variant k_only;
  assert_int_equal(store_variant(&k_only, 90, 576, 0, KVJIT_INDEX_INT32, KVJIT_PDL_OFF, 0, 2), KVJIT_OK);
  store_variant_quantize(&k_only, KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_HEAD, 1);
  kvjit_status st = kvjit_variant_prewarm(ctx, &k_only, NULL, NULL);
  if (st != KVJIT_OK) fail_msg("K only: %s", kvjit_last_error());
  kvjit_variant rounds;
  assert_int_equal(store_variant(&rounds, 90, 16384, 16384, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 1, 16), KVJIT_OK);
  store_variant_quantize(&rounds, KVJIT_DTYPE_F32, KVJIT_DTYPE_FP8_E5M2, KVJIT_SCALE_PER_HEAD, 8);
  st = kvjit_variant_prewarm(ctx, &rounds, NULL, NULL);
  if (st != KVJIT_OK) fail_msg("rounds: %s", kvjit_last_error());
  drop_temp_cache_context(ctx, dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vec_of),          cmocka_unit_test(test_auto_split),
      cmocka_unit_test(test_whole_split), cmocka_unit_test(test_lanes),           cmocka_unit_test(test_plan_rules),
      cmocka_unit_test(test_plan_errors),     cmocka_unit_test(test_batch_classes),
      cmocka_unit_test(test_blocks),          cmocka_unit_test(test_source),
      cmocka_unit_test(test_distinct_keys),   cmocka_unit_test(test_prewarm_compiles),
      cmocka_unit_test(test_fp8_reference),   cmocka_unit_test(test_fp8_plans),
      cmocka_unit_test(test_fp8_distinct_keys), cmocka_unit_test(test_fp8_prewarm_compiles),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
