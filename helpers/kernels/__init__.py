"""The course's C++ and CUDA softmax ops, compiled on first use (chapter 20).

The sources are real files beside this module:

- ``softmax_common.h``: the input checks every kernel runs first (``TORCH_CHECK``);
- ``softmax_cpu.cpp``: the CPU kernels, from the scalar loop to ``at::vec``
  (``Vectorized<float>`` and its Sleef ``exp``), rows split over threads with
  ``at::parallel_for``;
- ``softmax_cuda.cu``: the kernels of ``softmax_naive`` (one thread per row) and
  ``softmax_fast`` (a warp or block per row, online max/sum, float4 loads) and
  their launchers, declared in ``softmax_cuda.h`` with plain C++ types;
- ``softmax_cuda_host.cpp``: the two CUDA ops as ``at::Tensor`` functions
  (checks, allocation, device guard, current stream) around those launchers,
  compiled by the C++ compiler so that nvcc never parses ATen's headers;
- ``ops.cpp``: the kernels as dispatcher operators: ``TORCH_LIBRARY`` (the
  schemas ``course::softmax``, ``course::softmax_naive``,
  ``course::softmax_cpu_variant``) and ``TORCH_LIBRARY_IMPL`` per backend;
- ``bindings.cpp``: the same kernels bound with pybind11 alone (the older way,
  kept to show what it cannot do).

:func:`load_cpu_ops` and :func:`load_cuda_ops` compile them with
``torch.utils.cpp_extension.load_inline`` and return the Python module (the
pybind11 functions); loading also registers the operators, and
:func:`load_cpu_ops` adds their fake (meta) kernels and autograd formula from
Python (:func:`register_python_parts`), so ``torch.ops.course.softmax`` works
with autograd, ``torch.compile`` and ``torch.export``. The CPU build owns the
namespace's one ``TORCH_LIBRARY`` block; the CUDA build (``-DCOURSE_CUDA_ONLY``)
adds only CUDA kernels, so :func:`load_cuda_ops` loads the CPU build first and
both live in one process.

Everything about a build is fixed here (extension names, sources, flags), so
the notebook, the tests and the benchmark script share one build: whichever
process compiles first fills the build folder, the others find it there
(``load_inline``'s file lock makes concurrent builds of one name take turns).
The CPU flags are ``-O3 -fopenmp`` plus :func:`cpu_vec_flags` (the SIMD
instructions torch itself dispatches to on this CPU): without ``-fopenmp``,
``at::parallel_for`` in an extension runs on one thread.

Where builds go: ``$TORCH_EXTENSIONS_DIR/<name>`` when that is set (the
Makefile sets it to ``build/torch_extensions``), else
``<helpers.paths.build_dir()>/torch_extensions/<name>``. A second load in the
same process returns the same module object; a new process runs ninja, which
finds nothing to do and takes well under a second.

The lock: ``load_inline`` serialises builds of one name with an OS lock
(``flock``) on the file ``<build folder>/lock``. In torch 2.14 the kernel drops
that lock when its holder dies, so a lock *file* left behind by a killed build
is harmless (older torch releases used ``FileBaton``, which waited forever on
such a file). What can still hang is a live process that holds the lock and
never finishes (a frozen notebook kernel in the middle of a build). Before
building, this module waits at most ``$COURSE_KERNEL_LOCK_TIMEOUT`` seconds
for a held lock (default 1800: a cold CUDA build on a busy 2-core machine has
taken 16 minutes) and then raises :class:`KernelBuildError` naming the file,
instead of waiting forever. :func:`lock_status` tells the states
apart, :func:`clear_stale_lock` deletes a lock file nobody holds, and
``make clean`` deletes the whole build folder.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import torch

from helpers.device import import_without_cuda_home_log
from helpers.paths import build_dir

__all__ = [
    "CPU_EXTENSION",
    "CUDA_EXTENSION",
    "DEFAULT_CUDA_ARCH",
    "KERNEL_DIR",
    "KernelBuildError",
    "NAMESPACE",
    "check_toolchain",
    "clear_stale_lock",
    "cpu_vec_flags",
    "cuda_arch_list",
    "cuda_home",
    "extension_dir",
    "extensions_root",
    "load_cpu_ops",
    "load_cuda_ops",
    "lock_status",
    "register_python_parts",
    "softmax",
    "softmax_cpu",
    "softmax_fast",
    "softmax_naive",
    "source",
    "wait_for_lock",
]

#: Folder holding the .cpp / .cu / .h sources.
KERNEL_DIR = Path(__file__).resolve().parent
#: Extension (module) names. The notebook, the tests and benchmarks/softmax_gpu.py all use these.
CPU_EXTENSION = "course_softmax_cpu"
CUDA_EXTENSION = "course_softmax_cuda"
#: The arch compiled for when no GPU is visible and TORCH_CUDA_ARCH_LIST is unset:
#: Hopper (H100/H200), one arch so that a GPU-less compile check stays short.
DEFAULT_CUDA_ARCH = "9.0"

#: The operators' namespace in the inline builds: torch.ops.course.softmax and so on.
#: (The installable package, extensions/course_kernels, uses "course_kernels".)
NAMESPACE = "course"

CPU_SOURCES = ("softmax_cpu.cpp", "ops.cpp", "bindings.cpp")
# The CUDA build's C++ part: the CUDA kernels' TORCH_LIBRARY_IMPL and pybind11 bindings only
# (-DCOURSE_CUDA_ONLY), so that the CPU build keeps the namespace's single TORCH_LIBRARY block.
# softmax_cuda_host.cpp wraps the launchers of softmax_cuda.cu (which includes no ATen header, so that
# nvcc stays fast) as at::Tensor functions.
CUDA_CPP_SOURCES = ("ops.cpp", "bindings.cpp", "softmax_cuda_host.cpp")
CUDA_SOURCES = ("softmax_cuda.cu",)
HEADERS = ("softmax_common.h", "softmax_cuda.h")
# -fopenmp: ATen/Parallel-inl.h runs at::parallel_for on one thread in code compiled without it.
CFLAGS = ["-O3", "-fopenmp"]
LDFLAGS = ["-fopenmp"]
# -lineinfo maps GPU instructions to source lines for Nsight Compute, at no run-time cost.
# No --use_fast_math: see the comment at the top of softmax_cuda.cu.
CUDA_CFLAGS = ["-O3", "-lineinfo", "-DCOURSE_WITH_CUDA"]
#: Compiler flags per CPU capability, the same as torch's own kernels are built with,
#: plus the CPU_CAPABILITY_* macro that selects at::vec's SIMD implementation (and Sleef's exp).
_VEC_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma",
               "-DCPU_CAPABILITY=AVX512", "-DCPU_CAPABILITY_AVX512"],
    "AVX2": ["-mavx2", "-mfma", "-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2"],
}

_LOCK_TIMEOUT_S = 1800.0
_modules: dict[str, ModuleType] = {}
_load_lock = threading.Lock()


class KernelBuildError(RuntimeError):
    """An extension cannot be built here; the message names what is missing and the fix."""


def cpu_vec_flags(capability: str | None = None) -> list[str]:
    """Compiler flags that give ``at::vec::Vectorized`` the SIMD instructions torch uses here.

    Args:
        capability: ``"AVX512"``, ``"AVX2"`` or anything else; default
            ``torch.backends.cpu.get_cpu_capability()``, the level torch's own
            CPU kernels dispatch to on this machine (``ATEN_CPU_CAPABILITY``
            lowers it).

    Returns:
        e.g. ``["-mavx2", "-mfma", "-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2"]``;
        ``[]`` for any other level (``DEFAULT``, ARM, ...): ``Vectorized<float>``
        then falls back to a plain array and its ``exp`` to ``std::exp`` per element.
        A build made with these flags runs only on CPUs that have the instructions,
        which is why they are chosen on the machine that compiles (``load_inline``).
    """
    level = capability if capability is not None else torch.backends.cpu.get_cpu_capability()
    return list(_VEC_FLAGS.get(level, []))


def _cpp_extension():
    """``torch.utils.cpp_extension``, without its harmless "No CUDA runtime is found" log line."""
    return import_without_cuda_home_log("torch.utils.cpp_extension")


def source(filename: str) -> str:
    """The text of one source file of this folder, e.g. ``source("softmax_cuda.cu")``."""
    path = KERNEL_DIR / filename
    if not path.is_file():
        known = ", ".join(sorted(p.name for p in KERNEL_DIR.iterdir() if p.suffix in {".cpp", ".cu", ".h"}))
        raise FileNotFoundError(f"no kernel source {filename!r} in helpers/kernels (there are: {known})")
    return path.read_text(encoding="utf-8")


# ---------------------------------------------------------------- folders ----


def extensions_root() -> Path:
    """Where extension builds go: ``$TORCH_EXTENSIONS_DIR``, else ``build_dir()/torch_extensions``."""
    value = os.environ.get("TORCH_EXTENSIONS_DIR", "").strip()
    return Path(value).expanduser().resolve() if value else build_dir() / "torch_extensions"


def extension_dir(name: str, root: Path | str | None = None) -> Path:
    """The build folder of extension ``name`` (under ``root``, default :func:`extensions_root`)."""
    return Path(root) / name if root is not None else extensions_root() / name


# ---------------------------------------------------------------- toolchain --


def _is_toolkit(folder: str | Path | None) -> bool:
    return folder is not None and (Path(folder) / "bin" / "nvcc").is_file() and (Path(folder) / "include" / "cuda_runtime.h").is_file()


def cuda_home() -> str | None:
    """The CUDA toolkit folder the CUDA build will use, or None.

    ``$CUDA_HOME`` (or ``$CUDA_PATH``) when set. Otherwise torch's own guess
    (``torch.utils.cpp_extension.CUDA_HOME``, made at import from the ``nvcc``
    on PATH) if it really is a toolkit (``bin/nvcc`` and
    ``include/cuda_runtime.h``), else ``/usr/local/cuda`` if that is one. The
    check matters where ``nvcc`` on PATH is a wrapper script (e.g.
    ``/usr/local/bin/nvcc``): torch would then guess ``/usr/local`` and fail
    to find the headers. :func:`load_cuda_ops` hands the answer to torch.
    """
    for var in ("CUDA_HOME", "CUDA_PATH"):
        value = os.environ.get(var, "").strip()
        if value:
            return value
    guess = _cpp_extension().CUDA_HOME
    if _is_toolkit(guess):
        return guess
    return "/usr/local/cuda" if _is_toolkit("/usr/local/cuda") else guess


def _find_nvcc() -> tuple[Path | None, str]:
    """(nvcc path or None, where it was looked for)."""
    home = cuda_home()
    if home:
        nvcc = Path(home) / "bin" / "nvcc"
        return (nvcc if nvcc.is_file() else None), f"CUDA_HOME={home}"
    return None, "CUDA_HOME (unset), PATH and /usr/local/cuda"


def check_toolchain(cuda: bool = False, *, which: Callable[[str], str | None] = shutil.which) -> dict[str, str]:
    """Check that the tools a build needs are installed, before starting one.

    Args:
        cuda: also check for the CUDA compiler ``nvcc`` (for :func:`load_cuda_ops`).
        which: the lookup used for programs (``shutil.which``); tests replace it.

    Returns:
        ``{"c++": path, "ninja": path}`` plus ``"nvcc"`` when ``cuda`` is true.

    Raises:
        KernelBuildError: a tool is missing; the message says which and how to install it.
    """
    found: dict[str, str] = {}
    cxx = os.environ.get("CXX", "c++")
    path = which(cxx)
    if path is None:
        source_of = "$CXX" if "CXX" in os.environ else "the default compiler name"
        raise KernelBuildError(
            f"no C++ compiler: {cxx!r} ({source_of}) is not on PATH. Install one "
            "(Debian/Ubuntu: sudo apt install build-essential; macOS: xcode-select --install; "
            "conda: conda install -c conda-forge cxx-compiler) or point CXX at it, e.g. CXX=g++"
        )
    found["c++"] = path
    ninja = which("ninja")
    if ninja is None:
        # A venv's ninja (pip install ninja) is beside its python even when the venv is not activated.
        beside = Path(sys.executable).parent / "ninja"
        if which(str(beside)) is not None:
            os.environ["PATH"] = f"{beside.parent}{os.pathsep}{os.environ.get('PATH', '')}"
            ninja = str(beside)
    if ninja is None:
        raise KernelBuildError(
            "no ninja build tool on PATH: torch.utils.cpp_extension needs it. "
            "Install it with: pip install ninja (or apt install ninja-build)"
        )
    found["ninja"] = ninja
    if cuda:
        nvcc, where = _find_nvcc()
        if nvcc is None or which(str(nvcc)) is None:
            raise KernelBuildError(
                f"no CUDA compiler nvcc (looked in {where}). Install the CUDA toolkit matching torch's "
                f"CUDA {torch.version.cuda} (https://developer.nvidia.com/cuda-downloads), or, if it is "
                "installed, set CUDA_HOME=/usr/local/cuda (its folder) before starting Python"
            )
        found["nvcc"] = str(nvcc)
    return found


def cuda_arch_list() -> str:
    """The GPU architectures to compile for, as ``TORCH_CUDA_ARCH_LIST`` spells them.

    ``$TORCH_CUDA_ARCH_LIST`` when set; else the capability of every visible
    GPU (capped at the newest arch this torch was built for); else
    :data:`DEFAULT_CUDA_ARCH` ("9.0"), so a machine without a GPU compiles one arch.
    """
    value = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if value:
        return value
    if torch.cuda.is_available():
        built = [int(a.split("_")[1]) for a in torch.cuda.get_arch_list() if a.startswith("sm_") and a[3:].isdigit()]
        newest = max(((sm // 10, sm % 10) for sm in built), default=(99, 9))
        archs = set()
        for i in range(torch.cuda.device_count()):
            major, minor = min(torch.cuda.get_device_capability(i), newest)
            archs.add(f"{major}.{minor}")
        return ";".join(sorted(archs))
    return DEFAULT_CUDA_ARCH


@contextmanager
def _env(**values: str):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ---------------------------------------------------------------- the lock ---


def _lock_file(name: str, root: Path | str | None) -> Path:
    return extension_dir(name, root) / "lock"


def _try_lock(path: Path) -> bool:
    """True if the OS lock on ``path`` is free right now (it is taken and released at once)."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return False
    lock.release()
    return True


