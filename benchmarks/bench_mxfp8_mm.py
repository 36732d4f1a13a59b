"""MXFP8 x MXFP8 GEMM on the GPU: mxfp8_scaled_mm with each kernel of ``set_fp8_mm_kernel`` (the
exact one on the CUDA cores, and the tensor-core one on sm_89+) against bf16 F.linear (cuBLAS) on
the dequantized operands, and mxfp8_dequantize followed by F.linear. Weights cycle through 16 sets
so they come from HBM. Before timing, the exact kernel's output is checked bit for bit against the
CPU op, and the tensor-core kernel's normwise error against float64 is reported next to the exact
kernel's.

    python benchmarks/bench_mxfp8_mm.py [--out benchmarks/results/h200_mxfp8_mm]
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
from mxfuse import reference as ref  # noqa: E402

SHAPES = [(2560, 6144), (12288, 6144)]
MS = [1, 16]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/h200_mxfp8_mm")
    ap.add_argument("--ms", type=int, nargs="*", default=MS)
    ap.add_argument("--shapes", nargs="*", default=[f"{n}x{k}" for n, k in SHAPES])
    args = ap.parse_args()
    torch.manual_seed(0)
    copy_gbs = harness.copy_bandwidth_gbs()
    print(f"copy bandwidth: {copy_gbs:.0f} GB/s (read + write)", flush=True)
    rows, table = [], []
    for n, k in harness.parse_shapes(args.shapes):
        bs, bdq = harness.mxfp8_sets(n, k, 0.02)
        for m in args.ms:
            qs, adq = harness.mxfp8_sets(m, k)
            # Verify before timing: bit for bit against the CPU op on the first set.
            y = mxfuse.mxfp8_scaled_mm(*qs[0], *bs[0], torch.bfloat16, b_scale_layout="1x32")
            y_cpu = mxfuse.mxfp8_scaled_mm(*(t.cpu() for t in (*qs[0], *bs[0])), torch.bfloat16,
                                           b_scale_layout="1x32")
            if not torch.equal(y.cpu().view(torch.int16), y_cpu.view(torch.int16)):
                raise SystemExit(f"verification failed at {n}x{k} m={m}: GPU != CPU")
            want = ref.mxfp8_scaled_mm(*(t.cpu() for t in (*qs[0], *bs[0])))
            err = ((y.cpu().double() - want).norm() / want.norm()).item()
            kernels = ["exact"] + (["tensor_cores"] if torch.cuda.get_device_capability() >= (8, 9) else [])
            errs = {"exact": err}
            if "tensor_cores" in kernels:
                mxfuse.set_fp8_mm_kernel("tensor_cores")
                y_tc = mxfuse.mxfp8_scaled_mm(*qs[0], *bs[0], torch.bfloat16, b_scale_layout="1x32")
                mxfuse.set_fp8_mm_kernel("exact")
                errs["tensor_cores"] = ((y_tc.cpu().double() - want).norm() / want.norm()).item()
                if not errs["tensor_cores"] < 2 * err + 1e-6:
                    raise SystemExit(f"tensor-core kernel at {n}x{k} m={m}: error {errs['tensor_cores']} vs {err}")

            def fp8(i):
                mxfuse.mxfp8_scaled_mm(*qs[i], *bs[i], torch.bfloat16, b_scale_layout="1x32")

            def dense(i):
                F.linear(adq[i], bdq[i])

            def deq_dense(i):
                F.linear(mxfuse.mxfp8_dequantize(*qs[i], torch.bfloat16),
                         mxfuse.mxfp8_dequantize(*bs[i], torch.bfloat16))

            p = {"n": n, "k": k, "m": m}
            fp8_bytes = n * k + n * k // 32 + m * k + m * k // 32 + m * n * 2
            dense_bytes = n * k * 2 + m * k * 2 + m * n * 2
            t8, row8 = {}, {}
            for kern in kernels:
                mxfuse.set_fp8_mm_kernel(kern)
                t8[kern] = harness.graph_time_us(fp8)
                row8[kern] = harness.make_row(f"mxfp8_scaled_mm[{kern}]", p, t8[kern], fp8_bytes, copy_gbs,
                                              rel_err=errs[kern])
                rows.append(row8[kern])
            mxfuse.set_fp8_mm_kernel("exact")
            td, tq = (harness.graph_time_us(f) for f in (dense, deq_dense))
            rows += [harness.make_row("bf16_F.linear", p, td, dense_bytes, copy_gbs),
                     harness.make_row("dequantize_then_F.linear", p, tq, dense_bytes, copy_gbs)]
            line = [f"{n}x{k}", m, td, tq]
            for kern in ("exact", "tensor_cores"):
                line += [t8[kern], td / t8[kern], row8[kern].pct_copy, f"{errs[kern]:.2e}"] if kern in t8 \
                    else ["-", "-", "-", "-"]
            table.append(line)
            print(f"{n}x{k} m={m:3d}: bf16 {td:8.2f} us  dequant+bf16 {tq:8.2f}  " +
                  "  ".join(f"{kern} {t8[kern]:9.2f} ({td / t8[kern]:5.3f}x bf16, err {errs[kern]:.2e})"
                            for kern in t8), flush=True)
        del bs, bdq
        torch.cuda.empty_cache()
    header = ["N x K", "M", "bf16 F.linear us", "dequantize+F.linear us"]
    for kern in ("exact", "tensor_cores"):
        header += [f"{kern}: us", f"{kern}: x bf16", f"{kern}: % copy", f"{kern}: rel err"]
    md = (f"# MXFP8 x MXFP8 GEMM, {harness.environment()['device']}\n\n"
          f"Command: `{harness.command()}`. One CUDA graph of {harness.CALLS_PER_GRAPH} "
          f"calls cycling {harness.INPUT_SETS} weight and input sets, best of {harness.REPLAYS}; copy "
          f"bandwidth {copy_gbs:.0f} GB/s in the same run. Bytes (mxfp8): codes + scales of a and b + out "
          f"(bf16). `exact`: the CPU op's summation order on the CUDA cores (bit-identical to the CPU op, "
          f"checked); `tensor_cores`: block dots from FP8 mma (`mxfuse.set_fp8_mm_kernel`). x bf16 < 1 "
          f"means slower than cuBLAS bf16; rel err: normwise, bf16 output against float64.\n\n" + harness.md_table(header, table))
    harness.write_results(args.out, {"env": harness.environment(), "copy_gbs": copy_gbs, "rows": rows}, md)
    print(md)


if __name__ == "__main__":
    main()
