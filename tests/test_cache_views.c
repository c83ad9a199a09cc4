/*
 * Issue 29, item 3: from Python the layout comes from the tensors. The one copy of the view rules
 * (python/csrc/view_rules.c, store_args.c) reads the caches vLLM and SGLang pass -- NHD, HND and
 * FlashAttention's packed caches as NHD-shaped views with permuted strides, the older chunked K
 * [blocks, H, D/x, block_size, x] and V [blocks, H, D, block_size], MLA's two sources into one row,
 * SGLang's flat [size, H, D] rows -- and fills kvjit_layout (strides in bytes), or keeps today's
 * flat stride where the cache is flat. No torch, no GPU: tensors are sizes and strides.
 * The refusals: broadcast (overlapping) strides, extents that do not make the row, chunks that do
 * not divide the head, slot dims that are neither (slots) nor (pages, page_size), an ambiguous
 * 4-D V; and, from the library's one copy of the layout rules (src/op/layout.c), a view whose
 * pages overlap is refused there.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kvjit.h"
#include "layout.h"
#include "request_util.h"
#include "store_args.h"
#include "transfer_args.h"
#include "view_rules.h"

enum { H = 8, D = 128, BLOCKS = 256, BS = 16 };

/* torch's transpose(a, b): a view of the same storage. */
static void transpose(tensor *t, int a, int b) {
  int64_t s = t->sizes[a], st = t->strides[a];
  t->sizes[a] = t->sizes[b];
  t->strides[a] = t->strides[b];
  t->sizes[b] = s;
  t->strides[b] = st;
}

/* t[..., from:from + n] on the last dim. */
static void narrow_last(tensor *t, int64_t from, int64_t n) {
  int last = (int)t->view.ndim - 1;
  t->view.data += (uintptr_t)(from * t->strides[last] * t->view.itemsize);
  t->sizes[last] = n;
}

/* bf16 k, v [16, H, D] and int64 ids; the caches are the test's. */
static void rows(request *r) {
  memset(r, 0, sizeof *r);
  make(&r->k, KVJIT_TENSOR_BF16, 0x10000, 3, (int64_t)16, (int64_t)H, (int64_t)D);
  make(&r->v, KVJIT_TENSOR_BF16, 0x20000, 3, (int64_t)16, (int64_t)H, (int64_t)D);
  make(&r->indices, KVJIT_TENSOR_I64, 0x30000, 1, (int64_t)16);
  r->req.num_slots = -1;
  r->req.skip_slot = -1;
}

/* K and V caches, both contiguous [a, b, c, d] of @p kind (then viewed as each test says). */
static void caches4(request *r, kvjit_tensor_kind kind, int64_t a, int64_t b, int64_t c, int64_t d) {
  make(&r->k_cache, kind, 0x1000000, 4, a, b, c, d);
  make(&r->v_cache, kind, 0x2000000, 4, a, b, c, d);
}

static void expect_ok(request *r) {
  kvjit_request_error got = run(r);
  if (got != KVJIT_REQUEST_OK) fail_msg("refused: %s", r->msg);
}

/* Refused with @p kind, the message starting "@p arg:" and holding @p words. */
static void expect_refused(request *r, kvjit_request_error kind, const char *arg, const char *words) {
  kvjit_request_error got = run(r);
  if (got != kind || strncmp(r->msg, arg, strlen(arg)) != 0 || r->msg[strlen(arg)] != ':' ||
      strstr(r->msg, words) == NULL)
    fail_msg("expected error %d naming %s with \"%s\", got %d: %s", kind, arg, words, got, r->msg);
}

