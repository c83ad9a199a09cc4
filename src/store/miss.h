/*
 * Misses that explain themselves. A lookup that misses every cache finds the entries of the same
 * program and kernels (the op variant) through the cache's per-kernel index (cache.h), reads their
 * headers, and names the key input in which the nearest one differs from what this process asks
 * for: the NVRTC version, the target, the toolkit headers, the options, or the source and headers
 * (entry.h records their digests). Runs on the miss path only, before a compile, at a bounded cost
 * (one index file and at most KVJIT_MISS_CANDIDATES headers). The context keeps the explanations
 * (each key once) and counts them by cause.
 */
#ifndef KVJIT_MISS_H
#define KVJIT_MISS_H

#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "entry.h"
#include "key.h"
#include "kvjit.h"

/** Most entry headers one explanation reads (the index's newest first). */
#define KVJIT_MISS_CANDIDATES 16

/** What a lookup asked for, as the entry it would write records it. */
typedef struct kvjit_miss_query {
  kvjit_key key;
  kvjit_key_target target;
  kvjit_key content;
  kvjit_entry_digests digests;
  const char *program;
  size_t num_kernels;
  const char *const *kernels; /* canonical name expressions */
  const char *what;           /* how the message names it: the variant line, or the program and target */
  const char *nvrtc_path;     /* the NVRTC this process uses, NULL when none is loaded */
} kvjit_miss_query;

/** Explain why @p q is in no local cache dir of @p cache (see the file comment). Never fails. */
void kvjit_miss_explain(kvjit_cache *cache, const kvjit_miss_query *q, kvjit_miss_info *out);

/** A context's explained misses and their counts by cause. Thread-safe. */
typedef struct kvjit_miss_log kvjit_miss_log;

kvjit_status kvjit_miss_log_create(kvjit_miss_log **out);
void kvjit_miss_log_destroy(kvjit_miss_log *log);

/** Record @p info (the first KVJIT_MISSES_KEPT keys are kept) and count it; 0 when its key was
 *  recorded before (nothing counted then). */
int kvjit_miss_log_add(kvjit_miss_log *log, const kvjit_miss_info *info);

/** The counts by cause, KVJIT_MISS_CAUSES of them. */
void kvjit_miss_log_counts(const kvjit_miss_log *log, uint64_t *counts);

/** kvjit_context_misses() of this log. */
kvjit_status kvjit_miss_log_copy(const kvjit_miss_log *log, kvjit_miss_info *out, size_t capacity, size_t *count);

#endif
