"""Exercises of chapter 06: each reference passes its checker, an untouched stub reads
"not attempted", and realistic wrong answers fail with a hint."""

from __future__ import annotations

import math

import torch

from helpers.exercises import check, solution
from tests.exercise_support import assert_rejected

# --------------------------------------------------------------------------
# 06.shard_range
# --------------------------------------------------------------------------


def test_shard_range_floor_split_fails():
    def naive(n, worker_id, num_workers):  # the chapter's bug: drops the remainder
        per_worker = n // num_workers
        return range(worker_id * per_worker, (worker_id + 1) * per_worker)

    assert_rejected("06.shard_range", naive, "remainder")


def test_shard_range_strided_fails():
    def strided(n, worker_id, num_workers):  # correct sharding, but not contiguous
        return range(worker_id, n, num_workers)

    assert_rejected("06.shard_range", strided, "contiguous")


def test_shard_range_everything_to_every_worker_fails():
    def everything(n, worker_id, num_workers):
        return range(n)

    assert_rejected("06.shard_range", everything, "more than one worker")


def test_shard_range_last_worker_takes_the_rest_fails():
    def last_takes_rest(n, worker_id, num_workers):  # covers everything, but unbalanced
        per_worker = n // num_workers
        stop = n if worker_id == num_workers - 1 else (worker_id + 1) * per_worker
        return range(worker_id * per_worker, stop)

    assert_rejected("06.shard_range", last_takes_rest, "ceil")


def test_shard_range_reversed_order_fails():
    def reversed_order(n, worker_id, num_workers):
        return solution("06.shard_range")(n, num_workers - 1 - worker_id, num_workers)

    assert_rejected("06.shard_range", reversed_order, "worker order")


def test_shard_range_ceil_split_is_accepted():
    def ceil_split(n, worker_id, num_workers):
        chunk = math.ceil(n / num_workers)
        return range(min(n, worker_id * chunk), min(n, (worker_id + 1) * chunk))

    assert check("06.shard_range", ceil_split, show=False).passed


def test_shard_range_list_is_accepted():
    def as_list(n, worker_id, num_workers):
        return list(solution("06.shard_range")(n, worker_id, num_workers))

    assert check("06.shard_range", as_list, show=False).passed


# --------------------------------------------------------------------------
# 06.class_weights
# --------------------------------------------------------------------------


def test_class_weights_per_class_fails():
    def per_class(targets, num_classes):  # what WeightedRandomSampler does NOT want
        return 1.0 / torch.bincount(targets, minlength=num_classes).double()

    assert_rejected("06.class_weights", per_class, "per sample")


def test_class_weights_counts_instead_of_inverse_fails():
    def counts(targets, num_classes):
        return torch.bincount(targets, minlength=num_classes)[targets].double()

    assert_rejected("06.class_weights", counts, "inverse")


def test_class_weights_integer_division_fails():
    def integer(targets, num_classes):
        return 1 // torch.bincount(targets, minlength=num_classes)[targets]

    assert_rejected("06.class_weights", integer, "float")


def test_class_weights_one_minus_frequency_fails():
    def one_minus_frequency(targets, num_classes):
        freq = torch.bincount(targets, minlength=num_classes).double() / len(targets)
        return (1 - freq)[targets]

    assert_rejected("06.class_weights", one_minus_frequency, "same total weight")


def test_class_weights_normalised_float32_is_accepted():
    def normalised(targets, num_classes):
        w = 1.0 / torch.bincount(targets, minlength=num_classes)[targets].float()
        return w / w.sum()

    assert check("06.class_weights", normalised, show=False).passed
