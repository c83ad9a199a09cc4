/*
 * Quantize on store on a real GPU (gpu suite; exits 77 without a driver or device).
 *
 * Every case: source rows of f16 / bf16 / f32 bit patterns (random, or crafted edges), caches
 * poisoned with random bytes, a duplicate-free random choice of slots; afterwards every byte of
 * both caches is compared with a host model built on tests/fp8_ref.h (fp32 division, then a
 * nearest-even search over the 256 fp8 codes with saturation): target rows bit for bit, every
 * other row and stride gap unchanged.
 *  - all 65536 f16 patterns, e4m3 and e5m2, no scale / per tensor / per head;
 *  - bf16 and f32 random patterns (NaN, Inf, subnormals included) and the edges: every fp8 value,
 *    each midpoint between neighbours (the ties), one ulp either side, the saturation threshold;
 *  - the integer conversion (what GPUs before sm_89 run) compiled for this GPU and checked the same;
 *  - padding / skip-slot / out-of-range ids with the counter, K only, asymmetric rows, strides,
 *    misaligned caches, explicit splits (the round-by-round path too), int32 ids, PDL off;
 *  - a CUDA graph replayed after the scales change in device memory (no re-capture).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "store_kv_plan.h"
#include "fp8_ref.h"
#include "gpu_util.h"
#include "internal_util.h"
#include "kvjit.h"

static gpu_env env;
static kvjit_context *ctx;
static char cache_dir[64];
static uint64_t rng = 0xf8f8f8f812345678ull;

static struct {
  uint64_t cases, launches, values, bytes, failures;
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

/* ---- one case ------------------------------------------------------------------------------ */

typedef struct fp8_case {
  const char *name;
  kvjit_dtype src, cache;
  kvjit_scale_kind scale;
  int64_t heads;        /* per head */
  int64_t batch;
  int64_t k_elems, v_elems; /* v_elems 0: K only */
  int64_t k_pad, v_pad, kc_pad, vc_pad; /* bytes added to each row stride */
  unsigned kc_off;      /* misalignment of the K cache base, bytes */
  int split;
  kvjit_pdl_mode pdl;
  kvjit_index_type index_type;
  int bad_indices;      /* mix padding, skip-slot and past-the-end ids in */
  int soft;             /* launch the integer conversion compiled for this GPU (internal path) */
  const void *k_data, *v_data;       /* optional host rows (batch x elems of src); else random */
  const float *k_scales, *v_scales;  /* optional (1 or heads values); else random */
} fp8_case;

static int elem_bytes(kvjit_dtype d) { return d == KVJIT_DTYPE_F32 ? 4 : 2; }

static float to_float(kvjit_dtype d, const unsigned char *p) {
  if (d == KVJIT_DTYPE_F32) {
    float f;
    memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, p, 2);
  return d == KVJIT_DTYPE_F16 ? fp8_ref_f16_to_float(h) : fp8_ref_bf16_to_float(h);
}

/* Random source bits, weighted toward magnitudes fp8 can hold but covering every exponent. */
static void random_values(kvjit_dtype d, unsigned char *out, int64_t count) {
  for (int64_t i = 0; i < count; i++) {
    uint64_t r = gpu_rand(&rng);
    int wild = (r & 31) == 0; /* 1 in 32: any exponent (NaN, Inf, zero, subnormal, huge) */
    uint32_t sign = (uint32_t)(r >> 5) & 1;
    if (d == KVJIT_DTYPE_F16) {
      uint32_t exp = wild ? (uint32_t)(r >> 6) % 32 : 1 + (uint32_t)(r >> 6) % 30;
      uint16_t h = (uint16_t)(sign << 15 | exp << 10 | ((uint32_t)(r >> 16) & 0x3ff));
      memcpy(out + 2 * i, &h, 2);
    } else {
      /* fp32 exponents 2^-30 .. 2^20 around the fp8 ranges, or anything. */
      uint32_t exp = wild ? (uint32_t)(r >> 6) % 256 : 97 + (uint32_t)(r >> 6) % 51;
      uint32_t bits = sign << 31 | exp << 23 | ((uint32_t)(r >> 16) & 0x7fffff);
      if (d == KVJIT_DTYPE_F32) {
        memcpy(out + 4 * i, &bits, 4);
      } else {
        uint16_t h = (uint16_t)(bits >> 16);
        memcpy(out + 2 * i, &h, 2);
      }
    }
  }
}

