// kvjit transfer_kv: dst_k[dst_idx[i]] = src_k[src_idx[i]], dst_v[dst_idx[i]] = src_v[src_idx[i]],
// rows of bytes, between any two caches the GPU can address: device memory or pinned host memory
// (UVA), so one kernel serves device->device, device->host, host->device and host->host.
//
// NVRTC compiles it after kernel_src/store_kv_cache.cuh and kernel_src/layout.cuh, as one source
// (src/ops/transfer_kv/meson.build joins them): the fp8 quantizing conversions (kvjit_convert() and
// its helpers) are store_kv_cache's and the cache views' addressing is layout.cuh's, one copy each;
// the store's template itself is never instantiated here.
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
//   Pdl         1: programmatic dependent launch wait/trigger compiled in (sm_90+): wait, then let
//               the next grid launch; 2: wait, and let it launch once this CTA's units are done
//               (Loop: the next copy's CTAs do not sit on SMs for the whole copy, waiting, beside
//               the model's kernels: +20-45 points of a GEMM's slowdown on the H200, issue 29)
//   Table       1: the four cache pointers are device arrays of per-layer cache pointers,
//               layer = blockIdx.y; 0: they are the caches (one layer, gridDim.y == 1)
//   SrcDtype    kvjit_dtype of the source elements, DstDtype of the destination's: 0 and 0 (or
//               equal) a plain copy; f16/bf16/f32 -> fp8 quantizes, fp8 -> f16/bf16/f32
//               dequantizes (below; quantizing is store_kv_cache.cuh's kvjit_convert())
//   Scale       0: no scale, 1: one per tensor, 2: one per head (fp32 in device memory)
//   KHeadBytes  source bytes of one K head (Scale 2), else 0; VHeadBytes the same for V
//   Fp8Soft     1: the integer fp8 encoding (before sm_89), 0: the cvt instruction
//   Loop        1: the grid is capped (few CTAs over the host link): each lane group strides
//               over the units; 0: one unit set per group, the grid the batch needs
//   SPage, SAtom, SE0, SE1, SE2   the source caches' view (layout.cuh's kvjit_view: slots per page,
//               bytes of a contiguous run, extents of the strided row dims; all 0: flat slots
//               src_*_stride apart); K and V share it, each with strides of its own
//   DPage, DAtom, DE0, DE1, DE2   the destination caches' view
//   Stream      1: rows are read and written with cache-streaming accesses (ld/st.global.cs, L2
//               evict-first): over the host link every row is touched once, and lines written
//               to host memory would otherwise sit dirty in L2, draining at the link's rate,
//               in the way of the kernels beside the copy (bench/bench_overlap.c); 0: plain
//
// Row bytes, Vec and slices count source bytes; a destination row holds Vec / source element
// size elements per access, stored as OutVec destination bytes.
//
// Per lane: both slot ids are loaded and checked first (a bad source slot is never read), then
// every row load of the lane is issued, then every store.

typedef unsigned long long kvjit_u64;
typedef long long kvjit_i64;

// ---- dequantizing (fp8 -> f16/bf16/f32) -----------------------------------------------------------
//
// The fp8 value widened exactly to fp32, times the scale (one fp32 multiplication, round to nearest
// even), rounded to nearest even into the destination type, overflow to infinity; every NaN becomes
// the canonical NaN of the destination (0x7fff for f16 and bf16, 0x7fffffff for f32: what the
// GPU's own conversions and multiplications produce). Integer arithmetic only, the same on every
// arch (so the host tests run it too).

// fp8 code -> fp32, exact. e5m2 is the top byte of an f16; e4m3fn's 7 low bits, moved up by 7, are
// an f16 of 2^-8 times its value (normal and subnormal alike). A NaN code gives a quiet NaN.
template <int Fp8>
__device__ __forceinline__ float kvjit_fp8_to_f32(unsigned int code) {
  const unsigned int sign = (code & 0x80u) << 24;
  const unsigned int a = code & 0x7fu;
  unsigned int h;  // the f16 bits of |value| (e5m2), or of |value| / 256 (e4m3fn)
  if constexpr (Fp8 == 1) {
    if (a == 0x7fu) return __uint_as_float(0x7fffffffu);
    h = a << 7;
  } else {
    if (a > 0x7cu) return __uint_as_float(0x7fffffffu);
    h = a << 8;
  }
  // f16 bits -> fp32 bits: normals re-biased, subnormals scaled exactly, Inf kept.
  const unsigned int exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float v;
  if (exp == 0x1fu) {
    v = __uint_as_float(0x7f800000u);
  } else if (exp == 0) {
    v = (float)mant * 5.9604644775390625e-8f;  // mant x 2^-24, exact
  } else {
    v = __uint_as_float((exp + 112u) << 23 | mant << 13);
  }
  if constexpr (Fp8 == 1) v = v * 256.0f;  // a power of two: exact
  return __uint_as_float(__float_as_uint(v) | sign);
}

