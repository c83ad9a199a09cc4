/*
 * The torch op's tensor-shape rules (python/csrc/store_args.c) without torch or a GPU: the layouts
 * kvjit.store_kv_cache() accepts become the right kvjit_store_kv_args, and every bad shape,
 * stride, dtype, device or scalar is refused with the right error class and a message naming
 * the argument.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kvjit.h"
#include "dlpack_view.h"
#include "request_util.h"
#include "store_args.h"
#include "transfer_args.h"

/* A decode-sized bf16 store: k, v [16, 8, 128]; caches [4096, 8, 128]; int64 slot ids. */
static void standard(request *r) {
  memset(r, 0, sizeof *r);
  make(&r->k, KVJIT_TENSOR_BF16, 0x10000, 3, (int64_t)16, (int64_t)8, (int64_t)128);
  make(&r->v, KVJIT_TENSOR_BF16, 0x20000, 3, (int64_t)16, (int64_t)8, (int64_t)128);
  make(&r->k_cache, KVJIT_TENSOR_BF16, 0x1000000, 3, (int64_t)4096, (int64_t)8, (int64_t)128);
  make(&r->v_cache, KVJIT_TENSOR_BF16, 0x2000000, 3, (int64_t)4096, (int64_t)8, (int64_t)128);
  make(&r->indices, KVJIT_TENSOR_I64, 0x30000, 1, (int64_t)16);
  r->req.num_slots = -1;
  r->req.skip_slot = -1;
}

/* The request is refused with @p kind and a message starting "@p arg:". */
static void expect_refused(request *r, kvjit_request_error kind, const char *arg) {
  kvjit_request_error got = run(r);
  if (got != kind || strncmp(r->msg, arg, strlen(arg)) != 0 || r->msg[strlen(arg)] != ':')
    fail_msg("expected error %d naming %s, got %d: %s", kind, arg, got, r->msg);
}

static void test_contiguous_store(void **state) {
  (void)state;
  request r;
  standard(&r);
  assert_int_equal(run(&r), KVJIT_REQUEST_OK);
  kvjit_store_kv_args *a = &r.args;
  assert_int_equal(a->version, KVJIT_STORE_KV_ARGS_VERSION);
  assert_ptr_equal(a->k, (void *)0x10000);
  assert_ptr_equal(a->v_cache, (void *)0x2000000);
  assert_int_equal(a->batch, 16);
  assert_int_equal(a->k_row_bytes, 2048);
  assert_int_equal(a->v_row_bytes, 2048);
  assert_int_equal(a->k_stride, 2048);
  assert_int_equal(a->k_cache_stride, 2048);
  assert_int_equal(a->num_slots, 4096);
  assert_int_equal(a->skip_slot, KVJIT_NO_SKIP_SLOT);
  assert_int_equal(a->index_type, KVJIT_INDEX_INT64);
  assert_int_equal(a->index_stride, 1);
  assert_int_equal(a->dtype, KVJIT_DTYPE_BYTES);
  assert_null(a->stream);
}

static void test_paged_cache_and_strides(void **state) {
  (void)state;
  request r;
  standard(&r);
  /* k: [16, 1024] rows 1536 elements apart (a slice of a fused qkv); v: [16, 8, 128]. */
  make(&r.k, KVJIT_TENSOR_BF16, 0x10000, 2, (int64_t)16, (int64_t)1024);
  r.k.strides[0] = 1536;
  /* Paged caches [256 pages, 16 per page, 8, 128] = 4096 slots; v's pages padded apart. */
  make(&r.k_cache, KVJIT_TENSOR_BF16, 0x1000000, 4, (int64_t)256, (int64_t)16, (int64_t)8, (int64_t)128);
  make(&r.v_cache, KVJIT_TENSOR_BF16, 0x2000000, 3, (int64_t)4000, (int64_t)8, (int64_t)128);
  r.v_cache.strides[0] = 2048;
  make(&r.indices, KVJIT_TENSOR_I32, 0x30000, 1, (int64_t)16);
  r.indices.strides[0] = 2;
  r.req.skip_slot = 0;
  r.req.split = 2;
  r.req.pdl = KVJIT_PDL_OFF;
  assert_int_equal(run(&r), KVJIT_REQUEST_OK);
  assert_int_equal(r.args.k_stride, 3072);
  assert_int_equal(r.args.k_cache_stride, 2048);
  assert_int_equal(r.args.v_cache_stride, 4096);
  assert_int_equal(r.args.num_slots, 4000); /* the smaller cache */
  assert_int_equal(r.args.index_type, KVJIT_INDEX_INT32);
  assert_int_equal(r.args.index_stride, 2);
  assert_int_equal(r.args.skip_slot, 0);
  assert_int_equal(r.args.split, 2);
  assert_int_equal(r.args.pdl, KVJIT_PDL_OFF);
}