def lock_status(name: str, root: Path | str | None = None) -> str:
    """State of extension ``name``'s build lock.

    Returns:
        ``"none"``: no lock file; ``"left over"``: a lock file that no process
        holds (harmless with torch 2.14; :func:`clear_stale_lock` removes it);
        ``"held"``: a process is building (or froze while building) right now.
    """
    path = _lock_file(name, root)
    if not path.exists():
        return "none"
    return "left over" if _try_lock(path) else "held"


def clear_stale_lock(name: str, root: Path | str | None = None) -> bool:
    """Delete extension ``name``'s lock file if no process holds it.

    Returns:
        True if a lock file was deleted, False if there was none.

    Raises:
        KernelBuildError: a live process holds the lock. Deleting the file
            then would let a second build write the same files at the same
            time; wait for that process, or stop it, and call this again.
    """
    path = _lock_file(name, root)
    status = lock_status(name, root)
    if status == "held":
        raise KernelBuildError(
            f"{_short(path)} is held by a running process (a build in progress, or a frozen kernel). "
            "Wait for it, or stop that process (restart the notebook kernel), then call "
            f"clear_stale_lock({name!r}) again"
        )
    if status == "none":
        return False
    path.unlink(missing_ok=True)
    return True


def wait_for_lock(name: str, root: Path | str | None = None, timeout_s: float | None = None, poll_s: float = 0.5) -> float:
    """Wait until no process holds extension ``name``'s build lock.

    Args:
        timeout_s: the most seconds to wait; default ``$COURSE_KERNEL_LOCK_TIMEOUT`` or 1800.
        poll_s: seconds between looks.

    Returns:
        The seconds waited.

    Raises:
        KernelBuildError: still held after ``timeout_s``; the message names the
            lock file and the fix.
    """
    if timeout_s is None:
        timeout_s = float(os.environ.get("COURSE_KERNEL_LOCK_TIMEOUT", _LOCK_TIMEOUT_S))
    path = _lock_file(name, root)
    start = time.monotonic()
    while path.exists() and not _try_lock(path):
        waited = time.monotonic() - start
        if waited >= timeout_s:
            raise KernelBuildError(
                f"the build lock {_short(path)} has been held by another process for over {timeout_s:.0f} s. "
                "Another build may still be running (wait for it), or a process froze while building: "
                "stop it (restart that notebook kernel), then run make clean or "
                f"helpers.kernels.clear_stale_lock({name!r})"
            )
        time.sleep(poll_s)
    return time.monotonic() - start


