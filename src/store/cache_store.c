/*
 * Publication within the byte budget, however many processes write at once. Every publication
 * (and every prune) holds the dir lock, an OFD lock on byte DIR_LOCK_BYTE of D/v2/lock, while it
 * accounts, evicts and renames; the dir's total is kept in a small ledger at the start of that
 * same file, so a publication costs a pread and a pwrite, and the dir is scanned only when the
 * ledger is missing, old, or says the new entry would not fit. The ledger may over-count (a
 * quarantined file swept, a prune by an older kvjit) but never under-counts: bytes are only added
 * under the lock, and the ledger is written before the rename it accounts for.
 */
#include "cache.h"
#include "cache_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache_internal.h"
#include "le.h"
#include "payload.h"
#include "quarantine.h"
#include "safe_fs.h"
#include "status.h"
#include "xxh.h"

#define LEDGER_MAGIC "KVJITLDG"
#define LEDGER_VERSION 1u
#define LEDGER_BYTES 40
/* A ledger older than this is checked against a scan (bounds any drift, e.g. after a power cut). */
#define LEDGER_RESCAN_SECONDS 3600
/* Stale temp files unlinked per scan at most: the sweep rides on a scan and stays bounded. */
#define SWEEP_PER_SCAN 256
/* A bundle takes at most this part of the budget (kvjit_cache_bundle_limit()). */
#define BUNDLE_BUDGET_SHARE 8
/* An mtime this far in the future is a wrong clock or a planted file: evicted first. */
#define FUTURE_SLACK_SECONDS 60

/* ---- the ledger ------------------------------------------------------------------------------ */

typedef struct ledger {
  uint64_t bytes;   /* entries + quarantined files */
  int64_t scanned;  /* when a scan last confirmed it (Unix seconds) */
} ledger;

/* 0, or -1 when the ledger is missing, torn or of another version. */
static int ledger_read(int fd, ledger *out) {
  uint8_t b[LEDGER_BYTES];
  if (pread(fd, b, sizeof b, 0) != (ssize_t)sizeof b) return -1;
  if (memcmp(b, LEDGER_MAGIC, 8) != 0 || kvjit_le_get64(b + 8) != LEDGER_VERSION || kvjit_le_get64(b + 32) != XXH3_64bits(b, 32)) return -1;
  out->bytes = kvjit_le_get64(b + 16);
  out->scanned = (int64_t)kvjit_le_get64(b + 24);
  return 0;
}

static void ledger_write(int fd, const ledger *l) {
  uint8_t b[LEDGER_BYTES];
  memcpy(b, LEDGER_MAGIC, 8);
  kvjit_le_put64(b + 8, LEDGER_VERSION);
  kvjit_le_put64(b + 16, l->bytes);
  kvjit_le_put64(b + 24, (uint64_t)l->scanned);
  kvjit_le_put64(b + 32, XXH3_64bits(b, 32));
  /* One small pwrite: a reader sees the old or the new record; a torn one fails its checksum. */
  ssize_t w = pwrite(fd, b, sizeof b, 0);
  (void)w;
}

/* ---- scanning and evicting --------------------------------------------------------------------- */

typedef struct lru_item {
  char name[ENTRY_NAME_LEN + 1];
  char bundle[ENTRY_NAME_LEN + 1]; /* an alias: its bundle's entry name; "" for any other entry */
  int64_t last_use; /* mtime; INT64_MIN for one in the future */
  uint64_t bytes;
  size_t unit; /* eviction unit: the index of its bundle (an alias whose bundle is here), else its own */
} lru_item;

/* Files this small may be aliases (a header and 24 bytes): their kind is read during a scan that
 * evicts, so that an alias goes with its bundle. */
#define ALIAS_MAX_FILE (16u * 1024)

/* The bundle's entry name of the alias @p name (a file of @p size bytes in @p dfd), into @p out;
 * "" when it is not an alias (or cannot be read: then it is evicted as what it is, a file). */
