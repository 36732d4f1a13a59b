"""Host cost of an eager call: how long the issuing CPU thread spends in one call of each op (its
Python wrapper, the dispatcher, the argument checks, allocation and the launch), at decode shapes.
The CUDA-graph tables (the other benchmarks) do not see this cost: a replayed graph skips the host.
It matters to an engine that runs a step eagerly (no graph: prefill, or a graph-less debug run).

Method: after a warm-up, the time of issuing ``CALLS`` calls back to back (``time.perf_counter``
around the loop, no sync inside it), divided by ``CALLS``; median of ``ROUNDS`` rounds, a sync
between rounds. ``CALLS`` is small enough that the launch queue does not fill, so the loop's time is
the host's alone even where a kernel takes longer than its launch. Baselines in the same run: the
torch ops an engine would call instead (``F.linear``, ``F.rms_norm``, an add).

    python benchmarks/bench_host_overhead.py [--out benchmarks/results/h200_host_overhead] [--device cuda]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import mxfuse  # noqa: E402

CALLS = 64
ROUNDS = 41


def host_us(call, dev: str) -> float:
    """Median over ROUNDS of the host time (us) of CALLS back-to-back calls, per call."""
    sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)
    for _ in range(8):
        call()
    sync()
    times = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(CALLS):
            call()
        times.append((time.perf_counter() - t0) * 1e6 / CALLS)
        sync()
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/h200_host_overhead")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--profile", nargs="*", default=[],
                    help="calls (by name prefix) to profile: torch.profiler's table by self CPU time")
    args = ap.parse_args()
    torch.manual_seed(0)
    dev, dt = args.device, torch.bfloat16
    hidden, hq, hkv, d, rd, m = 2048, 16, 2, 256, 64, 1  # Qwen3-Next's full-attention front, one token
    n = hq * d * 2 + 2 * hkv * d
    x = torch.randn(m, hidden, dtype=dt, device=dev)
    res = torch.randn(m, hidden, dtype=dt, device=dev)
    nw = torch.randn(hidden, dtype=dt, device=dev) * 0.1
    w = torch.randn(n, hidden, dtype=dt, device=dev) * hidden ** -0.5
    mxfuse.mxfp6_round_(w)
    packed, scales = mxfuse.mxfp6_pack(w)
    qw = torch.randn(d, dtype=dt, device=dev) * 0.1
    kw = torch.randn(d, dtype=dt, device=dev) * 0.1
    ang = torch.arange(4096, device=dev, dtype=torch.float32)[:, None] * torch.rand(rd // 2, device=dev)
    cos_sin = torch.cat([ang.cos(), ang.sin()], dim=1)
    kc = torch.zeros(64, 16, hkv, d, device=dev, dtype=torch.uint8).view(torch.float8_e4m3fn)
    vc = torch.zeros_like(kc)
    pos = torch.randint(0, 4096, (m,), device=dev)
    slots = torch.randperm(64 * 16, device=dev)[:m]
    k_scale = torch.tensor([0.5], device=dev)
    v_scale = torch.tensor([0.25], device=dev)
    heads = torch.randn(m, hq, d, dtype=dt, device=dev)
    key = torch.randn(m, hkv, d, dtype=dt, device=dev)
    val = torch.randn(m, hkv, d, dtype=dt, device=dev)
    qkv = torch.randn(m, n, dtype=dt, device=dev)
    b8 = torch.randn(hidden, hidden, device=dev).to(torch.float8_e4m3fn)
    b8s = torch.full((hidden, hidden // 32), 127, dtype=torch.uint8, device=dev)
    qa = mxfuse.quantize_mxfp8(mxfuse.gemma_rmsnorm(x, nw))
    front_kw = dict(num_q_heads=hq, num_kv_heads=hkv, head_dim=d, rotary_dim=rd, output_gate=True)
    front_args = (x, res, nw, packed, scales, qw, kw, cos_sin, pos, slots, kc, vc, k_scale, v_scale)
    ws = mxfuse.attention_front_workspace(dev)
    ops = torch.ops.mxfuse

    linear = f"torch: F.linear bf16 [{m}x{hidden}] x [{n}x{hidden}]^T"
    cases = [
        # (what, call, baseline name or None)
        ("torch: x + residual", lambda: x + res, None),
        ("torch: F.rms_norm", lambda: F.rms_norm(x, (hidden,), nw, 1e-6), None),
        (linear, lambda: F.linear(x, w), None),
        ("gemma_rmsnorm", lambda: mxfuse.gemma_rmsnorm(x, nw), "torch: F.rms_norm"),
        ("gemma_fused_add_rmsnorm", lambda: mxfuse.gemma_fused_add_rmsnorm(x, res, nw), "torch: F.rms_norm"),
        ("gemma_fused_add_rmsnorm_mxfp8", lambda: mxfuse.gemma_fused_add_rmsnorm_mxfp8(x, res, nw),
         "torch: F.rms_norm"),
        ("mxfp8_quantize", lambda: mxfuse.mxfp8_quantize(x), "torch: F.rms_norm"),
        ("mxfp6_linear (wrapper)", lambda: mxfuse.mxfp6_linear(x, packed, scales), linear),
        ("mxfp6_linear (torch.ops)", lambda: ops.mxfp6_linear(x, packed, scales, None), linear),
        ("mxfp8_linear (QuantizedActivation)", lambda: mxfuse.mxfp8_linear(qa, b8, b8s, b_scale_layout="1x32"), linear),
        ("rotary_embedding_neox", lambda: mxfuse.rotary_embedding_neox(heads, pos, cos_sin, rd), None),
        ("reshape_and_cache_flash", lambda: mxfuse.reshape_and_cache_flash(key, val, kc, vc, slots, k_scale, v_scale),
         None),
        ("attention_front_check", lambda: ops.attention_front_check(*front_args, **front_kw), None),
        ("attention_front (fused, torch.ops)", lambda: ops.attention_front(*front_args, ws, **front_kw), None),
        ("attention_front (fused, wrapper)", lambda: mxfuse.attention_front(*front_args, **front_kw, fused=True),
         None),
        ("attention_front (three launches, wrapper)",
         lambda: mxfuse.attention_front(*front_args, **front_kw, fused=False), None),
        ("qk_norm_rope_cache", lambda: mxfuse.qk_norm_rope_cache(qkv, qw, kw, cos_sin, pos, slots, kc, vc, k_scale,
                                                                 v_scale, **front_kw), None),
        ("attention_front_unfused (check + 7 ops)", lambda: mxfuse.attention_front_unfused(*front_args, **front_kw),
         None),
    ]
    if not dev.startswith("cuda"):  # the one-launch kernel's CPU twin is the composition itself
        cases = [c for c in cases if "fused, " not in c[0]]
    for prefix in args.profile:
        for what, call, _ in cases:
            if what.startswith(prefix):
                for _ in range(8):
                    call()
                acts = [torch.profiler.ProfilerActivity.CPU]
                if dev.startswith("cuda"):  # adds the CUDA runtime calls (launches, attribute sets)
                    acts.append(torch.profiler.ProfilerActivity.CUDA)
                with torch.profiler.profile(activities=acts) as prof:
                    for _ in range(CALLS):
                        call()
                print(f"== host profile of {CALLS} calls: {what}")
                print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    times = {}
    for what, call, _ in cases:
        times[what] = host_us(call, dev)
        print(f"{what:48s} {times[what]:7.2f} us", flush=True)
    rows, table = [], []
    for what, _, base in cases:
        ratio = times[what] / times[base] if base else None
        rows.append({"op": what, "host_us": times[what], "baseline": base, "x_baseline": ratio})
        table.append([what, times[what], base or "", "" if ratio is None else ratio])
    env = harness.environment() if dev.startswith("cuda") else {"device": "CPU", "torch": torch.__version__}
    md = (f"# Host cost of one eager call, {env['device']}\n\n"
          f"Command: `{harness.command()}`. Median over {ROUNDS} rounds of the host time of {CALLS} "
          f"back-to-back eager calls (no sync inside a round), per call, at M = {m} on Qwen3-Next's "
          f"full-attention front ({hidden} -> {n}, q{hq} kv{hkv} d{d}). This is CPU time in the issuing "
          f"thread (wrapper, dispatcher, checks, allocation, launch); the GPU tables do not include it "
          f"(a CUDA graph replays without the host).\n\n"
          + harness.md_table(["call", "host us / call", "torch baseline", "x baseline"], table))
    harness.write_results(args.out, {"env": env, "calls": CALLS, "rounds": ROUNDS, "rows": rows}, md)
    print(md)


if __name__ == "__main__":
    main()
