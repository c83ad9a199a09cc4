// kvjit store_kv_cache: k_cache[indices[i]] = k[i], v_cache[indices[i]] = v[i], rows of bytes.
//
// This is a template: src/codegen.c prepends the variant's #defines and compiles the whole with
// NVRTC for the exact GPU. Everything that shapes the loops is a compile-time constant, so each
// lane's work is fully unrolled and the tails are masked only where a tail exists.
//
//   KVJIT_K_ROW_BYTES   bytes of one K row
//   KVJIT_V_ROW_BYTES   bytes of one V row; 0 compiles the V path out (K only, MLA caches)
//   KVJIT_SPLIT         slices each row is cut into; a slice is handled by one lane group
//   KVJIT_VEC           bytes per access (16, 8, 4, 2, 1): divides every pointer, stride and slice
//   KVJIT_LANES         lanes per group (power of two <= 32)
//   KVJIT_BLOCK         threads per block (a multiple of 32)
//   KVJIT_INDEX_INT64   1: indices are int64, 0: int32
//   KVJIT_PDL           1: programmatic dependent launch wait/trigger compiled in (sm_90+)
//
// Per lane: the index load and every K/V load are issued first (the sources do not depend on the
// index), then the index is checked, then every store. So a decode-sized store costs one memory
// latency, not index-latency + row-latency, and no store sits between two loads.

#if !defined(KVJIT_K_ROW_BYTES) || !defined(KVJIT_V_ROW_BYTES) || !defined(KVJIT_SPLIT) || \
    !defined(KVJIT_VEC) || !defined(KVJIT_LANES) || !defined(KVJIT_BLOCK) ||               \
    !defined(KVJIT_INDEX_INT64) || !defined(KVJIT_PDL)
#error "store_kv_cache.cuh needs the variant's #defines (see src/codegen.c)"
#endif

typedef unsigned long long kvjit_u64;
typedef long long kvjit_i64;

// Kernel parameters, passed by value as one __grid_constant__ struct. The host mirror is
// kvjit_store_kv_params in src/codegen.h: every field is 8 bytes, so the layouts agree.
struct kvjit_store_kv_params {
  const unsigned char *k;
  const unsigned char *v;
  unsigned char *k_cache;
  unsigned char *v_cache;
  const void *indices;
  kvjit_i64 k_stride;        // bytes
  kvjit_i64 v_stride;        // bytes
  kvjit_i64 k_cache_stride;  // bytes
  kvjit_i64 v_cache_stride;  // bytes
  kvjit_i64 index_stride;    // elements
  kvjit_i64 batch;
  kvjit_i64 num_slots;
  kvjit_i64 skip_slot;       // -1: none
};

// Slot ids at or past num_slots seen by this variant in the current CUDA context (read and reset
// by kvjit_store_kv_cache_oob_count()).
extern "C" __device__ kvjit_u64 kvjit_store_kv_oob = 0;

template <int N> struct kvjit_vec;
template <> struct kvjit_vec<16> { struct __align__(16) type { kvjit_u64 lo, hi; }; };
template <> struct kvjit_vec<8> { typedef kvjit_u64 type; };
template <> struct kvjit_vec<4> { typedef unsigned int type; };
template <> struct kvjit_vec<2> { typedef unsigned short type; };
template <> struct kvjit_vec<1> { typedef unsigned char type; };
typedef kvjit_vec<KVJIT_VEC>::type kvjit_chunk;

constexpr kvjit_i64 kSplit = KVJIT_SPLIT;
constexpr int kLanes = KVJIT_LANES;
constexpr int kVec = KVJIT_VEC;
constexpr int kGroupsPerBlock = KVJIT_BLOCK / KVJIT_LANES;
constexpr kvjit_i64 kKSlice = (kvjit_i64)KVJIT_K_ROW_BYTES / KVJIT_SPLIT;
constexpr kvjit_i64 kVSlice = (kvjit_i64)KVJIT_V_ROW_BYTES / KVJIT_SPLIT;
constexpr kvjit_i64 kKChunks = kKSlice / kVec;                   // chunks in one K slice
constexpr kvjit_i64 kVChunks = kVSlice / kVec;
constexpr kvjit_i64 kKPerLane = (kKChunks + kLanes - 1) / kLanes; // chunks each lane copies
constexpr kvjit_i64 kVPerLane = (kVChunks + kLanes - 1) / kLanes;
// Up to this many chunks per lane are all held in registers at once; wider slices (only with a
// small explicit split) go round by round, kRound chunks at a time.
constexpr kvjit_i64 kMaxInFlight = 16;

