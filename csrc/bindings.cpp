// Every mxfuse schema, one def per op. Only tensors an op writes are marked (a!).
#include <torch/library.h>

#ifndef MXF_NO_PYTHON_MODULE
#include <Python.h>

// `import mxfuse._C` loads this library, which runs the static registrations below and in ops/.
// (The CMake library for C++ users defines MXF_NO_PYTHON_MODULE and needs no libpython.)
extern "C" {
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {
      PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr, nullptr, nullptr, nullptr, nullptr};
  return PyModule_Create(&module_def);
}
}
#endif

TORCH_LIBRARY(mxfuse, m) {
  // Gemma RMSNorm of each row: y = x * rstd * (w + weight_offset) (SPEC §3).
  m.def("gemma_rmsnorm(Tensor x, Tensor weight, float eps=1e-06, float weight_offset=1.0) -> Tensor");
  // residual <- round(x + residual); returns the Gemma RMSNorm of the new residual.
  m.def("gemma_fused_add_rmsnorm(Tensor x, Tensor(a!) residual, Tensor weight, float eps=1e-06, float weight_offset=1.0) -> Tensor");
  // Per-32 MXFP8 E4M3 codes and E8M0 scales ([..., N/32]) of a row-major activation (SPEC §2).
  m.def("mxfp8_quantize(Tensor x, str scale_rule='ceil') -> (Tensor, Tensor)");
  // codes * 2^(scale - 127) in out_dtype; NaN where the scale is 0xFF.
  m.def("mxfp8_dequantize(Tensor codes, Tensor scales, ScalarType out_dtype) -> Tensor");
  // mxfp8_quantize(gemma_rmsnorm(x)) in one pass, bit for bit.
  m.def("gemma_rmsnorm_mxfp8(Tensor x, Tensor weight, float eps=1e-06, float weight_offset=1.0, str scale_rule='ceil') -> (Tensor, Tensor)");
  // mxfp8_quantize(gemma_fused_add_rmsnorm(x, residual)) in one pass, bit for bit.
  m.def("gemma_fused_add_rmsnorm_mxfp8(Tensor x, Tensor(a!) residual, Tensor weight, float eps=1e-06, float weight_offset=1.0, str scale_rule='ceil') -> (Tensor, Tensor)");
  // MXFP6 E2M3 codes of a [N, K] weight in 16x128 tiles ([N/16, K/128, 1536]) + E8M0 scales [N, K/32].
  m.def("mxfp6_pack(Tensor w, str scale_rule='floor') -> (Tensor, Tensor)");
  // The [N, K] weight an MXFP6 packed copy holds, in out_dtype.
  m.def("mxfp6_unpack(Tensor packed, Tensor scales, ScalarType out_dtype) -> Tensor");
  // w <- mxfp6_unpack(*mxfp6_pack(w, scale_rule)), in place.
  m.def("mxfp6_round_(Tensor(a!) w, str scale_rule='floor') -> ()");
  // x [..., K] @ W6^T (+ bias) with W6 streamed from its MXFP6 packed copy (W6A16).
  m.def("mxfp6_linear(Tensor x, Tensor packed, Tensor scales, Tensor? bias=None) -> Tensor");
  // a [M, K] e4m3 (E8M0 a_scale [M, K/32]) @ b [N, K]^T e4m3 (b_scale [N, K/32] for layout "1x32",
  // [N/32, K/32] for "32x32"), fp32 accumulation, bias in fp32, one rounding to out_dtype.
  m.def("mxfp8_scaled_mm(Tensor a, Tensor a_scale, Tensor b, Tensor b_scale, ScalarType out_dtype, Tensor? bias=None, *, str b_scale_layout) -> Tensor");
  // NeoX RoPE on the first rotary_dim dims of each head of x [M, H, D] at positions [M] (SPEC §6).
  m.def("rotary_embedding_neox(Tensor x, Tensor positions, Tensor cos_sin_cache, int rotary_dim) -> Tensor");
  // vLLM reshape_and_cache_flash: key/value [M, Hkv, D] into [blocks, block_size, Hkv, D] caches at
  // slot_mapping (a slot < 0 writes nothing); an e4m3 cache stores e4m3_satfinite(v / scale).
  m.def("reshape_and_cache_flash(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, Tensor slot_mapping, Tensor k_scale, Tensor v_scale) -> ()");
  // A decode step's full-attention front in one launch (SPEC §6): residual add + input norm, MXFP6
  // qkv projection, q/k norms, RoPE, gate split, KV-cache write. Returns (q, gate).
  // After the qkv projection, in one launch: per q/k head Gemma RMSNorm and NeoX RoPE, the gate
  // heads split out, k and v into the KV caches (attention_front's steps 3-5).
  m.def("qk_norm_rope_cache(Tensor qkv, Tensor q_norm_weight, Tensor k_norm_weight, Tensor cos_sin_cache, Tensor positions, Tensor slot_mapping, Tensor(a!) key_cache, Tensor(b!) value_cache, Tensor k_scale, Tensor v_scale, *, int num_q_heads, int num_kv_heads, int head_dim, int rotary_dim, bool output_gate, float eps=1e-06, float weight_offset=1.0) -> (Tensor, Tensor)");
  m.def("attention_front(Tensor x, Tensor(a!) residual, Tensor input_norm_weight, Tensor packed, Tensor scales, Tensor q_norm_weight, Tensor k_norm_weight, Tensor cos_sin_cache, Tensor positions, Tensor slot_mapping, Tensor(b!) key_cache, Tensor(c!) value_cache, Tensor k_scale, Tensor v_scale, Tensor(d!) workspace, *, int num_q_heads, int num_kv_heads, int head_dim, int rotary_dim, bool output_gate, float eps=1e-06, float weight_offset=1.0) -> (Tensor, Tensor)");
  // attention_front as three launches (add + norm, mxfp6_linear, qk_norm_rope_cache), after its
  // checks; the same bits (what mxfuse.attention_front runs on a GPU by default).
  m.def("attention_front_split(Tensor x, Tensor(a!) residual, Tensor input_norm_weight, Tensor packed, Tensor scales, Tensor q_norm_weight, Tensor k_norm_weight, Tensor cos_sin_cache, Tensor positions, Tensor slot_mapping, Tensor(b!) key_cache, Tensor(c!) value_cache, Tensor k_scale, Tensor v_scale, *, int num_q_heads, int num_kv_heads, int head_dim, int rotary_dim, bool output_gate, float eps=1e-06, float weight_offset=1.0) -> (Tensor, Tensor)");
  // attention_front's checks alone (no workspace), for the unfused composition to run before its
  // first op writes: an error names attention_front's arguments and nothing has been written.
  m.def("attention_front_check(Tensor x, Tensor residual, Tensor input_norm_weight, Tensor packed, Tensor scales, Tensor q_norm_weight, Tensor k_norm_weight, Tensor cos_sin_cache, Tensor positions, Tensor slot_mapping, Tensor key_cache, Tensor value_cache, Tensor k_scale, Tensor v_scale, *, int num_q_heads, int num_kv_heads, int head_dim, int rotary_dim, bool output_gate, float eps=1e-06, float weight_offset=1.0) -> ()");
}