/* @p l is a paged layout (page_size @p ps, strides in bytes) with @p n row dims (extent, stride)... */
static void expect_layout(const kvjit_layout *l, int64_t ps, int64_t page_stride, int64_t slot_stride,
                          int64_t element_bytes, int n, ...) {
  assert_non_null(l);
  assert_int_equal(l->version, KVJIT_LAYOUT_VERSION);
  assert_int_equal(l->page_size, ps);
  assert_int_equal(l->page_stride, page_stride);
  assert_int_equal(l->slot_stride, slot_stride);
  assert_int_equal(l->element_bytes, element_bytes);
  assert_int_equal(l->num_row_dims, n);
  va_list ap;
  va_start(ap, n);
  for (int i = 0; i < n; i++) {
    assert_int_equal(l->row_extents[i], va_arg(ap, int64_t));
    assert_int_equal(l->row_strides[i], va_arg(ap, int64_t));
  }
  va_end(ap);
}

/* The library's own checks of an inferred layout (src/op/layout.c): status of resolve + slots. */
static kvjit_status library_checks(const kvjit_layout *l, int64_t row_bytes, int64_t slots) {
  kvjit_view view;
  kvjit_status s = kvjit_view_resolve(&view, "k_cache_layout", l, row_bytes, 0);
  return s != KVJIT_OK ? s : kvjit_view_check_slots(&view, "k_cache_layout", slots);
}

static void test_nhd_stays_flat(void **state) {
  (void)state;
  request r;
  rows(&r);
  caches4(&r, KVJIT_TENSOR_BF16, BLOCKS, BS, H, D);
  expect_ok(&r);
  /* today's flat rows: no layout, the same args (and the same kernel) as before issue 29 */
  assert_null(r.args.k_cache_layout);
  assert_null(r.args.v_cache_layout);
  assert_int_equal(r.args.k_cache_stride, H * D * 2);
  assert_int_equal(r.args.num_slots, BLOCKS * BS);
  /* SGLang's [size, H, D] pool too */
  make(&r.k_cache, KVJIT_TENSOR_BF16, 0x1000000, 3, (int64_t)4096, (int64_t)H, (int64_t)D);
  expect_ok(&r);
  assert_null(r.args.k_cache_layout);
  assert_int_equal(r.args.num_slots, 4096);
}

static void test_hnd_view(void **state) {
  (void)state;
  request r;
  rows(&r);
  /* [blocks, H, block_size, D] passed as transpose(1, 2): [blocks, block_size, H, D] */
  caches4(&r, KVJIT_TENSOR_BF16, BLOCKS, H, BS, D);
  transpose(&r.k_cache, 1, 2);
  transpose(&r.v_cache, 1, 2);
  expect_ok(&r);
  assert_int_equal(r.args.k_cache_stride, 0);
  assert_int_equal(r.args.num_slots, BLOCKS * BS);
  expect_layout(r.args.k_cache_layout, BS, H * BS * D * 2, D * 2, 2, 2, (int64_t)H, (int64_t)(BS * D * 2),
                (int64_t)D, (int64_t)2);
  expect_layout(r.args.v_cache_layout, BS, H * BS * D * 2, D * 2, 2, 2, (int64_t)H, (int64_t)(BS * D * 2),
                (int64_t)D, (int64_t)2);
  assert_ptr_equal(r.args.k_cache_layout, &r.layouts.k);
  assert_ptr_equal(r.args.v_cache_layout, &r.layouts.v);
  assert_int_equal(library_checks(r.args.k_cache_layout, H * D * 2, BLOCKS * BS), KVJIT_OK);
  /* per-head fp8 scales: the outermost row dim is the head */
  caches4(&r, KVJIT_TENSOR_U8, BLOCKS, H, BS, D);
  transpose(&r.k_cache, 1, 2);
  transpose(&r.v_cache, 1, 2);
  make(&r.k_scale, KVJIT_TENSOR_F32, 0x40000, 1, (int64_t)H);
  make(&r.v_scale, KVJIT_TENSOR_F32, 0x40100, 1, (int64_t)H);
  r.req.cache_dtype = KVJIT_DTYPE_FP8_E4M3;
  expect_ok(&r);
  assert_int_equal(r.args.scale_kind, KVJIT_SCALE_PER_HEAD);
  assert_int_equal(r.args.num_heads, H);
  expect_layout(r.args.k_cache_layout, BS, H * BS * D, D, 1, 2, (int64_t)H, (int64_t)(BS * D), (int64_t)D,
                (int64_t)1);
}

