/* kvjit prewarm's --layout presets: the caches serving runtimes allocate, as kvjit_layout views
 * (layouts.c). */
#ifndef KVJIT_CLI_LAYOUTS_H
#define KVJIT_CLI_LAYOUTS_H

#include <stdio.h>

#include "kvjit.h"

/* A preset's index as an item of --layout ("flat", "vllm-flash", ...), or NULL with @p why. */
const char *item_layout(const char *item, int *value, char *why, size_t capacity);
/* The flat preset (no layout: the caches are rows, as SGLang's pool keeps them). */
#define LAYOUT_FLAT 0

/*
 * The K and V cache layouts of preset @p preset for one rank's @p heads heads of @p head_dim (K)
 * and @p v_head_dim (V) elements of @p element_bytes, @p block_size slots per block. Returns 0,
 * or 1 for the flat preset (no layouts: NULL).
 */
int layout_preset_make(int preset, int heads, int head_dim, int v_head_dim, int element_bytes, int block_size,
                       kvjit_layout *k, kvjit_layout *v);

/* The presets, one line each, for --help. */
void print_layout_presets(FILE *out);

#endif
