// Read-only streaming kernels for benchmarks/floor/stream_floor.py: how fast can any kernel read a
// linear's weight bytes in the benchmark's setting (a graph of back-to-back calls cycling 16 weight
// sets, programmatic dependent launch, nothing read before the dependency wait)? A measurement
// tool, not part of the library: sm_90 only, built on the GPU machine by the script.
//
// read_stream: G CTAs of 256 threads; CTA b reads a contiguous 1/G of the buffer with 16-byte
//           loads, kUnroll of them in flight per thread, and XORs them into one word; or the same
//           through shared memory with cp.async.cg (as the shipped kernel loads its codes).
// read_tma: one CTA per SM; one producer thread streams the CTA's contiguous share through a ring
//           of shared-memory stages with bulk copies (cp.async.bulk + mbarrier); 8 consumer warps
//           read every stage and free it.
// proto:    an MXFP6 linear prototype that decodes tiles in the order they land (below).
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace {

__device__ __forceinline__ void dep_launch() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
__device__ __forceinline__ void dep_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// This CTA's contiguous share [b0, b1) of n elements, in steps of `align`.
__device__ __forceinline__ void cta_share(int64_t n, int64_t align, int64_t& b0, int64_t& b1) {
  const int64_t per = (n / align + gridDim.x - 1) / gridDim.x * align;
  b0 = blockIdx.x * per;
  b1 = b0 + per < n ? b0 + per : n;
}

// read_ld (kViaSmem false): kUnroll 16-byte loads in flight per thread, XORed into one word.
// read_cp (kViaSmem true): the same pieces copied into shared memory with cp.async.cg (as the
// shipped kernel loads its codes), waited for, and read back.
template <int kUnroll, bool kViaSmem>
__global__ void __launch_bounds__(256) read_stream(const uint4* __restrict__ src, int64_t n16, uint32_t* out, int pdl) {
  __shared__ uint4 buf[kViaSmem ? kUnroll * 256 : 1];
  dep_launch();
  if (pdl) dep_wait();
  int64_t b0, b1;
  cta_share(n16, 1, b0, b1);
  uint32_t acc = 0;
  for (int64_t i = b0 + threadIdx.x; i < b1; i += 256 * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = i + u * 256;
      if constexpr (kViaSmem) {
        if (j < b1) {
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(&buf[u * 256 + threadIdx.x])),
                       "l"(src + j));
        }
      } else {
        v[u] = j < b1 ? src[j] : make_uint4(0, 0, 0, 0);
      }
    }
    if constexpr (kViaSmem) {
      asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = i + u * 256 < b1 ? buf[u * 256 + threadIdx.x] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x12345678u) out[blockIdx.x * 256 + threadIdx.x] = acc;  // keeps the loads alive
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\nLAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra LAB_WAIT;\n}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}
// Suspends (does not spin) until the phase completes, re-checking after at most hint_ns.
__device__ __forceinline__ void mbar_sleep_wait(uint64_t* bar, uint32_t parity, uint32_t hint_ns) {
  asm volatile(
      "{\n.reg .pred p;\nLAB_SLEEP:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1, %2;\n"
      "@!p bra LAB_SLEEP;\n}\n" ::"r"(smem_u32(bar)),
      "r"(parity), "r"(hint_ns)
      : "memory");
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t s) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(s));
  return d;
}

constexpr int kConsumerWarps = 8;
constexpr int kTmaThreads = 32 * (kConsumerWarps + 1);

