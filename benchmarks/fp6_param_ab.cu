// A/B of launch settings of the MXFP6 linear (fields of Fp6LinearParams that tests and benchmarks
// override) on one GPU, in one process, without torch or a library build: the kernels come from
// csrc/kernels/mxfp6_linear.cuh itself. Every value is first checked to give the bits of the first
// value without programmatic launch (outputs poisoned before each launch, every output written),
// in every launch mode, on scales that fold and on scales that do not; then each is timed as
// benchmarks/harness.py times (one CUDA graph of 128 calls cycling 16 weight and x sets, best of 5
// replays), in rounds alternating between the values. A measurement tool, not part of the library.
//
// Build (sm_90a, here or on the GPU machine):
//   nvcc -O3 --fmad=false -std=c++17 -gencode=arch=compute_90a,code=sm_90a \
//     benchmarks/fp6_param_ab.cu -o fp6_param_ab
// Run: ./fp6_param_ab --var wide_override --values 1,2 [--shapes 2560x6144,12288x6144]
//   [--ms 1,8,16] [--pdl 1,2] [--rounds 2]
// --pdl 3 times the mode a captured linear gets when no kernel still running writes its x or
// weights; the chain this tool captures (16 independent sets) meets that condition.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../csrc/kernels/mxfp6_linear.cuh"

// The library notes its linear kernels for launch_mxfp6_linear's capture check (csrc/kernels/
// mxfp6.cu); this tool launches them directly and never captures.
void mxf::kernels::note_fp6_linear_kernel(const void*) {}

#include "cuda_check.h"

namespace {

__device__ uint32_t hash32(uint64_t i, uint32_t seed) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull;
  z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<uint32_t>(z >> 32);
}
// kind 0: random bytes; 1: bytes in [lo, lo + span); 2: bf16 in (-1, 1)
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

// The comma-separated items of s.
std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  for (size_t b = 0; b <= s.size();) {
    const size_t e = std::min(s.find(',', b), s.size());
    if (e > b) v.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return v;
}
std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  for (const std::string& t : split(s)) v.push_back(std::atoi(t.c_str()));
  return v;
}

struct Set {
  uint8_t *packed, *scales, *scales_mixed, *x, *out;
};

// The overridable fields, by name.
int* field(mxf::Fp6LinearParams& p, const std::string& name) {
  if (name == "wide_override") return &p.wide_override;
  if (name == "item_rt") return &p.item_rt;
  if (name == "warps_override") return &p.warps_override;
  if (name == "rt_override") return &p.rt_override;
  if (name == "split_override") return &p.split_override;
  std::fprintf(stderr, "unknown --var %s\n", name.c_str());
  std::exit(2);
}

