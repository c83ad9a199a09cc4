/*
 * reference (reimplemented): the store_kv_cache algorithm of SGLang's JIT kernel
 * (python/sglang/jit_kernel/csrc/elementwise/kvcache.cuh), re-expressed by kvjit for benchmarking
 * only. It is the peer kvjit is measured against, so it keeps the reference's choices on purpose,
 * including the ones kvjit's own kernel improves on:
 *  - 128-thread blocks of 4 warps; one warp per (item, split); split chosen by the host
 *    (4 if row % 2048 == 0, 2 if % 1024 == 0, else 1);
 *  - per-lane vector width fixed at compile time: 16 B if the split is a multiple of 512 B,
 *    8 B if of 256 B, else 4 B; a masked tail step for the remainder;
 *  - in each unrolled step both loads (K, V) are issued before both stores;
 *  - an always-on device assert 0 <= index < size_limit, between the index load and the K/V loads
 *    (the reference compiles without NDEBUG);
 *  - PDL: griddepcontrol.wait before the index read, launch_dependents after the stores.
 * Self-contained for NVRTC: no standard header. Instantiate through name expressions such as
 * "ref_store_kvcache<2048, 4, true, long long>" (index type int or long long).
 */

/* Device assert without <assert.h>: NVRTC provides __assertfail, the hook the CUDA headers' assert
 * uses; it traps and makes the CUDA context unusable, as the reference's assert does. */
extern "C" __device__ void __assertfail(const char *message, const char *file, unsigned int line,
                                        const char *function, decltype(sizeof(0)) char_size);
#define REF_ASSERT(cond) ((cond) ? (void)0 : __assertfail(#cond, __FILE__, __LINE__, __func__, sizeof(char)))

/* Layout mirrored by struct ref_store_params in bench_peers.c. */
struct RefStoreKVParams {
  const void *__restrict__ k;
  const void *__restrict__ v;
  void *__restrict__ k_cache;
  void *__restrict__ v_cache;
  const void *__restrict__ indices;
  long long stride_k_bytes;
  long long stride_v_bytes;
  long long stride_cache_bytes;
  long long stride_indices;
  unsigned batch_size;
  long long size_limit;
};

template <int kBytes> struct RefLaneVec;
template <> struct RefLaneVec<16> { typedef uint4 type; };
template <> struct RefLaneVec<8> { typedef uint2 type; };
template <> struct RefLaneVec<4> { typedef unsigned type; };

__device__ __forceinline__ void ref_pdl_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void ref_pdl_trigger() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

/* One warp copies kSplitBytes of K and of V; lane l handles vectors l, l + 32, l + 64, ... */
template <long long kSplitBytes>
__device__ __forceinline__ void ref_copy_kv_warp(const void *__restrict__ k_src, const void *__restrict__ v_src,
                                                 void *__restrict__ k_dst, void *__restrict__ v_dst) {
  constexpr int kWidth = kSplitBytes % (16 * 32) == 0 ? 16 : kSplitBytes % (8 * 32) == 0 ? 8 : kSplitBytes % 4 == 0 ? 4 : 0;
  static_assert(kWidth > 0, "row bytes / split must be a multiple of 4");
  typedef typename RefLaneVec<kWidth>::type vec_t;
  constexpr long long kLoopBytes = kWidth * 32;
  constexpr long long kLoopCount = kSplitBytes / kLoopBytes;
  constexpr long long kVectors = kSplitBytes / kWidth;

  const unsigned lane = threadIdx.x % 32;
  const vec_t *__restrict__ ks = static_cast<const vec_t *>(k_src) + lane;
  const vec_t *__restrict__ vs = static_cast<const vec_t *>(v_src) + lane;
  vec_t *__restrict__ kd = static_cast<vec_t *>(k_dst) + lane;
  vec_t *__restrict__ vd = static_cast<vec_t *>(v_dst) + lane;

#pragma unroll
  for (long long i = 0; i < kLoopCount; ++i) {
    const vec_t k = ks[i * 32];
    const vec_t v = vs[i * 32];
    kd[i * 32] = k;
    vd[i * 32] = v;
  }
  if constexpr (kLoopCount * kLoopBytes < kSplitBytes) {
    if (kLoopCount * 32 + lane < kVectors) {
      const vec_t k = ks[kLoopCount * 32];
      const vec_t v = vs[kLoopCount * 32];
      kd[kLoopCount * 32] = k;
      vd[kLoopCount * 32] = v;
    }
  }
}

template <long long kRowBytes, int kSplit, bool kUsePDL, typename T>
__global__ void ref_store_kvcache(const __grid_constant__ RefStoreKVParams params) {
  static_assert(kRowBytes > 0 && kRowBytes % 4 == 0, "rows must be a multiple of 4 bytes");
  static_assert(kRowBytes % kSplit == 0, "split must divide the row");
  constexpr long long kSplitBytes = kRowBytes / kSplit;
  const unsigned warp_id = blockIdx.x * 4 + threadIdx.x / 32;
  const unsigned item_id = warp_id / kSplit;
  const unsigned split_id = warp_id % kSplit;
  if (item_id >= params.batch_size) return;

  const T *index_ptr = static_cast<const T *>(params.indices) + item_id * params.stride_indices;
  if constexpr (kUsePDL) ref_pdl_wait();

  const T index = *index_ptr;
  REF_ASSERT(index >= 0 && index < params.size_limit);
  const char *k_src = static_cast<const char *>(params.k) + item_id * params.stride_k_bytes + split_id * kSplitBytes;
  const char *v_src = static_cast<const char *>(params.v) + item_id * params.stride_v_bytes + split_id * kSplitBytes;
  char *k_dst = static_cast<char *>(params.k_cache) + index * params.stride_cache_bytes + split_id * kSplitBytes;
  char *v_dst = static_cast<char *>(params.v_cache) + index * params.stride_cache_bytes + split_id * kSplitBytes;

  ref_copy_kv_warp<kSplitBytes>(k_src, v_src, k_dst, v_dst);
  if constexpr (kUsePDL) ref_pdl_trigger();
}
