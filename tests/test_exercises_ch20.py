"""Exercises of chapter 20: realistic wrong answers fail with a hint (the generic
reference / stub checks run in tests/test_exercises.py)."""

from __future__ import annotations

import torch

from helpers.exercises import check, solution
from tests.exercise_support import assert_rejected

# --------------------------------------------------------------------------
# 20.online_update
# --------------------------------------------------------------------------


def test_online_update_without_rescaling_fails():
    def no_rescale(m, d, chunk):
        m_new = torch.maximum(m, chunk.max())
        if m_new == float("-inf"):
            return m, d
        return m_new, d + torch.exp(chunk - m_new).sum()

    assert_rejected("20.online_update", no_rescale, "rescale", "d * exp(m - m_new)")


def test_online_update_with_the_sign_flipped_fails():
    def flipped(m, d, chunk):
        m_new = torch.maximum(m, chunk.max())
        if m_new == float("-inf"):
            return m, d
        return m_new, d * torch.exp(m_new - m) + torch.exp(chunk - m_new).sum()

    assert_rejected("20.online_update", flipped, "sign")


def test_online_update_without_the_minus_inf_guard_fails():
    def unguarded(m, d, chunk):
        m_new = torch.maximum(m, chunk.max())
        return m_new, d * torch.exp(m - m_new) + torch.exp(chunk - m_new).sum()

    assert_rejected("20.online_update", unguarded, "NaN", "-inf")


def test_online_update_keeping_only_the_chunk_max_fails():
    def chunk_max(m, d, chunk):
        m_new = chunk.max()
        if m_new == float("-inf"):
            return m, d
        return m_new, d * torch.exp(m - m_new) + torch.exp(chunk - m_new).sum()

    assert_rejected("20.online_update", chunk_max, "max(m, max(chunk))")


def test_online_update_returning_floats_is_accepted():
    ref = solution("20.online_update")

    def as_floats(m, d, chunk):
        m_new, d_new = ref(m, d, chunk)
        return float(m_new), float(d_new)

    assert check("20.online_update", as_floats, show=False).passed


# --------------------------------------------------------------------------
# 20.softmax_gbps
# --------------------------------------------------------------------------


def test_gbps_counting_only_reads_fails():
    def reads_only(rows, cols, seconds, dtype=torch.float32):
        return rows * cols * torch.empty((), dtype=dtype).element_size() / seconds / 1e9

    result = assert_rejected("20.softmax_gbps", reads_only, "half the answer", "misses half")
    assert "write" not in result.message.split(" Hint:")[0], "tier 1 should not name the fix"


def test_gbps_in_gibibytes_fails():
    def gib(rows, cols, seconds, dtype=torch.float32):
        return 2 * rows * cols * torch.empty((), dtype=dtype).element_size() / seconds / 2**30

    assert_rejected("20.softmax_gbps", gib, "0.931x the answer")


def test_gbps_ignoring_the_dtype_fails():
    def four_bytes(rows, cols, seconds, dtype=torch.float32):
        return 2 * rows * cols * 4 / seconds / 1e9

    result = assert_rejected("20.softmax_gbps", four_bytes, "4 bytes", "bfloat16")
    assert "element_size" not in result.message.split(" Hint:")[0]  # tier 1 says what is wrong, not the code that fixes it


def test_gbps_counting_four_passes_fails_without_the_formula():
    def four_passes(rows, cols, seconds, dtype=torch.float32):  # read for max, read for sum, read + write
        return 4 * rows * cols * dtype.itemsize / seconds / 1e9

    result = assert_rejected("20.softmax_gbps", four_passes, "4 passes", "cannot avoid")
    assert "itemsize /" not in result.message and "2 * rows" not in result.message


def test_gbps_fuller_hint_names_element_size():
    from helpers.exercises import hint

    def four_bytes(rows, cols, seconds, dtype=torch.float32):
        return 2 * rows * cols * 4 / seconds / 1e9

    assert check("20.softmax_gbps", four_bytes, show=False).status == "failed"
    assert "element_size" in hint("20.softmax_gbps", show=False)


def test_gbps_in_bits_fails():
    def bits(rows, cols, seconds, dtype=torch.float32):
        return 2 * rows * cols * torch.empty((), dtype=dtype).element_size() * 8 / seconds / 1e9

    assert_rejected("20.softmax_gbps", bits, "bits")


