// Input checks shared by every softmax op of the course (CPU and CUDA).
//
// Each op takes a 2-D tensor (rows, cols) and computes the softmax of every
// row, that is over the last dimension. The checks run on the host before any
// kernel is launched; a failed TORCH_CHECK becomes a Python RuntimeError whose
// message says what was passed, what is expected, and how to fix the call.
#pragma once

// Only the headers this file needs: <ATen/ATen.h> (every operator) would add
// seconds to the compile of every file that includes this one.
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <initializer_list>
#include <string>

namespace course {

// The Python spelling of a dtype, for messages ("float32", not "Float").
inline std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kBool: return "bool";
    default: return std::string(c10::toString(t));
  }
}

// Validate `x` for op `op`: device, dtype, number of dimensions, non-empty,
// contiguity (in that order, so the first problem is the one reported).
inline void check_softmax_input(const at::Tensor& x, const char* op, at::DeviceType device,
                                std::initializer_list<at::ScalarType> dtypes, const char* dtype_fix) {
  const bool on_cuda = device == at::kCUDA;
  TORCH_CHECK(x.device().type() == device, op, ": expected a ", on_cuda ? "CUDA" : "CPU",
              " tensor; got a tensor on ", x.device(), ". ",
              on_cuda ? "Move it with x.cuda() first" : "Move it with x.cpu() first");
  bool dtype_ok = false;
  std::string expected;
  for (auto t : dtypes) {
    dtype_ok = dtype_ok || x.scalar_type() == t;
    expected += expected.empty() ? dtype_name(t) : " or " + dtype_name(t);
  }
  TORCH_CHECK(dtype_ok, op, ": expected dtype ", expected, "; got ", dtype_name(x.scalar_type()),
              ". ", dtype_fix);
  TORCH_CHECK(x.dim() == 2, op, ": expected a 2-D tensor (rows, cols), softmax over the last dim; got ",
              x.dim(), "-D with shape ", x.sizes(), ". Reshape with x.reshape(-1, x.shape[-1]) first");
  TORCH_CHECK(x.numel() > 0, op, ": expected a non-empty tensor; got shape ", x.sizes());
  TORCH_CHECK(x.is_contiguous(), op, ": expected a contiguous tensor; got strides ", x.strides(),
              " for shape ", x.sizes(), ". Call .contiguous() first");
}

}  // namespace course
