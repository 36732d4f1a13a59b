// The attention front's unfused GPU steps: NeoX RoPE and the KV-cache write. The fused kernel
// is the MXFP6 linear with a prologue and an epilogue (mxfp6.cu); both use front_steps.h.
#include "attention_front.h"

#include <mutex>

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

}  // namespace mxf::kernels
