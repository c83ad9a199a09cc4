/*
 * store_kv_cache as an op: its fields (the order of its manifest lines and of its request
 * values), the request its call arguments validate into, and its request key.
 */
#ifndef KVJIT_STORE_KV_OP_H
#define KVJIT_STORE_KV_OP_H

#include <stdint.h>

#include "op.h"
#include "store_kv_plan.h"

/** Fields, in manifest order: values[STORE_F_...]. The four last are optional (quantizing only). */
enum {
  STORE_F_ARCH,
  STORE_F_K_ROW,
  STORE_F_V_ROW,
  STORE_F_INDEX, /* kvjit_index_type */
  STORE_F_PDL,   /* kvjit_pdl_mode, as asked */
  STORE_F_SPLIT, /* as asked: 0 automatic */
  STORE_F_VEC,   /* widest access the pointers allow, source bytes */
  STORE_F_DTYPE,
  STORE_F_CACHE_DTYPE,
  STORE_F_SCALE,
  STORE_F_HEADS,
  STORE_F_COUNT
};

/** A validated call: the variant (arch filled in by the caller), its batch class, the kernel's arguments. */
typedef struct kvjit_store_kv_request {
  int64_t values[STORE_F_COUNT];
  int batch_class;
  kvjit_store_kv_params params;
} kvjit_store_kv_request;

/**
 * Everything about a call that the request key does not cover (pointers, strides, slots, batch,
 * scales), and the ranges of the fields it does, so that distinct requests get distinct keys.
 * The rules between variant fields (a split dividing the rows, heads dividing them, ...) are the
 * op's check: they run once per key, on the miss that loads it (kvjit_op_load()).
 * values[STORE_F_ARCH] is left 0.
 */
kvjit_status kvjit_store_kv_validate(const kvjit_context *ctx, const kvjit_store_kv_args *args,
                                     kvjit_store_kv_request *out);

/*
 * The request key. Word a, below the family byte: quantizing 55 | arch 45..54 | k_row_bytes
 * 14..44 | batch class 12..13 | log2 vec 9..11 | int64 indices 8 | pdl mode 6..7, and quantizing
 * only: source dtype - 1 at 4..5 | fp8 kind 3 | scale kind 1..2. Word b: v_row_bytes 0..30 and
 * split 31..51 (plain copies); v_row_bytes 0..27, split 28..43 and heads 44..59 (quantizing,
 * whose rows, splits and heads are capped to fit). Validation keeps every field in its bits.
 */
static inline kvjit_fast_key kvjit_store_kv_key(const int64_t *v, int batch_class) {
  const uint64_t quant = v[STORE_F_CACHE_DTYPE] != 0;
  uint64_t a = quant << 55 | (uint64_t)v[STORE_F_ARCH] << 45 | (uint64_t)v[STORE_F_K_ROW] << 14 |
               (uint64_t)batch_class << 12 | (uint64_t)__builtin_ctzll((uint64_t)v[STORE_F_VEC]) << 9 |
               (uint64_t)(v[STORE_F_INDEX] == KVJIT_INDEX_INT64) << 8 | (uint64_t)v[STORE_F_PDL] << 6;
  uint64_t b;
  if (quant) {
    a |= (uint64_t)(v[STORE_F_DTYPE] - KVJIT_DTYPE_F16) << 4 |
         (uint64_t)(v[STORE_F_CACHE_DTYPE] - KVJIT_DTYPE_FP8_E4M3) << 3 | (uint64_t)v[STORE_F_SCALE] << 1;
    b = (uint64_t)v[STORE_F_V_ROW] | (uint64_t)v[STORE_F_SPLIT] << 28 | (uint64_t)v[STORE_F_HEADS] << 44;
  } else {
    b = (uint64_t)v[STORE_F_V_ROW] | (uint64_t)v[STORE_F_SPLIT] << 31;
  }
  return kvjit_fast_key_make(KVJIT_FAMILY_STORE_KV, a, b);
}

#endif
