/*
 * Bundles: many kernels of one source compiled as one NVRTC program, found again one kernel at a
 * time. A bundle is an ordinary entry (a program of N kernels, under its own key); each of its
 * kernels also gets an alias entry under the key of its own one-kernel program (entry.h), the
 * key a runtime miss of that kernel computes. Reading an alias reads and checks the bundle; an
 * alias whose bundle is gone or does not hold its kernel is a miss (the kernel is compiled alone
 * and its own entry replaces the alias). Format: cache/FORMAT.md.
 */
#ifndef KVJIT_BUNDLE_H
#define KVJIT_BUNDLE_H

#include <stddef.h>

#include "cache.h"
#include "entry.h"
#include "jit.h"
#include "key.h"
#include "kvjit.h"

/**
 * Whether a bundle holds the kernel of @p alias (view of an alias entry, @p a its payload): a
 * cubin for the alias's target (arch, suffix, NVRTC version), the same content digest (source,
 * options, headers, program name), @p count kernels as the alias says, and kernel a->index named
 * @p name and lowered to @p lowered as the alias's are.
 */
int kvjit_bundle_holds(const kvjit_entry_view *alias, const kvjit_entry_alias *a, const kvjit_key_target *target,
                       const kvjit_key *content, size_t count, const char *name, size_t name_len, const char *lowered,
                       size_t lowered_len);

/** Read @p alias's bundle entry (every check of a read) and kvjit_bundle_holds() it. */
int kvjit_bundle_entry_usable(kvjit_cache *cache, const kvjit_entry_view *alias, const kvjit_entry_alias *a);

/**
 * Write the alias entry of one-kernel program @p key (kernel @p name, lowered @p lowered, content
 * digest @p content, program @p program, built for cubin @p target), pointing at kernel
 * alias->index of bundle alias->bundle. KVJIT_ERR_IO (reason in the last error) when it is not on
 * disk afterwards, as for every publication.
 */
kvjit_status kvjit_bundle_write_alias(kvjit_cache *cache, const kvjit_program_label *label,
                                      const kvjit_key_target *target, const kvjit_key *key, const kvjit_key *content,
                                      const kvjit_entry_digests *digests, const char *program, const char *name,
                                      const char *lowered, const kvjit_entry_alias *alias);

/** The kernel of one member of a group compile (kvjit_program_compile_group()). */
typedef struct kvjit_group_member {
  const kvjit_program_label *label; /* the variant that asked for it (its alias entry says so) */
  kvjit_origin origin;              /* out: KVJIT_FROM_DISK / _MEMORY when it was cached, _COMPILE when built */
} kvjit_group_member;

/**
 * Compile for the disk cache the kernels of @p desc (kernels of one source, options, headers and
 * target), each as if asked alone: afterwards a lookup of the one-kernel program of any of them
 * is answered from the cache. Kernels already cached (their own entry or a usable alias) are
 * left alone; the rest are compiled as one program, the bundle (under the bundle's lock), and
 * each gets an alias (under its own lock). One kernel to build is compiled alone (an ordinary
 * entry), and so is every kernel for a PTX target. Nothing is loaded or kept in memory.
 * @param members desc->num_kernels entries, in desc->kernels order.
 * @return KVJIT_OK, or the bundle's failure: a caller that wants each kernel's own failure
 *         compiles them one by one then (kvjit_program_compile_labeled()).
 */
kvjit_status kvjit_program_compile_group(kvjit_context *ctx, const kvjit_program_desc *desc,
                                         kvjit_group_member *members);

/** kvjit_cache_list(), with aliases checked against their bundles when @p verify. */
kvjit_status kvjit_bundle_list(kvjit_context *ctx, int include_read_dirs, int verify, kvjit_cache_visit_fn visit,
                               void *user, uint64_t *bad);

#endif
