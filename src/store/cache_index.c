/*
 * The per-kernel index of a cache dir: which keys hold the same program and kernel list (its id:
 * the XXH3-128 of the program name and kernel names), whatever their target, NVRTC or content. A
 * miss reads it to find the entries built from other inputs (miss.h) without reading the dir. It
 * lives in at most 256 shard files, D/v2/index/<xx>, by the id's top byte, each a list of
 * "<32 hex id> <32 hex key>\n" lines, newest last, cut to its newest half past INDEX_MAX_BYTES: at
 * most 8.3 MiB for a dir, whatever it holds. It is a hint: appended under the dir lock by every
 * publication, never trusted for anything but which headers to read (each is read and checked like
 * any entry header).
 */
#include "cache_index.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache_internal.h"
#include "safe_fs.h"
#include "xxh.h"

#define INDEX_DIR "index"
#define INDEX_LINE 66u /* id, a blank, key, a newline */
#define INDEX_MAX_BYTES (INDEX_LINE * 512u)

void kvjit_cache_index_id(const kvjit_entry_view *view, kvjit_key *out) {
  XXH3_state_t st;
  XXH3_128bits_reset(&st);
  uint64_t n = view->program_len;
  XXH3_128bits_update(&st, &n, sizeof n);
  XXH3_128bits_update(&st, view->program, view->program_len);
  for (uint32_t i = 0; i < view->num_kernels; i++) {
    const char *name, *lowered;
    size_t name_len, lowered_len;
    kvjit_entry_kernel(view, i, &name, &name_len, &lowered, &lowered_len);
    n = name_len;
    XXH3_128bits_update(&st, &n, sizeof n);
    XXH3_128bits_update(&st, name, name_len);
  }
  XXH128_hash_t h = XXH3_128bits_digest(&st);
  out->high = h.high64;
  out->low = h.low64;
}

void kvjit_cache_index_id_of(const char *program, size_t num_kernels, const char *const *kernels, kvjit_key *out) {
  XXH3_state_t st;
  XXH3_128bits_reset(&st);
  uint64_t n = strlen(program);
  XXH3_128bits_update(&st, &n, sizeof n);
  XXH3_128bits_update(&st, program, (size_t)n);
  for (size_t i = 0; i < num_kernels; i++) {
    n = strlen(kernels[i]);
    XXH3_128bits_update(&st, &n, sizeof n);
    XXH3_128bits_update(&st, kernels[i], (size_t)n);
  }
  XXH128_hash_t h = XXH3_128bits_digest(&st);
  out->high = h.high64;
  out->low = h.low64;
}

/* The shard of @p id in @p dir. */
static int index_path(char *out, size_t cap, const char *dir, const kvjit_key *id) {
  return snprintf(out, cap, "%s/" INDEX_DIR "/%02x", dir, (unsigned)(id->high >> 56)) < (int)cap;
}

/* Keep the newest half of a shard that grew past its bound (the caller holds the dir lock). */
static void index_trim(int fd, off_t size) {
  size_t keep = (INDEX_MAX_BYTES / 2 / INDEX_LINE) * INDEX_LINE;
  uint8_t *tail = malloc(keep);
  if (tail == NULL) return;
  ssize_t got = pread(fd, tail, keep, size - (off_t)keep);
  /* Half a line would spoil every line after it: on any failure, start over instead. */
  if (got != (ssize_t)keep || ftruncate(fd, 0) != 0 || kvjit_write_full(fd, tail, keep) != 0) (void)!ftruncate(fd, 0);
  free(tail);
}

void cache_index_add(kvjit_cache *c, const kvjit_entry_view *view) {
  char dir[PATH_MAX], path[PATH_MAX], line[INDEX_LINE + 1];
  if (snprintf(dir, sizeof dir, "%s/" INDEX_DIR, c->write_dir) >= (int)sizeof dir) return;
  struct stat st;
  if (lstat(dir, &st) != 0) {
    if (errno != ENOENT || mkdir(dir, 0700) != 0 || lstat(dir, &st) != 0) return;
  }
  if (!S_ISDIR(st.st_mode) || (!c->allow_shared && !cache_trusted(&st))) return;
  kvjit_key id;
  kvjit_cache_index_id(view, &id);
  if (!index_path(path, sizeof path, c->write_dir, &id)) return;
  int fd = kvjit_open_regular(path, O_RDWR | O_CREAT | O_APPEND, 0600, &st);
  if (fd < 0) return;
  if (st.st_size % (off_t)INDEX_LINE != 0) {
    (void)!ftruncate(fd, 0); /* a torn line (a crash mid-append): start over */
  } else if (st.st_size >= (off_t)INDEX_MAX_BYTES) {
    index_trim(fd, st.st_size);
  }
  kvjit_key_hex(&id, line);
  line[32] = ' ';
  kvjit_key_hex(&view->key, line + 33);
  line[65] = '\n';
  (void)!kvjit_write_full(fd, line, INDEX_LINE);
  close(fd);
}

