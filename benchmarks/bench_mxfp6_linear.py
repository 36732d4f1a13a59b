"""W6A16 decode linear on the GPU: mxfp6_linear vs bf16 F.linear (cuBLAS) on the rounded weights,
and vs mxfp6_unpack followed by F.linear. Weights cycle through 16 sets so they come from HBM.

    python benchmarks/bench_mxfp6_linear.py [--out benchmarks/results/h200_mxfp6_linear]

mxfp6_linear is timed in each launch mode of ``mxfuse.set_pdl`` (programmatic dependent launch:
"off", "on" -- the default --, "prefetch_weights"), all against the same baselines in one run,
and in "on" once more with the capture check off ("on_after_kernel"):
- off: plain launches;
- on_after_kernel: each call's CTAs start as the previous call's leave and wait for it before
  touching any tensor, as a linear does after any other kernel (a norm, an activation);
- on: the default, as captured. The benchmark's calls are independent (x and weights of one call
  are written by no other), so the capture check runs each linear after the first whole before
  its dependency wait, beside the previous one (mode 3, docs/DECISIONS.md);
- prefetch_weights: weights streamed before the wait, x read after it; this is also what "on"
  gives a captured chain in which each linear reads the previous one's output (mode 2).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import mxfuse  # noqa: E402
from mxfuse.ops import PDL_MODES as MODES  # noqa: E402

SHAPES = [(9216, 2048), (2048, 4096), (2560, 6144), (12288, 6144)]
MS = [1, 2, 4, 8, 16]
# Timed variants: (set_pdl mode, capture check on).
VARIANTS = {"off": ("off", True), "on_after_kernel": ("on", False), "on": ("on", True),
            "prefetch_weights": ("prefetch_weights", True)}
NO_CHECK = "MXFUSE_FP6_NO_CAPTURE_CHECK"


def time_variants(call, names) -> dict[str, float]:
    """harness.graph_time_us_per_pdl_mode of `call` in each variant: captured in its mode, with the
    capture check off where the variant says so."""
    times = {}
    for name in names:
        mode, check = VARIANTS[name]
        with harness.env_set(NO_CHECK, None if check else "1"):
            times[name] = harness.graph_time_us_per_pdl_mode(call, [mode])[mode]
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/h200_mxfp6_linear")
    ap.add_argument("--ms", type=int, nargs="*", default=MS)
    ap.add_argument("--pdl", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--shapes", nargs="*", default=[f"{n}x{k}" for n, k in SHAPES],
                    help="N x K shapes to run, e.g. 2560x6144")
    ap.add_argument("--unverified", action="store_true",
                    help="measurement builds whose results are wrong on purpose: skip the fp64 check "
                         "(every mode must still give the same bits); the table says so")
    args = ap.parse_args()
    torch.manual_seed(0)
    dev = "cuda"
    default_mode = mxfuse.pdl_mode()
    copy_gbs = harness.copy_bandwidth_gbs()
    print(f"copy bandwidth: {copy_gbs:.0f} GB/s (read + write)", flush=True)
    rows, table = [], []
    for n, k in harness.parse_shapes(args.shapes):
        ws, packs = [], []
        for _ in range(harness.INPUT_SETS):
            w = torch.randn(n, k, dtype=torch.bfloat16, device=dev) * 0.02
            mxfuse.mxfp6_round_(w)
            ws.append(w)
            packs.append(mxfuse.mxfp6_pack(w))
        for m in args.ms:
            xs = [torch.randn(m, k, dtype=torch.bfloat16, device=dev) for _ in range(harness.INPUT_SETS)]
            # Verify before timing, against fp64 on the rounded weights: normwise error near the
            # bf16 output rounding (2^-9 relative), plus fp32 accumulation slack.
            y = mxfuse.mxfp6_linear(xs[0], *packs[0])
            ref = xs[0].double() @ ws[0].double().T
            err = ((y.double() - ref).norm() / ref.norm()).item()
            if not err < 4e-3 and not args.unverified:
                raise SystemExit(f"verification failed at {n}x{k} m={m}: rel err {err}")
            for mode in MODES:  # every launch mode gives the same bits
                mxfuse.set_pdl(mode)
                if not torch.equal(mxfuse.mxfp6_linear(xs[0], *packs[0]).view(torch.int16), y.view(torch.int16)):
                    raise SystemExit(f"verification failed at {n}x{k} m={m}: pdl {mode} changed the bits")
            mxfuse.set_pdl(default_mode)

            def w6(i):
                mxfuse.mxfp6_linear(xs[i], *packs[i])

            def dense(i):
                F.linear(xs[i], ws[i])

            def unpack_dense(i):
                F.linear(xs[i], mxfuse.mxfp6_unpack(*packs[i]))

            p = {"n": n, "k": k, "m": m}
            w6_bytes = packs[0][0].numel() + packs[0][1].numel() + m * k * 2 + m * n * 2
            dense_bytes = n * k * 2 + m * k * 2 + m * n * 2
            t6 = time_variants(w6, args.pdl)
            td = harness.graph_time_us(dense)
            tu = harness.graph_time_us(unpack_dense)
            r6 = {v: harness.make_row("mxfp6_linear",
                                      {**p, "pdl": VARIANTS[v][0], "capture_check": VARIANTS[v][1]},
                                      t, w6_bytes, copy_gbs, max_rel_err=err) for v, t in t6.items()}
            rd = harness.make_row("bf16_F.linear", p, td, dense_bytes, copy_gbs)
            ru = harness.make_row("unpack_then_F.linear", p, tu, dense_bytes, copy_gbs)
            rows += [*r6.values(), rd, ru]
            line = [f"{n}x{k}", m, td, tu]
            for mode in args.pdl:
                line += [t6[mode], td / t6[mode], r6[mode].pct_copy]
            table.append(line)
            print(f"{n}x{k} m={m:2d}: bf16 {td:7.2f} us  unpack+bf16 {tu:7.2f}  " + "  ".join(
                f"{mode} {t6[mode]:6.2f} ({td / t6[mode]:4.2f}x, {r6[mode].pct_copy:4.1f}%)" for mode in args.pdl),
                flush=True)
        del ws, packs
        torch.cuda.empty_cache()
    header = ["N x K", "M", "bf16 F.linear us", "unpack+F.linear us"]
    for mode in args.pdl:
        header += [f"{mode}: us", f"{mode}: x bf16", f"{mode}: % copy"]
    md = (f"# MXFP6 W6A16 decode linear (bf16 activations), {harness.environment()['device']}\n\n"
          + ("**UNVERIFIED: a measurement build; results not checked against fp64.**\n\n" if args.unverified else "")
          + f"Command: `{harness.command()}`. One CUDA graph of {harness.CALLS_PER_GRAPH} "
          f"calls cycling {harness.INPUT_SETS} weight and input sets, best of {harness.REPLAYS}; copy "
          f"bandwidth {copy_gbs:.0f} GB/s measured in the same run. Bytes (mxfp6): packed + scales + x + out. "
          f"mxfp6_linear in each variant ({', '.join(args.pdl)}): `off`, `on` and `prefetch_weights` are "
          f"the `mxfuse.set_pdl` modes (`on` is the default) as captured; `on_after_kernel` is `on` with "
          f"the capture check off ({NO_CHECK}=1), so each call waits for the previous one before it "
          f"touches any tensor, as after any other kernel. The calls are independent, so in `on` every "
          f"linear after the first runs whole before its wait, beside the previous one; "
          f"`prefetch_weights` (weights early, x after the wait) is also what `on` gives a chain whose "
          f"linears read the previous one's output. x bf16 = bf16 F.linear time / mxfp6 time.\n\n"
          + harness.md_table(header, table))
    harness.write_results(args.out, {"env": harness.environment(), "copy_gbs": copy_gbs,
                                    "unverified": args.unverified, "rows": rows}, md)
    print(md)


if __name__ == "__main__":
    main()
