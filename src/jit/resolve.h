/*
 * Reading a key's entry as a runtime lookup resolves it: dir by dir, an entry of its own or an
 * alias whose bundle holds its kernel (the bundle then a program of the context's table, read
 * once per context), then the remote tier.
 */
#ifndef KVJIT_RESOLVE_H
#define KVJIT_RESOLVE_H

#include <stdint.h>

#include "context.h"
#include "entry.h"
#include "key.h"
#include "kvjit_tools.h"
#include "program.h"

/**
 * Read @p key's entry (*file, freed by the caller; @p view into it): the local dirs in order, then
 * (@p remote) the remote tier, the first usable one. With @p bundle, an alias's bundle becomes a
 * program of the table and *bundle points at it; without, the bundle's entry is only checked. An
 * alias that fails is passed over (a dir after it may have the kernel's own entry) and, found
 * nowhere, is a miss. KVJIT_ERR_NOT_FOUND when nothing usable is there.
 */
kvjit_status kvjit_resolve_entry(kvjit_context *ctx, const kvjit_key *key, uint8_t **file, kvjit_entry_view *view,
                                 kvjit_program **bundle, int remote);

/**
 * 1 when the disk cache (or the remote tier) has a usable entry for @p key: its own, or an alias
 * whose bundle is there and holds its kernel.
 */
int kvjit_resolve_usable(kvjit_context *ctx, const kvjit_key *key);

#endif
