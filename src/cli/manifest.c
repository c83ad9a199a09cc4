/* kvjit prewarm --manifest: a manifest file read in bounded pieces, line by line (manifest.h). */
#include "manifest.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* cache/MANIFEST.md: a line holds at most 511 characters before its "\n" or "\r\n". */
#define MANIFEST_LINE_MAX 511
/* A manifest is a few hundred lines (duplicates from many processes included); one larger than
 * this is not a manifest, and reading it would only grow the variant list without bound. */
#define MANIFEST_MAX_BYTES (64u << 20)

/* Strip surrounding blanks in place. */
static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  size_t len = strlen(s);
  while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t')) s[--len] = '\0';
  return s;
}

/* One line of a manifest (its "\n" / "\r\n" already gone): skip, add, or exit status 2. */
static int manifest_line(const char *cmd, const char *path, unsigned long number, char *line, size_t len,
                         variant_list *out) {
  if (memchr(line, '\0', len) != NULL) {
    fprintf(stderr, "kvjit %s: %s:%lu: a NUL byte in the line (a manifest is text)\n", cmd, path, number);
    return EXIT_USAGE;
  }
  char *text = trim(line);
  if (text[0] == '\0' || text[0] == '#') return 0;
  kvjit_variant v;
  kvjit_status status = kvjit_variant_parse(&v, text);
  if (status == KVJIT_ERR_NOT_FOUND) return 0; /* comment-only after all */
  if (status != KVJIT_OK) {
    const char *detail = kvjit_last_error();
    fprintf(stderr, "kvjit %s: %s:%lu: %s\n", cmd, path, number, detail[0] ? detail : kvjit_status_string(status));
    return EXIT_USAGE;
  }
  return variant_list_add(out, &v) ? 0 : out_of_memory(cmd);
}

/*
 * The variants of a manifest's lines (blank and # lines skipped); exit status 2 naming FILE:LINE.
 * Only a regular file is read (a FIFO or device would block or never end), in fixed-size pieces:
 * a line past the format's limit, a NUL byte or a file past MANIFEST_MAX_BYTES stops the read
 * there, so no input makes it allocate more than one line's room.
 */
int read_manifest(const char *cmd, const char *path, variant_list *out) {
  struct stat st;
  if (stat(path, &st) != 0) return usage_error(cmd, "--manifest '%s': %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode)) return usage_error(cmd, "--manifest '%s': not a regular file", path);
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return usage_error(cmd, "--manifest '%s': %s", path, strerror(errno));
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return usage_error(cmd, "--manifest '%s': not a regular file", path);
  }
  if ((uint64_t)st.st_size > MANIFEST_MAX_BYTES) {
    close(fd);
    return usage_error(cmd, "--manifest '%s': %lld bytes, more than a manifest may hold (%u)", path,
                       (long long)st.st_size, MANIFEST_MAX_BYTES);
  }
  char line[MANIFEST_LINE_MAX + 2]; /* the line and a "\r" that may end it */
  size_t len = 0;
  unsigned long number = 1;
  uint64_t total = 0;
  int rc = 0, eof = 0;
  char chunk[4096];
  while (rc == 0 && !eof) {
    ssize_t got = read(fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      rc = usage_error(cmd, "--manifest '%s': %s", path, strerror(errno));
      break;
    }
    eof = got == 0;
    total += (uint64_t)got;
    if (total > MANIFEST_MAX_BYTES) {
      rc = usage_error(cmd, "--manifest '%s': more than a manifest may hold (%u bytes)", path, MANIFEST_MAX_BYTES);
      break;
    }
    for (ssize_t i = 0; rc == 0 && i < got; i++) {
      if (chunk[i] != '\n') {
        if (len == sizeof line) {
          fprintf(stderr, "kvjit %s: %s:%lu: longer than %d characters\n", cmd, path, number, MANIFEST_LINE_MAX);
          rc = EXIT_USAGE;
          break;
        }
        line[len++] = chunk[i];
        continue;
      }
      if (len > 0 && line[len - 1] == '\r') len--;
      if (len > MANIFEST_LINE_MAX) {
        fprintf(stderr, "kvjit %s: %s:%lu: longer than %d characters\n", cmd, path, number, MANIFEST_LINE_MAX);
        rc = EXIT_USAGE;
        break;
      }
      line[len] = '\0';
      rc = manifest_line(cmd, path, number, line, len, out);
      len = 0;
      number++;
    }
  }
  /* The last line may lack its newline. */
  if (rc == 0 && len > 0) {
    if (line[len - 1] == '\r') len--;
    if (len > MANIFEST_LINE_MAX) {
      fprintf(stderr, "kvjit %s: %s:%lu: longer than %d characters\n", cmd, path, number, MANIFEST_LINE_MAX);
      rc = EXIT_USAGE;
    } else {
      line[len] = '\0';
      rc = manifest_line(cmd, path, number, line, len, out);
    }
  }
  close(fd);
  return rc;
}
