// Arch fast paths used by the kernels, each behind a guard. MXF_HAS_MMA_PIPE is defined only in
// the device pass for NVIDIA sm_80+ (cp.async and mma.sync); every user keeps a portable twin.
#pragma once

#include "../core/platform.h"

#if defined(MXF_CUDA) && defined(MXF_DEVICE_PASS) && MXF_CUDA_ARCH >= 800
#define MXF_HAS_MMA_PIPE 1
#endif
// FP8 (E4M3) mma.sync (NVIDIA sm_89+).
#if defined(MXF_CUDA) && defined(MXF_DEVICE_PASS) && MXF_CUDA_ARCH >= 890
#define MXF_HAS_FP8_MMA 1
#endif
// Thread-block clusters and distributed shared memory (NVIDIA sm_90+). Host code launches a
// cluster kernel only on such a device; every other build runs clusters of one CTA.
#if defined(MXF_CUDA) && defined(MXF_DEVICE_PASS) && MXF_CUDA_ARCH >= 900
#define MXF_HAS_CLUSTER 1
#endif

namespace mxf::kernels {

#if defined(MXF_HAS_MMA_PIPE)
MXF_DEV uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Asynchronous global -> shared copies (cp.async) to a shared-memory address (smem_addr of the
// destination, kept in a register by the loops that issue them); completion is tracked per
// thread by groups.
MXF_DEV void cp_async16_to(uint32_t smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem));
}
MXF_DEV void cp_async4_to(uint32_t smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem), "l"(gmem));
}
// The same with an L2 cache policy (l2_evict_first_policy): for streams read once, so that they
// do not push out of L2 the lines other loads reuse (the MXFP6 linear's scale words, read by
// several warps, x, and the previous kernel's outputs: docs/PERF_NOTES.md, fifty-fourth session).
MXF_DEV void cp_async16_to(uint32_t smem, const void* gmem, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "l"(policy));
}
MXF_DEV uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
MXF_DEV void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
MXF_DEV void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

MXF_DEV uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// d = a * b on packed pairs (bf16x2 or f16x2), rounded to nearest even.
template <bool kBF16>
MXF_DEV uint32_t mul2(uint32_t a, uint32_t b) {
  uint32_t d;
  if constexpr (kBF16) {
    // fma with -0 is an exact product (and keeps the sign of zero products).
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
  } else {
    asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  }
  return d;
}

// D = A(16x16, row) * B(16x8, col) + C, fp32 accumulators. The instruction text of both forms below.
#define MXF_MMA_16816(TYPE)                                                                   \
  "mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, " \
  "{%8,%9}, {%10,%11,%12,%13};\n"
#define MXF_MMA_16816_OPERANDS                                                                      \
  : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                                                   \
  : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), \
    "f"(c[3])
template <bool kBF16>
MXF_DEV void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                       const float (&c)[4]) {
  if constexpr (kBF16) {
    asm volatile(MXF_MMA_16816("bf16") MXF_MMA_16816_OPERANDS);
  } else {
    asm volatile(MXF_MMA_16816("f16") MXF_MMA_16816_OPERANDS);
  }
}
// The same without `volatile`: a pure function of its operands, so the compiler may interleave
// independent ones (the tiled MXFP6 linear). Same instruction, same bits.
template <bool kBF16>
MXF_DEV void mma_16816_sched(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                             const float (&c)[4]) {
  if constexpr (kBF16) {
    asm(MXF_MMA_16816("bf16") MXF_MMA_16816_OPERANDS);
  } else {
    asm(MXF_MMA_16816("f16") MXF_MMA_16816_OPERANDS);
  }
}
#undef MXF_MMA_16816_OPERANDS
#undef MXF_MMA_16816
#endif  // MXF_HAS_MMA_PIPE

#if defined(MXF_HAS_CLUSTER)
// Barrier of every thread of every CTA in the cluster; orders shared-memory writes before it
// with reads after it, in any CTA of the cluster (release / acquire).
MXF_DEV void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::
                   : "memory");
}
// The two halves of that barrier without memory ordering, for "every CTA of the cluster has
// started" (a CTA's shared memory may be written by the others only then): arrive early, wait
// just before the first remote access.
MXF_DEV void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory"); }
MXF_DEV void cluster_wait() { asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory"); }
// Stores v at the same shared-memory offset as `local`, in the CTA of cluster rank `rank`.
MXF_DEV void st_cluster_f32(float* local, uint32_t rank, float v) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(smem_addr(local)), "r"(rank));
  asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(remote), "f"(v) : "memory");
}

// Programmatic dependent launch (sm_90+). A kernel launched with the programmatic-serialization
// attribute may start before the previous kernel in the stream has finished; grid_dep_wait()
// blocks until that kernel has completed and its writes are visible (a no-op without the
// attribute). grid_dep_launch() lets the next such kernel start once every CTA of this one has
// called it (or exited).
MXF_DEV void grid_dep_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
MXF_DEV void grid_dep_launch() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
#endif  // MXF_HAS_CLUSTER

// The first thing a kernel does that the host may launch with programmatic dependent launch
// (the norm, quantize and dequantize kernels): wait until the previous kernel in the stream has
// finished and its writes are visible (a no-op for a plain launch), then let the next kernel
// start, so that a PDL-launched kernel after this one is placed while it runs (it waits for this
// one before it touches memory). Waiting before the trigger keeps the chain's guarantee: once a
// kernel after this one starts, every kernel before this one has finished (docs/DECISIONS.md,
// "Programmatic dependent launch"). A no-op where there is no PDL (HIP, before sm_90).
MXF_DEV void dependent_launch_start() {
#if defined(MXF_HAS_CLUSTER)
  grid_dep_wait();
  grid_dep_launch();
#endif
}

}  // namespace mxf::kernels