__global__ void __launch_bounds__(kTmaThreads, 1)
    read_tma(const uint8_t* __restrict__ src, int64_t nbytes, uint32_t* out, int stage_bytes, int stages,
             int pdl, int pre) {
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);
  uint64_t* empty = full + stages;
  uint8_t* ring = smem + 128 * ((2 * stages * 8 + 127) / 128);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(full + s, 1);
      mbar_init(empty + s, kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  dep_launch();
  int64_t b0, b1;
  cta_share(nbytes, 16, b0, b1);
  const int chunks = b1 > b0 ? static_cast<int>((b1 - b0 + stage_bytes - 1) / stage_bytes) : 0;
  if (warp == kConsumerWarps) {  // producer
    if (lane == 0) {
      const auto issue = [&](int c) {
        const int s = c % stages;
        const int64_t off = b0 + static_cast<int64_t>(c) * stage_bytes;
        const uint32_t len = static_cast<uint32_t>(b1 - off < stage_bytes ? b1 - off : stage_bytes);
        mbar_expect_tx(full + s, len);
        bulk_copy(ring + static_cast<int64_t>(s) * stage_bytes, src + off, len, full + s);
      };
      int c = 0;
      if (pre) {
        for (; c < stages && c < chunks; ++c) issue(c);
      }
      if (pdl) dep_wait();
      for (; c < chunks; ++c) {
        if (c >= stages) mbar_wait(empty + c % stages, ((c / stages) - 1) & 1);
        issue(c);
      }
    }
    return;
  }
  if (pdl) dep_wait();
  uint32_t acc = 0;
  for (int c = 0; c < chunks; ++c) {
    const int s = c % stages;
    mbar_wait(full + s, (c / stages) & 1);
    const int64_t off = b0 + static_cast<int64_t>(c) * stage_bytes;
    const int len = static_cast<int>(b1 - off < stage_bytes ? b1 - off : stage_bytes);
    const uint4* st = reinterpret_cast<const uint4*>(ring + static_cast<int64_t>(s) * stage_bytes);
    for (int i = threadIdx.x; i < len / 16; i += 32 * kConsumerWarps) {
      const uint4 v = st[i];
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + s);
  }
  if (acc == 0x12345678u) out[blockIdx.x * kTmaThreads + threadIdx.x] = acc;
}

void launch(const void* fn, dim3 grid, dim3 block, size_t smem, bool pdl, void** args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = c10::cuda::getCurrentCUDAStream();
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  C10_CUDA_CHECK(cudaLaunchKernelExC(&cfg, fn, args));
}

// read_stream: plain loads (via_smem false) or cp.async through shared memory (true).
void ld(torch::Tensor src, torch::Tensor out, int64_t grid, int64_t unroll, bool pdl, bool via_smem) {
  TORCH_CHECK(src.is_cuda() && src.is_contiguous() && src.numel() % 16 == 0, "src: contiguous CUDA, 16-byte multiple");
  TORCH_CHECK(out.numel() >= grid * 256, "out too small");
  TORCH_CHECK(unroll == 1 || unroll == 2 || unroll == 4 || unroll == 8, "unroll: 1, 2, 4 or 8");
  const uint4* p = reinterpret_cast<const uint4*>(src.data_ptr());
  int64_t n16 = src.numel() / 16;
  uint32_t* o = reinterpret_cast<uint32_t*>(out.data_ptr());
  int ipdl = pdl ? 1 : 0;
  void* args[] = {&p, &n16, &o, &ipdl};
  const auto pick = [&](auto via) -> const void* {
    constexpr bool kVia = decltype(via)::value;
    switch (unroll) {
      case 1: return reinterpret_cast<const void*>(read_stream<1, kVia>);
      case 2: return reinterpret_cast<const void*>(read_stream<2, kVia>);
      case 4: return reinterpret_cast<const void*>(read_stream<4, kVia>);
      default: return reinterpret_cast<const void*>(read_stream<8, kVia>);
    }
  };
  const void* fn = via_smem ? pick(std::true_type()) : pick(std::false_type());
  launch(fn, dim3(grid), dim3(256), 0, pdl, args);
}

