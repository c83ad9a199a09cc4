/*
 * What the cache's three files share: cache.c (dirs, lookups, bad entries, quarantine),
 * cache_store.c (publication under the dir lock, the byte ledger, eviction, sweeping) and
 * cache_list.c (listing and verifying). The layout is in cache.h and cache/FORMAT.md.
 */
#ifndef KVJIT_CACHE_INTERNAL_H
#define KVJIT_CACHE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>

#include "cache_types.h"
#include "entry.h"
#include "kvjit_tools.h"
#include "remote.h"

#define CACHE_SUBDIR "v2"
#define ENTRY_SUFFIX ".kvjit"
#define ENTRY_NAME_LEN (32 + sizeof ENTRY_SUFFIX - 1)
#define LOCK_NAME "lock"
#define QUARANTINE_NAME "quarantine"
/* Byte ranges of the lock file: [0, LOCK_SLOTS) are the per-key compile locks (distinct keys
 * share a byte only by harmless collision); byte LOCK_SLOTS is the dir lock that publication,
 * eviction and pruning hold. */
#define LOCK_SLOTS (1u << 20)
#define DIR_LOCK_BYTE LOCK_SLOTS
#define STALE_TEMP_SECONDS (10 * 60)
#define QUARANTINE_KEEP_SECONDS (24 * 60 * 60)
/* The newest this many quarantined files are kept (for a post-mortem); older ones are removed. */
#define QUARANTINE_KEEP_FILES 8
/* Bad files of read-only layers remembered per cache object, so each is reported once. */
#define BAD_MEMO_SLOTS 64

/* Which file a bad-entry report was about (a replaced file is a new one). */
typedef struct file_id {
  dev_t dev;
  ino_t ino;
  off_t size;
  int64_t mtime_ns;
} file_id;

struct kvjit_cache {
  char *write_root;   /* the writable dir as resolved (absolute), or NULL */
  char *write_dir;    /* write_root/v2 when it can be used (read_only: only read), else NULL */
  char *degraded;     /* why there is no writable dir; NULL when there is one */
  char *read_list;    /* colon-separated, as configured */
  char **read_dirs;   /* each read root + /v2: existing, trusted, none the same dir as another */
  size_t num_read;
  uint64_t max_bytes;
  unsigned lock_timeout_ms;
  int allow_shared;
  int log;
  int read_only;
  kvjit_cache_counters counters;
  atomic_int write_warned;
  kvjit_remote *remote;      /* the remote tier, or NULL (cache_remote.c) */
  pthread_mutex_t bad_lock; /* guards bad_memo / bad_next */
  file_id bad_memo[BAD_MEMO_SLOTS];
  size_t bad_count, bad_next;
};

/* 1 when @p a and @p b are one file (or dir): same device and inode. */
static inline int cache_same_file(const struct stat *a, const struct stat *b) {
  return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* One warning line (printed unless logging is off: KVJIT_LOG=0). */
void cache_warn(const kvjit_cache *c, const char *what, const char *detail);

/* A dir (or file) is trusted when it is ours or root's and no one else can write it. */
int cache_trusted(const struct stat *st);

/* 1 when @p name is "<32 hex digits>.kvjit". */
int cache_is_entry_name(const char *name);

/*
 * Read the entry file @p path: lstat, refuse what is not a regular file, check the fixed prefix
 * against the file size before reading more, then read the header only (@p whole 0) or the whole
 * file. Nothing past what the format allows is ever read or allocated.
 * @return 1 read (*data malloc'd, *len bytes, *st its stat), 0 no such file, -1 bad (*why says
 *         why, *st valid when @p have_st is set), -2 unreadable (permissions, I/O: not its fault).
 */
int cache_read_entry_file(const char *path, int whole, uint8_t **data, size_t *len, struct stat *st, int *have_st,
                          char *why, size_t why_capacity);

/* Add a just-published entry to its dir's per-kernel index (cache_index.c); the caller holds the
 * dir lock. Best effort: an index is a hint for explaining misses. */
void cache_index_add(kvjit_cache *c, const kvjit_entry_view *view);

/* Remove the per-kernel index of the writable dir (a clear). */
void cache_index_clear(kvjit_cache *c);

/* Per-process check of an entry's trust (owner, mode) the loader applies: NULL or why not. */
const char *cache_untrusted_reason(const kvjit_cache *c, const struct stat *st);

/*
 * Take the OFD write lock on byte @p byte of the lock file on a new open file description, waiting
 * at most the configured timeout and stopping early when @p give_up (optional) says so.
 * @return the fd holding the lock (close it to unlock), or -1 with errno (ETIMEDOUT: *timed_out).
 */
int cache_lock_byte(kvjit_cache *c, off_t byte, int (*give_up)(kvjit_cache *, const void *), const void *arg,
                    int *timed_out);

#endif
