"""Exercises of chapter 22: realistic wrong answers fail with a hint (the generic checks
live in tests/test_exercises.py)."""

from __future__ import annotations

import torch
from torch.export import Dim

from helpers import exercises
from helpers.exercises import check, hint
from tests.exercise_support import assert_rejected

# --------------------------------------------------------------------------
# 22.rescale_no_branch
# --------------------------------------------------------------------------


def test_rescale_with_python_if_fails(monkeypatch):
    def with_if(x):
        peak = x.abs().max()
        if peak > 1.0:
            return x / peak
        return x

    monkeypatch.delitem(exercises._failures, "22.rescale_no_branch", raising=False)  # a first attempt
    first = assert_rejected("22.rescale_no_branch", with_if, "froze one branch", "Python `if`").message
    assert 'hint("22.rescale_no_branch") gives a fuller hint' in first and "Hint:" not in first, first
    fuller = hint("22.rescale_no_branch", show=False)
    assert "tensor operations make the choice" in fuller and "divisor" in fuller, fuller
    second = check("22.rescale_no_branch", with_if, show=False).message
    assert "Hint:" in second and fuller in second, second
    for told in (first, fuller):  # tier 1 names the mistake, tier 2 the idea: neither names the call that is the answer
        for api in ("clamp", "torch.where", "maximum", "max(peak"):
            assert api not in told, f"{api!r} in: {told}"


def test_rescale_with_item_fails():
    def with_item(x):
        return x / max(x.abs().max().item(), 1.0)

    assert_rejected("22.rescale_no_branch", with_item, "froze one branch", ".item()")


def test_rescale_always_dividing_fails():
    def always(x):
        return x / x.abs().max()

    assert_rejected("22.rescale_no_branch", always, "unchanged")


def test_rescale_by_signed_max_fails():
    def signed(x):
        return x / x.max().clamp(min=1.0)

    assert_rejected("22.rescale_no_branch", signed, "ABSOLUTE")


def test_rescale_with_where_is_accepted():
    def where(x):
        peak = x.abs().max()
        return torch.where(peak > 1, x / peak, x)

    assert check("22.rescale_no_branch", where, show=False).passed


# --------------------------------------------------------------------------
# 22.dynamic_shapes_spec
# --------------------------------------------------------------------------


def test_spec_with_separate_dims_fails():
    def separate(max_batch, max_len):
        return {
            "x": {0: Dim("batch_x", min=1, max=max_batch), 1: Dim("len_x", min=1, max=max_len)},
            "mask": {0: Dim("batch_mask", min=1, max=max_batch), 1: Dim("len_mask", min=1, max=max_len)},
        }

    assert_rejected("22.dynamic_shapes_spec", separate, "ONE Dim object")


def test_spec_with_dynamic_features_fails():
    def features_too(max_batch, max_len):
        batch, length = Dim("batch", min=1, max=max_batch), Dim("length", min=1, max=max_len)
        return {"x": {0: batch, 1: length, 2: Dim("features")}, "mask": {0: batch, 1: length}}

    assert_rejected("22.dynamic_shapes_spec", features_too, "leave it static")


def test_spec_forgetting_the_mask_fails():
    def x_only(max_batch, max_len):
        return {"x": {0: Dim("batch", min=1, max=max_batch), 1: Dim("length", min=1, max=max_len)}, "mask": None}

    assert_rejected("22.dynamic_shapes_spec", x_only, "mask")


def test_spec_without_bounds_fails():
    def auto(max_batch, max_len):
        return {"x": {0: Dim.AUTO, 1: Dim.AUTO}, "mask": {0: Dim.AUTO, 1: Dim.AUTO}}

    assert_rejected("22.dynamic_shapes_spec", auto, "above the maximum")


def test_spec_with_exclusive_maximum_fails():
    def exclusive(max_batch, max_len):
        batch, length = Dim("batch", min=1, max=max_batch - 1), Dim("length", min=1, max=max_len - 1)
        return {"x": {0: batch, 1: length}, "mask": {0: batch, 1: length}}

    assert_rejected("22.dynamic_shapes_spec", exclusive, "inclusive")


def test_spec_with_swapped_maxima_fails():
    def swapped(max_batch, max_len):
        batch, length = Dim("batch", min=1, max=max_len), Dim("length", min=1, max=max_batch)
        return {"x": {0: batch, 1: length}, "mask": {0: batch, 1: length}}

    assert_rejected("22.dynamic_shapes_spec", swapped, "refuses batch")


def test_spec_as_a_tuple_is_accepted():
    def as_tuple(max_batch, max_len):
        batch, length = Dim("batch", min=1, max=max_batch), Dim("length", min=1, max=max_len)
        return ({0: batch, 1: length}, {0: batch, 1: length})

    assert check("22.dynamic_shapes_spec", as_tuple, show=False).passed


def test_rescale_with_torch_maximum_and_a_constant_tensor_is_accepted():
    # torch.tensor(1.0) makes the tracer warn ("registered as constants"), harmlessly: the trace is right
    def with_maximum(x):
        return x / torch.maximum(x.abs().max(), torch.tensor(1.0))

    result = check("22.rescale_no_branch", with_maximum, show=False)
    assert result.passed, result.message


def test_rescale_with_python_max_shows_the_whole_tracer_warning():
    def python_max(x):
        return x / max(x.abs().max(), torch.tensor(1.0))

    assert_rejected("22.rescale_no_branch", python_max, "froze one branch",
                    "Converting a tensor to a Python boolean might cause the trace to be incorrect.")


def test_spec_with_lower_bound_two_fails():
    # export does not guard the lower bound at run time: the program still runs batch 1; its range constraints tell
    def min_two(max_batch, max_len):
        batch, length = Dim("batch", min=2, max=max_batch), Dim("length", min=2, max=max_len)
        return {"x": {0: batch, 1: length}, "mask": {0: batch, 1: length}}

    assert_rejected("22.dynamic_shapes_spec", min_two, "lower bound 2", "batch size 1", "range_constraints")


def test_spec_with_bounded_dim_dynamic_explains_the_0_1_specialisation():
    # Dim.DYNAMIC(min=1, max=...) is accepted by export, but recorded from 2: torch's doing, not the learner's
    def hinted(max_batch, max_len):
        batch, length = Dim.DYNAMIC(min=1, max=max_batch), Dim.DYNAMIC(min=1, max=max_len)
        return {"x": {0: batch, 1: length}, "mask": {0: batch, 1: length}}

    result = assert_rejected("22.dynamic_shapes_spec", hinted, "Dim.DYNAMIC with min=1", "0/1 specialisation",
                             "range_constraints")
    assert "leaves out" not in result.message


def test_general_hint_says_dim_dynamic_takes_bounds():
    text = exercises.EXERCISES["22.dynamic_shapes_spec"].hint
    assert "have no upper bound" not in text and "max=" in text and "0 and 1" in text