cudaError_t launch(const mxf::Fp6LinearParams& p, cudaStream_t s) {
  return p.m <= 8 ? mxf::kernels::launch_linear_typed<mxf::Dtype::kBF16, 1>(p, s)
                  : mxf::kernels::launch_linear_typed<mxf::Dtype::kBF16, 2>(p, s);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> ns{2560, 12288}, ks{6144, 6144}, ms{1, 8, 16}, pdls{1, 2}, values;
  std::string var = "wide_override";
  int rounds = 2;
  for (int a = 1; a + 1 < argc; a += 2) {
    const std::string k = argv[a];
    if (k == "--shapes") {
      ns.clear();
      ks.clear();
      for (const std::string& t : split(argv[a + 1])) {
        int n = 0, k = 0;
        if (std::sscanf(t.c_str(), "%dx%d", &n, &k) != 2) {
          std::fprintf(stderr, "--shapes: NxK items, got %s\n", t.c_str());
          return 2;
        }
        ns.push_back(n);
        ks.push_back(k);
      }
    } else if (k == "--ms") {
      ms = parse_list(argv[a + 1]);
    } else if (k == "--pdl") {
      pdls = parse_list(argv[a + 1]);
    } else if (k == "--var") {
      var = argv[a + 1];
    } else if (k == "--values") {
      values = parse_list(argv[a + 1]);
    } else if (k == "--rounds") {
      rounds = std::atoi(argv[a + 1]);
    }
  }
  if (values.empty()) {
    std::fprintf(stderr, "--values: at least one\n");
    return 2;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));

  // Copy bandwidth, bytes read + written.
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
      float ms_;
      CK(cudaEventElapsedTime(&ms_, e0, e1));
      if (r > 0) best = std::min(best, ms_);
    }
    copy_gbs = 2.0 * bytes / (best * 1e-3) / 1e9;
    CK(cudaFree(a));
    CK(cudaFree(b));
  }
  std::printf("device %s, %d SMs, copy %.0f GB/s\n", prop.name, prop.multiProcessorCount, copy_gbs);

  std::vector<std::string> names;
  for (int v : values) names.push_back(var + "=" + std::to_string(v));
  std::vector<std::string> summary;

  for (size_t si = 0; si < ns.size(); ++si) {
    const int64_t n = ns[si], k = ks[si];
    const int64_t packed_bytes = n / 16 * (k / 128) * 1536, scale_bytes = n * (k / 32);
    const int64_t max_m = *std::max_element(ms.begin(), ms.end());
    std::vector<Set> sets(16);
    for (int i = 0; i < 16; ++i) {
      CK(cudaMalloc(&sets[i].packed, packed_bytes));
      CK(cudaMalloc(&sets[i].scales, scale_bytes));
      CK(cudaMalloc(&sets[i].scales_mixed, scale_bytes));
      CK(cudaMalloc(&sets[i].x, max_m * k * 2));
      CK(cudaMalloc(&sets[i].out, max_m * n * 2));
      fill_host(sets[i].packed, packed_bytes, 100 + i, 0);
      fill_host(sets[i].scales, scale_bytes, 200 + i, 1, 118, 8);   // weight-like: 2^-9 .. 2^-2
      fill_host(sets[i].scales_mixed, scale_bytes, 300 + i, 1, 110, 30);  // some > 128: unfolded tiles
      fill_host(sets[i].x, max_m * k * 2, 400 + i, 2);
    }
    CK(cudaDeviceSynchronize());
    const auto params = [&](int i, int64_t m, int pdl, int value, bool mixed) {
      mxf::Fp6LinearParams p;
      p.x = sets[i].x;
      p.packed = sets[i].packed;
      p.scales = mixed ? sets[i].scales_mixed : sets[i].scales;
      p.out = sets[i].out;
      p.m = m;
      p.n = n;
      p.k = k;
      p.x_stride = k;
      p.act = mxf::Dtype::kBF16;
      p.num_sms = prop.multiProcessorCount;
      p.clusters = true;
      p.pdl = pdl;
      p.smem_per_sm = static_cast<int>(prop.sharedMemPerMultiprocessor);
      p.smem_reserved = static_cast<int>(prop.reservedSharedMemPerBlock);
      p.smem_optin = static_cast<int>(prop.sharedMemPerBlockOptin);
      *field(p, var) = value;
      return p;
    };
    for (int64_t m : ms) {
      // Bits: every value and launch mode against the first value without PDL, both scale sets.
      int bad = 0;
      std::vector<uint16_t> ref(m * n), got(m * n);
      for (int mixed = 0; mixed < 2; ++mixed) {
        for (size_t vi = 0; vi < values.size(); ++vi) {
          for (int pdl : {0, 1, 2, 3}) {
            CK(cudaMemsetAsync(sets[0].out, 0xFF, m * n * 2, stream));
            CK(launch(params(0, m, pdl, values[vi], mixed), stream));
            CK(cudaStreamSynchronize(stream));
            CK(cudaMemcpy(got.data(), sets[0].out, m * n * 2, cudaMemcpyDeviceToHost));
            if (vi == 0 && pdl == 0) {
              ref = got;
              int unwritten = 0;
              for (uint16_t u : ref) unwritten += u == 0xFFFF;
              if (unwritten) std::printf("  %s left %d outputs unwritten\n", names[0].c_str(), unwritten), ++bad;
            } else if (std::memcmp(ref.data(), got.data(), m * n * 2) != 0) {
              ++bad;
              std::printf("  MISMATCH %s pdl %d mixed %d (%lldx%lld M=%lld)\n", names[vi].c_str(), pdl,
                          mixed, (long long)n, (long long)k, (long long)m);
            }
          }
        }
      }
      for (int pdl : pdls) {
        std::vector<float> best(values.size(), 1e30f);
        std::vector<cudaGraphExec_t> execs(values.size());
        for (size_t vi = 0; vi < values.size(); ++vi) {
          cudaGraph_t g;
          CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
          for (int c = 0; c < 128; ++c) CK(launch(params(c % 16, m, pdl, values[vi], false), stream));
          CK(cudaStreamEndCapture(stream, &g));
          CK(cudaGraphInstantiate(&execs[vi], g, 0));
          CK(cudaGraphDestroy(g));
          CK(cudaGraphLaunch(execs[vi], stream));
        }
        CK(cudaStreamSynchronize(stream));
        for (int r = 0; r < rounds; ++r) {
          for (size_t vi = 0; vi < values.size(); ++vi) {
            for (int rep = 0; rep < 5; ++rep) {
              CK(cudaEventRecord(e0, stream));
              CK(cudaGraphLaunch(execs[vi], stream));
              CK(cudaEventRecord(e1, stream));
              CK(cudaEventSynchronize(e1));
              float t;
              CK(cudaEventElapsedTime(&t, e0, e1));
              best[vi] = std::min(best[vi], t * 1000.0f / 128.0f);
            }
          }
        }
        for (auto& ex : execs) CK(cudaGraphExecDestroy(ex));
        const double bytes = packed_bytes + scale_bytes + 2.0 * m * (k + n);
        char line[512];
        int o = std::snprintf(line, sizeof line, "%5lldx%-5lld M=%-2lld pdl=%d bits:%s |", (long long)n, (long long)k,
                              (long long)m, pdl, bad ? "BAD" : "ok");
        for (size_t vi = 0; vi < values.size(); ++vi) {
          o += std::snprintf(line + o, sizeof line - o, " %s %.2f (%.1f%%)", names[vi].c_str(), best[vi],
                             100.0 * bytes / (best[vi] * 1e-6) / 1e9 / copy_gbs);
        }
        std::printf("%s\n", line);
        std::fflush(stdout);
        summary.push_back(line);
      }
    }
    for (auto& s : sets) {
      CK(cudaFree(s.packed));
      CK(cudaFree(s.scales));
      CK(cudaFree(s.scales_mixed));
      CK(cudaFree(s.x));
      CK(cudaFree(s.out));
    }
  }
  std::printf("==== summary (us per call, %% of copy %.0f GB/s) ====\n", copy_gbs);
  for (auto& s : summary) std::printf("%s\n", s.c_str());
  return 0;
}
