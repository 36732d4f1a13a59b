// MX element and scale codecs (SPEC §1, §2): FP8 E4M3, FP6 E2M3, E8M0 and the block scale rules.
// This is the one implementation of the block-quant math; CPU ops and GPU kernels both call it.
#pragma once

#include <cstdint>

#include "fp32.h"

#if defined(MXF_CUDA) && defined(MXF_DEVICE_PASS) && MXF_CUDA_ARCH >= 890
#include <cuda_fp8.h>
#define MXF_HAS_CVT_E4M3 1
#endif

namespace mxf {

enum class ScaleRule : int { kCeil = 0, kFloor = 1 };

constexpr int kMxBlock = 32;
constexpr uint8_t kE8M0NaN = 0xff;
constexpr uint8_t kE4M3NaN = 0x7f;

// Both element formats have 3 mantissa bits; they differ in the smallest normal exponent, the
// largest finite magnitude and where the sign bit sits.
struct E4M3 {
  static constexpr int kMinNormalExp = -6;         // 2^-6
  static constexpr int kEmax = 8;                  // 448 = 1.75 * 2^8
  static constexpr uint32_t kMaxMant = 0x600000u;  // mantissa bits of 1.75
  static constexpr uint32_t kMaxBits = 0x43e00000u;
  static constexpr uint32_t kMaxCode = 0x7eu;
  static constexpr int kSignBit = 7;
};
struct E2M3 {
  static constexpr int kMinNormalExp = 0;          // 1.0
  static constexpr int kEmax = 2;                  // 7.5 = 1.875 * 2^2
  static constexpr uint32_t kMaxMant = 0x700000u;  // mantissa bits of 1.875
  static constexpr uint32_t kMaxBits = 0x40f00000u;
  static constexpr uint32_t kMaxCode = 0x1fu;
  static constexpr int kSignBit = 5;
};

// fp32 -> narrow code, round to nearest even with subnormals, saturating. NaN: E4M3 0x7F; E2M3 has
// no NaN and saturates (callers reject non-finite weights before they get here).
template <typename F>
MXF_HD uint32_t encode_portable(float f) {
  const uint32_t u = f2u(f);
  const uint32_t sign = (u >> 31) << F::kSignBit;
  const uint32_t a = u & kF32AbsMask;
  if (a > kF32Inf) return F::kSignBit == 7 ? kE4M3NaN : (sign | F::kMaxCode);
  if (a > F::kMaxBits) return sign | F::kMaxCode;
  constexpr uint32_t kMinNormalBits = static_cast<uint32_t>(127 + F::kMinNormalExp) << 23;
  if (a >= kMinNormalBits) {
    const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
    return sign | ((r >> 20) - (static_cast<uint32_t>(126 + F::kMinNormalExp) << 3));
  }
  if (a < kF32MinNormal) return sign;
  const int e = static_cast<int>(a >> 23) - 127;
  const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
  // Units of the subnormal step 2^(kMinNormalExp - 3); a carry into 8 is the smallest normal.
  return sign | rne_shift(mant, 20 + F::kMinNormalExp - e);
}

MXF_HD uint8_t e4m3_encode(float f) {
#if defined(MXF_HAS_CVT_E4M3)
  // cvt.rn.satfinite.e4m3x2.f32: RNE, subnormals, +-448 on overflow, 0x7F for NaN.
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3));
#else
  return static_cast<uint8_t>(encode_portable<E4M3>(f));
#endif
}

// Two codes at once (lo in bits 0-7). Fast path: one cvt.rn.satfinite.e4m3x2.f32.
MXF_HD uint32_t e4m3_encode2(float lo, float hi) {
#if defined(MXF_HAS_CVT_E4M3)
  uint16_t d;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(d) : "f"(hi), "f"(lo));
  return d;
#else
  return encode_portable<E4M3>(lo) | (encode_portable<E4M3>(hi) << 8);
#endif
}

// encode_portable<E2M3> without branches (tests/cpp: equal for all 2^32 inputs). |f| >= 1: round
// the fp32 bits at mantissa bit 20 (nearest even), the code is the bits above less 1.0's exponent,
// capped at 7.5's code (values above 7.5, Inf and NaN saturate, as in encode_portable). |f| < 1:
// the steps are 1/8, so |f| + 2^20 (one fp32 add, whose ulp there is 1/8) rounds |f| * 8 to the
// nearest integer, even on ties; 8 is 1.0's code, the carry encode_portable gives.
MXF_HD uint8_t e2m3_encode(float f) {
  const uint32_t u = f2u(f), a = u & kF32AbsMask;
  const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
  const uint32_t big = (r >> 20) - (126u << 3);
  const uint32_t normal = big < E2M3::kMaxCode ? big : E2M3::kMaxCode;
  const uint32_t small = f2u(add_rn(u2f(a), 1048576.0f)) - 0x49800000u;  // 0x49800000: 2^20
  return static_cast<uint8_t>(((u >> 31) << E2M3::kSignBit) | (a >= 0x3f800000u ? normal : small));
}

