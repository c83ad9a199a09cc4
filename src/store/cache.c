/* Disk cache: dirs (trusted before anything is made in them), lookups, bad entries, quarantine,
 * per-key OFD locks. Publication and eviction: cache_store.c; listing: cache_list.c. */
#include "cache.h"

#include "cache_internal.h"
#include "payload.h"
#include "quarantine.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "le.h"
#include "parse.h"
#include "safe_fs.h"
#include "status.h"
#include "target.h"

void cache_warn(const kvjit_cache *c, const char *what, const char *detail) {
  if (c->log == 0) return;
  kvjit_log_line("warning: %s%s", what, detail);
}

int cache_trusted(const struct stat *st) {
  if (st->st_uid != geteuid() && st->st_uid != 0) return 0;
  if (st->st_mode & (S_IWGRP | S_IWOTH)) return 0;
  return 1;
}

const char *cache_untrusted_reason(const kvjit_cache *c, const struct stat *st) {
  if (c->allow_shared) return NULL;
  if (st->st_uid != geteuid() && st->st_uid != 0) return "owned by another user";
  if (st->st_mode & (S_IWGRP | S_IWOTH)) return "writable by other users";
  return NULL;
}

static char *path_join(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la + lb + 2 > PATH_MAX) return NULL;
  char *p = malloc(la + lb + 2);
  if (p) {
    memcpy(p, a, la);
    p[la] = '/';
    memcpy(p + la + 1, b, lb + 1);
  }
  return p;
}

/* @p path, made absolute against the working dir (a later chdir must not move the cache). */
static char *absolute_path(const char *path) {
  if (path[0] == '/') return strlen(path) < PATH_MAX ? strdup(path) : NULL;
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof cwd) == NULL) return NULL;
  return path_join(cwd, path);
}

/* mkdir -p, new components 0700. 0 or -1 with errno. */
static int make_dirs(const char *path) {
  char buf[PATH_MAX];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof buf) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] == '/' || buf[i] == '\0') {
      char saved = buf[i];
      buf[i] = '\0';
      if (mkdir(buf, 0700) != 0 && errno != EEXIST) return -1;
      buf[i] = saved;
    }
  }
  return 0;
}

/* An absolute dir from the environment variable @p name, or NULL (a relative one is ignored with a
 * warning: it would name a different dir in every working directory). */
static const char *absolute_env(const kvjit_cache *c, const char *name) {
  const char *value = kvjit_env_text(name);
  if (value == NULL || value[0] == '/') return value;
  if (c->log != 0) kvjit_log_line("warning: ignoring %s=\"%.200s\": not an absolute path", name, value);
  return NULL;
}

static char *default_write_root(const kvjit_cache *c) {
  const char *env = kvjit_env_text("KVJIT_CACHE_DIR");
  if (env) return absolute_path(env);
  const char *xdg = absolute_env(c, "XDG_CACHE_HOME");
  if (xdg) return path_join(xdg, "kvjit");
  const char *home = absolute_env(c, "HOME");
  if (!home) {
    struct passwd *pw = getpwuid(geteuid());
    home = pw && pw->pw_dir && pw->pw_dir[0] == '/' ? pw->pw_dir : NULL;
  }
  if (!home) return NULL;
  return path_join(home, ".cache/kvjit");
}

/* Probe that we can create files in dir (catches read-only mounts that access() misses). The name
 * is unique per thread and instant: contexts created at once by two threads of a process (or by two
 * containers whose pids coincide) must not see each other's probe as EEXIST and go memory-only. */
static int probe_writable(const char *dir) {
  char probe[PATH_MAX];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (snprintf(probe, sizeof probe, "%s/.probe-%ld-%lx-%lx", dir, (long)getpid(), (unsigned long)pthread_self(),
               (unsigned long)ts.tv_nsec) >= (int)sizeof probe) {
    errno = ENAMETOOLONG;
    return -1;
  }
  int fd = kvjit_fd_above_stdio(open(probe, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600));
  if (fd < 0) return -1;
  close(fd);
  unlink(probe);
  return 0;
}

/* Why a dir cannot hold the cache: NULL when it is a dir we may trust. */
static const char *dir_refusal(const kvjit_cache *c, const struct stat *st) {
  if (!S_ISDIR(st->st_mode)) return "is not a directory";
  if (c->allow_shared) return NULL;
  if (st->st_uid != geteuid() && st->st_uid != 0) {
    return "is owned by another user (set KVJIT_CACHE_ALLOW_SHARED=1 to trust it)";
  }
  if (st->st_mode & (S_IWGRP | S_IWOTH)) return "is writable by other users (set KVJIT_CACHE_ALLOW_SHARED=1 to trust it)";
  return NULL;
}