def _short(path: Path) -> str:
    from helpers.paths import rel

    return rel(path)


# ---------------------------------------------------------------- loading ----


def _load(name: str, cuda: bool, verbose: bool) -> ModuleType:
    with _load_lock:
        if name in _modules:
            return _modules[name]
        check_toolchain(cuda=cuda)
        folder = extension_dir(name)
        folder.mkdir(parents=True, exist_ok=True)
        wait_for_lock(name)
        kwargs: dict = {}
        env: dict[str, str] = {}
        if cuda:
            cpp = [source(f) for f in CUDA_CPP_SOURCES]
            kwargs = {"cuda_sources": [source(f) for f in CUDA_SOURCES], "extra_cuda_cflags": CUDA_CFLAGS}
            env["TORCH_CUDA_ARCH_LIST"] = cuda_arch_list()
            env["CUDA_HOME"] = cuda_home() or ""
            # torch read CUDA_HOME once, when cpp_extension was imported; give it the checked folder.
            ext_module = _cpp_extension()
            ext_module.CUDA_HOME = env["CUDA_HOME"]
            cflags = ["-O3", "-DCOURSE_WITH_CUDA", "-DCOURSE_CUDA_ONLY"]
        else:
            cpp = [source(f) for f in CPU_SOURCES]
            cflags = CFLAGS + cpu_vec_flags()
        ext = _cpp_extension()
        try:
            with _env(**env):
                module = ext.load_inline(
                    name=name,
                    cpp_sources=cpp,
                    extra_cflags=cflags,
                    extra_ldflags=[] if cuda else LDFLAGS,
                    extra_include_paths=[str(KERNEL_DIR)],
                    build_directory=str(folder),
                    verbose=verbose,
                    # Each source includes the headers it needs; the implicit <torch/extension.h>
                    # (<torch/types.h> for .cu) would add many seconds to every cold build.
                    no_implicit_headers=True,
                    **kwargs,
                )
        except (RuntimeError, OSError) as err:
            raise KernelBuildError(
                f"building {name} failed in {_short(folder)}: {err}. Rerun with verbose=True to see the "
                "compiler's output; after changing compilers or flags, make clean forces a fresh build"
            ) from err
        _modules[name] = module
        return module


