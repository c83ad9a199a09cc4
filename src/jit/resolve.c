/*
 * A key's entry as a runtime lookup resolves it (resolve.h); an alias's bundle read into the table.
 */
#include "cache.h"
#include "cache_remote.h"
#include "resolve.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "alias.h"
#include "status.h"
#include "table.h"
#include "target.h"

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
  b->name = malloc(view.program_len + 1);
  if (!b->names || !b->lowered || !b->name) {
    st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "program: out of memory");
    goto done;
  }
  memcpy(b->name, view.program, view.program_len);
  b->name[view.program_len] = '\0';
  b->num_kernels = n;
  st = kvjit_program_copy_entry(&view, n, b->names, b->lowered, &b->payload, &b->payload_len);
  if (st != KVJIT_OK) goto done;
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
  kvjit_program *b = kvjit_table_find(ctx, &a->bundle);
  if (b != NULL) {
    while (b->state == PROGRAM_BUILDING) pthread_cond_wait(&ctx->built, &ctx->lock);
    pthread_mutex_unlock(&ctx->lock);
  } else if ((b = calloc(1, sizeof *b)) == NULL) {
    pthread_mutex_unlock(&ctx->lock);
  } else {
    b->key = a->bundle;
    kvjit_key_hex(&a->bundle, b->key_hex);
    b->state = PROGRAM_BUILDING;
    b->publishable = 1;
    kvjit_table_insert(ctx, b);
    pthread_mutex_unlock(&ctx->lock);
    kvjit_status st = bundle_from_disk(ctx, b);
    if (b->name == NULL) b->name = strdup("(bundle)");
    if (b->log == NULL) b->log = strdup("");
    /* A failed read is not remembered: the bundle may be written or fetched later. */
    kvjit_table_finish(ctx, b, st, 1);
  }
  if (b == NULL || b->state != PROGRAM_READY || a->index >= b->num_kernels) return KVJIT_ERR_NOT_FOUND;
  const char *name = b->names[a->index], *lowered = b->lowered[a->index];
  if (!kvjit_alias_bundle_holds(alias, a, &b->target, &b->content, b->num_kernels, name, strlen(name), lowered,
                                strlen(lowered))) {
    return KVJIT_ERR_NOT_FOUND;
  }
  *out = b;
  return KVJIT_OK;
}

/* An alias read from the cache: usable when its bundle is (and, with @p bundle, loaded). */
static int alias_resolves(kvjit_context *ctx, const kvjit_key *key, const kvjit_entry_view *view, kvjit_program **bundle) {
  kvjit_entry_alias a;
  kvjit_entry_alias_get(view, &a);
  if (bundle ? bundle_program(ctx, view, &a, bundle) == KVJIT_OK : kvjit_alias_usable(ctx->cache, view, &a)) {
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

kvjit_status kvjit_resolve_entry(kvjit_context *ctx, const kvjit_key *key, uint8_t **file, kvjit_entry_view *view,
                                 kvjit_program **bundle, int remote) {
  if (bundle) *bundle = NULL;
  size_t cursor = 0;
  while (kvjit_cache_read_from(ctx->cache, key, &cursor, file, view) == KVJIT_OK) {
    if (view->target.kind != KVJIT_PAYLOAD_ALIAS || alias_resolves(ctx, key, view, bundle)) return KVJIT_OK;
    free(*file);
    *file = NULL;
  }
  /* An alias fetched from the remote fetches its bundle the same way (kvjit_cache_read()). */
  if (remote && kvjit_cache_fetch(ctx->cache, key, file, view) == KVJIT_OK) {
    if (view->target.kind != KVJIT_PAYLOAD_ALIAS || alias_resolves(ctx, key, view, bundle)) return KVJIT_OK;
    free(*file);
    *file = NULL;
  }
  return KVJIT_ERR_NOT_FOUND;
}

int kvjit_resolve_usable(kvjit_context *ctx, const kvjit_key *key) {
  uint8_t *file = NULL;
  kvjit_entry_view view;
  if (kvjit_resolve_entry(ctx, key, &file, &view, NULL, 1) != KVJIT_OK) return 0;
  free(file);
  return 1;
}
