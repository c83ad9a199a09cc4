/*
 * store_kv_cache arguments without a GPU: every bad argument is refused with the right status and a
 * message naming it, before any driver is needed; batch 0 is a no-op; manifest lines round-trip and
 * bad lines are refused.
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
#include "test_layouts.h"
#include "variant_util.h"

/* Never dereferenced: every call below fails validation or has batch 0 (or finds no context). */
#define FAKE(n) ((void *)(uintptr_t)(0x7f0000000000ull + (n)*0x100000ull))

static kvjit_context *ctx;

static int setup(void **state) {
  (void)state;
  kvjit_context_options opt = KVJIT_CONTEXT_OPTIONS_INIT;
  opt.disable_cache = 1;
  opt.log = 0;
  return kvjit_context_create(&ctx, &opt) == KVJIT_OK ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  kvjit_context_destroy(ctx);
  return 0;
}

static kvjit_store_kv_args good_args(void) {
  kvjit_store_kv_args a = KVJIT_STORE_KV_ARGS_INIT;
  a.k = FAKE(1);
  a.v = FAKE(2);
  a.k_cache = FAKE(3);
  a.v_cache = FAKE(4);
  a.indices = FAKE(5);
  a.batch = 4;
  a.k_row_bytes = 256;
  a.num_slots = 64;
  return a;
}

typedef struct bad_case {
  const char *what;
  kvjit_status status;
  const char *needle; /* must appear in kvjit_last_error() */
} bad_case;

/* Check one bad argument set against both the store and the prepare call. */
static void expect_bad(const kvjit_store_kv_args *a, const bad_case *c) {
  kvjit_status st = kvjit_store_kv_cache(ctx, a);
  if (st != c->status || strstr(kvjit_last_error(), c->needle) == NULL) {
    fail_msg("%s: store returned %s \"%s\", expected %s naming \"%s\"", c->what, kvjit_status_name(st),
             kvjit_last_error(), kvjit_status_name(c->status), c->needle);
  }
  st = kvjit_store_kv_cache_prepare(ctx, a);
  if (st != c->status || strstr(kvjit_last_error(), c->needle) == NULL) {
    fail_msg("%s: prepare returned %s \"%s\", expected %s naming \"%s\"", c->what, kvjit_status_name(st),
             kvjit_last_error(), kvjit_status_name(c->status), c->needle);
  }
}

#define BAD(field_change, needle_text)                                                           \
  do {                                                                                           \
    kvjit_store_kv_args a = good_args();                                                         \
    field_change;                                                                                \
    bad_case c = {#field_change, KVJIT_ERR_INVALID_ARGUMENT, needle_text};                        \
    expect_bad(&a, &c);                                                                          \
  } while (0)

static void test_null_objects(void **state) {
  (void)state;
  kvjit_store_kv_args a = good_args();
  assert_int_equal(kvjit_store_kv_cache(NULL, &a), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "ctx"));
  assert_int_equal(kvjit_store_kv_cache(ctx, NULL), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "args"));
  assert_int_equal(kvjit_store_kv_cache_prepare(NULL, &a), KVJIT_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvjit_store_kv_cache_prepare(ctx, NULL), KVJIT_ERR_INVALID_ARGUMENT);
  uint64_t n = 0;
  assert_int_equal(kvjit_op_oob_count(NULL, "store_kv_cache", &n, 0), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "ctx"));
  assert_int_equal(kvjit_op_oob_count(ctx, "store_kv_cache", NULL, 0), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "count"));
}