static void test_flashattention_packed_view(void **state) {
  (void)state;
  request r;
  rows(&r);
  /* one [blocks, H, block_size, 2D] cache: K = [..., :D], V = [..., D:] of its transpose(1, 2) */
  make(&r.k_cache, KVJIT_TENSOR_BF16, 0x1000000, 4, (int64_t)BLOCKS, (int64_t)H, (int64_t)BS, (int64_t)(2 * D));
  transpose(&r.k_cache, 1, 2);
  alias(&r.v_cache, &r.k_cache, r.k_cache.view.data);
  narrow_last(&r.k_cache, 0, D);
  narrow_last(&r.v_cache, D, D);
  expect_ok(&r);
  assert_ptr_equal(r.args.v_cache, (void *)(0x1000000 + D * 2));
  expect_layout(r.args.k_cache_layout, BS, H * BS * 4 * D, 4 * D, 2, 2, (int64_t)H, (int64_t)(BS * 4 * D),
                (int64_t)D, (int64_t)2);
  expect_layout(r.args.v_cache_layout, BS, H * BS * 4 * D, 4 * D, 2, 2, (int64_t)H, (int64_t)(BS * 4 * D),
                (int64_t)D, (int64_t)2);
  assert_int_equal(library_checks(r.args.k_cache_layout, H * D * 2, BLOCKS * BS), KVJIT_OK);
  kvjit_view kv, vv;
  assert_int_equal(kvjit_view_resolve(&kv, "k_cache_layout", r.args.k_cache_layout, H * D * 2, 0), KVJIT_OK);
  assert_int_equal(kvjit_view_resolve(&vv, "v_cache_layout", r.args.v_cache_layout, H * D * 2, 0), KVJIT_OK);
  assert_int_equal(kvjit_view_check_disjoint(&kv, "k_cache", (uint64_t)(uintptr_t)r.args.k_cache, &vv, "v_cache",
                                             (uint64_t)(uintptr_t)r.args.v_cache, BLOCKS * BS),
                   KVJIT_OK);
}

static void chunked_caches(request *r, kvjit_tensor_kind kind, int64_t x) {
  make(&r->k_cache, kind, 0x1000000, 5, (int64_t)BLOCKS, (int64_t)H, (int64_t)(D / x), (int64_t)BS, x);
  make(&r->v_cache, kind, 0x2000000, 4, (int64_t)BLOCKS, (int64_t)H, (int64_t)D, (int64_t)BS);
}

static void test_chunked_paged_layout(void **state) {
  (void)state;
  request r;
  rows(&r);
  chunked_caches(&r, KVJIT_TENSOR_BF16, 8); /* x = 16 bytes of bf16 */
  r.req.layout = KVJIT_STORE_LAYOUT_VLLM_PAGED;
  expect_ok(&r);
  /* K: slot (block, position) -> rows of (H, D/x, x); V: (H, D) with D block_size elements apart */
  expect_layout(r.args.k_cache_layout, BS, H * D * BS * 2, 16, 2, 3, (int64_t)H, (int64_t)(D * BS * 2),
                (int64_t)(D / 8), (int64_t)(BS * 16), (int64_t)8, (int64_t)2);
  expect_layout(r.args.v_cache_layout, BS, H * D * BS * 2, 2, 2, 2, (int64_t)H, (int64_t)(D * BS * 2), (int64_t)D,
                (int64_t)(BS * 2));
  assert_int_equal(r.args.num_slots, BLOCKS * BS);
  assert_int_equal(library_checks(r.args.k_cache_layout, H * D * 2, BLOCKS * BS), KVJIT_OK);
  assert_int_equal(library_checks(r.args.v_cache_layout, H * D * 2, BLOCKS * BS), KVJIT_OK);
  /* fp8 caches: x = 16 one-byte elements */
  chunked_caches(&r, KVJIT_TENSOR_U8, 16);
  r.req.cache_dtype = KVJIT_DTYPE_FP8_E4M3;
  make(&r.k_scale, KVJIT_TENSOR_F32, 0x40000, 1, (int64_t)1);
  make(&r.v_scale, KVJIT_TENSOR_F32, 0x40100, 1, (int64_t)1);
  expect_ok(&r);
  assert_int_equal(r.args.scale_kind, KVJIT_SCALE_PER_TENSOR);
  expect_layout(r.args.k_cache_layout, BS, H * D * BS, 16, 1, 3, (int64_t)H, (int64_t)(D * BS), (int64_t)(D / 16),
                (int64_t)(BS * 16), (int64_t)16, (int64_t)1);
  expect_layout(r.args.v_cache_layout, BS, H * D * BS, 1, 1, 2, (int64_t)H, (int64_t)(D * BS), (int64_t)D,
                (int64_t)BS);
  /* a 5-D K alone (no V) needs no keyword: its shape says what it is */
  rows(&r);
  chunked_caches(&r, KVJIT_TENSOR_BF16, 8);
  r.v.view.present = r.v_cache.view.present = 0;
  expect_ok(&r);
  assert_non_null(r.args.k_cache_layout);
  assert_int_equal(r.args.k_cache_layout->num_row_dims, 3);
}

