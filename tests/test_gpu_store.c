/*
 * store_kv_cache on a real GPU (gpu suite; exits 77 without a driver or device).
 *
 * Every case: random input rows, caches poisoned with random bytes, a duplicate-free random choice
 * of slots; afterwards every byte of both caches (target rows, untouched rows and stride gaps) is
 * compared with a host model. The matrix: the reference's 30 batch sizes x row widths 128..4096 B
 * (64..1024 elements of 2 and 4 bytes, with the 96/98/100-element tails) x every split whose slices
 * are >= 16 B plus automatic x int32/int64 x PDL on/off; then asymmetric rows, K only, strides,
 * misaligned bases, padding / out-of-range / skip-slot ids with the counter, batch 0, a PDL chain,
 * CUDA graph capture with replay, the manifest, a second GPU when there is one, and stores of a
 * fresh context served by a prewarmed cache (bundles and their aliases) without a compile. The
 * matrix's kernels are prewarmed as bundles too (kvjit_variants_prewarm() on every core), so the
 * matrix loads each of them through its alias.
 * Caches are kept small (batch plus a quarter) so the whole run stays well under two minutes.
 * KVJIT_TEST_QUICK=1 runs a reduced matrix (for compute-sanitizer).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpu_util.h"
#include "kvjit.h"

static gpu_env env;
static kvjit_context *ctx;
static char cache_dir[64];
static char manifest_path[128];
static int quick;
static uint64_t rng = 0x5eed5eed12345678ull;

static struct {
  uint64_t cases, launches, rows, bytes, failures;
} totals;

static const int64_t batch_sizes[] = {1,   2,   3,   4,   5,   7,    8,    15,   16,   17,   31,   32,   33,   63,   64,
                                      65,  127, 128, 129, 255, 256,  511,  512,  1023, 1024, 2047, 2048, 4096, 4097, 16399};
enum { NUM_BATCHES = sizeof batch_sizes / sizeof batch_sizes[0] };
/* 64..1024 elements of 2 and 4 bytes, with the 96/98/100-element tails. */
static const int64_t row_widths[] = {128, 192, 196, 200, 256, 384, 392, 400, 512, 1024, 2048, 4096};
enum { NUM_WIDTHS = sizeof row_widths / sizeof row_widths[0] };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- one case ------------------------------------------------------------------------------ */

typedef struct store_case {
  int64_t batch;
  int64_t k_row, v_row;                /* v_row 0: K only */
  int64_t k_pad, v_pad, kc_pad, vc_pad; /* stride = row + pad */
  int64_t index_stride;                /* elements, >= 1 */
  int64_t extra_slots;                 /* num_slots = batch + extra_slots; < 0: batch / 4 + 3 */
  kvjit_index_type index_type;
  int split;
  kvjit_pdl_mode pdl;
  unsigned k_off, v_off, kc_off, vc_off, idx_off; /* base misalignment, bytes */
  int bad_indices; /* mix padding (< 0), past-the-end and skip-slot ids in */
  int use_skip;    /* skip_slot = a real slot */
  CUstream stream;
} store_case;

static store_case base_case(int64_t batch, int64_t row) {
  store_case c;
  memset(&c, 0, sizeof c);
  c.batch = batch;
  c.k_row = c.v_row = row;
  c.index_stride = 1;
  c.extra_slots = -1;
  c.index_type = KVJIT_INDEX_INT64;
  c.pdl = KVJIT_PDL_AUTO;
  return c;
}

static void describe(const store_case *c, char *out, size_t cap) {
  snprintf(out, cap,
           "batch=%lld k_row=%lld v_row=%lld pads=%lld/%lld/%lld/%lld index=%s stride=%lld split=%d pdl=%d "
           "offs=%u/%u/%u/%u/%u bad=%d skip=%d",
           (long long)c->batch, (long long)c->k_row, (long long)c->v_row, (long long)c->k_pad, (long long)c->v_pad,
           (long long)c->kc_pad, (long long)c->vc_pad, c->index_type == KVJIT_INDEX_INT32 ? "int32" : "int64",
           (long long)c->index_stride, c->split, (int)c->pdl, c->k_off, c->v_off, c->kc_off, c->vc_off, c->idx_off,
           c->bad_indices, c->use_skip);
}

__attribute__((format(printf, 2, 3))) static int fail_case(const store_case *c, const char *fmt, ...);
static int fail_case(const store_case *c, const char *fmt, ...) {
  char what[512];
  describe(c, what, sizeof what);
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL [%s]: ", what);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  totals.failures++;
  return 1;
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (p == NULL) {
    fprintf(stderr, "out of host memory (%zu bytes)\n", n);
    abort();
  }
  return p;
}

/* Compare a downloaded cache with the model; report the first differing row. */
static int compare_cache(const store_case *c, const char *name, const unsigned char *got, const unsigned char *want,
                         size_t bytes, int64_t stride) {
  totals.bytes += bytes;
  if (memcmp(got, want, bytes) == 0) return 0;
  size_t i = 0;
  while (got[i] == want[i]) i++;
  return fail_case(c, "%s: byte %zu (row %lld, offset %lld) is 0x%02x, expected 0x%02x", name, i,
                   (long long)(i / (size_t)stride), (long long)(i % (size_t)stride), got[i], want[i]);
}

typedef struct host_side {
  int has_v;
  int64_t ks, vs, kcs, vcs, num_slots, skip_slot;
  size_t k_bytes, v_bytes, kc_bytes, vc_bytes, idx_bytes;
  unsigned char *k, *v, *kc, *vc, *want_k, *want_v, *idx;
  int64_t *slots;
  uint64_t expected_oob;
} host_side;

typedef struct dev_side {
  CUdeviceptr k, v, kc, vc, idx; /* allocation bases */
} dev_side;

