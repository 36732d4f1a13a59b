// Torch boundary of the MXFP8 x MXFP8 GEMM: checks -> device guard -> current stream -> launch.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <atomic>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>

#include "../cpu/cpu_ops.h"
#include "checks.h"
#include "debug.h"
#include "dispatch.h"
#include "settings.h"

#ifdef MXF_WITH_GPU
#include "../kernels/device_code.h"
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

// The GPU kernel of mxfp8_scaled_mm: 0 the exact kernel (default), 1 the tensor-core kernel where
// it runs (NVIDIA sm_89+). Set by mxfuse._set_fp8_mm_kernel; the first read without it takes
// MXFUSE_FP8_MM=exact|tensor_cores from the environment (else exact) and keeps it.
std::atomic<int> g_fp8_mm{-1};

}  // namespace

void set_fp8_mm_kernel(int64_t mode) {
  MXF_CHECK(mode == 0 || mode == 1,
            "mxfuse._set_fp8_mm_kernel: argument 'mode' must be 0 (exact) or 1 (tensor_cores), got ", mode);
  g_fp8_mm.store(static_cast<int>(mode));
}

#if defined(MXF_WITH_GPU) && !defined(USE_ROCM)
// A launch setting read at each launch for tests and benchmarks: `var` unset, empty or "0" gives 0
// (the heuristic); otherwise it must be one of `allowed` (spelled `names` in the error).
int env_choice(const char* var, std::initializer_list<const char*> allowed, const char* names) {
  const char* e = std::getenv(var);
  const std::string v = e != nullptr ? e : "";
  if (v.empty() || v == "0") return 0;
  for (const char* a : allowed) {
    if (v == a) return std::stoi(v);
  }
  MXF_CHECK(false, "mxfuse: environment variable ", var, " must be ", names, ", got '", v, "'");
  return 0;
}
#endif

int64_t fp8_mm_kernel() {
  return process_setting(g_fp8_mm, "MXFUSE_FP8_MM", 0, [](const std::string& e) {
    MXF_CHECK(e == "exact" || e == "tensor_cores",
              "mxfuse: environment variable MXFUSE_FP8_MM must be 'exact' or 'tensor_cores', got '", e, "'");
    return e == "tensor_cores" ? 1 : 0;
  });
}

#ifdef MXF_WITH_GPU
// The GPU kernel's choice and launch settings for the current device (under the op's guard).
void set_mm_device([[maybe_unused]] Fp8MmParams& p) {
#if !defined(USE_ROCM)
  const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
  p.num_sms = prop->multiProcessorCount;
  // The tensor-core kernel: sm_89+ with room for its rings (kFp8MmTcMaxSmemBytes per CTA), grid
  // rows (N / 16) within the grid's y limit; else the exact kernel. The kernels' code must be
  // sm_89+ too (FP8 mma; sm_90+ for clusters), not only the device: an older build JIT-compiled
  // on a newer GPU has neither (kernels::device_code_arch).
  const int code_arch = kernels::device_code_arch();
  p.tensor_cores = fp8_mm_kernel() == 1 && prop->major * 10 + prop->minor >= 89 && code_arch >= 89 &&
                   prop->sharedMemPerBlockOptin >= static_cast<size_t>(kernels::kFp8MmTcMaxSmemBytes) &&
                   (p.n + 15) / 16 <= 65535 && (p.m + 7) / 8 <= 0x7fffffff;
  // Tests and benchmarks may pin the tensor-core kernel's K split (unset, empty or 0: the
  // heuristic; anything else is an error) and its split of an output tile over a cluster (same
  // bits).
  p.tc_warps_override = env_choice("MXFUSE_FP8_TC_WARPS", {"1", "2", "4", "8", "16"}, "1, 2, 4, 8 or 16");
  p.tc_split_override = env_choice("MXFUSE_FP8_TC_SPLIT", {"1", "2", "4"}, "1, 2 or 4");
  p.clusters = kernels::cluster_code_available(prop->major);
  p.scale_words = (p.k / kMxBlock) % 4 == 0 && reinterpret_cast<uintptr_t>(p.a_scale) % 4 == 0 &&
                  reinterpret_cast<uintptr_t>(p.b_scale) % 4 == 0;
#endif
}
#endif

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
  MXF_DISPATCH(a, (set_mm_device(p), kernels::launch_mxfp8_scaled_mm(p, stream)),
               cpu::mxfp8_scaled_mm(p));
  return out;
}

// Process-wide setting, not an op on tensors: a plain function schema (like _set_pdl).
TORCH_LIBRARY_FRAGMENT(mxfuse, m) {
  m.def("_set_fp8_mm_kernel(int mode) -> ()", &set_fp8_mm_kernel);
  m.def("_get_fp8_mm_kernel() -> int", &fp8_mm_kernel);
}

TORCH_LIBRARY_IMPL(mxfuse, CPU, m) { m.impl("mxfp8_scaled_mm", &mxfp8_scaled_mm); }

#ifdef MXF_WITH_GPU
TORCH_LIBRARY_IMPL(mxfuse, CUDA, m) { m.impl("mxfp8_scaled_mm", &mxfp8_scaled_mm); }
#endif

}  // namespace mxf::ops
