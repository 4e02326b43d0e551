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
    def last_takes_rest(n, worker_id, num_workers):  # covers everything, but the last worker gets the remainder
        per_worker = n // num_workers
        stop = n if worker_id == num_workers - 1 else (worker_id + 1) * per_worker
        return range(worker_id * per_worker, stop)

    first = assert_rejected("06.shard_range", last_takes_rest, "not fair", "differ in size by at most 1",
                            "[0, 0, 2]", "every worker but the last", "0 or 1 indices").message
    for recipe in ("ceil", "one more to the first", "n // num_workers ="):  # this answer's mistake, not the fix
        assert recipe not in first, f"the first tier should describe this answer, not give the fix: {first}"
    again = check("06.shard_range", last_takes_rest, show=False).message
    assert "spread them out" in again and "Rounding" not in again, again


def test_shard_range_ceil_split_fails():
    def ceil_split(n, worker_id, num_workers):  # covers everything, but n=10 on 4 workers gives 3, 3, 3, 1
        chunk = math.ceil(n / num_workers)
        return range(min(n, worker_id * chunk), min(n, (worker_id + 1) * chunk))

    assert_rejected("06.shard_range", ceil_split, "not fair", "[3, 3, 1]", "ceil(n / num_workers) = 3")


def test_shard_range_overlapping_blocks_fail():
    def overlapping(n, worker_id, num_workers):  # blocks of ceil size that step by the floor size
        per_worker = n // num_workers
        return range(worker_id * per_worker, min(n, worker_id * per_worker + math.ceil(n / num_workers)))

    assert_rejected("06.shard_range", overlapping, "overlap")


def test_shard_range_gaps_between_blocks_fail():
    def gaps(n, worker_id, num_workers):  # worker 1 starts one index too late
        r = solution("06.shard_range")(n, worker_id, num_workers)
        return r[1:] if worker_id == 1 else r

    assert_rejected("06.shard_range", gaps, "gaps")


def test_shard_range_off_by_one_stop_fails():
    def past_the_end(n, worker_id, num_workers):
        r = solution("06.shard_range")(n, worker_id, num_workers)
        return range(r.start, r.stop + 1) if worker_id == num_workers - 1 else r

    assert_rejected("06.shard_range", past_the_end, "outside")


def test_shard_range_reversed_order_fails():
    def reversed_order(n, worker_id, num_workers):
        return solution("06.shard_range")(n, num_workers - 1 - worker_id, num_workers)

    assert_rejected("06.shard_range", reversed_order, "worker order")


def test_shard_range_torch_tensor_split_is_refused():
    import torch

    def library(n, worker_id, num_workers):
        return range(n)[0:0] if n == 0 else torch.arange(n).tensor_split(num_workers)[worker_id].tolist()

    assert_rejected("06.shard_range", library, "yourself", "tensor_split")


def test_shard_range_torch_chunk_is_refused():
    import torch

    def library(n, worker_id, num_workers):
        parts = torch.chunk(torch.arange(n), num_workers)
        return parts[worker_id].tolist() if worker_id < len(parts) else []

    assert_rejected("06.shard_range", library, "yourself", "chunk")


def test_shard_range_numpy_array_split_is_refused():
    import numpy as np

    def library(n, worker_id, num_workers):
        return np.array_split(np.arange(n), num_workers)[worker_id].tolist()

    assert_rejected("06.shard_range", library, "yourself", "numpy.array_split")
    assert np.array_split(np.arange(5), 2)[0].tolist() == [0, 1, 2], "numpy.array_split must be restored"


def test_shard_range_numpy_array_split_imported_by_name_and_swallowed_is_refused():
    from numpy import arange, array_split

    def library(n, worker_id, num_workers):
        try:
            return array_split(arange(n), num_workers)[worker_id].tolist()
        except AssertionError:  # hiding the refusal does not help
            return solution("06.shard_range")(n, worker_id, num_workers)

    assert_rejected("06.shard_range", library, "numpy.array_split")
    assert array_split(arange(4), 2)[1].tolist() == [2, 3]


def test_shard_range_list_fails():
    def as_list(n, worker_id, num_workers):  # the right indices, but the task asks for one range
        return list(solution("06.shard_range")(n, worker_id, num_workers))

    assert_rejected("06.shard_range", as_list, "returned list", "range object")


