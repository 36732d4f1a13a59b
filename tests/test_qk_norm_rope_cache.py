"""qk_norm_rope_cache (SPEC §6, the attention front after its qkv projection) and the three-launch
path of attention_front (fused=False) that uses it.

Expected values:
- the op against the library's unfused ops on the same device (``qk_norm_rope_cache_unfused``: two
  head norms, two RoPEs, the cache write, the copies that split the heads), bitwise, on random
  and adversarial qkv rows (NaN, +-Inf, zero heads, subnormals, the fp16 maximum, values at the
  E4M3 cache's 448 boundary and its rounding ties);
- against the pure-PyTorch reference steps (``mxfuse.reference.attention_front_from_qkv``), bitwise;
- GPU against CPU, bitwise (no projection here: the op's inputs are the qkv rows themselves);
- attention_front(fused=False) against attention_front_unfused, bitwise, in every launch mode.
Every output is checked under two poison bytes (an element not written would differ).
"""

from __future__ import annotations

import mxfuse
import pytest
import torch
from conftest import (
    ACT_DTYPES,
    DEVICES,
    OPS,
    assert_bitwise_equal,
    capture_graph,
    dtype_id,
    generator,
    requires_cuda,
    run_poisoned,
)
from mxfuse import reference as ref
from test_attention_front import QWEN3_NEXT, SMALL, Front, assert_front_equal

CASES = [*SMALL, (2048, 4, 2, 256, 64, True), (2048, 8, 2, 128, 128, False)]
CFG_ID = "h{0}q{1}kv{2}d{3}r{4}g{5:d}".format


def cfg_id(c):
    return CFG_ID(*c[:5], int(c[5]))


class Post:
    """Inputs of one qk_norm_rope_cache call: the attention front's (Front) plus qkv rows."""

    def __init__(self, cfg, m, dtype, device, seed=0, scale=2.0, **front_kw):
        self.f = Front(cfg, m, dtype, device, seed=seed, **front_kw)
        g = generator(seed + 100)
        self.qkv = (torch.randn(m, self.f.n, generator=g) * scale).to(dtype).to(device)
        self.kw = dict(self.f.kw)

    def args(self, kc, vc, qkv=None):
        f = self.f
        return (self.qkv if qkv is None else qkv, f.q_w, f.k_w, f.cos_sin, f.positions, f.slot_mapping, kc, vc,
                f.k_scale, f.v_scale)

    def run(self, fn=OPS.qk_norm_rope_cache, qkv=None, **extra):
        _, kc, vc = self.f.fresh()
        q, gate = fn(*self.args(kc, vc, qkv), **self.kw, **extra)
        return q, gate, kc, vc


def assert_post_equal(got, want, what):
    for name, a, b in zip(("q", "gate", "key_cache", "value_cache"), got, want):
        assert_bitwise_equal(a.cpu(), b.cpu(), f"{what}: {name}")


