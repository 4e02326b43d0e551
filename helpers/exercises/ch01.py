"""Exercises of chapter 01 (tensors): ``01.pairwise_sq_dists`` and ``01.one_hot``."""

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
