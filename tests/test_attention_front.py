"""attention_front (SPEC §6) and its unfused building blocks: rotary_embedding_neox and
reshape_and_cache_flash.

Expected values:
- RoPE and the cache write against ``mxfuse.reference`` (pure PyTorch from SPEC §6), bitwise;
- the fused op against the library's unfused ops on the same device (``attention_front_unfused``),
  bitwise, and against the reference steps applied to ``mxfp6_linear``'s qkv rows, bitwise;
- GPU against CPU, bitwise, for RoPE and the cache write. The fused op's projection sums in the
  GPU linear's order, so GPU and CPU fronts agree only as far as mxfp6_linear does (tolerance of
  test_mxfp6.py); they are compared through the qkv rows instead.
"""

from __future__ import annotations

import math

import mxfuse
import pytest
import torch
from conftest import (
    ACT_DTYPES,
    DEVICES,
    OPS,
    adversarial_inputs,
    assert_bitwise_equal,
    assert_equal_nan_by_position,
    dtype_id,
    generator,
    requires_cuda,
    run_poisoned,
)
from mxfuse import reference as ref

# (hidden, q heads, kv heads, head_dim, rotary_dim, output_gate): Qwen3-Next-80B's full-attention
# layer (gate, partial RoPE), a small one without gate, and one with full RoPE and d = 16.
SMALL = [(256, 2, 1, 64, 32, True), (128, 2, 2, 32, 32, False), (128, 3, 1, 16, 16, True)]
QWEN3_NEXT = (2048, 16, 2, 256, 64, True)


