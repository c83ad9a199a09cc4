/*
 * The variant space from the ops' field tables (check_space.h), without a GPU (unit suite):
 *  - the values a field gives, on fields made up here (INT, POW2, WORD with gaps, arch);
 *  - per op of the check table: the space is made the same twice, every variant maps to a case
 *    that uses that very variant (variant -> case -> variant), and every field with more than one
 *    value takes at least two in the space: a field an op adds enters it by itself, and one the
 *    op's mapping to cases does not carry (its cases keep the default) fails here, by name.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "check_space.h"

static int failures;

#define EXPECT(cond, ...)                                                                                              \
  do {                                                                                                                 \
    if (!(cond)) {                                                                                                     \
      failures++;                                                                                                      \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                             \
      fprintf(stderr, __VA_ARGS__);                                                                                    \
      fputc('\n', stderr);                                                                                             \
    }                                                                                                                  \
  } while (0)

static void values_of_made_up_fields(void) {
  static const char *const words[] = {"a", NULL, "c"};
  static const kvjit_op_field fields[] = {
      {"arch", "", KVJIT_FIELD_INT, 0, 0, 1023, NULL, 0, 0, NULL},
      {"n", "", KVJIT_FIELD_INT, 0, 1, 100, NULL, 0, 0, NULL},
      {"vec", "", KVJIT_FIELD_INT, KVJIT_FIELD_POW2, 1, 16, NULL, 0, 16, NULL},
      {"w", "", KVJIT_FIELD_WORD, 0, 0, 0, words, 3, 0, NULL},
      {"big", "", KVJIT_FIELD_INT, 0, 0, INT32_MAX, NULL, 0, 0, NULL},
  };
  const kvjit_op_info op = {"made_up", "", fields, 5, 1};
  int64_t v[128];
  static const int64_t want_n[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 100};
  size_t n = check_field_values(&op, 1, v, 128);
  EXPECT(n == sizeof want_n / sizeof want_n[0] && memcmp(v, want_n, sizeof want_n) == 0, "INT [1, 100]: %zu values",
         n);
  static const int64_t want_vec[] = {1, 2, 4, 8, 16};
  n = check_field_values(&op, 2, v, 128);
  EXPECT(n == 5 && memcmp(v, want_vec, sizeof want_vec) == 0, "POW2 [1, 16]: %zu values", n);
  n = check_field_values(&op, 3, v, 128);
  EXPECT(n == 2 && v[0] == 0 && v[1] == 2, "WORD with a gap: %zu values", n);
  n = check_field_values(&op, 0, v, 128);
  EXPECT(n == 1 && v[0] == 0, "arch: only 0 (this device)");
  n = check_field_values(&op, 4, v, 128);
  EXPECT(n > 0 && v[n - 1] == CHECK_SPACE_INT_CAP, "INT up to INT32_MAX: sampled up to the cap, last %lld",
         (long long)v[n - 1]);
}

static void op_space(const check_op *op) {
  const kvjit_variant *v = NULL, *again = NULL;
  size_t dropped = 0, n = op->space(&v, &dropped), n2 = op->space(&again, NULL);
  EXPECT(n > 0 && n == n2 && v == again, "%s: the space is made once, the same", op->name);
  const kvjit_op_info *info = n ? v[0].op : NULL;
  const check_space_map *map = check_space_map_of(op->name);
  EXPECT(map != NULL, "%s: no map", op->name);
  for (size_t i = 0; map && info && i < map->num_fixed; i++) {
    int known = 0;
    for (size_t f = 0; f < info->num_fields; f++) known |= strcmp(info->fields[f].name, map->fixed[i]) == 0;
    EXPECT(known, "%s: fixed field %s is no field of the op", op->name, map->fixed[i]);
    printf("%s: field %s stays at its bases' value (its cases: a hand-written group)\n", op->name, map->fixed[i]);
  }
  for (size_t f = 1; info && f < info->num_fields; f++) {
    int64_t values[128];
    if (map && check_space_fixed(map, info->fields[f].name)) continue;
    if (check_field_values(info, f, values, 128) < 2) continue;
    size_t distinct = 0;
    int64_t first = v[0].values[f];
    for (size_t i = 0; i < n && distinct < 2; i++) distinct = v[i].values[f] != first ? 2 : 1;
    EXPECT(distinct >= 2, "%s: field %s takes one value in the whole space", op->name, info->fields[f].name);
  }
  void *c = malloc(op->case_size);
  if (c == NULL) abort();
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    char line[256] = "";
    kvjit_variant_format(&v[i], line, sizeof line);
    memset(c, 0, op->case_size);
    op->from_variant(&v[i], i, c);
    kvjit_variant back;
    if (!op->to_variant(c, &back)) {
      EXPECT(0, "%s: the case of \"%s\" has no variant: %s", op->name, line, kvjit_last_error());
      bad++;
      continue;
    }
    for (size_t f = 1; f < info->num_fields; f++)
      if (back.values[f] != v[i].values[f] && bad++ < 20)
        EXPECT(0, "%s: field %s of \"%s\" is %lld in its case, not %lld: the case space does not carry it",
               op->name, info->fields[f].name, line, (long long)back.values[f], (long long)v[i].values[f]);
  }
  free(c);
  printf("%s: %zu variants from %zu fields, every one the variant of its case%s (%zu checked variants no case "
         "can use left out)\n", op->name, n, info ? info->num_fields : 0, bad ? " -- NOT" : "", dropped);
}

int main(void) {
  values_of_made_up_fields();
  for (size_t k = 0; k < check_num_ops; k++) op_space(check_ops[k]);
  printf("check_space: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}
