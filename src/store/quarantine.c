/* Bad entries moved aside or remembered (quarantine.h). */
#include "cache_internal.h"
#include "quarantine.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "safe_fs.h"
#include "status.h"

file_id cache_file_id(const struct stat *st) {
  file_id id = {st->st_dev, st->st_ino, st->st_size, (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec};
  return id;
}

static int same_file(const file_id *a, const file_id *b) {
  return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime_ns == b->mtime_ns;
}

void cache_remember_bad(kvjit_cache *c, const struct stat *st) {
  file_id id = cache_file_id(st);
  pthread_mutex_lock(&c->bad_lock);
  int known = 0;
  for (size_t i = 0; i < c->bad_count && !known; i++) known = same_file(&c->bad_memo[i], &id);
  if (!known) {
    c->bad_memo[c->bad_next] = id;
    c->bad_next = (c->bad_next + 1) % BAD_MEMO_SLOTS;
    if (c->bad_count < BAD_MEMO_SLOTS) c->bad_count++;
  }
  pthread_mutex_unlock(&c->bad_lock);
}

int cache_known_bad(kvjit_cache *c, const struct stat *st) {
  file_id id = cache_file_id(st);
  int known = 0;
  pthread_mutex_lock(&c->bad_lock);
  for (size_t i = 0; i < c->bad_count && !known; i++) known = same_file(&c->bad_memo[i], &id);
  pthread_mutex_unlock(&c->bad_lock);
  return known;
}

typedef struct quarantined {
  char name[256];
  time_t mtime;
} quarantined;

static int newest_first(const void *pa, const void *pb) {
  const quarantined *a = pa, *b = pb;
  return (a->mtime < b->mtime) - (a->mtime > b->mtime);
}

void cache_trim_quarantine(const char *dir) {
  char q[PATH_MAX];
  if (snprintf(q, sizeof q, "%s/" QUARANTINE_NAME, dir) >= (int)sizeof q) return;
  DIR *d = kvjit_open_dir(q);
  if (!d) return;
  /* The newest QUARANTINE_KEEP_FILES are kept in a small array; every other file goes. */
  quarantined keep[QUARANTINE_KEEP_FILES + 1];
  size_t kept = 0;
  time_t now = time(NULL);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (now - st.st_mtime > QUARANTINE_KEEP_SECONDS || strlen(e->d_name) >= sizeof keep[0].name) {
      if (unlinkat(dirfd(d), e->d_name, 0) != 0) unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
      continue;
    }
    snprintf(keep[kept].name, sizeof keep[kept].name, "%s", e->d_name);
    keep[kept].mtime = st.st_mtime;
    kept++;
    qsort(keep, kept, sizeof *keep, newest_first);
    if (kept > QUARANTINE_KEEP_FILES) {
      kept--;
      if (unlinkat(dirfd(d), keep[kept].name, 0) != 0) unlinkat(dirfd(d), keep[kept].name, AT_REMOVEDIR);
    }
  }
  closedir(d);
}

int cache_quarantine(kvjit_cache *c, const char *dir, const char *name, const struct stat *judged) {
  if (c->read_only) return 0;
  char from[PATH_MAX], q[PATH_MAX], to[PATH_MAX];
  if (snprintf(from, sizeof from, "%s/%s", dir, name) >= (int)sizeof from ||
      snprintf(q, sizeof q, "%s/" QUARANTINE_NAME, dir) >= (int)sizeof q) {
    return 0;
  }
  /* Unique per move (two in one second by one process must not overwrite each other). */
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (snprintf(to, sizeof to, "%s/%s.%lld.%09ld.%ld.bad", q, name, (long long)ts.tv_sec, ts.tv_nsec, (long)getpid()) >=
      (int)sizeof to) {
    return 0;
  }
  /* Move aside only the file that was judged: if another process has meanwhile published a good
   * entry under the same name, leave it in place (else it would be quarantined and compiled twice). */
  struct stat now;
  if (lstat(from, &now) != 0) return errno == ENOENT;
  if (judged && !cache_same_file(&now, judged)) return 1;
  struct stat qst;
  if (lstat(q, &qst) != 0 && errno == ENOENT && mkdir(q, 0700) == 0) lstat(q, &qst);
  int moved = 0;
  if (lstat(q, &qst) == 0 && S_ISDIR(qst.st_mode) && cache_trusted(&qst)) moved = rename(from, to) == 0;
  if (moved) {
    cache_trim_quarantine(dir);
    return 1;
  }
  /* No usable quarantine dir: get the bad entry out of the way anyway. */
  if (unlink(from) == 0) return 1;
  return errno == EISDIR && rmdir(from) == 0;
}
