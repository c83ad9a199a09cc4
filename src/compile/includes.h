/*
 * Header resolution, the way jitify2 does it: kvjit finds every header a program includes, reads
 * and hashes each one, and gives NVRTC exactly what it hashed, so the key covers every header
 * that shapes the binary and no path does.
 *
 * Every #include and __has_include of the source, of each in-memory header and of each header
 * found on disk (recursively; in every #if branch: a superset is safe) resolves to
 *   - an in-memory header of the description (by its exact name; for "..." also relative to the
 *     including header's name),
 *   - a file on disk: for "..." in the including file's dir, then in each include dir (-I,
 *     --include-path) in option order; read, hashed and passed to NVRTC as an in-memory header
 *     under a readable relative name (the directive rewritten to it where it differs),
 *   - a toolkit header (the toolkit's include and CCCL dirs, found from the NVRTC in use): NVRTC
 *     reads those itself, and the key covers the toolkit's header tree by content,
 *   - nothing: keyed as absent (and rewritten to <...> so that NVRTC cannot find it in its
 *     working directory, which it searches for "..." and which is not keyed).
 * A computed `#include MACRO` in a user file cannot be keyed and is refused.
 */
#ifndef KVJIT_INCLUDES_H
#define KVJIT_INCLUDES_H

#include <stddef.h>
#include <stdint.h>

#include "include_memo.h"
#include "key.h"
#include "kvjit_tools.h"


typedef enum kvjit_include_kind {
  KVJIT_INCLUDE_FILE = 1,    /* a file of the graph (in memory or read from disk) */
  KVJIT_INCLUDE_TOOLKIT = 2, /* a toolkit header NVRTC reads itself */
  KVJIT_INCLUDE_ABSENT = 3   /* found nowhere */
} kvjit_include_kind;

/** One directive and what it resolved to. */
typedef struct kvjit_include_directive {
  size_t start, end;       /* the name with its delimiters ("x.h" or <x.h>) in the file's text */
  kvjit_include_kind kind;
  size_t file;             /* KVJIT_INCLUDE_FILE: index into kvjit_includes.files */
  int angled;              /* written as <...> */
} kvjit_include_directive;

/** One file NVRTC gets: the source (index 0), each in-memory header, each header read from disk. */
typedef struct kvjit_include_file {
  const char *name;        /* the name NVRTC sees (owned by the graph) */
  const char *text;        /* contents (owned by the caller's desc or by the memo) */
  size_t len;
  int on_disk;
  kvjit_key digest;        /* of text, for files read from disk */
  size_t first, count;     /* its directives in kvjit_includes.directives */
} kvjit_include_file;

/** A resolved include graph. Valid while the memo and the description it came from live. */
typedef struct kvjit_includes {
  size_t num_files;
  kvjit_include_file *files;
  size_t num_directives;
  kvjit_include_directive *directives;
  size_t num_pre;
  kvjit_include_directive *pre; /* the --pre-include options (start/end unused) */
  int uses_toolkit;             /* some directive resolved to a toolkit header */
  kvjit_key toolkit;            /* digest of the toolkit's header tree, when used */
  const char *toolkit_dirs[2];  /* the dirs NVRTC needs as -I then ("" when none) */
  char *names;                  /* storage of the files' names */
} kvjit_includes;

/** What to resolve. */
typedef struct kvjit_include_input {
  const char *name;            /* the program name (the source's own name) */
  const char *source;
  size_t num_headers;
  const kvjit_header *headers;
  size_t num_dirs;
  const char *const *dirs;     /* the user's include dirs, in option order */
  size_t num_pre;
  const char *const *pre;      /* names given to --pre-include */
} kvjit_include_input;

/**
 * Resolve @p in (see the file comment). The toolkit dirs come from the NVRTC in use; without one
 * toolkit headers resolve as absent.
 * @return KVJIT_ERR_UNSUPPORTED for a computed include in a user file (file, line, what to do),
 *         KVJIT_ERR_IO for a header that exists but cannot be read.
 */
kvjit_status kvjit_includes_resolve(kvjit_includes *out, kvjit_include_memo *memo, const kvjit_include_input *in);

void kvjit_includes_free(kvjit_includes *inc);

/** 1 when the graph has something the key must cover beyond the description itself. */
int kvjit_includes_matter(const kvjit_includes *inc);

/** Feed the resolution (names, disk files' digests, the toolkit's digest) into a content digest. */
void kvjit_includes_hash(const kvjit_includes *inc, kvjit_key_builder *b);
/** kvjit_includes_hash() without the toolkit's digest (a miss tells the two apart: miss.h). */
void kvjit_includes_hash_files(const kvjit_includes *inc, kvjit_key_builder *b);

/** The text of file @p index with its directives rewritten to the names NVRTC gets (malloc'd). */
char *kvjit_includes_rewrite(const kvjit_includes *inc, size_t index);

/** The name a --pre-include option @p index must give NVRTC (owned by the graph or the input). */
const char *kvjit_includes_pre_name(const kvjit_includes *inc, const kvjit_include_input *in, size_t index);

#endif
