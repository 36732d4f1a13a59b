// MXFP8 x MXFP8 GEMM with E8M0 block scales (SPEC §5), the exact kernel (CUDA and HIP): every
// output is the block math of csrc/core/mx.h in its fixed order, so it equals the CPU op bit for
// bit, and a row of `a` gives the same bits at any M. It runs on the CUDA cores, not the tensor
// cores (docs/DECISIONS.md).
//
// A CTA owns kRowsPerCta weight rows: kGroups groups of 32 threads, each with kRowsPerGroup rows.
// It walks K in rounds of 32 blocks (lane j of a group takes block j of its rows) for a tile of
// up to kMaxMTile rows of `a` (MT, a template parameter: 1, 2, 4 or 8, the smallest that holds M,
// so small M keeps its shared memory and registers small). Per round:
//   1. the CTA decodes the tile's codes for these 32 blocks into shared memory (fp32, exact),
//      once for all its weight rows. The codes and scales of `a` and the weight bytes are loaded
//      into registers a round ahead, so a round's loads are in flight while the previous one
//      computes;
//   2. lane j decodes its rows' block j four codes at a time and runs, for every (row, a row) pair,
//      the block's 32 products left to right as fmas (each product is exact, so the fma's one
//      rounding is the add's), then scales the dot with the one rounding of mxfp8_block_term;
//      the terms go to shared memory;
//   3. lane p of the group adds pair p's 32 terms to its accumulator in block order (read four
//      at a time).
// Every output's operations are the same whatever MT, the CTA shape or the grid: the bits depend
// on the operands only. Groups meet only at __syncthreads, so the kernel does not depend on the
// warp (or wavefront) width.
#include "../core/mx.h"
#include "arch.h"
#include "mxfp8_mm.h"
#include "vec.h"