/* The writable dir: resolved, and its trust checked before anything is created in it; a
 * read-only cache creates nothing and only reads what is there. */
static void setup_write_dir(kvjit_cache *c, const char *configured) {
  char reason[PATH_MAX + 200];
  c->write_root = configured ? absolute_path(configured) : default_write_root(c);
  if (c->write_root == NULL) {
    c->degraded = strdup(configured || kvjit_env_text("KVJIT_CACHE_DIR")
                             ? "cache dir path cannot be made absolute (too long, or no working directory)"
                             : "no cache dir: KVJIT_CACHE_DIR, XDG_CACHE_HOME and HOME are unset or relative");
    return;
  }
  char *dir = path_join(c->write_root, CACHE_SUBDIR);
  if (dir == NULL) {
    snprintf(reason, sizeof reason, "cache dir path is longer than PATH_MAX (%d)", PATH_MAX);
    c->degraded = strdup(reason);
    return;
  }
  struct stat st;
  const char *refused = NULL;
  const char *subject = c->write_root;
  int exists = stat(c->write_root, &st) == 0;
  if (!exists && errno == ENOENT && c->read_only) goto nothing_there;
  if (!exists && errno == ENOENT && make_dirs(c->write_root) == 0) exists = stat(c->write_root, &st) == 0;
  if (!exists) {
    snprintf(reason, sizeof reason, "cannot create %s: %s", c->write_root, strerror(errno));
    goto degraded;
  }
  if ((refused = dir_refusal(c, &st)) != NULL) goto refused;
  subject = dir;
  if (lstat(dir, &st) != 0) {
    if (errno != ENOENT) {
      snprintf(reason, sizeof reason, "cannot use %s: %s", dir, strerror(errno));
      goto degraded;
    }
    if (c->read_only) goto nothing_there;
    if ((mkdir(dir, 0700) != 0 && errno != EEXIST) || lstat(dir, &st) != 0) {
      snprintf(reason, sizeof reason, "cannot create %s: %s", dir, strerror(errno));
      goto degraded;
    }
  }
  if ((refused = dir_refusal(c, &st)) != NULL) goto refused;
  if (!c->read_only) {
    if (probe_writable(dir) != 0) {
      snprintf(reason, sizeof reason, "%s is not writable: %s", dir, strerror(errno));
      goto degraded;
    }
    char *q = path_join(dir, QUARANTINE_NAME);
    if (q) mkdir(q, 0700); /* what is already there is checked when something is moved into it */
    free(q);
  }
  c->write_dir = dir;
  return;
refused:
  snprintf(reason, sizeof reason, "%s %s", subject, refused);
degraded:
  c->degraded = strdup(reason);
nothing_there:
  free(dir);
}


/* The read-only layers that exist, are trusted and are not the writable dir or an earlier layer
 * again (else one entry would be counted, reported and refreshed twice, or not at all). */
static void setup_read_dirs(kvjit_cache *c, const char *configured) {
  const char *list = configured ? configured : kvjit_env_text("KVJIT_CACHE_PATH");
  c->read_list = strdup(list ? list : "");
  if (!c->read_list || !c->read_list[0]) return;
  size_t n = 1;
  for (const char *p = c->read_list; *p; p++) n += *p == ':';
  c->read_dirs = calloc(n, sizeof *c->read_dirs);
  struct stat *seen = calloc(n + 1, sizeof *seen);
  char *copy = strdup(c->read_list);
  size_t num_seen = 0;
  if (c->write_dir && stat(c->write_dir, &seen[0]) == 0) num_seen = 1;
  char *save = NULL;
  for (char *tok = copy && seen && c->read_dirs ? strtok_r(copy, ":", &save) : NULL; tok;
       tok = strtok_r(NULL, ":", &save)) {
    char *root = absolute_path(tok);
    char *dir = root ? path_join(root, CACHE_SUBDIR) : NULL;
    struct stat st, root_st;
    int usable = dir != NULL && stat(dir, &st) == 0 && S_ISDIR(st.st_mode); /* a missing layer is normal */
    if (usable && !c->allow_shared && (stat(root, &root_st) != 0 || !cache_trusted(&root_st) || !cache_trusted(&st))) {
      cache_warn(c, "ignoring read-only cache dir writable by other users: ", tok);
      usable = 0;
    }
    for (size_t i = 0; usable && i < num_seen; i++) usable = !cache_same_file(&st, &seen[i]);
    if (usable) {
      seen[num_seen++] = st;
      c->read_dirs[c->num_read++] = dir;
      dir = NULL;
    }
    free(dir);
    free(root);
  }
  free(copy);
  free(seen);
}

