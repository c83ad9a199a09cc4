// bench_ops' transfer_kv reference: the algorithm of SGLang's JIT hierarchical-cache kernels
// (python/sglang/jit_kernel/csrc/hicache.cuh, hicache_transfer_per_layer / _all_layer),
// rewritten here for kvjit's NVRTC path (no sgl_kernel or tvm-ffi headers).
//
// What it does, as SGLang does it: a worker is a warp cut into kUnroll parts (32 / kUnroll
// lanes); the grid is min(ceil(items / workers per block), kBlockQuota) blocks of kNumThreads
// threads that stride over the items; each iteration moves 128 bytes per worker (lanes x
// 128 / lanes bytes), loads of the whole K row, then the whole V row, then both stores, with
// streaming (.cs) loads and stores; rows must be a multiple of 128 bytes. The host side picks
// kUnroll 4 for rows <= 512 B, 2 for <= 1024 B, else 1, and kBlockQuota 2 (SGLang's default, to
// leave the SMs to the model; bench_ops also runs a quota that fills the GPU).

typedef unsigned long long ref_u64;

struct RefTransferParams {
  void *k_cache_dst;
  void *v_cache_dst;
  const void *indices_dst;
  const void *k_cache_src;
  const void *v_cache_src;
  const void *indices_src;
  ref_u64 length;
  ref_u64 kv_cache_src_stride;  // bytes
  ref_u64 kv_cache_dst_stride;
  ref_u64 num_layers;  // all-layer kernel: the four cache pointers are tables of this many
};

template <int kBytes> struct RefPackage;
template <> struct RefPackage<16> { typedef uint4 type; };
template <> struct RefPackage<8> { typedef uint2 type; };
template <> struct RefPackage<4> { typedef unsigned int type; };

__device__ __forceinline__ uint4 ref_load(const uint4 *p) {
  uint4 v;
  asm volatile("ld.global.cs.v4.b32 {%0,%1,%2,%3},[%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 ref_load(const uint2 *p) {
  uint2 v;
  asm volatile("ld.global.cs.v2.b32 {%0,%1},[%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
__device__ __forceinline__ unsigned int ref_load(const unsigned int *p) {
  unsigned int v;
  asm volatile("ld.global.cs.b32 %0,[%1];" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ void ref_store(uint4 *p, const uint4 &v) {
  asm volatile("st.global.cs.v4.b32 [%0],{%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}
__device__ __forceinline__ void ref_store(uint2 *p, const uint2 &v) {
  asm volatile("st.global.cs.v2.b32 [%0],{%1,%2};" ::"l"(p), "r"(v.x), "r"(v.y));
}
__device__ __forceinline__ void ref_store(unsigned int *p, const unsigned int &v) {
  asm volatile("st.global.cs.b32 [%0],%1;" ::"l"(p), "r"(v));
}

// One worker moves one row: kBytes / (lanes x unit) rounds, every load before every store.
template <int kBytes, int kLanes> struct RefRow {
  static constexpr int kUnit = 128 / kLanes;
  typedef typename RefPackage<kUnit>::type Package;
  static constexpr int kLoops = kBytes / (kUnit * kLanes);
  static_assert(kBytes % 128 == 0, "rows must be a multiple of 128 bytes");
  Package data[kLoops];
  __device__ __forceinline__ void load(const void *src, int lane) {
    const Package *p = static_cast<const Package *>(src);
#pragma unroll
    for (int i = 0; i < kLoops; ++i) data[i] = ref_load(p + i * kLanes + lane);
  }
  __device__ __forceinline__ void store(void *dst, int lane) const {
    Package *p = static_cast<Package *>(dst);
#pragma unroll
    for (int i = 0; i < kLoops; ++i) ref_store(p + i * kLanes + lane, data[i]);
  }
};

template <typename T, int kElementSize, int kUnroll, int kBlockQuota, int kNumThreads>
__global__ void __launch_bounds__(kNumThreads, 1) ref_transfer_per_layer(const __grid_constant__ RefTransferParams p) {
  constexpr int kLanes = 32 / kUnroll;
  constexpr int kWarpsPerBlock = kNumThreads / kLanes;
  constexpr int kWorkers = kWarpsPerBlock * kBlockQuota;
  const int lane = threadIdx.x % kLanes;
  const ref_u64 worker = (ref_u64)blockIdx.x * kWarpsPerBlock + threadIdx.x / kLanes;
  for (ref_u64 i = worker; i < p.length; i += kWorkers) {
    const T src = static_cast<const T *>(p.indices_src)[i];
    const T dst = static_cast<const T *>(p.indices_dst)[i];
    const char *src_k = static_cast<const char *>(p.k_cache_src) + src * p.kv_cache_src_stride;
    const char *src_v = static_cast<const char *>(p.v_cache_src) + src * p.kv_cache_src_stride;
    char *dst_k = static_cast<char *>(p.k_cache_dst) + dst * p.kv_cache_dst_stride;
    char *dst_v = static_cast<char *>(p.v_cache_dst) + dst * p.kv_cache_dst_stride;
    RefRow<kElementSize, kLanes> k, v;
    k.load(src_k, lane);
    v.load(src_v, lane);
    k.store(dst_k, lane);
    v.store(dst_v, lane);
  }
}

template <typename T, int kElementSize, int kUnroll, int kBlockQuota, int kNumThreads>
__global__ void __launch_bounds__(kNumThreads, 1) ref_transfer_all_layer(const __grid_constant__ RefTransferParams p) {
  constexpr int kLanes = 32 / kUnroll;
  constexpr int kWarpsPerBlock = kNumThreads / kLanes;
  constexpr int kWorkers = kWarpsPerBlock * kBlockQuota;
  const int lane = threadIdx.x % kLanes;
  const ref_u64 worker = (ref_u64)blockIdx.x * kWarpsPerBlock + threadIdx.x / kLanes;
  for (ref_u64 i = worker; i < p.length; i += kWorkers) {
    const T src = static_cast<const T *>(p.indices_src)[i];
    const T dst = static_cast<const T *>(p.indices_dst)[i];
    for (ref_u64 layer = 0; layer < p.num_layers; ++layer) {
      const char *src_k = reinterpret_cast<const char *const *>(p.k_cache_src)[layer] + src * p.kv_cache_src_stride;
      const char *src_v = reinterpret_cast<const char *const *>(p.v_cache_src)[layer] + src * p.kv_cache_src_stride;
      char *dst_k = reinterpret_cast<char *const *>(p.k_cache_dst)[layer] + dst * p.kv_cache_dst_stride;
      char *dst_v = reinterpret_cast<char *const *>(p.v_cache_dst)[layer] + dst * p.kv_cache_dst_stride;
      RefRow<kElementSize, kLanes> k, v;
      k.load(src_k, lane);
      v.load(src_v, lane);
      k.store(dst_k, lane);
      v.store(dst_v, lane);
    }
  }
}
