/*
 * kvjit::store_kv_cache as a PyTorch operator kernel, through PyTorch's stable C ABI.
 *
 * No torch header or library is needed to build this: the few shim functions used (tensor
 * accessors, the current CUDA stream, a CUDA device guard, torch::Library registration) are C
 * functions exported by libtorch_cpu / libtorch_cuda, resolved with dlsym from the copies
 * `import torch` already loaded (RTLD_NOLOAD). libkvjit is the module's (door.c): the copy
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

#include "door.h"
#include "kvjit.h"
#include "op_glue.h"
#include "store_args.h"
#include "torch_op.h"
#include "transfer_args.h"

namespace kvjit_torch {

/* Set once under g_lock by the first registration, read-only afterwards (kernels run only once a
 * registration has succeeded, which happens-after the writes). */
Torch g_torch;
bool g_ready = false;
std::mutex g_lock;

/* ---- the kernel ------------------------------------------------------------------------------- */

void check(AOTITorchError err, const char *what) {
  if (err != 0) throw std::runtime_error(std::string("kvjit: torch shim call failed: ") + what);
}

kvjit_tensor_kind kind_of(int32_t code) {
  if (code >= 0 && code < 64) return static_cast<kvjit_tensor_kind>(g_torch.kind_by_code[code]);
  for (int kind = KVJIT_TENSOR_F16; kind < KVJIT_TENSOR_KIND_COUNT; kind++)
    if (g_torch.dtype_codes[kind] == code) return static_cast<kvjit_tensor_kind>(kind);
  return KVJIT_TENSOR_OTHER;
}

/* Six shim calls per tensor (the element size comes from a table filled at registration; the
 * device index is asked of CUDA tensors only: nothing compares a CPU tensor's). */
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
  out->device_index = -1;
  if (out->device_type == g_torch.device_cuda)
    check(g_torch.get_device_index(t, &out->device_index), "aoti_torch_get_device_index");
  out->present = 1;
  out->data = reinterpret_cast<uintptr_t>(data);
  out->sizes = sizes;
  out->strides = strides;
  out->kind = kind_of(out->code);
  out->itemsize = g_torch.itemsizes[out->kind];
  if (out->itemsize == 0) out->itemsize = static_cast<int64_t>(g_torch.dtype_element_size(out->code));
}

[[noreturn]] void fail_request(kvjit_request_error kind, const char *msg) {
  throw std::runtime_error(std::string(kind == KVJIT_REQUEST_TYPE_ERROR ? "kvjit TypeError: " : "kvjit ValueError: ") +
                           msg);
}

[[noreturn]] void fail_status(kvjit_status status) {
  throw std::runtime_error(std::string("kvjit ") + kvjit_door.status_name(status) + ": " + kvjit_door.last_error());
}

bool any_on(const kvjit_store_request &req, int32_t device_type) {
  const kvjit_tensor_view *views[] = {&req.k, &req.v, &req.k_cache, &req.v_cache, &req.indices, &req.k_scale,
                                      &req.v_scale};
  for (const kvjit_tensor_view *v : views)
    if (v->present && v->device_type == device_type) return true;
  return false;
}

/* Schema: (Tensor k, Tensor? v, Tensor(a!) k_cache, Tensor(b!)? v_cache, Tensor indices, int num_slots,
 *          int skip_slot, int split, int pdl, Tensor? k_scale, Tensor? v_scale, int cache_dtype,
 *          int layout) -> () */
enum {
  ARG_K, ARG_V, ARG_K_CACHE, ARG_V_CACHE, ARG_INDICES, ARG_NUM_SLOTS, ARG_SKIP_SLOT, ARG_SPLIT, ARG_PDL,
  ARG_K_SCALE, ARG_V_SCALE, ARG_CACHE_DTYPE, ARG_LAYOUT, NUM_STORE_ARGS
};
const bool kStoreIsTensor[NUM_STORE_ARGS] = {true,  true,  true,  true, true,  false, false,
                                             false, false, true, true, false, false};
