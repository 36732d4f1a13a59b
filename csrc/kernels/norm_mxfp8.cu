// Gemma (fused add) RMSNorm with optional MXFP8 quantization, and stand-alone MXFP8 (de)quantize.
//
// Mapping onto SPEC §3: a row is handled by kT threads (32..256, a power of two). Thread t is
// virtual lane t of the canonical tree and owns chunks t, t+256, ... (kT = 256) or only chunk t
// (kT < 256, when the row has at most kT chunks): lanes kT..255 then hold +0 and the tree steps
// with d >= kT change nothing. Steps 32 <= d < kT run from shared memory, d < 32 as 32-lane
// shuffles, so a 64-wide wavefront computes the same tree. A block of 32 elements is 4
// consecutive chunks = 4 consecutive threads, which share the block amax by two xor-shuffles.
#include "../core/mx.h"
#include "../core/rmsnorm.h"
#include "norm_mxfp8.h"
#include "vec.h"

namespace mxf::kernels {
namespace {

constexpr int kThreads = 256;

// Value at index i < 32 after the tree steps d = kT/2 ... 32 over red[0, kT).
template <int kT>
MXF_DEV float tree_top(const float* red, int i) {
  constexpr int kV = kT / 32;
  float v[kV];
#pragma unroll
  for (int k = 0; k < kV; ++k) v[k] = red[i + 32 * k];
#pragma unroll
  for (int d = kV / 2; d >= 1; d /= 2) {
#pragma unroll
    for (int k = 0; k < d; ++k) v[k] = add_rn(v[k], v[k + d]);
  }
  return v[0];
}

// Canonical total of a row's lane partials (every thread of the CTA calls it).
template <int kT>
MXF_DEV float row_total(float partial, float* red, float* totals) {
  const int tx = threadIdx.x % kT, ty = threadIdx.x / kT;
  red[threadIdx.x] = partial;
  __syncthreads();
  if (tx < 32) {
    float v = tree_top<kT>(red + ty * kT, tx);
#pragma unroll
    for (int d = 16; d >= 1; d >>= 1) v = add_rn(v, shfl_down32(v, d));
    if (tx == 0) totals[ty] = v;
  }
  __syncthreads();
  return totals[ty];
}

// Quantize one chunk of y (its 4-thread block shares the amax) and store codes and scale.
MXF_DEV void quantize_chunk_store(const Chunk8& y, bool valid, uint8_t* codes_row,
                                  uint8_t* scales_row, int64_t c, ScaleRule rule) {
  uint32_t amax = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = max_u32(amax, abs_bits(y.v[i]));
  amax = max_u32(amax, shfl_xor32(amax, 1));
  amax = max_u32(amax, shfl_xor32(amax, 2));
  if (!valid) return;
  const uint8_t sb = scale_from_amax_bits<E4M3>(amax, rule);
  uint32_t lo = 0, hi = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    lo |= static_cast<uint32_t>(e4m3_quantize(y.v[i], sb)) << (8 * i);
    hi |= static_cast<uint32_t>(e4m3_quantize(y.v[4 + i], sb)) << (8 * i);
  }
  *reinterpret_cast<uint2*>(codes_row + c * 8) = make_uint2(lo, hi);
  if ((c & 3) == 0) scales_row[c / 4] = sb;
}

// kC > 0: each thread keeps its kC chunks of s in registers. kC == 0: any N; s is re-read.
template <Dtype kAct, int kT, int kC, bool kMx>
__global__ void __launch_bounds__(kThreads) gemma_norm_kernel(const NormParams p, bool vec) {
  constexpr int kRows = kThreads / kT;
  __shared__ float red[kThreads];
  __shared__ float totals[kRows];
  const int tx = threadIdx.x % kT;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRows + threadIdx.x / kT;
  const bool active = row < p.m;
  const int64_t n = p.n, chunks = (n + 7) / 8;
  // Chunk slots per thread: a constant on the register path, the same for every thread otherwise.
  const int nslots = kC > 0 ? kC : static_cast<int>((chunks + kT - 1) / kT);
  const bool add = p.residual != nullptr;
  const size_t esz = kAct == Dtype::kFP32 ? 4 : 2;
  const void* x_row = static_cast<const char*>(p.x) + (active ? row * p.x_stride * esz : 0);
  void* r_row = add ? static_cast<char*>(p.residual) + (active ? row * p.r_stride * esz : 0) : nullptr;

  // Register path: every load of the thread (x, residual, weight for all its chunks) is issued
  // before the first use, so one memory round trip covers the row.
  constexpr int kKeep = kC > 0 ? kC : 1;
  RawChunk xr[kKeep], rr[kKeep], wr[kKeep];
  Chunk8 s[kKeep];
  if constexpr (kC > 0) {
#pragma unroll
    for (int j = 0; j < kC; ++j) {
      const int64_t c = tx + static_cast<int64_t>(kT) * j;
      if (active && c < chunks) {
        xr[j] = load_raw(x_row, c, n, kAct, vec);
        if (add) rr[j] = load_raw(r_row, c, n, kAct, vec);
        wr[j] = load_raw(p.weight, c, n, p.wdtype, vec);
      }
    }
  }

  float partial = 0.0f;
#pragma unroll
  for (int j = 0; j < nslots; ++j) {
    const int64_t c = tx + static_cast<int64_t>(kT) * j;
    if (!active || c >= chunks) continue;
    const int jj = kC > 0 ? j : 0;
    Chunk8 v = unpack(kC > 0 ? xr[jj] : load_raw(x_row, c, n, kAct, vec), kAct);
    if (add) {
      const Chunk8 r = unpack(kC > 0 ? rr[jj] : load_raw(r_row, c, n, kAct, vec), kAct);
#pragma unroll
      for (int i = 0; i < 8; ++i) v.v[i] = round_to_dtype(add_rn(v.v[i], r.v[i]), kAct);
      store_chunk(r_row, c, n, kAct, vec, v);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) partial = sumsq_step(partial, v.v[i]);
    s[jj] = v;
  }
  const float rstd = rstd_from_sumsq(row_total<kT>(partial, red, totals), n, p.eps);

  uint8_t* codes_row = kMx && active ? p.codes + row * n : nullptr;
  uint8_t* scales_row = kMx && active ? p.scales + row * (n / kMxBlock) : nullptr;
  void* y_row = !kMx && active ? static_cast<char*>(p.y) + row * n * esz : nullptr;
#pragma unroll
  for (int j = 0; j < nslots; ++j) {
    const int64_t c = tx + static_cast<int64_t>(kT) * j;
    const bool valid = active && c < chunks;
    const int jj = kC > 0 ? j : 0;
    Chunk8 y{};
    if (valid) {
      // Generic path: s is re-read from what this thread wrote to the residual (or from x).
      const Chunk8 sv = kC > 0 ? s[jj] : load_chunk(add ? r_row : x_row, c, n, kAct, vec);
      const Chunk8 w = unpack(kC > 0 ? wr[jj] : load_raw(p.weight, c, n, p.wdtype, vec), p.wdtype);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        y.v[i] = round_to_dtype(norm_value(sv.v[i], rstd, add_rn(w.v[i], p.weight_offset)), kAct);
      }
    }
    if constexpr (kMx) {
      quantize_chunk_store(y, valid, codes_row, scales_row, c, p.rule);
    } else {
      if (valid) store_chunk(y_row, c, n, kAct, vec, y);
    }
  }
}

