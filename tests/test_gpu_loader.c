/* The generic loader on a real GPU: load before any context, launch and check every output,
 * name expressions, PDL, memory and disk hits, a second context, compile-error logs; the issue-16
 * kernels (toolkit headers, 200 KiB of dynamic shared memory, a thread-block cluster, PTX finished
 * by the driver, an sm_90a-only instruction), kernel attributes, argument-count checks, globals,
 * handles, and a bundle's kernels loaded one by one through their aliases. Exits 77 (skip) without a driver or a device; prints one summary line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "bundle.h"
#include "program.h"
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
  kvjit_stats s = KVJIT_STATS_INIT;
  kvjit_context_stats(c2, &s);
  assert_int_equal(s.disk_hits, 1);
  assert_int_equal(s.compiles, 0);
  assert_int_equal(s.loads, 1);
  kvjit_context_destroy(c2);
}

/* A bundle (kernels compiled as one program by a prewarm) serves each kernel asked alone: from
 * disk, launchable, the bundle loaded once for all of them. */
static void test_kernels_of_a_bundle_load_one_by_one(void **state) {
  (void)state;
  kvjit_program_desc d = the_desc();
  d.name = "gpu_loader_bundle.cu";
  d.arch = env.sm;
  kvjit_entry_label label = {"test", ""};
  kvjit_group_member members[3] = {{&label, 0}, {&label, 0}, {&label, 0}};
  kvjit_context *c1 = new_ctx();
  assert_int_equal(kvjit_program_compile_group(c1, &d, members), KVJIT_OK);
  for (int i = 0; i < 3; i++) assert_int_equal(members[i].origin, KVJIT_FROM_COMPILE);
  kvjit_context_destroy(c1);
  kvjit_context *c2 = new_ctx();
  for (size_t i = 0; i < 3; i++) {
    kvjit_program_desc one = d;
    one.kernels = &kernel_names[i];
    one.num_kernels = 1;
    kvjit_program *p = NULL;
    kvjit_origin origin = 0;
    assert_int_equal(kvjit_program_get(c2, &p, &origin, &one), KVJIT_OK);
    assert_int_equal(origin, KVJIT_FROM_DISK);
    assert_int_equal(kvjit_program_num_kernels(p), 1);
    kvjit_kernel *k = NULL;
    assert_int_equal(kvjit_program_kernel(p, &k, kernel_names[i], 0), KVJIT_OK);
    if (i == 0) run_axpb(p, 3);
  }
  kvjit_stats s = KVJIT_STATS_INIT;
  kvjit_context_stats(c2, &s);
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
  kvjit_stats before = KVJIT_STATS_INIT, after = KVJIT_STATS_INIT;
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

/* ---- issue 16 ------------------------------------------------------------------------------ */

static const char *kernels16 =
    "#include <cuda_bf16.h>\n"
    "#include <cooperative_groups.h>\n"
    "namespace cg = cooperative_groups;\n"
    "extern \"C\" __device__ unsigned launches;\n"
    "__device__ unsigned launches;\n"
    "extern \"C\" __global__ void to_bf16(__nv_bfloat16 *y, const float *x, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = __float2bfloat16(x[i]);\n"
    "  if (i == 0) atomicAdd(&launches, 1u); }\n"
    "extern \"C\" __global__ void __launch_bounds__(256) big_tile(unsigned *out, unsigned seed, unsigned words) {\n"
    "  extern __shared__ unsigned tile[];\n"
    "  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) tile[i] = seed * 2654435761u + i + blockIdx.x;\n"
    "  __syncthreads();\n"
    "  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) out[blockIdx.x * words + i] = tile[words - 1 - i]; }\n"
    "extern \"C\" __global__ void cluster_swap(unsigned *out) {\n"
    "  __shared__ unsigned mine;\n"
    "  cg::cluster_group cl = cg::this_cluster();\n"
    "  unsigned rank = cl.block_rank();\n"
    "  if (threadIdx.x == 0) mine = blockIdx.x * 1000u + rank;\n"
    "  cl.sync();\n"
    "  unsigned *peer = cl.map_shared_rank(&mine, rank ^ 1u);\n"
    "  if (threadIdx.x == 0) out[blockIdx.x] = *peer;\n"
    "  cl.sync(); }\n"
    "extern \"C\" __global__ void coop(unsigned *a, unsigned *b) {\n"
    "  cg::grid_group g = cg::this_grid();\n"
    "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x, n = gridDim.x * blockDim.x;\n"
    "  a[i] = i * 3u + 1u;\n"
    "  g.sync(); /* grid-wide: only a cooperative launch may do this */\n"
    "  b[i] = a[(i + blockDim.x) % n] + (g.is_valid() ? 0u : 1000000u); }\n";
static const char *names16[] = {"to_bf16", "big_tile", "cluster_swap", "coop"};

static kvjit_program *get16(int arch) {
  kvjit_program_desc d = KVJIT_PROGRAM_DESC_INIT;
  d.name = "issue16.cu";
  d.source = kernels16;
  d.kernels = names16;
  d.num_kernels = 4;
  d.arch = arch;
  kvjit_program *p = NULL;
  kvjit_status st = kvjit_program_get(ctx, &p, NULL, &d);
  if (st != KVJIT_OK) fail_msg("issue16.cu: %s: %s\n%s", kvjit_status_name(st), kvjit_last_error(), kvjit_program_log(p));
  return p;
}

static uint16_t host_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* round to nearest even; inputs are finite */
}

