/* The descriptors of the ops in this directory, for the registry (src/op_registry.c). */
#ifndef KVJIT_OPS_H
#define KVJIT_OPS_H

#include "op.h"

extern const kvjit_op kvjit_op_store_kv;    /* store_kv.c */
extern const kvjit_op kvjit_op_transfer_kv; /* transfer_kv.c */

#endif
