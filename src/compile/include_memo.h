/*
 * Per-context memo of header files read from disk: one stat per header on a hit; a file is read
 * and its directives scanned (include_scan.h) once per version of it (device, inode, size,
 * times). Thread-safe.
 */
#ifndef KVJIT_INCLUDE_MEMO_H
#define KVJIT_INCLUDE_MEMO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "include_scan.h"
#include "key.h"
#include "kvjit_tools.h"

typedef struct kvjit_include_memo kvjit_include_memo;

/** One version of one file. Immutable once in the memo; lives as long as the memo. */
typedef struct kvjit_memo_file {
  char *path;
  dev_t dev;
  ino_t ino;
  off_t size;
  int64_t mtime_ns, ctime_ns;
  char *text;
  size_t len;
  kvjit_key digest;
  size_t num_directives;
  kvjit_scan_directive *directives;
  struct kvjit_memo_file *next;
} kvjit_memo_file;

kvjit_status kvjit_include_memo_create(kvjit_include_memo **out);
void kvjit_include_memo_destroy(kvjit_include_memo *memo);

/**
 * The memo entry of @p path as it is now (@p st: its stat). Entries are immutable and live as
 * long as the memo, so a caller keeps using the version it resolved even if the file changes.
 */
kvjit_status kvjit_include_memo_get(kvjit_include_memo *memo, const char *path, const struct stat *st,
                                    const kvjit_memo_file **out);

#endif
