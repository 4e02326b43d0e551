"""Exercises of chapter 03 (nn.Module): wrong answers, the library shortcut, right answers.

The generic checks (the reference passes, a stub reads "not attempted", a crash
is reported) are in tests/test_exercises.py. Here: realistic wrong answers fail
with a first-tier hint that names the mistake but not the fix, and a fuller
hint (on a second failure, or from ``hint(name)``) that gives the fix; the
library helper ``helpers.models.count_parameters`` is refused however it is
passed; right answers written differently from the reference pass.
"""

from __future__ import annotations

import copy
import functools
import math
from collections import Counter

import pytest
import torch
from torch import nn

import helpers.exercises as exercises
import helpers.models
from helpers.exercises import ch03, check, hint, solution
from helpers.models import count_parameters as library_count_by_name
from tests.exercise_support import assert_rejected


@pytest.fixture(autouse=True)
def _first_attempt(monkeypatch):
    """Every test starts with no failed attempts, so a hint's words are checked in the first tier."""
    monkeypatch.setattr(exercises, "_failures", Counter())
    monkeypatch.setattr(exercises, "_fuller", {})


#: Code that gives the fix away: none of it may appear in a first-tier hint.
FIX_CODE = (
    "sum(p.numel()", "p.numel()", "register_buffer(", "nn.init.", "kaiming_normal_(", "zeros_(", "nn.Sequential(",
    "nn.ModuleList(", "mode='fan", "isinstance(", "int(...)", ".item()", "self.mean", "persistent=False", "apply(",
)


