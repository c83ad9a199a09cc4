/*
 * Cache layouts (kvjit_layout, include/kvjit.h): the one copy of their rules, for every op. A
 * caller's layout is checked and put in canonical form (a view), whose static part a kernel is
 * specialized on and whose strides it takes at run time; the checks that two elements, or two
 * views of one call, never share a byte; the host-side address of any byte (the references of
 * the tests use it). kernel_src/layout.cuh is the device side of the same arithmetic.
 *
 * A view's canonical form: the row (row_bytes) is cut into atoms, runs of `atom` contiguous
 * bytes; atom t of the row (t = byte / atom) is at  sum(i_d * strides[d])  with (i_0 .. i_n-1)
 * the row-major digits of t over extents[]. Extent-1 dims are dropped, dims that are contiguous
 * with the one inside them merged, and a contiguous innermost dim becomes the atom. A view with
 * no dims (atom = the row) and no pages is flat: slot s at s * slot_stride, the layout of the
 * ops' flat `*_stride` arguments.
 *
 * Pure functions: no driver, no allocation; safe from any thread.
 */
#ifndef KVJIT_LAYOUT_H
#define KVJIT_LAYOUT_H

#include <stdint.h>

#include "kvjit.h"

/** Most strided dims of a canonical view (the row dims, less the atom). */
#define KVJIT_VIEW_MAX_DIMS KVJIT_LAYOUT_MAX_ROW_DIMS
/** Largest page size, stored extent (all but the last dim's, which the row implies) and atom of
 *  a view with dims: what a static key word holds (kvjit_view_values_word()). */
#define KVJIT_VIEW_MAX_PAGE 65535
#define KVJIT_VIEW_MAX_EXTENT 65535
#define KVJIT_VIEW_MAX_ATOM 16383

/** The static part of a view, as an op's variant fields hold it (0: absent). */
enum { KVJIT_VIEW_F_PAGE, KVJIT_VIEW_F_ATOM, KVJIT_VIEW_F_DIM0, KVJIT_VIEW_F_DIM1, KVJIT_VIEW_F_COUNT };

/**
 * The four variant fields of a view's static part (KVJIT_VIEW_F_* order), as designated
 * initializers of an op's field table: F##_PAGE .. F##_DIM1, named @p prefix "page" ... (a string
 * literal, e.g. "k_"), their help naming @p what (e.g. "K cache"). Every op's layout fields read
 * and range-check the same way.
 */
#define KVJIT_VIEW_FIELDS(F, prefix, what)                                                                         \
  [F##_PAGE] = {prefix "page", "slots per page of the " what "; 0 = flat slots", KVJIT_FIELD_INT,                    \
                KVJIT_FIELD_OPTIONAL, 0, KVJIT_VIEW_MAX_PAGE, NULL, 0, 0, "0"},                                   \
  [F##_ATOM] = {prefix "atom", "bytes of each contiguous run of a row of the " what "; 0 = the row is one run",       \
                KVJIT_FIELD_INT, KVJIT_FIELD_OPTIONAL, 0, KVJIT_VIEW_MAX_ATOM, NULL, 0, 0, "0"},                  \
  [F##_DIM0] = {prefix "dim0", "with 2 or 3 strided row dims of the " what ": the outermost's extent; 0 = fewer",     \
                KVJIT_FIELD_INT, KVJIT_FIELD_OPTIONAL, 0, KVJIT_VIEW_MAX_EXTENT, NULL, 0, 0, "0"},                \
  [F##_DIM1] = {prefix "dim1", "with 3 strided row dims of the " what ": the middle one's extent; 0 = fewer",        \
                KVJIT_FIELD_INT, KVJIT_FIELD_OPTIONAL, 0, KVJIT_VIEW_MAX_EXTENT, NULL, 0, 0, "0"}

typedef struct kvjit_view {
  /* static: what a kernel is specialized on */
  int64_t page_size;                   /* 0: flat slots; else >= 2 */
  int64_t atom;                        /* bytes of a contiguous run; the row when num_dims is 0 */
  int num_dims;                        /* 0 .. KVJIT_VIEW_MAX_DIMS */
  int64_t extents[KVJIT_VIEW_MAX_DIMS]; /* atoms, outermost first; product = row / atom */
  /* run time: the kernel's arguments (bytes) */
  int64_t page_stride;                 /* 0 when flat */
  int64_t slot_stride;
  int64_t strides[KVJIT_VIEW_MAX_DIMS];
} kvjit_view;

