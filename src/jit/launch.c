/*
 * Kernels of loaded programs: launches (cuLaunchKernelEx with PDL, clusters, cooperative launch,
 * priority and an argument-count check), attributes per device, parameter layouts, and the
 * programs' __device__ globals.
 */
#include "launch.h"

#include <stdio.h>
#include <string.h>

#include "driver.h"
#include "program.h"
#include "status.h"

/* kvjit.h cannot include cuda.h, so its attribute numbers are the driver's, checked here. */
_Static_assert(KVJIT_KERNEL_MAX_THREADS_PER_BLOCK == (int)CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "attr");
_Static_assert(KVJIT_KERNEL_SHARED_SIZE_BYTES == (int)CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, "attr");
_Static_assert(KVJIT_KERNEL_CONST_SIZE_BYTES == (int)CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, "attr");
_Static_assert(KVJIT_KERNEL_LOCAL_SIZE_BYTES == (int)CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, "attr");
_Static_assert(KVJIT_KERNEL_NUM_REGS == (int)CU_FUNC_ATTRIBUTE_NUM_REGS, "attr");
_Static_assert(KVJIT_KERNEL_PTX_VERSION == (int)CU_FUNC_ATTRIBUTE_PTX_VERSION, "attr");
_Static_assert(KVJIT_KERNEL_BINARY_VERSION == (int)CU_FUNC_ATTRIBUTE_BINARY_VERSION, "attr");
_Static_assert(KVJIT_KERNEL_CACHE_MODE_CA == (int)CU_FUNC_ATTRIBUTE_CACHE_MODE_CA, "attr");
_Static_assert(KVJIT_KERNEL_MAX_DYNAMIC_SHARED_SIZE_BYTES == (int)CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
               "attr");
_Static_assert(KVJIT_KERNEL_PREFERRED_SHARED_MEMORY_CARVEOUT == (int)CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
               "attr");
_Static_assert(KVJIT_KERNEL_CLUSTER_SIZE_MUST_BE_SET == (int)CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET, "attr");
_Static_assert(KVJIT_KERNEL_REQUIRED_CLUSTER_WIDTH == (int)CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, "attr");
_Static_assert(KVJIT_KERNEL_REQUIRED_CLUSTER_HEIGHT == (int)CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT, "attr");
_Static_assert(KVJIT_KERNEL_REQUIRED_CLUSTER_DEPTH == (int)CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH, "attr");
_Static_assert(KVJIT_KERNEL_NON_PORTABLE_CLUSTER_SIZE_ALLOWED ==
                   (int)CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
               "attr");
_Static_assert(KVJIT_KERNEL_CLUSTER_SCHEDULING_POLICY_PREFERENCE ==
                   (int)CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
               "attr");

/* ---- parameters ----------------------------------------------------------------------------- */

/* Parameters a kernel takes, asked once (cuKernelGetParamInfo until it runs out). */
static int param_count(const kvjit_driver *drv, kvjit_kernel *kernel) {
  int n = atomic_load_explicit(&kernel->num_params, memory_order_relaxed);
  if (n != KVJIT_KERNEL_PARAMS_UNKNOWN) return n;
  if (drv->cuKernelGetParamInfo == NULL) {
    n = KVJIT_KERNEL_PARAMS_UNAVAILABLE;
  } else {
    /* A kernel takes at most 32764 bytes of parameters, so at most that many. */
    size_t offset, size;
    for (n = 0; n < 32764 && drv->cuKernelGetParamInfo(kernel->handle, (size_t)n, &offset, &size) == CUDA_SUCCESS; n++) {
    }
  }
  atomic_store_explicit(&kernel->num_params, n, memory_order_relaxed);
  return n;
}

kvjit_status kvjit_kernel_num_params(const kvjit_kernel *kernel, size_t *count) {
  if (kernel == NULL || count == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "kernel or count is NULL");
  const kvjit_driver *drv;
  kvjit_status st = kvjit_driver_get(&drv);
  if (st != KVJIT_OK) return st;
  int n = param_count(drv, (kvjit_kernel *)(uintptr_t)kernel);
  if (n < 0) return kvjit_fail(KVJIT_ERR_UNSUPPORTED, "parameter layouts need a CUDA 12.4 or newer driver");
  *count = (size_t)n;
  return KVJIT_OK;
}