static void test_k_only_and_raw_bytes(void **state) {
  (void)state;
  request r;
  standard(&r);
  r.v.view.present = r.v_cache.view.present = 0;
  /* uint8 caches take any rows of the same bytes. */
  make(&r.k_cache, KVJIT_TENSOR_U8, 0x1000000, 2, (int64_t)4096, (int64_t)2048);
  assert_int_equal(run(&r), KVJIT_REQUEST_OK);
  assert_null(r.args.v);
  assert_null(r.args.v_cache);
  assert_int_equal(r.args.k_cache_stride, 2048);
}

static void test_quantize_scales(void **state) {
  (void)state;
  request r;
  standard(&r);
  make(&r.k_cache, KVJIT_TENSOR_FP8_E4M3, 0x1000000, 3, (int64_t)4096, (int64_t)8, (int64_t)128);
  make(&r.v_cache, KVJIT_TENSOR_FP8_E4M3, 0x2000000, 3, (int64_t)4096, (int64_t)8, (int64_t)128);
  assert_int_equal(run(&r), KVJIT_REQUEST_OK);
  assert_int_equal(r.args.dtype, KVJIT_DTYPE_BF16);
  assert_int_equal(r.args.cache_dtype, KVJIT_DTYPE_FP8_E4M3);
  assert_int_equal(r.args.scale_kind, KVJIT_SCALE_NONE);
  assert_int_equal(r.args.k_cache_stride, 1024);
  make(&r.k_scale, KVJIT_TENSOR_F32, 0x40000, 1, (int64_t)1);
  make(&r.v_scale, KVJIT_TENSOR_F32, 0x40010, 1, (int64_t)1);
  assert_int_equal(run(&r), KVJIT_REQUEST_OK);
  assert_int_equal(r.args.scale_kind, KVJIT_SCALE_PER_TENSOR);
  assert_ptr_equal(r.args.k_scale, (void *)0x40000);
  make(&r.k_scale, KVJIT_TENSOR_F32, 0x40000, 1, (int64_t)8);
  make(&r.v_scale, KVJIT_TENSOR_F32, 0x40100, 1, (int64_t)8);
  assert_int_equal(run(&r), KVJIT_REQUEST_OK);
  assert_int_equal(r.args.scale_kind, KVJIT_SCALE_PER_HEAD);
  assert_int_equal(r.args.num_heads, 8);
  /* A uint8 cache says what it holds with cache_dtype. */
  make(&r.k_cache, KVJIT_TENSOR_U8, 0x1000000, 3, (int64_t)4096, (int64_t)8, (int64_t)128);
  make(&r.v_cache, KVJIT_TENSOR_U8, 0x2000000, 3, (int64_t)4096, (int64_t)8, (int64_t)128);
  r.req.cache_dtype = KVJIT_DTYPE_FP8_E5M2;
  assert_int_equal(run(&r), KVJIT_REQUEST_OK);
  assert_int_equal(r.args.cache_dtype, KVJIT_DTYPE_FP8_E5M2);
}

