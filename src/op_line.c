/*
 * Variants as values and as manifest lines (cache/MANIFEST.md), for every op, from its field
 * table: range and word checks, the strict line parser, the canonical line writer, and the public
 * kvjit_variant_* calls built on them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "op.h"
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
  if ((f->flags & KVJIT_FIELD_DTYPE) && kvjit_dtype_parse(text, &d) && word_ok(f, (int64_t)d)) {
    *out = (int64_t)d;
    return 1;
  }
  return 0;
}

static kvjit_status unknown_op(const char *word) {
  char names[256] = "";
  size_t used = 0;
  for (size_t i = 0; i < kvjit_num_ops && used < sizeof names; i++) {
    int n = snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", kvjit_ops[i]->info.name);
    if (n < 0) break;
    used += (size_t)n;
  }
  return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "line: must start with an op name (%s), got \"%.64s\"", names, word);
}

kvjit_status kvjit_op_parse_line(const char *line, const kvjit_op **op_out, int64_t *values) {
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
  for (size_t i = 0; i < kvjit_num_ops && op == NULL; i++) {
    if (strcmp(tok, kvjit_ops[i]->info.name) == 0) op = kvjit_ops[i];
  }
  if (op == NULL) return unknown_op(tok);
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

/* ---- the public variant calls --------------------------------------------------------------- */

static kvjit_status variant_op(const kvjit_variant *v, const kvjit_op **op) {
  if (v == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "variant: NULL");
  if (v->version != KVJIT_VARIANT_VERSION) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "variant->version: must be KVJIT_VARIANT_VERSION (%d), got %u",
                      KVJIT_VARIANT_VERSION, v->version);
  }
  *op = kvjit_op_of(v->op);
  if (*op == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "variant->op: not an op of this library");
  return KVJIT_OK;
}

kvjit_status kvjit_variant_init(kvjit_variant *out, const kvjit_op_info *info) {
  if (out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "out: NULL");
  const kvjit_op *op = kvjit_op_of(info);
  if (op == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "op: not an op of this library");
  memset(out, 0, sizeof *out);
  out->version = KVJIT_VARIANT_VERSION;
  out->op = info;
  for (size_t i = 0; i < op->info.num_fields; i++) out->values[i] = op->info.fields[i].default_value;
  return KVJIT_OK;
}

kvjit_status kvjit_variant_check(kvjit_variant *v) {
  const kvjit_op *op;
  kvjit_status st = variant_op(v, &op);
  if (st != KVJIT_OK) return st;
  /* Fields past the op's stay zero, so that memcmp compares variants. */
  for (size_t i = op->info.num_fields; i < KVJIT_VARIANT_MAX_FIELDS; i++) v->values[i] = 0;
  st = kvjit_op_check_values(op, v->values, KVJIT_OP_ALL_GIVEN);
  if (st == KVJIT_OK) kvjit_clear_error();
  return st;
}

kvjit_status kvjit_variant_parse(kvjit_variant *out, const char *line) {
  if (out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "out: NULL");
  if (line == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "line: NULL");
  kvjit_variant v;
  memset(&v, 0, sizeof v);
  const kvjit_op *op = NULL;
  kvjit_status st = kvjit_op_parse_line(line, &op, v.values);
  if (st != KVJIT_OK) return st;
  v.version = KVJIT_VARIANT_VERSION;
  v.op = &op->info;
  *out = v;
  kvjit_clear_error();
  return KVJIT_OK;
}

kvjit_status kvjit_variant_format(const kvjit_variant *variant, char *out, size_t capacity) {
  if (out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "out: NULL");
  if (capacity > 0) out[0] = '\0';
  const kvjit_op *op;
  kvjit_status st = variant_op(variant, &op);
  if (st != KVJIT_OK) return st;
  int64_t values[KVJIT_VARIANT_MAX_FIELDS];
  memcpy(values, variant->values, sizeof values);
  st = kvjit_op_check_values(op, values, KVJIT_OP_ALL_GIVEN);
  if (st == KVJIT_OK) st = kvjit_op_format_line(op, values, out, capacity);
  if (st == KVJIT_OK) kvjit_clear_error();
  return st;
}

kvjit_status kvjit_variant_prewarm(kvjit_context *ctx, const kvjit_variant *variant, unsigned *compiled,
                                   unsigned *cached) {
  if (compiled) *compiled = 0;
  if (cached) *cached = 0;
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx: NULL");
  const kvjit_op *op;
  kvjit_status st = variant_op(variant, &op);
  if (st != KVJIT_OK) return st;
  int64_t values[KVJIT_VARIANT_MAX_FIELDS];
  memcpy(values, variant->values, sizeof values);
  st = kvjit_op_check_values(op, values, KVJIT_OP_ALL_GIVEN);
  if (st != KVJIT_OK) return st;
  return kvjit_op_prewarm(ctx, op, values, compiled, cached);
}

