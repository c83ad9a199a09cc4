/*
 * Compiling for the cache (kvjit_program_compile(), prewarm): a program's entry made sure of on
 * disk, nothing loaded or kept in memory but a remembered failure; and where a key is cached.
 */
#ifndef KVJIT_PRECOMPILE_H
#define KVJIT_PRECOMPILE_H

#include "context.h"
#include "entry.h"
#include "key.h"
#include "kvjit_tools.h"
#include "request.h"

/** Where a compile-only lookup finds a key (kvjit_program_find()). */
typedef enum kvjit_cached_at {
  KVJIT_CACHED_UNKNOWN = -1, /* not in a local dir, and no remote could say */
  KVJIT_CACHED_NOWHERE = 0,
  KVJIT_CACHED_LOCAL = 1,  /* a local dir, as a runtime lookup resolves it */
  KVJIT_CACHED_REMOTE = 2, /* the remote tier (asked with HEAD: nothing fetched) */
} kvjit_cached_at;

/**
 * Make sure program @p key of @p req is in the disk cache: a program of the table has its entry
 * written again when it is gone; a cached one is left (and pushed to a writable remote that lacks
 * it); else it is compiled and published. A compile that fails for good is remembered in the table.
 */
kvjit_status kvjit_program_precompile(kvjit_context *ctx, const kvjit_request *req, const kvjit_key_target *target,
                                      const kvjit_key *key, const kvjit_entry_label *label, kvjit_origin *origin);

/** Where @p key is cached, fetching and compiling nothing. */
kvjit_cached_at kvjit_program_cached_at(kvjit_context *ctx, const kvjit_key *key);

#endif
