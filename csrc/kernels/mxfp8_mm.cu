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
#include <atomic>
#include <type_traits>

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

#if defined(MXF_CUDA)
// The tensor-core kernel (NVIDIA sm_89+; docs/DECISIONS.md): a CTA owns 16 weight rows (the A
// operand of mma.m16n8k32.e4m3, rows = output features) and 8 * kNB rows of `a` (B, columns =
// tokens). Its warps split K into contiguous ranges of whole groups of 4 blocks (the split
// depends on N, K and the SM count only). Per K block one mma per n8 block, from zero, gives the
// block's dot of codes (the tensor core's sum); then, as in the exact order, the dot times
// 2^(sa + sb - 254) is rounded once (mxfp8_block_term; one fma or one multiply when that is
// exact) and added to the warp's fp32 accumulator in K order. The CTA adds its warps' partials in
// warp order, then the bias, and rounds once. Every output runs the same operations whatever M
// (mma columns are independent), so a row of `a` gives the same bits at any batch size. On sm_90
// the kS CTAs of a cluster may share the tile: they run the virtual warps of one CTA, and the
// leader adds all their partials in the same order (tc_split).
//
// Each warp streams its weight rows through a private cp.async ring of kTcStages groups (16 rows x
// 4 blocks, 128 bytes per row, rows padded to 160 bytes so the fragment reads are free of bank
// conflicts); `a` (small, L2-resident) is read straight from global memory a group ahead. Lane
// (g, t) takes bytes 8t..8t+7 of a block of weight rows g and g + 8 and of `a` row g: the mma's k
// order is permuted so that these are its k positions 4t..4t+3 and 16+4t..16+4t+3 (the same
// permutation for both operands, so the products are the block's).
constexpr int kTcGroup = 4;                         // K blocks per ring stage
constexpr int kTcMaxWarps = 16;
constexpr int kTcRowBytes = kTcGroup * kMxBlock;    // 128
constexpr int kTcRowStride = kTcRowBytes + 32;      // 160: rows g = 0..3 hit distinct banks
constexpr int kTcStageBytes = 16 * kTcRowStride;    // 2560
constexpr int kTcStages = 4;                        // three groups in flight per warp
constexpr int kTcWarpBytes = kTcStages * kTcStageBytes;
static_assert(kTcMaxWarps * kTcWarpBytes == kFp8MmTcMaxSmemBytes, "the host's shared-memory check");

MXF_DEV uint2 ld8(const uint8_t* p) { return *reinterpret_cast<const uint2*>(p); }

// Scale bytes of the next four blocks of a row at `row` (little-endian word; `left` blocks remain
// in the row): one 4-byte load when aligned and all four are in the row.
MXF_DEV uint32_t scale_word(const uint8_t* row, bool words, int64_t left) {
  if (words) return *reinterpret_cast<const uint32_t*>(row);
  uint32_t v = 0;
  for (int u = 0; u < 4; ++u) {
    if (u < left) v |= static_cast<uint32_t>(row[u]) << (8 * u);
  }
  return v;
}

// Every byte of w in [73, 179], the four bytes at once: in v = w - 0x49494949, a byte of w below
// 73 leaves its byte of v at 0xB7 or above (it borrows), and a byte of w at 180 or above leaves 107
// or more, so v or v + 0x15151515 (21 = 127 - 106) has that byte's top bit set; bytes in range
// leave 0..106, where neither has it (and neither borrows nor carries). Then for every pair
// e = sa + sb - 254 lies in [-108, 104]. A block dot is 0 or at least 2^-18 in magnitude (a sum
// of multiples of 2^-18, the smallest E4M3 product) and below 2^23 (32 * 448^2), so dot * 2^e is
// an exact normal fp32: the one-multiply term rounds nothing, and fma(dot, 2^e, acc) equals
// acc + (dot * 2^e), the exact order's add, bit for bit.
MXF_DEV bool bytes_in_73_179(uint32_t w) {
  const uint32_t v = w - 0x49494949u;
  return (((v + 0x15151515u) | v) & 0x80808080u) == 0u;
}

