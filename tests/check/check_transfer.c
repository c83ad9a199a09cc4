/*
 * transfer_kv for the check harness. The case space (every case the old tests/test_gpu_transfer.c
 * ran): the four directions (device <-> pinned host) x one layer and per-layer tables x rows
 * 128..8192 B (tails, asymmetric K/V, K only) x batches of every class x int32/int64; strides,
 * strided ids, byte accesses, the round path, explicit splits, PDL, repeated sources; bad slots on
 * either side and a NULL table entry with the counter; batch 0; graphs in every direction. The
 * input maker: random source rows, poisoned destinations, random source slots (repeats allowed)
 * and duplicate-free destination slots. The reference: a row copy per item and layer.
 *
 * Issue 29: conversions on the way in every direction (fp8 e4m3/e5m2 -> f16/bf16/f32 as x * scale,
 * f16/bf16/f32 -> fp8 as fp8(x / scale); per head, per tensor per layer, none; the reference is
 * tests/fp8_ref.h, the scales new at every graph replay) and the CTA budget (the default few CTAs
 * over the host link, caps of 1 and 3, the all-SM plan).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_space.h"
#include "check_transfer.h"
#include "host_layouts.h"
#include "fp8_ref.h"


#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const kvjit_location sides[4][2] = {{KVJIT_LOCATION_DEVICE, KVJIT_LOCATION_DEVICE},
                                           {KVJIT_LOCATION_DEVICE, KVJIT_LOCATION_HOST},
                                           {KVJIT_LOCATION_HOST, KVJIT_LOCATION_DEVICE},
                                           {KVJIT_LOCATION_HOST, KVJIT_LOCATION_HOST}};

static transfer_case base(const char *group, int64_t batch, int64_t row, int dir) {
  transfer_case c;
  memset(&c, 0, sizeof c);
  c.group = group;
  c.batch = batch;
  c.k_row = c.v_row = row;
  c.src_index_stride = c.dst_index_stride = 1;
  c.src = sides[dir][0];
  c.dst = sides[dir][1];
  c.index_type = KVJIT_INDEX_INT64;
  c.common.pdl = KVJIT_PDL_AUTO;
  c.bad_layer = -1;
  return c;
}

/* ---- the case space --------------------------------------------------------------------------------- */

static const int64_t matrix_rows[][2] = {{128, 128},  {196, 196},   {576, 0},  {1024, 512},
                                         {2048, 2048}, {4096, 4096}, {8192, 8192}};
static const int64_t matrix_batches[] = {1, 7, 64, 65, 1000, 4097, 40000};

/* Directions x layer mode x rows x batches, up to 64 MiB per device cache, 16 MiB over the host
 * link, and the layer tables up to batch 4097; @return the number of cells, the i-th in @p out. */
static size_t matrix_cell(size_t i, transfer_case *out) {
  size_t n = 0;
  for (int d = 0; d < 4; d++)
    for (int layers = 0; layers <= 3; layers += 3)
      for (size_t r = 0; r < COUNT(matrix_rows); r++)
        for (size_t b = 0; b < COUNT(matrix_batches); b++) {
          const int host = sides[d][0] == KVJIT_LOCATION_HOST || sides[d][1] == KVJIT_LOCATION_HOST;
          if (matrix_batches[b] * matrix_rows[r][0] > ((int64_t)(host ? 16 : 64) << 20)) continue;
          if (layers > 0 && matrix_batches[b] > 4097) continue;
          if (n++ != i || out == NULL) continue;
          *out = base("matrix", matrix_batches[b], matrix_rows[r][0], d);
          out->v_row = matrix_rows[r][1];
          out->layers = layers;
          out->index_type = (r + b) % 2 ? KVJIT_INDEX_INT32 : KVJIT_INDEX_INT64;
        }
  return n;
}
static size_t matrix_count(void) { return matrix_cell(SIZE_MAX, NULL); }
static void matrix_make(size_t i, transfer_case *c) { matrix_cell(i, c); }

/* Per direction: strides, strided ids, tails with asymmetric rows, byte accesses, the round path,
 * explicit splits (one through tables), PDL off and on, many items over few source slots. */
enum { SHAPES_PER_DIR = 12 };
static size_t shapes_count(void) { return 4 * SHAPES_PER_DIR; }
static void shapes_make(size_t i, transfer_case *c) {
  int d = (int)(i / SHAPES_PER_DIR), k = (int)(i % SHAPES_PER_DIR);
  switch (k) {
  case 0: *c = base("strides", 333, 1024, d); c->src_pad = 64; c->dst_pad = 16; return;
  case 1:
    *c = base("strided_ids", 333, 1024, d);
    c->src_index_stride = 3;
    c->dst_index_stride = 2;
    c->index_type = KVJIT_INDEX_INT32;
    return;
  case 2: *c = base("tail", 257, 196, d); c->v_row = 392; c->src_pad = 4; return;
  case 3: *c = base("bytes", 100, 99, d); c->dst_pad = 1; return;
  case 4: *c = base("rounds", 50, 16384, d); c->split = 1; return;
  case 5: case 6: case 7: case 8:
    *c = base("split", 777, 2048, d);
    c->split = 2 << (k - 5);
    c->layers = c->split == 4 ? 2 : 0;
    return;
  case 9: case 10:
    *c = base("pdl", 4097, 512, d);
    c->common.pdl = k == 9 ? KVJIT_PDL_OFF : KVJIT_PDL_ON;
    return;
  default: *c = base("repeats", 3000, 256, d); c->src_slots = 17; return;
  }
}

