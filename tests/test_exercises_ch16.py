"""Exercises of chapter 16: realistic wrong answers fail with a hint (the generic checks
live in tests/test_exercises.py)."""

from __future__ import annotations

import math
import time

import torch

from helpers.exercises import check
from tests.exercise_support import assert_rejected

# --------------------------------------------------------------------------
# 16.no_graph_break
# --------------------------------------------------------------------------


def test_no_graph_break_original_with_item_fails():
    def original(x):
        top = x.max().item()
        if top > 0:
            return x / top
        return x - top

    result = assert_rejected("16.no_graph_break", original, "graph break")
    assert "torch.where(" not in result.message, "tier 1 names the mistake, not the fix"


def test_no_graph_break_tensor_if_fails():
    def tensor_if(x):
        top = x.max()
        if top > 0:  # still a data-dependent branch
            return x / top
        return x - top

    assert_rejected("16.no_graph_break", tensor_if, "graph break")


def test_no_graph_break_always_dividing_fails():
    def always_divide(x):
        return x / x.max()

    assert_rejected("16.no_graph_break", always_divide, "subtract")


def test_no_graph_break_branches_swapped_fails():
    def swapped(x):
        top = x.max()
        return torch.where(top > 0, x - top, x / top)

    assert_rejected("16.no_graph_break", swapped, "divide")


def test_no_graph_break_dividing_by_the_largest_magnitude_fails():
    """x / max |x| equals x / max(x) while no negative value is larger in magnitude: [-5, 1, 0.5] tells them apart."""
    def by_abs_max(x):
        top = x.abs().max()
        safe = torch.where(top > 0, top, torch.ones_like(top))
        return torch.where(x.max() > 0, x / safe, x - x.max())

    assert_rejected("16.no_graph_break", by_abs_max, "[-5.0, 1.0, 0.5]", "largest absolute value")


def test_no_graph_break_strict_comparison_at_zero_fails():
    def nonnegative(x):
        top = x.max()
        return torch.where(top >= 0, x / top, x - top)

    assert_rejected("16.no_graph_break", nonnegative, "maximum is 0")


def test_no_graph_break_unguarded_where_has_nan_gradient_fails():
    def unguarded(x):  # right values, but x / 0 in the unused branch: NaN gradients when the maximum is 0
        top = x.max()
        return torch.where(top > 0, x / top, x - top)

    assert_rejected("16.no_graph_break", unguarded, "gradient")


def test_no_graph_break_reference_has_finite_gradient_at_zero_maximum():
    from helpers.exercises.ch16 import _normalise_positive_no_break

    for values in ([-2.0, 0.0, -1.0], [0.5, 2.0, -1.0], [-3.0, -1.0]):
        x = torch.tensor(values, requires_grad=True)
        _normalise_positive_no_break(x).sum().backward()
        assert torch.isfinite(x.grad).all(), (values, x.grad)


def _original(x):
    top = x.max().item()
    if top > 0:
        return x / top
    return x - top


def test_no_graph_break_allow_in_graph_wrapper_fails():
    def wrapped(x):  # hides the original from Dynamo instead of removing its breaks
        return torch.compiler.allow_in_graph(_original)(x)

    assert_rejected("16.no_graph_break", wrapped, "allow_in_graph")


def test_no_graph_break_dynamo_allow_in_graph_wrapper_fails():
    def wrapped(x):
        return torch._dynamo.allow_in_graph(_original)(x)

    assert_rejected("16.no_graph_break", wrapped, "allow_in_graph")


def test_no_graph_break_allow_in_graph_at_definition_fails():
    registered = torch.compiler.allow_in_graph(_original)  # wrapped once, outside the checked call

    assert_rejected("16.no_graph_break", lambda x: registered(x))
    assert_rejected("16.no_graph_break", registered)


def test_no_graph_break_clamp_variant_is_accepted():
    def clamped(x):
        top = x.max()
        positive = top > 0
        return torch.where(positive, x / torch.where(positive, top, 1.0), x - top)

    assert check("16.no_graph_break", clamped, show=False).passed


# --------------------------------------------------------------------------
# 16.break_even_calls
# --------------------------------------------------------------------------


def test_break_even_rounding_down_fails():
    def floor(compile_s, eager_s, compiled_s):
        saving = eager_s - compiled_s
        return None if saving <= 0 else max(1, math.floor(compile_s / saving))

    assert_rejected("16.break_even_calls", floor, "one call too few")


def test_break_even_floor_plus_one_fails():
    def floor_plus_one(compile_s, eager_s, compiled_s):
        saving = eager_s - compiled_s
        return None if saving <= 0 else math.floor(compile_s / saving) + 1

    assert_rejected("16.break_even_calls", floor_plus_one, "one call too many")