/* Fresh inputs, poisoned caches, slots and the expected caches. */
static void make_host(const store_case *c, host_side *h) {
  h->has_v = c->v_row > 0;
  h->ks = c->k_row + c->k_pad;
  h->vs = c->v_row + c->v_pad;
  h->kcs = c->k_row + c->kc_pad;
  h->vcs = c->v_row + c->vc_pad;
  h->num_slots = c->batch + (c->extra_slots < 0 ? c->batch / 4 + 3 : c->extra_slots);
  if (h->num_slots < 1) h->num_slots = 1;
  h->skip_slot = c->use_skip ? (int64_t)(gpu_rand(&rng) % (uint64_t)h->num_slots) : KVJIT_NO_SKIP_SLOT;
  size_t esz = c->index_type == KVJIT_INDEX_INT64 ? 8 : 4;
  h->k_bytes = (size_t)(c->batch * h->ks);
  h->v_bytes = h->has_v ? (size_t)(c->batch * h->vs) : 0;
  h->kc_bytes = (size_t)(h->num_slots * h->kcs);
  h->vc_bytes = h->has_v ? (size_t)(h->num_slots * h->vcs) : 0;
  h->idx_bytes = (size_t)(c->batch * c->index_stride) * esz;
  h->k = xmalloc(h->k_bytes);
  h->v = xmalloc(h->v_bytes);
  h->kc = xmalloc(h->kc_bytes);
  h->vc = xmalloc(h->vc_bytes);
  h->want_k = xmalloc(h->kc_bytes);
  h->want_v = xmalloc(h->vc_bytes);
  h->idx = xmalloc(h->idx_bytes);
  h->slots = xmalloc((size_t)h->num_slots * sizeof *h->slots);
  gpu_fill_random(h->k, h->k_bytes, &rng);
  gpu_fill_random(h->v, h->v_bytes, &rng);
  gpu_fill_random(h->kc, h->kc_bytes, &rng);
  gpu_fill_random(h->vc, h->vc_bytes, &rng);
  /* Index gaps (index_stride > 1) hold lures: ids that would land somewhere visible. */
  gpu_fill_random(h->idx, h->idx_bytes, &rng);
  /* A duplicate-free random choice of slots: partial Fisher-Yates. */
  for (int64_t i = 0; i < h->num_slots; i++) h->slots[i] = i;
  for (int64_t i = 0; i < c->batch && i < h->num_slots; i++) {
    int64_t j = i + (int64_t)(gpu_rand(&rng) % (uint64_t)(h->num_slots - i));
    int64_t t = h->slots[i];
    h->slots[i] = h->slots[j];
    h->slots[j] = t;
  }
  h->expected_oob = 0;
  if (c->bad_indices) {
    for (int64_t i = 0; i < c->batch; i++) {
      switch (gpu_rand(&rng) % 6) {
      case 0: h->slots[i] = -1 - (int64_t)(gpu_rand(&rng) % 1000); break;
      case 1: h->slots[i] = h->num_slots + (int64_t)(gpu_rand(&rng) % 1000); break;
      case 2: if (c->use_skip) h->slots[i] = h->skip_slot; break;
      default: break;
      }
    }
  }
  if (c->index_type == KVJIT_INDEX_INT32) {
    for (int64_t i = 0; i < c->batch; i++) {
      int32_t s = (int32_t)h->slots[i];
      memcpy(h->idx + (size_t)(i * c->index_stride) * 4, &s, 4);
    }
  } else {
    for (int64_t i = 0; i < c->batch; i++) memcpy(h->idx + (size_t)(i * c->index_stride) * 8, &h->slots[i], 8);
  }
  memcpy(h->want_k, h->kc, h->kc_bytes);
  memcpy(h->want_v, h->vc, h->vc_bytes);
  for (int64_t i = 0; i < c->batch; i++) {
    int64_t s = h->slots[i];
    if (s < 0 || s == h->skip_slot) continue;
    if (s >= h->num_slots) {
      h->expected_oob++;
      continue;
    }
    memcpy(h->want_k + s * h->kcs, h->k + i * h->ks, (size_t)c->k_row);
    if (h->has_v) memcpy(h->want_v + s * h->vcs, h->v + i * h->vs, (size_t)c->v_row);
    totals.rows++;
  }
}

static void free_host(host_side *h) {
  free(h->k);
  free(h->v);
  free(h->kc);
  free(h->vc);
  free(h->want_k);
  free(h->want_v);
  free(h->idx);
  free(h->slots);
}

static void upload_all(const store_case *c, const host_side *h, const dev_side *d) {
  gpu_upload(d->k + c->k_off, h->k, h->k_bytes);
  gpu_upload(d->kc + c->kc_off, h->kc, h->kc_bytes);
  gpu_upload(d->idx + c->idx_off, h->idx, h->idx_bytes);
  if (h->has_v) {
    gpu_upload(d->v + c->v_off, h->v, h->v_bytes);
    gpu_upload(d->vc + c->vc_off, h->vc, h->vc_bytes);
  }
}

static void alloc_dev(const store_case *c, const host_side *h, dev_side *d) {
  d->k = gpu_alloc(h->k_bytes + c->k_off + 16);
  d->kc = gpu_alloc(h->kc_bytes + c->kc_off + 16);
  d->idx = gpu_alloc(h->idx_bytes + c->idx_off + 16);
  d->v = h->has_v ? gpu_alloc(h->v_bytes + c->v_off + 16) : 0;
  d->vc = h->has_v ? gpu_alloc(h->vc_bytes + c->vc_off + 16) : 0;
}

static void free_dev(dev_side *d) {
  gpu_free(d->k);
  gpu_free(d->kc);
  gpu_free(d->idx);
  gpu_free(d->v);
  gpu_free(d->vc);
}

