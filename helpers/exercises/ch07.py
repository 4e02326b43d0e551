"""Exercises of chapter 07 (a CNN on CIFAR-10): checkers and reference solutions."""

from __future__ import annotations

import random
from collections import OrderedDict

import torch
from torch import nn

from . import Hint, Shortcut, exercise, expect_type

# --------------------------------------------------------------------------
# 07.receptive_field
# --------------------------------------------------------------------------


def _receptive_field(layers: list[tuple[int, int, int]]) -> int:
    """Side length, in input pixels, of the square that one output pixel depends on.

    Args:
        layers: the stack from input to output, one ``(kernel, stride,
            dilation)`` tuple of ints per convolution or pooling layer
            (square kernels; padding does not change the answer).

    Returns:
        The receptive field as an int. One layer of kernel ``k`` and dilation
        ``d`` spans ``d * (k - 1) + 1`` pixels; each later layer adds
        ``d * (k - 1)`` steps of its input, and one step of a layer's input is
        the product of the strides of all the layers before it. An empty
        stack sees 1 pixel.
    """
    field, jump = 1, 1  # jump: input pixels between two neighbouring positions of the current layer
    for kernel, stride, dilation in layers:
        field += dilation * (kernel - 1) * jump
        jump *= stride
    return field


def _measured_receptive_field(layers: list[tuple[int, int, int]], expected: int) -> int:
    """The receptive field of output pixel (0, 0), measured with autograd on real layers.

    Every weight is 1 and there is no padding and no non-linearity, so the
    gradient of that one output with respect to the input is positive exactly
    on the pixels it depends on.
    """
    size = 2 * expected + 8  # output (0, 0) needs `expected` pixels; the rest is margin
    convs = []
    for kernel, stride, dilation in layers:
        conv = nn.Conv2d(1, 1, kernel, stride=stride, dilation=dilation, bias=False).double()
        nn.init.ones_(conv.weight)
        convs.append(conv)
    x = torch.zeros(1, 1, size, size, dtype=torch.float64, requires_grad=True)
    out = nn.Sequential(*convs)(x)
    out[0, 0, 0, 0].backward()
    rows = (x.grad[0, 0] != 0).any(dim=1).nonzero().squeeze(1)
    return int(rows.max() - rows.min() + 1)


def _as_int(value, layers) -> int:
    expect_type(value, int, f"the receptive field of {layers} (a side length in pixels)")
    return value


def _random_stacks(count: int) -> list[tuple[str, list[tuple[int, int, int]]]]:
    """``count`` random stacks of 1 to 5 layers, drawn anew on every check (so no table of answers passes).

    Each stack has a stride above 1 before its last layer and a dilation above 1 somewhere, so
    that every shortcut below gives a wrong number on it.
    """
    rng = random.Random()  # a fresh, unseeded generator: the notebook's random streams are not touched
    stacks = []
    while len(stacks) < count:
        layers = [(rng.choice((1, 2, 3, 5, 7)), rng.choice((1, 2, 3)), rng.choice((1, 2, 3)))
                  for _ in range(rng.randint(2, 5))]
        strided_early = any(s > 1 for _, s, _ in layers[:-1])
        dilated = any(d > 1 and k > 1 for k, _, d in layers)
        if strided_early and dilated and _receptive_field(layers) <= 160:
            stacks.append(("a random stack", layers))
    return stacks


#: Ways to measure the field instead of working it out: run real layers, then read which inputs matter.
_MEASURED_BY = "and measuring its output"
_MEASURING = (
    *(Shortcut(f"torch.conv{n}d", does=f"running a convolution (`F.conv{n}d`) {_MEASURED_BY}")
      for n in (1, 2, 3)),
    Shortcut("torch.nn.modules.conv._ConvNd",
             does=f"running a convolution layer (`nn.Conv1d`, `nn.Conv2d`, ...) {_MEASURED_BY}"),
    *(Shortcut(f"torch.nn.functional.{kind}_pool{n}d",
               does=f"running a pooling layer (`F.{kind}_pool{n}d`) {_MEASURED_BY}")
      for kind in ("max", "avg") for n in (1, 2, 3)),
    Shortcut("torch.nn.modules.pooling._MaxPoolNd",
             does=f"running a pooling layer (`nn.MaxPool1d`, `nn.MaxPool2d`, ...) {_MEASURED_BY}"),
    Shortcut("torch.nn.modules.pooling._AvgPoolNd",
             does=f"running a pooling layer (`nn.AvgPool1d`, `nn.AvgPool2d`, ...) {_MEASURED_BY}"),
    Shortcut("torch.autograd.grad", does="measuring the field with autograd (`torch.autograd.grad`)"),
    Shortcut("torch.Tensor.backward", does="measuring the field with autograd (`backward()`)"),
    Shortcut("torch.autograd.backward", does="measuring the field with autograd (`torch.autograd.backward`)"),
    *(Shortcut(f"torch.func.{name}", does=f"measuring the field with torch.func (`torch.func.{name}`)")
      for name in ("grad", "grad_and_value", "vjp", "jacrev", "jacfwd")),
    *(Shortcut(f"torch.autograd.functional.{name}", does=f"measuring the field with autograd (`{name}`)")
      for name in ("jacobian", "vjp", "vhp", "jvp")),
    Shortcut("torch.nn.functional.unfold", does=f"cutting the input into patches (`F.unfold`) {_MEASURED_BY}"),
    *(Shortcut(f"torch.conv_transpose{n}d", does=f"running a transposed convolution {_MEASURED_BY}") for n in (1, 2, 3)),
)


