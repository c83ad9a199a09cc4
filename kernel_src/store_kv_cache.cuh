// kvjit store_kv_cache: k_cache[indices[i]] = k[i], v_cache[indices[i]] = v[i], rows of bytes.
//
// A C++ template: each variant is one instance, kvjit_store_kv<...>, that src/ops/store_kv_plan.c
// names with an NVRTC name expression (kvjit_store_kv_kernel_name()), so that one program can hold
// the kernels of many variants (prewarm compiles them together). Everything that shapes the
// loops is a template argument, so each lane's work is fully unrolled and the tails are masked
// only where a tail exists. The arguments, in order:
//
//   KRowBytes     bytes of one K row
//   VRowBytes     bytes of one V row; 0 compiles the V path out (K only, MLA caches)
//   Split         slices each row is cut into; a slice is handled by one lane group
//   Vec           bytes per access (16, 8, 4, 2, 1): divides every pointer, stride and slice
//   Lanes         lanes per group (power of two <= 32)
//   Block         most threads per block (a multiple of 32); the kernel reads blockDim, so a
//                 launch with fewer threads (a multiple of 32) works too
//   Index64       1: indices are int64, 0: int32
//   Pdl           1: programmatic dependent launch wait/trigger compiled in (sm_90+)
//   SrcDtype      quantize on store from 1: f16, 2: bf16, 3: f32 elements; 0: plain byte copy
//   Fp8           cache elements 1: fp8 e4m3, 2: fp8 e5m2 (0 with a plain copy)
//   Scale         0: x as is, 1: x / scale[0], 2: x / scale[head] (fp32 scales in device memory)
//   KHeadBytes    source bytes of one K head (Scale 2), else 0
//   VHeadBytes    the same for V
//   Fp8Soft       1: integer fp8 conversion (before sm_89), 0: the cvt instruction
//   Items         items each lane group stores (1 or 2; 2 only for plain copies whose slices fit
//                 in one access per lane): more loads in flight per thread
//   EvictFirst    1: cache stores carry an L2 evict-first policy (sm_80+), 0: plain stores
//   PdlTriggerFirst  with Pdl: 1 triggers the dependents before this grid's wait, 0 after it
//                 (src/ops/store_kv_plan.c's class table says where and why)
//
// Quantizing, the row sizes, Vec and the k/v offsets count source bytes; a cache row holds
// one byte per element. Every value is converted as fp8(x / scale): an IEEE fp32 division, round
// to nearest even, saturated to the finite range (never an infinity or a NaN from overflow), NaN
// kept as NaN -- what cvt.rn.satfinite does, and what the integer path reproduces bit for bit.
//
// Per lane: the index load and every K/V load are issued first (the sources do not depend on the
// index), then the index is checked, then every store. So a decode-sized store costs one memory
// latency, not index-latency + row-latency, and no store sits between two loads.

typedef unsigned long long kvjit_u64;
typedef long long kvjit_i64;

// Kernel parameters, passed by value as one __grid_constant__ struct. The host mirror is
// kvjit_store_kv_params in src/ops/store_kv_plan.h: every field is 8 bytes, so the layouts agree.
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
  const float *k_scale;      // quantizing with Scale > 0
  const float *v_scale;
};

// Slot ids at or past num_slots seen by the kernels of this program in the current CUDA context
// (read and reset by kvjit_op_oob_count(), which counts each loaded program once).
extern "C" __device__ kvjit_u64 kvjit_store_kv_oob = 0;

template <int N> struct kvjit_vec;
template <> struct kvjit_vec<16> { struct __align__(16) type { kvjit_u64 lo, hi; }; };
template <> struct kvjit_vec<8> { typedef kvjit_u64 type; };
template <> struct kvjit_vec<4> { typedef unsigned int type; };
template <> struct kvjit_vec<2> { typedef unsigned short type; };
template <> struct kvjit_vec<1> { typedef unsigned char type; };

// Every compile-time constant of one variant (the kernel's template arguments, and what follows
// from them).
template <kvjit_i64 KRowBytes, kvjit_i64 VRowBytes, int Split, int Vec, int Lanes, int Block, int Index64, int Pdl,
          int SrcDtype, int Fp8, int Scale, kvjit_i64 KHeadBytes, kvjit_i64 VHeadBytes, int Fp8Soft, int Items,
          int EvictFirst, int PdlTriggerFirst>
