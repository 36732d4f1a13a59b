// The MXFP6 linear for larger M (prefill; the default above M = 384, mxfp6.cu): a CTA computes a
// 128 x 128 tile of the output (128 weight rows, 128 rows of x) and decodes each weight once per
// 128 rows of x, where the decode kernels (mxfp6_linear.cuh) decode it once per 8, 16 or 32. Same
// bits as those kernels: every output runs the mma sequence that the decode path's launch shape
// gives it.
//
// What fixes the bits of an output (mxfp6_linear.cuh, linear_mma): the launch shape of the weight
// (linear_shape: kRT row tiles per fold decision, kVW virtual warps, kS CTAs per cluster), not M.
// Split s of K (tiles [ktiles * s / kS, ktiles * (s + 1) / kS)) is summed as kVW chains: chain v
// adds tiles v, v + kVW, ... of the split in one fp32 mma chain; a tile's mmas are those of
// mma_tile (the same decode8 of the same bytes, the same x pairs, folded scales when every scale of
// the tile's kRT row tiles allows it, otherwise each group from zero and scaled with one fmaf). The
// split's sum is chain 0 + chain 1 + ... (add_rn, in order), the output the splits' sums in rank
// order, then + bias, one rounding.
//
// This kernel walks the same tiles in the same order with all eight warps on one output tile:
// positions 0, 1, ... of the split's tiles in chain order (chain 0's tiles, then chain 1's, ...),
// the running chain in registers and the split's sum next to it. Packed tiles, their scale bytes
// and the CTA's 128 rows of x go through a three-stage cp.async ring. Warp w decodes row tile w of
// the next position into one of two shared buffers of A fragments (with its fold decision) while
// the mmas of this position read the other: warp (wn, wm) owns weight rows 64 wn .. 64 wn + 63
// (four row tiles) and x rows 32 wm .. 32 wm + 31 (four n8 blocks). One barrier per position.
// Where a warp's four row tiles are all valid and share one fold decision (every tile of typical
// weights), a position runs as one branch-free block per group, with the next position's decode
// of that group between its mmas; otherwise (a mix of scale paths, a partial block of rows) the
// decode runs first and each row tile takes its own branch. The kS CTAs of a cluster take one
// split each and the others push their sums into the leader's shared memory, as the decode
// kernels do. H200 measurements and the versions that lost: docs/PERF_NOTES.md, thirty-third and
// thirty-fourth sessions; the copies, thirty-fifth.
#pragma once

#include "mxfp6_linear.cuh"

