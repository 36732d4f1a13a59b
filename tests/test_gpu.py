"""GPU-only checks (skipped without CUDA): GPU == CPU bit for bit on every op, determinism, CUDA
graph capture / replay and the current stream (two devices: test_multi_gpu.py).

Other GPU items run as the "cuda" parametrization of the shared tests: op == reference, fused ==
unfused, batch invariance, poisoned outputs fully written (test_norm_mxfp8.py), opcheck and
torch.compile(fullgraph=True) (test_opcheck_compile.py), mixed-device errors (test_bad_input.py),
codecs (test_codecs.py).
"""

from __future__ import annotations

import pytest
import torch
from conftest import (
    KIND_RULES,
    ACT_DTYPES,
    NORM_KINDS,
    OPS,
    adversarial_inputs,
    assert_bitwise_equal,
    call_norm,
    dtype_id,
    kind_has_residual,
    kind_is_mx,
    make_norm_inputs,
    requires_cuda,
)

pytestmark = requires_cuda

KIND_RULE_IDS = [f"{k}-{r}" for k, r in KIND_RULES]


def gpu_cpu_inputs(m, n, dtype, wdtype, seed):
    x, r, w = make_norm_inputs(m, n, dtype, wdtype, seed)
    if n >= 256 and n % 32 == 0:
        xa, ra, w = adversarial_inputs(n, dtype, wdtype, 1.0)
        x, r = torch.cat([x, xa]), torch.cat([r, ra])
    return x, r, w


def assert_gpu_equals_cpu(kind, rule, x, r, w, eps=1e-6, wo=1.0):
    want = call_norm("op", kind, x, r, w, eps, wo, rule)
    got = call_norm("op", kind, x.cuda(), r.cuda(), w.cuda(), eps, wo, rule)
    assert got.keys() == want.keys()
    for key in want:
        assert got[key].is_cuda
        assert_bitwise_equal(got[key], want[key], f"{kind} GPU vs CPU: {key}")


@pytest.mark.parametrize("n", [32, 256, 2048, 3072, 6144, 8192, 12288, 16384 + 32])
@pytest.mark.parametrize("wdtype", ["same", torch.float32], ids=["w_same", "w_fp32"])
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("kind,rule", KIND_RULES, ids=KIND_RULE_IDS)
def test_gpu_equals_cpu(kind, rule, dtype, wdtype, n):
    wdt = dtype if wdtype == "same" else wdtype
    x, r, w = gpu_cpu_inputs(67, n, dtype, wdt, seed=n)
    assert_gpu_equals_cpu(kind, rule, x, r, w)
    assert_gpu_equals_cpu(kind, rule, x, r, w, eps=1e-5, wo=0.0)


@pytest.mark.parametrize("n", [1, 7, 8, 100, 1000, 4104])
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("kind", ["rmsnorm", "add_rmsnorm"])
def test_gpu_equals_cpu_odd_n(kind, dtype, n):
    x, r, w = gpu_cpu_inputs(33, n, dtype, dtype, seed=n)
    assert_gpu_equals_cpu(kind, "ceil", x, r, w)


@pytest.mark.parametrize("m", [0, 1, 2, 7, 129, 4096])
@pytest.mark.parametrize("kind", NORM_KINDS)
def test_gpu_equals_cpu_many_m(kind, m):
    """Launch shapes change with M; the canonical reduction must not."""
    x, r, w = make_norm_inputs(
        m, 8192 if m == 4096 else 3072, torch.bfloat16, torch.bfloat16, seed=m
    )
    assert_gpu_equals_cpu(kind, "ceil", x, r, w)


@pytest.mark.parametrize("rule", ["ceil", "floor"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=dtype_id)
def test_gpu_quantize_dequantize_equal_cpu(dtype, rule):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(257, 4096, generator=g) * torch.logspace(-30, 30, 257).unsqueeze(1)).to(dtype)
    x[3, 100] = float("nan")
    x[4, 7] = float("inf")
    x[5, :64] = 0.0
    x[6, :32] = -0.0
    c, s = OPS.mxfp8_quantize(x, rule)
    cg, sg = OPS.mxfp8_quantize(x.cuda(), rule)
    assert_bitwise_equal(cg, c, "codes")
    assert_bitwise_equal(sg, s, "scales")
    codes = torch.arange(256, dtype=torch.uint8).repeat(256, 1).view(torch.float8_e4m3fn)
    scales = torch.arange(256, dtype=torch.uint8).unsqueeze(1).repeat(1, 8)
    for out_dtype in (torch.bfloat16, torch.float16, torch.float32):
        assert_bitwise_equal(
            OPS.mxfp8_dequantize(codes.cuda(), scales.cuda(), out_dtype),
            OPS.mxfp8_dequantize(codes, scales, out_dtype),
            f"dequantize {out_dtype}",
        )
        assert_bitwise_equal(
            OPS.mxfp8_dequantize(cg, sg, out_dtype),
            OPS.mxfp8_dequantize(c, s, out_dtype),
            f"dequantize {out_dtype}",
        )