void tma(torch::Tensor src, torch::Tensor out, int64_t stage_bytes, int64_t stages, bool pdl, bool pre) {
  TORCH_CHECK(src.is_cuda() && src.is_contiguous() && src.numel() % 16 == 0, "src: contiguous CUDA, 16-byte multiple");
  TORCH_CHECK(stage_bytes % 16 == 0, "stage_bytes % 16");
  int sms = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, src.get_device()));
  TORCH_CHECK(out.numel() >= int64_t{sms} * kTmaThreads, "out too small");
  const size_t smem = 128 * ((2 * stages * 8 + 127) / 128) + stage_bytes * stages;
  C10_CUDA_CHECK(cudaFuncSetAttribute(read_tma, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const uint8_t* p = src.data_ptr<uint8_t>();
  int64_t nb = src.numel();
  uint32_t* o = reinterpret_cast<uint32_t*>(out.data_ptr());
  int sb = static_cast<int>(stage_bytes), st = static_cast<int>(stages);
  int ipdl = pdl ? 1 : 0, ipre = pre ? 1 : 0;
  void* args[] = {&p, &nb, &o, &sb, &st, &ipdl, &ipre};
  launch(reinterpret_cast<const void*>(read_tma), dim3(sms), dim3(kTmaThreads), smem, pdl, args);
}


// ---------------------------------------------------------------------------------------------
// proto: an MXFP6 linear (M = 1, bf16, scales foldable) that decodes tiles in the order they land.
// One CTA per SM owns a contiguous range of (row tile, k-tile) items (the packed layout's order),
// which must fit in shared memory (2560 x 6144: at most 59 items). kL loader warps stream the
// items with plain 16-byte loads, kD items in flight per warp (in batches of kD, or with kRolling a
// ring: an item's registers are reloaded as soon as they are stored), store each to its slot and
// arrive on its mbarrier. kC consumer warps own items i = c, c + kC, ... and, with `ooo`, take
// whichever of theirs has landed (mbarrier.test_wait), else strictly in order. Each item's mma
// chain starts from zero; at the end each row tile segment adds its items in k order and writes
// its 16 sums to ws[cta][segment] (the cross-CTA add is left to the caller: a measurement tool).
// The decode is the shipped kernel's (csrc/kernels/mxfp6.cu, decode8 without spread, one n8 block).
__device__ __forceinline__ uint32_t lop3_and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
template <int kS>
__device__ __forceinline__ uint32_t shift_by(uint32_t v) {
  if constexpr (kS >= 0) {
    return v << kS;
  } else {
    return __umulhi(v, 1u << (32 + kS));
  }
}
__device__ __forceinline__ uint32_t mul2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
  return d;
}
__device__ __forceinline__ void decode8(uint32_t w0, uint32_t w1, uint32_t par, uint32_t pow, uint32_t (&out)[4]) {
  constexpr uint32_t kMag = 0x01f001f0u;
  const uint32_t v0 = prmt(w0, w1, 0x3300u + par), v1 = prmt(w0, w1, 0x4310u + par);
  const uint32_t v2 = prmt(w0, w1, 0x5421u + par);
  const uint32_t v3 = prmt(w0, w1, 0xd5a2u + par);
  out[0] = mul2(shift_by<4>(v0) & kMag, lop3_and_or(v0 << 10, 0x80008000u, pow));
  out[1] = mul2(shift_by<-2>(v1) & kMag, lop3_and_or(v1 << 4, 0x80008000u, pow));
  out[2] = mul2(shift_by<0>(v2) & kMag, lop3_and_or(v2 << 6, 0x80008000u, pow));
  out[3] = mul2(shift_by<2>(v3) & (kMag | 0x80008000u), pow);
}
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ bool mbar_test(uint64_t* bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(ok)
      : "r"(smem_u32(bar)), "r"(parity)
      : "memory");
  return ok != 0;
}

constexpr int kSlotBytes = 1600;  // 1536 code bytes, then 16 rows x 4 scale bytes
constexpr int kMaxItems = 64;

