/*
 * store_kv_cache specialisation: from a variant (rows, alignment, index type, split, PDL, batch
 * class) to a plan (every compile-time constant of the kernel and its launch geometry), its CUDA
 * program (the embedded C++ template and the kernel instance the plan names). Pure
 * functions: no driver, no NVRTC, no context; safe from any thread. The op around them is
 * store_kv.c.
 */
#ifndef KVJIT_STORE_KV_PLAN_H
#define KVJIT_STORE_KV_PLAN_H

#include <stdint.h>

#include "dtype.h"
#include "kvjit_tools.h"
#include "layout.h"
#include "op_program.h"
#include "rows.h"

/** Threads per block of every store_kv_cache kernel. */
#define KVJIT_STORE_KV_BLOCK 128
/** Largest row, in bytes, of K or V (the kernel's constants and the key hold 31 bits). */
#define KVJIT_STORE_KV_MAX_ROW_BYTES ((int64_t)INT32_MAX)
/** Largest explicit split. */
#define KVJIT_STORE_KV_MAX_SPLIT KVJIT_ROWS_MAX_SPLIT
/** Largest compute capability number a plan accepts. */
#define KVJIT_STORE_KV_MAX_ARCH 1023
/** Batch classes (see kvjit_store_kv_batch_class()): the automatic choice is made per class. */
enum {
  KVJIT_STORE_KV_CLASS_DECODE,    /* batch <= 16 */
  KVJIT_STORE_KV_CLASS_MID_SMALL, /* 17..512 */
  KVJIT_STORE_KV_CLASS_MID,       /* 513..32768 */
  KVJIT_STORE_KV_CLASS_LARGE,     /* beyond */
  KVJIT_STORE_KV_CLASSES
};
/** Name of the kernel template and of its out-of-range counter. */
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
  const float *k_scale, *v_scale; /* quantize on store: fp32 scales in device memory */
} kvjit_store_kv_params;

/** What a launch passes: the flat kernel reads the first part only, a layout kernel all of it
 *  (kernel_src/store_kv_layout.cuh's kvjit_store_kv_layout_params). */
typedef struct kvjit_store_kv_launch {
  kvjit_store_kv_params base;
  kvjit_view_strides k_view, v_view; /* a layout kernel's strides (unused when both views are flat) */
} kvjit_store_kv_launch;

/** The static part of a cache view a plan is specialized on (layout.h; all 0: flat). */
typedef struct kvjit_store_kv_plan_view {
  int64_t page_size;                    /* 0: flat */
  int64_t atom;                         /* cache bytes of a contiguous run (the row when no dims) */
  int64_t extents[KVJIT_VIEW_MAX_DIMS]; /* atoms, outermost first; 0 past the last dim */
} kvjit_store_kv_plan_view;

/** Quantize on store: what the source holds and what the cache gets (see kvjit_store_kv_quant_resolve()). */
typedef struct kvjit_store_kv_quant {
  kvjit_dtype dtype;           /* source element: F16, BF16 or F32 */
  kvjit_dtype cache_dtype;     /* FP8_E4M3 or FP8_E5M2 */
  kvjit_scale_kind scale_kind; /* NONE, PER_TENSOR or PER_HEAD */
  int64_t num_heads;           /* PER_HEAD: heads per row (K and V each); otherwise 0 */
} kvjit_store_kv_quant;

/** Limits of quantizing plans (what their fast key holds). */
#define KVJIT_STORE_KV_QUANT_MAX_ROW_BYTES (((int64_t)1 << 28) - 1)
#define KVJIT_STORE_KV_QUANT_MAX_SPLIT 65535
#define KVJIT_STORE_KV_QUANT_MAX_HEADS 65535
/** First compute capability with the hardware fp8 conversion (cvt.rn.satfinite.e4m3x2.f32). */
#define KVJIT_STORE_KV_FP8_HW_ARCH 89

/**
 * Decide between a plain copy and a quantizing store, and check the pair of dtypes, the scale
 * kind and the head count (each error names the argument and the value).
 * @param quantize receives 1 (and @p out is filled) for an fp8 cache fed from F16/BF16/F32, else 0.
 */
kvjit_status kvjit_store_kv_quant_resolve(kvjit_store_kv_quant *out, int *quantize, kvjit_dtype dtype,
                                          kvjit_dtype cache_dtype, kvjit_scale_kind scale_kind, int64_t num_heads);

