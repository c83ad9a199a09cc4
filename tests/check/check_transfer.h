/* transfer_kv's checks (check_transfer.c): its case, and what the bench driver's peers need of them. */
#ifndef KVJIT_TEST_CHECK_TRANSFER_H
#define KVJIT_TEST_CHECK_TRANSFER_H

#include "check.h"

typedef struct transfer_case {
  check_common common;
  const char *group;
  int64_t batch;
  int64_t k_row, v_row;         /* v_row 0: K only */
  int64_t src_pad, dst_pad;     /* slot stride = row + pad, both tensors */
  int64_t src_slots, dst_slots;
  int64_t src_index_stride, dst_index_stride;
  int layers;                   /* 0: one layer; N: tables of N */
  kvjit_location src, dst;
  kvjit_index_type index_type;
  int split;
  int bad;                      /* padding and out-of-range ids mixed in */
  int bad_layer;                /* tables: the layer whose dst_k entry is NULL (-1: none) */
} transfer_case;

/** The public call's arguments for launch @p l of a case in world @p w (ids of set l->step % w->sets). */
void check_transfer_args(const void *c, const check_world *w, const check_launch *l, kvjit_transfer_kv_args *out);

#endif
