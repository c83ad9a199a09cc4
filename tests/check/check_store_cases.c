/*
 * store_kv_cache's case space: every case the old tests/test_gpu_store.c and test_gpu_fp8.c ran, as
 * groups of a table. Plain copies: the reference's 30 batch sizes x row widths 128..4096 B (the
 * 96/98/100-element tails of 2- and 4-byte elements) x every split whose slices are >= 16 B plus
 * automatic x int32/int64 x PDL on/off; asymmetric rows, K only, odd rows, strides, misaligned
 * bases, bad ids with the counter, batch 0, a chain of two stores. Quantizing: all 65536 f16
 * patterns, the fp8 edges from bf16 and f32, random values of every dtype x fp8 kind x scale kind,
 * the features (bad ids, K only, asymmetric, strides, misaligned caches, splits, the round path)
 * and a graph that reads new scales at replay; the integer conversion path as well. Then the
 * variant space from the op's field table (check_space.h: every value of every field).
 */
#include <string.h>

#include "check_space.h"
#include "check_store.h"
#include "test_layouts.h"

static const int64_t batch_sizes[] = {1,   2,   3,   4,   5,   7,   8,   15,   16,   17,   31,   32,   33,   63,   64,
                                      65,  127, 128, 129, 255, 256, 511, 512,  1023, 1024, 2047, 2048, 4096, 4097,
                                      16399};
enum { NUM_BATCHES = sizeof batch_sizes / sizeof batch_sizes[0] };
static const int64_t row_widths[] = {128, 192, 196, 200, 256, 384, 392, 400, 512, 1024, 2048, 4096};
enum { NUM_WIDTHS = sizeof row_widths / sizeof row_widths[0] };
/* The batches each shape group runs (decode, small, class edges, mid, large, paired). */
static const int64_t shape_batches[] = {1, 7, 17, 1023, 5000, 40001};
enum { NUM_SHAPE_BATCHES = 6 };

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

store_case store_case_plain(const char *group, int64_t batch, int64_t row) {
  store_case c;
  memset(&c, 0, sizeof c);
  c.group = group;
  c.batch = batch;
  c.k_row = c.v_row = row;
  c.index_stride = 1;
  c.extra_slots = -1;
  c.index_type = KVJIT_INDEX_INT64;
  c.common.pdl = KVJIT_PDL_AUTO;
  return c;
}

static store_case quant(const char *group, kvjit_dtype src, kvjit_dtype cache, kvjit_scale_kind scale) {
  store_case c = store_case_plain(group, 64, 0);
  c.dtype = src;
  c.cache_dtype = cache;
  c.scale = scale;
  c.heads = 8;
  int eb = src == KVJIT_DTYPE_F32 ? 4 : 2;
  c.k_row = c.v_row = 1024 * eb;
  return c;
}

static int elem_bytes(kvjit_dtype d) { return d == KVJIT_DTYPE_F32 ? 4 : 2; }

/* ---- plain: the matrix ------------------------------------------------------------------------- */

/* Splits of a row whose slices are >= 16 B, after 0 (automatic). */
static int splits_of(int64_t row, int *out) {
  int n = 0;
  out[n++] = 0;
  for (int64_t s = 1; s <= row / 16; s++)
    if (row % s == 0) out[n++] = (int)s;
  return n;
}

/* Combination i of width x (auto + every split) x index x pdl, or -1 past the end. */
static int matrix_combo(size_t i, store_case *out) {
  size_t n = 0;
  for (int w = 0; w < NUM_WIDTHS; w++) {
    int splits[300];
    int ns = splits_of(row_widths[w], splits);
    size_t here = (size_t)ns * 4;
    if (i < n + here) {
      size_t k = i - n;
      *out = store_case_plain("matrix", 1, row_widths[w]);
      out->split = splits[k / 4];
      out->index_type = (k / 2) % 2 ? KVJIT_INDEX_INT64 : KVJIT_INDEX_INT32;
      out->common.pdl = k % 2 ? KVJIT_PDL_ON : KVJIT_PDL_OFF;
      return 0;
    }
    n += here;
  }
  return -1;
}

