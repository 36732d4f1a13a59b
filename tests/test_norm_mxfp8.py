"""The norm + MXFP8 op family (SPEC §2, §3) against mxfuse.reference and exact expectations.

Against the reference, floating outputs compare NaN by position and everything else bitwise
(torch's own bf16/fp16 NaN payloads vary); codes and scales compare bitwise. Consistency checks of
the library with itself (fused == unfused, batch invariance, strided == contiguous) are bitwise.
The cuda cases compare a GPU result with the reference computed on the CPU.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import (
    KIND_RULES,
    ACT_DTYPES,
    ADV_ROWS,
    DEVICES,
    NORM_KINDS,
    OPS,
    adversarial_inputs,
    assert_bitwise_equal,
    assert_equal_nan_by_position,
    assert_outputs_match,
    boundary_blocks,
    call_norm,
    dtype_id,
    kind_has_residual,
    kind_is_mx,
    make_norm_inputs,
    oracle_block_quantize,
    randn,
    run_poisoned,
    to_f64,
)
from mxfuse import reference as ref

MX_N = [32, 256, 2048, 3072, 6144, 8192, 12288, 16384 + 32]
ODD_N = [1, 7, 100, 1000]
KIND_RULE_IDS = [f"{k}-{r}" if kind_is_mx(k) else k for k, r in KIND_RULES]
WDTYPES = ["same", torch.float32]


def wdtype_of(dtype, wdtype):
    return dtype if wdtype == "same" else wdtype


def wid(w):
    return "w_same" if w == "same" else "w_fp32"


def to_dev(tensors, device):
    return [t.to(device) for t in tensors]


def check_against_reference(kind, rule, x, r, w, eps, wo, device, what):
    """The op on ``device`` equals the reference on the CPU; returns the op outputs (on CPU)."""
    want = call_norm("ref", kind, x, r, w, eps, wo, rule)
    xd, rd, wd = to_dev((x, r, w), device)
    got = call_norm("op", kind, xd, rd, wd, eps, wo, rule)
    got = {k: v.cpu() for k, v in got.items()}
    assert_outputs_match(got, want, what, vs_reference=True)
    return got


# --- op == reference over the size / dtype matrix ------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("wo_eps", [(1.0, 1e-6), (0.0, 1e-5)], ids=["gemma", "plain-eps1e-5"])
@pytest.mark.parametrize("n", MX_N)
@pytest.mark.parametrize("wdtype", WDTYPES, ids=wid)
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("kind,rule", KIND_RULES, ids=KIND_RULE_IDS)
def test_matches_reference(kind, rule, dtype, wdtype, n, wo_eps, device):
    wo, eps = wo_eps
    x, r, w = make_norm_inputs(37, n, dtype, wdtype_of(dtype, wdtype), seed=n)
    check_against_reference(kind, rule, x, r, w, eps, wo, device, f"{kind} n={n}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("wo_eps", [(1.0, 1e-6), (0.0, 0.1)], ids=["gemma", "plain-eps0.1"])
@pytest.mark.parametrize("n", ODD_N)
@pytest.mark.parametrize("wdtype", WDTYPES, ids=wid)
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("kind", ["rmsnorm", "add_rmsnorm"])
def test_matches_reference_odd_n(kind, dtype, wdtype, n, wo_eps, device):
    """Rows that are not a multiple of 8 (a partial last chunk) or 32 (no MX blocks)."""
    wo, eps = wo_eps
    x, r, w = make_norm_inputs(37, n, dtype, wdtype_of(dtype, wdtype), seed=n)
    check_against_reference(kind, "ceil", x, r, w, eps, wo, device, f"{kind} n={n}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [32, 3072, 16384 + 32])
@pytest.mark.parametrize("m", [0, 1, 7])
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("kind", NORM_KINDS)
def test_small_m(kind, dtype, m, n, device):
    x, r, w = make_norm_inputs(m, n, dtype, dtype, seed=m + n)
    got = check_against_reference(kind, "ceil", x, r, w, 1e-6, 1.0, device, f"{kind} m={m}")
    for key, t in got.items():
        want_cols = n // 32 if key == "scales" else n
        assert t.shape == (m, want_cols), key


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "kind,dtype,wdtype,rule",
    [
        ("add_rmsnorm_mxfp8", torch.bfloat16, "same", "ceil"),
        ("rmsnorm", torch.float16, torch.float32, "ceil"),
        ("rmsnorm_mxfp8", torch.float16, "same", "floor"),
    ],
    ids=["add_mx-bf16", "rms-fp16-wfp32", "rms_mx-fp16-floor"],
)
def test_large_4096x8192(kind, dtype, wdtype, rule, device):
    x, r, w = make_norm_inputs(4096, 8192, dtype, wdtype_of(dtype, wdtype), seed=11)
    check_against_reference(kind, rule, x, r, w, 1e-6, 1.0, device, f"{kind} 4096x8192")


# --- fused == unfused ----------------------------------------------------------------------------


def fused_unfused_check(x, r, w, eps, wo, rule, dtype):
    # gemma_rmsnorm_mxfp8 == mxfp8_quantize(gemma_rmsnorm)
    c, s = OPS.gemma_rmsnorm_mxfp8(x, w, eps, wo, rule)
    c2, s2 = OPS.mxfp8_quantize(OPS.gemma_rmsnorm(x, w, eps, wo), rule)
    assert_bitwise_equal(c, c2, "rmsnorm_mxfp8 codes vs unfused")
    assert_bitwise_equal(s, s2, "rmsnorm_mxfp8 scales vs unfused")
    # gemma_fused_add_rmsnorm_mxfp8 == mxfp8_quantize(gemma_fused_add_rmsnorm): codes, scales and
    # the residual
    r1, r2 = r.clone(), r.clone()
    c, s = OPS.gemma_fused_add_rmsnorm_mxfp8(x, r1, w, eps, wo, rule)
    y = OPS.gemma_fused_add_rmsnorm(x, r2, w, eps, wo)
    c2, s2 = OPS.mxfp8_quantize(y, rule)
    assert_bitwise_equal(c, c2, "add_rmsnorm_mxfp8 codes vs unfused")
    assert_bitwise_equal(s, s2, "add_rmsnorm_mxfp8 scales vs unfused")
    assert_bitwise_equal(r1, r2, "add_rmsnorm_mxfp8 residual vs unfused")
    # gemma_fused_add_rmsnorm(x, r) == gemma_rmsnorm(round(x + r)); residual <- round(x + r)
    rounded = (x.float() + r.float()).to(dtype)
    assert_equal_nan_by_position(r2, rounded, "residual vs round(x + r)")
    assert_bitwise_equal(
        y, OPS.gemma_rmsnorm(r2, w, eps, wo), "add_rmsnorm vs rmsnorm(round(x + r))"
    )
    assert_equal_nan_by_position(
        y, OPS.gemma_rmsnorm(rounded, w, eps, wo), "add_rmsnorm vs rmsnorm(torch round(x + r))"
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rule", ["ceil", "floor"])
@pytest.mark.parametrize("n", [256, 3072, 8192, 16384 + 32])
@pytest.mark.parametrize("wdtype", WDTYPES, ids=wid)
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
def test_fused_equals_unfused(dtype, wdtype, n, rule, device):
    x, r, w = make_norm_inputs(64, n, dtype, wdtype_of(dtype, wdtype), seed=3 * n)
    xa, ra, wa = adversarial_inputs(n, dtype, wdtype_of(dtype, wdtype), 1.0)
    x, r = torch.cat([x, xa]), torch.cat([r, ra])
    x, r, w = to_dev((x, r, wa), device)
    fused_unfused_check(x, r, w, 1e-6, 1.0, rule, dtype)


# --- batch invariance ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_batches():
    return {
        dtype: make_norm_inputs(4096, n, dtype, dtype, seed=5)
        for dtype, n in ((torch.bfloat16, 8192), (torch.float16, 3072))
    }


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("kind", NORM_KINDS)
def test_batch_invariance(big_batches, kind, dtype, device):
    """A row's result does not depend on M or on its position in the batch."""
    x, r, w = big_batches[dtype]
    pos = [0, 1, 2047, 4000, 4095]
    # the same content at several positions, among unrelated rows
    x = x.clone()
    r = r.clone()
    x[[17, 1234, 4001]] = x[4000].clone()
    r[[17, 1234, 4001]] = r[4000].clone()
    xd, rd, wd = to_dev((x, r, w), device)
    full = call_norm("op", kind, xd, rd, wd)
    for i in pos:
        alone = call_norm("op", kind, xd[i : i + 1], rd[i : i + 1], wd)
        for key in full:
            assert_bitwise_equal(
                alone[key][0], full[key][i], f"{kind} row {i} alone vs in M=4096: {key}"
            )
    for i in (17, 1234, 4001):
        for key in full:
            assert_bitwise_equal(
                full[key][i], full[key][4000], f"{kind} row {i} vs row 4000: {key}"
            )
    # M = 37 and M = 300 batches give the same rows as M = 4096
    for m in (37, 300):
        part = call_norm("op", kind, xd[:m], rd[:m], wd)
        for key in full:
            assert_bitwise_equal(part[key], full[key][:m], f"{kind} first {m} rows: {key}")


