/*
 * transfer_kv as an op: its fields (manifest order, request values), the request its call
 * arguments validate into, and its request key.
 */
#ifndef KVJIT_TRANSFER_KV_OP_H
#define KVJIT_TRANSFER_KV_OP_H

#include <stdint.h>

#include "descriptor.h"
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
  TRANSFER_F_SRC_DTYPE, /* kvjit_dtype; canonical BYTES for a plain copy */
  TRANSFER_F_DST_DTYPE,
  TRANSFER_F_SCALE,  /* kvjit_scale_kind */
  TRANSFER_F_HEADS,  /* per-head scales: heads per row, else 0 */
  TRANSFER_F_CTAS,   /* kvjit_transfer_kv_ctas; canonical FEW or ALL */
  /* the static part of the source's and the destination's views (layout.h's KVJIT_VIEW_F_*) */
  TRANSFER_F_SRC_PAGE,
  TRANSFER_F_SRC_ATOM,
  TRANSFER_F_SRC_DIM0,
  TRANSFER_F_SRC_DIM1,
  TRANSFER_F_DST_PAGE,
  TRANSFER_F_DST_ATOM,
  TRANSFER_F_DST_DIM0,
  TRANSFER_F_DST_DIM1,
  TRANSFER_F_COUNT
};

/** A validated call: the variant (arch filled in by the caller), its batch class, the launch. */
typedef struct kvjit_transfer_kv_request {
  int64_t values[TRANSFER_F_COUNT];
  int batch_class;
  unsigned layers; /* grid.y: 1, or the number of layers of the tables */
  uint32_t max_blocks; /* few CTAs: the grid's cap (the caller's max_ctas, or the default) */
  int laid_out[2];     /* the source's, the destination's caches have layouts (kvjit_transfer_kv_views()) */
  kvjit_transfer_kv_params params;
} kvjit_transfer_kv_request;

/** The shape of checked values (values[0] unused), its views' static parts included. */
kvjit_status kvjit_transfer_kv_shape_of(const int64_t *values, kvjit_transfer_kv_shape *out);

/**
 * Version 2's layouts of a call (transfer_kv_views.c): each side's views (K and V share the
 * static part), checked (no two destination bytes shared, K and V disjoint), into @p r's fields
 * and strides; what each side adds to its address bits. Rows: source bytes @p k_row / @p v_row,
 * destination bytes @p k_dst_row / @p v_dst_row.
 */
kvjit_status kvjit_transfer_kv_views(const kvjit_transfer_kv_args *a, kvjit_transfer_kv_request *r, int64_t k_row,
                                     int64_t v_row, int64_t k_dst_row, int64_t v_dst_row, uint64_t *src_bits,
                                     uint64_t *dst_bits);

/**
 * Everything the request key does not cover, and the ranges of what it does (values[0] left 0).
 * No context: the calls check theirs first; kvjit_variant_set_layouts() keys stand-in arguments.
 */
kvjit_status kvjit_transfer_kv_validate(const kvjit_transfer_kv_args *args, kvjit_transfer_kv_request *out);

/** The op's descriptor (transfer_kv.c), in the registry's table (src/ops/ops.def). */
extern const kvjit_op kvjit_op_transfer_kv;

#endif
