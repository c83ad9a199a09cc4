/* A list of variants of any ops (variant_list.h). */
#include "variant_list.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool variant_list_add(variant_list *list, const kvjit_variant *variant) {
  if (list->count == list->capacity) {
    size_t capacity = list->capacity ? list->capacity * 2 : 64;
    kvjit_variant *items = realloc(list->items, capacity * sizeof *items);
    if (items == NULL) return false;
    list->items = items;
    list->capacity = capacity;
  }
  list->items[list->count++] = *variant;
  return true;
}

static int compare_i64(int64_t a, int64_t b) { return (a > b) - (a < b); }

/* Fields listed biggest first (the largest rows compile first, when the pool is busiest). */
static bool descending(const kvjit_op_field *f) {
  return strcmp(f->name, "k_row_bytes") == 0 || strcmp(f->name, "v_row_bytes") == 0 || strcmp(f->name, "vec") == 0;
}

static size_t op_index(const kvjit_op_info *op) {
  for (size_t i = 0; i < kvjit_op_count(); i++)
    if (kvjit_op_get(i) == op) return i;
  return SIZE_MAX;
}

static int compare_variants(const void *pa, const void *pb) {
  const kvjit_variant *a = pa, *b = pb;
  int c;
  if ((c = compare_i64((int64_t)op_index(a->op), (int64_t)op_index(b->op))) != 0) return c;
  for (size_t i = 0; i < a->op->num_fields; i++) {
    c = descending(&a->op->fields[i]) ? compare_i64(b->values[i], a->values[i]) : compare_i64(a->values[i], b->values[i]);
    if (c != 0) return c;
  }
  return 0;
}

void variant_list_dedup(variant_list *list) {
  if (list->count == 0) return;
  if (list->count > 1) qsort(list->items, list->count, sizeof *list->items, compare_variants);
  size_t kept = 1;
  for (size_t i = 1; i < list->count; i++)
    if (compare_variants(&list->items[kept - 1], &list->items[i]) != 0) list->items[kept++] = list->items[i];
  list->count = kept;
}

/* "sm_90 store_kv_cache k_row_bytes=... vec=16": its manifest line with the arch first, for
 * progress lines. */
const char *describe_variant(const kvjit_variant *v, char *buf, size_t capacity) {
  char line[512], arch[32];
  if (kvjit_variant_format(v, line, sizeof line) != KVJIT_OK) {
    snprintf(buf, capacity, "%s (unprintable)", v->op->name);
    return buf;
  }
  /* The line is "OP arch=N REST". */
  const char *rest = strchr(line, ' ');
  rest = rest ? strchr(rest + 1, ' ') : NULL;
  snprintf(buf, capacity, "%s %s%s", arch_name((int)v->values[0], arch, sizeof arch), v->op->name, rest ? rest : "");
  return buf;
}

/* The field named @p name of @p op, or -1. */
int op_field(const kvjit_op_info *op, const char *name) {
  for (size_t i = 0; i < op->num_fields; i++)
    if (strcmp(op->fields[i].name, name) == 0) return (int)i;
  return -1;
}
