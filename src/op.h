/*
 * The op framework: what an op is (a descriptor: fields, rules, plan, source, geometry, key) and
 * the generic layer that does for every op what each would otherwise write by hand: load a
 * variant through the labeled loader and publish it for lock-free lookups, prepare and prewarm
 * over the batch classes, record manifest lines once, read and write them, count bad slots,
 * launch. An op's own file (src/ops/) validates its call arguments into a request and calls
 * these; the registry (op_registry.c) lists the ops.
 *
 * A request is the variant's values (kvjit_variant order, values[0] = arch) plus a batch class;
 * its key (the op's key hook, family in the top byte) is what the hot path looks up, so a hit
 * needs no plan at all: the plan is made once, on the miss that loads the kernel.
 */
#ifndef KVJIT_OP_H
#define KVJIT_OP_H

#include <stddef.h>
#include <stdint.h>

#include "driver.h"
#include "fast_table.h"
#include "jit.h"
#include "kvjit.h"
#include "op_program.h"

/** How a loaded variant is launched: the parts of its plan the hot path needs. */
typedef struct kvjit_op_geometry {
  uint32_t block;       /* threads per block */
  uint32_t group_shift; /* log2 of the lanes of one group */
  uint32_t split;       /* units (lane-group tasks) per item */
  uint32_t items;       /* items each group takes: 1 or 2 */
  int pdl;              /* the PDL launch attribute (tied to the wait compiled into the kernel) */
} kvjit_op_geometry;

/** What a hit returns: immutable, owned by the context's table. */
typedef struct kvjit_op_entry {
  const kvjit_kernel *kernel;
  kvjit_op_geometry geo;
} kvjit_op_entry;

/** Bit @p field of a `given` mask: the fields a manifest line wrote. */
#define KVJIT_OP_GIVEN(field) (UINT64_C(1) << (field))
/** A variant built in memory (an op's struct, the CLI): every field counts as given. */
#define KVJIT_OP_ALL_GIVEN (~UINT64_C(0))

/** Largest plan struct of any op (the generic layer keeps plans on the stack). */
#define KVJIT_OP_MAX_PLAN 256

typedef struct kvjit_op {
  kvjit_op_info info; /* public part: name, summary, fields (fields[0] is arch), classes; first member */
  kvjit_key_family family;
  size_t plan_size;        /* <= KVJIT_OP_MAX_PLAN; plans are compared with memcmp (zero their padding) */
  const char *kernel;      /* the kernel template's name: every kernel of the op is an instance of it */
  const char *oob_counter; /* its __device__ counter of skipped work (a uint64) */
  int max_arch;            /* the arch that stands for "any arch" in checks */
  /**
   * The rules between fields, with values already in range (the generic check did ranges and
   * words). Puts the values in canonical form. values[0] is the arch (0: any). @p given: the
   * fields a line wrote, or KVJIT_OP_ALL_GIVEN.
   */
  kvjit_status (*check)(int64_t *values, uint64_t given);
  /** Whether OPTIONAL field @p field is written in the line of (canonical) @p values. */
  int (*written)(const int64_t *values, size_t field);
  /** The plan of checked @p values for @p arch (> 0) and @p batch_class. */
  kvjit_status (*plan)(const int64_t *values, int arch, int batch_class, void *plan);
  /** The program of a plan: the op's template and the kernel the plan names (op_program.h). */
  kvjit_status (*program)(const void *plan, kvjit_op_program *out);
  /** Relative NVRTC time of a plan's kernel (prewarm cuts its shares by it); NULL: every plan 1. */
  unsigned (*compile_cost)(const void *plan);
  void (*geometry)(const void *plan, kvjit_op_geometry *out);
  /** The exact key of (checked @p values with values[0] the arch, @p batch_class). */
  kvjit_fast_key (*key)(const int64_t *values, int batch_class);
} kvjit_op;

/* ---- the registry (op_registry.c) ----------------------------------------------------------- */

extern const kvjit_op *const kvjit_ops[];
extern const size_t kvjit_num_ops;

/** The op of a public info pointer, or NULL when it is not one of the registry's. */
const kvjit_op *kvjit_op_of(const kvjit_op_info *info);

