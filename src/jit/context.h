/*
 * A context: its configuration, the disk cache, the program table (table.c), the header memo,
 * the manifest it records op variants to, its counters, and one slot for an upper layer's state.
 * The struct is the jit layer's own (its files share it); layers above use the functions.
 */
#ifndef KVJIT_CONTEXT_H
#define KVJIT_CONTEXT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "cache.h"
#include "includes.h"
#include "kvjit_tools.h"
#include "miss.h"
#include "program.h"

#define PROGRAM_BUCKETS 256u

struct kvjit_context {
  kvjit_cache *cache;
  int log;
  char *manifest_path;
  pthread_mutex_t lock;
  pthread_cond_t built; /* a program left PROGRAM_BUILDING or finished loading */
  struct kvjit_program *buckets[PROGRAM_BUCKETS];
  struct kvjit_program *retired; /* failed builds not remembered: freed with the context */
  /* An upper layer's state (the op layer's tables), made on first use: kvjit_context_extension(). */
  _Atomic(void *) extension;
  void (*extension_destroy)(void *);
  kvjit_include_memo *memo;
  int cache_disabled;          /* the disk cache was switched off (not degraded) */
  atomic_int manifest_warned;  /* the one warning about an unwritable manifest was given */
  atomic_uint_fast64_t memory_hits, disk_hits, compiles, compile_failures, compile_ns, loads, unpublished_compiles;
  atomic_int warned_unpublished;
  kvjit_stats base; /* the counters at the last kvjit_context_reset_stats() */
  kvjit_compile_mode compile_mode;
  atomic_uint_fast64_t not_cached; /* misses refused by KVJIT_COMPILE=never */
  kvjit_miss_log *misses;          /* lookups' misses, explained (miss.h) */
};

/** Append one line (no newline needed) to the context's manifest file, if it has one. Best effort. */
void kvjit_context_record(kvjit_context *ctx, const char *line);

/** 1 unless KVJIT_LOG / options.log is 0: warnings (a degraded dir, a full op table) are printed. */
int kvjit_context_warnings(const kvjit_context *ctx);

/**
 * The state an upper layer keeps per context (the op layer's tables), which this layer cannot name:
 * made by @p create on the first call (once, whichever thread gets there first), freed by
 * @p destroy with the context. Later calls are one atomic load. NULL when @p create failed (its
 * status is in the last error).
 */
void *kvjit_context_extension(kvjit_context *ctx, kvjit_status (*create)(void **out), void (*destroy)(void *));

/** kvjit_context_extension() for hot paths: inline, one acquire load once the state exists. */
static inline void *kvjit_context_extension_get(kvjit_context *ctx, kvjit_status (*create)(void **out),
                                                void (*destroy)(void *)) {
  void *extension = atomic_load_explicit(&ctx->extension, memory_order_acquire);
  return __builtin_expect(extension != NULL, 1) ? extension : kvjit_context_extension(ctx, create, destroy);
}

#endif
