/*
 * store_kv_cache's call arguments -> a request (store_kv_op.h): every check that depends on more
 * than the variant, once per call, arithmetic only (no division, no allocation, no driver).
 */
#include <stddef.h>
#include <string.h>

#include "args.h"
#include "status.h"
#include "store_kv_op.h"

/* The version-2 fields of @p a, or their defaults for a version-1 caller (whose struct ends
 * before them: they must not be read). */
static void quant_fields(const kvjit_store_kv_args *a, kvjit_dtype *dtype, kvjit_dtype *cache_dtype,
                         kvjit_scale_kind *scale_kind, const float **k_scale, const float **v_scale,
                         int64_t *num_heads) {
  if (a->version >= 2) {
    *dtype = a->dtype;
    *cache_dtype = a->cache_dtype;
    *scale_kind = a->scale_kind;
    *k_scale = a->k_scale;
    *v_scale = a->v_scale;
    *num_heads = a->num_heads;
  } else {
    *dtype = *cache_dtype = KVJIT_DTYPE_BYTES;
    *scale_kind = KVJIT_SCALE_NONE;
    *k_scale = *v_scale = NULL;
    *num_heads = 0;
  }
}

/* Quantizing: what the key holds (28-bit rows, 16-bit splits) and rows of whole elements (a
 * power-of-two element size: a mask, no division). The rest of the element rules (a split that
 * keeps elements whole, heads dividing the rows) is the op's check, on the miss. */
static kvjit_status check_quant_rows(const kvjit_store_kv_quant *q, int64_t k_row, int64_t v_row, int split) {
  const int elem = kvjit_dtype_bytes(q->dtype);
  const char *name = kvjit_dtype_name(q->dtype);
  if (k_row > KVJIT_STORE_KV_QUANT_MAX_ROW_BYTES || v_row > KVJIT_STORE_KV_QUANT_MAX_ROW_BYTES) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: %lld is more than a quantizing store takes (%lld)",
                      k_row > KVJIT_STORE_KV_QUANT_MAX_ROW_BYTES ? "k_row_bytes" : "v_row_bytes",
                      (long long)(k_row > v_row ? k_row : v_row), (long long)KVJIT_STORE_KV_QUANT_MAX_ROW_BYTES);
  }
  if ((k_row & (elem - 1)) != 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "k_row_bytes: %lld is not a whole number of %d-byte %s elements",
                      (long long)k_row, elem, name);
  }
  if ((v_row & (elem - 1)) != 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "v_row_bytes: %lld is not a whole number of %d-byte %s elements",
                      (long long)v_row, elem, name);
  }
  if (split > KVJIT_STORE_KV_QUANT_MAX_SPLIT) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "split: must be at most %d when quantizing, got %d",
                      KVJIT_STORE_KV_QUANT_MAX_SPLIT, split);
  }
  return KVJIT_OK;
}

/* The scale pointers against the scale kind. */
static kvjit_status check_scales(const kvjit_store_kv_args *a, const kvjit_store_kv_request *r, int quantize,
                                 kvjit_scale_kind scale_kind, kvjit_dtype cache_dtype, int has_v) {
  const float *ks = r->params.base.k_scale, *vs = r->params.base.v_scale;
  if (quantize && scale_kind != KVJIT_SCALE_NONE) {
    if (a->batch > 0 && ks == NULL) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "k_scale: NULL with scale_kind %d and batch %lld",
                        (int)scale_kind, (long long)a->batch);
    }
    if (a->batch > 0 && has_v && vs == NULL) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "v_scale: NULL with scale_kind %d and batch %lld",
                        (int)scale_kind, (long long)a->batch);
    }
    if ((uintptr_t)ks % sizeof(float) != 0 || (uintptr_t)vs % sizeof(float) != 0) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: %p is not aligned to 4 bytes (fp32 scales)",
                        (uintptr_t)ks % sizeof(float) != 0 ? "k_scale" : "v_scale",
                        (uintptr_t)ks % sizeof(float) != 0 ? (const void *)ks : (const void *)vs);
    }
  } else if (ks != NULL || vs != NULL) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: %p given, but nothing is scaled (scale_kind %d, cache_dtype %d)",
                      ks != NULL ? "k_scale" : "v_scale", ks != NULL ? (const void *)ks : (const void *)vs,
                      (int)scale_kind, (int)cache_dtype);
  }
  return KVJIT_OK;
}

