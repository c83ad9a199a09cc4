/*
 * Group compiles (bundle.h): many kernels of one source compiled as one program for the cache, an
 * alias entry (store/alias.c) written for each.
 */
#include "bundle.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alias.h"
#include "cache.h"
#include "cache_remote.h"
#include "cache_store.h"
#include "compile.h"
#include "loader.h"
#include "publish.h"
#include "request.h"
#include "resolve.h"
#include "status.h"
#include "table.h"

/* A description of the kernels of @p desc listed in @p pick (indexes), for the bundle. */
static kvjit_program_desc pick_kernels(const kvjit_program_desc *desc, const char **names, const size_t *pick,
                                       size_t count) {
  kvjit_program_desc d = *desc;
  for (size_t i = 0; i < count; i++) names[i] = desc->kernels[pick[i]];
  d.kernels = names;
  d.num_kernels = count;
  return d;
}

/* The one-kernel description of kernel @p i of @p desc. */
static kvjit_program_desc one_kernel(const kvjit_program_desc *desc, size_t i) {
  kvjit_program_desc d = *desc;
  d.kernels = &desc->kernels[i];
  d.num_kernels = 1;
  return d;
}

/* The bundle's lowered names: NVRTC's, or (another process built the same bundle first) its entry's. */
static kvjit_status bundle_lowered(kvjit_context *ctx, const kvjit_key *key, size_t count, char **lowered) {
  uint8_t *file = NULL;
  kvjit_entry_view view;
  if (kvjit_cache_read(ctx->cache, key, &file, &view) != KVJIT_OK) {
    return kvjit_fail(KVJIT_ERR_NOT_FOUND, "bundle: its entry is gone");
  }
  kvjit_status st = KVJIT_OK;
  if (view.num_kernels != count || view.target.kind != KVJIT_PAYLOAD_CUBIN) {
    st = kvjit_fail(KVJIT_ERR_CORRUPT, "bundle: its entry lists %u kernels, expected %zu", view.num_kernels, count);
  }
  for (size_t i = 0; i < count && st == KVJIT_OK; i++) {
    const char *n, *l;
    size_t nl, ll;
    kvjit_entry_kernel(&view, (uint32_t)i, &n, &nl, &l, &ll);
    if ((lowered[i] = malloc(ll + 1)) == NULL) {
      st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "bundle: out of memory");
      break;
    }
    memcpy(lowered[i], l, ll);
    lowered[i][ll] = '\0';
  }
  free(file);
  return st;
}

static kvjit_status build_bundle(kvjit_context *ctx, const kvjit_program_desc *desc, const kvjit_request *group,
                                 const kvjit_key_target *target, const size_t *todo, size_t count,
                                 kvjit_group_member *members);

/* The kernels @p todo: one alone (an ordinary entry), more as a bundle. */
static kvjit_status build_some(kvjit_context *ctx, const kvjit_program_desc *desc, const kvjit_request *group,
                               const kvjit_key_target *target, const size_t *todo, size_t count,
                               kvjit_group_member *members) {
  if (count > 1) return build_bundle(ctx, desc, group, target, todo, count, members);
  kvjit_program_desc one = one_kernel(desc, todo[0]);
  return kvjit_program_compile_labeled(ctx, &members[todo[0]].origin, &one, members[todo[0]].label);
}

/* A bundle of @p count kernels came out @p payload_len bytes, more than the budget lets one
 * bundle take (@p limit): build it again as bundles of as many kernels as fit at its bytes per
 * kernel, of even size (halves at least). Decided from the compile's size and the budget alone,
 * so the entries are the same however a prewarm is split. */