/* Scales in [2^-7, 2^7) with a random mantissa (so that the division rounds). */
static float random_scale(void) {
  uint64_t r = gpu_rand(&rng);
  return ldexpf(1.0f + (float)(r & 0xffffff) / 16777216.0f, (int)((r >> 24) % 15) - 7);
}

__attribute__((format(printf, 2, 3))) static int fail_case(const fp8_case *c, const char *fmt, ...);
static int fail_case(const fp8_case *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL [%s: src %s cache %s scale %d heads %lld batch %lld k %lld v %lld split %d soft %d]: ", c->name,
          kvjit_dtype_name(c->src), kvjit_dtype_name(c->cache), (int)c->scale, (long long)c->heads,
          (long long)c->batch, (long long)c->k_elems, (long long)c->v_elems, c->split, c->soft);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  totals.failures++;
  return 1;
}

/* The quantizing plan for this GPU with the integer conversion forced, launched by hand. */
static kvjit_status launch_soft(const kvjit_store_kv_args *a, const fp8_case *c) {
  kvjit_store_kv_quant q = {a->dtype, a->cache_dtype, a->scale_kind, a->num_heads};
  kvjit_store_kv_plan plan;
  (void)c;
  kvjit_status st = kvjit_store_kv_plan_make_quant(&plan, env.sm, a->k_row_bytes, a->v ? a->v_row_bytes : 0, 16,
                                                   a->index_type, a->pdl, a->split,
                                                   kvjit_store_kv_batch_class(a->batch), &q);
  if (st != KVJIT_OK) return st;
  plan.fp8_soft = 1;
  kvjit_op_program prog;
  if ((st = kvjit_store_kv_program(&plan, &prog)) != KVJIT_OK) return st;
  kvjit_program *program = NULL;
  st = kvjit_program_get(ctx, &program, NULL, &prog.desc);
  if (st != KVJIT_OK) return st;
  kvjit_kernel *kernel = NULL;
  st = kvjit_program_kernel(program, &kernel, prog.kernel, 0);
  if (st != KVJIT_OK) return st;
  kvjit_store_kv_params p = {a->k, a->v, a->k_cache, a->v_cache, a->indices, a->k_stride, a->v_stride,
                             a->k_cache_stride, a->v_cache_stride, a->index_stride, a->batch, a->num_slots,
                             a->skip_slot, a->k_scale, a->v_scale};
  void *args[] = {&p};
  kvjit_launch_config cfg = KVJIT_LAUNCH_CONFIG_INIT;
  cfg.grid[0] = (unsigned)kvjit_store_kv_blocks(&plan, a->batch);
  cfg.block[0] = (unsigned)plan.block;
  cfg.programmatic_serialization = plan.pdl;
  return kvjit_launch(kernel, &cfg, args);
}

typedef struct side {
  int64_t elems, row, stride, cache_row, cache_stride, num_scales;
  size_t bytes, cache_bytes;
  unsigned char *src, *cache, *want;
  float *scales;
  CUdeviceptr d_src, d_cache, d_scales;
} side;

static void side_init(side *s, const fp8_case *c, int64_t elems, int64_t pad, int64_t cpad, const void *data,
                      const float *scales, int64_t num_slots) {
  memset(s, 0, sizeof *s);
  if (elems == 0) return;
  int eb = elem_bytes(c->src);
  s->elems = elems;
  s->row = elems * eb;
  s->stride = s->row + pad;
  s->cache_row = elems;
  s->cache_stride = s->cache_row + cpad;
  s->bytes = (size_t)(c->batch * s->stride);
  s->cache_bytes = (size_t)(num_slots * s->cache_stride);
  s->src = xmalloc(s->bytes);
  gpu_fill_random(s->src, s->bytes, &rng); /* the gaps between rows too */
  for (int64_t i = 0; i < c->batch; i++) {
    if (data != NULL) {
      memcpy(s->src + i * s->stride, (const unsigned char *)data + i * s->row, (size_t)s->row);
    } else {
      random_values(c->src, s->src + i * s->stride, elems);
    }
  }
  s->cache = xmalloc(s->cache_bytes);
  gpu_fill_random(s->cache, s->cache_bytes, &rng);
  s->want = xmalloc(s->cache_bytes);
  memcpy(s->want, s->cache, s->cache_bytes);
  s->num_scales = c->scale == KVJIT_SCALE_PER_HEAD ? c->heads : 1;
  s->scales = xmalloc(sizeof(float) * (size_t)s->num_scales);
  for (int64_t h = 0; h < s->num_scales; h++) s->scales[h] = scales ? scales[h] : random_scale();
  s->d_src = gpu_alloc(s->bytes);
  s->d_cache = gpu_alloc(s->cache_bytes + 16);
  s->d_scales = gpu_alloc(sizeof(float) * (size_t)s->num_scales);
  gpu_upload(s->d_src, s->src, s->bytes);
  gpu_upload(s->d_scales, s->scales, sizeof(float) * (size_t)s->num_scales);
}

