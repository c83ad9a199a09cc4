/*
 * Store requests as the doors build them (python/csrc/store_args.h), written by hand: tensors as
 * sizes and strides in elements, no torch, no GPU. Shared by test_torch_args.c and
 * test_cache_views.c.
 */
#ifndef KVJIT_TEST_REQUEST_UTIL_H
#define KVJIT_TEST_REQUEST_UTIL_H

#include <stdint.h>

#include "store_args.h"

enum { DEV_CUDA = 1, TENSOR_MAX_DIMS = 6 };

/* A tensor with its own size and stride arrays (the view borrows them). */
typedef struct tensor {
  int64_t sizes[TENSOR_MAX_DIMS], strides[TENSOR_MAX_DIMS];
  kvjit_tensor_view view;
} tensor;

/* The framework's code of each kind (any distinct codes do). */
extern const int32_t codes[KVJIT_TENSOR_KIND_COUNT];

/* A contiguous CUDA tensor of @p ndim dims (int64_t sizes from the varargs) at @p data. */
void make(tensor *t, kvjit_tensor_kind kind, uintptr_t data, int ndim, ...);

/* @p to: a view of @p from's storage (its own size and stride arrays) at @p data. */
void alias(tensor *to, const tensor *from, uintptr_t data);

typedef struct request {
  tensor k, v, k_cache, v_cache, indices, k_scale, v_scale;
  kvjit_store_request req;
  kvjit_store_kv_args args;
  kvjit_store_layouts layouts;
  char msg[512];
} request;

/* kvjit_store_request_args() of @p r's tensors and scalars. */
kvjit_request_error run(request *r);

#endif
