/*
 * Helpers shared by the gpu suite (check/, test_gpu_loader.c, ...): driver and device
 * set-up with the skip protocol, device buffers, copies, seeded random bytes, CUresult checks.
 * Single-threaded test code: the state set up by gpu_setup() is process-wide.
 */
#ifndef KVJIT_TEST_GPU_UTIL_H
#define KVJIT_TEST_GPU_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "gpu_driver.h"
#include "kvjit.h"

/** meson's exit code for a skipped test. */
#define GPU_SKIP 77

typedef struct gpu_env {
  const gpu_driver *drv;
  CUdevice device;    /* device 0 */
  CUcontext context;  /* its retained primary context, current on the calling thread */
  int sm;             /* compute capability of device 0, e.g. 90 */
  int device_count;
  char name[128];
} gpu_env;

/**
 * Load the driver, retain device 0's primary context and make it current.
 * @return 0 when ready; GPU_SKIP (after printing why) when there is no driver or no device;
 *         1 on any other failure (printed).
 */
int gpu_setup(gpu_env *env);

/** Release the primary context retained by gpu_setup(). Accepts an env that was never set up. */
void gpu_teardown(gpu_env *env);

/** The env of the last successful gpu_setup() (NULL before). */
const gpu_env *gpu_current(void);

/**
 * @return 1 when @p res is CUDA_SUCCESS; otherwise prints "file:line: expr: CUDA_ERROR_X" to
 * stderr and returns 0.
 */
int gpu_cu_ok(CUresult res, const char *expr, const char *file, int line);

/** Evaluate a driver call and abort() the process if it fails (cmocka reports the crash). */
#define GPU_CU(call)                                                                             \
  do {                                                                                           \
    if (!gpu_cu_ok((call), #call, __FILE__, __LINE__)) abort();                                  \
  } while (0)

/** Device allocation that aborts on failure. */
CUdeviceptr gpu_alloc(size_t bytes);
/** cuMemFree; accepts 0. */
void gpu_free(CUdeviceptr ptr);
/** Synchronous host -> device copy (aborts on failure). */
void gpu_upload(CUdeviceptr dst, const void *src, size_t bytes);
/** Synchronous device -> host copy (aborts on failure). */
void gpu_download(void *dst, CUdeviceptr src, size_t bytes);
/** cuCtxSynchronize that aborts on failure. */
void gpu_sync(void);

/**
 * A kvjit context on a fresh cache dir /tmp/kvjit-gpu-<name>-XXXXXX (written into @p dir), disk
 * cache on, no log lines; with @p manifest_file, the manifest is that file inside the dir.
 * @return 0, or 1 after printing why.
 */
int gpu_context_create(kvjit_context **ctx, char *dir, size_t dir_capacity, const char *name,
                       const char *manifest_file);
/** Destroy the context and remove its cache dir. */
void gpu_context_destroy(kvjit_context *ctx, const char *dir);

/** xorshift64*: the next pseudo-random value of @p state (seed it with any non-zero value). */
uint64_t gpu_rand(uint64_t *state);
/** Fill @p bytes of @p buf with pseudo-random bytes from @p state. */
void gpu_fill_random(void *buf, size_t bytes, uint64_t *state);

#endif
