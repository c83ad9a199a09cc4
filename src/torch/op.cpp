/*
 * kvjit::store_kv_cache as a PyTorch operator kernel, through PyTorch's stable C ABI.
 *
 * No torch header or library is needed to build this: the few shim functions used (tensor
 * accessors, the current CUDA stream, a CUDA device guard, torch::Library registration) are C
 * functions exported by libtorch_cpu / libtorch_cuda, resolved with dlsym from the copies
 * `import torch` already loaded (RTLD_NOLOAD). libkvjit is resolved the same way from the copy
 * the Python package loaded, so the op and kvjit.store_kv_cache() share one library and one
 * context. The kernel is boxed: PyTorch hands it the schema's arguments as StableIValues.
 *
 * Written in C++ for two things only: a kernel reports failure by throwing (the dispatcher turns
 * a std::exception into a Python RuntimeError), and an Optional argument arrives boxed in a
 * StableIValue that libtorch allocated with new and the kernel must delete.
 *
 * Verified against PyTorch 2.11's torch/csrc/shim_common.cpp (StableIValueBoxedKernel: every
 * tensor argument is a new owning AtenTensorHandle; None is 0; a present Optional is a pointer
 * to a heap StableIValue) and torch/csrc/inductor/aoti_torch/c/shim.h.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>
#include <stdexcept>
#include <string>

#include "kvjit.h"
#include "store_args.h"
#include "torch_op.h"

namespace {

/* ---- the stable ABI, declared as libtorch defines it (shim.h) -------------------------------- */

typedef uint64_t StableIValue;
typedef int32_t AOTITorchError; /* 0: success */
typedef struct AtenTensorOpaque *AtenTensorHandle;
typedef struct TorchLibraryOpaque *TorchLibraryHandle;
typedef struct CUDAGuardOpaque *CUDAGuardHandle;
typedef void (*BoxedKernel)(StableIValue *stack, uint64_t num_args, uint64_t num_outputs);

/* The stable ABI version (TORCH_VERSION_2_10_0) whose StableIValue conventions this file follows. */
const uint64_t kTorchAbi_2_10 = (2ULL << 56) | (10ULL << 48);

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
  int32_t dtype_codes[KVJIT_TENSOR_I64 + 1]; /* by kvjit_tensor_kind; OTHER's slot unused */
};

struct Kvjit {
  kvjit_status (*store)(kvjit_context *, const kvjit_store_kv_args *);
  const char *(*last_error)(void);
  const char *(*status_name)(kvjit_status);
  kvjit_context *ctx;
};

/* Set once under g_lock by the first registration, read-only afterwards (kernels run only once a
 * registration has succeeded, which happens-after the writes). */
Torch g_torch;
Kvjit g_kvjit;
bool g_ready = false;
std::mutex g_lock;

/* ---- the kernel ------------------------------------------------------------------------------- */

void check(AOTITorchError err, const char *what) {
  if (err != 0) throw std::runtime_error(std::string("kvjit: torch shim call failed: ") + what);
}

