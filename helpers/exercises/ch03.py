"""Chapter 03 (nn.Module): exercise checkers and reference solutions.

Exercises:

- ``03.count_parameters``: ``count_parameters(model, trainable_only=False) -> int``.
- ``03.build_mlp``: ``build_mlp(sizes) -> nn.Module``, Linear layers with ReLU
  between them and no activation after the last.
- ``03.standardize``: a ``Standardize(mean, std)`` module that keeps its
  statistics as buffers.
- ``03.init_for_relu``: ``init_for_relu(model)``, Kaiming (He) weights for
  ReLU and zero biases in every ``nn.Linear`` and ``nn.Conv2d`` of ``model``,
  in place, returning ``model``; the checker gives the norm layers random
  parameters and running statistics first, so that resetting them is seen.

Each checker raises a :class:`~helpers.exercises.Hint` for a wrong answer: the
case, the expected and the actual value, and what they tell about the mistake
first; the fix (the call to write) only on a second failure or through
``hint("03.name")`` (see :func:`helpers.exercises.check`). The library helper
``helpers.models.count_parameters``, which the chapter shows, is refused as an
answer to ``03.count_parameters``. Checkers that need random numbers run inside
``torch.random.fork_rng`` so they leave the notebook's random stream alone.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence

import torch
from torch import nn

from . import Hint, exercise

#: Relative tolerance of the Standardize checks: an eps of 1e-5 added to std (which the task allows) changes
#: (x - mean) / std by up to 4e-5 relative at the checks' smallest std, 0.25; every wrong formula tested is
#: off by far more.
_EPS_RTOL = 1e-4

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
    """Kaiming (He) normal weights for ReLU and zero biases in every ``nn.Linear`` and ``nn.Conv2d`` of ``model``.

    Each weight is drawn from ``N(0, 2 / fan_in)`` (``mode="fan_in"``; He et al.
    2015, arXiv:1502.01852), where ``fan_in`` is the number of inputs one output
    sums over: ``in_features`` for a Linear weight ``[out, in]``, and
    ``in_channels x kernel height x kernel width`` for a Conv2d weight
    ``[out_channels, in_channels, kh, kw]`` (``kaiming_normal_`` reads it from
    the weight's shape). A bias, where the layer has one, is set to 0. Other
    layers are left alone. Works in place through ``nn.init`` (which runs under
    ``torch.no_grad()``), so the parameters stay the same ``nn.Parameter``
    objects, and returns ``model``.
    """

    def init_fn(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Conv2d)):
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


_COUNT_GOAL = "count_parameters"


@exercise(
    "03.count_parameters",
    "write count_parameters(model, trainable_only=False) -> int: the number of scalar "
    "parameters (buffers excluded); with trainable_only=True, only those with requires_grad. "
    "Write it yourself: helpers.models.count_parameters is not an answer.",
    reference=count_parameters,
    shortcuts=("helpers.models.count_parameters",),
    goal=_COUNT_GOAL,
    hint="model.parameters() (section 10) yields every parameter tensor exactly once, even one that two "
         "modules share, and never a buffer, while state_dict() also holds the buffers. Add up how many "
         "elements each tensor has, look at requires_grad only when trainable_only is set, and return a "
         "Python int, not a tensor.",
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
            call = f"count_parameters(model, trainable_only={flag})"
            got = candidate(model) if not flag else candidate(model, trainable_only=True)
            if isinstance(got, torch.Tensor):
                raise Hint(
                    f"{call} for {label} returned a tensor ({got!r}); the task asks for a Python int, "
                    "not a tensor.",
                    "Convert a one-element tensor with int(...) or .item(), or sum the Python ints "
                    "that p.numel() returns.",
                )
            if not _is_integer(got):
                raise Hint(
                    f"{call} for {label} returned {type(got).__name__} {got!r}; expected an integer "
                    f"({want}; a Python int, a NumPy integer is fine too): a count of scalars is a whole number.",
                    "p.numel() is already an int and a sum of ints is an int: leave out float() or "
                    "division.",
                )
            if got == want:
                continue
            if got == twice[flag] != want:
                raise Hint(
                    f"{call} for {label} gave {got}, expected {want}: {got} counts the shared weight "
                    "twice, once for each module that uses it.",
                    "model.parameters() yields each parameter once even when two modules share it; "
                    "looping over modules, named_parameters(remove_duplicate=False) or state_dict() does not.",
                )
            if got == n_state and n_state != want:
                raise Hint(
                    f"{call} for {label} gave {got}, expected {want}: {got} also counts the buffers "
                    "(such as BatchNorm's running_mean), which are saved but are not parameters.",
                    "state_dict() holds parameters and buffers; model.parameters() holds the "
                    "parameters only.",
                )
            if flag and got == total:
                raise Hint(
                    f"{call} for {label} gave {got}, every parameter; expected {want}: the frozen "
                    "ones (requires_grad=False) should not count here.",
                    "Keep only the parameters p for which p.requires_grad is True.",
                )
            if not flag and got == trainable:
                raise Hint(
                    f"{call} for {label} gave {got}, the trainable parameters only; expected {want}: "
                    "frozen parameters count too when trainable_only=False.",
                    "Filter on p.requires_grad only when trainable_only is True.",
                )
            if got == n_tensors:
                raise Hint(
                    f"{call} for {label} gave {got}, the number of parameter tensors; expected {want} "
                    "scalar elements.",
                    "Add up the elements of each parameter: p.numel() (the product of its shape).",
                )
            raise Hint(f"{call} for {label} should be {want}, got {got}.",
                       "Sum the elements of each tensor of model.parameters(), skipping frozen ones "
                       "only when trainable_only is True.")


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
    hint="Pair each size with the one after it to get the (in, out) of each Linear layer, and put exactly "
         "one ReLU after every Linear except the last, whose raw outputs are logits. Hand the layers to a "
         "container that both registers them and runs them in order (section 3); section 4 shows why a "
         "plain Python list is not enough.",
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
            raise Hint(
                f"build_mlp({sizes}) returned {type(model).__name__}, not an nn.Module.",
                "Return a module: nn.Sequential(...) of the layers is one.",
            )
        pairs = list(zip(sizes[:-1], sizes[1:]))
        want = sum(a * b + b for a, b in pairs)
        arithmetic = " + ".join(f"{a}*{b}+{b}" for a, b in pairs)
        got = sum(p.numel() for p in model.parameters())
        if got == 0:
            raise Hint(
                f"build_mlp({sizes}) has no registered parameters, expected {arithmetic} = {want}: "
                "nn.Module does not see layers kept in a plain Python list.",
                "Keep the layers in a container module that registers what it holds: nn.Sequential (which also "
                "chains them in forward) or nn.ModuleList.",
            )
        if got != want:
            raise Hint(
                f"build_mlp({sizes}) should have {arithmetic} = {want} parameters, but has {got}.",
                "One Linear(a, b) per consecutive pair (a, b) of sizes, and nothing else with "
                "parameters (ReLU has none).",
            )
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        by_shape = {(m.in_features, m.out_features): m for m in linears}
        shapes = [(m.in_features, m.out_features) for m in linears]
        if len(linears) != len(pairs) or set(by_shape) != set(pairs):
            raise Hint(
                f"build_mlp({sizes}) should contain the Linear layers (in, out) = {pairs}, "
                f"found {shapes}.",
                "Layer i maps sizes[i] features to sizes[i + 1]: pair each size with the one after it.",
            )
        others = sorted(
            {
                type(m).__name__
                for m in model.modules()
                if not list(m.children()) and not isinstance(m, (nn.Linear, nn.ReLU))
            }
        )
        if others:
            raise Hint(
                f"build_mlp({sizes}) contains {', '.join(others)}: the task asks for Linear layers "
                "with nn.ReLU between them and nothing else (no Dropout, no other activation such "
                "as LeakyReLU, even one that behaves almost like ReLU).",
                "Between two Linear layers put exactly one nn.ReLU(), and no layer of any other kind.",
            )
        if type(model).forward is nn.Module.forward:
            kind = type(model).__name__
            raise Hint(
                f"build_mlp({sizes}) returned a {kind}, which registers the layers but has no forward of its "
                f"own: calling it raises NotImplementedError"
                + (" (a ModuleList only holds layers, it does not chain them)." if isinstance(model, nn.ModuleList)
                   else "."),
                "Return a module that also runs the layers in order: nn.Sequential does, or a subclass of "
                "nn.Module whose forward loops over an nn.ModuleList.",
            )
        out, calls = _run_recording(model, linears, x)
        with torch.no_grad():  # the intended computation, layer by layer in the order of sizes
            h = x
            for i, pair in enumerate(pairs):
                h = by_shape[pair](h)
                if i < len(pairs) - 1:
                    h = torch.relu(h)
            plain = x  # the same layers with nothing between them
            for pair in pairs:
                plain = by_shape[pair](plain)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (64, sizes[-1]):
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise Hint(
                f"build_mlp({sizes}) maps a [64, {sizes[0]}] batch to {shape}, expected (64, {sizes[-1]}).",
                "The last Linear maps the second-to-last size to the last one, and forward should return its "
                "output as it is.",
            )
        if not (out < 0).any():
            raise Hint(
                f"every output of build_mlp({sizes}) is >= 0, although logits can be negative: "
                "something after the last Linear clips them.",
                "Drop the ReLU after the last Linear: the last layer gives raw scores (logits).",
            )
        if len(pairs) > 1 and torch.allclose(out, plain, atol=1e-6):
            raise Hint(
                f"build_mlp({sizes}) computes the Linear layers one after the other with nothing "
                "between consecutive ones: a stack of Linear layers is just one linear map.",
                "Put an nn.ReLU() between each Linear and the next (not after the last).",
            )
        if not torch.allclose(out, h, atol=1e-6):
            worst = (out - h).abs().max().item()
            raise Hint(
                f"build_mlp({sizes}) does not compute Linear -> ReLU -> ... -> Linear: its outputs "
                f"differ by up to {worst:.3g} from those layers with a ReLU between consecutive ones.",
                "Check that a ReLU (and nothing else) sits between consecutive Linear layers, in the "
                "order of sizes.",
            )
        # The model must also train: a forward under no_grad, or one that detaches, gives no gradients.
        model.zero_grad(set_to_none=True)
        trained = model(x)
        if isinstance(trained, torch.Tensor) and trained.requires_grad:
            trained.square().sum().backward()
        stuck = [tuple(layer.weight.shape) for layer in linears
                 if layer.weight.grad is None or not layer.weight.grad.abs().sum() > 0]
        if stuck:
            raise Hint(
                f"after a backward() through build_mlp({sizes}), the Linear weights of shape {stuck} got no "
                "gradient: forward cuts autograd's graph (torch.no_grad(), .detach() or .data), so the model "
                "cannot be trained.",
                "Let forward compute with the layers directly; no torch.no_grad() or .detach() inside it.",
            )
        # Exactly: what enters each Linear after the first is ReLU of what the previous one gave.
        # (A leaky activation with a tiny slope, or a dropout, is close but not equal.)
        if len(calls) == len(pairs):
            for (_, _, before), (layer, given, _) in zip(calls, calls[1:]):
                if not torch.equal(given, torch.relu(before)):
                    raise Hint(
                        f"in build_mlp({sizes}) the input of Linear({layer.in_features}, "
                        f"{layer.out_features}) is not exactly ReLU of the previous Linear's output "
                        f"(smallest entry {given.min().item():.3g}, where ReLU gives 0 or more).",
                        "Use torch.relu or nn.ReLU, which sets every negative value to exactly 0, and "
                        "nothing else between the layers.",
                    )


def _standardize_output(module: nn.Module, x: torch.Tensor, when: str) -> torch.Tensor:
    out = module(x)
    if not isinstance(out, torch.Tensor):
        raise Hint(f"{when}, forward returned {type(out).__name__}, not a tensor.",
                   "forward should return one tensor, the input standardised with the registered buffers.")
    return out


@exercise(
    "03.standardize",
    "write a module Standardize(mean, std) whose forward returns (x - mean) / std, keeping "
    "mean and std as buffers named 'mean' and 'std' (register_buffer), not as Parameters "
    "(other buffers are allowed, Parameters are not), and computing with those buffers as they are when "
    "forward runs: loading new values of mean and std with load_state_dict changes the output.",
    reference=Standardize,
    hint="A buffer, registered with register_buffer (section 2), is saved in the state_dict and moved by "
         ".to(), but parameters() does not list it, so no optimizer changes it. Register mean and std "
         "under exactly those names in __init__, and compute forward from self.mean and self.std, so that "
         ".to() and load_state_dict reach the values forward actually uses.",
)
def _check_standardize(candidate: Callable) -> None:
    mean = torch.tensor([1.0, -2.0, 0.5])
    std = torch.tensor([2.0, 0.5, 4.0])
    x = torch.tensor([[3.0, -1.0, 4.5], [1.0, -2.0, 0.5]])
    module = candidate(mean, std)
    if not isinstance(module, nn.Module):
        raise Hint(
            f"Standardize(mean, std) built a {type(module).__name__}, not an nn.Module.",
            "Subclass nn.Module and call super().__init__() first in __init__.",
        )
    out = _standardize_output(module, x, "for mean = [1, -2, 0.5] and std = [2, 0.5, 4]")
    want = (x - mean) / std
    if out.shape != want.shape or not torch.allclose(out, want, rtol=_EPS_RTOL):
        raise Hint(
            f"for mean = [1, -2, 0.5] and std = [2, 0.5, 4], forward should return (x - mean) / std = "
            f"{want.tolist()}, got {out.tolist() if out.numel() < 20 else tuple(out.shape)}.",
            "Subtract mean and divide by std; both [F] broadcast over the batch dimension of x [B, F].",
        )
    frozen = [n for n, p in module.named_parameters() if not p.requires_grad]
    names = [n for n, p in module.named_parameters() if p.requires_grad]
    if frozen:
        one = len(frozen) == 1
        raise Hint(
            f"{frozen} {'is a Parameter' if one else 'are Parameters'} with requires_grad=False: frozen, so an "
            f"optimizer leaves {'it' if one else 'them'} alone (the gradient stays None), but "
            f"{'it is' if one else 'they are'} still listed by model.parameters() and counted as "
            "weights, and model.requires_grad_(True), a common way to unfreeze a model, would make "
            f"{'it' if one else 'them'} trainable.",
            "Fixed statistics are not weights at all: keep mean and std as buffers, registered with the "
            "module's register_buffer under the names mean and std: a buffer is saved and moved, never "
            "listed by parameters() nor trained.",
        )
    if names:
        one = len(names) == 1
        raise Hint(
            f"{names} {'is a Parameter' if one else 'are Parameters'}, so model.parameters() hands "
            f"{'it' if one else 'them'} to an optimizer, which would change {'it' if one else 'them'}: "
            "Standardize has no weights to train, only fixed statistics.",
            "Keep mean and std (and any constant, such as an eps) as buffers, registered with the "
            "module's register_buffer under the names mean and std: a buffer is saved and moved, never trained.",
        )
    # Extra buffers (an eps, say) are fine; mean and std must be saved buffers.
    keys = set(module.state_dict())
    missing = sorted({"mean", "std"} - keys)
    if missing:
        buffers = {n for n, _ in module.named_buffers()}
        if set(missing) <= buffers:
            raise Hint(
                f"{missing} are buffers but not in state_dict() (keys {sorted(keys)}): they were "
                "registered as non-persistent, so a saved checkpoint would lose them.",
                "A buffer is persistent (saved) unless you ask otherwise: drop the persistent flag, whose "
                "default is True.",
            )
        saved_buffers = sorted(keys & {n for n, _ in module.named_buffers()})
        plain = [n for n in missing if isinstance(getattr(module, n, None), torch.Tensor)]
        if saved_buffers and not plain:  # buffers there are, but under other names than the task's
            raise Hint(
                f"state_dict() has keys {sorted(keys)}, without {missing}: your buffers {saved_buffers} are saved, "
                "but under other names than the ones the task asks for (mean and std). Code that loads a "
                "checkpoint, or reads model.mean, looks them up by those names.",
                "The name you pass to register_buffer is the key in state_dict() and the attribute's name: "
                "register the statistics under the names mean and std.",
            )
        raise Hint(
            f"state_dict() has keys {sorted(keys)}, without {missing}: a plain tensor attribute is "
            "neither saved in state_dict nor moved by .to().",
            "Register both with the module's register_buffer (persistent by default), under the names mean "
            "and std, instead of assigning plain tensors.",
        )
    module = module.to(torch.float64)
    if module.mean.dtype != torch.float64 or module.std.dtype != torch.float64:
        raise Hint(
            "after .to(torch.float64) mean and std are still float32: .to() did not reach them.",
            "Register them as buffers with self.register_buffer, and do not reassign them afterwards.",
        )
    out64 = _standardize_output(module, x.double(), "after .to(torch.float64)")
    if out64.dtype != torch.float64 or not torch.allclose(out64, want.double(), rtol=_EPS_RTOL):
        raise Hint(
            f"after .to(torch.float64) the module should compute in float64 with the same result; "
            f"got dtype {out64.dtype}.",
            "Compute with self.mean and self.std, which .to() has converted.",
        )
    # The output must follow the buffers: load the state of a module built with other statistics
    # (its whole state_dict, so that a buffer derived from them, such as 1 / std, comes along).
    new_mean = torch.tensor([-3.0, 0.25, 10.0], dtype=torch.float64)
    new_std = torch.tensor([0.5, 8.0, 1.0], dtype=torch.float64)
    module.load_state_dict(candidate(new_mean.float(), new_std.float()).state_dict())
    followed = _standardize_output(module, x.double(), "after load_state_dict")
    want_new = (x.double() - new_mean) / new_std
    if followed.shape != want_new.shape or not torch.allclose(followed, want_new, rtol=_EPS_RTOL):
        still_old = followed.shape == want.shape and torch.allclose(followed, want.double(), rtol=_EPS_RTOL)
        raise Hint(
            "after load_state_dict with mean = [-3, 0.25, 10] and std = [0.5, 8, 1], forward should "
            f"return {want_new.tolist()}, got {followed.tolist()}"
            + (", the result for the old mean and std: forward does not read the buffers it registered."
               if still_old else "."),
            "In forward, compute with the registered buffers self.mean and self.std, not with copies "
            "kept elsewhere (a plain attribute, a Python list, a closure): only the buffers are "
            "loaded and moved.",
        )
    # Only mean and std change (a checkpoint written with other statistics, the other entries as they were):
    # forward must compute from those two, not from a value derived from them once in __init__.
    state = module.state_dict()
    third_mean = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    third_std = torch.tensor([4.0, 0.25, 2.0], dtype=torch.float64)
    state["mean"], state["std"] = third_mean.clone(), third_std.clone()
    others = sorted(set(state) - {"mean", "std"})
    module.load_state_dict(state)
    followed = _standardize_output(module, x.double(), "after load_state_dict of new mean and std")
    want_third = (x.double() - third_mean) / third_std
    if followed.shape != want_third.shape or not torch.allclose(followed, want_third, rtol=_EPS_RTOL):
        besides = (f" (the other entries of your state_dict, {others}, left as they were)" if others else "")
        raise Hint(
            "after loading a state_dict whose 'mean' and 'std' are [0.5, -1, 2] and [4, 0.25, 2]"
            f"{besides}, forward should return {want_third.tolist()}, got {followed.tolist()}: forward does "
            "not compute from the buffers mean and std as they are now.",
            "A value derived from std once, in __init__ (its inverse, say), keeps the old statistics when new "
            "ones are loaded into mean and std: derive anything you need from self.mean and self.std in forward.",
        )


class _Head(nn.Module):
    """A custom module holding a Linear without bias, so that it sits two levels deep."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(256, 64, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class _InitTarget(nn.Module):
    """Tokens: Embedding(100, 64) -> Linear(64, 512) -> ReLU -> Linear(512, 256) -> LayerNorm -> ReLU -> head;
    images: Conv2d(12, 40, kernel_size=(3, 5)) -> BatchNorm2d -> ReLU.

    Every Linear has a different (in, out), so Kaiming's std sqrt(2 / fan_in)
    differs from sqrt(2 / fan_out), from Xavier's sqrt(2 / (fan_in + fan_out))
    and from the default's 1 / sqrt(3 fan_in) by more than 10 % for each of them.
    The convolution's fan_in is 12 * 3 * 5 = 180, and its kernel is not square,
    so fan_in = in_channels (12) or in_channels * kh * kh (108) is told apart too.
    """

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 64)
        self.body = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 256), nn.LayerNorm(256), nn.ReLU())
        self.head = _Head()
        self.features = nn.Sequential(nn.Conv2d(12, 40, kernel_size=(3, 5)), nn.BatchNorm2d(40), nn.ReLU())

    def forward(self, tokens: torch.Tensor, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.head(self.body(self.embed(tokens))), self.features(images)


def _layer_name(name: str, layer: nn.Module) -> str:
    if isinstance(layer, nn.Conv2d):
        return f"{name} = Conv2d({layer.in_channels}, {layer.out_channels}, kernel_size={layer.kernel_size})"
    return f"{name} = Linear({layer.in_features}, {layer.out_features})"


def _fans(layer: nn.Module) -> tuple[int, int]:
    """(fan_in, fan_out): inputs one output sums over, outputs one input feeds."""
    if isinstance(layer, nn.Conv2d):
        kh, kw = layer.kernel_size
        return layer.in_channels * kh * kw, layer.out_channels * kh * kw
    return layer.in_features, layer.out_features


def _std_candidates(layer: nn.Module) -> dict[str, tuple[float, str, str]]:
    """Plausible wrong weight stds: name -> (std, what it equals, the fuller hint)."""
    fan_in, fan_out = _fans(layer)
    want = math.sqrt(2 / fan_in)
    found = {
        "fan_out": (
            math.sqrt(2 / fan_out),
            f"sqrt(2 / fan_out) = sqrt(2 / {fan_out}), the outputs' count instead of the inputs' (fan_in)",
            "Kaiming for ReLU keeps the forward pass steady with the number of inputs each output sums "
            "over: mode='fan_in', the default of nn.init.kaiming_normal_.",
        ),
        "xavier": (
            math.sqrt(2 / (fan_in + fan_out)),
            f"Xavier's sqrt(2 / (fan_in + fan_out)) = sqrt(2 / {fan_in + fan_out}), a rule made for tanh",
            f"ReLU needs Kaiming, std sqrt(2 / fan_in) = {want:.4f}: nn.init's kaiming_normal_ for "
            "nonlinearity='relu'.",
        ),
        "gain 1": (
            math.sqrt(1 / fan_in),
            f"sqrt(1 / fan_in) = sqrt(1 / {fan_in}), a gain of 1, where ReLU's is sqrt(2)",
            "ReLU zeroes half its inputs, so its gain is sqrt(2): nonlinearity='relu' in "
            "nn.init.kaiming_normal_.",
        ),
        "default": (
            1 / math.sqrt(3 * fan_in),
            f"1 / sqrt(3 fan_in) = 1 / sqrt({3 * fan_in}), PyTorch's default initialisation, not Kaiming",
            "Draw the weight again with nn.init's kaiming_normal_ for nonlinearity='relu' (a layer's "
            "reset_parameters() is what gives the default).",
        ),
        "variance": (
            2 / fan_in,
            f"2 / fan_in = 2 / {fan_in}, Kaiming's variance rather than its standard deviation",
            "nn.init.normal_ takes the standard deviation: the square root of 2 / fan_in.",
        ),
    }
    if isinstance(layer, nn.Conv2d):
        kh, kw = layer.kernel_size
        found["in_channels"] = (
            math.sqrt(2 / layer.in_channels),
            f"sqrt(2 / in_channels) = sqrt(2 / {layer.in_channels}): a convolution's fan_in is more "
            "than its input channels",
            f"Each output of a convolution sums over in_channels x kernel height x kernel width = "
            f"{layer.in_channels} x {kh} x {kw} = {fan_in} inputs; nn.init.kaiming_normal_ works it "
            "out from the weight's shape.",
        )
        found["square kernel"] = (
            math.sqrt(2 / (layer.in_channels * kh * kh)),
            f"sqrt(2 / (in_channels x {kh} x {kh})): the kernel is {kh} x {kw}, not square",
            f"fan_in = in_channels x kernel_size[0] x kernel_size[1] = {fan_in}, or "
            "m.weight[0].numel().",
        )
    return found


def _scramble_norm_layers(model: nn.Module) -> None:
    """Give every norm layer of ``model`` random affine parameters and BatchNorm random running statistics.

    Freshly built, a LayerNorm or BatchNorm has weight 1 and bias 0 and a
    BatchNorm zero mean, unit variance and a zero counter, so an answer that
    resets them (or zeroes every bias) would leave them looking unchanged.
    """
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.LayerNorm, nn.BatchNorm2d)):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-1.0, 1.0)
                m.running_var.uniform_(0.5, 2.0)
                m.num_batches_tracked.fill_(17)


