/* kvjit prewarm's model presets, found by the names people type (models.c). */
#ifndef KVJIT_CLI_MODELS_H
#define KVJIT_CLI_MODELS_H

#include <stddef.h>
#include <stdio.h>

/*
 * A model's KV cache layout. A store_kv_cache row is one token's K (or V) of every KV head of one
 * tensor-parallel rank: (kv_heads / tp) * head_dim * dtype bytes. MLA caches one latent "head",
 * which every rank replicates.
 */
typedef struct model_shape {
  const char *name;
  int kv_heads;
  int head_dim;   /* elements of one K head */
  int v_head_dim; /* elements of one V head; 0: K only (MLA latent cache) */
} model_shape;

/* The preset @p typed names: "llama-3.1-8b", "Llama-3.1-8B", "meta-llama/Llama-3.1-8B-Instruct",
 * "Qwen/Qwen2.5-7B-Instruct", "google/gemma-2-9b-it" (any case; an organization, "Meta-" and an
 * -Instruct / -Chat / -it / -base / -hf ending do not change the KV layout). NULL when none. */
const model_shape *model_find(const char *typed);
/* The preset a typo of @p typed is likely meant for, or NULL. */
const char *model_nearest(const char *typed);
/* The index of @p model among the presets, and the preset of an index. */
size_t model_index(const model_shape *model);
const model_shape *model_at(size_t index);
/* The presets, one line each, for --help. */
void print_model_presets(FILE *out);

#endif
