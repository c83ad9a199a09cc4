/*
 * The table of ops: adding an op is its template in kernel_src/, its descriptor in src/ops/, and
 * one line here. Everything generic (lookup, load, prepare, prewarm, manifests, the CLI's
 * expansion, the checkasm-like test over every op) reads this table.
 */
#include <string.h>

#include "op.h"
#include "ops.h"

const kvjit_op *const kvjit_ops[] = {
    &kvjit_op_store_kv,
    &kvjit_op_transfer_kv,
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
