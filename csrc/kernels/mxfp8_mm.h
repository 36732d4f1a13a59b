// Launcher of the MXFP8 x MXFP8 GEMM. Torch-free: params in, error code out, on `stream`.
#pragma once

#include "../core/params.h"
#include "../core/platform.h"

namespace mxf::kernels {

// Shared memory per CTA the tensor-core kernel may take (16 warps' cp.async rings): the host runs
// it only where the device allows that much (sm_90 and its successors with 228 KB per SM).
constexpr int kFp8MmTcMaxSmemBytes = 16 * 4 * 16 * 160;

error_t launch_mxfp8_scaled_mm(const Fp8MmParams& p, stream_t stream);

}  // namespace mxf::kernels
