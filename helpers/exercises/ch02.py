"""Chapter 02 (Autograd): exercise checkers and reference solutions.

Exercises:

- ``02.derivative``: ``derivative(f, x) -> float``, f'(x) by autograd.
- ``02.second_derivative``: ``second_derivative(f, x) -> float``, f''(x) by
  differentiating the first derivative (``create_graph=True``).
- ``02.jacobian``: ``jacobian(f, x) -> Tensor [m, n]``, one vector-Jacobian
  product per output.
- ``02.sgd_step``: ``sgd_step(params, lr) -> None``, one hand-written step of
  gradient descent on leaf tensors: update in place without recording a graph,
  then reset ``.grad``.

Each checker raises a :class:`~helpers.exercises.Hint` for a wrong answer: the
case, the expected and the actual value first, the fix on a second failure (see
:func:`helpers.exercises.check`). The test functions ``f`` it passes to the
candidate insist on being called at the point itself, on a tensor whose values
can be read, at least once with requires_grad, so a finite-difference answer, which
evaluates f at x + h and x - h, is refused rather than passed because it happens
to be accurate enough, and so is one that hides its evaluations inside
``torch.func.vmap`` or one that evaluates f at a complex point (the complex-step
method, Im f(x + ih) / h). Library functions that compute the asked-for
derivative (``torch.func.grad``, ``torch.autograd.functional.hessian``,
``torch.func.jacrev``, forward mode, ...) are named as shortcuts and refused
(:mod:`helpers.exercises.guards`), under their ``torch._functorch`` names and
their deprecated ``functorch`` aliases too, and so are the ``torch.optim``
optimizers in ``02.sgd_step``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from . import Hint, Shortcut, exercise, expect_type

__all__ = ["derivative", "jacobian", "second_derivative", "sgd_step"]


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


def sgd_step(params: list[torch.Tensor], lr: float) -> None:
    """One step of plain gradient descent, ``p <- p - lr * p.grad``, written by hand.

    Args:
        params: leaf tensors that require grad (a model's weights); each has a
            ``.grad`` from a ``backward()`` call, or ``None`` if it received none.
        lr: the learning rate, a Python float.

    Each tensor is updated in place under ``torch.no_grad()`` (the update is not
    part of the model's computation, and autograd refuses an in-place change of
    a leaf that requires grad while it records), so it stays the same leaf
    tensor. A tensor whose ``.grad`` is ``None`` is left alone, as ``torch.optim``
    does. Afterwards every ``.grad`` is ``None``, so the next ``backward()``
    starts from zero instead of adding to this step's gradient.
    """
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p -= lr * p.grad
    for p in params:
        p.grad = None


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
    "Make the point a tensor with requires_grad=True (for a given tensor, a detached copy that requires grad), "
    "evaluate f at that point itself, and let autograd compute the exact derivative: backward() or "
    "torch.autograd.grad (sections 2 and 6)."
)


class _Watched:
    """Wraps a test function ``f`` and refuses calls that are not autograd at ``point``.

    Autograd needs ``f`` evaluated at the point itself; finite differences
    evaluate it at ``x + h`` and ``x - h`` and only approximate the derivative.
    Each call's input must therefore be a readable tensor (not a batched one
    inside ``vmap``, whose values cannot be checked) and equal ``point`` in some
    float dtype. The first such problem is raised at once as a :class:`Hint`
    and also kept in ``problem``, in case the learner's code swallows the error.

    A call on a tensor that does not require grad is allowed (a correct answer
    may call ``f(x)`` once on the plain ``x``, for instance to read the output's
    shape); :meth:`verify` refuses the answer only when *no* call required grad,
    since then autograd recorded nothing.
    """

    def __init__(self, f: Callable, label: str, point) -> None:
        self.label = label
        self.point = tuple(torch.as_tensor(point, dtype=torch.float64).reshape(-1).tolist())
        self.allowed = _roundings(point)
        self.problem: Hint | None = None
        self.dtypes: set[torch.dtype] = set()
        self.calls_with_grad = 0
        self.calls_without_grad = 0
        self._evaluate = self._keep(f)

    def _refuse(self, what: str, more: str = _AUTOGRAD_AT_X):
        self.problem = self.problem or Hint(what, more)
        raise self.problem

    def __call__(self, t):
        return self._evaluate(t)

    def _keep(self, f: Callable) -> Callable:
        """``f`` behind the checks of :meth:`__call__`, held in a closure, not in an attribute.

        An answer that reaches past the wrapper (``getattr(f, "f", f)``, or any callable among
        ``vars(f)``) finds only this guarded function, so it cannot evaluate ``f`` away from the point
        without the call being refused and recorded in ``problem``.
        """

        def evaluate(t):
            self._check_call(t)
            return f(t)

        return evaluate

    def _check_call(self, t) -> None:
        if not isinstance(t, torch.Tensor):
            self._refuse(f"{self.label} was called with a {type(t).__name__}, not a tensor, so autograd cannot see it.")
        if t.is_complex():
            self._refuse(
                f"{self.label} was called with a tensor of dtype {str(t.dtype).removeprefix('torch.')}: that looks like the "
                "complex-step method, Im f(x + ih) / h, which evaluates f off the real line and approximates the "
                "derivative instead of letting autograd compute it.",
                "Call f on a real floating-point tensor (float32 or float64). " + _AUTOGRAD_AT_X,
            )
        if not t.dtype.is_floating_point:
            self._refuse(
                f"{self.label} was called with a tensor of dtype {str(t.dtype).removeprefix('torch.')}; autograd "
                "differentiates only floating-point (and complex) tensors.",
                "Make the point a float tensor, e.g. torch.tensor(x, dtype=torch.float64). " + _AUTOGRAD_AT_X,
            )
        self.dtypes.add(t.dtype)
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
        if t.requires_grad:
            self.calls_with_grad += 1
        else:
            self.calls_without_grad += 1

    def no_grad_problem(self) -> Hint | None:
        """The hint for an answer that called f only on tensors that do not require grad, else None."""
        if self.calls_without_grad and not self.calls_with_grad:
            return Hint(
                f"{self.label} was called at x, but every call had a tensor that does not require grad, so "
                "autograd recorded nothing and cannot differentiate it.",
                _AUTOGRAD_AT_X,
            )
        return None

    def verify(self) -> None:
        """Raise the first refused call again (the learner's code may have caught it), or refuse an answer
        whose calls of f all had tensors that do not require grad."""
        if self.problem is not None:
            raise self.problem
        problem = self.no_grad_problem()
        if problem is not None:
            raise problem

    def run(self, candidate: Callable, *args):
        """``candidate(self, *args)``; if it crashes after calling f only without grad, say that instead.

        Without ``requires_grad`` the learner's ``backward()`` or ``torch.autograd.grad`` raises a
        RuntimeError ("does not require grad and does not have a grad_fn"); the cause is the point.
        """
        try:
            return candidate(self, *args)
        except Exception as exc:
            if isinstance(exc, AssertionError):  # a refusal (Hint) or a shortcut: already says what is wrong
                raise
            problem = self.problem or self.no_grad_problem()
            if problem is not None:
                raise problem from exc
            raise

    def refuse_low_precision(self, what: str) -> None:
        """Raise a :class:`Hint` if f was called in a 16-bit float dtype; ``what`` names the wrong answer.

        float16 keeps 11 significant bits and bfloat16 8, i.e. about 3 and 2-3
        decimal digits: x itself and every value computed from it are rounded far
        beyond the checkers' relative tolerances (1e-4, 1e-5), so the answer is wrong
        for a reason that has nothing to do with autograd.
        """
        low = sorted(str(d).removeprefix("torch.") for d in self.dtypes & {torch.float16, torch.bfloat16})
        if low:
            bits = {"float16": 11, "bfloat16": 8}
            detail = " and ".join(f"{name} keeps {bits[name]} significant bits" for name in low)
            raise Hint(
                f"{what}, and {self.label} was called with a {' and '.join(low)} tensor: {detail} (2 to 3 "
                "decimal digits), so x and the derivative are rounded far beyond this check's tolerance.",
                "16-bit floats are for storage and fast matrix products, not for an exact derivative: make the "
                "point a float32 (the default) or float64 tensor. " + _AUTOGRAD_AT_X,
            )


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


#: Library functions that hand back a derivative (or a Hessian) for the learner.
_LIBRARY_DERIVATIVES = (
    "torch.autograd.functional.*",  # hessian, hvp, vhp, jacobian, vjp, jvp
    "torch.func.grad",  # torch.func.grad(f), or torch.func.grad(torch.func.grad(f))
    "torch.func.grad_and_value",
    "torch.func.hessian",
    "torch.func.jacrev",
    "torch.func.jacfwd",
    "torch.func.vjp",
    "torch.func.jvp",
    "torch.func.linearize",
    "torch.autograd.forward_ad.make_dual",
    # the same function objects where torch.func gets them from (the guard rebinds names, not objects)
    "torch._functorch.apis.grad",
    "torch._functorch.apis.grad_and_value",
    "torch._functorch.eager_transforms.hessian",
    "torch._functorch.eager_transforms.jacrev",
    "torch._functorch.eager_transforms.jacfwd",
    "torch._functorch.eager_transforms.vjp",
    "torch._functorch.eager_transforms.jvp",
    "torch._functorch.eager_transforms.linearize",
    # the deprecated functorch package: thin wrappers that call the functions above from inside torch
    *(Shortcut(f"functorch.{name}", lazy=True) for name in ("grad", "grad_and_value", "hessian", "jacrev", "jacfwd", "vjp", "jvp")),
)


@exercise(
    "02.derivative",
    "write derivative(f, x) that returns f'(x) as a Python float, computed by autograd with backward() or "
    "torch.autograd.grad (not by finite differences, torch.func or torch.autograd.functional). f takes and "
    "returns a 0-d float tensor, using torch operations.",
    reference=derivative,
    shortcuts=_LIBRARY_DERIVATIVES,
    goal="the derivative with backward() or torch.autograd.grad",
    hint="Autograd gives the exact derivative of what it recorded, at the point where it was recorded: "
    "section 2 shows which tensors it records operations on, and how backward() then fills in a "
    "derivative; section 6 shows torch.autograd.grad, which returns it instead. Finite differences only "
    "approximate it.",
)
def _check_derivative(candidate: Callable) -> None:
    for label, f, x, value, first, _ in _SCALAR_CASES:
        watched = _Watched(f, f"f = {label}", x)
        got = watched.run(candidate, x)
        watched.verify()
        expect_type(got, float, f"derivative({label}, {x})")
        if _close(got, first):
            continue
        watched.refuse_low_precision(f"d/dx {label} at x = {x} is {first:.6g}, but you returned {got:.6g}")
        if _close(got, value):
            raise Hint(
                f"for f = {label} at x = {x} you returned f(x) = {got:.6g}, not f'(x) = {first:.6g}.",
                "After backward() the derivative is in the .grad of the tensor you created, not in f(x); "
                "torch.autograd.grad returns it directly.",
            )
        raise Hint(
            f"d/dx {label} at x = {x} is {first:.6g}, but you returned {got:.6g}.",
            "Use a fresh tensor for each call (.grad accumulates across backward calls), and return the "
            "gradient of f(t) with respect to that tensor t, not a value computed from f(t) itself.",
        )



def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


@exercise(
    "02.second_derivative",
    "write second_derivative(f, x) that returns f''(x) as a Python float, computed by autograd: "
    "differentiate the first derivative once more (no finite differences, no torch.func or "
    "torch.autograd.functional).",
    reference=second_derivative,
    shortcuts=_LIBRARY_DERIVATIVES,
    goal="the second derivative from two autograd passes (create_graph=True)",
    hint="The first derivative that autograd returns is normally a constant: how it was computed is not "
    "recorded. The flag create_graph=True (section 6) records a backward pass, so that its result can be "
    "differentiated again; section 6 also says why torch.autograd.grad suits this better than backward(): "
    ".grad accumulates, and backward(create_graph=True) leaves the reference cycle that PyTorch warns about.",
)
def _check_second_derivative(candidate: Callable) -> None:
    for label, f, x, value, first, second in _SCALAR_CASES:
        watched = _Watched(f, f"f = {label}", x)
        try:
            got = watched.run(candidate, x)
        except RuntimeError as exc:
            if "does not require grad and does not have a grad_fn" not in str(exc):
                raise
            raise Hint(
                f"for f = {label} at x = {x} your code raised RuntimeError: {_first_line(exc)}. The first "
                "derivative you differentiate again has no grad_fn: autograd did not record how it was computed.",
                "Pass create_graph=True to the first pass (best with torch.autograd.grad, section 6): then the "
                "derivative it returns is itself part of a graph, and can be differentiated.",
            ) from exc
        watched.verify()
        expect_type(got, float, f"second_derivative({label}, {x})")
        if _close(got, second):
            continue
        watched.refuse_low_precision(f"d2/dx2 {label} at x = {x} is {second:.6g}, but you returned {got:.6g}")
        if _close(got, first):
            raise Hint(
                f"for f = {label} at x = {x} you returned the FIRST derivative ({got:.6g}); the second is "
                f"{second:.6g}. (For x**4 at x = 3 both are 108, which is why that case alone cannot tell them "
                "apart.)",
                "Differentiate the first derivative once more, with respect to the same tensor. For that "
                "the first pass must record its own computation: create_graph=True.",
            )
        if _close(got, first + second):
            raise Hint(
                f"for f = {label} at x = {x} you returned {got:.6g}, which is f' + f'' = {first:.6g} + "
                f"{second:.6g}, not f'' = {second:.6g}: .grad accumulates.",
                "The first backward(create_graph=True) put f' into t.grad, and the second backward() adds "
                "f'' to it. Take the first derivative from torch.autograd.grad, which returns it without "
                "touching .grad (and without the reference cycle that backward(create_graph=True) warns "
                "about), or keep it in a variable and reset t.grad (t.grad = None) between the two passes.",
            )
        if _close(got, value):
            raise Hint(
                f"for f = {label} at x = {x} you returned f(x) = {got:.6g}, not f''(x) = {second:.6g}.",
                "Return the gradient of the first derivative, not the function value.",
            )
        raise Hint(
            f"d2/dx2 {label} at x = {x} is {second:.6g}, but you returned {got:.6g}.",
            "Two passes: the first derivative with create_graph=True, then the derivative of that result "
            "with respect to the same tensor.",
        )


def _f_products(x):
    return torch.stack([x[0] * x[1], x[1] * x[2], x[2] * x[0]])


def _f_coupled(x):
    return torch.sin(x) * x.sum()


_A = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.0, -1.0]], dtype=torch.float64)


def _f_linear(x):
    return _A.to(x.dtype) @ x  # in the dtype of the answer's x: float32 @ float64 would raise


_JACOBIAN_CASES = [
    ("[x0*x1, x1*x2, x2*x0]", _f_products, [1.0, 2.0, 3.0]),
    ("sin(x) * x.sum()", _f_coupled, [0.3, -1.0, 2.0, 0.5]),
    ("A @ x with A of shape [2, 3]", _f_linear, [1.0, 2.0, -1.0]),
]

#: Library functions that build the whole Jacobian (or its columns, by forward mode) for the learner.
_JACOBIAN_SHORTCUTS = (
    "torch.autograd.functional.*",  # jacobian, and vjp/jvp/vhp/hvp called once per row or column
    "torch.func.jacrev",
    "torch.func.jacfwd",
    "torch.func.vjp",  # one call, then its vjp_fn once per row: the library does the exercise's work
    "torch.func.jvp",
    "torch.func.linearize",
    Shortcut("torch.func.vmap", does="`torch.func.vmap`, which batches all the rows (or columns) into one call,"),
    Shortcut("torch.vmap", does="`torch.vmap`, which batches all the rows (or columns) into one call,"),
    "torch.autograd.forward_ad.make_dual",
    # the same function objects where torch.func gets them from (the guard rebinds names, not objects)
    "torch._functorch.eager_transforms.jacrev",
    "torch._functorch.eager_transforms.jacfwd",
    "torch._functorch.eager_transforms.vjp",
    "torch._functorch.eager_transforms.jvp",
    "torch._functorch.eager_transforms.linearize",
    Shortcut("torch._functorch.apis.vmap", does="`torch._functorch.apis.vmap` (torch.vmap under another name), which batches all the rows (or columns) into one call,"),
    # the deprecated functorch package: thin wrappers that call the functions above from inside torch
    *(Shortcut(f"functorch.{name}", lazy=True) for name in ("jacrev", "jacfwd", "vjp", "jvp")),
    Shortcut("functorch.vmap", lazy=True, does="`functorch.vmap`, which batches all the rows (or columns) into one call,"),
    Shortcut(
        "torch.autograd.grad",
        when=lambda a, k: bool(k.get("is_grads_batched")),
        does="`torch.autograd.grad(..., is_grads_batched=True)`",
    ),
)

_ROWS_FIX = (
    "x.grad is one tensor that each backward() updates in place (and .zero_() clears in place), so "
    "appending x.grad appends the same object every time. Append a copy (.clone()), or reset x.grad to "
    "None before each row so that each backward() allocates a new one, or use torch.autograd.grad, "
    "which returns a new tensor."
)


def _all_rows_equal(got: torch.Tensor, row: torch.Tensor) -> bool:
    return torch.allclose(got, row.expand_as(got), rtol=1e-5, atol=1e-7)


@exercise(
    "02.jacobian",
    "write jacobian(f, x) that returns the [m, n] Jacobian J[i, j] = d f(x)[i] / d x[j] of f: R^n -> R^m "
    "at x, building row i from one vector-Jacobian product with v = e_i computed by backward() or "
    "torch.autograd.grad (not with torch.autograd.functional, torch.func, including torch.func.vjp, or "
    "forward mode).",
    reference=jacobian,
    shortcuts=_JACOBIAN_SHORTCUTS,
    goal="the Jacobian from one vector-Jacobian product per row",
    hint="Row i of the Jacobian is the vector-Jacobian product with v = e_i: section 5 computes such a "
    "product with backward's gradient argument (torch.autograd.grad calls it grad_outputs). Several "
    "backward passes through one recorded graph meet the error of section 2, and its retain_graph fix.",
)
def _check_jacobian(candidate: Callable) -> None:
    for label, f, point in _JACOBIAN_CASES:
        x = torch.tensor(point, dtype=torch.float64)
        want = torch.autograd.functional.jacobian(f, x)
        watched = _Watched(f, f"f = {label}", point)
        got = watched.run(candidate, x.clone())
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
        watched.refuse_low_precision(
            f"for f = {label} your Jacobian differs from the exact one by up to {(got - want).abs().max().item():.2g}"
        )
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
            "Row i is the vector-Jacobian product with v = e_i (1 at position i, 0 elsewhere), passed as "
            "grad_outputs (or as backward's gradient); the graph is reused for every row (retain_graph).",
        )


def _sgd_params() -> list[torch.Tensor]:
    """Leaf tensors of three shapes, and a fourth that no loss uses (its .grad stays None)."""
    return [
        torch.tensor([1.0, -2.0, 0.5], requires_grad=True),
        torch.tensor([[0.3, 1.2], [-0.7, 2.0]], requires_grad=True),
        torch.tensor(1.5, requires_grad=True),
        torch.tensor([4.0, -4.0], requires_grad=True),
    ]


def _sgd_loss(params: list[torch.Tensor], step: int) -> torch.Tensor:
    """A loss of the first three tensors that changes from step to step (so do its gradients)."""
    a, b, c, _ = params
    return step * (a**2).sum() + (b**3).sum() / 3 + torch.exp(c / step)


_NO_GRAD_UPDATE = (
    "An update is not part of the model's computation, so autograd must not record it: section 4 switches "
    "recording off with torch.no_grad() for exactly this naive step. The update must also change the "
    "tensors in params themselves, so that each stays the same leaf tensor that requires grad."
)
_RESET_GRAD = (
    "backward() adds to .grad (section 3): once the step has used the gradients, reset them, as "
    "optimizer.zero_grad() does, so that the next backward() starts from zero."
)


def _sgd_names(params: list[torch.Tensor]) -> list[str]:
    return [f"params[{i}] (shape {list(p.shape)})" for i, p in enumerate(params)]


def _values(t: torch.Tensor):
    """The values of ``t`` for a message, rounded to 6 decimals (float32 0.8 reads 0.800000011920929)."""
    return t.detach().double().round(decimals=6).tolist()


@exercise(
    "02.sgd_step",
    "write sgd_step(params, lr) that updates each leaf tensor p in params in place, p <- p - lr * p.grad, "
    "without recording the update in the graph and not through .data (which hides the change from autograd's "
    "checks), leaves a tensor whose .grad is None alone, and then resets "
    "every .grad (to None or zero); it returns nothing. Write it yourself, without torch.optim.",
    reference=sgd_step,
    shortcuts=(
        Shortcut("torch.optim.Optimizer", does="a `torch.optim` optimizer (`torch.optim.SGD`, Adam, ...)"),
        Shortcut("torch.optim.sgd.sgd", does="`torch.optim.sgd.sgd`, the function behind `torch.optim.SGD`,"),
        Shortcut("torch.optim._functional.sgd", does="`torch.optim._functional.sgd`, the function behind `torch.optim.SGD`,"),
    ),
    goal="the SGD update",
    hint=_NO_GRAD_UPDATE + " Then: " + _RESET_GRAD,
)
def _check_sgd_step(candidate: Callable) -> None:
    params = _sgd_params()
    names = _sgd_names(params)
    storage = [p.data_ptr() for p in params]
    for step, lr in ((1, 0.1), (2, 0.05)):  # two steps, two gradients, two learning rates
        before = [p.detach().clone() for p in params]
        copies = [b.clone().requires_grad_(True) for b in before]
        grads = torch.autograd.grad(_sgd_loss(copies, step), copies, allow_unused=True)  # the true gradients
        _sgd_loss(params, step).backward()  # adds to whatever .grad the previous step left
        versions = [p._version for p in params]
        try:
            candidate(list(params), lr)
        except RuntimeError as exc:
            if "leaf Variable that requires grad is being used in an in-place operation" not in str(exc):
                raise
            raise Hint(
                f"at step {step} your code raised RuntimeError: {_first_line(exc).rstrip('.')}. Autograd was recording "
                "while you changed a parameter in place.",
                _NO_GRAD_UPDATE,
            ) from exc
        except (TypeError, AttributeError) as exc:
            if "NoneType" not in str(exc):
                raise
            raise Hint(
                f"at step {step} your code raised {type(exc).__name__}: {_first_line(exc).rstrip('.')}. {names[3]} received no "
                "gradient, so its .grad is None.",
                "Skip a tensor whose .grad is None (as torch.optim does): it received no gradient, so there "
                "is nothing to step.",
            ) from exc
        for name, p in zip(names, params):
            if not p.requires_grad:
                raise Hint(
                    f"after step {step}, {name} no longer requires grad: the next forward pass would not "
                    "record it, and it would never get a gradient again.",
                    _NO_GRAD_UPDATE + " torch.no_grad() switches recording off for the block, without "
                    "changing the tensors' requires_grad.",
                )
            if not p.is_leaf or p.grad_fn is not None:
                raise Hint(
                    f"after step {step}, {name} has grad_fn {type(p.grad_fn).__name__}: the update was "
                    "recorded in the graph, so the parameter is no longer a leaf.",
                    _NO_GRAD_UPDATE,
                )
        for name, p, b, g, version in zip(names, params, before, grads, versions):
            got = p.detach()
            want = b if g is None else b - lr * g
            if torch.allclose(got, want, rtol=1e-5, atol=1e-6):
                if g is not None and p._version == version:
                    raise Hint(
                        f"at step {step}, {name} has the right values, but your update went through .data (or "
                        "another view that autograd does not track): the tensor's version counter did not "
                        "move, so autograd never saw the change. The task rules out .data updates.",
                        _NO_GRAD_UPDATE + " Changes through .data are hidden from autograd's checks, which can "
                        "give silently wrong gradients (section 4); torch.no_grad() is the current way.",
                    )
                continue
            if g is None:
                raise Hint(
                    f"{names[3]} received no gradient (its .grad is None), so it should stay {_values(b)}, "
                    f"but your step changed it to {_values(got)}.",
                    "Skip a tensor whose .grad is None, as torch.optim does.",
                )
            if torch.equal(got, b):
                raise Hint(
                    f"at step {step}, {name} did not change: it is still {_values(b)}, and should be "
                    f"{_values(want)}. Either the update made a new tensor (p = p - lr * p.grad rebinds the "
                    "name p, and the tensor in params is untouched), or the gradient was reset before the "
                    "update used it.",
                    _NO_GRAD_UPDATE,
                )
            if torch.allclose(got, b + lr * g, rtol=1e-5, atol=1e-6):
                raise Hint(
                    f"at step {step}, {name} moved to {_values(got)}, uphill: p + lr * grad instead of "
                    f"p - lr * grad = {_values(want)}.",
                    "The gradient points in the direction in which the loss grows fastest; gradient descent "
                    "steps the other way.",
                )
            raise Hint(
                f"at step {step} (lr = {lr}), {name} should become {_values(want)} (p - lr * p.grad), but it "
                f"is {_values(got)}.",
                _NO_GRAD_UPDATE + " Use the lr you are given, and the gradient now in p.grad.",
            )
        for name, p, ptr in zip(names, params, storage):
            if p.data_ptr() != ptr:
                raise Hint(
                    f"after step {step}, {name} holds its values in new memory: the step replaced its storage "
                    "(p.data = ... or p.set_(...)) instead of writing into it.",
                    _NO_GRAD_UPDATE,
                )
            if p.grad is not None and p.grad.any():
                raise Hint(
                    f"after step {step}, {name}.grad still holds {_values(p.grad)}: the next backward() would "
                    "add the next gradient to it.",
                    _RESET_GRAD,
                )