/* Padding and out-of-range ids on both sides, and a NULL table entry; then 2 KiB rows (SGLang's
 * host pool's, where the host-link plans take other shapes) with both and a NULL entry. */
static size_t bad_count(void) { return 4 * 4; }
static void bad_make(size_t i, transfer_case *c) {
  int d = (int)(i / 4), k = (int)(i % 4);
  *c = base("bad_slots", 2000, k == 3 ? 2048 : 512, d);
  c->bad = 1;
  c->layers = k == 0 ? 0 : k == 3 ? 3 : 4;
  if (k >= 2) c->bad_layer = k == 3 ? 1 : 2;
}

/* Conversions on the way, in every direction: {source dtype, destination dtype, scale, heads, row
 * (source bytes), V row, layers, split}. */
static const struct {
  kvjit_dtype from, to;
  kvjit_scale_kind scale;
  int64_t heads, k_row, v_row;
  int layers, split;
} conversions[] = {
    {KVJIT_DTYPE_FP8_E4M3, KVJIT_DTYPE_BF16, KVJIT_SCALE_PER_HEAD, 8, 1024, 1024, 0, 0},
    {KVJIT_DTYPE_FP8_E5M2, KVJIT_DTYPE_F32, KVJIT_SCALE_PER_TENSOR, 0, 512, 512, 3, 0},
    {KVJIT_DTYPE_FP8_E4M3, KVJIT_DTYPE_F16, KVJIT_SCALE_NONE, 0, 576, 0, 0, 0},
    {KVJIT_DTYPE_FP8_E5M2, KVJIT_DTYPE_BF16, KVJIT_SCALE_PER_HEAD, 4, 256, 128, 2, 2},
    {KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_HEAD, 8, 2048, 2048, 0, 0},
    {KVJIT_DTYPE_F16, KVJIT_DTYPE_FP8_E5M2, KVJIT_SCALE_PER_TENSOR, 0, 1024, 1024, 2, 0},
    {KVJIT_DTYPE_F32, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_NONE, 0, 4096, 2048, 0, 2},
    {KVJIT_DTYPE_F16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_HEAD, 2, 16384, 16384, 0, 1},
};
static size_t convert_count(void) { return 4 * COUNT(conversions); }
static void convert_make(size_t i, transfer_case *c) {
  const size_t n = COUNT(conversions), k = i % n;
  *c = base("convert", k % 2 ? 1000 : 77, conversions[k].k_row, (int)(i / n));
  c->v_row = conversions[k].v_row;
  c->src_dtype = conversions[k].from;
  c->dst_dtype = conversions[k].to;
  c->scale = conversions[k].scale;
  c->heads = conversions[k].heads;
  c->layers = conversions[k].layers;
  c->split = conversions[k].split;
  c->index_type = k % 3 ? KVJIT_INDEX_INT64 : KVJIT_INDEX_INT32;
  c->bad = k == 3;
  if (k == 5) c->common.graph = 2; /* new scales and rows at every replay */
}

/* The CTA budget: caps of 1 and 3 CTAs, the all-SM plan, the default (few over the host link). */
static size_t ctas_count(void) { return 4 * 4; }
static void ctas_make(size_t i, transfer_case *c) {
  static const int caps[] = {1, 3, KVJIT_TRANSFER_KV_ALL_CTAS, 0};
  *c = base("ctas", 5000, 512, (int)(i / 4));
  c->max_ctas = caps[i % 4];
  c->layers = i % 4 == 1 ? 3 : 0;
}

/* SGLang's host layouts on the host side of a load (h2d) and an offload (d2h), one layer (layer
 * 1 of 4) and tables of 3: rows of 4 heads of 256 B, pages of 16; then an offload quantizing
 * bf16 into a page_head fp8 host cache per head and a load dequantizing a page_first_direct one. */
static size_t host_layouts_count(void) { return 4 * 2 * 2 + 2; }
static void host_layouts_make(size_t i, transfer_case *c) {
  const int d2h = (int)(i / 2) % 2, convert = i >= 16;
  const kvjit_host_layout_kind kind = convert ? (i == 16 ? KVJIT_HOST_PAGE_HEAD : KVJIT_HOST_PAGE_FIRST_DIRECT)
                                              : (kvjit_host_layout_kind)(1 + i / 4);
  *c = base("host_layouts", i % 2 ? 77 : 300, 1024, convert ? (i == 16 ? 1 : 2) : d2h ? 1 : 2);
  c->layers = convert ? (i == 16 ? 0 : 3) : (i % 2 ? 3 : 0);
  c->index_type = i % 3 ? KVJIT_INDEX_INT64 : KVJIT_INDEX_INT32;
  c->src_slots = c->dst_slots = 416; /* whole pages */
  c->bad = i % 4 == 1;
  int64_t host_row = c->k_row;
  if (i == 16) {
    c->src_dtype = KVJIT_DTYPE_BF16, c->dst_dtype = KVJIT_DTYPE_FP8_E4M3, c->scale = KVJIT_SCALE_PER_HEAD, c->heads = 4;
    host_row = c->k_row / 2;
  } else if (convert) {
    c->src_dtype = KVJIT_DTYPE_FP8_E5M2, c->dst_dtype = KVJIT_DTYPE_BF16, c->scale = KVJIT_SCALE_PER_TENSOR;
  }
  const kvjit_host_layout h = {kind, 4, host_row / 4, 16, 4, 416};
  c->host = h;
}