@pytest.mark.parametrize("kind", NORM_KINDS)
def test_gpu_deterministic(kind):
    """Explicit determinism check: the same call three times gives the same bits."""
    x, r, w = (
        t.cuda() for t in make_norm_inputs(4096, 8192, torch.bfloat16, torch.float32, seed=9)
    )
    first = call_norm("op", kind, x, r, w)
    for _ in range(2):
        again = call_norm("op", kind, x, r, w)
        for key in first:
            assert_bitwise_equal(again[key], first[key], f"{kind} repeated: {key}")


def _direct(kind, x, r, w, rule="ceil"):
    """The op with the residual written in place (no clone), outputs as a dict."""
    if kind == "rmsnorm":
        return {"y": OPS.gemma_rmsnorm(x, w, 1e-6, 1.0)}
    if kind == "add_rmsnorm":
        return {"y": OPS.gemma_fused_add_rmsnorm(x, r, w, 1e-6, 1.0)}
    if kind == "rmsnorm_mxfp8":
        c, s = OPS.gemma_rmsnorm_mxfp8(x, w, 1e-6, 1.0, rule)
    else:
        c, s = OPS.gemma_fused_add_rmsnorm_mxfp8(x, r, w, 1e-6, 1.0, rule)
    return {"codes": c, "scales": s}


@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("kind", NORM_KINDS)
def test_cuda_graph_capture_and_replay(kind, dtype):
    m, n = 64, 3072
    x0, r0, w0 = make_norm_inputs(m, n, dtype, dtype, seed=1)
    x_s, r_s, w_s = x0.cuda(), r0.cuda(), w0.cuda()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as the CUDA-graph docs advise
        for _ in range(2):
            _direct(kind, x_s, r_s.clone(), w_s)
            if kind_is_mx(kind):
                c, s = OPS.mxfp8_quantize(x_s, "ceil")
                OPS.mxfp8_dequantize(c, s, dtype)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _direct(kind, x_s, r_s, w_s)
        if kind_is_mx(kind):
            out["q_codes"], out["q_scales"] = OPS.mxfp8_quantize(x_s, "ceil")
            out["deq"] = OPS.mxfp8_dequantize(out["codes"], out["scales"], dtype)
    for seed in (2, 3, 4):
        x_new, r_new, _ = make_norm_inputs(m, n, dtype, dtype, seed=seed)
        x_s.copy_(x_new)
        r_s.copy_(r_new)
        graph.replay()
        torch.cuda.synchronize()
        want = call_norm("op", kind, x_new.cuda(), r_new.cuda(), w_s)
        for key in want:
            got = r_s if key == "residual" else out[key]
            assert_bitwise_equal(got, want[key], f"{kind} graph replay {seed}: {key}")
        if kind_is_mx(kind):
            qc, qs = OPS.mxfp8_quantize(x_new.cuda(), "ceil")
            assert_bitwise_equal(out["q_codes"], qc, "graph quantize codes")
            assert_bitwise_equal(out["q_scales"], qs, "graph quantize scales")
            assert_bitwise_equal(
                out["deq"],
                OPS.mxfp8_dequantize(want["codes"], want["scales"], dtype),
                "graph dequantize",
            )
        if not kind_has_residual(kind):
            assert_bitwise_equal(r_s, r_new, "residual untouched by a norm without residual")


@pytest.mark.parametrize("kind", NORM_KINDS)
def test_runs_on_the_current_stream(kind):
    """On a second stream the op gives the default stream's bits, and it is ordered after work
    queued on that stream: inputs written there behind a long sleep are the ones it reads (an op
    launched on the default stream would read the zeros that are there before)."""
    x, r, w = (
        t.cuda() for t in make_norm_inputs(256, 4096, torch.bfloat16, torch.bfloat16, seed=4)
    )
    want = call_norm("op", kind, x, r, w)
    x_buf, r_buf = torch.zeros_like(x), torch.zeros_like(r)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)
        x_buf.copy_(x)
        r_buf.copy_(r)
        got = _direct(kind, x_buf, r_buf, w)
    side.synchronize()
    for key in want:
        g = r_buf if key == "residual" else got[key]
        assert_bitwise_equal(g, want[key], f"{kind} on a second stream: {key}")
