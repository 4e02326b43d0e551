"""Wrong answers that the checkers of exercises 01.softmax and 01.one_hot must reject.

(The first tests of 01.pairwise_sq_dists and 01.one_hot are in tests/test_exercises_ch00_ch01.py.)
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import OneHotCategorical

import helpers.exercises as exercises
from helpers.exercises import check, hint
from tests.exercise_support import assert_rejected


@pytest.fixture(autouse=True)
def _first_attempt(monkeypatch):
    """Every test starts with no failed attempts, so a hint's words are checked in the first tier."""
    monkeypatch.setattr(exercises, "_failures", Counter())
    monkeypatch.setattr(exercises, "_fuller", {})


def _no_keepdim(x, dim):
    e = (x - x.amax(dim=dim)).exp()  # [4, 3] - [4] fails; a square x broadcasts along the wrong dim
    return e / e.sum(dim=dim)


def _keepdim_for_the_max_only(x, dim):
    e = (x - x.amax(dim=dim, keepdim=True)).exp()
    return e / e.sum(dim=dim)


def _no_max_subtracted(x, dim):
    return x.exp() / x.exp().sum(dim=dim, keepdim=True)  # exp(1000) = inf, inf / inf = nan


def _subtracts_in_place(x, dim):
    x.sub_(x.amax(dim=dim, keepdim=True))
    return x.exp() / x.exp().sum(dim=dim, keepdim=True)


def _always_last_dim(x, dim):
    e = (x - x.amax(dim=-1, keepdim=True)).exp()
    return e / e.sum(dim=-1, keepdim=True)


def _max_along_the_last_dim(x, dim):  # right for dim=-1 only: a shift that varies along dim does not cancel
    e = (x - x.amax(dim=-1, keepdim=True)).exp()
    return e / e.sum(dim=dim, keepdim=True)


def _sums_over_everything(x, dim):
    e = (x - x.max()).exp()
    return e / e.sum()


def _one_shift_for_the_whole_tensor(x, dim):  # fine in float64 here; float32 row [-1000, ..., 60] - 1000 underflows
    e = (x - x.max()).exp()
    return e / e.sum(dim=dim, keepdim=True)


def _squares_the_exponentials(x, dim):
    e = (x - x.amax(dim=dim, keepdim=True)).exp() ** 2  # still sums to 1, wrong values
    return e / e.sum(dim=dim, keepdim=True)


def _returns_float32(x, dim):
    e = (x - x.amax(dim=dim, keepdim=True)).exp()
    return (e / e.sum(dim=dim, keepdim=True)).float()


def _flattens_with_view(x, dim):  # right on contiguous memory; view() cannot merge a permuted tensor's dims
    if dim not in (-1, x.dim() - 1):
        e = (x - x.amax(dim=dim, keepdim=True)).exp()
        return e / e.sum(dim=dim, keepdim=True)
    flat = x.view(-1, x.shape[-1])
    e = (flat - flat.amax(dim=1, keepdim=True)).exp()
    return (e / e.sum(dim=1, keepdim=True)).view(x.shape)


def _assumes_finite_logits(x, dim):  # a coverage test: the checker must pass masked (-inf) logits
    if not torch.isfinite(x).all():
        raise ValueError("masked logits are not supported")
    e = (x - x.amax(dim=dim, keepdim=True)).exp()
    return e / e.sum(dim=dim, keepdim=True)


@pytest.mark.parametrize(
    ("wrong", "fragment"),
    [
        (_flattens_with_view, "view size is not compatible"),
        (_assumes_finite_logits, "masked logits are not supported"),
        (_no_keepdim, "removes that dimension"),
        (_keepdim_for_the_max_only, "removes that dimension"),
        (_no_max_subtracted, "overflowed"),
        (_subtracts_in_place, "in place"),
        (_always_last_dim, "sum to 1"),
        (_sums_over_everything, "sum to 1"),
        (_one_shift_for_the_whole_tensor, "row 1 of your result is nan"),
        (_squares_the_exponentials, "off by"),
        (_returns_float32, "should stay torch.float64, got torch.float32"),
    ],
)
def test_softmax_wrong_answers_fail(wrong, fragment):
    assert_rejected("01.softmax", wrong, fragment)


