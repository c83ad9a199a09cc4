"""The loader from Python: build without a GPU, launch on one (torch tensors or raw pointers)."""
import ctypes

import kvjit

SOURCE = r"""
#include <cuda_bf16.h>
template <int N, typename T> __global__ void scale(T *x, T factor) {
  int i = blockIdx.x * N + threadIdx.x;
  x[i] *= factor;
}
"""


def build_for_the_fleet(targets=("sm_90", "sm_90a", "sm_100f", "compute_90"), context=None):
    """On a build machine: fill the cache and inspect what was built (no GPU needed)."""
    prog = kvjit.Program(SOURCE, kernels=["scale<256, float>"], options=["-std=c++17"], context=context)
    for target in targets:
        b = prog.build(target)  # kvjit.CompileError has the full NVRTC log in .log
        print(b.target_name, b.kind, len(b.code), "bytes", b.key, b.lowered[0])


def scale_on_the_gpu(x, factor):
    """x: a CUDA float32 tensor of a multiple of 256 elements, scaled in place."""
    prog = kvjit.Program(SOURCE, kernels=["scale<256, float>"])
    kernel = prog.kernel("scale<256,float>")  # whitespace in name expressions does not matter
    kernel.launch(x.numel() // 256, 256, [x, ctypes.c_float(factor)])  # a wrong arg count is refused
