/*
 * Files kvjit writes outside its entry names (cache export's pack, the manifest it records to):
 * never over something that is not a regular file, never inside a cache dir (cache.h).
 */
#include "cache_target.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cache_internal.h"
#include "safe_fs.h"
#include "status.h"

/* 1 when @p dir/@p name is a regular file (not followed: a cache's lock file never is a link). */
static int has_file(const char *dir, const char *name) {
  char path[PATH_MAX];
  struct stat st;
  return snprintf(path, sizeof path, "%s/%s", dir, name) < (int)sizeof path && lstat(path, &st) == 0 &&
         S_ISREG(st.st_mode);
}

/* A cache's root (it holds v2/lock) or its v2 dir (named v2, holding lock). */
static int is_cache_dir(const char *dir) {
  const char *base = strrchr(dir, '/');
  base = base ? base + 1 : dir;
  return has_file(dir, CACHE_SUBDIR "/" LOCK_NAME) || (strcmp(base, CACHE_SUBDIR) == 0 && has_file(dir, LOCK_NAME));
}

kvjit_status kvjit_cache_check_target(const char *path, const char *what) {
  if (kvjit_replaceable(path) != 0) {
    int err = errno;
    const char *why = err == ELOOP    ? "a symbolic link (it is not replaced or followed)"
                      : err == EISDIR ? "a directory"
                      : err == EINVAL ? "not a regular file (a FIFO, device or socket)"
                                      : "cannot be checked";
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: %s: refused: %s (%s)", what, path, why, strerror(err));
  }
  /* The dir it would be written in, resolved, and every dir above it. */
  char dir[PATH_MAX], real[PATH_MAX];
  const char *slash = strrchr(path, '/');
  if (slash == NULL) {
    snprintf(dir, sizeof dir, ".");
  } else if (snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path) >= (int)sizeof dir) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: %s: refused: path too long", what, path);
  }
  /* A dir that does not resolve: the create fails with its own errno. */
  if (realpath(dir, real) == NULL) return KVJIT_OK;
  for (;;) {
    if (is_cache_dir(real)) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                        "%s: %s: refused: inside the kvjit cache dir %s (only the cache writes there)", what, path,
                        real);
    }
    char *last = strrchr(real, '/');
    if (last == NULL || last == real) break;
    *last = '\0';
  }
  return KVJIT_OK;
}
