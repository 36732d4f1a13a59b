"""Per-call floor of a graph of back-to-back calls: what a call costs when it moves almost no bytes.

    python benchmarks/floor_mxfp6_linear.py [--out floor.json]

Times, with the benchmark's method (harness.graph_time_us): mxfp6_linear on tiny weights (one CTA
and a few CTAs) in each `mxfuse.set_pdl` mode, bf16 F.linear on the same weights, and a
one-element in-place add (the cost of a graph node that does nothing). The difference between a
real shape's time and this floor is what its bytes and its decode cost.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import mxfuse  # noqa: E402
from mxfuse.ops import PDL_MODES as MODES  # noqa: E402

SHAPES = [(16, 128), (256, 1024)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="floor_mxfp6_linear.json")
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    one = [torch.zeros(1, device="cuda") for _ in range(harness.INPUT_SETS)]
    us = harness.graph_time_us(lambda i: one[i].add_(1.0))
    rows.append({"op": "add_ one element", "us": us})
    print(f"add_ one element: {us:.2f} us", flush=True)
    for n, k in SHAPES:
        ws = [torch.randn(n, k, dtype=torch.bfloat16, device="cuda") * 0.02 for _ in range(harness.INPUT_SETS)]
        packs = [mxfuse.mxfp6_pack(w) for w in ws]
        xs = [torch.randn(1, k, dtype=torch.bfloat16, device="cuda") for _ in range(harness.INPUT_SETS)]
        us = harness.graph_time_us(lambda i: F.linear(xs[i], ws[i]))
        rows.append({"op": "bf16 F.linear", "n": n, "k": k, "m": 1, "us": us})
        line = [f"bf16={us:.2f}"]
        times = harness.graph_time_us_per_pdl_mode(lambda i: mxfuse.mxfp6_linear(xs[i], *packs[i]), MODES)
        for mode, t in times.items():
            rows.append({"op": "mxfp6_linear", "pdl": mode, "n": n, "k": k, "m": 1, "us": t})
            line.append(f"{mode}={t:.2f}")
        print(f"{n}x{k} m=1: " + " ".join(line), flush=True)
    with open(args.out, "w") as f:
        json.dump({"env": harness.environment(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
