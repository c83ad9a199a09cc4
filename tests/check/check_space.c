/* An op's variant space from its field table (check_space.h). */
#include "check_space.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VALUES 128
#define MAX_SPACES 8

static size_t add_value(int64_t *out, size_t n, size_t capacity, int64_t v) {
  for (size_t i = 0; i < n && i < capacity; i++)
    if (out[i] == v) return n;
  if (n < capacity) out[n] = v;
  return n + 1;
}

size_t check_field_values(const kvjit_op_info *op, size_t field, int64_t *out, size_t capacity) {
  const kvjit_op_field *f = &op->fields[field];
  size_t n = 0;
  if (field == 0) return add_value(out, n, capacity, 0); /* arch: the device the checks run on */
  if (f->kind == KVJIT_FIELD_WORD) {
    for (size_t w = 0; w < f->num_words; w++)
      if (f->words[w] != NULL) n = add_value(out, n, capacity, (int64_t)w);
    return n;
  }
  const int64_t top = f->max < CHECK_SPACE_INT_CAP ? f->max : CHECK_SPACE_INT_CAP;
  if (!(f->flags & KVJIT_FIELD_POW2)) n = add_value(out, n, capacity, f->min);
  for (int64_t p = 1; p <= top; p *= 2) {
    if (p >= f->min) n = add_value(out, n, capacity, p);
    if (!(f->flags & KVJIT_FIELD_POW2) && p >= 2 && 3 * p / 2 >= f->min && 3 * p / 2 <= top)
      n = add_value(out, n, capacity, 3 * p / 2);
  }
  if (f->max <= CHECK_SPACE_INT_CAP && !(f->flags & KVJIT_FIELD_POW2)) n = add_value(out, n, capacity, f->max);
  return n;
}

int check_variant_same(const kvjit_variant *a, const kvjit_variant *b) {
  if (a->op != b->op) return 0;
  for (size_t f = 1; f < a->op->num_fields; f++)
    if (a->values[f] != b->values[f]) return 0;
  return 1;
}

int check_space_fixed(const check_space_map *map, const char *name) {
  for (size_t i = 0; i < map->num_fixed; i++)
    if (strcmp(map->fixed[i], name) == 0) return 1;
  return 0;
}

typedef struct space {
  const char *name;
  const check_space_map *map;
  kvjit_variant *v;
  size_t n, cap, dropped;
  char (*lines)[256];
} space;

/* The variant the case of @p v uses (@p out); 0 when that case has none. */
static int through_case(const check_space_map *map, const kvjit_variant *v, kvjit_variant *out) {
  void *c = calloc(1, map->case_size);
  if (c == NULL) abort();
  map->from_variant(v, 0, c);
  int ok = map->to_variant(c, out);
  free(c);
  return ok;
}

/* What a case can use of @p v: @p v itself when its case uses it, else the variant its case does
 * use when that one's case uses it in turn (16-byte accesses asked on 8-byte rows: 8). @return 0
 * when neither. */
static int reachable(const check_space_map *map, const kvjit_variant *v, kvjit_variant *out) {
  kvjit_variant back, again;
  if (!through_case(map, v, &back)) return 0;
  if (check_variant_same(&back, v)) {
    *out = *v;
    return 1;
  }
  if (!through_case(map, &back, &again) || !check_variant_same(&again, &back)) return 0;
  *out = back;
  return 1;
}

static void space_add(space *s, const kvjit_variant *v) {
  char line[256];
  if (kvjit_variant_format(v, line, sizeof line) != KVJIT_OK) return;
  for (size_t i = 0; i < s->n; i++)
    if (strcmp(s->lines[i], line) == 0) return;
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 64;
    s->v = realloc(s->v, s->cap * sizeof *s->v);
    s->lines = realloc(s->lines, s->cap * sizeof *s->lines);
    if (s->v == NULL || s->lines == NULL) abort();
  }
  s->v[s->n] = *v;
  snprintf(s->lines[s->n], sizeof s->lines[s->n], "%s", line);
  s->n++;
}

static void space_make(space *s, const char *const *bases, size_t num_bases, const check_space_map *map) {
  for (size_t b = 0; b < num_bases; b++) {
    kvjit_variant base;
    if (kvjit_variant_parse(&base, bases[b]) != KVJIT_OK) {
      fprintf(stderr, "check_space: base \"%s\": %s\n", bases[b], kvjit_last_error());
      abort(); /* the op's own line: a bug in the test, not a case */
    }
    if (strcmp(base.op->name, s->name) != 0) abort();
    kvjit_variant use;
    if (reachable(map, &base, &use)) space_add(s, &use);
    for (size_t f = 0; f < base.op->num_fields; f++) {
      if (check_space_fixed(map, base.op->fields[f].name)) continue;
      int64_t values[MAX_VALUES];
      size_t n = check_field_values(base.op, f, values, MAX_VALUES);
      for (size_t i = 0; i < n && i < MAX_VALUES; i++) {
        kvjit_variant v = base;
        v.values[f] = values[i];
        if (kvjit_variant_check(&v) != KVJIT_OK) continue;
        if (reachable(map, &v, &use)) space_add(s, &use);
        else s->dropped++;
      }
    }
  }
}

/* Made once per op and kept: case_get(i) asks for it once per case. Single-threaded (the harness). */
static space spaces[MAX_SPACES];
static size_t num_spaces;

const check_space_map *check_space_map_of(const char *name) {
  for (size_t i = 0; i < num_spaces; i++)
    if (strcmp(spaces[i].name, name) == 0) return spaces[i].map;
  return NULL;
}

size_t check_space_get(const char *name, const char *const *bases, size_t num_bases, const check_space_map *map,
                       const kvjit_variant **out, size_t *dropped) {
  for (size_t i = 0; i < num_spaces; i++)
    if (strcmp(spaces[i].name, name) == 0) {
      *out = spaces[i].v;
      if (dropped) *dropped = spaces[i].dropped;
      return spaces[i].n;
    }
  if (num_spaces == MAX_SPACES) abort();
  space *s = &spaces[num_spaces++];
  s->name = name;
  s->map = map;
  space_make(s, bases, num_bases, map);
  *out = s->v;
  if (dropped) *dropped = s->dropped;
  return s->n;
}