class Front:
    """Inputs of one attention_front call; every call gets fresh copies of the in-place tensors."""

    def __init__(self, cfg, m, dtype, device, seed=0, cache_dtype=torch.float8_e4m3fn,
                 max_pos=64, blocks=6, block_size=4, w_dtype=None):
        hidden, hq, hkv, d, rd, gate = cfg
        g = generator(seed)
        self.kw = dict(num_q_heads=hq, num_kv_heads=hkv, head_dim=d, rotary_dim=rd, output_gate=gate)
        n = hq * d * (2 if gate else 1) + 2 * hkv * d
        w_dtype = w_dtype or dtype

        def rnd(*shape, scale=1.0, dt=dtype):
            return (torch.randn(*shape, generator=g) * scale).to(dt).to(device)

        self.x = rnd(m, hidden)
        self.residual = rnd(m, hidden, scale=4.0)
        self.norm_w = rnd(hidden, scale=0.2, dt=w_dtype)
        w = (torch.randn(n, hidden, generator=g) * 0.05).to(dtype)
        self.packed, self.scales = OPS.mxfp6_pack(w)
        self.packed, self.scales = self.packed.to(device), self.scales.to(device)
        self.q_w = rnd(d, scale=0.2, dt=w_dtype)
        self.k_w = rnd(d, scale=0.2, dt=w_dtype)
        ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * torch.rand(rd // 2, generator=g, dtype=torch.float64)
        self.cos_sin = torch.cat([ang.cos(), ang.sin()], dim=1).to(torch.float32).to(device)
        self.positions = torch.randint(0, max_pos, (m,), generator=g).to(device)
        slots = torch.randperm(blocks * block_size, generator=g)[:m]
        if m > 1:
            slots[1] = -1  # a padded token
        self.slot_mapping = slots.to(device)
        self.cache_shape = (blocks, block_size, hkv, d)
        self.cache_dtype = cache_dtype
        self.k_scale = torch.tensor([0.75], device=device)
        self.v_scale = torch.tensor([0.125], device=device)
        self.m, self.n, self.d = m, n, d

    def fresh(self):
        if self.cache_dtype == torch.float8_e4m3fn:
            kc = torch.full(self.cache_shape, 0x55, dtype=torch.uint8).view(torch.float8_e4m3fn)
        else:
            kc = torch.full(self.cache_shape, 3.0, dtype=self.cache_dtype)
        kc = kc.to(self.x.device)
        return self.residual.clone(), kc, kc.clone()

    def args(self, residual, kc, vc):
        return (self.x, residual, self.norm_w, self.packed, self.scales, self.q_w, self.k_w,
                self.cos_sin, self.positions, self.slot_mapping, kc, vc, self.k_scale, self.v_scale)

    def run(self, fn=None, **extra):
        if fn is None:  # the one-launch kernel, whatever the default dispatch picks
            fn, extra = mxfuse.attention_front, {"fused": True, **extra}
        r, kc, vc = self.fresh()
        q, gate = fn(*self.args(r, kc, vc), **self.kw, **extra)
        return q, gate, r, kc, vc


def assert_front_equal(got, want, what):
    for name, a, b in zip(("q", "gate", "residual", "key_cache", "value_cache"), got, want):
        assert_bitwise_equal(a, b, f"{what}: {name}")


# --- RoPE ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("cs_dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("d,rd", [(64, 64), (64, 16), (256, 64), (48, 2)])
def test_rope_matches_reference(device, dtype, cs_dtype, d, rd):
    g = generator(1)
    m, h, max_pos = 5, 3, 40
    x = (torch.randn(m, h, d, generator=g) * 3).to(dtype)
    x[0, 0, 0] = 65504 if dtype == torch.float16 else 3e38  # products that overflow
    x[1, 1, :2] = float("nan")
    cs = torch.randn(max_pos, rd, generator=g).to(cs_dtype)
    pos = torch.randint(0, max_pos, (m,), generator=g)
    want = ref.rotary_embedding_neox(x, pos, cs, rd)
    got = run_poisoned(lambda: OPS.rotary_embedding_neox(x.to(device), pos.to(device), cs.to(device), rd))[0]
    assert_equal_nan_by_position(got, want, "rope vs reference")


@pytest.mark.parametrize("device", DEVICES)
def test_rope_strided_input(device):
    g = generator(2)
    base = torch.randn(4, 6, 64, generator=g).to(torch.bfloat16).to(device)
    x = base[:, ::2, :]  # heads not adjacent
    cs = torch.randn(10, 32, generator=g).to(device)
    pos = torch.tensor([0, 3, 9, 1], device=device)
    assert_bitwise_equal(OPS.rotary_embedding_neox(x, pos, cs, 32).cpu(),
                         ref.rotary_embedding_neox(x.cpu(), pos.cpu(), cs.cpu(), 32), "strided rope")


def test_rope_bad_position_cpu_raises():
    x = torch.zeros(2, 1, 16, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="'positions' must hold values in \\[0, 8\\)"):
        OPS.rotary_embedding_neox(x, torch.tensor([0, 8]), torch.zeros(8, 16), 16)


@requires_cuda
def test_rope_bad_position_gpu_gives_nan_rows():
    x = torch.ones(3, 2, 16, dtype=torch.bfloat16, device="cuda")
    out = OPS.rotary_embedding_neox(x, torch.tensor([0, 8, -1], device="cuda"),
                                    torch.zeros(8, 16, device="cuda"), 16)
    assert not out[0].isnan().any()
    assert out[1:].isnan().all()


# --- KV-cache write --------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("fp8", [True, False], ids=["fp8", "act"])
def test_cache_write_matches_reference(device, dtype, fp8):
    g = generator(3)
    m, hkv, d = 6, 2, 32
    key = (torch.randn(m, hkv, d, generator=g) * 100).to(dtype)
    value = (torch.randn(m, hkv, d, generator=g)).to(dtype)
    # Saturation, NaN, Inf, ties and the smallest subnormal of e4m3 (k_scale 0.5: values / 0.5).
    key[0, 0, :6] = torch.tensor([448.0, 300.0, float("nan"), float("inf"), -float("inf"), 2.0 ** -10])
    key[0, 1, :3] = torch.tensor([232.0 / 2, 240.0 / 2, -208.0 / 2])  # ties between e4m3 neighbours
    slots = torch.tensor([5, -1, 0, 11, -7, 3])
    cdt = torch.float8_e4m3fn if fp8 else dtype
    shape = (3, 4, hkv, d)

    def caches():
        init = torch.full(shape, 0x33, dtype=torch.uint8).view(torch.float8_e4m3fn) if fp8 else torch.full(shape, 7.0, dtype=dtype)
        return init.clone(), init.clone()

    ks, vs = torch.tensor([0.5]), torch.tensor([3.0])
    wk, wv = caches()
    ref.reshape_and_cache_flash(key, value, wk, wv, slots, ks, vs)
    gk, gv = (c.to(device) for c in caches())
    OPS.reshape_and_cache_flash(key.to(device), value.to(device), gk, gv, slots.to(device), ks.to(device), vs.to(device))
    assert_equal_nan_by_position(gk.cpu(), wk, "key cache")
    assert_equal_nan_by_position(gv.cpu(), wv, "value cache")
    if fp8:  # the reference's own saturation and NaN code
        assert wk.view(torch.uint8)[1, 1, 0, :5].tolist() == [0x7E, 0x7E, 0x7F, 0x7E, 0xFE]


def test_cache_write_slot_past_the_cache_cpu_raises_and_writes_nothing():
    k = torch.ones(2, 1, 16, dtype=torch.bfloat16)
    kc = torch.zeros(2, 2, 1, 16, dtype=torch.bfloat16)
    vc = kc.clone()
    with pytest.raises(RuntimeError, match="'slot_mapping' must hold values in"):
        OPS.reshape_and_cache_flash(k, k, kc, vc, torch.tensor([0, 4]), torch.ones(1), torch.ones(1))
    assert not kc.any() and not vc.any()


@requires_cuda
def test_cache_write_slot_past_the_cache_gpu_writes_nothing():
    k = torch.ones(2, 1, 16, dtype=torch.bfloat16, device="cuda")
    kc = torch.zeros(2, 2, 1, 16, dtype=torch.bfloat16, device="cuda")
    vc = kc.clone()
    OPS.reshape_and_cache_flash(k, k, kc, vc, torch.tensor([4, 1], device="cuda"),
                                torch.ones(1, device="cuda"), torch.ones(1, device="cuda"))
    assert kc.view(-1, 16).any(dim=1).tolist() == [False, True, False, False]


# --- the fused op ----------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("cfg", SMALL, ids=lambda c: f"h{c[0]}q{c[1]}kv{c[2]}d{c[3]}r{c[4]}g{int(c[5])}")
@pytest.mark.parametrize("m", [1, 3, 8, 17])
def test_fused_equals_unfused(device, dtype, cfg, m):
    f = Front(cfg, m, dtype, device, seed=m)
    got = run_poisoned(f.run)
    r, kc, vc = f.fresh()
    q, gate = mxfuse.attention_front_unfused(*f.args(r, kc, vc), **f.kw)
    assert_front_equal(list(got), [t.cpu() for t in (q, gate, r, kc, vc)], f"fused vs unfused ({device})")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cache_dtype", [torch.float8_e4m3fn, torch.bfloat16], ids=["fp8", "bf16"])
def test_fused_matches_reference_steps(device, cache_dtype):
    """Every step after the projection, and the residual, against the pure-PyTorch reference."""
    cfg = SMALL[0]
    f = Front(cfg, 5, torch.bfloat16, device, seed=7, cache_dtype=cache_dtype, w_dtype=torch.float32)
    q, gate, r, kc, vc = f.run()
    s = ref.residual_add(f.x.cpu(), f.residual.cpu())
    assert_bitwise_equal(r.cpu(), s, "residual")
    y = ref.gemma_rmsnorm(s, f.norm_w.cpu())
    qkv = OPS.mxfp6_linear(y.to(device), f.packed, f.scales).cpu()
    wk, wv = (t.cpu() for t in f.fresh()[1:])
    wq, wg = ref.attention_front_from_qkv(qkv, f.q_w.cpu(), f.k_w.cpu(), f.cos_sin.cpu(),
                                          f.positions.cpu(), f.slot_mapping.cpu(), wk, wv,
                                          f.k_scale.cpu(), f.v_scale.cpu(), **f.kw)
    assert_bitwise_equal(q.cpu(), wq, "q")
    assert_bitwise_equal(gate.cpu(), wg, "gate")
    assert_bitwise_equal(kc.cpu(), wk, "key cache")
    assert_bitwise_equal(vc.cpu(), wv, "value cache")
    assert not q.isnan().any()


def test_workspace_is_left_zero_and_reused():
    f = Front(SMALL[0], 3, torch.bfloat16, "cpu")
    ws = mxfuse.attention_front_workspace("cpu", 64)
    a = f.run(workspace=ws)
    b = f.run(workspace=ws)
    assert_front_equal(list(a), list(b), "second call")
    assert not ws.any()


# --- bad input -------------------------------------------------------------------------------------

def _bad_cases():
    def mod(name, fn):
        return pytest.param(name, fn, id=name)

    return [
        mod("x", lambda a, kw: (a.__setitem__("x", a["x"].float()), "'x' must have dtype")),
        mod("x_dim", lambda a, kw: (a.__setitem__("x", a["x"][None]), "'x' must have 2 dimension")),
        mod("residual", lambda a, kw: (a.__setitem__("residual", a["residual"][:, :128]), "'residual' must have the dtype and shape")),
        mod("input_norm_weight", lambda a, kw: (a.__setitem__("input_norm_weight", a["input_norm_weight"][:10]), "'input_norm_weight' must have shape")),
        mod("packed_k", lambda a, kw: (a.__setitem__("x", a["x"][:, :128].contiguous()) or a.__setitem__("residual", a["residual"][:, :128].contiguous()) or a.__setitem__("input_norm_weight", a["input_norm_weight"][:128]), "must have K = hidden size")),
        mod("num_q_heads", lambda a, kw: (kw.__setitem__("num_q_heads", 3), "must have N = num_q_heads")),
        mod("head_dim", lambda a, kw: (kw.__setitem__("head_dim", 24), "'head_dim' must be a positive multiple of 16")),
        mod("rotary_dim", lambda a, kw: (kw.__setitem__("rotary_dim", 33), "'rotary_dim' must be even")),
        mod("rotary_dim_big", lambda a, kw: (kw.__setitem__("rotary_dim", 128), "'rotary_dim' must be even and in \\[2, head_dim")),
        mod("q_norm_weight", lambda a, kw: (a.__setitem__("q_norm_weight", a["q_norm_weight"][:8]), "'q_norm_weight' must have shape")),
        mod("k_norm_weight", lambda a, kw: (a.__setitem__("k_norm_weight", a["k_norm_weight"].to(torch.float16)), "'k_norm_weight' must have dtype")),
        mod("cos_sin_cache", lambda a, kw: (a.__setitem__("cos_sin_cache", a["cos_sin_cache"][:, :16]), "'cos_sin_cache' must have shape")),
        mod("positions_dtype", lambda a, kw: (a.__setitem__("positions", a["positions"].int()), "'positions' must have dtype")),
        mod("positions_range", lambda a, kw: (a.__setitem__("positions", a["positions"] + 1000), "'positions' must hold values in")),
        mod("slot_mapping", lambda a, kw: (a.__setitem__("slot_mapping", a["slot_mapping"][:1]), "'slot_mapping' must have shape")),
        mod("slot_range", lambda a, kw: (a.__setitem__("slot_mapping", a["slot_mapping"] + 1000), "'slot_mapping' must hold values in")),
        mod("key_cache_shape", lambda a, kw: (a.__setitem__("key_cache", a["key_cache"][..., :32]), "'key_cache' must have shape")),
        mod("key_cache_dtype", lambda a, kw: (a.__setitem__("key_cache", a["key_cache"].view(torch.uint8)), "'key_cache' must have dtype")),
        mod("value_cache", lambda a, kw: (a.__setitem__("value_cache", a["value_cache"][:2]), "'value_cache' must have the dtype and shape")),
        mod("cache_strided", lambda a, kw: (a.__setitem__("key_cache", a["key_cache"].transpose(0, 1)), "'key_cache' is written in place and must be contiguous")),
        mod("k_scale", lambda a, kw: (a.__setitem__("k_scale", a["k_scale"].double()), "'k_scale' must have dtype")),
        mod("v_scale", lambda a, kw: (a.__setitem__("v_scale", torch.ones(2)), "'v_scale' must hold one value")),
        mod("workspace", lambda a, kw: (a.__setitem__("workspace", torch.zeros(2, dtype=torch.int32)), "'workspace' must be a contiguous 1-D int32")),
        mod("eps", lambda a, kw: (kw.__setitem__("eps", -1.0), "'eps' must be finite")),
        mod("residual_aliases_x", lambda a, kw: (a.__setitem__("x", a["residual"]), "'residual' \\(written in place\\) and 'x' must not share")),
        # The GPU kernel cannot look at the workspace's values before it runs (it traps instead:
        # test_gpu_workspace_not_zero_stops_the_kernel); the CPU rejects them up front.
        mod("workspace_not_zero", lambda a, kw: (a["workspace"].__setitem__(5, 7), "'workspace' must be zeroed .* got 1 nonzero elements in its first 7")),
        mod("workspace_aliases_residual", lambda a, kw: (a.__setitem__("workspace", a["residual"].view(torch.int32).flatten()), "'workspace' \\(written in place\\) and 'residual' must not share")),
        mod("workspace_aliases_key_cache", lambda a, kw: (a.__setitem__("workspace", a["key_cache"].view(torch.int32).flatten()), "'workspace' \\(written in place\\) and 'key_cache' must not share")),
    ]


NAMES = ("x", "residual", "input_norm_weight", "packed", "scales", "q_norm_weight", "k_norm_weight",
         "cos_sin_cache", "positions", "slot_mapping", "key_cache", "value_cache", "k_scale", "v_scale",
         "workspace")


@pytest.mark.parametrize("name,change", _bad_cases())
def test_bad_input_names_the_argument_and_writes_nothing(name, change):
    f = Front(SMALL[0], 3, torch.bfloat16, "cpu")
    r, kc, vc = f.fresh()
    args = dict(zip(NAMES, (*f.args(r, kc, vc), torch.zeros(64, dtype=torch.int32))))
    kw = dict(f.kw)
    _, pattern = change(args, kw)
    before = {k: args[k].clone() for k in ("residual", "key_cache", "value_cache")}
    with pytest.raises(RuntimeError, match=pattern):
        OPS.attention_front(*(args[n] for n in NAMES), **kw)
    for k, v in before.items():
        assert_bitwise_equal(args[k].view(torch.uint8), v.view(torch.uint8), f"{k} after a failed call")


@requires_cuda
def test_bad_device_is_named():
    f = Front(SMALL[0], 3, torch.bfloat16, "cuda")
    r, kc, vc = f.fresh()
    args = list(f.args(r, kc, vc)) + [torch.zeros(64, dtype=torch.int32, device="cuda")]
    args[9] = args[9].cpu()
    with pytest.raises(RuntimeError, match="'slot_mapping' must be on the device of 'x'"):
        OPS.attention_front(*args, **f.kw)


# --- torch.compile, opcheck ------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cache_dtype", [torch.bfloat16, torch.float8_e4m3fn], ids=["bf16", "fp8"])
def test_opcheck(device, cache_dtype):
    """Full opcheck with a bf16 cache; with an fp8 cache without its schema util (SchemaCheckMode
    cannot compare float8 tensors)."""
    utils = (("test_schema",) if cache_dtype == torch.bfloat16 else ()) + (
        "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    f = Front(SMALL[0], 3, torch.bfloat16, device, cache_dtype=cache_dtype)
    r, kc, vc = f.fresh()
    ws = torch.zeros(64, dtype=torch.int32, device=device)
    torch.library.opcheck(OPS.attention_front.default, (*f.args(r, kc, vc), ws), f.kw, test_utils=utils)
    x = torch.randn(3, 2, 64, dtype=torch.bfloat16, device=device)
    torch.library.opcheck(OPS.rotary_embedding_neox, (x, f.positions, f.cos_sin, 32))
    k = torch.randn(3, 1, 64, dtype=torch.bfloat16, device=device)
    torch.library.opcheck(OPS.reshape_and_cache_flash.default, (k, k, kc, vc, f.slot_mapping, f.k_scale, f.v_scale),
                          test_utils=utils)
    torch.library.opcheck(OPS.attention_front_check.default, f.args(r, kc, vc), f.kw, test_utils=utils)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(device):
    f = Front(SMALL[0], 3, torch.bfloat16, device)
    ws = mxfuse.attention_front_workspace(device, 64)

    def step(*a):
        return mxfuse.attention_front(*a, **f.kw, workspace=ws, fused=True)

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    r1, kc1, vc1 = f.fresh()
    r2, kc2, vc2 = f.fresh()
    got = compiled(*f.args(r1, kc1, vc1))
    want = step(*f.args(r2, kc2, vc2))
    assert_bitwise_equal(got[0], want[0], "q (compiled)")
    assert_bitwise_equal(got[1], want[1], "gate (compiled)")
    assert_bitwise_equal(r1, r2, "residual (compiled)")
    assert_bitwise_equal(kc1.view(torch.uint8), kc2.view(torch.uint8), "key cache (compiled)")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_unfused_refuses_before_it_writes(device, compiled):
    """The unfused composition (the GPU default above 8 tokens or hidden 2048) runs attention_front's
    checks before its first op: a cos_sin_cache of the wrong width, which only the RoPE op would
    otherwise see (after the residual add), is refused by attention_front's name with the residual
    and the caches untouched, eagerly and in a compiled graph (the check is not dropped as dead
    code)."""
    f = Front(SMALL[0], 3, torch.bfloat16, device)

    def step(*a):
        return mxfuse.attention_front(*a, **f.kw, fused=False)

    fn = torch.compile(step, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor") if compiled else step
    r, kc, vc = f.fresh()
    before = [t.clone() for t in (r, kc, vc)]
    args = list(f.args(r, kc, vc))
    args[7] = args[7][:, :16].contiguous()
    with pytest.raises(RuntimeError, match="mxfuse.attention_front: argument 'cos_sin_cache' must have shape"):
        fn(*args)
    for name, t, b in zip(("residual", "key_cache", "value_cache"), (r, kc, vc), before):
        assert_bitwise_equal(t.view(torch.uint8), b.view(torch.uint8), f"{name} after a refused unfused call")


# --- GPU -------------------------------------------------------------------------------------------

GPU_CASES = [QWEN3_NEXT, (6144, 16, 4, 128, 128, True), (2048, 8, 2, 128, 64, False), *SMALL]


@requires_cuda
@pytest.mark.parametrize("cfg", GPU_CASES, ids=lambda c: f"h{c[0]}q{c[1]}kv{c[2]}d{c[3]}r{c[4]}g{int(c[5])}")
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("m", [1, 2, 8, 9, 16, 37])
def test_gpu_fused_equals_unfused(cfg, dtype, m, restore_pdl):
    f = Front(cfg, m, dtype, "cuda", seed=m, max_pos=4096, blocks=64, block_size=16)
    r, kc, vc = f.fresh()
    want = mxfuse.attention_front_unfused(*f.args(r, kc, vc), **f.kw)
    want = [*want, r, kc, vc]
    for mode in mxfuse.ops.PDL_MODES:
        mxfuse.set_pdl(mode)
        got = run_poisoned(lambda: f.run())
        assert_front_equal([t.cuda() for t in got], want, f"fused vs unfused, pdl {mode}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("rows", [8, None], ids=["m8", "all"])
def test_fused_equals_unfused_adversarial_rows(device, dtype, rows, restore_pdl):
    """x, residual and the input norm weight from conftest.adversarial_inputs (NaN, +-Inf, fp16
    x + residual overflowing to Inf, subnormals, exact cancellation, a rounding tie, all-zero and
    block-dominated rows; norm weight blocks of 2^-8 and 3000): the one-launch kernel equals the
    unfused ops bit for bit in every launch mode. 8 rows: one token block of the M <= 8 kernel
    (eight producing CTAs); all 16 rows: the M <= 16 kernel.
    (On the CPU both sides are the composition; the case checks that the inputs run.)"""
    x, r, w = adversarial_inputs(QWEN3_NEXT[0], dtype, dtype, 1.0)
    m = x.shape[0] if rows is None else rows
    f = Front(QWEN3_NEXT, m, dtype, device, seed=3, max_pos=4096, blocks=64, block_size=16)
    f.x, f.residual, f.norm_w = x[:m].to(device), r[:m].to(device), w.to(device)
    rr, kc, vc = f.fresh()
    want = [*mxfuse.attention_front_unfused(*f.args(rr, kc, vc), **f.kw), rr, kc, vc]
    for mode in mxfuse.ops.PDL_MODES:
        mxfuse.set_pdl(mode)
        got = run_poisoned(lambda: f.run()) if device == "cuda" else f.run()
        assert_front_equal(list(got), want, f"adversarial rows, fused vs unfused, pdl {mode}")


@requires_cuda
def test_gpu_fused_portable_twin(monkeypatch):
    monkeypatch.setenv("MXFUSE_FORCE_PORTABLE", "1")
    f = Front(QWEN3_NEXT, 3, torch.bfloat16, "cuda", max_pos=4096, blocks=8, block_size=16)
    r, kc, vc = f.fresh()
    want = [*mxfuse.attention_front_unfused(*f.args(r, kc, vc), **f.kw), r, kc, vc]
    assert_front_equal(list(f.run()), want, "portable fused vs portable unfused")


@requires_cuda
def test_gpu_batch_invariant_and_close_to_cpu():
    """Row m of a batch gives the same bits alone (M = 1) within the fast path, and the GPU's qkv
    rows differ from the CPU's only as mxfp6_linear does (checked through the reference steps)."""
    f = Front(QWEN3_NEXT, 8, torch.bfloat16, "cuda", max_pos=4096, blocks=8, block_size=16)
    q, gate, r, kc, vc = f.run()
    for m in (0, 5):
        g = Front(QWEN3_NEXT, 8, torch.bfloat16, "cuda", max_pos=4096, blocks=8, block_size=16)
        for name in ("x", "residual", "positions", "slot_mapping"):
            setattr(g, name, getattr(f, name)[m:m + 1].clone())
        g.m = 1
        q1, gate1, r1, _, _ = g.run()
        assert_bitwise_equal(q1[0], q[m], f"q row {m} alone")
        assert_bitwise_equal(gate1[0], gate[m], f"gate row {m} alone")


@requires_cuda
def test_gpu_graph_capture_replay_and_workspace():
    f = Front(QWEN3_NEXT, 4, torch.bfloat16, "cuda", max_pos=4096, blocks=8, block_size=16)
    ws = mxfuse.attention_front_workspace("cuda")
    r, kc, vc = f.fresh()
    r0 = r.clone()
    args = f.args(r, kc, vc)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        mxfuse.attention_front(*args, **f.kw, workspace=ws, fused=True)  # warm-up
        r.copy_(r0)
        with torch.cuda.graph(graph, stream=s):
            out = mxfuse.attention_front(*args, **f.kw, workspace=ws, fused=True)
    for _ in range(3):
        r.copy_(r0)
        graph.replay()
    torch.cuda.synchronize()
    r2, kc2, vc2 = f.fresh()
    want = mxfuse.attention_front_unfused(*f.args(r2, kc2, vc2), **f.kw)
    assert_front_equal([*out, r, kc, vc], [*want, r2, kc2, vc2], "graph replay")
    assert not ws.any(), "the workspace must be left zeroed"


@requires_cuda
@pytest.mark.parametrize("pdl", ["off", "on"])
def test_gpu_graphs_captured_largest_first_replay_after_smaller_calls(pdl, restore_pdl):
    """Engines capture one graph per batch size from the largest down, then mix replays with eager
    calls. The fused kernel's dynamic shared memory grows with M (the normed rows it keeps), so the
    M = 8 graph's node needs more than the calls captured and run after it: its replay must still
    run and give the eager bits."""
    mxfuse.set_pdl(pdl)
    fronts = {m: Front(QWEN3_NEXT, m, torch.bfloat16, "cuda", seed=m, max_pos=4096, blocks=8, block_size=16)
              for m in (8, 1)}
    ws = mxfuse.attention_front_workspace("cuda")
    state, graphs, outs = {}, {}, {}
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for m, f in fronts.items():  # 8, then 1
            r, kc, vc = f.fresh()
            state[m] = (r, kc, vc, r.clone())
            mxfuse.attention_front(*f.args(r, kc, vc), **f.kw, workspace=ws, fused=True)  # warm-up
            graphs[m] = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graphs[m], stream=s):
                outs[m] = mxfuse.attention_front(*f.args(r, kc, vc), **f.kw, workspace=ws, fused=True)
    torch.cuda.current_stream().wait_stream(s)
    f1 = fronts[1]
    mxfuse.attention_front(*f1.args(*f1.fresh()), **f1.kw, workspace=ws, fused=True)  # eager, M = 1
    for m in (8, 1, 8):
        r, kc, vc, r0 = state[m]
        r.copy_(r0)
        graphs[m].replay()
        torch.cuda.synchronize()
        f = fronts[m]
        r2, kc2, vc2 = f.fresh()
        want = mxfuse.attention_front(*f.args(r2, kc2, vc2), **f.kw, workspace=ws, fused=True)
        assert_front_equal([*outs[m], r, kc, vc], [*want, r2, kc2, vc2], f"graph of M={m} replayed, pdl {pdl}")
    assert not ws.any(), "the workspace must be left zeroed"


@requires_cuda
def test_gpu_bad_positions_and_slots():
    f = Front(SMALL[0], 3, torch.bfloat16, "cuda")
    f.positions = torch.tensor([0, 10_000, -3], device="cuda")
    f.slot_mapping = torch.tensor([0, 1, 10_000], device="cuda")
    q, gate, r, kc, vc = f.run()
    assert not q[0].isnan().any() and q[1:].isnan().all()
    init = f.fresh()[1]
    flat, flat0 = kc.view(torch.uint8).view(-1, f.d * 1), init.view(torch.uint8).view(-1, f.d)
    assert not torch.equal(flat[0], flat0[0]) and not torch.equal(flat[1], flat0[1])
    assert torch.equal(flat[2:], flat0[2:]), "a slot past the cache must write nothing"
    assert math.isfinite(r.float().abs().max().item())


# A subprocess runs one fused call (a trapped kernel loses its CUDA context) with the workspace
# set up by `setup` (Python on `ws` and `word`, the first token block's word) and prints RAN
# after checking the result against the unfused ops, or RAISED with the error.
_WORKSPACE_SCRIPT = """
import sys, torch, mxfuse
sys.path.insert(0, {tests!r})
from test_attention_front import Front, assert_front_equal
f = Front({cfg!r}, 1, torch.bfloat16, "cuda", max_pos=4096, blocks=8, block_size=16)
ws = mxfuse.attention_front_workspace("cuda")
word = f.n // f.d
{setup}
try:
    out = f.run(workspace=ws)
    torch.cuda.synchronize()
except RuntimeError as e:
    print("RAISED:", str(e).splitlines()[0], flush=True)
    sys.exit(3)
r2, kc2, vc2 = f.fresh()
want = mxfuse.attention_front_unfused(*f.args(r2, kc2, vc2), **f.kw)
assert_front_equal(list(out), [*want, r2, kc2, vc2], "under a wait limit")
assert not ws.any(), "the workspace must be left zeroed"
print("RAN", flush=True)
"""


def _run_front_subprocess(cfg, setup, env):
    import os
    import subprocess
    import sys
    import time

    code = _WORKSPACE_SCRIPT.format(tests=os.path.dirname(os.path.abspath(__file__)), cfg=cfg, setup=setup)
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                       timeout=180)
    return r, time.monotonic() - t0


_WORKSPACE_CASES = {
    "zero": "",                                  # control: the limit does not fire on a good call
    "garbage": "ws.fill_(0x7F7F7F7F)",           # a ticket no zeroed workspace gives: at once
    "ready_past_rows": "ws[word] = 2 << 24",     # more rows counted than the block has: at once
    "segment_counter": "ws[0] = 1000",           # an arrival count past the segment's CTAs: at once
    "stuck": "ws[word] = 1",                     # ticket 0 never given, row 0 never normed: the limit
}


# One subprocess each (CUDA start-up, seconds): every case on the fast path of the model's shape,
# the limit and its control on the portable twin, and the limit on a small weight.
@requires_cuda
@pytest.mark.parametrize("cfg,portable,case", [
    *[(QWEN3_NEXT, False, c) for c in _WORKSPACE_CASES],
    (QWEN3_NEXT, True, "zero"), (QWEN3_NEXT, True, "stuck"), (SMALL[0], False, "stuck")],
    ids=lambda v: {QWEN3_NEXT: "qwen3next", SMALL[0]: "small", True: "portable", False: "fast"}.get(v, v)
    if not isinstance(v, str) else v)
def test_gpu_workspace_not_zero_stops_the_kernel(cfg, portable, case):
    """A workspace that is not zero cannot be seen by the host without a sync; the kernel notices
    an impossible count, or waits past MXFUSE_FRONT_WAIT_TIMEOUT_MS, and traps (a CUDA error at
    the next sync) instead of hanging or reading rows nobody wrote."""
    env = {"MXFUSE_FRONT_WAIT_TIMEOUT_MS": "300", "MXFUSE_FORCE_PORTABLE": "1" if portable else "0"}
    r, seconds = _run_front_subprocess(cfg, _WORKSPACE_CASES[case], env)
    if case == "zero":
        assert r.returncode == 0 and "RAN" in r.stdout, r.stdout + r.stderr
        return
    assert r.returncode != 0 and "RAISED: CUDA error" in r.stdout and "RAN" not in r.stdout, r.stdout + r.stderr
    assert seconds < 60, f"stopped after {seconds:.1f} s"


@requires_cuda
def test_gpu_wait_limit_setting_is_checked():
    r, _ = _run_front_subprocess(SMALL[0], "", {"MXFUSE_FRONT_WAIT_TIMEOUT_MS": "ten"})
    assert r.returncode != 0 and "RAISED:" in r.stdout
    assert "MXFUSE_FRONT_WAIT_TIMEOUT_MS must be a whole number of milliseconds" in r.stdout
    assert "got 'ten'" in r.stdout


@requires_cuda
def test_gpu_unfused_blocks_equal_cpu():
    g = generator(9)
    x = (torch.randn(7, 4, 128, generator=g) * 2).to(torch.bfloat16)
    cs = torch.randn(50, 64, generator=g)
    pos = torch.randint(0, 50, (7,), generator=g)
    assert_bitwise_equal(OPS.rotary_embedding_neox(x.cuda(), pos.cuda(), cs.cuda(), 64).cpu(),
                         OPS.rotary_embedding_neox(x, pos, cs, 64), "rope gpu vs cpu")



@requires_cuda
@pytest.mark.parametrize("m,hidden_cfg", [(1, QWEN3_NEXT), (2, QWEN3_NEXT), (8, QWEN3_NEXT), (9, QWEN3_NEXT),
                                         (1, (6144, 32, 4, 128, 64, True))])
def test_gpu_default_dispatch_same_bits(m, hidden_cfg):
    """fused=None picks the faster path; the bits do not depend on the pick."""
    f = Front(hidden_cfg, m, torch.bfloat16, "cuda", max_pos=4096, blocks=8, block_size=16)
    auto = f.run(mxfuse.attention_front)
    one = f.run()
    assert_front_equal(list(auto), list(one), "default dispatch vs one launch")


@pytest.mark.parametrize("device", DEVICES)
def test_no_tokens(device):
    f = Front(SMALL[0], 1, torch.bfloat16, device)
    for name in ("x", "residual", "positions", "slot_mapping"):
        setattr(f, name, getattr(f, name)[:0])
    q, gate, r, kc, vc = f.run()
    assert q.shape == (0, 2, 64) and gate.shape == (0, 2, 64)
    assert_bitwise_equal(kc.view(torch.uint8), f.fresh()[1].view(torch.uint8), "cache untouched")
    # The unfused ops too (the GPU's default for hidden > 2048): they once failed to reshape an
    # empty qkv (found by tests/test_fuzz.py).
    q, gate, r, kc, vc = f.run(mxfuse.attention_front_unfused)
    assert q.shape == (0, 2, 64) and gate.shape == (0, 2, 64)
    assert_bitwise_equal(kc.view(torch.uint8), f.fresh()[1].view(torch.uint8), "cache untouched")


@pytest.mark.parametrize("device", DEVICES)
def test_strided_rows(device):
    """x and residual as row views of wider buffers (row strides past hidden, and an odd offset
    for x, so its rows are not 16-byte aligned)."""
    f = Front(SMALL[0], 5, torch.bfloat16, device, seed=3)
    wide_x = torch.zeros(5, 256 + 9, dtype=torch.bfloat16, device=device)
    wide_x[:, 1:257] = f.x
    wide_r = torch.zeros(5, 256 + 64, dtype=torch.bfloat16, device=device)
    want = f.run()
    f.x = wide_x[:, 1:257]
    r, kc, vc = f.fresh()
    wide_r[:, :256] = r
    q, gate = mxfuse.attention_front(*f.args(wide_r[:, :256], kc, vc), **f.kw, fused=True)
    assert_front_equal([q, gate, wide_r[:, :256], kc, vc], list(want), "strided rows")
    assert not wide_r[:, 256:].any(), "bytes past the residual rows must stay untouched"


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_default_workspace_and_dispatch(device):
    f = Front(SMALL[0], 3, torch.bfloat16, device)

    def step(*a):
        return mxfuse.attention_front(*a, **f.kw)

    mxfuse.attention_front(*f.args(*f.fresh()), **f.kw)  # eager first: the per-device workspace exists
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    r1, kc1, vc1 = f.fresh()
    r2, kc2, vc2 = f.fresh()
    got, want = compiled(*f.args(r1, kc1, vc1)), step(*f.args(r2, kc2, vc2))
    assert_front_equal([*got, r1, kc1, vc1], [*want, r2, kc2, vc2], "compiled, default workspace")
    assert OPS.attention_front_workspace_size(3, f.n, f.d) == 1 * (f.n // f.d + 1)