@exercise(
    "07.receptive_field",
    "return the receptive field (side length in input pixels, a Python int) of one output pixel of a stack of "
    "convolution or pooling layers, given as a list of (kernel, stride, dilation) tuples from input to output. "
    "Work it out from the kernel sizes, strides and dilations: running layers (convolution, pooling) or "
    "autograd to measure it is refused.",
    reference=_receptive_field,
    shortcuts=_MEASURING,
    goal="the receptive-field arithmetic (from the kernel sizes, strides and dilations)",
    hint="Work in one dimension, from the input to the output, and keep track of how many input pixels lie "
         "between two neighbouring positions of the current layer's input: the strides of the earlier "
         "layers multiply into that distance, while a layer's own stride only matters for the layers after "
         "it. Each layer widens the field by the extra positions its kernel spans once dilation spreads "
         "the taps apart, measured in that distance.",
)
def _test_receptive_field(candidate) -> None:
    cases = [
        ("one 3x3 convolution", [(3, 1, 1)]),
        ("two stacked 3x3 convolutions", [(3, 1, 1), (3, 1, 1)]),
        ("a dilated 3x3 convolution", [(3, 1, 2)]),
        ("3x3 conv, 2x2 max-pool, 3x3 conv", [(3, 1, 1), (2, 2, 1), (3, 1, 1)]),
        ("the VGG-style network of this chapter", [(3, 1, 1), (3, 1, 1), (2, 2, 1)] * 3),
        ("a 7x7 stride-2 stem and a 3x3 stride-2 pool", [(7, 2, 1), (3, 2, 1)]),
        ("dilated convolutions 1, 2, 4", [(3, 1, 1), (3, 1, 2), (3, 1, 4)]),
        ("stride 2, then a dilated convolution", [(3, 2, 1), (3, 1, 2), (5, 1, 1)]),
        ("an empty stack (the input itself)", []),
        *_random_stacks(4),
    ]
    for label, layers in cases:
        want = _measured_receptive_field(layers, _receptive_field(layers)) if layers else 1
        got = _as_int(candidate([tuple(layer) for layer in layers]), layers)
        if got == want:
            continue
        case = f"{label} {layers}: the receptive field measured with autograd is {want} pixels, you returned {got}"
        no_stride = 1 + sum(d * (k - 1) for k, _, d in layers)
        no_dilation = _receptive_field([(k, s, 1) for k, s, _ in layers])
        if got == no_stride:
            raise Hint(
                f"{case}, as if every stride were 1.",
                "After a layer with stride s, neighbouring positions of the next layer lie s input pixels apart, "
                "and after several strided layers these distances multiply: a layer's window is measured in "
                "those wider steps, not in input pixels.",
            )
        if got == no_dilation:
            raise Hint(f"{case}, as if every dilation were 1.",
                       "Dilation spreads a kernel's taps apart: a 3x3 kernel with dilation 2 spans 5 pixels of "
                       "its input, not 3.")
        if layers and got == sum(k for k, _, _ in layers):
            raise Hint(
                f"{case}: that is the sum of the kernel sizes.",
                "Two stacked 3x3 convolutions see 5 pixels, not 6: the windows of neighbouring positions overlap.",
            )
        with_own_stride = 1
        jump = 1
        for k, s, d in layers:
            jump *= s
            with_own_stride += d * (k - 1) * jump
        if got == with_own_stride:
            raise Hint(
                f"{case}: you multiplied each layer's span by its own stride too.",
                "A layer's own stride does not widen its own window, only the windows of the layers after it.",
            )
        raise Hint(f"{case}.",
                   "Walk from the input to the output and keep track of how far apart, in input pixels, two "
                   "neighbouring positions of the current layer's input are (the strides of the earlier layers "
                   "decide it). Test your idea on conv-pool-conv [(3, 1, 1), (2, 2, 1), (3, 1, 1)]: 8 pixels.")


# --------------------------------------------------------------------------
# 07.strip_prefix
# --------------------------------------------------------------------------


def _strip_prefix(state_dict: dict, prefix: str) -> OrderedDict:
    """A copy of ``state_dict`` with ``prefix`` removed from the start of each key that has it.

    Args:
        state_dict: a mapping of parameter names to tensors, e.g. a checkpoint
            saved from an ``nn.DataParallel`` model (keys ``"module.conv1.weight"``, ...).
        prefix: e.g. ``"module."``.

    Returns:
        A new ``OrderedDict`` in the same key order. Keys that start with
        ``prefix`` lose it, once, at the start only; other keys are kept as
        they are. The values are the same tensor objects (no copies), and the
        input is left unchanged.
    """
    return OrderedDict((key.removeprefix(prefix), value) for key, value in state_dict.items())