@pytest.mark.parametrize(
    "shortcut",
    [
        lambda x, dim: torch.softmax(x, dim),
        lambda x, dim: F.softmax(x, dim=dim),
        lambda x, dim: x.softmax(dim),
        lambda x, dim: nn.Softmax(dim=dim)(x),
        lambda x, dim: torch.special.softmax(x, dim),
        lambda x, dim: torch.special.log_softmax(x, dim).exp(),
        lambda x, dim: F.log_softmax(x, dim=dim).exp(),
        lambda x, dim: x.log_softmax(dim).exp(),
        lambda x, dim: nn.LogSoftmax(dim=dim)(x).exp(),
        lambda x, dim: torch._softmax(x, dim, False),
        lambda x, dim: torch._log_softmax(x, dim, False).exp(),
        lambda x, dim: torch.ops.aten._softmax(x, dim, False),
        lambda x, dim: torch.ops.aten._softmax.default(x, dim, False),
        lambda x, dim: torch.ops.aten.softmax(x, dim),
        lambda x, dim: torch.ops.aten.softmax.int(x, dim),
        lambda x, dim: torch.ops.aten._log_softmax.default(x, dim, False).exp(),
        lambda x, dim: F.softmin(-x, dim=dim),
        lambda x, dim: nn.Softmin(dim=dim)(-x),
        lambda x, dim: torch._safe_softmax(x, dim),
        lambda x, dim: torch._refs.softmax(x, dim),
        lambda x, dim: torch._refs.nn.functional.softmin(-x, dim),
        lambda x, dim: torch._decomp.decompositions._softmax(x, dim, False),
    ],
    ids=["torch.softmax", "F.softmax", "Tensor.softmax", "nn.Softmax", "torch.special.softmax",
         "torch.special.log_softmax", "F.log_softmax",
         "Tensor.log_softmax", "nn.LogSoftmax", "torch._softmax", "torch._log_softmax", "aten._softmax",
         "aten._softmax.default", "aten.softmax", "aten.softmax.int", "aten._log_softmax.default", "F.softmin",
         "nn.Softmin", "torch._safe_softmax", "torch._refs.softmax", "torch._refs.softmin", "torch._decomp._softmax"],
)
def test_softmax_library_shortcuts_are_refused(shortcut):
    assert_rejected("01.softmax", shortcut, "write softmax yourself", "does it for you")


def _categorical_probs(x, dim):
    return torch.distributions.Categorical(logits=x.movedim(dim, -1)).probs.movedim(-1, dim)


def _categorical_logits(x, dim):  # the normalised logits are log-softmax, computed with logsumexp
    return torch.distributions.Categorical(logits=x.movedim(dim, -1)).logits.exp().movedim(-1, dim)


def _attention_weights(x, dim):  # one query of ones against keys x: the attention weights are softmax(x)
    moved = x.movedim(dim, -1)
    query = torch.ones(*moved.shape[:-1], 1, 1, dtype=x.dtype)
    weights = F.scaled_dot_product_attention(query, moved[..., None], torch.eye(moved.shape[-1], dtype=x.dtype), scale=1.0)
    return weights.squeeze(-2).movedim(-1, dim)


