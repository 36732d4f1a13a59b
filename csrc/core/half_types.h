// bf16 and fp16 as raw 16-bit patterns, with exact widening and round-to-nearest-even narrowing.
// Any NaN narrows to the canonical NaN 0x7FFF (what the GPU's packed conversions produce), so CPU
// and GPU results are bit-identical, NaNs included.
#pragma once

#include <cstdint>

#include "fp32.h"

#if defined(MXF_CUDA) && defined(MXF_DEVICE_PASS)
#include <cuda_fp16.h>
#endif

namespace mxf {

enum class Dtype : int { kBF16 = 0, kFP16 = 1, kFP32 = 2 };

constexpr uint16_t kNaN16 = 0x7fffu;  // canonical bf16 and fp16 NaN

MXF_HD float bf16_to_f32(uint16_t h) { return u2f(static_cast<uint32_t>(h) << 16); }

MXF_HD uint16_t f32_to_bf16(float f) {
  const uint32_t u = f2u(f);
  if ((u & kF32AbsMask) > kF32Inf) return kNaN16;
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Portable twin of the CUDA hardware conversion below.
MXF_HD float fp16_to_f32_portable(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  const uint32_t m = h & 0x3ffu;
  if (e == 0x1f) return u2f(sign | kF32Inf | (m << 13));
  if (e == 0) {
    // m * 2^-24: both factors and the product are exact in fp32.
    return u2f(sign | f2u(mul_rn(static_cast<float>(m), pow2f(-24))));
  }
  return u2f(sign | ((e + 112u) << 23) | (m << 13));
}

MXF_HD uint16_t f32_to_fp16_portable(float f) {
  const uint32_t u = f2u(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & kF32AbsMask;
  if (a > kF32Inf) return kNaN16;
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to Inf
  if (a >= 0x38800000u) {                       // >= 2^-14: normal fp16
    const uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return sign | static_cast<uint16_t>((r >> 13) - (112u << 10));
  }
  if (a < kF32MinNormal) return sign;
  const int e = static_cast<int>(a >> 23) - 127;  // <= -15
  const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
  return sign | static_cast<uint16_t>(rne_shift(mant, -e - 1));  // units of 2^-24
}

MXF_HD float fp16_to_f32(uint16_t h) {
#if defined(MXF_CUDA) && defined(MXF_DEVICE_PASS)
  return __half2float(__ushort_as_half(h));
#else
  return fp16_to_f32_portable(h);
#endif
}

MXF_HD uint16_t f32_to_fp16(float f) { return f32_to_fp16_portable(f); }

// Two values narrowed at once into one word (lo in bits 0-15). The sm_80+ fast path is one
// cvt.rn.{bf16,f16}x2.f32: RNE with subnormals, overflow to Inf, NaN -> 0x7FFF, as the twin.
MXF_HD uint32_t pack2_bf16(float lo, float hi) {
#if defined(MXF_CUDA) && defined(MXF_DEVICE_PASS) && MXF_CUDA_ARCH >= 800
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
#else
  return f32_to_bf16(lo) | (static_cast<uint32_t>(f32_to_bf16(hi)) << 16);
#endif
}

MXF_HD uint32_t pack2_fp16(float lo, float hi) {
#if defined(MXF_CUDA) && defined(MXF_DEVICE_PASS) && MXF_CUDA_ARCH >= 800
  uint32_t d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
#else
  return f32_to_fp16_portable(lo) | (static_cast<uint32_t>(f32_to_fp16_portable(hi)) << 16);
#endif
}

// Per-half unsigned max of two packed pairs.
MXF_HD uint32_t max_u16x2(uint32_t a, uint32_t b) {
#if defined(MXF_CUDA) && defined(MXF_DEVICE_PASS)
  return __vmaxu2(a, b);
#else
  const uint32_t lo = (a & 0xffffu) > (b & 0xffffu) ? (a & 0xffffu) : (b & 0xffffu);
  const uint32_t hi = (a >> 16) > (b >> 16) ? (a >> 16) : (b >> 16);
  return lo | (hi << 16);
#endif
}

}  // namespace mxf

namespace mxf {

// Element access by run-time dtype, for code paths where a branch per element is cheap.
MXF_HD float load_as_f32(const void* base, int64_t i, Dtype d) {
  switch (d) {
    case Dtype::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case Dtype::kFP16:
      return fp16_to_f32(static_cast<const uint16_t*>(base)[i]);
    default:
      return static_cast<const float*>(base)[i];
  }
}

MXF_HD void store_from_f32(void* base, int64_t i, Dtype d, float v) {
  switch (d) {
    case Dtype::kBF16:
      static_cast<uint16_t*>(base)[i] = f32_to_bf16(v);
      break;
    case Dtype::kFP16:
      static_cast<uint16_t*>(base)[i] = f32_to_fp16(v);
      break;
    default:
      static_cast<float*>(base)[i] = v;
  }
}

MXF_HD float round_to_dtype(float v, Dtype d) {
  switch (d) {
    case Dtype::kBF16:
      return bf16_to_f32(f32_to_bf16(v));
    case Dtype::kFP16:
      return fp16_to_f32(f32_to_fp16(v));
    default:
      return v;
  }
}

}  // namespace mxf