class _StubModule(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        raise NotImplementedError


def test_stub_module_is_not_attempted():
    assert check("03.standardize", _StubModule, show=False).status == "not attempted"


# --------------------------------------------------------------------------
# 03.count_parameters, 03.build_mlp, 03.standardize: realistic wrong answers
# --------------------------------------------------------------------------


def count_state_dict(model, trainable_only=False):
    return sum(t.numel() for t in model.state_dict().values())


def count_ignoring_requires_grad(model, trainable_only=False):
    return sum(p.numel() for p in model.parameters())


def count_trainable_always(model, trainable_only=False):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


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


def mlp_bare_module_list(sizes):
    """Registers the right layers (the parameter count is right) but a ModuleList has no forward."""
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.ModuleList(layers[:-1])


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


class StandardizeFrozenParameters(nn.Module):
    """Parameters with requires_grad=False: no optimizer step changes them, but they are still weights."""

    def __init__(self, mean, std):
        super().__init__()
        self.mean = nn.Parameter(mean.clone(), requires_grad=False)
        self.std = nn.Parameter(std.clone(), requires_grad=False)

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


class StandardizeNotPersistent(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", mean.clone(), persistent=False)
        self.register_buffer("std", std.clone(), persistent=False)

    def forward(self, x):
        return (x - self.mean) / self.std


class StandardizeComputesWithCopies(nn.Module):
    """Registers the buffers the task asks for, but computes with plain float32 copies of them.

    Saved and converted like the reference, and right in float32 and after
    .to(float64) (float64 - float32 promotes to float64): only loading other
    statistics, or a device move, shows that forward ignores the buffers.
    """

    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", mean.clone())
        self.register_buffer("std", std.clone())
        self._mean, self._std = mean.clone(), std.clone()

    def forward(self, x):
        return (x - self._mean) / self._std


class StandardizeOtherBufferNames(nn.Module):
    """Real, saved buffers, but registered as mu and sigma instead of the task's mean and std."""

    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mu", mean.clone())
        self.register_buffer("sigma", std.clone())

    def forward(self, x):
        return (x - self.mu) / self.sigma


class StandardizePlainAttributesAndEpsBuffer(nn.Module):
    """Plain tensor attributes for mean and std, beside a real eps buffer: still the plain-attribute mistake."""

    def __init__(self, mean, std):
        super().__init__()
        self.mean, self.std = mean.clone(), std.clone()
        self.register_buffer("eps", torch.tensor(0.0))

    def forward(self, x):
        return (x - self.mean) / (self.std + self.eps)


class StandardizeAliasesTheBuffers(nn.Module):
    """Keeps a plain alias of each buffer: .to() replaces the buffers, so the aliases go stale."""

    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", mean.clone())
        self.register_buffer("std", std.clone())
        self.stats = (self.mean, self.std)

    def forward(self, x):
        mean, std = self.stats
        return (x - mean) / std


class StandardizeWithInverseBuffer(nn.Module):
    """Also keeps 1 / std as a (saved) buffer, computed once in __init__, and multiplies by it: wrong, since
    loading new statistics into mean and std leaves the inverse stale (forward must compute with mean and std)."""

    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", mean.clone())
        self.register_buffer("std", std.clone())
        self.register_buffer("inv_std", 1 / std)

    def forward(self, x):
        return (x - self.mean) * self.inv_std


# (exercise, wrong answer, words of the first-tier hint, words of the fuller hint)
WRONG = [
    ("03.count_parameters", count_state_dict, ["also counts the buffers"], ["model.parameters()"]),
    ("03.count_parameters", count_ignoring_requires_grad, ["requires_grad=False"], ["p.requires_grad"]),
    ("03.count_parameters", count_trainable_always, ["frozen parameters count too"], ["trainable_only is True"]),
    ("03.count_parameters", count_tensors, ["number of parameter tensors"], ["p.numel()"]),
    ("03.count_parameters", count_module_by_module, ["shared weight twice"], ["model.parameters()"]),
    ("03.count_parameters", count_with_duplicates, ["shared weight twice"], ["remove_duplicate=False"]),
    ("03.count_parameters", count_as_float, ["integer", "float"], ["p.numel()"]),
    ("03.count_parameters", count_as_tensor, ["not a tensor"], [".item()"]),
    ("03.build_mlp", mlp_plain_list, ["plain Python list"], ["nn.Sequential", "nn.ModuleList", "registers"]),
    ("03.build_mlp", mlp_bare_module_list, ["ModuleList", "no forward"], ["nn.Sequential", "nn.ModuleList"]),
    ("03.build_mlp", mlp_trailing_relu, ["every output", "after the last Linear"], ["Drop the ReLU"]),
    ("03.build_mlp", mlp_no_activation, ["nothing between consecutive"], ["nn.ReLU()"]),
    ("03.build_mlp", mlp_leaky, ["LeakyReLU"], ["exactly one nn.ReLU()"]),
    ("03.build_mlp", mlp_with_dropout_in_eval_mode, ["Dropout"], ["exactly one nn.ReLU()"]),
    ("03.build_mlp", mlp_functional_leaky, ["not exactly ReLU"], ["torch.relu"]),
    ("03.standardize", StandardizeEpsParameter, ["['eps'] is a Parameter", "optimizer"], ["register_buffer", "mean and std"]),
    ("03.standardize", StandardizeWithParameters, ["are Parameters"], ["register_buffer", "never trained"]),
    ("03.standardize", StandardizeFrozenParameters, ["requires_grad=False", "parameters()", "requires_grad_(True)"],
     ["register_buffer", "never listed"]),
    ("03.standardize", StandardizePlainAttributes, ["state_dict", "plain tensor attribute"], ["register_buffer"]),
    ("03.standardize", StandardizeNotPersistent, ["not in state_dict()", "non-persistent"], ["persistent flag", "default is True"]),
    ("03.standardize", StandardizeOtherBufferNames, ["['mu', 'sigma']", "other names", "mean and std"],
     ["register_buffer", "key in state_dict()"]),
    ("03.standardize", StandardizePlainAttributesAndEpsBuffer, ["plain tensor attribute"], ["register_buffer"]),
    ("03.standardize", StandardizeComputesWithCopies, ["load_state_dict", "does not read the buffers"],
     ["self.mean and self.std"]),
    ("03.standardize", StandardizeAliasesTheBuffers, ["load_state_dict", "does not read the buffers"],
     ["self.mean and self.std"]),
    ("03.standardize", StandardizeWithInverseBuffer, ["'mean' and 'std'", "['inv_std'], left as they were",
                                                     "not compute from the buffers mean and std"],
     ["in __init__", "self.mean and self.std in forward"]),
]


@pytest.mark.parametrize(
    ("name", "wrong", "first", "fuller"), WRONG, ids=[f"{n}-{w.__name__}" for n, w, _, _ in WRONG]
)
def test_wrong_answer_fails_with_a_two_tier_hint(name, wrong, first, fuller):
    message = assert_rejected(name, wrong, *first).message
    assert f'hint("{name}") gives a fuller hint' in message, message
    leaked = [code for code in FIX_CODE if code in message]
    assert not leaked, f"the first-tier hint gives the fix away ({leaked}): {message}"
    more = hint(name, show=False)
    for word in fuller:
        assert word in more, f"the fuller hint for {name} should mention {word!r}: {more}"
    second = check(name, wrong, show=False).message
    assert more in second, "a second failure should add the fuller hint"


def test_standardize_copies_pass_everything_but_the_load():
    """The wrong answer that computes with copies really does look right until the buffers change."""
    mean, std = torch.tensor([1.0, -2.0, 0.5]), torch.tensor([2.0, 0.5, 4.0])
    x = torch.tensor([[3.0, -1.0, 4.5]])
    module = StandardizeComputesWithCopies(mean, std).to(torch.float64)
    assert set(module.state_dict()) == {"mean", "std"} and not list(module.parameters())
    assert module.mean.dtype == torch.float64
    torch.testing.assert_close(module(x.double()), ((x - mean) / std).double())


def test_checkers_leave_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check("03.build_mlp", solution("03.build_mlp"), show=False)
    assert torch.equal(torch.rand(3), expected)


# --------------------------------------------------------------------------
# 03.count_parameters: the library helper the chapter shows is refused
# --------------------------------------------------------------------------


def count_via_helpers(model, trainable_only=False):
    return helpers.models.count_parameters(model, trainable_only)


def count_via_imported_name(model, trainable_only=False):
    return library_count_by_name(model, trainable_only=trainable_only)


def count_via_helpers_caught(model, trainable_only=False):
    """Calls the helper, swallows the refusal, and counts by hand: still a use of the shortcut."""
    try:
        return helpers.models.count_parameters(model, trainable_only)
    except AssertionError:
        return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


@functools.wraps(helpers.models.count_parameters)
def _wrapped_helper(*args, **kwargs):
    return _wrapped_helper.__wrapped__(*args, **kwargs)


@pytest.mark.parametrize(
    "shortcut",
    [
        helpers.models.count_parameters,  # passed as the answer itself: the checker calls it, not the learner
        functools.partial(helpers.models.count_parameters),
        _wrapped_helper,
        count_via_helpers,
        count_via_imported_name,
        count_via_helpers_caught,
        lambda model, trainable_only=False: helpers.models.count_parameters(model, trainable_only=trainable_only),
    ],
    ids=["the helper itself", "partial", "functools.wraps", "helpers.models.count_parameters(...)",
         "from helpers.models import", "refusal caught", "lambda"],
)
def test_count_parameters_helper_is_refused(shortcut):
    assert_rejected("03.count_parameters", shortcut, "write count_parameters yourself",
                    "`helpers.models.count_parameters` does it for you")


def test_count_parameters_helper_is_restored_and_still_works():
    original = helpers.models.count_parameters
    assert_rejected("03.count_parameters", count_via_helpers, "does it for you")
    assert helpers.models.count_parameters is original and library_count_by_name is original
    assert helpers.models.count_parameters(nn.Linear(3, 2)) == 8
    assert check("03.count_parameters", solution("03.count_parameters"), show=False).passed


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


class StandardizeFunctional(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(mean))
        self.register_buffer("std", torch.as_tensor(std))

    def forward(self, x):
        return torch.sub(x, self.mean).div(self.std)


RIGHT = [
    ("03.count_parameters", count_with_numpy),
    ("03.build_mlp", mlp_last_registered_first),
    ("03.build_mlp", mlp_inplace_relu),
    ("03.build_mlp", mlp_module_list),
    ("03.standardize", StandardizeWithEpsBuffer),
    ("03.standardize", StandardizeFunctional),
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
# 03.init_for_relu: wrong answers, each with the hints it must get, and right ones
# --------------------------------------------------------------------------


def _on_layers(weight_fn, bias=True, kinds=(nn.Linear, nn.Conv2d)):
    """An init_for_relu that applies weight_fn(layer) and (optionally) zeros the bias of every layer of `kinds`."""

    def init(model):
        def fn(m):
            if isinstance(m, kinds):
                weight_fn(m)
                if bias and m.bias is not None:
                    nn.init.zeros_(m.bias)

        return model.apply(fn)

    return init


def _normal(std_of):
    """weight_fn drawing N(0, std_of(layer)^2) by hand."""

    def fn(m):
        with torch.no_grad():
            m.weight.normal_(0.0, std_of(m))

    return fn


def _kaiming_std_but_conv(conv_std):
    """Right for Linear; for Conv2d, N(0, conv_std(layer)^2)."""
    return _normal(lambda m: conv_std(m) if isinstance(m, nn.Conv2d) else math.sqrt(2 / m.in_features))


init_xavier = _on_layers(lambda m: nn.init.xavier_normal_(m.weight))
init_fan_out = _on_layers(lambda m: nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu"))
init_gain_one = _on_layers(lambda m: nn.init.kaiming_normal_(m.weight, nonlinearity="linear"))
init_orthogonal = _on_layers(lambda m: nn.init.orthogonal_(m.weight, gain=math.sqrt(2)))
init_keeps_bias = _on_layers(lambda m: nn.init.kaiming_normal_(m.weight, nonlinearity="relu"), bias=False)
init_variance_as_std = _on_layers(_normal(lambda m: 2 / m.weight[0].numel()))
init_default_again = _on_layers(lambda m: m.reset_parameters())
init_linear_only = _on_layers(lambda m: nn.init.kaiming_normal_(m.weight, nonlinearity="relu"), kinds=nn.Linear)
init_conv_fan_in_channels = _on_layers(_kaiming_std_but_conv(lambda m: math.sqrt(2 / m.in_channels)))
init_conv_square_kernel = _on_layers(
    _kaiming_std_but_conv(lambda m: math.sqrt(2 / (m.in_channels * m.kernel_size[0] ** 2)))
)


def init_direct_children_only(model):
    for m in model.children():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)
    return model


def init_sequential_only(model):
    """Looks inside the nn.Sequential children only, so a layer inside a custom module is missed."""
    for child in model.children():
        if isinstance(child, nn.Sequential):
            for m in child:
                if isinstance(m, (nn.Linear, nn.Conv2d)):
                    nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                    nn.init.zeros_(m.bias)
    return model


def init_new_parameters(model):
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            m.weight = nn.Parameter(torch.randn_like(m.weight) * (2 / m.weight[0].numel()) ** 0.5)
            if m.bias is not None:
                m.bias = nn.Parameter(torch.zeros_like(m.bias))
    return model


def init_every_matrix(model):
    """Kaiming on every parameter with 2 or more dimensions: the Embedding's weight too."""
    for p in model.parameters():
        if p.dim() >= 2:
            nn.init.kaiming_normal_(p, nonlinearity="relu")
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)) and m.bias is not None:
            nn.init.zeros_(m.bias)
    return model


def init_every_vector_zero(model):
    """Right for the Linear and Conv2d layers, but zeros every 1-D parameter: LayerNorm's weight too."""
    solution("03.init_for_relu")(model)
    for p in model.parameters():
        if p.dim() == 1:
            nn.init.zeros_(p)
    return model


def init_frozen(model):
    solution("03.init_for_relu")(model)
    model.head.proj.weight.requires_grad_(False)
    return model


def init_resets_norm_layers(model):
    """Right for the Linear and Conv2d layers, then "initialises" the norm layers too: weight 1, bias 0."""
    solution("03.init_for_relu")(model)
    for m in model.modules():
        if isinstance(m, (nn.LayerNorm, nn.BatchNorm2d)):
            m.reset_parameters()
    return model


def init_zeroes_every_bias(model):
    """Kaiming on the Linear and Conv2d weights, but a zero bias on every layer that has one: the norm layers too."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
        if getattr(m, "bias", None) is not None:
            nn.init.zeros_(m.bias)
    return model


def init_resets_everything_else(model):
    """The reviewer's answer: zero every bias, norm weights to 1, BatchNorm's running statistics reset."""
    init_zeroes_every_bias(model)
    for m in model.modules():
        if isinstance(m, (nn.LayerNorm, nn.BatchNorm2d)):
            nn.init.ones_(m.weight)
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
    return model


def init_resets_running_stats(model):
    """Right for every parameter, but resets BatchNorm's running statistics (buffers, not parameters)."""
    solution("03.init_for_relu")(model)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
    return model


def init_then_forward_in_train_mode(model):
    """Right, then a forward pass "to see that it runs": in train mode it updates BatchNorm's running statistics."""
    solution("03.init_for_relu")(model)
    with torch.no_grad():
        model(torch.randint(0, 100, (4, 3)), torch.randn(2, 12, 8, 8))
    return model


def init_returns_none(model):
    """Right, in place, but without the return the docstring asks for."""
    solution("03.init_for_relu")(model)


def init_returns_a_copy(model):
    """Initialises the model it was given, but returns a deep copy of it."""
    return copy.deepcopy(solution("03.init_for_relu")(model))


# (wrong answer, words of the first-tier hint, words of the fuller hint)
def init_alternating_signs(model):
    """+-sqrt(2 / fan_in) alternating: exactly Kaiming's mean and std, but two values, not a random draw."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                s = math.sqrt(2 / m.weight[0].numel())
                sign = torch.ones_like(m.weight)
                sign.view(-1)[::2] = -1
                m.weight.copy_(sign * s)
                if m.bias is not None:
                    m.bias.zero_()
    return model


def init_seeded_inside(model):
    """The right draw, but after seeding inside the function: every model gets the same weights."""
    torch.manual_seed(1234)
    return solution("03.init_for_relu")(model)


INIT_WRONG = [
    (init_alternating_signs, ["2 distinct values", "not drawn at random"], ["independently", "kaiming_normal_"]),
    (init_seeded_inside, ["exactly the same weights", "torch.manual_seed(1)"], ["no seed", "own random weights"]),
    (init_xavier, ["Xavier", "tanh", "expected 0.1768"], ["kaiming_normal_", "nonlinearity='relu'"]),
    (init_fan_out, ["sqrt(2 / fan_out)", "fan_in"], ["mode='fan_in'"]),
    (init_orthogonal, ["The std equals sqrt(2 / fan_out) = sqrt(2 / 512)"], ["mode='fan_in'"]),
    (init_gain_one, ["a gain of 1", "sqrt(2)"], ["nonlinearity='relu'"]),
    (init_keeps_bias, ["bias", "is not zero"], ["zeros_", "bias=False"]),
    (init_variance_as_std, ["variance rather than its standard deviation"], ["square root"]),
    (init_default_again, ["PyTorch's default"], ["kaiming_normal_"]),
    (lambda model: model, ["none of the 4 Linear and Conv2d layers"], ["model.apply(fn)", "not a copy"]),
    (init_direct_children_only, ["none of the 4"], ["model.apply(fn)", "children()"]),
    (init_sequential_only, ["head.proj = Linear(256, 64) kept its old weights", "2 levels deep, inside a _Head"],
     ["model.apply(fn)"]),
    (init_new_parameters, ["new object", "in place", "optimizer"], ["Do not assign a new nn.Parameter"]),
    (init_frozen, ["no longer a trainable leaf", "requires_grad=False"], ["torch.no_grad()"]),
    (init_every_matrix, ["embed.weight", "its layer is Embedding"], ["by type", "isinstance"]),
    (init_every_vector_zero, ["body.3.weight", "its layer is LayerNorm"], ["by type"]),
    (init_resets_norm_layers, ["body.3.weight changed", "its layer is LayerNorm"], ["reset_parameters()"]),
    (init_zeroes_every_bias, ["body.3.bias changed", "its layer is LayerNorm"], ["by type"]),
    (init_resets_everything_else, ["body.3.weight changed", "its layer is LayerNorm"], ["by type"]),
    (init_resets_running_stats, ["the buffer features.1.running_mean of a BatchNorm2d changed"],
     ["reset_running_stats()"]),
    (init_then_forward_in_train_mode, ["the buffer features.1.running_mean of a BatchNorm2d changed"],
     ["training mode"]),
    (init_returns_none, ["returned None"], ["returns the model it was called on"]),
    (init_returns_a_copy, ["returned a _InitTarget that is not the model it was given"], ["not a copy"]),
    (init_linear_only, ["features.0 = Conv2d(12, 40, kernel_size=(3, 5)) kept its old weights", "nn.Conv2d"],
     ["in_channels x kernel height x kernel width"]),
    (init_conv_fan_in_channels, ["features.0 = Conv2d", "sqrt(2 / in_channels) = sqrt(2 / 12)", "expected 0.1054"],
     ["12 x 3 x 5 = 180"]),
    (init_conv_square_kernel, ["features.0 = Conv2d", "not square"], ["kernel_size[0] x kernel_size[1] = 180"]),
]


@pytest.mark.parametrize(("wrong", "first", "fuller"), INIT_WRONG,
                         ids=[getattr(w, "__name__", "lambda") for w, _, _ in INIT_WRONG])
def test_init_for_relu_rejects_with_a_two_tier_hint(wrong, first, fuller):
    message = assert_rejected("03.init_for_relu", wrong, *first).message
    leaked = [code for code in FIX_CODE if code in message]
    assert not leaked, f"the first-tier hint gives the fix away ({leaked}): {message}"
    more = hint("03.init_for_relu", show=False)
    for word in fuller:
        assert word in more, f"the fuller hint should mention {word!r}: {more}"


def test_orthogonal_init_is_not_told_it_used_fan_out():
    """orthogonal_ has no mode: the hint says which formula the std equals, not which option was used."""
    message = assert_rejected("03.init_for_relu", init_orthogonal).message
    assert "mode=" not in message and "The std equals" in message, message


def init_by_hand(model):
    """The arithmetic written out, under torch.no_grad(), looping over modules() instead of apply."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                m.weight.normal_(0.0, (2 / m.weight[0].numel()) ** 0.5)
                if m.bias is not None:
                    m.bias.zero_()
    return model


def init_conv_fan_in_spelled_out(model):
    def fn(m):
        if isinstance(m, nn.Conv2d):
            kh, kw = m.kernel_size
            nn.init.normal_(m.weight, 0.0, math.sqrt(2 / (m.in_channels * kh * kw)))
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)

    model.apply(fn)
    return model