static kvjit_store_kv_args args_of(const store_case *c, const host_side *h, const dev_side *d) {
  kvjit_store_kv_args a = KVJIT_STORE_KV_ARGS_INIT;
  a.k = (const void *)(uintptr_t)(d->k + c->k_off);
  a.k_cache = (void *)(uintptr_t)(d->kc + c->kc_off);
  if (h->has_v) {
    a.v = (const void *)(uintptr_t)(d->v + c->v_off);
    a.v_cache = (void *)(uintptr_t)(d->vc + c->vc_off);
  }
  a.indices = (const void *)(uintptr_t)(d->idx + c->idx_off);
  a.index_type = c->index_type;
  a.index_stride = c->index_stride;
  a.batch = c->batch;
  a.k_row_bytes = c->k_row;
  a.v_row_bytes = c->v_row;
  a.k_stride = h->ks;
  a.v_stride = h->has_v ? h->vs : 0;
  a.k_cache_stride = h->kcs;
  a.v_cache_stride = h->has_v ? h->vcs : 0;
  a.num_slots = h->num_slots;
  a.skip_slot = h->skip_slot;
  a.split = c->split;
  a.pdl = c->pdl;
  a.stream = (struct CUstream_st *)c->stream;
  return a;
}

/* Download both caches and compare every byte with the model. */
static int check_caches(const store_case *c, const host_side *h, const dev_side *d) {
  unsigned char *got = xmalloc(h->kc_bytes > h->vc_bytes ? h->kc_bytes : h->vc_bytes);
  gpu_download(got, d->kc + c->kc_off, h->kc_bytes);
  int bad = compare_cache(c, "k_cache", got, h->want_k, h->kc_bytes, h->kcs);
  if (!bad && h->has_v) {
    gpu_download(got, d->vc + c->vc_off, h->vc_bytes);
    bad = compare_cache(c, "v_cache", got, h->want_v, h->vc_bytes, h->vcs);
  }
  free(got);
  return bad;
}

/* Run one case; returns non-zero on failure (already reported). */
static int run_case(const store_case *c) {
  totals.cases++;
  host_side h;
  dev_side d;
  make_host(c, &h);
  alloc_dev(c, &h, &d);
  upload_all(c, &h, &d);
  kvjit_store_kv_args a = args_of(c, &h, &d);
  int bad = 0;
  kvjit_status st = kvjit_store_kv_cache(ctx, &a);
  if (st != KVJIT_OK) {
    bad = fail_case(c, "store: %s: %s", kvjit_status_name(st), kvjit_last_error());
  } else {
    if (c->batch > 0) totals.launches++;
    if (c->stream) GPU_CU(env.drv->cuStreamSynchronize(c->stream));
    gpu_sync();
    bad = check_caches(c, &h, &d);
  }
  if (!bad && c->bad_indices) {
    uint64_t n = 0;
    st = kvjit_store_kv_cache_oob_count(ctx, &n, 1);
    if (st != KVJIT_OK) {
      bad = fail_case(c, "oob_count: %s", kvjit_last_error());
    } else if (n != h.expected_oob) {
      bad = fail_case(c, "oob_count: %llu, expected %llu", (unsigned long long)n, (unsigned long long)h.expected_oob);
    } else if (kvjit_store_kv_cache_oob_count(ctx, &n, 0) != KVJIT_OK || n != 0) {
      bad = fail_case(c, "oob_count after reset: %llu", (unsigned long long)n);
    }
  }
  free_dev(&d);
  free_host(&h);
  return bad;
}

/* ---- parallel prewarm: NVRTC on every core before the matrix needs the kernels ------------------ */

/* kvjit_variants_prewarm(): one share per thread, each compiled as bundles; the matrix then loads
 * every kernel through its alias. */
typedef struct prewarm_job {
  const kvjit_variant *variants;
  size_t count;
  unsigned shares;
  atomic_uint next;
  atomic_uint failures;
} prewarm_job;

static void *prewarm_worker(void *arg) {
  prewarm_job *job = arg;
  kvjit_prewarm_result *results = xmalloc(job->count * sizeof *results);
  for (;;) {
    unsigned share = atomic_fetch_add(&job->next, 1);
    if (share >= job->shares) break;
    if (kvjit_variants_prewarm(ctx, job->variants, job->count, share, job->shares, results) != KVJIT_OK) {
      fprintf(stderr, "prewarm share %u: %s\n", share, kvjit_last_error());
      atomic_fetch_add(&job->failures, 1);
    }
  }
  free(results);
  return NULL;
}

