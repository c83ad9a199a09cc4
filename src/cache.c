/* Disk cache: dirs, reads, atomic publication, per-key OFD locks, quarantine, LRU eviction. */
#include "cache.h"

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

#include "status.h"
#include "target.h"

#define CACHE_SUBDIR "v2"
#define ENTRY_SUFFIX ".kvjit"
#define MAX_ENTRY_BYTES KVJIT_ENTRY_MAX_BYTES
/* Byte ranges of the lock file; distinct keys share a range only by (harmless) collision. */
#define LOCK_SLOTS (1u << 20)
#define STALE_TEMP_SECONDS (10 * 60)
#define QUARANTINE_KEEP_SECONDS (24 * 60 * 60)

struct kvjit_cache {
  char *write_root;   /* the dir as configured (for info) */
  char *write_dir;    /* write_root/v2, or NULL when memory-only */
  char *degraded;     /* why write_dir is NULL */
  char *read_list;    /* colon-separated, as configured */
  char **read_dirs;   /* each read root + /v2, trusted ones only */
  size_t num_read;
  uint64_t max_bytes;
  unsigned lock_timeout_ms;
  int allow_shared;
  int log;
  kvjit_cache_counters counters;
  pthread_mutex_t size_lock; /* guards known_bytes/size_known */
  uint64_t known_bytes;
  int size_known;
  atomic_int write_warned;
};

/* One warning line (printed unless logging is off: KVJIT_LOG=0). */
static void warn(const kvjit_cache *c, const char *what, const char *detail) {
  if (c->log == 0) return;
  kvjit_log_line("warning: %s%s", what, detail);
}

static char *path_join(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  if (n > PATH_MAX) return NULL;
  char *p = malloc(n);
  if (p) {
    size_t la = strlen(a);
    memcpy(p, a, la);
    p[la] = '/';
    memcpy(p + la + 1, b, strlen(b) + 1);
  }
  return p;
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
  struct stat st;
  if (stat(path, &st) != 0) return -1;
  if (!S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  return 0;
}

/* A dir (or file) is trusted when it is ours or root's and no one else can write it. */
static int trusted_stat(const struct stat *st) {
  if (st->st_uid != geteuid() && st->st_uid != 0) return 0;
  if (st->st_mode & (S_IWGRP | S_IWOTH)) return 0;
  return 1;
}

static char *default_write_root(void) {
  const char *env = getenv("KVJIT_CACHE_DIR");
  if (env && env[0]) return strdup(env);
  const char *xdg = getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') return path_join(xdg, "kvjit");
  const char *home = getenv("HOME");
  if (!home || !home[0]) {
    struct passwd *pw = getpwuid(geteuid());
    home = pw ? pw->pw_dir : NULL;
  }
  if (!home || !home[0]) return NULL;
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
  int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  close(fd);
  unlink(probe);
  return 0;
}

static void setup_write_dir(kvjit_cache *c, const char *configured) {
  char reason[PATH_MAX + 128];
  c->write_root = configured ? strdup(configured) : default_write_root();
  if (c->write_root == NULL) {
    c->degraded = strdup("no cache dir: KVJIT_CACHE_DIR, XDG_CACHE_HOME and HOME are unset");
    return;
  }
  char *dir = path_join(c->write_root, CACHE_SUBDIR);
  if (dir == NULL) {
    snprintf(reason, sizeof reason, "cache dir path is longer than PATH_MAX (%d)", PATH_MAX);
    c->degraded = strdup(reason);
    return;
  }
  struct stat st;
  if (make_dirs(dir) != 0) {
    snprintf(reason, sizeof reason, "cannot create %s: %s", dir, strerror(errno));
  } else if (stat(c->write_root, &st) != 0 || (!trusted_stat(&st) && !c->allow_shared) ||
             stat(dir, &st) != 0 || (!trusted_stat(&st) && !c->allow_shared)) {
    snprintf(reason, sizeof reason, "%s is writable by other users (set KVJIT_CACHE_ALLOW_SHARED=1 to trust it)",
             c->write_root);
  } else if (probe_writable(dir) != 0) {
    snprintf(reason, sizeof reason, "%s is not writable: %s", dir, strerror(errno));
  } else {
    char *q = path_join(dir, "quarantine");
    if (q) {
      mkdir(q, 0700);
      free(q);
    }
    c->write_dir = dir;
    return;
  }
  free(dir);
  c->degraded = strdup(reason);
}

static void setup_read_dirs(kvjit_cache *c, const char *configured) {
  const char *list = configured ? configured : getenv("KVJIT_CACHE_PATH");
  c->read_list = strdup(list ? list : "");
  if (!c->read_list || !c->read_list[0]) return;
  size_t n = 1;
  for (const char *p = c->read_list; *p; p++) n += *p == ':';
  c->read_dirs = calloc(n, sizeof *c->read_dirs);
  if (!c->read_dirs) return;
  char *copy = strdup(c->read_list);
  if (!copy) return;
  char *save = NULL;
  for (char *tok = strtok_r(copy, ":", &save); tok; tok = strtok_r(NULL, ":", &save)) {
    char *dir = path_join(tok, CACHE_SUBDIR);
    struct stat st;
    if (dir == NULL || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
      free(dir);
      continue; /* a missing read-only layer is normal (not every image ships one) */
    }
    struct stat root;
    if (!c->allow_shared && (stat(tok, &root) != 0 || !trusted_stat(&root) || !trusted_stat(&st))) {
      warn(c, "ignoring read-only cache dir writable by other users: ", tok);
      free(dir);
      continue;
    }
    c->read_dirs[c->num_read++] = dir;
  }
  free(copy);
}

kvjit_status kvjit_cache_open(kvjit_cache **out, const kvjit_cache_config *config) {
  kvjit_cache *c = calloc(1, sizeof *c);
  if (!c) return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "cache: out of memory");
  pthread_mutex_init(&c->size_lock, NULL);
  c->max_bytes = config->max_bytes;
  c->lock_timeout_ms = config->lock_timeout_ms;
  c->allow_shared = config->allow_shared;
  c->log = config->log;
  if (config->disabled) {
    c->degraded = strdup("disk cache disabled (KVJIT_CACHE_DISABLE)");
    c->read_list = strdup("");
  } else {
    setup_write_dir(c, config->write_dir);
    setup_read_dirs(c, config->read_dirs);
    if (c->degraded) warn(c, "cache is memory-only: ", c->degraded);
  }
  *out = c;
  return KVJIT_OK;
}

