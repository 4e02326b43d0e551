"""Exercises of chapter 04 (linear regression from scratch): checkers and reference solutions."""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from . import Hint, Shortcut, exercise, expect_type
from .loops import _OpCounter  # counts the ATen operators issued while active

# --------------------------------------------------------------------------
# 04.closed_form_fit
# --------------------------------------------------------------------------


def _closed_form_fit(x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Least-squares line ``y ≈ w * x + b`` in closed form.

    Args:
        x, y: float tensors ``[N]`` (N >= 2, x not constant).

    Returns:
        ``(w, b)`` as Python floats.

    Solves the least-squares problem ``min ||A @ [w, b] - y||²`` with the
    design matrix ``A = [x, 1]`` (one row per sample) by ``torch.linalg.lstsq``,
    in float64 for accuracy.
    """
    x64, y64 = x.double().reshape(-1), y.double().reshape(-1)
    design = torch.stack([x64, torch.ones_like(x64)], dim=1)  # [N, 2]
    w, b = torch.linalg.lstsq(design, y64.unsqueeze(1)).solution.reshape(-1)
    return w.item(), b.item()


def _as_pair(result, what: str) -> tuple[float, float]:
    """The two Python floats of ``result``; a Hint for anything else (a tensor of two, a pair of tensors)."""
    try:
        first, second = result
    except (TypeError, ValueError) as exc:
        raise AssertionError(
            f"return two numbers {what}, e.g. `return w.item(), b.item()`; got {type(result).__name__}"
        ) from exc
    expect_type(first, float, f"the first number of {what}")
    expect_type(second, float, f"the second number of {what}")
    return first, second


#: A closed form takes a few dozen tensor operations (building A, one solve, two .item()); a
#: gradient-descent loop takes a handful per step, and thousands of steps to reach 1e-3 here.
_MAX_CLOSED_FORM_OPS = 300


@exercise(
    "04.closed_form_fit",
    "return (w, b), the least-squares line y ≈ w*x + b for 1-D tensors x and y, as Python floats, "
    "computed exactly (no gradient descent, and no torch.optim optimizer: an iterative fit is not the closed form).",
    reference=_closed_form_fit,
    shortcuts=(
        # LBFGS, SGD, Adam, ...: every optimizer subclasses torch.optim.Optimizer
        Shortcut("torch.optim.Optimizer",
                 does="a `torch.optim` optimizer (an iterative fit that approaches the line step by step)"),
        # whole-answer line fits: they build the design matrix themselves (a solver such as
        # torch.linalg.lstsq, which the hint names, is allowed: the exercise is to set up A)
        *(Shortcut(name, does="numpy's polynomial fit (it builds the design matrix for you)")
          for name in ("numpy.polyfit", "numpy.polynomial.polynomial.polyfit")),
    ),
    goal="the exact least-squares solution (in closed form, without iterating)",
    hint="Write the model as a matrix product, predictions = A @ [w, b], with one column of A per "
    "parameter; then a least-squares solver (torch.linalg.lstsq) finds w and b together.",
)
def _test_closed_form_fit(candidate) -> None:
    g = torch.Generator().manual_seed(4)
    cases = [
        # (x, true w, true b): centred x, then x far from 0 so that the intercept matters
        (torch.rand(500, generator=g) * 2 - 1, 3.0, 2.0),
        (torch.rand(300, generator=g) * 5 + 5, -1.5, 4.0),
    ]
    for x, w_true, b_true in cases:
        y = w_true * x + b_true + 0.5 * torch.randn(x.shape[0], generator=g)
        w_exact, b_exact = _closed_form_fit(x, y)
        counter = _OpCounter()
        with counter:
            result = candidate(x.clone(), y.clone())
        if counter.count > _MAX_CLOSED_FORM_OPS:
            raise Hint(
                f"your function called {counter.count} tensor operations: that is an iterative fit (gradient "
                "descent, say), not the closed form, which needs a few dozen.",
                "Build the design matrix once and solve the least-squares problem in one call: no loop, "
                "no learning rate, no steps.",
            )
        w, b = _as_pair(result, "(w, b)")
        where = f"on data y = {w_true}x + {b_true} + noise with x in [{x.min():.0f}, {x.max():.0f}]"
        if abs(w - w_exact) < 1e-3 and abs(b - b_exact) < 1e-3:
            continue
        got = f"{where} the least-squares line is w={w_exact:.4f}, b={b_exact:.4f}; you returned w={w:.4f}, b={b:.4f}."
        if abs(b) < 1e-6 and abs(b_exact) > 0.5:
            raise Hint(
                f"{got} Your b is 0: your fit has no intercept, so the line is forced through the origin.",
                "The intercept needs its own column in the design matrix, one that multiplies b in every "
                "row; the solver then fits it like any other weight.",
            )
        if abs(b - y.mean().item()) < 1e-3 and abs(w - w_exact) < 1e-3:
            raise Hint(
                f"{got} Your slope is right but your b is mean(y): that intercept is right only when x "
                "has mean 0, and here it has not.",
                "The best intercept depends on the slope. Fit w and b together, as one least-squares "
                "problem with a design matrix, instead of one after the other.",
            )
        if abs(w - w_true) < 0.3 and abs(b - b_true) < 1.0:
            raise Hint(
                f"{got} Your line is close, but not the exact minimiser of the squared error (an "
                "iterative fit stopped too early lands here).",
                "The exercise asks for the exact solution: a least-squares solver gives it in one call, "
                "with no learning rate and no steps.",
            )
        raise Hint(
            f"{got} That line is far from the data's (the truth is w={w_true}, b={b_true}).",
            "Each row of the design matrix holds what multiplies w and what multiplies b for one "
            "sample; check its shape and columns, and what the solver returns.",
        )


# --------------------------------------------------------------------------
# 04.mse_gradients
# --------------------------------------------------------------------------


def _mse_gradients(w: torch.Tensor, b: torch.Tensor, x: torch.Tensor, y: torch.Tensor):
    """Gradients of ``L = mean((x @ w + b - y)**2)`` with respect to ``w`` and ``b``, by hand.

    Args:
        w: float ``[D]`` weights.
        b: float ``[]`` (0-dim) bias.
        x: float ``[N, D]`` inputs.
        y: float ``[N]`` targets.

    Returns:
        ``(dw, db)``: ``dL/dw = (2/N) * x.T @ r`` of shape ``[D]`` and
        ``dL/db = (2/N) * r.sum()`` of shape ``[]``, where ``r = x @ w + b - y``
        are the residuals.
    """
    residual = x @ w + b - y  # [N]
    n = x.shape[0]
    return 2 / n * (x.T @ residual), 2 / n * residual.sum()


def _autograd_gradients(w, b, x, y):
    w = w.detach().clone().requires_grad_(True)
    b = b.detach().clone().requires_grad_(True)
    ((x @ w + b - y) ** 2).mean().backward()
    return w.grad, b.grad


#: Library functions that compute the gradient for the learner (this exercise asks for it by hand).
_AUTOGRAD_SHORTCUTS = (
    "torch.autograd.backward",
    "torch.Tensor.backward",
    "torch.autograd.grad",
    "torch.autograd.functional.*",  # jacobian, hessian, vjp, jvp, hvp, vhp
    "torch.func.grad",
    "torch.func.grad_and_value",
    "torch.func.vjp",
    "torch.func.jvp",
    "torch.func.jacrev",
    "torch.func.jacfwd",
    "torch.func.hessian",
    "torch.func.linearize",
    "torch.autograd.forward_ad.make_dual",
)


#: (N, D) of the checker's cases. The square one comes first: only there does a product with x
#: that sums over the wrong dimension run without a shape error, so the checker can name it.
_MSE_CASES = ((6, 6), (50, 1), (200, 3), (7, 5))


class _HandDerivedWatch(TorchFunctionMode):
    """Watches one call of the answer: did any result require grad, and how often was x computed with?

    A gradient derived by hand builds no autograd graph, so a result that requires grad means some
    autograd route was used (``backward``, ``torch.autograd.grad``, the engine itself). Finite
    differences evaluate the loss at several perturbed weights, and each evaluation multiplies x by a
    weight vector and sums: as ``x @ w_``, ``(x * w_).sum(1)``, ``einsum``, ``F.linear``... So the watch
    counts every product or sum (``_ARITHMETIC``, matched by function name, which covers the
    ``torch.*`` function, the ``Tensor`` method and the operator alike) that takes x, or any tensor of
    x's shape or its transpose (a float64 copy of x, the elementwise product ``x * w``), as an
    argument. The reference needs two (``x @ w`` and ``x.T @ r``); an elementwise answer such as
    ``(r[:, None] * x).mean(0)`` needs three. Metadata and conversions (``x.shape``, ``x.T``,
    ``x.double()``) and indexing (``x[:, j]``, used by a loop over features) are not counted.

    Two more routes around that count are caught. Finite differences can evaluate every nudged weight
    vector in one matrix product, ``x @ W`` with ``W`` of shape ``[D, K]``: a matrix-product family call
    on x whose result is a matrix with more than one row and column (``batched``; a hand-derived gradient
    only ever multiplies x by a vector). And work done outside torch, on ``x.numpy()``, ``x.tolist()``
    or ``np.asarray(x)``, is invisible to any torch-level watch, so such a conversion of x is noted
    (``left_torch``).

    And whatever the route to the loss's values, finite differences must *evaluate* the loss at two
    weight vectors at least, and the loss squares the residuals; a gradient derived by hand squares
    nothing (the derivative of z² is 2z). So squaring is counted too (``squares``): ``pow``, ``square``,
    norms, ``mse_loss``, and a product of a tensor with itself (``r * r``, ``r @ r``, ``dot(r, r)``).
    A tensor counts as x when its last two dimensions are x's shape or its transpose, so ``x[None] @ W``
    is a matrix product with x too.
    """

    _MATRIX_PRODUCTS = frozenset({
        "matmul", "mm", "bmm", "einsum", "tensordot", "linear", "addmm", "baddbmm", "__matmul__", "__rmatmul__",
    })
    _LEAVE_TORCH = frozenset({"numpy", "tolist", "__array__"})
    _SQUARING = frozenset({
        "pow", "pow_", "__pow__", "__ipow__", "float_power", "square", "square_", "norm", "vector_norm", "mse_loss",
    })
    _SELF_PRODUCTS = frozenset({
        "mul", "multiply", "__mul__", "__rmul__", "dot", "inner", "vdot", "matmul", "__matmul__", "einsum", "mm", "bmm",
    })

    _ARITHMETIC = frozenset({
        "matmul", "mm", "mv", "bmm", "dot", "inner", "outer", "einsum", "tensordot", "linear", "bilinear",
        "addmm", "addmv", "baddbmm", "vecdot", "__matmul__", "__rmatmul__",
        "mul", "multiply", "__mul__", "__rmul__", "__imul__", "mul_",
        "sum", "mean", "nansum", "nanmean", "cumsum", "__iadd__",
    })

    def __init__(self, x: torch.Tensor):
        super().__init__()
        self.shapes = {tuple(x.shape), tuple(x.shape[::-1])}
        self.products = 0
        self.batched = False
        self.left_torch = False
        self.required_grad = False
        self.squares = 0

    def _takes_x(self, args, kwargs) -> bool:
        flat = [*args, *kwargs.values()]
        flat += [t for a in flat if isinstance(a, (tuple, list)) for t in a]  # einsum's operands, stack's list
        return any(isinstance(a, torch.Tensor) and a.dim() >= 2 and tuple(a.shape[-2:]) in self.shapes for a in flat)

    def _squares(self, name: str, args) -> bool:
        if name in self._SQUARING:
            return True
        flat = [t for a in args for t in (a if isinstance(a, (tuple, list)) else (a,))]  # einsum's operands
        tensors = [a for a in flat if isinstance(a, torch.Tensor)]
        if name not in self._SELF_PRODUCTS or len(tensors) != 2:
            return False
        a, b = tensors
        # the same values in any shape: r * r, r @ r, einsum("i,i->", r, r), r[None] @ r[:, None]
        return a is b or (a.numel() == b.numel() > 1 and torch.equal(a.reshape(-1), b.reshape(-1)))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in self._LEAVE_TORCH and self._takes_x(args, kwargs):
            self.left_torch = True
        if self._squares(name, args):
            self.squares += 1
        out = func(*args, **kwargs)
        if name in self._ARITHMETIC and self._takes_x(args, kwargs):
            self.products += 1
            if name in self._MATRIX_PRODUCTS and isinstance(out, torch.Tensor) and out.dim() >= 2 \
                    and min(out.shape[-2:]) > 1:
                self.batched = True
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor) and t.requires_grad:
                self.required_grad = True
        return out


#: More products and sums with x than a hand-derived gradient needs (two, three written elementwise),
#: plus slack for a recomputed residual. Finite differences written the plain way multiply x in each of
#: their D + 1 or more loss evaluations (7 on the first case, D = 6); the ones that do not are caught by
#: their squaring (``squares``).
_MAX_PRODUCTS_WITH_X = 5


@exercise(
    "04.mse_gradients",
    "return (dw, db), the gradients of L = mean((x @ w + b - y)**2) for x [N, D], w [D], b [] "
    "and y [N], derived by hand in torch operations (no backward(), torch.autograd, torch.func, finite differences "
    "or NumPy): dw a tensor of shape [D], "
    "db a 0-dim tensor (shape []), not a Python float.",
    reference=_mse_gradients,
    shortcuts=_AUTOGRAD_SHORTCUTS,
    goal="the gradient (derived by hand, without autograd)",
    hint="Start from the residuals, prediction minus target, one per sample. Apply the chain rule to "
    "each squared residual, then average over the samples; a matrix product with x can sum over the "
    "samples for all D weights at once.",
)
def _test_mse_gradients(candidate) -> None:
    g = torch.Generator().manual_seed(5)
    for n, d in _MSE_CASES:
        x = torch.randn(n, d, generator=g)
        y = torch.randn(n, generator=g)
        w = torch.randn(d, generator=g)
        b = torch.randn((), generator=g)
        want_w, want_b = _autograd_gradients(w, b, x, y)
        watch = _HandDerivedWatch(x)
        with torch.no_grad(), watch:
            result = candidate(w.clone(), b.clone(), x.clone(), y.clone())
        if watch.required_grad:
            raise Hint(
                "a tensor in your function required grad: that is autograd computing the gradient, and this "
                "exercise asks for the gradient derived by hand.",
                "Write dw and db as formulas in x, w, b and y: the chain rule applied to the mean of squared "
                "residuals, with no requires_grad, backward() or torch.autograd anywhere.",
            )
        if watch.left_torch:
            raise Hint(
                "your function turned x into a NumPy array or a Python list: the exercise asks for the "
                "gradient in torch operations, which is also the only way the checker can see how it was computed.",
                "Keep x a tensor: the formula is a few tensor operations on x, w, b and y.",
            )
        if watch.batched:
            raise Hint(
                f"for N={n}, D={d} your function multiplied x by a matrix, which evaluates the loss at many "
                "weight vectors at once: that is finite differences, not a gradient derived by hand.",
                "A hand-derived gradient only ever multiplies x by a vector: once by w for the residuals, once "
                "(transposed) by the residuals to sum them back onto the D weights.",
            )
        if watch.squares > 1:
            raise Hint(
                f"for N={n}, D={d} your function squared something {watch.squares} times: it evaluated the loss "
                "at several weight vectors, which is finite differences, not a gradient derived by hand.",
                "A hand-derived gradient squares nothing: the chain rule turns the derivative of each squared "
                "residual into twice the residual.",
            )
        if watch.products > _MAX_PRODUCTS_WITH_X:
            raise Hint(
                f"for N={n}, D={d} your function multiplied or summed x {watch.products} times: that is finite "
                "differences (evaluating the loss at nudged weights), not a gradient derived by hand.",
                "A hand-derived gradient needs x twice: once for the residuals, once to sum them back onto the "
                "D weights.",
            )
        try:
            dw, db = result
        except (TypeError, ValueError) as exc:
            raise AssertionError(f"return a pair (dw, db); got {type(result).__name__}") from exc
        # tensors, like w and b: a Python float for db drops its dtype and device (and any batch of biases)
        for what, value, shape in (("dw", dw, f"[{d}]"), ("db", db, "[]")):
            if not isinstance(value, torch.Tensor):
                raise Hint(
                    f"{what} should be a tensor of shape {shape}, like "
                    f"{'w' if what == 'dw' else 'b'}, got a {type(value).__name__}.",
                    "Keep the gradient a tensor: .item(), float() or .tolist() turn a tensor into Python "
                    "numbers, which the update w - lr * dw, b - lr * db does not need.",
                )
        dw, db = dw.to(torch.float32), db.to(torch.float32)
        # Exact shapes: a [D, 1] dw or a [1] / [1, 1] db would broadcast wrongly in w - lr * dw.
        if tuple(dw.shape) != (d,):
            raise Hint(
                f"with N={n}, D={d}, dw should have shape [{d}], the shape of w (one entry per weight), but "
                f"has shape {list(dw.shape)}: in the update w - lr * dw it would broadcast to the wrong shape.",
                "A residual of shape [N, 1] (from unsqueeze, or a keepdim=True reduction) turns the product "
                "with x into a column; keep the residuals 1-D, of shape [N], like y.",
            )
        if tuple(db.shape) != ():
            raise Hint(
                f"db should be a 0-dim tensor (shape []), the shape of b, but has shape {list(db.shape)}.",
                "Reduce over every residual at once, without dim= or keepdim=True, so that the result has "
                "no dimensions left.",
            )
        if torch.allclose(dw, want_w, atol=1e-5) and torch.allclose(db, want_b, atol=1e-5):
            continue
        got = (
            f"for N={n}, D={d} autograd gives dw={want_w.numpy().round(4)}, db={want_b.item():.4f}; "
            f"you returned dw={dw.numpy().round(4)}, db={db.item():.4f}."
        )
        residual = x @ w + b - y
        if torch.allclose(dw, -want_w, atol=1e-5) and torch.allclose(db, -want_b, atol=1e-5):
            raise Hint(
                f"{got} Your gradients have the wrong sign: they point downhill, and a descent step "
                "against them would climb.",
                "Check the sign of the residual's derivative: it depends on whether the residual is "
                "prediction minus target or target minus prediction.",
            )
        if torch.allclose(2 * dw, want_w, atol=1e-5) and torch.allclose(2 * db, want_b, atol=1e-5):
            raise Hint(
                f"{got} Your gradients are half the right ones: a constant factor is missing.",
                "The chain rule on a square: the derivative of z² with respect to z is not z.",
            )
        if torch.allclose(dw, n * want_w, atol=1e-4) and torch.allclose(db, n * want_b, atol=1e-4):
            raise Hint(
                f"{got} Your gradients are N times too large: you differentiated a sum of squares, "
                "not their mean.",
                "The loss averages over the N samples, and so must its gradient.",
            )
        if n == d and torch.allclose(dw, 2 / n * (x @ residual), atol=1e-5):
            raise Hint(
                f"{got} Your dw sums over the wrong dimension of x (it is transposed): entry j of yours "
                "collects sample j over all features, where it should collect feature j over all samples.",
                "Write which index each factor carries (sample i, feature j): the gradient of weight j "
                "is an average over i, so the matrix product must sum over the sample index.",
            )
        if torch.allclose(dw, want_w, atol=1e-5):
            raise Hint(f"{got} Your dw is right but db is not.",
                       "b adds the same amount to every prediction: what multiplies the residual for b?")
        if torch.allclose(db, want_b, atol=1e-5):
            raise Hint(f"{got} Your db is right but dw is not.",
                       "Each weight w[j] multiplies feature j: the chain rule brings that feature into its gradient.")
        raise Hint(
            f"{got} Both differ from autograd's.",
            "Start from the residuals, prediction minus target; apply the chain rule to each squared "
            "residual and average over the samples.",
        )