static size_t matrix_count(void) {
  static size_t combos;
  if (combos == 0) {
    store_case c;
    while (matrix_combo(combos, &c) == 0) combos++;
  }
  return combos * 5;
}

/* Each combination: one batch of each class (decode, mid, large) plus two rotating sizes. */
static void matrix_make(size_t i, store_case *c) {
  size_t combo = i / 5;
  matrix_combo(combo, c);
  const int64_t sizes[5] = {1, 33, 4097, batch_sizes[combo % NUM_BATCHES], batch_sizes[(combo * 7 + 3) % NUM_BATCHES]};
  c->batch = sizes[i % 5];
}

/* Every batch size with the automatic choice, for every width and both index types. */
static size_t auto_count(void) { return NUM_WIDTHS * 2 * NUM_BATCHES; }
static void auto_make(size_t i, store_case *c) {
  *c = store_case_plain("auto", batch_sizes[i % NUM_BATCHES], row_widths[i / (2 * NUM_BATCHES)]);
  c->index_type = (i / NUM_BATCHES) % 2 ? KVJIT_INDEX_INT64 : KVJIT_INDEX_INT32;
}

/* ---- plain: shapes ------------------------------------------------------------------------------ */

/* Asymmetric K/V rows (head_dim != v_head_dim), automatic and explicit splits. */
static const int64_t asym[][3] = {{576, 512, 0}, {1152, 1024, 0}, {1152, 1024, 4}, {256, 128, 0},
                                  {128, 256, 2}, {192, 128, 0},   {4096, 512, 0}, {200, 100, 0}};
static size_t asym_count(void) { return COUNT(asym) * NUM_SHAPE_BATCHES; }
static void asym_make(size_t i, store_case *c) {
  const int64_t *a = asym[i / NUM_SHAPE_BATCHES];
  *c = store_case_plain("asymmetric", shape_batches[i % NUM_SHAPE_BATCHES], a[0]);
  c->v_row = a[1];
  c->split = (int)a[2];
}

/* K only (latent caches): v and v_cache NULL. */
static const int64_t konly[] = {576, 512, 1152, 64, 196};
static size_t konly_count(void) { return COUNT(konly) * NUM_SHAPE_BATCHES; }
static void konly_make(size_t i, store_case *c) {
  size_t b = i % NUM_SHAPE_BATCHES;
  *c = store_case_plain("k_only", shape_batches[b], konly[i / NUM_SHAPE_BATCHES]);
  c->v_row = 0;
  c->index_type = b % 2 ? KVJIT_INDEX_INT32 : KVJIT_INDEX_INT64;
}

/* Odd rows of any byte size, 1-byte rows, and splits that narrow the vector. */
static const int64_t odd[][2] = {{1, 0},    {3, 0},    {33, 0},   {100, 0},  {1000, 0},
                                 {8192, 0}, {8192, 1}, {256, 64}, {256, 256}, {384, 96}};
static size_t odd_count(void) { return COUNT(odd) * NUM_SHAPE_BATCHES; }
static void odd_make(size_t i, store_case *c) {
  *c = store_case_plain("odd", shape_batches[i % NUM_SHAPE_BATCHES], odd[i / NUM_SHAPE_BATCHES][0]);
  c->split = (int)odd[i / NUM_SHAPE_BATCHES][1];
}

/* Strided inputs and caches (wide and narrow alignment), strided indices. */
static const int64_t pads[][4] = {{64, 256, 32, 16}, {4, 0, 0, 0}, {0, 8, 0, 0},
                                  {0, 0, 2, 0},      {0, 0, 0, 1}, {256, 256, 256, 256}};
static size_t pads_count(void) { return COUNT(pads) * NUM_SHAPE_BATCHES; }
static void pads_make(size_t i, store_case *c) {
  size_t p = i / NUM_SHAPE_BATCHES, b = i % NUM_SHAPE_BATCHES;
  *c = store_case_plain("strides", shape_batches[b], b % 2 ? 256 : 1024);
  c->k_pad = pads[p][0];
  c->v_pad = pads[p][1];
  c->kc_pad = pads[p][2];
  c->vc_pad = pads[p][3];
  c->index_stride = (int64_t)(1 + p % 3);
  c->index_type = p % 2 ? KVJIT_INDEX_INT32 : KVJIT_INDEX_INT64;
}

