"""Runs mxfp6_linear a few times on one shape for a profiler (ncu -k regex:fp6_linear ...).

    python benchmarks/profile_mxfp6_linear.py N K M
"""

import sys

import torch

import mxfuse

n, k, m = (int(a) for a in sys.argv[1:4])
w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda") * 0.02
packed, scales = mxfuse.mxfp6_pack(w)
x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
for _ in range(3):
    mxfuse.mxfp6_linear(x, packed, scales)
torch.cuda.synchronize()

if len(sys.argv) > 4 and sys.argv[4] == "floor":
    # Launch floor of this timing method: a graph of 128 tiny kernels.
    import os

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness

    tiny = torch.zeros(16, device="cuda")
    print(f"graph launch floor: {harness.graph_time_us(lambda i: tiny.add_(1.0)):.2f} us per tiny kernel")
    os_env = os.environ
    for w, s in (("4", "1"), ("4", "2"), ("4", "4")):
        os_env["MXFUSE_FP6_WARPS"], os_env["MXFUSE_FP6_SPLIT"] = w, s
        us = harness.graph_time_us(lambda i: mxfuse.mxfp6_linear(x, packed, scales))
        print(f"{n}x{k} m={m} warps={w} split={s}: {us:.2f} us (same weights every call: L2-resident)")
