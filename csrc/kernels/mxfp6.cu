// MXFP6 E2M3 weights: pack / round and unpack (a thread per 8 codes, a CTA per 16 x 128 tile),
// and the dispatch of the W6A16 decode linear and the attention front to their kernels
// (mxfp6_linear.cuh, compiled in the mxfp6_{linear,front}_*.cu units: one per activation dtype and
// x row block).
#include "../core/mxfp6_layout.h"
#include "../core/mx.h"
#include "attention_front.h"
#include "mxfp6.h"
#include "mxfp6_entries.h"
#include "vec.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_set>

namespace mxf::kernels {
namespace {

// ---- pack / round / unpack ----------------------------------------------------------------

// A CTA packs or rounds kTilesK consecutive tiles (16 rows x 128 columns each) of row tile tn
// (tk0 = kTilesK blockIdx.x; tn = blockIdx.y, stepping by gridDim.y past 65535 row tiles), its
// loads issued first. Thread j (0..255) owns chunk j of each: row j / 16, columns 8 (j % 16)
// .. + 7 of the tile's 128, whose eight codes are the tile's bytes [6j, 6j + 6) (SPEC §4, as in
// the unpack below). A warp reads two whole 256-byte row pieces per tile (bf16 / fp16). The four
// threads of a group (lanes 4q .. 4q + 3) share its largest |w| by two shuffles, then each rounds
// its own eight values with the group's scale byte: the operations of e2m3_quantize_block (the CPU
// op's), so the same codes. A pair of threads (j even, j + 1) writes its 12 bytes as three aligned
// words (the tile starts on a 16-byte boundary: `packed` is the op's own allocation).
constexpr int kTileThreads = kFp6TileRows * kFp6TileCols / 8;  // 256 chunks per tile
constexpr int kTileChunks = kFp6TileCols / 8;                     // 16-byte chunks per tile row
constexpr unsigned kMaxGridY = 65535;

// The grid of the tile kernels: (tiles of a row tile / kTilesK rounded up, row tiles up to 65535;
// the kernels step past that).
dim3 tile_grid(int64_t n, int64_t k, int tiles_per_cta) {
  const int64_t ktiles = k / kFp6TileCols;
  return dim3(static_cast<unsigned>((ktiles + tiles_per_cta - 1) / tiles_per_cta),
              static_cast<unsigned>(std::min<int64_t>(n / kFp6TileRows, kMaxGridY)));
}

// Chunk c of row `row` (its values x), in tile `tile` of `packed`: codes, scale, rounded values.
MXF_DEV void pack_chunk(const Fp6PackParams& p, const Chunk8& x, int64_t row, int64_t c,
                        int64_t tile, int j, bool vec) {
  const uint8_t sb = scale_from_amax_bits<E2M3>(block_amax(amax_bits32(x)), p.rule);
  uint64_t bits = 0;
  Chunk8 y;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint8_t code = e2m3_quantize(x.v[i], sb);
    bits |= static_cast<uint64_t>(code) << (6 * i);
    y.v[i] = e2m3_dequantize(code, sb);
  }
  if (p.scales != nullptr && j % 4 == 0) p.scales[row * (p.k / kMxBlock) + c / 4] = sb;
  if (p.packed != nullptr) {
    const uint32_t odd_lo = shfl_xor32(static_cast<uint32_t>(bits), 1);  // thread j + 1's bits
    uint32_t* dst = reinterpret_cast<uint32_t*>(p.packed + tile * kFp6TileBytes) + 3 * (j / 2);
    if (j % 2 == 0) {
      dst[0] = static_cast<uint32_t>(bits);
      dst[1] = static_cast<uint32_t>(bits >> 32) | odd_lo << 16;
    } else {
      dst[2] = static_cast<uint32_t>(bits >> 16);
    }
  }
  if (p.rounded != nullptr) {
    store_chunk(static_cast<char*>(p.rounded) + row * p.w_stride * 2, c, p.k, p.dtype, vec, y);
  }
}

template <int kTilesK>
__global__ void __launch_bounds__(kTileThreads) fp6_pack_kernel(const Fp6PackParams p, bool vec) {
  const int j = static_cast<int>(threadIdx.x);
  const int64_t ktiles = p.k / kFp6TileCols;
  const int64_t tk0 = static_cast<int64_t>(blockIdx.x) * kTilesK;
  const int nt = static_cast<int>(std::min<int64_t>(kTilesK, ktiles - tk0));  // tiles left in K
  for (int64_t tn = blockIdx.y; tn < p.n / kFp6TileRows; tn += gridDim.y) {
    const int64_t row = tn * kFp6TileRows + j / 16;
    const char* src = static_cast<const char*>(p.w) + row * p.w_stride * 2;
    const int64_t c0 = tk0 * kTileChunks + j % kTileChunks;  // the thread's chunk of tile tk0
    Chunk8 x[kTilesK];
#pragma unroll
    for (int t = 0; t < kTilesK; ++t) {
      if (t < nt) x[t] = load_chunk(src, c0 + t * kTileChunks, p.k, p.dtype, vec);
    }
#pragma unroll
    for (int t = 0; t < kTilesK; ++t) {
      if (t < nt) pack_chunk(p, x[t], row, c0 + t * kTileChunks, tn * ktiles + tk0 + t, j, vec);
    }
  }
}

// A CTA unpacks kTilesK consecutive tiles of row tile tn (tk0 = kTilesK blockIdx.x; tn =
// blockIdx.y, stepping by gridDim.y past 65535 row tiles), a thread 8 codes of each: chunk
// j = threadIdx.x (0..255) of a tile is its row j / 16, columns 8 (j % 16) .. + 7 of its 128, and its
// codes are the tile's bytes [6j, 6j + 6) (SPEC §4: a row's four groups are 96 consecutive bytes).
// A warp reads 192 consecutive bytes of a tile and writes 256 bytes to each of two rows (bf16 /
// fp16). `packed` starts on a 16-byte boundary (check_packed), so the word loads are aligned.
// Values are e2m3_dequantize's.
template <int kTilesK>
__global__ void __launch_bounds__(kTileThreads) fp6_unpack_kernel(const Fp6UnpackParams p) {
  const int j = static_cast<int>(threadIdx.x);
  const int64_t ktiles = p.k / kFp6TileCols;
  const int64_t tk0 = static_cast<int64_t>(blockIdx.x) * kTilesK;
  const int nt = static_cast<int>(std::min<int64_t>(kTilesK, ktiles - tk0));  // tiles left in K
  const int64_t esz = p.out_dtype == Dtype::kFP32 ? 4 : 2;
  for (int64_t tn = blockIdx.y; tn < p.n / kFp6TileRows; tn += gridDim.y) {
    // Two aligned words from byte 6j rounded down to 4 (6j, or 6j - 2 for odd j); within the tile.
    // The CTA's kTilesK tiles are consecutive in memory; all their loads are issued first.
    const uint8_t* tiles = p.packed + (tn * ktiles + tk0) * kFp6TileBytes + ((6 * j) & ~3);
    const int64_t row = tn * kFp6TileRows + j / 16;
    const uint8_t* srow = p.scales + row * (p.k / kMxBlock) + tk0 * 4 + (j % 16) / 4;
    uint32_t lo[kTilesK] = {}, hi[kTilesK] = {};
    uint8_t sb[kTilesK] = {};
#pragma unroll
    for (int t = 0; t < kTilesK; ++t) {
      if (t < nt) {
        const uint32_t* src = reinterpret_cast<const uint32_t*>(tiles + t * kFp6TileBytes);
        lo[t] = src[0];
        hi[t] = src[1];
        sb[t] = srow[4 * t];
      }
    }
#pragma unroll
    for (int t = 0; t < kTilesK; ++t) {
      if (t < nt) {
        const uint64_t w = (lo[t] | static_cast<uint64_t>(hi[t]) << 32) >> (j % 2 * 16);
        Chunk8 y;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          y.v[i] = e2m3_dequantize(static_cast<uint32_t>(w >> (6 * i)) & 0x3fu, sb[t]);
        }
        store_chunk(static_cast<char*>(p.out) + row * p.k * esz,
                    (tk0 + t) * kTileChunks + j % kTileChunks, p.k, p.out_dtype, true, y);
      }
    }
  }
}

}  // namespace

