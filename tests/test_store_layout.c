/*
 * Every laid-out case of the check harness (store_kv_cache's group "layout") on the host: the
 * harness's input maker and reference (tests/check/check_store.c: addresses from the layouts'
 * definition) against the kernel emulated from what the library decides for the call: its
 * request (the views' strides), the request's plan (split, lanes, access widths, static views)
 * and kernel_src/layout.cuh's arithmetic for every access of every lane, fp8 values as
 * tests/fp8_ref.h makes them. Catches a plan whose accesses straddle a contiguous run or a head,
 * lanes that miss or repeat a byte, and address arithmetic that disagrees with a layout; the
 * GPU runs the same cases (check_gpu --op store_kv_cache --group layout).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "check_store.h"
#include "fp8_ref.h"
#include "layout_cuh.h"
#include "store_kv_op.h"

extern const check_op check_store_op;

static kvjit_context *ctx;

typedef struct emu_view {
  long long page_size, atom, e1, e2;
  int dims;
  long long strides[5];
} emu_view;

static void emu_view_of(const kvjit_store_kv_plan *plan, int v, const kvjit_store_kv_launch *lp, emu_view *out) {
  const kvjit_store_kv_plan_view *pv = v ? &plan->v_view : &plan->k_view;
  const kvjit_view_strides *s = v ? &lp->v_view : &lp->k_view;
  memset(out, 0, sizeof *out);
  if (!plan->layout || (pv->page_size == 0 && pv->extents[0] == 0)) { /* flat: row s at s * stride */
    out->strides[1] = plan->layout ? s->slot_stride : v ? lp->base.v_cache_stride : lp->base.k_cache_stride;
    return;
  }
  out->page_size = pv->page_size;
  out->atom = pv->atom;
  for (int d = 0; d < 3; d++) out->dims += pv->extents[d] != 0;
  out->e1 = pv->extents[1];
  out->e2 = pv->extents[2];
  out->strides[0] = s->page_stride;
  out->strides[1] = s->slot_stride;
  for (int d = 0; d < 3; d++) out->strides[2 + d] = s->strides[d];
}

/* One row of item @p item to slot @p slot, access by access, as the kernel's lanes make them. */
static void emulate_row(const kvjit_store_kv_plan *plan, const kvjit_store_kv_args *a, const kvjit_store_kv_launch *lp,
                        int v, int64_t item, int64_t slot, const char *what) {
  const int quant = plan->cache_dtype != KVJIT_DTYPE_BYTES;
  const int elem = quant ? (plan->src_dtype == KVJIT_DTYPE_F32 ? 4 : 2) : 1;
  const int64_t row = v ? plan->v_row_bytes : plan->k_row_bytes;
  const int vec = v && plan->layout ? plan->v_vec : plan->vec;
  const int64_t slice_bytes = row / plan->split, chunks = slice_bytes / vec;
  const int64_t per_lane = (chunks + plan->lanes - 1) / plan->lanes;
  const int64_t head_bytes = plan->num_heads ? row / plan->num_heads : 0;
  if (row % plan->split != 0 || slice_bytes % vec != 0 || vec % elem != 0)
    fail_msg("%s: row %lld, split %d, access %d: slices are not whole accesses", what, (long long)row, plan->split, vec);
  emu_view ev;
  emu_view_of(plan, v, lp, &ev);
  const unsigned char *src = (const unsigned char *)(v ? a->v : a->k) + item * (v ? lp->base.v_stride : lp->base.k_stride);
  unsigned char *cache = v ? lp->base.v_cache : lp->base.k_cache;
  const float *scales = v ? lp->base.v_scale : lp->base.k_scale;
  unsigned char *seen = calloc((size_t)(row / elem), 1);
  assert_non_null(seen);
  for (int64_t slice = 0; slice < plan->split; slice++) {
    for (int lane = 0; lane < plan->lanes; lane++) {
      for (int64_t c = 0; c < per_lane; c++) {
        const int64_t ci = c * plan->lanes + lane;
        if (ci >= chunks) continue;
        const int64_t sb = slice * slice_bytes + ci * vec, cb = sb / elem;
        if (head_bytes && sb / head_bytes != (sb + vec - 1) / head_bytes)
          fail_msg("%s: an access at source byte %lld crosses a head of %lld bytes", what, (long long)sb, (long long)head_bytes);
        const long long at = kvjit_test_cuh_offset(slot, cb, ev.page_size, ev.atom, ev.dims, ev.e1, ev.e2, ev.strides);
        float scale = 1.0f;
        if (quant && plan->scale_kind == KVJIT_SCALE_PER_TENSOR) scale = scales[0];
        if (quant && plan->scale_kind == KVJIT_SCALE_PER_HEAD) scale = scales[sb / head_bytes];
        /* The kernel stores vec / elem contiguous cache bytes at `at`. */
        for (int j = 0; j < vec / elem; j++) {
          unsigned char out = src[sb + j];
          if (quant) {
            float x = check_store_source_value(plan->src_dtype, src + sb + (int64_t)j * elem);
            if (plan->scale_kind != KVJIT_SCALE_NONE) x = x / scale;
            out = fp8_ref_encode(x, plan->cache_dtype == KVJIT_DTYPE_FP8_E4M3);
          }
          cache[at + j] = out;
          if (seen[cb + j]++) fail_msg("%s: cache byte %lld of a row written twice", what, (long long)(cb + j));
        }
      }
    }
  }
  for (int64_t b = 0; b < row / elem; b++)
    if (seen[b] != 1) fail_msg("%s: cache byte %lld of a row never written", what, (long long)b);
  free(seen);
}