// fp32 -> f16 bits, round to nearest even, overflow to infinity, NaN -> 0x7fff.
__device__ __forceinline__ unsigned int kvjit_f32_to_f16(float f) {
  const unsigned int u = __float_as_uint(f);
  const unsigned int sign = (u >> 16) & 0x8000u;
  const unsigned int a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fffu;
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520: rounds past 65504 (Inf too)
  if (a < 0x38800000u) {
    // Below 2^-14: a whole number of 2^-24 steps; the scaling is exact and rintf rounds half to even.
    return sign | (unsigned int)rintf(__uint_as_float(a) * 16777216.0f);
  }
  const unsigned int r = a + 0xfffu + ((a >> 13) & 1u);  // round half to even at bit 13
  return sign | ((r >> 13) - (112u << 10));
}

// fp32 -> bf16 bits, round to nearest even, NaN -> 0x7fff.
__device__ __forceinline__ unsigned int kvjit_f32_to_bf16(float f) {
  const unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// fp8 code -> the destination's bits (Dst: 1 f16, 2 bf16, 3 f32) of value x scale (Scaled 0: x).
template <int Fp8, int Dst, int Scaled>
__device__ __forceinline__ unsigned int kvjit_dequant(unsigned int code, float scale) {
  float x = kvjit_fp8_to_f32<Fp8>(code);
  if constexpr (Scaled != 0) x = x * scale;
  if constexpr (Dst == 1) {
    return kvjit_f32_to_f16(x);
  } else if constexpr (Dst == 2) {
    return kvjit_f32_to_bf16(x);
  } else {
    const unsigned int u = __float_as_uint(x);
    return (u & 0x7fffffffu) > 0x7f800000u ? 0x7fffffffu : u;
  }
}


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
  const float *k_scale;  // converting with Scale > 0: layer l's scales at + l * scale_stride
  const float *v_scale;
  kvjit_i64 scale_stride;  // floats per layer (Table), else 0
  // Laid-out caches (a view on either side): each cache's strides (layout.cuh; a flat side's are
  // {0, its *_stride}); unused when both sides are flat.
  kvjit_view_strides src_k_view, src_v_view, dst_k_view, dst_v_view;
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
// Bytes of one element of a kvjit_dtype (1 for opaque bytes and fp8).
__device__ __forceinline__ constexpr int kvjit_t_elem_bytes(int dtype) { return dtype == 1 || dtype == 2 ? 2 : dtype == 3 ? 4 : 1; }

#define KVJIT_TRANSFER_PARAMS                                                                                        \
  kvjit_i64 KRowBytes, kvjit_i64 VRowBytes, int Split, int Vec, int Lanes, int Block, int Items, int Index64, int Pdl, \
      int Table, int SrcDtype, int DstDtype, int Scale, kvjit_i64 KHeadBytes, kvjit_i64 VHeadBytes, int Fp8Soft,      \
      int Loop, kvjit_i64 SPage, kvjit_i64 SAtom, kvjit_i64 SE0, kvjit_i64 SE1, kvjit_i64 SE2, kvjit_i64 DPage,         \
      kvjit_i64 DAtom, kvjit_i64 DE0, kvjit_i64 DE1, kvjit_i64 DE2, int Stream
#define KVJIT_TRANSFER_ARGS                                                                                           \
  KRowBytes, VRowBytes, Split, Vec, Lanes, Block, Items, Index64, Pdl, Table, SrcDtype, DstDtype, Scale, KHeadBytes,   \
      VHeadBytes, Fp8Soft, Loop, SPage, SAtom, SE0, SE1, SE2, DPage, DAtom, DE0, DE1, DE2, Stream

template <KVJIT_TRANSFER_PARAMS>
struct kvjit_transfer_cfg {
  typedef typename kvjit_tvec<Vec>::type chunk;
  static constexpr kvjit_i64 kVRowBytes = VRowBytes;
  static constexpr int kIndex64 = Index64, kPdl = Pdl, kTable = Table, kLoop = Loop, kStream = Stream;
  static constexpr kvjit_i64 kSplit = Split;
  static constexpr int kLanes = Lanes;
  static constexpr int kVec = Vec;
  static constexpr int kItems = Items;
  // Converting: quantize (a float source into fp8) or dequantize (fp8 into a float destination).
  static constexpr bool kQuant = SrcDtype >= 1 && SrcDtype <= 3 && DstDtype >= 4;
  static constexpr bool kDequant = SrcDtype >= 4 && DstDtype >= 1 && DstDtype <= 3;
  static constexpr int kSrcElem = kvjit_t_elem_bytes(SrcDtype), kDstElem = kvjit_t_elem_bytes(DstDtype);
  static constexpr int kElemsPerChunk = Vec / kSrcElem;
  static constexpr int kOutVec = kQuant || kDequant ? kElemsPerChunk * kDstElem : Vec;  // destination bytes per access
  typedef typename kvjit_tvec<kOutVec>::type out_chunk;
  // What store_kv_cache.cuh's quantizing functions (kvjit_convert() and its helpers) read.
  static constexpr int kSrcDtype = kQuant ? SrcDtype : 0, kFp8 = kQuant ? DstDtype - 3 : 0;
  static constexpr int kScale = Scale, kFp8Soft = Fp8Soft;
  static constexpr int kScalePerChunk = Scale == 2;
  // Cache views (a flat side: no pages, no dims, so its view is slot * slot_stride + byte).
  static constexpr bool kLaidOut = SPage != 0 || SE0 != 0 || DPage != 0 || DE0 != 0;
  typedef kvjit_view<SPage, SAtom ? SAtom : 1, SE0, SE1, SE2> SrcView;
  typedef kvjit_view<DPage, DAtom ? DAtom : 1, DE0, DE1, DE2> DstView;
  // Dequantizing: the source's fp8 kind and the destination type.
  static constexpr int kDequantFp8 = kDequant ? SrcDtype - 3 : 0, kDstDtype = DstDtype;
  static constexpr kvjit_i64 kKHeadBytes = KHeadBytes, kVHeadBytes = VHeadBytes;
  static constexpr kvjit_i64 kKSlice = KRowBytes / Split;
  static constexpr kvjit_i64 kVSlice = VRowBytes / Split;
  static constexpr kvjit_i64 kKSliceOut = kKSlice / kSrcElem * kDstElem;  // destination bytes of a slice
  static constexpr kvjit_i64 kVSliceOut = kVSlice / kSrcElem * kDstElem;
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
  static_assert((SrcDtype == DstDtype || DstDtype == 0) ? Scale == 0 : (kQuant || kDequant), "a conversion");
  static_assert(Vec % kSrcElem == 0 && kOutVec >= 1 && kOutVec <= 16, "an access holds whole elements");
  static_assert(Scale != 2 || (KHeadBytes % Vec == 0 && (VRowBytes == 0 || VHeadBytes % Vec == 0)),
                "an access must not straddle two heads");
  static_assert((SE0 == 0 || SAtom % Vec == 0) && (DE0 == 0 || DAtom % kOutVec == 0),
                "an access must not straddle two runs of a view");
  static_assert(!kLaidOut || Items == 1, "laid-out caches: one item per lane group");
};

// One row of a cache as a lane addresses it: the row's base (the slot's offset applied) and,
// laid out, its view; byte b of the row is at base + b when flat.
template <class View, bool kLaidOut> struct kvjit_t_row {
  unsigned char *base;
  const kvjit_view_strides *s;
  __device__ __forceinline__ unsigned char *at(kvjit_i64 byte) const {
    if constexpr (kLaidOut) {
      return base + View::row_offset(byte, *s);
    } else {
      return base + byte;
    }
  }
};

// Row @p slot of the cache at @p cache: flat, slot * stride; laid out, the view's slot offset.
template <class View, bool kLaidOut>
__device__ __forceinline__ kvjit_t_row<View, kLaidOut> kvjit_t_row_of(const unsigned char *cache, kvjit_i64 slot,
                                                                      kvjit_i64 stride, const kvjit_view_strides &s) {
  kvjit_t_row<View, kLaidOut> r;
  r.s = &s;
  if constexpr (kLaidOut) {
    r.base = const_cast<unsigned char *>(cache) + View::slot_offset(slot, s);
  } else {
    r.base = const_cast<unsigned char *>(cache) + slot * stride;
  }
  return r;
}

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


// A chunk converted for the destination: the chunk itself (a plain copy), fp8(x / scale) as
// store_kv_cache quantizes (its rare values redone by the exact division), or x * scale.
template <class C>
__device__ __forceinline__ typename C::out_chunk kvjit_t_convert(const typename C::chunk &in, float scale) {
  if constexpr (C::kQuant) {
    bool redo;
    typename C::out_chunk out = kvjit_convert<C>(in, scale, redo);
    if constexpr (C::kScale != 0) {
      if (redo) out = kvjit_convert_exact<C>(in, scale);
    }
    return out;
  } else if constexpr (C::kDequant) {
    union {
      typename C::chunk c;
      unsigned char b[C::kVec];
    } u;
    u.c = in;
    union {
      typename C::out_chunk c;
      unsigned short h[C::kOutVec >= 2 ? C::kOutVec / 2 : 1];
      unsigned int w[C::kOutVec >= 4 ? C::kOutVec / 4 : 1];
    } o;
#pragma unroll
    for (int j = 0; j < C::kElemsPerChunk; ++j) {
      const unsigned int bits = kvjit_dequant<C::kDequantFp8, C::kDstDtype, C::kScale>(u.b[j], scale);
      if constexpr (C::kDstElem == 2) {
        o.h[j] = (unsigned short)bits;
      } else {
        o.w[j] = bits;
      }
    }
    return o.c;
  } else {
    (void)scale;
    return in;
  }
}

// The scale of the chunk at source byte @p offset of a row: per head the head's (an access never
// straddles two heads), per tensor the one value; 1 without a scale (then never read).
template <class C, kvjit_i64 kHeadBytes>
__device__ __forceinline__ float kvjit_t_scale(const float *scales, kvjit_i64 offset) {
  if constexpr (C::kScale == 2) {
    return scales[offset / kHeadBytes];
  } else if constexpr (C::kScale == 1) {
    (void)offset;
    return scales[0];
  } else {
    (void)scales;
    (void)offset;
    return 1.0f;
  }
}

template <class C, kvjit_i64 kPerLane> struct kvjit_t_buf {
  typename C::chunk data[kPerLane > 0 ? kPerLane : 1];
  float scale[C::kScale != 0 && kPerLane > 0 ? kPerLane : 1];
};

// Cache-streaming loads and stores of one access (Stream), as SGLang's hicache kernel makes them.
__device__ __forceinline__ void kvjit_t_ld_cs(kvjit_tvec<16>::type &d, const unsigned char *p) {
  asm volatile("ld.global.cs.v2.u64 {%0, %1}, [%2];" : "=l"(d.lo), "=l"(d.hi) : "l"(p));
}
__device__ __forceinline__ void kvjit_t_ld_cs(kvjit_u64 &d, const unsigned char *p) {
  asm volatile("ld.global.cs.u64 %0, [%1];" : "=l"(d) : "l"(p));
}
__device__ __forceinline__ void kvjit_t_ld_cs(unsigned int &d, const unsigned char *p) {
  asm volatile("ld.global.cs.u32 %0, [%1];" : "=r"(d) : "l"(p));
}
__device__ __forceinline__ void kvjit_t_ld_cs(unsigned short &d, const unsigned char *p) {
  asm volatile("ld.global.cs.u16 %0, [%1];" : "=h"(d) : "l"(p));
}
__device__ __forceinline__ void kvjit_t_ld_cs(unsigned char &d, const unsigned char *p) {
  unsigned short t;
  asm volatile("ld.global.cs.u8 %0, [%1];" : "=h"(t) : "l"(p));
  d = (unsigned char)t;
}
__device__ __forceinline__ void kvjit_t_st_cs(unsigned char *p, const kvjit_tvec<16>::type &v) {
  asm volatile("st.global.cs.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(v.lo), "l"(v.hi) : "memory");
}
__device__ __forceinline__ void kvjit_t_st_cs(unsigned char *p, kvjit_u64 v) {
  asm volatile("st.global.cs.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void kvjit_t_st_cs(unsigned char *p, unsigned int v) {
  asm volatile("st.global.cs.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void kvjit_t_st_cs(unsigned char *p, unsigned short v) {
  asm volatile("st.global.cs.u16 [%0], %1;" ::"l"(p), "h"(v) : "memory");
}
__device__ __forceinline__ void kvjit_t_st_cs(unsigned char *p, unsigned char v) {
  asm volatile("st.global.cs.u8 [%0], %1;" ::"l"(p), "h"((unsigned short)v) : "memory");
}

// One access of a row: plain, or cache-streaming (Stream).
template <class C, typename T> __device__ __forceinline__ void kvjit_t_read(T &d, const unsigned char *p) {
  if constexpr (C::kStream) {
    kvjit_t_ld_cs(d, p);
  } else {
    d = *reinterpret_cast<const T *>(p);
  }
}
template <class C, typename T> __device__ __forceinline__ void kvjit_t_write(unsigned char *p, const T &v) {
  if constexpr (C::kStream) {
    kvjit_t_st_cs(p, v);
  } else {
    *reinterpret_cast<T *>(p) = v;
  }
}

// The lane's chunks of one slice of a source row (the slice at source byte @p slice_offset).
template <class C, kvjit_i64 kChunks, kvjit_i64 kPerLane, kvjit_i64 kHeadBytes, class Row>
__device__ __forceinline__ void kvjit_t_load(kvjit_t_buf<C, kPerLane> &buf, const Row &src, const float *scales,
                                             kvjit_i64 slice_offset, int lane) {
#pragma unroll
  for (kvjit_i64 c = 0; c < kPerLane; ++c) {
    if (kvjit_t_in_slice<C, kChunks>(c, lane)) {
      kvjit_t_read<C>(buf.data[c], src.at(slice_offset + (c * C::kLanes + lane) * C::kVec));
      if constexpr (C::kScale != 0) {
        buf.scale[c] = kvjit_t_scale<C, kHeadBytes>(scales, slice_offset + (c * C::kLanes + lane) * C::kVec);
      }
    }
  }
}

// The lane's chunks, converted, into one slice of a destination row (at its byte @p slice_out).
template <class C, kvjit_i64 kChunks, kvjit_i64 kPerLane, class Row>
__device__ __forceinline__ void kvjit_t_store(const kvjit_t_buf<C, kPerLane> &buf, const Row &dst, kvjit_i64 slice_out,
                                              int lane) {
  typedef typename C::out_chunk out_chunk;
#pragma unroll
  for (kvjit_i64 c = 0; c < kPerLane; ++c) {
    if (kvjit_t_in_slice<C, kChunks>(c, lane)) {
      const out_chunk v = kvjit_t_convert<C>(buf.data[c], C::kScale != 0 ? buf.scale[C::kScale != 0 ? c : 0] : 1.0f);
      kvjit_t_write<C>(dst.at(slice_out + (c * C::kLanes + lane) * C::kOutVec), v);
    }
  }
}

// One slice of one row: rounds of kRound chunks, each round's loads before its stores.
template <class C, kvjit_i64 kChunks, kvjit_i64 kPerLane, kvjit_i64 kHeadBytes, class SrcRow, class DstRow>
__device__ __forceinline__ void kvjit_t_copy(const SrcRow &src, const DstRow &dst, const float *scales,
                                             kvjit_i64 slice_offset, kvjit_i64 slice_out, int lane) {
  typedef typename C::chunk chunk;
  typedef typename C::out_chunk out_chunk;
  constexpr kvjit_i64 kRound = C::kRound;
  for (kvjit_i64 base = 0; base < kPerLane; base += kRound) {
    chunk buf[kRound];
    float scale[C::kScale != 0 ? kRound : 1];
#pragma unroll
    for (kvjit_i64 r = 0; r < kRound; ++r) {
      const kvjit_i64 c = base + r;
      if (c < kPerLane && kvjit_t_in_slice<C, kChunks>(c, lane)) {
        kvjit_t_read<C>(buf[r], src.at(slice_offset + (c * C::kLanes + lane) * C::kVec));
        if constexpr (C::kScale != 0) {
          scale[r] = kvjit_t_scale<C, kHeadBytes>(scales, slice_offset + (c * C::kLanes + lane) * C::kVec);
        }
      }
    }
#pragma unroll
    for (kvjit_i64 r = 0; r < kRound; ++r) {
      const kvjit_i64 c = base + r;
      if (c < kPerLane && kvjit_t_in_slice<C, kChunks>(c, lane)) {
        const out_chunk v = kvjit_t_convert<C>(buf[r], C::kScale != 0 ? scale[C::kScale != 0 ? r : 0] : 1.0f);
        kvjit_t_write<C>(dst.at(slice_out + (c * C::kLanes + lane) * C::kOutVec), v);
      }
    }
  }
}

// The layer's cache pointer: the pointer itself, or its table's entry for this layer. NULL when
// the entry is NULL or not aligned to the access width (the layer is then skipped and counted).
template <class C, int kAlign>
__device__ __forceinline__ const unsigned char *kvjit_t_layer(const void *p, unsigned layer) {
  if constexpr (C::kTable) {
    const kvjit_u64 entry = static_cast<const kvjit_u64 *>(p)[layer];
    if (entry == 0 || (entry & (kAlign - 1)) != 0) return nullptr;
    return reinterpret_cast<const unsigned char *>(entry);
  } else {
    (void)layer;
    return static_cast<const unsigned char *>(p);
  }
}

// One layer's caches and scales, as the kernel found them.
struct kvjit_t_layer_view {
  const unsigned char *src_k, *src_v;
  unsigned char *dst_k, *dst_v;
  const float *k_scale, *v_scale;
  bool ok;
};

// The units first + j * groups (j < kItems) of one lane group: slot ids checked, every load, then
// every store.
template <class C>
__device__ __forceinline__ void kvjit_t_units(const kvjit_transfer_kv_params &p, const kvjit_t_layer_view &l,
                                              kvjit_u64 first, kvjit_u64 groups, kvjit_u64 units, int lane) {
  constexpr int kItems = C::kItems;
  constexpr kvjit_i64 kSplit = C::kSplit, kKSlice = C::kKSlice, kVSlice = C::kVSlice;
  constexpr kvjit_i64 kKSliceOut = C::kKSliceOut, kVSliceOut = C::kVSliceOut;
  constexpr kvjit_i64 kKChunks = C::kKChunks, kVChunks = C::kVChunks, kKPerLane = C::kKPerLane,
                      kVPerLane = C::kVPerLane;
  constexpr bool kHasV = C::kVRowBytes > 0;
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
    if (!in_range || !l.ok) {
      if (slice[j] == 0 && lane == 0) atomicAdd(&kvjit_transfer_kv_oob, 1ull);
      continue;
    }
    ok[j] = true;
  }

  typedef typename C::SrcView SV;
  typedef typename C::DstView DV;
  constexpr bool kLaid = C::kLaidOut;
  typedef kvjit_t_row<SV, kLaid> SrcRow;
  typedef kvjit_t_row<DV, kLaid> DstRow;
  if constexpr (kKPerLane + kVPerLane <= C::kMaxInFlight) {
    // Every chunk of the lane's items in registers: all loads, then all stores.
    kvjit_t_buf<C, kKPerLane> kbuf[kItems];
    kvjit_t_buf<C, kHasV ? kVPerLane : 0> vbuf[kItems];
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (!ok[j]) continue;
      const SrcRow sk = kvjit_t_row_of<SV, kLaid>(l.src_k, src_slot[j], p.src_k_stride, p.src_k_view);
      kvjit_t_load<C, kKChunks, kKPerLane, C::kKHeadBytes>(kbuf[j], sk, l.k_scale, slice[j] * kKSlice, lane);
      if constexpr (kHasV) {
        const SrcRow sv = kvjit_t_row_of<SV, kLaid>(l.src_v, src_slot[j], p.src_v_stride, p.src_v_view);
        kvjit_t_load<C, kVChunks, kVPerLane, C::kVHeadBytes>(vbuf[j], sv, l.v_scale, slice[j] * kVSlice, lane);
      }
    }
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (!ok[j]) continue;
      const DstRow dk = kvjit_t_row_of<DV, kLaid>(l.dst_k, dst_slot[j], p.dst_k_stride, p.dst_k_view);
      kvjit_t_store<C, kKChunks, kKPerLane>(kbuf[j], dk, slice[j] * kKSliceOut, lane);
      if constexpr (kHasV) {
        const DstRow dv = kvjit_t_row_of<DV, kLaid>(l.dst_v, dst_slot[j], p.dst_v_stride, p.dst_v_view);
        kvjit_t_store<C, kVChunks, kVPerLane>(vbuf[j], dv, slice[j] * kVSliceOut, lane);
      }
    }
  } else {
    // Wide slices (a small explicit split): round by round, K then V.
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (!ok[j]) continue;
      kvjit_t_copy<C, kKChunks, kKPerLane, C::kKHeadBytes>(
          kvjit_t_row_of<SV, kLaid>(l.src_k, src_slot[j], p.src_k_stride, p.src_k_view),
          kvjit_t_row_of<DV, kLaid>(l.dst_k, dst_slot[j], p.dst_k_stride, p.dst_k_view), l.k_scale,
          slice[j] * kKSlice, slice[j] * kKSliceOut, lane);
      if constexpr (kHasV) {
        kvjit_t_copy<C, kVChunks, kVPerLane, C::kVHeadBytes>(
            kvjit_t_row_of<SV, kLaid>(l.src_v, src_slot[j], p.src_v_stride, p.src_v_view),
            kvjit_t_row_of<DV, kLaid>(l.dst_v, dst_slot[j], p.dst_v_stride, p.dst_v_view), l.v_scale,
            slice[j] * kVSlice, slice[j] * kVSliceOut, lane);
      }
    }
  }
}

