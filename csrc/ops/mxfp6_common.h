// Shared by the ops that stream MXFP6 weights (mxfp6_linear, attention_front).
#pragma once

#include <ATen/ATen.h>

#include <tuple>

#include "../core/params.h"

namespace mxf::ops {

// Checks packed [N/16, K/128, 1536] and scales [N, K/32]; returns (N, K).
std::tuple<int64_t, int64_t> check_packed(const char* op, const at::Tensor& packed, const at::Tensor& scales);

#ifdef MXF_WITH_GPU
// The device fields of a linear launch on the current device (SM count, clusters, launch mode,
// shared memory), and the test/benchmark overrides from the environment.
void set_linear_device(Fp6LinearParams& p);
#endif

}  // namespace mxf::ops
