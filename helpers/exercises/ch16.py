"""Exercises of chapter 16 (torch.compile)."""

from __future__ import annotations

import io
import math
import time
from contextlib import redirect_stderr

import torch

from . import Hint, exercise, expect_type

# --------------------------------------------------------------------------
# 16.no_graph_break
# --------------------------------------------------------------------------


def _normalise_positive(x: torch.Tensor) -> torch.Tensor:
    """The chapter's function with graph breaks: ``x / max(x)`` if the maximum is positive, else ``x - max(x)``."""
    top = x.max().item()
    if top > 0:
        return x / top
    return x - top


def _normalise_positive_no_break(x: torch.Tensor) -> torch.Tensor:
    """The same values as :func:`_normalise_positive` for any float tensor ``x``, in one graph.

    Both branches are computed and ``torch.where`` picks one, on a 0-d tensor
    condition, so Dynamo never needs the value of ``x`` to trace it. The divisor
    is replaced by 1 where the maximum is not positive: ``torch.where`` evaluates
    both branches, and ``x / 0`` in the unused one would put NaN into the gradient
    (its backward multiplies a zero gradient by an infinite derivative).
    """
    top = x.max()
    positive = top > 0
    return torch.where(positive, x / torch.where(positive, top, torch.ones_like(top)), x - top)


def _explain(candidate, x: torch.Tensor):
    import torch._dynamo

    with redirect_stderr(io.StringIO()):  # Dynamo logs a warning for .item(); the hint says it instead
        return torch._dynamo.explain(candidate)(x)


@exercise(
    "16.no_graph_break",
    "write normalise_positive_no_break(x): the same values as normalise_positive(x) (x / max if the maximum "
    "is positive, x - max otherwise) for any float tensor, in one graph with no graph breaks "
    "(torch._dynamo.explain reports graph_break_count == 0), and with a finite gradient with respect to x "
    "(also where the maximum is 0).",
    reference=_normalise_positive_no_break,
    # torch.compiler.disable is not a shortcut: explain then finds no graph (or a break "Skip calling
    # torch.compiler.disable()d function"), and the check says so in words that fit
    shortcuts=("torch.compiler.allow_in_graph", "torch._dynamo.allow_in_graph"),
    goal="the break-free rewrite",
    hint="Dynamo breaks the graph wherever Python needs a value from inside a tensor (.item(), an if on a "
         "tensor), so keep the maximum a tensor, compute both results, and let a tensor operation choose "
         "between them, as clip_then_cos_no_break does in 'Graph breaks and fullgraph=True'. Both results "
         "are computed and differentiated, so make the division safe where the maximum is not positive, or "
         "its gradient turns to NaN.",
)
def _test_no_graph_break(candidate) -> None:
    g = torch.Generator().manual_seed(16)
    cases = {
        "a vector with a positive maximum": torch.randn(8, generator=g).abs() + 0.1,
        "a matrix with a positive maximum": torch.randn(4, 5, generator=g),
        "a vector of negative numbers": -torch.rand(6, generator=g) - 0.5,
        "a matrix of negative numbers": -torch.rand(3, 4, generator=g) - 0.1,
        "a vector whose maximum is 0": torch.tensor([-2.0, 0.0, -1.0]),
        # positive maximum 1, but a larger magnitude below it: the divisor is the maximum, not max |x|
        "a vector with a positive maximum and a larger negative value": torch.tensor([-5.0, 1.0, 0.5]),
    }
    cases["a matrix with a positive maximum"][1, 2] = 3.0
    for label, x in cases.items():
        want = _normalise_positive(x.clone())
        got = candidate(x.clone())
        if not isinstance(got, torch.Tensor):
            raise AssertionError(f"return a tensor; for {label} you returned {type(got).__name__}")
        if got.shape != want.shape:
            raise AssertionError(f"for {label} of shape {tuple(x.shape)} the result should keep that shape, got {tuple(got.shape)}")
        if not torch.allclose(got, want, atol=1e-6):
            if x.max() > 0 and torch.allclose(got, x - x.max()):
                raise AssertionError(f"for {label} you subtracted the maximum; when it is positive, divide by it")
            if x.max() > 0 and x.abs().max() > x.max() and torch.allclose(got, x / x.abs().max()):
                raise AssertionError(
                    f"for {label} ({x.tolist()}) you divided by the largest absolute value, {x.abs().max().item():g}; "
                    f"expected {want.tolist()}, got {[round(v, 4) for v in got.tolist()]} (normalise_positive divides by the "
                    f"maximum, {x.max().item():g})"
                )
            if x.max() <= 0 and torch.allclose(got, x / x.max()):
                raise AssertionError(
                    f"for {label} you divided by the maximum; when it is not positive (negative or 0), subtract it"
                )
            raise AssertionError(f"for {label} the values differ from normalise_positive: expected {want}, got {got}")
    x = torch.tensor([-2.0, 0.0, -1.0], requires_grad=True)  # the maximum is 0: only x - top is used
    candidate(x).sum().backward()
    if x.grad is None or not torch.isfinite(x.grad).all():
        raise Hint(
            f"for a vector whose maximum is 0 the values are right, but the gradient with respect to x is {x.grad}: "
            "the branch that torch.where does not pick is still computed, and differentiated",
            "x / 0 gives inf or NaN in the unused branch, and its backward multiplies the zero gradient that "
            "torch.where sends there by an infinite derivative: 0 * inf is NaN. Make the divisor safe where the "
            "maximum is not positive, so that the unused branch stays finite",
        )
    for label, x in list(cases.items())[:3]:
        explanation = _explain(candidate, x)
        if explanation.graph_count == 0:  # Dynamo skipped the function (graph_break_count is then -1)
            raise Hint(
                f"torch._dynamo.explain traced no graph at all for {label} (graph_count 0, graph_break_count "
                f"{explanation.graph_break_count}): Dynamo skipped your function instead of compiling it, as it does "
                "for a function wrapped in torch.compiler.disable. The task asks for one graph that holds the work.",
                "A disabled function runs eagerly, with the original's breaks still in it; the exercise is to rewrite "
                "the function so that Dynamo can trace all of it: keep the maximum a tensor and choose between the two "
                "results with a tensor operation",
            )
        if explanation.graph_break_count:
            reasons = "; ".join(r.reason.splitlines()[0] for r in explanation.break_reasons)
            raise Hint(
                f"torch._dynamo.explain finds {explanation.graph_break_count} graph break(s) for {label}: {reasons}",
                "Dynamo breaks the graph wherever Python needs the value inside a tensor: .item(), or an if on a "
                "tensor. Keep the maximum a tensor and make the choice between the two results a tensor operation "
                "too, as clip_then_cos_no_break does in the chapter",
            )
        if explanation.graph_count != 1:
            raise AssertionError(f"expected exactly one graph, torch._dynamo.explain found {explanation.graph_count}")


