// Torch boundary of the MXFP6 family: checks -> device guard -> current stream -> launch.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <tuple>

#include "../core/mxfp6_layout.h"
#include "../cpu/cpu_ops.h"
#include "checks.h"
#include "debug.h"
#include "dispatch.h"
#include "mxfp6_common.h"
#include "settings.h"

#ifdef MXF_WITH_GPU
#include "../kernels/device_code.h"
#include "../kernels/mxfp6.h"
#endif

namespace mxf::ops {
namespace {

// A weight to be packed or rounded: [N, K] bf16/fp16, N % 16 == 0, K % 128 == 0 (and all finite:
// check_finite_weight).
void check_weight(const char* op, const at::Tensor& w) {
  check_supported_device(op, "w", w);
  check_dtype(op, "w", w, {at::kBFloat16, at::kHalf});
  check_dim(op, "w", w, 2);
  MXF_CHECK(w.size(0) % kFp6TileRows == 0, op,
              ": argument 'w' must have N (dim 0) divisible by 16 (MXFP6 tiles are 16 x 128), got "
              "shape ",
              w.sizes());
  MXF_CHECK(w.size(1) % kFp6TileCols == 0, op,
              ": argument 'w' must have K (dim 1) divisible by 128 (MXFP6 tiles are 16 x 128), got "
              "shape ",
              w.sizes());
}

// E2M3 has no Inf or NaN (SPEC §2). Load-time ops: the host sync of this check is acceptable. It
// reads all of w, so it comes after the other checks. One reduction: min and max propagate NaN,
// and an infinity is the max or the min, so both are finite iff every value is
// (at::isfinite(w).all() makes several passes with full-size temporaries).
void check_finite_weight(const char* op, const at::Tensor& w) {
  if (w.numel() == 0) return;
  const auto [lo, hi] = at::aminmax(w);
  const at::Tensor both = at::stack({lo, hi}).to(at::kCPU, at::kFloat);
  const float* b = both.const_data_ptr<float>();
  MXF_CHECK(std::isfinite(b[0]) && std::isfinite(b[1]), op,
            ": argument 'w' must be finite (MXFP6 E2M3 has no Inf or NaN); found a non-finite "
            "value");
}

void run_pack(Fp6PackParams& p, const at::Tensor& w) {
  if (p.n == 0 || p.k == 0) return;
  MXF_DISPATCH(w, kernels::launch_mxfp6_pack(p, stream), cpu::mxfp6_pack(p));
}

#ifdef MXF_WITH_GPU
// Tests set MXFUSE_FORCE_PORTABLE=1 to run the portable twin of the GPU fast path.
bool force_portable() {
  const char* v = std::getenv("MXFUSE_FORCE_PORTABLE");
  return v != nullptr && v[0] == '1';
}
// Tests and benchmarks may pin the linear's launch shape (MXFUSE_FP6_RT=1|2, MXFUSE_FP6_WARPS=4|8,
// MXFUSE_FP6_SPLIT=1|2|4|8).
int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : 0;
}
#endif

}  // namespace

// Programmatic dependent launch (sm_90+) of mxfp6_linear and of the norm, quantize and dequantize
// kernels (settings.h): 0 off, 1 on (default), 2 on and the linear's weight stream starts before
// the previous kernel in the stream has finished. Set by
// mxfuse._set_pdl; the first read without it takes MXFUSE_PDL=0|1|2 from the environment (else 1)
// and keeps it, so launches do not parse the environment each time.
namespace {
std::atomic<int> g_pdl{-1};

void set_pdl(int64_t mode) {
  MXF_CHECK(mode >= 0 && mode <= 2,
            "mxfuse._set_pdl: argument 'mode' must be 0 (off), 1 (on) or 2 (on, weights prefetched), got ",
            mode);
  g_pdl.store(static_cast<int>(mode));
}
}  // namespace

