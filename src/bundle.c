/*
 * Bundles and their aliases (bundle.h): writing and checking alias entries, compiling a group of
 * kernels as one program for the cache, and checking aliases when the cache is verified.
 */
#include "bundle.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "compile.h"
#include "program.h"
#include "request.h"
#include "nvrtc_lib.h"
#include "status.h"

/* ---- alias entries ------------------------------------------------------------------------- */

int kvjit_bundle_holds(const kvjit_entry_view *alias, const kvjit_entry_alias *a, const kvjit_key_target *target,
                       const kvjit_key *content, size_t count, const char *name, size_t name_len, const char *lowered,
                       size_t lowered_len) {
  const char *an, *al;
  size_t anl, all;
  kvjit_entry_kernel(alias, 0, &an, &anl, &al, &all);
  return target->kind == KVJIT_PAYLOAD_CUBIN && target->arch == alias->target.arch &&
         target->suffix == alias->target.suffix && target->nvrtc_major == alias->target.nvrtc_major &&
         target->nvrtc_minor == alias->target.nvrtc_minor && kvjit_key_equal(content, &alias->content) &&
         count == a->count && a->index < count && name_len == anl && !memcmp(name, an, anl) &&
         lowered_len == all && !memcmp(lowered, al, all);
}

int kvjit_bundle_entry_usable(kvjit_cache *cache, const kvjit_entry_view *alias, const kvjit_entry_alias *a) {
  uint8_t *file = NULL;
  kvjit_entry_view b;
  if (kvjit_cache_read(cache, &a->bundle, &file, &b) != KVJIT_OK) return 0;
  int ok = 0;
  if (a->index < b.num_kernels) {
    const char *n, *l;
    size_t nl, ll;
    kvjit_entry_kernel(&b, a->index, &n, &nl, &l, &ll);
    ok = kvjit_bundle_holds(alias, a, &b.target, &b.content, b.num_kernels, n, nl, l, ll);
  }
  free(file);
  return ok;
}

kvjit_status kvjit_bundle_write_alias(kvjit_cache *cache, const kvjit_program_label *label,
                                      const kvjit_key_target *target, const kvjit_key *key, const kvjit_key *content,
                                      const kvjit_entry_digests *digests, const char *program, const char *name,
                                      const char *lowered, const kvjit_entry_alias *alias) {
  if (!kvjit_cache_writable(cache)) {
    return kvjit_fail(KVJIT_ERR_IO, "not cached: %s", kvjit_cache_unwritable_reason(cache));
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
                           .num_kernels = 1,
                           .kernels = &name,
                           .lowered = &lowered};
  meta.target.kind = KVJIT_PAYLOAD_ALIAS;
  uint8_t payload[KVJIT_ENTRY_ALIAS_BYTES];
  kvjit_entry_alias_encode(payload, alias);
  uint8_t *buf = NULL;
  size_t len = 0;
  kvjit_status st = kvjit_entry_encode(&buf, &len, &meta, payload, sizeof payload);
  if (st != KVJIT_OK) return kvjit_fail(KVJIT_ERR_IO, "not cached: %s", kvjit_last_error());
  st = kvjit_cache_write(cache, key, buf, len);
  /* The remote tier gets the alias as it gets the bundle (kvjit_context_compile publishes it). */
  kvjit_cache_push(cache, key, buf, len);
  free(buf);
  return st;
}

