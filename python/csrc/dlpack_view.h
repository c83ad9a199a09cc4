/*
 * DLPack tensors -> kvjit_tensor_view, for every door that receives DLTensors: the Python module
 * (PyTorch's DLPack exchange API, any __dlpack__ capsule) and the benchmark's tvm-ffi candidate.
 * The DLPack 1.x structs are declared here as the DLPack header defines them (the same layout in
 * every DLPack version since 0.6), so that nothing outside this repository is needed to build.
 *
 * A producer may lie (a capsule is just memory): kvjit_dl_view() bounds ndim before it reads the
 * shape, and refuses any size, stride or byte offset whose byte arithmetic would not fit, so the
 * layout rules after it never overflow.
 */
#ifndef KVJIT_DLPACK_VIEW_H
#define KVJIT_DLPACK_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "store_args.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int32_t device_type; /* kDLCPU 1, kDLCUDA 2, kDLCUDAHost 3, kDLCUDAManaged 13, ... */
  int32_t device_id;
} kvjit_dl_device;

typedef struct {
  uint8_t code; /* kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLComplex 5, kDLBool 6, kDLFloat8_e4m3fn 10, ... */
  uint8_t bits;
  uint16_t lanes;
} kvjit_dl_dtype;

typedef struct {
  void *data;
  kvjit_dl_device device;
  int32_t ndim;
  kvjit_dl_dtype dtype;
  int64_t *shape;
  int64_t *strides; /* NULL: compact row-major */
  uint64_t byte_offset;
} kvjit_dl_tensor;

/** DLManagedTensor (the "dltensor" capsule's pointer). */
typedef struct {
  kvjit_dl_tensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(void *self);
} kvjit_dl_managed;

/** DLManagedTensorVersioned (the "dltensor_versioned" capsule's pointer, DLPack 1.x). */
typedef struct {
  uint32_t major, minor;
  void *manager_ctx;
  void (*deleter)(void *self);
  uint64_t flags;
  kvjit_dl_tensor dl_tensor;
} kvjit_dl_managed_versioned;

enum { KVJIT_DL_CPU = 1, KVJIT_DL_CUDA = 2, KVJIT_DL_CUDA_HOST = 3, KVJIT_DL_CUDA_MANAGED = 13, KVJIT_DL_MAX_DIMS = 8 };

/** A view's own copy of its sizes and strides, where a producer's arrays may go away. */
typedef struct {
  int64_t sizes[KVJIT_DL_MAX_DIMS];
  int64_t strides[KVJIT_DL_MAX_DIMS];
} kvjit_dl_dims;

/** What kvjit calls a DLPack dtype (KVJIT_TENSOR_OTHER for one it cannot name). */
kvjit_tensor_kind kvjit_dl_kind(kvjit_dl_dtype t);

/** The fields of @p v that come from @p t alone (all but data, sizes and strides). */
static inline void kvjit_dl_view_fields(const kvjit_dl_tensor *t, kvjit_tensor_view *v) {
  v->present = 1;
  v->ndim = t->ndim;
  v->itemsize = ((unsigned)t->dtype.bits * t->dtype.lanes + 7u) / 8u;
  if (v->itemsize == 0) v->itemsize = 1; /* a sub-byte type: refused by the rules, by name */
  v->kind = kvjit_dl_kind(t->dtype);
  v->code = (int32_t)(t->dtype.code * 65536 + t->dtype.bits * 256 + t->dtype.lanes);
  v->device_type = t->device.device_type == KVJIT_DL_CUDA_MANAGED ? KVJIT_DL_CUDA
                   : t->device.device_type == KVJIT_DL_CUDA_HOST  ? KVJIT_DL_CPU
                                                                  : t->device.device_type;
  v->device_index = t->device.device_id;
}

/**
 * @p t as a view borrowing its shape and strides, for a producer whose arrays outlive the call and
 * describe a real allocation (torch through its exchange API: as_strided checks the storage's
 * bounds): 1 with @p v filled, or 0 (ndim outside 0..KVJIT_DL_MAX_DIMS, no shape, no strides)
 * when kvjit_dl_view() is to say why or copy. Inline: a door reads several tensors a call.
 */
static inline int kvjit_dl_view_borrowed(const kvjit_dl_tensor *t, kvjit_tensor_view *v) {
  if (t->ndim < 0 || t->ndim > KVJIT_DL_MAX_DIMS || (t->ndim > 0 && t->shape == NULL) || t->strides == NULL)
    return 0;
  kvjit_dl_view_fields(t, v);
  v->sizes = t->shape;
  v->strides = t->strides;
  v->data = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
  return 1;
}

/**
 * Fill @p out from @p t (NULL: an absent argument), its sizes and strides copied into @p dims
 * (which must then outlive @p out's use). 0, or -1 with a one-line message naming @p name in
 * @p msg: more than KVJIT_DL_MAX_DIMS dims, a NULL shape, a negative size, or sizes, strides or a
 * byte offset whose byte extent does not fit in 62 bits. CUDA-managed memory is reported as
 * CUDA, pinned host memory (kDLCUDAHost) as CPU. @p trusted: the producer's arrays outlive the
 * call and describe a real allocation (torch's exchange API): they are borrowed (@p dims is left
 * alone), and only ndim is checked.
 */
int kvjit_dl_view(const kvjit_dl_tensor *t, const char *name, int trusted, kvjit_tensor_view *out,
                  kvjit_dl_dims *dims, char *msg, size_t msg_size);

/**
 * The same checks for a view whose sizes and strides (elements) are already in @p out: 0, or -1
 * with the message. Every door runs it before the layout rules.
 */
int kvjit_view_check_extent(kvjit_tensor_view *view, const char *name, char *msg, size_t msg_size);

#ifdef __cplusplus
}
#endif

#endif