/* Misaligned bases: each pointer alone, then all at once. */
static const unsigned offs[][5] = {{8, 0, 0, 0, 0}, {0, 4, 0, 0, 0}, {0, 0, 2, 0, 0},     {0, 0, 0, 1, 0},
                                   {0, 0, 0, 0, 8}, {4, 8, 2, 1, 4}, {12, 12, 12, 12, 0}};
static size_t offs_count(void) { return COUNT(offs) * NUM_SHAPE_BATCHES; }
static void offs_make(size_t i, store_case *c) {
  size_t o = i / NUM_SHAPE_BATCHES, b = i % NUM_SHAPE_BATCHES;
  *c = store_case_plain("misaligned", shape_batches[b], b % 2 ? 128 : 2048);
  c->k_off = offs[o][0];
  c->v_off = offs[o][1];
  c->kc_off = offs[o][2];
  c->vc_off = offs[o][3];
  c->idx_off = offs[o][4];
  c->index_type = (c->idx_off % 8) ? KVJIT_INDEX_INT32 : KVJIT_INDEX_INT64;
}

/* 512 B rows at every shape batch (the old suite ran these on a stream of their own; the harness
 * now picks the stream of every case). */
static size_t rows512_count(void) { return NUM_SHAPE_BATCHES; }
static void rows512_make(size_t i, store_case *c) { *c = store_case_plain("rows512", shape_batches[i], 512); }

/* ---- plain: bad ids, batch 0, the chain ---------------------------------------------------------- */

/* Padding, past-the-end and skip-slot ids: skipped, counted (past-the-end only); a correct store
 * right after each. */
static const int64_t bad_batches[] = {1, 5, 64, 1000, 4097, 16399};
static size_t bad_count(void) { return COUNT(bad_batches) * 4 * 2; }
static void bad_make(size_t i, store_case *c) {
  int64_t batch = bad_batches[i / 8];
  int variant = (int)(i / 2) % 4;
  if (i % 2) {
    *c = store_case_plain("after_bad", batch, 256);
    return;
  }
  *c = store_case_plain("bad_ids", batch, variant % 2 ? 196 : 1024);
  c->bad_indices = 1;
  c->use_skip = variant >= 2;
  c->index_type = variant % 2 ? KVJIT_INDEX_INT32 : KVJIT_INDEX_INT64;
  c->common.pdl = variant == 3 ? KVJIT_PDL_OFF : KVJIT_PDL_AUTO;
}

/* Batches past 32768 with narrow rows: each lane group stores two items (odd batches leave the
 * last group one), and a bad id may sit in either item of a group. Then no spare slots. */
static const int64_t paired_rows[] = {128, 196, 64};
static size_t paired_count(void) { return COUNT(paired_rows) * 4 + 1; }
static void paired_make(size_t i, store_case *c) {
  if (i == COUNT(paired_rows) * 4) {
    *c = store_case_plain("no_spare_slots", 300, 512);
    c->extra_slots = 0;
    c->bad_indices = 1;
    return;
  }
  int variant = (int)i % 4;
  *c = store_case_plain("paired_bad_ids", variant % 2 ? 40001 : 32769, paired_rows[i / 4]);
  c->bad_indices = 1;
  c->use_skip = variant >= 2;
  c->index_type = variant % 2 ? KVJIT_INDEX_INT32 : KVJIT_INDEX_INT64;
  if (variant == 3) c->v_row = 0;
}

static size_t zero_count(void) { return 1; }
static void zero_make(size_t i, store_case *c) {
  (void)i;
  *c = store_case_plain("batch_zero", 0, 256);
  c->extra_slots = 8;
}

/* Store 1 writes cache A; store 2 reads A's rows as its input. With PDL the second kernel's wait
 * is what orders them: a missing wait shows up as stale rows. Eager, then 5 graph replays with new
 * inputs and ids (the old suite's 3 runs on a stream and 3 replays). */
