"""Chapter 02 (Autograd): exercise checkers and reference solutions.

Exercises:

- ``02.derivative``: ``derivative(f, x) -> float``, f'(x) by autograd.
- ``02.second_derivative``: ``second_derivative(f, x) -> float``, f''(x) with
  ``create_graph=True``.
- ``02.jacobian``: ``jacobian(f, x) -> Tensor [m, n]``, one vector-Jacobian
  product per output.

Each checker raises ``AssertionError("hint")`` for a wrong answer (see
:func:`helpers.exercises.check`). The test functions ``f`` it passes to the
candidate insist on being called at the point itself (and, for the scalar
derivatives, with a tensor that requires grad), so a finite-difference answer,
which evaluates f at x + h and x - h, is refused with a hint rather than passed
because it happens to be accurate enough.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from . import exercise

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
        Row ``i`` is the vector-Jacobian product ``e_i^T J``.
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
    """The values of ``t`` as float64 numbers, or None when they cannot be read (e.g. inside torch.func)."""
    try:
        return tuple(t.detach().to(torch.float64).reshape(-1).tolist())
    except Exception:  # a wrapped tensor we cannot inspect: do not judge it
        return None


def _roundings(point) -> set[tuple[float, ...]]:
    """``point`` as it reads after a round trip through each float dtype (x in float32 is not x in float64)."""
    return {
        tuple(torch.tensor(point, dtype=dtype).to(torch.float64).reshape(-1).tolist())
        for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16)
    }


def _show(values: tuple[float, ...]) -> str:
    return f"{values[0]!r}" if len(values) == 1 else str(list(values))


class _Watched:
    """Wraps a test function ``f`` and refuses calls that are not autograd at ``point``.

    Autograd needs ``f`` evaluated once, at the point itself; finite differences
    evaluate it at ``x + h`` and ``x - h`` and only approximate the derivative.
    Each call's input must therefore equal ``point`` (in some float dtype) and,
    with ``need_grad``, require grad. The first problem is raised at once and
    also kept in ``problem``, in case the learner's code swallows the error.
    """

    def __init__(self, f: Callable, label: str, point, need_grad: bool = True) -> None:
        self.f, self.label, self.need_grad = f, label, need_grad
        self.point = tuple(torch.as_tensor(point, dtype=torch.float64).reshape(-1).tolist())
        self.allowed = _roundings(point)
        self.problem: str | None = None

    def _refuse(self, message: str):
        self.problem = self.problem or message
        raise AssertionError(message)

    def __call__(self, t):
        if not isinstance(t, torch.Tensor):
            self._refuse(
                f"{self.label} was called with a {type(t).__name__}, not a tensor. Make x a tensor with "
                "torch.tensor(x, requires_grad=True) and let autograd differentiate (no finite differences)."
            )
        if self.need_grad and not t.requires_grad:
            self._refuse(
                f"{self.label} was called with a tensor that does not require grad, so autograd cannot "
                "differentiate it: create it with requires_grad=True."
            )
        values = _read_point(t)
        if values is not None and values not in self.allowed:
            self._refuse(
                f"{self.label} was called at {_show(values)}, not at the point x = {_show(self.point)}: that "
                "looks like finite differences, (f(x + h) - f(x - h)) / 2h, which only approximate the "
                "derivative. Call f once, at x itself (a tensor with requires_grad=True), and let autograd "
                "compute the exact derivative."
            )
        return self.f(t)

    def verify(self) -> None:
        """Raise the first refused call again (the learner's code may have caught it)."""
        if self.problem:
            raise AssertionError(self.problem)


def _as_float(value, what: str) -> float:
    if isinstance(value, torch.Tensor):
        raise AssertionError(
            f"{what} returned a tensor ({value!r}); return a Python float with .item()."
        )
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise AssertionError(f"{what} returned {type(value).__name__}; return a Python float.")
    return float(value)


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
    "write derivative(f, x) that returns f'(x) as a Python float, computed by autograd "
    "(make x a tensor with requires_grad=True, then backward() or torch.autograd.grad).",
    reference=derivative,
)
def _check_derivative(candidate: Callable) -> None:
    for label, f, x, value, first, _ in _SCALAR_CASES:
        watched = _Watched(f, label, x)
        got = _as_float(candidate(watched, x), f"derivative({label}, {x})")
        watched.verify()
        if _close(got, first):
            continue
        if _close(got, value):
            raise AssertionError(
                f"for f = {label} at x = {x} you returned f(x) = {got:.6g}, not f'(x) = {first:.6g}."
            )
        raise AssertionError(f"d/dx {label} at x = {x} is {first:.6g}, but you returned {got:.6g}.")


