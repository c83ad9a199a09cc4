/*
 * What the torch op's kernels share (op.cpp: glue, registration and store_kv_cache;
 * op_transfer.cpp: transfer_kv): the stable-ABI declarations, the resolved entry points, and
 * the helpers that read one call's arguments.
 */
#ifndef KVJIT_TORCH_OP_GLUE_H
#define KVJIT_TORCH_OP_GLUE_H

#include <stdint.h>

#include <stdexcept>

#include "door.h"
#include "kvjit.h"
#include "store_args.h"

namespace kvjit_torch {

/* ---- the stable ABI, declared as libtorch defines it (shim.h) -------------------------------- */

typedef uint64_t StableIValue;
typedef int32_t AOTITorchError; /* 0: success */
typedef struct AtenTensorOpaque *AtenTensorHandle;
typedef struct TorchLibraryOpaque *TorchLibraryHandle;
typedef struct CUDAGuardOpaque *CUDAGuardHandle;
typedef void (*BoxedKernel)(StableIValue *stack, uint64_t num_args, uint64_t num_outputs);

/* The stable ABI version (TORCH_VERSION_2_10_0) whose StableIValue conventions these files follow. */
constexpr uint64_t kTorchAbi_2_10 = (2ULL << 56) | (10ULL << 48);

struct Torch {
  AOTITorchError (*get_data_ptr)(AtenTensorHandle, void **);
  AOTITorchError (*get_dim)(AtenTensorHandle, int64_t *);
  AOTITorchError (*get_sizes)(AtenTensorHandle, int64_t **);
  AOTITorchError (*get_strides)(AtenTensorHandle, int64_t **);
  AOTITorchError (*get_dtype)(AtenTensorHandle, int32_t *);
  AOTITorchError (*get_device_type)(AtenTensorHandle, int32_t *);
  AOTITorchError (*get_device_index)(AtenTensorHandle, int32_t *);
  AOTITorchError (*delete_tensor_object)(AtenTensorHandle);
  size_t (*dtype_element_size)(int32_t);
  AOTITorchError (*library_init_impl)(const char *, const char *, const char *, uint32_t, TorchLibraryHandle *);
  AOTITorchError (*library_impl_versioned)(TorchLibraryHandle, const char *, BoxedKernel, uint64_t);
  AOTITorchError (*library_impl)(TorchLibraryHandle, const char *, BoxedKernel);
  /* CUDA (libtorch_cuda); NULL in a CPU-only torch. */
  AOTITorchError (*current_cuda_stream)(int32_t, void **);
  AOTITorchError (*current_device_index)(int32_t *);
  AOTITorchError (*create_cuda_guard)(int32_t, CUDAGuardHandle *);
  AOTITorchError (*delete_cuda_guard)(CUDAGuardHandle);
  int32_t device_cuda;
  int32_t dtype_codes[KVJIT_TENSOR_KIND_COUNT]; /* by kvjit_tensor_kind; INT32_MIN: none */
  int64_t itemsizes[KVJIT_TENSOR_KIND_COUNT];   /* by kind; 0 for OTHER (asked per call) */
  uint8_t kind_by_code[64];                     /* torch's small ScalarType codes -> kind */
};


/* Set once under a lock by the first registration (op.cpp), read-only afterwards (kernels run
 * only once a registration has succeeded, which happens-after the writes). libkvjit's entry
 * points are the module's (door.h). */
extern Torch g_torch;

/** Throw when a shim call failed (the dispatcher turns it into a RuntimeError). */
void check(AOTITorchError err, const char *what);

/** One tensor argument (nullptr: None) as a view; six shim calls. */
void view_of(AtenTensorHandle t, kvjit_tensor_view *out);

/** Throw the refusal the Python side maps to ValueError / TypeError ("kvjit ValueError: ..."). */
[[noreturn]] void fail_request(kvjit_request_error kind, const char *msg);

/** Throw a library failure ("kvjit ERR_...: detail"), mapped to kvjit.Error. */
[[noreturn]] void fail_status(kvjit_status status);

/* Owns what one call received: tensor handles and Optional boxes, released on every exit. */
class CallArgs {
 public:
  CallArgs(StableIValue *stack, uint64_t num_args) : stack_(stack), num_args_(num_args) {}
  ~CallArgs() {
    if (num_tensors_ > 0) kvjit_door_with_gil(release_tensors, this); /* one GIL round trip, not one per tensor */
    for (int i = 0; i < num_boxes_; i++) delete boxes_[i];
  }
  CallArgs(const CallArgs &) = delete;
  CallArgs &operator=(const CallArgs &) = delete;

  /* Take ownership of every argument first, so that an early throw leaks nothing. */
  void adopt(const bool *is_tensor, const bool *is_optional) {
    for (uint64_t i = 0; i < num_args_; i++) {
      if (!is_tensor[i]) continue;
      StableIValue value = stack_[i];
      if (is_optional[i]) {
        if (value == 0) continue;
        StableIValue *box = reinterpret_cast<StableIValue *>(value);
        boxes_[num_boxes_++] = box;
        value = *box;
      }
      AtenTensorHandle t = reinterpret_cast<AtenTensorHandle>(value);
      tensors_[num_tensors_++] = t;
      handles_[i] = t;
    }
  }

  AtenTensorHandle tensor(int i) const { return handles_[i]; }
  int64_t integer(int i) const { return static_cast<int64_t>(stack_[i]); }

 private:
  /* Under the GIL (kvjit_door_with_gil): torch drops each handle's hold on its Python object. */
  static void release_tensors(void *self) {
    CallArgs *call = static_cast<CallArgs *>(self);
    for (int i = 0; i < call->num_tensors_; i++) g_torch.delete_tensor_object(call->tensors_[i]);
  }

  StableIValue *stack_;
  uint64_t num_args_;
  AtenTensorHandle tensors_[16] = {};
  AtenTensorHandle handles_[16] = {};
  StableIValue *boxes_[16] = {};
  int num_tensors_ = 0;
  int num_boxes_ = 0;
};

/* RAII CUDA device guard, set only when @p device is not already current (with one device it is:
 * the runtime is not asked). */
class DeviceGuard {
 public:
  explicit DeviceGuard(int32_t device) {
    if (kvjit_door_device_count() == 1) return;
    int32_t current = -1;
    if (g_torch.current_device_index(&current) == 0 && current == device) return;
    check(g_torch.create_cuda_guard(device, &guard_), "aoti_torch_create_cuda_guard");
  }
  ~DeviceGuard() {
    if (guard_) g_torch.delete_cuda_guard(guard_);
  }
  DeviceGuard(const DeviceGuard &) = delete;
  DeviceGuard &operator=(const DeviceGuard &) = delete;

 private:
  CUDAGuardHandle guard_ = nullptr;
};

/** The transfer_kv kernel (op_transfer.cpp). */
void transfer_kv_kernel(StableIValue *stack, uint64_t num_args, uint64_t num_outputs);

}  // namespace kvjit_torch

#endif
