/* The rules both tensor requests share: messages, dtype names, a cache's slots. */
#include "view_rules.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

/* Which dims of a cache are its slot dims (outermost first) and which its row dims. */
typedef struct cache_dims {
  int slot[3], row[3];
  int num_slot, num_row;
} cache_dims;

static kvjit_request_error dims_of(kvjit_request_msg *e, const char *name, const kvjit_tensor_view *t,
                                   int64_t row_bytes, const char *source, kvjit_cache_form form, cache_dims *d) {
  char a[96];
  const int64_t *s = t->sizes;
  int64_t n = t->ndim;
  static const cache_dims chunked_k = {{0, 3, 0}, {1, 2, 4}, 2, 3}, paged_v = {{0, 3, 0}, {1, 2, 0}, 2, 2};
  if (form == KVJIT_CACHE_FORM_VLLM_V) {
    if (n != 4)
      return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: layout='vllm_paged' reads it as vLLM's [blocks, H, D, "
                    "block_size], got shape %s", name, dims(a, sizeof a, s, n));
    *d = paged_v;
  } else if (n == 5 && (form == KVJIT_CACHE_FORM_AUTO || form == KVJIT_CACHE_FORM_VLLM_K)) {
    *d = chunked_k;
  } else if (form == KVJIT_CACHE_FORM_VLLM_K) {
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: layout='vllm_paged' reads it as vLLM's [blocks, H, D/x, "
                  "block_size, x], got shape %s", name, dims(a, sizeof a, s, n));
  } else if (n < 2 || n > 4) {
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: expected [slots, H, D], [slots, H*D], [pages, page_size, H, D] "
                  "(any strides)%s, got shape %s", name, form != KVJIT_CACHE_FORM_AUTO ? "" :
                  " or vLLM's [blocks, H, D/x, block_size, x]", dims(a, sizeof a, s, n));
  } else {
    /* The row: the fewest trailing dims that hold row_bytes (at most three: n <= 4). */
    int64_t i = n, elems = 1;
    while (i > 1) {
      i--;
      elems *= s[i];
      if (elems * t->itemsize >= row_bytes) break;
    }
    d->num_slot = d->num_row = 0;
    for (int j = 0; j < i; j++) d->slot[d->num_slot++] = j;
    for (int j = (int)i; j < n; j++) d->row[d->num_row++] = j;
  }
  int64_t elems = 1;
  for (int j = 0; j < d->num_row; j++) elems *= s[d->row[j]];
  if (elems * t->itemsize != row_bytes)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: no trailing dims of shape %s (%s) make one row of %lld bytes "
                  "(one %s row)", name, dims(a, sizeof a, s, n), kvjit_request_dtype(t).text, (long long)row_bytes,
                  source);
  return KVJIT_REQUEST_OK;
}

/* The largest stride a layout can hold in bytes (16-byte elements). */
#define MAX_STRIDE (INT64_MAX / 16)

kvjit_request_error kvjit_request_cache_view(kvjit_request_msg *e, const char *name, const kvjit_tensor_view *t,
                                             int64_t row_bytes, const char *source, kvjit_cache_form form,
                                             kvjit_cache_view *out) {
  char a[96], b[96];
  const int64_t *s = t->sizes, *st = t->strides;
  int64_t n = t->ndim, eb = t->itemsize;
  cache_dims d = {{0}, {0}, 0, 0};
  kvjit_request_error r = dims_of(e, name, t, row_bytes, source, form, &d);
  if (r) return r;
  for (int64_t j = 0; j < n; j++)
    if (s[j] > 1 && (st[j] <= 0 || st[j] > MAX_STRIDE))
      return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: dim %lld (size %lld) has stride %lld: a broadcast or reversed "
                    "view, whose rows would share bytes (shape %s, strides %s)", name, (long long)j, (long long)s[j],
                    (long long)st[j], dims(a, sizeof a, s, n), dims(b, sizeof b, st, n));
  out->five_dims = d.num_row == 3 && n == 5;
  out->strided = 0;
  out->slot_stride = 0;
  /* Slot dims: flat when those over one element flatten into one index, else (pages, page_size). */
  int big[3], num_big = 0;
  int64_t slots = 1;
  for (int j = 0; j < d.num_slot; j++) {
    slots *= s[d.slot[j]];
    if (s[d.slot[j]] > 1) big[num_big++] = d.slot[j];
  }
  if (slots == 0) return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: no slots (shape %s)", name, dims(a, sizeof a, s, n));
  int flat = 1;
  for (int j = 0; j + 1 < num_big; j++) {
    int64_t span;
    if (__builtin_mul_overflow(st[big[j + 1]], s[big[j + 1]], &span) || st[big[j]] != span) flat = 0;
  }
  if (!flat && num_big != 2) {
    int64_t slot_dims_ext[3], slot_dims_str[3];
    for (int j = 0; j < d.num_slot; j++) {
      slot_dims_ext[j] = s[d.slot[j]];
      slot_dims_str[j] = st[d.slot[j]];
    }
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: the slot dims %s (strides %s) do not flatten into one slot index "
                  "nor make (pages, page_size)", name, dims(a, sizeof a, slot_dims_ext, d.num_slot),
                  dims(b, sizeof b, slot_dims_str, d.num_slot));
  }
  /* Row dims: contiguous when those over one element are row-major with unit innermost stride. */
  int64_t elems = 1, packed = 1;
  int contiguous = 1;
  for (int j = d.num_row - 1; j >= 0; j--) {
    int64_t k = d.row[j];
    if (s[k] != 1 && st[k] != packed) contiguous = 0;
    packed *= s[k];
    elems *= s[k];
  }
  int64_t slot_stride = num_big ? st[big[num_big - 1]] : elems;
  out->slots = slots;
  if (flat && contiguous) {
    if (slots > 1 && slot_stride < elems)
      return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: slot stride %lld elements is less than a row (%lld); slots "
                    "may not overlap", name, (long long)slot_stride, (long long)elems);
    out->slot_stride = slot_stride * eb;
    return KVJIT_REQUEST_OK;
  }
  /* A strided view: the library checks it (overlap included) and specializes on its static part. */
  kvjit_layout *l = &out->layout;
  memset(l, 0, sizeof *l); /* the row dims past num_row_dims included */
  l->version = KVJIT_LAYOUT_VERSION;
  l->element_bytes = eb;
  l->num_row_dims = d.num_row;
  int64_t inner = eb; /* an extent-1 dim's stride is free in torch: give it the packed one */
  for (int j = d.num_row - 1; j >= 0; j--) {
    int64_t k = d.row[j];
    l->row_extents[j] = s[k];
    l->row_strides[j] = s[k] > 1 ? st[k] * eb : inner;
    inner = l->row_strides[j] * s[k];
  }
  if (flat) {
    l->page_size = 0;
    l->page_stride = 0;
    l->slot_stride = num_big ? slot_stride * eb : inner;
  } else {
    l->page_size = s[big[1]];
    l->page_stride = st[big[0]] * eb;
    l->slot_stride = st[big[1]] * eb;
  }
  out->strided = 1;
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
