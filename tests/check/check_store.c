/*
 * store_kv_cache for the check harness: the input maker (random rows, poisoned caches, distinct
 * random slots with padding, skip-slot and past-the-end ids mixed in), the host reference (a row
 * copy, or tests/fp8_ref.h's conversion after an fp32 division for a quantizing store) and the
 * public call. The case space is check_store_cases.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_space.h"
#include "check_store.h"
#include "fp8_ref.h"
#include "test_layouts.h"

enum { B_K, B_V, B_KC, B_VC, B_IDX, B_KS, B_VS, B_AK, B_AV, B_IDX2 };

static int quantizing(const store_case *c) {
  return c->cache_dtype == KVJIT_DTYPE_FP8_E4M3 || c->cache_dtype == KVJIT_DTYPE_FP8_E5M2;
}
static int elem_bytes(const store_case *c) { return !quantizing(c) ? 1 : c->dtype == KVJIT_DTYPE_F32 ? 4 : 2; }
/* A laid-out case's caches (tests/test_layouts.h), in cache elements (fp8 when quantizing). */
static void case_layout(const store_case *c, kvjit_test_layout *t) {
  const kvjit_test_layout_spec spec = {"case", (kvjit_test_layout_kind)(c->layout - 1), c->heads_l, c->head_dim,
                                       c->block_size, quantizing(c) ? 1 : c->dtype == KVJIT_DTYPE_F32 ? 4 : 2};
  kvjit_test_layout_make(t, &spec);
}

static int64_t num_slots(const store_case *c) {
  int64_t n = c->batch + (c->extra_slots < 0 ? c->batch / 4 + 3 : c->extra_slots);
  if (n < 1) n = 1;
  if (c->layout) n = (n + c->block_size - 1) / c->block_size * c->block_size; /* whole pages */
  return n;
}
/* Fixed by the case (a captured graph keeps it), one of the real slots. */
static int64_t skip_slot(const store_case *c) { return c->use_skip ? (num_slots(c) * 2) / 3 : KVJIT_NO_SKIP_SLOT; }
static int64_t cache_row(const store_case *c, int64_t row) { return row / elem_bytes(c); }
static size_t id_bytes(const store_case *c) { return c->index_type == KVJIT_INDEX_INT32 ? 4 : 8; }
static int64_t num_scales(const store_case *c) { return c->scale == KVJIT_SCALE_PER_HEAD ? c->heads : 1; }

static const char *dtype_word(kvjit_dtype d) {
  static const char *const words[] = {"bytes", "f16", "bf16", "f32", "fp8_e4m3", "fp8_e5m2"};
  return (unsigned)d < sizeof words / sizeof words[0] ? words[d] : "?";
}

static void describe(const void *cv, char *out, size_t cap) {
  const store_case *c = cv;
  int n = snprintf(out, cap,
                   "%s batch=%lld k_row=%lld v_row=%lld pads=%lld/%lld/%lld/%lld index=%s stride=%lld slots=%lld "
                   "split=%d offs=%u/%u/%u/%u/%u bad=%d skip=%d",
                   c->group, (long long)c->batch, (long long)c->k_row, (long long)c->v_row, (long long)c->k_pad,
                   (long long)c->v_pad, (long long)c->kc_pad, (long long)c->vc_pad,
                   c->index_type == KVJIT_INDEX_INT32 ? "int32" : "int64", (long long)c->index_stride,
                   (long long)num_slots(c), c->split, c->k_off, c->v_off, c->kc_off, c->vc_off, c->idx_off,
                   c->bad_indices, c->use_skip);
  if (quantizing(c) && n > 0 && (size_t)n < cap) {
    n += snprintf(out + n, cap - (size_t)n, " dtype=%s cache=%s scale=%d heads=%lld fixed_scale=%g data=%d soft=%d",
                  dtype_word(c->dtype), dtype_word(c->cache_dtype), (int)c->scale, (long long)c->heads,
                  (double)c->fixed_scale, (int)c->data, c->soft);
  }
  if (c->layout && n > 0 && (size_t)n < cap) {
    snprintf(out + n, cap - (size_t)n, " layout=%s heads=%lld head_dim=%lld block_size=%lld graph=%d",
             kvjit_test_layout_kind_name((kvjit_test_layout_kind)(c->layout - 1)), (long long)c->heads_l,
             (long long)c->head_dim, (long long)c->block_size, c->common.graph);
  }
}

