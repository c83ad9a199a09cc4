/*
 * The dispatch floor of torch.ops.kvjit.store_kv_cache: a kernel that does nothing, registered
 * through the same stable C ABI (aoti_torch_library_impl / torch_library_impl, a boxed kernel)
 * under the store's own schema. Timing it against the real op splits the op's host cost into
 * what any such op pays (Python argument parsing, the dispatcher, the autograd fallback, the
 * StableIValue boxing, releasing the tensor handles) and kvjit's own work.
 *
 * C++ for one reason: a present Optional arrives in a box libtorch allocated with new.
 */
#include <dlfcn.h>
#include <stdint.h>

#define BENCH_API extern "C" __attribute__((visibility("default")))

namespace {

typedef uint64_t StableIValue;
typedef int32_t (*library_init_fn)(const char *, const char *, const char *, uint32_t, void **);
typedef void (*boxed_fn)(StableIValue *, uint64_t, uint64_t);
typedef int32_t (*library_impl_fn)(void *, const char *, boxed_fn, uint64_t);
typedef int32_t (*library_impl_old_fn)(void *, const char *, boxed_fn);
typedef int32_t (*delete_tensor_fn)(void *);

delete_tensor_fn g_delete_tensor;

/* The store schema's arguments: 1 a Tensor, 2 a Tensor?, 0 an int (python/csrc/op.cpp). */
const int kStoreArgs[13] = {1, 2, 1, 2, 1, 0, 0, 0, 0, 2, 2, 0, 0};

void store_noop(StableIValue *stack, uint64_t num_args, uint64_t num_outputs) {
  (void)num_outputs;
  for (uint64_t i = 0; i < num_args && i < 13; i++) {
    if (kStoreArgs[i] == 1) {
      g_delete_tensor(reinterpret_cast<void *>(stack[i]));
    } else if (kStoreArgs[i] == 2 && stack[i] != 0) {
      StableIValue *box = reinterpret_cast<StableIValue *>(stack[i]);
      g_delete_tensor(reinterpret_cast<void *>(*box));
      delete box;
    }
  }
}

}  // namespace

/** Register @p ns :: @p name (the store's schema, defined by the caller) as a no-op on @p key. 0 or -1. */
BENCH_API int kvjit_bench_register_store_noop(const char *libtorch_cpu, const char *ns, const char *key,
                                              const char *name);
BENCH_API int kvjit_bench_register_store_noop(const char *libtorch_cpu, const char *ns, const char *key,
                                              const char *name) {
  void *h = dlopen(libtorch_cpu, RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return -1;
  library_init_fn init = reinterpret_cast<library_init_fn>(dlsym(h, "aoti_torch_library_init_impl"));
  library_impl_fn impl = reinterpret_cast<library_impl_fn>(dlsym(h, "torch_library_impl"));
  library_impl_old_fn impl_old = reinterpret_cast<library_impl_old_fn>(dlsym(h, "aoti_torch_library_impl"));
  g_delete_tensor = reinterpret_cast<delete_tensor_fn>(dlsym(h, "aoti_torch_delete_tensor_object"));
  if (!init || !(impl || impl_old) || !g_delete_tensor) return -1;
  void *lib = nullptr;
  /* Never freed, as the op's: freeing it would unregister the kernel. */
  if (init(ns, key, __FILE__, __LINE__, &lib) != 0 || lib == nullptr) return -1;
  const uint64_t abi_2_10 = (2ULL << 56) | (10ULL << 48);
  /* As the op registers (op.cpp): the versioned call where this torch has it. */
  return (impl ? impl(lib, name, store_noop, abi_2_10) : impl_old(lib, name, store_noop)) == 0 ? 0 : -1;
}
