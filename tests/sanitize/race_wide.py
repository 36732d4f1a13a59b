"""Short racecheck cases for the M <= 16 MXFP6 linear kernels, whose full fp6 case list
(tests/sanitize/cases.py) is too slow under racecheck:
- the register-wide twin of the bf16 M <= 16 kernels (twenty-fifth session) at two heuristic
  shapes where it is the default (2560 x 6144 at M = 16: clusters of 4; 4224 x 2048 at M = 12:
  clusters of 2), PDL off and on;
- the decode kernels of each heuristic launch shape the issue's weights take (2560 x 6144: two
  row tiles, clusters of 4; 9216 x 2048 and 12288 x 6144: two row tiles, 8 warps; 2048 x 4096: one
  row tile, K split over clusters) at M = 1, 3 and 8, every PDL mode, two calls back to back, with
  rows of large blocks so that both scale paths run (thirty-ninth session).
Each result within 1e-2 of the fp64 product of the unpacked weights; back-to-back calls equal.

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool racecheck python tests/sanitize/race_wide.py
"""
import torch

import mxfuse

torch.manual_seed(0)
checks = 0
CASES = [(2560, 6144, 16, ("off", "on")), (4224, 2048, 12, ("off", "on"))]
ALL_MODES = ("off", "on", "prefetch_weights")
CASES += [(2560, 6144, 1, ALL_MODES), (2560, 6144, 8, ALL_MODES), (9216, 2048, 1, ALL_MODES),
          (2048, 4096, 3, ALL_MODES), (12288, 6144, 1, ALL_MODES)]
for n, k, m, modes in CASES:
    w = (torch.randn(n, k) * 0.05).to(torch.bfloat16).cuda()
    w[n // 2:n // 2 + 16, : k // 2] *= 4096
    packed, scales = mxfuse.mxfp6_pack(w)
    x = torch.randn(m, k).to(torch.bfloat16).cuda()
    ref = x.double() @ mxfuse.mxfp6_unpack(packed, scales, torch.float32).double().T
    for mode in modes:
        mxfuse.set_pdl(mode)
        y = mxfuse.mxfp6_linear(x, packed, scales)
        y2 = mxfuse.mxfp6_linear(x, packed, scales)
        err = ((y.double() - ref).norm() / ref.norm()).item()
        assert err < 1e-2, f"{n} x {k} M={m} {mode}: rel err {err}"
        assert torch.equal(y, y2), f"{n} x {k} M={m} {mode}: back-to-back calls differ"
        checks += 1
torch.cuda.synchronize()
print("race_wide checks", checks)