static void side_free(side *s) {
  free(s->src);
  free(s->cache);
  free(s->want);
  free(s->scales);
  gpu_free(s->d_src);
  gpu_free(s->d_cache);
  gpu_free(s->d_scales);
}

/* The host model of one row: cache row @p slot gets source row @p item quantized. */
static void model_row(const fp8_case *c, side *s, int64_t item, int64_t slot) {
  int eb = elem_bytes(c->src);
  int64_t head_elems = c->scale == KVJIT_SCALE_PER_HEAD ? s->elems / c->heads : s->elems;
  for (int64_t j = 0; j < s->elems; j++) {
    float x = to_float(c->src, s->src + item * s->stride + j * eb);
    if (c->scale != KVJIT_SCALE_NONE) x = x / s->scales[j / head_elems];
    s->want[slot * s->cache_stride + j] = fp8_ref_encode(x, c->cache == KVJIT_DTYPE_FP8_E4M3);
  }
}

static int compare_side(const fp8_case *c, const char *name, side *s, unsigned off) {
  if (s->elems == 0) return 0;
  unsigned char *got = xmalloc(s->cache_bytes);
  gpu_download(got, s->d_cache + off, s->cache_bytes);
  totals.bytes += s->cache_bytes;
  int rc = 0;
  if (memcmp(got, s->want, s->cache_bytes) != 0) {
    size_t i = 0;
    while (got[i] == s->want[i]) i++;
    int64_t row = (int64_t)(i / (size_t)s->cache_stride), col = (int64_t)(i % (size_t)s->cache_stride);
    rc = fail_case(c, "%s cache byte %zu (slot %lld, element %lld) is 0x%02x, expected 0x%02x", name, i, (long long)row,
                   (long long)col, got[i], s->want[i]);
  }
  free(got);
  return rc;
}

