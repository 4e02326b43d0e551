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
    ],
    ids=["torch.softmax", "F.softmax", "Tensor.softmax", "nn.Softmax", "torch.special.softmax", "F.log_softmax",
         "Tensor.log_softmax", "nn.LogSoftmax", "torch._softmax", "torch._log_softmax", "aten._softmax",
         "aten._softmax.default", "aten.softmax", "aten.softmax.int", "aten._log_softmax.default"],
)
def test_softmax_library_shortcuts_are_refused(shortcut):
    assert_rejected("01.softmax", shortcut, "write softmax from amax, exp and sum yourself", "does it for you")


def test_softmax_refusal_is_undone_afterwards():
    assert_rejected("01.softmax", lambda x, dim: torch.softmax(x, dim), "`torch.softmax` does it for you")
    assert "softmax" not in vars(torch.Tensor) and "log_softmax" not in vars(torch.Tensor)
    assert "__init__" in vars(nn.Softmax) and nn.Softmax.__init__.__module__ == "torch.nn.modules.activation"
    x = torch.tensor([[0.0, 0.0]])
    for library in (torch.softmax(x, 1), F.softmax(x, dim=1), x.softmax(1), torch.special.softmax(x, 1), x.log_softmax(1).exp()):
        torch.testing.assert_close(library, torch.full((1, 2), 0.5))


def test_softmax_first_hint_names_the_failure_but_not_the_fix():
    first = assert_rejected("01.softmax", _no_keepdim, "for x of shape [4, 3], dim=1", "broadcasting failed").message
    assert "keepdim=True" not in first, first
    assert "keepdim=True" in hint("01.softmax", show=False)
    second = assert_rejected("01.softmax", _no_max_subtracted, "overflowed").message
    assert "x.amax(dim=dim, keepdim=True)" in second, "the second failure should add the fuller hint"


def test_softmax_through_logsumexp_is_accepted():
    assert check("01.softmax", lambda x, dim: (x - torch.logsumexp(x, dim, keepdim=True)).exp(), show=False).passed


def test_softmax_task_names_keepdim_and_the_max():
    message = check("01.softmax", lambda x, dim: (_ for _ in ()).throw(NotImplementedError), show=False).message
    assert "keepdim=True" in message and "amax" in message


def test_softmax_hint_before_any_attempt_is_the_general_one():
    assert "e.sum(dim=dim, keepdim=True)" in hint("01.softmax", show=False)