static const int64_t chain_shapes[][2] = {{1, 8192}, {16, 2048}, {4097, 128}, {3000, 1024}};
static size_t chain_count(void) { return COUNT(chain_shapes) * 3; }
static void chain_make(size_t i, store_case *c) {
  static const kvjit_pdl_mode modes[] = {KVJIT_PDL_AUTO, KVJIT_PDL_ON, KVJIT_PDL_OFF};
  *c = store_case_plain("chain", chain_shapes[i / 3][0], chain_shapes[i / 3][1]);
  c->chain = 1;
  c->extra_slots = c->batch + 5;
  c->common.steps = 2;
  c->common.graph = 5;
  c->common.pdl = modes[i % 3];
}

/* ---- quantizing ---------------------------------------------------------------------------------- */

static const kvjit_dtype fp8_kinds[] = {KVJIT_DTYPE_FP8_E4M3, KVJIT_DTYPE_FP8_E5M2};
static const kvjit_scale_kind scale_kinds[] = {KVJIT_SCALE_NONE, KVJIT_SCALE_PER_TENSOR, KVJIT_SCALE_PER_HEAD};

/* All 65536 f16 patterns as the K rows (64 rows x 1024), both fp8 kinds, every scale kind, through
 * the cvt path and the integer path. */
static size_t f16_count(void) { return 12; }
static void f16_make(size_t i, store_case *c) {
  *c = quant("every_f16", KVJIT_DTYPE_F16, fp8_kinds[(i / 3) % 2], scale_kinds[i % 3]);
  c->data = STORE_DATA_ALL_F16;
  c->soft = (int)(i / 6);
}

/* The edges from f32 and bf16 (truncated bits): no scale, a power of two (exact division keeps the
 * ties), and a scale that rounds. */
static size_t edges_count(void) { return 24; }
static void edges_make(size_t i, store_case *c) {
  static const float scales[] = {1.0f, 0.5f, 0.7f};
  size_t src = i % 2, s = (i / 2) % 3, soft = (i / 6) % 2, f = i / 12;
  *c = quant("edges", src ? KVJIT_DTYPE_F32 : KVJIT_DTYPE_BF16, fp8_kinds[f],
             s == 0 ? KVJIT_SCALE_NONE : KVJIT_SCALE_PER_TENSOR);
  c->batch = 8;
  c->data = STORE_DATA_EDGES;
  c->fixed_scale = scales[s];
  c->soft = (int)soft;
}

/* Random values of every source dtype, fp8 kind and scale kind, several batch sizes. */
static size_t fp8_random_count(void) { return 3 * 2 * 3 * 5; }
static void fp8_random_make(size_t i, store_case *c) {
  static const kvjit_dtype srcs[] = {KVJIT_DTYPE_F16, KVJIT_DTYPE_BF16, KVJIT_DTYPE_F32};
  static const int64_t batches[] = {1, 7, 16, 129, 4097};
  static const int64_t widths[] = {64, 128, 576, 1024};
  size_t b = i % 5, s = (i / 5) % 3, f = (i / 15) % 2, d = i / 30;
  *c = quant("fp8_random", srcs[d], fp8_kinds[f], scale_kinds[s]);
  c->batch = batches[b];
  int64_t elems = widths[(b + s) % 4];
  c->k_row = c->v_row = elems * elem_bytes(srcs[d]);
  c->heads = elems / 64 ? elems / 64 : 1;
  c->index_type = (b & 1) ? KVJIT_INDEX_INT32 : KVJIT_INDEX_INT64;
  c->common.pdl = (s & 1) ? KVJIT_PDL_OFF : KVJIT_PDL_AUTO;
}

