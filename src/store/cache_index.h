/*
 * The per-program index of a dir (cache_index.c): which keys hold the same program and kernels,
 * for explaining a miss (miss.h).
 */
#ifndef KVJIT_CACHE_INDEX_H
#define KVJIT_CACHE_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "cache_types.h"
#include "entry.h"
#include "key.h"
#include "kvjit_tools.h"

/**
 * The per-kernel index (cache_index.c): the id of the entries of one program and kernel list
 * (program name and kernel names as in the header), whatever their target, NVRTC or content.
 */
void kvjit_cache_index_id(const kvjit_entry_view *view, kvjit_key *out);
/** The same id from a program name and its canonical kernel names. */
void kvjit_cache_index_id_of(const char *program, size_t num_kernels, const char *const *kernels, kvjit_key *out);

/** Up to @p cap keys indexed under @p id in the local dirs, newest first (the writable dir's first). */
size_t kvjit_cache_index_keys(kvjit_cache *cache, const kvjit_key *id, kvjit_key *keys, size_t cap);

/** The header of @p key's entry in the first local dir that has a good one (no payload read, nothing
 *  moved: for explaining a miss). @p data is malloc'd. KVJIT_ERR_NOT_FOUND when none. */
kvjit_status kvjit_cache_read_header(kvjit_cache *cache, const kvjit_key *key, uint8_t **data,
                                     kvjit_entry_view *view);

#endif
