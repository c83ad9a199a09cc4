/*
 * Rows as vectors: what every op that moves K/V rows plans the same way (the vector width the
 * addresses allow, the split of a row into slices, the lanes of a slice). Pure functions.
 */
#ifndef KVJIT_ROWS_H
#define KVJIT_ROWS_H

#include <stdint.h>

#include "kvjit.h"

/** Largest split of a row into slices (a plan's constants and request keys hold 21 bits). */
#define KVJIT_ROWS_MAX_SPLIT (1 << 20)

/** Largest power of two <= 16 dividing @p bits (the OR of every address, stride and size); 16 for 0. */
static inline int kvjit_rows_vec_of(uint64_t bits) {
  bits |= 16;
  return (int)(bits & (~bits + 1));
}

/**
 * The automatic split: the smallest s dividing both rows into whole vectors with at most
 * 32 lanes x chunks_per_lane vectors per slice; when no s is that small, the largest s that keeps
 * slices whole vectors and is at most what was wanted.
 */
int kvjit_rows_auto_split(int64_t k_row_bytes, int64_t v_row_bytes, int vec, int chunks_per_lane);

/**
 * The smallest split whose K and V slices each hold a power-of-two number of @p vec-byte vectors,
 * at most 32 x @p chunks_per_lane: every lane of every group then has work (no masked tail).
 * 0 when no such split exists (e.g. 72 and 64 vectors).
 */
int kvjit_rows_whole_split(int64_t k_row_bytes, int64_t v_row_bytes, int vec, int chunks_per_lane);

/**
 * A split the caller asked for: it must divide both rows; slices that are not whole vectors
 * narrow @p *vec to the widest access that divides them instead of failing.
 * @return KVJIT_ERR_INVALID_ARGUMENT naming the row @p split does not divide.
 */
kvjit_status kvjit_rows_split_given(int64_t k_row_bytes, int64_t v_row_bytes, int split, int *vec);

/** Lanes for a slice of @p slice_chunks vectors: the smallest power of two >= chunks/cpl, at most 32. */
int kvjit_rows_lanes(int64_t slice_chunks, int chunks_per_lane);

#endif