/* Everything else store_kv_cache does, quantizing. */
static size_t fp8_features_count(void) { return 15; }
static void fp8_features_make(size_t i, store_case *c) {
  static const int splits[] = {1, 2, 4, 8, 64};
  switch (i) {
  case 0: case 1: /* padding, skip-slot and out-of-range ids, with the counter */
    *c = quant("fp8_bad_ids", KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_TENSOR);
    c->batch = 333;
    c->bad_indices = c->use_skip = 1;
    c->soft = (int)i;
    return;
  case 2: /* K only (MLA: 576 elements, one head), per head */
    *c = quant("fp8_k_only", KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_HEAD);
    c->k_row = 576 * 2;
    c->v_row = 0;
    c->heads = 1;
    return;
  case 3: /* asymmetric rows (K 192, V 128 elements), 4 heads each */
    *c = quant("fp8_asymmetric", KVJIT_DTYPE_F16, KVJIT_DTYPE_FP8_E5M2, KVJIT_SCALE_PER_HEAD);
    c->k_row = 192 * 2;
    c->v_row = 128 * 2;
    c->heads = 4;
    return;
  case 4: /* strided sources and caches */
    *c = quant("fp8_strides", KVJIT_DTYPE_F32, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_TENSOR);
    c->k_pad = 64;
    c->v_pad = 4;
    c->kc_pad = 3;
    c->vc_pad = 256;
    return;
  case 5: case 6: /* a K cache base 1 or 2 bytes off: narrow accesses; heads of 24 elements */
    *c = quant("fp8_misaligned", KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_HEAD);
    c->kc_off = (unsigned)(i - 4);
    c->k_row = c->v_row = 192 * 2;
    return;
  case 7: case 8: case 9: case 10: case 11: /* explicit splits */
    *c = quant("fp8_split", KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E5M2, KVJIT_SCALE_PER_HEAD);
    c->split = splits[i - 7];
    c->batch = 100;
    return;
  default: /* the round-by-round path: one slice of 16 KiB of f32 per row */
    *c = quant("fp8_rounds", KVJIT_DTYPE_F32, KVJIT_DTYPE_FP8_E4M3,
               i == 12 ? KVJIT_SCALE_PER_HEAD : KVJIT_SCALE_PER_TENSOR);
    c->k_row = c->v_row = 4096 * 4;
    c->heads = 32;
    c->split = 1;
    c->batch = 33;
    c->soft = i == 14;
    return;
  }
}

/* A captured graph reads the scales at replay: new values, no re-capture. */
static size_t fp8_graph_count(void) { return 1; }
static void fp8_graph_make(size_t i, store_case *c) {
  (void)i;
  *c = quant("fp8_graph_scales", KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_TENSOR);
  c->batch = 48;
  c->k_row = 256 * 2;
  c->v_row = 0;
  c->common.graph = 3;
}

/* ---- laid-out caches ------------------------------------------------------------------------------ */

/* The caches serving runtimes lay out (tests/test_layouts.h): {kind, heads, head_dim, block_size}. */
static const int64_t layout_shapes[][4] = {
    {KVJIT_TEST_NHD, 8, 128, 16},     {KVJIT_TEST_HND, 8, 128, 16},   {KVJIT_TEST_HND, 3, 96, 5},
    {KVJIT_TEST_FLASH, 8, 128, 16},   {KVJIT_TEST_FLASH, 2, 64, 64},  {KVJIT_TEST_CHUNKED, 8, 128, 16},
    {KVJIT_TEST_CHUNKED, 2, 64, 5},   {KVJIT_TEST_MLA, 1, 576, 16},
};
/* What the rows hold: a plain copy of bf16 (or f32) rows, or a quantizing store. */
static const struct {
  kvjit_dtype src, cache;
  kvjit_scale_kind scale;
} layout_data[] = {
    {KVJIT_DTYPE_BYTES, KVJIT_DTYPE_BYTES, KVJIT_SCALE_NONE},
    {KVJIT_DTYPE_F32, KVJIT_DTYPE_BYTES, KVJIT_SCALE_NONE},
    {KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_TENSOR},
    {KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_HEAD},
    {KVJIT_DTYPE_F16, KVJIT_DTYPE_FP8_E5M2, KVJIT_SCALE_PER_HEAD},
    {KVJIT_DTYPE_F32, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_TENSOR},
};
static const int64_t layout_batches[] = {1, 7, 16, 129, 1000, 4097};

/* Every layout x what the rows hold x batch; int32 / int64 ids in turn, padding / past-the-end /
 * skip-slot ids at two batches, a misaligned cache base (narrow accesses) at one, graph replay at
 * one; the harness turns PDL auto, on and off. */