/* The widest access (<= 16 B) every pointer and stride allows: what the call will key on. */
static int widest(const int64_t *parts, size_t n) {
  int vec = 16;
  for (size_t i = 0; i < n; i++)
    while (vec > 1 && parts[i] % vec != 0) vec /= 2;
  return vec;
}

/* The widest access (<= 16 source bytes) every pointer and stride allows: what the call keys on
 * (store_kv_args.c). Quantizing, an access of vec source bytes writes vec / element-size cache bytes. */
static int vector_bytes(const store_case *c) {
  const int64_t src[] = {c->k_off, c->v_off, c->k_row, c->v_row, c->k_row + c->k_pad, c->v_row + c->v_pad};
  const int64_t kcr = cache_row(c, c->k_row), vcr = cache_row(c, c->v_row);
  const int64_t cache[] = {c->kc_off, c->vc_off, kcr, vcr, kcr + c->kc_pad, vcr + c->vc_pad};
  const int src_vec = widest(src, 6), cache_vec = widest(cache, 6) * elem_bytes(c);
  return src_vec < cache_vec ? src_vec : cache_vec;
}

/* The case's variant on @p sm with @p pdl (kvjit_variant_*), unchecked. */
static int case_variant(const store_case *c, int sm, kvjit_pdl_mode pdl, kvjit_variant *out) {
  if (kvjit_variant_init(out, kvjit_op_find("store_kv_cache")) != KVJIT_OK) return 0;
  variant_set(out, "arch", sm);
  variant_set(out, "k_row_bytes", c->k_row);
  variant_set(out, "v_row_bytes", c->v_row);
  variant_set(out, "index", c->index_type);
  variant_set(out, "pdl", pdl);
  variant_set(out, "split", c->split);
  variant_set(out, "vec", vector_bytes(c));
  variant_set(out, "dtype", c->dtype);
  variant_set(out, "cache_dtype", c->cache_dtype);
  variant_set(out, "scale", c->scale);
  variant_set(out, "num_heads", c->scale == KVJIT_SCALE_PER_HEAD ? c->heads : 0);
  return 1;
}

static int manifest_line(const void *cv, int sm, kvjit_pdl_mode pdl, char *out, size_t capacity) {
  const store_case *c = cv;
  if (quantizing(c) || c->batch == 0 || c->layout) return 0; /* compiled on first use */
  kvjit_variant v;
  return case_variant(c, sm, pdl, &v) && kvjit_variant_format(&v, out, capacity) == KVJIT_OK;
}

int store_case_variant(const void *cv, kvjit_variant *out) {
  const store_case *c = cv;
  return case_variant(c, 0, c->common.pdl, out) && kvjit_variant_check(out) == KVJIT_OK;
}

