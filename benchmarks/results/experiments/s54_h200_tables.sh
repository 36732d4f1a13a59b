# Session 54: the committed H200 tables on the evict-first build, only if the card is an H200.
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$gpu" | tee $OUT/gpu.txt
case "$gpu" in *H200*) ;; *) echo "not an H200: nothing run"; exit 0;; esac
MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0a make build > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
.venv/bin/python benchmarks/bench_mxfp6_linear.py --out $OUT/h200_mxfp6_linear > $OUT/bench_fp6.log 2>&1; echo "fp6 rc=$?"
.venv/bin/python benchmarks/bench_layer_front.py --out $OUT/h200_layer_front > $OUT/bench_layer.log 2>&1; echo "layer rc=$?"
tail -25 $OUT/h200_mxfp6_linear.md