static kvjit_status build_smaller(kvjit_context *ctx, const kvjit_program_desc *desc, const kvjit_request *group,
                                  const kvjit_key_target *target, const size_t *todo, size_t count,
                                  kvjit_group_member *members, size_t payload_len, size_t limit) {
  size_t per_kernel = payload_len / count + 1;
  size_t fit = limit / per_kernel;
  if (fit < 1) fit = 1;
  if (fit > count / 2) fit = count / 2;
  const size_t pieces = (count + fit - 1) / fit;
  kvjit_status st = KVJIT_OK;
  for (size_t p = 0, first = 0; p < pieces && st == KVJIT_OK; p++) {
    const size_t end = count * (p + 1) / pieces;
    st = build_some(ctx, desc, group, target, todo + first, end - first, members);
    first = end;
  }
  return st;
}

/* Build the bundle of the kernels @p todo of @p group (its request) under the bundle's lock, or
 * find it built by another process; then write each kernel's alias under the kernel's lock. A
 * bundle larger than the budget allows one (kvjit_cache_bundle_limit()) is never written: its
 * kernels are built as smaller bundles instead. */
static kvjit_status build_bundle(kvjit_context *ctx, const kvjit_program_desc *desc, const kvjit_request *group,
                                 const kvjit_key_target *target, const size_t *todo, size_t count,
                                 kvjit_group_member *members) {
  const char **names = calloc(count, sizeof *names);
  char **lowered = calloc(count, sizeof *lowered);
  kvjit_request req;
  int have_req = 0;
  kvjit_status st = KVJIT_OK;
  if (names == NULL || lowered == NULL) {
    st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "bundle: out of memory");
    goto done;
  }
  kvjit_program_desc bundle_desc = pick_kernels(desc, names, todo, count);
  if ((st = kvjit_request_init(&req, ctx->memo, &bundle_desc)) != KVJIT_OK) goto done;
  have_req = 1;
  kvjit_key key;
  kvjit_request_key(&req, target, &key);
  /* The bundle's entry says which op it serves, not one variant: it serves many. */
  kvjit_entry_label bundle_label = {members[todo[0]].label ? members[todo[0]].label->op : NULL, NULL};
  kvjit_cache *cache = ctx->cache;
  kvjit_cache_lock lock;
  int locked = kvjit_cache_lock_key(cache, &key, &lock);
  int publishable = 1;
  size_t too_large = 0, limit = kvjit_cache_writable(cache) ? kvjit_cache_bundle_limit(cache) : SIZE_MAX;
  /* Found built by another process under the lock: its kernels came from the disk, not from a
   * compile of ours (N processes prewarming one dir at once count one compile per key). */
  const int built_elsewhere = kvjit_resolve_usable(ctx, &key);
  if (built_elsewhere) {
    st = bundle_lowered(ctx, &key, count, lowered);
  } else {
    kvjit_compiled compiled;
    kvjit_status published;
    st = kvjit_context_compile_within(ctx, &req, &bundle_label, target, &key, 0, &compiled, &published, limit);
    if (st == KVJIT_OK && published == KVJIT_ERR_BUSY) too_large = compiled.payload_len;
    else if (st == KVJIT_OK) st = kvjit_context_not_cached(ctx, &req, published);
    publishable = compiled.publishable;
    for (size_t i = 0; i < count && st == KVJIT_OK; i++) {
      lowered[i] = compiled.lowered[i];
      compiled.lowered[i] = NULL;
    }
    kvjit_compiled_free(&compiled);
  }
  if (locked) kvjit_cache_unlock_key(&lock);
  if (st == KVJIT_OK && too_large) {
    st = build_smaller(ctx, desc, group, target, todo, count, members, too_large, limit);
    goto done;
  }
  if (st != KVJIT_OK) goto done;
  for (size_t j = 0; j < count; j++) members[todo[j]].origin = built_elsewhere ? KVJIT_FROM_DISK : KVJIT_FROM_COMPILE;
  /* Compiled after a state-leaking compile: nothing of it was written, so no alias either. */
  if (!publishable) goto done;
  kvjit_entry_digests digests;
  kvjit_request_digests(group, &digests);
  for (size_t j = 0; j < count; j++) {
    kvjit_key member;
    const char *kernel = req.kernels[j];
    kvjit_key_derive(&member, target, 1, &kernel, &group->content);
    kvjit_cache_lock member_lock;
    int member_locked = kvjit_cache_lock_key(cache, &member, &member_lock);
    /* Another process may have built this kernel meanwhile: its entry stays. */
    int alone = 0;
    if (!kvjit_resolve_usable(ctx, &member)) {
      kvjit_entry_alias alias = {key, (uint32_t)j, (uint32_t)count};
      kvjit_status written = kvjit_alias_write(cache, members[todo[j]].label, target, &member, &group->content,
                                               &digests, desc->name, kernel, lowered[j], &alias);
      /* Its bundle was evicted by other writers before the alias went in: the kernel alone. */
      alone = written == KVJIT_ERR_NOT_FOUND;
      if (st == KVJIT_OK && !alone) st = kvjit_context_not_cached(ctx, &req, written);
    }
    if (member_locked) kvjit_cache_unlock_key(&member_lock);
    if (alone && st == KVJIT_OK) {
      kvjit_program_desc one = one_kernel(desc, todo[j]);
      st = kvjit_program_compile_labeled(ctx, &members[todo[j]].origin, &one, members[todo[j]].label);
    }
  }
