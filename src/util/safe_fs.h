/*
 * Opening files and dirs that someone else may have put in kvjit's way. Every file kvjit opens
 * (entries in every layer, the lock file, the manifest it records to, the ones the CLI reads) goes
 * through these: no open blocks on a FIFO or device, follows a symbolic link in the last
 * component, or lands on fd 0, 1 or 2 (where a program that closed its stdout would write into
 * it), and anything but a regular file (or a dir, where one is wanted) is refused after fstat.
 */
#ifndef KVJIT_SAFE_FS_H
#define KVJIT_SAFE_FS_H

#include <dirent.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

/** Move @p fd to 3 or above (closing the low one) when it is 0, 1 or 2. @return the fd, or -1. */
int kvjit_fd_above_stdio(int fd);

/**
 * Open a regular file: @p flags are open(2)'s (O_RDONLY, O_RDWR | O_CREAT, ...) plus
 * O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, added here. An existing path is lstat'ed first,
 * so a device or FIFO is never even opened.
 * @param st optional; receives the open file's fstat.
 * @return the fd (>= 3), or -1 with errno: ELOOP for a symbolic link, EINVAL for anything that is
 *         not a regular file (EISDIR for a dir), else open(2)'s.
 */
int kvjit_open_regular(const char *path, int flags, mode_t mode, struct stat *st);

/** A dir stream of @p path (a dir, or a link to one: callers check trust), its fd >= 3; NULL + errno. */
DIR *kvjit_open_dir(const char *path);

/**
 * May kvjit create or replace @p path, a file a caller named (a pack, a manifest)? Nothing there,
 * or a regular file: yes. Anything else is never replaced or written into: a link (ELOOP, the
 * rename would replace the link, an append would follow it), a dir (EISDIR), a FIFO, device or
 * socket (EINVAL). @return 0, or -1 with errno (lstat's own errno when it cannot tell).
 */
int kvjit_replaceable(const char *path);

/** read(2) until @p len bytes or end of file, retrying EINTR. @return bytes read, or -1. */
ssize_t kvjit_read_full(int fd, void *buf, size_t len);

/** write(2) all of @p len bytes, retrying EINTR and short writes. @return 0, or -1. */
int kvjit_write_full(int fd, const void *buf, size_t len);

#endif
