/*
 * Publication within the byte budget under the dir lock, the size ledger, eviction and removal
 * (cache_store.c).
 */
#ifndef KVJIT_CACHE_STORE_H
#define KVJIT_CACHE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "cache_types.h"
#include "entry.h"
#include "key.h"
#include "kvjit_tools.h"

/**
 * Publish an encoded entry: temp file + fsync, then under the dir lock evict what the byte
 * budget needs, rename into place and update the ledger. A failure is counted (write_failures),
 * warned about once per cache, and returned (KVJIT_ERR_IO with the reason): the caller decides
 * whether memory-only is good enough. An alias is written only while its bundle is in the cache:
 * else KVJIT_ERR_NOT_FOUND (not counted as a failure; the kernel is to be built alone).
 */
kvjit_status kvjit_cache_write(kvjit_cache *cache, const kvjit_key *key, const uint8_t *data, size_t len);

/**
 * The most payload bytes one bundle may take: an eighth of the byte budget, so that a budget
 * holds at least eight bundles (one per writer of a TP=8 server starting on one dir) and no
 * bundle evicts the rest of the dir, or itself, on its way in.
 */
size_t kvjit_cache_bundle_limit(const kvjit_cache *cache);

kvjit_status kvjit_cache_evict(kvjit_cache *cache, uint64_t max_bytes, uint64_t *removed_entries,
                               uint64_t *removed_bytes);
/**
 * Remove the alias file @p path of the writable dir when its bundle (@p bundle_hex) is still in
 * no dir, checked under the dir lock (verify's orphans). @return 1 removed, 0 left.
 */
int kvjit_cache_remove_orphan(kvjit_cache *cache, const char *path, const char *bundle_hex);

kvjit_status kvjit_cache_remove_all(kvjit_cache *cache, uint64_t *removed_entries);

#endif
