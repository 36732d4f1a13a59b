#include "device_code.h"

#include <atomic>

#include "../core/platform.h"

namespace mxf::kernels {

#if defined(MXF_CUDA)
namespace {
__global__ void device_code_probe() {}
}  // namespace

int device_code_arch() {
  static std::atomic<int> memo[kMemoDevices][1] = {};
  return per_device_memo(memo, 0, [] {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, device_code_probe) != cudaSuccess) {
      (void)cudaGetLastError();
      // No image for this device (or no device): every launch fails with the runtime's error.
      return 0;
    }
    return attr.ptxVersion;
  });
}
#else
int device_code_arch() { return 0; }
#endif

}  // namespace mxf::kernels