static void test_bad_shapes(void **state) {
  (void)state;
  request r;
  standard(&r);
  make(&r.k, KVJIT_TENSOR_BF16, 0x10000, 1, (int64_t)16);
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "k");
  standard(&r);
  r.k.strides[2] = 2; /* D not contiguous */
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "k");
  standard(&r);
  r.v.strides[0] = 512; /* rows overlap */
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "v");
  standard(&r);
  make(&r.v, KVJIT_TENSOR_BF16, 0x20000, 3, (int64_t)15, (int64_t)8, (int64_t)128);
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "v");
  standard(&r);
  make(&r.k_cache, KVJIT_TENSOR_BF16, 0x1000000, 3, (int64_t)4096, (int64_t)8, (int64_t)64);
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "k_cache");
  standard(&r);
  make(&r.k_cache, KVJIT_TENSOR_BF16, 0x1000000, 4, (int64_t)256, (int64_t)16, (int64_t)8, (int64_t)128);
  r.k_cache.strides[0] = 0; /* a broadcast page dim: pages would share bytes (test_cache_views.c: the rest) */
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "k_cache");
  standard(&r);
  make(&r.v_cache, KVJIT_TENSOR_BF16, 0x2000000, 3, (int64_t)0, (int64_t)8, (int64_t)128);
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "v_cache");
  standard(&r);
  r.v_cache.view.present = 0;
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "v_cache");
  standard(&r);
  r.v.view.present = 0;
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "v");
  standard(&r);
  make(&r.indices, KVJIT_TENSOR_I64, 0x30000, 1, (int64_t)17);
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "indices");
  standard(&r);
  r.indices.view.data = 0x30004;
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "indices");
  standard(&r);
  r.k_cache.view.device_index = 1;
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "k_cache");
  standard(&r);
  r.k.view.present = 0;
  expect_refused(&r, KVJIT_REQUEST_TYPE_ERROR, "k");
}

static void test_bad_dtypes(void **state) {
  (void)state;
  request r;
  standard(&r);
  make(&r.k_cache, KVJIT_TENSOR_F16, 0x1000000, 3, (int64_t)4096, (int64_t)8, (int64_t)128);
  expect_refused(&r, KVJIT_REQUEST_TYPE_ERROR, "k_cache");
  standard(&r);
  make(&r.v, KVJIT_TENSOR_OTHER, 0x20000, 3, (int64_t)16, (int64_t)8, (int64_t)64); /* f64: same bytes */
  expect_refused(&r, KVJIT_REQUEST_TYPE_ERROR, "v_cache");
  standard(&r);
  make(&r.indices, KVJIT_TENSOR_F32, 0x30000, 1, (int64_t)16);
  expect_refused(&r, KVJIT_REQUEST_TYPE_ERROR, "indices");
  standard(&r);
  make(&r.k_cache, KVJIT_TENSOR_F16, 0x1000000, 3, (int64_t)4096, (int64_t)8, (int64_t)128);
  r.req.cache_dtype = KVJIT_DTYPE_FP8_E4M3; /* an f16 cache cannot hold fp8 */
  expect_refused(&r, KVJIT_REQUEST_TYPE_ERROR, "k_cache");
  standard(&r);
  r.req.cache_dtype = 7;
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "cache_dtype");
  /* Quantizing: k and v of one dtype, f32 scales, both or neither. */
  standard(&r);
  make(&r.k_cache, KVJIT_TENSOR_FP8_E4M3, 0x1000000, 3, (int64_t)4096, (int64_t)8, (int64_t)128);
  make(&r.v_cache, KVJIT_TENSOR_FP8_E4M3, 0x2000000, 3, (int64_t)4096, (int64_t)8, (int64_t)128);
  make(&r.v, KVJIT_TENSOR_F16, 0x20000, 3, (int64_t)16, (int64_t)8, (int64_t)128);
  expect_refused(&r, KVJIT_REQUEST_TYPE_ERROR, "v");
  make(&r.v, KVJIT_TENSOR_BF16, 0x20000, 3, (int64_t)16, (int64_t)8, (int64_t)128);
  make(&r.k_scale, KVJIT_TENSOR_F16, 0x40000, 1, (int64_t)1);
  make(&r.v_scale, KVJIT_TENSOR_F32, 0x40010, 1, (int64_t)1);
  expect_refused(&r, KVJIT_REQUEST_TYPE_ERROR, "k_scale");
  make(&r.k_scale, KVJIT_TENSOR_F32, 0x40000, 1, (int64_t)1);
  r.v_scale.view.present = 0;
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "v_scale");
  make(&r.v_scale, KVJIT_TENSOR_F32, 0x40010, 1, (int64_t)8);
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "v_scale");
  make(&r.k_scale, KVJIT_TENSOR_F32, 0x40000, 1, (int64_t)4);
  make(&r.v_scale, KVJIT_TENSOR_F32, 0x40010, 1, (int64_t)4);
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "k_scale");
  make(&r.k_scale, KVJIT_TENSOR_F32, 0x40002, 1, (int64_t)1);
  make(&r.v_scale, KVJIT_TENSOR_F32, 0x40010, 1, (int64_t)1);
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "k_scale");
  /* Scales without an fp8 cache. */
  standard(&r);
  make(&r.k_scale, KVJIT_TENSOR_F32, 0x40000, 1, (int64_t)1);
  make(&r.v_scale, KVJIT_TENSOR_F32, 0x40010, 1, (int64_t)1);
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "k_scale");
}

