# Session 57, device call 1: build; on an H200 the committed tables on the evict-first build (the
# linear table that issue #4 point 5 is read on, then the layer front and the attention front as
# LIMIT allows); on another card racecheck of tests/sanitize/race_wide.py (still owed on this build)
# and of the fp6 sanitizer sections. LIMIT=<s> bounds the call. Logs and tables under $OUT.
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$gpu" | tee $OUT/gpu.txt
t0=$SECONDS; R=/tmp/s57; mkdir -p $R; P=.venv/bin/python; L=${LIMIT:-560}
left() { echo $((L - SECONDS + t0 - $1)); }
MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0a make build > $R/build.log 2>&1 || { tail -20 $R/build.log; exit 1; }
echo "build $((SECONDS-t0))s"
case "$gpu" in *H200*)
  timeout 220 $P benchmarks/bench_mxfp6_linear.py --out $OUT/h200_mxfp6_linear > $R/bench_fp6.log 2>&1; echo "fp6 rc=$? $((SECONDS-t0))s"
  t=$(left 10); [ $t -gt 60 ] && timeout $((t < 90 ? t : 90)) $P benchmarks/bench_layer_front.py --out $OUT/h200_layer_front > $R/bench_layer.log 2>&1; echo "layer rc=$? $((SECONDS-t0))s"
  t=$(left 10); [ $t -gt 60 ] && timeout $((t < 90 ? t : 90)) $P benchmarks/bench_attention_front.py --out $OUT/h200_attention_front > $R/bench_front.log 2>&1; echo "front rc=$? $((SECONDS-t0))s"
  tar czf $OUT/s57_call1.tar.gz -C $R .
  grep -E "2560x6144|12288x6144" $OUT/h200_mxfp6_linear.md; exit 0;;
esac
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
t=$(left 100); [ $t -gt 30 ] && PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout $t $CS --tool racecheck --error-exitcode 9 --print-limit 20 $P tests/sanitize/race_wide.py > $R/racecheck_wide.log 2>&1
echo "racecheck wide rc=$? $((SECONDS-t0))s"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|checks" $R/racecheck_wide.log | tail -3
for s in fp6_unpack fp6_tiled; do
  t=$(left 5); [ $t -gt 20 ] && PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout $((t < 60 ? t : 60)) $CS --tool racecheck --error-exitcode 9 --print-limit 20 $P tests/sanitize/cases.py --quick --only $s > $R/racecheck_$s.log 2>&1
  echo "racecheck $s rc=$? $((SECONDS-t0))s"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|sanitize cases" $R/racecheck_$s.log | tail -2
done
tar czf $OUT/s57_call1.tar.gz -C $R .
