/*
 * bench_overlap's sweep of launch shapes (issue 29: what a host-link copy's shape costs the GEMM
 * beside it): kvjit's own transfer_kv template (kernel_src/transfer_kv.cuh, embedded as the
 * library joins it) instantiated with the CTAs, threads per CTA, accesses per lane, PDL and
 * cache-streaming mode a shape names, for flat caches, and launched on the cell's own arguments;
 * and a control that only holds SMs (bench_kernels.cuh's bench_spin).
 */
#ifndef KVJIT_BENCH_OVERLAP_SHAPES_H
#define KVJIT_BENCH_OVERLAP_SHAPES_H

#include "gpu_util.h"
#include "kvjit.h"

typedef struct overlap_shape {
  char name[40]; /* as given */
  int spin; /* 1: bench_spin on ctas x threads, for as long as kvjit's default copy of the cell; 2: bench_spin_fat */
  int ctas, threads;
  int cpl;    /* accesses per lane per slice of each of K and V (in flight: 2 x cpl x 16 B) */
  int pdl;    /* the template's Pdl (1: trigger at the start, 2: when the CTA is done) and the PDL attribute */
  int stream; /* the template's Stream: 0 plain, 1 .cs */
} overlap_shape;

/** Parse "CTAS:THREADS:CPL:PDL:STREAM", "spin:CTAS:THREADS" or "spinfat:CTAS:THREADS"; 0 when it is not one. */
int overlap_shape_parse(const char *spec, overlap_shape *out);

/** A shape made for one cell: its kernel (NULL: spin), its split and lanes, its registers. */
typedef struct overlap_kernel {
  const overlap_shape *shape;
  const kvjit_kernel *kernel;
  int split, lanes, regs, local_bytes;
  unsigned long long spin_ns;
} overlap_kernel;

/**
 * Compile every shape of @p shapes for rows of @p row bytes (K = V, 16-byte accesses) and int64 or
 * int32 ids, in one program; a shape the row does not take (accesses per lane not dividing it) is
 * left with kernel NULL and split 0. @return 0 on failure (the compiler's log printed).
 */
int overlap_kernels_make(kvjit_context *ctx, const overlap_shape *shapes, int n, int64_t row, int index64,
                         overlap_kernel *out);

/** Launch one shape's copy of @p a (flat caches) on @p stream. */
kvjit_status overlap_kernel_launch(const overlap_kernel *k, const kvjit_transfer_kv_args *a, CUstream stream);

#endif
