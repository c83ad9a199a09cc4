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
#include "layout.h"
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
/** Largest row, in source bytes, of a converting copy (its key holds 24 bits of v_row_bytes). */
#define KVJIT_TRANSFER_KV_CONVERT_MAX_ROW_BYTES (((int64_t)1 << 24) - 1)
/** Most heads of a per-head scale (the key holds 13 bits). */
#define KVJIT_TRANSFER_KV_MAX_HEADS 8191
/** Most CTAs a caller may cap a launch at (max_ctas). */
#define KVJIT_TRANSFER_KV_MAX_CTAS (1 << 20)
/** Most threads per block of a plan on few CTAs (they stride over the batch; fewer when each holds
 *  more bytes in flight: transfer_kv_plan.c). */
#define KVJIT_TRANSFER_KV_FEW_BLOCK 1024
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
  const float *k_scale, *v_scale; /* converting with a scale */
  int64_t scale_stride;           /* floats per layer (tables), else 0 */
  /* laid-out caches: every cache's strides (a flat one's: {0, its stride}); unused when both sides are flat */
  kvjit_view_strides src_k_view, src_v_view, dst_k_view, dst_v_view;
} kvjit_transfer_kv_params;

/** How a copy uses the SMs (the `ctas` field): as the direction says, few CTAs striding over the
 *  batch (the caller's cap; by default KVJIT_TRANSFER_KV_HOST_CTAS, _HOST_WRITE_CTAS writing host
 *  memory), or the grid the batch needs. */
typedef enum kvjit_transfer_kv_ctas {
  KVJIT_TRANSFER_KV_CTAS_AUTO = 0, /* few over the host link, all on the device */
  KVJIT_TRANSFER_KV_CTAS_FEW = 1,
  KVJIT_TRANSFER_KV_CTAS_ALL = 2
} kvjit_transfer_kv_ctas;

/** Everything of a variant a plan depends on, but the arch and the batch class (checked fields). */
typedef struct kvjit_transfer_kv_shape {
  int64_t k_row_bytes, v_row_bytes; /* source bytes; v 0: K only */
  int vec;                          /* source bytes per access the strides and pointers allow */
  kvjit_index_type index_type;
  kvjit_pdl_mode pdl;
  int split; /* 0: automatic */
  kvjit_location src, dst;
  int table;
  kvjit_dtype src_dtype, dst_dtype; /* canonical: both BYTES for a plain copy */
  kvjit_scale_kind scale_kind;      /* NONE for a plain copy */
  int64_t num_heads;                /* with KVJIT_SCALE_PER_HEAD, else 0 */
  kvjit_transfer_kv_ctas ctas;      /* resolved: FEW or ALL */
  kvjit_view src_view, dst_view;    /* the static part of each side's views (layout.h; flat: all 0) */
} kvjit_transfer_kv_shape;

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
  int pdl;             /* PDL wait/trigger compiled in and the launch attribute set: 1 trigger at the start, 2 when
                        * the CTA is done (few CTAs); 0: none */
  int table;           /* 1: per-layer pointer tables, layer = blockIdx.y */
  int host_link;       /* 1: either side is pinned host memory (the plan's rules differ) */
  int src_dtype, dst_dtype; /* kvjit_dtype; both 0: a plain copy */
  int scale;           /* kvjit_scale_kind */
  int64_t k_head_bytes, v_head_bytes; /* source bytes of one head (per-head scales), else 0 */
  int fp8_soft;        /* 1: quantizing with the integer encoding (before sm_89) */
  int loop;            /* 1: few CTAs that stride over the batch (the launch's grid is capped) */
  int stream;          /* 1: cache-streaming row accesses (over the host link) */
  /* The views' static parts: page size, run bytes, the three extents (all 0: flat; both flat:
   * today's addressing) -- the template's SPage .. SE2 and DPage .. DE2. */
  int64_t src_view[5], dst_view[5];
} kvjit_transfer_kv_plan;

/** Batch class of a batch >= 1. */
int kvjit_transfer_kv_batch_class(int64_t batch);

/** A shape with the defaults of a plain copy (kvjit_transfer_kv_shape_plain() then the fields). */
void kvjit_transfer_kv_shape_plain(kvjit_transfer_kv_shape *out, int64_t k_row_bytes, int64_t v_row_bytes,
                                   kvjit_location src, kvjit_location dst);

/**
 * Put the conversion of @p shape (src_dtype, dst_dtype, scale_kind, num_heads; rows for their
 * limit) in canonical form: a plain copy (dst_dtype BYTES or src_dtype) as BYTES, BYTES, NONE, 0;
 * fp8 -> f16/bf16/f32 and f16/bf16/f32 -> fp8 with any scale; anything else refused, naming the
 * field (the one copy of these rules: the call's validation and the variant's check use it).
 */
kvjit_status kvjit_transfer_kv_convert_resolve(kvjit_transfer_kv_shape *shape);

/**
 * Resolve a plan of checked fields. @p shape->vec is what the strides (and, one layer, the
 * pointers) allow; it is narrowed to what the rows, heads and slices allow. split 0 = automatic
 * for the class.
 * @return KVJIT_ERR_INVALID_ARGUMENT (a split or head count not dividing the rows) or
 *         KVJIT_ERR_UNSUPPORTED (PDL on before sm_90), naming the field.
 */
kvjit_status kvjit_transfer_kv_plan_make(kvjit_transfer_kv_plan *out, int arch, const kvjit_transfer_kv_shape *shape,
                                         int batch_class);

/** The name expression of a plan's kernel: the template's arguments in its order; its length, or -1
 *  when it does not fit in @p capacity bytes. */
int kvjit_transfer_kv_kernel_name(const kvjit_transfer_kv_plan *plan, char *out, size_t capacity);

/** A plan's program: the embedded template and its kernel. */
kvjit_status kvjit_transfer_kv_program(const kvjit_transfer_kv_plan *plan, kvjit_op_program *out);

#endif