static void test_bad_scalars(void **state) {
  (void)state;
  const struct {
    int64_t num_slots, skip_slot, split, pdl;
    const char *arg;
  } cases[] = {
      {0, -1, 0, 0, "num_slots"},    {4097, -1, 0, 0, "num_slots"}, {-2, -1, 0, 0, "num_slots"},
      {100, 100, 0, 0, "skip_slot"}, {-1, -2, 0, 0, "skip_slot"},   {-1, -1, -1, 0, "split"},
      {-1, -1, (int64_t)1 << 40, 0, "split"}, {-1, -1, 0, 3, "pdl"}, {-1, -1, 0, -1, "pdl"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    request r;
    standard(&r);
    r.req.num_slots = cases[i].num_slots;
    r.req.skip_slot = cases[i].skip_slot;
    r.req.split = cases[i].split;
    r.req.pdl = cases[i].pdl;
    expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, cases[i].arg);
  }
  request r;
  standard(&r);
  r.req.num_slots = 100;
  r.req.skip_slot = 99;
  assert_int_equal(run(&r), KVJIT_REQUEST_OK);
  assert_int_equal(r.args.num_slots, 100);
  assert_int_equal(r.args.skip_slot, 99);
}

static void test_short_message_buffer(void **state) {
  (void)state;
  request r;
  standard(&r);
  make(&r.k, KVJIT_TENSOR_BF16, 0x10000, 1, (int64_t)16);
  r.req.k = r.k.view;
  r.req.v = r.v.view;
  r.req.k_cache = r.k_cache.view;
  r.req.v_cache = r.v_cache.view;
  r.req.indices = r.indices.view;
  char tiny[8];
  assert_int_equal(kvjit_store_request_args(&r.req, &r.args, &r.layouts, tiny, sizeof tiny), KVJIT_REQUEST_VALUE_ERROR);
  assert_string_equal(tiny, "k: expe");
  assert_int_equal(kvjit_store_request_args(&r.req, &r.args, &r.layouts, NULL, 0), KVJIT_REQUEST_VALUE_ERROR);
}

static void test_every_tensor_on_the_device(void **state) {
  (void)state;
  request r;
  standard(&r);
  run(&r);
  assert_int_equal(kvjit_store_request_on_device(&r.req, DEV_CUDA, "CUDA", r.msg, sizeof r.msg), KVJIT_REQUEST_OK);
  r.req.indices.device_type = 0;
  assert_int_equal(kvjit_store_request_on_device(&r.req, DEV_CUDA, "CUDA", r.msg, sizeof r.msg),
                   KVJIT_REQUEST_VALUE_ERROR);
  assert_string_equal(r.msg, "indices: must be a CUDA tensor, got one on device type 0");
  r.req.v.present = 0; /* None is on no device */
  r.req.v.device_type = 0;
  r.req.indices.device_type = DEV_CUDA;
  assert_int_equal(kvjit_store_request_on_device(&r.req, DEV_CUDA, "CUDA", NULL, 0), KVJIT_REQUEST_OK);
}


/* ---- transfer_kv's rules (transfer_args.c) ------------------------------------------------- */

typedef struct transfer {
  tensor src_k, src_v, dst_k, dst_v, src_indices, dst_indices;
  kvjit_transfer_request req;
  kvjit_transfer_kv_args args;
  kvjit_transfer_layouts layouts;
  int32_t device;
  char msg[512];
} transfer;

