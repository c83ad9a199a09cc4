/*
 * The context: configuration, the in-memory program table (build once per key, failures
 * remembered), the disk cache and NVRTC behind it, loading into the driver, the lock-free fast
 * table for op hot paths, and counters. Launches and kernel attributes: launch.c; handles: handle.c.
 */
#include "jit.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "bundle.h"
#include "cache.h"
#include "compile.h"
#include "config.h"
#include "entry.h"
#include "fast_table.h"
#include "pack.h"
#include "includes.h"
#include "miss.h"
#include "names.h"
#include "nvrtc_lib.h"
#include "parse.h"
#include "program.h"
#include "request.h"
#include "safe_fs.h"
#include "status.h"
#include "target.h"

#define PROGRAM_BUCKETS 256u

struct kvjit_context {
  kvjit_cache *cache;
  int log;
  char *manifest_path;
  pthread_mutex_t lock;
  pthread_cond_t built; /* a program left PROGRAM_BUILDING or finished loading */
  struct kvjit_program *buckets[PROGRAM_BUCKETS];
  struct kvjit_program *retired; /* failed builds not remembered: freed with the context */
  kvjit_fast_table *fast;
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

/* ---- context ------------------------------------------------------------------------------ */

kvjit_status kvjit_context_create(kvjit_context **out, const kvjit_context_options *options) {
  if (out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "out is NULL");
  *out = NULL;
  kvjit_context_options defaults = KVJIT_CONTEXT_OPTIONS_INIT;
  if (options == NULL) options = &defaults;
  kvjit_status vst = kvjit_check_version(options->version, KVJIT_CONTEXT_OPTIONS_VERSION, "options",
                                         "KVJIT_CONTEXT_OPTIONS_INIT");
  if (vst != KVJIT_OK) return vst;
  kvjit_context_config config;
  vst = kvjit_context_config_make(options, &config);
  if (vst != KVJIT_OK) return vst;
  const kvjit_cache_config cc = config.cache;
  const int log = config.log;
  kvjit_context *ctx = calloc(1, sizeof *ctx);
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "context: out of memory");
  pthread_mutex_init(&ctx->lock, NULL);
  pthread_cond_init(&ctx->built, NULL);
  if (kvjit_fast_table_create(&ctx->fast) != KVJIT_OK || kvjit_include_memo_create(&ctx->memo) != KVJIT_OK ||
      kvjit_miss_log_create(&ctx->misses) != KVJIT_OK) {
    kvjit_context_destroy(ctx);
    return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "context: out of memory");
  }

  ctx->log = log;
  ctx->cache_disabled = cc.disabled;
  ctx->compile_mode = config.compile_mode;
  kvjit_status st = kvjit_cache_open(&ctx->cache, &cc);
  kvjit_context_config_free(&config);
  if (st != KVJIT_OK) {
    kvjit_context_destroy(ctx);
    return st;
  }
  const char *manifest = options->manifest_path && options->manifest_path[0] ? options->manifest_path
                                                                             : kvjit_env_text("KVJIT_MANIFEST");
  if (manifest) {
    ctx->manifest_path = strdup(manifest);
    if (ctx->manifest_path == NULL) {
      kvjit_context_destroy(ctx);
      return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "context: out of memory");
    }
  }
  kvjit_clear_error();
  *out = ctx;
  return KVJIT_OK;
}

static void program_free(kvjit_program *p, const kvjit_driver *drv) {
  /* An alias's library and kernels are its bundle's. */
  if (p->library && drv && p->bundle == NULL) drv->cuLibraryUnload(p->library);
  for (size_t i = 0; i < p->num_kernels; i++) {
    if (p->names) free(p->names[i]);
    if (p->lowered) free(p->lowered[i]);
  }
  free(p->names);
  free(p->lowered);
  if (p->bundle == NULL) free(atomic_load(&p->kernels));
  free(p->payload);
  free(p->retired);
  if (p->retired_lowered) {
    for (size_t i = 0; i < p->num_kernels; i++) free(p->retired_lowered[i]);
    free(p->retired_lowered);
  }
  free(p->name);
  free(p->error);
  free(p->log);
  free(p);
}

static int any_loaded(const kvjit_program *list) {
  for (const kvjit_program *p = list; p; p = p->next) {
    if (p->library != NULL) return 1;
  }
  return 0;
}

static void free_list(kvjit_program *p, const kvjit_driver *drv) {
  while (p) {
    kvjit_program *next = p->next;
    program_free(p, drv);
    p = next;
  }
}

void kvjit_context_destroy(kvjit_context *ctx) {
  if (ctx == NULL) return;
  const kvjit_driver *drv = NULL;
  int loaded = 0;
  for (size_t b = 0; b < PROGRAM_BUCKETS; b++) loaded |= any_loaded(ctx->buckets[b]);
  if (loaded && kvjit_driver_get(&drv) != KVJIT_OK) drv = NULL;
  for (size_t b = 0; b < PROGRAM_BUCKETS; b++) free_list(ctx->buckets[b], drv);
  free_list(ctx->retired, drv);
  kvjit_fast_table_destroy(ctx->fast);
  kvjit_include_memo_destroy(ctx->memo);
  kvjit_miss_log_destroy(ctx->misses);
  kvjit_cache_close(ctx->cache);
  free(ctx->manifest_path);
  pthread_cond_destroy(&ctx->built);
  pthread_mutex_destroy(&ctx->lock);
  free(ctx);
}

/* Every counter as of now, since the context was created. */
static void counters_now(const kvjit_context *ctx, kvjit_stats *out) {
  const kvjit_cache_counters *cc = kvjit_cache_get_counters(ctx->cache);
  memset(out, 0, sizeof *out);
  out->version = KVJIT_STATS_VERSION;
  out->memory_hits = atomic_load(&ctx->memory_hits);
  out->disk_hits = atomic_load(&ctx->disk_hits);
  out->compiles = atomic_load(&ctx->compiles);
  out->compile_failures = atomic_load(&ctx->compile_failures);
  out->compile_ns = atomic_load(&ctx->compile_ns);
  out->bad_entries = atomic_load(&cc->bad_entries);
  out->disk_writes = atomic_load(&cc->disk_writes);
  out->write_failures = atomic_load(&cc->write_failures);
  out->lock_waits = atomic_load(&cc->lock_waits);
  out->lock_timeouts = atomic_load(&cc->lock_timeouts);
  out->loads = atomic_load(&ctx->loads);
  out->evictions = atomic_load(&cc->evictions);
  out->unpublished_compiles = atomic_load(&ctx->unpublished_compiles);
  out->not_cached = atomic_load(&ctx->not_cached);
  const kvjit_remote_counters *rc = kvjit_cache_remote_counters(ctx->cache);
  out->remote_hits = atomic_load(&rc->hits);
  out->remote_misses = atomic_load(&rc->misses);
  out->remote_errors = atomic_load(&rc->errors);
  out->remote_timeouts = atomic_load(&rc->timeouts);
  out->remote_skipped = atomic_load(&rc->skipped);
  out->remote_writes = atomic_load(&rc->writes);
  out->remote_bytes_in = atomic_load(&rc->bytes_in);
  out->remote_bytes_out = atomic_load(&rc->bytes_out);
  uint64_t by_cause[KVJIT_MISS_CAUSES];
  kvjit_miss_log_counts(ctx->misses, by_cause);
  out->misses_cold = by_cause[KVJIT_MISS_COLD];
  out->misses_nvrtc = by_cause[KVJIT_MISS_NVRTC];
  out->misses_target = by_cause[KVJIT_MISS_TARGET];
  out->misses_toolkit = by_cause[KVJIT_MISS_TOOLKIT];
  out->misses_options = by_cause[KVJIT_MISS_OPTIONS];
  out->misses_source = by_cause[KVJIT_MISS_SOURCE];
  out->misses_other = by_cause[KVJIT_MISS_OTHER];
}