static size_t layout_count(void) { return COUNT(layout_shapes) * COUNT(layout_data) * COUNT(layout_batches); }
static void layout_make(size_t i, store_case *c) {
  const size_t b = i % COUNT(layout_batches), d = (i / COUNT(layout_batches)) % COUNT(layout_data),
               l = i / (COUNT(layout_batches) * COUNT(layout_data));
  const int64_t *shape = layout_shapes[l];
  const int quantize = layout_data[d].cache != KVJIT_DTYPE_BYTES;
  const int src_elem = layout_data[d].src == KVJIT_DTYPE_F32 ? 4 : 2;
  *c = store_case_plain("layout", layout_batches[b], 0);
  c->layout = (int)shape[0] + 1;
  c->heads_l = shape[1];
  c->head_dim = shape[2];
  c->block_size = shape[3];
  c->dtype = layout_data[d].src;
  c->cache_dtype = layout_data[d].cache;
  c->scale = layout_data[d].scale;
  if (shape[0] == KVJIT_TEST_MLA) { /* kv_c 512 and k_pe 64 elements into one 576-element row */
    c->k_row = 512 * src_elem;
    c->v_row = (shape[2] - 512) * src_elem;
    c->heads = 1;
  } else {
    c->k_row = c->v_row = shape[1] * shape[2] * src_elem;
    c->heads = shape[1];
  }
  c->index_type = b % 2 ? KVJIT_INDEX_INT32 : KVJIT_INDEX_INT64;
  c->bad_indices = b == 3 || b == 4;
  c->use_skip = b == 4;
  if (b == 1) c->kc_off = c->vc_off = quantize ? 1 : (unsigned)src_elem; /* one cache element off: narrow accesses */
  if (b == 2) c->common.graph = 2;
}

/* ---- the variant space from the op's field table ------------------------------------------------- */

/* Where the space starts: a plain copy and a quantizing store; every field is varied from each. */
static const char *const space_bases[] = {
    "store_kv_cache arch=0 k_row_bytes=1024 v_row_bytes=1024 index=int64 pdl=auto split=0 vec=16",
    "store_kv_cache arch=0 k_row_bytes=2048 v_row_bytes=2048 index=int64 pdl=auto split=0 vec=16 dtype=bf16 "
    "cache_dtype=fp8_e4m3 scale=head num_heads=8",
};

/* A laid-out cache is a kind of tests/test_layouts.h in a case (group "layout"), not yet these
 * fields of its static part: they stay flat here. */
static const char *const space_fixed[] = {"k_page", "k_atom", "k_dim0", "k_dim1", "v_page",
                                          "v_atom", "v_dim0", "v_dim1", "v_vec"};

size_t store_space(const kvjit_variant **out, size_t *dropped) {
  static const check_space_map map = {sizeof(store_case), store_case_from_variant, store_case_variant, space_fixed,
                                      COUNT(space_fixed)};
  return check_space_get("store_kv_cache", space_bases, COUNT(space_bases), &map, out, dropped);
}

void store_case_from_variant(const kvjit_variant *v, size_t index, void *out) {
  static const int64_t batches[] = {1, 7, 33, 300, 4097};
  const int64_t k_row = variant_value(v, "k_row_bytes"), v_row = variant_value(v, "v_row_bytes");
  int64_t batch = batches[index % COUNT(batches)];
  while (batch > 1 && batch * (k_row + v_row) > ((int64_t)64 << 20)) batch /= 4; /* <= 64 MiB of rows */
  store_case *c = out;
  *c = store_case_plain("fields", batch, k_row);
  c->v_row = v_row;
  c->index_type = (kvjit_index_type)variant_value(v, "index");
  c->common.pdl = (kvjit_pdl_mode)variant_value(v, "pdl");
  c->split = (int)variant_value(v, "split");
  c->dtype = (kvjit_dtype)variant_value(v, "dtype");
  c->cache_dtype = (kvjit_dtype)variant_value(v, "cache_dtype");
  /* A base aligned to exactly vec bytes: the K rows' (a plain copy), or the K cache's (quantizing:
   * source rows stay aligned to their elements; one cache byte takes one source element). */
  const int64_t vec = variant_value(v, "vec");
  const int64_t elem = c->cache_dtype == KVJIT_DTYPE_BYTES ? 1 : c->dtype == KVJIT_DTYPE_F32 ? 4 : 2;
  if (vec < 16 && elem == 1) c->k_off = (unsigned)vec;
  else if (vec < 16) c->kc_off = (unsigned)(vec / elem);
  c->scale = (kvjit_scale_kind)variant_value(v, "scale");
  c->heads = variant_value(v, "num_heads");
}