/* Device caches [4096, 8, 128] bf16 -> a pinned host cache paged [64, 64, 8, 128]; 16 int64 ids. */
static void offload(transfer *t) {
  memset(t, 0, sizeof *t);
  make(&t->src_k, KVJIT_TENSOR_BF16, 0x1000000, 3, (int64_t)4096, (int64_t)8, (int64_t)128);
  make(&t->src_v, KVJIT_TENSOR_BF16, 0x2000000, 3, (int64_t)4096, (int64_t)8, (int64_t)128);
  make(&t->dst_k, KVJIT_TENSOR_BF16, 0x3000000, 4, (int64_t)64, (int64_t)64, (int64_t)8, (int64_t)128);
  make(&t->dst_v, KVJIT_TENSOR_BF16, 0x4000000, 4, (int64_t)64, (int64_t)64, (int64_t)8, (int64_t)128);
  t->dst_k.view.device_type = t->dst_v.view.device_type = 0; /* host */
  make(&t->src_indices, KVJIT_TENSOR_I64, 0x50000, 1, (int64_t)16);
  make(&t->dst_indices, KVJIT_TENSOR_I64, 0x60000, 1, (int64_t)16);
  t->req.src_num_slots = t->req.dst_num_slots = t->req.row_elements = -1;
}

static kvjit_request_error run_transfer(transfer *t) {
  t->req.src_k = t->src_k.view;
  t->req.src_v = t->src_v.view;
  t->req.dst_k = t->dst_k.view;
  t->req.dst_v = t->dst_v.view;
  t->req.src_indices = t->src_indices.view;
  t->req.dst_indices = t->dst_indices.view;
  return kvjit_transfer_request_args(&t->req, DEV_CUDA, &t->args, &t->layouts, &t->device, t->msg, sizeof t->msg);
}

static void expect_transfer_refused(transfer *t, kvjit_request_error kind, const char *start) {
  kvjit_request_error got = run_transfer(t);
  if (got != kind || strncmp(t->msg, start, strlen(start)) != 0)
    fail_msg("expected error %d starting '%s', got %d: %s", kind, start, got, t->msg);
}

static void test_transfer_device_to_host(void **state) {
  (void)state;
  transfer t;
  offload(&t);
  assert_int_equal(run_transfer(&t), KVJIT_REQUEST_OK);
  kvjit_transfer_kv_args *a = &t.args;
  assert_int_equal(a->version, KVJIT_TRANSFER_KV_ARGS_VERSION);
  assert_ptr_equal(a->src_k, (void *)0x1000000);
  assert_ptr_equal(a->dst_v, (void *)0x4000000);
  assert_int_equal(a->src, KVJIT_LOCATION_DEVICE);
  assert_int_equal(a->dst, KVJIT_LOCATION_HOST);
  assert_int_equal(a->batch, 16);
  assert_int_equal(a->k_row_bytes, 2048);
  assert_int_equal(a->v_row_bytes, 2048);
  assert_int_equal(a->src_k_stride, 2048);
  assert_int_equal(a->dst_v_stride, 2048);
  assert_int_equal(a->src_num_slots, 4096);
  assert_int_equal(a->dst_num_slots, 4096);
  assert_int_equal(a->num_layers, 0);
  assert_int_equal(a->index_type, KVJIT_INDEX_INT64);
  assert_int_equal(t.device, 0);
  assert_null(a->stream);
  /* K only, rows given as 1024 elements, fewer destination slots used */
  offload(&t);
  t.src_v.view.present = t.dst_v.view.present = 0;
  t.req.row_elements = 1024;
  t.req.dst_num_slots = 100;
  assert_int_equal(run_transfer(&t), KVJIT_REQUEST_OK);
  assert_null(t.args.src_v);
  assert_int_equal(t.args.v_row_bytes, 0);
  assert_int_equal(t.args.dst_num_slots, 100);
}

