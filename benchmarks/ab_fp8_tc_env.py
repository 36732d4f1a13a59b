"""A/B of the tensor-core mxfp8_scaled_mm kernel under an environment knob that the op reads at each
launch (MXFUSE_FP8_TC_WARPS, or one added by an experiment build). Every value must give the bits
of the first, checked before timing on quantized weights and activations and on random codes with
scale bytes over the whole range (NaN codes, 0xFF scales, terms outside fp32), at several M, with
bf16 and fp32 outputs and a bias. Timing as in bench_mxfp8_mm.py: every value in its own graph in
one process, rounds alternating, the best of each kept; bf16 F.linear in the same process.

    python benchmarks/ab_fp8_tc_env.py --var MXFUSE_FP8_TC_WARPS --values 2 4 --ms 1 8 16
"""
from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import mxfuse  # noqa: E402

E4M3 = torch.float8_e4m3fn


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int16)


def check_same_bits(var: str, values: list[str]) -> int:
    """Outputs under every value equal those under values[0]; returns the number of comparisons."""
    gen = torch.Generator().manual_seed(7)
    cases = []
    for n, k in [(2560, 6144), (96, 4096), (40, 160), (48, 2080)]:
        for m in (1, 3, 8, 9, 16, 37):
            b, bsc = mxfuse.mxfp8_quantize(torch.randn(n, k, generator=gen) * 0.02)
            a, asc = mxfuse.mxfp8_quantize(torch.randn(m, k, generator=gen))
            cases.append((f"quantized {n}x{k} m={m}", a, asc, b, bsc))
            if n * k <= 96 * 4096:
                # Random codes (NaN codes included) and scale bytes over [0, 255] or [60, 195].
                for lo, hi in ((0, 256), (60, 196)):
                    rc = lambda r, c: torch.randint(0, 256, (r, c), generator=gen, dtype=torch.uint8).view(E4M3)
                    rs = lambda r, c: torch.randint(lo, hi, (r, c), generator=gen, dtype=torch.uint8)
                    cases.append((f"random codes, scales [{lo}, {hi}) {n}x{k} m={m}",
                                  rc(m, k), rs(m, k // 32), rc(n, k), rs(n, k // 32)))
    count = 0
    for name, a, asc, b, bsc in cases:
        a, asc, b, bsc = (t.cuda() for t in (a, asc, b, bsc))
        for out_dtype in (torch.bfloat16, torch.float32):
            bias = torch.randn(b.shape[0], generator=gen).to(out_dtype).cuda()
            outs = []
            for v in values:
                os.environ[var] = v
                outs.append(mxfuse.mxfp8_scaled_mm(a, asc, b, bsc, out_dtype, bias=bias, b_scale_layout="1x32"))
            for v, y in zip(values[1:], outs[1:]):
                if not torch.equal(bits(y), bits(outs[0])):
                    bad = (bits(y) != bits(outs[0])).sum().item()
                    raise SystemExit(f"{var}={v} changed {bad} outputs: {name} {out_dtype}")
                count += 1
    os.environ[var] = values[0]
    return count


def main() -> None:
    args = harness.ab_env_parser(["2560x6144", "12288x6144"]).parse_args()
    torch.manual_seed(0)
    mxfuse.set_fp8_mm_kernel("tensor_cores")
    print(f"same bits under every value: {check_same_bits(args.var, args.values)} comparisons", flush=True)
    res = []
    for n, k in harness.parse_shapes(args.shapes):
        bs, bdq = harness.mxfp8_sets(n, k, 0.02)
        for m in args.ms:
            qs, adq = harness.mxfp8_sets(m, k)
            best = harness.best_under_env(
                args.var, args.values, args.rounds,
                lambda i: mxfuse.mxfp8_scaled_mm(*qs[i], *bs[i], torch.bfloat16, b_scale_layout="1x32"))
            dense = harness.graph_time_us(lambda i: F.linear(adq[i], bdq[i]))
            fields, line = harness.ab_line(args.var, args.values, best, dense)
            res.append({"n": n, "k": k, "m": m, **fields})
            print(f"{n}x{k} m={m:<3} {line}", flush=True)
        del bs, bdq
        torch.cuda.empty_cache()
    mxfuse.set_fp8_mm_kernel("exact")
    if args.out:
        harness.write_record(args.out, rows=res)


if __name__ == "__main__":
    main()
