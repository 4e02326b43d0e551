"""Exercises of chapter 01 (tensors): ``01.pairwise_sq_dists``, ``01.one_hot`` and ``01.softmax``."""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import exercise

# --------------------------------------------------------------------------
# 01.pairwise_sq_dists
# --------------------------------------------------------------------------


def _pairwise_sq_dists_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Squared Euclidean distances between the rows of ``a`` [N, D] and ``b`` [M, D] -> [N, M].

    ``a[:, None, :]`` has shape [N, 1, D] and ``b[None, :, :]`` has [1, M, D];
    their difference broadcasts to [N, M, D], and summing the squares over the
    last dimension leaves [N, M].
    """
    diff = a[:, None, :] - b[None, :, :]
    return (diff**2).sum(dim=-1)


def _same_dtype(got: torch.Tensor, want: torch.dtype) -> None:
    assert got.dtype == want, (
        f"{want} inputs should give a {want} result (the same dtype as the inputs), got {got.dtype}. "
        "Leave the dtype alone: no .double(), .float() or dtype= argument; arithmetic on the inputs "
        "keeps their dtype by itself."
    )


@exercise(
    "01.pairwise_sq_dists",
    "write pairwise_sq_dists(a, b) that takes a [N, D] and b [M, D] and returns the [N, M] tensor "
    "whose entry [i, j] is the squared Euclidean distance between a[i] and b[j], using broadcasting "
    "(no Python loops), with the same dtype as the inputs (float32 in, float32 out; float64 in, "
    "float64 out).",
    _pairwise_sq_dists_reference,
)
def _test_pairwise_sq_dists(pairwise_sq_dists: Callable) -> None:
    g = torch.Generator().manual_seed(0)
    # (N, M, D): square, N != M, D = 1, a single row, and a larger case.
    for n, m, d in [(3, 3, 2), (4, 6, 3), (5, 2, 1), (1, 7, 4), (40, 30, 16)]:
        a = torch.randn(n, d, generator=g, dtype=torch.float64)
        b = torch.randn(m, d, generator=g, dtype=torch.float64)
        got = pairwise_sq_dists(a, b)
        assert isinstance(got, torch.Tensor), f"return a tensor, got {type(got).__name__}"
        _same_dtype(got, a.dtype)
        assert got.shape == (n, m), (
            f"for a of shape {(n, d)} and b of shape {(m, d)} the result should have shape {(n, m)}, "
            f"got {tuple(got.shape)}. Give a a new axis in the middle and b one in front: "
            "a[:, None, :] - b[None, :, :] has shape [N, M, D]; then sum over the last dimension."
        )
        want = torch.cdist(a, b) ** 2
        close = torch.allclose(got.to(torch.float64), want, rtol=1e-6, atol=1e-8)
        if not close and torch.allclose(got.to(torch.float64), want.sqrt(), rtol=1e-6, atol=1e-8):
            raise AssertionError("these are the distances, not the squared distances: leave out the square root.")
        worst = (got.to(torch.float64) - want).abs().max().item()
        assert close, (
            f"for a {tuple(a.shape)} and b {tuple(b.shape)} some entries are off by up to {worst:.3g}. "
            "Entry [i, j] should be ((a[i] - b[j]) ** 2).sum()."
        )
    # float32 in, float32 out: no silent change of dtype either way.
    a32 = torch.randn(4, 3, generator=g)
    got = pairwise_sq_dists(a32, a32[:2])
    assert isinstance(got, torch.Tensor), f"return a tensor, got {type(got).__name__}"
    _same_dtype(got, torch.float32)
    assert torch.allclose(got, torch.cdist(a32, a32[:2]) ** 2, rtol=1e-4, atol=1e-4), "wrong values for float32 inputs"


# --------------------------------------------------------------------------
# 01.one_hot
# --------------------------------------------------------------------------


def _one_hot_reference(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """float32 [N, num_classes] with a 1.0 at ``[i, labels[i]]`` and 0.0 elsewhere.

    Advanced indexing with two index tensors of length N writes one entry per row.
    """
    out = torch.zeros(labels.shape[0], num_classes, dtype=torch.float32, device=labels.device)
    out[torch.arange(labels.shape[0], device=labels.device), labels] = 1.0
    return out


@exercise(
    "01.one_hot",
    "write one_hot(labels, num_classes) that takes int64 class indices of shape [N] and returns a "
    "float32 tensor of shape [N, num_classes] with 1.0 at [i, labels[i]] and 0.0 everywhere else, "
    "using indexing (start from torch.zeros).",
    _one_hot_reference,
)
def _test_one_hot(one_hot: Callable) -> None:
    cases = [
        # the largest class (4) never occurs: num_classes, not labels.max() + 1, sets the width
        (torch.tensor([0, 3, 3, 1]), 5),
        (torch.tensor([2, 0, 1]), 3),
        (torch.tensor([1]), 2),
        (torch.randint(0, 10, (50,), generator=torch.Generator().manual_seed(0)), 10),
    ]
    for labels, num_classes in cases:
        given = labels.clone()
        got = one_hot(labels, num_classes)
        n = labels.shape[0]
        assert isinstance(got, torch.Tensor), f"return a tensor, got {type(got).__name__}"
        assert got.shape == (n, num_classes), (
            f"for {n} labels and num_classes={num_classes} the result should have shape "
            f"{(n, num_classes)}, got {tuple(got.shape)}. One row per label, one column per class; "
            "use num_classes for the width, not labels.max() + 1."
        )
        assert got.dtype == torch.float32, (
            f"the result should be float32 (losses and matmuls want floats), got {got.dtype}: "
            "create it with torch.zeros(..., dtype=torch.float32) or convert with .float()."
        )
        assert torch.equal(labels, given), "your function changed the labels tensor in place: leave its input alone."
        want = torch.eye(num_classes)[given]
        if not torch.equal(got, want):
            row = int((got != want).any(dim=1).nonzero()[0])
            raise AssertionError(
                f"row {row} should be {want[row].tolist()} for label {int(labels[row])}, got {got[row].tolist()}. "
                "Index rows with torch.arange(N) and columns with labels, together: out[torch.arange(N), labels] = 1."
            )


# --------------------------------------------------------------------------
# 01.softmax
# --------------------------------------------------------------------------


def _softmax_reference(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Softmax of ``x`` along ``dim``: ``exp(x) / exp(x).sum(dim)``, same shape and dtype as ``x``.

    Subtracting the maximum along ``dim`` first leaves the result unchanged
    (numerator and denominator are both multiplied by ``exp(-max)``) and keeps
    ``exp`` from overflowing: float32 ``exp`` is ``inf`` above about 88.7.
    ``keepdim=True`` keeps the reduced dimension as size 1, so the maximum and
    the sum broadcast back along ``dim``. ``x`` itself is left unchanged.
    """
    shifted = x - x.amax(dim=dim, keepdim=True)
    e = shifted.exp()
    return e / e.sum(dim=dim, keepdim=True)


