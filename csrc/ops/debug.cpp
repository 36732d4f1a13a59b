#include "debug.h"

#include "checks.h"

#include <torch/library.h>

#include <atomic>

namespace mxf::ops {
namespace {
std::atomic<int> g_poison{-1};

void set_debug_poison(int64_t byte) {
  MXF_CHECK(byte >= -1 && byte <= 255,
              "mxfuse._set_debug_poison: argument 'byte' must be -1 (off) or 0..255, got ", byte);
  g_poison.store(static_cast<int>(byte));
}
}  // namespace

int debug_poison_byte() { return g_poison.load(std::memory_order_relaxed); }

TORCH_LIBRARY_FRAGMENT(mxfuse, m) {
  // Test support: fill every freshly allocated output with `byte` before the kernel (-1: off).
  m.def("_set_debug_poison(int byte) -> ()", &set_debug_poison);
}

}  // namespace mxf::ops