INIT_RIGHT = [
    _on_layers(lambda m: nn.init.kaiming_uniform_(m.weight, nonlinearity="relu")),  # same variance, uniform
    _on_layers(lambda m: nn.init.kaiming_normal_(m.weight)),  # defaults: leaky_relu with a=0 is ReLU's gain
    _on_layers(lambda m: m.weight.data.normal_(0.0, (2 / m.weight[0].numel()) ** 0.5)),  # the older .data style
    init_by_hand,  # a loop over modules() instead of apply
    init_conv_fan_in_spelled_out,
]


@pytest.mark.parametrize("right", INIT_RIGHT,
                         ids=["kaiming_uniform", "kaiming_defaults", "data_normal", "by_hand", "conv_spelled_out"])
def test_init_for_relu_accepts(right):
    result = check("03.init_for_relu", right, show=False)
    assert result.passed, result.message


def test_the_norm_layers_are_scrambled_before_the_answer_runs():
    """Without the checker's random norm values, resetting the norm layers would change nothing it can see."""
    torch.manual_seed(0)
    fresh = ch03._InitTarget()
    norm_names = [n for n, m in fresh.named_modules() if isinstance(m, (nn.LayerNorm, nn.BatchNorm2d))]
    norm_state = {k: v.clone() for k, v in fresh.state_dict().items() if k.rsplit(".", 1)[0] in norm_names}
    init_resets_everything_else(fresh)
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in norm_state.items()), "a fresh model hides resets"
    ch03._scramble_norm_layers(fresh)
    scrambled = fresh.state_dict()
    assert all(not torch.equal(scrambled[k], v) for k, v in norm_state.items()), (
        "every norm parameter and buffer should get a value that a reset would change"
    )


