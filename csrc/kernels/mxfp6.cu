// MXFP6 E2M3 weights: pack / unpack / round (one thread per 32-element group) and the W6A16
// decode linear.
//
// Linear, fast path (NVIDIA sm_80+): a CTA of 4 warps owns kRT row tiles (16 weight rows each)
// and 16 rows of x; the warps split K by tiles (warp w takes k-tiles w, w+4, ...), stream their
// packed tiles through a private cp.async ring of kStages slots, and meet once at the end to add
// their partials in a fixed order. The weights are the A operand of mma.m16n8k16 (rows = output
// features), x is B (columns = tokens), so decode (M <= 8) uses one n8 block and M <= 16 two.
// The k order inside an mma is permuted so each lane decodes the six contiguous bytes (8 codes)
// it owns within a group with byte permutes: lane t of a quad holds codes 8t..8t+7 of a group
// and pairs them (c0,c4) (c1,c5) (c2,c6) (c3,c7); x is loaded as 8 contiguous values and
// permuted the same way. Codes decode exactly: the 5 magnitude bits are placed where a bf16
// (f16) with a small exponent holds them and multiplied by 2^126 (2^14) with the code's sign.
// Each group's two mma steps start from zero and are scaled by 2^(sb-127) into fp32
// accumulators. Every row of x runs the same instruction sequence whatever M is, so results
// are batch invariant.
#include <type_traits>

#include "../core/mxfp6_layout.h"
#include "../core/mx.h"
#include "arch.h"
#include "mxfp6.h"
#include "vec.h"

namespace mxf::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kTileScaleBytes = kFp6TileRows * kFp6GroupsPerTileRow;   // 64
constexpr int kTileStageBytes = kFp6TileBytes + kTileScaleBytes;       // 1600

unsigned blocks_for(int64_t items) { return static_cast<unsigned>((items + kThreads - 1) / kThreads); }

// ---- pack / round / unpack ----------------------------------------------------------------

__global__ void __launch_bounds__(kThreads) fp6_pack_kernel(const Fp6PackParams p, bool vec) {
  const int64_t groups = p.k / kMxBlock;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (gid >= p.n * groups) return;
  const int64_t row = gid / groups, grp = gid % groups;
  const int64_t esz = 2;
  const char* src = static_cast<const char*>(p.w) + (row * p.w_stride + grp * kMxBlock) * esz;
  float v[kMxBlock];
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const Chunk8 x = load_chunk(src, c, kMxBlock, p.dtype, vec);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[c * 8 + i] = x.v[i];
  }
  uint8_t codes[kMxBlock];
  const uint8_t sb = e2m3_quantize_block(v, codes, p.rule);
  if (p.scales != nullptr) p.scales[gid] = sb;
  if (p.packed != nullptr) {
    uint8_t bytes[kFp6GroupBytes];
    fp6_pack_group(codes, bytes);
    uint8_t* dst = p.packed + fp6_group_offset(row, grp, p.k);
#pragma unroll
    for (int i = 0; i < kFp6GroupBytes; ++i) dst[i] = bytes[i];
  }
  if (p.rounded != nullptr) {
    char* out = static_cast<char*>(p.rounded) + (row * p.w_stride + grp * kMxBlock) * esz;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      Chunk8 y;
#pragma unroll
      for (int i = 0; i < 8; ++i) y.v[i] = e2m3_dequantize(codes[c * 8 + i], sb);
      store_chunk(out, c, kMxBlock, p.dtype, vec, y);
    }
  }
}

