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
 * Parser of one list item: NULL on success, else why not ("expected bf16, fp16, fp32 or fp8"), for
 * the error line: a static string, or one written into @p why (@p capacity bytes).
 */
typedef const char *(*item_parser)(const char *item, int *value, char *why, size_t capacity);

#define DTYPE_BYTES(value) ((value) & 0xff)
#define DTYPE_FP8_KIND(value) ((kvjit_dtype)((value) >> 8))

/* The library's parser: sm_90, 90, 9.0 or a GPU's name (h100); its detail says why not, e.g. for
 * sm_90a, a target ops do not build. */
const char *item_arch(const char *item, int *value, char *why, size_t capacity);

const char *item_positive(const char *item, int *value, char *why, size_t capacity);

const char *item_k_row_bytes(const char *item, int *value, char *why, size_t capacity);

const char *item_head_dim(const char *item, int *value, char *why, size_t capacity);

const char *item_v_row_bytes(const char *item, int *value, char *why, size_t capacity);

/* A --dtype item: element bytes of the cache dtype, plus (bits 8..) the fp8 kind for fp8 caches,
 * which also get quantizing variants (see --quantize-from). bf16 and fp16 give the same rows;
 * deduplication merges them. */
const char *item_dtype(const char *item, int *value, char *why, size_t capacity);

/* A --quantize-from item: the source dtype of quantizing variants, or 0 (none: plain fp8 only). */
const char *item_quant_src(const char *item, int *value, char *why, size_t capacity);

/* A --scale item: tensor, head or none. */
const char *item_scale(const char *item, int *value, char *why, size_t capacity);

/* Parse a comma-separated list of @p flag's items into @p out; exit status. */
int parse_list(const char *cmd, const char *flag, const char *text, item_parser parse, int_list *out);

/* Parse one item of @p flag into @p out; exit status. */
int parse_one(const char *cmd, const char *flag, const char *text, item_parser parse, int *out);

#endif
