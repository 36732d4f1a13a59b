// Argument checks shared by every op: each error names the op, the argument, what was expected
// and what was given. Checks run before anything is written, so in-place tensors survive a failure.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/string_view.h>

#include <cstdio>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "../core/params.h"

namespace mxf::ops {

// Error messages are assembled without iostreams. On a machine whose compiler ships a newer
// libstdc++ than the one torch's process loads (the H200 image), numbers streamed from this
// library's own copy of the iostream code crashed (seen there in std::ostream::_M_insert<long>).
namespace detail {
inline void put(std::string& s, const char* v) { s += v; }
inline void put(std::string& s, const std::string& v) { s += v; }
inline void put(std::string& s, c10::string_view v) { s.append(v.data(), v.size()); }
template <typename T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
inline void put(std::string& s, T v) {
  s += std::to_string(v);
}
inline void put(std::string& s, double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  s += buf;
}
inline void put(std::string& s, at::IntArrayRef v) {
  s += "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  s += "]";
}
inline void put(std::string& s, at::ScalarType v) { s += c10::toString(v); }
inline void put(std::string& s, const c10::Device& v) { s += v.str(); }
}  // namespace detail

template <typename... Args>
std::string msg(const Args&... args) {
  std::string s;
  (detail::put(s, args), ...);
  return s;
}

#define MXF_CHECK(cond, ...) TORCH_CHECK(cond, ::mxf::ops::msg(__VA_ARGS__))

inline std::string dtype_list(std::initializer_list<at::ScalarType> ok) {
  std::string s;
  for (auto t : ok) s += (s.empty() ? "" : " or ") + std::string(c10::toString(t));
  return s;
}

inline void check_dtype(const char* op, const char* arg, const at::Tensor& t,
                        std::initializer_list<at::ScalarType> ok) {
  for (auto d : ok) {
    if (t.scalar_type() == d) return;
  }
  MXF_CHECK(false, op, ": argument '", arg, "' must have dtype ", dtype_list(ok), ", got ",
              t.scalar_type());
}

inline void check_same_device(const char* op, const char* arg, const at::Tensor& t,
                              const at::Tensor& ref, const char* ref_arg) {
  MXF_CHECK(t.device() == ref.device(), op, ": argument '", arg, "' must be on the device of '",
              ref_arg, "' (", ref.device(), "), got ", t.device());
}

inline void check_supported_device(const char* op, const char* arg, const at::Tensor& t) {
  MXF_CHECK(t.is_cpu() || t.is_cuda(), op, ": argument '", arg,
              "' must be a CPU or CUDA/HIP tensor, got ", t.device());
}

inline void check_min_dim(const char* op, const char* arg, const at::Tensor& t, int64_t dim) {
  MXF_CHECK(t.dim() >= dim, op, ": argument '", arg, "' must have at least ", dim,
              " dimension(s), got shape ", t.sizes());
}

inline void check_dim(const char* op, const char* arg, const at::Tensor& t, int64_t dim) {
  MXF_CHECK(t.dim() == dim, op, ": argument '", arg, "' must have ", dim,
              " dimension(s), got shape ", t.sizes());
}

inline void check_mx_cols(const char* op, const char* arg, int64_t n) {
  MXF_CHECK(n % kMxBlock == 0, op, ": the last dimension of '", arg,
              "' must be a multiple of 32 (one E8M0 scale per 32 elements), got ", n);
}

inline ScaleRule parse_scale_rule(const char* op, c10::string_view rule) {
  if (rule == "ceil") return ScaleRule::kCeil;
  if (rule == "floor") return ScaleRule::kFloor;
  MXF_CHECK(false, op, ": argument 'scale_rule' must be 'ceil' or 'floor', got '",
              std::string(rule), "'");
}

inline Dtype to_dtype(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16:
      return Dtype::kBF16;
    case at::kHalf:
      return Dtype::kFP16;
    default:
      return Dtype::kFP32;
  }
}

// A read-only [rows, n] view of `t` (leading dims flattened) whose last dimension is contiguous;
// copies only when no such view exists.
inline at::Tensor rows_view(const at::Tensor& t, int64_t n) {
  at::Tensor v = t.reshape({-1, n});
  return v.stride(1) == 1 || v.size(0) == 0 ? v : v.contiguous();
}

// The same for a tensor the op writes in place: a view or an error, never a copy. Its rows must
// not overlap (a stride-0 or as_strided view would have two elements written as one).
inline at::Tensor inplace_rows_view(const char* op, const char* arg, const at::Tensor& t,
                                    int64_t n) {
  const bool ok = (t.dim() == 2 && (t.stride(1) == 1 || t.size(1) <= 1)) || t.is_contiguous();
  MXF_CHECK(ok, op, ": argument '", arg,
              "' is written in place and must be contiguous (or 2-D with a contiguous last "
              "dimension), got shape ",
              t.sizes(), " and strides ", t.strides());
  const bool rows_apart = t.dim() != 2 || t.size(0) <= 1 || t.size(1) == 0 || t.stride(0) >= t.size(1);
  MXF_CHECK(rows_apart, op, ": argument '", arg,
            "' is written in place and its rows must not overlap (row stride >= row length), got "
            "shape ", t.sizes(), " and strides ", t.strides());
  return t.dim() == 2 ? t : t.view({-1, n});
}

// A tensor the op writes in place must not require grad (mxfuse ops have no autograd formula).
inline void check_no_grad(const char* op, const char* arg, const at::Tensor& t) {
  MXF_CHECK(!t.requires_grad(), op, ": argument '", arg,
              "' is written in place and must not require grad (mxfuse ops are inference-only)");
}

// `out` (written) and `in` (read) must not share any byte. Conservative for strided views: any
// intersection of their address ranges in one storage is rejected.
inline void check_disjoint(const char* op, const char* out_arg, const at::Tensor& out,
                           const char* in_arg, const at::Tensor& in) {
  if (out.numel() == 0 || in.numel() == 0 || !out.storage().is_alias_of(in.storage())) return;
  const auto range = [](const at::Tensor& t) {
    const auto* base = static_cast<const char*>(t.data_ptr());
    int64_t last = 0;
    for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
    return std::make_pair(base, base + (last + 1) * t.element_size());
  };
  const auto [a0, a1] = range(out);
  const auto [b0, b1] = range(in);
  MXF_CHECK(a1 <= b0 || b1 <= a0, op, ": argument '", out_arg, "' (written in place) and '",
              in_arg, "' must not share memory");
}

// A tensor the op writes must share no byte with any other argument: an input it overlaps would
// be read after (or while) it is written, and the result would depend on the order of the writes.
using NamedTensors = std::initializer_list<std::pair<const char*, const at::Tensor*>>;

inline void check_disjoint_from(const char* op, const char* out_arg, const at::Tensor& out,
                                NamedTensors args) {
  for (const auto& [arg, t] : args) {
    if (t != &out) check_disjoint(op, out_arg, out, arg, *t);
  }
}

}  // namespace mxf::ops
