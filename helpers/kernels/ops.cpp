// The softmax kernels as PyTorch operators, registered with the dispatcher.
//
// TORCH_LIBRARY declares each operator's schema (its name and signature) in
// the namespace COURSE_NS (`course` for the inline builds, `course_kernels`
// for the installable package, so both can be loaded in one process);
// TORCH_LIBRARY_IMPL registers a kernel per backend. Python then calls
// torch.ops.course.softmax(x), and the dispatcher picks the CPU or the CUDA
// kernel from x's device. The fake (meta) kernel and the autograd formula
// are registered from Python (helpers/kernels/__init__.py).
//
// Only ONE TORCH_LIBRARY block may define a namespace across all the
// libraries loaded in a process. The CPU build defines it; the CUDA inline
// build (compiled with -DCOURSE_CUDA_ONLY) adds only its TORCH_LIBRARY_IMPL
// block for the CUDA backend, so both builds load side by side.
#include <torch/library.h>

#include <string>

#ifndef COURSE_NS
#define COURSE_NS course
#endif
// One level of indirection so that COURSE_NS is expanded before TORCH_LIBRARY pastes it.
#define COURSE_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)
#define COURSE_LIBRARY_IMPL(ns, k, m) TORCH_LIBRARY_IMPL(ns, k, m)

#ifndef COURSE_CUDA_ONLY
at::Tensor softmax_cpu(const at::Tensor& x);
at::Tensor softmax_cpu_variant(const at::Tensor& x, c10::string_view variant);

COURSE_LIBRARY(COURSE_NS, m) {
  // pt2_compliant_tag: a promise that the op works under torch.compile/export
  // (opcheck checks it: schema, fake kernel, autograd registration).
  m.def("softmax(Tensor x) -> Tensor", {at::Tag::pt2_compliant_tag});
  m.def("softmax_naive(Tensor x) -> Tensor", {at::Tag::pt2_compliant_tag});
  m.def("softmax_cpu_variant(Tensor x, str variant) -> Tensor");
}

COURSE_LIBRARY_IMPL(COURSE_NS, CPU, m) {
  m.impl("softmax", &softmax_cpu);
  m.impl("softmax_cpu_variant", &softmax_cpu_variant);
}
#endif

#ifdef COURSE_WITH_CUDA
at::Tensor softmax_naive(const at::Tensor& x);
at::Tensor softmax_fast(const at::Tensor& x);

COURSE_LIBRARY_IMPL(COURSE_NS, CUDA, m) {
  m.impl("softmax", &softmax_fast);
  m.impl("softmax_naive", &softmax_naive);
}
#endif