/* Where each version's fields end: a caller of version V gets exactly those (never more). */
static const size_t stats_end[KVJIT_STATS_VERSION + 1] = {0, offsetof(kvjit_stats, not_cached),
                                                           offsetof(kvjit_stats, misses_cold), sizeof(kvjit_stats)};

kvjit_status kvjit_context_stats(const kvjit_context *ctx, kvjit_stats *out) {
  if (ctx == NULL || out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx or out is NULL");
  kvjit_status st = kvjit_check_version(out->version, KVJIT_STATS_VERSION, "stats", "KVJIT_STATS_INIT");
  if (st != KVJIT_OK) return st;
  kvjit_stats now;
  counters_now(ctx, &now);
  pthread_mutex_lock((pthread_mutex_t *)(uintptr_t)&ctx->lock);
  const kvjit_stats base = ctx->base;
  pthread_mutex_unlock((pthread_mutex_t *)(uintptr_t)&ctx->lock);
  /* Every field after version is a uint64_t counter: subtract the reset's baseline. */
  uint64_t *n = &now.memory_hits;
  const uint64_t *b = &base.memory_hits;
  for (size_t i = 0; i < (sizeof now - offsetof(kvjit_stats, memory_hits)) / sizeof(uint64_t); i++) n[i] -= b[i];
  size_t from = offsetof(kvjit_stats, memory_hits);
  memcpy((char *)out + from, (const char *)&now + from, stats_end[out->version] - from);
  return KVJIT_OK;
}

kvjit_status kvjit_context_misses(const kvjit_context *ctx, kvjit_miss_info *out, size_t capacity, size_t *count) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx is NULL");
  return kvjit_miss_log_copy(ctx->misses, out, capacity, count);
}

kvjit_status kvjit_context_reset_stats(kvjit_context *ctx) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx is NULL");
  kvjit_stats now;
  counters_now(ctx, &now);
  pthread_mutex_lock(&ctx->lock);
  ctx->base = now;
  pthread_mutex_unlock(&ctx->lock);
  return KVJIT_OK;
}

kvjit_status kvjit_context_remote(kvjit_context *ctx, const char **urls, int *read_write, int probe, int *reachable) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx is NULL");
  if (urls) *urls = kvjit_cache_remote_urls(ctx->cache);
  if (read_write) *read_write = kvjit_cache_remote_writable(ctx->cache);
  if (reachable) *reachable = 0;
  if (probe && reachable && kvjit_cache_remote_urls(ctx->cache)[0]) {
    const kvjit_key nobody = {0, 0}; /* no program hashes to it: a 404 from a working remote */
    *reachable = kvjit_cache_find(ctx->cache, &nobody) == 0;
  }
  return KVJIT_OK;
}

