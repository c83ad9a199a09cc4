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
 * whether memory-only is good enough.
 */
kvjit_status kvjit_cache_write(kvjit_cache *cache, const kvjit_key *key, const uint8_t *data, size_t len);

kvjit_status kvjit_cache_evict(kvjit_cache *cache, uint64_t max_bytes, uint64_t *removed_entries,
                               uint64_t *removed_bytes);
kvjit_status kvjit_cache_remove_all(kvjit_cache *cache, uint64_t *removed_entries);

#endif
