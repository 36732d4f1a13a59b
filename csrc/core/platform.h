// The only CUDA/HIP/host shim of mxfuse. Everything vendor-specific that kernels touch is named
// here: qualifiers, the error and stream types, 32-lane shuffles and the warp barrier.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>

// MXF_HIP / MXF_CUDA: the vendor runtime is available (its error and stream types). Host-only
// translation units of a GPU build (ops/*.cpp, built with MXF_WITH_GPU) see the runtime too.
#if defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__) || defined(USE_ROCM)
#include <hip/hip_runtime.h>
#define MXF_HIP 1
#elif defined(__CUDACC__) || defined(MXF_WITH_GPU)
#include <cuda_runtime.h>
#define MXF_CUDA 1
#endif

// MXF_GPU: compiled by a GPU compiler (nvcc, hipcc), so device code and intrinsics exist.
#if defined(__CUDACC__) || defined(__HIPCC__)
#define MXF_GPU 1
#define MXF_HD __host__ __device__ __forceinline__
#define MXF_DEV __device__ __forceinline__
#else
#define MXF_HD inline
#endif

// True only while compiling device code; arch fast paths test this plus an arch number.
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define MXF_DEVICE_PASS 1
#endif
#if defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
#define MXF_CUDA_ARCH __CUDA_ARCH__
#else
#define MXF_CUDA_ARCH 0
#endif

namespace mxf {

// Devices the per-device memos below keep answers for (others ask every time).
constexpr int kMemoDevices = 64;

// A lock-free memo of small non-negative ints keyed by (device, key), for host queries whose answer
// depends on a launch argument as well as the device (the occupancy API at a given dynamic shared
// memory size). Each entry packs device, key and value into one atomic word, so a reader never
// sees a torn entry or another key's value; entries sit at a hash of (device, key) and a collision
// only evicts. Devices outside [0, 4096) and keys of 36 bits or more are computed every time.
template <int kEntries>
struct KeyedMemo {
  static_assert(kEntries > 0 && (kEntries & (kEntries - 1)) == 0, "a power of two");
  std::atomic<uint64_t> slot[kEntries] = {};

