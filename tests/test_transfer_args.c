/*
 * transfer_kv arguments without a GPU: every bad argument is refused with the right status and a
 * message naming it, before any driver is needed; batch 0 is a no-op.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "host_layouts.h"
#include "kvjit.h"
#include "kvjit_tools.h"

/* Never dereferenced: every call below fails validation, has batch 0 or finds no driver. */
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

static kvjit_transfer_kv_args good_args(void) {
  kvjit_transfer_kv_args a = KVJIT_TRANSFER_KV_ARGS_INIT;
  a.src_k = FAKE(1);
  a.src_v = FAKE(2);
  a.dst_k = FAKE(3);
  a.dst_v = FAKE(4);
  a.src_indices = FAKE(5);
  a.dst_indices = FAKE(6);
  a.batch = 4;
  a.k_row_bytes = 256;
  a.src_num_slots = 64;
  a.dst_num_slots = 128;
  return a;
}

static void expect_bad(const kvjit_transfer_kv_args *a, const char *what, kvjit_status status, const char *needle) {
  kvjit_status st = kvjit_transfer_kv(ctx, a);
  if (st != status || strstr(kvjit_last_error(), needle) == NULL) {
    fail_msg("%s: transfer returned %s \"%s\", expected %s naming \"%s\"", what, kvjit_status_name(st),
             kvjit_last_error(), kvjit_status_name(status), needle);
  }
  st = kvjit_transfer_kv_prepare(ctx, a);
  if (st != status || strstr(kvjit_last_error(), needle) == NULL) {
    fail_msg("%s: prepare returned %s \"%s\", expected %s naming \"%s\"", what, kvjit_status_name(st),
             kvjit_last_error(), kvjit_status_name(status), needle);
  }
  /* The device check validates first, with the same rules: nothing reaches the driver. */
  st = kvjit_transfer_kv_check_devices(ctx, a, KVJIT_TRANSFER_KV_ENABLE_PEER_ACCESS);
  if (st != status || strstr(kvjit_last_error(), needle) == NULL) {
    fail_msg("%s: check_devices returned %s \"%s\", expected %s naming \"%s\"", what, kvjit_status_name(st),
             kvjit_last_error(), kvjit_status_name(status), needle);
  }
}

#define BAD(field_change, needle_text)                                                           \
  do {                                                                                           \
    kvjit_transfer_kv_args a = good_args();                                                      \
    field_change;                                                                                \
    expect_bad(&a, #field_change, KVJIT_ERR_INVALID_ARGUMENT, needle_text);                      \
  } while (0)

static void test_null_objects(void **state) {
  (void)state;
  kvjit_transfer_kv_args a = good_args();
  assert_int_equal(kvjit_transfer_kv(NULL, &a), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "ctx"));
  assert_int_equal(kvjit_transfer_kv(ctx, NULL), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "args"));
  assert_int_equal(kvjit_transfer_kv_prepare(NULL, &a), KVJIT_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvjit_transfer_kv_prepare(ctx, NULL), KVJIT_ERR_INVALID_ARGUMENT);
  uint64_t n = 0;
  assert_int_equal(kvjit_op_oob_count(NULL, "transfer_kv", &n, 0), KVJIT_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvjit_op_oob_count(ctx, "transfer_kv", NULL, 0), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "count"));
}

