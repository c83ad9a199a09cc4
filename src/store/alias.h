/*
 * Alias entries: a bundle (many kernels of one source compiled as one program, jit/bundle.c) is an
 * ordinary entry under its own key; each of its kernels also gets an alias entry under the key of
 * its own one-kernel program (entry.h), the key a runtime miss of that kernel computes. Reading an
 * alias reads and checks the bundle; an alias whose bundle is gone or does not hold its kernel is
 * a miss. Format: cache/FORMAT.md.
 */
#ifndef KVJIT_ALIAS_H
#define KVJIT_ALIAS_H

#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "entry.h"
#include "key.h"
#include "kvjit_tools.h"

/**
 * Whether a bundle holds the kernel of @p alias (view of an alias entry, @p a its payload): a
 * cubin for the alias's target (arch, suffix, NVRTC version), the same content digest (source,
 * options, headers, program name), @p count kernels as the alias says, and kernel a->index named
 * @p name and lowered to @p lowered as the alias's are.
 */
int kvjit_alias_bundle_holds(const kvjit_entry_view *alias, const kvjit_entry_alias *a, const kvjit_key_target *target,
                             const kvjit_key *content, size_t count, const char *name, size_t name_len,
                             const char *lowered, size_t lowered_len);

/** Read @p alias's bundle entry (every check of a read) and kvjit_alias_bundle_holds() it. */
int kvjit_alias_usable(kvjit_cache *cache, const kvjit_entry_view *alias, const kvjit_entry_alias *a);

/**
 * Write the alias entry of one-kernel program @p key (kernel @p name, lowered @p lowered, content
 * digest @p content, program @p program, built for cubin @p target), pointing at kernel
 * alias->index of bundle alias->bundle. KVJIT_ERR_IO (reason in the last error) when it is not on
 * disk afterwards, as for every publication.
 */
kvjit_status kvjit_alias_write(kvjit_cache *cache, const kvjit_entry_label *label, const kvjit_key_target *target,
                               const kvjit_key *key, const kvjit_key *content, const kvjit_entry_digests *digests,
                               const char *program, const char *name, const char *lowered,
                               const kvjit_entry_alias *alias);

/** kvjit_cache_visit() of the cache's entries, with aliases checked against their bundles when @p verify. */
kvjit_status kvjit_alias_list(kvjit_cache *cache, int include_read_dirs, int verify, kvjit_cache_visit_fn visit,
                              void *user, uint64_t *bad);

#endif