@pytest.mark.parametrize(
    ("shortcut", "fragment"),
    [
        # Categorical normalises its logits with logsumexp before Distribution.__init__ runs: that is seen first
        (_categorical_probs, "which your code reached through `torch.distributions`"),
        (_categorical_logits, "which your code reached through `torch.distributions`"),
        (lambda x, dim: torch.distributions.OneHotCategorical(logits=x.movedim(dim, -1)).probs.movedim(-1, dim),
         "which your code reached through `torch.distributions`"),
        # no class is constructed here: the operator itself is seen, below the torch function that issued it
        (lambda x, dim: torch.distributions.utils.logits_to_probs(x.movedim(dim, -1)).movedim(-1, dim),
         "`torch.ops.aten._softmax.default`, which your code reached through `torch.distributions`"),
        (lambda x, dim: torch.masked.softmax(x, dim), "`torch.ops.aten._softmax.default`, which your code reached "
         "through `torch.masked`"),
        (_attention_weights, "`torch.ops.aten._safe_softmax.default`, which your code reached through another torch function"),
    ],
    ids=["Categorical.probs", "Categorical.logits", "OneHotCategorical", "logits_to_probs", "torch.masked", "attention"],
)
def test_softmax_reached_through_other_torch_functions_is_refused(shortcut, fragment):
    x = torch.randn(2, 3, 5, dtype=torch.float64)
    torch.testing.assert_close(shortcut(x, 1), x.softmax(1))  # each really is a softmax
    assert_rejected("01.softmax", shortcut, "write softmax yourself", fragment)


def test_softmax_refusal_is_undone_afterwards():
    assert_rejected("01.softmax", lambda x, dim: torch.softmax(x, dim), "`torch.softmax` does it for you")
    assert "softmax" not in vars(torch.Tensor) and "log_softmax" not in vars(torch.Tensor)
    assert "__init__" in vars(nn.Softmax) and nn.Softmax.__init__.__module__ == "torch.nn.modules.activation"
    x = torch.tensor([[0.0, 0.0]])
    for library in (torch.softmax(x, 1), F.softmax(x, dim=1), x.softmax(1), torch.special.softmax(x, 1), x.log_softmax(1).exp()):
        torch.testing.assert_close(library, torch.full((1, 2), 0.5))


def test_softmax_first_hint_names_the_failure_but_not_the_fix():
    first = assert_rejected("01.softmax", _no_keepdim, "for x of shape [4, 3], dim=1", "broadcasting failed").message
    assert "keepdim" not in first and "amax" not in first, first
    assert "keepdim=True" in check("01.softmax", _no_keepdim, show=False).message, "the broadcasting hint names keepdim"
    second = assert_rejected("01.softmax", _no_max_subtracted, "overflowed").message
    assert "shift invariant" in second and "largest exponent" in second, "the second failure should add the fuller hint"


def test_softmax_max_along_another_dim_is_named():
    x = torch.randn(4, 3, dtype=torch.float64)
    torch.testing.assert_close(_max_along_the_last_dim(x, 1), x.softmax(1))  # right when dim is the last one
    first = assert_rejected("01.softmax", _max_along_the_last_dim, "a square x of shape [3, 3], dim=0",
                            "shifted by the maximum along dim=1 (or -1)", "sum runs along dim=0", "does not cancel").message
    assert "same dim as the sum" not in first and "keepdim" not in first, first
    second = check("01.softmax", _max_along_the_last_dim, show=False).message
    assert "Take the maximum along the same dim as the sum" in second, second


def test_softmax_first_overflow_hint_gives_the_shift_invariance_but_not_the_fix():
    first = assert_rejected("01.softmax", _no_max_subtracted, "overflowed", "88.7", "multiplied by exp(-c)").message
    assert "amax" not in first and "keepdim" not in first and "maximum" not in first, first


def test_softmax_one_shift_for_the_whole_tensor_is_named_as_underflow_not_overflow():
    x = torch.randn(2, 3, 5, dtype=torch.float64)
    torch.testing.assert_close(_one_shift_for_the_whole_tensor(x, 1), x.softmax(1))  # right wherever nothing underflows
    first = assert_rejected("01.softmax", _one_shift_for_the_whole_tensor, "float32 logits up to 1000",
                            "underflowed to 0", "0 / 0 is nan", "one shift for the whole tensor").message
    assert "overflowed" not in first and "own shift" not in first and "keepdim" not in first, first
    second = check("01.softmax", _one_shift_for_the_whole_tensor, show=False).message
    assert "Each slice along dim needs its own shift" in second and "largest exponent" in second, second


