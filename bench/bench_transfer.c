/*
 * bench_transfer: kvjit_transfer_kv against its peers and its bounds, in one process on one GPU.
 *
 * Peers, on the same caches and slot ids: the algorithm of SGLang's JIT hierarchical-cache kernel
 * reimplemented (bench/ref_transfer_kv.cuh, through the same NVRTC path) at SGLang's default block
 * quota (2) and at a quota that fills the GPU; per-row cuMemcpyAsync (what a "direct" backend
 * does: two copies per item). PyTorch's dst[di] = src[si] is bench/torch_transfer_peer.py.
 * Bounds, measured in the same run: one large pinned cuMemcpyHtoDAsync and DtoHAsync (the host
 * link), one large cuMemcpyDtoDAsync (device memory), and kvjit's own kernel with consecutive
 * slots in every cell (what the same copy costs when nothing is scattered).
 *
 * Every measurement goes to the CSV, ratios and the targets to the Markdown file, a compact table
 * to stdout. A budget (--deadline) bounds the run; cells past it are skipped and counted.
 *
 *   usage: bench_transfer [--rows LIST] [--batches LIST] [--dirs d2d,d2h,h2d,h2h] [--layers N]
 *                         [--reps N] [--csv FILE] [--md FILE] [--deadline S]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_PROGRAM "bench_transfer"
#include "bench_util.h"
#include "driver.h"
#include "gpu_driver.h"
#include "kvjit.h"

#define MAX_LIST 16
#define MAX_REPS 32
#define MAX_LAYERS 64
#define MIB ((size_t)1 << 20)
#define TARGET_LOOP_US 4000.0 /* per round of launches between two events */
#define ROW_CHECKS 64

static const gpu_driver *drv;

static void die_kvjit(kvjit_status st, const char *what) {
  fprintf(stderr, "bench_transfer: %s: %s (%s)\n", what, kvjit_status_name(st), kvjit_last_error());
  exit(2);
}

enum { D2D, D2H, H2D, H2H, NUM_DIRS };
static const char *const dir_names[NUM_DIRS] = {"d2d", "d2h", "h2d", "h2h"};
static const kvjit_location dir_src[NUM_DIRS] = {KVJIT_LOCATION_DEVICE, KVJIT_LOCATION_DEVICE, KVJIT_LOCATION_HOST,
                                                 KVJIT_LOCATION_HOST};
static const kvjit_location dir_dst[NUM_DIRS] = {KVJIT_LOCATION_DEVICE, KVJIT_LOCATION_HOST, KVJIT_LOCATION_DEVICE,
                                                 KVJIT_LOCATION_HOST};

typedef struct options {
  int64_t rows[MAX_LIST], batches[MAX_LIST];
  size_t nrows, nbatches;
  int dirs[NUM_DIRS];
  int layers; /* 1: one layer per launch; N > 1: N layers through pointer tables */
  int reps;
  double deadline_s;
  const char *csv_path, *md_path;
} options;

typedef enum impl_kind {
  IMPL_KVJIT,
  IMPL_KVJIT_ALL_SMS,
  IMPL_KVJIT_CONSECUTIVE,
  IMPL_REF_Q2,
  IMPL_REF_FULL,
  IMPL_MEMCPY,
  NUM_IMPLS
} impl_kind;
/* kvjit: its default plan (few CTAs over the host link); kvjit_all_sms: max_ctas
 * KVJIT_TRANSFER_KV_ALL_CTAS, the grid the batch needs (issue 29's comparison). */
static const char *const impl_names[NUM_IMPLS] = {"kvjit", "kvjit_all_sms", "kvjit_consecutive_slots",
                                                  "ref_sglang_q2", "ref_sglang_full", "memcpy_per_row"};

/* A tensor's caches, one per layer, on one side of the link. */
typedef struct side_caches {
  CUdeviceptr k[MAX_LAYERS], v[MAX_LAYERS];
  void *host_k[MAX_LAYERS], *host_v[MAX_LAYERS]; /* pinned: host views */
  CUdeviceptr table_k, table_v;                  /* layers > 1: device tables of the pointers */
} side_caches;

typedef struct result {
  int dir;
  int64_t row, batch;
  double us[NUM_IMPLS]; /* per launch, median; 0: not run */
  int ok;               /* kvjit's sampled rows checked */
} result;

typedef struct bench {
  options opt;
  kvjit_context *ctx;
  CUcontext cuctx;
  CUstream stream;
  CUevent ev[MAX_REPS + 1];
  int sm, sms;
  char gpu[128];
  FILE *csv;
  double htod_gbps, dtoh_gbps, dtod_gbps;
  result *results;
  size_t nresults, cap_results;
  size_t skipped, failures;
  uint64_t t_start;
  int64_t slots;
  CUdeviceptr idx_src, idx_dst, idx_seq; /* int64 slot ids: permutations, and 0..slots-1 */
} bench;

static double elapsed_s(const bench *b) { return (double)(bench_now_ns() - b->t_start) * 1e-9; }
static int over_deadline(const bench *b) { return b->opt.deadline_s > 0 && elapsed_s(b) > b->opt.deadline_s; }
static void *vp(CUdeviceptr p) { return (void *)(uintptr_t)p; }

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

