/* kvjit prewarm's --layout presets (layouts.h), written from vLLM's attention backends' shapes
 * and SGLang's host pool (python/sglang/srt/mem_cache/memory_pool_host.py). */
#include "layouts.h"

#include <string.h>

#include "items.h"
#include "variant_list.h"

enum { L_FLAT, L_NHD, L_HND, L_FLASH, L_CHUNKED, L_LAYER_FIRST, L_PAGE_FIRST, L_PAGE_FIRST_DIRECT, L_PAGE_HEAD, L_COUNT };

static const char STORE[] = "store_kv_cache", TRANSFER[] = "transfer_kv";

static const struct {
  const char *name, *alias, *op, *shape;
  bool paged;
} presets[L_COUNT] = {
    [L_FLAT] = {"flat", "sglang", NULL, "K and V rows [slots, H, D] (SGLang's device pool): no layout", false},
    [L_NHD] = {"vllm-nhd", "nhd", STORE, "K and V [blocks, block_size, H, D] (flat once canonical)", true},
    [L_HND] = {"vllm-hnd", "hnd", STORE, "K and V [blocks, H, block_size, D]", true},
    [L_FLASH] = {"vllm-flash", "flash", STORE, "one [blocks, H, block_size, 2 D]: K = [..., :D], V = [..., D:]", true},
    [L_CHUNKED] = {"vllm-chunked", "chunked", STORE,
                   "K [blocks, H, D/x, block_size, x] (x: 16 bytes), V [blocks, H, D, block_size]", true},
    [L_LAYER_FIRST] = {"layer_first", NULL, TRANSFER, "host K and V [L, size, H, D] (SGLang --hicache-mem-layout)",
                       false},
    [L_PAGE_FIRST] = {"page_first", NULL, TRANSFER, "host K and V [size, L, H, D]", false},
    [L_PAGE_FIRST_DIRECT] = {"page_first_direct", NULL, TRANSFER, "host K and V [pages, L, page, H, D]", true},
    [L_PAGE_HEAD] = {"page_head", NULL, TRANSFER, "host K and V [pages, H, page, L, D]", true},
};

/*
 * The layers of the host pool the transfer presets describe. A key does not depend on the count
 * (it shapes strides, which a call takes at run time, and every stride is a multiple of a head or
 * a row, whose alignment the key has already) as long as there are at least two: with one, a
 * layer's pages are contiguous and page_first_direct is flat. tests/test_transfer_presets.c
 * checks the keys of 2, 3, 32, 61 and 126 layers against these.
 */
#define HOST_LAYERS 2

const char *item_layout(const char *item, int *value, char *why, size_t capacity) {
  for (int i = 0; i < L_COUNT; i++) {
    if (strcmp(item, presets[i].name) == 0 || (presets[i].alias && strcmp(item, presets[i].alias) == 0)) {
      *value = i;
      return NULL;
    }
  }
  snprintf(why, capacity, "expected flat, vllm-nhd, vllm-hnd, vllm-flash, vllm-chunked (store_kv_cache), "
                          "layer_first, page_first, page_first_direct or page_head (transfer_kv)");
  return why;
}

const char *layout_preset_op(int preset) { return presets[preset].op; }
const char *layout_preset_name(int preset) { return presets[preset].name; }
bool layout_preset_paged(int preset) { return presets[preset].paged; }

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

/* The K and V cache layouts of a store preset (not flat). */
static void layout_preset_make(int preset, int heads, int head_dim, int v_head_dim, int element_bytes, int block_size,
                              kvjit_layout *k, kvjit_layout *v) {
  const long h = heads, d = head_dim, dv = v_head_dim, e = element_bytes, bs = block_size;
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
    return;
  }
  paged(preset, h, d, e, bs, 0, k);
  paged(preset, h, dv, e, bs, 1, v);
}

/* One layer's view of SGLang's host pool (its K or its V tensor) of a transfer preset. */
static void host_layout_make(int preset, int heads, int head_dim, int element_bytes, int page_size, kvjit_layout *out) {
  const long L = HOST_LAYERS, h = heads, e = element_bytes, d = (long)head_dim * e, row = h * d, p = page_size;
  const kvjit_layout init = KVJIT_LAYOUT_INIT;
  *out = init;
  out->element_bytes = e;
  dims2(out, h, head_dim, d, e); /* a row: H heads of D elements, one after the other */
  switch (preset) {
  case L_PAGE_FIRST: out->slot_stride = L * row; break; /* [size, L, H, D] */
  case L_PAGE_FIRST_DIRECT:                              /* [pages, L, page, H, D] */
    out->page_size = p;
    out->page_stride = L * p * row;
    out->slot_stride = row;
    break;
  case L_PAGE_HEAD: /* [pages, H, page, L, D] */
    out->page_size = p;
    out->page_stride = h * p * L * d;
    out->slot_stride = L * d;
    out->row_strides[0] = p * L * d;
    break;
  default: out->slot_stride = row; break; /* layer_first: [L, size, H, D] */
  }
}

size_t layout_preset_layouts(int preset, const kvjit_variant *base, int heads, int head_dim, int v_head_dim,
                             int element_bytes, int block_size, kvjit_layout room[2], const kvjit_layout *out[4]) {
  if (presets[preset].op == NULL) return 0;
  if (strcmp(base->op->name, TRANSFER) != 0) {
    layout_preset_make(preset, heads, head_dim, v_head_dim, element_bytes, block_size, &room[0], &room[1]);
    out[0] = &room[0];
    out[1] = v_head_dim ? &room[1] : NULL;
    return 2;
  }
  host_layout_make(preset, heads, head_dim, element_bytes, block_size, &room[0]);
  host_layout_make(preset, heads, v_head_dim, element_bytes, block_size, &room[1]);
  for (int side = 0; side < 2; side++) {
    const int host = base->values[op_field(base->op, side ? "dst" : "src")] == KVJIT_LOCATION_HOST;
    out[2 * side] = host ? &room[0] : NULL;
    out[2 * side + 1] = host && v_head_dim ? &room[1] : NULL;
  }
  return 4;
}

void print_layout_presets(FILE *out) {
  for (int i = 0; i < L_COUNT; i++)
    fprintf(out, "                          %-17s %s%s%s\n", presets[i].name, presets[i].op ? presets[i].op : "",
            presets[i].op ? ": " : "", presets[i].shape);
}