const bool kStoreIsOptional[NUM_STORE_ARGS] = {false, true,  false, true, false, false, false,
                                               false, false, true,  true, false, false};

void store_kv_cache_kernel(StableIValue *stack, uint64_t num_args, uint64_t num_outputs) {
  if (num_args != NUM_STORE_ARGS || num_outputs != 0)
    throw std::runtime_error("kvjit: store_kv_cache kernel registered under a schema of " + std::to_string(num_args) +
                             " arguments and " + std::to_string(num_outputs) + " returns; it takes 13 and 0");
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
  req.layout = call.integer(ARG_LAYOUT);

  kvjit_store_kv_args args;
  kvjit_store_layouts layouts; /* what args' layout pointers point at */
  char msg[512];
  /* The dispatcher picks the CUDA kernel when any tensor is a CUDA one: then all must be. None
   * is when this kernel is registered for another key (the tests' CPU). */
  kvjit_request_error refused = kvjit_store_request_on_device(&req, g_torch.device_cuda, "CUDA", nullptr, 0);
  if (refused && !any_on(req, g_torch.device_cuda)) refused = KVJIT_REQUEST_OK;
  if (refused) kvjit_store_request_on_device(&req, g_torch.device_cuda, "CUDA", msg, sizeof msg); /* its words */
  if (!refused) refused = kvjit_store_request_args(&req, &args, &layouts, msg, sizeof msg);
  if (refused) fail_request(refused, msg);
  if (req.k.device_type != g_torch.device_cuda) {
    /* Only reachable when registered for another dispatch key (the tests do, for CPU): an empty
     * store is validated by the library, anything else would hand it host pointers. */
    if (args.batch != 0)
      fail_request(KVJIT_REQUEST_VALUE_ERROR, "k: not a CUDA tensor (kvjit stores run on CUDA tensors)");
    kvjit_status status = kvjit_door.store(kvjit_door.ctx, &args);
    if (status != KVJIT_OK) fail_status(status);
    return;
  }
  if (g_torch.current_cuda_stream == nullptr)
    throw std::runtime_error("kvjit: this torch has no CUDA (aoti_torch_get_current_cuda_stream not found)");
  DeviceGuard guard(req.k.device_index);
  void *stream = nullptr;
  check(g_torch.current_cuda_stream(req.k.device_index, &stream), "aoti_torch_get_current_cuda_stream");
  args.stream = static_cast<struct CUstream_st *>(stream);
  kvjit_status status = kvjit_door.store(kvjit_door.ctx, &args);
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
  void *cpu = setup.open(s->libtorch_cpu);
  if (cpu == nullptr) return false;
  void *cuda = s->libtorch_cuda && *s->libtorch_cuda ? setup.open(s->libtorch_cuda) : nullptr;
  if (s->libtorch_cuda && *s->libtorch_cuda && cuda == nullptr) return false;
  Torch t = {};
  int32_t (*device_cuda)(void) = nullptr;
  typedef int32_t (*dtype_fn)(void);
  /* The shim's dtype constructors, by kind: those kvjit has rules for are required, the named-only
   * ones are looked up when this torch has them (a refusal then names the type). */
  const char *dtype_names[KVJIT_TENSOR_KIND_COUNT] = {
      nullptr, "aoti_torch_dtype_float16", "aoti_torch_dtype_bfloat16", "aoti_torch_dtype_float32",
      "aoti_torch_dtype_float8_e4m3fn", "aoti_torch_dtype_float8_e5m2", "aoti_torch_dtype_uint8",
      "aoti_torch_dtype_int8", "aoti_torch_dtype_int32", "aoti_torch_dtype_int64", "aoti_torch_dtype_float64",
      "aoti_torch_dtype_int16", "aoti_torch_dtype_uint16", "aoti_torch_dtype_uint32", "aoti_torch_dtype_uint64",
      "aoti_torch_dtype_bool", "aoti_torch_dtype_complex32", "aoti_torch_dtype_complex64",
      "aoti_torch_dtype_complex128", "aoti_torch_dtype_float8_e4m3fnuz", "aoti_torch_dtype_float8_e5m2fnuz",
      "torch_dtype_float8_e8m0fnu", "torch_dtype_float4_e2m1fn_x2"};
  bool ok = setup.sym(cpu, "aoti_torch_get_data_ptr", &t.get_data_ptr) &&
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
  t.dtype_codes[KVJIT_TENSOR_OTHER] = INT32_MIN; /* no real dtype has it */
  for (int kind = KVJIT_TENSOR_F16; ok && kind < KVJIT_TENSOR_KIND_COUNT; kind++) {
    dtype_fn f = nullptr;
    ok = setup.sym(cpu, dtype_names[kind], &f, kind <= KVJIT_TENSOR_I64);
    t.dtype_codes[kind] = f ? f() : INT32_MIN;
    t.itemsizes[kind] = f ? static_cast<int64_t>(t.dtype_element_size(t.dtype_codes[kind])) : 0;
    if (f && t.dtype_codes[kind] >= 0 && t.dtype_codes[kind] < 64)
      t.kind_by_code[t.dtype_codes[kind]] = static_cast<uint8_t>(kind);
  }
  if (ok && cuda)
    ok = setup.sym(cuda, "aoti_torch_get_current_cuda_stream", &t.current_cuda_stream) &&
         setup.sym(cuda, "aoti_torch_create_cuda_guard", &t.create_cuda_guard) &&
         setup.sym(cuda, "aoti_torch_delete_cuda_guard", &t.delete_cuda_guard);
  if (!ok) return false;
  t.device_cuda = device_cuda();
  g_torch = t;
  g_ready = true;
  return true;
}