static void test_mla_concat_stays_flat(void **state) {
  (void)state;
  request r;
  rows(&r);
  /* kv_c [16, 512] and k_pe [16, 64] into one [blocks, 64, 576] cache */
  make(&r.k, KVJIT_TENSOR_BF16, 0x10000, 2, (int64_t)16, (int64_t)512);
  make(&r.v, KVJIT_TENSOR_BF16, 0x20000, 2, (int64_t)16, (int64_t)64);
  make(&r.k_cache, KVJIT_TENSOR_BF16, 0x1000000, 3, (int64_t)64, (int64_t)64, (int64_t)576);
  alias(&r.v_cache, &r.k_cache, r.k_cache.view.data);
  narrow_last(&r.k_cache, 0, 512);
  narrow_last(&r.v_cache, 512, 64);
  expect_ok(&r);
  assert_null(r.args.k_cache_layout);
  assert_null(r.args.v_cache_layout);
  assert_int_equal(r.args.k_cache_stride, 1152);
  assert_int_equal(r.args.v_cache_stride, 1152);
  assert_ptr_equal(r.args.v_cache, (void *)(0x1000000 + 1024));
  assert_int_equal(r.args.num_slots, 64 * 64);
}

static void test_strided_rows_and_odd_dims(void **state) {
  (void)state;
  request r;
  rows(&r);
  /* SGLang-style flat slots whose heads are strided: K half of a [size, H, 2D] buffer */
  make(&r.k_cache, KVJIT_TENSOR_BF16, 0x1000000, 3, (int64_t)4096, (int64_t)H, (int64_t)(2 * D));
  narrow_last(&r.k_cache, 0, D);
  make(&r.v_cache, KVJIT_TENSOR_BF16, 0x2000000, 3, (int64_t)4096, (int64_t)H, (int64_t)D);
  expect_ok(&r);
  expect_layout(r.args.k_cache_layout, 0, 0, H * 4 * D, 2, 2, (int64_t)H, (int64_t)(4 * D), (int64_t)D, (int64_t)2);
  assert_null(r.args.v_cache_layout);
  assert_int_equal(r.args.num_slots, 4096);
  /* a paged cache whose pages are padded apart: (pages, page_size) with contiguous rows */
  make(&r.k_cache, KVJIT_TENSOR_BF16, 0x1000000, 4, (int64_t)BLOCKS, (int64_t)BS, (int64_t)H, (int64_t)D);
  r.k_cache.strides[0] = (BS + 1) * H * D;
  expect_ok(&r);
  expect_layout(r.args.k_cache_layout, BS, (BS + 1) * H * D * 2, H * D * 2, 2, 2, (int64_t)H, (int64_t)(D * 2),
                (int64_t)D, (int64_t)2);
  /* one block, one head: size-1 dims carry any stride (torch's are arbitrary there) */
  rows(&r);
  make(&r.k, KVJIT_TENSOR_BF16, 0x10000, 3, (int64_t)16, (int64_t)1, (int64_t)D);
  make(&r.v, KVJIT_TENSOR_BF16, 0x20000, 3, (int64_t)16, (int64_t)1, (int64_t)D);
  make(&r.k_cache, KVJIT_TENSOR_BF16, 0x1000000, 4, (int64_t)1, (int64_t)1, (int64_t)BS, (int64_t)D);
  transpose(&r.k_cache, 1, 2);
  r.k_cache.strides[0] = 12345;
  alias(&r.v_cache, &r.k_cache, 0x2000000);
  expect_ok(&r);
  assert_null(r.args.k_cache_layout); /* flat after all: slots D apart */
  assert_int_equal(r.args.k_cache_stride, D * 2);
  assert_int_equal(r.args.num_slots, BS);
}

