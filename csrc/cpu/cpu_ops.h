// CPU implementations over csrc/core: the reference every GPU kernel is tested against.
#pragma once

#include "../core/params.h"

namespace mxf::cpu {

void gemma_norm(const NormParams& p);
void mxfp8_quantize(const QuantParams& p);
void mxfp8_dequantize(const DequantParams& p);

}  // namespace mxf::cpu

namespace mxf::cpu {

void mxfp6_pack(const Fp6PackParams& p);
void mxfp6_unpack(const Fp6UnpackParams& p);
void mxfp6_linear(const Fp6LinearParams& p);

}  // namespace mxf::cpu

namespace mxf::cpu {

void mxfp8_scaled_mm(const Fp8MmParams& p);

}  // namespace mxf::cpu

namespace mxf::cpu {

void rope_neox(const RopeParams& p);
void kv_cache_write(const KvCacheParams& p);
void qk_norm_rope_cache(const FrontPostParams& p);
void attention_front(const FrontParams& p);

}  // namespace mxf::cpu
