"""Exercises of chapters 02 (Autograd) and 03 (nn.Module).

For every exercise: the reference solution passes its checker, a stub that
raises NotImplementedError reads "not attempted", and realistic wrong answers
fail with a hint that names the mistake.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from helpers.exercises import check, solution

NAMES = [
    "02.derivative",
    "02.second_derivative",
    "02.jacobian",
    "03.count_parameters",
    "03.build_mlp",
    "03.standardize",
]


@pytest.mark.parametrize("name", NAMES)
def test_reference_passes(name):
    result = check(name, solution(name), show=False)
    assert result.passed, result.message


def _stub(*args, **kwargs):
    """What the notebook ships: the learner has not written anything yet."""
    raise NotImplementedError


class _StubModule(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        raise NotImplementedError


@pytest.mark.parametrize("name", NAMES)
def test_stub_is_not_attempted(name):
    assert check(name, _stub, show=False).status == "not attempted"


def test_stub_module_is_not_attempted():
    assert check("03.standardize", _StubModule, show=False).status == "not attempted"


def test_check_prints_one_line(capsys):
    check("02.derivative", _stub)
    out = capsys.readouterr().out
    assert out.startswith("[TODO] exercise 02.derivative: not attempted yet.")


# --------------------------------------------------------------------------
# Realistic wrong answers
# --------------------------------------------------------------------------


def derivative_returns_value(f, x):
    t = torch.tensor(x, requires_grad=True)
    return f(t).item()


def derivative_returns_tensor(f, x):
    t = torch.tensor(x, requires_grad=True)
    f(t).backward()
    return t.grad


def derivative_finite_difference(f, x):
    h = 1e-4
    return ((f(torch.tensor(x + h)) - f(torch.tensor(x - h))) / (2 * h)).item()


def second_derivative_is_first(f, x):
    """Prints 108 for x**4 at 3, which is right there, and 32 at x = 2, which is not."""
    t = torch.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad(f(t), t)
    return g.item()


def second_derivative_without_create_graph(f, x):
    t = torch.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad(f(t), t)
    (g2,) = torch.autograd.grad(g, t)  # RuntimeError: g has no grad_fn
    return g2.item()


def jacobian_accumulating(f, x):
    """Forgets that .grad accumulates between backward calls."""
    x = x.detach().requires_grad_(True)
    y = f(x)
    rows = []
    for i in range(y.shape[0]):
        v = torch.zeros_like(y)
        v[i] = 1.0
        y.backward(gradient=v, retain_graph=True)
        rows.append(x.grad.clone())
    return torch.stack(rows)


def jacobian_transposed(f, x):
    return solution("02.jacobian")(f, x).T


def count_state_dict(model, trainable_only=False):
    return sum(t.numel() for t in model.state_dict().values())


def count_ignoring_requires_grad(model, trainable_only=False):
    return sum(p.numel() for p in model.parameters())


def count_tensors(model, trainable_only=False):
    return len([p for p in model.parameters() if p.requires_grad or not trainable_only])


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


WRONG = [
    ("02.derivative", derivative_returns_value, "not f'(x)"),
    ("02.derivative", derivative_returns_tensor, ".item()"),
    ("02.derivative", derivative_finite_difference, "does not require grad"),
    ("02.second_derivative", second_derivative_is_first, "FIRST derivative"),
    ("02.second_derivative", second_derivative_without_create_graph, "RuntimeError"),
    ("02.jacobian", jacobian_accumulating, "accumulates"),
    ("02.jacobian", jacobian_transposed, "transpose"),
    ("03.count_parameters", count_state_dict, "buffers"),
    ("03.count_parameters", count_ignoring_requires_grad, "requires_grad=False"),
    ("03.count_parameters", count_tensors, "numel"),
    ("03.build_mlp", mlp_plain_list, "plain Python"),
    ("03.build_mlp", mlp_trailing_relu, "ReLU after the last"),
    ("03.build_mlp", mlp_no_activation, "between consecutive"),
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


def test_second_derivative_of_x4_differs_from_first_away_from_3():
    """At x = 3 both derivatives of x**4 are 108; at x = 2 they are 32 and 48."""
    d1, d2 = solution("02.derivative"), solution("02.second_derivative")
    assert d1(lambda t: t**4, 3.0) == pytest.approx(108.0)
    assert d2(lambda t: t**4, 3.0) == pytest.approx(108.0)
    assert d1(lambda t: t**4, 2.0) == pytest.approx(32.0)
    assert d2(lambda t: t**4, 2.0) == pytest.approx(48.0)


def test_checkers_leave_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check("03.build_mlp", solution("03.build_mlp"), show=False)
    assert torch.equal(torch.rand(3), expected)