/* Run one case through the public API (or the forced integer path); 0 when every byte matches. */
static int run_case(const fp8_case *c) {
  int64_t num_slots = c->batch + c->batch / 4 + 3;
  side k, v;
  side_init(&k, c, c->k_elems, c->k_pad, c->kc_pad, c->k_data, c->k_scales, num_slots);
  side_init(&v, c, c->v_elems, c->v_pad, c->vc_pad, c->v_data, c->v_scales, num_slots);
  /* Poisoned caches, written at an offset when the base is misaligned. */
  gpu_upload(k.d_cache + c->kc_off, k.cache, k.cache_bytes);
  if (v.elems) gpu_upload(v.d_cache, v.cache, v.cache_bytes);
  /* Slots: a random permutation's head; with bad ids, some padding / skip / past the end. */
  int64_t *perm = xmalloc(sizeof(int64_t) * (size_t)num_slots);
  for (int64_t i = 0; i < num_slots; i++) perm[i] = i;
  for (int64_t i = num_slots - 1; i > 0; i--) {
    int64_t j = (int64_t)(gpu_rand(&rng) % (uint64_t)(i + 1));
    int64_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  int64_t skip_slot = c->bad_indices ? perm[num_slots - 1] : KVJIT_NO_SKIP_SLOT;
  uint64_t expected_oob = 0;
  int64_t *slots = xmalloc(sizeof(int64_t) * (size_t)c->batch);
  for (int64_t i = 0; i < c->batch; i++) {
    slots[i] = perm[i];
    if (c->bad_indices) {
      switch (gpu_rand(&rng) % 6) {
      case 0: slots[i] = -1 - (int64_t)(gpu_rand(&rng) % 5); break;
      case 1: slots[i] = skip_slot; break;
      case 2: slots[i] = num_slots + (int64_t)(gpu_rand(&rng) % 1000); expected_oob++; break;
      default: break;
      }
    }
    if (slots[i] >= 0 && slots[i] < num_slots && slots[i] != skip_slot) {
      model_row(c, &k, i, slots[i]);
      if (v.elems) model_row(c, &v, i, slots[i]);
    }
  }
  size_t idx_bytes = c->index_type == KVJIT_INDEX_INT32 ? 4 : 8;
  unsigned char *idx = xmalloc(idx_bytes * (size_t)c->batch);
  for (int64_t i = 0; i < c->batch; i++) {
    if (idx_bytes == 4) {
      int32_t s32 = (int32_t)slots[i];
      memcpy(idx + 4 * i, &s32, 4);
    } else {
      memcpy(idx + 8 * i, &slots[i], 8);
    }
  }
  CUdeviceptr d_idx = gpu_alloc(idx_bytes * (size_t)c->batch);
  gpu_upload(d_idx, idx, idx_bytes * (size_t)c->batch);

  kvjit_store_kv_args a = KVJIT_STORE_KV_ARGS_INIT;
  a.k = (const void *)(uintptr_t)k.d_src;
  a.k_cache = (void *)(uintptr_t)(k.d_cache + c->kc_off);
  if (v.elems) {
    a.v = (const void *)(uintptr_t)v.d_src;
    a.v_cache = (void *)(uintptr_t)v.d_cache;
    a.v_row_bytes = v.row;
    a.v_stride = v.stride;
    a.v_cache_stride = v.cache_stride;
  }
  a.indices = (const void *)(uintptr_t)d_idx;
  a.index_type = c->index_type;
  a.batch = c->batch;
  a.k_row_bytes = k.row;
  a.k_stride = k.stride;
  a.k_cache_stride = k.cache_stride;
  a.num_slots = num_slots;
  a.skip_slot = skip_slot;
  a.split = c->split;
  a.pdl = c->pdl;
  a.dtype = c->src;
  a.cache_dtype = c->cache;
  a.scale_kind = c->scale;
  a.num_heads = c->scale == KVJIT_SCALE_PER_HEAD ? c->heads : 0;
  if (c->scale != KVJIT_SCALE_NONE) {
    a.k_scale = (const float *)(uintptr_t)k.d_scales;
    a.v_scale = v.elems ? (const float *)(uintptr_t)v.d_scales : NULL;
  }
  uint64_t oob = 0;
  assert_int_equal(kvjit_store_kv_cache_oob_count(ctx, &oob, 1), KVJIT_OK);
  kvjit_status st = c->soft ? launch_soft(&a, c) : kvjit_store_kv_cache(ctx, &a);
  int rc = 0;
  if (st != KVJIT_OK) {
    rc = fail_case(c, "store: %s: %s", kvjit_status_name(st), kvjit_last_error());
  } else {
    gpu_sync();
    totals.launches++;
    rc |= compare_side(c, "K", &k, c->kc_off);
    rc |= compare_side(c, "V", &v, 0);
    assert_int_equal(kvjit_store_kv_cache_oob_count(ctx, &oob, 1), KVJIT_OK);
    /* The forced integer path is a program of its own, outside the op's table: its counter is
     * not the op's to read (the same kernel text counts; the cvt path checks the counter). */
    if (!c->soft && oob != expected_oob) {
      rc |= fail_case(c, "oob counter %llu, expected %llu", (unsigned long long)oob, (unsigned long long)expected_oob);
    }
  }
  totals.cases++;
  totals.values += (uint64_t)(c->batch * (c->k_elems + c->v_elems));
  free(perm);
  free(slots);
  free(idx);
  gpu_free(d_idx);
  side_free(&k);
  side_free(&v);
  return rc;
}

static fp8_case base(const char *name, kvjit_dtype src, kvjit_dtype cache, kvjit_scale_kind scale) {
  fp8_case c;
  memset(&c, 0, sizeof c);
  c.name = name;
  c.src = src;
  c.cache = cache;
  c.scale = scale;
  c.heads = 8;
  c.batch = 64;
  c.k_elems = c.v_elems = 1024;
  c.pdl = KVJIT_PDL_AUTO;
  c.index_type = KVJIT_INDEX_INT64;
  return c;
}

static const kvjit_dtype fp8_kinds[] = {KVJIT_DTYPE_FP8_E4M3, KVJIT_DTYPE_FP8_E5M2};
static const kvjit_scale_kind scale_kinds[] = {KVJIT_SCALE_NONE, KVJIT_SCALE_PER_TENSOR, KVJIT_SCALE_PER_HEAD};

/* ---- tests --------------------------------------------------------------------------------- */

/* All 65536 f16 patterns as the K rows (64 rows x 1024), in both fp8 kinds and every scale kind,
 * through the cvt path and the integer path. */
static void test_every_f16_pattern(void **state) {
  (void)state;
  uint16_t *all = xmalloc(sizeof(uint16_t) * 65536);
  for (uint32_t i = 0; i < 65536; i++) all[i] = (uint16_t)i;
  int failed = 0;
  for (int soft = 0; soft <= 1; soft++) {
    for (size_t f = 0; f < 2; f++) {
      for (size_t s = 0; s < 3; s++) {
        fp8_case c = base("every f16", KVJIT_DTYPE_F16, fp8_kinds[f], scale_kinds[s]);
        c.k_data = all;
        c.soft = soft;
        failed |= run_case(&c);
      }
    }
  }
  free(all);
  assert_int_equal(failed, 0);
}

/* Crafted f32 values: each fp8 value of the kind, the midpoint to its neighbour (a tie), one ulp
 * either side of it, the saturation threshold and past it, Inf, NaN, zeros, fp32 subnormals. */
static int64_t edge_values(float *out, int e4m3) {
  int64_t n = 0;
  uint8_t max_code = e4m3 ? 0x7e : 0x7b;
  for (unsigned code = 0; code <= max_code; code++) {
    float v = (float)fp8_ref_decode((uint8_t)code, e4m3);
    float next = (float)fp8_ref_decode((uint8_t)(code + 1), e4m3);
    if (code == max_code) next = v + (v - (float)fp8_ref_decode((uint8_t)(code - 1), e4m3)); /* would-be next */
    float mid = (float)(((double)v + (double)next) / 2.0);
    float vals[] = {v, mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
    for (int i = 0; i < 4; i++) {
      out[n++] = vals[i];
      out[n++] = -vals[i];
    }
  }
  float specials[] = {INFINITY, -INFINITY, NAN, -NAN, 0.0f, -0.0f, 0x1p-149f, -0x1p-130f, 0x1p-126f, 1e30f, -3e38f,
                      65504.0f, 65520.0f};
  for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) out[n++] = specials[i];
  return n;
}

static void test_edges_bf16_f32(void **state) {
  (void)state;
  int failed = 0;
  const int64_t row = 1024;
  float *vals = xmalloc(sizeof(float) * (size_t)(row * 8));
  for (size_t f = 0; f < 2; f++) {
    int e4m3 = fp8_kinds[f] == KVJIT_DTYPE_FP8_E4M3;
    int64_t n = edge_values(vals, e4m3);
    /* Tile the edge list over 8 rows of 1024 (wrapping), as f32 and as bf16 (truncated bits). */
    float *f32 = xmalloc(sizeof(float) * (size_t)(row * 8));
    uint16_t *b16 = xmalloc(sizeof(uint16_t) * (size_t)(row * 8));
    for (int64_t i = 0; i < row * 8; i++) {
      f32[i] = vals[i % n];
      uint32_t bits;
      memcpy(&bits, &f32[i], 4);
      b16[i] = (uint16_t)(bits >> 16);
    }
    /* No scale, a power of two (exact division keeps the ties), and a scale that rounds. */
    const float scales[] = {1.0f, 0.5f, 0.7f};
    for (int soft = 0; soft <= 1; soft++) {
      for (size_t s = 0; s < 3; s++) {
        for (int src = 0; src < 2; src++) {
          fp8_case c = base("edges", src ? KVJIT_DTYPE_F32 : KVJIT_DTYPE_BF16, fp8_kinds[f],
                            s == 0 ? KVJIT_SCALE_NONE : KVJIT_SCALE_PER_TENSOR);
          c.batch = 8;
          c.k_data = src ? (const void *)f32 : (const void *)b16;
          c.v_data = c.k_data;
          c.k_scales = c.v_scales = &scales[s];
          c.soft = soft;
          failed |= run_case(&c);
        }
      }
    }
    free(f32);
    free(b16);
  }
  free(vals);
  assert_int_equal(failed, 0);
}

/* Random patterns of every source dtype, every fp8 kind and scale kind, several batch sizes. */
static void test_random_matrix(void **state) {
  (void)state;
  const kvjit_dtype srcs[] = {KVJIT_DTYPE_F16, KVJIT_DTYPE_BF16, KVJIT_DTYPE_F32};
  const int64_t batches[] = {1, 7, 16, 129, 4097};
  const int64_t widths[] = {64, 128, 576, 1024};
  int failed = 0;
  for (size_t d = 0; d < 3; d++) {
    for (size_t f = 0; f < 2; f++) {
      for (size_t s = 0; s < 3; s++) {
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
          fp8_case c = base("random", srcs[d], fp8_kinds[f], scale_kinds[s]);
          c.batch = batches[b];
          c.k_elems = c.v_elems = widths[(b + s) % 4];
          c.heads = c.k_elems / 64 ? c.k_elems / 64 : 1;
          c.index_type = (b & 1) ? KVJIT_INDEX_INT32 : KVJIT_INDEX_INT64;
          c.pdl = (s & 1) ? KVJIT_PDL_OFF : KVJIT_PDL_AUTO;
          failed |= run_case(&c);
        }
      }
    }
  }
  assert_int_equal(failed, 0);
}

