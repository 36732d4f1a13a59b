"""mxfp8_scaled_mm (SPEC §5) and its QuantizedActivation consumer mxfp8_linear (SPEC §7).

Three kinds of checks:
- bit for bit against ``reference.mxfp8_scaled_mm_blockwise``, which computes mxfuse's documented
  summation order (docs/DECISIONS.md) with torch ops, on random and adversarial codes and scales
  (NaN codes and scales, 448 * 448 products, subnormal codes, terms that round to fp32
  subnormals with ties, overflow to Inf, all-zero blocks); the GPU op against the CPU op, NaN
  payloads included;
- within a bound derived from the fp32 accumulation and the output rounding of the float64
  reference of the dequantized operands (the SPEC §5 contract, whatever the order);
- bad arguments raise a RuntimeError naming the argument; a consumer given a mismatching key or K
  raises ValueError.
"""

from __future__ import annotations

import pytest
import torch
from conftest import (
    DEVICES,
    OPS,
    assert_bitwise_equal,
    assert_equal_nan_by_position,
    dtype_id,
    generator,
    make_norm_inputs,
    randn,
    requires_cuda,
    run_poisoned,
)

import mxfuse
from mxfuse import MXFP8_KEY, QuantizedActivation, QuantKey
from mxfuse import reference as ref

OUT_DTYPES = [torch.bfloat16, torch.float16, torch.float32]
E4M3 = torch.float8_e4m3fn


def codes(shape, seed, nan=False):
    """Random E4M3 codes (bytes), NaN codes replaced unless ``nan``."""
    c = torch.randint(0, 256, shape, generator=generator(seed), dtype=torch.uint8)
    if not nan:
        c = torch.where((c & 0x7F) == 0x7F, c ^ 0x01, c)
    return c.view(E4M3)


def scale_bytes(shape, lo, hi, seed):
    return torch.randint(lo, hi + 1, shape, generator=generator(seed), dtype=torch.uint8)


