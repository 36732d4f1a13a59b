// fp32 bit access and explicitly rounded fp32 arithmetic, identical on host, CUDA and HIP.
// Every operation here rounds on its own (SPEC §3): no FMA contraction, no approximate sqrt or
// division, no flush of subnormals. Host builds also pass -ffp-contract=off.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "platform.h"

namespace mxf {

MXF_HD uint32_t f2u(float f) {
#if defined(MXF_DEVICE_PASS)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

MXF_HD float u2f(uint32_t u) {
#if defined(MXF_DEVICE_PASS)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

constexpr uint32_t kF32AbsMask = 0x7fffffffu;
constexpr uint32_t kF32Inf = 0x7f800000u;
constexpr uint32_t kF32MinNormal = 0x00800000u;  // FLT_MIN = 2^-126
constexpr uint32_t kF32QNaN = 0x7fc00000u;

MXF_HD bool is_finite_bits(uint32_t u) { return (u & kF32AbsMask) < kF32Inf; }

MXF_HD float add_rn(float a, float b) {
#if defined(MXF_DEVICE_PASS)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

MXF_HD float mul_rn(float a, float b) {
#if defined(MXF_DEVICE_PASS)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

MXF_HD float div_rn(float a, float b) {
#if defined(MXF_DEVICE_PASS)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

MXF_HD float sqrt_rn(float a) {
#if defined(MXF_DEVICE_PASS)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// 2^k for k in [-127, 127], exact (2^-127 is the fp32 subnormal 0x00400000).
MXF_HD float pow2f(int k) {
  return k >= -126 ? u2f(static_cast<uint32_t>(k + 127) << 23) : u2f(0x00400000u);
}

// v * 2^e with one rounding to nearest even (exact unless the result leaves the normal range),
// for any fp32 v and any e in [-400, 400]; zero, Inf and NaN come back unchanged. The library's
// ldexpf differs between host, CUDA and HIP in what it promises for subnormal results, this does
// not.
MXF_HD float ldexp_rn(float v, int e) {
  uint32_t u = f2u(v);
  if ((u & kF32AbsMask) == 0 || (u & kF32AbsMask) >= kF32Inf) return v;
  if ((u & kF32AbsMask) < kF32MinNormal) {  // subnormal: make it normal first (exact)
    u = f2u(mul_rn(v, pow2f(24)));
    e -= 24;
  }
  const uint32_t sign = u & 0x80000000u, mant = u & 0x7fffffu;
  const int ex = static_cast<int>((u & kF32AbsMask) >> 23) - 127 + e;  // exponent of the result
  if (ex > 127) return u2f(sign | kF32Inf);
  if (ex >= -126) return u2f(sign | (static_cast<uint32_t>(ex + 127) << 23) | mant);
  if (ex < -151) return u2f(sign);  // below half the smallest subnormal (2^-150)
  // The same significand at exponent ex + 126 in [-25, -1] (exact), then one rounding by 2^-126.
  return mul_rn(u2f(sign | (static_cast<uint32_t>(ex + 126 + 127) << 23) | mant), pow2f(-126));
}

// Round-to-nearest-even of an integer significand shifted right by `shift` (1..31), as used for
// every narrowing conversion below. Shifts of 32 or more give 0 for significands below 2^24.
MXF_HD uint32_t rne_shift(uint32_t mant, int shift) {
  if (shift >= 32) return 0;
  const uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

}  // namespace mxf
