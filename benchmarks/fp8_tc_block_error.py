"""Error of one K block's dot of 32 E4M3 code products as the tensor-core kernel of
mxfp8_scaled_mm sums it, against the exact (float64) dot, in units of the block's sum |a b|; the
exact kernel's left-to-right fp32 sum alongside. K = 32 and scales 2^0, so each fp32 output is
the block's dot itself. Sets TC_UNIT in tests/test_mxfp8_mm_tc.py.

    python benchmarks/fp8_tc_block_error.py [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import math

import torch

import mxfuse
from mxfuse import reference as ref


def codes(shape, gen, lo=0, hi=256):
    c = torch.randint(lo, hi, shape, generator=gen, dtype=torch.uint8)
    return torch.where((c & 0x7F) == 0x7F, c ^ 0x01, c)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    res = {}
    # all codes; normal codes only; codes of one binade and sign (no cancellation); mixed sign
    # codes of wide range (cancellation)
    cases = {"all": (0, 256), "normal": (8, 120), "one_binade_pos": (0x40, 0x48), "wide": (0, 256)}
    for name, (lo, hi) in cases.items():
        a = codes((256, 32), gen, lo, hi)
        b = codes((1024, 32), gen, lo, hi)
        if name == "one_binade_pos":
            a &= 0x7F
            b &= 0x7F
        asc = torch.full((256, 1), 127, dtype=torch.uint8)
        bsc = torch.full((1024, 1), 127, dtype=torch.uint8)
        a8, b8 = a.view(torch.float8_e4m3fn), b.view(torch.float8_e4m3fn)
        exact64 = ref.mxfp8_scaled_mm(a8, asc, b8, bsc, None, "1x32")
        a64 = ref.mxfp8_dequantize(a8, asc, torch.float32).double()
        b64 = ref.mxfp8_dequantize(b8, bsc, torch.float32).double()
        absdot = (a64.abs() @ b64.abs().t()).clamp_min(2.0**-30)
        out = {}
        for kern in ("exact", "tensor_cores"):
            mxfuse.set_fp8_mm_kernel(kern)
            y = mxfuse.mxfp8_scaled_mm(a8.cuda(), asc.cuda(), b8.cuda(), bsc.cuda(), torch.float32,
                                       b_scale_layout="1x32").cpu().double()
            rel = (y - exact64).abs() / absdot
            out[kern] = {"max_rel_to_absdot": rel.max().item(),
                         "max_in_2^-24": rel.max().item() / 2.0**-24,
                         "exact_fraction": (y == exact64).double().mean().item()}
        mxfuse.set_fp8_mm_kernel("exact")
        res[name] = out
        print(name, {k: {kk: (f"{vv:.3e}" if isinstance(vv, float) else vv) for kk, vv in v.items()} for k, v in out.items()},
              flush=True)
    worst = max(v["tensor_cores"]["max_rel_to_absdot"] for v in res.values())
    print(f"tensor cores: worst |d - dot| / sum|ab| = {worst:.3e} = 2^{math.log2(worst) if worst > 0 else float('-inf'):.2f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