static void test_toolkit_header_kernel_and_a_global(void **state) {
  (void)state;
  kvjit_program *p = get16(0);
  kvjit_kernel *k = NULL;
  assert_int_equal(kvjit_program_kernel(p, &k, "to_bf16", 0), KVJIT_OK);
  enum { N = 5000 };
  float *x = malloc(N * sizeof *x);
  uint16_t *y = malloc((N + 64) * sizeof *y);
  uint64_t seed = 77;
  for (int i = 0; i < N; i++) x[i] = (float)((int64_t)(gpu_rand(&seed) % 2000001) - 1000000) / 777.0f;
  CUdeviceptr dx = gpu_alloc(N * sizeof *x), dy = gpu_alloc((N + 64) * sizeof *y);
  gpu_upload(dx, x, N * sizeof *x);
  GPU_CU(env.drv->cuMemsetD8(dy, 0xa5, (N + 64) * sizeof *y));
  uint64_t addr = 0;
  size_t bytes = 0;
  assert_int_equal(kvjit_program_get_global(p, &addr, &bytes, "launches"), KVJIT_OK);
  assert_int_equal(bytes, 4);
  GPU_CU(env.drv->cuMemsetD32((CUdeviceptr)addr, 0, 1));
  int n = N;
  void *args[] = {&dy, &dx, &n};
  kvjit_launch_config cfg = KVJIT_LAUNCH_CONFIG_INIT;
  cfg.grid[0] = (N + 255) / 256;
  cfg.block[0] = 256;
  cfg.num_args = 3;
  for (int r = 0; r < 3; r++) assert_int_equal(kvjit_launch(k, &cfg, args), KVJIT_OK);
  gpu_sync();
  gpu_download(y, dy, (N + 64) * sizeof *y);
  for (int i = 0; i < N; i++) {
    if (y[i] != host_bf16(x[i])) fail_msg("to_bf16[%d]: %#x != %#x (%g)", i, y[i], host_bf16(x[i]), (double)x[i]);
  }
  for (int i = N; i < N + 64; i++) assert_int_equal(y[i], 0xa5a5); /* nothing past n */
  unsigned launches = 0;
  gpu_download(&launches, (CUdeviceptr)addr, 4);
  assert_int_equal(launches, 3);
  assert_int_equal(kvjit_program_get_global(p, &addr, &bytes, "no_such_global"), KVJIT_ERR_NOT_FOUND);
  gpu_free(dx);
  gpu_free(dy);
  free(x);
  free(y);
}

