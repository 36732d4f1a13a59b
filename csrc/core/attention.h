// Numerics of the attention front's per-head steps (SPEC §6): NeoX RoPE and the KV-cache encode.
// The CPU ops, the unfused GPU kernels and the fused attention-front kernel all call these.
#pragma once

#include <cstdint>

#include "fp32.h"
#include "half_types.h"
#include "mx.h"

namespace mxf {

// The two halves of a NeoX rotation: each product rounded to fp32 on its own, then the difference
// (sum) in fp32, then one rounding to the activation dtype.
//   lo' = round(lo * c - hi * s),  hi' = round(hi * c + lo * s)
MXF_HD float rope_lo(float lo, float hi, float c, float s, Dtype act) {
  return round_to_dtype(add_rn(mul_rn(lo, c), -mul_rn(hi, s)), act);
}
MXF_HD float rope_hi(float lo, float hi, float c, float s, Dtype act) {
  return round_to_dtype(add_rn(mul_rn(hi, c), mul_rn(lo, s)), act);
}

// One element of an FP8 E4M3 KV cache: e4m3_satfinite(v / scale), IEEE division (RNE), codes
// saturate at +-448, NaN gives 0x7F (vLLM reshape_and_cache_flash with an fp8 cache).
MXF_HD uint8_t kv_cache_e4m3(float v, float scale) { return e4m3_encode(div_rn(v, scale)); }

// A KV-cache row index is usable when 0 <= slot < capacity; slot < 0 marks a padded token.
MXF_HD bool kv_slot_valid(int64_t slot, int64_t capacity) { return slot >= 0 && slot < capacity; }

}  // namespace mxf