static void test_bad_arguments(void **state) {
  (void)state;
  BAD(a.version = 0, "args->version");
  BAD(a.version = 4, "got 4");
  BAD(a.batch = -1, "batch: must be >= 0, got -1");
  BAD(a.k_row_bytes = 0, "k_row_bytes");
  BAD(a.k_row_bytes = -256, "got -256");
  BAD(a.k_row_bytes = (int64_t)1 << 31, "k_row_bytes");
  BAD(a.v = NULL, "v, v_cache");
  BAD(a.v_cache = NULL, "v, v_cache");
  BAD(a.v_row_bytes = -1, "v_row_bytes");
  BAD(a.index_type = (kvjit_index_type)0, "index_type");
  BAD(a.index_type = (kvjit_index_type)3, "got 3");
  BAD(a.index_stride = -2, "index_stride");
  BAD(a.k_stride = 255, "k_stride");
  BAD(a.k_cache_stride = 100, "k_cache_stride");
  BAD(a.v_stride = 128, "v_stride");
  BAD(a.v_cache_stride = 1, "v_cache_stride");
  BAD((a.v_row_bytes = 512, a.v_stride = 256), "v_stride");
  BAD((a.v_row_bytes = 512, a.v_cache_stride = 300), "v_cache_stride");
  BAD(a.num_slots = 0, "num_slots");
  BAD(a.num_slots = -3, "num_slots");
  BAD(a.skip_slot = -2, "skip_slot");
  BAD(a.skip_slot = 64, "skip_slot");
  BAD(a.split = -1, "split");
  BAD(a.split = 3, "split: 3 does not divide k_row_bytes 256");
  BAD(a.split = (1 << 20) + 1, "split");
  BAD((a.k_row_bytes = 1024, a.v_row_bytes = 768, a.split = 512), "v_row_bytes 768");
  BAD(a.pdl = (kvjit_pdl_mode)7, "pdl");
  BAD(a.pdl = (kvjit_pdl_mode)-1, "pdl");
  BAD(a.k = NULL, "k: NULL");
  BAD(a.k_cache = NULL, "k_cache: NULL");
  BAD(a.indices = NULL, "indices: NULL");
  BAD(a.indices = (const char *)FAKE(5) + 4, "indices");
  BAD((a.index_type = KVJIT_INDEX_INT32, a.indices = (const char *)FAKE(5) + 2), "int32");
  /* 64-bit overflow of the offsets the kernel forms. */
  BAD((a.batch = (int64_t)1 << 40, a.k_stride = (int64_t)1 << 30), "batch");
  BAD((a.num_slots = (int64_t)1 << 40, a.k_cache_stride = (int64_t)1 << 30), "num_slots");
  BAD((a.batch = (int64_t)1 << 40, a.index_stride = (int64_t)1 << 30), "index_stride");
  /* K only ignores v_row_bytes and the V strides, but the pair rule still holds. */
  BAD((a.v = NULL, a.v_cache = NULL, a.k_cache_stride = 8), "k_cache_stride");
}

/* A quantizing store (bf16 -> fp8 e4m3, per-tensor scales) that only lacks a driver. */
static kvjit_store_kv_args fp8_args(void) {
  kvjit_store_kv_args a = good_args();
  a.dtype = KVJIT_DTYPE_BF16;
  a.cache_dtype = KVJIT_DTYPE_FP8_E4M3;
  a.scale_kind = KVJIT_SCALE_PER_TENSOR;
  a.k_scale = FAKE(6);
  a.v_scale = FAKE(7);
  return a;
}