static void layout(const void *cv, check_world *w) {
  const store_case *c = cv;
  int64_t slots = num_slots(c), ks = c->k_row + c->k_pad, vs = c->v_row + c->v_pad;
  int64_t kcs = cache_row(c, c->k_row) + c->kc_pad, vcs = cache_row(c, c->v_row) + c->vc_pad;
  for (int i = 0; i < 16; i++) w->ids[i] = -1;
  const int64_t items = c->batch * w->sets; /* inputs and ids of every set */
  w->ids[B_K] = check_buf_add(w, "k", CHECK_DEVICE, (size_t)(items * ks), c->k_off, ks, 0);
  if (c->v_row > 0) w->ids[B_V] = check_buf_add(w, "v", CHECK_DEVICE, (size_t)(items * vs), c->v_off, vs, 0);
  if (c->chain) { /* store 1: k, v -> A; store 2: A -> B (k_cache, v_cache) */
    w->ids[B_AK] = check_buf_add(w, "A.k_cache", CHECK_DEVICE, (size_t)(slots * c->k_row), 0, c->k_row, 1);
    w->ids[B_AV] = check_buf_add(w, "A.v_cache", CHECK_DEVICE, (size_t)(slots * c->k_row), 0, c->k_row, 1);
    w->ids[B_IDX2] = check_buf_add(w, "indices2", CHECK_DEVICE, (size_t)c->batch * 8, 0, 0, 0);
  }
  if (c->layout) {
    /* Whole pages; K and V views of one cache (FlashAttention, MLA) share one buffer. */
    kvjit_test_layout t;
    case_layout(c, &t);
    w->layouts[0] = t.k;
    w->layouts[1] = t.v;
    w->layout_v_base = t.v_base;
    const size_t bytes = (size_t)(slots / c->block_size * t.page_bytes);
    w->ids[B_KC] = check_buf_add(w, t.one_cache ? "cache" : "k_cache", CHECK_DEVICE, bytes, c->kc_off, 0, 1);
    if (c->v_row > 0 && !t.one_cache) w->ids[B_VC] = check_buf_add(w, "v_cache", CHECK_DEVICE, bytes, c->vc_off, 0, 1);
  } else {
    w->ids[B_KC] = check_buf_add(w, "k_cache", CHECK_DEVICE, (size_t)(slots * kcs), c->kc_off, kcs, 1);
    if (c->v_row > 0) w->ids[B_VC] = check_buf_add(w, "v_cache", CHECK_DEVICE, (size_t)(slots * vcs), c->vc_off, vcs, 1);
  }
  check_buf_pool(w, w->ids[B_K], CHECK_STORE_INPUT_POOL); /* timing: the benchmarks' pools */
  check_buf_pool(w, w->ids[B_V], CHECK_STORE_INPUT_POOL);
  check_buf_pool(w, w->ids[B_KC], CHECK_STORE_CACHE_POOL);
  check_buf_pool(w, w->ids[B_VC], CHECK_STORE_CACHE_POOL);
  w->ids[B_IDX] =
      check_buf_add(w, "indices", CHECK_DEVICE, (size_t)(items * c->index_stride) * id_bytes(c), c->idx_off, 0, 0);
  if (quantizing(c)) {
    w->ids[B_KS] = check_buf_add(w, "k_scale", CHECK_DEVICE, sizeof(float) * (size_t)num_scales(c), 0, 0, 0);
    if (c->v_row > 0)
      w->ids[B_VS] = check_buf_add(w, "v_scale", CHECK_DEVICE, sizeof(float) * (size_t)num_scales(c), 0, 0, 0);
  }
}

/* ---- quantizing: values and the reference -------------------------------------------------------- */

