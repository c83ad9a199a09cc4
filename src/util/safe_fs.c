/* Opens that neither block, follow links, land on stdio fds nor accept special files. */
#include "safe_fs.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

int kvjit_fd_above_stdio(int fd) {
  if (fd < 0 || fd > 2) return fd;
  int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  int err = errno;
  close(fd);
  errno = err;
  return moved;
}

/* EINVAL for what is not a regular file, EISDIR for a dir, ELOOP for a link. */
static int type_error(mode_t mode) {
  if (S_ISLNK(mode)) return ELOOP;
  if (S_ISDIR(mode)) return EISDIR;
  return EINVAL;
}

int kvjit_open_regular(const char *path, int flags, mode_t mode, struct stat *st) {
  struct stat before;
  if (lstat(path, &before) == 0) {
    if (!S_ISREG(before.st_mode)) {
      errno = type_error(before.st_mode);
      return -1;
    }
  } else if (errno != ENOENT || !(flags & O_CREAT)) {
    return -1;
  }
  /* O_NONBLOCK: a FIFO swapped in after the lstat opens at once (or fails with ENXIO) instead of
   * waiting for a peer; fstat below then refuses it. */
  int fd = open(path, flags | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, mode);
  if (fd < 0) return -1;
  fd = kvjit_fd_above_stdio(fd);
  if (fd < 0) return -1;
  struct stat now;
  int err = fstat(fd, &now) != 0 ? errno : !S_ISREG(now.st_mode) ? type_error(now.st_mode) : 0;
  if (err != 0) {
    close(fd);
    errno = err;
    return -1;
  }
  if (st) *st = now;
  return fd;
}

int kvjit_replaceable(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
  if (S_ISREG(st.st_mode)) return 0;
  errno = type_error(st.st_mode);
  return -1;
}

DIR *kvjit_open_dir(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return NULL;
  fd = kvjit_fd_above_stdio(fd);
  if (fd < 0) return NULL;
  DIR *d = fdopendir(fd);
  if (d == NULL) {
    int err = errno;
    close(fd);
    errno = err;
  }
  return d;
}

ssize_t kvjit_read_full(int fd, void *buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t r = read(fd, (char *)buf + got, len - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += (size_t)r;
  }
  return (ssize_t)got;
}

int kvjit_write_full(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return -1;
    }
    p += w;
    len -= (size_t)w;
  }
  return 0;
}