namespace mxf::kernels {
namespace {

constexpr int kGroup = 32;                    // threads per group, one K block per lane
constexpr int kRowsPerGroup = 2;              // weight rows per group (two fma chains per a row)
constexpr int kGroups = 4;                    // groups per CTA
constexpr int kThreads = kGroup * kGroups;
constexpr int kRowsPerCta = kRowsPerGroup * kGroups;
constexpr int kMaxMTile = 8;                  // rows of `a` per pass, at most
constexpr int kTilesPerCta = 4;               // passes per CTA before the grid strides (b reuse)
constexpr int kRound = kGroup;                // K blocks per round
constexpr int kAStride = kMxBlock + 4;        // floats per block of `a` in shared memory: lanes read
                                              // their block's 16-byte pieces without bank conflicts
constexpr int kTStride = kRound + 4;          // floats per term row: lane p reads row p in 16-byte
                                              // pieces without bank conflicts
constexpr int64_t kMaxGridY = 65535;

template <int kMT>
constexpr int kSmemBytes = (kMT * kRound * kAStride + kGroups * kRowsPerGroup * kMT * kTStride) * 4 + kMT * kRound;

MXF_DEV float fma_rn(float a, float b, float c) {
#if defined(MXF_HIP)
  return __builtin_fmaf(a, b, c);
#else
  return __fmaf_rn(a, b, c);
#endif
}

// Four E4M3 codes (little-endian bytes of w) -> their exact fp32 values, NaN codes to NaN. On
// sm_89+ two hardware conversions to f16 pairs (every E4M3 value is exact in f16) and four f16 ->
// fp32 conversions, about a third of the integer work of the portable decode (e4m3_decode_fast).
MXF_DEV float4 decode4(uint32_t w) {
#if defined(MXF_CUDA) && defined(MXF_DEVICE_PASS) && MXF_CUDA_ARCH >= 890
  uint32_t lo, hi;
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(w));
  float f0, f1, f2, f3;
  asm("{\n .reg .f16 a, b;\n mov.b32 {a, b}, %2;\n cvt.f32.f16 %0, a;\n cvt.f32.f16 %1, b;\n}\n"
      : "=f"(f0), "=f"(f1)
      : "r"(lo));
  asm("{\n .reg .f16 a, b;\n mov.b32 {a, b}, %2;\n cvt.f32.f16 %0, a;\n cvt.f32.f16 %1, b;\n}\n"
      : "=f"(f2), "=f"(f3)
      : "r"(hi));
  return make_float4(f0, f1, f2, f3);
#else
  return make_float4(e4m3_decode_fast(w & 0xffu), e4m3_decode_fast((w >> 8) & 0xffu),
                     e4m3_decode_fast((w >> 16) & 0xffu), e4m3_decode_fast(w >> 24));
#endif
}

template <int kMT>
__global__ void __launch_bounds__(kThreads, kMT >= 4 ? 4 : 5) fp8_mm_kernel(const Fp8MmParams p) {
  static_assert(kThreads * 2 == kRound * 8, "two words of `a` per thread, row and round");
  extern __shared__ __align__(16) uint8_t smem_raw[];
  float(*a_s)[kRound][kAStride] = reinterpret_cast<float(*)[kRound][kAStride]>(smem_raw);
  float(*t_s)[kRowsPerGroup * kMT][kTStride] = reinterpret_cast<float(*)[kRowsPerGroup * kMT][kTStride]>(
      smem_raw + kMT * kRound * kAStride * 4);
  uint8_t(*sa_s)[kRound] = reinterpret_cast<uint8_t(*)[kRound]>(
      smem_raw + (kMT * kRound * kAStride + kGroups * kRowsPerGroup * kMT * kTStride) * 4);
  const int tid = threadIdx.x, group = tid / kGroup, lane = tid % kGroup;
  const int a_blk[2] = {tid / 8, (tid + kThreads) / 8}, a_q = tid % 8;  // this thread's words of `a`
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kRowsPerCta + group * kRowsPerGroup;
  const int64_t blocks = p.k / kMxBlock, mtiles = (p.m + kMT - 1) / kMT;
  // Rows past N read row 0's bytes and are never stored.
  const uint8_t* b_row[kRowsPerGroup];
  const uint8_t* bs_row[kRowsPerGroup];
#pragma unroll
  for (int r = 0; r < kRowsPerGroup; ++r) {
    const int64_t nr = n0 + r < p.n ? n0 + r : 0;
    b_row[r] = p.b + nr * p.k;
    bs_row[r] = p.b_scale + (nr / p.b_scale_rows) * blocks;
  }
  // Lane p < kRowsPerGroup * kMT sums pair p = (weight row n0 + p / kMT, a row p % kMT).
  const int pm = lane % kMT;
  const int64_t pn = n0 + lane / kMT;
  const bool sums = lane < kRowsPerGroup * kMT && pn < p.n;
  const float bias = sums && p.bias != nullptr ? load_as_f32(p.bias, pn, p.bias_dtype) : 0.0f;
  for (int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTilesPerCta; t0 < mtiles;
       t0 += static_cast<int64_t>(gridDim.y) * kTilesPerCta) {
    const int64_t t_end = t0 + kTilesPerCta < mtiles ? t0 + kTilesPerCta : mtiles;
    for (int64_t t = t0; t < t_end; ++t) {
      const int64_t m0 = t * kMT;
      const int mt = static_cast<int>(p.m - m0 < kMT ? p.m - m0 : kMT);
      float acc = 0.0f;  // lane p: output (m0 + pm, pn), block terms added in K order
      // This round's weight bytes (block c0 + lane of each row), loaded a round ahead.
      uint4 w[kRowsPerGroup][2];
      const auto load_w = [&](int64_t c0, uint4 (&dst)[kRowsPerGroup][2]) {
#pragma unroll
        for (int r = 0; r < kRowsPerGroup; ++r) {
          if (c0 + lane < blocks) {
            const uint4* src = reinterpret_cast<const uint4*>(b_row[r] + (c0 + lane) * kMxBlock);
            dst[r][0] = src[0];
            dst[r][1] = src[1];
          } else {
            dst[r][0] = dst[r][1] = make_uint4(0, 0, 0, 0);
          }
        }
      };
      load_w(0, w);
      // This round's codes and scale bytes of `a` (the CTA's tile), also loaded a round ahead:
      // thread tid holds words tid and tid + kThreads of each row's round (block w / 8, word
      // w % 8) and, if tid < 32, the scale byte of block tid of each row.
      const auto load_a = [&](int64_t c0, uint32_t (&words)[kMT][2], uint32_t (&sc)[kMT]) {
#pragma unroll
        for (int m = 0; m < kMT; ++m) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int64_t blk = c0 + a_blk[h];
            words[m][h] = m < mt && blk < blocks
                              ? *reinterpret_cast<const uint32_t*>(p.a + (m0 + m) * p.k + blk * kMxBlock + a_q * 4)
                              : 0u;
          }
          sc[m] = m < mt && tid < kRound && c0 + tid < blocks ? p.a_scale[(m0 + m) * blocks + c0 + tid] : 0u;
        }
      };
      uint32_t a_cur[kMT][2], sa_cur[kMT];
      load_a(0, a_cur, sa_cur);
      for (int64_t c0 = 0; c0 < blocks; c0 += kRound) {
        const int nb = static_cast<int>(blocks - c0 < kRound ? blocks - c0 : kRound);
        uint4 w_next[kRowsPerGroup][2];
        load_w(c0 + kRound, w_next);
        uint32_t a_next[kMT][2], sa_next[kMT];
        load_a(c0 + kRound, a_next, sa_next);
        __syncthreads();  // the previous round's a_s, sa_s and t_s are read
#pragma unroll
        for (int m = 0; m < kMT; ++m) {
          if (m < mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              if (a_blk[h] < nb) *reinterpret_cast<float4*>(&a_s[m][a_blk[h]][a_q * 4]) = decode4(a_cur[m][h]);
            }
            if (tid < nb) sa_s[m][tid] = static_cast<uint8_t>(sa_cur[m]);
          }
        }
        __syncthreads();
        if (lane < nb) {
          float dot[kRowsPerGroup][kMT];
#pragma unroll
          for (int r = 0; r < kRowsPerGroup; ++r) {
#pragma unroll
            for (int m = 0; m < kMT; ++m) dot[r][m] = 0.0f;
          }
#pragma unroll
          for (int q = 0; q < 8; ++q) {
            float4 bv[kRowsPerGroup];
#pragma unroll
            for (int r = 0; r < kRowsPerGroup; ++r) {
              const uint4 h = w[r][q / 4];
              const uint32_t word = q % 4 == 0 ? h.x : q % 4 == 1 ? h.y : q % 4 == 2 ? h.z : h.w;
              bv[r] = decode4(word);
            }
#pragma unroll
            for (int m = 0; m < kMT; ++m) {
              if (m < mt) {
                const float4 av = *reinterpret_cast<const float4*>(&a_s[m][lane][q * 4]);
#pragma unroll
                for (int r = 0; r < kRowsPerGroup; ++r) {
                  dot[r][m] = fma_rn(av.x, bv[r].x, dot[r][m]);
                  dot[r][m] = fma_rn(av.y, bv[r].y, dot[r][m]);
                  dot[r][m] = fma_rn(av.z, bv[r].z, dot[r][m]);
                  dot[r][m] = fma_rn(av.w, bv[r].w, dot[r][m]);
                }
              }
            }
          }
#pragma unroll
          for (int r = 0; r < kRowsPerGroup; ++r) {
            const uint8_t sb = bs_row[r][c0 + lane];
#pragma unroll
            for (int m = 0; m < kMT; ++m) {
              if (m < mt) t_s[group][r * kMT + m][lane] = mxfp8_block_term(dot[r][m], sa_s[m][lane], sb);
            }
          }
        }
        __syncthreads();
        if (sums && pm < mt) {
          const float4* tr = reinterpret_cast<const float4*>(&t_s[group][lane][0]);
          if (nb == kRound) {
#pragma unroll
            for (int j4 = 0; j4 < kRound / 4; ++j4) {
              const float4 v = tr[j4];
              acc = add_rn(add_rn(add_rn(add_rn(acc, v.x), v.y), v.z), v.w);
            }
          } else {
            for (int j = 0; j < nb; ++j) acc = add_rn(acc, t_s[group][lane][j]);
          }
        }
#pragma unroll
        for (int r = 0; r < kRowsPerGroup; ++r) {
          w[r][0] = w_next[r][0];
          w[r][1] = w_next[r][1];
        }
#pragma unroll
        for (int m = 0; m < kMT; ++m) {
          a_cur[m][0] = a_next[m][0];
          a_cur[m][1] = a_next[m][1];
          sa_cur[m] = sa_next[m];
        }
      }
      if (sums && pm < mt) {
        store_from_f32(p.out, (m0 + pm) * p.n + pn, p.out_dtype, canonical_nan(add_rn(acc, bias)));
      }
    }
  }
}

template <int kMT>
error_t launch_tile(const Fp8MmParams& p, stream_t stream) {
  const int64_t mtiles = (p.m + kMT - 1) / kMT;
  const int64_t ys = (mtiles + kTilesPerCta - 1) / kTilesPerCta;
  const dim3 grid(blocks_for(p.n, kRowsPerCta), static_cast<unsigned>(ys < kMaxGridY ? ys : kMaxGridY));
  fp8_mm_kernel<kMT><<<grid, kThreads, kSmemBytes<kMT>, stream>>>(p);
  return last_error();
}

}  // namespace

error_t launch_mxfp8_scaled_mm(const Fp8MmParams& p, stream_t stream) {
  static_assert(kSmemBytes<kMaxMTile> <= 48 * 1024, "the largest tile needs no shared-memory opt-in");
  if (p.m <= 1) return launch_tile<1>(p, stream);
  if (p.m <= 2) return launch_tile<2>(p, stream);
  if (p.m <= 4) return launch_tile<4>(p, stream);
  return launch_tile<kMaxMTile>(p, stream);
}

}  // namespace mxf::kernels
