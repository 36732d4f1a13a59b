# Session 56, device call 2 (any card): the rest of the GPU suite on the evict-first build (the test
# files call 1 = s55_h100_check.sh did not run; test_multi_gpu.py skips on one GPU), then racecheck
# of tests/sanitize/race_wide.py and initcheck + synccheck of the fp6 sanitizer section.
# LIMIT=<s> bounds the whole call. One tarball under $OUT.
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$gpu" | tee $OUT/gpu.txt
t0=$SECONDS; R=/tmp/s56; mkdir -p $R; P=.venv/bin/python; L=${LIMIT:-560}
MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0a make build > $R/build.log 2>&1 || { tail -20 $R/build.log; exit 1; }
echo "build $((SECONDS-t0))s"
left() { echo $((L - SECONDS + t0 - $1)); }
timeout $(left 150) $P -m pytest -q tests/test_mxfp6_gpu.py tests/test_attention_front.py tests/test_layers.py \
  tests/test_qk_norm_rope_cache.py tests/test_mxfp8_mm.py tests/test_mxfp8_mm_tc.py tests/test_norm_mxfp8.py \
  tests/test_quant_activation.py tests/test_bad_input.py tests/test_device_code.py tests/test_codecs.py \
  tests/test_reference.py tests/test_tools.py tests/test_multi_gpu.py > $R/tests.txt 2>&1
echo "tests rc=$? $((SECONDS-t0))s"; tail -3 $R/tests.txt
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
t=$(left 100); [ $t -gt 20 ] && PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout $t $CS --tool racecheck --error-exitcode 9 --print-limit 20 $P tests/sanitize/race_wide.py > $R/racecheck_wide.log 2>&1
echo "racecheck wide rc=$? $((SECONDS-t0))s"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|checks" $R/racecheck_wide.log | tail -3
for tool in initcheck synccheck; do
  t=$(left 15); [ $t -gt 20 ] && PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout $((t < 60 ? t : 60)) $CS --tool $tool --error-exitcode 9 --print-limit 20 $P tests/sanitize/cases.py --only fp6 > $R/${tool}_fp6.log 2>&1
  echo "$tool fp6 rc=$? $((SECONDS-t0))s"; grep -E "ERROR SUMMARY|sanitize cases" $R/${tool}_fp6.log
done
tar czf $OUT/s56_call2.tar.gz -C $R .
