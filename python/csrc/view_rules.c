/* The rules both tensor requests share: messages, dtype names, a cache's slots. */
#include "view_rules.h"

#include <stdarg.h>
#include <stdio.h>

kvjit_request_error kvjit_request_refuse(kvjit_request_msg *e, kvjit_request_error kind, const char *fmt, ...) {
  if (e->size > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, e->size, fmt, ap);
    va_end(ap);
  }
  return kind;
}

const char *kvjit_request_dims(char *buf, size_t size, const int64_t *values, int64_t n) {
  size_t used = 0;
  buf[0] = '\0';
  used += (size_t)snprintf(buf, size, "[");
  for (int64_t i = 0; i < n && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, i ? ", %lld" : "%lld", (long long)values[i]);
  if (used < size) snprintf(buf + used, size - used, "]");
  return buf;
}

kvjit_dtype_text kvjit_request_dtype(const kvjit_tensor_view *t) {
  kvjit_dtype_text d;
  if (t->kind == KVJIT_TENSOR_OTHER)
    snprintf(d.text, sizeof d.text, "dtype #%d", (int)t->code);
  else
    snprintf(d.text, sizeof d.text, "%s", kvjit_tensor_kind_name(t->kind));
  return d;
}

int kvjit_tensor_kind_is_raw(kvjit_tensor_kind kind) { return kind == KVJIT_TENSOR_U8 || kind == KVJIT_TENSOR_I8; }

#define refuse kvjit_request_refuse
#define dims kvjit_request_dims

kvjit_request_error kvjit_request_cache_slots(kvjit_request_msg *e, const char *name, const kvjit_tensor_view *t,
                                              int64_t row_bytes, const char *source, int64_t *slots_out,
                                              int64_t *stride_bytes) {
  char a[96], b[96];
  const int64_t *s = t->sizes, *st = t->strides;
  int64_t n = t->ndim;
  if (n < 2 || n > 4)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: expected [slots, H, D], [slots, H*D] or [pages, page_size, H, "
                  "D], got shape %s", name, dims(a, sizeof a, s, n));
  /* The row: the fewest trailing dims that hold row_bytes. */
  int64_t i = n, elems = 1;
  while (i > 1) {
    i--;
    elems *= s[i];
    if (elems * t->itemsize >= row_bytes) break;
  }
  if (elems * t->itemsize != row_bytes)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: no trailing dims of shape %s (%s) make one row of %lld bytes "
                  "(one %s row)", name, dims(a, sizeof a, s, n), kvjit_request_dtype(t).text, (long long)row_bytes,
                  source);
  int64_t expected = 1;
  for (int64_t j = n - 1; j >= i; j--) {
    if (s[j] != 1 && st[j] != expected)
      return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: each slot's row (shape %s) must be contiguous, got strides %s",
                    name, dims(a, sizeof a, s + i, n - i), dims(b, sizeof b, st + i, n - i));
    expected *= s[j];
  }
  /* The slot dims must flatten into one index with one stride. */
  int64_t slots = 1, slot_stride = -1;
  for (int64_t j = i - 1; j >= 0; j--) {
    slots *= s[j];
    if (s[j] == 1) continue;
    if (slot_stride < 0) {
      slot_stride = st[j];
      expected = slot_stride * s[j];
    } else if (st[j] != expected) {
      return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: the slot dims %s (strides %s) do not flatten into one slot "
                    "index", name, dims(a, sizeof a, s, i), dims(b, sizeof b, st, i));
    } else {
      expected *= s[j];
    }
  }
  if (slots == 0)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: no slots (shape %s)", name, dims(a, sizeof a, s, n));
  if (slot_stride < 0) slot_stride = elems;
  if (slots > 1 && slot_stride < elems)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: slot stride %lld elements is less than a row (%lld); slots "
                  "may not overlap", name, (long long)slot_stride, (long long)elems);
  *slots_out = slots;
  *stride_bytes = slot_stride * t->itemsize;
  return KVJIT_REQUEST_OK;
}

kvjit_request_error kvjit_request_scale(kvjit_request_msg *e, const char *name, const kvjit_tensor_view *t,
                                        const float **ptr, int64_t *count) {
  char a[96], b[96];
  if (t->kind != KVJIT_TENSOR_F32)
    return kvjit_request_refuse(e, KVJIT_REQUEST_TYPE_ERROR, "%s: dtype must be float32, got %s", name,
                                kvjit_request_dtype(t).text);
  int64_t n = 1;
  for (int64_t i = 0; i < t->ndim; i++) n *= t->sizes[i];
  if (n == 0) return kvjit_request_refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: empty", name);
  int64_t expected = 1;
  for (int64_t i = t->ndim - 1; i >= 0; i--) {
    if (t->sizes[i] != 1 && t->strides[i] != expected)
      return kvjit_request_refuse(e, KVJIT_REQUEST_VALUE_ERROR,
                                  "%s: the %lld scales must be contiguous (shape %s, strides %s)", name, (long long)n,
                                  kvjit_request_dims(a, sizeof a, t->sizes, t->ndim),
                                  kvjit_request_dims(b, sizeof b, t->strides, t->ndim));
    expected *= t->sizes[i];
  }
  if (t->data % 4)
    return kvjit_request_refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: pointer %#llx is not 4-byte aligned", name,
                                (unsigned long long)t->data);
  *ptr = (const float *)t->data;
  *count = n;
  return KVJIT_REQUEST_OK;
}