def b_scale_for(n, k, layout, lo, hi, seed):
    rows = n if layout == "1x32" else n // 32
    return scale_bytes((rows, k // 32), lo, hi, seed)


def mm(a, asc, b, bsc, out_dtype, bias=None, layout="1x32", device="cpu"):
    dev = [None if t is None else t.to(device) for t in (a, asc, b, bsc, bias)]
    return OPS.mxfp8_scaled_mm(*dev[:4], out_dtype, dev[4], b_scale_layout=layout)


# Scale ranges: normal terms; terms across the fp32 subnormal range and below it (sa + sb - 254
# from -174 to -114, dot magnitudes 2^-18 .. 2^22); everything, NaN scale 0xFF and overflow included.
SCALE_RANGES = {"normal": (110, 145), "subnormal": (40, 70), "all": (0, 255)}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["1x32", "32x32"])
@pytest.mark.parametrize("scales", list(SCALE_RANGES))
@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=dtype_id)
def test_matches_blockwise_order(out_dtype, scales, layout, device):
    m, n, k = 6, 64, 256
    lo, hi = SCALE_RANGES[scales]
    a, b = codes((m, k), 1), codes((n, k), 2)
    if scales == "all":  # NaN codes in row 0
        a.view(torch.uint8)[0, 7] = 0x7F
    asc = scale_bytes((m, k // 32), lo, hi, 3)
    bsc = b_scale_for(n, k, layout, lo, hi, 4)
    bias = randn((n,), torch.float32, 5) if scales == "normal" else None
    want = ref.mxfp8_scaled_mm_blockwise(a, asc, b, bsc, out_dtype, bias, layout)
    got = mm(a, asc, b, bsc, out_dtype, bias, layout, device)
    assert got.dtype == out_dtype and got.shape == (m, n) and got.device.type == device
    assert_equal_nan_by_position(got, want, "mxfp8_scaled_mm vs blockwise reference")
    if scales == "all":
        assert got[0].isnan().all() and not got[1:].isnan().all(), "NaN rows, and others"
        assert got.isinf().any(), "the case must reach Inf"
    if scales == "subnormal" and out_dtype == torch.float32:
        sub = (got != 0) & (got.abs() < torch.finfo(torch.float32).tiny)
        assert sub.any(), "the case must reach fp32 subnormal outputs"


def one_product(a_code, b_code, sa, sb, k=64):
    """a [1, k] and b [1, k] with one nonzero product in block 0; scales (sa, sb) on block 0."""
    a = torch.zeros(1, k, dtype=torch.uint8)
    b = torch.zeros(1, k, dtype=torch.uint8)
    a[0, 5], b[0, 5] = a_code, b_code
    asc = torch.full((1, k // 32), 127, dtype=torch.uint8)
    bsc = torch.full((1, k // 32), 127, dtype=torch.uint8)
    asc[0, 0], bsc[0, 0] = sa, sb
    return a.view(E4M3), asc, b.view(E4M3), bsc


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "a_code, b_code, sa, sb, want",
    [
        (0x3C, 0x01, 57, 57, 2.0**-148),  # 1.5 * 2^-9 * 2^-140 = 1.5 * 2^-149: tie, to even (2)
        (0x42, 0x01, 57, 57, 2.0**-148),  # 2.5 * 2^-149: tie, to even (2)
        (0x44, 0x01, 57, 57, 3 * 2.0**-149),  # 3 * 2^-149: exact subnormal
        (0x38, 0x01, 56, 57, 0.0),  # 2^-150: tie between 0 and 2^-149, to even (0)
        (0x3C, 0x01, 56, 57, 2.0**-149),  # 1.5 * 2^-150: above the tie
        (0x7E, 0x7E, 254, 136, float("inf")),  # 448^2 * 2^136 > fp32 max
        (0x7E, 0x7E, 127, 127, 448.0 * 448.0),
        (0xFE, 0x7E, 127, 127, -448.0 * 448.0),
        (0x01, 0x01, 127, 127, 2.0**-18),  # smallest product
        (0x7F, 0x38, 127, 127, float("nan")),  # NaN code
        (0x38, 0x38, 255, 127, float("nan")),  # NaN scale (a)
        (0x38, 0x38, 127, 255, float("nan")),  # NaN scale (b)
        (0x00, 0x00, 255, 127, float("nan")),  # NaN scale on an all-zero block
    ],
)
def test_adversarial_single_products(a_code, b_code, sa, sb, want, device):
    a, asc, b, bsc = one_product(a_code, b_code, sa, sb)
    got = mm(a, asc, b, bsc, torch.float32, device=device).cpu()
    exp = torch.tensor([[want]], dtype=torch.float32)
    assert_equal_nan_by_position(got, exp, f"codes {a_code:#x} x {b_code:#x}, scales {sa}, {sb}")
    if want != want:  # NaN: one canonical pattern on every device
        assert got.view(torch.int32).item() == 0x7FC00000


@pytest.mark.parametrize("device", DEVICES)
def test_overflow_and_cancellation(device):
    """+Inf + -Inf terms give NaN; a huge term cancelled exactly by its negation gives 0."""
    k = 64
    a = torch.full((2, k), 0x7E, dtype=torch.uint8)
    a[:, 32:] = 0xFE  # block 1 is the negation of block 0
    b = torch.full((1, k), 0x7E, dtype=torch.uint8)
    asc = torch.tensor([[254, 254], [150, 150]], dtype=torch.uint8)
    bsc = torch.tensor([[200, 200]], dtype=torch.uint8)
    got = mm(a.view(E4M3), asc, b.view(E4M3), bsc, torch.float32, device=device).cpu()
    assert got[0, 0].isnan() and got[1, 0].item() == 0.0


def bound(a64_abs_dot, ref64, k, out_dtype):
    """|out - ref64| allowed for out = round(fp32 sum of block terms (+ bias)) in any order.

    Products of E4M3 values are exact in fp32; the 32-term block sums and the K/32 + 1 additions
    of terms and bias add at most (31 + K/32 + 1) u sum|a b| (u = 2^-24; 2^-23 if a future kernel's
    tensor-core adds truncate), a term rounded into the fp32 subnormals at most 2^-150 each, and
    the output rounding half an ulp of the output dtype (or its smallest subnormal)."""
    u = 2.0**-23
    blocks = k // 32
    acc_err = (32 + blocks) * u * a64_abs_dot + blocks * 2.0**-150
    fin = torch.finfo(out_dtype)
    half_ulp = torch.maximum(
        (ref64.abs() + acc_err) * fin.eps / 2, torch.full_like(ref64, fin.tiny * fin.eps)
    )
    return acc_err * (1 + 1e-6) + half_ulp


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["1x32", "32x32"])
@pytest.mark.parametrize("m", [1, 7, 64])
@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=dtype_id)
def test_within_bound_of_fp64(out_dtype, m, layout, device):
    """Quantized activations and weights (mxfp8_quantize of normal values, a spread of scales)."""
    n, k = 96, 1024
    x = randn((m, k), torch.float32, m, 3.0)
    x[:, ::97] *= 300.0
    w = randn((n, k), torch.float32, 7, 0.05)
    a, asc = ref.mxfp8_quantize(x)
    b, bsc = ref.mxfp8_quantize(w)
    if layout == "32x32":
        bsc = bsc.reshape(n // 32, 32, k // 32).amax(dim=1)  # any byte per block: a layout test
    bias = randn((n,), out_dtype, 8) if m == 7 else None  # bias in the output dtype
    want = ref.mxfp8_scaled_mm(a, asc, b, bsc, bias, layout)
    got = mm(a, asc, b, bsc, out_dtype, bias, layout, device).cpu().double()
    rows = bsc if layout == "1x32" else bsc.repeat_interleave(32, dim=0)
    a64 = ref.mxfp8_dequantize(a, asc, torch.float32).double()
    b64 = ref.mxfp8_dequantize(b, rows, torch.float32).double()
    absdot = a64.abs() @ b64.abs().t() + (0 if bias is None else bias.double().abs())
    err = (got - want).abs()
    lim = bound(absdot, want, k, out_dtype)
    assert torch.all(err <= lim), f"max excess {(err - lim).max().item()}"


@pytest.mark.parametrize("device", DEVICES)
def test_edge_shapes(device):
    k = 64
    a, asc = codes((3, k), 1), scale_bytes((3, 2), 120, 130, 2)
    b, bsc = codes((5, k), 3), scale_bytes((5, 2), 120, 130, 4)
    assert mm(a[:0], asc[:0], b, bsc, torch.bfloat16, device=device).shape == (0, 5)
    assert mm(a, asc, b[:0], bsc[:0], torch.bfloat16, device=device).shape == (3, 0)
    bias = randn((5,), torch.float32, 5)
    got = mm(a[:, :0], asc[:, :0], b[:, :0], bsc[:, :0], torch.float32, bias, device=device)
    assert_bitwise_equal(got.cpu(), bias.expand(3, 5), "K = 0: the bias alone")


@pytest.mark.parametrize("device", DEVICES)
def test_poisoned_outputs_fully_written(device):
    a, asc = codes((37, 256), 1), scale_bytes((37, 8), 100, 150, 2)
    b, bsc = codes((96, 256), 3), scale_bytes((3, 8), 100, 150, 4)
    for out_dtype in OUT_DTYPES:
        run_poisoned(lambda: mm(a, asc, b, bsc, out_dtype, None, "32x32", device))


@pytest.mark.parametrize("device", DEVICES)
def test_misaligned_and_strided_activation(device):
    """A view of `a` at an odd address, or with a row stride, is read correctly (copied)."""
    m, n, k = 5, 64, 256
    a, asc = codes((m, k), 1), scale_bytes((m, k // 32), 110, 140, 2)
    b, bsc = codes((n, k), 3), scale_bytes((n, k // 32), 110, 140, 4)
    want = mm(a, asc, b, bsc, torch.float32, device=device)
    buf = torch.zeros(m * k + 3, dtype=torch.uint8, device=device)
    buf[3:].copy_(a.view(torch.uint8).reshape(-1))
    a_odd = buf[3:].view(m, k).view(E4M3)
    got = OPS.mxfp8_scaled_mm(a_odd, asc.to(device), b.to(device), bsc.to(device), torch.float32,
                              None, b_scale_layout="1x32")
    assert_bitwise_equal(got, want, "a at an odd address")
    wide = torch.zeros(m, 2 * k, dtype=torch.uint8, device=device)
    wide[:, :k] = a.view(torch.uint8).to(device)
    got = OPS.mxfp8_scaled_mm(wide[:, :k].view(E4M3), asc.to(device), b.to(device), bsc.to(device),
                              torch.float32, None, b_scale_layout="1x32")
    assert_bitwise_equal(got, want, "row-strided a")


@requires_cuda
@pytest.mark.parametrize("layout", ["1x32", "32x32"])
def test_gpu_equals_cpu_and_batch_invariant(layout):
    m, n, k = 37, 160, 2048
    a, asc = codes((m, k), 11, nan=True), scale_bytes((m, k // 32), 60, 200, 12)
    b, bsc = codes((n, k), 13), b_scale_for(n, k, layout, 60, 200, 14)
    bias = randn((n,), torch.float32, 15)
    for out_dtype in OUT_DTYPES:
        cpu = mm(a, asc, b, bsc, out_dtype, bias, layout)
        gpu = mm(a, asc, b, bsc, out_dtype, bias, layout, "cuda")
        assert_bitwise_equal(gpu, cpu, f"GPU vs CPU ({out_dtype})")
        # A row alone, or in a batch of 2, 3 or 5 rows (every tile height of the GPU kernel:
        # 1, 2, 4 and 8 rows of `a`), gives the bits it has in the batch of 37.
        for i, rows in ((0, 1), (17, 1), (36, 1), (3, 2), (20, 3), (30, 5)):
            part = mm(a[i : i + rows], asc[i : i + rows], b, bsc, out_dtype, bias, layout, "cuda")
            assert_bitwise_equal(part, gpu[i : i + rows], f"rows {i}..{i + rows - 1} alone vs in the batch")


# --- bad input -----------------------------------------------------------------------------------


def good(device="cpu", n=64, k=128):
    a, asc = codes((4, k), 1), scale_bytes((4, k // 32), 120, 130, 2)
    b, bsc = codes((n, k), 3), scale_bytes((n, k // 32), 120, 130, 4)
    return {"a": a.to(device), "a_scale": asc.to(device), "b": b.to(device),
            "b_scale": bsc.to(device), "out_dtype": torch.bfloat16, "bias": None,
            "b_scale_layout": "1x32"}


def call(kw):
    return OPS.mxfp8_scaled_mm(kw["a"], kw["a_scale"], kw["b"], kw["b_scale"], kw["out_dtype"],
                               kw["bias"], b_scale_layout=kw["b_scale_layout"])


def bad_cases():
    def case(match, **change):
        return match, change

    g = good()
    bf = torch.zeros(4, 128, dtype=torch.bfloat16)
    return {
        "a_dtype": case(r"argument 'a' must have dtype Float8_e4m3fn, got BFloat16", a=bf),
        "a_dim": case(r"argument 'a' must have 2 dimension", a=g["a"].reshape(2, 2, 128)),
        "k_mod_32": case(r"last dimension of 'a' must be a multiple of 32 \(one E8M0 .*got 48",
                         a=codes((4, 48), 1)),
        "a_scale_dtype": case(r"argument 'a_scale' must have dtype Byte, got Int",
                              a_scale=g["a_scale"].int()),
        "a_scale_shape": case(r"argument 'a_scale' must have shape \[4, 4\].*got \[4, 3\]",
                              a_scale=g["a_scale"][:, :3]),
        "b_dtype": case(r"argument 'b' must have dtype Float8_e4m3fn", b=g["b"].view(torch.uint8)),
        "b_k": case(r"argument 'b' must have shape \[N, K\] with K = 128.*got \[64, 96\]",
                    b=codes((64, 96), 3)),
        "layout": case(r"argument 'b_scale_layout' must be '1x32'.*got 'row_major'",
                       b_scale_layout="row_major"),
        "layout_32_n": case(r"'32x32' needs N \(dim 0 of 'b'\) divisible by 32, got \[48, 128\]",
                            b=codes((48, 128), 3), b_scale=scale_bytes((1, 4), 1, 2, 1),
                            b_scale_layout="32x32"),
        "b_scale_shape_1x32": case(r"argument 'b_scale' must have shape \[64, 4\] \(\[N, K/32\] for "
                                   r"b_scale_layout '1x32'", b_scale=scale_bytes((2, 4), 1, 2, 1)),
        "b_scale_shape_32x32": case(r"argument 'b_scale' must have shape \[2, 4\] \(\[N/32, K/32\]",
                                    b_scale_layout="32x32"),
        "b_scale_dtype": case(r"argument 'b_scale' must have dtype Byte",
                              b_scale=g["b_scale"].to(torch.int8)),
        "b_strided": case(r"argument 'b' must be contiguous",
                          b=codes((64, 256), 3)[:, ::2]),
        "b_misaligned": case(r"argument 'b' must start on a 16-byte boundary, got a view at address "
                             r"offset 1", b=torch.zeros(64 * 128 + 1, dtype=torch.uint8)[1:]
                             .view(64, 128).view(E4M3)),
        "b_scale_strided": case(r"argument 'b_scale' must be contiguous",
                                b_scale=scale_bytes((4, 64), 1, 2, 1).t()),
        "out_dtype": case(r"argument 'out_dtype' must be BFloat16, Half or Float, got Char",
                          out_dtype=torch.int8),
        "bias_dtype": case(r"argument 'bias' must have dtype BFloat16 or Float, got Half",
                           bias=torch.zeros(64, dtype=torch.float16)),
        "bias_shape": case(r"argument 'bias' must have shape \[64\], got \[63\]",
                           bias=torch.zeros(63)),
    }


@pytest.mark.parametrize("name", list(bad_cases()))
def test_bad_input_names_the_argument(name):
    match, change = bad_cases()[name]
    kw = {**good(), **change}
    with pytest.raises(RuntimeError, match=match):
        call(kw)


@requires_cuda
@pytest.mark.parametrize("arg", ["a_scale", "b", "b_scale", "bias"])
def test_bad_device(arg):
    kw = good("cuda")
    kw["bias"] = torch.zeros(64, device="cuda")
    kw[arg] = kw[arg].cpu()
    with pytest.raises(RuntimeError, match=rf"argument '{arg}' must be on the device of 'a' \(cuda"):
        call(kw)


# --- the QuantizedActivation consumer ------------------------------------------------------------


def weight_mxfp8(n, k, seed):
    return ref.mxfp8_quantize(randn((n, k), torch.float32, seed, 0.05))


@pytest.mark.parametrize("device", DEVICES)
def test_mxfp8_linear_consumes_fused_norm(device):
    x, r, w = (t.to(device) for t in make_norm_inputs(6, 256, torch.bfloat16, torch.bfloat16, 3))
    x, r = x.reshape(2, 3, 256), r.reshape(2, 3, 256)
    codes_, scales_ = OPS.gemma_fused_add_rmsnorm_mxfp8(x, r, w, 1e-6, 1.0, "ceil")
    qa = QuantizedActivation(codes_, scales_, MXFP8_KEY, x.dtype, tuple(x.shape))
    b, bsc = (t.to(device) for t in weight_mxfp8(64, 256, 4))
    y = mxfuse.mxfp8_linear(qa, b, bsc, b_scale_layout="1x32")
    assert y.shape == (2, 3, 64) and y.dtype == torch.bfloat16
    flat = mm(codes_.reshape(6, 256), scales_.reshape(6, 8), b, bsc, torch.bfloat16, device=device)
    assert_bitwise_equal(y.reshape(6, 64), flat, "consumer vs the op on flattened rows")
    y32 = mxfuse.mxfp8_linear(qa, b, bsc, b_scale_layout="1x32", out_dtype=torch.float32)
    assert y32.dtype == torch.float32
    with pytest.raises(ValueError, match="consumer expects key"):
        mxfuse.mxfp8_linear(qa, b, bsc, b_scale_layout="1x32",
                            input_quant_key=QuantKey(scale_rule="floor"))
    b2, bsc2 = (t.to(device) for t in weight_mxfp8(64, 128, 5))
    with pytest.raises(ValueError, match="consumer expects K = 128, got 256"):
        mxfuse.mxfp8_linear(qa, b2, bsc2, b_scale_layout="1x32")


def consumer_chain(x, residual, weight, b, b_scale):
    codes_, scales_ = OPS.gemma_fused_add_rmsnorm_mxfp8(x, residual, weight, 1e-6, 1.0, "ceil")
    qa = QuantizedActivation(codes_, scales_, MXFP8_KEY, x.dtype, tuple(x.shape))
    return mxfuse.mxfp8_linear(qa, b, b_scale, b_scale_layout="32x32")


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_norm_to_mxfp8_linear(device):
    torch._dynamo.reset()
    compiled = torch.compile(consumer_chain, fullgraph=True)
    b, bsc = (t.to(device) for t in weight_mxfp8(64, 512, 6))
    bsc = bsc.reshape(2, 32, 16).amax(dim=1).contiguous()
    for m, seed in ((4, 1), (4, 2)):
        x, r, w = (t.to(device) for t in make_norm_inputs(m, 512, torch.bfloat16, torch.bfloat16, seed))
        r_eager, r_comp = r.clone(), r.clone()
        want = consumer_chain(x, r_eager, w, b, bsc)
        got = compiled(x, r_comp, w, b, bsc)
        assert_bitwise_equal(got, want, "compiled vs eager")
        assert_bitwise_equal(r_comp, r_eager, "residual")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["1x32", "32x32"])
def test_opcheck(layout, device):
    """opcheck without its schema util (SchemaCheckMode has no float8 allclose); the schema part
    by hand: inputs unchanged, output not aliasing them."""
    n, k = 64, 256
    a, asc = (t.to(device) for t in ref.mxfp8_quantize(randn((5, k), torch.float32, 1)))
    b, bsc = codes((n, k), 2).to(device), b_scale_for(n, k, layout, 110, 140, 3).to(device)
    bias = randn((n,), torch.float32, 4).to(device)
    args = (a, asc, b, bsc, torch.bfloat16, bias)
    torch.library.opcheck(
        OPS.mxfp8_scaled_mm.default, args, {"b_scale_layout": layout},
        test_utils=("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"),
    )
    before = [t.clone() for t in (a, asc, b, bsc, bias)]
    out = OPS.mxfp8_scaled_mm(*args, b_scale_layout=layout)
    for t, t0, name in zip((a, asc, b, bsc, bias), before, ("a", "a_scale", "b", "b_scale", "bias")):
        assert_bitwise_equal(t, t0, f"{name} after the op")
        assert out.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()


# --- GPU launch behaviour ------------------------------------------------------------------------


@requires_cuda
def test_cuda_graph_capture_and_replay():
    """Fused norm -> QuantizedActivation -> mxfp8_linear captured once, replayed on new inputs."""
    m, n, k = 8, 96, 512
    x0, r0, w0 = make_norm_inputs(m, k, torch.bfloat16, torch.bfloat16, seed=1)
    x_s, r_s, w_s = x0.cuda(), r0.cuda(), w0.cuda()
    b, bsc = (t.cuda() for t in weight_mxfp8(n, k, 2))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture
        for _ in range(2):
            consumer_chain_1x32(x_s, r_s.clone(), w_s, b, bsc)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = consumer_chain_1x32(x_s, r_s, w_s, b, bsc)
    for seed in (3, 4):
        x_new, r_new, _ = make_norm_inputs(m, k, torch.bfloat16, torch.bfloat16, seed=seed)
        x_s.copy_(x_new)
        r_s.copy_(r_new)
        graph.replay()
        torch.cuda.synchronize()
        want = consumer_chain_1x32(x_new.cuda(), r_new.cuda(), w_s, b, bsc)
        assert_bitwise_equal(out, want, f"graph replay {seed}")


def consumer_chain_1x32(x, residual, weight, b, b_scale):
    codes_, scales_ = OPS.gemma_fused_add_rmsnorm_mxfp8(x, residual, weight, 1e-6, 1.0, "ceil")
    qa = QuantizedActivation(codes_, scales_, MXFP8_KEY, x.dtype, tuple(x.shape))
    return mxfuse.mxfp8_linear(qa, b, b_scale, b_scale_layout="1x32")


@requires_cuda
def test_runs_on_the_current_stream():
    """Inputs written on a side stream behind a long sleep are the ones the op reads there."""
    a, asc = codes((64, 1024), 1).cuda(), scale_bytes((64, 32), 110, 140, 2).cuda()
    b, bsc = codes((256, 1024), 3).cuda(), scale_bytes((256, 32), 110, 140, 4).cuda()
    want = OPS.mxfp8_scaled_mm(a, asc, b, bsc, torch.float32, None, b_scale_layout="1x32")
    a_buf = torch.zeros_like(a.view(torch.uint8))
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)
        a_buf.copy_(a.view(torch.uint8))
        got = OPS.mxfp8_scaled_mm(a_buf.view(E4M3), asc, b, bsc, torch.float32, None,
                                  b_scale_layout="1x32")
    side.synchronize()
    assert_bitwise_equal(got, want, "on a second stream")


@requires_cuda
def test_more_rows_than_one_grid_column():
    """M above 65535 * 8 rows: the kernel's grid-stride loop over rows writes every output."""
    m, n, k = 600_000, 40, 32
    a, asc = codes((m, k), 5), scale_bytes((m, 1), 120, 134, 6)
    b, bsc = codes((n, k), 7), scale_bytes((n, 1), 120, 134, 8)
    (got,) = run_poisoned(lambda: mm(a, asc, b, bsc, torch.bfloat16, device="cuda"))
    rows = torch.tensor([0, 1, 524_279, 524_280, 524_281, m - 1])
    want = mm(a[rows], asc[rows], b, bsc, torch.bfloat16)
    assert_bitwise_equal(got[rows], want, "rows past the first grid column")
