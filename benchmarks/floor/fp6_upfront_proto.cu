// Timing prototype, not part of the library: a balanced MXFP6 decode feed with deep per-warp
// rings, against the shipped linear in one process (issue #4 point 5, the per-call reading).
//
// The question it answers: with one CTA per SM (or a few), every SM given the same number of
// (row tile, k-tile) units (a contiguous range of `packed`), and each warp issuing up to kD units
// of cp.async at once (the whole share at 2560 x 6144), does a call after a kernel get near the
// read floor of the tenth session (4.05-4.09 us at 2560 x 6144) with the shipped decode
// (mma_tile of csrc/kernels/mxfp6_linear.cuh)? Partial sums go out by fp32 atomics, so the
// result is not deterministic: this times the feed and the decode, not a shippable reduction.
// Its output is checked against the shipped kernel's within a bf16 tolerance.
//
// Build: nvcc -O3 --fmad=false -std=c++17 -gencode=arch=compute_90a,code=sm_90a \
//          benchmarks/floor/fp6_upfront_proto.cu -o fp6_upfront_proto
// Run:   ./fp6_upfront_proto [--shapes 2560x6144,12288x6144] [--ms 1,8,16] [--rounds 3]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../../csrc/kernels/mxfp6_linear.cuh"

void mxf::kernels::note_fp6_linear_kernel(const void*) {}

#include "../cuda_check.h"