int64_t pdl_mode() {
  return process_setting(g_pdl, "MXFUSE_PDL", 1, [](const std::string& e) {
    MXF_CHECK(e == "0" || e == "1" || e == "2",
              "mxfuse: environment variable MXFUSE_PDL must be 0 (off), 1 (on) or 2 (prefetch weights), got '", e,
              "'");
    return e[0] - '0';
  });
}

// Packed weights and their scales; returns (N, K).
std::tuple<int64_t, int64_t> check_packed(const char* op, const at::Tensor& packed,
                                          const at::Tensor& scales) {
  check_supported_device(op, "packed", packed);
  check_dtype(op, "packed", packed, {at::kByte});
  check_dim(op, "packed", packed, 3);
  MXF_CHECK(packed.size(2) == kFp6TileBytes, op,
              ": argument 'packed' must have shape [N/16, K/128, 1536], got ", packed.sizes());
  const int64_t n = packed.size(0) * kFp6TileRows, k = packed.size(1) * kFp6TileCols;
  MXF_CHECK(packed.is_contiguous(), op, ": argument 'packed' must be contiguous");
  check_same_device(op, "scales", scales, packed, "packed");
  check_dtype(op, "scales", scales, {at::kByte});
  MXF_CHECK(scales.dim() == 2 && scales.size(0) == n && scales.size(1) == k / kMxBlock, op,
              ": argument 'scales' must have shape [N, K/32] = [", n, ", ", k / kMxBlock,
              "] (row-major E8M0) for packed of shape ", packed.sizes(), ", got ", scales.sizes());
  MXF_CHECK(scales.is_contiguous(), op, ": argument 'scales' must be contiguous (row-major)");
  // The GPU linear copies 16-byte tile pieces and 4-byte scale words asynchronously.
  MXF_CHECK(reinterpret_cast<uintptr_t>(packed.data_ptr()) % 16 == 0, op,
              ": argument 'packed' must start on a 16-byte boundary, got a view at address offset ",
              reinterpret_cast<uintptr_t>(packed.data_ptr()) % 16);
  MXF_CHECK(reinterpret_cast<uintptr_t>(scales.data_ptr()) % 4 == 0, op,
              ": argument 'scales' must start on a 4-byte boundary, got a view at address offset ",
              reinterpret_cast<uintptr_t>(scales.data_ptr()) % 4);
  return {n, k};
}

#ifdef MXF_WITH_GPU
void set_linear_device(Fp6LinearParams& p) {
  const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
  p.num_sms = prop->multiProcessorCount;
#if defined(USE_ROCM)
  p.clusters = false;
#else
  // Clusters gate programmatic dependent launch too (both need sm_90 code).
  p.clusters = kernels::cluster_code_available(prop->major);
#endif
  p.force_portable = force_portable();
  p.warps_override = env_int("MXFUSE_FP6_WARPS");
  p.split_override = env_int("MXFUSE_FP6_SPLIT");
  p.rt_override = env_int("MXFUSE_FP6_RT");
  p.item_rt = env_int("MXFUSE_FP6_ITEM_RT");
  p.wide_override = env_int("MXFUSE_FP6_WIDE");
  p.rows_x_override = env_int("MXFUSE_FP6_ROWS_X");
  p.capture_check_off = env_int("MXFUSE_FP6_NO_CAPTURE_CHECK");
  p.pdl = static_cast<int>(pdl_mode());
  p.smem_per_sm = static_cast<int>(prop->sharedMemPerMultiprocessor);
  p.smem_reserved = static_cast<int>(prop->reservedSharedMemPerBlock);
  p.smem_optin = static_cast<int>(prop->sharedMemPerBlockOptin);
}
#endif

