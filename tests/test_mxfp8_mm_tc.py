"""mxfp8_scaled_mm's tensor-core kernel (``mxfuse.set_fp8_mm_kernel("tensor_cores")``, NVIDIA
sm_89+; docs/DECISIONS.md).

Its block dots come from FP8 mma, so it is held to SPEC §5's bound against the float64 reference of
the dequantized operands (``test_mxfp8_mm.bound``), not to the CPU op's bits. That bound allows 31
roundings of 2^-23 * sum |a b| per block for the block sum; the tensor core's block sums measured at
most 4.4 * 2^-24 * sum |a b| on the H200, below the exact kernel's left-to-right fp32 sum (7.2 *
2^-24; ``benchmarks/fp8_tc_block_error.py``, ``benchmarks/results/h200_fp8_tc_block_error.json``). What stays exact: it is deterministic, a row of ``a`` gives the same bits alone and in
any batch (both tile heights), the scale-byte and scale-word loads agree, NaN codes and NaN scales
give NaN, every output element is written, and a captured graph replays the eager bits. A profile
checks that the setting really launches the tensor-core kernel. The CPU op ignores the setting.
"""

from __future__ import annotations

import pytest
import torch
from conftest import (HAS_CUDA, OPS, assert_bitwise_equal, assert_env_setting, dtype_id, launched_kernels, randn,
                      run_poisoned)
from test_mxfp8_mm import E4M3, OUT_DTYPES, b_scale_for, bound, codes, mm, scale_bytes

import mxfuse
from mxfuse import reference as ref

# The tensor-core kernel runs where the device and the build's kernels are sm_89+ (an older
# build JIT-compiled on a newer GPU runs the exact kernel: test_device_code.py).
HAS_FP8_MMA = (HAS_CUDA and torch.version.hip is None and torch.cuda.get_device_capability() >= (8, 9)
               and OPS._device_code_arch(0) >= 89)
requires_fp8_mma = pytest.mark.skipif(
    not HAS_FP8_MMA or torch.cuda.get_device_properties(0).shared_memory_per_block_optin < 16 * 10240,
    reason="needs an NVIDIA GPU of sm_89 or newer with 160 KB of shared memory per block")

@pytest.fixture
def tensor_cores():
    before = mxfuse.fp8_mm_kernel()
    mxfuse.set_fp8_mm_kernel("tensor_cores")
    yield
    mxfuse.set_fp8_mm_kernel(before)


def test_setting_names_the_choices():
    with pytest.raises(ValueError, match=r"kernel must be one of \('exact', 'tensor_cores'\), got 'fast'"):
        mxfuse.set_fp8_mm_kernel("fast")
    with pytest.raises(RuntimeError, match="must be 0 \\(exact\\) or 1 \\(tensor_cores\\), got 7"):
        torch.ops.mxfuse._set_fp8_mm_kernel(7)


def test_setting_round_trips():
    before = mxfuse.fp8_mm_kernel()
    try:
        for kernel in ("tensor_cores", "exact", "tensor_cores"):
            mxfuse.set_fp8_mm_kernel(kernel)
            assert mxfuse.fp8_mm_kernel() == kernel
    finally:
        mxfuse.set_fp8_mm_kernel(before)


@pytest.mark.parametrize("value,want", [("tensor_cores", "tensor_cores"), ("exact", "exact"), ("", "exact"),
                                        ("1", None), ("fast", None)])
def test_env_value_checked(value, want):
    # MXFUSE_FP8_MM sets the initial choice, read while no set_fp8_mm_kernel call has been made,
    # so each case runs in a fresh interpreter. A bad value is an error naming the variable.
    assert_env_setting("fp8_mm_kernel", "MXFUSE_FP8_MM", value, want,
                       "MXFUSE_FP8_MM must be 'exact' or 'tensor_cores'")