/* Register @p kernel for @p ns :: @p name (its schema defined by the caller) in @p lib. */
bool register_kernel(Setup &setup, TorchLibraryHandle lib, const kvjit_torch_setup *s, const char *name,
                     BoxedKernel kernel) {
  AOTITorchError e = g_torch.library_impl_versioned ? g_torch.library_impl_versioned(lib, name, kernel, kTorchAbi_2_10)
                                                    : g_torch.library_impl(lib, name, kernel);
  if (e != 0)
    return setup.fail("kvjit: registering %s::%s for %s failed (is the schema defined?)", s->ns, name,
                      s->dispatch_key);
  return true;
}

}  // namespace kvjit_torch

using namespace kvjit_torch;

extern "C" KVJIT_TORCH_API int kvjit_torch_register(const kvjit_torch_setup *s, char *err, size_t err_size) {
  Setup setup(err, err_size);
  if (err_size) err[0] = '\0';
  if (s == nullptr || s->version != KVJIT_TORCH_SETUP_VERSION || !s->libtorch_cpu || !s->ns || !s->dispatch_key ||
      kvjit_door.ctx == nullptr) {
    setup.fail("kvjit: kvjit_torch_register: bad setup (%s)", s ? "version mismatch or a NULL field" : "NULL");
    return -1;
  }
  try {
    std::lock_guard<std::mutex> hold(g_lock);
    if (!g_ready && !resolve(s, setup)) return -1;
    TorchLibraryHandle lib = nullptr;
    if (g_torch.library_init_impl(s->ns, s->dispatch_key, __FILE__, __LINE__, &lib) != 0 || lib == nullptr) {
      setup.fail("kvjit: torch.library IMPL for %s/%s could not be created", s->ns, s->dispatch_key);
      return -1;
    }
    /* The library object is never deleted: deleting it would unregister the kernels, and launches
     * (and captured CUDA graphs) may use them until the process exits. */
    if (!register_kernel(setup, lib, s, "store_kv_cache", store_kv_cache_kernel) ||
        !register_kernel(setup, lib, s, "transfer_kv", transfer_kv_kernel))
      return -1;
  } catch (const std::exception &ex) {
    setup.fail("kvjit: kvjit_torch_register: %s", ex.what());
    return -1;
  }
  return 0;
}
