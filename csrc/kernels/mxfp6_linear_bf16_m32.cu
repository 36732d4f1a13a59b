// The MXFP6 linear kernels for bf16 activations, M > 16, 32 rows per CTA (four n8 blocks): mxfp6_entries.h.
#include "mxfp6_linear.cuh"

MXF_FP6_DEFINE_ENTRY(linear_bf16_m32, kBF16, 4, Fp6LinearParams)