/* ---- buffers -------------------------------------------------------------------------------- */

static CUdeviceptr alloc_side(kvjit_location where, size_t bytes, void **host) {
  if (where == KVJIT_LOCATION_HOST) {
    void *p = NULL;
    CU(drv->cuMemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
    memset(p, 0x5a, bytes);
    *host = p;
    return (CUdeviceptr)(uintptr_t)p; /* unified addressing */
  }
  CUdeviceptr d;
  CU(drv->cuMemAlloc(&d, bytes));
  CU(drv->cuMemsetD8(d, 0x5a, bytes));
  *host = NULL;
  return d;
}

static void free_side(CUdeviceptr p, void *host) {
  if (host) drv->cuMemFreeHost(host);
  else if (p) drv->cuMemFree(p);
}

static void caches_alloc(bench *b, side_caches *c, kvjit_location where, int64_t row) {
  memset(c, 0, sizeof *c);
  const size_t bytes = (size_t)b->slots * (size_t)row;
  for (int l = 0; l < b->opt.layers; l++) {
    c->k[l] = alloc_side(where, bytes, &c->host_k[l]);
    c->v[l] = alloc_side(where, bytes, &c->host_v[l]);
  }
  if (b->opt.layers > 1) {
    CU(drv->cuMemAlloc(&c->table_k, (size_t)b->opt.layers * 8));
    CU(drv->cuMemAlloc(&c->table_v, (size_t)b->opt.layers * 8));
    CU(drv->cuMemcpyHtoD(c->table_k, c->k, (size_t)b->opt.layers * 8));
    CU(drv->cuMemcpyHtoD(c->table_v, c->v, (size_t)b->opt.layers * 8));
  }
}

static void caches_free(const bench *b, side_caches *c) {
  for (int l = 0; l < b->opt.layers; l++) {
    free_side(c->k[l], c->host_k[l]);
    free_side(c->v[l], c->host_v[l]);
  }
  if (c->table_k) drv->cuMemFree(c->table_k);
  if (c->table_v) drv->cuMemFree(c->table_v);
}

/* Random distinct source and destination slots (two permutations) and the identity. */
static void make_indices(bench *b) {
  const size_t n = (size_t)b->slots;
  int64_t *h = malloc(n * 8);
  if (h == NULL) exit(2);
  CUdeviceptr *targets[3] = {&b->idx_src, &b->idx_dst, &b->idx_seq};
  for (int t = 0; t < 3; t++) {
    for (size_t i = 0; i < n; i++) h[i] = (int64_t)i;
    if (t < 2) {
      uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(t + 1);
      for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(mix64(s + i) % (i + 1));
        int64_t x = h[i];
        h[i] = h[j];
        h[j] = x;
      }
    }
    CU(drv->cuMemAlloc(targets[t], n * 8));
    CU(drv->cuMemcpyHtoD(*targets[t], h, n * 8));
  }
  free(h);
}

/* ---- the implementations -------------------------------------------------------------------- */

typedef struct cell {
  int dir;
  int64_t row, batch;
  side_caches *src, *dst;
  int sets; /* index sets launches rotate over */
} cell;

static kvjit_transfer_kv_args kvjit_args(const bench *b, const cell *c, int set, int consecutive) {
  kvjit_transfer_kv_args a = KVJIT_TRANSFER_KV_ARGS_INIT;
  const int tables = b->opt.layers > 1;
  a.src_k = vp(tables ? c->src->table_k : c->src->k[0]);
  a.src_v = vp(tables ? c->src->table_v : c->src->v[0]);
  a.dst_k = vp(tables ? c->dst->table_k : c->dst->k[0]);
  a.dst_v = vp(tables ? c->dst->table_v : c->dst->v[0]);
  const size_t off = (size_t)set * (size_t)c->batch * 8;
  a.src_indices = vp((consecutive ? b->idx_seq : b->idx_src) + off);
  a.dst_indices = vp((consecutive ? b->idx_seq : b->idx_dst) + off);
  a.index_type = KVJIT_INDEX_INT64;
  a.batch = c->batch;
  a.k_row_bytes = a.v_row_bytes = c->row;
  a.src_num_slots = a.dst_num_slots = b->slots;
  a.num_layers = tables ? b->opt.layers : 0;
  a.src = dir_src[c->dir];
  a.dst = dir_dst[c->dir];
  a.stream = (struct CUstream_st *)b->stream;
  return a;
}

/* The reference's program for one row size: both index kernels' per-layer and all-layer forms
 * at the two quotas. SGLang's host rule for the unroll; rows must be a multiple of 128 B. */
typedef struct ref_kernels {
  const kvjit_kernel *per_layer[2], *all_layer[2]; /* [quota: 2, full] */
  int threads, quota_full;
} ref_kernels;

static int ref_unroll(int64_t row) { return row <= 512 ? 4 : row <= 1024 ? 2 : 1; }