static void test_200_kib_of_dynamic_shared_memory(void **state) {
  (void)state;
  kvjit_program *p = get16(0);
  kvjit_kernel *k = NULL;
  assert_int_equal(kvjit_program_kernel(p, &k, "big_tile", 0), KVJIT_OK);
  int threads = 0, regs = 0;
  assert_int_equal(kvjit_kernel_get_attribute(k, KVJIT_KERNEL_MAX_THREADS_PER_BLOCK, KVJIT_CURRENT_DEVICE, &threads),
                   KVJIT_OK);
  assert_int_equal(threads, 256); /* __launch_bounds__(256) */
  assert_int_equal(kvjit_kernel_get_attribute(k, KVJIT_KERNEL_NUM_REGS, 0, &regs), KVJIT_OK);
  assert_true(regs > 0);
  enum { BYTES = 200 * 1024, WORDS = BYTES / 4, BLOCKS = 6 };
  CUdeviceptr out = gpu_alloc((size_t)BLOCKS * BYTES);
  GPU_CU(env.drv->cuMemsetD32(out, 0xdeadbeef, (size_t)BLOCKS * WORDS));
  unsigned seed = 12345, words = WORDS;
  void *args[] = {&out, &seed, &words};
  kvjit_launch_config cfg = KVJIT_LAUNCH_CONFIG_INIT;
  cfg.grid[0] = BLOCKS;
  cfg.block[0] = 256;
  cfg.shared_bytes = BYTES;
  /* Past 48 KiB a launch needs the kernel's limit raised first. */
  assert_int_not_equal(kvjit_launch(k, &cfg, args), KVJIT_OK);
  assert_int_equal(kvjit_kernel_set_attribute(k, KVJIT_KERNEL_NUM_REGS, KVJIT_CURRENT_DEVICE, 1),
                   KVJIT_ERR_INVALID_ARGUMENT); /* read-only */
  assert_int_equal(kvjit_kernel_set_attribute(k, KVJIT_KERNEL_MAX_DYNAMIC_SHARED_SIZE_BYTES, KVJIT_CURRENT_DEVICE, BYTES),
                   KVJIT_OK);
  int limit = 0;
  assert_int_equal(kvjit_kernel_get_attribute(k, KVJIT_KERNEL_MAX_DYNAMIC_SHARED_SIZE_BYTES, KVJIT_CURRENT_DEVICE,
                                              &limit),
                   KVJIT_OK);
  assert_int_equal(limit, BYTES);
  assert_int_equal(kvjit_launch(k, &cfg, args), KVJIT_OK);
  gpu_sync();
  unsigned *host = malloc((size_t)BLOCKS * BYTES);
  gpu_download(host, out, (size_t)BLOCKS * BYTES);
  for (unsigned b = 0; b < BLOCKS; b++) {
    for (unsigned i = 0; i < WORDS; i++) {
      unsigned expect = seed * 2654435761u + (WORDS - 1 - i) + b;
      if (host[b * WORDS + i] != expect) fail_msg("block %u word %u: %#x != %#x", b, i, host[b * WORDS + i], expect);
    }
  }
  free(host);
  gpu_free(out);
}

static void test_thread_block_cluster_and_cooperative_launches(void **state) {
  (void)state;
  if (env.sm < 90) skip();
  kvjit_program *p = get16(0);
  kvjit_kernel *k = NULL, *coop = NULL;
  assert_int_equal(kvjit_program_kernel(p, &k, "cluster_swap", 0), KVJIT_OK);
  assert_int_equal(kvjit_program_kernel(p, &coop, "coop", 0), KVJIT_OK);
  enum { BLOCKS = 16 };
  CUdeviceptr out = gpu_alloc(BLOCKS * 4 + 64);
  GPU_CU(env.drv->cuMemsetD32(out, 0xdeadbeef, BLOCKS + 16));
  void *args[] = {&out};
  kvjit_launch_config cfg = KVJIT_LAUNCH_CONFIG_INIT;
  cfg.grid[0] = BLOCKS;
  cfg.block[0] = 64;
  cfg.cluster[0] = 3; /* does not divide the grid */
  cfg.cluster[1] = cfg.cluster[2] = 1;
  assert_int_equal(kvjit_launch(k, &cfg, args), KVJIT_ERR_INVALID_ARGUMENT);
  cfg.cluster[0] = 2;
  assert_int_equal(kvjit_launch(k, &cfg, args), KVJIT_OK);
  gpu_sync();
  unsigned host[BLOCKS + 16];
  gpu_download(host, out, sizeof host);
  for (unsigned b = 0; b < BLOCKS; b++) {
    unsigned peer = b ^ 1u; /* the other block of its 2-block cluster, read through distributed shared memory */
    if (host[b] != peer * 1000u + (peer & 1u)) fail_msg("block %u read %u, expected %u", b, host[b], peer * 1000u + (peer & 1u));
  }
  for (unsigned b = BLOCKS; b < BLOCKS + 16; b++) assert_int_equal(host[b], 0xdeadbeef);

  /* A cooperative launch: every block reads what the next block wrote before grid.sync(). */
  CUdeviceptr a = gpu_alloc(128 * 4), b = gpu_alloc(128 * 4);
  GPU_CU(env.drv->cuMemsetD32(b, 0xdeadbeef, 128));
  void *cargs[] = {&a, &b};
  kvjit_launch_config c2 = KVJIT_LAUNCH_CONFIG_INIT;
  c2.grid[0] = 4;
  c2.block[0] = 32;
  c2.cooperative = 1;
  c2.num_args = 2;
  assert_int_equal(kvjit_launch(coop, &c2, cargs), KVJIT_OK);
  gpu_sync();
  unsigned got[128];
  gpu_download(got, b, sizeof got);
  for (unsigned i = 0; i < 128; i++) assert_int_equal(got[i], ((i + 32) % 128) * 3u + 1u);
  gpu_free(a);
  gpu_free(b);
  gpu_free(out);
}

