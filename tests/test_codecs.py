"""Element and scale codecs (SPEC §1, §2) against exact oracles (conftest.py), through the ops.

E4M3 encode goes through mxfp8_quantize on blocks whose scale is known (an anchor element fixes
amax, the other elements are at most its magnitude); E4M3 decode and E8M0 through
mxfp8_dequantize over all 256 codes x all 256 scale bytes; E2M3 through mxfp6_pack / unpack
(skipped until those ops exist). mxfuse.reference is checked against the same oracles, since the
op tests use it as their expected value.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import (
    ACT_DTYPES,
    DEVICES,
    E2M3_MAGS,
    E4M3_MAGS,
    OPS,
    all_bit_patterns,
    assert_bitwise_equal,
    assert_equal_nan_by_position,
    boundary_blocks,
    dtype_id,
    e4m3_oracle_value,
    oracle_block_quantize,
    oracle_decode,
    oracle_fp6_pack,
    oracle_scale_byte,
    requires_mxfp6,
    round_exact_f64,
    to_f64,
)
from mxfuse import reference as ref

RULES = ["ceil", "floor"]


def check_quantize(x: torch.Tensor, rule: str, device: str, what: str) -> None:
    """mxfp8_quantize on ``device`` and the reference both equal the exact oracle."""
    want_codes, want_scales = oracle_block_quantize(to_f64(x), rule)
    want_codes = torch.from_numpy(want_codes.astype(np.uint8))
    want_scales = torch.from_numpy(want_scales.astype(np.uint8))
    codes, scales = OPS.mxfp8_quantize(x.to(device), rule)
    assert codes.dtype == torch.float8_e4m3fn and scales.dtype == torch.uint8
    assert_bitwise_equal(scales, want_scales, f"{what}: op scales")
    assert_bitwise_equal(codes.view(torch.uint8), want_codes, f"{what}: op codes")
    if device == "cpu":
        rc, rs = ref.mxfp8_quantize(x, rule)
        assert_bitwise_equal(rs, want_scales, f"{what}: reference scales")
        assert_bitwise_equal(rc.view(torch.uint8), want_codes, f"{what}: reference codes")


# --- oracle self-checks (hand-derived from SPEC §1-§2; they keep the oracle honest) --------------


def test_oracle_tables_match_spec():
    assert e4m3_oracle_value(0x7E) == 448 and e4m3_oracle_value(0x7F) is None
    assert e4m3_oracle_value(0xFF) is None and e4m3_oracle_value(0x80) == 0
    assert e4m3_oracle_value(0x01) == 2.0**-9 and e4m3_oracle_value(0x08) == 2.0**-6
    assert e4m3_oracle_value(0x38) == 1 and e4m3_oracle_value(0xB9) == -1.125
    assert E4M3_MAGS.size == 127 and E2M3_MAGS.size == 32
    assert E2M3_MAGS[1] == 0.125 and E2M3_MAGS[8] == 1.0 and E2M3_MAGS[31] == 7.5
    # scale rules: amax = 448 * 2^j -> 127 + j under both rules; one ulp above -> ceil + 1.
    a = np.array(
        [
            448.0,
            448.0 * 2.0**-20,
            np.nextafter(448.0, np.inf),
            2.0**-126,
            0.0,
            np.nan,
            np.inf,
            1.9 * 2.0**127,
            480.0,
            511.9,
        ]
    )
    assert oracle_scale_byte(a, "ceil", "e4m3").tolist() == [
        127,
        107,
        128,
        0,
        0,
        255,
        255,
        247,
        128,
        128,
    ]
    assert oracle_scale_byte(a, "floor", "e4m3").tolist() == [
        127,
        107,
        127,
        0,
        0,
        255,
        255,
        246,
        127,
        127,
    ]
    assert oracle_scale_byte(np.array([7.5, 7.6, 8.0]), "ceil", "e2m3").tolist() == [127, 128, 128]
    assert oracle_scale_byte(np.array([7.5, 7.6, 8.0]), "floor", "e2m3").tolist() == [127, 127, 128]


# --- E4M3 encode ---------------------------------------------------------------------------------


def blocks_led_by(patterns: torch.Tensor) -> torch.Tensor:
    """[P, 32] blocks: element 0 is the pattern (so it is the block amax), elements 1..31 are the
    pattern times factors in (0, 1), alternately negated, rounded to the pattern's dtype."""
    dtype = patterns.dtype
    factors = [1 - j / 32 for j in range(1, 16)] + [2.0**-j for j in range(1, 17)]
    f = torch.tensor(factors, dtype=torch.float32) * torch.tensor([(-1) ** j for j in range(31)])
    rest = (patterns.float().unsqueeze(1) * f).to(dtype)
    return torch.cat([patterns.unsqueeze(1), rest], dim=1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
def test_e4m3_encode_every_pattern_as_block_amax(device, rule, dtype):
    """All 65536 bf16 / fp16 patterns (NaN, +-Inf, subnormals, -0 included) each lead a block:
    covers the scale rule at every representable amax and the encoding of the amax itself."""
    x = blocks_led_by(all_bit_patterns(dtype))
    check_quantize(x, rule, device, f"{dtype_id(dtype)} patterns")
    # The same values as fp32 input give the same result.
    check_quantize(x.float(), rule, device, f"{dtype_id(dtype)} patterns as fp32")


def anchored_sweep(dtype: torch.dtype, window: int = 22) -> torch.Tensor:
    """Blocks [anchor, 31 test values]: for every scale byte k whose anchor 448 * 2^(k-127) is
    representable in dtype, every dtype value v (both signs) with anchor * 2^-window <= |v| <=
    anchor. With that anchor the scale is k under both rules, so each value is encoded at every
    scale that applies to it, down to where it rounds to zero."""
    pats = all_bit_patterns(dtype)
    mags = pats[(pats.float() > 0) & torch.isfinite(pats.float())].float()
    rows = []
    for k in range(0, 255):
        anchor = 448.0 * 2.0 ** (k - 127)
        if anchor > torch.finfo(dtype).max or torch.tensor(anchor).to(dtype).item() != anchor:
            continue
        sel = mags[(mags <= anchor) & (mags >= anchor * 2.0**-window)]
        vals = torch.cat([sel, -sel])
        pad = (-vals.numel()) % 31
        vals = torch.cat([vals, torch.zeros(pad)]).reshape(-1, 31)
        rows.append(torch.cat([torch.full((vals.shape[0], 1), anchor), vals], dim=1))
    return torch.cat(rows).to(dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
def test_e4m3_encode_scale_sweep(device, rule, dtype):
    x = anchored_sweep(dtype)
    scales = oracle_block_quantize(to_f64(x), rule)[1]
    lo, hi = int(scales.min()), int(scales.max())
    # the sweep spans the dtype's whole range of scales
    assert (lo, hi) == ((0, 246) if dtype == torch.bfloat16 else (97, 134))
    check_quantize(x, rule, device, f"{dtype_id(dtype)} sweep")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rule", RULES)
def test_e4m3_encode_random_fp32(device, rule):
    """fp32 inputs with full 24-bit mantissas, over the whole exponent range, NaN/Inf included."""
    g = torch.Generator().manual_seed(7)
    bits = torch.randint(-(2**31), 2**31 - 1, (8192, 64), generator=g, dtype=torch.int64)
    x = bits.to(torch.int32).view(torch.float32)
    # narrow most blocks' dynamic range so codes are not all zero next to a huge amax
    shift = torch.randint(0, 40, (8192, 2, 1), generator=g).repeat_interleave(32, dim=-1)
    x = (x.reshape(8192, 2, 32) * 2.0 ** (-shift.float())).reshape(8192, 64)
    narrow = torch.randn(4096, 64, generator=g) * torch.logspace(-40, 38, 4096).unsqueeze(1)
    check_quantize(torch.cat([x, narrow.float()]), rule, device, "random fp32")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=dtype_id)
def test_scale_rule_and_encode_boundaries(device, rule, dtype):
    x, want = boundary_blocks(dtype)
    # hand-derived scale bytes (SPEC §2) where stated
    col = 0 if rule == "ceil" else 1
    oracle_sb = oracle_block_quantize(to_f64(x), rule)[1][:, 0]
    stated = want[:, col] >= 0
    np.testing.assert_array_equal(oracle_sb[stated], want[stated, col])
    check_quantize(x, rule, device, f"{dtype_id(dtype)} boundaries")


@pytest.mark.parametrize("device", DEVICES)
def test_e4m3_ties_round_to_even_code(device):
    """A value halfway between codes c and c+1 (block scale 2^0) gets the even one of the two."""
    mids = torch.tensor((E4M3_MAGS[:-1] + E4M3_MAGS[1:]) / 2, dtype=torch.float32)  # 126 values
    x = torch.zeros(126, 32)
    x[:, 0] = 448.0  # anchor: scale byte 127 under both rules
    x[:, 1] = mids
    x[:, 2] = -mids
    codes, scales = OPS.mxfp8_quantize(x.to(device), "ceil")
    codes = codes.view(torch.uint8).cpu().to(torch.int64)
    assert torch.all(scales.cpu() == 127)
    lower = torch.arange(126)
    even = torch.where(lower % 2 == 0, lower, lower + 1)
    assert torch.equal(codes[:, 1], even)
    assert torch.equal(codes[:, 2], even | 0x80)


@pytest.mark.parametrize("device", DEVICES)
def test_bf16_subnormal_times_2_pow_127_survives(device):
    """SPEC §1: a bf16 subnormal input scaled by 2^127 must survive (no flush to zero)."""
    tiny = torch.tensor([2.0**-133, 2.0**-130, 3 * 2.0**-133, -(2.0**-127)], dtype=torch.bfloat16)
    x = torch.zeros(1, 32, dtype=torch.bfloat16)
    x[0, :4] = tiny
    codes, scales = OPS.mxfp8_quantize(x.to(device), "ceil")
    assert scales.item() == 0  # amax clamps to FLT_MIN: ceil(log2(2^-126/448)) + 127 < 0
    vals = codes.cpu().float()[0, :4]
    # scaled by 2^127: 2^-6, 2^-3, 3*2^-6, -1 -- all exact E4M3 values
    assert vals.tolist() == [2.0**-6, 2.0**-3, 3 * 2.0**-6, -1.0]


# --- E4M3 / E8M0 decode --------------------------------------------------------------------------


def all_codes_all_scales() -> tuple[torch.Tensor, torch.Tensor]:
    codes = torch.arange(256, dtype=torch.uint8).repeat(256, 1)  # row s: every code
    scales = torch.arange(256, dtype=torch.uint8).unsqueeze(1).repeat(1, 8)  # row s: scale byte s
    return codes.view(torch.float8_e4m3fn), scales


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32], ids=dtype_id)
def test_e4m3_e8m0_decode_all_codes_all_scales(device, out_dtype):
    codes, scales = all_codes_all_scales()
    exact = oracle_decode(
        codes.view(torch.uint8).numpy().astype(np.int64), scales.numpy().astype(np.int64)
    )
    want = round_exact_f64(exact, out_dtype)
    got = OPS.mxfp8_dequantize(codes.to(device), scales.to(device), out_dtype)
    assert got.dtype == out_dtype and got.shape == (256, 256)
    assert_equal_nan_by_position(got, want, f"dequantize to {dtype_id(out_dtype)}")
    # NaN exactly where the code is 0x7F/0xFF or the scale byte is 0xFF
    nan_want = ((torch.arange(256).unsqueeze(0) & 0x7F) == 0x7F) | (
        torch.arange(256).unsqueeze(1) == 255
    )
    assert torch.equal(torch.isnan(got.cpu()), nan_want)
    if device == "cpu":
        assert_equal_nan_by_position(
            ref.mxfp8_dequantize(codes, scales, out_dtype),
            want,
            f"reference dequantize to {dtype_id(out_dtype)}",
        )


