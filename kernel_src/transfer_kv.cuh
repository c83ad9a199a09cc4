// kvjit transfer_kv: dst_k[dst_idx[i]] = src_k[src_idx[i]], dst_v[dst_idx[i]] = src_v[src_idx[i]],
// rows of bytes, between any two caches the GPU can address: device memory or pinned host memory
// (UVA), so one kernel serves device->device, device->host, host->device and host->host.
//
// A C++ template: each variant is one instance, kvjit_transfer_kv<...>, that
// src/ops/transfer_kv_plan.c names with an NVRTC name expression, so that one program can hold the
// kernels of many variants (prewarm compiles them together). The arguments, in order:
//
//   KRowBytes   bytes of one K row
//   VRowBytes   bytes of one V row; 0 compiles the V path out (K only, MLA caches)
//   Split       slices each row is cut into; a slice is handled by one lane group
//   Vec         bytes per access (16, 8, 4, 2, 1): divides every stride and slice, and the cache
//               pointers (checked by the host, or per layer here with Table)
//   Lanes       lanes per group (power of two <= 32)
//   Block       most threads per block (a multiple of 32)
//   Items       items each lane group moves (1 or 2; 2 only with one access per lane)
//   Index64     1: slot ids are int64, 0: int32 (both index arrays)
//   Pdl         1: programmatic dependent launch wait/trigger compiled in (sm_90+)
//   Table       1: the four cache pointers are device arrays of per-layer cache pointers,
//               layer = blockIdx.y; 0: they are the caches (one layer, gridDim.y == 1)
//
// Per lane: both slot ids are loaded and checked first (a bad source slot is never read), then
// every row load of the lane is issued, then every store.

typedef unsigned long long kvjit_u64;
typedef long long kvjit_i64;

// Kernel parameters, passed by value as one __grid_constant__ struct. The host mirror is
// kvjit_transfer_kv_params in src/ops/transfer_kv_plan.h: every field is 8 bytes.
struct kvjit_transfer_kv_params {
  const void *src_k;  // a cache, or (Table) a device array of one cache pointer per layer
  const void *src_v;
  const void *dst_k;
  const void *dst_v;
  const void *src_indices;
  const void *dst_indices;
  kvjit_i64 src_k_stride;  // bytes between slots
  kvjit_i64 src_v_stride;
  kvjit_i64 dst_k_stride;
  kvjit_i64 dst_v_stride;
  kvjit_i64 src_index_stride;  // elements
  kvjit_i64 dst_index_stride;
  kvjit_i64 batch;
  kvjit_i64 src_num_slots;
  kvjit_i64 dst_num_slots;
};

// Slot ids at or past their cache's slot count, and (Table) layer pointers that are NULL or not
// aligned to Vec, seen by the kernels of this program in the current CUDA context: read and reset
// by kvjit_op_oob_count().
extern "C" __device__ kvjit_u64 kvjit_transfer_kv_oob = 0;

template <int N> struct kvjit_tvec;
template <> struct kvjit_tvec<16> { struct __align__(16) type { kvjit_u64 lo, hi; }; };
template <> struct kvjit_tvec<8> { typedef kvjit_u64 type; };
template <> struct kvjit_tvec<4> { typedef unsigned int type; };
template <> struct kvjit_tvec<2> { typedef unsigned short type; };
template <> struct kvjit_tvec<1> { typedef unsigned char type; };

// Every compile-time constant of one variant.
template <kvjit_i64 KRowBytes, kvjit_i64 VRowBytes, int Split, int Vec, int Lanes, int Block, int Items, int Index64,
          int Pdl, int Table>
struct kvjit_transfer_cfg {
  typedef typename kvjit_tvec<Vec>::type chunk;
  static constexpr kvjit_i64 kVRowBytes = VRowBytes;
  static constexpr int kIndex64 = Index64, kPdl = Pdl, kTable = Table;
  static constexpr kvjit_i64 kSplit = Split;
  static constexpr int kLanes = Lanes;
  static constexpr int kVec = Vec;
  static constexpr int kItems = Items;
  static constexpr kvjit_i64 kKSlice = KRowBytes / Split;
  static constexpr kvjit_i64 kVSlice = VRowBytes / Split;
  static constexpr kvjit_i64 kKChunks = kKSlice / kVec;
  static constexpr kvjit_i64 kVChunks = kVSlice / kVec;
  static constexpr kvjit_i64 kKPerLane = (kKChunks + kLanes - 1) / kLanes;
  static constexpr kvjit_i64 kVPerLane = (kVChunks + kLanes - 1) / kLanes;
  // Up to this many chunks per lane (K and V together) are held in registers at once; wider slices
  // (only with a small explicit split) go round by round, kRound chunks at a time.
  static constexpr kvjit_i64 kMaxInFlight = 16;
  static constexpr kvjit_i64 kRound = 8;

