/*
 * One kernel's program as an op plan describes it: a description (the op's template as the
 * source, its options, one kernel named by a name expression that carries the plan) and the
 * storage its strings point into. Every plan of an op has the same source, so plans of one op and
 * arch differ only in their kernel: the generic layer compiles many of them as one program
 * (bundle.c), and any one of them alone on a runtime miss.
 */
#ifndef KVJIT_OP_PROGRAM_H
#define KVJIT_OP_PROGRAM_H

#include <stddef.h>

#include "kvjit_tools.h"

/** Room for the longest kernel name expression an op writes, with its NUL. */
#define KVJIT_OP_MAX_KERNEL_NAME 256

/** desc points into the struct itself: fill it in place (kvjit_op_program_init()), never copy it. */
typedef struct kvjit_op_program {
  kvjit_program_desc desc; /* desc.kernels = kernels, kernels[0] = kernel */
  const char *kernels[1];
  char kernel[KVJIT_OP_MAX_KERNEL_NAME];
} kvjit_op_program;

/**
 * Fill @p out: program @p name of static @p source and @p options for @p arch, one kernel whose
 * name expression the caller writes into out->kernel afterwards.
 */
static inline void kvjit_op_program_init(kvjit_op_program *out, const char *name, const char *source,
                                         const char *const *options, size_t num_options, int arch) {
  kvjit_program_desc d = KVJIT_PROGRAM_DESC_INIT;
  d.name = name;
  d.source = source;
  d.options = options;
  d.num_options = num_options;
  d.kernels = out->kernels;
  d.num_kernels = 1;
  d.arch = arch;
  out->desc = d;
  out->kernels[0] = out->kernel;
  out->kernel[0] = '\0';
}

#endif
