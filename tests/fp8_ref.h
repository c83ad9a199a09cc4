/*
 * Host reference of the fp8 conversions kvjit's quantizing store performs: fp32 -> fp8 e4m3fn /
 * e5m2, round to nearest even, saturated to the finite range (Inf included), NaN -> 0x7f. Written
 * from the formats' definitions (value = 2^(e - bias) x 1.m, subnormals 2^(1 - bias) x 0.m) with
 * a search over the 256 codes, so that it does not share the kernel's bit tricks; plus the
 * f16/bf16 -> fp32 widening and the fp32 division the kernel does first. And the other way
 * (transfer_kv's load): fp8 -> fp32 exactly, times a scale, rounded into f16 / bf16 / f32.
 */
#ifndef KVJIT_TEST_FP8_REF_H
#define KVJIT_TEST_FP8_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Value of fp8 code @p code (e4m3 when @p e4m3, else e5m2); NAN for NaN codes, INFINITY for e5m2 Inf. */
static inline double fp8_ref_decode(uint8_t code, int e4m3) {
  int mant_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  int sign = code >> 7, exp = (code >> mant_bits) & (e4m3 ? 0xf : 0x1f), mant = code & ((1 << mant_bits) - 1);
  double v;
  if (e4m3 && exp == 0xf && mant == 7) return NAN;
  if (!e4m3 && exp == 0x1f) return mant ? NAN : (sign ? -INFINITY : INFINITY);
  if (exp == 0) {
    v = ldexp((double)mant, 1 - bias - mant_bits);
  } else {
    v = ldexp((double)((1 << mant_bits) | mant), exp - bias - mant_bits);
  }
  return sign ? -v : v;
}

/* Nearest finite code by exhaustive search, ties to the even code, then saturation. Slow (a
 * pass over every code): the definition that fp8_ref_encode() is checked against. */
static inline uint8_t fp8_ref_encode_slow(float x, int e4m3) {
  if (isnan(x)) return 0x7f;
  int negative = signbit(x) != 0;
  double a = fabs((double)x);
  uint8_t max_code = e4m3 ? 0x7e : 0x7b;
  if (a >= fp8_ref_decode(max_code, e4m3)) return (uint8_t)(max_code | (negative ? 0x80 : 0));
  uint8_t best = 0;
  double best_err = INFINITY;
  for (unsigned code = 0; code <= max_code; code++) {
    double err = fabs(fp8_ref_decode((uint8_t)code, e4m3) - a);
    /* Codes ascend with value: on a tie the even one (the lower mantissa LSB) wins. */
    if (err < best_err || (err == best_err && (code & 1) == 0)) {
      best = (uint8_t)code;
      best_err = err;
    }
  }
  return (uint8_t)(best | (negative ? 0x80 : 0));
}

/* The same by binary search over the ascending positive codes (a table built on first use). */
static inline uint8_t fp8_ref_encode(float x, int e4m3) {
  static double table[2][128];
  static int ready[2];
  if (!ready[e4m3]) {
    for (unsigned code = 0; code < 128; code++) table[e4m3][code] = fp8_ref_decode((uint8_t)code, e4m3);
    ready[e4m3] = 1;
  }
  if (isnan(x)) return 0x7f;
  const double *t = table[e4m3];
  unsigned max_code = e4m3 ? 0x7e : 0x7b;
  uint8_t sign = signbit(x) ? 0x80 : 0;
  double a = fabs((double)x);
  if (a >= t[max_code]) return (uint8_t)(max_code | sign);
  unsigned lo = 0, hi = max_code; /* t[lo] <= a < t[hi] */
  while (hi - lo > 1) {
    unsigned mid = (lo + hi) / 2;
    if (t[mid] <= a) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  double below = a - t[lo], above = t[hi] - a;
  unsigned code = below < above ? lo : above < below ? hi : (lo % 2 == 0 ? lo : hi);
  return (uint8_t)(code | sign);
}

static inline float fp8_ref_bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* IEEE binary16 -> fp32 (exact). */
static inline float fp8_ref_f16_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0x1f) return fp8_ref_bits_to_float(sign | 0x7f800000u | mant << 13);
  if (exp == 0) {
    float v = ldexpf((float)mant, -24);
    return sign ? -v : v;
  }
  return fp8_ref_bits_to_float(sign | (exp + 112) << 23 | mant << 13);
}

static inline float fp8_ref_bf16_to_float(uint16_t h) { return fp8_ref_bits_to_float((uint32_t)h << 16); }

/* fp32 -> a binary format of @p mant_bits stored mantissa bits and exponent bias @p bias (f16: 10,
 * 15; bf16: 7, 127), round to nearest even from the value (double arithmetic, nearbyint in the
 * default rounding mode), overflow to infinity, every NaN -> 0x7fff: what the GPU's conversions
 * (cvt.rn.f16.f32, cvt.rn.bf16.f32) and PyTorch's CUDA conversions produce. */
