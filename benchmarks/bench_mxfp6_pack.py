"""Load-time MXFP6 ops (issue #4, point 6): mxfp6_pack, mxfp6_round_ and mxfp6_unpack, wall-clock
as a model loader sees them, on the GPU and on the CPU.

    python benchmarks/bench_mxfp6_pack.py [--out benchmarks/results/h200_mxfp6_pack]
    python benchmarks/bench_mxfp6_pack.py --cpu-only --out benchmarks/results/cpu_mxfp6_pack

Each op is timed from the call until its result is ready (`torch.cuda.synchronize()` on the GPU),
so the device-to-host sync of the finite-weight check (docs/DECISIONS.md) and the allocation of
the outputs are included; the best and the median of --reps runs are kept (after one warm-up
run). `mxfp6_round_` is timed on a fresh copy of the weight each run (the copy is made before the
clock starts). Before timing, every op's GPU result is compared bitwise with the CPU result
(`torch.equal`) for the weights timed, so the numbers are of ops that give the SPEC's bits.
Weights: N(0, 0.02) with every 7th group scaled by 2^±12, so blocks of many exponents occur.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import mxfuse  # noqa: E402

SHAPES = [(9216, 2048), (2048, 4096), (2560, 6144), (12288, 6144)]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def weight(n: int, k: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(n * 7 + k)
    w = torch.randn(n, k // 32, 32, generator=g) * 0.02
    exps = torch.randint(-12, 13, (n, k // 32, 1), generator=g).float()
    w = torch.where(torch.arange(k // 32).view(1, -1, 1) % 7 == 3, w * torch.exp2(exps), w)
    if dtype == torch.float16:
        w = w.clamp(-60000, 60000)
    return w.reshape(n, k).to(dtype).to(device)


def wall(fn, device: str, reps: int, setup=None) -> tuple[float, float]:
    """(best, median) seconds of fn(arg) until its result is ready; arg = setup() made off the clock."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times = []
    for i in range(reps + 1):
        arg = setup() if setup else None
        sync()
        t0 = time.perf_counter()
        fn(arg)
        sync()
        if i:  # run 0 warms up (allocator, first-launch setup)
            times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def time_ops(w: torch.Tensor, reps: int) -> dict[str, tuple[float, float]]:
    device = w.device.type
    packed, scales = mxfuse.mxfp6_pack(w)
    return {
        "pack": wall(lambda _: mxfuse.mxfp6_pack(w), device, reps),
        "round_": wall(lambda c: mxfuse.mxfp6_round_(c), device, reps, setup=lambda: w.clone()),
        "unpack": wall(lambda _: mxfuse.mxfp6_unpack(packed, scales, w.dtype), device, reps),
    }


def check_gpu_equals_cpu(w_cpu: torch.Tensor, w_gpu: torch.Tensor) -> None:
    pc, sc = mxfuse.mxfp6_pack(w_cpu)
    pg, sg = mxfuse.mxfp6_pack(w_gpu)
    assert torch.equal(pc, pg.cpu()) and torch.equal(sc, sg.cpu()), "mxfp6_pack: GPU != CPU"
    rc = mxfuse.mxfp6_round_(w_cpu.clone())
    rg = mxfuse.mxfp6_round_(w_gpu.clone())
    assert torch.equal(rc, rg.cpu()), "mxfp6_round_: GPU != CPU"
    uc = mxfuse.mxfp6_unpack(pc, sc, w_cpu.dtype)
    assert torch.equal(uc, mxfuse.mxfp6_unpack(pg, sg, w_gpu.dtype).cpu()), "mxfp6_unpack: GPU != CPU"
    assert torch.equal(uc, rc), "unpack(pack(w)) != round(w)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/h200_mxfp6_pack")
    ap.add_argument("--shapes", nargs="*", default=[f"{n}x{k}" for n, k in SHAPES])
    ap.add_argument("--dtypes", nargs="*", default=list(DTYPES), choices=list(DTYPES))
    ap.add_argument("--reps", type=int, default=10, help="timed GPU runs per op (CPU: --cpu-reps)")
    ap.add_argument("--cpu-reps", type=int, default=3)
    ap.add_argument("--cpu-only", action="store_true", help="no GPU: time the CPU ops only")
    args = ap.parse_args()
    gpu = not args.cpu_only
    if gpu and not torch.cuda.is_available():
        sys.exit("no GPU: run with --cpu-only")
    rows, table = [], []
    for n, k in harness.parse_shapes(args.shapes):
        for dname in args.dtypes:
            w_cpu = weight(n, k, DTYPES[dname], "cpu")
            row = {"n": n, "k": k, "dtype": dname}
            if gpu:
                w_gpu = w_cpu.cuda()
                check_gpu_equals_cpu(w_cpu, w_gpu)
                row["gpu_s"] = time_ops(w_gpu, args.reps)
                del w_gpu
                torch.cuda.empty_cache()
            row["cpu_s"] = time_ops(w_cpu, args.cpu_reps)
            rows.append(row)
            line = [f"{n}x{k}", dname]
            if gpu:
                line += [f"{1e3 * row['gpu_s'][op][0]:.2f} / {1e3 * row['gpu_s'][op][1]:.2f}"
                         for op in ("pack", "round_", "unpack")]
            line += [f"{row['cpu_s'][op][0]:.3f} / {row['cpu_s'][op][1]:.3f}" for op in ("pack", "round_", "unpack")]
            table.append(line)
            print(" | ".join(line), flush=True)
    header = ["N x K", "weights"]
    if gpu:
        header += ["GPU pack ms", "GPU round_ ms", "GPU unpack ms"]
    header += ["CPU pack s", "CPU round_ s", "CPU unpack s"]
    env = harness.environment() if gpu else {"device": "CPU only", "torch": torch.__version__}
    env["cpu_threads"] = torch.get_num_threads()
    env["cpu_count"] = os.cpu_count()
    where = env["device"] + (f", CPU ops on {env['cpu_threads']} threads" if gpu
                             else f" ({env['cpu_threads']} threads)")
    md = (f"# MXFP6 load-time ops: pack, round_, unpack ({where})\n\n"
          f"Command: `{harness.command()}`. Wall-clock from the call until the result is ready"
          + (f" (GPU: `torch.cuda.synchronize()`, so the finite-weight check's device-to-host sync and "
             f"the output allocation are included), best / median of {args.reps} runs on the GPU and "
             f"{args.cpu_reps} on the CPU" if gpu else f"; best / median of {args.cpu_reps} runs")
          + " after one warm-up; `round_` on a fresh copy each run. " + ("Every GPU result was first checked bitwise equal to the CPU result "
                           "(pack, round_, unpack, and unpack(pack(w)) == round_(w)). " if gpu else "")
          + "Issue #4 point 6: pack and round_ well under a second on the GPU for 12288 x 6144, "
          "seconds on the CPU.\n\n" + harness.md_table(header, table))
    harness.write_results(args.out, {"env": env, "reps": args.reps, "cpu_reps": args.cpu_reps, "rows": rows}, md)
    print(md)


if __name__ == "__main__":
    main()
