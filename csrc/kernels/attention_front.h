// Launchers of the attention front (SPEC §6) and its unfused steps. Torch-free: params in, error
// code out, on `stream`.
#pragma once

#include "../core/params.h"
#include "../core/platform.h"

namespace mxf::kernels {

error_t launch_rope_neox(const RopeParams& p, stream_t stream);
error_t launch_kv_cache_write(const KvCacheParams& p, stream_t stream);
// q/k head norms, RoPE, gate split and the cache write after the qkv projection, one launch.
error_t launch_qk_norm_rope_cache(const FrontPostParams& p, stream_t stream);
// One launch: the MXFP6 linear kernel with the front's prologue and epilogue (mxfp6_linear.cuh).
error_t launch_attention_front(const FrontParams& p, stream_t stream);

}  // namespace mxf::kernels
