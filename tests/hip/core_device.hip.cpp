// Compile-only check that every csrc/core helper builds as HIP device code (scripts/check_hip.sh),
// so the shared numerics are covered even where no kernel uses a helper yet. Never run.
#include "core/half_types.h"
#include "core/mx.h"
#include "core/mxfp6_layout.h"
#include "core/params.h"
#include "core/platform.h"
#include "core/rmsnorm.h"

namespace {

__global__ void core_device_kernel(const float* in, uint8_t* codes, float* out) {
  const int i = static_cast<int>(threadIdx.x);
  float v = in[i];
  // Lane-group primitives of platform.h.
  v = mxf::add_rn(v, mxf::shfl_down32(v, 1));
  v = mxf::add_rn(v, mxf::shfl_xor32(v, 2));
  v = mxf::add_rn(v, mxf::shfl32(v, 0));
  mxf::sync_lanes();
  // fp32 and 16-bit conversions.
  const uint16_t b = mxf::f32_to_bf16(v), h = mxf::f32_to_fp16(v);
  v = mxf::add_rn(mxf::bf16_to_f32(b), mxf::fp16_to_f32(h));
  v = mxf::add_rn(v, mxf::fp16_to_f32_portable(mxf::f32_to_fp16_portable(v)));
  mxf::store_from_f32(out, i, mxf::Dtype::kFP32, mxf::load_as_f32(in, i, mxf::Dtype::kBF16));
  v = mxf::add_rn(v, mxf::round_to_dtype(v, mxf::Dtype::kFP16));
  const uint32_t pairs = mxf::max_u16x2(mxf::pack2_bf16(v, in[i + 1]), mxf::pack2_fp16(v, in[i + 2]));
  v = mxf::add_rn(v, static_cast<float>(pairs ^ mxf::e4m3_encode2(v, in[i + 3])));
  // MX codecs and scale rules.
  const uint8_t sb = mxf::scale_from_amax_bits<mxf::E4M3>(mxf::abs_bits(v), mxf::ScaleRule::kCeil);
  const uint8_t sb6 = mxf::scale_from_amax_bits<mxf::E2M3>(mxf::max_u32(1u, mxf::abs_bits(v)),
                                                           mxf::ScaleRule::kFloor);
  codes[i] = mxf::e4m3_quantize(v, sb) ^ mxf::e2m3_quantize(v, sb6) ^ mxf::e4m3_encode(v) ^
             mxf::e2m3_encode(v) ^ static_cast<uint8_t>(mxf::encode_portable<mxf::E4M3>(v));
  v = mxf::add_rn(v, mxf::e4m3_dequantize(codes[i], sb) + mxf::e2m3_dequantize(codes[i], sb6));
  v = mxf::add_rn(v, mxf::e4m3_decode(codes[i]) + mxf::e2m3_decode(codes[i]) + mxf::e8m0_to_f32(sb));
  if (i == 0) {
    float block[mxf::kMxBlock];
    for (int j = 0; j < mxf::kMxBlock; ++j) block[j] = in[j];
    codes[64] = mxf::e4m3_quantize_block(block, codes + 128, mxf::ScaleRule::kCeil);
    codes[65] = mxf::e2m3_quantize_block(block, codes + 160, mxf::ScaleRule::kFloor);
    mxf::fp6_pack_group(codes + 160, codes + 192);
    mxf::fp6_unpack_group(codes + 192, codes + 224);
    out[64] = static_cast<float>(mxf::fp6_group_offset(17, 5, 256));
  }
  // Gemma RMSNorm numerics.
  const float total = mxf::sumsq_step(v, v);
  const float rstd = mxf::rstd_from_sumsq(total, 128, 1e-6f);
  out[i] = mxf::add_rn(mxf::norm_value(v, rstd, 1.0f), mxf::sqrt_rn(mxf::div_rn(v, 3.0f)));
  if (!mxf::is_finite_bits(mxf::f2u(out[i]))) out[i] = mxf::u2f(mxf::kF32QNaN) + mxf::pow2f(-127);
}

}  // namespace

// A host entry point, so the kernel is referenced and its launch path is compiled too.
mxf::error_t mxf_core_device_check(const float* in, uint8_t* codes, float* out, mxf::stream_t s) {
  core_device_kernel<<<1, 64, 0, s>>>(in, codes, out);
  return mxf::last_error();
}
