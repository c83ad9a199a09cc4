/*
 * Publishing entries and compiling misses for a context (publish.h).
 */
#include "cache.h"
#include "cache_remote.h"
#include "cache_store.h"
#include "publish.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvrtc_lib.h"
#include "status.h"
#include "target.h"

kvjit_status kvjit_context_publish(kvjit_context *ctx, const kvjit_entry_label *label, const kvjit_key_target *target,
                                   const kvjit_key *key, const kvjit_key *content, const kvjit_entry_digests *digests,
                                   const char *program,
                                   size_t num_kernels, const char *const *kernels, const uint8_t *payload,
                                   size_t payload_len, const char *const *lowered, int publishable) {
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
  kvjit_entry_written written;
  kvjit_entry_meta meta = kvjit_entry_meta_for_write(&written, label, target, key, content, digests, program);
  meta.num_kernels = num_kernels;
  meta.kernels = kernels;
  meta.lowered = lowered;
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

/* How a miss is named: an op's by its variant's manifest line, a program by its name and target. */
static void miss_what(const kvjit_request *req, const kvjit_entry_label *label, const kvjit_key_target *target,
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

void kvjit_context_explain_key(kvjit_context *ctx, const kvjit_request *req, const kvjit_entry_label *label,
                               const kvjit_key_target *target, const kvjit_key *key, kvjit_miss_info *why) {
  char what[640];
  miss_what(req, label, target, key, what, sizeof what);
  kvjit_miss_query q;
  miss_query(req, target, key, what, &q);
  kvjit_miss_explain(ctx->cache, &q, why);
}

/* A lookup's miss explained, kept and counted once per key; logged as it happens unless the
 * compile mode's own line says it (a cold miss only at KVJIT_LOG=1: every first use is one). */
static void explain_miss(kvjit_context *ctx, const kvjit_request *req, const kvjit_entry_label *label,
                         const kvjit_key_target *target, const kvjit_key *key, kvjit_miss_info *info) {
  kvjit_context_explain_key(ctx, req, label, target, key, info);
  if (!kvjit_miss_log_add(ctx->misses, info) || ctx->compile_mode != KVJIT_COMPILE_ALWAYS) return;
  if ((info->cause == KVJIT_MISS_COLD && ctx->log == 1) || (info->cause != KVJIT_MISS_COLD && ctx->log != 0)) {
    kvjit_log_line("cache miss: %s", info->message);
  }
}

/* A miss in every cache, under KVJIT_COMPILE=warn or never: one line naming it (warn), or
 * KVJIT_ERR_NOT_CACHED naming it (never), with its explanation when there is one. */
static kvjit_status miss_allowed(kvjit_context *ctx, const kvjit_request *req, const kvjit_entry_label *label,
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

kvjit_status kvjit_context_compile(kvjit_context *ctx, const kvjit_request *req, const kvjit_entry_label *label,
                                   const kvjit_key_target *target, const kvjit_key *key, int explain,
                                   kvjit_compiled *compiled, kvjit_status *published) {
  return kvjit_context_compile_within(ctx, req, label, target, key, explain, compiled, published, SIZE_MAX);
}

kvjit_status kvjit_context_compile_within(kvjit_context *ctx, const kvjit_request *req,
                                          const kvjit_entry_label *label, const kvjit_key_target *target,
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
    *published = kvjit_context_publish(ctx, label, target, key, &req->content, &digests, req->desc->name,
                                       req->desc->num_kernels, (const char *const *)req->kernels, compiled->payload,
                                       compiled->payload_len, (const char *const *)compiled->lowered,
                                       compiled->publishable);
  } else if (st != KVJIT_ERR_NO_NVRTC) {
    atomic_fetch_add(&ctx->compile_failures, 1);
    if (ctx->log == 1) kvjit_log_line("compile of %s for %s failed: %s", req->desc->name, name, kvjit_last_error());
  }
  return st;
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
