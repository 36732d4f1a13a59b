"""Runs one read kernel of stream_floor.cu a few times for a profiler (ncu -k regex:read_stream).

    python benchmarks/floor/profile_floor.py N K GRID UNROLL [cp]

Reads a buffer of the N x K MXFP6 weight's bytes (packed + scales) as `ld gGRID uUNROLL` (or
`cp.async ...` with `cp`) of stream_floor.py does, without programmatic launch.
"""

import os
import sys

import torch
from torch.utils.cpp_extension import load

HERE = os.path.dirname(os.path.abspath(__file__))
n, k, grid, unroll = (int(a) for a in sys.argv[1:5])
via_smem = len(sys.argv) > 5 and sys.argv[5] == "cp"
ext = load(name="mxf_stream_floor", sources=[os.path.join(HERE, "stream_floor.cu")],
           extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a"], verbose=False)
buf = torch.randint(0, 256, (n * k * 3 // 4 + n * k // 32,), dtype=torch.uint8, device="cuda")
out = torch.zeros(1 << 20, dtype=torch.int32, device="cuda")
for _ in range(4):
    ext.ld(buf, out, grid, unroll, False, via_smem)
torch.cuda.synchronize()
