"""Two CUDA devices (skipped with a reason elsewhere). An engine with several GPUs in one process
calls an op with tensors on a device that need not be the current one. Then:
- every op runs on its tensors' device, its outputs are allocated there, and its bits are those
  of the same call on cuda:0 (outputs poisoned first, so every element is written there);
- an argument on the other GPU is an error naming it and the argument it must follow, and the
  in-place tensors are left untouched;
- a CUDA graph captured on cuda:1 replays there with eager cuda:0's bits, the MXFP6 linear's
  capture check included (its chain gets modes 3 and 2 as on one device);
- per-device state (launch-shape and attribute memos, the shared-memory cap set at each launch,
  the attention front's default workspace) serves both devices in any order.

``MXFUSE_TEST_ONE_GPU=1`` runs the file on one GPU as a dry run: "the second GPU" is cuda:0 and a
moved argument goes to the CPU. That checks every case, expected message and mode count, not the
crossing of devices itself.
"""

from __future__ import annotations

import os

import mxfuse
import pytest
import torch
from conftest import (
    HAS_CUDA,
    NORM_KINDS,
    OPS,
    assert_bitwise_equal,
    call_norm,
    capture_graph,
    debug_poison,
    fp6_weights,
    make_norm_inputs,
    randn,
)
from test_attention_front import QWEN3_NEXT, SMALL, Front
from test_mxfp6_gpu import captured_modes
from test_mxfp8_mm import b_scale_for, codes, scale_bytes

ONE_GPU = os.environ.get("MXFUSE_TEST_ONE_GPU") == "1"
GPUS_NEEDED = 1 if ONE_GPU else 2
pytestmark = pytest.mark.skipif(not HAS_CUDA or torch.cuda.device_count() < GPUS_NEEDED,
                                reason="needs two CUDA devices (MXFUSE_TEST_ONE_GPU=1: a dry run on one)")

SECOND = 0 if ONE_GPU else 1  # the GPU that is not cuda:0
# where test_argument_on_the_other_gpu_is_named moves an argument
MOVED_TO = "cpu" if ONE_GPU else f"cuda:{SECOND}"
# (device of the tensors, current device while the op runs)
PLACEMENTS = [(SECOND, 0), (0, SECOND)]
PLACEMENT_IDS = ["tensors_on_1_current_0", "tensors_on_0_current_1"]


def mxfp6_cases():
    def pack(dev):
        return mxfuse.mxfp6_pack(fp6_weights(2560, 2048, torch.bfloat16, 1).to(dev))

    def unpack(dev):
        packed, scales = pack(dev)
        return tuple(mxfuse.mxfp6_unpack(packed, scales, dt)
                     for dt in (torch.bfloat16, torch.float16, torch.float32))

    def round_(dev):
        w = fp6_weights(2560, 2048, torch.float16, 2).to(dev)
        mxfuse.mxfp6_round_(w)
        return (w,)

    def linear(m, pdl):
        def run(dev):
            mxfuse.set_pdl(pdl)
            packed, scales = pack(dev)
            x = randn((m, 2048), torch.bfloat16, 3).to(dev)
            bias = randn((2560,), torch.float32, 4).to(dev)
            # two calls back to back: under PDL the second is placed while the first runs
            y1 = mxfuse.mxfp6_linear(x, packed, scales, bias)
            return y1, mxfuse.mxfp6_linear(x, packed, scales)
        return run

    cases = {"mxfp6_pack": pack, "mxfp6_unpack": unpack, "mxfp6_round_": round_}
    # M = 1 and 16: the decode kernels with clusters; 37: 32 rows of x per CTA; 400: the tiled one
    for m in (1, 16, 37, 400):
        for pdl in ("off", "on", "prefetch_weights"):
            cases[f"mxfp6_linear_m{m}_{pdl}"] = linear(m, pdl)
    return cases


