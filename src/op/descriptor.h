/*
 * What an op is: a descriptor (its public info and fields, its rules, plan, program, geometry and
 * request key) that an op's folder (src/ops/NAME/) fills and the generic op layer runs.
 *
 * A request is the variant's values (kvjit_variant order, values[0] = arch) plus a batch class;
 * its key (the op's key hook, family in the top byte) is what the hot path looks up, so a hit
 * needs no plan at all: the plan is made once, on the miss that loads the kernel.
 */
#ifndef KVJIT_DESCRIPTOR_H
#define KVJIT_DESCRIPTOR_H

#include <stddef.h>
#include <stdint.h>

#include "fast_map.h"
#include "kvjit_tools.h"
#include "op_program.h"

/** How a loaded variant is launched: the parts of its plan the hot path needs. */
typedef struct kvjit_op_geometry {
  uint32_t block;       /* threads per block */
  uint32_t group_shift; /* log2 of the lanes of one group */
  uint32_t split;       /* units (lane-group tasks) per item */
  uint32_t items;       /* items each group takes: 1 or 2 */
  int pdl;              /* the PDL launch attribute (tied to the wait compiled into the kernel) */
  uint32_t loops;       /* 1: the kernel strides over its units, so a launch may cap its grid */
} kvjit_op_geometry;

/** Bit @p field of a `given` mask: the fields a manifest line wrote. */
#define KVJIT_OP_GIVEN(field) (UINT64_C(1) << (field))
/** A variant built in memory (an op's struct, the CLI): every field counts as given. */
#define KVJIT_OP_ALL_GIVEN (~UINT64_C(0))

/** Largest plan struct of any op (the generic layer keeps plans on the stack). */
#define KVJIT_OP_MAX_PLAN 256

typedef struct kvjit_op {
  kvjit_op_info info; /* public part: name, summary, fields (fields[0] is arch), classes; first member */
  unsigned family;         /* its key family (fast_map.h): its line in the registry, ops/ops.def */
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
  /**
   * Optional (NULL: the op takes no cache layouts): the static part of @p count cache layouts (the
   * op's order; NULL entries flat) into checked @p values, and the access widths their strides
   * allow with well-aligned pointers, as a call with those layouts keys them.
   */
  kvjit_status (*set_layouts)(int64_t *values, const kvjit_layout *const *layouts, size_t count);
  /** The exact key of (checked @p values with values[0] the arch, @p batch_class). */
  kvjit_fast_key (*key)(const int64_t *values, int batch_class);
} kvjit_op;

#endif
