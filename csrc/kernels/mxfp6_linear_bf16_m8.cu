// The MXFP6 linear kernels for bf16 activations, M <= 8 (one n8 block of x rows): mxfp6_entries.h.
#include "mxfp6_linear.cuh"

MXF_FP6_DEFINE_ENTRY(linear_bf16_m8, kBF16, 1, Fp6LinearParams)
