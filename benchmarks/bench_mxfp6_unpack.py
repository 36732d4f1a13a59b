"""mxfp6_unpack on the GPU as a streaming kernel: device time per call against the copy bandwidth
of the same run, and the prefill recipe the README gives (unpack, then F.linear) against bf16
F.linear on the same values.

    python benchmarks/bench_mxfp6_unpack.py [--out benchmarks/results/h200_mxfp6_unpack]
    python benchmarks/bench_mxfp6_unpack.py --var MXFUSE_X --values 0 1   # A/B under a launch knob

Timing is the harness's (one CUDA graph of 128 calls cycling 16 packed weights, best of 5 replays).
Bytes per unpack: packed + scales read, the [N, K] output written. Before timing, the GPU unpack
of the first weight set is compared bitwise (`torch.equal`) with the CPU op for every output
dtype timed, and under --var every value's output with the first value's.
Weights: N(0, 0.02) with every 7th group scaled by 2^+-12 (bench_mxfp6_pack.py's).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from bench_mxfp6_pack import weight  # noqa: E402

import mxfuse  # noqa: E402

SHAPES = ["9216x2048", "2048x4096", "2560x6144", "12288x6144"]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/h200_mxfp6_unpack")
    ap.add_argument("--shapes", nargs="+", default=SHAPES)
    ap.add_argument("--dtypes", nargs="+", default=["bf16", "fp16"], choices=list(DTYPES))
    ap.add_argument("--linear-ms", type=int, nargs="*", default=[1024],
                    help="M of the prefill recipe timed with bf16 output (none: skip)")
    ap.add_argument("--var", default=None, help="environment knob read at each launch (A/B)")
    ap.add_argument("--values", nargs="+", default=None)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of an A/B")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no GPU")
    values = args.values if args.var else [None]
    copy_gbs = harness.copy_bandwidth_gbs()
    rows, table = [], []
    for n, k in harness.parse_shapes(args.shapes):
        w0 = weight(n, k, torch.bfloat16, "cpu")
        pc, sc = mxfuse.mxfp6_pack(w0)
        ws_cpu = [w0] + [torch.randn(n, k, dtype=torch.bfloat16) * 0.02
                         for _ in range(harness.INPUT_SETS - 1)]
        packs = [mxfuse.mxfp6_pack(w.cuda()) for w in ws_cpu]
        assert torch.equal(packs[0][0].cpu(), pc) and torch.equal(packs[0][1].cpu(), sc)
        for dname in args.dtypes:
            dt = DTYPES[dname]
            want = mxfuse.mxfp6_unpack(pc, sc, dt)
            for v in values:
                with harness.env_set(args.var or "_", v):
                    got = mxfuse.mxfp6_unpack(*packs[0], dt).cpu()
                assert torch.equal(got, want), f"{n}x{k} {dname} {args.var}={v}: GPU != CPU"
            del want, got

            def call(i, dt=dt):
                mxfuse.mxfp6_unpack(*packs[i], dt)

            nbytes = packs[0][0].numel() + packs[0][1].numel() + n * k * dt.itemsize
            if args.var:
                best = harness.best_under_env(args.var, args.values, args.rounds, call)
                os.environ.pop(args.var, None)
            else:
                best = {None: harness.graph_time_us(call)}
            pct = {v: 100.0 * nbytes / (t * 1e-6) / 1e9 / copy_gbs for v, t in best.items()}
            rows.append({"n": n, "k": k, "out_dtype": dname, "bytes": nbytes,
                         "us": {str(v): t for v, t in best.items()},
                         "pct_copy": {str(v): q for v, q in pct.items()}})
            line = [f"{n}x{k}", dname] + [f"{best[v]:.2f} ({pct[v]:.1f}%)" for v in values]
            if len(values) > 1:
                line.append(f"{best[values[0]] / best[values[-1]]:.2f}x")
            table.append(line)
            print(" | ".join(line), flush=True)
        for m in args.linear_ms:
            ws = [mxfuse.mxfp6_unpack(*packs[i], torch.bfloat16) for i in range(harness.INPUT_SETS)]
            xs = [torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
                  for _ in range(harness.INPUT_SETS)]
            dense = harness.graph_time_us(lambda i: F.linear(xs[i], ws[i]))
            recipe = {}
            for v in values:
                with harness.env_set(args.var or "_", v):
                    recipe[str(v)] = harness.graph_time_us(
                        lambda i: F.linear(xs[i], mxfuse.mxfp6_unpack(*packs[i], torch.bfloat16)))
            rows.append({"n": n, "k": k, "m": m, "bf16_linear_us": dense,
                         "unpack_then_linear_us": recipe})
            line = [f"{n}x{k}", f"M={m}: bf16 F.linear {dense:.2f}, unpack + F.linear"] + [
                f"{t:.2f} ({dense / t:.2f}x)" for t in recipe.values()]
            if len(values) > 1:
                line.append(f"{recipe[str(values[0])] / recipe[str(values[-1])]:.2f}x")
            table.append(line)
            print(" | ".join(line), flush=True)
        torch.cuda.empty_cache()
    cols = [f"{args.var}={v}: us (% copy)" for v in values] if args.var else ["us (% copy)"]
    header = ["N x K", "out dtype / prefill"] + cols
    header += ["first / last"] if len(values) > 1 else []
    env = harness.environment()
    md = (f"# mxfp6_unpack on the GPU ({env['device']})\n\n"
          f"Command: `{harness.command()}`. One CUDA graph of 128 calls cycling 16 packed "
          f"weights, best of 5 replays; copy bandwidth {copy_gbs:.0f} GB/s in the same run. "
          "Bytes: packed + scales + output. Every GPU output was first checked bitwise equal to "
          "the CPU op's. Prefill rows: bf16 F.linear on the unpacked weights, against mxfp6_unpack "
          "then F.linear in each call (x ratio = bf16 / recipe).\n\n"
          + harness.md_table(header, table))
    payload = {"env": env, "copy_gbs": copy_gbs, "var": args.var, "values": args.values,
               "rows": rows}
    harness.write_results(args.out, payload, md)
    print(md)


if __name__ == "__main__":
    main()
