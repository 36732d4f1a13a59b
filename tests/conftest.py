"""Shared fixtures and helpers of the mxfuse pytest suite.

Three kinds of expected values appear in the tests:
- ``mxfuse.reference`` (pure PyTorch, written from SPEC.md) for the ops;
- the exact oracles below (numpy float64 / Fraction, written from SPEC §1-§2 with methods unlike
  both the reference and csrc/core) for the element and scale codecs; the reference is checked
  against them too;
- the CPU op, for the GPU ops (fully bitwise, NaN payloads included).

GPU cases are parametrized with device "cuda" and skip with a reason where CUDA is absent; they
run unchanged on a GPU machine.
"""

from __future__ import annotations

import contextlib
import math
from fractions import Fraction

import mxfuse  # noqa: F401  (registers torch.ops.mxfuse)
import numpy as np
import pytest
import torch
from mxfuse import reference as ref

OPS = torch.ops.mxfuse
HAS_CUDA = torch.cuda.is_available()
NO_CUDA_REASON = "no CUDA device here (the cuda cases run on the GPU machine)"
HAS_MXFP6 = hasattr(OPS, "mxfp6_pack")
NO_MXFP6_REASON = "mxfp6 ops not built yet"

requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA_REASON)
requires_mxfp6 = pytest.mark.skipif(not HAS_MXFP6, reason=NO_MXFP6_REASON)

DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]
ACT_DTYPES = [torch.bfloat16, torch.float16]
DTYPE_IDS = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


def dtype_id(d: torch.dtype) -> str:
    return DTYPE_IDS.get(d, str(d))


# --- debug poison --------------------------------------------------------------------------------


@contextlib.contextmanager
def debug_poison(byte: int):
    """Every output an op allocates is filled with ``byte`` before its kernel runs."""
    OPS._set_debug_poison(byte)
    try:
        yield
    finally:
        OPS._set_debug_poison(-1)


@pytest.fixture(autouse=True)
def _poison_off():
    OPS._set_debug_poison(-1)
    yield
    OPS._set_debug_poison(-1)


POISON_BYTES = (0x00, 0xFF)


@pytest.fixture
def restore_pdl():
    """The launch mode (mxfuse.set_pdl: the MXFP6 linear and the norm family) in force before the
    test, restored after it."""
    before = OPS._get_pdl()
    yield
    OPS._set_pdl(before)


def run_poisoned(fn):
    """Run ``fn()`` (which must build fresh inputs for in-place args) under each poison byte and
    require bitwise-identical outputs; returns the outputs of the last run (a tuple of tensors)."""
    results = []
    for byte in POISON_BYTES:
        with debug_poison(byte):
            out = fn()
        out = out if isinstance(out, (tuple, list)) else (out,)
        results.append(tuple(t.detach().cpu().clone() for t in out))
    for a, b in zip(results[0], results[1]):
        assert_bitwise_equal(
            a,
            b,
            "outputs differ between poison bytes 0x00 and 0xFF (an output element is not written)",
        )
    return results[-1]