static inline uint16_t fp8_ref_float_to_binary16(float x, int mant_bits, int bias) {
  if (isnan(x)) return 0x7fff;
  const int exp_bits = 15 - mant_bits;
  const uint16_t sign = signbit(x) ? 0x8000 : 0, inf = (uint16_t)(((1u << exp_bits) - 1) << mant_bits);
  double a = fabs((double)x);
  if (isinf(a)) return (uint16_t)(sign | inf);
  const int min_exp = 1 - bias; /* the smallest normal is 2^min_exp */
  if (a < ldexp(1.0, min_exp)) {
    /* Subnormal: whole steps of 2^(min_exp - mant_bits); the largest result is the smallest normal's code. */
    return (uint16_t)(sign | (uint16_t)nearbyint(ldexp(a, mant_bits - min_exp)));
  }
  int e;
  frexp(a, &e); /* a in [2^(e-1), 2^e) */
  int exponent = e - 1;
  double q = nearbyint(ldexp(a, mant_bits - exponent)); /* in [2^m, 2^(m+1)] */
  if (q >= ldexp(1.0, mant_bits + 1)) {
    q /= 2;
    exponent++;
  }
  if (exponent + bias >= (1 << exp_bits) - 1) return (uint16_t)(sign | inf);
  return (uint16_t)(sign | (uint16_t)((exponent + bias) << mant_bits) | (uint16_t)(q - ldexp(1.0, mant_bits)));
}

static inline uint16_t fp8_ref_float_to_f16(float x) { return fp8_ref_float_to_binary16(x, 10, 15); }
static inline uint16_t fp8_ref_float_to_bf16(float x) { return fp8_ref_float_to_binary16(x, 7, 127); }

/* fp32 bits, every NaN as the GPU's canonical 0x7fffffff. */
static inline uint32_t fp8_ref_float_bits(float x) {
  uint32_t u;
  if (isnan(x)) return 0x7fffffffu;
  memcpy(&u, &x, sizeof u);
  return u;
}

/* What transfer_kv's dequantizing copy writes for fp8 @p code (e4m3 when @p e4m3) times @p scale
 * (@p scaled 0: no multiplication), as destination bits (@p dst: 1 f16, 2 bf16, 3 f32): the
 * value widened exactly, one fp32 multiplication, rounded to nearest even into the destination. */
static inline uint32_t fp8_ref_dequant(uint8_t code, int e4m3, int scaled, float scale, int dst) {
  float x = (float)fp8_ref_decode(code, e4m3);
  if (scaled) x = x * scale;
  return dst == 1 ? fp8_ref_float_to_f16(x) : dst == 2 ? fp8_ref_float_to_bf16(x) : fp8_ref_float_bits(x);
}

/*
 * One row as transfer_kv converts it: @p row source bytes of kvjit_dtype @p src (1 f16, 2 bf16,
 * 3 f32, 4 fp8 e4m3, 5 fp8 e5m2; 0 or @p dst equal: a copy) into @p out in kvjit_dtype @p dst;
 * @p scale_kind 0 none, 1 @p scales[0], 2 @p scales[element / (elements / @p heads)].
 */
static inline void fp8_ref_convert_row(unsigned char *out, const unsigned char *in, int64_t row, int src, int dst,
                                       int scale_kind, const float *scales, int64_t heads) {
  if (dst == 0 || dst == src) {
    memcpy(out, in, (size_t)row);
    return;
  }
  const int es = src == 3 ? 4 : src <= 2 ? 2 : 1, ed = dst == 3 ? 4 : dst <= 2 ? 2 : 1;
  const int64_t elems = row / es, head = scale_kind == 2 ? elems / heads : elems;
  for (int64_t e = 0; e < elems; e++) {
    const float scale = scale_kind == 0 ? 1.0f : scales[scale_kind == 2 ? e / head : 0];
    if (ed == 1) { /* quantizing: fp8(x / scale) */
      float x;
      uint16_t h;
      if (es == 4) {
        memcpy(&x, in + 4 * e, 4);
      } else {
        memcpy(&h, in + 2 * e, 2);
        x = src == 2 ? fp8_ref_bf16_to_float(h) : fp8_ref_f16_to_float(h);
      }
      if (scale_kind != 0) x = x / scale;
      out[e] = fp8_ref_encode(x, dst == 4);
    } else { /* dequantizing: x * scale */
      const uint32_t bits = fp8_ref_dequant(in[e], src == 4, scale_kind != 0, scale, dst);
      memcpy(out + ed * e, &bits, (size_t)ed); /* little endian: the low bytes */
    }
  }
}

#endif