/* Everything else store_kv_cache does, quantizing. */
static void test_features(void **state) {
  (void)state;
  int failed = 0;
  fp8_case c;
  /* Padding, skip-slot and out-of-range ids, with the counter. */
  c = base("bad ids", KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_TENSOR);
  c.batch = 333;
  c.bad_indices = 1;
  failed |= run_case(&c);
  c.soft = 1;
  failed |= run_case(&c);
  /* K only (MLA: 576 elements, one head), per head. */
  c = base("K only", KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_HEAD);
  c.k_elems = 576;
  c.v_elems = 0;
  c.heads = 1;
  failed |= run_case(&c);
  /* Asymmetric rows (K 192, V 128 elements), per head with 4 heads each. */
  c = base("asymmetric", KVJIT_DTYPE_F16, KVJIT_DTYPE_FP8_E5M2, KVJIT_SCALE_PER_HEAD);
  c.k_elems = 192;
  c.v_elems = 128;
  c.heads = 4;
  failed |= run_case(&c);
  /* Strided sources and caches. */
  c = base("strides", KVJIT_DTYPE_F32, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_TENSOR);
  c.k_pad = 64;
  c.v_pad = 4;
  c.kc_pad = 3;
  c.vc_pad = 256;
  failed |= run_case(&c);
  /* A K cache base 1 byte off: one-element accesses. Heads of 24 elements (8 B of fp8 max). */
  c = base("misaligned cache", KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_HEAD);
  c.kc_off = 1;
  c.k_elems = c.v_elems = 192;
  c.heads = 8;
  failed |= run_case(&c);
  c.kc_off = 2;
  failed |= run_case(&c);
  /* Explicit splits, and the round-by-round path (one slice of 16 KiB f32 per row). */
  const int splits[] = {1, 2, 4, 8, 64};
  for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
    c = base("split", KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E5M2, KVJIT_SCALE_PER_HEAD);
    c.split = splits[i];
    c.batch = 100;
    failed |= run_case(&c);
  }
  c = base("rounds", KVJIT_DTYPE_F32, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_HEAD);
  c.k_elems = c.v_elems = 4096;
  c.heads = 32;
  c.split = 1;
  c.batch = 33;
  failed |= run_case(&c);
  c.scale = KVJIT_SCALE_PER_TENSOR;
  failed |= run_case(&c);
  c.soft = 1;
  failed |= run_case(&c);
  assert_int_equal(failed, 0);
}

