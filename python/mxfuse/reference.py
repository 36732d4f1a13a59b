"""Pure-PyTorch reference of every mxfuse op, written from SPEC.md (not from csrc/).

The methods deliberately differ from csrc/core so that a shared misreading of the spec is less
likely to hide in both:

- E4M3 elements: torch's own ``.to(torch.float8_e4m3fn)`` (RNE with subnormals) after clamping the
  scaled value to +-448 (torch's e4m3fn conversion would turn 464..480 into NaN, SPEC wants
  satfinite); non-finite blocks are then overwritten with the SPEC §2 NaN block.
- E2M3 elements: nearest-value search over the table of the 32 magnitudes, ties to the even code.
- E8M0 scale: integer exponent/mantissa fields of the fp32 amax (``.view(torch.int32)``).
- bf16/fp16 rounding: torch ``.to()``.
- Sum of squares: the canonical 256-lane order of SPEC §3, vectorized over rows and lanes; fp32
  torch ops only (every constant is an fp32 tensor so no float64 arithmetic sneaks in). fp32
  add/mul/div of torch are correctly rounded; its CPU sqrt is not, see ``sqrt_rn``.

The norm + MXFP8 functions have no data-dependent Python control flow, so they run under
``torch.compile`` (a benchmark compiles ``gemma_fused_add_rmsnorm_mxfp8`` as a baseline). The MXFP6
functions check for non-finite weights on the host (SPEC §2) and are eager only. The GEMM
references compute in float64 and return float64: compare kernels against them with a tolerance.
"""

from __future__ import annotations

import torch
from torch import Tensor

MX_BLOCK = 32
CHUNK = 8  # elements per chunk of the canonical reduction (SPEC §3)
LANES = 256  # virtual lanes of the canonical reduction

E4M3_MAX = 448.0
E2M3_MAX = 7.5
E8M0_NAN = 0xFF
E4M3_NAN_CODE = 0x7F

_F32_ABS = 0x7FFFFFFF
_F32_INF_BITS = 0x7F800000
_F32_MIN_NORMAL_BITS = 0x00800000
_ACT_DTYPES = (torch.bfloat16, torch.float16)

# (emax, fp32 mantissa field of Vmax / 2^emax): 448 = 1.75 * 2^8, 7.5 = 1.875 * 2^2.
_E4M3_VMAX_FIELDS = (8, 0x600000)
_E2M3_VMAX_FIELDS = (2, 0x700000)


def widen(t: Tensor) -> Tensor:
    """Exact bf16/fp16/fp32 -> fp32 through the bit fields.

    Same values as ``t.to(torch.float32)``, but inductor cannot fuse it away: it elides a
    ``.to(bf16).to(float32)`` pair inside one kernel (unless ``emulate_precision_casts``), which
    would skip the rounding SPEC §3 requires between the residual add, the norm and the quantizer.
    """
    if t.dtype == torch.float32:
        return t
    b = t.view(torch.int16).to(torch.int32) & 0xFFFF
    if t.dtype == torch.bfloat16:
        return (b << 16).view(torch.float32)
    if t.dtype != torch.float16:
        raise ValueError(f"expected bfloat16, float16 or float32, got {t.dtype}")
    sign = (b & 0x8000) << 16
    e = (b >> 10) & 0x1F
    m = b & 0x3FF
    normal = sign | ((e + 112) << 23) | (m << 13)
    special = sign | 0x7F800000 | (m << 13)  # Inf, NaN (payload kept)
    subnormal = (m.to(torch.float32) * (2.0**-24)).view(torch.int32) | sign  # exact
    bits = torch.where(e == 0, subnormal, torch.where(e == 31, special, normal))
    return bits.view(torch.float32)


def _f32(value: float, like: Tensor) -> Tensor:
    """A 0-d fp32 tensor (one RNE rounding of the Python float), on ``like``'s device."""
    return torch.full((), value, dtype=torch.float32, device=like.device)


# --- E8M0 scales ---------------------------------------------------------------------------------