static size_t zero_count(void) { return 1; }
static void zero_make(size_t i, transfer_case *c) {
  (void)i;
  *c = base("batch_zero", 0, 256, 0);
  c->src_slots = c->dst_slots = 4;
}

/* Replayed in a graph after the sources and ids change in place: every direction, one layer and tables. */
static size_t graph_count(void) { return 4 * 2; }
static void graph_make(size_t i, transfer_case *c) {
  *c = base("graph", 1500, 1024, (int)(i / 2));
  c->layers = i % 2 ? 2 : 0;
  c->src_slots = c->dst_slots = 2000;
  c->common.graph = 3;
}

/* The variant space from the op's field table (check_space.h): every value of every field, from
 * a plain copy and a converting one; cases of a few batches of every class, up to 64 MiB per
 * device cache (16 MiB host). */
static const char *const space_bases[] = {
    "transfer_kv arch=0 k_row_bytes=1024 v_row_bytes=1024 index=int64 src=device dst=device layers=one pdl=auto "
    "split=0 vec=16",
    "transfer_kv arch=0 k_row_bytes=2048 v_row_bytes=2048 index=int64 src=device dst=host layers=one pdl=auto "
    "split=0 vec=16 src_dtype=bf16 dst_dtype=fp8_e4m3 scale_kind=head num_heads=8",
};

static void from_variant(const kvjit_variant *v, size_t index, void *out);
static int src_elem(const transfer_case *c);
static int dst_elem(const transfer_case *c);
static int to_variant(const void *c, kvjit_variant *out);

/* SGLang's host layouts are cases of their own group (host_layouts), not yet these view fields. */
static const char *const space_fixed[] = {"src_page", "src_atom", "src_dim0", "src_dim1",
                                          "dst_page", "dst_atom", "dst_dim0", "dst_dim1"};

static size_t space(const kvjit_variant **out, size_t *dropped) {
  static const check_space_map map = {sizeof(transfer_case), from_variant, to_variant, space_fixed,
                                      COUNT(space_fixed)};
  return check_space_get("transfer_kv", space_bases, COUNT(space_bases), &map, out, dropped);
}

static void from_variant(const kvjit_variant *v, size_t index, void *out) {
  static const int64_t batches[] = {1, 7, 65, 1000, 4097};
  transfer_case *c = out;
  const int64_t k_row = variant_value(v, "k_row_bytes"), v_row = variant_value(v, "v_row_bytes");
  const kvjit_location src = (kvjit_location)variant_value(v, "src"),
                       dst = (kvjit_location)variant_value(v, "dst");
  const int host = src == KVJIT_LOCATION_HOST || dst == KVJIT_LOCATION_HOST;
  int64_t batch = batches[index % COUNT(batches)];
  while (batch > 1 && batch * (k_row + v_row) > ((int64_t)(host ? 16 : 64) << 20)) batch /= 4;
  *c = base("fields", batch, k_row, 0);
  c->v_row = v_row;
  c->src = src;
  c->dst = dst;
  c->index_type = (kvjit_index_type)variant_value(v, "index");
  c->layers = variant_value(v, "layers") ? 3 : 0; /* "table": three layers */
  c->common.pdl = (kvjit_pdl_mode)variant_value(v, "pdl");
  c->split = (int)variant_value(v, "split");
  c->src_dtype = (kvjit_dtype)variant_value(v, "src_dtype");
  c->dst_dtype = (kvjit_dtype)variant_value(v, "dst_dtype");
  c->scale = (kvjit_scale_kind)variant_value(v, "scale_kind");
  c->heads = variant_value(v, "num_heads");
  const int64_t ctas = variant_value(v, "ctas"); /* auto, few, all */
  c->max_ctas = ctas == 1 ? KVJIT_TRANSFER_KV_HOST_CTAS : ctas == 2 ? KVJIT_TRANSFER_KV_ALL_CTAS : 0;
  /* Slot strides aligned to exactly vec bytes: the source's past a row (a plain copy), or the
   * destination's (converting: whole elements on both sides, vec counted in source bytes). */
  const int64_t vec = variant_value(v, "vec");
  if (vec < 16 && c->src_dtype == c->dst_dtype) c->src_pad = vec;
  else if (vec < 16) c->dst_pad = vec / src_elem(c) * dst_elem(c);
  c->src_slots = c->dst_slots = batch + batch / 3 + 5;
}

static size_t fields_count(void) {
  const kvjit_variant *v;
  return space(&v, NULL);
}
static void fields_make(size_t i, transfer_case *c) {
  const kvjit_variant *v;
  space(&v, NULL);
  from_variant(&v[i], i, c);
}

static const struct {
  size_t (*count)(void);
  void (*make)(size_t i, transfer_case *c);
} groups[] = {{matrix_count, matrix_make}, {shapes_count, shapes_make}, {bad_count, bad_make},
              {zero_count, zero_make},     {graph_count, graph_make},   {convert_count, convert_make},
              {ctas_count, ctas_make},     {host_layouts_count, host_layouts_make}, {fields_count, fields_make}};

