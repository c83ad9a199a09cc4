/* libcuda through dlopen + cuGetProcAddress_v2, behind pthread_once. */
#include "driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

/* X(symbol, ABI version of its PFN typedef in the table). Only what the library calls: the tests
 * and benchmarks resolve their own entries (tests/gpu_driver.c). */
#define KVJIT_DRIVER_ENTRIES(X)                                                                  \
  X(cuGetErrorName, 6000)                                                                        \
  X(cuDeviceGetCount, 2000)                                                                      \
  X(cuDeviceGet, 2000)                                                                           \
  X(cuDeviceGetName, 2000)                                                                       \
  X(cuDeviceGetAttribute, 2000)                                                                  \
  X(cuCtxGetCurrent, 4000)                                                                       \
  X(cuCtxGetDevice, 2000)                                                                        \
  X(cuCtxGetId, 12000)                                                                           \
  X(cuCtxSetCurrent, 4000)                                                                       \
  X(cuDevicePrimaryCtxRetain, 7000)                                                              \
  X(cuStreamGetCtx, 9020)                                                                        \
  X(cuCtxSynchronize, 2000)                                                                      \
  X(cuLibraryLoadData, 12000)                                                                    \
  X(cuLibraryUnload, 12000)                                                                      \
  X(cuLibraryGetKernel, 12000)                                                                   \
  X(cuKernelGetFunction, 12000)                                                                  \
  X(cuLibraryGetGlobal, 12000)                                                                   \
  X(cuKernelGetAttribute, 12000)                                                                 \
  X(cuLaunchKernelEx, 11060)                                                                     \
  X(cuMemcpyDtoH, 3020)                                                                          \
  X(cuMemsetD32, 3020)                                                                           \
  X(cuCtxPushCurrent, 4000)                                                                      \
  X(cuCtxPopCurrent, 4000)                                                                       \
  X(cuPointerGetAttribute, 4000)                                                                 \
  X(cuDeviceCanAccessPeer, 4000)                                                                 \
  X(cuCtxEnablePeerAccess, 4000)

/* Entries the library can live without (driver.h). */
#define KVJIT_DRIVER_OPTIONAL_ENTRIES(X)                                                         \
  X(cuKernelSetAttribute, 12000)                                                                 \
  X(cuKernelGetParamInfo, 12040)

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static kvjit_driver driver_table;
static kvjit_status driver_status = KVJIT_ERR_NO_DRIVER;
static char driver_reason[256];