kvjit_status kvjit_context_cache_info(const kvjit_context *ctx, kvjit_cache_info *out) {
  if (ctx == NULL || out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx or out is NULL");
  kvjit_cache_get_info(ctx->cache, out);
  return KVJIT_OK;
}

kvjit_include_memo *kvjit_context_memo(kvjit_context *ctx) { return ctx->memo; }

void kvjit_context_count_memory_hit(kvjit_context *ctx) { atomic_fetch_add_explicit(&ctx->memory_hits, 1, memory_order_relaxed); }

int kvjit_context_logging(const kvjit_context *ctx) { return ctx->log == 1; }

int kvjit_context_warnings(const kvjit_context *ctx) { return ctx->log != 0; }

void kvjit_context_record(kvjit_context *ctx, const char *line) {
  if (ctx->manifest_path == NULL) return;
  char buf[1024];
  int n = snprintf(buf, sizeof buf, "%s\n", line);
  if (n <= 0 || (size_t)n >= sizeof buf) return;
  /* One write() with O_APPEND: lines from concurrent processes never interleave. A FIFO, device or
   * link is refused without blocking (kvjit_open_regular()). */
  kvjit_status target = kvjit_cache_check_target(ctx->manifest_path, "KVJIT_MANIFEST");
  int fd = target == KVJIT_OK ? kvjit_open_regular(ctx->manifest_path, O_WRONLY | O_APPEND | O_CREAT, 0644, NULL) : -1;
  int err = target != KVJIT_OK ? EPERM : fd < 0 ? errno : 0;
  if (fd >= 0) {
    ssize_t w = write(fd, buf, (size_t)n);
    err = w == n ? 0 : w < 0 ? errno : ENOSPC;
    if (close(fd) != 0 && err == 0) err = errno;
  }
  int expected = 0;
  if (err != 0 && ctx->log != 0 && atomic_compare_exchange_strong(&ctx->manifest_warned, &expected, 1)) {
    char why[512];
    snprintf(why, sizeof why, "%s", target != KVJIT_OK ? kvjit_last_error()
                                    : err == EINVAL      ? "not a regular file"
                                                         : strerror(err));
    kvjit_log_line("warning: cannot record store variants to the manifest %s: %s%s", ctx->manifest_path, why,
                   "; later lines are dropped silently");
  }
}

/* ---- program table ------------------------------------------------------------------------- */

static kvjit_program *table_find(kvjit_context *ctx, const kvjit_key *key) {
  for (kvjit_program *p = ctx->buckets[key->low % PROGRAM_BUCKETS]; p; p = p->next) {
    if (kvjit_key_equal(&p->key, key)) return p;
  }
  return NULL;
}

/* Under ctx->lock: move a program whose failure is not remembered out of the table. */
static void table_retire(kvjit_context *ctx, kvjit_program *p) {
  for (kvjit_program **at = &ctx->buckets[p->key.low % PROGRAM_BUCKETS]; *at; at = &(*at)->next) {
    if (*at == p) {
      *at = p->next;
      p->next = ctx->retired;
      ctx->retired = p;
      return;
    }
  }
}

/* Failures that are the same on every try: remembered. Out of memory, I/O and the like are not. */
static int failure_is_lasting(kvjit_status st) {
  return st == KVJIT_ERR_COMPILE || st == KVJIT_ERR_NVRTC || st == KVJIT_ERR_NO_NVRTC || st == KVJIT_ERR_UNSUPPORTED ||
         st == KVJIT_ERR_INVALID_ARGUMENT;
}

static kvjit_program *program_new(const kvjit_request *req, const kvjit_key_target *target, const kvjit_key *key) {
  kvjit_program *p = calloc(1, sizeof *p);
  if (p == NULL || (p->name = strdup(req->desc->name)) == NULL) {
    free(p);
    return NULL;
  }
  p->key = *key;
  kvjit_key_hex(key, p->key_hex);
  p->content = req->content;
  kvjit_request_digests(req, &p->digests);
  p->target = *target;
  p->arch = kvjit_target_code(target);
  p->state = PROGRAM_BUILDING;
  p->publishable = 1;
  return p;
}

/* Write a payload to the disk cache. KVJIT_ERR_IO (reason in the last error) when it is not on
 * disk afterwards: a runtime lookup carries on memory-only, a prewarm reports the failure. A
 * compile kept in memory on purpose (after a state-leaking one) is KVJIT_OK: it is counted. */
static kvjit_status publish(kvjit_context *ctx, const kvjit_program_label *label, const kvjit_key_target *target,
                            const kvjit_key *key, const kvjit_key *content, const kvjit_entry_digests *digests,
                            const char *program, size_t num_kernels,
                            const char *const *kernels, const uint8_t *payload, size_t payload_len,
                            const char *const *lowered, int publishable) {
  if (!publishable) {
    /* NVRTC compiled this after a state-leaking option in this process: it may differ from what
     * a fresh process makes, so it stays in this process (issue 19; README "For kernel authors"). */
    atomic_fetch_add(&ctx->unpublished_compiles, 1);
    if (ctx->log != 0 && atomic_exchange(&ctx->warned_unpublished, 1) == 0) {
      kvjit_log_line("a compile with --Ofast-compile ran in this process; NVRTC compiles differently after it, so "
                     "later compiles are kept in memory, not written to the cache");
    }
    return KVJIT_OK;
  }
  if (!kvjit_cache_writable(ctx->cache)) {
    return kvjit_fail(KVJIT_ERR_IO, "not cached: %s", kvjit_cache_unwritable_reason(ctx->cache));
  }
  char compiler[32];
  snprintf(compiler, sizeof compiler, "NVRTC %d.%d", target->nvrtc_major, target->nvrtc_minor);
  kvjit_entry_digests recorded = *digests;
  kvjit_nvrtc_identity(&recorded.nvrtc);
  kvjit_entry_meta meta = {.key = *key,
                           .content = *content,
                           .digests = &recorded,
                           .target = *target,
                           .created = (int64_t)time(NULL),
                           .program = program,
                           .op = label && label->op ? label->op : "",
                           .variant = label && label->variant ? label->variant : "",
                           .compiler = compiler,
                           .num_kernels = num_kernels,
                           .kernels = kernels,
                           .lowered = lowered};
  uint8_t *buf = NULL;
  size_t len = 0;
  kvjit_status st = kvjit_entry_encode(&buf, &len, &meta, payload, payload_len);
  if (st != KVJIT_OK) return kvjit_fail(KVJIT_ERR_IO, "not cached: %s", kvjit_last_error());
  st = kvjit_cache_write(ctx->cache, key, buf, len);
  /* A fresh compile goes to the remote tier too: the next host that misses fetches it. */
  kvjit_cache_push(ctx->cache, key, buf, len);
  free(buf);
  return st;
}

static kvjit_status bundle_program(kvjit_context *ctx, const kvjit_entry_view *alias, const kvjit_entry_alias *a,
                                   kvjit_program **out);

/*
 * Read @p key's entry, dir by dir: an entry of its own, or an alias whose bundle holds its kernel.
 * With @p bundle, an alias's bundle becomes a program of the table (read once per context) and
 * *bundle points at it; without, the bundle's entry is only checked. An alias that fails is passed
 * over (a dir after it may have the kernel's own entry) and, found nowhere, is a miss.
 */
/* An alias read from the cache: usable when its bundle is (and, with @p bundle, loaded). */
static int alias_usable(kvjit_context *ctx, const kvjit_key *key, const kvjit_entry_view *view, kvjit_program **bundle) {
  kvjit_entry_alias a;
  kvjit_entry_alias_get(view, &a);
  if (bundle ? bundle_program(ctx, view, &a, bundle) == KVJIT_OK : kvjit_bundle_entry_usable(ctx->cache, view, &a)) {
    return 1;
  }
  if (ctx->log == 1) {
    char hex[33], bhex[33];
    kvjit_key_hex(key, hex);
    kvjit_key_hex(&a.bundle, bhex);
    kvjit_log_line("alias %s: bundle %s is gone or does not hold its kernel: a miss", hex, bhex);
  }
  return 0;
}

/* The local dirs in order, then (@p remote) the remote tier: the first entry that is usable. */
static kvjit_status read_resolved(kvjit_context *ctx, const kvjit_key *key, uint8_t **file, kvjit_entry_view *view,
                                  kvjit_program **bundle, int remote) {
  if (bundle) *bundle = NULL;
  size_t cursor = 0;
  while (kvjit_cache_read_from(ctx->cache, key, &cursor, file, view) == KVJIT_OK) {
    if (view->target.kind != KVJIT_PAYLOAD_ALIAS || alias_usable(ctx, key, view, bundle)) return KVJIT_OK;
    free(*file);
    *file = NULL;
  }
  /* An alias fetched from the remote fetches its bundle the same way (kvjit_cache_read()). */
  if (remote && kvjit_cache_fetch(ctx->cache, key, file, view) == KVJIT_OK) {
    if (view->target.kind != KVJIT_PAYLOAD_ALIAS || alias_usable(ctx, key, view, bundle)) return KVJIT_OK;
    free(*file);
    *file = NULL;
  }
  return KVJIT_ERR_NOT_FOUND;
}

int kvjit_context_entry_usable(kvjit_context *ctx, const kvjit_key *key) {
  uint8_t *file = NULL;
  kvjit_entry_view view;
  if (read_resolved(ctx, key, &file, &view, NULL, 1) != KVJIT_OK) return 0;
  free(file);
  return 1;
}

/* How a miss is named: an op's by its variant's manifest line, a program by its name and target. */
static void miss_what(const kvjit_request *req, const kvjit_program_label *label, const kvjit_key_target *target,
                      const kvjit_key *key, char *what, size_t cap) {
  char hex[33], name[32];
  kvjit_key_hex(key, hex);
  kvjit_target_name(kvjit_target_code(target), name, sizeof name);
  if (label && label->variant && label->variant[0]) {
    snprintf(what, cap, "%s (key %.12s)", label->variant, hex);
  } else {
    snprintf(what, cap, "program %s for %s (key %.12s)", req->desc->name, name, hex);
  }
}

/* What the entry of @p req would record, to compare with the entries that are there (miss.h). */
static void miss_query(const kvjit_request *req, const kvjit_key_target *target, const kvjit_key *key,
                       const char *what, kvjit_miss_query *q) {
  const kvjit_nvrtc *nv = NULL;
  memset(q, 0, sizeof *q);
  q->key = *key;
  q->target = *target;
  q->content = req->content;
  kvjit_request_digests(req, &q->digests);
  q->program = req->desc->name;
  q->num_kernels = req->desc->num_kernels;
  q->kernels = (const char *const *)req->kernels;
  q->what = what;
  if (kvjit_nvrtc_get(&nv) == KVJIT_OK) {
    q->nvrtc_path = nv->path;
    q->digests.nvrtc = nv->identity;
  }
  kvjit_clear_error();
}

/* A lookup's miss explained, kept and counted once per key; logged as it happens unless the
 * compile mode's own line says it (a cold miss only at KVJIT_LOG=1: every first use is one). */
static void explain_miss(kvjit_context *ctx, const kvjit_request *req, const kvjit_program_label *label,
                         const kvjit_key_target *target, const kvjit_key *key, kvjit_miss_info *info) {
  char what[640];
  miss_what(req, label, target, key, what, sizeof what);
  kvjit_miss_query q;
  miss_query(req, target, key, what, &q);
  kvjit_miss_explain(ctx->cache, &q, info);
  if (!kvjit_miss_log_add(ctx->misses, info) || ctx->compile_mode != KVJIT_COMPILE_ALWAYS) return;
  if ((info->cause == KVJIT_MISS_COLD && ctx->log == 1) || (info->cause != KVJIT_MISS_COLD && ctx->log != 0)) {
    kvjit_log_line("cache miss: %s", info->message);
  }
}

/* A miss in every cache, under KVJIT_COMPILE=warn or never: one line naming it (warn), or
 * KVJIT_ERR_NOT_CACHED naming it (never), with its explanation when there is one. */
static kvjit_status miss_allowed(kvjit_context *ctx, const kvjit_request *req, const kvjit_program_label *label,
                                 const kvjit_key_target *target, const kvjit_key *key, const kvjit_miss_info *why) {
  char what[sizeof why->message];
  if (why) memcpy(what, why->message, sizeof what);
  else miss_what(req, label, target, key, what, sizeof what);
  if (ctx->compile_mode == KVJIT_COMPILE_NEVER) {
    atomic_fetch_add(&ctx->not_cached, 1);
    return kvjit_fail(KVJIT_ERR_NOT_CACHED, "not cached, and KVJIT_COMPILE=never: %s", what);
  }
  if (ctx->log != 0) kvjit_log_line("cache miss, compiling (KVJIT_COMPILE=warn): %s", what);
  return KVJIT_OK;
}

/* NVRTC, counted and logged; the result is published when it may be. */
kvjit_status kvjit_context_compile(kvjit_context *ctx, const kvjit_request *req, const kvjit_program_label *label,
                                   const kvjit_key_target *target, const kvjit_key *key, int explain,
                                   kvjit_compiled *compiled, kvjit_status *published) {
  return kvjit_context_compile_within(ctx, req, label, target, key, explain, compiled, published, SIZE_MAX);
}

kvjit_status kvjit_context_compile_within(kvjit_context *ctx, const kvjit_request *req,
                                          const kvjit_program_label *label, const kvjit_key_target *target,
                                          const kvjit_key *key, int explain, kvjit_compiled *compiled,
                                          kvjit_status *published, size_t max_payload) {
  *published = KVJIT_OK;
  kvjit_miss_info why;
  if (explain) explain_miss(ctx, req, label, target, key, &why);
  if (ctx->compile_mode != KVJIT_COMPILE_ALWAYS) {
    kvjit_status refused = miss_allowed(ctx, req, label, target, key, explain ? &why : NULL);
    if (refused != KVJIT_OK) {
      memset(compiled, 0, sizeof *compiled);
      return refused;
    }
  }
  kvjit_request_input input;
  kvjit_status st = kvjit_request_input_make(req, &input);
  if (st != KVJIT_OK) {
    memset(compiled, 0, sizeof *compiled);
    return st;
  }
  st = kvjit_nvrtc_compile(compiled, &input.in, target);
  kvjit_request_input_free(&input);
  char name[32];
  kvjit_target_name(kvjit_target_code(target), name, sizeof name);
  if (st == KVJIT_OK) {
    atomic_fetch_add(&ctx->compiles, 1);
    atomic_fetch_add(&ctx->compile_ns, compiled->ns);
    if (ctx->log == 1) kvjit_log_line("compiled %s for %s in %.1f ms", req->desc->name, name, (double)compiled->ns / 1e6);
    if (compiled->payload_len > max_payload) {
      *published = KVJIT_ERR_BUSY;
      return st;
    }
    kvjit_entry_digests digests;
    kvjit_request_digests(req, &digests);
    *published = publish(ctx, label, target, key, &req->content, &digests, req->desc->name, req->desc->num_kernels,
                         (const char *const *)req->kernels, compiled->payload, compiled->payload_len,
                         (const char *const *)compiled->lowered, compiled->publishable);
  } else if (st != KVJIT_ERR_NO_NVRTC) {
    atomic_fetch_add(&ctx->compile_failures, 1);
    if (ctx->log == 1) kvjit_log_line("compile of %s for %s failed: %s", req->desc->name, name, kvjit_last_error());
  }
  return st;
}

/*
 * Get the payload for key: disk, or compile (under the cross-process lock) and publish. With
 * @p bundle (a build that will be loaded), an alias on disk gives its bundle's program there and
 * no payload; without, an alias counts as found once its bundle is checked.
 */
static kvjit_status obtain_payload(kvjit_context *ctx, const kvjit_request *req, const kvjit_program_label *label,
                                   const kvjit_key_target *target, const kvjit_key *key, uint8_t **file,
                                   kvjit_entry_view *view, kvjit_compiled *compiled, kvjit_origin *origin,
                                   kvjit_status *published, kvjit_program **bundle) {
  memset(compiled, 0, sizeof *compiled);
  *published = KVJIT_OK;
  if (read_resolved(ctx, key, file, view, bundle, 1) == KVJIT_OK) {
    *origin = KVJIT_FROM_DISK;
    return KVJIT_OK;
  }
  kvjit_cache_lock lock;
  int locked = kvjit_cache_lock_key(ctx->cache, key, &lock);
  /* Whoever held the lock may have published it meanwhile (the remote was asked just before). */
  if (read_resolved(ctx, key, file, view, bundle, 0) == KVJIT_OK) {
    if (locked) kvjit_cache_unlock_key(&lock);
    *origin = KVJIT_FROM_DISK;
    return KVJIT_OK;
  }
  kvjit_status st = kvjit_context_compile(ctx, req, label, target, key, bundle != NULL, compiled, published);
  if (locked) kvjit_cache_unlock_key(&lock);
  /* "compile" only when NVRTC ran (and succeeded or said why not): a miss refused under
   * KVJIT_COMPILE=never, or a failure before NVRTC, obtained nothing. */
  *origin = st == KVJIT_OK || st == KVJIT_ERR_COMPILE || st == KVJIT_ERR_NVRTC ? KVJIT_FROM_COMPILE : KVJIT_FROM_NOWHERE;
  return st;
}

static char *dup_n(const char *s, size_t n) {
  char *p = malloc(n + 1);
  if (p) {
    memcpy(p, s, n);
    p[n] = '\0';
  }
  return p;
}

/* Fill a BUILDING program: payload and lowered names from disk or NVRTC. Runs without ctx->lock. */
static kvjit_status build_program(kvjit_context *ctx, kvjit_program *p, const kvjit_request *req,
                                  const kvjit_program_label *label, int ptx_fallback, kvjit_origin *origin) {
  uint8_t *file = NULL;
  kvjit_entry_view view;
  kvjit_compiled compiled;
  const size_t n = req->desc->num_kernels;
  kvjit_program *bundle = NULL;
  kvjit_status st, published;
  int retried = 0;
again:
  st = obtain_payload(ctx, req, label, &p->target, &p->key, &file, &view, &compiled, origin, &published, &bundle);
  if (compiled.log) {
    const char *note = ptx_fallback ? "kvjit: the device is newer than NVRTC knows; built PTX for the newest arch "
                                      "NVRTC supports, finished by the driver\n"
                                    : "";
    size_t len = strlen(note) + strlen(compiled.log) + 1;
    if ((p->log = malloc(len)) != NULL) snprintf(p->log, len, "%s%s", note, compiled.log);
  }
  if (st != KVJIT_OK) goto done;
  if (*origin == KVJIT_FROM_DISK && view.num_kernels != n) {
    char why[96];
    snprintf(why, sizeof why, "lists %u kernels, %zu asked for", view.num_kernels, n);
    if (!retried) {
      /* An entry of other kernels than asked (issue 15): moved aside (or remembered) and counted
       * by kvjit_cache_reject(); then one more look, which rebuilds it. */
      kvjit_cache_reject(ctx->cache, &p->key, why);
      free(file);
      file = NULL;
      retried = 1;
      goto again;
    }
    st = kvjit_fail(KVJIT_ERR_CORRUPT, "cache entry %s %s, even rebuilt", p->key_hex, why);
    goto done;
  }
  p->names = calloc(n, sizeof *p->names);
  p->lowered = calloc(n, sizeof *p->lowered);
  if (!p->names || !p->lowered) {
    st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "program: out of memory");
    goto done;
  }
  p->num_kernels = n;
  for (size_t i = 0; i < n; i++) {
    p->names[i] = strdup(req->kernels[i]);
    if (*origin == KVJIT_FROM_DISK) {
      const char *name, *lowered;
      size_t name_len, lowered_len;
      kvjit_entry_kernel(&view, (uint32_t)i, &name, &name_len, &lowered, &lowered_len);
      p->lowered[i] = dup_n(lowered, lowered_len);
    } else {
      p->lowered[i] = strdup(compiled.lowered[i]);
    }
    if (!p->names[i] || !p->lowered[i]) {
      st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "program: out of memory");
      goto done;
    }
  }
  if (bundle != NULL) {
    /* An alias: the code is the bundle's (loaded with it, kvjit_program_load()). */
    p->bundle = bundle;
    kvjit_entry_alias a;
    kvjit_entry_alias_get(&view, &a);
    p->bundle_index = a.index;
    p->from_disk = 1;
  } else if (*origin == KVJIT_FROM_DISK) {
    /* Kept in memory: kvjit_program_binary() hands it out and a load needs it. */
    if ((p->payload = malloc(view.payload_len + 1)) == NULL) {
      st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "program: out of memory");
      goto done;
    }
    memcpy(p->payload, view.payload, view.payload_len);
    p->payload[view.payload_len] = 0;
    p->payload_len = view.payload_len;
    p->from_disk = 1;
  } else {
    p->payload = compiled.payload;
    p->payload_len = compiled.payload_len;
    p->publishable = compiled.publishable;
    compiled.payload = NULL;
  }
