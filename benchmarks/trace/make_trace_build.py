"""Turns the working tree into a timeline ("trace") build of the MXFP6 linear kernel:
csrc/kernels/mxfp6_linear.cuh with %globaltimer stamps per warp. A measurement build only, never
the shipped kernel.

Lane 0 of every warp of a traced call records (24 u64 per warp): x's address, SM id and CTA
index, its start (stamped before the record lookup, whose global loads take 1-3 us under load),
the release of the PDL wait, each tile's landing (after its cp.async wait) and the end of its
decode (up to 8 tiles), the end of the CTA reduction, of the cluster exchange and of the kernel.
extern "C" hooks `mxf_trace_setup` / `mxf_trace_dump` are called through ctypes by
trace_mxfp6_linear.py. The trace buffer is one device variable, so the build compiles the kernel
family in one unit: the script patches the header in place, removes the per-entry units
(mxfp6_{linear,front}_*.cu) and writes csrc/kernels/mxfp6_trace.cu, which defines every entry and
the hooks. On the GPU machine, from the repository root:

    python benchmarks/trace/make_trace_build.py
    rm -rf build python/mxfuse/_C*.so && make build
    python benchmarks/trace/trace_mxfp6_linear.py --out trace.json
    git checkout csrc/kernels && rm csrc/kernels/mxfp6_trace.cu   # then rebuild before any other measurement

Every edit asserts that its anchor occurs exactly once in the kernel source, so a kernel change
that moves an anchor stops this script instead of giving a silently wrong trace.
"""

import sys

# Trace buffer geometry, shared with trace_mxfp6_linear.py: calls told apart (by x's address),
# CTAs and warps per CTA recorded, u64 fields per warp (layout in trace_mxfp6_linear.py).
CALLS, MAX_CTAS, MAX_WARPS, FIELDS = 16, 512, 8, 24

HEADER = r"""
__device__ unsigned long long g_trace[@CALLS@ * @MAX_CTAS@ * @MAX_WARPS@ * @FIELDS@];
__device__ unsigned long long g_trace_keys[@CALLS@];
__device__ int g_trace_on;
__device__ __forceinline__ unsigned long long gtime() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
#define TRACE(idx) do { if (rec) rec[idx] = gtime(); } while (0)
"""

START = r"""  const unsigned long long t_start = gtime();  // before the record lookup (global loads)
  unsigned long long* rec = nullptr;
  if (g_trace_on && (threadIdx.x & 31) == 0 && blockIdx.x < @MAX_CTAS@ && threadIdx.x / 32 < @MAX_WARPS@) {
    for (int c = 0; c < @CALLS@; ++c) {
      if (g_trace_keys[c] != reinterpret_cast<unsigned long long>(p.x)) continue;
      rec = g_trace + ((c * @MAX_CTAS@ + blockIdx.x) * @MAX_WARPS@ + threadIdx.x / 32) * @FIELDS@;
      unsigned sm;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      rec[0] = reinterpret_cast<unsigned long long>(p.x);
      rec[1] = (static_cast<unsigned long long>(sm) << 32) | blockIdx.x;
      for (int e = 3; e < @FIELDS@; ++e) rec[e] = 0;
    }
  }
  if (rec) rec[2] = t_start;
"""

HOOKS = r"""
extern "C" __attribute__((visibility("default"))) int mxf_trace_setup(
    const unsigned long long* keys, int on) {
  if (cudaMemcpyToSymbol(mxf::kernels::g_trace_keys, keys, @CALLS@ * 8) != cudaSuccess) return 1;
  if (cudaMemcpyToSymbol(mxf::kernels::g_trace_on, &on, 4) != cudaSuccess) return 2;
  // Clear the records when tracing starts: a CTA that a smaller grid lacks would otherwise keep
  // the record of an earlier trace whose x had the same address.
  void* buf = nullptr;
  if (on && (cudaGetSymbolAddress(&buf, mxf::kernels::g_trace) != cudaSuccess ||
             cudaMemset(buf, 0, sizeof(mxf::kernels::g_trace)) != cudaSuccess)) {
    return 3;
  }
  return 0;
}
extern "C" __attribute__((visibility("default"))) int mxf_trace_dump(void* host) {
  return cudaMemcpyFromSymbol(host, mxf::kernels::g_trace, sizeof(mxf::kernels::g_trace)) !=
         cudaSuccess;
}
"""

