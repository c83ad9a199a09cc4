/*
 * Several GPUs of one process (gpu suite; exits 77 with fewer than two devices, which is every
 * machine CI and this project's sessions had: this test has never run): one kvjit context used
 * from a thread per device, each storing into its own cache (the arch-0 variant resolving to each
 * device's arch, one program loaded once per CUDA context); transfer_kv from device 0's cache to
 * device 1's, launched on device 1 (one layer, a layer table, bad slots counted, a CUDA graph),
 * and kvjit_transfer_kv_check_devices() refusing it before peer access is enabled.
 * Every byte of every cache is compared with the host's reference. `--tp-worker`: one process of
 * tests/test_tp_cold_start.sh's GPU part (see tp_worker()).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_util.h"

#define ROW 1024     /* bytes of a K row and of a V row */
#define SLOTS 4096   /* rows of each cache */
#define BATCH 777    /* rows stored or moved per call (not a power of two) */
#define LAYERS 3     /* layers of the table transfer */
#define MAX_DEVICES 8
#define POISON 0xA5

static gpu_env env;
static kvjit_context *ctx;

/* Slot ids: a shuffled set of distinct slots, one padding (-1) and one past the cache (counted). */
static void make_slots(int64_t *slots, uint64_t seed) {
  int64_t *all = malloc(sizeof *all * SLOTS);
  for (int64_t s = 0; s < SLOTS; s++) all[s] = s;
  for (int64_t s = SLOTS - 1; s > 0; s--) {
    const int64_t j = (int64_t)(gpu_rand(&seed) % (uint64_t)(s + 1)), t = all[s];
    all[s] = all[j];
    all[j] = t;
  }
  memcpy(slots, all, sizeof *slots * BATCH);
  slots[BATCH / 3] = -1;
  slots[BATCH / 2] = SLOTS + 5;
  free(all);
}

/* Bytes of @p cache (downloaded) that differ from rows[i] at slots[i], the poison elsewhere. */
static long check_cache(const uint8_t *cache, const uint8_t *rows, const int64_t *slots) {
  uint8_t *want = malloc((size_t)SLOTS * ROW);
  memset(want, POISON, (size_t)SLOTS * ROW);
  for (int i = 0; i < BATCH; i++)
    if (slots[i] >= 0 && slots[i] < SLOTS) memcpy(want + slots[i] * ROW, rows + (size_t)i * ROW, ROW);
  long bad = 0;
  for (size_t b = 0; b < (size_t)SLOTS * ROW; b++) bad += cache[b] != want[b];
  free(want);
  return bad;
}

/* A cache of SLOTS rows on the current context's device, poisoned. */
static CUdeviceptr poisoned_cache(void) {
  CUdeviceptr c = gpu_alloc((size_t)SLOTS * ROW);
  GPU_CU(env.drv->cuMemsetD8(c, POISON, (size_t)SLOTS * ROW));
  return c;
}

typedef struct device_job {
  int ordinal;
  long bad_bytes;  /* K and V bytes that differ from the reference */
  uint64_t oob;    /* bad slots the device's kernels counted */
  kvjit_status st; /* the store's */
  char error[256];
} device_job;