#define BAD_FP8(status_code, field_change, needle_text)                                          \
  do {                                                                                           \
    kvjit_store_kv_args a = fp8_args();                                                          \
    field_change;                                                                                \
    bad_case c = {#field_change, status_code, needle_text};                                      \
    expect_bad(&a, &c);                                                                          \
  } while (0)

static void test_fp8_bad_arguments(void **state) {
  (void)state;
  const kvjit_status E = KVJIT_ERR_INVALID_ARGUMENT, U = KVJIT_ERR_UNSUPPORTED;
  BAD_FP8(E, a.dtype = (kvjit_dtype)9, "dtype: not a kvjit_dtype, got 9");
  BAD_FP8(E, a.cache_dtype = (kvjit_dtype)-1, "cache_dtype");
  BAD_FP8(E, a.scale_kind = (kvjit_scale_kind)3, "scale_kind");
  BAD_FP8(E, a.dtype = KVJIT_DTYPE_BYTES, "dtype: quantizing to fp8_e4m3 needs an f16, bf16 or f32 source, got bytes");
  BAD_FP8(U, a.dtype = KVJIT_DTYPE_FP8_E5M2, "got fp8_e5m2");
  BAD_FP8(U, a.cache_dtype = KVJIT_DTYPE_F16, "cache_dtype: f16 from dtype bf16");
  /* Scales without anything to scale, and the reverse. */
  BAD_FP8(E, a.cache_dtype = KVJIT_DTYPE_BYTES, "scale_kind: 1 needs an fp8 cache_dtype");
  BAD_FP8(E, (a.cache_dtype = KVJIT_DTYPE_BYTES, a.scale_kind = KVJIT_SCALE_NONE), "k_scale");
  BAD_FP8(E, (a.scale_kind = KVJIT_SCALE_NONE, a.k_scale = NULL), "v_scale");
  BAD_FP8(E, a.k_scale = NULL, "k_scale: NULL");
  BAD_FP8(E, a.v_scale = NULL, "v_scale: NULL");
  BAD_FP8(E, a.k_scale = (const float *)((const char *)FAKE(6) + 2), "k_scale");
  /* Rows of whole elements, element-aligned sources, splits that keep elements whole. */
  BAD_FP8(E, a.k_row_bytes = 255, "k_row_bytes: 255 is not a whole number of 2-byte bf16 elements");
  BAD_FP8(E, (a.dtype = KVJIT_DTYPE_F32, a.v_row_bytes = 258), "v_row_bytes: 258");
  BAD_FP8(E, a.k = (const char *)FAKE(1) + 1, "k: not aligned to the 2 bytes of one bf16 element");
  BAD_FP8(E, a.k_stride = 257, "k_stride");
  BAD_FP8(E, a.split = 256, "split: 256 cuts a 2-byte bf16 element");
  BAD_FP8(E, a.split = 70000, "split: must be at most 65535");
  /* A cache row is one byte per element: 128 bytes here, so 100 is too short, 128 is right. */
  BAD_FP8(E, a.k_cache_stride = 100, "k_cache_stride: must be 0 (= a K cache row) or >= a K cache row 128, got 100");
  /* Per head. */
  BAD_FP8(E, a.scale_kind = KVJIT_SCALE_PER_HEAD, "num_heads: must be 1..65535");
  BAD_FP8(E, (a.scale_kind = KVJIT_SCALE_PER_HEAD, a.num_heads = 3), "num_heads: 3 does not divide the 128 elements of a K row");
  BAD_FP8(E, (a.scale_kind = KVJIT_SCALE_PER_HEAD, a.num_heads = 4, a.v_row_bytes = 90), "45 elements of a V row");
  BAD_FP8(E, a.k_row_bytes = (int64_t)1 << 29, "more than a quantizing store takes");
}

/* What passes validation and only lacks a driver: quantizing variants, and version-1 callers,
 * whose struct ends before the version-2 fields (which must not be read). */
static void test_fp8_valid_and_version_1(void **state) {
  (void)state;
  kvjit_store_kv_args good[6];
  for (int i = 0; i < 6; i++) good[i] = fp8_args();
  good[1].cache_dtype = KVJIT_DTYPE_FP8_E5M2;
  good[1].dtype = KVJIT_DTYPE_F32;
  good[2].scale_kind = KVJIT_SCALE_PER_HEAD;
  good[2].num_heads = 8; /* 16-element heads */
  good[3].scale_kind = KVJIT_SCALE_NONE;
  good[3].k_scale = good[3].v_scale = NULL;
  good[4].k_cache = (char *)good[4].k_cache + 1; /* byte-aligned cache: 1-element accesses */
  good[5].cache_dtype = KVJIT_DTYPE_BF16;         /* same dtype: a plain copy */
  good[5].scale_kind = KVJIT_SCALE_NONE;
  good[5].k_scale = good[5].v_scale = NULL;
  for (int i = 0; i < 6; i++) {
    kvjit_status st = kvjit_store_kv_cache(ctx, &good[i]);
    if (st != KVJIT_ERR_NO_DRIVER && st != KVJIT_ERR_NO_DEVICE) {
      fail_msg("case %d: %s \"%s\", expected only a missing driver", i, kvjit_status_name(st), kvjit_last_error());
    }
  }
  /* A version-1 struct: allocate exactly its size, so reading past it is caught by ASan. */
  size_t v1_size = offsetof(kvjit_store_kv_args, stream) + sizeof(void *);
  kvjit_store_kv_args full = good_args();
  full.version = 1;
  unsigned char *v1 = malloc(v1_size);
  assert_non_null(v1);
  memcpy(v1, &full, v1_size);
  kvjit_status st = kvjit_store_kv_cache(ctx, (const kvjit_store_kv_args *)(void *)v1);
  assert_true(st == KVJIT_ERR_NO_DRIVER || st == KVJIT_ERR_NO_DEVICE);
  int64_t bad_stride = 3;
  memcpy(v1 + offsetof(kvjit_store_kv_args, k_stride), &bad_stride, sizeof bad_stride);
  assert_int_equal(kvjit_store_kv_cache(ctx, (const kvjit_store_kv_args *)(void *)v1), KVJIT_ERR_INVALID_ARGUMENT);
  free(v1);
}

/* Version 3: the caches as views (kvjit_layout). @p spec's caches at FAKE(3) (and FAKE(4) when
 * separate), bf16 rows, quantizing to fp8 when @p fp8. */
static kvjit_store_kv_args layout_args(const kvjit_test_layout *t, int fp8) {
  kvjit_store_kv_args a = good_args();
  a.k_row_bytes = t->k_row * (fp8 ? 2 : 1);
  a.v_row_bytes = t->v_row * (fp8 ? 2 : 1);
  a.v_cache = t->one_cache ? (char *)a.k_cache + t->v_base : a.v_cache;
  a.num_slots = 4 * t->page_size;
  a.k_cache_layout = &t->k;
  a.v_cache_layout = &t->v;
  if (fp8) {
    a.dtype = KVJIT_DTYPE_BF16;
    a.cache_dtype = KVJIT_DTYPE_FP8_E4M3;
    a.scale_kind = KVJIT_SCALE_PER_TENSOR;
    a.k_scale = (const float *)FAKE(6);
    a.v_scale = (const float *)FAKE(7);
  }
  return a;
}

static int needs_driver(kvjit_status st) { return st == KVJIT_ERR_NO_DRIVER || st == KVJIT_ERR_NO_DEVICE; }

static void test_layout_arguments(void **state) {
  (void)state;
  /* Every named layout passes validation (what is left is the missing driver), plain and fp8. */
  for (size_t i = 0; i < kvjit_test_num_layouts; i++) {
    kvjit_test_layout t;
    kvjit_test_layout_make(&t, &kvjit_test_layouts[i]);
    kvjit_store_kv_args a = layout_args(&t, t.element_bytes == 1);
    kvjit_status st = kvjit_store_kv_cache(ctx, &a);
    if (!needs_driver(st)) fail_msg("%s: %s \"%s\"", t.name, kvjit_status_name(st), kvjit_last_error());
  }
  kvjit_test_layout flash, chunked, hnd;
  kvjit_test_layout_make(&flash, &kvjit_test_layouts[2]);
  kvjit_test_layout_make(&chunked, &kvjit_test_layouts[3]);
  kvjit_test_layout_make(&hnd, &kvjit_test_layouts[1]);
  const struct {
    kvjit_store_kv_args a;
    const char *needle;
  } bad[] = {
      {layout_args(&flash, 0), "k_cache_stride: must be 0 with k_cache_layout"},
      {layout_args(&flash, 0), "k_cache, v_cache: the two views may share bytes"},
      {layout_args(&hnd, 0), "v_cache_layout->row_extents"},
      {layout_args(&hnd, 1), "k_cache_layout->element_bytes: must be 1 (the cache's element), got 2"},
      {layout_args(&chunked, 0), "v_cache_layout: given for a K-only store"},
      {layout_args(&flash, 0), "k_cache_layout->version"},
      {layout_args(&hnd, 0), "num_heads 2) for per-head scales"},
  };
  kvjit_store_kv_args cases[sizeof bad / sizeof bad[0]];
  kvjit_layout spoilt[sizeof bad / sizeof bad[0]];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) cases[i] = bad[i].a;
  cases[0].k_cache_stride = 4096;
  cases[1].v_cache = cases[1].k_cache; /* V on top of K */
  spoilt[2] = hnd.v;
  spoilt[2].row_extents[1] = 32;
  cases[2].v_cache_layout = &spoilt[2];
  cases[4].v = cases[4].v_cache = NULL;
  spoilt[5] = flash.k;
  spoilt[5].version = 7;
  cases[5].k_cache_layout = &spoilt[5];
  cases[6] = layout_args(&hnd, 1);
  cases[6].scale_kind = KVJIT_SCALE_PER_HEAD;
  cases[6].num_heads = 2; /* the layouts' outer dim is 4 heads */
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    if (i == 3 || i == 6) {
      /* HND with bf16 elements read as an fp8 cache (3); fp8 HND of 4 heads with 2 scales (6). */
      if (i == 6) {
        spoilt[6] = hnd.k;
        spoilt[6].element_bytes = 1;
        spoilt[6].row_extents[1] = 128;
        spoilt[6].row_strides[0] = 16 * 128;
        spoilt[6].row_strides[1] = 1;
        spoilt[6].slot_stride = 128;
        cases[6].k_cache_layout = cases[6].v_cache_layout = &spoilt[6];
      }
    }
    bad_case c = {bad[i].needle, KVJIT_ERR_INVALID_ARGUMENT, bad[i].needle};
    expect_bad(&cases[i], &c);
  }
  /* One layout struct for both views (checked once): V half a head on: fine; V on K: refused. */
  kvjit_store_kv_args same = layout_args(&flash, 0);
  same.v_cache_layout = same.k_cache_layout;
  assert_true(needs_driver(kvjit_store_kv_cache(ctx, &same)));
  same.v_cache = same.k_cache;
  assert_int_equal(kvjit_store_kv_cache(ctx, &same), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "k_cache, v_cache: the two views may share bytes"));
  same.v_cache = (char *)same.k_cache + 64 * 2;
  same.v_cache_stride = 512;
  assert_int_equal(kvjit_store_kv_cache(ctx, &same), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "v_cache_stride: must be 0 with v_cache_layout"));
  /* A version-2 caller's struct ends before the layouts: they are never read. */
  kvjit_store_kv_args v2 = good_args();
  v2.version = 2;
  v2.k_cache_layout = (const kvjit_layout *)FAKE(9); /* would crash if read */
  assert_true(needs_driver(kvjit_store_kv_cache(ctx, &v2)));
  /* NULL layouts in version 3: today's flat rows. */
  kvjit_store_kv_args v3 = good_args();
  assert_true(needs_driver(kvjit_store_kv_cache(ctx, &v3)));
}