def test_softmax_nan_from_overflow_is_still_called_overflow():
    def shifts_by_the_smallest_entry(x, dim):  # a per-slice shift, but the wrong one: exp(1000 - 0) overflows
        e = (x - x.amin(dim=dim, keepdim=True)).exp()
        return e / e.sum(dim=dim, keepdim=True)

    assert_rejected("01.softmax", shifts_by_the_smallest_entry, "float32 logits up to 1000", "exp still overflowed",
                    "smallest entry")


def _clamps_before_exp(x, dim):  # finite, sums to 1; on the 1000-logit rows it matches a shift along dim=0 to 1e-4
    e = x.clamp(max=80).exp()
    return e / e.sum(dim, keepdim=True)


def test_softmax_clamp_is_named_as_a_clamp_not_as_a_shift_along_another_dim():
    first = assert_rejected("01.softmax", _clamps_before_exp, "float32 logits up to 1000", "both came out as 0.3333",
                            "x.clamp(max=...)", "changes the values", "cancels out").message
    assert "shifted by the maximum along" not in first, first


def test_softmax_shift_along_another_dim_needs_a_second_match_on_a_probe():
    from helpers.exercises import Hint
    from helpers.exercises.ch01 import _name_a_shift_along_another_dim, _shift_along

    x = torch.tensor([[1000.0, 999.0, 998.0, 0.0], [-1000.0, -1001.0, 50.0, 60.0]])
    got = _clamps_before_exp(x, 1)
    assert torch.allclose(got, _shift_along(x, 0, 1), rtol=1e-4, atol=1e-4)  # the chance match on x alone
    _name_a_shift_along_another_dim(_clamps_before_exp, x, got, 1, "x", 1e-4)  # the probe tells them apart: no Hint
    with pytest.raises(Hint, match="shifted by the maximum along dim=0"):  # the real mistake is still named
        wrong = lambda x, dim: _shift_along(x, 0, dim)  # noqa: E731
        _name_a_shift_along_another_dim(wrong, x, wrong(x, 1), 1, "x", 1e-4)


@pytest.mark.parametrize(
    ("statistic", "name"),
    [
        (lambda x, dim: x.mean(dim, keepdim=True), "mean"),
        (lambda x, dim: x.median(dim, keepdim=True).values, "median"),
    ],
    ids=["mean", "median"],
)
def test_softmax_shift_by_a_statistic_that_still_overflows_is_named(statistic, name):
    def shifts_by(x, dim):
        e = (x - statistic(x, dim)).exp()
        return e / e.sum(dim, keepdim=True)

    x = torch.randn(2, 3, 5, dtype=torch.float64)
    torch.testing.assert_close(shifts_by(x, 1), x.softmax(1))  # the shift cancels where nothing overflows
    first = assert_rejected("01.softmax", shifts_by, "float32 logits up to 1000", f"each slice's {name} along dim=1",
                            "exp still overflowed", "c must be the largest entry of the slice, not its mean or median").message
    assert "Choose c for each slice on its own" not in first and "keepdim" not in first, first


def _softmax_from_lse(lse):
    return lambda x, dim: (x - lse(x, dim)).exp()