def test_cpu_op_ignores_the_setting(tensor_cores):
    a, asc = codes((5, 256), 1), scale_bytes((5, 8), 100, 150, 2)
    b, bsc = codes((48, 256), 3), scale_bytes((48, 8), 100, 150, 4)
    want = ref.mxfp8_scaled_mm_blockwise(a, asc, b, bsc, torch.float32, None, "1x32")
    assert_bitwise_equal(mm(a, asc, b, bsc, torch.float32), want, "CPU op under tensor_cores")


def quantized(m, n, k, layout, seed):
    x = randn((m, k), torch.float32, seed, 3.0)
    x[:, ::97] *= 300.0
    w = randn((n, k), torch.float32, seed + 1, 0.05)
    a, asc = ref.mxfp8_quantize(x)
    b, bsc = ref.mxfp8_quantize(w)
    if layout == "32x32":
        bsc = bsc.reshape(n // 32, 32, k // 32).amax(dim=1)
    return a, asc, b, bsc


def check_bound(a, asc, b, bsc, bias, layout, out_dtype, got):
    want = ref.mxfp8_scaled_mm(a, asc, b, bsc, bias, layout)
    rows = bsc if layout == "1x32" else bsc.repeat_interleave(32, dim=0)
    a64 = ref.mxfp8_dequantize(a, asc, torch.float32).double()
    b64 = ref.mxfp8_dequantize(b, rows, torch.float32).double()
    absdot = a64.abs() @ b64.abs().t() + (0 if bias is None else bias.double().abs())
    err = (got.cpu().double() - want).abs()
    lim = bound(absdot, want, a.shape[1], out_dtype)
    assert torch.all(err <= lim), f"max excess {(err - lim).max().item()}"


@requires_fp8_mma
@pytest.mark.parametrize("layout", ["1x32", "32x32"])
@pytest.mark.parametrize("shape", [(1, 96, 1024), (7, 64, 4096), (9, 160, 96), (16, 40, 1024), (37, 96, 2080)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=dtype_id)
def test_within_bound_of_fp64(out_dtype, shape, layout, tensor_cores):
    m, n, k = shape
    if layout == "32x32" and n % 32:
        pytest.skip("32x32 scales need N % 32 == 0")
    a, asc, b, bsc = quantized(m, n, k, layout, m + n)
    bias = randn((n,), out_dtype, 8) if m in (7, 37) else None
    got = mm(a, asc, b, bsc, out_dtype, bias, layout, "cuda")
    check_bound(a, asc, b, bsc, bias, layout, out_dtype, got)


@requires_fp8_mma
@pytest.mark.parametrize("scales", [(110, 145), (40, 70)], ids=["normal", "subnormal"])
def test_random_codes_within_bound(scales, tensor_cores):
    """Every finite code (subnormals, 448 * 448 products), terms in the fp32 subnormals (scales
    40..70), all-zero blocks; fp32 out (these terms overflow bf16 and fp16)."""
    m, n, k = 13, 80, 640
    a, asc = codes((m, k), 21), scale_bytes((m, k // 32), *scales, 22)
    b, bsc = codes((n, k), 23), scale_bytes((n, k // 32), *scales, 24)
    a.view(torch.uint8)[:, 64:96] = 0  # an all-zero block
    a.view(torch.uint8)[3, :32] = 0x7E  # 448 everywhere against random codes
    b.view(torch.uint8)[5, :32] = 0xFE  # -448
    got = mm(a, asc, b, bsc, torch.float32, None, "1x32", "cuda")
    check_bound(a, asc, b, bsc, None, "1x32", torch.float32, got)


@requires_fp8_mma
def test_overflow_and_cancellation(tensor_cores):
    """+Inf + -Inf terms give NaN; a huge term cancelled exactly by its negation gives 0."""
    k = 64
    a = torch.full((2, k), 0x7E, dtype=torch.uint8)
    a[:, 32:] = 0xFE
    b = torch.full((1, k), 0x7E, dtype=torch.uint8)
    asc = torch.tensor([[254, 254], [150, 150]], dtype=torch.uint8)
    bsc = torch.tensor([[200, 200]], dtype=torch.uint8)
    got = mm(a.view(E4M3), asc, b.view(E4M3), bsc, torch.float32, device="cuda").cpu()
    assert got[0, 0].isnan() and got[1, 0].item() == 0.0


SCALE_EDGES = [0, 1, 63, 64, 72, 73, 100, 127, 150, 179, 180, 190, 191, 200, 254, 255]


@requires_fp8_mma
def test_block_terms_bitwise(tensor_cores):
    """Each block term is the block dot times 2^(sa + sb - 254) rounded once (NaN for a 0xFF scale),
    added in K order: with K = 128 (one warp, one group of four blocks) the output equals that sum
    built from the kernel's own block dots (runs of one block at scales 2^0), bit for bit. Scales
    at and around every edge of the kernel's paths (the group test [73, 179] of the fma terms, the
    pair test of the one-multiply terms, the fp32 normal range, 0 and 0xFF), rows whose scales all
    pass the group test, and rows in [64, 190] (the one-multiply pair test's range)."""
    m, n, k = 8, 32, 128
    gen = torch.Generator().manual_seed(81)
    a, b = codes((m, k), 82), codes((n, k), 83)
    edges = torch.tensor(SCALE_EDGES, dtype=torch.uint8)
    asc = edges[torch.randint(0, len(SCALE_EDGES), (m, 4), generator=gen)]
    bsc = edges[torch.randint(0, len(SCALE_EDGES), (n, 4), generator=gen)]
    asc[:3] = torch.randint(73, 180, (3, 4), generator=gen, dtype=torch.uint8)  # all in [73, 179]
    bsc[:5] = torch.randint(73, 180, (5, 4), generator=gen, dtype=torch.uint8)
    asc[3:5] = torch.randint(64, 191, (2, 4), generator=gen, dtype=torch.uint8)  # all in [64, 190]
    bsc[5:9] = torch.randint(64, 191, (4, 4), generator=gen, dtype=torch.uint8)
    one_a, one_b = torch.full((m, 1), 127, dtype=torch.uint8), torch.full((n, 1), 127, dtype=torch.uint8)
    want = torch.zeros(m, n, dtype=torch.float32)
    for j in range(4):
        cols = slice(32 * j, 32 * j + 32)
        dot = mm(a[:, cols], one_a, b[:, cols], one_b, torch.float32, None, "1x32", "cuda").cpu()
        e = asc[:, j : j + 1].double() + bsc[:, j].double() - 254.0
        term = (dot.double() * torch.pow(2.0, e)).float()  # one rounding (exact in float64)
        nan = (asc[:, j : j + 1] == 255) | (bsc[:, j] == 255)
        term = torch.where(nan, torch.tensor(float("nan")), term)
        want = want + term  # fp32 adds in K order
    got = mm(a, asc, b, bsc, torch.float32, None, "1x32", "cuda").cpu()
    assert torch.equal(got.isnan(), want.isnan()), "NaN positions"
    ok = ~want.isnan()
    assert_bitwise_equal(got[ok], want[ok], "block terms and K-order sum")


@requires_fp8_mma
def test_batch_invariant_and_deterministic(tensor_cores):
    """A row alone, or in batches of 2, 8 (one n8 block), 9 and 16 (two), gives its bits in the
    batch of 37 (tiles of 16 rows, the last one partial); a second run gives the same bits."""
    m, n, k = 37, 200, 1024
    a, asc = codes((m, k), 31), scale_bytes((m, k // 32), 100, 160, 32)
    b, bsc = codes((n, k), 33), scale_bytes((n, k // 32), 100, 160, 34)
    bias = randn((n,), torch.float32, 35)
    for out_dtype in OUT_DTYPES:
        full = mm(a, asc, b, bsc, out_dtype, bias, "1x32", "cuda")
        assert_bitwise_equal(mm(a, asc, b, bsc, out_dtype, bias, "1x32", "cuda"), full, "second run")
        for i, rows in ((0, 1), (36, 1), (3, 2), (10, 8), (20, 9), (21, 16)):
            part = mm(a[i : i + rows], asc[i : i + rows], b, bsc, out_dtype, bias, "1x32", "cuda")
            assert_bitwise_equal(part, full[i : i + rows], f"rows {i}..{i + rows - 1} alone vs in the batch")


@requires_fp8_mma
@pytest.mark.parametrize("warps", ["1", "2", "16"])
def test_every_k_split(warps, tensor_cores, monkeypatch):
    """The K split pinned (MXFUSE_FP8_TC_WARPS): within the bound, and batch invariant."""
    monkeypatch.setenv("MXFUSE_FP8_TC_WARPS", warps)
    m, n, k = 19, 48, 4096 + 96
    a, asc, b, bsc = quantized(m, n, k, "1x32", 71)
    got = mm(a, asc, b, bsc, torch.float32, None, "1x32", "cuda")
    check_bound(a, asc, b, bsc, None, "1x32", torch.float32, got)
    for i, rows in ((0, 1), (5, 8), (3, 16)):
        part = mm(a[i : i + rows], asc[i : i + rows], b, bsc, torch.float32, None, "1x32", "cuda")
        assert_bitwise_equal(part, got[i : i + rows], f"warps {warps}: rows {i}..{i + rows - 1} alone")


@pytest.mark.parametrize(
    "var, value, expected",
    [("MXFUSE_FP8_TC_WARPS", v, "1, 2, 4, 8 or 16") for v in ("3", "2x", "four", "32")]
    + [("MXFUSE_FP8_TC_SPLIT", v, "1, 2 or 4") for v in ("3", "8", "two")],
)
def test_bad_launch_setting(var, value, expected, monkeypatch):
    """The tensor-core kernel's K split and cluster split settings: strict values, named errors."""
    monkeypatch.setenv(var, value)
    a, asc = codes((2, 64), 1), scale_bytes((2, 2), 120, 130, 2)
    b, bsc = codes((16, 64), 3), scale_bytes((16, 2), 120, 130, 4)
    if HAS_CUDA and torch.version.hip is None:  # read by every CUDA launch of the op
        with pytest.raises(RuntimeError, match=f"{var} must be {expected}, got '{value}'"):
            mm(a, asc, b, bsc, torch.float32, None, "1x32", "cuda")
    mm(a, asc, b, bsc, torch.float32)  # the CPU op does not read it


@requires_fp8_mma
@pytest.mark.parametrize("split", ["2", "4"])
@pytest.mark.parametrize("warps", ["4", "16"])
def test_cluster_split_keeps_the_bits(split, warps, tensor_cores, monkeypatch):
    """An output tile shared by the CTAs of a cluster (MXFUSE_FP8_TC_SPLIT; sm_90+, else ignored)
    runs the same virtual warps, so it gives the bits of one CTA: bf16 and fp32 outputs, a bias,
    one and two n8 blocks, a partial last tile and group, NaN codes and scales at every edge."""
    m, n, k = 37, 40, 4096 + 96
    a, asc, b, bsc = quantized(m, n, k, "1x32", 91)
    gen = torch.Generator().manual_seed(92)
    edges = torch.tensor(SCALE_EDGES, dtype=torch.uint8)
    asc[30:] = edges[torch.randint(0, len(SCALE_EDGES), (m - 30, k // 32), generator=gen)]
    bsc[33:] = edges[torch.randint(0, len(SCALE_EDGES), (n - 33, k // 32), generator=gen)]
    a.view(torch.uint8)[29, 40] = 0x7F  # NaN code
    monkeypatch.setenv("MXFUSE_FP8_TC_WARPS", warps)
    for out_dtype in OUT_DTYPES:
        bias = randn((n,), out_dtype, 93)
        for rows in (slice(0, 8), slice(0, 16), slice(0, m)):
            monkeypatch.setenv("MXFUSE_FP8_TC_SPLIT", "1")
            want = mm(a[rows], asc[rows], b, bsc, out_dtype, bias, "1x32", "cuda")
            monkeypatch.setenv("MXFUSE_FP8_TC_SPLIT", split)
            got = mm(a[rows], asc[rows], b, bsc, out_dtype, bias, "1x32", "cuda")
            assert_bitwise_equal(got, want, f"split {split}, warps {warps}, rows {rows}, {out_dtype}")


@requires_fp8_mma
def test_scale_bytes_and_words_agree(tensor_cores):
    """Scales at an odd address (read a byte at a time) give the bits of aligned scales (read four
    blocks at a time)."""
    m, n, k = 6, 48, 512
    a, asc = codes((m, k), 41), scale_bytes((m, k // 32), 100, 160, 42)
    b, bsc = codes((n, k), 43), scale_bytes((n, k // 32), 100, 160, 44)
    want = mm(a, asc, b, bsc, torch.float32, None, "1x32", "cuda")
    buf_a = torch.zeros(asc.numel() + 1, dtype=torch.uint8, device="cuda")
    buf_a[1:].copy_(asc.reshape(-1))
    buf_b = torch.zeros(bsc.numel() + 3, dtype=torch.uint8, device="cuda")
    buf_b[3:].copy_(bsc.reshape(-1))
    got = OPS.mxfp8_scaled_mm(a.cuda(), buf_a[1:].view(m, k // 32), b.cuda(), buf_b[3:].view(n, k // 32),
                              torch.float32, None, b_scale_layout="1x32")
    assert_bitwise_equal(got, want, "odd-address scales")


@requires_fp8_mma
def test_nan_codes_and_scales(tensor_cores):
    m, n, k = 4, 32, 256
    a, asc = codes((m, k), 51), scale_bytes((m, k // 32), 110, 140, 52)
    b, bsc = codes((n, k), 53), scale_bytes((n, k // 32), 110, 140, 54)
    a.view(torch.uint8)[1, 70] = 0x7F  # NaN code in row 1 of a
    b.view(torch.uint8)[9, 200] = 0xFF  # NaN code in row 9 of b
    asc[2, 5] = 0xFF  # NaN scale of row 2 of a
    bsc[17, 0] = 0xFF  # NaN scale of row 17 of b
    for out_dtype in OUT_DTYPES:
        got = mm(a, asc, b, bsc, out_dtype, None, "1x32", "cuda").cpu()
        nan = torch.zeros(m, n, dtype=torch.bool)
        nan[1, :] = nan[2, :] = True
        nan[:, 9] = nan[:, 17] = True
        assert torch.equal(got.isnan(), nan), f"NaN positions ({out_dtype})"
        if out_dtype == torch.float32:
            assert torch.all(got[nan].view(torch.int32) == 0x7FC00000), "canonical NaN"


@requires_fp8_mma
def test_poisoned_outputs_fully_written(tensor_cores):
    """N not a multiple of 16 and M not of 8 or 16; 32x32 scales; K blocks not a multiple of 4."""
    for m, n, k in ((37, 96, 256), (5, 40, 96), (1, 17, 32)):
        layout = "32x32" if n % 32 == 0 else "1x32"
        a, asc = codes((m, k), 1), scale_bytes((m, k // 32), 100, 150, 2)
        b, bsc = codes((n, k), 3), b_scale_for(n, k, layout, 100, 150, 4)
        for out_dtype in OUT_DTYPES:
            run_poisoned(lambda: mm(a, asc, b, bsc, out_dtype, None, layout, "cuda"))


@requires_fp8_mma
def test_edge_shapes(tensor_cores):
    k = 64
    a, asc = codes((3, k), 1), scale_bytes((3, 2), 120, 130, 2)
    b, bsc = codes((5, k), 3), scale_bytes((5, 2), 120, 130, 4)
    assert mm(a[:0], asc[:0], b, bsc, torch.bfloat16, device="cuda").shape == (0, 5)
    assert mm(a, asc, b[:0], bsc[:0], torch.bfloat16, device="cuda").shape == (3, 0)
    bias = randn((5,), torch.float32, 5)
    got = mm(a[:, :0], asc[:, :0], b[:, :0], bsc[:, :0], torch.float32, bias, device="cuda")
    assert_bitwise_equal(got.cpu(), bias.expand(3, 5), "K = 0: the bias alone")


@requires_fp8_mma
def test_launches_the_tensor_core_kernel(tensor_cores):
    a, asc = codes((4, 256), 1).cuda(), scale_bytes((4, 8), 120, 130, 2).cuda()
    b, bsc = codes((64, 256), 3).cuda(), scale_bytes((64, 8), 120, 130, 4).cuda()

    def kernels(kernel):
        mxfuse.set_fp8_mm_kernel(kernel)
        return launched_kernels(lambda: OPS.mxfp8_scaled_mm(a, asc, b, bsc, torch.bfloat16, None,
                                                            b_scale_layout="1x32"), "fp8_mm")[1]

    assert any("fp8_mm_tc_kernel" in name for name in kernels("tensor_cores"))
    exact = kernels("exact")
    assert exact and not any("fp8_mm_tc_kernel" in name for name in exact)


@requires_fp8_mma
def test_cluster_split_chosen_where_it_balances_the_sms(tensor_cores):
    """On sm_90+, an output tile is shared by a cluster of two CTAs when there are between 1 and
    1.5 tiles per SM (fp8_mm_tc_kernel<kNB, 2>), and not with fewer tiles than SMs."""
    if torch.cuda.get_device_capability() < (9, 0) or OPS._device_code_arch(0) < 90:
        pytest.skip("clusters need sm_90+ (device and kernels)")
    sms = torch.cuda.get_device_properties(0).multi_processor_count

    def launched(n, m):
        a, asc = codes((m, 1024), 1).cuda(), scale_bytes((m, 32), 120, 130, 2).cuda()
        b, bsc = codes((n, 1024), 3).cuda(), scale_bytes((n, 32), 120, 130, 4).cuda()
        return launched_kernels(lambda: OPS.mxfp8_scaled_mm(a, asc, b, bsc, torch.bfloat16, None,
                                                            b_scale_layout="1x32"), "fp8_mm_tc_kernel")[1]

    n = 16 * (sms + sms // 4)
    assert any("fp8_mm_tc_kernel<1, 2>" in name for name in launched(n, 1)), launched(n, 1)
    assert any("fp8_mm_tc_kernel<2, 2>" in name for name in launched(n, 16)), launched(n, 16)
    assert any("fp8_mm_tc_kernel<1, 1>" in name for name in launched(16 * (sms // 2), 1))


@requires_fp8_mma
def test_cuda_graph_replays_eager_bits(tensor_cores):
    m, n, k = 9, 64, 512
    a, asc = codes((m, k), 61).cuda(), scale_bytes((m, k // 32), 110, 140, 62).cuda()
    b, bsc = codes((n, k), 63).cuda(), scale_bytes((n, k // 32), 110, 140, 64).cuda()
    eager = OPS.mxfp8_scaled_mm(a, asc, b, bsc, torch.bfloat16, None, b_scale_layout="1x32")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        OPS.mxfp8_scaled_mm(a, asc, b, bsc, torch.bfloat16, None, b_scale_layout="1x32")
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = OPS.mxfp8_scaled_mm(a, asc, b, bsc, torch.bfloat16, None, b_scale_layout="1x32")
    mxfuse.set_fp8_mm_kernel("exact")  # the graph keeps the kernel it was captured with
    out.fill_(0)
    graph.replay()
    torch.cuda.synchronize()
    assert_bitwise_equal(out, eager, "graph replay")
