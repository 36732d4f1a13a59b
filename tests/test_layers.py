"""The engine-facing modules (``mxfuse.layers``): each gives bit for bit the ops it wraps; the norm
fuses its quantization into a consumer exactly when the keys match (SPEC §7), and the fused and
unfused paths of a layer give the same bits; weights survive state_dict round trips."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICES, assert_bitwise_equal, generator, requires_cuda
from mxfuse import layers, ops
from mxfuse.quant import MXFP8_KEY, QuantizedActivation, QuantKey

BF16 = torch.bfloat16


def _rand(g, *shape, scale=1.0, dtype=BF16, device="cpu"):
    return (torch.randn(*shape, generator=g) * scale).to(dtype).to(device)


def _norm(hidden, device, g, key=MXFP8_KEY):
    norm = layers.GemmaRMSNorm(hidden, eps=1e-6, weight_offset=1.0, device=device, output_quant_key=key)
    norm.weight.data.copy_(_rand(g, hidden, scale=0.2, device=device))
    return norm


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("with_residual", [False, True], ids=["norm", "add_norm"])
def test_norm_fuses_into_a_matching_consumer_with_the_same_bits(device, with_residual):
    g = generator(1)
    hidden, out = 256, 64
    norm = _norm(hidden, device, g)
    linear = layers.MXFP8Linear.from_float(_rand(g, out, hidden, scale=0.05, device=device),
                                           _rand(g, out, dtype=torch.float32, device=device))
    x, r = _rand(g, 5, hidden, device=device), _rand(g, 5, hidden, scale=4.0, device=device)

    def run(fused):
        norm.quantize_output = False
        if fused:
            assert norm.fuse_into(linear)
        res = r.clone()
        h = norm(x, res) if with_residual else norm(x)
        if with_residual:
            h, res_out = h
            assert res_out is res
        assert isinstance(h, QuantizedActivation) == fused
        return linear(h), res

    (y_f, r_f), (y_u, r_u) = run(True), run(False)
    assert_bitwise_equal(y_f, y_u, "fused vs unfused layer output")
    assert_bitwise_equal(r_f, r_u, "residual")
    if with_residual:
        assert_bitwise_equal(r_f, (x.float() + r.float()).to(BF16), "residual = round(x + residual)")
    want = ops.mxfp8_scaled_mm(*ops.mxfp8_quantize(ops.gemma_rmsnorm(r_u if with_residual else x, norm.weight)),
                               linear.weight, linear.weight_scale, BF16, linear.bias, b_scale_layout="1x32")
    assert_bitwise_equal(y_u, want, "the ops one by one")


def test_norm_does_not_fuse_on_a_different_key_or_a_keyless_consumer():
    g = generator(2)
    norm = _norm(64, "cpu", g, key=QuantKey(scale_rule="floor"))
    assert not norm.fuse_into(layers.MXFP8Linear(64, 32))  # it wants "ceil"
    assert not norm.fuse_into(layers.MXFP6Linear(128, 16))  # no input quant key
    assert not norm.fuse_into(torch.nn.Linear(64, 32))
    x = _rand(g, 3, 64)
    assert_bitwise_equal(norm(x), ops.gemma_rmsnorm(x, norm.weight), "plain output")
    assert norm.fuse_into(layers.MXFP8Linear(64, 32, input_quant_key=QuantKey(scale_rule="floor")))
    qa = norm(x)
    codes, scales = ops.mxfp8_quantize(ops.gemma_rmsnorm(x, norm.weight), "floor")
    assert qa.key == QuantKey(scale_rule="floor")
    assert_bitwise_equal(qa.data, codes, "codes")
    assert_bitwise_equal(qa.scale, scales, "scales")
    with pytest.raises(ValueError, match="multiple of 32"):
        layers.GemmaRMSNorm(48).fuse_into(layers.MXFP8Linear(64, 32))


def test_consumer_refuses_a_mismatching_activation():
    g = generator(3)
    linear = layers.MXFP8Linear.from_float(_rand(g, 32, 64))
    floor_qa = ops.mxfp8_quantize(_rand(g, 2, 64), "floor")
    qa = QuantizedActivation(*floor_qa, QuantKey(scale_rule="floor"), BF16, (2, 64))
    with pytest.raises(ValueError, match="consumer expects key"):
        linear(qa)
    with pytest.raises(ValueError, match="K = 64"):
        linear(layers.GemmaRMSNorm(96)(_rand(g, 2, 96)))
    with pytest.raises(TypeError, match="QuantizedActivation"):
        layers.MXFP6Linear(128, 16)(QuantizedActivation(*ops.mxfp8_quantize(_rand(g, 2, 128)), MXFP8_KEY, BF16, (2, 128)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bias", [None, BF16, torch.float32], ids=["nobias", "bias_bf16", "bias_fp32"])
def test_mxfp6_linear_module(device, bias):
    g = generator(4)
    w = _rand(g, 48, 256, scale=0.05, device=device)
    b = _rand(g, 48, dtype=bias, device=device) if bias is not None else None
    mod = layers.MXFP6Linear.from_float(w, b)
    packed, scales = ops.mxfp6_pack(w)
    assert_bitwise_equal(mod.packed, packed, "packed")
    assert_bitwise_equal(mod.scales, scales, "scales")
    x = _rand(g, 3, 7, 256, device=device)
    assert_bitwise_equal(mod(x), ops.mxfp6_linear(x, packed, scales, b), "forward")
    assert_bitwise_equal(mod.dequantized_weight(), ops.mxfp6_unpack(packed, scales, BF16), "dequantized weight")
    # a fresh module loaded from the state dict gives the same bits
    twin = layers.MXFP6Linear(256, 48, bias is not None, bias_dtype=bias or BF16, device=device)
    twin.load_state_dict(mod.state_dict())
    assert_bitwise_equal(twin(x), mod(x), "after load_state_dict")
    assert set(mod.state_dict()) == {"packed", "scales"} | ({"bias"} if bias is not None else set())


def test_module_arguments_are_checked():
    with pytest.raises(ValueError, match="in_features must be a positive multiple of 128, got 96"):
        layers.MXFP6Linear(96, 16)
    with pytest.raises(ValueError, match="out_features must be a positive multiple of 16, got 20"):
        layers.MXFP6Linear(128, 20)
    with pytest.raises(ValueError, match="in_features must be a positive multiple of 32, got 40"):
        layers.MXFP8Linear(40, 32)
    with pytest.raises(ValueError, match="out_features must be a positive multiple of 32 for b_scale_layout '32x32'"):
        layers.MXFP8Linear(64, 48, b_scale_layout="32x32")
    with pytest.raises(ValueError, match="b_scale_layout must be one of"):
        layers.MXFP8Linear(64, 32, b_scale_layout="1x1")
    with pytest.raises(ValueError, match="bias must have shape \\(32,\\)"):
        layers.MXFP8Linear.from_float(torch.zeros(32, 64), torch.zeros(31))
    with pytest.raises(ValueError, match="rotary_dim must be even"):
        layers.AttentionFront(128, 2, 2, 32, 33)
    with pytest.raises(ValueError, match="head_dim must be a positive multiple of 16"):
        layers.AttentionFront(128, 2, 2, 24, 24)
    with pytest.raises(ValueError, match="qkv_weight must have shape \\(192, 128\\)"):
        layers.AttentionFront.from_float(torch.zeros(128), torch.zeros(256, 128), torch.zeros(32), torch.zeros(32),
                                         num_q_heads=2, num_kv_heads=2, head_dim=32, rotary_dim=32, output_gate=False)


def test_neox_cos_sin_cache():
    cs = layers.neox_cos_sin_cache(64, 16, base=1000.0)
    inv = 1000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    ang = torch.arange(64, dtype=torch.float64)[:, None] * inv
    assert cs.dtype == torch.float32 and cs.shape == (64, 16)
    assert_bitwise_equal(cs, torch.cat([ang.cos(), ang.sin()], 1).float(), "cos | sin")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gate", [False, True], ids=["nogate", "gate"])
def test_attention_front_module(device, gate):
    g = generator(5)
    hidden, hq, hkv, d, rd = 128, 2, 1, 32, 16
    n = hq * d * (2 if gate else 1) + 2 * hkv * d
    qkv = _rand(g, n, hidden, scale=0.05, device=device)
    front = layers.AttentionFront.from_float(
        _rand(g, hidden, scale=0.2, device=device), qkv, _rand(g, d, scale=0.2, dtype=torch.float32, device=device),
        _rand(g, d, scale=0.2, device=device), num_q_heads=hq, num_kv_heads=hkv, head_dim=d, rotary_dim=rd,
        output_gate=gate, max_position=32)
    assert front.qkv.out_features == n and front.q_norm_weight.dtype == torch.float32
    assert_bitwise_equal(front.qkv.packed, ops.mxfp6_pack(qkv)[0], "packed qkv")
    # the same front built empty and loaded from the state dict
    twin = layers.AttentionFront(hidden, hq, hkv, d, rd, output_gate=gate, max_position=32, device=device)
    twin.q_norm_weight = torch.nn.Parameter(torch.zeros(d, device=device), requires_grad=False)
    twin.load_state_dict(front.state_dict())
    m = 3
    x, r = _rand(g, m, hidden, device=device), _rand(g, m, hidden, scale=4.0, device=device)
    positions = torch.tensor([5, 0, 31], device=device)
    slots = torch.tensor([7, -1, 2], device=device)
    cache = torch.zeros(4, 4, hkv, d, dtype=BF16, device=device)
    scale = torch.ones(1, device=device)

    def run(fn, **kw):
        res, kc, vc = r.clone(), cache.clone(), cache.clone()
        q, gt = fn(x, res, positions, slots, kc, vc, scale, scale, **kw)
        return q, gt, res, kc, vc

    got = run(front)
    for name, a, b in zip(("q", "gate", "residual", "key_cache", "value_cache"), run(twin), got):
        assert_bitwise_equal(a, b, f"loaded twin: {name}")
    want = run(lambda *a, **kw: ops.attention_front_unfused(
        a[0], a[1], front.input_norm_weight, front.qkv.packed, front.qkv.scales, front.q_norm_weight,
        front.k_norm_weight, front.cos_sin_cache, *a[2:], num_q_heads=hq, num_kv_heads=hkv, head_dim=d,
        rotary_dim=rd, output_gate=gate))
    for name, a, b in zip(("q", "gate", "residual", "key_cache", "value_cache"), got, want):
        assert_bitwise_equal(a, b, f"module vs unfused ops: {name}")
    assert got[1].shape == (m, hq, d if gate else 0)


def test_layer_compiles_fullgraph():
    """norm (fused into the consumer) -> MXFP8Linear, compiled whole: a QuantizedActivation flows
    between the modules in the graph and the bits are eager's."""
    g = generator(6)
    norm = _norm(128, "cpu", g)
    linear = layers.MXFP8Linear.from_float(_rand(g, 64, 128, scale=0.05))
    assert norm.fuse_into(linear)

    def step(x, r):
        h, r = norm(x, r)
        return linear(h)

    x, r = _rand(g, 4, 128), _rand(g, 4, 128)
    r1, r2 = r.clone(), r.clone()
    got = torch.compile(step, fullgraph=True, backend="aot_eager")(x, r1)
    assert_bitwise_equal(got, step(x, r2), "compiled vs eager")
    assert_bitwise_equal(r1, r2, "residual")


