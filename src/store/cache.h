/*
 * The on-disk cache: where it lives, reading and checking entries, publishing them atomically
 * within a byte budget, the per-key cross-process compile lock, quarantine and LRU eviction.
 * Entry layout: entry.h. This header: cache.c (dirs, lookups, locks); beside it quarantine.h (bad
 * entries), cache_store.h (publication, the ledger, eviction), cache_list.h (listing, verifying),
 * cache_remote.h (the remote tier), cache_index.h (the per-program index).
 *
 * Layout of a cache dir D (format version 2):
 *   D/v2/<32 hex key>.kvjit   entries (one per key)
 *   D/v2/.tmp-...             temp files being written (swept when stale)
 *   D/v2/quarantine/          bad entries moved aside (the newest few, for a day)
 *   D/v2/lock                 the lock file: one byte-range OFD lock per key, one for the dir,
 *                             and the byte ledger in its first bytes
 * Readers never lock; writers publish with temp + fsync + rename under the dir lock.
 */
#ifndef KVJIT_CACHE_H
#define KVJIT_CACHE_H

#include <stdatomic.h>
#include <stdint.h>

#include "cache_types.h"
#include "entry.h"
#include "key.h"
#include "kvjit_tools.h"

/** Open (never fails because of a dir: an unusable dir degrades to memory only, with one warning). */
kvjit_status kvjit_cache_open(kvjit_cache **out, const kvjit_cache_config *config);
void kvjit_cache_close(kvjit_cache *cache);

const kvjit_cache_counters *kvjit_cache_get_counters(const kvjit_cache *cache);
void kvjit_cache_get_info(const kvjit_cache *cache, kvjit_cache_info *out);

/** kvjit_cache_read() of the local dirs only (no network). */
kvjit_status kvjit_cache_read_local(kvjit_cache *cache, const kvjit_key *key, uint8_t **data,
                                    kvjit_entry_view *view);

/**
 * kvjit_cache_read_local() from dir @p *cursor on (0: the first). On success *cursor is past the dir the
 * entry came from, so that a caller that cannot use it (an alias whose bundle is gone) can look in
 * the dirs after it.
 */
kvjit_status kvjit_cache_read_from(kvjit_cache *cache, const kvjit_key *key, size_t *cursor, uint8_t **data,
                                   kvjit_entry_view *view);

/**
 * Take the per-key lock, waiting at most the configured timeout for another process compiling it.
 * @return 1 if the lock is held (unlock it), 0 if not (no writable dir, or the wait ran out:
 *         compile privately).
 */
int kvjit_cache_lock_key(kvjit_cache *cache, const kvjit_key *key, kvjit_cache_lock *lock);
void kvjit_cache_unlock_key(kvjit_cache_lock *lock);

/** 1 when there is a usable writable dir (never for a read-only cache). */
int kvjit_cache_writable(const kvjit_cache *cache);

/** Why nothing can be written: the degraded reason, "read-only", or NULL when writable. */
const char *kvjit_cache_unwritable_reason(const kvjit_cache *cache);

/**
 * The entry kvjit_cache_read() returned for @p key turned out bad when loaded (the driver cannot
 * find a kernel in it, or it lists other kernels than asked): count it, move it aside (writable
 * dir) or remember it as bad (read-only layer) so that the next read misses and a rebuild
 * replaces it. @p why goes into the log line.
 */
void kvjit_cache_reject(kvjit_cache *cache, const kvjit_key *key, const char *why);

#endif
