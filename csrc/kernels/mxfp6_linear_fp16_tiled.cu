// The MXFP6 linear kernel for fp16 activations above M = 384, 128 x 128 outputs per CTA: mxfp6_entries.h.
#include "mxfp6_linear_tiled.cuh"

MXF_FP6_DEFINE_TILED_ENTRY(linear_fp16_tiled, kFP16)