@exercise(
    "02.second_derivative",
    "write second_derivative(f, x) that returns f''(x) as a Python float: take the first "
    "derivative with torch.autograd.grad(..., create_graph=True), then differentiate it again.",
    reference=second_derivative,
)
def _check_second_derivative(candidate: Callable) -> None:
    for label, f, x, _, first, second in _SCALAR_CASES:
        watched = _Watched(f, label, x)
        got = _as_float(candidate(watched, x), f"second_derivative({label}, {x})")
        watched.verify()
        if _close(got, second):
            continue
        if _close(got, first):
            raise AssertionError(
                f"for f = {label} at x = {x} you returned the FIRST derivative ({got:.6g}); "
                f"the second is {second:.6g}. (For x**4 at x = 3 both are 108, which is why that case "
                "alone cannot tell them apart.) Differentiate the first derivative again: it needs "
                "create_graph=True in the first torch.autograd.grad call."
            )
        raise AssertionError(
            f"d2/dx2 {label} at x = {x} is {second:.6g}, but you returned {got:.6g}."
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


@exercise(
    "02.jacobian",
    "write jacobian(f, x) that returns the [m, n] Jacobian of f: R^n -> R^m at x, building "
    "row i from one vector-Jacobian product with v = e_i (backward(gradient=v) or "
    "torch.autograd.grad(y, x, grad_outputs=v, retain_graph=True)).",
    reference=jacobian,
)
def _check_jacobian(candidate: Callable) -> None:
    for label, f, point in _JACOBIAN_CASES:
        x = torch.tensor(point, dtype=torch.float64)
        want = torch.autograd.functional.jacobian(f, x)
        # Forward mode (torch.func.jacfwd) calls f with a tensor that does not require grad: allowed.
        watched = _Watched(f, f"f = {label}", point, need_grad=False)
        got = candidate(watched, x.clone())
        watched.verify()
        if not isinstance(got, torch.Tensor):
            raise AssertionError(
                f"jacobian returned {type(got).__name__}; return a tensor of shape [m, n]."
            )
        got = got.detach().to(torch.float64)
        if tuple(got.shape) != tuple(want.shape):
            raise AssertionError(
                f"for f = {label} the Jacobian has shape {tuple(want.shape)} "
                f"(outputs x inputs), but yours has shape {tuple(got.shape)}."
            )
        if torch.allclose(got, want, rtol=1e-5, atol=1e-7):
            continue
        if torch.allclose(got, want.cumsum(0), rtol=1e-5, atol=1e-7):
            raise AssertionError(
                "row i of your answer is the sum of rows 0..i: x.grad accumulates across backward "
                "calls. Reset it (x.grad = None) before each row, or use torch.autograd.grad, "
                "which returns the gradient instead of adding it to .grad."
            )
        if want.shape[0] == want.shape[1] and torch.allclose(got, want.T, rtol=1e-5, atol=1e-7):
            raise AssertionError(
                "you returned the transpose: row i must be the gradient of output i."
            )
        raise AssertionError(f"for f = {label} at x = {point}, expected\n{want}\nbut got\n{got}")
