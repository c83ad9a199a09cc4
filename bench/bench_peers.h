/*
 * The bench driver's peers of each op (bench_peers.c's table): what kvjit is timed against, cell
 * by cell, on the very buffers, ids and stream of kvjit's launch. A peer is either another way to
 * do the cell's work (section "cell": the reimplemented references, kvjit with a fixed split, the
 * unfused sequence, per-row copies) or a bound of it (section "bound": the same bytes with
 * consecutive slots, the same bytes as two plain copies).
 */
#ifndef KVJIT_BENCH_PEERS_H
#define KVJIT_BENCH_PEERS_H

#include "check/check.h"

typedef struct bench_peer {
  const char *op;      /**< the op it stands beside */
  const char *impl;    /**< its name in the CSV, e.g. "ref_reimpl" */
  const char *section; /**< "cell" (another implementation) or "bound" */
  /** 1 when the peer has a time for cell @p c: a pure function of the cell (bench_ops --list). */
  int (*applies)(const struct bench_peer *self, const void *c);
  /** Load and allocate what the cell needs, outside any capture; NULL when it cannot (left out). */
  void *(*prepare)(const struct bench_peer *self, kvjit_context *ctx, const void *c, const check_world *w);
  /** Launch @p l of the cell (the same buffers, ids and stream as kvjit's launch @p l). */
  kvjit_status (*launch)(void *state, const void *c, const check_world *w, const check_launch *l);
  /** Free what prepare() made (NULL: free()). */
  void (*release)(void *state);
  int max_launches; /**< launches per timing round at most (0: as kvjit's) */
  int stream_only;  /**< 1: timed on the stream only (host-bound work a graph would not show) */
  int arg;          /**< the peer's own setting: a fixed split, a block quota */
} bench_peer;

extern const bench_peer bench_peers[];
extern const size_t bench_num_peers;

/* ---- the peers' parts (bench_peers_store.c, bench_peers_transfer.c), for the table ------------------ */

/** A kvjit_kernel of @p source's @p kernel (nvrtc -std=c++17); 0 when it fails (printed). */
int bench_peer_kernels(kvjit_context *ctx, const char *name, const char *source, const char **kernels, int count,
                       const kvjit_kernel **out);

int store_peer_split(const bench_peer *self, const void *c);
void *store_peer_split_prepare(const bench_peer *self, kvjit_context *ctx, const void *c, const check_world *w);
kvjit_status store_peer_split_launch(void *state, const void *c, const check_world *w, const check_launch *l);
int store_peer_largest(const bench_peer *self, const void *c);
void *store_peer_consecutive_prepare(const bench_peer *self, kvjit_context *ctx, const void *c, const check_world *w);
kvjit_status store_peer_consecutive_launch(void *state, const void *c, const check_world *w, const check_launch *l);
kvjit_status store_peer_copy_launch(void *state, const void *c, const check_world *w, const check_launch *l);
int store_peer_fp8(const bench_peer *self, const void *c);
void *store_peer_unfused_prepare(const bench_peer *self, kvjit_context *ctx, const void *c, const check_world *w);
kvjit_status store_peer_unfused_launch(void *state, const void *c, const check_world *w, const check_launch *l);
void *store_peer_plain_fp8_prepare(const bench_peer *self, kvjit_context *ctx, const void *c, const check_world *w);
kvjit_status store_peer_plain_fp8_launch(void *state, const void *c, const check_world *w, const check_launch *l);
void *store_peer_plain_bf16_prepare(const bench_peer *self, kvjit_context *ctx, const void *c, const check_world *w);
kvjit_status store_peer_plain_bf16_launch(void *state, const void *c, const check_world *w, const check_launch *l);
void store_peer_release(void *state);

int transfer_peer_any(const bench_peer *self, const void *c);
void *transfer_peer_consecutive_prepare(const bench_peer *self, kvjit_context *ctx, const void *c, const check_world *w);
kvjit_status transfer_peer_consecutive_launch(void *state, const void *c, const check_world *w,
                                              const check_launch *l);
int transfer_peer_host(const bench_peer *self, const void *c);
void *transfer_peer_all_sms_prepare(const bench_peer *self, kvjit_context *ctx, const void *c, const check_world *w);
kvjit_status transfer_peer_all_sms_launch(void *state, const void *c, const check_world *w, const check_launch *l);
int transfer_peer_per_row(const bench_peer *self, const void *c);
void *transfer_peer_per_row_prepare(const bench_peer *self, kvjit_context *ctx, const void *c, const check_world *w);
kvjit_status transfer_peer_per_row_launch(void *state, const void *c, const check_world *w, const check_launch *l);
void transfer_peer_release(void *state);

#endif
