/*
 * store_kv_cache specialisation: from a variant (rows, alignment, index type, split, PDL, batch
 * class) to a plan (every compile-time constant of the kernel and its launch geometry), the plan's
 * exact fast-table key, its CUDA source (the embedded template behind a #define prelude) and its
 * program description. Pure functions: no driver, no NVRTC, no context; safe from any thread.
 */
#ifndef KVJIT_CODEGEN_H
#define KVJIT_CODEGEN_H

#include <stdint.h>

#include "jit.h"
#include "kvjit.h"

/** Threads per block of every store_kv_cache kernel. */
#define KVJIT_STORE_KV_BLOCK 128
/** Largest row, in bytes, of K or V (the kernel's constants and the key hold 31 bits). */
#define KVJIT_STORE_KV_MAX_ROW_BYTES ((int64_t)INT32_MAX)
/** Largest explicit split. */
#define KVJIT_STORE_KV_MAX_SPLIT (1 << 20)
/** Largest compute capability number a plan accepts. */
#define KVJIT_STORE_KV_MAX_ARCH 1023
/** Number of batch classes (see kvjit_store_kv_batch_class()). */
#define KVJIT_STORE_KV_BATCH_CLASSES 3
/** Name of the kernel in the template and of its out-of-range counter. */
#define KVJIT_STORE_KV_KERNEL "kvjit_store_kv"
#define KVJIT_STORE_KV_OOB_COUNTER "kvjit_store_kv_oob"

/** Host mirror of the kernel's `kvjit_store_kv_params` (all fields 8 bytes: same layout). */
typedef struct kvjit_store_kv_params {
  const void *k, *v;
  void *k_cache, *v_cache;
  const void *indices;
  int64_t k_stride, v_stride, k_cache_stride, v_cache_stride; /* bytes */
  int64_t index_stride;                                       /* elements */
  int64_t batch, num_slots, skip_slot;
} kvjit_store_kv_params;

/** Every constant a compiled store_kv_cache kernel depends on, and its launch geometry. */
typedef struct kvjit_store_kv_plan {
  int arch;            /* compute capability it is built for */
  int64_t k_row_bytes;
  int64_t v_row_bytes; /* 0: K only */
  int split;           /* slices per row, resolved */
  int vec;             /* bytes per access: 16, 8, 4, 2 or 1 */
  int lanes;           /* lanes per slice group: power of two <= 32 */
  int block;           /* threads per block */
  int index64;         /* 1: int64 indices, 0: int32 */
  int pdl;             /* 1: PDL wait/trigger compiled in and the launch attribute set */
} kvjit_store_kv_plan;

/** What the automatic choice does for one batch class (the table lives in codegen.c). */
typedef struct kvjit_store_kv_class_rule {
  int64_t max_batch;         /* the class holds batches up to this (inclusive) */
  int chunks_per_lane;       /* target vector accesses per lane per row */
  int64_t pdl_min_row_bytes; /* PDL_AUTO turns PDL on (sm_90+) when the wider row has at least this */
} kvjit_store_kv_class_rule;

/** The rule of batch class @p batch_class (0 .. KVJIT_STORE_KV_BATCH_CLASSES - 1). */
const kvjit_store_kv_class_rule *kvjit_store_kv_class_rule_get(int batch_class);

/** Batch class of a batch >= 1: 0 = decode-sized (<= 16), 1 = up to 4096, 2 = larger. */
static inline int kvjit_store_kv_batch_class(int64_t batch) {
  return batch <= 16 ? 0 : batch <= 4096 ? 1 : 2;
}

/** Largest power of two <= 16 dividing @p bits (the OR of every address, stride and size); 16 for 0. */
static inline int kvjit_store_kv_vec_of(uint64_t bits) {
  bits |= 16;
  return (int)(bits & (~bits + 1));
}

/**
 * The automatic split: the smallest s dividing both rows into whole vectors with at most
 * 32 lanes x chunks_per_lane vectors per slice; when no s is that small, the largest s that keeps
 * slices whole vectors and is at most what was wanted.
 */
int kvjit_store_kv_auto_split(int64_t k_row_bytes, int64_t v_row_bytes, int vec, int chunks_per_lane);

/** Lanes for a slice of @p slice_chunks vectors: the smallest power of two >= chunks/cpl, at most 32. */
int kvjit_store_kv_lanes(int64_t slice_chunks, int chunks_per_lane);

/**
 * Resolve a plan. @p vec is what the pointers and strides allow (1..16, power of two); it is
 * narrowed to what the rows and slices allow. @p split 0 = automatic for @p batch_class.
 * @return KVJIT_ERR_INVALID_ARGUMENT (row bytes, split, index type, pdl value, arch) or
 *         KVJIT_ERR_UNSUPPORTED (PDL on before sm_90), with the argument named.
 */
kvjit_status kvjit_store_kv_plan_make(kvjit_store_kv_plan *out, int arch, int64_t k_row_bytes, int64_t v_row_bytes,
                                      int vec, kvjit_index_type index_type, kvjit_pdl_mode pdl, int split,
                                      int batch_class);

/** The exact 128-bit fast-table key of a plan (distinct plans, distinct keys). */
kvjit_fast_key kvjit_store_kv_plan_key(const kvjit_store_kv_plan *plan);

/** Generated CUDA source of a plan: malloc'd, NUL-terminated; NULL when out of memory. */
char *kvjit_store_kv_source(const kvjit_store_kv_plan *plan);

/** Program description of a plan's @p source (static name, options and kernel list). */
void kvjit_store_kv_desc(const kvjit_store_kv_plan *plan, const char *source, kvjit_program_desc *desc);

/** Blocks of a launch of @p batch items, or 0 when it exceeds the grid limit (2^31 - 1). */
uint64_t kvjit_store_kv_blocks(const kvjit_store_kv_plan *plan, int64_t batch);

#endif