void kvjit_cache_close(kvjit_cache *c) {
  if (!c) return;
  for (size_t i = 0; i < c->num_read; i++) free(c->read_dirs[i]);
  free(c->read_dirs);
  free(c->read_list);
  free(c->write_root);
  free(c->write_dir);
  free(c->degraded);
  pthread_mutex_destroy(&c->size_lock);
  free(c);
}

const kvjit_cache_counters *kvjit_cache_get_counters(const kvjit_cache *c) { return &c->counters; }

int kvjit_cache_writable(const kvjit_cache *c) { return c->write_dir != NULL; }

void kvjit_cache_get_info(const kvjit_cache *c, kvjit_cache_info *out) {
  out->write_dir = c->write_dir ? c->write_root : NULL;
  out->read_dirs = c->read_list ? c->read_list : "";
  out->degraded_reason = c->degraded;
  out->max_bytes = c->max_bytes;
}

/* Read a whole regular file without following links. 0, or -1 (errno; EINVAL: not a regular
 * file or too large). */
static int read_file(int dirfd_unused, const char *path, uint8_t **data, size_t *len, struct stat *st_out) {
  (void)dirfd_unused;
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return -1;
  }
  if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > MAX_ENTRY_BYTES) {
    close(fd);
    errno = EINVAL;
    return -1;
  }
  size_t n = (size_t)st.st_size;
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) {
    close(fd);
    errno = ENOMEM;
    return -1;
  }
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (got != n) {
    free(buf);
    errno = EIO;
    return -1;
  }
  *data = buf;
  *len = n;
  if (st_out) *st_out = st;
  return 0;
}

