"""Exercises of chapter 03 (nn.Module); chapter 02's are in tests/test_exercises_ch02.py.

For every exercise: the reference solution passes its checker, a stub that
raises NotImplementedError reads "not attempted", and realistic wrong answers
fail with a hint that names the mistake.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from helpers.exercises import check, solution
from tests.exercise_support import assert_rejected


class _StubModule(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        raise NotImplementedError


def test_stub_module_is_not_attempted():
    assert check("03.standardize", _StubModule, show=False).status == "not attempted"


# --------------------------------------------------------------------------
# Realistic wrong answers
# --------------------------------------------------------------------------


def count_state_dict(model, trainable_only=False):
    return sum(t.numel() for t in model.state_dict().values())


def count_ignoring_requires_grad(model, trainable_only=False):
    return sum(p.numel() for p in model.parameters())


def count_tensors(model, trainable_only=False):
    return len([p for p in model.parameters() if p.requires_grad or not trainable_only])


def count_module_by_module(model, trainable_only=False):
    """Each module's own parameters: a weight shared by two modules is counted twice."""
    return sum(
        p.numel()
        for m in model.modules()
        for p in m.parameters(recurse=False)
        if p.requires_grad or not trainable_only
    )


def count_with_duplicates(model, trainable_only=False):
    return sum(
        p.numel()
        for _, p in model.named_parameters(remove_duplicate=False)
        if p.requires_grad or not trainable_only
    )


def count_as_float(model, trainable_only=False):
    return float(
        sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
    )


def count_as_tensor(model, trainable_only=False):
    return torch.tensor(
        sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
    )


class _ListMLP(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.layers = [nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])]

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = torch.relu(x)
        return x


def mlp_plain_list(sizes):
    return _ListMLP(sizes)


def mlp_trailing_relu(sizes):
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers)


def mlp_no_activation(sizes):
    return nn.Sequential(*[nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])])


def mlp_leaky(sizes):
    """LeakyReLU with a slope so small that the outputs agree with ReLU's to 1e-6."""
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.LeakyReLU(1e-9)]
    return nn.Sequential(*layers[:-1])


def mlp_with_dropout_in_eval_mode(sizes):
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU(), nn.Dropout(0.5)]
    return nn.Sequential(*layers[:-2]).eval()


