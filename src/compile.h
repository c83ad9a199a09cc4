/* NVRTC: target selection and compilation of one program to a cubin (or PTX). */
#ifndef KVJIT_COMPILE_H
#define KVJIT_COMPILE_H

#include <stddef.h>
#include <stdint.h>

#include "key.h"
#include "kvjit.h"

/** Output of one compile; free with kvjit_compiled_free(). */
typedef struct kvjit_compiled {
  uint8_t *payload;
  size_t payload_len;
  size_t num_kernels;
  char **lowered; /* one per desc->kernels[i] */
  char *log;      /* never NULL */
  uint64_t ns;    /* wall time of the compile */
} kvjit_compiled;

/** Compile @p desc for @p target. On KVJIT_ERR_COMPILE, out->log holds NVRTC's log. */
kvjit_status kvjit_nvrtc_compile(kvjit_compiled *out, const kvjit_program_desc *desc, const kvjit_key_target *target);

void kvjit_compiled_free(kvjit_compiled *c);

#endif
