# Session 56, last device call: on an H200 the linear table (the one issue #4 point 5 is read on),
# then the layer-front table if time is left; on another card the tail of the GPU suite
# (s56_call3.sh). Logs and tables under $OUT.
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$gpu" | tee $OUT/gpu.txt
case "$gpu" in *H200*) ;; *) exec bash benchmarks/results/experiments/s56_call3.sh;; esac
t0=$SECONDS; P=.venv/bin/python
MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0a make build > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "build $((SECONDS-t0))s"
timeout 220 $P benchmarks/bench_mxfp6_linear.py --out $OUT/h200_mxfp6_linear > $OUT/bench_fp6.log 2>&1
echo "fp6 rc=$? $((SECONDS-t0))s"
t=$((${LIMIT:-500} - SECONDS + t0)); [ $t -gt 60 ] && timeout $t $P benchmarks/bench_layer_front.py --out $OUT/h200_layer_front > $OUT/bench_layer.log 2>&1; echo "layer rc=$? $((SECONDS-t0))s"
grep -E "2560x6144|12288x6144" $OUT/h200_mxfp6_linear.md
