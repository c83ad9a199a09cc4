/*
 * The JIT layer's internals that ops (op.c, ops/) build on: programs, kernels, the context's op
 * tables (fast_table.h) and the manifest recorder. Public entry points are in kvjit.h.
 */
#ifndef KVJIT_JIT_H
#define KVJIT_JIT_H

#include <stdatomic.h>
#include <stdint.h>

#include "driver.h"
#include "key.h"
#include "kvjit.h"

/** kvjit_kernel.num_params before the driver was asked (cuKernelGetParamInfo, launch.c). */
#define KVJIT_KERNEL_PARAMS_UNKNOWN (-1)
/** ... and when it cannot say (a driver before CUDA 12.4). */
#define KVJIT_KERNEL_PARAMS_UNAVAILABLE (-2)

struct kvjit_kernel {
  CUkernel handle;                    /* context-independent handle from cuLibraryGetKernel */
  const struct kvjit_program *program;
  const char *name;                   /* canonical name expression */
  const char *lowered;                /* mangled name NVRTC produced */
  atomic_int num_params;              /* parameter count, or one of the two values above */
};

struct kvjit_fast_table;

/** The context's op tables (fast_table.h, op.c): loaded variants and the manifest's record set. */
struct kvjit_fast_table *kvjit_context_fast_table(const kvjit_context *ctx);

/**
 * What an op says about a program it asks for, recorded in the program's cache entry so that a
 * shipped cache can be audited (`kvjit cache ls`): the op's name and the variant as its manifest
 * line. Not part of the key: two variants that plan the same program share one entry.
 */
typedef struct kvjit_program_label {
  const char *op;      /* e.g. "store_kv_cache" */
  const char *variant; /* e.g. "store_kv_cache arch=90 k_row_bytes=256 ..." */
} kvjit_program_label;

/** kvjit_program_get() for an op: @p label (may be NULL) goes into the entry it writes. */
kvjit_status kvjit_program_get_labeled(kvjit_context *ctx, kvjit_program **out, kvjit_origin *origin,
                                       const kvjit_program_desc *desc, const kvjit_program_label *label);

/** kvjit_program_compile() for an op, with a label as above. */
kvjit_status kvjit_program_compile_labeled(kvjit_context *ctx, kvjit_origin *origin, const kvjit_program_desc *desc,
                                           const kvjit_program_label *label);

/**
 * Where a compile-only lookup of @p desc would find its program, computing its key but fetching
 * and compiling nothing: *where = 1 a local dir, 2 the remote tier, 0 nowhere, -1 not locally and
 * no remote could say. For coverage checks (`kvjit cache check`, `prewarm -n`). With @p why (optional),
 * a program not found locally is explained as a lookup's miss would be (miss.h; @p label names it).
 */
kvjit_status kvjit_program_find(kvjit_context *ctx, const kvjit_program_desc *desc, const kvjit_program_label *label,
                                int *where, kvjit_miss_info *why);

/** Device address of a __device__ variable of a loaded program, in the current CUDA context. */
kvjit_status kvjit_program_global(const kvjit_program *program, CUdeviceptr *ptr, size_t *bytes, const char *name);

/** Append one line (no newline needed) to the context's manifest file, if it has one. Best effort. */
void kvjit_context_record(kvjit_context *ctx, const char *line);

/** 1 when KVJIT_LOG / options.log asked for per-compile log lines. */
int kvjit_context_logging(const kvjit_context *ctx);

/** 1 unless KVJIT_LOG / options.log is 0: warnings (a degraded dir, a full op table) are printed. */
int kvjit_context_warnings(const kvjit_context *ctx);

#endif
