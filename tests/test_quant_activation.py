"""QuantKey and QuantizedActivation (SPEC §7): identity, validation, pytree, dequantize."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.utils._pytree as pytree
from conftest import (
    ACT_DTYPES,
    DEVICES,
    OPS,
    assert_bitwise_equal,
    assert_equal_nan_by_position,
    dtype_id,
    make_norm_inputs,
    randn,
)
from mxfuse import MXFP8_KEY, QuantizedActivation, QuantKey, quantize_mxfp8
from mxfuse import reference as ref

# --- QuantKey ------------------------------------------------------------------------------------


def test_key_defaults_name_mxfp8():
    k = QuantKey()
    assert k == MXFP8_KEY
    assert (k.element, tuple(k.block), k.scale_format, k.scale_layout, k.scale_rule) == (
        "e4m3",
        (1, 32),
        "e8m0",
        "row_major",
        "ceil",
    )
    assert k.torch_dtype == torch.float8_e4m3fn


def test_key_equality_and_hash():
    a, b = QuantKey(scale_rule="floor"), QuantKey(scale_rule="floor")
    assert a == b and hash(a) == hash(b) and a is not b
    assert a != MXFP8_KEY
    table = {MXFP8_KEY: "ceil", a: "floor"}
    assert table[QuantKey()] == "ceil" and table[b] == "floor"
    assert len({QuantKey(), QuantKey(), a, b}) == 2


def test_key_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        MXFP8_KEY.scale_rule = "floor"


@pytest.mark.parametrize(
    "field,value",
    [
        ("element", "e5m2"),
        ("element", "e2m3"),
        ("block", (1, 16)),
        ("block", (32, 32)),
        ("scale_format", "ue8m0"),
        ("scale_layout", "swizzled"),
        ("scale_rule", "round"),
    ],
)
def test_key_rejects_unsupported_fields(field, value):
    with pytest.raises(ValueError, match=field):
        QuantKey(**{field: value})


def test_key_block_given_as_list_is_normalized_or_rejected():
    try:
        k = QuantKey(block=[1, 32])
    except (TypeError, ValueError):
        return
    assert hash(k) == hash(MXFP8_KEY) and k == MXFP8_KEY


# --- QuantizedActivation -------------------------------------------------------------------------


def make_qa(m=6, k=256, dtype=torch.bfloat16, device="cpu", key=MXFP8_KEY):
    x = randn((m, k), dtype, 3, 4.0).to(device)
    return x, quantize_mxfp8(x, key)


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_mxfp8_fields(device):
    x, qa = make_qa(device=device)
    assert qa.key == MXFP8_KEY and qa.orig_dtype == torch.bfloat16 and qa.orig_shape == (6, 256)
    assert qa.data.dtype == torch.float8_e4m3fn and qa.data.shape == (6, 256)
    assert qa.scale.dtype == torch.uint8 and qa.scale.shape == (6, 8)
    assert qa.data.device == x.device and qa.scale.device == x.device
    qa.check(MXFP8_KEY)
    qa.check(MXFP8_KEY, in_features=256)
    want_c, want_s = ref.mxfp8_quantize(x.cpu(), "ceil")
    assert_bitwise_equal(qa.data, want_c, "data")
    assert_bitwise_equal(qa.scale, want_s, "scale")


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_mxfp8_follows_key_rule(device):
    x = randn((4, 128), torch.bfloat16, 8, 100.0).to(device)
    floor_key = QuantKey(scale_rule="floor")
    qa = quantize_mxfp8(x, floor_key)
    assert qa.key == floor_key
    want_c, want_s = ref.mxfp8_quantize(x.cpu(), "floor")
    assert_bitwise_equal(qa.data, want_c, "data")
    assert_bitwise_equal(qa.scale, want_s, "scale")
    with pytest.raises(ValueError, match="key"):
        qa.check(MXFP8_KEY)  # a ceil consumer must not take floor-rule scales


def test_check_rejects_mismatched_key():
    _, qa = make_qa()
    with pytest.raises(ValueError, match="key"):
        qa.check(QuantKey(scale_rule="floor"))


def test_check_rejects_wrong_in_features():
    _, qa = make_qa()
    with pytest.raises(ValueError, match="K = 512"):
        qa.check(MXFP8_KEY, in_features=512)


def test_check_rejects_wrong_data_dtype():
    _, qa = make_qa()
    bad = dataclasses.replace(qa, data=qa.data.view(torch.uint8))
    with pytest.raises(ValueError, match="data must be"):
        bad.check(MXFP8_KEY)


def test_check_rejects_wrong_scale_dtype():
    _, qa = make_qa()
    bad = dataclasses.replace(qa, scale=qa.scale.view(torch.int8))
    with pytest.raises(ValueError, match="scale must be torch.uint8"):
        bad.check(MXFP8_KEY)


def test_check_rejects_wrong_scale_shape():
    _, qa = make_qa()
    for scale in (qa.scale[:, :7].contiguous(), qa.scale.reshape(6, 2, 4), qa.scale.reshape(-1)):
        with pytest.raises(ValueError, match="scale must have shape"):
            dataclasses.replace(qa, scale=scale).check(MXFP8_KEY)


def test_check_rejects_k_not_multiple_of_32():
    _, qa = make_qa()
    bad = dataclasses.replace(qa, data=qa.data[:, :48].contiguous(), orig_shape=(6, 48))
    with pytest.raises(ValueError, match="multiple of 32"):
        bad.check(MXFP8_KEY)


def test_check_rejects_non_contiguous_layouts():
    x, qa = make_qa(m=8, k=256)
    wide = torch.cat([qa.data.view(torch.uint8)] * 2, dim=1).view(torch.float8_e4m3fn)
    strided_data = wide[:, :256]
    assert not strided_data.is_contiguous()
    with pytest.raises(ValueError, match="contiguous"):
        dataclasses.replace(qa, data=strided_data).check(MXFP8_KEY)
    column_major_scale = qa.scale.t().contiguous().t()  # same shape, wrong layout
    assert column_major_scale.shape == qa.scale.shape and not column_major_scale.is_contiguous()
    with pytest.raises(ValueError, match="contiguous"):
        dataclasses.replace(qa, scale=column_major_scale).check(MXFP8_KEY)


def test_check_rejects_device_mismatch():
    _, qa = make_qa()
    with pytest.raises(ValueError, match="meta"):
        dataclasses.replace(qa, scale=qa.scale.to("meta")).check(MXFP8_KEY)


def test_check_rejects_scalar_data_and_odd_orig_dtype():
    _, qa = make_qa()
    scalar = dataclasses.replace(qa, data=qa.data.reshape(-1)[0], scale=qa.scale.reshape(-1)[0], orig_shape=())
    with pytest.raises(ValueError, match="data must have at least 1 dimension"):
        scalar.check(MXFP8_KEY)
    with pytest.raises(ValueError, match="orig_dtype must be one of"):
        dataclasses.replace(qa, orig_dtype=torch.int32).check(MXFP8_KEY)


def test_check_rejects_orig_shape_mismatch():
    _, qa = make_qa()
    with pytest.raises(ValueError, match="orig_shape"):
        dataclasses.replace(qa, orig_shape=(3, 512)).check(MXFP8_KEY)


# --- pytree --------------------------------------------------------------------------------------


def test_pytree_round_trip():
    _, qa = make_qa()
    leaves, spec = pytree.tree_flatten(qa)
    assert len(leaves) == 2 and leaves[0] is qa.data and leaves[1] is qa.scale
    back = pytree.tree_unflatten(leaves, spec)
    assert isinstance(back, QuantizedActivation)
    assert back.data is qa.data and back.scale is qa.scale
    assert (back.key, back.orig_dtype, back.orig_shape) == (qa.key, qa.orig_dtype, qa.orig_shape)
    # nested in containers; tree_map rebuilds the node with new leaves and the same metadata
    tree = {"a": [qa, 3], "b": (qa.data,)}
    mapped = pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, tree)
    m = mapped["a"][0]
    assert isinstance(m, QuantizedActivation) and m.key == qa.key and m.data is not qa.data
    assert_bitwise_equal(m.data, qa.data, "mapped data")
    assert len(pytree.tree_leaves(tree)) == 4
    # different metadata -> different tree spec (compile guards on it)
    other = QuantizedActivation(
        qa.data, qa.scale, QuantKey(scale_rule="floor"), qa.orig_dtype, qa.orig_shape
    )
    assert pytree.tree_flatten(other)[1] != spec


# --- dequantize ----------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=dtype_id)
def test_dequantize(dtype, device):
    x = randn((2, 3, 512), dtype, 12, 10.0).to(device)
    qa = quantize_mxfp8(x)
    assert qa.orig_shape == (2, 3, 512) and qa.scale.shape == (2, 3, 16)
    qa.check(MXFP8_KEY, in_features=512)
    got = qa.dequantize()
    assert got.dtype == dtype and got.shape == x.shape
    want_c, want_s = ref.mxfp8_quantize(x.cpu(), "ceil")
    assert_equal_nan_by_position(got, ref.mxfp8_dequantize(want_c, want_s, dtype), "dequantize")
    # MXFP8 keeps about 3 mantissa bits: the round trip is close to x (a sanity bound, not a spec)
    err = (got.float() - x.float()).abs().cpu()
    bound = x.float().abs().cpu().reshape(2, 3, 16, 32).amax(-1, keepdim=True).expand(2, 3, 16, 32)
    assert torch.all(err <= bound.reshape(2, 3, 512) * 2.0**-4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=dtype_id)
def test_fused_producer_output_is_a_valid_activation(dtype, device):
    """A fused norm's (codes, scales) wrapped under MXFP8_KEY pass a consumer's check and
    dequantize to the quantized unfused norm."""
    x, r, w = (t.to(device) for t in make_norm_inputs(5, 1024, dtype, dtype, seed=4))
    codes, scales = OPS.gemma_fused_add_rmsnorm_mxfp8(
        x, r.clone(), w, 1e-6, 1.0, MXFP8_KEY.scale_rule
    )
    qa = QuantizedActivation(codes, scales, MXFP8_KEY, dtype, tuple(x.shape))
    qa.check(MXFP8_KEY, in_features=1024)
    y = OPS.gemma_fused_add_rmsnorm(x, r.clone(), w, 1e-6, 1.0)
    assert_bitwise_equal(qa.dequantize(), quantize_mxfp8(y).dequantize(), "fused producer")