static void quarantine(const char *dir, const char *name) {
  char from[PATH_MAX], to[PATH_MAX];
  if (snprintf(from, sizeof from, "%s/%s", dir, name) >= (int)sizeof from) return;
  if (snprintf(to, sizeof to, "%s/quarantine/%s.%ld.%ld.bad", dir, name, (long)time(NULL), (long)getpid()) >=
      (int)sizeof to) {
    return;
  }
  if (rename(from, to) != 0) {
    /* Quarantine dir gone or a cross-device oddity: get the bad entry out of the way anyway. */
    if (unlink(from) != 0 && errno == EISDIR) rmdir(from);
  }
}

/* Try one dir. 1: good entry, 0: none, -1: a bad entry (counted and handled). */
static int try_dir(kvjit_cache *c, const char *dir, int writable, const char *name, const kvjit_key *key,
                   uint8_t **data, kvjit_entry_view *view) {
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return 0;
  uint8_t *buf = NULL;
  size_t len = 0;
  struct stat st;
  const char *why = NULL;
  char reason[300];
  int have_st = read_file(-1, path, &buf, &len, &st) == 0;
  if (!have_st) {
    if (errno == ENOENT) return 0;
    if (errno == ELOOP) {
      why = "a symbolic link";
    } else if (errno == EINVAL) {
      why = "not a regular file";
    } else {
      return 0; /* unreadable (permissions, I/O): treat as a miss, do not destroy it */
    }
  } else if (!c->allow_shared && !trusted_stat(&st)) {
    why = "writable by other users";
  } else if (kvjit_entry_parse(view, buf, len, key, 1) != KVJIT_OK) {
    snprintf(reason, sizeof reason, "%s", kvjit_last_error());
    why = reason;
  } else {
    *data = buf;
    if (writable) {
      /* Reads refresh the LRU clock; a stale mtime only makes eviction less precise. */
      utimensat(AT_FDCWD, path, NULL, AT_SYMLINK_NOFOLLOW);
    }
    return 1;
  }
  free(buf);
  atomic_fetch_add(&c->counters.bad_entries, 1);
  if (c->log == 1 || c->log == -1) {
    char line[PATH_MAX + 400];
    snprintf(line, sizeof line, "bad cache entry %s (%s): %s", path, why,
             writable ? "quarantined, recompiling" : "skipped");
    kvjit_log_line("%s", line);
  }
  /* Move aside only the file we judged: if another process has meanwhile published a good entry
   * under the same name, leave it in place (else it would be quarantined and compiled twice). */
  struct stat now;
  if (writable && (!have_st || (lstat(path, &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev))) {
    quarantine(dir, name);
  }
  return -1;
}

kvjit_status kvjit_cache_read(kvjit_cache *c, const kvjit_key *key, uint8_t **data, kvjit_entry_view *view) {
  size_t cursor = 0;
  return kvjit_cache_read_from(c, key, &cursor, data, view);
}

kvjit_status kvjit_cache_read_from(kvjit_cache *c, const kvjit_key *key, size_t *cursor, uint8_t **data,
                                   kvjit_entry_view *view) {
  char name[64];
  char hex[33];
  kvjit_key_hex(key, hex);
  snprintf(name, sizeof name, "%s%s", hex, ENTRY_SUFFIX);
  /* Dirs 0 .. num_read - 1 are the read-only ones, num_read the writable one. */
  for (; *cursor < c->num_read; ++*cursor) {
    if (try_dir(c, c->read_dirs[*cursor], 0, name, key, data, view) == 1) {
      ++*cursor;
      return KVJIT_OK;
    }
  }
  if (*cursor == c->num_read) {
    ++*cursor;
    if (c->write_dir && try_dir(c, c->write_dir, 1, name, key, data, view) == 1) return KVJIT_OK;
  }
  return KVJIT_ERR_NOT_FOUND;
}

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
  char path[PATH_MAX], hex[33];
  kvjit_key_hex(key, hex);
  if (snprintf(path, sizeof path, "%s/%s%s", c->write_dir, hex, ENTRY_SUFFIX) >= (int)sizeof path) return 0;
  return access(path, F_OK) == 0;
}

