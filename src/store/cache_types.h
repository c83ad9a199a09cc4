/*
 * The cache's types that its files and its callers share (cache.h): the object, its
 * configuration, its counters and a held compile lock. No functions.
 */
#ifndef KVJIT_CACHE_TYPES_H
#define KVJIT_CACHE_TYPES_H

#include <stdatomic.h>
#include <stdint.h>

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

/** A held per-key compile lock. */
typedef struct kvjit_cache_lock {
  int fd;
} kvjit_cache_lock;

#endif
