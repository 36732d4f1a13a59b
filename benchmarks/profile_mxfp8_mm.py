"""Runs mxfp8_scaled_mm a few times on one shape for a profiler
(ncu -k regex:fp8_mm ...); the kernel is `exact` or `tensor_cores`.

    python benchmarks/profile_mxfp8_mm.py N K M [exact|tensor_cores]
"""

import sys

import torch

import mxfuse

n, k, m = (int(a) for a in sys.argv[1:4])
mxfuse.set_fp8_mm_kernel(sys.argv[4] if len(sys.argv) > 4 else "tensor_cores")
b, bsc = mxfuse.mxfp8_quantize(torch.randn(n, k, device="cuda") * 0.02)
a, asc = mxfuse.mxfp8_quantize(torch.randn(m, k, device="cuda"))
for _ in range(3):
    mxfuse.mxfp8_scaled_mm(a, asc, b, bsc, torch.bfloat16, b_scale_layout="1x32")
torch.cuda.synchronize()