static int ref_load(bench *b, int64_t row, ref_kernels *out) {
  if (row % 128 != 0) return 0;
  char names[4][160];
  const char *list[4];
  out->threads = 1024;
  out->quota_full = b->sms * 2; /* two 1024-thread blocks fill an SM of 2048 threads */
  const int quotas[2] = {2, out->quota_full};
  for (int q = 0; q < 2; q++) {
    snprintf(names[q], sizeof names[q], "ref_transfer_per_layer<long long, %lld, %d, %d, 1024>", (long long)row,
             ref_unroll(row), quotas[q]);
    snprintf(names[2 + q], sizeof names[2 + q], "ref_transfer_all_layer<long long, %lld, %d, %d, 1024>",
             (long long)row, ref_unroll(row), quotas[q]);
  }
  for (int i = 0; i < 4; i++) list[i] = names[i];
  static const char *const ref_options[] = {"-std=c++17"};
  kvjit_program_desc d = KVJIT_PROGRAM_DESC_INIT;
  d.name = "bench_ref_transfer_kv.cu";
  d.source = bench_src_ref_transfer_kv;
  d.options = ref_options;
  d.num_options = 1;
  d.kernels = list;
  d.num_kernels = 4;
  kvjit_program *prog;
  kvjit_status st = kvjit_program_get(b->ctx, &prog, NULL, &d);
  if (st != KVJIT_OK) {
    fprintf(stderr, "bench_transfer: reference for %lld B rows: %s\n%s\n", (long long)row, kvjit_last_error(),
            kvjit_program_log(prog));
    return 0;
  }
  for (int i = 0; i < 4; i++) {
    kvjit_kernel *k;
    if ((st = kvjit_program_kernel(prog, &k, names[i], 0)) != KVJIT_OK) die_kvjit(st, "kvjit_program_kernel (ref)");
    if (i < 2) out->per_layer[i] = k;
    else out->all_layer[i - 2] = k;
  }
  return 1;
}

typedef struct ref_params {
  void *k_dst, *v_dst;
  const void *i_dst, *k_src, *v_src, *i_src;
  uint64_t length, src_stride, dst_stride, num_layers;
} ref_params;

static kvjit_status launch_ref(const bench *b, const cell *c, const ref_kernels *r, int full, int set) {
  const int tables = b->opt.layers > 1;
  const size_t off = (size_t)set * (size_t)c->batch * 8;
  ref_params p = {vp(tables ? c->dst->table_k : c->dst->k[0]), vp(tables ? c->dst->table_v : c->dst->v[0]),
                  vp(b->idx_dst + off),
                  vp(tables ? c->src->table_k : c->src->k[0]), vp(tables ? c->src->table_v : c->src->v[0]),
                  vp(b->idx_src + off), (uint64_t)c->batch, (uint64_t)c->row, (uint64_t)c->row,
                  (uint64_t)b->opt.layers};
  const int workers_per_block = r->threads / (32 / ref_unroll(c->row));
  int64_t blocks = (c->batch + workers_per_block - 1) / workers_per_block;
  const int quota = full ? r->quota_full : 2;
  if (blocks > quota) blocks = quota;
  kvjit_launch_config cfg = KVJIT_LAUNCH_CONFIG_INIT;
  cfg.grid[0] = (unsigned)blocks;
  cfg.block[0] = (unsigned)r->threads;
  cfg.stream = (struct CUstream_st *)b->stream;
  void *args[] = {&p};
  return kvjit_launch(tables ? r->all_layer[full] : r->per_layer[full], &cfg, args);
}

/* Per-row copies: what a backend without a kernel does (the ids known on the host). */
typedef struct memcpy_plan {
  int64_t *src, *dst; /* host copies of one index set */
} memcpy_plan;

static kvjit_status launch_memcpy(const bench *b, const cell *c, const memcpy_plan *m) {
  for (int l = 0; l < b->opt.layers; l++)
    for (int64_t i = 0; i < c->batch; i++) {
      const size_t so = (size_t)m->src[i] * (size_t)c->row, dof = (size_t)m->dst[i] * (size_t)c->row;
      CU(drv->cuMemcpyAsync(c->dst->k[l] + dof, c->src->k[l] + so, (size_t)c->row, b->stream));
      CU(drv->cuMemcpyAsync(c->dst->v[l] + dof, c->src->v[l] + so, (size_t)c->row, b->stream));
    }
  return KVJIT_OK;
}

static kvjit_status launch_impl(const bench *b, const cell *c, impl_kind kind, const ref_kernels *r,
                                const memcpy_plan *m, int j) {
  const int set = j % c->sets;
  switch (kind) {
  case IMPL_KVJIT:
  case IMPL_KVJIT_ALL_SMS:
  case IMPL_KVJIT_CONSECUTIVE: {
    kvjit_transfer_kv_args a = kvjit_args(b, c, set, kind == IMPL_KVJIT_CONSECUTIVE);
    if (kind == IMPL_KVJIT_ALL_SMS) a.max_ctas = KVJIT_TRANSFER_KV_ALL_CTAS;
    return kvjit_transfer_kv(b->ctx, &a);
  }
  case IMPL_REF_Q2: return launch_ref(b, c, r, 0, set);
  case IMPL_REF_FULL: return launch_ref(b, c, r, 1, set);
  default: return launch_memcpy(b, c, m);
  }
}

