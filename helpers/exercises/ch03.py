"""Chapter 03 (nn.Module): exercise checkers and reference solutions.

Exercises:

- ``03.count_parameters``: ``count_parameters(model, trainable_only=False) -> int``.
- ``03.build_mlp``: ``build_mlp(sizes) -> nn.Module``, Linear layers with ReLU
  between them and no activation after the last.
- ``03.standardize``: a ``Standardize(mean, std)`` module that keeps its
  statistics as buffers.
- ``03.init_for_relu``: ``init_for_relu(model)``, Kaiming (He) weights for
  ReLU and zero biases in every ``nn.Linear`` of ``model``, in place.

Each checker raises ``AssertionError("hint")`` for a wrong answer (see
:func:`helpers.exercises.check`). Checkers that need random numbers run inside
``torch.random.fork_rng`` so they leave the notebook's random stream alone.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence

import torch
from torch import nn

from . import exercise

__all__ = ["Standardize", "build_mlp", "count_parameters", "init_for_relu"]


# --------------------------------------------------------------------------
# Reference solutions
# --------------------------------------------------------------------------


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of scalar parameters of ``model``; buffers are not parameters.

    Args:
        trainable_only: count only parameters with ``requires_grad=True``.

    ``model.parameters()`` yields each parameter once, even when two
    submodules share it (tied weights), which ``state_dict()`` would not.
    """
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def build_mlp(sizes: Sequence[int]) -> nn.Module:
    """``Linear(sizes[0], sizes[1]) -> ReLU -> ... -> Linear(sizes[-2], sizes[-1])``.

    No activation after the last layer: it outputs raw scores (logits), which
    can be negative.

    Raises:
        ValueError: fewer than two sizes.
    """
    if len(sizes) < 2:
        raise ValueError(f"need at least an input and an output size, got {list(sizes)}")
    layers: list[nn.Module] = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class Standardize(nn.Module):
    """``(x - mean) / std`` per feature, with ``mean`` and ``std`` stored as buffers.

    Buffers are saved in ``state_dict`` and follow ``.to(device or dtype)``, but
    are not returned by ``parameters()``, so an optimizer never changes them.

    Args:
        mean, std: float tensors ``[F]``; inputs are ``[B, F]``.
    """

    def __init__(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("mean", mean.detach().clone())
        self.register_buffer("std", std.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


def init_for_relu(model: nn.Module) -> nn.Module:
    """Kaiming (He) normal weights for ReLU and zero biases in every ``nn.Linear`` of ``model``.

    Each weight ``[out, in]`` is drawn from ``N(0, 2 / in)`` (``mode="fan_in"``;
    He et al. 2015, arXiv:1502.01852); a bias, where the layer has one, is set to
    0. Other layers are left alone. Works in place through ``nn.init`` (which
    runs under ``torch.no_grad()``), so the parameters stay the same
    ``nn.Parameter`` objects, and returns ``model``.
    """

    def init_fn(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)

    return model.apply(init_fn)


# --------------------------------------------------------------------------
# Checkers
# --------------------------------------------------------------------------


class _WithBuffer(nn.Module):
    """A parameter, a frozen parameter, and two buffers (one not persistent)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(5))
        self.frozen = nn.Parameter(torch.zeros(2, 3), requires_grad=False)
        self.register_buffer("stats", torch.zeros(7))
        self.register_buffer("cache", torch.zeros(11), persistent=False)


class _Tied(nn.Module):
    """An Embedding(10, 4) and a Linear(4, 10, bias=False) sharing one [10, 4] weight (tied weights)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.unembed = nn.Linear(4, 10, bias=False)
        self.unembed.weight = self.embed.weight


def _count_cases() -> list[tuple[str, nn.Module, int, int]]:
    """(description, model, all parameters, trainable parameters).

    Building the models draws initial weights; call it inside ``fork_rng``.
    """
    net = nn.Sequential(nn.Linear(10, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    net[0].requires_grad_(False)  # 10*8 + 8 = 88 frozen
    # all: 88 + (8 + 8) + (8*3 + 3) = 131; trainable: 131 - 88 = 43
    return [
        ("Sequential(Linear(10, 8) [frozen], BatchNorm1d(8), ReLU(), Linear(8, 3))", net, 131, 43),
        ("a module with Parameters [5] and [2, 3] (frozen) and two buffers", _WithBuffer(), 11, 5),
        ("nn.ReLU()", nn.ReLU(), 0, 0),
        (
            "an Embedding(10, 4) and a Linear(4, 10) sharing one weight (tied weights)",
            _Tied(),
            40,
            40,
        ),
    ]


def _is_integer(value) -> bool:
    """A Python int or a NumPy integer (``np.prod(p.shape)`` gives one), but not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@exercise(
    "03.count_parameters",
    "write count_parameters(model, trainable_only=False) -> int: the number of scalar "
    "parameters (buffers excluded); with trainable_only=True, only those with requires_grad.",
    reference=count_parameters,
)
def _check_count_parameters(candidate: Callable) -> None:
    with torch.random.fork_rng(devices=[]):  # the models' initial weights use the global generator
        cases = _count_cases()
    for label, model, total, trainable in cases:
        n_state = sum(t.numel() for t in model.state_dict().values())
        n_tensors = len(list(model.parameters()))
        # What counting a shared (tied) weight once per module that uses it gives.
        all_uses = [p for _, p in model.named_parameters(remove_duplicate=False)]
        twice = {
            False: sum(p.numel() for p in all_uses),
            True: sum(p.numel() for p in all_uses if p.requires_grad),
        }
        for flag, want in ((False, total), (True, trainable)):
            got = candidate(model) if not flag else candidate(model, trainable_only=True)
            if isinstance(got, torch.Tensor):
                raise AssertionError(
                    "return a Python int, not a tensor: convert with int(...) or .item()."
                )
            if not _is_integer(got):
                raise AssertionError(
                    f"return an integer (a Python int; a NumPy integer is fine too), got "
                    f"{type(got).__name__} {got!r}: a count of scalars is a whole number, e.g. "
                    "sum(p.numel() for p in model.parameters())."
                )
            if got == want:
                continue
            call = f"count_parameters(model, trainable_only={flag})"
            if got == twice[flag] != want:
                raise AssertionError(
                    f"{call} for {label} gave {got}, counting the shared weight twice (expected "
                    f"{want}). model.parameters() yields each parameter once even when two modules "
                    "share it; looping over modules, named_parameters(remove_duplicate=False) or "
                    "state_dict() does not."
                )
            if got == n_state and n_state != want:
                raise AssertionError(
                    f"{call} for {label} gave {got}, which includes buffers such as BatchNorm's "
                    "running_mean: state_dict() holds buffers too. Count model.parameters() only."
                )
            if flag and got == total:
                raise AssertionError(
                    f"{call} for {label} gave {got}, every parameter; skip the ones with "
                    f"requires_grad=False (expected {want})."
                )
            if not flag and got == trainable:
                raise AssertionError(
                    f"{call} for {label} gave {got}: frozen parameters count too when "
                    f"trainable_only=False (expected {want})."
                )
            if got == n_tensors:
                raise AssertionError(
                    f"{call} for {label} gave {got}, the number of parameter tensors; "
                    f"count their scalar elements with p.numel() (expected {want})."
                )
            raise AssertionError(f"{call} for {label} should be {want}, got {got}.")


def _run_recording(model: nn.Module, linears: list[nn.Linear], x: torch.Tensor):
    """``model(x)`` and, in call order, (layer, its input, its output) for each Linear call.

    The tensors are cloned at once: an in-place ReLU would otherwise change a
    Linear's recorded output afterwards.
    """
    calls: list[tuple[nn.Linear, torch.Tensor, torch.Tensor]] = []

    def record(layer, inputs, output):
        calls.append((layer, inputs[0].detach().clone(), output.detach().clone()))

    handles = [layer.register_forward_hook(record) for layer in linears]
    try:
        with torch.no_grad():
            out = model(x)
    finally:
        for handle in handles:
            handle.remove()
    return out, calls


@exercise(
    "03.build_mlp",
    "write build_mlp(sizes) -> nn.Module: Linear(sizes[0], sizes[1]), ReLU, ..., "
    "Linear(sizes[-2], sizes[-1]), with a ReLU between Linear layers and none after the last "
    "(no other layers: no Dropout, no other activation).",
    reference=build_mlp,
)
def _check_build_mlp(candidate: Callable) -> None:
    # Each size list has distinct (in, out) pairs, so every Linear is known by its shape
    # and the checker need not depend on the order in which the layers were registered.
    for sizes in ([5, 7, 3], [4, 2], [6, 8, 8, 2]):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = candidate(list(sizes))
            x = torch.randn(64, sizes[0])
        if not isinstance(model, nn.Module):
            raise AssertionError(
                f"build_mlp({sizes}) returned {type(model).__name__}, not an nn.Module."
            )
        pairs = list(zip(sizes[:-1], sizes[1:]))
        want = sum(a * b + b for a, b in pairs)
        arithmetic = " + ".join(f"{a}*{b}+{b}" for a, b in pairs)
        got = sum(p.numel() for p in model.parameters())
        if got == 0:
            raise AssertionError(
                f"build_mlp({sizes}) has no registered parameters: layers kept in a plain Python "
                "list are invisible to nn.Module. Use nn.Sequential or nn.ModuleList."
            )
        if got != want:
            raise AssertionError(
                f"build_mlp({sizes}) should have {arithmetic} = {want} parameters, but has {got}."
            )
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        by_shape = {(m.in_features, m.out_features): m for m in linears}
        shapes = [(m.in_features, m.out_features) for m in linears]
        if len(linears) != len(pairs) or set(by_shape) != set(pairs):
            raise AssertionError(
                f"build_mlp({sizes}) should contain the Linear layers (in, out) = {pairs}, "
                f"found {shapes}."
            )
        others = sorted(
            {
                type(m).__name__
                for m in model.modules()
                if not list(m.children()) and not isinstance(m, (nn.Linear, nn.ReLU))
            }
        )
        if others:
            raise AssertionError(
                f"build_mlp({sizes}) contains {', '.join(others)}: the task asks for Linear layers "
                "with nn.ReLU between them and nothing else (no Dropout, no other activation such "
                "as LeakyReLU, even one that behaves almost like ReLU)."
            )
        out, calls = _run_recording(model, linears, x)
        with torch.no_grad():  # the intended computation, layer by layer in the order of sizes
            h = x
            for i, pair in enumerate(pairs):
                h = by_shape[pair](h)
                if i < len(pairs) - 1:
                    h = torch.relu(h)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (64, sizes[-1]):
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise AssertionError(
                f"build_mlp({sizes}) maps a [64, {sizes[0]}] batch to {shape}, expected (64, {sizes[-1]})."
            )
        if not (out < 0).any():
            raise AssertionError(
                f"every output of build_mlp({sizes}) is >= 0: is there a ReLU after the last Linear? "
                "The last layer should give raw scores (logits), which can be negative."
            )
        if not torch.allclose(out, h, atol=1e-6):
            raise AssertionError(
                f"build_mlp({sizes}) does not compute Linear -> ReLU -> ... -> Linear: check that a "
                "ReLU (and nothing else) sits between consecutive Linear layers, in the order of sizes."
            )
        # Exactly: what enters each Linear after the first is ReLU of what the previous one gave.
        # (A leaky activation with a tiny slope, or a dropout, is close but not equal.)
        if len(calls) == len(pairs):
            for (_, _, before), (layer, given, _) in zip(calls, calls[1:]):
                if not torch.equal(given, torch.relu(before)):
                    raise AssertionError(
                        f"in build_mlp({sizes}) the input of Linear({layer.in_features}, "
                        f"{layer.out_features}) is not exactly ReLU of the previous Linear's output "
                        f"(smallest entry {given.min().item():.3g}): use ReLU, which sets every "
                        "negative value to exactly 0, and nothing else between the layers."
                    )


@exercise(
    "03.standardize",
    "write a module Standardize(mean, std) whose forward returns (x - mean) / std, keeping "
    "mean and std as buffers named 'mean' and 'std' (register_buffer), not as Parameters "
    "(other buffers are allowed, Parameters are not).",
    reference=Standardize,
)
def _check_standardize(candidate: Callable) -> None:
    mean = torch.tensor([1.0, -2.0, 0.5])
    std = torch.tensor([2.0, 0.5, 4.0])
    x = torch.tensor([[3.0, -1.0, 4.5], [1.0, -2.0, 0.5]])
    module = candidate(mean, std)
    if not isinstance(module, nn.Module):
        raise AssertionError(
            f"Standardize(mean, std) built a {type(module).__name__}, not an nn.Module."
        )
    out = module(x)
    want = (x - mean) / std
    if (
        not isinstance(out, torch.Tensor)
        or out.shape != want.shape
        or not torch.allclose(out, want)
    ):
        raise AssertionError(
            f"forward should return (x - mean) / std = {want.tolist()}, got {out}."
        )
    names = [n for n, _ in module.named_parameters()]
    if names:
        raise AssertionError(
            f"{names} are Parameters: an optimizer would train them. Statistics are state, not "
            "weights: store them with self.register_buffer('mean', mean)."
        )
    # Extra buffers (an eps, say) are fine; mean and std must be saved buffers.
    keys = set(module.state_dict())
    missing = sorted({"mean", "std"} - keys)
    if missing:
        raise AssertionError(
            f"state_dict() has keys {sorted(keys)}, without {missing}: a plain tensor attribute "
            "is neither saved in state_dict nor moved by .to(); use register_buffer('mean', mean) "
            "(persistent, the default)."
        )
    module = module.to(torch.float64)
    if module.mean.dtype != torch.float64 or module.std.dtype != torch.float64:
        raise AssertionError(
            "after .to(torch.float64) mean and std are still float32: register them as buffers."
        )
    out64 = module(x.double())
    if out64.dtype != torch.float64 or not torch.allclose(out64, want.double()):
        raise AssertionError(
            "after .to(torch.float64) the module should compute in float64 with the same result."
        )


class _Head(nn.Module):
    """A custom module holding a Linear without bias, so that it sits two levels deep."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(256, 64, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class _InitTarget(nn.Module):
    """Embedding(100, 64) -> Linear(64, 512) -> ReLU -> Linear(512, 256) -> LayerNorm -> ReLU -> head.

    Every Linear has a different (in, out), so Kaiming's std sqrt(2 / in) differs
    from sqrt(2 / out) (fan_out), from Xavier's sqrt(2 / (in + out)) and from the
    default's 1 / sqrt(3 in) by more than 10 % for each of them.
    """

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 64)
        self.body = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 256), nn.LayerNorm(256), nn.ReLU())
        self.head = _Head()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.embed(tokens)))


