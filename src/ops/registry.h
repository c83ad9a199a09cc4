/*
 * The registry: the table of every op (ops.def), which everything that iterates all ops reads
 * (the public kvjit_op_* and kvjit_variant_* calls, the CLI through them, the registry-driven
 * tests). The layers below it never see it.
 */
#ifndef KVJIT_REGISTRY_H
#define KVJIT_REGISTRY_H

#include <stddef.h>

#include "descriptor.h"
#include "kvjit_tools.h"

/**
 * The key families (fast_map.h): KVJIT_FAMILY_<folder> is its op's line of ops.def, 1 on; the op's
 * folder is compiled with it as KVJIT_OP_FAMILY (src/ops/meson.build counts the same lines).
 */
enum kvjit_op_family {
  KVJIT_FAMILY_UNUSED = KVJIT_FAMILY_NONE,
#define KVJIT_OP(folder) KVJIT_FAMILY_##folder,
#include "ops.def"
#undef KVJIT_OP
  KVJIT_FAMILY_COUNT
};

extern const kvjit_op *const kvjit_ops[];
extern const size_t kvjit_num_ops;

/** The op of a public info pointer, or NULL when it is not one of the registry's. */
const kvjit_op *kvjit_op_of(const kvjit_op_info *info);

#endif
