// The host side of the CUDA softmax ops: at::Tensor in, at::Tensor out.
//
// Compiled by the C++ compiler, not nvcc (see softmax_cuda.h): it checks the
// input, allocates the output on the input's device, makes that device
// current, and calls the launcher in softmax_cuda.cu on PyTorch's current
// CUDA stream, so the kernel is ordered with the surrounding PyTorch work.
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>
#include <limits>

#include "softmax_common.h"
#include "softmax_cuda.h"

namespace {

constexpr int64_t kMaxGridX = std::numeric_limits<int32_t>::max();  // blocks in a grid's x dimension

void check_cuda_input(const at::Tensor& x, const char* op, int64_t rows_per_block) {
  course::check_softmax_input(x, op, at::kCUDA, {at::kFloat}, "Convert with x.float() first");
  TORCH_CHECK(x.size(0) <= kMaxGridX * rows_per_block, op, ": too many rows (", x.size(0), ")");
}

}  // namespace

at::Tensor softmax_naive(const at::Tensor& x) {
  check_cuda_input(x, "softmax_naive", 256);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  C10_CUDA_CHECK(course_cuda::launch_softmax_naive(x.data_ptr<float>(), y.data_ptr<float>(), x.size(0),
                                                   x.size(1), c10::cuda::getCurrentCUDAStream()));
  return y;
}

at::Tensor softmax_fast(const at::Tensor& x) {
  const int64_t cols = x.dim() == 2 ? x.size(1) : 0;
  // A warp per row packs kWarpsPerBlock rows into a block; longer rows take a block each.
  check_cuda_input(x, "softmax_fast", cols <= course_cuda::kWarpRowMax ? course_cuda::kWarpsPerBlock : 1);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  C10_CUDA_CHECK(course_cuda::launch_softmax_fast(x.data_ptr<float>(), y.data_ptr<float>(), x.size(0), cols,
                                                  c10::cuda::getCurrentCUDAStream()));
  return y;
}