done:
  free(file);
  kvjit_compiled_free(&compiled);
  return st;
}

kvjit_status kvjit_program_acquire(kvjit_context *ctx, const kvjit_request *req, const kvjit_key_target *target,
                                   const kvjit_key *key, int ptx_fallback, const kvjit_program_label *label,
                                   kvjit_program **out, kvjit_origin *origin) {
  pthread_mutex_lock(&ctx->lock);
  kvjit_program *p = table_find(ctx, key);
  if (p != NULL) {
    while (p->state == PROGRAM_BUILDING) pthread_cond_wait(&ctx->built, &ctx->lock);
    pthread_mutex_unlock(&ctx->lock);
    atomic_fetch_add(&ctx->memory_hits, 1);
    if (origin) *origin = KVJIT_FROM_MEMORY;
    *out = p;
    if (p->state == PROGRAM_FAILED) return kvjit_fail(p->status, "%s", p->error ? p->error : "earlier build failed");
    return KVJIT_OK;
  }
  p = program_new(req, target, key);
  if (p == NULL) {
    pthread_mutex_unlock(&ctx->lock);
    return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "program: out of memory");
  }
  p->next = ctx->buckets[key->low % PROGRAM_BUCKETS];
  ctx->buckets[key->low % PROGRAM_BUCKETS] = p;
  pthread_mutex_unlock(&ctx->lock);

  kvjit_origin got = KVJIT_FROM_NOWHERE;
  kvjit_status st = build_program(ctx, p, req, label, ptx_fallback, &got);
  if (got == KVJIT_FROM_DISK) atomic_fetch_add(&ctx->disk_hits, 1);
  if (p->log == NULL) p->log = strdup("");

  pthread_mutex_lock(&ctx->lock);
  if (st == KVJIT_OK) {
    p->state = PROGRAM_READY;
  } else {
    p->status = st;
    p->error = strdup(kvjit_last_error());
    p->state = PROGRAM_FAILED;
    /* Remembered: the same program is not rebuilt on every call, unless the failure may pass. */
    if (!failure_is_lasting(st)) {
      p->transient = 1;
      table_retire(ctx, p);
    }
  }
  pthread_cond_broadcast(&ctx->built);
  pthread_mutex_unlock(&ctx->lock);
  if (origin) *origin = got;
  *out = p;
  if (st == KVJIT_OK) kvjit_clear_error();
  return st;
}

