"""Exercises of chapter 04 (linear regression from scratch): checkers and reference solutions."""

from __future__ import annotations

import torch

from . import exercise

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
    try:
        first, second = result
        return float(first), float(second)
    except (TypeError, ValueError) as exc:
        raise AssertionError(
            f"return two numbers {what}, e.g. `return w.item(), b.item()`; got {type(result).__name__}"
        ) from exc


@exercise(
    "04.closed_form_fit",
    "return (w, b), the least-squares line y ≈ w*x + b for 1-D tensors x and y, without gradient "
    "descent (hint: torch.linalg.lstsq with the design matrix [x, 1]).",
    reference=_closed_form_fit,
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
        w, b = _as_pair(candidate(x.clone(), y.clone()), "(w, b)")
        where = f"on data y = {w_true}x + {b_true} + noise with x in [{x.min():.0f}, {x.max():.0f}]"
        assert abs(w - w_true) < 0.3 and abs(b - b_true) < 1.0, (
            f"{where} you returned w={w:.3f}, b={b:.3f}, far from the truth. "
            "Did you include a column of ones for the intercept b?"
        )
        assert abs(w - w_exact) < 1e-3 and abs(b - b_exact) < 1e-3, (
            f"{where} the least-squares answer is w={w_exact:.4f}, b={b_exact:.4f} but you returned "
            f"w={w:.4f}, b={b:.4f}. Least squares fits w and b together: b = mean(y) - w*mean(x)."
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


@exercise(
    "04.mse_gradients",
    "return (dw, db), the gradients of L = mean((x @ w + b - y)**2) for x [N, D], w [D], b [] "
    "and y [N], computed by hand (no backward): dw has shape [D], db shape [].",
    reference=_mse_gradients,
)
def _test_mse_gradients(candidate) -> None:
    g = torch.Generator().manual_seed(5)
    for n, d in [(50, 1), (200, 3), (7, 5)]:
        x = torch.randn(n, d, generator=g)
        y = torch.randn(n, generator=g)
        w = torch.randn(d, generator=g)
        b = torch.randn((), generator=g)
        want_w, want_b = _autograd_gradients(w, b, x, y)
        with torch.no_grad():
            result = candidate(w.clone(), b.clone(), x.clone(), y.clone())
        try:
            dw, db = result
        except (TypeError, ValueError) as exc:
            raise AssertionError(f"return a pair (dw, db); got {type(result).__name__}") from exc
        dw, db = torch.as_tensor(dw, dtype=torch.float32), torch.as_tensor(db, dtype=torch.float32)
        # Exact shapes: a [D, 1] dw or a [1] / [1, 1] db would broadcast wrongly in w - lr * dw.
        assert tuple(dw.shape) == (d,), (
            f"with D={d}, dw should have shape [{d}], the shape of w (one entry per weight), but has "
            f"shape {list(dw.shape)}. Keep the residual r = x @ w + b - y of shape [N] (no unsqueeze, "
            "no keepdim) so that x.T @ r has shape [D]."
        )
        assert tuple(db.shape) == (), (
            f"db should be a 0-dim tensor (shape []), the shape of b, but has shape {list(db.shape)}: "
            "sum all residuals with r.sum(), without dim= or keepdim=True."
        )
        if torch.allclose(dw, want_w, atol=1e-5) and torch.allclose(db, want_b, atol=1e-5):
            continue
        if torch.allclose(dw, -want_w, atol=1e-5):
            hint = (
                "Your gradient has the wrong sign: with r = y - prediction the chain rule brings a minus "
                "sign (dr/dw = -x); it is simpler to use r = prediction - y"
            )
        elif torch.allclose(2 * dw, want_w, atol=1e-5):
            hint = "Your gradient is half the right one: d/dz of z² is 2z"
        elif torch.allclose(dw, n * want_w, atol=1e-4):
            hint = "Your gradient is N times too large: the loss is a mean, so divide the sum by N"
        else:
            hint = "Compare with autograd: the residual r = x @ w + b - y, dw = 2/N * x.T @ r, db = 2/N * r.sum()"
        raise AssertionError(
            f"for N={n}, D={d} autograd gives dw={want_w.numpy().round(4)}, db={want_b.item():.4f}; "
            f"you returned dw={dw.numpy().round(4)}, db={db.item():.4f}. {hint}"
        )