def load_cpu_ops(verbose: bool = False) -> ModuleType:
    """Compile (first call) and import the C++ CPU ops; later calls return the same module.

    Importing the library registers the operators ``torch.ops.course.softmax``
    (CPU kernel) and ``torch.ops.course.softmax_cpu_variant``; this function
    then adds their fake kernels and autograd formula
    (:func:`register_python_parts`). The returned module holds the pybind11
    functions: ``softmax_cpu(x)`` (see :func:`softmax_cpu`),
    ``cpu_build_info()`` and ``parallel_threads_used(rows, cols)``. A cold
    build takes about a minute on 2 busy cores; a warm one (a new process,
    same sources) under a second.

    Raises:
        KernelBuildError: no C++ compiler, no ninja, a build lock held too
            long, or a compile error.
    """
    module = _load(CPU_EXTENSION, cuda=False, verbose=verbose)
    register_python_parts(NAMESPACE)
    return module


def load_cuda_ops(verbose: bool = False) -> ModuleType:
    """Compile (first call) and import the CUDA ops; later calls return the same module.

    Loads the CPU build first (it defines the operators' schemas), then a
    library that registers the CUDA kernels of ``torch.ops.course.softmax``
    (the fast kernel) and ``torch.ops.course.softmax_naive``. Needs ``nvcc``
    but not a GPU: without one it compiles for :func:`cuda_arch_list` ("9.0"
    unless ``TORCH_CUDA_ARCH_LIST`` says otherwise), and the module imports,
    but calling an op needs a CUDA tensor. The module holds the pybind11
    functions ``softmax_naive`` and ``softmax_fast``. A cold build takes one
    to three minutes.

    Raises:
        KernelBuildError: no C++ compiler, ninja or nvcc, a build lock held
            too long, or a compile error.
    """
    load_cpu_ops(verbose=verbose)
    return _load(CUDA_EXTENSION, cuda=True, verbose=verbose)


