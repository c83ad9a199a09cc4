/* The current device's arch for op calls, remembered (arch.h). */
#include "arch.h"

#include <stdatomic.h>

#include "status.h"

static kvjit_arch_memo process_memo;

/* The capability of device @p dev into @p sm (no error recorded: the caller decides whether a
 * failure is one). */
static CUresult capability_of(kvjit_arch_memo *memo, const kvjit_driver *drv, CUdevice dev, int *sm) {
  const int slot = dev >= 0 && dev < KVJIT_ARCH_MAX_DEVICES;
  if (slot && (*sm = atomic_load_explicit(&memo->device_sm[dev], memory_order_relaxed)) > 0) return CUDA_SUCCESS;
  const CUresult res = kvjit_driver_device_sm(drv, dev, sm);
  if (res != CUDA_SUCCESS) return res;
  if (slot) atomic_store_explicit(&memo->device_sm[dev], *sm, memory_order_relaxed);
  return CUDA_SUCCESS;
}

/* The arch every visible device has, or -1 when they differ or one cannot be read. */
static int uniform_of(kvjit_arch_memo *memo, const kvjit_driver *drv) {
  int count = 0, first = 0;
  if (drv->cuDeviceGetCount(&count) != CUDA_SUCCESS || count <= 0) return -1;
  for (int i = 0; i < count; i++) {
    CUdevice dev = 0;
    int sm = 0;
    if (drv->cuDeviceGet(&dev, i) != CUDA_SUCCESS || capability_of(memo, drv, dev, &sm) != CUDA_SUCCESS || sm <= 0 ||
        (i > 0 && sm != first))
      return -1;
    first = sm;
  }
  return first;
}

kvjit_status kvjit_arch_current_in(kvjit_arch_memo *memo, const kvjit_driver *drv, int *sm) {
  const int uniform = atomic_load_explicit(&memo->uniform_sm, memory_order_relaxed);
  if (uniform > 0) {
    *sm = uniform;
    return KVJIT_OK;
  }
  CUdevice dev = 0;
  CUresult res = drv->cuCtxGetDevice(&dev);
  if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuCtxGetDevice (no current CUDA context?)");
  int found = 0;
  if ((res = capability_of(memo, drv, dev, &found)) != CUDA_SUCCESS)
    return kvjit_cuda_fail(drv, res, "cuDeviceGetAttribute(COMPUTE_CAPABILITY)");
  /* Decided once, with a context current (the driver is up and the devices are what they are). */
  if (uniform == 0) atomic_store_explicit(&memo->uniform_sm, uniform_of(memo, drv), memory_order_relaxed);
  *sm = found;
  return KVJIT_OK;
}

kvjit_status kvjit_arch_current(const kvjit_driver *drv, int *sm) { return kvjit_arch_current_in(&process_memo, drv, sm); }
