/* libkvjit and libcuda for the doors, a device guard and the pinned-memory check. */
#include "door.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "transfer_args.h"

kvjit_door_lib kvjit_door;

#define RESOLVE(handle, field, name)                                                                   \
  do {                                                                                                 \
    *(void **)&lib.field = dlsym(handle, name);                                                        \
    if (lib.field == NULL) {                                                                           \
      snprintf(msg, msg_size, "kvjit._C: %s not found in %s", name, libkvjit_path);                    \
      return -1;                                                                                       \
    }                                                                                                  \
  } while (0)

int kvjit_door_resolve(const char *libkvjit_path, kvjit_context *ctx, char *msg, size_t msg_size) {
  /* The copy the package loaded, never a second one: one library, one context. */
  void *kv = dlopen(libkvjit_path, RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
  if (kv == NULL) {
    snprintf(msg, msg_size, "kvjit._C: %s is not loaded in this process (%s)", libkvjit_path, dlerror());
    return -1;
  }
  kvjit_door_lib lib = {0};
  RESOLVE(kv, store, "kvjit_store_kv_cache");
  RESOLVE(kv, store_prepare, "kvjit_store_kv_cache_prepare");
  RESOLVE(kv, transfer, "kvjit_transfer_kv");
  RESOLVE(kv, transfer_prepare, "kvjit_transfer_kv_prepare");
  RESOLVE(kv, last_error, "kvjit_last_error");
  RESOLVE(kv, status_name, "kvjit_status_name");
  lib.ctx = ctx;
  /* No driver: CUDA tensors cannot exist, and host memory cannot be reached (the check says so). */
  const char *name = getenv("KVJIT_LIBCUDA");
  void *cuda = dlopen(name && *name ? name : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda != NULL) {
    /* Explicit ABI versions: a plain dlsym of cuCtxPushCurrent would be the v1 entry point. */
    *(void **)&lib.ctx_get_device = dlsym(cuda, "cuCtxGetDevice");
    *(void **)&lib.device_get = dlsym(cuda, "cuDeviceGet");
    *(void **)&lib.device_get_count = dlsym(cuda, "cuDeviceGetCount");
    *(void **)&lib.primary_ctx_retain = dlsym(cuda, "cuDevicePrimaryCtxRetain");
    *(void **)&lib.ctx_push = dlsym(cuda, "cuCtxPushCurrent_v2");
    *(void **)&lib.ctx_pop = dlsym(cuda, "cuCtxPopCurrent_v2");
    *(void **)&lib.pointer_attribute = dlsym(cuda, "cuPointerGetAttribute");
  }
  kvjit_door = lib;
  return 0;
}

/* Written and read with relaxed atomics: the doors run under the GIL, the torch op's kernels not. */
int kvjit_door_device_count(void) {
  int n = __atomic_load_n(&kvjit_door.device_count, __ATOMIC_RELAXED), asked = 0;
  if (n == 0 && kvjit_door.device_get_count != NULL && kvjit_door.device_get_count(&asked) == 0 && asked > 0) {
    n = asked;
    __atomic_store_n(&kvjit_door.device_count, n, __ATOMIC_RELAXED);
  }
  return n;
}

int kvjit_door_enter(int device, int without_context, kvjit_door_guard *guard, char *msg, size_t msg_size) {
  guard->pushed = 0;
  int current = -1;
  if (device < 0 || kvjit_door.ctx_get_device == NULL) return 0;
  /* With one device, a current context is on it, and none is left to the library: asking the
   * driver (a call on every store) could only answer "nothing to do". */
  if (!without_context && kvjit_door_device_count() == 1) return 0;
  if (kvjit_door.ctx_get_device(&current) != 0 ? !without_context : current == device) return 0;
  int dev = 0;
  void *ctx = NULL;
  if (kvjit_door.device_get == NULL || kvjit_door.primary_ctx_retain == NULL || kvjit_door.ctx_push == NULL ||
      kvjit_door.device_get(&dev, device) != 0 || kvjit_door.primary_ctx_retain(&ctx, dev) != 0 ||
      kvjit_door.ctx_push(ctx) != 0) {
    snprintf(msg, msg_size, "kvjit: cannot make cuda:%d current (cuda:%d is)", device, current);
    return -1;
  }
  guard->pushed = 1;
  return 0;
}

void kvjit_door_leave(kvjit_door_guard *guard) {
  void *popped = NULL;
  if (guard->pushed) kvjit_door.ctx_pop(&popped);
  guard->pushed = 0;
}

/* cuPointerGetAttribute's attribute and memory type (cuda.h). */
enum { CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2, CU_MEMORYTYPE_HOST = 1 };

static int pinned(uintptr_t ptr) {
  unsigned int type = 0;
  return kvjit_door.pointer_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr) == 0 && type == CU_MEMORYTYPE_HOST;
}

int kvjit_door_check_pinned(const char *name, const kvjit_tensor_view *t, char *msg, size_t msg_size) {
  int64_t extent = kvjit_tensor_view_extent(t);
  if (extent == 0) return 0;
  if (kvjit_door.pointer_attribute == NULL) {
    snprintf(msg, msg_size, "%s: host memory needs a CUDA driver to be reached (libcuda.so.1 not found)", name);
    return -1;
  }
  if (!pinned(t->data) || !pinned(t->data + (uintptr_t)extent - 1)) {
    snprintf(msg, msg_size, "%s: a CPU tensor must be pinned (tensor.pin_memory()) for the GPU to reach it", name);
    return -1;
  }
  return 0;
}
