// The launchers of the CUDA softmax kernels (softmax_cuda.cu), declared with
// plain C++ types only: raw float pointers, sizes and a CUDA stream.
//
// The split keeps ATen out of the .cu file. nvcc runs the host compiler over
// every header a .cu file includes, and PyTorch's tensor headers are large;
// so softmax_cuda.cu includes only the CUDA runtime and this header, and
// softmax_cuda_host.cpp, compiled by the ordinary C++ compiler, does the
// at::Tensor part: checks, output allocation, device guard, current stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace course_cuda {

constexpr int kWarpsPerBlock = 4;      // rows per block for the warp-per-row kernel
constexpr int64_t kWarpRowMax = 1024;  // longer rows get a whole block each

// Queue the kernel on `stream` for the contiguous (rows, cols) float32 arrays
// x (input) and y (output), both in the memory of the current device. Returns
// cudaGetLastError() after the launch: cudaSuccess when the launch was queued.
cudaError_t launch_softmax_naive(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream);
cudaError_t launch_softmax_fast(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream);

}  // namespace course_cuda
