// Test support: when a poison byte is set (mxfuse::_set_debug_poison), every op fills the outputs
// it allocates with that byte before its kernel runs, so tests can prove every element is written.
#pragma once

#include <ATen/ATen.h>

namespace mxf::ops {

int debug_poison_byte();  // < 0: off

inline void maybe_poison(at::Tensor& t) {
  const int b = debug_poison_byte();
  if (b >= 0 && t.numel() > 0) t.view(at::kByte).fill_(b);
}

}  // namespace mxf::ops
