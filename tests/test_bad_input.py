"""Bad arguments: every op raises a RuntimeError whose message names the argument, before writing
anything (the residual / weight written in place is bit-unchanged after a failed call)."""

from __future__ import annotations

import pytest
import torch
from conftest import (
    DEVICES,
    NORM_KINDS,
    OPS,
    assert_bitwise_equal,
    assert_env_setting,
    kind_has_residual,
    make_norm_inputs,
    randn,
    requires_cuda,
    requires_mxfp6,
)

N = 256


def call(kind, x, r, w, eps=1e-6, wo=1.0, rule="ceil"):
    """The op itself (no clone: tests check the residual after a failure)."""
    if kind == "rmsnorm":
        return OPS.gemma_rmsnorm(x, w, eps, wo)
    if kind == "add_rmsnorm":
        return OPS.gemma_fused_add_rmsnorm(x, r, w, eps, wo)
    if kind == "rmsnorm_mxfp8":
        return OPS.gemma_rmsnorm_mxfp8(x, w, eps, wo, rule)
    return OPS.gemma_fused_add_rmsnorm_mxfp8(x, r, w, eps, wo, rule)


def inputs(dtype=torch.bfloat16, n=N, m=4):
    return make_norm_inputs(m, n, dtype, dtype, seed=1)


def expect_error(kind, match, x, r, w, **kw):
    """The call raises RuntimeError matching ``match``; a residual it would write is unchanged."""
    before = r.clone() if r is not None else None
    with pytest.raises(RuntimeError, match=match):
        call(kind, x, r, w, **kw)
    if kind_has_residual(kind) and r is not None and r.device.type != "meta":  # meta has no data
        assert_bitwise_equal(r, before, "residual after a failed call")


# --- the four norm ops ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", NORM_KINDS)
@pytest.mark.parametrize("bad", [torch.float32, torch.float64, torch.int32])
def test_x_dtype(kind, bad):
    x, r, w = inputs()
    expect_error(kind, r"'x' must have dtype", x.to(bad), r.to(bad), w)


@pytest.mark.parametrize("kind", NORM_KINDS)
@pytest.mark.parametrize("bad", [torch.float64, torch.float16, torch.int8])
def test_weight_dtype(kind, bad):
    x, r, w = inputs(torch.bfloat16)
    expect_error(kind, r"'weight' must have dtype", x, r, w.to(bad))


@pytest.mark.parametrize("kind", NORM_KINDS)
def test_weight_shape(kind):
    x, r, w = inputs()
    expect_error(kind, r"'weight' must have shape \[256\]", x, r, torch.cat([w, w[:32]]))
    expect_error(kind, r"'weight' must have shape \[256\]", x, r, w[:224])
    expect_error(kind, r"'weight' must have 1 dimension", x, r, w.reshape(1, N))
    expect_error(kind, r"'weight' must have 1 dimension", x, r, w[0])


@pytest.mark.parametrize("kind", NORM_KINDS)
def test_x_rank_and_empty_rows(kind):
    x, r, w = inputs()
    expect_error(kind, r"'x' must have at least 1 dimension", x[0, 0], r[0, 0], w)
    x0, r0 = x[:, :0], r[:, :0]
    expect_error(kind, r"'x'", x0, r0, w[:0])


@pytest.mark.parametrize("kind", NORM_KINDS)
def test_eps_and_weight_offset(kind):
    x, r, w = inputs()
    for eps in (-1e-6, float("nan"), float("inf")):
        expect_error(kind, r"'eps'", x, r, w, eps=eps)
    for wo in (float("nan"), float("inf"), float("-inf")):
        expect_error(kind, r"'weight_offset'", x, r, w, wo=wo)


@pytest.mark.parametrize("kind", ["rmsnorm_mxfp8", "add_rmsnorm_mxfp8"])
@pytest.mark.parametrize("n", [1, 48, 100, 8200])
def test_mx_columns_multiple_of_32(kind, n):
    x, r, w = inputs(n=n)
    expect_error(kind, r"'x' must be a multiple of 32", x, r, w)