int kvjit_cache_lock_key(kvjit_cache *c, const kvjit_key *key, kvjit_cache_lock *lock) {
  lock->fd = -1;
  if (!c->write_dir) return 0;
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/lock", c->write_dir) >= (int)sizeof path) return 0;
  /* A fresh open file description per lock: OFD locks belong to it, so two threads (or two
   * contexts) of one process exclude each other like two processes do, and a dead process's
   * locks vanish with its descriptors — nobody waits on a corpse. */
  int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return 0;
  struct flock fl;
  memset(&fl, 0, sizeof fl);
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = (off_t)(key->low % LOCK_SLOTS);
  fl.l_len = 1;
  uint64_t deadline = mono_ms() + c->lock_timeout_ms;
  unsigned pause = 1;
  int waited = 0;
  for (;;) {
    if (fcntl(fd, F_OFD_SETLK, &fl) == 0) {
      lock->fd = fd;
      return 1;
    }
    if (errno != EAGAIN && errno != EACCES && errno != EINTR) break; /* e.g. no lock support: go private */
    if (!waited) {
      waited = 1;
      atomic_fetch_add(&c->counters.lock_waits, 1);
    }
    /* The holder may publish without our noticing the unlock first: stop waiting then. */
    if (entry_exists(c, key)) break;
    if (mono_ms() >= deadline) {
      atomic_fetch_add(&c->counters.lock_timeouts, 1);
      if (c->log != 0) kvjit_log_line("lock wait for a cache key ran out after %u ms; compiling privately", c->lock_timeout_ms);
      break;
    }
    sleep_ms(pause);
    if (pause < 25) pause *= 2;
  }
  close(fd);
  return 0;
}

void kvjit_cache_unlock_key(kvjit_cache_lock *lock) {
  if (lock->fd >= 0) close(lock->fd); /* closing the description releases its OFD locks */
  lock->fd = -1;
}

static int write_all(int fd, const uint8_t *data, size_t len) {
  while (len > 0) {
    ssize_t w = write(fd, data, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    data += w;
    len -= (size_t)w;
  }
  return 0;
}

static void note_write_failure(kvjit_cache *c, const char *what, int err) {
  atomic_fetch_add(&c->counters.write_failures, 1);
  int expected = 0;
  if (atomic_compare_exchange_strong(&c->write_warned, &expected, 1)) {
    char msg[PATH_MAX + 64];
    snprintf(msg, sizeof msg, "%s: %s", what, strerror(err));
    warn(c, "cannot write cache entries; continuing memory-only for them: ", msg);
  }
}

static uint64_t dir_bytes(const char *dir);

kvjit_status kvjit_cache_write(kvjit_cache *c, const kvjit_key *key, const uint8_t *data, size_t len) {
  if (!c->write_dir) return KVJIT_OK;
  char hex[33], tmp[PATH_MAX], final[PATH_MAX];
  kvjit_key_hex(key, hex);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (snprintf(tmp, sizeof tmp, "%s/.tmp-%s-%ld-%lx", c->write_dir, hex, (long)getpid(),
               (unsigned long)(ts.tv_nsec ^ (long)pthread_self())) >= (int)sizeof tmp ||
      snprintf(final, sizeof final, "%s/%s%s", c->write_dir, hex, ENTRY_SUFFIX) >= (int)sizeof final) {
    note_write_failure(c, "path too long", ENAMETOOLONG);
    return KVJIT_OK;
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    note_write_failure(c, "create temp file", errno);
    return KVJIT_OK;
  }
  if (write_all(fd, data, len) != 0 || fsync(fd) != 0) {
    int err = errno;
    close(fd);
    unlink(tmp);
    note_write_failure(c, "write temp file", err);
    return KVJIT_OK;
  }
  close(fd);
  if (rename(tmp, final) != 0) {
    int err = errno;
    unlink(tmp);
    note_write_failure(c, "rename into place", err);
    return KVJIT_OK;
  }
  /* Make the rename durable too, so a power cut cannot leave a name without its data. */
  int dfd = open(c->write_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  atomic_fetch_add(&c->counters.disk_writes, 1);

  /* Keep the byte budget: count what we add; scan only when the estimate crosses the budget. */
  if (c->max_bytes > 0) {
    int over;
    pthread_mutex_lock(&c->size_lock);
    if (!c->size_known) {
      c->known_bytes = dir_bytes(c->write_dir);
      c->size_known = 1;
    } else {
      c->known_bytes += len;
    }
    over = c->known_bytes > c->max_bytes;
    pthread_mutex_unlock(&c->size_lock);
    if (over) {
      uint64_t removed = 0;
      kvjit_cache_evict(c, c->max_bytes - c->max_bytes / 10, &removed, NULL);
      atomic_fetch_add(&c->counters.evictions, removed);
    }
  }
  return KVJIT_OK;
}

static int is_entry_name(const char *name) {
  size_t n = strlen(name);
  kvjit_key k;
  return n == 32 + strlen(ENTRY_SUFFIX) && strcmp(name + 32, ENTRY_SUFFIX) == 0 && kvjit_key_parse_hex(&k, name) == 0;
}

static uint64_t dir_bytes(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  uint64_t total = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!is_entry_name(e->d_name)) continue;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) total += (uint64_t)st.st_size;
  }
  closedir(d);
  return total;
}