static void driver_load(void) {
  const char *lib = getenv("KVJIT_LIBCUDA");
  if (lib == NULL || lib[0] == '\0') lib = "libcuda.so.1";
  /* RTLD_LOCAL: libcuda's symbols stay out of the global namespace; the handle is never closed
   * because the driver cannot be unloaded safely while the process lives. */
  void *handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) {
    const char *why = dlerror();
    snprintf(driver_reason, sizeof driver_reason, "dlopen(\"%s\") failed: %s", lib, why ? why : "unknown");
    return;
  }
  PFN_cuGetProcAddress_v12000 get_proc = (PFN_cuGetProcAddress_v12000)dlsym(handle, "cuGetProcAddress_v2");
  if (get_proc == NULL) {
    snprintf(driver_reason, sizeof driver_reason, "%s has no cuGetProcAddress_v2 (driver older than CUDA 12)", lib);
    return;
  }
  PFN_cuInit_v2000 init = NULL;
  PFN_cuDriverGetVersion_v2020 get_version = NULL;
  CUdriverProcAddressQueryResult found;
  if (get_proc("cuInit", (void **)&init, 2000, CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS ||
      get_proc("cuDriverGetVersion", (void **)&get_version, 2020, CU_GET_PROC_ADDRESS_DEFAULT, &found) !=
          CUDA_SUCCESS) {
    snprintf(driver_reason, sizeof driver_reason, "cuGetProcAddress could not resolve cuInit");
    return;
  }
  if (get_version(&driver_table.version) != CUDA_SUCCESS) driver_table.version = 0;
  if (driver_table.version < 12000) {
    snprintf(driver_reason, sizeof driver_reason, "driver version %d is older than CUDA 12.0", driver_table.version);
    return;
  }
#define KVJIT_RESOLVE_(sym, ver)                                                                 \
  if (get_proc(#sym, (void **)&driver_table.sym, ver, CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS || \
      driver_table.sym == NULL) {                                                                \
    snprintf(driver_reason, sizeof driver_reason, "cuGetProcAddress could not resolve %s (ABI %d)", #sym, ver); \
    return;                                                                                      \
  }
  KVJIT_DRIVER_ENTRIES(KVJIT_RESOLVE_)
#undef KVJIT_RESOLVE_
#define KVJIT_RESOLVE_OPTIONAL_(sym, ver)                                                        \
  if (get_proc(#sym, (void **)&driver_table.sym, ver, CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS || \
      found != CU_GET_PROC_ADDRESS_SUCCESS)                                                      \
    driver_table.sym = NULL;
  KVJIT_DRIVER_OPTIONAL_ENTRIES(KVJIT_RESOLVE_OPTIONAL_)
#undef KVJIT_RESOLVE_OPTIONAL_
  CUresult res = init(0);
  if (res != CUDA_SUCCESS) {
    const char *name = NULL;
    driver_table.cuGetErrorName(res, &name);
    snprintf(driver_reason, sizeof driver_reason, "cuInit failed: %s", name ? name : "unknown error");
    driver_status = res == CUDA_ERROR_NO_DEVICE ? KVJIT_ERR_NO_DEVICE : KVJIT_ERR_NO_DRIVER;
    return;
  }
  driver_status = KVJIT_OK;
}

kvjit_status kvjit_driver_get(const kvjit_driver **out) {
  pthread_once(&driver_once, driver_load);
  if (driver_status != KVJIT_OK) {
    *out = NULL;
    return kvjit_fail(driver_status, "%s: %s", kvjit_status_string(driver_status), driver_reason);
  }
  *out = &driver_table;
  return KVJIT_OK;
}

kvjit_status kvjit_cuda_fail(const kvjit_driver *drv, CUresult res, const char *what) {
  const char *name = NULL;
  if (drv->cuGetErrorName(res, &name) != CUDA_SUCCESS || name == NULL) name = "unknown CUresult";
  kvjit_status st = KVJIT_ERR_CUDA;
  if (res == CUDA_ERROR_INVALID_CONTEXT || res == CUDA_ERROR_NO_DEVICE) st = KVJIT_ERR_NO_DEVICE;
  if (res == CUDA_ERROR_NOT_SUPPORTED) st = KVJIT_ERR_UNSUPPORTED;
  return kvjit_fail(st, "%s: %s (%d)", what, name, (int)res);
}

CUresult kvjit_driver_device_sm(const kvjit_driver *drv, CUdevice dev, int *sm) {
  int major = 0, minor = 0;
  CUresult res = drv->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  if (res == CUDA_SUCCESS) res = drv->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  if (res == CUDA_SUCCESS) *sm = major * 10 + minor;
  return res;
}

kvjit_status kvjit_driver_current_sm(const kvjit_driver *drv, int *sm, CUdevice *device) {
  CUdevice dev = 0;
  CUcontext cur = NULL;
  CUresult res = drv->cuCtxGetCurrent(&cur);
  if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuCtxGetCurrent");
  if (cur != NULL) {
    res = drv->cuCtxGetDevice(&dev);
    if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuCtxGetDevice");
  } else {
    int count = 0;
    res = drv->cuDeviceGetCount(&count);
    if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuDeviceGetCount");
    if (count == 0) return kvjit_fail(KVJIT_ERR_NO_DEVICE, "no CUDA device: cuDeviceGetCount returned 0");
    res = drv->cuDeviceGet(&dev, 0);
    if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuDeviceGet(0)");
  }
  res = kvjit_driver_device_sm(drv, dev, sm);
  if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuDeviceGetAttribute(COMPUTE_CAPABILITY)");
  if (device) *device = dev;
  return KVJIT_OK;
}

kvjit_status kvjit_driver_version(int *version) {
  if (version == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "version is NULL");
  const kvjit_driver *drv;
  kvjit_status st = kvjit_driver_get(&drv);
  if (st != KVJIT_OK) return st;
  *version = drv->version;
  return KVJIT_OK;
}

kvjit_status kvjit_device_count(int *count) {
  if (count == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "count is NULL");
  const kvjit_driver *drv;
  kvjit_status st = kvjit_driver_get(&drv);
  if (st != KVJIT_OK) return st;
  CUresult res = drv->cuDeviceGetCount(count);
  return res == CUDA_SUCCESS ? KVJIT_OK : kvjit_cuda_fail(drv, res, "cuDeviceGetCount");
}

kvjit_status kvjit_device_info(int ordinal, char *name, size_t capacity, int *sm) {
  const kvjit_driver *drv;
  kvjit_status st = kvjit_driver_get(&drv);
  if (st != KVJIT_OK) return st;
  CUdevice dev;
  CUresult res = drv->cuDeviceGet(&dev, ordinal);
  if (res != CUDA_SUCCESS) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ordinal %d: cuDeviceGet failed (%d)", ordinal, (int)res);
  }
  if (name != NULL && capacity > 0) {
    res = drv->cuDeviceGetName(name, (int)(capacity > 4096 ? 4096 : capacity), dev);
    if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuDeviceGetName");
    name[capacity - 1] = '\0';
  }
  if (sm != NULL) {
    res = kvjit_driver_device_sm(drv, dev, sm);
    if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuDeviceGetAttribute");
  }
  return KVJIT_OK;
}

kvjit_status kvjit_current_sm(int *sm) {
  if (sm == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "sm is NULL");
  const kvjit_driver *drv;
  kvjit_status st = kvjit_driver_get(&drv);
  if (st != KVJIT_OK) return st;
  return kvjit_driver_current_sm(drv, sm, NULL);
}

/* A thread that has made no CUDA call has no current context (a Python thread, a worker pool):
 * make the stream's context current, else device 0's primary one (the CUDA runtime's default, so
 * torch's and every framework's). Only when there is none: a caller's own context is never
 * replaced. KVJIT_OK when one was made current. */
kvjit_status kvjit_driver_adopt_context(const kvjit_driver *drv, struct CUstream_st *stream) {
  CUcontext cur = NULL, ctx = NULL;
  if (drv->cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur != NULL) return KVJIT_ERR_NO_DEVICE;
  /* The legacy and per-thread default streams name no context of their own. */
  if (!kvjit_stream_is_named(stream) || drv->cuStreamGetCtx((CUstream)stream, &ctx) != CUDA_SUCCESS || ctx == NULL) {
    CUdevice dev = 0;
    if (drv->cuDeviceGet(&dev, 0) != CUDA_SUCCESS || drv->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS)
      return KVJIT_ERR_NO_DEVICE;
  }
  return drv->cuCtxSetCurrent(ctx) == CUDA_SUCCESS ? KVJIT_OK : KVJIT_ERR_NO_DEVICE;
}