__global__ void __launch_bounds__(kThreads) fp6_unpack_kernel(const Fp6UnpackParams p) {
  const int64_t groups = p.k / kMxBlock;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (gid >= p.n * groups) return;
  const int64_t row = gid / groups, grp = gid % groups;
  uint8_t codes[kMxBlock];
  fp6_unpack_group(p.packed + fp6_group_offset(row, grp, p.k), codes);
  const uint8_t sb = p.scales[gid];
  const int64_t esz = p.out_dtype == Dtype::kFP32 ? 4 : 2;
  char* out = static_cast<char*>(p.out) + (row * p.k + grp * kMxBlock) * esz;
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    Chunk8 y;
#pragma unroll
    for (int i = 0; i < 8; ++i) y.v[i] = e2m3_dequantize(codes[c * 8 + i], sb);
    store_chunk(out, c, kMxBlock, p.out_dtype, true, y);
  }
}

// ---- linear ---------------------------------------------------------------------------------

MXF_DEV float bias_at(const Fp6LinearParams& p, int64_t n) {
  return p.bias != nullptr ? load_as_f32(p.bias, n, p.bias_dtype) : 0.0f;
}

// Portable twin: one output per thread and step, exact-order fp32 sums per group.
template <int kRT>
MXF_DEV void linear_portable(const Fp6LinearParams& p, int64_t row0, int64_t m0) {
  const int64_t groups = p.k / kMxBlock;
  constexpr int kRows = 16 * kRT;
  for (int e = threadIdx.x; e < kRows * 16; e += blockDim.x) {
    const int64_t n = row0 + e % kRows, m = m0 + e / kRows;
    if (m >= p.m) continue;
    const char* xr = static_cast<const char*>(p.x) + m * p.x_stride * 2;
    float acc = 0.0f;
    uint8_t codes[kMxBlock];
    for (int64_t g = 0; g < groups; ++g) {
      fp6_unpack_group(p.packed + fp6_group_offset(n, g, p.k), codes);
      float part = 0.0f;
      for (int i = 0; i < kMxBlock; ++i) {
        part = add_rn(part, mul_rn(load_as_f32(xr, g * kMxBlock + i, p.act), e2m3_decode(codes[i])));
      }
      acc = add_rn(acc, mul_rn(part, e8m0_to_f32(p.scales[n * groups + g])));
    }
    store_from_f32(p.out, m * p.n + n, p.act, add_rn(acc, bias_at(p, n)));
  }
}

#if defined(MXF_HAS_MMA_PIPE)
MXF_DEV uint32_t lop3_and_or(uint32_t a, uint32_t b, uint32_t c) {  // (a & b) | c, all registers
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// Eight codes (six bytes, window w0:w1 picked by `sel`) -> four packed pairs of values
// (c0,c4) (c1,c5) (c2,c6) (c3,c7). The 5 magnitude bits go where a bf16 (f16) with a tiny
// exponent holds them; one multiply by +-2^e per pair then gives code value * 2^(e - 126) exactly
// (2^(e - 14) for f16). `pow` holds the exponent field of 2^e in both halves.
template <bool kBF16>
MXF_DEV void decode8(uint32_t w0, uint32_t w1, const uint32_t (&sel)[4], uint32_t pow,
                     uint32_t sign_mask, uint32_t (&out)[4]) {
  // After the permute, pair q's code LSBs sit at bits 0/16, 6/22, 4/20, 2/18; shift them to 4/20
  // (bf16) or 7/23 (f16). The sign (code bit 5) then needs 6 (3) more to reach bit 15/31.
  constexpr int kShift[4] = {kBF16 ? 4 : 7, kBF16 ? -2 : 1, kBF16 ? 0 : 3, kBF16 ? 2 : 5};
  constexpr int kSignShift = kBF16 ? 6 : 3;
  constexpr uint32_t kMag = kBF16 ? 0x01f001f0u : 0x0f800f80u;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint32_t v = prmt(w0, w1, sel[q]);
    const int sh = kShift[q];
    const uint32_t mag = (sh >= 0 ? (v << sh) : (v >> -sh)) & kMag;
    const int ssh = sh + kSignShift;
    const uint32_t mult = lop3_and_or(v << ssh, sign_mask, pow);
    out[q] = mul2<kBF16>(mag, mult);
  }
}

