// Torch boundary of the norm + MXFP8 family: checks -> device guard -> current stream -> launch.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <tuple>

#include "../cpu/cpu_ops.h"
#include "checks.h"
#include "debug.h"
#include "dispatch.h"

#include "settings.h"

#ifdef MXF_WITH_GPU
#include "../kernels/device_code.h"
#include "../kernels/norm_mxfp8.h"
#endif

namespace mxf::ops {
namespace {

// Shapes of the MXFP8 outputs of a [..., n] activation: codes [..., n], scales [..., n/32].
std::tuple<at::Tensor, at::Tensor> empty_mxfp8(const at::Tensor& x) {
  auto scale_shape = x.sizes().vec();
  scale_shape.back() /= kMxBlock;
  return {at::empty(x.sizes(), x.options().dtype(at::kFloat8_e4m3fn)),
          at::empty(scale_shape, x.options().dtype(at::kByte))};
}

}  // namespace

#ifdef MXF_WITH_GPU
// Programmatic dependent launch of this family's kernels (docs/DECISIONS.md): on NVIDIA sm_90+
// unless mxfuse.set_pdl("off"). The kernels wait for the previous kernel before they touch memory,
// so the mode changes when they are placed, never what they read or write.
// MXFUSE_NORM_NO_PDL=1 launches them plainly (a benchmark knob, read at each launch).
bool norm_pdl() {
#if defined(USE_ROCM)
  return false;
#else
  if (pdl_mode() == 0) return false;
  const char* v = std::getenv("MXFUSE_NORM_NO_PDL");
  if (v != nullptr && v[0] == '1') return false;
  return kernels::cluster_code_available(at::cuda::getCurrentDeviceProperties()->major);
#endif
}

#endif

namespace {

#ifdef MXF_WITH_GPU
error_t launch_norm(NormParams& p, stream_t stream) {
  // Benchmarks may move the switch to the latency kernel (MXFUSE_NORM_WIDE_MAX_M=rows).
  if (const char* v = std::getenv("MXFUSE_NORM_WIDE_MAX_M")) p.wide_max_m = std::atoll(v);
  p.pdl = norm_pdl();
  return kernels::launch_gemma_norm(p, stream);
}
#endif

void run_norm(NormParams& p, const at::Tensor& x) {
  if (p.m == 0) return;
  MXF_DISPATCH(x, launch_norm(p, stream), cpu::gemma_norm(p));
}

// Checks and launch shared by the four norm ops. Writes y (out) or codes/scales (mx outputs).
void gemma_norm_impl(const char* op, const at::Tensor& x, const std::optional<at::Tensor>& residual,
                     const at::Tensor& weight, double eps, double weight_offset, at::Tensor* y,
                     std::tuple<at::Tensor, at::Tensor>* mx, ScaleRule rule) {
  check_supported_device(op, "x", x);
  check_dtype(op, "x", x, {at::kBFloat16, at::kHalf});
  check_min_dim(op, "x", x, 1);
  const int64_t n = x.size(-1);
  MXF_CHECK(n >= 1, op, ": the last dimension of 'x' must be at least 1, got shape ", x.sizes());
  if (mx != nullptr) check_mx_cols(op, "x", n);
  check_same_device(op, "weight", weight, x, "x");
  check_dtype(op, "weight", weight, {x.scalar_type(), at::kFloat});
  check_dim(op, "weight", weight, 1);
  MXF_CHECK(weight.size(0) == n, op, ": argument 'weight' must have shape [", n,
              "] (the last dimension of 'x'), got ", weight.sizes());
  MXF_CHECK(std::isfinite(eps) && eps >= 0.0, op,
              ": argument 'eps' must be finite and >= 0, got ", eps);
  MXF_CHECK(std::isfinite(weight_offset), op, ": argument 'weight_offset' must be finite, got ",
              weight_offset);
  at::Tensor r2;
  if (residual.has_value()) {
    const at::Tensor& r = *residual;
    check_same_device(op, "residual", r, x, "x");
    MXF_CHECK(r.scalar_type() == x.scalar_type(), op,
                ": argument 'residual' must have the dtype of 'x' (", x.scalar_type(), "), got ",
                r.scalar_type());
    MXF_CHECK(r.sizes() == x.sizes(), op, ": argument 'residual' must have the shape of 'x' (",
                x.sizes(), "), got ", r.sizes());
    r2 = inplace_rows_view(op, "residual", r, n);
    check_disjoint_from(op, "residual", r, {{"x", &x}, {"weight", &weight}});
    check_no_grad(op, "residual", r);
  }

  const at::Tensor x2 = rows_view(x, n);
  const at::Tensor w = weight.contiguous();
  NormParams p;
  p.x = x2.data_ptr();
  p.x_stride = x2.stride(0);
  if (r2.defined()) {
    p.residual = r2.data_ptr();
    p.r_stride = r2.stride(0);
  }
  p.weight = w.data_ptr();
  p.m = x2.size(0);
  p.n = n;
  p.eps = static_cast<float>(eps);
  p.weight_offset = static_cast<float>(weight_offset);
  p.act = to_dtype(x.scalar_type());
  p.wdtype = to_dtype(w.scalar_type());
  p.rule = rule;
  if (y != nullptr) {
    *y = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
    maybe_poison(*y);
    p.y = y->data_ptr();
  } else {
    *mx = empty_mxfp8(x);
    maybe_poison(std::get<0>(*mx));
    maybe_poison(std::get<1>(*mx));
    p.codes = static_cast<uint8_t*>(std::get<0>(*mx).data_ptr());
    p.scales = std::get<1>(*mx).data_ptr<uint8_t>();
  }
  run_norm(p, x);
}

}  // namespace

at::Tensor gemma_rmsnorm(const at::Tensor& x, const at::Tensor& weight, double eps,
                         double weight_offset) {
  at::Tensor y;
  gemma_norm_impl("mxfuse.gemma_rmsnorm", x, std::nullopt, weight, eps, weight_offset, &y,
                  nullptr, ScaleRule::kCeil);
  return y;
}

at::Tensor gemma_fused_add_rmsnorm(const at::Tensor& x, at::Tensor& residual,
                                   const at::Tensor& weight, double eps, double weight_offset) {
  at::Tensor y;
  gemma_norm_impl("mxfuse.gemma_fused_add_rmsnorm", x, residual, weight, eps, weight_offset, &y,
                  nullptr, ScaleRule::kCeil);
  return y;
}

std::tuple<at::Tensor, at::Tensor> gemma_rmsnorm_mxfp8(const at::Tensor& x,
                                                       const at::Tensor& weight, double eps,
                                                       double weight_offset,
                                                       c10::string_view scale_rule) {
  const char* op = "mxfuse.gemma_rmsnorm_mxfp8";
  std::tuple<at::Tensor, at::Tensor> out;
  gemma_norm_impl(op, x, std::nullopt, weight, eps, weight_offset, nullptr, &out,
                  parse_scale_rule(op, scale_rule));
  return out;
}

std::tuple<at::Tensor, at::Tensor> gemma_fused_add_rmsnorm_mxfp8(
    const at::Tensor& x, at::Tensor& residual, const at::Tensor& weight, double eps,
    double weight_offset, c10::string_view scale_rule) {
  const char* op = "mxfuse.gemma_fused_add_rmsnorm_mxfp8";
  std::tuple<at::Tensor, at::Tensor> out;
  gemma_norm_impl(op, x, residual, weight, eps, weight_offset, nullptr, &out,
                  parse_scale_rule(op, scale_rule));
  return out;
}

std::tuple<at::Tensor, at::Tensor> mxfp8_quantize(const at::Tensor& x,
                                                  c10::string_view scale_rule) {
  const char* op = "mxfuse.mxfp8_quantize";
  check_supported_device(op, "x", x);
  check_dtype(op, "x", x, {at::kBFloat16, at::kHalf, at::kFloat});
  check_min_dim(op, "x", x, 1);
  const int64_t n = x.size(-1);
  check_mx_cols(op, "x", n);
  const ScaleRule rule = parse_scale_rule(op, scale_rule);
  auto out = empty_mxfp8(x);
  if (x.numel() == 0) return out;
  maybe_poison(std::get<0>(out));
  maybe_poison(std::get<1>(out));
  const at::Tensor x2 = rows_view(x, n);
  QuantParams p;
  p.x = x2.data_ptr();
  p.x_stride = x2.stride(0);
  p.codes = static_cast<uint8_t*>(std::get<0>(out).data_ptr());
  p.scales = std::get<1>(out).data_ptr<uint8_t>();
  p.m = x2.size(0);
  p.n = n;
  p.act = to_dtype(x.scalar_type());
  p.rule = rule;
  if (p.m == 0 || n == 0) return out;
  MXF_DISPATCH(x, (p.pdl = norm_pdl(), kernels::launch_mxfp8_quantize(p, stream)), cpu::mxfp8_quantize(p));
  return out;
}

at::Tensor mxfp8_dequantize(const at::Tensor& codes, const at::Tensor& scales,
                            at::ScalarType out_dtype) {
  const char* op = "mxfuse.mxfp8_dequantize";
  check_supported_device(op, "codes", codes);
  check_dtype(op, "codes", codes, {at::kFloat8_e4m3fn});
  check_dtype(op, "scales", scales, {at::kByte});
  check_same_device(op, "scales", scales, codes, "codes");
  check_min_dim(op, "codes", codes, 1);
  const int64_t n = codes.size(-1);
  check_mx_cols(op, "codes", n);
  auto expect = codes.sizes().vec();
  expect.back() = n / kMxBlock;
  MXF_CHECK(scales.sizes().vec() == expect, op,
              ": argument 'scales' must have shape ", at::IntArrayRef(expect),
              " (row-major [..., K/32] E8M0 for codes of shape ", codes.sizes(), "), got ",
              scales.sizes());
  MXF_CHECK(out_dtype == at::kBFloat16 || out_dtype == at::kHalf || out_dtype == at::kFloat, op,
              ": argument 'out_dtype' must be BFloat16, Half or Float, got ", out_dtype);
  at::Tensor out = at::empty(codes.sizes(), codes.options().dtype(out_dtype));
  if (codes.numel() == 0) return out;
  maybe_poison(out);
  const at::Tensor c2 = codes.reshape({-1, n}).contiguous();
  const at::Tensor s2 = scales.reshape({-1, n / kMxBlock}).contiguous();
  DequantParams p;
  p.codes = static_cast<const uint8_t*>(c2.data_ptr());
  p.scales = s2.data_ptr<uint8_t>();
  p.out = out.data_ptr();
  p.m = c2.size(0);
  p.n = n;
  p.out_dtype = to_dtype(out_dtype);
  if (p.m == 0 || n == 0) return out;
  MXF_DISPATCH(codes, (p.pdl = norm_pdl(), kernels::launch_mxfp8_dequantize(p, stream)),
               cpu::mxfp8_dequantize(p));
  return out;
}

TORCH_LIBRARY_IMPL(mxfuse, CPU, m) {
  m.impl("gemma_rmsnorm", &gemma_rmsnorm);
  m.impl("gemma_fused_add_rmsnorm", &gemma_fused_add_rmsnorm);
  m.impl("gemma_rmsnorm_mxfp8", &gemma_rmsnorm_mxfp8);
  m.impl("gemma_fused_add_rmsnorm_mxfp8", &gemma_fused_add_rmsnorm_mxfp8);
  m.impl("mxfp8_quantize", &mxfp8_quantize);
  m.impl("mxfp8_dequantize", &mxfp8_dequantize);
}

#ifdef MXF_WITH_GPU
TORCH_LIBRARY_IMPL(mxfuse, CUDA, m) {
  m.impl("gemma_rmsnorm", &gemma_rmsnorm);
  m.impl("gemma_fused_add_rmsnorm", &gemma_fused_add_rmsnorm);
  m.impl("gemma_rmsnorm_mxfp8", &gemma_rmsnorm_mxfp8);
  m.impl("gemma_fused_add_rmsnorm_mxfp8", &gemma_fused_add_rmsnorm_mxfp8);
  m.impl("mxfp8_quantize", &mxfp8_quantize);
  m.impl("mxfp8_dequantize", &mxfp8_dequantize);
}
#endif

}  // namespace mxf::ops