@pytest.mark.parametrize("device", DEVICES)
def test_e8m0_scale_values(device):
    """Code 1.0 (0x38) under every scale byte decodes to exactly 2^(sb-127) in fp32."""
    codes = torch.full((255, 32), 0x38, dtype=torch.uint8).view(torch.float8_e4m3fn)
    scales = torch.arange(255, dtype=torch.uint8).unsqueeze(1)
    got = OPS.mxfp8_dequantize(codes.to(device), scales.to(device), torch.float32).cpu()
    want = torch.tensor([2.0 ** (s - 127) for s in range(255)], dtype=torch.float64).float()
    assert torch.equal(got[:, 0], want) and torch.equal(got, want.unsqueeze(1).expand(255, 32))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
def test_decode_of_encode_is_nearest_in_block(device, dtype):
    """Round trip on all patterns: the dequantized value equals the oracle's exact block value
    (dequantize(quantize(x)) == oracle value rounded to dtype)."""
    x = blocks_led_by(all_bit_patterns(dtype))
    codes, scales = OPS.mxfp8_quantize(x.to(device), "ceil")
    got = OPS.mxfp8_dequantize(codes, scales, dtype)
    oc, os_ = oracle_block_quantize(to_f64(x), "ceil")
    want = round_exact_f64(oracle_decode(oc, os_), dtype)
    assert_equal_nan_by_position(got, want, "dequantize(quantize(x))")