// All four E8M0 bytes of `s` in [1, 128]: then 2^(sb-1) is a normal bf16 and the scale can be
// folded into the decode multiply (the product is the W6 value, exact in bf16, SPEC §5).
MXF_DEV bool scales_foldable(uint32_t s) { return ((s - 0x01010101u) & 0x80808080u) == 0; }

// Per-lane state of the x (B operand) stream: this lane's row of each n8 block and whether it
// exists; the 16 bytes for group j of k-tile tk sit at ptr + tk * 128 + 32 j.
template <int kNB>
struct XStream {
  const uint4* ptr[kNB];
  bool valid[kNB];

  MXF_DEV void load(int64_t tk, int j, uint4 (&xq)[kNB]) const {
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) {
      xq[nb] = valid[nb] ? __ldg(ptr[nb] + tk * (kFp6TileCols / 8) + j * 4) : make_uint4(0, 0, 0, 0);
    }
  }
};

// One k-tile (4 groups) of kRT row tiles from the staged ring slot `st`. kFold: scales folded
// into the decode multiply and a single mma chain; otherwise every group's product starts from
// zero and is scaled in fp32. x for the tile's first group is in xq on entry; on exit xq holds
// the next tile's first group (when `more`).
template <bool kBF16, bool kFold, int kNB, int kRT, int kW>
MXF_DEV void mma_tile(const uint8_t* st, const XStream<kNB>& xs, int64_t tk, bool more,
                      uint4 (&xq)[kNB], const uint32_t (&sel)[4], int g, int win,
                      float (&acc)[kRT][kNB][4]) {
  constexpr uint32_t kPowUnscaled = kBF16 ? 0x7e807e80u : 0x74007400u;  // 2^126 / 2^14
  // Scale bytes of the lane's two rows for the tile's 4 groups. Folded: each byte + 126 (no
  // carries: every byte is <= 128 on this path) is the bf16 exponent field of 2^(sb-1).
  uint32_t s_lo[kRT], s_hi[kRT];
#pragma unroll
  for (int r = 0; r < kRT; ++r) {
    const uint8_t* sc = st + r * kTileStageBytes + kFp6TileBytes;
    s_lo[r] = *reinterpret_cast<const uint32_t*>(sc + g * 4) + (kFold ? 0x7e7e7e7eu : 0u);
    s_hi[r] = *reinterpret_cast<const uint32_t*>(sc + (g + 8) * 4) + (kFold ? 0x7e7e7e7eu : 0u);
  }
#pragma unroll
  for (int j = 0; j < kFp6GroupsPerTileRow; ++j) {
    uint4 xc[kNB];
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) xc[nb] = xq[nb];
    if (j + 1 < kFp6GroupsPerTileRow) {
      xs.load(tk, j + 1, xq);
    } else if (more) {
      xs.load(tk + kW, 0, xq);
    }
    uint32_t b[kNB][4];  // x pairs (x0,x4) (x1,x5) (x2,x6) (x3,x7), matching the code pairs
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) {
      b[nb][0] = prmt(xc[nb].x, xc[nb].z, 0x5410u);
      b[nb][1] = prmt(xc[nb].x, xc[nb].z, 0x7632u);
      b[nb][2] = prmt(xc[nb].y, xc[nb].w, 0x5410u);
      b[nb][3] = prmt(xc[nb].y, xc[nb].w, 0x7632u);
    }
