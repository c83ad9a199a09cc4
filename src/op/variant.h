/*
 * Variants as values and as manifest lines (cache/MANIFEST.md), for every op, from its field table:
 * range and word checks (then the op's own rules), the strict line parser, the canonical writer.
 */
#ifndef KVJIT_VARIANT_H
#define KVJIT_VARIANT_H

#include <stddef.h>
#include <stdint.h>

#include "descriptor.h"
#include "kvjit_tools.h"

/** Ranges and words of every field, then op->check. Error messages name the field. */
kvjit_status kvjit_op_check_values(const kvjit_op *op, int64_t *values, uint64_t given);

/**
 * Parse a manifest line into its op, one of the @p num_ops of @p ops (the registry, which this
 * layer does not know), and checked values (see kvjit_variant_parse()).
 */
kvjit_status kvjit_op_parse_line(const char *line, const kvjit_op *const *ops, size_t num_ops, const kvjit_op **op,
                                 int64_t *values);

/** The line of checked, canonical @p values. */
kvjit_status kvjit_op_format_line(const kvjit_op *op, const int64_t *values, char *out, size_t capacity);

#endif