template <KVJIT_TRANSFER_PARAMS>
__global__ void __launch_bounds__(Block) kvjit_transfer_kv(const __grid_constant__ kvjit_transfer_kv_params p) {
  typedef kvjit_transfer_cfg<KVJIT_TRANSFER_ARGS> C;
  constexpr int kLanes = C::kLanes, kItems = C::kItems;
  constexpr bool kHasV = C::kVRowBytes > 0;
  // A unit is one slice of one item. Group g of block b takes units b * groups * kItems + g + j *
  // groups (j < kItems), so a warp's accesses stay contiguous whatever the item count; with Loop,
  // then the same units a grid further on, until the batch ends.
  const kvjit_u64 groups = blockDim.x / kLanes;
  const int lane = (int)(threadIdx.x % kLanes);
  const kvjit_u64 units = (kvjit_u64)p.batch * (kvjit_u64)C::kSplit;
  const kvjit_u64 first = (kvjit_u64)blockIdx.x * groups * kItems + threadIdx.x / kLanes;
  if (first >= units) return;

  if constexpr (C::kPdl) {
    // Indices and rows may be written by the kernel before us: wait before the first load.
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if constexpr (C::kPdl == 1) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }

  const unsigned layer = blockIdx.y;
  kvjit_t_layer_view l;
  l.src_k = kvjit_t_layer<C, C::kVec>(p.src_k, layer);
  l.dst_k = const_cast<unsigned char *>(kvjit_t_layer<C, C::kOutVec>(p.dst_k, layer));
  l.src_v = nullptr;
  l.dst_v = nullptr;
  if constexpr (kHasV) {
    l.src_v = kvjit_t_layer<C, C::kVec>(p.src_v, layer);
    l.dst_v = const_cast<unsigned char *>(kvjit_t_layer<C, C::kOutVec>(p.dst_v, layer));
    l.ok = l.src_k && l.dst_k && l.src_v && l.dst_v;
  } else {
    l.ok = l.src_k && l.dst_k;
  }
  l.k_scale = p.k_scale;
  l.v_scale = p.v_scale;
  if constexpr (C::kScale != 0 && C::kTable) {
    l.k_scale += (kvjit_i64)layer * p.scale_stride;
    if constexpr (kHasV) l.v_scale += (kvjit_i64)layer * p.scale_stride;
  }

  if constexpr (C::kLoop) {
    const kvjit_u64 stride = (kvjit_u64)gridDim.x * groups * kItems;
    for (kvjit_u64 u = first; u < units; u += stride) kvjit_t_units<C>(p, l, u, groups, units, lane);
  } else {
    kvjit_t_units<C>(p, l, first, groups, units, lane);
  }
  if constexpr (C::kPdl == 2) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