def _depth_note(model: nn.Module, name: str) -> str:
    depth = name.count(".") + 1
    parent = model.get_submodule(name.rsplit(".", 1)[0]) if depth > 1 else model
    return f" It sits {depth} levels deep, inside a {type(parent).__name__}." if depth > 1 else ""


@exercise(
    "03.init_for_relu",
    "write init_for_relu(model): for every nn.Linear and nn.Conv2d in model, at any depth, draw the "
    "weight with Kaiming (He) initialisation for ReLU (std sqrt(2 / fan_in), where fan_in is "
    "in_features for a Linear and in_channels x kernel height x kernel width for a Conv2d; the normal and "
    "the uniform form both have that std, and either passes) and set "
    "the bias, where there is one, to zero; leave every other layer alone (parameters and buffers), "
    "change the parameters in place and return model.",
    reference=init_for_relu,
    hint="model.apply (or a loop over model.modules()) reaches every submodule at any depth, while "
         "children() gives only the direct ones. Pick the Linear and Conv2d layers by type, fill their "
         "weights in place with nn.init's Kaiming initialiser told that a ReLU follows, as section 9's "
         "linear_init does for Linear layers, and zero a bias only where it is not None. Leave every other "
         "layer alone, and return the model you were given.",
)
def _check_init_for_relu(candidate: Callable) -> None:
    torch.manual_seed(0)
    model = _InitTarget()
    _scramble_norm_layers(model)
    before = {name: t.detach().clone() for name, t in [*model.named_parameters(), *model.named_buffers()]}
    objects = dict(model.named_parameters())
    targets = {name: m for name, m in model.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d))}
    returned = candidate(model)

    after = dict(model.named_parameters())
    for name, p in objects.items():
        if after.get(name) is not p:
            raise Hint(
                f"{name} is a new object after init_for_relu, not the old parameter changed in place: "
                "an optimizer built before would keep training the old one.",
                "Fill the existing parameter: the functions of nn.init write into the tensor they are "
                "given, and so does an in-place tensor method under torch.no_grad(). Do not assign a new "
                "nn.Parameter.",
            )
        if not (p.is_leaf and p.requires_grad):
            raise Hint(
                f"{name} is no longer a trainable leaf (is_leaf={p.is_leaf}, requires_grad={p.requires_grad}).",
                "Initialise under torch.no_grad(), which nn.init does for you, and do not call "
                "requires_grad_(False).",
            )
    for name, p in model.named_parameters():
        module_name = name.rsplit(".", 1)[0]
        if module_name not in targets and not torch.equal(p.detach(), before[name]):
            kind = type(model.get_submodule(module_name)).__name__
            raise Hint(
                f"{name} changed, but its layer is {kind}, neither nn.Linear nor nn.Conv2d: it should "
                "be left alone.",
                "Pick the layers by type (an isinstance test for the two layer classes), not by their "
                "parameters' shapes or names, and leave every other layer's parameters as they were "
                "(a norm layer's reset_parameters() also counts as a change).",
            )
    for name, b in model.named_buffers():
        if not torch.equal(b.detach(), before[name]):
            kind = type(model.get_submodule(name.rsplit(".", 1)[0])).__name__
            raise Hint(
                f"the buffer {name} of a {kind} changed: init_for_relu should leave every layer other "
                "than nn.Linear and nn.Conv2d alone, its running statistics included.",
                "Touch only the weight and bias of the Linear and Conv2d layers: do not reset a norm "
                "layer (reset_running_stats() and reset_parameters() change it), and do not run the "
                "model forward in training mode, which updates BatchNorm's running statistics.",
            )
    unchanged = [name for name, layer in targets.items() if torch.equal(layer.weight.detach(), before[f"{name}.weight"])]
    if len(unchanged) == len(targets):
        raise Hint(
            f"none of the {len(targets)} Linear and Conv2d layers of the model changed: init_for_relu should "
            "change the model it is given, in place.",
            "model.apply(fn) calls fn on every submodule at every depth (model.children() only gives the "
            "direct ones); in fn, pick the layers by type and fill their weights with nn.init's "
            "kaiming_normal_, for nonlinearity='relu'. Change the model you are given, not a copy.",
        )
    for name, layer in targets.items():
        label = _layer_name(name, layer)
        w = layer.weight.detach()
        fan_in, _ = _fans(layer)
        if name in unchanged:
            if isinstance(layer, nn.Conv2d):
                raise Hint(
                    f"{label} kept its old weights: the task covers nn.Conv2d layers as well as nn.Linear.",
                    "Pick the layers by type, with a test that admits nn.Conv2d as well as nn.Linear; for a Conv2d, fan_in = "
                    "in_channels x kernel height x kernel width, which nn.init.kaiming_normal_ works out "
                    "from the weight's shape.",
                )
            raise Hint(
                f"{label} kept its old weights.{_depth_note(model, name)}",
                "model.apply(fn) calls fn on every submodule at every depth (model.children() only "
                "gives the direct ones); change the model you are given, not a copy.",
            )
        if layer.bias is not None and not torch.equal(layer.bias.detach(), torch.zeros_like(layer.bias)):
            raise Hint(
                f"the bias of {label} is not zero (largest |bias| {layer.bias.abs().max().item():.3g}).",
                "Set the bias to zero with nn.init's zeros_, where the layer has one (a layer built with "
                "bias=False has None there).",
            )
        std, mean = w.std().item(), w.mean().item()
        want = math.sqrt(2 / fan_in)
        if abs(std / want - 1) < 0.04 and abs(mean) < 0.05 * want:
            distinct = w.unique().numel()
            if distinct < w.numel() // 2:  # a random float draw repeats almost no value
                raise Hint(
                    f"{label}: the weight has mean {mean:.4f} and std {std:.4f} as it should, but only {distinct} "
                    f"distinct values among its {w.numel()} entries: they are not drawn at random.",
                    "Kaiming initialisation draws every weight independently, from a normal (or uniform) "
                    "distribution with std sqrt(2 / fan_in); nn.init's kaiming_normal_ does it in place.",
                )
            continue
        candidates = _std_candidates(layer)
        closest = min(candidates, key=lambda k: abs(std / candidates[k][0] - 1))
        value, equals, fuller = candidates[closest]
        if abs(std / value - 1) < 0.04 and abs(mean) < 0.05 * value:
            raise Hint(f"{label}: weight std {std:.4f}, expected {want:.4f}. The std equals {equals}.", fuller)
        raise Hint(
            f"{label}: weight std {std:.4f} and mean {mean:.4f}; expected mean 0 and std {want:.4f}.",
            "Kaiming for ReLU: a normal distribution with mean 0 and std sqrt(2 / fan_in), which "
            "nn.init's kaiming_normal_ draws for nonlinearity='relu'.",
        )
    # drawn from torch's random state: another seed, other weights
    torch.manual_seed(1)
    other = _InitTarget()
    _scramble_norm_layers(other)
    candidate(other)
    for name, layer in targets.items():
        if torch.equal(other.get_submodule(name).weight.detach(), layer.weight.detach()):
            raise Hint(
                f"{_layer_name(name, layer)} got exactly the same weights after torch.manual_seed(0) and after "
                "torch.manual_seed(1): they do not come from torch's random number generator.",
                "Draw the weights from torch's global random state, as nn.init's functions and Tensor.normal_ "
                "do, with no seed or fixed torch.Generator of your own inside init_for_relu: every model "
                "initialised should get its own random weights.",
            )
    if returned is not model:
        got = "None" if returned is None else f"a {type(returned).__name__} that is not the model it was given"
        raise Hint(
            f"init_for_relu initialised the model correctly but returned {got}: its docstring says it "
            "returns model, so that init_for_relu(MyNet()) can be used in one expression.",
            "model.apply(fn) returns the model it was called on, so its result can be returned as it is; "
            "or end the function by returning the model you were given (not a copy).",
        )
