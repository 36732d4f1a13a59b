"""Launch-shape sweep of mxfp6_linear (row tiles per warp x warps per CTA x K split across a cluster), to set the
heuristic in csrc/kernels/mxfp6.cu from measurements. Same timing as bench_mxfp6_linear.py.

    python benchmarks/sweep_mxfp6_linear.py [--out sweep.json]
    python benchmarks/sweep_mxfp6_linear.py --render sweep.json   # the markdown table (no GPU)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import mxfuse  # noqa: E402

SHAPES = [(9216, 2048), (2048, 4096), (2560, 6144), (12288, 6144)]
# (row tiles per warp, warps per CTA, K split); "0" = the heuristic's choice.
CONFIGS = [("0", "0", "0")] + [("1", w, s) for w in ("4", "8") for s in ("1", "2", "4")] + [
    ("2", w, s) for w in ("4", "8") for s in ("1", "2", "4")]


def render(path: str) -> str:
    """Markdown table of a sweep JSON: one row per (shape, M), best per row in bold."""
    rows = json.load(open(path))

    def key(r):
        return r["rt"], r["warps"], r["split"], r.get("item", "0")

    def label(c):
        rt, w, s, item = c
        return ("heuristic" if rt == "0" else f"rt{rt} w{w} s{s}") + ("" if item == "0" else f" item{item}")

    cfgs = sorted({key(r) for r in rows}, key=lambda c: (c[0] != "0", c))
    head = ["N x K", "M"] + [label(c) for c in cfgs]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    keys = sorted({(r["n"], r["k"], r["m"]) for r in rows}, key=lambda t: (SHAPES.index(t[:2]), t[2]))
    for n, k, m in keys:
        t = {key(r): r["us"] for r in rows if (r["n"], r["k"], r["m"]) == (n, k, m)}
        best = min(t.values())
        cells = [f"**{t[c]:.2f}**" if t[c] == best else f"{t[c]:.2f}" if c in t else "" for c in cfgs]
        out.append(f"| {n}x{k} | {m} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="sweep_mxfp6_linear.json")
    ap.add_argument("--ms", type=int, nargs="*", default=[1, 16])
    ap.add_argument("--shapes", nargs="*", help="N x K shapes to run, e.g. 2560x6144 (default: all four)")
    ap.add_argument("--configs", nargs="*", help="only these, e.g. r2w8s4 r1w8s2, or auto (the heuristic always runs)")
    ap.add_argument("--item-rt", nargs="*", default=["0"], choices=["0", "1", "2"],
                    help="MXFUSE_FP6_ITEM_RT values to run each config with (row tiles per ring item of "
                         "the two-row-tile kernels; 0 = the default)")
    ap.add_argument("--render", metavar="JSON", help="print the markdown table of a sweep and exit")
    args = ap.parse_args()
    if args.render:
        print(render(args.render))
        return
    torch.manual_seed(0)
    rows = []
    shapes = harness.parse_shapes(args.shapes) if args.shapes else SHAPES
    configs = CONFIGS
    if args.configs:
        configs = [("0", "0", "0")]
        for c in args.configs:
            match = re.fullmatch(r"r([12])w([48])s([1248])", c)
            if c != "auto" and match is None:
                ap.error(f"--configs: expected auto or rRwWsS with R in 1,2, W in 4,8, S in 1,2,4,8; got {c!r}")
            configs += [match.groups()] if match else []
    for n, k in shapes:
        packs = []
        for _ in range(harness.INPUT_SETS):
            w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda") * 0.02
            packs.append(mxfuse.mxfp6_pack(w))
        for m in args.ms:
            xs = [torch.randn(m, k, dtype=torch.bfloat16, device="cuda") for _ in range(harness.INPUT_SETS)]
            line = []
            for rt, warps, split in configs:
                for item in args.item_rt:
                    os.environ["MXFUSE_FP6_RT"], os.environ["MXFUSE_FP6_ITEM_RT"] = rt, item
                    os.environ["MXFUSE_FP6_WARPS"], os.environ["MXFUSE_FP6_SPLIT"] = warps, split
                    us = harness.graph_time_us(lambda i: mxfuse.mxfp6_linear(xs[i], *packs[i]))
                    rows.append({"n": n, "k": k, "m": m, "rt": rt, "warps": warps, "split": split, "item": item,
                                 "us": us})
                    label = "auto" if rt == "0" else f"r{rt}w{warps}s{split}"
                    line.append(label + (f"/item{item}" if len(args.item_rt) > 1 else "") + f"={us:.2f}")
            print(f"{n}x{k} m={m}: " + " ".join(line), flush=True)
        del packs
        torch.cuda.empty_cache()
    for v in ("MXFUSE_FP6_RT", "MXFUSE_FP6_WARPS", "MXFUSE_FP6_SPLIT", "MXFUSE_FP6_ITEM_RT"):
        os.environ.pop(v)
    with open(args.out, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