kvjit_status kvjit_variants_prewarm(kvjit_context *ctx, const kvjit_variant *variants, size_t count,
                                    unsigned part, unsigned parts, kvjit_prewarm_result *results) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx: NULL");
  if (count != 0 && variants == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "variants: NULL");
  if (count != 0 && results == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "results: NULL");
  if (parts == 0 || part >= parts) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "part: %u is not a share of %u (0 <= part < parts)", part, parts);
  }
  const kvjit_op **ops = calloc(count ? count : 1, sizeof *ops);
  int64_t (*values)[KVJIT_VARIANT_MAX_FIELDS] = calloc(count ? count : 1, sizeof *values);
  const int64_t **rows = calloc(count ? count : 1, sizeof *rows);
  if (ops == NULL || values == NULL || rows == NULL) {
    free(ops);
    free(values);
    free(rows);
    return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "prewarm: out of memory");
  }
  /* A variant that fails its checks is reported in its result; the others still build. */
  size_t good = 0;
  size_t *index = (size_t *)calloc(count ? count : 1, sizeof *index);
  kvjit_prewarm_result *good_results = calloc(count ? count : 1, sizeof *good_results);
  kvjit_status st = KVJIT_OK;
  if (index == NULL || good_results == NULL) {
    st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "prewarm: out of memory");
    goto done;
  }
  for (size_t i = 0; i < count; i++) {
    memset(&results[i], 0, sizeof results[i]);
    const kvjit_op *op;
    kvjit_status vst = variant_op(&variants[i], &op);
    if (vst == KVJIT_OK) {
      memcpy(values[good], variants[i].values, sizeof values[good]);
      vst = kvjit_op_check_values(op, values[good], KVJIT_OP_ALL_GIVEN);
    }
    if (vst != KVJIT_OK) {
      results[i].status = vst;
      snprintf(results[i].error, sizeof results[i].error, "%s", kvjit_last_error());
      if (st == KVJIT_OK) st = vst;
      continue;
    }
    ops[good] = op;
    rows[good] = values[good];
    index[good++] = i;
  }
  char first_error[256];
  snprintf(first_error, sizeof first_error, "%s", st != KVJIT_OK ? kvjit_last_error() : "");
  kvjit_status set = kvjit_op_prewarm_set(ctx, ops, rows, good, part, parts, good_results);
  /* A failure of the whole set (out of memory) is every variant's. */
  int any_failed = 0;
  for (size_t g = 0; g < good; g++) any_failed |= good_results[g].status != KVJIT_OK;
  for (size_t g = 0; g < good; g++) {
    if (set != KVJIT_OK && !any_failed) {
      good_results[g].status = set;
      snprintf(good_results[g].error, sizeof good_results[g].error, "%s", kvjit_last_error());
    }
    results[index[g]] = good_results[g];
  }
  if (st == KVJIT_OK) {
    st = set;
  } else {
    kvjit_fail(st, "%s", first_error);
  }
done:
  free(index);
  free(good_results);
  free(ops);
  free(values);
  free(rows);
  if (st == KVJIT_OK) kvjit_clear_error();
  return st;
}

kvjit_status kvjit_prewarm_line(kvjit_context *ctx, const char *line, unsigned *compiled, unsigned *cached) {
  if (compiled) *compiled = 0;
  if (cached) *cached = 0;
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx: NULL");
  if (line == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "line: NULL");
  int64_t values[KVJIT_VARIANT_MAX_FIELDS];
  const kvjit_op *op = NULL;
  kvjit_status st = kvjit_op_parse_line(line, &op, values);
  if (st != KVJIT_OK) return st;
  return kvjit_op_prewarm(ctx, op, values, compiled, cached);
}

/* kvjit_op_locate() of a checked copy of @p variant (why optional). */
static kvjit_status variant_locate(kvjit_context *ctx, const kvjit_variant *variant, unsigned *local, unsigned *remote,
                                   unsigned *missing, kvjit_miss_info *why) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx: NULL");
  const kvjit_op *op;
  kvjit_status st = variant_op(variant, &op);
  if (st != KVJIT_OK) return st;
  int64_t values[KVJIT_VARIANT_MAX_FIELDS];
  memcpy(values, variant->values, sizeof values);
  if ((st = kvjit_op_check_values(op, values, KVJIT_OP_ALL_GIVEN)) != KVJIT_OK) return st;
  return kvjit_op_locate(ctx, op, values, local, remote, missing, why);
}

kvjit_status kvjit_variant_locate(kvjit_context *ctx, const kvjit_variant *variant, unsigned *local, unsigned *remote,
                                  unsigned *missing) {
  unsigned a = 0, b = 0, c = 0;
  if (local) *local = 0;
  if (remote) *remote = 0;
  if (missing) *missing = 0;
  kvjit_status st = variant_locate(ctx, variant, &a, &b, &c, NULL);
  if (st != KVJIT_OK) return st;
  if (local) *local = a;
  if (remote) *remote = b;
  if (missing) *missing = c;
  return KVJIT_OK;
}

kvjit_status kvjit_variant_explain(kvjit_context *ctx, const kvjit_variant *variant, kvjit_miss_info *out) {
  if (out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "out: NULL");
  memset(out, 0, sizeof *out);
  unsigned a, b, c;
  return variant_locate(ctx, variant, &a, &b, &c, out);
}
