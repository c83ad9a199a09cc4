// unit suite: kernel_src/transfer_kv.cuh's indexing run on the host. The template is plain C++
// but for a few CUDA built-ins (emulated below), so every thread of every block runs in turn
// (the kernel has no barrier) and the result is compared byte for byte with a model: which rows
// land where, the bad-slot policy and its counter, tails, splits, two items per group, layer
// tables with a NULL entry. The GPU tests check the same on the device; this catches indexing
// mistakes on machines without one. Each configuration is one build (tests/meson.build), whose
// -D values are the template's arguments.
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
static unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
  unsigned long long o = *p;
  *p += v;
  return o;
}
#include "transfer_kv.cuh"
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
  const int L = KVJIT_TABLE ? 3 : 1;
  std::vector<std::vector<unsigned char>> sk(L), sv(L), dk(L), dv(L), wk(L), wv(L);
  for (int l = 0; l < L; l++) {
    sk[l].resize(SS * KS + 64);
    sv[l].resize(SS * VS + 64);
    dk[l].resize(DS * KS + 64);
    dv[l].resize(DS * VS + 64);
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
      memcpy(al(wk[l]) + di[i] * KS, al(sk[l]) + si[i] * KS, KVJIT_K_ROW_BYTES);
      if (KVJIT_V_ROW_BYTES) memcpy(al(wv[l]) + di[i] * VS, al(sv[l]) + si[i] * VS, KVJIT_V_ROW_BYTES);
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
  p.dst_k_stride = KS;
  p.dst_v_stride = VS;
  p.src_index_stride = 1;
  p.dst_index_stride = 1;
  p.batch = B;
  p.src_num_slots = SS;
  p.dst_num_slots = DS;
  // geometry as kvjit_op_blocks
  uint64_t units = (uint64_t)B * KVJIT_SPLIT, groups = KVJIT_ITEMS == 2 ? (units + 1) / 2 : units,
           per = KVJIT_BLOCK / KVJIT_LANES;
  unsigned blocks = (unsigned)((groups + per - 1) / per);
  blockDim = {KVJIT_BLOCK, 1, 1};
  gridDim = {blocks, (unsigned)L, 1};
  for (unsigned y = 0; y < (unsigned)L; y++)
    for (unsigned b = 0; b < blocks; b++)
      for (unsigned t = 0; t < KVJIT_BLOCK; t++) {
        blockIdx = {b, y, 0};
        threadIdx = {t, 0, 0};
        kvjit_transfer_kv<KVJIT_K_ROW_BYTES, KVJIT_V_ROW_BYTES, KVJIT_SPLIT, KVJIT_VEC, KVJIT_LANES, KVJIT_BLOCK,
                          KVJIT_ITEMS, KVJIT_INDEX_INT64, KVJIT_PDL, KVJIT_TABLE>(p);
      }
  int bad = 0;
  for (int l = 0; l < L; l++) {
    if (memcmp(al(dk[l]), al(wk[l]), DS * KS)) {
      printf("K layer %d differs\n", l);
      bad = 1;
    }
    if (KVJIT_V_ROW_BYTES && memcmp(al(dv[l]), al(wv[l]), DS * VS)) {
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
