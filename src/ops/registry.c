/*
 * The table of ops, from ops.def: adding an op is its template in kernel_src/, its folder in
 * src/ops/, its section of kvjit.h, and one line in ops.def. Everything generic (lookup, load,
 * prepare, prewarm, manifests, the CLI's expansion, the checkasm-like test over every op) reads
 * this table.
 */
#include "registry.h"

#include <string.h>

#define KVJIT_OP(folder) extern const kvjit_op kvjit_op_##folder;
#include "ops.def"
#undef KVJIT_OP

const kvjit_op *const kvjit_ops[] = {
#define KVJIT_OP(folder) &kvjit_op_##folder,
#include "ops.def"
#undef KVJIT_OP
};
const size_t kvjit_num_ops = sizeof kvjit_ops / sizeof kvjit_ops[0];

const kvjit_op *kvjit_op_of(const kvjit_op_info *info) {
  for (size_t i = 0; i < kvjit_num_ops; i++)
    if (info == &kvjit_ops[i]->info) return kvjit_ops[i];
  return NULL;
}

size_t kvjit_op_count(void) { return kvjit_num_ops; }

const kvjit_op_info *kvjit_op_get(size_t index) { return index < kvjit_num_ops ? &kvjit_ops[index]->info : NULL; }

const kvjit_op_info *kvjit_op_find(const char *name) {
  if (name == NULL) return NULL;
  for (size_t i = 0; i < kvjit_num_ops; i++)
    if (strcmp(kvjit_ops[i]->info.name, name) == 0) return &kvjit_ops[i]->info;
  return NULL;
}
