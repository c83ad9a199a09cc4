/*
 * The cache layouts serving runtimes use, as kvjit_layout views of a K and a V cache (written
 * from vLLM's and FlashAttention's shapes): shared by the CPU layout tests and the GPU check
 * harness's store inputs.
 *
 *   nhd      vLLM K/V [blocks, block_size, H, D]            (flat once canonical)
 *   hnd      vLLM K/V [blocks, H, block_size, D]
 *   flash    FlashAttention [blocks, H, block_size, 2 * D]  (K = [..., :D], V = [..., D:], one cache)
 *   chunked  vLLM's older K [blocks, H, D / x, block_size, x] (x = 16 bytes), V [blocks, H, D, block_size]
 *   mla      MLA concat [blocks, block_size, 576]: kv_c (512) and k_pe (64) into one row (one cache)
 */
#ifndef KVJIT_TEST_LAYOUTS_H
#define KVJIT_TEST_LAYOUTS_H

#include <stddef.h>
#include <stdint.h>

#include "kvjit.h"

typedef enum kvjit_test_layout_kind {
  KVJIT_TEST_NHD,
  KVJIT_TEST_HND,
  KVJIT_TEST_FLASH,
  KVJIT_TEST_CHUNKED,
  KVJIT_TEST_MLA
} kvjit_test_layout_kind;

typedef struct kvjit_test_layout_spec {
  const char *name;
  kvjit_test_layout_kind kind;
  int64_t heads, head_dim, block_size, element_bytes; /* cache elements (fp8: 1) */
} kvjit_test_layout_spec;

typedef struct kvjit_test_layout {
  const char *name;
  kvjit_layout k, v;
  int64_t k_row, v_row;     /* cache bytes of a K and a V row (v_row 0: K only) */
  int64_t element_bytes;
  int64_t page_size;
  int64_t page_bytes;       /* bytes of one page of each allocation */
  int64_t v_base;           /* V's view from K's base when both are views of one cache, else 0 */
  int one_cache;            /* 1: K and V are views of one allocation (flash, mla) */
  /* what the K view becomes (layout.h) */
  int k_flat, k_dims;
  int64_t k_atom;
} kvjit_test_layout;

extern const kvjit_test_layout_spec kvjit_test_layouts[];
extern const size_t kvjit_test_num_layouts;

/** The layouts of @p spec. */
void kvjit_test_layout_make(kvjit_test_layout *out, const kvjit_test_layout_spec *spec);

/** "nhd", "hnd", ... */
const char *kvjit_test_layout_kind_name(kvjit_test_layout_kind kind);

/**
 * The offset from the cache's base of byte @p byte of slot @p slot's row (of @p row_bytes) of
 * layout @p l, straight from kvjit_layout's definition in include/kvjit.h (packed strides filled
 * in by hand): the references' address, independent of the library's canonical views.
 */
int64_t kvjit_test_layout_offset(const kvjit_layout *l, int64_t row_bytes, int64_t slot, int64_t byte);

#endif
