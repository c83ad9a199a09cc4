/*
 * The host's cost of one eager op call against a raw cuLaunchKernelEx of the very kernel, grid
 * and argument block that call launched (read back from a graph that captured it, with the handle
 * the graph's node names: kvjit launches a CUkernel), and against what might explain a gap:
 *
 *   raw_cuCtxGetDevice_launch   that raw launch after a cuCtxGetDevice (what a call that must find
 *                               the current device's arch pays at least);
 *   raw_cuFunction              the launch through the kernel's CUfunction in the current context
 *                               (cuKernelGetFunction) instead of the context-free CUkernel;
 *   raw_ctx_id_cuFunction       that, after cuStreamGetCtx + cuCtxGetId (what kvjit asks per call
 *                               to use a CUfunction it remembered per context safely: a CUkernel
 *                               runs in its stream's context, a CUfunction only in its own, and a
 *                               destroyed context's address may come back);
 *   raw_stream_ctx_cuFunction,  that after cuStreamGetCtx alone, and after cuStreamGetId alone
 *   raw_stream_id_cuFunction    (which of the two asks costs, and what a cache keyed by the
 *                               stream's id would pay instead).
 *
 * Timed four ways, so that a gap can be told from the way it was measured:
 *
 *   cpu            HOST_GROUPS groups of HOST_CALLS calls of one kind, timed per group (the row
 *                  of record since bench_store, issue 17);
 *   cpu_groups16   many groups of 16 calls: the launch queue never holds more than 16;
 *   cpu_call_sync10, cpu_call_sync125
 *                  every call timed alone, the kinds interleaved call by call (rotating, so each
 *                  kind takes each place after a sync equally), the stream synchronised every 10
 *                  or 125 calls: whether depth in the launch queue costs, and the paired
 *                  difference of neighbouring calls, which drift cannot move.
 *
 * The kinds alternate or rotate in every mode; the stream is synchronised between groups, untimed.
 */
#ifndef KVJIT_BENCH_HOST_COST_H
#define KVJIT_BENCH_HOST_COST_H

#include <cuda.h>
#include <stdio.h>

#include "bench_util.h"
#include "gpu_driver.h"
#include "kvjit.h"

#define HOST_CALLS 128
#define HOST_GROUPS 101

enum {
  HOST_KVJIT,
  HOST_RAW,
  HOST_RAW_CTX,
  HOST_RAW_FUNCTION,
  HOST_RAW_CTX_ID_FUNCTION,
  HOST_RAW_STREAM_CTX_FUNCTION,
  HOST_RAW_STREAM_ID_FUNCTION,
  HOST_KINDS
};
enum { HOST_MODE_GROUPS, HOST_MODE_GROUPS16, HOST_MODE_SYNC10, HOST_MODE_SYNC125, HOST_MODES };

/** The CSV impl of each kind and the CSV mode of each way of timing. */
extern const char *const host_kind_names[HOST_KINDS];
extern const char *const host_mode_names[HOST_MODES];

/** ns per call of one kind in one mode: the median and the 10th / 90th percentiles of its samples. */
typedef struct host_stat {
  bench_stats s;
  double p10, p90;
} host_stat;

typedef struct host_cost {
  host_stat ns[HOST_MODES][HOST_KINDS];
  /* Per-call modes: the median over rounds of (kind's call - the raw call of the same round). */
  double paired_ns[HOST_MODES][HOST_KINDS];
  int calls[HOST_MODES], samples[HOST_MODES]; /* calls per sample, samples per kind */
  double clock_ns;                            /* one read of the clock, subtracted from nothing */
  int node_kernel, node_function;             /* the captured node named a CUkernel / a CUfunction */
  int done;
} host_cost;

/** One eager call of the op, on arguments built once. */
typedef kvjit_status (*host_call_fn)(void *self);

/**
 * Measure the host cost of @p call on @p stream (with the PDL attribute when @p pdl): one call
 * first, one captured to read the kernel back, then every mode. @return 0 when measured (out->done).
 */
int host_cost_measure(const gpu_driver *drv, CUstream stream, host_call_fn call, void *self, int pdl,
                      host_cost *out);

/** The host cost in microseconds as the CSV's rows want it (median, min, max). */
bench_stats host_cost_us(const host_stat *h);

/** A compact table of @p h (every mode, every kind, ratios to the raw launch) for @p label. */
void host_cost_print(FILE *f, const char *label, const host_cost *h);

/** The CSV header of host_cost_csv() after the caller's own leading columns. */
#define HOST_COST_CSV_COLUMNS "mode,kind,calls,samples,ns_median,ns_p10,ns_p90,ns_min,ns_max,paired_ns,clock_ns,node"

/** One CSV line per mode and kind of @p h, each starting with @p lead (the caller's columns). */
void host_cost_csv(FILE *f, const char *lead, const host_cost *h);

#endif
