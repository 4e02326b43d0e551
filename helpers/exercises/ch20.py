"""Exercises of chapter 20 (C++ and CUDA extensions): checkers and reference solutions."""

from __future__ import annotations

import itertools
import math

import torch

from . import Hint, exercise

INF = float("inf")

# --------------------------------------------------------------------------
# 20.online_update
# --------------------------------------------------------------------------


def _online_update(m: torch.Tensor, d: torch.Tensor, chunk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of the online softmax (Milakov and Gimelshein, 2018) over a chunk of a row.

    Args:
        m: the running maximum so far, a 0-dim float64 tensor (``-inf`` before any element).
        d: the running sum of ``exp(x - m)`` so far, a 0-dim float64 tensor (0 at the start).
        chunk: the next elements of the row, a 1-D float64 tensor (at least one element).

    Returns:
        ``(m_new, d_new)`` with ``m_new = max(m, max(chunk))`` and
        ``d_new = d * exp(m - m_new) + sum(exp(chunk - m_new))``. While every
        element seen is ``-inf`` the state stays ``(-inf, 0)``: the formula
        would compute ``-inf - (-inf) = NaN`` there.
    """
    m_new = torch.maximum(m, chunk.max())
    if m_new == -INF:
        return m, d
    return m_new, d * torch.exp(m - m_new) + torch.exp(chunk - m_new).sum()


def _run_online(candidate, row: torch.Tensor, chunk: int):
    m = torch.tensor(-INF, dtype=torch.float64)
    d = torch.tensor(0.0, dtype=torch.float64)
    for start in range(0, len(row), chunk):
        out = candidate(m.clone(), d.clone(), row[start : start + chunk].clone())
        if not (isinstance(out, tuple | list) and len(out) == 2):
            raise AssertionError(f"return a pair (m_new, d_new); you returned {type(out).__name__}")
        m, d = (torch.as_tensor(v, dtype=torch.float64).reshape(()) for v in out)
    return m, d


@exercise(
    "20.online_update",
    "online_update(m, d, chunk) -> (m_new, d_new): update the running maximum m and the running sum "
    "d = sum(exp(x - m)) of a row with the next chunk of elements (the online softmax recurrence).",
    reference=_online_update,
    hint="Section 'The online softmax' derives the step: the new maximum is the larger of the old one and "
         "the chunk's, and the old sum has to be re-expressed relative to it, with a factor that is never "
         "above 1, before the chunk's own terms are added. While everything seen is still -inf, leave (m, "
         "d) as they are, because -inf minus -inf is NaN.",
)
def _test_online_update(candidate) -> None:
    g = torch.Generator().manual_seed(20)
    rising = torch.arange(12, dtype=torch.float64)  # every chunk brings a new maximum
    masked = torch.randn(20, dtype=torch.float64, generator=g)
    masked[:7] = -INF  # the row starts with masked entries
    cases = [
        ("a random row in chunks of 4", torch.randn(16, dtype=torch.float64, generator=g) * 3, 4),
        ("a rising row (each chunk has a new maximum) in chunks of 3", rising, 3),
        ("a row with large values in chunks of 5", torch.randn(25, dtype=torch.float64, generator=g) * 300, 5),
        ("a row starting with -inf (masked) entries, chunks of 3", masked, 3),
        ("a random row one element at a time", torch.randn(9, dtype=torch.float64, generator=g), 1),
    ]
    for label, row, chunk in cases:
        m, d = _run_online(candidate, row, chunk)
        want_m = row.max()
        want_d = torch.exp(row - want_m).sum()
        if (torch.isnan(m) or torch.isnan(d)) and not torch.isinf(row).any():
            raise AssertionError(
                f"{label}: got NaN on a row with no -inf in it. At the start m = -inf and d = 0, so the rescale "
                "factor must be exp(m - m_new) = 0 (m - m_new <= 0); exp(m_new - m) is inf and 0 * inf = NaN: check the sign"
            )
        if torch.isnan(m) or torch.isnan(d):
            raise AssertionError(
                f"{label}: got NaN. While the maximum is still -inf, m - m_new is -inf - (-inf) = NaN: "
                "when the new maximum is -inf, return (m, d) unchanged"
            )
        if m != want_m:
            raise AssertionError(f"{label}: the final m is {float(m):.6g} but the row's maximum is {float(want_m):.6g}; m_new = max(m, max(chunk))")
        if torch.isinf(d) or not math.isclose(float(d), float(want_d), rel_tol=1e-9):
            partial = _run_online(lambda m, d, c: (torch.maximum(m, c.max()), d + torch.exp(c - torch.maximum(m, c.max())).sum()), row, chunk)[1]
            if math.isclose(float(d), float(partial), rel_tol=1e-9):
                raise AssertionError(
                    f"{label}: d is {float(d):.6g}, want {float(want_d):.6g}. When the maximum grows, the old sum was "
                    "taken relative to the old maximum: rescale it, d * exp(m - m_new), before adding the chunk"
                )
            raise AssertionError(
                f"{label}: d is {float(d):.6g}, want sum(exp(x - max)) = {float(want_d):.6g}. "
                "d_new = d * exp(m - m_new) + sum(exp(chunk - m_new)) (note the sign: m - m_new <= 0)"
            )


# --------------------------------------------------------------------------
# 20.softmax_gbps
# --------------------------------------------------------------------------


def _softmax_gbps(rows: int, cols: int, seconds: float, dtype: torch.dtype = torch.float32) -> float:
    """Effective bandwidth of a softmax over a (rows, cols) tensor that took ``seconds``.

    The op must read every element once and write every element once:
    ``2 * rows * cols * itemsize`` bytes, where itemsize is the dtype's size
    in bytes (4 for float32, 2 for bfloat16). GB/s uses decimal gigabytes, 1e9
    bytes, as GPU data sheets do.
    """
    itemsize = torch.empty((), dtype=dtype).element_size()
    return 2 * rows * cols * itemsize / seconds / 1e9


@exercise(
    "20.softmax_gbps",
    "softmax_gbps(rows, cols, seconds, dtype=torch.float32) -> float: the achieved GB/s of a row-wise softmax, "
    "counting the bytes it must read and write.",
    reference=_softmax_gbps,
    hint="Count the bytes the softmax cannot avoid moving: every element is read once and written once, at "
         "the size of the given dtype in bytes (ask a tensor of that dtype for its element_size). Divide "
         "by the time and by decimal gigabytes (1e9 bytes, not 2**30), as GPU data sheets do.",
)
def _test_softmax_gbps(candidate) -> None:
    cases = [
        (4096, 4096, 40e-6, torch.float32),
        (1, 1_000_000, 1e-3, torch.float32),
        (8192, 1024, 25e-6, torch.bfloat16),
        (100, 300, 2e-3, torch.float64),
    ]
    for rows, cols, seconds, dtype in cases:
        want = _softmax_gbps(rows, cols, seconds, dtype)
        try:
            got = float(candidate(rows, cols, seconds, dtype))
        except TypeError as err:
            raise AssertionError(f"call it as softmax_gbps(rows, cols, seconds, dtype); it raised TypeError: {err}") from None
        if math.isclose(got, want, rel_tol=1e-6):
            continue
        where = f"for ({rows}, {cols}) {str(dtype).removeprefix('torch.')} in {seconds:g} s"
        ratio = got / want if want else float("nan")
        if math.isclose(ratio, 0.5, rel_tol=1e-6):
            raise Hint(f"{where} you returned {got:.4g}, half the answer: your count misses half of the memory traffic",
                       "a softmax reads every element, and its output has to get to memory too")
        if math.isclose(ratio, 1e9 / 2**30, rel_tol=1e-6):
            raise Hint(f"{where} you returned {got:.4g}, {1e9 / 2**30:.3f}x the answer: a unit of the result is not the one "
                       "the task asks for", "GB/s, as GPU data sheets give it, counts decimal gigabytes; GiB are 2**30 bytes")
        if math.isclose(ratio, 8, rel_tol=1e-6):
            raise AssertionError(f"{where} you returned {got:.4g}, 8x too much: count bytes, not bits")
        if dtype != torch.float32 and math.isclose(got, _softmax_gbps(rows, cols, seconds), rel_tol=1e-6):
            raise Hint(f"{where} you returned {got:.4g}, want {want:.4g}: your count takes 4 bytes per element "
                       f"whatever the dtype, and a {str(dtype).removeprefix('torch.')} element is not 4 bytes",
                       "the bytes per element depend on the dtype: a tensor of that dtype tells you its size in "
                       "bytes (element_size), and torch.dtype has an itemsize attribute too")
        if math.isclose(ratio, 1e3, rel_tol=1e-6) or math.isclose(ratio, 1e6, rel_tol=1e-6):
            raise AssertionError(f"{where} you returned {got:.4g}: seconds are already seconds (not ms or us)")
        passes = 2 * ratio  # the answer counts two passes over the tensor's bytes (one read, one write)
        if passes > 2 and math.isclose(passes, round(passes), rel_tol=1e-6):
            raise Hint(f"{where} you returned {got:.4g}, want {want:.4g} ({ratio:.3g}x too much): you count "
                       f"{round(passes)} passes over the tensor's bytes; count only the traffic a softmax cannot avoid",
                       "a fused softmax reads each element from memory once and writes each result once; the "
                       "passes a naive kernel makes (max, sum, normalise) are not what the GB/s figure counts")
        raise Hint(f"{where} you returned {got:.4g}, want {want:.4g} ({ratio:.3g}x the answer)",
                   "count the bytes the softmax cannot avoid moving (each element read once, each result written "
                   "once, at the dtype's size in bytes), then divide by the seconds and by 1e9")


# --------------------------------------------------------------------------
# 20.l2_normalize_rows: a C++ op, compiled by the checker with load_inline
# --------------------------------------------------------------------------

_OP = "l2_normalize_rows"
_SCHEMA = "(Tensor x, float eps) -> Tensor"  # "float" in a schema is a C++ double

_REFERENCE_CPP = r"""
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>

#include <algorithm>
#include <cmath>

// y[r] = x[r] / max(||x[r]||_2, eps) for every row r, like F.normalize(x, p=2.0, dim=1, eps=eps).
at::Tensor l2_normalize_rows(const at::Tensor& x, double eps) {
  TORCH_CHECK(x.device().is_cpu(), "l2_normalize_rows: expected a CPU tensor, got one on ", x.device());
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble,
              "l2_normalize_rows: expected float32 or float64, got ", x.scalar_type());
  TORCH_CHECK(x.dim() == 2, "l2_normalize_rows: expected a 2-D tensor (rows, cols), got ", x.dim(), "-D");
  TORCH_CHECK(x.is_contiguous(), "l2_normalize_rows: expected a contiguous tensor; call .contiguous() first");
  at::Tensor y = at::empty_like(x);
  const int64_t rows = x.size(0), cols = x.size(1);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "l2_normalize_rows", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(cols, 1));  // >= 32k elements per task
    at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const scalar_t* xr = xp + r * cols;
        scalar_t* yr = yp + r * cols;
        double sumsq = 0;  // accumulate in double: long float32 rows keep their digits
        for (int64_t j = 0; j < cols; ++j) sumsq += static_cast<double>(xr[j]) * xr[j];
        const double inv = 1.0 / std::max(std::sqrt(sumsq), eps);
        for (int64_t j = 0; j < cols; ++j) yr[j] = static_cast<scalar_t>(xr[j] * inv);
      }
    });
  });
  return y;
}
"""


def _l2_normalize_rows_source() -> str:
    """The reference answer: C++ source of ``at::Tensor l2_normalize_rows(const at::Tensor& x, double eps)``.

    ``y[r] = x[r] / max(||x[r]||_2, eps)`` for every row, the formula of
    ``torch.nn.functional.normalize(x, p=2.0, dim=1, eps=eps)``; rows split over
    threads with ``at::parallel_for``; the sum of squares accumulated in double.
    Input checks (``TORCH_CHECK``, raised in Python as RuntimeError): a CPU tensor,
    float32 or float64, 2-D, contiguous.
    """
    return _REFERENCE_CPP


#: Names after ``at::`` or ``torch::`` that an answer may use: types, constants and the
#: allocation and threading helpers. Anything else (``at::norm``, ``at::native::...``) is a
#: library op doing the work, refused before compiling.
_ALLOWED_NAMES = frozenset({
    "Tensor", "parallel_for", "empty_like", "empty", "zeros_like", "zeros", "ScalarType", "Device",
    "DeviceType", "internal", "acc_type", "opmath_type", "IntArrayRef", "TensorOptions", "MemoryFormat",
    "Half", "BFloat16", "toString", "isFloatingType", "get_num_threads", "in_parallel_region", "Layout",
})
#: Operators the op may dispatch while it runs (allocating and filling its output).
_ALLOWED_OPS = frozenset({"aten.empty_like", "aten.empty", "aten.empty_strided", "aten.zeros_like", "aten.zeros",
                          "aten.zero_", "aten.fill_"})
_modules: dict[str, object] = {}

#: Force-included (``-include``) before the learner's source by :func:`_compile`. It includes the real
#: ``<ATen/Parallel.h>`` first, then renames ``parallel_for`` with a macro, so that every call of
#: ``at::parallel_for`` in the learner's code goes to a wrapper that records the ``[begin, end)`` range
#: each call of the body receives (with the number of the ``parallel_for`` call it came from), then runs
#: the body. ``_course_parallel_ranges()`` (registered beside the op) returns and clears the records as a
#: flat list of (call, begin, end) triples. ``_course_only_row(row)`` makes the wrapper run the body only for
#: the range holding ``row`` (-1: every range), so the checker can see that the body writes exactly the rows
#: of its range (not a loop beside it, not rows from 0). Line numbers of the learner's source are unchanged.
_PARALLEL_SHIM = r"""
#pragma once
#include <ATen/Parallel.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace course_check {
inline std::mutex& ranges_mutex() { static std::mutex m; return m; }
inline std::vector<int64_t>& ranges() { static std::vector<int64_t> r; return r; }
inline std::atomic<int64_t>& calls() { static std::atomic<int64_t> n{0}; return n; }
// When >= 0: the wrapper runs the body only for the range holding this row (-1: every range), to see
// that the body writes exactly the rows of the range it receives.
inline std::atomic<int64_t>& only_row() { static std::atomic<int64_t> k{-1}; return k; }
inline int64_t set_only_row(int64_t row) { return only_row().exchange(row); }
inline std::vector<int64_t> take_ranges() {
  const std::lock_guard<std::mutex> hold(ranges_mutex());
  std::vector<int64_t> out;
  out.swap(ranges());
  return out;
}
}  // namespace course_check