namespace mxf::kernels {
namespace {

struct ProtoParams {
  const uint16_t* x;
  const uint8_t* packed;
  const uint8_t* scales;
  float* out;
  int64_t m, n, k;
};

// Grid: any number of CTAs; CTA c owns units [U c / G, U (c + 1) / G) of the U = (N / 16) (K / 128)
// units in `packed` order (row tile major). Warp w of the CTA takes the CTA's units w, w + kW, ...
// and streams them through a ring of kD slots (kD in flight after each refill).
template <int kNB, int kW, int kD, int kMinB, int kRTU>
__global__ void __launch_bounds__(kW * 32, kMinB) proto_kernel(const ProtoParams p) {
#if defined(MXF_HAS_CLUSTER)
  extern __shared__ __align__(16) uint8_t smem[];
  grid_dep_wait();
  grid_dep_launch();
  constexpr int kSlot = kRTU * kTileStageBytes;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;
  const int ktiles = static_cast<int>(p.k / kFp6TileCols), sgroups = static_cast<int>(p.k / kMxBlock);
  const int units = static_cast<int>(p.n / (kFp6TileRows * kRTU)) * ktiles;
  const int u0 = static_cast<int>(int64_t{units} * blockIdx.x / gridDim.x);
  const int u1 = static_cast<int>(int64_t{units} * (blockIdx.x + 1) / gridDim.x);
  const int first = u0 + warp;
  const int count = first < u1 ? (u1 - first + kW - 1) / kW : 0;
  uint8_t* const ring = smem + warp * kD * kSlot;
  const uint32_t ring_s = smem_addr(ring);
  const auto advance = [&](int& rt, int& kt) {
    kt += kW;
    while (kt >= ktiles) {
      kt -= ktiles;
      ++rt;
    }
  };
  // Cursors (row-tile unit, k-tile) of the next unit to issue and of the unit being decoded.
  int irt = first / ktiles, ikt = first % ktiles, islot = 0;
  const int64_t rt_stride = int64_t{ktiles} * kFp6TileBytes;
  const auto issue = [&]() {
    const uint32_t dst = ring_s + islot * kSlot;
    const uint8_t* src = p.packed + (int64_t{irt} * kRTU * ktiles + ikt) * kFp6TileBytes + lane * 16;
#pragma unroll
    for (int r = 0; r < kRTU; ++r) {
#pragma unroll
      for (int q = 0; q < 3; ++q) cp_async16_to(dst + r * kTileStageBytes + lane * 16 + q * 512, src + r * rt_stride + q * 512);
      if (lane < kFp6TileRows) {
        cp_async4_to(dst + r * kTileStageBytes + kFp6TileBytes + lane * 4,
                     p.scales + (int64_t{irt * kRTU + r} * kFp6TileRows + lane) * sgroups + ikt * 4);
      }
    }
    islot = islot + 1 == kD ? 0 : islot + 1;
    advance(irt, ikt);
  };
#pragma unroll
  for (int s = 0; s < kD; ++s) {
    if (s < count) issue();
    cp_async_commit();
  }
  int drt = first / ktiles, dkt = first % ktiles, dslot = 0;
  const uint16_t* xrow[kNB];
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb) {
    const int64_t mm = nb * 8 + g < p.m ? nb * 8 + g : p.m - 1;
    xrow[nb] = p.x + mm * p.k + 8 * t;
  }
  uint4 xq[kNB][4];
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      xq[nb][j] = count > 0 ? load_x(reinterpret_cast<const uint4*>(xrow[nb] + dkt * kFp6TileCols) + j * 4)
                            : make_uint4(0, 0, 0, 0);
    }
  const uint32_t par = (t & 1) ? 0x2222u : 0u;
  const int lane_codes = kFp6GroupBytes * kFp6GroupsPerTileRow * g + ((6 * t) & ~3);
  float acc[kRTU][kNB][4];
  const auto zero = [&]() {
#pragma unroll
    for (int r = 0; r < kRTU; ++r)
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[r][nb][i] = 0.0f;
  };
  zero();
  constexpr bool kSpread = kNB == 2;
  for (int i = 0; i < count; ++i) {
    cp_async_wait<kD - 1>();
    sync_lanes();
    const uint8_t* st = ring + dslot * kSlot;
    uint32_t s_lo[kRTU], s_hi[kRTU];
    bool fold = true;
#pragma unroll
    for (int r = 0; r < kRTU; ++r) {
      s_lo[r] = *reinterpret_cast<const uint32_t*>(st + r * kTileStageBytes + kFp6TileBytes + g * 4);
      s_hi[r] = *reinterpret_cast<const uint32_t*>(st + r * kTileStageBytes + kFp6TileBytes + (g + 8) * 4);
      fold = fold && scales_foldable(s_lo[r]) && scales_foldable(s_hi[r]);
    }
    const bool folded = __all_sync(0xffffffffu, fold);
    const bool more = i + 1 < count;
    int nrt = drt, nkt = dkt;
    advance(nrt, nkt);
    const uint4* xnext[kNB];
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) xnext[nb] = reinterpret_cast<const uint4*>(xrow[nb] + (more ? nkt : dkt) * kFp6TileCols);
    if (folded) {
      mma_tile<true, true, kNB, kRTU, 0, kRTU, kXWhole, kSpread>(st + lane_codes, xq, xnext, more, par, s_lo, s_hi, acc);
    } else {
      mma_tile<true, false, kNB, kRTU, 0, kRTU, kXWhole, kSpread>(st + lane_codes, xq, xnext, more, par, s_lo, s_hi, acc);
    }
    if (!more || nrt != drt) {
#pragma unroll
      for (int r = 0; r < kRTU; ++r)
#pragma unroll
        for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int64_t row = (int64_t{drt} * kRTU + r) * kFp6TileRows + g + (e >= 2 ? 8 : 0);
            const int64_t mm = nb * 8 + 2 * t + (e & 1);
            if (mm < p.m) atomicAdd(p.out + mm * p.n + row, acc[r][nb][e]);
          }
      zero();
    }
    drt = nrt;
    dkt = nkt;
    dslot = dslot + 1 == kD ? 0 : dslot + 1;
    sync_lanes();  // every lane has read the slot before it is refilled
    if (i + kD < count) issue();
    cp_async_commit();
  }
  cp_async_wait<0>();
