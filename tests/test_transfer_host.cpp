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
#include "fp8_ref.h"
// The op's source is store_kv_cache.cuh then transfer_kv.cuh (src/ops/transfer_kv/meson.build).
#include "store_kv_cache.cuh"
#include "transfer_kv.cuh"
static const int ES = KVJIT_SRC_DTYPE == 3 ? 4 : KVJIT_SRC_DTYPE == 1 || KVJIT_SRC_DTYPE == 2 ? 2 : 1;
static const int ED = KVJIT_DST_DTYPE == 3 ? 4 : KVJIT_DST_DTYPE == 1 || KVJIT_DST_DTYPE == 2 ? 2 : 1;
static const bool QUANT = KVJIT_SRC_DTYPE >= 1 && KVJIT_SRC_DTYPE <= 3 && KVJIT_DST_DTYPE >= 4;
static const bool DEQUANT = KVJIT_SRC_DTYPE >= 4 && KVJIT_DST_DTYPE >= 1 && KVJIT_DST_DTYPE <= 3;

// One row converted as the reference says: src_row_bytes source bytes into dst.
static void ref_row(unsigned char *dst, const unsigned char *src, int64_t src_row_bytes, const float *scales) {
  if (!QUANT && !DEQUANT) {
    memcpy(dst, src, (size_t)src_row_bytes);
    return;
  }
  const int64_t elems = src_row_bytes / ES, head_elems = KVJIT_HEADS ? elems / KVJIT_HEADS : elems;
  for (int64_t e = 0; e < elems; e++) {
    const float scale = KVJIT_SCALE == 2 ? scales[e / head_elems] : KVJIT_SCALE == 1 ? scales[0] : 1.0f;
    if (QUANT) {
      float x;
      if (ES == 4) {
        memcpy(&x, src + 4 * e, 4);
      } else {
        uint16_t h;
        memcpy(&h, src + 2 * e, 2);
        x = KVJIT_SRC_DTYPE == 2 ? fp8_ref_bf16_to_float(h) : fp8_ref_f16_to_float(h);
      }
      if (KVJIT_SCALE) x = x / scale;
      dst[e] = fp8_ref_encode(x, KVJIT_DST_DTYPE == 4);
    } else {
      const uint32_t bits = fp8_ref_dequant(src[e], KVJIT_SRC_DTYPE == 4, KVJIT_SCALE != 0, scale, KVJIT_DST_DTYPE);
      memcpy(dst + ED * e, &bits, (size_t)ED); /* little endian: the low bytes */
    }
  }
}
static uint64_t rs = 88172645463325252ull;
static uint64_t rnd() {
  rs ^= rs << 13;
  rs ^= rs >> 7;
  rs ^= rs << 17;
  return rs;
}
int main() {
  const int64_t B = BATCH, SS = B + 9, DS = B + 13, KP = 2 * KVJIT_VEC, VP = KVJIT_VEC;
  const int64_t KS = KVJIT_K_ROW_BYTES + KP, VS = KVJIT_V_ROW_BYTES + VP;
  /* The destination's rows hold the source's elements in its own type; pads of whole vectors. */
  const int64_t KD = KVJIT_K_ROW_BYTES / ES * ED, VD = KVJIT_V_ROW_BYTES / ES * ED;
  const int64_t KDS = KD + KP / ES * ED, VDS = VD + VP / ES * ED;
  const int L = KVJIT_TABLE ? 3 : 1;
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
  std::vector<std::vector<unsigned char>> sk(L), sv(L), dk(L), dv(L), wk(L), wv(L);
  for (int l = 0; l < L; l++) {
    sk[l].resize(SS * KS + 64);
    sv[l].resize(SS * VS + 64);
    dk[l].resize(DS * KDS + 64);
    dv[l].resize(DS * VDS + 64);
    for (auto &x : sk[l]) x = rnd();
    for (auto &x : sv[l]) x = rnd();
    for (auto &x : dk[l]) x = rnd();
    for (auto &x : dv[l]) x = rnd();
    wk[l] = dk[l];
    wv[l] = dv[l];
  }
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
  // align buffers to 16: use offsets
  auto al = [](std::vector<unsigned char> &v) {
    return (unsigned char *)(((uintptr_t)v.data() + 15) & ~(uintptr_t)15);
  };
  std::vector<const void *> tsk(L), tsv(L), tdk(L), tdv(L);
  for (int l = 0; l < L; l++) {
    tsk[l] = al(sk[l]);
    tsv[l] = al(sv[l]);
    tdk[l] = al(dk[l]);
    tdv[l] = al(dv[l]);
  }
  const int null_layer = KVJIT_TABLE ? 1 : -1; /* its destination K entry is NULL: skipped, counted */
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
      ref_row(al(wk[l]) + di[i] * KDS, al(sk[l]) + si[i] * KS, KVJIT_K_ROW_BYTES, ks.data() + l * NS);
      if (KVJIT_V_ROW_BYTES) ref_row(al(wv[l]) + di[i] * VDS, al(sv[l]) + si[i] * VS, KVJIT_V_ROW_BYTES, vs.data() + l * NS);
    }
  }
  // wk offsets differ from dk since al() depends on data pointer; compare aligned regions instead
  std::vector<int64_t> idx64s(B), idx64d(B);
  std::vector<int> idx32s(B), idx32d(B);
  for (int64_t i = 0; i < B; i++) {
    idx64s[i] = si[i];
    idx64d[i] = di[i];
    idx32s[i] = (int)si[i];
    idx32d[i] = (int)di[i];
  }
  kvjit_transfer_kv_params p;
  std::vector<uint64_t> tab[4];
  if (KVJIT_TABLE) {
    for (int l = 0; l < L; l++) {
      tab[0].push_back((uint64_t)tsk[l]);
      tab[1].push_back((uint64_t)tsv[l]);
      tab[2].push_back(l == null_layer ? 0 : (uint64_t)tdk[l]);
      tab[3].push_back((uint64_t)tdv[l]);
    }
    p.src_k = tab[0].data();
    p.src_v = tab[1].data();
    p.dst_k = tab[2].data();
    p.dst_v = tab[3].data();
  } else {
    p.src_k = tsk[0];
    p.src_v = tsv[0];
    p.dst_k = tdk[0];
    p.dst_v = tdv[0];
  }
  p.src_indices = KVJIT_INDEX_INT64 ? (const void *)idx64s.data() : (const void *)idx32s.data();
  p.dst_indices = KVJIT_INDEX_INT64 ? (const void *)idx64d.data() : (const void *)idx32d.data();
  p.src_k_stride = KS;
  p.src_v_stride = VS;
  p.dst_k_stride = KDS;
  p.dst_v_stride = VDS;
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
                          KVJIT_HEADS ? KVJIT_V_ROW_BYTES / KVJIT_HEADS : 0, 1, (KVJIT_LOOP_CTAS > 0)>(p);
      }
  int bad = 0;
  for (int l = 0; l < L; l++) {
    if (memcmp(al(dk[l]), al(wk[l]), DS * KDS)) {
      printf("K layer %d differs\n", l);
      bad = 1;
    }
    if (KVJIT_V_ROW_BYTES && memcmp(al(dv[l]), al(wv[l]), DS * VDS)) {
      printf("V layer %d differs\n", l);
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
