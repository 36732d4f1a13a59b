// CPU attention front (SPEC §6): RoPE, the KV-cache write, the post-projection steps
// (qk_norm_rope_cache) and the fused op as their composition with the CPU norm and linear, step by
// step exactly as the unfused ops run.
#include <ATen/Parallel.h>

#include <vector>

#include "../core/attention.h"
#include "cpu_ops.h"

namespace mxf::cpu {

void rope_neox(const RopeParams& p) {
  const int64_t h = p.rotary_dim / 2;
  at::parallel_for(0, p.m, 1, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t pos = p.positions[row];
      for (int64_t hd = 0; hd < p.heads; ++hd) {
        const int64_t xo = row * p.x_stride + hd * p.d, oo = (row * p.heads + hd) * p.d;
        for (int64_t i = 0; i < h; ++i) {
          const float c = load_as_f32(p.cos_sin, pos * p.rotary_dim + i, p.cs_dtype);
          const float s = load_as_f32(p.cos_sin, pos * p.rotary_dim + h + i, p.cs_dtype);
          const float lo = load_as_f32(p.x, xo + i, p.act), hi = load_as_f32(p.x, xo + h + i, p.act);
          store_from_f32(p.out, oo + i, p.act, rope_lo(lo, hi, c, s, p.act));
          store_from_f32(p.out, oo + h + i, p.act, rope_hi(lo, hi, c, s, p.act));
        }
        for (int64_t i = p.rotary_dim; i < p.d; ++i) {
          store_from_f32(p.out, oo + i, p.act, load_as_f32(p.x, xo + i, p.act));
        }
      }
    }
  });
}

void kv_cache_write(const KvCacheParams& p) {
  const int64_t row_elems = p.kv_heads * p.d;
  const Dtype cache_dtype = p.act;
  for (int64_t row = 0; row < p.m; ++row) {
    const int64_t slot = p.slot_mapping[row];
    if (!kv_slot_valid(slot, p.slots)) continue;  // padded token (the op rejects slots >= capacity)
    for (int kv = 0; kv < 2; ++kv) {
      const void* src = kv == 0 ? p.key : p.value;
      const int64_t stride = kv == 0 ? p.k_stride : p.v_stride;
      void* cache = kv == 0 ? p.key_cache : p.value_cache;
      for (int64_t j = 0; j < row_elems; ++j) {
        const float v = load_as_f32(src, row * stride + j, p.act);
        if (p.fp8) {
          const float scale = *(kv == 0 ? p.k_scale : p.v_scale);
          static_cast<uint8_t*>(cache)[slot * row_elems + j] = kv_cache_e4m3(v, scale);
        } else {
          store_from_f32(cache, slot * row_elems + j, cache_dtype, v);
        }
      }
    }
  }
}

void qk_norm_rope_cache(const FrontPostParams& p) {
  const int64_t m = p.m, d = p.d;
  const int64_t q_stride = (p.output_gate ? 2 : 1) * d;  // between q heads in a qkv row
  const int64_t k_off = p.q_heads * q_stride, v_off = k_off + p.kv_heads * d;
  const Dtype act = p.act;
  // q and k heads: Gemma RMSNorm per head, rounded; then RoPE.
  const auto elem = static_cast<int64_t>(sizeof(uint16_t));
  std::vector<uint16_t> qn(static_cast<size_t>(m * p.q_heads * d)), kn(static_cast<size_t>(m * p.kv_heads * d));
  std::vector<uint16_t> kr(kn.size());
  const auto* qkv = static_cast<const uint8_t*>(p.qkv);
  for (int64_t row = 0; row < m; ++row) {
    for (int which = 0; which < 2; ++which) {
      const int64_t heads = which == 0 ? p.q_heads : p.kv_heads;
      NormParams hp;
      hp.x = qkv + (row * p.qkv_stride + (which == 0 ? 0 : k_off)) * elem;
      hp.x_stride = which == 0 ? q_stride : d;
      hp.weight = which == 0 ? p.q_norm_weight : p.k_norm_weight;
      hp.wdtype = which == 0 ? p.q_wdtype : p.k_wdtype;
      hp.y = (which == 0 ? qn.data() : kn.data()) + row * heads * d;
      hp.m = heads;
      hp.n = d;
      hp.eps = p.eps;
      hp.weight_offset = p.weight_offset;
      hp.act = act;
      gemma_norm(hp);
    }
  }
  RopeParams rp = p.rope;
  rp.m = m;
  rp.d = d;
  rp.act = act;
  rp.heads = p.q_heads;
  rp.x = qn.data();
  rp.x_stride = p.q_heads * d;
  rp.out = p.q;
  rope_neox(rp);
  rp.heads = p.kv_heads;
  rp.x = kn.data();
  rp.x_stride = p.kv_heads * d;
  rp.out = kr.data();
  rope_neox(rp);
  // The raw gate heads: their 16-bit values (a NaN keeps its payload, as a tensor copy does).
  if (p.output_gate) {
    const auto* from = static_cast<const uint16_t*>(p.qkv);
    auto* to = static_cast<uint16_t*>(p.gate);
    for (int64_t row = 0; row < m; ++row) {
      for (int64_t hd = 0; hd < p.q_heads; ++hd) {
        for (int64_t i = 0; i < d; ++i) {
          to[(row * p.q_heads + hd) * d + i] = from[row * p.qkv_stride + hd * q_stride + d + i];
        }
      }
    }
  }
  // k (normed, roped) and v (raw) into the caches.
  KvCacheParams cp = p.cache;
  cp.m = m;
  cp.d = d;
  cp.kv_heads = p.kv_heads;
  cp.act = act;
  cp.key = kr.data();
  cp.k_stride = p.kv_heads * d;
  cp.value = qkv + v_off * elem;
  cp.v_stride = p.qkv_stride;
  kv_cache_write(cp);
}

void attention_front(const FrontParams& p) {
  const int64_t m = p.linear.m;
  const Dtype act = p.linear.act;

  // 1. residual <- round(x + residual); y = input norm of it (into the linear's x).
  NormParams np;
  np.x = p.x;
  np.x_stride = p.x_stride;
  np.residual = p.residual;
  np.r_stride = p.r_stride;
  np.weight = p.norm_weight;
  np.wdtype = p.wdtype;
  np.y = const_cast<void*>(p.linear.x);
  np.m = m;
  np.n = p.linear.k;
  np.eps = p.eps;
  np.weight_offset = p.weight_offset;
  np.act = act;
  gemma_norm(np);
  // 2. qkv = y @ W6^T, rounded.
  mxfp6_linear(p.linear);
  // 3-5. q/k norms and RoPE, the gate heads, the cache write (qk_norm_rope_cache).
  FrontPostParams pp;
  pp.qkv = p.linear.out;
  pp.m = m;
  pp.n = p.linear.n;
  pp.qkv_stride = p.linear.n;
  pp.q_norm_weight = p.q_norm_weight;
  pp.k_norm_weight = p.k_norm_weight;
  pp.q = p.q;
  pp.gate = p.gate;
  pp.rope = p.rope;
  pp.cache = p.cache;
  pp.q_heads = p.q_heads;
  pp.kv_heads = p.kv_heads;
  pp.d = p.d;
  pp.output_gate = p.output_gate;
  pp.eps = p.eps;
  pp.weight_offset = p.weight_offset;
  pp.act = act;
  pp.q_wdtype = p.q_wdtype;
  pp.k_wdtype = p.k_wdtype;
  qk_norm_rope_cache(pp);
}

}  // namespace mxf::cpu
