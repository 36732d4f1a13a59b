"""Per-SM age view of a traced call, from the per-warp stamps that
`trace_mxfp6_linear.py --raw PREFIX` saves (runs anywhere: numpy only).

On each SM the CTAs of a call are ranked by their start (placement) time; for each rank and for SMs
with the same number of CTAs the script prints the mean start, wait release, landing of every
tile, the last decode's end and the end of the CTA, in us after the previous call's end:

    python benchmarks/trace/ranks_from_raw.py PREFIX_12288x6144_m1_on.npz [--calls 8 10]
"""

from __future__ import annotations

import argparse

import numpy as np

# Columns of the saved stamps (fields 2..22 of the trace record): start, wait, land0..7,
# done0..7, CTA reduction, cluster exchange, end; -1 where a field was not stamped.
START, WAIT, LAND0, DONE0, END = 0, 1, 2, 10, 20


def ranks(sm: np.ndarray, cta: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rank of each warp's CTA on its SM by start time, and the number of CTAs on that SM."""
    rank, count = np.zeros(len(t), int), np.zeros(len(t), int)
    for s in np.unique(sm):
        ids = np.unique(cta[sm == s])
        order = ids[np.argsort([t[cta == i, START].min() for i in ids])]
        for r, i in enumerate(order):
            rank[cta == i], count[cta == i] = r, len(ids)
    return rank, count


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("npz")
    ap.add_argument("--calls", type=int, nargs="*", default=[8, 10])
    args = ap.parse_args()
    d = np.load(args.npz)
    for c in args.calls:
        sm, cta, t = d[f"call{c}_sm"], d[f"call{c}_cta"], d[f"call{c}_t"]
        tiles = int((t[:, LAND0:LAND0 + 8] >= 0).sum(1).max())
        rank, count = ranks(sm, cta, t)
        print(f"call {c}: columns start wait " + " ".join(f"land{i}" for i in range(tiles))
              + " done_last end")
        for n in np.unique(count):
            for r in range(n):
                sel = (rank == r) & (count == n)
                row = t[sel]
                vals = [row[:, START].mean(), row[:, WAIT].mean()]
                vals += [row[:, LAND0 + i].mean() for i in range(tiles)]
                vals += [row[:, DONE0 + tiles - 1].mean(), row[:, END].mean()]
                print(f"  SM with {n} CTAs, rank {r} ({len(np.unique(cta[sel]))} CTAs): "
                      + " ".join(f"{v:6.2f}" for v in vals))


if __name__ == "__main__":
    main()
