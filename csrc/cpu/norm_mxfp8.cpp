// CPU Gemma RMSNorm (+ residual add, + MXFP8 quantization) and stand-alone MXFP8 (de)quantization.
#include <ATen/Parallel.h>

#include <vector>

#include "../core/rmsnorm.h"
#include "cpu_ops.h"

namespace mxf::cpu {
namespace {
constexpr int64_t kRowGrain = 16;
}

void gemma_norm(const NormParams& p) {
  const int64_t n = p.n;
  std::vector<float> w_plus_offset(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    w_plus_offset[j] = add_rn(load_as_f32(p.weight, j, p.wdtype), p.weight_offset);
  }
  at::parallel_for(0, p.m, kRowGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> s(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (int64_t row = begin; row < end; ++row) {
      const int64_t xo = row * p.x_stride;
      for (int64_t j = 0; j < n; ++j) {
        float v = load_as_f32(p.x, xo + j, p.act);
        if (p.residual != nullptr) {
          const int64_t ro = row * p.r_stride + j;
          v = round_to_dtype(add_rn(v, load_as_f32(p.residual, ro, p.act)), p.act);
          store_from_f32(p.residual, ro, p.act, v);
        }
        s[j] = v;
      }
      const float rstd = rstd_from_sumsq(canonical_sumsq_host(s.data(), n), n, p.eps);
      for (int64_t j = 0; j < n; ++j) {
        y[j] = round_to_dtype(norm_value(s[j], rstd, w_plus_offset[j]), p.act);
      }
      if (p.codes == nullptr) {
        for (int64_t j = 0; j < n; ++j) store_from_f32(p.y, row * n + j, p.act, y[j]);
      } else {
        for (int64_t b = 0; b < n / kMxBlock; ++b) {
          p.scales[row * (n / kMxBlock) + b] =
              e4m3_quantize_block(&y[b * kMxBlock], p.codes + row * n + b * kMxBlock, p.rule);
        }
      }
    }
  });
}

void mxfp8_quantize(const QuantParams& p) {
  const int64_t blocks = p.n / kMxBlock;
  at::parallel_for(0, p.m, kRowGrain, [&](int64_t begin, int64_t end) {
    float v[kMxBlock];
    for (int64_t row = begin; row < end; ++row) {
      for (int64_t b = 0; b < blocks; ++b) {
        for (int i = 0; i < kMxBlock; ++i) {
          v[i] = load_as_f32(p.x, row * p.x_stride + b * kMxBlock + i, p.act);
        }
        p.scales[row * blocks + b] =
            e4m3_quantize_block(v, p.codes + row * p.n + b * kMxBlock, p.rule);
      }
    }
  });
}

void mxfp8_dequantize(const DequantParams& p) {
  const int64_t blocks = p.n / kMxBlock;
  at::parallel_for(0, p.m, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      for (int64_t j = 0; j < p.n; ++j) {
        const float v = e4m3_dequantize(p.codes[row * p.n + j], p.scales[row * blocks + j / kMxBlock]);
        store_from_f32(p.out, row * p.n + j, p.out_dtype, v);
      }
    }
  });
}

}  // namespace mxf::cpu