# --------------------------------------------------------------------------
# 16.break_even_calls
# --------------------------------------------------------------------------


def _break_even_calls(compile_s: float, eager_s: float, compiled_s: float) -> int | None:
    """Calls after which compiling has paid for itself.

    Args:
        compile_s: seconds spent compiling (once), >= 0.
        eager_s: seconds per call of the eager function, > 0.
        compiled_s: seconds per call of the compiled function, > 0.

    Returns:
        The smallest int ``n >= 1`` with ``compile_s + n * compiled_s <= n * eager_s``,
        that is ``ceil(compile_s / (eager_s - compiled_s))`` but at least 1; or
        ``None`` when the compiled function is not faster per call (it never catches up,
        unless compiling was free).
    """
    saving = eager_s - compiled_s
    if saving <= 0:
        return 1 if compile_s <= 0 and saving == 0 else None
    n = max(1, math.ceil(compile_s / saving))
    # guard against rounding in the division: step to the exact boundary
    while n > 1 and compile_s + (n - 1) * compiled_s <= (n - 1) * eager_s:
        n -= 1
    while compile_s + n * compiled_s > n * eager_s:
        n += 1
    return n


#: Seconds a single answer may take: a closed form takes microseconds; counting up to 5e7 calls takes seconds.
_SLOW_S = 1.0


def _as_calls(value, args):
    """The answer itself: a Python int or None (a float such as 4.0 is not a count of calls)."""
    if value is not None:
        expect_type(value, int, f"for {args} your count of calls ({value!r:.40})")
    return value