static size_t fields_count(void) {
  const kvjit_variant *v;
  return store_space(&v, NULL);
}
static void fields_make(size_t i, store_case *c) {
  const kvjit_variant *v;
  store_space(&v, NULL);
  store_case_from_variant(&v[i], i, c);
}

/* ---- the table ----------------------------------------------------------------------------------- */

static const struct {
  size_t (*count)(void);
  void (*make)(size_t i, store_case *c);
} groups[] = {
    {matrix_count, matrix_make},     {auto_count, auto_make},         {asym_count, asym_make},
    {konly_count, konly_make},       {odd_count, odd_make},           {pads_count, pads_make},
    {offs_count, offs_make},         {rows512_count, rows512_make},   {bad_count, bad_make},
    {paired_count, paired_make},     {zero_count, zero_make},         {chain_count, chain_make},
    {f16_count, f16_make},           {edges_count, edges_make},       {fp8_random_count, fp8_random_make},
    {fp8_features_count, fp8_features_make}, {fp8_graph_count, fp8_graph_make},
    {layout_count, layout_make},     {fields_count, fields_make},
};

size_t store_case_count(void) {
  size_t n = 0;
  for (size_t g = 0; g < COUNT(groups); g++) n += groups[g].count();
  return n;
}

void store_case_get(size_t index, void *out) {
  store_case *c = out;
  for (size_t g = 0; g < COUNT(groups); g++) {
    size_t n = groups[g].count();
    if (index < n) {
      groups[g].make(index, c);
      return;
    }
    index -= n;
  }
  memset(c, 0, sizeof *c);
}

/* ---- the bench driver's cells --------------------------------------------------------------------- */

/* bench_store's grid (rows 128..8192 B x batch 1..65536 x int32/int64 x PDL on/off), its decode
 * cells with L2-hot inputs (batch 1 and 16, int64, PDL on: every launch reads the same rows, the
 * slots still rotate) and bench_fp8's (bf16 rows of 128..8192 B quantized to e4m3 with a
 * per-tensor and a per-head scale of 64-element heads, int64, PDL on, at both benches' batches).
 * As timed, the slots the benchmarks of record spread rows over: bench_store's 2 GiB / row per K
 * and V cache, bench_fp8's 1 GiB / source row (it drew slots from the first half of 2 GiB caches
 * sized for bf16 rows); checked first with small caches. */
static const int64_t bench_rows[] = {128, 256, 512, 1024, 2048, 4096, 8192};
static const int64_t bench_batches[] = {1, 16, 128, 1024, 8192, 65536};
static const int64_t hot_batches[] = {1, 16};
static const int64_t fp8_batches[] = {1, 16, 128, 256, 1024, 4096, 8192, 65536};
enum {
  BENCH_ROWS = COUNT(bench_rows),
  BENCH_PLAIN = BENCH_ROWS * COUNT(bench_batches) * 4,
  BENCH_HOT = BENCH_ROWS * COUNT(hot_batches),
  BENCH_FP8 = BENCH_ROWS * COUNT(fp8_batches) * 2,
};

/* Laid-out caches (issue 29's grid): Llama-3.1-8B's 8 KV heads of 128, bf16, 16 slots per page, int64
 * ids, PDL on, tokens 1 .. 65536, and bf16 -> e4m3 per tensor at 4096 tokens. NHD's view is flat:
 * its cells are the flat kernel's, the reference for the others. MLA: 512 + 64 elements into one
 * 576-element row. */
static const int bench_layout_kinds[] = {KVJIT_TEST_NHD, KVJIT_TEST_HND, KVJIT_TEST_FLASH, KVJIT_TEST_CHUNKED,
                                         KVJIT_TEST_MLA};
