"""Turns the working tree into a timeline ("front trace") build of the fused attention front:
per-CTA %globaltimer stamps of its phases (wall_ticks(), csrc/core/platform.h), for
benchmarks/trace/trace_attention_front.py. A measurement build only, never the shipped kernel.

Thread 0 of each CTA (blockIdx < MAX_CTAS) of a launch with MXF_FRONT_TRACE=1 in the environment
records FIELDS u64 (layout in trace_attention_front.py): its SM, the kernel start, the dependency
wait's release, its ticket and when it got it, the end of the rows it normed (producers), the end
of the wait for the block's rows, the end of the projection, the arrival count, its head duties
and the end. The buffer is a device allocation made by the host launcher on the first traced
launch; extern "C" hooks `mxf_front_trace_clear` / `mxf_front_trace_dump` serve ctypes. Every
launch overwrites its CTAs' records, so clear, run the call of interest, then dump. On the GPU
machine, from the repository root:

    python benchmarks/trace/make_front_trace_build.py
    rm -rf build python/mxfuse/_C*.so && make build
    python benchmarks/trace/trace_attention_front.py --out front_trace.json
    git checkout csrc   # then rebuild before any other measurement

Every edit asserts that its anchor occurs exactly once, so a kernel change that moves an anchor
stops this script (and tests/test_tools.py) instead of giving a silently wrong trace.
"""

import sys

MAX_CTAS, FIELDS = 4096, 16

PARAMS_FILE = "csrc/core/params.h"
HEADER_FILE = "csrc/kernels/mxfp6_linear.cuh"
LAUNCH_FILE = "csrc/kernels/mxfp6.cu"

STAMP = r"""
// Field i of this CTA's record (thread 0 only), the time or a value.
MXF_DEV void front_rec(const FrontParams& f, int i, unsigned long long v) {
  if (threadIdx.x == 0 && f.trace != nullptr && blockIdx.x < @MAX_CTAS@) f.trace[blockIdx.x * @FIELDS@ + i] = v;
}
MXF_DEV void front_rec(const Fp6LinearParams&, int, unsigned long long) {}
"""

HOOKS = r"""
static unsigned long long* g_front_trace = nullptr;
extern "C" __attribute__((visibility("default"))) int mxf_front_trace_clear() {
  if (g_front_trace == nullptr) return -1;
  return static_cast<int>(cudaMemset(g_front_trace, 0, @MAX_CTAS@ * @FIELDS@ * 8));
}
extern "C" __attribute__((visibility("default"))) int mxf_front_trace_dump(unsigned long long* host, int n) {
  if (g_front_trace == nullptr) return -1;
  cudaDeviceSynchronize();
  return static_cast<int>(cudaMemcpy(host, g_front_trace, static_cast<size_t>(n) * 8, cudaMemcpyDeviceToHost));
}
error_t launch_attention_front(const FrontParams& p0, stream_t stream) {
  FrontParams p = p0;
  const char* on = std::getenv("MXF_FRONT_TRACE");
  if (on != nullptr && std::atoi(on) != 0) {
    if (g_front_trace == nullptr) {
      if (cudaMalloc(&g_front_trace, @MAX_CTAS@ * @FIELDS@ * 8) != cudaSuccess) return last_error();
      cudaMemset(g_front_trace, 0, @MAX_CTAS@ * @FIELDS@ * 8);
    }
    p.trace = g_front_trace;
  }
"""