static size_t case_count(void) {
  static size_t n;
  if (n == 0)
    for (size_t g = 0; g < COUNT(groups); g++) n += groups[g].count();
  return n;
}

static void case_get(size_t index, void *out) {
  transfer_case *c = out;
  memset(c, 0, sizeof *c);
  for (size_t g = 0; g < COUNT(groups); g++) {
    size_t n = groups[g].count();
    if (index < n) {
      groups[g].make(index, c);
      break;
    }
    index -= n;
  }
  if (c->src_slots == 0) c->src_slots = c->batch + c->batch / 3 + 5;
  if (c->dst_slots == 0) c->dst_slots = c->batch + c->batch / 3 + 5;
  if (c->host.kind != KVJIT_HOST_FLAT) kvjit_host_layout_view(&c->host, &c->host_view);
}

/* ---- the op's side ------------------------------------------------------------------------------------ */

static const char *where(kvjit_location l) { return l == KVJIT_LOCATION_HOST ? "host" : "device"; }
static int tensors(const transfer_case *c) { return c->v_row > 0 ? 2 : 1; }
static int num_layers(const transfer_case *c) { return c->layers > 0 ? c->layers : 1; }
static int64_t row_of(const transfer_case *c, int t) { return t ? c->v_row : c->k_row; }
static size_t id_bytes(const transfer_case *c) { return c->index_type == KVJIT_INDEX_INT64 ? 8 : 4; }
static int converting(const transfer_case *c) { return c->dst_dtype != KVJIT_DTYPE_BYTES; }
/* The manifest's words and sizes of the element types (bench_ops builds this on the public API only). */
static const char *dtype_word(kvjit_dtype d) {
  static const char *const words[] = {"bytes", "f16", "bf16", "f32", "fp8_e4m3", "fp8_e5m2"};
  return (unsigned)d < COUNT(words) ? words[d] : "?";
}
static int dtype_size(kvjit_dtype d) { return d == KVJIT_DTYPE_F32 ? 4 : d == KVJIT_DTYPE_F16 || d == KVJIT_DTYPE_BF16 ? 2 : 1; }
static int src_elem(const transfer_case *c) { return converting(c) ? dtype_size(c->src_dtype) : 1; }
static int dst_elem(const transfer_case *c) { return converting(c) ? dtype_size(c->dst_dtype) : 1; }
/* A destination row: the source's elements in the destination's type. */
static int64_t dst_row_of(const transfer_case *c, int t) { return row_of(c, t) / src_elem(c) * dst_elem(c); }
static int64_t scales_per_layer(const transfer_case *c) { return c->scale == KVJIT_SCALE_PER_HEAD ? c->heads : 1; }
/* The side (0 source, 1 destination) of a host layout: the host's. */
static int laid(const transfer_case *c, int is_dst) {
  return c->host.kind != KVJIT_HOST_FLAT && (is_dst ? c->dst : c->src) == KVJIT_LOCATION_HOST;
}
/* One layer's caches of a host layout: layer 1 of the tensor (its base is not the tensor's); tables: layer l. */
static int64_t host_layer(const transfer_case *c, int l) { return c->layers > 0 ? l : 1; }
/* Buffer order: per layer and tensor the source then the destination cache (a host layout's side:
 * the whole tensor in layer 0's, 1 byte in the others), the 4 tables, the ids. */
static int cache_id(const transfer_case *c, int layer, int t, int is_dst) {
  return (layer * tensors(c) + t) * 2 + is_dst;
}
static int table_id(const transfer_case *c, int i) { return 2 * num_layers(c) * tensors(c) + i; }
static int ids_id(const transfer_case *c, int is_dst) {
  return 2 * num_layers(c) * tensors(c) + (c->layers > 0 ? 4 : 0) + is_dst;
}
/* With a scale: K's and V's scales (every layer's) after the ids. */
static int scale_id(const transfer_case *c, int t) { return ids_id(c, 1) + 1 + t; }

/* The buffer holding layer @p l of tensor @p t on a side, and the offset there of byte @p b of slot
 * @p s's row: SGLang's shapes for a host layout (host_layouts.c), rows of row + pad bytes else. */
static int side_buf(const transfer_case *c, int is_dst, int t, int l) {
  return cache_id(c, laid(c, is_dst) ? 0 : l, t, is_dst);
}
static int64_t row_byte(const transfer_case *c, int is_dst, int t, int l, int64_t s, int64_t b) {
  if (laid(c, is_dst)) return kvjit_host_layout_offset(&c->host, host_layer(c, l), s, b);
  return s * ((is_dst ? dst_row_of(c, t) : row_of(c, t)) + (is_dst ? c->dst_pad : c->src_pad)) + b;
}