/* Random source bits, weighted toward magnitudes fp8 can hold but covering every exponent. */
static void random_values(check_world *w, kvjit_dtype d, unsigned char *out, int64_t count) {
  for (int64_t i = 0; i < count; i++) {
    uint64_t r = check_rand(w);
    int wild = (r & 31) == 0; /* 1 in 32: any exponent (NaN, Inf, zero, subnormal, huge) */
    uint32_t sign = (uint32_t)(r >> 5) & 1;
    if (d == KVJIT_DTYPE_F16) {
      uint32_t exp = wild ? (uint32_t)(r >> 6) % 32 : 1 + (uint32_t)(r >> 6) % 30;
      uint16_t h = (uint16_t)(sign << 15 | exp << 10 | ((uint32_t)(r >> 16) & 0x3ff));
      memcpy(out + 2 * i, &h, 2);
    } else {
      uint32_t exp = wild ? (uint32_t)(r >> 6) % 256 : 97 + (uint32_t)(r >> 6) % 51; /* 2^-30 .. 2^20 */
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

/* Edge value @p i (wrapping): each fp8 value of the kind, the midpoint to its neighbour (a tie),
 * one ulp either side of it, each negated; then Inf, NaN, zeros, fp32 subnormals, huge values. */
static float edge_value(int64_t i, int e4m3) {
  uint8_t max_code = e4m3 ? 0x7e : 0x7b;
  int64_t per_code = 8, codes = (int64_t)max_code + 1;
  static const float specials[] = {INFINITY, -INFINITY, NAN,       -NAN,   0.0f,   -0.0f,   0x1p-149f,
                                   -0x1p-130f, 0x1p-126f, 1e30f, -3e38f, 65504.0f, 65520.0f};
  int64_t n = codes * per_code + (int64_t)(sizeof specials / sizeof specials[0]);
  i %= n;
  if (i >= codes * per_code) return specials[i - codes * per_code];
  unsigned code = (unsigned)(i / per_code);
  float v = (float)fp8_ref_decode((uint8_t)code, e4m3);
  float next = code == max_code ? v + (v - (float)fp8_ref_decode((uint8_t)(code - 1), e4m3))
                                : (float)fp8_ref_decode((uint8_t)(code + 1), e4m3);
  float mid = (float)(((double)v + (double)next) / 2.0);
  float vals[] = {v, mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
  float x = vals[(i % per_code) / 2];
  return (i % 2) ? -x : x;
}

static void source_row(check_world *w, const store_case *c, unsigned char *out, int64_t item, int64_t elems,
                       int is_k) {
  int e4m3 = c->cache_dtype == KVJIT_DTYPE_FP8_E4M3;
  if (c->data == STORE_DATA_ALL_F16 && is_k) {
    for (int64_t j = 0; j < elems; j++) {
      uint16_t h = (uint16_t)(item * elems + j);
      memcpy(out + 2 * j, &h, 2);
    }
  } else if (c->data == STORE_DATA_EDGES) {
    for (int64_t j = 0; j < elems; j++) {
      float f = edge_value(item * elems + j, e4m3);
      if (c->dtype == KVJIT_DTYPE_F32) {
        memcpy(out + 4 * j, &f, 4);
      } else {
        uint32_t bits;
        memcpy(&bits, &f, 4);
        uint16_t h = (uint16_t)(bits >> 16);
        memcpy(out + 2 * j, &h, 2);
      }
    }
  } else {
    random_values(w, c->dtype, out, elems);
  }
}

float check_store_source_value(kvjit_dtype d, const unsigned char *p) {
  if (d == KVJIT_DTYPE_F32) {
    float f;
    memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, p, 2);
  return d == KVJIT_DTYPE_F16 ? fp8_ref_f16_to_float(h) : fp8_ref_bf16_to_float(h);
}

/* A laid-out cache's row of slot @p slot gets @p row_bytes cache bytes @p bytes, each at its
 * place by the layout's definition. */
static void scatter_row(unsigned char *cache, const kvjit_layout *l, int64_t row_bytes, int64_t slot,
                        const unsigned char *bytes) {
  for (int64_t b = 0; b < row_bytes; b++) cache[kvjit_test_layout_offset(l, row_bytes, slot, b)] = bytes[b];
}

/* Cache row @p dst gets source row @p src: a copy, or each value quantized. */
static void reference_row(const store_case *c, unsigned char *dst, const unsigned char *src, int64_t row,
                          const float *scales) {
  if (!quantizing(c)) {
    memcpy(dst, src, (size_t)row);
    return;
  }
  int eb = elem_bytes(c);
  int64_t elems = row / eb, head_elems = c->scale == KVJIT_SCALE_PER_HEAD ? elems / c->heads : elems;
  for (int64_t j = 0; j < elems; j++) {
    float x = check_store_source_value(c->dtype, src + j * eb);
    if (c->scale != KVJIT_SCALE_NONE) x = x / scales[j / head_elems];
    dst[j] = fp8_ref_encode(x, c->cache_dtype == KVJIT_DTYPE_FP8_E4M3);
  }
}

/* Scales in [2^-7, 2^7) with a random mantissa (so that the division rounds), or the case's. */
static void fill_scales(check_world *w, const store_case *c, int id) {
  if (id < 0) return;
  float *s = (float *)(void *)w->bufs[id].init;
  for (int64_t h = 0; h < num_scales(c); h++) {
    uint64_t r = check_rand(w);
    s[h] = c->fixed_scale > 0 ? c->fixed_scale
                              : ldexpf(1.0f + (float)(r & 0xffffff) / 16777216.0f, (int)((r >> 24) % 15) - 7);
  }
}

/* ---- fill ----------------------------------------------------------------------------------------- */

static void fill_chain(const store_case *c, check_world *w) {
  int64_t slots = num_slots(c), row = c->k_row;
  int64_t *s1 = malloc(sizeof(int64_t) * (size_t)c->batch), *s2 = malloc(sizeof(int64_t) * (size_t)c->batch);
  check_distinct_slots(w, s1, c->batch, slots);
  check_distinct_slots(w, s2, c->batch, slots);
  check_write_ids(w->bufs[w->ids[B_IDX]].init, s1, c->batch, 1, KVJIT_INDEX_INT64);
  check_write_ids(w->bufs[w->ids[B_IDX2]].init, s2, c->batch, 1, KVJIT_INDEX_INT64);
  const int in[2] = {w->ids[B_K], w->ids[B_V]}, mid[2] = {w->ids[B_AK], w->ids[B_AV]},
            out[2] = {w->ids[B_KC], w->ids[B_VC]};
  for (int t = 0; t < 2; t++) {
    for (int64_t i = 0; i < c->batch; i++)
      memcpy(w->bufs[mid[t]].want + s1[i] * row, w->bufs[in[t]].init + i * row, (size_t)row);
    for (int64_t i = 0; i < c->batch; i++) /* store 2 reads A's first batch rows */
      memcpy(w->bufs[out[t]].want + s2[i] * row, w->bufs[mid[t]].want + i * row, (size_t)row);
  }
  w->rows = 2 * (uint64_t)c->batch;
  free(s1);
  free(s2);
}

/* The bench driver's world: random rows, and distinct random slots over every set (so that no
 * launch rewrites what the one before it wrote); no reference. */
static void fill_timing(const store_case *c, check_world *w) {
  int64_t items = c->batch * w->sets;
  int64_t *ids = malloc(sizeof(int64_t) * (size_t)(items > 0 ? items : 1));
  if (ids == NULL) abort();
  check_distinct_slots(w, ids, items, num_slots(c));
  check_write_ids(w->bufs[w->ids[B_IDX]].init, ids, items, c->index_stride, c->index_type);
  fill_scales(w, c, w->ids[B_KS]);
  fill_scales(w, c, w->ids[B_VS]);
  free(ids);
}

static void fill(const void *cv, check_world *w) {
  const store_case *c = cv;
  for (int i = 0; i < w->num_bufs; i++) check_buf_random(w, i); /* inputs, poison, index gaps (lures) */
  w->expected_oob = 0;
  w->rows = 0;
  if (w->timing) {
    fill_timing(c, w);
    return;
  }
  if (c->chain) {
    fill_chain(c, w);
    return;
  }
  const int64_t slots = num_slots(c), skip = skip_slot(c);
  const int has_v = c->v_row > 0;
  const int64_t row[2] = {c->k_row, c->v_row}, stride[2] = {c->k_row + c->k_pad, c->v_row + c->v_pad};
  const int64_t cstride[2] = {cache_row(c, c->k_row) + c->kc_pad, cache_row(c, c->v_row) + c->vc_pad};
  const int src[2] = {w->ids[B_K], w->ids[B_V]}, dst[2] = {w->ids[B_KC], w->ids[B_VC]},
            scl[2] = {w->ids[B_KS], w->ids[B_VS]};
  if (quantizing(c)) {
    for (int t = 0; t <= has_v; t++) {
      for (int64_t i = 0; i < c->batch; i++)
        source_row(w, c, w->bufs[src[t]].init + i * stride[t], i, row[t] / elem_bytes(c), t == 0);
      fill_scales(w, c, scl[t]);
    }
  }
  int64_t *ids = malloc(sizeof(int64_t) * (size_t)(c->batch > 0 ? c->batch : 1));
  kvjit_test_layout lt;
  unsigned char *flat = NULL;
  if (c->layout) {
    case_layout(c, &lt);
    flat = malloc((size_t)(c->k_row > c->v_row ? c->k_row : c->v_row));
    if (flat == NULL) abort();
  }
  check_distinct_slots(w, ids, c->batch, slots);
  for (int64_t i = 0; c->bad_indices && i < c->batch; i++) {
    switch (check_rand(w) % 6) {
    case 0: ids[i] = -1 - (int64_t)(check_rand(w) % 1000); break;
    case 1: ids[i] = slots + (int64_t)(check_rand(w) % 1000); break;
    case 2: if (c->use_skip) ids[i] = skip; break;
    default: break;
    }
  }
  check_write_ids(w->bufs[w->ids[B_IDX]].init, ids, c->batch, c->index_stride, c->index_type);
  for (int64_t i = 0; i < c->batch; i++) {
    int64_t s = ids[i];
    if (s < 0 || s == skip) continue;
    if (s >= slots) {
      w->expected_oob++;
      continue;
    }
    for (int t = 0; t <= has_v; t++) {
      const float *scales = scl[t] >= 0 ? (const float *)(const void *)w->bufs[scl[t]].init : NULL;
      if (c->layout) {
        /* The row as a flat cache would hold it, then each byte to its place in the layout. */
        const int to = t == 0 || lt.one_cache ? w->ids[B_KC] : w->ids[B_VC];
        reference_row(c, flat, w->bufs[src[t]].init + i * stride[t], row[t], scales);
        scatter_row(w->bufs[to].want + (t && lt.one_cache ? lt.v_base : 0), t ? &lt.v : &lt.k, cache_row(c, row[t]), s,
                    flat);
      } else {
        reference_row(c, w->bufs[dst[t]].want + s * cstride[t], w->bufs[src[t]].init + i * stride[t], row[t], scales);
      }
    }
    w->rows++;
  }
  /* The forced integer path is a program of its own, outside the op's table: its counter is not
   * the op's to read (the same kernel text counts; the cvt path checks the counter). */
  if (c->soft) w->expected_oob = CHECK_OOB_UNCHECKED;
  free(flat);
  free(ids);
}

/* ---- launch --------------------------------------------------------------------------------------- */

void check_store_args(const void *cv, const check_world *w, const check_launch *l, kvjit_store_kv_args *out) {
  const store_case *c = cv;
  kvjit_store_kv_args a = KVJIT_STORE_KV_ARGS_INIT;
  const int64_t set = w->sets > 1 ? l->step % w->sets : 0, first = set * c->batch; /* the set's first item */
  const int64_t first_in = c->hot_inputs ? 0 : first;                                /* the rows it reads */
  a.batch = c->batch;
  a.num_slots = num_slots(c);
  a.pdl = l->pdl;
  a.stream = l->stream;
  a.split = c->split;
  if (c->chain) {
    int second = l->step == 1;
    a.k = check_ptr(w, w->ids[second ? B_AK : B_K]);
    a.v = check_ptr(w, w->ids[second ? B_AV : B_V]);
    a.k_cache = check_ptr(w, w->ids[second ? B_KC : B_AK]);
    a.v_cache = check_ptr(w, w->ids[second ? B_VC : B_AV]);
    a.indices = check_ptr(w, w->ids[second ? B_IDX2 : B_IDX]);
    a.k_row_bytes = c->k_row;
  } else {
    a.k = (const char *)check_ptr(w, w->ids[B_K]) + first_in * (c->k_row + c->k_pad);
    a.k_cache = check_ptr(w, w->ids[B_KC]);
    a.indices = (const char *)check_ptr(w, w->ids[B_IDX]) + (size_t)(first * c->index_stride) * id_bytes(c);
    a.index_type = c->index_type;
    a.index_stride = c->index_stride;
    a.k_row_bytes = c->k_row;
    a.k_stride = c->k_row + c->k_pad;
    a.k_cache_stride = cache_row(c, c->k_row) + c->kc_pad;
    if (c->v_row > 0) {
      a.v = (const char *)check_ptr(w, w->ids[B_V]) + first_in * (c->v_row + c->v_pad);
      /* K and V views of one cache (a layout's v_base) have no V buffer of their own. */
      a.v_cache = w->ids[B_VC] >= 0 ? check_ptr(w, w->ids[B_VC])
                                    : (char *)check_ptr(w, w->ids[B_KC]) + w->layout_v_base;
      a.v_row_bytes = c->v_row;
      a.v_stride = c->v_row + c->v_pad;
      a.v_cache_stride = cache_row(c, c->v_row) + c->vc_pad;
    }
    a.skip_slot = skip_slot(c);
    if (c->layout) {
      /* The views of tests/test_layouts.h; they live as long as the world (w->layouts). */
      a.k_cache_stride = a.v_cache_stride = 0;
      a.k_cache_layout = &w->layouts[0];
      if (c->v_row > 0) a.v_cache_layout = &w->layouts[1];
    }
    if (quantizing(c)) {
      a.dtype = c->dtype;
      a.cache_dtype = c->cache_dtype;
      a.scale_kind = c->scale;
      a.num_heads = c->scale == KVJIT_SCALE_PER_HEAD ? c->heads : 0;
      if (c->scale != KVJIT_SCALE_NONE) {
        a.k_scale = check_ptr(w, w->ids[B_KS]);
        a.v_scale = c->v_row > 0 ? check_ptr(w, w->ids[B_VS]) : NULL;
      }
    }
  }
  *out = a;
}

static kvjit_status launch(kvjit_context *ctx, const void *cv, const check_world *w, const check_launch *l) {
  const store_case *c = cv;
  kvjit_store_kv_args a;
  check_store_args(c, w, l, &a);
  if (c->soft)
    return check_store_launch_soft ? check_store_launch_soft(ctx, &a, w->sm, l->prepare) : KVJIT_ERR_UNSUPPORTED;
  return l->prepare ? kvjit_store_kv_cache_prepare(ctx, &a) : kvjit_store_kv_cache(ctx, &a);
}

static void bench_cell(const void *cv, char *out, size_t capacity) {
  const store_case *c = cv;
  snprintf(out, capacity, "%lld,%lld,%s,%s,%s%s,%s,%s", (long long)c->k_row, (long long)c->batch,
           c->index_type == KVJIT_INDEX_INT32 ? "int32" : "int64", c->common.pdl == KVJIT_PDL_OFF ? "off" : "on",
           quantizing(c) ? "bf16>fp8_e4m3" : "bytes", c->scale == KVJIT_SCALE_PER_HEAD ? "/head" : "",
           c->hot_inputs ? "hot" : "dram",
           c->layout ? kvjit_test_layout_kind_name((kvjit_test_layout_kind)(c->layout - 1)) : "flat");
}

/* Each K and V row read once and written once (a quantized row is written at its cache size). */
static double bench_bytes(const void *cv) {
  const store_case *c = cv;
  return (double)c->batch * (double)(c->k_row + cache_row(c, c->k_row) + c->v_row + cache_row(c, c->v_row));
}

/* Inputs rotate through their pools and ids through 4 Mi slot ids (bench_store's). */
static int bench_sets(const void *cv, int launches) {
  const store_case *c = cv;
  int64_t in_fit = (int64_t)(CHECK_STORE_INPUT_POOL / (uint64_t)(c->batch * c->k_row));
  int64_t ids = num_slots(c) < ((int64_t)4 << 20) ? num_slots(c) : ((int64_t)4 << 20), id_fit = ids / c->batch;
  int64_t sets = in_fit < id_fit ? in_fit : id_fit;
  return sets < 1 ? 1 : sets > launches ? launches : (int)sets;
}

/* bench_fp8's cells (flat, quantizing) had at most 256 launches per graph, bench_store's 320. A
 * graph's rows are what one replay leaves in L2 for the next: at 2048 B x 16 tokens, 256 launches
 * read and write 24 MiB, 320 launches 30 MiB, and the 50 MiB L2 of an H200 holds less of them
 * (one run, 2026-12-02, buffers sized to the rows: kvjit 0.87 us per launch at 256, 1.04 at 320;
 * its plain bf16 peer 0.76, 0.91). The cell sits on that edge, where the placement of its rows
 * moves it too (check_store.h: CHECK_STORE_*_POOL). */
static int bench_max_launches(const void *cv) {
  const store_case *c = cv;
  return quantizing(c) && !c->layout ? 256 : 320;
}

/* bench_store's host-cost cells: a decode store of 1024 B rows (its default) and of 128 B rows
 * (what it timed with --rows 128), int64 ids, PDL on and off. */
static int bench_host_cost(const void *cv) {
  const store_case *c = cv;
  return !quantizing(c) && !c->hot_inputs && (c->k_row == 128 || c->k_row == 1024) && c->batch == 1 &&
         c->index_type == KVJIT_INDEX_INT64;
}

static void *bench_args(const void *c, const check_world *w, const check_launch *l) {
  kvjit_store_kv_args *a = malloc(sizeof *a);
  if (a == NULL) abort();
  check_store_args(c, w, l, a);
  return a;
}

static kvjit_status bench_call(kvjit_context *ctx, const void *args) { return kvjit_store_kv_cache(ctx, args); }

const check_op check_store_op = {
    .name = "store_kv_cache",
    .case_size = sizeof(store_case),
    .count = store_case_count,
    .get = store_case_get,
    .describe = describe,
    .manifest_line = manifest_line,
    .layout = layout,
    .fill = fill,
    .launch = launch,
    .bench_count = store_bench_count,
    .bench_get = store_bench_get,
    .bench_columns = "row_bytes,batch,index,pdl,dtype,inputs,layout",
    .bench_cell = bench_cell,
    .bench_bytes = bench_bytes,
    .bench_sets = bench_sets,
    .bench_max_launches = bench_max_launches,
    .bench_host_cost = bench_host_cost,
    .bench_args = bench_args,
    .bench_call = bench_call,
    .space = store_space,
    .from_variant = store_case_from_variant,
    .to_variant = store_case_variant,
};
