// kvjit's fp8 conversions, the one copy every op's kernels use (store_kv_cache quantizes on store,
// transfer_kv converts on the way in both directions). Given to NVRTC as a header of each op's
// program (src/op/kernel_headers.c); plain C++ apart from a few CUDA intrinsics, so the host tests
// compile it too.
//
// Quantizing (fp32/f16/bf16 -> fp8): fp8(x / scale) with x / scale the correctly rounded fp32
// quotient, round to nearest even, saturated to the finite range (never an infinity or a NaN from
// overflow), NaN kept as NaN (0x7f) -- what cvt.rn.satfinite does and the integer path reproduces.
// The functions taking a config C read: C::kSrcDtype (1 f16, 2 bf16, 3 f32; 0 a plain copy),
// C::kFp8 (1 e4m3fn, 2 e5m2), C::kScale (0 none, else a scale), C::kFp8Soft, C::kVec (source bytes
// of one access), C::kElemsPerChunk, C::chunk and C::out_chunk.
//
// Dequantizing (fp8 -> f16/bf16/f32): the fp8 value widened exactly to fp32, times the scale (one
// fp32 multiplication, round to nearest even), rounded to nearest even into the destination type,
// overflow to infinity; every NaN becomes the canonical NaN of the destination (0x7fff for f16 and
// bf16, 0x7fffffff for f32: what the GPU's own conversions and multiplications produce). Integer
// arithmetic only, the same on every arch.
#ifndef KVJIT_FP8_CUH
#define KVJIT_FP8_CUH

typedef unsigned long long kvjit_u64;
typedef long long kvjit_i64;

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


// ---- dequantizing --------------------------------------------------------------------------------

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

#endif
