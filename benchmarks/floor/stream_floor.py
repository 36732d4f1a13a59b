"""How fast can any kernel read a linear's MXFP6 weight bytes in the benchmark's setting?

    python benchmarks/floor/stream_floor.py [--shapes 2560x6144 12288x6144] [--out PREFIX]
    python benchmarks/floor/stream_floor.py --inflight [--shapes ...] [--out PREFIX]

A measurement tool (NVIDIA sm_90 only; it builds `stream_floor.cu` with torch's extension loader).
Every time is harness.graph_time_us: one CUDA graph of 128 back-to-back calls cycling 16 buffers of
the weight's size (packed + scales bytes), best of 5. Each read kernel is launched with programmatic
dependent launch and reads nothing before `griddepcontrol.wait`, as the shipped `on` mode.

Rows, per shape:
- `bf16 F.linear` and `mxfp6_linear` (M = 1, in the `on` and `prefetch_weights` modes), the
  baselines of issue #4, timed in the same process;
- `ld gG uU`: a plain streaming read, G CTAs of 256 threads, U 16-byte loads in flight per thread;
- `cp.async gG uU`: the same, each thread's U pieces copied into shared memory with `cp.async.cg`
  (as the shipped kernel loads its codes), waited for, and read back;
- `tma sS xN`: one CTA per SM streaming its contiguous share through N shared-memory stages of S
  bytes with bulk copies, 8 consumer warps reading every stage; `pre`: the first N stages are
  requested before the dependency wait (as `prefetch_weights` does);
- `proto LxDyCz [roll] ooo|inorder` (shapes whose share is at most 64 tiles per SM; x loader warps
  with y items in flight each, z consumer warps; see PROTO): a prototype MXFP6 linear,
  M = 1, bf16, one CTA per SM, loader warps streaming plain loads into one shared-memory slot per
  tile, consumer warps decoding a tile as soon as it lands (`ooo`) or in order; it leaves the add
  of a row tile's partials across CTAs to this script (not timed). Checked against fp64 first.
`--inflight` times only `ld` and `cp.async` over a grid of 1, 2, 4 and 8 CTAs per SM and 1, 2, 4 and 8
loads per thread, and reports the bytes each SM has requested at once (CTAs per SM x 256 threads x
loads x 16 bytes; cp.async rows whose shared memory would not fit are skipped), next to
`mxfp6_linear` at M = 1 after a kernel (`on` with the capture check off) and in `on`: how fast a
stream with as few bytes in flight as the shipped kernel keeps (about 15 KB per SM) can be.
The "x bf16" column is the bf16 F.linear time over the row's: the speed-up a kernel that took as
long as that row would have (issue #4 asks for 2.2x at M <= 8).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.utils.cpp_extension import load

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import harness  # noqa: E402

import mxfuse  # noqa: E402

LD = [(264, 8), (528, 4), (528, 8), (1056, 4)]
TMA = [(32768, 6, False), (16384, 12, False), (32768, 6, True)]  # stage bytes, stages, before the wait
# loader warps, items in flight per loader, consumer warps; "roll": the loader's ring is refilled per item
PROTO = {0: "L8 D4 C8", 1: "L8 D4 C12", 2: "L8 D2 C16", 3: "L8 D2 C24", 4: "L8 D4 C16 roll", 5: "L16 D3 C16 roll"}


def proto_check(ext, pack, w, x, n: int, k: int, variant: int, ooo: bool) -> float:
    """Relative error of the prototype's y (its per-CTA row-tile partials added here) against fp64."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ws = torch.full((sms * 4 * 16,), float("nan"), dtype=torch.float32, device="cuda")
    ext.proto(pack[0], pack[1], x, ws, n, k, ooo, variant)
    torch.cuda.synchronize()
    kt, items = k // 128, n // 16 * (k // 128)
    y = torch.zeros(n, dtype=torch.float64)
    wsc = ws.view(sms, 4, 16).double().cpu()
    covered = torch.zeros(n // 16, kt, dtype=torch.int32)
    for b in range(sms):
        i0, i1 = items * b // sms, items * (b + 1) // sms
        if i1 <= i0:
            continue
        for sgi, r in enumerate(range(i0 // kt, (i1 - 1) // kt + 1)):
            y[16 * r:16 * r + 16] += wsc[b, sgi]
            lo, hi = max(r * kt, i0), min((r + 1) * kt, i1)
            covered[r, lo - r * kt:hi - r * kt] += 1
    assert bool((covered == 1).all()), "every item in exactly one CTA"
    ref = (x.double().cpu() @ w.double().cpu().T).view(-1)
    return ((y - ref).norm() / ref.norm()).item()


def load_ext():
    """stream_floor.cu built (once per machine) with torch's extension loader."""
    return load(name="mxf_stream_floor", sources=[os.path.join(HERE, "stream_floor.cu")],
                extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a"], verbose=False)


def weight_bytes(n: int, k: int) -> int:
    """Bytes of an N x K MXFP6 weight: packed codes + scales."""
    return n * k * 3 // 4 + n * k // 32


def inflight_sweep(ext, bufs, out, xs, packs) -> list[tuple[str, float]]:
    """mxfp6_linear after a kernel and in `on`, then `ld` / `cp.async` over CTAs per SM and copies
    per thread (the bytes each SM requests at once in the name)."""
    def linear(i):
        return mxfuse.mxfp6_linear(xs[i], *packs[i])

    with harness.env_set("MXFUSE_FP6_NO_CAPTURE_CHECK", "1"):
        measured = [("mxfp6_linear on_after_kernel", harness.graph_time_us_per_pdl_mode(linear, ["on"])["on"])]
    measured.append(("mxfp6_linear on", harness.graph_time_us_per_pdl_mode(linear, ["on"])["on"]))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for via in (False, True):
        for per_sm in (1, 2, 4, 8):
            for u in (1, 2, 4, 8):
                if via and per_sm * u * 4096 > 200 * 1024:  # its shared memory would not fit
                    continue
                g, kb = per_sm * sms, per_sm * 256 * u * 16 // 1024
                t = harness.graph_time_us(lambda i: ext.ld(bufs[i], out, g, u, True, via))
                measured.append((f"{'cp.async' if via else 'ld'} g{g} u{u} ({kb} KB/SM)", t))
    return measured


def other_rows(ext, bufs, out, xs, packs, w0, n, k) -> list[tuple[str, float]]:
    """mxfp6_linear in `on` and `prefetch_weights`, the LD / cp.async / TMA read kernels, and the
    arrival-order prototype where the weight is small enough."""
    measured = []
    t6 = harness.graph_time_us_per_pdl_mode(lambda i: mxfuse.mxfp6_linear(xs[i], *packs[i]),
                                            ["on", "prefetch_weights"])
    measured += [(f"mxfp6_linear {mode}", t) for mode, t in t6.items()]
    for g, u in LD:
        measured.append((f"ld g{g} u{u}", harness.graph_time_us(lambda i: ext.ld(bufs[i], out, g, u, True, False))))
    for g, u in LD:
        measured.append((f"cp.async g{g} u{u}", harness.graph_time_us(lambda i: ext.ld(bufs[i], out, g, u, True, True))))
    for sb, st, pre in TMA:
        t = harness.graph_time_us(lambda i: ext.tma(bufs[i], out, sb, st, True, pre))
        measured.append((f"tma s{sb} x{st}{' pre' if pre else ''}", t))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if (n // 16 * (k // 128) + sms - 1) // sms <= 64:
        ws_p = torch.zeros(sms * 4 * 16, dtype=torch.float32, device="cuda")
        for v, name in PROTO.items():
            for ooo in (True, False):
                err = proto_check(ext, packs[0], w0, xs[0], n, k, v, ooo)
                if not err < 1e-5:
                    raise SystemExit(f"proto {name} ooo={ooo} at {n}x{k}: rel err {err}")
                t = harness.graph_time_us(lambda i: ext.proto(packs[i][0], packs[i][1], xs[i], ws_p, n, k, ooo, v))
                measured.append((f"proto {name} {'ooo' if ooo else 'inorder'} (err {err:.1e})", t))
    return measured


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="+", default=["2560x6144", "12288x6144"])
    ap.add_argument("--out", default="stream_floor")
    ap.add_argument("--inflight", action="store_true", help="only the bytes-in-flight sweep")
    args = ap.parse_args()
    ext = load_ext()
    torch.manual_seed(0)
    copy_gbs = harness.copy_bandwidth_gbs()
    print(f"copy bandwidth: {copy_gbs:.0f} GB/s (read + write)", flush=True)
    rows, table = [], []
    for n, k in harness.parse_shapes(args.shapes):
        nbytes = weight_bytes(n, k)
        bufs = [torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda") for _ in range(harness.INPUT_SETS)]
        out = torch.zeros(1 << 20, dtype=torch.int32, device="cuda")
        ws = [torch.randn(n, k, dtype=torch.bfloat16, device="cuda") * 0.02 for _ in range(harness.INPUT_SETS)]
        for w in ws:
            mxfuse.mxfp6_round_(w)
        packs = [mxfuse.mxfp6_pack(w) for w in ws]
        xs = [torch.randn(1, k, dtype=torch.bfloat16, device="cuda") for _ in range(harness.INPUT_SETS)]
        assert packs[0][0].numel() + packs[0][1].numel() == nbytes
        td = harness.graph_time_us(lambda i: F.linear(xs[i], ws[i]))
        ws0 = ws[0]
        del ws
        measured = [("bf16 F.linear", td)]
        if args.inflight:
            measured += inflight_sweep(ext, bufs, out, xs, packs)
        else:
            measured += other_rows(ext, bufs, out, xs, packs, ws0, n, k)
        for name, t in measured:
            r = harness.make_row(name, {"n": n, "k": k}, t, nbytes, copy_gbs)
            rows.append(r)
            gbs = nbytes / t / 1e3
            table.append([f"{n}x{k}", name, t, td / t, r.pct_copy] + ([round(gbs)] if args.inflight else []))
            print(f"{n}x{k} {name:40s} {t:7.2f} us  {td / t:5.2f}x bf16  {r.pct_copy:5.1f}% copy  "
                  f"{gbs:6.0f} GB/s", flush=True)
    cols = ["N x K", "kernel", "us", "x bf16", "% copy"] + (["GB/s"] if args.inflight else [])
    md = (f"# Read-only floor of the MXFP6 weight stream, NVIDIA H200\n\nCommand: `python "
          f"benchmarks/floor/stream_floor.py{' --inflight' if args.inflight else ''} --shapes "
          f"{' '.join(args.shapes)}`. Copy bandwidth {copy_gbs:.0f} GB/s in the same run. Bytes: "
          f"packed + scales (the mxfp6_linear rows also read x and write out). See the script's "
          f"docstring.\n\n" + harness.md_table(cols, table))
    harness.write_results(args.out, {"env": harness.environment(), "copy_gbs": copy_gbs, "rows": rows}, md)
    print(md)


if __name__ == "__main__":
    main()
