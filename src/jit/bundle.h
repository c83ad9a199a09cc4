/*
 * Bundles: many kernels of one source compiled as one NVRTC program, found again one kernel at a
 * time. A bundle is an ordinary entry (a program of N kernels, under its own key); each of its
 * kernels also gets an alias entry under the key of its own one-kernel program (entry.h), the
 * key a runtime miss of that kernel computes. Reading an alias reads and checks the bundle; an
 * alias whose bundle is gone or does not hold its kernel is a miss (the kernel is compiled alone
 * and its own entry replaces the alias). Format: cache/FORMAT.md; alias entries: store/alias.h.
 */
#ifndef KVJIT_BUNDLE_H
#define KVJIT_BUNDLE_H

#include <stddef.h>

#include "context.h"
#include "entry.h"
#include "kvjit_tools.h"

/** The kernel of one member of a group compile (kvjit_program_compile_group()). */
typedef struct kvjit_group_member {
  const kvjit_entry_label *label; /* the variant that asked for it (its alias entry says so) */
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

#endif
