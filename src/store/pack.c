/*
 * A cache as one file (`kvjit cache export` / `import`), for image layers and artifact stores.
 * Layout (cache/FORMAT.md, "Packs"), little-endian:
 *   "KVJITPAK", u32 pack version (1), u32 entry count N,
 *   N x (u64 length L, L bytes: one entry file exactly as in a cache dir),
 *   u64 XXH3-64 of every byte before it.
 * Export writes only entries that pass every check; import checks the whole file's checksum
 * before it publishes anything, then checks each entry like a disk read, and publishes through
 * the cache's normal write path (temp + fsync + rename, budget).
 */
#include "cache.h"
#include "cache_list.h"
#include "cache_store.h"
#include "cache_target.h"
#include "pack.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "entry.h"
#include "le.h"
#include "payload.h"
#include "safe_fs.h"
#include "status.h"
#include "xxh.h"

#define PACK_MAGIC "KVJITPAK"
#define PACK_VERSION 1u
#define PACK_HEADER 16u

/* ---- export ------------------------------------------------------------------------------------ */

typedef struct key_list {
  kvjit_key *keys;
  size_t count, cap;
  int failed;
} key_list;

static int collect_key(const kvjit_cache_entry_info *entry, void *user) {
  key_list *list = user;
  kvjit_key key;
  if (entry->status != KVJIT_OK || kvjit_key_parse_hex(&key, entry->key) != 0) return 0;
  for (size_t i = 0; i < list->count; i++) {
    if (kvjit_key_equal(&list->keys[i], &key)) return 0; /* in a read-only layer and the writable dir */
  }
  if (list->count == list->cap) {
    size_t cap = list->cap ? list->cap * 2 : 256;
    kvjit_key *grown = realloc(list->keys, cap * sizeof *grown);
    if (grown == NULL) {
      list->failed = 1;
      return 1;
    }
    list->keys = grown;
    list->cap = cap;
  }
  list->keys[list->count++] = key;
  return 0;
}

/* XXH3-64 of the first @p len bytes of @p fd (read back: the count in the header is only known
 * once every entry is written). */
static int checksum_file(int fd, uint64_t *out) {
  XXH3_state_t sum;
  XXH3_64bits_reset(&sum);
  if (lseek(fd, 0, SEEK_SET) != 0) return -1;
  uint8_t buf[1 << 16];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break;
    XXH3_64bits_update(&sum, buf, (size_t)n);
  }
  *out = XXH3_64bits_digest(&sum);
  return 0;
}

kvjit_status kvjit_pack_export(kvjit_cache *cache, const char *path, int include_read_dirs, uint64_t *entries) {
  if (entries) *entries = 0;
  key_list list = {NULL, 0, 0, 0};
  kvjit_status st = kvjit_cache_visit(cache, include_read_dirs, 1, collect_key, &list, NULL);
  if (st == KVJIT_OK && list.failed) st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "cache export: out of memory");
  if (st != KVJIT_OK) {
    free(list.keys);
    return st;
  }
  /* Never over a FIFO, device, dir or link, never into a cache dir (its lock file, an entry). */
  st = kvjit_cache_check_target(path, "cache export");
  if (st != KVJIT_OK) {
    free(list.keys);
    return st;
  }
  /* A temp file next to the target, renamed over it when complete: never a half-written pack. */
  char tmp[PATH_MAX];
  if (snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid()) >= (int)sizeof tmp) {
    free(list.keys);
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "cache export: path \"%s\" is too long", path);
  }
  int fd = kvjit_fd_above_stdio(open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0644));
  if (fd < 0) {
    free(list.keys);
    return kvjit_fail(KVJIT_ERR_IO, "cache export: cannot create %s: %s", tmp, strerror(errno));
  }
  uint8_t head[PACK_HEADER];
  memcpy(head, PACK_MAGIC, 8);
  kvjit_le_put32(head + 8, PACK_VERSION);
  kvjit_le_put32(head + 12, 0);
  int failed = kvjit_write_full(fd, head, PACK_HEADER) != 0;
  uint32_t written = 0;
  for (size_t i = 0; i < list.count && !failed; i++) {
    uint8_t *data = NULL;
    kvjit_entry_view view;
    /* Read again through the cache, checked in full: it may have changed since the listing. */
    if (kvjit_cache_read_local(cache, &list.keys[i], &data, &view) != KVJIT_OK) continue;
    size_t len = (size_t)(view.payload - data) + (size_t)view.payload_len;
    uint8_t lenbuf[8];
    kvjit_le_put64(lenbuf, len);
    failed = kvjit_write_full(fd, lenbuf, 8) != 0 || kvjit_write_full(fd, data, len) != 0;
    free(data);
    written++;
  }
  free(list.keys);
  uint64_t sum = 0;
  uint8_t tail[8];
  kvjit_le_put32(head + 12, written);
  if (!failed) failed = pwrite(fd, head, PACK_HEADER, 0) != PACK_HEADER || checksum_file(fd, &sum) != 0;
  kvjit_le_put64(tail, sum);
  if (!failed) failed = kvjit_write_full(fd, tail, 8) != 0 || fsync(fd) != 0;
  int err = errno;
  if (failed) close(fd);
  if (!failed && close(fd) != 0) {
    failed = 1;
    err = errno;
  }
  /* Checked again just before the rename: something put there meanwhile is not replaced either. */
  if (!failed && kvjit_replaceable(path) != 0) {
    failed = 1;
    err = errno;
  }
  if (!failed && rename(tmp, path) != 0) {
    failed = 1;
    err = errno;
  }
  if (failed) {
    unlink(tmp);
    return kvjit_fail(KVJIT_ERR_IO, "cache export: writing %s: %s", path, strerror(err));
  }
  if (entries) *entries = written;
  return KVJIT_OK;
}