static void alias_bundle(int dfd, const char *name, off_t size, char *out) {
  out[0] = '\0';
  if (size < (off_t)KVJIT_ENTRY_FIXED_BYTES || size > (off_t)ALIAS_MAX_FILE) return;
  int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return;
  uint8_t *buf = malloc((size_t)size);
  kvjit_entry_view v;
  if (buf && kvjit_read_full(fd, buf, (size_t)size) == (ssize_t)size && buf[56] == KVJIT_PAYLOAD_ALIAS &&
      kvjit_entry_parse(&v, buf, (size_t)size, NULL, 1) == KVJIT_OK && v.target.kind == KVJIT_PAYLOAD_ALIAS) {
    kvjit_entry_alias a;
    kvjit_entry_alias_get(&v, &a);
    char hex[33];
    kvjit_key_hex(&a.bundle, hex);
    snprintf(out, ENTRY_NAME_LEN + 1, "%s%s", hex, ENTRY_SUFFIX);
  }
  free(buf);
  close(fd);
}

typedef struct dir_scan {
  uint64_t entry_bytes, quarantine_bytes;
  lru_item *items; /* entries, when collected */
  size_t count, capacity;
} dir_scan;

static uint64_t quarantine_bytes(const char *dir, int remove) {
  char q[PATH_MAX];
  if (snprintf(q, sizeof q, "%s/" QUARANTINE_NAME, dir) >= (int)sizeof q) return 0;
  DIR *d = kvjit_open_dir(q);
  if (!d) return 0;
  uint64_t total = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    struct stat st;
    if (e->d_name[0] == '.' || fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    if (remove && unlinkat(dirfd(d), e->d_name, 0) == 0) continue;
    total += (uint64_t)st.st_size;
  }
  closedir(d);
  return total;
}

/* Total the writable dir (entries and quarantined files); stale temp files of dead writers are
 * swept on the way. With @p collect, the entries are listed for eviction. 0, or -1 (errno). */
static int scan_dir(kvjit_cache *c, int collect, dir_scan *out) {
  memset(out, 0, sizeof *out);
  cache_trim_quarantine(c->write_dir);
  out->quarantine_bytes = quarantine_bytes(c->write_dir, 0);
  DIR *d = kvjit_open_dir(c->write_dir);
  if (!d) return -1;
  time_t now = time(NULL);
  unsigned swept = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    struct stat st;
    if (e->d_name[0] == '.') {
      if ((strncmp(e->d_name, ".tmp-", 5) == 0 || strncmp(e->d_name, ".probe-", 7) == 0) && swept < SWEEP_PER_SCAN &&
          fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && now - st.st_mtime > STALE_TEMP_SECONDS) {
        if (unlinkat(dirfd(d), e->d_name, 0) == 0) swept++;
      }
      continue;
    }
    if (!cache_is_entry_name(e->d_name) || fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    /* A special file or dir planted under an entry's name is not cached bytes (reads reject it). */
    if (!S_ISREG(st.st_mode)) continue;
    out->entry_bytes += (uint64_t)st.st_size;
    if (!collect) continue;
    if (out->count == out->capacity) {
      size_t capacity = out->capacity ? 2 * out->capacity : 64;
      lru_item *grown = realloc(out->items, capacity * sizeof *grown);
      if (!grown) {
        closedir(d);
        free(out->items);
        out->items = NULL;
        errno = ENOMEM;
        return -1;
      }
      out->items = grown;
      out->capacity = capacity;
    }
    lru_item *it = &out->items[out->count++];
    memcpy(it->name, e->d_name, sizeof it->name);
    alias_bundle(dirfd(d), e->d_name, st.st_size, it->bundle);
    it->last_use = st.st_mtime > now + FUTURE_SLACK_SECONDS ? INT64_MIN : (int64_t)st.st_mtime;
    it->bytes = (uint64_t)st.st_size;
  }
  closedir(d);
  return 0;
}

static int by_name(const void *a, const void *b) { return strcmp(((const lru_item *)a)->name, ((const lru_item *)b)->name); }

/* 1 when @p name is a regular file in a read-only layer (a bundle there is never evicted by us). */
static int in_read_dirs(const kvjit_cache *c, const char *name) {
  for (size_t i = 0; i < c->num_read; i++) {
    char path[PATH_MAX];
    struct stat st;
    if (snprintf(path, sizeof path, "%s/%s", c->read_dirs[i], name) < (int)sizeof path && lstat(path, &st) == 0 &&
        S_ISREG(st.st_mode))
      return 1;
  }
  return 0;
}