def capture_graph(fn):
    """(graph, outputs) of ``fn()`` captured into a CUDA graph after one warm-up run on a side
    stream (torch.cuda.graph's recipe: the warm-up keeps lazy initialisation out of the capture)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


# --- comparisons ---------------------------------------------------------------------------------

_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def int_view(t: torch.Tensor) -> torch.Tensor:
    return t.view(_INT_VIEW[t.element_size()])


def _describe_mismatch(a: torch.Tensor, b: torch.Tensor, ne: torch.Tensor, what: str) -> str:
    idx = ne.nonzero()[:8].tolist()
    ai, bi = int_view(a), int_view(b)
    rows = []
    for i in idx:
        i = tuple(i)
        va = a[i].float().item() if a.is_floating_point() else a[i].item()
        vb = b[i].float().item() if b.is_floating_point() else b[i].item()
        rows.append(
            f"  at {i}: got {va!r} (bits {ai[i].item() & 0xFFFFFFFF:#x}), "
            f"want {vb!r} (bits {bi[i].item() & 0xFFFFFFFF:#x})"
        )
    return f"{what}: {int(ne.sum())} of {ne.numel()} elements differ\n" + "\n".join(rows)


def assert_bitwise_equal(got: torch.Tensor, want: torch.Tensor, what: str = "tensors") -> None:
    """Exact equality of dtype, shape and every bit (NaN payloads included)."""
    got, want = got.detach().cpu(), want.detach().cpu()
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    gi, wi = int_view(got.contiguous()), int_view(want.contiguous())
    if not torch.equal(gi, wi):
        raise AssertionError(
            _describe_mismatch(got.contiguous(), want.contiguous(), gi != wi, what)
        )


def assert_equal_nan_by_position(
    got: torch.Tensor, want: torch.Tensor, what: str = "tensors"
) -> None:
    """Float tensors: NaN at the same positions (any payload), every other element bitwise equal.

    Used against the torch reference only: torch's own float->bf16/fp16 conversions produce
    different NaN payloads on its vectorized and scalar paths, and SPEC §1 fixes only that NaN
    stays NaN. Integer / fp8 tensors are compared fully bitwise.
    """
    if not got.is_floating_point() or got.element_size() == 1:
        assert_bitwise_equal(got, want, what)
        return
    got, want = got.detach().cpu().contiguous(), want.detach().cpu().contiguous()
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    gn, wn = torch.isnan(got), torch.isnan(want)
    if not torch.equal(gn, wn):
        raise AssertionError(_describe_mismatch(got, want, gn != wn, what + " (NaN positions)"))
    ne = (int_view(got) != int_view(want)) & ~gn
    if ne.any():
        raise AssertionError(_describe_mismatch(got, want, ne, what))


# --- inputs --------------------------------------------------------------------------------------


def run_with_env(code: str, var: str, value: str):
    """``python -c code`` in a fresh interpreter with ``var=value`` (settings read once per process
    from the environment); returns the CompletedProcess (text stdout and stderr)."""
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", code], env={**os.environ, var: value}, capture_output=True,
                          text=True, timeout=120)


def assert_env_setting(getter: str, var: str, value: str, want: str | None, error: str) -> None:
    """A process setting whose initial value comes from ``var``: in a fresh interpreter with
    ``var=value``, ``import mxfuse; print(mxfuse.<getter>())`` prints ``want``, or, for
    ``want=None``, fails with ``error`` and the bad value quoted in the message."""
    r = run_with_env(f"import mxfuse; print(mxfuse.{getter}())", var, value)
    if want is None:
        assert r.returncode != 0
        assert error in r.stderr and f"got '{value}'" in r.stderr
    else:
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == want


def launched_kernels(call, contains: str = ""):
    """Runs call() under the profiler: its result, and the names of the GPU kernels it launched
    that contain `contains`."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        out = call()
        torch.cuda.synchronize()
    return out, [e.name for e in prof.events() if contains in e.name]


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(shape, dtype, seed: int, scale: float = 1.0) -> torch.Tensor:
    """Deterministic CPU normal values rounded to ``dtype``."""
    return (torch.randn(shape, generator=generator(seed)) * scale).to(dtype)