# ------------------------------------------------ the Python-side parts -------


#: dtypes each kernel accepts, by the device type of its input. A fake (meta) kernel sees a tensor's
#: device: a FakeTensor traced by torch.compile or torch.export keeps its real device ("cpu", "cuda"),
#: a plain "meta" tensor does not say which kernel will run, so it gets the union of the op's kernels.
_KERNEL_DTYPES = {
    "softmax": {"cpu": (torch.float32, torch.float64), "cuda": (torch.float32,), "meta": (torch.float32, torch.float64)},
    "softmax_naive": {"cuda": (torch.float32,), "meta": (torch.float32,)},  # a CUDA kernel only
}


def _check_fake_input(x: torch.Tensor, op: str) -> None:
    """Every check of ``softmax_common.h`` that depends only on metadata (dtype, dims, non-empty,
    contiguity), so that tracing fails as early and as clearly as the kernel would.

    The dtype rule (:data:`_KERNEL_DTYPES`): the dtypes of the kernel for ``x.device.type``; for a
    "meta" tensor, those of any of the op's kernels. The device itself is not checked: the
    dispatcher, not the fake kernel, refuses a device the op has no kernel for.
    """
    by_device = _KERNEL_DTYPES[op]
    allowed = by_device.get(x.device.type, by_device["meta"])
    torch._check(x.dtype in allowed, lambda: f"{op}: expected dtype {' or '.join(map(str, allowed))}; got {x.dtype}")
    torch._check(x.dim() == 2, lambda: f"{op}: expected a 2-D tensor (rows, cols), softmax over the last dim; got {x.dim()}-D")
    torch._check(x.numel() > 0, lambda: f"{op}: expected a non-empty tensor; got shape {tuple(x.shape)}")
    torch._check(x.is_contiguous(), lambda: f"{op}: expected a contiguous tensor. Call .contiguous() first")


