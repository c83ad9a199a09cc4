/*
 * transfer_kv's laid-out caches (args version 2's src_k_layout .. dst_v_layout): each side's
 * layouts into views with layout.h's rules (the one copy), the static part per side (K and V
 * share it: one kernel view per side, each cache with strides of its own), the destination's
 * bytes distinct and its K and V apart, the request's fields and the launch's strides.
 */
#include <stddef.h>

#include "status.h"
#include "transfer_kv_op.h"

/* One side's two layouts (V's NULL for a K-only copy). */
typedef struct side_layouts {
  const char *k_name, *v_name, *k_stride_name, *v_stride_name;
  const kvjit_layout *k, *v;
  int64_t k_stride, v_stride; /* as given: 0 with a layout */
  int64_t k_row, v_row;       /* bytes of the side's rows */
  int64_t num_slots;
  uint64_t k_base, v_base; /* one layer: the caches' addresses (the disjointness check), else 0 */
} side_layouts;

static int same_static(const kvjit_view *a, const kvjit_view *b) {
  if (a->page_size != b->page_size || a->atom != b->atom || a->num_dims != b->num_dims) return 0;
  for (int d = 0; d < a->num_dims; d++)
    if (a->extents[d] != b->extents[d]) return 0;
  return 1;
}

static kvjit_status one_view(const kvjit_layout *layout, const char *name, const char *stride_name, int64_t stride,
                             int64_t row, int64_t num_slots, kvjit_view *out) {
  if (stride != 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: must be 0 with %s (its slot_stride says it), got %lld",
                      stride_name, name, (long long)stride);
  }
  kvjit_status st = kvjit_view_resolve(out, name, layout, row, 0);
  return st != KVJIT_OK ? st : kvjit_view_check_slots(out, name, num_slots);
}

/* A side's views: both caches laid out or neither (K only: K's), one static part, checked. */
static kvjit_status side_views(const side_layouts *s, int has_v, int is_dst, kvjit_view *k, kvjit_view *v,
                               int *laid_out) {
  *laid_out = s->k != NULL || (has_v && s->v != NULL);
  if (!*laid_out) return KVJIT_OK;
  if (has_v && (s->k == NULL) != (s->v == NULL)) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: NULL while %s is given (lay out both caches of a side, or neither)",
                      s->k == NULL ? s->k_name : s->v_name, s->k == NULL ? s->v_name : s->k_name);
  }
  kvjit_status st = one_view(s->k, s->k_name, s->k_stride_name, s->k_stride, s->k_row, s->num_slots, k);
  if (st != KVJIT_OK || !has_v) return st;
  if ((st = one_view(s->v, s->v_name, s->v_stride_name, s->v_stride, s->v_row, s->num_slots, v)) != KVJIT_OK) return st;
  if (!same_static(k, v)) {
    return kvjit_fail(KVJIT_ERR_UNSUPPORTED,
                      "%s: its page size, runs and row dims differ from %s's (transfer_kv specializes one view per "
                      "side; the strides may differ)",
                      s->v_name, s->k_name);
  }
  /* Destinations: K and V never share a byte (one layer; tables' caches are the caller's). */
  if (is_dst && s->k_base != 0) {
    st = kvjit_view_check_disjoint(k, "dst_k", s->k_base, v, "dst_v", s->v_base, s->num_slots);
  }
  return st;
}

kvjit_status kvjit_transfer_kv_views(const kvjit_transfer_kv_args *a, kvjit_transfer_kv_request *r, int64_t k_row,
                                     int64_t v_row, int64_t k_dst_row, int64_t v_dst_row, uint64_t *src_bits,
                                     uint64_t *dst_bits) {
  const int has_v = a->src_v != NULL;
  const int one_layer = a->num_layers == 0;
  if (!has_v && (a->src_v_layout != NULL || a->dst_v_layout != NULL)) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: given for a K-only copy (src_v and dst_v NULL)",
                      a->src_v_layout != NULL ? "src_v_layout" : "dst_v_layout");
  }
  const side_layouts sides[2] = {
      {"src_k_layout", "src_v_layout", "src_k_stride", "src_v_stride", a->src_k_layout, a->src_v_layout,
       a->src_k_stride, a->src_v_stride, k_row, v_row, a->src_num_slots, 0, 0},
      {"dst_k_layout", "dst_v_layout", "dst_k_stride", "dst_v_stride", a->dst_k_layout, a->dst_v_layout,
       a->dst_k_stride, a->dst_v_stride, k_dst_row, v_dst_row, a->dst_num_slots,
       one_layer ? (uint64_t)(uintptr_t)a->dst_k : 0, one_layer ? (uint64_t)(uintptr_t)a->dst_v : 0}};
  kvjit_transfer_kv_params *p = &r->params;
  kvjit_view_strides *strides[2][2] = {{&p->src_k_view, &p->src_v_view}, {&p->dst_k_view, &p->dst_v_view}};
  int64_t *flat_strides[2][2] = {{&p->src_k_stride, &p->src_v_stride}, {&p->dst_k_stride, &p->dst_v_stride}};
  uint64_t *bits[2] = {src_bits, dst_bits};
  for (int side = 0; side < 2; side++) {
    kvjit_view k, v;
    int laid_out = 0;
    kvjit_status st = side_views(&sides[side], has_v, side, &k, &v, &laid_out);
    if (st != KVJIT_OK) return st;
    r->laid_out[side] = laid_out;
    if (!laid_out) continue; /* flat: the caller's strides, its view filled in later */
    kvjit_view_static_values(&k, r->values + (side ? TRANSFER_F_DST_PAGE : TRANSFER_F_SRC_PAGE));
    kvjit_view_strides_of(&k, strides[side][0]);
    *flat_strides[side][0] = k.slot_stride; /* a view that is flat once canonical: the flat kernel's */
    *bits[side] |= kvjit_view_address_bits(&k);
    if (has_v) {
      kvjit_view_strides_of(&v, strides[side][1]);
      *flat_strides[side][1] = v.slot_stride;
      *bits[side] |= kvjit_view_address_bits(&v);
    }
  }
  return KVJIT_OK;
}