static void test_refusals(void **state) {
  (void)state;
  request r;
  /* overlapping: a broadcast page dim (expand) and a reversed one */
  rows(&r);
  caches4(&r, KVJIT_TENSOR_BF16, BLOCKS, BS, H, D);
  r.k_cache.strides[0] = 0;
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "k_cache", "broadcast");
  r.k_cache.strides[0] = BS * H * D;
  r.v_cache.strides[2] = -D;
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "v_cache", "stride -128");
  /* overlapping pages pass the shape rules and are the library's to refuse (one copy of that rule) */
  rows(&r);
  caches4(&r, KVJIT_TENSOR_BF16, BLOCKS, BS, H, D);
  r.k_cache.strides[1] = 2 * H * D; /* positions twice a row apart: page p's tail is page p + 1's head */
  expect_ok(&r);
  assert_int_equal(library_checks(r.args.k_cache_layout, H * D * 2, BLOCKS * BS), KVJIT_ERR_INVALID_ARGUMENT);
  /* wrong extents: the HND view's heads of 64 for rows of 128 */
  rows(&r);
  make(&r.k_cache, KVJIT_TENSOR_BF16, 0x1000000, 4, (int64_t)BLOCKS, (int64_t)H, (int64_t)BS, (int64_t)(D / 2));
  transpose(&r.k_cache, 1, 2);
  make(&r.v_cache, KVJIT_TENSOR_BF16, 0x2000000, 4, (int64_t)BLOCKS, (int64_t)BS, (int64_t)H, (int64_t)D);
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "k_cache", "no trailing dims");
  /* a chunk x that does not divide D: [blocks, H, 15, block_size, 8] holds 120 of 128 */
  rows(&r);
  chunked_caches(&r, KVJIT_TENSOR_BF16, 8);
  r.k_cache.sizes[2] = 15;
  r.req.layout = KVJIT_STORE_LAYOUT_VLLM_PAGED;
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "k_cache", "make one row of 2048 bytes");
  /* the old V's D is not k's */
  chunked_caches(&r, KVJIT_TENSOR_BF16, 8);
  r.v_cache.sizes[2] = 64;
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "v_cache", "make one row");
  /* a 4-D V of the old layout cannot be told from NHD by shape: the keyword is required */
  chunked_caches(&r, KVJIT_TENSOR_BF16, 8);
  r.req.layout = KVJIT_STORE_LAYOUT_AUTO;
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "v_cache", "layout='vllm_paged'");
  /* ... and the keyword reads the caches as that layout only */
  r.req.layout = KVJIT_STORE_LAYOUT_VLLM_PAGED;
  make(&r.k_cache, KVJIT_TENSOR_BF16, 0x1000000, 4, (int64_t)BLOCKS, (int64_t)BS, (int64_t)H, (int64_t)D);
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "k_cache", "[blocks, H, D/x, block_size, x]");
  chunked_caches(&r, KVJIT_TENSOR_BF16, 8);
  make(&r.v_cache, KVJIT_TENSOR_BF16, 0x2000000, 3, (int64_t)4096, (int64_t)H, (int64_t)D);
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "v_cache", "[blocks, H, D, block_size]");
  r.req.layout = 7;
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "layout", "got 7");
  /* three slot dims that neither flatten nor make (pages, page_size) */
  rows(&r);
  make(&r.k, KVJIT_TENSOR_BF16, 0x10000, 2, (int64_t)16, (int64_t)D);
  r.v.view.present = 0;
  make(&r.k_cache, KVJIT_TENSOR_BF16, 0x1000000, 4, (int64_t)4, (int64_t)8, (int64_t)BS, (int64_t)D);
  transpose(&r.k_cache, 0, 1);
  transpose(&r.k_cache, 1, 2);
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "k_cache", "nor make (pages, page_size)");
  /* a flat cache whose slots are closer than a row */
  make(&r.k_cache, KVJIT_TENSOR_BF16, 0x1000000, 2, (int64_t)4096, (int64_t)D);
  r.k_cache.strides[0] = D / 2;
  expect_refused(&r, KVJIT_REQUEST_VALUE_ERROR, "k_cache", "may not overlap");
  /* six dims */
  rows(&r);
  kvjit_tensor_view six = r.k.view;
  int64_t sizes[6] = {2, 2, 2, 2, 8, 128}, strides[6] = {8192, 4096, 2048, 1024, 128, 1};
  six.ndim = 6;
  six.sizes = sizes;
  six.strides = strides;
  r.req.k = r.k.view;
  kvjit_cache_view out;
  kvjit_request_msg e = {r.msg, sizeof r.msg};
  assert_int_equal(kvjit_request_cache_view(&e, "k_cache", &six, H * D * 2, "k", KVJIT_CACHE_FORM_AUTO, &out),
                   KVJIT_REQUEST_VALUE_ERROR);
  assert_non_null(strstr(r.msg, "k_cache: expected [slots, H, D]"));
}