def fp6_weights(n: int, k: int, dt: torch.dtype, seed: int) -> torch.Tensor:
    """A CPU MXFP6 test weight [n, k]: rows of small and of large blocks, so that the linear takes
    both its folded-scale and its per-group-scale paths (scale bytes above 128 for the large ones)."""
    w = randn((n, k), dt, seed, 0.05)
    w[n // 2:n // 2 + 16, : k // 2] *= 4096
    return w


def make_norm_inputs(
    m: int, n: int, dtype: torch.dtype, wdtype: torch.dtype, seed: int = 0, x_scale: float = 1.0
):
    """x, residual [m, n] in dtype and weight [n] in wdtype, on the CPU."""
    x = randn((m, n), dtype, seed, x_scale)
    r = randn((m, n), dtype, seed + 1, 2.0)
    w = randn((n,), wdtype, seed + 2, 0.5)
    return x, r, w


# --- calling the norm family through one interface -----------------------------------------------

NORM_KINDS = ("rmsnorm", "add_rmsnorm", "rmsnorm_mxfp8", "add_rmsnorm_mxfp8")


def kind_has_residual(kind: str) -> bool:
    return kind.startswith("add_")


def kind_is_mx(kind: str) -> bool:
    return kind.endswith("_mxfp8")


def call_norm(
    impl: str, kind: str, x, residual, weight, eps=1e-6, weight_offset=1.0, scale_rule="ceil"
) -> dict:
    """Run one of the four norm ops (impl "op": torch.ops.mxfuse, "ref": mxfuse.reference).

    ``residual`` is cloned first (the caller's copy is untouched); the result dict holds "y" or
    "codes"/"scales", plus "residual" (the updated clone) for the fused-add kinds.
    """
    lib = OPS if impl == "op" else ref
    out = {}
    if kind_has_residual(kind):
        r = residual.clone()
        if kind_is_mx(kind):
            out["codes"], out["scales"] = lib.gemma_fused_add_rmsnorm_mxfp8(
                x, r, weight, eps, weight_offset, scale_rule
            )
        else:
            out["y"] = lib.gemma_fused_add_rmsnorm(x, r, weight, eps, weight_offset)
        out["residual"] = r
    elif kind_is_mx(kind):
        out["codes"], out["scales"] = lib.gemma_rmsnorm_mxfp8(
            x, weight, eps, weight_offset, scale_rule
        )
    else:
        out["y"] = lib.gemma_rmsnorm(x, weight, eps, weight_offset)
    return out


def assert_outputs_match(got: dict, want: dict, what: str, vs_reference: bool) -> None:
    assert got.keys() == want.keys()
    for key in sorted(got):
        if vs_reference:
            assert_equal_nan_by_position(got[key], want[key], f"{what}: {key}")
        else:
            assert_bitwise_equal(got[key], want[key], f"{what}: {key}")


# --- exact oracles of SPEC §1-§2 (numpy float64 / Fraction) --------------------------------------


def minifloat_value(code: int, ebits: int, mbits: int, bias: int) -> Fraction:
    """Exact value of a sign/exponent/mantissa code with subnormals (no special values)."""
    sign = -1 if (code >> (ebits + mbits)) & 1 else 1
    e = (code >> mbits) & ((1 << ebits) - 1)
    m = code & ((1 << mbits) - 1)
    if e == 0:
        return sign * Fraction(m, 1 << mbits) * Fraction(2) ** (1 - bias)
    return sign * (1 + Fraction(m, 1 << mbits)) * Fraction(2) ** (e - bias)


def e4m3_oracle_value(code: int) -> Fraction | None:
    """SPEC §1 E4M3 ("e4m3fn"): bias 7, no Inf, NaN = 0x7F/0xFF (returned as None)."""
    return None if (code & 0x7F) == 0x7F else minifloat_value(code, 4, 3, 7)


def e2m3_oracle_value(code: int) -> Fraction:
    """SPEC §1 E2M3: bias 1, no specials, 6-bit codes."""
    return minifloat_value(code & 0x3F, 2, 3, 1)


# Non-negative finite magnitudes by code, ascending (codes 0..0x7E and 0..0x1F).
E4M3_MAGS = np.array([float(e4m3_oracle_value(c)) for c in range(0x7F)], dtype=np.float64)
E2M3_MAGS = np.array([float(e2m3_oracle_value(c)) for c in range(0x20)], dtype=np.float64)
assert np.all(np.diff(E4M3_MAGS) > 0) and E4M3_MAGS[-1] == 448.0
assert np.all(np.diff(E2M3_MAGS) > 0) and E2M3_MAGS[-1] == 7.5

FMT = {
    "e4m3": dict(mags=E4M3_MAGS, sign=0x80, vmax=448.0, emax=8),
    "e2m3": dict(mags=E2M3_MAGS, sign=0x20, vmax=7.5, emax=2),
}


def oracle_encode(a: np.ndarray, fmt: str) -> np.ndarray:
    """Finite float64 values (exact) -> codes: nearest magnitude, ties to the even code (decided by
    exact comparison with the float64 midpoints), saturating; the sign bit copied from ``a``."""
    mags, sign = FMT[fmt]["mags"], FMT[fmt]["sign"]
    mids = (mags[:-1] + mags[1:]) / 2  # exact: at most 5 significant bits
    mag = np.abs(a)
    i = np.searchsorted(mids, mag, side="left")  # mids[i-1] < mag <= mids[i]
    tie = np.zeros(mag.shape, dtype=bool)
    inside = i < len(mids)
    tie[inside] = mag[inside] == mids[i[inside]]
    code = np.where(tie & (i % 2 == 1), i + 1, i)
    return (code | np.where(np.signbit(a), sign, 0)).astype(np.int64)


def oracle_scale_byte(amax: np.ndarray, rule: str, fmt: str) -> np.ndarray:
    """SPEC §2 scale byte of blocks with the given amax (float64; NaN/Inf allowed), by search.

    "ceil": the smallest k with max(amax, 2^-126) <= Vmax * 2^(k-127); "floor": the largest k with
    2^(k-127) * 2^emax <= max(amax, 2^-126); then clamp to [0, 254]; 0xFF for non-finite amax.
    """
    vmax, emax = FMT[fmt]["vmax"], FMT[fmt]["emax"]
    finite = np.isfinite(amax)
    a = np.maximum(np.where(finite, amax, 1.0), 2.0**-126)
    _, e = np.frexp(a)  # a = f * 2^e, f in [0.5, 1): floor(log2 a) = e - 1
    ks = (e - 1 - emax + 127)[:, None] + np.arange(-3, 4)[None, :]
    if rule == "ceil":
        ok = a[:, None] <= np.ldexp(vmax, ks - 127)
        assert ok[:, -1].all() and not ok[:, 0].any()
        k = ks[np.arange(len(a)), ok.argmax(axis=1)]
    elif rule == "floor":
        ok = np.ldexp(1.0, ks - 127 + emax) <= a[:, None]
        assert ok[:, 0].all() and not ok[:, -1].all()
        last = ok.shape[1] - 1 - ok[:, ::-1].argmax(axis=1)
        k = ks[np.arange(len(a)), last]
    else:
        raise ValueError(rule)
    return np.where(finite, np.clip(k, 0, 254), 0xFF).astype(np.int64)


def oracle_block_quantize(values: np.ndarray, rule: str, fmt: str = "e4m3"):
    """Exact SPEC §2 block quantization of float64 values [..., K] (K % 32 == 0).

    Returns (codes int64 [..., K], scale bytes int64 [..., K/32]). A block holding NaN/Inf gets
    0xFF and (E4M3) every code 0x7F.
    """
    shape = values.shape
    blocks = values.reshape(-1, 32)
    finite = np.isfinite(blocks).all(axis=1)
    amax = np.where(finite, np.abs(np.where(np.isfinite(blocks), blocks, 0.0)).max(axis=1), np.inf)
    sb = oracle_scale_byte(amax, rule, fmt)
    scaled = np.ldexp(np.where(finite[:, None], blocks, 0.0), (127 - np.minimum(sb, 254))[:, None])
    codes = oracle_encode(scaled, fmt)
    if fmt == "e4m3":
        codes[~finite] = 0x7F
    return codes.reshape(shape), sb.reshape(*shape[:-1], shape[-1] // 32)


def oracle_decode(codes: np.ndarray, scale_bytes: np.ndarray, fmt: str = "e4m3") -> np.ndarray:
    """Exact float64 values of codes [..., K] with scale bytes [..., K/32]; NaN where undefined."""
    if fmt == "e4m3":
        table = np.array(
            [
                np.nan
                if e4m3_oracle_value(c) is None
                else math.copysign(float(e4m3_oracle_value(c)), -(c & 0x80))
                for c in range(256)
            ]
        )
    else:  # copysign keeps the sign of the -0 codes
        table = np.array(
            [math.copysign(float(e2m3_oracle_value(c)), -(c & 0x20)) for c in range(64)]
        )
    vals = table[codes]
    sb = np.repeat(scale_bytes, 32, axis=-1)
    out = np.ldexp(vals, np.where(sb == 0xFF, 0, sb - 127))
    return np.where(sb == 0xFF, np.nan, out)


def round_exact_f64(values: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """Round float64 values that are exact in fp32 (<= 24 significant bits, in fp32's exponent
    range or overflowing it) once to ``dtype``. float64 -> fp32 is then exact (or Inf), so the
    following fp32 -> dtype conversion by torch is the only rounding."""
    with np.errstate(over="ignore"):
        f32 = values.astype(np.float32)
    finite = np.isfinite(values) & np.isfinite(f32)
    assert np.array_equal(f32[finite].astype(np.float64), values[finite]), "value not exact in fp32"
    return torch.from_numpy(f32).to(dtype)


def to_f64(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().to(torch.float64).numpy()


def all_bit_patterns(dtype: torch.dtype) -> torch.Tensor:
    """All 65536 values of a 16-bit float dtype, in bit-pattern order."""
    return torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)


def oracle_fp6_pack(codes: np.ndarray) -> np.ndarray:
    """SPEC §4 packing of E2M3 codes [N, K] with Python integers: code i of a group at bits
    [6i, 6i+5] of a 192-bit little-endian word; group (r, g) of tile (tn, tk) at byte
    1536 * (tn * (K/128) + tk) + 24 * (r * 4 + g). Returns uint8 [N/16, K/128, 1536]."""
    n, k = codes.shape
    flat = bytearray(n * k * 6 // 8)
    for row in range(n):
        for g in range(k // 32):
            word = 0
            for i, c in enumerate(codes[row, 32 * g : 32 * g + 32].tolist()):
                word |= (int(c) & 0x3F) << (6 * i)
            tn, r = divmod(row, 16)
            tk, gg = divmod(g, 4)
            off = 1536 * (tn * (k // 128) + tk) + 24 * (r * 4 + gg)
            flat[off : off + 24] = word.to_bytes(24, "little")
    return np.frombuffer(bytes(flat), dtype=np.uint8).reshape(n // 16, k // 128, 1536).copy()


def boundary_blocks(dtype: torch.dtype) -> tuple[torch.Tensor, np.ndarray]:
    """Blocks that sit on the edges of the scale rules and the element encoding, each with its
    hand-derived (SPEC §2) ceil and floor scale bytes where they are simple to state."""

    def nxt(v: float, toward: float) -> float:
        """The dtype neighbour of the (positive, representable) v toward ``toward``."""
        t = torch.tensor(v, dtype=dtype)
        if dtype == torch.float32:
            return torch.nextafter(t, torch.tensor(toward)).item()
        return _next16(t, toward > v).item()

    rows, want = [], []
    fin = torch.finfo(dtype)

    def add(amax: float, others=(), ceil=None, floor=None):
        block = [amax, *others]
        block += [0.0] * (32 - len(block))
        rows.append(block)
        want.append((ceil, floor))

    for j in range(-20, 17):
        a = 448.0 * 2.0**j
        if a > fin.max or a < fin.tiny:
            continue
        add(a, (a / 2, -a / 3, a * 2.0**-9, a * 2.0**-10), 127 + j, 127 + j)  # 1.75 exactly
        add(nxt(a, np.inf), (-a,), 128 + j, 127 + j)  # mantissa just above 1.75
        add(-nxt(a, 0.0), (a / 7,), 127 + j, 127 + j)  # just below
        add(2.0 ** (j + 8), (), 127 + j, 127 + j)  # m = 1
        add(nxt(2.0 ** (j + 9), 0.0), (), 128 + j, 127 + j)  # m just below 2
    add(fin.max, (fin.min,), None, None)
    add(fin.tiny, (-fin.tiny / 2,), None, None)
    if dtype == torch.float32:
        for a in (2.0**-126, 2.0**-127, 2.0**-149, 1e-40, 1.0e-45):
            add(a, (-a,), 0, 0)  # FLT_MIN and subnormal amax clamp to FLT_MIN
        add(448.0 * 2.0**100, (1.0,), 227, 227)
        add(1.9 * 2.0**127, (), 247, 246)
    smallest_sub = fin.tiny * fin.eps
    add(smallest_sub, (-smallest_sub,), None, None)
    add(0.0, (), 0, 0)  # all zero
    rows.append([-0.0] * 32)  # all -0: codes keep the sign
    want.append((0, 0))
    rows.append([0.0, -0.0] * 16)
    want.append((0, 0))
    for special in (float("nan"), float("inf"), float("-inf")):
        add(1.0, (special, -3.0), 255, 255)
        add(special, (), 255, 255)
    # element ties: midpoints between consecutive E4M3 magnitudes next to an anchor of 448
    mids = ((E4M3_MAGS[:-1] + E4M3_MAGS[1:]) / 2).tolist()
    for i in range(0, len(mids), 31):
        add(448.0, mids[i : i + 31], 127, 127)
        add(-448.0, [-m for m in mids[i : i + 31]], 127, 127)
    # floor rule: scaled values past 448 saturate; between 448 and 480 and at 464 (the tie)
    add(464.0, (-480.0, 500.0, 452.0, 1.0), 128, 127)
    t = torch.tensor(rows, dtype=torch.float64).to(dtype)
    return t, np.array([(-1 if c is None else c, -1 if f is None else f) for c, f in want])


def _next16(t: torch.Tensor, up: bool) -> torch.Tensor:
    """Neighbour of a positive bf16/fp16 value by bit pattern."""
    bits = t.view(torch.int16).item() + (1 if up else -1)
    return torch.tensor(bits, dtype=torch.int16).view(t.dtype)


# --- adversarial norm inputs ---------------------------------------------------------------------

ADV_ROWS = [
    "random",
    "zero",
    "half_zero",
    "zero_block",
    "block_dominated",
    "single_element",
    "nan",
    "pos_inf",
    "neg_inf",
    "huge",
    "subnormal",
    "alternating",
    "neg_zero",
    "cancel",
    "residual_tie",
    "mixed_scales",
]


def adversarial_inputs(n: int, dtype, wdtype, weight_offset: float):
    """Rows named by ADV_ROWS (x, residual [R, n]) and a weight [n] whose block 0 has
    (w + weight_offset) = 2^-8 (a tiny block) and whose block 1 has 3000 (scales far above 1)."""
    assert n >= 256
    g = torch.Generator().manual_seed(n)
    fin = torch.finfo(dtype)
    rows, res = [], []

    def rn(scale=1.0):
        return torch.randn(n, generator=g) * scale

    zeros = torch.zeros(n)
    for name in ADV_ROWS:
        x, r = rn(), torch.zeros(n)
        if name == "random":
            r = rn(0.5)
        elif name == "zero":
            x = zeros.clone()
        elif name == "half_zero":
            x[: n // 2] = 0
        elif name == "zero_block":
            x[64:96] = 0
        elif name == "block_dominated":
            x = rn(1e-3)
            x[96:128] = rn(1e3)[:32]
        elif name == "single_element":
            x = zeros.clone()
            x[40] = 3.0  # block 1: y = sqrt(n) * 3000, beyond the fp16 range
        elif name == "nan":
            x[70] = float("nan")
        elif name == "pos_inf":
            x[100] = float("inf")
        elif name == "neg_inf":
            x[5] = float("-inf")
        elif name == "huge":
            x = torch.sign(rn()) * fin.max * 0.75
            r = x.clone() if dtype == torch.float16 else r  # fp16: x + r overflows to Inf
        elif name == "subnormal":
            x = torch.randint(-7, 8, (n,), generator=g).float() * fin.tiny * fin.eps
        elif name == "alternating":
            x = torch.tensor([1.0, -1.0]).repeat(n // 2)
        elif name == "neg_zero":
            x = torch.full((n,), -0.0)
        elif name == "cancel":
            r = -x.to(dtype).float()  # x + r == 0 exactly
        elif name == "residual_tie":
            x = torch.ones(n)
            r = torch.full((n,), 2.0**-8 if dtype == torch.bfloat16 else 2.0**-11)  # tie to even
        elif name == "mixed_scales":
            x = rn() * torch.logspace(-6, 6, n // 32).repeat_interleave(32)
        rows.append(x)
        res.append(r)
    x = torch.stack(rows).to(dtype)
    r = torch.stack(res).to(dtype)
    w = torch.randn(n, generator=g) * 0.5
    w[0:32] = 2.0**-8 - weight_offset
    w[32:64] = 3000.0 - weight_offset
    return x, r, w.to(wdtype)


def pytest_configure(config):
    # emitted inside torch by opcheck / torch.compile, not by mxfuse
    config.addinivalue_line(
        "filterwarnings", "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"
    )


# (kind, scale_rule): the plain norms once, the MX kinds under both rules
KIND_RULES = [
    ("rmsnorm", "ceil"),
    ("add_rmsnorm", "ceil"),
    ("rmsnorm_mxfp8", "ceil"),
    ("rmsnorm_mxfp8", "floor"),
    ("add_rmsnorm_mxfp8", "ceil"),
    ("add_rmsnorm_mxfp8", "floor"),
]
