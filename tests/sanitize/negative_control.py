"""Negative control for scripts/sanitize.sh: a Triton kernel that stores one element past the end
of a 1024-element tensor. Under memcheck (with PYTORCH_NO_CUDA_MEMORY_CACHING=1, so that every
tensor is its own allocation) this must be reported; the script fails if it is not, which shows
that the sanitizer sees the kernels of this process and that allocation bounds are tracked."""

import torch
import triton
import triton.language as tl


@triton.jit
def _store_past_end(ptr, n):
    tl.store(ptr + n + tl.program_id(0), 1.0)


def main() -> None:
    x = torch.zeros(1024, dtype=torch.float32, device="cuda")
    _store_past_end[(1,)](x, x.numel())
    torch.cuda.synchronize()
    print("negative control ran (memcheck should have reported an invalid write)")


if __name__ == "__main__":
    main()
