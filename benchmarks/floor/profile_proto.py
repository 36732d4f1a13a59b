"""A few eager launches of the stream_floor prototype and of mxfp6_linear, for ncu.

    ncu -k regex:"proto_kernel|fp6_linear" --launch-skip 6 --launch-count 2 \
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
        --section Occupancy --section InstructionStats python benchmarks/floor/profile_proto.py

2560 x 6144, M = 1, bf16; the prototype in its variant 3 (8 loader warps, 2 items in flight each,
24 consumer warps), in order. A measurement tool (NVIDIA sm_90 only).
"""

import os

import torch
from torch.utils.cpp_extension import load

import mxfuse

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    ext = load(name="mxf_stream_floor", sources=[os.path.join(HERE, "stream_floor.cu")],
               extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a"])
    n, k = 2560, 6144
    w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda") * 0.02
    mxfuse.mxfp6_round_(w)
    packed, scales = mxfuse.mxfp6_pack(w)
    x = torch.randn(1, k, dtype=torch.bfloat16, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ws = torch.zeros(sms * 4 * 16, dtype=torch.float32, device="cuda")
    for _ in range(4):
        ext.proto(packed, scales, x, ws, n, k, False, 3)
        mxfuse.mxfp6_linear(x, packed, scales)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
