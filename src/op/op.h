/*
 * The generic op layer, the same for every op and knowing none: the miss path that plans, loads
 * and publishes a variant for lock-free lookups, prepare, the launch, the call path after an op's
 * validation, the bad-slot counters and the op statistics. Value rules and manifest lines are
 * variant.c, prewarm is op_prewarm.c; an op's own folder (src/ops/NAME/) validates its call into a
 * request and calls these; the registry (src/ops/) lists the ops.
 */
#ifndef KVJIT_OP_H
#define KVJIT_OP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "context.h"
#include "descriptor.h"
#include "driver.h"
#include "fast_map.h"
#include "kvjit_tools.h"
#include "program.h"

/** Contexts per entry whose CUfunction of the kernel it remembers (a process of 8 GPUs). */
#define KVJIT_OP_FUNCTION_SLOTS 8

/** The kernel's CUfunction in one context: ctx is 1 + its cuCtxGetId, 0 while free, ~0 while set. */
typedef struct kvjit_op_function {
  _Atomic unsigned long long ctx;
  _Atomic(CUfunction) fn;
} kvjit_op_function;

/** What a hit returns: owned by the context's tables; immutable but for the function cache. */
typedef struct kvjit_op_entry {
  const kvjit_kernel *kernel;
  kvjit_op_geometry geo;
  /* A launch through a CUfunction costs the driver ~230 ns less than through the CUkernel (the
   * H200 host, driver 580; bench_ops' host rows, raw_cuFunction): kvjit_op_launch() fills them. */
  kvjit_op_function functions[KVJIT_OP_FUNCTION_SLOTS];
} kvjit_op_entry;

/** An entry of @p kernel with no function remembered (its geometry left to the caller). */
static inline void kvjit_op_entry_init(kvjit_op_entry *e, const kvjit_kernel *kernel) {
  e->kernel = kernel;
  for (int i = 0; i < KVJIT_OP_FUNCTION_SLOTS; i++) {
    atomic_init(&e->functions[i].ctx, 0);
    atomic_init(&e->functions[i].fn, NULL);
  }
}

/**
 * What a context holds for its ops (its extension slot, context.h): the table of loaded variants
 * (request key -> entry) and the set of variants already written to the manifest (a table of its
 * own: a marker can never stand for a kernel).
 */
typedef struct kvjit_op_tables {
  kvjit_fast_map *variants;
  kvjit_fast_map *recorded;
  _Atomic int overflow_logged; /* the first overflow of `variants` was logged */
} kvjit_op_tables;

/** Make a context's op tables (kvjit_context_extension()'s create). */
kvjit_status kvjit_op_tables_create(void **out);
/** Free them and every op entry they hold (its destroy). Accepts NULL. */
void kvjit_op_tables_destroy(void *tables);

/** The op tables of @p ctx, made on first use; NULL when out of memory (last error set). */
static inline kvjit_op_tables *kvjit_op_tables_of(kvjit_context *ctx) {
  return (kvjit_op_tables *)kvjit_context_extension_get(ctx, kvjit_op_tables_create, kvjit_op_tables_destroy);
}

/** A plan buffer: op plans are plain structs of ints and pointers. */
typedef union kvjit_op_plan_buffer {
  unsigned char bytes[KVJIT_OP_MAX_PLAN];
  int64_t align_i;
  void *align_p;
  long double align_f;
} kvjit_op_plan_buffer;

/** The plan of checked @p values for their arch (values[0] > 0) and @p batch_class, zeroed first so
 *  that plans compare with memcmp. */
kvjit_status kvjit_op_make_plan(const kvjit_op *op, const int64_t *values, int batch_class, kvjit_op_plan_buffer *plan);

/**
 * The miss path: check @p values (values[0] = the device's arch), plan @p batch_class, get the
 * program through the labeled loader, publish its entry under @p key and record the variant's
 * manifest line once. Two threads missing at once load once; both get the same entry.
 */
kvjit_status kvjit_op_load(kvjit_context *ctx, const kvjit_op *op, const int64_t *values, int batch_class,
                           const kvjit_fast_key *key, const kvjit_op_entry **out);

/** The entry of a request: lock-free lookup, kvjit_op_load() on a miss. */
static inline kvjit_status kvjit_op_find_entry(kvjit_context *ctx, const kvjit_op *op, const int64_t *values,
                                               int batch_class, const kvjit_op_entry **out) {
  kvjit_op_tables *tables = kvjit_op_tables_of(ctx);
  if (tables == NULL) return KVJIT_ERR_OUT_OF_MEMORY; /* the detail is in the last error */
  const kvjit_fast_key key = op->key(values, batch_class);
  const kvjit_op_entry *e = kvjit_fast_map_lookup(tables->variants, &key);
  if (e != NULL) {
    *out = e;
    return KVJIT_OK;
  }
  return kvjit_op_load(ctx, op, values, batch_class, &key, out);
}

/** Load the kernels of classes @p first .. @p last (values[0]: the device's arch). */
kvjit_status kvjit_op_prepare(kvjit_context *ctx, const kvjit_op *op, const int64_t *values, int first, int last);

/** Blocks of a launch of @p units_items items (x layers in grid.y by the caller); 0 past 2^31 - 1. */
uint64_t kvjit_op_blocks(const kvjit_op_geometry *geo, int64_t items);

/** cuLaunchKernelEx of an entry with one by-value parameter struct, in the current CUDA context. */
kvjit_status kvjit_op_launch(const kvjit_driver *drv, const kvjit_op_entry *entry, uint64_t blocks, unsigned grid_y,
                             struct CUstream_st *stream, void *params);

/**
 * A call that cannot go on (batch 0, no driver, no context) reports the rules between its
 * variant's fields first, as it did before it needed a driver: those errors name the argument.
 * Else @p status with the error detail it came with (KVJIT_OK: none).
 */
kvjit_status kvjit_op_variant_error_or(const kvjit_op *op, const int64_t *values, kvjit_status status);

/**
 * The hot path after an op's validation, the same for every op: the current device's arch into
 * values[0], the entry (lock-free lookup, a load on a miss), the grid, the launch. @p batch 0
 * launches nothing (the variant's rules still checked); @p grid_y is the launch's grid.y;
 * @p max_blocks > 0 caps grid.x for a kernel that strides over its units (geometry.loops), and is
 * ignored for one that does not (each of its blocks must run).
 */
kvjit_status kvjit_op_call(kvjit_context *ctx, const kvjit_op *op, int64_t *values, int batch_class, int64_t batch,
                           unsigned grid_y, uint32_t max_blocks, struct CUstream_st *stream, void *params);

/**
 * An op's prepare after its validation: the kernels of @p batch_class (every class when @p batch
 * is 0) loaded for device 0's arch or the current context's, and the grid of @p batch checked.
 */
kvjit_status kvjit_op_prepare_call(kvjit_context *ctx, const kvjit_op *op, int64_t *values, int batch_class,
                                   int64_t batch);

/** 1 when kernel name @p name (canonical) is @p kernel or an instance of template @p kernel. */
int kvjit_op_is_instance(const char *name, const char *kernel);

/** Sum (and with @p reset zero) the op's counters over its programs loaded for the current device. */
kvjit_status kvjit_op_counters(kvjit_context *ctx, const kvjit_op *op, uint64_t *count, int reset);

#endif
