/* Rows as vectors, the rules every op plans its lanes by (rows.h). */
#include "rows.h"

#include "status.h"

static int64_t gcd64(int64_t a, int64_t b) {
  while (b != 0) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

int kvjit_rows_auto_split(int64_t k_row_bytes, int64_t v_row_bytes, int vec, int chunks_per_lane) {
  /* In vectors: a split s is valid when it divides both chunk counts. */
  int64_t k_chunks = k_row_bytes / vec;
  int64_t v_chunks = v_row_bytes / vec;
  int64_t both = v_chunks > 0 ? gcd64(k_chunks, v_chunks) : k_chunks;
  int64_t widest = k_chunks > v_chunks ? k_chunks : v_chunks;
  int64_t per_slice = 32 * (int64_t)chunks_per_lane;
  int64_t wanted = (widest + per_slice - 1) / per_slice;
  if (wanted <= 1 || both <= 1) return 1;
  int64_t limit = both < KVJIT_ROWS_MAX_SPLIT ? both : KVJIT_ROWS_MAX_SPLIT;
  /* Rows are almost always powers of two times a small odd number: the first try hits. The loops
   * are bounded by the max split either way. */
  for (int64_t s = wanted; s <= limit; s++) {
    if (both % s == 0) return (int)s;
  }
  for (int64_t s = wanted < limit ? wanted : limit; s > 1; s--) {
    if (both % s == 0) return (int)s;
  }
  return 1;
}

static int is_pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

int kvjit_rows_whole_split(int64_t k_row_bytes, int64_t v_row_bytes, int vec, int chunks_per_lane) {
  /* On every decode-sized call: shifts and bit counts, no division. */
  if (k_row_bytes <= 0 || v_row_bytes < 0 || !is_pow2(vec) || chunks_per_lane < 1 ||
      ((uint64_t)(k_row_bytes | v_row_bytes) & (uint64_t)(vec - 1)) != 0) {
    return 0;
  }
  const int vec_shift = __builtin_ctz((unsigned)vec);
  const uint64_t k = (uint64_t)k_row_bytes >> vec_shift, v = (uint64_t)v_row_bytes >> vec_shift;
  /* The slice: the largest power of two of vectors dividing K's count, at most 32 x chunks_per_lane
   * (the fewest slices). A smaller one cannot help V: halving the slice halves V's share too. */
  const int k_twos = __builtin_ctzll(k);
  const int cap = 63 - __builtin_clzll(32ull * (uint64_t)chunks_per_lane);
  const int slice_shift = k_twos < cap ? k_twos : cap;
  const uint64_t split = k >> slice_shift;
  if (split > (uint64_t)KVJIT_ROWS_MAX_SPLIT) return 0;
  if (v == 0) return (int)split;
  /* V's share, v / split, is a whole power of two when both counts have the same odd part and V
   * has at least as many factors of two as the split. */
  const int v_twos = __builtin_ctzll(v);
  if ((k >> k_twos) != (v >> v_twos) || v_twos < k_twos - slice_shift) return 0;
  return (int)split;
}

int kvjit_rows_lanes(int64_t slice_chunks, int chunks_per_lane) {
  int64_t need = (slice_chunks + chunks_per_lane - 1) / chunks_per_lane;
  int lanes = 1;
  while (lanes < 32 && lanes < need) lanes <<= 1;
  return lanes;
}

kvjit_status kvjit_rows_split_given(int64_t k_row_bytes, int64_t v_row_bytes, int split, int *vec) {
  if (k_row_bytes % split != 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "split: %d does not divide k_row_bytes %lld", split,
                      (long long)k_row_bytes);
  }
  if (v_row_bytes % split != 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "split: %d does not divide v_row_bytes %lld", split,
                      (long long)v_row_bytes);
  }
  *vec = kvjit_rows_vec_of((uint64_t)*vec | (uint64_t)(k_row_bytes / split) | (uint64_t)(v_row_bytes / split));
  return KVJIT_OK;
}
