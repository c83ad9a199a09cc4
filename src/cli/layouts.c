/* kvjit prewarm's --layout presets (layouts.h), written from vLLM's attention backends' shapes. */
#include "layouts.h"

#include <string.h>

#include "items.h"

enum { L_FLAT, L_NHD, L_HND, L_FLASH, L_CHUNKED, L_COUNT };

static const struct {
  const char *name, *alias, *shape;
} presets[L_COUNT] = {
    [L_FLAT] = {"flat", "sglang", "K and V rows [slots, H, D] (SGLang's MHA pool): no layout"},
    [L_NHD] = {"vllm-nhd", "nhd", "K and V [blocks, block_size, H, D] (flat once canonical)"},
    [L_HND] = {"vllm-hnd", "hnd", "K and V [blocks, H, block_size, D]"},
    [L_FLASH] = {"vllm-flash", "flash", "one [blocks, H, block_size, 2 D]: K = [..., :D], V = [..., D:]"},
    [L_CHUNKED] = {"vllm-chunked", "chunked", "K [blocks, H, D/x, block_size, x] (x: 16 bytes), V [blocks, H, D, block_size]"},
};

const char *item_layout(const char *item, int *value, char *why, size_t capacity) {
  for (int i = 0; i < L_COUNT; i++) {
    if (strcmp(item, presets[i].name) == 0 || strcmp(item, presets[i].alias) == 0) {
      *value = i;
      return NULL;
    }
  }
  snprintf(why, capacity, "expected flat, vllm-nhd, vllm-hnd, vllm-flash or vllm-chunked");
  return why;
}

static void dims2(kvjit_layout *l, long e0, long e1, long s0, long s1) {
  l->num_row_dims = 2;
  l->row_extents[0] = e0;
  l->row_extents[1] = e1;
  l->row_strides[0] = s0;
  l->row_strides[1] = s1;
}

/* One cache of @p d-element heads (the paged layouts but flash, which packs K and V). */
static void paged(int preset, long h, long d, long e, long bs, int is_v, kvjit_layout *l) {
  const kvjit_layout init = KVJIT_LAYOUT_INIT;
  *l = init;
  l->page_size = bs;
  l->element_bytes = e;
  l->page_stride = h * bs * d * e;
  if (preset == L_NHD) {
    l->slot_stride = h * d * e;
    dims2(l, h, d, d * e, e);
  } else if (preset == L_HND) {
    l->slot_stride = d * e;
    dims2(l, h, d, bs * d * e, e);
  } else if (!is_v) { /* chunked K: 16-byte chunks of x elements, block_size * 16 bytes apart */
    const long x = 16 / e;
    l->slot_stride = 16;
    l->num_row_dims = 3;
    l->row_extents[0] = h;
    l->row_extents[1] = d / x;
    l->row_extents[2] = x;
    l->row_strides[0] = d * bs * e;
    l->row_strides[1] = bs * 16;
    l->row_strides[2] = e;
  } else { /* chunked V: transposed, block_size elements of one dim in a row */
    l->slot_stride = e;
    dims2(l, h, d, d * bs * e, bs * e);
  }
}

int layout_preset_make(int preset, int heads, int head_dim, int v_head_dim, int element_bytes, int block_size,
                       kvjit_layout *k, kvjit_layout *v) {
  const long h = heads, d = head_dim, dv = v_head_dim, e = element_bytes, bs = block_size;
  if (preset == L_FLAT) return 1;
  if (preset == L_FLASH) { /* one cache: each head's slot holds D of K then Dv of V */
    const kvjit_layout init = KVJIT_LAYOUT_INIT;
    *k = init;
    k->page_size = bs;
    k->element_bytes = e;
    k->page_stride = h * bs * (d + dv) * e;
    k->slot_stride = (d + dv) * e;
    dims2(k, h, d, bs * (d + dv) * e, e);
    *v = *k;
    v->row_extents[1] = dv;
    return 0;
  }
  paged(preset, h, d, e, bs, 0, k);
  paged(preset, h, dv, e, bs, 1, v);
  return 0;
}

void print_layout_presets(FILE *out) {
  for (int i = 0; i < L_COUNT; i++) fprintf(out, "                          %-13s %s\n", presets[i].name, presets[i].shape);
}
