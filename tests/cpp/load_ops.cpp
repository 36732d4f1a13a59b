// A C++ program loads libmxfuse_ops.so at run time and calls ops through the dispatcher, as a
// C++ engine would: proves the library registers its schemas and CPU kernels without Python.
// RTLD_LAZY: the library's empty PyInit__C (for `import mxfuse._C` in the setup.py build) refers
// to libpython, which is never called here.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <dlfcn.h>

#include <cstdio>
#include <tuple>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s path/to/libmxfuse_ops.so\n", argv[0]);
    return 2;
  }
  if (dlopen(argv[1], RTLD_LAZY | RTLD_LOCAL) == nullptr) {
    std::fprintf(stderr, "dlopen failed: %s\n", dlerror());
    return 1;
  }
  auto& dispatcher = c10::Dispatcher::singleton();
  const auto norm = dispatcher.findSchemaOrThrow("mxfuse::gemma_rmsnorm", "")
                        .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double, double)>();
  const auto quant = dispatcher.findSchemaOrThrow("mxfuse::mxfp8_quantize", "")
                         .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&,
                                                                   c10::string_view)>();
  // Rows of 2.0 with weight 0 and offset 1: rstd = 1/sqrt(4 + eps), y = 2 * rstd rounds to 1.0.
  const at::Tensor x = at::full({4, 64}, 2.0, at::kBFloat16);
  const at::Tensor y = norm.call(x, at::zeros({64}, at::kBFloat16), 1e-6, 1.0);
  // amax 1.0: ceil scale 2^-8 (byte 119), codes 1.0 * 2^8 = 256 -> E4M3 0x78.
  const auto [codes, scales] = quant.call(y, "ceil");
  const bool ok = y.eq(1.0).all().item<bool>() && scales.eq(119).all().item<bool>() &&
                  codes.view(at::kByte).eq(0x78).all().item<bool>();
  std::printf("%s\n", ok ? "ok" : "wrong results");
  return ok ? 0 : 1;
}
