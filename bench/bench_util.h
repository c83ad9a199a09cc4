/*
 * Shared by the benchmarks: clocks, medians, the reference kernel's naming and split rule, the
 * embedded CUDA sources, and driver entry points the library's table does not carry.
 */
#ifndef KVJIT_BENCH_UTIL_H
#define KVJIT_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Embedded at build time from ref_store_kv.cuh and bench_kernels.cuh (see embed_cuh.py): the
 * store's reference and the empty kernels. */
extern const char bench_src_ref_store_kv[];
extern const char bench_src_kernels[];
/* From ref_transfer_kv.cuh: SGLang's hierarchical-cache transfer algorithm (bench_ops' peer). */
extern const char bench_src_ref_transfer_kv[];
/* kvjit's own transfer_kv template (store_kv_cache.cuh + layout.cuh + transfer_kv.cuh, as the library joins it). */
extern const char bench_src_transfer_kv[];

/** Monotonic clock, nanoseconds. */
uint64_t bench_now_ns(void);

/** Summary of a sample: median, minimum, maximum. */
typedef struct bench_stats {
  double median, min, max;
  size_t count;
} bench_stats;

/** Sorts @p values in place and summarises them (all zero when @p count is 0). */
bench_stats bench_summarize(double *values, size_t count);

/** The reference's split rule: 4 if row % 2048 == 0, 2 if % 1024 == 0, else 1. */
int bench_ref_split(int64_t row_bytes);

/** Name expression of a reference instantiation, e.g. "ref_store_kvcache<2048, 4, true, long long>". */
void bench_ref_kernel_name(char *out, size_t capacity, int64_t row_bytes, int split, int pdl, int index64);

/**
 * A driver entry point outside kvjit's table, through cuGetProcAddress_v2 of the libcuda the
 * library already loaded. NULL when it is not there.
 */
void *bench_cuda_proc(const char *symbol, int abi_version);

/**
 * Print "PROGRAM: line LINE: WHAT: CUDA_ERROR_NAME" and exit(2): the CUDA check of the benchmarks
 * (result is a CUresult; the name comes from cuGetErrorName of the loaded driver, "?" without one).
 */
void bench_die_cuda(const char *program, int result, const char *what, int line);

/** Evaluate a driver call; on failure bench_die_cuda() with BENCH_PROGRAM (define it first). */
#define CU(call)                                                                                                       \
  do {                                                                                                                 \
    int cu_res_ = (int)(call);                                                                                         \
    if (cu_res_ != 0) bench_die_cuda(BENCH_PROGRAM, cu_res_, #call, __LINE__);                                         \
  } while (0)

/** Parse a comma-separated list of positive integers; the count, or 0 on a bad list. */
size_t bench_parse_list(const char *text, int64_t *out, size_t capacity);

#endif
