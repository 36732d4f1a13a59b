// Entries of the MXFP6 linear and attention-front kernels, one per activation dtype and x row
// block (m8: M <= 8, one n8 block of x rows; m16: M <= 16 per CTA, two; m32, the linear above
// M = 16: 32 rows per CTA, four; tiled, the linear at larger M: 64 weight rows x 64 rows of x per
// CTA). Each is defined in its own translation unit (mxfp6_{linear,front}_{bf16,fp16}_m{8,16,32}.cu
// from mxfp6_linear.cuh, mxfp6_linear_{bf16,fp16}_tiled.cu from mxfp6_linear_tiled.cuh), so that a
// parallel build compiles them at once; launch_mxfp6_linear and launch_attention_front pick one.
#pragma once

#include "../core/params.h"
#include "../core/platform.h"
#include "attention_front.h"

namespace mxf::kernels::fp6 {

error_t linear_bf16_m8(const Fp6LinearParams& p, stream_t stream);
error_t linear_bf16_m16(const Fp6LinearParams& p, stream_t stream);
error_t linear_fp16_m8(const Fp6LinearParams& p, stream_t stream);
error_t linear_fp16_m16(const Fp6LinearParams& p, stream_t stream);
error_t linear_bf16_m32(const Fp6LinearParams& p, stream_t stream);
error_t linear_fp16_m32(const Fp6LinearParams& p, stream_t stream);
error_t linear_bf16_tiled(const Fp6LinearParams& p, stream_t stream);
error_t linear_fp16_tiled(const Fp6LinearParams& p, stream_t stream);
error_t front_bf16_m8(const FrontParams& p, stream_t stream);
error_t front_bf16_m16(const FrontParams& p, stream_t stream);
error_t front_fp16_m8(const FrontParams& p, stream_t stream);
error_t front_fp16_m16(const FrontParams& p, stream_t stream);

}  // namespace mxf::kernels::fp6
