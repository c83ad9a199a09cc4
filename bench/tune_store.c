/*
 * tune_store: time store_kv_cache plans with one knob changed, to retune src/ops/store_kv_plan.c's class
 * table. Not a benchmark of record (bench_ops is): it times exactly what a config line asks for.
 *
 *   usage: tune_store [--reps N] [--alt-template FILE] CONFIG
 *
 * CONFIG has one line per measurement (# starts a comment):
 *
 *   label row batch hot split block items evict lanes [carveout [pdl]]
 *
 * row: K and V row bytes; hot 1: every launch reads the same inputs (L2-resident), 0: inputs
 * rotate through 512 MiB pools. The rest override the automatic plan for this batch; 0 (or -1
 * for evict) keeps the plan's choice: split, threads per block (launch), items per lane group
 * (1 or 2), evict-first stores (0 or 1), lanes per group; carveout (optional, -1 = the driver's
 * default) is the kernel's preferred shared-memory carveout in percent, which bounds how many
 * blocks an SM holds (the driver reserves 1 KiB of shared memory per block); pdl (optional, default
 * 1) 0 builds and launches the plan without PDL. A label starting with "alt" compiles
 * the --alt-template file in place of the embedded kernel template (same template arguments), so
 * that two kernel versions are compared in one run on one machine: machines differ by a few
 * percent per decode-sized cell, more than most effects being tuned.
 *
 * Slots are a random permutation of a 2 GiB cache (per K and V; of its first 16M rows for rows
 * under 128 B), int64 indices, PDL on unless a line says 0, every launch inside a CUDA graph of back-to-back launches. A sample of the last launch's rows is
 * compared before timing. Prints one line per config: median and minimum µs per launch, TB/s
 * (4 x batch x row bytes per launch), check, blocks of the launch, registers per thread and the
 * driver's resident blocks per SM (cuOccupancyMaxActiveBlocksPerMultiprocessor).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_PROGRAM "tune_store"
#include "bench_util.h"
#include "store_kv_plan.h"
#include "driver.h"
#include "gpu_driver.h"
#include "program.h"
#include "internal_util.h"
#include "kvjit.h"

/* store_kv_cache's template as the library embeds it (src/ops/store_kv/meson.build). */
extern const char kvjit_src_store_kv_cache[];

#define POOL_BYTES ((size_t)512 << 20)
#define CACHE_BYTES ((size_t)2 << 30)
/* Slot ids the index buffers hold: one per 128 B row of the cache. Narrower rows use that many
 * slots (the start of the cache), not the whole cache: 64 B rows overran both buffers. */
#define MAX_SLOTS ((int64_t)(CACHE_BYTES / 128))
#define MAX_REPS 31
#define TARGET_LOOP_US 3000.0

static const gpu_driver *drv;


typedef struct config {
  char label[64];
  long long row, batch;
  int hot, split, block, items, evict, lanes, carveout, pdl;
} config;

typedef struct tuner {
  kvjit_context *ctx;
  CUstream stream;
  CUevent ev[MAX_REPS + 1];
  int sm, reps;
  CUdevice dev;
  /* Outside kvjit's driver table (only this tool needs them): through bench_cuda_proc(). */
  PFN_cuKernelSetAttribute_v12000 set_attribute;
  PFN_cuKernelGetFunction_v12000 get_function;
  PFN_cuOccupancyMaxActiveBlocksPerMultiprocessor_v6050 max_active_blocks;
  CUdeviceptr k_pool, v_pool, k_cache, v_cache, idx;
  int64_t *perm; /* host copy of the slots of the current row size */
  int64_t perm_row;
  char *alt_template;
} tuner;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static void *dptr(CUdeviceptr p) { return (void *)(uintptr_t)p; }

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
    free(s);
    s = NULL;
  }
  if (s) s[n] = '\0';
  fclose(f);
  return s;
}