#: Every spelling of PyTorch's own softmax (Tensor.softmax and Tensor.log_softmax come with
#: the torch.* names; nn.Softmax calls F.softmax from inside torch, so it is named as a class).
_LIBRARY_SOFTMAX = (
    "torch.softmax", "torch.log_softmax", "torch.special.softmax", "torch.special.log_softmax",
    "torch.nn.functional.softmax", "torch.nn.functional.log_softmax", "torch.nn.Softmax", "torch.nn.LogSoftmax",
)


def _run_softmax(softmax: Callable, x: torch.Tensor, dim: int, label: str):
    """Call the candidate on a copy of ``x``; turn a broadcasting error into a hint about keepdim."""
    given = x.clone()
    try:
        got = softmax(given, dim)
    except RuntimeError as exc:
        if isinstance(exc, NotImplementedError) or "must match the size of tensor" not in str(exc):
            raise
        raise AssertionError(
            f"for {label}, broadcasting failed ({exc}). A reduction along dim={dim} removes that "
            "dimension; pass keepdim=True to amax and sum so the result broadcasts back against x."
        ) from exc
    assert torch.equal(given, x), (
        f"for {label}, your function changed x in place. Subtract with x - m (a new tensor), "
        "not x.sub_(m) or x -= m: the caller's tensor must stay as it was."
    )
    return got