static void test_compute_90_ptx_finished_by_the_driver(void **state) {
  (void)state;
  if (env.sm < 90) skip();
  kvjit_program_desc d = the_desc();
  d.arch = 90 | KVJIT_TARGET_PTX;
  kvjit_program *p = NULL;
  kvjit_origin origin = 0;
  assert_int_equal(kvjit_program_get(ctx, &p, &origin, &d), KVJIT_OK);
  assert_int_equal(kvjit_program_arch(p), 90 | KVJIT_TARGET_PTX);
  const void *bin;
  size_t bytes;
  assert_int_equal(kvjit_program_binary(p, &bin, &bytes), KVJIT_OK);
  assert_non_null(strstr(bin, ".target sm_90"));
  run_axpb(p, 6);
  kvjit_program *cubin = NULL;
  d.arch = 0;
  assert_int_equal(kvjit_program_get(ctx, &cubin, NULL, &d), KVJIT_OK);
  assert_ptr_not_equal(p, cubin); /* its own key and program */
}

static const char *hopper_source =
    "extern \"C\" __global__ void hopper(unsigned *out) {\n"
    "  asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");\n"
    "  asm volatile(\"wgmma.commit_group.sync.aligned;\" ::: \"memory\");\n"
    "  asm volatile(\"wgmma.wait_group.sync.aligned 0;\" ::: \"memory\");\n"
    "  out[blockIdx.x * blockDim.x + threadIdx.x] = (blockIdx.x * blockDim.x + threadIdx.x) * 7u + 1u; }\n";

static void test_sm_90a_kernel_with_a_hopper_only_instruction(void **state) {
  (void)state;
  if (env.sm != 90) skip(); /* sm_90a code runs on compute capability 9.0 only */
  const char *k[] = {"hopper"};
  kvjit_program_desc d = KVJIT_PROGRAM_DESC_INIT;
  d.name = "hopper.cu";
  d.source = hopper_source;
  d.kernels = k;
  d.num_kernels = 1;
  d.arch = 90; /* plain sm_90 has no wgmma */
  kvjit_program *p = NULL;
  assert_int_equal(kvjit_program_get(ctx, &p, NULL, &d), KVJIT_ERR_COMPILE);
  assert_non_null(strstr(kvjit_program_log(p), "wgmma"));
  d.arch = 90 | KVJIT_TARGET_ARCH_SPECIFIC;
  assert_int_equal(kvjit_program_get(ctx, &p, NULL, &d), KVJIT_OK);
  assert_int_equal(kvjit_program_arch(p), 90 | KVJIT_TARGET_ARCH_SPECIFIC);
  kvjit_kernel *kernel = NULL;
  assert_int_equal(kvjit_program_kernel(p, &kernel, "hopper", 0), KVJIT_OK);
  CUdeviceptr out = gpu_alloc(4 * 128 * 4 + 64);
  GPU_CU(env.drv->cuMemsetD32(out, 0xdeadbeef, 4 * 128 + 16));
  void *args[] = {&out};
  kvjit_launch_config cfg = KVJIT_LAUNCH_CONFIG_INIT;
  cfg.grid[0] = 4;
  cfg.block[0] = 128; /* whole warpgroups */
  assert_int_equal(kvjit_launch(kernel, &cfg, args), KVJIT_OK);
  gpu_sync();
  unsigned host[4 * 128 + 16];
  gpu_download(host, out, sizeof host);
  for (unsigned i = 0; i < 4 * 128; i++) assert_int_equal(host[i], i * 7u + 1u);
  for (unsigned i = 4 * 128; i < 4 * 128 + 16; i++) assert_int_equal(host[i], 0xdeadbeef);
  gpu_free(out);
}

static void test_targets_that_cannot_run_here_are_refused(void **state) {
  (void)state;
  kvjit_program_desc d = the_desc();
  d.arch = env.sm == 90 ? (100 | KVJIT_TARGET_ARCH_SPECIFIC) : (90 | KVJIT_TARGET_ARCH_SPECIFIC);
  kvjit_program *p = NULL;
  assert_int_equal(kvjit_program_get(ctx, &p, NULL, &d), KVJIT_ERR_UNSUPPORTED);
  assert_non_null(strstr(kvjit_last_error(), "cannot run on the current device"));
  d.arch = env.sm >= 90 ? 80 : 90; /* another major version */
  assert_int_equal(kvjit_program_get(ctx, &p, NULL, &d), KVJIT_ERR_UNSUPPORTED);
}