def norm_cases():
    def norm(kind):
        def run(dev):
            x, r, w = make_norm_inputs(37, 6144, torch.bfloat16, torch.float32, seed=6)
            out = call_norm("op", kind, x.to(dev), r.to(dev), w.to(dev))
            return tuple(out[k] for k in sorted(out))
        return run

    def quantize(dev):
        x = randn((37, 2048), torch.float16, 7, 30.0).to(dev)
        c, s = mxfuse.mxfp8_quantize(x)
        return c, s, mxfuse.mxfp8_dequantize(c, s, torch.bfloat16)

    return {**{f"norm_{k}": norm(k) for k in NORM_KINDS}, "mxfp8_quantize_dequantize": quantize}


def fp8_mm_cases():
    def mm(kernel, layout, m):
        def run(dev):
            mxfuse.set_fp8_mm_kernel(kernel)
            n, k = 2560, 2048
            a, asc = codes((m, k), 1), scale_bytes((m, k // 32), 110, 145, 2)
            b, bsc = codes((n, k), 3), b_scale_for(n, k, layout, 110, 145, 4)
            bias = randn((n,), torch.float32, 5)
            t = [v.to(dev) for v in (a, asc, b, bsc, bias)]
            return (mxfuse.mxfp8_scaled_mm(*t[:4], torch.bfloat16, t[4], b_scale_layout=layout),)
        return run

    return {f"mxfp8_scaled_mm_{kn}_{lay}_m{m}": mm(kn, lay, m)
            for kn in ("exact", "tensor_cores") for lay in ("1x32", "32x32") for m in (1, 37)}


def front_cases():
    def front(cfg, m, fused):
        def run(dev):
            f = Front(cfg, m, torch.bfloat16, dev, seed=3)
            return f.run(mxfuse.attention_front, fused=fused)  # q, gate, residual, caches
        return run

    def rope_and_cache(dev):
        f = Front(SMALL[0], 9, torch.bfloat16, dev, seed=4)
        x = randn((9, 2, 64), torch.bfloat16, 5).to(dev)
        rotated = mxfuse.rotary_embedding_neox(x, f.positions, f.cos_sin, 32)
        _, kc, vc = f.fresh()
        k = randn((9, 1, 64), torch.bfloat16, 6).to(dev)
        mxfuse.reshape_and_cache_flash(k, x[:, :1], kc, vc, f.slot_mapping, f.k_scale, f.v_scale)
        return rotated, kc, vc

    cases = {"rope_and_cache": rope_and_cache}
    for name, cfg in (("small", SMALL[0]), ("qwen3_next", QWEN3_NEXT)):
        for m in (1, 2, 9):
            for fused in (True, False):
                kind = "fused" if fused else "unfused"
                cases[f"attention_front_{name}_m{m}_{kind}"] = front(cfg, m, fused)
    return cases


CASES = {**norm_cases(), **mxfp6_cases(), **fp8_mm_cases(), **front_cases()}


@pytest.fixture
def restore_modes():
    pdl, fp8 = mxfuse.pdl_mode(), mxfuse.fp8_mm_kernel()
    yield
    mxfuse.set_pdl(pdl)
    mxfuse.set_fp8_mm_kernel(fp8)


def run_on(fn, data, current):
    """fn's outputs with its tensors on cuda:<data> while cuda:<current> is current."""
    with torch.cuda.device(current):
        out = fn(torch.device("cuda", data))
        torch.cuda.synchronize(data)
    return out


@pytest.mark.parametrize("data,current", PLACEMENTS, ids=PLACEMENT_IDS)
@pytest.mark.parametrize("name", list(CASES))
def test_op_runs_on_its_tensors_device(name, data, current, restore_modes):
    fn = CASES[name]
    want = run_on(fn, 0, 0)
    for byte in (0x00, 0xFF):
        with debug_poison(byte):
            got = run_on(fn, data, current)
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.device == torch.device("cuda", data), f"{name} output {i} on {g.device}"
            assert_bitwise_equal(g, w, f"{name} output {i} on cuda:{data} (current cuda:{current}, "
                                 f"poison {byte:#x})")


def test_devices_in_turn_keep_their_state(restore_modes):
    """Shapes that set different shared-memory caps and launch shapes, on alternating devices:
    every call gives the bits of its first call on cuda:0."""
    names = ["mxfp6_linear_m1_on", "mxfp6_linear_m400_off", "attention_front_qwen3_next_m1_fused",
             "mxfp8_scaled_mm_tensor_cores_1x32_m37", "norm_add_rmsnorm_mxfp8"]
    want = {n: run_on(CASES[n], 0, 0) for n in names}
    for rnd in range(2):
        for data, current in PLACEMENTS:
            for n in names:
                got = run_on(CASES[n], data, current)
                for i, (g, w) in enumerate(zip(got, want[n])):
                    assert_bitwise_equal(g, w, f"{n} output {i}, round {rnd} on cuda:{data}")


# --- an argument on the other GPU ----------------------------------------------------------------


FRONT_ARGS = ("x", "residual", "input_norm_weight", "packed", "scales", "q_norm_weight",
              "k_norm_weight", "cos_sin_cache", "positions", "slot_mapping", "key_cache",
              "value_cache", "k_scale", "v_scale", "workspace")
# op -> {argument that may be moved: the argument whose device it must have}
MOVABLE = {
    "gemma_fused_add_rmsnorm_mxfp8": {"residual": "x", "weight": "x"},
    "gemma_rmsnorm": {"weight": "x"},
    "mxfp8_dequantize": {"scales": "codes"},
    "mxfp6_unpack": {"scales": "packed"},
    "mxfp6_linear": {"packed": "x", "scales": "packed", "bias": "x"},
    "mxfp8_scaled_mm": {"a_scale": "a", "b": "a", "b_scale": "a", "bias": "a"},
    "rotary_embedding_neox": {"positions": "x", "cos_sin_cache": "x"},
    "reshape_and_cache_flash": {a: "key" for a in ("value", "key_cache", "value_cache",
                                                   "slot_mapping", "k_scale", "v_scale")},
    "attention_front": {**{a: "x" for a in FRONT_ARGS[1:]}, "scales": "packed"},
}
MIXED = [(op, arg) for op, args in MOVABLE.items() for arg in args]


def mixed_case(op):
    """(call(tensors), tensors on cuda:0) of one op, with bias where it takes one."""
    x, r, w = (t.cuda(0) for t in make_norm_inputs(4, 256, torch.bfloat16, torch.bfloat16, 1))
    zeros64 = torch.zeros(64, device="cuda:0")
    if op == "gemma_fused_add_rmsnorm_mxfp8":
        return (lambda t: OPS.gemma_fused_add_rmsnorm_mxfp8(t["x"], t["residual"], t["weight"]),
                {"x": x, "residual": r, "weight": w})
    if op == "gemma_rmsnorm":
        return lambda t: OPS.gemma_rmsnorm(t["x"], t["weight"]), {"x": x, "weight": w}
    if op == "mxfp8_dequantize":
        c, sc = mxfuse.mxfp8_quantize(x)
        return (lambda t: OPS.mxfp8_dequantize(t["codes"], t["scales"], torch.bfloat16),
                {"codes": c, "scales": sc})
    if op in ("mxfp6_unpack", "mxfp6_linear"):
        packed, scales = mxfuse.mxfp6_pack(fp6_weights(64, 256, torch.bfloat16, 2).cuda(0))
        if op == "mxfp6_unpack":
            return (lambda t: OPS.mxfp6_unpack(t["packed"], t["scales"], torch.bfloat16),
                    {"packed": packed, "scales": scales})
        return (lambda t: OPS.mxfp6_linear(t["x"], t["packed"], t["scales"], t["bias"]),
                {"x": x, "packed": packed, "scales": scales, "bias": zeros64})
    if op == "mxfp8_scaled_mm":
        return (lambda t: OPS.mxfp8_scaled_mm(t["a"], t["a_scale"], t["b"], t["b_scale"],
                                              torch.bfloat16, t["bias"], b_scale_layout="1x32"),
                {"a": codes((4, 256), 1).cuda(0), "b": codes((64, 256), 3).cuda(0),
                 "a_scale": scale_bytes((4, 8), 120, 130, 2).cuda(0),
                 "b_scale": scale_bytes((64, 8), 120, 130, 4).cuda(0), "bias": zeros64})
    f = Front(SMALL[0], 3, torch.bfloat16, "cuda:0")
    rf, kc, vc = f.fresh()
    kx = randn((3, 1, 64), torch.bfloat16, 3).cuda(0)
    if op == "rotary_embedding_neox":
        return (lambda t: OPS.rotary_embedding_neox(t["x"], t["positions"], t["cos_sin_cache"], 32),
                {"x": kx.expand(3, 2, 64).contiguous(), "positions": f.positions,
                 "cos_sin_cache": f.cos_sin})
    if op == "reshape_and_cache_flash":
        names = ("key", "value", "key_cache", "value_cache", "slot_mapping", "k_scale", "v_scale")
        return (lambda t: OPS.reshape_and_cache_flash(*(t[n] for n in names)),
                dict(zip(names, (kx, kx.clone(), kc, vc, f.slot_mapping, f.k_scale, f.v_scale))))
    assert op == "attention_front"
    ws = mxfuse.attention_front_workspace("cuda:0")
    return (lambda t: OPS.attention_front(*(t[n] for n in FRONT_ARGS), **f.kw),
            dict(zip(FRONT_ARGS, (*f.args(rf, kc, vc), ws))))


@pytest.mark.parametrize("op,arg", MIXED, ids=[f"{o}-{a}" for o, a in MIXED])
def test_argument_on_the_other_gpu_is_named(op, arg):
    call, tensors = mixed_case(op)
    tensors[arg] = tensors[arg].to(MOVED_TO)
    before = {k: v.clone() for k, v in tensors.items()}
    ref = MOVABLE[op][arg]
    with pytest.raises(RuntimeError, match=rf"argument '{arg}' must be on the device of '{ref}' "
                       rf"\(cuda:0\), got {MOVED_TO}"):
        call(tensors)
    for k, v in tensors.items():  # nothing written, on either device
        assert_bitwise_equal(v, before[k], f"{op}: '{k}' after the failed call")


# --- CUDA graphs on cuda:1 -----------------------------------------------------------------------


def test_graph_captured_on_the_other_device(restore_modes):
    """norm -> three linears of one x -> a linear of the first's output, captured in `on` on
    cuda:1 and on cuda:0: the capture check picks the same modes on both (on the H200: the
    second and third projections run whole before their waits, the last gets its weights
    early), and every replay gives eager `off` cuda:0's bits."""
    shapes = [(2048, 2048), (1024, 2048), (1024, 2048), (2048, 2048)]
    cpu_w = [fp6_weights(n, k, torch.bfloat16, 10 + i) for i, (n, k) in enumerate(shapes)]
    cpu_ins = make_norm_inputs(2, 2048, torch.bfloat16, torch.bfloat16, seed=8)

    def layer(ins, ws):
        x, _, w = ins
        y = mxfuse.gemma_rmsnorm(x, w)
        q, k, v = (mxfuse.mxfp6_linear(y, *ws[i]) for i in range(3))
        return q, k, v, mxfuse.mxfp6_linear(q, *ws[3])

    def on_device(dev):
        ins = [t.cuda(dev) for t in cpu_ins]
        return ins, [mxfuse.mxfp6_pack(w.cuda(dev)) for w in cpu_w]

    with torch.cuda.device(0):
        mxfuse.set_pdl("off")
        want = layer(*on_device(0))
    mxfuse.set_pdl("on")
    counts = {}
    for dev in (0, SECOND):
        with torch.cuda.device(dev):
            ins, ws = on_device(dev)
            before = captured_modes()
            graph, outs = capture_graph(lambda: layer(ins, ws))
            counts[dev] = tuple(b - a for a, b in zip(before, captured_modes()))
            for rnd in range(2):
                for o in outs:
                    o.fill_(float("nan"))
                graph.replay()
                torch.cuda.synchronize(dev)
                for i, (g, w) in enumerate(zip(outs, want)):
                    assert g.device == torch.device("cuda", dev)
                    assert_bitwise_equal(g, w, f"graph on cuda:{dev}, replay {rnd}, output {i}")
    assert counts[SECOND] == counts[0], f"capture check modes (2 or 3, of them 3): {counts}"
    if OPS._device_code_arch(0) >= 90:
        assert counts[0] == (3, 2), f"capture check modes on sm_90+: {counts[0]}"
