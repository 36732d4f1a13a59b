#!/usr/bin/env bash
# NVIDIA compute-sanitizer over every GPU kernel family (tests/sanitize/cases.py): memcheck
# (out-of-bounds and misaligned accesses), racecheck (shared-memory hazards), synccheck (barrier
# misuse) and initcheck (reads of uninitialized global memory). PyTorch's caching allocator is off
# (PYTORCH_NO_CUDA_MEMORY_CACHING=1): every tensor is then its own allocation, so an access past
# a tensor's end is outside an allocation that the tools track, and freed memory is not reused as
# "initialized". Before the tools, a negative control (tests/sanitize/negative_control.py, an
# out-of-bounds store) must be reported by memcheck. Needs the built extension (make build), a
# CUDA GPU and Triton (the control only). Logs under $OUT (default sanitize_out/), a summary last; exits
# non-zero if a tool reports an error or a case fails.
#     scripts/sanitize.sh [tool ...]     (default: memcheck racecheck synccheck initcheck)
set -uo pipefail
OUT=${OUT:-sanitize_out}
mkdir -p "$OUT"
PY=${PY:-.venv/bin/python}
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
TOOLS=${*:-memcheck racecheck synccheck initcheck}
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
rc_all=0
summary=()
"$CS" --tool memcheck --error-exitcode 9 "$PY" tests/sanitize/negative_control.py > "$OUT/sanitize_control.log" 2>&1
rc=$?
if [ $rc -eq 9 ] && grep -q "Invalid __global__ write" "$OUT/sanitize_control.log"; then
  summary+=("control    memcheck reported the out-of-bounds store (as it must)")
else
  summary+=("control    FAILED: memcheck did not report the out-of-bounds store (rc=$rc)")
  rc_all=1
fi
for tool in $TOOLS; do
  args=(--tool "$tool" --error-exitcode 9 --print-limit 20)
  quick=""
  case $tool in
    racecheck) quick="--quick" ;;                        # the slowest tool: fewer cases
  esac
  t0=$SECONDS
  timeout "${SANITIZE_TIMEOUT:-900}" "$CS" "${args[@]}" "$PY" tests/sanitize/cases.py $quick > "$OUT/sanitize_$tool.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] && rc_all=1
  line=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|sanitize cases:|FAILED" "$OUT/sanitize_$tool.log" | tr '\n' ' ')
  summary+=("$(printf '%-10s rc=%-3s %4ss  %s' "$tool" "$rc" "$((SECONDS - t0))" "$line")")
  tail -n 5 "$OUT/sanitize_$tool.log"
done
# The captured chain (tests/sanitize/cases.py fp6_graph): capture cannot allocate without the caching
# allocator, so memcheck checks it with the allocator on (accesses against its blocks).
if [[ " $TOOLS " == *" memcheck "* ]]; then
  t0=$SECONDS
  env -u PYTORCH_NO_CUDA_MEMORY_CACHING timeout "${SANITIZE_TIMEOUT:-900}" "$CS" --tool memcheck --error-exitcode 9 \
    --print-limit 20 "$PY" tests/sanitize/cases.py --only fp6_graph > "$OUT/sanitize_memcheck_graph.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] && rc_all=1
  line=$(grep -E "ERROR SUMMARY|sanitize cases:|FAILED" "$OUT/sanitize_memcheck_graph.log" | tr '\n' ' ')
  summary+=("$(printf '%-10s rc=%-3s %4ss  %s' "memcheck (graph)" "$rc" "$((SECONDS - t0))" "$line")")
fi
echo "==== compute-sanitizer summary ===="
printf '%s\n' "${summary[@]}"
exit $rc_all
