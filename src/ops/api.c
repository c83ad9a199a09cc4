/*
 * The public calls on variants of any op (kvjit_variant_*, kvjit_variants_prewarm(),
 * kvjit_prewarm_line()) and on ops by name: the registry's ops checked, parsed and formatted by
 * the generic op layer (variant.h), prewarmed and located by it (op_prewarm.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op.h"
#include "op_prewarm.h"
#include "registry.h"
#include "status.h"
#include "variant.h"

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

/* The op of @p variant and a copy of its values, checked and in canonical form. */
static kvjit_status variant_checked(const kvjit_variant *variant, const kvjit_op **op, int64_t *values) {
  kvjit_status st = variant_op(variant, op);
  if (st != KVJIT_OK) return st;
  memcpy(values, variant->values, KVJIT_VARIANT_MAX_FIELDS * sizeof values[0]);
  return kvjit_op_check_values(*op, values, KVJIT_OP_ALL_GIVEN);
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

kvjit_status kvjit_variant_set_layouts(kvjit_variant *variant, const kvjit_layout *const *layouts, size_t count) {
  const kvjit_op *op;
  int64_t values[KVJIT_VARIANT_MAX_FIELDS];
  kvjit_status st = variant_checked(variant, &op, values);
  if (st != KVJIT_OK) return st;
  if (op->set_layouts == NULL) return kvjit_fail(KVJIT_ERR_UNSUPPORTED, "%s: takes no cache layouts", op->info.name);
  if (layouts == NULL && count != 0) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "layouts: NULL with count %zu", count);
  st = op->set_layouts(values, layouts, count);
  if (st == KVJIT_OK) st = kvjit_op_check_values(op, values, KVJIT_OP_ALL_GIVEN);
  if (st != KVJIT_OK) return st;
  memcpy(variant->values, values, sizeof values);
  kvjit_clear_error();
  return KVJIT_OK;
}

kvjit_status kvjit_variant_parse(kvjit_variant *out, const char *line) {
  if (out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "out: NULL");
  if (line == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "line: NULL");
  kvjit_variant v;
  memset(&v, 0, sizeof v);
  const kvjit_op *op = NULL;
  kvjit_status st = kvjit_op_parse_line(line, kvjit_ops, kvjit_num_ops, &op, v.values);
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
  int64_t values[KVJIT_VARIANT_MAX_FIELDS];
  kvjit_status st = variant_checked(variant, &op, values);
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
  int64_t values[KVJIT_VARIANT_MAX_FIELDS];
  kvjit_status st = variant_checked(variant, &op, values);
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
  kvjit_status st = kvjit_op_parse_line(line, kvjit_ops, kvjit_num_ops, &op, values);
  if (st != KVJIT_OK) return st;
  return kvjit_op_prewarm(ctx, op, values, compiled, cached);
}

/* kvjit_op_locate() of a checked copy of @p variant (why optional). */
static kvjit_status variant_locate(kvjit_context *ctx, const kvjit_variant *variant, unsigned *local, unsigned *remote,
                                   unsigned *missing, kvjit_miss_info *why) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx: NULL");
  const kvjit_op *op;
  int64_t values[KVJIT_VARIANT_MAX_FIELDS];
  kvjit_status st = variant_checked(variant, &op, values);
  if (st != KVJIT_OK) return st;
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

kvjit_status kvjit_op_oob_count(kvjit_context *ctx, const char *name, uint64_t *count, int reset) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx: NULL");
  if (count == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "count: NULL");
  const kvjit_op *op = name ? kvjit_op_of(kvjit_op_find(name)) : NULL;
  if (op == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "op: \"%.64s\" is not an op", name ? name : "(null)");
  return kvjit_op_counters(ctx, op, count, reset);
}