/* The remote tier of a cache: set up at open (a remote that cannot be set up is a warning, never an
 * error), torn down at close. Its lookups and pushes are cache_remote.c's. */
static void remote_open(kvjit_cache *c, const kvjit_remote_config *config) {
  c->remote = NULL;
  if (config->urls == NULL || config->urls[0] == '\0') return;
  kvjit_status st = kvjit_remote_open(&c->remote, config);
  /* A remote tier is an optimisation: one that cannot be set up leaves the cache local. */
  if (st != KVJIT_OK) cache_warn(c, "remote cache not used: ", kvjit_last_error());
}

static void remote_close(kvjit_cache *c) {
  kvjit_remote_close(c->remote);
  c->remote = NULL;
}

kvjit_status kvjit_cache_open(kvjit_cache **out, const kvjit_cache_config *config) {
  kvjit_cache *c = calloc(1, sizeof *c);
  if (!c) return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "cache: out of memory");
  pthread_mutex_init(&c->bad_lock, NULL);
  c->max_bytes = config->max_bytes;
  c->lock_timeout_ms = config->lock_timeout_ms;
  c->allow_shared = config->allow_shared;
  c->log = config->log;
  c->read_only = config->read_only;
  const char *write_dir = config->write_dir && config->write_dir[0] ? config->write_dir : NULL;
  if (config->disabled) {
    c->degraded = strdup("disk cache disabled (KVJIT_CACHE_DISABLE)");
    c->read_list = strdup("");
  } else {
    setup_write_dir(c, write_dir);
    setup_read_dirs(c, config->read_dirs);
    /* A read-only cache (an inspection) has nothing to degrade from. */
    if (c->degraded && !c->read_only) cache_warn(c, "cache is memory-only: ", c->degraded);
    remote_open(c, &config->remote);
  }
  *out = c;
  return KVJIT_OK;
}

void kvjit_cache_close(kvjit_cache *c) {
  if (!c) return;
  remote_close(c);
  for (size_t i = 0; i < c->num_read; i++) free(c->read_dirs[i]);
  free(c->read_dirs);
  free(c->read_list);
  free(c->write_root);
  free(c->write_dir);
  free(c->degraded);
  pthread_mutex_destroy(&c->bad_lock);
  free(c);
}

const kvjit_cache_counters *kvjit_cache_get_counters(const kvjit_cache *c) { return &c->counters; }

int kvjit_cache_writable(const kvjit_cache *c) { return c->write_dir != NULL && !c->read_only; }

const char *kvjit_cache_unwritable_reason(const kvjit_cache *c) {
  if (kvjit_cache_writable(c)) return NULL;
  if (c->read_only) return "the cache was opened read-only";
  return c->degraded ? c->degraded : "no writable cache dir";
}

void kvjit_cache_get_info(const kvjit_cache *c, kvjit_cache_info *out) {
  /* Read-only: the dir this cache would write to, also when it does not exist (yet). */
  if (c->read_only) out->write_dir = c->degraded == NULL ? c->write_root : NULL;
  else out->write_dir = c->write_dir ? c->write_root : NULL;
  out->read_dirs = c->read_list ? c->read_list : "";
  out->degraded_reason = c->degraded;
  out->max_bytes = c->max_bytes;
}

/* ---- bad files ------------------------------------------------------------------------------ */

/* ---- reading entry files --------------------------------------------------------------------- */