static unsigned prewarm_all(const kvjit_store_kv_variant *store, size_t count) {
  kvjit_variant *variants = xmalloc(count * sizeof *variants);
  for (size_t i = 0; i < count; i++) {
    char line[512];
    assert_int_equal(kvjit_store_kv_variant_format(&store[i], line, sizeof line), KVJIT_OK);
    assert_int_equal(kvjit_variant_parse(&variants[i], line), KVJIT_OK);
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int threads = cores < 1 ? 1 : cores > 16 ? 16 : (int)cores;
  prewarm_job job = {variants, count, (unsigned)threads * 2, 0, 0};
  pthread_t tid[16];
  for (int t = 0; t < threads; t++) pthread_create(&tid[t], NULL, prewarm_worker, &job);
  for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
  free(variants);
  return atomic_load(&job.failures);
}

/* Splits of a row whose slices are >= 16 B. */
static int splits_of(int64_t row, int *out, int cap) {
  int n = 0;
  for (int64_t s = 1; s <= row / 16 && n < cap; s++) {
    if (row % s == 0) out[n++] = (int)s;
  }
  return n;
}

/* ---- tests ---------------------------------------------------------------------------------- */

static void test_matrix(void **state) {
  (void)state;
  const int pdl_modes[] = {KVJIT_PDL_OFF, KVJIT_PDL_ON};
  const kvjit_index_type index_types[] = {KVJIT_INDEX_INT32, KVJIT_INDEX_INT64};
  int can_pdl = env.sm >= 90;
  /* The combinations: width x (auto + every split) x index x pdl. */
  size_t cap = 4096, count = 0;
  store_case *combos = xmalloc(cap * sizeof *combos);
  kvjit_store_kv_variant *variants = xmalloc(cap * sizeof *variants);
  for (int w = 0; w < NUM_WIDTHS; w++) {
    if (quick && w % 3 != 0) continue;
    int splits[64];
    int ns = splits_of(row_widths[w], splits + 1, 63) + 1;
    splits[0] = 0;
    for (int s = 0; s < ns; s++) {
      for (int it = 0; it < 2; it++) {
        for (int p = 0; p < 2; p++) {
          if (pdl_modes[p] == KVJIT_PDL_ON && !can_pdl) continue;
          store_case c = base_case(1, row_widths[w]);
          c.split = splits[s];
          c.index_type = index_types[it];
          c.pdl = (kvjit_pdl_mode)pdl_modes[p];
          combos[count] = c;
          kvjit_store_kv_variant v = {.version = KVJIT_STORE_KV_VARIANT_VERSION, .arch = env.sm, .k_row_bytes = c.k_row,
                                      .v_row_bytes = c.v_row, .index_type = c.index_type, .pdl = c.pdl,
                                      .split = c.split, .vector_bytes = 16};
          variants[count] = v;
          count++;
        }
      }
    }
  }
  double t0 = now_s();
  unsigned prewarm_failures = prewarm_all(variants, count);
  kvjit_stats stats = KVJIT_STATS_INIT;
  kvjit_context_stats(ctx, &stats);
  printf("matrix: %zu combinations, prewarmed in %llu NVRTC programs (bundles) in %.1f s\n", count,
         (unsigned long long)stats.compiles, now_s() - t0);
  assert_int_equal(prewarm_failures, 0);

  uint64_t before = totals.failures;
  /* Each combination: one batch of each class (decode, mid, large) plus two rotating sizes. */
  for (size_t i = 0; i < count; i++) {
    int64_t sizes[5] = {1, 33, 4097, batch_sizes[i % NUM_BATCHES], batch_sizes[(i * 7 + 3) % NUM_BATCHES]};
    for (int b = 0; b < (quick ? 3 : 5); b++) {
      store_case c = combos[i];
      c.batch = sizes[b];
      run_case(&c);
    }
  }
  /* Every batch size with the automatic choice, for every width and both index types. */
  for (int w = 0; w < NUM_WIDTHS; w++) {
    if (quick && w % 3 != 0) continue;
    for (int it = 0; it < 2; it++) {
      for (int b = 0; b < NUM_BATCHES; b++) {
        if (quick && batch_sizes[b] > 4097) continue;
        store_case c = base_case(batch_sizes[b], row_widths[w]);
        c.index_type = index_types[it];
        run_case(&c);
      }
    }
  }
  free(combos);
  free(variants);
  assert_int_equal(totals.failures - before, 0);
}

static void test_shapes(void **state) {
  (void)state;
  uint64_t before = totals.failures;
  const int64_t batches[] = {1, 7, 17, 1023, 5000, 40001};
  /* Asymmetric K/V rows (head_dim != v_head_dim), automatic and explicit splits. */
  const int64_t asym[][3] = {{576, 512, 0}, {1152, 1024, 0}, {1152, 1024, 4}, {256, 128, 0},
                             {128, 256, 2}, {192, 128, 0},   {4096, 512, 0}, {200, 100, 0}};
  for (size_t i = 0; i < sizeof asym / sizeof asym[0]; i++) {
    for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
      store_case c = base_case(batches[b], asym[i][0]);
      c.v_row = asym[i][1];
      c.split = (int)asym[i][2];
      run_case(&c);
    }
  }
  /* K only (latent caches): v and v_cache NULL. */
  const int64_t konly[] = {576, 512, 1152, 64, 196};
  for (size_t i = 0; i < sizeof konly / sizeof konly[0]; i++) {
    for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
      store_case c = base_case(batches[b], konly[i]);
      c.v_row = 0;
      c.index_type = b % 2 ? KVJIT_INDEX_INT32 : KVJIT_INDEX_INT64;
      run_case(&c);
    }
  }
  /* Odd rows of any byte size, 1-byte rows, and splits that narrow the vector. */
  const int64_t odd[][2] = {{1, 0}, {3, 0}, {33, 0}, {100, 0}, {1000, 0}, {8192, 0}, {8192, 1}, {256, 64}, {256, 256}, {384, 96}};
  for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
    for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
      store_case c = base_case(batches[b], odd[i][0]);
      c.split = (int)odd[i][1];
      run_case(&c);
    }
  }
  /* Strided inputs and caches (wide and narrow alignment), strided indices. */
  const int64_t pads[][4] = {{64, 256, 32, 16}, {4, 0, 0, 0}, {0, 8, 0, 0}, {0, 0, 2, 0}, {0, 0, 0, 1}, {256, 256, 256, 256}};
  for (size_t i = 0; i < sizeof pads / sizeof pads[0]; i++) {
    for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
      store_case c = base_case(batches[b], b % 2 ? 256 : 1024);
      c.k_pad = pads[i][0];
      c.v_pad = pads[i][1];
      c.kc_pad = pads[i][2];
      c.vc_pad = pads[i][3];
      c.index_stride = (int64_t)(1 + i % 3);
      c.index_type = i % 2 ? KVJIT_INDEX_INT32 : KVJIT_INDEX_INT64;
      run_case(&c);
    }
  }
  /* Misaligned bases: each pointer alone, then all at once. */
  const unsigned offs[][5] = {{8, 0, 0, 0, 0}, {0, 4, 0, 0, 0}, {0, 0, 2, 0, 0}, {0, 0, 0, 1, 0},
                              {0, 0, 0, 0, 8}, {4, 8, 2, 1, 4}, {12, 12, 12, 12, 0}};
  for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
    for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
      store_case c = base_case(batches[b], b % 2 ? 128 : 2048);
      c.k_off = offs[i][0];
      c.v_off = offs[i][1];
      c.kc_off = offs[i][2];
      c.vc_off = offs[i][3];
      c.idx_off = offs[i][4];
      c.index_type = (c.idx_off % 8) ? KVJIT_INDEX_INT32 : KVJIT_INDEX_INT64;
      run_case(&c);
    }
  }
  /* On a stream of its own. */
  CUstream stream = NULL;
  GPU_CU(env.drv->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
    store_case c = base_case(batches[b], 512);
    c.stream = stream;
    run_case(&c);
  }
  GPU_CU(env.drv->cuStreamDestroy(stream));
  assert_int_equal(totals.failures - before, 0);
}

