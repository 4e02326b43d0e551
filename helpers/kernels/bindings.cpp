// Python bindings of the course's softmax kernels with pybind11 alone: the
// older way, kept to show what it cannot do (chapter 20). A function bound
// like this is a plain Python callable: the dispatcher never sees it, so
// autograd, torch.compile and torch.export cannot either. ops.cpp registers
// the same kernels as real operators.
//
// The CPU kernel is bound unless COURSE_CUDA_ONLY is defined; the CUDA ones
// when COURSE_WITH_CUDA is. torch::wrap_pybind_function turns a failed
// TORCH_CHECK into a RuntimeError carrying only the message.
// pybind11 with torch's type casters (at::Tensor <-> torch.Tensor) and
// torch::wrap_pybind_function; <torch/extension.h>, which also brings in the
// whole C++ frontend (torch::nn and more), takes several times as long to parse.
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include <string>

#ifndef COURSE_CUDA_ONLY
at::Tensor softmax_cpu(const at::Tensor& x);
std::string cpu_build_info();
int64_t parallel_threads_used(int64_t rows, int64_t cols);
#endif
#ifdef COURSE_WITH_CUDA
at::Tensor softmax_naive(const at::Tensor& x);
at::Tensor softmax_fast(const at::Tensor& x);
#endif

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Row-wise softmax kernels of the PyTorch course (helpers/kernels), bound with pybind11";
#ifndef COURSE_CUDA_ONLY
  m.def("softmax_cpu", torch::wrap_pybind_function(softmax_cpu),
        "softmax_cpu(x) -> Tensor: softmax over the last dim of a contiguous 2-D CPU float32/float64 tensor",
        pybind11::arg("x"));
  m.def("cpu_build_info", &cpu_build_info,
        "cpu_build_info() -> str: the SIMD instructions (at::vec) and the OpenMP setting the CPU kernels were compiled with");
  m.def("parallel_threads_used", &parallel_threads_used,
        "parallel_threads_used(rows, cols) -> int: distinct threads at::parallel_for gives the rows to",
        pybind11::arg("rows"), pybind11::arg("cols"));
#endif
#ifdef COURSE_WITH_CUDA
  m.def("softmax_naive", torch::wrap_pybind_function(softmax_naive),
        "softmax_naive(x) -> Tensor: one CUDA thread per row, three passes (the slow textbook kernel)",
        pybind11::arg("x"));
  m.def("softmax_fast", torch::wrap_pybind_function(softmax_fast),
        "softmax_fast(x) -> Tensor: a warp or block per row, online max/sum, float4 loads",
        pybind11::arg("x"));
#endif
}