/* Laid-out caches' manifest lines: their static part round-trips; lines that describe no view
 * of the row are refused naming the key. */
static void test_layout_lines(void **state) {
  (void)state;
  static const char *const good[] = {
      "store_kv_cache arch=90 k_row_bytes=2048 v_row_bytes=2048 index=int64 pdl=auto split=0 vec=16 k_page=16 "
      "k_atom=256 v_page=16 v_atom=256",
      "store_kv_cache arch=90 k_row_bytes=2048 v_row_bytes=2048 index=int64 pdl=auto split=0 vec=16 k_page=16 "
      "k_atom=16 v_page=16 v_atom=2 v_vec=2",
      "store_kv_cache arch=90 k_row_bytes=2048 v_row_bytes=2048 index=int32 pdl=auto split=0 vec=16 dtype=bf16 "
      "cache_dtype=fp8_e4m3 scale=head num_heads=8 k_page=5 k_atom=16 k_dim0=8 v_page=5 v_atom=1 v_dim0=8 v_vec=2",
      "store_kv_cache arch=80 k_row_bytes=576 v_row_bytes=0 index=int64 pdl=auto split=0 vec=16 k_atom=32 k_dim0=3 "
      "k_dim1=3",
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    kvjit_variant v;
    if (kvjit_variant_parse(&v, good[i]) != KVJIT_OK) fail_msg("\"%s\": %s", good[i], kvjit_last_error());
    char back[512];
    assert_int_equal(kvjit_variant_format(&v, back, sizeof back), KVJIT_OK);
    assert_string_equal(back, good[i]);
  }
  static const struct {
    const char *line, *needle;
  } bad[] = {
      {"store_kv_cache arch=90 k_row_bytes=2048 v_row_bytes=2048 index=int64 pdl=auto split=0 vec=16 k_page=1",
       "k_page: must be 0 (flat) or 2..65535, got 1"},
      {"store_kv_cache arch=90 k_row_bytes=2048 v_row_bytes=2048 index=int64 pdl=auto split=0 vec=16 k_atom=96",
       "k_atom: must divide the row's 2048 bytes"},
      {"store_kv_cache arch=90 k_row_bytes=2048 v_row_bytes=2048 index=int64 pdl=auto split=0 vec=16 v_dim0=8",
       "v_dim0, v_dim1: need v_atom"},
      {"store_kv_cache arch=90 k_row_bytes=2048 v_row_bytes=0 index=int64 pdl=auto split=0 vec=16 v_page=16",
       "v_page: given for a K-only store"},
      {"store_kv_cache arch=90 k_row_bytes=2048 v_row_bytes=2048 index=int64 pdl=auto split=0 vec=16 k_page=16 "
       "v_vec=16",
       "v_vec: must be 0 (= vec) or a power of two other than vec 16, got 16"},
      {"store_kv_cache arch=90 k_row_bytes=2048 v_row_bytes=2048 index=int64 pdl=auto split=0 vec=16 v_vec=2",
       "v_vec: 2 given for flat caches"},
      {"store_kv_cache arch=90 k_row_bytes=2048 v_row_bytes=2048 index=int64 pdl=auto split=0 vec=16 k_page=16 "
       "k_atom=256 k_dim0=8",
       "k_dim0, k_dim1: 8, 0 must be 0 or >= 2 and leave a last dim >= 2"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kvjit_variant v;
    kvjit_status st = kvjit_variant_parse(&v, bad[i].line);
    if (st == KVJIT_OK || strstr(kvjit_last_error(), bad[i].needle) == NULL) {
      fail_msg("\"%s\": %s \"%s\", expected an error naming \"%s\"", bad[i].line, kvjit_status_name(st),
               kvjit_last_error(), bad[i].needle);
    }
  }
}

/* kvjit_variant_set_layouts(): a variant keyed as a call with those layouts (the prewarm door). */
static void test_variant_set_layouts(void **state) {
  (void)state;
  kvjit_test_layout flash, chunked;
  kvjit_test_layout_make(&flash, &kvjit_test_layouts[2]);
  kvjit_test_layout_make(&chunked, &kvjit_test_layouts[3]);
  kvjit_variant v;
  assert_int_equal(kvjit_variant_parse(&v, "store_kv_cache arch=90 k_row_bytes=512 v_row_bytes=512 index=int64 "
                                           "pdl=auto split=0 vec=16"),
                   KVJIT_OK);
  const kvjit_layout *fl[2] = {&flash.k, &flash.v}, *ch[2] = {&chunked.k, &chunked.v}, *none[2] = {NULL, NULL};
  char line[512];
  kvjit_variant w = v;
  assert_int_equal(kvjit_variant_set_layouts(&w, fl, 2), KVJIT_OK);
  assert_int_equal(kvjit_variant_format(&w, line, sizeof line), KVJIT_OK);
  assert_non_null(strstr(line, " vec=16 k_page=16 k_atom=128 v_page=16 v_atom=128"));
  w = v;
  assert_int_equal(kvjit_variant_set_layouts(&w, ch, 2), KVJIT_OK);
  assert_int_equal(kvjit_variant_format(&w, line, sizeof line), KVJIT_OK);
  assert_non_null(strstr(line, " vec=16 k_page=16 k_atom=16 v_page=16 v_atom=2 v_vec=2"));
  assert_int_equal(kvjit_variant_set_layouts(&w, none, 2), KVJIT_OK); /* back to flat */
  assert_int_equal(kvjit_variant_format(&w, line, sizeof line), KVJIT_OK);
  assert_string_equal(line, "store_kv_cache arch=90 k_row_bytes=512 v_row_bytes=512 index=int64 pdl=auto split=0 vec=16");
  assert_int_equal(kvjit_variant_set_layouts(&w, fl, 1), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "count: store_kv_cache takes 2 layouts"));
  kvjit_layout bad = flash.k;
  bad.row_extents[1] = 100;
  const kvjit_layout *badl[2] = {&bad, NULL};
  assert_int_equal(kvjit_variant_set_layouts(&w, badl, 2), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "layouts[0] (K cache)->row_extents"));
  kvjit_variant t;
  assert_int_equal(kvjit_variant_init(&t, kvjit_op_find("transfer_kv")), KVJIT_OK);
  t.values[0] = 90;
  t.values[1] = 256;
  assert_int_equal(kvjit_variant_set_layouts(&t, none, 2), KVJIT_ERR_INVALID_ARGUMENT); /* index 0: no index */
  variant_set(&t, "index", KVJIT_INDEX_INT64);
  assert_int_equal(kvjit_variant_set_layouts(&t, none, 2), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "count: transfer_kv takes 4 layouts"));
  /* transfer_kv's four (source K, V, destination K, V): a V layout for a K-only copy is refused
   * as the call refuses it; four NULLs are flat rows. */
  const kvjit_layout *four[4] = {NULL, &flash.v, NULL, NULL}, *flat4[4] = {NULL, NULL, NULL, NULL};
  assert_int_equal(kvjit_variant_set_layouts(&t, four, 4), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "src_v_layout: given for a K-only copy"));
  assert_int_equal(kvjit_variant_set_layouts(&t, flat4, 4), KVJIT_OK);
  assert_int_equal(kvjit_variant_format(&t, line, sizeof line), KVJIT_OK);
  assert_string_equal(line, "transfer_kv arch=90 k_row_bytes=256 v_row_bytes=0 index=int64 src=device dst=device "
                            "layers=one pdl=auto split=0 vec=16");
}

