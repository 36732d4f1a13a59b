"""A/B of mxfp6_linear under an environment knob that the op reads at each launch (the shipped
MXFUSE_FP6_ITEM_RT / _WARPS / _RT / _SPLIT, or one added by an experiment build): every value is
captured in its own graph in one process, rounds alternate, and each value's best is kept. Each
value must give the bits of the first (checked before timing), so only knobs that keep the
summation order (ITEM_RT) or experiment knobs that claim to can be compared.

    python benchmarks/ab_fp6_env.py --var MXFUSE_FP6_ITEM_RT --values 1 2 --shapes 12288x6144 --ms 1 8 16

`--dtype fp16` runs weights and x in fp16 (the record's `bf16_us` is then fp16 F.linear), so the
kernels' unfolded-scale path (fp16 never folds) is timed too.
"""
from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import mxfuse  # noqa: E402


def main() -> None:
    ap = harness.ab_env_parser(["12288x6144", "2560x6144"])
    ap.add_argument("--pdl", nargs="+", default=["on"])
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16", help="weights and x")
    args = ap.parse_args()
    dt = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    torch.manual_seed(0)
    res = []
    for n, k in harness.parse_shapes(args.shapes):
        ws, packs = [], []
        for _ in range(harness.INPUT_SETS):
            w = torch.randn(n, k, dtype=dt, device="cuda") * 0.02
            mxfuse.mxfp6_round_(w)
            ws.append(w)
            packs.append(mxfuse.mxfp6_pack(w))
        for m in args.ms:
            xs = [torch.randn(m, k, dtype=dt, device="cuda") for _ in range(harness.INPUT_SETS)]
            for mode in args.pdl:
                mxfuse.set_pdl(mode)
                os.environ[args.var] = args.values[0]
                ref = [mxfuse.mxfp6_linear(xs[i], *packs[i]) for i in range(2)]
                for v in args.values:  # same bits under every variant
                    os.environ[args.var] = v
                    for i in range(2):
                        y = mxfuse.mxfp6_linear(xs[i], *packs[i])
                        if not torch.equal(y.view(torch.int16), ref[i].view(torch.int16)):
                            raise SystemExit(f"{args.var}={v} changed the bits at {n}x{k} m={m} {mode}")
                best = harness.best_under_env(args.var, args.values, args.rounds,
                                              lambda i: mxfuse.mxfp6_linear(xs[i], *packs[i]))
                dense = harness.graph_time_us(lambda i: F.linear(xs[i], ws[i]))
                fields, line = harness.ab_line(args.var, args.values, best, dense)
                res.append({"n": n, "k": k, "m": m, "pdl": mode, "dtype": args.dtype, **fields})
                print(f"{n}x{k} m={m:<3} {mode:<16} {args.dtype} {line}", flush=True)
    mxfuse.set_pdl("on")
    if args.out:
        harness.write_record(args.out, rows=res)


if __name__ == "__main__":
    main()