def e8m0_scale_from_amax_bits(amax_bits: Tensor, rule: str, fmt: str = "e4m3") -> Tensor:
    """Scale bytes (int32, 0..255) from int32 bit patterns of the blocks' fp32 amax (SPEC §2).

    amax = m * 2^E, m in [1, 2) after clamping below at FLT_MIN. "ceil": the smallest k with
    amax <= Vmax * 2^(k-127); with Vmax = mv * 2^emax that is E - emax + 127, plus one when
    m > mv. "floor": E - emax + 127. Both clamped to [0, 254]; any NaN/Inf amax gives 0xFF.
    """
    emax, vmax_mant = {"e4m3": _E4M3_VMAX_FIELDS, "e2m3": _E2M3_VMAX_FIELDS}[fmt]
    if rule not in ("ceil", "floor"):
        raise ValueError(f"scale_rule must be 'ceil' or 'floor', got {rule!r}")
    nonfinite = amax_bits >= _F32_INF_BITS
    a = torch.clamp(amax_bits, min=_F32_MIN_NORMAL_BITS)
    exponent = (a >> 23) - 127
    sb = exponent - emax + 127
    if rule == "ceil":
        sb = sb + ((a & 0x7FFFFF) > vmax_mant).to(torch.int32)
    sb = torch.clamp(sb, 0, 254)
    return torch.where(nonfinite, torch.full_like(sb, E8M0_NAN), sb)


def _pow2_f32(k: Tensor) -> Tensor:
    """2^k as fp32 for integer k in [-127, 127] (2^-127 is the subnormal 0x00400000)."""
    k = torch.clamp(k, -127, 127)
    bits = torch.where(k >= -126, (k + 127) << 23, torch.full_like(k, 0x00400000))
    return bits.view(torch.float32)


def _block_amax_bits(v32: Tensor) -> Tensor:
    """int32 bits of max |v| over the last dim; NaN/Inf anywhere give bits >= 0x7F800000."""
    return (v32.view(torch.int32) & _F32_ABS).amax(dim=-1)


# --- E4M3 / MXFP8 --------------------------------------------------------------------------------


