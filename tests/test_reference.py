"""mxfuse.reference against literal, scalar transcriptions of SPEC §3-§4 (numpy float32 scalars,
Python ints), so the reference the op tests trust does not rest on agreeing with csrc alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import (
    ACT_DTYPES,
    E2M3_MAGS,
    all_bit_patterns,
    assert_bitwise_equal,
    dtype_id,
    oracle_decode,
    oracle_encode,
    oracle_fp6_pack,
    randn,
)
from mxfuse import reference as ref

F32 = np.float32


def literal_sumsq(row: np.ndarray) -> np.float32:
    """SPEC §3 step 2 word for word, one float32 operation at a time (overflow to Inf allowed)."""
    with np.errstate(over="ignore"):
        return _literal_sumsq(row)


def _literal_sumsq(row: np.ndarray) -> np.float32:
    n = row.size
    chunks = (n + 7) // 8
    p = [F32(0.0)] * 256
    for lane in range(256):
        acc = F32(0.0)
        for c in range(lane, chunks, 256):
            for e in range(c * 8, min(c * 8 + 8, n)):
                acc = F32(acc + F32(row[e] * row[e]))
        p[lane] = acc
    d = 128
    while d >= 1:
        for lane in range(d):
            p[lane] = F32(p[lane] + p[lane + d])
        d //= 2
    return p[0]


def literal_norm(row: np.ndarray, w: np.ndarray, eps: float, wo: float) -> np.ndarray:
    """SPEC §3 steps 2-4 on one float32 row; returns float32 values before the dtype rounding."""
    total = literal_sumsq(row)
    ms = F32(total / F32(row.size))
    rstd = F32(F32(1.0) / F32(np.sqrt(F32(ms + F32(eps)))))
    return np.array(
        [F32(F32(row[e] * rstd) * F32(F32(w[e]) + F32(wo))) for e in range(row.size)],
        dtype=np.float32,
    )


@pytest.mark.parametrize("n", [1, 7, 8, 9, 100, 2047, 2048, 2049, 4104, 16384 + 32])
def test_canonical_sumsq_is_the_literal_order(n):
    g = torch.Generator().manual_seed(n)
    rows = torch.stack(
        [
            torch.randn(n, generator=g),
            torch.randn(n, generator=g) * torch.logspace(-8, 8, n),  # order matters here
            torch.randn(n, generator=g).to(torch.bfloat16).float() * 1e18,
        ]
    )
    got = ref.canonical_sumsq(rows)
    for i in range(rows.shape[0]):
        want = literal_sumsq(rows[i].numpy())
        assert got[i].item() == float(want), f"row {i}: {got[i].item()!r} != {float(want)!r}"


@pytest.mark.parametrize("wo,eps", [(1.0, 1e-6), (0.0, 1e-5), (1.0, 0.0)])
@pytest.mark.parametrize("n", [7, 100, 3072])
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
def test_reference_norm_is_the_literal_formula(dtype, n, wo, eps):
    x = randn((3, n), dtype, n, 2.0)
    w = randn((n,), torch.float32, n + 1, 0.5)
    got = ref.gemma_rmsnorm(x, w, eps, wo)
    for i in range(3):
        y32 = literal_norm(x[i].float().numpy(), w.numpy(), eps, wo)
        want = torch.from_numpy(y32).to(dtype)
        assert_bitwise_equal(got[i], want, f"row {i}")


def test_sqrt_rn_is_correctly_rounded():
    """torch's CPU sqrt misses by an ulp; the reference's must not (numpy float32 sqrt is IEEE)."""
    g = torch.Generator().manual_seed(0)
    bits = torch.randint(0, 0x7F800000, (1 << 20,), generator=g, dtype=torch.int32)
    t = torch.cat(
        [
            bits.view(torch.float32),
            torch.rand(1 << 18, generator=g) * 4,
            torch.tensor([0.0, -0.0, float("inf"), 1e-45, 3.4028235e38]),
        ]
    )
    want = torch.from_numpy(np.sqrt(t.numpy()))
    assert_bitwise_equal(ref.sqrt_rn(t), want, "sqrt_rn")
    assert torch.isnan(ref.sqrt_rn(torch.tensor([float("nan")]))).all()


@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
def test_widen_is_exact(dtype):
    p = all_bit_patterns(dtype)
    got, want = ref.widen(p), p.to(torch.float32)
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan)
    assert_bitwise_equal(got[~nan], want[~nan], "widen")


def test_e2m3_encode_matches_oracle():
    """Dense values over the E2M3 range and past it: nearest magnitude, ties to even, saturation."""
    mids = (E2M3_MAGS[:-1] + E2M3_MAGS[1:]) / 2
    vals = np.concatenate(
        [np.linspace(-9, 9, 20001), mids, -mids, E2M3_MAGS, [0.0, -0.0, 1e-30, -1e-30]]
    )
    v32 = torch.from_numpy(vals.astype(np.float32))
    want = torch.from_numpy(oracle_encode(v32.double().numpy(), "e2m3").astype(np.uint8))
    assert_bitwise_equal(ref.e2m3_encode(v32), want, "e2m3_encode")
    decoded = ref.e2m3_decode(want)
    back = np.where(np.signbit(vals), -1.0, 1.0) * E2M3_MAGS[want.numpy() & 31]
    np.testing.assert_array_equal(decoded.double().numpy(), back)


def test_fp6_layout_matches_python_int_packing():
    g = torch.Generator().manual_seed(2)
    codes = torch.randint(0, 64, (48, 384), generator=g, dtype=torch.uint8)
    packed = ref.pack_fp6_codes(codes)
    assert_bitwise_equal(packed, torch.from_numpy(oracle_fp6_pack(codes.numpy())), "packed")
    assert_bitwise_equal(ref.unpack_fp6_codes(packed), codes, "unpacked codes")
    # SPEC §4 example: code 5 straddles bytes 3 and 4 of its group
    one = torch.zeros(16, 128, dtype=torch.uint8)
    one[0, 5] = 0x3F
    grp = ref.pack_fp6_codes(one)[0, 0, :24]
    assert grp[3].item() == 0xC0 and grp[4].item() == 0x0F and int(grp.sum()) == 0xC0 + 0x0F


def test_mxfp6_round_trip_invariants():
    w = randn((32, 256), torch.bfloat16, 4, 3.0)
    packed, scales = ref.mxfp6_pack(w)
    rounded = ref.mxfp6_round_(w.clone())
    assert_bitwise_equal(
        ref.mxfp6_unpack(packed, scales, torch.bfloat16), rounded, "unpack(pack(w))"
    )
    p2, s2 = ref.mxfp6_pack(rounded)
    assert_bitwise_equal(p2, packed, "pack(round(w))")
    assert_bitwise_equal(s2, scales, "scales of pack(round(w))")
    with pytest.raises(ValueError, match="non-finite"):
        ref.mxfp6_pack(torch.full((16, 128), float("inf"), dtype=torch.bfloat16))


@pytest.mark.parametrize("layout", ["1x32", "32x32"])
def test_mxfp8_scaled_mm_reference(layout):
    """SPEC §5 reference GEMM against float64 products of the oracle-decoded operands."""
    a = randn((5, 256), torch.bfloat16, 1, 3.0)
    b = randn((64, 256), torch.bfloat16, 2, 0.1)
    ac, asc = ref.mxfp8_quantize(a)
    bc, bsc = ref.mxfp8_quantize(b)
    if layout == "32x32":  # one scale byte per 32 x 32 block of b (any byte: a layout test)
        bsc = bsc.reshape(2, 32, 8).amax(dim=1)
    bias = randn((64,), torch.float32, 3)
    got = ref.mxfp8_scaled_mm(ac, asc, bc, bsc, bias)
    b_rows = bsc if layout == "1x32" else bsc.repeat_interleave(32, dim=0)
    a64 = oracle_decode(ac.view(torch.uint8).numpy().astype(np.int64), asc.numpy().astype(np.int64))
    b64 = oracle_decode(
        bc.view(torch.uint8).numpy().astype(np.int64), b_rows.numpy().astype(np.int64)
    )
    want = a64 @ b64.T + bias.double().numpy()
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