# --- adversarial rows ----------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("wo", [1.0, 0.0])
@pytest.mark.parametrize("n", [256, 2048, 8192, 16384 + 32])
@pytest.mark.parametrize("wdtype", WDTYPES, ids=wid)
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("kind,rule", KIND_RULES, ids=KIND_RULE_IDS)
def test_adversarial_rows(kind, rule, dtype, wdtype, n, wo, device):
    x, r, w = adversarial_inputs(n, dtype, wdtype_of(dtype, wdtype), wo)
    got = check_against_reference(kind, rule, x, r, w, 1e-6, wo, device, f"{kind} adversarial")
    if not kind_is_mx(kind):
        return
    codes, scales = got["codes"].view(torch.uint8), got["scales"]
    row = {name: i for i, name in enumerate(ADV_ROWS)}
    # SPEC §2/§3 consequences, stated without the reference:
    nan = row["nan"]  # NaN in the row: the sum is NaN, so every block is a NaN block
    assert torch.all(scales[nan] == 0xFF) and torch.all(codes[nan] == 0x7F)
    for name, col in (("pos_inf", 100), ("neg_inf", 5)):
        # Inf: the sum is Inf, rstd = 0, y = Inf * 0 = NaN in its block, +-0 elsewhere
        i = row[name]
        b = col // 32
        assert scales[i, b] == 0xFF and torch.all(codes[i, 32 * b : 32 * b + 32] == 0x7F)
        others = torch.ones(n // 32, dtype=torch.bool)
        others[b] = False
        assert torch.all(scales[i, others] == 0)
        assert torch.all((codes[i].reshape(-1, 32)[others] & 0x7F) == 0)
    zero = row["zero"]  # all-zero row: zero blocks, scale 0, zero codes (sign of w + offset)
    assert torch.all(scales[zero] == 0) and torch.all((codes[zero] & 0x7F) == 0)
    if dtype == torch.float16 and n >= 2048:
        # y = sqrt(n) * (w + offset) ~ 45 * 3000 overflows fp16: Inf in block 1 -> a NaN block
        assert scales[row["single_element"], 1] == 0xFF
    # block 1 (w + offset ~ 3000) of a random row holds values far past 448: scale above 2^0
    assert scales[row["random"], 1] > 127


# --- exact values through the fused ops ----------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("wdtype", WDTYPES, ids=wid)
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("kind,rule", KIND_RULES, ids=KIND_RULE_IDS)
def test_exact_values_at_scale_boundaries(kind, rule, dtype, wdtype, device):
    """With eps = 0, weight_offset = 0 and rows of +-2^j, rstd = 2^-j exactly, so y = sign(x) * w
    exactly (SPEC §3). A weight made of boundary blocks (amax at 448 * 2^k and one ulp either
    side, mantissa 1.75 and ~2, FLT_MIN, subnormals, zero / -0 blocks, NaN / Inf, E4M3 ties)
    then puts those values into y, and the fused quantization must match the exact oracle."""
    wdt = wdtype_of(dtype, wdtype)
    blocks, _ = boundary_blocks(wdt)
    w = blocks.reshape(-1)
    n = w.numel()
    g = torch.Generator().manual_seed(n)
    exps = [-12, -3, 0, 1, 7, 14] if dtype == torch.float16 else [-60, -7, 0, 5, 40]
    sign = torch.where(torch.rand(len(exps), n, generator=g) < 0.5, -1.0, 1.0)
    s = (sign * torch.tensor([2.0**j for j in exps]).unsqueeze(1)).to(dtype)
    x, r = s, torch.zeros_like(s)
    if kind_has_residual(kind):
        x, r = (s.float() / 2).to(dtype), (s.float() / 2).to(dtype)  # x + r == s exactly
    # +-1 * (w + 0): exact (w + 0 turns -0 into +0), then one rounding (fp32 weights)
    y_exact = (sign * (w.float() + 0.0)).to(dtype)
    xd, rd, wd = to_dev((x, r, w), device)
    got = call_norm("op", kind, xd, rd, wd, 0.0, 0.0, rule)
    if kind_has_residual(kind):
        assert_bitwise_equal(got["residual"], s, "residual")
    if not kind_is_mx(kind):
        assert_equal_nan_by_position(got["y"], y_exact, "y == sign(x) * w")
        return
    codes, scales = oracle_block_quantize(to_f64(y_exact), rule)
    assert_bitwise_equal(
        got["scales"], torch.from_numpy(scales.astype(np.uint8)), "scales vs oracle"
    )
    assert_bitwise_equal(
        got["codes"].view(torch.uint8), torch.from_numpy(codes.astype(np.uint8)), "codes vs oracle"
    )


# --- strided and 3-D inputs ----------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [96, 3072])
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("kind", NORM_KINDS)
def test_strided_rows(kind, dtype, n, device):
    """x a column slice of a wider tensor, residual a 2-D row-strided view (updated in place,
    the rest of its buffer untouched)."""
    m = 19
    x, r, w = make_norm_inputs(m, n, dtype, dtype, seed=n + 1)
    want = call_norm("ref", kind, x, r, w)
    x_wide = randn((m, n + 48), dtype, 91).to(device)
    x_wide[:, 16 : 16 + n] = x.to(device)
    r_wide = randn((m, n + 64), dtype, 92).to(device)
    r_wide[:, 32 : 32 + n] = r.to(device)
    r_before = r_wide.clone()
    xs, rs = x_wide[:, 16 : 16 + n], r_wide[:, 32 : 32 + n]
    assert not xs.is_contiguous() and not rs.is_contiguous()
    wd = w.to(device)
    if kind_has_residual(kind):
        if kind_is_mx(kind):
            codes, scales = OPS.gemma_fused_add_rmsnorm_mxfp8(xs, rs, wd, 1e-6, 1.0, "ceil")
            got = {"codes": codes, "scales": scales}
        else:
            got = {"y": OPS.gemma_fused_add_rmsnorm(xs, rs, wd, 1e-6, 1.0)}
        got["residual"] = rs
        keep = torch.ones(n + 64, dtype=torch.bool)
        keep[32 : 32 + n] = False
        assert_bitwise_equal(r_wide[:, keep], r_before[:, keep], "residual buffer outside the view")
    else:
        got = call_norm("op", kind, xs, None, wd)
    for t in got.values():
        if t is not rs:
            assert t.is_contiguous()
    assert_outputs_match(
        {k: v.cpu() for k, v in got.items()}, want, f"{kind} strided", vs_reference=True
    )
    # a last dimension with stride 2 (read-only x): copied, same result
    x2 = torch.stack([x, x], dim=-1).reshape(m, 2 * n).to(device)[:, ::2]  # slice on the device
    assert x2.stride(-1) == 2
    got2 = call_norm("op", kind, x2, r.to(device), wd)
    assert_outputs_match(
        {k: v.cpu() for k, v in got2.items()}, want, f"{kind} stride-2 x", vs_reference=True
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("kind", NORM_KINDS)
def test_3d_inputs(kind, dtype, device):
    """[B, T, N] inputs: leading dims flattened; outputs keep the leading dims."""
    b, t, n = 3, 5, 2048
    x, r, w = make_norm_inputs(b * t, n, dtype, dtype, seed=21)
    x3, r3 = x.reshape(b, t, n), r.reshape(b, t, n)
    want = call_norm("ref", kind, x, r, w)
    got = call_norm("op", kind, *to_dev((x3, r3, w), device))
    for key, v in got.items():
        lead = (b, t, n // 32) if key == "scales" else (b, t, n)
        assert v.shape == lead, key
    got2 = {k: v.cpu().reshape(want[k].shape) for k, v in got.items()}
    assert_outputs_match(got2, want, f"{kind} 3-D", vs_reference=True)
    # a 3-D x that is a slice (non-contiguous leading dims)
    xw = torch.cat([x3, x3], dim=1)[:, 1 : 1 + t]
    got3 = call_norm("op", kind, *to_dev((xw, r3, w), device))
    want3 = call_norm("ref", kind, xw.reshape(-1, n), r, w)
    assert_outputs_match(
        {k: v.cpu().reshape(want3[k].shape) for k, v in got3.items()},
        want3,
        f"{kind} sliced 3-D",
        vs_reference=True,
    )


# --- stand-alone MXFP8 quantize / dequantize ------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rule", ["ceil", "floor"])
@pytest.mark.parametrize(
    "shape",
    [(0, 64), (1, 32), (37, 3072), (5, 7, 256), (2, 16384 + 32)],
    ids=lambda s: "x".join(map(str, s)),
)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=dtype_id)
def test_quantize_dequantize_match_reference(dtype, shape, rule, device):
    x = randn(shape, dtype, sum(shape), 3.0)
    if x.numel():
        x.view(-1)[::97] *= 1000  # a spread of block scales
    want_c, want_s = ref.mxfp8_quantize(x, rule)
    codes, scales = OPS.mxfp8_quantize(x.to(device), rule)
    assert_bitwise_equal(codes, want_c, "codes")
    assert_bitwise_equal(scales, want_s, "scales")
    for out_dtype in (torch.bfloat16, torch.float16, torch.float32):
        got = OPS.mxfp8_dequantize(codes, scales, out_dtype)
        assert_equal_nan_by_position(
            got,
            ref.mxfp8_dequantize(want_c, want_s, out_dtype),
            f"dequantize {dtype_id(out_dtype)}",
        )


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_strided_input(device):
    x = randn((33, 512), torch.bfloat16, 4).to(device)
    xs = x[:, 128:384]  # row-strided
    xt = randn((256, 33), torch.bfloat16, 5).to(device).t()  # last dim not contiguous
    for v in (xs, xt):
        codes, scales = OPS.mxfp8_quantize(v, "ceil")
        wc, ws = ref.mxfp8_quantize(v.cpu().contiguous(), "ceil")
        assert_bitwise_equal(codes, wc, "codes")
        assert_bitwise_equal(scales, ws, "scales")
    codes, scales = OPS.mxfp8_quantize(x, "ceil")
    got = OPS.mxfp8_dequantize(codes[:, 64:], scales[:, 2:], torch.bfloat16)  # strided inputs
    assert_equal_nan_by_position(
        got,
        ref.mxfp8_dequantize(codes[:, 64:].cpu(), scales[:, 2:].cpu(), torch.bfloat16),
        "strided dequantize",
    )


# --- every output element is written --------------------------------------------------------------


def _all_op_calls(dtype, n, m, device, rule):
    x, r, w = to_dev(make_norm_inputs(m, n, dtype, dtype, seed=m * n + 1), device)
    xa, ra, wa = to_dev(adversarial_inputs(max(n, 256), dtype, dtype, 1.0), device)
    codes, scales = OPS.mxfp8_quantize(x, rule) if n % 32 == 0 else (None, None)
    calls = {
        "rmsnorm": lambda: OPS.gemma_rmsnorm(x, w, 1e-6, 1.0),
        "add_rmsnorm": lambda: (
            OPS.gemma_fused_add_rmsnorm(x, (rc := r.clone()), w, 1e-6, 1.0),
            rc,
        ),
        "rmsnorm_adversarial": lambda: OPS.gemma_rmsnorm(xa, wa, 1e-6, 1.0),
    }
    if n % 32 == 0:
        calls.update(
            {
                "rmsnorm_mxfp8": lambda: OPS.gemma_rmsnorm_mxfp8(x, w, 1e-6, 1.0, rule),
                "add_rmsnorm_mxfp8": lambda: (
                    *OPS.gemma_fused_add_rmsnorm_mxfp8(x, (rc := r.clone()), w, 1e-6, 1.0, rule),
                    rc,
                ),
                "add_rmsnorm_mxfp8_adversarial": lambda: (
                    *OPS.gemma_fused_add_rmsnorm_mxfp8(xa, (rc := ra.clone()), wa, 1e-6, 1.0, rule),
                    rc,
                ),
                "mxfp8_quantize": lambda: OPS.mxfp8_quantize(x, rule),
                "mxfp8_dequantize_bf16": lambda: OPS.mxfp8_dequantize(
                    codes, scales, torch.bfloat16
                ),
                "mxfp8_dequantize_fp32": lambda: OPS.mxfp8_dequantize(codes, scales, torch.float32),
            }
        )
    refs = {
        "rmsnorm": lambda: ref.gemma_rmsnorm(x.cpu(), w.cpu()),
        "add_rmsnorm": lambda: (
            ref.gemma_fused_add_rmsnorm(x.cpu(), (rc := r.cpu().clone()), w.cpu()),
            rc,
        ),
        "rmsnorm_adversarial": lambda: ref.gemma_rmsnorm(xa.cpu(), wa.cpu()),
        "rmsnorm_mxfp8": lambda: ref.gemma_rmsnorm_mxfp8(x.cpu(), w.cpu(), 1e-6, 1.0, rule),
        "add_rmsnorm_mxfp8": lambda: (
            *ref.gemma_fused_add_rmsnorm_mxfp8(
                x.cpu(), (rc := r.cpu().clone()), w.cpu(), 1e-6, 1.0, rule
            ),
            rc,
        ),
        "add_rmsnorm_mxfp8_adversarial": lambda: (
            *ref.gemma_fused_add_rmsnorm_mxfp8(
                xa.cpu(), (rc := ra.cpu().clone()), wa.cpu(), 1e-6, 1.0, rule
            ),
            rc,
        ),
        "mxfp8_quantize": lambda: ref.mxfp8_quantize(x.cpu(), rule),
        "mxfp8_dequantize_bf16": lambda: ref.mxfp8_dequantize(
            codes.cpu(), scales.cpu(), torch.bfloat16
        ),
        "mxfp8_dequantize_fp32": lambda: ref.mxfp8_dequantize(
            codes.cpu(), scales.cpu(), torch.float32
        ),
    }
    return calls, refs


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m,n", [(1, 32), (37, 3072), (5, 16384 + 32), (9, 100)])
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
def test_poisoned_outputs_fully_written(dtype, m, n, device):
    calls, refs = _all_op_calls(dtype, n, m, device, "ceil")
    for name, fn in calls.items():
        got = run_poisoned(fn)
        want = refs[name]()
        want = want if isinstance(want, tuple) else (want,)
        assert len(got) == len(want)
        for i, (a, b) in enumerate(zip(got, want)):
            assert_equal_nan_by_position(a, b, f"{name} output {i} (poisoned) vs reference")


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_residual_is_the_same_tensor(device):
    """The residual is updated in its own storage (no copy-back through a new tensor)."""
    x, r, w = to_dev(make_norm_inputs(4, 64, torch.bfloat16, torch.bfloat16), device)
    ptr, before = r.data_ptr(), r.clone()
    OPS.gemma_fused_add_rmsnorm(x, r, w, 1e-6, 1.0)
    assert r.data_ptr() == ptr
    assert_bitwise_equal(r, (x.float() + before.float()).to(torch.bfloat16), "residual")