@pytest.mark.parametrize(
    ("through_logsumexp", "fragment"),
    [
        (_softmax_from_lse(lambda x, dim: torch.logsumexp(x, dim, keepdim=True)), "log-sum-exp (`torch.logsumexp`"),
        (_softmax_from_lse(lambda x, dim: x.logsumexp(dim, keepdim=True)), "log-sum-exp (`torch.logsumexp`"),
        (_softmax_from_lse(lambda x, dim: torch.special.logsumexp(x, dim, keepdim=True)), "log-sum-exp"),
        (_softmax_from_lse(lambda x, dim: torch.ops.aten.logsumexp(x, [dim], True)), "log-sum-exp"),
        (_softmax_from_lse(lambda x, dim: torch.ops.aten.logsumexp.default(x, [dim], True)), "log-sum-exp"),
        (_softmax_from_lse(lambda x, dim: torch._refs.logsumexp(x, dim, keepdim=True)), "log-sum-exp"),
        (_softmax_from_lse(lambda x, dim: torch.masked.logsumexp(x, dim, keepdim=True)),
         "which your code reached through `torch.masked`"),
    ],
    ids=["torch.logsumexp", "Tensor.logsumexp", "torch.special.logsumexp", "aten.logsumexp",
         "aten.logsumexp.default", "torch._refs.logsumexp", "torch.masked.logsumexp"],
)
def test_softmax_through_logsumexp_is_refused(through_logsumexp, fragment):
    x = torch.randn(2, 3, 5, dtype=torch.float64)
    torch.testing.assert_close(through_logsumexp(x, 1), x.softmax(1))  # each really is a softmax
    assert_rejected("01.softmax", through_logsumexp, "write softmax yourself", fragment, "does it for you")


def _last_of_cumulative(lcse):  # the last entry of a cumulative log-sum-exp along dim is the log-sum-exp
    return _softmax_from_lse(lambda x, dim: lcse(x, dim).narrow(dim, -1, 1))


@pytest.mark.parametrize(
    "through_logcumsumexp",
    [
        _last_of_cumulative(lambda x, dim: x.logcumsumexp(dim)),
        _last_of_cumulative(lambda x, dim: torch.logcumsumexp(x, dim)),
        _last_of_cumulative(lambda x, dim: torch._logcumsumexp(x, dim)),
        _last_of_cumulative(lambda x, dim: torch.ops.aten.logcumsumexp(x, dim)),
        _last_of_cumulative(lambda x, dim: torch.ops.aten._logcumsumexp.default(x, dim)),
    ],
    ids=["Tensor.logcumsumexp", "torch.logcumsumexp", "torch._logcumsumexp", "aten.logcumsumexp",
         "aten._logcumsumexp.default"],
)
def test_softmax_through_logcumsumexp_is_refused(through_logcumsumexp):
    x = torch.randn(2, 3, 5, dtype=torch.float64)
    torch.testing.assert_close(through_logcumsumexp(x, 1), x.softmax(1))  # each really is a softmax
    assert_rejected("01.softmax", through_logcumsumexp, "write softmax yourself",
                    "cumulative log-sum-exp (the last entry of `torch.logcumsumexp`", "does it for you")


def test_softmax_task_states_the_goal_but_leaves_the_recipe_to_the_hints():
    def stub(x, dim):  # the untouched stub: a `raise` line of its own (see helpers.exercises._raised_by_learner)
        raise NotImplementedError

    message = check("01.softmax", stub, show=False).message
    assert "as large as 1000" in message and "88.7" in message and "Leave x unchanged" in message, message
    assert "no library softmax and no logsumexp" in message, message
    assert "amax" not in message and "keepdim" not in message, message
    assert "subtract" not in message.lower() and "shift" not in message.lower(), "the task should not give the trick away"


def test_softmax_hint_before_any_attempt_is_the_general_one():
    general = hint("01.softmax", show=False)
    assert "shift invariant" in general and "largest exponent of that slice exactly 0" in general, general
    assert "amax" not in general and "keepdim" not in general, "the general hint names the idea, not the recipe"
    assert "maximum" not in general and "subtract from each slice" not in general.lower(), general


def test_pairwise_distance_library_is_refused():
    from tests.exercise_support import assert_rejected as rejected

    rejected("01.pairwise_sq_dists", lambda a, b: F.pairwise_distance(a[:, None], b[None], eps=0) ** 2, "does it for you")
    rejected("01.pairwise_sq_dists", lambda a, b: nn.PairwiseDistance(eps=0)(a[:, None], b[None]) ** 2, "does it for you")


# ---------------------------------------------------------------- 01.one_hot: ready-made one-hot rows


def _scaled_identity(labels, k):  # the route a reviewer found: rows of 2 * I, scaled back
    return (torch.ones(k).diag() * 2)[labels] / 2