namespace mxf::kernels {
namespace {

constexpr int kTiledRT = 8;                                        // row tiles per CTA (128 weight rows)
constexpr int kTiledRows = 128;                                    // rows of x per CTA
constexpr int kTiledWarps = 8;                                     // 2 x 4 warps of 64 x 32 outputs
constexpr int kTiledStages = 3;                                    // ring stages (2 tiles in flight)
constexpr int kTiledRawBytes = kTiledRT * kTileStageBytes;         // 12800: codes + scale bytes
constexpr int kTiledXBytes = kTiledRows * kFp6TileCols * 2;        // 32768: x rows of one k-tile
constexpr int kTiledStageBytes = kTiledRawBytes + kTiledXBytes;
// The decoded A fragments of one k-tile: [row tile][group][mma][lane] x 16 bytes, and the row
// tiles' fold decisions; two buffers (the next tile is decoded while this one's mmas run).
constexpr int kTiledABytes = kTiledRT * kFp6GroupsPerTileRow * 2 * 32 * 16;  // 32768
constexpr int kTiledAOffset = kTiledStages * kTiledStageBytes;
constexpr int kTiledFoldOffset = kTiledAOffset + 2 * kTiledABytes;
constexpr int kTiledOutputs = kTiledRT * kFp6TileRows * kTiledRows;  // 16384 fp32 partials per CTA
constexpr int kTiledMaxSplit = 4;  // the leader's memory holds the other CTAs' partials up to this

MXF_HD constexpr int tiled_smem_bytes(int split) {
  const int ring = kTiledFoldOffset + 2 * kTiledRT * 4;
  const int pushed = (split - 1) * kTiledOutputs * 4;
  return ring > pushed ? ring : pushed;
}

// Byte offset of 16-byte chunk c (0..15) of x row r in a stage's x block: rows of 256 bytes, the
// chunk index XOR 4 on odd rows, so that the eight lanes of a 16-byte load phase (rows g, g + 1,
// chunks 4j .. 4j + 3) hit eight different bank groups.
MXF_HD constexpr int tiled_x_offset(int r, int c) { return r * 256 + ((c ^ ((r & 1) << 2)) << 4); }

struct TiledShape {
  int rt;     // row tiles per fold decision (the decode kernel's kRT)
  int vw;     // virtual warps: chains per split
  int split;  // CTAs per cluster splitting K
};

template <Dtype kAct>
__global__ void __launch_bounds__(kTiledWarps * 32, 1) fp6_linear_tiled_kernel(const Fp6LinearParams p,
                                                                                 const TiledShape sh) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int64_t mblocks = (p.m + kTiledRows - 1) / kTiledRows;
  const int64_t unit = blockIdx.x / sh.split;
  const int split = static_cast<int>(blockIdx.x % sh.split);
  const int64_t row0 = (unit / mblocks) * (kTiledRT * kFp6TileRows);
  const int64_t m0 = (unit % mblocks) * kTiledRows;
  // Row tiles of this CTA that exist (N is a multiple of 16 only).
  const int valid_rt = static_cast<int>((p.n - row0) / kFp6TileRows < kTiledRT ? (p.n - row0) / kFp6TileRows : kTiledRT);
#if defined(MXF_HAS_CLUSTER)
  // Mode 1 of the decode kernels whatever p.pdl says: nothing is read before the previous kernel
  // has finished, and the next one may start (and wait) once every CTA is past this point.
  grid_dep_wait();
  grid_dep_launch();
#endif
#if defined(MXF_HAS_MMA_PIPE)
  constexpr bool kBF16 = kAct == Dtype::kBF16;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane >> 2, t = lane & 3;
  const int wn = warp & 1, wm = warp >> 1;  // row tiles 4 wn .. 4 wn + 3, x rows 32 wm .. 32 wm + 31
  const int64_t ktiles = p.k / kFp6TileCols, sgroups = p.k / kMxBlock;
  const int64_t t_begin = ktiles * split / sh.split, t_end = ktiles * (split + 1) / sh.split;
  const int len = static_cast<int>(t_end - t_begin), vw = sh.vw;
  const int cq = len / vw, cr = len % vw;  // chains v < cr hold cq + 1 tiles, the others cq
  // The k-tile of the next position to copy, in the split's chain order (chain v's tiles are
  // t_begin + v, + v + vw, ...; positions are copied once each, in order).
  int walk_v = 0, walk_i = 0;
  const auto next_tile = [&]() -> int64_t {
    const int64_t kt = t_begin + walk_v + static_cast<int64_t>(walk_i) * vw;
    if (++walk_i == cq + (walk_v < cr ? 1 : 0)) {
      ++walk_v;
      walk_i = 0;
    }
    return kt;
  };
  const uint32_t smem0 = smem_addr(smem);
  // Stage `slot` <- the next position's tile. Warp w copies row tile w, the one it decodes: lane
  // l its code chunks l, l + 32, l + 64, lanes 0..15 the scale word of row l. Each thread copies
  // chunk tid % 16 of x rows tid / 16 + 16 i (i = 0..7): one row pointer stepped by 16 rows, or,
  // in a CTA whose rows pass M, rows past M read the last row (their outputs are never stored).
  // Per-thread bases are computed once (IMAD, this arithmetic among it, was a quarter of the
  // instructions before; this form is 1.04-1.07x faster, docs/PERF_NOTES.md thirty-fifth session).
  static_assert(kTiledWarps == kTiledRT, "warp w copies row tile w");
  const uint8_t* const packed_rt0 = p.packed + (row0 / kFp6TileRows) * ktiles * kFp6TileBytes;
  const uint16_t* const xbase = static_cast<const uint16_t*>(p.x) + (tid % 16) * 8;
  const uint8_t* const packed_w = packed_rt0 + static_cast<int64_t>(warp) * ktiles * kFp6TileBytes + lane * 16;
  const uint8_t* const scales_w = p.scales + (row0 + warp * kFp6TileRows + (lane & 15)) * sgroups;
  const bool x_full = m0 + kTiledRows <= p.m;
  const uint16_t* const xrow = xbase + (m0 + tid / 16) * p.x_stride;
  const auto issue = [&](int slot) {
    const int64_t kt = next_tile();
    const uint32_t raw = smem0 + slot * kTiledStageBytes, xdst = raw + kTiledRawBytes;
    if (warp < valid_rt) {
      const uint8_t* const src = packed_w + kt * kFp6TileBytes;
      const uint32_t dst = raw + warp * kTileStageBytes + lane * 16;
#pragma unroll
      for (int it = 0; it < kFp6TileBytes / 512; ++it) cp_async16_to(dst + it * 512, src + it * 512);
      if (lane < kFp6TileRows) cp_async4_to(raw + warp * kTileStageBytes + kFp6TileBytes + lane * 4, scales_w + kt * 4);
    }
    constexpr int kXCopies = kTiledRows * 16 / (kTiledWarps * 32);
    if (x_full) {
      const uint16_t* src = xrow + kt * kFp6TileCols;
      const int64_t step = 16 * p.x_stride;
#pragma unroll
      for (int i = 0; i < kXCopies; ++i, src += step) cp_async16_to(xdst + tiled_x_offset(tid / 16 + 16 * i, tid % 16), src);
    } else {
#pragma unroll
      for (int i = 0; i < kXCopies; ++i) {
        const int64_t m = m0 + tid / 16 + 16 * i;
        cp_async16_to(xdst + tiled_x_offset(tid / 16 + 16 * i, tid % 16),
                      xbase + (m < p.m ? m : p.m - 1) * p.x_stride + kt * kFp6TileCols);
      }
    }
  };

