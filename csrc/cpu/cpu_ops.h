// CPU implementations over csrc/core: the reference every GPU kernel is tested against.
#pragma once

#include "../core/params.h"

namespace mxf::cpu {

void gemma_norm(const NormParams& p);
void mxfp8_quantize(const QuantParams& p);
void mxfp8_dequantize(const DequantParams& p);

}  // namespace mxf::cpu
