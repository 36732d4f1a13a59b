// MXFP8 x MXFP8 GEMM with E8M0 block scales (SPEC §5), the portable kernel: one output per thread,
// running the block math of csrc/core/mx.h in its fixed order, so every output equals the CPU op's
// bit for bit. It is the correct baseline that a tensor-core kernel will be checked against, not a
// fast GEMM: each thread reads its two rows straight from global memory (docs/DECISIONS.md).
#include "../core/mx.h"
#include "mxfp8_mm.h"
#include "vec.h"

namespace mxf::kernels {
namespace {

constexpr int kTileN = 32, kTileM = 8;  // a CTA: 32 weight rows (lanes) x 8 activation rows (warps)
constexpr int64_t kMaxGridY = 65535;

__global__ void __launch_bounds__(kTileN * kTileM) fp8_mm_kernel(const Fp8MmParams p) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kTileN + threadIdx.x;
  if (n >= p.n) return;
  const int64_t blocks = p.k / kMxBlock;
  const uint8_t* b = p.b + n * p.k;
  const uint8_t* bs = p.b_scale + (n / p.b_scale_rows) * blocks;
  const float bias = p.bias != nullptr ? load_as_f32(p.bias, n, p.bias_dtype) : 0.0f;
  for (int64_t m = static_cast<int64_t>(blockIdx.y) * kTileM + threadIdx.y; m < p.m;
       m += static_cast<int64_t>(gridDim.y) * kTileM) {
    const float acc = mxfp8_row_dot(p.a + m * p.k, p.a_scale + m * blocks, b, bs, blocks);
    store_from_f32(p.out, m * p.n + n, p.out_dtype, canonical_nan(add_rn(acc, bias)));
  }
}

}  // namespace

error_t launch_mxfp8_scaled_mm(const Fp8MmParams& p, stream_t stream) {
  const int64_t mblocks = (p.m + kTileM - 1) / kTileM;
  const dim3 grid(blocks_for(p.n, kTileN), static_cast<unsigned>(mblocks < kMaxGridY ? mblocks : kMaxGridY));
  fp8_mm_kernel<<<grid, dim3(kTileN, kTileM), 0, stream>>>(p);
  return last_error();
}

}  // namespace mxf::kernels
