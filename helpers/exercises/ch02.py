"""Chapter 02 (Autograd): exercise checkers and reference solutions.

Exercises:

- ``02.derivative``: ``derivative(f, x) -> float``, f'(x) by autograd.
- ``02.second_derivative``: ``second_derivative(f, x) -> float``, f''(x) by
  differentiating the first derivative (``create_graph=True``).
- ``02.jacobian``: ``jacobian(f, x) -> Tensor [m, n]``, one vector-Jacobian
  product per output.

Each checker raises a :class:`~helpers.exercises.Hint` for a wrong answer: the
case, the expected and the actual value first, the fix on a second failure (see
:func:`helpers.exercises.check`). The test functions ``f`` it passes to the
candidate insist on being called at the point itself, on a tensor that requires
grad and whose values can be read, so a finite-difference answer, which
evaluates f at x + h and x - h, is refused rather than passed because it happens
to be accurate enough, and so is one that hides its evaluations inside
``torch.func.vmap``. Library functions that compute the asked-for derivative
(``torch.autograd.functional.hessian``, ``torch.func.jacrev``, forward mode, ...)
are named as shortcuts and refused (:mod:`helpers.exercises.guards`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from . import Hint, Shortcut, exercise, expect_type

__all__ = ["derivative", "jacobian", "second_derivative"]


# --------------------------------------------------------------------------
# Reference solutions
# --------------------------------------------------------------------------


def derivative(f: Callable[[torch.Tensor], torch.Tensor], x: float) -> float:
    """f'(x) computed by autograd.

    Args:
        f: maps a 0-d float tensor to a 0-d tensor, using torch operations.
        x: the point, a Python float.

    Returns:
        The derivative as a Python float (computed in float64).
    """
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(f(t), t)
    return grad.item()


def second_derivative(f: Callable[[torch.Tensor], torch.Tensor], x: float) -> float:
    """f''(x) computed by differentiating autograd's first derivative.

    The first ``torch.autograd.grad`` call needs ``create_graph=True`` so that
    the derivative it returns is itself part of a graph that can be
    differentiated again.

    Returns:
        The second derivative as a Python float (computed in float64).
    """
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    (first,) = torch.autograd.grad(f(t), t, create_graph=True)
    (second,) = torch.autograd.grad(first, t)
    return second.item()


def jacobian(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """The Jacobian of ``f`` at ``x``, one row per output, from vector-Jacobian products.

    Args:
        f: maps a 1-d float tensor ``[n]`` to a 1-d tensor ``[m]``.
        x: the point, a 1-d float tensor ``[n]`` (it need not require grad).

    Returns:
        ``J`` with shape ``[m, n]`` and ``J[i, j] = d f(x)[i] / d x[j]``.
        Row ``i`` is the vector-Jacobian product ``e_i^T J``; ``torch.autograd.grad``
        returns a new tensor for each row, so the rows never alias one another.
    """
    x = x.detach().requires_grad_(True)
    y = f(x)
    rows = []
    for i in range(y.shape[0]):
        v = torch.zeros_like(y)
        v[i] = 1.0
        (row,) = torch.autograd.grad(y, x, grad_outputs=v, retain_graph=True)
        rows.append(row)
    return torch.stack(rows)


# --------------------------------------------------------------------------
# Checkers
# --------------------------------------------------------------------------


def _read_point(t: torch.Tensor) -> tuple[float, ...] | None:
    """The values of ``t`` as float64 numbers, or None when they cannot be read (e.g. inside torch.func.vmap)."""
    try:
        return tuple(t.detach().to(torch.float64).reshape(-1).tolist())
    except Exception:  # a batched or otherwise wrapped tensor: the caller refuses it
        return None


def _roundings(point) -> set[tuple[float, ...]]:
    """``point`` as it reads after a round trip through each float dtype (x in float32 is not x in float64)."""
    return {
        tuple(torch.tensor(point, dtype=dtype).to(torch.float64).reshape(-1).tolist())
        for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16)
    }


def _show(values: tuple[float, ...]) -> str:
    return f"{values[0]!r}" if len(values) == 1 else str(list(values))


_AUTOGRAD_AT_X = (
    "Make x a tensor with requires_grad=True (for a given tensor: x.detach().requires_grad_(True)), call f "
    "once on it, and let autograd compute the exact derivative: backward() or torch.autograd.grad."
)


class _Watched:
    """Wraps a test function ``f`` and refuses calls that are not autograd at ``point``.

    Autograd needs ``f`` evaluated at the point itself; finite differences
    evaluate it at ``x + h`` and ``x - h`` and only approximate the derivative.
    Each call's input must therefore be a readable tensor (not a batched one
    inside ``vmap``, whose values cannot be checked), equal ``point`` in some
    float dtype and require grad. The first problem is raised at once as a
    :class:`Hint` and also kept in ``problem``, in case the learner's code
    swallows the error.
    """

    def __init__(self, f: Callable, label: str, point) -> None:
        self.f, self.label = f, label
        self.point = tuple(torch.as_tensor(point, dtype=torch.float64).reshape(-1).tolist())
        self.allowed = _roundings(point)
        self.problem: Hint | None = None

    def _refuse(self, what: str, more: str = _AUTOGRAD_AT_X):
        self.problem = self.problem or Hint(what, more)
        raise self.problem

    def __call__(self, t):
        if not isinstance(t, torch.Tensor):
            self._refuse(f"{self.label} was called with a {type(t).__name__}, not a tensor, so autograd cannot see it.")
        values = _read_point(t)
        if values is None:
            self._refuse(
                f"{self.label} was called with a tensor whose values cannot be read (a batched tensor, as "
                "inside torch.func.vmap, or another wrapper), so this check cannot see where f is evaluated.",
                "Call f on an ordinary tensor, x itself with requires_grad=True, with no vmap around it. " + _AUTOGRAD_AT_X,
            )
        if values not in self.allowed:
            self._refuse(
                f"{self.label} was called at {_show(values)}, not at the point x = {_show(self.point)}: that "
                "looks like finite differences, (f(x + h) - f(x - h)) / 2h, which only approximate the derivative."
            )
        if not t.requires_grad:
            self._refuse(
                f"{self.label} was called at x with a tensor that does not require grad, so autograd records "
                "nothing and cannot differentiate it."
            )
        return self.f(t)

    def verify(self) -> None:
        """Raise the first refused call again (the learner's code may have caught it)."""
        if self.problem is not None:
            raise self.problem


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5)


