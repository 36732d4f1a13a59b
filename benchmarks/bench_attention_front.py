"""The attention front of a decode step (SPEC §6) on the GPU: ``mxfuse.attention_front`` as one
launch (``fused=True``, in each PDL mode) and as three (``fused=False``: add + norm, mxfp6_linear,
``qk_norm_rope_cache``) against the same steps as separate launches: the library's unfused ops
(``mxfuse.attention_front_unfused``: add + norm, mxfp6_linear, two head norms, two RoPEs, the
cache write, and the copies that split the heads) and two bf16 baselines with bf16 ``F.linear`` on
the rounded weights in place of mxfp6_linear: the unfused chain, and the three-launch chain (norm,
``F.linear``, ``qk_norm_rope_cache``). Weights, inputs and caches cycle through 16 sets; every
call's outputs are verified (one launch == three launches == unfused, bit for bit) before timing.

    python benchmarks/bench_attention_front.py [--out benchmarks/results/h200_attention_front]
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
from mxfuse.ops import PDL_MODES as MODES  # noqa: E402

# (hidden, q heads, kv heads, head_dim, rotary_dim, output gate): Qwen3-Next-80B's full-attention
# layer (qkv 2048 -> 9216) and a 6144-wide model's (6144 -> 9216).
SHAPES = [(2048, 16, 2, 256, 64, True), (6144, 32, 4, 128, 64, True)]
MS = [1, 4, 8, 16]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/h200_attention_front")
    ap.add_argument("--ms", type=int, nargs="*", default=MS)
    args = ap.parse_args()
    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    default_mode = mxfuse.pdl_mode()
    sets = harness.INPUT_SETS
    copy_gbs = harness.copy_bandwidth_gbs()
    print(f"copy bandwidth: {copy_gbs:.0f} GB/s (read + write)", flush=True)
    rows, table = [], []
    for hidden, hq, hkv, d, rd, gate in SHAPES:
        n = hq * d * (2 if gate else 1) + 2 * hkv * d
        kw = dict(num_q_heads=hq, num_kv_heads=hkv, head_dim=d, rotary_dim=rd, output_gate=gate)
        ws, packs, nws, qws, kws = [], [], [], [], []
        for _ in range(sets):
            w = torch.randn(n, hidden, dtype=dt, device=dev) * hidden ** -0.5
            mxfuse.mxfp6_round_(w)
            ws.append(w)
            packs.append(mxfuse.mxfp6_pack(w))
            nws.append(torch.randn(hidden, dtype=dt, device=dev) * 0.1)
            qws.append(torch.randn(d, dtype=dt, device=dev) * 0.1)
            kws.append(torch.randn(d, dtype=dt, device=dev) * 0.1)
        ang = torch.arange(4096, device=dev, dtype=torch.float32)[:, None] * torch.rand(rd // 2, device=dev)
        cos_sin = torch.cat([ang.cos(), ang.sin()], dim=1)
        blocks, block_size = 64, 16
        caches = [(torch.zeros(blocks, block_size, hkv, d, device=dev, dtype=torch.uint8).view(torch.float8_e4m3fn),
                   torch.zeros(blocks, block_size, hkv, d, device=dev, dtype=torch.uint8).view(torch.float8_e4m3fn))
                  for _ in range(sets)]
        k_scale = torch.tensor([0.5], device=dev)
        v_scale = torch.tensor([0.25], device=dev)
        workspace = mxfuse.attention_front_workspace(dev)
        for m in args.ms:
            xs = [torch.randn(m, hidden, dtype=dt, device=dev) for _ in range(sets)]
            rs = [torch.randn(m, hidden, dtype=dt, device=dev) for _ in range(sets)]
            pos = [torch.randint(0, 4096, (m,), device=dev) for _ in range(sets)]
            slots = [torch.randperm(blocks * block_size, device=dev)[:m] for _ in range(sets)]

            def call_args(i, r=None, kc=None, vc=None):
                c = caches[i]
                return (xs[i], rs[i] if r is None else r, nws[i], *packs[i], qws[i], kws[i], cos_sin, pos[i],
                        slots[i], c[0] if kc is None else kc, c[1] if vc is None else vc, k_scale, v_scale)

            def fused(i):
                mxfuse.attention_front(*call_args(i), **kw, workspace=workspace, fused=True)

            def unfused(i):
                mxfuse.attention_front_unfused(*call_args(i), **kw)

            def three(i):
                mxfuse.attention_front(*call_args(i), **kw, fused=False)

            def bf16_three(i):
                c = caches[i]
                y = mxfuse.gemma_fused_add_rmsnorm(xs[i], rs[i], nws[i])
                return mxfuse.qk_norm_rope_cache(F.linear(y, ws[i]), qws[i], kws[i], cos_sin, pos[i], slots[i], c[0],
                                                 c[1], k_scale, v_scale, **kw)

            def bf16_chain(i):
                c = caches[i]
                y = mxfuse.gemma_fused_add_rmsnorm(xs[i], rs[i], nws[i])
                qkv = F.linear(y, ws[i])
                qw = hq * d * (2 if gate else 1)
                qg = qkv[:, :qw].reshape(m, hq, -1)
                k = qkv[:, qw:qw + hkv * d].reshape(m, hkv, d)
                v = qkv[:, qw + hkv * d:].reshape(m, hkv, d)
                q = mxfuse.rotary_embedding_neox(mxfuse.gemma_rmsnorm(qg[..., :d].contiguous(), qws[i]), pos[i], cos_sin, rd)
                k = mxfuse.rotary_embedding_neox(mxfuse.gemma_rmsnorm(k.contiguous(), kws[i]), pos[i], cos_sin, rd)
                mxfuse.reshape_and_cache_flash(k, v, c[0], c[1], slots[i], k_scale, v_scale)
                return q, qg[..., d:]

            # Verify on every set: fused == unfused in every launch mode (q, gate, residual, caches).
            for i in range(sets):
                outs = []
                for fused_flag, mode in [("unfused", default_mode)] + [(f, md) for f in (False, True) for md in MODES]:
                    mxfuse.set_pdl(mode)
                    r = rs[i].clone()
                    kc, vc = caches[i][0].clone(), caches[i][1].clone()
                    if fused_flag == "unfused":
                        q, g = mxfuse.attention_front_unfused(*call_args(i, r, kc, vc), **kw)
                    else:
                        q, g = mxfuse.attention_front(*call_args(i, r, kc, vc), **kw, fused=fused_flag)
                    outs.append([t.view(torch.uint8) for t in (q, g, r, kc, vc)])
                for o in outs[1:]:
                    if not all(torch.equal(a, b) for a, b in zip(o, outs[0])):
                        raise SystemExit(f"verification failed: hidden {hidden} m {m} set {i}: a path != unfused")
            mxfuse.set_pdl(default_mode)
            t = harness.graph_time_us_per_pdl_mode(fused, MODES)
            t_unf = harness.graph_time_us(unfused)
            t_three = harness.graph_time_us(three)
            t_bf16 = harness.graph_time_us(bf16_chain)
            t_bf16_3 = harness.graph_time_us(bf16_three)
            wbytes = packs[0][0].numel() + packs[0][1].numel()  # the weight stream, the bulk of the bytes
            p = {"hidden": hidden, "n": n, "m": m, "q_heads": hq, "kv_heads": hkv, "head_dim": d}
            for mode in MODES:
                rows.append(harness.make_row("attention_front", {**p, "pdl": mode}, t[mode], wbytes, copy_gbs))
            rows.append(harness.make_row("attention_front_unfused", {**p, "pdl": default_mode}, t_unf, wbytes, copy_gbs))
            rows.append(harness.make_row("attention_front_three_launch", {**p, "pdl": default_mode}, t_three, wbytes,
                                         copy_gbs))
            rows.append(harness.make_row("bf16_chain", p, t_bf16, 2 * ws[0].numel(), copy_gbs))
            rows.append(harness.make_row("bf16_three_launch", p, t_bf16_3, 2 * ws[0].numel(), copy_gbs))
            table.append([f"{hidden} -> {n} (q{hq} kv{hkv} d{d})", m, t_bf16, t_bf16_3, t_unf, t_three,
                          t_unf / t_three, t_bf16_3 / t_three, t[default_mode] / t_three]
                         + [v for mode in MODES for v in (t[mode], t_unf / t[mode], t_bf16 / t[mode])])
            print(f"{hidden}->{n} m={m:2d}: bf16 chain {t_bf16:6.2f} us  bf16 three {t_bf16_3:6.2f}  "
                  f"unfused {t_unf:6.2f}  three launches {t_three:6.2f} ({t_unf / t_three:4.2f}x unfused, "
                  f"{t_bf16_3 / t_three:4.2f}x bf16 three)  "
                  + "  ".join(f"{mode} {t[mode]:6.2f} ({t_unf / t[mode]:4.2f}x unfused, {t_bf16 / t[mode]:4.2f}x bf16)"
                              for mode in MODES), flush=True)
        del ws, packs, caches
        torch.cuda.empty_cache()
    header = ["shape", "M", "bf16 chain us", "bf16 three launches us", f"unfused mxfuse ({default_mode}) us",
              f"three launches ({default_mode}) us", "three: x unfused", "three: x bf16 three",
              f"three: x one launch ({default_mode})"]
    for mode in MODES:
        header += [f"{mode}: us", f"{mode}: x unfused", f"{mode}: x bf16 chain"]
    md = (f"# Attention front of a decode step (SPEC §6), {harness.environment()['device']}\n\n"
          f"Command: `{harness.command()}`. One CUDA graph of {harness.CALLS_PER_GRAPH} "
          f"calls cycling {harness.INPUT_SETS} sets of weights, inputs and fp8 caches, best of {harness.REPLAYS}. "
          f"`attention_front(fused=True)` is one launch, timed in each `mxfuse.set_pdl` mode; \"three launches\" is "
          f"`attention_front(fused=False)` (add + norm, mxfp6_linear, `qk_norm_rope_cache`); \"unfused\" is "
          f"`mxfuse.attention_front_unfused` (add + norm, mxfp6_linear, two head norms, two RoPEs, the cache "
          f"write, and the copies that split the heads); the bf16 chain is the unfused ops with bf16 `F.linear` on "
          f"the rounded weights, and \"bf16 three launches\" is norm, bf16 `F.linear`, `qk_norm_rope_cache`. "
          f"Ratios are speed-ups (time of the other / time of this). Outputs were verified bit for bit "
          f"(every path and mode == unfused) before timing.\n\n" + harness.md_table(header, table))
    harness.write_results(args.out, {"env": harness.environment(), "copy_gbs": copy_gbs, "rows": rows}, md)
    print(md)


if __name__ == "__main__":
    main()
