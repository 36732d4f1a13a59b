# Session 56, device call 3 (any card, warm from call 2): the test files at the end of call 2's list
# (which hit its time limit at 91% with no failure), one pytest run per file so each gets its own
# summary line, last file first; then racecheck of tests/sanitize/race_wide.py if time is left.
# LIMIT=<s> bounds the call. One tarball under $OUT.
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$gpu" | tee $OUT/gpu.txt
t0=$SECONDS; R=/tmp/s56c; mkdir -p $R; P=.venv/bin/python; L=${LIMIT:-560}
MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0a make build > $R/build.log 2>&1 || { tail -20 $R/build.log; exit 1; }
echo "build $((SECONDS-t0))s"
left() { echo $((L - SECONDS + t0 - $1)); }
for f in test_multi_gpu test_tools test_reference test_codecs test_device_code test_bad_input test_quant_activation \
         test_norm_mxfp8 test_mxfp8_mm_tc test_mxfp8_mm; do
  t=$(left 10); [ $t -gt 15 ] || break
  timeout $t $P -m pytest -q tests/$f.py > $R/$f.txt 2>&1; echo "$f rc=$? $((SECONDS-t0))s: $(tail -1 $R/$f.txt)"
done
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
t=$(left 5); [ $t -gt 30 ] && PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout $t $CS --tool racecheck --error-exitcode 9 --print-limit 20 $P tests/sanitize/race_wide.py > $R/racecheck_wide.log 2>&1 && echo "racecheck wide rc=0" || echo "racecheck wide rc=$? (or skipped)"
grep -E "RACECHECK SUMMARY|ERROR SUMMARY|checks" $R/racecheck_wide.log 2>/dev/null | tail -3
tar czf $OUT/s56_call3.tar.gz -C $R .
