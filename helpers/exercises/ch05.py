"""Exercises of chapter 05 (an MLP on MNIST): checkers and reference solutions."""

from __future__ import annotations

import numbers

import torch

from . import exercise

# --------------------------------------------------------------------------
# 05.normalization_constants
# --------------------------------------------------------------------------


def _normalization_constants(images: torch.Tensor) -> tuple[float, float]:
    """Mean and standard deviation of all pixels, after scaling them to [0, 1].

    Args:
        images: uint8 ``[N, H, W]`` (0-255), e.g. ``MNIST(...).data``.

    Returns:
        ``(mean, std)`` as Python floats: one mean and one standard deviation
        over every pixel of every image (not per image), the values that
        ``transforms.v2.Normalize`` takes. For MNIST's training images they
        round to 0.1307 and 0.3081.
    """
    pixels = images.double() / 255
    return pixels.mean().item(), pixels.std().item()


@exercise(
    "05.normalization_constants",
    "return (mean, std) of all pixels of a uint8 tensor [N, 28, 28], after scaling the pixels "
    "to [0, 1]: one mean and one std over every pixel of every image, as Python floats.",
    reference=_normalization_constants,
)
def _test_normalization_constants(candidate) -> None:
    g = torch.Generator().manual_seed(5)
    # Images of different brightness: the spread *between* images matters, so the
    # average of per-image standard deviations is clearly smaller than the pooled one.
    brightness = torch.randint(0, 160, (64, 1, 1), generator=g)
    noise = torch.randint(0, 96, (64, 28, 28), generator=g)
    images = (brightness + noise).to(torch.uint8)
    pixels = images.double() / 255
    want_mean, want_std = pixels.mean().item(), pixels.std().item()
    result = candidate(images.clone())
    try:
        mean, std = (float(v) for v in result)
    except (TypeError, ValueError) as exc:
        raise AssertionError(
            f"return two numbers (mean, std), e.g. `return m.item(), s.item()`; got {type(result).__name__}"
        ) from exc
    if abs(mean - 255 * want_mean) < 1e-2 * 255:
        raise AssertionError(
            f"your mean {mean:.2f} is on the 0-255 scale; divide the pixels by 255 first (as ToDtype(scale=True) does)"
        )
    assert abs(mean - want_mean) < 1e-4, (
        f"the mean of all pixels in [0, 1] is {want_mean:.4f}, you returned {mean:.4f}"
    )
    per_image_std = pixels.flatten(1).std(dim=1).mean().item()
    if abs(std - per_image_std) < 1e-3:
        raise AssertionError(
            f"your std {std:.4f} is the average of per-image standard deviations; "
            f"take one std over all pixels of all images (it is {want_std:.4f} here)"
        )
    assert abs(std - want_std) < 1e-4, (
        f"the std of all pixels in [0, 1] is {want_std:.4f}, you returned {std:.4f}"
    )


# --------------------------------------------------------------------------
# 05.top_confusions
# --------------------------------------------------------------------------


