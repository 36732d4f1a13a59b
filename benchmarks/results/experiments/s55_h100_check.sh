# Session 55, H100 call: correctness of the evict-first build beyond the session-54 test files
# (memcheck over the linear and attention-front sanitizer sections, more GPU test files) and an
# after-a-kernel launch-shape sweep at 2560 x 6144 and 12288 x 6144. One tarball under $OUT.
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$gpu" | tee $OUT/gpu.txt
t0=$SECONDS; R=/tmp/s55; mkdir -p $R; P=.venv/bin/python
MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0a make build > $R/build.log 2>&1 || { tail -20 $R/build.log; exit 1; }
echo "build $((SECONDS-t0))s"
MXFUSE_FP6_NO_CAPTURE_CHECK=1 timeout 60 $P benchmarks/sweep_mxfp6_linear.py --shapes 2560x6144 12288x6144 --ms 1 8 16 \
  --configs r2w4s8 r2w8s4 r2w4s2 r2w8s2 r2w4s1 r2w8s1 r1w4s4 r1w8s4 \
  --out $R/sweep_after_kernel.json > $R/sweep.log 2>&1; echo "sweep rc=$? $((SECONDS-t0))s"; grep -v Warn $R/sweep.log
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout $(( ${LIMIT:-565} > 400 ? 220 : 120 )) $CS --tool memcheck --error-exitcode 9 --print-limit 20 $P tests/sanitize/cases.py --only fp6 front > $R/memcheck_fp6_front.log 2>&1
echo "memcheck fp6+front rc=$? $((SECONDS-t0))s"; grep -E "ERROR SUMMARY|sanitize cases" $R/memcheck_fp6_front.log
timeout 60 $CS --tool memcheck --error-exitcode 9 --print-limit 20 $P tests/sanitize/cases.py --only fp6_graph > $R/memcheck_graph.log 2>&1
echo "memcheck graph rc=$? $((SECONDS-t0))s"; grep -E "ERROR SUMMARY|sanitize cases" $R/memcheck_graph.log
left=$((${LIMIT:-565} - SECONDS + t0)); [ $left -gt 30 ] && timeout $left $P -m pytest -q tests/test_gpu.py tests/test_compile_cudagraphs.py \
  tests/test_opcheck_compile.py tests/test_misuse.py tests/test_mxfp6.py tests/test_fuzz.py > $R/tests.txt 2>&1; echo "tests rc=$? $((SECONDS-t0))s"; tail -3 $R/tests.txt
tar czf $OUT/s55_h100_check.tar.gz -C $R .
