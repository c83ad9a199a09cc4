/* The generic loader on a real GPU: load before any context, launch and check every output,
 * name expressions, PDL, memory and disk hits, a second context, compile-error logs.
 * Exits 77 (skip) without a driver or a device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpu_util.h"
#include "kvjit.h"

static gpu_env env;
static kvjit_context *ctx;
static char tmpdir[256];

static const char *source =
    "template <int N, typename T> __global__ void axpb(T *y, const T *x, T a, T b) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < N) y[i] = a * x[i] + b; }\n"
    "extern \"C\" __global__ void producer(unsigned *out, unsigned seed, int n) {\n"
    "  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  for (int k = 0; k < 64 && i < n; k++) out[i] = seed * 2654435761u + i + k;\n"
    "  asm volatile(\"griddepcontrol.launch_dependents;\");\n}\n"
    "extern \"C\" __global__ void consumer(unsigned *dst, const unsigned *src, int n) {\n"
    "  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) dst[i] = src[i] ^ 0x5a5a5a5au; }\n";
static const char *kernel_names[] = {"axpb<1000, float>", "producer", "consumer"};

static kvjit_program_desc the_desc(void) {
  kvjit_program_desc d = KVJIT_PROGRAM_DESC_INIT;
  d.name = "gpu_loader_test.cu";
  d.source = source;
  d.kernels = kernel_names;
  d.num_kernels = 3;
  return d;
}

static kvjit_context *new_ctx(void) {
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.cache_dir = tmpdir;
  o.cache_path = "";
  o.log = 0;
  o.disable_cache = 0;
  kvjit_context *c = NULL;
  assert_int_equal(kvjit_context_create(&c, &o), KVJIT_OK);
  return c;
}

static void run_axpb(const kvjit_program *prog, uint64_t seed) {
  kvjit_kernel *k = NULL;
  assert_int_equal(kvjit_program_kernel(prog, &k, "axpb<1000, float>", 0), KVJIT_OK);
  float x[1000], y[1024];
  uint64_t s = seed;
  /* Quarter-integers: a * x + b is exact in float, with or without FMA contraction. */
  for (int i = 0; i < 1000; i++) x[i] = (float)(gpu_rand(&s) % 10000) * 0.25f - 1000.0f;
  CUdeviceptr dx = gpu_alloc(sizeof x), dy = gpu_alloc(sizeof y);
  gpu_upload(dx, x, sizeof x);
  GPU_CU(env.drv->cuMemsetD32(dy, 0xdeadbeef, 1024)); /* poison, including past N */
  float a = 1.5f, b = -3.0f;
  void *args[] = {&dy, &dx, &a, &b};
  kvjit_launch_config cfg = KVJIT_LAUNCH_CONFIG_INIT;
  cfg.grid[0] = 4;
  cfg.block[0] = 256;
  assert_int_equal(kvjit_launch(k, &cfg, args), KVJIT_OK);
  gpu_sync();
  gpu_download(y, dy, sizeof y);
  for (int i = 0; i < 1000; i++) assert_true(y[i] == a * x[i] + b);
  uint32_t poison;
  memcpy(&poison, &y[1000], 4);
  assert_int_equal(poison, 0xdeadbeef); /* nothing past N written */
  gpu_free(dx);
  gpu_free(dy);
}

/* Runs first: the program is loaded while no CUDA context is current (a runtime that warms kvjit
 * up before making its context), then launched once one is. */
static void test_load_before_any_context(void **state) {
  (void)state;
  kvjit_program *prog = NULL;
  kvjit_origin origin = 0;
  kvjit_program_desc d = the_desc();
  assert_int_equal(kvjit_program_get(ctx, &prog, &origin, &d), KVJIT_OK);
  assert_int_equal(origin, KVJIT_FROM_COMPILE);
  int r = gpu_setup(&env);
  assert_int_equal(r, 0);
  assert_int_equal(kvjit_program_arch(prog), env.sm);
  run_axpb(prog, 1);
}