/* A bundle's program from its entry on disk (no request: the entry says everything). */
static kvjit_status bundle_from_disk(kvjit_context *ctx, kvjit_program *b) {
  uint8_t *file = NULL;
  kvjit_entry_view view;
  if (kvjit_cache_read(ctx->cache, &b->key, &file, &view) != KVJIT_OK) {
    return kvjit_fail(KVJIT_ERR_NOT_FOUND, "bundle %s: no entry", b->key_hex);
  }
  kvjit_status st = KVJIT_OK;
  const size_t n = view.num_kernels;
  if (view.target.kind != KVJIT_PAYLOAD_CUBIN) {
    st = kvjit_fail(KVJIT_ERR_CORRUPT, "bundle %s: not a cubin", b->key_hex);
    goto done;
  }
  b->target = view.target;
  b->arch = kvjit_target_code(&view.target);
  b->content = view.content;
  b->digests = view.digests;
  b->names = calloc(n, sizeof *b->names);
  b->lowered = calloc(n, sizeof *b->lowered);
  b->payload = malloc(view.payload_len + 1);
  b->name = dup_n(view.program, view.program_len);
  if (!b->names || !b->lowered || !b->payload || !b->name) {
    st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "program: out of memory");
    goto done;
  }
  b->num_kernels = n;
  for (size_t i = 0; i < n && st == KVJIT_OK; i++) {
    const char *name, *lowered;
    size_t name_len, lowered_len;
    kvjit_entry_kernel(&view, (uint32_t)i, &name, &name_len, &lowered, &lowered_len);
    b->names[i] = dup_n(name, name_len);
    b->lowered[i] = dup_n(lowered, lowered_len);
    if (!b->names[i] || !b->lowered[i]) st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "program: out of memory");
  }
  memcpy(b->payload, view.payload, view.payload_len);
  b->payload[view.payload_len] = 0;
  b->payload_len = view.payload_len;
  b->from_disk = 1;
done:
  free(file);
  return st;
}

/*
 * The program of an alias's bundle: the table's, or read from disk into the table (once per
 * context; a failed read is not remembered). OK only when it holds the alias's kernel.
 */
static kvjit_status bundle_program(kvjit_context *ctx, const kvjit_entry_view *alias, const kvjit_entry_alias *a,
                                   kvjit_program **out) {
  pthread_mutex_lock(&ctx->lock);
  kvjit_program *b = table_find(ctx, &a->bundle);
  if (b != NULL) {
    while (b->state == PROGRAM_BUILDING) pthread_cond_wait(&ctx->built, &ctx->lock);
  } else if ((b = calloc(1, sizeof *b)) != NULL) {
    b->key = a->bundle;
    kvjit_key_hex(&a->bundle, b->key_hex);
    b->state = PROGRAM_BUILDING;
    b->publishable = 1;
    b->next = ctx->buckets[a->bundle.low % PROGRAM_BUCKETS];
    ctx->buckets[a->bundle.low % PROGRAM_BUCKETS] = b;
    pthread_mutex_unlock(&ctx->lock);
    kvjit_status st = bundle_from_disk(ctx, b);
    if (b->name == NULL) b->name = strdup("(bundle)");
    if (b->log == NULL) b->log = strdup("");
    pthread_mutex_lock(&ctx->lock);
    if (st == KVJIT_OK) {
      b->state = PROGRAM_READY;
    } else {
      b->status = st;
      b->error = strdup(kvjit_last_error());
      b->state = PROGRAM_FAILED;
      b->transient = 1;
      table_retire(ctx, b);
    }
    pthread_cond_broadcast(&ctx->built);
  }
  pthread_mutex_unlock(&ctx->lock);
  if (b == NULL || b->state != PROGRAM_READY || a->index >= b->num_kernels) return KVJIT_ERR_NOT_FOUND;
  const char *name = b->names[a->index], *lowered = b->lowered[a->index];
  if (!kvjit_bundle_holds(alias, a, &b->target, &b->content, b->num_kernels, name, strlen(name), lowered, strlen(lowered))) {
    return KVJIT_ERR_NOT_FOUND;
  }
  *out = b;
  return KVJIT_OK;
}

/* ---- for bundle.c -------------------------------------------------------------------------- */

struct kvjit_cache *kvjit_context_cache(kvjit_context *ctx) { return ctx->cache; }