// Code -> exact fp32 value.
template <typename F>
MXF_HD float decode(uint32_t code) {
  const uint32_t sign = ((code >> F::kSignBit) & 1u) << 31;
  const uint32_t mag = code & ((1u << F::kSignBit) - 1u);
  if (F::kSignBit == 7 && mag == 0x7fu) return u2f(kF32QNaN);
  const uint32_t e = mag >> 3;
  const uint32_t m = mag & 7u;
  if (e == 0) return u2f(sign | f2u(mul_rn(static_cast<float>(m), pow2f(F::kMinNormalExp - 3))));
  return u2f(sign | ((e + static_cast<uint32_t>(126 + F::kMinNormalExp)) << 23) | (m << 20));
}

MXF_HD float e4m3_decode(uint8_t code) { return decode<E4M3>(code); }
MXF_HD float e2m3_decode(uint8_t code) { return decode<E2M3>(code); }

// E8M0 byte -> 2^(sb-127); 0xFF is NaN.
MXF_HD float e8m0_to_f32(uint8_t sb) {
  return sb == kE8M0NaN ? u2f(kF32QNaN) : pow2f(static_cast<int>(sb) - 127);
}

// Scale byte from the largest |v| of a block, given as fp32 bits (max over |v| bits: for finite
// values the integer order is the float order, and any NaN or Inf lands at or above 0x7F800000).
template <typename F>
MXF_HD uint8_t scale_from_amax_bits(uint32_t amax_bits, ScaleRule rule) {
  if (amax_bits >= kF32Inf) return kE8M0NaN;
  if (amax_bits < kF32MinNormal) amax_bits = kF32MinNormal;
  const int e = static_cast<int>(amax_bits >> 23) - 127;
  int sb = e - F::kEmax + 127;
  if (rule == ScaleRule::kCeil && (amax_bits & 0x7fffffu) > F::kMaxMant) sb += 1;
  return static_cast<uint8_t>(sb < 0 ? 0 : (sb > 254 ? 254 : sb));
}

// Element code of v in a block with scale byte sb (SPEC §2).
MXF_HD uint8_t e4m3_quantize(float v, uint8_t sb) {
  if (sb == kE8M0NaN) return kE4M3NaN;
  return e4m3_encode(mul_rn(v, pow2f(127 - static_cast<int>(sb))));
}
MXF_HD uint8_t e2m3_quantize(float v, uint8_t sb) {
  return e2m3_encode(mul_rn(v, pow2f(127 - static_cast<int>(sb))));
}

// Dequantized value; NaN when the scale or the code is NaN (returned directly: GPUs and CPUs
// propagate NaN payloads through arithmetic differently).
MXF_HD float e4m3_dequantize(uint8_t code, uint8_t sb) {
  if (sb == kE8M0NaN || (code & 0x7fu) == kE4M3NaN) return u2f(kF32QNaN);
  return mul_rn(e4m3_decode(code), pow2f(static_cast<int>(sb) - 127));
}
// e2m3_decode without branches: the 5 magnitude bits placed at fp32 bits 20..24 are the code's
// value times 2^-126 (codes with a zero exponent land on fp32 subnormals, m * 2^-129, still exact),
// one multiply by 2^126 restores it (tests/cpp: equal to e2m3_decode for all 64 codes).
MXF_HD float e2m3_decode_fast(uint32_t code) {
  return mul_rn(u2f(((code & 0x20u) << 26) | ((code & 0x1fu) << 20)), pow2f(126));
}

// The code's exact value times 2^(sb-127), rounded once; NaN for the NaN scale.
MXF_HD float e2m3_dequantize(uint32_t code, uint8_t sb) {
  if (sb == kE8M0NaN) return u2f(kF32QNaN);
  return mul_rn(e2m3_decode_fast(code), pow2f(static_cast<int>(sb) - 127));
}

