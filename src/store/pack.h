/* A cache as one verified file: export every good entry, import them into the writable dir. */
#ifndef KVJIT_PACK_H
#define KVJIT_PACK_H

#include <stdint.h>

#include "cache.h"
#include "kvjit_tools.h"

/** Write every good entry (of the writable dir, and of the read-only dirs when asked) to @p path. */
kvjit_status kvjit_pack_export(kvjit_cache *cache, const char *path, int include_read_dirs, uint64_t *entries);

/**
 * Check a pack whole (size, lengths, checksum), then publish each good entry that is not already
 * cached into the writable dir. An entry that fails its own checks is counted in @p bad and skipped.
 * @return KVJIT_ERR_CORRUPT (nothing imported) when the pack itself is damaged.
 */
kvjit_status kvjit_pack_import(kvjit_cache *cache, const char *path, uint64_t *imported, uint64_t *present,
                               uint64_t *bad);

#endif
