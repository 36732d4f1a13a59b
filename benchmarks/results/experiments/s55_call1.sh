# Session 55, device call 1: build; on an H200 the committed tables (linear, layer front, attention
# front) on the evict-first build; on any card an after-a-kernel launch-shape sweep at 2560 x 6144
# and the GPU test files the session-54 check did not run. Everything under $OUT (one tarball).
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$gpu" | tee $OUT/gpu.txt
case "$gpu" in *H200*) ;; *) exec bash benchmarks/results/experiments/s55_h100_check.sh;; esac
t0=$SECONDS; R=/tmp/s55; mkdir -p $R
MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0a make build > $R/build.log 2>&1 || { tail -20 $R/build.log; exit 1; }
echo "build $((SECONDS-t0))s"
P=.venv/bin/python
case "$gpu" in *H200*)
  timeout 240 $P benchmarks/bench_mxfp6_linear.py --out $OUT/h200_mxfp6_linear > $R/bench_fp6.log 2>&1; echo "fp6 rc=$? $((SECONDS-t0))s"
  timeout 90 $P benchmarks/bench_layer_front.py --out $OUT/h200_layer_front > $R/bench_layer.log 2>&1; echo "layer rc=$? $((SECONDS-t0))s"
  timeout 90 $P benchmarks/bench_attention_front.py --out $OUT/h200_attention_front > $R/bench_front.log 2>&1; echo "front rc=$? $((SECONDS-t0))s";;
esac
MXFUSE_FP6_NO_CAPTURE_CHECK=1 timeout 60 $P benchmarks/sweep_mxfp6_linear.py --shapes 2560x6144 12288x6144 --ms 1 8 16 \
  --configs r2w4s8 r2w8s4 r2w4s2 r2w8s2 r2w4s1 r2w8s1 r1w4s4 r1w8s4 \
  --out $R/sweep_after_kernel.json > $R/sweep.log 2>&1; echo "sweep rc=$? $((SECONDS-t0))s"; cat $R/sweep.log | grep -v Warn
left=$((${LIMIT:-560} - SECONDS + t0)); [ $left -gt 30 ] && timeout $left $P -m pytest -q tests/test_fuzz.py tests/test_compile_cudagraphs.py \
  tests/test_opcheck_compile.py tests/test_gpu.py tests/test_misuse.py tests/test_mxfp6.py > $R/tests.txt 2>&1; echo "tests rc=$? $((SECONDS-t0))s"; tail -3 $R/tests.txt
tar czf $OUT/s55_call1.tar.gz -C $R . ; ls $R
for f in $OUT/h200_mxfp6_linear.md; do [ -f $f ] && grep -E "2560x6144|12288x6144" $f; done