error_t launch_mxfp6_pack(const Fp6PackParams& p, stream_t stream) {
  const bool vec = p.w_stride % 8 == 0 && aligned16(p.w) && (p.rounded == nullptr || aligned16(p.rounded));
  // Two tiles per CTA (H200, docs/PERF_NOTES.md thirty-seventh session: against one, pack
  // 1.00-1.06x and round_ 1.04-1.09x faster).
  fp6_pack_kernel<2><<<tile_grid(p.n, p.k, 2), kTileThreads, 0, stream>>>(p, vec);
  return last_error();
}

error_t launch_mxfp6_unpack(const Fp6UnpackParams& p, stream_t stream) {
  // Two tiles per CTA for 16-bit outputs, one for fp32 (H200, docs/PERF_NOTES.md: with two tiles
  // bf16 1.18-1.22x faster than with one, fp32 1.25-1.48x slower; four no better than two).
  if (p.out_dtype == Dtype::kFP32) {
    fp6_unpack_kernel<1><<<tile_grid(p.n, p.k, 1), kTileThreads, 0, stream>>>(p);
  } else {
    fp6_unpack_kernel<2><<<tile_grid(p.n, p.k, 2), kTileThreads, 0, stream>>>(p);
  }
  return last_error();
}

// Kernels by activation dtype and x row block (M <= 8: one n8 block; M <= 16: two; up to
// kTiledAboveM = 384: 32 rows per CTA, four; above: the tiled kernel, 128 weight rows x 128 rows of x
// per CTA). MXFUSE_FP6_ROWS_X pins the choice above M = 16: 16 (the M <= 16 kernel once per 16
// rows), 32 or 128 (tiled). The launch shape of the weight (linear_shape) fixes every output's summation
// order in all of them, so they give the same bits (batch invariance, mxfp6_linear.cuh and
// mxfp6_linear_tiled.cuh). H200, M >= 17: 1.15-1.35x faster with 32 rows per CTA than 16
// (docs/PERF_NOTES.md, thirty-second session).
namespace {

// The tiled kernel runs the mma path (NVIDIA sm_80+) only.
bool tiled_linear(const Fp6LinearParams& p) {
#if defined(MXF_CUDA)
  // H200, `off` (docs/PERF_NOTES.md, thirty-third to thirty-fifth sessions): the tiled kernel
  // was faster than the 32-row kernel at M = 1024 on every shape measured; with the straight
  // path (thirty-fourth) 1.11-1.32x at M = 512 on the four shapes, mixed at 384 (0.94-1.34x) and
  // slower below (0.13-0.88x at M = 33 .. 256, before the straight path). With the warp-owned
  // copies (thirty-fifth): 0.95-1.38x at 384, 1.02-1.17x at 448.
  constexpr int64_t kTiledAboveM = 384;
  if (p.force_portable || p.m <= 16) return false;
  return p.rows_x_override == 128 || (p.rows_x_override == 0 && p.m > kTiledAboveM);
#else
  (void)p;
  return false;
#endif
}

error_t launch_linear_kernels(const Fp6LinearParams& p, stream_t stream) {
  const bool bf16 = p.act == Dtype::kBF16;
  if (p.m <= 8) return bf16 ? fp6::linear_bf16_m8(p, stream) : fp6::linear_fp16_m8(p, stream);
  if (p.m <= 16 || p.rows_x_override == 16) {
    return bf16 ? fp6::linear_bf16_m16(p, stream) : fp6::linear_fp16_m16(p, stream);
  }
  if (tiled_linear(p)) return bf16 ? fp6::linear_bf16_tiled(p, stream) : fp6::linear_fp16_tiled(p, stream);
  return bf16 ? fp6::linear_bf16_m32(p, stream) : fp6::linear_fp16_m32(p, stream);
}

std::atomic<int64_t> g_captured_prefetches{0}, g_captured_independent{0};

#if defined(MXF_CUDA)
std::mutex g_linear_kernels_mu;
std::unordered_set<const void*>& linear_kernels() {
  static std::unordered_set<const void*> set;
  return set;
}

bool is_linear_kernel(const void* f) {
  std::lock_guard<std::mutex> lock(g_linear_kernels_mu);
  return linear_kernels().count(f) != 0;
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto a0 = reinterpret_cast<uintptr_t>(a), b0 = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}

// The single node a node (or, for node == nullptr, the launch being captured on `stream`) depends
// on, if that is a kernel node of the MXFP6 linear: its parameters into `prev`. False for anything
// else (not capturing, a join of several nodes, another kernel or a memory node, a failed query).
bool linear_dependency(stream_t stream, cudaGraphNode_t node, cudaGraphNode_t* dep,
                       Fp6LinearParams* prev) {
  const cudaGraphNode_t* deps = nullptr;
  size_t n = 0;
  cudaGraphNode_t two[2] = {};
  if (node == nullptr) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    const cudaGraphEdgeData* edges = nullptr;
    if (cudaStreamGetCaptureInfo(stream, &status, nullptr, nullptr, &deps, &edges, &n) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    if (status != cudaStreamCaptureStatusActive) return false;
  } else {
    // Room for two, so that more than one shows as n == 2; the edges carry data (programmatic
    // ones), which a query without room for it refuses as lossy.
    cudaGraphEdgeData edges[2] = {};
    n = 2;
    if (cudaGraphNodeGetDependencies(node, two, edges, &n) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    deps = two;
  }
  if (n != 1 || deps == nullptr) return false;
  cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
  cudaKernelNodeParams kp = {};
  if (cudaGraphNodeGetType(deps[0], &type) != cudaSuccess || type != cudaGraphNodeTypeKernel ||
      cudaGraphKernelNodeGetParams(deps[0], &kp) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (kp.func == nullptr || !is_linear_kernel(kp.func) || kp.kernelParams == nullptr || kp.kernelParams[0] == nullptr) {
    return false;
  }
  std::memcpy(prev, kp.kernelParams[0], sizeof *prev);
  *dep = deps[0];
  return true;
}

// Linear nodes looked at behind a launch before the check gives up.
constexpr int kMaxChainWalk = 64;

// What the kernels that may still run when a captured launch starts write, as far as the graph
// being captured shows. A linear writes only its output. In modes 1 and 2 it lets its dependents
// start only after its own dependency wait (linear_mma), so every kernel before it has finished and
// flushed by then; in mode 3 it lets them start at its own start. So the kernels that may still run
// are the node the launch depends on and, while the node looked at is a linear in mode 3, the one
// that node depends on.
enum class Early {
  kUnknown,   // not capturing, or the launch does not depend on exactly one linear (a join, another
              // kernel, a memory node, a failed query)
  kWeights,   // one of them writes packed or scales, or beyond a linear in mode 3 the walk
              // could not follow the chain (not one linear, or longer than kMaxChainWalk)
  kX,         // all of them are linears, none writes the weights, one writes x
  kNeither,   // all of them are linears and none writes the weights or x
};
Early captured_writes(const Fp6LinearParams& p, stream_t stream, bool* after_mode3) {
  const size_t packed_bytes = static_cast<size_t>(p.n / kFp6TileRows) * static_cast<size_t>(p.k / kFp6TileCols) *
                              static_cast<size_t>(kFp6TileBytes);
  const size_t scale_bytes = static_cast<size_t>(p.n) * static_cast<size_t>(p.k / kMxBlock);
  const size_t x_bytes =
      (static_cast<size_t>(p.m - 1) * static_cast<size_t>(p.x_stride) + static_cast<size_t>(p.k)) * 2;
  cudaGraphNode_t node = nullptr;
  Fp6LinearParams prev;
  bool x_written = false;
  *after_mode3 = false;
  for (int walked = 0; walked < kMaxChainWalk; ++walked) {
    if (!linear_dependency(stream, node, &node, &prev)) {
      return walked == 0 ? Early::kUnknown : Early::kWeights;
    }
    if (walked == 0) *after_mode3 = prev.pdl == 3;
    const size_t out_bytes = static_cast<size_t>(prev.m) * static_cast<size_t>(prev.n) * 2;
    if (overlaps(prev.out, out_bytes, p.packed, packed_bytes) ||
        overlaps(prev.out, out_bytes, p.scales, scale_bytes)) {
      return Early::kWeights;
    }
    x_written = x_written || overlaps(prev.out, out_bytes, p.x, x_bytes);
    if (prev.pdl != 3) return x_written ? Early::kX : Early::kNeither;
  }
  return Early::kWeights;
}

// The mode of a launch set to `pdl` (1 `on`, 2 `prefetch_weights`) as captured on `stream`:
// - `on` becomes 2 (weights before the wait) where no kernel that may still run writes the
//   weights, and 3 (everything but the bias and the stores before the wait, and the next kernel
//   may start at once) where none writes x either;
// - `prefetch_weights` trusts the caller that the kernel right before does not write the weights,
//   but falls back to 1 where that kernel is a linear in mode 3 and the walk behind it finds
//   another kernel that may still run and write them (or cannot tell).
// Eager launches cannot see what ran before them on the stream, so they keep their setting.
int captured_mode(const Fp6LinearParams& p, stream_t stream) {
  bool after_mode3 = false;
  const Early e = captured_writes(p, stream, &after_mode3);
  if (p.pdl == 2) return after_mode3 && e == Early::kWeights ? 1 : 2;
  return e == Early::kNeither ? 3 : e == Early::kX ? 2 : 1;
}
#endif
}  // namespace

void note_fp6_linear_kernel(const void* kernel) {
#if defined(MXF_CUDA)
  std::lock_guard<std::mutex> lock(g_linear_kernels_mu);
  linear_kernels().insert(kernel);
#else
  (void)kernel;
#endif
}

int64_t fp6_captured_prefetches() { return g_captured_prefetches.load(); }
int64_t fp6_captured_independent() { return g_captured_independent.load(); }

// Mode 1 (`on`) becomes 2 or 3 for this launch where captured_mode() shows that no kernel still
// running can write what it reads early: in a captured chain of linears, each one's weight stream
// then overlaps the previous one's last tiles (2), or, where its x is not written by them either,
// the whole linear runs beside them (3). Mode 2 set by the caller falls back to 1 where a linear in
// mode 3 right before could leave a writer of the weights running. Same bits in every mode.
error_t launch_mxfp6_linear(const Fp6LinearParams& p, stream_t stream) {
#if defined(MXF_CUDA)
  // The tiled kernel runs every call as mode 1 (it reads nothing before its wait) and is not one of
  // the kernels the check recognises, so a linear captured after it stays in mode 1 too.
  if ((p.pdl == 1 || p.pdl == 2) && p.clusters && !p.force_portable && p.m > 0 &&
      p.capture_check_off != 1 && !tiled_linear(p)) {
    const int mode = captured_mode(p, stream);
    if (mode != p.pdl) {
      Fp6LinearParams q = p;
      q.pdl = mode;
      if (mode > 1) g_captured_prefetches.fetch_add(1);
      if (mode == 3) g_captured_independent.fetch_add(1);
      return launch_linear_kernels(q, stream);
    }
  }
#endif
  return launch_linear_kernels(p, stream);
}

// The same kernels and launch shape as mxfp6_linear for this weight, so every qkv value has the
// linear's bits; the prologue and epilogue add the rest of the front (front_prologue/epilogue).
error_t launch_attention_front(const FrontParams& p, stream_t stream) {
  const bool small = p.linear.m <= 8;
  if (p.linear.act == Dtype::kBF16) return small ? fp6::front_bf16_m8(p, stream) : fp6::front_bf16_m16(p, stream);
  return small ? fp6::front_fp16_m8(p, stream) : fp6::front_fp16_m16(p, stream);
}

}  // namespace mxf::kernels