def _top_confusions(cm: torch.Tensor, k: int) -> list[tuple[int, int, int]]:
    """The ``k`` most frequent mistakes in a confusion matrix.

    Args:
        cm: int ``[C, C]`` counts, ``cm[true, predicted]`` (as
            ``helpers.training.confusion_matrix`` returns).
        k: how many to return (at most).

    Returns:
        Up to ``k`` tuples ``(true, predicted, count)`` of Python ints, for
        off-diagonal cells with a count above zero, largest count first.
    """
    off_diagonal = cm.clone()
    off_diagonal.fill_diagonal_(0)
    counts, flat = off_diagonal.flatten().sort(descending=True, stable=True)
    c = cm.shape[1]
    return [(i // c, i % c, n) for n, i in zip(counts.tolist(), flat.tolist()) if n > 0][:k]


def _as_int(value) -> int | None:
    """``value`` as a Python int when it is an integer, else None.

    Accepted: Python ints, NumPy integer scalars and 0-dim torch integer tensors
    (what iterating over an int64 tensor gives). Refused: floats of any kind, even
    9.0, and bools.
    """
    if isinstance(value, torch.Tensor):
        integer = not (value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool)
        return int(value.item()) if value.dim() == 0 and integer else None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return None


_INTS = (
    "return a list of (true, predicted, count) tuples of ints, e.g. [(4, 9, 12), (7, 2, 9)]; Python "
    "ints are best (.tolist() gives them), NumPy or 0-dim torch integers are accepted too, floats are not"
)


def _normalise_answer(result) -> list[tuple[int, int, int]]:
    try:
        items = [tuple(item) for item in result]
    except TypeError as exc:
        raise AssertionError(f"{_INTS}; got {type(result).__name__}") from exc
    out = []
    for item in items:
        if len(item) != 3:
            raise AssertionError(f"{_INTS}; one of your items is {item!r}")
        values = [_as_int(v) for v in item]
        if None in values:
            bad = item[values.index(None)]
            raise AssertionError(
                f"{_INTS}; your item {item!r} contains {bad!r} ({type(bad).__name__}). A count of "
                "mistakes is a whole number: read it straight from the integer matrix, do not "
                "compute it with floats."
            )
        out.append(tuple(values))
    return out


@exercise(
    "05.top_confusions",
    "return the k most frequent mistakes in a confusion matrix cm[true, predicted] as a list of "
    "(true, predicted, count) tuples of ints, largest count first, leaving out the diagonal (correct "
    "predictions) and zero counts.",
    reference=_top_confusions,
)
def _test_top_confusions(candidate) -> None:
    cm = torch.tensor(
        [
            [50, 0, 3, 0],
            [1, 40, 0, 7],
            [0, 9, 45, 0],
            [5, 0, 2, 60],
        ]
    )
    want = [(2, 1, 9), (1, 3, 7), (3, 0, 5)]
    got = _normalise_answer(candidate(cm.clone(), 3))
    if got and all(t == p for t, p, _ in got):
        raise AssertionError("those are diagonal cells (correct predictions); leave the diagonal out")
    if any(t == p for t, p, _ in got):
        raise AssertionError(f"{got} contains a diagonal cell (a correct prediction); leave the diagonal out")
    if got == [(p, t, n) for t, p, n in want]:
        raise AssertionError("true and predicted are swapped: cm[true, predicted] has the true class as its row")
    if sorted(got) == sorted(want) and got != want:
        raise AssertionError(f"the right cells in the wrong order: sort by count, largest first (expected {want})")
    assert got == want, f"for cm = {cm.tolist()} and k = 3 the answer is {want}, you returned {got}"
    # k larger than the number of mistakes: only cells with a count above zero
    small = torch.tensor([[8, 2, 0], [0, 9, 0], [0, 1, 7]])
    got = _normalise_answer(candidate(small.clone(), 5))
    want = [(0, 1, 2), (2, 1, 1)]
    assert got == want, (
        f"for cm = {small.tolist()} and k = 5 the answer is {want} (only non-zero mistakes), you returned {got}"
    )
    # Two big mistakes in one row: taking only the largest mistake of each true class
    # (the maximum of each row) misses (0, 2, 7).
    rows = torch.tensor([[50, 9, 7, 0], [0, 40, 0, 0], [0, 0, 45, 0], [5, 0, 0, 60]])
    got = _normalise_answer(candidate(rows.clone(), 3))
    want = [(0, 1, 9), (0, 2, 7), (3, 0, 5)]
    if got != want and (0, 2, 7) not in got:
        raise AssertionError(
            f"for cm = {rows.tolist()} and k = 3 the answer is {want}: row 0 holds the two biggest "
            f"mistakes, but you returned {got}. Rank all off-diagonal cells together (flatten, then "
            "sort), not only the largest mistake of each row."
        )
    assert got == want, f"for cm = {rows.tolist()} and k = 3 the answer is {want}, you returned {got}"