def _expanded_identity(labels, k):
    n = labels.shape[0]
    return torch.ones(k).diag().expand(n, k, k).gather(1, labels[:, None, None].expand(n, 1, k)).squeeze(1)


@pytest.mark.parametrize(
    ("identity_rows", "table"),
    [
        (_scaled_identity, "[5, 5]"),
        (lambda labels, k: (torch.diag_embed(torch.ones(k)) * 3)[labels] / 3, "[5, 5]"),
        (lambda labels, k: 1 - (1 - torch.ones(k).diag())[labels], "[5, 5]"),  # complemented
        (lambda labels, k: ((torch.ones(k).diag() * 2 + 1)[labels] - 1) / 2, "[5, 5]"),  # scaled and shifted
        (lambda labels, k: torch.ones(k).diag().flip(1)[labels].flip(1), "[5, 5]"),  # columns reversed
        (lambda labels, k: torch.ones(k).diag().roll(1, 0)[(labels + 1) % k], "[5, 5]"),  # rows reordered
        (lambda labels, k: (torch.diag(torch.arange(1.0, k + 1))[labels] != 0).float(), "[5, 5]"),
        (lambda labels, k: torch.diagflat(torch.ones(k))[labels], "[5, 5]"),
        (lambda labels, k: torch.block_diag(*[torch.ones(1, 1)] * k)[labels], "[5, 5]"),
        (lambda labels, k: torch.linalg.matrix_power(torch.ones(k, k), 0)[labels], "[5, 5]"),
        (lambda labels, k: (torch.ones(k).diag() * 2)[:, labels].T / 2, "[5, 5]"),  # columns, transposed
        (lambda labels, k: F.embedding_bag(labels[:, None], torch.ones(k).diag(), mode="sum"), "[5, 5]"),
        (lambda labels, k: torch.ones(k).diag().take(labels[:, None] * k + torch.arange(k)), "[5, 5]"),
        (lambda labels, k: torch.ones(k).diag().flatten()[labels[:, None] * k + torch.arange(k)], "[25] (flattened)"),
        (_expanded_identity, "[5, 5] (expanded to [4, 5, 5])"),
    ],
    ids=["scaled-diag", "scaled-diag_embed", "1-I", "affine", "flip", "roll", "diag-nonzero", "diagflat",
         "block_diag", "matrix_power", "columns", "embedding_bag", "take", "flattened", "expanded"],
)
def test_one_hot_rows_of_a_transformed_identity_are_refused(identity_rows, table):
    labels = torch.tensor([0, 3, 3, 1])
    assert torch.equal(identity_rows(labels, 5), torch.eye(5)[labels])  # each really gives the one-hot rows
    message = assert_rejected("01.one_hot", identity_rows, f"indexes a {table} identity matrix", "ready-made").message
    assert "torch.arange" not in message, "the first hint should not give the fix away"


@pytest.mark.parametrize(
    ("numpy_rows", "name"),
    [
        (lambda labels, k: torch.from_numpy(np.eye(k, dtype=np.float32)[labels.numpy()]), "numpy.eye"),
        (lambda labels, k: torch.from_numpy(np.eye(k, dtype=np.float32))[labels], "numpy.eye"),
        (lambda labels, k: torch.tensor(np.identity(k, dtype=np.float32)[labels.numpy()]), "numpy.identity"),
        (lambda labels, k: torch.from_numpy(np.take(np.eye(k, dtype=np.float32), labels.numpy(), axis=0)), "numpy.eye"),
        (lambda labels, k: torch.from_numpy(np.diag(np.ones(k, dtype=np.float32))[labels.numpy()]), "numpy.diag"),
        (lambda labels, k: torch.from_numpy(np.diagflat(np.ones(k, dtype=np.float32))[labels.numpy()]), "numpy.diagflat"),
    ],
    ids=["eye-indexed-in-numpy", "eye-indexed-in-torch", "identity", "take-of-eye", "diag", "diagflat"],
)
def test_one_hot_rows_of_a_numpy_identity_are_refused(numpy_rows, name):
    """NumPy's identity matrices, indexed in NumPy where no torch mode sees the rows read: refused by name."""
    labels = torch.tensor([0, 3, 3, 1])
    assert torch.equal(numpy_rows(labels, 5), torch.eye(5)[labels])  # each really gives the one-hot rows
    assert_rejected("01.one_hot", numpy_rows, "yourself", f"`{name}`", "ready-made")


