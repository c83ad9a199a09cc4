/*
 * store_kv_cache as an op: its fields (the order of its manifest lines and of its request
 * values), the request its call arguments validate into, and its request key.
 */
#ifndef KVJIT_STORE_KV_OP_H
#define KVJIT_STORE_KV_OP_H

#include <stdint.h>

#include "descriptor.h"
#include "op.h"
#include "store_kv_plan.h"

/** Fields, in manifest order: values[STORE_F_...]. DTYPE .. HEADS are optional (quantizing only),
 *  and so are the static parts of the cache layouts (K_PAGE .. V_DIM1: 0 for a flat cache, in
 *  the order of layout.h's KVJIT_VIEW_F_*). */
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
  STORE_F_K_PAGE,
  STORE_F_K_ATOM,
  STORE_F_K_DIM0,
  STORE_F_K_DIM1,
  STORE_F_V_PAGE,
  STORE_F_V_ATOM,
  STORE_F_V_DIM0,
  STORE_F_V_DIM1,
  STORE_F_V_VEC, /* laid-out caches: V's widest access when it differs from vec (K's); 0 = vec */
  STORE_F_COUNT
};

/** A validated call: the variant (arch filled in by the caller), its batch class, the kernel's arguments. */
typedef struct kvjit_store_kv_request {
  int64_t values[STORE_F_COUNT];
  int batch_class;
  kvjit_store_kv_launch params;
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

/** The op's descriptor (store_kv.c), in the registry's table (src/ops/ops.def). */
extern const kvjit_op kvjit_op_store_kv;

#endif