int kvjit_context_has_program(kvjit_context *ctx, const kvjit_key *key) {
  pthread_mutex_lock(&ctx->lock);
  int found = table_find(ctx, key) != NULL;
  pthread_mutex_unlock(&ctx->lock);
  return found;
}

void kvjit_context_count_disk_hits(kvjit_context *ctx, unsigned hits) { atomic_fetch_add(&ctx->disk_hits, hits); }

/* ---- loading -------------------------------------------------------------------------------- */

/*
 * The driver cannot use an entry read from disk, though it passed every check (issue 15: it rejects
 * the image, or finds no kernel of a lowered name in it): move it aside, or remember it when it lies
 * in a read-only layer, and count it (kvjit_cache_reject()); then look again once: the writable dir
 * may hold a good copy that a layer's bad entry shadowed, else this builds from source and publishes
 * over it. Readers may hold the old payload or names (kvjit_program_binary(), _lowered_name()):
 * those stay until the context goes.
 */
static kvjit_status rebuild_rejected(kvjit_context *ctx, kvjit_program *p, const kvjit_request *req,
                                     const kvjit_program_label *label, const char *why) {
  kvjit_cache_reject(ctx->cache, &p->key, why);
  uint8_t *file = NULL;
  kvjit_entry_view view;
  kvjit_compiled compiled;
  kvjit_origin origin;
  kvjit_status published;
  kvjit_status st =
      obtain_payload(ctx, req, label, &p->target, &p->key, &file, &view, &compiled, &origin, &published, NULL);
  if (st == KVJIT_OK && origin == KVJIT_FROM_DISK && view.target.kind == KVJIT_PAYLOAD_ALIAS) {
    /* An alias in another dir: this program needs a binary of its own, so build it. */
    free(file);
    file = NULL;
    st = kvjit_context_compile(ctx, req, label, &p->target, &p->key, 0, &compiled, &published);
    origin = KVJIT_FROM_COMPILE;
  }
  char **lowered = NULL;
  uint8_t *payload = NULL;
  size_t payload_len = 0;
  if (st == KVJIT_OK && origin == KVJIT_FROM_DISK && view.num_kernels != p->num_kernels) {
    st = kvjit_fail(KVJIT_ERR_CORRUPT, "cache entry %s lists %u kernels, %zu asked for", p->key_hex, view.num_kernels,
                    p->num_kernels);
  }
  if (st == KVJIT_OK && (lowered = calloc(p->num_kernels, sizeof *lowered)) == NULL) {
    st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "program: out of memory");
  }
  for (size_t i = 0; st == KVJIT_OK && i < p->num_kernels; i++) {
    if (origin == KVJIT_FROM_DISK) {
      const char *name, *low;
      size_t name_len, low_len;
      kvjit_entry_kernel(&view, (uint32_t)i, &name, &name_len, &low, &low_len);
      lowered[i] = dup_n(low, low_len);
    } else {
      lowered[i] = strdup(compiled.lowered[i]);
    }
    if (lowered[i] == NULL) st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "program: out of memory");
  }
  if (st == KVJIT_OK && origin == KVJIT_FROM_DISK) {
    payload_len = (size_t)view.payload_len;
    if ((payload = malloc(payload_len + 1)) == NULL) {
      st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "program: out of memory");
    } else {
      memcpy(payload, view.payload, payload_len);
      payload[payload_len] = 0;
    }
  } else if (st == KVJIT_OK) {
    payload = compiled.payload;
    payload_len = compiled.payload_len;
    compiled.payload = NULL;
  }
  if (st == KVJIT_OK) {
    free(p->retired);
    p->retired = p->payload;
    p->payload = payload;
    p->payload_len = payload_len;
    p->from_disk = origin == KVJIT_FROM_DISK;
    char **old = p->lowered;
    p->lowered = lowered;
    lowered = p->retired_lowered;
    p->retired_lowered = old;
  }
  if (lowered != NULL) {
    for (size_t i = 0; i < p->num_kernels; i++) free(lowered[i]);
    free(lowered);
  }
  free(file);
  kvjit_compiled_free(&compiled);
  return st;
}

/* The driver refused an alias's bundle: compile the alias's one kernel alone, write its own entry
 * over the alias, and make the program an ordinary one. */
static kvjit_status own_build(kvjit_context *ctx, kvjit_program *p, const kvjit_request *req,
                              const kvjit_program_label *label) {
  kvjit_compiled compiled;
  kvjit_status published; /* not on disk: this lookup carries on memory-only, as any miss does */
  kvjit_status st = kvjit_context_compile(ctx, req, label, &p->target, &p->key, 1, &compiled, &published);
  if (st == KVJIT_OK) {
    p->payload = compiled.payload;
    p->payload_len = compiled.payload_len;
    p->publishable = compiled.publishable;
    p->from_disk = 0;
    p->bundle = NULL;
    compiled.payload = NULL;
  }
  kvjit_compiled_free(&compiled);
  return st;
}

static kvjit_status load_library(kvjit_context *ctx, kvjit_program *p, const kvjit_request *req,
                                 const kvjit_program_label *label, const kvjit_driver *drv, CUlibrary *library,
                                 kvjit_kernel **kernels) {
  int rebuilt = 0;
again:;
  CUresult res = drv->cuLibraryLoadData(library, p->payload, NULL, NULL, 0, NULL, NULL, 0);
  if (res != CUDA_SUCCESS && p->from_disk && req != NULL && !rebuilt &&
      (res == CUDA_ERROR_INVALID_IMAGE || res == CUDA_ERROR_INVALID_PTX || res == CUDA_ERROR_NO_BINARY_FOR_GPU)) {
    /* A well-formed entry the driver rejects (e.g. a cubin built by a buggy toolchain). */
    kvjit_status st = rebuild_rejected(ctx, p, req, label, "the driver rejects its image");
    if (st != KVJIT_OK) return st;
    rebuilt = 1;
    goto again;
  }
  if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuLibraryLoadData");
  atomic_fetch_add(&ctx->loads, 1);
  *kernels = calloc(p->num_kernels, sizeof **kernels);
  if (*kernels == NULL) {
    drv->cuLibraryUnload(*library);
    return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "program: out of memory");
  }
  for (size_t i = 0; i < p->num_kernels; i++) {
    kvjit_kernel *k = &(*kernels)[i];
    k->program = p;
    k->name = p->names[i];
    k->lowered = p->lowered[i];
    atomic_init(&k->num_params, KVJIT_KERNEL_PARAMS_UNKNOWN);
    res = drv->cuLibraryGetKernel(&k->handle, *library, p->lowered[i]);
    if (res != CUDA_SUCCESS) {
      char what[300];
      snprintf(what, sizeof what, "cuLibraryGetKernel(\"%.200s\")", p->lowered[i]);
      kvjit_status st = kvjit_cuda_fail(drv, res, what);
      free(*kernels);
      *kernels = NULL;
      drv->cuLibraryUnload(*library);
      if (p->from_disk && req != NULL && !rebuilt) {
        /* A lowered name of the entry that its payload does not define as a kernel after all. */
        if ((st = rebuild_rejected(ctx, p, req, label, "the driver finds no kernel of a lowered name in it")) != KVJIT_OK)
          return st;
        rebuilt = 1;
        goto again;
      }
      return st;
    }
  }
  return KVJIT_OK;
}

