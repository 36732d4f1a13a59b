// The attention front's unfused GPU steps: NeoX RoPE, the KV-cache write, and the steps after the
// qkv projection in one launch (qk_norm_rope_cache). The fused kernel
// is the MXFP6 linear with a prologue and an epilogue (mxfp6.cu); both use front_steps.h.
#include "attention_front.h"

#include <mutex>

#include "../core/rmsnorm.h"
#include "arch.h"
#include "front_steps.h"
#include "vec.h"

namespace mxf::kernels {
namespace {

constexpr int kThreads = 128;

// One CTA per (token, head): the head row into shared memory, then rotated into out.
__global__ void __launch_bounds__(kThreads) rope_neox_kernel(const RopeParams p) {
  extern __shared__ float row[];  // [d]
  const int64_t m = blockIdx.x / p.heads, hd = blockIdx.x % p.heads;
  const int64_t xo = m * p.x_stride + hd * p.d;
  for (int64_t i = threadIdx.x; i < p.d; i += blockDim.x) row[i] = load_as_f32(p.x, xo + i, p.act);
  __syncthreads();
  const int64_t pos = p.positions[m], oo = (m * p.heads + hd) * p.d;
  for (int64_t i = threadIdx.x; i < p.d; i += blockDim.x) {
    store_from_f32(p.out, oo + i, p.act, rope_value(row, i, pos, p, p.act));
  }
}

// One CTA per token: key and value rows into the caches at the token's slot.
__global__ void __launch_bounds__(kThreads) kv_cache_write_kernel(const KvCacheParams p) {
  const int64_t m = blockIdx.x, slot = p.slot_mapping[m], row = p.kv_heads * p.d;
  if (!kv_slot_valid(slot, p.slots)) return;
  for (int64_t j = threadIdx.x; j < row; j += blockDim.x) {
    cache_store(p.key_cache, slot * row + j, load_as_f32(p.key, m * p.k_stride + j, p.act), p.k_scale,
                p.fp8, p.act);
    cache_store(p.value_cache, slot * row + j, load_as_f32(p.value, m * p.v_stride + j, p.act),
                p.v_scale, p.fp8, p.act);
  }
}


// qk_norm_rope_cache: one CTA per (token, head segment of the qkv row). A q or k head is normed in
// the canonical order of csrc/core/rmsnorm.h (as gemma_rmsnorm, so the same bits), rounded, then
// rotated (q to its output, k to the cache); a gate head is copied out; a v head goes to the cache.
__global__ void __launch_bounds__(kThreads) qk_norm_rope_cache_kernel(const FrontPostParams p) {
  dependent_launch_start();
  extern __shared__ float hv[];  // [d]: the head row, then its normed values
  __shared__ float red[kVirtualLanes];
  const int64_t d = p.d, segs = p.n / d;
  const int64_t m = blockIdx.x / segs, sg = blockIdx.x % segs;
  const Dtype act = p.act;
  const int64_t q_segs = p.q_heads * (p.output_gate ? 2 : 1), row_elems = p.kv_heads * d;
  const bool is_q = sg < q_segs && !(p.output_gate && sg % 2 == 1);
  const bool is_gate = sg < q_segs && !is_q;
  const bool is_k = sg >= q_segs && sg < q_segs + p.kv_heads;
  const int64_t src = m * p.qkv_stride + sg * d;
  const int threads = static_cast<int>(blockDim.x);
  if (!is_q && !is_k) {  // copies: a gate head, or a v head into the cache
    if (is_gate) {  // the raw 16-bit values (a NaN keeps its payload, as a tensor copy does)
      const uint16_t* from = static_cast<const uint16_t*>(p.qkv) + src;
      uint16_t* to = static_cast<uint16_t*>(p.gate) + (m * p.q_heads + sg / 2) * d;
      for (int64_t i = threadIdx.x; i < d; i += threads) to[i] = from[i];
      return;
    }
    const int64_t slot = p.cache.slot_mapping[m];
    if (!kv_slot_valid(slot, p.cache.slots)) return;
    for (int64_t i = threadIdx.x; i < d; i += threads) {
      cache_store(p.cache.value_cache, slot * row_elems + (sg - q_segs - p.kv_heads) * d + i,
                  load_as_f32(p.qkv, src + i, act), p.cache.v_scale, p.cache.fp8, act);
    }
    return;
  }
  for (int64_t i = threadIdx.x; i < d; i += threads) hv[i] = load_as_f32(p.qkv, src + i, act);
  __syncthreads();
  // Lane partials over chunks l, l + kVirtualLanes, ..., then the tree (csrc/core/rmsnorm.h).
  const int64_t chunks = (d + kChunk - 1) / kChunk;
  for (int l = threadIdx.x; l < kVirtualLanes; l += threads) {
    float acc = 0.0f;
    for (int64_t c = l; c < chunks; c += kVirtualLanes) {
      const int64_t e_end = (c + 1) * kChunk < d ? (c + 1) * kChunk : d;
      for (int64_t e = c * kChunk; e < e_end; ++e) acc = sumsq_step(acc, hv[e]);
    }
    red[l] = acc;
  }
  __syncthreads();
  for (int h = kVirtualLanes / 2; h >= 1; h >>= 1) {
    for (int l = threadIdx.x; l < h; l += threads) red[l] = add_rn(red[l], red[l + h]);
    __syncthreads();
  }
  const float rstd = rstd_from_sumsq(red[0], d, p.eps);
  const void* w = is_q ? p.q_norm_weight : p.k_norm_weight;
  const Dtype wd = is_q ? p.q_wdtype : p.k_wdtype;
  for (int64_t i = threadIdx.x; i < d; i += threads) {
    hv[i] = round_to_dtype(norm_value(hv[i], rstd, add_rn(load_as_f32(w, i, wd), p.weight_offset)), act);
  }
  __syncthreads();
  const int64_t pos = p.rope.positions[m];
  if (is_q) {
    const int64_t head = p.output_gate ? sg / 2 : sg;
    for (int64_t i = threadIdx.x; i < d; i += threads) {
      store_from_f32(p.q, (m * p.q_heads + head) * d + i, act, rope_value(hv, i, pos, p.rope, act));
    }
    return;
  }
  const int64_t slot = p.cache.slot_mapping[m];
  if (!kv_slot_valid(slot, p.cache.slots)) return;
  for (int64_t i = threadIdx.x; i < d; i += threads) {
    cache_store(p.cache.key_cache, slot * row_elems + (sg - q_segs) * d + i, rope_value(hv, i, pos, p.rope, act),
                p.cache.k_scale, p.cache.fp8, act);
  }
}

}  // namespace

error_t launch_rope_neox(const RopeParams& p, stream_t stream) {
  const int smem = static_cast<int>(p.d * sizeof(float));
  // The cap is per kernel and smem follows the head size: set and launch under one lock, so another
  // host thread's smaller setting cannot come in between (as in the MXFP6 linear's launch).
  static std::mutex launch_mu;
  std::lock_guard<std::mutex> lock(launch_mu);
  if (smem > 48 * 1024) {
    const error_t e = set_max_dynamic_smem(rope_neox_kernel, smem);
    if (e != kSuccess) return e;
  }
  rope_neox_kernel<<<static_cast<unsigned>(p.m * p.heads), kThreads, smem, stream>>>(p);
  return last_error();
}

error_t launch_kv_cache_write(const KvCacheParams& p, stream_t stream) {
  kv_cache_write_kernel<<<static_cast<unsigned>(p.m), kThreads, 0, stream>>>(p);
  return last_error();
}

error_t launch_qk_norm_rope_cache(const FrontPostParams& p, stream_t stream) {
  const int smem = static_cast<int>(p.d * sizeof(float));
  const auto grid = static_cast<unsigned>(p.m * (p.n / p.d));
  static std::mutex launch_mu;  // as launch_rope_neox
  std::lock_guard<std::mutex> lock(launch_mu);
  if (smem > 48 * 1024) {
    const error_t e = set_max_dynamic_smem(qk_norm_rope_cache_kernel, smem);
    if (e != kSuccess) return e;
  }
#if !defined(MXF_HIP)
  // The kernel starts with dependent_launch_start(): it waits for the previous kernel first.
  if (p.pdl) return launch_ex(qk_norm_rope_cache_kernel, dim3(grid), dim3(kThreads), smem, stream, 1, true, p);
#endif
  qk_norm_rope_cache_kernel<<<grid, kThreads, smem, stream>>>(p);
  return last_error();
}

}  // namespace mxf::kernels