kvjit_status kvjit_kernel_param_info(const kvjit_kernel *kernel, size_t index, size_t *offset, size_t *bytes) {
  if (kernel == NULL || offset == NULL || bytes == NULL) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "kernel, offset or bytes is NULL");
  }
  size_t count;
  kvjit_status st = kvjit_kernel_num_params(kernel, &count);
  if (st != KVJIT_OK) return st;
  if (index >= count) {
    return kvjit_fail(KVJIT_ERR_NOT_FOUND, "index %zu: kernel %s takes %zu parameters", index, kernel->name, count);
  }
  const kvjit_driver *drv;
  kvjit_driver_get(&drv);
  CUresult res = drv->cuKernelGetParamInfo(kernel->handle, index, offset, bytes);
  return res == CUDA_SUCCESS ? KVJIT_OK : kvjit_cuda_fail(drv, res, "cuKernelGetParamInfo");
}

/* ---- attributes ----------------------------------------------------------------------------- */

static const char *attribute_name(kvjit_kernel_attribute a) {
  static const char *const names[] = {"MAX_THREADS_PER_BLOCK", "SHARED_SIZE_BYTES", "CONST_SIZE_BYTES",
                                      "LOCAL_SIZE_BYTES", "NUM_REGS", "PTX_VERSION", "BINARY_VERSION", "CACHE_MODE_CA",
                                      "MAX_DYNAMIC_SHARED_SIZE_BYTES", "PREFERRED_SHARED_MEMORY_CARVEOUT",
                                      "CLUSTER_SIZE_MUST_BE_SET", "REQUIRED_CLUSTER_WIDTH", "REQUIRED_CLUSTER_HEIGHT",
                                      "REQUIRED_CLUSTER_DEPTH", "NON_PORTABLE_CLUSTER_SIZE_ALLOWED",
                                      "CLUSTER_SCHEDULING_POLICY_PREFERENCE"};
  return (int)a >= 0 && (size_t)a < sizeof names / sizeof names[0] ? names[a] : NULL;
}

/* The CUdevice of ordinal @p device, or of the current context's device for KVJIT_CURRENT_DEVICE. */
static kvjit_status device_of(const kvjit_driver *drv, int device, CUdevice *out) {
  if (device == KVJIT_CURRENT_DEVICE) {
    int sm;
    return kvjit_driver_current_sm(drv, &sm, out);
  }
  CUresult res = drv->cuDeviceGet(out, device);
  if (res != CUDA_SUCCESS) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "device %d: no such CUDA device", device);
  return KVJIT_OK;
}

kvjit_status kvjit_kernel_get_attribute(const kvjit_kernel *kernel, kvjit_kernel_attribute attribute, int device,
                                        int *value) {
  if (kernel == NULL || value == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "kernel or value is NULL");
  const char *name = attribute_name(attribute);
  if (name == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "attribute %d: not a kvjit_kernel_attribute", (int)attribute);
  const kvjit_driver *drv;
  CUdevice dev;
  kvjit_status st = kvjit_driver_get(&drv);
  if (st == KVJIT_OK) st = device_of(drv, device, &dev);
  if (st != KVJIT_OK) return st;
  CUresult res = drv->cuKernelGetAttribute(value, (CUfunction_attribute)attribute, kernel->handle, dev);
  if (res != CUDA_SUCCESS) {
    char what[128];
    snprintf(what, sizeof what, "cuKernelGetAttribute(%s, kernel %s)", name, kernel->name);
    return kvjit_cuda_fail(drv, res, what);
  }
  return KVJIT_OK;
}

