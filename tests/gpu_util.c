/* Shared helpers of the gpu suite; see gpu_util.h. */
#include "gpu_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static gpu_env *current_env;

int gpu_cu_ok(CUresult res, const char *expr, const char *file, int line) {
  if (res == CUDA_SUCCESS) return 1;
  const char *name = NULL;
  if (current_env == NULL || current_env->drv->cuGetErrorName(res, &name) != CUDA_SUCCESS) name = NULL;
  fprintf(stderr, "%s:%d: %s: %s (%d)\n", file, line, expr, name ? name : "CUresult", (int)res);
  return 0;
}

int gpu_setup(gpu_env *env) {
  memset(env, 0, sizeof *env);
  kvjit_status st = gpu_driver_get(&env->drv);
  if (st != KVJIT_OK) {
    printf("SKIP: no CUDA driver: %s\n", gpu_driver_error());
    return GPU_SKIP;
  }
  CUresult res = env->drv->cuDeviceGetCount(&env->device_count);
  if (res != CUDA_SUCCESS || env->device_count == 0) {
    printf("SKIP: no CUDA device (cuDeviceGetCount: %d, count %d)\n", (int)res, env->device_count);
    return GPU_SKIP;
  }
  current_env = env;
  if (!gpu_cu_ok(env->drv->cuDeviceGet(&env->device, 0), "cuDeviceGet(0)", __FILE__, __LINE__)) return 1;
  if (!gpu_cu_ok(env->drv->cuDevicePrimaryCtxRetain(&env->context, env->device), "cuDevicePrimaryCtxRetain",
                 __FILE__, __LINE__)) {
    return 1;
  }
  if (!gpu_cu_ok(env->drv->cuCtxSetCurrent(env->context), "cuCtxSetCurrent", __FILE__, __LINE__)) return 1;
  int major = 0, minor = 0;
  if (!gpu_cu_ok(env->drv->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, env->device),
                 "cuDeviceGetAttribute(MAJOR)", __FILE__, __LINE__) ||
      !gpu_cu_ok(env->drv->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, env->device),
                 "cuDeviceGetAttribute(MINOR)", __FILE__, __LINE__)) {
    return 1;
  }
  env->sm = major * 10 + minor;
  if (env->drv->cuDeviceGetName(env->name, (int)sizeof env->name, env->device) != CUDA_SUCCESS) env->name[0] = '\0';
  return 0;
}

void gpu_teardown(gpu_env *env) {
  if (env == NULL || env->drv == NULL || env->context == NULL) return;
  env->drv->cuCtxSetCurrent(NULL);
  env->drv->cuDevicePrimaryCtxRelease(env->device);
  env->context = NULL;
  if (current_env == env) current_env = NULL;
}

const gpu_env *gpu_current(void) { return current_env; }

static const gpu_driver *drv_or_abort(void) {
  if (current_env == NULL) {
    fprintf(stderr, "gpu_util: gpu_setup() was not called\n");
    abort();
  }
  return current_env->drv;
}

CUdeviceptr gpu_alloc(size_t bytes) {
  CUdeviceptr ptr = 0;
  GPU_CU(drv_or_abort()->cuMemAlloc(&ptr, bytes ? bytes : 1));
  return ptr;
}

void gpu_free(CUdeviceptr ptr) {
  if (ptr != 0) GPU_CU(drv_or_abort()->cuMemFree(ptr));
}

/* cuMemcpyHtoD from pageable memory may return before the DMA has landed, and a kernel on a
 * non-blocking stream does not wait for it: without the sync, a late upload of a poisoned cache
 * overwrote rows the store had just written (H200, 512 B rows x 1023 / 5000 on such a stream). */
void gpu_upload(CUdeviceptr dst, const void *src, size_t bytes) {
  if (bytes == 0) return;
  GPU_CU(drv_or_abort()->cuMemcpyHtoD(dst, src, bytes));
  GPU_CU(drv_or_abort()->cuCtxSynchronize());
}

void gpu_download(void *dst, CUdeviceptr src, size_t bytes) {
  if (bytes) GPU_CU(drv_or_abort()->cuMemcpyDtoH(dst, src, bytes));
}

void gpu_sync(void) { GPU_CU(drv_or_abort()->cuCtxSynchronize()); }

uint64_t gpu_rand(uint64_t *state) {
  uint64_t x = *state ? *state : 0x9E3779B97F4A7C15ull;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * 0x2545F4914F6CDD1Dull;
}

void gpu_fill_random(void *buf, size_t bytes, uint64_t *state) {
  unsigned char *p = buf;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t r = gpu_rand(state);
    memcpy(p + i, &r, 8);
  }
  if (i < bytes) {
    uint64_t r = gpu_rand(state);
    memcpy(p + i, &r, bytes - i);
  }
}

int gpu_context_create(kvjit_context **ctx, char *dir, size_t dir_capacity, const char *name,
                       const char *manifest_file) {
  snprintf(dir, dir_capacity, "/tmp/kvjit-gpu-%s-XXXXXX", name);
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  char manifest[512];
  /* Beside the cache dir, never inside it: kvjit refuses to write its side files into a cache. */
  if (manifest_file != NULL) snprintf(manifest, sizeof manifest, "%s-%s", dir, manifest_file);
  kvjit_context_options opt = KVJIT_CONTEXT_OPTIONS_INIT;
  opt.cache_dir = dir;
  opt.disable_cache = 0;
  opt.log = 0;
  opt.manifest_path = manifest_file != NULL ? manifest : NULL;
  if (kvjit_context_create(ctx, &opt) != KVJIT_OK) {
    fprintf(stderr, "kvjit_context_create: %s\n", kvjit_last_error());
    return 1;
  }
  return 0;
}

void gpu_context_destroy(kvjit_context *ctx, const char *dir) {
  kvjit_context_destroy(ctx);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'-*", dir, dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}