/* Padding, past-the-end and skip-slot ids: skipped, counted (past-the-end only), context alive. */
static void test_bad_indices(void **state) {
  (void)state;
  uint64_t before = totals.failures;
  uint64_t n = 0;
  assert_int_equal(kvjit_store_kv_cache_oob_count(ctx, &n, 1), KVJIT_OK);
  const int64_t batches[] = {1, 5, 64, 1000, 4097, 16399};
  for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
    for (int variant = 0; variant < 4; variant++) {
      store_case c = base_case(batches[b], variant % 2 ? 196 : 1024);
      c.bad_indices = 1;
      c.use_skip = variant >= 2;
      c.index_type = variant % 2 ? KVJIT_INDEX_INT32 : KVJIT_INDEX_INT64;
      c.pdl = variant == 3 ? KVJIT_PDL_OFF : KVJIT_PDL_AUTO;
      run_case(&c);
      /* A correct store right after, in the same context. */
      store_case good = base_case(batches[b], 256);
      run_case(&good);
    }
  }
  /* Batches past 32768 with narrow rows: each lane group stores two items (odd batches leave the
   * last group one), and a bad id may sit in either item of a group. */
  const int64_t paired_rows[] = {128, 196, 64};
  for (size_t r = 0; r < sizeof paired_rows / sizeof paired_rows[0]; r++) {
    for (int variant = 0; variant < 4; variant++) {
      store_case p = base_case(variant % 2 ? 40001 : 32769, paired_rows[r]);
      p.bad_indices = 1;
      p.use_skip = variant >= 2;
      p.index_type = variant % 2 ? KVJIT_INDEX_INT32 : KVJIT_INDEX_INT64;
      p.v_row = variant == 3 ? 0 : p.v_row; /* K only too */
      run_case(&p);
    }
  }
  /* No spare slots: past-the-end ids are the first ids past the cache. */
  store_case c = base_case(300, 512);
  c.extra_slots = 0;
  c.bad_indices = 1;
  run_case(&c);
  /* The context still works for a plain driver call. */
  gpu_sync();
  assert_int_equal(totals.failures - before, 0);
}

static void test_batch_zero(void **state) {
  (void)state;
  store_case c = base_case(0, 256);
  c.extra_slots = 8;
  uint64_t launches = totals.launches;
  assert_int_equal(run_case(&c), 0);
  /* With NULL device pointers too. */
  kvjit_store_kv_args a = KVJIT_STORE_KV_ARGS_INIT;
  a.k_row_bytes = 256;
  a.num_slots = 8;
  assert_int_equal(kvjit_store_kv_cache(ctx, &a), KVJIT_OK);
  assert_int_equal(totals.launches, launches);
}

/* prepare() loads every class; afterwards stores neither compile nor touch the loader. */
static void test_prepare_then_hot_path(void **state) {
  (void)state;
  store_case c = base_case(1, 640);
  c.v_row = 320;
  c.index_type = KVJIT_INDEX_INT32;
  host_side h;
  dev_side d;
  make_host(&c, &h);
  alloc_dev(&c, &h, &d);
  kvjit_store_kv_args a = args_of(&c, &h, &d);
  a.batch = 0; /* every batch class */
  assert_int_equal(kvjit_store_kv_cache_prepare(ctx, &a), KVJIT_OK);
  free_dev(&d);
  free_host(&h);
  kvjit_stats s0 = KVJIT_STATS_INIT, s1 = KVJIT_STATS_INIT;
  assert_int_equal(kvjit_context_stats(ctx, &s0), KVJIT_OK);
  /* Every class and its edges: 16 | 17, 512 | 513, 32768 | 32769. */
  const int64_t batches[] = {1, 16, 17, 512, 513, 4096, 9000, 32768, 32769, 40001};
  for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
    c.batch = batches[b];
    assert_int_equal(run_case(&c), 0);
  }
  assert_int_equal(kvjit_context_stats(ctx, &s1), KVJIT_OK);
  assert_int_equal(s1.compiles, s0.compiles);
  assert_int_equal(s1.disk_hits, s0.disk_hits);
  assert_int_equal(s1.memory_hits, s0.memory_hits);
  assert_int_equal(s1.loads, s0.loads);
}

/* A call with no current context (its variant already loaded) fails with a status and a message,
 * writes nothing, and the next call with the context back works. */
static void test_no_current_context(void **state) {
  (void)state;
  store_case c = base_case(7, 256);
  assert_int_equal(run_case(&c), 0); /* the variant is loaded, the arch is known */
  host_side h;
  dev_side d;
  make_host(&c, &h);
  alloc_dev(&c, &h, &d);
  upload_all(&c, &h, &d);
  kvjit_store_kv_args a = args_of(&c, &h, &d);
  GPU_CU(env.drv->cuCtxSetCurrent(NULL));
  kvjit_status st = kvjit_store_kv_cache(ctx, &a);
  GPU_CU(env.drv->cuCtxSetCurrent(env.context));
  printf("no current context: %s: %s\n", kvjit_status_name(st), kvjit_last_error());
  assert_int_equal(st, KVJIT_ERR_NO_DEVICE);
  assert_non_null(strstr(kvjit_last_error(), "CUDA_ERROR_INVALID_CONTEXT"));
  gpu_sync();
  memcpy(h.want_k, h.kc, h.kc_bytes); /* nothing stored: the caches are as uploaded */
  memcpy(h.want_v, h.vc, h.vc_bytes);
  assert_int_equal(check_caches(&c, &h, &d), 0);
  free_dev(&d);
  free_host(&h);
  assert_int_equal(run_case(&c), 0);
}

