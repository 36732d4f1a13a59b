// MXFP8 x MXFP8 GEMM with E8M0 block scales (SPEC §5), the portable exact kernel (CUDA and HIP):
// every output is the block math of csrc/core/mx.h in its fixed order, so it equals the CPU op bit
// for bit, and a row of `a` gives the same bits at any M. It runs on the CUDA cores, not the
// tensor cores (docs/DECISIONS.md).
//
// A CTA owns 8 weight rows, one per group of 32 threads, and walks K in rounds of 32 blocks (one
// per lane). Per round, for an 8-row tile of `a`:
//   1. the CTA decodes the tile's codes for these 32 blocks into shared memory (fp32), once for
//      all 8 weight rows;
//   2. lane j of a group loads its weight row's block j (32 bytes, the group reads 1 KB
//      contiguous), decodes it, and for each row m forms the block term: the 32 products added
//      left to right (an fma adds the exact product with the one rounding of the add), scaled by
//      2^(sa + sb - 254) with one rounding; the terms go to shared memory;
//   3. lane m of the group adds row m's 32 terms to its accumulator in block order.
// Groups stay in step through __syncthreads only, so the kernel is independent of the warp (or
// wavefront) width.
#include "../core/mx.h"
#include "mxfp8_mm.h"
#include "vec.h"

namespace mxf::kernels {
namespace {

constexpr int kGroup = 32;                    // threads per weight row, one K block per lane
constexpr int kRowsPerCta = 8;                // weight rows (groups) per CTA
constexpr int kThreads = kGroup * kRowsPerCta;
constexpr int kMTile = 8;                     // rows of `a` per pass
constexpr int kTilesPerCta = 4;               // passes per CTA before the grid strides (b reuse)
constexpr int kRound = kGroup;                // K blocks per round
constexpr int kAStride = kMxBlock + 4;        // floats per block of `a` in shared memory: lanes read
                                              // their block's 16-byte pieces without bank conflicts
constexpr int kTStride = kRound + 1;          // floats per term row: lane m reads row m, conflict-free
constexpr int64_t kMaxGridY = 65535;

MXF_DEV float fma_rn(float a, float b, float c) {
#if defined(MXF_HIP)
  return __builtin_fmaf(a, b, c);
#else
  return __fmaf_rn(a, b, c);
#endif
}

MXF_DEV float4 decode4(uint32_t w) {
  return make_float4(e4m3_decode_fast(w & 0xffu), e4m3_decode_fast((w >> 8) & 0xffu),
                     e4m3_decode_fast((w >> 16) & 0xffu), e4m3_decode_fast(w >> 24));
}

__global__ void __launch_bounds__(kThreads) fp8_mm_kernel(const Fp8MmParams p) {
  __shared__ __align__(16) float a_s[kMTile][kRound][kAStride];
  __shared__ float t_s[kRowsPerCta][kMTile][kTStride];
  __shared__ uint8_t sa_s[kMTile][kRound];
  const int tid = threadIdx.x, group = tid / kGroup, lane = tid % kGroup;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kRowsPerCta + group;
  const bool has_row = n < p.n;
  const int64_t blocks = p.k / kMxBlock, mtiles = (p.m + kMTile - 1) / kMTile;
  const uint8_t* b_row = p.b + (has_row ? n : 0) * p.k;
  const uint8_t* bs_row = p.b_scale + ((has_row ? n : 0) / p.b_scale_rows) * blocks;
  const float bias = has_row && p.bias != nullptr ? load_as_f32(p.bias, n, p.bias_dtype) : 0.0f;
  for (int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTilesPerCta; t0 < mtiles;
       t0 += static_cast<int64_t>(gridDim.y) * kTilesPerCta) {
    const int64_t t_end = t0 + kTilesPerCta < mtiles ? t0 + kTilesPerCta : mtiles;
    for (int64_t t = t0; t < t_end; ++t) {
      const int64_t m0 = t * kMTile;
      const int mt = static_cast<int>(p.m - m0 < kMTile ? p.m - m0 : kMTile);
      float acc = 0.0f;  // lane m < mt: output (m0 + m, n), block terms added in K order
      for (int64_t c0 = 0; c0 < blocks; c0 += kRound) {
        const int nb = static_cast<int>(blocks - c0 < kRound ? blocks - c0 : kRound);
        __syncthreads();  // the previous round's a_s, sa_s and t_s are read
        for (int i = tid; i < mt * nb * 8; i += kThreads) {  // 8 words of 4 codes per block
          const int m = i / (nb * 8), j = (i / 8) % nb, q = i % 8;
          const uint32_t w =
              *reinterpret_cast<const uint32_t*>(p.a + (m0 + m) * p.k + (c0 + j) * kMxBlock + q * 4);
          *reinterpret_cast<float4*>(&a_s[m][j][q * 4]) = decode4(w);
        }
        for (int i = tid; i < mt * nb; i += kThreads) {
          sa_s[i / nb][i % nb] = p.a_scale[(m0 + i / nb) * blocks + c0 + i % nb];
        }
        __syncthreads();
        if (has_row && lane < nb) {
          const uint4* src = reinterpret_cast<const uint4*>(b_row + (c0 + lane) * kMxBlock);
          const uint4 w0 = src[0], w1 = src[1];
          const uint32_t words[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
          float bv[kMxBlock];
#pragma unroll
          for (int q = 0; q < 8; ++q) {
            const float4 f = decode4(words[q]);
            bv[4 * q] = f.x;
            bv[4 * q + 1] = f.y;
            bv[4 * q + 2] = f.z;
            bv[4 * q + 3] = f.w;
          }
          const uint8_t sb = bs_row[c0 + lane];
          for (int m = 0; m < mt; ++m) {
            const float4* ar = reinterpret_cast<const float4*>(&a_s[m][lane][0]);
            float dot = 0.0f;
#pragma unroll
            for (int q = 0; q < 8; ++q) {
              const float4 av = ar[q];
              dot = fma_rn(av.x, bv[4 * q], dot);
              dot = fma_rn(av.y, bv[4 * q + 1], dot);
              dot = fma_rn(av.z, bv[4 * q + 2], dot);
              dot = fma_rn(av.w, bv[4 * q + 3], dot);
            }
            t_s[group][m][lane] = mxfp8_block_term(dot, sa_s[m][lane], sb);
          }
        }
        __syncthreads();
        if (has_row && lane < mt) {
          for (int j = 0; j < nb; ++j) acc = add_rn(acc, t_s[group][lane][j]);
        }
      }
      if (has_row && lane < mt) {
        store_from_f32(p.out, (m0 + lane) * p.n + n, p.out_dtype, canonical_nan(add_rn(acc, bias)));
      }
    }
  }
}

}  // namespace

error_t launch_mxfp8_scaled_mm(const Fp8MmParams& p, stream_t stream) {
  const int64_t mtiles = (p.m + kMTile - 1) / kMTile;
  const int64_t ys = (mtiles + kTilesPerCta - 1) / kTilesPerCta;
  const dim3 grid(blocks_for(p.n, kRowsPerCta), static_cast<unsigned>(ys < kMaxGridY ? ys : kMaxGridY));
  fp8_mm_kernel<<<grid, kThreads, 0, stream>>>(p);
  return last_error();
}

}  // namespace mxf::kernels
