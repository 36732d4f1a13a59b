// MXFP6 E2M3 weights: pack / unpack / round (one thread per 32-element group), and the dispatch
// of the W6A16 decode linear and the attention front to their kernels (mxfp6_linear.cuh, compiled
// in the mxfp6_{linear,front}_*.cu units: one per activation dtype and x row block).
#include "../core/mxfp6_layout.h"
#include "../core/mx.h"
#include "attention_front.h"
#include "mxfp6.h"
#include "mxfp6_entries.h"
#include "vec.h"

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
error_t launch_mxfp6_linear(const Fp6LinearParams& p, stream_t stream) {
  const bool small = p.m <= 8;
  if (p.act == Dtype::kBF16) return small ? fp6::linear_bf16_m8(p, stream) : fp6::linear_bf16_m16(p, stream);
  return small ? fp6::linear_fp16_m8(p, stream) : fp6::linear_fp16_m16(p, stream);
}

// The same kernels and launch shape as mxfp6_linear for this weight, so every qkv value has the
// linear's bits; the prologue and epilogue add the rest of the front (front_prologue/epilogue).
error_t launch_attention_front(const FrontParams& p, stream_t stream) {
  const bool small = p.linear.m <= 8;
  if (p.linear.act == Dtype::kBF16) return small ? fp6::front_bf16_m8(p, stream) : fp6::front_bf16_m16(p, stream);
  return small ? fp6::front_fp16_m8(p, stream) : fp6::front_fp16_m16(p, stream);
}

}  // namespace mxf::kernels
