// CPU MXFP6 E2M3 pack / unpack / round and the W6A16 linear.
#include <ATen/Parallel.h>

#include <vector>

#include "../core/mxfp6_layout.h"
#include "cpu_ops.h"

namespace mxf::cpu {

void mxfp6_pack(const Fp6PackParams& p) {
  const int64_t groups = p.k / kMxBlock;
  at::parallel_for(0, p.n, 16, [&](int64_t begin, int64_t end) {
    float v[kMxBlock];
    uint8_t codes[kMxBlock];
    for (int64_t row = begin; row < end; ++row) {
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t base = row * p.w_stride + g * kMxBlock;
        for (int i = 0; i < kMxBlock; ++i) v[i] = load_as_f32(p.w, base + i, p.dtype);
        const uint8_t sb = e2m3_quantize_block(v, codes, p.rule);
        if (p.scales != nullptr) p.scales[row * groups + g] = sb;
        if (p.packed != nullptr) fp6_pack_group(codes, p.packed + fp6_group_offset(row, g, p.k));
        if (p.rounded != nullptr) {
          for (int i = 0; i < kMxBlock; ++i) {
            store_from_f32(p.rounded, base + i, p.dtype, e2m3_dequantize(codes[i], sb));
          }
        }
      }
    }
  });
}

void mxfp6_unpack(const Fp6UnpackParams& p) {
  const int64_t groups = p.k / kMxBlock;
  at::parallel_for(0, p.n, 16, [&](int64_t begin, int64_t end) {
    uint8_t codes[kMxBlock];
    for (int64_t row = begin; row < end; ++row) {
      for (int64_t g = 0; g < groups; ++g) {
        fp6_unpack_group(p.packed + fp6_group_offset(row, g, p.k), codes);
        const uint8_t sb = p.scales[row * groups + g];
        for (int i = 0; i < kMxBlock; ++i) {
          store_from_f32(p.out, row * p.k + g * kMxBlock + i, p.out_dtype,
                         e2m3_dequantize(codes[i], sb));
        }
      }
    }
  });
}

// Each task dequantizes rows of W6 once and dots them with every row of x (fp32, in k order).
void mxfp6_linear(const Fp6LinearParams& p) {
  std::vector<float> xf(static_cast<size_t>(p.m * p.k));
  for (int64_t r = 0; r < p.m; ++r) {
    for (int64_t j = 0; j < p.k; ++j) xf[r * p.k + j] = load_as_f32(p.x, r * p.x_stride + j, p.act);
  }
  const int64_t groups = p.k / kMxBlock;
  at::parallel_for(0, p.n, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> w(static_cast<size_t>(p.k));
    uint8_t codes[kMxBlock];
    for (int64_t row = begin; row < end; ++row) {
      for (int64_t g = 0; g < groups; ++g) {
        fp6_unpack_group(p.packed + fp6_group_offset(row, g, p.k), codes);
        const uint8_t sb = p.scales[row * groups + g];
        for (int i = 0; i < kMxBlock; ++i) w[g * kMxBlock + i] = e2m3_dequantize(codes[i], sb);
      }
      const float b = p.bias != nullptr ? load_as_f32(p.bias, row, p.bias_dtype) : 0.0f;
      for (int64_t r = 0; r < p.m; ++r) {
        float acc = 0.0f;
        const float* xr = &xf[r * p.k];
        for (int64_t j = 0; j < p.k; ++j) acc = add_rn(acc, mul_rn(xr[j], w[j]));
        store_from_f32(p.out, r * p.n + row, p.act, add_rn(acc, b));
      }
    }
  });
}

}  // namespace mxf::cpu
