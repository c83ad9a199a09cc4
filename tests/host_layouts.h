/*
 * SGLang's hierarchical-cache host layouts (python/sglang/srt/mem_cache/memory_pool_host.py), one
 * tensor each for K and V (SGLang's [0] and [1] of its leading 2):
 *
 *   layer_first         [L, size, H, D]
 *   page_first          [size, L, H, D]
 *   page_first_direct   [pages, L, page_size, H, D]
 *   page_head           [pages, H, page_size, L, D]
 *
 * in bytes (a row is H heads of D bytes), written from those shapes: the kvjit_layout of one
 * layer's view (its base: the layer's slot 0, byte 0) and the offset of any byte. Shared by the
 * transfer check harness (inputs and reference) and bench_transfer (cells and the per-page copy).
 */
#ifndef KVJIT_TEST_HOST_LAYOUTS_H
#define KVJIT_TEST_HOST_LAYOUTS_H

#include <stdint.h>

#include "kvjit.h"

typedef enum kvjit_host_layout_kind {
  KVJIT_HOST_FLAT = 0, /* not a host layout: rows `stride` apart, one buffer per layer */
  KVJIT_HOST_LAYER_FIRST,
  KVJIT_HOST_PAGE_FIRST,
  KVJIT_HOST_PAGE_FIRST_DIRECT,
  KVJIT_HOST_PAGE_HEAD,
  KVJIT_HOST_LAYOUT_KINDS
} kvjit_host_layout_kind;

typedef struct kvjit_host_layout {
  kvjit_host_layout_kind kind;
  int64_t heads, head_bytes; /* a row: heads x head_bytes */
  int64_t page_size;         /* slots per page (the paged kinds) */
  int64_t layers;            /* L of the tensor */
  int64_t slots;             /* size (a multiple of page_size for the paged kinds) */
} kvjit_host_layout;

/** "layer_first", "page_first", "page_first_direct", "page_head" ("flat" for KVJIT_HOST_FLAT). */
const char *kvjit_host_layout_name(kvjit_host_layout_kind kind);

/** Bytes of the tensor (every layer). */
int64_t kvjit_host_layout_bytes(const kvjit_host_layout *h);

/** Offset of byte @p byte of slot @p slot's row of layer @p layer from the tensor's start. */
int64_t kvjit_host_layout_offset(const kvjit_host_layout *h, int64_t layer, int64_t slot, int64_t byte);

/** The view of one layer, from its base kvjit_host_layout_offset(h, layer, 0, 0). */
void kvjit_host_layout_view(const kvjit_host_layout *h, kvjit_layout *out);

#endif
