/*
 * transfer_kv's call arguments -> a request (transfer_kv_op.h): every check that depends on more
 * than the variant, once per call, arithmetic only.
 */
#include <stddef.h>
#include <string.h>

#include "args.h"
#include "dtype.h"
#include "status.h"
#include "transfer_kv_op.h"

static kvjit_status check_location(const char *name, kvjit_location where) {
  if (where == KVJIT_LOCATION_DEVICE || where == KVJIT_LOCATION_HOST) return KVJIT_OK;
  return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                    "%s: must be KVJIT_LOCATION_DEVICE (0) or KVJIT_LOCATION_HOST (1), got %d", name, (int)where);
}

/* The pointers a call with batch > 0 dereferences (src_v and dst_v are both set or both NULL):
 * tests in a row, not a table built on the stack on every call. */
static kvjit_status check_pointers(const kvjit_transfer_kv_args *a) {
  const char *missing = a->src_k == NULL         ? "src_k"
                        : a->dst_k == NULL       ? "dst_k"
                        : a->src_indices == NULL ? "src_indices"
                        : a->dst_indices == NULL ? "dst_indices"
                                                 : NULL;
  if (missing == NULL) return KVJIT_OK;
  return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: NULL with batch %lld", missing, (long long)a->batch);
}

static kvjit_status check_index_array(const char *name, const void *indices, uintptr_t bytes, int64_t stride,
                                      int64_t batch) {
  if (((uintptr_t)indices & (bytes - 1)) != 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: %p is not aligned to the %u bytes of an %s index", name,
                      indices, (unsigned)bytes, bytes == 8 ? "int64" : "int32");
  }
  const int64_t last = batch > 0 ? batch - 1 : 0;
  if (!kvjit_args_extent_fits(last, stride, 1) || !kvjit_args_extent_fits(last * stride, (int64_t)bytes, (int64_t)bytes)) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: stride %lld x batch %lld overflows a 64-bit offset", name,
                      (long long)stride, (long long)batch);
  }
  return KVJIT_OK;
}

/* The fields a call reads past version 1: the caller's own, or (a version-1 caller, whose struct
 * ends before them and must not be read there) the defaults. A pointer, not a copy: this is the
 * call path. */
static const kvjit_transfer_kv_args *v2_fields(const kvjit_transfer_kv_args *a) {
  static const kvjit_transfer_kv_args defaults = KVJIT_TRANSFER_KV_ARGS_INIT; /* BYTES, BYTES, NONE, NULL.. */
  return a->version >= 2 ? a : &defaults;
}

/* A converting copy's scales: device pointers of whole floats, V's with V only. */
static kvjit_status check_scales(const kvjit_transfer_kv_args *f, int has_v) {
  if (f->scale_kind == KVJIT_SCALE_NONE) return KVJIT_OK;
  const struct {
    const char *name;
    const float *ptr;
    int needed;
  } scales[] = {{"k_scale", f->k_scale, 1}, {"v_scale", f->v_scale, has_v}};
  for (size_t i = 0; i < 2; i++) {
    if (!scales[i].needed) continue;
    if (scales[i].ptr == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: NULL with a scale", scales[i].name);
    if (((uintptr_t)scales[i].ptr & 3u) != 0) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: %p is not aligned to a 4-byte float", scales[i].name,
                        (const void *)scales[i].ptr);
    }
  }
  return KVJIT_OK;
}

/* Source bytes per access a converting copy's addresses allow: whole elements on both sides, as
 * many as both sides' alignments allow (bits: the OR of each side's pointers, strides, rows). */
static kvjit_status convert_vec(kvjit_dtype src_dtype, kvjit_dtype dst_dtype, uint64_t src_bits, uint64_t dst_bits,
                                int *vec) {
  const int es = kvjit_dtype_bytes(src_dtype), ed = kvjit_dtype_bytes(dst_dtype);
  const int vs = kvjit_rows_vec_of(src_bits), vd = kvjit_rows_vec_of(dst_bits);
  if (vs < es || vd < ed) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: pointers and strides must be multiples of the %d-byte %s element",
                      vs < es ? "src" : "dst", vs < es ? es : ed, kvjit_dtype_name(vs < es ? src_dtype : dst_dtype));
  }
  const int elems = vs / es < vd / ed ? vs / es : vd / ed;
  *vec = elems * es;
  return KVJIT_OK;
}

