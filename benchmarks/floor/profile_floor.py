"""Runs one read kernel of stream_floor.cu a few times for a profiler (ncu -k regex:read_stream).

    python benchmarks/floor/profile_floor.py N K GRID UNROLL [cp]

Reads a buffer of the N x K MXFP6 weight's bytes (packed + scales) as `ld gGRID uUNROLL` (or
`cp.async ...` with `cp`) of stream_floor.py does, without programmatic launch.
"""

import sys

import torch
from stream_floor import load_ext, weight_bytes

n, k, grid, unroll = (int(a) for a in sys.argv[1:5])
via_smem = len(sys.argv) > 5 and sys.argv[5] == "cp"
ext = load_ext()
buf = torch.randint(0, 256, (weight_bytes(n, k),), dtype=torch.uint8, device="cuda")
out = torch.zeros(1 << 20, dtype=torch.int32, device="cuda")
for _ in range(4):
    ext.ld(buf, out, grid, unroll, False, via_smem)
torch.cuda.synchronize()