typedef struct lru_unit {
  size_t head;      /* its bundle's (or lone entry's) item */
  int64_t last_use; /* the newest of its files: an alias used keeps its bundle */
  size_t index;     /* its place before sorting (members are found by it) */
  int orphan;       /* an alias whose bundle is gone */
} lru_unit;

static int unit_cmp(const void *a, const void *b) {
  const lru_unit *x = a, *y = b;
  return (x->last_use > y->last_use) - (x->last_use < y->last_use);
}

/* Unlink item @p i, counted. */
static void evict_item(kvjit_cache *c, dir_scan *s, size_t i, uint64_t *removed_entries, uint64_t *removed_bytes) {
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/%s", c->write_dir, s->items[i].name) >= (int)sizeof path) return;
  if (unlink(path) == 0) {
    s->entry_bytes -= s->items[i].bytes;
    if (removed_entries) (*removed_entries)++;
    if (removed_bytes) *removed_bytes += s->items[i].bytes;
  }
}

/* Remove until the dir holds at most @p target bytes: quarantined files first (kept only for a
 * post-mortem), then aliases whose bundle is gone (a lookup of one only misses; with
 * @p orphans_too all of them, over the budget or not), then the least recently used units, a
 * bundle with all its aliases at once, so that no alias outlives its bundle; never the units of
 * @p keep and @p keep_too. Unlinking is safe against concurrent
 * readers: an open file stays readable, and a later reader misses and recompiles. */
static void evict_to(kvjit_cache *c, dir_scan *s, uint64_t target, const char *keep, const char *keep_too,
                     int orphans_too, uint64_t *removed_entries, uint64_t *removed_bytes) {
  if (s->entry_bytes + s->quarantine_bytes <= target && !orphans_too) return;
  if (s->quarantine_bytes != 0 && s->entry_bytes + s->quarantine_bytes > target)
    s->quarantine_bytes = quarantine_bytes(c->write_dir, 1);
  if (s->count == 0) return;
  qsort(s->items, s->count, sizeof *s->items, by_name);
  lru_unit *units = malloc((s->count ? s->count : 1) * sizeof *units);
  size_t *unit_of = malloc((s->count ? s->count : 1) * sizeof *unit_of);
  if (units == NULL || unit_of == NULL) {
    free(units);
    free(unit_of);
    return; /* over budget until the next scan: never an alias without its bundle */
  }
  for (size_t i = 0; i < s->count; i++) {
    lru_item *it = &s->items[i];
    it->unit = i;
    if (it->bundle[0] == '\0') continue;
    lru_item probe;
    memcpy(probe.name, it->bundle, sizeof probe.name);
    const lru_item *b = bsearch(&probe, s->items, s->count, sizeof *s->items, by_name);
    if (b != NULL) it->unit = (size_t)(b - s->items);
    else if (!in_read_dirs(c, it->bundle)) it->last_use = INT64_MIN; /* an orphan: goes first */
  }
  size_t num_units = 0;
  for (size_t i = 0; i < s->count; i++) {
    if (s->items[i].unit != i) continue;
    unit_of[i] = num_units;
    const lru_item *it = &s->items[i];
    units[num_units] = (lru_unit){i, it->last_use, num_units, it->bundle[0] != '\0' && it->last_use == INT64_MIN};
    num_units++;
  }
  for (size_t i = 0; i < s->count; i++) {
    lru_unit *u = &units[unit_of[s->items[i].unit]];
    if (s->items[i].last_use > u->last_use && u->last_use != INT64_MIN) u->last_use = s->items[i].last_use;
  }
  /* The units kept: the new entry's own, and (an alias being written) its bundle's. */
  size_t kept[2] = {SIZE_MAX, SIZE_MAX};
  const char *keeps[2] = {keep, keep_too};
  for (int k = 0; k < 2; k++) {
    if (keeps[k] == NULL) continue;
    lru_item probe;
    snprintf(probe.name, sizeof probe.name, "%s", keeps[k]);
    const lru_item *it = bsearch(&probe, s->items, s->count, sizeof *s->items, by_name);
    if (it != NULL) kept[k] = it->unit;
  }
  /* Each unit's members, contiguous: item indexes ordered by unit. */
  size_t *members = malloc((s->count ? s->count : 1) * sizeof *members), *first = calloc(num_units + 1, sizeof *first);
  if (members == NULL || first == NULL) {
    free(members);
    free(first);
    free(units);
    free(unit_of);
    return;
  }
  for (size_t i = 0; i < s->count; i++) first[unit_of[s->items[i].unit] + 1]++;
  for (size_t u = 0; u < num_units; u++) first[u + 1] += first[u];
  size_t *fill = calloc(num_units ? num_units : 1, sizeof *fill);
  for (size_t i = 0; fill && i < s->count; i++) {
    size_t u = unit_of[s->items[i].unit];
    members[first[u] + fill[u]++] = i;
  }
  qsort(units, num_units, sizeof *units, unit_cmp);
  for (size_t n = 0; fill && n < num_units; n++) {
    if (s->entry_bytes + s->quarantine_bytes <= target && !(orphans_too && units[n].orphan)) continue;
    const size_t head = units[n].head, u = units[n].index;
    if (head == kept[0] || head == kept[1]) continue;
    /* Aliases first, their bundle last: a reader never finds an alias whose bundle was removed
     * before it, only a miss. */
    for (size_t m = first[u]; m < first[u + 1]; m++)
      if (members[m] != head) evict_item(c, s, members[m], removed_entries, removed_bytes);
    evict_item(c, s, head, removed_entries, removed_bytes);
  }
  free(fill);
  free(members);
  free(first);
  free(units);
  free(unit_of);
}

