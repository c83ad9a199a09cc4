/*
 * The context's life: made from its options (config.c), destroyed with every program it built,
 * its counters and their reset, its remote tier and cache as the caller sees them, the manifest
 * it records op variants to, and the slot an upper layer keeps its state in.
 */
#include "cache.h"
#include "cache_remote.h"
#include "cache_target.h"
#include "context.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "parse.h"
#include "safe_fs.h"
#include "status.h"

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
  if (kvjit_include_memo_create(&ctx->memo) != KVJIT_OK || kvjit_miss_log_create(&ctx->misses) != KVJIT_OK) {
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

static int any_loaded(const kvjit_program *list) {
  for (const kvjit_program *p = list; p; p = p->next) {
    if (p->library != NULL) return 1;
  }
  return 0;
}

static void free_list(kvjit_program *p, const kvjit_driver *drv) {
  while (p) {
    kvjit_program *next = p->next;
    kvjit_program_free(p, drv);
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
  void *extension = atomic_load(&ctx->extension);
  if (extension != NULL) ctx->extension_destroy(extension);
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

void *kvjit_context_extension(kvjit_context *ctx, kvjit_status (*create)(void **out), void (*destroy)(void *)) {
  void *extension = atomic_load_explicit(&ctx->extension, memory_order_acquire);
  if (extension != NULL) return extension;
  pthread_mutex_lock(&ctx->lock);
  extension = atomic_load_explicit(&ctx->extension, memory_order_relaxed);
  if (extension == NULL && create(&extension) == KVJIT_OK) {
    ctx->extension_destroy = destroy;
    atomic_store_explicit(&ctx->extension, extension, memory_order_release);
  }
  pthread_mutex_unlock(&ctx->lock);
  return extension;
}

/* Where each version of the options ends (kvjit_context_options_init()). */
static const size_t options_end[KVJIT_CONTEXT_OPTIONS_VERSION + 1] = {
    0, offsetof(kvjit_context_options, read_only), offsetof(kvjit_context_options, compile_mode),
    sizeof(kvjit_context_options)};

kvjit_status kvjit_context_options_init(kvjit_context_options *out, unsigned version) {
  static const kvjit_context_options defaults = KVJIT_CONTEXT_OPTIONS_INIT;
  return kvjit_struct_init(out, version, &defaults, options_end, KVJIT_CONTEXT_OPTIONS_VERSION, "kvjit_context_options");
}

kvjit_status kvjit_stats_init(kvjit_stats *out, unsigned version) {
  static const kvjit_stats defaults = KVJIT_STATS_INIT;
  return kvjit_struct_init(out, version, &defaults, stats_end, KVJIT_STATS_VERSION, "kvjit_stats");
}