#if defined(MXF_HAS_MMA_PIPE) && MXF_CUDA_ARCH == 900
// Four E4M3 codes (little-endian bytes of w) as two f16 pairs: bytes 0-1 in lo, 2-3 in hi (exact).
MXF_DEV void e4m3x4_to_f16x2(uint32_t w, uint32_t& lo, uint32_t& hi) {
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(w));
}

// The block's dot of codes: A = {w_lo.x, w_hi.x, w_lo.y, w_hi.y} (rows g, g + 8), B = {b.x, b.y}.
// sm_90 has no FP8 mma.sync; ptxas expands mma.m16n8k32.e4m3 into the f16 conversions of both
// operands' low and high code pairs and two m16n8k16 f16 mmas (low pairs from zero, then high),
// followed by an add of +0 per output. That expansion is written out here (same conversions, same
// two mmas in the same order, so the same dots) without the +0 adds, which only turn a -0 dot into
// +0: every term then adds to an accumulator that starts at +0 and so is never -0, where both
// zeros give the same sum. The caller converts the weight fragment once for all n8 blocks.
MXF_DEV void block_dot_f16(const uint32_t (&al)[4], const uint32_t (&ah)[4], uint2 b, float (&d)[4]) {
  uint32_t bl0, bh0, bl1, bh1;
  e4m3x4_to_f16x2(b.x, bl0, bh0);
  e4m3x4_to_f16x2(b.y, bl1, bh1);
  const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  mma_16816<false>(d, al, bl0, bl1, zero);
  mma_16816<false>(d, ah, bh0, bh1, d);
}
#endif

// 2^(sa + sb - 254) is a normal fp32 (sa + sb - 127 in [1, 254]) for the four pairs, and no scale
// is NaN: mxfp8_block_term's one-multiply case.
MXF_DEV bool pairs_fast(uint32_t sa0, uint32_t sa1, uint32_t sb0, uint32_t sb1) {
  const uint32_t amin = sa0 < sa1 ? sa0 : sa1, bmin = sb0 < sb1 ? sb0 : sb1;
  const uint32_t amax = sa0 > sa1 ? sa0 : sa1, bmax = sb0 > sb1 ? sb0 : sb1;
  return amin + bmin >= 128u && amax + bmax <= 381u && amax < 255u && bmax < 255u;
}

template <int kNB, int kS>
__global__ void __launch_bounds__(kTcMaxWarps * 32) fp8_mm_tc_kernel(const Fp8MmParams p) {
#if defined(MXF_HAS_FP8_MMA)
  extern __shared__ __align__(16) uint8_t smem_raw[];
  const int warps = static_cast<int>(blockDim.x / 32);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  // With kS > 1 the kS CTAs of a cluster (consecutive x indices) share the output tile: CTA rank
  // r runs virtual warps r * warps .. r * warps + warps - 1 of the same K split.
  [[maybe_unused]] const int rank = static_cast<int>(blockIdx.x % kS);
#if defined(MXF_HAS_CLUSTER)
  if constexpr (kS > 1) cluster_arrive_relaxed();  // "started", waited for before the partials are pushed
#else
  if constexpr (kS > 1) __trap();  // never launched: the host asks for clusters on sm_90+ only
#endif
  const int vwarps = warps * kS, vwarp = rank * warps + warp;
  const int64_t blocks = p.k / kMxBlock;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * 16, m0 = static_cast<int64_t>(blockIdx.x / kS) * (8 * kNB);
  // The warp's blocks [jb, je): whole groups of four except at the end of K.
  const int64_t groups = (blocks + kTcGroup - 1) / kTcGroup;
  const int64_t gb = groups * vwarp / vwarps, ge = groups * (vwarp + 1) / vwarps;
  const int64_t jb = gb * kTcGroup, je = ge * kTcGroup < blocks ? ge * kTcGroup : blocks;
  const int count = static_cast<int>(ge - gb);
  uint8_t* const ring = smem_raw + warp * kTcWarpBytes;
  const uint32_t ring_addr = smem_addr(ring);
  // Copies: chunk c = lane + 32 q (q = 0..3) of a stage is row c / 8, bytes 16 (c % 8) of it.
  // Rows past N read the last row; blocks past K are not copied (their stage bytes are unused).
  const uint8_t* src[4];
  uint32_t dst[4];
  int chunk_blk[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int c = lane + 32 * q, row = c / 8, col = c % 8;
    const int64_t n = n0 + row < p.n ? n0 + row : p.n - 1;
    src[q] = p.b + n * p.k + col * 16;
    dst[q] = ring_addr + row * kTcRowStride + col * 16;
    chunk_blk[q] = col / 2;
  }
  // Issues go in stream order (f = 0, 1, ...): running source offset and block index.
  int64_t issue_off = jb * kMxBlock, issue_j0 = jb;
  const auto issue = [&](int f) {  // group gb + f into stage f % kTcStages
    if (f < count) {
      const uint32_t off = static_cast<uint32_t>((f % kTcStages) * kTcStageBytes);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        if (issue_j0 + chunk_blk[q] < je) cp_async16_to(dst[q] + off, src[q] + issue_off);
      }
      issue_off += kTcRowBytes;
      issue_j0 += kTcGroup;
    }
    cp_async_commit();
  };
