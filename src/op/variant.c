/*
 * Variants as values and as manifest lines (cache/MANIFEST.md), for every op, from its field
 * table: range and word checks, the strict line parser, the canonical line writer. The public
 * kvjit_variant_* calls on them are the registry's (src/ops/api.c).
 */
#include "variant.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "status.h"

/* A line is at most this long (MANIFEST.md says 511 characters). */
#define LINE_MAX_CHARS 512

static int is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

static int word_ok(const kvjit_op_field *f, int64_t v) {
  return v >= 0 && (uint64_t)v < f->num_words && f->words[v] != NULL;
}

/* "a, b or c" of a WORD field, for messages. */
static const char *word_list(const kvjit_op_field *f, char *buf, size_t capacity) {
  size_t used = 0, count = 0, total = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < f->num_words; i++) total += f->words[i] != NULL;
  for (size_t i = 0; i < f->num_words && used < capacity; i++) {
    if (f->words[i] == NULL) continue;
    const char *sep = count == 0 ? "" : count + 1 == total ? " or " : ", ";
    int n = snprintf(buf + used, capacity - used, "%s%s", sep, f->words[i]);
    if (n < 0) break;
    used += (size_t)n;
    count++;
  }
  return buf;
}

kvjit_status kvjit_op_check_values(const kvjit_op *op, int64_t *values, uint64_t given) {
  for (size_t i = 0; i < op->info.num_fields; i++) {
    const kvjit_op_field *f = &op->info.fields[i];
    const int64_t v = values[i];
    if (f->kind == KVJIT_FIELD_WORD) {
      if (!word_ok(f, v)) {
        char words[256];
        return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: must be %s, got %lld", f->name,
                          word_list(f, words, sizeof words), (long long)v);
      }
    } else if (v < f->min || v > f->max || ((f->flags & KVJIT_FIELD_POW2) && !is_pow2(v))) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: must be %s%lld..%lld, got %lld", f->name,
                        (f->flags & KVJIT_FIELD_POW2) ? "a power of two " : "", (long long)f->min, (long long)f->max,
                        (long long)v);
    }
  }
  return op->check(values, given);
}

/* ---- parsing ------------------------------------------------------------------------------------ */