def _softmax_fake(x: torch.Tensor) -> torch.Tensor:
    _check_fake_input(x, "softmax")
    return torch.empty_like(x)


def _softmax_naive_fake(x: torch.Tensor) -> torch.Tensor:
    _check_fake_input(x, "softmax_naive")
    return torch.empty_like(x)


def _softmax_setup_context(ctx, inputs, output) -> None:
    ctx.save_for_backward(output)


def _softmax_backward(ctx, grad_y: torch.Tensor) -> torch.Tensor:
    """dL/dx = y * (dL/dy - sum(dL/dy * y, dim=-1, keepdim=True)), from the saved output y."""
    (y,) = ctx.saved_tensors
    return y * (grad_y - (grad_y * y).sum(dim=-1, keepdim=True))


def register_python_parts(namespace: str = NAMESPACE) -> list[str]:
    """Register the fake (meta) kernels and softmax's autograd formula for ``<namespace>::softmax`` and ``::softmax_naive``.

    The C++ library must be loaded first (it defines the schemas). Safe to
    call again, from a re-imported module or a re-run notebook cell: an op
    that already has a Meta kernel (``register_fake`` adds one) or an
    Autograd kernel is left alone. (In torch 2.14 a second ``register_fake``
    or ``register_autograd`` would not fail: it adds one more registration
    that replaces the first, and earlier releases raised "already has a fake
    impl registered" for the fake kernel; asking first avoids both.)

    Args:
        namespace: ``"course"`` (the inline builds) or ``"course_kernels"``
            (the installable package).

    Returns:
        The registrations made by this call, e.g. ``["course::softmax fake",
        "course::softmax autograd"]``; empty when all were there already.
    """
    made = []
    for op, fake in (("softmax", _softmax_fake), ("softmax_naive", _softmax_naive_fake)):
        qualname = f"{namespace}::{op}"
        if not torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "Meta"):
            torch.library.register_fake(qualname, fake)
            made.append(f"{qualname} fake")
        if not torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "Autograd"):
            torch.library.register_autograd(qualname, _softmax_backward, setup_context=_softmax_setup_context)
            made.append(f"{qualname} autograd")
    return made