# --- E2M3 through mxfp6_pack / mxfp6_unpack ------------------------------------------------------


def e2m3_blocks_led_by(patterns: torch.Tensor) -> torch.Tensor:
    """Finite patterns, each leading a 32-element group (as blocks_led_by), as a [N, 128] weight
    with N % 16 == 0 (padded with zero groups)."""
    fin = patterns[torch.isfinite(patterns.float())]
    blocks = blocks_led_by(fin)
    pad = (-blocks.shape[0]) % 64
    blocks = torch.cat([blocks, torch.zeros(pad, 32, dtype=blocks.dtype)])
    return blocks.reshape(-1, 128)


def check_fp6(w: torch.Tensor, rule: str, device: str, what: str, check_bytes: bool) -> None:
    codes, sb = oracle_block_quantize(to_f64(w), rule, "e2m3")
    packed, scales = OPS.mxfp6_pack(w.to(device), rule)
    assert packed.dtype == torch.uint8 and packed.shape == (
        w.shape[0] // 16,
        w.shape[1] // 128,
        1536,
    )
    assert_bitwise_equal(scales, torch.from_numpy(sb.astype(np.uint8)), f"{what}: scales")
    if check_bytes:
        want = torch.from_numpy(oracle_fp6_pack(codes))
        assert_bitwise_equal(packed, want, f"{what}: packed bytes")
    exact = oracle_decode(codes, sb, "e2m3")
    for out_dtype in (torch.float32, w.dtype):
        got = OPS.mxfp6_unpack(packed, scales, out_dtype)
        assert_bitwise_equal(
            got, round_exact_f64(exact, out_dtype), f"{what}: unpack {dtype_id(out_dtype)}"
        )
    if device == "cpu":
        rp, rs = ref.mxfp6_pack(w, rule)
        assert_bitwise_equal(rs, torch.from_numpy(sb.astype(np.uint8)), f"{what}: reference scales")
        assert_bitwise_equal(
            ref.mxfp6_unpack(rp, rs, torch.float32),
            round_exact_f64(exact, torch.float32),
            f"{what}: reference unpack",
        )