# (file, anchor, replacement); the anchor must occur exactly once in its file.
EDITS = [
    (PARAMS_FILE,
     "  int* counters = nullptr;             // GPU: zeroed workspace, left zeroed (see ops)\n",
     "  int* counters = nullptr;             // GPU: zeroed workspace, left zeroed (see ops)\n"
     "  unsigned long long* trace = nullptr;  // front trace build only\n"),
    (HEADER_FILE,
     "MXF_HD const Fp6LinearParams& linear_of(const FrontParams& p) { return p.linear; }\n",
     "MXF_HD const Fp6LinearParams& linear_of(const FrontParams& p) { return p.linear; }\n" + STAMP),
    (HEADER_FILE,
     "  if (pdl < 2) {\n    grid_dep_wait();\n    grid_dep_launch();\n  } else if (pdl == 3) {",
     "  if (pdl < 2) {\n    grid_dep_wait();\n    grid_dep_launch();\n    front_rec(pp, 2, wall_ticks());\n"
     "  } else if (pdl == 3) {"),
    (HEADER_FILE,
     "  if (pdl == 2) {  // x and out only after the previous kernel has finished\n"
     "    grid_dep_wait();\n    grid_dep_launch();\n  }\n",
     "  if (pdl == 2) {  // x and out only after the previous kernel has finished\n"
     "    grid_dep_wait();\n    grid_dep_launch();\n    front_rec(pp, 2, wall_ticks());\n  }\n"),
    (HEADER_FILE,
     "  __syncthreads();\n  if (ticket < rows) {\n",
     "  __syncthreads();\n"
     "  front_rec(f, 3, wall_ticks());\n  front_rec(f, 4, static_cast<unsigned long long>(ticket));\n"
     "  if (ticket < rows) {\n"),
    (HEADER_FILE,
     "    if (threadIdx.x == 0) atomicAdd(word, done << kFrontReadyShift);\n",
     "    if (threadIdx.x == 0) atomicAdd(word, done << kFrontReadyShift);\n    front_rec(f, 5, wall_ticks());\n"),
    (HEADER_FILE,
     "    __threadfence();  // the rows' stores, before this CTA's loads of them (after the barrier)\n"
     "  }\n  __syncthreads();\n",
     "    __threadfence();  // the rows' stores, before this CTA's loads of them (after the barrier)\n"
     "  }\n  __syncthreads();\n  front_rec(f, 6, wall_ticks());\n"),
    (HEADER_FILE,
     "    linear_mma<kAct, kNB, kRT, kW, kV, kS, kItemRT, P, kWide>(pp, smem, row0, m0, split);\n",
     "    if (threadIdx.x == 0) {\n      unsigned sm;\n      asm volatile(\"mov.u32 %0, %%smid;\" : \"=r\"(sm));\n"
     "      front_rec(pp, 0, sm);\n    }\n    front_rec(pp, 1, wall_ticks());\n"
     "    linear_mma<kAct, kNB, kRT, kW, kV, kS, kItemRT, P, kWide>(pp, smem, row0, m0, split);\n"
     "    front_rec(pp, 7, wall_ticks());\n"),
    (HEADER_FILE,
     "  __syncthreads();\n  if (n_duty == 0) return;\n",
     "  __syncthreads();\n  front_rec(f, 8, wall_ticks());\n  front_rec(f, 9, static_cast<unsigned long long>(n_duty));\n"
     "  if (n_duty == 0) return;\n"),
    (HEADER_FILE,
     "        front_epilogue<kRowsX, kS>(pp, smem, linear_smem_bytes<kNB, kRT, kW, kV, kS>(), row0, "
     "kRT * kFp6TileRows, m0);\n      }\n",
     "        front_epilogue<kRowsX, kS>(pp, smem, linear_smem_bytes<kNB, kRT, kW, kV, kS>(), row0, "
     "kRT * kFp6TileRows, m0);\n      }\n      front_rec(pp, 10, wall_ticks());\n"),
    (LAUNCH_FILE,
     "error_t launch_attention_front(const FrontParams& p, stream_t stream) {\n",
     HOOKS),
    (LAUNCH_FILE, "#include <algorithm>\n", "#include <algorithm>\n#include <cstdlib>\n"),
]


def main() -> None:
    sources = {}
    for path, old, new in EDITS:
        src = sources.setdefault(path, open(path).read())
        count = src.count(old)
        if count != 1:
            sys.exit(f"make_front_trace_build: anchor found {count} times in {path}, expected once:\n{old}")
        new = new.replace("@MAX_CTAS@", str(MAX_CTAS)).replace("@FIELDS@", str(FIELDS))
        sources[path] = src.replace(old, new)
    for path, src in sources.items():
        with open(path, "w") as f:
            f.write(src)
    print(f"make_front_trace_build: patched {', '.join(sources)}")


if __name__ == "__main__":
    main()
