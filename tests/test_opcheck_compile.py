"""torch.library.opcheck on every op, and torch.compile(fullgraph=True) through the
norm -> quantize -> QuantizedActivation -> dequantize chain and over the compiled reference."""

from __future__ import annotations

import pytest
import torch
from conftest import (
    DEVICES,
    HAS_MXFP6,
    OPS,
    assert_bitwise_equal,
    make_norm_inputs,
    randn,
    requires_mxfp6,
)
from mxfuse import MXFP8_KEY, QuantizedActivation, quantize_mxfp8
from mxfuse import reference as ref

ALL_UTILS = (
    "test_schema",
    "test_autograd_registration",
    "test_faketensor",
    "test_aot_dispatch_dynamic",
)
# torch's SchemaCheckMode compares inputs before/after with allclose, which has no float8 kernel;
# for ops taking float8 inputs the schema (no mutation, no aliasing) is checked by hand below.
NO_SCHEMA_UTILS = ALL_UTILS[1:]


def norm_samples(device):
    """(op, args builder) pairs; the builder makes fresh tensors (in-place ops get new clones)."""
    samples = []
    for dtype, wdtype, m, n, shape3 in (
        (torch.bfloat16, torch.bfloat16, 5, 256, False),
        (torch.float16, torch.float32, 3, 2048, False),
        (torch.bfloat16, torch.float32, 6, 96, True),
    ):

        def make(dtype=dtype, wdtype=wdtype, m=m, n=n, shape3=shape3):
            x, r, w = make_norm_inputs(m, n, dtype, wdtype, seed=n)
            if shape3:
                x, r = x.reshape(2, m // 2, n), r.reshape(2, m // 2, n)
            return x.to(device), r.to(device), w.to(device)

        samples += [
            (OPS.gemma_rmsnorm.default, lambda make=make: (make()[0], make()[2], 1e-6, 1.0)),
            (OPS.gemma_fused_add_rmsnorm.default, lambda make=make: (*make(), 1e-5, 0.0)),
            (
                OPS.gemma_rmsnorm_mxfp8.default,
                lambda make=make: (make()[0], make()[2], 1e-6, 1.0, "ceil"),
            ),
            (
                OPS.gemma_fused_add_rmsnorm_mxfp8.default,
                lambda make=make: (*make(), 1e-6, 1.0, "floor"),
            ),
            (OPS.mxfp8_quantize.default, lambda make=make: (make()[0], "ceil")),
        ]
    samples.append(
        (OPS.mxfp8_quantize.default, lambda: (randn((4, 64), torch.float32, 1).to(device), "floor"))
    )
    samples.append(
        (
            OPS.gemma_rmsnorm.default,  # odd N, strided x
            lambda: (
                randn((4, 20), torch.bfloat16, 2).to(device)[:, 3:10],
                randn((7,), torch.bfloat16, 3).to(device),
                1e-6,
                1.0,
            ),
        )
    )
    return samples


_SAMPLE_IDS = [f"{i}-{op.name().split('::')[1]}" for i, (op, _) in enumerate(norm_samples("cpu"))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index", range(len(_SAMPLE_IDS)), ids=_SAMPLE_IDS)
def test_opcheck_norm_and_quantize(index, device):
    op, make_args = norm_samples(device)[index]
    torch.library.opcheck(op, make_args(), test_utils=ALL_UTILS)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_opcheck_dequantize(out_dtype, device):
    x = randn((3, 4, 128), torch.bfloat16, 4, 10.0).to(device)
    codes, scales = OPS.mxfp8_quantize(x, "ceil")
    torch.library.opcheck(
        OPS.mxfp8_dequantize.default, (codes, scales, out_dtype), test_utils=NO_SCHEMA_UTILS
    )
    # the schema part by hand: inputs not mutated, output not aliasing them
    c0, s0 = codes.clone(), scales.clone()
    out = OPS.mxfp8_dequantize(codes, scales, out_dtype)
    assert_bitwise_equal(codes, c0, "codes after dequantize")
    assert_bitwise_equal(scales, s0, "scales after dequantize")
    assert out.untyped_storage().data_ptr() not in (
        codes.untyped_storage().data_ptr(),
        scales.untyped_storage().data_ptr(),
    )


def mxfp6_samples(device):
    w = randn((32, 256), torch.bfloat16, 9).to(device)
    packed, scales = OPS.mxfp6_pack(w, "floor")
    x = randn((5, 256), torch.bfloat16, 10).to(device)
    bias = randn((32,), torch.float32, 11).to(device)
    return {
        "pack": (OPS.mxfp6_pack.default, (w, "floor")),
        "unpack": (OPS.mxfp6_unpack.default, (packed, scales, torch.bfloat16)),
        "linear": (OPS.mxfp6_linear.default, (x, packed, scales, None)),
        "linear_bias": (OPS.mxfp6_linear.default, (x.reshape(5, 1, 256), packed, scales, bias)),
        "round_": (OPS.mxfp6_round_.default, (w.clone(), "floor")),
    }


@requires_mxfp6
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "name",
    [
        "pack",
        "unpack",
        "linear",
        "linear_bias",
        "round_",
    ],
)
def test_opcheck_mxfp6(name, device):
    op, args = mxfp6_samples(device)[name]
    torch.library.opcheck(op, args, test_utils=ALL_UTILS)


def test_every_op_has_an_opcheck_sample():
    """Keep this file in step with the library: a new op needs a sample above."""
    # mxfp8_scaled_mm: test_mxfp8_mm.py::test_opcheck
    checked = {s[0].name() for s in norm_samples("cpu")} | {"mxfuse::mxfp8_dequantize", "mxfuse::mxfp8_scaled_mm"}
    if HAS_MXFP6:
        checked |= {
            "mxfuse::mxfp6_pack",
            "mxfuse::mxfp6_round_",
            "mxfuse::mxfp6_unpack",
            "mxfuse::mxfp6_linear",
        }
    public = {
        f"mxfuse::{name}"
        for name in (
            "gemma_rmsnorm",
            "gemma_fused_add_rmsnorm",
            "gemma_rmsnorm_mxfp8",
            "gemma_fused_add_rmsnorm_mxfp8",
            "mxfp8_quantize",
            "mxfp8_dequantize",
            "mxfp8_scaled_mm",
        )
    }
    assert public <= checked


# --- torch.compile -------------------------------------------------------------------------------


def producer_consumer(x, residual, weight):
    """Fused add+norm -> MXFP8 -> QuantizedActivation (checked like a consumer would) ->
    dequantize; plus the unfused norm -> quantize_mxfp8 path."""
    codes, scales = OPS.gemma_fused_add_rmsnorm_mxfp8(x, residual, weight, 1e-6, 1.0, "ceil")
    qa = QuantizedActivation(codes, scales, MXFP8_KEY, x.dtype, tuple(x.shape))
    qa.check(MXFP8_KEY, in_features=x.shape[-1])
    y = OPS.gemma_rmsnorm(residual, weight, 1e-6, 1.0)
    qa2 = quantize_mxfp8(y)
    return qa.dequantize(), qa2.dequantize(), qa2


def _compare(compiled_out, eager_out):
    for a, b in zip(compiled_out[:2], eager_out[:2]):
        assert_bitwise_equal(a, b, "compiled vs eager")
    qa_c, qa_e = compiled_out[2], eager_out[2]
    assert isinstance(qa_c, QuantizedActivation) and qa_c.key == qa_e.key
    assert qa_c.orig_shape == qa_e.orig_shape and qa_c.orig_dtype == qa_e.orig_dtype
    assert_bitwise_equal(qa_c.data, qa_e.data, "compiled QuantizedActivation.data")
    assert_bitwise_equal(qa_c.scale, qa_e.scale, "compiled QuantizedActivation.scale")


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_producer_consumer(device):
    torch._dynamo.reset()
    compiled = torch.compile(producer_consumer, fullgraph=True)
    for m, seed in ((8, 1), (8, 2)):
        x, r, w = (
            t.to(device) for t in make_norm_inputs(m, 512, torch.bfloat16, torch.bfloat16, seed)
        )
        r_eager, r_comp = r.clone(), r.clone()
        want = producer_consumer(x, r_eager, w)
        got = compiled(x, r_comp, w)
        _compare(got, want)
        assert_bitwise_equal(r_comp, r_eager, "residual updated in place under compile")


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_dynamic_shapes(device):
    """Varying M with dynamic=True: the fakes must give the right symbolic shapes."""
    torch._dynamo.reset()
    compiled = torch.compile(producer_consumer, fullgraph=True, dynamic=True)
    for m in (3, 17):
        x, r, w = (t.to(device) for t in make_norm_inputs(m, 256, torch.float16, torch.float32, m))
        r_eager, r_comp = r.clone(), r.clone()
        _compare(compiled(x, r_comp, w), producer_consumer(x, r_eager, w))
        assert_bitwise_equal(r_comp, r_eager, "residual")


def test_compiled_reference_fused_op_matches_eager_and_op():
    """The benchmark baseline: torch.compile(reference fused add + norm + quant, dynamic=True) on
    the CPU gives the eager reference's bits (and the op's)."""
    torch._dynamo.reset()
    compiled = torch.compile(ref.gemma_fused_add_rmsnorm_mxfp8, dynamic=True)
    for dtype in (torch.bfloat16, torch.float16):
        for m, seed in ((37, 1), (5, 2)):
            x, r, w = make_norm_inputs(m, 3072, dtype, dtype, seed)
            r1, r2, r3 = r.clone(), r.clone(), r.clone()
            c1, s1 = compiled(x, r1, w, 1e-6, 1.0, "ceil")
            c2, s2 = ref.gemma_fused_add_rmsnorm_mxfp8(x, r2, w, 1e-6, 1.0, "ceil")
            c3, s3 = OPS.gemma_fused_add_rmsnorm_mxfp8(x, r3, w, 1e-6, 1.0, "ceil")
            assert_bitwise_equal(c1, c2, "compiled reference codes")
            assert_bitwise_equal(s1, s2, "compiled reference scales")
            assert_bitwise_equal(r1, r2, "compiled reference residual")
            assert_bitwise_equal(c1, c3, "compiled reference vs op codes")
            assert_bitwise_equal(s1, s3, "compiled reference vs op scales")
