// The attention front kernels for fp16 activations, M <= 16 per CTA (two n8 blocks): mxfp6_entries.h.
#include "mxfp6_linear.cuh"

MXF_FP6_DEFINE_ENTRY(front_fp16_m16, kFP16, 2, FrontParams)
