/*
 * The cache's remote tier (remote.h does the HTTP): the last place a lookup tries, after the
 * read-only dirs and the writable one. Fetched bytes are never trusted: they pass every check a
 * disk entry passes (entry.c's parse with the expected key and payload checksum, payload.c's
 * symbols) before they are used, and are then written to the writable dir so the next process
 * finds them locally. A bad fetch is counted against the remote and treated as a miss.
 */
#include "cache.h"
#include "cache_index.h"
#include "cache_remote.h"

#include <stdlib.h>
#include <string.h>

#include "cache_internal.h"
#include "cache_store.h"
#include "payload.h"
#include "status.h"

int kvjit_cache_remote_writable(const kvjit_cache *c) { return kvjit_remote_writable(c->remote); }

const kvjit_remote_counters *kvjit_cache_remote_counters(const kvjit_cache *c) {
  static const kvjit_remote_counters none;
  return c->remote ? kvjit_remote_get_counters(c->remote) : &none;
}

const char *kvjit_cache_remote_urls(const kvjit_cache *c) { return kvjit_remote_urls(c->remote); }

/* kvjit_cache_fetch(); @p follow: an alias's bundle is fetched first (never past one level: a
 * lying remote's alias of an alias cannot make it recurse). */
static kvjit_status fetch(kvjit_cache *c, const kvjit_key *key, uint8_t **data, kvjit_entry_view *view, int follow) {
  if (c->remote == NULL) return KVJIT_ERR_NOT_FOUND;
  uint8_t *buf = NULL;
  size_t len = 0, from = 0;
  if (!kvjit_remote_get(c->remote, key, &buf, &len, &from)) return KVJIT_ERR_NOT_FOUND;
  kvjit_entry_view v;
  if (kvjit_entry_parse(&v, buf, len, key, 1) != KVJIT_OK || kvjit_entry_check_payload(&v) != KVJIT_OK) {
    kvjit_remote_reject(c->remote, from, kvjit_last_error());
    free(buf);
    return KVJIT_ERR_NOT_FOUND;
  }
  kvjit_remote_accept(c->remote, from);
  /* Keep it locally (within the budget); a failure here only means the next process fetches again.
   * An alias is kept only with its bundle (cache.h): that is fetched first, as its load would. */
  if (kvjit_cache_writable(c)) {
    if (v.target.kind == KVJIT_PAYLOAD_ALIAS && follow) {
      kvjit_entry_alias a;
      kvjit_entry_alias_get(&v, &a);
      uint8_t *bundle = NULL;
      kvjit_entry_view bv;
      if (kvjit_cache_read_local(c, &a.bundle, &bundle, &bv) == KVJIT_OK || fetch(c, &a.bundle, &bundle, &bv, 0) == KVJIT_OK)
        free(bundle);
    }
    (void)kvjit_cache_write(c, key, buf, len);
  }
  *data = buf;
  *view = v;
  return KVJIT_OK;
}

kvjit_status kvjit_cache_fetch(kvjit_cache *c, const kvjit_key *key, uint8_t **data, kvjit_entry_view *view) {
  return fetch(c, key, data, view, 1);
}

kvjit_status kvjit_cache_read(kvjit_cache *c, const kvjit_key *key, uint8_t **data, kvjit_entry_view *view) {
  if (kvjit_cache_read_local(c, key, data, view) == KVJIT_OK) return KVJIT_OK;
  return kvjit_cache_fetch(c, key, data, view);
}

/* The head a remote check asks for: the fixed prefix and, nearly always, the whole header (and
 * an alias whole, to follow it to its bundle). */
#define REMOTE_HEAD_BYTES (64u * 1024)

/* The head of an entry as a load would judge it: the prefix against the file's size (when the
 * server said it), then the header with the expected key (when it fits in the head). 1 good. */