def test_init_for_relu_reference_matches_its_docstring():
    """The reference draws N(0, 2 / fan_in) for Linear and Conv2d, zeros biases, and leaves other layers alone."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(400, 300), nn.ReLU(), nn.LayerNorm(300), nn.Linear(300, 10, bias=False))
    conv_model = nn.Sequential(nn.Conv2d(8, 16, kernel_size=(3, 7)), nn.BatchNorm2d(16))
    norm_before = model[2].weight.detach().clone()
    weight = model[0].weight
    assert solution("03.init_for_relu")(model) is model
    solution("03.init_for_relu")(conv_model)
    assert model[0].weight is weight
    assert abs(model[0].weight.std().item() / (2 / 400) ** 0.5 - 1) < 0.03
    assert torch.equal(model[0].bias, torch.zeros(300)) and torch.equal(model[2].weight, norm_before)
    assert abs(conv_model[0].weight.std().item() / (2 / (8 * 3 * 7)) ** 0.5 - 1) < 0.05
    assert torch.equal(conv_model[0].bias, torch.zeros(16)) and torch.equal(conv_model[1].weight, torch.ones(16))


#: Lines of the reference solutions, as code: a fuller hint may name the API and the idea, never paste these.
REFERENCE_CODE = (
    "zip(sizes[:-1], sizes[1:])", "nn.Sequential(*layers", "register_buffer(\"mean\"", "register_buffer(\"std\"",
    "(x - self.mean) / self.std", "kaiming_normal_(m.weight", "zeros_(m.bias)", "isinstance(m, (nn.Linear, nn.Conv2d))",
    "p.numel() for p in model.parameters()",
)


@pytest.mark.parametrize(
    ("name", "wrong"),
    [(n, w) for n, w, _, _ in WRONG] + [("03.init_for_relu", w) for w, _, _ in INIT_WRONG],
    ids=[f"{n}-{getattr(w, '__name__', 'lambda')}" for n, w, _, _ in WRONG]
    + [f"init-{getattr(w, '__name__', 'lambda')}" for w, _, _ in INIT_WRONG],
)
def test_the_fuller_hint_does_not_paste_the_reference(name, wrong):
    check(name, wrong, show=False)
    more = hint(name, show=False).replace("'", '"')
    pasted = [code for code in REFERENCE_CODE if code in more]
    assert not pasted, f"the fuller hint for {name} pastes the reference solution ({pasted}): {more}"


def test_the_reference_code_list_is_really_in_the_references():
    """REFERENCE_CODE is taken from the references; if they are rewritten, the list must follow."""
    import inspect

    source = "".join(inspect.getsource(f) for f in (ch03.count_parameters, ch03.build_mlp, ch03.Standardize,
                                                     ch03.init_for_relu))
    missing = [code for code in REFERENCE_CODE if code not in source]
    assert not missing, f"not in the reference solutions any more: {missing}"


def test_frozen_parameters_are_not_told_an_optimizer_would_change_them():
    """With requires_grad=False the gradient stays None, so no optimizer step moves them: the hint must not say so."""
    model = StandardizeFrozenParameters(torch.tensor([1.0, -2.0]), torch.tensor([2.0, 0.5]))
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    model(torch.randn(4, 2, requires_grad=True)).sum().backward()
    opt.step()
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    message = assert_rejected("03.standardize", StandardizeFrozenParameters, "requires_grad=False").message
    assert "would change" not in message, message
    # ... while a trainable Parameter still gets the optimizer explanation.
    assert "would change" in assert_rejected("03.standardize", StandardizeWithParameters).message


def test_standardize_with_an_eps_is_accepted():
    class WithEps(nn.Module):  # the task allows other buffers and constants, such as an eps
        def __init__(self, mean, std):
            super().__init__()
            self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32))
            self.register_buffer("std", torch.as_tensor(std, dtype=torch.float32))

        def forward(self, x):
            return (x - self.mean) / (self.std + 1e-5)

    result = check("03.standardize", WithEps, show=False)
    assert result.passed, result.message


@pytest.mark.parametrize("cut", ["no_grad", "detach"])
def test_build_mlp_whose_forward_cuts_the_graph_fails(cut):
    reference = solution("03.build_mlp")

    class Cut(nn.Module):
        def __init__(self, sizes):
            super().__init__()
            self.inner = reference(sizes)

        def forward(self, x):
            if cut == "detach":
                return self.inner(x).detach()
            with torch.no_grad():
                return self.inner(x)

    assert_rejected("03.build_mlp", Cut, "got no gradient", "cannot be trained")
