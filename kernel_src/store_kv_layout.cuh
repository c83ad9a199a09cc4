// kvjit store_kv_cache into caches laid out as strided views (paged, head-strided, K/V packed
// per head, chunked, transposed): k_cache[indices[i]] = k[i], v_cache[indices[i]] = v[i], where a
// cache row is the view of kernel_src/layout.cuh (src/op/layout.h says what a view is).
//
// One source with store_kv_cache.cuh and layout.cuh before it (kernel_src/embed.py joins the
// three: src/ops/store_kv/meson.build), so that flat caches keep their kernel and its key byte
// for byte. Its kernel is an overload of kvjit_store_kv with more template arguments (NVRTC's
// name expressions pick it by their count), so every store kernel is an instance of one name.
// The arguments: store_kv_cache.cuh's seventeen (Vec is K's access width), then
//
//   VVec                    V's access width (V's cache may allow less than K's: a transposed V
//                           takes one element per access while K takes 16 B)
//   KPage .. KE2            K's view: slots per page (0: flat), bytes of a contiguous run, and the
//                           extents of the strided dims above it (0 past the last)
//   VPage .. VE2            V's view
//
// Each lane group takes one slice of one item (Items is 1); lanes take consecutive accesses of
// the slice, so consecutive lanes write consecutive bytes of a run (one head's D elements in a
// head-strided or packed cache) and a run's accesses cover whole sectors. Sources are the
// contiguous rows of the flat kernel, loaded the same way (all loads before the slot check, then
// every store). Strides are kernel arguments; every division is by a constant.

struct kvjit_store_kv_layout_params {
  kvjit_store_kv_params base;  // the flat kernel's parameters (k_cache_stride, v_cache_stride unused)
  kvjit_view_strides k_view;   // host mirror: kvjit_store_kv_launch in src/ops/store_kv/store_kv_plan.h
  kvjit_view_strides v_view;
};

// Store every chunk of a lane (converted) at its place in the view: slot @p slot_base, the
// slice's first cache byte @p slice_out.
template <class C, class View, kvjit_i64 kChunks, kvjit_i64 kPerLane>
__device__ __forceinline__ void kvjit_store_view(const typename C::chunk (&buf)[kPerLane > 0 ? kPerLane : 1],
                                                 const float (&scale)[C::kScalePerChunk && kPerLane > 0 ? kPerLane : 1],
                                                 unsigned char *slot_base, kvjit_i64 slice_out,
                                                 const kvjit_view_strides &s, int lane) {
  bool redo[kPerLane > 0 ? kPerLane : 1];
  unsigned char *dst[kPerLane > 0 ? kPerLane : 1];
#pragma unroll
  for (kvjit_i64 c = 0; c < kPerLane; ++c) {
    redo[c] = false;
    dst[c] = slot_base + View::row_offset(slice_out + (c * C::kLanes + lane) * C::kOutVec, s);
    if (kvjit_in_slice<C, kChunks>(c, lane)) {
      kvjit_st<C>(dst[c], kvjit_convert<C>(buf[c], scale[C::kScalePerChunk ? c : 0], redo[c]));
    }
  }
  if constexpr (C::kSrcDtype != 0 && C::kScale != 0) {
    // The rare values the fast division does not cover, after every store has been issued.
#pragma unroll
    for (kvjit_i64 c = 0; c < kPerLane; ++c) {
      if (redo[c]) {
        *reinterpret_cast<typename C::out_chunk *>(dst[c]) = kvjit_convert_exact<C>(buf[c], scale[C::kScalePerChunk ? c : 0]);
      }
    }
  }
}

template <kvjit_i64 KRowBytes, kvjit_i64 VRowBytes, int Split, int Vec, int Lanes, int Block, int Index64, int Pdl,
          int SrcDtype, int Fp8, int Scale, kvjit_i64 KHeadBytes, kvjit_i64 VHeadBytes, int Fp8Soft, int Items,
          int EvictFirst, int PdlTriggerFirst, int VVec, kvjit_i64 KPage, kvjit_i64 KAtom, kvjit_i64 KE0, kvjit_i64 KE1,
          kvjit_i64 KE2, kvjit_i64 VPage, kvjit_i64 VAtom, kvjit_i64 VE0, kvjit_i64 VE1, kvjit_i64 VE2>
