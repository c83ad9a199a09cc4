/* kvjit prewarm's --layout presets: the caches serving runtimes allocate, as kvjit_layout views
 * (layouts.c): vLLM's paged caches for store_kv_cache, SGLang's host pools for transfer_kv. */
#ifndef KVJIT_CLI_LAYOUTS_H
#define KVJIT_CLI_LAYOUTS_H

#include <stdbool.h>
#include <stdio.h>

#include "kvjit.h"

/* A preset's index as an item of --layout ("flat", "vllm-flash", "page_head", ...), or NULL with @p why. */
const char *item_layout(const char *item, int *value, char *why, size_t capacity);
/* The flat preset (no layout: the caches are rows, as SGLang's device pool keeps them): every op's. */
#define LAYOUT_FLAT 0

/* The op preset @p preset is for ("store_kv_cache", "transfer_kv"), NULL for flat (every op's). */
const char *layout_preset_op(int preset);
/* Its name, as --layout takes it. */
const char *layout_preset_name(int preset);
/* Whether --block-size changes it (a paged layout). */
bool layout_preset_paged(int preset);

/*
 * The K and V cache layouts of store preset @p preset for one rank's @p heads heads of @p head_dim (K)
 * and @p v_head_dim (V) elements of @p element_bytes, @p block_size slots per block. Returns 0,
 * or 1 for the flat preset (no layouts: NULL).
 */
int layout_preset_make(int preset, int heads, int head_dim, int v_head_dim, int element_bytes, int block_size,
                       kvjit_layout *k, kvjit_layout *v);

/*
 * One layer's view of SGLang's host pool of transfer preset @p preset (its K or its V tensor:
 * @p heads heads of @p head_dim elements of @p element_bytes, @p page_size slots per page).
 * Returns 0, or 1 for the flat preset (no layout).
 */
int host_layout_make(int preset, int heads, int head_dim, int element_bytes, int page_size, kvjit_layout *out);

/* The presets, one line each, for --help. */
void print_layout_presets(FILE *out);

#endif
