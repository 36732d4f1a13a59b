set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$gpu" | tee $OUT/gpu.txt
t0=$SECONDS
git apply benchmarks/results/experiments/h100_s54_policy_variants.patch && cp -r . /tmp/abtree && git apply -R benchmarks/results/experiments/h100_s54_policy_variants.patch
(cd /tmp/abtree && nvcc -O3 --fmad=false -std=c++17 -gencode=arch=compute_90a,code=sm_90a benchmarks/fp6_param_ab.cu -o /tmp/ab > $OUT/ab_build.txt 2>&1) &
MAX_JOBS=15 TORCH_CUDA_ARCH_LIST=9.0a make build > $OUT/build.log 2>&1; echo "build rc=$? $((SECONDS-t0))s"; wait
/tmp/ab --var l2hint_override --values 0,9,6,8 --shapes 2560x6144,12288x6144,9216x2048 --ms 1,8,16 --pdl 1,2 --rounds 3 > $OUT/policy_variants.txt 2>&1; echo "ab done $((SECONDS-t0))s"
case "$gpu" in *H200*)
  .venv/bin/python benchmarks/bench_mxfp6_linear.py --out $OUT/h200_mxfp6_linear > $OUT/bench_fp6.log 2>&1; echo "bench fp6 rc=$? $((SECONDS-t0))s"
  .venv/bin/python benchmarks/bench_layer_front.py --out $OUT/h200_layer_front > $OUT/bench_layer.log 2>&1; echo "bench layer rc=$? $((SECONDS-t0))s";;
esac
left=$((570 - SECONDS + t0)); [ $left -gt 30 ] && timeout $left .venv/bin/python -m pytest -q -x tests/test_mxfp6_gpu.py tests/test_attention_front.py tests/test_layers.py tests/test_qk_norm_rope_cache.py > $OUT/tests.txt 2>&1; echo "tests rc=$? $((SECONDS-t0))s"; tail -2 $OUT/tests.txt
grep -A20 "==== summary" $OUT/policy_variants.txt
