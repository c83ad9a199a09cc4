/* The cache layouts serving runtimes use (test_layouts.h). */
#include "test_layouts.h"

#include <string.h>

const kvjit_test_layout_spec kvjit_test_layouts[] = {
    {"nhd", KVJIT_TEST_NHD, 4, 64, 16, 2},          {"hnd", KVJIT_TEST_HND, 4, 64, 16, 2},
    {"flash", KVJIT_TEST_FLASH, 4, 64, 16, 2},      {"chunked", KVJIT_TEST_CHUNKED, 4, 64, 16, 2},
    {"chunked_fp8", KVJIT_TEST_CHUNKED, 2, 64, 16, 1}, {"hnd_odd_page", KVJIT_TEST_HND, 3, 96, 5, 2},
    {"mla", KVJIT_TEST_MLA, 1, 576, 16, 2},         {"flash_f32", KVJIT_TEST_FLASH, 2, 32, 8, 4},
};
const size_t kvjit_test_num_layouts = sizeof kvjit_test_layouts / sizeof kvjit_test_layouts[0];

static void dims2(kvjit_layout *l, int64_t e0, int64_t e1, int64_t s0, int64_t s1) {
  l->num_row_dims = 2;
  l->row_extents[0] = e0;
  l->row_extents[1] = e1;
  l->row_strides[0] = s0;
  l->row_strides[1] = s1;
}

void kvjit_test_layout_make(kvjit_test_layout *t, const kvjit_test_layout_spec *s) {
  const kvjit_layout init = KVJIT_LAYOUT_INIT;
  const int64_t h = s->heads, d = s->head_dim, bs = s->block_size, e = s->element_bytes;
  memset(t, 0, sizeof *t);
  t->name = s->name;
  t->k = t->v = init;
  t->element_bytes = e;
  t->page_size = bs;
  t->k_row = t->v_row = h * d * e;
  t->k.page_size = t->v.page_size = bs;
  t->k.element_bytes = t->v.element_bytes = e;
  switch (s->kind) {
    case KVJIT_TEST_NHD: /* [blocks, bs, H, D] */
      t->page_bytes = bs * h * d * e;
      t->k.page_stride = t->page_bytes;
      t->k.slot_stride = h * d * e;
      dims2(&t->k, h, d, d * e, e);
      t->v = t->k;
      t->k_flat = 1;
      t->k_atom = h * d * e;
      break;
    case KVJIT_TEST_HND: /* [blocks, H, bs, D] */
      t->page_bytes = h * bs * d * e;
      t->k.page_stride = t->page_bytes;
      t->k.slot_stride = d * e;
      dims2(&t->k, h, d, bs * d * e, e);
      t->v = t->k;
      t->k_dims = h > 1 ? 1 : 0;
      t->k_atom = d * e;
      break;
    case KVJIT_TEST_FLASH: /* [blocks, H, bs, 2D]: K [..., :D], V [..., D:] */
      t->page_bytes = h * bs * 2 * d * e;
      t->k.page_stride = t->page_bytes;
      t->k.slot_stride = 2 * d * e;
      dims2(&t->k, h, d, bs * 2 * d * e, e);
      t->v = t->k;
      t->v_base = d * e;
      t->one_cache = 1;
      t->k_dims = 1;
      t->k_atom = d * e;
      break;
    case KVJIT_TEST_CHUNKED: { /* K [blocks, H, D/x, bs, x], x = 16 B; V [blocks, H, D, bs] */
      const int64_t x = 16 / e;
      t->page_bytes = h * d * bs * e;
      t->k.page_stride = t->v.page_stride = t->page_bytes;
      t->k.slot_stride = x * e;
      t->k.num_row_dims = 3;
      t->k.row_extents[0] = h;
      t->k.row_extents[1] = d / x;
      t->k.row_extents[2] = x;
      t->k.row_strides[0] = d * bs * e;
      t->k.row_strides[1] = bs * x * e;
      t->k.row_strides[2] = e;
      t->v.slot_stride = e;
      dims2(&t->v, h, d, d * bs * e, bs * e);
      t->k_dims = 1; /* H and D / x merge: chunks bs * 16 bytes apart */
      t->k_atom = 16;
      break;
    }
    case KVJIT_TEST_MLA: /* [blocks, bs, 576]: K = kv_c [:512], V = k_pe [512:] */
      t->page_bytes = bs * d * e;
      t->k_row = 512 * e;
      t->v_row = (d - 512) * e;
      t->k.page_stride = t->v.page_stride = t->page_bytes;
      t->k.slot_stride = t->v.slot_stride = d * e;
      t->v_base = 512 * e;
      t->one_cache = 1;
      t->k_flat = 1;
      t->k_atom = 512 * e;
      break;
  }
}

const char *kvjit_test_layout_kind_name(kvjit_test_layout_kind kind) {
  static const char *const names[] = {"nhd", "hnd", "flash", "chunked", "mla"};
  return (unsigned)kind < sizeof names / sizeof names[0] ? names[kind] : "?";
}

int64_t kvjit_test_layout_offset(const kvjit_layout *l, int64_t row_bytes, int64_t slot, int64_t byte) {
  int64_t ext[KVJIT_LAYOUT_MAX_ROW_DIMS], str[KVJIT_LAYOUT_MAX_ROW_DIMS];
  const int n = l->num_row_dims;
  for (int d = 0; d < n; d++) ext[d] = l->row_extents[d] ? l->row_extents[d] : row_bytes / l->element_bytes;
  int64_t packed = l->element_bytes, span = l->element_bytes;
  for (int d = n - 1; d >= 0; d--) {
    str[d] = l->row_strides[d] ? l->row_strides[d] : packed;
    packed = str[d] * ext[d];
    span += (ext[d] - 1) * str[d];
  }
  const int64_t slot_stride = l->slot_stride ? l->slot_stride : span;
  const int64_t page_stride = l->page_stride ? l->page_stride : l->page_size * slot_stride;
  int64_t off = l->page_size > 1 ? slot / l->page_size * page_stride + slot % l->page_size * slot_stride
                                 : slot * slot_stride;
  int64_t el = byte / l->element_bytes;
  off += byte % l->element_bytes;
  for (int d = n - 1; d >= 0; d--) {
    off += el % ext[d] * str[d];
    el /= ext[d];
  }
  return off;
}
