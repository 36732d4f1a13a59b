"""A short racecheck case for the register-wide twin of the bf16 M <= 16 MXFP6 kernels (twenty-fifth
session), whose full fp6 case list is too slow under racecheck: mxfp6_linear at two heuristic
shapes where the twin is the default (2560 x 6144 at M = 16: clusters of 4; 4224 x 2048 at M = 12:
clusters of 2), PDL off and on, each within 1e-2 of the fp64 product of the unpacked weights.

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool racecheck python tests/sanitize/race_wide.py
"""
import torch

import mxfuse

torch.manual_seed(0)
checks = 0
for n, k, m in ((2560, 6144, 16), (4224, 2048, 12)):
    w = (torch.randn(n, k) * 0.05).to(torch.bfloat16).cuda()
    packed, scales = mxfuse.mxfp6_pack(w)
    x = torch.randn(m, k).to(torch.bfloat16).cuda()
    ref = x.double() @ mxfuse.mxfp6_unpack(packed, scales, torch.float32).double().T
    for mode in ("off", "on"):
        mxfuse.set_pdl(mode)
        y = mxfuse.mxfp6_linear(x, packed, scales)
        err = ((y.double() - ref).norm() / ref.norm()).item()
        assert err < 1e-2, f"{n} x {k} M={m} {mode}: rel err {err}"
        checks += 1
torch.cuda.synchronize()
print("race_wide checks", checks)
