"""Exercises of chapters 00 and 01: references pass, stubs read "not attempted", wrong answers fail."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from helpers.exercises import check, solution
from tests.exercise_support import assert_rejected


def _stub(*args, **kwargs):
    raise NotImplementedError


# ---------------------------------------------------------------- 00.seed_all


def _seeds_torch_only(seed):
    torch.manual_seed(seed)


def _seeds_random_only(seed):
    random.seed(seed)


def _ignores_the_seed(seed):
    torch.manual_seed(0)
    random.seed(0)


def _does_nothing(seed):
    pass


def _drops_the_last_digits(seed):
    torch.manual_seed(seed // 100)  # 123 and 124 (and 0, 1, 7) share a stream
    random.seed(seed)


def _python_side_by_parity(seed):
    torch.manual_seed(seed)
    random.seed(seed % 2)


@pytest.mark.parametrize(
    ("wrong", "fragment"),
    [
        (_seeds_torch_only, "random.seed"),
        (_seeds_random_only, "torch.manual_seed"),
        (_ignores_the_seed, "fixed number"),
        (_does_nothing, "torch.manual_seed"),
        (_drops_the_last_digits, "seed_all(123) and seed_all(124) gave the same torch.rand"),
        (_python_side_by_parity, "gave the same random.random numbers"),
    ],
)
def test_seed_all_wrong_answers_fail(wrong, fragment):
    assert_rejected("00.seed_all", wrong, fragment)


def test_seed_all_with_a_derived_but_distinct_seed_is_accepted():
    def shifted(seed):  # different seeds still give different streams: what the task asks
        torch.manual_seed(2 * seed + 1)
        random.seed(2 * seed + 1)

    assert check("00.seed_all", shifted, show=False).passed


def test_seed_all_check_leaves_the_random_streams_alone():
    torch.manual_seed(5)
    random.seed(5)
    expected = (torch.rand(2).tolist(), random.random())
    torch.manual_seed(5)
    random.seed(5)
    check("00.seed_all", solution("00.seed_all"), show=False)
    assert (torch.rand(2).tolist(), random.random()) == expected


# ---------------------------------------------------------------- 00.to_device


def _identity(batch, device):
    return batch


def _top_level_only(batch, device):
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}


def _tuples_become_lists(batch, device):
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: _tuples_become_lists(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return [_tuples_become_lists(v, device) for v in batch]
    return batch


def _in_place(batch, device):
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        for k, v in batch.items():
            batch[k] = _in_place(v, device)
        return batch
    if isinstance(batch, list):
        for i, v in enumerate(batch):
            batch[i] = _in_place(v, device)
        return batch
    if isinstance(batch, tuple):
        return tuple(_in_place(v, device) for v in batch)
    return batch


def _recurses_into_strings(batch, device):
    from collections.abc import Mapping, Sequence

    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return {k: _recurses_into_strings(v, device) for k, v in batch.items()}
    if isinstance(batch, Sequence):
        return type(batch)(_recurses_into_strings(v, device) for v in batch)
    return batch


def _forgets_to_return(batch, device):
    _to = solution("00.to_device")
    _to(batch, device)


def _always_meta(batch, device):
    return solution("00.to_device")(batch, "meta")  # ignores the device argument


def _casts_to_float32(batch, device):
    if isinstance(batch, torch.Tensor):
        return (
            batch.to(device, dtype=torch.float32) if batch.is_floating_point() else batch.to(device)
        )
    if isinstance(batch, dict):
        return {k: _casts_to_float32(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_casts_to_float32(v, device) for v in batch)
    return batch


@pytest.mark.parametrize(
    ("wrong", "fragment"),
    [
        (_always_meta, "expected cpu"),
        (_casts_to_float32, "only the device should change"),
        (_identity, "expected meta"),
        (_top_level_only, "nested"),
        (_tuples_become_lists, "a tuple stays a tuple"),
        (_in_place, "in place"),
        (_recurses_into_strings, "untouched"),
        (_forgets_to_return, "returned None"),
    ],
)
def test_to_device_wrong_answers_fail(wrong, fragment):
    assert_rejected("00.to_device", wrong, fragment)


def test_to_device_accepts_a_string_or_a_device():
    def via_torch_device(batch, device):
        return solution("00.to_device")(batch, torch.device(device))

    assert check("00.to_device", via_torch_device, show=False).passed


# ---------------------------------------------------------------- 01.pairwise_sq_dists


def _no_broadcast(a, b):
    return ((a - b) ** 2).sum(-1)  # only works when N == M, and then gives the diagonal


def _distances_not_squared(a, b):
    return torch.cdist(a, b)


def _sums_wrong_axis(a, b):
    return ((a[:, None, :] - b[None, :, :]) ** 2).sum(dim=1)


def _forgets_the_square(a, b):
    return (a[:, None, :] - b[None, :, :]).abs().sum(-1)  # L1, not squared L2


def _upcasts_to_float64(a, b):
    return ((a[:, None, :].double() - b[None, :, :].double()) ** 2).sum(-1)


def _downcasts_to_float32(a, b):
    return ((a[:, None, :].float() - b[None, :, :].float()) ** 2).sum(-1)


@pytest.mark.parametrize(
    ("wrong", "fragment"),
    [
        (_no_broadcast, "shape"),
        (_distances_not_squared, "square root"),
        (_sums_wrong_axis, "shape"),
        (_forgets_the_square, "off by"),
        (_upcasts_to_float64, "same dtype as the inputs"),
        (_downcasts_to_float32, "same dtype as the inputs"),
    ],
)
def test_pairwise_sq_dists_wrong_answers_fail(wrong, fragment):
    assert_rejected("01.pairwise_sq_dists", wrong, fragment)


def test_pairwise_sq_dists_task_states_the_dtype_rule():
    assert "same dtype as the inputs" in check("01.pairwise_sq_dists", _stub, show=False).message


def test_pairwise_sq_dists_with_cdist_is_accepted():
    assert check("01.pairwise_sq_dists", lambda a, b: torch.cdist(a, b) ** 2, show=False).passed


# ---------------------------------------------------------------- 01.one_hot


def _int64_result(labels, num_classes):
    return F.one_hot(labels, num_classes)


def _width_from_labels(labels, num_classes):
    return F.one_hot(labels).float()


def _transposed(labels, num_classes):
    out = torch.zeros(num_classes, labels.shape[0])
    out[labels, torch.arange(labels.shape[0])] = 1.0
    return out


def _slice_instead_of_pairs(labels, num_classes):
    out = torch.zeros(labels.shape[0], num_classes)
    out[:, labels] = 1.0  # sets every label's column in every row
    return out


def _modifies_labels(labels, num_classes):
    out = torch.zeros(labels.shape[0], num_classes)
    out[torch.arange(labels.shape[0]), labels] = 1.0
    labels.zero_()
    return out


@pytest.mark.parametrize(
    ("wrong", "fragment"),
    [
        (_int64_result, "float32"),
        (_width_from_labels, "num_classes"),
        (_transposed, "shape"),
        (_slice_instead_of_pairs, "torch.arange(N)"),
        (_modifies_labels, "in place"),
    ],
)
def test_one_hot_wrong_answers_fail(wrong, fragment):
    assert_rejected("01.one_hot", wrong, fragment)


def test_the_float_version_of_torch_one_hot_is_accepted():
    assert check("01.one_hot", lambda labels, k: F.one_hot(labels, k).float(), show=False).passed
