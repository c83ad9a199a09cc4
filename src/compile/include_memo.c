/*
 * A context's memo of header files read from disk (include_memo.h): one stat per header on a hit,
 * a file read (bounded, never blocking) and scanned once per version of it.
 */
#include "include_memo.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "safe_fs.h"
#include "status.h"

#define MEMO_BUCKETS 256u
#define MAX_HEADER_BYTES (64u << 20)

struct kvjit_include_memo {
  pthread_mutex_t lock;
  kvjit_memo_file *buckets[MEMO_BUCKETS];
};

kvjit_status kvjit_include_memo_create(kvjit_include_memo **out) {
  *out = calloc(1, sizeof **out);
  if (*out == NULL) return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "include memo: out of memory");
  pthread_mutex_init(&(*out)->lock, NULL);
  return KVJIT_OK;
}

void kvjit_include_memo_destroy(kvjit_include_memo *memo) {
  if (memo == NULL) return;
  for (size_t b = 0; b < MEMO_BUCKETS; b++) {
    for (kvjit_memo_file *f = memo->buckets[b], *next; f; f = next) {
      next = f->next;
      free(f->path);
      free(f->text);
      free(f->directives);
      free(f);
    }
  }
  pthread_mutex_destroy(&memo->lock);
  free(memo);
}

static int64_t ns_of(struct timespec ts) { return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec; }

static int same_identity(const kvjit_memo_file *f, const struct stat *st) {
  return f->dev == st->st_dev && f->ino == st->st_ino && f->size == st->st_size && f->mtime_ns == ns_of(st->st_mtim) &&
         f->ctime_ns == ns_of(st->st_ctim);
}

static unsigned bucket_of(const char *path) {
  unsigned h = 2166136261u;
  for (const char *p = path; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
  return h % MEMO_BUCKETS;
}

/* Read a whole regular file; the stat it was read under goes to @p st (re-read once if it changed). */
static kvjit_status read_file(const char *path, char **text, size_t *len, struct stat *st) {
  for (int attempt = 0; attempt < 2; attempt++) {
    /* O_NONBLOCK: a FIFO swapped in after the lookup's stat opens at once; fstat refuses it. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return kvjit_fail(KVJIT_ERR_IO, "header %s: cannot be read: %s", path, strerror(errno));
    struct stat before, after;
    if (fstat(fd, &before) != 0 || !S_ISREG(before.st_mode) || before.st_size > (off_t)MAX_HEADER_BYTES) {
      close(fd);
      return kvjit_fail(KVJIT_ERR_IO, "header %s: not a regular file of at most %u MiB", path, MAX_HEADER_BYTES >> 20);
    }
    size_t n = (size_t)before.st_size;
    char *buf = malloc(n + 1);
    if (buf == NULL) {
      close(fd);
      return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "header %s: out of memory", path);
    }
    const ssize_t r = kvjit_read_full(fd, buf, n);
    const size_t got = r > 0 ? (size_t)r : 0;
    int changed = fstat(fd, &after) != 0 || after.st_size != before.st_size ||
                  ns_of(after.st_mtim) != ns_of(before.st_mtim) || ns_of(after.st_ctim) != ns_of(before.st_ctim);
    close(fd);
    if (got == n && !changed) {
      buf[n] = '\0';
      if (memchr(buf, '\0', n) != NULL) {
        free(buf);
        return kvjit_fail(KVJIT_ERR_IO, "header %s: contains a NUL byte", path);
      }
      *text = buf;
      *len = n;
      *st = before;
      return KVJIT_OK;
    }
    free(buf);
  }
  return kvjit_fail(KVJIT_ERR_IO, "header %s: changed while it was read", path);
}

kvjit_status kvjit_include_memo_get(kvjit_include_memo *memo, const char *path, const struct stat *st,
                                    const kvjit_memo_file **out) {
  unsigned b = bucket_of(path);
  pthread_mutex_lock(&memo->lock);
  for (kvjit_memo_file *f = memo->buckets[b]; f; f = f->next) {
    if (strcmp(f->path, path) == 0 && same_identity(f, st)) {
      pthread_mutex_unlock(&memo->lock);
      *out = f;
      return KVJIT_OK;
    }
  }
  pthread_mutex_unlock(&memo->lock);
  kvjit_memo_file *f = calloc(1, sizeof *f);
  if (f == NULL || (f->path = strdup(path)) == NULL) {
    free(f);
    return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "header %s: out of memory", path);
  }
  struct stat read_st;
  memset(&read_st, 0, sizeof read_st);
  kvjit_status status = read_file(path, &f->text, &f->len, &read_st);
  if (status == KVJIT_OK) status = kvjit_scan(f->text, f->len, &f->directives, &f->num_directives);
  if (status != KVJIT_OK) {
    free(f->path);
    free(f->text);
    free(f);
    return status;
  }
  f->dev = read_st.st_dev;
  f->ino = read_st.st_ino;
  f->size = read_st.st_size;
  f->mtime_ns = ns_of(read_st.st_mtim);
  f->ctime_ns = ns_of(read_st.st_ctim);
  kvjit_key_of_bytes(&f->digest, f->text, f->len);
  pthread_mutex_lock(&memo->lock);
  f->next = memo->buckets[b];
  memo->buckets[b] = f;
  pthread_mutex_unlock(&memo->lock);
  *out = f;
  return KVJIT_OK;
}
