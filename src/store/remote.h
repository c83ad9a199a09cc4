/*
 * The remote cache tier: entries fetched from and pushed to HTTP servers (nginx with WebDAV PUT,
 * any WebDAV server, an object store behind an HTTP gateway) as `<url>/v2/<key>.kvjit`.
 *
 * It fails open: a remote that is down, slow, refuses or answers garbage costs at most one timeout,
 * then is skipped for a back-off period; nothing here is ever an error to the caller, and nothing
 * it returns is trusted: the cache checks fetched bytes exactly like a disk entry before use.
 * After a 401/403/429 on a PUT only writes back off; reads go on.
 */
#ifndef KVJIT_REMOTE_H
#define KVJIT_REMOTE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "key.h"
#include "kvjit_tools.h"

typedef struct kvjit_remote kvjit_remote;

typedef struct kvjit_remote_config {
  /** Base URLs separated by spaces or commas; a URL may end in "|ro" or "|rw" (overrides mode). */
  const char *urls;
  int read_write;              /**< 1: PUT compiles back; 0: read only */
  unsigned connect_timeout_ms; /**< per request */
  unsigned timeout_ms;         /**< per request, connection included */
  unsigned backoff_ms;         /**< how long a failing remote is skipped */
  const char *header;          /**< one "Name: value" header sent with every request (auth), or NULL */
  int log;                     /**< -1 warnings only, 0 silent, 1 verbose */
} kvjit_remote_config;

typedef struct kvjit_remote_counters {
  atomic_uint_fast64_t hits;     /**< GETs that returned an entry the cache accepted */
  atomic_uint_fast64_t misses;   /**< 404s */
  atomic_uint_fast64_t errors;   /**< refusals, 5xx, connection failures, truncated or bad entries */
  atomic_uint_fast64_t timeouts; /**< requests that ran out of time */
  atomic_uint_fast64_t skipped;  /**< requests not made because the remote was backing off */
  atomic_uint_fast64_t writes;   /**< entries PUT */
  atomic_uint_fast64_t bytes_in, bytes_out;
} kvjit_remote_counters;

/**
 * Set up the remotes of @p config. A URL that is not http(s) is skipped with a warning.
 * @return KVJIT_OK (with *out NULL when there is no usable URL), KVJIT_ERR_OUT_OF_MEMORY, or
 *         KVJIT_ERR_UNSUPPORTED when URLs are given but kvjit was built without libcurl.
 */
kvjit_status kvjit_remote_open(kvjit_remote **out, const kvjit_remote_config *config);
void kvjit_remote_close(kvjit_remote *remote);

/** 1 when at least one remote accepts writes. */
int kvjit_remote_writable(const kvjit_remote *remote);

/**
 * Fetch the entry of @p key from the first remote that has it.
 * @param data receives malloc'd bytes to check and free; @p from receives the remote's index for
 *        kvjit_remote_accept() / kvjit_remote_reject().
 * @return 1 with bytes, 0 when no remote had it (or all are backing off or failed).
 */
int kvjit_remote_get(kvjit_remote *remote, const kvjit_key *key, uint8_t **data, size_t *len, size_t *from);
/** The bytes of remote @p from were a good entry (counted as a hit). */
void kvjit_remote_accept(kvjit_remote *remote, size_t from);
/** The bytes of remote @p from failed the entry checks: counted as an error, never loaded. */
void kvjit_remote_reject(kvjit_remote *remote, size_t from, const char *why);

/**
 * The head of the entry of @p key from the first remote that serves it: a ranged GET of its first
 * @p max_bytes (the request a load makes, cut short: a server that answers HEAD but not GET has
 * nothing), for the caller to check as an entry's header.
 * @param data receives malloc'd bytes (free them); @p total the whole file's size when the server
 *        said it (Content-Range, or a whole body), else 0.
 * @return 1 with bytes, 0 when every remote that answered lacks it, -1 when none could say.
 */
int kvjit_remote_head(kvjit_remote *remote, const kvjit_key *key, size_t max_bytes, uint8_t **data, size_t *len,
                      uint64_t *total);

/** PUT an encoded entry to every writable remote (best effort, counted). */
void kvjit_remote_put(kvjit_remote *remote, const kvjit_key *key, const uint8_t *data, size_t len);

/**
 * The per-kernel hint of @p id (`<url>/v2/index/<id>`: the key last pushed for one program and kernel
 * list, cache/FORMAT.md) from the first remote that has one. Only explanations of misses read it;
 * it is not counted as an entry lookup.
 * @return 1 with *out, 0 when none had a well-formed one.
 */
int kvjit_remote_get_hint(kvjit_remote *remote, const kvjit_key *id, kvjit_key *out);

/** kvjit_remote_put(), and to each remote that took the entry, the hint of @p hint_id naming @p key
 *  (not counted as an entry write; a failure backs off like one). */
void kvjit_remote_put_indexed(kvjit_remote *remote, const kvjit_key *key, const uint8_t *data, size_t len,
                              const kvjit_key *hint_id);

const kvjit_remote_counters *kvjit_remote_get_counters(const kvjit_remote *remote);

/** The URLs as configured (for `kvjit info`), "" when none. Never holds the auth header. */
const char *kvjit_remote_urls(const kvjit_remote *remote);

#endif
