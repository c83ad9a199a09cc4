/*
 * The rules both tensor requests share (store_args.c, transfer_args.c): refusals with a message
 * naming the argument, shapes in messages, dtype names, and a cache's slots and slot stride
 * from its shape and strides. The same rules as the Python binding's (python/kvjit/_store.py's
 * _cache_slots), with the same messages.
 */
#ifndef KVJIT_TORCH_VIEW_RULES_H
#define KVJIT_TORCH_VIEW_RULES_H

#include <stddef.h>
#include <stdint.h>

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

/**
 * The slots of a cache whose trailing dims make one row of @p row_bytes and whose leading dims
 * flatten into one slot index ([slots, H, D], [slots, H*D], [pages, page_size, H(, D)]): the
 * slot count and the slot stride in bytes. @p source names the rows' tensor in messages.
 */
kvjit_request_error kvjit_request_cache_slots(kvjit_request_msg *e, const char *name, const kvjit_tensor_view *t,
                                              int64_t row_bytes, const char *source, int64_t *slots_out,
                                              int64_t *stride_bytes);

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
