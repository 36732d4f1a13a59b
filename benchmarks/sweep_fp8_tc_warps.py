"""Warps per CTA of mxfp8_scaled_mm's tensor-core kernel (its K split) against the heuristic's
choice: graph-timed like bench_mxfp8_mm.py, one process, MXFUSE_FP8_TC_WARPS per value ("0" = the
heuristic).

    python benchmarks/sweep_fp8_tc_warps.py [--out FILE.json]
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import mxfuse  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="*", default=["2560x6144", "12288x6144"])
    ap.add_argument("--ms", type=int, nargs="*", default=[1, 16])
    ap.add_argument("--warps", nargs="*", default=["0", "1", "2", "4", "8", "16"])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    mxfuse.set_fp8_mm_kernel("tensor_cores")
    rows = []
    for n, k in harness.parse_shapes(args.shapes):
        bs = [mxfuse.mxfp8_quantize(torch.randn(n, k, device="cuda") * 0.02) for _ in range(harness.INPUT_SETS)]
        for m in args.ms:
            qs = [mxfuse.mxfp8_quantize(torch.randn(m, k, device="cuda")) for _ in range(harness.INPUT_SETS)]
            t = {}
            for w in args.warps:
                os.environ["MXFUSE_FP8_TC_WARPS"] = w
                t[w] = harness.graph_time_us(
                    lambda i: mxfuse.mxfp8_scaled_mm(*qs[i], *bs[i], torch.bfloat16, b_scale_layout="1x32"))
            os.environ.pop("MXFUSE_FP8_TC_WARPS")
            rows.append({"n": n, "k": k, "m": m, "us": t})
            print(f"{n}x{k} m={m:3d}: " + "  ".join(f"w{w}: {v:7.2f}" for w, v in t.items()), flush=True)
    mxfuse.set_fp8_mm_kernel("exact")
    if args.out:
        harness.write_record(args.out, rows=rows)


if __name__ == "__main__":
    main()