  static_assert(KRowBytes > 0 && VRowBytes >= 0, "row bytes");
  static_assert(KRowBytes % Split == 0 && VRowBytes % Split == 0, "split must divide both rows");
  static_assert(kKSlice % kVec == 0 && kVSlice % kVec == 0, "slices must be whole vectors");
  static_assert(kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0, "lanes: power of two <= 32");
  static_assert(Block % 32 == 0 && Block <= 1024, "block");
  static_assert(kItems == 1 || (kItems == 2 && kKPerLane <= 1 && kVPerLane <= 1),
                "two items per group: one access per lane only");
};

template <class C, kvjit_i64 kChunks>
__device__ __forceinline__ bool kvjit_t_in_slice(kvjit_i64 c, int lane) {
  if (kChunks % C::kLanes == 0) return true;
  return c * C::kLanes + lane < kChunks;
}

template <class C>
__device__ __forceinline__ kvjit_i64 kvjit_t_slot(const void *indices, kvjit_u64 item, kvjit_i64 stride) {
  if constexpr (C::kIndex64) {
    return static_cast<const kvjit_i64 *>(indices)[item * (kvjit_u64)stride];
  } else {
    return static_cast<const int *>(indices)[item * (kvjit_u64)stride];
  }
}

template <class C, kvjit_i64 kChunks, kvjit_i64 kPerLane>
__device__ __forceinline__ void kvjit_t_load(typename C::chunk (&buf)[kPerLane > 0 ? kPerLane : 1],
                                             const unsigned char *src, int lane) {
  typedef typename C::chunk chunk;
#pragma unroll
  for (kvjit_i64 c = 0; c < kPerLane; ++c) {
    if (kvjit_t_in_slice<C, kChunks>(c, lane)) buf[c] = *reinterpret_cast<const chunk *>(src + (c * C::kLanes + lane) * C::kVec);
  }
}

template <class C, kvjit_i64 kChunks, kvjit_i64 kPerLane>
__device__ __forceinline__ void kvjit_t_store(const typename C::chunk (&buf)[kPerLane > 0 ? kPerLane : 1],
                                              unsigned char *dst, int lane) {
  typedef typename C::chunk chunk;
#pragma unroll
  for (kvjit_i64 c = 0; c < kPerLane; ++c) {
    if (kvjit_t_in_slice<C, kChunks>(c, lane)) *reinterpret_cast<chunk *>(dst + (c * C::kLanes + lane) * C::kVec) = buf[c];
  }
}

// One slice of one row: rounds of kRound chunks, each round's loads before its stores.
template <class C, kvjit_i64 kChunks, kvjit_i64 kPerLane>
__device__ __forceinline__ void kvjit_t_copy(const unsigned char *src, unsigned char *dst, int lane) {
  typedef typename C::chunk chunk;
  constexpr kvjit_i64 kRound = C::kRound;
  for (kvjit_i64 base = 0; base < kPerLane; base += kRound) {
    chunk buf[kRound];
#pragma unroll
    for (kvjit_i64 r = 0; r < kRound; ++r) {
      const kvjit_i64 c = base + r;
      if (c < kPerLane && kvjit_t_in_slice<C, kChunks>(c, lane)) {
        buf[r] = *reinterpret_cast<const chunk *>(src + (c * C::kLanes + lane) * C::kVec);
      }
    }
#pragma unroll
    for (kvjit_i64 r = 0; r < kRound; ++r) {
      const kvjit_i64 c = base + r;
      if (c < kPerLane && kvjit_t_in_slice<C, kChunks>(c, lane)) {
        *reinterpret_cast<chunk *>(dst + (c * C::kLanes + lane) * C::kVec) = buf[r];
      }
    }
  }
}

// The layer's cache pointer: the pointer itself, or its table's entry for this layer. NULL when
// the entry is NULL or not aligned to the access width (the layer is then skipped and counted).
template <class C>
__device__ __forceinline__ const unsigned char *kvjit_t_layer(const void *p, unsigned layer) {
  if constexpr (C::kTable) {
    const kvjit_u64 entry = static_cast<const kvjit_u64 *>(p)[layer];
    if (entry == 0 || (entry & (C::kVec - 1)) != 0) return nullptr;
    return reinterpret_cast<const unsigned char *>(entry);
  } else {
    (void)layer;
    return static_cast<const unsigned char *>(p);
  }
}

template <kvjit_i64 KRowBytes, kvjit_i64 VRowBytes, int Split, int Vec, int Lanes, int Block, int Items, int Index64,
          int Pdl, int Table>