def test_one_hot_written_in_numpy_with_paired_indices_is_accepted():
    """NumPy is not refused as such: zeros with one 1.0 per row written by paired indices computes the entries."""
    def numpy_pairs(labels, k):
        out = np.zeros((labels.shape[0], k), dtype=np.float32)
        out[np.arange(labels.shape[0]), labels.numpy()] = 1.0
        return torch.from_numpy(out)

    result = check("01.one_hot", numpy_pairs, show=False)
    assert result.passed, result.message
    assert np.eye(2).tolist() == [[1.0, 0.0], [0.0, 1.0]] and np.diag([1, 2]).tolist() == [[1, 0], [0, 2]]


@pytest.mark.parametrize(
    "through_a_distribution",
    [
        lambda labels, k: OneHotCategorical(logits=-(labels[:, None] - torch.arange(k)).abs().float()).mode,
        lambda labels, k: OneHotCategorical(probs=torch.ones(k)).enumerate_support()[labels],
    ],
    ids=["OneHotCategorical.mode", "enumerate_support"],
)
def test_one_hot_through_torch_distributions_is_refused(through_a_distribution):
    labels = torch.tensor([0, 3, 3, 1])
    assert torch.equal(through_a_distribution(labels, 5), torch.eye(5)[labels])
    assert_rejected("01.one_hot", through_a_distribution, "a `torch.distributions` distribution", "does it for you")


def _comparison_left_as_bool(labels, num_classes):
    return labels[:, None] == torch.arange(num_classes)


def _zeros_in_float64(labels, num_classes):
    out = torch.zeros(labels.shape[0], num_classes, dtype=torch.float64)
    out[torch.arange(labels.shape[0]), labels] = 1.0
    return out


def _width_from_the_largest_label(labels, num_classes):
    return (labels[:, None] == torch.arange(int(labels.max()) + 1)).float()


def _width_at_least_the_largest_label(labels, num_classes):  # right for every non-empty batch
    out = torch.zeros(labels.shape[0], max(num_classes, int(labels.max()) + 1))
    out[torch.arange(labels.shape[0]), labels] = 1.0
    return out


def test_one_hot_width_comes_from_num_classes_alone():
    from helpers.exercises.ch01 import _one_hot_reference

    assert torch.equal(_width_at_least_the_largest_label(torch.tensor([0, 3, 3, 1]), 5), torch.eye(5)[[0, 3, 3, 1]])
    assert _one_hot_reference(torch.tensor([], dtype=torch.int64), 4).shape == (0, 4)
    assert _one_hot_reference(torch.tensor([0]), 10).shape == (1, 10)
    assert_rejected("01.one_hot", _width_at_least_the_largest_label, "for no labels", "num_classes=4",
                    "shape (0, 4)")
    # the width-from-max mistake is named whichever case it meets first
    assert_rejected("01.one_hot", _width_from_the_largest_label, "num_classes=", "should have shape")


def _labels_made_float(labels, num_classes):
    out = torch.zeros(labels.shape[0], num_classes)
    out[torch.arange(labels.shape[0]), labels.float()] = 1.0
    return out


def _scatter_with_float_labels(labels, num_classes):
    return torch.zeros(labels.shape[0], num_classes).scatter_(1, labels.float().unsqueeze(1), 1.0)