@pytest.mark.parametrize("kind", ["rmsnorm_mxfp8", "add_rmsnorm_mxfp8"])
@pytest.mark.parametrize("rule", ["round", "CEIL", "", "nearest"])
def test_unknown_scale_rule(kind, rule):
    x, r, w = inputs()
    expect_error(kind, r"'scale_rule' must be 'ceil' or 'floor'", x, r, w, rule=rule)


@pytest.mark.parametrize("kind", ["add_rmsnorm", "add_rmsnorm_mxfp8"])
def test_residual_dtype_and_shape(kind):
    x, r, w = inputs()
    expect_error(kind, r"'residual' must have the dtype of 'x'", x, r.half(), w)
    expect_error(kind, r"'residual' must have the dtype of 'x'", x, r.float(), w)
    expect_error(kind, r"'residual' must have the shape of 'x'", x, r[:3], w)
    expect_error(kind, r"'residual' must have the shape of 'x'", x, r.reshape(2, 2, N), w)
    expect_error(kind, r"'residual' must have the shape of 'x'", x, r.reshape(-1), w)


@pytest.mark.parametrize("kind", ["add_rmsnorm", "add_rmsnorm_mxfp8"])
def test_residual_not_contiguous(kind):
    x, r, w = inputs(m=6)
    wide = torch.stack([r, r], dim=-1).reshape(6, 2 * N)
    r_step2 = wide[:, ::2]  # last dim stride 2
    expect_error(kind, r"'residual' is written in place and must be contiguous", x, r_step2, w)
    r_t = randn((N, 6), torch.bfloat16, 3).t()  # column-major
    expect_error(kind, r"'residual' is written in place and must be contiguous", x, r_t, w)
    # 3-D with non-contiguous leading dims: cannot be viewed as rows without a copy
    x3 = x.reshape(2, 3, N)
    r3 = randn((3, 2, N), torch.bfloat16, 4).transpose(0, 1)
    expect_error(kind, r"'residual' is written in place and must be contiguous", x3, r3, w)


