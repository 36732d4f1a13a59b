// The one place an op picks its backend: the GPU kernel under a device guard on the current
// stream when the tensor is on the GPU, else the CPU reference. Every op runs its checks first.
#pragma once

#ifdef MXF_WITH_GPU
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

// MXF_DISPATCH(t, launch, cpu_call): when `t` is a GPU tensor, `launch` runs under a guard for t's
// device and its status is checked; `launch` is an expression that returns the backend's error code
// and may use `stream`, the device's current stream. Otherwise `cpu_call` runs. A build without GPU
// kernels drops `launch` unparsed, so it may name kernels that only such a build declares.
#define MXF_DISPATCH(t, launch, cpu_call)                              \
  do {                                                                 \
    if ((t).is_cuda()) {                                               \
      const c10::cuda::OptionalCUDAGuard mxf_guard_((t).device());     \
      [[maybe_unused]] const auto stream =                             \
          at::cuda::getCurrentCUDAStream();                            \
      C10_CUDA_CHECK(launch);                                          \
    } else {                                                           \
      cpu_call;                                                        \
    }                                                                  \
  } while (0)
#else
#define MXF_DISPATCH(t, launch, cpu_call) \
  do {                                    \
    (void)(t);                            \
    cpu_call;                             \
  } while (0)
#endif