/* Argument errors come first, with or without a driver; batch 0 needs no driver at all. */
static void test_batch_zero_is_a_no_op(void **state) {
  (void)state;
  kvjit_store_kv_args a = KVJIT_STORE_KV_ARGS_INIT;
  a.k_row_bytes = 256;
  a.num_slots = 1;
  a.batch = 0;
  assert_int_equal(kvjit_store_kv_cache(ctx, &a), KVJIT_OK);
  a.k = FAKE(1);
  a.k_cache = FAKE(2);
  a.v = FAKE(3);
  a.v_cache = FAKE(4);
  a.indices = FAKE(5);
  assert_int_equal(kvjit_store_kv_cache(ctx, &a), KVJIT_OK);
  /* Still validated. */
  a.k_stride = 3;
  assert_int_equal(kvjit_store_kv_cache(ctx, &a), KVJIT_ERR_INVALID_ARGUMENT);
}

/* Valid arguments need a driver and a current context; this process has no context, so nothing
 * can launch, and the status says what is missing. */
static void test_valid_needs_context(void **state) {
  (void)state;
  kvjit_store_kv_args a = good_args();
  kvjit_status st = kvjit_store_kv_cache(ctx, &a);
  assert_true(st == KVJIT_ERR_NO_DRIVER || st == KVJIT_ERR_NO_DEVICE);
  assert_true(kvjit_last_error()[0] != '\0');
  uint64_t n = 0;
  st = kvjit_op_oob_count(ctx, "store_kv_cache", &n, 1);
  assert_true(st == KVJIT_ERR_NO_DRIVER || st == KVJIT_ERR_NO_DEVICE);
}