/* The first row dim of more than one element (the head dim of a per-head layout), or 0. */
static int64_t outer_extent(const kvjit_layout *l, int *dims_over_one) {
  int64_t outer = 0;
  *dims_over_one = 0;
  for (int d = 0; d < l->num_row_dims && d < KVJIT_LAYOUT_MAX_ROW_DIMS; d++) {
    if (l->row_extents[d] > 1) {
      if (outer == 0) outer = l->row_extents[d];
      (*dims_over_one)++;
    }
  }
  return outer;
}

/* One cache's layout (NULL: flat rows @p *cache_stride apart) -> its view, checked against the
 * slots; the flat stride it implies stays in @p *cache_stride. */
static kvjit_status cache_view(const kvjit_layout *layout, const char *name, const char *stride_name,
                               int64_t given_stride, int64_t *cache_stride, int64_t cache_row, int quantize,
                               int64_t num_heads, int64_t num_slots, kvjit_view *out) {
  if (layout == NULL) {
    kvjit_view_flat(out, cache_row, *cache_stride);
    return KVJIT_OK;
  }
  if (given_stride != 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: must be 0 with %s (its slot_stride says it), got %lld",
                      stride_name, name, (long long)given_stride);
  }
  kvjit_status st = kvjit_view_resolve(out, name, layout, cache_row, quantize ? 1 : 0);
  if (st != KVJIT_OK) return st;
  int dims = 0;
  const int64_t outer = outer_extent(layout, &dims);
  if (num_heads > 0 && dims >= 2 && outer != num_heads) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "%s->row_extents: the outer dim (%lld) must be the heads (num_heads %lld) for per-head scales",
                      name, (long long)outer, (long long)num_heads);
  }
  if ((st = kvjit_view_check_slots(out, name, num_slots)) != KVJIT_OK) return st;
  *cache_stride = out->slot_stride;
  return KVJIT_OK;
}

/* Version 3: the caches' layouts into views, the request's static fields and the launch's strides;
 * what each view adds to its cache's address bits; whether either needs the layout kernel. */
static kvjit_status cache_views(const kvjit_store_kv_args *a, kvjit_store_kv_request *r, int64_t k_cache_row,
                                int64_t v_cache_row, int quantize, int64_t num_heads, int has_v, uint64_t *k_bits,
                                uint64_t *v_bits, int *laid_out) {
  kvjit_store_kv_params *p = &r->params.base;
  const kvjit_layout *kl = a->version >= 3 ? a->k_cache_layout : NULL;
  const kvjit_layout *vl = a->version >= 3 && has_v ? a->v_cache_layout : NULL;
  if (a->version >= 3 && !has_v && a->v_cache_layout != NULL) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "v_cache_layout: given for a K-only store (v and v_cache NULL)");
  }
  kvjit_view kv, v_own;
  const kvjit_view *vv = &v_own;
  kvjit_status st = cache_view(kl, "k_cache_layout", "k_cache_stride", a->k_cache_stride, &p->k_cache_stride,
                               k_cache_row, quantize, num_heads, a->num_slots, &kv);
  if (st == KVJIT_OK && has_v && vl == kl && v_cache_row == k_cache_row && a->v_cache_stride == 0) {
    vv = &kv; /* one layout for both views of one shape (FlashAttention's K and V): checked once */
    p->v_cache_stride = kv.slot_stride;
  } else if (st == KVJIT_OK && has_v) {
    st = cache_view(vl, "v_cache_layout", "v_cache_stride", a->v_cache_stride, &p->v_cache_stride, v_cache_row,
                    quantize, num_heads, a->num_slots, &v_own);
  }
  if (st != KVJIT_OK) return st;
  if (!has_v) kvjit_view_flat(&v_own, 0, 0);
  if (has_v && (kl != NULL || vl != NULL)) {
    st = kvjit_view_check_disjoint(&kv, "k_cache", (uint64_t)(uintptr_t)a->k_cache, vv, "v_cache",
                                   (uint64_t)(uintptr_t)a->v_cache, a->num_slots);
    if (st != KVJIT_OK) return st;
  }
  kvjit_view_static_values(&kv, r->values + STORE_F_K_PAGE);
  kvjit_view_static_values(vv, r->values + STORE_F_V_PAGE);
  kvjit_view_strides_of(&kv, &r->params.k_view);
  kvjit_view_strides_of(vv, &r->params.v_view);
  /* An access stays inside one contiguous run and one aligned address of every stride. */
  *k_bits |= kvjit_view_address_bits(&kv);
  *v_bits |= kvjit_view_address_bits(vv);
  *laid_out = !kvjit_view_is_flat(&kv) || !kvjit_view_is_flat(vv);
  return KVJIT_OK;
}