  const uint32_t par = (t & 1) ? 0x2222u : 0u;
  const int lane_codes = kFp6GroupBytes * kFp6GroupsPerTileRow * g + ((6 * t) & ~3);
  constexpr uint32_t kPowUnscaled = kBF16 ? 0x7e807e80u : 0x74007400u;
  uint4* const abuf0 = reinterpret_cast<uint4*>(smem + kTiledAOffset);
  int* const fold_flags = reinterpret_cast<int*>(smem + kTiledFoldOffset);
  // Warp w decodes row tile w of a k-tile into an A buffer: the fragments lane (g, t) of mma_tile
  // would hold, with mma_tile's fold decision (every scale of the row tiles of the fold group in
  // [1, 128]). dec_begin reads the scale bytes and decides, dec_group(j) decodes group j, so that
  // the groups can sit between the mmas of the position before. A warp past the valid row tiles
  // decodes the last valid one (bytes that were copied) into its own slots, which no mma reads.
  struct Dec {
    const uint8_t* codes;  // the row tile's codes at this lane's offset
    uint32_t s_lo, s_hi;   // scale bytes of rows g and g + 8
    bool fold;
    uint4* a;  // this lane's fragment slots of row tile `warp`
  };
  const auto dec_begin = [&](int slot, int buf) -> Dec {
    const int rt = warp < valid_rt ? warp : valid_rt - 1;
    const uint8_t* const raw = smem + slot * kTiledStageBytes;
    const uint8_t* const sr = raw + rt * kTileStageBytes + kFp6TileBytes;
    Dec d;
    d.s_lo = *reinterpret_cast<const uint32_t*>(sr + g * 4);
    d.s_hi = *reinterpret_cast<const uint32_t*>(sr + (g + 8) * 4);
    bool fold = kBF16 && scales_foldable(d.s_lo) && scales_foldable(d.s_hi);
    if (sh.rt == 2) {  // fold group: row tiles 2q, 2q + 1 (row0 is a multiple of 128, rows even)
      const uint8_t* so = raw + (rt ^ 1) * kTileStageBytes + kFp6TileBytes;
      fold = fold && scales_foldable(*reinterpret_cast<const uint32_t*>(so + g * 4)) &&
             scales_foldable(*reinterpret_cast<const uint32_t*>(so + (g + 8) * 4));
    }
    d.fold = __all_sync(0xffffffffu, fold);
    d.codes = raw + rt * kTileStageBytes + lane_codes;
    d.a = abuf0 + buf * (kTiledABytes / 16) + warp * kFp6GroupsPerTileRow * 2 * 32 + lane;
    if (lane == 0) fold_flags[buf * kTiledRT + warp] = d.fold ? 1 : 0;
    return d;
  };
  const auto dec_group = [&](const Dec& d, int j) {
    const uint8_t* lo = d.codes + kFp6GroupBytes * j;
    const uint8_t* hi = lo + kFp6GroupBytes * kFp6GroupsPerTileRow * 8;
    const uint32_t sel = 0x4040u + 0x0101u * j;
    const uint32_t pow_lo = d.fold ? prmt(d.s_lo + 0x7e7e7e7eu, 0u, sel) << 7 : kPowUnscaled;
    const uint32_t pow_hi = d.fold ? prmt(d.s_hi + 0x7e7e7e7eu, 0u, sel) << 7 : kPowUnscaled;
    uint32_t a_lo[4], a_hi[4];
    decode8<kBF16, false>(*reinterpret_cast<const uint32_t*>(lo), *reinterpret_cast<const uint32_t*>(lo + 4), par,
                          pow_lo, a_lo);
    decode8<kBF16, false>(*reinterpret_cast<const uint32_t*>(hi), *reinterpret_cast<const uint32_t*>(hi + 4), par,
                          pow_hi, a_hi);
    d.a[(j * 2) * 32] = make_uint4(a_lo[0], a_hi[0], a_lo[1], a_hi[1]);
    d.a[(j * 2 + 1) * 32] = make_uint4(a_lo[2], a_hi[2], a_lo[3], a_hi[3]);
  };

