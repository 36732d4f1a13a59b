"""MXFP6 weight ops (SPEC §4, §5) against mxfuse.reference: pack / unpack / round_ bit for bit,
the §4 invariants, and mxfp6_linear within a derived bound of a float64 reference. The E2M3
element and scale codecs themselves are tested in test_codecs.py."""

from __future__ import annotations

import pytest
import torch
from conftest import (
    ACT_DTYPES,
    DEVICES,
    OPS,
    assert_bitwise_equal,
    dtype_id,
    randn,
    requires_mxfp6,
    run_poisoned,
)
from mxfuse import reference as ref

pytestmark = requires_mxfp6


def assert_same_packing(packed, scales, want_p, want_s, unpack_want):
    """packed/scales equal the wanted ones bit for bit, and so do their unpacked values (each
    output dtype; the wanted side unpacked with `unpack_want`)."""
    assert_bitwise_equal(packed, want_p, "packed")
    assert_bitwise_equal(scales, want_s, "scales")
    for out_dtype in (torch.bfloat16, torch.float16, torch.float32):
        assert_bitwise_equal(
            OPS.mxfp6_unpack(packed, scales, out_dtype),
            unpack_want(want_p, want_s, out_dtype),
            f"unpack {out_dtype}",
        )


def weight(n, k, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * 0.05
    w[:, ::37] *= 40  # a spread of group scales
    w[1, :32] = 0.0  # a zero group
    return w.to(dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rule", ["floor", "ceil"])
@pytest.mark.parametrize(
    "shape", [(16, 128), (48, 384), (256, 2048)], ids=lambda s: f"{s[0]}x{s[1]}"
)
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
def test_pack_unpack_round_match_reference(dtype, shape, rule, device):
    w = weight(*shape, dtype, shape[1])
    want_p, want_s = ref.mxfp6_pack(w, rule)
    packed, scales = OPS.mxfp6_pack(w.to(device), rule)
    assert_same_packing(packed, scales, want_p, want_s, ref.mxfp6_unpack)
    wr = w.to(device).clone()
    ptr = wr.data_ptr()
    OPS.mxfp6_round_(wr, rule)
    assert wr.data_ptr() == ptr
    assert_bitwise_equal(wr, ref.mxfp6_round_(w.clone(), rule), "round_")
    # SPEC §4 invariants: unpack(pack(W)) == round_(W) and pack(round(W)) == pack(W). The second
    # holds for the default "floor" rule only: under "ceil" a group whose scaled amax lies in
    # (3.75, 3.875) rounds to 3.75 = 7.5 / 2, and the rounded group then takes the scale below.
    assert_bitwise_equal(
        OPS.mxfp6_unpack(packed, scales, dtype), wr, "unpack(pack(w)) vs round_(w)"
    )
    if rule == "floor":
        p2, s2 = OPS.mxfp6_pack(wr, rule)
        assert_bitwise_equal(p2, packed, "pack(round(w)) vs pack(w)")
        assert_bitwise_equal(s2, scales, "scales of pack(round(w))")


@pytest.mark.parametrize("device", DEVICES)
def test_pack_strided_weight(device):
    w = weight(32, 512, torch.bfloat16, 1).to(device)
    ws = w[:, 128:384]  # row-strided view
    packed, scales = OPS.mxfp6_pack(ws, "floor")
    want_p, want_s = ref.mxfp6_pack(ws.cpu().contiguous(), "floor")
    assert_bitwise_equal(packed, want_p, "packed")
    assert_bitwise_equal(scales, want_s, "scales")


def linear_bound(x, w6, bias, out_dtype, ref64, device="cpu"):
    """|out - ref64| allowed for out = round_dtype(fp32 sum_k x*w (+ bias)), any summation order.

    x*w is exact in fp32 (8 or 11 significant bits times 4), so the fp32 error is that of
    summing K terms (<= (K-1) u sum|x w|, u = 2^-24) plus the bias add (u |.|); the final rounding
    adds half an ulp of the output dtype, taken as eps * |v| / 2 or the smallest subnormal.
    On the GPU the tensor cores' fp32 additions may truncate instead of rounding: u = 2^-23.
    """
    k = x.shape[-1]
    u = 2.0**-23 if torch.device(device).type == "cuda" else 2.0**-24
    absdot = x.double().abs() @ w6.double().abs().t()
    if bias is not None:
        absdot = absdot + bias.double().abs()
    fin = torch.finfo(out_dtype)
    half_ulp = torch.maximum(
        (ref64.abs() + k * u * absdot) * fin.eps / 2, torch.full_like(ref64, fin.tiny * fin.eps)
    )
    return (k + 1) * u * absdot * (1 + 1e-6) + half_ulp


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "bias_dtype", [None, "same", torch.float32], ids=["nobias", "bias_same", "bias_fp32"]
)
@pytest.mark.parametrize("m", [1, 7, 64])
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
def test_linear_within_bound_of_fp64(dtype, m, bias_dtype, device):
    n, k = 96, 1024
    w = weight(n, k, dtype, 3)
    packed, scales = ref.mxfp6_pack(w)
    w6 = ref.mxfp6_unpack(packed, scales, torch.float32)
    x = randn((m, k), dtype, m, 1.0)
    bias = (
        None
        if bias_dtype is None
        else randn((n,), dtype if bias_dtype == "same" else bias_dtype, 9)
    )
    want = ref.mxfp6_linear(x, packed, scales, bias)
    got = OPS.mxfp6_linear(
        x.to(device),
        packed.to(device),
        scales.to(device),
        None if bias is None else bias.to(device),
    )
    assert got.dtype == dtype and got.shape == (m, n)
    err = (got.cpu().double() - want).abs()
    bound = linear_bound(x, w6, bias, dtype, want, device)
    assert torch.all(err <= bound), f"max excess {(err - bound).max().item()}"
    # 3-D x: leading dims flattened
    got3 = OPS.mxfp6_linear(
        x.reshape(1, m, k).to(device),
        packed.to(device),
        scales.to(device),
        None if bias is None else bias.to(device),
    )
    assert got3.shape == (1, m, n)
    assert_bitwise_equal(got3.reshape(m, n), got, "3-D x vs 2-D x")


@pytest.mark.parametrize("device", DEVICES)
def test_poisoned_outputs_fully_written(device):
    w = weight(48, 384, torch.bfloat16, 5).to(device)
    packed, scales = OPS.mxfp6_pack(w, "floor")
    x = randn((5, 384), torch.bfloat16, 6).to(device)
    run_poisoned(lambda: OPS.mxfp6_pack(w, "floor"))
    run_poisoned(lambda: OPS.mxfp6_unpack(packed, scales, torch.bfloat16))
    run_poisoned(lambda: OPS.mxfp6_linear(x, packed, scales, None))


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="no CUDA device here (the cuda cases run on the GPU machine)",
)
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
def test_gpu_pack_unpack_round_equal_cpu(dtype):
    w = weight(512, 4096, dtype, 7)
    p, s = OPS.mxfp6_pack(w, "floor")
    pg, sg = OPS.mxfp6_pack(w.cuda(), "floor")
    assert_same_packing(pg, sg, p, s, OPS.mxfp6_unpack)
    wg, wc = w.cuda(), w.clone()
    assert OPS.mxfp6_round_(wg, "floor") is None
    OPS.mxfp6_round_(wc, "floor")
    assert_bitwise_equal(wg, wc, "round_ (GPU vs CPU)")
    assert not torch.equal(wc, w), "round_ must change a random weight"