/* Keys of @p id in @p dir's shard, newest first, appended to @p keys (no duplicates). */
static size_t index_read(kvjit_cache *c, const char *dir, const kvjit_key *id, kvjit_key *keys, size_t n,
                         size_t cap) {
  char path[PATH_MAX], want[33];
  struct stat st;
  if (n >= cap || !index_path(path, sizeof path, dir, id)) return n;
  int fd = kvjit_open_regular(path, O_RDONLY, 0, &st);
  if (fd < 0) return n;
  uint8_t *buf = NULL;
  if (cache_untrusted_reason(c, &st) != NULL || (buf = malloc(INDEX_MAX_BYTES)) == NULL) {
    close(fd);
    return n;
  }
  /* Whole lines from the start (a torn tail is left out), the newest INDEX_MAX_BYTES at most. */
  off_t size = st.st_size - st.st_size % (off_t)INDEX_LINE;
  off_t from = size > (off_t)INDEX_MAX_BYTES ? size - (off_t)INDEX_MAX_BYTES : 0;
  ssize_t got = pread(fd, buf, (size_t)(size - from), from);
  close(fd);
  kvjit_key_hex(id, want);
  for (ssize_t at = got - (ssize_t)INDEX_LINE; at >= 0 && n < cap; at -= (ssize_t)INDEX_LINE) {
    const uint8_t *line = buf + at;
    char hex[33];
    kvjit_key k;
    if (memcmp(line, want, 32) != 0 || line[32] != ' ' || line[65] != '\n') continue;
    memcpy(hex, line + 33, 32);
    hex[32] = '\0';
    if (kvjit_key_parse_hex(&k, hex) != 0) continue;
    int seen = 0;
    for (size_t i = 0; i < n && !seen; i++) seen = kvjit_key_equal(&keys[i], &k);
    if (!seen) keys[n++] = k;
  }
  free(buf);
  return n;
}

size_t kvjit_cache_index_keys(kvjit_cache *c, const kvjit_key *id, kvjit_key *keys, size_t cap) {
  size_t n = 0;
  if (c->write_dir) n = index_read(c, c->write_dir, id, keys, n, cap);
  for (size_t i = 0; i < c->num_read; i++) n = index_read(c, c->read_dirs[i], id, keys, n, cap);
  return n;
}

kvjit_status kvjit_cache_read_header(kvjit_cache *c, const kvjit_key *key, uint8_t **data, kvjit_entry_view *view) {
  char hex[33], path[PATH_MAX], why[256];
  kvjit_key_hex(key, hex);
  for (size_t i = 0; i <= c->num_read; i++) {
    const char *dir = i < c->num_read ? c->read_dirs[i] : c->write_dir;
    if (dir == NULL || snprintf(path, sizeof path, "%s/%s" ENTRY_SUFFIX, dir, hex) >= (int)sizeof path) continue;
    struct stat st;
    int have_st = 0;
    size_t len = 0;
    if (cache_read_entry_file(path, 0, data, &len, &st, &have_st, why, sizeof why) != 1) continue;
    if (cache_untrusted_reason(c, &st) == NULL &&
        kvjit_entry_parse_header(view, *data, len, (uint64_t)st.st_size, key) == KVJIT_OK) {
      return KVJIT_OK;
    }
    free(*data);
    *data = NULL;
  }
  return KVJIT_ERR_NOT_FOUND;
}

void cache_index_clear(kvjit_cache *c) {
  char dir[PATH_MAX], path[PATH_MAX];
  if (c->write_dir == NULL || snprintf(dir, sizeof dir, "%s/" INDEX_DIR, c->write_dir) >= (int)sizeof dir) return;
  DIR *d = kvjit_open_dir(dir);
  if (d == NULL) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    unsigned shard;
    char end;
    if (strlen(e->d_name) != 2 || sscanf(e->d_name, "%2x%c", &shard, &end) != 1) continue;
    if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < (int)sizeof path) unlink(path);
  }
  closedir(d);
}
