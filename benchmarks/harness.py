"""Shared GPU timing harness (shared/DESIGN.md, "Measuring").

Each measurement captures one CUDA graph of 128 back-to-back calls that cycle through 16 input
sets (so weights and activations come from HBM, not L2), replays it 5 times and keeps the best
replay; the per-call time is that replay's time / 128. Copy bandwidth is measured the same way in
the same process, so every "% of copy" and every speedup is a ratio from one run.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import torch

CALLS_PER_GRAPH = 128
INPUT_SETS = 16
REPLAYS = 5


def graph_time_us(call: Callable[[int], object], calls: int = CALLS_PER_GRAPH,
                  replays: int = REPLAYS) -> float:
    """Best-of-`replays` time per call (us) of a graph of `calls` launches of call(i % 16)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(INPUT_SETS):  # warm up: allocator pools, lazy init, autotuning
            call(i)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            call(i % INPUT_SETS)
    graph.replay()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) * 1e3 / calls)
    del graph
    return best


def graph_time_us_per_pdl_mode(call: Callable[[int], object], modes) -> dict[str, float]:
    """graph_time_us of `call` with each `mxfuse.set_pdl` mode in turn (captured in that mode);
    the mode in force before is restored."""
    import mxfuse

    before = mxfuse.pdl_mode()
    try:
        times = {}
        for mode in modes:
            mxfuse.set_pdl(mode)
            times[mode] = graph_time_us(call)
        return times
    finally:
        mxfuse.set_pdl(before)


@contextmanager
def env_set(var: str, value: str | None) -> Iterator[None]:
    """`var` set to `value` inside the block (left alone when value is None), removed after it:
    the benchmark-only launch knobs, which the ops read at each launch."""
    if value is not None:
        os.environ[var] = value
    try:
        yield
    finally:
        if value is not None:
            os.environ.pop(var, None)


def parse_shapes(shapes: list[str]) -> list[tuple[int, int]]:
    """"N x K" strings as given on a command line ("2560x6144") -> [(2560, 6144), ...]."""
    return [tuple(int(v) for v in shape.split("x")) for shape in shapes]


def mxfp8_sets(rows: int, k: int, scale: float = 1.0):
    """INPUT_SETS random [rows, k] operands on the GPU, MXFP8-quantized (codes, scales), with their
    bf16 dequantizations (the cuBLAS baseline's operands)."""
    import mxfuse

    qs = [mxfuse.mxfp8_quantize(torch.randn(rows, k, device="cuda") * scale) for _ in range(INPUT_SETS)]
    return qs, [mxfuse.mxfp8_dequantize(c, s, torch.bfloat16) for c, s in qs]


def ab_env_parser(default_shapes: list[str]):
    """Arguments of an A/B under an environment knob read at each launch (ab_*_env.py)."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--var", required=True)
    ap.add_argument("--values", nargs="+", required=True)
    ap.add_argument("--shapes", nargs="+", default=default_shapes)
    ap.add_argument("--ms", type=int, nargs="+", default=[1, 8, 16])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None)
    return ap


def best_under_env(var: str, values: list[str], rounds: int, call: Callable[[int], object]) -> dict[str, float]:
    """graph_time_us of `call` with `var` set to each value, rounds alternating, the best of each
    kept; `var` is left at values[0]."""
    best = {v: float("inf") for v in values}
    for _ in range(rounds):
        for v in values:
            os.environ[var] = v
            best[v] = min(best[v], graph_time_us(call))
    os.environ[var] = values[0]
    return best


def ab_line(var: str, values: list[str], best: dict[str, float], dense: float) -> tuple[dict, str]:
    """The record fields and the printed comparison of one A/B row against bf16 F.linear."""
    fields = {"bf16_us": dense, **{f"{var}={v}": best[v] for v in values}}
    return fields, f"bf16 {dense:7.2f} | " + "  ".join(f"{v}: {best[v]:7.2f} ({dense / best[v]:.2f}x)" for v in values)


def copy_bandwidth_gbs(nbytes: int = 1 << 31) -> float:
    """Device-to-device copy bandwidth (bytes read + written per second), graph-timed: the best of
    a copy_ (inside a graph it may run on a copy engine) and an SM kernel doing the same traffic."""
    n = nbytes // 4
    srcs = [torch.empty(n, dtype=torch.float32, device="cuda").uniform_() for _ in range(2)]
    dsts = [torch.empty_like(srcs[0]) for _ in range(2)]
    us_copy = graph_time_us(lambda i: dsts[i % 2].copy_(srcs[i % 2]), calls=8)
    us_kernel = graph_time_us(lambda i: torch.neg(srcs[i % 2], out=dsts[i % 2]), calls=8)
    return 2 * nbytes / (min(us_copy, us_kernel) * 1e-6) / 1e9


@dataclass
class Row:
    name: str
    params: dict
    us: float
    bytes: int
    gbs: float = 0.0
    pct_copy: float = 0.0
    extra: dict = field(default_factory=dict)


def make_row(name: str, params: dict, us: float, nbytes: int, copy_gbs: float, **extra) -> Row:
    gbs = nbytes / (us * 1e-6) / 1e9
    return Row(name, params, us, nbytes, gbs, 100.0 * gbs / copy_gbs, extra)


def environment() -> dict:
    props = torch.cuda.get_device_properties(0)
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001  (informational only)
        smi = ""
    return {"device": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
            "cuda": torch.version.cuda, "python": platform.python_version(), "nvidia_smi": smi,
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}


def command() -> str:
    """The benchmark's command line as run, for the markdown record: ``python <script> <args>``,
    the script relative to the repository and ``--out`` left out (where the results went)."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args, skip = [], False
    for a in sys.argv[1:]:
        if skip:
            skip = False
        elif a == "--out":
            skip = True
        elif not a.startswith("--out="):
            args.append(a)
    return " ".join(["python", os.path.relpath(os.path.abspath(sys.argv[0]), repo)] + args)


def write_json(path: str, payload: dict) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(payload, f, indent=1, default=lambda o: asdict(o) if isinstance(o, Row) else str(o))


def write_results(path_base: str, payload: dict, markdown: str) -> None:
    write_json(path_base + ".json", payload)
    with open(path_base + ".md", "w") as f:
        f.write(markdown)


def write_record(path: str, **payload) -> None:
    """An experiment's JSON record: the command that made it and the environment, then payload."""
    write_json(path, {"command": command(), "env": environment(), **payload})


def md_table(header: list[str], rows: list[list[object]]) -> str:
    def fmt(v):
        return f"{v:.2f}" if isinstance(v, float) else str(v)
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(out) + "\n"
