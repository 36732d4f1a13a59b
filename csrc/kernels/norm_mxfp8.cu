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
#include "arch.h"
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

// Canonical total of 32 lane values in every lane: a butterfly (xor) gives lane 0 the same sums
// as the shuffle-down tree (each step adds the same two values, and IEEE addition commutes), and
// every other lane the same bits as lane 0, so code that uses it stays warp-uniform.
MXF_DEV float lane_total(float v) {
#pragma unroll
  for (int d = 16; d >= 1; d >>= 1) v = add_rn(v, shfl_xor32(v, d));
  return v;
}

// The row's rstd from the canonical total of its lane partials (every thread of the CTA calls
// it). kOnce (many rows, where all warps of an SM reach this point together and issue slots
// are the limit): one warp per row adds the tree's top and computes rstd (two correctly rounded
// divisions and a square root, about 40 dependent instructions, all its lanes alike) and the
// other warps only read it. Otherwise (few rows, latency-bound) that warp publishes the total
// and every warp computes rstd itself, which measured up to 0.1 us faster at one row. (A runtime
// switch between the two, instead of two kernels, cost the fused kernel that 0.1 us anyway.)
template <int kT, bool kOnce>
MXF_DEV float row_rstd(float partial, float* red, float* shared, int64_t n, float eps) {
  const int tx = threadIdx.x % kT, ty = threadIdx.x / kT;
  red[threadIdx.x] = partial;
  __syncthreads();
  if (tx < 32) {
    const float total = lane_total(tree_top<kT>(red + ty * kT, tx));
    const float v = kOnce ? rstd_from_sumsq(total, n, eps) : total;
    if (tx == 0) shared[ty] = v;
  }
  __syncthreads();
  return kOnce ? shared[ty] : rstd_from_sumsq(shared[ty], n, eps);
}

// Codes of one chunk of exact values y in a block with scale byte sb; the block's first chunk
// also stores the scale.
MXF_DEV void encode_store(const Chunk8& y, uint8_t sb, uint8_t* codes_row, uint8_t* scales_row,
                          int64_t c) {
  uint32_t lo = kE4M3NaN * 0x01010101u, hi = lo;  // a block with NaN or Inf: all codes NaN
  if (sb != kE8M0NaN) {
    const float inv = pow2f(127 - static_cast<int>(sb));
    lo = e4m3_encode2(mul_rn(y.v[0], inv), mul_rn(y.v[1], inv)) |
         (e4m3_encode2(mul_rn(y.v[2], inv), mul_rn(y.v[3], inv)) << 16);
    hi = e4m3_encode2(mul_rn(y.v[4], inv), mul_rn(y.v[5], inv)) |
         (e4m3_encode2(mul_rn(y.v[6], inv), mul_rn(y.v[7], inv)) << 16);
  }
  *reinterpret_cast<uint2*>(codes_row + c * 8) = make_uint2(lo, hi);
  if ((c & 3) == 0) scales_row[c / 4] = sb;
}

MXF_DEV void quantize_chunk_store(const Chunk8& y, uint32_t amax, bool valid, uint8_t* codes_row,
                                  uint8_t* scales_row, int64_t c, ScaleRule rule) {
  amax = block_amax(amax);
  if (valid) encode_store(y, scale_from_amax_bits<E4M3>(amax, rule), codes_row, scales_row, c);
}