def test_gbps_treating_seconds_as_milliseconds_fails():
    def ms(rows, cols, seconds, dtype=torch.float32):
        return 2 * rows * cols * torch.empty((), dtype=dtype).element_size() / (seconds / 1e3) / 1e9

    assert_rejected("20.softmax_gbps", ms, "seconds")


# --------------------------------------------------------------------------
# 20.l2_normalize_rows (C++, compiled by the checker)
#
# Compiles are what these tests cost, so there are only two here (about 15-30 s each on 2 cores;
# the reference's compile is shared with tests/test_exercises.py in the same process and cached on
# disk): one source with a compile error, and ONE source holding every wrong answer that needs to
# run, each as its own function, checked with the checker's runtime part (ch20._check_op). Wrong
# answers the checker refuses before compiling go through check() and compile nothing.
# --------------------------------------------------------------------------

import pytest  # noqa: E402

from helpers import kernels  # noqa: E402
from helpers.exercises import Hint, ch20  # noqa: E402

needs_compiler = pytest.mark.skipif(kernels.shutil.which("c++") is None, reason="needs a C++ compiler")
REF = ch20._REFERENCE_CPP


def _replace(src: str, old: str, new: str) -> str:
    assert src.count(old) == 1, f"the reference no longer contains {old!r}"
    return src.replace(old, new)


def test_answer_without_parallel_for_is_refused_before_compiling():
    serial = _replace(REF, "at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {",
                      "[&](int64_t begin, int64_t end) {")
    assert_rejected("20.l2_normalize_rows", lambda: serial, "at::parallel_for")
    in_a_comment = serial.replace("// accumulate in double", "// at::parallel_for(...) would go here; accumulate in double")
    assert_rejected("20.l2_normalize_rows", lambda: in_a_comment, "at::parallel_for")


def test_answer_calling_an_aten_function_is_refused_before_compiling():
    shortcut = REF.split("at::Tensor l2_normalize_rows")[0] + (
        "at::Tensor l2_normalize_rows(const at::Tensor& x, double eps) {\n"
        '  TORCH_CHECK(x.dim() == 2, "expected a 2-D tensor");\n'
        "  at::parallel_for(0, 1, 1, [](int64_t, int64_t) {});\n"
        "  return x / at::linalg_vector_norm(x, 2, {1}, true).clamp_min(eps);\n}\n")
    assert_rejected("20.l2_normalize_rows", lambda: shortcut, "at::linalg_vector_norm", "loop")


def test_answer_without_any_torch_check_is_refused():
    unchecked = "\n".join(line for line in REF.splitlines() if "TORCH_CHECK" not in line and '"l2_normalize_rows: expected' not in line)
    assert_rejected("20.l2_normalize_rows", lambda: unchecked, "TORCH_CHECK")


def test_answer_with_its_own_binding_block_is_refused():
    assert_rejected("20.l2_normalize_rows", lambda: REF + "\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}\n", "registers")


def test_answer_that_is_not_a_string_is_refused():
    assert_rejected("20.l2_normalize_rows", lambda: None, "string")


@needs_compiler
def test_compile_error_is_a_short_hint_with_the_learners_line_number():
    # The includes forgotten: the first error comes before any heavy header is parsed, and the checker's
    # -Wfatal-errors stops the compiler there, so this compile takes a second or two.
    no_includes = "\n".join(line for line in REF.splitlines() if not line.startswith("#include"))
    line = no_includes.splitlines().index("at::Tensor l2_normalize_rows(const at::Tensor& x, double eps) {") + 1
    result = assert_rejected("20.l2_normalize_rows", lambda: no_includes, "does not compile", f"line {line}", "does not name a type")
    assert len(result.message) < 600 and "-isystem" not in result.message, "no compiler command line dump"


@needs_compiler
def test_a_source_given_as_a_plain_string_is_accepted():
    assert check("20.l2_normalize_rows", REF, show=False).passed  # same source as the reference: no new compile


