// Launchers of the norm + MXFP8 family. Torch-free: params in, error code out, on `stream`.
#pragma once

#include "../core/params.h"
#include "../core/platform.h"

namespace mxf::kernels {

error_t launch_gemma_norm(const NormParams& p, stream_t stream);
error_t launch_mxfp8_quantize(const QuantParams& p, stream_t stream);
error_t launch_mxfp8_dequantize(const DequantParams& p, stream_t stream);

}  // namespace mxf::kernels
