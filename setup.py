"""Builds mxfuse._C: CPU ops always; the GPU kernels when torch has CUDA or ROCm and its toolkit is
present. On ROCm, torch's BuildExtension hipifies the same sources. Build with
`pip install --no-build-isolation -e .` so the installed torch is the one built against."""

import glob
import os

import torch
from setuptools import find_packages, setup
from torch.utils.cpp_extension import (
    CUDA_HOME,
    ROCM_HOME,
    BuildExtension,
    CppExtension,
    CUDAExtension,
    include_paths,
)

ROOT = os.path.dirname(os.path.abspath(__file__))


def _want_gpu() -> bool:
    if os.environ.get("MXFUSE_CPU_ONLY", "0") == "1":
        return False
    if torch.version.hip is not None:
        return ROCM_HOME is not None
    return torch.version.cuda is not None and CUDA_HOME is not None


def _sources(pattern: str) -> list[str]:
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern)))


# The C++ standard is left to torch (C++17 or C++20, whatever its headers need).
# Exactness depends on these: no contraction into FMA, no fast math, no flush to zero (SPEC §1).
# Torch's headers are marked as system headers so -Wall -Wextra report only mxfuse's own code.
SYSTEM_INCLUDES = [f for p in include_paths() for f in ("-isystem", p)]
CXX_FLAGS = ["-O3", "-Wall", "-Wextra", "-ffp-contract=off", "-fno-fast-math",
             *SYSTEM_INCLUDES]
NVCC_FLAGS = ["-O3", "--fmad=false", "-Xcompiler=-ffp-contract=off",
              "-Xcompiler=-Wall", "-Xcompiler=-Wextra", *SYSTEM_INCLUDES]
HIP_FLAGS = ["-O3", "-ffp-contract=off", "-fno-fast-math"]

gpu = _want_gpu()
sources = ["csrc/bindings.cpp"] + _sources("csrc/ops/*.cpp") + _sources("csrc/cpu/*.cpp")
if gpu:
    sources += _sources("csrc/kernels/*.cu")
    ext = CUDAExtension(
        "mxfuse._C",
        sources,
        define_macros=[("MXF_WITH_GPU", "1")],
        extra_compile_args={"cxx": CXX_FLAGS,
                            "nvcc": HIP_FLAGS if torch.version.hip else NVCC_FLAGS},
        py_limited_api=True,
    )
else:
    ext = CppExtension("mxfuse._C", sources, extra_compile_args={"cxx": CXX_FLAGS},
                       py_limited_api=True)

setup(
    name="mxfuse",
    version="0.1.0",
    description="Fused MX-format (OCP Microscaling) kernels for inference engines",
    package_dir={"": "python"},
    packages=find_packages("python"),
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
    python_requires=">=3.9",
)