# (label, f, x, f(x), f'(x), f''(x))
_SCALAR_CASES = [
    ("x**4", lambda t: t**4, 3.0, 81.0, 108.0, 108.0),
    ("x**4", lambda t: t**4, 2.0, 16.0, 32.0, 48.0),
    ("(x + 4)**2", lambda t: (t + 4.0) ** 2, 3.0, 49.0, 14.0, 2.0),
    ("x**3", lambda t: t**3, -1.0, -1.0, 3.0, -6.0),
    ("sin(x)", torch.sin, 0.7, math.sin(0.7), math.cos(0.7), -math.sin(0.7)),
    ("exp(x)", torch.exp, 0.5, math.exp(0.5), math.exp(0.5), math.exp(0.5)),
    (
        "x * tanh(x)",
        lambda t: t * torch.tanh(t),
        1.2,
        1.2 * math.tanh(1.2),
        math.tanh(1.2) + 1.2 / math.cosh(1.2) ** 2,
        2 / math.cosh(1.2) ** 2 - 2 * 1.2 * math.tanh(1.2) / math.cosh(1.2) ** 2,
    ),
]


@exercise(
    "02.derivative",
    "write derivative(f, x) that returns f'(x) as a Python float, computed by autograd (not by finite "
    "differences). f takes and returns a 0-d float tensor, using torch operations.",
    reference=derivative,
    hint=_AUTOGRAD_AT_X + " A one-element tensor becomes a Python float with .item().",
)
def _check_derivative(candidate: Callable) -> None:
    for label, f, x, value, first, _ in _SCALAR_CASES:
        watched = _Watched(f, f"f = {label}", x)
        got = candidate(watched, x)
        watched.verify()
        expect_type(got, float, f"derivative({label}, {x})")
        if _close(got, first):
            continue
        if _close(got, value):
            raise Hint(
                f"for f = {label} at x = {x} you returned f(x) = {got:.6g}, not f'(x) = {first:.6g}.",
                "After backward() the derivative is in the .grad of the tensor you created, not in f(x); "
                "torch.autograd.grad(f(t), t) returns it directly.",
            )
        raise Hint(
            f"d/dx {label} at x = {x} is {first:.6g}, but you returned {got:.6g}.",
            "Use a fresh tensor for each call (.grad accumulates across backward calls) and return "
            "t.grad.item() after f(t).backward(), or torch.autograd.grad(f(t), t)[0].item().",
        )