  // The thread's accumulator slots: row tile i of the warp's four, n8 block nb, mma slot q.
  const auto each_slot = [](auto&& f) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int nb = 0; nb < 4; ++nb)
#pragma unroll
        for (int q = 0; q < 4; ++q) f(i, nb, q);
  };
  float acc[4][4][4], cta[4][4][4];
  each_slot([&](int i, int nb, int q) { cta[i][nb][q] = 0.0f; });
  bool mine[4];  // warp-uniform
#pragma unroll
  for (int i = 0; i < 4; ++i) mine[i] = 4 * wn + i < valid_rt;
  const bool all_mine = mine[3];

  // The B fragments of group j of the x rows of stage `slot` (the warp's four n8 blocks).
  const auto load_b = [&](int slot, int j, uint32_t (&b)[4][4]) {
    const uint8_t* const xt = smem + slot * kTiledStageBytes + kTiledRawBytes;
#pragma unroll
    for (int nb = 0; nb < 4; ++nb) {
      const uint4 xc = *reinterpret_cast<const uint4*>(xt + tiled_x_offset(wm * 32 + nb * 8 + g, j * 4 + t));
      b[nb][0] = prmt(xc.x, xc.z, 0x5410u);
      b[nb][1] = prmt(xc.x, xc.z, 0x7632u);
      b[nb][2] = prmt(xc.y, xc.w, 0x5410u);
      b[nb][3] = prmt(xc.y, xc.w, 0x7632u);
    }
  };
  // mma_tile's sequence for group j of the warp's row tile i (A buffer `buf`, scale bytes from
  // stage `slot`): folded, the group's two mmas on the chain; otherwise its two mmas from zero,
  // then one fmaf by the group's scale.
  const auto mma_rt = [&](int i, int j, bool folded, int slot, int buf, const uint32_t (&b)[4][4]) {
    const int rt = 4 * wn + i;
    const uint4* const a = abuf0 + buf * (kTiledABytes / 16) + lane;
    const uint4 f0 = a[((rt * kFp6GroupsPerTileRow + j) * 2) * 32];
    const uint4 f1 = a[((rt * kFp6GroupsPerTileRow + j) * 2 + 1) * 32];
    const uint32_t a0[4] = {f0.x, f0.y, f0.z, f0.w};
    const uint32_t a1[4] = {f1.x, f1.y, f1.z, f1.w};
    if (kBF16 && folded) {
#pragma unroll
      for (int nb = 0; nb < 4; ++nb) mma_16816_sched<kBF16>(acc[i][nb], a0, b[nb][0], b[nb][1], acc[i][nb]);
#pragma unroll
      for (int nb = 0; nb < 4; ++nb) mma_16816_sched<kBF16>(acc[i][nb], a1, b[nb][2], b[nb][3], acc[i][nb]);
    } else {
      const uint8_t* sr = smem + slot * kTiledStageBytes + rt * kTileStageBytes + kFp6TileBytes;
      const float f_lo = e8m0_to_f32(sr[g * 4 + j]);
      const float f_hi = e8m0_to_f32(sr[(g + 8) * 4 + j]);
      const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      float part[4][4];
#pragma unroll
      for (int nb = 0; nb < 4; ++nb) mma_16816_sched<kBF16>(part[nb], a0, b[nb][0], b[nb][1], zero);
#pragma unroll
      for (int nb = 0; nb < 4; ++nb) mma_16816_sched<kBF16>(part[nb], a1, b[nb][2], b[nb][3], part[nb]);
#pragma unroll
      for (int nb = 0; nb < 4; ++nb) {
        acc[i][nb][0] = fmaf(part[nb][0], f_lo, acc[i][nb][0]);
        acc[i][nb][1] = fmaf(part[nb][1], f_lo, acc[i][nb][1]);
        acc[i][nb][2] = fmaf(part[nb][2], f_hi, acc[i][nb][2]);
        acc[i][nb][3] = fmaf(part[nb][3], f_hi, acc[i][nb][3]);
      }
    }
  };
  // One position: its mmas (stage `slot`, A buffer `buf`) and the decode of the next position
  // (stage `dslot` into the other A buffer). Where the warp's four row tiles are valid and share
  // one fold decision (every tile of typical weights), the groups run as one straight block with
  // the next position's decode between them; otherwise the decode runs first and each row tile
  // takes its own branch.
  const auto step = [&](int slot, int buf, int dslot) {
    const int* const folds = fold_flags + buf * kTiledRT + 4 * wn;
    const bool f0 = folds[0] != 0, f1 = folds[1] != 0, f2 = folds[2] != 0, f3 = folds[3] != 0;
    const bool all_fold = f0 && f1 && f2 && f3, none_fold = !(f0 || f1 || f2 || f3);
    const Dec d = dec_begin(dslot, buf ^ 1);
    const auto straight = [&](auto folded) {
#pragma unroll 1
      for (int j = 0; j < kFp6GroupsPerTileRow; ++j) {
        uint32_t b[4][4];
        load_b(slot, j, b);
        dec_group(d, j);
#pragma unroll
        for (int i = 0; i < 4; ++i) mma_rt(i, j, decltype(folded)::value, slot, buf, b);
      }
    };
    if (all_mine && kBF16 && all_fold) {
      straight(std::true_type{});
    } else if (all_mine && none_fold) {
      straight(std::false_type{});
    } else {
      const bool fold[4] = {f0, f1, f2, f3};
#pragma unroll
      for (int j = 0; j < kFp6GroupsPerTileRow; ++j) dec_group(d, j);
#pragma unroll
      for (int j = 0; j < kFp6GroupsPerTileRow; ++j) {
        uint32_t b[4][4];
        load_b(slot, j, b);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if (mine[i]) mma_rt(i, j, fold[i], slot, buf, b);
        }
      }
    }
  };

  // The ring: stage of position pos is pos % kTiledStages, A buffer pos % 2. Iteration pos waits
  // for position pos + 1's copies, refills the stage of position pos - 1 and runs position pos's
  // mmas with position pos + 1's decode; its one barrier orders all of that against iteration
  // pos - 1. The last position decodes its own stage again into the unused buffer.
