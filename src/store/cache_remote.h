/*
 * The remote tier as the cache's last lookup (cache_remote.c): reads that end there, fetched
 * bytes checked like disk, pushes, and what the tier says of itself.
 */
#ifndef KVJIT_CACHE_REMOTE_H
#define KVJIT_CACHE_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "cache_types.h"
#include "entry.h"
#include "key.h"
#include "kvjit_tools.h"
#include "remote.h"

/**
 * Find a good entry for @p key: read-only dirs first, then the writable one, then the remote tier
 * (an entry fetched from it is checked like a disk entry, then written to the writable dir). Bad
 * entries are counted, quarantined when writable, and skipped.
 * @param data receives the malloc'd file bytes (free them); @p view points into them.
 * @return KVJIT_OK or KVJIT_ERR_NOT_FOUND.
 */
kvjit_status kvjit_cache_read(kvjit_cache *cache, const kvjit_key *key, uint8_t **data, kvjit_entry_view *view);

/** Where @p key would be found without compiling: 1 a local dir, 2 the remote, 0 nowhere,
 *  -1 not locally and no remote could say (down or backing off). Nothing is fetched. */
int kvjit_cache_find(kvjit_cache *cache, const kvjit_key *key);

/** The remote tier's part of kvjit_cache_read(): fetch @p key and check it like a disk entry;
 *  kept in the writable dir when good. KVJIT_ERR_NOT_FOUND without a remote or an entry. */
kvjit_status kvjit_cache_fetch(kvjit_cache *cache, const kvjit_key *key, uint8_t **data, kvjit_entry_view *view);

/** Whether a load would get @p key from the remote tier (a ranged GET of its head, checked as an
 *  entry's header for that key; an alias, with its bundle): 1, 0, or -1 when no remote could
 *  say; 0 without one. */
int kvjit_cache_remote_has(kvjit_cache *cache, const kvjit_key *key);

/** PUT a fresh entry to the remote tier when it takes writes (best effort, counted). */
void kvjit_cache_push(kvjit_cache *cache, const kvjit_key *key, const uint8_t *data, size_t len);

/** kvjit_cache_push() of an entry found locally, when the remote tier says it lacks it (prewarm). */
void kvjit_cache_push_if_absent(kvjit_cache *cache, const kvjit_key *key, const uint8_t *data, size_t len);

/** 1 when the remote tier takes writes. */
int kvjit_cache_remote_writable(const kvjit_cache *cache);

/** The remote tier's counters (all zero without one) and URLs ("" without one). */
const kvjit_remote_counters *kvjit_cache_remote_counters(const kvjit_cache *cache);
const char *kvjit_cache_remote_urls(const kvjit_cache *cache);

/** The entry the remote tier's hint of @p id names (the last one pushed for that program and kernel
 *  list; cache/FORMAT.md), fetched and its header checked (never written locally or loaded: it is
 *  only compared). @p data is malloc'd. KVJIT_ERR_NOT_FOUND without a remote, a hint or the entry. */
kvjit_status kvjit_cache_remote_nearest(kvjit_cache *cache, const kvjit_key *id, uint8_t **data,
                                        kvjit_entry_view *view);

#endif