@exercise(
    "07.strip_prefix",
    "return a new dict, in the same order, in which each key of state_dict that starts with prefix has "
    "that prefix removed (at the start only); other keys unchanged, the values the very same tensors, "
    "and the input dict left unchanged.",
    reference=_strip_prefix,
    hint="Build a new dict by walking the items in their original order and changing only the keys. "
         "Python's str has a method that removes a prefix only when the string starts with it, and only "
         "once, unlike str.replace or str.lstrip; keep each value as the very same tensor (no clone), and "
         "use the prefix argument rather than a hard-coded 'module.'.",
)
def _test_strip_prefix(candidate) -> None:
    g = torch.Generator().manual_seed(7)
    keys = [
        "module.conv1.weight",
        "module.bn1.running_mean",
        "module.mlp.submodule.weight",  # "module." also appears inside a key
        "module.module.bias",  # a submodule really named "module": strip only once
        "head.module.weight",  # "module." not at the start: keep
        "mode.weight",  # made of the prefix's letters: keep
        "modules.0.weight",  # an nn.ModuleList named "modules": "^module." as a regex matches it (. is any character)
        "lm_head.bias",
    ]
    original = OrderedDict((k, torch.randn(2, generator=g)) for k in keys)
    before = list(original.items())
    want = [
        "conv1.weight",
        "bn1.running_mean",
        "mlp.submodule.weight",
        "module.bias",
        "head.module.weight",
        "mode.weight",
        "modules.0.weight",
        "lm_head.bias",
    ]
    result = candidate(original, "module.")
    if result is None:
        raise AssertionError("return the new dict (your function returned None; did it change the input in place?)")
    if list(original.items()) != before or any(a is not b for (_, a), (_, b) in zip(original.items(), before)):
        raise AssertionError("leave the input unchanged: build and return a new dict instead of editing state_dict")
    if result is original:
        raise AssertionError("return a new dict, not the input object itself")
    try:
        got = list(result.keys())
    except AttributeError as exc:
        raise AssertionError(f"return a dict (key -> tensor); got {type(result).__name__}") from exc
    if sorted(got) == sorted(want) and got != want:
        raise AssertionError("keep the keys in their original order (a state_dict is ordered)")
    for key, expected in zip(keys, want):
        if expected in got:
            continue
        plain = key.replace("module.", "")
        stripped = key.lstrip("module.")
        repeated = key
        while repeated.startswith("module."):
            repeated = repeated[len("module."):]
        # Checked before str.replace: both turn "module.module.bias" into "bias", but an answer using
        # replace has already failed on the key before it ("module.mlp.submodule.weight").
        if repeated in got and repeated != expected:
            raise Hint(
                f"{key!r} became {repeated!r}: the prefix was removed again and again while the key still "
                "started with it, but this model has a submodule really named 'module', so only the first "
                "occurrence is the wrapper's.",
                "Remove the prefix once per key: a single check of the start of the key, not a loop.",
            )
        if plain in got and plain != expected:
            raise Hint(
                f"{key!r} became {plain!r}: str.replace removes 'module.' everywhere in the key, also inside "
                f"names like 'submodule.'.",
                "Only a leading occurrence of the prefix may go; str has a method that removes exactly that.",
            )
        if stripped in got and stripped != expected:
            raise Hint(
                f"{key!r} became {stripped!r}: str.lstrip('module.') strips any of the characters m, o, d, u, "
                f"l, e and '.', not the word.",
                "Remove only a leading occurrence of the whole prefix; str has a method for that.",
            )
        if key == "modules.0.weight" and ".0.weight" in got:
            raise Hint(
                f"{key!r} became '.0.weight': the prefix was used as a regular expression, where '.' matches any "
                "character, so 'module.' also matched 'modules'.",
                "Compare the start of the key with the prefix as plain text (or re.escape it); str has a method "
                "that removes a leading plain-text prefix.",
            )
        if key[len("module."):] in got:
            raise AssertionError(
                f"{key!r} became {key[len('module.'):]!r}: only keys that start with the prefix may change"
            )
        raise AssertionError(f"expected the keys {want}, got {got}")
    if len(got) != len(want):
        raise AssertionError(f"expected {len(want)} keys {want}, got {len(got)}: {got}")
    for key, new_key in zip(keys, want):
        if result[new_key] is not original[key]:
            raise AssertionError(
                f"result[{new_key!r}] is a copy of the tensor; keep the very same tensor objects "
                "(copying doubles the memory of a large checkpoint)"
            )
    empty = candidate(OrderedDict(), "module.")
    assert empty is not None and len(empty) == 0, "an empty state_dict gives an empty result"
    other = candidate(OrderedDict(original), "_orig_mod.")
    assert list(other.keys()) == keys, (
        "with prefix '_orig_mod.' (what torch.compile adds) no key of this state_dict changes; "
        "use the prefix argument, not a hard-coded 'module.'"
    )