#pragma unroll
  for (int f = 0; f < kTcStages - 1; ++f) issue(f);

  // Rows past N or M read the last real row; their outputs are never stored. Pointers run along
  // the warp's K range, one group per step.
  const int64_t nlo = n0 + g < p.n ? n0 + g : p.n - 1, nhi = n0 + g + 8 < p.n ? n0 + g + 8 : p.n - 1;
  const uint8_t* s_lo = p.b_scale + (nlo / p.b_scale_rows) * blocks + jb;
  const uint8_t* s_hi = p.b_scale + (nhi / p.b_scale_rows) * blocks + jb;
  const uint8_t* a_ptr[kNB];
  const uint8_t* sa_ptr[kNB][2];
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb) {
    const int64_t ma = m0 + nb * 8 + g < p.m ? m0 + nb * 8 + g : p.m - 1;
    a_ptr[nb] = p.a + ma * p.k + 8 * t + jb * kMxBlock;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int64_t mc = m0 + nb * 8 + 2 * t + c < p.m ? m0 + nb * 8 + 2 * t + c : p.m - 1;
      sa_ptr[nb][c] = p.a_scale + mc * blocks + jb;
    }
  }
  struct Group {
    uint2 a[kTcGroup][kNB];
    uint32_t sb[2], sa[kNB][2];
  };
  // The group at the pointers (blocks j0 .. j0 + 3 of the K range ending at je), then the
  // pointers step to the next group.
  const auto load = [&](int64_t j0, Group& G) {
    if (j0 >= je) return;
    const int64_t left = je - j0;  // blocks of this group in range (>= 1)
#pragma unroll
    for (int u = 0; u < kTcGroup; ++u) {
      if (u < left) {
#pragma unroll
        for (int nb = 0; nb < kNB; ++nb) G.a[u][nb] = ld8(a_ptr[nb] + u * kMxBlock);
      }
    }
    const bool words = p.scale_words && j0 + kTcGroup <= blocks;
    G.sb[0] = scale_word(s_lo, words, blocks - j0);
    G.sb[1] = scale_word(s_hi, words, blocks - j0);
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) {
      G.sa[nb][0] = scale_word(sa_ptr[nb][0], words, blocks - j0);
      G.sa[nb][1] = scale_word(sa_ptr[nb][1], words, blocks - j0);
      a_ptr[nb] += kTcRowBytes;
      sa_ptr[nb][0] += kTcGroup;
      sa_ptr[nb][1] += kTcGroup;
    }
    s_lo += kTcGroup;
    s_hi += kTcGroup;
  };
  float acc[kNB][4];
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nb][i] = 0.0f;
  Group cur;
  load(jb, cur);
  const uint8_t* const frag_lo = ring + g * kTcRowStride + 8 * t;
  const uint8_t* const frag_hi = frag_lo + 8 * kTcRowStride;
  for (int f = 0; f < count; ++f) {
    const int64_t j0 = (gb + f) * kTcGroup;
    Group nxt;
    load(j0 + kTcGroup, nxt);
    cp_async_wait<kTcStages - 2>();
    __syncwarp();
    issue(f + kTcStages - 1);
    // Every scale byte of the group in [73, 179] in every lane, and four blocks in the warp's
    // range: each term is one fma (bytes_in_73_179), and the group runs without a branch, so the
    // four blocks' conversions and mmas can overlap. Else per block and pair: one multiply and an
    // add where 2^(sa + sb - 254) is a normal fp32 and no scale is NaN (pairs_fast), else
    // mxfp8_block_term's general path. The same bits each way. (The test is warp-uniform: the
    // mmas must run in every lane.)
    bool group_fma = bytes_in_73_179(cur.sb[0]) && bytes_in_73_179(cur.sb[1]);
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) {
      group_fma = group_fma && bytes_in_73_179(cur.sa[nb][0]) && bytes_in_73_179(cur.sa[nb][1]);
    }
    const bool fast = __all_sync(0xffffffffu, group_fma) && j0 + kTcGroup <= je;
    const int st = (f % kTcStages) * kTcStageBytes;
    // Block u of the group: its dot per n8 block, and its terms added (by one fma each when
    // fma_terms is std::true_type).
    const auto block = [&](int u, auto fma_terms) {
      const uint2 wlo = ld8(frag_lo + st + u * kMxBlock), whi = ld8(frag_hi + st + u * kMxBlock);
#if MXF_CUDA_ARCH == 900
      uint32_t al[4], ah[4];  // the weight fragment's low and high code pairs as f16, for every n8 block
      e4m3x4_to_f16x2(wlo.x, al[0], ah[0]);
      e4m3x4_to_f16x2(whi.x, al[1], ah[1]);
      e4m3x4_to_f16x2(wlo.y, al[2], ah[2]);
      e4m3x4_to_f16x2(whi.y, al[3], ah[3]);
#else
      const uint32_t A[4] = {wlo.x, whi.x, wlo.y, whi.y};
#endif
      // Byte u of a scale word, alone in the low byte (byte 4 of the permute is b's byte 0 = 0).
      const uint32_t sel = 0x4440u + static_cast<uint32_t>(u);
      const uint32_t sb_lo = prmt(cur.sb[0], 0u, sel), sb_hi = prmt(cur.sb[1], 0u, sel);
      // (sb - 127) << 23: the fp32 bits of 2^(sa + sb - 254) are sa << 23 plus this.
      const uint32_t sbx_lo = (sb_lo << 23) - (127u << 23), sbx_hi = (sb_hi << 23) - (127u << 23);
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb) {
        float d[4];
#if MXF_CUDA_ARCH == 900
        block_dot_f16(al, ah, cur.a[u][nb], d);
#else
        asm volatile(
            "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%10,%10,%10,%10};\n"
            : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
            : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(cur.a[u][nb].x), "r"(cur.a[u][nb].y),
              "f"(0.0f));
#endif
        const uint32_t sa0 = prmt(cur.sa[nb][0], 0u, sel), sa1 = prmt(cur.sa[nb][1], 0u, sel);
        if constexpr (decltype(fma_terms)::value) {
          acc[nb][0] = fma_rn(d[0], u2f((sa0 << 23) + sbx_lo), acc[nb][0]);
          acc[nb][1] = fma_rn(d[1], u2f((sa1 << 23) + sbx_lo), acc[nb][1]);
          acc[nb][2] = fma_rn(d[2], u2f((sa0 << 23) + sbx_hi), acc[nb][2]);
          acc[nb][3] = fma_rn(d[3], u2f((sa1 << 23) + sbx_hi), acc[nb][3]);
        } else if (pairs_fast(sa0, sa1, sb_lo, sb_hi)) {
          acc[nb][0] = add_rn(acc[nb][0], mul_rn(d[0], u2f((sa0 << 23) + sbx_lo)));
          acc[nb][1] = add_rn(acc[nb][1], mul_rn(d[1], u2f((sa1 << 23) + sbx_lo)));
          acc[nb][2] = add_rn(acc[nb][2], mul_rn(d[2], u2f((sa0 << 23) + sbx_hi)));
          acc[nb][3] = add_rn(acc[nb][3], mul_rn(d[3], u2f((sa1 << 23) + sbx_hi)));
        } else {
          acc[nb][0] = add_rn(acc[nb][0], mxfp8_block_term(d[0], sa0, sb_lo));
          acc[nb][1] = add_rn(acc[nb][1], mxfp8_block_term(d[1], sa1, sb_lo));
          acc[nb][2] = add_rn(acc[nb][2], mxfp8_block_term(d[2], sa0, sb_hi));
          acc[nb][3] = add_rn(acc[nb][3], mxfp8_block_term(d[3], sa1, sb_hi));
        }
      }
    };
    if (fast) {
#pragma unroll
      for (int u = 0; u < kTcGroup; ++u) block(u, std::true_type());
    } else {
#pragma unroll
      for (int u = 0; u < kTcGroup; ++u) {
        if (j0 + u >= je) break;
        block(u, std::false_type());
      }
    }
    cur = nxt;
  }
  cp_async_wait<0>();
  __syncthreads();  // the partials reuse the rings
  // Partials [virtual warp][kNB * 4][32]: the CTA's own warps in its rings' memory; with kS > 1
  // the other CTAs' warps pushed into the leader's region after the rings (distributed shared
  // memory, one cluster barrier), so the leader adds all of them in virtual-warp order, as one
  // CTA of vwarps warps would.
  float* const part = reinterpret_cast<float*>(smem_raw);
  [[maybe_unused]] float* const pushed = reinterpret_cast<float*>(smem_raw + warps * kTcWarpBytes);
  const auto slot = [&](int w, int nb, int i) { return (w * kNB * 4 + nb * 4 + i) * 32 + lane; };
  if (rank == 0) {
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
      for (int i = 0; i < 4; ++i) part[slot(warp, nb, i)] = acc[nb][i];
  }