template <int kL, int kD, int kC, bool kRolling>
__global__ void __launch_bounds__(32 * (kL + kC), 1)
    proto_kernel(const uint8_t* __restrict__ packed, const uint8_t* __restrict__ scales,
                 const uint16_t* __restrict__ x, float* ws, int64_t n, int64_t k, int ooo) {
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem);                       // kMaxItems
  float* part = reinterpret_cast<float*>(smem + 8 * kMaxItems);             // kMaxItems x 16
  uint8_t* xs = smem + 8 * kMaxItems + 4 * 16 * kMaxItems;                  // k bf16
  uint8_t* slots = xs + 2 * k;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t kt = k / 128, items = n / 16 * kt, sgroups = k / 32;
  const int64_t i0 = items * blockIdx.x / gridDim.x, i1 = items * (blockIdx.x + 1) / gridDim.x;
  const int cnt = static_cast<int>(i1 - i0);
  if (threadIdx.x < kMaxItems) mbar_init(bars + threadIdx.x, 32);
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  __syncthreads();
  dep_launch();
  dep_wait();
  if (warp < kL) {  // loaders (items warp, warp + kL, ...)
    const int mine = cnt > warp ? (cnt - warp + kL - 1) / kL : 0;
    uint4 c[kD][3];
    uint32_t sc[kD];
    const auto load = [&](int q, uint4 (&cv)[3], uint32_t& sv) {
      const int64_t it = i0 + warp + q * kL;
      const uint4* src = reinterpret_cast<const uint4*>(packed + it * 1536) + lane;
#pragma unroll
      for (int u = 0; u < 3; ++u) cv[u] = src[u * 32];
      if (lane < 16) {
        const int64_t row = (it / kt) * 16 + lane;
        sv = *reinterpret_cast<const uint32_t*>(scales + row * sgroups + (it % kt) * 4);
      }
    };
#pragma unroll
    for (int d = 0; d < kD; ++d)
      if (d < mine) load(d, c[d], sc[d]);
    for (int base = 0; base < mine; base += kD) {
      if (!kRolling && base > 0) {
#pragma unroll
        for (int d = 0; d < kD; ++d)
          if (base + d < mine) load(base + d, c[d], sc[d]);
      }
#pragma unroll
      for (int d = 0; d < kD; ++d) {
        const int q = base + d;
        if (q < mine) {
          const int li = warp + q * kL;
          uint8_t* slot = slots + li * kSlotBytes;
#pragma unroll
          for (int u = 0; u < 3; ++u) reinterpret_cast<uint4*>(slot)[u * 32 + lane] = c[d][u];
          if (lane < 16) reinterpret_cast<uint32_t*>(slot + 1536)[lane] = sc[d];
          mbar_arrive(bars + li);
          if (kRolling && q + kD < mine) load(q + kD, c[d], sc[d]);
        }
      }
    }
  } else {  // consumers
    const int c = warp - kL;
    for (int e = threadIdx.x - 32 * kL; e < k / 8; e += 32 * kC)
      reinterpret_cast<uint4*>(xs)[e] = reinterpret_cast<const uint4*>(x)[e];
    asm volatile("bar.sync 1, %0;\n" ::"n"(32 * kC) : "memory");
    const int g = lane >> 2, t = lane & 3;
    const uint32_t par = (t & 1) ? 0x2222u : 0u;
    const int lane_codes = 96 * g + ((6 * t) & ~3);
    const int mine = cnt > c ? (cnt - c + kC - 1) / kC : 0;  // <= 32
    uint32_t left = mine >= 32 ? 0xffffffffu : (1u << mine) - 1u;
    int next = 0;
    while (left) {
      int q;
      if (ooo) {
        q = -1;
        for (uint32_t m = left; m; m &= m - 1) {
          const int cand = __ffs(m) - 1;
          if (mbar_test(bars + c + cand * kC, 0)) { q = cand; break; }
        }
        if (q < 0) {  // none of this warp's items has landed: sleep on the first one (or 500 ns)
          uint32_t ok;
          asm volatile(
              "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0, 500;\nselp.u32 %0, 1, 0, p;\n}\n"
              : "=r"(ok)
              : "r"(smem_u32(bars + c + (__ffs(left) - 1) * kC))
              : "memory");
          continue;
        }
      } else {
        q = next++;
        mbar_sleep_wait(bars + c + q * kC, 0, 100000);
      }
      left &= ~(1u << q);
      const int li = c + q * kC;
      const int64_t it = i0 + li;
      const uint8_t* st = slots + li * kSlotBytes;
      uint32_t s_lo = *reinterpret_cast<const uint32_t*>(st + 1536 + g * 4) + 0x7e7e7e7eu;
      uint32_t s_hi = *reinterpret_cast<const uint32_t*>(st + 1536 + (g + 8) * 4) + 0x7e7e7e7eu;
      const uint4* xq = reinterpret_cast<const uint4*>(xs) + (it % kt) * 16 + t;
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint4 xc = xq[j * 4];
        const uint32_t b0 = prmt(xc.x, xc.z, 0x5410u), b1 = prmt(xc.x, xc.z, 0x7632u);
        const uint32_t b2 = prmt(xc.y, xc.w, 0x5410u), b3 = prmt(xc.y, xc.w, 0x7632u);
        const uint8_t* lo = st + lane_codes + 24 * j;
        const uint8_t* hi = lo + 768;
        const uint32_t sel = 0x4040u + 0x0101u * j;
        const uint32_t pow_lo = prmt(s_lo, 0u, sel) << 7, pow_hi = prmt(s_hi, 0u, sel) << 7;
        uint32_t a_lo[4], a_hi[4];
        decode8(*reinterpret_cast<const uint32_t*>(lo), *reinterpret_cast<const uint32_t*>(lo + 4), par, pow_lo, a_lo);
        decode8(*reinterpret_cast<const uint32_t*>(hi), *reinterpret_cast<const uint32_t*>(hi + 4), par, pow_hi, a_hi);
        const uint32_t a0[4] = {a_lo[0], a_hi[0], a_lo[1], a_hi[1]};
        const uint32_t a1[4] = {a_lo[2], a_hi[2], a_lo[3], a_hi[3]};
        mma_bf16(acc, a0, b0, b1);
        mma_bf16(acc, a1, b2, b3);
      }
      if (t == 0) {  // column 0 (the one row of x): rows g and g + 8
        part[li * 16 + g] = acc[0];
        part[li * 16 + g + 8] = acc[2];
      }
    }
  }
  __syncthreads();
  // Segments: runs of items with the same row tile. Each adds its items in a fixed order: 8 runs
  // of consecutive items in k order, then the 8 run sums in order (kept short: a serial add over
  // 48 items took about as long as a tile's decode).
  const int64_t r0 = i0 / kt;
  const int segs = cnt > 0 ? static_cast<int>((i1 - 1) / kt - r0 + 1) : 0;
  float* runs = reinterpret_cast<float*>(slots);  // the slots are free now
  constexpr int kRuns = 8;
  if (threadIdx.x < 16 * segs * kRuns) {
    const int sgi = threadIdx.x / (16 * kRuns), row = (threadIdx.x / kRuns) % 16, run = threadIdx.x % kRuns;
    const int64_t a = (r0 + sgi) * kt > i0 ? (r0 + sgi) * kt : i0;
    const int64_t z = (r0 + sgi + 1) * kt < i1 ? (r0 + sgi + 1) * kt : i1;
    float v = 0.f;
    for (int64_t it = a + (z - a) * run / kRuns; it < a + (z - a) * (run + 1) / kRuns; ++it) v += part[(it - i0) * 16 + row];
    runs[threadIdx.x] = v;
  }
  __syncthreads();
  if (threadIdx.x < 16 * segs) {
    float v = 0.f;
#pragma unroll
    for (int run = 0; run < kRuns; ++run) v += runs[threadIdx.x * kRuns + run];
    ws[(blockIdx.x * 4 + threadIdx.x / 16) * 16 + threadIdx.x % 16] = v;
  }
}

