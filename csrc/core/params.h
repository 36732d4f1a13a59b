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
  int64_t wide_max_m = 256;  // rows up to which the one-thread-per-chunk kernel runs (latency)
  bool pdl = false;          // programmatic dependent launch (sm_90+, mxfuse.set_pdl not off)
};

// Stand-alone MXFP8 quantization of rows of x.
struct QuantParams {
  const void* x = nullptr;   // [m, n] act or fp32, row stride x_stride
  uint8_t* codes = nullptr;  // [m, n] e4m3, contiguous
  uint8_t* scales = nullptr; // [m, n/32] e8m0, contiguous
  int64_t m = 0, n = 0, x_stride = 0;
  Dtype act = Dtype::kBF16;
  ScaleRule rule = ScaleRule::kCeil;
  bool pdl = false;  // as NormParams::pdl
};

struct DequantParams {
  const uint8_t* codes = nullptr;   // [m, n] e4m3, contiguous
  const uint8_t* scales = nullptr;  // [m, n/32] e8m0, contiguous
  void* out = nullptr;              // [m, n] out_dtype, contiguous
  int64_t m = 0, n = 0;
  Dtype out_dtype = Dtype::kBF16;
  bool pdl = false;  // as NormParams::pdl
};

// MXFP6 E2M3 rounding and packing of a weight, one 32-element group at a time (SPEC §4).
// Any of packed/scales/rounded may be null; rounded may alias w (mxfp6_round_).
struct Fp6PackParams {
  const void* w = nullptr;     // [n, k] bf16/fp16, row stride w_stride
  uint8_t* packed = nullptr;   // [n/16, k/128, 1536]
  uint8_t* scales = nullptr;   // [n, k/32] e8m0
  void* rounded = nullptr;     // [n, k] dtype, row stride w_stride: the values the packed copy holds
  int64_t n = 0, k = 0, w_stride = 0;
  Dtype dtype = Dtype::kBF16;
  ScaleRule rule = ScaleRule::kFloor;
};

struct Fp6UnpackParams {
  const uint8_t* packed = nullptr;  // [n/16, k/128, 1536]
  const uint8_t* scales = nullptr;  // [n, k/32] e8m0
  void* out = nullptr;              // [n, k] out_dtype, contiguous
  int64_t n = 0, k = 0;
  Dtype out_dtype = Dtype::kBF16;
};

// out[m, :] = x[m, :] @ W6^T (+ bias), fp32 accumulation, one rounding to the activation dtype.
struct Fp6LinearParams {
  const void* x = nullptr;          // [m, k] act, row stride x_stride; 16-byte aligned rows
  const uint8_t* packed = nullptr;  // [n/16, k/128, 1536]
  const uint8_t* scales = nullptr;  // [n, k/32] e8m0
  const void* bias = nullptr;       // [n] act or fp32, or null
  void* out = nullptr;              // [m, n] act, contiguous
  int64_t m = 0, n = 0, k = 0, x_stride = 0;
  Dtype act = Dtype::kBF16;
  Dtype bias_dtype = Dtype::kFP32;
  int num_sms = 132;                // of the device, to size the launch
  bool clusters = false;            // the device runs thread-block clusters (sm_90+)
  bool force_portable = false;      // tests: run the portable twin of the arch fast path
  int warps_override = 0;           // tests/benchmarks: warps per CTA (4, 8); 0 = heuristic
  int rt_override = 0;              // tests/benchmarks: row tiles per warp (1, 2); 0 = heuristic
  int split_override = 0;           // tests/benchmarks: CTAs per cluster splitting K (1, 2, 4, 8)
  // tests/benchmarks: row tiles per ring item of a two-row-tile kernel of one chain per warp (1,
  // 2); 0 = the default: 1, or 2 when pdl == 2
  int item_rt = 0;
  // tests/benchmarks: the register-wide twin of the bf16 two-row-tile, two-n8-block kernels of four
  // warps (launch_linear_cfg): 1 never, 2 always (where it exists), 0 = the default
  int wide_override = 0;
  // tests/benchmarks: x rows per CTA above M = 16: 16 (the M <= 16 kernel, once per 16 rows) or 32
  // (the 32-row kernel: each decoded weight feeds four n8 blocks); 0 = the default (32)
  int rows_x_override = 0;
  // tests/benchmarks: 1 = launch_mxfp6_linear keeps the set mode under graph capture (no capture
  // check: every linear waits as it would after any other kernel)
  int capture_check_off = 0;
  // Programmatic dependent launch (sm_90+): 0 off; 1 the kernel may start before the previous one
  // in the stream ends and waits for it before touching memory; 2 as 1, but the weight stream
  // starts before the wait (weights must not be written by the kernels just before); 3 (set only
  // by the host's capture check, never by a user) everything but the bias and the stores before
  // the wait, and the next kernel may start at once (x and weights written by no kernel that may
  // still run).
  int pdl = 0;
  int smem_per_sm = 0, smem_reserved = 0, smem_optin = 0;  // bytes of shared memory, of the device
};

