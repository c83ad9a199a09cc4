/*
 * A context's writes to its caches and its compiles: an entry published (disk, then the remote
 * tier), NVRTC run for a miss under the context's compile policy (KVJIT_COMPILE), and what a
 * compile that is not on disk means to its caller.
 */
#ifndef KVJIT_PUBLISH_H
#define KVJIT_PUBLISH_H

#include "compile.h"
#include "context.h"
#include "entry.h"
#include "key.h"
#include "kvjit_tools.h"
#include "request.h"

/**
 * Write a payload to the disk cache, and to the remote tier. KVJIT_ERR_IO (reason in the last
 * error) when it is not on disk afterwards: a runtime lookup carries on memory-only, a prewarm
 * reports the failure. A compile kept in memory on purpose (@p publishable 0: after a
 * state-leaking one) is KVJIT_OK: it is counted.
 */
kvjit_status kvjit_context_publish(kvjit_context *ctx, const kvjit_entry_label *label, const kvjit_key_target *target,
                                   const kvjit_key *key, const kvjit_key *content, const kvjit_entry_digests *digests,
                                   const char *program,
                                   size_t num_kernels, const char *const *kernels, const uint8_t *payload,
                                   size_t payload_len, const char *const *lowered, int publishable);

/**
 * NVRTC for @p req, counted and logged, its entry written under @p key when it may be; @p published
 * is KVJIT_ERR_IO (reason in the last error) when it compiled but is not on disk. Under
 * KVJIT_COMPILE=never a miss is KVJIT_ERR_NOT_CACHED; under warn it is logged. With @p explain
 * (a lookup's miss, not a prewarm's build) the miss is explained first (miss.h): logged once,
 * kept, counted by cause, and named in KVJIT_COMPILE=never's error.
 */
kvjit_status kvjit_context_compile(kvjit_context *ctx, const kvjit_request *req, const kvjit_entry_label *label,
                                   const kvjit_key_target *target, const kvjit_key *key, int explain,
                                   struct kvjit_compiled *compiled, kvjit_status *published);

/**
 * kvjit_context_compile(), publishing only a payload of at most @p max_payload bytes: a larger one
 * is compiled and handed back but not written, and @p published is KVJIT_ERR_BUSY (a bundle too
 * large for the byte budget, which the caller cuts smaller).
 */
kvjit_status kvjit_context_compile_within(kvjit_context *ctx, const kvjit_request *req,
                                          const kvjit_entry_label *label, const kvjit_key_target *target,
                                          const kvjit_key *key, int explain, struct kvjit_compiled *compiled,
                                          kvjit_status *published, size_t max_payload);

/** Why @p key of @p req is in no local cache dir, as a lookup's miss would be explained (miss.h). */
void kvjit_context_explain_key(kvjit_context *ctx, const kvjit_request *req, const kvjit_entry_label *label,
                               const kvjit_key_target *target, const kvjit_key *key, kvjit_miss_info *why);

/**
 * A compile's publication @p published as its caller's status: KVJIT_OK when it is on disk or the
 * cache is off by choice, else KVJIT_ERR_IO "REQ compiled but ..." (a prewarm reports it).
 */
kvjit_status kvjit_context_not_cached(kvjit_context *ctx, const kvjit_request *req, kvjit_status published);

#endif