static void test_bad_arguments(void **state) {
  (void)state;
  BAD(a.version = 0, "args->version");
  BAD(a.version = 3, "got 3");
  BAD(a.batch = -1, "batch: must be >= 0, got -1");
  BAD(a.k_row_bytes = 0, "k_row_bytes");
  BAD(a.k_row_bytes = (int64_t)1 << 31, "k_row_bytes");
  BAD(a.src_v = NULL, "src_v, dst_v");
  BAD(a.dst_v = NULL, "src_v, dst_v");
  BAD(a.v_row_bytes = -1, "v_row_bytes");
  BAD(a.index_type = (kvjit_index_type)0, "index_type");
  BAD(a.src_index_stride = -1, "src_index_stride");
  BAD(a.dst_index_stride = -1, "dst_index_stride");
  BAD(a.src = (kvjit_location)2, "src: must be");
  BAD(a.dst = (kvjit_location)-1, "dst: must be");
  BAD(a.pdl = (kvjit_pdl_mode)3, "pdl");
  BAD(a.split = -1, "split");
  BAD(a.split = (1 << 20) + 1, "split");
  BAD(a.split = 3, "split: 3 does not divide k_row_bytes 256");
  BAD((a.v_row_bytes = 384, a.split = 256), "v_row_bytes 384");
  BAD(a.num_layers = -1, "num_layers");
  BAD(a.num_layers = 65536, "num_layers");
  BAD(a.src_k_stride = 255, "src_k_stride");
  BAD(a.dst_k_stride = 100, "dst_k_stride");
  BAD((a.v_row_bytes = 512, a.src_v_stride = 256), "src_v_stride");
  BAD((a.v_row_bytes = 512, a.dst_v_stride = 511), "dst_v_stride");
  BAD(a.src_num_slots = 0, "src_num_slots");
  BAD(a.dst_num_slots = -2, "dst_num_slots");
  BAD(a.src_k = NULL, "src_k: NULL");
  BAD(a.dst_k = NULL, "dst_k: NULL");
  BAD(a.src_indices = NULL, "src_indices: NULL");
  BAD(a.dst_indices = NULL, "dst_indices: NULL");
  BAD(a.src_indices = (const char *)FAKE(5) + 4, "src_indices");
  BAD((a.index_type = KVJIT_INDEX_INT32, a.dst_indices = (const char *)FAKE(6) + 2), "dst_indices");
  BAD((a.num_layers = 4, a.dst_k = (char *)FAKE(3) + 4), "layer table is not 8-byte aligned");
  /* 64-bit overflow of the offsets the kernel forms. */
  BAD((a.src_num_slots = (int64_t)1 << 40, a.src_k_stride = (int64_t)1 << 30), "src_num_slots");
  BAD((a.dst_num_slots = (int64_t)1 << 40, a.dst_k_stride = (int64_t)1 << 30), "dst_num_slots");
  BAD((a.batch = (int64_t)1 << 40, a.src_index_stride = (int64_t)1 << 30), "src_indices");
  /* K only ignores v_row_bytes and the V strides. */
  BAD((a.src_v = NULL, a.dst_v = NULL, a.dst_k_stride = 8), "dst_k_stride");
  BAD((a.pdl = KVJIT_PDL_ON, a.split = 7), "split: 7");
  /* Version 2: conversions, scales, the CTA budget, layouts. */
  BAD(a.src_dtype = (kvjit_dtype)9, "src_dtype: not a kvjit_dtype, got 9");
  BAD(a.dst_dtype = (kvjit_dtype)-1, "dst_dtype: not a kvjit_dtype");
  BAD((a.src_dtype = KVJIT_DTYPE_FP8_E4M3, a.dst_dtype = KVJIT_DTYPE_BF16, a.scale_kind = (kvjit_scale_kind)3),
      "scale_kind");
  BAD(a.scale_kind = KVJIT_SCALE_PER_TENSOR, "scale_kind: 1 needs a conversion");
  BAD((a.src_dtype = KVJIT_DTYPE_BF16, a.dst_dtype = KVJIT_DTYPE_BF16, a.scale_kind = KVJIT_SCALE_PER_TENSOR),
      "bf16 to bf16 is a plain copy");
  BAD(a.dst_dtype = KVJIT_DTYPE_F16, "transfer_kv converts fp8 to f16/bf16/f32");
  BAD((a.src_dtype = KVJIT_DTYPE_FP8_E4M3, a.dst_dtype = KVJIT_DTYPE_BF16, a.scale_kind = KVJIT_SCALE_PER_TENSOR),
      "k_scale: NULL with a scale");
  BAD((a.src_dtype = KVJIT_DTYPE_FP8_E4M3, a.dst_dtype = KVJIT_DTYPE_BF16, a.scale_kind = KVJIT_SCALE_PER_TENSOR,
       a.k_scale = (const float *)FAKE(7)),
      "v_scale: NULL with a scale");
  BAD((a.src_dtype = KVJIT_DTYPE_FP8_E4M3, a.dst_dtype = KVJIT_DTYPE_BF16, a.scale_kind = KVJIT_SCALE_PER_TENSOR,
       a.k_scale = (const float *)((const char *)FAKE(7) + 2), a.v_scale = (const float *)FAKE(8)),
      "k_scale: 0x7f0000700002 is not aligned");
  BAD((a.src_dtype = KVJIT_DTYPE_FP8_E5M2, a.dst_dtype = KVJIT_DTYPE_F32, a.scale_kind = KVJIT_SCALE_PER_HEAD,
       a.k_scale = (const float *)FAKE(7), a.v_scale = (const float *)FAKE(8)),
      "num_heads: must be 1..8191");
  BAD((a.src_dtype = KVJIT_DTYPE_F16, a.dst_dtype = KVJIT_DTYPE_FP8_E4M3, a.k_row_bytes = 255), "src: pointers and "
      "strides must be multiples of the 2-byte f16 element");
  BAD((a.src_dtype = KVJIT_DTYPE_FP8_E4M3, a.dst_dtype = KVJIT_DTYPE_F32, a.dst_k = (char *)FAKE(3) + 2),
      "dst: pointers and strides must be multiples of the 4-byte f32 element");
  BAD((a.src_dtype = KVJIT_DTYPE_FP8_E4M3, a.dst_dtype = KVJIT_DTYPE_F32, a.dst_k_stride = 256),
      "or >= the destination's K row 1024, got 256");
  BAD((a.src_dtype = KVJIT_DTYPE_F32, a.dst_dtype = KVJIT_DTYPE_FP8_E4M3, a.k_row_bytes = (int64_t)1 << 24),
      "is more than a converting copy takes");
  BAD(a.max_ctas = -2, "max_ctas: must be 0");
  BAD(a.max_ctas = (1 << 20) + 1, "max_ctas");
  /* The rules of the plan, on the miss (no driver needed): heads dividing rows, splits keeping
   * elements whole. */
  BAD((a.src_dtype = KVJIT_DTYPE_FP8_E5M2, a.dst_dtype = KVJIT_DTYPE_F32, a.scale_kind = KVJIT_SCALE_PER_HEAD,
       a.k_scale = (const float *)FAKE(7), a.v_scale = (const float *)FAKE(8), a.num_heads = 3),
      "num_heads: 3 does not divide");
  BAD((a.src_dtype = KVJIT_DTYPE_F32, a.dst_dtype = KVJIT_DTYPE_FP8_E4M3, a.split = 128),
      "split: 128 cuts a 4-byte f32 element");
}