#endif
}

struct Variant {
  std::string name;
  int nb;           // n8 blocks (1: M <= 8, 2: M <= 16)
  int ctas_per_sm;  // grid = SMs * this
  int threads, smem;
  void (*kernel)(const ProtoParams);
};

template <int kNB, int kW, int kD, int kMinB, int kRTU = 1>
Variant make(int per_sm) {
  char name[64];
  std::snprintf(name, sizeof name, "R%dW%dD%dx%d", kRTU, kW, kD, per_sm);
  return Variant{name, kNB, per_sm, kW * 32, kW * kD * kRTU * kTileStageBytes, proto_kernel<kNB, kW, kD, kMinB, kRTU>};
}

}  // namespace
}  // namespace mxf::kernels

namespace {
using mxf::kernels::ProtoParams;
using mxf::kernels::Variant;

__device__ uint32_t hash32(uint64_t i, uint32_t seed) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull;
  z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<uint32_t>(z >> 32);
}
__global__ void fill(uint8_t* p, int64_t n, uint32_t seed, int kind, int lo, int span) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const uint32_t h = hash32(i, seed);
    if (kind == 0) {
      p[i] = static_cast<uint8_t>(h);
    } else if (kind == 1) {
      p[i] = static_cast<uint8_t>(lo + h % span);
    } else if (i % 2 == 0) {
      const float f = (static_cast<float>(h >> 8) / 8388608.0f) - 1.0f;
      uint32_t b;
      std::memcpy(&b, &f, 4);
      reinterpret_cast<uint16_t*>(p)[i / 2] = static_cast<uint16_t>(b >> 16);
    }
  }
}
void fill_host(uint8_t* p, int64_t n, uint32_t seed, int kind, int lo = 0, int span = 256) {
  fill<<<1024, 256>>>(p, n, seed, kind, lo, span);
  CK(cudaGetLastError());
}
std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  for (size_t b = 0; b <= s.size();) {
    const size_t e = std::min(s.find(',', b), s.size());
    if (e > b) v.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return v;
}
float bf16_to_f32(uint16_t h) {
  uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
struct Set {
  uint8_t *packed, *scales, *x, *out;
  float* out32;
};
}  // namespace