/* The widest access (source bytes) sources and caches whose addresses OR to @p src_bits and
 * @p cache_bits allow: quantizing, an access of vec source bytes writes vec >> elem_shift cache
 * bytes. 0 when the sources are not aligned to one element. */
static int access_vec(uint64_t src_bits, uint64_t cache_bits, int quantize, int elem_shift) {
  if (!quantize) return kvjit_rows_vec_of(src_bits | cache_bits);
  const int src_vec = kvjit_rows_vec_of(src_bits), cache_vec = kvjit_rows_vec_of(cache_bits) << elem_shift;
  if (src_vec < 1 << elem_shift) return 0;
  return src_vec < cache_vec ? src_vec : cache_vec;
}

kvjit_status kvjit_store_kv_validate(const kvjit_context *ctx, const kvjit_store_kv_args *a,
                                     kvjit_store_kv_request *r) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx: NULL");
  if (a == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "args: NULL");
  if (a->version < 1 || a->version > KVJIT_STORE_KV_ARGS_VERSION) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "args->version: must be 1..KVJIT_STORE_KV_ARGS_VERSION (%d), got %u", KVJIT_STORE_KV_ARGS_VERSION,
                      a->version);
  }
  kvjit_store_kv_params *p = &r->params.base;
  kvjit_dtype dtype, cache_dtype;
  kvjit_scale_kind scale_kind;
  int64_t num_heads;
  quant_fields(a, &dtype, &cache_dtype, &scale_kind, &p->k_scale, &p->v_scale, &num_heads);
  kvjit_store_kv_quant quant;
  int quantize = 0;
  kvjit_status st = KVJIT_OK;
  /* The common plain copy (every version-1 call) needs none of the dtype checks. */
  if (dtype != KVJIT_DTYPE_BYTES || cache_dtype != KVJIT_DTYPE_BYTES || scale_kind != KVJIT_SCALE_NONE) {
    st = kvjit_store_kv_quant_resolve(&quant, &quantize, dtype, cache_dtype, scale_kind, num_heads);
    if (st != KVJIT_OK) return st;
  }
  if (a->batch < 0) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "batch: must be >= 0, got %lld", (long long)a->batch);
  int64_t v_row;
  st = kvjit_args_rows(a->k_row_bytes, a->v_row_bytes, a->v, "v", a->v_cache, "v_cache", "store K only",
                       KVJIT_STORE_KV_MAX_ROW_BYTES, &v_row);
  if (st != KVJIT_OK) return st;
  const int has_v = a->v != NULL;
  const int64_t k_row = a->k_row_bytes;
  if (a->index_type != KVJIT_INDEX_INT32 && a->index_type != KVJIT_INDEX_INT64) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "index_type: must be KVJIT_INDEX_INT32 (1) or KVJIT_INDEX_INT64 (2), got %d", (int)a->index_type);
  }
  if (a->index_stride < 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "index_stride: must be >= 1 (0 means 1), got %lld",
                      (long long)a->index_stride);
  }
  if (a->split < 0 || a->split > KVJIT_STORE_KV_MAX_SPLIT) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "split: must be 0 (automatic) or 1..%d, got %d",
                      KVJIT_STORE_KV_MAX_SPLIT, a->split);
  }
  if (quantize && (st = check_quant_rows(&quant, k_row, v_row, a->split)) != KVJIT_OK) return st;
  p->index_stride = a->index_stride ? a->index_stride : 1;
  p->k_stride = a->k_stride;
  p->k_cache_stride = a->k_cache_stride;
  p->v_stride = a->v_stride;
  p->v_cache_stride = a->v_cache_stride;
  /* Quantizing, a cache row holds one byte per source element (a power of two: a shift). */
  const int elem = quantize ? kvjit_dtype_bytes(quant.dtype) : 1;
  const int elem_shift = __builtin_ctz((unsigned)elem);
  const int64_t k_cache_row = k_row >> elem_shift, v_cache_row = v_row >> elem_shift;
  st = kvjit_args_stride("k_stride", &p->k_stride, k_row, "k_row_bytes");
  if (st == KVJIT_OK) {
    st = kvjit_args_stride("k_cache_stride", &p->k_cache_stride, k_cache_row, quantize ? "a K cache row" : "k_row_bytes");
  }
  if (st == KVJIT_OK && has_v) st = kvjit_args_stride("v_stride", &p->v_stride, v_row, "v_row_bytes");
  if (st == KVJIT_OK && has_v) {
    st = kvjit_args_stride("v_cache_stride", &p->v_cache_stride, v_cache_row, quantize ? "a V cache row" : "v_row_bytes");
  }
  if (st != KVJIT_OK) return st;
  if ((st = check_scales(a, r, quantize, scale_kind, cache_dtype, has_v)) != KVJIT_OK) return st;
  if (!has_v) {
    p->v_scale = NULL;
    p->v_stride = p->v_cache_stride = 0;
  }
  if (a->num_slots <= 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "num_slots: must be > 0, got %lld", (long long)a->num_slots);
  }
  if (a->skip_slot != KVJIT_NO_SKIP_SLOT && (a->skip_slot < 0 || a->skip_slot >= a->num_slots)) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "skip_slot: must be KVJIT_NO_SKIP_SLOT (-1) or a slot 0..%lld, got %lld",
                      (long long)(a->num_slots - 1), (long long)a->skip_slot);
  }
  if (a->pdl != KVJIT_PDL_AUTO && a->pdl != KVJIT_PDL_ON && a->pdl != KVJIT_PDL_OFF) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "pdl: must be KVJIT_PDL_AUTO (0), _ON (1) or _OFF (2), got %d",
                      (int)a->pdl);
  }
  if (a->batch > 0) {
    if (a->k == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "k: NULL with batch %lld", (long long)a->batch);
    if (a->k_cache == NULL) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "k_cache: NULL with batch %lld", (long long)a->batch);
    }
    if (a->indices == NULL) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "indices: NULL with batch %lld", (long long)a->batch);
    }
  }
  const uintptr_t index_bytes = a->index_type == KVJIT_INDEX_INT64 ? 8 : 4;
  if (((uintptr_t)a->indices & (index_bytes - 1)) != 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "indices: %p is not aligned to the %u bytes of an %s index",
                      a->indices, (unsigned)index_bytes, index_bytes == 8 ? "int64" : "int32");
  }
  /* Every byte offset the kernel forms must fit in 64 bits. */
  const int64_t last_item = a->batch > 0 ? a->batch - 1 : 0;
  if (!kvjit_args_extent_fits(last_item, p->k_stride, k_row) || !kvjit_args_extent_fits(last_item, p->v_stride, v_row)) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "batch: %lld rows of stride %lld overflow a 64-bit offset",
                      (long long)a->batch, (long long)(p->k_stride > p->v_stride ? p->k_stride : p->v_stride));
  }
  if (!kvjit_args_extent_fits(last_item, p->index_stride, 1) ||
      !kvjit_args_extent_fits(last_item * p->index_stride, (int64_t)index_bytes, (int64_t)index_bytes)) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "index_stride: %lld x batch %lld overflows a 64-bit offset",
                      (long long)p->index_stride, (long long)a->batch);
  }
  if (!kvjit_args_extent_fits(a->num_slots - 1, p->k_cache_stride, k_cache_row) ||
      !kvjit_args_extent_fits(a->num_slots - 1, p->v_cache_stride, v_cache_row)) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "num_slots: %lld rows of stride %lld overflow a 64-bit offset",
                      (long long)a->num_slots,
                      (long long)(p->k_cache_stride > p->v_cache_stride ? p->k_cache_stride : p->v_cache_stride));
  }
  /* The widest access every address can take: OR everything that shifts an address. */
  const uint64_t src_k_bits = (uint64_t)(uintptr_t)a->k | (uint64_t)k_row | (uint64_t)p->k_stride;
  const uint64_t src_v_bits = (uint64_t)(uintptr_t)a->v | (uint64_t)v_row | (uint64_t)p->v_stride;
  uint64_t k_cache_bits = 0, v_cache_bits = 0;
  int laid_out = 0;
  /* Flat caches are the hot path: the compiler would guess a given pointer (and lay this branch out first). */
  if (__builtin_expect(a->version >= 3 && (a->k_cache_layout != NULL || a->v_cache_layout != NULL), 0)) {
    st = cache_views(a, r, k_cache_row, v_cache_row, quantize, quantize ? quant.num_heads : 0, has_v, &k_cache_bits,
                     &v_cache_bits, &laid_out);
    if (st != KVJIT_OK) return st;
  } else {
    kvjit_args_zero(r->values + STORE_F_K_PAGE, STORE_F_COUNT - STORE_F_K_PAGE);
  }
  k_cache_bits |= (uint64_t)(uintptr_t)a->k_cache | (uint64_t)k_cache_row | (uint64_t)p->k_cache_stride;
  v_cache_bits |= (uint64_t)(uintptr_t)a->v_cache | (uint64_t)v_cache_row | (uint64_t)p->v_cache_stride;
  /* Flat caches: one width for both (the flat kernel's); the layout kernel: one each. */
  int vec = access_vec(src_k_bits | src_v_bits, k_cache_bits | v_cache_bits, quantize, elem_shift), v_vec = 0;
  if (vec == 0) {
    const char *what = (uintptr_t)a->k & (uintptr_t)(elem - 1)   ? "k"
                       : (uintptr_t)a->v & (uintptr_t)(elem - 1) ? "v"
                       : p->k_stride & (elem - 1)                ? "k_stride"
                                                                 : "v_stride";
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: not aligned to the %d bytes of one %s element", what, elem,
                      kvjit_dtype_name(quant.dtype));
  }
  if (laid_out) {
    vec = access_vec(src_k_bits, k_cache_bits, quantize, elem_shift);
    if (has_v) v_vec = access_vec(src_v_bits, v_cache_bits, quantize, elem_shift);
    if (v_vec == vec) v_vec = 0;
  }
  p->k = a->k;
  p->v = a->v;
  p->k_cache = a->k_cache;
  p->v_cache = a->v_cache;
  p->indices = a->indices;
  p->batch = a->batch;
  p->num_slots = a->num_slots;
  p->skip_slot = a->skip_slot;
  int64_t *v = r->values;
  v[STORE_F_ARCH] = 0;
  v[STORE_F_K_ROW] = k_row;
  v[STORE_F_V_ROW] = v_row;
  v[STORE_F_INDEX] = a->index_type;
  v[STORE_F_PDL] = a->pdl;
  v[STORE_F_SPLIT] = a->split;
  v[STORE_F_VEC] = vec;
  v[STORE_F_DTYPE] = quantize ? quant.dtype : KVJIT_DTYPE_BYTES;
  v[STORE_F_CACHE_DTYPE] = quantize ? quant.cache_dtype : KVJIT_DTYPE_BYTES;
  v[STORE_F_SCALE] = quantize ? quant.scale_kind : KVJIT_SCALE_NONE;
  v[STORE_F_HEADS] = quantize ? quant.num_heads : 0;
  v[STORE_F_V_VEC] = v_vec;
  r->batch_class = a->batch > 0 ? kvjit_store_kv_batch_class(a->batch) : 0;
  return KVJIT_OK;
}
