// unit suite: kernel_src/transfer_kv.cuh's indexing run on the host. The template is plain C++
// but for a few CUDA built-ins (emulated below), so every thread of every block runs in turn
// (the kernel has no barrier) and the result is compared byte for byte with a model: which rows
// land where, the bad-slot policy and its counter, tails, splits, two items per group, layer
// tables with a NULL entry, a grid capped at a few CTAs striding over the batch, and the
// conversions on the way (fp8 <-> bf16/f32, per-tensor and per-head scales per layer, the
// integer fp8 encoding) against tests/fp8_ref.h. The GPU tests check the same on the device;
// this catches indexing and conversion mistakes on machines without one. Each configuration is
// one build (tests/meson.build), whose -D values are the template's arguments.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>
struct dim3_ {
  unsigned x, y, z;
};
static dim3_ threadIdx, blockIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __grid_constant__
#define __align__(n) alignas(n)
#define __noinline__ __attribute__((noinline))
static unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
  unsigned long long o = *p;
  *p += v;
  return o;
}
static unsigned int __float_as_uint(float f) {
  unsigned int u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static float __uint_as_float(unsigned int u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static float __frcp_rn(float x) { return 1.0f / x; }
static float __fmul_rn(float a, float b) { return a * b; }
static float __fmaf_rn(float a, float b, float c) { return std::fmaf(a, b, c); }
#ifndef KVJIT_SRC_DTYPE
#define KVJIT_SRC_DTYPE 0
#define KVJIT_DST_DTYPE 0
#define KVJIT_SCALE 0
#define KVJIT_HEADS 0
#endif
#ifndef KVJIT_LOOP_CTAS
#define KVJIT_LOOP_CTAS 0 /* > 0: Loop, the grid capped at this many blocks */
#endif
/* SGLang's host layouts on one side (issue 29): 0 flat rows; 1 layer_first (2, L, size, H, D);
 * 2 page_first (2, size, L, H, D); 3 page_first_direct (2, pages, L, page, H, D); 4 page_head (2,
 * pages, H, page, L, D). KVJIT_HOST_SIDE: 0 the source, 1 the destination; KVJIT_HOST_HEADS: H
 * (a row is H heads); KVJIT_HOST_PAGE: slots per page; KVJIT_HOST_LAYERS: L of the host tensor. */
#ifndef KVJIT_HOST_LAYOUT
#define KVJIT_HOST_LAYOUT 0
#define KVJIT_HOST_SIDE 0
#define KVJIT_HOST_HEADS 1
#define KVJIT_HOST_PAGE 1
#define KVJIT_HOST_LAYERS 1
#endif
#include "fp8_ref.h"
// The op's source is store_kv_cache.cuh, layout.cuh, transfer_kv.cuh (src/ops/transfer_kv/meson.build).
#include "store_kv_cache.cuh"
#include "layout.cuh"
#include "transfer_kv.cuh"
static const int ES = KVJIT_SRC_DTYPE == 3 ? 4 : KVJIT_SRC_DTYPE == 1 || KVJIT_SRC_DTYPE == 2 ? 2 : 1;
static const int ED = KVJIT_DST_DTYPE == 3 ? 4 : KVJIT_DST_DTYPE == 1 || KVJIT_DST_DTYPE == 2 ? 2 : 1;

// One row converted as the reference says: src_row_bytes source bytes into dst.
static void ref_row(unsigned char *dst, const unsigned char *src, int64_t src_row_bytes, const float *scales) {
  fp8_ref_convert_row(dst, src, src_row_bytes, KVJIT_SRC_DTYPE, KVJIT_DST_DTYPE, KVJIT_SCALE, scales, KVJIT_HEADS);
}
static uint64_t rs = 88172645463325252ull;
static uint64_t rnd() {
  rs ^= rs << 13;
  rs ^= rs >> 7;
  rs ^= rs << 17;
  return rs;
}

/* One side's caches (K or V): one buffer holding every layer, and where byte b of slot s's row of
 * layer l is, written from the layouts' shapes (not from layout.cuh's arithmetic). */
struct side_geometry {
  int kind;                 /* KVJIT_HOST_LAYOUT's values, 0 on the flat side */
  int64_t row, stride;      /* bytes of a row; flat: bytes between slots */
  int64_t slots, layers;    /* layers the buffer holds */
  int64_t heads, page;
  int64_t bytes() const {
    if (kind == 0) return layers * slots * stride;
    const int64_t pages = (slots + page - 1) / page;
    return 2 * layers * pages * page * row; /* generous: every layout fits */
  }
  int64_t at(int64_t l, int64_t s, int64_t b) const {
    const int64_t L = layers, P = page, H = heads, hd = row / heads, pg = s / page, q = s % page;
    switch (kind) {
    case 0: return (l * slots + s) * stride + b;
    case 1: return (l * slots + s) * row + b;                 /* [L, size, H, D] */
    case 2: return (s * L + l) * row + b;                     /* [size, L, H, D] */
    case 3: return ((pg * L + l) * P + q) * row + b;          /* [pages, L, P, H, D] */
    default: return (((pg * H + b / hd) * P + q) * L + l) * hd + b % hd; /* [pages, H, P, L, D] */
    }
  }
  /* The view of layer l's caches (its base: at(l, 0, 0)), as the library's canonical form has it. */
  kvjit_view_strides view() const {
    kvjit_view_strides v = {0, stride, {0, 0, 0}};
    const int64_t L = layers, P = page, H = heads, hd = row / heads;
    if (kind == 1) v.slot_stride = row;
    if (kind == 2) v.slot_stride = L * row;
    if (kind == 3) v = {L * P * row, row, {0, 0, 0}};
    if (kind == 4) v = {H * P * L * hd, L * hd, {P * L * hd, 0, 0}};
    return v;
  }
};
/* The template's view arguments of a side: page, atom, E0 (flat once canonical: all 0). */
#define SIDE_PAGE(k) ((k) >= 3 ? KVJIT_HOST_PAGE : 0)
#define SIDE_ATOM(k, row) ((k) == 3 ? (row) : (k) == 4 ? (row) / KVJIT_HOST_HEADS : 0)
#define SIDE_E0(k) ((k) == 4 ? KVJIT_HOST_HEADS : 0)

int main() {
  const int64_t B = BATCH, SS = B + 9, DS = B + 13, KP = 2 * KVJIT_VEC, VP = KVJIT_VEC;
  /* The destination's rows hold the source's elements in its own type; pads of whole vectors. */
  const int64_t KD = KVJIT_K_ROW_BYTES / ES * ED, VD = KVJIT_V_ROW_BYTES / ES * ED;
  const int L = KVJIT_TABLE ? 3 : 1;
  const int SK_KIND = KVJIT_HOST_SIDE == 0 ? KVJIT_HOST_LAYOUT : 0, DK_KIND = KVJIT_HOST_SIDE == 1 ? KVJIT_HOST_LAYOUT : 0;
  /* One layer of a laid-out host tensor of several: layer 1 (its base is not the tensor's). */
  const int64_t HL = KVJIT_HOST_LAYOUT ? (L > KVJIT_HOST_LAYERS ? L : KVJIT_HOST_LAYERS) : L;
  const int first_layer = KVJIT_HOST_LAYOUT && !KVJIT_TABLE && HL > 1 ? 1 : 0;
  side_geometry g[2][2] = {
      {{SK_KIND, KVJIT_K_ROW_BYTES, KVJIT_K_ROW_BYTES + KP, SS, HL, KVJIT_HOST_HEADS, KVJIT_HOST_PAGE},
       {SK_KIND, KVJIT_V_ROW_BYTES, KVJIT_V_ROW_BYTES + VP, SS, HL, KVJIT_HOST_HEADS, KVJIT_HOST_PAGE}},
      {{DK_KIND, KD, KD + KP / ES * ED, DS, HL, KVJIT_HOST_HEADS, KVJIT_HOST_PAGE},
       {DK_KIND, VD, VD + VP / ES * ED, DS, HL, KVJIT_HOST_HEADS, KVJIT_HOST_PAGE}}};
  /* Scales per layer: random in [1/64, 64), and per head a zero and a subnormal (the exact path). */
  const int64_t NS = KVJIT_SCALE == 2 ? KVJIT_HEADS : 1;
  std::vector<float> ks((size_t)(L * NS)), vs((size_t)(L * NS));
  for (size_t i = 0; i < ks.size(); i++) {
    ks[i] = std::ldexp(1.0f + (float)(rnd() % 1000) / 1000.0f, (int)(rnd() % 12) - 6);
    vs[i] = std::ldexp(1.0f + (float)(rnd() % 1000) / 1000.0f, (int)(rnd() % 12) - 6);
  }
  if (KVJIT_SCALE == 2 && KVJIT_HEADS >= 3) {
    ks[1] = 0.0f;
    vs[2] = 1e-40f;
  }
  /* buf[side][tensor], 16-aligned; want: the destination's expected bytes. */
  std::vector<unsigned char> store[2][2], want[2];
  unsigned char *buf[2][2];
  for (int side = 0; side < 2; side++)
    for (int t = 0; t < 2; t++) {
      store[side][t].resize((size_t)g[side][t].bytes() + 64);
      for (auto &x : store[side][t]) x = (unsigned char)rnd();
      buf[side][t] = (unsigned char *)(((uintptr_t)store[side][t].data() + 15) & ~(uintptr_t)15);
    }
  for (int t = 0; t < 2; t++) want[t] = store[1][t];
  auto want_at = [&](int t) { return want[t].data() + (buf[1][t] - store[1][t].data()); };
  std::vector<int64_t> si(B), di(B);
  std::vector<int64_t> perm(DS);
  for (int64_t i = 0; i < DS; i++) perm[i] = i;
  for (int64_t i = DS - 1; i > 0; i--) {
    int64_t j = rnd() % (i + 1);
    std::swap(perm[i], perm[j]);
  }
  uint64_t expect = 0;
  for (int64_t i = 0; i < B; i++) {
    si[i] = rnd() % SS;
    di[i] = perm[i];
    if (rnd() % 7 == 0) si[i] = -1;
    if (rnd() % 9 == 0) di[i] = DS + 3;
  }
  const int null_layer = KVJIT_TABLE ? 1 : -1; /* its destination K entry is NULL: skipped, counted */
  const int64_t rows[2] = {KVJIT_K_ROW_BYTES, KVJIT_V_ROW_BYTES};
  std::vector<unsigned char> src_row, dst_row;
  for (int64_t i = 0; i < B; i++) {
    if (si[i] < 0 || di[i] < 0) continue;
    if (si[i] >= SS || di[i] >= DS) {
      expect += L;
      continue;
    }
    for (int l = 0; l < L; l++) {
      if (l == null_layer) {
        expect++;
        continue;
      }
      const int64_t hl = l + first_layer;
      for (int t = 0; t < (KVJIT_V_ROW_BYTES ? 2 : 1); t++) {
        src_row.resize((size_t)rows[t]);
        dst_row.resize((size_t)g[1][t].row);
        for (int64_t b = 0; b < rows[t]; b++) src_row[(size_t)b] = buf[0][t][g[0][t].at(hl, si[i], b)];
        ref_row(dst_row.data(), src_row.data(), rows[t], (t ? vs.data() : ks.data()) + l * NS);
        for (int64_t b = 0; b < g[1][t].row; b++) want_at(t)[g[1][t].at(hl, di[i], b)] = dst_row[(size_t)b];
      }
    }
  }
  std::vector<int64_t> idx64s(B), idx64d(B);
  std::vector<int> idx32s(B), idx32d(B);
  for (int64_t i = 0; i < B; i++) {
    idx64s[i] = si[i];
    idx64d[i] = di[i];
    idx32s[i] = (int)si[i];
    idx32d[i] = (int)di[i];
  }
  kvjit_transfer_kv_params p;
  memset(&p, 0, sizeof p);
  std::vector<uint64_t> tab[4];
  const void **ptrs[4] = {&p.src_k, &p.src_v, &p.dst_k, &p.dst_v};
  for (int c = 0; c < 4; c++) {
    const int side = c / 2, t = c % 2;
    for (int l = 0; l < L; l++) {
      const bool null_entry = c == 2 && l == null_layer;
      tab[c].push_back(null_entry ? 0 : (uint64_t)(buf[side][t] + g[side][t].at(l + first_layer, 0, 0)));
    }
    *ptrs[c] = KVJIT_TABLE ? (const void *)tab[c].data() : (const void *)tab[c][0];
  }
  p.src_indices = KVJIT_INDEX_INT64 ? (const void *)idx64s.data() : (const void *)idx32s.data();
  p.dst_indices = KVJIT_INDEX_INT64 ? (const void *)idx64d.data() : (const void *)idx32d.data();
  p.src_k_view = g[0][0].view();
  p.src_v_view = g[0][1].view();
  p.dst_k_view = g[1][0].view();
  p.dst_v_view = g[1][1].view();
  p.src_k_stride = p.src_k_view.slot_stride;
  p.src_v_stride = p.src_v_view.slot_stride;
  p.dst_k_stride = p.dst_k_view.slot_stride;
  p.dst_v_stride = p.dst_v_view.slot_stride;
  p.k_scale = ks.data();
  p.v_scale = vs.data();
  p.scale_stride = KVJIT_TABLE && KVJIT_SCALE ? NS : 0;
  p.src_index_stride = 1;
  p.dst_index_stride = 1;
  p.batch = B;
  p.src_num_slots = SS;
  p.dst_num_slots = DS;
  // geometry as kvjit_op_blocks
  uint64_t units = (uint64_t)B * KVJIT_SPLIT, groups = KVJIT_ITEMS == 2 ? (units + 1) / 2 : units,
           per = KVJIT_BLOCK / KVJIT_LANES;
  unsigned blocks = (unsigned)((groups + per - 1) / per);
  if (KVJIT_LOOP_CTAS > 0 && blocks > (unsigned)KVJIT_LOOP_CTAS) blocks = KVJIT_LOOP_CTAS; /* the op's cap */
  blockDim = {KVJIT_BLOCK, 1, 1};
  gridDim = {blocks, (unsigned)L, 1};
  for (unsigned y = 0; y < (unsigned)L; y++)
    for (unsigned b = 0; b < blocks; b++)
      for (unsigned t = 0; t < KVJIT_BLOCK; t++) {
        blockIdx = {b, y, 0};
        threadIdx = {t, 0, 0};
        kvjit_transfer_kv<KVJIT_K_ROW_BYTES, KVJIT_V_ROW_BYTES, KVJIT_SPLIT, KVJIT_VEC, KVJIT_LANES, KVJIT_BLOCK,
                          KVJIT_ITEMS, KVJIT_INDEX_INT64, KVJIT_PDL, KVJIT_TABLE, KVJIT_SRC_DTYPE, KVJIT_DST_DTYPE,
                          KVJIT_SCALE, KVJIT_HEADS ? KVJIT_K_ROW_BYTES / KVJIT_HEADS : 0,
                          KVJIT_HEADS ? KVJIT_V_ROW_BYTES / KVJIT_HEADS : 0, 1, (KVJIT_LOOP_CTAS > 0),
                          SIDE_PAGE(KVJIT_HOST_SIDE == 0 ? KVJIT_HOST_LAYOUT : 0),
                          SIDE_ATOM(KVJIT_HOST_SIDE == 0 ? KVJIT_HOST_LAYOUT : 0, KVJIT_K_ROW_BYTES),
                          SIDE_E0(KVJIT_HOST_SIDE == 0 ? KVJIT_HOST_LAYOUT : 0), 0, 0,
                          SIDE_PAGE(KVJIT_HOST_SIDE == 1 ? KVJIT_HOST_LAYOUT : 0),
                          SIDE_ATOM(KVJIT_HOST_SIDE == 1 ? KVJIT_HOST_LAYOUT : 0, KVJIT_K_ROW_BYTES / ES * ED),
                          SIDE_E0(KVJIT_HOST_SIDE == 1 ? KVJIT_HOST_LAYOUT : 0), 0, 0, 0>(p);
      }
  int bad = 0;
  for (int t = 0; t < (KVJIT_V_ROW_BYTES ? 2 : 1); t++) {
    if (memcmp(store[1][t].data(), want[t].data(), store[1][t].size())) {
      size_t at = 0;
      while (store[1][t][at] == want[t][at]) at++;
      printf("%s differs first at byte %zu of its buffer\n", t ? "V" : "K", at);
      bad = 1;
    }
  }
  if (kvjit_transfer_kv_oob != expect) {
    printf("oob %llu expected %llu\n", kvjit_transfer_kv_oob, (unsigned long long)expect);
    bad = 1;
  }
  printf("%s\n", bad ? "FAIL" : "ok");
  return bad;
}