/* On its own thread: device @p job->ordinal's primary context, a stream, a store, every byte. */
static void *store_on_device(void *arg) {
  device_job *job = arg;
  CUdevice dev;
  CUcontext cu;
  GPU_CU(env.drv->cuDeviceGet(&dev, job->ordinal));
  GPU_CU(env.drv->cuDevicePrimaryCtxRetain(&cu, dev));
  GPU_CU(env.drv->cuCtxSetCurrent(cu));
  CUstream stream;
  GPU_CU(env.drv->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(job->ordinal + 1);
  uint8_t *k = malloc((size_t)BATCH * ROW), *v = malloc((size_t)BATCH * ROW), *got = malloc((size_t)SLOTS * ROW);
  int64_t slots[BATCH];
  gpu_fill_random(k, (size_t)BATCH * ROW, &seed);
  gpu_fill_random(v, (size_t)BATCH * ROW, &seed);
  make_slots(slots, seed);
  CUdeviceptr dk = gpu_alloc((size_t)BATCH * ROW), dv = gpu_alloc((size_t)BATCH * ROW), di = gpu_alloc(sizeof slots);
  gpu_upload(dk, k, (size_t)BATCH * ROW);
  gpu_upload(dv, v, (size_t)BATCH * ROW);
  gpu_upload(di, slots, sizeof slots);
  CUdeviceptr kc = poisoned_cache(), vc = poisoned_cache();
  kvjit_store_kv_args a = KVJIT_STORE_KV_ARGS_INIT;
  a.k = (const void *)(uintptr_t)dk;
  a.v = (const void *)(uintptr_t)dv;
  a.k_cache = (void *)(uintptr_t)kc;
  a.v_cache = (void *)(uintptr_t)vc;
  a.indices = (const void *)(uintptr_t)di;
  a.batch = BATCH;
  a.k_row_bytes = ROW;
  a.num_slots = SLOTS;
  a.stream = (struct CUstream_st *)stream;
  job->st = kvjit_store_kv_cache(ctx, &a);
  if (job->st != KVJIT_OK) snprintf(job->error, sizeof job->error, "%s", kvjit_last_error());
  GPU_CU(env.drv->cuStreamSynchronize(stream));
  gpu_download(got, kc, (size_t)SLOTS * ROW);
  job->bad_bytes = check_cache(got, k, slots);
  gpu_download(got, vc, (size_t)SLOTS * ROW);
  job->bad_bytes += check_cache(got, v, slots);
  if (kvjit_op_oob_count(ctx, "store_kv_cache", &job->oob, 1) != KVJIT_OK) job->oob = UINT64_MAX;
  gpu_free(dk);
  gpu_free(dv);
  gpu_free(di);
  gpu_free(kc);
  gpu_free(vc);
  free(k);
  free(v);
  free(got);
  GPU_CU(env.drv->cuStreamDestroy(stream));
  GPU_CU(env.drv->cuCtxSetCurrent(NULL));
  GPU_CU(env.drv->cuDevicePrimaryCtxRelease(dev));
  return NULL;
}

static int test_store_every_device(int devices) {
  pthread_t threads[MAX_DEVICES];
  device_job jobs[MAX_DEVICES];
  memset(jobs, 0, sizeof jobs);
  for (int d = 0; d < devices; d++) {
    jobs[d].ordinal = d;
    if (pthread_create(&threads[d], NULL, store_on_device, &jobs[d]) != 0) {
      fprintf(stderr, "pthread_create failed\n");
      return 1;
    }
  }
  int failed = 0;
  for (int d = 0; d < devices; d++) {
    pthread_join(threads[d], NULL);
    const int ok = jobs[d].st == KVJIT_OK && jobs[d].bad_bytes == 0 && jobs[d].oob == 1;
    printf("store on device %d: %s, %ld bad bytes, %llu bad slots counted (1 expected)%s%s\n", d,
           kvjit_status_name(jobs[d].st), jobs[d].bad_bytes, (unsigned long long)jobs[d].oob, ok ? "" : ": ",
           jobs[d].error);
    failed |= !ok;
  }
  kvjit_stats s = KVJIT_STATS_INIT;
  if (kvjit_context_stats(ctx, &s) == KVJIT_OK)
    printf("one context, %d devices: %llu compiles, %llu loads\n", devices, (unsigned long long)s.compiles,
           (unsigned long long)s.loads);
  return failed;
}

/* The rows of a transfer: the source's rows at src slots, uploaded into a poisoned source cache. */
typedef struct side {
  CUdeviceptr k, v;
} side;

static int transfer_case(CUcontext c0, CUcontext c1, CUstream stream, int layers, int graph) {
  const int n = layers ? layers : 1;
  uint64_t seed = 0x5eed0000ull + (uint64_t)layers * 7 + (uint64_t)graph;
  int64_t src_slots[BATCH], dst_slots[BATCH];
  make_slots(src_slots, seed);
  make_slots(dst_slots, seed ^ 0xabcdefull);
  /* A bad source id (item BATCH/4: its destination row keeps the poison) and a bad destination id
   * (BATCH/2) are counted; the destination's padding (BATCH/3) is skipped silently. */
  src_slots[BATCH / 3] = 3;
  src_slots[BATCH / 2] = 7;
  src_slots[BATCH / 4] = SLOTS;
  side src[LAYERS], dst[LAYERS];
  uint8_t *host = malloc((size_t)SLOTS * ROW * 2 * LAYERS), *got = malloc((size_t)SLOTS * ROW);
  GPU_CU(env.drv->cuCtxSetCurrent(c0));
  for (int l = 0; l < n; l++) {
    src[l].k = gpu_alloc((size_t)SLOTS * ROW);
    src[l].v = gpu_alloc((size_t)SLOTS * ROW);
    gpu_fill_random(host + (size_t)SLOTS * ROW * 2 * l, (size_t)SLOTS * ROW * 2, &seed);
    gpu_upload(src[l].k, host + (size_t)SLOTS * ROW * 2 * l, (size_t)SLOTS * ROW);
    gpu_upload(src[l].v, host + (size_t)SLOTS * ROW * (2 * l + 1), (size_t)SLOTS * ROW);
  }
  GPU_CU(env.drv->cuCtxSetCurrent(c1));
  uint64_t tables[4][LAYERS];
  for (int l = 0; l < n; l++) {
    dst[l].k = poisoned_cache();
    dst[l].v = poisoned_cache();
    tables[0][l] = src[l].k;
    tables[1][l] = src[l].v;
    tables[2][l] = dst[l].k;
    tables[3][l] = dst[l].v;
  }
  CUdeviceptr si = gpu_alloc(sizeof src_slots), di = gpu_alloc(sizeof dst_slots), dt = gpu_alloc(sizeof tables);
  gpu_upload(si, src_slots, sizeof src_slots);
  gpu_upload(di, dst_slots, sizeof dst_slots);
  gpu_upload(dt, tables, sizeof tables);
  kvjit_transfer_kv_args a = KVJIT_TRANSFER_KV_ARGS_INIT;
  if (layers) {
    a.src_k = (const void *)(uintptr_t)(dt);
    a.src_v = (const void *)(uintptr_t)(dt + sizeof tables[0]);
    a.dst_k = (void *)(uintptr_t)(dt + 2 * sizeof tables[0]);
    a.dst_v = (void *)(uintptr_t)(dt + 3 * sizeof tables[0]);
  } else {
    a.src_k = (const void *)(uintptr_t)src[0].k;
    a.src_v = (const void *)(uintptr_t)src[0].v;
    a.dst_k = (void *)(uintptr_t)dst[0].k;
    a.dst_v = (void *)(uintptr_t)dst[0].v;
  }
  a.src_indices = (const void *)(uintptr_t)si;
  a.dst_indices = (const void *)(uintptr_t)di;
  a.batch = BATCH;
  a.k_row_bytes = ROW;
  a.src_num_slots = a.dst_num_slots = SLOTS;
  a.num_layers = layers;
  a.stream = (struct CUstream_st *)stream;
  kvjit_status st = kvjit_transfer_kv_check_devices(ctx, &a, 0);
  if (st == KVJIT_OK) st = kvjit_transfer_kv_prepare(ctx, &a);
  if (st == KVJIT_OK && graph) {
    CUgraph g;
    CUgraphExec exec;
    GPU_CU(env.drv->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    st = kvjit_transfer_kv(ctx, &a);
    GPU_CU(env.drv->cuStreamEndCapture(stream, &g));
    GPU_CU(env.drv->cuGraphInstantiateWithFlags(&exec, g, 0));
    if (st == KVJIT_OK) GPU_CU(env.drv->cuGraphLaunch(exec, stream));
    GPU_CU(env.drv->cuGraphExecDestroy(exec));
    GPU_CU(env.drv->cuGraphDestroy(g));
  } else if (st == KVJIT_OK) {
    st = kvjit_transfer_kv(ctx, &a);
  }
  if (st != KVJIT_OK) printf("transfer: %s %s\n", kvjit_status_name(st), kvjit_last_error());
  GPU_CU(env.drv->cuStreamSynchronize(stream));
  long bad = 0;
  uint8_t *rows = malloc((size_t)BATCH * ROW);
  for (int l = 0; l < n; l++) {
    for (int kv = 0; kv < 2; kv++) {
      const uint8_t *source = host + (size_t)SLOTS * ROW * (2 * l + kv);
      for (int i = 0; i < BATCH; i++) /* rows with a bad source id move nothing: the poison stays */
        if (src_slots[i] >= 0 && src_slots[i] < SLOTS) memcpy(rows + (size_t)i * ROW, source + src_slots[i] * ROW, ROW);
        else memset(rows + (size_t)i * ROW, POISON, ROW);
      gpu_download(got, kv ? dst[l].v : dst[l].k, (size_t)SLOTS * ROW);
      bad += check_cache(got, rows, dst_slots);
    }
  }
  uint64_t oob = 0;
  kvjit_status counted = kvjit_op_oob_count(ctx, "transfer_kv", &oob, 1);
  const uint64_t want_oob = 2 * (uint64_t)n; /* two bad items per layer */
  printf("transfer device 0 -> 1, %s%s: %s, %ld bad bytes, %llu bad slots counted (%llu expected)\n",
         layers ? "layer table" : "one layer", graph ? ", CUDA graph" : "", kvjit_status_name(st), bad,
         (unsigned long long)oob, (unsigned long long)want_oob);
  const int failed = st != KVJIT_OK || bad != 0 || counted != KVJIT_OK || oob != want_oob;
  gpu_free(si);
  gpu_free(di);
  gpu_free(dt);
  for (int l = 0; l < n; l++) {
    gpu_free(dst[l].k);
    gpu_free(dst[l].v);
  }
  GPU_CU(env.drv->cuCtxSetCurrent(c0));
  for (int l = 0; l < n; l++) {
    gpu_free(src[l].k);
    gpu_free(src[l].v);
  }
  GPU_CU(env.drv->cuCtxSetCurrent(c1));
  free(host);
  free(got);
  free(rows);
  return failed;
}

/* Before peer access: refused, naming src_k and both devices; after kvjit enables it: moved. */
static int test_transfer_between_devices(void) {
  CUdevice d1;
  CUcontext c1;
  GPU_CU(env.drv->cuDeviceGet(&d1, 1));
  GPU_CU(env.drv->cuDevicePrimaryCtxRetain(&c1, d1));
  int can = 0;
  GPU_CU(env.drv->cuDeviceCanAccessPeer(&can, d1, env.device));
  GPU_CU(env.drv->cuCtxSetCurrent(env.context));
  CUdeviceptr k0 = gpu_alloc((size_t)SLOTS * ROW);
  GPU_CU(env.drv->cuCtxSetCurrent(c1));
  CUdeviceptr k1 = gpu_alloc((size_t)SLOTS * ROW), idx = gpu_alloc(sizeof(int64_t) * BATCH);
  CUstream stream;
  GPU_CU(env.drv->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  kvjit_transfer_kv_args a = KVJIT_TRANSFER_KV_ARGS_INIT;
  a.src_k = (const void *)(uintptr_t)k0;
  a.dst_k = (void *)(uintptr_t)k1;
  a.src_indices = a.dst_indices = (const void *)(uintptr_t)idx;
  a.batch = BATCH;
  a.k_row_bytes = ROW;
  a.src_num_slots = a.dst_num_slots = SLOTS;
  a.stream = (struct CUstream_st *)stream;
  kvjit_status st = kvjit_transfer_kv_check_devices(ctx, &a, 0);
  const char *want = can ? "may not access" : "cannot reach";
  int failed = st != KVJIT_ERR_INVALID_ARGUMENT || strstr(kvjit_last_error(), "src_k: on device 0") == NULL ||
               strstr(kvjit_last_error(), "device 1") == NULL || strstr(kvjit_last_error(), want) == NULL;
  printf("before peer access: %s \"%s\"%s\n", kvjit_status_name(st), kvjit_last_error(), failed ? " (WRONG)" : "");
  if (!can) {
    printf("device 1 cannot access device 0's memory: the transfers between them not run\n");
  } else {
    st = kvjit_transfer_kv_check_devices(ctx, &a, KVJIT_TRANSFER_KV_ENABLE_PEER_ACCESS);
    printf("with KVJIT_TRANSFER_KV_ENABLE_PEER_ACCESS: %s %s\n", kvjit_status_name(st),
           st == KVJIT_OK ? "" : kvjit_last_error());
    failed |= st != KVJIT_OK;
    failed |= kvjit_transfer_kv_check_devices(ctx, &a, 0) != KVJIT_OK; /* enabled stays enabled */
    failed |= transfer_case(env.context, c1, stream, 0, 0);
    failed |= transfer_case(env.context, c1, stream, LAYERS, 0);
    failed |= transfer_case(env.context, c1, stream, 0, 1);
    failed |= transfer_case(env.context, c1, stream, LAYERS, 1);
  }
  GPU_CU(env.drv->cuStreamDestroy(stream));
  gpu_free(k1);
  gpu_free(idx);
  GPU_CU(env.drv->cuCtxSetCurrent(env.context));
  gpu_free(k0);
  GPU_CU(env.drv->cuDevicePrimaryCtxRelease(d1));
  return failed;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* One process of a tensor-parallel server's cold start (tests/test_tp_cold_start.sh): the cache
 * dir from KVJIT_CACHE_DIR, the process's visible device 0, one store checked byte for byte; the
 * time from main() to the finished first launch and this process's compiles on one line. */
static int tp_worker(double start) {
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.log = 0;
  if (kvjit_context_create(&ctx, &o) != KVJIT_OK) {
    fprintf(stderr, "tp worker: %s\n", kvjit_last_error());
    return 1;
  }
  device_job job;
  memset(&job, 0, sizeof job);
  store_on_device(&job);
  const double ms = now_ms() - start;
  kvjit_stats s = KVJIT_STATS_INIT;
  kvjit_status st = kvjit_context_stats(ctx, &s);
  printf("tp worker: first_launch_ms=%.1f compiles=%llu disk_hits=%llu bad_bytes=%ld oob=%llu status=%s %s\n", ms,
         (unsigned long long)s.compiles, (unsigned long long)s.disk_hits, job.bad_bytes,
         (unsigned long long)job.oob, kvjit_status_name(job.st), job.error);
  kvjit_context_destroy(ctx);
  return st == KVJIT_OK && job.st == KVJIT_OK && job.bad_bytes == 0 && job.oob == 1 ? 0 : 1;
}

int main(int argc, char **argv) {
  const double start = now_ms();
  setvbuf(stdout, NULL, _IOLBF, 0);
  int rc = gpu_setup(&env);
  if (rc != 0) return rc;
  if (argc > 1 && strcmp(argv[1], "--tp-worker") == 0) {
    rc = tp_worker(start);
    gpu_teardown(&env);
    return rc;
  }
  if (env.device_count < 2) {
    printf("test_gpu_multi: %d CUDA device(s), needs 2: not run (skip)\n", env.device_count);
    gpu_teardown(&env);
    return GPU_SKIP;
  }
  char dir[64];
  if (gpu_context_create(&ctx, dir, sizeof dir, "multi", NULL) != 0) return 1;
  const int devices = env.device_count < MAX_DEVICES ? env.device_count : MAX_DEVICES;
  int failed = test_store_every_device(devices);
  GPU_CU(env.drv->cuCtxSetCurrent(env.context));
  failed |= test_transfer_between_devices();
  gpu_context_destroy(ctx, dir);
  gpu_teardown(&env);
  printf("test_gpu_multi: %s\n", failed ? "FAILED" : "ok");
  return failed ? 1 : 0;
}