static const int64_t bench_layout_batches[] = {1, 16, 256, 4096, 65536};
enum { BENCH_LAYOUT = COUNT(bench_layout_kinds) * (COUNT(bench_layout_batches) + 1) };

static void bench_layout_get(size_t i, store_case *c, int timing) {
  const size_t per = COUNT(bench_layout_batches) + 1, b = i % per;
  const int kind = bench_layout_kinds[i / per], fp8 = b == COUNT(bench_layout_batches);
  const int64_t batch = fp8 ? 4096 : bench_layout_batches[b];
  *c = store_case_plain(fp8 ? "bench_layout_fp8" : "bench_layout", batch, 8 * 128 * 2);
  c->index_type = KVJIT_INDEX_INT64;
  c->common.pdl = KVJIT_PDL_ON;
  c->layout = kind + 1;
  c->heads_l = kind == KVJIT_TEST_MLA ? 1 : 8;
  c->head_dim = kind == KVJIT_TEST_MLA ? 576 : 128;
  c->block_size = 16;
  if (kind == KVJIT_TEST_MLA) {
    c->k_row = 512 * 2;
    c->v_row = 64 * 2;
  }
  if (fp8) {
    c->dtype = KVJIT_DTYPE_BF16;
    c->cache_dtype = KVJIT_DTYPE_FP8_E4M3;
    c->scale = KVJIT_SCALE_PER_TENSOR;
    c->heads = kind == KVJIT_TEST_MLA ? 1 : 8;
  }
  if (timing) c->extra_slots = (int64_t)((2ull << 30) / (uint64_t)c->k_row) - batch; /* 2 GiB / K row */
}

size_t store_bench_count(void) { return BENCH_PLAIN + BENCH_HOT + BENCH_FP8 + BENCH_LAYOUT; }

void store_bench_get(size_t i, void *out, int timing) {
  store_case *c = out;
  if (i >= BENCH_PLAIN + BENCH_HOT + BENCH_FP8) {
    bench_layout_get(i - BENCH_PLAIN - BENCH_HOT - BENCH_FP8, c, timing);
    return;
  }
  if (i < BENCH_PLAIN) {
    const size_t cell = i / 4;
    *c = store_case_plain("bench", bench_batches[cell % COUNT(bench_batches)], bench_rows[cell / COUNT(bench_batches)]);
    c->index_type = (i / 2) % 2 ? KVJIT_INDEX_INT64 : KVJIT_INDEX_INT32;
    c->common.pdl = i % 2 == 0 ? KVJIT_PDL_ON : KVJIT_PDL_OFF;
  } else if (i < BENCH_PLAIN + BENCH_HOT) {
    const size_t k = i - BENCH_PLAIN;
    *c = store_case_plain("bench_hot", hot_batches[k % COUNT(hot_batches)], bench_rows[k / COUNT(hot_batches)]);
    c->common.pdl = KVJIT_PDL_ON;
    c->hot_inputs = 1;
  } else {
    const size_t k = i - BENCH_PLAIN - BENCH_HOT, cell = k / 2;
    const int64_t row = bench_rows[cell / COUNT(fp8_batches)];
    *c = store_case_plain("bench_fp8", fp8_batches[cell % COUNT(fp8_batches)], row);
    c->common.pdl = KVJIT_PDL_ON;
    c->dtype = KVJIT_DTYPE_BF16;
    c->cache_dtype = KVJIT_DTYPE_FP8_E4M3;
    c->scale = k % 2 ? KVJIT_SCALE_PER_HEAD : KVJIT_SCALE_PER_TENSOR;
    c->heads = k % 2 ? row / 2 / 64 : 8; /* bench_fp8's heads: 64 elements each */
  }
  const uint64_t spread = c->cache_dtype == KVJIT_DTYPE_BYTES ? 2ull << 30 : 1ull << 30; /* bench_store's, bench_fp8's */
  if (timing) c->extra_slots = (int64_t)(spread / (uint64_t)c->k_row) - c->batch; /* slots: spread / source row */
}
