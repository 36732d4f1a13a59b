"""mxfp6_linear on the GPU beyond the cases test_mxfp6.py shares with the CPU: batch invariance
(a row gives the same bits at every M), every launch shape and the portable twin of the mma fast
path within the fp64 bound, scales the fast path cannot fold, and CUDA graph replay."""

from __future__ import annotations

import mxfuse
import pytest
import torch
import re

from conftest import (OPS, assert_bitwise_equal, capture_graph, launched_kernels, randn, requires_mxfp6,
                      run_poisoned)
from mxfuse import reference as ref
from test_mxfp6 import linear_bound, weight

pytestmark = [
    requires_mxfp6,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="no CUDA device here (these cases run on the GPU machine)"),
]


def packed_on_gpu(n, k, dtype, seed, scale=1.0):
    w = (weight(n, k, torch.float32, seed) * scale).to(dtype)
    packed, scales = OPS.mxfp6_pack(w.cuda(), "floor")
    return packed, scales, OPS.mxfp6_unpack(packed, scales, torch.float32).cpu()


def check_within_bound(x, packed, scales, w6, dtype):
    got = OPS.mxfp6_linear(x.cuda(), packed, scales, None).cpu()
    want = x.double() @ w6.double().t()
    bound = linear_bound(x, w6, None, dtype, want, "cuda")
    err = (got.double() - want).abs()
    assert torch.all(err <= bound), f"max excess {(err - bound).max().item()}"
    return got


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n,k", [(2560, 6144), (9216, 2048), (48, 384)])
def test_batch_invariant(dtype, n, k):
    packed, scales, _ = packed_on_gpu(n, k, dtype, 1)
    x = randn((1024, k), dtype, 2, 1.0).cuda()
    full = OPS.mxfp6_linear(x, packed, scales)
    for m in (1, 3, 8, 9, 16, 17, 37):
        part = OPS.mxfp6_linear(x[:m], packed, scales)
        assert_bitwise_equal(part, full[:m], f"rows of M={m} vs the same rows in M=1024")


