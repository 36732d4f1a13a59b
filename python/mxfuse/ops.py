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


def mxfp6_packed_shapes(n: int, k: int) -> tuple[tuple[int, int, int], tuple[int, int]]:
    """Shapes of (packed, scales) for an [n, k] weight: [n/16, k/128, 1536] and [n, k/32]."""
    return (n // 16, k // 128, 1536), (n, k // 32)


#: b_scale layouts of mxfp8_scaled_mm: one E8M0 scale per weight row and 32 columns ([N, K/32]), or
#: per 32 x 32 block ([N/32, K/32]).
B_SCALE_LAYOUTS = ("1x32", "32x32")


def _same_device(t: Tensor | None, name: str, ref: Tensor, ref_name: str) -> None:
    if t is not None:
        torch._check(t.device == ref.device,
                     lambda: f"argument '{name}' must be on the device of '{ref_name}' ({ref.device}), got {t.device}")


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
    """How ``mxfp6_linear`` launches on sm_90+ GPUs (programmatic dependent launch, PDL).

    ``"on"`` (the default): a linear may start while the previous kernel in the stream finishes
    and waits for it before it reads or writes any tensor; the next kernel may likewise start
    early if it was launched with PDL. ``"prefetch_weights"``: as "on", but the linear starts
    streaming ``packed`` and ``scales`` before that wait, so the kernel that runs right before it
    in the stream must not write them (weights written by an earlier kernel are fine).
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


def mxfp8_scaled_mm(a: Tensor, a_scale: Tensor, b: Tensor, b_scale: Tensor,
                    out_dtype: torch.dtype = torch.bfloat16, bias: Tensor | None = None, *,
                    b_scale_layout: str) -> Tensor:
    """MXFP8 x MXFP8 GEMM (SPEC §5): ``a [M, K] @ b [N, K]^T``, both E4M3 with E8M0 scales;
    ``a_scale`` is [M, K/32], ``b_scale`` [N, K/32] for ``b_scale_layout="1x32"`` or [N/32, K/32]
    for ``"32x32"`` (the layout is always named, never read from the shape). Block terms are
    added in K order in fp32, the bias in fp32, one rounding to ``out_dtype`` (docs/DECISIONS.md).
    The kernel is the portable, exact baseline, not yet a tensor-core GEMM."""
    return _ops.mxfp8_scaled_mm(a, a_scale, b, b_scale, out_dtype, bias, b_scale_layout=b_scale_layout)