static void test_transfer_refusals(void **state) {
  (void)state;
  transfer t;
  offload(&t);
  t.dst_k.view.kind = KVJIT_TENSOR_F16;
  t.dst_k.view.code = codes[KVJIT_TENSOR_F16];
  expect_transfer_refused(&t, KVJIT_REQUEST_TYPE_ERROR, "dst_k: dtype f16 differs from src_k's bf16");
  offload(&t);
  t.dst_v.view.kind = KVJIT_TENSOR_I16;
  t.dst_v.view.code = codes[KVJIT_TENSOR_I16];
  expect_transfer_refused(&t, KVJIT_REQUEST_TYPE_ERROR, "dst_v: dtype i16 differs from src_v's bf16");
  offload(&t);
  t.dst_v.view.present = 0;
  expect_transfer_refused(&t, KVJIT_REQUEST_VALUE_ERROR, "dst_v: None while the other is given");
  offload(&t);
  t.src_v.view.device_type = 0;
  expect_transfer_refused(&t, KVJIT_REQUEST_VALUE_ERROR, "src_v: on the other side of the link from src_k");
  offload(&t);
  t.dst_indices.sizes[0] = 15;
  expect_transfer_refused(&t, KVJIT_REQUEST_VALUE_ERROR, "dst_indices: 15 slot ids, src_indices has 16");
  offload(&t);
  t.dst_indices.view.kind = KVJIT_TENSOR_I32;
  t.dst_indices.view.itemsize = 4;
  expect_transfer_refused(&t, KVJIT_REQUEST_TYPE_ERROR, "dst_indices: dtype i32 differs from src_indices' i64");
  offload(&t);
  t.src_indices.view.device_index = 1;
  expect_transfer_refused(&t, KVJIT_REQUEST_VALUE_ERROR, "src_indices: on cuda:1, the transfer runs on cuda:0");
  offload(&t);
  t.req.row_elements = 0;
  expect_transfer_refused(&t, KVJIT_REQUEST_VALUE_ERROR, "row_elements: must be None or 1..2**31");
  offload(&t);
  t.req.row_elements = 100; /* 200 bytes: no trailing dims of the caches make that */
  expect_transfer_refused(&t, KVJIT_REQUEST_VALUE_ERROR, "src_k: no trailing dims");
  offload(&t);
  t.req.src_num_slots = 4097;
  expect_transfer_refused(&t, KVJIT_REQUEST_VALUE_ERROR, "src_num_slots: must be 1..4096, got 4097");
  offload(&t);
  t.req.split = -1;
  expect_transfer_refused(&t, KVJIT_REQUEST_VALUE_ERROR, "split: ");
  offload(&t);
  t.req.pdl = 7;
  expect_transfer_refused(&t, KVJIT_REQUEST_VALUE_ERROR, "pdl: ");
  offload(&t);
  make(&t.src_k, KVJIT_TENSOR_BF16, 0x1000000, 1, (int64_t)4096);
  expect_transfer_refused(&t, KVJIT_REQUEST_VALUE_ERROR, "src_k: expected [slots, ...] with at least two dims");
  offload(&t);
  t.src_k.view.present = 0;
  expect_transfer_refused(&t, KVJIT_REQUEST_TYPE_ERROR, "src_k: expected a tensor, got None");
}

static void test_tensor_extent(void **state) {
  (void)state;
  tensor t;
  make(&t, KVJIT_TENSOR_BF16, 0x1000, 3, (int64_t)10, (int64_t)8, (int64_t)128);
  assert_int_equal(kvjit_tensor_view_extent(&t.view), 10 * 8 * 128 * 2);
  t.strides[0] = 2048; /* slots padded apart: the last slot's row ends the extent */
  assert_int_equal(kvjit_tensor_view_extent(&t.view), (9 * 2048 + 1024) * 2);
  t.sizes[0] = 0;
  assert_int_equal(kvjit_tensor_view_extent(&t.view), 0);
}

/* A producer's DLTensor is memory anyone can write (issue 24): every lie is refused, naming the
 * argument, before a size is read past the shape array or used in arithmetic. */