/* ---- publication ----------------------------------------------------------------------------- */

/* Count a failed write, warn once per cache, and return KVJIT_ERR_IO naming why. */
static kvjit_status write_failure(kvjit_cache *c, const char *what, const char *detail) {
  atomic_fetch_add(&c->counters.write_failures, 1);
  int expected = 0;
  if (atomic_compare_exchange_strong(&c->write_warned, &expected, 1) && c->log != 0) {
    kvjit_log_line("warning: cannot write cache entries (%s: %s) to %s; continuing memory-only for them", what, detail,
                   c->write_dir);
  }
  /* The reason first: a long dir must not push it out of the bounded last-error line. */
  return kvjit_fail(KVJIT_ERR_IO, "cache entry not written (%s: %s) to %s", what, detail, c->write_dir);
}

static uint64_t minus(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

/* Take the dir lock: its fd, or -1 with *status (KVJIT_ERR_BUSY: held too long by another
 * process; KVJIT_ERR_IO) and the reason in the last error. */
static int lock_dir(kvjit_cache *c, kvjit_status *status) {
  int timed_out = 0;
  int fd = cache_lock_byte(c, DIR_LOCK_BYTE, NULL, NULL, &timed_out);
  if (fd < 0 && timed_out) {
    *status = kvjit_fail(KVJIT_ERR_BUSY, "another process held the dir lock of %s for %u ms", c->write_dir,
                         c->lock_timeout_ms);
  } else if (fd < 0) {
    *status = kvjit_fail(KVJIT_ERR_IO, "cannot open the lock file of %s: %s", c->write_dir, strerror(errno));
  }
  return fd;
}

/* Under the dir lock: make room for @p len bytes replacing @p old_bytes, and write the ledger
 * that counts them (before the rename: a crash in between over-counts, which a scan corrects). */
static void account(kvjit_cache *c, int lock_fd, const char *name, const char *keep_too, uint64_t old_bytes,
                    uint64_t len, ledger *before) {
  time_t now = time(NULL);
  ledger l;
  int fresh = ledger_read(lock_fd, &l) == 0 && now - l.scanned < LEDGER_RESCAN_SECONDS && l.scanned <= now + FUTURE_SLACK_SECONDS;
  dir_scan s;
  memset(&s, 0, sizeof s);
  if (!fresh || minus(l.bytes, old_bytes) + len > c->max_bytes) {
    /* Scan (the ledger may over-count), and evict if the entry still does not fit: down to the
     * budget less the entry, no further (the dir keeps all the budget allows, less at most one
     * unit's overshoot: the lower bound a warm start relies on). */
    if (scan_dir(c, 1, &s) == 0) {
      l.bytes = s.entry_bytes + s.quarantine_bytes;
      l.scanned = now;
      if (minus(l.bytes, old_bytes) + len > c->max_bytes) {
        uint64_t target = minus(c->max_bytes, len);
        uint64_t removed = 0;
        evict_to(c, &s, target + old_bytes, name, keep_too, 0, &removed, NULL);
        atomic_fetch_add(&c->counters.evictions, removed);
        l.bytes = s.entry_bytes + s.quarantine_bytes;
      }
    } else if (!fresh) {
      l.bytes = 0; /* no scan and no ledger: count from here (a later scan corrects) */
      l.scanned = 0;
    }
    free(s.items);
  }
  *before = l;
  l.bytes = minus(l.bytes, old_bytes) + len;
  ledger_write(lock_fd, &l);
}

kvjit_status kvjit_cache_write(kvjit_cache *c, const kvjit_key *key, const uint8_t *data, size_t len) {
  if (!kvjit_cache_writable(c)) {
    return kvjit_fail(KVJIT_ERR_IO, "cache entry not written: %s", kvjit_cache_unwritable_reason(c));
  }
  /* What the readers will check, checked before anyone can read it: an entry kvjit's own reader
   * would reject would only be quarantined and rebuilt by every process. */
  kvjit_entry_view view;
  if (kvjit_entry_parse(&view, data, len, key, 1) != KVJIT_OK || kvjit_entry_check_payload(&view) != KVJIT_OK) {
    char detail[512];
    snprintf(detail, sizeof detail, "%s", kvjit_last_error());
    return write_failure(c, "the new entry fails kvjit's own entry check", detail);
  }
  char hex[33], name[64], tmp[PATH_MAX], final[PATH_MAX];
  kvjit_key_hex(key, hex);
  snprintf(name, sizeof name, "%s%s", hex, ENTRY_SUFFIX);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (snprintf(tmp, sizeof tmp, "%s/.tmp-%s-%ld-%lx", c->write_dir, hex, (long)getpid(),
               (unsigned long)(ts.tv_nsec ^ (long)pthread_self())) >= (int)sizeof tmp ||
      snprintf(final, sizeof final, "%s/%s", c->write_dir, name) >= (int)sizeof final) {
    return write_failure(c, "temp file path", strerror(ENAMETOOLONG));
  }
  int fd = kvjit_fd_above_stdio(open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0644));
  if (fd < 0) return write_failure(c, "create temp file", strerror(errno));
  if (kvjit_write_full(fd, data, len) != 0 || fsync(fd) != 0) {
    int err = errno;
    close(fd);
    unlink(tmp);
    return write_failure(c, "write temp file", strerror(err));
  }
  if (close(fd) != 0) {
    int err = errno;
    unlink(tmp);
    return write_failure(c, "write temp file", strerror(err));
  }
  kvjit_status lock_status;
  int lock_fd = lock_dir(c, &lock_status);
  if (lock_fd < 0) {
    char detail[512];
    snprintf(detail, sizeof detail, "%s", kvjit_last_error());
    unlink(tmp);
    return write_failure(c, "dir lock", detail);
  }
  /* An alias is published only while its bundle is there (and is kept while it is written): one
   * whose bundle was evicted meanwhile would only be an orphan, a miss for every reader. */
  char bundle[64] = "";
  if (view.target.kind == KVJIT_PAYLOAD_ALIAS) {
    kvjit_entry_alias a;
    kvjit_entry_alias_get(&view, &a);
    char bhex[33], bpath[PATH_MAX];
    kvjit_key_hex(&a.bundle, bhex);
    snprintf(bundle, sizeof bundle, "%s%s", bhex, ENTRY_SUFFIX);
    struct stat bst;
    int here = snprintf(bpath, sizeof bpath, "%s/%s", c->write_dir, bundle) < (int)sizeof bpath &&
               lstat(bpath, &bst) == 0 && S_ISREG(bst.st_mode);
    if (!here && !in_read_dirs(c, bundle)) {
      close(lock_fd);
      unlink(tmp);
      /* Not a failing disk: the caller builds the kernel alone instead (bundle.c). */
      return kvjit_fail(KVJIT_ERR_NOT_FOUND, "alias not written: its bundle %s is not in %s (evicted meanwhile)",
                        bundle, c->write_dir);
    }
  }
  struct stat old;
  uint64_t old_bytes = lstat(final, &old) == 0 && S_ISREG(old.st_mode) ? (uint64_t)old.st_size : 0;
  ledger before;
  account(c, lock_fd, name, bundle[0] ? bundle : NULL, old_bytes, len, &before);
  if (rename(tmp, final) != 0) {
    int err = errno;
    ledger_write(lock_fd, &before);
    close(lock_fd);
    unlink(tmp);
    return write_failure(c, "rename into place", strerror(err));
  }
  cache_index_add(c, &view);
  close(lock_fd);
  /* Make the rename durable too, so a power cut cannot leave a name without its data. */
  int dfd = kvjit_fd_above_stdio(open(c->write_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  atomic_fetch_add(&c->counters.disk_writes, 1);
  return KVJIT_OK;
}

size_t kvjit_cache_bundle_limit(const kvjit_cache *c) {
  uint64_t limit = c->max_bytes / BUNDLE_BUDGET_SHARE;
  return limit > SIZE_MAX ? SIZE_MAX : (size_t)limit;
}

/* ---- prune and clear ------------------------------------------------------------------------- */

kvjit_status kvjit_cache_evict(kvjit_cache *c, uint64_t max_bytes, uint64_t *removed_entries, uint64_t *removed_bytes) {
  if (removed_entries) *removed_entries = 0;
  if (removed_bytes) *removed_bytes = 0;
  if (!kvjit_cache_writable(c)) return kvjit_fail(KVJIT_ERR_IO, "no writable cache dir: %s", kvjit_cache_unwritable_reason(c));
  kvjit_status lock_status;
  int lock_fd = lock_dir(c, &lock_status);
  if (lock_fd < 0) return lock_status;
  dir_scan s;
  if (scan_dir(c, 1, &s) != 0) {
    int err = errno;
    close(lock_fd);
    if (err == ENOMEM) return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "prune: out of memory");
    return kvjit_fail(KVJIT_ERR_IO, "cannot read %s: %s", c->write_dir, strerror(err));
  }
  evict_to(c, &s, max_bytes, NULL, NULL, 1, removed_entries, removed_bytes);
  ledger l = {s.entry_bytes + s.quarantine_bytes, (int64_t)time(NULL)};
  ledger_write(lock_fd, &l);
  close(lock_fd);
  free(s.items);
  return KVJIT_OK;
}

int kvjit_cache_remove_orphan(kvjit_cache *c, const char *path, const char *bundle_hex) {
  if (!kvjit_cache_writable(c) || path == NULL || bundle_hex == NULL) return 0;
  size_t dir_len = strlen(c->write_dir);
  const char *name = path + dir_len + 1;
  if (strncmp(path, c->write_dir, dir_len) != 0 || path[dir_len] != '/' || !cache_is_entry_name(name)) return 0;
  char bundle[64], bpath[PATH_MAX];
  snprintf(bundle, sizeof bundle, "%.32s%s", bundle_hex, ENTRY_SUFFIX);
  kvjit_status lock_status;
  int lock_fd = lock_dir(c, &lock_status);
  if (lock_fd < 0) return 0;
  /* Under the dir lock, its bundle still gone: nothing can publish it meanwhile. */
  struct stat st;
  int bundle_here = snprintf(bpath, sizeof bpath, "%s/%s", c->write_dir, bundle) < (int)sizeof bpath &&
                    lstat(bpath, &st) == 0;
  int removed = !bundle_here && !in_read_dirs(c, bundle) && unlink(path) == 0;
  close(lock_fd);
  return removed;
}

kvjit_status kvjit_cache_remove_all(kvjit_cache *c, uint64_t *removed_entries) {
  uint64_t n = 0;
  kvjit_status st = kvjit_cache_evict(c, 0, &n, NULL);
  if (st == KVJIT_OK) cache_index_clear(c);
  if (removed_entries) *removed_entries = n;
  return st;
}
