/*
 * Programs inside the library: what a kvjit_program and its kernels hold, made and freed here,
 * filled by the build (build.c) and the load (load.c). A program never changes once READY, except
 * that it gets loaded (once, under its context's lock); it lives until its context is destroyed.
 */
#ifndef KVJIT_PROGRAM_H
#define KVJIT_PROGRAM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "driver.h"
#include "entry.h"
#include "key.h"
#include "kvjit_tools.h"
#include "request.h"

/** kvjit_kernel.num_params before the driver was asked (cuKernelGetParamInfo, launch.c). */
#define KVJIT_KERNEL_PARAMS_UNKNOWN (-1)
/** ... and when it cannot say (a driver before CUDA 12.4). */
#define KVJIT_KERNEL_PARAMS_UNAVAILABLE (-2)

struct kvjit_kernel {
  CUkernel handle;                    /* context-independent handle from cuLibraryGetKernel */
  const struct kvjit_program *program;
  const char *name;                   /* canonical name expression */
  const char *lowered;                /* mangled name NVRTC produced */
  atomic_int num_params;              /* parameter count, or one of the two values above */
};

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
  kvjit_key content;          /* the content digest (key.h), for writing its entry again */
  kvjit_entry_digests digests; /* its inputs' digests (entry.h), idem */
  /* An alias (its entry named a bundle, entry.h): the bundle's program, whose kernel bundle_index
   * this program's one kernel is. It has no payload, library or kernels of its own: loading it
   * loads the bundle (once per context) and points at the bundle's kernel. */
  struct kvjit_program *bundle;
  uint32_t bundle_index;
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

/** A BUILDING program of @p req for @p target under @p key, or NULL when out of memory. */
kvjit_program *kvjit_program_new(const kvjit_request *req, const kvjit_key_target *target, const kvjit_key *key);

/** Free @p p, unloading its library through @p drv when it has one of its own (an alias has not). */
void kvjit_program_free(kvjit_program *p, const kvjit_driver *drv);

/**
 * Copies of what entry @p view holds, taken out of the cache's buffer: the lowered names of its
 * first @p n kernels into @p lowered, their names into @p names unless NULL, and its payload
 * (NUL-terminated) into *payload unless @p payload is NULL. The slots filled before a failure
 * (KVJIT_ERR_OUT_OF_MEMORY) are the caller's to free, as on success.
 */
kvjit_status kvjit_program_copy_entry(const kvjit_entry_view *view, size_t n, char **names, char **lowered,
                                      uint8_t **payload, size_t *payload_len);

#endif
