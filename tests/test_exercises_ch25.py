"""Exercises of chapter 25: realistic wrong answers fail with a hint (the generic checks are in test_exercises.py)."""

from __future__ import annotations

import math

import torch

from helpers.exercises import check
from tests.exercise_support import assert_rejected

# --------------------------------------------------------------------------
# 25.sampler_indices
# --------------------------------------------------------------------------


def test_sampler_indices_without_padding_fails():
    def no_padding(n, world_size, rank):
        return list(range(rank, n, world_size))

    assert_rejected("25.sampler_indices", no_padding, "ceil(n / world_size)")


def test_sampler_indices_drop_last_fails():
    def drop_last(n, world_size, rank):
        per = n // world_size
        return list(range(n))[rank : per * world_size : world_size]

    assert_rejected("25.sampler_indices", drop_last, "drop_last")


def test_sampler_indices_contiguous_blocks_fail():
    def blocks(n, world_size, rank):
        per = math.ceil(n / world_size)
        return [(rank * per + i) % n for i in range(per)]

    assert_rejected("25.sampler_indices", blocks, "round-robin")


def test_sampler_indices_padding_once_fails():
    def pad_once(n, world_size, rank):
        per = math.ceil(n / world_size)
        indices = list(range(n))
        indices += indices[: per * world_size - n]  # wrong when n < world_size: one repeat is not enough
        return indices[rank :: world_size]

    assert_rejected("25.sampler_indices", pad_once, "ceil(n / world_size)")


def test_sampler_indices_calling_distributed_sampler_fails():
    from torch.utils.data.distributed import DistributedSampler

    def shortcut(n, world_size, rank):
        return list(DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=False))

    assert_rejected("25.sampler_indices", shortcut, "DistributedSampler")


def test_sampler_indices_subclassing_distributed_sampler_fails():
    import torch.utils.data

    class MySampler(torch.utils.data.DistributedSampler):
        pass

    def subclass(n, world_size, rank):
        return list(MySampler(range(n), num_replicas=world_size, rank=rank, shuffle=False))

    assert_rejected("25.sampler_indices", subclass, "DistributedSampler")


# --------------------------------------------------------------------------
# 25.ddp_gradient
# --------------------------------------------------------------------------


def _grads(model, x, y, loss_fn):
    return list(torch.autograd.grad(loss_fn(model(x), y), list(model.parameters())))


def test_ddp_gradient_summed_fails():
    def summed(model, batches, loss_fn):
        per_rank = [_grads(model, x, y, loss_fn) for x, y in batches]
        return [sum(gs) for gs in zip(*per_rank)]

    assert_rejected("25.ddp_gradient", summed, "all_reduce(SUM)")


def test_ddp_gradient_pooled_batch_fails():
    def pooled(model, batches, loss_fn):
        x = torch.cat([x for x, _ in batches])
        y = torch.cat([y for _, y in batches])
        return _grads(model, x, y, loss_fn)

    assert_rejected("25.ddp_gradient", pooled, "uneven batches")


def test_ddp_gradient_rank0_only_fails():
    def rank0(model, batches, loss_fn):
        return _grads(model, *batches[0], loss_fn)

    assert_rejected("25.ddp_gradient", rank0, "rank 0's own gradient")


def test_ddp_gradient_accumulating_into_stale_grad_fails():
    def backward_into_grad(model, batches, loss_fn):
        for x, y in batches:
            (loss_fn(model(x), y) / len(batches)).backward()
        return [p.grad.clone() for p in model.parameters()]

    assert_rejected("25.ddp_gradient", backward_into_grad, "earlier step", "already held")


def test_ddp_gradient_with_backward_after_clearing_grad_is_accepted():
    def backward_fresh(model, batches, loss_fn):
        params = list(model.parameters())
        saved = [p.grad for p in params]
        for p in params:
            p.grad = None
        for x, y in batches:
            (loss_fn(model(x), y) / len(batches)).backward()
        out = [p.grad.clone() for p in params]
        for p, g in zip(params, saved):
            p.grad = g
        return out

    result = check("25.ddp_gradient", backward_fresh, show=False)
    assert result.passed, result.message


def test_sampler_indices_as_a_tensor_fails():
    def as_tensor(n, world_size, rank):
        per = math.ceil(n / world_size)
        return torch.tensor([(rank + k * world_size) % n for k in range(per)])

    assert_rejected("25.sampler_indices", as_tensor, "should be a Python list, got Tensor")


def test_sampler_indices_holding_tensors_fails():
    def tensor_items(n, world_size, rank):
        per = math.ceil(n / world_size)
        return list(torch.tensor([(rank + k * world_size) % n for k in range(per)]))

    assert_rejected("25.sampler_indices", tensor_items, "should hold Python ints", "Tensor")
