#!/usr/bin/env bash
# NVIDIA GPU only. Builds a copy of the working tree for an older virtual architecture as PTX
# alone (default "8.0+PTX"), which the driver JIT-compiles on this GPU, and runs the tests that
# must hold there: such kernels hold no cluster, programmatic-dependent-launch or FP8-mma code
# (their guarded bodies trap), so the launch paths must not take them (kernels::device_code_arch),
# and results stay within their bounds. Logs under $OUT (default ptx_out/); exits non-zero on a
# failed build or test.
#   scripts/check_ptx_jit.sh [pytest args]   (PTX_ARCH=8.0, PTX_TIMEOUT=600)
set -uo pipefail
OUT=${OUT:-ptx_out}
ARCH=${PTX_ARCH:-8.0}
mkdir -p "$OUT"
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$DIR"
t0=$SECONDS
(cd "$DIR" && MAX_JOBS=${MAX_JOBS:-16} TORCH_CUDA_ARCH_LIST="$ARCH+PTX" make build) > "$OUT/ptx_build.log" 2>&1 || {
  tail -20 "$OUT/ptx_build.log"; echo "ptx build failed"; exit 1; }
echo "ptx build ($ARCH+PTX): $((SECONDS - t0)) s"
TESTS=${*:-tests/test_device_code.py tests/test_mxfp6_gpu.py tests/test_mxfp8_mm.py}
t0=$SECONDS
(cd "$DIR" && MXFUSE_EXPECT_CODE_ARCH=${ARCH/./} timeout "${PTX_TIMEOUT:-600}" .venv/bin/python -m pytest -q -x -rs $TESTS) \
  > "$OUT/ptx_test.log" 2>&1
rc=$?
tail -5 "$OUT/ptx_test.log"
echo "ptx tests rc=$rc: $((SECONDS - t0)) s"
exit $rc