static void describe(const void *cv, char *out, size_t cap) {
  const transfer_case *c = cv;
  snprintf(out, cap,
           "%s %s->%s batch=%lld k_row=%lld v_row=%lld pads=%lld/%lld slots=%lld/%lld istride=%lld/%lld layers=%d "
           "index=%s split=%d bad=%d bad_layer=%d convert=%s>%s scale=%d heads=%lld max_ctas=%d host_layout=%s",
           c->group, where(c->src), where(c->dst), (long long)c->batch, (long long)c->k_row, (long long)c->v_row,
           (long long)c->src_pad, (long long)c->dst_pad, (long long)c->src_slots, (long long)c->dst_slots,
           (long long)c->src_index_stride, (long long)c->dst_index_stride, c->layers,
           c->index_type == KVJIT_INDEX_INT32 ? "int32" : "int64", c->split, c->bad, c->bad_layer,
           dtype_word(c->src_dtype), dtype_word(c->dst_dtype), (int)c->scale, (long long)c->heads,
           c->max_ctas, kvjit_host_layout_name(c->host.kind));
}

/* The widest power of two <= 16 dividing every one of @p parts. */
static int vec_of(const int64_t *parts, size_t n) {
  int vec = 16;
  for (size_t i = 0; i < n; i++)
    while (vec > 1 && parts[i] % vec != 0) vec /= 2;
  return vec;
}

static int manifest_line(const void *cv, int sm, kvjit_pdl_mode pdl, char *out, size_t capacity) {
  const transfer_case *c = cv;
  /* The source's and the destination's alignments; converting, whole elements of both. */
  const int64_t src_parts[] = {c->k_row, c->v_row, c->k_row + c->src_pad, c->v_row + c->src_pad};
  const int64_t dst_parts[] = {dst_row_of(c, 0), dst_row_of(c, 1), dst_row_of(c, 0) + c->dst_pad,
                               dst_row_of(c, 1) + c->dst_pad};
  const int vs = vec_of(src_parts, COUNT(src_parts)), vd = vec_of(dst_parts, COUNT(dst_parts));
  const int es = src_elem(c), ed = dst_elem(c);
  const int vec = converting(c) ? (vs / es < vd / ed ? vs / es : vd / ed) * es : (vs < vd ? vs : vd);
  int n = snprintf(out, capacity, "transfer_kv arch=%d k_row_bytes=%lld v_row_bytes=%lld index=%s src=%s dst=%s "
                   "layers=%s pdl=%s split=%d vec=%d", sm, (long long)c->k_row, (long long)c->v_row,
                   c->index_type == KVJIT_INDEX_INT32 ? "int32" : "int64", where(c->src), where(c->dst),
                   c->layers > 0 ? "table" : "one", pdl == KVJIT_PDL_ON ? "on" : pdl == KVJIT_PDL_OFF ? "off" : "auto",
                   c->split, vec);
  if (n > 0 && converting(c) && (size_t)n < capacity) {
    static const char *const scales[] = {"none", "tensor", "head"};
    n += snprintf(out + n, capacity - (size_t)n, " src_dtype=%s dst_dtype=%s scale_kind=%s",
                  dtype_word(c->src_dtype), dtype_word(c->dst_dtype), scales[c->scale]);
    if (n > 0 && (size_t)n < capacity && c->scale == KVJIT_SCALE_PER_HEAD)
      n += snprintf(out + n, capacity - (size_t)n, " num_heads=%lld", (long long)c->heads);
  }
  /* ctas= only where it differs from the direction's default (few over the host link). */
  const int host = c->src == KVJIT_LOCATION_HOST || c->dst == KVJIT_LOCATION_HOST;
  if (n > 0 && (size_t)n < capacity && ((c->max_ctas > 0 && !host) || (c->max_ctas < 0 && host)))
    n += snprintf(out + n, capacity - (size_t)n, " ctas=%s", c->max_ctas > 0 ? "few" : "all");
  /* A host layout's view, as the library's canonical form has it: paged ones' pages, page_head's
   * runs of one head (the others are flat slots once canonical). */
  const char *side = laid(c, 0) ? "src" : "dst";
  if (n > 0 && (size_t)n < capacity && (c->host.kind == KVJIT_HOST_PAGE_FIRST_DIRECT || c->host.kind == KVJIT_HOST_PAGE_HEAD))
    n += snprintf(out + n, capacity - (size_t)n, " %s_page=%lld", side, (long long)c->host.page_size);
  if (n > 0 && (size_t)n < capacity && c->host.kind == KVJIT_HOST_PAGE_HEAD)
    n += snprintf(out + n, capacity - (size_t)n, " %s_atom=%lld", side, (long long)c->host.head_bytes);
  return c->batch > 0 && n > 0 && (size_t)n < capacity;
}

/* The variant a case uses: its manifest line, read back. */
static int to_variant(const void *c, kvjit_variant *out) {
  char line[256];
  return manifest_line(c, 0, ((const check_common *)c)->pdl, line, sizeof line) &&
         kvjit_variant_parse(out, line) == KVJIT_OK;
}