#: Library functions that hand back a second derivative (or a Hessian) without create_graph.
_SECOND_DERIVATIVE_SHORTCUTS = (
    "torch.autograd.functional.*",  # hessian, hvp, vhp, jacobian, vjp, jvp
    "torch.func.grad",  # torch.func.grad(torch.func.grad(f))
    "torch.func.grad_and_value",
    "torch.func.hessian",
    "torch.func.jacrev",
    "torch.func.jacfwd",
    "torch.func.vjp",
    "torch.func.jvp",
    "torch.func.linearize",
    "torch.autograd.forward_ad.make_dual",
)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


@exercise(
    "02.second_derivative",
    "write second_derivative(f, x) that returns f''(x) as a Python float, computed by autograd: "
    "differentiate the first derivative once more (no finite differences, no torch.func or "
    "torch.autograd.functional).",
    reference=second_derivative,
    shortcuts=_SECOND_DERIVATIVE_SHORTCUTS,
    goal="the second derivative from two autograd passes (create_graph=True)",
    hint="Take the first derivative with (df,) = torch.autograd.grad(f(t), t, create_graph=True): the "
    "graph of that computation is recorded, so torch.autograd.grad(df, t) differentiates it again.",
)
def _check_second_derivative(candidate: Callable) -> None:
    for label, f, x, value, first, second in _SCALAR_CASES:
        watched = _Watched(f, f"f = {label}", x)
        try:
            got = candidate(watched, x)
        except RuntimeError as exc:
            if "does not require grad and does not have a grad_fn" not in str(exc):
                raise
            raise Hint(
                f"for f = {label} at x = {x} your code raised RuntimeError: {_first_line(exc)}. The first "
                "derivative you differentiate again has no grad_fn: autograd did not record how it was computed.",
                "Pass create_graph=True to the first torch.autograd.grad (or backward) call: then the "
                "derivative it returns is itself part of a graph, and can be differentiated.",
            ) from exc
        watched.verify()
        expect_type(got, float, f"second_derivative({label}, {x})")
        if _close(got, second):
            continue
        if _close(got, first):
            raise Hint(
                f"for f = {label} at x = {x} you returned the FIRST derivative ({got:.6g}); the second is "
                f"{second:.6g}. (For x**4 at x = 3 both are 108, which is why that case alone cannot tell them "
                "apart.)",
                "Differentiate the first derivative again: (df,) = torch.autograd.grad(f(t), t, "
                "create_graph=True), then torch.autograd.grad(df, t).",
            )
        if _close(got, first + second):
            raise Hint(
                f"for f = {label} at x = {x} you returned {got:.6g}, which is f' + f'' = {first:.6g} + "
                f"{second:.6g}, not f'' = {second:.6g}: .grad accumulates.",
                "f(t).backward(create_graph=True) already put f' into t.grad; a second backward() adds f'' "
                "to it. Either read the first derivative with torch.autograd.grad(f(t), t, "
                "create_graph=True), which leaves t.grad alone, or set t.grad = None before the second "
                "backward (after saving the first derivative in a variable).",
            )
        if _close(got, value):
            raise Hint(
                f"for f = {label} at x = {x} you returned f(x) = {got:.6g}, not f''(x) = {second:.6g}.",
                "Return the gradient of the first derivative, not the function value.",
            )
        raise Hint(
            f"d2/dx2 {label} at x = {x} is {second:.6g}, but you returned {got:.6g}.",
            "Compute df with create_graph=True, then differentiate df with respect to the same tensor t.",
        )


def _f_products(x):
    return torch.stack([x[0] * x[1], x[1] * x[2], x[2] * x[0]])


def _f_coupled(x):
    return torch.sin(x) * x.sum()


_A = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.0, -1.0]], dtype=torch.float64)


def _f_linear(x):
    return _A @ x


_JACOBIAN_CASES = [
    ("[x0*x1, x1*x2, x2*x0]", _f_products, [1.0, 2.0, 3.0]),
    ("sin(x) * x.sum()", _f_coupled, [0.3, -1.0, 2.0, 0.5]),
    ("A @ x with A of shape [2, 3]", _f_linear, [1.0, 2.0, -1.0]),
]

#: Library functions that build the whole Jacobian (or its columns, by forward mode) for the learner.
_JACOBIAN_SHORTCUTS = (
    "torch.autograd.functional.jacobian",
    "torch.autograd.functional.jvp",
    "torch.func.jacrev",
    "torch.func.jacfwd",
    "torch.func.jvp",
    "torch.func.linearize",
    Shortcut("torch.func.vmap", does="`torch.func.vmap`, which batches all the rows (or columns) into one call,"),
    Shortcut("torch.vmap", does="`torch.vmap`, which batches all the rows (or columns) into one call,"),
    "torch.autograd.forward_ad.make_dual",
    Shortcut(
        "torch.autograd.grad",
        when=lambda a, k: bool(k.get("is_grads_batched")),
        does="`torch.autograd.grad(..., is_grads_batched=True)`",
    ),
)