/* A store variant's line reads back as the same variant, field by field. */
static void round_trip(const kvjit_variant *v) {
  char line[256];
  kvjit_status st = kvjit_variant_format(v, line, sizeof line);
  if (st != KVJIT_OK) fail_msg("format: %s", kvjit_last_error());
  kvjit_variant back;
  memset(&back, 0xab, sizeof back);
  st = kvjit_variant_parse(&back, line);
  if (st != KVJIT_OK) fail_msg("parse \"%s\": %s", line, kvjit_last_error());
  assert_int_equal(back.version, KVJIT_VARIANT_VERSION);
  assert_ptr_equal(back.op, v->op);
  static const char *const fields[] = {"arch",  "k_row_bytes", "v_row_bytes", "index", "pdl",      "split",
                                       "vec",   "dtype",       "cache_dtype", "scale", "num_heads"};
  for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
    if (variant_value(&back, fields[f]) != variant_value(v, fields[f]))
      fail_msg("\"%s\": %s %lld, was %lld", line, fields[f], (long long)variant_value(&back, fields[f]),
               (long long)variant_value(v, fields[f]));
  }
}

static void test_variant_round_trip(void **state) {
  (void)state;
  static const struct {
    int arch;
    int64_t k, v;
    kvjit_index_type index;
    kvjit_pdl_mode pdl;
    int split, vec;
  } vs[] = {
      {90, 256, 256, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 16},  {80, 196, 196, KVJIT_INDEX_INT32, KVJIT_PDL_OFF, 7, 4},
      {100, 576, 0, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 2, 8},      {0, 8192, 1024, KVJIT_INDEX_INT32, KVJIT_PDL_AUTO, 4, 16},
      {121, 1, 1, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 1, 1},
  };
  kvjit_variant v;
  for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
    assert_int_equal(store_variant(&v, vs[i].arch, vs[i].k, vs[i].v, vs[i].index, vs[i].pdl, vs[i].split, vs[i].vec),
                     KVJIT_OK);
    round_trip(&v);
  }
  char line[256];
  assert_int_equal(store_variant(&v, 90, 256, 256, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 16), KVJIT_OK);
  assert_int_equal(kvjit_variant_format(&v, line, sizeof line), KVJIT_OK);
  assert_string_equal(line, "store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=0 vec=16");
}

