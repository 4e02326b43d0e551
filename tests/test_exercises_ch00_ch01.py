"""Exercises of chapters 00 and 01: references pass, stubs read "not attempted", wrong answers fail."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import helpers.exercises as exercises
from helpers.exercises import check, hint, solution
from tests.exercise_support import assert_rejected


def _stub(*args, **kwargs):
    raise NotImplementedError


@pytest.fixture(autouse=True)
def _first_attempt(monkeypatch):
    """Every test starts with no failed attempts, so a hint's words are checked in the first tier."""
    monkeypatch.setattr(exercises, "_failures", Counter())
    monkeypatch.setattr(exercises, "_fuller", {})


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
        (_seeds_torch_only, "random.random() gave"),
        (_seeds_random_only, "torch.rand(3) gave"),
        (_ignores_the_seed, "should depend on the seed"),
        (_does_nothing, "torch.rand(3) gave"),
        (_drops_the_last_digits, "seed_all(123) and seed_all(124) gave the same torch.rand"),
        (_python_side_by_parity, "gave the same random.random() numbers"),
    ],
)
def test_seed_all_wrong_answers_fail(wrong, fragment):
    assert_rejected("00.seed_all", wrong, fragment)


def test_seed_all_with_a_derived_seed_fails():
    def shifted(seed):  # different seeds still give different streams, but not seed's own streams
        torch.manual_seed(2 * seed + 1)
        random.seed(2 * seed + 1)

    assert_rejected("00.seed_all", shifted, "after seed_all(0), torch.rand(3) gave", "seed itself")


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
        items = [_in_place(v, device) for v in batch]  # namedtuples too: only the in-place is wrong
        return type(batch)(*items) if hasattr(batch, "_fields") else tuple(items)
    return batch


def _recurses_into_strings(batch, device):
    from collections.abc import Mapping, Sequence

    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return {k: _recurses_into_strings(v, device) for k, v in batch.items()}
    if isinstance(batch, Sequence):
        if hasattr(batch, "_fields"):  # namedtuples right: only the strings are wrong
            return type(batch)(*(_recurses_into_strings(v, device) for v in batch))
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
        items = [_casts_to_float32(v, device) for v in batch]
        return type(batch)(*items) if hasattr(batch, "_fields") else type(batch)(items)
    return batch


