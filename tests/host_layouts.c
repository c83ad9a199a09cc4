/* SGLang's host layouts from their shapes (host_layouts.h). */
#include "host_layouts.h"

const char *kvjit_host_layout_name(kvjit_host_layout_kind kind) {
  static const char *const names[KVJIT_HOST_LAYOUT_KINDS] = {"flat", "layer_first", "page_first", "page_first_direct",
                                                            "page_head"};
  return (unsigned)kind < KVJIT_HOST_LAYOUT_KINDS ? names[kind] : "?";
}

int64_t kvjit_host_layout_bytes(const kvjit_host_layout *h) {
  return h->layers * h->slots * h->heads * h->head_bytes;
}

int64_t kvjit_host_layout_offset(const kvjit_host_layout *h, int64_t layer, int64_t slot, int64_t byte) {
  const int64_t L = h->layers, H = h->heads, D = h->head_bytes, row = H * D, S = h->slots;
  const int64_t P = h->page_size > 0 ? h->page_size : 1, page = slot / P, q = slot % P;
  switch (h->kind) {
  case KVJIT_HOST_PAGE_FIRST: return (slot * L + layer) * row + byte;                      /* [size, L, H, D] */
  case KVJIT_HOST_PAGE_FIRST_DIRECT: return ((page * L + layer) * P + q) * row + byte;      /* [pages, L, P, H, D] */
  case KVJIT_HOST_PAGE_HEAD: return (((page * H + byte / D) * P + q) * L + layer) * D + byte % D; /* [pages, H, P, L, D] */
  default: return (layer * S + slot) * row + byte;                                          /* [L, size, H, D] */
  }
}

void kvjit_host_layout_view(const kvjit_host_layout *h, kvjit_layout *out) {
  const int64_t L = h->layers, H = h->heads, D = h->head_bytes, row = H * D, P = h->page_size;
  kvjit_layout l = KVJIT_LAYOUT_INIT;
  l.element_bytes = 1;
  l.num_row_dims = 1;
  l.row_extents[0] = row;
  l.row_strides[0] = 1;
  switch (h->kind) {
  case KVJIT_HOST_PAGE_FIRST: l.slot_stride = L * row; break;
  case KVJIT_HOST_PAGE_FIRST_DIRECT:
    l.page_size = P;
    l.page_stride = L * P * row;
    l.slot_stride = row;
    break;
  case KVJIT_HOST_PAGE_HEAD:
    l.page_size = P;
    l.page_stride = H * P * L * D;
    l.slot_stride = L * D;
    l.num_row_dims = 2;
    l.row_extents[0] = H;
    l.row_extents[1] = D;
    l.row_strides[0] = P * L * D;
    l.row_strides[1] = 1;
    break;
  default: l.slot_stride = row; break;
  }
  *out = l;
}