static void test_lying_dlpack_tensors(void **state) {
  (void)state;
  int64_t shape[3] = {4, 8, 128}, strides[3] = {1024, 128, 1};
  kvjit_dl_tensor t = {(void *)0x10000, {KVJIT_DL_CUDA, 0}, 3, {4, 16, 1}, shape, strides, 0};
  kvjit_tensor_view out;
  kvjit_dl_dims dims;
  char msg[256];
  assert_int_equal(kvjit_dl_view(&t, "k", 0, &out, &dims, msg, sizeof msg), 0);
  assert_int_equal(out.kind, KVJIT_TENSOR_BF16);
  assert_true(out.sizes == dims.sizes && dims.sizes[2] == 128); /* copied: the capsule may go */
  kvjit_dl_tensor bad = t;
  bad.ndim = INT32_MAX; /* with a shape array of 3 */
  assert_int_equal(kvjit_dl_view(&bad, "k", 0, &out, &dims, msg, sizeof msg), -1);
  assert_non_null(strstr(msg, "k: DLPack ndim"));
  bad = t;
  bad.shape = NULL;
  assert_int_equal(kvjit_dl_view(&bad, "v", 0, &out, &dims, msg, sizeof msg), -1);
  assert_non_null(strstr(msg, "v: DLPack shape is NULL"));
  int64_t huge_strides[3] = {INT64_C(1) << 62, 128, 1};
  bad = t;
  bad.strides = huge_strides;
  assert_int_equal(kvjit_dl_view(&bad, "k_cache", 0, &out, &dims, msg, sizeof msg), -1);
  assert_non_null(strstr(msg, "k_cache: stride"));
  bad = t;
  bad.byte_offset = UINT64_MAX;
  assert_int_equal(kvjit_dl_view(&bad, "indices", 0, &out, &dims, msg, sizeof msg), -1);
  assert_non_null(strstr(msg, "indices: DLPack byte_offset"));
  int64_t big_shape[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 128};
  bad = t;
  bad.shape = big_shape;
  bad.strides = NULL;
  assert_int_equal(kvjit_dl_view(&bad, "k", 0, &out, &dims, msg, sizeof msg), -1);
  assert_non_null(strstr(msg, "larger than 2^62"));
  int64_t negative[3] = {4, -8, 128};
  bad = t;
  bad.shape = negative;
  assert_int_equal(kvjit_dl_view(&bad, "k", 0, &out, &dims, msg, sizeof msg), -1);
  assert_non_null(strstr(msg, "negative"));
}

/* DLPack's type codes and widths (dlpack.h) as kvjit names them; anything else, or more than one
 * lane (but torch's float4 pair), is a type it cannot name. */
static void test_dlpack_type_names(void **state) {
  (void)state;
  static const struct {
    uint8_t code, bits;
    const char *name;
  } named[] = {{0, 8, "i8"}, {0, 16, "i16"}, {0, 32, "i32"}, {0, 64, "i64"}, {1, 8, "u8"}, {1, 16, "u16"},
               {1, 32, "u32"}, {1, 64, "u64"}, {2, 16, "f16"}, {2, 32, "f32"}, {2, 64, "f64"}, {4, 16, "bf16"},
               {5, 32, "complex32"}, {5, 64, "complex64"}, {5, 128, "complex128"}, {6, 8, "bool"},
               {10, 8, "fp8_e4m3"}, {11, 8, "float8_e4m3fnuz"}, {12, 8, "fp8_e5m2"}, {13, 8, "float8_e5m2fnuz"},
               {14, 8, "float8_e8m0fnu"}};
  int count = 0;
  for (int code = 0; code < 256; code++) {
    for (int bits = 0; bits < 256; bits++) {
      for (int lanes = 0; lanes < 4; lanes++) {
        kvjit_dl_dtype t = {(uint8_t)code, (uint8_t)bits, (uint16_t)lanes};
        const char *expected = NULL;
        for (size_t i = 0; i < sizeof named / sizeof named[0] && lanes == 1; i++)
          if (named[i].code == code && named[i].bits == bits) expected = named[i].name;
        if (code == 17 && bits == 4 && lanes == 2) expected = "float4_e2m1fn_x2";
        kvjit_tensor_kind kind = kvjit_dl_kind(t);
        if (expected == NULL) {
          assert_int_equal(kind, KVJIT_TENSOR_OTHER);
        } else {
          assert_string_equal(kvjit_tensor_kind_name(kind), expected);
          count++;
        }
      }
    }
  }
  assert_int_equal(count, (int)(sizeof named / sizeof named[0]) + 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lying_dlpack_tensors),
      cmocka_unit_test(test_contiguous_store),  cmocka_unit_test(test_paged_cache_and_strides),
      cmocka_unit_test(test_k_only_and_raw_bytes), cmocka_unit_test(test_quantize_scales),
      cmocka_unit_test(test_bad_shapes),        cmocka_unit_test(test_bad_dtypes),
      cmocka_unit_test(test_bad_scalars),       cmocka_unit_test(test_short_message_buffer),
      cmocka_unit_test(test_every_tensor_on_the_device), cmocka_unit_test(test_transfer_device_to_host),
      cmocka_unit_test(test_transfer_refusals),       cmocka_unit_test(test_tensor_extent),
      cmocka_unit_test(test_dlpack_type_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