#pragma unroll
  for (int s = 0; s < kTiledStages - 1; ++s) {
    if (s < len) issue(s);
    cp_async_commit();
  }
  cp_async_wait<kTiledStages - 2>();
  __syncthreads();
  if (len > 0) {
    const Dec d = dec_begin(0, 0);
#pragma unroll
    for (int j = 0; j < kFp6GroupsPerTileRow; ++j) dec_group(d, j);
  }
  int pos = 0;
  for (int v = 0; v < vw; ++v) {
    const int cnt = cq + (v < cr ? 1 : 0);
    each_slot([&](int i, int nb, int q) { acc[i][nb][q] = 0.0f; });
    for (int c = 0; c < cnt; ++c, ++pos) {
      cp_async_wait<kTiledStages - 3>();
      __syncthreads();
      if (pos + kTiledStages - 1 < len) issue((pos + kTiledStages - 1) % kTiledStages);
      cp_async_commit();
      step(pos % kTiledStages, pos % 2, pos + 1 < len ? (pos + 1) % kTiledStages : pos % kTiledStages);
    }
    // The split's sum: chain 0, then + chain 1, ... (an empty chain adds +0, as in linear_mma).
    each_slot([&](int i, int nb, int q) { cta[i][nb][q] = v == 0 ? acc[i][nb][q] : add_rn(cta[i][nb][q], acc[i][nb][q]); });
  }
  cp_async_wait<0>();
  const auto slot_of = [&](int i, int nb, int q) { return (((warp * 4 + i) * 4 + nb) * 4 + q) * 32 + lane; };
