"""Systematic misuse of every op: one argument of a valid call is changed at a time, and the op must
either refuse the call with an error that names that argument (or, for a shape, an argument it has
to agree with) and says what was given (the dtype, the shape or size, the scalar value), and leave
every in-place tensor untouched, or, where the change is only one of memory layout, give bit for
bit the answer of a dense copy.

The changes, per tensor argument (the table below lists what each op accepts):
- every dtype the op does not accept for it;
- one more or one fewer dimension, and each dimension grown, shrunk, doubled or emptied, unless
  the op takes that shape with the other arguments unchanged (then it is a valid call, left to the
  other tests);
- the same values in a strided view, in a column-major copy, and one element past an aligned
  address, and a stride-0 view of one row or element (an input: accepted with the bits of a dense
  copy, or refused by name; a written tensor: refused);
- a written tensor whose rows overlap, that requires grad (with grad mode on, and under no_grad),
  or that shares memory with another argument;
- on the GPU, the argument on the CPU; on the CPU, the argument on the meta device (the fake
  implementation, what torch.compile traces, must then name it).
And per scalar argument, the values its contract excludes (a negative or non-finite eps, an
unknown scale rule or layout, head sizes the weights do not have, ...).

A change the table does not foresee fails the test as "accepted silently": either the op is
missing a check or the table is wrong, and both are worth knowing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
from typing import Callable

import mxfuse
import pytest
import torch
from conftest import DEVICES, OPS, generator, int_view

BF16, FP16, FP32, E4M3, U8 = torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn, torch.uint8
DTYPE_POOL = (BF16, FP16, FP32, torch.float64, E4M3, U8, torch.int8, torch.int32, torch.int64, torch.bool)
ERRORS = (RuntimeError, ValueError)


@dataclasses.dataclass
class Arg:
    value: torch.Tensor | None = None
    dtypes: tuple = ()  # dtypes the op accepts for this argument (the others must be refused)
    inplace: bool = False
    tied: tuple = ()  # arguments whose shape this one's has to match (an error may name them)


@dataclasses.dataclass
class Case:
    op: str
    args: dict  # name -> Arg (tensors) or plain value (scalars), in schema order
    kwargs: dict = dataclasses.field(default_factory=dict)  # keyword-only scalars
    # free(name, shape) -> True when the op takes that shape for `name` with the others unchanged
    free: Callable[[str, tuple], bool] = lambda name, shape: False
    bad_scalars: tuple = ()  # (name, value, names an error may give)
    fn: Callable | None = None  # a Python function to call instead of torch.ops.mxfuse.<op>
    op_name: str = ""  # the op its errors name, if not `op`

    def call(self, args: dict, kwargs: dict):
        vals = [a.value if isinstance(a, Arg) else a for a in args.values()]
        return (self.fn or getattr(OPS, self.op))(*vals, **kwargs)

    def tensors(self):
        return [n for n, a in self.args.items() if isinstance(a, Arg) and a.value is not None]


def _rand(g, shape, dtype, device, scale=1.0):
    return (torch.randn(*shape, generator=g) * scale).to(dtype).to(device)


def _codes(g, shape, device):
    # E4M3 codes without NaN (0x7F / 0xFF), so that equal answers compare equal.
    return torch.randint(0, 0x7E, shape, generator=g, dtype=U8).view(E4M3).to(device)


def _scales(g, shape, device):
    return torch.randint(120, 134, shape, generator=g, dtype=U8).to(device)


def _norm_case(op, device, g):
    has_res, is_mx = "add" in op, op.endswith("mxfp8")
    x = Arg(_rand(g, (3, 64), BF16, device), (BF16, FP16), tied=("weight", "residual"))
    args = {"x": x}
    if has_res:
        args["residual"] = Arg(_rand(g, (3, 64), BF16, device, 4.0), (BF16,), inplace=True, tied=("x",))
    args["weight"] = Arg(_rand(g, (64,), BF16, device, 0.2), (BF16, FP32), tied=("x",))
    args["eps"], args["weight_offset"] = 1e-6, 1.0
    bad = [("eps", -1.0, ("eps",)), ("eps", math.nan, ("eps",)), ("eps", math.inf, ("eps",)),
           ("weight_offset", math.nan, ("weight_offset",)), ("weight_offset", -math.inf, ("weight_offset",))]
    if is_mx:
        args["scale_rule"] = "ceil"
        bad += [("scale_rule", "round", ("scale_rule",)), ("scale_rule", "", ("scale_rule",))]

    def free(name, shape):  # without a residual, x may have any rows of 64
        return name == "x" and not has_res and len(shape) >= 1 and shape[-1] == 64
    return Case(op, args, free=free, bad_scalars=tuple(bad))


def _quantize_case(device, g):
    def free(name, shape):
        return len(shape) >= 1 and (shape[-1] % 32 == 0)  # K = 0 included (an empty answer)
    return Case("mxfp8_quantize", {"x": Arg(_rand(g, (3, 64), BF16, device), (BF16, FP16, FP32)),
                                   "scale_rule": "ceil"}, free=free,
                bad_scalars=(("scale_rule", "nearest", ("scale_rule",)),))


def _dequantize_case(device, g):
    return Case("mxfp8_dequantize",
                {"codes": Arg(_codes(g, (3, 64), device), (E4M3,), tied=("scales",)),
                 "scales": Arg(_scales(g, (3, 2), device), (U8,), tied=("codes",)),
                 "out_dtype": BF16},
                bad_scalars=(("out_dtype", torch.int32, ("out_dtype",)), ("out_dtype", torch.float64, ("out_dtype",)),
                             ("out_dtype", E4M3, ("out_dtype",))))


def _fp6_weight(g, device):
    return _rand(g, (32, 128), BF16, device, 0.05)


def _fp6_free(name, shape):
    return name == "w" and len(shape) == 2 and shape[0] % 16 == 0 and shape[1] % 128 == 0


def _pack_case(device, g):
    return Case("mxfp6_pack", {"w": Arg(_fp6_weight(g, device), (BF16, FP16)), "scale_rule": "floor"},
                free=_fp6_free, bad_scalars=(("scale_rule", "round", ("scale_rule",)),))


def _round_case(device, g):
    return Case("mxfp6_round_", {"w": Arg(_fp6_weight(g, device), (BF16, FP16), inplace=True),
                                 "scale_rule": "floor"},
                free=_fp6_free, bad_scalars=(("scale_rule", "CEIL", ("scale_rule",)),))


def _packed_args(g, device):
    packed, scales = OPS.mxfp6_pack(_fp6_weight(g, "cpu"))
    return (Arg(packed.to(device), (U8,), tied=("scales", "x")),
            Arg(scales.to(device), (U8,), tied=("packed",)))


def _unpack_case(device, g):
    packed, scales = _packed_args(g, device)
    return Case("mxfp6_unpack", {"packed": packed, "scales": scales, "out_dtype": BF16},
                bad_scalars=(("out_dtype", torch.int8, ("out_dtype",)), ("out_dtype", torch.float64, ("out_dtype",))))


def _linear_case(device, g):
    packed, scales = _packed_args(g, device)
    args = {"x": Arg(_rand(g, (3, 128), BF16, device), (BF16, FP16), tied=("packed",)),
            "packed": packed, "scales": scales,
            "bias": Arg(_rand(g, (32,), BF16, device), (BF16, FP32), tied=("packed",))}

    def free(name, shape):
        return name == "x" and len(shape) >= 1 and shape[-1] == 128
    return Case("mxfp6_linear", args, free=free)


def _scaled_mm_case(device, g):
    args = {"a": Arg(_codes(g, (3, 64), device), (E4M3,), tied=("a_scale", "b")),
            "a_scale": Arg(_scales(g, (3, 2), device), (U8,), tied=("a",)),
            "b": Arg(_codes(g, (32, 64), device), (E4M3,), tied=("a", "b_scale", "bias")),
            "b_scale": Arg(_scales(g, (32, 2), device), (U8,), tied=("b",)),
            "out_dtype": BF16,
            "bias": Arg(_rand(g, (32,), BF16, device), (BF16, FP32), tied=("b",))}
    return Case("mxfp8_scaled_mm", args, kwargs={"b_scale_layout": "1x32"},
                bad_scalars=(("out_dtype", torch.int32, ("out_dtype",)), ("out_dtype", E4M3, ("out_dtype",)),
                             ("b_scale_layout", "32x1", ("b_scale_layout",)),
                             ("b_scale_layout", "32x32", ("b_scale",))))


MAX_POS = 16  # positions below 4, slots below 4: every cache below still holds them


def _cos_sin(g, rd, device):
    ang = torch.arange(MAX_POS, dtype=torch.float64)[:, None] * torch.rand(rd // 2, generator=g, dtype=torch.float64)
    return torch.cat([ang.cos(), ang.sin()], dim=1).to(FP32).to(device)


def _cos_sin_free(name, shape, rd):
    return name == "cos_sin_cache" and len(shape) == 2 and shape[1] == rd and shape[0] >= 4


def _rope_case(device, g):
    args = {"x": Arg(_rand(g, (3, 2, 32), BF16, device), (BF16, FP16), tied=("positions",)),
            "positions": Arg(torch.tensor([0, 3, 1], device=device), (torch.int64,), tied=("x",)),
            "cos_sin_cache": Arg(_cos_sin(g, 32, device), (FP32, BF16, FP16), tied=()),
            "rotary_dim": 32}

    def free(name, shape):
        # any number of heads, and any head size that holds the rotary dims
        return (name == "x" and len(shape) == 3 and shape[0] == 3 and shape[2] >= 32) or _cos_sin_free(name, shape, 32)
    return Case("rotary_embedding_neox", args, free=free,
                bad_scalars=(("rotary_dim", 0, ("rotary_dim",)), ("rotary_dim", 31, ("rotary_dim",)),
                             ("rotary_dim", 34, ("rotary_dim",)), ("rotary_dim", -2, ("rotary_dim",))))


def _cache(device, dtype=E4M3, shape=(4, 4, 2, 32)):
    return torch.full(shape, 0x55, dtype=U8).view(E4M3).to(device) if dtype == E4M3 else torch.full(shape, 3.0, dtype=dtype, device=device)


def _cache_case(device, g):
    kv = ("key", "value", "slot_mapping")
    args = {"key": Arg(_rand(g, (3, 2, 32), BF16, device), (BF16, FP16), tied=kv + ("key_cache",)),
            "value": Arg(_rand(g, (3, 2, 32), BF16, device), (BF16, FP16), tied=kv + ("key_cache", "value_cache")),
            "key_cache": Arg(_cache(device), (E4M3, BF16), inplace=True, tied=("key", "value_cache")),
            "value_cache": Arg(_cache(device), (E4M3, BF16), inplace=True, tied=("key_cache",)),
            "slot_mapping": Arg(torch.tensor([2, -1, 0], device=device), (torch.int64,), tied=kv),
            "k_scale": Arg(torch.tensor([0.75], device=device), (FP32,)),
            "v_scale": Arg(torch.tensor([0.125], device=device), (FP32,))}

    def free(name, shape):
        return name in ("k_scale", "v_scale") and math.prod(shape) == 1
    return Case("reshape_and_cache_flash", args, free=free)


def _front_case(device, g):
    hidden, hq, hkv, d, rd = 128, 2, 2, 32, 32  # no output gate: N = 2*32 + 2*2*32 = 192
    w = _rand(g, (192, hidden), BF16, "cpu", 0.05)
    packed, scales = OPS.mxfp6_pack(w)
    rows = ("x", "residual", "positions", "slot_mapping")
    args = {"x": Arg(_rand(g, (3, hidden), BF16, device), (BF16, FP16), tied=rows + ("input_norm_weight", "packed")),
            "residual": Arg(_rand(g, (3, hidden), BF16, device, 4.0), (BF16,), inplace=True, tied=("x",)),
            "input_norm_weight": Arg(_rand(g, (hidden,), BF16, device, 0.2), (BF16, FP32), tied=("x",)),
            "packed": Arg(packed.to(device), (U8,), tied=("scales", "x", "num_q_heads", "input_norm_weight")),
            "scales": Arg(scales.to(device), (U8,), tied=("packed",)),
            "q_norm_weight": Arg(_rand(g, (d,), BF16, device, 0.2), (BF16, FP32), tied=("head_dim",)),
            "k_norm_weight": Arg(_rand(g, (d,), BF16, device, 0.2), (BF16, FP32), tied=("head_dim",)),
            "cos_sin_cache": Arg(_cos_sin(g, rd, device), (FP32, BF16, FP16), tied=("rotary_dim",)),
            "positions": Arg(torch.tensor([0, 3, 1], device=device), (torch.int64,), tied=rows),
            "slot_mapping": Arg(torch.tensor([2, -1, 0], device=device), (torch.int64,), tied=rows),
            "key_cache": Arg(_cache(device), (E4M3, BF16), inplace=True, tied=("value_cache", "num_kv_heads", "head_dim")),
            "value_cache": Arg(_cache(device), (E4M3, BF16), inplace=True, tied=("key_cache",)),
            "k_scale": Arg(torch.tensor([0.75], device=device), (FP32,)),
            "v_scale": Arg(torch.tensor([0.125], device=device), (FP32,)),
            "workspace": Arg(torch.zeros(64, dtype=torch.int32, device=device), (torch.int32,), inplace=True)}
    kwargs = dict(num_q_heads=hq, num_kv_heads=hkv, head_dim=d, rotary_dim=rd, output_gate=False,
                  eps=1e-6, weight_offset=1.0)
    need = 1 * (192 // d + 1)

    def free(name, shape):
        return ((name == "workspace" and len(shape) == 1 and shape[0] >= need)
                or (name in ("k_scale", "v_scale") and math.prod(shape) == 1)
                or _cos_sin_free(name, shape, rd))
    heads = ("num_q_heads", "num_kv_heads", "packed", "head_dim")
    bad = (("num_q_heads", 0, ("num_q_heads",)), ("num_q_heads", 3, heads), ("num_q_heads", -2, ("num_q_heads",)),
           ("num_kv_heads", 0, ("num_kv_heads",)), ("num_kv_heads", 1, heads),
           ("head_dim", 0, ("head_dim",)), ("head_dim", 24, ("head_dim",)), ("head_dim", 64, heads + ("rotary_dim",)),
           ("rotary_dim", 0, ("rotary_dim",)), ("rotary_dim", 31, ("rotary_dim",)), ("rotary_dim", 64, ("rotary_dim",)),
           ("rotary_dim", 16, ("cos_sin_cache",)),
           ("output_gate", True, heads), ("eps", -1e-3, ("eps",)), ("eps", math.nan, ("eps",)),
           ("weight_offset", math.inf, ("weight_offset",)))
    return Case("attention_front", args, kwargs, free=free, bad_scalars=bad)


def _qk_case(device, g):
    """qk_norm_rope_cache (the steps after the qkv projection, one launch)."""
    hq, hkv, d, rd = 2, 2, 32, 32  # no output gate: N = 2*32 + 2*2*32 = 192
    rows = ("qkv", "positions", "slot_mapping")
    args = {"qkv": Arg(_rand(g, (3, 192), BF16, device), (BF16, FP16), tied=rows + ("num_q_heads",)),
            "q_norm_weight": Arg(_rand(g, (d,), BF16, device, 0.2), (BF16, FP32), tied=("head_dim",)),
            "k_norm_weight": Arg(_rand(g, (d,), BF16, device, 0.2), (BF16, FP32), tied=("head_dim",)),
            "cos_sin_cache": Arg(_cos_sin(g, rd, device), (FP32, BF16, FP16), tied=("rotary_dim",)),
            "positions": Arg(torch.tensor([0, 3, 1], device=device), (torch.int64,), tied=rows),
            "slot_mapping": Arg(torch.tensor([2, -1, 0], device=device), (torch.int64,), tied=rows),
            "key_cache": Arg(_cache(device), (E4M3, BF16), inplace=True, tied=("value_cache", "num_kv_heads", "head_dim")),
            "value_cache": Arg(_cache(device), (E4M3, BF16), inplace=True, tied=("key_cache",)),
            "k_scale": Arg(torch.tensor([0.75], device=device), (FP32,)),
            "v_scale": Arg(torch.tensor([0.125], device=device), (FP32,))}
    kwargs = dict(num_q_heads=hq, num_kv_heads=hkv, head_dim=d, rotary_dim=rd, output_gate=False,
                  eps=1e-6, weight_offset=1.0)

    def free(name, shape):
        return (name in ("k_scale", "v_scale") and math.prod(shape) == 1) or _cos_sin_free(name, shape, rd)
    heads = ("num_q_heads", "num_kv_heads", "qkv", "head_dim")
    bad = (("num_q_heads", 0, ("num_q_heads",)), ("num_q_heads", 3, heads), ("num_q_heads", -2, ("num_q_heads",)),
           ("num_kv_heads", 0, ("num_kv_heads",)), ("num_kv_heads", 1, heads),
           ("head_dim", 0, ("head_dim",)), ("head_dim", 7, ("head_dim",)), ("head_dim", 64, heads + ("rotary_dim",)),
           ("rotary_dim", 0, ("rotary_dim",)), ("rotary_dim", 31, ("rotary_dim",)), ("rotary_dim", 64, ("rotary_dim",)),
           ("rotary_dim", 16, ("cos_sin_cache",)),
           ("output_gate", True, heads), ("eps", -1e-3, ("eps",)), ("eps", math.nan, ("eps",)),
           ("weight_offset", math.inf, ("weight_offset",)))
    return Case("qk_norm_rope_cache", args, kwargs, free=free, bad_scalars=bad)


def _front_unfused_case(device, g):
    """The unfused composition (what attention_front runs on a GPU above 8 tokens or hidden 2048):
    it must refuse what the fused op refuses, by the same names, before its first op writes."""
    c = _front_case(device, g)
    del c.args["workspace"]
    return dataclasses.replace(c, op="attention_front_unfused", fn=mxfuse.attention_front_unfused,
                               op_name="attention_front")


def _front_wrapper_case(device, g):
    """``mxfuse.attention_front`` with its defaults (the per-device workspace, the measured choice of
    fused or unfused): the Python wrapper must not fail before the op can name the argument."""
    c = _front_unfused_case(device, g)
    return dataclasses.replace(c, op="attention_front_default", fn=mxfuse.attention_front)


def _front_three_case(device, g):
    """``mxfuse.attention_front(fused=False)``: the three-launch path runs attention_front's checks
    before its first op writes, and refuses by the same names."""
    c = _front_unfused_case(device, g)
    return dataclasses.replace(c, op="attention_front_three_launch",
                               fn=lambda *a, **k: mxfuse.attention_front(*a, **k, fused=False))


BUILDERS = {
    "gemma_rmsnorm": lambda d, g: _norm_case("gemma_rmsnorm", d, g),
    "gemma_fused_add_rmsnorm": lambda d, g: _norm_case("gemma_fused_add_rmsnorm", d, g),
    "gemma_rmsnorm_mxfp8": lambda d, g: _norm_case("gemma_rmsnorm_mxfp8", d, g),
    "gemma_fused_add_rmsnorm_mxfp8": lambda d, g: _norm_case("gemma_fused_add_rmsnorm_mxfp8", d, g),
    "mxfp8_quantize": _quantize_case,
    "mxfp8_dequantize": _dequantize_case,
    "mxfp6_pack": _pack_case,
    "mxfp6_unpack": _unpack_case,
    "mxfp6_round_": _round_case,
    "mxfp6_linear": _linear_case,
    "mxfp8_scaled_mm": _scaled_mm_case,
    "rotary_embedding_neox": _rope_case,
    "reshape_and_cache_flash": _cache_case,
    "attention_front": _front_case,
    "attention_front_unfused": _front_unfused_case,
    "attention_front_default": _front_wrapper_case,
    "attention_front_three_launch": _front_three_case,
    "qk_norm_rope_cache": _qk_case,
}


def build(op: str, device: str) -> Case:
    return BUILDERS[op](device, generator(7))


# --- changes of one argument -------------------------------------------------------------------

def _same_values(t: torch.Tensor, shape, strided=False, column_major=False, offset=False) -> torch.Tensor:
    """`t`'s values (or `t` cut or tiled to `shape`) in a new tensor of the given layout."""
    if len(shape) != t.dim():  # the values in order where the count allows, else zeros
        src = t.reshape(shape) if math.prod(shape) == t.numel() else None
    else:  # each dimension cut, or tiled with the values it has (zeros where it had none)
        src = t
        for dim, (have, want) in enumerate(zip(t.shape, shape)):
            if want > have:
                reps = [1] * t.dim()
                reps[dim] = -(-want // have) if have else 1
                src = src.repeat(*reps) if have else torch.zeros(
                    *[*src.shape[:dim], want, *src.shape[dim + 1:]], dtype=t.dtype, device=t.device)
            src = src.narrow(dim, 0, want)
    if strided:
        buf = torch.zeros(*shape[:-1], 2 * shape[-1], dtype=t.dtype, device=t.device)
        out = buf[..., ::2]
    elif column_major:
        out = torch.empty(*shape[:-2], shape[-1], shape[-2], dtype=t.dtype, device=t.device).transpose(-1, -2)
    elif offset:
        out = torch.empty(math.prod(shape) + 1, dtype=t.dtype, device=t.device)[1:].view(shape)
    else:
        out = torch.zeros(shape, dtype=t.dtype, device=t.device)
    if src is not None:
        out.copy_(src)
    return out


def _to_dtype(t: torch.Tensor, dtype) -> torch.Tensor:
    return torch.zeros(t.shape, dtype=dtype, device=t.device) if dtype in (E4M3, torch.bool) or t.dtype == E4M3 \
        else t.to(dtype)


def _shape_changes(shape):
    out = [(0, *shape), (*shape, 1)]
    if len(shape) >= 1:
        out.append(tuple(shape[1:]))
    if len(shape) >= 2:
        out.append((shape[0] * shape[1], *shape[2:]))
    for d, s in enumerate(shape):
        for new in {s + 1, s - 1, 2 * s, 0} - {s}:
            if new >= 0:
                out.append((*shape[:d], new, *shape[d + 1:]))
    return [tuple(o) for o in out]


def changes(case: Case, device: str):
    """(id, kind, name, apply(args, kwargs), names an error may give)."""
    out = []

    def add(cid, kind, name, new_value, names):  # a change that replaces one tensor's value
        out.append((cid, kind, name,
                    lambda args, kw: _set(args, name, new_value(args[name].value)), names))

    tensors = case.tensors()
    for name in tensors:
        a = case.args[name]
        t = a.value
        names = (name,)
        for dt in DTYPE_POOL:
            if dt not in a.dtypes:
                add(f"{name}:dtype={str(dt)[6:]}", "refuse", name,
                    lambda v, dt=dt: _to_dtype(v, dt), names)
        for shape in _shape_changes(tuple(t.shape)):
            if not case.free(name, shape):
                add(f"{name}:shape={list(shape)}", "refuse", name,
                    lambda v, s=shape: _same_values(v, s), names + a.tied)
        if t.dim() >= 1 and t.shape[-1] > 1:
            add(f"{name}:strided", "layout", name,
                lambda v: _same_values(v, v.shape, strided=True), names)
        if t.dim() >= 2 and t.shape[-1] > 1 and t.shape[-2] > 1:
            add(f"{name}:column_major", "layout", name,
                lambda v: _same_values(v, v.shape, column_major=True), names)
        if t.numel() > 0:
            add(f"{name}:offset", "layout", name,
                lambda v: _same_values(v, v.shape, offset=True), names)
        # Stride 0: the first row (or element) repeated. A written tensor must refuse it; an input
        # may take it (compared with a dense copy). Not for slot_mapping: tokens sharing a slot
        # are the caller's error, and the GPU's write order between them is not defined.
        if name != "slot_mapping":
            for d in range(t.dim()):
                if t.shape[d] > 1:
                    add(f"{name}:broadcast_dim{d}", "refuse" if a.inplace else "layout", name,
                        lambda v, d=d: _broadcast(v, d), names)
        if a.inplace and t.dim() == 2 and t.shape[0] > 1 and t.shape[1] > 1:
            add(f"{name}:rows_overlap", "refuse", name, _overlapping_rows, names)
        if a.inplace and t.is_floating_point():
            for mode in ("grad_mode", "no_grad"):
                add(f"{name}:requires_grad:{mode}", "refuse", name,
                    lambda v: v.clone().requires_grad_(True), names)
        if a.inplace:
            for other in tensors:
                o = case.args[other].value
                if other != name and o.numel() * o.element_size() <= t.numel() * t.element_size():
                    out.append((f"{name}:shares_memory_with={other}", "refuse", name,
                                lambda args, kw, n=name, o=other: _alias(args, n, o), (name, other)))
        if len(tensors) > 1:
            other_dev = "cpu" if device == "cuda" else "meta"
            add(f"{name}:device={other_dev}", "refuse", name,
                lambda v, dv=other_dev: v.to(dv), names)
    for sname, value, names in case.bad_scalars:

        def set_scalar(args, kw, n=sname, v=value):
            (kw if n in kw else args)[n] = v
        out.append((f"{sname}={value!r}", "refuse", sname, set_scalar, names))
    return out


def _overlapping_rows(t: torch.Tensor) -> torch.Tensor:
    rows, n = t.shape
    buf = torch.zeros(rows * n, dtype=t.dtype, device=t.device)
    return buf.as_strided((rows, n), (n // 2, 1))


def _broadcast(t: torch.Tensor, dim: int) -> torch.Tensor:
    return t.narrow(dim, 0, 1).expand(t.shape)


# c10's names of the dtypes, as the errors print them
C10_NAMES = {BF16: "BFloat16", FP16: "Half", FP32: "Float", torch.float64: "Double", E4M3: "Float8_e4m3fn",
             U8: "Byte", torch.int8: "Char", torch.int32: "Int", torch.int64: "Long", torch.bool: "Bool"}


def _given_value(cid: str, args: dict, kwargs: dict, name: str):
    """Patterns of which one must be in the error of a dtype, shape or scalar change: the dtype
    given, the shape given (or the changed size alone), the scalar value; None for other changes."""
    if ":" not in cid:  # a scalar: the value the change set
        value = kwargs[name] if name in kwargs else args[name]
        if isinstance(value, torch.dtype):
            return [rf"\b{C10_NAMES[value]}\b"]
        if isinstance(value, float):
            return [re.escape("%g" % value)]
        return [rf"(?<![\w.]){re.escape(str(value))}(?![\w.])"]
    kind = cid.split(":", 1)[1]
    if kind.startswith("dtype="):
        return [rf"\b{C10_NAMES[args[name].value.dtype]}\b"]
    if kind.startswith("shape="):
        shape = list(args[name].value.shape)
        pats = [re.escape(str(shape)), re.escape(str(tuple(shape)))]
        return pats + [rf"(?<![\d.]){s}(?![\d.])" for s in shape]
    return None


def _set(args, name, value):
    args[name] = dataclasses.replace(args[name], value=value)


def _alias(args, inplace_name, other):
    """`other`'s values, placed at the start of the in-place argument's memory."""
    w, o = args[inplace_name].value, args[other].value
    view = w.reshape(-1).view(U8)[: o.numel() * o.element_size()].view(o.dtype).view(o.shape)
    view.copy_(o)
    _set(args, other, view)


# --- the check ---------------------------------------------------------------------------------

def _fresh(case: Case) -> dict:
    """The case's arguments with fresh copies of every in-place tensor."""
    return {n: (dataclasses.replace(a, value=a.value.clone()) if isinstance(a, Arg) and a.inplace else a)
            for n, a in case.args.items()}


def _bits(t: torch.Tensor) -> torch.Tensor:
    return int_view(t.detach().contiguous().reshape(-1)).cpu() if t.dtype != torch.bool else t.reshape(-1).cpu()


def _flat_outputs(res) -> list[torch.Tensor]:
    if res is None:
        return []
    return list(res) if isinstance(res, (tuple, list)) else [res]


def _cases():
    params = []
    for device in DEVICES:  # the cuda ids are listed here too (skipped without a GPU)
        dev = device if isinstance(device, str) else device.values[0]
        marks = () if isinstance(device, str) else device.marks
        for op in BUILDERS:
            for cid, kind, _, _, _ in changes(build(op, "cpu"), dev):
                params.append(pytest.param(op, dev, cid, kind, id=f"{dev}-{op}-{cid}", marks=marks))
    return params


@pytest.mark.parametrize("op,device,cid,kind", _cases())
def test_one_argument_changed(op, device, cid, kind):
    case = build(op, device)
    found = [c for c in changes(case, device) if c[0] == cid]
    assert len(found) == 1, f"change {cid} not found for {op}"
    _, kind, name, apply, names = found[0]

    args, kwargs = _fresh(case), dict(case.kwargs)
    apply(args, kwargs)
    if kind == "layout":  # the answer it must give if it takes the call: that of a dense copy
        want_args = {n: (dataclasses.replace(a, value=a.value.contiguous().clone())
                         if isinstance(a, Arg) and a.value is not None and (a.inplace or n == name) else a)
                     for n, a in args.items()}
        want = _flat_outputs(case.call(want_args, dict(kwargs)))
        want_inplace = {n: a.value for n, a in want_args.items() if isinstance(a, Arg) and a.inplace}
    inplace = {n: a.value for n, a in args.items() if isinstance(a, Arg) and a.inplace and not a.value.is_meta}
    before = {n: _bits(t) for n, t in inplace.items()}
    try:
        with torch.no_grad() if cid.endswith(":no_grad") else contextlib.nullcontext():
            got = _flat_outputs(case.call(args, kwargs))
    except ERRORS as e:
        text = str(e)
        assert any(f"'{n}'" in text for n in names), (
            f"{op}, {cid}: the error names none of {names}: {text[:400]}")
        got_value = _given_value(cid, args, kwargs, name)
        if got_value is not None and (":" in cid or f"'{name}'" in text):  # what was given, as the error must say it
            assert any(re.search(v, text) for v in got_value), (
                f"{op}, {cid}: the error does not say what was given ({got_value}): {text[:400]}")
        if not cid.endswith("=meta"):  # the fakes' errors (torch.compile's) carry no op name
            assert f"mxfuse.{case.op_name or op}" in text, f"{op}, {cid}: the error does not name the op: {text[:400]}"
        for n, t in inplace.items():
            assert torch.equal(_bits(t), before[n]), f"{op}, {cid}: in-place '{n}' changed by a refused call"
        if device == "cuda":
            torch.cuda.synchronize()  # no sticky error behind the refusal
        return
    assert kind == "layout", f"{op}, {cid}: accepted silently (outputs {[tuple(o.shape) for o in got]})"
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.shape == b.shape and torch.equal(_bits(a), _bits(b)), f"{op}, {cid}: output {i} differs"
    for n, t in inplace.items():
        assert torch.equal(_bits(t), _bits(want_inplace[n])), f"{op}, {cid}: in-place '{n}' differs"
