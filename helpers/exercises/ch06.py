"""Exercises of chapter 06 (data loading): checkers and reference solutions."""

from __future__ import annotations

import math
import time

import torch

from . import Hint, Shortcut, exercise

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
        (sizes ``n // num_workers`` or one more, the split ``numpy.array_split``
        makes), so any two blocks differ in size by at most one.
    """
    base, extra = divmod(n, num_workers)
    start = worker_id * base + min(worker_id, extra)
    return range(start, start + base + (1 if worker_id < extra else 0))


#: (n, num_workers): remainders 0 to k - 1, more workers than samples, and n = 0.
_SHARD_CASES = [(n, k) for k in (1, 2, 3, 4, 5, 8) for n in (0, 1, 2, 3, 5, 7, 10, 11, 16, 33, 100, 1001)]
_SHARD_CASES += [(10, 4), (9, 6), (1003, 7), (65, 64)]  # cases where a ceil-sized split leaves a worker 2+ short

#: Every n < 300 for every k <= 16: float boundaries go wrong for 48 of these pairs (n=15, k=11 first).
_DENSE_SHARD_CASES = [(n, k) for n in range(300) for k in range(1, 17)]
_DENSE_SCAN_SECONDS = 0.25


def _shards_look_right(blocks: list, n: int) -> bool:
    """Ranges of step 1, back to back from 0 to n, sizes within one of each other (a quick test)."""
    if not all(isinstance(b, range) and b.step == 1 for b in blocks):
        return False
    stops = [0] + [b.stop for b in blocks]
    if any(b.start != stop for b, stop in zip(blocks, stops)) or stops[-1] != n:
        return False
    sizes = [len(b) for b in blocks]
    return max(sizes) - min(sizes) <= 1


def _float_boundaries(blocks: list, n: int, k: int) -> None:
    """Name the rounding of boundaries computed as int(w * (n / k)) in floating point, when the blocks are that."""
    if not all(isinstance(b, range) for b in blocks):
        return
    floats = [int(w * (n / k)) for w in range(k + 1)]
    exact = [w * n // k for w in range(k + 1)]
    if [b.start for b in blocks] + [blocks[-1].stop] != floats or floats == exact:
        return
    w = next(w for w in range(k + 1) if floats[w] != exact[w])
    lost = sorted(set(range(n)) - {i for b in blocks for i in b})
    raise Hint(
        f"for n={n} and {k} workers your blocks are {[(b.start, b.stop) for b in blocks]}: no worker reads the "
        f"indices {lost[:5]}. Your boundaries are w * (n / num_workers) truncated to int, and n / num_workers is a float: "
        f"{w} * ({n} / {k}) comes out as {w * (n / k)!r}, not {w * n / k:g}, so a block stops one short.",
        "Floating-point division rounds; integer arithmetic (//, % or divmod on the ints) is exact, so compute the "
        "boundaries from whole numbers only.",
    )


#: Library functions that split a sequence into near-equal parts for the learner.
_LIBRARY_SPLITS = (
    Shortcut("torch.tensor_split", does="`torch.tensor_split` (or `Tensor.tensor_split`)"),
    Shortcut("torch.chunk", does="`torch.chunk` (or `Tensor.chunk`)"),
    Shortcut("numpy.array_split"),
)


def _as_indices(result, n: int, worker_id: int, num_workers: int) -> list[int]:
    # The task asks for one contiguous `range`: a list (or a tensor) of the same indices is another type.
    if not isinstance(result, range):
        raise Hint(
            f"shard_range({n}, {worker_id}, {num_workers}) returned {type(result).__name__}; the task asks for "
            "one contiguous range object.",
            "A range(start, stop) holds only its two ends, whatever its length; a list stores every index.",
        )
    return list(result)


def _fair_sizes(n: int, k: int) -> str:
    """The block sizes a fair split of ``n`` over ``k`` workers has, in words ("2 or 3", "4")."""
    base = n // k
    return f"{base} or {base + 1}" if n % k else f"{base}"


def _check_shards(candidate, n: int, k: int) -> None:
    parts = [_as_indices(candidate(n, w, k), n, w, k) for w in range(k)]
    flat = [i for part in parts for i in part]
    sizes = [len(part) for part in parts]
    outside = sorted({i for i in flat if not 0 <= i < n})
    if outside:
        raise Hint(f"for n={n} and {k} workers your shards contain {outside[:5]}, outside range({n}).",
                   "A worker's block must stop at n: clip the stop of the last block.")
    counts = [0] * n
    for i in flat:
        counts[i] += 1
    missing = [i for i, c in enumerate(counts) if c == 0]
    repeated = [i for i, c in enumerate(counts) if c > 1]
    if missing and not repeated and missing == list(range(k * (n // k), n)) and set(sizes) == {n // k}:
        raise Hint(
            f"for n={n} and {k} workers the indices {missing[:5]} are never read: your blocks of n // num_workers "
            f"drop the remainder ({n} % {k} = {n % k}).",
            "The leftover n % num_workers indices must go to some workers: one extra index each for the first "
            "n % num_workers workers keeps the split fair.",
        )
    if missing and repeated:
        raise Hint(f"for n={n} and {k} workers (block sizes {sizes}) the indices {missing[:5]} are never read and "
                   f"the indices {repeated[:5]} are read twice: neighbouring blocks overlap and leave gaps.",
                   "Each block should start exactly where the previous one stops.")
    if missing:
        raise Hint(f"for n={n} and {k} workers (block sizes {sizes}) no worker reads the indices {missing[:5]}: "
                   "there are gaps between the blocks.",
                   "Each block should start exactly where the previous one stops, and the last one stop at n.")
    if repeated:
        raise Hint(
            f"for n={n} and {k} workers the indices {repeated[:5]} are read by more than one worker (or twice by "
            f"one): the blocks overlap (sizes {sizes}, {len(flat)} indices for a stream of {n}).",
            "Each index must belong to exactly one worker: a block starts where the previous one stops.",
        )
    for w, part in enumerate(parts):
        if part and part != list(range(part[0], part[0] + len(part))):
            raise Hint(
                f"for n={n} and {k} workers, worker {w} reads {part[:6]}{'...' if len(part) > 6 else ''}: "
                "that is not one contiguous block.",
                "Strided sharding is correct, but this exercise asks for range(start, stop) with step 1.",
            )
    if flat != list(range(n)):
        raise Hint(
            f"for n={n} and {k} workers the blocks are not in worker order: worker 0 must read the first block, "
            "worker 1 the next one, and so on.",
            "Compute each worker's start from the sizes of the blocks of the workers before it.",
        )
    if max(sizes) - min(sizes) > 1:
        spread = max(sizes) - min(sizes)
        fair = (f"The coverage is right, but the split is not fair: the epoch waits for the busiest worker while "
                f"another idles. Fair blocks here hold {_fair_sizes(n, k)} indices each, so that any two differ "
                "in size by at most 1.")
        base, extra = divmod(n, k)
        if sizes == [base] * (k - 1) + [base + extra]:
            raise Hint(
                f"for n={n} and {k} workers your block sizes are {sizes}: every worker but the last reads {base} "
                f"indices, and the last one also all {extra} left over (n % num_workers), {spread} more than the "
                f"others. {fair}",
                "The leftover indices need not go to one worker: spread them out, at most one extra per worker.",
            )
        chunk = math.ceil(n / k)
        if sizes == [min(chunk, max(0, n - w * chunk)) for w in range(k)]:
            raise Hint(
                f"for n={n} and {k} workers your block sizes are {sizes}: the first workers read ceil(n / "
                f"num_workers) = {chunk} each, and what is left for the last ones falls short by up to {spread}. "
                f"{fair}",
                "Rounding every block up hands the whole shortfall to the last workers; round down instead, and "
                "spread what is left over, at most one extra index per worker.",
            )
        raise Hint(
            f"for n={n} and {k} workers your block sizes are {sizes}: they differ by {spread}. {fair}",
            "Work out how many indices are left over after giving each worker the smaller size, and spread "
            "them out, at most one extra per worker.",
        )


@exercise(
    "06.shard_range",
    "return the contiguous range (a range object) of indices that worker `worker_id` of `num_workers` "
    "reads from a stream of n samples: together the workers cover 0..n-1 exactly once, worker 0 first, and the "
    "block sizes of any two workers differ by at most 1.",
    reference=_shard_range,
    shortcuts=_LIBRARY_SPLITS,
    goal="the split",
    hint="Think of n // num_workers indices per worker plus n % num_workers left over, handed out one "
         "apiece to the first workers. A worker's block then starts where the blocks of all the workers "
         "before it end, which you can work out from its id without a loop; return it as a range(start, "
         "stop).",
)
def _test_shard_range(candidate) -> None:
    for n, k in _SHARD_CASES:
        _check_shards(candidate, n, k)
    # every n < 300 for every k <= 16: boundaries computed in floating point (int(w * (n / k))) lose an index
    # for a few dozen of these pairs only (n=15, k=11 first). A quick look at the ends of the ranges first;
    # a pair that looks wrong gets the full diagnosis. The scan takes milliseconds for any ordinary answer; one
    # far slower than that (an answer that catches the refusal of a library split 40 000 times: it fails anyway)
    # is scanned for _DENSE_SCAN_SECONDS only.
    deadline = time.perf_counter() + _DENSE_SCAN_SECONDS
    for n, k in _DENSE_SHARD_CASES:
        if time.perf_counter() > deadline:
            break
        blocks = [candidate(n, w, k) for w in range(k)]
        if _shards_look_right(blocks, n):
            continue
        _float_boundaries(blocks, n, k)
        _check_shards(candidate, n, k)
        raise Hint(f"for n={n} and {k} workers your blocks {blocks} do not cover range({n}) exactly once, in "
                   "worker order, with sizes differing by at most 1.",
                   "Each block should start exactly where the previous one stops, and the last one stop at n.")


# --------------------------------------------------------------------------
# 06.sampling_weights
# --------------------------------------------------------------------------


def _sampling_weights(targets: torch.Tensor, num_classes: int, power: float) -> torch.Tensor:
    """Per-sample weights for ``WeightedRandomSampler`` that draw class ``c`` with probability ∝ ``n_c ** power``.

    ``n_c`` is the number of samples of class ``c``. ``power=1`` keeps the
    natural class frequencies (instance-balanced sampling), ``power=0``
    balances the classes (class-balanced sampling, per-sample weight
    ``1 / n_c``), and ``power=0.5`` is the square-root sampling in between
    (Kang et al., "Decoupling Representation and Classifier for Long-Tailed
    Recognition", ICLR 2020, eq. 1; Mahajan et al. 2018).

    Args:
        targets: int64 ``[N]`` labels in ``0..num_classes-1``.
        num_classes: number of classes (some may not occur in ``targets``).
        power: the exponent ``q`` (a float; 0 and 1 included).

    Returns:
        float64 ``[N]``: ``n_c ** (power - 1)`` for a sample of class ``c``, so
        that a class's total weight is ``n_c * n_c ** (power - 1) = n_c ** power``.
    """
    counts = torch.bincount(targets, minlength=num_classes).double()
    return counts[targets] ** (power - 1)


#: (class sizes, power); each case has a class that does not occur.
_WEIGHT_CASES = [
    ({0: 40, 1: 10, 2: 5, 4: 25}, 0.5),
    ({0: 40, 1: 10, 2: 5, 4: 25}, 0.0),
    ({1: 300, 2: 12, 3: 75, 5: 3}, 0.25),
    ({0: 7, 2: 63, 3: 28}, 1.0),
    ({0: 9, 1: 100, 3: 1, 4: 36}, 0.7),
]


def _shares(totals: torch.Tensor) -> torch.Tensor:
    return totals / totals.sum()


def _check_weights(candidate, sizes: dict[int, int], power: float, g: torch.Generator) -> None:
    num_classes = max(sizes) + 2  # the last class never occurs
    targets = torch.cat([torch.full((n,), c) for c, n in sizes.items()])
    targets = targets[torch.randperm(len(targets), generator=g)]
    n = len(targets)
    case = f"for class sizes {dict(sorted(sizes.items()))} (classes 0..{num_classes - 1}) and power={power}"
    weights = candidate(targets.clone(), num_classes, power)
    if not isinstance(weights, torch.Tensor):  # the task asks for a float tensor, not a list or an array
        raise Hint(
            f"{case}: the task asks for a float tensor of shape [{n}]; your function returned "
            f"{type(weights).__name__}.",
            "Keep the computation in torch from the counts to the weights; .tolist() or NumPy turn a tensor "
            "into another type.",
        )
    if weights.shape == (num_classes,):
        raise Hint(
            f"{case} you returned {num_classes} per-class weights; WeightedRandomSampler needs one weight per "
            f"sample, shape [{n}].",
            "Compute one number per class, then give every sample the number of its class (index with the targets).",
        )
    if weights.shape != (n,):
        raise AssertionError(f"{case}: expected one weight per sample, shape [{n}]; got {tuple(weights.shape)}")
    if not weights.is_floating_point():
        raise Hint(f"{case}: the weights must be floats, got {weights.dtype}.",
                   "Integer arithmetic rounds fractional weights such as 1 / n_c to 0: convert the counts to float first.")
    if not (torch.isfinite(weights).all() and (weights > 0).all()):
        raise Hint(
            f"{case}: some weights are not positive and finite: {sorted(set(weights.tolist()))[:4]}.",
            "A class that does not occur has 0 samples: anything you compute for it must not leak into the "
            "weights of the samples that exist (0 ** negative is inf, inf / inf is nan).",
        )
    w = weights.double()
    for c in sizes:
        members = w[targets == c]
        if not torch.allclose(members, members[0].expand_as(members), rtol=1e-6):
            raise AssertionError(f"{case}: the samples of class {c} must all get the same weight")
    counts = torch.tensor([float(sizes[c]) for c in sorted(sizes)], dtype=torch.float64)
    got = _shares(torch.stack([w[targets == c].sum() for c in sorted(sizes)]))
    want = _shares(counts**power)
    if torch.allclose(got, want, rtol=1e-4):
        return
    shown = f"each class's share of the total weight: expected {[round(v, 3) for v in want.tolist()]}, got " \
            f"{[round(v, 3) for v in got.tolist()]}"
    if torch.allclose(got, _shares(counts**0), rtol=1e-4):
        raise Hint(f"{case} your weights balance the classes completely, as if power were 0; {shown}.",
                   "The class with n_c samples should receive n_c ** power of the total weight, not the same share "
                   "as every other class; 1 / n_c per sample is only the case power = 0.")
    if torch.allclose(got, _shares(counts ** (power + 1)), rtol=1e-4):
        raise Hint(
            f"{case} you gave each sample the weight its whole class should get, so a class of n_c samples ends "
            f"up with n_c times it; {shown}.",
            "The class total is (number of samples) x (weight per sample); solve that for the weight per sample.",
        )
    if torch.allclose(got, _shares(counts), rtol=1e-4):
        raise Hint(f"{case} your weights keep the natural class frequencies, whatever power is; {shown}.",
                   "Only power = 1 keeps them; the weight per sample must depend on the class size and on power.")
    raise Hint(f"{case}: {shown}.",
               "Class c must be drawn with probability n_c ** power / sum over the classes of n_k ** power; "
               "the sampler draws a class with probability (its total weight) / (all the weight).")


@exercise(
    "06.sampling_weights",
    "return a float tensor of shape [N], one weight per sample, such that WeightedRandomSampler draws "
    "class c with probability proportional to n_c ** power, where n_c is the number of samples of class c "
    "(power=1: natural frequencies; power=0: balanced classes; power=0.5: square-root sampling).",
    reference=_sampling_weights,
    hint="The sampler draws a class with probability equal to that class's share of the total weight, and "
         "a class's total is its number of samples times the weight of one of its samples; solve that for "
         "the per-sample weight that makes the total n_c ** power. Count the classes as the Samplers "
         "section does (its 1 / n_c weights are the power = 0 case), work in floating point, and make sure "
         "nothing computed for a class with no samples ever reaches a real sample.",
)
def _test_sampling_weights(candidate) -> None:
    g = torch.Generator().manual_seed(6)
    for sizes, power in _WEIGHT_CASES:
        _check_weights(candidate, sizes, power, g)
