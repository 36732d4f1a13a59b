#!/usr/bin/env bash
# CUDA build check, no GPU needed: builds the whole extension (ops + kernels) with setup.py for
# sm_90a (H100/H200) against a CUDA torch, as a GPU machine would, then loads it and runs a CPU op.
# The CUDA torch lives in its own venv (made once), and the build goes to build-cuda/ with
# build_ext --build-temp/--build-lib, so the main tree's CPU build (.venv, python/mxfuse/_C*.so)
# is never touched.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${MXFUSE_CUDA_VENV:-.venv-cuda}
OUT=${MXFUSE_CUDA_BUILD:-build-cuda}
TORCH_VERSION=2.14.1  # the CUDA 13 build whose wheel lies on this machine's disk; never another

# The toolkit root: nvcc may be a wrapper script (as /usr/local/bin/nvcc is here), so ask nvcc
# itself where it runs from rather than trusting the directory of the first nvcc on PATH.
if [ -z "${CUDA_HOME:-}" ]; then
  command -v nvcc >/dev/null || { echo "check_cuda_build: nvcc not found" >&2; exit 1; }
  here=$(nvcc -dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ _HERE_=//p' | head -n1)
  export CUDA_HOME=${here%/bin}
fi
[ -x "$CUDA_HOME/bin/nvcc" ] || { echo "check_cuda_build: no nvcc in CUDA_HOME=$CUDA_HOME" >&2; exit 1; }

# A CUDA torch of exactly this version, installed only when missing (about 5.5 GB, a minute or
# two from the local wheel files that pip is configured to use).
have_torch() {
  "$VENV/bin/python" -c "import sys, torch; sys.exit(not (torch.__version__.split('+')[0] == '$TORCH_VERSION' and torch.version.cuda))" 2>/dev/null
}
if ! have_torch; then
  echo "check_cuda_build: installing torch==$TORCH_VERSION into $VENV"
  "${PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q "torch==$TORCH_VERSION" setuptools wheel ninja numpy
  have_torch || { echo "check_cuda_build: $VENV has no CUDA torch $TORCH_VERSION" >&2; exit 1; }
fi

# ATen/cuda/CUDAContext.h includes the CUDA library headers (cusparse.h, cublas_v2.h, ...). A
# compiler-only toolkit (as here) lacks them; torch's own nvidia-* wheels ship them, so use those,
# as system headers, behind the toolkit's own.
if [ ! -f "$CUDA_HOME/include/cusparse.h" ]; then
  libinc=$("$VENV/bin/python" -c "import glob, os, torch; print(next(iter(sorted(glob.glob(os.path.join(os.path.dirname(torch.__path__[0]), 'nvidia', '*', 'include', 'cusparse.h')))), '').rpartition('/')[0])")
  [ -n "$libinc" ] || { echo "check_cuda_build: no cusparse.h in $CUDA_HOME or torch's wheels" >&2; exit 1; }
  export CPLUS_INCLUDE_PATH=$libinc${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}
fi

# setup.py builds the GPU kernels when torch has CUDA and CUDA_HOME is set; make sure nothing in
# the caller's environment turns that off.
unset MXFUSE_CPU_ONLY
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=${MAX_JOBS:-$(nproc)}
"$VENV/bin/python" -c "import torch; print('check_cuda_build: torch', torch.__version__, 'CUDA', torch.version.cuda, '| nvcc from', '$CUDA_HOME')"
"$VENV/bin/python" setup.py -q build_ext --build-temp "$OUT/temp" --build-lib "$OUT/lib"

so=$(ls "$OUT"/lib/mxfuse/_C*.so)
# The GPU half really is in there: kernel launchers and an sm_90a device image.
# (grep without -q: an early exit would kill nm with SIGPIPE, which pipefail reports as failure)
nm -DC "$so" | grep 'mxf::kernels::launch_gemma_norm' >/dev/null ||
  { echo "check_cuda_build: $so has no GPU kernels (CPU-only build?)" >&2; exit 1; }
grep -aq 'sm_90a' "$so" || { echo "check_cuda_build: $so has no sm_90a code" >&2; exit 1; }
# It loads into the CUDA torch (no GPU needed) and its CPU kernels run.
"$VENV/bin/python" - "$so" <<'PY'
import sys, torch
torch.ops.load_library(sys.argv[1])
x = torch.full((2, 64), 2.0, dtype=torch.bfloat16)
y = torch.ops.mxfuse.gemma_rmsnorm(x, torch.zeros(64, dtype=torch.bfloat16), 1e-6, 1.0)
assert torch.equal(y, torch.ones_like(y)), y
print("check_cuda_build: ok,", sys.argv[1], "loads and runs")
PY