static void test_a_launch_with_the_wrong_argument_count_is_refused(void **state) {
  (void)state;
  kvjit_program *prog = NULL;
  kvjit_program_desc d = the_desc();
  assert_int_equal(kvjit_program_get(ctx, &prog, NULL, &d), KVJIT_OK);
  kvjit_kernel *k = NULL;
  assert_int_equal(kvjit_program_kernel(prog, &k, "axpb<1000,float>", 0), KVJIT_OK); /* canonical lookup */
  size_t params = 0, offset = 0, size = 0;
  assert_int_equal(kvjit_kernel_num_params(k, &params), KVJIT_OK);
  assert_int_equal(params, 4);
  assert_int_equal(kvjit_kernel_param_info(k, 2, &offset, &size), KVJIT_OK);
  assert_int_equal(offset, 16);
  assert_int_equal(size, 4);
  assert_int_equal(kvjit_kernel_param_info(k, 4, &offset, &size), KVJIT_ERR_NOT_FOUND);
  CUdeviceptr y = gpu_alloc(4096), x = gpu_alloc(4096);
  GPU_CU(env.drv->cuMemsetD32(y, 0xdeadbeef, 1024));
  float a = 1, b = 2;
  void *args[] = {&y, &x, &a, &b};
  kvjit_launch_config cfg = KVJIT_LAUNCH_CONFIG_INIT;
  cfg.grid[0] = 4;
  cfg.block[0] = 256;
  cfg.num_args = 3;
  assert_int_equal(kvjit_launch(k, &cfg, args), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "takes 4 parameters"));
  gpu_sync();
  uint32_t first = 0;
  gpu_download(&first, y, 4);
  assert_int_equal(first, 0xdeadbeef); /* nothing ran */
  cfg.num_args = 4;
  assert_int_equal(kvjit_launch(k, &cfg, args), KVJIT_OK);
  gpu_sync();
  gpu_free(x);
  gpu_free(y);
}

static void test_a_handle_returns_the_loaded_program(void **state) {
  (void)state;
  kvjit_program_desc d = the_desc();
  kvjit_program *direct = NULL, *via = NULL;
  assert_int_equal(kvjit_program_get(ctx, &direct, NULL, &d), KVJIT_OK);
  kvjit_program_handle *h = NULL;
  char *copy = strdup(source);
  d.source = copy; /* the handle deep-copies: the caller's buffer may change afterwards */
  assert_int_equal(kvjit_program_handle_create(ctx, &h, &d), KVJIT_OK);
  memset(copy, ' ', strlen(copy));
  kvjit_origin origin = 0;
  for (int i = 0; i < 3; i++) {
    assert_int_equal(kvjit_program_handle_get(h, &via, &origin), KVJIT_OK);
    assert_ptr_equal(via, direct);
    assert_int_equal(origin, KVJIT_FROM_MEMORY);
  }
  run_axpb(via, 7);
  kvjit_program_handle_destroy(h);
  free(copy);
}

int main(void) {
  const gpu_driver *drv;
  if (gpu_driver_get(&drv) != KVJIT_OK) {
    printf("SKIP: %s\n", gpu_driver_error());
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
      cmocka_unit_test(test_kernels_of_a_bundle_load_one_by_one),
      cmocka_unit_test(test_pdl_chain),
      cmocka_unit_test(test_second_context_uses_the_same_load),
      cmocka_unit_test(test_compile_error_keeps_the_log),
      cmocka_unit_test(test_bad_launches),
      cmocka_unit_test(test_toolkit_header_kernel_and_a_global),
      cmocka_unit_test(test_200_kib_of_dynamic_shared_memory),
      cmocka_unit_test(test_thread_block_cluster_and_cooperative_launches),
      cmocka_unit_test(test_compute_90_ptx_finished_by_the_driver),
      cmocka_unit_test(test_sm_90a_kernel_with_a_hopper_only_instruction),
      cmocka_unit_test(test_targets_that_cannot_run_here_are_refused),
      cmocka_unit_test(test_a_launch_with_the_wrong_argument_count_is_refused),
      cmocka_unit_test(test_a_handle_returns_the_loaded_program),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  printf("gpu_loader: %zu cases, %d failed (%s, sm_%d)\n", sizeof tests / sizeof tests[0], failed, env.name,
         env.sm);
  kvjit_context_destroy(ctx);
  gpu_teardown(&env);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  return failed ? 1 : 0;
}
