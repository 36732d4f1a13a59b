"""torch.compile(mode="reduce-overhead") on the GPU: the ops inside Inductor's CUDA graphs (graph
trees), as an engine's compiled decoder layer runs them.

A decode-layer front built from mxfuse ops (norm, three MXFP6 linears, norm + MXFP8 quantize into
a QuantizedActivation, the MXFP8 GEMM) is compiled with fullgraph=True and mode="reduce-overhead",
then called with new inputs several times. Every output must have the bits of the same module run
eagerly with programmatic dependent launch off, and the graph must really be a CUDA graph (no
cudagraph skip). Under capture the MXFP6 linear's capture check (launch_mxfp6_linear) sees the
nodes Inductor recorded: the second projection of the normed x runs whole before its dependency
wait (mode 3), and the linear that reads the first projection's output gets its weights early
only (mode 2). The counters check that this happened inside Inductor's graph, and the bits that it
was safe. The in-place fused add + norm must give eager's bits and residual at every call too;
Inductor runs it outside a CUDA graph, since it updates an input.
"""

from __future__ import annotations

import mxfuse
import pytest
import torch
from conftest import OPS, assert_bitwise_equal, randn, requires_mxfp6
from mxfuse import MXFP8_KEY, QuantizedActivation
from test_mxfp6_gpu import captured_modes, pdl_code_available

pytestmark = [
    requires_mxfp6,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="no CUDA device here (these cases run on the GPU machine)"),
]

HIDDEN, Q_ROWS, K_ROWS, Z_ROWS, O_ROWS = 2048, 2048, 1024, 1024, 512
EPS = 1e-6


def cudagraph_skips() -> int:
    """Functions Inductor has run outside CUDA graphs in mode="reduce-overhead" so far."""
    from torch._dynamo.utils import counters

    return counters["inductor"]["cudagraph_skips"]


class Front(torch.nn.Module):
    """Norm, q and k projections of the normed x, a projection of q, then norm + MXFP8 quantize
    of that and an MXFP8 GEMM."""

    def __init__(self, seed: int):
        super().__init__()
        g = torch.Generator().manual_seed(seed)

        def w(n, k):
            return (torch.randn(n, k, generator=g) * k ** -0.5).to(torch.bfloat16).cuda()

        def norm_weight(n):
            return (torch.randn(n, generator=g) * 0.1).to(torch.bfloat16).cuda()

        self.register_buffer("norm_w", norm_weight(HIDDEN))
        self.register_buffer("norm2_w", norm_weight(Z_ROWS))
        for name, n, k in (("q", Q_ROWS, HIDDEN), ("k", K_ROWS, HIDDEN), ("z", Z_ROWS, Q_ROWS)):
            packed, scales = OPS.mxfp6_pack(w(n, k), "floor")
            self.register_buffer(f"{name}_packed", packed)
            self.register_buffer(f"{name}_scales", scales)
        codes, scales = OPS.mxfp8_quantize(w(O_ROWS, Z_ROWS), "ceil")
        self.register_buffer("o_codes", codes)
        self.register_buffer("o_scales", scales)

    def forward(self, x):
        y = mxfuse.gemma_rmsnorm(x, self.norm_w, EPS)
        q = mxfuse.mxfp6_linear(y, self.q_packed, self.q_scales)
        k = mxfuse.mxfp6_linear(y, self.k_packed, self.k_scales)  # same x: mode 3 under capture
        z = mxfuse.mxfp6_linear(q, self.z_packed, self.z_scales)  # reads q's output: mode 2
        codes, scales = mxfuse.gemma_rmsnorm_mxfp8(z, self.norm2_w, EPS)
        qa = QuantizedActivation(codes, scales, MXFP8_KEY, z.dtype, tuple(z.shape))
        o = mxfuse.mxfp8_linear(qa, self.o_codes, self.o_scales, b_scale_layout="1x32")
        return q, k, z, codes, scales, o


@pytest.mark.parametrize("m", [1, 8])
def test_reduce_overhead_front_has_eager_bits(m, restore_pdl):
    torch._dynamo.reset()
    front = Front(seed=m)
    xs = [randn((m, HIDDEN), torch.bfloat16, 100 + i, 1.0).cuda() for i in range(5)]
    mxfuse.set_pdl("off")
    want = [[t.clone() for t in front(x)] for x in xs]
    mxfuse.set_pdl("on")
    compiled = torch.compile(front, fullgraph=True, mode="reduce-overhead")
    skips0, (p0, i0) = cudagraph_skips(), captured_modes()
    for rnd in range(2):
        for i, x in enumerate(xs):
            got = compiled(x)
            torch.cuda.synchronize()
            for j, (a, b) in enumerate(zip(got, want[i])):
                assert_bitwise_equal(a, b, f"round {rnd}, input {i}, output {j}")
    p1, i1 = captured_modes()
    assert cudagraph_skips() == skips0, "Inductor did not run the front as a CUDA graph"
    if pdl_code_available():
        # Per recording: k's linear in mode 3 and z's in mode 2 (in either order, since Inductor
        # may schedule them either way); q's follows the norm, so it keeps mode 1.
        assert i1 - i0 >= 1 and p1 - p0 == 2 * (i1 - i0), (
            f"capture check: {i1 - i0} launches in mode 3, {p1 - p0} in mode 2 or 3")


def fused_add_front(x, residual, weight):
    codes, scales = mxfuse.gemma_fused_add_rmsnorm_mxfp8(x, residual, weight, EPS)
    return codes, scales, mxfuse.mxfp8_dequantize(codes, scales, torch.bfloat16)


def test_reduce_overhead_fused_add_updates_the_residual_as_eager(restore_pdl):
    # The residual is an input updated in place: the graph trees may run such a function outside
    # a CUDA graph; either way the codes, scales and the new residual are eager's, every call.
    torch._dynamo.reset()
    weight = randn((HIDDEN,), torch.bfloat16, 7, 0.1).cuda()
    compiled = torch.compile(fused_add_front, fullgraph=True, mode="reduce-overhead")
    for i in range(4):
        x = randn((8, HIDDEN), torch.bfloat16, 200 + i, 1.0).cuda()
        r0 = randn((8, HIDDEN), torch.bfloat16, 300 + i, 1.0).cuda()
        r_eager, r_comp = r0.clone(), r0.clone()
        mxfuse.set_pdl("off")
        want = fused_add_front(x, r_eager, weight)
        mxfuse.set_pdl("on")
        got = compiled(x, r_comp, weight)
        torch.cuda.synchronize()
        for j, (a, b) in enumerate(zip(got, want)):
            assert_bitwise_equal(a, b, f"call {i}, output {j}")
        assert_bitwise_equal(r_comp, r_eager, f"call {i}, residual")