/* ---- values and lines (op_line.c) ----------------------------------------------------------- */

/** Ranges and words of every field, then op->check. Error messages name the field. */
kvjit_status kvjit_op_check_values(const kvjit_op *op, int64_t *values, uint64_t given);

/** Parse a manifest line into its op and checked values (see kvjit_variant_parse()). */
kvjit_status kvjit_op_parse_line(const char *line, const kvjit_op **op, int64_t *values);

/** The line of checked, canonical @p values. */
kvjit_status kvjit_op_format_line(const kvjit_op *op, const int64_t *values, char *out, size_t capacity);

/* ---- loading and launching (op.c) ----------------------------------------------------------- */

/** Compute capability of the calling thread's current CUDA context (a per-device cache behind it). */
kvjit_status kvjit_op_current_sm(const kvjit_driver *drv, int *sm);

/**
 * The miss path: check @p values (values[0] = the device's arch), plan @p batch_class, get the
 * program through the labeled loader, publish its entry under @p key and record the variant's
 * manifest line once. Two threads missing at once load once; both get the same entry.
 */
kvjit_status kvjit_op_load(kvjit_context *ctx, const kvjit_op *op, const int64_t *values, int batch_class,
                           kvjit_fast_key key, const kvjit_op_entry **out);

/** The entry of a request: lock-free lookup, kvjit_op_load() on a miss. */
static inline kvjit_status kvjit_op_find_entry(kvjit_context *ctx, const kvjit_op *op, const int64_t *values,
                                               int batch_class, const kvjit_op_entry **out) {
  kvjit_fast_key key = op->key(values, batch_class);
  const kvjit_op_entry *e = kvjit_fast_map_lookup(kvjit_context_fast_table(ctx)->variants, key);
  if (e != NULL) {
    *out = e;
    return KVJIT_OK;
  }
  return kvjit_op_load(ctx, op, values, batch_class, key, out);
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
 * launches nothing (the variant's rules still checked); @p grid_y is the launch's grid.y.
 */
kvjit_status kvjit_op_call(kvjit_context *ctx, const kvjit_op *op, int64_t *values, int batch_class, int64_t batch,
                           unsigned grid_y, struct CUstream_st *stream, void *params);

/**
 * An op's prepare after its validation: the kernels of @p batch_class (every class when @p batch
 * is 0) loaded for device 0's arch or the current context's, and the grid of @p batch checked.
 */
kvjit_status kvjit_op_prepare_call(kvjit_context *ctx, const kvjit_op *op, int64_t *values, int batch_class,
                                   int64_t batch);

/* ---- prewarm (op_prewarm.c) ------------------------------------------------------------------ */

/** Prewarm (kvjit_variant_prewarm()) of checked @p values. */
kvjit_status kvjit_op_prewarm(kvjit_context *ctx, const kvjit_op *op, const int64_t *values, unsigned *compiled,
                              unsigned *cached);

/** Where the kernels kvjit_op_prewarm() would build are cached: counted per distinct plan as found
 *  in a local dir, on the remote tier, or nowhere (a remote that cannot answer counts as nowhere).
 *  With @p why (optional), the first kernel not cached locally explained (miss.h); cause
 *  KVJIT_MISS_NONE when every kernel is. */
kvjit_status kvjit_op_locate(kvjit_context *ctx, const kvjit_op *op, const int64_t *values, unsigned *local,
                             unsigned *remote, unsigned *missing, kvjit_miss_info *why);

/** kvjit_variants_prewarm() of @p count checked variants: op @p ops[i], values @p values[i]. */
kvjit_status kvjit_op_prewarm_set(kvjit_context *ctx, const kvjit_op *const *ops, const int64_t *const *values,
                                  size_t count, unsigned part, unsigned parts, kvjit_prewarm_result *results);

/** 1 when kernel name @p name (canonical) is @p kernel or an instance of template @p kernel. */
int kvjit_op_is_instance(const char *name, const char *kernel);

/** Sum (and with @p reset zero) the op's counters over its programs loaded for the current device. */
kvjit_status kvjit_op_counters(kvjit_context *ctx, const kvjit_op *op, uint64_t *count, int reset);

#endif
