/*
 * The rules both tensor requests share (store_args.c, transfer_args.c): refusals with a message
 * naming the argument, shapes in messages, dtype names, and a cache's slots and layout from its
 * shape and strides (kvjit_request_cache_view(): the one copy of how a framework's view of a
 * cache becomes kvjit's flat stride or kvjit_layout).
 */
#ifndef KVJIT_TORCH_VIEW_RULES_H
#define KVJIT_TORCH_VIEW_RULES_H

#include <stddef.h>
#include <stdint.h>

#include "kvjit.h"
#include "store_args.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Where a refusal's message goes (NULL / 0: nowhere, nothing formatted). */
typedef struct kvjit_request_msg {
  char *msg;
  size_t size;
} kvjit_request_msg;

/** Write the message (printf-style) and return @p kind. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
kvjit_request_error kvjit_request_refuse(kvjit_request_msg *e, kvjit_request_error kind, const char *fmt, ...);

/** "[4, 8, 128]" of @p n values into @p buf. */
const char *kvjit_request_dims(char *buf, size_t size, const int64_t *values, int64_t n);

/** A dtype's name for messages: kvjit_tensor_kind_name(), or "dtype #code" for one kvjit cannot name. */
typedef struct kvjit_dtype_text {
  char text[24];
} kvjit_dtype_text;
kvjit_dtype_text kvjit_request_dtype(const kvjit_tensor_view *t);

/** uint8 / int8: rows kvjit copies as bytes whatever the other side's dtype. */
int kvjit_tensor_kind_is_raw(kvjit_tensor_kind kind);

/** How a cache tensor's dims are read (shape alone cannot always tell; see kvjit_request_cache_view()). */
typedef enum kvjit_cache_form {
  KVJIT_CACHE_FORM_AUTO = 0,   /**< from the shape: [slots | pages, page_size, ...row dims] or the 5-D chunked K */
  KVJIT_CACHE_FORM_VLLM_K = 1, /**< vLLM's older paged K: [blocks, H, D/x, block_size, x] */
  KVJIT_CACHE_FORM_VLLM_V = 2, /**< vLLM's older paged V: [blocks, H, D, block_size] */
  KVJIT_CACHE_FORM_VIEW = 3     /**< 2..4 dims as AUTO, never the 5-D chunked K (transfer_kv's caches, e.g.
                                     SGLang's host layouts as per-layer views) */
} kvjit_cache_form;

/** A cache tensor as kvjit addresses it. */
typedef struct kvjit_cache_view {
  int64_t slots;        /**< slot ids 0 .. slots - 1 address it */
  int strided;          /**< 0: flat rows slot_stride bytes apart (no layout needed); 1: ::layout */
  int64_t slot_stride;  /**< bytes, when flat */
  int five_dims;        /**< read as the 5-D chunked K */
  kvjit_layout layout;  /**< when strided: slot and row dims, strides in bytes */
} kvjit_cache_view;

/**
 * A cache tensor @p t as slot dims and row dims, for rows of @p row_bytes (@p source names the
 * rows' tensor in messages). The dims:
 *   - AUTO, 2..4 dims: the row is the fewest trailing dims that hold @p row_bytes, the slot dims
 *     the rest: (slots), or (pages, page_size) when two slot dims do not flatten into one index
 *     (vLLM's HND and FlashAttention caches, passed as NHD-shaped views with permuted strides);
 *   - 5 dims (AUTO or VLLM_K): vLLM's older K [blocks, H, D/x, block_size, x]: slots (blocks,
 *     block_size), row (H, D/x, x);
 *   - VLLM_V, 4 dims: vLLM's older V [blocks, H, D, block_size]: slots (blocks, block_size), row
 *     (H, D). (A 4-D shape is NHD under AUTO: shape alone cannot tell the two apart.)
 * Any positive strides. A cache whose slots flatten and whose row is contiguous stays flat
 * (today's k_cache_stride; no layout); anything else fills a kvjit_layout (strides in bytes) that
 * the library validates, overlap included. Refused here: the dims not making one row, a stride
 * of 0 or below on a dim of more than one element (a broadcast view: rows would share bytes), no
 * slots, slot dims that are neither (slots) nor (pages, page_size), a flat slot stride shorter
 * than the row.
 */
kvjit_request_error kvjit_request_cache_view(kvjit_request_msg *e, const char *name, const kvjit_tensor_view *t,
                                             int64_t row_bytes, const char *source, kvjit_cache_form form,
                                             kvjit_cache_view *out);

/**
 * An fp32 scale tensor (a store's or a transfer's k_scale / v_scale): contiguous, 4-byte aligned,
 * not empty; its pointer and element count. Where it lives is the caller's check.
 */
kvjit_request_error kvjit_request_scale(kvjit_request_msg *e, const char *name, const kvjit_tensor_view *t,
                                        const float **ptr, int64_t *count);

#ifdef __cplusplus
}
#endif

#endif