def test_break_even_ignoring_compiled_call_time_fails():
    def no_compiled_time(compile_s, eager_s, compiled_s):
        return None if eager_s <= compiled_s else max(1, math.ceil(compile_s / eager_s))

    assert_rejected("16.break_even_calls", no_compiled_time, "compiled calls cost time too")


def test_break_even_dividing_by_zero_fails():
    def unguarded(compile_s, eager_s, compiled_s):
        return max(1, math.ceil(compile_s / (eager_s - compiled_s)))

    assert_rejected("16.break_even_calls", unguarded, "None")


def test_break_even_infinity_for_never_fails():
    def infinite(compile_s, eager_s, compiled_s):
        saving = eager_s - compiled_s
        return math.inf if saving <= 0 else max(1, math.ceil(compile_s / saving))

    assert_rejected("16.break_even_calls", infinite, "None")


def test_break_even_zero_for_free_compile_fails():
    def zero(compile_s, eager_s, compiled_s):
        saving = eager_s - compiled_s
        return None if saving <= 0 else math.ceil(compile_s / saving)

    assert_rejected("16.break_even_calls", zero, "at least 1")


def test_break_even_loop_from_the_estimate_is_accepted():
    """A loop that steps from the rounded-up quotient to the exact boundary: a closed form, checked."""
    def loop(compile_s, eager_s, compiled_s):
        if compiled_s >= eager_s:
            return 1 if compile_s <= 0 else None
        n = max(1, math.ceil(compile_s / (eager_s - compiled_s)) - 2)
        while compile_s + n * compiled_s > n * eager_s:
            n += 1
        return n

    assert check("16.break_even_calls", loop, show=False).passed


def test_break_even_bounded_count_up_fails():
    """Counting n = 1, 2, ... up to a limit misses a break-even of 3 * 2**24 calls (issue 17)."""
    def bounded(compile_s, eager_s, compiled_s):
        for n in range(1, 10**6):
            if compile_s + n * compiled_s <= n * eager_s:
                return n
        return None

    assert_rejected("16.break_even_calls", bounded, "50331648 calls", "returned None")


def test_break_even_slow_right_answer_fails(monkeypatch):
    """A right count that takes longer than the checker allows (a search up to it): the limit lowered, not waited for."""
    from helpers.exercises import ch16

    def slow(compile_s, eager_s, compiled_s):
        if (compile_s, eager_s, compiled_s) == (3.0, 1.0, 1 - 2**-24):  # tens of millions of calls
            time.sleep(0.05)
        return ch16._break_even_calls(compile_s, eager_s, compiled_s)

    monkeypatch.setattr(ch16, "_SLOW_S", 0.02)
    result = assert_rejected("16.break_even_calls", slow, "is right, but it took", "50,331,648 calls")
    assert "math.ceil" not in result.message.split(" Hint: ")[0], "tier 1 names the problem, not the fix"


def test_break_even_none_when_no_faster_even_with_a_free_compile_fails():
    """(0.0, 0.01, 0.01): 0 + n * 0.01 <= n * 0.01 holds at n = 1, so the answer is 1, not None."""
    def strict(compile_s, eager_s, compiled_s):
        if eager_s <= compiled_s:
            return None
        return max(1, math.ceil(compile_s / (eager_s - compiled_s)))

    assert_rejected("16.break_even_calls", strict, "(0.0, 0.01, 0.01)", "compiling was free", "expected 1")


def test_break_even_right_count_as_a_float_fails():
    """1.0 * ceil(...) has the right value, but the task asks for an int (a count of calls)."""
    def as_float(compile_s, eager_s, compiled_s):
        if compiled_s >= eager_s:
            return None
        return max(1.0, math.ceil(compile_s / (eager_s - compiled_s)) * 1.0)

    assert_rejected("16.break_even_calls", as_float, "should be a Python int, got float")


def test_no_graph_break_disable_wrapper_fails():
    def disabled(x):  # hides the original from Dynamo: explain then finds no graph (and -1 breaks)
        return torch._dynamo.disable(_original)(x)

    def compiler_disabled(x):
        return torch.compiler.disable(_original)(x)

    for candidate in (disabled, compiler_disabled):
        result = assert_rejected("16.no_graph_break", candidate, "no graph at all", "graph_count 0",
                                 "torch.compiler.disable")
        assert "-1 graph break(s)" not in result.message, result.message


def test_no_graph_break_disabled_part_names_the_skip():
    """Only the original disabled, with traced work around it: a break whose reason names the disabled call."""
    def partly(x):
        return torch.compiler.disable(_original)(x * 1) + 0

    assert_rejected("16.no_graph_break", partly, "graph break", "disable")


def test_no_graph_break_disabled_at_definition_fails():
    skipped = torch.compiler.disable(_original)  # wrapped once, outside the checked call

    result = assert_rejected("16.no_graph_break", lambda x: skipped(x), "no graph at all", "skipped your function")
    assert "-1 graph break" not in result.message, result.message
