"""The measurement tools stay in step with the kernel sources they patch.

benchmarks/trace/make_trace_build.py edits csrc/kernels/mxfp6_linear.cuh at fixed anchors and
merges the per-entry units (mxfp6_{linear,front}_*.cu) into one; make_front_trace_build.py edits
the params, the kernel header and the launcher of the attention front. A kernel change that moves an
anchor, or an entry unit added or renamed, would only show when someone next ran the tool on the
GPU machine (one anchor had gone stale for five sessions before this test). These checks run on
the CPU, without writing anything.
"""

from __future__ import annotations

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "trace"))
import make_trace_build as trace  # noqa: E402


def read(rel: str) -> str:
    with open(os.path.join(ROOT, rel)) as f:
        return f.read()


def test_every_trace_anchor_occurs_once_in_the_kernel_header():
    src = read(trace.HEADER_FILE)
    for old, _new in trace.EDITS:
        assert src.count(old) == 1, f"anchor found {src.count(old)} times:\n{old}"


def test_every_front_trace_anchor_occurs_once_in_its_file():
    import make_front_trace_build as front

    for path, old, _new in front.EDITS:
        src = read(path)
        assert src.count(old) == 1, f"anchor found {src.count(old)} times in {path}:\n{old}"


def test_trace_entries_are_the_entry_units_and_declarations():
    units = sorted(
        f for f in os.listdir(os.path.join(ROOT, trace.KERNELS))
        if re.fullmatch(r"mxfp6_(linear|front)_(bf16|fp16)_m(8|16)\.cu", f)
    )
    assert units == sorted(f"mxfp6_{name}.cu" for name, *_ in trace.ENTRIES)
    decls = read(f"{trace.KERNELS}/mxfp6_entries.h")
    for name, dtype, nb, params in trace.ENTRIES:
        assert f"error_t {name}(const {params}& p, stream_t stream);" in decls
        unit = read(f"{trace.KERNELS}/mxfp6_{name}.cu")
        assert f"MXF_FP6_DEFINE_ENTRY({name}, {dtype}, {nb}, {params})" in unit, unit


def test_sanitize_cases_run_with_a_cpu_stand_in():
    """tests/sanitize/cases.py runs only under compute-sanitizer on a GPU node. Here its norm and
    MXFP8 GEMM families run in a fresh interpreter with `.cuda()` as the identity (CPU against CPU),
    so a renamed op or argument shows up in CI and not first on the GPU machine."""
    import subprocess

    code = (
        "import sys, torch\n"
        "torch.Tensor.cuda = lambda self, *a, **k: self\n"
        "torch.cuda.get_device_capability = lambda *a: (9, 0)\n"
        f"sys.path.insert(0, {os.path.join(ROOT, 'tests', 'sanitize')!r})\n"
        "import cases\n"
        "cases.norms([torch.bfloat16], [1])\n"
        "cases.fp8_mm([1, 3], True)\n"
        "print('checks', cases.CASES)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert int(r.stdout.split("checks")[-1]) > 40, r.stdout
