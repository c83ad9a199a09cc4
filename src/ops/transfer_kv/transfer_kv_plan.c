/*
 * transfer_kv plans and their programs (see transfer_kv_plan.h).
 *
 * The choice, per batch class and link (first cut; bench/bench_ops measures it on the GPU
 * against the bounds, and the rules are retuned from its tables):
 *  - vector width: the widest power of two <= 16 B dividing every stride, slice and pointer;
 *  - split and lanes: as store_kv_cache's (op/rows.h: kvjit_rows_auto_split, kvjit_rows_lanes): the smallest
 *    split whose slices need at most 32 lanes x chunks_per_lane vectors;
 *  - device to device: one access per lane (all of a lane's loads issued before its stores, as in
 *    the store); at batches > 32768 a group of <= 8 lanes moves two items, for the same wave
 *    reason as the store's pairing;
 *  - over the host link (either side pinned host memory): two accesses per lane from batch 65 up,
 *    half the lane groups for the same bytes in flight: the link, not the SMs, is the bound, and
 *    fewer, longer-lived threads leave the SMs to the kernels running beside a transfer.
 *  - PDL: auto is on from sm_90, as for the store.
 */
#include "transfer_kv_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

/* The op's template (kernel_src/), embedded at build time by this folder's meson.build. */
extern const char kvjit_src_transfer_kv[];

int kvjit_transfer_kv_batch_class(int64_t batch) {
  if (batch <= 64) return KVJIT_TRANSFER_KV_CLASS_SMALL;
  if (batch <= 32768) return KVJIT_TRANSFER_KV_CLASS_MID;
  return KVJIT_TRANSFER_KV_CLASS_LARGE;
}

/* Target vector accesses per lane per slice: the rule above. */
static int chunks_per_lane(int host_link, int batch_class) {
  return host_link && batch_class != KVJIT_TRANSFER_KV_CLASS_SMALL ? 2 : 1;
}

kvjit_status kvjit_transfer_kv_plan_make(kvjit_transfer_kv_plan *out, int arch, int64_t k_row_bytes,
                                         int64_t v_row_bytes, int vec, kvjit_index_type index_type,
                                         kvjit_pdl_mode pdl, int split, kvjit_location src, kvjit_location dst,
                                         int table, int batch_class) {
  if (batch_class < 0 || batch_class >= KVJIT_TRANSFER_KV_CLASSES) {
    return kvjit_fail(KVJIT_ERR_INTERNAL, "transfer_kv: batch class %d out of range", batch_class);
  }
  if (pdl == KVJIT_PDL_ON && arch < 90) {
    return kvjit_fail(KVJIT_ERR_UNSUPPORTED, "pdl: on needs sm_90 or newer, the target is sm_%d", arch);
  }
  const int host_link = src == KVJIT_LOCATION_HOST || dst == KVJIT_LOCATION_HOST;
  const int cpl = chunks_per_lane(host_link, batch_class);
  vec = kvjit_rows_vec_of((uint64_t)vec | (uint64_t)k_row_bytes | (uint64_t)v_row_bytes);
  if (split == 0) {
    split = kvjit_rows_auto_split(k_row_bytes, v_row_bytes, vec, cpl);
  } else {
    if (k_row_bytes % split != 0) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "split: %d does not divide k_row_bytes %lld", split,
                        (long long)k_row_bytes);
    }
    if (v_row_bytes % split != 0) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "split: %d does not divide v_row_bytes %lld", split,
                        (long long)v_row_bytes);
    }
    vec = kvjit_rows_vec_of((uint64_t)vec | (uint64_t)(k_row_bytes / split) | (uint64_t)(v_row_bytes / split));
  }
  const int64_t widest = k_row_bytes > v_row_bytes ? k_row_bytes : v_row_bytes;
  memset(out, 0, sizeof *out);
  out->arch = arch;
  out->k_row_bytes = k_row_bytes;
  out->v_row_bytes = v_row_bytes;
  out->split = split;
  out->vec = vec;
  out->lanes = kvjit_rows_lanes(widest / split / vec, cpl);
  out->block = KVJIT_TRANSFER_KV_BLOCK;
  const int one_access = (widest / split / vec + out->lanes - 1) / out->lanes <= 1;
  out->items = !host_link && batch_class == KVJIT_TRANSFER_KV_CLASS_LARGE && out->lanes <= 8 && one_access ? 2 : 1;
  out->index64 = index_type == KVJIT_INDEX_INT64;
  out->pdl = pdl == KVJIT_PDL_AUTO ? arch >= 90 : pdl == KVJIT_PDL_ON;
  out->table = table != 0;
  out->host_link = host_link;
  return KVJIT_OK;
}

int kvjit_transfer_kv_kernel_name(const kvjit_transfer_kv_plan *plan, char *out, size_t capacity) {
  /* The template's arguments in its order (kernel_src/transfer_kv.cuh). */
  int n = snprintf(out, capacity, KVJIT_TRANSFER_KV_KERNEL "<%lld,%lld,%d,%d,%d,%d,%d,%d,%d,%d>",
                   (long long)plan->k_row_bytes, (long long)plan->v_row_bytes, plan->split, plan->vec, plan->lanes,
                   plan->block, plan->items, plan->index64 ? 1 : 0, plan->pdl ? 1 : 0, plan->table ? 1 : 0);
  return n < 0 || (size_t)n >= capacity ? -1 : n;
}

/* -minimal: as the store's (store_kv_plan.c). */
static const char *const transfer_kv_options[] = {"-std=c++17", "-minimal"};

kvjit_status kvjit_transfer_kv_program(const kvjit_transfer_kv_plan *plan, kvjit_op_program *out) {
  /* The name shows in `kvjit cache ls` and is part of the key: keep it stable. */
  kvjit_op_program_init(out, "kvjit_transfer_kv.cu", kvjit_src_transfer_kv, transfer_kv_options,
                        sizeof transfer_kv_options / sizeof transfer_kv_options[0], plan->arch);
  if (kvjit_transfer_kv_kernel_name(plan, out->kernel, sizeof out->kernel) < 0) {
    return kvjit_fail(KVJIT_ERR_INTERNAL, "transfer_kv: kernel name longer than %d bytes",
                      KVJIT_OP_MAX_KERNEL_NAME - 1);
  }
  return KVJIT_OK;
}
