/* DLPack tensors -> kvjit_tensor_view, every size checked before it is used. */
#include "dlpack_view.h"

#include <stdio.h>
#include <string.h>

/* By DLPack type code (kDLInt 0 .. kDLFloat8_e8m0fnu 14) and element width (8, 16, 32, 64, 128
 * bits): kvjit's kind, 0 (KVJIT_TENSOR_OTHER) for a pair it cannot name. Types past I64 have no
 * rule but a name (kDLComplex 5, kDLBool 6, the fnuz / e8m0 float8s 11, 13, 14). */
static const uint8_t kKindByCodeBits[15][5] = {
    [0] = {KVJIT_TENSOR_I8, KVJIT_TENSOR_I16, KVJIT_TENSOR_I32, KVJIT_TENSOR_I64, 0},
    [1] = {KVJIT_TENSOR_U8, KVJIT_TENSOR_U16, KVJIT_TENSOR_U32, KVJIT_TENSOR_U64, 0},
    [2] = {0, KVJIT_TENSOR_F16, KVJIT_TENSOR_F32, KVJIT_TENSOR_F64, 0},
    [4] = {0, KVJIT_TENSOR_BF16, 0, 0, 0},
    [5] = {0, 0, KVJIT_TENSOR_C32, KVJIT_TENSOR_C64, KVJIT_TENSOR_C128},
    [6] = {KVJIT_TENSOR_BOOL, 0, 0, 0, 0},
    [10] = {KVJIT_TENSOR_FP8_E4M3, 0, 0, 0, 0},
    [11] = {KVJIT_TENSOR_FP8_E4M3FNUZ, 0, 0, 0, 0},
    [12] = {KVJIT_TENSOR_FP8_E5M2, 0, 0, 0, 0},
    [13] = {KVJIT_TENSOR_FP8_E5M2FNUZ, 0, 0, 0, 0},
    [14] = {KVJIT_TENSOR_FP8_E8M0FNU, 0, 0, 0, 0},
};

/* A lane width's column in kKindByCodeBits plus one (8 .. 128 bits, powers of two), else 0. */
static const uint8_t kColumnOfBits[256] = {[8] = 1, [16] = 2, [32] = 3, [64] = 4, [128] = 5};

kvjit_tensor_kind kvjit_dl_kind(kvjit_dl_dtype t) {
  unsigned column = kColumnOfBits[t.bits];
  if (t.lanes == 1 && t.code < 15 && column) return (kvjit_tensor_kind)kKindByCodeBits[t.code][column - 1];
  /* torch's float4_e2m1fn_x2 goes out as two 4-bit lanes (kDLFloat4_e2m1fn 17). */
  if (t.code == 17 && t.bits == 4 && t.lanes == 2) return KVJIT_TENSOR_FP4_E2M1FN_X2;
  return KVJIT_TENSOR_OTHER;
}

/* Any byte extent the layout rules compute stays below 2^62: they multiply sizes, strides and
 * the element size freely after this check. */
static const int64_t kMaxBytes = INT64_C(1) << 62;

int kvjit_view_check_extent(kvjit_tensor_view *v, const char *name, char *msg, size_t msg_size) {
  int64_t numel = 1, span = 0;
  if (v->itemsize <= 0 || v->itemsize > 64) {
    snprintf(msg, msg_size, "%s: element size %lld bytes is not supported", name, (long long)v->itemsize);
    return -1;
  }
  for (int64_t i = 0; i < v->ndim; i++) {
    int64_t size = v->sizes[i], stride = v->strides[i], step;
    if (size < 0) {
      snprintf(msg, msg_size, "%s: dim %lld has a negative size (%lld)", name, (long long)i, (long long)size);
      return -1;
    }
    if (stride < -kMaxBytes || stride > kMaxBytes || __builtin_mul_overflow(stride < 0 ? -stride : stride,
                                                                             v->itemsize, &step) ||
        step > kMaxBytes) {
      snprintf(msg, msg_size, "%s: stride %lld of dim %lld is too large (a byte step must stay below 2^62)", name,
               (long long)stride, (long long)i);
      return -1;
    }
    if (size == 0) {
      numel = 0;
      continue;
    }
    if (__builtin_mul_overflow(numel, size, &numel) || numel > kMaxBytes ||
        __builtin_mul_overflow(step, size - 1, &step) || __builtin_add_overflow(span, step, &span) ||
        span > kMaxBytes) {
      snprintf(msg, msg_size, "%s: shape of dim %lld (%lld) makes the tensor larger than 2^62 bytes", name,
               (long long)i, (long long)size);
      return -1;
    }
  }
  int64_t bytes;
  if (__builtin_mul_overflow(numel, v->itemsize, &bytes) || bytes > kMaxBytes) {
    snprintf(msg, msg_size, "%s: %lld elements make the tensor larger than 2^62 bytes", name, (long long)numel);
    return -1;
  }
  return 0;
}

/* The sizes and strides of a producer kvjit does not trust, copied into @p out and checked (out of
 * line: the trusted path stays a few loads and stores). */
__attribute__((noinline)) static int copy_checked(const kvjit_dl_tensor *t, const char *name,
                                                  kvjit_tensor_view *v, kvjit_dl_dims *out, char *msg,
                                                  size_t msg_size) {
  memcpy(out->sizes, t->shape, (size_t)t->ndim * sizeof out->sizes[0]);
  for (int i = 0; i < t->ndim; i++) {
    if (out->sizes[i] < 0) {
      snprintf(msg, msg_size, "%s: DLPack shape has a negative size (%lld)", name, (long long)out->sizes[i]);
      return -1;
    }
  }
  if (t->strides) {
    memcpy(out->strides, t->strides, (size_t)t->ndim * sizeof out->strides[0]);
  } else {
    int64_t step = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
      out->strides[i] = step;
      if (out->sizes[i] > 1 && __builtin_mul_overflow(step, out->sizes[i], &step)) step = INT64_MAX;
    }
  }
  v->sizes = out->sizes;
  v->strides = out->strides;
  if (kvjit_view_check_extent(v, name, msg, msg_size)) return -1;
  uintptr_t data = (uintptr_t)t->data;
  if (t->byte_offset > (uint64_t)kMaxBytes || data + (uintptr_t)t->byte_offset < data) {
    snprintf(msg, msg_size, "%s: DLPack byte_offset %llu overflows the data pointer", name,
             (unsigned long long)t->byte_offset);
    return -1;
  }
  v->data = data + (uintptr_t)t->byte_offset;
  return 0;
}

int kvjit_dl_view(const kvjit_dl_tensor *t, const char *name, int trusted, kvjit_tensor_view *v,
                  kvjit_dl_dims *dims, char *msg, size_t msg_size) {
  if (t == NULL) {
    memset(v, 0, sizeof *v);
    return 0;
  }
  if (trusted && kvjit_dl_view_borrowed(t, v)) return 0;
  if (t->ndim < 0 || t->ndim > KVJIT_DL_MAX_DIMS) {
    snprintf(msg, msg_size, "%s: DLPack ndim %d is outside 0..%d", name, (int)t->ndim, KVJIT_DL_MAX_DIMS);
    return -1;
  }
  if (t->ndim > 0 && t->shape == NULL) {
    snprintf(msg, msg_size, "%s: DLPack shape is NULL for %d dims", name, (int)t->ndim);
    return -1;
  }
  kvjit_dl_view_fields(t, v); /* every field is set (no memset: a call reads five of these) */
  return copy_checked(t, name, v, dims, msg, msg_size);
}
