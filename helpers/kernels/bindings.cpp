// Python bindings of the course's softmax ops (one module per build).
//
// The CPU op is always built. The CUDA ops are built when the compiler is
// given -DCOURSE_WITH_CUDA together with softmax_cuda.cu (helpers.kernels and
// extensions/course_kernels/setup.py both do that). torch::wrap_pybind_function
// turns a failed TORCH_CHECK into a RuntimeError carrying only the message.
#include <torch/extension.h>

at::Tensor softmax_cpu(const at::Tensor& x);
#ifdef COURSE_WITH_CUDA
at::Tensor softmax_naive(const at::Tensor& x);
at::Tensor softmax_fast(const at::Tensor& x);
#endif

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Row-wise softmax ops of the PyTorch course (helpers/kernels)";
  m.def("softmax_cpu", torch::wrap_pybind_function(softmax_cpu),
        "softmax_cpu(x) -> Tensor: softmax over the last dim of a contiguous 2-D CPU float32/float64 tensor",
        pybind11::arg("x"));
#ifdef COURSE_WITH_CUDA
  m.def("softmax_naive", torch::wrap_pybind_function(softmax_naive),
        "softmax_naive(x) -> Tensor: one CUDA thread per row, three passes (the slow textbook kernel)",
        pybind11::arg("x"));
  m.def("softmax_fast", torch::wrap_pybind_function(softmax_fast),
        "softmax_fast(x) -> Tensor: a warp or block per row, online max/sum, float4 loads",
        pybind11::arg("x"));
#endif
}