@requires_cuda
def test_modules_move_to_the_gpu():
    g = generator(7)
    w = _rand(g, 32, 128, scale=0.05)
    cpu_mod = layers.MXFP6Linear.from_float(w)
    mod = layers.MXFP6Linear.from_float(w).to("cuda")
    assert mod.packed.is_cuda and mod.scales.is_cuda
    assert_bitwise_equal(mod.packed.cpu(), cpu_mod.packed, "packed moved")
    x = _rand(g, 2, 128, device="cuda")
    # the GPU linear is within the fp64 bound of the CPU one, not bitwise (test_mxfp6_gpu.py)
    assert_bitwise_equal(mod(x), ops.mxfp6_linear(x, cpu_mod.packed.cuda(), cpu_mod.scales.cuda()), "module vs op")
    assert_bitwise_equal(layers.MXFP6Linear.from_float(w.cuda()).packed.cpu(), cpu_mod.packed, "packed on the GPU")


def test_demo_runs_and_every_comparison_is_equal():
    """`make demo`'s job at a small size: every fused-vs-unfused comparison it prints is EQUAL and it
    exits 0 (a MISMATCH line makes it exit 1)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "mxfuse", "demo", "--device", "cpu", "--hidden", "256",
                          "--layers", "2", "--steps", "1"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("EQUAL, bit for bit") == 4 and "MISMATCH" not in out.stdout, out.stdout
    assert "final residual stream equal: True" in out.stdout
