/*
 * Programs inside the library: what a kvjit_program holds, and the steps of kvjit_program_get()
 * (find or build, then load) for the parts that hold a prepared request (handle.c) or launch
 * its kernels (launch.c). A program never changes once READY, except that it gets loaded (once,
 * under the context's lock); it lives until its context is destroyed.
 */
#ifndef KVJIT_PROGRAM_H
#define KVJIT_PROGRAM_H

#include <stdatomic.h>
#include <stdint.h>

#include "driver.h"
#include "includes.h"
#include "jit.h"
#include "key.h"
#include "kvjit.h"
#include "request.h"

typedef enum program_state { PROGRAM_BUILDING, PROGRAM_READY, PROGRAM_FAILED } program_state;

struct kvjit_program {
  kvjit_key key;
  char key_hex[33];
  char *name;
  int arch;                   /* target code (target.h) */
  kvjit_key_target target;
  program_state state;
  kvjit_status status;        /* of a failed build */
  char *error;                /* last-error line of a failed build */
  int transient;              /* a failure worth retrying (out of memory, I/O): not remembered */
  char *log;                  /* NVRTC's log ("" from disk) */
  uint8_t *payload;           /* cubin or PTX (NUL-terminated) */
  size_t payload_len;
  uint8_t *retired;           /* a payload the driver rejected, kept for readers until destroy */
  int from_disk;              /* the payload came from a cache file */
  int publishable;            /* 0: compiled after a state-leaking compile (memory only) */
  size_t num_kernels;
  char **names;               /* canonical name expressions */
  char **lowered;
  char **retired_lowered;     /* names of a disk entry the driver could not use, kept until destroy */
  /* Loading: under the context's lock. */
  int loading;
  CUlibrary library;
  /* Set (release) once loaded; read without the lock by kvjit_program_kernel() (acquire), which a
   * thread may call on a program another thread is loading. */
  _Atomic(struct kvjit_kernel *) kernels;
  struct kvjit_program *next;
};

/** The context's header memo (includes.h). */
kvjit_include_memo *kvjit_context_memo(kvjit_context *ctx);

/**
 * Find the program of @p key, or build it (memory table, disk, NVRTC) without loading it. Two
 * threads asking for one key build it once; a failed build is remembered (out of memory and I/O
 * errors excepted). On failure *out is the failed program (its log) when there is one.
 */
kvjit_status kvjit_program_acquire(kvjit_context *ctx, const kvjit_request *req, const kvjit_key_target *target,
                                   const kvjit_key *key, int ptx_fallback, const kvjit_program_label *label,
                                   kvjit_program **out, kvjit_origin *origin);

/** Load a READY program into the driver (once per context; cuLibraryLoadData) and its kernels. */
kvjit_status kvjit_program_load(kvjit_context *ctx, kvjit_program *p, const kvjit_request *req,
                                const kvjit_program_label *label, const kvjit_driver *drv);

/** Count a memory hit served outside jit.c (handles). */
void kvjit_context_count_memory_hit(kvjit_context *ctx);

#endif