/* Per-launch microseconds: one timed launch sizes the rounds, then `reps` rounds of back-to-back
 * launches between events (median). */
static bench_stats time_impl(bench *b, const cell *c, impl_kind kind, const ref_kernels *r, const memcpy_plan *m) {
  bench_stats none = {0, 0, 0, 0};
  if (launch_impl(b, c, kind, r, m, 0) != KVJIT_OK) {
    fprintf(stderr, "bench_transfer: %s %s row %lld batch %lld: %s\n", impl_names[kind], dir_names[c->dir],
            (long long)c->row, (long long)c->batch, kvjit_last_error());
    b->failures++;
    return none;
  }
  CU(drv->cuStreamSynchronize(b->stream));
  CU(drv->cuEventRecord(b->ev[0], b->stream));
  if (launch_impl(b, c, kind, r, m, 1) != KVJIT_OK) die_kvjit(KVJIT_ERR_INTERNAL, impl_names[kind]);
  CU(drv->cuEventRecord(b->ev[1], b->stream));
  CU(drv->cuEventSynchronize(b->ev[1]));
  float ms = 0;
  CU(drv->cuEventElapsedTime(&ms, b->ev[0], b->ev[1]));
  int launches = (int)(TARGET_LOOP_US / ((double)ms * 1000.0 + 1e-3));
  if (kind == IMPL_MEMCPY || launches < 1) launches = 1;
  if (launches > 64) launches = 64;
  const int reps = ms > 100.0f ? 2 : b->opt.reps;
  CU(drv->cuEventRecord(b->ev[0], b->stream));
  for (int rep = 0; rep < reps; rep++) {
    for (int j = 0; j < launches; j++) launch_impl(b, c, kind, r, m, 2 + rep * launches + j);
    CU(drv->cuEventRecord(b->ev[rep + 1], b->stream));
  }
  CU(drv->cuEventSynchronize(b->ev[reps]));
  double us[MAX_REPS];
  for (int rep = 0; rep < reps; rep++) {
    CU(drv->cuEventElapsedTime(&ms, b->ev[rep], b->ev[rep + 1]));
    us[rep] = (double)ms * 1000.0 / launches;
  }
  return bench_summarize(us, (size_t)reps);
}

/* ---- checking -------------------------------------------------------------------------------- */

static void read_row(CUdeviceptr base, void *host_base, size_t off, void *out, size_t bytes) {
  if (host_base) memcpy(out, (const char *)host_base + off, bytes);
  else CU(drv->cuMemcpyDtoH(out, base + off, bytes));
}

static void write_row(CUdeviceptr base, void *host_base, size_t off, const void *in, size_t bytes) {
  if (host_base) memcpy((char *)host_base + off, in, bytes);
  else CU(drv->cuMemcpyHtoD(base + off, in, bytes));
}

/* Poison ROW_CHECKS destination rows of index set 0, run kvjit once, compare them with their
 * sources (the GPU tests compare every byte; this guards the numbers). */
static int check_kvjit(bench *b, const cell *c, const memcpy_plan *m) {
  unsigned char *want = malloc((size_t)c->row), *got = malloc((size_t)c->row), *poison = malloc((size_t)c->row);
  if (!want || !got || !poison) exit(2);
  memset(poison, 0xA5, (size_t)c->row);
  const int64_t step = c->batch > ROW_CHECKS ? c->batch / ROW_CHECKS : 1;
  for (int64_t i = 0; i < c->batch; i += step)
    for (int l = 0; l < b->opt.layers; l++) {
      write_row(c->dst->k[l], c->dst->host_k[l], (size_t)m->dst[i] * (size_t)c->row, poison, (size_t)c->row);
      write_row(c->dst->v[l], c->dst->host_v[l], (size_t)m->dst[i] * (size_t)c->row, poison, (size_t)c->row);
    }
  kvjit_transfer_kv_args a = kvjit_args(b, c, 0, 0);
  if (kvjit_transfer_kv(b->ctx, &a) != KVJIT_OK) die_kvjit(KVJIT_ERR_INTERNAL, "check launch");
  CU(drv->cuStreamSynchronize(b->stream));
  int ok = 1;
  for (int64_t i = 0; i < c->batch && ok; i += step)
    for (int l = 0; l < b->opt.layers && ok; l++) {
      const size_t so = (size_t)m->src[i] * (size_t)c->row, dof = (size_t)m->dst[i] * (size_t)c->row;
      read_row(c->src->k[l], c->src->host_k[l], so, want, (size_t)c->row);
      read_row(c->dst->k[l], c->dst->host_k[l], dof, got, (size_t)c->row);
      ok = memcmp(want, got, (size_t)c->row) == 0;
      read_row(c->src->v[l], c->src->host_v[l], so, want, (size_t)c->row);
      read_row(c->dst->v[l], c->dst->host_v[l], dof, got, (size_t)c->row);
      ok = ok && memcmp(want, got, (size_t)c->row) == 0;
    }
  free(want);
  free(got);
  free(poison);
  if (!ok) {
    fprintf(stderr, "bench_transfer: CHECK FAILED %s row %lld batch %lld\n", dir_names[c->dir], (long long)c->row,
            (long long)c->batch);
    b->failures++;
  }
  return ok;
}

