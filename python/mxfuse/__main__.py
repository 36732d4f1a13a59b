"""``python -m mxfuse demo`` runs a Qwen3-Next-sized residual stream through the fused and unfused
paths and checks they agree bit for bit; ``python -m mxfuse bench`` runs the GPU benchmarks."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import torch

from . import ops
from .layers import GemmaRMSNorm, MXFP8Linear
from .quant import MXFP8_KEY, QuantizedActivation, mxfp8_linear


def _timer(device: torch.device):
    if device.type == "cuda":
        def run(fn, reps):
            fn()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e3 / reps
    else:
        def run(fn, reps):
            fn()
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            return (time.perf_counter() - t0) * 1e6 / reps
    return run


def demo(device_name: str | None, steps: int, layers: int, hidden: int, tokens: int) -> int:
    device = torch.device(device_name or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(0)
    dt = torch.bfloat16
    print(f"mxfuse demo on {device}: hidden {hidden}, {layers} layers, {steps} decode steps of "
          f"{tokens} token(s), bf16, seed 0")
    norm_w = [torch.randn(hidden, dtype=dt, device=device) * 0.1 for _ in range(layers)]
    # A stand-in for each layer's projection: an MXFP6 (W6A16) linear hidden -> hidden.
    proj = []
    for _ in range(layers):
        w = torch.randn(hidden, hidden, dtype=dt, device=device) * hidden ** -0.5
        proj.append(ops.mxfp6_pack(w))

    x0 = torch.randn(tokens, hidden, dtype=dt, device=device)
    r_fused, r_unfused = torch.randn(tokens, hidden, dtype=dt, device=device), None
    r_unfused = r_fused.clone()
    x_fused, x_unfused = x0, x0.clone()
    all_equal = True
    for _ in range(steps):
        for layer in range(layers):
            codes, scales = ops.gemma_fused_add_rmsnorm_mxfp8(x_fused, r_fused, norm_w[layer])
            qa = QuantizedActivation.of(x_fused, codes, scales, MXFP8_KEY)
            y = ops.gemma_fused_add_rmsnorm(x_unfused, r_unfused, norm_w[layer])
            codes_u, scales_u = ops.mxfp8_quantize(y)
            equal = (torch.equal(codes.view(torch.uint8), codes_u.view(torch.uint8))
                     and torch.equal(scales, scales_u)
                     and torch.equal(r_fused.view(torch.int16), r_unfused.view(torch.int16)))
            all_equal &= equal
            qa.check(MXFP8_KEY, hidden)
            x_fused = ops.mxfp6_linear(qa.dequantize(), *proj[layer])
            x_unfused = ops.mxfp6_linear(ops.mxfp8_dequantize(codes_u, scales_u, dt), *proj[layer])

    # The last layer's activation consumed in MXFP8 as well: the QuantizedActivation consumer
    # (mxfp8_linear) against the GEMM on the unfused path's codes, bit for bit.
    w8, w8_scale = ops.mxfp8_quantize(torch.randn(hidden, hidden, dtype=dt, device=device) * hidden ** -0.5)
    y8 = mxfp8_linear(qa, w8, w8_scale, b_scale_layout="1x32")
    y8_u = ops.mxfp8_scaled_mm(codes_u, scales_u, w8, w8_scale, dt, b_scale_layout="1x32")
    mm_equal = torch.equal(y8.view(torch.int16), y8_u.view(torch.int16))

    # The same through the engine-facing modules: a norm fused into its consumer (SPEC §7 keys)
    # against the same modules unfused (the consumer then quantizes the plain norm output).
    norm_mod = GemmaRMSNorm(hidden, device=device)
    norm_mod.weight.data.copy_(norm_w[0])
    proj_mod = MXFP8Linear.from_float(torch.randn(hidden, hidden, dtype=dt, device=device) * hidden ** -0.5)
    mod_out, as_fused = [], True
    for fuse in (True, False):
        norm_mod.quantize_output = fuse and norm_mod.fuse_into(proj_mod)
        h, r = norm_mod(x0, r_fused.clone())
        as_fused &= isinstance(h, QuantizedActivation) == fuse  # the keys matched; plain when not fused
        mod_out.append([proj_mod(h).view(torch.int16), r.view(torch.int16)])
    modules_equal = as_fused and all(torch.equal(a, b) for a, b in zip(*mod_out))

    # The attention front of a Qwen3-Next full-attention layer (16 q heads with output gate, 2 kv
    # heads, head_dim 256, RoPE on 64 dims, fp8 KV cache): the one-launch op against the unfused
    # ops, every output and in-place tensor bit for bit.
    hq, hkv, d, rd = 16, 2, 256, 64
    wq = torch.randn(hq * d * 2 + 2 * hkv * d, hidden, dtype=dt, device=device) * hidden ** -0.5
    front_w = ops.mxfp6_pack(wq)
    ang = torch.arange(4096, dtype=torch.float32, device=device)[:, None] * torch.rand(rd // 2, device=device)
    front_args = dict(input_norm_weight=norm_w[0], packed=front_w[0], scales=front_w[1],
                      q_norm_weight=torch.randn(d, dtype=dt, device=device) * 0.1,
                      k_norm_weight=torch.randn(d, dtype=dt, device=device) * 0.1,
                      cos_sin_cache=torch.cat([ang.cos(), ang.sin()], dim=1),
                      positions=torch.randint(0, 4096, (tokens,), device=device),
                      slot_mapping=torch.randperm(64, device=device)[:tokens],
                      k_scale=torch.tensor([0.5], device=device), v_scale=torch.tensor([0.25], device=device))
    front_kw = dict(num_q_heads=hq, num_kv_heads=hkv, head_dim=d, rotary_dim=rd, output_gate=True)
    outs = []
    for fn, extra in ((ops.attention_front, {"fused": True}), (ops.attention_front_unfused, {})):
        r = r_fused.clone()
        kc = torch.zeros(4, 16, hkv, d, dtype=torch.uint8, device=device).view(torch.float8_e4m3fn)
        vc = kc.clone()
        q, g = fn(x0, r, key_cache=kc, value_cache=vc, **front_args, **front_kw, **extra)
        outs.append([t.view(torch.uint8) for t in (q, g, r, kc, vc)])
    front_equal = all(torch.equal(a, b) for a, b in zip(*outs))

    time_us = _timer(device)
    reps = 50 if device.type == "cuda" else 5
    x, r, w = x0, r_fused.clone(), norm_w[0]
    n_el = tokens * hidden
    rows = [
        ("gemma_fused_add_rmsnorm_mxfp8 (fused)", lambda: ops.gemma_fused_add_rmsnorm_mxfp8(x, r, w),
         n_el * 2 * 3 + hidden * 2 + n_el + n_el // 32),
        ("gemma_fused_add_rmsnorm + mxfp8_quantize", lambda: ops.mxfp8_quantize(ops.gemma_fused_add_rmsnorm(x, r, w)),
         n_el * 2 * 3 + hidden * 2 + n_el + n_el // 32),
        ("gemma_fused_add_rmsnorm", lambda: ops.gemma_fused_add_rmsnorm(x, r, w), n_el * 2 * 4 + hidden * 2),
        ("mxfp6_linear", lambda: ops.mxfp6_linear(x, *proj[0]),
         proj[0][0].numel() + proj[0][1].numel() + n_el * 4),
    ]
    print(f"\n{'op':44s} {'time us':>10s} {'bytes':>12s}")
    for name, fn, nbytes in rows:
        print(f"{name:44s} {time_us(fn, reps):10.1f} {nbytes:12d}")
    print(f"\nfused == unfused (codes, scales, residual) over {steps * layers} layer calls: "
          f"{'EQUAL, bit for bit' if all_equal else 'MISMATCH'}")
    print(f"final residual stream equal: {torch.equal(x_fused.view(torch.int16), x_unfused.view(torch.int16))}")
    print(f"mxfp8_linear(QuantizedActivation) == mxfp8_scaled_mm(unfused codes): "
          f"{'EQUAL, bit for bit' if mm_equal else 'MISMATCH'}")
    print(f"attention_front (fused op) == attention_front_unfused (q, gate, residual, KV caches): "
          f"{'EQUAL, bit for bit' if front_equal else 'MISMATCH'}")
    print(f"mxfuse.layers: GemmaRMSNorm fused into MXFP8Linear == the modules unfused: "
          f"{'EQUAL, bit for bit' if modules_equal else 'MISMATCH'}")
    return 0 if all_equal and mm_equal and front_equal and modules_equal else 1


def bench() -> int:
    if not torch.cuda.is_available():
        print("mxfuse bench: the benchmarks need a CUDA/HIP GPU; none is visible", file=sys.stderr)
        return 2
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    rc = 0
    for script in ("bench_norm_quant.py", "bench_mxfp6_linear.py", "bench_layer_front.py",
                   "bench_mxfp8_mm.py", "bench_attention_front.py"):
        rc |= subprocess.call([sys.executable, os.path.join(root, "benchmarks", script)], cwd=root)
    return rc


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m mxfuse")
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="fused vs unfused residual stream, bit for bit")
    d.add_argument("--device", default=None)
    d.add_argument("--steps", type=int, default=4)
    d.add_argument("--layers", type=int, default=4)
    d.add_argument("--hidden", type=int, default=2048)
    d.add_argument("--tokens", type=int, default=1)
    sub.add_parser("bench", help="GPU benchmarks (writes benchmarks/results/)")
    args = ap.parse_args()
    if args.cmd == "demo":
        return demo(args.device, args.steps, args.layers, args.hidden, args.tokens)
    return bench()


if __name__ == "__main__":
    sys.exit(main())