struct kvjit_store_cfg {
  static constexpr kvjit_i64 kKRowBytes = KRowBytes, kVRowBytes = VRowBytes;
  static constexpr int kBlock = Block, kIndex64 = Index64, kPdl = Pdl, kPdlTriggerFirst = PdlTriggerFirst;
  static constexpr int kSrcDtype = SrcDtype, kFp8 = Fp8, kScale = Scale, kFp8Soft = Fp8Soft;
  static constexpr int kEvictFirst = EvictFirst;
  static constexpr kvjit_i64 kKHeadBytes = KHeadBytes, kVHeadBytes = VHeadBytes;
  typedef typename kvjit_vec<Vec>::type chunk;
  static constexpr int kElem = SrcDtype == 0 ? 1 : SrcDtype == 3 ? 4 : 2;  // source bytes per element
  static constexpr int kOutVec = Vec / kElem;                               // cache bytes per access
  typedef typename kvjit_vec<kOutVec>::type out_chunk;
  static constexpr int kElemsPerChunk = Vec / kElem;
  // One scale per chunk (per head), one per row (per tensor), or none.
  static constexpr int kScalePerChunk = Scale == 2;

  static constexpr kvjit_i64 kSplit = Split;
  static constexpr int kLanes = Lanes;
  static constexpr int kVec = Vec;
  static constexpr int kItems = Items;
  static constexpr kvjit_i64 kKSlice = KRowBytes / Split;
  static constexpr kvjit_i64 kVSlice = VRowBytes / Split;
  static constexpr kvjit_i64 kKChunks = kKSlice / kVec;                    // chunks in one K slice
  static constexpr kvjit_i64 kVChunks = kVSlice / kVec;
  static constexpr kvjit_i64 kKPerLane = (kKChunks + kLanes - 1) / kLanes; // chunks each lane copies
  static constexpr kvjit_i64 kVPerLane = (kVChunks + kLanes - 1) / kLanes;
  // Up to this many chunks per lane are all held in registers at once; wider slices (only with a
  // small explicit split) go round by round, kRound chunks at a time.
  static constexpr kvjit_i64 kMaxInFlight = 16;

  static_assert(KRowBytes > 0 && VRowBytes >= 0, "row bytes");
  static_assert(KRowBytes % Split == 0 && VRowBytes % Split == 0, "split must divide both rows");
  static_assert(kKSlice % kVec == 0 && kVSlice % kVec == 0, "slices must be whole vectors");
  static_assert(kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0, "lanes: power of two <= 32");
  static_assert(Block % 32 == 0 && Block <= 1024, "block");
  static_assert(kItems == 1 || (kItems == 2 && SrcDtype == 0 && kKPerLane <= 1 && kVPerLane <= 1),
                "two items per group: plain copies with one access per lane only");
  static_assert(Vec % kElem == 0 && kOutVec >= 1, "an access holds whole source elements");
  static_assert(Scale != 2 || (KHeadBytes % Vec == 0 && (VRowBytes == 0 || VHeadBytes % Vec == 0)),
                "an access must not straddle two heads");
  static_assert(SrcDtype == 0 || (Fp8 == 1 || Fp8 == 2), "quantizing needs an fp8 kind");
};