void proto(torch::Tensor packed, torch::Tensor scales, torch::Tensor x, torch::Tensor ws, int64_t n, int64_t k,
           bool ooo, int64_t variant) {
  int sms = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, packed.get_device()));
  const int64_t items = n / 16 * (k / 128);
  TORCH_CHECK((items + sms - 1) / sms <= kMaxItems, "proto: too many items per SM");
  TORCH_CHECK(ws.numel() >= int64_t{sms} * 4 * 16, "ws too small");
  const size_t smem = 8 * kMaxItems + 4 * 16 * kMaxItems + 2 * k + kSlotBytes * ((items + sms - 1) / sms);
  const uint8_t* pp = packed.data_ptr<uint8_t>();
  const uint8_t* sp = scales.data_ptr<uint8_t>();
  const uint16_t* xp = reinterpret_cast<const uint16_t*>(x.data_ptr());
  float* wp = ws.data_ptr<float>();
  int iooo = ooo ? 1 : 0;
  void* args[] = {&pp, &sp, &xp, &wp, &n, &k, &iooo};
  const void* fn;
  int threads;
  switch (variant) {
#define MXF_PROTO(id, l, d, c, roll)                                            \
  case id:                                                                    \
    fn = reinterpret_cast<const void*>(proto_kernel<l, d, c, roll>);          \
    threads = 32 * (l + c);                                                   \
    break;
    MXF_PROTO(0, 8, 4, 8, false)
    MXF_PROTO(1, 8, 4, 12, false)
    MXF_PROTO(2, 8, 2, 16, false)
    MXF_PROTO(3, 8, 2, 24, false)
    MXF_PROTO(4, 8, 4, 16, true)
    MXF_PROTO(5, 16, 3, 16, true)
#undef MXF_PROTO
    default: TORCH_CHECK(false, "proto: variant ", variant, " is not one of 0..5");
  }
  C10_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  launch(fn, dim3(sms), dim3(threads), smem, true, args);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("ld", &ld);
  m.def("tma", &tma);
  m.def("proto", &proto);
}