/* ---- output ----------------------------------------------------------------------------------- */

static double gbps(int64_t bytes, double us) { return us > 0 ? (double)bytes / us * 1e-3 : 0; }

static void csv_row(const bench *b, const char *section, const char *impl, const char *dir, int64_t row, int64_t batch,
                    const bench_stats *s, int64_t bytes, const char *check) {
  if (!b->csv) return;
  fprintf(b->csv, "%s,%s,%s,%lld,%lld,%d,%.4f,%.4f,%.4f,%.2f,%s\n", section, impl, dir, (long long)row,
          (long long)batch, b->opt.layers, s->median, s->min, s->max, gbps(bytes, s->median), check);
}

static bench_stats time_copy(bench *b, CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  CU(drv->cuMemcpyAsync(dst, src, bytes, b->stream));
  CU(drv->cuStreamSynchronize(b->stream));
  double us[MAX_REPS];
  const int reps = b->opt.reps;
  for (int r = 0; r < reps; r++) {
    CU(drv->cuEventRecord(b->ev[0], b->stream));
    CU(drv->cuMemcpyAsync(dst, src, bytes, b->stream));
    CU(drv->cuEventRecord(b->ev[1], b->stream));
    CU(drv->cuEventSynchronize(b->ev[1]));
    float ms;
    CU(drv->cuEventElapsedTime(&ms, b->ev[0], b->ev[1]));
    us[r] = (double)ms * 1000.0;
  }
  return bench_summarize(us, (size_t)reps);
}