/* SGLang's page_head host layout of one layer: rows of @p heads heads of @p head_bytes, pages of
 * @p page slots, @p layers layers (tests/host_layouts.c). */
static kvjit_layout page_head(int64_t heads, int64_t head_bytes, int64_t page, int64_t layers) {
  const kvjit_host_layout h = {KVJIT_HOST_PAGE_HEAD, heads, head_bytes, page, layers, 1024};
  kvjit_layout l;
  kvjit_host_layout_view(&h, &l);
  return l;
}

static void test_layouts(void **state) {
  (void)state;
  const kvjit_layout ph = page_head(2, 128, 16, 4), ph3 = page_head(2, 128, 8, 4);
  BAD(a.src_k_layout = &ph, "src_v_layout: NULL while src_k_layout is given");
  BAD((a.dst_k_layout = &ph, a.dst_v_layout = &ph, a.dst_k_stride = 256), "dst_k_stride: must be 0 with dst_k_layout");
  BAD((a.src_v = NULL, a.dst_v = NULL, a.dst_v_layout = &ph), "dst_v_layout: given for a K-only copy");
  kvjit_transfer_kv_args a = good_args();
  a.src_k_layout = &ph;
  a.src_v_layout = &ph3;
  expect_bad(&a, "page sizes differ", KVJIT_ERR_UNSUPPORTED, "src_v_layout: its page size, runs and row dims differ");
  /* The same layout for K and V of one destination: every byte shared. */
  a = good_args();
  a.dst_v = a.dst_k;
  a.dst_k_layout = a.dst_v_layout = &ph;
  expect_bad(&a, "dst_k and dst_v one cache", KVJIT_ERR_INVALID_ARGUMENT, "dst_");
  /* Asymmetric rows with a laid-out side. */
  kvjit_layout wide = page_head(4, 128, 16, 4);
  a = good_args();
  a.v_row_bytes = 512;
  a.src_k_layout = &ph;
  a.src_v_layout = &wide;
  expect_bad(&a, "asymmetric rows", KVJIT_ERR_UNSUPPORTED, "src_v_layout");
  /* Valid: only the driver is missing (one layer, tables, a destination laid out, converting). */
  kvjit_transfer_kv_args ok[3] = {good_args(), good_args(), good_args()};
  ok[0].src_k_layout = ok[0].src_v_layout = &ph;
  ok[0].src = KVJIT_LOCATION_HOST;
  ok[1].dst_k_layout = ok[1].dst_v_layout = &ph;
  ok[1].num_layers = 4;
  const kvjit_layout ph8 = page_head(2, 64, 16, 4); /* fp8 rows: 256 bf16 elements -> 128 bytes */
  ok[2].src_dtype = KVJIT_DTYPE_BF16;
  ok[2].dst_dtype = KVJIT_DTYPE_FP8_E4M3;
  ok[2].dst_k_layout = ok[2].dst_v_layout = &ph8;
  for (int i = 0; i < 3; i++) {
    kvjit_status st = kvjit_transfer_kv(ctx, &ok[i]);
    if (st != KVJIT_ERR_NO_DRIVER && st != KVJIT_ERR_NO_DEVICE)
      fail_msg("layout case %d: %s \"%s\", expected only a missing driver", i, kvjit_status_name(st), kvjit_last_error());
  }
}

