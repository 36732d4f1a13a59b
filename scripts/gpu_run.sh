#!/usr/bin/env bash
# One device call: build for sm_90a with all cores, run the GPU tests and the benchmarks, leave
# logs and results under $OUT (or ./gpu_out), print a short summary last.
set -uo pipefail
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export MAX_JOBS=${MAX_JOBS:-16} TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a} PYTHONUNBUFFERED=1
STEPS=${STEPS:-"build test bench_norm bench_fp6 bench_layer"}
summary=()
step() {  # name, command...
  local name=$1; shift
  local t0=$SECONDS
  "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-12s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - t0))")")
  tail -n 25 "$OUT/$name.log"
  return $rc
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader > "$OUT/gpu.txt" 2>&1
for s in $STEPS; do
  case $s in
    build) step build make build || { printf '%s\n' "${summary[@]}"; exit 1; } ;;
    test) step test .venv/bin/python -m pytest -q -x -rs --durations=20 --junitxml="$OUT/junit.xml" ${PYTEST_ARGS:-tests} ;;
    multi_gpu)  # two GPUs: tests/test_multi_gpu.py; one: its dry run
      one=1; [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 2 ] && one=0
      step multi_gpu env MXFUSE_TEST_ONE_GPU=$one .venv/bin/python -m pytest -q -rs tests/test_multi_gpu.py ;;
    fuzz) step fuzz env MXFUSE_FUZZ_CASES="${FUZZ_CASES:-200}" .venv/bin/python -m pytest -q -rf -k cuda tests/test_fuzz.py ;;
    bench_norm) step bench_norm .venv/bin/python benchmarks/bench_norm_quant.py --out "$OUT/h200_norm_quant" ${NORM_ARGS:-} ;;
    bench_fp6) step bench_fp6 .venv/bin/python benchmarks/bench_mxfp6_linear.py --out "$OUT/h200_mxfp6_linear" ${FP6_ARGS:-} ;;
    bench_layer) step bench_layer .venv/bin/python benchmarks/bench_layer_front.py --out "$OUT/h200_layer_front" ;;
    *) step "$s" bash -c "$s" ;;
  esac
done
echo "==== summary ===="
cat "$OUT/gpu.txt"
printf '%s\n' "${summary[@]}"
