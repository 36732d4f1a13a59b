// The MXFP6 linear kernels for bf16 activations, M <= 16 per CTA (two n8 blocks): mxfp6_entries.h.
#include "mxfp6_linear.cuh"

MXF_FP6_DEFINE_ENTRY(linear_bf16_m16, kBF16, 2, Fp6LinearParams)
