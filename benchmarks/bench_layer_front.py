"""A decode layer's front on the GPU: residual add + Gemma RMSNorm, then the MXFP6 qkv projection
(mxfp6_linear), in each launch mode of ``mxfuse.set_pdl``; the bf16 pair (the same norm, then
F.linear on the rounded bf16 weights) as the baseline. Weights and inputs cycle through 16 sets.

    python benchmarks/bench_layer_front.py [--out benchmarks/results/h200_layer_front]

With "on" and "prefetch_weights" both ops use programmatic dependent launch: each kernel is
placed while the one before it runs and waits for it before touching memory (the linear's CTAs
while the norm runs, the next front's norm while the linear runs), and with "prefetch_weights"
the linear's weight stream overlaps the norm as well. "on, norm plain" is "on" with the norm
launched plainly (MXFUSE_NORM_NO_PDL=1), as before the twenty-ninth session: the A/B of the
norm's launch in the same run. "norm + linear alone" is the sum of the two ops timed apart.
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

# (hidden, qkv rows): Qwen3-Next-80B's full-attention qkv (2048 -> 9216) and a 6144-wide model's.
SHAPES = [(2048, 9216), (6144, 12288)]
MS = [1, 8, 16]
NORM_PLAIN = "MXFUSE_NORM_NO_PDL"
ON_NORM_PLAIN = "on, norm plain"
COLUMNS = [MODES[0], ON_NORM_PLAIN, *MODES[1:]]  # off, on with the norm plain, on, prefetch_weights


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/h200_layer_front")
    ap.add_argument("--ms", type=int, nargs="*", default=MS)
    args = ap.parse_args()
    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    default_mode = mxfuse.pdl_mode()
    copy_gbs = harness.copy_bandwidth_gbs()
    print(f"copy bandwidth: {copy_gbs:.0f} GB/s (read + write)", flush=True)
    rows, table = [], []
    for hidden, n in SHAPES:
        ws, packs, nws = [], [], []
        for _ in range(harness.INPUT_SETS):
            w = torch.randn(n, hidden, dtype=dt, device=dev) * hidden ** -0.5
            mxfuse.mxfp6_round_(w)
            ws.append(w)
            packs.append(mxfuse.mxfp6_pack(w))
            nws.append(torch.randn(hidden, dtype=dt, device=dev) * 0.1)
        for m in args.ms:
            xs = [torch.randn(m, hidden, dtype=dt, device=dev) for _ in range(harness.INPUT_SETS)]
            rs = [torch.randn(m, hidden, dtype=dt, device=dev) for _ in range(harness.INPUT_SETS)]

            def front(i):
                mxfuse.mxfp6_linear(mxfuse.gemma_fused_add_rmsnorm(xs[i], rs[i], nws[i]), *packs[i])

            def front_bf16(i):
                F.linear(mxfuse.gemma_fused_add_rmsnorm(xs[i], rs[i], nws[i]), ws[i])

            def norm(i):
                mxfuse.gemma_fused_add_rmsnorm(xs[i], rs[i], nws[i])

            ys = [mxfuse.gemma_fused_add_rmsnorm(xs[i], rs[i].clone(), nws[i]) for i in range(harness.INPUT_SETS)]

            def linear(i):
                mxfuse.mxfp6_linear(ys[i], *packs[i])

            # Verify: every mode gives the same bits for the whole front (residual updated in place).
            outs = []
            for mode in MODES:
                mxfuse.set_pdl(mode)
                r0 = rs[0].clone()
                outs.append(mxfuse.mxfp6_linear(mxfuse.gemma_fused_add_rmsnorm(xs[0], r0, nws[0]), *packs[0]))
            if not all(torch.equal(o.view(torch.int16), outs[0].view(torch.int16)) for o in outs):
                raise SystemExit(f"verification failed at hidden {hidden} n {n} m {m}: modes differ")
            mxfuse.set_pdl(default_mode)
            t = harness.graph_time_us_per_pdl_mode(front, MODES)
            with harness.env_set(NORM_PLAIN, "1"):
                t[ON_NORM_PLAIN] = harness.graph_time_us_per_pdl_mode(front, ["on"])["on"]
            t_norm, t_lin = harness.graph_time_us(norm), harness.graph_time_us(linear)
            t_bf16 = harness.graph_time_us(front_bf16)
            p = {"hidden": hidden, "n": n, "m": m}
            for mode in COLUMNS:
                rows.append(harness.make_row("norm_then_mxfp6_linear", {**p, "pdl": mode}, t[mode], 0, copy_gbs))
            rows.append(harness.make_row("norm_alone", {**p, "pdl": default_mode}, t_norm, 0, copy_gbs))
            rows.append(harness.make_row("mxfp6_linear_alone", {**p, "pdl": default_mode}, t_lin, 0, copy_gbs))
            rows.append(harness.make_row("norm_then_bf16_F.linear", p, t_bf16, 0, copy_gbs))
            table.append([f"{hidden} -> {n}", m, t_bf16, t_norm + t_lin]
                         + [v for mode in COLUMNS for v in (t[mode], t_bf16 / t[mode])])
            print(f"{hidden}->{n} m={m:2d}: bf16 pair {t_bf16:6.2f} us  norm {t_norm:5.2f} + linear {t_lin:5.2f}  "
                  + "  ".join(f"{mode} {t[mode]:6.2f} ({t_bf16 / t[mode]:4.2f}x)" for mode in COLUMNS), flush=True)
        del ws, packs
        torch.cuda.empty_cache()
    header = ["hidden -> qkv", "M", "norm + bf16 F.linear us", f"norm + linear alone ({default_mode}) us"]
    for mode in COLUMNS:
        header += [f"{mode}: us", f"{mode}: x bf16 pair"]
    md = (f"# Decode layer front: residual add + Gemma RMSNorm, then MXFP6 qkv projection (bf16), "
          f"{harness.environment()['device']}\n\n"
          f"Command: `{harness.command()}`. One CUDA graph of {harness.CALLS_PER_GRAPH} "
          f"fronts cycling {harness.INPUT_SETS} weight and input sets, best of {harness.REPLAYS}. Each front is "
          f"`gemma_fused_add_rmsnorm` then `mxfp6_linear` in each `mxfuse.set_pdl` mode; the baseline is the "
          f"same norm then bf16 `F.linear` (cuBLAS) on the rounded weights (the norm launched as `set_pdl` "
          f"says, {default_mode} here). `{ON_NORM_PLAIN}` is `on` with the norm launched plainly "
          f"({NORM_PLAIN}=1). \"norm + linear alone\" adds the two ops timed in separate graphs.\n\n" + harness.md_table(header, table))
    harness.write_results(args.out, {"env": harness.environment(), "copy_gbs": copy_gbs, "rows": rows}, md)
    print(md)


if __name__ == "__main__":
    main()