static_assert(KVJIT_K_ROW_BYTES > 0 && KVJIT_V_ROW_BYTES >= 0, "row bytes");
static_assert(KVJIT_K_ROW_BYTES % KVJIT_SPLIT == 0 && KVJIT_V_ROW_BYTES % KVJIT_SPLIT == 0,
              "split must divide both rows");
static_assert(kKSlice % kVec == 0 && kVSlice % kVec == 0, "slices must be whole vectors");
static_assert(kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0, "lanes: power of two <= 32");
static_assert(KVJIT_BLOCK % 32 == 0 && KVJIT_BLOCK <= 1024, "block");

// Chunk c of this lane is chunk (c * kLanes + lane) of the slice; only the last one can be past
// the end, and only when the chunk count is not a multiple of the lane count.
template <kvjit_i64 kChunks>
__device__ __forceinline__ bool kvjit_in_slice(kvjit_i64 c, int lane) {
  if (kChunks % kLanes == 0) return true;
  return c * kLanes + lane < kChunks;
}

// K/V loads are relaxed gpu-scope loads on purpose. Their values are only used on the store path,
// and ptxas sinks weak loads (ld.global, even inside asm volatile; also .cg/.cs/.nc) past the index
// check: the SASS showed index load -> exit -> K/V loads, which serialises two memory latencies.
// A strong load may not be sunk or dropped, and compiles to the same instruction as an ld.global.cg
// streaming load (LDG.E.128.STRONG.GPU: cached in L2, not L1), so it costs nothing else.
__device__ __forceinline__ void kvjit_ld(kvjit_vec<16>::type &d, const unsigned char *p) {
  asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(d.lo), "=l"(d.hi) : "l"(p));
}
__device__ __forceinline__ void kvjit_ld(kvjit_u64 &d, const unsigned char *p) {
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(d) : "l"(p));
}
__device__ __forceinline__ void kvjit_ld(unsigned int &d, const unsigned char *p) {
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(d) : "l"(p));
}
__device__ __forceinline__ void kvjit_ld(unsigned short &d, const unsigned char *p) {
  asm volatile("ld.relaxed.gpu.global.u16 %0, [%1];" : "=h"(d) : "l"(p));
}
__device__ __forceinline__ void kvjit_ld(unsigned char &d, const unsigned char *p) {
  unsigned short t;
  asm volatile("ld.relaxed.gpu.global.u8 %0, [%1];" : "=h"(t) : "l"(p));
  d = (unsigned char)t;
}

template <kvjit_i64 kChunks, kvjit_i64 kPerLane>
__device__ __forceinline__ void kvjit_load_all(kvjit_chunk (&buf)[kPerLane > 0 ? kPerLane : 1],
                                               const unsigned char *src, int lane) {
#pragma unroll
  for (kvjit_i64 c = 0; c < kPerLane; ++c) {
    if (kvjit_in_slice<kChunks>(c, lane)) {
      kvjit_ld(buf[c], src + (c * kLanes + lane) * kVec);
    }
  }
}

template <kvjit_i64 kChunks, kvjit_i64 kPerLane>
__device__ __forceinline__ void kvjit_store_all(const kvjit_chunk (&buf)[kPerLane > 0 ? kPerLane : 1],
                                                unsigned char *dst, int lane) {
#pragma unroll
  for (kvjit_i64 c = 0; c < kPerLane; ++c) {
    if (kvjit_in_slice<kChunks>(c, lane)) {
      *reinterpret_cast<kvjit_chunk *>(dst + (c * kLanes + lane) * kVec) = buf[c];
    }
  }
}

