// Device steps of the attention front shared by the unfused kernels (attention_front.cu) and the
// fused kernel (mxfp6.cu): coherent loads, RoPE of one head row and the KV-cache stores. Every
// formula is csrc/core's, so fused and unfused give the same bits.
#pragma once

#include "../core/attention.h"
#include "../core/params.h"

namespace mxf::kernels {

// Loads that bypass the (non-coherent) L1 cache: data other CTAs of the same kernel wrote.
MXF_DEV float load_coherent(const void* base, int64_t i, Dtype d) {
  if (d == Dtype::kFP32) return *(static_cast<const volatile float*>(base) + i);
  const uint16_t b = *(static_cast<const volatile uint16_t*>(base) + i);
  return d == Dtype::kBF16 ? bf16_to_f32(b) : fp16_to_f32(b);
}

// Eight 16-bit values (16 bytes at p, 16-byte aligned) that other CTAs of the same kernel wrote:
// one load cached in L2 only (CUDA), or four volatile words (HIP, as load_coherent).
MXF_DEV uint4 load_coherent16(const void* p) {
#if defined(MXF_CUDA)
  return __ldcg(static_cast<const uint4*>(p));
#else
  const volatile uint32_t* w = static_cast<const volatile uint32_t*>(p);
  return make_uint4(w[0], w[1], w[2], w[3]);
#endif
}

// Element i of one head row `v` (d values, already normed and rounded, in shared memory) after
// NeoX RoPE at position `pos`, rounded to act. A position outside the cache gives NaN (the GPU
// cannot report it without a host sync; the CPU ops reject it).
MXF_DEV float rope_value(const float* v, int64_t i, int64_t pos, const RopeParams& rp, Dtype act) {
  if (pos < 0 || pos >= rp.max_pos) return u2f(kF32QNaN);
  if (i >= rp.rotary_dim) return v[i];
  const int64_t h = rp.rotary_dim / 2, j = i < h ? i : i - h;
  const float c = load_as_f32(rp.cos_sin, pos * rp.rotary_dim + j, rp.cs_dtype);
  const float s = load_as_f32(rp.cos_sin, pos * rp.rotary_dim + h + j, rp.cs_dtype);
  return i < h ? rope_lo(v[j], v[j + h], c, s, act) : rope_hi(v[j], v[j + h], c, s, act);
}

// One cache row element: e4m3 of v / scale, or v in the activation dtype.
MXF_DEV void cache_store(void* cache, int64_t i, float v, const float* scale, bool fp8, Dtype act) {
  if (fp8) {
    static_cast<uint8_t*>(cache)[i] = kv_cache_e4m3(v, *scale);
  } else {
    store_from_f32(cache, i, act, v);
  }
}

}  // namespace mxf::kernels
