/*
 * The entry points of libkvjit_torch, the torch glue the Python package loads with ctypes after
 * `import torch` (python/kvjit/torch.py). Not part of kvjit's C API: the op's users reach it as
 * torch.ops.kvjit.store_kv_cache.
 */
#ifndef KVJIT_TORCH_OP_H
#define KVJIT_TORCH_OP_H

#include <stddef.h>

#include "kvjit.h"
#include "store_args.h"

#if defined(__GNUC__)
#define KVJIT_TORCH_API __attribute__((visibility("default")))
#else
#define KVJIT_TORCH_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define KVJIT_TORCH_SETUP_VERSION 1

/** What kvjit_torch_register() needs; every path names a library already loaded in the process. */
typedef struct kvjit_torch_setup {
  unsigned version;          /**< KVJIT_TORCH_SETUP_VERSION */
  const char *libkvjit;      /**< the libkvjit the Python package loaded */
  const char *libtorch_cpu;  /**< torch/lib/libtorch_cpu.so (the stable shim, torch::Library) */
  const char *libtorch_cuda; /**< torch/lib/libtorch_cuda.so, or NULL for a CPU-only torch */
  const char *ns;            /**< operator namespace ("kvjit") */
  const char *dispatch_key;  /**< "CUDA" (tests also register "CPU" under their own namespace) */
  void *context;             /**< the kvjit_context every call uses; must outlive the process's use */
} kvjit_torch_setup;

/**
 * Register the store_kv_cache kernel for @p s->ns :: store_kv_cache (whose schema must already be
 * defined) on @p s->dispatch_key. @return 0, or -1 with a one-line reason in @p err.
 */
KVJIT_TORCH_API int kvjit_torch_register(const kvjit_torch_setup *s, char *err, size_t err_size);

/** kvjit_store_request_args(), for the op's CPU implementation (python/kvjit/torch.py). */
KVJIT_TORCH_API int kvjit_torch_store_request_args(const kvjit_store_request *req, kvjit_store_kv_args *args,
                                                   char *msg, size_t msg_size);

#ifdef __cplusplus
}
#endif

#endif