# ------------------------------------------------------------ the ops --------


def softmax(x: torch.Tensor) -> torch.Tensor:
    """``torch.ops.course.softmax(x)``: the registered operator (CPU kernel, or the fast CUDA kernel on a GPU).

    Differentiable (softmax's backward formula), traceable by ``torch.compile``
    and ``torch.export`` (fake kernel). The CUDA kernel is there once
    :func:`load_cuda_ops` has run.

    Args:
        x: a contiguous (rows, cols) tensor: float32 or float64 on the CPU, float32 on CUDA.

    Raises:
        RuntimeError: the kernel's input checks (see :func:`softmax_cpu`), or no
            kernel for the tensor's device.
        KernelBuildError: see :func:`load_cpu_ops`.
    """
    load_cpu_ops()
    return torch.ops.course.softmax(x)


def softmax_cpu(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim of ``x`` with the course's C++ CPU kernel (``at::vec``, ``at::parallel_for``).

    A CPU tensor goes through the registered operator ``torch.ops.course.softmax``,
    so gradients flow; any other device goes straight to the kernel, whose check
    names the mistake.

    Args:
        x: a contiguous CPU tensor of shape (rows, cols), float32 or float64, not empty.

    Returns:
        A new tensor like ``x``; each row sums to 1. A row that is all -inf
        gives NaN and a NaN makes its row NaN, as in ``torch.softmax``.

    Raises:
        RuntimeError: wrong device, dtype, number of dims, empty, or not
            contiguous (the message says which, and the fix).
        KernelBuildError: the op cannot be built (see :func:`load_cpu_ops`).
    """
    module = load_cpu_ops()
    if x.device.type != "cpu":
        return module.softmax_cpu(x)  # raises: "softmax_cpu: expected a CPU tensor; got ..."
    return torch.ops.course.softmax(x)


def softmax_naive(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim with one CUDA thread per row (three passes; slow, for comparison).

    A CUDA tensor goes through ``torch.ops.course.softmax_naive`` (differentiable);
    any other device goes straight to the kernel, whose check names the mistake.

    Args:
        x: a contiguous CUDA float32 tensor of shape (rows, cols), not empty.

    Raises:
        RuntimeError: wrong device, dtype, dims, empty, or not contiguous.
        KernelBuildError: see :func:`load_cuda_ops`.
    """
    module = load_cuda_ops()
    if x.device.type != "cuda":
        return module.softmax_naive(x)
    return torch.ops.course.softmax_naive(x)


def softmax_fast(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim with a warp (cols <= 1024) or block per row on CUDA.

    One pass finds the row's max and sum together (online softmax, Milakov and
    Gimelshein 2018, arXiv:1805.02867), merged with warp shuffles and shared
    memory; a second pass writes the result. float4 loads when cols % 4 == 0
    and the data is 16-byte aligned, scalar loads otherwise; any row length.
    A CUDA tensor goes through ``torch.ops.course.softmax`` (whose CUDA kernel
    this is; differentiable); any other device goes straight to the kernel,
    whose check names the mistake.

    Args:
        x: a contiguous CUDA float32 tensor of shape (rows, cols), not empty.

    Returns:
        A new tensor like ``x``. An all -inf row gives NaN, like ``torch.softmax``.

    Raises:
        RuntimeError: wrong device, dtype, dims, empty, or not contiguous.
        KernelBuildError: see :func:`load_cuda_ops`.
    """
    module = load_cuda_ops()
    if x.device.type != "cuda":
        return module.softmax_fast(x)
    return torch.ops.course.softmax(x)
