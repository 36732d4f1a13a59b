"""The launch paths that need sm_89 / sm_90 device code (the tensor-core MXFP8 kernel; clusters and
programmatic dependent launch) check the code the build runs on the device, not only the device
(kernels::device_code_arch): an "8.0+PTX" build JIT-compiled on an H200 has none of it, and its
guarded kernel bodies trap. `MXFUSE_EXPECT_CODE_ARCH` names the value a test run expects (the
device script sets it for its sm_90a and 8.0+PTX builds)."""
from __future__ import annotations

import os

import mxfuse
import pytest
import torch
from conftest import HAS_CUDA, OPS, assert_bitwise_equal, launched_kernels
from test_mxfp8_mm import codes, mm, scale_bytes

CUDA_KERNELS = HAS_CUDA and torch.version.hip is None


def test_no_cuda_kernels_report_zero_or_check_the_device():
    if torch.version.cuda is None or torch.version.hip is not None:
        assert OPS._device_code_arch(0) == 0  # CPU or ROCm build
    else:
        with pytest.raises(RuntimeError, match="argument 'device' must be a CUDA device index"):
            OPS._device_code_arch(torch.cuda.device_count())


@pytest.mark.skipif(not CUDA_KERNELS, reason="needs an NVIDIA GPU")
def test_code_arch_is_the_builds_and_within_the_device():
    for d in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(d)
        arch = OPS._device_code_arch(d)
        assert 0 < arch <= 10 * major + minor
        if os.environ.get("MXFUSE_EXPECT_CODE_ARCH"):
            assert arch == int(os.environ["MXFUSE_EXPECT_CODE_ARCH"])


@pytest.mark.skipif(not CUDA_KERNELS or torch.cuda.get_device_capability() < (8, 9),
                    reason="needs an NVIDIA GPU of sm_89 or newer")
def test_tensor_core_setting_without_fp8_code_runs_the_exact_kernel():
    """With kernels older than sm_89 the tensor-core setting gives the exact kernel's bits (the CPU
    op's), and no trap; with sm_89+ kernels it launches the tensor-core kernel."""
    a, asc = codes((5, 256), 1), scale_bytes((5, 8), 110, 140, 2)
    b, bsc = codes((48, 256), 3), scale_bytes((48, 8), 110, 140, 4)
    before = mxfuse.fp8_mm_kernel()
    mxfuse.set_fp8_mm_kernel("tensor_cores")
    try:
        got, tc_kernels = launched_kernels(lambda: mm(a, asc, b, bsc, torch.float32, None, "1x32", "cuda"),
                                           "fp8_mm_tc_kernel")
    finally:
        mxfuse.set_fp8_mm_kernel(before)
    tc = bool(tc_kernels)
    assert tc == (OPS._device_code_arch(0) >= 89)
    if not tc:
        assert_bitwise_equal(got, mm(a, asc, b, bsc, torch.float32), "exact kernel vs CPU op")
