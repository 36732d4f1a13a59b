// Load latency of a cold line against how far its address is from lines the SM has touched:
// does a first touch of a page cost an address-translation miss on top of the DRAM access? One
// thread per SM issues dependent ld.global.cg loads (each address depends on the previous value)
// and times each with clock64. A measurement tool, not part of the library.
//
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a benchmarks/floor/tlb_probe.cu -o tlb_probe
// Run:   ./tlb_probe
// Cases (per SM its own region of fresh memory, L2 flushed before each case by streaming 256 MB):
//   l2hit    the same line again (after one warm-up load)
//   line     consecutive 128-byte lines of one 64 KB block
//   4k       lines 4 KB apart (one 2 MB page)
//   64k      lines 64 KB apart (one 2 MB page after 32)
//   2m       lines 2 MB apart: a page this SM has not touched, per load
//   2m_warm  lines 2 MB apart in pages another SM touched just before (a shared translation cache)
//   32m      lines 32 MB apart
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../cuda_check.h"

constexpr int kLoads = 24;

__device__ __forceinline__ uint32_t ld_cg(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.global.cg.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ long long clk() {
  long long t;
  asm volatile("mov.u64 %0, %%clock64;\n" : "=l"(t)::"memory");
  return t;
}
// Each address is chained to the previous load's value (masked by `zero`, 0 at run time, which
// the compiler cannot fold), and each time stops after the value has been stored to shared memory.
__global__ void probe(const uint8_t* buf, int64_t region, int64_t stride, int repeat_first, uint32_t zero,
                      long long* out) {
  __shared__ uint32_t keep[kLoads + 1];
  if (threadIdx.x != 0) return;
  const uint8_t* base = buf + blockIdx.x * region;
  uint32_t dep = 0;
  if (repeat_first) {
    dep = ld_cg(reinterpret_cast<const uint32_t*>(base)) & zero;
    keep[kLoads] = dep;
  }
  for (int i = 0; i < kLoads; ++i) {
    const uint32_t* a = reinterpret_cast<const uint32_t*>(base + (repeat_first ? 0 : i * stride) + dep);
    const long long t0 = clk();
    const uint32_t v = ld_cg(a);
    keep[i] = v;
    __threadfence_block();
    const long long t1 = clk();
    dep = v & zero;
    out[blockIdx.x * kLoads + i] = t1 - t0;
  }
  if (keep[0] == 0x5a5a5a5a && zero) out[0] = keep[1];
}

// Touch (one load) the pages of SM b's region, from SM (b + 1) % grid.
__global__ void touch(const uint8_t* buf, int64_t region, int64_t stride, int n, uint32_t* sink) {
  if (threadIdx.x != 0) return;
  const int b = (blockIdx.x + 1) % gridDim.x;
  uint32_t s = 0;
  for (int i = 0; i < n; ++i) s += ld_cg(reinterpret_cast<const uint32_t*>(buf + b * region + i * stride + 64));
  if (s == 12345) sink[0] = s;
}

__global__ void flush(uint4* p, int64_t n, uint4* sink) {
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const uint4 v = p[i];
    acc.x ^= v.x;
  }
  if (acc.x == 0x9999) sink[0] = acc;
}

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  int khz = 0;
  CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  const double ghz = khz / 1e6;
  struct Case {
    const char* name;
    int64_t stride;
    int repeat;
    int warm;
  };
  const Case cases[] = {{"l2hit", 0, 1, 0},       {"line", 128, 0, 0},      {"4k", 4096, 0, 0},
                        {"64k", 65536, 0, 0},     {"2m", 2 << 20, 0, 0},    {"2m_warm", 2 << 20, 0, 1},
                        {"32m", 32 << 20, 0, 0}};
  uint4* fbuf;
  const int64_t fbytes = int64_t{256} << 20;
  CK(cudaMalloc(&fbuf, fbytes));
  CK(cudaMemset(fbuf, 1, fbytes));
  uint4* fsink;
  CK(cudaMalloc(&fsink, 64));
  long long* dout;
  CK(cudaMalloc(&dout, sizeof(long long) * sms * kLoads));
  std::printf("device %s, %d SMs, SM clock %.2f GHz (nominal; clock64 counts SM cycles)\n", prop.name, sms, ghz);
  std::printf("%-8s %10s %10s %10s %10s  (cycles per dependent load, loads 2..%d over all SMs)\n", "case", "p10",
              "median", "p90", "first", kLoads);
  for (const Case& c : cases) {
    // Each case gets fresh memory (its pages untouched since allocation, apart from the memset).
    const int64_t reg = c.repeat ? 4096 : std::max<int64_t>(c.stride * kLoads, 4096);
    // At most 16 GB: the far cases probe from fewer SMs.
    const int grid = static_cast<int>(std::min<int64_t>(sms, (int64_t{16} << 30) / reg));
    const int64_t bytes = reg * grid;
    uint8_t* buf;
    if (cudaMalloc(&buf, bytes) != cudaSuccess) {
      cudaGetLastError();
      std::printf("%-8s (%.1f GB does not fit)\n", c.name, bytes / 1e9);
      continue;
    }
    // No memset: its writes would bring the pages' translations in; the values are never used.
    flush<<<sms * 4, 512>>>(fbuf, fbytes / 16, fsink);
    if (c.warm) touch<<<grid, 32>>>(buf, reg, c.stride, kLoads, reinterpret_cast<uint32_t*>(fsink));
    if (c.warm) flush<<<sms * 4, 512>>>(fbuf, fbytes / 16, fsink);
    probe<<<grid, 32>>>(buf, reg, c.stride, c.repeat, 0u, dout);
    CK(cudaDeviceSynchronize());
    std::vector<long long> h(grid * kLoads);
    CK(cudaMemcpy(h.data(), dout, h.size() * sizeof(long long), cudaMemcpyDeviceToHost));
    std::vector<long long> rest, first;
    for (int b = 0; b < grid; ++b) {
      first.push_back(h[b * kLoads]);
      for (int i = 1; i < kLoads; ++i) rest.push_back(h[b * kLoads + i]);
    }
    std::sort(rest.begin(), rest.end());
    std::sort(first.begin(), first.end());
    const auto q = [](const std::vector<long long>& v, double f) { return v[static_cast<size_t>(f * (v.size() - 1))]; };
    std::printf("%-8s %10lld %10lld %10lld %10lld  (%d SMs)\n", c.name, q(rest, 0.1), q(rest, 0.5), q(rest, 0.9), q(first, 0.5), grid);
    CK(cudaFree(buf));
  }
  return 0;
}