done:
  if (have_req) kvjit_request_free(&req);
  if (lowered) {
    for (size_t i = 0; i < count; i++) free(lowered[i]);
  }
  free(lowered);
  free(names);
  return st;
}

kvjit_status kvjit_program_compile_group(kvjit_context *ctx, const kvjit_program_desc *desc,
                                         kvjit_group_member *members) {
  if (ctx == NULL || desc == NULL || members == NULL) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx, desc or members is NULL");
  }
  kvjit_request group;
  kvjit_status st = kvjit_request_init(&group, ctx->memo, desc);
  if (st != KVJIT_OK) return st;
  const size_t n = desc->num_kernels;
  size_t *todo = calloc(n, sizeof *todo);
  kvjit_key *keys = calloc(n, sizeof *keys);
  kvjit_key_target target;
  kvjit_key key;
  if (todo == NULL || keys == NULL) {
    st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "bundle: out of memory");
    goto done;
  }
  if ((st = kvjit_request_build_key(&group, &target, &key)) != KVJIT_OK) goto done;
  size_t count = 0;
  unsigned cached = 0;
  for (size_t i = 0; i < n && st == KVJIT_OK; i++) {
    const char *kernel = group.kernels[i];
    kvjit_key_derive(&keys[i], &target, 1, &kernel, &group.content);
    members[i].origin = KVJIT_FROM_DISK;
    int twice = 0;
    for (size_t j = 0; j < i && !twice; j++) twice = kvjit_key_equal(&keys[i], &keys[j]);
    if (twice) continue;
    if (target.kind != KVJIT_PAYLOAD_CUBIN || kvjit_table_has(ctx, &keys[i])) {
      /* Known in memory (the loader's own path writes it back if it was evicted), or PTX (no
       * bundles: an alias stands for a cubin): alone, as kvjit_program_compile() does. */
      kvjit_program_desc one = one_kernel(desc, i);
      st = kvjit_program_compile_labeled(ctx, &members[i].origin, &one, members[i].label);
    } else if (kvjit_resolve_usable(ctx, &keys[i])) {
      cached++;
    } else {
      todo[count++] = i;
    }
  }
  atomic_fetch_add(&ctx->disk_hits, cached);
  if (st != KVJIT_OK || count == 0) goto done;
  if (count == 1) {
    kvjit_program_desc one = one_kernel(desc, todo[0]);
    st = kvjit_program_compile_labeled(ctx, &members[todo[0]].origin, &one, members[todo[0]].label);
  } else {
    st = build_bundle(ctx, desc, &group, &target, todo, count, members);
  }
done:
  free(todo);
  free(keys);
  kvjit_request_free(&group);
  if (st == KVJIT_OK) kvjit_clear_error();
  return st;
}