@requires_mxfp6
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
def test_e2m3_encode_every_pattern_as_group_amax(device, rule, dtype):
    w = e2m3_blocks_led_by(all_bit_patterns(dtype))
    check_fp6(w, rule, device, f"{dtype_id(dtype)} patterns", check_bytes=False)


@requires_mxfp6
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rule", RULES)
def test_e2m3_encode_ties_saturation_and_layout(device, rule):
    """Midpoints between E2M3 magnitudes (ties to the even code), values past 7.5 * 2^k (the
    floor rule saturates), zero and -0 groups; packed bytes against the Python-int oracle."""
    mids = ((E2M3_MAGS[:-1] + E2M3_MAGS[1:]) / 2).tolist()  # 31 midpoints
    rows = []
    for k in (-3, 0, 5):
        s = 2.0**k
        rows.append([7.5 * s] + [m * s for m in mids])
        rows.append([-7.5 * s] + [-m * s for m in mids])
    rows.append([7.9, 7.75, -7.6, 7.5, 6.5, 0.0, -0.0] + [0.1 * i for i in range(25)])
    rows.append([0.0] * 32)
    rows.append([-0.0] * 32)
    g = torch.Generator().manual_seed(3)
    blocks = torch.tensor(rows, dtype=torch.float64)
    blocks = torch.cat(
        [
            blocks,
            torch.randn(64 * 4 - blocks.shape[0], 32, generator=g, dtype=torch.float64)
            * torch.logspace(-30, 30, 64 * 4 - blocks.shape[0], dtype=torch.float64).unsqueeze(1),
        ]
    )
    w = blocks.reshape(32, 256).to(torch.bfloat16)
    check_fp6(w, rule, device, "ties/layout", check_bytes=True)
    if rule == "floor":
        _, sb = oracle_block_quantize(to_f64(w), rule, "e2m3")
        assert sb[0, 0] == 124  # amax 7.5 * 2^-3: floor(log2) = -1 -> -1 - 2 + 127


@requires_mxfp6
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32], ids=dtype_id)
def test_e2m3_decode_all_codes_all_scales(device, out_dtype):
    """Hand-packed groups holding all 64 codes, under every scale byte, through mxfp6_unpack."""
    n, k = 256, 128
    codes = np.zeros((n, k), dtype=np.int64)
    codes[:, :64] = np.arange(64)
    codes[:, 64:] = np.random.default_rng(5).integers(0, 64, (n, 64))
    scales = np.repeat(np.arange(256, dtype=np.int64)[:, None], k // 32, axis=1)
    packed = torch.from_numpy(oracle_fp6_pack(codes))
    sc = torch.from_numpy(scales.astype(np.uint8))
    want = round_exact_f64(oracle_decode(codes, scales, "e2m3"), out_dtype)
    got = OPS.mxfp6_unpack(packed.to(device), sc.to(device), out_dtype)
    assert_equal_nan_by_position(got, want, f"unpack to {dtype_id(out_dtype)}")
    assert torch.isnan(got[255].cpu()).all() and not torch.isnan(got[:255].cpu()).any()
    if device == "cpu":
        assert_equal_nan_by_position(
            ref.mxfp6_unpack(packed, sc, out_dtype), want, "reference unpack"
        )
