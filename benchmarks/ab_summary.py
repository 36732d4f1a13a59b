"""Summarises benchmarks/ab_patches.sh output: per shape and M, each variant's best time over the
rounds for one row name and PDL mode, and its ratio to base.

    python benchmarks/ab_summary.py OUT_DIR [--name attention_front] [--pdl on] [--keys hidden m]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--name", default="attention_front")
    ap.add_argument("--pdl", default="on")
    ap.add_argument("--keys", nargs="*", default=["hidden", "m"])
    args = ap.parse_args()
    packed = os.path.join(args.out, "ab.tar.gz")
    if os.path.exists(packed):
        # Read the packed results from a scratch folder: nothing is added to OUT (the device call
        # returns at most 8 files).
        import tarfile
        import tempfile
        args.out = tempfile.mkdtemp(prefix="ab_summary_")
        with tarfile.open(packed) as t:
            t.extractall(args.out, filter="data")
    with open(os.path.join(args.out, "ab_variants.txt")) as f:
        variants = [v.strip() for v in f if v.strip()]
    best: dict[tuple, dict[int, float]] = {}
    for path in sorted(glob.glob(os.path.join(args.out, "ab_v*_r*.json"))):
        v = int(re.search(r"ab_v(\d+)_r", path).group(1))
        with open(path) as f:
            rows = json.load(f)["rows"]
        for r in rows:
            p = r["params"]
            if r["name"] != args.name or p.get("pdl", args.pdl) != args.pdl:
                continue
            key = tuple(p[k] for k in args.keys)
            cur = best.setdefault(key, {})
            cur[v] = min(cur.get(v, float("inf")), r["us"])
    print(f"{args.name} ({args.pdl}), best us over rounds; ratio = base / variant")
    for i, name in enumerate(variants):
        print(f"  v{i}: {name}")
    heads = "".join(f" {'v' + str(i):>14}" for i in range(len(variants)))
    print(" ".join(f"{k:>6}" for k in args.keys) + heads)
    for key in sorted(best):
        cur = best[key]
        base = cur.get(0)
        cells = []
        for i in range(len(variants)):
            t = cur.get(i)
            ratio = base / t if base and t else 0.0
            cells.append(f" {'-':>14}" if t is None else f" {t:8.2f} {ratio:5.3f}")
        print(" ".join(f"{k:>6}" for k in key) + "".join(cells))


if __name__ == "__main__":
    main()
