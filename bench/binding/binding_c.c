/*
 * Binding benchmark candidates without Python.h: kvjit_store_kv_cache in a C loop (the cost of
 * kvjit's own call, the bound every binding is measured against) and the store behind tvm-ffi's
 * C ABI (a __tvm_ffi_ symbol, as SGLang and FlashInfer load their JIT kernels), loaded by
 * bench_binding.py with tvm_ffi.load_module() when apache-tvm-ffi is installed.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>

#include "dlpack_view.h"
#include "kvjit.h"
#include "store_args.h"

#define BENCH_API __attribute__((visibility("default")))

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

BENCH_API double kvjit_bench_store_loop(kvjit_context *ctx, const kvjit_store_kv_args *args, long n, int *status);
BENCH_API double kvjit_bench_transfer_loop(kvjit_context *ctx, const kvjit_transfer_kv_args *args, long n,
                                           int *status);
BENCH_API int kvjit_bench_tvm_init(const char *libtvm_ffi, kvjit_context *ctx);

/** @p n calls of kvjit_store_kv_cache with the same prepared @p args: ns per call; *status: the first failure. */
BENCH_API double kvjit_bench_store_loop(kvjit_context *ctx, const kvjit_store_kv_args *args, long n, int *status) {
  *status = KVJIT_OK;
  double start = now_ns();
  for (long i = 0; i < n; i++) {
    kvjit_status s = kvjit_store_kv_cache(ctx, args);
    if (s != KVJIT_OK && *status == KVJIT_OK) *status = s;
  }
  return (now_ns() - start) / (double)n;
}

/** The same for kvjit_transfer_kv. */
BENCH_API double kvjit_bench_transfer_loop(kvjit_context *ctx, const kvjit_transfer_kv_args *args, long n,
                                           int *status) {
  *status = KVJIT_OK;
  double start = now_ns();
  for (long i = 0; i < n; i++) {
    kvjit_status s = kvjit_transfer_kv(ctx, args);
    if (s != KVJIT_OK && *status == KVJIT_OK) *status = s;
  }
  return (now_ns() - start) / (double)n;
}

/* ---- tvm-ffi (apache-tvm-ffi's c_api.h layouts) ---------------------------------------------- */

typedef struct {
  uint64_t combined_ref_count;
  int32_t type_index;
  uint32_t padding;
  void (*deleter)(void *self, int flags);
} tvm_ffi_object; /* TVMFFIObject: a tensor's DLTensor follows it */

typedef struct {
  int32_t type_index;
  uint32_t zero_padding;
  union {
    int64_t v_int64;
    void *v_ptr;
    tvm_ffi_object *v_obj;
  };
} tvm_ffi_any; /* TVMFFIAny */

enum { TVM_FFI_NONE = 0, TVM_FFI_INT = 1, TVM_FFI_DLTENSOR_PTR = 7, TVM_FFI_TENSOR = 70 };

static void *(*tvm_get_stream)(int32_t device_type, int32_t device_id);
static void (*tvm_set_error)(const char *kind, const char *message);
static kvjit_context *tvm_ctx;

/** Resolve TVMFFIEnvGetStream / TVMFFIErrorSetRaisedFromCStr from the libtvm_ffi already loaded. */
BENCH_API int kvjit_bench_tvm_init(const char *libtvm_ffi, kvjit_context *ctx) {
  void *h = dlopen(libtvm_ffi, RTLD_NOW | RTLD_NOLOAD);
  if (h == NULL) return -1;
  *(void **)&tvm_get_stream = dlsym(h, "TVMFFIEnvGetStream");
  *(void **)&tvm_set_error = dlsym(h, "TVMFFIErrorSetRaisedFromCStr");
  tvm_ctx = ctx;
  return tvm_get_stream && tvm_set_error ? 0 : -1;
}

static const kvjit_dl_tensor *tvm_tensor(const tvm_ffi_any *a) {
  if (a->type_index == TVM_FFI_TENSOR) return (const kvjit_dl_tensor *)(void *)(a->v_obj + 1);
  if (a->type_index == TVM_FFI_DLTENSOR_PTR) return (const kvjit_dl_tensor *)a->v_ptr;
  return NULL;
}

/** store_kv_cache(k, v, k_cache, v_cache, indices) with tvm-ffi's calling convention. */
BENCH_API int __tvm_ffi_store_kv_cache(void *self, const tvm_ffi_any *args, int32_t num_args, tvm_ffi_any *result);
BENCH_API int __tvm_ffi_store_kv_cache(void *self, const tvm_ffi_any *args, int32_t num_args, tvm_ffi_any *result) {
  (void)self;
  result->type_index = TVM_FFI_NONE;
  result->v_int64 = 0;
  if (num_args != 5) {
    tvm_set_error("TypeError", "store_kv_cache takes k, v, k_cache, v_cache, indices");
    return -1;
  }
  kvjit_tensor_view views[5];
  kvjit_dl_dims dims[5];
  static const char *const names[5] = {"k", "v", "k_cache", "v_cache", "indices"};
  char msg[512];
  for (int i = 0; i < 5; i++) {
    const kvjit_dl_tensor *t = tvm_tensor(&args[i]);
    if (t == NULL) {
      tvm_set_error("TypeError", "store_kv_cache: every argument must be a tensor");
      return -1;
    }
    if (kvjit_dl_view(t, names[i], 1, &views[i], &dims[i], msg, sizeof msg) != 0) { /* tvm-ffi's tensors: real ones */
      tvm_set_error("ValueError", msg);
      return -1;
    }
  }
  kvjit_store_request req = {views[0], views[1], views[2], views[3], views[4],
                             {0},           {0},           -1,            -1,            0, KVJIT_PDL_AUTO, 0,
                             KVJIT_STORE_LAYOUT_AUTO};
  kvjit_store_kv_args a;
  kvjit_store_layouts layouts;
  kvjit_request_error refused = kvjit_store_request_args(&req, &a, &layouts, msg, sizeof msg);
  if (refused) {
    tvm_set_error(refused == KVJIT_REQUEST_TYPE_ERROR ? "TypeError" : "ValueError", msg);
    return -1;
  }
  if (req.k.device_type == KVJIT_DL_CUDA)
    a.stream = (struct CUstream_st *)tvm_get_stream(KVJIT_DL_CUDA, req.k.device_index);
  else if (a.batch != 0) {
    tvm_set_error("ValueError", "k: not a CUDA tensor");
    return -1;
  }
  kvjit_status s = kvjit_store_kv_cache(tvm_ctx, &a);
  if (s != KVJIT_OK) {
    tvm_set_error("RuntimeError", kvjit_last_error());
    return -1;
  }
  return 0;
}