namespace at {
template <class F>
inline void course_recorded_parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  const int64_t call = course_check::calls()++;
  at::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) {
    {
      const std::lock_guard<std::mutex> hold(course_check::ranges_mutex());
      auto& r = course_check::ranges();
      r.insert(r.end(), {call, b, e});
    }
    const int64_t keep = course_check::only_row().load();
    if (keep >= 0 && !(b <= keep && keep < e)) return;  // a skipped range: its rows must stay unwritten
    f(b, e);
  });
}
}  // namespace at

#define parallel_for course_recorded_parallel_for
"""
#: Shifts that make each multi-thread input of a check unlike every earlier one in this process. A row that the
#: op never writes holds whatever its memory held before: the allocator can hand back the block of an earlier
#: output, and if that output was of the same input (the generator is seeded alike in every check), the row is
#: right by accident and a wrong answer passes.
_SHIFTS = itertools.count(1)


def _unseen(x: torch.Tensor) -> torch.Tensor:
    """``x`` moved by a constant no earlier input had: a row-wise normalisation of it matches no earlier output."""
    return x + 3.0 * next(_SHIFTS)


_RANGES_OP = "_course_parallel_ranges"
_ONLY_ROW_OP = "_course_only_row"


def _strip_comments_and_strings(src: str) -> str:
    """``src`` without C++ comments and string/char literals (so a message or a comment is not mistaken for code)."""
    import re

    pattern = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
    return pattern.sub(lambda m: " " if m.group(0)[0] in "/" else '""', src)


def _static_problems(src: str) -> None:
    """Refuse, before compiling, an answer that cannot be right: raises Hint."""
    import re

    code = _strip_comments_and_strings(src)
    if not re.search(rf"\b{_OP}\s*\(", code):
        raise Hint(f"the source defines no function {_OP}(...).",
                   f"Define at::Tensor {_OP}(const at::Tensor& x, double eps) at the top level (not in a namespace).")
    if re.search(r"\bPYBIND11_MODULE\b|\bTORCH_LIBRARY", code):
        raise Hint("the source registers the op itself (PYBIND11_MODULE or TORCH_LIBRARY); the checker does that.",
                   "Remove the registration block: the checker appends a TORCH_LIBRARY block for your function.")
    if "TORCH_CHECK" not in code:
        raise Hint("the source has no TORCH_CHECK: the op must refuse the inputs it cannot handle.",
                   "TORCH_CHECK(condition, message parts...) raises a RuntimeError with the message when the condition is false.")
    if not re.search(r"\bparallel_for\s*\(", code):
        raise Hint("the source never calls at::parallel_for: the rows must be split between threads.",
                   "at::parallel_for(begin, end, grain, fn) (from <ATen/Parallel.h>) calls fn(b, e) on sub-ranges of "
                   "[begin, end) from several threads; each call must handle exactly the rows b..e-1.")
    names = sorted({m.group(1) for m in re.finditer(r"\b(?:at|torch)\s*::\s*(\w+)", code)}
                   - _ALLOWED_NAMES - {n for n in re.findall(r"\b(?:at|torch)\s*::\s*(k[A-Z]\w*)", code)})
    if names:
        raise Hint(f"the source calls library functions ({', '.join('at::' + n for n in names)}): this exercise asks "
                   "you to write the loop over each row's elements yourself.",
                   "Allocate the output (at::empty_like), read the input through x.data_ptr<scalar_t>() and compute "
                   "the norm and the division with plain C++ arithmetic (std::sqrt).")


def _compile_error_hint(err: Exception, folder) -> Hint:
    """A short Hint from a failed build: the compiler's first error, as a line of the learner's source."""
    import re

    text = str(err)
    errors = list(dict.fromkeys(re.findall(r"main\.cpp:(\d+):(\d+): (?:fatal )?error: ([^\n]*)", text)))  # unique, in order
    if errors:
        first = [f"line {line}, column {col}: {msg.strip()}" for line, col, msg in errors[:3]]
        return Hint("your C++ does not compile: " + "; ".join(first) + ".",
                    f"Line numbers count from the first line of your string. The compiler stops at the first error "
                    f"(-Wfatal-errors); the generated main.cpp and build.ninja are in {folder}/.")
    tail = [line for line in text.splitlines() if line.strip()][-3:]
    return Hint("your C++ did not build or load: " + " | ".join(tail)[:400],
                f"Check that {_OP} has exactly the signature at::Tensor {_OP}(const at::Tensor& x, double eps).")


def _compile(src: str, ops: tuple[str, ...] = (_OP,)):
    """Compile ``src`` with ``load_inline`` and register each name in ``ops`` as ``name(Tensor x, float eps) -> Tensor``.

    Compiled with ``-fopenmp`` (ATen's ``at::parallel_for`` is a header template that runs serially
    without it) and with only the headers the source includes (``no_implicit_headers``: no
    ``torch/extension.h``, no pybind11, about three times faster to compile). One build per
    distinct source: the extension name and the operator namespace carry a hash
    of the source (and of :data:`_PARALLEL_SHIM`, force-included with ``-include``, which records the
    row ranges ``at::parallel_for`` hands out; ``_course_parallel_ranges`` is registered beside the ops), the build goes to ``helpers.kernels.extension_dir(name)`` (under build/), and a
    second call with the same source returns the namespace from memory (a new process finds the
    build on disk: ninja has nothing to do). Returns ``torch.ops.<namespace>``.

    Raises:
        Hint: a compile error (the first errors, as lines of ``src``) or a load error.
    """
    import hashlib

    from helpers import kernels

    digest = hashlib.sha256("\0".join([src, *ops, _PARALLEL_SHIM, torch.__version__]).encode()).hexdigest()[:12]
    name = f"ch20_l2_{digest}"
    if name in _modules:
        return _modules[name]
    kernels.check_toolchain()
    folder = kernels.extension_dir(name)
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "course_parallel_shim.h"
    if not shim.is_file() or shim.read_text() != _PARALLEL_SHIM:  # rewritten only when it changed: ninja tracks it
        shim.write_text(_PARALLEL_SHIM)
    registration = f"\n#include <torch/library.h>\nTORCH_LIBRARY({name}, m) {{\n" + "".join(
        f'  m.def("{op}{_SCHEMA}", &{op});\n' for op in ops) + f'  m.def("{_RANGES_OP}", &course_check::take_ranges);\n' \
        + f'  m.def("{_ONLY_ROW_OP}", &course_check::set_only_row);\n}}\n'
    ext = kernels._cpp_extension()
    try:
        # -fopenmp: at::parallel_for is a header template, and without OpenMP it runs every range on one thread.
        # -include: the shim that records the ranges at::parallel_for hands out, before line 1 of the source.
        ext.load_inline(name=name, cpp_sources=[src, registration], is_python_module=False, no_implicit_headers=True,
                        extra_cflags=["-fopenmp", "-Wfatal-errors", "-include", str(shim)], extra_ldflags=["-fopenmp"],
                        build_directory=str(folder), verbose=False)
    except (RuntimeError, OSError) as err:
        from helpers.paths import rel

        raise _compile_error_hint(err, rel(folder)) from None
    _modules[name] = getattr(torch.ops, name)
    return _modules[name]


def _reference(x: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.nn.functional.normalize(x.double(), p=2.0, dim=1, eps=eps).to(x.dtype)


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    tol = {torch.float32: (1e-5, 1e-7), torch.float64: (1e-10, 1e-14)}[want.dtype]
    return got.shape == want.shape and got.dtype == want.dtype and torch.allclose(got, want, rtol=tol[0], atol=tol[1])


def _wrong_formula_hint(label: str, x: torch.Tensor, eps: float, got: torch.Tensor) -> Hint:
    x64, g = x.double(), got.double()
    norm = x64.norm(dim=1, keepdim=True)
    guesses = [
        ("divides by the sum of squares, not its square root", x64 / (x64 * x64).sum(1, keepdim=True).clamp_min(eps),
         "the L2 norm is the square root of the sum of squares"),
        ("divides by the sum of |x| (the L1 norm)", x64 / x64.abs().sum(1, keepdim=True).clamp_min(eps),
         "the L2 norm is sqrt(sum of x*x)"),
        ("divides by norm + eps", x64 / (norm + eps), "F.normalize divides by max(norm, eps): eps is a floor, not an offset"),
        ("divides by the norm without the eps floor", x64 / norm, "a row of zeros must give zeros: divide by max(norm, eps)"),
    ]
    for what, value, more in guesses:
        if g.shape == value.shape and torch.allclose(g, value, rtol=1e-4, atol=1e-6, equal_nan=True):
            return Hint(f"{label}: your op {what}.", more)
    bad = (~torch.isclose(g, _reference(x, eps).double(), rtol=1e-4, atol=1e-6)).any(1).nonzero().flatten().tolist()
    return Hint(f"{label}: wrong values in rows {bad[:5]}{' ...' if len(bad) > 5 else ''} "
                f"(want x[r] / max(||x[r]||_2, {eps:g})).",
                "Compute the sum of squares of the row, its square root, then divide every element by max(norm, eps).")


def _on_threads(n: int, fn):
    """``fn()`` with torch's intra-op pool (the one at::parallel_for uses) set to ``n`` threads, then restored."""
    threads = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        return fn()
    finally:
        torch.set_num_threads(threads)


