/*
 * A program request: a kvjit_program_desc checked, with its kernel names canonical, its options
 * sorted into what NVRTC gets and what the key covers, its headers resolved (includes.h), and
 * its content digest computed. Built once per kvjit_program_get/_build/_compile call, or once per
 * handle (which deep-copies the description first).
 */
#ifndef KVJIT_REQUEST_H
#define KVJIT_REQUEST_H

#include <stddef.h>

#include "compile.h"
#include "entry.h"
#include "includes.h"
#include "key.h"
#include "kvjit_tools.h"

typedef struct kvjit_request {
  const kvjit_program_desc *desc; /* the description (its strings must outlive the request) */
  char **kernels;                 /* canonical name expressions */
  size_t num_options;
  const char **options;           /* normalized: no include dirs; --pre-include=<name NVRTC gets> */
  char **owned_options;           /* the rewritten ones, freed with the request */
  size_t num_dirs;
  const char **dirs;              /* include dirs, in option order */
  size_t num_pre;
  const char **pre;               /* --pre-include names as given */
  size_t *pre_option;             /* index in options of each */
  int leaks_state;                /* an option leaks NVRTC state (compile.h) */
  kvjit_includes inc;
  kvjit_include_input inc_in;
  kvjit_key content;              /* the content digest */
} kvjit_request;

/** Check every field of @p desc, naming the bad one (what kvjit_request_init() checks first). */
kvjit_status kvjit_request_check(const kvjit_program_desc *desc);

/**
 * Check @p desc (every field, naming the bad one) and prepare it.
 * @return KVJIT_ERR_INVALID_ARGUMENT / KVJIT_ERR_UNSUPPORTED (options kvjit cannot key, computed
 *         includes) with the detail in the last error.
 */
kvjit_status kvjit_request_init(kvjit_request *r, kvjit_include_memo *memo, const kvjit_program_desc *desc);

void kvjit_request_free(kvjit_request *r);

/**
 * The digests of the content digest's inputs one by one (entry.h; nvrtc zero here), for an entry
 * to record and a miss to compare (miss.h). Computed on demand, on the miss path only: a repeat
 * lookup does not pay for them.
 */
void kvjit_request_digests(const kvjit_request *r, kvjit_entry_digests *out);

/** The key of the request built for @p target. */
void kvjit_request_key(const kvjit_request *r, const kvjit_key_target *target, kvjit_key *out);

/** What NVRTC gets; free with kvjit_request_input_free(). */
typedef struct kvjit_request_input {
  kvjit_compile_input in;
  char **texts;       /* rewritten source (0) and headers */
  size_t num_texts;
  size_t first_owned; /* options from here on were made for this input */
  const char **names; /* header names */
  const char **options;
} kvjit_request_input;

kvjit_status kvjit_request_input_make(const kvjit_request *r, kvjit_request_input *out);
void kvjit_request_input_free(kvjit_request_input *in);

/** Deep copy of @p desc into one malloc'd block (what a handle keeps). Free with free(). */
kvjit_program_desc *kvjit_desc_copy(const kvjit_program_desc *desc);

#endif