/* Store 1 writes cache A; store 2 reads cache A as its input. With PDL the second kernel's wait is
 * what orders them: a missing wait shows up as stale rows. Run on a stream, then in a CUDA graph
 * replayed after the inputs change. */
typedef struct chain {
  int64_t batch, row, slots;
  CUdeviceptr k, v, a_k, a_v, b_k, b_v, idx1, idx2;
  unsigned char *hk, *hv, *ha_k, *ha_v, *hb_k, *hb_v, *want_a_k, *want_a_v, *want_b_k, *want_b_v;
  int64_t *s1, *s2;
} chain;

static void chain_fill(chain *ch) {
  size_t in = (size_t)(ch->batch * ch->row), cache = (size_t)(ch->slots * ch->row);
  gpu_fill_random(ch->hk, in, &rng);
  gpu_fill_random(ch->hv, in, &rng);
  gpu_fill_random(ch->ha_k, cache, &rng);
  gpu_fill_random(ch->ha_v, cache, &rng);
  gpu_fill_random(ch->hb_k, cache, &rng);
  gpu_fill_random(ch->hb_v, cache, &rng);
  /* s1: batch distinct slots of A. s2: store 2 reads A's first `batch` rows into distinct B slots. */
  int64_t *perm = xmalloc((size_t)ch->slots * sizeof *perm);
  for (int pass = 0; pass < 2; pass++) {
    for (int64_t i = 0; i < ch->slots; i++) perm[i] = i;
    for (int64_t i = 0; i < ch->batch; i++) {
      int64_t j = i + (int64_t)(gpu_rand(&rng) % (uint64_t)(ch->slots - i));
      int64_t t = perm[i];
      perm[i] = perm[j];
      perm[j] = t;
    }
    memcpy(pass ? ch->s2 : ch->s1, perm, (size_t)ch->batch * sizeof *perm);
  }
  free(perm);
  memcpy(ch->want_a_k, ch->ha_k, cache);
  memcpy(ch->want_a_v, ch->ha_v, cache);
  memcpy(ch->want_b_k, ch->hb_k, cache);
  memcpy(ch->want_b_v, ch->hb_v, cache);
  for (int64_t i = 0; i < ch->batch; i++) {
    memcpy(ch->want_a_k + ch->s1[i] * ch->row, ch->hk + i * ch->row, (size_t)ch->row);
    memcpy(ch->want_a_v + ch->s1[i] * ch->row, ch->hv + i * ch->row, (size_t)ch->row);
  }
  for (int64_t i = 0; i < ch->batch; i++) {
    memcpy(ch->want_b_k + ch->s2[i] * ch->row, ch->want_a_k + i * ch->row, (size_t)ch->row);
    memcpy(ch->want_b_v + ch->s2[i] * ch->row, ch->want_a_v + i * ch->row, (size_t)ch->row);
  }
  gpu_upload(ch->k, ch->hk, in);
  gpu_upload(ch->v, ch->hv, in);
  gpu_upload(ch->a_k, ch->ha_k, cache);
  gpu_upload(ch->a_v, ch->ha_v, cache);
  gpu_upload(ch->b_k, ch->hb_k, cache);
  gpu_upload(ch->b_v, ch->hb_v, cache);
  gpu_upload(ch->idx1, ch->s1, (size_t)ch->batch * 8);
  gpu_upload(ch->idx2, ch->s2, (size_t)ch->batch * 8);
}

static int chain_check(chain *ch, const char *what) {
  size_t cache = (size_t)(ch->slots * ch->row);
  unsigned char *got = xmalloc(cache);
  CUdeviceptr bufs[4] = {ch->a_k, ch->a_v, ch->b_k, ch->b_v};
  const unsigned char *want[4] = {ch->want_a_k, ch->want_a_v, ch->want_b_k, ch->want_b_v};
  const char *names[4] = {"A.k", "A.v", "B.k", "B.v"};
  int bad = 0;
  for (int i = 0; i < 4 && !bad; i++) {
    gpu_download(got, bufs[i], cache);
    totals.bytes += cache;
    if (memcmp(got, want[i], cache) != 0) {
      size_t j = 0;
      while (got[j] == want[i][j]) j++;
      fprintf(stderr, "FAIL [%s]: %s differs at byte %zu (row %zu)\n", what, names[i], j, j / (size_t)ch->row);
      totals.failures++;
      bad = 1;
    }
  }
  free(got);
  return bad;
}

static kvjit_store_kv_args chain_args(const chain *ch, int second, kvjit_pdl_mode pdl, CUstream stream) {
  kvjit_store_kv_args a = KVJIT_STORE_KV_ARGS_INIT;
  a.k = (const void *)(uintptr_t)(second ? ch->a_k : ch->k);
  a.v = (const void *)(uintptr_t)(second ? ch->a_v : ch->v);
  a.k_cache = (void *)(uintptr_t)(second ? ch->b_k : ch->a_k);
  a.v_cache = (void *)(uintptr_t)(second ? ch->b_v : ch->a_v);
  a.indices = (const void *)(uintptr_t)(second ? ch->idx2 : ch->idx1);
  a.batch = ch->batch;
  a.k_row_bytes = ch->row;
  a.num_slots = ch->slots;
  a.pdl = pdl;
  a.stream = (struct CUstream_st *)stream;
  return a;
}