#if defined(MXF_HAS_CLUSTER)
  if constexpr (kS > 1) {
    cluster_wait();  // every CTA of the cluster has started (arrived at the kernel's start)
    if (rank != 0) {
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
        for (int i = 0; i < 4; ++i) st_cluster_f32(pushed + slot(vwarp - warps, nb, i), 0, acc[nb][i]);
    }
    cluster_sync();
    if (rank != 0) return;
  }
#endif
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float v = part[slot(0, nb, i)];
      for (int w = 1; w < vwarps; ++w) v = add_rn(v, w < warps ? part[slot(w, nb, i)] : pushed[slot(w - warps, nb, i)]);
      const int64_t n = n0 + g + (i >= 2 ? 8 : 0), m = m0 + nb * 8 + 2 * t + (i & 1);
      if (n < p.n && m < p.m) {
        const float bias = p.bias != nullptr ? load_as_f32(p.bias, n, p.bias_dtype) : 0.0f;
        store_from_f32(p.out, m * p.n + n, p.out_dtype, canonical_nan(add_rn(v, bias)));
      }
    }
  }
#else
  __trap();  // the host launches it only on sm_89+ devices
#endif
}

// Shared memory of a CTA of `warps` warps in clusters of kS: its rings, and in the leader the
// partials pushed by the other CTAs.
template <int kNB, int kS>
constexpr int tc_smem_bytes(int warps) {
  return warps * kTcWarpBytes + (kS - 1) * warps * kNB * 4 * 32 * static_cast<int>(sizeof(float));
}

