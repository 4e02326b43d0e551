// An importable Python module with no functions, for the installable package
// (extensions/course_kernels). Python's import finds the shared library by
// the module's name and calls PyInit_<name>; loading the library runs the
// TORCH_LIBRARY blocks of ops.cpp, which register the operators. Callers then
// use torch.ops.<namespace>.softmax: the dispatcher's entry points, with no
// pybind11 bindings to compile. (PyTorch's "Custom C++ and CUDA Operators"
// tutorial builds its extension the same way.)
//
// Only <Python.h>: this file compiles in about a second.
#include <Python.h>

#ifndef TORCH_EXTENSION_NAME
#error "build with -DTORCH_EXTENSION_NAME=<module name> (torch's BuildExtension sets it)"
#endif
#define COURSE_CAT2(a, b) a##b
#define COURSE_CAT(a, b) COURSE_CAT2(a, b)
#define COURSE_STR2(a) #a
#define COURSE_STR(a) COURSE_STR2(a)

PyMODINIT_FUNC COURSE_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) {
  static PyModuleDef module = {
      PyModuleDef_HEAD_INIT,
      COURSE_STR(TORCH_EXTENSION_NAME),
      "The PyTorch course's softmax operators (chapter 20): importing registers them; "
      "call them as torch.ops.course_kernels.softmax and so on",
      -1,
      nullptr,
  };
  return PyModule_Create(&module);
}