static void layout(const void *cv, check_world *w) {
  const transfer_case *c = cv;
  char name[24];
  for (int l = 0; l < num_layers(c); l++)
    for (int t = 0; t < tensors(c); t++) {
      int64_t row = row_of(c, t), drow = dst_row_of(c, t), ss = row + c->src_pad, ds = drow + c->dst_pad;
      /* A host layout's tensor is all in layer 0's buffer (every layer); 1 byte in the others. */
      const size_t host_bytes = (size_t)kvjit_host_layout_bytes(&c->host);
      snprintf(name, sizeof name, "src_%s[%d]", t ? "v" : "k", l);
      check_buf_add(w, name, c->src == KVJIT_LOCATION_HOST ? CHECK_HOST : CHECK_DEVICE,
                    laid(c, 0) ? (l ? 1 : host_bytes) : (size_t)((c->src_slots - 1) * ss + row), 0, ss, 0);
      snprintf(name, sizeof name, "dst_%s[%d]", t ? "v" : "k", l);
      check_buf_add(w, name, c->dst == KVJIT_LOCATION_HOST ? CHECK_HOST : CHECK_DEVICE,
                    laid(c, 1) ? (l ? 1 : host_bytes) : (size_t)((c->dst_slots - 1) * ds + drow), 0, ds, 1);
    }
  static const char *const tables[] = {"src_k table", "src_v table", "dst_k table", "dst_v table"};
  for (int i = 0; c->layers > 0 && i < 4; i++)
    check_buf_add(w, tables[i], CHECK_DEVICE, (size_t)c->layers * 8, 0, 0, 0);
  const int64_t strides[2] = {c->src_index_stride, c->dst_index_stride}, items = c->batch * w->sets;
  for (int a = 0; a < 2; a++) {
    size_t bytes = (size_t)(items > 0 ? (items - 1) * strides[a] + 1 : 1) * id_bytes(c);
    check_buf_add(w, a ? "dst_indices" : "src_indices", CHECK_DEVICE, bytes, 0, 0, 0);
  }
  for (int t = 0; converting(c) && c->scale != KVJIT_SCALE_NONE && t < tensors(c); t++)
    check_buf_add(w, t ? "v_scale" : "k_scale", CHECK_DEVICE,
                  (size_t)(num_layers(c) * scales_per_layer(c)) * sizeof(float), 0, 0, 0);
}

/* Scales of every layer: random in [1/64, 64), and per head a zero and a subnormal among them
 * (the exact division's path when quantizing). New ones at every fill (a graph replay reads them). */
static void fill_scales(const transfer_case *c, check_world *w) {
  for (int t = 0; converting(c) && c->scale != KVJIT_SCALE_NONE && t < tensors(c); t++) {
    float *s = (float *)(void *)w->bufs[scale_id(c, t)].init;
    const int64_t n = num_layers(c) * scales_per_layer(c);
    for (int64_t i = 0; i < n; i++) {
      const uint64_t r = check_rand(w);
      s[i] = ldexpf(1.0f + (float)(r % 1024) / 1024.0f, (int)((r >> 10) % 13) - 6);
    }
    if (c->scale == KVJIT_SCALE_PER_HEAD && c->heads >= 4) {
      s[1] = 0.0f;
      s[2] = 1e-40f;
    }
  }
}

/* Destination row @p dst of source row @p src (source bytes @p row) with @p scales: a copy, or
 * every value converted as tests/fp8_ref.h says the kernel must. */
static void convert_row(const transfer_case *c, unsigned char *dst, const unsigned char *src, int64_t row,
                        const float *scales) {
  fp8_ref_convert_row(dst, src, row, converting(c) ? (int)c->src_dtype : 0, converting(c) ? (int)c->dst_dtype : 0,
                      (int)c->scale, scales, c->heads);
}

static void fill_tables(const transfer_case *c, check_world *w) {
  for (int i = 0; c->layers > 0 && i < 4; i++) {
    const int t = i % 2, is_dst = i >= 2;
    uint64_t *ptrs = (uint64_t *)(void *)w->bufs[table_id(c, i)].init;
    for (int l = 0; l < c->layers; l++) {
      ptrs[l] = t < tensors(c) ? w->bufs[side_buf(c, is_dst, t, l)].ptr + (uint64_t)row_byte(c, is_dst, t, l, 0, 0) : 0;
      if (i == 2 && l == c->bad_layer) ptrs[l] = 0; /* a NULL destination K entry */
    }
  }
}

/* The bench driver's world: distinct random slots on both sides over every set; no reference. */
static void fill_timing(const transfer_case *c, check_world *w) {
  int64_t items = c->batch * w->sets;
  int64_t *ids = malloc(sizeof(int64_t) * (size_t)(items > 0 ? items : 1));
  if (ids == NULL) abort();
  for (int side = 0; side < 2; side++) {
    check_distinct_slots(w, ids, items, side ? c->dst_slots : c->src_slots);
    check_write_ids(w->bufs[ids_id(c, side)].init, ids, items, side ? c->dst_index_stride : c->src_index_stride,
                    c->index_type);
  }
  free(ids);
  fill_tables(c, w);
  fill_scales(c, w);
}