// CTAs of the two-n8-block kernel per SM at `warps` warps on the current device (the occupancy
// API, once per device and value: per_device_memo).
int tc_ctas_per_sm(int warps) {
  static std::atomic<int> memo[kMemoDevices][kTcMaxWarps + 1] = {};
  return per_device_memo(memo, warps, [warps] {
    int v = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, fp8_mm_tc_kernel<2, 1>, warps * 32,
                                                      tc_smem_bytes<2, 1>(warps)) != cudaSuccess || v < 1) {
      (void)cudaGetLastError();
      v = 1;
    }
    return v;
  });
}

// Warps per CTA (the K split, and so the summation order): the most, up to 16, with which every
// CTA is resident at once (one wave: a second, partial wave costs a whole load latency) and each
// warp has at least two groups of K blocks; 4 when no count gives one wave. A function of N, K and
// the device only (the occupancy of the two-n8-block kernel serves both, so M never changes it).
int tc_warps(const Fp8MmParams& p) {
  if (p.tc_warps_override > 0) return p.tc_warps_override;
  const int64_t row_tiles = (p.n + 15) / 16, groups = (p.k / kMxBlock + kTcGroup - 1) / kTcGroup;
  for (int warps = kTcMaxWarps; warps >= 1; warps /= 2) {
    if (groups < 2 * static_cast<int64_t>(warps) && warps > 1) continue;
    if (row_tiles <= static_cast<int64_t>(tc_ctas_per_sm(warps)) * p.num_sms) return warps;
  }
  return groups >= 8 ? 4 : 1;
}