@pytest.mark.parametrize(
    ("wrong", "fragments"),
    [
        (_comparison_left_as_bool, ("should be float32", "got torch.bool")),
        (_zeros_in_float64, ("should be float32", "got torch.float64")),
        (_width_from_the_largest_label, ("num_classes=5", "should have shape (4, 5), got (4, 4)")),
        (_labels_made_float, ("floating-point tensor as an index", "IndexError")),
        (_scatter_with_float_labels, ("floating-point tensor as an index", "scatter")),
    ],
    ids=["bool", "float64", "width-from-max", "float-labels-index", "float-labels-scatter"],
)
def test_one_hot_realistic_mistakes_are_named(wrong, fragments):
    assert_rejected("01.one_hot", wrong, *fragments)


def test_one_hot_reading_its_own_result_is_not_mistaken_for_an_identity():
    def reads_back_its_result(labels, num_classes):  # right, if roundabout: a read of its own one-hot rows
        out = torch.zeros(labels.shape[0], num_classes)
        out[torch.arange(labels.shape[0]), labels] = 1.0
        return out[torch.arange(labels.shape[0])]

    def index_put(labels, num_classes):
        out = torch.zeros(labels.shape[0], num_classes)
        return out.index_put_((torch.arange(labels.shape[0]), labels), torch.tensor(1.0))

    for right in (reads_back_its_result, index_put,
                  lambda labels, k: torch.where(labels[:, None] == torch.arange(k), 1.0, 0.0)):
        assert check("01.one_hot", right, show=False).passed


def test_one_hot_table_detector():
    from helpers.exercises.ch01 import _one_hot_table

    eye = torch.eye(4)
    for table in (eye, 2 * eye - 1, 1 - eye, eye.flip(0), eye[:, :3], eye[:3], eye.bool(), eye.long() * 7):
        assert _one_hot_table(table, 4) is not None, table
    one_hot_with_repeats = torch.eye(4)[torch.tensor([0, 2, 2, 1])]
    for other in (torch.zeros(4, 4), torch.ones(4, 4), torch.arange(16.0).reshape(4, 4), one_hot_with_repeats,
                  torch.eye(4)[:1], torch.tensor([0, 3, 3, 1]), torch.full((4, 4), float("nan"))):
        assert _one_hot_table(other, 4) is None, other


# ---------------------------------------------------------------- the fuller hints name the idea, not the code


def _no_broadcast(a, b):
    return ((a - b) ** 2).sum(-1)


def _sums_wrong_axis(a, b):
    return ((a[:, None, :] - b[None, :, :]) ** 2).sum(dim=1)


def _slice_instead_of_pairs(labels, num_classes):
    out = torch.zeros(labels.shape[0], num_classes)
    out[:, labels] = 1.0
    return out


def test_fuller_hints_do_not_paste_the_reference_solutions():
    pasted = {
        "01.pairwise_sq_dists": ("a[:, None, :]", "b[None, :, :]", "a[:, None] - b[None]"),
        "01.one_hot": ("out[torch.arange", "scatter_(1, labels", "labels[:, None] =="),
        "01.softmax": ("x.amax(dim=dim, keepdim=True)", "e.sum(dim=dim, keepdim=True)", "(x - m).exp()"),
    }
    wrong_answers = {
        "01.pairwise_sq_dists": (_no_broadcast, _sums_wrong_axis, _loops_over_the_rows),
        "01.one_hot": (_slice_instead_of_pairs, _scaled_identity, _width_from_the_largest_label),
        "01.softmax": (_no_keepdim, _no_max_subtracted, _subtracts_in_place, _sums_over_everything,
                       _one_shift_for_the_whole_tensor, _max_along_the_last_dim),
    }
    for name, answers in wrong_answers.items():
        texts = [hint(name, show=False)]
        for wrong in answers:  # twice each: the second failure shows the fuller hint
            check(name, wrong, show=False)
            texts.append(check(name, wrong, show=False).message)
        assert all("Hint:" in text for text in texts[1:]), texts
        for text in texts:
            for fragment in pasted[name]:
                assert fragment not in text, f"{name}: a hint pastes {fragment!r}: {text}"


def _loops_over_the_rows(a, b):
    return torch.stack([((a[i] - b) ** 2).sum(-1) for i in range(a.shape[0])])
