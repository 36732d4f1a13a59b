// Launchers of the MXFP6 family. Torch-free: params in, error code out, on `stream`.
#pragma once

#include "../core/params.h"
#include "../core/platform.h"

namespace mxf::kernels {

error_t launch_mxfp6_pack(const Fp6PackParams& p, stream_t stream);
error_t launch_mxfp6_unpack(const Fp6UnpackParams& p, stream_t stream);
error_t launch_mxfp6_linear(const Fp6LinearParams& p, stream_t stream);

}  // namespace mxf::kernels
