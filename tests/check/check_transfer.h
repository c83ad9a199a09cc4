/* transfer_kv's checks (check_transfer.c): its case, and what the bench driver's peers need of them. */
#ifndef KVJIT_TEST_CHECK_TRANSFER_H
#define KVJIT_TEST_CHECK_TRANSFER_H

#include "check.h"
#include "host_layouts.h"

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
  kvjit_dtype src_dtype, dst_dtype; /* both BYTES: a plain copy */
  kvjit_scale_kind scale;
  int64_t heads;                /* scale per head */
  int max_ctas;                 /* the call's CTA budget */
  /* SGLang's host layouts on the host side (issue 29): its view, and that of one layer */
  kvjit_host_layout host;       /* kind KVJIT_HOST_FLAT: none */
  kvjit_layout host_view;       /* the call's src_/dst_ k and v layout (one per side, shared) */
} transfer_case;

/** The public call's arguments for launch @p l of a case in world @p w (ids of set l->step % w->sets). */
void check_transfer_args(const void *c, const check_world *w, const check_launch *l, kvjit_transfer_kv_args *out);

#endif