std::tuple<at::Tensor, at::Tensor> mxfp6_pack(const at::Tensor& w, c10::string_view scale_rule) {
  const char* op = "mxfuse.mxfp6_pack";
  check_weight(op, w);
  const ScaleRule rule = parse_scale_rule(op, scale_rule);
  check_finite_weight(op, w);
  const int64_t n = w.size(0), k = w.size(1);
  const at::Tensor w2 = rows_view(w, k);
  at::Tensor packed = at::empty({n / kFp6TileRows, k / kFp6TileCols, kFp6TileBytes},
                                w.options().dtype(at::kByte));
  at::Tensor scales = at::empty({n, k / kMxBlock}, w.options().dtype(at::kByte));
  maybe_poison(packed);
  maybe_poison(scales);
  Fp6PackParams p;
  p.w = w2.data_ptr();
  p.w_stride = w2.stride(0);
  p.packed = packed.data_ptr<uint8_t>();
  p.scales = scales.data_ptr<uint8_t>();
  p.n = n;
  p.k = k;
  p.dtype = to_dtype(w.scalar_type());
  p.rule = rule;
  run_pack(p, w);
  return {packed, scales};
}

void mxfp6_round_(at::Tensor& w, c10::string_view scale_rule) {
  const char* op = "mxfuse.mxfp6_round_";
  check_weight(op, w);
  const ScaleRule rule = parse_scale_rule(op, scale_rule);
  const int64_t k = w.size(1);
  at::Tensor w2 = inplace_rows_view(op, "w", w, k);
  check_no_grad(op, "w", w);
  check_finite_weight(op, w);
  Fp6PackParams p;
  p.w = w2.data_ptr();
  p.w_stride = w2.stride(0);
  p.rounded = w2.data_ptr();
  p.n = w.size(0);
  p.k = k;
  p.dtype = to_dtype(w.scalar_type());
  p.rule = rule;
  run_pack(p, w);
}

at::Tensor mxfp6_unpack(const at::Tensor& packed, const at::Tensor& scales,
                        at::ScalarType out_dtype) {
  const char* op = "mxfuse.mxfp6_unpack";
  const auto [n, k] = check_packed(op, packed, scales);
  MXF_CHECK(out_dtype == at::kBFloat16 || out_dtype == at::kHalf || out_dtype == at::kFloat, op,
              ": argument 'out_dtype' must be BFloat16, Half or Float, got ", out_dtype);
  at::Tensor out = at::empty({n, k}, packed.options().dtype(out_dtype));
  maybe_poison(out);
  Fp6UnpackParams p;
  p.packed = packed.data_ptr<uint8_t>();
  p.scales = scales.data_ptr<uint8_t>();
  p.out = out.data_ptr();
  p.n = n;
  p.k = k;
  p.out_dtype = to_dtype(out_dtype);
  if (n == 0 || k == 0) return out;
  MXF_DISPATCH(packed, kernels::launch_mxfp6_unpack(p, stream), cpu::mxfp6_unpack(p));
  return out;
}

