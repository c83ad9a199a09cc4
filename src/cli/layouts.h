/* kvjit prewarm's --layout presets: the caches serving runtimes allocate, as kvjit_layout views
 * (layouts.c): vLLM's paged caches for store_kv_cache, SGLang's host pools for transfer_kv. */
#ifndef KVJIT_CLI_LAYOUTS_H
#define KVJIT_CLI_LAYOUTS_H

#include <stdbool.h>
#include <stdio.h>

#include "kvjit.h"
#include "kvjit_tools.h"

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
 * The layouts of preset @p preset for a variant @p base of its op, of one rank's @p heads heads of
 * @p head_dim (K) and @p v_head_dim (V, 0: K only) elements of @p element_bytes, @p block_size
 * slots per block (page): store_kv_cache's K and V caches; transfer_kv's source K, V and
 * destination K, V, SGLang's host pool on each side in host memory (its device pool is flat
 * rows), as kvjit_variant_set_layouts() takes them. Returns their count, 0 for flat (none).
 */
size_t layout_preset_layouts(int preset, const kvjit_variant *base, int heads, int head_dim, int v_head_dim,
                             int element_bytes, int block_size, kvjit_layout room[2], const kvjit_layout *out[4]);

/* The presets, one line each, for --help. */
void print_layout_presets(FILE *out);

#endif
