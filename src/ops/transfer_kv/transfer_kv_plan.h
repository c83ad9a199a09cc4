/*
 * transfer_kv specialisation: from a variant (rows, alignment, index type, directions, layer
 * mode, split, PDL, batch class) to a plan (every compile-time constant of kernel_src/
 * transfer_kv.cuh and its launch geometry), its CUDA source and its program description. Pure
 * functions: no driver, no NVRTC, no context. The op around them is transfer_kv.c.
 */
#ifndef KVJIT_TRANSFER_KV_PLAN_H
#define KVJIT_TRANSFER_KV_PLAN_H

#include <stdint.h>

#include "kvjit_tools.h"
#include "op_program.h"
#include "rows.h"

/** Threads per block of every transfer_kv kernel. */
#define KVJIT_TRANSFER_KV_BLOCK 128
/** Largest row, in bytes (the key holds 31 bits). */
#define KVJIT_TRANSFER_KV_MAX_ROW_BYTES ((int64_t)INT32_MAX)
/** Largest explicit split. */
#define KVJIT_TRANSFER_KV_MAX_SPLIT KVJIT_ROWS_MAX_SPLIT
/** Largest compute capability number a plan accepts. */
#define KVJIT_TRANSFER_KV_MAX_ARCH 1023
/** Batch classes (kvjit_transfer_kv_batch_class()). */
enum {
  KVJIT_TRANSFER_KV_CLASS_SMALL, /* batch <= 64: one access per lane, latency-bound */
  KVJIT_TRANSFER_KV_CLASS_MID,   /* 65..32768 */
  KVJIT_TRANSFER_KV_CLASS_LARGE, /* beyond */
  KVJIT_TRANSFER_KV_CLASSES
};
#define KVJIT_TRANSFER_KV_KERNEL "kvjit_transfer_kv"
#define KVJIT_TRANSFER_KV_OOB_COUNTER "kvjit_transfer_kv_oob"

/** Host mirror of the kernel's `kvjit_transfer_kv_params` (all fields 8 bytes: same layout). */
typedef struct kvjit_transfer_kv_params {
  const void *src_k, *src_v, *dst_k, *dst_v; /* caches, or device tables of per-layer cache pointers */
  const void *src_indices, *dst_indices;
  int64_t src_k_stride, src_v_stride, dst_k_stride, dst_v_stride; /* bytes */
  int64_t src_index_stride, dst_index_stride;                     /* elements */
  int64_t batch, src_num_slots, dst_num_slots;
} kvjit_transfer_kv_params;

/** Every constant a compiled transfer_kv kernel depends on, and its launch geometry. */
typedef struct kvjit_transfer_kv_plan {
  int arch;
  int64_t k_row_bytes;
  int64_t v_row_bytes; /* 0: K only */
  int split;           /* slices per row, resolved */
  int vec;             /* bytes per access */
  int lanes;           /* lanes per slice group: power of two <= 32 */
  int block;           /* threads per block */
  int items;           /* items per lane group: 1 or 2 */
  int index64;         /* 1: int64 slot ids */
  int pdl;             /* 1: PDL wait/trigger compiled in and the launch attribute set */
  int table;           /* 1: per-layer pointer tables, layer = blockIdx.y */
  int host_link;       /* 1: either side is pinned host memory (the plan's rules differ) */
} kvjit_transfer_kv_plan;

/** Batch class of a batch >= 1. */
int kvjit_transfer_kv_batch_class(int64_t batch);

/**
 * Resolve a plan of checked fields. @p vec is what the strides (and, one layer, the pointers)
 * allow; it is narrowed to what the rows and slices allow. @p split 0 = automatic for the class.
 * @return KVJIT_ERR_INVALID_ARGUMENT (a split not dividing the rows) or KVJIT_ERR_UNSUPPORTED (PDL
 *         on before sm_90), naming the field.
 */
kvjit_status kvjit_transfer_kv_plan_make(kvjit_transfer_kv_plan *out, int arch, int64_t k_row_bytes,
                                         int64_t v_row_bytes, int vec, kvjit_index_type index_type,
                                         kvjit_pdl_mode pdl, int split, kvjit_location src, kvjit_location dst,
                                         int table, int batch_class);

/** The name expression of a plan's kernel: the template's arguments in its order; its length, or -1
 *  when it does not fit in @p capacity bytes. */
int kvjit_transfer_kv_kernel_name(const kvjit_transfer_kv_plan *plan, char *out, size_t capacity);

/** A plan's program: the embedded template and its kernel. */
kvjit_status kvjit_transfer_kv_program(const kvjit_transfer_kv_plan *plan, kvjit_op_program *out);

#endif