kvjit_status kvjit_transfer_kv_validate(const kvjit_transfer_kv_args *a, kvjit_transfer_kv_request *r) {
  if (a == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "args: NULL");
  if (a->version < 1 || a->version > KVJIT_TRANSFER_KV_ARGS_VERSION) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "args->version: must be 1..KVJIT_TRANSFER_KV_ARGS_VERSION (%d), got %u",
                      KVJIT_TRANSFER_KV_ARGS_VERSION, a->version);
  }
  const kvjit_transfer_kv_args *f = v2_fields(a);
  if (f->max_ctas < KVJIT_TRANSFER_KV_ALL_CTAS || f->max_ctas > KVJIT_TRANSFER_KV_MAX_CTAS) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "max_ctas: must be 0 (the plan's), 1..%d or KVJIT_TRANSFER_KV_ALL_CTAS (-1), got %d",
                      KVJIT_TRANSFER_KV_MAX_CTAS, f->max_ctas);
  }
  kvjit_status st;
  if (a->batch < 0) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "batch: must be >= 0, got %lld", (long long)a->batch);
  int64_t v_row;
  st = kvjit_args_rows(a->k_row_bytes, a->v_row_bytes, a->src_v, "src_v", a->dst_v, "dst_v",
                                    "move K only", KVJIT_TRANSFER_KV_MAX_ROW_BYTES, &v_row);
  if (st != KVJIT_OK) return st;
  const int has_v = a->src_v != NULL;
  const int64_t k_row = a->k_row_bytes;
  if (a->index_type != KVJIT_INDEX_INT32 && a->index_type != KVJIT_INDEX_INT64) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "index_type: must be KVJIT_INDEX_INT32 (1) or KVJIT_INDEX_INT64 (2), got %d", (int)a->index_type);
  }
  if (a->src_index_stride < 0 || a->dst_index_stride < 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: must be >= 1 (0 means 1), got %lld",
                      a->src_index_stride < 0 ? "src_index_stride" : "dst_index_stride",
                      (long long)(a->src_index_stride < 0 ? a->src_index_stride : a->dst_index_stride));
  }
  st = check_location("src", a->src);
  if (st == KVJIT_OK) st = check_location("dst", a->dst);
  if (st != KVJIT_OK) return st;
  if (a->pdl != KVJIT_PDL_AUTO && a->pdl != KVJIT_PDL_ON && a->pdl != KVJIT_PDL_OFF) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "pdl: must be KVJIT_PDL_AUTO (0), _ON (1) or _OFF (2), got %d",
                      (int)a->pdl);
  }
  if (a->split < 0 || a->split > KVJIT_TRANSFER_KV_MAX_SPLIT) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "split: must be 0 (automatic) or 1..%d, got %d",
                      KVJIT_TRANSFER_KV_MAX_SPLIT, a->split);
  }
  if (a->num_layers < 0 || a->num_layers > KVJIT_TRANSFER_KV_MAX_LAYERS) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "num_layers: must be 0 (one layer) or 1..%d (tables), got %lld",
                      KVJIT_TRANSFER_KV_MAX_LAYERS, (long long)a->num_layers);
  }
  /* The conversion in canonical form (its rules: transfer_kv_plan.c); a destination row holds
   * the source's elements in the destination's type. The common plain copy (every version-1
   * call) is canonical already: no rule to run. */
  kvjit_transfer_kv_shape conv;
  conv.src_dtype = conv.dst_dtype = KVJIT_DTYPE_BYTES;
  conv.scale_kind = KVJIT_SCALE_NONE;
  conv.num_heads = 0;
  if (f->dst_dtype != KVJIT_DTYPE_BYTES || f->src_dtype != KVJIT_DTYPE_BYTES || f->scale_kind != KVJIT_SCALE_NONE) {
    kvjit_transfer_kv_shape_plain(&conv, k_row, v_row, a->src, a->dst);
    conv.src_dtype = f->src_dtype;
    conv.dst_dtype = f->dst_dtype;
    conv.scale_kind = f->scale_kind;
    conv.num_heads = f->num_heads;
    if ((st = kvjit_transfer_kv_convert_resolve(&conv)) != KVJIT_OK) return st;
  }
  const int converting = conv.dst_dtype != KVJIT_DTYPE_BYTES;
  const int64_t es = converting ? kvjit_dtype_bytes(conv.src_dtype) : 1, ed = converting ? kvjit_dtype_bytes(conv.dst_dtype) : 1;
  const int64_t k_dst_row = k_row / es * ed, v_dst_row = v_row / es * ed;
  if (converting && (st = check_scales(f, has_v)) != KVJIT_OK) return st;
  kvjit_transfer_kv_params *p = &r->params;
  p->src_k_stride = a->src_k_stride;
  p->dst_k_stride = a->dst_k_stride;
  p->src_v_stride = has_v ? a->src_v_stride : 0;
  p->dst_v_stride = has_v ? a->dst_v_stride : 0;
  if (a->src_num_slots <= 0 || a->dst_num_slots <= 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: must be > 0, got %lld",
                      a->src_num_slots <= 0 ? "src_num_slots" : "dst_num_slots",
                      (long long)(a->src_num_slots <= 0 ? a->src_num_slots : a->dst_num_slots));
  }
  /* Laid-out sides: their views give the strides (and check their slots); flat ones as before. */
  uint64_t view_bits[2] = {0, 0};
  r->laid_out[0] = r->laid_out[1] = 0;
  kvjit_args_zero(r->values + TRANSFER_F_SRC_PAGE, TRANSFER_F_COUNT - TRANSFER_F_SRC_PAGE);
  const kvjit_view_strides no_view = {0, 0, {0}}; /* assignments: not a memset (kvjit_args_zero()) */
  p->src_k_view = p->src_v_view = p->dst_k_view = p->dst_v_view = no_view;
  /* Flat sides are the hot path (the compiler would guess a given pointer and lay this out first). */
  const int layouts =
      f->src_k_layout != NULL || f->src_v_layout != NULL || f->dst_k_layout != NULL || f->dst_v_layout != NULL;
  if (__builtin_expect(layouts, 0)) {
    st = kvjit_transfer_kv_views(a, r, k_row, v_row, k_dst_row, v_dst_row, &view_bits[0], &view_bits[1]);
    if (st != KVJIT_OK) return st;
  }
  const int src_laid = r->laid_out[0], dst_laid = r->laid_out[1];
  const char *k_dst_name = converting ? "the destination's K row" : "k_row_bytes";
  const char *v_dst_name = converting ? "the destination's V row" : "v_row_bytes";
  if (!src_laid) st = kvjit_args_stride("src_k_stride", &p->src_k_stride, k_row, "k_row_bytes");
  if (st == KVJIT_OK && !dst_laid) st = kvjit_args_stride("dst_k_stride", &p->dst_k_stride, k_dst_row, k_dst_name);
  if (st == KVJIT_OK && has_v && !src_laid)
    st = kvjit_args_stride("src_v_stride", &p->src_v_stride, v_row, "v_row_bytes");
  if (st == KVJIT_OK && has_v && !dst_laid)
    st = kvjit_args_stride("dst_v_stride", &p->dst_v_stride, v_dst_row, v_dst_name);
  if (st != KVJIT_OK) return st;
  if (src_laid || dst_laid) {
    /* The flat side's view for the layout kernel: its slots, its stride apart. */
    kvjit_view_strides *flat[2] = {src_laid ? &p->dst_k_view : &p->src_k_view, src_laid ? &p->dst_v_view : &p->src_v_view};
    flat[0]->slot_stride = src_laid ? p->dst_k_stride : p->src_k_stride;
    flat[1]->slot_stride = src_laid ? p->dst_v_stride : p->src_v_stride;
  }
  if (a->batch > 0 && (st = check_pointers(a)) != KVJIT_OK) return st;
  const uintptr_t index_bytes = a->index_type == KVJIT_INDEX_INT64 ? 8 : 4;
  p->src_index_stride = a->src_index_stride ? a->src_index_stride : 1;
  p->dst_index_stride = a->dst_index_stride ? a->dst_index_stride : 1;
  st = check_index_array("src_indices", a->src_indices, index_bytes, p->src_index_stride, a->batch);
  if (st == KVJIT_OK) st = check_index_array("dst_indices", a->dst_indices, index_bytes, p->dst_index_stride, a->batch);
  if (st != KVJIT_OK) return st;
  /* Every byte offset the kernel forms must fit in 64 bits (a view's: kvjit_view_check_slots()). */
  if (!src_laid && (!kvjit_args_extent_fits(a->src_num_slots - 1, p->src_k_stride, k_row) ||
                    !kvjit_args_extent_fits(a->src_num_slots - 1, p->src_v_stride, v_row))) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "src_num_slots: %lld rows of stride %lld overflow a 64-bit offset",
                      (long long)a->src_num_slots,
                      (long long)(p->src_k_stride > p->src_v_stride ? p->src_k_stride : p->src_v_stride));
  }
  if (!dst_laid && (!kvjit_args_extent_fits(a->dst_num_slots - 1, p->dst_k_stride, k_dst_row) ||
                    !kvjit_args_extent_fits(a->dst_num_slots - 1, p->dst_v_stride, v_dst_row))) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "dst_num_slots: %lld rows of stride %lld overflow a 64-bit offset",
                      (long long)a->dst_num_slots,
                      (long long)(p->dst_k_stride > p->dst_v_stride ? p->dst_k_stride : p->dst_v_stride));
  }
  const int table = a->num_layers > 0;
  uint64_t src_bits = (uint64_t)k_row | (uint64_t)v_row |
                      (src_laid ? view_bits[0] : (uint64_t)p->src_k_stride | (uint64_t)p->src_v_stride);
  uint64_t dst_bits = (uint64_t)k_dst_row | (uint64_t)v_dst_row |
                      (dst_laid ? view_bits[1] : (uint64_t)p->dst_k_stride | (uint64_t)p->dst_v_stride);
  const uintptr_t src_ptrs = (uintptr_t)a->src_k | (uintptr_t)a->src_v, dst_ptrs = (uintptr_t)a->dst_k | (uintptr_t)a->dst_v;
  if (table) {
    /* Tables of uint64 pointers; the caches they point at are checked per layer by the kernel. */
    if (((src_ptrs | dst_ptrs) & 7u) != 0) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "num_layers: %lld layers, but a layer table is not 8-byte aligned",
                        (long long)a->num_layers);
    }
  } else {
    src_bits |= (uint64_t)src_ptrs;
    dst_bits |= (uint64_t)dst_ptrs;
  }
  int vec = kvjit_rows_vec_of(src_bits | dst_bits);
  if (converting && (st = convert_vec(conv.src_dtype, conv.dst_dtype, src_bits, dst_bits, &vec)) != KVJIT_OK) return st;
  p->src_k = a->src_k;
  p->src_v = a->src_v;
  p->dst_k = a->dst_k;
  p->dst_v = a->dst_v;
  p->src_indices = a->src_indices;
  p->dst_indices = a->dst_indices;
  p->batch = a->batch;
  p->src_num_slots = a->src_num_slots;
  p->dst_num_slots = a->dst_num_slots;
  p->k_scale = converting ? f->k_scale : NULL;
  p->v_scale = converting && has_v ? f->v_scale : NULL;
  p->scale_stride = table && conv.scale_kind != KVJIT_SCALE_NONE
                        ? (conv.scale_kind == KVJIT_SCALE_PER_HEAD ? conv.num_heads : 1)
                        : 0;
  const int host_link = a->src == KVJIT_LOCATION_HOST || a->dst == KVJIT_LOCATION_HOST;
  const int few = f->max_ctas > 0 || (f->max_ctas == 0 && host_link);
  int64_t *v = r->values;
  v[TRANSFER_F_ARCH] = 0;
  v[TRANSFER_F_K_ROW] = k_row;
  v[TRANSFER_F_V_ROW] = v_row;
  v[TRANSFER_F_INDEX] = a->index_type;
  v[TRANSFER_F_SRC] = a->src;
  v[TRANSFER_F_DST] = a->dst;
  v[TRANSFER_F_LAYERS] = table;
  v[TRANSFER_F_PDL] = a->pdl;
  v[TRANSFER_F_SPLIT] = a->split;
  v[TRANSFER_F_VEC] = vec;
  v[TRANSFER_F_SRC_DTYPE] = conv.src_dtype;
  v[TRANSFER_F_DST_DTYPE] = conv.dst_dtype;
  v[TRANSFER_F_SCALE] = conv.scale_kind;
  v[TRANSFER_F_HEADS] = conv.num_heads;
  v[TRANSFER_F_CTAS] = few ? KVJIT_TRANSFER_KV_CTAS_FEW : KVJIT_TRANSFER_KV_CTAS_ALL;
  const int host_ctas = a->dst == KVJIT_LOCATION_HOST ? KVJIT_TRANSFER_KV_HOST_WRITE_CTAS : KVJIT_TRANSFER_KV_HOST_CTAS;
  r->max_blocks = few ? (uint32_t)(f->max_ctas > 0 ? f->max_ctas : host_ctas) : 0;
  r->batch_class = a->batch > 0 ? kvjit_transfer_kv_batch_class(a->batch) : 0;
  r->layers = table ? (unsigned)a->num_layers : 1u;
  return KVJIT_OK;
}