def test_shard_range_remainder_to_the_last_workers_is_accepted():
    def extra_at_the_end(n, worker_id, num_workers):  # also fair: the last n % k workers get one more
        base, extra = divmod(n, num_workers)
        first_big = num_workers - extra
        start = worker_id * base + max(0, worker_id - first_big)
        return range(start, start + base + (1 if worker_id >= first_big else 0))

    assert check("06.shard_range", extra_at_the_end, show=False).passed


# --------------------------------------------------------------------------
# 06.sampling_weights
# --------------------------------------------------------------------------


def test_sampling_weights_per_class_fails():
    def per_class(targets, num_classes, power):  # what WeightedRandomSampler does NOT want
        return torch.bincount(targets, minlength=num_classes).double() ** (power - 1)

    assert_rejected("06.sampling_weights", per_class, "per sample")


def test_sampling_weights_inverse_count_ignoring_power_fails():
    def inverse(targets, num_classes, power):  # the chapter's class-balanced weights, for every power
        return 1.0 / torch.bincount(targets, minlength=num_classes)[targets].double()

    assert_rejected("06.sampling_weights", inverse, "as if power were 0")


def test_sampling_weights_class_share_per_sample_fails():
    def class_share(targets, num_classes, power):  # n_c ** power per sample: the class gets n_c times it
        return torch.bincount(targets, minlength=num_classes)[targets].double() ** power

    assert_rejected("06.sampling_weights", class_share, "n_c times")


def test_sampling_weights_all_ones_fails():
    def ones(targets, num_classes, power):
        return torch.ones(len(targets), dtype=torch.float64)

    assert_rejected("06.sampling_weights", ones, "natural class frequencies")


def test_sampling_weights_wrong_sign_fails():
    def wrong_sign(targets, num_classes, power):
        return torch.bincount(targets, minlength=num_classes)[targets].double() ** (-power - 1)

    assert_rejected("06.sampling_weights", wrong_sign, "share of the total weight")


def test_sampling_weights_integer_fails():
    def integer(targets, num_classes, power):
        return 1 // torch.bincount(targets, minlength=num_classes)[targets]

    assert_rejected("06.sampling_weights", integer, "float")


def test_sampling_weights_normalising_over_absent_classes_fails():
    def normalised_per_class(targets, num_classes, power):
        per_class = torch.bincount(targets, minlength=num_classes).double() ** (power - 1)
        return (per_class / per_class.sum())[targets]  # an absent class is inf, so everything becomes nan

    assert_rejected("06.sampling_weights", normalised_per_class, "positive and finite")


def test_sampling_weights_list_fails():
    def as_list(targets, num_classes, power):  # the right numbers, but the task asks for a float tensor
        counts = torch.bincount(targets, minlength=num_classes).double()
        return (counts ** (power - 1))[targets].tolist()

    assert_rejected("06.sampling_weights", as_list, "float tensor of shape", "returned list")


def test_sampling_weights_normalised_float32_is_accepted():
    def normalised(targets, num_classes, power):
        counts = torch.bincount(targets, minlength=num_classes)[targets].float()
        w = counts.pow(power) / counts
        return w / w.sum()

    assert check("06.sampling_weights", normalised, show=False).passed


def test_shard_range_float_boundaries_fail():
    """int(w * (n / k)) loses an index to float rounding for a few pairs only (n=15, k=11 first)."""
    def float_boundaries(n, worker_id, num_workers):
        return range(int(worker_id * (n / num_workers)), int((worker_id + 1) * (n / num_workers)))

    result = assert_rejected("06.shard_range", float_boundaries, "n=15 and 11 workers", "[14]", "float",
                             "14.999999999999998")
    assert "//" not in result.message.split("Hint:")[0], result.message


def test_shard_range_integer_floor_boundaries_are_accepted():
    """Boundaries w * n // k: a fair split too (the larger blocks are not all first), in exact arithmetic."""
    def floor_boundaries(n, worker_id, num_workers):
        return range(worker_id * n // num_workers, (worker_id + 1) * n // num_workers)

    assert check("06.shard_range", floor_boundaries, show=False).passed