@pytest.mark.parametrize("pdl", ["off", "on", "prefetch_weights"])
@pytest.mark.parametrize("n,k", [(2560, 6144), (9216, 2048)])
def test_row_tile_items_give_the_bits_of_whole_tiles(pdl, n, k, monkeypatch, restore_pdl):
    # Two-row-tile kernels of one chain per warp stream a row tile at a time in the default
    # modes and whole tiles with prefetch_weights; every row tile runs the same mma sequence
    # either way, so the bits must not change (M <= 8 and M <= 16 kernels, both scale paths, and
    # a tile whose two row tiles would fold differently: one decision covers the whole tile). A row
    # also gives the same bits at every M (9216 x 2048: the M <= 16 kernel runs two chains per
    # warp, whole tiles, the M <= 8 one row tiles by default).
    mxfuse.set_pdl(pdl)
    packed, scales, _ = packed_on_gpu(n, k, torch.bfloat16, 31)
    x = randn((16, k), torch.bfloat16, 32, 1.0).cuda()
    odd = (torch.arange(n, device="cuda") // 16 % 2 == 1).unsqueeze(1)
    mixed = torch.where(odd, torch.full_like(scales, 140), scales)  # odd row tiles: fp32 scaling
    for name, sc in (("foldable", scales), ("mixed", mixed)):
        monkeypatch.setenv("MXFUSE_FP6_ITEM_RT", "0")
        full = OPS.mxfp6_linear(x, packed, sc)
        for m in (1, 5, 8, 12, 16):
            got = {}
            for item in ("0", "1", "2"):
                monkeypatch.setenv("MXFUSE_FP6_ITEM_RT", item)
                got[item] = OPS.mxfp6_linear(x[:m], packed, sc)
            assert_bitwise_equal(got["1"], got["2"], f"{name} scales, M={m}: row tiles vs whole tiles")
            assert_bitwise_equal(got["0"], got["2"], f"{name} scales, M={m}: default vs whole tiles")
            assert_bitwise_equal(got["0"], full[:m], f"{name} scales: rows of M={m} vs M=16")


@pytest.mark.parametrize("pdl", ["off", "on", "prefetch_weights"])
@pytest.mark.parametrize("n,k", [(2560, 6144), (12288, 6144), (9216, 2048), (4096, 4096)])
def test_register_wide_twin_gives_the_same_bits(pdl, n, k, monkeypatch, restore_pdl):
    # The bf16 M <= 16 kernels of two row tiles per warp run as a register-wide twin (168
    # registers, the shift decode) where the grid needs at most three CTAs per SM: the same mma
    # sequence, so the same bits as the 128-register kernel (spread decode) and as the M <= 8
    # kernel's rows, on foldable scales and on row tiles scaled in fp32.
    mxfuse.set_pdl(pdl)
    packed, scales, _ = packed_on_gpu(n, k, torch.bfloat16, 51)
    x = randn((16, k), torch.bfloat16, 52, 1.0).cuda()
    odd = (torch.arange(n, device="cuda") // 16 % 2 == 1).unsqueeze(1)
    mixed = torch.where(odd, torch.full_like(scales, 140), scales)
    for name, sc in (("foldable", scales), ("mixed", mixed)):
        rows8 = torch.cat([OPS.mxfp6_linear(x[i:i + 8], packed, sc) for i in (0, 8)])
        for m in (9, 12, 16):
            got = {}
            for wide in ("0", "1", "2"):
                monkeypatch.setenv("MXFUSE_FP6_WIDE", wide)
                got[wide] = OPS.mxfp6_linear(x[:m], packed, sc)
            monkeypatch.delenv("MXFUSE_FP6_WIDE")
            assert_bitwise_equal(got["2"], got["1"], f"{name} scales, M={m}: wide twin vs 128 registers")
            assert_bitwise_equal(got["0"], got["1"], f"{name} scales, M={m}: default vs 128 registers")
            assert_bitwise_equal(got["0"], rows8[:m], f"{name} scales, M={m}: vs the M <= 8 kernel's rows")


@pytest.mark.parametrize("m", [1, 8, 16])
def test_heuristic_cluster_shapes_within_bound(m):
    # Shapes the heuristic runs as clusters on the H200 (132 SMs): 2560 x 6144 (two row tiles per
    # warp, 4 warps, clusters of 4, one tile in flight per warp), 2560 x 4096 (too few k-tiles
    # for that: one row tile per warp, 4 warps, clusters of 2), 1024 x 6144 (8 warps, clusters of
    # 2); both kernels (M <= 8, <= 16).
    for n, k in ((2560, 6144), (2560, 4096), (1024, 6144)):
        packed, scales, w6 = packed_on_gpu(n, k, torch.bfloat16, 22)
        x = randn((m, k), torch.bfloat16, 23, 1.0)
        check_within_bound(x, packed, scales, w6, torch.bfloat16)


def expected_launch_shape(n, k, sms, clusters):
    """(row tiles per warp, warps, K split) that linear_shape in csrc/kernels/mxfp6_linear.cuh picks
    for an N x K weight (docs/DECISIONS.md, "MXFP6 linear: launch shape"), written out again here
    so that a change to the heuristic is a visible change to this rule."""
    row_tiles, ktiles = n // 16, k // 128
    rt, warps, split = 1, 4, 1
    mid_ctas = row_tiles // 2 * 4
    mid_share = -(-mid_ctas // sms)
    mid = (clusters and row_tiles >= sms and row_tiles % 2 == 0 and mid_ctas <= 3 * sms and ktiles >= 48
           and 100 * mid_ctas <= 91 * mid_share * sms)
    if row_tiles >= 4 * sms and row_tiles % 2 == 0:
        rt, warps = 2, 8
    elif mid:
        rt, warps, split = 2, 4, 4
    elif clusters and 2 * row_tiles > 3 * sms and row_tiles % 2 == 0:
        rt, warps = 2, 8
        if row_tiles <= 3 * sms:
            split, warps = 2, (8 if ktiles >= 32 else 4)
    elif row_tiles >= sms:
        split = 2 if row_tiles < 2 * sms else 1
    else:
        warps = 8
        while split < 8 and row_tiles * split * 2 <= sms:
            split *= 2
    while split > 1 and ktiles < 2 * split * warps:
        split //= 2
    if warps == 8 and ktiles < 2 * split * warps:
        warps = 4
    return rt, warps, split if clusters else 1


def launch_shape_cases(sms):
    """Weights at every branch of the heuristic for this SM count, with the K that decides it."""
    even = lambda t: t + t % 2  # noqa: E731
    return [
        (16 * even(sms + sms // 5), 6144),        # clusters of 4 with spare slots (2560 x 6144 on 132)
        (16 * 2 * (sms // 2), 6144),              # clusters of 4 would fill two CTAs per SM
        (16 * even(sms * 3 // 2) - 64, 6144),     # about 1.45 per SM: too few spare slots
        (16 * even(sms + sms // 5), 2560),        # too few k-tiles for clusters of 4
        (16 * even(sms * 2), 4096),               # 2 per SM: 8 warps, clusters of 2
        (16 * even(sms * 2), 2048),               # the same with 16 k-tiles: 4 warps
        (16 * even(sms * 7 // 2), 2048),          # 3.5 per SM: 8 warps, unsplit
        (16 * 4 * sms, 2048),                     # >= 4 per SM
        (16 * 4 * sms, 1024),                     # the same with 8 k-tiles: 4 warps
        (16 * (sms // 2), 4096),                  # fewer than one per SM
    ]


# Template arguments of an fp6_linear_kernel in the profiler's kernel name: (n8 blocks, row tiles
# per warp, warps, chains per warp, K split), and the last one: the register-wide twin of the bf16
# two-row-tile, two-n8-block kernels (four warps), which runs where the grid needs at most three
# CTAs per SM.
LINEAR_KERNEL_ARGS = re.compile(
    r"fp6_linear_kernel<[^,]*, (\d+), (\d+), (\d+), (\d+), (\d+), \d+, [^,]*, (true|false)>")


def launched_linear_shapes(call):
    """call()'s result, the names of the fp6_linear_kernels it launched, and for each
    ((n8 blocks, row tiles, warps, chains, split), register-wide twin)."""
    out, names = launched_kernels(call, "fp6_linear_kernel")
    shapes = [(tuple(int(v) for v in mt.groups()[:5]), mt.group(6) == "true")
              for mt in map(LINEAR_KERNEL_ARGS.search, names) if mt]
    return out, names, shapes


def set_launch_shape(monkeypatch, shape):
    """MXFUSE_FP6_RT / _WARPS / _SPLIT from a (rt, warps, split) tuple of strings; None: the
    heuristic's."""
    if shape is not None:
        for name, v in zip(("RT", "WARPS", "SPLIT"), shape):
            monkeypatch.setenv(f"MXFUSE_FP6_{name}", v)


def shape_id(shape):
    return "heuristic" if shape is None else f"rt{shape[0]}w{shape[1]}s{shape[2]}"


@pytest.mark.parametrize("m", [1, 16, 17])
def test_heuristic_picks_the_documented_launch_shape(m):
    # The kernel launched (its template arguments in the profiler's name) must be the one the
    # documented rule gives, for this GPU's SM count, at each branch; the M <= 16 kernel and the
    # 32-row kernel above it run the eight-warp shapes as four warps of two chains. HIP and builds
    # without sm_90 code have no clusters; HIP runs one portable shape for every weight.
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    clusters = torch.cuda.get_device_capability() >= (9, 0) and OPS._device_code_arch(0) >= 90
    for n, k in launch_shape_cases(sms):
        rt, warps, split = (1, 4, 1) if torch.version.hip else expected_launch_shape(n, k, sms, clusters)
        nb = 1 if m <= 8 else 2 if m <= 16 else 4
        if m > 8 and rt == 2 and warps == 8:
            want = (nb, 2, 4, 2, split)
        else:
            want = (nb, rt, warps, 1, split)
        wide = nb == 2 and rt == 2 and n // 32 * split <= 3 * sms
        packed = torch.zeros(n // 16, k // 128, 1536, dtype=torch.uint8, device="cuda")
        scales = torch.full((n, k // 32), 127, dtype=torch.uint8, device="cuda")
        x = torch.ones(m, k, dtype=torch.bfloat16, device="cuda")
        _, names, got = launched_linear_shapes(lambda: OPS.mxfp6_linear(x, packed, scales))
        assert got == [(want, wide)], (
            f"{n} x {k}, M = {m}, {sms} SMs: launched {names}, want (kNB, rt, W, V, S) {want}, wide {wide}")


@pytest.mark.parametrize("n,k", [(3072, 6144), (4096, 2048), (4224, 4096), (7168, 2048)])
def test_batch_invariant_at_the_middle_shapes(n, k):
    # The heuristic's branches between 1 and 4 row tiles per SM on the H200: one row tile per warp
    # and clusters of 2 where clusters of 4 would leave too few spare slots (3072 x 6144), two row
    # tiles per warp with 4 warps and clusters of 2 (4096 x 2048), 8 warps and clusters of 2
    # (4224 x 4096), 8 warps unsplit (7168 x 2048). A row gives the same bits at every M and is
    # within the fp64 bound.
    packed, scales, w6 = packed_on_gpu(n, k, torch.bfloat16, 41)
    x = randn((37, k), torch.bfloat16, 42, 1.0)
    full = check_within_bound(x, packed, scales, w6, torch.bfloat16)
    for m in (1, 5, 8, 9, 16, 17):
        part = OPS.mxfp6_linear(x[:m].cuda(), packed, scales).cpu()
        assert_bitwise_equal(part, full[:m], f"{n} x {k}: rows of M={m} vs the same rows in M=37")


@pytest.mark.parametrize("rt,warps,item", [("1", "4", "0"), ("1", "8", "0"), ("2", "4", "1"), ("2", "4", "2"),
                                           ("2", "8", "1"), ("2", "8", "2")])
@pytest.mark.parametrize("split", ["1", "2", "4", "8"])
def test_every_launch_shape_within_bound(rt, warps, item, split, monkeypatch):
    # split > 1: a cluster of CTAs splits K and adds partials across the cluster; with 8 warps
    # and split 8 on K = 1024 (8 tiles), most warps own no tile at all. rt 2: two row tiles per
    # warp (N = 48 has three row tiles, so it falls back to one), streamed a row tile (item 1) or
    # a whole tile (item 2) at a time.
    monkeypatch.setenv("MXFUSE_FP6_RT", rt)
    monkeypatch.setenv("MXFUSE_FP6_WARPS", warps)
    monkeypatch.setenv("MXFUSE_FP6_SPLIT", split)
    monkeypatch.setenv("MXFUSE_FP6_ITEM_RT", item)
    for n, k in ((64, 2048), (256, 1024), (48, 384)):
        packed, scales, w6 = packed_on_gpu(n, k, torch.bfloat16, 3)
        x = randn((20, k), torch.bfloat16, 4, 1.0)
        got = check_within_bound(x, packed, scales, w6, torch.bfloat16)
        alone = OPS.mxfp6_linear(x[-1:].cuda(), packed, scales).cpu()
        assert_bitwise_equal(alone[0], got[-1], "last row alone vs in the batch")


def adversarial_packed(n, k, seed):
    """Random packed bytes (every byte pattern is a valid set of codes, so all 64 codes occur,
    both zeros, subnormal codes and +-7.5 included) with E8M0 scales: even row tiles only in
    [1, 128] (the fast path folds the scale into the decode), odd row tiles in [0, 160] (the
    fast path scales each group's fp32 partial)."""
    gen = torch.Generator().manual_seed(seed)
    packed = torch.randint(0, 256, (n // 16, k // 128, 1536), generator=gen, dtype=torch.uint8)
    scales = torch.randint(0, 161, (n, k // 32), generator=gen, dtype=torch.uint8)
    fold = torch.randint(1, 129, (n, k // 32), generator=gen, dtype=torch.uint8)
    even = (torch.arange(n) // 16 % 2 == 0).unsqueeze(1)
    return packed.cuda(), torch.where(even, fold, scales).cuda()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("item", ["1", "2"])
@pytest.mark.parametrize("wide", ["0", "1"])
@pytest.mark.parametrize(
    "shape",
    [None, ("1", "4", "1"), ("2", "4", "1"), ("2", "8", "1"), ("1", "8", "2"), ("2", "8", "2"), ("2", "8", "4"),
     ("2", "4", "4")],
    ids=shape_id,
)
def test_identity_x_gives_every_weight_exactly(dtype, item, wide, shape, monkeypatch):
    # x = I: out[m, n] = W6[n, m] is one product by 1 plus exact zeros, so every decoded weight
    # must come out exactly (one rounding of the fp32 value to the output dtype; +0 == -0).
    # This checks the fast path's bit-level decode of every code at every lane position, both
    # scale paths, the M <= 8 kernel (8-row slices) and the 32-row kernel (the full batch), with
    # two-row-tile kernels streaming a row tile (item 1) or a whole tile (item 2) at a time. The
    # two-row-tile M <= 16 kernels here run as the register-wide twin by default (shift decode,
    # bf16) and as the 128-register kernel with wide = 1 (spread decode).
    monkeypatch.setenv("MXFUSE_FP6_ITEM_RT", item)
    monkeypatch.setenv("MXFUSE_FP6_WIDE", wide)
    set_launch_shape(monkeypatch, shape)
    n, k = 64, 512
    packed, scales = adversarial_packed(n, k, 21)
    want = OPS.mxfp6_unpack(packed, scales, torch.float32).t().to(dtype)
    eye = torch.eye(k, dtype=dtype, device="cuda")
    got = OPS.mxfp6_linear(eye, packed, scales)
    assert torch.equal(got, want), f"M={k}: {(got != want).sum().item()} weights differ"
    for m0 in range(0, k, 8):
        got8 = OPS.mxfp6_linear(eye[m0:m0 + 8], packed, scales)
        assert torch.equal(got8, want[m0:m0 + 8]), f"rows {m0}..{m0 + 7}: M <= 8 kernel differs"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "shape",
    [None, ("1", "4", "1"), ("1", "8", "2"), ("2", "4", "1"), ("2", "8", "1"), ("2", "8", "4"), ("2", "4", "4")],
    ids=shape_id,
)
def test_rows_of_x_per_cta_above_16_give_the_same_bits(dtype, shape, monkeypatch):
    # Above M = 16 three kernels can run: the M <= 16 kernel once per 16 rows
    # (MXFUSE_FP6_ROWS_X=16), the 32-row kernel (four n8 blocks; the default up to M = 384) and the
    # tiled kernel (128 weight rows x 128 rows of x per CTA, the chains walked one after another by
    # the whole CTA; the default above M = 384, MXFUSE_FP6_ROWS_X=128 at any M > 16). All follow the weight's launch shape, so they must
    # give the same bits, on weights whose tiles take both scale paths (adversarial_packed): M = 17
    # .. 129 (partial and whole blocks of 32 and 128 rows), each row alone (the M <= 8 kernel),
    # partial and whole blocks of 128 weight rows (N = 64, 96, 256), and with K = 1024 split 4 ways
    # over 8 warps, chains that own no tile at all.
    set_launch_shape(monkeypatch, shape)
    ms = (17, 24, 32, 33, 64, 100, 128, 129)
    for n, k in ((64, 2048), (96, 1024), (256, 1024)):
        packed, scales = adversarial_packed(n, k, 31)
        x = randn((129, k), dtype, 32, 1.0).cuda()

        def run(m, rows_x):  # the output, and which kernels ran (n8 blocks per CTA, or "tiled")
            if rows_x is None:
                monkeypatch.delenv("MXFUSE_FP6_ROWS_X", raising=False)
            else:
                monkeypatch.setenv("MXFUSE_FP6_ROWS_X", rows_x)
            out, names = launched_kernels(lambda: OPS.mxfp6_linear(x[:m], packed, scales), "fp6_linear")
            tiled = {"tiled" for name in names if "fp6_linear_tiled_kernel" in name}
            return out, tiled | {int(mt.group(1)) for mt in map(LINEAR_KERNEL_ARGS.search, names) if mt}

        for m in ms:
            want, ran = run(m, "16")
            assert ran == {2}, f"{n} x {k}, M={m}, MXFUSE_FP6_ROWS_X=16: launched {ran}"
            for rows_x, kernels in (("32", {4}), ("128", {"tiled"}), (None, {4})):
                got, ran = run(m, rows_x)
                assert ran == kernels, f"{n} x {k}, M={m}, MXFUSE_FP6_ROWS_X={rows_x}: launched {ran}, want {kernels}"
                assert_bitwise_equal(got, want, f"{n} x {k}, M={m}: {kernels} vs the M <= 16 kernel")
        monkeypatch.delenv("MXFUSE_FP6_ROWS_X", raising=False)
        alone = torch.cat([OPS.mxfp6_linear(x[i:i + 1], packed, scales) for i in range(129)])
        assert_bitwise_equal(alone, OPS.mxfp6_linear(x, packed, scales), f"{n} x {k}: each row alone vs in M=129")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_portable_twin_within_bound(dtype, monkeypatch):
    packed, scales, w6 = packed_on_gpu(320, 1024, dtype, 5)
    x = randn((9, 1024), dtype, 6, 1.0)
    fast = check_within_bound(x, packed, scales, w6, dtype)
    monkeypatch.setenv("MXFUSE_FORCE_PORTABLE", "1")
    twin = check_within_bound(x, packed, scales, w6, dtype)
    assert not torch.equal(twin, torch.zeros_like(twin))
    assert (twin.double() - fast.double()).abs().max() < 1.0  # sanity: the same function


def test_unfoldable_scales_within_bound():
    # Large weights (scale byte > 128) and an all-zero group (scale byte 0) take the path that
    # scales each group's fp32 partial instead of folding the scale into the decode.
    packed, scales, w6 = packed_on_gpu(64, 512, torch.bfloat16, 7, scale=1e4)
    assert int(scales.max()) > 128 and int(scales.min()) == 0
    check_within_bound(randn((5, 512), torch.bfloat16, 8, 1.0), packed, scales, w6, torch.bfloat16)


def test_nan_scale_gives_nan_rows():
    packed, scales, _ = packed_on_gpu(32, 256, torch.bfloat16, 9)
    scales = scales.clone()
    scales[3, 2] = 0xFF
    y = OPS.mxfp6_linear(randn((2, 256), torch.bfloat16, 10, 1.0).cuda(), packed, scales).cpu()
    assert torch.isnan(y[:, 3]).all() and not torch.isnan(y[:, [0, 1, 2, 4]]).any()


def test_cuda_graph_replay_equals_eager():
    packed, scales, _ = packed_on_gpu(256, 1024, torch.bfloat16, 11)
    x = torch.zeros(4, 1024, dtype=torch.bfloat16, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        OPS.mxfp6_linear(x, packed, scales)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = OPS.mxfp6_linear(x, packed, scales)
    for seed in (12, 13):
        x.copy_(randn((4, 1024), torch.bfloat16, seed, 1.0).cuda())
        g.replay()
        torch.cuda.synchronize()
        assert_bitwise_equal(y, OPS.mxfp6_linear(x, packed, scales), "graph replay vs eager")


@pytest.mark.parametrize("pdl", ["on", "prefetch_weights"])
def test_graph_replays_linears_whose_shared_memory_differs(pdl, restore_pdl):
    # With programmatic dependent launch a kernel's shared memory is padded when an SM could hold
    # more than the even share of its CTAs, so one kernel runs with more shared memory for a weight
    # of 2 CTAs per SM than for one of 3 (two row tiles per warp, 8 warps, unsplit, at both). A
    # graph holding both, replayed after eager calls of the smaller, must run both nodes.
    mxfuse.set_pdl(pdl)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    k = 1024
    layers = []
    for i, n in enumerate((64 * sms, 96 * sms, 64 * sms)):  # 2, 3 and 2 CTAs per SM
        packed, scales, _ = packed_on_gpu(n, k, torch.bfloat16, 40 + i, scale=1.0 / 8)
        layers.append((randn((5, k), torch.bfloat16, 50 + i, 1.0).cuda(), packed, scales))
    want = [OPS.mxfp6_linear(x, p, sc) for x, p, sc in layers]
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for x, p, sc in layers:
            OPS.mxfp6_linear(x, p, sc)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        ys = [OPS.mxfp6_linear(x, p, sc) for x, p, sc in layers]
    for y in ys:
        y.fill_(float("nan"))
    x, p, sc = layers[1]
    OPS.mxfp6_linear(x, p, sc)  # eager, the smaller shared memory
    g.replay()
    torch.cuda.synchronize()
    for i, (a, b) in enumerate(zip(ys, want)):
        assert_bitwise_equal(a, b, f"layer {i} in the graph vs eager, pdl={pdl}")


def test_threads_launching_one_kernel_with_different_shared_memory(restore_pdl):
    # The kernel's shared-memory cap is per kernel, and the launches of the weights above need
    # different amounts (PDL padding): each launch sets its cap and launches under one lock, so
    # host threads launching the same kernel on their own streams never have a launch refused or
    # see each other's results.
    import threading

    mxfuse.set_pdl("on")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    k = 1024
    layers = []
    for i, n in enumerate((64 * sms, 96 * sms)):  # 2 and 3 CTAs per SM
        packed, scales, _ = packed_on_gpu(n, k, torch.bfloat16, 60 + i, scale=1.0 / 8)
        layers.append((randn((3, k), torch.bfloat16, 70 + i, 1.0).cuda(), packed, scales))
    want = [OPS.mxfp6_linear(x, p, sc) for x, p, sc in layers]
    torch.cuda.synchronize()
    errors = []

    def worker(t):
        try:
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                for it in range(150):
                    x, p, sc = layers[(it + t) % 2]
                    y = OPS.mxfp6_linear(x, p, sc)
                    if it % 25 == 24:
                        s.synchronize()
                        if not torch.equal(y.view(torch.int16), want[(it + t) % 2].view(torch.int16)):
                            errors.append(f"thread {t} call {it}: result differs")
            s.synchronize()
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(f"thread {t}: {e!r}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:3]


def pdl_code_available():
    return torch.cuda.is_available() and OPS._device_code_arch(0) >= 90


@pytest.mark.parametrize("pdl", ["on", "prefetch_weights"])
@pytest.mark.parametrize("n,split", [(1024, "0"), (2048, "0"), (2048, "2"), (2048, "4"), (6144, "0"),
                                     (9216, "0")])
def test_pdl_chain_reads_what_the_previous_kernel_wrote(pdl, n, split, monkeypatch, restore_pdl):
    # Programmatic dependent launch lets each linear start while the previous kernel runs; x is
    # the previous kernel's output here (and once an in-place update right before), so any read
    # of x or write of out before the dependency wait would change the bits. Eager and graph;
    # split 2: clusters of two CTAs; 9216: two row tiles per warp, eight warps (as 12288 x 6144).
    monkeypatch.setenv("MXFUSE_FP6_SPLIT", split)
    packed, scales, _ = packed_on_gpu(n, n, torch.bfloat16, 14, scale=1.0 / 32)
    x0 = randn((3, n), torch.bfloat16, 15, 1.0).cuda()

    def chain(x):
        ys = [x]
        for i in range(6):
            y = OPS.mxfp6_linear(ys[-1], packed, scales)
            if i == 2:
                y.mul_(0.5)
            ys.append(y)
        return ys[1:]

    mxfuse.set_pdl("off")
    want = chain(x0)
    torch.cuda.synchronize()
    mxfuse.set_pdl(pdl)
    assert mxfuse.pdl_mode() == pdl
    got = chain(x0)
    for i, (a, b) in enumerate(zip(got, want)):
        assert_bitwise_equal(a, b, f"step {i} with pdl={pdl} vs without")
    xg = torch.zeros_like(x0)
    g, ys = capture_graph(lambda: chain(xg))
    xg.copy_(x0)
    g.replay()
    torch.cuda.synchronize()
    for i, (a, b) in enumerate(zip(ys, want)):
        assert_bitwise_equal(a, b, f"graph step {i} with pdl={pdl} vs eager without")


@pytest.mark.parametrize("n,k", [(2048, 2048), (2560, 6144), (12288, 6144)])
def test_pdl_on_reads_weights_the_previous_kernel_wrote(n, k, restore_pdl):
    # In the default mode the linear only warms L2 with its weights before the dependency wait
    # and reads them after it, so an in-place weight update by the kernel right before it (an xor
    # kernel flipping between two weight sets) must be seen. Eager and in a graph (back to back).
    packed, scales, _ = packed_on_gpu(n, k, torch.bfloat16, 16)
    g = torch.Generator(device="cuda").manual_seed(18)
    mask = torch.randint(0, 256, packed.shape, dtype=torch.uint8, device="cuda", generator=g)
    x = randn((4, k), torch.bfloat16, 17, 1.0).cuda()
    mxfuse.set_pdl("off")
    want = [OPS.mxfp6_linear(x, packed ^ mask, scales), OPS.mxfp6_linear(x, packed, scales)]
    mxfuse.set_pdl("on")
    w = packed.clone()

    def steps():
        ys = []
        for _ in range(6):
            w.bitwise_xor_(mask)
            ys.append(OPS.mxfp6_linear(x, w, scales))
        return ys

    for i, y in enumerate(steps()):
        assert_bitwise_equal(y, want[i % 2], f"eager step {i}")
    graph, ys = capture_graph(steps)
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        for i, y in enumerate(ys):
            assert_bitwise_equal(y, want[i % 2], f"graph step {i}")


def captured_modes():
    """(launches switched to mode 2 or 3, of them to mode 3) so far (launch_mxfp6_linear)."""
    return OPS._fp6_captured_prefetches(), OPS._fp6_captured_independent()


def mode_steps(fns):
    """Runs fns in order and records the mode each linear launch got from the capture check:
    1 (none), 2 (weights before the wait) or 3 (everything but the stores before it). Returns
    (outputs, modes)."""
    ys, modes = [], []
    for fn in fns:
        p0, i0 = captured_modes()
        ys.append(fn())
        p1, i1 = captured_modes()
        modes.append(1 + (p1 - p0) + (i1 - i0))
    return ys, modes


def check_captured_chain(fns, modes):
    """fns run eagerly in `off` give the expected outputs. Eagerly in `on` every launch keeps mode
    1 with the same bits; captured in `on`, the linear launches get `modes` (mode_steps), and
    three replays, every output poisoned with NaN first, give the same bits."""
    recorded = {}

    def steps():
        ys, recorded["modes"] = mode_steps(fns)
        return ys

    mxfuse.set_pdl("off")
    want = steps()
    mxfuse.set_pdl("on")
    got = steps()
    torch.cuda.synchronize()
    assert recorded["modes"] == [1] * len(fns), "an eager launch read early"
    for i, (a, b) in enumerate(zip(got, want)):
        assert_bitwise_equal(a, b, f"eager on, step {i}")
    graph, ys = capture_graph(steps)
    assert recorded["modes"] == modes
    for r in range(3):
        for t in ys:
            t.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        for i, (a, b) in enumerate(zip(ys, want)):
            assert_bitwise_equal(a, b, f"replay {r}, step {i}")


@pytest.mark.skipif(not pdl_code_available(), reason="needs sm_90 device code (programmatic dependent launch)")
@pytest.mark.parametrize("n,k", [(2560, 6144), (12288, 6144), (2048, 2048)])
def test_captured_linear_after_a_linear_streams_its_weights_early(n, k, restore_pdl):
    # In `on`, a linear captured right after another linear (which writes only its output, and
    # lets its dependents start only after its own wait, or at once where it ran in mode 3)
    # streams its weights before its wait; here x is written by no linear either, so each such
    # linear runs whole before its wait (mode 3). Not after another kernel, not as the graph's
    # first node, never eagerly. Bits as in `off`, eager, on every replay.
    sets = [packed_on_gpu(n, k, torch.bfloat16, 40 + i, scale=1.0 / 16)[:2] for i in range(3)]
    x = randn((5, k), torch.bfloat16, 44, 1.0).cuda()
    t = {}

    def other():
        t["t"] = x * 1.0  # another kernel
        return t["t"]

    fns = [lambda: OPS.mxfp6_linear(x, *sets[0]),       # first node: mode 1
           lambda: OPS.mxfp6_linear(x, *sets[1]),       # after a linear: mode 3
           lambda: OPS.mxfp6_linear(x, *sets[2]),       # after a linear in mode 3: mode 3
           other,
           lambda: OPS.mxfp6_linear(t["t"], *sets[0]),  # after another kernel: mode 1
           lambda: OPS.mxfp6_linear(x, *sets[1])]       # after a linear: mode 3
    check_captured_chain(fns, [1, 3, 3, 1, 1, 3])


@pytest.mark.skipif(not pdl_code_available(), reason="needs sm_90 device code (programmatic dependent launch)")
@pytest.mark.parametrize("n", [2048, 4096])
def test_captured_chain_reads_early_only_what_no_running_linear_writes(n, restore_pdl):
    # A linear in mode 3 lets the next kernel start at its own start, so the linear before it may
    # still run then: the capture check walks back through such linears. Outputs are poisoned with
    # NaN before every replay, and the first linear is the largest, so reading its output early
    # would show. Modes from the counters, bits as eager `off`.
    big = packed_on_gpu(n, n, torch.bfloat16, 60, scale=1.0 / 32)[:2]
    small = [packed_on_gpu(n, n, torch.bfloat16, 61 + i, scale=1.0 / 32)[:2] for i in range(2)]
    x0 = randn((4, n), torch.bfloat16, 63, 1.0).cuda()
    y = {}

    def lin(name, x, w):
        def f():
            y[name] = OPS.mxfp6_linear(x() if callable(x) else x, *w)
            return y[name]
        return f

    fns = [lin(1, x0, big),                 # first node: mode 1
           lin(2, x0, small[0]),            # x, weights written by no linear: mode 3
           lin(3, lambda: y[1], small[1]),  # x written by linear 1, which may still run: mode 2
           lin(4, x0, small[0]),            # linear 3 (mode 2) writes neither: mode 3
           lin(5, lambda: y[3], small[1]),  # linear 3 behind linear 4 (mode 3) writes x: mode 2
           lin(6, lambda: y[5], big)]       # linear 5 (mode 2) writes x: mode 2
    check_captured_chain(fns, [1, 3, 2, 3, 2, 2])


@pytest.mark.skipif(not pdl_code_available(), reason="needs sm_90 device code (programmatic dependent launch)")
def test_prefetch_weights_behind_a_mode_3_linear_waits_for_the_writer(restore_pdl):
    # prefetch_weights trusts that the kernel right before does not write the weights. When that
    # kernel is a linear in mode 3, the one before it may still run: if that one writes the
    # weights, the capture check falls back to mode 1 (reads after the wait).
    n, k = 16, 128
    base_packed, base_scales, _ = packed_on_gpu(n, k, torch.bfloat16, 64)
    kw = 4096
    wp, ws, _ = packed_on_gpu(base_packed.numel() // 2, kw, torch.bfloat16, 65, scale=1.0 / 64)
    other = packed_on_gpu(1024, kw, torch.bfloat16, 66)[:2]
    xw = randn((1, kw), torch.bfloat16, 67, 1.0).cuda()
    x = randn((3, k), torch.bfloat16, 68, 1.0).cuda()
    y = {}

    def writer():
        y["w"] = OPS.mxfp6_linear(xw, wp, ws)  # [1, bytes / 2]: the next-but-one linear's codes
        return y["w"]

    def reader():
        mode = mxfuse.pdl_mode()
        mxfuse.set_pdl("prefetch_weights")
        out = OPS.mxfp6_linear(x, y["w"].view(torch.uint8).view(base_packed.shape), base_scales)
        mxfuse.set_pdl(mode)
        return out

    check_captured_chain([writer, lambda: OPS.mxfp6_linear(xw, *other), reader], [1, 3, 1])


@pytest.mark.skipif(not pdl_code_available(), reason="needs sm_90 device code (programmatic dependent launch)")
@pytest.mark.parametrize("target,mode", [("packed", 1), ("scales", 1), ("x", 2), ("bias", 3)])
def test_captured_linear_reading_what_the_previous_linear_writes(target, mode, restore_pdl):
    # The previous linear's output, viewed as bytes, is this linear's packed codes, its scale
    # bytes, its x or its bias. Weights written by the kernel right before: mode 1 (read after the
    # wait); x: mode 2 (weights before the wait, x after); the bias is read after the wait in
    # every mode: mode 3. The result must use the new bytes.
    n, k = 16, 128
    base_packed, base_scales, _ = packed_on_gpu(n, k, torch.bfloat16, 46)
    x = randn((3, k), torch.bfloat16, 49, 1.0).cuda()
    bias = randn((n,), torch.bfloat16, 50, 1.0).cuda()
    nbytes = {"packed": base_packed.numel(), "scales": base_scales.numel(), "x": x.numel() * 2,
              "bias": bias.numel() * 2}[target]
    kw = 256
    wp, ws, _ = packed_on_gpu(nbytes // 2, kw, torch.bfloat16, 47, scale=1.0 / 64)
    xw = randn((1, kw), torch.bfloat16, 48, 1.0).cuda()
    y = {}

    def writer():
        y["w"] = OPS.mxfp6_linear(xw, wp, ws)  # [1, nbytes / 2] bf16: nbytes bytes
        return y["w"]

    def reader():
        b = y["w"].view(torch.uint8)
        args = {"packed": base_packed, "scales": base_scales, "x": x, "bias": bias}
        if target in ("packed", "scales"):
            # Raw output bytes as codes or E8M0 scales (NaN and huge ones included): the check is
            # bitwise equality with the eager run, which reads them after they were written.
            args[target] = b.view(args[target].shape)
        else:
            args[target] = y["w"].view(args[target].shape)
        return OPS.mxfp6_linear(args["x"], args["packed"], args["scales"], args["bias"])

    check_captured_chain([writer, reader], [1, mode])


@pytest.mark.skipif(not pdl_code_available(), reason="needs sm_90 device code (programmatic dependent launch)")
@pytest.mark.parametrize("hidden", [2048, 6144])
def test_pdl_norm_and_quantize_kernels_wait_for_the_kernel_before(hidden, restore_pdl):
    # In `on` the norm, quantize and dequantize kernels are launched with programmatic dependent
    # launch too: placed while the kernel before them runs (a linear lets its dependents start
    # right after its own wait), they wait for it before touching memory. Here the fused-add norm
    # reads the linear's output and updates in place the residual the linear reads as x, a norm
    # reads the previous norm's output, a dequantize the norm's codes, and a quantize the second
    # linear's output: any access before the wait would change the bits. The linears are the
    # slow kernels ([hidden, hidden] weights). Eager, and in a graph whose outputs are poisoned
    # before each replay; against eager `off`.
    packed, scales, _ = packed_on_gpu(hidden, hidden, torch.bfloat16, 80, scale=1.0 / 16)
    nw = randn((hidden,), torch.bfloat16, 81, 0.1).cuda()
    h0 = randn((3, hidden), torch.bfloat16, 82, 1.0).cuda()
    h = h0.clone()

    def steps():
        outs = []
        for _ in range(2):
            y = OPS.mxfp6_linear(h, packed, scales)                          # reads h
            nrm = OPS.gemma_fused_add_rmsnorm(y, h, nw, 1e-6, 1.0)           # reads y, writes h
            codes, sc = OPS.gemma_rmsnorm_mxfp8(nrm, nw, 1e-6, 1.0, "ceil")  # reads nrm
            d = OPS.mxfp8_dequantize(codes, sc, torch.bfloat16)              # reads codes, sc
            y2 = OPS.mxfp6_linear(d, packed, scales)
            qc, qs = OPS.mxfp8_quantize(y2, "ceil")                          # reads y2
            outs += [y, nrm, codes.view(torch.uint8), sc, d, y2, qc.view(torch.uint8), qs, h.clone()]
        return outs

    def poison(ts):
        for t in ts:
            t.fill_(float("nan") if t.is_floating_point() else 0xFF)  # e4m3 and E8M0 NaN

    mxfuse.set_pdl("off")
    want = steps()
    for mode in ("on", "prefetch_weights"):
        mxfuse.set_pdl(mode)
        h.copy_(h0)
        got = steps()
        torch.cuda.synchronize()
        for i, (a, b) in enumerate(zip(got, want)):
            assert_bitwise_equal(a, b, f"eager {mode}, output {i}")
        h.copy_(h0)
        graph, ys = capture_graph(steps)
        for r in range(3):
            poison(ys)
            h.copy_(h0)
            graph.replay()
            torch.cuda.synchronize()
            for i, (a, b) in enumerate(zip(ys, want)):
                assert_bitwise_equal(a, b, f"{mode} replay {r}, output {i}")
        del graph


def test_pack_large_weight_matches_cpu():
    w = weight(12288, 1024, torch.bfloat16, 14)
    pg, sg = OPS.mxfp6_pack(w.cuda(), "floor")
    pc, sc = ref.mxfp6_pack(w)
    assert_bitwise_equal(pg.cpu(), pc, "packed GPU vs reference")
    assert_bitwise_equal(sg.cpu(), sc, "scales GPU vs reference")


def test_unpack_more_row_tiles_than_one_grid_dimension():
    # The GPU unpack to bf16 runs a CTA per two tiles of a row tile on a (K / 256 rounded up,
    # min(N / 16, 65535)) grid, and a CTA takes row tiles tn, tn + 65535, ...: 65537 row tiles
    # (1 048 592 rows) cover both the step and the row tiles past it, and K = 128 a CTA whose
    # second tile is past K. Random codes and scales, every element checked against the CPU op
    # and the poison-filled output fully written.
    tiles = 65537
    g = torch.Generator().manual_seed(21)
    packed = torch.randint(0, 256, (tiles, 1, 1536), dtype=torch.uint8, generator=g)
    scales = torch.randint(100, 150, (tiles * 16, 4), dtype=torch.uint8, generator=g)
    want = OPS.mxfp6_unpack(packed, scales, torch.bfloat16)
    got = run_poisoned(lambda: OPS.mxfp6_unpack(packed.cuda(), scales.cuda(), torch.bfloat16))[0]
    assert_bitwise_equal(got, want, "GPU unpack of 65537 row tiles vs CPU")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_pack_and_round_more_row_tiles_than_one_grid_dimension(dtype):
    # The GPU pack and round_ run a CTA per two tiles of a row tile on a (K / 256 rounded up,
    # min(N / 16, 65535)) grid, and a CTA takes row tiles tn, tn + 65535, ...: 65537 row tiles
    # (1 048 592 rows) cover both the step and the row tiles past it, and K = 128 a CTA whose
    # second tile is past K. Outputs poison-filled and checked against the CPU op.
    rows = 65537 * 16
    g = torch.Generator().manual_seed(22)
    row_scale = torch.exp2(torch.randint(-12, 8, (rows, 1), generator=g).float())  # fp16-finite
    w = (torch.randn(rows, 128, generator=g) * row_scale).to(dtype)
    pc, sc = OPS.mxfp6_pack(w, "floor")
    pg, sg = run_poisoned(lambda: OPS.mxfp6_pack(w.cuda(), "floor"))
    assert_bitwise_equal(pg, pc, "GPU pack of 65537 row tiles vs CPU: packed")
    assert_bitwise_equal(sg, sc, "GPU pack of 65537 row tiles vs CPU: scales")
    wg, wc = w.cuda(), w.clone()
    OPS.mxfp6_round_(wg, "floor")
    OPS.mxfp6_round_(wc, "floor")
    assert_bitwise_equal(wg, wc, "GPU round_ of 65537 row tiles vs CPU")
    assert not torch.equal(wc, w), "round_ must change a random weight"
