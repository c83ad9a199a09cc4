/*
 * The CUDA driver, loaded at run time: dlopen("libcuda.so.1") and every entry point through
 * cuGetProcAddress with the ABI version of its PFN_*_vNNNNN typedef, once per process.
 * libcuda is never linked, so kvjit and its CLI run where there is no driver.
 */
#ifndef KVJIT_DRIVER_H
#define KVJIT_DRIVER_H

#include <cuda.h>
#include <cudaTypedefs.h>

#include "kvjit_tools.h"

typedef struct kvjit_driver {
  int version; /* cuDriverGetVersion */
  PFN_cuGetErrorName_v6000 cuGetErrorName;
  PFN_cuDeviceGetCount_v2000 cuDeviceGetCount;
  PFN_cuDeviceGet_v2000 cuDeviceGet;
  PFN_cuDeviceGetName_v2000 cuDeviceGetName;
  PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute;
  PFN_cuCtxGetCurrent_v4000 cuCtxGetCurrent;
  PFN_cuCtxGetDevice_v2000 cuCtxGetDevice;
  PFN_cuCtxGetId_v12000 cuCtxGetId;
  PFN_cuCtxSetCurrent_v4000 cuCtxSetCurrent;
  PFN_cuDevicePrimaryCtxRetain_v7000 cuDevicePrimaryCtxRetain;
  PFN_cuStreamGetCtx_v9020 cuStreamGetCtx;
  PFN_cuCtxSynchronize_v2000 cuCtxSynchronize;
  PFN_cuLibraryLoadData_v12000 cuLibraryLoadData;
  PFN_cuLibraryUnload_v12000 cuLibraryUnload;
  PFN_cuLibraryGetKernel_v12000 cuLibraryGetKernel;
  PFN_cuKernelGetFunction_v12000 cuKernelGetFunction;
  PFN_cuLibraryGetGlobal_v12000 cuLibraryGetGlobal;
  PFN_cuKernelGetAttribute_v12000 cuKernelGetAttribute;
  PFN_cuLaunchKernelEx_v11060 cuLaunchKernelEx;
  PFN_cuMemcpyDtoH_v3020 cuMemcpyDtoH;
  PFN_cuMemsetD32_v3020 cuMemsetD32;
  /* Caches on other devices (peer.c). */
  PFN_cuCtxPushCurrent_v4000 cuCtxPushCurrent;
  PFN_cuCtxPopCurrent_v4000 cuCtxPopCurrent;
  PFN_cuPointerGetAttribute_v4000 cuPointerGetAttribute;
  PFN_cuDeviceCanAccessPeer_v4000 cuDeviceCanAccessPeer;
  PFN_cuCtxEnablePeerAccess_v4000 cuCtxEnablePeerAccess;
  /* Optional: NULL when the driver lacks them; only the features that need them then report
   * KVJIT_ERR_UNSUPPORTED. */
  PFN_cuKernelSetAttribute_v12000 cuKernelSetAttribute;
  PFN_cuKernelGetParamInfo_v12040 cuKernelGetParamInfo;
} kvjit_driver;

/**
 * The process-wide driver table, loaded and initialised (cuInit) on first use, thread-safely.
 * @return KVJIT_ERR_NO_DRIVER (with the reason in the last error) when libcuda cannot be used.
 */
kvjit_status kvjit_driver_get(const kvjit_driver **out);

/** Turn a CUresult into a status with a last-error line "what: CUDA_ERROR_X". */
kvjit_status kvjit_cuda_fail(const kvjit_driver *drv, CUresult res, const char *what);

/** Compute capability (e.g. 90) of device @p dev into @p sm: the driver's answer, unrecorded. */
CUresult kvjit_driver_device_sm(const kvjit_driver *drv, CUdevice dev, int *sm);

/** Compute capability (e.g. 90) of the current context's device, or device 0 without one. */
kvjit_status kvjit_driver_current_sm(const kvjit_driver *drv, int *sm, CUdevice *device);

/** Whether @p stream names a context of its own: not NULL, the legacy or the per-thread default stream. */
static inline int kvjit_stream_is_named(struct CUstream_st *stream) {
  return stream != NULL && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD;
}

/** The context a launch on @p stream runs in: the stream's own (cuStreamGetCtx), else the thread's
 *  current one (cuCtxGetCurrent; NULL when it has none). The driver's answer, unrecorded. */
static inline CUresult kvjit_driver_launch_context(const kvjit_driver *drv, struct CUstream_st *stream,
                                                   CUcontext *out) {
  return kvjit_stream_is_named(stream) ? drv->cuStreamGetCtx((CUstream)stream, out) : drv->cuCtxGetCurrent(out);
}

/**
 * For a call that found no current context: make @p stream's context current, else device 0's
 * primary one, once for this thread. KVJIT_OK when one was made current; KVJIT_ERR_NO_DEVICE when
 * the thread already has a context (never replaced) or none can be made current.
 */
kvjit_status kvjit_driver_adopt_context(const kvjit_driver *drv, struct CUstream_st *stream);

#endif
