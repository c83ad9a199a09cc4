/*
 * transfer_kv's call arguments -> a request (transfer_kv_op.h): every check that depends on more
 * than the variant, once per call, arithmetic only.
 */
#include <stddef.h>
#include <string.h>

#include "args.h"
#include "status.h"
#include "transfer_kv_op.h"

static kvjit_status check_location(const char *name, kvjit_location where) {
  if (where == KVJIT_LOCATION_DEVICE || where == KVJIT_LOCATION_HOST) return KVJIT_OK;
  return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                    "%s: must be KVJIT_LOCATION_DEVICE (0) or KVJIT_LOCATION_HOST (1), got %d", name, (int)where);
}

/* The pointers a call with batch > 0 dereferences (src_v and dst_v are both set or both NULL). */
static kvjit_status check_pointers(const kvjit_transfer_kv_args *a) {
  const struct {
    const char *name;
    const void *ptr;
  } needed[] = {{"src_k", a->src_k}, {"dst_k", a->dst_k}, {"src_indices", a->src_indices},
                {"dst_indices", a->dst_indices}};
  for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++) {
    if (needed[i].ptr == NULL) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: NULL with batch %lld", needed[i].name, (long long)a->batch);
    }
  }
  return KVJIT_OK;
}

static kvjit_status check_index_array(const char *name, const void *indices, uintptr_t bytes, int64_t stride,
                                      int64_t batch) {
  if (((uintptr_t)indices & (bytes - 1)) != 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: %p is not aligned to the %u bytes of an %s index", name,
                      indices, (unsigned)bytes, bytes == 8 ? "int64" : "int32");
  }
  const int64_t last = batch > 0 ? batch - 1 : 0;
  if (!kvjit_args_extent_fits(last, stride, 1) || !kvjit_args_extent_fits(last * stride, (int64_t)bytes, (int64_t)bytes)) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: stride %lld x batch %lld overflows a 64-bit offset", name,
                      (long long)stride, (long long)batch);
  }
  return KVJIT_OK;
}

