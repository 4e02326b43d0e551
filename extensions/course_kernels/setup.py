"""Build the course's softmax ops as an installable extension module, ``course_kernels``.

The sources are not copied: they are the files in ``helpers/kernels`` that the
notebook of chapter 20 loads inline. torch must already be installed, so build
without build isolation, for example::

    pip wheel --no-build-isolation --no-deps -w build/wheels extensions/course_kernels
    python extensions/course_kernels/setup.py build_ext --build-lib build/ext_site

The CUDA ops (``softmax_naive``, ``softmax_fast``) are included when nvcc is
found (CUDA_HOME) and either a GPU is visible or COURSE_KERNELS_CUDA=1 forces
them (for a build machine without a GPU; set TORCH_CUDA_ARCH_LIST too).
COURSE_KERNELS_CUDA=0 leaves them out.

The module binds no Python functions (``py_module.cpp``, no pybind11): importing
it registers the operators (``ops.cpp``) in the namespace ``course_kernels``, and
callers use ``torch.ops.course_kernels.softmax`` and so on. The namespace is not
``course``, the namespace of the inline builds, because a namespace can be
defined by only one library per process and the notebook loads both. The
compiler flags are the inline build's: ``-O3 -fopenmp`` and the SIMD flags of
``helpers.kernels.cpu_vec_flags()``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

HERE = Path(__file__).resolve().parent
KERNELS = HERE.parent.parent / "helpers" / "kernels"  # the one copy of the sources
sys.path.insert(0, str(HERE.parent.parent))
from helpers.kernels import CFLAGS, LDFLAGS, cpu_vec_flags  # noqa: E402  (the inline build's flags)

NAMESPACE = ("COURSE_NS", "course_kernels")  # torch.ops.course_kernels.*


def want_cuda() -> bool:
    forced = os.environ.get("COURSE_KERNELS_CUDA", "").strip()
    toolkit = CUDA_HOME is not None and (Path(CUDA_HOME) / "include" / "cuda_runtime.h").is_file()
    if forced == "1" and not toolkit:
        raise SystemExit(
            f"COURSE_KERNELS_CUDA=1 but torch's CUDA_HOME ({CUDA_HOME}) is not a CUDA toolkit folder: "
            "set CUDA_HOME=/usr/local/cuda (the folder holding bin/nvcc and include/)"
        )
    if forced in {"0", "1"}:
        return forced == "1"
    import torch

    return toolkit and torch.cuda.is_available()


cpu_sources = [str(KERNELS / f) for f in ("softmax_cpu.cpp", "ops.cpp", "py_module.cpp")]
cxx_flags = CFLAGS + cpu_vec_flags() + ["-g0"]  # no debug info (Python's own CFLAGS carry -g): a smaller module
if want_cuda():
    ext = CUDAExtension(
        "course_kernels",
        cpu_sources + [str(KERNELS / f) for f in ("softmax_cuda_host.cpp", "softmax_cuda.cu")],
        include_dirs=[str(KERNELS)],
        define_macros=[("COURSE_WITH_CUDA", None), NAMESPACE],
        extra_compile_args={"cxx": cxx_flags, "nvcc": ["-O3", "-lineinfo"]},
        extra_link_args=LDFLAGS,
    )
else:
    ext = CppExtension(
        "course_kernels",
        cpu_sources,
        include_dirs=[str(KERNELS)],
        define_macros=[NAMESPACE],
        extra_compile_args={"cxx": cxx_flags},
        extra_link_args=LDFLAGS,
    )

setup(
    name="course-kernels",
    version="0.1.0",
    description="The PyTorch course's softmax ops (chapter 20) as an installable extension",
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExtension},
)