def _probe_ops(op, x: torch.Tensor, eps: float) -> list[str]:
    """Names of the operators ``op(x, eps)`` dispatches while it runs (a TorchDispatchMode sees them from C++ too)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    def run():
        with Record():
            op(x, eps)

    _on_threads(1, run)  # every row in this thread, where the mode is active
    return seen


def _check_op(op) -> None:
    """Test a compiled ``l2_normalize_rows`` (a ``torch.ops`` callable); raises Hint when it is wrong."""
    g = torch.Generator().manual_seed(20)
    probe = torch.randn(64, 300, generator=g)
    try:
        used = sorted(set(_probe_ops(op, probe, 1e-12)) - _ALLOWED_OPS)
    except RuntimeError as err:
        raise Hint(f"your op raised on a valid (64, 300) float32 input: {str(err).splitlines()[0]}",
                   "Check the conditions of your TORCH_CHECKs: they must hold for a contiguous 2-D float32 CPU tensor.") from None
    if used:
        raise Hint(f"your op calls PyTorch operators ({', '.join(used)}): this exercise asks you to write the loop "
                   "over each row's elements yourself.",
                   "Only allocating the output (at::empty_like) is allowed; read and write the data through "
                   "data_ptr<scalar_t>() and use plain C++ arithmetic.")
    # Bad input must be refused by a TORCH_CHECK whose message says what is expected.
    x = torch.randn(6, 8, generator=g)
    bad = [
        ("a tensor on the meta device", x.to("meta"), "cpu"),
        ("a float16 tensor", x.half(), "float"),
        ("an int64 tensor", x.long(), "float"),
        ("a 1-D tensor", x[0], "2-d"),
        ("a 3-D tensor", x.view(2, 3, 8), "2-d"),
        ("a transposed (non-contiguous) tensor", x.t(), "contiguous"),
    ]
    for label, tensor, word in bad:
        try:
            op(tensor, 1e-12)
        except RuntimeError as err:
            first = str(err).splitlines()[0]
            if word not in first.lower():
                raise Hint(f"given {label}, your op raised RuntimeError, but the message does not say what is "
                           f"expected (it should mention {word!r}): {first[:160]}",
                           "A TORCH_CHECK before the computation, with a message naming the requirement, tells the "
                           "caller how to fix the call.") from None
            continue
        except Exception as err:  # noqa: BLE001 - the learner's op may raise anything
            raise Hint(f"given {label}, your op raised {type(err).__name__} ({str(err).splitlines()[0][:100]}) "
                       "instead of a RuntimeError from a TORCH_CHECK.",
                       "Check the input with TORCH_CHECK before using it (x.size(1) of a 1-D tensor is an IndexError).") from None
        raise Hint(f"your op accepted {label} without an error.",
                   "Refuse it with a TORCH_CHECK: the op reads the data as a packed 2-D float array of a CPU tensor.")
    # Right values, in the input's dtype, on several shapes.
    cases = []
    for dtype in (torch.float32, torch.float64):
        name = str(dtype).removeprefix("torch.")
        cases += [(f"a (1, 1) {name} tensor", torch.randn(1, 1, generator=g).to(dtype), 1e-12),
                  (f"a (7, 3) {name} tensor", torch.randn(7, 3, generator=g).to(dtype), 1e-12),
                  (f"a (5, 20000) {name} tensor", (torch.randn(5, 20000, generator=g) * 1e3).to(dtype), 1e-12)]
    with_zero = torch.randn(4, 16, generator=g)
    with_zero[2] = 0
    cases.append(("a (4, 16) float32 tensor whose row 2 is zeros", with_zero, 1e-12))
    cases.append(("rows with norms near eps = 1e-3 (4, 3)", torch.randn(4, 3, generator=g) * 1e-3, 1e-3))
    for label, x, eps in cases:  # on one thread: a wrong value here is the formula's
        before = x.clone()
        got = _on_threads(1, lambda x=x, eps=eps: op(x, eps))
        if not torch.equal(x, before):
            raise Hint(f"{label}: your op changed its input.", "Write the result into a new tensor (at::empty_like(x)).")
        if got.dtype != x.dtype or got.shape != x.shape:
            raise Hint(f"{label}: you returned {tuple(got.shape)} {got.dtype}; want {tuple(x.shape)} {x.dtype}.",
                       "Return a tensor like the input: at::empty_like(x).")
        if not _close(got, _reference(x, eps)):
            raise _wrong_formula_hint(label, x, eps, got)
    # On 2 threads, above the grain: at::parallel_for hands out row ranges that do not start at 0.
    split = [(cases[2][0], _unseen(cases[2][1]), 1e-12), ("a (4096, 512) float32 tensor", _unseen(torch.randn(4096, 512, generator=g)), 1e-12)]
    take_ranges = getattr(getattr(torch.ops, op._qualified_op_name.split("::")[0]), _RANGES_OP)
    for label, x, eps in split:
        take_ranges()  # forget the ranges of the runs above
        got = _on_threads(max(2, torch.get_num_threads()), lambda x=x, eps=eps: op(x, eps))
        ranges = take_ranges()
        want = _reference(x, eps)
        if not _close(got, want):
            tol = {torch.float32: (1e-5, 1e-7), torch.float64: (1e-10, 1e-14)}[x.dtype]
            wrong = (~torch.isclose(got, want, rtol=tol[0], atol=tol[1])).any(1).nonzero().flatten()
            raise Hint(f"right on one thread, but on {label}, which at::parallel_for splits between 2 threads, "
                       f"{len(wrong)} of its {x.shape[0]} rows are wrong (the first is row {int(wrong[0])}).",
                       "at::parallel_for calls your function with ranges [b, e) of the rows; each call must handle "
                       "rows b, b + 1, ..., e - 1, not 0 .. e - b - 1.")
        if x.shape[0] == 4096:
            _check_split(ranges, x.shape[0])
            _check_body_writes(op, getattr(getattr(torch.ops, op._qualified_op_name.split("::")[0]), _ONLY_ROW_OP),
                               take_ranges, x.shape[0], g)


def _check_body_writes(op, only_row, take_ranges, rows: int, g: torch.Generator) -> None:
    """Raise Hint unless the body writes exactly the rows of the range it receives.

    Runs ``op`` on a fresh (4096, 512) input on 2 threads with the body run only for the last range
    (the one holding the last row). An answer whose body handles rows ``b .. e - 1`` leaves every other
    row unwritten (no earlier run in this process saw this input, see :func:`_unseen`). One that computes
    rows in a loop beside the ``parallel_for`` (an empty body, or one that repeats the work), or whose body
    starts at row 0, returns rows outside that range right.
    """
    x = _unseen(torch.randn(rows, 512, generator=g))  # other values than every earlier run: no stale row can match
    take_ranges()
    only_row(rows - 1)
    try:
        got = _on_threads(max(2, torch.get_num_threads()), lambda: op(x, 1e-12))
    finally:
        only_row(-1)
    # In every parallel_for call, the range with the largest start holds the last row and was the one run.
    last_begin = max(b for b in take_ranges()[1::3] if b < rows)
    want = _reference(x, 1e-12)
    tol = (1e-5, 1e-7)
    right_outside = torch.isclose(got[:last_begin], want[:last_begin], rtol=tol[0], atol=tol[1]).all(1)
    if right_outside.any():
        first = int(right_outside.nonzero()[0])
        raise Hint(f"at::parallel_for was made to run your function only for rows {last_begin}..{rows - 1} of a "
                   f"(4096, 512) input, yet {int(right_outside.sum())} rows outside that range came out right "
                   f"(the first is row {first}): they are computed outside the range the function received.",
                   "The work on each row must happen inside the function at::parallel_for calls, for the rows "
                   "b .. e - 1 of the range it receives: not in a loop beside it, and not from row 0.")


def _check_split(flat: list[int], rows: int) -> None:
    """Raise Hint unless one ``at::parallel_for`` call split ``[0, rows)`` into at least two ranges that tile it.

    ``flat`` holds (call, begin, end) triples recorded by :data:`_PARALLEL_SHIM` during one run of the op on
    2 or more threads.
    """
    by_call: dict[int, list[tuple[int, int]]] = {}
    for call, begin, end in zip(flat[0::3], flat[1::3], flat[2::3], strict=True):
        by_call.setdefault(call, []).append((begin, end))
    tilings = []
    for pieces in by_call.values():
        pieces.sort()
        starts, ends = [b for b, _ in pieces], [e for _, e in pieces]
        if starts[0] == 0 and ends[-1] == rows and starts[1:] == ends[:-1]:
            tilings.append(pieces)
    if any(len(pieces) >= 2 for pieces in tilings):
        return
    if tilings:
        raise Hint(f"on 2 threads your at::parallel_for gave all {rows} rows of the (4096, 512) input to one call of "
                   f"your function, {tilings[0]}: nothing ran in parallel.",
                   "The third argument, the grain, is the fewest rows worth giving a thread: if it is as large as the "
                   "number of rows, at::parallel_for never splits them. Derive it from the row length (this chapter's "
                   "kernels give each piece about 32k elements).")
    seen = sorted({r for pieces in by_call.values() for r in pieces})
    raise Hint(f"the rows of the (4096, 512) input are not split by at::parallel_for: the ranges it handed your "
               f"function were {seen[:4]}{' ...' if len(seen) > 4 else ''}, not pieces of [0, {rows}).",
               "Call at::parallel_for over all the rows, [0, rows), and do each row's work inside the function you "
               "give it, for the rows of the range it receives.")


@exercise(
    "20.l2_normalize_rows",
    "l2_normalize_rows_source() -> str: the C++ source of at::Tensor l2_normalize_rows(const at::Tensor& x, double eps), "
    "y[r] = x[r] / max(||x[r]||_2, eps) for every row, with TORCH_CHECKs (CPU, float32 or float64, 2-D, contiguous) "
    "and the rows split over threads with at::parallel_for.",
    reference=_l2_normalize_rows_source,
    hint="Start from the C++ op of this chapter (softmax_cpu.cpp): the same checks, the same parallel_for over rows, "
         "AT_DISPATCH_FLOATING_TYPES for the two dtypes; only the per-row arithmetic differs.",
)
def _test_l2_normalize_rows(candidate) -> None:
    src = candidate() if callable(candidate) else candidate
    if not isinstance(src, str):
        raise Hint(f"return the C++ source as a Python string; you returned {type(src).__name__}.")
    _static_problems(src)
    _check_op(getattr(_compile(src), _OP))