/** Every constant a compiled store_kv_cache kernel depends on, and its launch geometry. */
typedef struct kvjit_store_kv_plan {
  int arch;            /* compute capability it is built for */
  int64_t k_row_bytes;
  int64_t v_row_bytes; /* 0: K only */
  int split;           /* slices per row, resolved */
  int vec;             /* bytes per access: 16, 8, 4, 2 or 1 */
  int lanes;           /* lanes per slice group: power of two <= 32 */
  int block;           /* threads per block */
  int items;           /* items per lane group: 1, or 2 (plain copies, one access per lane) */
  int evict_first;     /* 1: cache stores carry an L2 evict-first policy (sm_80+) */
  int index64;         /* 1: int64 indices, 0: int32 */
  int pdl;             /* 1: PDL wait/trigger compiled in and the launch attribute set */
  int pdl_trigger_first; /* with pdl: dependents are let launch before this grid's own wait, not after it */
  /* Quantize on store (all 0 for a plain copy). vec and the row bytes count source bytes. */
  kvjit_dtype src_dtype;   /* F16, BF16, F32 */
  kvjit_dtype cache_dtype; /* FP8_E4M3, FP8_E5M2 */
  kvjit_scale_kind scale_kind;
  int64_t num_heads;       /* PER_HEAD only */
  int fp8_soft;            /* 1: integer conversion (before sm_89), 0: the cvt instruction */
  /* Cache layouts (all 0 with both views flat: today's kernel). */
  int layout;              /* 1: the layout kernel (kernel_src/store_kv_layout.cuh) */
  int v_vec;               /* layout kernel: V's bytes per access (vec is K's); 0 otherwise */
  kvjit_store_kv_plan_view k_view, v_view;
} kvjit_store_kv_plan;

/** What the automatic choice does for one batch class (the table lives in store_kv_plan.c). */
typedef struct kvjit_store_kv_class_rule {
  int64_t max_batch;           /* the class holds batches up to this (inclusive) */
  int chunks_per_lane;         /* target vector accesses per lane per row */
  int64_t pdl_min_row_bytes;   /* PDL_AUTO turns PDL on (sm_90+) when the wider row has at least this */
  int quant_max_vec;           /* quantizing: widest source access (bytes); shorter conversion chains per lane */
  int pair_max_lanes;          /* plain copies: two items per lane group when a slice needs at most this many
                                  lanes (and one access per lane); 0: never */
  int64_t evict_first_min_row; /* evict-first cache stores (sm_80+) when the wider row has at least this; -1: never */
  int pdl_trigger_first;       /* plain copies with PDL: trigger the dependents before the wait (1) or after (0) */
  int64_t narrow_max_row;      /* plain copies whose wider row has at most this many bytes ... */
  int narrow_max_vec;          /* ... take accesses of at most this many bytes (more lanes per row) */
  int whole_lane_groups;       /* plain copies, automatic split: prefer one whose slices fill their lane
                                  groups exactly (a power-of-two vector count per slice) */
} kvjit_store_kv_class_rule;

/** The rule of batch class @p batch_class (0 .. KVJIT_STORE_KV_CLASSES - 1). */
const kvjit_store_kv_class_rule *kvjit_store_kv_class_rule_get(int batch_class);

/** Batch class of a batch >= 1: the first class whose max_batch holds it. */
int kvjit_store_kv_batch_class(int64_t batch);

/**
 * The quantizing rules of a plan: rows of whole elements, the limits of the fast key, a head
 * count dividing both rows, a split that does not cut an element. Narrows @p vec (source bytes)
 * so that one access holds whole elements of one head; fails when that is less than an element.
 */
kvjit_status kvjit_store_kv_quant_check(const kvjit_store_kv_quant *q, int64_t k_row_bytes, int64_t v_row_bytes,
                                        int split, int *vec);

/** The static part of a canonical view (layout.h) as a plan holds it. */
void kvjit_store_kv_plan_view_of(const kvjit_view *view, kvjit_store_kv_plan_view *out);

/**
 * Resolve a plan. @p vec is what the pointers and strides allow (1..16, power of two); it is
 * narrowed to what the rows and slices allow. @p split 0 = automatic for @p batch_class. Quantizing
 * when @p quant is not NULL (from kvjit_store_kv_quant_resolve()): @p vec then counts source bytes
 * and must be at least one element; it is narrowed so that one access never straddles two heads.
 * Caches laid out as @p k_view and @p v_view (NULL or all 0: flat, the flat kernel): a view that
 * is not flat takes the layout kernel: K's accesses @p vec and V's @p v_vec (0: @p vec) wide at
 * most, narrowed so that one never crosses a contiguous run of its cache; one item per lane group;
 * at most 16 accesses per lane (KVJIT_ERR_UNSUPPORTED for a split that leaves more).
 * @return KVJIT_ERR_INVALID_ARGUMENT (row bytes, split, index type, pdl value, arch) or
 *         KVJIT_ERR_UNSUPPORTED (PDL on before sm_90), with the argument named.
 */
kvjit_status kvjit_store_kv_plan_make_layout(kvjit_store_kv_plan *out, int arch, int64_t k_row_bytes,
                                             int64_t v_row_bytes, int vec, int v_vec, kvjit_index_type index_type,
                                             kvjit_pdl_mode pdl, int split, int batch_class,
                                             const kvjit_store_kv_quant *quant, const kvjit_store_kv_plan_view *k_view,
                                             const kvjit_store_kv_plan_view *v_view);

/**
 * The name expression of a plan's kernel, e.g. "kvjit_store_kv<1024,1024,1,16,...>": the template's
 * arguments (kernel_src/store_kv_cache.cuh) in its order. Returns its length, or -1 when it does
 * not fit in @p capacity bytes.
 */
int kvjit_store_kv_kernel_name(const kvjit_store_kv_plan *plan, char *out, size_t capacity);

/** A plan's program: the embedded template and its kernel (KVJIT_ERR_INTERNAL if the name cannot fit). */
kvjit_status kvjit_store_kv_program(const kvjit_store_kv_plan *plan, kvjit_op_program *out);

#endif