static void test_memory_hit_returns_the_same_program(void **state) {
  (void)state;
  kvjit_program_desc d = the_desc();
  kvjit_program *a = NULL, *b = NULL;
  kvjit_origin origin = 0;
  assert_int_equal(kvjit_program_get(ctx, &a, &origin, &d), KVJIT_OK);
  assert_int_equal(origin, KVJIT_FROM_MEMORY);
  d.arch = env.sm; /* explicit arch: same key */
  assert_int_equal(kvjit_program_get(ctx, &b, &origin, &d), KVJIT_OK);
  assert_ptr_equal(a, b);
  assert_int_equal(strlen(kvjit_program_key(a)), 32);
}

static void test_disk_hit_in_a_new_context_launches(void **state) {
  (void)state;
  kvjit_context *c2 = new_ctx();
  kvjit_program_desc d = the_desc();
  kvjit_program *p = NULL;
  kvjit_origin origin = 0;
  assert_int_equal(kvjit_program_get(c2, &p, &origin, &d), KVJIT_OK);
  assert_int_equal(origin, KVJIT_FROM_DISK);
  run_axpb(p, 2);
  kvjit_stats s;
  kvjit_context_stats(c2, &s);
  assert_int_equal(s.disk_hits, 1);
  assert_int_equal(s.compiles, 0);
  assert_int_equal(s.loads, 1);
  kvjit_context_destroy(c2);
}

