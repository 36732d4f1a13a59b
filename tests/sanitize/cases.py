"""Every GPU kernel family of mxfuse on small inputs that reach each launch shape and code path, for
NVIDIA compute-sanitizer (scripts/sanitize.sh runs it under memcheck, racecheck, synccheck and
initcheck). Each case also checks its result (GPU against CPU bit for bit where SPEC says so,
fused against unfused, every PDL mode and K split against the default), so a case that stopped
reaching its kernel or computed garbage fails here too. Exits non-zero on the first failed check.

    python tests/sanitize/cases.py [--quick]

--quick (racecheck, the slowest tool): one dtype and fewer batch sizes per family.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import mxfuse  # noqa: E402
from conftest import assert_bitwise_equal, capture_graph, fp6_weights, randn  # noqa: E402
from test_attention_front import QWEN3_NEXT, SMALL, Front  # noqa: E402

CASES = 0


def check(ok: bool, what: str) -> None:
    """One counted check; a failure ends the run (non-zero exit) with what failed."""
    global CASES
    CASES += 1
    if not ok:
        raise SystemExit(f"FAILED: {what}")


def equal(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    try:
        assert_bitwise_equal(got, want, what)
        ok, msg = True, what
    except AssertionError as e:
        ok, msg = False, str(e)
    check(ok, msg)


def near_exact(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """The tensor-core MXFP8 kernel against the exact one: NaN at the same places, the rest within
    a few bf16 ulps of the exact result (the block dots' order differs)."""
    g, w = got.float().cpu(), want.float()
    check(torch.equal(torch.isnan(g), torch.isnan(w)), f"{what}: NaN positions differ")
    ok = ~torch.isnan(w)
    check(bool(((g[ok] - w[ok]).abs() <= 2 ** -6 * w[ok].abs() + 1e-3).all()),
          f"{what}: max diff {(g[ok] - w[ok]).abs().max().item()}")


def norms(dtypes, ms) -> None:
    for dt in dtypes:
        for m, h in [(m, 2048) for m in ms] + [(3, 96), (2, 6144)]:
            x, r, w = randn((m, h), dt, 1), randn((m, h), dt, 2, 4.0), randn((h,), dt, 3, 0.2)
            xg, rg, wg = x.cuda(), r.cuda(), w.cuda()
            equal(mxfuse.gemma_rmsnorm(xg, wg), mxfuse.gemma_rmsnorm(x, w), f"gemma_rmsnorm {dt} {m}x{h}")
            for rule in ("ceil", "floor"):
                cq = mxfuse.gemma_rmsnorm_mxfp8(x, w, scale_rule=rule)
                gq = mxfuse.gemma_rmsnorm_mxfp8(xg, wg, scale_rule=rule)
                for a, b in zip(gq, cq):
                    equal(a, b, f"gemma_rmsnorm_mxfp8 {rule} {dt} {m}x{h}")
            rc, rgc = r.clone(), rg.clone()
            equal(mxfuse.gemma_fused_add_rmsnorm(xg, rgc, wg), mxfuse.gemma_fused_add_rmsnorm(x, rc, w),
                  f"gemma_fused_add_rmsnorm {dt} {m}x{h}")
            equal(rgc, rc, "residual")
            rc, rgc = r.clone(), rg.clone()
            for a, b in zip(mxfuse.gemma_fused_add_rmsnorm_mxfp8(xg, rgc, wg),
                            mxfuse.gemma_fused_add_rmsnorm_mxfp8(x, rc, w)):
                equal(a, b, f"gemma_fused_add_rmsnorm_mxfp8 {dt} {m}x{h}")
            equal(rgc, rc, "residual (mxfp8)")
            codes, scales = mxfuse.mxfp8_quantize(x)
            for a, b in zip(mxfuse.mxfp8_quantize(xg), (codes, scales)):
                equal(a, b, f"mxfp8_quantize {dt} {m}x{h}")
            equal(mxfuse.mxfp8_dequantize(codes.cuda(), scales.cuda(), dt),
                  mxfuse.mxfp8_dequantize(codes, scales, dt), f"mxfp8_dequantize {dt} {m}x{h}")


FP6_SHAPES = [(64, 256), (1024, 2048), (2048, 4096), (2560, 6144), (9216, 2048), (4224, 4096), (4224, 2048)]


def fp6_pack_unpack(dtypes) -> None:
    """pack, round_ and unpack; the unpack to every output dtype (two tiles per CTA for 16-bit
    outputs, so 48 x 384 has a CTA with one tile)."""
    for dt in dtypes:
        for n, k in [(64, 256), (48, 384), (2560, 6144)]:
            w = fp6_weights(n, k, dt, 5)
            packed, scales = mxfuse.mxfp6_pack(w)
            pg, sg = mxfuse.mxfp6_pack(w.cuda())
            equal(pg, packed, f"mxfp6_pack {dt} {n}x{k}")
            equal(sg, scales, f"mxfp6_pack scales {dt} {n}x{k}")
            for out in (torch.bfloat16, torch.float16, torch.float32):
                equal(mxfuse.mxfp6_unpack(pg, sg, out), mxfuse.mxfp6_unpack(packed, scales, out),
                      f"mxfp6_unpack {dt} {n}x{k} to {out}")
            wr, wgr = w.clone(), w.cuda()
            mxfuse.mxfp6_round_(wr)
            mxfuse.mxfp6_round_(wgr)
            equal(wgr, wr, f"mxfp6_round_ {dt} {n}x{k}")


def fp6(dtypes, ms) -> None:
    fp6_pack_unpack(dtypes)
    # The linear: every launch shape of the heuristic (2560 x 6144: two row tiles, 4 warps,
    # clusters of 4; 9216 x 2048: two row tiles, 8 warps; 2048 x 4096 and 64 x 256: one row tile
    # and K split over clusters; 1024 x 2048: one row tile, cluster of 2; on 132 SMs 4224 x 4096:
    # two row tiles, 8 warps, clusters of 2 and 4224 x 2048: two row tiles, 4 warps, clusters of
    # 2), both item sizes, every PDL mode. Within one weight shape every mode and item size gives
    # the default's bits.
    shapes = FP6_SHAPES
    for dt in dtypes:
        for n, k in shapes:
            w = fp6_weights(n, k, dt, 7)
            packed, scales = mxfuse.mxfp6_pack(w.cuda())
            bias = randn((n,), dt, 8).cuda()
            for m in ms:
                x = randn((m, k), dt, 9).cuda()
                mxfuse.set_pdl("off")
                want = mxfuse.mxfp6_linear(x, packed, scales, bias)
                for mode in ("on", "prefetch_weights"):
                    mxfuse.set_pdl(mode)
                    for item in ("1", "2"):
                        os.environ["MXFUSE_FP6_ITEM_RT"] = item
                        # two calls back to back: the second is launched while the first runs
                        y1 = mxfuse.mxfp6_linear(x, packed, scales, bias)
                        y2 = mxfuse.mxfp6_linear(x, packed, scales, bias)
                        equal(y1, want, f"mxfp6_linear {dt} {n}x{k} m={m} {mode} item_rt={item}")
                        equal(y2, want, f"mxfp6_linear {dt} {n}x{k} m={m} {mode} item_rt={item} (2nd)")
                    os.environ.pop("MXFUSE_FP6_ITEM_RT")
                mxfuse.set_pdl("on")
                # A pinned shape that the heuristic does not pick here (its order differs, so only
                # against the fp64 product of the unpacked weights, loosely).
                for env in ({"MXFUSE_FP6_RT": "1", "MXFUSE_FP6_WARPS": "8", "MXFUSE_FP6_SPLIT": "8"},
                            {"MXFUSE_FP6_RT": "2", "MXFUSE_FP6_WARPS": "4", "MXFUSE_FP6_SPLIT": "2"}):
                    os.environ.update(env)
                    y = mxfuse.mxfp6_linear(x, packed, scales, bias)
                    for v in env:
                        os.environ.pop(v)
                    ref = x.double() @ mxfuse.mxfp6_unpack(packed, scales, dt).double().T + bias.double()
                    err = ((y.double() - ref).norm() / ref.norm()).item()
                    check(err < 1e-2, f"mxfp6_linear pinned {env} {dt} {n}x{k} m={m}: rel err {err}")
    fp6_tiled(dtypes, shapes)


def fp6_tiled(dtypes, shapes) -> None:
    """Above M = 16: the tiled kernel (MXFUSE_FP6_ROWS_X=128; the default above M = 384) against the
    32-row kernel, a partial block of 128 rows of x and one whole one plus one row. fp6_weights
    gives warps whose four row tiles all fold (the straight path), warps with a mix (the per-tile
    path) and, in fp16, none folded; 64 x 256 and 208 x 512 leave warps with fewer than four valid
    row tiles."""
    for dt in dtypes:
        for n, k in shapes + [(208, 512)]:
            w = fp6_weights(n, k, dt, 7)
            packed, scales = mxfuse.mxfp6_pack(w.cuda())
            bias = randn((n,), dt, 8).cuda()
            for m in (37, 129):
                x = randn((m, k), dt, 10).cuda()
                got = {}
                for rows_x in ("32", "128"):
                    os.environ["MXFUSE_FP6_ROWS_X"] = rows_x
                    got[rows_x] = mxfuse.mxfp6_linear(x, packed, scales, bias)
                os.environ.pop("MXFUSE_FP6_ROWS_X")
                equal(got["128"], got["32"], f"mxfp6_linear tiled {dt} {n}x{k} m={m}")


def fp6_graph(ms) -> None:
    """A captured chain of linears in `on`: each linear after a linear runs whole before its wait
    (x and weights written by no linear: launch_mxfp6_linear's capture check, mode 3), with the
    next one starting beside it; the graph is replayed twice, every output
    poisoned first, bits as eager `off`. Capture cannot allocate without the caching allocator,
    so this section runs with it (scripts/sanitize.sh): accesses are then checked against the
    allocator's blocks, not each tensor's bytes."""
    if os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1":
        raise SystemExit("fp6_graph: needs the caching allocator (unset PYTORCH_NO_CUDA_MEMORY_CACHING)")
    for n, k in [(2560, 6144), (9216, 2048)]:
        sets = [mxfuse.mxfp6_pack(fp6_weights(n, k, torch.bfloat16, 20 + i).cuda()) for i in range(3)]
        for m in ms:
            x = randn((m, k), torch.bfloat16, 23).cuda()

            def chain():
                return [mxfuse.mxfp6_linear(x, *s) for s in sets]

            mxfuse.set_pdl("off")
            want = chain()
            mxfuse.set_pdl("on")
            before = torch.ops.mxfuse._fp6_captured_independent()
            graph, ys = capture_graph(chain)  # its eager warm-up launches count nothing
            check(torch.ops.mxfuse._fp6_captured_independent() - before == len(sets) - 1,
                  f"captured chain {n}x{k} m={m}: linears after a linear run whole before their wait")
            for _ in range(2):
                for y in ys:
                    y.fill_(float("nan"))
                graph.replay()
                for i, (y, w) in enumerate(zip(ys, want)):
                    equal(y, w, f"mxfp6_linear captured chain {n}x{k} m={m} step {i}")
            del graph


def front(dtypes, ms) -> None:
    for dt in dtypes:
        for cfg in SMALL + [QWEN3_NEXT]:
            for m in ms:
                f = Front(cfg, m, dt, "cuda")
                for mode in ("off", "on", "prefetch_weights"):
                    mxfuse.set_pdl(mode)
                    got = f.run()
                    want = f.run(mxfuse.attention_front_unfused)
                    three = f.run(mxfuse.attention_front, fused=False)  # qk_norm_rope_cache's kernel
                    for i, (a, b, c) in enumerate(zip(got, want, three)):
                        equal(a, b, f"attention_front {dt} {cfg} m={m} {mode} output {i}")
                        equal(c, b, f"attention_front (three launches) {dt} {cfg} m={m} {mode} output {i}")
                mxfuse.set_pdl("on")


def qk(dtypes, ms) -> None:
    """qk_norm_rope_cache alone (also part of front, through the three-launch path): GPU against
    CPU, fp8 and activation-dtype caches, gate and no gate, d = 16 to 512."""
    from test_qk_norm_rope_cache import Post  # noqa: E402
    for dt in dtypes:
        for cfg in SMALL + [QWEN3_NEXT, (4096, 4, 1, 512, 64, True)]:
            for cache in (torch.float8_e4m3fn, dt):
                for m in ms:
                    kw = dict(max_pos=4096, blocks=64, block_size=16, cache_dtype=cache)
                    got = Post(cfg, m, dt, "cuda", seed=m, **kw).run()
                    want = Post(cfg, m, dt, "cpu", seed=m, **kw).run()
                    for i, (a, b) in enumerate(zip(got, want)):
                        equal(a.cpu(), b, f"qk_norm_rope_cache {dt} {cfg} {cache} m={m} output {i}")


def fp8_mm(ms, quick) -> None:
    g = torch.Generator().manual_seed(11)
    for n, k in [(40, 96), (2560, 6144)] + ([] if quick else [(48, 4128)]):
        b, bs = mxfuse.mxfp8_quantize(torch.randn(n, k, generator=g) * 0.02)
        bs[0, 0] = 255  # a NaN scale
        bs[1, :] = 40  # scales whose block terms leave the one-multiply case
        bias = torch.randn(n, generator=g).to(torch.bfloat16)
        for m in ms:
            a, as_ = mxfuse.mxfp8_quantize(torch.randn(m, k, generator=g))
            as_[-1, -1] = 200
            for layout in ("1x32", "32x32"):
                if layout == "32x32" and n % 32:
                    continue
                bsl = bs if layout == "1x32" else bs[::32].contiguous()
                want = mxfuse.mxfp8_scaled_mm(a, as_, b, bsl, torch.bfloat16, bias, b_scale_layout=layout)
                args = (a.cuda(), as_.cuda(), b.cuda(), bsl.cuda(), torch.bfloat16, bias.cuda())
                mxfuse.set_fp8_mm_kernel("exact")
                equal(mxfuse.mxfp8_scaled_mm(*args, b_scale_layout=layout), want,
                      f"mxfp8_scaled_mm exact {n}x{k} m={m} {layout}")
                if torch.cuda.get_device_capability() >= (8, 9):
                    mxfuse.set_fp8_mm_kernel("tensor_cores")
                    # K split and cluster split (auto: 2560 x 6144 at M <= 16 shares tiles over
                    # clusters of 2).
                    for warps, split in [("", "")] + ([] if quick else [("1", ""), ("16", ""), ("", "4")]):
                        os.environ["MXFUSE_FP8_TC_WARPS"], os.environ["MXFUSE_FP8_TC_SPLIT"] = warps, split
                        y = mxfuse.mxfp8_scaled_mm(*args, b_scale_layout=layout)
                        os.environ.pop("MXFUSE_FP8_TC_WARPS")
                        os.environ.pop("MXFUSE_FP8_TC_SPLIT")
                        near_exact(y, want, f"mxfp8_scaled_mm tensor_cores warps={warps or 'auto'} "
                                   f"split={split or 'auto'} {n}x{k} m={m} {layout}")
                    mxfuse.set_fp8_mm_kernel("exact")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="*", default=["norms", "fp6", "front", "fp8_mm"],
                    help="sections; fp6_graph (a captured chain) is run on its own, with the caching "
                    "allocator; fp6_tiled (the tiled linear alone, also part of fp6); fp6_unpack "
                    "(pack, round_ and unpack alone, also part of fp6); qk (qk_norm_rope_cache alone, also part of "
                    "front)")
    args = ap.parse_args()
    dtypes = [torch.bfloat16] if args.quick else [torch.bfloat16, torch.float16]
    t0 = time.time()
    if "norms" in args.only:
        norms(dtypes, [1, 37] if args.quick else [1, 5, 37])
    if "fp6" in args.only:
        fp6(dtypes, [1, 16, 37] if args.quick else [1, 3, 8, 16, 37])
    if "fp6_unpack" in args.only and "fp6" not in args.only:
        fp6_pack_unpack(dtypes)
    if "fp6_tiled" in args.only and "fp6" not in args.only:
        fp6_tiled(dtypes, FP6_SHAPES)
    if "fp6_graph" in args.only:
        fp6_graph([1, 16] if args.quick else [1, 8, 16])
    if "front" in args.only:
        front(dtypes, [1, 8, 9] if args.quick else [1, 2, 4, 8, 9])
    if "qk" in args.only:
        qk(dtypes, [1, 9] if args.quick else [1, 2, 9, 37])
    if "fp8_mm" in args.only:
        fp8_mm([1, 16, 37] if args.quick else [1, 2, 3, 8, 16, 37], args.quick)
    torch.cuda.synchronize()
    print(f"sanitize cases: {CASES} checks passed in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