// Wide slices: rounds of kRound chunks, each round's loads before its stores.
template <kvjit_i64 kChunks, kvjit_i64 kPerLane>
__device__ __forceinline__ void kvjit_copy_rounds(const unsigned char *src, unsigned char *dst, int lane) {
  constexpr kvjit_i64 kRound = 8;
  for (kvjit_i64 base = 0; base < kPerLane; base += kRound) {
    kvjit_chunk buf[kRound];
#pragma unroll
    for (kvjit_i64 r = 0; r < kRound; ++r) {
      const kvjit_i64 c = base + r;
      if (c < kPerLane && kvjit_in_slice<kChunks>(c, lane)) {
        kvjit_ld(buf[r], src + (c * kLanes + lane) * kVec);
      }
    }
#pragma unroll
    for (kvjit_i64 r = 0; r < kRound; ++r) {
      const kvjit_i64 c = base + r;
      if (c < kPerLane && kvjit_in_slice<kChunks>(c, lane)) {
        *reinterpret_cast<kvjit_chunk *>(dst + (c * kLanes + lane) * kVec) = buf[r];
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(KVJIT_BLOCK)
kvjit_store_kv(const __grid_constant__ kvjit_store_kv_params p) {
  const kvjit_u64 group = (kvjit_u64)blockIdx.x * kGroupsPerBlock + threadIdx.x / kLanes;
  const int lane = (int)(threadIdx.x % kLanes);
  const kvjit_u64 item = group / (kvjit_u64)kSplit;
  const kvjit_i64 slice = (kvjit_i64)(group % (kvjit_u64)kSplit);
  if (item >= (kvjit_u64)p.batch) return;

#if KVJIT_PDL
  // Inputs (indices, K, V) may be written by the kernel before us: wait before the first load.
  // Dependents may be launched right away; their own wait still waits for all of this grid.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif

#if KVJIT_INDEX_INT64
  const kvjit_i64 slot = static_cast<const kvjit_i64 *>(p.indices)[item * (kvjit_u64)p.index_stride];
#else
  const kvjit_i64 slot = static_cast<const int *>(p.indices)[item * (kvjit_u64)p.index_stride];
#endif
  const unsigned char *k_src = p.k + item * (kvjit_u64)p.k_stride + slice * kKSlice;
#if KVJIT_V_ROW_BYTES > 0
  const unsigned char *v_src = p.v + item * (kvjit_u64)p.v_stride + slice * kVSlice;
#endif

  if constexpr (kKPerLane + kVPerLane <= kMaxInFlight) {
    kvjit_chunk kbuf[kKPerLane > 0 ? kKPerLane : 1];
    kvjit_load_all<kKChunks, kKPerLane>(kbuf, k_src, lane);
#if KVJIT_V_ROW_BYTES > 0
    kvjit_chunk vbuf[kVPerLane > 0 ? kVPerLane : 1];
    kvjit_load_all<kVChunks, kVPerLane>(vbuf, v_src, lane);
#endif
    // Negative: a padded token (skip). skip_slot: the reserved padding slot (skip).
    // Past the cache: skip and count once per item; never a trap, the CUDA context survives.
    if (slot < 0 || slot == p.skip_slot) return;
    if (slot >= p.num_slots) {
      if (slice == 0 && lane == 0) atomicAdd(&kvjit_store_kv_oob, 1ull);
      return;
    }
    kvjit_store_all<kKChunks, kKPerLane>(kbuf, p.k_cache + slot * p.k_cache_stride + slice * kKSlice, lane);
#if KVJIT_V_ROW_BYTES > 0
    kvjit_store_all<kVChunks, kVPerLane>(vbuf, p.v_cache + slot * p.v_cache_stride + slice * kVSlice, lane);
#endif
  } else {
    if (slot < 0 || slot == p.skip_slot) return;
    if (slot >= p.num_slots) {
      if (slice == 0 && lane == 0) atomicAdd(&kvjit_store_kv_oob, 1ull);
      return;
    }
    kvjit_copy_rounds<kKChunks, kKPerLane>(k_src, p.k_cache + slot * p.k_cache_stride + slice * kKSlice, lane);
#if KVJIT_V_ROW_BYTES > 0
    kvjit_copy_rounds<kVChunks, kVPerLane>(v_src, p.v_cache + slot * p.v_cache_stride + slice * kVSlice, lane);
#endif
  }
}
