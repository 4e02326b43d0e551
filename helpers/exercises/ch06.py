"""Exercises of chapter 06 (data loading): checkers and reference solutions."""

from __future__ import annotations

import math

import torch

from . import exercise

# --------------------------------------------------------------------------
# 06.shard_range
# --------------------------------------------------------------------------


def _shard_range(n: int, worker_id: int, num_workers: int) -> range:
    """The contiguous block of ``range(n)`` that one worker of an ``IterableDataset`` reads.

    Args:
        n: number of samples in the stream (>= 0).
        worker_id: this worker's id, ``0 <= worker_id < num_workers``
            (``get_worker_info().id``).
        num_workers: how many workers share the stream (>= 1).

    Returns:
        ``range(start, stop)``. The blocks of workers ``0..num_workers-1`` lie
        back to back in worker order and cover ``range(n)`` exactly once; the
        first ``n % num_workers`` workers get one index more than the others
        (sizes ``n // num_workers`` or one more, as ``numpy.array_split``
        splits), so no block exceeds ``ceil(n / num_workers)``.
    """
    base, extra = divmod(n, num_workers)
    start = worker_id * base + min(worker_id, extra)
    return range(start, start + base + (1 if worker_id < extra else 0))


_SHARD_CASES = [(n, k) for k in (1, 2, 3, 4, 5, 8) for n in (0, 1, 2, 3, 5, 7, 10, 11, 16, 33, 100, 1001)]


def _as_indices(result, n: int, worker_id: int, num_workers: int) -> list[int]:
    try:
        return [int(i) for i in result]
    except (TypeError, ValueError) as exc:
        raise AssertionError(
            f"shard_range({n}, {worker_id}, {num_workers}) returned {type(result).__name__}; "
            "return a range of ints, e.g. range(start, stop)"
        ) from exc


@exercise(
    "06.shard_range",
    "return the contiguous range of indices that worker `worker_id` of `num_workers` reads from a "
    "stream of n samples: together the workers cover 0..n-1 exactly once, worker 0 first, and no "
    "worker gets more than ceil(n / num_workers) indices.",
    reference=_shard_range,
)
def _test_shard_range(candidate) -> None:
    for n, k in _SHARD_CASES:
        parts = [_as_indices(candidate(n, w, k), n, w, k) for w in range(k)]
        flat = [i for part in parts for i in part]
        outside = sorted({i for i in flat if not 0 <= i < n})
        if outside:
            raise AssertionError(
                f"for n={n} and {k} workers your shards contain {outside[:5]}, outside range({n})"
            )
        counts = [0] * n
        for i in flat:
            counts[i] += 1
        missing = [i for i, c in enumerate(counts) if c == 0]
        repeated = [i for i, c in enumerate(counts) if c > 1]
        if missing and not repeated and len(flat) == k * (n // k):
            raise AssertionError(
                f"for n={n} and {k} workers the indices {missing[:5]} are never read: `n // num_workers` "
                f"drops the remainder ({n} % {k} = {n % k}); hand the leftover indices to some workers"
            )
        if missing:
            raise AssertionError(f"for n={n} and {k} workers no worker reads the indices {missing[:5]}")
        if repeated:
            raise AssertionError(
                f"for n={n} and {k} workers the indices {repeated[:5]} are read by more than one worker "
                "(or twice by one): each index must belong to exactly one worker"
            )
        for w, part in enumerate(parts):
            if part and part != list(range(part[0], part[0] + len(part))):
                raise AssertionError(
                    f"for n={n} and {k} workers, worker {w} reads {part[:6]}{'...' if len(part) > 6 else ''}: "
                    "that is not one contiguous block (strided sharding is correct, but this exercise "
                    "asks for range(start, stop) with step 1)"
                )
        if flat != list(range(n)):
            raise AssertionError(
                f"for n={n} and {k} workers the blocks are not in worker order: worker 0 must read the "
                "first block, worker 1 the next one, and so on"
            )
        biggest = max(len(part) for part in parts)
        if biggest > math.ceil(n / k):
            sizes = [len(part) for part in parts]
            raise AssertionError(
                f"for n={n} and {k} workers the block sizes are {sizes}: no worker may get more than "
                f"ceil({n} / {k}) = {math.ceil(n / k)}; share the work out"
            )


# --------------------------------------------------------------------------
# 06.class_weights
# --------------------------------------------------------------------------


def _class_weights(targets: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Per-sample weights for ``WeightedRandomSampler`` that balance the classes.

    Args:
        targets: int64 ``[N]`` labels in ``0..num_classes-1``.
        num_classes: number of classes (some may not occur in ``targets``).

    Returns:
        float64 ``[N]``: ``1 / count[targets[i]]``, where ``count`` is the
        number of samples of each class. Every class that occurs then has a
        total weight of 1, so each draw picks each such class with the same
        probability.
    """
    counts = torch.bincount(targets, minlength=num_classes)
    return 1.0 / counts[targets].double()


@exercise(
    "06.class_weights",
    "return one float weight per sample (shape [N]), inversely proportional to the number of samples "
    "of that sample's class, so that every class present has the same total weight.",
    reference=_class_weights,
)
def _test_class_weights(candidate) -> None:
    g = torch.Generator().manual_seed(6)
    sizes = {0: 40, 1: 10, 2: 5, 4: 25}  # class 3 does not occur
    targets = torch.cat([torch.full((n,), c) for c, n in sizes.items()])
    targets = targets[torch.randperm(len(targets), generator=g)]
    num_classes = 5
    weights = candidate(targets.clone(), num_classes)
    if not isinstance(weights, torch.Tensor):
        try:
            weights = torch.as_tensor(weights)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise AssertionError(f"return a tensor of shape [N]; got {type(weights).__name__}") from exc
    n = len(targets)
    if weights.shape == (num_classes,):
        raise AssertionError(
            f"you returned {num_classes} per-class weights; WeightedRandomSampler needs one weight per "
            f"sample, shape [{n}]: index the per-class weights with the targets"
        )
    assert weights.shape == (n,), f"expected one weight per sample, shape [{n}]; got {tuple(weights.shape)}"
    assert weights.is_floating_point(), (
        f"the weights must be floats, got {weights.dtype} (integer division rounds 1/count to 0)"
    )
    assert torch.isfinite(weights).all() and (weights > 0).all(), "every sample's weight must be positive and finite"
    counts = torch.bincount(targets, minlength=num_classes).double()
    w = weights.double()
    per_class = torch.bincount(targets, weights=w, minlength=num_classes)
    present = counts > 0
    count_like = counts[targets] / counts[targets].sum()
    if torch.allclose(w / w.sum(), count_like, rtol=1e-4):
        raise AssertionError(
            "your weights grow with the class size, so the common classes get drawn even more often; "
            "use the inverse, 1 / (number of samples of the class)"
        )
    for c in range(num_classes):
        members = w[targets == c]
        if len(members) and not torch.allclose(members, members[0].expand_as(members), rtol=1e-6):
            raise AssertionError(f"samples of the same class ({c}) must all get the same weight")
    total = per_class[present]
    assert torch.allclose(total, total.mean().expand_as(total), rtol=1e-4), (
        f"each class should end up with the same total weight, but the totals per class are "
        f"{[round(v, 3) for v in total.tolist()]} for class sizes {counts[present].int().tolist()}: "
        "weight each sample by 1 / (size of its class)"
    )