// Chunk c of this lane is chunk (c * kLanes + lane) of the slice; only the last one can be past
// the end, and only when the chunk count is not a multiple of the lane count.
template <class C, kvjit_i64 kChunks>
__device__ __forceinline__ bool kvjit_in_slice(kvjit_i64 c, int lane) {
  if (kChunks % C::kLanes == 0) return true;
  return c * C::kLanes + lane < kChunks;
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

// Scales: a relaxed load at CTA scope. Strong like the rows' loads, so that ptxas issues it
// with them instead of sinking it past the slot check (a plain load was sunk: one more memory
// latency per decode store); CTA scope, because gpu-scope loads of several scale words per warp
// doubled the time of per-head stores at large batches on the H200 (204 vs 114 us, 2048 B rows
// x 65536). The scales were written before this grid started (or before griddepcontrol.wait).
__device__ __forceinline__ float kvjit_ldf(const float *p) {
  float f;
  asm volatile("ld.relaxed.cta.global.f32 %0, [%1];" : "=f"(f) : "l"(p));
  return f;
}

// The two fp8 formats the cache may hold.
template <int Fp8> struct kvjit_fp8_format;
template <> struct kvjit_fp8_format<1> {  // e4m3fn: bias 7, 3 mantissa bits, no infinities, +-448
  static constexpr unsigned int kMantBits = 3, kBias = 7, kMaxCode = 0x7eu;
  static constexpr unsigned int kMaxBits = 0x43e00000u;        // 448.0f
  static constexpr unsigned int kMinNormalBits = 0x3c800000u;  // 2^-6
  static constexpr float kSubnormalSteps = 512.0f;             // 1 / 2^-9, the subnormal step
};
template <> struct kvjit_fp8_format<2> {  // e5m2: bias 15, 2 mantissa bits, +-57344 finite
  static constexpr unsigned int kMantBits = 2, kBias = 15, kMaxCode = 0x7bu;
  static constexpr unsigned int kMaxBits = 0x47600000u;        // 57344.0f
  static constexpr unsigned int kMinNormalBits = 0x38800000u;  // 2^-14
  static constexpr float kSubnormalSteps = 65536.0f;           // 1 / 2^-16
};

// fp32 -> fp8 with integer arithmetic, for GPUs without the cvt (and to check it: the GPU tests
// compile this path for the H200 too). Round to nearest even, saturate, NaN -> 0x7f.
template <int Fp8>
__device__ __forceinline__ unsigned int kvjit_fp8_soft(float f) {
  typedef kvjit_fp8_format<Fp8> F;
  const unsigned int u = __float_as_uint(f);
  const unsigned int sign = (u >> 24) & 0x80u;
  const unsigned int a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fu;
  unsigned int code;
  if (a > F::kMaxBits) {
    code = F::kMaxCode;  // past the largest finite value (Inf too): saturate
  } else if (a < F::kMinNormalBits) {
    // Subnormal (or zero): a whole number of steps; the scaling by a power of two is exact and
    // rintf rounds half to even. The largest result, 2^mantissa bits, is the smallest normal's code.
    code = (unsigned int)rintf(__uint_as_float(a) * F::kSubnormalSteps);
  } else {
    // Normal: drop mantissa bits with round half to even; a carry moves into the exponent.
    const unsigned int shift = 23u - F::kMantBits;
    code = ((a + (1u << (shift - 1u)) - 1u + ((a >> shift) & 1u)) >> shift) - ((127u - F::kBias) << F::kMantBits);
  }
  return code | sign;
}

// Two values -> two fp8 bytes, lo in the low byte.
template <class C>
__device__ __forceinline__ unsigned int kvjit_fp8x2(float lo, float hi) {
  if constexpr (C::kFp8Soft) {
    return kvjit_fp8_soft<C::kFp8>(lo) | kvjit_fp8_soft<C::kFp8>(hi) << 8;
  } else {
    unsigned short r;
    if constexpr (C::kFp8 == 1) {
      asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    } else {
      asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    }
    return r;
  }
}

// The chunk's source elements as fp32 (exact for f16 and bf16).
template <class C>
__device__ __forceinline__ void kvjit_unpack(const typename C::chunk &in, float (&x)[C::kElemsPerChunk]) {
  union {
    typename C::chunk c;
    unsigned short h[C::kVec / 2];
    unsigned int w[C::kVec >= 4 ? C::kVec / 4 : 1];
  } u;
  u.c = in;
#pragma unroll
  for (int j = 0; j < C::kElemsPerChunk; ++j) {
    if constexpr (C::kSrcDtype == 1) {
      asm("cvt.f32.f16 %0, %1;" : "=f"(x[j]) : "h"(u.h[j]));
    } else if constexpr (C::kSrcDtype == 2) {
      x[j] = __uint_as_float((unsigned int)u.h[j] << 16);
    } else {
      x[j] = __uint_as_float(u.w[j]);
    }
  }
}

// fp32 values -> the cache's fp8 bytes, element 0 in the lowest byte.
template <class C>
__device__ __forceinline__ typename C::out_chunk kvjit_pack(const float (&x)[C::kElemsPerChunk]) {
  kvjit_u64 out = 0;
#pragma unroll
  for (int j = 0; j < C::kElemsPerChunk; j += 2) {
    out |= (kvjit_u64)kvjit_fp8x2<C>(x[j], j + 1 < C::kElemsPerChunk ? x[j + 1] : 0.0f) << (8 * j);
  }
  return (typename C::out_chunk)out;  // one element: the low byte
}

// |v| in [2^-60, 2^61): with both x and the scale in this range, x * (1/scale) neither overflows
// nor underflows, and neither does the residual below.
__device__ __forceinline__ bool kvjit_div_safe(float v) {
  return ((__float_as_uint(v) >> 23) & 0xffu) - 67u <= 120u;
}

// The rare case (a value or the scale outside the safe range: zeros excepted, subnormals, huge
// values, Inf, NaN): one IEEE division per value. Kept out of line so that the common path
// stays short (instruction fetch is part of a decode-sized store's latency). One per variant, as
// when each variant was a program of its own.
template <class C>
__device__ __noinline__ typename C::out_chunk kvjit_convert_exact(typename C::chunk in, float scale) {
  float x[C::kElemsPerChunk];
  kvjit_unpack<C>(in, x);
#pragma unroll
  for (int j = 0; j < C::kElemsPerChunk; ++j) x[j] = x[j] / scale;
  return kvjit_pack<C>(x);
}

// One loaded chunk -> what the cache gets: the chunk itself, or its elements quantized as
// fp8(x / scale) with x / scale the correctly rounded fp32 quotient (as x / s in PyTorch).
//
// A division per value costs a reciprocal, a check and a branch, serialised (0.5 us per decode
// store on the H200). Instead: one correctly rounded reciprocal r per chunk, then q = x * r and
// one correction q + (x - q * scale) * r, which is the correctly rounded quotient whenever r is
// the correctly rounded reciprocal and nothing over- or underflows (Markstein's theorem; checked
// bit for bit against the division by the GPU tests). Zeros keep q (the right signed zero).
// @p redo is set when a value or the scale is outside that range: the caller stores this
// result anyway and then stores kvjit_convert_exact()'s over it, so that the rare case adds no
// branch before the common case's store (the branch cost 0.18 us per decode store).
template <class C>
__device__ __forceinline__ typename C::out_chunk kvjit_convert(const typename C::chunk &in, float scale, bool &redo) {
  redo = false;
  if constexpr (C::kSrcDtype == 0) {
    (void)scale;
    return in;
  } else {
    float x[C::kElemsPerChunk];
    kvjit_unpack<C>(in, x);
    if constexpr (C::kScale != 0) {
      bool fast = kvjit_div_safe(scale);
#pragma unroll
      for (int j = 0; j < C::kElemsPerChunk; ++j) fast &= kvjit_div_safe(x[j]) || x[j] == 0.0f;
      redo = !fast;
      const float r = __frcp_rn(scale);
#pragma unroll
      for (int j = 0; j < C::kElemsPerChunk; ++j) {
        const float q = __fmul_rn(x[j], r);
        const float e = __fmaf_rn(-q, scale, x[j]);
        x[j] = x[j] == 0.0f ? q : __fmaf_rn(e, r, q);
      }
    } else {
      (void)scale;
    }
    return kvjit_pack<C>(x);
  }
}

// A cache store. With EvictFirst the line is marked evict-first in L2: the rows just written are
// not read again soon, and without the mark they push out lines that are (on the H200, decode
// batches of wide rows: 8192 B x 16 0.96 -> 0.73 us per store; see src/ops/store_kv_plan.c).
// The policy is a pure value (no volatile): every store of a thread shares one createpolicy.
__device__ __forceinline__ kvjit_u64 kvjit_evict_first_policy() {
  kvjit_u64 pol;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}

template <class C, typename T> __device__ __forceinline__ void kvjit_st(unsigned char *dst, const T &v) {
  if constexpr (C::kEvictFirst) {
    const kvjit_u64 pol = kvjit_evict_first_policy();
    if constexpr (sizeof(T) == 16) {
      asm volatile("st.global.L2::cache_hint.v2.u64 [%0], {%1, %2}, %3;" :: "l"(dst), "l"(v.lo), "l"(v.hi), "l"(pol)
                   : "memory");
    } else if constexpr (sizeof(T) == 8) {
      asm volatile("st.global.L2::cache_hint.u64 [%0], %1, %2;" :: "l"(dst), "l"(v), "l"(pol) : "memory");
    } else if constexpr (sizeof(T) == 4) {
      asm volatile("st.global.L2::cache_hint.u32 [%0], %1, %2;" :: "l"(dst), "r"(v), "l"(pol) : "memory");
    } else if constexpr (sizeof(T) == 2) {
      asm volatile("st.global.L2::cache_hint.u16 [%0], %1, %2;" :: "l"(dst), "h"(v), "l"(pol) : "memory");
    } else {
      (void)pol;
      *reinterpret_cast<T *>(dst) = v;  // single bytes: a plain store
    }
  } else {
    *reinterpret_cast<T *>(dst) = v;
  }
}

// Store chunk @p in converted at @p dst; redone exactly where the fast path could not be used.
// Only for a single chunk (the round-by-round path): kvjit_store_all() batches the redo.
template <class C>
__device__ __forceinline__ void kvjit_store_one(unsigned char *dst, const typename C::chunk &in, float scale) {
  bool redo;
  kvjit_st<C>(dst, kvjit_convert<C>(in, scale, redo));
  if constexpr (C::kSrcDtype != 0 && C::kScale != 0) {
    if (redo) *reinterpret_cast<typename C::out_chunk *>(dst) = kvjit_convert_exact<C>(in, scale);
  }
}

// A chunk's per-head scale: the chunk's first byte picks the head (an access never straddles two
// heads). Per-tensor scales are loaded once per row by the callers.
template <kvjit_i64 kHeadBytes>
__device__ __forceinline__ float kvjit_scale_of(const float *scales, kvjit_i64 row_offset) {
  static_assert(kHeadBytes > 0, "per-head scales only");
  return kvjit_ldf(scales + row_offset / kHeadBytes);
}

template <class C, kvjit_i64 kChunks, kvjit_i64 kPerLane, kvjit_i64 kSlice, kvjit_i64 kHeadBytes>
__device__ __forceinline__ void kvjit_load_all(typename C::chunk (&buf)[kPerLane > 0 ? kPerLane : 1],
                                               float (&scale)[C::kScalePerChunk && kPerLane > 0 ? kPerLane : 1],
                                               const unsigned char *src, const float *scales, kvjit_i64 slice,
                                               int lane) {
#pragma unroll
  for (kvjit_i64 c = 0; c < kPerLane; ++c) {
    if (kvjit_in_slice<C, kChunks>(c, lane)) {
      kvjit_ld(buf[c], src + (c * C::kLanes + lane) * C::kVec);
      if constexpr (C::kScalePerChunk) {
        scale[c] = kvjit_scale_of<kHeadBytes>(scales, slice * kSlice + (c * C::kLanes + lane) * C::kVec);
      }
    }
  }
  if constexpr (C::kScale == 1) scale[0] = kvjit_ldf(scales);
}

template <class C, kvjit_i64 kChunks, kvjit_i64 kPerLane>
__device__ __forceinline__ void kvjit_store_all(const typename C::chunk (&buf)[kPerLane > 0 ? kPerLane : 1],
                                                const float (&scale)[C::kScalePerChunk && kPerLane > 0 ? kPerLane : 1],
                                                unsigned char *dst, int lane) {
  bool redo[kPerLane > 0 ? kPerLane : 1];
#pragma unroll
  for (kvjit_i64 c = 0; c < kPerLane; ++c) {
    redo[c] = false;
    if (kvjit_in_slice<C, kChunks>(c, lane)) {
      kvjit_st<C>(dst + (c * C::kLanes + lane) * C::kOutVec,
                  kvjit_convert<C>(buf[c], scale[C::kScalePerChunk ? c : 0], redo[c]));
    }
  }
  if constexpr (C::kSrcDtype != 0 && C::kScale != 0) {
    // The rare values the fast division does not cover, after every store has been issued.
#pragma unroll
    for (kvjit_i64 c = 0; c < kPerLane; ++c) {
      if (redo[c]) {
        *reinterpret_cast<typename C::out_chunk *>(dst + (c * C::kLanes + lane) * C::kOutVec) =
            kvjit_convert_exact<C>(buf[c], scale[C::kScalePerChunk ? c : 0]);
      }
    }
  }
}

// Wide slices: rounds of kRound chunks, each round's loads before its stores.
template <class C, kvjit_i64 kChunks, kvjit_i64 kPerLane, kvjit_i64 kSlice, kvjit_i64 kHeadBytes>
__device__ __forceinline__ void kvjit_copy_rounds(const unsigned char *src, unsigned char *dst, const float *scales,
                                                  kvjit_i64 slice, int lane) {
  constexpr kvjit_i64 kRound = 8;
  float row_scale = 0.0f;
  if constexpr (C::kScale == 1) row_scale = kvjit_ldf(scales);
  for (kvjit_i64 base = 0; base < kPerLane; base += kRound) {
    typename C::chunk buf[kRound];
    float scale[C::kScalePerChunk ? kRound : 1];
#pragma unroll
    for (kvjit_i64 r = 0; r < kRound; ++r) {
      const kvjit_i64 c = base + r;
      if (c < kPerLane && kvjit_in_slice<C, kChunks>(c, lane)) {
        kvjit_ld(buf[r], src + (c * C::kLanes + lane) * C::kVec);
        if constexpr (C::kScalePerChunk) {
          scale[r] = kvjit_scale_of<kHeadBytes>(scales, slice * kSlice + (c * C::kLanes + lane) * C::kVec);
        }
      }
    }
#pragma unroll
    for (kvjit_i64 r = 0; r < kRound; ++r) {
      const kvjit_i64 c = base + r;
      if (c < kPerLane && kvjit_in_slice<C, kChunks>(c, lane)) {
        kvjit_store_one<C>(dst + (c * C::kLanes + lane) * C::kOutVec, buf[r],
                           C::kScalePerChunk ? scale[C::kScalePerChunk ? r : 0] : row_scale);
      }
    }
  }
  (void)row_scale;
}

// Negative: a padded token (skip). skip_slot: the reserved padding slot (skip). Past the cache:
// skip and count once per item; never a trap, the CUDA context survives. True: store.
__device__ __forceinline__ bool kvjit_slot_ok(kvjit_i64 slot, const kvjit_store_kv_params &p, kvjit_i64 slice,
                                              int lane) {
  if (slot < 0 || slot == p.skip_slot) return false;
  if (slot >= p.num_slots) {
    if (slice == 0 && lane == 0) atomicAdd(&kvjit_store_kv_oob, 1ull);
    return false;
  }
  return true;
}

template <class C>
__device__ __forceinline__ kvjit_i64 kvjit_slot_of(const kvjit_store_kv_params &p, kvjit_u64 item) {
  if constexpr (C::kIndex64) {
    return static_cast<const kvjit_i64 *>(p.indices)[item * (kvjit_u64)p.index_stride];
  } else {
    return static_cast<const int *>(p.indices)[item * (kvjit_u64)p.index_stride];
  }
}

template <kvjit_i64 KRowBytes, kvjit_i64 VRowBytes, int Split, int Vec, int Lanes, int Block, int Index64, int Pdl,
          int SrcDtype, int Fp8, int Scale, kvjit_i64 KHeadBytes, kvjit_i64 VHeadBytes, int Fp8Soft, int Items,
          int EvictFirst, int PdlTriggerFirst>
__global__ void __launch_bounds__(Block) kvjit_store_kv(const __grid_constant__ kvjit_store_kv_params p) {
  typedef kvjit_store_cfg<KRowBytes, VRowBytes, Split, Vec, Lanes, Block, Index64, Pdl, SrcDtype, Fp8, Scale,
                          KHeadBytes, VHeadBytes, Fp8Soft, Items, EvictFirst, PdlTriggerFirst>
      C;
  typedef typename C::chunk chunk;
  constexpr int kLanes = C::kLanes, kItems = C::kItems;
  constexpr kvjit_i64 kSplit = C::kSplit, kKSlice = C::kKSlice, kVSlice = C::kVSlice;
  constexpr kvjit_i64 kKChunks = C::kKChunks, kVChunks = C::kVChunks, kKPerLane = C::kKPerLane,
                      kVPerLane = C::kVPerLane;
  constexpr int kScalePerChunk = C::kScalePerChunk;
  // A unit is one slice of one item. Group g of block b takes units b * groups * kItems + g + j *
  // groups (j < kItems), so a warp's accesses stay contiguous whatever the item count.
  // blockDim rather than the Block constant: a launch may use fewer threads than the bound.
  const kvjit_u64 groups = blockDim.x / kLanes;
  const int lane = (int)(threadIdx.x % kLanes);
  const kvjit_u64 units = (kvjit_u64)p.batch * (kvjit_u64)kSplit;
  const kvjit_u64 first = (kvjit_u64)blockIdx.x * groups * kItems + threadIdx.x / kLanes;
  if (first >= units) return;

  if constexpr (C::kPdl) {
    // The trigger lets dependents be scheduled; their griddepcontrol.wait still waits for this whole
    // grid to complete (which waits for ours), so where it sits changes timing, never correctness.
    if constexpr (C::kPdlTriggerFirst) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    // Inputs (indices, K, V) may be written by the kernel before us: wait before the first load.
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if constexpr (!C::kPdlTriggerFirst) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }

  // Cache slices count cache bytes: one per source element when quantizing.
  constexpr kvjit_i64 kKSliceOut = kKSlice / C::kElem;
  constexpr kvjit_i64 kVSliceOut = kVSlice / C::kElem;
  constexpr bool kHasV = C::kVRowBytes > 0;
  if constexpr (kKPerLane + kVPerLane <= C::kMaxInFlight) {
    chunk kbuf[kItems][kKPerLane > 0 ? kKPerLane : 1];
    float kscale[kItems][kScalePerChunk && kKPerLane > 0 ? kKPerLane : 1];
    chunk vbuf[kItems][kHasV && kVPerLane > 0 ? kVPerLane : 1];
    float vscale[kItems][kHasV && kScalePerChunk && kVPerLane > 0 ? kVPerLane : 1];
    kvjit_i64 slot[kItems];
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const kvjit_u64 unit = first + (kvjit_u64)j * groups;
      slot[j] = -1;
      if (j > 0 && unit >= units) continue;
      const kvjit_u64 item = unit / (kvjit_u64)kSplit;
      const kvjit_i64 slice = (kvjit_i64)(unit % (kvjit_u64)kSplit);
      slot[j] = kvjit_slot_of<C>(p, item);
      kvjit_load_all<C, kKChunks, kKPerLane, kKSlice, C::kKHeadBytes>(
          kbuf[j], kscale[j], p.k + item * (kvjit_u64)p.k_stride + slice * kKSlice, p.k_scale, slice, lane);
      if constexpr (kHasV) {
        kvjit_load_all<C, kVChunks, kVPerLane, kVSlice, C::kVHeadBytes>(
            vbuf[j], vscale[j], p.v + item * (kvjit_u64)p.v_stride + slice * kVSlice, p.v_scale, slice, lane);
      }
    }
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const kvjit_u64 unit = first + (kvjit_u64)j * groups;
      if (j > 0 && unit >= units) continue;
      const kvjit_i64 slice = (kvjit_i64)(unit % (kvjit_u64)kSplit);
      if (!kvjit_slot_ok(slot[j], p, slice, lane)) continue;
      kvjit_store_all<C, kKChunks, kKPerLane>(kbuf[j], kscale[j],
                                              p.k_cache + slot[j] * p.k_cache_stride + slice * kKSliceOut, lane);
      if constexpr (kHasV) {
        kvjit_store_all<C, kVChunks, kVPerLane>(vbuf[j], vscale[j],
                                                p.v_cache + slot[j] * p.v_cache_stride + slice * kVSliceOut, lane);
      }
    }
  } else {
    const kvjit_u64 item = first / (kvjit_u64)kSplit;
    const kvjit_i64 slice = (kvjit_i64)(first % (kvjit_u64)kSplit);
    const kvjit_i64 slot = kvjit_slot_of<C>(p, item);
    if (!kvjit_slot_ok(slot, p, slice, lane)) return;
    kvjit_copy_rounds<C, kKChunks, kKPerLane, kKSlice, C::kKHeadBytes>(
        p.k + item * (kvjit_u64)p.k_stride + slice * kKSlice, p.k_cache + slot * p.k_cache_stride + slice * kKSliceOut,
        p.k_scale, slice, lane);
    if constexpr (kHasV) {
      kvjit_copy_rounds<C, kVChunks, kVPerLane, kVSlice, C::kVHeadBytes>(
          p.v + item * (kvjit_u64)p.v_stride + slice * kVSlice, p.v_cache + slot * p.v_cache_stride + slice * kVSliceOut,
          p.v_scale, slice, lane);
    }
  }
}