// out = a @ b^T with E8M0 block scales (SPEC §5): the block math is csrc/core/mx.h's.
struct Fp8MmParams {
  const uint8_t* a = nullptr;        // [m, k] e4m3, contiguous
  const uint8_t* a_scale = nullptr;  // [m, k/32] e8m0, contiguous
  const uint8_t* b = nullptr;        // [n, k] e4m3, contiguous
  const uint8_t* b_scale = nullptr;  // [n / b_scale_rows, k/32] e8m0, contiguous
  const void* bias = nullptr;        // [n] out dtype or fp32, or null
  void* out = nullptr;               // [m, n] out_dtype, contiguous
  int64_t m = 0, n = 0, k = 0;
  int b_scale_rows = 1;              // weight rows per b_scale row: 1 (1x32 blocks) or 32 (32x32)
  Dtype out_dtype = Dtype::kBF16;
  Dtype bias_dtype = Dtype::kFP32;
  // GPU: the tensor-core kernel (NVIDIA sm_89+, set only where it runs) instead of the exact one
  bool tensor_cores = false;
  bool scale_words = false;          // both scale tensors 4-byte aligned and K % 128 == 0
  int num_sms = 132;                 // of the device, to size the tensor-core launch
  int tc_warps_override = 0;         // tests/benchmarks: warps per CTA of the tensor-core kernel
  bool clusters = false;             // thread-block clusters (NVIDIA sm_90+)
  int tc_split_override = 0;         // tests/benchmarks: CTAs per cluster sharing an output tile
};

}  // namespace mxf

namespace mxf {

// NeoX RoPE on the first rotary_dim dims of every head of x [m, heads, d] (SPEC §6).
struct RopeParams {
  const void* x = nullptr;              // [m, heads, d] act, head stride d, row stride x_stride
  const int64_t* positions = nullptr;   // [m]
  const void* cos_sin = nullptr;        // [max_pos, rotary_dim] (cos | sin), cs_dtype, contiguous
  void* out = nullptr;                  // [m, heads, d] act, contiguous
  int64_t m = 0, heads = 0, d = 0, rotary_dim = 0, x_stride = 0, max_pos = 0;
  Dtype act = Dtype::kBF16;
  Dtype cs_dtype = Dtype::kFP32;
};

// vLLM reshape_and_cache_flash: key/value rows [m, kv_heads, d] into caches
// [num_blocks, block_size, kv_heads, d] at slot_mapping[m] (a slot < 0 writes nothing).
struct KvCacheParams {
  const void* key = nullptr;             // [m, kv_heads, d] act, row stride k_stride, head stride d
  const void* value = nullptr;           // [m, kv_heads, d] act, row stride v_stride, head stride d
  const int64_t* slot_mapping = nullptr; // [m]
  void* key_cache = nullptr;             // [slots, kv_heads, d] cache dtype, contiguous
  void* value_cache = nullptr;
  const float* k_scale = nullptr;        // [1] fp32 (fp8 caches only)
  const float* v_scale = nullptr;
  int64_t m = 0, kv_heads = 0, d = 0, k_stride = 0, v_stride = 0, slots = 0;
  Dtype act = Dtype::kBF16;
  bool fp8 = false;                      // cache is e4m3; else it has the activation dtype
};

// The attention front after its qkv projection (qk_norm_rope_cache, SPEC §6): per q and k head
// Gemma RMSNorm and NeoX RoPE (q to its output, k to the cache), the gate heads copied out, v to
// the cache. qkv rows are [q0 | g0 | q1 | g1 | ... | k heads | v heads] (no g without output_gate).
struct FrontPostParams {
  const void* qkv = nullptr;           // [m, n] act, row stride qkv_stride, last dim contiguous
  const void* q_norm_weight = nullptr; // [d] act or fp32
  const void* k_norm_weight = nullptr; // [d] act or fp32
  void* q = nullptr;                   // [m, q_heads, d] act, contiguous
  void* gate = nullptr;                // [m, q_heads, d] act, contiguous (output_gate only)
  RopeParams rope;                     // positions, cos_sin, rotary_dim, max_pos, cs_dtype
  KvCacheParams cache;                 // slot_mapping, caches, scales, slots, fp8
  int64_t m = 0, n = 0, qkv_stride = 0;
  int64_t q_heads = 0, kv_heads = 0, d = 0;
  bool output_gate = true;
  float eps = 1e-6f, weight_offset = 1.0f;
  Dtype act = Dtype::kBF16, q_wdtype = Dtype::kBF16, k_wdtype = Dtype::kBF16;
  bool pdl = false;  // programmatic dependent launch (as NormParams::pdl)
};

// The attention front of one decode step (SPEC §6): residual add + input norm, the MXFP6 qkv
// projection, q/k norms, RoPE, gate split and the KV-cache write. `linear` carries the projection
// (its x is the normed rows, its out the qkv rows [m, n]); on the GPU both are scratch buffers of
// the call and the kernel fills them itself.
struct FrontParams {
  Fp6LinearParams linear;
  const void* x = nullptr;             // [m, hidden] act, row stride x_stride
  void* residual = nullptr;            // [m, hidden] act, row stride r_stride; in/out
  const void* norm_weight = nullptr;   // [hidden] act or fp32
  const void* q_norm_weight = nullptr; // [d] act or fp32
  const void* k_norm_weight = nullptr; // [d] act or fp32
  void* q = nullptr;                   // [m, q_heads, d] act, contiguous
  void* gate = nullptr;                // [m, q_heads, d] act, contiguous (output_gate only)
  RopeParams rope;                     // positions, cos_sin, rotary_dim, max_pos, cs_dtype
  KvCacheParams cache;                 // slot_mapping, caches, scales, slots, fp8
  int* counters = nullptr;             // GPU: zeroed workspace, left zeroed (see ops)
  int64_t x_stride = 0, r_stride = 0;
  int64_t q_heads = 0, kv_heads = 0, d = 0;
  bool output_gate = true;
  float eps = 1e-6f, weight_offset = 1.0f;
  Dtype wdtype = Dtype::kBF16, q_wdtype = Dtype::kBF16, k_wdtype = Dtype::kBF16;
  // GPU: wall_ticks() a CTA may wait for its token block's normed rows before the kernel traps
  // (a workspace that was not zero; 0: no limit).
  uint64_t wait_limit = 0;
};

}  // namespace mxf