at::Tensor mxfp6_linear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                        const std::optional<at::Tensor>& bias) {
  const char* op = "mxfuse.mxfp6_linear";
  check_supported_device(op, "x", x);
  check_dtype(op, "x", x, {at::kBFloat16, at::kHalf});
  check_min_dim(op, "x", x, 1);
  check_same_device(op, "packed", packed, x, "x");
  const auto [n, k] = check_packed(op, packed, scales);
  MXF_CHECK(x.size(-1) == k, op, ": the last dimension of 'x' must equal K = ", k,
              " of the packed weight (shape ", packed.sizes(), "), got x of shape ", x.sizes());
  if (bias.has_value()) {
    check_same_device(op, "bias", *bias, x, "x");
    check_dtype(op, "bias", *bias, {x.scalar_type(), at::kFloat});
    MXF_CHECK(bias->dim() == 1 && bias->size(0) == n, op, ": argument 'bias' must have shape [",
                n, "], got ", bias->sizes());
  }
  auto out_shape = x.sizes().vec();
  out_shape.back() = n;
  at::Tensor out = at::empty(out_shape, x.options());
  maybe_poison(out);
  // 16-byte loads of x need aligned rows: copy the (small) activation when it is not.
  at::Tensor x2 = rows_view(x, k);
  if (x2.size(0) > 0 && (reinterpret_cast<uintptr_t>(x2.data_ptr()) % 16 != 0 || x2.stride(0) % 8 != 0)) {
    x2 = x2.clone(at::MemoryFormat::Contiguous);
  }
  const at::Tensor b = bias.has_value() ? bias->contiguous() : at::Tensor();
  Fp6LinearParams p;
  p.x = x2.data_ptr();
  p.x_stride = x2.stride(0);
  p.packed = packed.data_ptr<uint8_t>();
  p.scales = scales.data_ptr<uint8_t>();
  p.bias = b.defined() ? b.data_ptr() : nullptr;
  p.bias_dtype = b.defined() ? to_dtype(b.scalar_type()) : Dtype::kFP32;
  p.out = out.data_ptr();
  p.m = x2.size(0);
  p.n = n;
  p.k = k;
  p.act = to_dtype(x.scalar_type());
  if (p.m == 0 || n == 0) return out;
  MXF_DISPATCH(x, (set_linear_device(p), kernels::launch_mxfp6_linear(p, stream)),
               cpu::mxfp6_linear(p));
  return out;
}

// Test support: kernels::device_code_arch() on CUDA device `device` (0 in a build without CUDA
// kernels, and on ROCm).
int64_t device_code_arch_of(int64_t device) {
#if defined(MXF_WITH_GPU) && !defined(USE_ROCM)
  MXF_CHECK(device >= 0 && device < at::cuda::device_count(),
            "mxfuse._device_code_arch: argument 'device' must be a CUDA device index in [0, ",
            at::cuda::device_count(), "), got ", device);
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  return kernels::device_code_arch();
#else
  (void)device;
  return 0;
#endif
}

// Test support: launches of mxfp6_linear in mode 1 that streamed their weights before the
// dependency wait because they were captured after linears that do not write them, and those of
// them that ran whole before the wait because those linears do not write their x either
// (kernels::launch_mxfp6_linear).
int64_t captured_prefetches() {
#if defined(MXF_WITH_GPU)
  return kernels::fp6_captured_prefetches();
#else
  return 0;
#endif
}
int64_t captured_independent() {
#if defined(MXF_WITH_GPU)
  return kernels::fp6_captured_independent();
#else
  return 0;
#endif
}

TORCH_LIBRARY_FRAGMENT(mxfuse, m) {
  // Launch setting of mxfp6_linear and the norm family on sm_90+ (programmatic dependent launch):
  // 0, 1 or 2.
  m.def("_set_pdl(int mode) -> ()", &set_pdl);
  m.def("_fp6_captured_prefetches() -> int", &captured_prefetches);
  m.def("_fp6_captured_independent() -> int", &captured_independent);
  m.def("_get_pdl() -> int", &pdl_mode);
  m.def("_device_code_arch(int device) -> int", &device_code_arch_of);
}

TORCH_LIBRARY_IMPL(mxfuse, CPU, m) {
  m.impl("mxfp6_pack", &mxfp6_pack);
  m.impl("mxfp6_round_", &mxfp6_round_);
  m.impl("mxfp6_unpack", &mxfp6_unpack);
  m.impl("mxfp6_linear", &mxfp6_linear);
}

#ifdef MXF_WITH_GPU
TORCH_LIBRARY_IMPL(mxfuse, CUDA, m) {
  m.impl("mxfp6_pack", &mxfp6_pack);
  m.impl("mxfp6_round_", &mxfp6_round_);
  m.impl("mxfp6_unpack", &mxfp6_unpack);
  m.impl("mxfp6_linear", &mxfp6_linear);
}
#endif

}  // namespace mxf::ops
