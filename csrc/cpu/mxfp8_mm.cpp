// CPU MXFP8 x MXFP8 GEMM: the order of csrc/core/mx.h, one output at a time.
#include <ATen/Parallel.h>

#include "cpu_ops.h"

namespace mxf::cpu {

void mxfp8_scaled_mm(const Fp8MmParams& p) {
  const int64_t blocks = p.k / kMxBlock;
  at::parallel_for(0, p.n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const uint8_t* b = p.b + n * p.k;
      const uint8_t* bs = p.b_scale + (n / p.b_scale_rows) * blocks;
      const float bias = p.bias != nullptr ? load_as_f32(p.bias, n, p.bias_dtype) : 0.0f;
      for (int64_t m = 0; m < p.m; ++m) {
        const float acc = mxfp8_row_dot(p.a + m * p.k, p.a_scale + m * blocks, b, bs, blocks);
        store_from_f32(p.out, m * p.n + n, p.out_dtype, canonical_nan(add_rn(acc, bias)));
      }
    }
  });
}

}  // namespace mxf::cpu