/* Owns what one call received: tensor handles and Optional boxes, released on every exit. */
class CallArgs {
 public:
  CallArgs(StableIValue *stack, uint64_t num_args) : stack_(stack), num_args_(num_args) {}
  ~CallArgs() {
    for (int i = 0; i < num_tensors_; i++) g_torch.delete_tensor_object(tensors_[i]);
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
  StableIValue *stack_;
  uint64_t num_args_;
  AtenTensorHandle tensors_[16] = {};
  AtenTensorHandle handles_[16] = {};
  StableIValue *boxes_[16] = {};
  int num_tensors_ = 0;
  int num_boxes_ = 0;
};

kvjit_tensor_kind kind_of(int32_t code) {
  for (int kind = KVJIT_TENSOR_F16; kind <= KVJIT_TENSOR_I64; kind++)
    if (g_torch.dtype_codes[kind] == code) return static_cast<kvjit_tensor_kind>(kind);
  return KVJIT_TENSOR_OTHER;
}

void view_of(AtenTensorHandle t, kvjit_tensor_view *out) {
  memset(out, 0, sizeof *out);
  if (t == nullptr) return;
  void *data;
  int64_t *sizes, *strides;
  check(g_torch.get_data_ptr(t, &data), "aoti_torch_get_data_ptr");
  check(g_torch.get_dim(t, &out->ndim), "aoti_torch_get_dim");
  check(g_torch.get_sizes(t, &sizes), "aoti_torch_get_sizes");
  check(g_torch.get_strides(t, &strides), "aoti_torch_get_strides");
  check(g_torch.get_dtype(t, &out->code), "aoti_torch_get_dtype");
  check(g_torch.get_device_type(t, &out->device_type), "aoti_torch_get_device_type");
  check(g_torch.get_device_index(t, &out->device_index), "aoti_torch_get_device_index");
  out->present = 1;
  out->data = reinterpret_cast<uintptr_t>(data);
  out->sizes = sizes;
  out->strides = strides;
  out->kind = kind_of(out->code);
  out->itemsize = static_cast<int64_t>(g_torch.dtype_element_size(out->code));
}

[[noreturn]] void fail_request(kvjit_request_error kind, const char *msg) {
  throw std::runtime_error(std::string(kind == KVJIT_REQUEST_TYPE_ERROR ? "kvjit TypeError: " : "kvjit ValueError: ") +
                           msg);
}

[[noreturn]] void fail_status(kvjit_status status) {
  throw std::runtime_error(std::string("kvjit ") + g_kvjit.status_name(status) + ": " + g_kvjit.last_error());
}

/* kvjit launches in the thread's current CUDA context; a thread that has made no CUDA runtime
 * call has none. Make @p ordinal's primary context (the runtime's, so torch's) current. */
bool make_primary_context_current(int ordinal) {
  typedef int (*cu_init_fn)(unsigned);
  typedef int (*cu_device_get_fn)(int *, int);
  typedef int (*cu_retain_fn)(void **, int);
  typedef int (*cu_set_current_fn)(void *);
  const char *name = getenv("KVJIT_LIBCUDA");
  void *cuda = dlopen(name && *name ? name : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) return false;
  cu_init_fn init = reinterpret_cast<cu_init_fn>(dlsym(cuda, "cuInit"));
  cu_device_get_fn device_get = reinterpret_cast<cu_device_get_fn>(dlsym(cuda, "cuDeviceGet"));
  cu_retain_fn retain = reinterpret_cast<cu_retain_fn>(dlsym(cuda, "cuDevicePrimaryCtxRetain"));
  cu_set_current_fn set_current = reinterpret_cast<cu_set_current_fn>(dlsym(cuda, "cuCtxSetCurrent"));
  int device = 0;
  void *ctx = nullptr;
  /* The handle stays open: the context lives on in the process. */
  return init && device_get && retain && set_current && init(0) == 0 && device_get(&device, ordinal) == 0 &&
         retain(&ctx, device) == 0 && set_current(ctx) == 0;
}

/* RAII CUDA device guard, set only when @p device is not already current. */
class DeviceGuard {
 public:
  explicit DeviceGuard(int32_t device) {
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

/* Schema: (Tensor k, Tensor? v, Tensor(a!) k_cache, Tensor(b!)? v_cache, Tensor indices, int num_slots,
 *          int skip_slot, int split, int pdl, Tensor? k_scale, Tensor? v_scale, int cache_dtype) -> () */
enum {
  ARG_K, ARG_V, ARG_K_CACHE, ARG_V_CACHE, ARG_INDICES, ARG_NUM_SLOTS, ARG_SKIP_SLOT, ARG_SPLIT, ARG_PDL,
  ARG_K_SCALE, ARG_V_SCALE, ARG_CACHE_DTYPE, NUM_STORE_ARGS
};
const bool kStoreIsTensor[NUM_STORE_ARGS] = {true, true, true, true, true, false, false, false, false, true, true, false};
const bool kStoreIsOptional[NUM_STORE_ARGS] = {false, true, false, true, false, false, false, false, false, true, true,
                                               false};

void store_kv_cache_kernel(StableIValue *stack, uint64_t num_args, uint64_t num_outputs) {
  if (num_args != NUM_STORE_ARGS || num_outputs != 0)
    throw std::runtime_error("kvjit: store_kv_cache kernel registered under a schema of " + std::to_string(num_args) +
                             " arguments and " + std::to_string(num_outputs) + " returns; it takes 12 and 0");
  CallArgs call(stack, num_args);
  call.adopt(kStoreIsTensor, kStoreIsOptional);
  kvjit_store_request req;
  view_of(call.tensor(ARG_K), &req.k);
  view_of(call.tensor(ARG_V), &req.v);
  view_of(call.tensor(ARG_K_CACHE), &req.k_cache);
  view_of(call.tensor(ARG_V_CACHE), &req.v_cache);
  view_of(call.tensor(ARG_INDICES), &req.indices);
  view_of(call.tensor(ARG_K_SCALE), &req.k_scale);
  view_of(call.tensor(ARG_V_SCALE), &req.v_scale);
  req.num_slots = call.integer(ARG_NUM_SLOTS);
  req.skip_slot = call.integer(ARG_SKIP_SLOT);
  req.split = call.integer(ARG_SPLIT);
  req.pdl = call.integer(ARG_PDL);
  req.cache_dtype = call.integer(ARG_CACHE_DTYPE);

  kvjit_store_kv_args args;
  char msg[512];
  /* The dispatcher picks the CUDA kernel when any tensor is a CUDA one: then all must be. */
  const kvjit_tensor_view *views[] = {&req.k, &req.v, &req.k_cache, &req.v_cache, &req.indices, &req.k_scale,
                                      &req.v_scale};
  bool any_cuda = false;
  for (const kvjit_tensor_view *v : views) any_cuda = any_cuda || (v->present && v->device_type == g_torch.device_cuda);
  kvjit_request_error refused =
      any_cuda ? kvjit_store_request_on_device(&req, g_torch.device_cuda, "CUDA", msg, sizeof msg) : KVJIT_REQUEST_OK;
  if (!refused) refused = kvjit_store_request_args(&req, &args, msg, sizeof msg);
  if (refused) fail_request(refused, msg);
  if (req.k.device_type != g_torch.device_cuda) {
    /* Only reachable when registered for another dispatch key (the tests do, for CPU): an empty
     * store is validated by the library, anything else would hand it host pointers. */
    if (args.batch != 0)
      fail_request(KVJIT_REQUEST_VALUE_ERROR, "k: not a CUDA tensor (kvjit stores run on CUDA tensors)");
    kvjit_status status = g_kvjit.store(g_kvjit.ctx, &args);
    if (status != KVJIT_OK) fail_status(status);
    return;
  }
  if (g_torch.current_cuda_stream == nullptr)
    throw std::runtime_error("kvjit: this torch has no CUDA (aoti_torch_get_current_cuda_stream not found)");
  DeviceGuard guard(req.k.device_index);
  void *stream = nullptr;
  check(g_torch.current_cuda_stream(req.k.device_index, &stream), "aoti_torch_get_current_cuda_stream");
  args.stream = static_cast<struct CUstream_st *>(stream);
  kvjit_status status = g_kvjit.store(g_kvjit.ctx, &args);
  if (status == KVJIT_ERR_NO_DEVICE && make_primary_context_current(req.k.device_index))
    status = g_kvjit.store(g_kvjit.ctx, &args);
  if (status != KVJIT_OK) fail_status(status);
}

/* ---- registration ---------------------------------------------------------------------------- */

class Setup {
 public:
  Setup(char *err, size_t size) : err_(err), size_(size) {}

  __attribute__((format(printf, 2, 3))) bool fail(const char *fmt, ...) {
    if (size_) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(err_, size_, fmt, ap);
      va_end(ap);
    }
    return false;
  }

  void *open(const char *path) {
    /* The copy already loaded by `import torch` / by the kvjit package: never a second one. */
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
    if (h == nullptr) fail("kvjit: %s is not loaded in this process (%s)", path, dlerror());
    return h;
  }

  template <typename F>
  bool sym(void *h, const char *name, F *out, bool required = true) {
    *out = reinterpret_cast<F>(dlsym(h, name));
    if (*out == nullptr && required) return fail("kvjit: symbol %s not found in libtorch or libkvjit (a torch older than 2.10?)", name);
    return true;
  }

 private:
  char *err_;
  size_t size_;
};

bool resolve(const kvjit_torch_setup *s, Setup &setup) {
  void *kv = setup.open(s->libkvjit);
  void *cpu = kv ? setup.open(s->libtorch_cpu) : nullptr;
  if (cpu == nullptr) return false;
  void *cuda = s->libtorch_cuda && *s->libtorch_cuda ? setup.open(s->libtorch_cuda) : nullptr;
  if (s->libtorch_cuda && *s->libtorch_cuda && cuda == nullptr) return false;
  Torch t = {};
  Kvjit k = {};
  int32_t (*device_cuda)(void) = nullptr;
  typedef int32_t (*dtype_fn)(void);
  const char *dtype_names[KVJIT_TENSOR_I64 + 1] = {
      nullptr, "aoti_torch_dtype_float16", "aoti_torch_dtype_bfloat16", "aoti_torch_dtype_float32",
      "aoti_torch_dtype_float8_e4m3fn", "aoti_torch_dtype_float8_e5m2", "aoti_torch_dtype_uint8",
      "aoti_torch_dtype_int8", "aoti_torch_dtype_int32", "aoti_torch_dtype_int64"};
  bool ok = setup.sym(kv, "kvjit_store_kv_cache", &k.store) && setup.sym(kv, "kvjit_last_error", &k.last_error) &&
            setup.sym(kv, "kvjit_status_name", &k.status_name) &&
            setup.sym(cpu, "aoti_torch_get_data_ptr", &t.get_data_ptr) &&
            setup.sym(cpu, "aoti_torch_get_dim", &t.get_dim) && setup.sym(cpu, "aoti_torch_get_sizes", &t.get_sizes) &&
            setup.sym(cpu, "aoti_torch_get_strides", &t.get_strides) &&
            setup.sym(cpu, "aoti_torch_get_dtype", &t.get_dtype) &&
            setup.sym(cpu, "aoti_torch_get_device_type", &t.get_device_type) &&
            setup.sym(cpu, "aoti_torch_get_device_index", &t.get_device_index) &&
            setup.sym(cpu, "aoti_torch_delete_tensor_object", &t.delete_tensor_object) &&
            setup.sym(cpu, "aoti_torch_dtype_element_size", &t.dtype_element_size) &&
            setup.sym(cpu, "aoti_torch_library_init_impl", &t.library_init_impl) &&
            setup.sym(cpu, "aoti_torch_library_impl", &t.library_impl) &&
            setup.sym(cpu, "torch_library_impl", &t.library_impl_versioned, false) &&
            setup.sym(cpu, "aoti_torch_get_current_device_index", &t.current_device_index) &&
            setup.sym(cpu, "aoti_torch_device_type_cuda", &device_cuda);
  for (int kind = KVJIT_TENSOR_F16; ok && kind <= KVJIT_TENSOR_I64; kind++) {
    dtype_fn f = nullptr;
    ok = setup.sym(cpu, dtype_names[kind], &f);
    if (ok) t.dtype_codes[kind] = f();
  }
  if (ok && cuda)
    ok = setup.sym(cuda, "aoti_torch_get_current_cuda_stream", &t.current_cuda_stream) &&
         setup.sym(cuda, "aoti_torch_create_cuda_guard", &t.create_cuda_guard) &&
         setup.sym(cuda, "aoti_torch_delete_cuda_guard", &t.delete_cuda_guard);
  if (!ok) return false;
  t.device_cuda = device_cuda();
  t.dtype_codes[KVJIT_TENSOR_OTHER] = INT32_MIN; /* no real dtype has it */
  k.ctx = static_cast<kvjit_context *>(s->context);
  g_torch = t;
  g_kvjit = k;
  g_ready = true;
  return true;
}

}  // namespace

extern "C" KVJIT_TORCH_API int kvjit_torch_register(const kvjit_torch_setup *s, char *err, size_t err_size) {
  Setup setup(err, err_size);
  if (err_size) err[0] = '\0';
  if (s == nullptr || s->version != KVJIT_TORCH_SETUP_VERSION || !s->libkvjit || !s->libtorch_cpu || !s->ns ||
      !s->dispatch_key || !s->context) {
    setup.fail("kvjit: kvjit_torch_register: bad setup (%s)", s ? "version mismatch or a NULL field" : "NULL");
    return -1;
  }
  try {
    std::lock_guard<std::mutex> hold(g_lock);
    if (g_ready && g_kvjit.ctx != s->context) {
      setup.fail("kvjit: kvjit_torch_register: already registered with another context");
      return -1;
    }
    if (!g_ready && !resolve(s, setup)) return -1;
    TorchLibraryHandle lib = nullptr;
    if (g_torch.library_init_impl(s->ns, s->dispatch_key, __FILE__, __LINE__, &lib) != 0 || lib == nullptr) {
      setup.fail("kvjit: torch.library IMPL for %s/%s could not be created", s->ns, s->dispatch_key);
      return -1;
    }
    /* The library object is never deleted: deleting it would unregister the kernel, and launches
     * (and captured CUDA graphs) may use it until the process exits. */
    AOTITorchError e = g_torch.library_impl_versioned
                           ? g_torch.library_impl_versioned(lib, "store_kv_cache", store_kv_cache_kernel,
                                                            kTorchAbi_2_10)
                           : g_torch.library_impl(lib, "store_kv_cache", store_kv_cache_kernel);
    if (e != 0) {
      setup.fail("kvjit: registering %s::store_kv_cache for %s failed (is the schema defined?)", s->ns,
                 s->dispatch_key);
      return -1;
    }
  } catch (const std::exception &ex) {
    setup.fail("kvjit: kvjit_torch_register: %s", ex.what());
    return -1;
  }
  return 0;
}

extern "C" KVJIT_TORCH_API int kvjit_torch_store_request_args(const kvjit_store_request *req, kvjit_store_kv_args *args,
                                                              char *msg, size_t msg_size) {
  return static_cast<int>(kvjit_store_request_args(req, args, msg, msg_size));
}