PARALLEL_FOR = "at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {"
WRONG = {
    # name: (how the reference is changed: (old, new) pairs, words the hint must contain)
    "no_contiguity_check": ([("  TORCH_CHECK(x.is_contiguous(),", "  if (false) TORCH_CHECK(x.is_contiguous(),")], ("accepted", "transposed")),
    "no_dtype_check": ([("  TORCH_CHECK(x.scalar_type() == at::kFloat", "  if (false) TORCH_CHECK(x.scalar_type() == at::kFloat")], ("float16", "float")),
    "no_sqrt": ([("std::max(std::sqrt(sumsq), eps)", "std::max(sumsq, eps)")], ("square root",)),
    "norm_plus_eps": ([("std::max(std::sqrt(sumsq), eps)", "(std::sqrt(sumsq) + eps)")], ("norm + eps",)),
    "range_from_zero": ([("for (int64_t r = begin; r < end; ++r)", "for (int64_t r = 0; r < end - begin; ++r)")], ("parallel_for", "2 threads", "rows b, b + 1")),
    # Two dodges of the parallel_for requirement that give the right values: a serial loop beside an empty
    # parallel_for (the name is in the source, nothing is split), and a grain as large as the range (serial).
    "serial_beside_an_empty_parallel_for": (
        [(PARALLEL_FOR, "at::parallel_for(0, 1, 1, [](int64_t, int64_t) {});\n    const int64_t begin = 0, end = rows;\n    {"),
         ("    });\n  });\n  return y;", "    }\n  });\n  return y;")],
        ("not split", "[(0, 1)]", "[0, 4096)")),
    # The same dodge with a parallel_for that tiles the rows (the recorded ranges look right) but does nothing.
    "serial_beside_a_tiling_empty_parallel_for": (
        [(PARALLEL_FOR, "at::parallel_for(0, rows, grain, [](int64_t, int64_t) {});\n    const int64_t begin = 0, end = rows;\n    {"),
         ("    });\n  });\n  return y;", "    }\n  });\n  return y;")],
        ("only for rows", "outside the range the function received")),
    # A body that starts at row 0 instead of begin: every range redoes the rows before it (right values).
    "loop_from_row_zero_to_end": ([("for (int64_t r = begin; r < end; ++r)", "for (int64_t r = 0; r < end; ++r)")],
                                  ("only for rows", "outside the range the function received")),
    "grain_as_large_as_the_rows": ([(PARALLEL_FOR, PARALLEL_FOR.replace("grain,", "rows,"))], ("one call", "[(0, 4096)]", "grain")),
}
SHORTCUT = """
at::Tensor tensor_method_shortcut(const at::Tensor& x, double eps) {
  TORCH_CHECK(x.dim() == 2, "expected a 2-D tensor");
  at::parallel_for(0, 1, 1, [](int64_t, int64_t) {});
  return x.div(x.norm(2, {1}, true).clamp_min(eps));  // Tensor methods: no at:: name for a source check to see
}
"""


@pytest.fixture(scope="module")
def wrong_ops():
    """Every wrong answer that must run, as functions of one source: one compile for all of them."""
    parts = [REF]
    for name, (changes, _words) in WRONG.items():
        body = REF.split("// y[r] = x[r]")[1].split("\n", 1)[1]  # the function, without the includes
        for old, new in changes:
            body = _replace(body, old, new)
        parts.append(body.replace("at::Tensor l2_normalize_rows(", f"at::Tensor {name}(", 1))
    parts.append(SHORTCUT)
    return ch20._compile("\n".join(parts), ops=("l2_normalize_rows", *WRONG, "tensor_method_shortcut"))


@needs_compiler
@pytest.mark.parametrize("name", list(WRONG))
def test_wrong_cpp_answer_fails_with_a_hint(wrong_ops, name):
    with pytest.raises(Hint) as caught:
        ch20._check_op(getattr(wrong_ops, name))
    text = f"{caught.value.what} {caught.value.more}"
    for word in WRONG[name][1]:
        assert word in text, f"hint for {name} should mention {word!r}: {text}"


@needs_compiler
def test_tensor_method_shortcut_is_seen_by_the_dispatch_mode(wrong_ops):
    with pytest.raises(Hint, match=r"aten\.(linalg_vector_norm|norm).*loop"):
        ch20._check_op(wrong_ops.tensor_method_shortcut)


@needs_compiler
def test_the_reference_inside_the_grouped_source_passes(wrong_ops):
    ch20._check_op(wrong_ops.l2_normalize_rows)  # the runtime checks alone accept a right answer