/* ---- listing ---------------------------------------------------------------------------- */

static kvjit_status visit_dir(kvjit_cache *c, const char *dir, int writable, int verify, kvjit_cache_visit_fn visit,
                              void *user, uint64_t *bad, int *stop) {
  DIR *d = opendir(dir);
  if (!d) return KVJIT_OK;
  struct dirent *e;
  while (!*stop && (e = readdir(d)) != NULL) {
    if (!is_entry_name(e->d_name)) continue;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
    kvjit_key key;
    kvjit_key_parse_hex(&key, e->d_name);
    uint8_t *buf = NULL;
    size_t len = 0;
    struct stat st;
    kvjit_entry_view view;
    kvjit_cache_entry_info info;
    memset(&info, 0, sizeof info);
    char hex[33], program[256], kernels[1024], bundle[33];
    kvjit_key_hex(&key, hex);
    program[0] = kernels[0] = '\0';
    info.path = path;
    info.key = hex;
    info.program = program;
    info.kernels = kernels;
    info.status = KVJIT_OK;
    if (read_file(-1, path, &buf, &len, &st) != 0) {
      if (errno == ENOENT) continue; /* evicted meanwhile */
      info.status = KVJIT_ERR_CORRUPT;
    } else {
      info.bytes = (uint64_t)st.st_size;
      info.mtime = (int64_t)st.st_mtime;
      if (kvjit_entry_parse(&view, buf, len, &key, verify) != KVJIT_OK) {
        info.status = KVJIT_ERR_CORRUPT;
      } else {
        info.arch = kvjit_target_code(&view.target);
        if (view.target.kind == KVJIT_PAYLOAD_ALIAS) {
          kvjit_entry_alias alias;
          kvjit_entry_alias_get(&view, &alias);
          kvjit_key_hex(&alias.bundle, bundle);
          info.bundle = bundle;
        }
        snprintf(program, sizeof program, "%.*s", (int)view.program_len, view.program);
        size_t used = 0;
        for (uint32_t i = 0; i < view.num_kernels && used + 2 < sizeof kernels; i++) {
          const char *n, *l;
          size_t nl, ll;
          kvjit_entry_kernel(&view, i, &n, &nl, &l, &ll);
          int w = snprintf(kernels + used, sizeof kernels - used, "%s%.*s", i ? "," : "", (int)nl, n);
          if (w < 0) break;
          used += (size_t)w;
        }
      }
    }
    free(buf);
    if (info.status != KVJIT_OK) {
      if (bad) (*bad)++;
      if (verify) {
        atomic_fetch_add(&c->counters.bad_entries, 1);
        if (writable) quarantine(dir, e->d_name);
      }
    }
    if (visit && visit(&info, user)) *stop = 1;
  }
  closedir(d);
  return KVJIT_OK;
}