#pragma unroll
    for (int r = 0; r < kRT; ++r) {
      const uint8_t* lo = st + r * kTileStageBytes +
                          kFp6GroupBytes * (kFp6GroupsPerTileRow * g + j) + win;
      const uint8_t* hi = lo + kFp6GroupBytes * kFp6GroupsPerTileRow * 8;
      // Folded: byte j of s (sb + 126) into both halves' exponent field: 2^(sb-1) as bf16x2.
      const uint32_t kSpread = 0x4040u + 0x0101u * j;  // bytes j, 0, j, 0 (byte 4 = zero)
      const uint32_t pow_lo = kFold ? prmt(s_lo[r], 0u, kSpread) << 7 : kPowUnscaled;
      const uint32_t pow_hi = kFold ? prmt(s_hi[r], 0u, kSpread) << 7 : kPowUnscaled;
      uint32_t a_lo[4], a_hi[4];
      decode8<kBF16>(*reinterpret_cast<const uint32_t*>(lo),
                     *reinterpret_cast<const uint32_t*>(lo + 4), sel, pow_lo, 0x80008000u, a_lo);
      decode8<kBF16>(*reinterpret_cast<const uint32_t*>(hi),
                     *reinterpret_cast<const uint32_t*>(hi + 4), sel, pow_hi, 0x80008000u, a_hi);
      const uint32_t a0[4] = {a_lo[0], a_hi[0], a_lo[1], a_hi[1]};
      const uint32_t a1[4] = {a_lo[2], a_hi[2], a_lo[3], a_hi[3]};
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb) {
        if constexpr (kFold) {
          mma_16816<kBF16>(acc[r][nb], a0, b[nb][0], b[nb][1], acc[r][nb]);
          mma_16816<kBF16>(acc[r][nb], a1, b[nb][2], b[nb][3], acc[r][nb]);
        } else {
          const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          float part[4];
          mma_16816<kBF16>(part, a0, b[nb][0], b[nb][1], zero);
          mma_16816<kBF16>(part, a1, b[nb][2], b[nb][3], part);
          const float f_lo = e8m0_to_f32(static_cast<uint8_t>(s_lo[r] >> (8 * j)));
          const float f_hi = e8m0_to_f32(static_cast<uint8_t>(s_hi[r] >> (8 * j)));
          acc[r][nb][0] = fmaf(part[0], f_lo, acc[r][nb][0]);
          acc[r][nb][1] = fmaf(part[1], f_lo, acc[r][nb][1]);
          acc[r][nb][2] = fmaf(part[2], f_hi, acc[r][nb][2]);
          acc[r][nb][3] = fmaf(part[3], f_hi, acc[r][nb][3]);
        }
      }
    }
  }
}

template <Dtype kAct, int kNB, int kStages, int kRT, int kW>
MXF_DEV void linear_mma(const Fp6LinearParams& p, uint8_t* smem, int64_t row0, int64_t m0) {
  constexpr bool kBF16 = kAct == Dtype::kBF16;
  constexpr int kStageBytes = kRT * kTileStageBytes;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;
  const int64_t ktiles = p.k / kFp6TileCols, sgroups = p.k / kMxBlock, tn0 = row0 / kFp6TileRows;
  const int count = static_cast<int>((ktiles - warp + kW - 1) / kW);
  uint8_t* ring = smem + warp * kStages * kStageBytes;

  // Warp w streams k-tiles w, w + 4, ...: three 16-byte copies per lane per tile plus the
  // tile's 16 rows x 4 scale bytes.
  // Issues happen in tile order, so the sources advance by a fixed stride.
  const uint8_t* src = p.packed + (tn0 * ktiles + warp) * kFp6TileBytes + lane * 16;
  const uint8_t* ssrc = p.scales + (row0 + (lane & 15)) * sgroups + warp * 4;
  const int64_t rt_stride = ktiles * kFp6TileBytes, srt_stride = kFp6TileRows * sgroups;
  const auto issue = [&](int i) {
    uint8_t* dst = ring + (i % kStages) * kStageBytes + lane * 16;
#pragma unroll
    for (int r = 0; r < kRT; ++r) {
#pragma unroll
      for (int q = 0; q < 3; ++q) {
        cp_async16(dst + r * kTileStageBytes + q * 512, src + r * rt_stride + q * 512);
      }
      if (lane < kFp6TileRows) {
        cp_async4(dst - lane * 12 + r * kTileStageBytes + kFp6TileBytes, ssrc + r * srt_stride);
      }
    }
    src += kW * kFp6TileBytes;
    ssrc += kW * 4;
  };

  XStream<kNB> xs;
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb) {
    const int64_t m = m0 + nb * 8 + g;
    xs.valid[nb] = m < p.m;
    xs.ptr[nb] = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.x) +
                                                (xs.valid[nb] ? m : 0) * p.x_stride + 8 * t);
  }

  // Lane t's six bytes of a group start at byte 6t; w0:w1 are the aligned 8 bytes around them,
  // so for odd t the permute picks bytes two positions further in.
  const uint32_t par = (t & 1) ? 0x2222u : 0u;
  const uint32_t sel[4] = {0x3300u + par, 0x4310u + par, 0x5421u + par, 0x5522u + par};
  const int win = (6 * t) & ~3;

  float acc[kRT][kNB][4];
