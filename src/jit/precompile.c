/*
 * Compiling programs for the cache, and where a key is cached (precompile.h).
 */
#include "cache.h"
#include "cache_remote.h"
#include "precompile.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "alias.h"
#include "build.h"
#include "publish.h"
#include "resolve.h"
#include "status.h"
#include "table.h"

/* A compile-only failure, remembered in the table like a failed build (unless one is there). */
static void remember_failure(kvjit_context *ctx, const kvjit_request *req, const kvjit_key_target *target,
                             const kvjit_key *key, kvjit_status st, const char *log) {
  if (!kvjit_table_failure_is_lasting(st)) return;
  kvjit_program *p = kvjit_program_new(req, target, key);
  if (p == NULL || (p->error = strdup(kvjit_last_error())) == NULL || (p->log = strdup(log ? log : "")) == NULL) {
    if (p) kvjit_program_free(p, NULL);
    return;
  }
  p->status = st;
  p->state = PROGRAM_FAILED;
  pthread_mutex_lock(&ctx->lock);
  if (kvjit_table_find(ctx, key) == NULL) {
    kvjit_table_insert(ctx, p);
    p = NULL;
  }
  pthread_mutex_unlock(&ctx->lock);
  if (p) kvjit_program_free(p, NULL);
}

/* A program this context already has: make sure its entry is on disk. */
static kvjit_status compile_known(kvjit_context *ctx, kvjit_program *p, const kvjit_request *req,
                                  const kvjit_entry_label *label, kvjit_origin *origin) {
  if (p->state == PROGRAM_FAILED) {
    if (origin) *origin = KVJIT_FROM_MEMORY;
    return kvjit_fail(p->status, "%s", p->error ? p->error : "earlier build failed");
  }
  if (kvjit_resolve_usable(ctx, &p->key)) {
    atomic_fetch_add(&ctx->disk_hits, 1);
    if (origin) *origin = KVJIT_FROM_DISK;
    return KVJIT_OK;
  }
  /* Evicted or never written (memory-only): publish what is in memory, unless it was compiled
   * after a state-leaking compile (then it stays here; it was counted when it was compiled). An
   * alias is written again after its bundle (itself again too when that is gone). */
  kvjit_status st = KVJIT_OK;
  const kvjit_program *own = p->bundle ? p->bundle : p;
  if (own->publishable && !(p->bundle && kvjit_resolve_usable(ctx, &own->key))) {
    kvjit_entry_label bundle_label = {label ? label->op : NULL, NULL};
    st = kvjit_context_publish(ctx, p->bundle ? &bundle_label : label, &own->target, &own->key, &own->content,
                               &own->digests, own->name, own->num_kernels, (const char *const *)own->names, own->payload,
                               own->payload_len, (const char *const *)own->lowered, 1);
  }
  if (st == KVJIT_OK && p->bundle && own->publishable) {
    kvjit_entry_alias a = {own->key, p->bundle_index, (uint32_t)own->num_kernels};
    st = kvjit_alias_write(ctx->cache, label, &p->target, &p->key, &p->content, &p->digests, p->name, p->names[0],
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

kvjit_status kvjit_program_precompile(kvjit_context *ctx, const kvjit_request *req, const kvjit_key_target *target,
                                      const kvjit_key *key, const kvjit_entry_label *label, kvjit_origin *origin) {
  pthread_mutex_lock(&ctx->lock);
  kvjit_program *p = kvjit_table_find(ctx, key);
  while (p && p->state == PROGRAM_BUILDING) pthread_cond_wait(&ctx->built, &ctx->lock);
  pthread_mutex_unlock(&ctx->lock);
  if (p != NULL) return compile_known(ctx, p, req, label, origin);
  /* Not kept in memory: a build machine may compile thousands of programs it never loads. */
  uint8_t *file = NULL;
  kvjit_entry_view view;
  kvjit_compiled compiled;
  kvjit_origin got;
  kvjit_status published;
  kvjit_status st =
      kvjit_program_obtain(ctx, req, label, target, key, &file, &view, &compiled, &got, &published, NULL);
  if (got == KVJIT_FROM_DISK) {
    atomic_fetch_add(&ctx->disk_hits, 1);
    if (st == KVJIT_OK && file != NULL) push_found(ctx, key, file, &view);
  }
  if (st != KVJIT_OK) remember_failure(ctx, req, target, key, st, compiled.log);
  if (st == KVJIT_OK) st = kvjit_context_not_cached(ctx, req, published);
  free(file);
  kvjit_compiled_free(&compiled);
  if (origin) *origin = got;
  return st;
}

kvjit_cached_at kvjit_program_cached_at(kvjit_context *ctx, const kvjit_key *key) {
  uint8_t *file = NULL;
  kvjit_entry_view view;
  /* Locally as a runtime lookup would resolve it (an alias counts with its bundle only); else
   * ask the remote (HEAD), which fetches nothing. */
  if (kvjit_resolve_entry(ctx, key, &file, &view, NULL, 0) == KVJIT_OK) {
    free(file);
    return KVJIT_CACHED_LOCAL;
  }
  int remote = kvjit_cache_remote_has(ctx->cache, key);
  return remote == 1 ? KVJIT_CACHED_REMOTE : remote == 0 ? KVJIT_CACHED_NOWHERE : KVJIT_CACHED_UNKNOWN;
}