static void setup(tuner *t) {
  kvjit_status st = kvjit_context_create(&t->ctx, NULL);
  if (st == KVJIT_OK) st = gpu_driver_get(&drv);
  if (st != KVJIT_OK) {
    fprintf(stderr, "tune_store: %s (%s)\n", kvjit_status_name(st), kvjit_last_error());
    exit(st == KVJIT_ERR_NO_DRIVER || st == KVJIT_ERR_NO_DEVICE ? 77 : 2);
  }
  CUdevice dev;
  CUcontext cu;
  CU(drv->cuDeviceGet(&dev, 0));
  t->dev = dev;
  t->set_attribute = (PFN_cuKernelSetAttribute_v12000)bench_cuda_proc("cuKernelSetAttribute", 12000);
  t->get_function = (PFN_cuKernelGetFunction_v12000)bench_cuda_proc("cuKernelGetFunction", 12000);
  t->max_active_blocks = (PFN_cuOccupancyMaxActiveBlocksPerMultiprocessor_v6050)bench_cuda_proc(
      "cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050);
  if (!t->set_attribute || !t->get_function || !t->max_active_blocks) {
    fprintf(stderr, "tune_store: the driver lacks cuKernelSetAttribute, cuKernelGetFunction or "
                    "cuOccupancyMaxActiveBlocksPerMultiprocessor\n");
    exit(2);
  }
  CU(drv->cuDevicePrimaryCtxRetain(&cu, dev));
  CU(drv->cuCtxSetCurrent(cu));
  if ((st = kvjit_current_sm(&t->sm)) != KVJIT_OK) exit(2);
  CU(drv->cuStreamCreate(&t->stream, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i <= MAX_REPS; i++) CU(drv->cuEventCreate(&t->ev[i], CU_EVENT_DEFAULT));
  CU(drv->cuMemAlloc(&t->k_pool, POOL_BYTES));
  CU(drv->cuMemAlloc(&t->v_pool, POOL_BYTES));
  CU(drv->cuMemAlloc(&t->k_cache, CACHE_BYTES));
  CU(drv->cuMemAlloc(&t->v_cache, CACHE_BYTES));
  CU(drv->cuMemAlloc(&t->idx, (size_t)MAX_SLOTS * 8));
  /* Random inputs (a 16 MiB random block, one word changed per copy); poisoned caches. */
  const size_t block = (size_t)16 << 20;
  uint64_t *h = malloc(block);
  t->perm = malloc((size_t)MAX_SLOTS * 8);
  if (!h || !t->perm) exit(2);
  for (size_t i = 0; i < block / 8; i++) h[i] = rng();
  for (size_t off = 0; off < POOL_BYTES; off += block) {
    h[0]++;
    CU(drv->cuMemcpyHtoD(t->k_pool + off, h, block));
    h[1]++;
    CU(drv->cuMemcpyHtoD(t->v_pool + off, h, block));
  }
  free(h);
  CU(drv->cuMemsetD8(t->k_cache, 0xa5, CACHE_BYTES));
  CU(drv->cuMemsetD8(t->v_cache, 0x5a, CACHE_BYTES));
  t->perm_row = -1;
}

static int64_t slots_of(int64_t row) {
  const int64_t all = (int64_t)(CACHE_BYTES / (size_t)row);
  return all < MAX_SLOTS ? all : MAX_SLOTS;
}

/* Slots of a row size: a random permutation of the cache's slots. */
static void set_row(tuner *t, int64_t row) {
  if (row == t->perm_row) return;
  const int64_t slots = slots_of(row);
  for (int64_t i = 0; i < slots; i++) t->perm[i] = i;
  for (int64_t i = slots - 1; i > 0; i--) {
    int64_t j = (int64_t)(rng() % (uint64_t)(i + 1)), tmp = t->perm[i];
    t->perm[i] = t->perm[j];
    t->perm[j] = tmp;
  }
  CU(drv->cuMemcpyHtoD(t->idx, t->perm, (size_t)slots * 8));
  t->perm_row = row;
}

/* The template, or the alternative one (same template signature) when the label asks for it. */
static const char *plan_source(const tuner *t, const config *c) {
  if (strncmp(c->label, "alt", 3) != 0) return kvjit_src_store_kv_cache;
  if (!t->alt_template) {
    fprintf(stderr, "tune_store: %s: no --alt-template given\n", c->label);
    exit(2);
  }
  return t->alt_template;
}

static void run_config(tuner *t, const config *c) {
  kvjit_store_kv_plan plan;
  if (kvjit_store_kv_plan_make(&plan, t->sm, c->row, c->row, 16, KVJIT_INDEX_INT64, c->pdl ? KVJIT_PDL_ON : KVJIT_PDL_OFF, c->split,
                               kvjit_store_kv_batch_class(c->batch)) != KVJIT_OK) {
    printf("%-24s plan: %s\n", c->label, kvjit_last_error());
    return;
  }
  if (c->lanes) plan.lanes = c->lanes;
  if (c->items) plan.items = c->items;
  if (c->evict >= 0) plan.evict_first = c->evict;
  const int block = c->block ? c->block : plan.block;
  if (block > plan.block) plan.block = block; /* the kernel's launch bound */
  kvjit_op_program program;
  if (kvjit_store_kv_program(&plan, &program) != KVJIT_OK) {
    printf("%-24s program: %s\n", c->label, kvjit_last_error());
    return;
  }
  kvjit_program_desc desc = program.desc;
  desc.source = plan_source(t, c);
  desc.name = "tune_store.cu";
  kvjit_program *prog = NULL;
  kvjit_kernel *kernel;
  if (kvjit_program_get(t->ctx, &prog, NULL, &desc) != KVJIT_OK ||
      kvjit_program_kernel(prog, &kernel, NULL, 0) != KVJIT_OK) {
    printf("%-24s compile: %s\n%s\n", c->label, kvjit_last_error(), prog ? kvjit_program_log(prog) : "");
    return;
  }

  /* Registers per thread and resident blocks per SM: what makes grids of several waves. The
   * kernel is shared with other lines of the same plan: the carveout is put back at the end. */
  int regs = 0, per_sm = 0;
  CU(drv->cuKernelGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, kernel->handle, t->dev));
  if (c->carveout >= 0) {
    CU(t->set_attribute(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, c->carveout, kernel->handle,
                                 t->dev));
  }
  CUfunction fn;
  CU(t->get_function(&fn, kernel->handle));
  CU(t->max_active_blocks(&per_sm, fn, block, 0));
  set_row(t, c->row);
  const int64_t slots = slots_of(c->row);
  const uint64_t units = (uint64_t)c->batch * (uint64_t)plan.split;
  const uint64_t per_block = (uint64_t)(block / plan.lanes) * (uint64_t)plan.items;
  const uint64_t blocks = (units + per_block - 1) / per_block;
  const double bytes = 4.0 * (double)c->batch * (double)c->row;
  double est_us = bytes / 3.0e6;
  if (est_us < 1.0) est_us = 1.0;
  int launches = (int)(TARGET_LOOP_US / est_us);
  launches = launches < 8 ? 8 : launches > 320 ? 320 : launches;
  const int64_t in_fit = (int64_t)(POOL_BYTES / ((size_t)c->batch * (size_t)c->row));
  const int in_sets = c->hot ? 1 : (int)(in_fit < launches ? (in_fit < 1 ? 1 : in_fit) : launches);
  const int64_t idx_fit = slots / c->batch;
  const int idx_sets = (int)(idx_fit < launches ? (idx_fit < 1 ? 1 : idx_fit) : launches);

  kvjit_launch_config cfg = KVJIT_LAUNCH_CONFIG_INIT;
  cfg.grid[0] = (unsigned)blocks;
  cfg.block[0] = (unsigned)block;
  cfg.stream = t->stream;
  cfg.programmatic_serialization = plan.pdl;
  kvjit_store_kv_params p;
  memset(&p, 0, sizeof p);
  p.k_stride = p.v_stride = p.k_cache_stride = p.v_cache_stride = c->row;
  p.index_stride = 1;
  p.batch = c->batch;
  p.num_slots = slots;
  p.skip_slot = -1;
  p.k_cache = dptr(t->k_cache);
  p.v_cache = dptr(t->v_cache);
  void *args[] = {&p};
  CUgraph graph;
  CUgraphExec exec;
  CU(drv->cuStreamBeginCapture(t->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  for (int j = 0; j < launches; j++) {
    const size_t off = (size_t)(j % in_sets) * (size_t)c->batch * (size_t)c->row;
    p.k = dptr(t->k_pool + off);
    p.v = dptr(t->v_pool + off);
    p.indices = dptr(t->idx + (size_t)(j % idx_sets) * (size_t)c->batch * 8);
    if (kvjit_launch(kernel, &cfg, args) != KVJIT_OK) {
      fprintf(stderr, "tune_store: %s: launch: %s\n", c->label, kvjit_last_error());
      exit(2);
    }
  }
  CU(drv->cuStreamEndCapture(t->stream, &graph));
  CU(drv->cuGraphInstantiateWithFlags(&exec, graph, 0));
  CU(drv->cuGraphLaunch(exec, t->stream));
  CU(drv->cuStreamSynchronize(t->stream));

  /* The last launch's rows, up to 512 of them, K and V. */
  const int last = launches - 1;
  const size_t in_off = (size_t)(last % in_sets) * (size_t)c->batch * (size_t)c->row;
  const int64_t *slot = t->perm + (size_t)(last % idx_sets) * (size_t)c->batch;
  unsigned char *want = malloc((size_t)c->row), *got = malloc((size_t)c->row);
  if (!want || !got) exit(2);
  long wrong = 0;
  const int64_t step = c->batch > 512 ? c->batch / 512 : 1;
  for (int64_t i = 0; i < c->batch; i += step) {
    for (int kv = 0; kv < 2; kv++) {
      CU(drv->cuMemcpyDtoH(want, (kv ? t->v_pool : t->k_pool) + in_off + (size_t)i * (size_t)c->row, (size_t)c->row));
      CU(drv->cuMemcpyDtoH(got, (kv ? t->v_cache : t->k_cache) + (size_t)slot[i] * (size_t)c->row, (size_t)c->row));
      wrong += memcmp(want, got, (size_t)c->row) != 0;
    }
  }
  free(want);
  free(got);

  double us[MAX_REPS];
  CU(drv->cuGraphLaunch(exec, t->stream));
  CU(drv->cuEventRecord(t->ev[0], t->stream));
  for (int r = 0; r < t->reps; r++) {
    CU(drv->cuGraphLaunch(exec, t->stream));
    CU(drv->cuEventRecord(t->ev[r + 1], t->stream));
  }
  CU(drv->cuEventSynchronize(t->ev[t->reps]));
  for (int r = 0; r < t->reps; r++) {
    float ms;
    CU(drv->cuEventElapsedTime(&ms, t->ev[r], t->ev[r + 1]));
    us[r] = (double)ms * 1000.0 / launches;
  }
  const bench_stats s = bench_summarize(us, (size_t)t->reps);
  printf("%-24s %6lld %6lld %3d | split %2d lanes %2d vec %2d block %4d items %d evict %d | %9.3f %9.3f %7.3f %s"
         " | blocks %llu regs %d per_sm %d carveout %d pdl %d\n",
         c->label, c->row, c->batch, c->hot, plan.split, plan.lanes, plan.vec, block, plan.items, plan.evict_first,
         s.median, s.min, bytes / s.median / 1e6, wrong ? "FAIL" : "ok", (unsigned long long)blocks, regs, per_sm,
         c->carveout, plan.pdl);
  if (c->carveout >= 0) {
    CU(t->set_attribute(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, -1, kernel->handle, t->dev));
  }
  fflush(stdout);
  CU(drv->cuGraphExecDestroy(exec));
  CU(drv->cuGraphDestroy(graph));
}

int main(int argc, char **argv) {
  tuner t;
  memset(&t, 0, sizeof t);
  t.reps = 11;
  const char *path = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) t.reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--alt-template") && i + 1 < argc) {
      if (!(t.alt_template = read_file(argv[++i]))) {
        perror(argv[i]);
        return 2;
      }
    } else if (argv[i][0] != '-' && !path) path = argv[i];
    else {
      fprintf(stderr, "usage: tune_store [--reps N] [--alt-template FILE] CONFIG\n");
      return 2;
    }
  }
  if (!path || t.reps < 3 || t.reps > MAX_REPS) {
    fprintf(stderr, "usage: tune_store [--reps N (3..%d)] [--alt-template FILE] CONFIG\n", MAX_REPS);
    return 2;
  }
  FILE *f = fopen(path, "r");
  if (!f) {
    perror(path);
    return 2;
  }
  setup(&t);
  printf("%-24s %6s %6s %3s | %-57s | %9s %9s %7s %s\n", "label", "row", "batch", "hot", "plan as launched",
         "median us", "min us", "TB/s", "check");
  char line[512];
  int bad = 0;
  while (fgets(line, sizeof line, f)) {
    config c;
    if (line[0] == '#' || line[0] == '\n') continue;
    c.carveout = -1;
    c.pdl = 1;
    const int fields = sscanf(line, "%63s %lld %lld %d %d %d %d %d %d %d %d", c.label, &c.row, &c.batch, &c.hot,
                              &c.split, &c.block, &c.items, &c.evict, &c.lanes, &c.carveout, &c.pdl);
    if (fields < 9 || c.carveout < -1 || c.carveout > 100 || (c.pdl != 0 && c.pdl != 1) ||
        c.row <= 0 || c.batch <= 0 || (size_t)c.row * (size_t)c.batch > POOL_BYTES || c.block % 32 != 0 ||
        c.block > 1024 || c.items < 0 || c.items > 2) {
      fprintf(stderr, "tune_store: bad config line: %s", line);
      bad = 1;
      continue;
    }
    run_config(&t, &c);
  }
  fclose(f);
  free(t.alt_template);
  free(t.perm);
  kvjit_context_destroy(t.ctx);
  return bad;
}