static void test_pdl_chain(void **state) {
  (void)state;
  kvjit_program *prog = NULL;
  kvjit_program_desc d = the_desc();
  assert_int_equal(kvjit_program_get(ctx, &prog, NULL, &d), KVJIT_OK);
  kvjit_kernel *producer = NULL, *consumer = NULL;
  assert_int_equal(kvjit_program_kernel(prog, &producer, "producer", 0), KVJIT_OK);
  assert_int_equal(kvjit_program_kernel(prog, &consumer, NULL, 2), KVJIT_OK);
  int n = 1 << 20;
  CUdeviceptr mid = gpu_alloc((size_t)n * 4), out = gpu_alloc((size_t)n * 4);
  CUstream stream;
  GPU_CU(env.drv->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (unsigned round = 1; round <= 5; round++) {
    unsigned seed = round * 7919u;
    void *pargs[] = {&mid, &seed, &n};
    void *cargs[] = {&out, &mid, &n};
    kvjit_launch_config cfg = KVJIT_LAUNCH_CONFIG_INIT;
    cfg.grid[0] = (unsigned)(n / 256);
    cfg.block[0] = 256;
    cfg.stream = stream;
    cfg.programmatic_serialization = 1;
    assert_int_equal(kvjit_launch(producer, &cfg, pargs), KVJIT_OK);
    assert_int_equal(kvjit_launch(consumer, &cfg, cargs), KVJIT_OK);
    GPU_CU(env.drv->cuStreamSynchronize(stream));
    unsigned *host = malloc((size_t)n * 4);
    gpu_download(host, out, (size_t)n * 4);
    for (int i = 0; i < n; i++) {
      unsigned expect = (seed * 2654435761u + (unsigned)i + 63u) ^ 0x5a5a5a5au;
      if (host[i] != expect) fail_msg("round %u i %d: %u != %u", round, i, host[i], expect);
    }
    free(host);
  }
  GPU_CU(env.drv->cuStreamDestroy(stream));
  gpu_free(mid);
  gpu_free(out);
}

static void test_second_context_uses_the_same_load(void **state) {
  (void)state;
  kvjit_program *prog = NULL;
  kvjit_program_desc d = the_desc();
  assert_int_equal(kvjit_program_get(ctx, &prog, NULL, &d), KVJIT_OK);
  CUcontext other;
  GPU_CU(env.drv->cuCtxCreate(&other, 0, env.device));
  run_axpb(prog, 3);
  GPU_CU(env.drv->cuCtxDestroy(other));
  GPU_CU(env.drv->cuCtxSetCurrent(env.context));
  run_axpb(prog, 4);
  if (env.device_count >= 2) {
    CUdevice dev1;
    CUcontext c1;
    GPU_CU(env.drv->cuDeviceGet(&dev1, 1));
    GPU_CU(env.drv->cuDevicePrimaryCtxRetain(&c1, dev1));
    GPU_CU(env.drv->cuCtxSetCurrent(c1));
    run_axpb(prog, 5);
    GPU_CU(env.drv->cuCtxSetCurrent(env.context));
    env.drv->cuDevicePrimaryCtxRelease(dev1);
    printf("second GPU: launched on device 1 too\n");
  }
}

static void test_compile_error_keeps_the_log(void **state) {
  (void)state;
  kvjit_program_desc d = KVJIT_PROGRAM_DESC_INIT;
  d.name = "broken.cu";
  d.source = "extern \"C\" __global__ void k(int *x) { x[0] = not_declared; }\n";
  const char *k[] = {"k"};
  d.kernels = k;
  d.num_kernels = 1;
  kvjit_program *p = NULL;
  assert_int_equal(kvjit_program_get(ctx, &p, NULL, &d), KVJIT_ERR_COMPILE);
  assert_non_null(p);
  assert_non_null(strstr(kvjit_program_log(p), "not_declared"));
  assert_non_null(strstr(kvjit_last_error(), "not_declared"));
  kvjit_kernel *kernel = NULL;
  assert_int_not_equal(kvjit_program_kernel(p, &kernel, NULL, 0), KVJIT_OK);
  /* Remembered: the second call does not compile again. */
  kvjit_stats before, after;
  kvjit_context_stats(ctx, &before);
  kvjit_program *q = NULL;
  assert_int_equal(kvjit_program_get(ctx, &q, NULL, &d), KVJIT_ERR_COMPILE);
  kvjit_context_stats(ctx, &after);
  assert_ptr_equal(p, q);
  assert_int_equal(after.compile_failures, before.compile_failures);
}

static void test_bad_launches(void **state) {
  (void)state;
  kvjit_program *prog = NULL;
  kvjit_program_desc d = the_desc();
  assert_int_equal(kvjit_program_get(ctx, &prog, NULL, &d), KVJIT_OK);
  kvjit_kernel *k = NULL;
  assert_int_equal(kvjit_program_kernel(prog, &k, "missing", 0), KVJIT_ERR_NOT_FOUND);
  assert_int_equal(kvjit_program_kernel(prog, &k, NULL, 3), KVJIT_ERR_NOT_FOUND);
  assert_int_equal(kvjit_program_kernel(prog, &k, NULL, 0), KVJIT_OK);
  kvjit_launch_config cfg = KVJIT_LAUNCH_CONFIG_INIT;
  cfg.grid[1] = 0;
  assert_int_equal(kvjit_launch(k, &cfg, NULL), KVJIT_ERR_INVALID_ARGUMENT);
  cfg = (kvjit_launch_config)KVJIT_LAUNCH_CONFIG_INIT;
  cfg.block[0] = 4096; /* over the device limit: the driver says no, nothing crashes */
  CUdeviceptr y = gpu_alloc(4096), x = gpu_alloc(4096);
  float a = 1, b = 2;
  void *args[] = {&y, &x, &a, &b};
  assert_int_equal(kvjit_launch(k, &cfg, args), KVJIT_ERR_CUDA);
  assert_non_null(strstr(kvjit_last_error(), "CUDA_ERROR_"));
  gpu_free(x);
  gpu_free(y);
}

int main(void) {
  const gpu_driver *drv;
  if (gpu_driver_get(&drv) != KVJIT_OK) {
    printf("SKIP: %s\n", kvjit_last_error());
    return GPU_SKIP;
  }
  int count = 0;
  if (drv->cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    printf("SKIP: no CUDA device\n");
    return GPU_SKIP;
  }
  snprintf(tmpdir, sizeof tmpdir, "/tmp/kvjit-test-gpu-loader-XXXXXX");
  if (!mkdtemp(tmpdir)) return 1;
  ctx = new_ctx();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_load_before_any_context),
      cmocka_unit_test(test_memory_hit_returns_the_same_program),
      cmocka_unit_test(test_disk_hit_in_a_new_context_launches),
      cmocka_unit_test(test_pdl_chain),
      cmocka_unit_test(test_second_context_uses_the_same_load),
      cmocka_unit_test(test_compile_error_keeps_the_log),
      cmocka_unit_test(test_bad_launches),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  kvjit_context_destroy(ctx);
  gpu_teardown(&env);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  return failed ? 1 : 0;
}
