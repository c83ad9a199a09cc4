/*
 * Alias entries (entry.h, cache/FORMAT.md): one kernel of a bundle found again under the key of
 * its own one-kernel program. Whether a bundle holds an alias's kernel, writing an alias, and the
 * verifying listing that checks every alias against its bundle after every entry was checked.
 */
#include "alias.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "cache_list.h"
#include "cache_remote.h"
#include "cache_store.h"
#include "status.h"

int kvjit_alias_bundle_holds(const kvjit_entry_view *alias, const kvjit_entry_alias *a, const kvjit_key_target *target,
                             const kvjit_key *content, size_t count, const char *name, size_t name_len,
                             const char *lowered, size_t lowered_len) {
  const char *an, *al;
  size_t anl, all;
  kvjit_entry_kernel(alias, 0, &an, &anl, &al, &all);
  return target->kind == KVJIT_PAYLOAD_CUBIN && target->arch == alias->target.arch &&
         target->suffix == alias->target.suffix && target->nvrtc_major == alias->target.nvrtc_major &&
         target->nvrtc_minor == alias->target.nvrtc_minor && kvjit_key_equal(content, &alias->content) &&
         count == a->count && a->index < count && name_len == anl && !memcmp(name, an, anl) &&
         lowered_len == all && !memcmp(lowered, al, all);
}

int kvjit_alias_usable(kvjit_cache *cache, const kvjit_entry_view *alias, const kvjit_entry_alias *a) {
  uint8_t *file = NULL;
  kvjit_entry_view b;
  if (kvjit_cache_read(cache, &a->bundle, &file, &b) != KVJIT_OK) return 0;
  int ok = 0;
  if (a->index < b.num_kernels) {
    const char *n, *l;
    size_t nl, ll;
    kvjit_entry_kernel(&b, a->index, &n, &nl, &l, &ll);
    ok = kvjit_alias_bundle_holds(alias, a, &b.target, &b.content, b.num_kernels, n, nl, l, ll);
  }
  free(file);
  return ok;
}

kvjit_status kvjit_alias_write(kvjit_cache *cache, const kvjit_entry_label *label, const kvjit_key_target *target,
                               const kvjit_key *key, const kvjit_key *content, const kvjit_entry_digests *digests,
                               const char *program, const char *name, const char *lowered,
                               const kvjit_entry_alias *alias) {
  if (!kvjit_cache_writable(cache)) {
    return kvjit_fail(KVJIT_ERR_IO, "not cached: %s", kvjit_cache_unwritable_reason(cache));
  }
  kvjit_entry_written written;
  kvjit_entry_meta meta = kvjit_entry_meta_for_write(&written, label, target, key, content, digests, program);
  meta.num_kernels = 1;
  meta.kernels = &name;
  meta.lowered = &lowered;
  meta.target.kind = KVJIT_PAYLOAD_ALIAS;
  uint8_t payload[KVJIT_ENTRY_ALIAS_BYTES];
  kvjit_entry_alias_encode(payload, alias);
  uint8_t *buf = NULL;
  size_t len = 0;
  kvjit_status st = kvjit_entry_encode(&buf, &len, &meta, payload, sizeof payload);
  if (st != KVJIT_OK) return kvjit_fail(KVJIT_ERR_IO, "not cached: %s", kvjit_last_error());
  st = kvjit_cache_write(cache, key, buf, len);
  /* The remote tier gets the alias as it gets the bundle (kvjit_context_compile() publishes it). */
  kvjit_cache_push(cache, key, buf, len);
  free(buf);
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
  kvjit_cache *cache;
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
static int listed_alias_usable(kvjit_cache *cache, const kvjit_cache_entry_info *e) {
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
      usable = kvjit_alias_usable(cache, &view, &a);
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

kvjit_status kvjit_alias_list(kvjit_cache *cache, int include_read_dirs, int verify, kvjit_cache_visit_fn visit,
                              void *user, uint64_t *bad) {
  if (!verify) return kvjit_cache_visit(cache, include_read_dirs, 0, visit, user, bad);
  verify_visit v = {cache, visit, user, NULL, 0, 0, 0, 0};
  kvjit_status st = kvjit_cache_visit(cache, include_read_dirs, 1, verify_entry, &v, bad);
  for (size_t i = 0; i < v.count; i++) {
    if (!v.stop && !v.out_of_memory) {
      kvjit_cache_entry_info *info = &v.aliases[i].info;
      if (!listed_alias_usable(cache, info)) {
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
