"""Engine-facing modules: what a decoder layer holds instead of its norm, linears and attention front.

- ``GemmaRMSNorm``: the producer of SPEC §7. After ``fuse_into(consumer)`` it returns a
  ``QuantizedActivation`` (norm + MXFP8 quantization in one pass) when the consumer's
  ``input_quant_key`` equals the key it produces, and a plain tensor otherwise.
- ``MXFP8Linear``: the consumer. It takes a ``QuantizedActivation`` (checked against its
  ``input_quant_key``) or a plain tensor, which it quantizes itself with the same key, so the two
  paths give the same bits.
- ``MXFP6Linear``: the W6A16 decode linear over MXFP6 weights packed once at load time.
- ``AttentionFront``: a decode step's full-attention layer front (``mxfuse.attention_front``).

Quantized weights are buffers and norm weights parameters without grad, so ``state_dict``,
``load_state_dict`` and ``.to(device)`` work as for any module. The modules are inference-only.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from . import ops
from .quant import MXFP8_KEY, QuantizedActivation, QuantKey, mxfp8_linear, quantize_mxfp8

MX_BLOCK = ops.MX_BLOCK


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def _frozen(t: Tensor) -> nn.Parameter:
    return nn.Parameter(t, requires_grad=False)


def _weight_shape(weight: Tensor, what: str) -> tuple[int, int]:
    _check(weight.dim() == 2, f"{what}: weight must be 2-D [N, K], got shape {tuple(weight.shape)}")
    return weight.shape[0], weight.shape[1]


def _load(mod: nn.Module, buffers: dict[str, Tensor], bias: Tensor | None, what: str) -> nn.Module:
    """Copy quantized weights into ``mod``'s buffers and ``bias`` (converted) into its bias."""
    for name, value in buffers.items():
        getattr(mod, name).copy_(value)
    if bias is not None:
        n = mod.bias.shape[0]
        _check(tuple(bias.shape) == (n,), f"{what}: bias must have shape ({n},), got {tuple(bias.shape)}")
        mod.bias.data.copy_(bias)
    return mod


