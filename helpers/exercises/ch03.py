"""Chapter 03 (nn.Module): exercise checkers and reference solutions.

Exercises:

- ``03.count_parameters``: ``count_parameters(model, trainable_only=False) -> int``.
- ``03.build_mlp``: ``build_mlp(sizes) -> nn.Module``, Linear layers with ReLU
  between them and no activation after the last.
- ``03.standardize``: a ``Standardize(mean, std)`` module that keeps its
  statistics as buffers.

Each checker raises ``AssertionError("hint")`` for a wrong answer (see
:func:`helpers.exercises.check`). Checkers that need random numbers run inside
``torch.random.fork_rng`` so they leave the notebook's random stream alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from . import exercise

__all__ = ["Standardize", "build_mlp", "count_parameters"]


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


def _count_cases() -> list[tuple[str, nn.Module, int, int]]:
    """(description, model, all parameters, trainable parameters)."""
    net = nn.Sequential(nn.Linear(10, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    net[0].requires_grad_(False)  # 10*8 + 8 = 88 frozen
    # all: 88 + (8 + 8) + (8*3 + 3) = 131; trainable: 131 - 88 = 43
    return [
        ("Sequential(Linear(10, 8) [frozen], BatchNorm1d(8), ReLU(), Linear(8, 3))", net, 131, 43),
        ("a module with Parameters [5] and [2, 3] (frozen) and two buffers", _WithBuffer(), 11, 5),
        ("nn.ReLU()", nn.ReLU(), 0, 0),
    ]


@exercise(
    "03.count_parameters",
    "write count_parameters(model, trainable_only=False) -> int: the number of scalar "
    "parameters (buffers excluded); with trainable_only=True, only those with requires_grad.",
    reference=count_parameters,
)
def _check_count_parameters(candidate: Callable) -> None:
    for label, model, total, trainable in _count_cases():
        n_state = sum(t.numel() for t in model.state_dict().values())
        n_tensors = len(list(model.parameters()))
        for flag, want in ((False, total), (True, trainable)):
            got = candidate(model) if not flag else candidate(model, trainable_only=True)
            if isinstance(got, torch.Tensor) or isinstance(got, bool) or not isinstance(got, int):
                raise AssertionError(f"return a Python int, got {type(got).__name__}.")
            if got == want:
                continue
            call = f"count_parameters(model, trainable_only={flag})"
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


@exercise(
    "03.build_mlp",
    "write build_mlp(sizes) -> nn.Module: Linear(sizes[0], sizes[1]), ReLU, ..., "
    "Linear(sizes[-2], sizes[-1]), with a ReLU between Linear layers and none after the last.",
    reference=build_mlp,
)
def _check_build_mlp(candidate: Callable) -> None:
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
        shapes = [(m.in_features, m.out_features) for m in linears]
        if shapes != pairs:
            raise AssertionError(f"expected Linear layers {pairs} in this order, found {shapes}.")
        with torch.no_grad():
            out = model(x)
            h = x
            for i, lin in enumerate(linears):
                h = lin(h)
                if i < len(linears) - 1:
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
                "ReLU (and nothing else) sits between consecutive Linear layers."
            )


@exercise(
    "03.standardize",
    "write a module Standardize(mean, std) whose forward returns (x - mean) / std, keeping "
    "mean and std as buffers named 'mean' and 'std' (register_buffer), not as Parameters.",
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
    keys = set(module.state_dict())
    if keys != {"mean", "std"}:
        raise AssertionError(
            f"state_dict() has keys {sorted(keys)}, expected ['mean', 'std']: a plain tensor "
            "attribute is neither saved in state_dict nor moved by .to(); use register_buffer "
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