__global__ void __launch_bounds__(Block) kvjit_transfer_kv(const __grid_constant__ kvjit_transfer_kv_params p) {
  typedef kvjit_transfer_cfg<KRowBytes, VRowBytes, Split, Vec, Lanes, Block, Items, Index64, Pdl, Table> C;
  typedef typename C::chunk chunk;
  constexpr int kLanes = C::kLanes, kItems = C::kItems;
  constexpr kvjit_i64 kSplit = C::kSplit, kKSlice = C::kKSlice, kVSlice = C::kVSlice;
  constexpr kvjit_i64 kKChunks = C::kKChunks, kVChunks = C::kVChunks, kKPerLane = C::kKPerLane,
                      kVPerLane = C::kVPerLane;
  constexpr bool kHasV = C::kVRowBytes > 0;
  // A unit is one slice of one item. Group g of block b takes units b * groups * kItems + g + j *
  // groups (j < kItems), so a warp's accesses stay contiguous whatever the item count.
  const kvjit_u64 groups = blockDim.x / kLanes;
  const int lane = (int)(threadIdx.x % kLanes);
  const kvjit_u64 units = (kvjit_u64)p.batch * (kvjit_u64)kSplit;
  const kvjit_u64 first = (kvjit_u64)blockIdx.x * groups * kItems + threadIdx.x / kLanes;
  if (first >= units) return;

  if constexpr (C::kPdl) {
    // Indices and rows may be written by the kernel before us: wait before the first load.
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }

  const unsigned layer = blockIdx.y;
  const unsigned char *src_k = kvjit_t_layer<C>(p.src_k, layer);
  unsigned char *dst_k = const_cast<unsigned char *>(kvjit_t_layer<C>(p.dst_k, layer));
  const unsigned char *src_v = nullptr;
  unsigned char *dst_v = nullptr;
  bool layer_ok;
  if constexpr (kHasV) {
    src_v = kvjit_t_layer<C>(p.src_v, layer);
    dst_v = const_cast<unsigned char *>(kvjit_t_layer<C>(p.dst_v, layer));
    layer_ok = src_k && dst_k && src_v && dst_v;
  } else {
    layer_ok = src_k && dst_k;
  }

  kvjit_i64 src_slot[kItems], dst_slot[kItems], slice[kItems];
  bool ok[kItems];
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const kvjit_u64 unit = first + (kvjit_u64)j * groups;
    ok[j] = false;
    src_slot[j] = dst_slot[j] = slice[j] = 0;
    if (j > 0 && unit >= units) continue;
    const kvjit_u64 item = unit / (kvjit_u64)kSplit;
    slice[j] = (kvjit_i64)(unit % (kvjit_u64)kSplit);
    src_slot[j] = kvjit_t_slot<C>(p.src_indices, item, p.src_index_stride);
    dst_slot[j] = kvjit_t_slot<C>(p.dst_indices, item, p.dst_index_stride);
    // Negative: a padded token (skip). Past either cache: skip and count once per item (and
    // layer); never a trap, the CUDA context survives.
    if (src_slot[j] < 0 || dst_slot[j] < 0) continue;
    const bool in_range = src_slot[j] < p.src_num_slots && dst_slot[j] < p.dst_num_slots;
    if (!in_range || !layer_ok) {
      if (slice[j] == 0 && lane == 0) atomicAdd(&kvjit_transfer_kv_oob, 1ull);
      continue;
    }
    ok[j] = true;
  }

  if constexpr (kKPerLane + kVPerLane <= C::kMaxInFlight) {
    // Every chunk of the lane's items in registers: all loads, then all stores.
    chunk kbuf[kItems][kKPerLane > 0 ? kKPerLane : 1];
    chunk vbuf[kItems][kHasV && kVPerLane > 0 ? kVPerLane : 1];
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (!ok[j]) continue;
      kvjit_t_load<C, kKChunks, kKPerLane>(kbuf[j], src_k + src_slot[j] * p.src_k_stride + slice[j] * kKSlice, lane);
      if constexpr (kHasV) {
        kvjit_t_load<C, kVChunks, kVPerLane>(vbuf[j], src_v + src_slot[j] * p.src_v_stride + slice[j] * kVSlice, lane);
      }
    }
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (!ok[j]) continue;
      kvjit_t_store<C, kKChunks, kKPerLane>(kbuf[j], dst_k + dst_slot[j] * p.dst_k_stride + slice[j] * kKSlice, lane);
      if constexpr (kHasV) {
        kvjit_t_store<C, kVChunks, kVPerLane>(vbuf[j], dst_v + dst_slot[j] * p.dst_v_stride + slice[j] * kVSlice,
                                              lane);
      }
    }
  } else {
    // Wide slices (a small explicit split): round by round, K then V.
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (!ok[j]) continue;
      kvjit_t_copy<C, kKChunks, kKPerLane>(src_k + src_slot[j] * p.src_k_stride + slice[j] * kKSlice,
                                           dst_k + dst_slot[j] * p.dst_k_stride + slice[j] * kKSlice, lane);
      if constexpr (kHasV) {
        kvjit_t_copy<C, kVChunks, kVPerLane>(src_v + src_slot[j] * p.src_v_stride + slice[j] * kVSlice,
                                             dst_v + dst_slot[j] * p.dst_v_stride + slice[j] * kVSlice, lane);
      }
    }
  }
}
