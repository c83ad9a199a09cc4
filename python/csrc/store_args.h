/*
 * Tensor shapes -> kvjit_store_kv_args: what the torch op (and any binding that reads tensors in
 * C) needs to turn k, v, the caches, the slot ids and the scales into one store call. The same
 * rules as the Python binding's build_args (python/kvjit/_store.py), so the op accepts exactly
 * the layouts kvjit.store_kv_cache() accepts and refuses the rest with the same messages.
 *
 * Pure arithmetic on sizes and strides: no torch, no driver; unit-tested in tests/.
 */
#ifndef KVJIT_TORCH_STORE_ARGS_H
#define KVJIT_TORCH_STORE_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "kvjit.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * What kvjit knows an element type as; the framework's own code rides along in ::code. Kinds
 * past KVJIT_TENSOR_I64 have no rule (a store refuses them) but a name, so that a refusal names
 * the type the same way whichever framework path it came through ("k: dtype i16 ...").
 */
typedef enum kvjit_tensor_kind {
  KVJIT_TENSOR_OTHER = 0, /**< a type kvjit cannot even name (compared by code only) */
  KVJIT_TENSOR_F16,
  KVJIT_TENSOR_BF16,
  KVJIT_TENSOR_F32,
  KVJIT_TENSOR_FP8_E4M3,
  KVJIT_TENSOR_FP8_E5M2,
  KVJIT_TENSOR_U8,
  KVJIT_TENSOR_I8,
  KVJIT_TENSOR_I32,
  KVJIT_TENSOR_I64,
  /* Named only: */
  KVJIT_TENSOR_F64,
  KVJIT_TENSOR_I16,
  KVJIT_TENSOR_U16,
  KVJIT_TENSOR_U32,
  KVJIT_TENSOR_U64,
  KVJIT_TENSOR_BOOL,
  KVJIT_TENSOR_C32,
  KVJIT_TENSOR_C64,
  KVJIT_TENSOR_C128,
  KVJIT_TENSOR_FP8_E4M3FNUZ,
  KVJIT_TENSOR_FP8_E5M2FNUZ,
  KVJIT_TENSOR_FP8_E8M0FNU,
  KVJIT_TENSOR_FP4_E2M1FN_X2,
  KVJIT_TENSOR_KIND_COUNT /**< not a kind: how many there are */
} kvjit_tensor_kind;

/** One tensor argument as the framework describes it (borrowed arrays; strides in elements). */
typedef struct kvjit_tensor_view {
  int present;            /**< 0: the argument is None */
  uintptr_t data;         /**< address of element [0, 0, ...] */
  int64_t ndim;
  const int64_t *sizes;
  const int64_t *strides;
  int64_t itemsize;       /**< bytes per element */
  kvjit_tensor_kind kind;
  int32_t code;           /**< the framework's dtype code: equal codes are equal types */
  int32_t device_type;    /**< the framework's device type code */
  int32_t device_index;
} kvjit_tensor_view;

/** A store request: the op's schema, argument by argument. */
typedef struct kvjit_store_request {
  kvjit_tensor_view k, v, k_cache, v_cache, indices, k_scale, v_scale;
  int64_t num_slots;   /**< -1: the caches' slots */
  int64_t skip_slot;   /**< -1: none */
  int64_t split;       /**< 0: automatic */
  int64_t pdl;         /**< a kvjit_pdl_mode */
  int64_t cache_dtype; /**< 0: the caches' own dtype; KVJIT_DTYPE_FP8_E4M3 / _E5M2 for byte caches */
  int64_t layout;      /**< a kvjit_store_layout_kind: how the caches' dims are read */
} kvjit_store_request;

/** store_kv_cache's layout= keyword: how the caches' dims are read where shape alone cannot tell. */
typedef enum kvjit_store_layout_kind {
  KVJIT_STORE_LAYOUT_AUTO = 0,      /**< from the shapes and strides (view_rules.h's FORM_AUTO) */
  KVJIT_STORE_LAYOUT_VLLM_PAGED = 1 /**< vLLM's older paged caches: K [blocks, H, D/x, block_size, x],
                                         V [blocks, H, D, block_size] */
} kvjit_store_layout_kind;

/** Where kvjit_store_request_args() puts the caches' layouts; the args point into it, so it
 *  must live as long as they are used. */
typedef struct kvjit_store_layouts {
  kvjit_layout k, v;
} kvjit_store_layouts;

/** Which Python exception class a refusal maps to. */
typedef enum kvjit_request_error {
  KVJIT_REQUEST_OK = 0,
  KVJIT_REQUEST_VALUE_ERROR = 1, /**< a shape, stride, range or pairing is wrong */
  KVJIT_REQUEST_TYPE_ERROR = 2   /**< a dtype is wrong */
} kvjit_request_error;

/**
 * Check @p req and fill @p args (stream left NULL: the caller sets it). A cache that is not flat
 * rows (vLLM's HND, FlashAttention or chunked caches, any strided view) gets a kvjit_layout in
 * @p layouts, which args->k_cache_layout / v_cache_layout point at. On refusal returns the error
 * class and writes a one-line message naming the argument into @p msg (NUL-terminated,
 * truncated to @p msg_size); @p args is then unspecified.
 */
kvjit_request_error kvjit_store_request_args(const kvjit_store_request *req, kvjit_store_kv_args *args,
                                             kvjit_store_layouts *layouts, char *msg, size_t msg_size);

/**
 * Check that every tensor of @p req is on @p device_type (the framework's code, called
 * @p device_name in the message: "k: must be a CUDA tensor, ..."), in argument order.
 */
kvjit_request_error kvjit_store_request_on_device(const kvjit_store_request *req, int32_t device_type,
                                                  const char *device_name, char *msg, size_t msg_size);

/** Short name of @p kind ("f16", "bf16", ..., "i16", "complex64", ...; "other"): the Python
 *  binding's names (python/kvjit/_tensor.py), so every path names a dtype alike. */
const char *kvjit_tensor_kind_name(kvjit_tensor_kind kind);

#ifdef __cplusplus
}
#endif

#endif
