// Launchers of the MXFP6 family. Torch-free: params in, error code out, on `stream`.
#pragma once

#include "../core/params.h"
#include "../core/platform.h"

namespace mxf::kernels {

error_t launch_mxfp6_pack(const Fp6PackParams& p, stream_t stream);
error_t launch_mxfp6_unpack(const Fp6UnpackParams& p, stream_t stream);
error_t launch_mxfp6_linear(const Fp6LinearParams& p, stream_t stream);

// The capture check of launch_mxfp6_linear (mxfp6.cu): the linear's kernels note their host stubs
// at their first launch, so that a captured graph node can be recognised as one of them.
void note_fp6_linear_kernel(const void* kernel);
// Launches of mxfp6_linear in mode 1 (`on`) whose weight stream started before the dependency
// wait because no captured kernel that may still run then writes their weights (modes 2 and 3),
// and those of them that ran whole before the wait because none writes their x either (mode 3);
// tests.
int64_t fp6_captured_prefetches();
int64_t fp6_captured_independent();

}  // namespace mxf::kernels