@exercise(
    "01.softmax",
    "write softmax(x, dim) that returns exp(x) / exp(x).sum(dim) along dimension dim of a float tensor "
    "of any shape: same shape and dtype as x, positive values that sum to 1 along dim. Subtract "
    "x.amax(dim=dim, keepdim=True) first so that exp cannot overflow, use keepdim=True so the sums "
    "broadcast back, leave x unchanged, and do not call torch.softmax or F.softmax.",
    _softmax_reference,
    shortcuts=_LIBRARY_SOFTMAX,
    goal="softmax from amax, exp and sum",
)
def _test_softmax(softmax: Callable) -> None:
    g = torch.Generator().manual_seed(1)
    cases = [
        # (label, x, dim): non-square first (a missing keepdim fails loudly), then a square
        # matrix (a missing keepdim broadcasts along the wrong dimension without an error),
        # other dims, 3-D, and logits large enough to overflow exp.
        ("x of shape [4, 3], dim=1", torch.randn(4, 3, generator=g, dtype=torch.float64) * 3, 1),
        ("a square x of shape [3, 3], dim=1", torch.randn(3, 3, generator=g, dtype=torch.float64) * 3, 1),
        ("a square x of shape [3, 3], dim=0", torch.randn(3, 3, generator=g, dtype=torch.float64) * 3, 0),
        ("x of shape [2, 3, 5], dim=-1", torch.randn(2, 3, 5, generator=g, dtype=torch.float64), -1),
        ("x of shape [2, 3, 5], dim=1", torch.randn(2, 3, 5, generator=g, dtype=torch.float64), 1),
        ("float32 logits up to 1000, dim=1", torch.tensor([[1000.0, 999.0, 998.0, 0.0], [-1000.0, -1001.0, 50.0, 60.0]]), 1),
    ]
    for label, x, dim in cases:
        want = torch.softmax(x, dim=dim)
        got = _run_softmax(softmax, x, dim, label)
        assert isinstance(got, torch.Tensor), f"return a tensor, got {type(got).__name__}"
        assert got.shape == x.shape, (
            f"for {label} the result should keep the shape {tuple(x.shape)}, got {tuple(got.shape)}: "
            "softmax rescales the values along dim, it does not remove dim."
        )
        assert got.dtype == x.dtype, f"for {label} the result should stay {x.dtype}, got {got.dtype}"
        if not torch.isfinite(got).all():
            raise AssertionError(
                f"for {label} your result contains inf or nan: exp overflowed. Subtract "
                f"x.amax(dim=dim, keepdim=True) before exp; that does not change the softmax."
            )
        sums = got.sum(dim=dim)
        if not torch.allclose(sums, torch.ones_like(sums), atol=1e-5):
            raise AssertionError(
                f"for {label} the values along dim={dim} should sum to 1, but they sum to values from "
                f"{sums.min().item():.4g} to {sums.max().item():.4g}. Divide by the sum over dim={dim} "
                "with keepdim=True, so that it broadcasts back along that same dimension."
            )
        worst = (got - want).abs().max().item()
        # float32 tolerates the rounding of other correct formulas (exp(x - logsumexp) at x ~ 1000)
        tol = 1e-4 if x.dtype == torch.float32 else 1e-8
        assert torch.allclose(got, want, rtol=tol, atol=tol), (
            f"for {label} some values are off by up to {worst:.3g}, although they sum to 1: "
            f"each entry should be exp(x) divided by the sum of exp(x) along dim={dim}."
        )
