// Torch boundary of the attention front (SPEC §6) and its unfused building blocks (RoPE, the
// KV-cache write, qk_norm_rope_cache): checks -> device guard -> current stream -> launch.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>
#include <tuple>

#include "../cpu/cpu_ops.h"
#include "checks.h"
#include "debug.h"
#include "dispatch.h"
#include "mxfp6_common.h"
#include "settings.h"

#ifdef MXF_WITH_GPU
#include "../kernels/attention_front.h"
#endif

namespace mxf::ops {
namespace {

// A read-only [m, heads, d] input whose heads are contiguous rows of d (a copy only if needed).
at::Tensor heads_view(const at::Tensor& t) {
  const bool ok = t.size(0) <= 1 || t.stride(0) % 8 == 0;
  return t.stride(2) == 1 && t.stride(1) == t.size(2) && ok ? t : t.contiguous();
}

void check_weight_vec(const char* op, const char* arg, const at::Tensor& w, int64_t n,
                      const at::Tensor& x, const char* x_arg = "x") {
  check_same_device(op, arg, w, x, x_arg);
  check_dtype(op, arg, w, {x.scalar_type(), at::kFloat});
  MXF_CHECK(w.dim() == 1 && w.size(0) == n, op, ": argument '", arg, "' must have shape [", n,
            "], got ", w.sizes());
}

// An int64 [m] index vector; returns it contiguous (the kernels index it as an array, so a
// strided view is copied, never read as if it were dense).
at::Tensor check_index_vec(const char* op, const char* arg, const at::Tensor& t, int64_t m,
                           const at::Tensor& ref, const char* ref_arg) {
  check_same_device(op, arg, t, ref, ref_arg);
  check_dtype(op, arg, t, {at::kLong});
  MXF_CHECK(t.dim() == 1 && t.size(0) == m, op, ": argument '", arg, "' must have shape [", m,
            "] (one entry per token of '", ref_arg, "'), got ", t.sizes());
  return t.contiguous();
}

// cos_sin_cache [max_pos, rotary_dim] (cos | sin halves) and rotary_dim (even, 2..d); d_from
// says where the head size d comes from.
at::Tensor check_rope_args(const char* op, const at::Tensor& cos_sin, int64_t rotary_dim,
                           int64_t d, const char* d_from, const at::Tensor& ref, const char* ref_arg) {
  MXF_CHECK(rotary_dim >= 2 && rotary_dim % 2 == 0 && rotary_dim <= d, op,
            ": argument 'rotary_dim' must be even and in [2, head_dim = ", d, "] (head_dim: ", d_from,
            "), got ", rotary_dim);
  check_same_device(op, "cos_sin_cache", cos_sin, ref, ref_arg);
  check_dtype(op, "cos_sin_cache", cos_sin, {at::kFloat, at::kBFloat16, at::kHalf});
  MXF_CHECK(cos_sin.dim() == 2 && cos_sin.size(1) == rotary_dim && cos_sin.size(0) >= 1, op,
            ": argument 'cos_sin_cache' must have shape [max_position >= 1, rotary_dim = ",
            rotary_dim, "], got ", cos_sin.sizes());
  return cos_sin.contiguous();
}

// The CPU can afford to look at index values; the GPU cannot without a host sync, and its
// kernels handle them instead (a position out of range gives NaN rows, a slot out of range
// writes nothing; docs/DECISIONS.md).
void check_index_values_cpu(const char* op, const char* arg, const at::Tensor& t, int64_t lo,
                            int64_t hi) {
  if (!t.is_cpu() || t.numel() == 0) return;
  const int64_t mn = t.min().item<int64_t>(), mx = t.max().item<int64_t>();
  MXF_CHECK(mn >= lo && mx < hi, op, ": argument '", arg, "' must hold values in [", lo, ", ", hi,
            "), got values in [", mn, ", ", mx, "]");
}

// The KV caches [num_blocks, block_size, kv_heads, d]: e4m3, or the activation dtype. Returns
// true for fp8.
bool check_caches(const char* op, const at::Tensor& key_cache, const at::Tensor& value_cache,
                  int64_t kv_heads, int64_t d, const at::Tensor& ref, const char* ref_arg,
                  const at::Tensor& k_scale, const at::Tensor& v_scale) {
  for (const auto& [arg, c] : {std::make_pair("key_cache", &key_cache), std::make_pair("value_cache", &value_cache)}) {
    check_same_device(op, arg, *c, ref, ref_arg);
    check_dtype(op, arg, *c, {at::kFloat8_e4m3fn, ref.scalar_type()});
    MXF_CHECK(c->dim() == 4 && c->size(2) == kv_heads && c->size(3) == d, op, ": argument '", arg,
              "' must have shape [num_blocks, block_size, ", kv_heads, ", ", d, "], got ", c->sizes());
    MXF_CHECK(c->is_contiguous(), op, ": argument '", arg, "' is written in place and must be contiguous");
    check_no_grad(op, arg, *c);
  }
  MXF_CHECK(value_cache.scalar_type() == key_cache.scalar_type() && value_cache.sizes() == key_cache.sizes(),
            op, ": argument 'value_cache' must have the dtype and shape of 'key_cache' (",
            key_cache.scalar_type(), ", ", key_cache.sizes(), "), got ", value_cache.scalar_type(),
            ", ", value_cache.sizes());
  check_disjoint(op, "key_cache", key_cache, "value_cache", value_cache);
  for (const auto& [arg, s] : {std::make_pair("k_scale", &k_scale), std::make_pair("v_scale", &v_scale)}) {
    check_same_device(op, arg, *s, ref, ref_arg);
    check_dtype(op, arg, *s, {at::kFloat});
    MXF_CHECK(s->numel() == 1, op, ": argument '", arg, "' must hold one value, got shape ", s->sizes());
  }
  return key_cache.scalar_type() == at::kFloat8_e4m3fn;
}

void fill_cache_params(KvCacheParams& cp, const at::Tensor& key_cache, const at::Tensor& value_cache,
                       const at::Tensor& slot_mapping, const at::Tensor& k_scale,
                       const at::Tensor& v_scale, bool fp8) {
  cp.slot_mapping = slot_mapping.data_ptr<int64_t>();
  cp.key_cache = key_cache.data_ptr();
  cp.value_cache = value_cache.data_ptr();
  cp.k_scale = k_scale.data_ptr<float>();
  cp.v_scale = v_scale.data_ptr<float>();
  cp.slots = key_cache.size(0) * key_cache.size(1);
  cp.fp8 = fp8;
}

// The workspace's counters: the first `need` elements, all that the kernel touches. A workspace
// that shares memory with another argument would have the kernel's atomics write into that
// argument; one that is not zero makes the GPU kernel stop with an error (front_bad_workspace),
// and the CPU, which can look, rejects it up front.
void check_workspace(const char* op, const at::Tensor& ws, int64_t need, NamedTensors args) {
  const at::Tensor used = ws.narrow(0, 0, need);
  check_disjoint_from(op, "workspace", used, args);
  if (used.is_cpu() && need > 0) {
    const int64_t nonzero = used.count_nonzero().item<int64_t>();
    MXF_CHECK(nonzero == 0, op, ": argument 'workspace' must be zeroed (mxfuse.attention_front_workspace; "
              "every call leaves it zeroed), got ", nonzero, " nonzero elements in its first ", need);
  }
}

#ifdef MXF_WITH_GPU
// How long a CTA of the one-launch kernel may wait for its token block's normed rows before the
// kernel stops with an error (a workspace that was not zero; docs/DECISIONS.md, "One launch"):
// MXFUSE_FRONT_WAIT_TIMEOUT_MS, read once, default 10 s, 0 for no limit. The rows take
// microseconds; the limit only has to outlast a debugger's or a sanitizer's slowdown and
// time-slicing with other processes.
std::atomic<int> g_front_wait_ms{-1};

uint64_t front_wait_limit() {
  const int64_t ms = process_setting(g_front_wait_ms, "MXFUSE_FRONT_WAIT_TIMEOUT_MS", 10000, [](const std::string& e) {
    const bool digits = !e.empty() && e.size() <= 9 && e.find_first_not_of("0123456789") == std::string::npos;
    MXF_CHECK(digits, "mxfuse: environment variable MXFUSE_FRONT_WAIT_TIMEOUT_MS must be a whole number of "
              "milliseconds below 1e9 (0: no limit), got '", e, "'");
    return std::stoi(e);
  });
  return static_cast<uint64_t>(ms) * static_cast<uint64_t>(wall_ticks_per_ms());
}
#endif

}  // namespace

at::Tensor rotary_embedding_neox(const at::Tensor& x, const at::Tensor& positions,
                                 const at::Tensor& cos_sin_cache, int64_t rotary_dim) {
  const char* op = "mxfuse.rotary_embedding_neox";
  check_supported_device(op, "x", x);
  check_dtype(op, "x", x, {at::kBFloat16, at::kHalf});
  check_dim(op, "x", x, 3);
  const int64_t m = x.size(0), heads = x.size(1), d = x.size(2);
  const at::Tensor pos = check_index_vec(op, "positions", positions, m, x, "x");
  const at::Tensor cs = check_rope_args(op, cos_sin_cache, rotary_dim, d, "the last dimension of 'x'", x, "x");
  check_index_values_cpu(op, "positions", pos, 0, cs.size(0));
  const at::Tensor x2 = heads_view(x);
  at::Tensor out = at::empty({m, heads, d}, x.options().memory_format(at::MemoryFormat::Contiguous));
  maybe_poison(out);
  RopeParams p;
  p.x = x2.data_ptr();
  p.x_stride = x2.stride(0);
  p.positions = pos.data_ptr<int64_t>();
  p.cos_sin = cs.data_ptr();
  p.cs_dtype = to_dtype(cs.scalar_type());
  p.out = out.data_ptr();
  p.m = m;
  p.heads = heads;
  p.d = d;
  p.rotary_dim = rotary_dim;
  p.max_pos = cs.size(0);
  p.act = to_dtype(x.scalar_type());
  if (out.numel() == 0) return out;
  MXF_DISPATCH(x, kernels::launch_rope_neox(p, stream), cpu::rope_neox(p));
  return out;
}

void reshape_and_cache_flash(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                             at::Tensor& value_cache, const at::Tensor& slot_mapping,
                             const at::Tensor& k_scale, const at::Tensor& v_scale) {
  const char* op = "mxfuse.reshape_and_cache_flash";
  check_supported_device(op, "key", key);
  check_dtype(op, "key", key, {at::kBFloat16, at::kHalf});
  check_dim(op, "key", key, 3);
  check_same_device(op, "value", value, key, "key");
  MXF_CHECK(value.scalar_type() == key.scalar_type() && value.sizes() == key.sizes(), op,
            ": argument 'value' must have the dtype and shape of 'key' (", key.scalar_type(), ", ",
            key.sizes(), "), got ", value.scalar_type(), ", ", value.sizes());
  const int64_t m = key.size(0), kv_heads = key.size(1), d = key.size(2);
  const at::Tensor slot = check_index_vec(op, "slot_mapping", slot_mapping, m, key, "key");
  const bool fp8 = check_caches(op, key_cache, value_cache, kv_heads, d, key, "key", k_scale, v_scale);
  for (const auto& [arg, c] : {std::make_pair("key_cache", &key_cache), std::make_pair("value_cache", &value_cache)}) {
    check_disjoint_from(op, arg, *c,
                        {{"key", &key}, {"value", &value}, {"slot_mapping", &slot_mapping},
                         {"k_scale", &k_scale}, {"v_scale", &v_scale}});
  }
  const int64_t slots = key_cache.size(0) * key_cache.size(1);
  check_index_values_cpu(op, "slot_mapping", slot, -(int64_t{1} << 62), slots);
  const at::Tensor k2 = heads_view(key), v2 = heads_view(value);
  KvCacheParams p;
  p.key = k2.data_ptr();
  p.value = v2.data_ptr();
  p.k_stride = k2.stride(0);
  p.v_stride = v2.stride(0);
  p.m = m;
  p.kv_heads = kv_heads;
  p.d = d;
  p.act = to_dtype(key.scalar_type());
  fill_cache_params(p, key_cache, value_cache, slot, k_scale, v_scale, fp8);
  if (m == 0 || kv_heads == 0 || d == 0 || slots == 0) return;
  MXF_DISPATCH(key, kernels::launch_kv_cache_write(p, stream), cpu::kv_cache_write(p));
}

std::tuple<at::Tensor, at::Tensor> qk_norm_rope_cache(
    const at::Tensor& qkv, const at::Tensor& q_norm_weight, const at::Tensor& k_norm_weight,
    const at::Tensor& cos_sin_cache, const at::Tensor& positions, const at::Tensor& slot_mapping,
    at::Tensor& key_cache, at::Tensor& value_cache, const at::Tensor& k_scale, const at::Tensor& v_scale,
    int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim, int64_t rotary_dim, bool output_gate,
    double eps, double weight_offset) {
  const char* op = "mxfuse.qk_norm_rope_cache";
  check_supported_device(op, "qkv", qkv);
  check_dtype(op, "qkv", qkv, {at::kBFloat16, at::kHalf});
  check_dim(op, "qkv", qkv, 2);
  const int64_t m = qkv.size(0), n = qkv.size(1);
  MXF_CHECK(num_q_heads >= 1 && num_kv_heads >= 1, op,
            ": arguments 'num_q_heads' and 'num_kv_heads' must be >= 1, got ", num_q_heads, " and ",
            num_kv_heads);
  MXF_CHECK(head_dim >= 2 && head_dim % 2 == 0, op, ": argument 'head_dim' must be even and >= 2, got ",
            head_dim);
  const int64_t want_n = num_q_heads * head_dim * (output_gate ? 2 : 1) + 2 * num_kv_heads * head_dim;
  MXF_CHECK(n == want_n, op, ": argument 'qkv' must have shape [tokens, num_q_heads * head_dim * ",
            output_gate ? 2 : 1, " + 2 * num_kv_heads * head_dim = ", want_n, "] (num_q_heads = ", num_q_heads,
            ", num_kv_heads = ", num_kv_heads, ", head_dim = ", head_dim, ", output_gate = ",
            output_gate ? "True" : "False", "), got ", qkv.sizes());
  check_weight_vec(op, "q_norm_weight", q_norm_weight, head_dim, qkv, "qkv");
  check_weight_vec(op, "k_norm_weight", k_norm_weight, head_dim, qkv, "qkv");
  const at::Tensor cs = check_rope_args(op, cos_sin_cache, rotary_dim, head_dim, "argument 'head_dim'", qkv, "qkv");
  const at::Tensor pos = check_index_vec(op, "positions", positions, m, qkv, "qkv");
  const at::Tensor slot = check_index_vec(op, "slot_mapping", slot_mapping, m, qkv, "qkv");
  const bool fp8 = check_caches(op, key_cache, value_cache, num_kv_heads, head_dim, qkv, "qkv", k_scale, v_scale);
  MXF_CHECK(std::isfinite(eps) && eps >= 0.0, op, ": argument 'eps' must be finite and >= 0, got ", eps);
  MXF_CHECK(std::isfinite(weight_offset), op, ": argument 'weight_offset' must be finite, got ",
            weight_offset);
  const NamedTensors args = {{"qkv", &qkv}, {"q_norm_weight", &q_norm_weight}, {"k_norm_weight", &k_norm_weight},
                             {"cos_sin_cache", &cos_sin_cache}, {"positions", &positions},
                             {"slot_mapping", &slot_mapping}, {"key_cache", &key_cache},
                             {"value_cache", &value_cache}, {"k_scale", &k_scale}, {"v_scale", &v_scale}};
  check_disjoint_from(op, "key_cache", key_cache, args);
  check_disjoint_from(op, "value_cache", value_cache, args);
  const int64_t slots = key_cache.size(0) * key_cache.size(1);
  check_index_values_cpu(op, "positions", pos, 0, cs.size(0));
  check_index_values_cpu(op, "slot_mapping", slot, -(int64_t{1} << 62), slots);

  const auto act = qkv.options().memory_format(at::MemoryFormat::Contiguous);
  at::Tensor q = at::empty({m, num_q_heads, head_dim}, act);
  at::Tensor gate = at::empty({m, num_q_heads, output_gate ? head_dim : 0}, act);
  maybe_poison(q);
  maybe_poison(gate);
  const at::Tensor rows = rows_view(qkv, n);
  const at::Tensor w_q = q_norm_weight.contiguous(), w_k = k_norm_weight.contiguous();
  FrontPostParams p;
  p.qkv = rows.data_ptr();
  p.qkv_stride = rows.stride(0);
  p.m = m;
  p.n = n;
  p.act = to_dtype(qkv.scalar_type());
  p.q_norm_weight = w_q.data_ptr();
  p.q_wdtype = to_dtype(w_q.scalar_type());
  p.k_norm_weight = w_k.data_ptr();
  p.k_wdtype = to_dtype(w_k.scalar_type());
  p.q = q.data_ptr();
  p.gate = gate.data_ptr();
  p.rope.positions = pos.data_ptr<int64_t>();
  p.rope.cos_sin = cs.data_ptr();
  p.rope.cs_dtype = to_dtype(cs.scalar_type());
  p.rope.rotary_dim = rotary_dim;
  p.rope.max_pos = cs.size(0);
  fill_cache_params(p.cache, key_cache, value_cache, slot, k_scale, v_scale, fp8);
  p.q_heads = num_q_heads;
  p.kv_heads = num_kv_heads;
  p.d = head_dim;
  p.output_gate = output_gate;
  p.eps = static_cast<float>(eps);
  p.weight_offset = static_cast<float>(weight_offset);
  if (m == 0) return {q, gate};
  MXF_DISPATCH(qkv, (p.pdl = norm_pdl(), kernels::launch_qk_norm_rope_cache(p, stream)), cpu::qk_norm_rope_cache(p));
  return {q, gate};
}

// Counters the GPU kernel needs in `workspace`: one per (block of 8 token rows, head segment)
// and one word per block (its CTAs' tickets and finished projections, and its rows normed).
int64_t attention_front_workspace_size(int64_t m, int64_t n, int64_t d) {
  return (m + 7) / 8 * (n / d + 1);
}

namespace {

// What the checks of attention_front establish, for its launch.
struct FrontArgs {
  int64_t m, hidden, n, k;
  at::Tensor r2, cs, pos, slot;  // residual rows, cos/sin cache, positions and slots, contiguous
  bool fp8;
};

// Every check of attention_front but the workspace's, named as the op's arguments (the unfused
// composition runs them first too, through attention_front_check, so that it refuses a call before
// its first op writes the residual).
FrontArgs check_front_args(
    const char* op, const at::Tensor& x, const at::Tensor& residual,
    const at::Tensor& input_norm_weight, const at::Tensor& packed, const at::Tensor& scales,
    const at::Tensor& q_norm_weight, const at::Tensor& k_norm_weight,
    const at::Tensor& cos_sin_cache, const at::Tensor& positions, const at::Tensor& slot_mapping,
    const at::Tensor& key_cache, const at::Tensor& value_cache, const at::Tensor& k_scale,
    const at::Tensor& v_scale, int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim,
    int64_t rotary_dim, bool output_gate, double eps, double weight_offset,
    const at::Tensor* workspace) {
  check_supported_device(op, "x", x);
  check_dtype(op, "x", x, {at::kBFloat16, at::kHalf});
  check_dim(op, "x", x, 2);
  const int64_t m = x.size(0), hidden = x.size(1);
  check_same_device(op, "residual", residual, x, "x");
  MXF_CHECK(residual.scalar_type() == x.scalar_type() && residual.sizes() == x.sizes(), op,
            ": argument 'residual' must have the dtype and shape of 'x' (", x.scalar_type(), ", ",
            x.sizes(), "), got ", residual.scalar_type(), ", ", residual.sizes());
  at::Tensor r2 = inplace_rows_view(op, "residual", residual, hidden);
  check_no_grad(op, "residual", residual);
  check_weight_vec(op, "input_norm_weight", input_norm_weight, hidden, x);
  check_same_device(op, "packed", packed, x, "x");
  const auto [n, k] = check_packed(op, packed, scales);
  MXF_CHECK(k == hidden, op, ": argument 'packed' (the qkv weight) must have K = hidden size of 'x' (",
            hidden, "), got K = ", k, " (packed of shape ", packed.sizes(), ")");
  MXF_CHECK(num_q_heads >= 1 && num_kv_heads >= 1, op,
            ": arguments 'num_q_heads' and 'num_kv_heads' must be >= 1, got ", num_q_heads, " and ",
            num_kv_heads);
  MXF_CHECK(head_dim >= 16 && head_dim % 16 == 0, op,
            ": argument 'head_dim' must be a positive multiple of 16, got ", head_dim);
  const int64_t want_n = num_q_heads * head_dim * (output_gate ? 2 : 1) + 2 * num_kv_heads * head_dim;
  MXF_CHECK(n == want_n, op, ": argument 'packed' (the qkv weight) must have N = num_q_heads * head_dim * ",
            output_gate ? 2 : 1, " + 2 * num_kv_heads * head_dim = ", want_n, " (num_q_heads = ", num_q_heads,
            ", num_kv_heads = ", num_kv_heads, ", head_dim = ", head_dim, ", output_gate = ",
            output_gate ? "True" : "False", "), got N = ", n, " (packed of shape ", packed.sizes(), ")");
  check_weight_vec(op, "q_norm_weight", q_norm_weight, head_dim, x);
  check_weight_vec(op, "k_norm_weight", k_norm_weight, head_dim, x);
  at::Tensor cs = check_rope_args(op, cos_sin_cache, rotary_dim, head_dim, "argument 'head_dim'", x, "x");
  at::Tensor pos = check_index_vec(op, "positions", positions, m, x, "x");
  at::Tensor slot = check_index_vec(op, "slot_mapping", slot_mapping, m, x, "x");
  const bool fp8 = check_caches(op, key_cache, value_cache, num_kv_heads, head_dim, x, "x", k_scale, v_scale);
  MXF_CHECK(std::isfinite(eps) && eps >= 0.0, op, ": argument 'eps' must be finite and >= 0, got ", eps);
  MXF_CHECK(std::isfinite(weight_offset), op, ": argument 'weight_offset' must be finite, got ",
            weight_offset);
  const int64_t need = attention_front_workspace_size(m, n, head_dim);
  if (workspace != nullptr) {
    check_same_device(op, "workspace", *workspace, x, "x");
    check_dtype(op, "workspace", *workspace, {at::kInt});
    MXF_CHECK(workspace->dim() == 1 && workspace->is_contiguous() && workspace->numel() >= need, op,
              ": argument 'workspace' must be a contiguous 1-D int32 tensor of at least ", need,
              " zeroed elements for ", m, " tokens (mxfuse.attention_front_workspace), got shape ",
              workspace->sizes());
  }
  // Every tensor the op writes (the residual, the caches, the workspace's counters) must share no
  // byte with any other argument.
  const NamedTensors args = {{"x", &x}, {"residual", &residual}, {"input_norm_weight", &input_norm_weight},
                             {"packed", &packed}, {"scales", &scales}, {"q_norm_weight", &q_norm_weight},
                             {"k_norm_weight", &k_norm_weight}, {"cos_sin_cache", &cos_sin_cache},
                             {"positions", &positions}, {"slot_mapping", &slot_mapping}, {"key_cache", &key_cache},
                             {"value_cache", &value_cache}, {"k_scale", &k_scale}, {"v_scale", &v_scale}};
  check_disjoint_from(op, "residual", residual, args);
  check_disjoint_from(op, "key_cache", key_cache, args);
  check_disjoint_from(op, "value_cache", value_cache, args);
  if (workspace != nullptr) check_workspace(op, *workspace, need, args);
  const int64_t slots = key_cache.size(0) * key_cache.size(1);
  check_index_values_cpu(op, "positions", pos, 0, cs.size(0));
  check_index_values_cpu(op, "slot_mapping", slot, -(int64_t{1} << 62), slots);
  return {m, hidden, n, k, std::move(r2), std::move(cs), std::move(pos), std::move(slot), fp8};
}

}  // namespace

void attention_front_check(
    const at::Tensor& x, const at::Tensor& residual, const at::Tensor& input_norm_weight,
    const at::Tensor& packed, const at::Tensor& scales, const at::Tensor& q_norm_weight,
    const at::Tensor& k_norm_weight, const at::Tensor& cos_sin_cache, const at::Tensor& positions,
    const at::Tensor& slot_mapping, const at::Tensor& key_cache, const at::Tensor& value_cache,
    const at::Tensor& k_scale, const at::Tensor& v_scale, int64_t num_q_heads, int64_t num_kv_heads,
    int64_t head_dim, int64_t rotary_dim, bool output_gate, double eps, double weight_offset) {
  check_front_args("mxfuse.attention_front", x, residual, input_norm_weight, packed, scales,
                   q_norm_weight, k_norm_weight, cos_sin_cache, positions, slot_mapping, key_cache,
                   value_cache, k_scale, v_scale, num_q_heads, num_kv_heads, head_dim, rotary_dim,
                   output_gate, eps, weight_offset, nullptr);
}

// The front as three launches (add + norm, the MXFP6 linear, qk_norm_rope_cache), each op's own
// function called directly, after attention_front's checks: a refused call writes nothing and
// names attention_front's arguments. One dispatch and no Python between the steps, so an eager
// call costs about the one-launch op's host time (README, "Host cost of an eager call").
std::tuple<at::Tensor, at::Tensor> attention_front_split(
    const at::Tensor& x, at::Tensor& residual, const at::Tensor& input_norm_weight,
    const at::Tensor& packed, const at::Tensor& scales, const at::Tensor& q_norm_weight,
    const at::Tensor& k_norm_weight, const at::Tensor& cos_sin_cache, const at::Tensor& positions,
    const at::Tensor& slot_mapping, at::Tensor& key_cache, at::Tensor& value_cache,
    const at::Tensor& k_scale, const at::Tensor& v_scale, int64_t num_q_heads, int64_t num_kv_heads,
    int64_t head_dim, int64_t rotary_dim, bool output_gate, double eps, double weight_offset) {
  check_front_args("mxfuse.attention_front", x, residual, input_norm_weight, packed, scales,
                   q_norm_weight, k_norm_weight, cos_sin_cache, positions, slot_mapping, key_cache,
                   value_cache, k_scale, v_scale, num_q_heads, num_kv_heads, head_dim, rotary_dim,
                   output_gate, eps, weight_offset, nullptr);
  const at::Tensor y = gemma_fused_add_rmsnorm(x, residual, input_norm_weight, eps, weight_offset);
  const at::Tensor qkv = mxfp6_linear(y, packed, scales, std::nullopt);
  return qk_norm_rope_cache(qkv, q_norm_weight, k_norm_weight, cos_sin_cache, positions, slot_mapping,
                            key_cache, value_cache, k_scale, v_scale, num_q_heads, num_kv_heads, head_dim,
                            rotary_dim, output_gate, eps, weight_offset);
}

std::tuple<at::Tensor, at::Tensor> attention_front(
    const at::Tensor& x, at::Tensor& residual, const at::Tensor& input_norm_weight,
    const at::Tensor& packed, const at::Tensor& scales, const at::Tensor& q_norm_weight,
    const at::Tensor& k_norm_weight, const at::Tensor& cos_sin_cache, const at::Tensor& positions,
    const at::Tensor& slot_mapping, at::Tensor& key_cache, at::Tensor& value_cache,
    const at::Tensor& k_scale, const at::Tensor& v_scale, at::Tensor& workspace,
    int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim, int64_t rotary_dim,
    bool output_gate, double eps, double weight_offset) {
  const FrontArgs fa = check_front_args(
      "mxfuse.attention_front", x, residual, input_norm_weight, packed, scales, q_norm_weight,
      k_norm_weight, cos_sin_cache, positions, slot_mapping, key_cache, value_cache, k_scale, v_scale,
      num_q_heads, num_kv_heads, head_dim, rotary_dim, output_gate, eps, weight_offset, &workspace);
  const int64_t m = fa.m, hidden = fa.hidden, n = fa.n, k = fa.k;
  const at::Tensor &r2 = fa.r2, &cs = fa.cs, &pos = fa.pos, &slot = fa.slot;
  const bool fp8 = fa.fp8;

  const auto act = x.options();
  at::Tensor q = at::empty({m, num_q_heads, head_dim}, act);
  at::Tensor gate = at::empty({m, num_q_heads, output_gate ? head_dim : 0}, act);
  maybe_poison(q);
  maybe_poison(gate);
  // The normed rows and the qkv rows between the steps (scratch of this call).
  at::Tensor y = at::empty({m, hidden}, act), qkv = at::empty({m, n}, act);
  const at::Tensor x2 = rows_view(x, hidden);
  const at::Tensor w_in = input_norm_weight.contiguous(), w_q = q_norm_weight.contiguous(),
                   w_k = k_norm_weight.contiguous();
  FrontParams p;
  p.linear.x = y.data_ptr();
  p.linear.x_stride = hidden;
  p.linear.packed = packed.data_ptr<uint8_t>();
  p.linear.scales = scales.data_ptr<uint8_t>();
  p.linear.out = qkv.data_ptr();
  p.linear.m = m;
  p.linear.n = n;
  p.linear.k = k;
  p.linear.act = to_dtype(x.scalar_type());
  p.x = x2.data_ptr();
  p.x_stride = x2.stride(0);
  p.residual = r2.data_ptr();
  p.r_stride = r2.stride(0);
  p.norm_weight = w_in.data_ptr();
  p.wdtype = to_dtype(w_in.scalar_type());
  p.q_norm_weight = w_q.data_ptr();
  p.q_wdtype = to_dtype(w_q.scalar_type());
  p.k_norm_weight = w_k.data_ptr();
  p.k_wdtype = to_dtype(w_k.scalar_type());
  p.q = q.data_ptr();
  p.gate = gate.data_ptr();
  p.rope.positions = pos.data_ptr<int64_t>();
  p.rope.cos_sin = cs.data_ptr();
  p.rope.cs_dtype = to_dtype(cs.scalar_type());
  p.rope.rotary_dim = rotary_dim;
  p.rope.max_pos = cs.size(0);
  fill_cache_params(p.cache, key_cache, value_cache, slot, k_scale, v_scale, fp8);
  p.counters = workspace.data_ptr<int>();
  p.q_heads = num_q_heads;
  p.kv_heads = num_kv_heads;
  p.d = head_dim;
  p.output_gate = output_gate;
  p.eps = static_cast<float>(eps);
  p.weight_offset = static_cast<float>(weight_offset);
  if (m == 0) return {q, gate};
  MXF_DISPATCH(x,
               (set_linear_device(p.linear), p.wait_limit = front_wait_limit(),
                kernels::launch_attention_front(p, stream)),
               cpu::attention_front(p));
  return {q, gate};
}

TORCH_LIBRARY_FRAGMENT(mxfuse, m) {
  // Counters an attention_front call on the GPU needs in its workspace.
  m.def("attention_front_workspace_size(int m, int n, int head_dim) -> int",
        &attention_front_workspace_size);
}

TORCH_LIBRARY_IMPL(mxfuse, CPU, m) {
  m.impl("rotary_embedding_neox", &rotary_embedding_neox);
  m.impl("reshape_and_cache_flash", &reshape_and_cache_flash);
  m.impl("attention_front", &attention_front);
  m.impl("attention_front_check", &attention_front_check);
  m.impl("qk_norm_rope_cache", &qk_norm_rope_cache);
  m.impl("attention_front_split", &attention_front_split);
}

#ifdef MXF_WITH_GPU
TORCH_LIBRARY_IMPL(mxfuse, CUDA, m) {
  m.impl("rotary_embedding_neox", &rotary_embedding_neox);
  m.impl("reshape_and_cache_flash", &reshape_and_cache_flash);
  m.impl("attention_front", &attention_front);
  m.impl("attention_front_check", &attention_front_check);
  m.impl("qk_norm_rope_cache", &qk_norm_rope_cache);
  m.impl("attention_front_split", &attention_front_split);
}
#endif

}  // namespace mxf::ops