#if defined(MXF_HAS_CLUSTER)
  if (sh.split > 1) {
    // Every CTA of the cluster is past its ring (the leader's memory is free), the others push
    // their sums, and the leader adds them in rank order.
    float* const pushed = reinterpret_cast<float*>(smem);
    cluster_sync();
    if (split != 0) {
      each_slot([&](int i, int nb, int q) {
        st_cluster_f32(pushed + (split - 1) * kTiledOutputs + slot_of(i, nb, q), 0, cta[i][nb][q]);
      });
    }
    cluster_sync();
    if (split != 0) return;
    for (int s = 1; s < sh.split; ++s) {
      each_slot([&](int i, int nb, int q) {
        cta[i][nb][q] = add_rn(cta[i][nb][q], pushed[(s - 1) * kTiledOutputs + slot_of(i, nb, q)]);
      });
    }
  }
#endif
  // Bias in fp32, one rounding.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (!mine[i]) continue;
#pragma unroll
    for (int nb = 0; nb < 4; ++nb)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int64_t n = row0 + (4 * wn + i) * kFp6TileRows + g + (q >= 2 ? 8 : 0);
        const int64_t m = m0 + wm * 32 + nb * 8 + 2 * t + (q & 1);
        if (m < p.m) store_from_f32(p.out, m * p.n + n, kAct, add_rn(cta[i][nb][q], bias_at(p, n)));
      }
  }
#else
  // Portable twin (no mma pipe in this device pass; never a cluster): exact-order sums per output.
  if (split == 0) {
    for (int r = 0; r < valid_rt; ++r) linear_portable(p, row0 + r * kFp6TileRows, m0, kTiledRows);
  }
#endif
}

template <Dtype kAct>
error_t launch_linear_tiled(const Fp6LinearParams& p, stream_t stream) {
  const LinearShape s = linear_shape(p);
  const TiledShape sh{s.rt, s.warps, s.split};
  const int64_t nblocks = (p.n + kTiledRT * kFp6TileRows - 1) / (kTiledRT * kFp6TileRows);
  const int64_t ctas = nblocks * ((p.m + kTiledRows - 1) / kTiledRows) * sh.split;
  const int smem = tiled_smem_bytes(sh.split);
  // A device with less shared memory per block, or a split whose partials the leader cannot hold.
  if (sh.split > kTiledMaxSplit || (p.smem_optin > 0 && smem > p.smem_optin)) {
    return kAct == Dtype::kBF16 ? fp6::linear_bf16_m32(p, stream) : fp6::linear_fp16_m32(p, stream);
  }
  const auto kernel = fp6_linear_tiled_kernel<kAct>;
  static std::mutex launch_mu;
  std::lock_guard<std::mutex> lock(launch_mu);
  error_t e = set_max_dynamic_smem(kernel, smem);
  if (e != kSuccess) return e;
#if defined(MXF_CUDA)
  if (sh.split > 1 || (p.clusters && p.pdl > 0)) {
    return launch_ex(kernel, dim3(static_cast<unsigned>(ctas)), dim3(kTiledWarps * 32), smem, stream, sh.split,
                     p.clusters && p.pdl > 0, p, sh);
  }
#endif
  kernel<<<static_cast<unsigned>(ctas), kTiledWarps * 32, smem, stream>>>(p, sh);
  return last_error();
}

}  // namespace
}  // namespace mxf::kernels

// The entry of mxfp6_entries.h for the tiled kernel of activation dtype ACT.
#define MXF_FP6_DEFINE_TILED_ENTRY(NAME, ACT)                 \
  namespace mxf::kernels::fp6 {                              \
  error_t NAME(const Fp6LinearParams& p, stream_t stream) {  \
    return launch_linear_tiled<Dtype::ACT>(p, stream);       \
  }                                                          \
  }
