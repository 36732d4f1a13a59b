"""mxfuse: fused MX-format (OCP Microscaling) kernels registered as ``torch.ops.mxfuse.*``."""

import torch  # noqa: F401  (loads libtorch before the extension)

from . import _C  # noqa: F401  (loads the library: runs the op registrations)
from .ops import (
    attention_front,
    attention_front_unfused,
    attention_front_workspace,
    fp8_mm_kernel,
    gemma_fused_add_rmsnorm,
    gemma_fused_add_rmsnorm_mxfp8,
    gemma_rmsnorm,
    gemma_rmsnorm_mxfp8,
    mxfp8_dequantize,
    mxfp6_linear,
    mxfp6_pack,
    mxfp6_round_,
    mxfp6_unpack,
    mxfp8_quantize,
    mxfp8_scaled_mm,
    pdl_mode,
    qk_norm_rope_cache,
    qk_norm_rope_cache_unfused,
    reshape_and_cache_flash,
    rotary_embedding_neox,
    set_fp8_mm_kernel,
    set_pdl,
)
from .quant import MXFP8_KEY, QuantizedActivation, QuantKey, mxfp8_linear, quantize_mxfp8
from . import layers  # noqa: E402  (engine-facing modules, after the ops they wrap)
from .layers import AttentionFront, GemmaRMSNorm, MXFP6Linear, MXFP8Linear

__all__ = [
    "AttentionFront",
    "GemmaRMSNorm",
    "MXFP6Linear",
    "MXFP8Linear",
    "layers",
    "attention_front",
    "attention_front_unfused",
    "attention_front_workspace",
    "fp8_mm_kernel",
    "MXFP8_KEY",
    "QuantKey",
    "QuantizedActivation",
    "gemma_fused_add_rmsnorm",
    "gemma_fused_add_rmsnorm_mxfp8",
    "gemma_rmsnorm",
    "gemma_rmsnorm_mxfp8",
    "mxfp6_linear",
    "mxfp6_pack",
    "mxfp6_round_",
    "mxfp6_unpack",
    "mxfp8_dequantize",
    "mxfp8_linear",
    "mxfp8_quantize",
    "mxfp8_scaled_mm",
    "pdl_mode",
    "qk_norm_rope_cache",
    "qk_norm_rope_cache_unfused",
    "quantize_mxfp8",
    "reshape_and_cache_flash",
    "rotary_embedding_neox",
    "set_fp8_mm_kernel",
    "set_pdl",
]
