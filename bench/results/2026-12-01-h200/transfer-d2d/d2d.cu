// D2D exploration: kvjit_transfer_kv configurations, random vs consecutive slots, batch 65536.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include "tk.cuh"
#define CK(x) do { cudaError_t e = (x); if (e) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1);} } while (0)
static const long long SLOTS = 131072, BATCH = 65536;
static unsigned long long mix64(unsigned long long x){x^=x>>33;x*=0xff51afd7ed558ccdull;x^=x>>33;x*=0xc4ceb9fe1a85ec53ull;return x^(x>>33);}
static long long *idx_src, *idx_dst, *idx_seq; static cudaEvent_t e0, e1;
static unsigned char *sk, *sv, *dk, *dv;

// A hinted warp-per-slice kernel: U chunks of 16 B per lane, nc loads that skip L1, streaming stores.
template <int R, int U, int BLOCK>
__global__ void __launch_bounds__(BLOCK) hinted(kvjit_transfer_kv_params p) {
  constexpr int SLICE = 32 * 16 * U, SPLIT = R / SLICE;
  long long unit = (long long)blockIdx.x * (BLOCK / 32) + threadIdx.x / 32;
  if (unit >= p.batch * SPLIT) return;
  int lane = threadIdx.x & 31;
  long long item = unit / SPLIT, slice = unit % SPLIT;
  long long s = ((const long long*)p.src_indices)[item], d = ((const long long*)p.dst_indices)[item];
  const uint4 *a = (const uint4*)((const unsigned char*)p.src_k + s * p.src_k_stride + slice * SLICE);
  const uint4 *b = (const uint4*)((const unsigned char*)p.src_v + s * p.src_v_stride + slice * SLICE);
  uint4 *c = (uint4*)((unsigned char*)p.dst_k + d * p.dst_k_stride + slice * SLICE);
  uint4 *e = (uint4*)((unsigned char*)p.dst_v + d * p.dst_v_stride + slice * SLICE);
  uint4 x[U], y[U];
#pragma unroll
  for (int i = 0; i < U; i++) { x[i] = __ldcs(a + i * 32 + lane); y[i] = __ldcs(b + i * 32 + lane); }
#pragma unroll
  for (int i = 0; i < U; i++) { __stcs(c + i * 32 + lane, x[i]); __stcs(e + i * 32 + lane, y[i]); }
}

