// Row-wise softmax on the CPU: a C++ op for PyTorch.
//
// softmax_cpu(x): x is a contiguous 2-D CPU tensor (rows, cols) of float32 or
// float64; returns a new tensor of the same shape and dtype whose rows each
// sum to 1. Rows are independent, so at::parallel_for splits them over
// PyTorch's intra-op thread pool (torch.get_num_threads() threads).
//
// Per row: the maximum m is subtracted before exp() so that exp never
// overflows (exp(x - m) <= 1), then the sum is accumulated in double
// (at::acc_type) so that long rows lose no precision. A row whose entries are
// all -inf has m = -inf and -inf - (-inf) = NaN, so it gives NaN, exactly like
// torch.softmax; a NaN anywhere in a row makes the whole row NaN, also like
// torch.softmax.
#include <ATen/AccumulateType.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "softmax_common.h"

namespace {

template <typename scalar_t>
void softmax_rows(const scalar_t* x, scalar_t* y, int64_t rows, int64_t cols) {
  using acc_t = at::acc_type<scalar_t, /*is_cuda=*/false>;  // double for float and double
  // Hand each thread at least ~32k elements: fewer, and the threads' start-up
  // costs more than the work.
  const int64_t grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / cols);
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const scalar_t* xr = x + r * cols;
      scalar_t* yr = y + r * cols;
      scalar_t m = -std::numeric_limits<scalar_t>::infinity();
      for (int64_t j = 0; j < cols; ++j) m = std::max(m, xr[j]);  // pass 1: the maximum
      acc_t sum = 0;
      for (int64_t j = 0; j < cols; ++j) {  // pass 2: exp(x - m), stored, and their sum
        const scalar_t e = std::exp(xr[j] - m);
        yr[j] = e;
        sum += e;
      }
      const scalar_t inv = static_cast<scalar_t>(acc_t(1) / sum);
      for (int64_t j = 0; j < cols; ++j) yr[j] *= inv;  // pass 3: normalise
    }
  });
}

}  // namespace

at::Tensor softmax_cpu(const at::Tensor& x) {
  course::check_softmax_input(x, "softmax_cpu", at::kCPU, {at::kFloat, at::kDouble},
                              "Convert with x.float() first");
  at::Tensor y = at::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "softmax_cpu", [&] {
    softmax_rows<scalar_t>(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), x.size(0), x.size(1));
  });
  return y;
}