kvjit_status kvjit_program_load(kvjit_context *ctx, kvjit_program *p, const kvjit_request *req,
                                const kvjit_program_label *label, const kvjit_driver *drv) {
  pthread_mutex_lock(&ctx->lock);
  while (p->loading) pthread_cond_wait(&ctx->built, &ctx->lock);
  if (p->library != NULL) {
    pthread_mutex_unlock(&ctx->lock);
    return KVJIT_OK;
  }
  p->loading = 1;
  pthread_mutex_unlock(&ctx->lock);
  CUlibrary library = NULL;
  kvjit_kernel *kernels = NULL;
  kvjit_status st;
  if (p->bundle != NULL) {
    /* An alias: load its bundle (once per context) and take its kernel. */
    kvjit_program *bundle = p->bundle;
    st = kvjit_program_load(ctx, bundle, NULL, NULL, drv);
    if (st == KVJIT_OK) {
      library = bundle->library;
      kernels = atomic_load_explicit(&bundle->kernels, memory_order_acquire) + p->bundle_index;
    } else if (req != NULL && (st = own_build(ctx, p, req, label)) == KVJIT_OK) {
      st = load_library(ctx, p, req, label, drv, &library, &kernels);
    }
  } else {
    /* Not remembered when it fails: a later call tries again (the driver's state may change). */
    st = load_library(ctx, p, req, label, drv, &library, &kernels);
  }
  pthread_mutex_lock(&ctx->lock);
  if (st == KVJIT_OK) {
    atomic_store_explicit(&p->kernels, kernels, memory_order_release);
    p->library = library;
  }
  p->loading = 0;
  pthread_cond_broadcast(&ctx->built);
  pthread_mutex_unlock(&ctx->lock);
  return st;
}

/* ---- the public loader ---------------------------------------------------------------------- */

/* desc->arch with the current device's compute capability filled in where it has none. */
static kvjit_status target_for_build(int code, int *out) {
  if (kvjit_target_cc(code) != 0) {
    *out = code;
    return KVJIT_OK;
  }
  int device_cc = 0;
  kvjit_status st = kvjit_current_sm(&device_cc);
  if (st != KVJIT_OK) {
    /* Copied first: the detail would otherwise be formatted into the buffer it is read from. */
    char why[256];
    snprintf(why, sizeof why, "%s", kvjit_last_error());
    return kvjit_fail(st, "desc->arch has no compute capability and there is no GPU to take it from (%s)", why);
  }
  *out = code | device_cc;
  return KVJIT_OK;
}

static kvjit_status keyed(const kvjit_request *req, int code, kvjit_key_target *target, kvjit_key *key,
                          int *ptx_fallback) {
  kvjit_status st = kvjit_target_resolve(target, code, ptx_fallback);
  if (st == KVJIT_OK) kvjit_request_key(req, target, key);
  return st;
}

kvjit_status kvjit_request_build_key(const kvjit_request *req, kvjit_key_target *target, kvjit_key *key) {
  int code, ptx_fallback = 0;
  kvjit_status st = target_for_build(req->desc->arch, &code);
  if (st == KVJIT_OK) st = keyed(req, code, target, key, &ptx_fallback);
  return st;
}

kvjit_status kvjit_program_get(kvjit_context *ctx, kvjit_program **out, kvjit_origin *origin,
                               const kvjit_program_desc *desc) {
  return kvjit_program_get_labeled(ctx, out, origin, desc, NULL);
}