template <Dtype kAct, bool kMx>
error_t launch_norm_typed(const NormParams& p, bool vec, stream_t stream) {
  const int64_t chunks = (p.n + 7) / 8;
  const auto grid = [&](int kt) { return static_cast<unsigned>((p.m + kThreads / kt - 1) / (kThreads / kt)); };
#define MXF_LAUNCH(KT, KC) \
  gemma_norm_kernel<kAct, KT, KC, kMx><<<grid(KT), kThreads, 0, stream>>>(p, vec)
  if (chunks <= 32) MXF_LAUNCH(32, 1);
  else if (chunks <= 64) MXF_LAUNCH(64, 1);
  else if (chunks <= 128) MXF_LAUNCH(128, 1);
  else if (chunks <= 256) MXF_LAUNCH(256, 1);
  else if (chunks <= 512) MXF_LAUNCH(256, 2);
  else if (chunks <= 768) MXF_LAUNCH(256, 3);
  else if (chunks <= 1024) MXF_LAUNCH(256, 4);
  else if (chunks <= 2048) MXF_LAUNCH(256, 8);
  else MXF_LAUNCH(256, 0);
#undef MXF_LAUNCH
  return last_error();
}

// One chunk of 8 per thread; a 32-element block is 4 consecutive threads of one row.
__global__ void __launch_bounds__(kThreads) mxfp8_quantize_kernel(const QuantParams p, bool vec) {
  const int64_t cpr = p.n / 8;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const bool valid = g < p.m * cpr;
  const int64_t row = valid ? g / cpr : 0, c = valid ? g % cpr : 0;
  const size_t esz = p.act == Dtype::kFP32 ? 4 : 2;
  Chunk8 v{};
  if (valid) v = load_chunk(static_cast<const char*>(p.x) + row * p.x_stride * esz, c, p.n, p.act, vec);
  quantize_chunk_store(v, valid, p.codes + row * p.n, p.scales + row * (p.n / kMxBlock), c, p.rule);
}

