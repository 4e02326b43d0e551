"""Exercises of chapter 25 (distributed data parallel): checkers and reference solutions.

Both run in one process: they compute what the ranks of a DDP job would get.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.utils.data.distributed import DistributedSampler

from . import Hint, exercise, expect_type

# --------------------------------------------------------------------------
# 25.sampler_indices
# --------------------------------------------------------------------------


def _sampler_indices(n: int, world_size: int, rank: int) -> list[int]:
    """The dataset indices ``DistributedSampler(shuffle=False, drop_last=False)`` gives ``rank``.

    Args:
        n: dataset length (>= 1).
        world_size: number of ranks.
        rank: this rank, ``0 <= rank < world_size``.

    Returns:
        A list of ``ceil(n / world_size)`` ints. The index list ``0..n-1`` is
        padded to ``ceil(n / world_size) * world_size`` entries by repeating it
        from the start (as often as needed), then dealt round-robin: rank ``r``
        takes positions ``r, r + world_size, r + 2 * world_size, ...``.
    """
    per_rank = math.ceil(n / world_size)
    total = per_rank * world_size
    indices = list(range(n))
    while len(indices) < total:  # pad by repeating from the start (may wrap more than once when n < world_size)
        indices += indices[: total - len(indices)]
    return indices[rank:total:world_size]


def _true_indices(n: int, world_size: int, rank: int) -> list[int]:
    return list(DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=False, drop_last=False))


@exercise(
    "25.sampler_indices",
    "return the list (a Python list of ints) of dataset indices that DistributedSampler(dataset of length n, num_replicas=world_size, "
    "rank=rank, shuffle=False, drop_last=False) yields for that rank, without using DistributedSampler.",
    reference=_sampler_indices,
    shortcuts=("torch.utils.data.distributed.DistributedSampler",),
    goal="the sampler's padding and dealing",
    hint="Section 4 describes the two steps: first make the index list 0..n-1 long enough for every rank "
         "to get the same number of indices (rounded up), padding it by repeating it from the start, more "
         "than once when n < world_size; then deal the padded list round-robin, so that rank r takes every "
         "world_size-th entry starting at position r.",
)
def _test_sampler_indices(candidate) -> None:
    cases = [(8, 2, 0), (8, 2, 1), (10, 4, 0), (10, 4, 1), (10, 4, 3), (7, 3, 2), (5, 2, 1), (3, 4, 3), (1, 3, 2), (12, 1, 0)]
    for n, world, rank in cases:
        want = _true_indices(n, world, rank)
        got = candidate(n, world, rank)
        expect_type(got, list, f"for n={n}, world_size={world}, rank={rank} your result")
        odd = next((i for i in got if not isinstance(i, int) or isinstance(i, bool)), None)
        if odd is not None:
            raise Hint(
                f"for n={n}, world_size={world}, rank={rank} your list should hold Python ints, but it holds a "
                f"{type(odd).__name__} ({odd!r}).",
                "A dataset index is a plain Python int; a tensor's elements become ints with .tolist(), or int(...).",
            )
        if got == want:
            continue
        where = f"n={n}, world_size={world}, rank={rank}: DistributedSampler yields {want}, you returned {got}"
        if len(got) == n // world and len(got) < len(want):
            raise AssertionError(
                f"{where}. That is drop_last=True: with drop_last=False the sampler pads the index list so every "
                f"rank gets ceil(n / world_size) = {len(want)} indices"
            )
        if len(got) != len(want):
            raise AssertionError(
                f"{where}. Every rank must get the same number of indices, ceil(n / world_size) = {len(want)}, "
                f"or the ranks' collectives would fall out of step: pad the list 0..n-1 by repeating it from the start"
            )
        per = len(want)
        if got == [(rank * per + i) % n for i in range(per)]:
            raise AssertionError(
                f"{where}. You gave each rank a contiguous block; DistributedSampler deals round-robin: rank r takes "
                f"positions r, r + world_size, r + 2 * world_size, ... of the padded list"
            )
        raise AssertionError(f"{where}. Pad 0..n-1 to a multiple of world_size by repeating from the start, then deal round-robin")


# --------------------------------------------------------------------------
# 25.ddp_gradient
# --------------------------------------------------------------------------


def _ddp_gradient(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]], loss_fn) -> list[torch.Tensor]:
    """The gradient every rank holds after one DDP backward pass, computed in one process.

    Args:
        model: the model (the same weights on every rank).
        batches: one ``(x, y)`` batch per rank; they may differ in size.
        loss_fn: the loss, e.g. ``nn.CrossEntropyLoss()`` (mean over the batch).

    Returns:
        One tensor per parameter, in ``model.parameters()`` order: the mean over
        ranks of each rank's gradient of its own loss. This is what
        ``all_reduce(SUM)`` followed by division by the world size leaves on every
        rank. (It is the gradient of the mean loss over all the samples only when
        every rank has the same number of samples.)
    """
    params = list(model.parameters())
    total = [torch.zeros_like(p) for p in params]
    for x, y in batches:
        grads = torch.autograd.grad(loss_fn(model(x), y), params)  # this rank's own backward
        total = [t + g for t, g in zip(total, grads)]
    return [t / len(batches) for t in total]  # all_reduce(SUM), then / world_size


def _case(seed: int, sizes: list[int]):
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):  # seeded weights, without touching the learner's global RNG
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3)).double()
    batches = [(torch.randn(n, 5, generator=gen, dtype=torch.float64), torch.randint(0, 3, (n,), generator=gen)) for n in sizes]
    return model, batches


@exercise(
    "25.ddp_gradient",
    "given a model, a list of (x, y) batches (one per rank) and a loss function that averages over its batch, "
    "return the list of gradients (one tensor per parameter, in model.parameters() order) that every rank holds "
    "after DDP's backward pass. The model's parameters may already hold a .grad from an earlier step: the answer "
    "is the gradient of these batches alone.",
    reference=_ddp_gradient,
    hint="Each rank backpropagates the mean loss of its own batch, and DDP's all-reduce then adds those "
         "gradients up and divides by the world size (section 3). So compute each rank's gradient on its "
         "own with torch.autograd.grad and average them per parameter; with uneven batches that is not the "
         "gradient of one big batch of all the samples.",
)
def _test_ddp_gradient(candidate) -> None:
    cases = [("2 ranks, 4 samples each", 0, [4, 4], False), ("4 ranks, 3 samples each", 1, [3, 3, 3, 3], False),
             ("2 ranks, 6 and 2 samples (a last, uneven batch)", 2, [6, 2], False),
             ("2 ranks, 5 samples each, parameters holding a .grad from an earlier step", 3, [5, 5], True)]
    loss_fn = nn.CrossEntropyLoss()
    for label, seed, sizes, stale in cases:
        model, batches = _case(seed, sizes)
        want = _ddp_gradient(model, batches, loss_fn)
        gen = torch.Generator().manual_seed(seed)
        earlier = [torch.randn(p.shape, generator=gen, dtype=p.dtype) if stale else None for p in model.parameters()]
        for p, e in zip(model.parameters(), earlier):
            p.grad = None if e is None else e.clone()
        got = candidate(model, [(x.clone(), y.clone()) for x, y in batches], loss_fn)
        if not isinstance(got, (list, tuple)) or len(got) != len(want) or not all(isinstance(g, torch.Tensor) for g in got):
            raise AssertionError(f"{label}: return a list of {len(want)} tensors, one per parameter; you returned {type(got).__name__}")
        if any(g.shape != w.shape for g, w in zip(got, want)):
            raise AssertionError(f"{label}: gradient shapes {[tuple(g.shape) for g in got]} should be {[tuple(w.shape) for w in want]}")
        error = max((g.detach().double() - w).abs().max().item() for g, w in zip(got, want))
        if error < 1e-8:
            continue
        scale = max(w.abs().max().item() for w in want)
        if stale and max((g.detach().double() - w - e).abs().max().item() for g, w, e in zip(got, want, earlier)) < 1e-8:
            raise Hint(
                f"{label}: your gradients are DDP's plus the .grad the parameters already held when your function "
                "was called (a gradient left from an earlier step).",
                "backward() adds into .grad, it does not overwrite it; compute this step's gradients without what "
                "was there before (torch.autograd.grad returns them without touching .grad).",
            )
        summed = [w * len(batches) for w in want]
        if max((g.detach().double() - s).abs().max().item() for g, s in zip(got, summed)) < 1e-8:
            raise AssertionError(
                f"{label}: your gradients are world_size = {len(batches)} times too large: all_reduce(SUM) adds the "
                f"ranks' gradients; DDP then divides by the world size to get their mean"
            )
        x_all = torch.cat([x for x, _ in batches])
        y_all = torch.cat([y for _, y in batches])
        pooled = torch.autograd.grad(loss_fn(model(x_all), y_all), list(model.parameters()))
        if len(set(sizes)) > 1 and max((g.detach().double() - p).abs().max().item() for g, p in zip(got, pooled)) < 1e-8:
            raise AssertionError(
                f"{label}: you returned the gradient of the mean loss over all {sum(sizes)} samples. DDP averages the "
                f"ranks' gradients, each the gradient of its own batch mean, so with uneven batches a sample on the "
                f"smaller batch weighs more; the two agree only when every rank has the same batch size"
            )
        first = torch.autograd.grad(loss_fn(model(batches[0][0]), batches[0][1]), list(model.parameters()))
        if max((g.detach().double() - f).abs().max().item() for g, f in zip(got, first)) < 1e-8:
            raise AssertionError(f"{label}: that is rank 0's own gradient; after DDP's all-reduce every rank holds the mean over all ranks")
        raise AssertionError(f"{label}: largest difference from DDP's averaged gradient is {error:.3g} (gradients up to {scale:.3g})")