# (anchor, replacement); the anchor must occur exactly once.
EDITS = [
    ("namespace mxf::kernels {\nnamespace {\n",
     "namespace mxf::kernels {\n" + HEADER + "namespace {\n"),
    ("#if defined(MXF_HAS_CLUSTER)\n  if constexpr (kS > 1) cluster_arrive_relaxed();",
     START + "#if defined(MXF_HAS_CLUSTER)\n  if constexpr (kS > 1) cluster_arrive_relaxed();"),
    ("    grid_dep_launch();\n  }\n#endif\n  constexpr bool kBF16",
     "    grid_dep_launch();\n  }\n#endif\n  if (p.pdl != 2) TRACE(3);\n  constexpr bool kBF16"),
    ("    grid_dep_launch();\n  }\n#endif\n  if constexpr (std::is_same_v<P, FrontParams>) {\n    front_prologue",
     "    grid_dep_launch();\n  }\n#endif\n  if (p.pdl == 2) TRACE(3);\n"
     "  if constexpr (std::is_same_v<P, FrontParams>) {\n    front_prologue"),
    # a tile's landing: its first ring item (whole tile, or first row tile) has landed
    ("      cp_async_wait<kStages - 2>();\n      sync_lanes();\n",
     "      cp_async_wait<kStages - 2>();\n      sync_lanes();\n      if (h == 0 && i < 8) TRACE(4 + i);\n"),
    ("    if (kV > 1 && i + 1 == cnt0) {  // chain 0 ends",
     "    if (i < 8) TRACE(12 + i);\n    if (kV > 1 && i + 1 == cnt0) {  // chain 0 ends"),
    ("  float v[kEl];\n", "  TRACE(20);\n  float v[kEl];\n"),
    ("    cluster_sync();\n    if (split != 0) return;",
     "    cluster_sync();\n    TRACE(21);\n    if (split != 0) { TRACE(22); return; }"),
    ("    if (m < p.m) store_from_f32(p.out, m * p.n + n, kAct, add_rn(v[q], bias_at(p, n)));\n  }\n}",
     "    if (m < p.m) store_from_f32(p.out, m * p.n + n, kAct, add_rn(v[q], bias_at(p, n)));\n"
     "  }\n  TRACE(22);\n}"),
]


KERNELS = "csrc/kernels"
HEADER_FILE = f"{KERNELS}/mxfp6_linear.cuh"
ENTRIES = [(f"{kind}_{dt}_{m}", f"k{dt.upper()}", nb, params)
           for kind, params in (("linear", "Fp6LinearParams"), ("front", "FrontParams"))
           for dt in ("bf16", "fp16") for m, nb in (("m8", 1), ("m16", 2))]


def main() -> None:
    import glob
    import os

    src = open(HEADER_FILE).read()
    for old, new in EDITS:
        count = src.count(old)
        if count != 1:
            sys.exit(f"make_trace_build: anchor found {count} times, expected once:\n{old}")
        src = src.replace(old, new)
    for name, value in (("CALLS", CALLS), ("MAX_CTAS", MAX_CTAS), ("MAX_WARPS", MAX_WARPS),
                        ("FIELDS", FIELDS)):
        src = src.replace(f"@{name}@", str(value))
    units = sorted(glob.glob(f"{KERNELS}/mxfp6_linear_*.cu") + glob.glob(f"{KERNELS}/mxfp6_front_*.cu"))
    if len(units) != len(ENTRIES):
        sys.exit(f"make_trace_build: expected {len(ENTRIES)} entry units, found {units}")
    one = ['// Trace build (benchmarks/trace/make_trace_build.py): every entry and the hooks in one unit.',
           '#include "mxfp6_linear.cuh"', '']
    one += [f"MXF_FP6_DEFINE_ENTRY({n}, {d}, {nb}, {p})" for n, d, nb, p in ENTRIES]
    hooks = HOOKS.replace("@CALLS@", str(CALLS))
    with open(HEADER_FILE, "w") as f:
        f.write(src)
    for u in units:
        os.remove(u)
    with open(f"{KERNELS}/mxfp6_trace.cu", "w") as f:
        f.write("\n".join(one) + "\n" + hooks)
    print(f"make_trace_build: patched {HEADER_FILE}, merged {len(units)} units into {KERNELS}/mxfp6_trace.cu")


if __name__ == "__main__":
    main()