kvjit_status kvjit_program_get_labeled(kvjit_context *ctx, kvjit_program **out, kvjit_origin *origin,
                                       const kvjit_program_desc *desc, const kvjit_program_label *label) {
  if (ctx == NULL || out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx or out is NULL");
  *out = NULL;
  kvjit_request req;
  kvjit_status st = kvjit_request_init(&req, ctx->memo, desc);
  if (st != KVJIT_OK) return st;
  const kvjit_driver *drv;
  int device_cc = 0, code;
  kvjit_key_target target;
  kvjit_key key;
  int ptx_fallback = 0;
  kvjit_program *p = NULL;
  if ((st = kvjit_driver_get(&drv)) != KVJIT_OK || (st = kvjit_driver_current_sm(drv, &device_cc, NULL)) != KVJIT_OK) {
    goto done;
  }
  code = kvjit_target_cc(desc->arch) == 0 ? desc->arch | device_cc : desc->arch;
  if ((st = kvjit_target_check_device(code, device_cc)) != KVJIT_OK) goto done;
  if ((st = keyed(&req, code, &target, &key, &ptx_fallback)) != KVJIT_OK) goto done;
  st = kvjit_program_acquire(ctx, &req, &target, &key, ptx_fallback, label, &p, origin);
  *out = p;
  if (st == KVJIT_OK) st = kvjit_program_load(ctx, p, &req, label, drv);
done:
  kvjit_request_free(&req);
  if (st == KVJIT_OK) kvjit_clear_error();
  return st;
}

kvjit_status kvjit_program_build(kvjit_context *ctx, kvjit_program **out, kvjit_origin *origin,
                                 const kvjit_program_desc *desc) {
  if (ctx == NULL || out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx or out is NULL");
  *out = NULL;
  kvjit_request req;
  kvjit_status st = kvjit_request_init(&req, ctx->memo, desc);
  if (st != KVJIT_OK) return st;
  int code, ptx_fallback = 0;
  kvjit_key_target target;
  kvjit_key key;
  if ((st = target_for_build(desc->arch, &code)) == KVJIT_OK &&
      (st = keyed(&req, code, &target, &key, &ptx_fallback)) == KVJIT_OK) {
    st = kvjit_program_acquire(ctx, &req, &target, &key, ptx_fallback, NULL, out, origin);
  }
  kvjit_request_free(&req);
  if (st == KVJIT_OK) kvjit_clear_error();
  return st;
}

kvjit_status kvjit_program_compile(kvjit_context *ctx, kvjit_origin *origin, const kvjit_program_desc *desc) {
  return kvjit_program_compile_labeled(ctx, origin, desc, NULL);
}

/* A compile-only failure, remembered in the table like a failed build (unless one is there). */
static void remember_failure(kvjit_context *ctx, const kvjit_request *req, const kvjit_key_target *target,
                             const kvjit_key *key, kvjit_status st, const char *log) {
  if (!failure_is_lasting(st)) return;
  kvjit_program *p = program_new(req, target, key);
  if (p == NULL || (p->error = strdup(kvjit_last_error())) == NULL || (p->log = strdup(log ? log : "")) == NULL) {
    if (p) program_free(p, NULL);
    return;
  }
  p->status = st;
  p->state = PROGRAM_FAILED;
  pthread_mutex_lock(&ctx->lock);
  if (table_find(ctx, key) == NULL) {
    p->next = ctx->buckets[key->low % PROGRAM_BUCKETS];
    ctx->buckets[key->low % PROGRAM_BUCKETS] = p;
    p = NULL;
  }
  pthread_mutex_unlock(&ctx->lock);
  if (p) program_free(p, NULL);
}

/* Compiling is for the disk cache: an entry that could not be written is a failure of
 * kvjit_program_compile() (a prewarm must not say "compiled" of what the next process compiles
 * again), unless the disk cache is switched off. */
kvjit_status kvjit_context_not_cached(kvjit_context *ctx, const kvjit_request *req, kvjit_status published) {
  if (published == KVJIT_OK || ctx->cache_disabled) return KVJIT_OK;
  char detail[512];
  snprintf(detail, sizeof detail, "%s", kvjit_last_error());
  return kvjit_fail(KVJIT_ERR_IO, "%s compiled but %s", req->desc->name, detail);
}

/* A program this context already has: make sure its entry is on disk. */
static kvjit_status compile_known(kvjit_context *ctx, kvjit_program *p, const kvjit_request *req,
                                  const kvjit_program_label *label, kvjit_origin *origin) {
  if (p->state == PROGRAM_FAILED) {
    if (origin) *origin = KVJIT_FROM_MEMORY;
    return kvjit_fail(p->status, "%s", p->error ? p->error : "earlier build failed");
  }
  if (kvjit_context_entry_usable(ctx, &p->key)) {
    atomic_fetch_add(&ctx->disk_hits, 1);
    if (origin) *origin = KVJIT_FROM_DISK;
    return KVJIT_OK;
  }
  /* Evicted or never written (memory-only): publish what is in memory, unless it was compiled
   * after a state-leaking compile (then it stays here; it was counted when it was compiled). An
   * alias is written again after its bundle (itself again too when that is gone). */
  kvjit_status st = KVJIT_OK;
  const kvjit_program *own = p->bundle ? p->bundle : p;
  if (own->publishable && !(p->bundle && kvjit_context_entry_usable(ctx, &own->key))) {
    kvjit_program_label bundle_label = {label ? label->op : NULL, NULL};
    st = publish(ctx, p->bundle ? &bundle_label : label, &own->target, &own->key, &own->content, &own->digests, own->name,
                 own->num_kernels, (const char *const *)own->names, own->payload, own->payload_len,
                 (const char *const *)own->lowered, 1);
  }
  if (st == KVJIT_OK && p->bundle && own->publishable) {
    kvjit_entry_alias a = {own->key, p->bundle_index, (uint32_t)own->num_kernels};
    st = kvjit_bundle_write_alias(ctx->cache, label, &p->target, &p->key, &p->content, &p->digests, p->name, p->names[0],
                                  p->lowered[0], &a);
  }
  atomic_fetch_add(&ctx->memory_hits, 1);
  if (origin) *origin = KVJIT_FROM_MEMORY;
  return kvjit_context_not_cached(ctx, req, st);
}

/* A prewarm into a shared remote: an entry found locally that the remote lacks goes up too, and
 * an alias's bundle with it (the alias alone would be a miss there). */
static void push_found(kvjit_context *ctx, const kvjit_key *key, const uint8_t *file, const kvjit_entry_view *view) {
  if (!kvjit_cache_remote_writable(ctx->cache)) return;
  kvjit_cache_push_if_absent(ctx->cache, key, file, (size_t)(view->payload - file) + (size_t)view->payload_len);
  if (view->target.kind != KVJIT_PAYLOAD_ALIAS) return;
  kvjit_entry_alias a;
  kvjit_entry_alias_get(view, &a);
  uint8_t *bundle = NULL;
  kvjit_entry_view b;
  if (kvjit_cache_read_local(ctx->cache, &a.bundle, &bundle, &b) != KVJIT_OK) return;
  kvjit_cache_push_if_absent(ctx->cache, &a.bundle, bundle, (size_t)(b.payload - bundle) + (size_t)b.payload_len);
  free(bundle);
}

kvjit_status kvjit_program_compile_labeled(kvjit_context *ctx, kvjit_origin *origin, const kvjit_program_desc *desc,
                                           const kvjit_program_label *label) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx is NULL");
  kvjit_request req;
  kvjit_status st = kvjit_request_init(&req, ctx->memo, desc);
  if (st != KVJIT_OK) return st;
  int code, ptx_fallback = 0;
  kvjit_key_target target;
  kvjit_key key;
  if ((st = target_for_build(desc->arch, &code)) != KVJIT_OK ||
      (st = keyed(&req, code, &target, &key, &ptx_fallback)) != KVJIT_OK) {
    goto done;
  }
  pthread_mutex_lock(&ctx->lock);
  kvjit_program *p = table_find(ctx, &key);
  while (p && p->state == PROGRAM_BUILDING) pthread_cond_wait(&ctx->built, &ctx->lock);
  pthread_mutex_unlock(&ctx->lock);
  if (p != NULL) {
    st = compile_known(ctx, p, &req, label, origin);
    goto done;
  }
  /* Not kept in memory: a build machine may compile thousands of programs it never loads. */
  uint8_t *file = NULL;
  kvjit_entry_view view;
  kvjit_compiled compiled;
  kvjit_origin got;
  kvjit_status published;
  st = obtain_payload(ctx, &req, label, &target, &key, &file, &view, &compiled, &got, &published, NULL);
  if (got == KVJIT_FROM_DISK) {
    atomic_fetch_add(&ctx->disk_hits, 1);
    if (st == KVJIT_OK && file != NULL) push_found(ctx, &key, file, &view);
  }
  if (st != KVJIT_OK) remember_failure(ctx, &req, &target, &key, st, compiled.log);
  if (st == KVJIT_OK) st = kvjit_context_not_cached(ctx, &req, published);
  free(file);
  kvjit_compiled_free(&compiled);
  if (origin) *origin = got;
done:
  kvjit_request_free(&req);
  if (st == KVJIT_OK) kvjit_clear_error();
  return st;
}

kvjit_status kvjit_program_find(kvjit_context *ctx, const kvjit_program_desc *desc, const kvjit_program_label *label,
                                int *where, kvjit_miss_info *why) {
  *where = 0;
  if (why) memset(why, 0, sizeof *why);
  kvjit_request req;
  kvjit_status st = kvjit_request_init(&req, ctx->memo, desc);
  if (st != KVJIT_OK) return st;
  int code, ptx_fallback = 0;
  kvjit_key_target target;
  kvjit_key key;
  if ((st = target_for_build(desc->arch, &code)) == KVJIT_OK &&
      (st = keyed(&req, code, &target, &key, &ptx_fallback)) == KVJIT_OK) {
    uint8_t *file = NULL;
    kvjit_entry_view view;
    /* Locally as a runtime lookup would resolve it (an alias counts with its bundle only); else
     * ask the remote (HEAD), which fetches nothing. */
    if (read_resolved(ctx, &key, &file, &view, NULL, 0) == KVJIT_OK) {
      free(file);
      *where = 1;
    } else {
      int remote = kvjit_cache_remote_has(ctx->cache, &key);
      *where = remote == 1 ? 2 : remote;
      if (why) {
        char what[640];
        miss_what(&req, label, &target, &key, what, sizeof what);
        kvjit_miss_query q;
        miss_query(&req, &target, &key, what, &q);
        kvjit_miss_explain(ctx->cache, &q, why);
      }
    }
  }
  kvjit_request_free(&req);
  return st;
}

/* ---- op tables ----------------------------------------------------------------------------- */

struct kvjit_fast_table *kvjit_context_fast_table(const kvjit_context *ctx) { return ctx->fast; }

/* ---- cache maintenance ------------------------------------------------------------------------ */

kvjit_status kvjit_cache_list(kvjit_context *ctx, int include_read_dirs, int verify, kvjit_cache_visit_fn visit,
                              void *user, uint64_t *bad) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx is NULL");
  return kvjit_bundle_list(ctx, include_read_dirs, verify, visit, user, bad);
}

kvjit_status kvjit_cache_prune(kvjit_context *ctx, uint64_t max_bytes, uint64_t *removed_entries,
                               uint64_t *removed_bytes) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx is NULL");
  return kvjit_cache_evict(ctx->cache, max_bytes, removed_entries, removed_bytes);
}

kvjit_status kvjit_cache_clear(kvjit_context *ctx, uint64_t *removed_entries) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx is NULL");
  return kvjit_cache_remove_all(ctx->cache, removed_entries);
}

kvjit_status kvjit_cache_export(kvjit_context *ctx, const char *path, int include_read_dirs, uint64_t *entries) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx is NULL");
  if (path == NULL || path[0] == '\0') return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "path: empty");
  return kvjit_pack_export(ctx->cache, path, include_read_dirs, entries);
}

kvjit_status kvjit_cache_import(kvjit_context *ctx, const char *path, uint64_t *imported, uint64_t *present,
                                uint64_t *bad) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx is NULL");
  if (path == NULL || path[0] == '\0') return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "path: empty");
  return kvjit_pack_import(ctx->cache, path, imported, present, bad);
}
