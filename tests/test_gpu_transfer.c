/*
 * transfer_kv on a real GPU (gpu suite; exits 77 without a driver or device).
 *
 * Every case: random source rows, destinations poisoned with random bytes, random source slots
 * (repeats allowed) and duplicate-free destination slots; afterwards every byte of every
 * destination cache (target rows, untouched rows, stride gaps, every layer) is compared with a
 * host model, and the sources must be unchanged. The matrix: the four directions (device <->
 * pinned host) x one layer and per-layer tables x rows 128..8192 B (tails, asymmetric K/V, K only)
 * x batches of every class x int32/int64 x strides; then bad slots (padding, past either cache)
 * and bad table entries with the counter, batch 0, explicit splits and PDL, and CUDA graph
 * capture with replay in every direction. KVJIT_TEST_QUICK=1 runs a reduced matrix.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "gpu_util.h"
#include "kvjit.h"

static gpu_env env;
static kvjit_context *ctx;
static char cache_dir[64];
static int quick;
static uint64_t rng = 0x7a11fe57c0ffee11ull;

static struct {
  uint64_t cases, launches, rows, bytes, failures;
} totals;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (p == NULL) abort();
  return p;
}

/* ---- buffers on either side of the link ------------------------------------------------------- */

/* Device memory, or pinned host memory the device reaches through UVA (the same address). */
typedef struct buffer {
  CUdeviceptr ptr;
  unsigned char *pinned; /* host-side view when pinned, else NULL */
  size_t bytes;
} buffer;