kvjit_status kvjit_kernel_set_attribute(const kvjit_kernel *kernel, kvjit_kernel_attribute attribute, int device,
                                        int value) {
  if (kernel == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "kernel is NULL");
  const char *name = attribute_name(attribute);
  if (name == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "attribute %d: not a kvjit_kernel_attribute", (int)attribute);
  switch (attribute) {
    case KVJIT_KERNEL_MAX_DYNAMIC_SHARED_SIZE_BYTES:
    case KVJIT_KERNEL_PREFERRED_SHARED_MEMORY_CARVEOUT:
    case KVJIT_KERNEL_REQUIRED_CLUSTER_WIDTH:
    case KVJIT_KERNEL_REQUIRED_CLUSTER_HEIGHT:
    case KVJIT_KERNEL_REQUIRED_CLUSTER_DEPTH:
    case KVJIT_KERNEL_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case KVJIT_KERNEL_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      break;
    default:
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "attribute %s: read-only", name);
  }
  if (value < 0 && attribute != KVJIT_KERNEL_PREFERRED_SHARED_MEMORY_CARVEOUT) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "attribute %s: value %d is negative", name, value);
  }
  const kvjit_driver *drv;
  CUdevice dev;
  kvjit_status st = kvjit_driver_get(&drv);
  if (st == KVJIT_OK) st = device_of(drv, device, &dev);
  if (st != KVJIT_OK) return st;
  if (drv->cuKernelSetAttribute == NULL) {
    return kvjit_fail(KVJIT_ERR_UNSUPPORTED, "this driver has no cuKernelSetAttribute");
  }
  CUresult res = drv->cuKernelSetAttribute((CUfunction_attribute)attribute, value, kernel->handle, dev);
  if (res == CUDA_ERROR_INVALID_VALUE) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "attribute %s: value %d refused for kernel %s on device %d (%s)",
                      name, value, kernel->name, (int)dev, "CUDA_ERROR_INVALID_VALUE: past the device's limit?");
  }
  if (res != CUDA_SUCCESS) {
    char what[128];
    snprintf(what, sizeof what, "cuKernelSetAttribute(%s, %d, kernel %s)", name, value, kernel->name);
    return kvjit_cuda_fail(drv, res, what);
  }
  return KVJIT_OK;
}

/* ---- globals -------------------------------------------------------------------------------- */

kvjit_status kvjit_program_global(const kvjit_program *program, CUdeviceptr *ptr, size_t *bytes, const char *name) {
  if (program == NULL || ptr == NULL || name == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "program, ptr or name is NULL");
  const kvjit_driver *drv;
  kvjit_status st = kvjit_driver_get(&drv);
  if (st != KVJIT_OK) return st;
  if (program->library == NULL) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "program %s is not loaded (kvjit_program_get loads it)", program->name);
  }
  size_t size = 0;
  CUresult res = drv->cuLibraryGetGlobal(ptr, &size, program->library, name);
  if (res == CUDA_ERROR_NOT_FOUND) {
    return kvjit_fail(KVJIT_ERR_NOT_FOUND, "global \"%s\": no __device__ variable of that name in program %s "
                      "(C++ names are mangled: declare it extern \"C\")", name, program->name);
  }
  if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuLibraryGetGlobal");
  if (bytes) *bytes = size;
  return KVJIT_OK;
}

kvjit_status kvjit_program_get_global(const kvjit_program *program, uint64_t *address, size_t *bytes,
                                      const char *name) {
  if (address == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "address is NULL");
  CUdeviceptr ptr = 0;
  kvjit_status st = kvjit_program_global(program, &ptr, bytes, name);
  *address = st == KVJIT_OK ? (uint64_t)ptr : 0;
  return st;
}

/* ---- launch --------------------------------------------------------------------------------- */

static kvjit_status check_args(const kvjit_driver *drv, const kvjit_kernel *kernel, const kvjit_launch_config *c,
                               void **args) {
  if (c->num_args < 0) return KVJIT_OK;
  if (c->num_args > 0 && args == NULL) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "args: NULL with config->num_args %d", c->num_args);
  }
  int n = param_count(drv, (kvjit_kernel *)(uintptr_t)kernel);
  if (n >= 0 && n != c->num_args) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "config->num_args: %d, but kernel %s takes %d parameters",
                      c->num_args, kernel->name, n);
  }
  return KVJIT_OK;
}