// kC > 0: each thread keeps its kC chunks of s in registers. kC == 0: any N; s is re-read.
// Values travel as packed 16-bit pairs; every rounding to the dtype is one packed conversion.
template <Dtype kAct, int kT, int kC, bool kMx, bool kOnce>
__global__ void __launch_bounds__(kThreads) gemma_norm_kernel(const NormParams p, bool vec) {
  constexpr int kRows = kThreads / kT;
  __shared__ float red[kThreads];
  __shared__ float row_vals[kRows];  // each row's rstd (kOnce) or total (see row_rstd)
  dependent_launch_start();
  const int tx = threadIdx.x % kT;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRows + threadIdx.x / kT;
  const bool active = row < p.m;
  const int64_t n = p.n, chunks = (n + 7) / 8;
  // Chunk slots per thread: a constant on the register path, the same for every thread otherwise.
  const int nslots = kC > 0 ? kC : static_cast<int>((chunks + kT - 1) / kT);
  const bool add = p.residual != nullptr;
  const void* x_row = static_cast<const uint16_t*>(p.x) + (active ? row * p.x_stride : 0);
  void* r_row = add ? static_cast<uint16_t*>(p.residual) + (active ? row * p.r_stride : 0) : nullptr;

  // Register path: every load of the thread (x, residual, weight for all its chunks) is issued
  // before the first use, so one memory round trip covers the row.
  constexpr int kKeep = kC > 0 ? kC : 1;
  RawChunk xr[kKeep], rr[kKeep], wr[kKeep];
  uint4 s[kKeep];
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
  for (int j = 0; j < nslots; ++j) {  // a constant trip count on the register path: unrolled
    const int64_t c = tx + static_cast<int64_t>(kT) * j;
    if (!active || c >= chunks) continue;
    const int jj = kC > 0 ? j : 0;
    uint4 sp = kC > 0 ? xr[jj].lo : load_raw(x_row, c, n, kAct, vec).lo;
    if (add) {
      Chunk8 v = widen8(sp, kAct);
      const Chunk8 r = widen8(kC > 0 ? rr[jj].lo : load_raw(r_row, c, n, kAct, vec).lo, kAct);
#pragma unroll
      for (int i = 0; i < 8; ++i) v.v[i] = add_rn(v.v[i], r.v[i]);
      sp = narrow8(v, kAct);
      store_packed(r_row, c, n, vec, sp);
    }
    const Chunk8 v = widen8(sp, kAct);
#pragma unroll
    for (int i = 0; i < 8; ++i) partial = sumsq_step(partial, v.v[i]);
    s[jj] = sp;
  }
  const float rstd = row_rstd<kT, kOnce>(partial, red, row_vals, n, p.eps);

  uint8_t* codes_row = kMx && active ? p.codes + row * n : nullptr;
  uint8_t* scales_row = kMx && active ? p.scales + row * (n / kMxBlock) : nullptr;
  void* y_row = !kMx && active ? static_cast<uint16_t*>(p.y) + row * n : nullptr;
  // Slots go through each stage together (register path: all of them at once), so the block
  // amax shuffles and conversions of different chunks overlap instead of queueing.
  for (int j0 = 0; j0 < nslots; j0 += kKeep) {
    uint4 yp[kKeep];
    bool valid[kKeep];
#pragma unroll
    for (int jj = 0; jj < kKeep; ++jj) {
      const int j = j0 + jj;
      const int64_t c = tx + static_cast<int64_t>(kT) * j;
      valid[jj] = active && j < nslots && c < chunks;
      yp[jj] = make_uint4(0, 0, 0, 0);
      if (valid[jj]) {
        // Generic path: s is re-read from what this thread wrote to the residual (or from x).
        const Chunk8 sv = widen8(kC > 0 ? s[jj] : load_raw(add ? r_row : x_row, c, n, kAct, vec).lo, kAct);
        const Chunk8 w = unpack(kC > 0 ? wr[jj] : load_raw(p.weight, c, n, p.wdtype, vec), p.wdtype);
        Chunk8 y;
#pragma unroll
        for (int i = 0; i < 8; ++i) y.v[i] = norm_value(sv.v[i], rstd, add_rn(w.v[i], p.weight_offset));
        yp[jj] = narrow8(y, kAct);
      }
    }
    if constexpr (kMx) {
      uint32_t amax[kKeep];
#pragma unroll
      for (int jj = 0; jj < kKeep; ++jj) amax[jj] = block_amax(amax_bits16(yp[jj], kAct));
#pragma unroll
      for (int jj = 0; jj < kKeep; ++jj) {
        if (valid[jj]) {
          encode_store(widen8(yp[jj], kAct), scale_from_amax_bits<E4M3>(amax[jj], p.rule), codes_row,
                       scales_row, tx + static_cast<int64_t>(kT) * (j0 + jj));
        }
      }
    } else {
#pragma unroll
      for (int jj = 0; jj < kKeep; ++jj) {
        if (valid[jj]) store_packed(y_row, tx + static_cast<int64_t>(kT) * (j0 + jj), n, vec, yp[jj]);
      }
    }
  }
}