/* transfer_kv's caches read by the same rule (FORM_VIEW): SGLang's host layouts as the per-layer
 * views a runtime slices (layer l of 4; H = 8, D = 128 bf16, pages of 16), both directions, against
 * a device pool [4096, H, D]: rows are [H, D] whichever side is paged. */
typedef struct transfer_case {
  tensor src_k, dst_k, ids;
  kvjit_transfer_request req;
  kvjit_transfer_kv_args args;
  kvjit_transfer_layouts layouts;
  int32_t device;
  char msg[512];
} transfer_case;

static kvjit_request_error run_transfer(transfer_case *t) {
  memset(&t->req, 0, sizeof t->req);
  t->req.src_k = t->src_k.view;
  t->req.dst_k = t->dst_k.view;
  t->req.src_indices = t->req.dst_indices = t->ids.view;
  t->req.src_num_slots = t->req.dst_num_slots = t->req.row_elements = -1;
  return kvjit_transfer_request_args(&t->req, DEV_CUDA, &t->args, &t->layouts, &t->device, t->msg, sizeof t->msg);
}

/* A host tensor of SGLang's shape, then sliced: [k_or_v = 0][..., layer l, ...] by @p layer_dim. */
static void host_view(tensor *t, int ndim, const int64_t *shape, int layer_dim, int64_t layer) {
  make(t, KVJIT_TENSOR_BF16, 0x7000000, 1, (int64_t)1);
  t->view.ndim = ndim;
  int64_t step = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    t->sizes[i] = shape[i];
    t->strides[i] = step;
    step *= shape[i];
  }
  /* drop dim 0 (K) and the layer dim */
  t->view.data += (uintptr_t)(layer * t->strides[layer_dim] * 2);
  int o = 0;
  for (int i = 1; i < ndim; i++) {
    if (i == layer_dim) continue;
    t->sizes[o] = t->sizes[i];
    t->strides[o] = t->strides[i];
    o++;
  }
  t->view.ndim = o;
  t->view.device_type = 0; /* host */
}

