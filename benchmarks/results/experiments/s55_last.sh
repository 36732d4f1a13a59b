# Session 55, last short device call (little budget left): on an H200 only the linear table; on an
# H100 memcheck over the linear's sanitizer section. Logs and tables under $OUT.
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$gpu" | tee $OUT/gpu.txt
t0=$SECONDS; P=.venv/bin/python
MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0a make build > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "build $((SECONDS-t0))s"
case "$gpu" in
  *H200*) timeout 200 $P benchmarks/bench_mxfp6_linear.py --out $OUT/h200_mxfp6_linear > $OUT/bench_fp6.log 2>&1
          echo "fp6 rc=$? $((SECONDS-t0))s"; grep -E "2560x6144|12288x6144" $OUT/h200_mxfp6_linear.md ;;
  *) CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
     PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 180 $CS --tool memcheck --error-exitcode 9 --print-limit 20 $P \
       tests/sanitize/cases.py --only fp6 > $OUT/memcheck_fp6.log 2>&1
     echo "memcheck fp6 rc=$? $((SECONDS-t0))s"; grep -E "ERROR SUMMARY|sanitize cases" $OUT/memcheck_fp6.log ;;
esac
