/*
 * kvjit prewarm's shares run on worker processes (prewarm_pool.c; shares.c reports them).
 *
 * The variants' kernels are cut into shares (kvjit_variants_prewarm()); each share is compiled as
 * few NVRTC programs as possible. Shares run in worker processes, not threads: NVRTC 13.0
 * serializes the compiles of one process on a host with a GPU (8 threads took 242 ms for what one
 * took 240 ms, 16 processes did 16 compiles in 190 ms; 96 variants for 3 archs, 16 cores: 0.60 s
 * on 16 processes, 1.3 s on 16 threads; bench/BASELINE.md, "Prewarm in worker processes"). A worker
 * that crashes costs its own share, not the run.
 */
#ifndef KVJIT_CLI_PREWARM_POOL_H
#define KVJIT_CLI_PREWARM_POOL_H

#include "cli.h"
#include "shares.h"

/* Runs every share: in this process (with @p ctx) for one job, else on up to @p jobs worker
 * processes. A variant of a share whose worker died is failed if any of its kernels is missing. */
void prewarm_run_shares(prewarm_run *run, kvjit_context *ctx, long jobs);

#endif
