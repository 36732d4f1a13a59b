"""Seeded differential fuzz of the ops: random shapes, memory layouts and value regimes per
32-element block, each case checked the way the fixed-case tests check it.

- CPU op against ``mxfuse.reference`` (bitwise; NaN by position for bf16/fp16/fp32 outputs of the
  torch reference, whose NaN payloads vary), and the GPU op against the CPU op, fully bitwise, on
  the same layout: row-strided views, views at an address that is not 16-byte aligned, 3-D views;
- in-place outputs (the residual, ``mxfp6_round_``'s weight) updated in their view only: the rest
  of their buffer keeps its sentinel bytes;
- GPU outputs the same under both debug poison bytes (every element written);
- the SPEC invariants on the device: fused == quantize(norm), unpack(pack(w)) == round(w),
  pack(round(w)) == pack(w) (floor rule); mxfp6_linear within the fp64 bound of test_mxfp6 and
  batch invariant; mxfp8_scaled_mm bitwise equal to the blockwise reference on the CPU; the
  one-launch and three-launch attention fronts equal to the unfused ops (random head counts, head
  and rotary dims, gate, cache dtype and block size, padded slots, zero tokens), and on the CPU
  every step after the projection equal to the reference; qk_norm_rope_cache on fuzzed qkv rows
  (any even head size, every layout) equal to its unfused ops and, on the GPU, to the CPU op.

Value regimes (per block): normal values at a random binade, powers of two, E4M3 ties and scale
edges (448 * 2^j, mantissa 1.75 and its neighbours), E2M3 ties and the 7.5 boundary, subnormals,
all zero, all -0, one non-zero element, values near the dtype's max, and NaN / +-Inf.

Each case is reproducible from its id (the seed). ``MXFUSE_FUZZ_CASES`` sets the number of cases
per op family and device (default 12; the GPU run in scripts/gpu_run.sh uses more).
"""

from __future__ import annotations

import os

import mxfuse
import pytest
import torch
from conftest import (
    DEVICES,
    OPS,
    assert_bitwise_equal,
    assert_equal_nan_by_position,
    generator,
    requires_mxfp6,
    run_poisoned,
)
from mxfuse import reference as ref
from test_mxfp6 import linear_bound

CASES = int(os.environ.get("MXFUSE_FUZZ_CASES", "12"))
E4M3 = torch.float8_e4m3fn
ACT = (torch.bfloat16, torch.float16)

E4M3_MAGS = torch.arange(0x7F, dtype=torch.uint8).view(E4M3).double()  # codes 0x00..0x7E
E2M3_MAGS = ref.e2m3_magnitudes().to(torch.float64)

REGIMES = ("normal", "normal", "pow2", "e4m3_ties", "e4m3_edges", "e2m3_ties", "subnormal", "zero",
           "neg_zero", "one_hot", "huge", "special")


def binades(dtype):
    """Exponent range j such that values of a few units times 2^j stay normal in dtype, and the
    range of the 448 * 2^j / 7.5 * 2^j anchors whose smallest tie still is representable."""
    if dtype == torch.float16:
        return (-12, 10), (-12, 6)
    return (-100, 100), (-100, 100)


def midpoints(mags):
    return torch.cat([mags, (mags[:-1] + mags[1:]) / 2])


