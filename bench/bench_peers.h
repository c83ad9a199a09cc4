/* The bench driver's peers of each op (bench_peers.c): what kvjit is timed against, cell by cell. */
#ifndef KVJIT_BENCH_PEERS_H
#define KVJIT_BENCH_PEERS_H

#include "check/check.h"

typedef struct bench_peer {
  const char *op;   /**< the op it stands beside */
  const char *impl; /**< its name in the CSV, e.g. "ref_reimpl" */
  /** Load what a cell needs; NULL when the peer does not apply to it (then it is left out). */
  void *(*prepare)(kvjit_context *ctx, const void *c, const check_world *w);
  /** Launch @p l of the cell (the same buffers, ids and stream as kvjit's launch @p l). */
  kvjit_status (*launch)(void *state, const void *c, const check_world *w, const check_launch *l);
} bench_peer;

extern const bench_peer bench_peers[];
extern const size_t bench_num_peers;

#endif
