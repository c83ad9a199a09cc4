/* A list of variants of any ops (variant_list.c): grown, sorted and deduplicated, described. */
#ifndef KVJIT_CLI_VARIANT_LIST_H
#define KVJIT_CLI_VARIANT_LIST_H

#include <stdbool.h>
#include <stddef.h>

#include "cli.h"

typedef struct variant_list {
  kvjit_variant *items;
  size_t count;
  size_t capacity;
} variant_list;

/* Append a copy of @p variant; false when out of memory. */
bool variant_list_add(variant_list *list, const kvjit_variant *variant);
/* Sort, then drop repeats: bf16 and fp16, 8B and 70B, tp and dtype pairs that give equal rows. */
void variant_list_dedup(variant_list *list);
/* Its manifest line, for progress lines. */
const char *describe_variant(const kvjit_variant *v, char *buf, size_t capacity);
/* The field named @p name of @p op, or -1. */
int op_field(const kvjit_op_info *op, const char *name);

#endif