def block_values(rows, blocks, dtype, g, finite=False, spread=None, regimes=REGIMES, width=6):
    """float64 [rows, blocks * 32] of values exactly representable in dtype, a regime per block."""
    shape = (rows, blocks, 32)
    (lo, hi), (alo, ahi) = binades(dtype)
    if spread is not None:
        lo, hi = spread
        alo, ahi = max(alo, lo), min(ahi, hi)
    fin = torch.finfo(dtype)

    # Each row is centred on a random binade and its blocks spread `width` binades around it, so
    # that no single block dominates every row's sum of squares.
    centre = torch.randint(lo + width, max(lo + width, hi - width) + 1, (rows, 1, 1), generator=g)

    def per_block(lo_, hi_):
        b = centre + torch.randint(-width, width + 1, (rows, blocks, 1), generator=g)
        return b.clamp(lo_, hi_).double()

    def sign():
        return torch.randint(0, 2, shape, generator=g).double() * 2 - 1

    def pick(table):
        return table[torch.randint(0, len(table), shape, generator=g)]

    def with_anchor(v, anchor):
        pos = torch.randint(0, 32, (rows, blocks, 1), generator=g)
        return v.scatter(2, pos, anchor.to(torch.float64))

    eps = fin.eps
    f64 = dict(dtype=torch.float64)
    ties4 = sign() * pick(midpoints(E4M3_MAGS))
    edges4 = pick(torch.tensor([1.75, 1.75 + eps, 1.75 - eps, 1.0, 2 - eps], **f64))[..., :1]
    ties6 = sign() * pick(midpoints(E2M3_MAGS))
    edges6 = pick(torch.tensor([7.5, 7.75, 7.5 + 8 * eps, 4.0, 6.0], **f64))[..., :1]
    anchor_scale = torch.pow(2.0, per_block(alo, ahi))
    cand = {
        "normal": torch.randn(shape, generator=g, **f64) * torch.pow(2.0, per_block(lo, hi)),
        "pow2": sign() * torch.pow(2.0, per_block(lo, hi)
                                   + torch.randint(-3, 4, shape, generator=g)),
        "e4m3_ties": with_anchor(ties4, torch.full((rows, blocks, 1), 448.0, **f64)) * anchor_scale,
        "e4m3_edges": with_anchor(ties4 / 2, edges4 * 256.0) * anchor_scale,
        "e2m3_ties": with_anchor(ties6, edges6) * anchor_scale,
        "subnormal": torch.randint(-7, 8, shape, generator=g).double() * (fin.tiny * fin.eps)
        * torch.pow(2.0, torch.randint(0, 4, (rows, blocks, 1), generator=g).double()),
        "zero": torch.zeros(shape, **f64),
        "neg_zero": torch.full(shape, -0.0, **f64),
        "one_hot": with_anchor(torch.zeros(shape, **f64),
                               torch.randn((rows, blocks, 1), generator=g, **f64)
                               * torch.pow(2.0, per_block(lo, hi))),
        "huge": sign() * fin.max * (0.5 + torch.rand(shape, generator=g, **f64) / 2),
    }
    special = cand["normal"].clone()
    bad = torch.tensor([float("nan"), float("inf"), float("-inf")], dtype=torch.float64)
    special = with_anchor(special, pick(bad)[..., :1])
    cand["special"] = special
    names = [r for r in regimes if not (finite and r in ("special", "huge"))]
    choice = torch.randint(0, len(names), (rows, blocks, 1), generator=g)
    # NaN / Inf and near-max blocks only in about a quarter of the rows: one of them makes the
    # whole row's norm NaN or overflow, and the other rows must test the finite arithmetic.
    wild = torch.rand((rows, 1, 1), generator=g) < 0.25
    tame = torch.tensor([names.index("normal") if r in ("special", "huge") else i
                         for i, r in enumerate(names)])
    choice = torch.where(wild, choice, tame[choice])
    out = torch.zeros(shape, dtype=torch.float64)
    for i, name in enumerate(names):
        out = torch.where(choice == i, cand[name], out)
    return out.reshape(rows, blocks * 32)