static void test_chain_and_graph(void **state) {
  (void)state;
  chain ch;
  memset(&ch, 0, sizeof ch);
  uint64_t before = totals.failures;
  const int64_t shapes[][2] = {{1, 8192}, {16, 2048}, {4097, 128}, {3000, 1024}};
  for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
    ch.batch = shapes[sh][0];
    ch.row = shapes[sh][1];
    ch.slots = ch.batch * 2 + 5;
    size_t in = (size_t)(ch.batch * ch.row), cache = (size_t)(ch.slots * ch.row);
    ch.k = gpu_alloc(in);
    ch.v = gpu_alloc(in);
    ch.a_k = gpu_alloc(cache);
    ch.a_v = gpu_alloc(cache);
    ch.b_k = gpu_alloc(cache);
    ch.b_v = gpu_alloc(cache);
    ch.idx1 = gpu_alloc((size_t)ch.batch * 8);
    ch.idx2 = gpu_alloc((size_t)ch.batch * 8);
    unsigned char **hosts[] = {&ch.hk, &ch.hv};
    for (int i = 0; i < 2; i++) *hosts[i] = xmalloc(in);
    unsigned char **caches[] = {&ch.ha_k, &ch.ha_v, &ch.hb_k, &ch.hb_v, &ch.want_a_k, &ch.want_a_v, &ch.want_b_k, &ch.want_b_v};
    for (int i = 0; i < 8; i++) *caches[i] = xmalloc(cache);
    ch.s1 = xmalloc((size_t)ch.batch * 8);
    ch.s2 = xmalloc((size_t)ch.batch * 8);

    CUstream stream = NULL;
    GPU_CU(env.drv->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    kvjit_pdl_mode modes[] = {KVJIT_PDL_AUTO, KVJIT_PDL_ON, KVJIT_PDL_OFF};
    for (int m = 0; m < 3; m++) {
      if (modes[m] == KVJIT_PDL_ON && env.sm < 90) continue;
      /* On a stream, 3 times. */
      for (int rep = 0; rep < 3; rep++) {
        chain_fill(&ch);
        kvjit_store_kv_args a1 = chain_args(&ch, 0, modes[m], stream), a2 = chain_args(&ch, 1, modes[m], stream);
        assert_int_equal(kvjit_store_kv_cache(ctx, &a1), KVJIT_OK);
        assert_int_equal(kvjit_store_kv_cache(ctx, &a2), KVJIT_OK);
        totals.launches += 2;
        totals.cases++;
        GPU_CU(env.drv->cuStreamSynchronize(stream));
        chain_check(&ch, "chain on a stream");
      }
      /* Captured into a graph, replayed after the inputs and ids change. */
      kvjit_store_kv_args a1 = chain_args(&ch, 0, modes[m], stream), a2 = chain_args(&ch, 1, modes[m], stream);
      assert_int_equal(kvjit_store_kv_cache_prepare(ctx, &a1), KVJIT_OK);
      CUgraph graph = NULL;
      CUgraphExec exec = NULL;
      GPU_CU(env.drv->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
      kvjit_status s1 = kvjit_store_kv_cache(ctx, &a1);
      kvjit_status s2 = kvjit_store_kv_cache(ctx, &a2);
      GPU_CU(env.drv->cuStreamEndCapture(stream, &graph));
      assert_int_equal(s1, KVJIT_OK);
      assert_int_equal(s2, KVJIT_OK);
      GPU_CU(env.drv->cuGraphInstantiateWithFlags(&exec, graph, 0));
      for (int rep = 0; rep < 3; rep++) {
        chain_fill(&ch);
        GPU_CU(env.drv->cuGraphLaunch(exec, stream));
        GPU_CU(env.drv->cuStreamSynchronize(stream));
        totals.launches += 2;
        totals.cases++;
        chain_check(&ch, "graph replay");
      }
      GPU_CU(env.drv->cuGraphExecDestroy(exec));
      GPU_CU(env.drv->cuGraphDestroy(graph));
    }
    GPU_CU(env.drv->cuStreamDestroy(stream));
    CUdeviceptr ptrs[] = {ch.k, ch.v, ch.a_k, ch.a_v, ch.b_k, ch.b_v, ch.idx1, ch.idx2};
    for (int i = 0; i < 8; i++) gpu_free(ptrs[i]);
    for (int i = 0; i < 2; i++) free(*hosts[i]);
    for (int i = 0; i < 8; i++) free(*caches[i]);
    free(ch.s1);
    free(ch.s2);
  }
  assert_int_equal(totals.failures - before, 0);
}

/* A prewarmed cache (bundles and aliases) serves a fresh context's stores without a compile: each
 * kernel is read through its alias, each bundle loaded once; the bad-slot counter of kernels that
 * share a bundle counts each store once. */
static void test_stores_from_bundles(void **state) {
  (void)state;
  uint64_t before = totals.failures;
  static const int64_t rows[] = {128, 256, 1024, 2048};
  kvjit_store_kv_variant variants[8];
  size_t count = 0;
  for (size_t r = 0; r < 4; r++) {
    for (int it = 0; it < 2; it++) {
      kvjit_store_kv_variant v = {.version = KVJIT_STORE_KV_VARIANT_VERSION, .arch = env.sm, .k_row_bytes = rows[r],
                                  .v_row_bytes = rows[r], .index_type = it ? KVJIT_INDEX_INT64 : KVJIT_INDEX_INT32,
                                  .pdl = KVJIT_PDL_AUTO, .split = 0, .vector_bytes = 16};
      variants[count++] = v;
    }
  }
  kvjit_context *main_ctx = ctx;
  char dir[64];
  assert_int_equal(gpu_context_create(&ctx, dir, sizeof dir, "bundles", NULL), 0);
  assert_int_equal(prewarm_all(variants, count), 0);
  kvjit_stats built = KVJIT_STATS_INIT;
  assert_int_equal(kvjit_context_stats(ctx, &built), KVJIT_OK);
  kvjit_context_destroy(ctx);
  /* A fresh context over the same dir: the stores' kernels come from the bundles. */
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.cache_dir = dir;
  o.cache_path = "";
  o.disable_cache = 0;
  o.log = 0;
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_OK);
  static const int64_t batches[] = {1, 16, 17, 300, 513, 4097, 32769};
  for (size_t v = 0; v < count; v++) {
    for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
      store_case c = base_case(batches[b], variants[v].k_row_bytes);
      c.index_type = variants[v].index_type;
      c.bad_indices = b % 2;
      run_case(&c);
    }
  }
  kvjit_stats s = KVJIT_STATS_INIT;
  assert_int_equal(kvjit_context_stats(ctx, &s), KVJIT_OK);
  printf("stores from bundles: prewarm wrote %llu entries from %llu programs; a fresh context: %llu compiles, %llu "
         "disk hits, %llu loads\n",
         (unsigned long long)built.disk_writes, (unsigned long long)built.compiles, (unsigned long long)s.compiles,
         (unsigned long long)s.disk_hits, (unsigned long long)s.loads);
  assert_int_equal(s.compiles, 0);
  assert_true(s.disk_hits > 0);
  /* One load per bundle at most (fewer programs than kernels). */
  assert_true(s.loads <= built.compiles);
  gpu_context_destroy(ctx, dir);
  ctx = main_ctx;
  assert_int_equal(totals.failures - before, 0);
}