// Latency variant for few rows: one row per CTA and one chunk per thread (256 lanes x kS slots),
// so no thread works through several chunks in turn. Lane l's canonical partial still adds its
// chunks l, l+256, ... in order: slot j > 0 hands its rounded squares to lane l through shared
// memory, and lane l does the additions.
template <Dtype kAct, int kS, bool kMx>
__global__ void __launch_bounds__(kThreads * kS) gemma_norm_wide_kernel(const NormParams p, bool vec) {
  __shared__ float sq[(kS - 1) * 8 * kThreads];  // [slot-1][element][lane]
  __shared__ float red[kThreads];
  __shared__ float totals[1];
  dependent_launch_start();
  const int t = threadIdx.x, lane = t % kThreads, slot = t / kThreads;
  const int64_t row = blockIdx.x, n = p.n, chunks = (n + 7) / 8, c = t;
  const bool valid = c < chunks;
  const bool add = p.residual != nullptr;
  const void* x_row = static_cast<const uint16_t*>(p.x) + row * p.x_stride;
  void* r_row = add ? static_cast<uint16_t*>(p.residual) + row * p.r_stride : nullptr;
  RawChunk xr{}, rr{}, wr{};
  if (valid) {
    xr = load_raw(x_row, c, n, kAct, vec);
    if (add) rr = load_raw(r_row, c, n, kAct, vec);
    wr = load_raw(p.weight, c, n, p.wdtype, vec);
  }
  uint4 sp = xr.lo;
  if (add && valid) {
    Chunk8 v = widen8(sp, kAct);
    const Chunk8 r = widen8(rr.lo, kAct);
#pragma unroll
    for (int i = 0; i < 8; ++i) v.v[i] = add_rn(v.v[i], r.v[i]);
    sp = narrow8(v, kAct);
    store_packed(r_row, c, n, vec, sp);
  }
  const Chunk8 sv = widen8(sp, kAct);  // +0 where the chunk is missing
  float sqr[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) sqr[i] = mul_rn(sv.v[i], sv.v[i]);
  if (slot > 0) {
#pragma unroll
    for (int i = 0; i < 8; ++i) sq[((slot - 1) * 8 + i) * kThreads + lane] = sqr[i];
  }
  __syncthreads();
  if (slot == 0) {
    float partial = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) partial = add_rn(partial, sqr[i]);
#pragma unroll
    for (int j = 1; j < kS; ++j) {
#pragma unroll
      for (int i = 0; i < 8; ++i) partial = add_rn(partial, sq[((j - 1) * 8 + i) * kThreads + lane]);
    }
    red[lane] = partial;
  }
  __syncthreads();
  if (t < 32) {
    const float total = lane_total(tree_top<kThreads>(red, t));
    if (t == 0) totals[0] = total;
  }
  __syncthreads();
  const float rstd = rstd_from_sumsq(totals[0], n, p.eps);  // latency kernel: see row_rstd
  uint4 yp = make_uint4(0, 0, 0, 0);
  if (valid) {
    const Chunk8 w = unpack(wr, p.wdtype);
    Chunk8 y;
#pragma unroll
    for (int i = 0; i < 8; ++i) y.v[i] = norm_value(sv.v[i], rstd, add_rn(w.v[i], p.weight_offset));
    yp = narrow8(y, kAct);
  }
  if constexpr (kMx) {
    quantize_chunk_store(widen8(yp, kAct), amax_bits16(yp, kAct), valid, p.codes + row * n,
                         p.scales + row * (n / kMxBlock), c, p.rule);
  } else {
    if (valid) store_packed(static_cast<uint16_t*>(p.y) + row * n, c, n, vec, yp);
  }
}

// A launch of one of this file's kernels (no dynamic shared memory): with the programmatic-
// dependent-launch attribute when `pdl` (the host sets it only on sm_90+ NVIDIA devices; every
// kernel here starts with dependent_launch_start()), plainly otherwise.
template <typename... Params, typename... Args>
error_t launch_kernel(void (*kernel)(Params...), unsigned grid, unsigned block, bool pdl, stream_t stream,
                      Args&&... args) {
#if !defined(MXF_HIP)
  if (pdl) return launch_ex(kernel, dim3(grid), dim3(block), 0, stream, 1, true, std::forward<Args>(args)...);
#else
  (void)pdl;  // no programmatic dependent launch on HIP
#endif
  kernel<<<grid, block, 0, stream>>>(std::forward<Args>(args)...);
  return last_error();
}

