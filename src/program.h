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

/* ---- for bundle.c: compiling groups of kernels as one program ---------------------------------- */

struct kvjit_cache;
struct kvjit_compiled;

/** The target and key of @p req built for its desc->arch (the current device's when it names none). */
kvjit_status kvjit_request_build_key(const kvjit_request *req, kvjit_key_target *target, kvjit_key *key);

/** The context's disk cache. */
struct kvjit_cache *kvjit_context_cache(kvjit_context *ctx);

/** 1 when the context's program table has @p key (built, building or failed). */
int kvjit_context_has_program(kvjit_context *ctx, const kvjit_key *key);

/**
 * 1 when the disk cache has a usable entry for @p key: its own, or an alias whose bundle is there
 * and holds its kernel (read-only dirs first; an unusable alias makes the search go on).
 */
int kvjit_context_entry_usable(kvjit_context *ctx, const kvjit_key *key);

/**
 * NVRTC for @p req, counted and logged, its entry written under @p key when it may be; @p published
 * is KVJIT_ERR_IO (reason in the last error) when it compiled but is not on disk. With @p explain
 * (a lookup's miss, not a prewarm's build) the miss is explained first (miss.h): logged once,
 * kept, counted by cause, and named in KVJIT_COMPILE=never's error.
 */
kvjit_status kvjit_context_compile(kvjit_context *ctx, const kvjit_request *req, const kvjit_program_label *label,
                                   const kvjit_key_target *target, const kvjit_key *key, int explain,
                                   struct kvjit_compiled *compiled, kvjit_status *published);

/**
 * kvjit_context_compile(), publishing only a payload of at most @p max_payload bytes: a larger one
 * is compiled and handed back but not written, and @p published is KVJIT_ERR_BUSY (a bundle too
 * large for the byte budget, which the caller cuts smaller).
 */
kvjit_status kvjit_context_compile_within(kvjit_context *ctx, const kvjit_request *req,
                                          const kvjit_program_label *label, const kvjit_key_target *target,
                                          const kvjit_key *key, int explain, struct kvjit_compiled *compiled,
                                          kvjit_status *published, size_t max_payload);

/**
 * A compile's publication @p published as its caller's status: KVJIT_OK when it is on disk or the
 * cache is off by choice, else KVJIT_ERR_IO "REQ compiled but ..." (a prewarm reports it).
 */
kvjit_status kvjit_context_not_cached(kvjit_context *ctx, const kvjit_request *req, kvjit_status published);

/** Count disk hits served outside jit.c (a group's kernels found cached). */
void kvjit_context_count_disk_hits(kvjit_context *ctx, unsigned hits);

#endif