template <class F> static float timeit(F launch) {
  for (int i = 0; i < 3; i++) launch();
  CK(cudaDeviceSynchronize());
  std::vector<float> t;
  for (int r = 0; r < 9; r++) {
    cudaEventRecord(e0); for (int i = 0; i < 10; i++) launch(); cudaEventRecord(e1); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1); t.push_back(ms * 100.f);  // us per launch
  }
  std::sort(t.begin(), t.end()); CK(cudaGetLastError()); return t[4];
}
static kvjit_transfer_kv_params params(long long R, bool seq) {
  kvjit_transfer_kv_params p{}; p.src_k = sk; p.src_v = sv; p.dst_k = dk; p.dst_v = dv;
  p.src_indices = seq ? idx_seq : idx_src; p.dst_indices = seq ? idx_seq : idx_dst;
  p.src_k_stride = p.src_v_stride = p.dst_k_stride = p.dst_v_stride = R; p.src_index_stride = p.dst_index_stride = 1;
  p.batch = BATCH; p.src_num_slots = p.dst_num_slots = SLOTS; return p;
}
template <int R, int CPL, int ITEMS, int BLOCK> static void cfg() {
  constexpr int CH = R / 16, PER = 32 * CPL;
  constexpr int SPLIT = CH > PER ? CH / PER : 1;
  constexpr int NEED = (CH / SPLIT + CPL - 1) / CPL;
  constexpr int LANES = NEED >= 32 ? 32 : NEED >= 16 ? 16 : NEED >= 8 ? 8 : NEED >= 4 ? 4 : NEED >= 2 ? 2 : 1;
  long long units = BATCH * SPLIT, groups = BLOCK / LANES, blocks = (units + groups * ITEMS - 1) / (groups * ITEMS);
  float t[2];
  for (int q = 0; q < 2; q++) { auto p = params(R, q); t[q] = timeit([&] { kvjit_transfer_kv<R, R, SPLIT, 16, LANES, BLOCK, ITEMS, 1, 0, 0><<<blocks, BLOCK>>>(p); }); }
  double gbps = 4.0 * R * BATCH / (t[0] * 1e3);
  printf("row %5d kvjit split %2d lanes %2d cpl %d items %d block %3d: random %8.2f us consecutive %8.2f us  %5.1f%%  %.0f GB/s(r+w)\n", R, SPLIT, LANES, CPL, ITEMS, BLOCK, t[0], t[1], 100.0 * t[1] / t[0], gbps);
}
template <int R, int U, int BLOCK> static void hcfg() {
  constexpr int SPLIT = R / (32 * 16 * U);
  if constexpr (SPLIT >= 1) {
    long long units = BATCH * SPLIT, blocks = (units + BLOCK / 32 - 1) / (BLOCK / 32);
    float t[2];
    for (int q = 0; q < 2; q++) { auto p = params(R, q); t[q] = timeit([&] { hinted<R, U, BLOCK><<<blocks, BLOCK>>>(p); }); }
    printf("row %5d hinted U %d block %3d:                   random %8.2f us consecutive %8.2f us  %5.1f%%\n", R, U, BLOCK, t[0], t[1], 100.0 * t[1] / t[0]);
  }
}
template <int R> static void row() {
  size_t bytes = (size_t)SLOTS * R;
  CK(cudaMalloc(&sk, bytes)); CK(cudaMalloc(&sv, bytes)); CK(cudaMalloc(&dk, bytes)); CK(cudaMalloc(&dv, bytes));
  cudaMemset(sk, 1, bytes); cudaMemset(sv, 2, bytes); cudaMemset(dk, 0, bytes); cudaMemset(dv, 0, bytes);
  // bound: one DtoD memcpy of the same bytes (K and V)
  float m = timeit([&] { cudaMemcpyAsync(dk, sk, (size_t)BATCH * R, cudaMemcpyDeviceToDevice); cudaMemcpyAsync(dv, sv, (size_t)BATCH * R, cudaMemcpyDeviceToDevice); });
  printf("row %5d memcpy K+V %8.2f us\n", R, m);
  cfg<R, 1, 1, 128>(); cfg<R, 1, 1, 256>(); cfg<R, 1, 1, 512>(); cfg<R, 1, 2, 128>(); cfg<R, 1, 2, 256>();
  cfg<R, 2, 1, 128>(); cfg<R, 2, 1, 256>(); cfg<R, 4, 1, 128>(); cfg<R, 4, 1, 256>();
  hcfg<R, 1, 128>(); hcfg<R, 1, 256>(); hcfg<R, 2, 128>(); hcfg<R, 4, 128>();
  cudaFree(sk); cudaFree(sv); cudaFree(dk); cudaFree(dv);
}
int main() {
  std::vector<long long> h(SLOTS);
  long long **t[3] = {&idx_src, &idx_dst, &idx_seq};
  for (int k = 0; k < 3; k++) {
    for (long long i = 0; i < SLOTS; i++) h[i] = i;
    if (k < 2) { unsigned long long s = 0x9e3779b97f4a7c15ull * (k + 1); for (long long i = SLOTS - 1; i > 0; i--) { long long j = mix64(s + i) % (i + 1); std::swap(h[i], h[j]); } }
    CK(cudaMalloc(t[k], SLOTS * 8)); CK(cudaMemcpy(*t[k], h.data(), SLOTS * 8, cudaMemcpyHostToDevice));
  }
  cudaEventCreate(&e0); cudaEventCreate(&e1);
  row<512>(); row<2048>(); row<4096>(); row<16384>();
}
