/* The toolkit header tree's digest (toolkit_digest.h). */
#include "toolkit_digest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "status.h"

typedef struct file_list {
  char **paths; /* relative to the tree's root */
  size_t count, cap;
} file_list;

/* Once per process (one toolkit: the NVRTC in use is loaded once). */
static pthread_mutex_t digest_lock = PTHREAD_MUTEX_INITIALIZER;
static int digest_done;
static char digest_dirs[2][PATH_MAX];
static kvjit_key digest_value;
static double digest_ms;
static size_t digest_files, digest_bytes;

static int list_add(file_list *l, const char *rel) {
  if (l->count == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 1024;
    char **p = realloc(l->paths, cap * sizeof *p);
    if (p == NULL) return 0;
    l->paths = p;
    l->cap = cap;
  }
  return (l->paths[l->count++] = strdup(rel)) != NULL;
}

/* Regular files under root/rel (symlinks to files followed, to dirs not: no cycles). */
static int walk(const char *root, const char *rel, file_list *l, int depth) {
  char dir[PATH_MAX];
  if (snprintf(dir, sizeof dir, "%s%s%s", root, rel[0] ? "/" : "", rel) >= (int)sizeof dir || depth > 32) return 1;
  DIR *d = opendir(dir);
  if (d == NULL) return 1;
  int ok = 1;
  for (struct dirent *e; ok && (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.' && (e->d_name[1] == '\0' || (e->d_name[1] == '.' && e->d_name[2] == '\0'))) continue;
    char child[PATH_MAX], path[PATH_MAX];
    if (snprintf(child, sizeof child, "%s%s%s", rel, rel[0] ? "/" : "", e->d_name) >= (int)sizeof child) continue;
    if (snprintf(path, sizeof path, "%s/%s", root, child) >= (int)sizeof path) continue;
    struct stat lst, st;
    if (lstat(path, &lst) != 0) continue;
    if (S_ISDIR(lst.st_mode)) {
      ok = walk(root, child, l, depth + 1);
    } else if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
      ok = list_add(l, child);
    }
  }
  closedir(d);
  return ok;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int hash_file(kvjit_key_builder *b, const char *path, char **buf, size_t *cap, size_t *bytes) {
  /* O_NONBLOCK, and regular files only: the walk's stat said so, but the tree can change. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return 0;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return 0;
  }
  size_t got = 0;
  for (;;) {
    if (got == *cap) {
      size_t n = *cap ? *cap * 2 : 1 << 20;
      char *p = realloc(*buf, n);
      if (p == NULL) {
        close(fd);
        return 0;
      }
      *buf = p;
      *cap = n;
    }
    ssize_t r = read(fd, *buf + got, *cap - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      close(fd);
      return 0;
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  close(fd);
  kvjit_key_put_bytes(b, 'C', *buf, got);
  *bytes += got;
  return 1;
}

static kvjit_status compute(const char *const dirs[2], kvjit_key *out) {
  kvjit_key_builder b;
  kvjit_key_content_begin(&b, "kvjit-toolkit-headers");
  char *buf = NULL;
  size_t cap = 0;
  kvjit_status st = KVJIT_OK;
  for (int t = 0; t < 2 && st == KVJIT_OK; t++) {
    const char *root = dirs[t];
    size_t l0 = strlen(dirs[0]);
    if (root[0] == '\0' || (t == 1 && l0 && !strncmp(root, dirs[0], l0) && root[l0] == '/')) {
      kvjit_key_put_u64(&b, 0);
      continue;
    }
    file_list l = {NULL, 0, 0};
    if (!walk(root, "", &l, 0)) st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "toolkit digest: out of memory");
    if (st == KVJIT_OK) qsort(l.paths, l.count, sizeof *l.paths, by_name);
    kvjit_key_put_u64(&b, l.count);
    for (size_t i = 0; i < l.count && st == KVJIT_OK; i++) {
      char path[PATH_MAX];
      snprintf(path, sizeof path, "%s/%s", root, l.paths[i]);
      kvjit_key_put_str(&b, 'P', l.paths[i]);
      if (!hash_file(&b, path, &buf, &cap, &digest_bytes)) {
        st = kvjit_fail(KVJIT_ERR_IO, "toolkit header %s: cannot be read: %s", path, strerror(errno));
      }
    }
    digest_files += l.count;
    for (size_t i = 0; i < l.count; i++) free(l.paths[i]);
    free(l.paths);
  }
  free(buf);
  if (st == KVJIT_OK) kvjit_key_content_end(&b, out);
  return st;
}

kvjit_status kvjit_toolkit_digest(const char *const dirs[2], kvjit_key *out) {
  pthread_mutex_lock(&digest_lock);
  if (digest_done && !strcmp(digest_dirs[0], dirs[0]) && !strcmp(digest_dirs[1], dirs[1])) {
    *out = digest_value;
    pthread_mutex_unlock(&digest_lock);
    return KVJIT_OK;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  digest_files = digest_bytes = 0;
  kvjit_status st = compute(dirs, &digest_value);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (st == KVJIT_OK) {
    digest_done = 1;
    snprintf(digest_dirs[0], sizeof digest_dirs[0], "%s", dirs[0]);
    snprintf(digest_dirs[1], sizeof digest_dirs[1], "%s", dirs[1]);
    digest_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
    *out = digest_value;
  }
  pthread_mutex_unlock(&digest_lock);
  return st;
}

void kvjit_toolkit_digest_cost(double *ms, size_t *files, size_t *bytes) {
  pthread_mutex_lock(&digest_lock);
  *ms = digest_done ? digest_ms : 0;
  *files = digest_done ? digest_files : 0;
  *bytes = digest_done ? digest_bytes : 0;
  pthread_mutex_unlock(&digest_lock);
}
