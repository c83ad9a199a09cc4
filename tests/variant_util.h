/*
 * Variants through the generic API (kvjit_variant_*), their fields found by name in the op's
 * field table as a caller outside the library finds them: no test hard-codes a field's index.
 */
#ifndef KVJIT_TESTS_VARIANT_UTIL_H
#define KVJIT_TESTS_VARIANT_UTIL_H

#include <stdint.h>

#include "kvjit.h"
#include "kvjit_tools.h"

/** Index of field @p name in @p op's table, or -1 when the op has none. */
int variant_field(const kvjit_op_info *op, const char *name);

/** Value of field @p name of @p v (0 when the op has no such field). */
int64_t variant_value(const kvjit_variant *v, const char *name);

/** Set field @p name of @p v; 0 when the op has no such field, else 1. */
int variant_set(kvjit_variant *v, const char *name, int64_t value);

/**
 * A plain store_kv_cache variant (kvjit_variant_init() of the op, then the fields every store
 * line has), unchecked: a test may build one the op refuses.
 */
kvjit_status store_variant(kvjit_variant *out, int arch, int64_t k_row_bytes, int64_t v_row_bytes,
                           kvjit_index_type index, kvjit_pdl_mode pdl, int split, int vec);

/** The fields of a store that quantizes (dtype, cache_dtype, scale, num_heads). */
void store_variant_quantize(kvjit_variant *v, kvjit_dtype dtype, kvjit_dtype cache_dtype, kvjit_scale_kind scale,
                            int64_t num_heads);

#endif