/* ---- import ------------------------------------------------------------------------------------ */

/* Packs are read in large buffers: a hostile pack of millions of tiny entries costs a few big
 * reads per MiB, never a system call per field. */
#define PACK_READ_BUFFER (1u << 20)
/* The least bytes one entry takes in a pack: its length and an entry's fixed prefix. A count
 * beyond (file size - header - checksum) / this is a lie, refused before anything is read. */
#define PACK_MIN_ENTRY (8u + KVJIT_ENTRY_FIXED_BYTES)

typedef struct pack_reader {
  int fd;
  uint8_t *buf;
  size_t have, at; /* buf[at .. have) not yet taken */
} pack_reader;

/* Take @p len bytes into @p out (NULL: skip them, for the checksum's sake handed to @p sum).
 * 0, or -1 at end of file or on an error (errno). */
static int take(pack_reader *r, uint8_t *out, uint64_t len, XXH3_state_t *sum) {
  while (len > 0) {
    if (r->at == r->have) {
      ssize_t n = kvjit_read_full(r->fd, r->buf, PACK_READ_BUFFER);
      if (n <= 0) {
        if (n == 0) errno = EIO;
        return -1;
      }
      r->have = (size_t)n;
      r->at = 0;
    }
    size_t n = r->have - r->at < len ? r->have - r->at : (size_t)len;
    if (sum) XXH3_64bits_update(sum, r->buf + r->at, n);
    if (out) {
      memcpy(out, r->buf + r->at, n);
      out += n;
    }
    r->at += n;
    len -= n;
  }
  return 0;
}

/* Walk the pack once: the count possible for the file's size, every length within bounds, the
 * counts and size consistent, the checksum right. Nothing is published before this has passed. */
static kvjit_status check_pack(pack_reader *r, uint64_t file_len, const char *path, uint32_t *count) {
  uint8_t head[PACK_HEADER];
  if (file_len < PACK_HEADER + 8 || take(r, head, PACK_HEADER, NULL) != 0) {
    return kvjit_fail(KVJIT_ERR_CORRUPT, "cache import: %s is too short to be a pack", path);
  }
  if (memcmp(head, PACK_MAGIC, 8) != 0) return kvjit_fail(KVJIT_ERR_CORRUPT, "cache import: %s is not a kvjit pack", path);
  if (kvjit_le_get32(head + 8) != PACK_VERSION) {
    return kvjit_fail(KVJIT_ERR_CORRUPT, "cache import: %s: pack version %u, expected %u", path, kvjit_le_get32(head + 8),
                      PACK_VERSION);
  }
  *count = kvjit_le_get32(head + 12);
  const uint64_t room = file_len - PACK_HEADER - 8;
  if ((uint64_t)*count > room / PACK_MIN_ENTRY) {
    return kvjit_fail(KVJIT_ERR_CORRUPT, "cache import: %s: claims %u entries, more than its %llu bytes can hold",
                      path, *count, (unsigned long long)file_len);
  }
  XXH3_state_t sum;
  XXH3_64bits_reset(&sum);
  XXH3_64bits_update(&sum, head, PACK_HEADER);
  uint64_t at = PACK_HEADER;
  for (uint32_t i = 0; i < *count; i++) {
    uint8_t lenbuf[8];
    if (at + 8 > file_len - 8 || take(r, lenbuf, 8, &sum) != 0) {
      return kvjit_fail(KVJIT_ERR_CORRUPT, "cache import: %s is truncated at entry %u", path, i);
    }
    uint64_t len = kvjit_le_get64(lenbuf);
    at += 8;
    /* Each entry at least its fixed prefix, and the rest of the count still possible after it. */
    uint64_t left_after = (uint64_t)(*count - i - 1) * PACK_MIN_ENTRY;
    if (len < KVJIT_ENTRY_FIXED_BYTES || len > KVJIT_ENTRY_MAX_BYTES || len > file_len - 8 - at ||
        left_after > file_len - 8 - at - len) {
      return kvjit_fail(KVJIT_ERR_CORRUPT, "cache import: %s: entry %u claims %llu bytes", path, i,
                        (unsigned long long)len);
    }
    if (take(r, NULL, len, &sum) != 0) {
      return kvjit_fail(KVJIT_ERR_IO, "cache import: reading %s: %s", path, strerror(errno));
    }
    at += len;
  }
  uint8_t tail[8];
  if (at + 8 != file_len || take(r, tail, 8, NULL) != 0) {
    return kvjit_fail(KVJIT_ERR_CORRUPT, "cache import: %s: %llu bytes after %u entries, expected 8", path,
                      (unsigned long long)(file_len - at), *count);
  }
  if (kvjit_le_get64(tail) != XXH3_64bits_digest(&sum)) {
    return kvjit_fail(KVJIT_ERR_CORRUPT, "cache import: %s: checksum mismatch (damaged in transit?)", path);
  }
  return KVJIT_OK;
}

