// Torch boundary of the MXFP8 x MXFP8 GEMM: checks -> device guard -> current stream -> launch.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>
#include <string>

#include "../cpu/cpu_ops.h"
#include "checks.h"
#include "debug.h"

#ifdef MXF_WITH_GPU
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "../kernels/mxfp8_mm.h"
#endif

namespace mxf::ops {
namespace {

// Weight rows per b_scale row: "1x32" blocks (one scale per row and 32 columns) or "32x32".
int parse_b_scale_layout(const char* op, c10::string_view layout) {
  if (layout == "1x32") return 1;
  if (layout == "32x32") return kMxBlock;
  MXF_CHECK(false, op, ": argument 'b_scale_layout' must be '1x32' (b_scale [N, K/32]) or '32x32' "
            "(b_scale [N/32, K/32]), got '", std::string(layout), "'");
}

void check_e4m3_matrix(const char* op, const char* arg, const at::Tensor& t) {
  check_dtype(op, arg, t, {at::kFloat8_e4m3fn});
  check_dim(op, arg, t, 2);
}

void check_scale(const char* op, const char* arg, const at::Tensor& t, int64_t rows, int64_t cols,
                 const char* what) {
  check_dtype(op, arg, t, {at::kByte});
  MXF_CHECK(t.dim() == 2 && t.size(0) == rows && t.size(1) == cols, op, ": argument '", arg,
            "' must have shape [", rows, ", ", cols, "] (", what, ", E8M0), got ", t.sizes());
}

void check_contiguous(const char* op, const char* arg, const at::Tensor& t) {
  MXF_CHECK(t.is_contiguous(), op, ": argument '", arg,
            "' must be contiguous (row-major), got shape ", t.sizes(), " and strides ", t.strides());
}

}  // namespace

at::Tensor mxfp8_scaled_mm(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                           const at::Tensor& b_scale, at::ScalarType out_dtype,
                           const std::optional<at::Tensor>& bias, c10::string_view b_scale_layout) {
  const char* op = "mxfuse.mxfp8_scaled_mm";
  check_supported_device(op, "a", a);
  check_e4m3_matrix(op, "a", a);
  const int64_t m = a.size(0), k = a.size(1);
  check_mx_cols(op, "a", k);
  check_same_device(op, "a_scale", a_scale, a, "a");
  check_scale(op, "a_scale", a_scale, m, k / kMxBlock, "[M, K/32], one scale per row and 32 columns");
  check_same_device(op, "b", b, a, "a");
  check_e4m3_matrix(op, "b", b);
  MXF_CHECK(b.size(1) == k, op, ": argument 'b' must have shape [N, K] with K = ", k,
            " (the last dimension of 'a', shape ", a.sizes(), "), got ", b.sizes());
  const int64_t n = b.size(0);
  const int rows = parse_b_scale_layout(op, b_scale_layout);
  MXF_CHECK(n % rows == 0, op, ": b_scale_layout '32x32' needs N (dim 0 of 'b') divisible by 32, got ",
            b.sizes());
  check_same_device(op, "b_scale", b_scale, a, "a");
  check_scale(op, "b_scale", b_scale, n / rows, k / kMxBlock,
              rows == 1 ? "[N, K/32] for b_scale_layout '1x32'" : "[N/32, K/32] for b_scale_layout '32x32'");
  check_contiguous(op, "b", b);
  check_contiguous(op, "b_scale", b_scale);
  // The GPU kernel reads weight blocks as 16-byte pieces; a misaligned weight view is an error
  // (never a silent copy of the weight).
  MXF_CHECK(reinterpret_cast<uintptr_t>(b.data_ptr()) % 16 == 0, op,
            ": argument 'b' must start on a 16-byte boundary, got a view at address offset ",
            reinterpret_cast<uintptr_t>(b.data_ptr()) % 16);
  MXF_CHECK(out_dtype == at::kBFloat16 || out_dtype == at::kHalf || out_dtype == at::kFloat, op,
            ": argument 'out_dtype' must be BFloat16, Half or Float, got ", out_dtype);
  if (bias.has_value()) {
    check_same_device(op, "bias", *bias, a, "a");
    if (out_dtype == at::kFloat) {
      check_dtype(op, "bias", *bias, {at::kFloat});
    } else {
      check_dtype(op, "bias", *bias, {out_dtype, at::kFloat});
    }
    MXF_CHECK(bias->dim() == 1 && bias->size(0) == n, op, ": argument 'bias' must have shape [", n,
              "], got ", bias->sizes());
  }
  at::Tensor out = at::empty({m, n}, a.options().dtype(out_dtype));
  if (m == 0 || n == 0) return out;
  maybe_poison(out);
  // The activation side is small: a strided or misaligned a (read as 4-byte words) or a strided
  // a_scale is copied, never the weight.
  at::Tensor a2 = a.contiguous();
  if (reinterpret_cast<uintptr_t>(a2.data_ptr()) % 16 != 0) a2 = a2.clone();
  const at::Tensor as2 = a_scale.contiguous();
  const at::Tensor bias2 = bias.has_value() ? bias->contiguous() : at::Tensor();
  Fp8MmParams p;
  p.a = static_cast<const uint8_t*>(a2.data_ptr());
  p.a_scale = as2.data_ptr<uint8_t>();
  p.b = static_cast<const uint8_t*>(b.data_ptr());
  p.b_scale = b_scale.data_ptr<uint8_t>();
  p.bias = bias2.defined() ? bias2.data_ptr() : nullptr;
  p.bias_dtype = bias2.defined() ? to_dtype(bias2.scalar_type()) : Dtype::kFP32;
  p.out = out.data_ptr();
  p.m = m;
  p.n = n;
  p.k = k;
  p.b_scale_rows = rows;
  p.out_dtype = to_dtype(out_dtype);
#ifdef MXF_WITH_GPU
  if (a.is_cuda()) {
    const c10::cuda::OptionalCUDAGuard guard(a.device());
    C10_CUDA_CHECK(kernels::launch_mxfp8_scaled_mm(p, at::cuda::getCurrentCUDAStream()));
    return out;
  }
#endif
  cpu::mxfp8_scaled_mm(p);
  return out;
}

TORCH_LIBRARY_IMPL(mxfuse, CPU, m) { m.impl("mxfp8_scaled_mm", &mxfp8_scaled_mm); }

#ifdef MXF_WITH_GPU
TORCH_LIBRARY_IMPL(mxfuse, CUDA, m) { m.impl("mxfp8_scaled_mm", &mxfp8_scaled_mm); }
#endif

}  // namespace mxf::ops
