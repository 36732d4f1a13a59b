// Gemma RMSNorm numerics (SPEC §3): the canonical sum of squares and the per-element formulas.
// GPU kernels map virtual lanes onto threads; the host version below runs the same tree literally.
#pragma once

#include <cstdint>

#include "fp32.h"
#include "half_types.h"

namespace mxf {

constexpr int kChunk = 8;            // elements per chunk (one 16-byte vector of bf16/fp16)
constexpr int kVirtualLanes = 256;   // lanes of the canonical reduction tree

// A lane's running partial: product rounded, then sum rounded, in element order.
MXF_HD float sumsq_step(float partial, float s) { return add_rn(partial, mul_rn(s, s)); }

// ms = total / N, rstd = 1 / sqrt(ms + eps), each correctly rounded.
MXF_HD float rstd_from_sumsq(float total, int64_t n, float eps) {
  const float ms = div_rn(total, static_cast<float>(n));
  return div_rn(1.0f, sqrt_rn(add_rn(ms, eps)));
}

// y = (s * rstd) * (w + offset), before rounding to the activation dtype.
MXF_HD float norm_value(float s, float rstd, float w_plus_offset) {
  return mul_rn(mul_rn(s, rstd), w_plus_offset);
}

// Host reference of the canonical reduction over one row of fp32 values.
inline float canonical_sumsq_host(const float* s, int64_t n) {
  float p[kVirtualLanes];
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  for (int l = 0; l < kVirtualLanes; ++l) {
    float acc = 0.0f;
    for (int64_t c = l; c < chunks; c += kVirtualLanes) {
      const int64_t end = (c + 1) * kChunk < n ? (c + 1) * kChunk : n;
      for (int64_t e = c * kChunk; e < end; ++e) acc = sumsq_step(acc, s[e]);
    }
    p[l] = acc;
  }
  for (int d = kVirtualLanes / 2; d >= 1; d >>= 1) {
    for (int l = 0; l < d; ++l) p[l] = add_rn(p[l], p[l + d]);
  }
  return p[0];
}

}  // namespace mxf
