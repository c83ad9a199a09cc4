/* Device pointers against the launching context's device: peer links, access, enabling it. */
#include "peer.h"

#include "status.h"

/* The context a launch on @p stream runs in: the stream's own, else the thread's current one. */
static kvjit_status launch_context(const kvjit_driver *drv, struct CUstream_st *stream, CUcontext *out) {
  CUresult res = kvjit_driver_launch_context(drv, stream, out);
  if (res != CUDA_SUCCESS)
    return kvjit_cuda_fail(drv, res, kvjit_stream_is_named(stream) ? "stream: cuStreamGetCtx" : "cuCtxGetCurrent");
  if (*out == NULL) return kvjit_fail(KVJIT_ERR_NO_DEVICE, "stream: NULL and the thread has no current CUDA context");
  return KVJIT_OK;
}

/* Peer access of the current context to @p owner's memory; already enabled counts as done. */
static kvjit_status enable_peer(const kvjit_driver *drv, const kvjit_peer_pointer *p, int launch_dev, int owner_dev) {
  CUcontext owner = NULL;
  CUresult res = drv->cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, (CUdeviceptr)(uintptr_t)p->ptr);
  if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuPointerGetAttribute(CONTEXT)");
  /* Memory of no context (cuMemCreate + cuMemMap) is reached through cuMemSetAccess, the owner's
   * call: kvjit cannot grant it, the access check below tells. */
  if (owner == NULL) return KVJIT_OK;
  res = drv->cuCtxEnablePeerAccess(owner, 0);
  if (res == CUDA_SUCCESS || res == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) return KVJIT_OK;
  const char *why = NULL;
  if (drv->cuGetErrorName(res, &why) != CUDA_SUCCESS || why == NULL) why = "unknown CUresult";
  return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: on device %d, peer access from device %d could not be enabled: %s",
                    p->name, owner_dev, launch_dev, why);
}

static kvjit_status check_one(const kvjit_driver *drv, const kvjit_peer_pointer *p, CUdevice launch_dev, int enable) {
  const CUdeviceptr ptr = (CUdeviceptr)(uintptr_t)p->ptr;
  unsigned int type = 0;
  int owner_dev = -1;
  CUresult res = drv->cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr);
  /* Pinned host memory: every device reaches it through unified addressing. */
  if (res == CUDA_SUCCESS && type == CU_MEMORYTYPE_HOST) return KVJIT_OK;
  if (res == CUDA_SUCCESS) res = drv->cuPointerGetAttribute(&owner_dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr);
  if (res != CUDA_SUCCESS) {
    const char *why = NULL;
    if (drv->cuGetErrorName(res, &why) != CUDA_SUCCESS || why == NULL) why = "unknown CUresult";
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: %p is not memory the CUDA driver knows (%s)", p->name, p->ptr,
                      why);
  }
  if (owner_dev == (int)launch_dev) return KVJIT_OK;
  int can = 0;
  res = drv->cuDeviceCanAccessPeer(&can, launch_dev, (CUdevice)owner_dev);
  if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuDeviceCanAccessPeer");
  if (!can) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "%s: on device %d, which the launch's device %d cannot reach (cuDeviceCanAccessPeer: no)",
                      p->name, owner_dev, (int)launch_dev);
  }
  if (enable) {
    kvjit_status st = enable_peer(drv, p, (int)launch_dev, owner_dev);
    if (st != KVJIT_OK) return st;
  }
  /* Whether this context may use the pointer, the way libcu++'s is_pointer_accessible asks it
   * (NVIDIA/cccl#9478): cuDeviceCanAccessPeer only says the link exists; the device address the
   * current context would use exists only once peer access (or a cuMemSetAccess grant) is on. */
  CUdeviceptr mapped = 0;
  if (drv->cuPointerGetAttribute(&mapped, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, ptr) != CUDA_SUCCESS || mapped == 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "%s: on device %d, which the launch's device %d may not access (peer access not enabled; "
                      "enable it, or pass KVJIT_TRANSFER_KV_ENABLE_PEER_ACCESS)",
                      p->name, owner_dev, (int)launch_dev);
  }
  return KVJIT_OK;
}

kvjit_status kvjit_peer_check(const kvjit_driver *drv, struct CUstream_st *stream, const kvjit_peer_pointer *pointers,
                              size_t count, int enable) {
  CUcontext launch = NULL;
  kvjit_status st = launch_context(drv, stream, &launch);
  if (st != KVJIT_OK) return st;
  /* Access flags and peer enabling are the current context's: make it the launch's meanwhile. */
  CUresult res = drv->cuCtxPushCurrent(launch);
  if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuCtxPushCurrent");
  CUdevice launch_dev = 0;
  res = drv->cuCtxGetDevice(&launch_dev);
  st = res == CUDA_SUCCESS ? KVJIT_OK : kvjit_cuda_fail(drv, res, "cuCtxGetDevice");
  for (size_t i = 0; st == KVJIT_OK && i < count; i++) st = check_one(drv, &pointers[i], launch_dev, enable);
  CUcontext popped = NULL;
  res = drv->cuCtxPopCurrent(&popped);
  if (st == KVJIT_OK && res != CUDA_SUCCESS) st = kvjit_cuda_fail(drv, res, "cuCtxPopCurrent");
  return st;
}