/* What passes validation and only lacks a driver, in every shape. */
static void test_valid_needs_driver(void **state) {
  (void)state;
  kvjit_transfer_kv_args good[11];
  for (int i = 0; i < 11; i++) good[i] = good_args();
  good[1].src = KVJIT_LOCATION_HOST;
  good[2].dst = KVJIT_LOCATION_HOST;
  good[2].index_type = KVJIT_INDEX_INT32;
  good[3].src_v = good[3].dst_v = NULL; /* K only */
  good[3].v_row_bytes = -5;             /* ignored */
  good[4].num_layers = 61;              /* tables; the caches they hold are checked on the device */
  good[5].src_k = (const char *)good[5].src_k + 2; /* 2-byte accesses */
  good[5].v_row_bytes = 98;
  good[6].version = 1; /* a version-1 caller: its struct ends before the version-2 fields */
  good[6].src_dtype = (kvjit_dtype)77;
  good[7].src_dtype = KVJIT_DTYPE_FP8_E4M3; /* dequantize on a load, per head, through tables */
  good[7].dst_dtype = KVJIT_DTYPE_BF16;
  good[7].scale_kind = KVJIT_SCALE_PER_HEAD;
  good[7].num_heads = 8;
  good[7].k_scale = (const float *)FAKE(7);
  good[7].v_scale = (const float *)FAKE(8);
  good[7].num_layers = 4;
  good[7].src = KVJIT_LOCATION_HOST;
  good[8].src_dtype = KVJIT_DTYPE_F32; /* quantize on an offload, no scale, K only */
  good[8].dst_dtype = KVJIT_DTYPE_FP8_E5M2;
  good[8].src_v = good[8].dst_v = NULL;
  good[8].dst = KVJIT_LOCATION_HOST;
  good[9].max_ctas = 3; /* a cap on the device too */
  good[10].max_ctas = KVJIT_TRANSFER_KV_ALL_CTAS;
  good[10].dst = KVJIT_LOCATION_HOST;
  for (int i = 0; i < 11; i++) {
    kvjit_status st = kvjit_transfer_kv(ctx, &good[i]);
    if (st != KVJIT_ERR_NO_DRIVER && st != KVJIT_ERR_NO_DEVICE)
      fail_msg("case %d: %s \"%s\", expected only a missing driver", i, kvjit_status_name(st), kvjit_last_error());
    for (unsigned flags = 0; flags <= KVJIT_TRANSFER_KV_ENABLE_PEER_ACCESS; flags++) {
      st = kvjit_transfer_kv_check_devices(ctx, &good[i], flags);
      if (st != KVJIT_ERR_NO_DRIVER && st != KVJIT_ERR_NO_DEVICE)
        fail_msg("case %d: check_devices(flags %u): %s \"%s\", expected only a missing driver", i, flags,
                 kvjit_status_name(st), kvjit_last_error());
    }
  }
  uint64_t n = 0;
  kvjit_status st = kvjit_op_oob_count(ctx, "transfer_kv", &n, 1);
  assert_true(st == KVJIT_ERR_NO_DRIVER || st == KVJIT_ERR_NO_DEVICE);
}

/* check_devices' own argument: unknown flag bits are refused, naming them, before anything else. */
static void test_check_devices_flags(void **state) {
  (void)state;
  kvjit_transfer_kv_args a = good_args();
  kvjit_status st = kvjit_transfer_kv_check_devices(ctx, &a, 6u);
  assert_int_equal(st, KVJIT_ERR_INVALID_ARGUMENT);
  if (strstr(kvjit_last_error(), "flags: unknown bits 0x6") == NULL) fail_msg("message: %s", kvjit_last_error());
  assert_int_equal(kvjit_transfer_kv_check_devices(NULL, &a, 0), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "ctx"));
  assert_int_equal(kvjit_transfer_kv_check_devices(ctx, NULL, 0), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "args"));
}

static void test_batch_zero_is_a_no_op(void **state) {
  (void)state;
  kvjit_transfer_kv_args a = KVJIT_TRANSFER_KV_ARGS_INIT;
  a.k_row_bytes = 256;
  a.src_num_slots = a.dst_num_slots = 1;
  assert_int_equal(kvjit_transfer_kv(ctx, &a), KVJIT_OK);
  a.split = 3; /* still checked */
  assert_int_equal(kvjit_transfer_kv(ctx, &a), KVJIT_ERR_INVALID_ARGUMENT);
  a.split = 0;
  a.src_k_stride = 3;
  assert_int_equal(kvjit_transfer_kv(ctx, &a), KVJIT_ERR_INVALID_ARGUMENT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_null_objects),
      cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_valid_needs_driver),
      cmocka_unit_test(test_check_devices_flags),
      cmocka_unit_test(test_layouts),
      cmocka_unit_test(test_batch_zero_is_a_no_op),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