def _linear_name(name: str, layer: nn.Linear) -> str:
    return f"{name} = Linear({layer.in_features}, {layer.out_features})"


@exercise(
    "03.init_for_relu",
    "write init_for_relu(model): for every nn.Linear in model, at any depth, draw the weight with "
    "Kaiming (He) initialisation for ReLU (std sqrt(2 / in_features)) and set the bias, where there "
    "is one, to zero; leave every other layer alone and change the parameters in place.",
    reference=init_for_relu,
)
def _check_init_for_relu(candidate: Callable) -> None:
    torch.manual_seed(0)
    model = _InitTarget()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    objects = dict(model.named_parameters())
    linears = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    candidate(model)

    after = dict(model.named_parameters())
    for name, p in objects.items():
        if after.get(name) is not p:
            raise AssertionError(
                f"{name} is a new object after init_for_relu: change the existing parameter in place "
                "(nn.init.kaiming_normal_(m.weight, ...)) instead of assigning a new nn.Parameter, or an "
                "optimizer built before would keep training the old one."
            )
        if not (p.is_leaf and p.requires_grad):
            raise AssertionError(
                f"{name} is no longer a trainable leaf (is_leaf={p.is_leaf}, requires_grad={p.requires_grad}): "
                "initialise under torch.no_grad(), which nn.init does for you."
            )
    for name, layer in linears.items():
        label = _linear_name(name, layer)
        w = layer.weight.detach()
        fan_in, fan_out = layer.in_features, layer.out_features
        if torch.equal(w, before[f"{name}.weight"]):
            raise AssertionError(
                f"{label} kept its old weights: model.apply(fn) calls fn on every submodule at every depth "
                "(model.children() only gives the direct ones); change the model you are given, not a copy."
            )
        if layer.bias is not None and not torch.equal(layer.bias.detach(), torch.zeros_like(layer.bias)):
            raise AssertionError(f"the bias of {label} is not zero: nn.init.zeros_(m.bias).")
        std, mean = w.std().item(), w.mean().item()
        want = math.sqrt(2 / fan_in)
        if abs(std / want - 1) < 0.04 and abs(mean) < 0.05 * want:
            continue
        candidates = {
            "fan_out": math.sqrt(2 / fan_out),
            "xavier": math.sqrt(2 / (fan_in + fan_out)),
            "gain 1": math.sqrt(1 / fan_in),
            "default": 1 / math.sqrt(3 * fan_in),
        }
        closest = min(candidates, key=lambda k: abs(std / candidates[k] - 1))
        if abs(std / candidates[closest] - 1) < 0.04:
            raise AssertionError(
                {
                    "fan_out": f"{label}: weight std {std:.4f} is sqrt(2 / out_features) = {candidates['fan_out']:.4f}, "
                    f"mode='fan_out'. Keep the forward pass steady with mode='fan_in': sqrt(2 / {fan_in}) = {want:.4f}.",
                    "xavier": f"{label}: weight std {std:.4f} is Xavier's sqrt(2 / (in + out)) = "
                    f"{candidates['xavier']:.4f}, made for tanh. ReLU needs Kaiming: sqrt(2 / in_features) = {want:.4f}.",
                    "gain 1": f"{label}: weight std {std:.4f} is sqrt(1 / in_features) = {candidates['gain 1']:.4f}, a gain "
                    f"of 1. ReLU zeroes half its inputs, so its gain is sqrt(2): nonlinearity='relu' gives {want:.4f}.",
                    "default": f"{label}: weight std {std:.4f} is PyTorch's default 1 / sqrt(3 in_features) = "
                    f"{candidates['default']:.4f}, not Kaiming's sqrt(2 / in_features) = {want:.4f}.",
                }[closest]
            )
        raise AssertionError(
            f"{label}: weight std {std:.4f} and mean {mean:.4f}; Kaiming for ReLU means mean 0 and std "
            f"sqrt(2 / in_features) = {want:.4f}."
        )
    for name, p in model.named_parameters():
        module_name = name.rsplit(".", 1)[0]
        if module_name not in linears and not torch.equal(p.detach(), before[name]):
            kind = type(model.get_submodule(module_name)).__name__
            raise AssertionError(
                f"{name} changed, but its layer is {kind}, not nn.Linear: pick the layers with "
                "isinstance(m, nn.Linear) and leave the others (Embedding, LayerNorm, ...) alone."
            )