def values(rows, n, dtype, g, **kw):
    """block_values cut to n columns, rounded to dtype (exact for every regime but "normal")."""
    v = block_values(rows, (n + 31) // 32, dtype, g, **kw)[:, :n]
    return v.to(dtype)


# --- layouts -------------------------------------------------------------------------------------

LAYOUTS = ("contiguous", "rows_aligned", "rows_odd", "offset", "3d")
SENTINEL = 0x5A


def place(t, layout, device):
    """(view, buffer): t's values as a view of a fresh sentinel-filled buffer on device."""
    m, n = t.shape
    esz = t.element_size()
    if layout in ("contiguous", "3d"):
        buf = torch.full((m * n * esz + 16,), SENTINEL, dtype=torch.uint8, device=device)
        view = buf[: m * n * esz].view(t.dtype).view(m, n)
    elif layout == "offset":  # base address off by one element
        buf = torch.full(((m * n + 1) * esz + 16,), SENTINEL, dtype=torch.uint8, device=device)
        view = buf[esz : esz + m * n * esz].view(t.dtype).view(m, n)
    else:
        pad = 8 if layout == "rows_aligned" else 3
        width = n + pad
        buf = torch.full(((m * width + pad) * esz,), SENTINEL, dtype=torch.uint8, device=device)
        view = buf.view(t.dtype)[pad : pad + m * width].view(m, width)[:, :n] if m > 0 else \
            buf.view(t.dtype)[:0].view(0, n)
    view.copy_(t.to(device))
    if layout == "3d" and m % 2 == 0 and m > 0:
        view = view.view(2, m // 2, n)
    return view, buf


def untouched_outside(view, buf, what):
    """Every byte of buf outside view's elements still holds the sentinel."""
    mask = torch.ones(buf.numel(), dtype=torch.bool, device=buf.device)
    if view.numel() > 0:
        esz = view.element_size()
        base = (view.data_ptr() - buf.data_ptr())
        idx = torch.zeros(view.shape, dtype=torch.int64, device=buf.device)
        for d, (size, stride) in enumerate(zip(view.shape, view.stride())):
            shape = [1] * view.dim()
            shape[d] = size
            idx = idx + torch.arange(size, device=buf.device).view(shape) * stride * esz
        idx = (idx.reshape(-1, 1) + base + torch.arange(esz, device=buf.device)).reshape(-1)
        mask[idx] = False
    assert torch.all(buf[mask] == SENTINEL), f"{what}: bytes outside the view were written"


def choose(g, options):
    return options[int(torch.randint(0, len(options), (1,), generator=g))]


def rint(g, lo, hi):
    return int(torch.randint(lo, hi + 1, (1,), generator=g))


def run_on(device, call):
    """call()'s outputs; on the GPU run under both debug poison bytes, which must give the same
    bits (every element written), and returned as CPU copies."""
    return run_poisoned(call) if device == "cuda" else call()


CASE_IDS = [f"seed{i}" for i in range(CASES)]


def seeds(family):
    return [1000 * family + i for i in range(CASES)]


# --- norms ---------------------------------------------------------------------------------------

# Around the norm kernels' thresholds (8-element chunks: 32, 64, 128, 256, 512, 768, 1024).
NORM_N = (1, 7, 31, 32, 96, 200, 256, 264, 512, 1000, 1024, 2048, 2080, 3072, 4096, 6144, 8192,
          8224, 12288)


def norm_case(seed, device):
    g = generator(seed)
    mx = bool(rint(g, 0, 1))
    add = bool(rint(g, 0, 1))
    dtype = choose(g, ACT)
    wdtype = choose(g, (dtype, torch.float32))
    n = choose(g, [v for v in NORM_N if not mx or v % 32 == 0])
    big = device == "cuda" and rint(g, 0, 3) == 0
    m = rint(g, 0, 300) if big else rint(g, 0, 40 if n <= 4096 else 9)
    rule = choose(g, ("ceil", "floor"))
    eps = choose(g, (1e-6, 1e-5, 0.0, 0.25))
    wo = choose(g, (1.0, 0.0, 0.5))
    x = values(m, n, dtype, g)
    r = values(m, n, dtype, g)
    w = values(1, n, wdtype, g, finite=True, spread=(-4, 4))[0]
    x_layout = choose(g, LAYOUTS)
    # A residual written in place may be strided only as a 2-D view (the op's contract).
    r_layout = choose(g, ("contiguous", "offset") if x_layout == "3d" else LAYOUTS[:4])
    return dict(mx=mx, add=add, x=x, r=r, w=w, rule=rule, eps=eps, wo=wo, x_layout=x_layout,
                r_layout=r_layout)


def run_norm(lib, c, x, r, w):
    if c["add"]:
        if c["mx"]:
            return lib.gemma_fused_add_rmsnorm_mxfp8(x, r, w, c["eps"], c["wo"], c["rule"])
        return (lib.gemma_fused_add_rmsnorm(x, r, w, c["eps"], c["wo"]),)
    if c["mx"]:
        return lib.gemma_rmsnorm_mxfp8(x, w, c["eps"], c["wo"], c["rule"])
    return (lib.gemma_rmsnorm(x, w, c["eps"], c["wo"]),)


def norm_on(device, c):
    """The op on device with the case's layouts: (outputs, updated residual 2-D)."""
    def call():
        x, _ = place(c["x"], c["x_layout"], device)
        r, rbuf = place(c["r"], c["r_layout"], device)
        r = r.view(x.shape)  # a 3-D x takes a 3-D residual
        out = run_norm(OPS, c, x, r, c["w"].to(device))
        assert all(o.device.type == device for o in out)
        untouched_outside(r, rbuf, "residual")
        return (*(o.reshape(-1, o.shape[-1]) for o in out), r.reshape(c["r"].shape).clone())
    return run_on(device, call)


@pytest.mark.parametrize("seed", seeds(1), ids=CASE_IDS)
@pytest.mark.parametrize("device", DEVICES)
def test_fuzz_norms(seed, device):
    c = norm_case(seed, device)
    got = norm_on(device, c)
    if device == "cpu":
        r = c["r"].clone()
        want = (*run_norm(ref, c, c["x"], r, c["w"]), r)
        for i, (a, b) in enumerate(zip(got, want)):
            assert_equal_nan_by_position(a, b, f"output {i} vs reference")
    else:
        for i, (a, b) in enumerate(zip(got, norm_on("cpu", c))):
            assert_bitwise_equal(a, b, f"output {i}: GPU vs CPU")
    if c["mx"]:  # fused == quantize(norm), on this device
        plain = dict(c, mx=False)
        y = norm_on(device, plain)[0].to(device)
        codes, scales = OPS.mxfp8_quantize(y, c["rule"])
        assert_bitwise_equal(got[0], codes, "fused codes vs quantize(norm)")
        assert_bitwise_equal(got[1], scales, "fused scales vs quantize(norm)")


# --- MXFP8 quantize / dequantize -----------------------------------------------------------------


@pytest.mark.parametrize("seed", seeds(2), ids=CASE_IDS)
@pytest.mark.parametrize("device", DEVICES)
def test_fuzz_quantize_dequantize(seed, device):
    g = generator(seed)
    dtype = choose(g, (*ACT, torch.float32))
    n = 32 * rint(g, 1, 200 if device == "cuda" else 64)
    m = rint(g, 0, 130 if device == "cuda" else 24)
    rule = choose(g, ("ceil", "floor"))
    out_dtype = choose(g, (*ACT, torch.float32))
    x = values(m, n, dtype, g)
    layout = choose(g, LAYOUTS)

    def quant(dev):
        def call():
            xv, _ = place(x, layout, dev)
            codes, scales = OPS.mxfp8_quantize(xv, rule)
            out = (codes, scales, OPS.mxfp8_dequantize(codes, scales, out_dtype))
            return tuple(o.reshape(-1, o.shape[-1]) for o in out)
        return run_on(dev, call)

    codes = torch.randint(0, 256, (m, n), generator=g, dtype=torch.uint8).view(E4M3)
    sbytes = torch.randint(0, 256, (m, n // 32), generator=g, dtype=torch.uint8)

    def dequant(dev):
        def call():
            return (OPS.mxfp8_dequantize(codes.to(dev), sbytes.to(dev), out_dtype),)
        return run_on(dev, call)

    got = (*quant(device), *dequant(device))
    if device == "cpu":
        c, s = ref.mxfp8_quantize(x, rule)
        want = (c, s, ref.mxfp8_dequantize(c, s, out_dtype),
                ref.mxfp8_dequantize(codes, sbytes, out_dtype))
        for i, (a, b) in enumerate(zip(got, want)):
            assert_equal_nan_by_position(a, b, f"output {i} vs reference")
    else:
        for i, (a, b) in enumerate(zip(got, (*quant("cpu"), *dequant("cpu")))):
            assert_bitwise_equal(a, b, f"output {i}: GPU vs CPU")


# --- MXFP6 ---------------------------------------------------------------------------------------

UNPACK_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@requires_mxfp6
@pytest.mark.parametrize("seed", seeds(3), ids=CASE_IDS)
@pytest.mark.parametrize("device", DEVICES)
def test_fuzz_mxfp6_pack_unpack_round(seed, device):
    g = generator(seed)
    dtype = choose(g, ACT)
    n = 16 * rint(g, 1, 12)
    k = 128 * rint(g, 1, 8)
    rule = choose(g, ("floor", "floor", "ceil"))
    w = values(n, k, dtype, g, finite=True)
    layout = choose(g, LAYOUTS[:4])

    def ops(dev):
        def call():
            wv, _ = place(w, layout, dev)
            packed, scales = OPS.mxfp6_pack(wv, rule)
            wr, wbuf = place(w, layout, dev)
            OPS.mxfp6_round_(wr, rule)
            untouched_outside(wr, wbuf, "mxfp6_round_'s w")
            return (packed, scales, wr.clone(),
                    *(OPS.mxfp6_unpack(packed, scales, d) for d in UNPACK_DTYPES))
        return run_on(dev, call)

    got = ops(device)
    if device == "cpu":
        p, s = ref.mxfp6_pack(w, rule)
        want = (p, s, ref.mxfp6_round_(w.clone(), rule),
                *(ref.mxfp6_unpack(p, s, d) for d in UNPACK_DTYPES))
        for i, (a, b) in enumerate(zip(got, want)):
            assert_bitwise_equal(a, b, f"output {i} vs reference")
    else:
        for i, (a, b) in enumerate(zip(got, ops("cpu"))):
            assert_bitwise_equal(a, b, f"output {i}: GPU vs CPU")
    packed, scales, wr = (t.to(device) for t in got[:3])  # the invariants on this device
    assert_bitwise_equal(OPS.mxfp6_unpack(packed, scales, dtype), wr,
                         "unpack(pack(w)) vs round_(w)")
    if rule == "floor":
        p2, s2 = OPS.mxfp6_pack(wr, rule)
        assert_bitwise_equal(p2, packed, "pack(round(w)) vs pack(w)")
        assert_bitwise_equal(s2, scales, "scales of pack(round(w))")


LINEAR_REGIMES = ("normal", "normal", "pow2", "e2m3_ties", "subnormal", "zero", "neg_zero",
                  "one_hot")


@requires_mxfp6
@pytest.mark.parametrize("seed", seeds(4), ids=CASE_IDS)
@pytest.mark.parametrize("device", DEVICES)
def test_fuzz_mxfp6_linear(seed, device, restore_pdl):
    g = generator(seed)
    dtype = choose(g, ACT)
    big = device == "cuda"
    n = 16 * rint(g, 1, 200 if big else 12)
    k = 128 * rint(g, 1, 48 if big else 8)
    m = choose(g, (0, 1, 2, 3, 5, 8, 9, 13, 16, 17, 37) + ((100, 300) if big else ()))
    # Magnitudes that keep every dot product finite in fp16 (overflow is tested elsewhere).
    small = dict(finite=True, spread=(-6, -2), regimes=LINEAR_REGIMES)
    w = values(n, k, dtype, g, **small)
    x = values(m, k, dtype, g, **small)
    bias_dtype = choose(g, (dtype, torch.float32))
    bias = None if rint(g, 0, 1) else values(1, n, bias_dtype, g, finite=True, spread=(-4, 4))[0]
    layout = choose(g, LAYOUTS)
    packed, scales = OPS.mxfp6_pack(w.to(device), "floor")
    w6 = OPS.mxfp6_unpack(packed, scales, torch.float32).cpu()

    def linear(rows):
        xv, _ = place(x[rows], layout, device)
        b = None if bias is None else bias.to(device)
        return OPS.mxfp6_linear(xv, packed, scales, b).reshape(-1, n)

    got = run_on(device, lambda: (linear(slice(None)),))[0]
    want = x.double() @ w6.double().t() + (0 if bias is None else bias.double())
    err = (got.cpu().double() - want).abs()
    lim = linear_bound(x, w6, bias, dtype, want, device)
    assert torch.all(err <= lim), f"max excess {(err - lim).max().item()}"
    if big and m > 0:  # batch invariance: a prefix and a single row alone
        for rows in (slice(0, rint(g, 1, min(m, 16))), slice(m - 1, m)):
            assert_bitwise_equal(linear(rows), got[rows], f"rows {rows} alone vs in M = {m}")
    if big:  # every launch mode gives the same bits
        mode = choose(g, ("off", "prefetch_weights"))
        mxfuse.set_pdl(mode)
        assert_bitwise_equal(linear(slice(None)), got, f"set_pdl({mode!r}) vs the default")


# --- MXFP8 GEMM ----------------------------------------------------------------------------------

SCALE_RANGES = ((110, 145), (40, 70), (0, 255))


@pytest.mark.parametrize("seed", seeds(5), ids=CASE_IDS)
@pytest.mark.parametrize("device", DEVICES)
def test_fuzz_mxfp8_scaled_mm(seed, device):
    g = generator(seed)
    layout = choose(g, ("1x32", "32x32"))
    m = rint(g, 0, 70)
    n = 32 * rint(g, 0 if layout == "1x32" else 1, 8)
    if layout == "1x32" and rint(g, 0, 1):
        n = rint(g, 1, 200)
    k = 32 * rint(g, 0, 64)
    out_dtype = choose(g, (*ACT, torch.float32))
    lo, hi = choose(g, SCALE_RANGES)
    a = torch.randint(0, 256, (m, k), generator=g, dtype=torch.uint8).view(E4M3)
    b = torch.randint(0, 256, (n, k), generator=g, dtype=torch.uint8).view(E4M3)
    asc = torch.randint(lo, hi + 1, (m, k // 32), generator=g, dtype=torch.uint8)
    bsc = torch.randint(lo, hi + 1, (n if layout == "1x32" else n // 32, k // 32), generator=g,
                        dtype=torch.uint8)
    bias = None if rint(g, 0, 1) else values(1, n, choose(g, (out_dtype, torch.float32)), g,
                                             finite=True, spread=(-4, 4))[0]
    a_layout = choose(g, LAYOUTS[:4])

    def mm(dev):
        def call():
            av, _ = place(a.view(torch.uint8), a_layout, dev)
            bv = None if bias is None else bias.to(dev)
            return (OPS.mxfp8_scaled_mm(av.view(E4M3), asc.to(dev), b.to(dev), bsc.to(dev),
                                        out_dtype, bv, b_scale_layout=layout),)
        return run_on(dev, call)

    got = mm(device)[0]
    if device == "cpu":
        want = ref.mxfp8_scaled_mm_blockwise(a, asc, b, bsc, out_dtype, bias, layout)
        assert_equal_nan_by_position(got, want, "vs the blockwise reference")
    else:
        assert_bitwise_equal(got, mm("cpu")[0], "GPU vs CPU")


# --- attention front -----------------------------------------------------------------------------


def front_case(seed, device):
    """Inputs of one attention_front call: a random configuration (hidden, heads, head_dim,
    rotary_dim, gate), fuzzed x / residual / norm weights, padded slots, any cache dtype."""
    g = generator(seed)
    big = device == "cuda"
    dtype = choose(g, ACT)
    w_dtype = choose(g, (dtype, torch.float32))
    hidden = 128 * rint(g, 1, 32 if big else 8)
    d = 16 * rint(g, 1, 16 if big else 8)
    rd = 2 * rint(g, 1, d // 2)
    hkv = rint(g, 1, 4)
    hq = hkv * rint(g, 1, 4)
    gate = bool(rint(g, 0, 1))
    m = choose(g, (0, 1, 2, 3, 5, 8, 9, 16, 17, 37) + ((64,) if big else ()))
    n = hq * d * (2 if gate else 1) + 2 * hkv * d
    kw = dict(num_q_heads=hq, num_kv_heads=hkv, head_dim=d, rotary_dim=rd, output_gate=gate,
              eps=choose(g, (1e-6, 1e-5, 0.0)), weight_offset=choose(g, (1.0, 0.0)))
    # The projection is fuzzed on its own above: plain normal weights, a binade per row.
    w = (torch.randn(n, hidden, generator=g)
         * torch.pow(2.0, torch.randint(-7, -2, (n, 1), generator=g).float())).to(dtype)
    packed, scales = OPS.mxfp6_pack(w.to(device))
    max_pos, block_size = 4096, choose(g, (1, 4, 16))
    blocks = (max(m, 1) + block_size - 1) // block_size + rint(g, 0, 3)
    slots = torch.randperm(blocks * block_size, generator=g)[:m]
    slots = torch.where(torch.rand(m, generator=g) < 0.2, torch.full_like(slots, -1), slots)
    ang = torch.rand(max_pos, rd // 2, generator=g, dtype=torch.float64) * 2 * torch.pi
    cache_dtype = choose(g, (E4M3, dtype))
    scale_choice = (0.75, 0.125, 1.0, 3.0, 2.0**-7)
    c = dict(
        x=values(m, hidden, dtype, g), residual=values(m, hidden, dtype, g),
        norm_w=values(1, hidden, w_dtype, g, finite=True, spread=(-4, 4))[0],
        packed=packed, scales=scales,
        q_w=values(1, d, w_dtype, g, finite=True, spread=(-4, 4))[0],
        k_w=values(1, d, w_dtype, g, finite=True, spread=(-4, 4))[0],
        cos_sin=torch.cat([ang.cos(), ang.sin()], 1).to(choose(g, (torch.float32, dtype))),
        positions=torch.randint(0, max_pos, (m,), generator=g), slots=slots,
        cache_shape=(blocks, block_size, hkv, d), cache_dtype=cache_dtype,
        k_scale=torch.tensor([choose(g, scale_choice)]),
        v_scale=torch.tensor([choose(g, scale_choice)]),
        kw=kw)
    return c


def fresh_caches(c, device):
    """The key and value caches before a call (slots that are not written keep these values)."""
    if c["cache_dtype"] == E4M3:
        kc = torch.full(c["cache_shape"], 0x55, dtype=torch.uint8, device=device).view(E4M3)
    else:
        kc = torch.full(c["cache_shape"], 3.0, dtype=c["cache_dtype"], device=device)
    return kc, kc.clone()


def front_run(c, device, fused):
    """(q, gate, residual, key_cache, value_cache) of one call on fresh in-place tensors."""
    dev = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in c.items()}
    residual = dev["residual"].clone()
    kc, vc = fresh_caches(c, device)
    args = (dev["x"], residual, dev["norm_w"], dev["packed"], dev["scales"], dev["q_w"], dev["k_w"],
            dev["cos_sin"], dev["positions"], dev["slots"], kc, vc, dev["k_scale"], dev["v_scale"])
    if fused == "unfused":
        q, gate = mxfuse.attention_front_unfused(*args, **c["kw"])
    else:  # True: one launch; False: three launches (qk_norm_rope_cache)
        q, gate = mxfuse.attention_front(*args, **c["kw"], fused=fused)
    return q, gate, residual, kc, vc


@requires_mxfp6
@pytest.mark.parametrize("seed", seeds(6), ids=CASE_IDS)
@pytest.mark.parametrize("device", DEVICES)
def test_fuzz_attention_front(seed, device, restore_pdl):
    """The one-launch and three-launch fronts equal the unfused ops on the same device, bit for bit
    (SPEC §6), under
    both poison bytes and a random launch mode on the GPU; on the CPU every step after the
    projection, and the residual, also equal the pure-PyTorch reference."""
    c = front_case(seed, device)
    g = generator(seed + 1)
    if device == "cuda":
        mxfuse.set_pdl(choose(g, mxfuse.ops.PDL_MODES))
    got = run_on(device, lambda: front_run(c, device, fused=True))
    three = run_on(device, lambda: front_run(c, device, fused=False))
    want = front_run(c, device, fused="unfused")
    for name, a, b, t in zip(("q", "gate", "residual", "key_cache", "value_cache"), got, want, three):
        assert_bitwise_equal(a, b, f"fused vs unfused: {name}")
        assert_bitwise_equal(t, b, f"three launches vs unfused: {name}")
    if device == "cpu":
        kw = c["kw"]
        s = ref.residual_add(c["x"], c["residual"])
        y = ref.gemma_rmsnorm(s, c["norm_w"], kw["eps"], kw["weight_offset"])
        qkv = OPS.mxfp6_linear(y, c["packed"], c["scales"])
        kc, vc = fresh_caches(c, "cpu")
        wq, wg = ref.attention_front_from_qkv(qkv, c["q_w"], c["k_w"], c["cos_sin"], c["positions"],
                                              c["slots"], kc, vc, c["k_scale"], c["v_scale"], **kw)
        want_ref = (wq, wg, s, kc, vc)
        for name, a, b in zip(("q", "gate", "residual", "key_cache", "value_cache"), got, want_ref):
            assert_equal_nan_by_position(a, b, f"vs the reference: {name}")


@pytest.mark.parametrize("seed", seeds(7), ids=CASE_IDS)
@pytest.mark.parametrize("device", DEVICES)
def test_fuzz_qk_norm_rope_cache(seed, device):
    """qk_norm_rope_cache on fuzzed qkv rows (every value regime, any even head size, every
    layout): equal to its unfused ops on the same device (the gate's NaN payloads included), to
    the CPU op on the GPU, bit for bit; qkv's buffer is not written; on the CPU q, the gate and the
    caches also equal the reference (NaN by position)."""
    g = generator(seed)
    dtype = choose(g, ACT)
    w_dtype = choose(g, (dtype, torch.float32))
    d = 2 * rint(g, 1, 160)
    rd = 2 * rint(g, 1, d // 2)
    hkv = rint(g, 1, 4)
    hq = hkv * rint(g, 1, 4)
    gate = bool(rint(g, 0, 1))
    m = choose(g, (0, 1, 2, 3, 5, 8, 9, 16, 17, 37))
    n = hq * d * (2 if gate else 1) + 2 * hkv * d
    kw = dict(num_q_heads=hq, num_kv_heads=hkv, head_dim=d, rotary_dim=rd, output_gate=gate,
              eps=choose(g, (1e-6, 1e-5, 0.0)), weight_offset=choose(g, (1.0, 0.0)))
    max_pos, block_size = 256, choose(g, (1, 4, 16))
    blocks = (max(m, 1) + block_size - 1) // block_size + rint(g, 0, 3)
    slots = torch.randperm(blocks * block_size, generator=g)[:m]
    slots = torch.where(torch.rand(m, generator=g) < 0.2, torch.full_like(slots, -1), slots)
    ang = torch.rand(max_pos, rd // 2, generator=g, dtype=torch.float64) * 2 * torch.pi
    c = dict(cache_shape=(blocks, block_size, hkv, d), cache_dtype=choose(g, (E4M3, dtype)))
    qkv = values(m, n, dtype, g)
    layout = choose(g, ("contiguous", "rows_aligned", "rows_odd", "offset"))
    rest = dict(q_w=values(1, d, w_dtype, g, finite=True, spread=(-4, 4))[0],
                k_w=values(1, d, w_dtype, g, finite=True, spread=(-4, 4))[0],
                cos_sin=torch.cat([ang.cos(), ang.sin()], 1).to(choose(g, (torch.float32, dtype))),
                positions=torch.randint(0, max_pos, (m,), generator=g), slots=slots,
                k_scale=torch.tensor([choose(g, (0.75, 0.125, 1.0, 3.0, 2.0**-7))]),
                v_scale=torch.tensor([choose(g, (0.75, 0.125, 1.0, 3.0, 2.0**-7))]))

    def run(fn, dev, lay=layout):
        view, buf = place(qkv, lay, dev)
        kc, vc = fresh_caches(c, dev)
        r = {k: v.to(dev) for k, v in rest.items()}
        q, gt = fn(view, r["q_w"], r["k_w"], r["cos_sin"], r["positions"], r["slots"], kc, vc, r["k_scale"],
                   r["v_scale"], **kw)
        untouched_outside(view, buf, "qkv's buffer")
        assert_bitwise_equal(view, qkv.to(dev), "qkv after the call")
        return q, gt, kc, vc

    names = ("q", "gate", "key_cache", "value_cache")
    got = run_on(device, lambda: run(OPS.qk_norm_rope_cache, device))
    want = run(mxfuse.qk_norm_rope_cache_unfused, device)
    for name, a, b in zip(names, got, want):
        assert_bitwise_equal(a, b, f"qk_norm_rope_cache vs its unfused ops: {name}")
    if device == "cuda":
        for name, a, b in zip(names, got, run(OPS.qk_norm_rope_cache, "cpu", "contiguous")):
            assert_bitwise_equal(a, b, f"qk_norm_rope_cache gpu vs cpu: {name}")
    else:
        kc, vc = fresh_caches(c, "cpu")
        wq, wg = ref.attention_front_from_qkv(qkv, rest["q_w"], rest["k_w"], rest["cos_sin"], rest["positions"],
                                              slots, kc, vc, rest["k_scale"], rest["v_scale"], **kw)
        for name, a, b in zip(names, got, (wq, wg, kc, vc)):
            assert_equal_nan_by_position(a, b, f"qk_norm_rope_cache vs the reference: {name}")
