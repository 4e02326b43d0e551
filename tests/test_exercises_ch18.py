"""Exercises of chapter 18: realistic wrong answers fail with a hint (the generic
"reference passes / stub not attempted" checks live in tests/test_exercises.py)."""

from __future__ import annotations

from helpers.exercises import check
from tests.exercise_support import assert_rejected

# --------------------------------------------------------------------------
# 18.adam_state_bytes
# --------------------------------------------------------------------------


def test_adam_state_without_step_fails():
    def no_step(model):
        return sum(2 * p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)

    assert_rejected("18.adam_state_bytes", no_step, "step")


def test_adam_state_counting_frozen_parameters_fails():
    def all_params(model):
        return sum(2 * p.numel() * p.element_size() + 4 for p in model.parameters())

    assert_rejected("18.adam_state_bytes", all_params, "frozen")


def test_adam_state_assuming_float32_fails():
    def four_bytes(model):
        return sum(2 * p.numel() * 4 + 4 for p in model.parameters() if p.requires_grad)

    assert_rejected("18.adam_state_bytes", four_bytes, "element_size")


def test_adam_state_one_moment_fails():
    def one_moment(model):
        return sum(p.numel() * p.element_size() + 4 for p in model.parameters() if p.requires_grad)

    assert_rejected("18.adam_state_bytes", one_moment, "two moments")


def test_adam_state_as_float_is_accepted():
    def as_float(model):
        return float(sum(2 * p.numel() * p.element_size() + 4 for p in model.parameters() if p.requires_grad))

    assert check("18.adam_state_bytes", as_float, show=False).passed


# --------------------------------------------------------------------------
# 18.saved_activation_bytes
# --------------------------------------------------------------------------


def _rule(per_hidden, include_input=True, element_bytes=4, plus_output=False):
    def candidate(batch, sizes, activation):
        k = per_hidden(activation)
        total = (sizes[0] if include_input else 0) + k * sum(sizes[1:-1]) + (sizes[-1] if plus_output else 0)
        return element_bytes * batch * total

    return candidate


def _right(activation):
    return 2 if activation in ("gelu", "silu") else 1


def test_saved_bytes_counting_relu_output_twice_fails():
    assert_rejected("18.saved_activation_bytes", _rule(lambda a: 2), "same tensor")


def test_saved_bytes_treating_gelu_like_relu_fails():
    assert_rejected("18.saved_activation_bytes", _rule(lambda a: 1), "input")


def test_saved_bytes_without_the_input_fails():
    assert_rejected("18.saved_activation_bytes", _rule(_right, include_input=False), "first Linear")


def test_saved_bytes_counting_elements_fails():
    assert_rejected("18.saved_activation_bytes", _rule(_right, element_bytes=1), "4 bytes")


def test_saved_bytes_with_the_logits_fails():
    assert_rejected("18.saved_activation_bytes", _rule(_right, plus_output=True), "logits")