def mxfp8_quantize(x: Tensor, scale_rule: str = "ceil") -> tuple[Tensor, Tensor]:
    """Reference of ``mxfuse.mxfp8_quantize``: codes float8_e4m3fn [..., K], scales uint8
    [..., K/32]."""
    k = x.shape[-1]
    if k % MX_BLOCK != 0:
        raise ValueError(f"the last dimension of 'x' must be a multiple of 32, got {k}")
    v = widen(x).reshape(*x.shape[:-1], k // MX_BLOCK, MX_BLOCK)
    sb = e8m0_scale_from_amax_bits(_block_amax_bits(v), scale_rule, "e4m3")
    scaled = v * _pow2_f32(127 - sb).unsqueeze(-1)
    codes = scaled.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
    nan_block = (sb == E8M0_NAN).unsqueeze(-1)
    codes = torch.where(nan_block, torch.full_like(codes, E4M3_NAN_CODE), codes)
    return (
        codes.reshape(x.shape).view(torch.float8_e4m3fn),
        sb.to(torch.uint8).reshape(*x.shape[:-1], k // MX_BLOCK),
    )


def mxfp8_dequantize(
    codes: Tensor, scales: Tensor, out_dtype: torch.dtype = torch.bfloat16
) -> Tensor:
    """Reference of ``mxfuse.mxfp8_dequantize``: code value * 2^(sb-127), rounded once to out_dtype.

    The fp32 product is exact (4 significant bits, smallest magnitude 2^-136), so rounding it is
    the one rounding of the exact value. NaN where sb = 0xFF or the code is 0x7F/0xFF.
    """
    k = codes.shape[-1]
    vals = codes.view(torch.float8_e4m3fn).to(torch.float32)
    vals = vals.reshape(*codes.shape[:-1], k // MX_BLOCK, MX_BLOCK)
    sb = scales.to(torch.int32)
    factor = torch.where(
        sb == E8M0_NAN, torch.full((), float("nan"), device=codes.device), _pow2_f32(sb - 127)
    )
    return (vals * factor.unsqueeze(-1)).reshape(codes.shape).to(out_dtype)


# --- Gemma RMSNorm -------------------------------------------------------------------------------


def canonical_sumsq(s: Tensor) -> Tensor:
    """Sum of squares of each row of fp32 ``s`` [M, N] in the canonical order of SPEC §3 -> [M].

    Chunk c (8 elements, zero padded) belongs to lane c % 256; lane l runs over its chunks in
    increasing order and over their elements in index order, acc = acc + s_e*s_e, each op an fp32
    rounding. The padding adds +0 to a partial that is never -0, which changes nothing. Then the
    butterfly p[l] += p[l + d] for d = 128, ..., 1.
    """
    m, n = s.shape
    chunks = -(-n // CHUNK)
    rounds = max(1, -(-chunks // LANES))
    sp = torch.nn.functional.pad(s, (0, rounds * LANES * CHUNK - n)).reshape(
        m, rounds, LANES, CHUNK
    )
    sq = sp * sp
    p = torch.zeros(m, LANES, dtype=torch.float32, device=s.device)
    for r in range(rounds):
        for j in range(CHUNK):
            p = p + sq[:, r, :, j]
    d = LANES // 2
    while d >= 1:
        p = p[:, :d] + p[:, d : 2 * d]
        d //= 2
    return p[:, 0]


def sqrt_rn(t: Tensor) -> Tensor:
    """Correctly rounded fp32 sqrt. torch's CPU sqrt is not (torch 2.13, AVX-512 build: it misses
    by one ulp near rounding midpoints, about 0.6% of random inputs). Starting from it, step to the
    neighbour whose rounding interval holds t; the test is exact in float64 (a midpoint of fp32
    neighbours has 25 significant bits, its square 50), and t is never exactly a midpoint's
    square."""
    c = torch.sqrt(t)
    inf = torch.full_like(c, float("inf"))
    up = torch.nextafter(c, inf)
    down = torch.nextafter(c, torch.zeros_like(c))
    c64, t64 = c.to(torch.float64), t.to(torch.float64)
    hi_mid = (c64 + up.to(torch.float64)) * 0.5
    lo_mid = (c64 + down.to(torch.float64)) * 0.5
    fix = (t > 0) & (t < inf)
    c = torch.where(fix & (t64 > hi_mid * hi_mid), up, c)
    return torch.where(fix & (t64 < lo_mid * lo_mid), down, c)


def _check_norm_args(x: Tensor, weight: Tensor) -> None:
    if x.dtype not in _ACT_DTYPES:
        raise ValueError(f"'x' must be bfloat16 or float16, got {x.dtype}")
    if weight.dtype not in (x.dtype, torch.float32):
        raise ValueError(f"'weight' must have the dtype of 'x' or float32, got {weight.dtype}")
    if weight.shape != (x.shape[-1],):
        raise ValueError(f"'weight' must have shape [{x.shape[-1]}], got {tuple(weight.shape)}")


def _norm_rows(
    s32: Tensor, weight: Tensor, eps: float, weight_offset: float, act_dtype: torch.dtype
) -> Tensor:
    """Steps 2-4 of SPEC §3 on fp32 rows [M, N] holding act_dtype values; returns act_dtype y."""
    n = s32.shape[-1]
    total = canonical_sumsq(s32)
    ms = total / _f32(float(n), s32)
    rstd = _f32(1.0, s32) / sqrt_rn(ms + _f32(eps, s32))
    w_plus = widen(weight) + _f32(weight_offset, s32)
    return ((s32 * rstd.unsqueeze(-1)) * w_plus).to(act_dtype)


def gemma_rmsnorm(
    x: Tensor, weight: Tensor, eps: float = 1e-6, weight_offset: float = 1.0
) -> Tensor:
    """Reference of ``mxfuse.gemma_rmsnorm`` (any leading dims; contiguous result)."""
    _check_norm_args(x, weight)
    n = x.shape[-1]
    s32 = widen(x.reshape(-1, n))
    return _norm_rows(s32, weight, eps, weight_offset, x.dtype).reshape(x.shape)


def residual_add(x: Tensor, residual: Tensor) -> Tensor:
    """round_dtype(x + residual) with one fp32 add (SPEC §3 step 1); returns a new tensor."""
    return (widen(x) + widen(residual)).to(x.dtype)


def gemma_fused_add_rmsnorm(
    x: Tensor, residual: Tensor, weight: Tensor, eps: float = 1e-6, weight_offset: float = 1.0
) -> Tensor:
    """Reference of ``mxfuse.gemma_fused_add_rmsnorm``: residual <- round(x + residual) in place;
    returns the norm of the new residual."""
    _check_norm_args(x, weight)
    s = residual_add(x, residual)
    residual.copy_(s)
    return gemma_rmsnorm(s, weight, eps, weight_offset)


def gemma_rmsnorm_mxfp8(
    x: Tensor,
    weight: Tensor,
    eps: float = 1e-6,
    weight_offset: float = 1.0,
    scale_rule: str = "ceil",
) -> tuple[Tensor, Tensor]:
    """Reference of ``mxfuse.gemma_rmsnorm_mxfp8``: MXFP8 of the norm rounded to x's dtype."""
    return mxfp8_quantize(gemma_rmsnorm(x, weight, eps, weight_offset), scale_rule)


def gemma_fused_add_rmsnorm_mxfp8(
    x: Tensor,
    residual: Tensor,
    weight: Tensor,
    eps: float = 1e-6,
    weight_offset: float = 1.0,
    scale_rule: str = "ceil",
) -> tuple[Tensor, Tensor]:
    """Reference of ``mxfuse.gemma_fused_add_rmsnorm_mxfp8`` (residual updated in place)."""
    y = gemma_fused_add_rmsnorm(x, residual, weight, eps, weight_offset)
    return mxfp8_quantize(y, scale_rule)


# --- E2M3 / MXFP6 --------------------------------------------------------------------------------

FP6_TILE_ROWS = 16
FP6_TILE_COLS = 128
FP6_GROUP_BYTES = 24
FP6_TILE_BYTES = 1536


def e2m3_magnitudes(device: torch.device | str = "cpu") -> Tensor:
    """The 32 E2M3 magnitudes by code (float64): bias 1, subnormals m * 2^-3, max 7.5."""
    vals = []
    for code in range(32):
        e, m = code >> 3, code & 7
        vals.append(m / 8.0 if e == 0 else (1.0 + m / 8.0) * 2.0 ** (e - 1))
    return torch.tensor(vals, dtype=torch.float64, device=device)


def e2m3_encode(v: Tensor) -> Tensor:
    """fp32 values -> E2M3 codes (uint8, sign in bit 5): nearest table value, ties to the even
    code, saturating at 7.5. The sign of the input is kept (including on zero results)."""
    table = e2m3_magnitudes(v.device)
    a = v.to(torch.float64).abs()
    hi = torch.searchsorted(table, a).clamp(max=31)  # first table value >= a (or the last)
    lo = (hi - 1).clamp(min=0)
    d_hi = (table[hi] - a).abs()
    d_lo = (a - table[lo]).abs()
    pick_lo = (d_lo < d_hi) | ((d_lo == d_hi) & (lo % 2 == 0))
    code = torch.where(pick_lo, lo, hi)
    code = torch.where(a >= E2M3_MAX, torch.full_like(code, 31), code)
    return (code + torch.signbit(v).to(code.dtype) * 32).to(torch.uint8)


def e2m3_decode(codes: Tensor) -> Tensor:
    """E2M3 codes (uint8) -> exact fp32 values."""
    table = e2m3_magnitudes(codes.device).to(torch.float32)
    c = codes.to(torch.int64)
    mag = table[c & 31]
    return torch.where((c & 32) != 0, -mag, mag)


def mxfp6_quantize_groups(w: Tensor, scale_rule: str = "floor") -> tuple[Tensor, Tensor]:
    """W [N, K] -> (E2M3 codes uint8 [N, K], E8M0 scales uint8 [N, K/32]), unpacked (SPEC §2)."""
    n, k = w.shape
    v = widen(w).reshape(n, k // MX_BLOCK, MX_BLOCK)
    if not bool(torch.isfinite(v).all()):
        raise ValueError("mxfp6: the weight holds a non-finite value (E2M3 has no NaN/Inf)")
    sb = e8m0_scale_from_amax_bits(_block_amax_bits(v), scale_rule, "e2m3")
    codes = e2m3_encode(v * _pow2_f32(127 - sb).unsqueeze(-1))
    return codes.reshape(n, k), sb.to(torch.uint8)


def _check_fp6_shape(n: int, k: int) -> None:
    if n % FP6_TILE_ROWS != 0 or k % FP6_TILE_COLS != 0:
        raise ValueError(f"mxfp6 weights need N % 16 == 0 and K % 128 == 0, got [{n}, {k}]")


def pack_fp6_codes(codes: Tensor) -> Tensor:
    """E2M3 codes [N, K] -> packed uint8 [N/16, K/128, 1536] in the layout of SPEC §4.

    Bit 6i+j of a group's 192-bit little-endian word is bit j of code i; byte b of the group holds
    bits 8b..8b+7. Built through an explicit bit matrix rather than shifts of code quads.
    """
    n, k = codes.shape
    _check_fp6_shape(n, k)
    dev = codes.device
    groups = codes.to(torch.int64).reshape(n, k // MX_BLOCK, MX_BLOCK)
    bits = (groups.unsqueeze(-1) >> torch.arange(6, device=dev)) & 1  # [N, G, 32, 6]
    bits = bits.reshape(n, k // MX_BLOCK, FP6_GROUP_BYTES, 8)
    group_bytes = (bits << torch.arange(8, device=dev)).sum(-1)  # [N, G, 24]
    tiles = group_bytes.reshape(
        n // FP6_TILE_ROWS, FP6_TILE_ROWS, k // FP6_TILE_COLS, 4, FP6_GROUP_BYTES
    ).permute(0, 2, 1, 3, 4)
    return tiles.reshape(n // FP6_TILE_ROWS, k // FP6_TILE_COLS, FP6_TILE_BYTES).to(torch.uint8)


def unpack_fp6_codes(packed: Tensor) -> Tensor:
    """Packed uint8 [N/16, K/128, 1536] -> E2M3 codes uint8 [N, K] (inverse of pack_fp6_codes)."""
    tn, tk, tb = packed.shape
    if tb != FP6_TILE_BYTES:
        raise ValueError(f"packed must be [N/16, K/128, 1536], got {tuple(packed.shape)}")
    dev = packed.device
    t = packed.to(torch.int64).reshape(tn, tk, FP6_TILE_ROWS, 4, FP6_GROUP_BYTES)
    group_bytes = t.permute(0, 2, 1, 3, 4).reshape(tn * FP6_TILE_ROWS, tk * 4, FP6_GROUP_BYTES)
    bits = (group_bytes.unsqueeze(-1) >> torch.arange(8, device=dev)) & 1  # [N, G, 24, 8]
    bits = bits.reshape(tn * FP6_TILE_ROWS, tk * 4, MX_BLOCK, 6)
    codes = (bits << torch.arange(6, device=dev)).sum(-1)
    return codes.reshape(tn * FP6_TILE_ROWS, tk * FP6_TILE_COLS).to(torch.uint8)


def mxfp6_pack(w: Tensor, scale_rule: str = "floor") -> tuple[Tensor, Tensor]:
    """Reference of ``mxfuse.mxfp6_pack``: packed uint8 [N/16, K/128, 1536], scales uint8
    [N, K/32]."""
    if w.dim() != 2:
        raise ValueError(f"mxfp6_pack: 'w' must be 2-D [N, K], got shape {tuple(w.shape)}")
    _check_fp6_shape(*w.shape)
    codes, scales = mxfp6_quantize_groups(w, scale_rule)
    return pack_fp6_codes(codes), scales


def mxfp6_dequantize_codes(codes: Tensor, scales: Tensor, out_dtype: torch.dtype) -> Tensor:
    """E2M3 codes [N, K] and scales [N, K/32] -> values in out_dtype (exact fp32 product, one
    rounding; NaN where a scale is 0xFF)."""
    n, k = codes.shape
    vals = e2m3_decode(codes).reshape(n, k // MX_BLOCK, MX_BLOCK)
    sb = scales.to(torch.int32)
    factor = torch.where(
        sb == E8M0_NAN, torch.full((), float("nan"), device=codes.device), _pow2_f32(sb - 127)
    )
    return (vals * factor.unsqueeze(-1)).reshape(n, k).to(out_dtype)


def mxfp6_unpack(packed: Tensor, scales: Tensor, out_dtype: torch.dtype = torch.bfloat16) -> Tensor:
    """Reference of ``mxfuse.mxfp6_unpack``: the [N, K] values the packed weight holds."""
    return mxfp6_dequantize_codes(unpack_fp6_codes(packed), scales, out_dtype)


def mxfp6_round_(w: Tensor, scale_rule: str = "floor") -> Tensor:
    """Reference of ``mxfuse.mxfp6_round_``: w <- the exact values of its MXFP6 copy."""
    packed, scales = mxfp6_pack(w, scale_rule)
    w.copy_(mxfp6_unpack(packed, scales, w.dtype))
    return w


def mxfp6_linear(x: Tensor, packed: Tensor, scales: Tensor, bias: Tensor | None = None) -> Tensor:
    """Reference of ``mxfuse.mxfp6_linear`` in float64: sum_k x[..., k] * W6[n, k] (+ bias).

    Returns float64 [..., N] (no final rounding): kernels accumulate in fp32 in their own order,
    so compare with a tolerance derived from the output rounding (SPEC §5).
    """
    w6 = mxfp6_unpack(packed, scales, torch.float32).to(torch.float64)
    out = widen(x).to(torch.float64) @ w6.t()
    if bias is not None:
        out = out + bias.to(torch.float64)
    return out


def _b_scale_rows(b: Tensor, b_scale: Tensor, b_scale_layout: str | None) -> Tensor:
    """b_scale expanded to one row per weight row ([N, K/32])."""
    n, k = b.shape
    if b_scale_layout is None:  # the reference may tell the layouts apart by shape (for N > 0)
        b_scale_layout = "1x32" if b_scale.shape == (n, k // MX_BLOCK) else "32x32"
    if b_scale_layout == "1x32" and b_scale.shape == (n, k // MX_BLOCK):
        return b_scale
    if b_scale_layout == "32x32" and b_scale.shape == (n // MX_BLOCK, k // MX_BLOCK) and n % MX_BLOCK == 0:
        return b_scale.repeat_interleave(MX_BLOCK, dim=0)
    raise ValueError(f"b_scale must be [N, K/32] (1x32) or [N/32, K/32] (32x32), got "
                     f"{tuple(b_scale.shape)} for layout {b_scale_layout!r}")


def mxfp8_scaled_mm(
    a: Tensor, a_scale: Tensor, b: Tensor, b_scale: Tensor, bias: Tensor | None = None,
    b_scale_layout: str | None = None,
) -> Tensor:
    """Reference of the SPEC §5 MXFP8 GEMM in float64 (no final rounding).

    b_scale is [N, K/32] (1x32 blocks) or [N/32, K/32] (32x32 blocks); for N > 0 the two shapes
    differ, so the reference may tell them apart by shape (the op takes the layout explicitly).
    """
    a64 = mxfp8_dequantize(a, a_scale, torch.float32).to(torch.float64)
    b64 = mxfp8_dequantize(b, _b_scale_rows(b, b_scale, b_scale_layout), torch.float32).to(torch.float64)
    out = a64 @ b64.t()
    if bias is not None:
        out = out + bias.to(torch.float64)
    return out


def mxfp8_scaled_mm_blockwise(
    a: Tensor, a_scale: Tensor, b: Tensor, b_scale: Tensor, out_dtype: torch.dtype,
    bias: Tensor | None = None, b_scale_layout: str | None = None,
) -> Tensor:
    """mxfuse's summation order of the MXFP8 GEMM (docs/DECISIONS.md), rounded to ``out_dtype``.

    Per K block j: dot_j = fp32 sum of the 32 code products, left to right (each product exact);
    term_j = dot_j * 2^(sa + sb - 254) rounded once (here: exact in float64, then one conversion to
    fp32), NaN if either scale byte is 0xFF; the terms added in fp32 in K order, then the bias in
    fp32, one rounding. Vectorized over (M, N); fp32 torch ops only, apart from the float64 scaling.
    """
    m, k = a.shape
    n = b.shape[0]
    blocks = k // MX_BLOCK
    b_rows = _b_scale_rows(b, b_scale, b_scale_layout)
    av = a.view(torch.float8_e4m3fn).to(torch.float32).reshape(m, 1, blocks, MX_BLOCK)
    bv = b.view(torch.float8_e4m3fn).to(torch.float32).reshape(1, n, blocks, MX_BLOCK)
    dot = torch.zeros(m, n, blocks, dtype=torch.float32)
    for i in range(MX_BLOCK):
        dot = dot + av[..., i] * bv[..., i]
    sa = a_scale.to(torch.int64).reshape(m, 1, blocks)
    sb = b_rows.to(torch.int64).reshape(1, n, blocks)
    term = (dot.to(torch.float64) * torch.pow(2.0, (sa + sb - 254).to(torch.float64))).to(torch.float32)
    term = torch.where((sa == E8M0_NAN) | (sb == E8M0_NAN), torch.tensor(float("nan")), term)
    acc = torch.zeros(m, n, dtype=torch.float32)
    for j in range(blocks):
        acc = acc + term[..., j]
    if bias is not None:
        acc = acc + bias.to(torch.float32)
    return acc.to(out_dtype)


# --- attention front (SPEC §6) ----------------------------------------------------------------------

def rotary_embedding_neox(x: Tensor, positions: Tensor, cos_sin_cache: Tensor, rotary_dim: int) -> Tensor:
    """Reference of ``mxfuse.rotary_embedding_neox``: x [M, H, D]; for i < h = rotary_dim / 2,
    o_i = round(x_i*c - x_{i+h}*s), o_{i+h} = round(x_{i+h}*c + x_i*s), every product rounded to
    fp32 on its own; dims past rotary_dim pass through."""
    h = rotary_dim // 2
    cs = cos_sin_cache.to(torch.float32)[positions]  # [M, rotary_dim]
    c, s = cs[:, None, :h], cs[:, None, h:rotary_dim]
    lo, hi = x[..., :h].to(torch.float32), x[..., h:rotary_dim].to(torch.float32)
    out = x.clone(memory_format=torch.contiguous_format)
    out[..., :h] = ((lo * c) - (hi * s)).to(x.dtype)
    out[..., h:rotary_dim] = ((hi * c) + (lo * s)).to(x.dtype)
    return out


def kv_cache_codes(v: Tensor, scale: float) -> Tensor:
    """e4m3_satfinite(float(v) / scale) as uint8 codes: RNE, +-448 past the range, 0x7F for NaN."""
    q = (v.to(torch.float32) / torch.tensor(scale, dtype=torch.float32)).clamp(-448.0, 448.0)
    codes = q.to(torch.float8_e4m3fn).view(torch.uint8).clone()
    codes[torch.isnan(q)] = 0x7F
    return codes


def reshape_and_cache_flash(key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor,
                            slot_mapping: Tensor, k_scale: Tensor, v_scale: Tensor) -> None:
    """Reference of ``mxfuse.reshape_and_cache_flash`` (vLLM semantics; a slot < 0 writes nothing)."""
    fp8 = key_cache.dtype == torch.float8_e4m3fn
    flat_k = key_cache.view(-1, *key_cache.shape[2:])
    flat_v = value_cache.view(-1, *value_cache.shape[2:])
    for m, slot in enumerate(slot_mapping.tolist()):
        if slot < 0:
            continue
        if fp8:
            flat_k.view(torch.uint8)[slot] = kv_cache_codes(key[m], float(k_scale.item()))
            flat_v.view(torch.uint8)[slot] = kv_cache_codes(value[m], float(v_scale.item()))
        else:
            flat_k[slot] = key[m]
            flat_v[slot] = value[m]


def attention_front_from_qkv(qkv: Tensor, q_norm_weight: Tensor, k_norm_weight: Tensor,
                             cos_sin_cache: Tensor, positions: Tensor, slot_mapping: Tensor,
                             key_cache: Tensor, value_cache: Tensor, k_scale: Tensor, v_scale: Tensor,
                             *, num_q_heads: int, num_kv_heads: int, head_dim: int, rotary_dim: int,
                             output_gate: bool = True, eps: float = 1e-6,
                             weight_offset: float = 1.0) -> tuple[Tensor, Tensor]:
    """SPEC §6 after the projection, from the rounded qkv rows [M, N]: q/k head norms, RoPE, the
    gate split and the cache write. Returns (q, gate)."""
    m, d = qkv.shape[0], head_dim
    head_width = d * (2 if output_gate else 1)
    q_width = num_q_heads * head_width
    qg = qkv[:, :q_width].reshape(m, num_q_heads, head_width)
    gate = qg[..., d:].clone()
    k = qkv[:, q_width:q_width + num_kv_heads * d].reshape(m, num_kv_heads, d)
    v = qkv[:, q_width + num_kv_heads * d:].reshape(m, num_kv_heads, d)
    q = rotary_embedding_neox(gemma_rmsnorm(qg[..., :d], q_norm_weight, eps, weight_offset),
                              positions, cos_sin_cache, rotary_dim)
    k = rotary_embedding_neox(gemma_rmsnorm(k, k_norm_weight, eps, weight_offset),
                              positions, cos_sin_cache, rotary_dim)
    reshape_and_cache_flash(k, v, key_cache, value_cache, slot_mapping, k_scale, v_scale)
    return q, gate