#pragma unroll
  for (int r = 0; r < kRT; ++r)
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[r][nb][i] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < count) issue(s);
    cp_async_commit();
  }
  uint4 xq[kNB];
  if (count > 0) xs.load(warp, 0, xq);
  for (int i = 0; i < count; ++i) {
    cp_async_wait<kStages - 2>();
    sync_lanes();
    if (i + kStages - 1 < count) issue(i + kStages - 1);
    cp_async_commit();
    const uint8_t* st = ring + (i % kStages) * kStageBytes;
    const int64_t tk = warp + static_cast<int64_t>(kW) * i;
    const bool more = i + 1 < count;
    bool foldable = kBF16;
#pragma unroll
    for (int r = 0; r < kRT; ++r) {
      const uint8_t* sc = st + r * kTileStageBytes + kFp6TileBytes;
      foldable = foldable && scales_foldable(*reinterpret_cast<const uint32_t*>(sc + g * 4)) &&
                 scales_foldable(*reinterpret_cast<const uint32_t*>(sc + (g + 8) * 4));
    }
    if (__all_sync(0xffffffffu, foldable)) {
      mma_tile<kBF16, true, kNB, kRT, kW>(st, xs, tk, more, xq, sel, g, win, acc);
    } else {
      mma_tile<kBF16, false, kNB, kRT, kW>(st, xs, tk, more, xq, sel, g, win, acc);
    }
  }
  cp_async_wait<0>();
  __syncthreads();

  // Fixed-order sum of the four warps' partials, bias in fp32, one rounding.
  constexpr int kPer = kRT * kNB * 4;
  float* red = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int r = 0; r < kRT; ++r)
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        red[(warp * kPer + (r * kNB + nb) * 4 + i) * 32 + lane] = acc[r][nb][i];
      }
  __syncthreads();
  for (int e = threadIdx.x; e < kPer * 32; e += (kW * 32)) {
    const int idx = e / 32, ln = e % 32;
    const int r = idx / (kNB * 4), nb = (idx / 4) % kNB, i = idx % 4;
    const int64_t n = row0 + r * kFp6TileRows + (ln >> 2) + (i >= 2 ? 8 : 0);
    const int64_t m = m0 + nb * 8 + 2 * (ln & 3) + (i & 1);
    if (m >= p.m) continue;
    float v = red[idx * 32 + ln];
#pragma unroll
    for (int w = 1; w < kW; ++w) v = add_rn(v, red[(w * kPer + idx) * 32 + ln]);
    store_from_f32(p.out, m * p.n + n, kAct, add_rn(v, bias_at(p, n)));
  }
}
#endif  // MXF_HAS_MMA_PIPE

template <Dtype kAct, int kNB, int kStages, int kRT, int kW>
__global__ void __launch_bounds__(kW * 32, (kNB == 2 ? 16 : 24) / kW) fp6_linear_kernel(const Fp6LinearParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int64_t mblocks = (p.m + 15) / 16;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x / mblocks) * kFp6TileRows * kRT;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x % mblocks) * 16;
#if defined(MXF_HAS_MMA_PIPE)
  if (!p.force_portable) {
    linear_mma<kAct, kNB, kStages, kRT, kW>(p, smem, row0, m0);
    return;
  }