__global__ void __launch_bounds__(kThreads) mxfp8_dequantize_kernel(const DequantParams p,
                                                                    bool aligned) {
  const int64_t cpr = p.n / 8;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (g >= p.m * cpr) return;
  const int64_t row = g / cpr, c = g % cpr;
  const uint8_t* src = p.codes + row * p.n + c * 8;
  uint2 q;
  if (aligned) {
    q = *reinterpret_cast<const uint2*>(src);
  } else {
    q.x = src[0] | (src[1] << 8) | (src[2] << 16) | (static_cast<uint32_t>(src[3]) << 24);
    q.y = src[4] | (src[5] << 8) | (src[6] << 16) | (static_cast<uint32_t>(src[7]) << 24);
  }
  const uint8_t sb = p.scales[row * (p.n / kMxBlock) + c / 4];
  Chunk8 y;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    y.v[i] = e4m3_dequantize(static_cast<uint8_t>(q.x >> (8 * i)), sb);
    y.v[4 + i] = e4m3_dequantize(static_cast<uint8_t>(q.y >> (8 * i)), sb);
  }
  const size_t esz = p.out_dtype == Dtype::kFP32 ? 4 : 2;
  store_chunk(static_cast<char*>(p.out) + row * p.n * esz, c, p.n, p.out_dtype, true, y);
}

unsigned blocks_for(int64_t items) { return static_cast<unsigned>((items + kThreads - 1) / kThreads); }

}  // namespace

error_t launch_gemma_norm(const NormParams& p, stream_t stream) {
  // 16-byte vectors need whole aligned chunks in every row of every tensor touched.
  const int64_t wsz = p.wdtype == Dtype::kFP32 ? 4 : 2;
  const bool vec = p.n % 8 == 0 && p.x_stride % 8 == 0 && aligned16(p.x) && aligned16(p.weight) &&
                   (p.residual == nullptr || (p.r_stride % 8 == 0 && aligned16(p.residual))) &&
                   (p.y == nullptr || aligned16(p.y)) && (p.n * wsz) % 16 == 0;
  const bool mx = p.codes != nullptr;
  if (p.act == Dtype::kBF16) {
    return mx ? launch_norm_typed<Dtype::kBF16, true>(p, vec, stream)
              : launch_norm_typed<Dtype::kBF16, false>(p, vec, stream);
  }
  return mx ? launch_norm_typed<Dtype::kFP16, true>(p, vec, stream)
            : launch_norm_typed<Dtype::kFP16, false>(p, vec, stream);
}

error_t launch_mxfp8_quantize(const QuantParams& p, stream_t stream) {
  const bool vec = p.x_stride % 8 == 0 && aligned16(p.x);
  mxfp8_quantize_kernel<<<blocks_for(p.m * (p.n / 8)), kThreads, 0, stream>>>(p, vec);
  return last_error();
}

error_t launch_mxfp8_dequantize(const DequantParams& p, stream_t stream) {
  mxfp8_dequantize_kernel<<<blocks_for(p.m * (p.n / 8)), kThreads, 0, stream>>>(
      p, (reinterpret_cast<uintptr_t>(p.codes) & 7u) == 0);
  return last_error();
}

}  // namespace mxf::kernels
