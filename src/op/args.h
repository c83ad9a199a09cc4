/*
 * What every op's call validation checks the same way (the ops' *_args.c): row sizes, K-only
 * calls, strides, and byte offsets that must fit in 64 bits. Inline: this is the hot path.
 */
#ifndef KVJIT_OPS_ARGS_H
#define KVJIT_OPS_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* a * b + c <= INT64_MAX for a, b, c >= 0: the last byte a kernel forms from a count, a stride and
 * a row. */
static inline int kvjit_args_extent_fits(int64_t a, int64_t b, int64_t c) {
  int64_t prod, sum;
  return !__builtin_mul_overflow(a, b, &prod) && !__builtin_add_overflow(prod, c, &sum);
}

/* Zero @p count words with plain stores. A memset (or a zeroing loop) of a few dozen bytes in
 * the ops' validation is expanded by GCC as `rep stos`, whose start-up alone (~10 ns on the Xeon
 * measured) was half of a flat call's host work (bench_prelaunch): unrolled, the stores merge
 * into 16-byte ones. @p count: a constant. */
static inline void kvjit_args_zero(int64_t *words, size_t count) {
#pragma GCC unroll 32
  for (size_t i = 0; i < count; i++) words[i] = 0;
}

/* A stride in bytes: 0 means rows packed (@p row), else at least a row. */
static inline kvjit_status kvjit_args_stride(const char *name, int64_t *stride, int64_t row, const char *row_name) {
  if (*stride == 0) {
    *stride = row;
    return KVJIT_OK;
  }
  if (*stride < row) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: must be 0 (= %s) or >= %s %lld, got %lld", name, row_name,
                      row_name, (long long)row, (long long)*stride);
  }
  return KVJIT_OK;
}

/*
 * The rows of a call: k_row_bytes in 1..@p max; the two V pointers @p v_a and @p v_b (named
 * @p name_a and @p name_b) both NULL (K only, which the error calls @p k_only) or both set; then
 * v_row_bytes 0 (= k_row_bytes) or 1..@p max. @p v_row: the V row's bytes, 0 for K only.
 */
static inline kvjit_status kvjit_args_rows(int64_t k_row_bytes, int64_t v_row_bytes, const void *v_a, const char *name_a,
                                           const void *v_b, const char *name_b, const char *k_only, int64_t max,
                                           int64_t *v_row) {
  if (k_row_bytes <= 0 || k_row_bytes > max) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "k_row_bytes: must be 1..%lld, got %lld", (long long)max,
                      (long long)k_row_bytes);
  }
  if ((v_a == NULL) != (v_b == NULL)) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s, %s: both NULL (%s) or both set, got %s=%p %s=%p", name_a,
                      name_b, k_only, name_a, v_a, name_b, v_b);
  }
  *v_row = 0;
  if (v_a == NULL) return KVJIT_OK;
  if (v_row_bytes < 0 || v_row_bytes > max) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "v_row_bytes: must be 0 (= k_row_bytes) or 1..%lld, got %lld",
                      (long long)max, (long long)v_row_bytes);
  }
  *v_row = v_row_bytes ? v_row_bytes : k_row_bytes;
  return KVJIT_OK;
}

#endif