_ROWS_FIX = (
    "x.grad is one tensor that each backward() updates in place (and .zero_() clears in place), so "
    "appending x.grad appends the same object every time. Append x.grad.clone(), or set x.grad = None "
    "before each row, or use torch.autograd.grad(y, x, grad_outputs=v, retain_graph=True), which "
    "returns a new tensor."
)


def _all_rows_equal(got: torch.Tensor, row: torch.Tensor) -> bool:
    return torch.allclose(got, row.expand_as(got), rtol=1e-5, atol=1e-7)


@exercise(
    "02.jacobian",
    "write jacobian(f, x) that returns the [m, n] Jacobian J[i, j] = d f(x)[i] / d x[j] of f: R^n -> R^m "
    "at x, building row i from one vector-Jacobian product with v = e_i (not with "
    "torch.autograd.functional.jacobian, torch.func or forward mode).",
    reference=jacobian,
    shortcuts=_JACOBIAN_SHORTCUTS,
    goal="the Jacobian from one vector-Jacobian product per row",
    hint="y = f(x) once, with x = x.detach().requires_grad_(True); then for each i, v = e_i and "
    "(row,) = torch.autograd.grad(y, x, grad_outputs=v, retain_graph=True); torch.stack the rows.",
)
def _check_jacobian(candidate: Callable) -> None:
    for label, f, point in _JACOBIAN_CASES:
        x = torch.tensor(point, dtype=torch.float64)
        want = torch.autograd.functional.jacobian(f, x)
        watched = _Watched(f, f"f = {label}", point)
        got = candidate(watched, x.clone())
        watched.verify()
        expect_type(got, torch.Tensor, f"jacobian(f = {label})")
        got = got.detach().to(torch.float64)
        m, n = want.shape
        if tuple(got.shape) != (m, n):
            if tuple(got.shape) == (n, m) and torch.allclose(got, want.T, rtol=1e-5, atol=1e-7):
                raise Hint(
                    f"for f = {label} you returned the transpose: shape {(n, m)} instead of {(m, n)} "
                    "(outputs x inputs).",
                    "Row i must be the gradient of output i: stack the rows with torch.stack(rows), not as columns.",
                )
            raise Hint(
                f"for f = {label} the Jacobian has shape {(m, n)} (outputs x inputs), but yours has "
                f"shape {tuple(got.shape)}.",
                "One row per output y[i], each the gradient of y[i] with respect to x (length n): "
                "torch.stack of m such rows.",
            )
        if torch.allclose(got, want, rtol=1e-5, atol=1e-7):
            continue
        if torch.allclose(got, want.cumsum(0), rtol=1e-5, atol=1e-7):
            raise Hint(
                f"for f = {label}, row i of your answer is the sum of rows 0..i of the Jacobian: x.grad "
                "accumulates across backward calls.",
                "Reset it (x.grad = None) before each row, or use torch.autograd.grad, which returns the "
                "gradient instead of adding it to .grad.",
            )
        if m > 1 and _all_rows_equal(got, want[-1]) and not _all_rows_equal(want, want[-1]):
            raise Hint(
                f"for f = {label} every row of your answer equals the LAST row of the Jacobian, "
                f"{[round(v, 6) for v in want[-1].tolist()]}: your rows look like one and the same tensor.",
                _ROWS_FIX,
            )
        if not got.any() and want.any():
            raise Hint(
                f"for f = {label} every entry of your answer is 0, but the Jacobian is\n{want}\n"
                "If you appended x.grad and then zeroed it, every row is that same zeroed tensor.",
                _ROWS_FIX,
            )
        if m == n and torch.allclose(got, want.T, rtol=1e-5, atol=1e-7):
            raise Hint(
                f"for f = {label} you returned the transpose: row i must be the gradient of output i.",
                "Row i is x.grad (or the result of torch.autograd.grad) after the VJP with v = e_i; stack "
                "the rows with torch.stack(rows), not as columns.",
            )
        raise Hint(
            f"for f = {label} at x = {point}, expected\n{want}\nbut got\n{got}",
            "Row i is the vector-Jacobian product with v = e_i (1 at position i): "
            "torch.autograd.grad(y, x, grad_outputs=v, retain_graph=True).",
        )