/* A captured graph reads the scales at replay: new values, no re-capture. */
static void test_graph_sees_new_scales(void **state) {
  (void)state;
  const int64_t batch = 48, elems = 256, slots = 64;
  const size_t src_bytes = (size_t)(batch * elems * 2), cache_bytes = (size_t)(slots * elems);
  uint16_t *k = xmalloc(src_bytes);
  random_values(KVJIT_DTYPE_BF16, (unsigned char *)k, batch * elems);
  int64_t idx[48];
  for (int64_t i = 0; i < batch; i++) idx[i] = (i * 7 + 3) % slots; /* distinct: 7 is prime to 64 */
  CUdeviceptr d_k = gpu_alloc(src_bytes), d_kc = gpu_alloc(cache_bytes), d_idx = gpu_alloc(sizeof idx),
              d_scale = gpu_alloc(sizeof(float));
  gpu_upload(d_k, k, src_bytes);
  gpu_upload(d_idx, idx, sizeof idx);
  CUstream stream;
  GPU_CU(env.drv->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  kvjit_store_kv_args a = KVJIT_STORE_KV_ARGS_INIT;
  a.k = (const void *)(uintptr_t)d_k;
  a.k_cache = (void *)(uintptr_t)d_kc;
  a.indices = (const void *)(uintptr_t)d_idx;
  a.batch = batch;
  a.k_row_bytes = elems * 2;
  a.num_slots = slots;
  a.stream = stream;
  a.dtype = KVJIT_DTYPE_BF16;
  a.cache_dtype = KVJIT_DTYPE_FP8_E4M3;
  a.scale_kind = KVJIT_SCALE_PER_TENSOR;
  a.k_scale = (const float *)(uintptr_t)d_scale;
  assert_int_equal(kvjit_store_kv_cache_prepare(ctx, &a), KVJIT_OK);
  CUgraph graph = NULL;
  CUgraphExec exec = NULL;
  GPU_CU(env.drv->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  kvjit_status st = kvjit_store_kv_cache(ctx, &a);
  GPU_CU(env.drv->cuStreamEndCapture(stream, &graph));
  assert_int_equal(st, KVJIT_OK);
  GPU_CU(env.drv->cuGraphInstantiateWithFlags(&exec, graph, 0));
  unsigned char *got = xmalloc(cache_bytes);
  const float scales[] = {1.0f, 0.013f, 37.5f};
  int failed = 0;
  for (int r = 0; r < 3; r++) {
    gpu_upload(d_scale, &scales[r], sizeof(float));
    GPU_CU(env.drv->cuGraphLaunch(exec, stream));
    GPU_CU(env.drv->cuStreamSynchronize(stream));
    gpu_download(got, d_kc, cache_bytes);
    totals.launches++;
    for (int64_t i = 0; i < batch && !failed; i++) {
      for (int64_t j = 0; j < elems; j++) {
        uint8_t want = fp8_ref_encode(fp8_ref_bf16_to_float(k[i * elems + j]) / scales[r], 1);
        if (got[idx[i] * elems + j] != want) {
          fprintf(stderr, "FAIL graph replay %d (scale %g): row %lld element %lld is 0x%02x, expected 0x%02x\n", r,
                  (double)scales[r], (long long)i, (long long)j, got[idx[i] * elems + j], want);
          failed = 1;
          totals.failures++;
          break;
        }
      }
    }
  }
  totals.cases++;
  GPU_CU(env.drv->cuGraphExecDestroy(exec));
  GPU_CU(env.drv->cuGraphDestroy(graph));
  GPU_CU(env.drv->cuStreamDestroy(stream));
  gpu_free(d_k);
  gpu_free(d_kc);
  gpu_free(d_idx);
  gpu_free(d_scale);
  free(k);
  free(got);
  assert_int_equal(failed, 0);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int rc = gpu_setup(&env);
  if (rc != 0) return rc;
  if (gpu_context_create(&ctx, cache_dir, sizeof cache_dir, "fp8", NULL) != 0) return 1;
  printf("device 0: %s, sm_%d\n", env.name, env.sm);
  double t0 = now_s();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_f16_pattern), cmocka_unit_test(test_edges_bf16_f32),
      cmocka_unit_test(test_random_matrix),     cmocka_unit_test(test_features),
      cmocka_unit_test(test_graph_sees_new_scales),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  kvjit_stats stats = KVJIT_STATS_INIT;
  kvjit_context_stats(ctx, &stats);
  printf("gpu_fp8: sm_%d, %llu cases, %llu launches, %llu values quantized, %.1f MB compared, %llu kernels compiled, "
         "%llu failures, %d failed tests, %.1f s\n",
         env.sm, (unsigned long long)totals.cases, (unsigned long long)totals.launches,
         (unsigned long long)totals.values, (double)totals.bytes / 1e6, (unsigned long long)stats.compiles,
         (unsigned long long)totals.failures, failed, now_s() - t0);
  gpu_context_destroy(ctx, cache_dir);
  gpu_teardown(&env);
  return failed ? 1 : 0;
}