/* ---- group compiles -------------------------------------------------------------------------- */

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
  if (kvjit_cache_read(kvjit_context_cache(ctx), key, &file, &view) != KVJIT_OK) {
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
  if ((st = kvjit_request_init(&req, kvjit_context_memo(ctx), &bundle_desc)) != KVJIT_OK) goto done;
  have_req = 1;
  kvjit_key key;
  kvjit_request_key(&req, target, &key);
  /* The bundle's entry says which op it serves, not one variant: it serves many. */
  kvjit_program_label bundle_label = {members[todo[0]].label ? members[todo[0]].label->op : NULL, NULL};
  kvjit_cache *cache = kvjit_context_cache(ctx);
  kvjit_cache_lock lock;
  int locked = kvjit_cache_lock_key(cache, &key, &lock);
  int publishable = 1;
  size_t too_large = 0, limit = kvjit_cache_writable(cache) ? kvjit_cache_bundle_limit(cache) : SIZE_MAX;
  if (kvjit_context_entry_usable(ctx, &key)) {
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
  for (size_t j = 0; j < count; j++) members[todo[j]].origin = KVJIT_FROM_COMPILE;
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
    if (!kvjit_context_entry_usable(ctx, &member)) {
      kvjit_entry_alias alias = {key, (uint32_t)j, (uint32_t)count};
      kvjit_status written = kvjit_bundle_write_alias(cache, members[todo[j]].label, target, &member,
                                                      &group->content, &digests, desc->name, kernel, lowered[j], &alias);
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
  kvjit_status st = kvjit_request_init(&group, kvjit_context_memo(ctx), desc);
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
    if (target.kind != KVJIT_PAYLOAD_CUBIN || kvjit_context_has_program(ctx, &keys[i])) {
      /* Known in memory (the loader's own path writes it back if it was evicted), or PTX (no
       * bundles: an alias stands for a cubin): alone, as kvjit_program_compile() does. */
      kvjit_program_desc one = one_kernel(desc, i);
      st = kvjit_program_compile_labeled(ctx, &members[i].origin, &one, members[i].label);
    } else if (kvjit_context_entry_usable(ctx, &keys[i])) {
      cached++;
    } else {
      todo[count++] = i;
    }
  }
  kvjit_context_count_disk_hits(ctx, cached);
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

/* ---- verify ---------------------------------------------------------------------------------- */

/* Aliases are checked after every entry was (so that a corrupt bundle is counted and moved
 * aside as a bad entry of its own, then its aliases are orphans): their infos wait here. */
typedef struct deferred {
  kvjit_cache_entry_info info;
  char *strings; /* path, key, program, kernels, bundle: one block */
} deferred;

typedef struct verify_visit {
  kvjit_context *ctx;
  kvjit_cache_visit_fn visit;
  void *user;
  deferred *aliases;
  size_t count, capacity;
  int stop, out_of_memory;
} verify_visit;

static int defer_alias(verify_visit *v, const kvjit_cache_entry_info *e) {
  if (v->count == v->capacity) {
    size_t cap = v->capacity ? v->capacity * 2 : 64;
    deferred *grown = realloc(v->aliases, cap * sizeof *grown);
    if (grown == NULL) return -1;
    v->aliases = grown;
    v->capacity = cap;
  }
  const char *parts[5] = {e->path, e->key, e->program, e->kernels, e->bundle};
  size_t lens[5], total = 0;
  for (int i = 0; i < 5; i++) total += (lens[i] = strlen(parts[i] ? parts[i] : "")) + 1;
  deferred *d = &v->aliases[v->count];
  if ((d->strings = malloc(total)) == NULL) return -1;
  d->info = *e;
  const char **fields[5] = {&d->info.path, &d->info.key, &d->info.program, &d->info.kernels, &d->info.bundle};
  char *at = d->strings;
  for (int i = 0; i < 5; i++) {
    memcpy(at, parts[i] ? parts[i] : "", lens[i] + 1);
    *fields[i] = at;
    at += lens[i] + 1;
  }
  v->count++;
  return 0;
}

/* An alias file's bytes (small: a header and 24 bytes), read again by its path. */
static uint8_t *read_alias_file(const char *path, size_t *len) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat st;
  uint8_t *buf = NULL;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
      (uint64_t)st.st_size <= KVJIT_ENTRY_MAX_HEADER_BYTES + KVJIT_ENTRY_ALIAS_BYTES &&
      (buf = malloc((size_t)st.st_size)) != NULL) {
    size_t got = 0;
    while (got < (size_t)st.st_size) {
      ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
      if (r <= 0) break;
      got += (size_t)r;
    }
    if (got != (size_t)st.st_size) {
      free(buf);
      buf = NULL;
    }
    *len = got;
  }
  close(fd);
  return buf;
}

/* An alias whose bundle is there and holds its kernel (or one gone since it was listed). */
static int alias_usable(kvjit_context *ctx, const kvjit_cache_entry_info *e) {
  size_t len = 0;
  uint8_t *file = read_alias_file(e->path, &len);
  if (file == NULL) return 1; /* replaced or evicted since the listing: nothing to say of it now */
  kvjit_entry_view view;
  kvjit_key key;
  int usable = 0;
  if (kvjit_key_parse_hex(&key, e->key) == 0 && kvjit_entry_parse(&view, file, len, &key, 1) == KVJIT_OK) {
    if (view.target.kind != KVJIT_PAYLOAD_ALIAS) {
      usable = 1; /* replaced by the kernel's own entry */
    } else {
      kvjit_entry_alias a;
      kvjit_entry_alias_get(&view, &a);
      usable = kvjit_bundle_entry_usable(kvjit_context_cache(ctx), &view, &a);
    }
  }
  free(file);
  return usable;
}

static int verify_entry(const kvjit_cache_entry_info *entry, void *user) {
  verify_visit *v = user;
  if (entry->bundle != NULL && entry->status == KVJIT_OK) {
    if (defer_alias(v, entry) == 0) return 0;
    v->out_of_memory = 1;
    return 1;
  }
  if (v->visit && v->visit(entry, v->user)) v->stop = 1;
  return v->stop;
}

kvjit_status kvjit_bundle_list(kvjit_context *ctx, int include_read_dirs, int verify, kvjit_cache_visit_fn visit,
                               void *user, uint64_t *bad) {
  kvjit_cache *cache = kvjit_context_cache(ctx);
  if (!verify) return kvjit_cache_visit(cache, include_read_dirs, 0, visit, user, bad);
  verify_visit v = {ctx, visit, user, NULL, 0, 0, 0, 0};
  kvjit_status st = kvjit_cache_visit(cache, include_read_dirs, 1, verify_entry, &v, bad);
  for (size_t i = 0; i < v.count; i++) {
    if (!v.stop && !v.out_of_memory) {
      kvjit_cache_entry_info *info = &v.aliases[i].info;
      if (!alias_usable(ctx, info)) {
        /* An orphan is junk (a lookup of it only misses): removed from the writable dir. */
        info->status = KVJIT_ERR_NOT_FOUND;
        info->reason = kvjit_cache_remove_orphan(cache, info->path, info->bundle) ? "removed" : "left in place";
      }
      if (visit && visit(info, user)) v.stop = 1;
    }
    free(v.aliases[i].strings);
  }
  free(v.aliases);
  if (v.out_of_memory) return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "verify: out of memory");
  return st;
}