/** The runtime part of a view as kernels take it (kernel_src/layout.cuh's kvjit_view_strides). */
typedef struct kvjit_view_strides {
  int64_t page_stride, slot_stride;
  int64_t strides[KVJIT_VIEW_MAX_DIMS];
} kvjit_view_strides;

/** The view of a flat cache: rows of @p row_bytes, @p slot_stride apart. */
void kvjit_view_flat(kvjit_view *out, int64_t row_bytes, int64_t slot_stride);

/**
 * Check @p layout (named @p name in messages, e.g. "k_cache_layout") for rows of @p row_bytes
 * bytes and put it in canonical form. @p element_bytes: the element size the op needs (an fp8
 * cache: 1), or 0 for any. Errors name the field and its value: a version, element size, dim
 * count, extent or stride out of range, extents that do not make the row, a negative stride,
 * a static part past what a key holds (KVJIT_ERR_UNSUPPORTED).
 */
kvjit_status kvjit_view_resolve(kvjit_view *out, const char *name, const kvjit_layout *layout, int64_t row_bytes,
                                int64_t element_bytes);

/** 1 when @p v is flat: no pages, the row one run. */
static inline int kvjit_view_is_flat(const kvjit_view *v) { return v->page_size == 0 && v->num_dims == 0; }

/**
 * Check that @p num_slots slots of @p v map every byte of every row to a distinct address
 * (a sufficient test on the strides: sorted, each dim's stride covers everything inside it) and
 * that every offset fits in 64 bits. @p name names the view.
 */
kvjit_status kvjit_view_check_slots(const kvjit_view *v, const char *name, int64_t num_slots);

/**
 * Check that no byte of @p num_slots slots of view @p a at @p base_a is also a byte of @p b at
 * @p base_b (the K and V caches of one call). Exact for views that are disjoint as intervals or
 * share their outer strides (K and V packed in one cache, as FlashAttention's or MLA's); other
 * pairs that might meet are refused.
 */
kvjit_status kvjit_view_check_disjoint(const kvjit_view *a, const char *name_a, uint64_t base_a, const kvjit_view *b,
                                       const char *name_b, uint64_t base_b, int64_t num_slots);

/** The byte offset, from the cache's base, of byte @p byte of slot @p slot's row (host side). */
int64_t kvjit_view_offset(const kvjit_view *v, int64_t slot, int64_t byte);

/** The static part as variant field values (KVJIT_VIEW_F_*; all 0 for a flat view). */
void kvjit_view_static_values(const kvjit_view *v, int64_t out[KVJIT_VIEW_F_COUNT]);

/**
 * The static part of field values @p values (a manifest line's) for rows of @p row_bytes, into
 * @p out (strides 0). @p prefix names the fields ("k_" for k_page ...) in messages.
 */
kvjit_status kvjit_view_from_values(kvjit_view *out, const int64_t values[KVJIT_VIEW_F_COUNT], int64_t row_bytes,
                                    const char *prefix);

/** The static part (field values, checked) as one word of a request key: 0 for a flat view, and
 *  distinct for distinct static parts of the same row bytes (the rest is implied by the row).
 *  Inline: every call's key takes two (bench_prelaunch). */
static inline uint64_t kvjit_view_values_word(const int64_t f[KVJIT_VIEW_F_COUNT]) {
  /* page 0..15 | atom 16..29 | dim0 30..45 | dim1 46..61: each in range (kvjit_view_resolve()). */
  return (uint64_t)f[KVJIT_VIEW_F_PAGE] | (uint64_t)f[KVJIT_VIEW_F_ATOM] << 16 | (uint64_t)f[KVJIT_VIEW_F_DIM0] << 30 |
         (uint64_t)f[KVJIT_VIEW_F_DIM1] << 46;
}

/** Every quantity that shifts an address within the view (strides, and the run an access must
 *  not cross), OR'ed: the widest access the view allows is the largest power of two dividing it
 *  and the base (kvjit_rows_vec_of()). */
uint64_t kvjit_view_address_bits(const kvjit_view *v);

/** The runtime part. */
void kvjit_view_strides_of(const kvjit_view *v, kvjit_view_strides *out);

#endif
