"""Typed wrappers and fake (meta) implementations of every ``torch.ops.mxfuse`` op.

The fakes let ``torch.compile`` and CUDA-graph capture trace the ops without running them; they
share the output-shape helpers below with the wrappers' documentation of what each op returns.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _C  # noqa: F401

_ops = torch.ops.mxfuse
MX_BLOCK = 32


def mxfp8_output_shapes(shape: torch.Size | tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shapes of (codes, scales) for an activation of ``shape``: [..., K] and [..., K/32]."""
    return tuple(shape), (*shape[:-1], shape[-1] // MX_BLOCK)


def empty_mxfp8(x: Tensor) -> tuple[Tensor, Tensor]:
    codes_shape, scales_shape = mxfp8_output_shapes(x.shape)
    return (x.new_empty(codes_shape, dtype=torch.float8_e4m3fn),
            x.new_empty(scales_shape, dtype=torch.uint8))


#: MXFP6 weight tiles (SPEC §4): 16 rows x 128 columns, 1536 bytes packed.
MXFP6_TILE = (16, 128)
MXFP6_TILE_BYTES = 1536


def mxfp6_packed_shapes(n: int, k: int) -> tuple[tuple[int, int, int], tuple[int, int]]:
    """Shapes of (packed, scales) for an [n, k] weight: [n/16, k/128, 1536] and [n, k/32]."""
    rows, cols = MXFP6_TILE
    return (n // rows, k // cols, MXFP6_TILE_BYTES), (n, k // MX_BLOCK)


#: b_scale layouts of mxfp8_scaled_mm: one E8M0 scale per weight row and 32 columns ([N, K/32]), or
#: per 32 x 32 block ([N/32, K/32]).
B_SCALE_LAYOUTS = ("1x32", "32x32")


def _same_device(t: Tensor | None, name: str, ref: Tensor, ref_name: str) -> None:
    if t is not None:
        torch._check(t.device == ref.device,
                     lambda: f"argument '{name}' must be on the device of '{ref_name}' ({ref.device}), got {t.device}")


def _same_devices(ref_name: str, ref: Tensor, **others: Tensor | None) -> None:
    """Every tensor argument on ``ref``'s device, as the real ops check (a fake that let one slip
    would hand torch.compile a graph that fails only when it runs)."""
    for name, t in others.items():
        _same_device(t, name, ref, ref_name)


def _check_mx_cols(x: Tensor, name: str) -> None:
    torch._check(x.shape[-1] % MX_BLOCK == 0,
                 lambda: f"the last dimension of '{name}' must be a multiple of 32, got {x.shape[-1]}")


# --- fakes --------------------------------------------------------------------------------------

@torch.library.register_fake("mxfuse::gemma_rmsnorm")
def _gemma_rmsnorm_fake(x, weight, eps=1e-6, weight_offset=1.0):
    _same_device(weight, "weight", x, "x")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake("mxfuse::gemma_fused_add_rmsnorm")
def _gemma_fused_add_rmsnorm_fake(x, residual, weight, eps=1e-6, weight_offset=1.0):
    _same_device(residual, "residual", x, "x")
    _same_device(weight, "weight", x, "x")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake("mxfuse::mxfp8_quantize")
def _mxfp8_quantize_fake(x, scale_rule="ceil"):
    _check_mx_cols(x, "x")
    return empty_mxfp8(x)


@torch.library.register_fake("mxfuse::mxfp8_dequantize")
def _mxfp8_dequantize_fake(codes, scales, out_dtype):
    _same_device(scales, "scales", codes, "codes")
    _check_mx_cols(codes, "codes")
    return codes.new_empty(codes.shape, dtype=out_dtype)


@torch.library.register_fake("mxfuse::gemma_rmsnorm_mxfp8")
def _gemma_rmsnorm_mxfp8_fake(x, weight, eps=1e-6, weight_offset=1.0, scale_rule="ceil"):
    _same_device(weight, "weight", x, "x")
    _check_mx_cols(x, "x")
    return empty_mxfp8(x)


@torch.library.register_fake("mxfuse::gemma_fused_add_rmsnorm_mxfp8")
def _gemma_fused_add_rmsnorm_mxfp8_fake(x, residual, weight, eps=1e-6, weight_offset=1.0,
                                        scale_rule="ceil"):
    _same_device(residual, "residual", x, "x")
    _same_device(weight, "weight", x, "x")
    _check_mx_cols(x, "x")
    return empty_mxfp8(x)


@torch.library.register_fake("mxfuse::mxfp6_pack")
def _mxfp6_pack_fake(w, scale_rule="floor"):
    packed_shape, scales_shape = mxfp6_packed_shapes(w.shape[0], w.shape[1])
    return w.new_empty(packed_shape, dtype=torch.uint8), w.new_empty(scales_shape, dtype=torch.uint8)


@torch.library.register_fake("mxfuse::mxfp6_unpack")
def _mxfp6_unpack_fake(packed, scales, out_dtype):
    _same_device(scales, "scales", packed, "packed")
    return packed.new_empty((packed.shape[0] * 16, packed.shape[1] * 128), dtype=out_dtype)


@torch.library.register_fake("mxfuse::mxfp6_round_")
def _mxfp6_round_fake(w, scale_rule="floor"):
    return None


@torch.library.register_fake("mxfuse::mxfp6_linear")
def _mxfp6_linear_fake(x, packed, scales, bias=None):
    _same_device(packed, "packed", x, "x")
    _same_device(scales, "scales", x, "x")
    _same_device(bias, "bias", x, "x")
    return x.new_empty((*x.shape[:-1], packed.shape[0] * 16))


@torch.library.register_fake("mxfuse::mxfp8_scaled_mm")
def _mxfp8_scaled_mm_fake(a, a_scale, b, b_scale, out_dtype, bias=None, *, b_scale_layout):
    for t, name in ((a_scale, "a_scale"), (b, "b"), (b_scale, "b_scale"), (bias, "bias")):
        _same_device(t, name, a, "a")
    torch._check(b_scale_layout in B_SCALE_LAYOUTS,
                 lambda: f"argument 'b_scale_layout' must be one of {B_SCALE_LAYOUTS}, got {b_scale_layout!r}")
    _check_mx_cols(a, "a")
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


@torch.library.register_fake("mxfuse::rotary_embedding_neox")
def _rotary_embedding_neox_fake(x, positions, cos_sin_cache, rotary_dim):
    _same_device(positions, "positions", x, "x")
    _same_device(cos_sin_cache, "cos_sin_cache", x, "x")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake("mxfuse::reshape_and_cache_flash")
def _reshape_and_cache_flash_fake(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale):
    _same_devices("key", key, value=value, key_cache=key_cache, value_cache=value_cache,
                  slot_mapping=slot_mapping, k_scale=k_scale, v_scale=v_scale)
    return None


@torch.library.register_fake("mxfuse::qk_norm_rope_cache")
def _qk_norm_rope_cache_fake(qkv, q_norm_weight, k_norm_weight, cos_sin_cache, positions, slot_mapping,
                             key_cache, value_cache, k_scale, v_scale, *, num_q_heads, num_kv_heads, head_dim,
                             rotary_dim, output_gate, eps=1e-6, weight_offset=1.0):
    _same_devices("qkv", qkv, q_norm_weight=q_norm_weight, k_norm_weight=k_norm_weight,
                  cos_sin_cache=cos_sin_cache, positions=positions, slot_mapping=slot_mapping,
                  key_cache=key_cache, value_cache=value_cache, k_scale=k_scale, v_scale=v_scale)
    m = qkv.shape[0]
    return (qkv.new_empty((m, num_q_heads, head_dim)),
            qkv.new_empty((m, num_q_heads, head_dim if output_gate else 0)))


@torch.library.register_fake("mxfuse::attention_front_check")
def _attention_front_check_fake(x, residual, input_norm_weight, packed, scales, q_norm_weight, k_norm_weight,
                                cos_sin_cache, positions, slot_mapping, key_cache, value_cache, k_scale,
                                v_scale, *, num_q_heads, num_kv_heads, head_dim, rotary_dim, output_gate,
                                eps=1e-6, weight_offset=1.0):
    _same_devices("x", x, residual=residual, input_norm_weight=input_norm_weight, packed=packed,
                  scales=scales, q_norm_weight=q_norm_weight, k_norm_weight=k_norm_weight,
                  cos_sin_cache=cos_sin_cache, positions=positions, slot_mapping=slot_mapping,
                  key_cache=key_cache, value_cache=value_cache, k_scale=k_scale, v_scale=v_scale)
    return None


@torch.library.register_fake("mxfuse::attention_front_split")
def _attention_front_split_fake(x, residual, input_norm_weight, packed, scales, q_norm_weight, k_norm_weight,
                                cos_sin_cache, positions, slot_mapping, key_cache, value_cache, k_scale,
                                v_scale, *, num_q_heads, num_kv_heads, head_dim, rotary_dim, output_gate,
                                eps=1e-6, weight_offset=1.0):
    _attention_front_check_fake(x, residual, input_norm_weight, packed, scales, q_norm_weight, k_norm_weight,
                                cos_sin_cache, positions, slot_mapping, key_cache, value_cache, k_scale,
                                v_scale, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads,
                                head_dim=head_dim, rotary_dim=rotary_dim, output_gate=output_gate)
    m = x.shape[0]
    return (x.new_empty((m, num_q_heads, head_dim)),
            x.new_empty((m, num_q_heads, head_dim if output_gate else 0)))


@torch.library.register_fake("mxfuse::attention_front")
def _attention_front_fake(x, residual, input_norm_weight, packed, scales, q_norm_weight, k_norm_weight,
                          cos_sin_cache, positions, slot_mapping, key_cache, value_cache, k_scale,
                          v_scale, workspace, *, num_q_heads, num_kv_heads, head_dim, rotary_dim,
                          output_gate, eps=1e-6, weight_offset=1.0):
    _attention_front_check_fake(x, residual, input_norm_weight, packed, scales, q_norm_weight, k_norm_weight,
                                cos_sin_cache, positions, slot_mapping, key_cache, value_cache, k_scale,
                                v_scale, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads,
                                head_dim=head_dim, rotary_dim=rotary_dim, output_gate=output_gate)
    _same_device(workspace, "workspace", x, "x")
    m = x.shape[0]
    return (x.new_empty((m, num_q_heads, head_dim)),
            x.new_empty((m, num_q_heads, head_dim if output_gate else 0)))


# A check returns nothing that is used: keep it in traced graphs (FX and Inductor would otherwise
# drop it as dead code, and a compiled unfused front would write the residual before refusing).
torch.fx.node.has_side_effect(_ops.attention_front_check.default)


# --- typed wrappers -----------------------------------------------------------------------------

def gemma_rmsnorm(x: Tensor, weight: Tensor, eps: float = 1e-6,
                  weight_offset: float = 1.0) -> Tensor:
    """Gemma RMSNorm over the last dim: ``x * rstd * (weight + weight_offset)`` (SPEC §3)."""
    return _ops.gemma_rmsnorm(x, weight, eps, weight_offset)


def gemma_fused_add_rmsnorm(x: Tensor, residual: Tensor, weight: Tensor, eps: float = 1e-6,
                            weight_offset: float = 1.0) -> Tensor:
    """``residual <- round(x + residual)`` in place; returns the Gemma RMSNorm of the new residual."""
    return _ops.gemma_fused_add_rmsnorm(x, residual, weight, eps, weight_offset)


def mxfp8_quantize(x: Tensor, scale_rule: str = "ceil") -> tuple[Tensor, Tensor]:
    """MXFP8 E4M3 codes ``[..., K]`` and E8M0 scales ``[..., K/32]`` (row-major) of ``x``."""
    return _ops.mxfp8_quantize(x, scale_rule)


def mxfp8_dequantize(codes: Tensor, scales: Tensor,
                     out_dtype: torch.dtype = torch.bfloat16) -> Tensor:
    """``codes * 2^(scales - 127)`` rounded once to ``out_dtype``; NaN where a scale is 0xFF."""
    return _ops.mxfp8_dequantize(codes, scales, out_dtype)


def gemma_rmsnorm_mxfp8(x: Tensor, weight: Tensor, eps: float = 1e-6, weight_offset: float = 1.0,
                        scale_rule: str = "ceil") -> tuple[Tensor, Tensor]:
    """``mxfp8_quantize(gemma_rmsnorm(x, weight))`` in one pass, bit for bit."""
    return _ops.gemma_rmsnorm_mxfp8(x, weight, eps, weight_offset, scale_rule)


def gemma_fused_add_rmsnorm_mxfp8(x: Tensor, residual: Tensor, weight: Tensor, eps: float = 1e-6,
                                  weight_offset: float = 1.0,
                                  scale_rule: str = "ceil") -> tuple[Tensor, Tensor]:
    """``mxfp8_quantize(gemma_fused_add_rmsnorm(x, residual, weight))`` in one pass, bit for bit;
    ``residual`` is updated in place exactly as by the unfused op."""
    return _ops.gemma_fused_add_rmsnorm_mxfp8(x, residual, weight, eps, weight_offset, scale_rule)


def mxfp6_pack(w: Tensor, scale_rule: str = "floor") -> tuple[Tensor, Tensor]:
    """MXFP6 E2M3 copy of an [N, K] weight (N % 16 == 0, K % 128 == 0, finite): packed codes
    ``[N/16, K/128, 1536]`` (SPEC §4 layout) and E8M0 scales ``[N, K/32]``."""
    return _ops.mxfp6_pack(w, scale_rule)


def mxfp6_unpack(packed: Tensor, scales: Tensor, out_dtype: torch.dtype = torch.bfloat16) -> Tensor:
    """The [N, K] weight values an MXFP6 packed copy holds (exact in bf16)."""
    return _ops.mxfp6_unpack(packed, scales, out_dtype)


def mxfp6_round_(w: Tensor, scale_rule: str = "floor") -> Tensor:
    """Overwrite ``w`` with the values its MXFP6 copy holds, so dense GEMMs on ``w`` and the
    W6A16 path multiply the same numbers. ``w`` is untouched if a check fails. Returns ``w``."""
    _ops.mxfp6_round_(w, scale_rule)
    return w


PDL_MODES = ("off", "on", "prefetch_weights")


def set_pdl(mode: str) -> None:
    """How ``mxfp6_linear`` and the norm, quantize and dequantize ops launch on sm_90+ GPUs
    (programmatic dependent launch, PDL).

    ``"on"`` (the default): a linear may start while the previous kernel in the stream finishes
    and waits for it before it reads or writes any tensor; the next kernel may likewise start
    early if it was launched with PDL. Under CUDA-graph capture, a linear captured right after
    other ``mxfp6_linear`` calls that may still run when it starts reads early what none of them
    writes (a linear writes only its output): its weights before the wait if none writes them,
    and x too if none writes x, in which case the whole linear runs beside them and only its
    stores wait (e.g. several projections of one x captured back to back). A linear after any
    other kernel waits as above. The norm, quantize and dequantize kernels are PDL-launched in
    "on" and "prefetch_weights" alike: placed early, they wait for the previous kernel before
    they touch memory. docs/DECISIONS.md has the rules.
    ``"prefetch_weights"``: as "on", but the linear starts streaming ``packed`` and ``scales``
    before that wait at every launch, so the kernel that runs right before it in the stream must
    not write them (weights written by an earlier kernel are fine).
    ``"off"``: plain launches. Results are bitwise the same in every mode; the setting is read
    when a launch is issued (graph capture records it) and is process-wide. The environment
    variable ``MXFUSE_PDL=0|1|2`` sets the initial mode.
    """
    if mode not in PDL_MODES:
        raise ValueError(f"mxfuse.set_pdl: mode must be one of {PDL_MODES}, got {mode!r}")
    _ops._set_pdl(PDL_MODES.index(mode))


def pdl_mode() -> str:
    """The current ``set_pdl`` mode."""
    return PDL_MODES[_ops._get_pdl()]


def mxfp6_linear(x: Tensor, packed: Tensor, scales: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x [..., K] @ W6^T (+ bias)`` with fp32 accumulation, one rounding to x's dtype."""
    return _ops.mxfp6_linear(x, packed, scales, bias)


FP8_MM_KERNELS = ("exact", "tensor_cores")


def set_fp8_mm_kernel(kernel: str) -> None:
    """Which GPU kernel ``mxfp8_scaled_mm`` runs (process-wide, read at each launch; a graph
    records the kernel it was captured with; ``MXFUSE_FP8_MM=exact|tensor_cores`` sets the initial
    choice).

    ``"exact"`` (the default): the documented summation order on the CUDA cores, bit for bit the
    CPU op's. ``"tensor_cores"``: on NVIDIA sm_89+ GPUs, each K block's dot of codes comes from an
    FP8 mma (the tensor core's sum, not the documented left-to-right fp32 sum) and the warps of a
    CTA split K, so results differ from the CPU op in the last bits, within the tolerance of
    SPEC §5 (docs/DECISIONS.md). Still deterministic, and a row of ``a`` gives the same bits at
    any M. Elsewhere (CPU, ROCm, older GPUs) the exact kernel runs either way.
    """
    if kernel not in FP8_MM_KERNELS:
        raise ValueError(f"mxfuse.set_fp8_mm_kernel: kernel must be one of {FP8_MM_KERNELS}, got {kernel!r}")
    _ops._set_fp8_mm_kernel(FP8_MM_KERNELS.index(kernel))


def fp8_mm_kernel() -> str:
    """The current ``set_fp8_mm_kernel`` choice."""
    return FP8_MM_KERNELS[_ops._get_fp8_mm_kernel()]


def mxfp8_scaled_mm(a: Tensor, a_scale: Tensor, b: Tensor, b_scale: Tensor,
                    out_dtype: torch.dtype = torch.bfloat16, bias: Tensor | None = None, *,
                    b_scale_layout: str) -> Tensor:
    """MXFP8 x MXFP8 GEMM (SPEC §5): ``a [M, K] @ b [N, K]^T``, both E4M3 with E8M0 scales;
    ``a_scale`` is [M, K/32], ``b_scale`` [N, K/32] for ``b_scale_layout="1x32"`` or [N/32, K/32]
    for ``"32x32"`` (the layout is always named, never read from the shape). Block terms are
    added in K order in fp32, the bias in fp32, one rounding to ``out_dtype`` (docs/DECISIONS.md).
    On the GPU the exact kernel runs this order bit for bit; ``set_fp8_mm_kernel("tensor_cores")``
    selects the faster tensor-core kernel (sm_89+), which sums each block's codes on the tensor
    cores."""
    return _ops.mxfp8_scaled_mm(a, a_scale, b, b_scale, out_dtype, bias, b_scale_layout=b_scale_layout)


def rotary_embedding_neox(x: Tensor, positions: Tensor, cos_sin_cache: Tensor, rotary_dim: int) -> Tensor:
    """NeoX RoPE of ``x [M, H, D]`` on its first ``rotary_dim`` dims at ``positions [M]`` (int64),
    with ``cos_sin_cache [max_pos, rotary_dim]`` = [cos | sin] (SPEC §6): each product rounded in
    fp32, then one rounding. Returns a new contiguous tensor. On the GPU a position outside the
    cache gives a NaN row (checking it would need a host sync); the CPU op raises."""
    return _ops.rotary_embedding_neox(x, positions, cos_sin_cache, rotary_dim)


def reshape_and_cache_flash(key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor,
                            slot_mapping: Tensor, k_scale: Tensor, v_scale: Tensor) -> None:
    """vLLM ``reshape_and_cache_flash``: ``key``/``value`` [M, Hkv, D] into the caches
    [num_blocks, block_size, Hkv, D] at ``slot_mapping`` [M] (int64; a slot < 0 is a padded token
    and writes nothing). An ``float8_e4m3fn`` cache stores ``e4m3_satfinite(v / scale)`` with the
    fp32 one-element ``k_scale``/``v_scale``; a bf16/fp16 cache (the activation dtype) stores v.
    On the GPU a slot past the cache writes nothing (no host sync); the CPU op raises."""
    _ops.reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)


def qk_norm_rope_cache(qkv: Tensor, q_norm_weight: Tensor, k_norm_weight: Tensor, cos_sin_cache: Tensor,
                       positions: Tensor, slot_mapping: Tensor, key_cache: Tensor, value_cache: Tensor,
                       k_scale: Tensor, v_scale: Tensor, *, num_q_heads: int, num_kv_heads: int, head_dim: int,
                       rotary_dim: int, output_gate: bool = True, eps: float = 1e-6,
                       weight_offset: float = 1.0) -> tuple[Tensor, Tensor]:
    """The attention front after its qkv projection, one launch (SPEC §6): ``qkv [M, N]`` rows are
    ``[q_0 | gate_0 | q_1 | gate_1 | ... | k heads | v heads]`` (no gate heads without
    ``output_gate``), ``N = num_q_heads * head_dim * (2 if output_gate else 1) + 2 * num_kv_heads *
    head_dim``. Each q and k head gets Gemma RMSNorm (``q_norm_weight`` / ``k_norm_weight``) and
    NeoX RoPE at ``positions``; k and the raw v heads go into the KV caches at ``slot_mapping`` (as
    ``reshape_and_cache_flash``). Returns ``(q [M, Hq, D], gate [M, Hq, D])`` (gate [M, Hq, 0]
    without ``output_gate``), both contiguous. Bit for bit the unfused ops (``gemma_rmsnorm`` per
    head, ``rotary_embedding_neox``, ``reshape_and_cache_flash``) on the same device."""
    return _ops.qk_norm_rope_cache(qkv, q_norm_weight, k_norm_weight, cos_sin_cache, positions, slot_mapping,
                                   key_cache, value_cache, k_scale, v_scale, num_q_heads=num_q_heads,
                                   num_kv_heads=num_kv_heads, head_dim=head_dim, rotary_dim=rotary_dim,
                                   output_gate=output_gate, eps=eps, weight_offset=weight_offset)


#: Counters kept per device for attention_front (int32, zero between calls).
ATTENTION_FRONT_WORKSPACE = 1 << 16
_workspaces: dict[torch.device, Tensor] = {}


def attention_front_workspace(device: torch.device | str, numel: int = ATTENTION_FRONT_WORKSPACE) -> Tensor:
    """A zeroed int32 workspace for ``attention_front`` on ``device``. Every call leaves it zeroed
    again, so one workspace serves any number of calls that run one after another (one stream,
    graph replays included). Calls that may run at the same time (several streams) need one each.
    A workspace that is not zero is an error: the CPU op rejects it; the GPU kernel, which cannot
    be checked from the host without a sync, traps: a CUDA error at the next sync (at once when
    its counts are impossible, else after ``MXFUSE_FRONT_WAIT_TIMEOUT_MS``, default 10 s).
    """
    return torch.zeros(numel, dtype=torch.int32, device=device)


def _default_workspace(x: Tensor, need: int) -> Tensor:
    ws = _workspaces.get(x.device)
    if ws is None or ws.numel() < need:
        if x.is_cuda and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(
                "mxfuse.attention_front: no workspace for this device yet and a CUDA graph is being "
                "captured; call attention_front once before capture or pass workspace= "
                "(mxfuse.attention_front_workspace)")
        ws = attention_front_workspace(x.device, max(need, ATTENTION_FRONT_WORKSPACE))
        _workspaces[x.device] = ws
    return ws


def attention_front(x: Tensor, residual: Tensor, input_norm_weight: Tensor, packed: Tensor,
                    scales: Tensor, q_norm_weight: Tensor, k_norm_weight: Tensor,
                    cos_sin_cache: Tensor, positions: Tensor, slot_mapping: Tensor,
                    key_cache: Tensor, value_cache: Tensor, k_scale: Tensor, v_scale: Tensor, *,
                    num_q_heads: int, num_kv_heads: int, head_dim: int, rotary_dim: int,
                    output_gate: bool = True, eps: float = 1e-6, weight_offset: float = 1.0,
                    workspace: Tensor | None = None, fused: bool | None = None) -> tuple[Tensor, Tensor]:
    """A decode step's full-attention layer front (SPEC §6): ``residual <-
    round(x + residual)``; ``y`` = Gemma RMSNorm of it; ``qkv = y @ W6^T`` (MXFP6, as
    ``mxfp6_linear``); per q and k head Gemma RMSNorm and NeoX RoPE; k and v into the KV caches
    (as ``reshape_and_cache_flash``). Returns ``(q [M, Hq, D], gate [M, Hq, D])`` (gate is
    [M, Hq, 0] without ``output_gate``). Bit for bit ``attention_front_unfused`` on the same
    device. ``workspace``: zeroed int32 counters (default: one kept per device, see
    ``attention_front_workspace``).

    ``fused``: True runs the one-launch kernel; False three launches after the same checks
    (``gemma_fused_add_rmsnorm``, ``mxfp6_linear``, ``qk_norm_rope_cache``, as one op:
    ``torch.ops.mxfuse.attention_front_split``); None (default): three
    launches on a GPU, the faster at every measured point in a CUDA graph on the H200 (1.6-3.2x
    the one-launch kernel at hidden 2048 and 6144, M = 1-16; benchmarks/results/
    h200_attention_front.md), the op itself on the CPU. Eagerly, at a few tokens, the host's time
    per call can exceed the GPU's; the one launch costs less of it (README, "Host cost of an eager
    call"). Every path gives the bits of ``attention_front_unfused``."""
    if fused is None:
        fused = not x.is_cuda
    if not fused:
        # One op: attention_front's checks, then the three launches (no Python between them).
        return _ops.attention_front_split(x, residual, input_norm_weight, packed, scales, q_norm_weight,
                                          k_norm_weight, cos_sin_cache, positions, slot_mapping, key_cache,
                                          value_cache, k_scale, v_scale, num_q_heads=num_q_heads,
                                          num_kv_heads=num_kv_heads, head_dim=head_dim, rotary_dim=rotary_dim,
                                          output_gate=output_gate, eps=eps, weight_offset=weight_offset)
    if workspace is None:
        n = packed.shape[0] * 16
        # mxfuse::attention_front_workspace_size, in Python so that torch.compile traces through it.
        need = -(-x.shape[0] // 8) * (n // head_dim + 1) if head_dim > 0 else 0
        workspace = _default_workspace(x, need)
    return _ops.attention_front(x, residual, input_norm_weight, packed, scales, q_norm_weight,
                                k_norm_weight, cos_sin_cache, positions, slot_mapping, key_cache,
                                value_cache, k_scale, v_scale, workspace, num_q_heads=num_q_heads,
                                num_kv_heads=num_kv_heads, head_dim=head_dim, rotary_dim=rotary_dim,
                                output_gate=output_gate, eps=eps, weight_offset=weight_offset)


def attention_front_unfused(x: Tensor, residual: Tensor, input_norm_weight: Tensor, packed: Tensor,
                            scales: Tensor, q_norm_weight: Tensor, k_norm_weight: Tensor,
                            cos_sin_cache: Tensor, positions: Tensor, slot_mapping: Tensor,
                            key_cache: Tensor, value_cache: Tensor, k_scale: Tensor, v_scale: Tensor, *,
                            num_q_heads: int, num_kv_heads: int, head_dim: int, rotary_dim: int,
                            output_gate: bool = True, eps: float = 1e-6,
                            weight_offset: float = 1.0) -> tuple[Tensor, Tensor]:
    """``attention_front`` as the library's unfused ops, one after another (seven launches and three
    copies: what the one-launch and three-launch paths of ``attention_front`` are tested against,
    and the building blocks an engine may rearrange). The fused op's checks run first (``attention_front_check``), so a refused call writes nothing and
    its error names ``attention_front``'s arguments."""
    # attention_front's own checks first: a call they refuse writes nothing and names its arguments
    # as attention_front does (each op below would check again, but only after the residual add).
    _ops.attention_front_check(x, residual, input_norm_weight, packed, scales, q_norm_weight, k_norm_weight,
                               cos_sin_cache, positions, slot_mapping, key_cache, value_cache, k_scale,
                               v_scale, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                               rotary_dim=rotary_dim, output_gate=output_gate, eps=eps,
                               weight_offset=weight_offset)
    y = gemma_fused_add_rmsnorm(x, residual, input_norm_weight, eps, weight_offset)
    qkv = mxfp6_linear(y, packed, scales)
    return qk_norm_rope_cache_unfused(qkv, q_norm_weight, k_norm_weight, cos_sin_cache, positions, slot_mapping,
                                      key_cache, value_cache, k_scale, v_scale, num_q_heads=num_q_heads,
                                      num_kv_heads=num_kv_heads, head_dim=head_dim, rotary_dim=rotary_dim,
                                      output_gate=output_gate, eps=eps, weight_offset=weight_offset)


def qk_norm_rope_cache_unfused(qkv: Tensor, q_norm_weight: Tensor, k_norm_weight: Tensor, cos_sin_cache: Tensor,
                               positions: Tensor, slot_mapping: Tensor, key_cache: Tensor, value_cache: Tensor,
                               k_scale: Tensor, v_scale: Tensor, *, num_q_heads: int, num_kv_heads: int,
                               head_dim: int, rotary_dim: int, output_gate: bool = True, eps: float = 1e-6,
                               weight_offset: float = 1.0) -> tuple[Tensor, Tensor]:
    """``qk_norm_rope_cache`` as the unfused ops (two head norms, two RoPEs, the cache write, and
    the copies that split the heads): what the one-launch op is tested against. Unlike the op, a
    bad argument may be found after the q head norm ran (nothing in place is written before the
    cache write, which checks its own arguments)."""
    m, d = qkv.shape[0], head_dim
    head_width = d * (2 if output_gate else 1)  # explicit: -1 is ambiguous for M = 0
    q_width = num_q_heads * head_width
    qg = qkv[:, :q_width].reshape(m, num_q_heads, head_width)
    q = qg[..., :d]
    gate = qg[..., d:].contiguous()
    k = qkv[:, q_width:q_width + num_kv_heads * d].reshape(m, num_kv_heads, d)
    v = qkv[:, q_width + num_kv_heads * d:].reshape(m, num_kv_heads, d)
    qn = gemma_rmsnorm(q.contiguous(), q_norm_weight, eps, weight_offset)
    kn = gemma_rmsnorm(k.contiguous(), k_norm_weight, eps, weight_offset)
    q_out = rotary_embedding_neox(qn, positions, cos_sin_cache, rotary_dim)
    k_out = rotary_embedding_neox(kn, positions, cos_sin_cache, rotary_dim)
    reshape_and_cache_flash(k_out, v, key_cache, value_cache, slot_mapping, k_scale, v_scale)
    return q_out, gate
