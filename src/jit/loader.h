/*
 * The loader's calls (kvjit.h: kvjit_program_get(), _build(), _compile()): a description checked
 * into a request, its target resolved and keyed, then built, loaded or compiled for the cache;
 * with the op layer's label, which goes into the entries they write.
 */
#ifndef KVJIT_LOADER_H
#define KVJIT_LOADER_H

#include "entry.h"
#include "key.h"
#include "kvjit_tools.h"
#include "precompile.h"
#include "request.h"

/** The target and key of @p req built for its desc->arch (the current device's when it names none). */
kvjit_status kvjit_request_build_key(const kvjit_request *req, kvjit_key_target *target, kvjit_key *key);

/** kvjit_program_get() for an op: @p label (may be NULL) goes into the entry it writes. */
kvjit_status kvjit_program_get_labeled(kvjit_context *ctx, kvjit_program **out, kvjit_origin *origin,
                                       const kvjit_program_desc *desc, const kvjit_entry_label *label);

/** kvjit_program_compile() for an op, with a label as above. */
kvjit_status kvjit_program_compile_labeled(kvjit_context *ctx, kvjit_origin *origin, const kvjit_program_desc *desc,
                                           const kvjit_entry_label *label);

/**
 * Where a compile-only lookup of @p desc would find its program, computing its key but fetching
 * and compiling nothing. For coverage checks (`kvjit cache check`, `prewarm -n`). With @p why
 * (optional), a program not found locally is explained as a lookup's miss would be (miss.h;
 * @p label names it).
 */
kvjit_status kvjit_program_find(kvjit_context *ctx, const kvjit_program_desc *desc, const kvjit_entry_label *label,
                                kvjit_cached_at *where, kvjit_miss_info *why);

#endif