@pytest.mark.parametrize("kind", ["add_rmsnorm", "add_rmsnorm_mxfp8"])
def test_residual_overlapping_x_or_itself(kind):
    """Memory overlap between the written residual and x, or inside the residual, is refused
    (overlap with x names both; overlapping rows of the residual name it)."""
    x, r, w = inputs()
    buf = randn((5 * N,), torch.bfloat16, 5)
    before = buf.clone()
    for shift in (N // 2, 1, 0):  # residual starting inside x (and x is residual)
        with pytest.raises(RuntimeError, match="'residual' .* and 'x' must not share memory"):
            call(kind, buf[: 4 * N].view(4, N), buf[shift : shift + 4 * N].view(4, N), w)
        assert_bitwise_equal(buf, before, "buffer after a failed call")
    row = randn((1, N), torch.bfloat16, 6)
    row_before = row.clone()
    with pytest.raises(RuntimeError, match="'residual' is written in place and its rows must not overlap"):
        call(kind, x, row.expand(4, N), w)
    assert_bitwise_equal(row, row_before, "expanded residual after a failed call")


def test_meta_inputs_give_meta_outputs():
    """All-meta arguments run the fake implementations (shape propagation), not an error."""
    x, r, w = (t.to("meta") for t in inputs())
    assert OPS.gemma_rmsnorm(x, w, 1e-6, 1.0).device.type == "meta"
    codes, scales = OPS.gemma_fused_add_rmsnorm_mxfp8(x, r, w, 1e-6, 1.0, "ceil")
    assert codes.device.type == "meta" and codes.shape == (4, N) and scales.shape == (4, N // 32)
    assert codes.dtype == torch.float8_e4m3fn and scales.dtype == torch.uint8


@pytest.mark.parametrize("kind", NORM_KINDS)
def test_weight_on_another_device_meta(kind):
    x, r, w = inputs()
    expect_error(kind, r"'weight'", x, r, w.to("meta"))


@pytest.mark.parametrize("kind", ["add_rmsnorm", "add_rmsnorm_mxfp8"])
def test_residual_on_another_device_meta(kind):
    x, r, w = inputs()
    expect_error(kind, r"'residual'", x, r.to("meta"), w)


@requires_cuda
@pytest.mark.parametrize("kind", NORM_KINDS)
def test_mixed_cpu_cuda(kind):
    x, r, w = inputs()
    expect_error(kind, r"'weight' must be on the device of 'x'", x.cuda(), r.cuda(), w)
    expect_error(kind, r"'weight' must be on the device of 'x'", x, r, w.cuda())
    if kind_has_residual(kind):
        rc = r.clone()
        expect_error(kind, r"'residual' must be on the device of 'x'", x.cuda(), rc, w.cuda())
        rg = r.cuda()
        expect_error(kind, r"'residual' must be on the device of 'x'", x, rg, w)
        assert_bitwise_equal(rg, r, "cuda residual after a failed call")


# --- mxfp8_quantize / mxfp8_dequantize -----------------------------------------------------------


def test_quantize_bad_args():
    x = randn((4, N), torch.bfloat16, 1)
    for bad in (torch.float64, torch.int32, torch.uint8):
        with pytest.raises(RuntimeError, match=r"'x' must have dtype"):
            OPS.mxfp8_quantize(x.to(bad), "ceil")
    with pytest.raises(RuntimeError, match=r"'x' must be a multiple of 32"):
        OPS.mxfp8_quantize(x[:, :40], "ceil")
    with pytest.raises(RuntimeError, match=r"'x' must have at least 1 dimension"):
        OPS.mxfp8_quantize(x[0, 0], "ceil")
    with pytest.raises(RuntimeError, match=r"'scale_rule' must be 'ceil' or 'floor'"):
        OPS.mxfp8_quantize(x, "even")


def test_dequantize_bad_args():
    codes, scales = OPS.mxfp8_quantize(randn((4, N), torch.bfloat16, 1), "ceil")
    with pytest.raises(RuntimeError, match=r"'codes' must have dtype"):
        OPS.mxfp8_dequantize(codes.view(torch.uint8), scales, torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"'codes' must have dtype"):
        OPS.mxfp8_dequantize(codes.view(torch.float8_e5m2), scales, torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"'scales' must have dtype"):
        OPS.mxfp8_dequantize(codes, scales.view(torch.int8), torch.bfloat16)
    for bad in (scales[:, :7], scales.reshape(-1), scales.reshape(2, 2, 8), scales[:3]):
        with pytest.raises(RuntimeError, match=r"'scales' must have shape"):
            OPS.mxfp8_dequantize(codes, bad, torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"'codes' must be a multiple of 32"):
        OPS.mxfp8_dequantize(codes[:, :48], scales[:, :1], torch.bfloat16)
    for bad in (torch.int32, torch.float64, torch.float8_e4m3fn):
        with pytest.raises(RuntimeError, match=r"'out_dtype' must be BFloat16, Half or Float"):
            OPS.mxfp8_dequantize(codes, scales, bad)
    with pytest.raises(RuntimeError, match=r"'codes' must have at least 1 dimension"):
        OPS.mxfp8_dequantize(codes[0, 0], scales[0, 0], torch.bfloat16)


@requires_cuda
def test_dequantize_mixed_devices():
    codes, scales = OPS.mxfp8_quantize(randn((4, N), torch.bfloat16, 1), "ceil")
    with pytest.raises(RuntimeError, match=r"'scales' must be on the device of 'codes'"):
        OPS.mxfp8_dequantize(codes.cuda(), scales, torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"'scales' must be on the device of 'codes'"):
        OPS.mxfp8_dequantize(codes, scales.cuda(), torch.bfloat16)


@pytest.mark.parametrize("op", ["quantize", "dequantize"])
def test_zero_columns_clear_error_or_empty(op):
    x = torch.empty(3, 0, dtype=torch.bfloat16)
    try:
        if op == "quantize":
            out = OPS.mxfp8_quantize(x, "ceil")
        else:
            out = (
                OPS.mxfp8_dequantize(
                    x.to(torch.float8_e4m3fn), torch.empty(3, 0, dtype=torch.uint8), torch.bfloat16
                ),
            )
    except RuntimeError as e:
        assert "'x'" in str(e) or "'codes'" in str(e), str(e)
        return
    assert all(t.shape == (3, 0) for t in out)


def test_debug_poison_byte_range():
    for bad in (256, -2, 1000):
        with pytest.raises(RuntimeError, match=r"'byte'"):
            OPS._set_debug_poison(bad)


# --- the MXFP6 family (argument names from csrc/ops/mxfp6.cpp) ------------------------------------


@requires_mxfp6
def test_mxfp6_pack_and_round_bad_args():
    w = randn((32, 256), torch.bfloat16, 2)
    for bad_w, match in (
        (w[:24], r"'w' must have N"),
        (w[:, :192], r"'w' must have K"),
        (w.float(), r"'w' must have dtype"),
        (w[0], r"'w' must have 2 dimension"),
    ):
        with pytest.raises(RuntimeError, match=match):
            OPS.mxfp6_pack(bad_w, "floor")
        with pytest.raises(RuntimeError, match=match):
            OPS.mxfp6_round_(bad_w.clone(), "floor")
    with pytest.raises(RuntimeError, match=r"'scale_rule'"):
        OPS.mxfp6_pack(w, "round")
    # Non-finite weights: test_mxfp6_non_finite_weight_anywhere.


@requires_mxfp6
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_mxfp6_non_finite_weight_anywhere(device, dtype):
    """One NaN, +Inf or -Inf at the first, a middle or the last element (the check is one min/max
    reduction): pack and round_ raise and w is unchanged. Non-finite values outside a strided view
    of w are not part of w: the view packs and rounds."""
    w = randn((48, 384), dtype, 3).to(device)
    for special in (float("nan"), float("inf"), float("-inf")):
        for r, c in ((0, 0), (17, 200), (47, 383)):
            wn = w.clone()
            wn[r, c] = special
            before = wn.clone()
            with pytest.raises(RuntimeError, match=r"mxfp6_pack: argument 'w' must be finite"):
                OPS.mxfp6_pack(wn, "floor")
            with pytest.raises(RuntimeError, match=r"mxfp6_round_: argument 'w' must be finite"):
                OPS.mxfp6_round_(wn, "floor")
            assert_bitwise_equal(wn, before, "w after a failed mxfp6_round_")
    big = torch.full((48, 512), float("nan"), dtype=dtype, device=device)
    big[:, :384] = w
    view = big[:, :384]
    packed, scales = OPS.mxfp6_pack(view, "floor")
    want_p, want_s = OPS.mxfp6_pack(w, "floor")
    assert_bitwise_equal(packed, want_p, "packed of a view")
    assert_bitwise_equal(scales, want_s, "scales of a view")
    want = w.clone()
    OPS.mxfp6_round_(want, "floor")
    OPS.mxfp6_round_(view, "floor")
    assert not torch.equal(want, w), "rounding changed nothing: the check below could not fail"
    assert_bitwise_equal(view, want, "round_ of a view")
    assert torch.isnan(big[:, 384:]).all(), "round_ of a view wrote outside it"


@requires_mxfp6
def test_mxfp6_unpack_and_linear_bad_args():
    w = randn((32, 256), torch.bfloat16, 2)
    packed, scales = OPS.mxfp6_pack(w, "floor")
    with pytest.raises(RuntimeError, match=r"'packed'"):
        OPS.mxfp6_unpack(packed[:, :, :1024], scales, torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"'packed'"):
        OPS.mxfp6_unpack(packed.view(torch.int8), scales, torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"'scales'"):
        OPS.mxfp6_unpack(packed, scales[:16], torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"'out_dtype'"):
        OPS.mxfp6_unpack(packed, scales, torch.int32)
    x = randn((3, 256), torch.bfloat16, 3)
    with pytest.raises(RuntimeError, match=r"'x'"):
        OPS.mxfp6_linear(x[:, :128], packed, scales, None)
    with pytest.raises(RuntimeError, match=r"'x' must have dtype"):
        OPS.mxfp6_linear(x.float(), packed, scales, None)
    with pytest.raises(RuntimeError, match=r"'bias'"):
        OPS.mxfp6_linear(x, packed, scales, torch.zeros(16, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match=r"'bias'"):
        OPS.mxfp6_linear(x, packed, scales, torch.zeros(32, dtype=torch.float64))


def test_pdl_mode_range(restore_pdl):
    import mxfuse

    before = mxfuse.pdl_mode()
    with pytest.raises(ValueError, match=r"mode must be one of"):
        mxfuse.set_pdl("always")
    with pytest.raises(RuntimeError, match=r"'mode' must be 0 \(off\), 1 \(on\) or 2"):
        OPS._set_pdl(3)
    assert mxfuse.pdl_mode() == before  # unchanged by the failed calls
    for mode in ("off", "prefetch_weights", "on"):
        mxfuse.set_pdl(mode)
        assert mxfuse.pdl_mode() == mode


@pytest.mark.parametrize("value,want", [("2", "prefetch_weights"), ("0", "off"), ("", "on"), ("7", None),
                                        ("on", None)])
def test_pdl_env_value_checked(value, want):
    # MXFUSE_PDL sets the initial mode; it is read while no set_pdl call has been made, so each
    # case runs in a fresh interpreter. A bad value is an error that names the variable.
    assert_env_setting("pdl_mode", "MXFUSE_PDL", value, want, "MXFUSE_PDL must be 0 (off), 1 (on) or 2")


# --- autograd ------------------------------------------------------------------------------------

def _grad_calls(device):
    """(name, call returning a floating output, the input that requires grad)."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 128, generator=g).to(torch.bfloat16).to(device)
    w = torch.randn(128, generator=g).to(torch.bfloat16).to(device)
    packed, scales = OPS.mxfp6_pack(torch.randn(32, 128, generator=g).to(torch.bfloat16))
    packed, scales = packed.to(device), scales.to(device)
    pos = torch.tensor([0, 1, 2], device=device)
    cs = torch.randn(4, 32, generator=g).to(device)
    return [
        ("gemma_rmsnorm", lambda t: OPS.gemma_rmsnorm(t, w), x),
        ("gemma_rmsnorm_weight", lambda t: OPS.gemma_rmsnorm(x, t), w),
        ("gemma_fused_add_rmsnorm", lambda t: OPS.gemma_fused_add_rmsnorm(t, x.clone(), w), x),
        ("gemma_rmsnorm_mxfp8", lambda t: OPS.gemma_rmsnorm_mxfp8(t, w)[0].float(), x),
        ("mxfp8_quantize", lambda t: OPS.mxfp8_quantize(t)[0].float(), x),
        ("mxfp6_linear", lambda t: OPS.mxfp6_linear(t, packed, scales, None), x),
        ("mxfp6_unpack_from_pack", lambda t: OPS.mxfp6_pack(t)[0].float(), torch.randn(32, 128, generator=g).to(torch.bfloat16).to(device)),
        ("rotary_embedding_neox", lambda t: OPS.rotary_embedding_neox(t.view(3, 4, 32), pos, cs, 32), x),
    ]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", range(8))
def test_inputs_that_require_grad(device, case):
    """The ops are inference-only and keep PyTorch's default autograd fallback
    (docs/DECISIONS.md, "Autograd"): a call with an input that requires grad (a norm weight left
    an nn.Parameter outside no_grad) gives the bits of a call without grad, eagerly and under
    torch.compile, which must not fail for it; a backward pass through the output warns that
    mxfuse's op has no autograd kernel and gives the input no gradient."""
    name, fn, t = _grad_calls(device)[case]
    want = fn(t)
    leaf = t.clone().requires_grad_(True)
    got = fn(leaf)
    assert_bitwise_equal(got.detach(), want, f"{name}: forward with grad")
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")(leaf)
    assert_bitwise_equal(compiled.detach(), want, f"{name}: compiled forward with grad")
    if not got.requires_grad:  # an integer output (the packed codes) carries no gradient at all
        assert name == "mxfp6_unpack_from_pack"
        return
    with pytest.warns(UserWarning, match=r"mxfuse::\w+"):
        got.float().sum().backward()
    assert leaf.grad is None
