"""Residual add + Gemma RMSNorm + MXFP8 quantization on the GPU: fused vs its alternatives.

For each hidden size and M: the fused op; the separate pair (gemma_fused_add_rmsnorm, then
mxfp8_quantize, both mxfuse); torch.compile of the pure-PyTorch reference of the fused op; and the
plain gemma_fused_add_rmsnorm alone. Outputs are checked bit for bit before timing.

    python benchmarks/bench_norm_quant.py [--out benchmarks/results/h200_norm_quant]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import mxfuse  # noqa: E402
from mxfuse import reference  # noqa: E402

HIDDENS = [6144, 2048, 4096]
MS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096]


def fused_bytes(m: int, n: int) -> int:
    # read x, residual, weight; write residual, codes, scales
    return m * n * 2 * 3 + n * 2 + m * n + m * n // 32


def plain_bytes(m: int, n: int) -> int:
    # read x, residual, weight; write residual, y
    return m * n * 2 * 4 + n * 2


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/h200_norm_quant")
    ap.add_argument("--hiddens", type=int, nargs="*", default=HIDDENS)
    ap.add_argument("--ms", type=int, nargs="*", default=MS)
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    args = ap.parse_args()

    torch.manual_seed(0)
    dev = "cuda"
    copy_gbs = harness.copy_bandwidth_gbs()
    print(f"copy bandwidth: {copy_gbs:.0f} GB/s (read + write)", flush=True)
    ref_fused = reference.gemma_fused_add_rmsnorm_mxfp8
    compiled = torch.compile(ref_fused, dynamic=True)
    rows, table = [], []
    for n in args.hiddens:
        weights = [torch.randn(n, dtype=torch.bfloat16, device=dev) * 0.1 for _ in range(harness.INPUT_SETS)]
        for m in args.ms:
            xs = [torch.randn(m, n, dtype=torch.bfloat16, device=dev) for _ in range(harness.INPUT_SETS)]
            rs = [torch.randn(m, n, dtype=torch.bfloat16, device=dev) for _ in range(harness.INPUT_SETS)]

            # Verify before timing: fused == separate == reference (compiled), bit for bit.
            r1, r2, r3 = rs[0].clone(), rs[0].clone(), rs[0].clone()
            c1, s1 = mxfuse.gemma_fused_add_rmsnorm_mxfp8(xs[0], r1, weights[0])
            c2, s2 = mxfuse.mxfp8_quantize(mxfuse.gemma_fused_add_rmsnorm(xs[0], r2, weights[0]))
            ok = (torch.equal(c1.view(torch.uint8), c2.view(torch.uint8)) and torch.equal(s1, s2)
                  and torch.equal(r1, r2))
            if not ok:
                raise SystemExit(f"verification failed (fused != separate) at n={n} m={m}")
            # The compiled reference is what a user would run instead; inductor's generated code is
            # not held to SPEC's bit-exactness (it may contract into FMAs), so its agreement is
            # recorded, not required.
            compile_s, compile_match = None, None
            if not args.no_compile:
                t0 = time.time()
                c3, s3 = compiled(xs[0], r3, weights[0])
                torch.cuda.synchronize()
                compile_s = time.time() - t0
                compile_match = (c1.view(torch.uint8) == c3.view(torch.uint8)).float().mean().item()

            def fused(i):
                mxfuse.gemma_fused_add_rmsnorm_mxfp8(xs[i], rs[i], weights[i])

            def separate(i):
                mxfuse.mxfp8_quantize(mxfuse.gemma_fused_add_rmsnorm(xs[i], rs[i], weights[i]))

            def plain(i):
                mxfuse.gemma_fused_add_rmsnorm(xs[i], rs[i], weights[i])

            def comp(i):
                compiled(xs[i], rs[i], weights[i])

            p = {"hidden": n, "m": m, "dtype": "bf16"}
            t_f = harness.graph_time_us(fused)
            t_s = harness.graph_time_us(separate)
            t_p = harness.graph_time_us(plain)
            t_c = None if args.no_compile else harness.graph_time_us(comp)
            rows.append(harness.make_row("fused", p, t_f, fused_bytes(m, n), copy_gbs))
            rows.append(harness.make_row("separate", p, t_s, fused_bytes(m, n), copy_gbs))
            rows.append(harness.make_row("plain_add_norm", p, t_p, plain_bytes(m, n), copy_gbs))
            if t_c is not None:
                rows.append(harness.make_row("torch_compile_reference", p, t_c, fused_bytes(m, n), copy_gbs,
                                             first_call_s=compile_s, code_match_fraction=compile_match))
            f = rows[-4] if t_c is not None else rows[-3]
            table.append([n, m, t_f, f.gbs, f.pct_copy, t_s, t_s / t_f,
                          t_c if t_c is not None else float("nan"),
                          (t_c / t_f) if t_c is not None else float("nan"), t_p, t_f / t_p])
            print(f"n={n:5d} m={m:5d} fused {t_f:7.2f} us ({f.pct_copy:5.1f}% copy)  sep {t_s:7.2f} "
                  f"({t_s / t_f:4.2f}x)  compile {t_c if t_c else float('nan'):7.2f}  plain {t_p:7.2f} "
                  f"(fused/plain {t_f / t_p:4.2f})", flush=True)

    header = ["hidden", "M", "fused us", "fused GB/s", "% copy", "separate us", "speedup vs separate",
              "compile(ref) us", "speedup vs compile", "plain add+norm us", "fused / plain"]
    md = (f"# Fused add + Gemma RMSNorm + MXFP8 quant (bf16), {harness.environment()['device']}\n\n"
          f"Command: `{harness.command()}`. One CUDA graph of {harness.CALLS_PER_GRAPH} calls "
          f"cycling {harness.INPUT_SETS} input sets, best of {harness.REPLAYS}; copy bandwidth "
          f"{copy_gbs:.0f} GB/s measured in the same run. Bytes: read x, residual, weight; write residual, "
          "codes, scales.\n\n" + harness.md_table(header, table))
    harness.write_results(args.out, {"env": harness.environment(), "copy_gbs": copy_gbs, "rows": rows}, md)
    print(md)


if __name__ == "__main__":
    main()
