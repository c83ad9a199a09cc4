/*
 * Prewarm: the kernels of many variants of any ops, planned for every batch class, each distinct
 * kernel once, compiled for the cache as bundles; and where those kernels are cached already.
 */
#ifndef KVJIT_OP_PREWARM_H
#define KVJIT_OP_PREWARM_H

#include <stddef.h>
#include <stdint.h>

#include "descriptor.h"
#include "kvjit_tools.h"

/** Prewarm (kvjit_variant_prewarm()) of checked @p values. */
kvjit_status kvjit_op_prewarm(kvjit_context *ctx, const kvjit_op *op, const int64_t *values, unsigned *compiled,
                              unsigned *cached);

/** Where the kernels kvjit_op_prewarm() would build are cached: counted per distinct plan as found
 *  in a local dir, on the remote tier, or nowhere (a remote that cannot answer counts as nowhere).
 *  With @p why (optional), the first kernel not cached locally explained (miss.h); cause
 *  KVJIT_MISS_NONE when every kernel is. */
kvjit_status kvjit_op_locate(kvjit_context *ctx, const kvjit_op *op, const int64_t *values, unsigned *local,
                             unsigned *remote, unsigned *missing, kvjit_miss_info *why);

/** kvjit_variants_prewarm() of @p count checked variants: op @p ops[i], values @p values[i]. */
kvjit_status kvjit_op_prewarm_set(kvjit_context *ctx, const kvjit_op *const *ops, const int64_t *const *values,
                                  size_t count, unsigned part, unsigned parts, kvjit_prewarm_result *results);

#endif
