"""Does a kernel's dynamic shared-memory cap (cudaFuncAttributeMaxDynamicSharedMemorySize) change
its speed when launches use less? Measured for a variant in which the MXFP6 linear's cap only
went up (twenty-fourth session, not kept: docs/DECISIONS.md), where an unpadded weight (three CTAs
per SM) would run under the cap a padded one (two per SM, PDL padding) raised. This times the
unpadded weight before and after a padded call, in the same process, `on` mode, the benchmark's
method (graph of 128 calls over 16 weight sets). Add --m 16 for the kernel that reads x through
L1 the most.

    python benchmarks/probe_smem_cap.py [--out PATH_BASE] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import mxfuse  # noqa: E402


def sets(n: int, k: int, m: int):
    out = []
    for i in range(harness.INPUT_SETS):
        w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda") * k ** -0.5
        out.append((torch.randn(m, k, dtype=torch.bfloat16, device="cuda"), *mxfuse.mxfp6_pack(w)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--m", type=int, default=1)
    args = ap.parse_args()
    mxfuse.set_pdl("on")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    k, m = 6144, args.m
    # Two row tiles per warp, 8 warps, unsplit: 3 CTAs per SM (12288 rows on 132 SMs, unpadded)
    # and 2 CTAs per SM (64 x SMs rows: padded so that an SM holds no more than two).
    big, padded = sets(12288, k, m), sets(64 * sms, k, m)

    def run(s):
        return lambda i: mxfuse.mxfp6_linear(*s[i])

    res = {"before": [], "padded": [], "after": []}
    res["before"] = [harness.graph_time_us(run(big)) for _ in range(args.rounds)]
    res["padded"] = [harness.graph_time_us(run(padded)) for _ in range(args.rounds)]
    res["after"] = [harness.graph_time_us(run(big)) for _ in range(args.rounds)]
    line = {key: round(min(v), 3) for key, v in res.items()}
    print(json.dumps({"rows_unpadded": 12288, "rows_padded": 64 * sms, "k": k, "m": m, "best_us": line,
                      "all_us": res}))
    if args.out:
        harness.write_json(args.out + ".json", {"best_us": line, "all_us": res, "env": harness.environment()})


if __name__ == "__main__":
    main()
