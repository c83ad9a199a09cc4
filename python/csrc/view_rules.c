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

/* Which dims of a cache are its slot dims: bit j for dim j. The others are its row dims (every
 * form splits all of a cache's dims between the two). */
typedef unsigned slot_mask;

static kvjit_request_error slot_dims_of(kvjit_request_msg *e, const char *name, const kvjit_tensor_view *t,
                                        int64_t row_bytes, kvjit_cache_form form, slot_mask *out) {
  char a[96];
  const int64_t *s = t->sizes;
  int64_t n = t->ndim;
  static const slot_mask blocks_and_block_size = 1u << 0 | 1u << 3; /* vLLM's two paged forms */
  if (form == KVJIT_CACHE_FORM_VLLM_V) {
    if (n != 4)
      return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: layout='vllm_paged' reads it as vLLM's [blocks, H, D, "
                    "block_size], got shape %s", name, dims(a, sizeof a, s, n));
    *out = blocks_and_block_size; /* rows (H, D) */
  } else if (n == 5 && (form == KVJIT_CACHE_FORM_AUTO || form == KVJIT_CACHE_FORM_VLLM_K)) {
    *out = blocks_and_block_size; /* rows (H, D/x, x) */
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
    *out = (1u << i) - 1;
  }
  return KVJIT_REQUEST_OK;
}

/* The largest stride a layout can hold in bytes (16-byte elements). */
#define MAX_STRIDE (INT64_MAX / 16)

/* The sizes and strides of @p mask's dims (or, with @p invert, the other dims), outermost first. */
static int pick_dims(const kvjit_tensor_view *t, slot_mask mask, int invert, int64_t *sizes, int64_t *strides,
                     int *index) {
  int k = 0;
  for (int j = 0; j < t->ndim; j++) {
    if (((mask >> j) & 1) == (unsigned)invert) continue;
    if (sizes) sizes[k] = t->sizes[j];
    if (strides) strides[k] = t->strides[j];
    if (index) index[k] = j;
    k++;
  }
  return k;
}

kvjit_request_error kvjit_request_cache_view(kvjit_request_msg *e, const char *name, const kvjit_tensor_view *t,
                                             int64_t row_bytes, const char *source, kvjit_cache_form form,
                                             kvjit_cache_view *out) {
  char a[96], b[96];
  const int64_t *s = t->sizes, *st = t->strides;
  int64_t n = t->ndim, eb = t->itemsize;
  slot_mask mask = 0;
  kvjit_request_error r = slot_dims_of(e, name, t, row_bytes, form, &mask);
  if (r) return r;
  /* One pass, innermost dim first: the row's elements and whether it is packed row-major (dims
   * of one element aside), the slots and the slot dims of more than one element (innermost
   * first), and the outermost dim whose stride no view of kvjit's may have. */
  int64_t row = 1, slots = 1;
  int contiguous = 1, bad = -1, big[3], num_big = 0;
  for (int64_t j = n - 1; j >= 0; j--) {
    if (s[j] > 1 && (st[j] <= 0 || st[j] > MAX_STRIDE)) bad = (int)j;
    if ((mask >> j) & 1) {
      slots *= s[j];
      if (s[j] > 1) big[num_big++] = (int)j;
    } else {
      if (s[j] != 1 && st[j] != row) contiguous = 0;
      row *= s[j];
    }
  }
  if (row * eb != row_bytes)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: no trailing dims of shape %s (%s) make one row of %lld bytes "
                  "(one %s row)", name, dims(a, sizeof a, s, n), kvjit_request_dtype(t).text, (long long)row_bytes,
                  source);
  if (bad >= 0)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: dim %d (size %lld) has stride %lld: a broadcast or reversed "
                  "view, whose rows would share bytes (shape %s, strides %s)", name, bad, (long long)s[bad],
                  (long long)st[bad], dims(a, sizeof a, s, n), dims(b, sizeof b, st, n));
  out->five_dims = n == 5; /* only the chunked K has five */
  out->strided = 0;
  out->slot_stride = 0;
  if (slots == 0) return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: no slots (shape %s)", name, dims(a, sizeof a, s, n));
  /* Slot dims: flat when those over one element flatten into one index, else (pages, page_size). */
  int flat = 1;
  for (int k = 0; k + 1 < num_big; k++) {
    int64_t span;
    if (__builtin_mul_overflow(st[big[k]], s[big[k]], &span) || st[big[k + 1]] != span) flat = 0;
  }
  if (!flat && num_big != 2) {
    int64_t slot_sizes[3], slot_strides[3];
    int num_slot = pick_dims(t, mask, 0, slot_sizes, slot_strides, NULL);
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: the slot dims %s (strides %s) do not flatten into one slot index "
                  "nor make (pages, page_size)", name, dims(a, sizeof a, slot_sizes, num_slot),
                  dims(b, sizeof b, slot_strides, num_slot));
  }
  int64_t slot_stride = num_big ? st[big[0]] : row;
  out->slots = slots;
  if (flat && contiguous) {
    if (slots > 1 && slot_stride < row)
      return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: slot stride %lld elements is less than a row (%lld); slots "
                    "may not overlap", name, (long long)slot_stride, (long long)row);
    out->slot_stride = slot_stride * eb;
    return KVJIT_REQUEST_OK;
  }
  /* A strided view: the library checks it (overlap included) and specializes on its static part. */
  int row_dims[3];
  int num_row = pick_dims(t, mask, 1, NULL, NULL, row_dims);
  kvjit_layout *l = &out->layout;
  memset(l, 0, sizeof *l); /* the row dims past num_row_dims included */
  l->version = KVJIT_LAYOUT_VERSION;
  l->element_bytes = eb;
  l->num_row_dims = num_row;
  int64_t inner = eb; /* an extent-1 dim's stride is free in torch: give it the packed one */
  for (int j = num_row - 1; j >= 0; j--) {
    int64_t k = row_dims[j];
    l->row_extents[j] = s[k];
    l->row_strides[j] = s[k] > 1 ? st[k] * eb : inner;
    inner = l->row_strides[j] * s[k];
  }
  if (flat) {
    l->page_size = 0;
    l->page_stride = 0;
    l->slot_stride = num_big ? slot_stride * eb : inner;
  } else { /* big[1], big[0]: pages, page_size */
    l->page_size = s[big[0]];
    l->page_stride = st[big[1]] * eb;
    l->slot_stride = st[big[0]] * eb;
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
