/*
 * DLPack tensors -> kvjit_tensor_view, for bindings that receive DLTensors: the Python
 * extension's fast path (PyTorch's DLPack exchange API) and the benchmark's tvm-ffi candidate.
 * The DLPack 1.x structs are declared here as the DLPack header defines them (the same layout
 * in every DLPack 1.x), so that nothing outside this repository is needed to build them.
 */
#ifndef KVJIT_BENCH_DLPACK_VIEW_H
#define KVJIT_BENCH_DLPACK_VIEW_H

#include <stdint.h>
#include <string.h>

#include "store_args.h"

typedef struct {
  int32_t device_type; /* kDLCPU 1, kDLCUDA 2, ... */
  int32_t device_id;
} bench_dl_device;

typedef struct {
  uint8_t code; /* kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLFloat8_e4m3fn 10, kDLFloat8_e5m2 12 */
  uint8_t bits;
  uint16_t lanes;
} bench_dl_dtype;

typedef struct {
  void *data;
  bench_dl_device device;
  int32_t ndim;
  bench_dl_dtype dtype;
  int64_t *shape;
  int64_t *strides; /* NULL: compact row-major */
  uint64_t byte_offset;
} bench_dl_tensor;

enum { BENCH_DL_CPU = 1, BENCH_DL_CUDA = 2, BENCH_MAX_DIMS = 8 };

/* A view plus the strides it may have had to compute. */
typedef struct {
  kvjit_tensor_view view;
  int64_t strides[BENCH_MAX_DIMS];
} bench_view;

static inline kvjit_tensor_kind bench_dl_kind(bench_dl_dtype t) {
  if (t.lanes != 1) return KVJIT_TENSOR_OTHER;
  switch (t.code * 256 + t.bits) {
  case 2 * 256 + 16: return KVJIT_TENSOR_F16;
  case 4 * 256 + 16: return KVJIT_TENSOR_BF16;
  case 2 * 256 + 32: return KVJIT_TENSOR_F32;
  case 10 * 256 + 8: return KVJIT_TENSOR_FP8_E4M3;
  case 12 * 256 + 8: return KVJIT_TENSOR_FP8_E5M2;
  case 1 * 256 + 8: return KVJIT_TENSOR_U8;
  case 0 * 256 + 8: return KVJIT_TENSOR_I8;
  case 0 * 256 + 32: return KVJIT_TENSOR_I32;
  case 0 * 256 + 64: return KVJIT_TENSOR_I64;
  default: return KVJIT_TENSOR_OTHER;
  }
}

/* @return 0, or -1 when the tensor has more dims than the benchmark handles. */
static inline int bench_dl_view(const bench_dl_tensor *t, bench_view *out) {
  memset(out, 0, sizeof *out);
  if (t == NULL) return 0;
  if (t->ndim < 0 || t->ndim > BENCH_MAX_DIMS) return -1;
  kvjit_tensor_view *v = &out->view;
  v->present = 1;
  v->data = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
  v->ndim = t->ndim;
  v->sizes = t->shape;
  if (t->strides) {
    v->strides = t->strides;
  } else {
    int64_t step = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
      out->strides[i] = step;
      step *= t->shape[i] > 0 ? t->shape[i] : 1;
    }
    v->strides = out->strides;
  }
  v->itemsize = (t->dtype.bits * t->dtype.lanes + 7) / 8;
  v->kind = bench_dl_kind(t->dtype);
  v->code = (int32_t)(t->dtype.code * 65536 + t->dtype.bits * 256 + t->dtype.lanes);
  v->device_type = t->device.device_type;
  v->device_index = t->device.device_id;
  return 0;
}

#endif
