// Launcher of the MXFP8 x MXFP8 GEMM. Torch-free: params in, error code out, on `stream`.
#pragma once

#include "../core/params.h"
#include "../core/platform.h"

namespace mxf::kernels {

error_t launch_mxfp8_scaled_mm(const Fp8MmParams& p, stream_t stream);

}  // namespace mxf::kernels
