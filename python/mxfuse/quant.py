"""QuantKey and QuantizedActivation (SPEC §7).

A producer (a fused norm) hands a consumer (a linear) an activation it already quantized. The
producer fuses iff the consumer's ``input_quant_key`` equals the key it would produce; the key
names everything the consumer relies on, the scale layout included, so nothing is inferred from
class names. ``QuantizedActivation`` is a pytree node and flows through ``torch.compile``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.utils._pytree as pytree
from torch import Tensor

from . import ops

_ELEMENTS = {"e4m3": torch.float8_e4m3fn}
_SCALE_RULES = ("ceil", "floor")
_ORIG_DTYPES = (torch.bfloat16, torch.float16, torch.float32)  # what mxfp8_quantize takes


@dataclass(frozen=True)
class QuantKey:
    """Everything a consumer of a quantized activation must agree on."""

    element: str = "e4m3"
    block: tuple[int, int] = (1, 32)
    scale_format: str = "e8m0"
    scale_layout: str = "row_major"  # scales [..., K/32], row-major
    scale_rule: str = "ceil"

    def __post_init__(self) -> None:
        # Normalize a list to a tuple so the key stays hashable and compares equal.
        if isinstance(self.block, list):
            object.__setattr__(self, "block", tuple(self.block))
        if self.element not in _ELEMENTS:
            raise ValueError(f"QuantKey.element must be one of {sorted(_ELEMENTS)}, got {self.element!r}")
        if tuple(self.block) != (1, 32):
            raise ValueError(f"QuantKey.block must be (1, 32), got {self.block!r}")
        if self.scale_format != "e8m0":
            raise ValueError(f"QuantKey.scale_format must be 'e8m0', got {self.scale_format!r}")
        if self.scale_layout != "row_major":
            raise ValueError(f"QuantKey.scale_layout must be 'row_major', got {self.scale_layout!r}")
        if self.scale_rule not in _SCALE_RULES:
            raise ValueError(f"QuantKey.scale_rule must be one of {_SCALE_RULES}, got {self.scale_rule!r}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return _ELEMENTS[self.element]


#: MXFP8 E4M3, 1x32 blocks, E8M0 row-major scales, vLLM's ROCm "ceil" scale rule.
MXFP8_KEY = QuantKey()


@dataclass
class QuantizedActivation:
    """A quantized activation: ``data`` codes [..., K], ``scale`` [..., K/32] per ``key``."""

    data: Tensor
    scale: Tensor
    key: QuantKey
    orig_dtype: torch.dtype
    orig_shape: tuple[int, ...]

    @classmethod
    def of(cls, x: Tensor, data: Tensor, scale: Tensor, key: QuantKey) -> QuantizedActivation:
        """The codes and scales a producer made from ``x`` under ``key`` (x's dtype and shape)."""
        return cls(data, scale, key, x.dtype, tuple(x.shape))

    def dequantize(self) -> Tensor:
        """The activation as ``orig_dtype`` values (what the producer quantized, after rounding)."""
        return ops.mxfp8_dequantize(self.data, self.scale, self.orig_dtype).reshape(self.orig_shape)

    def check(self, expected: QuantKey, in_features: int | None = None) -> None:
        """Validate as a consumer would before reading ``data`` and ``scale``; raise ValueError."""
        if self.key != expected:
            raise ValueError(f"QuantizedActivation: consumer expects key {expected}, got {self.key}")
        if self.data.dtype != expected.torch_dtype:
            raise ValueError(f"QuantizedActivation.data must be {expected.torch_dtype}, got {self.data.dtype}")
        if self.scale.dtype != torch.uint8:
            raise ValueError(f"QuantizedActivation.scale must be torch.uint8 (E8M0), got {self.scale.dtype}")
        if self.data.dim() < 1:
            raise ValueError(f"QuantizedActivation.data must have at least 1 dimension ([..., K]), got shape "
                             f"{tuple(self.data.shape)}")
        if self.orig_dtype not in _ORIG_DTYPES:
            raise ValueError(f"QuantizedActivation.orig_dtype must be one of {_ORIG_DTYPES}, got {self.orig_dtype}")
        k = self.data.shape[-1]
        if k % 32 != 0:
            raise ValueError(f"QuantizedActivation.data: K must be a multiple of 32, got {k}")
        if in_features is not None and k != in_features:
            raise ValueError(f"QuantizedActivation.data: consumer expects K = {in_features}, got {k}")
        want = (*self.data.shape[:-1], k // 32)
        if tuple(self.scale.shape) != want:
            raise ValueError(f"QuantizedActivation.scale must have shape {want} (row_major [..., K/32]), "
                             f"got {tuple(self.scale.shape)}")
        if not (self.data.is_contiguous() and self.scale.is_contiguous()):
            raise ValueError("QuantizedActivation.data and .scale must be contiguous (row_major layout)")
        if self.data.device != self.scale.device:
            raise ValueError(f"QuantizedActivation.data is on {self.data.device}, .scale on {self.scale.device}")
        if tuple(self.orig_shape) != tuple(self.data.shape):
            raise ValueError(f"QuantizedActivation.orig_shape {tuple(self.orig_shape)} does not match "
                             f"data shape {tuple(self.data.shape)}")


def _flatten(qa: QuantizedActivation):
    return [qa.data, qa.scale], (qa.key, qa.orig_dtype, tuple(qa.orig_shape))


def _unflatten(children, context) -> QuantizedActivation:
    key, orig_dtype, orig_shape = context
    return QuantizedActivation(children[0], children[1], key, orig_dtype, orig_shape)


pytree.register_pytree_node(QuantizedActivation, _flatten, _unflatten,
                            serialized_type_name="mxfuse.QuantizedActivation")


def quantize_mxfp8(x: Tensor, key: QuantKey = MXFP8_KEY) -> QuantizedActivation:
    """Quantize ``x`` [..., K] (bf16/fp16/fp32) into a QuantizedActivation under ``key``."""
    return QuantizedActivation.of(x, *ops.mxfp8_quantize(x, key.scale_rule), key)


def mxfp8_linear(qa: QuantizedActivation, b: Tensor, b_scale: Tensor, *, b_scale_layout: str,
                 bias: Tensor | None = None, out_dtype: torch.dtype | None = None,
                 input_quant_key: QuantKey = MXFP8_KEY) -> Tensor:
    """A consumer of a QuantizedActivation: ``qa [..., K] @ b [N, K]^T`` through
    ``mxfp8_scaled_mm``; returns [..., N] in ``out_dtype`` (default: the activation's original
    dtype). ``qa`` is checked against ``input_quant_key`` (ValueError on any mismatch) before its
    tensors are read."""
    qa.check(input_quant_key, in_features=b.shape[-1])
    k = qa.data.shape[-1]
    out = ops.mxfp8_scaled_mm(qa.data.reshape(-1, k), qa.scale.reshape(-1, k // 32), b, b_scale,
                              qa.orig_dtype if out_dtype is None else out_dtype, bias,
                              b_scale_layout=b_scale_layout)
    return out.reshape(*qa.data.shape[:-1], b.shape[0])
