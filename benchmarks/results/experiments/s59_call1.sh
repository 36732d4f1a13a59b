# Session 59, device call: on an H200, s57_call1.sh (build, then the linear, layer-front and
# attention-front tables on the evict-first build). On another card nothing more is owed on this
# build (tests, memcheck, initcheck, synccheck and racecheck all ran on H100s in sessions 56 and 58),
# so the call stops at once to keep the device budget for an H200. LIMIT=<s> as in s57_call1.sh.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$gpu"
case "$gpu" in *H200*) exec bash benchmarks/results/experiments/s57_call1.sh;; esac
echo "not an H200: nothing run"; echo "$gpu" > $OUT/gpu.txt
