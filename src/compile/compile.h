/* NVRTC: compilation of one program to a cubin (or PTX), exactly as the key describes it. */
#ifndef KVJIT_COMPILE_H
#define KVJIT_COMPILE_H

#include <stddef.h>
#include <stdint.h>

#include "key.h"
#include "kvjit_tools.h"

/** What NVRTC gets: everything here is covered by the key (request.h builds it). */
typedef struct kvjit_compile_input {
  const char *name;
  const char *source;
  size_t num_headers;
  const char *const *header_names;
  const char *const *header_sources;
  size_t num_options;
  const char *const *options;         /* without the target: that comes from the key target */
  size_t num_kernels;
  const char *const *kernels;         /* canonical name expressions */
  const char *const *kernels_given;   /* as the caller wrote them, for messages */
  int leaks_state;                    /* an option that changes later compiles (kvjit_nvrtc_leaks_state) */
} kvjit_compile_input;

/** Output of one compile; free with kvjit_compiled_free(). */
typedef struct kvjit_compiled {
  uint8_t *payload;
  size_t payload_len;
  size_t num_kernels;
  char **lowered; /* one per kernel */
  char *log;      /* never NULL; name-expression errors point at the caller's kernels[i] */
  uint64_t ns;    /* wall time of the compile */
  /* 0 when a compile with a state-leaking option ran in this process before or during this one:
   * the output may differ from a fresh process's, so it must not be published. */
  int publishable;
} kvjit_compiled;

/**
 * Compile @p in for @p target. On KVJIT_ERR_COMPILE out->log holds NVRTC's log (name-expression
 * errors rewritten to the caller's text) and the last error its first error line; a target
 * NVRTC rejects is KVJIT_ERR_UNSUPPORTED listing what it builds; KVJIT_ERR_NO_NVRTC without NVRTC.
 */
kvjit_status kvjit_nvrtc_compile(kvjit_compiled *out, const kvjit_compile_input *in, const kvjit_key_target *target);

void kvjit_compiled_free(kvjit_compiled *c);

/**
 * 1 when option @p option is known to leak NVRTC state into later compiles of the process:
 * NVRTC 13.0 compiles differently for the rest of the process once one program used
 * --Ofast-compile (other than =0), and --Ofast-compile=0 does not undo it
 * (tests/test_nvrtc_leak.c detects it on the NVRTC in use).
 */
int kvjit_nvrtc_leaks_state(const char *option);

#endif
