// Plain parameter structs: the only thing a kernel or a CPU implementation sees of an op call.
#pragma once

#include <cstdint>

#include "half_types.h"
#include "mx.h"

namespace mxf {

// Gemma (fused add) RMSNorm, optionally with MXFP8 quantization of the normed row.
struct NormParams {
  const void* x = nullptr;  // [m, n] act, row stride x_stride (elements)
  void* residual = nullptr; // [m, n] act, row stride r_stride; in/out; null: no residual add
  const void* weight = nullptr;  // [n] act or fp32
  void* y = nullptr;             // [m, n] act, contiguous; null for the *_mxfp8 ops
  uint8_t* codes = nullptr;      // [m, n] e4m3, contiguous; null unless *_mxfp8
  uint8_t* scales = nullptr;     // [m, n/32] e8m0, contiguous
  int64_t m = 0, n = 0;
  int64_t x_stride = 0, r_stride = 0;
  float eps = 1e-6f;
  float weight_offset = 1.0f;
  Dtype act = Dtype::kBF16;
  Dtype wdtype = Dtype::kBF16;
  ScaleRule rule = ScaleRule::kCeil;
};

// Stand-alone MXFP8 quantization of rows of x.
struct QuantParams {
  const void* x = nullptr;   // [m, n] act or fp32, row stride x_stride
  uint8_t* codes = nullptr;  // [m, n] e4m3, contiguous
  uint8_t* scales = nullptr; // [m, n/32] e8m0, contiguous
  int64_t m = 0, n = 0, x_stride = 0;
  Dtype act = Dtype::kBF16;
  ScaleRule rule = ScaleRule::kCeil;
};

struct DequantParams {
  const uint8_t* codes = nullptr;   // [m, n] e4m3, contiguous
  const uint8_t* scales = nullptr;  // [m, n/32] e8m0, contiguous
  void* out = nullptr;              // [m, n] out_dtype, contiguous
  int64_t m = 0, n = 0;
  Dtype out_dtype = Dtype::kBF16;
};

}  // namespace mxf