template <Dtype kAct, bool kMx>
error_t launch_norm_typed(const NormParams& p, bool vec, stream_t stream) {
  const int64_t chunks = (p.n + 7) / 8;
  if (p.m <= p.wide_max_m && chunks > 256 && chunks <= 1024) {
    const unsigned grid = static_cast<unsigned>(p.m);
    if (chunks <= 512) return launch_kernel(gemma_norm_wide_kernel<kAct, 2, kMx>, grid, 2 * kThreads, p.pdl, stream, p, vec);
    if (chunks <= 768) return launch_kernel(gemma_norm_wide_kernel<kAct, 3, kMx>, grid, 3 * kThreads, p.pdl, stream, p, vec);
    return launch_kernel(gemma_norm_wide_kernel<kAct, 4, kMx>, grid, 4 * kThreads, p.pdl, stream, p, vec);
  }
  const auto grid = [&](int kt) { return static_cast<unsigned>((p.m + kThreads / kt - 1) / (kThreads / kt)); };
  // Few rows (latency-bound) take the kernel where every warp computes rstd (see row_rstd).
  const bool once = p.m > p.wide_max_m;
#define MXF_LAUNCH(KT, KC)                                                                                \
  return once ? launch_kernel(gemma_norm_kernel<kAct, KT, KC, kMx, true>, grid(KT), kThreads, p.pdl, stream, p, vec) \
              : launch_kernel(gemma_norm_kernel<kAct, KT, KC, kMx, false>, grid(KT), kThreads, p.pdl, stream, p, vec)
  if (chunks <= 32) MXF_LAUNCH(32, 1);
  if (chunks <= 64) MXF_LAUNCH(64, 1);
  if (chunks <= 128) MXF_LAUNCH(128, 1);
  if (chunks <= 256) MXF_LAUNCH(256, 1);
  if (chunks <= 512) MXF_LAUNCH(256, 2);
  if (chunks <= 768) MXF_LAUNCH(256, 3);
  if (chunks <= 1024) MXF_LAUNCH(256, 4);
  if (chunks <= 2048) MXF_LAUNCH(256, 8);
  MXF_LAUNCH(256, 0);
#undef MXF_LAUNCH
}

// One chunk of 8 per thread; a 32-element block is 4 consecutive threads of one row.
__global__ void __launch_bounds__(kThreads) mxfp8_quantize_kernel(const QuantParams p, bool vec) {
  dependent_launch_start();
  const int64_t cpr = p.n / 8;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const bool valid = g < p.m * cpr;
  const int64_t row = valid ? g / cpr : 0, c = valid ? g % cpr : 0;
  const size_t esz = p.act == Dtype::kFP32 ? 4 : 2;
  RawChunk raw{};
  if (valid) raw = load_raw(static_cast<const char*>(p.x) + row * p.x_stride * esz, c, p.n, p.act, vec);
  const Chunk8 v = unpack(raw, p.act);
  const uint32_t amax = p.act == Dtype::kFP32 ? amax_bits32(v) : amax_bits16(raw.lo, p.act);
  quantize_chunk_store(v, amax, valid, p.codes + row * p.n, p.scales + row * (p.n / kMxBlock), c, p.rule);
}

__global__ void __launch_bounds__(kThreads) mxfp8_dequantize_kernel(const DequantParams p,
                                                                    bool aligned) {
  dependent_launch_start();
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
  return launch_kernel(mxfp8_quantize_kernel, blocks_for(p.m * (p.n / 8), kThreads), kThreads, p.pdl, stream, p, vec);
}

error_t launch_mxfp8_dequantize(const DequantParams& p, stream_t stream) {
  return launch_kernel(mxfp8_dequantize_kernel, blocks_for(p.m * (p.n / 8), kThreads), kThreads, p.pdl, stream, p,
                       (reinterpret_cast<uintptr_t>(p.codes) & 7u) == 0);
}

}  // namespace mxf::kernels
