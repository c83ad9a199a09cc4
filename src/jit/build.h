/*
 * Building a program: its payload from the caches or from NVRTC (under the key's cross-process
 * lock), into the context's table once per key (kvjit_program_acquire()).
 */
#ifndef KVJIT_BUILD_H
#define KVJIT_BUILD_H

#include <stdint.h>

#include "compile.h"
#include "context.h"
#include "entry.h"
#include "key.h"
#include "kvjit_tools.h"
#include "program.h"
#include "request.h"

/**
 * The payload of @p key: from the caches (*file, @p view into it; *origin KVJIT_FROM_DISK), or
 * compiled (under the cross-process lock) into @p compiled and published (*origin
 * KVJIT_FROM_COMPILE, @p published as kvjit_context_compile() says). With @p bundle (a build that
 * will be loaded), an alias gives its bundle's program there and no payload; without, an alias
 * counts as found once its bundle is checked. The caller frees *file and @p compiled.
 */
kvjit_status kvjit_program_obtain(kvjit_context *ctx, const kvjit_request *req, const kvjit_entry_label *label,
                                  const kvjit_key_target *target, const kvjit_key *key, uint8_t **file,
                                  kvjit_entry_view *view, struct kvjit_compiled *compiled, kvjit_origin *origin,
                                  kvjit_status *published, kvjit_program **bundle);

/**
 * Find the program of @p key, or build it (memory table, disk, NVRTC) without loading it. Two
 * threads asking for one key build it once; a failed build is remembered (out of memory and I/O
 * errors excepted). On failure *out is the failed program (its log) when there is one.
 */
kvjit_status kvjit_program_acquire(kvjit_context *ctx, const kvjit_request *req, const kvjit_key_target *target,
                                   const kvjit_key *key, int ptx_fallback, const kvjit_entry_label *label,
                                   kvjit_program **out, kvjit_origin *origin);

#endif
