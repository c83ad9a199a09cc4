/* kvjit prewarm's options and the variant list they expand to (variants.c). */
#ifndef KVJIT_CLI_VARIANTS_H
#define KVJIT_CLI_VARIANTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "cli.h"

/* Longest comma-separated list a flag takes; more is a usage error, not a silent truncation. */
#define MAX_LIST 32

typedef struct int_list {
  int value[MAX_LIST];
  size_t count;
} int_list;

typedef struct variant_list {
  kvjit_store_kv_variant *items;
  size_t count;
  size_t capacity;
} variant_list;

typedef struct prewarm_opts {
  cache_opts cache;
  int_list archs, k_rows, v_rows, models, dtypes, tps, indexes, pdls, splits, vecs, quant_srcs, scales;
  bool have_v_rows;
  int kv_heads, head_dim, v_head_dim; /* 0 / -1 (v) when not given */
  const char *manifest;
  long jobs;
  bool dry_run;
} prewarm_opts;

/* Parse prewarm's command line into @p o; exit status, with *help set for -h. */
int prewarm_parse_args(const char *cmd, int argc, char **argv, prewarm_opts *o, bool *help);
/* The variant list the options describe, deduplicated; exit status. */
int build_variants(const char *cmd, prewarm_opts *o, variant_list *out);
/* "sm_90 k=2048 v=2048 int64 pdl=auto split=auto vec=16[ bf16->fp8_e4m3/tensor]", for progress lines. */
const char *describe_variant(const kvjit_store_kv_variant *v, char *buf, size_t capacity);
/* The model presets, one line each, for --help. */
void print_model_presets(FILE *out);

#endif
