/* kvjit prewarm's options and the variant list they expand to (variants.c). */
#ifndef KVJIT_CLI_VARIANTS_H
#define KVJIT_CLI_VARIANTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "cli.h"
#include "items.h"
#include "variant_list.h"

/* Most distinct choice fields (fields with a prewarm flag) over all ops. */
#define MAX_FIELD_FLAGS 32
/* --split all, in a split list: every split (see add_splits()). */
#define SPLIT_ALL (-1)

typedef struct prewarm_opts {
  cache_opts cache;
  const kvjit_op_info *op; /* --op, default store_kv_cache */
  bool op_given;
  int_list archs, k_rows, v_rows, models, dtypes, tps, quant_srcs, scales;
  int_list layouts, block_sizes; /* --layout presets (layouts.h) and their slots per block */
  int_list choices[KVJIT_VARIANT_MAX_FIELDS]; /* per field of op: its flag's list, or its prewarm default */
  /* The choice-field flags of every op: the field name, "--name", and the text given (or NULL). */
  const char *flag_fields[MAX_FIELD_FLAGS];
  char flag_names[MAX_FIELD_FLAGS][48];
  const char *flag_text[MAX_FIELD_FLAGS];
  size_t num_flags;
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
/* The ops and their choice flags, for --help. */
void print_ops(FILE *out);

#endif