  // compute() returns the value (0 .. 65535, kept) or a negative error (returned, not kept).
  template <typename F>
  int get(int device, uint64_t key, F&& compute) {
    const bool keyed = device >= 0 && device < 4096 && key < (uint64_t{1} << 36);
    // device + 1 in the top 12 bits, so an empty entry (0) matches no key.
    const uint64_t tag = keyed ? (static_cast<uint64_t>(device + 1) << 52) | (key << 16) : 0;
    const uint64_t h = (key * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(device) * 0xC2B2AE3D27D4EB4Full);
    std::atomic<uint64_t>& e = slot[(h >> 40) & (kEntries - 1)];
    if (keyed) {
      const uint64_t v = e.load(std::memory_order_relaxed);
      if ((v & ~uint64_t{0xFFFF}) == tag) return static_cast<int>(v & 0xFFFF);
    }
    const int v = compute();
    if (keyed && v >= 0 && v <= 0xFFFF) e.store(tag | static_cast<uint64_t>(v), std::memory_order_relaxed);
    return v;
  }
};

#if defined(MXF_HIP)
using error_t = hipError_t;
using stream_t = hipStream_t;
constexpr error_t kSuccess = hipSuccess;
inline error_t last_error() { return hipGetLastError(); }
// The current device, or -1 when it cannot be read (the error is cleared, not left to the runtime).
inline int current_device() {
  int dev = -1;
  if (hipGetDevice(&dev) != hipSuccess) {
    (void)hipGetLastError();
    dev = -1;
  }
  return dev;
}
// Ticks of wall_ticks() per millisecond on the current device (its wall clock rate in kHz), or
// 0 when the runtime cannot tell. Runtimes before ROCm 5.3 have no query: 100 MHz, the rate of
// s_memrealtime on gfx9 (MI100 to MI300).
// Asked once per device (the attention front reads it at every launch).
inline int64_t wall_ticks_per_ms() {
#if HIP_VERSION >= 50300000
  static std::atomic<int> memo[kMemoDevices] = {};
  const int dev = current_device();
  const bool cached = dev >= 0 && dev < kMemoDevices;
  int khz = cached ? memo[dev].load(std::memory_order_relaxed) : 0;
  if (khz <= 0) {
    if (hipDeviceGetAttribute(&khz, hipDeviceAttributeWallClockRate, dev) != hipSuccess) {
      (void)hipGetLastError();
      return 0;
    }
    if (cached && khz > 0) memo[dev].store(khz, std::memory_order_relaxed);
  }
  return khz > 0 ? khz : 0;
#else
  return 100000;
#endif
}
template <typename K>
error_t set_max_dynamic_smem(K kernel, int bytes) {
  return hipFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                             hipFuncAttributeMaxDynamicSharedMemorySize, bytes);
}
#elif defined(MXF_CUDA)
using error_t = cudaError_t;
using stream_t = cudaStream_t;
constexpr error_t kSuccess = cudaSuccess;
inline error_t last_error() { return cudaGetLastError(); }
// The current device, or -1 when it cannot be read (the error is cleared, not left to the runtime).
inline int current_device() {
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    dev = -1;
  }
  return dev;
}
// Ticks of wall_ticks() per millisecond (%globaltimer counts nanoseconds).
inline int64_t wall_ticks_per_ms() { return 1000000; }
// Kernels that take more than 48 KB of dynamic shared memory must say so first.
template <typename K>
error_t set_max_dynamic_smem(K kernel, int bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

// cudaLaunchKernelEx with the sm_90+ attributes the library uses: clusters of `cluster_x` CTAs
// along x (when > 1) and programmatic dependent launch (when `pdl`).
template <typename... Params, typename... Args>
error_t launch_ex(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, stream_t stream,
                  int cluster_x, bool pdl, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n_attr = 0;
  if (cluster_x > 1) {
    attr[n_attr].id = cudaLaunchAttributeClusterDimension;
    attr[n_attr].val.clusterDim.x = static_cast<unsigned>(cluster_x);
    attr[n_attr].val.clusterDim.y = 1;
    attr[n_attr].val.clusterDim.z = 1;
    ++n_attr;
  }
  if (pdl) {
    attr[n_attr].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n_attr].val.programmaticStreamSerializationAllowed = 1;
    ++n_attr;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n_attr;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// A per-device memo for host queries that would cost time on every eager launch (the occupancy
// API, function attributes): memo[device][slot] keeps compute()'s value once it is positive.
// Devices past kMemoDevices, or a current device that cannot be read, ask every time.
template <int kSlots, typename F>
int per_device_memo(std::atomic<int> (&memo)[kMemoDevices][kSlots], int slot, F&& compute) {
  const int dev = current_device();
  const bool cached = dev >= 0 && dev < kMemoDevices;
  int v = cached ? memo[dev][slot].load(std::memory_order_relaxed) : 0;
  if (v <= 0) {
    v = compute();
    if (cached && v > 0) memo[dev][slot].store(v, std::memory_order_relaxed);
  }
  return v;
}

// KeyedMemo for the current device.
template <int kEntries, typename F>
int device_keyed_memo(KeyedMemo<kEntries>& memo, uint64_t key, F&& compute) {
  return memo.get(current_device(), key, std::forward<F>(compute));
}
#endif

#if defined(MXF_GPU)
// Reductions use groups of 32 lanes: a 64-wide wavefront runs them as two independent halves,
// so results never depend on the hardware warp size.
constexpr int kLaneGroup = 32;

template <typename T>
MXF_DEV T shfl_down32(T v, int delta) {
#if defined(MXF_HIP)
  return __shfl_down(v, delta, kLaneGroup);
#else
  return __shfl_down_sync(0xffffffffu, v, delta, kLaneGroup);
#endif
}

template <typename T>
MXF_DEV T shfl_xor32(T v, int mask) {
#if defined(MXF_HIP)
  return __shfl_xor(v, mask, kLaneGroup);
#else
  return __shfl_xor_sync(0xffffffffu, v, mask, kLaneGroup);
#endif
}

template <typename T>
MXF_DEV T shfl32(T v, int src_lane) {
#if defined(MXF_HIP)
  return __shfl(v, src_lane, kLaneGroup);
#else
  return __shfl_sync(0xffffffffu, v, src_lane, kLaneGroup);
#endif
}

MXF_DEV void sync_lanes() {
#if defined(MXF_HIP)
  __builtin_amdgcn_wave_barrier();
#else
  __syncwarp();
#endif
}

// A wall clock for time limits on polling loops: nanoseconds (%globaltimer) on NVIDIA, the
// constant-rate counter of wall_clock64() on AMD (wall_ticks_per_ms() gives either rate on the
// host).
MXF_DEV uint64_t wall_ticks() {
#if defined(MXF_HIP) && defined(__HIP_DEVICE_COMPILE__)
  return static_cast<uint64_t>(wall_clock64());  // -1 where the arch has no such counter: no limit
#elif defined(MXF_HIP)
  return 0;  // the host pass only parses this
#else
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#endif
}

// Ends the kernel with an error the host sees at its next synchronization (the context is lost).
[[noreturn]] MXF_DEV void trap_kernel() {
#if defined(MXF_HIP)
  __builtin_trap();
#else
  __trap();
#endif
  __builtin_unreachable();
}

// A short pause in a polling loop (a thread waiting for a flag another CTA sets), so that the poll
// takes less issue and memory bandwidth from the warps that do work.
MXF_DEV void sleep_briefly() {
#if defined(MXF_HIP)
  __builtin_amdgcn_s_sleep(2);
#elif MXF_CUDA_ARCH >= 700
  __nanosleep(100);
#endif
}
#endif  // MXF_GPU

}  // namespace mxf