static buffer buf_alloc(kvjit_location where, size_t bytes) {
  buffer b = {0, NULL, bytes ? bytes : 1};
  if (where == KVJIT_LOCATION_HOST) {
    void *p = NULL;
    GPU_CU(env.drv->cuMemHostAlloc(&p, b.bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
    b.pinned = p;
    b.ptr = (CUdeviceptr)(uintptr_t)p; /* unified addressing: the host pointer is the device pointer */
  } else {
    b.ptr = gpu_alloc(b.bytes);
  }
  return b;
}

static void buf_free(buffer *b) {
  if (b->pinned) env.drv->cuMemFreeHost(b->pinned);
  else gpu_free(b->ptr);
  memset(b, 0, sizeof *b);
}

static void buf_put(const buffer *b, const void *src) {
  if (b->pinned) memcpy(b->pinned, src, b->bytes);
  else gpu_upload(b->ptr, src, b->bytes);
}

static void buf_get(const buffer *b, void *dst) {
  if (b->pinned) memcpy(dst, b->pinned, b->bytes);
  else gpu_download(dst, b->ptr, b->bytes);
}

/* ---- one case ------------------------------------------------------------------------------------ */

typedef struct transfer_case {
  int64_t batch;
  int64_t k_row, v_row;             /* v_row 0: K only */
  int64_t src_pad, dst_pad;         /* slot stride = row + pad, both tensors */
  int64_t src_slots, dst_slots;     /* 0: batch + batch / 3 + 5 */
  int64_t src_index_stride, dst_index_stride;
  int layers;                       /* 0: one layer; N: tables of N */
  kvjit_location src, dst;
  kvjit_index_type index_type;
  int split;
  kvjit_pdl_mode pdl;
  int bad;                          /* mix padding and out-of-range ids in */
  int bad_layer;                    /* tables: layer index whose dst_k entry is NULL (or -1) */
} transfer_case;

static transfer_case base_case(int64_t batch, int64_t row, kvjit_location src, kvjit_location dst) {
  transfer_case c;
  memset(&c, 0, sizeof c);
  c.batch = batch;
  c.k_row = c.v_row = row;
  c.src_index_stride = c.dst_index_stride = 1;
  c.src = src;
  c.dst = dst;
  c.index_type = KVJIT_INDEX_INT64;
  c.pdl = KVJIT_PDL_AUTO;
  c.bad_layer = -1;
  return c;
}

static const char *where(kvjit_location l) { return l == KVJIT_LOCATION_HOST ? "host" : "device"; }

__attribute__((format(printf, 2, 3))) static int fail_case(const transfer_case *c, const char *fmt, ...);
static int fail_case(const transfer_case *c, const char *fmt, ...) {
  fprintf(stderr,
          "FAIL [%s->%s batch=%lld k=%lld v=%lld pads=%lld/%lld slots=%lld/%lld istride=%lld/%lld layers=%d %s "
          "split=%d pdl=%d bad=%d bad_layer=%d]: ",
          where(c->src), where(c->dst), (long long)c->batch, (long long)c->k_row, (long long)c->v_row,
          (long long)c->src_pad, (long long)c->dst_pad, (long long)c->src_slots, (long long)c->dst_slots,
          (long long)c->src_index_stride, (long long)c->dst_index_stride, c->layers,
          c->index_type == KVJIT_INDEX_INT32 ? "int32" : "int64", c->split, (int)c->pdl, c->bad, c->bad_layer);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  totals.failures++;
  return 1;
}

/* Everything a case allocates: per layer and tensor (K, V) a source and a destination cache. */
typedef struct world {
  int layers; /* caches per tensor: max(1, c->layers) */
  int tensors;
  buffer src[64][2], dst[64][2];
  unsigned char *src_host[64][2], *want[64][2];
  buffer tables[4]; /* src_k, src_v, dst_k, dst_v tables */
  buffer sidx, didx;
  int64_t *s_slots, *d_slots;
  uint64_t expected_oob;
} world;

static int64_t stride_of(int64_t row, int64_t pad) { return row + pad; }

static size_t cache_bytes(int64_t slots, int64_t row, int64_t pad) {
  return (size_t)((slots - 1) * stride_of(row, pad) + row);
}

/* Slot ids: duplicate-free destinations (a permutation prefix), any sources; with c->bad a
 * sprinkle of padding and past-the-end ids on either side. */
static void choose_slots(const transfer_case *c, world *w) {
  int64_t *perm = xmalloc((size_t)c->dst_slots * sizeof *perm);
  for (int64_t i = 0; i < c->dst_slots; i++) perm[i] = i;
  for (int64_t i = c->dst_slots - 1; i > 0; i--) {
    int64_t j = (int64_t)(gpu_rand(&rng) % (uint64_t)(i + 1));
    int64_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  w->expected_oob = 0;
  for (int64_t i = 0; i < c->batch; i++) {
    w->d_slots[i] = perm[i];
    w->s_slots[i] = (int64_t)(gpu_rand(&rng) % (uint64_t)c->src_slots);
    if (c->bad && gpu_rand(&rng) % 5 == 0) {
      switch (gpu_rand(&rng) % 4) {
      case 0: w->s_slots[i] = -1 - (int64_t)(gpu_rand(&rng) % 3); break;
      case 1: w->d_slots[i] = -1; break;
      case 2: w->s_slots[i] = c->src_slots + (int64_t)(gpu_rand(&rng) % 7); break;
      default: w->d_slots[i] = c->dst_slots + (int64_t)(gpu_rand(&rng) % 7); break;
      }
    }
  }
  free(perm);
}

static int slot_ok(const transfer_case *c, int64_t s, int64_t d) {
  return s >= 0 && d >= 0 && s < c->src_slots && d < c->dst_slots;
}

static void upload_indices(const transfer_case *c, world *w) {
  const size_t isize = c->index_type == KVJIT_INDEX_INT64 ? 8 : 4;
  const struct {
    const int64_t *slots;
    int64_t stride;
    buffer *b;
  } arrays[] = {{w->s_slots, c->src_index_stride, &w->sidx}, {w->d_slots, c->dst_index_stride, &w->didx}};
  for (int a = 0; a < 2; a++) {
    size_t bytes = (size_t)(c->batch > 0 ? (c->batch - 1) * arrays[a].stride + 1 : 1) * isize;
    unsigned char *h = xmalloc(bytes);
    gpu_fill_random(h, bytes, &rng); /* the gaps between strided ids hold garbage */
    for (int64_t i = 0; i < c->batch; i++) {
      int64_t s = arrays[a].slots[i];
      if (isize == 8) memcpy(h + (size_t)(i * arrays[a].stride) * 8, &s, 8);
      else {
        int32_t s32 = (int32_t)s;
        memcpy(h + (size_t)(i * arrays[a].stride) * 4, &s32, 4);
      }
    }
    if (arrays[a].b->ptr == 0) *arrays[a].b = buf_alloc(KVJIT_LOCATION_DEVICE, bytes);
    buf_put(arrays[a].b, h);
    free(h);
  }
}

static void world_make(const transfer_case *c, world *w) {
  memset(w, 0, sizeof *w);
  w->layers = c->layers > 0 ? c->layers : 1;
  w->tensors = c->v_row > 0 ? 2 : 1;
  const int64_t rows[2] = {c->k_row, c->v_row};
  for (int l = 0; l < w->layers; l++)
    for (int t = 0; t < w->tensors; t++) {
      size_t sb = cache_bytes(c->src_slots, rows[t], c->src_pad), db = cache_bytes(c->dst_slots, rows[t], c->dst_pad);
      w->src[l][t] = buf_alloc(c->src, sb);
      w->dst[l][t] = buf_alloc(c->dst, db);
      w->src_host[l][t] = xmalloc(sb);
      w->want[l][t] = xmalloc(db);
    }
  if (c->layers > 0) {
    for (int i = 0; i < 4; i++) w->tables[i] = buf_alloc(KVJIT_LOCATION_DEVICE, (size_t)c->layers * 8);
  }
  w->s_slots = xmalloc((size_t)(c->batch > 0 ? c->batch : 1) * sizeof *w->s_slots);
  w->d_slots = xmalloc((size_t)(c->batch > 0 ? c->batch : 1) * sizeof *w->d_slots);
}

static void world_free(world *w) {
  for (int l = 0; l < w->layers; l++)
    for (int t = 0; t < w->tensors; t++) {
      buf_free(&w->src[l][t]);
      buf_free(&w->dst[l][t]);
      free(w->src_host[l][t]);
      free(w->want[l][t]);
    }
  for (int i = 0; i < 4; i++)
    if (w->tables[i].ptr) buf_free(&w->tables[i]);
  if (w->sidx.ptr) buf_free(&w->sidx);
  if (w->didx.ptr) buf_free(&w->didx);
  free(w->s_slots);
  free(w->d_slots);
}

/* Fresh random sources, poisoned destinations, and the model of the result. */
static void world_fill(const transfer_case *c, world *w) {
  const int64_t rows[2] = {c->k_row, c->v_row};
  choose_slots(c, w);
  for (int l = 0; l < w->layers; l++)
    for (int t = 0; t < w->tensors; t++) {
      gpu_fill_random(w->src_host[l][t], w->src[l][t].bytes, &rng);
      buf_put(&w->src[l][t], w->src_host[l][t]);
      gpu_fill_random(w->want[l][t], w->dst[l][t].bytes, &rng);
      buf_put(&w->dst[l][t], w->want[l][t]);
    }
  if (c->layers > 0) {
    for (int i = 0; i < 4; i++) {
      uint64_t *ptrs = xmalloc((size_t)c->layers * 8);
      const int t = i % 2, is_dst = i >= 2;
      for (int l = 0; l < c->layers; l++) {
        ptrs[l] = t < w->tensors ? (uint64_t)(is_dst ? w->dst[l][t].ptr : w->src[l][t].ptr) : 0;
        if (i == 2 && l == c->bad_layer) ptrs[l] = 0; /* a NULL destination K entry */
      }
      buf_put(&w->tables[i], ptrs);
      free(ptrs);
    }
  }
  upload_indices(c, w);
  w->expected_oob = 0;
  for (int64_t i = 0; i < c->batch; i++) {
    const int64_t s = w->s_slots[i], d = w->d_slots[i];
    if (s < 0 || d < 0) continue;
    if (!slot_ok(c, s, d)) {
      w->expected_oob += 1u * (unsigned)w->layers; /* once per item and layer */
      continue;
    }
    for (int l = 0; l < w->layers; l++) {
      if (l == c->bad_layer) {
        w->expected_oob++;
        continue;
      }
      for (int t = 0; t < w->tensors; t++)
        memcpy(w->want[l][t] + d * stride_of(rows[t], c->dst_pad), w->src_host[l][t] + s * stride_of(rows[t], c->src_pad),
               (size_t)rows[t]);
    }
  }
}

static kvjit_transfer_kv_args args_of(const transfer_case *c, const world *w, CUstream stream) {
  kvjit_transfer_kv_args a = KVJIT_TRANSFER_KV_ARGS_INIT;
  if (c->layers > 0) {
    a.src_k = (const void *)(uintptr_t)w->tables[0].ptr;
    a.src_v = w->tensors > 1 ? (const void *)(uintptr_t)w->tables[1].ptr : NULL;
    a.dst_k = (void *)(uintptr_t)w->tables[2].ptr;
    a.dst_v = w->tensors > 1 ? (void *)(uintptr_t)w->tables[3].ptr : NULL;
    a.num_layers = c->layers;
  } else {
    a.src_k = (const void *)(uintptr_t)w->src[0][0].ptr;
    a.src_v = w->tensors > 1 ? (const void *)(uintptr_t)w->src[0][1].ptr : NULL;
    a.dst_k = (void *)(uintptr_t)w->dst[0][0].ptr;
    a.dst_v = w->tensors > 1 ? (void *)(uintptr_t)w->dst[0][1].ptr : NULL;
  }
  a.src_indices = (const void *)(uintptr_t)w->sidx.ptr;
  a.dst_indices = (const void *)(uintptr_t)w->didx.ptr;
  a.index_type = c->index_type;
  a.src_index_stride = c->src_index_stride;
  a.dst_index_stride = c->dst_index_stride;
  a.batch = c->batch;
  a.k_row_bytes = c->k_row;
  a.v_row_bytes = c->v_row;
  a.src_k_stride = stride_of(c->k_row, c->src_pad);
  a.dst_k_stride = stride_of(c->k_row, c->dst_pad);
  a.src_v_stride = stride_of(c->v_row, c->src_pad);
  a.dst_v_stride = stride_of(c->v_row, c->dst_pad);
  a.src_num_slots = c->src_slots;
  a.dst_num_slots = c->dst_slots;
  a.src = c->src;
  a.dst = c->dst;
  a.split = c->split;
  a.pdl = c->pdl;
  a.stream = (struct CUstream_st *)stream;
  return a;
}

/* Every byte of every destination against the model, and the sources untouched. */
static int world_check(const transfer_case *c, const world *w) {
  int bad = 0;
  for (int l = 0; l < w->layers && !bad; l++)
    for (int t = 0; t < w->tensors && !bad; t++) {
      unsigned char *got = xmalloc(w->dst[l][t].bytes);
      buf_get(&w->dst[l][t], got);
      totals.bytes += w->dst[l][t].bytes;
      if (memcmp(got, w->want[l][t], w->dst[l][t].bytes) != 0) {
        size_t at = 0;
        while (got[at] == w->want[l][t][at]) at++;
        const int64_t stride = stride_of(t ? c->v_row : c->k_row, c->dst_pad);
        bad = fail_case(c, "layer %d %s destination differs at byte %zu (slot %lld)", l, t ? "V" : "K", at,
                        (long long)((int64_t)at / stride));
      }
      free(got);
      unsigned char *src = xmalloc(w->src[l][t].bytes);
      buf_get(&w->src[l][t], src);
      if (!bad && memcmp(src, w->src_host[l][t], w->src[l][t].bytes) != 0)
        bad = fail_case(c, "layer %d %s source changed", l, t ? "V" : "K");
      free(src);
    }
  return bad;
}

static int run_case(transfer_case c) {
  if (c.src_slots == 0) c.src_slots = c.batch + c.batch / 3 + 5;
  if (c.dst_slots == 0) c.dst_slots = c.batch + c.batch / 3 + 5;
  world w;
  world_make(&c, &w);
  world_fill(&c, &w);
  uint64_t before = 0;
  if (kvjit_transfer_kv_oob_count(ctx, &before, 1) != KVJIT_OK) return fail_case(&c, "oob_count: %s", kvjit_last_error());
  kvjit_transfer_kv_args a = args_of(&c, &w, NULL);
  kvjit_status st = kvjit_transfer_kv(ctx, &a);
  int bad = 0;
  if (st != KVJIT_OK) {
    bad = fail_case(&c, "kvjit_transfer_kv: %s: %s", kvjit_status_name(st), kvjit_last_error());
  } else {
    gpu_sync();
    totals.launches++;
    totals.rows += (uint64_t)c.batch * (uint64_t)w.layers;
    bad = world_check(&c, &w);
    uint64_t oob = 0;
    if (!bad && kvjit_transfer_kv_oob_count(ctx, &oob, 1) != KVJIT_OK) bad = fail_case(&c, "%s", kvjit_last_error());
    if (!bad && oob != w.expected_oob)
      bad = fail_case(&c, "counted %llu skipped items, expected %llu", (unsigned long long)oob,
                      (unsigned long long)w.expected_oob);
  }
  totals.cases++;
  world_free(&w);
  return bad;
}

/* ---- tests ------------------------------------------------------------------------------------ */

static const kvjit_location sides[4][2] = {{KVJIT_LOCATION_DEVICE, KVJIT_LOCATION_DEVICE},
                                           {KVJIT_LOCATION_DEVICE, KVJIT_LOCATION_HOST},
                                           {KVJIT_LOCATION_HOST, KVJIT_LOCATION_DEVICE},
                                           {KVJIT_LOCATION_HOST, KVJIT_LOCATION_HOST}};

/* Directions x layer mode x rows x batches of every class x index types. */
static void test_matrix(void **state) {
  (void)state;
  static const int64_t rows[][2] = {{128, 128}, {196, 196}, {576, 0}, {1024, 512}, {2048, 2048}, {4096, 4096},
                                    {8192, 8192}};
  static const int64_t batches[] = {1, 7, 64, 65, 1000, 4097, 40000};
  uint64_t before = totals.failures;
  for (int d = 0; d < 4; d++)
    for (int layers = 0; layers <= 3; layers += 3)
      for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
          if (quick && (r + b) % 3 != 0) continue;
          /* Keep the run quick: up to 64 MiB per device cache, 16 MiB over the host link, and
           * the layer tables up to batch 4097. */
          const int host = sides[d][0] == KVJIT_LOCATION_HOST || sides[d][1] == KVJIT_LOCATION_HOST;
          if (batches[b] * rows[r][0] > ((int64_t)(host ? 16 : 64) << 20)) continue;
          if (layers > 0 && batches[b] > 4097) continue;
          transfer_case c = base_case(batches[b], rows[r][0], sides[d][0], sides[d][1]);
          c.v_row = rows[r][1];
          c.layers = layers;
          c.index_type = (r + b) % 2 ? KVJIT_INDEX_INT32 : KVJIT_INDEX_INT64;
          run_case(c);
        }
  assert_int_equal(totals.failures - before, 0);
}

/* Strides, strided ids, K only, tails, explicit splits, PDL choices, narrow accesses. */
static void test_shapes(void **state) {
  (void)state;
  uint64_t before = totals.failures;
  for (int d = 0; d < 4; d++) {
    transfer_case c = base_case(333, 1024, sides[d][0], sides[d][1]);
    c.src_pad = 64;
    c.dst_pad = 16;
    run_case(c);
    c = base_case(333, 1024, sides[d][0], sides[d][1]);
    c.src_index_stride = 3;
    c.dst_index_stride = 2;
    c.index_type = KVJIT_INDEX_INT32;
    run_case(c);
    c = base_case(257, 196, sides[d][0], sides[d][1]);
    c.v_row = 392;
    c.src_pad = 4;
    run_case(c);
    c = base_case(100, 99, sides[d][0], sides[d][1]); /* byte accesses */
    c.dst_pad = 1;
    run_case(c);
    c = base_case(50, 16384, sides[d][0], sides[d][1]);
    c.split = 1; /* the round-by-round path */
    run_case(c);
    for (int split = 2; split <= 16; split *= 2) {
      c = base_case(777, 2048, sides[d][0], sides[d][1]);
      c.split = split;
      c.layers = split == 4 ? 2 : 0;
      run_case(c);
    }
    const kvjit_pdl_mode pdls[] = {KVJIT_PDL_OFF, KVJIT_PDL_ON};
    for (int p = 0; p < 2; p++) {
      if (pdls[p] == KVJIT_PDL_ON && env.sm < 90) continue;
      c = base_case(4097, 512, sides[d][0], sides[d][1]);
      c.pdl = pdls[p];
      run_case(c);
    }
    c = base_case(3000, 256, sides[d][0], sides[d][1]);
    c.src_slots = 17; /* many items, few source slots: repeats */
    run_case(c);
  }
  assert_int_equal(totals.failures - before, 0);
}

/* Padding and out-of-range ids on both sides, and a NULL table entry: skipped, counted, nothing
 * else touched. */
static void test_bad_slots(void **state) {
  (void)state;
  uint64_t before = totals.failures;
  for (int d = 0; d < 4; d++)
    for (int layers = 0; layers <= 4; layers += 4) {
      transfer_case c = base_case(2000, 512, sides[d][0], sides[d][1]);
      c.bad = 1;
      c.layers = layers;
      run_case(c);
      if (layers > 0) {
        c.bad_layer = 2;
        run_case(c);
      }
    }
  assert_int_equal(totals.failures - before, 0);
}

static void test_batch_zero(void **state) {
  (void)state;
  kvjit_transfer_kv_args a = KVJIT_TRANSFER_KV_ARGS_INIT;
  a.k_row_bytes = 256;
  a.src_num_slots = a.dst_num_slots = 4;
  assert_int_equal(kvjit_transfer_kv(ctx, &a), KVJIT_OK);
  /* Batch 0 prepares every class; nothing is dereferenced. */
  assert_int_equal(kvjit_transfer_kv_prepare(ctx, &a), KVJIT_OK);
}

/* Captured into a graph (prepared first: capture compiles nothing), replayed after the sources
 * and ids changed in place: every direction, one layer and tables. */
static void test_graph(void **state) {
  (void)state;
  uint64_t before = totals.failures;
  for (int d = 0; d < 4; d++)
    for (int layers = 0; layers <= 2; layers += 2) {
      transfer_case c = base_case(1500, 1024, sides[d][0], sides[d][1]);
      c.layers = layers;
      c.src_slots = c.dst_slots = 2000;
      world w;
      world_make(&c, &w);
      world_fill(&c, &w);
      CUstream stream = NULL;
      GPU_CU(env.drv->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
      kvjit_transfer_kv_args a = args_of(&c, &w, stream);
      assert_int_equal(kvjit_transfer_kv_prepare(ctx, &a), KVJIT_OK);
      CUgraph graph = NULL;
      CUgraphExec exec = NULL;
      GPU_CU(env.drv->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
      kvjit_status st = kvjit_transfer_kv(ctx, &a);
      GPU_CU(env.drv->cuStreamEndCapture(stream, &graph));
      assert_int_equal(st, KVJIT_OK);
      GPU_CU(env.drv->cuGraphInstantiateWithFlags(&exec, graph, 0));
      for (int rep = 0; rep < 3; rep++) {
        if (rep > 0) world_fill(&c, &w); /* new data and ids at the same addresses */
        GPU_CU(env.drv->cuGraphLaunch(exec, stream));
        GPU_CU(env.drv->cuStreamSynchronize(stream));
        totals.launches++;
        totals.cases++;
        world_check(&c, &w);
      }
      GPU_CU(env.drv->cuGraphExecDestroy(exec));
      GPU_CU(env.drv->cuGraphDestroy(graph));
      GPU_CU(env.drv->cuStreamDestroy(stream));
      world_free(&w);
    }
  assert_int_equal(totals.failures - before, 0);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int rc = gpu_setup(&env);
  if (rc != 0) return rc;
  const char *q = getenv("KVJIT_TEST_QUICK");
  quick = q != NULL && q[0] == '1';
  if (gpu_context_create(&ctx, cache_dir, sizeof cache_dir, "transfer", NULL) != 0) return 1;
  printf("device 0: %s, sm_%d%s\n", env.name, env.sm, quick ? ", quick" : "");
  double t0 = now_s();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_batch_zero), cmocka_unit_test(test_bad_slots), cmocka_unit_test(test_shapes),
      cmocka_unit_test(test_graph),      cmocka_unit_test(test_matrix),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  kvjit_stats stats = KVJIT_STATS_INIT;
  kvjit_context_stats(ctx, &stats);
  printf("gpu_transfer: sm_%d, %llu cases, %llu launches, %llu rows moved, %.1f MB compared, %llu kernels compiled, "
         "%llu failures, %d failed tests, %.1f s\n",
         env.sm, (unsigned long long)totals.cases, (unsigned long long)totals.launches,
         (unsigned long long)totals.rows, (double)totals.bytes / 1e6, (unsigned long long)stats.compiles,
         (unsigned long long)totals.failures, failed, now_s() - t0);
  gpu_context_destroy(ctx, cache_dir);
  gpu_teardown(&env);
  return failed ? 1 : 0;
}