int cache_read_entry_file(const char *path, int whole, uint8_t **data, size_t *len, struct stat *st, int *have_st,
                          char *why, size_t why_capacity) {
  *have_st = 0;
  if (lstat(path, st) != 0) return errno == ENOENT ? 0 : -2;
  *have_st = 1;
  if (S_ISLNK(st->st_mode)) {
    snprintf(why, why_capacity, "a symbolic link");
    return -1;
  }
  if (!S_ISREG(st->st_mode)) {
    snprintf(why, why_capacity, "not a regular file");
    return -1;
  }
  if ((uint64_t)st->st_size > KVJIT_ENTRY_MAX_BYTES) {
    snprintf(why, why_capacity, "%lld bytes, more than the format allows", (long long)st->st_size);
    return -1;
  }
  int fd = kvjit_open_regular(path, O_RDONLY, 0, st);
  if (fd < 0) {
    if (errno == ENOENT) return 0;
    if (errno != ELOOP && errno != EINVAL && errno != EISDIR) return -2;
    snprintf(why, why_capacity, "not a regular file");
    return -1;
  }
  uint8_t prefix[KVJIT_ENTRY_FIXED_BYTES];
  ssize_t got = kvjit_read_full(fd, prefix, sizeof prefix);
  if (got < 0) {
    close(fd);
    return -2;
  }
  if (kvjit_entry_check_prefix(prefix, (size_t)got, (uint64_t)st->st_size) != KVJIT_OK) {
    close(fd);
    snprintf(why, why_capacity, "%s", kvjit_last_error());
    return -1;
  }
  size_t want = whole ? (size_t)st->st_size : kvjit_le_get32(prefix + 12); /* both checked by the prefix */
  uint8_t *buf = malloc(want);
  if (buf == NULL) {
    close(fd);
    return -2;
  }
  memcpy(buf, prefix, sizeof prefix);
  got = kvjit_read_full(fd, buf + sizeof prefix, want - sizeof prefix);
  close(fd);
  if (got < 0 || (size_t)got != want - sizeof prefix) {
    free(buf);
    if (got < 0) return -2;
    snprintf(why, why_capacity, "shorter than its size when read");
    return -1;
  }
  *data = buf;
  *len = want;
  return 1;
}

/* ---- quarantine ------------------------------------------------------------------------------ */

/* ---- lookups --------------------------------------------------------------------------------- */

/* Count, log and move aside (or remember) a bad file. */
static void report_bad(kvjit_cache *c, const char *dir, const char *name, const char *path, const struct stat *st,
                       int have_st, int writable, const char *why) {
  atomic_fetch_add(&c->counters.bad_entries, 1);
  int moved = writable && cache_quarantine(c, dir, name, have_st ? st : NULL);
  if (!moved && have_st) cache_remember_bad(c, st);
  if (c->log != 0) {
    kvjit_log_line("bad cache entry %s (%s): %s", path, why, moved ? "quarantined, recompiling" : "skipped");
  }
}

/* Try one dir. 1: good entry, 0: none, -1: a bad entry (counted and handled). With @p reject set, a
 * good-looking entry is treated as bad for that reason (the loader found it so). */
static int try_dir(kvjit_cache *c, const char *dir, int writable, const char *name, const kvjit_key *key,
                   uint8_t **data, kvjit_entry_view *view, const char *reject) {
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return 0;
  struct stat st;
  if (lstat(path, &st) != 0 || cache_known_bad(c, &st)) return 0; /* reported once already */
  uint8_t *buf = NULL;
  size_t len = 0;
  int have_st = 0;
  char why[400];
  int r = cache_read_entry_file(path, 1, &buf, &len, &st, &have_st, why, sizeof why);
  if (r == 0 || r == -2) return 0; /* unreadable (permissions, I/O): a miss; do not destroy it */
  if (r == 1) {
    const char *untrusted = cache_untrusted_reason(c, &st);
    kvjit_entry_view v;
    if (untrusted) {
      snprintf(why, sizeof why, "%s", untrusted);
    } else if (kvjit_entry_parse(&v, buf, len, key, 1) != KVJIT_OK || kvjit_entry_check_payload(&v) != KVJIT_OK) {
      snprintf(why, sizeof why, "%s", kvjit_last_error());
    } else if (reject) {
      snprintf(why, sizeof why, "%s", reject);
    } else {
      *data = buf;
      *view = v;
      /* Reads refresh the LRU clock; a stale mtime only makes eviction less precise. */
      if (writable) utimensat(AT_FDCWD, path, NULL, AT_SYMLINK_NOFOLLOW);
      return 1;
    }
  }
  free(buf);
  report_bad(c, dir, name, path, &st, have_st, writable, why);
  return -1;
}

int cache_is_entry_name(const char *name) {
  kvjit_key k;
  return strlen(name) == ENTRY_NAME_LEN && strcmp(name + 32, ENTRY_SUFFIX) == 0 && kvjit_key_parse_hex(&k, name) == 0;
}

static void entry_name(const kvjit_key *key, char name[64]) {
  char hex[33];
  kvjit_key_hex(key, hex);
  snprintf(name, 64, "%s%s", hex, ENTRY_SUFFIX);
}

kvjit_status kvjit_cache_read_local(kvjit_cache *c, const kvjit_key *key, uint8_t **data, kvjit_entry_view *view) {
  size_t cursor = 0;
  return kvjit_cache_read_from(c, key, &cursor, data, view);
}

