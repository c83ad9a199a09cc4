/*
 * The torch op's registration (op.cpp), called by the native module's register_torch() after
 * `import torch`. Not part of kvjit's C API: the op's users reach it as
 * torch.ops.kvjit.store_kv_cache.
 */
#ifndef KVJIT_TORCH_OP_H
#define KVJIT_TORCH_OP_H

#include <stddef.h>

#include "kvjit.h"
#include "store_args.h"
#include "transfer_args.h"

#if defined(__GNUC__)
#define KVJIT_TORCH_API __attribute__((visibility("default")))
#else
#define KVJIT_TORCH_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define KVJIT_TORCH_SETUP_VERSION 2

/** What kvjit_torch_register() needs; every path names a library already loaded in the process. */
typedef struct kvjit_torch_setup {
  unsigned version;          /**< KVJIT_TORCH_SETUP_VERSION */
  const char *libtorch_cpu;  /**< torch/lib/libtorch_cpu.so (the stable shim, torch::Library) */
  const char *libtorch_cuda; /**< torch/lib/libtorch_cuda.so, or NULL for a CPU-only torch */
  const char *ns;            /**< operator namespace ("kvjit") */
  const char *dispatch_key;  /**< "CUDA" (tests also register "CPU" under their own namespace) */
} kvjit_torch_setup;

/**
 * Register the store_kv_cache and transfer_kv kernels for @p s->ns (whose schemas must already be
 * defined) on @p s->dispatch_key; they call the library and context the module resolved
 * (door.h). @return 0, or -1 with a one-line reason in @p err.
 */
KVJIT_TORCH_API int kvjit_torch_register(const kvjit_torch_setup *s, char *err, size_t err_size);

#ifdef __cplusplus
}
#endif

#endif