kvjit_status kvjit_launch(const kvjit_kernel *kernel, const kvjit_launch_config *config, void **args) {
  if (kernel == NULL || config == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "kernel or config is NULL");
  kvjit_status st = kvjit_check_version(config->version, KVJIT_LAUNCH_CONFIG_VERSION, "config",
                                        "KVJIT_LAUNCH_CONFIG_INIT");
  if (st != KVJIT_OK) return st;
  for (int i = 0; i < 3; i++) {
    if (config->grid[i] == 0 || config->block[i] == 0) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "config: grid %ux%ux%u block %ux%ux%u has a zero dimension",
                        config->grid[0], config->grid[1], config->grid[2], config->block[0], config->block[1],
                        config->block[2]);
    }
  }
  const unsigned *cl = config->cluster;
  int clustered = cl[0] | cl[1] | cl[2];
  if (clustered && (cl[0] == 0 || cl[1] == 0 || cl[2] == 0 || config->grid[0] % cl[0] || config->grid[1] % cl[1] ||
                    config->grid[2] % cl[2])) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "config->cluster: %ux%ux%u must be all zero (no cluster) or divide grid %ux%ux%u", cl[0], cl[1],
                      cl[2], config->grid[0], config->grid[1], config->grid[2]);
  }
  const kvjit_driver *drv;
  if ((st = kvjit_driver_get(&drv)) != KVJIT_OK) return st;
  if ((st = check_args(drv, kernel, config, args)) != KVJIT_OK) return st;
  CUlaunchAttribute attrs[4];
  unsigned n = 0;
  if (config->programmatic_serialization) {
    memset(&attrs[n], 0, sizeof attrs[n]);
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[n++].value.programmaticStreamSerializationAllowed = 1;
  }
  if (clustered) {
    memset(&attrs[n], 0, sizeof attrs[n]);
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[n].value.clusterDim.x = cl[0];
    attrs[n].value.clusterDim.y = cl[1];
    attrs[n++].value.clusterDim.z = cl[2];
  }
  if (config->cooperative) {
    memset(&attrs[n], 0, sizeof attrs[n]);
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attrs[n++].value.cooperative = 1;
  }
  if (config->priority) {
    memset(&attrs[n], 0, sizeof attrs[n]);
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
    attrs[n++].value.priority = config->priority;
  }
  CUlaunchConfig lc;
  memset(&lc, 0, sizeof lc);
  lc.gridDimX = config->grid[0];
  lc.gridDimY = config->grid[1];
  lc.gridDimZ = config->grid[2];
  lc.blockDimX = config->block[0];
  lc.blockDimY = config->block[1];
  lc.blockDimZ = config->block[2];
  lc.sharedMemBytes = config->shared_bytes;
  lc.hStream = (CUstream)config->stream;
  lc.attrs = n ? attrs : NULL;
  lc.numAttrs = n;
  CUresult res = drv->cuLaunchKernelEx(&lc, (CUfunction)kernel->handle, args, NULL);
  /* A thread with no context (kvjit_driver_adopt_context): once, off the hot path. */
  if (res == CUDA_ERROR_INVALID_CONTEXT && kvjit_driver_adopt_context(drv, config->stream) == KVJIT_OK)
    res = drv->cuLaunchKernelEx(&lc, (CUfunction)kernel->handle, args, NULL);
  if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuLaunchKernelEx");
  return KVJIT_OK;
}

kvjit_status kvjit_launch_config_init(kvjit_launch_config *out, unsigned version) {
  static const kvjit_launch_config defaults = KVJIT_LAUNCH_CONFIG_INIT;
  static const size_t ends[] = {0, sizeof defaults};
  return kvjit_struct_init(out, version, &defaults, ends, KVJIT_LAUNCH_CONFIG_VERSION, "kvjit_launch_config");
}