#endif
  linear_portable<kRT>(p, row0, m0);
}

template <Dtype kAct, int kNB, int kStages, int kRT, int kW>
error_t launch_linear_cfg(const Fp6LinearParams& p, stream_t stream) {
  const int64_t ctas = p.n / (kFp6TileRows * kRT) * ((p.m + 15) / 16);
  const int smem = kW * kStages * kRT * kTileStageBytes;
  const auto kernel = fp6_linear_kernel<kAct, kNB, kStages, kRT, kW>;
  const error_t e = set_max_dynamic_smem(kernel, smem);
  if (e != kSuccess) return e;
  kernel<<<static_cast<unsigned>(ctas), kW * 32, smem, stream>>>(p);
  return last_error();
}

// kRT row tiles per CTA share the x stream; warps per CTA split K. Aim for about 32 warps per
// SM (for one block of 16 rows of x) without giving a warp fewer than ~3 k-tiles to stream.
template <Dtype kAct, int kNB>
error_t launch_linear_typed(const Fp6LinearParams& p, stream_t stream) {
  // The launch shape depends on the weight only, never on M: every row of x runs the same
  // instruction sequence for any batch size (batch invariance).
  const int64_t row_tiles = p.n / kFp6TileRows, ktiles = p.k / kFp6TileCols;
  int rt = p.rt_override;
  if (rt <= 0) rt = (row_tiles % 2 == 0 && row_tiles / 2 * 8 >= 24LL * p.num_sms) ? 2 : 1;
  if (row_tiles % rt != 0) rt = 1;
  const int64_t ctas = row_tiles / rt;
  int warps = p.warps_override;
  if (warps <= 0) {
    warps = 4;
    while (warps < 16 && ctas * warps * 2 <= 32LL * p.num_sms && ktiles >= 3 * warps * 2) warps *= 2;
  }
  if (rt == 2) {
    return warps >= 8 ? launch_linear_cfg<kAct, kNB, 4, 2, 8>(p, stream)
                      : launch_linear_cfg<kAct, kNB, 4, 2, 4>(p, stream);
  }
  switch (warps) {
    case 16:
      return launch_linear_cfg<kAct, kNB, 4, 1, 16>(p, stream);
    case 8:
      return launch_linear_cfg<kAct, kNB, 4, 1, 8>(p, stream);
    default:
      return launch_linear_cfg<kAct, kNB, 4, 1, 4>(p, stream);
  }
}

}  // namespace

error_t launch_mxfp6_pack(const Fp6PackParams& p, stream_t stream) {
  const bool vec = p.w_stride % 8 == 0 && aligned16(p.w) && (p.rounded == nullptr || aligned16(p.rounded));
  fp6_pack_kernel<<<blocks_for(p.n * (p.k / kMxBlock)), kThreads, 0, stream>>>(p, vec);
  return last_error();
}

error_t launch_mxfp6_unpack(const Fp6UnpackParams& p, stream_t stream) {
  fp6_unpack_kernel<<<blocks_for(p.n * (p.k / kMxBlock)), kThreads, 0, stream>>>(p);
  return last_error();
}

error_t launch_mxfp6_linear(const Fp6LinearParams& p, stream_t stream) {
  const bool small = p.m <= 8;
  if (p.act == Dtype::kBF16) {
    return small ? launch_linear_typed<Dtype::kBF16, 1>(p, stream)
                 : launch_linear_typed<Dtype::kBF16, 2>(p, stream);
  }
  return small ? launch_linear_typed<Dtype::kFP16, 1>(p, stream)
               : launch_linear_typed<Dtype::kFP16, 2>(p, stream);
}

}  // namespace mxf::kernels