kvjit_status kvjit_cache_read_from(kvjit_cache *c, const kvjit_key *key, size_t *cursor, uint8_t **data,
                                   kvjit_entry_view *view) {
  char name[64];
  entry_name(key, name);
  /* Dirs 0 .. num_read - 1 are the read-only ones, num_read the writable one. */
  for (; *cursor < c->num_read; ++*cursor) {
    if (try_dir(c, c->read_dirs[*cursor], 0, name, key, data, view, NULL) == 1) {
      ++*cursor;
      return KVJIT_OK;
    }
  }
  if (*cursor == c->num_read) {
    ++*cursor;
    if (c->write_dir && try_dir(c, c->write_dir, kvjit_cache_writable(c), name, key, data, view, NULL) == 1) {
      return KVJIT_OK;
    }
  }
  return KVJIT_ERR_NOT_FOUND;
}

void kvjit_cache_reject(kvjit_cache *c, const kvjit_key *key, const char *why) {
  char name[64];
  entry_name(key, name);
  uint8_t *data = NULL;
  kvjit_entry_view view;
  /* The same walk as kvjit_cache_read(): the first good-looking entry is the one it returned. */
  for (size_t i = 0; i < c->num_read; i++) {
    if (try_dir(c, c->read_dirs[i], 0, name, key, &data, &view, why) != 0) return;
  }
  if (c->write_dir) try_dir(c, c->write_dir, kvjit_cache_writable(c), name, key, &data, &view, why);
}

/* ---- per-key compile locks ---------------------------------------------------------------------- */

static void sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static uint64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int entry_exists(const kvjit_cache *c, const kvjit_key *key) {
  char path[PATH_MAX], name[64];
  entry_name(key, name);
  if (snprintf(path, sizeof path, "%s/%s", c->write_dir, name) >= (int)sizeof path) return 0;
  return access(path, F_OK) == 0;
}

int cache_lock_byte(kvjit_cache *c, off_t byte, int (*give_up)(kvjit_cache *, const void *), const void *arg,
                    int *timed_out) {
  *timed_out = 0;
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/" LOCK_NAME, c->write_dir) >= (int)sizeof path) {
    errno = ENAMETOOLONG;
    return -1;
  }
  /* A fresh open file description per lock: OFD locks belong to it, so two threads (or two
   * contexts) of one process exclude each other like two processes do, and a dead process's
   * locks vanish with its descriptors — nobody waits on a corpse. */
  int fd = kvjit_open_regular(path, O_RDWR | O_CREAT, 0600, NULL);
  if (fd < 0) return -1;
  struct flock fl;
  memset(&fl, 0, sizeof fl);
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = byte;
  fl.l_len = 1;
  uint64_t deadline = mono_ms() + c->lock_timeout_ms;
  unsigned pause = 1;
  int waited = 0;
  for (;;) {
    if (fcntl(fd, F_OFD_SETLK, &fl) == 0) return fd;
    if (errno != EAGAIN && errno != EACCES && errno != EINTR) break; /* e.g. no lock support */
    if (!waited && byte != DIR_LOCK_BYTE) atomic_fetch_add(&c->counters.lock_waits, 1);
    waited = 1;
    if (give_up && give_up(c, arg)) break;
    if (mono_ms() >= deadline) {
      *timed_out = 1;
      break;
    }
    sleep_ms(pause);
    if (pause < 25) pause *= 2;
  }
  int err = *timed_out ? ETIMEDOUT : errno;
  close(fd);
  errno = err;
  return -1;
}

/* The holder may publish without our noticing the unlock first: stop waiting then. */
static int key_published(kvjit_cache *c, const void *key) { return entry_exists(c, key); }

int kvjit_cache_lock_key(kvjit_cache *c, const kvjit_key *key, kvjit_cache_lock *lock) {
  lock->fd = -1;
  if (!kvjit_cache_writable(c)) return 0;
  int timed_out = 0;
  lock->fd = cache_lock_byte(c, (off_t)(key->low % LOCK_SLOTS), key_published, key, &timed_out);
  if (timed_out) {
    atomic_fetch_add(&c->counters.lock_timeouts, 1);
    if (c->log != 0) kvjit_log_line("lock wait for a cache key ran out after %u ms; compiling privately", c->lock_timeout_ms);
  }
  return lock->fd >= 0;
}

void kvjit_cache_unlock_key(kvjit_cache_lock *lock) {
  if (lock->fd >= 0) close(lock->fd); /* closing the description releases its OFD locks */
  lock->fd = -1;
}