@pytest.mark.parametrize(
    ("wrong", "fragment"),
    [
        (_always_meta, "expected cpu"),
        (_casts_to_float32, "only the device should change"),
        (_identity, "expected meta"),
        (_top_level_only, "nested"),
        (_tuples_become_lists, "should stay a tuple, got list"),
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
    return ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1).sqrt()


def _sums_wrong_axis(a, b):
    return ((a[:, None, :] - b[None, :, :]) ** 2).sum(dim=1)


def _forgets_the_square(a, b):
    return (a[:, None, :] - b[None, :, :]).abs().sum(-1)  # L1, not squared L2


def _upcasts_to_float64(a, b):
    return ((a[:, None, :].double() - b[None, :, :].double()) ** 2).sum(-1)


def _downcasts_to_float32(a, b):
    return ((a[:, None, :].float() - b[None, :, :].float()) ** 2).sum(-1)


def _loops_over_rows(a, b):
    return torch.stack([((a[i] - b) ** 2).sum(-1) for i in range(a.shape[0])])


def _loops_with_for(a, b):
    out = torch.zeros(a.shape[0], b.shape[0], dtype=a.dtype)
    for i in range(a.shape[0]):
        out[i] = ((a[i] - b) ** 2).sum(-1)
    return out


def _hidden_row_loop(a, b):  # the loop is in a helper, so only the operator count sees it
    return _loops_with_for(a, b)


def _cdist_squared(a, b):
    return torch.cdist(a, b) ** 2


def _halves_a_afterwards(a, b):  # right values, but the caller's a is changed
    out = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    a.mul_(0.5)
    return out


def _from_pdist(a, b):  # the a-to-b block of the distances among all rows of cat([a, b])
    n, rows = a.shape[0], torch.cat([a, b])
    i, j = torch.triu_indices(len(rows), len(rows), 1)
    full = torch.zeros(len(rows), len(rows), dtype=a.dtype)
    full[i, j] = torch.pdist(rows) ** 2
    return (full + full.T)[:n, n:]


@pytest.mark.parametrize(
    ("wrong", "fragment"),
    [
        (_no_broadcast, "should have shape (3, 3), got (3,)"),
        (_distances_not_squared, "not their squares"),
        (_sums_wrong_axis, "should have shape"),
        (_forgets_the_square, "off by"),
        (_upcasts_to_float64, "same dtype as the inputs"),
        (_downcasts_to_float32, "same dtype as the inputs"),
        (_loops_over_rows, "a list comprehension"),
        (_loops_with_for, "a `for` loop"),
        (_hidden_row_loop, "the count grows with the sizes"),
        (_cdist_squared, "`torch.cdist` does it for you"),
        (_halves_a_afterwards, "changed its input a in place"),
    ],
)
def test_pairwise_sq_dists_wrong_answers_fail(wrong, fragment):
    assert_rejected("01.pairwise_sq_dists", wrong, fragment)


def test_pairwise_sq_dists_in_place_change_is_named_not_misreported():
    message = assert_rejected("01.pairwise_sq_dists", _halves_a_afterwards, "for a (3, 2) and b (3, 2)").message
    assert "should be" not in message, message  # not "entry [1, 0] should be ..., got ..." from a changed input
    assert "a.mul_(...)" in hint("01.pairwise_sq_dists", show=False)


@pytest.mark.parametrize(
    ("shortcut", "fragment"),
    [
        (lambda a, b: torch._euclidean_dist(a, b) ** 2, "`torch._euclidean_dist`"),
        (lambda a, b: torch.ops.aten.cdist(a, b) ** 2, "`torch.ops.aten.cdist`"),
        (lambda a, b: torch.ops.aten.cdist.default(a, b) ** 2, "`torch.ops.aten.cdist.default`"),
        (lambda a, b: torch.ops.aten._cdist_forward(a, b, 2.0, None) ** 2, "`torch.ops.aten._cdist_forward`"),
        (lambda a, b: torch.ops.aten._euclidean_dist.default(a, b) ** 2, "`torch.ops.aten._euclidean_dist.default`"),
        (lambda a, b: torch._decomp.decompositions._euclidean_dist(a, b) ** 2, "`torch._decomp.decompositions._euclidean_dist`"),
        (_from_pdist, "`torch.pdist`"),
    ],
    ids=["_euclidean_dist", "aten.cdist", "aten.cdist.default", "aten._cdist_forward", "aten._euclidean_dist",
         "decomp._euclidean_dist", "pdist"],
)
def test_pairwise_sq_dists_library_distances_are_refused(shortcut, fragment):
    a, b = torch.randn(4, 3, dtype=torch.float64), torch.randn(5, 3, dtype=torch.float64)
    torch.testing.assert_close(shortcut(a, b), ((a[:, None] - b[None]) ** 2).sum(-1))  # each really computes it
    assert_rejected("01.pairwise_sq_dists", shortcut, "write the pairwise distances with broadcasting yourself", fragment)


def test_pairwise_sq_dists_distance_operator_is_seen_below_a_torch_function():
    # A function whose code sits in torch's own files and issues aten._cdist_forward: the direct-call
    # rule lets torch call it, but the operator is seen at dispatch level, reached from the answer.
    namespace = {"torch": torch}
    source = "def through_torch(a, b):\n    return torch.ops.aten._cdist_forward(a, b, 2.0, None)\n"
    exec(compile(source, str(Path(torch.__file__).parent / "functional.py"), "exec"), namespace)
    assert_rejected("01.pairwise_sq_dists", lambda a, b: namespace["through_torch"](a, b) ** 2,
                    "`torch.ops.aten._cdist_forward.default`, which your code reached through `torch.functional`")


def test_pairwise_sq_dists_first_hint_names_the_case_but_not_the_fix():
    first = assert_rejected("01.pairwise_sq_dists", _no_broadcast, "for a of shape (3, 2)", "[N, M, D]").message
    assert "a[:, None, :]" not in first and 'hint("01.pairwise_sq_dists")' in first, first
    assert "[N, 1, D]" in hint("01.pairwise_sq_dists", show=False)
    second = assert_rejected("01.pairwise_sq_dists", _sums_wrong_axis, "should have shape").message
    assert "[N, 1, D]" in second, "the second failure should add the fuller hint"
    assert "a[:, None, :] - b[None, :, :]" not in second, "the fuller hint names the idea, not the solution's line"


def test_pairwise_sq_dists_task_states_the_dtype_rule():
    assert "same dtype as the inputs" in check("01.pairwise_sq_dists", _stub, show=False).message


def test_pairwise_sq_dists_other_vectorised_forms_are_accepted():
    def expanded_square(a, b):  # |a|^2 - 2 a.b + |b|^2: broadcasting plus a matrix product
        return (a * a).sum(1, keepdim=True) - 2 * a @ b.mT + (b * b).sum(1)

    assert check("01.pairwise_sq_dists", expanded_square, show=False).passed


def test_loop_check_skips_a_function_without_source():
    namespace: dict = {}
    source = "def f(a, b):\n    return ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)\n"
    exec(compile(source, "<no file>", "exec"), namespace)
    assert check("01.pairwise_sq_dists", namespace["f"], show=False).passed


# ---------------------------------------------------------------- 01.one_hot


def _int64_result(labels, num_classes):
    out = torch.zeros(labels.shape[0], num_classes, dtype=torch.int64)
    out[torch.arange(labels.shape[0]), labels] = 1
    return out


def _width_from_labels(labels, num_classes):
    out = torch.zeros(labels.shape[0], int(labels.max()) + 1)
    out[torch.arange(labels.shape[0]), labels] = 1.0
    return out


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


def _one_per_row_in_a_loop(labels, num_classes):
    out = torch.zeros(labels.shape[0], num_classes)
    for i, label in enumerate(labels):
        out[i, label] = 1.0
    return out


def _one_column_at_a_time(labels, num_classes):
    return _columns(labels, num_classes)


def _columns(labels, num_classes):  # a loop over classes, hidden in a helper
    out = torch.zeros(labels.shape[0], num_classes)
    c = 0
    while c < num_classes:
        out[:, c] = (labels == c).float()
        c += 1
    return out


@pytest.mark.parametrize(
    ("wrong", "fragment"),
    [
        (_int64_result, "float32"),
        (_width_from_labels, "num_classes=5"),
        (_transposed, "should have shape"),
        (_slice_instead_of_pairs, "exactly one 1.0"),
        (_modifies_labels, "in place"),
        (_one_per_row_in_a_loop, "a `for` loop"),
        (_one_column_at_a_time, "the count grows with the sizes"),
        (lambda labels, k: F.one_hot(labels, k).float(), "`torch.nn.functional.one_hot` does it for you"),
        (lambda labels, k: F.one_hot(labels, num_classes=k).to(torch.float32), "`torch.nn.functional.one_hot`"),
        (lambda labels, k: torch.eye(k)[labels], "`torch.eye` (its rows are one-hot rows, ready-made)"),
        (lambda labels, k: torch.ops.aten.one_hot(labels, k).float(), "`torch.ops.aten.one_hot` does it for you"),
        (lambda labels, k: torch.ops.aten.one_hot.default(labels, k).float(), "`torch.ops.aten.one_hot.default`"),
    ],
    ids=["int64", "width", "transposed", "slice", "in-place", "loop", "hidden-loop", "F.one_hot", "F.one_hot-kw", "eye",
         "aten.one_hot", "aten.one_hot.default"],
)
def test_one_hot_wrong_answers_fail(wrong, fragment):
    assert_rejected("01.one_hot", wrong, fragment)


@pytest.mark.parametrize(
    ("identity_rows", "shape"),
    [
        (lambda labels, k: torch.ones(k).diag()[labels], "[5, 5]"),
        (lambda labels, k: torch.diag_embed(torch.ones(k))[labels], "[5, 5]"),
        (lambda labels, k: torch.zeros(k, k).fill_diagonal_(1)[labels], "[5, 5]"),
        (lambda labels, k: (torch.arange(k)[:, None] == torch.arange(k)).float()[labels], "[5, 5]"),
        (lambda labels, k: torch.ones(k).diag().index_select(0, labels), "[5, 5]"),
        (lambda labels, k: F.embedding(labels, torch.ones(k).diag()), "[5, 5]"),
        (lambda labels, k: torch.ones(k).diag()[:, labels].T, "[5, 5]"),
        (lambda labels, k: torch.ones(k + 1).diag()[labels, :k], "[6, 5]"),  # a slice of a larger identity
    ],
    ids=["diag", "diag_embed", "fill_diagonal_", "arange==arange", "index_select", "embedding", "columns", "slice"],
)
def test_one_hot_rows_of_any_identity_are_refused(identity_rows, shape):
    labels = torch.tensor([0, 3, 3, 1])
    assert torch.equal(identity_rows(labels, 5), torch.eye(5)[labels])  # each really gives the one-hot rows
    message = assert_rejected("01.one_hot", identity_rows, f"indexes a {shape} identity matrix", "ready-made").message
    assert "torch.arange" not in message, "the first hint should not give the fix away"


def test_one_hot_first_hint_names_the_row_but_not_the_fix():
    first = assert_rejected("01.one_hot", _slice_instead_of_pairs, "row 0 (label 0)", "got [1.0, 1.0, 0.0, 1.0, 0.0]").message
    assert "torch.arange" not in first, first
    fuller = hint("01.one_hot", show=False)
    assert "torch.arange" in fuller and "pair up" in fuller and "out[torch.arange" not in fuller, fuller


def test_one_hot_other_vectorised_forms_are_accepted():
    def with_scatter(labels, num_classes):  # section 7's scatter_ writes one entry per row too
        return torch.zeros(labels.shape[0], num_classes).scatter_(1, labels.unsqueeze(1), 1.0)

    def by_comparison(labels, num_classes):  # broadcasting [N, 1] == [C]
        return (labels[:, None] == torch.arange(num_classes)).float()

    assert check("01.one_hot", with_scatter, show=False).passed
    assert check("01.one_hot", by_comparison, show=False).passed


def test_one_hot_refusals_are_undone_afterwards():
    assert_rejected("01.one_hot", lambda labels, k: torch.eye(k)[labels], "`torch.eye`")
    assert torch.equal(F.one_hot(torch.tensor([1]), 2), torch.tensor([[0, 1]])) and torch.eye(2)[1].tolist() == [0.0, 1.0]