static void test_transfer_host_layouts(void **state) {
  (void)state;
  transfer_case t;
  memset(&t, 0, sizeof t);
  make(&t.ids, KVJIT_TENSOR_I64, 0x30000, 1, (int64_t)16);
  make(&t.src_k, KVJIT_TENSOR_BF16, 0x1000000, 3, (int64_t)4096, (int64_t)H, (int64_t)D);
  /* page_first_direct (2, pages, L, page_size, H, D), layer 1: [pages, page_size, H, D], pages L apart */
  const int64_t direct[6] = {2, 256, 4, BS, H, D};
  host_view(&t.dst_k, 6, direct, 2, 1);
  assert_int_equal(run_transfer(&t), KVJIT_REQUEST_OK);
  assert_int_equal(t.args.k_row_bytes, H * D * 2);
  assert_null(t.args.src_k_layout);
  assert_int_equal(t.args.src_k_stride, H * D * 2);
  expect_layout(t.args.dst_k_layout, BS, 4 * BS * H * D * 2, H * D * 2, 2, 2, (int64_t)H, (int64_t)(D * 2),
                (int64_t)D, (int64_t)2);
  assert_int_equal(t.args.dst_k_stride, 0);
  assert_int_equal(t.args.dst_num_slots, 256 * BS);
  assert_int_equal(library_checks(t.args.dst_k_layout, H * D * 2, 256 * BS), KVJIT_OK);
  /* ... and loaded back: the paged side is the source, rows still [H, D] */
  tensor device_pool = t.src_k;
  t.src_k = t.dst_k;
  alias(&t.dst_k, &device_pool, 0x1000000);
  t.dst_k.view.device_type = DEV_CUDA;
  t.src_k.view.sizes = t.src_k.sizes;
  t.src_k.view.strides = t.src_k.strides;
  assert_int_equal(run_transfer(&t), KVJIT_REQUEST_OK);
  assert_int_equal(t.args.k_row_bytes, H * D * 2);
  assert_non_null(t.args.src_k_layout);
  assert_null(t.args.dst_k_layout);
  assert_int_equal(t.args.src_k_layout->page_size, BS);
  /* page_head (2, pages, H, page_size, L, D), layer 2, as [pages, page_size, H, D] (transpose(1, 2)) */
  make(&t.src_k, KVJIT_TENSOR_BF16, 0x1000000, 3, (int64_t)4096, (int64_t)H, (int64_t)D);
  const int64_t head[6] = {2, 256, H, BS, 4, D};
  host_view(&t.dst_k, 6, head, 4, 2);
  transpose(&t.dst_k, 1, 2);
  assert_int_equal(run_transfer(&t), KVJIT_REQUEST_OK);
  expect_layout(t.args.dst_k_layout, BS, H * BS * 4 * D * 2, 4 * D * 2, 2, 2, (int64_t)H, (int64_t)(BS * 4 * D * 2),
                (int64_t)D, (int64_t)2);
  assert_int_equal(library_checks(t.args.dst_k_layout, H * D * 2, 256 * BS), KVJIT_OK);
  /* a 5-D cache is never read as vLLM's chunked K here */
  make(&t.dst_k, KVJIT_TENSOR_BF16, 0x7000000, 5, (int64_t)16, (int64_t)H, (int64_t)16, (int64_t)BS, (int64_t)8);
  t.dst_k.view.device_type = 0;
  assert_int_equal(run_transfer(&t), KVJIT_REQUEST_VALUE_ERROR);
  assert_non_null(strstr(t.msg, "dst_k: expected [slots, H, D]"));
  assert_null(strstr(t.msg, "vLLM"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nhd_stays_flat),          cmocka_unit_test(test_hnd_view),
      cmocka_unit_test(test_flashattention_packed_view), cmocka_unit_test(test_chunked_paged_layout),
      cmocka_unit_test(test_mla_concat_stays_flat),   cmocka_unit_test(test_strided_rows_and_odd_dims),
      cmocka_unit_test(test_refusals),                cmocka_unit_test(test_transfer_host_layouts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