/* One large copy each way over the host link and within the device: the bounds of this run. */
static void measure_bounds(bench *b) {
  const size_t bytes = 512 * MIB;
  CUdeviceptr d1, d2;
  void *h;
  CU(drv->cuMemAlloc(&d1, bytes));
  CU(drv->cuMemAlloc(&d2, bytes));
  CU(drv->cuMemHostAlloc(&h, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  memset(h, 1, bytes);
  const CUdeviceptr hp = (CUdeviceptr)(uintptr_t)h;
  bench_stats s = time_copy(b, d1, hp, bytes);
  b->htod_gbps = gbps((int64_t)bytes, s.median);
  csv_row(b, "bound", "memcpy_htod_pinned", "h2d", (int64_t)bytes, 1, &s, (int64_t)bytes, "-");
  s = time_copy(b, hp, d1, bytes);
  b->dtoh_gbps = gbps((int64_t)bytes, s.median);
  csv_row(b, "bound", "memcpy_dtoh_pinned", "d2h", (int64_t)bytes, 1, &s, (int64_t)bytes, "-");
  s = time_copy(b, d2, d1, bytes);
  /* Read + written bytes, as bench_store counts device bandwidth. */
  b->dtod_gbps = gbps(2 * (int64_t)bytes, s.median);
  csv_row(b, "bound", "memcpy_dtod", "d2d", (int64_t)bytes, 1, &s, 2 * (int64_t)bytes, "-");
  printf("bounds: pinned HtoD %.1f GB/s, DtoH %.1f GB/s, DtoD %.1f GB/s (read + written)\n", b->htod_gbps,
         b->dtoh_gbps, b->dtod_gbps);
  drv->cuMemFreeHost(h);
  drv->cuMemFree(d1);
  drv->cuMemFree(d2);
}

/* The bytes a cell moves over its bottleneck: K and V rows of every item and layer (read +
 * written for device to device, to compare with the DtoD bound). */
static int64_t cell_bytes(const bench *b, const cell *c) {
  int64_t moved = 2 * c->batch * c->row * b->opt.layers;
  return c->dir == D2D ? 2 * moved : moved;
}

static double bound_gbps(const bench *b, int dir) {
  return dir == D2H ? b->dtoh_gbps : dir == H2D ? b->htod_gbps : dir == D2D ? b->dtod_gbps : 0;
}

static void write_markdown(const bench *b) {
  FILE *f = b->opt.md_path ? fopen(b->opt.md_path, "w") : NULL;
  if (f == NULL) return;
  fprintf(f, "# bench_transfer: kvjit_transfer_kv on %s (sm_%d, %d SMs), kvjit %s\n\n", b->gpu, b->sm, b->sms,
          kvjit_version_string());
  fprintf(f, "Rows of K and V, int64 slot ids (random distinct slots on both sides), %s.\n\n",
          b->opt.layers > 1 ? "all layers in one launch through pointer tables" : "one layer per launch");
  fprintf(f, "## Bounds (this run)\n\n| copy | GB/s |\n| --- | ---: |\n| pinned HtoD, one 512 MiB cuMemcpy | %.1f |\n"
             "| pinned DtoH, one 512 MiB cuMemcpy | %.1f |\n| DtoD, one 512 MiB cuMemcpy (read + written) | %.1f |\n\n",
          b->htod_gbps, b->dtoh_gbps, b->dtod_gbps);
  for (int d = 0; d < NUM_DIRS; d++) {
    if (!b->opt.dirs[d]) continue;
    fprintf(f, "## %s\n\n| row B | batch | kvjit µs | kvjit GB/s | %% of bound | all-SM µs | kvjit / all-SM GB/s | "
               "consecutive µs | kvjit / consecutive | vs ref q2 | vs ref full | vs per-row memcpy | check |\n"
               "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n",
            dir_names[d]);
    for (size_t i = 0; i < b->nresults; i++) {
      const result *r = &b->results[i];
      if (r->dir != d) continue;
      cell c = {d, r->row, r->batch, NULL, NULL, 1};
      const int64_t bytes = cell_bytes(b, &c);
      const double k = r->us[IMPL_KVJIT], bound = bound_gbps(b, d);
      char q2[32] = "-", full[32] = "-", mc[32] = "-", seq[32] = "-";
      if (r->us[IMPL_REF_Q2] > 0) snprintf(q2, sizeof q2, "%.2fx", r->us[IMPL_REF_Q2] / k);
      if (r->us[IMPL_REF_FULL] > 0) snprintf(full, sizeof full, "%.2fx", r->us[IMPL_REF_FULL] / k);
      if (r->us[IMPL_MEMCPY] > 0) snprintf(mc, sizeof mc, "%.2fx", r->us[IMPL_MEMCPY] / k);
      if (r->us[IMPL_KVJIT_CONSECUTIVE] > 0) snprintf(seq, sizeof seq, "%.3f", r->us[IMPL_KVJIT_CONSECUTIVE] / k);
      const double all = r->us[IMPL_KVJIT_ALL_SMS];
      fprintf(f, "| %lld | %lld | %.2f | %.1f | %.1f | %.2f | %.3f | %.2f | %s | %s | %s | %s | %s |\n",
              (long long)r->row, (long long)r->batch, k, gbps(bytes, k), bound > 0 ? 100.0 * gbps(bytes, k) / bound : 0,
              all, all > 0 ? all / k : 0, r->us[IMPL_KVJIT_CONSECUTIVE], seq, q2, full, mc, r->ok ? "ok" : "FAIL");
    }
    fputc('\n', f);
  }
  /* The targets of issue 17. */
  fprintf(f, "## Targets\n\n");
  for (int d = D2H; d <= H2D; d++) {
    if (!b->opt.dirs[d]) continue;
    double worst = 1e9;
    for (size_t i = 0; i < b->nresults; i++) {
      const result *r = &b->results[i];
      if (r->dir != d || r->row < 4096 || r->batch < 4096 || r->us[IMPL_KVJIT] <= 0) continue;
      cell c = {d, r->row, r->batch, NULL, NULL, 1};
      double pct = 100.0 * gbps(cell_bytes(b, &c), r->us[IMPL_KVJIT]) / bound_gbps(b, d);
      if (pct < worst) worst = pct;
    }
    if (worst < 1e9)
      fprintf(f, "- %s, rows >= 4 KiB, batches >= 4096: worst cell %.1f %% of the measured link (target >= 90 %%): %s\n",
              dir_names[d], worst, worst >= 90.0 ? "met" : "NOT met");
  }
  if (b->opt.dirs[D2D]) {
    for (size_t i = 0; i < b->nresults; i++) {
      const result *r = &b->results[i];
      if (r->dir != D2D || r->batch != 65536 || r->us[IMPL_KVJIT_CONSECUTIVE] <= 0) continue;
      double pct = 100.0 * r->us[IMPL_KVJIT_CONSECUTIVE] / r->us[IMPL_KVJIT];
      fprintf(f, "- d2d, %lld B rows at batch 65536: %.1f %% of the consecutive-slot copy (target >= 95 %%): %s\n",
              (long long)r->row, pct, pct >= 95.0 ? "met" : "NOT met");
    }
  }
  /* Issue 29: the default plan on few CTAs keeps >= 97 % of the all-SM plan's bandwidth. */
  for (int d = D2H; d <= H2D; d++) {
    if (!b->opt.dirs[d]) continue;
    double worst = 1e9;
    for (size_t i = 0; i < b->nresults; i++) {
      const result *r = &b->results[i];
      if (r->dir != d || r->batch < 1024 || r->us[IMPL_KVJIT] <= 0 || r->us[IMPL_KVJIT_ALL_SMS] <= 0) continue;
      const double pct = 100.0 * r->us[IMPL_KVJIT_ALL_SMS] / r->us[IMPL_KVJIT];
      if (pct < worst) worst = pct;
    }
    if (worst < 1e9)
      fprintf(f, "- %s, batches >= 1024: worst cell of the default plan (<= %d CTAs) at %.1f %% of the all-SM "
                 "plan's bandwidth (target >= 97 %%): %s\n",
              dir_names[d], KVJIT_TRANSFER_KV_HOST_CTAS, worst, worst >= 97.0 ? "met" : "NOT met");
  }
  size_t slower = 0, compared = 0;
  for (size_t i = 0; i < b->nresults; i++)
    for (int q = IMPL_REF_Q2; q <= IMPL_REF_FULL; q++)
      if (b->results[i].us[q] > 0 && b->results[i].us[IMPL_KVJIT] > 0) {
        compared++;
        slower += b->results[i].us[IMPL_KVJIT] > b->results[i].us[q];
      }
  fprintf(f, "- cells where kvjit is slower than the reference (either quota): %zu of %zu (target 0)\n", slower,
          compared);
  fprintf(f, "- cells skipped for the deadline: %zu; failures (launches, checks): %zu\n", b->skipped, b->failures);
  fclose(f);
}

/* ---- the grid --------------------------------------------------------------------------------- */

static void run_row(bench *b, int64_t row) {
  side_caches dev_a, dev_b, host_a, host_b;
  const int need_dev_b = b->opt.dirs[D2D], need_host_a = b->opt.dirs[H2D] || b->opt.dirs[H2H],
            need_host_b = b->opt.dirs[D2H] || b->opt.dirs[H2H];
  caches_alloc(b, &dev_a, KVJIT_LOCATION_DEVICE, row);
  if (need_dev_b) caches_alloc(b, &dev_b, KVJIT_LOCATION_DEVICE, row);
  if (need_host_a) caches_alloc(b, &host_a, KVJIT_LOCATION_HOST, row);
  if (need_host_b) caches_alloc(b, &host_b, KVJIT_LOCATION_HOST, row);
  ref_kernels ref;
  const int have_ref = ref_load(b, row, &ref);
  side_caches *srcs[NUM_DIRS] = {&dev_a, &dev_a, &host_a, &host_a}, *dsts[NUM_DIRS] = {&dev_b, &host_b, &dev_a, &host_b};
  for (int d = 0; d < NUM_DIRS; d++) {
    if (!b->opt.dirs[d]) continue;
    for (size_t bi = 0; bi < b->opt.nbatches; bi++) {
      cell c = {d, row, b->opt.batches[bi], srcs[d], dsts[d], 1};
      if (c.batch > b->slots) continue;
      if (over_deadline(b)) {
        b->skipped++;
        continue;
      }
      c.sets = (int)(b->slots / c.batch);
      if (c.sets > 16) c.sets = 16;
      memcpy_plan m;
      m.src = malloc((size_t)c.batch * 8);
      m.dst = malloc((size_t)c.batch * 8);
      if (!m.src || !m.dst) exit(2);
      CU(drv->cuMemcpyDtoH(m.src, b->idx_src, (size_t)c.batch * 8));
      CU(drv->cuMemcpyDtoH(m.dst, b->idx_dst, (size_t)c.batch * 8));
      result r;
      memset(&r, 0, sizeof r);
      r.dir = d;
      r.row = row;
      r.batch = c.batch;
      kvjit_transfer_kv_args a = kvjit_args(b, &c, 0, 0);
      kvjit_status st = kvjit_transfer_kv_prepare(b->ctx, &a);
      if (st != KVJIT_OK) die_kvjit(st, "kvjit_transfer_kv_prepare");
      r.ok = check_kvjit(b, &c, &m);
      const int64_t bytes = cell_bytes(b, &c);
      for (int k = 0; k < NUM_IMPLS; k++) {
        if ((k == IMPL_REF_Q2 || k == IMPL_REF_FULL) && !have_ref) continue;
        if (k == IMPL_KVJIT_ALL_SMS && d == D2D) continue; /* on the device the default is every SM */
        /* Per-row copies are host-bound: two calls per item; past 16384 items they only repeat. */
        if (k == IMPL_MEMCPY && c.batch * b->opt.layers > 16384) continue;
        const memcpy_plan one_set = m; /* per-row copies always use index set 0 */
        bench_stats s = time_impl(b, &c, (impl_kind)k, &ref, &one_set);
        r.us[k] = s.median;
        if (s.count) csv_row(b, "transfer", impl_names[k], dir_names[d], row, c.batch, &s, bytes,
                             k == IMPL_KVJIT ? (r.ok ? "ok" : "FAIL") : "-");
      }
      free(m.src);
      free(m.dst);
      printf("%s row %6lld batch %6lld: kvjit %9.2f us %7.1f GB/s | all SMs %9.2f | consecutive %9.2f | ref q2 "
             "%9.2f | ref full %9.2f | memcpy/row %10.2f %s\n",
             dir_names[d], (long long)row, (long long)c.batch, r.us[IMPL_KVJIT], gbps(bytes, r.us[IMPL_KVJIT]),
             r.us[IMPL_KVJIT_ALL_SMS], r.us[IMPL_KVJIT_CONSECUTIVE], r.us[IMPL_REF_Q2], r.us[IMPL_REF_FULL],
             r.us[IMPL_MEMCPY], r.ok ? "" : "CHECK FAILED");
      if (b->nresults == b->cap_results) {
        b->cap_results = b->cap_results ? 2 * b->cap_results : 64;
        b->results = realloc(b->results, b->cap_results * sizeof *b->results);
        if (b->results == NULL) exit(2);
      }
      b->results[b->nresults++] = r;
    }
  }
  caches_free(b, &dev_a);
  if (need_dev_b) caches_free(b, &dev_b);
  if (need_host_a) caches_free(b, &host_a);
  if (need_host_b) caches_free(b, &host_b);
}

static void usage(void) {
  fprintf(stderr, "usage: bench_transfer [--rows LIST] [--batches LIST] [--dirs d2d,d2h,h2d,h2h] [--layers N] "
                  "[--reps N] [--csv FILE] [--md FILE] [--deadline S]\n");
  exit(2);
}

static void parse_dirs(const char *text, int *dirs) {
  memset(dirs, 0, NUM_DIRS * sizeof *dirs);
  char buf[64];
  snprintf(buf, sizeof buf, "%s", text);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int found = 0;
    for (int d = 0; d < NUM_DIRS; d++)
      if (strcmp(t, dir_names[d]) == 0) dirs[d] = found = 1;
    if (!found) usage();
  }
}

int main(int argc, char **argv) {
  bench b;
  memset(&b, 0, sizeof b);
  static const int64_t default_rows[] = {512, 2048, 4096, 16384};
  static const int64_t default_batches[] = {64, 1024, 4096, 16384, 65536};
  memcpy(b.opt.rows, default_rows, sizeof default_rows);
  b.opt.nrows = sizeof default_rows / sizeof default_rows[0];
  memcpy(b.opt.batches, default_batches, sizeof default_batches);
  b.opt.nbatches = sizeof default_batches / sizeof default_batches[0];
  b.opt.dirs[D2D] = b.opt.dirs[D2H] = b.opt.dirs[H2D] = 1;
  b.opt.layers = 1;
  b.opt.reps = 7;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v == NULL) usage();
    i++;
    if (strcmp(a, "--rows") == 0) {
      if ((b.opt.nrows = bench_parse_list(v, b.opt.rows, MAX_LIST)) == 0) usage();
    } else if (strcmp(a, "--batches") == 0) {
      if ((b.opt.nbatches = bench_parse_list(v, b.opt.batches, MAX_LIST)) == 0) usage();
    } else if (strcmp(a, "--dirs") == 0) {
      parse_dirs(v, b.opt.dirs);
    } else if (strcmp(a, "--layers") == 0) {
      b.opt.layers = atoi(v);
      if (b.opt.layers < 1 || b.opt.layers > MAX_LAYERS) usage();
    } else if (strcmp(a, "--reps") == 0) {
      b.opt.reps = atoi(v);
      if (b.opt.reps < 2 || b.opt.reps > MAX_REPS) usage();
    } else if (strcmp(a, "--csv") == 0) {
      b.opt.csv_path = v;
    } else if (strcmp(a, "--md") == 0) {
      b.opt.md_path = v;
    } else if (strcmp(a, "--deadline") == 0) {
      b.opt.deadline_s = atof(v);
    } else {
      usage();
    }
  }
  b.t_start = bench_now_ns();
  kvjit_status st = gpu_driver_get(&drv);
  if (st != KVJIT_OK) {
    printf("bench_transfer: no GPU: %s\n", kvjit_last_error());
    return 77;
  }
  CUdevice dev;
  CU(drv->cuDeviceGet(&dev, 0));
  CU(drv->cuDevicePrimaryCtxRetain(&b.cuctx, dev));
  CU(drv->cuCtxSetCurrent(b.cuctx));
  CU(drv->cuDeviceGetName(b.gpu, sizeof b.gpu, dev));
  CU(drv->cuDeviceGetAttribute(&b.sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  if ((st = kvjit_current_sm(&b.sm)) != KVJIT_OK) die_kvjit(st, "kvjit_current_sm");
  if ((st = kvjit_context_create(&b.ctx, NULL)) != KVJIT_OK) die_kvjit(st, "kvjit_context_create");
  CU(drv->cuStreamCreate(&b.stream, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i <= MAX_REPS; i++) CU(drv->cuEventCreate(&b.ev[i], CU_EVENT_DEFAULT));
  if (b.opt.csv_path) {
    b.csv = fopen(b.opt.csv_path, "w");
    if (b.csv) fprintf(b.csv, "section,impl,direction,row_bytes,batch,layers,us_median,us_min,us_max,gbps,check\n");
  }
  int64_t max_batch = 0;
  for (size_t i = 0; i < b.opt.nbatches; i++)
    if (b.opt.batches[i] > max_batch) max_batch = b.opt.batches[i];
  b.slots = 2 * max_batch; /* slot ids: permutations of twice the largest batch */
  printf("bench_transfer: %s, sm_%d, %d SMs, %lld slots per cache, %d layer(s)\n", b.gpu, b.sm, b.sms,
         (long long)b.slots, b.opt.layers);
  make_indices(&b);
  measure_bounds(&b);
  for (size_t r = 0; r < b.opt.nrows; r++) run_row(&b, b.opt.rows[r]);
  write_markdown(&b);
  if (b.csv) fclose(b.csv);
  printf("bench_transfer: %zu cells, %zu skipped for the deadline, %zu failures, %.1f s\n", b.nresults, b.skipped,
         b.failures, elapsed_s(&b));
  uint64_t oob = 0;
  if (kvjit_op_oob_count(b.ctx, "transfer_kv", &oob, 0) == KVJIT_OK && oob != 0) {
    printf("bench_transfer: %llu out-of-range slots counted (expected 0)\n", (unsigned long long)oob);
    b.failures++;
  }
  kvjit_context_destroy(b.ctx);
  return b.failures ? 1 : 0;
}