class GemmaRMSNorm(nn.Module):
    """Gemma RMSNorm, ``y = x * rstd * (weight + weight_offset)`` (SPEC §3), as a fused producer.

    ``forward(x)`` returns the normed ``x``; ``forward(x, residual)`` first adds ``x`` into
    ``residual`` in place (rounded once) and returns ``(normed residual, residual)`` as vLLM's
    norms do. With ``quantize_output`` set (``fuse_into`` sets it when the consumer's key matches)
    the normed output is a ``QuantizedActivation`` under ``output_quant_key``, bit for bit
    ``quantize_mxfp8`` of the plain output.
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6, weight_offset: float = 1.0, *,
                 dtype: torch.dtype = torch.bfloat16, device: torch.device | str | None = None,
                 output_quant_key: QuantKey = MXFP8_KEY) -> None:
        super().__init__()
        _check(hidden_size >= 1, f"GemmaRMSNorm: hidden_size must be >= 1, got {hidden_size}")
        self.hidden_size = hidden_size
        self.eps = eps
        self.weight_offset = weight_offset
        self.weight = _frozen(torch.zeros(hidden_size, dtype=dtype, device=device))
        self.output_quant_key = output_quant_key
        self.quantize_output = False

    def fuse_into(self, consumer: nn.Module) -> bool:
        """Quantize the output for ``consumer`` iff its ``input_quant_key`` equals the key this
        norm produces (SPEC §7; nothing is inferred from the consumer's class). Returns whether it
        now does."""
        key = getattr(consumer, "input_quant_key", None)
        self.quantize_output = key is not None and key == self.output_quant_key
        if self.quantize_output:
            _check(self.hidden_size % MX_BLOCK == 0,
                   f"GemmaRMSNorm.fuse_into: hidden_size must be a multiple of {MX_BLOCK} to quantize "
                   f"the output, got {self.hidden_size}")
        return self.quantize_output

    def forward(self, x: Tensor, residual: Tensor | None = None):
        rule = self.output_quant_key.scale_rule
        if residual is None:
            if not self.quantize_output:
                return ops.gemma_rmsnorm(x, self.weight, self.eps, self.weight_offset)
            return QuantizedActivation.of(x, *ops.gemma_rmsnorm_mxfp8(x, self.weight, self.eps, self.weight_offset,
                                                                      rule), self.output_quant_key)
        if not self.quantize_output:
            return ops.gemma_fused_add_rmsnorm(x, residual, self.weight, self.eps, self.weight_offset), residual
        out = ops.gemma_fused_add_rmsnorm_mxfp8(x, residual, self.weight, self.eps, self.weight_offset, rule)
        return QuantizedActivation.of(x, *out, self.output_quant_key), residual

    def extra_repr(self) -> str:
        return (f"{self.hidden_size}, eps={self.eps}, weight_offset={self.weight_offset}, "
                f"quantize_output={self.quantize_output}")


class MXFP8Linear(nn.Module):
    """``y = x @ W^T (+ bias)`` with W in MXFP8 E4M3 (``weight`` [N, K], ``weight_scale`` E8M0
    [N, K/32] for ``b_scale_layout="1x32"`` or [N/32, K/32] for ``"32x32"``), the consumer of a
    ``QuantizedActivation`` (``mxfuse.mxfp8_linear``). A plain activation is quantized here with
    ``input_quant_key`` first: the same bits as a fused producer's output. ``out_dtype`` None
    gives the activation's dtype; ``bias`` is fp32 (added in fp32)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False, *,
                 b_scale_layout: str = "1x32", out_dtype: torch.dtype | None = None,
                 device: torch.device | str | None = None, input_quant_key: QuantKey = MXFP8_KEY) -> None:
        super().__init__()
        _check(b_scale_layout in ops.B_SCALE_LAYOUTS,
               f"MXFP8Linear: b_scale_layout must be one of {ops.B_SCALE_LAYOUTS}, got {b_scale_layout!r}")
        _check(in_features >= MX_BLOCK and in_features % MX_BLOCK == 0,
               f"MXFP8Linear: in_features must be a positive multiple of {MX_BLOCK}, got {in_features}")
        rows = 1 if b_scale_layout == "1x32" else MX_BLOCK
        _check(out_features >= 1 and out_features % rows == 0,
               f"MXFP8Linear: out_features must be a positive multiple of {rows} for b_scale_layout "
               f"{b_scale_layout!r}, got {out_features}")
        self.in_features, self.out_features = in_features, out_features
        self.b_scale_layout = b_scale_layout
        self.out_dtype = out_dtype
        self.input_quant_key = input_quant_key
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.float8_e4m3fn,
                                                   device=device))
        self.register_buffer("weight_scale", torch.full((out_features // rows, in_features // MX_BLOCK), 127,
                                                        dtype=torch.uint8, device=device))
        self.bias = _frozen(torch.zeros(out_features, dtype=torch.float32, device=device)) if bias else None

    @classmethod
    def from_float(cls, weight: Tensor, bias: Tensor | None = None, *, scale_rule: str = "ceil",
                   out_dtype: torch.dtype | None = None, input_quant_key: QuantKey = MXFP8_KEY) -> MXFP8Linear:
        """Quantize a bf16/fp16/fp32 [N, K] weight to MXFP8 with one E8M0 scale per row and 32
        columns (``mxfp8_quantize``, ``scale_rule``); ``bias`` is kept in fp32."""
        n, k = _weight_shape(weight, "MXFP8Linear.from_float")
        mod = cls(k, n, bias is not None, out_dtype=out_dtype, device=weight.device,
                  input_quant_key=input_quant_key)
        codes, scales = ops.mxfp8_quantize(weight, scale_rule)
        return _load(mod, {"weight": codes, "weight_scale": scales}, bias, "MXFP8Linear.from_float")

    def forward(self, x: Tensor | QuantizedActivation) -> Tensor:
        qa = x if isinstance(x, QuantizedActivation) else quantize_mxfp8(x, self.input_quant_key)
        return mxfp8_linear(qa, self.weight, self.weight_scale, b_scale_layout=self.b_scale_layout,
                            bias=self.bias, out_dtype=self.out_dtype, input_quant_key=self.input_quant_key)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, b_scale_layout={self.b_scale_layout!r}")


class MXFP6Linear(nn.Module):
    """W6A16 decode linear: bf16/fp16 ``x [..., K]`` times MXFP6 E2M3 weights (``packed``
    [N/16, K/128, 1536], ``scales`` E8M0 [N, K/32], SPEC §4), fp32 accumulation, one rounding to
    x's dtype (``mxfuse.mxfp6_linear``). ``bias`` is in the activation dtype or fp32. It has no
    input quant key: a ``QuantizedActivation`` is refused."""

    input_quant_key = None

    def __init__(self, in_features: int, out_features: int, bias: bool = False, *,
                 bias_dtype: torch.dtype = torch.bfloat16, device: torch.device | str | None = None) -> None:
        super().__init__()
        rows, cols = ops.MXFP6_TILE
        _check(in_features >= cols and in_features % cols == 0,
               f"MXFP6Linear: in_features must be a positive multiple of {cols}, got {in_features}")
        _check(out_features >= rows and out_features % rows == 0,
               f"MXFP6Linear: out_features must be a positive multiple of {rows}, got {out_features}")
        self.in_features, self.out_features = in_features, out_features
        packed_shape, scales_shape = ops.mxfp6_packed_shapes(out_features, in_features)
        self.register_buffer("packed", torch.zeros(packed_shape, dtype=torch.uint8, device=device))
        self.register_buffer("scales", torch.full(scales_shape, 127, dtype=torch.uint8, device=device))
        self.bias = _frozen(torch.zeros(out_features, dtype=bias_dtype, device=device)) if bias else None

    @classmethod
    def from_float(cls, weight: Tensor, bias: Tensor | None = None, *, scale_rule: str = "floor") -> MXFP6Linear:
        """Pack a bf16/fp16 [N, K] weight (N % 16 == 0, K % 128 == 0, finite) with
        ``mxfp6_pack``; ``bias`` keeps its dtype."""
        n, k = _weight_shape(weight, "MXFP6Linear.from_float")
        mod = cls(k, n, bias is not None, bias_dtype=bias.dtype if bias is not None else torch.bfloat16,
                  device=weight.device)
        packed, scales = ops.mxfp6_pack(weight, scale_rule)
        return _load(mod, {"packed": packed, "scales": scales}, bias, "MXFP6Linear.from_float")

    def forward(self, x: Tensor) -> Tensor:
        if isinstance(x, QuantizedActivation):
            raise TypeError("MXFP6Linear takes a bf16/fp16 activation, got a QuantizedActivation "
                            "(its input_quant_key is None: do not fuse a quantizing norm into it)")
        return ops.mxfp6_linear(x, self.packed, self.scales, self.bias)

    def dequantized_weight(self, dtype: torch.dtype = torch.bfloat16) -> Tensor:
        """The [N, K] weight values the packed copy holds (exact in bf16)."""
        return ops.mxfp6_unpack(self.packed, self.scales, dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def neox_cos_sin_cache(max_position: int, rotary_dim: int, base: float = 10000.0,
                       device: torch.device | str | None = None) -> Tensor:
    """The fp32 [max_position, rotary_dim] = [cos | sin] table of NeoX RoPE with frequencies
    ``base^(-2i / rotary_dim)`` (vLLM's ``RotaryEmbedding``), computed in fp64 and rounded once."""
    _check(rotary_dim >= 2 and rotary_dim % 2 == 0, f"neox_cos_sin_cache: rotary_dim must be even and >= 2, got {rotary_dim}")
    _check(max_position >= 1, f"neox_cos_sin_cache: max_position must be >= 1, got {max_position}")
    inv_freq = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))
    angles = torch.arange(max_position, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cat([angles.cos(), angles.sin()], dim=1).to(torch.float32).to(device)


class AttentionFront(nn.Module):
    """A decode step's full-attention layer front (SPEC §6, ``mxfuse.attention_front``): residual
    add and input norm, the MXFP6 qkv projection, q and k head norms, NeoX RoPE, the output gate
    split and the KV-cache write. ``forward`` returns ``(q [M, Hq, D], gate [M, Hq, D or 0])``;
    ``residual`` and the caches are updated in place. The qkv weight is [Hq * D * (1 + gate) +
    2 * Hkv * D, hidden] with q (and its gate, interleaved per head as Qwen3-Next stores them),
    then k, then v rows."""

    def __init__(self, hidden_size: int, num_q_heads: int, num_kv_heads: int, head_dim: int,
                 rotary_dim: int, *, output_gate: bool = True, max_position: int = 4096,
                 rope_base: float = 10000.0, eps: float = 1e-6, weight_offset: float = 1.0,
                 dtype: torch.dtype = torch.bfloat16, device: torch.device | str | None = None) -> None:
        super().__init__()
        _check(num_q_heads >= 1 and num_kv_heads >= 1,
               f"AttentionFront: num_q_heads and num_kv_heads must be >= 1, got {num_q_heads} and {num_kv_heads}")
        _check(head_dim >= 16 and head_dim % 16 == 0, f"AttentionFront: head_dim must be a positive multiple of 16, got {head_dim}")
        _check(2 <= rotary_dim <= head_dim and rotary_dim % 2 == 0,
               f"AttentionFront: rotary_dim must be even and in [2, head_dim = {head_dim}], got {rotary_dim}")
        self.hidden_size, self.head_dim, self.rotary_dim = hidden_size, head_dim, rotary_dim
        self.num_q_heads, self.num_kv_heads, self.output_gate = num_q_heads, num_kv_heads, output_gate
        self.eps, self.weight_offset = eps, weight_offset
        n = num_q_heads * head_dim * (2 if output_gate else 1) + 2 * num_kv_heads * head_dim
        self.input_norm_weight = _frozen(torch.zeros(hidden_size, dtype=dtype, device=device))
        self.qkv = MXFP6Linear(hidden_size, n, device=device)
        self.q_norm_weight = _frozen(torch.zeros(head_dim, dtype=dtype, device=device))
        self.k_norm_weight = _frozen(torch.zeros(head_dim, dtype=dtype, device=device))
        self.register_buffer("cos_sin_cache", neox_cos_sin_cache(max_position, rotary_dim, rope_base, device))

    @classmethod
    def from_float(cls, input_norm_weight: Tensor, qkv_weight: Tensor, q_norm_weight: Tensor,
                   k_norm_weight: Tensor, *, num_q_heads: int, num_kv_heads: int, head_dim: int,
                   rotary_dim: int, output_gate: bool = True, max_position: int = 4096,
                   rope_base: float = 10000.0, eps: float = 1e-6, weight_offset: float = 1.0) -> AttentionFront:
        """A front from a checkpoint's tensors: the input norm weight [hidden], the qkv weight
        [N, hidden] (packed here with ``mxfp6_pack``) and the q and k norm weights [head_dim].
        The norm weights keep their dtype (the activation dtype or fp32)."""
        hidden = input_norm_weight.shape[0]
        mod = cls(hidden, num_q_heads, num_kv_heads, head_dim, rotary_dim, output_gate=output_gate,
                  max_position=max_position, rope_base=rope_base, eps=eps, weight_offset=weight_offset,
                  dtype=input_norm_weight.dtype, device=input_norm_weight.device)
        n = mod.qkv.out_features
        _check(tuple(qkv_weight.shape) == (n, hidden),
               f"AttentionFront.from_float: qkv_weight must have shape ({n}, {hidden}) (num_q_heads * head_dim * "
               f"{2 if output_gate else 1} + 2 * num_kv_heads * head_dim, hidden), got {tuple(qkv_weight.shape)}")
        for name, t, size in (("input_norm_weight", input_norm_weight, hidden),
                              ("q_norm_weight", q_norm_weight, head_dim), ("k_norm_weight", k_norm_weight, head_dim)):
            _check(tuple(t.shape) == (size,), f"AttentionFront.from_float: {name} must have shape ({size},), got "
                   f"{tuple(t.shape)}")
            setattr(mod, name, _frozen(t.detach().clone()))
        mod.qkv = MXFP6Linear.from_float(qkv_weight)
        return mod

    def forward(self, x: Tensor, residual: Tensor, positions: Tensor, slot_mapping: Tensor,
                key_cache: Tensor, value_cache: Tensor, k_scale: Tensor, v_scale: Tensor, *,
                workspace: Tensor | None = None, fused: bool | None = None) -> tuple[Tensor, Tensor]:
        return ops.attention_front(
            x, residual, self.input_norm_weight, self.qkv.packed, self.qkv.scales, self.q_norm_weight,
            self.k_norm_weight, self.cos_sin_cache, positions, slot_mapping, key_cache, value_cache,
            k_scale, v_scale, num_q_heads=self.num_q_heads, num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim, rotary_dim=self.rotary_dim, output_gate=self.output_gate,
            eps=self.eps, weight_offset=self.weight_offset, workspace=workspace, fused=fused)

    def extra_repr(self) -> str:
        return (f"hidden_size={self.hidden_size}, heads={self.num_q_heads}/{self.num_kv_heads}, "
                f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, output_gate={self.output_gate}")
