// Shared by the ops that stream MXFP6 weights (mxfp6_linear, attention_front, attention_front_split).
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <tuple>

#include "../core/params.h"

namespace mxf::ops {

// The ops' own functions (norm_mxfp8.cpp, mxfp6.cpp), for attention_front_split to call without
// the dispatcher.
at::Tensor gemma_fused_add_rmsnorm(const at::Tensor& x, at::Tensor& residual, const at::Tensor& weight,
                                   double eps, double weight_offset);
at::Tensor mxfp6_linear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                        const std::optional<at::Tensor>& bias);

// Checks packed [N/16, K/128, 1536] and scales [N, K/32]; returns (N, K).
std::tuple<int64_t, int64_t> check_packed(const char* op, const at::Tensor& packed, const at::Tensor& scales);

#ifdef MXF_WITH_GPU
// The device fields of a linear launch on the current device (SM count, clusters, launch mode,
// shared memory), and the test/benchmark overrides from the environment.
void set_linear_device(Fp6LinearParams& p);
#endif

}  // namespace mxf::ops