static int64_t slot_id(const kvjit_store_kv_args *a, int64_t item) {
  const int64_t at = item * (a->index_stride ? a->index_stride : 1);
  if (a->index_type == KVJIT_INDEX_INT32) return ((const int32_t *)a->indices)[at];
  return ((const int64_t *)a->indices)[at];
}

/* One case: the world in host memory, the call validated and planned, the kernel emulated, every
 * byte of every buffer compared. */
static void run_case(size_t index, const store_case *c, size_t *laid_out) {
  check_world w;
  memset(&w, 0, sizeof w);
  w.sets = 1;
  w.sm = 90;
  w.rng = 0x9E3779B97F4A7C15ull ^ index;
  check_store_op.layout(c, &w);
  unsigned char *mem[CHECK_MAX_BUFS];
  for (int i = 0; i < w.num_bufs; i++) {
    check_buf *b = &w.bufs[i];
    b->init = malloc(b->bytes + 1);
    b->want = malloc(b->bytes + 1);
    mem[i] = aligned_alloc(256, (b->bytes + b->offset + 256 + 255) / 256 * 256);
    assert_true(b->init && b->want && mem[i]);
    b->ptr = (uint64_t)(uintptr_t)(mem[i] + b->offset);
  }
  check_store_op.fill(c, &w);
  for (int i = 0; i < w.num_bufs; i++) memcpy(mem[i] + w.bufs[i].offset, w.bufs[i].init, w.bufs[i].bytes);
  check_launch l = {KVJIT_PDL_AUTO, NULL, 0, 0};
  kvjit_store_kv_args a;
  check_store_args(c, &w, &l, &a);
  char what[512];
  check_store_op.describe(c, what, sizeof what);
  kvjit_store_kv_request r;
  if (kvjit_store_kv_validate(ctx, &a, &r) != KVJIT_OK) fail_msg("#%zu %s: %s", index, what, kvjit_last_error());
  r.values[STORE_F_ARCH] = 90;
  kvjit_store_kv_plan plan;
  if (kvjit_op_store_kv.check(r.values, KVJIT_OP_ALL_GIVEN) != KVJIT_OK ||
      kvjit_op_store_kv.plan(r.values, 90, r.batch_class, &plan) != KVJIT_OK) {
    fail_msg("#%zu %s: %s", index, what, kvjit_last_error());
  }
  *laid_out += (size_t)plan.layout;
  uint64_t oob = 0;
  for (int64_t i = 0; i < a.batch; i++) {
    const int64_t s = slot_id(&a, i);
    if (s < 0 || s == a.skip_slot) continue;
    if (s >= a.num_slots) {
      oob++;
      continue;
    }
    emulate_row(&plan, &a, &r.params, 0, i, s, what);
    if (a.v != NULL) emulate_row(&plan, &a, &r.params, 1, i, s, what);
  }
  assert_int_equal(oob, w.expected_oob);
  for (int i = 0; i < w.num_bufs; i++) {
    const check_buf *b = &w.bufs[i];
    const unsigned char *want = b->output ? b->want : b->init, *got = mem[i] + b->offset;
    for (size_t k = 0; k < b->bytes; k++) {
      if (got[k] != want[k]) {
        fail_msg("#%zu %s: %s byte %zu is %#x, the reference has %#x", index, what, b->name, k, got[k], want[k]);
      }
    }
  }
  for (int i = 0; i < w.num_bufs; i++) {
    free(w.bufs[i].init);
    free(w.bufs[i].want);
    free(mem[i]);
  }
}

static void test_every_layout_case(void **state) {
  (void)state;
  size_t cases = 0, laid_out = 0;
  for (size_t i = 0; i < store_case_count(); i++) {
    store_case c;
    store_case_get(i, &c);
    /* Batches past 1024 plan as 1000 does (one batch class): the GPU runs them. */
    if (!c.layout || c.batch > 1024) continue;
    run_case(i, &c, &laid_out);
    cases++;
  }
  printf("store_layout: %zu laid-out cases emulated, %zu on the layout kernel\n", cases, laid_out);
  assert_true(cases > 0 && laid_out > 0 && laid_out < cases); /* NHD and MLA stay on the flat kernel */
}

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

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_every_layout_case)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