static void fill(const void *cv, check_world *w) {
  const transfer_case *c = cv;
  for (int i = 0; i < w->num_bufs; i++) check_buf_random(w, i); /* sources, poison, id gaps */
  if (w->timing) {
    fill_timing(c, w);
    return;
  }
  size_t items = (size_t)(c->batch > 0 ? c->batch : 1);
  int64_t *s_slots = malloc(items * sizeof *s_slots), *d_slots = malloc(items * sizeof *d_slots);
  check_distinct_slots(w, d_slots, c->batch, c->dst_slots);
  for (int64_t i = 0; i < c->batch; i++) {
    s_slots[i] = (int64_t)(check_rand(w) % (uint64_t)c->src_slots);
    if (c->bad && check_rand(w) % 5 == 0) {
      switch (check_rand(w) % 4) {
      case 0: s_slots[i] = -1 - (int64_t)(check_rand(w) % 3); break;
      case 1: d_slots[i] = -1; break;
      case 2: s_slots[i] = c->src_slots + (int64_t)(check_rand(w) % 7); break;
      default: d_slots[i] = c->dst_slots + (int64_t)(check_rand(w) % 7); break;
      }
    }
  }
  check_write_ids(w->bufs[ids_id(c, 0)].init, s_slots, c->batch, c->src_index_stride, c->index_type);
  check_write_ids(w->bufs[ids_id(c, 1)].init, d_slots, c->batch, c->dst_index_stride, c->index_type);
  fill_tables(c, w);
  fill_scales(c, w);
  w->expected_oob = 0;
  w->rows = 0;
  const int64_t widest = (c->k_row > c->v_row ? c->k_row : c->v_row) * 4; /* a row in any of the types */
  unsigned char *src_row = malloc((size_t)widest), *dst_row = malloc((size_t)widest);
  if (src_row == NULL || dst_row == NULL) abort();
  for (int64_t i = 0; i < c->batch; i++) {
    const int64_t s = s_slots[i], d = d_slots[i];
    if (s < 0 || d < 0) continue;
    if (s >= c->src_slots || d >= c->dst_slots) {
      w->expected_oob += (uint64_t)num_layers(c); /* once per item and layer */
      continue;
    }
    for (int l = 0; l < num_layers(c); l++) {
      if (l == c->bad_layer) {
        w->expected_oob++;
        continue;
      }
      for (int t = 0; t < tensors(c); t++) {
        const int64_t row = row_of(c, t), drow = dst_row_of(c, t);
        const float *scales = converting(c) && c->scale != KVJIT_SCALE_NONE
                                  ? (const float *)(const void *)w->bufs[scale_id(c, t)].init + l * scales_per_layer(c)
                                  : NULL;
        /* Gathered and scattered byte by byte where its side is a host layout. */
        const unsigned char *from = w->bufs[side_buf(c, 0, t, l)].init;
        unsigned char *to = w->bufs[side_buf(c, 1, t, l)].want;
        for (int64_t b = 0; b < row; b++) src_row[b] = from[row_byte(c, 0, t, l, s, b)];
        convert_row(c, dst_row, src_row, row, scales);
        for (int64_t b = 0; b < drow; b++) to[row_byte(c, 1, t, l, d, b)] = dst_row[b];
      }
      w->rows++;
    }
  }
  free(src_row);
  free(dst_row);
  free(s_slots);
  free(d_slots);
}

void check_transfer_args(const void *cv, const check_world *w, const check_launch *l, kvjit_transfer_kv_args *out) {
  const transfer_case *c = cv;
  kvjit_transfer_kv_args a = KVJIT_TRANSFER_KV_ARGS_INIT;
  const int64_t set = w->sets > 1 ? l->step % w->sets : 0; /* the set's ids */
  int two = tensors(c) > 1;
  if (c->layers > 0) {
    a.src_k = check_ptr(w, table_id(c, 0));
    a.src_v = two ? check_ptr(w, table_id(c, 1)) : NULL;
    a.dst_k = check_ptr(w, table_id(c, 2));
    a.dst_v = two ? check_ptr(w, table_id(c, 3)) : NULL;
    a.num_layers = c->layers;
  } else {
    /* One layer: its caches' first byte (a host layout's: that layer's slot 0). */
    a.src_k = (const char *)check_ptr(w, side_buf(c, 0, 0, 0)) + row_byte(c, 0, 0, 0, 0, 0);
    a.src_v = two ? (const char *)check_ptr(w, side_buf(c, 0, 1, 0)) + row_byte(c, 0, 1, 0, 0, 0) : NULL;
    a.dst_k = (char *)check_ptr(w, side_buf(c, 1, 0, 0)) + row_byte(c, 1, 0, 0, 0, 0);
    a.dst_v = two ? (char *)check_ptr(w, side_buf(c, 1, 1, 0)) + row_byte(c, 1, 1, 0, 0, 0) : NULL;
  }
  const size_t src_off = (size_t)(set * c->batch * c->src_index_stride) * id_bytes(c),
               dst_off = (size_t)(set * c->batch * c->dst_index_stride) * id_bytes(c);
  a.src_indices = (const char *)check_ptr(w, ids_id(c, 0)) + src_off;
  a.dst_indices = (const char *)check_ptr(w, ids_id(c, 1)) + dst_off;
  a.index_type = c->index_type;
  a.src_index_stride = c->src_index_stride;
  a.dst_index_stride = c->dst_index_stride;
  a.batch = c->batch;
  a.k_row_bytes = c->k_row;
  a.v_row_bytes = c->v_row;
  a.src_k_stride = c->k_row + c->src_pad;
  a.dst_k_stride = dst_row_of(c, 0) + c->dst_pad;
  a.src_v_stride = c->v_row + c->src_pad;
  a.dst_v_stride = dst_row_of(c, 1) + c->dst_pad;
  a.src_dtype = c->src_dtype;
  a.dst_dtype = c->dst_dtype;
  a.scale_kind = c->scale;
  a.num_heads = c->heads;
  if (converting(c) && c->scale != KVJIT_SCALE_NONE) {
    a.k_scale = (const float *)check_ptr(w, scale_id(c, 0));
    a.v_scale = two ? (const float *)check_ptr(w, scale_id(c, 1)) : NULL;
  }
  a.max_ctas = c->max_ctas;
  if (laid(c, 0)) {
    a.src_k_layout = &c->host_view;
    a.src_v_layout = two ? &c->host_view : NULL;
    a.src_k_stride = a.src_v_stride = 0;
  }
  if (laid(c, 1)) {
    a.dst_k_layout = &c->host_view;
    a.dst_v_layout = two ? &c->host_view : NULL;
    a.dst_k_stride = a.dst_v_stride = 0;
  }
  a.src_num_slots = c->src_slots;
  a.dst_num_slots = c->dst_slots;
  a.src = c->src;
  a.dst = c->dst;
  a.split = c->split;
  a.pdl = l->pdl;
  a.stream = l->stream;
  *out = a;
}

