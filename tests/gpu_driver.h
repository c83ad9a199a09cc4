/*
 * The CUDA driver entries the GPU tests and the benchmarks call. kvjit's own table
 * holds only what the library calls; these programs resolve the rest themselves,
 * from the libcuda kvjit loaded, through cuGetProcAddress_v2 with each PFN typedef's ABI version.
 */
#ifndef KVJIT_TEST_GPU_DRIVER_H
#define KVJIT_TEST_GPU_DRIVER_H

#include <cuda.h>
#include <cudaTypedefs.h>

#include "kvjit.h"
#include "kvjit_tools.h"

/* X(symbol, ABI version of its PFN typedef) */
#define GPU_DRIVER_ENTRIES(X)                                                                    \
  X(cuGetErrorName, 6000)                                                                        \
  X(cuDeviceGetCount, 2000)                                                                      \
  X(cuDeviceGet, 2000)                                                                           \
  X(cuDeviceGetName, 2000)                                                                       \
  X(cuDeviceGetAttribute, 2000)                                                                  \
  X(cuCtxGetCurrent, 4000)                                                                       \
  X(cuCtxSetCurrent, 4000)                                                                       \
  X(cuCtxGetDevice, 2000)                                                                        \
  X(cuCtxSynchronize, 2000)                                                                      \
  X(cuDevicePrimaryCtxRetain, 7000)                                                              \
  X(cuDevicePrimaryCtxRelease, 11000)                                                            \
  X(cuCtxCreate, 3020)                                                                           \
  X(cuCtxDestroy, 4000)                                                                          \
  X(cuKernelGetAttribute, 12000)                                                                 \
  X(cuLaunchKernelEx, 11060)                                                                     \
  X(cuMemAlloc, 3020)                                                                            \
  X(cuMemFree, 3020)                                                                             \
  X(cuMemHostAlloc, 2020)                                                                        \
  X(cuMemFreeHost, 2000)                                                                         \
  X(cuMemcpyHtoD, 3020)                                                                          \
  X(cuMemcpyDtoH, 3020)                                                                          \
  X(cuMemcpyDtoD, 3020)                                                                          \
  X(cuMemcpyAsync, 4000)                                                                         \
  X(cuMemcpyHtoDAsync, 3020)                                                                     \
  X(cuMemcpyDtoHAsync, 3020)                                                                     \
  X(cuMemcpyDtoDAsync, 3020)                                                                     \
  X(cuMemsetD8, 3020)                                                                            \
  X(cuMemsetD32, 3020)                                                                           \
  X(cuStreamCreate, 2000)                                                                        \
  X(cuStreamDestroy, 4000)                                                                       \
  X(cuStreamSynchronize, 2000)                                                                   \
  X(cuStreamBeginCapture, 10010)                                                                 \
  X(cuStreamEndCapture, 10000)                                                                   \
  X(cuGraphInstantiateWithFlags, 11040)                                                          \
  X(cuGraphLaunch, 10000)                                                                        \
  X(cuGraphExecDestroy, 10000)                                                                   \
  X(cuGraphDestroy, 10000)                                                                       \
  X(cuEventCreate, 2000)                                                                         \
  X(cuEventDestroy, 4000)                                                                        \
  X(cuEventRecord, 2000)                                                                         \
  X(cuEventSynchronize, 2000)                                                                    \
  X(cuEventElapsedTime, 2000)                                                                    \
  X(cuDeviceCanAccessPeer, 4000)

typedef struct gpu_driver {
  int version; /* cuDriverGetVersion */
#define GPU_DRIVER_FIELD_(sym, ver) PFN_##sym##_v##ver sym;
  GPU_DRIVER_ENTRIES(GPU_DRIVER_FIELD_)
#undef GPU_DRIVER_FIELD_
} gpu_driver;

/**
 * The table, resolved once (thread-safe) after kvjit_driver_version() succeeded, from the same
 * libcuda. @return kvjit_driver_version()'s status without a driver; KVJIT_ERR_UNSUPPORTED when
 * one entry is missing. Why, in either case: gpu_driver_error().
 */
kvjit_status gpu_driver_get(const gpu_driver **out);

/** Why gpu_driver_get() failed ("" when it did not): a static string. */
const char *gpu_driver_error(void);

#endif
