/*
 * Tensor shapes -> kvjit_transfer_kv_args: what torch.ops.kvjit.transfer_kv needs to turn the
 * caches and slot ids into one transfer call. The same rules and messages as the Python
 * binding's build_args (python/kvjit/_transfer.py). Each cache is device memory or (any tensor
 * not on the device type given) host memory the GPU reaches; that it can is the caller's check.
 *
 * Pure arithmetic on sizes and strides: no torch, no driver; unit-tested in tests/.
 */
#ifndef KVJIT_TORCH_TRANSFER_ARGS_H
#define KVJIT_TORCH_TRANSFER_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "kvjit.h"
#include "store_args.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A transfer request: the op's schema, argument by argument. */
typedef struct kvjit_transfer_request {
  kvjit_tensor_view src_k, src_v, dst_k, dst_v, src_indices, dst_indices;
  int64_t src_num_slots; /**< -1: the source caches' slots */
  int64_t dst_num_slots; /**< -1: the destination caches' slots */
  int64_t split;         /**< 0: automatic */
  int64_t pdl;           /**< a kvjit_pdl_mode */
  int64_t row_elements;  /**< -1: a row is everything after a cache's first dim */
} kvjit_transfer_request;

/**
 * Check @p req and fill @p args (stream left NULL). A tensor whose device type is
 * @p device_type is device memory, any other host memory. *@p device: the device index the
 * transfer runs on (that of its first device cache, or of its first device index tensor; -1
 * when every tensor is host memory). On refusal returns the error class and writes a one-line
 * message naming the argument into @p msg; @p args is then unspecified.
 */
kvjit_request_error kvjit_transfer_request_args(const kvjit_transfer_request *req, int32_t device_type,
                                                kvjit_transfer_kv_args *args, int32_t *device, char *msg,
                                                size_t msg_size);

/** Bytes from @p t's first element to one past its last (0 for an empty tensor). */
int64_t kvjit_tensor_view_extent(const kvjit_tensor_view *t);

#ifdef __cplusplus
}
#endif

#endif