static void test_pdl_on_old_gpu(void **state) {
  (void)state;
  if (env.sm >= 90) {
    /* Nothing to refuse here; PDL on is exercised by the matrix. */
    return;
  }
  kvjit_store_kv_args a = KVJIT_STORE_KV_ARGS_INIT;
  CUdeviceptr buf = gpu_alloc(4096);
  a.k = a.v = (const void *)(uintptr_t)buf;
  a.k_cache = a.v_cache = (void *)(uintptr_t)buf;
  a.indices = (const void *)(uintptr_t)buf;
  a.batch = 1;
  a.k_row_bytes = 256;
  a.num_slots = 1;
  a.pdl = KVJIT_PDL_ON;
  assert_int_equal(kvjit_store_kv_cache(ctx, &a), KVJIT_ERR_UNSUPPORTED);
  assert_non_null(strstr(kvjit_last_error(), "pdl"));
  gpu_free(buf);
}

/* Each variant first loaded in this process was recorded once; every line parses. */
static void test_manifest(void **state) {
  (void)state;
  FILE *f = fopen(manifest_path, "r");
  assert_non_null(f);
  char line[512];
  int lines = 0;
  while (fgets(line, sizeof line, f)) {
    kvjit_store_kv_variant v;
    kvjit_status st = kvjit_store_kv_variant_parse(&v, line);
    if (st != KVJIT_OK) fail_msg("manifest line \"%s\": %s", line, kvjit_last_error());
    assert_int_equal(v.arch, env.sm);
    lines++;
  }
  fclose(f);
  printf("manifest: %d lines\n", lines);
  assert_true(lines > 10);
}

/* One context, one prepared variant, two GPUs of one process. */
static void test_second_gpu(void **state) {
  (void)state;
  if (env.device_count < 2) {
    printf("second GPU: only %d device, not run\n", env.device_count);
    return;
  }
  CUdevice dev1;
  CUcontext ctx1;
  GPU_CU(env.drv->cuDeviceGet(&dev1, 1));
  GPU_CU(env.drv->cuDevicePrimaryCtxRetain(&ctx1, dev1));
  for (int round = 0; round < 2; round++) {
    GPU_CU(env.drv->cuCtxSetCurrent(round ? env.context : ctx1));
    store_case c = base_case(333, 1024);
    c.bad_indices = 1;
    assert_int_equal(run_case(&c), 0);
  }
  GPU_CU(env.drv->cuCtxSetCurrent(env.context));
  GPU_CU(env.drv->cuDevicePrimaryCtxRelease(dev1));
  printf("second GPU: ok\n");
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int rc = gpu_setup(&env);
  if (rc != 0) return rc;
  const char *q = getenv("KVJIT_TEST_QUICK");
  quick = q != NULL && q[0] == '1';
  if (gpu_context_create(&ctx, cache_dir, sizeof cache_dir, "store", "manifest.txt") != 0) return 1;
  snprintf(manifest_path, sizeof manifest_path, "%s/manifest.txt", cache_dir);
  printf("device 0: %s, sm_%d, %d device(s)%s\n", env.name, env.sm, env.device_count, quick ? ", quick" : "");
  double t0 = now_s();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_batch_zero),     cmocka_unit_test(test_pdl_on_old_gpu),
      cmocka_unit_test(test_prepare_then_hot_path), cmocka_unit_test(test_no_current_context),
      cmocka_unit_test(test_bad_indices),
      cmocka_unit_test(test_shapes),         cmocka_unit_test(test_chain_and_graph),
      cmocka_unit_test(test_matrix),         cmocka_unit_test(test_second_gpu),
      cmocka_unit_test(test_stores_from_bundles),
      cmocka_unit_test(test_manifest),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  kvjit_stats stats = KVJIT_STATS_INIT;
  kvjit_context_stats(ctx, &stats);
  printf("gpu_store: sm_%d, %llu cases, %llu launches, %llu rows stored, %.1f MB compared, %llu kernels compiled, "
         "%llu failures, %d failed tests, %.1f s\n",
         env.sm, (unsigned long long)totals.cases, (unsigned long long)totals.launches,
         (unsigned long long)totals.rows, (double)totals.bytes / 1e6, (unsigned long long)stats.compiles,
         (unsigned long long)totals.failures, failed, now_s() - t0);
  gpu_context_destroy(ctx, cache_dir);
  gpu_teardown(&env);
  return failed ? 1 : 0;
}
