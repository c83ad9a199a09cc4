/* Cache keys: XXH3-128 over a canonical encoding of everything that shapes the binary. */
#ifndef KVJIT_KEY_H
#define KVJIT_KEY_H

#include <stdint.h>

#include "kvjit.h"

#define KVJIT_CACHE_FORMAT_VERSION 1u

/** What the cache entry's payload is. */
typedef enum kvjit_payload_kind {
  KVJIT_PAYLOAD_CUBIN = 1,
  KVJIT_PAYLOAD_PTX = 2
} kvjit_payload_kind;

typedef struct kvjit_key {
  uint64_t high, low; /* XXH3-128 halves */
} kvjit_key;

/** Everything besides the program description that the binary depends on. */
typedef struct kvjit_key_target {
  int arch;                /* compute capability the code is built for */
  kvjit_payload_kind kind;
  int nvrtc_major, nvrtc_minor;
} kvjit_key_target;

/** Key of @p desc built for @p target. desc->arch is ignored (target->arch counts). */
void kvjit_key_compute(kvjit_key *out, const kvjit_program_desc *desc, const kvjit_key_target *target);

/** 32 lower-case hex digits and a NUL. */
void kvjit_key_hex(const kvjit_key *key, char out[33]);

/** Parse 32 hex digits; 0 on success. */
int kvjit_key_parse_hex(kvjit_key *out, const char *hex);

static inline int kvjit_key_equal(const kvjit_key *a, const kvjit_key *b) {
  return a->high == b->high && a->low == b->low;
}

#endif
