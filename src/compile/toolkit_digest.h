/*
 * The identity of the toolkit's headers in keys: XXH3-128 over every file of its header dirs
 * (relative path and contents, in sorted order), computed once per process.
 *
 * Why the whole tree and not the closure of what a program includes: the toolkit's own headers
 * pick files through macros (thrust's `#include __THRUST_DEVICE_SYSTEM_..._HEADER`, 95 computed
 * includes in CUDA 13.0) and test for files with macro-wrapped __has_include (CCCL's
 * _CCCL_HAS_INCLUDE), which a scan cannot follow; and no single version number names the tree
 * (here nvrtc 13.0.88, cuda-runtime 13.0.96 and cuda-cccl 13.0.85 headers side by side). Toolkit
 * files are taken as unchanging while a process runs.
 */
#ifndef KVJIT_TOOLKIT_DIGEST_H
#define KVJIT_TOOLKIT_DIGEST_H

#include "key.h"
#include "kvjit_tools.h"

/** Digest of the header dirs @p dirs (either may be ""; the second is skipped inside the first). */
kvjit_status kvjit_toolkit_digest(const char *const dirs[2], kvjit_key *out);

/** How long the digest took and how many files and bytes it read (0 before it ran). */
void kvjit_toolkit_digest_cost(double *ms, size_t *files, size_t *bytes);

#endif