class _FunctionalLeakyMLP(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = torch.nn.functional.leaky_relu(x, 1e-9)
        return x


def mlp_functional_leaky(sizes):
    return _FunctionalLeakyMLP(sizes)


class StandardizeWithParameters(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.mean = nn.Parameter(mean.clone())
        self.std = nn.Parameter(std.clone())

    def forward(self, x):
        return (x - self.mean) / self.std


class StandardizePlainAttributes(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.mean = mean.clone()
        self.std = std.clone()

    def forward(self, x):
        return (x - self.mean) / self.std


class StandardizeEpsParameter(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", mean.clone())
        self.register_buffer("std", std.clone())
        self.eps = nn.Parameter(torch.tensor(0.0))

    def forward(self, x):
        return (x - self.mean) / (self.std + self.eps)


WRONG = [
    ("03.count_parameters", count_state_dict, "buffers"),
    ("03.count_parameters", count_ignoring_requires_grad, "requires_grad=False"),
    ("03.count_parameters", count_tensors, "numel"),
    ("03.count_parameters", count_module_by_module, "shared weight twice"),
    ("03.count_parameters", count_with_duplicates, "shared weight twice"),
    ("03.count_parameters", count_as_float, "integer"),
    ("03.count_parameters", count_as_tensor, "not a tensor"),
    ("03.build_mlp", mlp_plain_list, "plain Python"),
    ("03.build_mlp", mlp_trailing_relu, "ReLU after the last"),
    ("03.build_mlp", mlp_no_activation, "between consecutive"),
    ("03.build_mlp", mlp_leaky, "LeakyReLU"),
    ("03.build_mlp", mlp_with_dropout_in_eval_mode, "Dropout"),
    ("03.build_mlp", mlp_functional_leaky, "exactly ReLU"),
    ("03.standardize", StandardizeEpsParameter, "register_buffer"),
    ("03.standardize", StandardizeWithParameters, "register_buffer"),
    ("03.standardize", StandardizePlainAttributes, "state_dict"),
]


@pytest.mark.parametrize(
    ("name", "wrong", "hint"), WRONG, ids=[f"{n}-{w.__name__}" for n, w, _ in WRONG]
)
def test_wrong_answer_fails_with_hint(name, wrong, hint):
    result = check(name, wrong, show=False)
    assert result.status == "failed", result
    assert hint in result.message, result.message


def test_checkers_leave_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check("03.build_mlp", solution("03.build_mlp"), show=False)
    assert torch.equal(torch.rand(3), expected)


# --------------------------------------------------------------------------
# Right answers written differently from the reference
# --------------------------------------------------------------------------


def count_with_numpy(model, trainable_only=False):
    import numpy as np

    return sum(
        np.prod(p.shape) for p in model.parameters() if p.requires_grad or not trainable_only
    )


class _LastRegisteredFirst(nn.Module):
    """Registers the layers from the last to the first, then runs them in the right order."""

    def __init__(self, sizes):
        super().__init__()
        pairs = list(zip(sizes[:-1], sizes[1:]))
        for i in reversed(range(len(pairs))):
            self.add_module(f"layer{i}", nn.Linear(*pairs[i]))
        self.n = len(pairs)

    def forward(self, x):
        for i in range(self.n):
            x = getattr(self, f"layer{i}")(x)
            if i < self.n - 1:
                x = torch.relu(x)
        return x


def mlp_last_registered_first(sizes):
    return _LastRegisteredFirst(sizes)


def mlp_inplace_relu(sizes):
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU(inplace=True)]
    return nn.Sequential(*layers[:-1])


def mlp_module_list(sizes):
    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

        def forward(self, x):
            for layer in self.layers[:-1]:
                x = torch.relu(layer(x))
            return self.layers[-1](x)

    return MLP()


class StandardizeWithEpsBuffer(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", mean.clone())
        self.register_buffer("std", std.clone())
        self.register_buffer("eps", torch.tensor(0.0))

    def forward(self, x):
        return (x - self.mean) / (self.std + self.eps)


RIGHT = [
    ("03.count_parameters", count_with_numpy),
    ("03.build_mlp", mlp_last_registered_first),
    ("03.build_mlp", mlp_inplace_relu),
    ("03.build_mlp", mlp_module_list),
    ("03.standardize", StandardizeWithEpsBuffer),
]


@pytest.mark.parametrize(
    ("name", "right"),
    RIGHT,
    ids=[f"{n}-{getattr(r, '__name__', 'lambda')}-{i}" for i, (n, r) in enumerate(RIGHT)],
)
def test_right_answer_passes(name, right):
    result = check(name, right, show=False)
    assert result.passed, result.message


# --------------------------------------------------------------------------
# 03.init_for_relu: wrong answers, each with the hint it must get, and right ones
# --------------------------------------------------------------------------


def _on_linears(weight_fn, bias=True):
    """An init_for_relu that applies weight_fn(layer) and (optionally) zeros the bias of every Linear."""

    def init(model):
        def fn(m):
            if isinstance(m, nn.Linear):
                weight_fn(m)
                if bias and m.bias is not None:
                    nn.init.zeros_(m.bias)

        return model.apply(fn)

    return init


init_xavier = _on_linears(lambda m: nn.init.xavier_normal_(m.weight))
init_fan_out = _on_linears(lambda m: nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu"))
init_gain_one = _on_linears(lambda m: nn.init.kaiming_normal_(m.weight, nonlinearity="linear"))
init_keeps_bias = _on_linears(lambda m: nn.init.kaiming_normal_(m.weight, nonlinearity="relu"), bias=False)
init_variance_as_std = _on_linears(lambda m: nn.init.normal_(m.weight, std=2 / m.in_features))
init_default_again = _on_linears(lambda m: m.reset_parameters())


def init_direct_children_only(model):
    for m in model.children():
        if isinstance(m, nn.Linear):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)
    return model


def init_new_parameters(model):
    for m in model.modules():
        if isinstance(m, nn.Linear):
            m.weight = nn.Parameter(torch.randn_like(m.weight) * (2 / m.in_features) ** 0.5)
            if m.bias is not None:
                m.bias = nn.Parameter(torch.zeros_like(m.bias))
    return model


def init_every_matrix(model):
    """Kaiming on every 2-D parameter: the Embedding's weight too."""
    for p in model.parameters():
        if p.dim() == 2:
            nn.init.kaiming_normal_(p, nonlinearity="relu")
    for m in model.modules():
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
    return model


def init_every_vector_zero(model):
    """Right for the Linear layers, but zeros every 1-D parameter: LayerNorm's weight too."""
    solution("03.init_for_relu")(model)
    for p in model.parameters():
        if p.dim() == 1:
            nn.init.zeros_(p)
    return model


INIT_WRONG = [
    (init_xavier, ["Xavier", "tanh"]),
    (init_fan_out, ["fan_out", "fan_in"]),
    (init_gain_one, ["gain", "sqrt(2)"]),
    (init_keeps_bias, ["bias", "zeros_"]),
    (init_variance_as_std, ["std", "sqrt(2 / in_features)"]),
    (init_default_again, ["default"]),
    (lambda model: model, ["kept its old weights", "apply"]),
    (init_direct_children_only, ["kept its old weights", "children()"]),
    (init_new_parameters, ["new object", "in place"]),
    (init_every_matrix, ["embed.weight", "its layer is Embedding", "isinstance(m, nn.Linear)"]),
    (init_every_vector_zero, ["body.3.weight", "its layer is LayerNorm"]),
]


@pytest.mark.parametrize(("wrong", "hints"), INIT_WRONG, ids=[getattr(w, "__name__", "lambda") for w, _ in INIT_WRONG])
def test_init_for_relu_rejects(wrong, hints):
    assert_rejected("03.init_for_relu", wrong, *hints)


def init_by_hand(model):
    """The arithmetic written out, under torch.no_grad(), looping over modules() instead of apply."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                m.weight.normal_(0.0, (2 / m.in_features) ** 0.5)
                if m.bias is not None:
                    m.bias.zero_()


INIT_RIGHT = [
    _on_linears(lambda m: nn.init.kaiming_uniform_(m.weight, nonlinearity="relu")),  # same variance, uniform
    _on_linears(lambda m: nn.init.kaiming_normal_(m.weight)),  # defaults: leaky_relu with a=0 is ReLU's gain
    _on_linears(lambda m: m.weight.data.normal_(0.0, (2 / m.in_features) ** 0.5)),  # the older .data style
    init_by_hand,  # returns None: the checker looks at the model it passed
]


@pytest.mark.parametrize("right", INIT_RIGHT, ids=["kaiming_uniform", "kaiming_defaults", "data_normal", "by_hand"])
def test_init_for_relu_accepts(right):
    result = check("03.init_for_relu", right, show=False)
    assert result.passed, result.message


def test_init_for_relu_reference_matches_its_docstring():
    """The reference draws N(0, 2 / in_features), zeros biases, and leaves other layers alone."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(400, 300), nn.ReLU(), nn.LayerNorm(300), nn.Linear(300, 10, bias=False))
    norm_before = model[2].weight.detach().clone()
    weight = model[0].weight
    assert solution("03.init_for_relu")(model) is model
    assert model[0].weight is weight
    assert abs(model[0].weight.std().item() / (2 / 400) ** 0.5 - 1) < 0.03
    assert torch.equal(model[0].bias, torch.zeros(300)) and torch.equal(model[2].weight, norm_before)
