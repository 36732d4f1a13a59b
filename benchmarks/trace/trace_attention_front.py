"""Per-CTA phases of the fused attention front, from a front trace build
(make_front_trace_build.py; this script fails on a normal build, which lacks the hooks).

For each shape and M: one call alone (after a synchronize) and the last call of a CUDA graph of 32
back-to-back calls, `on`. Times are microseconds after the first CTA's start, as
min / median / p90 / max over the CTAs:

  wait      release of the dependency wait          ticket    the CTA has its ticket
  rows      the block's rows are all in y           proj      end of the projection
  arrive    arrival counted (split 0)               end       end of the CTA (split 0)
  produce   ticket -> its rows normed (producing CTAs only)
  duty      arrival -> end, for CTAs with head duties

    python benchmarks/trace/trace_attention_front.py [--ms 1 8] [--out front_trace.json]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from make_front_trace_build import FIELDS, MAX_CTAS  # noqa: E402

import mxfuse  # noqa: E402

# (hidden, q heads, kv heads, head_dim, rotary_dim, output gate), as bench_attention_front.py.
SHAPES = [(2048, 16, 2, 256, 64, True), (6144, 32, 4, 128, 64, True)]
PHASES = {"wait": 2, "ticket": 3, "rows": 6, "proj": 7, "arrive": 8, "end": 10}


def stats(v: list[float]) -> list[float]:
    v = sorted(v)
    return [v[0], v[len(v) // 2], v[min(len(v) - 1, int(0.9 * len(v)))], v[-1]] if v else []


def summarize(rec: list[int], rows: int) -> dict:
    ctas = [rec[i * FIELDS:(i + 1) * FIELDS] for i in range(MAX_CTAS) if rec[i * FIELDS + 1]]
    t0 = min(c[1] for c in ctas)
    us = lambda t: (t - t0) / 1e3  # noqa: E731
    out = {"ctas": len(ctas)}
    for name, i in PHASES.items():
        out[name] = stats([us(c[i]) for c in ctas if c[i]])
    out["produce"] = stats([(c[5] - c[3]) / 1e3 for c in ctas if c[5] and c[4] < rows])
    out["duty"] = stats([(c[10] - c[8]) / 1e3 for c in ctas if c[9] > 0 and c[10]])
    return out


def line(label: str, s: dict) -> str:
    return label + " | " + " | ".join(
        f"{k} {'/'.join(f'{x:.2f}' for x in v)}" for k, v in s.items() if isinstance(v, list) and v)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ms", type=int, nargs="*", default=[1, 8])
    ap.add_argument("--out", default="front_trace.json")
    args = ap.parse_args()
    lib = ctypes.CDLL(mxfuse._C.__file__)
    buf = (ctypes.c_ulonglong * (MAX_CTAS * FIELDS))()

    def traced(call) -> list[int]:
        torch.cuda.synchronize()
        assert lib.mxf_front_trace_clear() == 0, "not a front trace build (make_front_trace_build.py)"
        call()
        torch.cuda.synchronize()
        assert lib.mxf_front_trace_dump(buf, MAX_CTAS * FIELDS) == 0
        return list(buf)

    torch.manual_seed(0)
    dev, dt, sets = "cuda", torch.bfloat16, harness.INPUT_SETS
    mxfuse.set_pdl("on")
    results = {}
    for hidden, hq, hkv, d, rd, gate in SHAPES:
        n = hq * d * (2 if gate else 1) + 2 * hkv * d
        kw = dict(num_q_heads=hq, num_kv_heads=hkv, head_dim=d, rotary_dim=rd, output_gate=gate)
        packs = [mxfuse.mxfp6_pack(torch.randn(n, hidden, dtype=dt, device=dev) * hidden ** -0.5)
                 for _ in range(sets)]
        nw = torch.randn(hidden, dtype=dt, device=dev) * 0.1
        qw, kwt = (torch.randn(d, dtype=dt, device=dev) * 0.1 for _ in range(2))
        ang = torch.arange(4096, device=dev, dtype=torch.float32)[:, None] * torch.rand(rd // 2, device=dev)
        cos_sin = torch.cat([ang.cos(), ang.sin()], dim=1)
        kc = torch.zeros(64, 16, hkv, d, device=dev, dtype=torch.uint8).view(torch.float8_e4m3fn)
        vc = torch.zeros_like(kc)
        scale = torch.tensor([0.5], device=dev)
        ws = mxfuse.attention_front_workspace(dev)
        for m in args.ms:
            xs = [torch.randn(m, hidden, dtype=dt, device=dev) for _ in range(sets)]
            rs = [torch.randn(m, hidden, dtype=dt, device=dev) for _ in range(sets)]
            pos = torch.randint(0, 4096, (m,), device=dev)
            slots = torch.randperm(64 * 16, device=dev)[:m]

            def fused(i: int) -> None:
                mxfuse.attention_front(xs[i], rs[i], nw, *packs[i], qw, kwt, cos_sin, pos, slots, kc, vc,
                                       scale, scale, **kw, workspace=ws, fused=True)

            key = f"{hidden}->{n} m={m}"
            r = {"graph_us": harness.graph_time_us(fused)}  # untraced (captured before the switch)
            os.environ["MXF_FRONT_TRACE"] = "1"
            for i in range(4):
                fused(i)
            r["alone"] = summarize(traced(lambda: fused(5)), min(m, 8 if m <= 8 else 16))
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for i in range(32):
                    fused(i % sets)
            g.replay()
            r["graph_last"] = summarize(traced(g.replay), min(m, 8 if m <= 8 else 16))
            del g
            os.environ["MXF_FRONT_TRACE"] = "0"
            results[key] = r
            print(f"{key}: graph {r['graph_us']:.2f} us", flush=True)
            print(line("  alone", r["alone"]), flush=True)
            print(line("  graph-last", r["graph_last"]), flush=True)
        del packs
        torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
