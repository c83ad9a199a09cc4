/*
 * transfer_kv as an op: its fields (manifest order, request values), the request its call
 * arguments validate into, and its request key.
 */
#ifndef KVJIT_TRANSFER_KV_OP_H
#define KVJIT_TRANSFER_KV_OP_H

#include <stdint.h>

#include "op.h"
#include "transfer_kv_plan.h"

/** Fields, in manifest order: values[TRANSFER_F_...]. */
enum {
  TRANSFER_F_ARCH,
  TRANSFER_F_K_ROW,
  TRANSFER_F_V_ROW,  /* 0: K only */
  TRANSFER_F_INDEX,  /* kvjit_index_type */
  TRANSFER_F_SRC,    /* kvjit_location */
  TRANSFER_F_DST,    /* kvjit_location */
  TRANSFER_F_LAYERS, /* 0: one layer, 1: per-layer pointer tables */
  TRANSFER_F_PDL,    /* kvjit_pdl_mode, as asked */
  TRANSFER_F_SPLIT,  /* as asked: 0 automatic */
  TRANSFER_F_VEC,    /* widest access the strides (and one layer's pointers) allow */
  TRANSFER_F_COUNT
};

/** A validated call: the variant (arch filled in by the caller), its batch class, the launch. */
typedef struct kvjit_transfer_kv_request {
  int64_t values[TRANSFER_F_COUNT];
  int batch_class;
  unsigned layers; /* grid.y: 1, or the number of layers of the tables */
  kvjit_transfer_kv_params params;
} kvjit_transfer_kv_request;

/** Everything the request key does not cover, and the ranges of what it does (values[0] left 0). */
kvjit_status kvjit_transfer_kv_validate(const kvjit_context *ctx, const kvjit_transfer_kv_args *args,
                                        kvjit_transfer_kv_request *out);

/*
 * The request key. Word a, below the family byte: arch 46..55 | k_row_bytes 15..45 | batch class
 * 13..14 | log2 vec 10..12 | int64 indices 9 | source on the host 8 | destination on the host 7 |
 * layer tables 6 | pdl mode 4..5. Word b: v_row_bytes 0..30 | split 31..51.
 */
static inline kvjit_fast_key kvjit_transfer_kv_key(const int64_t *v, int batch_class) {
  const uint64_t a = (uint64_t)v[TRANSFER_F_ARCH] << 46 | (uint64_t)v[TRANSFER_F_K_ROW] << 15 |
                     (uint64_t)batch_class << 13 | (uint64_t)__builtin_ctzll((uint64_t)v[TRANSFER_F_VEC]) << 10 |
                     (uint64_t)(v[TRANSFER_F_INDEX] == KVJIT_INDEX_INT64) << 9 | (uint64_t)v[TRANSFER_F_SRC] << 8 |
                     (uint64_t)v[TRANSFER_F_DST] << 7 | (uint64_t)v[TRANSFER_F_LAYERS] << 6 |
                     (uint64_t)v[TRANSFER_F_PDL] << 4;
  const uint64_t b = (uint64_t)v[TRANSFER_F_V_ROW] | (uint64_t)v[TRANSFER_F_SPLIT] << 31;
  return kvjit_fast_key_make(KVJIT_FAMILY_TRANSFER_KV, a, b);
}

#endif