int main(int argc, char** argv) {
  std::vector<int> ns{2560, 12288}, ks{6144, 6144}, ms{1, 8, 16};
  int rounds = 3;
  for (int a = 1; a + 1 < argc; a += 2) {
    const std::string k = argv[a];
    if (k == "--shapes") {
      ns.clear();
      ks.clear();
      for (const std::string& t : split(argv[a + 1])) {
        int n = 0, kk = 0;
        if (std::sscanf(t.c_str(), "%dx%d", &n, &kk) != 2) return 2;
        ns.push_back(n);
        ks.push_back(kk);
      }
    } else if (k == "--ms") {
      ms.clear();
      for (const std::string& t : split(argv[a + 1])) ms.push_back(std::atoi(t.c_str()));
    } else if (k == "--rounds") {
      rounds = std::atoi(argv[a + 1]);
    }
  }
  using namespace mxf::kernels;
  std::vector<Variant> variants = {
      make<1, 16, 2, 2>(1),    make<1, 16, 3, 2>(1),    make<1, 8, 2, 4>(2),     make<1, 4, 2, 8>(4),
      make<1, 4, 3, 8>(4),     make<1, 8, 2, 2, 2>(1),  make<1, 8, 3, 2, 2>(1),  make<1, 4, 2, 4, 2>(2),
      make<1, 4, 3, 4, 2>(2),  make<1, 4, 2, 4, 2>(3),  make<2, 8, 2, 2>(1),     make<2, 4, 2, 4>(2),
      make<2, 4, 2, 4, 2>(2),  make<2, 4, 2, 4, 2>(3),
  };
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  double copy_gbs = 0;
  {
    const size_t bytes = size_t{1} << 31;
    void *a, *b;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    float best = 1e30f;
    for (int r = 0; r < 6; ++r) {
      CK(cudaEventRecord(e0, stream));
      CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream));
      CK(cudaEventRecord(e1, stream));
      CK(cudaEventSynchronize(e1));
      float t;
      CK(cudaEventElapsedTime(&t, e0, e1));
      if (r > 0) best = std::min(best, t);
    }
    copy_gbs = 2.0 * bytes / (best * 1e-3) / 1e9;
    CK(cudaFree(a));
    CK(cudaFree(b));
  }
  std::printf("device %s, %d SMs, copy %.0f GB/s\n", prop.name, sms, copy_gbs);
  for (auto& v : variants) {
    CK(cudaFuncSetAttribute(v.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, v.smem));
  }
  std::vector<std::string> summary;
  for (size_t si = 0; si < ns.size(); ++si) {
    const int64_t n = ns[si], k = ks[si];
    const int64_t packed_bytes = n / 16 * (k / 128) * 1536, scale_bytes = n * (k / 32);
    const int64_t max_m = *std::max_element(ms.begin(), ms.end());
    std::vector<Set> sets(16);
    for (int i = 0; i < 16; ++i) {
      CK(cudaMalloc(&sets[i].packed, packed_bytes));
      CK(cudaMalloc(&sets[i].scales, scale_bytes));
      CK(cudaMalloc(&sets[i].x, max_m * k * 2));
      CK(cudaMalloc(&sets[i].out, max_m * n * 2));
      CK(cudaMalloc(&sets[i].out32, max_m * n * 4));
      fill_host(sets[i].packed, packed_bytes, 100 + i, 0);
      fill_host(sets[i].scales, scale_bytes, 200 + i, 1, 118, 8);
      fill_host(sets[i].x, max_m * k * 2, 400 + i, 2);
    }
    CK(cudaDeviceSynchronize());
    for (int64_t m : ms) {
      const auto shipped = [&](int i, int pdl) {
        mxf::Fp6LinearParams p;
        p.x = sets[i].x;
        p.packed = sets[i].packed;
        p.scales = sets[i].scales;
        p.out = sets[i].out;
        p.m = m;
        p.n = n;
        p.k = k;
        p.x_stride = k;
        p.act = mxf::Dtype::kBF16;
        p.num_sms = sms;
        p.clusters = true;
        p.pdl = pdl;
        p.smem_per_sm = static_cast<int>(prop.sharedMemPerMultiprocessor);
        p.smem_reserved = static_cast<int>(prop.reservedSharedMemPerBlock);
        p.smem_optin = static_cast<int>(prop.sharedMemPerBlockOptin);
        return m <= 8 ? launch_linear_typed<mxf::Dtype::kBF16, 1>(p, stream)
                      : launch_linear_typed<mxf::Dtype::kBF16, 2>(p, stream);
      };
      const auto proto = [&](const Variant& v, int i) {
        ProtoParams pp{reinterpret_cast<const uint16_t*>(sets[i].x), sets[i].packed, sets[i].scales, sets[i].out32,
                       m, n, k};
        return mxf::launch_ex(v.kernel, dim3(static_cast<unsigned>(sms * v.ctas_per_sm)), dim3(v.threads), v.smem, stream,
                         1, true, pp);
      };
      std::vector<const Variant*> vs;
      for (auto& v : variants) {
        if ((m <= 8 && v.nb == 1) || (m > 8 && v.nb == 2)) vs.push_back(&v);
      }
      // Check: the shipped kernel (bf16 out) against each variant (fp32 out from zero).
      std::vector<uint16_t> ref(m * n);
      std::vector<float> got(m * n);
      CK(shipped(0, 0));
      CK(cudaStreamSynchronize(stream));
      CK(cudaMemcpy(ref.data(), sets[0].out, m * n * 2, cudaMemcpyDeviceToHost));
      double refmax = 0;
      for (uint16_t h : ref) refmax = std::max(refmax, std::fabs(double(bf16_to_f32(h))));
      std::vector<double> err(vs.size());
      for (size_t vi = 0; vi < vs.size(); ++vi) {
        CK(cudaMemsetAsync(sets[0].out32, 0, m * n * 4, stream));
        CK(proto(*vs[vi], 0));
        CK(cudaStreamSynchronize(stream));
        CK(cudaMemcpy(got.data(), sets[0].out32, m * n * 4, cudaMemcpyDeviceToHost));
        double e = 0;
        for (int64_t q = 0; q < m * n; ++q) e = std::max(e, std::fabs(double(got[q]) - bf16_to_f32(ref[q])));
        err[vi] = e / refmax;
      }
      // Time: one graph of 128 calls cycling the 16 sets, best of 5 replays, rounds alternating.
      std::vector<std::function<cudaError_t(int)>> calls;
      std::vector<std::string> names;
      calls.push_back([&](int i) { return shipped(i, 1); });
      names.push_back("shipped(on_after_kernel)");
      for (const Variant* v : vs) {
        calls.push_back([&, v](int i) { return proto(*v, i); });
        names.push_back(v->name);
      }
      std::vector<cudaGraphExec_t> execs(calls.size());
      for (size_t c = 0; c < calls.size(); ++c) {
        cudaGraph_t gr;
        CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        for (int r = 0; r < 128; ++r) CK(calls[c](r % 16));
        CK(cudaStreamEndCapture(stream, &gr));
        CK(cudaGraphInstantiate(&execs[c], gr, 0));
        CK(cudaGraphDestroy(gr));
        CK(cudaGraphLaunch(execs[c], stream));
      }
      CK(cudaStreamSynchronize(stream));
      std::vector<float> best(calls.size(), 1e30f);
      for (int r = 0; r < rounds; ++r) {
        for (size_t c = 0; c < calls.size(); ++c) {
          for (int rep = 0; rep < 5; ++rep) {
            CK(cudaEventRecord(e0, stream));
            CK(cudaGraphLaunch(execs[c], stream));
            CK(cudaEventRecord(e1, stream));
            CK(cudaEventSynchronize(e1));
            float t;
            CK(cudaEventElapsedTime(&t, e0, e1));
            best[c] = std::min(best[c], t * 1000.0f / 128.0f);
          }
        }
      }
      for (auto& ex : execs) CK(cudaGraphExecDestroy(ex));
      const double bytes = packed_bytes + scale_bytes + 2.0 * m * (k + n);
      char line[1024];
      int o = std::snprintf(line, sizeof line, "%5lldx%-5lld M=%-2lld |", (long long)n, (long long)k, (long long)m);
      for (size_t c = 0; c < calls.size(); ++c) {
        o += std::snprintf(line + o, sizeof line - o, " %s %.2f (%.0f%%%s)", names[c].c_str(), best[c],
                           100.0 * bytes / (best[c] * 1e-6) / 1e9 / copy_gbs,
                           c == 0 ? "" : (err[c - 1] < 1e-2 ? " ok" : " BAD"));
      }
      std::printf("%s\n", line);
      for (size_t vi = 0; vi < vs.size(); ++vi) std::printf("   %s rel err %.2e\n", vs[vi]->name.c_str(), err[vi]);
      std::fflush(stdout);
      summary.push_back(line);
    }
    for (auto& s : sets) {
      CK(cudaFree(s.packed));
      CK(cudaFree(s.scales));
      CK(cudaFree(s.x));
      CK(cudaFree(s.out));
      CK(cudaFree(s.out32));
    }
  }
  std::printf("==== summary (us per call, %% of copy %.0f GB/s) ====\n", copy_gbs);
  for (auto& s : summary) std::printf("%s\n", s.c_str());
  return 0;
}
