/* The ops as plain loops over host memory: the CPU path of the doors. */
#include "host_copy.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp8_ref.h" /* the exact fp32 -> fp8 conversion (round to nearest even, saturated) */

static int64_t slot_at(const void *indices, kvjit_index_type type, int64_t i, int64_t stride) {
  return type == KVJIT_INDEX_INT32 ? ((const int32_t *)indices)[i * stride] : ((const int64_t *)indices)[i * stride];
}

static int64_t or_default(int64_t value, int64_t fallback) { return value ? value : fallback; }

static float element(const unsigned char *row, kvjit_dtype dtype, int64_t e) {
  uint16_t h;
  float f;
  switch (dtype) {
  case KVJIT_DTYPE_F16: memcpy(&h, row + 2 * e, 2); return fp8_ref_f16_to_float(h);
  case KVJIT_DTYPE_BF16: memcpy(&h, row + 2 * e, 2); return fp8_ref_bf16_to_float(h);
  default: memcpy(&f, row + 4 * e, 4); return f;
  }
}

/* One row into the cache: bytes, or fp8(x / scale) per element. */
static void store_row(const kvjit_store_kv_args *a, const unsigned char *src, unsigned char *dst, int64_t row_bytes,
                      const float *scale) {
  if (a->cache_dtype == KVJIT_DTYPE_BYTES) {
    memcpy(dst, src, (size_t)row_bytes);
    return;
  }
  int64_t elems = row_bytes / (a->dtype == KVJIT_DTYPE_F32 ? 4 : 2);
  int64_t per_head = a->scale_kind == KVJIT_SCALE_PER_HEAD ? elems / a->num_heads : elems;
  int e4m3 = a->cache_dtype == KVJIT_DTYPE_FP8_E4M3;
  for (int64_t e = 0; e < elems; e++) {
    float x = element(src, a->dtype, e);
    if (a->scale_kind != KVJIT_SCALE_NONE) x = x / scale[a->scale_kind == KVJIT_SCALE_PER_HEAD ? e / per_head : 0];
    dst[e] = fp8_ref_encode(x, e4m3);
  }
}

int kvjit_host_store(const kvjit_store_kv_args *a) {
  const int64_t v_row = or_default(a->v_row_bytes, a->k_row_bytes);
  const int64_t k_stride = or_default(a->k_stride, a->k_row_bytes), v_stride = or_default(a->v_stride, v_row);
  const int64_t k_cache_row = a->cache_dtype == KVJIT_DTYPE_BYTES ? a->k_row_bytes
                                                                   : a->k_row_bytes / (a->dtype == KVJIT_DTYPE_F32 ? 4 : 2);
  const int64_t v_cache_row = a->cache_dtype == KVJIT_DTYPE_BYTES ? v_row : v_row / (a->dtype == KVJIT_DTYPE_F32 ? 4 : 2);
  const int64_t k_cache_stride = or_default(a->k_cache_stride, k_cache_row);
  const int64_t v_cache_stride = or_default(a->v_cache_stride, v_cache_row);
  for (int64_t i = 0; i < a->batch; i++) {
    int64_t slot = slot_at(a->indices, a->index_type, i, or_default(a->index_stride, 1));
    if (slot < 0 || slot >= a->num_slots || slot == a->skip_slot) continue;
    store_row(a, (const unsigned char *)a->k + i * k_stride, (unsigned char *)a->k_cache + slot * k_cache_stride,
              a->k_row_bytes, a->k_scale);
    if (a->v != NULL)
      store_row(a, (const unsigned char *)a->v + i * v_stride, (unsigned char *)a->v_cache + slot * v_cache_stride,
                v_row, a->v_scale);
  }
  return 0;
}

/* Every kept row is read before any is written: source and destination may be one cache. */
static int move_rows(const kvjit_transfer_kv_args *a, const unsigned char *src, unsigned char *dst, int64_t row,
                     int64_t src_stride, int64_t dst_stride, char *msg, size_t msg_size) {
  unsigned char *rows = malloc((size_t)(a->batch * row) + 1);
  if (rows == NULL) {
    snprintf(msg, msg_size, "batch: %lld rows of %lld bytes do not fit in host memory", (long long)a->batch,
             (long long)row);
    return -1;
  }
  const int64_t s_stride = or_default(a->src_index_stride, 1), d_stride = or_default(a->dst_index_stride, 1);
  for (int64_t i = 0; i < a->batch; i++) {
    int64_t s = slot_at(a->src_indices, a->index_type, i, s_stride);
    if (s >= 0 && s < a->src_num_slots) memcpy(rows + i * row, src + s * src_stride, (size_t)row);
  }
  for (int64_t i = 0; i < a->batch; i++) {
    int64_t s = slot_at(a->src_indices, a->index_type, i, s_stride), d = slot_at(a->dst_indices, a->index_type, i, d_stride);
    if (s >= 0 && s < a->src_num_slots && d >= 0 && d < a->dst_num_slots)
      memcpy(dst + d * dst_stride, rows + i * row, (size_t)row);
  }
  free(rows);
  return 0;
}

int kvjit_host_transfer(const kvjit_transfer_kv_args *a, char *msg, size_t msg_size) {
  const int64_t k_row = a->k_row_bytes, v_row = or_default(a->v_row_bytes, k_row);
  if (move_rows(a, a->src_k, a->dst_k, k_row, or_default(a->src_k_stride, k_row), or_default(a->dst_k_stride, k_row),
                msg, msg_size))
    return -1;
  if (a->src_v != NULL && move_rows(a, a->src_v, a->dst_v, v_row, or_default(a->src_v_stride, v_row),
                                    or_default(a->dst_v_stride, v_row), msg, msg_size))
    return -1;
  return 0;
}
