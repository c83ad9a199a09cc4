/*
 * Tensor shapes -> kvjit_transfer_kv_args: what torch.ops.kvjit.transfer_kv needs to turn the
 * caches and slot ids into one transfer call. A source and a destination of different dtypes (fp8
 * and float16/bfloat16/float32) convert on the way, with the scales given. Each cache is device memory or (any tensor
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
  int64_t row_elements;  /**< -1: a row is everything after the first dim (of the cache with less there) */
  /** Converting (a source and destination of different dtypes, fp8 <-> float16/bfloat16/float32):
   *  fp32 scales, 1 (per tensor) or H (per head) each, or not present (no scale). */
  kvjit_tensor_view k_scale, v_scale;
  int64_t max_ctas; /**< 0: the plan's CTA budget; N: at most N CTAs; -1: the all-SM plan */
} kvjit_transfer_request;

/** Where kvjit_transfer_request_args() puts the caches' layouts; the args point into it, so it
 *  must live as long as they are used. */
typedef struct kvjit_transfer_layouts {
  kvjit_layout src_k, src_v, dst_k, dst_v;
} kvjit_transfer_layouts;

/**
 * Check @p req and fill @p args (stream left NULL). A cache that is not flat rows (SGLang's
 * page_first_direct and page_head host layouts as per-layer views, any strided view) gets a
 * kvjit_layout in @p layouts, which the args' layout pointers point at. Unless row_elements says
 * otherwise a row is everything after the first dim of whichever cache has less there (a paged
 * host view [pages, page_size, H, D] against a device [size, H, D] moves [H, D] rows). A tensor whose device type is
 * @p device_type is device memory, any other host memory. *@p device: the device index the
 * transfer runs on (that of its first device cache, or of its first device index tensor; -1
 * when every tensor is host memory). On refusal returns the error class and writes a one-line
 * message naming the argument into @p msg; @p args is then unspecified.
 */
kvjit_request_error kvjit_transfer_request_args(const kvjit_transfer_request *req, int32_t device_type,
                                                kvjit_transfer_kv_args *args, kvjit_transfer_layouts *layouts,
                                                int32_t *device, char *msg, size_t msg_size);

/** Bytes from @p t's first element to one past its last (0 for an empty tensor). */
int64_t kvjit_tensor_view_extent(const kvjit_tensor_view *t);

#ifdef __cplusplus
}
#endif

#endif