static void test_variant_parse_forms(void **state) {
  (void)state;
  kvjit_variant v;
  assert_int_equal(kvjit_variant_parse(
                       &v, "store_kv_cache\tvec=8 split=2 pdl=on index=int32 v_row_bytes=0 k_row_bytes=576 arch=90  "
                           "# a comment\r\n"),
                   KVJIT_OK);
  assert_ptr_equal(v.op, kvjit_op_find("store_kv_cache"));
  assert_int_equal(variant_value(&v, "arch"), 90);
  assert_int_equal(variant_value(&v, "k_row_bytes"), 576);
  assert_int_equal(variant_value(&v, "v_row_bytes"), 0);
  assert_int_equal(variant_value(&v, "index"), KVJIT_INDEX_INT32);
  assert_int_equal(variant_value(&v, "pdl"), KVJIT_PDL_ON);
  assert_int_equal(variant_value(&v, "split"), 2);
  assert_int_equal(variant_value(&v, "vec"), 8);
  assert_int_equal(kvjit_variant_parse(&v, ""), KVJIT_ERR_NOT_FOUND);
  assert_int_equal(kvjit_variant_parse(&v, "   # only a comment\n"), KVJIT_ERR_NOT_FOUND);
}

static void expect_parse_error(const char *line, kvjit_status status, const char *needle) {
  kvjit_variant v;
  kvjit_status st = kvjit_variant_parse(&v, line);
  if (st != status || strstr(kvjit_last_error(), needle) == NULL) {
    fail_msg("parse \"%s\": %s \"%s\", expected %s naming \"%s\"", line, kvjit_status_name(st), kvjit_last_error(),
             kvjit_status_name(status), needle);
  }
}

#define LINE_REST " index=int64 pdl=auto split=0 vec=16"

static void test_variant_parse_errors(void **state) {
  (void)state;
  const kvjit_status E = KVJIT_ERR_INVALID_ARGUMENT;
  expect_parse_error("store_kv arch=90 k_row_bytes=256 v_row_bytes=256" LINE_REST, E, "store_kv_cache");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256" LINE_REST, E, "missing v_row_bytes");
  expect_parse_error("store_kv_cache arch=90 arch=90 k_row_bytes=256 v_row_bytes=256" LINE_REST, E, "arch: given twice");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 heads=8" LINE_REST, E, "unknown key \"heads\"");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes v_row_bytes=256" LINE_REST, E, "key=value");
  expect_parse_error("store_kv_cache arch=-1 k_row_bytes=256 v_row_bytes=256" LINE_REST, E, "arch: bad value \"-1\"");
  expect_parse_error("store_kv_cache arch=sm90 k_row_bytes=256 v_row_bytes=256" LINE_REST, E, "arch");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=0 v_row_bytes=256" LINE_REST, E, "k_row_bytes");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=+256 v_row_bytes=256" LINE_REST, E, "k_row_bytes");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=-3" LINE_REST, E, "v_row_bytes");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=99999999999 v_row_bytes=256" LINE_REST, E, "k_row_bytes");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int16 pdl=auto split=0 vec=16", E,
                     "index: bad value \"int16\"");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=yes split=0 vec=16", E,
                     "pdl");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=3 vec=16", E,
                     "split: 3");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=0 vec=3", E,
                     "vec");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=0 vec=32", E,
                     "vec");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=0 vec=", E,
                     "vec");
  expect_parse_error("store_kv_cache arch=80 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=on split=0 vec=16",
                     KVJIT_ERR_UNSUPPORTED, "pdl");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256" LINE_REST "\nstore_kv_cache", E,
                     "more than one line");
  char longline[700];
  memset(longline, ' ', sizeof longline - 1);
  longline[sizeof longline - 1] = '\0';
  memcpy(longline, "store_kv_cache", 14);
  expect_parse_error(longline, E, "longer than");
  kvjit_variant v;
  assert_int_equal(kvjit_variant_parse(NULL, "x"), E);
  assert_int_equal(kvjit_variant_parse(&v, NULL), E);
}