static kvjit_status launch(kvjit_context *ctx, const void *cv, const check_world *w, const check_launch *l) {
  kvjit_transfer_kv_args a;
  check_transfer_args(cv, w, l, &a);
  return l->prepare ? kvjit_transfer_kv_prepare(ctx, &a) : kvjit_transfer_kv(ctx, &a);
}

/* ---- the bench driver's cells: bench_transfer's grid ----------------------------------------------- */

/* Rows 512..16384 B x batch 64..65536 x device->device, device->host, host->device; one layer,
 * int64 ids, PDL automatic; 131072 slots on both sides (twice the largest batch). Then
 * bench_transfer --layers 8's cells: 8 layers through pointer tables, rows 2048 and 4096 B x batch
 * 1024..16384, 32768 slots per layer. */
static const int64_t bench_rows[] = {512, 2048, 4096, 16384};
static const int64_t bench_batches[] = {64, 1024, 4096, 16384, 65536};
static const int64_t layers_rows[] = {2048, 4096};
static const int64_t layers_batches[] = {1024, 4096, 16384};
enum {
  BENCH_DIRS = 3,
  BENCH_ONE = COUNT(bench_rows) * COUNT(bench_batches) * BENCH_DIRS,
  BENCH_LAYERS = COUNT(layers_rows) * COUNT(layers_batches) * BENCH_DIRS,
  BENCH_TABLE_LAYERS = 8,
};

static size_t bench_count(void) { return BENCH_ONE + BENCH_LAYERS; }

static void bench_get(size_t i, void *out, int timing) {
  transfer_case *c = out;
  if (i < BENCH_ONE) {
    size_t cells = COUNT(bench_rows) * COUNT(bench_batches);
    int dir = (int)(i / cells);
    *c = base("bench", bench_batches[i % COUNT(bench_batches)], bench_rows[(i % cells) / COUNT(bench_batches)], dir);
    c->src_slots = c->dst_slots = timing ? 2 * 65536 : c->batch + c->batch / 3 + 5;
    return;
  }
  size_t k = i - BENCH_ONE, cells = COUNT(layers_rows) * COUNT(layers_batches);
  *c = base("bench_layers", layers_batches[k % COUNT(layers_batches)], layers_rows[(k % cells) / COUNT(layers_batches)],
            (int)(k / cells));
  c->layers = BENCH_TABLE_LAYERS;
  c->src_slots = c->dst_slots = timing ? 2 * 16384 : c->batch + c->batch / 3 + 5;
}

static void bench_cell(const void *cv, char *out, size_t capacity) {
  const transfer_case *c = cv;
  snprintf(out, capacity, "%s2%s,%lld,%lld,%d", c->src == KVJIT_LOCATION_HOST ? "h" : "d",
           c->dst == KVJIT_LOCATION_HOST ? "h" : "d", (long long)c->k_row, (long long)c->batch,
           c->layers > 0 ? c->layers : 1);
}

/* Each K and V row read once and written once. */
static double bench_bytes(const void *cv) {
  const transfer_case *c = cv;
  return 2.0 * (double)c->batch * (double)(c->k_row + c->v_row) * (c->layers > 0 ? c->layers : 1);
}

/* Ids rotate through permutations of the slots (distinct within a set and across sets). */
static int bench_sets(const void *cv, int launches) {
  const transfer_case *c = cv;
  int64_t sets = (c->src_slots < c->dst_slots ? c->src_slots : c->dst_slots) / (c->batch > 0 ? c->batch : 1);
  return sets < 1 ? 1 : sets > launches ? launches : (int)sets;
}

/* bench_transfer's rule: host-link cells run at ~55 GB/s, not at the device's bandwidth. */
static int bench_max_launches(const void *cv) {
  (void)cv;
  return 64;
}

const check_op check_transfer_op = {
    .name = "transfer_kv",
    .case_size = sizeof(transfer_case),
    .count = case_count,
    .get = case_get,
    .describe = describe,
    .manifest_line = manifest_line,
    .layout = layout,
    .fill = fill,
    .launch = launch,
    .bench_count = bench_count,
    .bench_get = bench_get,
    .bench_columns = "direction,row_bytes,batch,layers",
    .bench_cell = bench_cell,
    .bench_bytes = bench_bytes,
    .bench_sets = bench_sets,
    .bench_max_launches = bench_max_launches,
    .bench_launches_measured = 1,
    .space = space,
    .from_variant = from_variant,
    .to_variant = to_variant,
};