@exercise(
    "16.break_even_calls",
    "write break_even_calls(compile_s, eager_s, compiled_s): the smallest int n >= 1 (a Python int) with "
    "compile_s + n * compiled_s <= n * eager_s, or None when that never happens; n can run into the tens of "
    "millions, and the answer must come in well under a second.",
    reference=_break_even_calls,
    hint="Every call saves the difference between the eager and the compiled time, and the compile time "
         "has to be paid back out of those savings. Round the number of calls up, never below 1, count "
         "equality as paid off (float division can land just beside a whole number, so check the "
         "inequality itself), and when a call saves nothing or costs extra a positive compile time is "
         "never paid back: return None then, before dividing.",
)
def _test_break_even_calls(candidate) -> None:
    cases = [  # (compile_s, eager_s, compiled_s)
        (10.0, 0.050, 0.012),  # the chapter's chain, roughly
        (7.5, 0.004, 0.00125),  # 2727.3 -> 2728
        (2.0, 1.0, 0.5),  # exactly 4 calls (binary fractions: no rounding)
        (3.0, 0.5, 0.25),  # exactly 12 calls
        (0.3, 1.0, 0.2),  # pays off at the first call
        (0.0, 0.02, 0.01),  # free compile: 1 call
        (11.0, 0.015, 0.0147),  # tiny gain: many calls
        (3.0, 1.0, 1 - 2**-24),  # saves 2**-24 s a call: exactly 3 * 2**24 = 50331648 calls (binary fractions)
    ]
    never = [(18.0, 0.015, 0.016), (5.0, 0.01, 0.01)]  # slower, or no faster, per call
    # free compile, no faster per call: 0 + n * 0.01 <= n * 0.01 already at n = 1 (after `never`, whose
    # messages say more about a division by zero or an inf)
    free = (0.0, 0.01, 0.01)
    for args in cases:
        want = _break_even_calls(*args)
        start = time.perf_counter()
        got = _as_calls(candidate(*args), args)
        took = time.perf_counter() - start
        compile_s, eager_s, compiled_s = args
        if got == want and took > _SLOW_S:
            raise Hint(
                f"for {args} your answer {got} is right, but it took {took:.1f} s: the time your function takes "
                f"grows with the answer (here {want:,} calls), and the task asks for the count, not a search for it",
                "the inequality compile_s + n * compiled_s <= n * eager_s is linear in n: solve it for n, round up "
                "with math.ceil, and check the boundary with the inequality itself",
            )
        if got == want:
            continue
        if got is None:
            raise AssertionError(f"for {args} compiling does pay off, after {want} calls; you returned None")
        if got == 0:
            raise AssertionError(f"for {args} you returned 0; the answer is at least 1 call (n >= 1)")
        if got == want - 1:
            raise AssertionError(
                f"for {args} you returned {got}, one call too few: after {got} calls compiled has cost "
                f"{compile_s + got * compiled_s:.4g} s and eager {got * eager_s:.4g} s. Round up (math.ceil), "
                "not down, and include the boundary where both are equal"
            )
        if got == want + 1:
            raise AssertionError(
                f"for {args} you returned {got}, one call too many: at {want} calls the totals are "
                f"{compile_s + want * compiled_s:.4g} s (compiled) and {want * eager_s:.4g} s (eager): '<=' counts as paid off"
            )
        if compiled_s > 0 and got == math.ceil(compile_s / eager_s):
            raise AssertionError(
                f"for {args} you returned {got} = compile_s / eager_s: the compiled calls cost time too; "
                "each call saves eager_s - compiled_s, not eager_s"
            )
        raise AssertionError(f"for {args} the break-even is {want} calls; you returned {got}")
    for args in never:
        try:
            got = candidate(*args)
        except ZeroDivisionError as exc:
            raise AssertionError(
                f"for {args} (compiled not faster per call) your function divided by zero; return None when "
                "eager_s - compiled_s <= 0"
            ) from exc
        if got is not None:  # inf, 0, a count: whatever its type, the answer here is None
            raise AssertionError(
                f"for {args} the compiled function is not faster per call, so it never catches up: return None, "
                f"not {got}"
            )
    try:
        got = candidate(*free)
    except ZeroDivisionError as exc:
        raise AssertionError(
            f"for {free} your function divided by zero; compiling was free (compile_s = 0), so "
            f"0.0 + n * 0.01 <= n * 0.01 holds from the first call: expected 1"
        ) from exc
    if got is None:
        raise AssertionError(
            f"for {free} you returned None, but compiling was free (compile_s = 0), so 0.0 + n * 0.01 <= n * 0.01 "
            "holds from the first call: expected 1"
        )
    if _as_calls(got, free) != 1:
        raise AssertionError(f"for {free} the break-even is 1 call (compiling was free); you returned {got}")
