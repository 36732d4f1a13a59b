#!/usr/bin/env bash
# A/B of kernel patches in one device call: builds the working tree ("base"), then applies each
# patch on top of the previous ones and rebuilds (ninja: only the changed translation units),
# running $AB_TESTS (pytest arguments, if set) on each patched build; then $AB_BENCH on every build.
# Each variant's extension is kept, so the benchmark rounds can alternate between builds:
#   AB_BENCH="benchmarks/bench_attention_front.py --ms 1 4 8 16" \
#   AB_TESTS="tests/test_attention_front.py" \
#   bash benchmarks/ab_patches.sh a.patch b.patch        # variants: base, +a, +a+b
# AB_BENCH may list several benchmarks separated by ';' (each run on every build and round; their
# outputs are then ab_<variant>_r<round>_b<index>).
# Output: $OUT/ab_<variant>_r<round>.{json,md,log}, packed with the build and test logs into
# $OUT/ab.tar.gz at the end (the device call returns at most 8 files); the tree and its build are
# restored.
# Summary: python benchmarks/ab_summary.py $OUT (it reads ab.tar.gz).
set -uo pipefail
OUT=${OUT:-gpu_out}
ROUNDS=${AB_ROUNDS:-2}
mkdir -p "$OUT"
export MAX_JOBS=${MAX_JOBS:-16} TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a} PYTHONUNBUFFERED=1
so_dir=$(mktemp -d)
variants=(base)
applied=()
restore() { for p in "${applied[@]}"; do git apply -R "$p"; done; }
trap restore EXIT
t0=$SECONDS
make build > "$OUT/ab_build_base.log" 2>&1 || { tail -30 "$OUT/ab_build_base.log"; exit 1; }
cp python/mxfuse/_C*.so "$so_dir/0.so"
echo "base built in $((SECONDS - t0)) s"
name=base
for p in "$@"; do
  git apply "$p" || { echo "patch does not apply: $p"; exit 1; }
  applied=("$p" "${applied[@]}")
  name="$name+$(basename "$p" .patch)"
  t0=$SECONDS
  make build > "$OUT/ab_build_${#variants[@]}.log" 2>&1 || { tail -30 "$OUT/ab_build_${#variants[@]}.log"; exit 1; }
  echo "$name built in $((SECONDS - t0)) s"
  if [ -n "${AB_TESTS:-}" ]; then
    .venv/bin/python -m pytest -q -x $AB_TESTS > "$OUT/ab_test_${#variants[@]}.log" 2>&1
    echo "$name tests rc=$? $(tail -1 "$OUT/ab_test_${#variants[@]}.log")"
  fi
  cp python/mxfuse/_C*.so "$so_dir/${#variants[@]}.so"
  variants+=("$name")
done
so=$(ls python/mxfuse/_C*.so)
IFS=';' read -ra benches <<< "$AB_BENCH"
for r in $(seq 1 "$ROUNDS"); do
  for i in "${!variants[@]}"; do
    cp "$so_dir/$i.so" "$so"
    for j in "${!benches[@]}"; do
      tag="v${i}_r${r}"
      [ "${#benches[@]}" -gt 1 ] && tag="${tag}_b${j}"
      .venv/bin/python ${benches[$j]} --out "$OUT/ab_$tag" > "$OUT/ab_$tag.log" 2>&1
      echo "round $r ${variants[$i]} bench $j: rc=$?"
    done
  done
done
cp "$so_dir/0.so" "$so"  # the build of the sources the trap restores
printf '%s\n' "${variants[@]}" > "$OUT/ab_variants.txt"
(cd "$OUT" && tar czf ab.tar.gz ab_* && rm -f ab_*.json ab_*.md ab_*.log)
