// The attention front kernels for fp16 activations, M <= 8 (one n8 block of x rows): mxfp6_entries.h.
#include "mxfp6_linear.cuh"

MXF_FP6_DEFINE_ENTRY(front_fp16_m8, kFP16, 1, FrontParams)