// ---- MXFP8 x MXFP8 GEMM (SPEC §5) ----
// out[m, n] = round(sum over K blocks j, in order, of term_j (+ bias)) in fp32, where term_j is
// dot_j * 2^(sa_j - 127) * 2^(sb_j - 127) rounded once, and dot_j the fp32 sum of the block's 32
// products a_i * b_i, left to right. Every product of two E4M3 values is exact in fp32 (4 x 4
// significant bits, magnitudes 2^-18 .. 448^2), so dot_j is a multiple of 2^-18 below 2^23 in
// magnitude; a NaN code or scale makes the term NaN. The CPU op runs mxfp8_row_dot; the GPU
// kernel runs the same order with e4m3_decode_fast and fmas (each product is exact, so an fma
// rounds like the add), then mxfp8_block_term and canonical_nan.

// e4m3_decode in five integer/float operations: the 7 magnitude bits placed at fp32 bits 20..26
// are the code's value times 2^-120 (subnormal codes land on fp32 subnormals, still exact), one
// multiply by 2^120 restores it; codes 0x7F / 0xFF are NaN.
MXF_HD float e4m3_decode_fast(uint32_t code) {
  const float v = mul_rn(u2f(((code & 0x80u) << 24) | ((code & 0x7fu) << 20)), pow2f(120));
  return (code & 0x7fu) == 0x7fu ? u2f(kF32QNaN) : v;
}

MXF_HD float e4m3_block_dot(const uint8_t* a, const uint8_t* b) {
  float s = 0.0f;
  for (int i = 0; i < kMxBlock; ++i) s = add_rn(s, mul_rn(e4m3_decode(a[i]), e4m3_decode(b[i])));
  return s;
}

// dot * 2^(sa + sb - 254) with one rounding (ldexp_rn). When that power is a normal fp32 (the
// usual case), one multiply by it gives the same result: a multiply by an exact power of two
// rounds once, to nearest even, into the subnormals or to Inf where the result lies there; zero,
// Inf and NaN stay zero, Inf and NaN (outputs make NaN canonical).
MXF_HD float mxfp8_block_term(float dot, uint8_t sa, uint8_t sb) {
  if (sa == kE8M0NaN || sb == kE8M0NaN) return u2f(kF32QNaN);
  const int e = static_cast<int>(sa) + static_cast<int>(sb) - 254;
  if (e >= -126 && e <= 127) return mul_rn(dot, pow2f(e));
  return ldexp_rn(dot, e);
}

// One output before the bias: rows a and b of K = 32 * blocks codes and their scale bytes.
MXF_HD float mxfp8_row_dot(const uint8_t* a, const uint8_t* a_scale, const uint8_t* b,
                           const uint8_t* b_scale, int64_t blocks) {
  float acc = 0.0f;
  for (int64_t j = 0; j < blocks; ++j) {
    acc = add_rn(acc, mxfp8_block_term(e4m3_block_dot(a + j * kMxBlock, b + j * kMxBlock),
                                       a_scale[j], b_scale[j]));
  }
  return acc;
}

// NaN as one bit pattern (0x7FC00000), so that fp32 outputs match across CPU and GPU, which
// propagate NaN payloads differently.
MXF_HD float canonical_nan(float v) { return (f2u(v) & kF32AbsMask) > kF32Inf ? u2f(kF32QNaN) : v; }

MXF_HD uint32_t abs_bits(float v) { return f2u(v) & kF32AbsMask; }
MXF_HD uint32_t max_u32(uint32_t a, uint32_t b) { return a > b ? a : b; }

// Whole-block helpers for host code and simple kernels.
MXF_HD uint8_t e4m3_quantize_block(const float* v, uint8_t* codes, ScaleRule rule) {
  uint32_t amax = 0;
  for (int i = 0; i < kMxBlock; ++i) amax = max_u32(amax, abs_bits(v[i]));
  const uint8_t sb = scale_from_amax_bits<E4M3>(amax, rule);
  for (int i = 0; i < kMxBlock; ++i) codes[i] = e4m3_quantize(v[i], sb);
  return sb;
}

MXF_HD uint8_t e2m3_quantize_block(const float* v, uint8_t* codes, ScaleRule rule) {
  uint32_t amax = 0;
  for (int i = 0; i < kMxBlock; ++i) amax = max_u32(amax, abs_bits(v[i]));
  const uint8_t sb = scale_from_amax_bits<E2M3>(amax, rule);
  for (int i = 0; i < kMxBlock; ++i) codes[i] = e2m3_quantize(v[i], sb);
  return sb;
}

}  // namespace mxf