static void test_variant_format_errors(void **state) {
  (void)state;
  kvjit_variant v;
  assert_int_equal(store_variant(&v, 90, 256, 256, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 16), KVJIT_OK);
  char small[20];
  assert_int_equal(kvjit_variant_format(&v, small, sizeof small), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "capacity"));
  assert_string_equal(small, "");
  char line[256];
  assert_int_equal(kvjit_variant_format(NULL, line, sizeof line), KVJIT_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvjit_variant_format(&v, NULL, 0), KVJIT_ERR_INVALID_ARGUMENT);
  variant_set(&v, "split", 3);
  assert_int_equal(kvjit_variant_format(&v, line, sizeof line), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "split"));
  variant_set(&v, "split", 0);
  v.version = 0; /* a caller built against another layout of the struct */
  assert_int_equal(kvjit_variant_format(&v, line, sizeof line), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "variant->version: must be KVJIT_VARIANT_VERSION (1), got 0"));
  assert_int_equal(kvjit_variant_prewarm(ctx, &v, NULL, NULL), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "variant->version"));
  v.version = KVJIT_VARIANT_VERSION;
  kvjit_variant init;
  assert_int_equal(kvjit_variant_init(&init, kvjit_op_find("store_kv_cache")), KVJIT_OK);
  assert_int_equal(init.version, KVJIT_VARIANT_VERSION);
  assert_int_equal(variant_value(&init, "vec"), 16);
  variant_set(&v, "vec", 6);
  assert_int_equal(kvjit_variant_format(&v, line, sizeof line), KVJIT_ERR_INVALID_ARGUMENT);
  variant_set(&v, "vec", 16);
  variant_set(&v, "arch", -5);
  assert_int_equal(kvjit_variant_format(&v, line, sizeof line), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "arch"));
}

static void test_fp8_variant_lines(void **state) {
  (void)state;
  kvjit_variant vs[3];
  assert_int_equal(store_variant(&vs[0], 90, 256, 256, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 16), KVJIT_OK);
  store_variant_quantize(&vs[0], KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_TENSOR, 0);
  assert_int_equal(store_variant(&vs[1], 80, 1024, 512, KVJIT_INDEX_INT32, KVJIT_PDL_OFF, 2, 8), KVJIT_OK);
  store_variant_quantize(&vs[1], KVJIT_DTYPE_F32, KVJIT_DTYPE_FP8_E5M2, KVJIT_SCALE_NONE, 0);
  assert_int_equal(store_variant(&vs[2], 0, 2048, 0, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 16), KVJIT_OK);
  store_variant_quantize(&vs[2], KVJIT_DTYPE_F16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_HEAD, 8);
  for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) round_trip(&vs[i]);
  char line[256];
  assert_int_equal(kvjit_variant_format(&vs[2], line, sizeof line), KVJIT_OK);
  assert_string_equal(line, "store_kv_cache arch=0 k_row_bytes=2048 v_row_bytes=0 index=int64 pdl=auto split=0 vec=16 "
                            "dtype=f16 cache_dtype=fp8_e4m3 scale=head num_heads=8");
  const kvjit_status E = KVJIT_ERR_INVALID_ARGUMENT;
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256" LINE_REST " dtype=int8", E,
                     "dtype: bad value \"int8\"");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256" LINE_REST
                     " dtype=bf16 cache_dtype=fp8_e4m3 scale=row", E, "scale: bad value");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256" LINE_REST
                     " dtype=bf16 cache_dtype=fp8_e4m3 scale=tensor num_heads=2", E, "num_heads: given without scale=head");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256" LINE_REST
                     " dtype=bf16 cache_dtype=fp8_e4m3 scale=head num_heads=3", E, "num_heads: 3 does not divide");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256" LINE_REST " cache_dtype=fp8_e4m3", E,
                     "dtype: quantizing");
  /* A plain variant with a dtype named writes the plain line (the dtype does not shape its kernel). */
  kvjit_variant plain;
  assert_int_equal(store_variant(&plain, 90, 256, 256, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 16), KVJIT_OK);
  store_variant_quantize(&plain, KVJIT_DTYPE_BF16, KVJIT_DTYPE_BYTES, KVJIT_SCALE_NONE, 0);
  assert_int_equal(kvjit_variant_format(&plain, line, sizeof line), KVJIT_OK);
  assert_string_equal(line, "store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=0 vec=16");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_null_objects),          cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_batch_zero_is_a_no_op), cmocka_unit_test(test_valid_needs_context),
      cmocka_unit_test(test_variant_round_trip),    cmocka_unit_test(test_variant_parse_forms),
      cmocka_unit_test(test_variant_parse_errors),  cmocka_unit_test(test_variant_format_errors),
      cmocka_unit_test(test_fp8_bad_arguments),     cmocka_unit_test(test_fp8_valid_and_version_1),
      cmocka_unit_test(test_fp8_variant_lines),     cmocka_unit_test(test_layout_arguments),
      cmocka_unit_test(test_layout_lines),          cmocka_unit_test(test_variant_set_layouts),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