kvjit_status kvjit_transfer_kv_validate(const kvjit_context *ctx, const kvjit_transfer_kv_args *a,
                                        kvjit_transfer_kv_request *r) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx: NULL");
  if (a == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "args: NULL");
  if (a->version != KVJIT_TRANSFER_KV_ARGS_VERSION) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "args->version: must be KVJIT_TRANSFER_KV_ARGS_VERSION (%d), got %u",
                      KVJIT_TRANSFER_KV_ARGS_VERSION, a->version);
  }
  if (a->batch < 0) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "batch: must be >= 0, got %lld", (long long)a->batch);
  int64_t v_row;
  kvjit_status st = kvjit_args_rows(a->k_row_bytes, a->v_row_bytes, a->src_v, "src_v", a->dst_v, "dst_v",
                                    "move K only", KVJIT_TRANSFER_KV_MAX_ROW_BYTES, &v_row);
  if (st != KVJIT_OK) return st;
  const int has_v = a->src_v != NULL;
  const int64_t k_row = a->k_row_bytes;
  if (a->index_type != KVJIT_INDEX_INT32 && a->index_type != KVJIT_INDEX_INT64) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "index_type: must be KVJIT_INDEX_INT32 (1) or KVJIT_INDEX_INT64 (2), got %d", (int)a->index_type);
  }
  if (a->src_index_stride < 0 || a->dst_index_stride < 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: must be >= 1 (0 means 1), got %lld",
                      a->src_index_stride < 0 ? "src_index_stride" : "dst_index_stride",
                      (long long)(a->src_index_stride < 0 ? a->src_index_stride : a->dst_index_stride));
  }
  st = check_location("src", a->src);
  if (st == KVJIT_OK) st = check_location("dst", a->dst);
  if (st != KVJIT_OK) return st;
  if (a->pdl != KVJIT_PDL_AUTO && a->pdl != KVJIT_PDL_ON && a->pdl != KVJIT_PDL_OFF) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "pdl: must be KVJIT_PDL_AUTO (0), _ON (1) or _OFF (2), got %d",
                      (int)a->pdl);
  }
  if (a->split < 0 || a->split > KVJIT_TRANSFER_KV_MAX_SPLIT) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "split: must be 0 (automatic) or 1..%d, got %d",
                      KVJIT_TRANSFER_KV_MAX_SPLIT, a->split);
  }
  if (a->num_layers < 0 || a->num_layers > KVJIT_TRANSFER_KV_MAX_LAYERS) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "num_layers: must be 0 (one layer) or 1..%d (tables), got %lld",
                      KVJIT_TRANSFER_KV_MAX_LAYERS, (long long)a->num_layers);
  }
  kvjit_transfer_kv_params *p = &r->params;
  p->src_k_stride = a->src_k_stride;
  p->dst_k_stride = a->dst_k_stride;
  p->src_v_stride = has_v ? a->src_v_stride : 0;
  p->dst_v_stride = has_v ? a->dst_v_stride : 0;
  st = kvjit_args_stride("src_k_stride", &p->src_k_stride, k_row, "k_row_bytes");
  if (st == KVJIT_OK) st = kvjit_args_stride("dst_k_stride", &p->dst_k_stride, k_row, "k_row_bytes");
  if (st == KVJIT_OK && has_v) st = kvjit_args_stride("src_v_stride", &p->src_v_stride, v_row, "v_row_bytes");
  if (st == KVJIT_OK && has_v) st = kvjit_args_stride("dst_v_stride", &p->dst_v_stride, v_row, "v_row_bytes");
  if (st != KVJIT_OK) return st;
  if (a->src_num_slots <= 0 || a->dst_num_slots <= 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: must be > 0, got %lld",
                      a->src_num_slots <= 0 ? "src_num_slots" : "dst_num_slots",
                      (long long)(a->src_num_slots <= 0 ? a->src_num_slots : a->dst_num_slots));
  }
  if (a->batch > 0 && (st = check_pointers(a)) != KVJIT_OK) return st;
  const uintptr_t index_bytes = a->index_type == KVJIT_INDEX_INT64 ? 8 : 4;
  p->src_index_stride = a->src_index_stride ? a->src_index_stride : 1;
  p->dst_index_stride = a->dst_index_stride ? a->dst_index_stride : 1;
  st = check_index_array("src_indices", a->src_indices, index_bytes, p->src_index_stride, a->batch);
  if (st == KVJIT_OK) st = check_index_array("dst_indices", a->dst_indices, index_bytes, p->dst_index_stride, a->batch);
  if (st != KVJIT_OK) return st;
  /* Every byte offset the kernel forms must fit in 64 bits. */
  if (!kvjit_args_extent_fits(a->src_num_slots - 1, p->src_k_stride, k_row) ||
      !kvjit_args_extent_fits(a->src_num_slots - 1, p->src_v_stride, v_row)) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "src_num_slots: %lld rows of stride %lld overflow a 64-bit offset",
                      (long long)a->src_num_slots,
                      (long long)(p->src_k_stride > p->src_v_stride ? p->src_k_stride : p->src_v_stride));
  }
  if (!kvjit_args_extent_fits(a->dst_num_slots - 1, p->dst_k_stride, k_row) ||
      !kvjit_args_extent_fits(a->dst_num_slots - 1, p->dst_v_stride, v_row)) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "dst_num_slots: %lld rows of stride %lld overflow a 64-bit offset",
                      (long long)a->dst_num_slots,
                      (long long)(p->dst_k_stride > p->dst_v_stride ? p->dst_k_stride : p->dst_v_stride));
  }
  const int table = a->num_layers > 0;
  uint64_t bits = (uint64_t)k_row | (uint64_t)v_row | (uint64_t)p->src_k_stride | (uint64_t)p->src_v_stride |
                  (uint64_t)p->dst_k_stride | (uint64_t)p->dst_v_stride;
  const uintptr_t ptr_bits = (uintptr_t)a->src_k | (uintptr_t)a->src_v | (uintptr_t)a->dst_k | (uintptr_t)a->dst_v;
  if (table) {
    /* Tables of uint64 pointers; the caches they point at are checked per layer by the kernel. */
    if ((ptr_bits & 7u) != 0) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "num_layers: %lld layers, but a layer table is not 8-byte aligned",
                        (long long)a->num_layers);
    }
  } else {
    bits |= (uint64_t)ptr_bits;
  }
  p->src_k = a->src_k;
  p->src_v = a->src_v;
  p->dst_k = a->dst_k;
  p->dst_v = a->dst_v;
  p->src_indices = a->src_indices;
  p->dst_indices = a->dst_indices;
  p->batch = a->batch;
  p->src_num_slots = a->src_num_slots;
  p->dst_num_slots = a->dst_num_slots;
  int64_t *v = r->values;
  v[TRANSFER_F_ARCH] = 0;
  v[TRANSFER_F_K_ROW] = k_row;
  v[TRANSFER_F_V_ROW] = v_row;
  v[TRANSFER_F_INDEX] = a->index_type;
  v[TRANSFER_F_SRC] = a->src;
  v[TRANSFER_F_DST] = a->dst;
  v[TRANSFER_F_LAYERS] = table;
  v[TRANSFER_F_PDL] = a->pdl;
  v[TRANSFER_F_SPLIT] = a->split;
  v[TRANSFER_F_VEC] = kvjit_rows_vec_of(bits);
  r->batch_class = a->batch > 0 ? kvjit_transfer_kv_batch_class(a->batch) : 0;
  r->layers = table ? (unsigned)a->num_layers : 1u;
  return KVJIT_OK;
}
