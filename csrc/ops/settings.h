// Process-wide launch settings of the ops (mxfuse.set_pdl, mxfuse.set_fp8_mm_kernel): a setter
// stores the value; until it is called, the first read takes the environment variable's value
// (parsed by the caller, which raises on a bad one) or the default, and keeps it, so launches do
// not parse the environment each time.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace mxf::ops {

// `slot` holds -1 until set. `parse(value)` maps a non-empty value of `var` to a setting >= 0.
template <typename Parse>
int64_t process_setting(std::atomic<int>& slot, const char* var, int fallback, Parse parse) {
  const int v = slot.load(std::memory_order_relaxed);
  if (v >= 0) return v;
  const char* e = std::getenv(var);
  const int value = e != nullptr && e[0] != '\0' ? parse(std::string(e)) : fallback;
  int unset = -1;  // a concurrent setter wins
  return slot.compare_exchange_strong(unset, value) ? value : unset;
}

// mxfuse.set_pdl's mode (0 off, 1 on, 2 prefetch_weights; MXFUSE_PDL until set), for every op
// that launches with programmatic dependent launch. Defined in mxfp6.cpp.
int64_t pdl_mode();

#ifdef MXF_WITH_GPU
// Whether the norm family's kernels (and qk_norm_rope_cache's), which wait for the previous kernel
// before they touch memory, launch with programmatic dependent launch now. Defined in
// norm_mxfp8.cpp.
bool norm_pdl();
#endif

}  // namespace mxf::ops