static int head_is_entry(const uint8_t *head, size_t len, uint64_t total, const kvjit_key *key,
                         kvjit_entry_view *view) {
  if (len < KVJIT_ENTRY_FIXED_BYTES) return 0;
  uint64_t file_len = total ? total : len;
  if (kvjit_entry_check_prefix(head, len, file_len) != KVJIT_OK) return 0;
  memset(view, 0, sizeof *view);
  if (kvjit_entry_parse_header(view, head, len, file_len, key) == KVJIT_OK) return 1;
  /* A header longer than the head: the prefix is all that was checked. */
  uint32_t header = (uint32_t)head[12] | (uint32_t)head[13] << 8 | (uint32_t)head[14] << 16 | (uint32_t)head[15] << 24;
  return header > len;
}

/* 1 when a load would get @p key from the remote: a ranged GET of its head answers with an
 * entry's header for that key (an alias: and its bundle's too). 0 no, -1 no remote could say. */
static int remote_holds(kvjit_cache *c, const kvjit_key *key, int follow_alias) {
  uint8_t *head = NULL;
  size_t len = 0;
  uint64_t total = 0;
  int got = kvjit_remote_head(c->remote, key, REMOTE_HEAD_BYTES, &head, &len, &total);
  if (got != 1) return got;
  kvjit_entry_view view;
  int good = head_is_entry(head, len, total, key, &view);
  if (good && view.target.kind == KVJIT_PAYLOAD_ALIAS && follow_alias) {
    kvjit_entry_view whole;
    kvjit_entry_alias a;
    good = total == len && kvjit_entry_parse(&whole, head, len, key, 1) == KVJIT_OK;
    if (good) {
      kvjit_entry_alias_get(&whole, &a);
      good = remote_holds(c, &a.bundle, 0) == 1;
    }
  }
  free(head);
  return good;
}

int kvjit_cache_find(kvjit_cache *c, const kvjit_key *key) {
  uint8_t *data = NULL;
  kvjit_entry_view view;
  if (kvjit_cache_read_local(c, key, &data, &view) == KVJIT_OK) {
    free(data);
    return 1;
  }
  if (c->remote == NULL) return 0;
  int has = remote_holds(c, key, 1);
  return has == 1 ? 2 : has;
}

/* After an entry, its per-kernel hint: a server's miss of the same kernels finds it (miss.h). */
static void push_entry(kvjit_cache *c, const kvjit_key *key, const uint8_t *data, size_t len) {
  kvjit_entry_view v;
  kvjit_key id;
  int indexed = kvjit_entry_parse_header(&v, data, len, len, key) == KVJIT_OK;
  if (indexed) kvjit_cache_index_id(&v, &id);
  kvjit_remote_put_indexed(c->remote, key, data, len, indexed ? &id : NULL);
}

void kvjit_cache_push(kvjit_cache *c, const kvjit_key *key, const uint8_t *data, size_t len) {
  if (kvjit_remote_writable(c->remote)) push_entry(c, key, data, len);
}

void kvjit_cache_push_if_absent(kvjit_cache *c, const kvjit_key *key, const uint8_t *data, size_t len) {
  if (!kvjit_remote_writable(c->remote)) return;
  /* Only when the remote says it lacks the entry: an unreachable remote is not written blind. */
  if (remote_holds(c, key, 0) == 0) push_entry(c, key, data, len);
}

kvjit_status kvjit_cache_remote_nearest(kvjit_cache *c, const kvjit_key *id, uint8_t **data, kvjit_entry_view *view) {
  kvjit_key key;
  uint8_t *buf = NULL;
  size_t len = 0, from = 0;
  if (c->remote == NULL || !kvjit_remote_get_hint(c->remote, id, &key) ||
      !kvjit_remote_get(c->remote, &key, &buf, &len, &from)) {
    return KVJIT_ERR_NOT_FOUND;
  }
  if (kvjit_entry_parse_header(view, buf, len, len, &key) != KVJIT_OK) {
    kvjit_remote_reject(c->remote, from, kvjit_last_error());
    free(buf);
    return KVJIT_ERR_NOT_FOUND;
  }
  *data = buf;
  return KVJIT_OK;
}

int kvjit_cache_remote_has(kvjit_cache *c, const kvjit_key *key) {
  return c->remote ? remote_holds(c, key, 1) : 0;
}
