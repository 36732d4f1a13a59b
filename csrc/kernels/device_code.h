// Which device code the library runs on the current device. Torch-free.
#pragma once

namespace mxf::kernels {

// The virtual architecture (major * 10 + minor) that the library's kernels were compiled for, as
// the runtime loads them on the current device: 90 for an sm_90a build on an H200, but 80 for an
// "8.0+PTX" build JIT-compiled there, whose kernels hold no cluster, programmatic-launch or FP8
// mma code (their guarded bodies trap). The launch paths that need that code (clusters and
// programmatic dependent launch: sm_90; the tensor-core MXFP8 kernel: sm_89) ask for it by this,
// not by the device's compute capability. 0 where unknown (no kernel image for the device, HIP).
// Asked once per device.
int device_code_arch();

// Thread-block clusters (and programmatic dependent launch) on the current device, whose compute
// capability major is `device_major`: an sm_90+ device running sm_90+ kernels.
inline bool cluster_code_available(int device_major) { return device_major >= 9 && device_code_arch() >= 90; }

}  // namespace mxf::kernels