def adversarial_qkv(m, n, d, dtype):
    """Rows of qkv whose heads hold the hard cases, one kind per head, cycling through the kinds
    (so every kind lands in q, gate, k and v heads over the rows)."""
    fin = torch.finfo(dtype)
    g = generator(77)
    kinds = []
    kinds.append(lambda: torch.zeros(d))                                   # all-zero head
    kinds.append(lambda: torch.full((d,), 2.0) ** torch.randint(-20, 10, (d,), generator=g))  # powers of two
    kinds.append(lambda: torch.randn(d, generator=g) * fin.smallest_normal)  # subnormal / tiny
    kinds.append(lambda: torch.full((d,), fin.max))                        # sum of squares overflows
    def nan_head():
        h = torch.randn(d, generator=g)
        h[d // 3] = float("nan")
        return h
    kinds.append(nan_head)
    def inf_head():
        h = torch.randn(d, generator=g)
        h[1] = float("inf")
        h[d - 2] = -float("inf")
        return h
    kinds.append(inf_head)
    # The E4M3 cache's boundary at scale 0.75 / 0.125: v / scale at 448, past it, and ties of the
    # e4m3 grid (13 = 12.5 + 0.5 -> between 12 and 13 is 12.5's neighbourhood; 464 rounds to 448).
    kinds.append(lambda: torch.tensor([448 * 0.125, 464 * 0.125, 480 * 0.125, 12.5 * 0.125, 13.5 * 0.125,
                                       -448 * 0.125, 0.0, -0.0] * (d // 8)))
    kinds.append(lambda: torch.randn(d, generator=g) * 1e-3 + torch.where(torch.arange(d) == 5, 1e3, 0.0))
    rows = torch.empty(m, n)
    k = 0
    for r in range(m):
        for h in range(n // d):
            rows[r, h * d:(h + 1) * d] = kinds[k % len(kinds)]()
            k += 1
        k += 3  # shift the kinds between rows
    return rows.to(dtype)


# --- against the unfused ops and the reference ----------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("cfg", CASES, ids=cfg_id)
@pytest.mark.parametrize("m", [1, 3, 8, 17])
def test_equals_unfused_ops(device, dtype, cfg, m):
    p = Post(cfg, m, dtype, device, seed=m, max_pos=4096, blocks=8, block_size=16)
    got = run_poisoned(p.run)
    want = p.run(mxfuse.qk_norm_rope_cache_unfused)
    assert_post_equal(got, want, f"qk_norm_rope_cache vs unfused ops ({device})")
    assert got[0].shape == (m, cfg[1], cfg[3]) and got[1].shape == (m, cfg[1], cfg[3] if cfg[5] else 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cache_dtype", [torch.float8_e4m3fn, torch.bfloat16], ids=["fp8", "bf16"])
@pytest.mark.parametrize("w_dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
def test_matches_reference_steps(device, cache_dtype, w_dtype):
    p = Post(SMALL[0], 5, torch.bfloat16, device, seed=7, cache_dtype=cache_dtype, w_dtype=w_dtype)
    q, gate, kc, vc = p.run()
    f = p.f
    wk, wv = (t.cpu() for t in f.fresh()[1:])
    wq, wg = ref.attention_front_from_qkv(p.qkv.cpu(), f.q_w.cpu(), f.k_w.cpu(), f.cos_sin.cpu(),
                                          f.positions.cpu(), f.slot_mapping.cpu(), wk, wv,
                                          f.k_scale.cpu(), f.v_scale.cpu(), **p.kw)
    assert_post_equal((q, gate, kc, vc), (wq, wg, wk, wv), "qk_norm_rope_cache vs reference")
    assert not q.isnan().any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("cache_dtype", ["fp8", "act"])
@pytest.mark.parametrize("weight_offset", [1.0, 0.0])
def test_adversarial_heads(device, dtype, cache_dtype, weight_offset):
    cfg = (2048, 4, 2, 64, 32, True)
    p = Post(cfg, 6, dtype, device, seed=5, max_pos=64, blocks=8, block_size=4,
             cache_dtype=torch.float8_e4m3fn if cache_dtype == "fp8" else dtype)
    p.qkv = adversarial_qkv(6, p.f.n, 64, dtype).to(device)
    got = run_poisoned(lambda: p.run(weight_offset=weight_offset))
    want = p.run(mxfuse.qk_norm_rope_cache_unfused, weight_offset=weight_offset)
    assert_post_equal(got, want, f"adversarial heads ({device})")
    assert got[0].isnan().any() and got[1].isinf().any()  # the hard cases reached q and gate


@pytest.mark.parametrize("device", DEVICES)
def test_strided_qkv_rows(device):
    """qkv as a column slice of a wider buffer (row stride past N, odd element offset) gives the
    contiguous rows' bits, and a non-contiguous last dimension is read correctly (copied)."""
    p = Post(SMALL[0], 5, torch.bfloat16, device, seed=3)
    want = p.run()
    wide = torch.zeros(5, p.f.n + 9, dtype=torch.bfloat16, device=device)
    wide[:, 1:1 + p.f.n] = p.qkv
    assert_post_equal(p.run(qkv=wide[:, 1:1 + p.f.n]), want, "row-strided qkv")
    t = p.qkv.t().contiguous().t()
    assert not t.is_contiguous()
    assert_post_equal(p.run(qkv=t), want, "column-major qkv")


@pytest.mark.parametrize("device", DEVICES)
def test_no_tokens(device):
    p = Post(SMALL[0], 1, torch.bfloat16, device)
    p.qkv = p.qkv[:0]
    for name in ("positions", "slot_mapping"):
        setattr(p.f, name, getattr(p.f, name)[:0])
    q, gate, kc, vc = p.run()
    assert q.shape == (0, 2, 64) and gate.shape == (0, 2, 64)
    assert_bitwise_equal(kc.view(torch.uint8), p.f.fresh()[1].view(torch.uint8), "cache untouched")


# --- the three-launch front -------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("cfg", SMALL, ids=cfg_id)
@pytest.mark.parametrize("m", [1, 8, 17])
def test_three_launch_front_equals_unfused(device, dtype, cfg, m, restore_pdl):
    f = Front(cfg, m, dtype, device, seed=m)
    want = f.run(mxfuse.attention_front_unfused)
    for mode in mxfuse.ops.PDL_MODES:
        mxfuse.set_pdl(mode)
        got = run_poisoned(lambda: f.run(mxfuse.attention_front, fused=False))
        assert_front_equal(list(got), [t.cpu() for t in want], f"three launches vs unfused ({device}, pdl {mode})")


@pytest.mark.parametrize("device", DEVICES)
def test_three_launch_front_compiles(device):
    f = Front(SMALL[0], 3, torch.bfloat16, device)

    def step(*a):
        return mxfuse.attention_front(*a, **f.kw, fused=False)

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    r1, kc1, vc1 = f.fresh()
    r2, kc2, vc2 = f.fresh()
    got, want = compiled(*f.args(r1, kc1, vc1)), step(*f.args(r2, kc2, vc2))
    assert_front_equal([*got, r1, kc1, vc1], [*want, r2, kc2, vc2], "three launches, compiled")


# --- bad input ---------------------------------------------------------------------------------------

NAMES = ("qkv", "q_norm_weight", "k_norm_weight", "cos_sin_cache", "positions", "slot_mapping", "key_cache",
         "value_cache", "k_scale", "v_scale")


def _bad_cases():
    def mod(name, fn):
        return pytest.param(name, fn, id=name)

    return [
        mod("qkv_dtype", lambda a, kw: (a.__setitem__("qkv", a["qkv"].float()), "'qkv' must have dtype")),
        mod("qkv_dim", lambda a, kw: (a.__setitem__("qkv", a["qkv"][None]), "'qkv' must have 2 dimension")),
        mod("qkv_width", lambda a, kw: (a.__setitem__("qkv", a["qkv"][:, :-64]), "'qkv' must have shape \\[tokens, .* = 384\\]")),
        mod("num_q_heads", lambda a, kw: (kw.__setitem__("num_q_heads", 3), "'qkv' must have shape .*num_q_heads = 3")),
        mod("num_kv_heads", lambda a, kw: (kw.__setitem__("num_kv_heads", 0), "'num_kv_heads' must be >= 1")),
        mod("output_gate", lambda a, kw: (kw.__setitem__("output_gate", False), "output_gate = False\\), got")),
        mod("head_dim", lambda a, kw: (kw.__setitem__("head_dim", 7), "'head_dim' must be even")),
        mod("rotary_dim", lambda a, kw: (kw.__setitem__("rotary_dim", 33), "'rotary_dim' must be even")),
        mod("rotary_dim_big", lambda a, kw: (kw.__setitem__("rotary_dim", 128), "'rotary_dim' must be even and in \\[2, head_dim")),
        mod("q_norm_weight", lambda a, kw: (a.__setitem__("q_norm_weight", a["q_norm_weight"][:8]), "'q_norm_weight' must have shape \\[64\\]")),
        mod("k_norm_weight", lambda a, kw: (a.__setitem__("k_norm_weight", a["k_norm_weight"].to(torch.float16)), "'k_norm_weight' must have dtype")),
        mod("cos_sin_cache", lambda a, kw: (a.__setitem__("cos_sin_cache", a["cos_sin_cache"][:, :16]), "'cos_sin_cache' must have shape")),
        mod("positions_dtype", lambda a, kw: (a.__setitem__("positions", a["positions"].int()), "'positions' must have dtype")),
        mod("positions_len", lambda a, kw: (a.__setitem__("positions", a["positions"][:2]), "'positions' must have shape \\[3\\]")),
        mod("positions_range", lambda a, kw: (a.__setitem__("positions", a["positions"] + 1000), "'positions' must hold values in")),
        mod("slot_mapping", lambda a, kw: (a.__setitem__("slot_mapping", a["slot_mapping"][:1]), "'slot_mapping' must have shape")),
        mod("slot_range", lambda a, kw: (a.__setitem__("slot_mapping", a["slot_mapping"] + 1000), "'slot_mapping' must hold values in")),
        mod("key_cache_shape", lambda a, kw: (a.__setitem__("key_cache", a["key_cache"][..., :32]), "'key_cache' must have shape")),
        mod("key_cache_dtype", lambda a, kw: (a.__setitem__("key_cache", a["key_cache"].view(torch.uint8)), "'key_cache' must have dtype")),
        mod("value_cache", lambda a, kw: (a.__setitem__("value_cache", a["value_cache"][:2]), "'value_cache' must have the dtype and shape")),
        mod("cache_strided", lambda a, kw: (a.__setitem__("key_cache", a["key_cache"].transpose(0, 1)), "'key_cache' is written in place and must be contiguous")),
        mod("k_scale", lambda a, kw: (a.__setitem__("k_scale", a["k_scale"].double()), "'k_scale' must have dtype")),
        mod("v_scale", lambda a, kw: (a.__setitem__("v_scale", torch.ones(2)), "'v_scale' must hold one value")),
        mod("eps", lambda a, kw: (kw.__setitem__("eps", float("nan")), "'eps' must be finite")),
        mod("weight_offset", lambda a, kw: (kw.__setitem__("weight_offset", float("inf")), "'weight_offset' must be finite")),
        mod("cache_aliases_qkv", lambda a, kw: (a.__setitem__("key_cache", a["qkv"].view(torch.float8_e4m3fn).view(9, 4, 1, 64)) or a.__setitem__("value_cache", torch.zeros(9, 4, 1, 64, dtype=torch.float8_e4m3fn)), "'key_cache' \\(written in place\\) and 'qkv' must not share")),
        mod("caches_alias", lambda a, kw: (a.__setitem__("value_cache", a["key_cache"]), "must not share")),
    ]


@pytest.mark.parametrize("name,change", _bad_cases())
def test_bad_input_names_the_argument_and_writes_nothing(name, change):
    p = Post(SMALL[0], 3, torch.bfloat16, "cpu")
    _, kc, vc = p.f.fresh()
    args = dict(zip(NAMES, p.args(kc, vc)))
    kw = dict(p.kw)
    _, pattern = change(args, kw)
    before = {k: args[k].clone() for k in ("key_cache", "value_cache")}
    with pytest.raises(RuntimeError, match="mxfuse.qk_norm_rope_cache: .*" + pattern):
        OPS.qk_norm_rope_cache(*(args[n] for n in NAMES), **kw)
    for k, v in before.items():
        assert_bitwise_equal(args[k].view(torch.uint8), v.view(torch.uint8), f"{k} after a failed call")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cache_dtype", [torch.bfloat16, torch.float8_e4m3fn], ids=["bf16", "fp8"])
def test_opcheck(device, cache_dtype):
    utils = (("test_schema",) if cache_dtype == torch.bfloat16 else ()) + (
        "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    p = Post(SMALL[0], 3, torch.bfloat16, device, cache_dtype=cache_dtype)
    _, kc, vc = p.f.fresh()
    torch.library.opcheck(OPS.qk_norm_rope_cache.default, p.args(kc, vc), p.kw, test_utils=utils)
    f = Front(SMALL[0], 3, torch.bfloat16, device, cache_dtype=cache_dtype)
    torch.library.opcheck(OPS.attention_front_split.default, f.args(*f.fresh()), f.kw, test_utils=utils)


# --- GPU ---------------------------------------------------------------------------------------------

GPU_CASES = [QWEN3_NEXT, (6144, 32, 4, 128, 64, True), (2048, 8, 2, 128, 128, False), (4096, 4, 1, 512, 64, True),
             *SMALL]


@requires_cuda
@pytest.mark.parametrize("cfg", GPU_CASES, ids=cfg_id)
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("cache", ["fp8", "act"])
@pytest.mark.parametrize("m", [1, 2, 9, 37])
def test_gpu_equals_cpu(cfg, dtype, cache, m):
    kw = dict(max_pos=4096, blocks=64, block_size=16, cache_dtype=torch.float8_e4m3fn if cache == "fp8" else dtype)
    cpu = Post(cfg, m, dtype, "cpu", seed=m, **kw)
    gpu = Post(cfg, m, dtype, "cuda", seed=m, **kw)
    assert_post_equal(run_poisoned(gpu.run), cpu.run(), f"gpu vs cpu {cfg_id(cfg)} m {m}")


@requires_cuda
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
def test_gpu_adversarial_equals_cpu(dtype):
    cfg = (2048, 4, 2, 64, 32, True)
    cpu = Post(cfg, 6, dtype, "cpu", seed=5, max_pos=64, blocks=8, block_size=4)
    gpu = Post(cfg, 6, dtype, "cuda", seed=5, max_pos=64, blocks=8, block_size=4)
    cpu.qkv = adversarial_qkv(6, cpu.f.n, 64, dtype)
    gpu.qkv = cpu.qkv.cuda()
    assert_post_equal(run_poisoned(gpu.run), cpu.run(), "adversarial heads, gpu vs cpu")


@requires_cuda
@pytest.mark.parametrize("cfg", [QWEN3_NEXT, (6144, 32, 4, 128, 64, True)], ids=cfg_id)
@pytest.mark.parametrize("m", [1, 2, 8, 9, 16, 37])
def test_gpu_three_launch_front_equals_unfused(cfg, m, restore_pdl):
    f = Front(cfg, m, torch.bfloat16, "cuda", seed=m, max_pos=4096, blocks=64, block_size=16)
    want = f.run(mxfuse.attention_front_unfused)
    for mode in mxfuse.ops.PDL_MODES:
        mxfuse.set_pdl(mode)
        got = run_poisoned(lambda: f.run(mxfuse.attention_front, fused=False))
        assert_front_equal(list(got), [t.cpu() for t in want], f"three launches vs unfused, pdl {mode}")


@requires_cuda
def test_gpu_bad_positions_and_slots():
    """As rotary_embedding_neox and reshape_and_cache_flash on the GPU (no host sync): a position
    outside the cache gives NaN q and k rows, a slot past the cache writes nothing."""
    p = Post(QWEN3_NEXT, 3, torch.bfloat16, "cuda", max_pos=64, blocks=4, block_size=4)
    p.f.positions = torch.tensor([5, 64, -1], device="cuda")
    p.f.slot_mapping = torch.tensor([0, 16, 3], device="cuda")
    got = run_poisoned(p.run)
    want = p.run(mxfuse.qk_norm_rope_cache_unfused)
    assert_post_equal(got, want, "bad positions and slots vs unfused ops")
    q = got[0]
    assert not q[0].isnan().any() and q[1].isnan().all() and q[2].isnan().all()


@requires_cuda
def test_gpu_graph_capture_and_replay(restore_pdl):
    """Captured in a CUDA graph (PDL on), replayed on new qkv rows: the eager call's bits."""
    p = Post(QWEN3_NEXT, 4, torch.bfloat16, "cuda", max_pos=4096, blocks=8, block_size=16)
    _, kc, vc = p.f.fresh()
    qkv = p.qkv.clone()
    graph, (q, gate) = capture_graph(lambda: OPS.qk_norm_rope_cache(*p.args(kc, vc, qkv), **p.kw))
    new = torch.randn_like(qkv)
    qkv.copy_(new)
    graph.replay()
    want = p.run(qkv=new)
    assert_post_equal((q, gate, kc, vc), want, "graph replay")
