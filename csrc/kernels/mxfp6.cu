// MXFP6 E2M3 weights: pack / unpack / round (one thread per 32-element group), and the dispatch
// of the W6A16 decode linear and the attention front to their kernels (mxfp6_linear.cuh, compiled
// in the mxfp6_{linear,front}_*.cu units: one per activation dtype and x row block).
#include "../core/mxfp6_layout.h"
#include "../core/mx.h"
#include "attention_front.h"
#include "mxfp6.h"
#include "mxfp6_entries.h"
#include "vec.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_set>

namespace mxf::kernels {
namespace {

constexpr int kThreads = 256;

// ---- pack / round / unpack ----------------------------------------------------------------

// The 32 values a group holds (codes with scale byte sb), stored at `out` as `dtype`.
MXF_DEV void store_group_values(const uint8_t (&codes)[kMxBlock], uint8_t sb, char* out, Dtype dtype,
                                bool vec) {
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    Chunk8 y;
#pragma unroll
    for (int i = 0; i < 8; ++i) y.v[i] = e2m3_dequantize(codes[c * 8 + i], sb);
    store_chunk(out, c, kMxBlock, dtype, vec, y);
  }
}

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
    store_group_values(codes, sb, static_cast<char*>(p.rounded) + (row * p.w_stride + grp * kMxBlock) * esz,
                       p.dtype, vec);
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
  store_group_values(codes, sb, static_cast<char*>(p.out) + (row * p.k + grp * kMxBlock) * esz, p.out_dtype,
                     true);
}

}  // namespace

error_t launch_mxfp6_pack(const Fp6PackParams& p, stream_t stream) {
  const bool vec = p.w_stride % 8 == 0 && aligned16(p.w) && (p.rounded == nullptr || aligned16(p.rounded));
  fp6_pack_kernel<<<blocks_for(p.n * (p.k / kMxBlock), kThreads), kThreads, 0, stream>>>(p, vec);
  return last_error();
}

error_t launch_mxfp6_unpack(const Fp6UnpackParams& p, stream_t stream) {
  fp6_unpack_kernel<<<blocks_for(p.n * (p.k / kMxBlock), kThreads), kThreads, 0, stream>>>(p);
  return last_error();
}

// Kernels by activation dtype and x row block (M <= 8: one n8 block, else two); the launch shape
// inside depends on the weight shape only (batch invariance, mxfp6_linear.cuh).
namespace {
error_t launch_linear_kernels(const Fp6LinearParams& p, stream_t stream) {
  const bool small = p.m <= 8;
  if (p.act == Dtype::kBF16) return small ? fp6::linear_bf16_m8(p, stream) : fp6::linear_bf16_m16(p, stream);
  return small ? fp6::linear_fp16_m8(p, stream) : fp6::linear_fp16_m16(p, stream);
}

std::atomic<int64_t> g_captured_prefetches{0};

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

// True when `stream` is being captured into a graph and the launch would depend on exactly one
// node: a kernel of the MXFP6 linear whose output overlaps neither `packed` nor `scales` of `p`.
// Such a kernel writes nothing else, and it lets its dependents start only after its own
// dependency wait (linear_mma), so every kernel before it has finished and flushed by then: this
// launch may read its weights before its own wait (pdl == 2) without a race. Anything else (not
// capturing, a join of several nodes, another kernel or a memory node, a query that fails) keeps
// mode 1. Eager launches cannot see what ran before them on the stream, so they keep mode 1 too.
bool follows_captured_linear(const Fp6LinearParams& p, stream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* edges = nullptr;
  size_t n = 0;
  if (cudaStreamGetCaptureInfo(stream, &status, nullptr, nullptr, &deps, &edges, &n) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (status != cudaStreamCaptureStatusActive || n != 1 || deps == nullptr) return false;
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
  Fp6LinearParams prev;
  std::memcpy(&prev, kp.kernelParams[0], sizeof prev);
  const size_t out_bytes = static_cast<size_t>(prev.m) * static_cast<size_t>(prev.n) * 2;
  const size_t packed_bytes = static_cast<size_t>(p.n / kFp6TileRows) * static_cast<size_t>(p.k / kFp6TileCols) *
                              static_cast<size_t>(kFp6TileBytes);
  const size_t scale_bytes = static_cast<size_t>(p.n) * static_cast<size_t>(p.k / kMxBlock);
  return !overlaps(prev.out, out_bytes, p.packed, packed_bytes) && !overlaps(prev.out, out_bytes, p.scales, scale_bytes);
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

// Mode 1 (`on`) becomes 2 (`prefetch_weights`) for this launch where follows_captured_linear()
// shows that no kernel still running can write the weights: in a captured chain of linears, each
// one's weight stream then overlaps the previous one's last tiles. Same bits in every mode.
error_t launch_mxfp6_linear(const Fp6LinearParams& p, stream_t stream) {
#if defined(MXF_CUDA)
  if (p.pdl == 1 && p.clusters && !p.force_portable && p.m > 0 && follows_captured_linear(p, stream)) {
    Fp6LinearParams q = p;
    q.pdl = 2;
    g_captured_prefetches.fetch_add(1);
    return launch_linear_kernels(q, stream);
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
