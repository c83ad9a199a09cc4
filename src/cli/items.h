/*
 * kvjit prewarm's list items (items.c): the parser of each flag's items (archs, sizes, dtypes,
 * scales) and the comma-separated lists they come in.
 */
#ifndef KVJIT_CLI_ITEMS_H
#define KVJIT_CLI_ITEMS_H

#include <stddef.h>

#include "cli.h"

/* Longest comma-separated list a flag takes; more is a usage error, not a silent truncation. */
#define MAX_LIST 32

typedef struct int_list {
  int value[MAX_LIST];
  size_t count;
} int_list;

/* Upper bound of a row in bytes: far past any real head layout, small enough for int arithmetic. */
#define MAX_ROW_BYTES (1 << 24)

/*
 * Parser of one list item: NULL on success, else what was expected ("bf16, fp16, fp32 or fp8"),
 * for the error line.
 */
typedef const char *(*item_parser)(const char *item, int *value);

#define DTYPE_BYTES(value) ((value) & 0xff)
#define DTYPE_FP8_KIND(value) ((kvjit_dtype)((value) >> 8))

/* The item parsers of the flags: NULL on success, else the expected values, for the message. */
const char *item_arch(const char *item, int *value);
const char *item_positive(const char *item, int *value);
const char *item_k_row_bytes(const char *item, int *value);
const char *item_head_dim(const char *item, int *value);
const char *item_v_row_bytes(const char *item, int *value);
const char *item_dtype(const char *item, int *value);
const char *item_quant_src(const char *item, int *value);
const char *item_scale(const char *item, int *value);

/* Parse a comma-separated list of @p flag's items into @p out; exit status. */
int parse_list(const char *cmd, const char *flag, const char *text, item_parser parse, int_list *out);
/* Parse one item of @p flag into @p out; exit status. */
int parse_one(const char *cmd, const char *flag, const char *text, item_parser parse, int *out);

#endif
