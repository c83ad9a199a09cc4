/*
 * Building programs into a context's table (build.h).
 */
#include "build.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "publish.h"
#include "resolve.h"
#include "status.h"
#include "table.h"

kvjit_status kvjit_program_obtain(kvjit_context *ctx, const kvjit_request *req, const kvjit_entry_label *label,
                                  const kvjit_key_target *target, const kvjit_key *key, uint8_t **file,
                                  kvjit_entry_view *view, kvjit_compiled *compiled, kvjit_origin *origin,
                                  kvjit_status *published, kvjit_program **bundle) {
  memset(compiled, 0, sizeof *compiled);
  *published = KVJIT_OK;
  if (kvjit_resolve_entry(ctx, key, file, view, bundle, 1) == KVJIT_OK) {
    *origin = KVJIT_FROM_DISK;
    return KVJIT_OK;
  }
  kvjit_cache_lock lock;
  int locked = kvjit_cache_lock_key(ctx->cache, key, &lock);
  /* Whoever held the lock may have published it meanwhile (the remote was asked just before). */
  if (kvjit_resolve_entry(ctx, key, file, view, bundle, 0) == KVJIT_OK) {
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

/* Fill a BUILDING program: payload and lowered names from disk or NVRTC. Runs without ctx->lock. */
static kvjit_status build_program(kvjit_context *ctx, kvjit_program *p, const kvjit_request *req,
                                  const kvjit_entry_label *label, int ptx_fallback, kvjit_origin *origin) {
  uint8_t *file = NULL;
  kvjit_entry_view view;
  kvjit_compiled compiled;
  const size_t n = req->desc->num_kernels;
  kvjit_program *bundle = NULL;
  kvjit_status st, published;
  int retried = 0;
again:
  st = kvjit_program_obtain(ctx, req, label, &p->target, &p->key, &file, &view, &compiled, origin, &published, &bundle);
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
    if (*origin != KVJIT_FROM_DISK) p->lowered[i] = strdup(compiled.lowered[i]);
    if (!p->names[i] || (*origin != KVJIT_FROM_DISK && !p->lowered[i])) {
      st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "program: out of memory");
      goto done;
    }
  }
  if (*origin == KVJIT_FROM_DISK) {
    /* An alias's code is the bundle's (loaded with it, kvjit_program_load()): no payload here. */
    st = kvjit_program_copy_entry(&view, n, NULL, p->lowered, bundle ? NULL : &p->payload, &p->payload_len);
    if (st != KVJIT_OK) goto done;
    p->from_disk = 1;
  }
  if (bundle != NULL) {
    p->bundle = bundle;
    kvjit_entry_alias a;
    kvjit_entry_alias_get(&view, &a);
    p->bundle_index = a.index;
  } else if (*origin != KVJIT_FROM_DISK) {
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
                                   const kvjit_key *key, int ptx_fallback, const kvjit_entry_label *label,
                                   kvjit_program **out, kvjit_origin *origin) {
  pthread_mutex_lock(&ctx->lock);
  kvjit_program *p = kvjit_table_find(ctx, key);
  if (p != NULL) {
    while (p->state == PROGRAM_BUILDING) pthread_cond_wait(&ctx->built, &ctx->lock);
    pthread_mutex_unlock(&ctx->lock);
    atomic_fetch_add(&ctx->memory_hits, 1);
    if (origin) *origin = KVJIT_FROM_MEMORY;
    *out = p;
    if (p->state == PROGRAM_FAILED) return kvjit_fail(p->status, "%s", p->error ? p->error : "earlier build failed");
    return KVJIT_OK;
  }
  p = kvjit_program_new(req, target, key);
  if (p == NULL) {
    pthread_mutex_unlock(&ctx->lock);
    return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "program: out of memory");
  }
  kvjit_table_insert(ctx, p);
  pthread_mutex_unlock(&ctx->lock);

  kvjit_origin got = KVJIT_FROM_NOWHERE;
  kvjit_status st = build_program(ctx, p, req, label, ptx_fallback, &got);
  if (got == KVJIT_FROM_DISK) atomic_fetch_add(&ctx->disk_hits, 1);
  if (p->log == NULL) p->log = strdup("");

  kvjit_table_finish(ctx, p, st, 0);
  if (origin) *origin = got;
  *out = p;
  if (st == KVJIT_OK) kvjit_clear_error();
  return st;
}