/* Strict decimal: digits only (no sign, no spaces), value in [lo, hi]. */
static int parse_decimal(const char *text, int64_t lo, int64_t hi, int64_t *out) {
  if (text[0] < '0' || text[0] > '9') return 0;
  for (const char *p = text; *p; p++) {
    if (*p < '0' || *p > '9') return 0;
  }
  errno = 0;
  char *end = NULL;
  long long v = strtoll(text, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

static int parse_value(const kvjit_op_field *f, const char *text, int64_t *out) {
  if (f->kind == KVJIT_FIELD_INT) {
    return parse_decimal(text, f->min, f->max, out) && (!(f->flags & KVJIT_FIELD_POW2) || is_pow2(*out));
  }
  for (size_t i = 0; i < f->num_words; i++) {
    if (f->words[i] != NULL && strcmp(f->words[i], text) == 0) {
      *out = (int64_t)i;
      return 1;
    }
  }
  kvjit_dtype d;
  if ((f->flags & KVJIT_FIELD_DTYPE) && kvjit_dtype_parse(text, &d) == KVJIT_OK && word_ok(f, (int64_t)d)) {
    *out = (int64_t)d;
    return 1;
  }
  return 0;
}

static kvjit_status unknown_op(const kvjit_op *const *ops, size_t num_ops, const char *word) {
  char names[256] = "";
  size_t used = 0;
  for (size_t i = 0; i < num_ops && used < sizeof names; i++) {
    int n = snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", ops[i]->info.name);
    if (n < 0) break;
    used += (size_t)n;
  }
  return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "line: must start with an op name (%s), got \"%.64s\"", names, word);
}

kvjit_status kvjit_op_parse_line(const char *line, const kvjit_op *const *ops, size_t num_ops, const kvjit_op **op_out,
                                 int64_t *values) {
  char buf[LINE_MAX_CHARS];
  /* cache/MANIFEST.md: at most 511 characters, a comment included. */
  if (strcspn(line, "\n\r") >= sizeof buf) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "line: longer than %zu characters", sizeof buf - 1);
  }
  size_t len = strcspn(line, "#\n\r");
  if (line[len] == '\r' || line[len] == '\n') {
    /* Only a line ending may follow: "a\nb" is two lines. */
    const char *rest = line + len;
    while (*rest == '\r' || *rest == '\n') rest++;
    if (*rest != '\0') return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "line: more than one line");
  }
  if (len >= sizeof buf) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "line: longer than %zu characters", sizeof buf - 1);
  }
  memcpy(buf, line, len);
  buf[len] = '\0';
  char *save = NULL;
  char *tok = strtok_r(buf, " \t", &save);
  if (tok == NULL) return kvjit_fail(KVJIT_ERR_NOT_FOUND, "line: blank or comment only, no variant");
  const kvjit_op *op = NULL;
  for (size_t i = 0; i < num_ops && op == NULL; i++) {
    if (strcmp(tok, ops[i]->info.name) == 0) op = ops[i];
  }
  if (op == NULL) return unknown_op(ops, num_ops, tok);
  const size_t num_fields = op->info.num_fields;
  uint64_t given = 0;
  for (size_t i = 0; i < num_fields; i++) values[i] = op->info.fields[i].default_value;
  while ((tok = strtok_r(NULL, " \t", &save)) != NULL) {
    char *eq = strchr(tok, '=');
    if (eq == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "line: \"%.64s\" is not key=value", tok);
    *eq = '\0';
    const char *text = eq + 1;
    size_t f = 0;
    while (f < num_fields && strcmp(tok, op->info.fields[f].name) != 0) f++;
    if (f == num_fields) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "line: unknown key \"%.64s\" for %s", tok, op->info.name);
    }
    if (given & KVJIT_OP_GIVEN(f)) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: given twice", tok);
    given |= KVJIT_OP_GIVEN(f);
    if (!parse_value(&op->info.fields[f], text, &values[f])) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: bad value \"%.64s\" (see cache/MANIFEST.md)", tok, text);
    }
  }
  for (size_t f = 0; f < num_fields; f++) {
    if (!(op->info.fields[f].flags & KVJIT_FIELD_OPTIONAL) && !(given & KVJIT_OP_GIVEN(f))) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "line: missing %s=", op->info.fields[f].name);
    }
  }
  kvjit_status st = kvjit_op_check_values(op, values, given);
  if (st != KVJIT_OK) return st;
  /* cache/MANIFEST.md: an optional key only where the canonical line has it (a plain store with
   * dtype= parsed, but formatted back without it: the line did not round-trip). */
  for (size_t f = 0; f < num_fields; f++) {
    const kvjit_op_field *fd = &op->info.fields[f];
    if (!(fd->flags & KVJIT_FIELD_OPTIONAL) || !(given & KVJIT_OP_GIVEN(f))) continue;
    int written = op->written ? op->written(values, f) : values[f] != fd->default_value;
    if (!written) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: not part of this %s line (an optional key, only where the "
                        "variant needs it: see cache/MANIFEST.md)", fd->name, op->info.name);
    }
  }
  *op_out = op;
  return KVJIT_OK;
}

/* ---- writing ------------------------------------------------------------------------------------ */

kvjit_status kvjit_op_format_line(const kvjit_op *op, const int64_t *values, char *out, size_t capacity) {
  char buf[LINE_MAX_CHARS];
  int used = snprintf(buf, sizeof buf, "%s", op->info.name);
  for (size_t i = 0; i < op->info.num_fields && used > 0 && (size_t)used < sizeof buf; i++) {
    const kvjit_op_field *f = &op->info.fields[i];
    if (f->flags & KVJIT_FIELD_OPTIONAL) {
      int written = op->written ? op->written(values, i) : values[i] != f->default_value;
      if (!written) continue;
    }
    int n = f->kind == KVJIT_FIELD_WORD
                ? snprintf(buf + used, sizeof buf - (size_t)used, " %s=%s", f->name, f->words[values[i]])
                : snprintf(buf + used, sizeof buf - (size_t)used, " %s=%lld", f->name, (long long)values[i]);
    used = n < 0 ? -1 : used + n;
  }
  if (used < 0 || (size_t)used >= sizeof buf) return kvjit_fail(KVJIT_ERR_INTERNAL, "%s: line too long", op->info.name);
  if ((size_t)used >= capacity) {
    if (capacity > 0) out[0] = '\0';
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "capacity: %zu bytes, the line needs %d", capacity, used + 1);
  }
  memcpy(out, buf, (size_t)used + 1);
  return KVJIT_OK;
}
