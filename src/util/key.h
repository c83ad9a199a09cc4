/*
 * Cache keys: XXH3-128 over a canonical encoding of everything that shapes the binary.
 *
 * A key is derived in two steps so that an entry can prove its own header: the content digest
 * covers what only the caller has (options, source, headers, program name); the key covers the
 * target, the kernel names and that digest. An entry stores all of the second step's inputs, so
 * a reader recomputes the key from the entry alone and catches a header that disagrees with it.
 */
#ifndef KVJIT_KEY_H
#define KVJIT_KEY_H

#include <stddef.h>
#include <stdint.h>

#include "kvjit_tools.h"

#define KVJIT_CACHE_FORMAT_VERSION 2u

/** What the cache entry's payload is. */
typedef enum kvjit_payload_kind {
  KVJIT_PAYLOAD_CUBIN = 1,
  KVJIT_PAYLOAD_PTX = 2,
  /* A pointer to the bundle entry whose cubin holds the kernel (entry.h). Never a key's kind: an
   * alias's key is the key of the cubin it stands for. */
  KVJIT_PAYLOAD_ALIAS = 3
} kvjit_payload_kind;

typedef struct kvjit_key {
  uint64_t high, low; /* XXH3-128 halves */
} kvjit_key;

/** Everything besides the program description that the binary depends on. */
typedef struct kvjit_key_target {
  int arch;                /* compute capability the code is built for, e.g. 90 */
  kvjit_payload_kind kind; /* cubin (sm_XY) or PTX (compute_XY) */
  int suffix;              /* 0, 'a' (arch-specific: sm_90a) or 'f' (family: sm_100f) */
  int nvrtc_major, nvrtc_minor;
} kvjit_key_target;

/** Incremental XXH3-128 over the canonical encoding (content digests, keys). */
typedef struct kvjit_key_builder {
  unsigned char state[640] __attribute__((aligned(64))); /* an XXH3_state_t */
} kvjit_key_builder;

/** A content digest (request.c), in pieces, for digests with more fields after them. */
void kvjit_key_content_begin(kvjit_key_builder *b, const char *magic);
void kvjit_key_content_program(kvjit_key_builder *b, const char *name, const char *source, size_t num_options,
                               const char *const *options, size_t num_headers, const kvjit_header *headers);
void kvjit_key_put_u64(kvjit_key_builder *b, uint64_t v);
void kvjit_key_put_bytes(kvjit_key_builder *b, char tag, const void *data, size_t len);
void kvjit_key_put_str(kvjit_key_builder *b, char tag, const char *s);
void kvjit_key_content_end(kvjit_key_builder *b, kvjit_key *out);

/** XXH3-128 of @p len bytes (a header file's digest). */
void kvjit_key_of_bytes(kvjit_key *out, const void *data, size_t len);

void kvjit_key_begin(kvjit_key_builder *b, const kvjit_key_target *target, size_t num_kernels);
/** Each kernel name, in order, as the caller asked for it (@p len bytes, no NUL needed). */
void kvjit_key_add_kernel(kvjit_key_builder *b, const char *name, size_t len);
void kvjit_key_finish(kvjit_key_builder *b, const kvjit_key *content, kvjit_key *out);

/** The key of @p content built for @p target with these kernel names (NUL-terminated). */
void kvjit_key_derive(kvjit_key *out, const kvjit_key_target *target, size_t num_kernels, const char *const *kernels,
                      const kvjit_key *content);

/** 32 lower-case hex digits and a NUL. */
void kvjit_key_hex(const kvjit_key *key, char out[33]);

/** Parse 32 hex digits; 0 on success. */
int kvjit_key_parse_hex(kvjit_key *out, const char *hex);

static inline int kvjit_key_equal(const kvjit_key *a, const kvjit_key *b) {
  return a->high == b->high && a->low == b->low;
}

#endif
