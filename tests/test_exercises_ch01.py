"""Wrong answers that the checker of exercise 01.softmax must reject.

(The other chapter 01 exercises are tested in tests/test_exercises_ch00_ch01.py.)
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch import nn

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


def _sums_over_everything(x, dim):
    e = (x - x.max()).exp()
    return e / e.sum()


def _squares_the_exponentials(x, dim):
    e = (x - x.amax(dim=dim, keepdim=True)).exp() ** 2  # still sums to 1, wrong values
    return e / e.sum(dim=dim, keepdim=True)


def _returns_float32(x, dim):
    e = (x - x.amax(dim=dim, keepdim=True)).exp()
    return (e / e.sum(dim=dim, keepdim=True)).float()


@pytest.mark.parametrize(
    ("wrong", "fragment"),
    [
        (_no_keepdim, "removes that dimension"),
        (_keepdim_for_the_max_only, "removes that dimension"),
        (_no_max_subtracted, "overflowed"),
        (_subtracts_in_place, "in place"),
        (_always_last_dim, "sum to 1"),
        (_sums_over_everything, "sum to 1"),
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
    ids=["torch.softmax", "F.softmax", "Tensor.softmax", "nn.Softmax", "torch.special.softmax", "F.log_softmax",
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
        (_categorical_probs, "a `torch.distributions` distribution"),
        (_categorical_logits, "a `torch.distributions` distribution"),
        (lambda x, dim: torch.distributions.OneHotCategorical(logits=x.movedim(dim, -1)).probs.movedim(-1, dim),
         "a `torch.distributions` distribution"),
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
    assert "keepdim=True" in hint("01.softmax", show=False)
    second = assert_rejected("01.softmax", _no_max_subtracted, "overflowed").message
    assert "x.amax(dim=dim, keepdim=True)" in second, "the second failure should add the fuller hint"


def test_softmax_first_overflow_hint_leaves_out_the_fix():
    first = assert_rejected("01.softmax", _no_max_subtracted, "overflowed", "88.7").message
    assert "amax" not in first and "keepdim" not in first, first


def test_softmax_through_logsumexp_is_accepted():
    assert check("01.softmax", lambda x, dim: (x - torch.logsumexp(x, dim, keepdim=True)).exp(), show=False).passed


def test_softmax_task_states_the_goal_but_leaves_the_recipe_to_the_hints():
    message = check("01.softmax", lambda x, dim: (_ for _ in ()).throw(NotImplementedError), show=False).message
    assert "as large as 1000" in message and "88.7" in message and "Leave x unchanged" in message, message
    assert "amax" not in message and "keepdim" not in message, message


def test_softmax_hint_before_any_attempt_is_the_general_one():
    assert "e.sum(dim=dim, keepdim=True)" in hint("01.softmax", show=False)


def test_pairwise_distance_library_is_refused():
    from tests.exercise_support import assert_rejected as rejected

    rejected("01.pairwise_sq_dists", lambda a, b: F.pairwise_distance(a[:, None], b[None], eps=0) ** 2, "does it for you")
    rejected("01.pairwise_sq_dists", lambda a, b: nn.PairwiseDistance(eps=0)(a[:, None], b[None]) ** 2, "does it for you")
