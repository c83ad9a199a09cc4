/*
 * The on-disk cache: where it lives, reading and checking entries, publishing them atomically
 * within a byte budget, the per-key cross-process compile lock, quarantine and LRU eviction.
 * Entry layout: entry.h. Files: cache.c (dirs, lookups, bad entries), cache_store.c (publication,
 * the ledger, eviction), cache_list.c (listing, verifying).
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

#include "entry.h"
#include "key.h"
#include "kvjit.h"
#include "remote.h"

typedef struct kvjit_cache kvjit_cache;

typedef struct kvjit_cache_config {
  const char *write_dir; /* NULL: resolve from the environment */
  const char *read_dirs; /* NULL: $KVJIT_CACHE_PATH */
  int disabled;          /* 1: memory only */
  uint64_t max_bytes;
  unsigned lock_timeout_ms;
  int allow_shared;
  int log;               /* -1 warnings only, 0 silent, 1 verbose */
  int read_only;         /* 1: create, write, move and remove nothing */
  kvjit_remote_config remote; /* remote.urls NULL or "": no remote tier */
} kvjit_cache_config;

typedef struct kvjit_cache_counters {
  atomic_uint_fast64_t bad_entries, disk_writes, write_failures, lock_waits, lock_timeouts, evictions;
} kvjit_cache_counters;

/** Open (never fails because of a dir: an unusable dir degrades to memory only, with one warning). */
kvjit_status kvjit_cache_open(kvjit_cache **out, const kvjit_cache_config *config);
void kvjit_cache_close(kvjit_cache *cache);

const kvjit_cache_counters *kvjit_cache_get_counters(const kvjit_cache *cache);
void kvjit_cache_get_info(const kvjit_cache *cache, kvjit_cache_info *out);

/**
 * Find a good entry for @p key: read-only dirs first, then the writable one, then the remote tier
 * (an entry fetched from it is checked like a disk entry, then written to the writable dir). Bad
 * entries are counted, quarantined when writable, and skipped.
 * @param data receives the malloc'd file bytes (free them); @p view points into them.
 * @return KVJIT_OK or KVJIT_ERR_NOT_FOUND.
 */
kvjit_status kvjit_cache_read(kvjit_cache *cache, const kvjit_key *key, uint8_t **data, kvjit_entry_view *view);

/** kvjit_cache_read() of the local dirs only (no network). */
kvjit_status kvjit_cache_read_local(kvjit_cache *cache, const kvjit_key *key, uint8_t **data,
                                    kvjit_entry_view *view);

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

/**
 * kvjit_cache_read_local() from dir @p *cursor on (0: the first). On success *cursor is past the dir the
 * entry came from, so that a caller that cannot use it (an alias whose bundle is gone) can look in
 * the dirs after it.
 */
kvjit_status kvjit_cache_read_from(kvjit_cache *cache, const kvjit_key *key, size_t *cursor, uint8_t **data,
                                   kvjit_entry_view *view);

/**
 * The per-kernel index (cache_index.c): the id of the entries of one program and kernel list
 * (program name and kernel names as in the header), whatever their target, NVRTC or content.
 */
void kvjit_cache_index_id(const kvjit_entry_view *view, kvjit_key *out);
/** The same id from a program name and its canonical kernel names. */
void kvjit_cache_index_id_of(const char *program, size_t num_kernels, const char *const *kernels, kvjit_key *out);

/** Up to @p cap keys indexed under @p id in the local dirs, newest first (the writable dir's first). */
size_t kvjit_cache_index_keys(kvjit_cache *cache, const kvjit_key *id, kvjit_key *keys, size_t cap);

/** The header of @p key's entry in the first local dir that has a good one (no payload read, nothing
 *  moved: for explaining a miss). @p data is malloc'd. KVJIT_ERR_NOT_FOUND when none. */
kvjit_status kvjit_cache_read_header(kvjit_cache *cache, const kvjit_key *key, uint8_t **data,
                                     kvjit_entry_view *view);

/** The entry the remote tier's hint of @p id names (the last one pushed for that program and kernel
 *  list; cache/FORMAT.md), fetched and its header checked (never written locally or loaded: it is
 *  only compared). @p data is malloc'd. KVJIT_ERR_NOT_FOUND without a remote, a hint or the entry. */
kvjit_status kvjit_cache_remote_nearest(kvjit_cache *cache, const kvjit_key *id, uint8_t **data,
                                        kvjit_entry_view *view);

/** A held per-key compile lock. */
typedef struct kvjit_cache_lock {
  int fd;
} kvjit_cache_lock;

/**
 * Take the per-key lock, waiting at most the configured timeout for another process compiling it.
 * @return 1 if the lock is held (unlock it), 0 if not (no writable dir, or the wait ran out:
 *         compile privately).
 */
int kvjit_cache_lock_key(kvjit_cache *cache, const kvjit_key *key, kvjit_cache_lock *lock);
void kvjit_cache_unlock_key(kvjit_cache_lock *lock);

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

/**
 * The one check of every file kvjit writes outside its entry names (cache export's pack, the
 * manifest it records to): the target must be absent or a regular file (kvjit_replaceable()), and
 * must not lie inside a kvjit cache dir, this cache's or any other (a dir that holds v2/lock, or
 * that dir's v2), whose files only the cache writes. @p what names the writer in the message.
 * @return KVJIT_OK, or KVJIT_ERR_INVALID_ARGUMENT naming the path, why and the errno.
 */
kvjit_status kvjit_cache_check_target(const char *path, const char *what);

kvjit_status kvjit_cache_visit(kvjit_cache *cache, int include_read_dirs, int verify, kvjit_cache_visit_fn visit,
                               void *user, uint64_t *bad);
kvjit_status kvjit_cache_evict(kvjit_cache *cache, uint64_t max_bytes, uint64_t *removed_entries,
                               uint64_t *removed_bytes);
/**
 * Remove the alias file @p path of the writable dir when its bundle (@p bundle_hex) is still in
 * no dir, checked under the dir lock (verify's orphans). @return 1 removed, 0 left.
 */
int kvjit_cache_remove_orphan(kvjit_cache *cache, const char *path, const char *bundle_hex);

kvjit_status kvjit_cache_remove_all(kvjit_cache *cache, uint64_t *removed_entries);

#endif