kvjit_status kvjit_cache_visit(kvjit_cache *c, int include_read_dirs, int verify, kvjit_cache_visit_fn visit,
                               void *user, uint64_t *bad) {
  int stop = 0;
  if (bad) *bad = 0;
  if (include_read_dirs) {
    for (size_t i = 0; i < c->num_read && !stop; i++) visit_dir(c, c->read_dirs[i], 0, verify, visit, user, bad, &stop);
  }
  if (c->write_dir && !stop) visit_dir(c, c->write_dir, 1, verify, visit, user, bad, &stop);
  return KVJIT_OK;
}

/* ---- eviction ----------------------------------------------------------------------------- */

typedef struct lru_item {
  char name[40];
  time_t mtime;
  uint64_t bytes;
} lru_item;

static int lru_cmp(const void *a, const void *b) {
  const lru_item *x = a, *y = b;
  return (x->mtime > y->mtime) - (x->mtime < y->mtime);
}

/* Remove stale temp files (writers that died) and old quarantined entries. */
static void sweep(const char *dir) {
  time_t now = time(NULL);
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (strncmp(e->d_name, ".tmp-", 5) != 0 && strncmp(e->d_name, ".probe-", 7) != 0) continue;
      struct stat st;
      if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && now - st.st_mtime > STALE_TEMP_SECONDS) {
        unlinkat(dirfd(d), e->d_name, 0);
      }
    }
    closedir(d);
  }
  char q[PATH_MAX];
  if (snprintf(q, sizeof q, "%s/quarantine", dir) >= (int)sizeof q) return;
  d = opendir(q);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && now - st.st_mtime > QUARANTINE_KEEP_SECONDS) {
      if (unlinkat(dirfd(d), e->d_name, 0) != 0) unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
    }
  }
  closedir(d);
}

kvjit_status kvjit_cache_evict(kvjit_cache *c, uint64_t max_bytes, uint64_t *removed_entries, uint64_t *removed_bytes) {
  if (removed_entries) *removed_entries = 0;
  if (removed_bytes) *removed_bytes = 0;
  if (!c->write_dir) return kvjit_fail(KVJIT_ERR_IO, "no writable cache dir: %s", c->degraded ? c->degraded : "");
  sweep(c->write_dir);
  DIR *d = opendir(c->write_dir);
  if (!d) return kvjit_fail(KVJIT_ERR_IO, "opendir %s: %s", c->write_dir, strerror(errno));
  size_t cap = 64, n = 0;
  lru_item *items = malloc(cap * sizeof *items);
  uint64_t total = 0;
  struct dirent *e;
  while (items && (e = readdir(d)) != NULL) {
    if (!is_entry_name(e->d_name)) continue;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (n == cap) {
      lru_item *grown = realloc(items, 2 * cap * sizeof *items);
      if (!grown) break;
      items = grown;
      cap *= 2;
    }
    memcpy(items[n].name, e->d_name, 32 + sizeof ENTRY_SUFFIX); /* is_entry_name fixed the length */
    items[n].mtime = st.st_mtime;
    items[n].bytes = (uint64_t)st.st_size;
    total += items[n].bytes;
    n++;
  }
  closedir(d);
  if (!items) return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "prune: out of memory");
  qsort(items, n, sizeof *items, lru_cmp);
  /* Unlinking is safe against concurrent readers: an open file stays readable, and a reader that
   * comes later simply misses and recompiles. */
  for (size_t i = 0; i < n && total > max_bytes; i++) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", c->write_dir, items[i].name);
    if (unlink(path) == 0) {
      total -= items[i].bytes;
      if (removed_entries) (*removed_entries)++;
      if (removed_bytes) *removed_bytes += items[i].bytes;
    }
  }
  free(items);
  pthread_mutex_lock(&c->size_lock);
  c->known_bytes = total;
  c->size_known = 1;
  pthread_mutex_unlock(&c->size_lock);
  return KVJIT_OK;
}

kvjit_status kvjit_cache_remove_all(kvjit_cache *c, uint64_t *removed_entries) {
  uint64_t n = 0;
  kvjit_status st = kvjit_cache_evict(c, 0, &n, NULL);
  if (removed_entries) *removed_entries = n;
  return st;
}
