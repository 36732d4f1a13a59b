"""Timeline of mxfp6_linear calls in a CUDA graph chain, from a trace build
(make_trace_build.py; this script fails on a normal build, which lacks the hooks).

One graph of 64 calls (16 weight and input sets, 4 times) is replayed; the last replay is traced
and calls 5..14 of it (steady state) are summarised. Times are microseconds after the end of the
previous call (the last warp's end), averaged over those calls:

  start_min / start_med   when the call's CTAs start (negative: while the previous call runs)
  wait_min / _med / _max  release of the dependency wait (PDL modes)
  land0_med               the first tile of a warp has landed (median over warps)
  landL_p10 / _med / _max the last tile of a warp has landed
  doneL_med / _max        the last tile of a warp is decoded and multiplied
  red_max, clus_max, end  CTA reduction, cluster exchange (split > 1), end of the call
  decode_med              one tile's landing to the end of its decode (median)
  landL_sm1st/2nd/3rd     mean last landing of the oldest, second and third CTA of an SM
  turnover_med            median gap from the end of a CTA of the previous call to the start of
                          the CTA that took its place on the SM

"arrivals" is a histogram of every tile landing of one call, from the median wait release.

    python benchmarks/trace/trace_mxfp6_linear.py [--shapes 2560x6144] [--ms 1 16] [--out t.json]
        [--raw PREFIX]  # also PREFIX_<N>x<K>_m<M>_<mode>.npz: per-warp stamps of calls 5..14
                        # (ranks_from_raw.py prints them per SM and CTA age)
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from make_trace_build import CALLS, FIELDS, MAX_CTAS, MAX_WARPS  # noqa: E402
from ranks_from_raw import ranks  # noqa: E402

import mxfuse  # noqa: E402
import mxfuse._C as _C  # noqa: E402


def cta_structure(r, prev, prev_end) -> list[float]:
    """Per-CTA view of one call (records r) after the previous one (records prev): the mean last
    landing of the oldest, second and third CTA of an SM (by start time, i.e. by placement), and
    the median gap from the end of a CTA of the previous call to the start of the CTA that took
    its place (on each SM, the k-th start matched with the k-th end)."""
    sm, cta = r[:, 1] >> 32, r[:, 1] & 0xFFFFFFFF
    rank, _ = ranks(sm, cta, r[:, 2:])  # column 0 of r[:, 2:] is the start
    last = r[:, 4:12].max(1)  # unstamped tiles are 0; every CTA records the same number of warps
    by_rank = [(last[rank == k].mean() - prev_end) / 1e3 if (rank == k).any() else float("nan")
               for k in range(3)]

    def per_cta(a, s, col, fn):  # one value per CTA of records a on SM s, sorted
        keys = a[:, 1]
        return np.sort([fn(a[keys == k_, col]) for k_ in np.unique(keys[keys >> 32 == s])])
    gaps = []
    for s in np.unique(sm):
        starts, ends = per_cta(r, s, 2, np.min), per_cta(prev, s, 22, np.max)
        n = min(len(starts), len(ends))
        gaps += list(starts[:n] - ends[:n])
    return by_rank + [float(np.median(gaps)) / 1e3 if gaps else float("nan")]


NAMES = ["start_min", "start_med", "wait_min", "wait_med", "wait_max", "land0_med", "landL_p10",
         "landL_med", "landL_max", "doneL_med", "doneL_max", "red_max", "clus_max", "end",
         "decode_med", "tiles_max", "landL_sm1st", "landL_sm2nd", "landL_sm3rd", "turnover_med"]


def trace(lib, n: int, k: int, m: int, mode: str, raw: str | None = None) -> dict:
    torch.manual_seed(0)
    packs = [mxfuse.mxfp6_pack(torch.randn(n, k, dtype=torch.bfloat16, device="cuda") * 0.02)
             for _ in range(CALLS)]
    xs = [torch.randn(m, k, dtype=torch.bfloat16, device="cuda") for _ in range(CALLS)]
    keys = (ctypes.c_ulonglong * CALLS)(*[x.data_ptr() for x in xs])
    mxfuse.set_pdl(mode)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(CALLS):
            mxfuse.mxfp6_linear(xs[i], *packs[i])
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(4):
            for i in range(CALLS):
                mxfuse.mxfp6_linear(xs[i], *packs[i])
    assert lib.mxf_trace_setup(keys, 0) == 0
    for _ in range(3):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    per_call = start.elapsed_time(end) * 1e3 / (4 * CALLS)
    assert lib.mxf_trace_setup(keys, 1) == 0
    graph.replay()  # the last 16 calls overwrite the first 48 calls' records
    torch.cuda.synchronize()
    host = np.zeros(CALLS * MAX_CTAS * MAX_WARPS * FIELDS, dtype=np.uint64)
    assert lib.mxf_trace_dump(host.ctypes.data_as(ctypes.c_void_p)) == 0
    assert lib.mxf_trace_setup(keys, 0) == 0
    rec = host.reshape(CALLS, MAX_CTAS, MAX_WARPS, FIELDS).astype(np.int64)
    mine = [rec[c][:, :, 0] == xs[c].data_ptr() for c in range(CALLS)]  # (CTA, warp) records of call c
    calls = [rec[c][mine[c]] for c in range(CALLS)]
    ends = [c[:, 22].max() for c in calls]
    if raw:  # per-warp records of calls 5..14, us after the previous call's end (-1: not stamped)
        keep = {}
        for c in range(5, 15):
            r = calls[c]
            t = np.where(r[:, 2:23] > 0, (r[:, 2:23] - ends[c - 1]) / 1e3, -1.0).astype(np.float32)
            keep[f"call{c}_sm"] = (r[:, 1] >> 32).astype(np.int32)
            keep[f"call{c}_cta"] = (r[:, 1] & 0xFFFFFFFF).astype(np.int32)
            keep[f"call{c}_warp"] = np.nonzero(mine[c])[1].astype(np.int32)
            keep[f"call{c}_t"] = t  # columns: fields 2..22 (start, wait, land0..7, done0..7, red, clus, end)
        np.savez_compressed(f"{raw}_{n}x{k}_m{m}_{mode}.npz", **keep)
    rows, hist = [], ""
    for c in range(5, 15):
        r, prev_end = calls[c], ends[c - 1]

        def us(a, prev_end=prev_end):
            return (a - prev_end) / 1e3

        landed, done = r[:, 4:12], r[:, 12:20]
        has = landed > 0
        last = has.sum(1) - 1
        idx = np.arange(len(r))
        wait = us(r[:, 3])
        rows.append([us(r[:, 2]).min(), np.median(us(r[:, 2])), wait.min(), np.median(wait),
                     wait.max(), np.median(us(landed[:, 0])),
                     np.percentile(us(landed[idx, last]), 10), np.median(us(landed[idx, last])),
                     us(landed[idx, last]).max(), np.median(us(done[idx, last])),
                     us(done[idx, last]).max(), us(r[:, 20]).max(), us(r[:, 21]).max(),
                     us(ends[c]), np.median((done - landed)[has] / 1e3), last.max() + 1,
                     *cta_structure(r, calls[c - 1], prev_end)])
        if c == 10:
            counts, edges = np.histogram(us(landed[has]) - np.median(wait), bins=12)
            hist = (" ".join(str(v) for v in counts)
                    + f"  (bins {edges[0]:.2f}..{edges[-1]:.2f} us after the median wait)")
    summary = {name: round(float(v), 3) for name, v in zip(NAMES, np.nanmean(rows, axis=0))}
    if summary["clus_max"] < 0:  # no cluster exchange (split 1)
        summary["clus_max"] = None
    summary["per_call_us"] = round(per_call, 3)
    summary["arrivals"] = hist
    print(f"{n}x{k} M={m} {mode}: per call {per_call:.2f} us")
    print("  " + " ".join(f"{k_}={v}" for k_, v in summary.items() if k_ != "arrivals"))
    print("  arrivals:", hist, flush=True)
    return summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="*", default=["2560x6144", "12288x6144"])
    ap.add_argument("--ms", type=int, nargs="*", default=[1, 16])
    ap.add_argument("--modes", nargs="*", default=["on", "prefetch_weights"])
    ap.add_argument("--out", default="trace_mxfp6_linear.json")
    ap.add_argument("--raw", default=None,
                    help="path prefix: also save each call's per-warp stamps (npz) for analysis")
    args = ap.parse_args()
    lib = ctypes.CDLL(_C.__file__)
    if not hasattr(lib, "mxf_trace_dump"):
        sys.exit("trace_mxfp6_linear: the extension is not a trace build (make_trace_build.py)")
    out = {}
    for n, k in harness.parse_shapes(args.shapes):
        for m in args.ms:
            for mode in args.modes:
                out[f"{n}x{k}_m{m}_{mode}"] = trace(lib, n, k, m, mode, args.raw)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
