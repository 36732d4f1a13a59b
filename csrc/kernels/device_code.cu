#include "device_code.h"

#include <atomic>

#include "../core/platform.h"

namespace mxf::kernels {

#if defined(MXF_CUDA)
namespace {
__global__ void device_code_probe() {}
}  // namespace

int device_code_arch() {
  constexpr int kCachedDevices = 64;
  static std::atomic<int> cache[kCachedDevices] = {};
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  const bool cached = dev >= 0 && dev < kCachedDevices;
  int v = cached ? cache[dev].load(std::memory_order_relaxed) : 0;
  if (v == 0) {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, device_code_probe) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;  // no image for this device: every launch will fail with the runtime's error
    }
    v = attr.ptxVersion;
    if (cached && v > 0) cache[dev].store(v, std::memory_order_relaxed);
  }
  return v;
}
#else
int device_code_arch() { return 0; }
#endif

}  // namespace mxf::kernels