__global__ void __launch_bounds__(Block) kvjit_store_kv(const __grid_constant__ kvjit_store_kv_layout_params lp) {
  static_assert(Items == 1, "a layout store takes one item per lane group");
  constexpr bool kHasV = VRowBytes > 0;
  // K and V each as a row of their own access width (their V half unused).
  typedef kvjit_store_cfg<KRowBytes, 0, Split, Vec, Lanes, Block, Index64, Pdl, SrcDtype, Fp8, Scale, KHeadBytes, 0,
                          Fp8Soft, 1, EvictFirst, PdlTriggerFirst>
      CK;
  typedef kvjit_store_cfg<kHasV ? VRowBytes : KRowBytes, 0, Split, kHasV ? VVec : Vec, Lanes, Block, Index64, Pdl,
                          SrcDtype, Fp8, Scale, kHasV ? VHeadBytes : KHeadBytes, 0, Fp8Soft, 1, EvictFirst,
                          PdlTriggerFirst>
      CV;
  typedef kvjit_view<KPage, KAtom, KE0, KE1, KE2> KView;
  typedef kvjit_view<VPage, VAtom, VE0, VE1, VE2> VView;
  constexpr kvjit_i64 kKSlice = CK::kKSlice, kVSlice = CV::kKSlice;
  constexpr kvjit_i64 kKChunks = CK::kKChunks, kVChunks = CV::kKChunks;
  constexpr kvjit_i64 kKPerLane = CK::kKPerLane, kVPerLane = kHasV ? CV::kKPerLane : 0;
  static_assert(kKPerLane + kVPerLane <= CK::kMaxInFlight, "a layout store holds every access of a lane at once");
  const kvjit_store_kv_params &p = lp.base;
  constexpr kvjit_i64 kSplit = Split;
  constexpr int kLanes = Lanes;

  const kvjit_u64 groups = blockDim.x / kLanes;
  const int lane = (int)(threadIdx.x % kLanes);
  const kvjit_u64 units = (kvjit_u64)p.batch * (kvjit_u64)kSplit;
  const kvjit_u64 unit = (kvjit_u64)blockIdx.x * groups + threadIdx.x / kLanes;
  if (unit >= units) return;

  if constexpr (CK::kPdl) {
    if constexpr (CK::kPdlTriggerFirst) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if constexpr (!CK::kPdlTriggerFirst) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }

  const kvjit_u64 item = unit / (kvjit_u64)kSplit;
  const kvjit_i64 slice = (kvjit_i64)(unit % (kvjit_u64)kSplit);
  typename CK::chunk kbuf[kKPerLane > 0 ? kKPerLane : 1];
  float kscale[CK::kScalePerChunk && kKPerLane > 0 ? kKPerLane : 1];
  typename CV::chunk vbuf[kVPerLane > 0 ? kVPerLane : 1];
  float vscale[CV::kScalePerChunk && kVPerLane > 0 ? kVPerLane : 1];
  const kvjit_i64 slot = kvjit_slot_of<CK>(p, item);
  kvjit_load_all<CK, kKChunks, kKPerLane, kKSlice, CK::kKHeadBytes>(
      kbuf, kscale, p.k + item * (kvjit_u64)p.k_stride + slice * kKSlice, p.k_scale, slice, lane);
  if constexpr (kHasV) {
    kvjit_load_all<CV, kVChunks, kVPerLane, kVSlice, CV::kKHeadBytes>(
        vbuf, vscale, p.v + item * (kvjit_u64)p.v_stride + slice * kVSlice, p.v_scale, slice, lane);
  }
  if (!kvjit_slot_ok(slot, p, slice, lane)) return;
  // Cache slices count cache bytes: one per source element when quantizing.
  kvjit_store_view<CK, KView, kKChunks, kKPerLane>(kbuf, kscale, p.k_cache + KView::slot_offset(slot, lp.k_view),
                                                   slice * (kKSlice / CK::kElem), lp.k_view, lane);
  if constexpr (kHasV) {
    kvjit_store_view<CV, VView, kVChunks, kVPerLane>(vbuf, vscale, p.v_cache + VView::slot_offset(slot, lp.v_view),
                                                     slice * (kVSlice / CV::kElem), lp.v_view, lane);
  }
}