// CTAs per cluster sharing an output tile (they run the same virtual warps, so the bits never
// depend on it, and it may depend on M). With C CTAs of one tile each on S SMs, the busiest SM
// runs ceil(C / S) tiles; halved CTAs run ceil(2C / S) half tiles. For S < C <= 1.5 S that is 1.5
// tiles instead of 2: 2560 x 6144 at M <= 16 (160 tiles on 132 SMs) went 10.2 -> 9.2 us at M = 1
// and 15.3 -> 13.4 us at M = 16 on the H200 (docs/PERF_NOTES.md); clusters of 4 were no faster,
// and at 12288 x 6144 (one-warp CTAs) halving was 40-50% slower. The CTA's warps already fit in
// one wave at C, so the halved ones (2C <= 3S, each half the registers and rings) do too. Tests
// and benchmarks may pin it (MXFUSE_FP8_TC_SPLIT), as far as the warps allow. sm_90+ only.
int tc_split(const Fp8MmParams& p, int vwarps, int64_t mtiles) {
  if (!p.clusters) return 1;
  const int64_t ctas = mtiles * ((p.n + 15) / 16), sms = p.num_sms;
  int split = p.tc_split_override > 0 ? p.tc_split_override
                                      : (vwarps >= 4 && ctas > sms && 2 * ctas <= 3 * sms ? 2 : 1);
  while (split > vwarps) split /= 2;
  // The grid's x size (m tiles times the split) stays within its limit.
  while (split > 1 && mtiles * split > 0x7fffffff) split /= 2;
  return split;
}

template <int kNB, int kS>
error_t launch_tc_split(const Fp8MmParams& p, int vwarps, int64_t mtiles, stream_t stream) {
  const auto kernel = fp8_mm_tc_kernel<kNB, kS>;
  // Every launch (the attribute is per device; the MXFP6 linear does the same).
  error_t e = set_max_dynamic_smem(kernel, kTcMaxWarps * kTcWarpBytes);
  if (e != kSuccess) return e;
  const int warps = vwarps / kS;
  const dim3 grid(static_cast<unsigned>(mtiles * kS), static_cast<unsigned>((p.n + 15) / 16));
  if constexpr (kS > 1) {
    return launch_ex(kernel, grid, dim3(warps * 32), tc_smem_bytes<kNB, kS>(warps), stream, kS, false, p);
  }
  kernel<<<grid, warps * 32, tc_smem_bytes<kNB, kS>(warps), stream>>>(p);
  return last_error();
}

template <int kNB>
error_t launch_tc(const Fp8MmParams& p, stream_t stream) {
  // The occupancy query in tc_warps measures the two-n8-block kernel at this size.
  const error_t e = set_max_dynamic_smem(fp8_mm_tc_kernel<2, 1>, kTcMaxWarps * kTcWarpBytes);
  if (e != kSuccess) return e;
  const int vwarps = tc_warps(p);
  const int64_t mtiles = (p.m + 8 * kNB - 1) / (8 * kNB);
  switch (tc_split(p, vwarps, mtiles)) {
    case 4: return launch_tc_split<kNB, 4>(p, vwarps, mtiles, stream);
    case 2: return launch_tc_split<kNB, 2>(p, vwarps, mtiles, stream);
    default: return launch_tc_split<kNB, 1>(p, vwarps, mtiles, stream);
  }
}
#endif  // MXF_CUDA

}  // namespace

error_t launch_mxfp8_scaled_mm(const Fp8MmParams& p, stream_t stream) {
  static_assert(kSmemBytes<kMaxMTile> <= 48 * 1024, "the largest tile needs no shared-memory opt-in");
#if defined(MXF_CUDA)
  if (p.tensor_cores) return p.m <= 8 ? launch_tc<1>(p, stream) : launch_tc<2>(p, stream);
#endif
  if (p.m <= 1) return launch_tile<1>(p, stream);
  if (p.m <= 2) return launch_tile<2>(p, stream);
  if (p.m <= 4) return launch_tile<4>(p, stream);
  return launch_tile<kMaxMTile>(p, stream);
}

}  // namespace mxf::kernels