kvjit_status kvjit_pack_import(kvjit_cache *cache, const char *path, uint64_t *imported, uint64_t *present,
                               uint64_t *bad) {
  if (imported) *imported = 0;
  if (present) *present = 0;
  if (bad) *bad = 0;
  if (!kvjit_cache_writable(cache)) return kvjit_fail(KVJIT_ERR_IO, "cache import: no writable cache dir");
  /* The pack may be a link to one (an artifact store's layout): followed, but a FIFO or device is
   * never waited on (O_NONBLOCK) and refused once open. */
  int fd = kvjit_fd_above_stdio(open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (fd < 0) return kvjit_fail(KVJIT_ERR_IO, "cache import: cannot open %s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "cache import: %s is not a regular file", path);
  }
  pack_reader r = {fd, malloc(PACK_READ_BUFFER), 0, 0};
  if (r.buf == NULL) {
    close(fd);
    return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "cache import: out of memory");
  }
  uint32_t count = 0;
  kvjit_status st = check_pack(&r, (uint64_t)sb.st_size, path, &count);
  /* Two passes: every other entry, then the aliases, each published only while its bundle is
   * there (cache.h): a pack's order must not turn aliases into orphans or drop them. */
  for (int pass = 0; pass < 2 && st == KVJIT_OK; pass++) {
    if (lseek(fd, PACK_HEADER, SEEK_SET) != PACK_HEADER) {
      st = kvjit_fail(KVJIT_ERR_IO, "cache import: seeking in %s: %s", path, strerror(errno));
    }
    r.have = r.at = 0;
    for (uint32_t i = 0; i < count && st == KVJIT_OK; i++) {
      uint8_t lenbuf[8];
      if (take(&r, lenbuf, 8, NULL) != 0) {
        st = kvjit_fail(KVJIT_ERR_IO, "cache import: reading %s: %s", path, strerror(errno));
        break;
      }
      size_t len = (size_t)kvjit_le_get64(lenbuf); /* bounded by check_pack */
      uint8_t *data = malloc(len ? len : 1);
      if (data == NULL) {
        st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "cache import: out of memory");
        break;
      }
      if (take(&r, data, len, NULL) != 0) {
        free(data);
        st = kvjit_fail(KVJIT_ERR_IO, "cache import: reading %s: %s", path, strerror(errno));
        break;
      }
      kvjit_entry_view view;
      if (kvjit_entry_parse(&view, data, len, NULL, 1) != KVJIT_OK || kvjit_entry_check_payload(&view) != KVJIT_OK) {
        /* Checksummed in the pack but not a good entry: a pack from a buggy or hostile writer. */
        if (bad && pass == 0) (*bad)++;
        free(data);
        continue;
      }
      if ((view.target.kind == KVJIT_PAYLOAD_ALIAS) != (pass == 1)) {
        free(data);
        continue;
      }
      uint8_t *have = NULL;
      kvjit_entry_view have_view;
      if (kvjit_cache_read_local(cache, &view.key, &have, &have_view) == KVJIT_OK) {
        free(have);
        if (present) (*present)++;
      } else if ((st = kvjit_cache_write(cache, &view.key, data, len)) == KVJIT_OK) {
        if (imported) (*imported)++;
      } else if (st == KVJIT_ERR_NOT_FOUND) {
        st = KVJIT_OK; /* an alias whose bundle the pack lacks (or the budget evicted): useless, skipped */
      }
      /* A write that cannot complete (full disk, ...) ends the import with its reason. */
      free(data);
    }
  }
  free(r.buf);
  close(fd);
  return st;
}
