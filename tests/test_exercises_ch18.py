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

    assert_rejected("18.adam_state_bytes", four_bytes, "parameter's dtype")


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


# --------------------------------------------------------------------------
# Measuring instead of predicting: both checkers refuse tensor operations
# --------------------------------------------------------------------------


def test_adam_state_measured_with_a_real_step_fails():
    import copy

    import torch

    def measured(model):
        clone = copy.deepcopy(model)
        optimizer = torch.optim.Adam(clone.parameters())
        for p in clone.parameters():
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
        optimizer.step()
        return sum(v.numel() * v.element_size() for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v))

    assert_rejected("18.adam_state_bytes", measured, "tensor operation")


def test_adam_state_swallowing_the_refusal_fails():
    import copy

    def swallowed(model):
        try:
            copy.deepcopy(model)
        except RuntimeError:
            pass
        return sum(2 * p.numel() * p.element_size() + 4 for p in model.parameters() if p.requires_grad)

    assert_rejected("18.adam_state_bytes", swallowed, "tensor operation")


def test_saved_bytes_measured_on_a_meta_model_fails():
    import torch
    from torch import nn

    def measured(batch, sizes, activation):
        act = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "gelu": nn.GELU, "silu": nn.SiLU}[activation]
        layers = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(a, b, device="meta"))
            if i < len(sizes) - 2:
                layers.append(act())
        model = nn.Sequential(*layers)
        saved = {}

        def pack(t):
            saved[id(t)] = t.numel() * t.element_size()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(torch.empty(batch, sizes[0], device="meta"))
        return sum(saved.values())

    assert_rejected("18.saved_activation_bytes", measured, "tensor operation")


def test_the_references_pass_under_the_refusal():
    from helpers.exercises import EXERCISES

    for name in ("18.adam_state_bytes", "18.saved_activation_bytes"):
        assert check(name, EXERCISES[name].reference, show=False).passed, name


def test_adam_state_with_a_scalar_tensor_for_the_step_size_fails_with_a_true_message():
    """torch.tensor(0.0).element_size() creates a tensor: refused, and the message says so (not "measured")."""
    import torch

    def scalar_size(model):
        trained = [p for p in model.parameters() if p.requires_grad]
        return sum(2 * p.nbytes for p in trained) + len(trained) * torch.tensor(0.0).element_size()

    result = assert_rejected("18.adam_state_bytes", scalar_size, "creates a tensor", "aten.lift_fresh", "not even a scalar")
    assert "measured" not in result.message, result.message


def test_adam_state_with_dtype_itemsize_is_accepted():
    import torch

    def itemsize(model):
        trained = [p for p in model.parameters() if p.requires_grad]
        return sum(2 * p.numel() * p.dtype.itemsize + torch.float32.itemsize for p in trained)

    assert check("18.adam_state_bytes", itemsize, show=False).passed
