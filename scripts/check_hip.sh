#!/usr/bin/env bash
# HIP compile check: every GPU kernel source (csrc/kernels/*.cu, unchanged) and the core device
# check (tests/hip/*.hip.cpp) compiled as HIP for every gfx9 target this hipcc knows, warnings as
# errors. No AMD GPU or ROCm torch is needed: it proves the one-source rule (DESIGN.md) holds for
# AMD before a ROCm machine ever sees the code. Extra files given as arguments are compiled too.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's hipcc targets nvcc unless told otherwise.
export HIP_PLATFORM=amd
HIPCC=${HIPCC:-hipcc}
command -v "$HIPCC" >/dev/null || { echo "check_hip: $HIPCC not found (apt-get install hipcc)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Every gfx9 target name; each is kept if this compiler accepts it (a newer hipcc adds gfx942 and
# gfx950 by itself). MXFUSE_HIP_ARCHS overrides the candidate list.
candidates=${MXFUSE_HIP_ARCHS:-"gfx900 gfx902 gfx904 gfx906 gfx908 gfx909 gfx90a gfx90c gfx940 gfx941 gfx942 gfx950"}
printf '#include <hip/hip_runtime.h>\n__global__ void probe(int* p) { *p = 1; }\n' > "$work/probe.hip"
archs=()
for a in $candidates; do
  if "$HIPCC" -x hip --offload-arch="$a" -c "$work/probe.hip" -o "$work/probe.o" 2>/dev/null; then
    archs+=("$a")
  fi
done
# The deployment targets: MI200 (gfx90a) and MI300 (gfx940 on older compilers, gfx942 on newer).
[[ " ${archs[*]} " == *" gfx90a "* ]] || { echo "check_hip: $HIPCC does not know gfx90a" >&2; exit 1; }
[[ " ${archs[*]} " == *" gfx940 "* || " ${archs[*]} " == *" gfx942 "* ]] ||
  { echo "check_hip: $HIPCC knows neither gfx940 nor gfx942" >&2; exit 1; }

shopt -s nullglob
kernels=(csrc/kernels/*.cu)
sources=("${kernels[@]}" tests/hip/*.hip.cpp "$@")
[ ${#kernels[@]} -gt 0 ] || echo "check_hip: no csrc/kernels/*.cu yet; checking the core helpers only"

# The exactness flags of the real build (SPEC §1, §3), its MXF_WITH_GPU define, and C++20: setup.py
# leaves the standard to torch's extension builder, which passes -std=c++20.
flags=(-x hip -std=c++20 -O3 -ffp-contract=off -fno-fast-math -Wall -Wextra -Werror
       -DMXF_WITH_GPU=1 -Icsrc "${archs[@]/#/--offload-arch=}")
# The sources compile in parallel, MXFUSE_HIP_JOBS at a time (default: every core); the report
# below keeps the sources' order.
jobs_max=${MXFUSE_HIP_JOBS:-$(nproc)}
compile_one() {  # index, source
  local obj="$work/$1.o"
  if "$HIPCC" "${flags[@]}" -c "$2" -o "$obj" 2> "$work/$1.err"; then
    echo ok > "$work/$1.status"
  else
    echo FAIL > "$work/$1.status"
  fi
}
for i in "${!sources[@]}"; do
  compile_one "$i" "${sources[$i]}" &
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
done
wait
failed=()
for i in "${!sources[@]}"; do
  src=${sources[$i]}
  if [ "$(cat "$work/$i.status" 2>/dev/null)" = ok ]; then
    echo "check_hip: ok   $src"
  else
    echo "check_hip: FAIL $src"
    cat "$work/$i.err" 2>/dev/null
    failed+=("$src")
  fi
done
echo "check_hip: targets ${archs[*]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "check_hip: FAILED to compile for HIP: ${failed[*]}" >&2
  exit 1
fi
echo "check_hip: ${#sources[@]} file(s) compile for HIP on ${#archs[@]} target(s)"
