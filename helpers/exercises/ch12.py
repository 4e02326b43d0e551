"""Exercises of chapter 12 (regularisation and normalisation): checkers and reference solutions."""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

from . import Shortcut, exercise


@contextlib.contextmanager
def _forbidden(hint: str, *functions: tuple[object, str]):
    """While the candidate runs, make the library functions it should not use fail with ``hint``.

    ``functions`` are ``(module, name)`` pairs such as ``(F, "group_norm")``.
    The layers (``nn.GroupNorm``, ``nn.BatchNorm2d``) call these functions
    through their module at run time, so patching the module catches them too.
    """

    def refuse(*args, **kwargs):
        raise AssertionError(hint)

    saved = [(owner, name, getattr(owner, name)) for owner, name in functions]
    try:
        for owner, name, _ in saved:
            setattr(owner, name, refuse)
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)

# The library routes a candidate could use instead of writing the statistics out: the layers' functional
# forms and the ATen functions behind them (torch.native_batch_norm returns the batch mean and the inverse
# standard deviation; F.layer_norm or F.batch_norm on a reshaped tensor compute a group's statistics).
_BATCH_NORM_FUNCTIONS = (
    (F, "batch_norm"), (torch, "batch_norm"), (F, "instance_norm"), (torch, "instance_norm"),
    (torch, "native_batch_norm"), (torch, "_native_batch_norm_legit"), (F, "layer_norm"), (torch, "layer_norm"),
    (F, "group_norm"), (torch, "group_norm"), (torch, "native_group_norm"), (torch, "native_layer_norm"),
)
_GROUP_NORM_FUNCTIONS = _BATCH_NORM_FUNCTIONS


def _aten(*ops: str, does: str) -> tuple[Shortcut, ...]:
    """``reached=True`` shortcuts for the ATen operators ``ops`` (each stands for all its overloads too)."""
    return tuple(Shortcut(f"torch.ops.aten.{op}", reached=True, does=does.format(op=op))
                 for op in ops if hasattr(torch.ops.aten, op))


# The ATen kernels behind the library normalisations, refused however the answer reaches them (called
# through torch.ops.aten, or through a public function that dispatches to them): each computes a batch's or
# a group's statistics, or the whole normalisation, for the answer. The answers' own reductions
# (aten.mean, aten.var, aten.var_mean) are none of these.
_NORM_KERNELS = _aten(
    "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
    "_native_batch_norm_legit_functional", "_batch_norm_with_update", "_batch_norm_with_update_functional",
    "_batch_norm_no_update", "batch_norm_update_stats", "batch_norm_stats", "batch_norm_gather_stats",
    "batch_norm_elemt", "cudnn_batch_norm", "miopen_batch_norm", "native_group_norm", "native_layer_norm",
    "_fused_rms_norm",
    does="`torch.ops.aten.{op}` (a library normalisation's own kernel)",
)

# The same routes, and the kernels and layers that compute a normalisation's statistics for you, as the
# framework's shortcuts: they are refused however the answer reached them (an alias imported by name too).
_NORM_SHORTCUTS = (
    *(f"{owner.__name__}.{name}" for owner, name in _BATCH_NORM_FUNCTIONS),
    Shortcut("torch.batch_norm_update_stats", does="`torch.batch_norm_update_stats` (BatchNorm's own statistics kernel)"),
    Shortcut("torch.batch_norm_stats", does="`torch.batch_norm_stats` (BatchNorm's own statistics kernel)"),
    "torch.batch_norm_gather_stats", "torch.batch_norm_elemt",
    Shortcut("torch.nn.functional.rms_norm", does="`F.rms_norm` (a library normalisation)"),
    Shortcut("torch.rms_norm", does="`torch.rms_norm` (a library normalisation)"),
    Shortcut("torch.nn.RMSNorm", does="`nn.RMSNorm` (a library normalisation layer)"),
    Shortcut("torch.nn.functional.local_response_norm", does="`F.local_response_norm` (a library normalisation)"),
    Shortcut("torch.nn.LocalResponseNorm", does="`nn.LocalResponseNorm` (a library normalisation layer)"),
    *_NORM_KERNELS,
)

# --------------------------------------------------------------------------
# 12.inverted_dropout
# --------------------------------------------------------------------------


def _inverted_dropout(x: torch.Tensor, keep: torch.Tensor, p: float) -> torch.Tensor:
    """Inverted dropout with a given mask, as ``nn.Dropout(p)`` computes it in training mode.

    Args:
        x: float tensor of any shape.
        keep: bool tensor of the same shape; True where the element is kept.
        p: the drop probability, in [0, 1).

    Returns:
        A new tensor: ``x / (1 - p)`` where ``keep`` is True and 0 elsewhere,
        so that its expected value equals ``x`` (Srivastava et al. 2014, with
        the scaling moved from test time to training time). ``x`` is left unchanged.
    """
    return x * keep / (1 - p)


def _dropout_case(shape, p, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    keep = torch.rand(shape, generator=g) >= p
    return x, keep


# Dropout's own kernels: native_dropout_backward(x, keep, 1 / (1 - p)) and _masked_scale(x, keep, 1 / (1 - p))
# compute exactly this exercise's answer from a given mask, so every dropout kernel is refused, however reached.
_DROPOUT_SHORTCUTS = _aten(
    "native_dropout", "native_dropout_backward", "_masked_scale", "_fused_dropout", "dropout", "feature_dropout",
    "alpha_dropout", "feature_alpha_dropout",
    does="`torch.ops.aten.{op}` (one of dropout's own kernels)",
)


@exercise(
    "12.inverted_dropout",
    "return inverted dropout of x with the given bool keep-mask (True = kept) and drop probability p (0 <= p < 1): "
    "kept elements scaled by 1/(1 - p), dropped ones 0, as nn.Dropout(p) does in training mode; with tensor "
    "arithmetic, not the library's dropout kernels (torch.ops.aten.native_dropout_backward, torch._masked_scale, ...).",
    reference=_inverted_dropout,
    shortcuts=_DROPOUT_SHORTCUTS,
    goal="the dropout",
    hint="Inverted dropout zeroes the dropped elements and scales the kept ones up during training, so "
         "that each output's expected value equals its input (the Dropout section); p is the probability "
         "of dropping, not of keeping. The bool mask can act as a factor or in torch.where; build a new "
         "tensor of x's dtype and leave x alone.",
)
def _test_inverted_dropout(candidate) -> None:
    # A small p with a mask that drops some elements: the kept ones barely change, the dropped ones are 0.
    # (p = 0.0 with an all-True mask would accept returning x itself, so it is not a case.)
    cases = [((4, 5), 0.5, 0), ((3, 2, 7), 0.2, 1), ((64,), 0.9, 2), ((10, 10), 0.05, 3)]
    for shape, p, seed in cases:
        x, keep = _dropout_case(shape, p, seed)
        x_before, keep_before = x.clone(), keep.clone()
        got = candidate(x, keep, p)
        if not torch.equal(x, x_before) or not torch.equal(keep, keep_before):
            raise AssertionError("leave x and the mask unchanged: compute a new tensor instead of editing in place")
        if not isinstance(got, torch.Tensor) or got.shape != x.shape:
            raise AssertionError(f"return a tensor of x's shape {tuple(x.shape)}; got {got!r:.80}")
        if got.dtype != x.dtype:
            raise AssertionError(f"return a tensor of x's dtype {x.dtype}; got {got.dtype} (the bool mask must not "
                                 "change the dtype, and do not convert the result)")
        want = _inverted_dropout(x, keep, p)
        if torch.allclose(got, want):
            continue
        wrong = {
            "no scaling": x * keep,
            "scaled by 1/p": x * keep / p if p > 0 else None,
            "multiplied by (1 - p)": x * keep * (1 - p),
            "mask inverted": x * ~keep / (1 - p),
            "mask inverted, scaled by 1/p": x * ~keep / p if p > 0 else None,
        }
        hints = {
            "no scaling": "the kept elements must be divided by (1 - p), so that the expected value of each "
            "output equals its input; without it the layer's output shrinks by (1 - p) in training only",
            "scaled by 1/p": "p is the probability of DROPPING; the kept elements are scaled by 1/(1 - p), "
            "the inverse of the probability of keeping",
            "multiplied by (1 - p)": "multiplying by (1 - p) is the old, non-inverted dropout's test-time "
            "scaling; inverted dropout DIVIDES the kept elements by (1 - p) during training",
            "mask inverted": "the mask is True where an element is KEPT; you zeroed those instead",
            "mask inverted, scaled by 1/p": "the mask is True where an element is KEPT (you zeroed those), "
            "and the scale is 1/(1 - p)",
        }
        for label, value in wrong.items():
            if value is not None and torch.allclose(got, value):
                raise AssertionError(f"shape {shape}, p = {p}: {hints[label]}")
        raise AssertionError(
            f"shape {shape}, p = {p}: every element where the mask is True must be its input rescaled so that "
            "the expected value is unchanged, and every other element 0; the largest difference from that is "
            f"{(got - want).abs().max().item():.3g}"
        )


# --------------------------------------------------------------------------
# 12.bn_running_stats
# --------------------------------------------------------------------------


def _bn_running_stats(batches: list[torch.Tensor], momentum: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``running_mean`` and ``running_var`` of a fresh ``nn.BatchNorm2d`` after it saw ``batches`` in training mode.

    Args:
        batches: float tensors ``[N, C, H, W]`` (the same C), in the order seen.
        momentum: BatchNorm's ``momentum`` (default 0.1), or ``None`` for a
            cumulative (equal-weight) average.

    Returns:
        ``(running_mean, running_var)``, each float ``[C]``. They start at 0
        and 1; after each batch, with ``n = N * H * W`` values per channel,
        ``stat = (1 - momentum) * stat + momentum * batch_stat``, where the
        batch variance is the *unbiased* one (divided by ``n - 1``), as in
        ``torch.nn.BatchNorm2d``'s documentation. With ``momentum=None`` batch
        ``k`` (1-based) gets weight ``1 / k``.
    """
    channels = batches[0].shape[1]
    mean = torch.zeros(channels, dtype=batches[0].dtype)
    var = torch.ones(channels, dtype=batches[0].dtype)
    for k, x in enumerate(batches, start=1):
        weight = 1.0 / k if momentum is None else momentum
        mean = (1 - weight) * mean + weight * x.mean(dim=(0, 2, 3))
        var = (1 - weight) * var + weight * x.var(dim=(0, 2, 3), correction=1)
    return mean, var


def _bn_module_stats(batches, momentum):
    bn = nn.BatchNorm2d(batches[0].shape[1], momentum=momentum).to(batches[0].dtype).train()
    with torch.no_grad():
        for x in batches:
            bn(x)
    return bn.running_mean.clone(), bn.running_var.clone()


def _bn_variants(batches, momentum):
    """Common wrong answers, as (label, mean, var, hint)."""
    channels = batches[0].shape[1]
    m = 0.1 if momentum is None else momentum

    def run(mean_fn, var_fn, rule, start):
        mean = torch.zeros(channels, dtype=batches[0].dtype) if start else None
        var = torch.ones(channels, dtype=batches[0].dtype) if start else None
        for k, x in enumerate(batches, start=1):
            w = rule(k)
            bm, bv = mean_fn(x), var_fn(x)
            mean = bm if mean is None else (1 - w) * mean + w * bm
            var = bv if var is None else (1 - w) * var + w * bv
        return mean, var

    per_channel_mean = lambda x: x.mean(dim=(0, 2, 3))  # noqa: E731
    unbiased = lambda x: x.var(dim=(0, 2, 3), correction=1)  # noqa: E731
    biased = lambda x: x.var(dim=(0, 2, 3), correction=0)  # noqa: E731
    rule = (lambda k: 1.0 / k) if momentum is None else (lambda k: m)
    return [
        ("biased", *run(per_channel_mean, biased, rule, True),
         "BatchNorm normalises with the biased batch variance (divided by n), but stores the UNBIASED one "
         "(divided by n - 1) in running_var, because the running value estimates the variance of the whole data"),
        ("flipped", *run(per_channel_mean, unbiased, (lambda k: 1 - m), True),
         "PyTorch's BatchNorm momentum is the weight of the NEW batch: stat = (1 - momentum) * stat + "
         "momentum * batch_stat (the opposite of an optimizer's momentum)"),
        ("no start", *run(per_channel_mean, unbiased, rule, False),
         "the running statistics start at running_mean = 0 and running_var = 1, and the first batch is "
         "blended into those; it does not replace them"),
        ("axes", *run(lambda x: x.mean(dim=(0, 2, 3)), lambda x: x.flatten(2).var(dim=2, correction=1).mean(0), rule, True),
         "the batch variance is taken over all N * H * W values of a channel at once, not per image and "
         "then averaged (the mean of per-image variances leaves out how the image means differ)"),
        ("fixed momentum", *run(per_channel_mean, unbiased, (lambda k: 0.1), True),
         "momentum=None means a cumulative average: batch k (counting from 1) gets weight 1/k"),
    ]


@exercise(
    "12.bn_running_stats",
    "return (running_mean, running_var) of a fresh nn.BatchNorm2d after it has seen the given list of "
    "[N, C, H, W] batches in training mode with the given momentum (None = cumulative average); do not use nn.BatchNorm, "
    "its kernels (torch.batch_norm_update_stats, torch.ops.aten._native_batch_norm_legit, ...) or another "
    "library normalisation.",
    reference=_bn_running_stats,
    shortcuts=_NORM_SHORTCUTS,
    goal="the running statistics",
    hint="Start from a fresh BatchNorm's buffers (mean 0, variance 1) and blend in each batch's "
         "per-channel statistics, taken over N, H and W together, with momentum as the weight of the NEW "
         "batch, the opposite of an optimizer's momentum (section 'BatchNorm and its running statistics'). "
         "running_var stores the unbiased batch variance (Bessel's correction), and momentum=None gives "
         "the k-th batch the weight of a plain cumulative average.",
)
def _test_bn_running_stats(candidate) -> None:
    g = torch.Generator().manual_seed(12)

    def batches(k, n, c, h, w, shift):
        return [torch.randn(n, c, h, w, generator=g, dtype=torch.float64) * (1 + j) + shift * j for j in range(k)]

    cases = [
        ("three batches [4, 3, 2, 2], momentum 0.1", batches(3, 4, 3, 2, 2, 2.0), 0.1),
        ("one batch [2, 5, 3, 3], momentum 0.3", batches(1, 2, 5, 3, 3, 0.0), 0.3),
        ("four batches [3, 2, 2, 1], momentum None", batches(4, 3, 2, 2, 1, 1.0), None),
    ]
    for label, data, momentum in cases:
        copies = [x.clone() for x in data]
        with _forbidden("compute the statistics yourself with tensor.mean and tensor.var; do not run nn.BatchNorm2d, "
                        "F.batch_norm or another library normalisation (the checker compares with them)", *_BATCH_NORM_FUNCTIONS):
            result = candidate(copies, momentum)
        try:
            mean, var = result
        except (TypeError, ValueError) as exc:
            raise AssertionError(f"return a pair (running_mean, running_var); got {result!r:.80}") from exc
        want_mean, want_var = _bn_module_stats(data, momentum)
        for name, got, want in (("running_mean", mean, want_mean), ("running_var", var, want_var)):
            if not isinstance(got, torch.Tensor) or got.shape != want.shape:
                raise AssertionError(f"{label}: {name} should be a tensor of shape {tuple(want.shape)} (one value per channel)")
            if got.dtype != data[0].dtype:
                raise AssertionError(f"{label}: {name} should have the batches' dtype {data[0].dtype} (the buffers of "
                                     f"a BatchNorm2d moved to that dtype); got {got.dtype}")
        if torch.allclose(mean, want_mean) and torch.allclose(var, want_var):
            continue
        for _, v_mean, v_var, hint in _bn_variants(data, momentum):
            if torch.allclose(mean, v_mean) and torch.allclose(var, v_var):
                raise AssertionError(f"{label}: {hint}")
        which = "running_mean" if not torch.allclose(mean, want_mean) else "running_var"
        raise AssertionError(
            f"{label}: your {which} differs from nn.BatchNorm2d's. Expected running_mean "
            f"{[round(v, 4) for v in want_mean.tolist()]} and running_var {[round(v, 4) for v in want_var.tolist()]}"
        )


# --------------------------------------------------------------------------
# 12.group_norm
# --------------------------------------------------------------------------


def _group_norm(x: torch.Tensor, num_groups: int, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Group normalisation written out; equals ``F.group_norm(x, num_groups, weight, bias, eps)``.

    Args:
        x: float ``[N, C, *]`` (any number of spatial dimensions, also none).
        num_groups: G, which divides C; group g holds the consecutive channels
            ``g * C/G ... (g + 1) * C/G - 1``.
        weight, bias: float ``[C]``, a scale and a shift per channel.
        eps: added to the variance.

    Returns:
        ``[N, C, *]``: each (sample, group) normalised with its own mean and
        *biased* variance over its channels and positions (Wu & He 2018),
        then ``* weight + bias`` per channel.
    """
    n, c = x.shape[:2]
    groups = x.reshape(n, num_groups, -1)  # [N, G, C/G * positions]
    mean = groups.mean(dim=-1, keepdim=True)
    var = groups.var(dim=-1, keepdim=True, correction=0)
    normed = ((groups - mean) / torch.sqrt(var + eps)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return normed * weight.reshape(shape) + bias.reshape(shape)


@exercise(
    "12.group_norm",
    "write group_norm(x, num_groups, weight, bias, eps=1e-5) for x [N, C, *] without nn.GroupNorm, "
    "F.group_norm or another library normalisation (F.layer_norm, F.rms_norm, nn.RMSNorm, ...) or their kernels "
    "(torch.ops.aten.native_group_norm, native_layer_norm, the batch-norm ones, ...); it must equal "
    "F.group_norm(x, num_groups, weight, bias, eps).",
    reference=_group_norm,
    shortcuts=_NORM_SHORTCUTS,
    goal="the normalisation",
    hint="Consecutive channels sit next to each other in memory, so a reshape to [N, G, rest] puts each "
         "sample's group, its channels and all their positions, in one row. Normalise each row with its "
         "own mean and biased variance, adding eps to the variance inside the square root, reshape back to "
         "x's shape, and only then apply weight and bias per channel, shaped so they broadcast over the "
         "positions.",
)
def _test_group_norm(candidate) -> None:
    g = torch.Generator().manual_seed(21)
    cases = [  # (label, shape, groups)
        ("x [2, 6, 3, 4], 3 groups", (2, 6, 3, 4), 3),
        ("x [3, 8, 5], 2 groups (one spatial dimension)", (3, 8, 5), 2),
        ("x [2, 4, 2, 2], 1 group (like LayerNorm over C, H, W)", (2, 4, 2, 2), 1),
        ("x [2, 4, 3, 3], 4 groups (like InstanceNorm)", (2, 4, 3, 3), 4),
        ("x [4, 6], 2 groups (no spatial dimensions)", (4, 6), 2),
        ("x [2, 6, 3, 3] * 1e-3, 3 groups (variance below eps: eps matters)", (2, 6, 3, 3), 3),
    ]
    for label, shape, groups in cases:
        scale = 3e-3 if "1e-3" in label else 3.0
        x = torch.randn(shape, generator=g, dtype=torch.float64) * scale + scale / 3
        weight = torch.rand(shape[1], generator=g, dtype=torch.float64) + 0.5
        bias = torch.randn(shape[1], generator=g, dtype=torch.float64)
        before = x.clone()
        with _forbidden("write the normalisation yourself (reshape, mean, var); do not call nn.GroupNorm, "
                        "F.group_norm or another library normalisation such as F.layer_norm on a reshape", *_GROUP_NORM_FUNCTIONS):
            got = candidate(x, groups, weight, bias, 1e-5)
        if not torch.equal(x, before):
            raise AssertionError("leave x unchanged: compute a new tensor instead of editing in place")
        if not isinstance(got, torch.Tensor) or got.shape != x.shape:
            raise AssertionError(f"{label}: return a tensor of x's shape {tuple(shape)}; got {got!r:.80}")
        if got.dtype != x.dtype:
            raise AssertionError(f"{label}: return a tensor of x's dtype {x.dtype}, as F.group_norm does; got {got.dtype}")
        want = F.group_norm(x, groups, weight, bias, 1e-5)
        if torch.allclose(got, want, atol=1e-6):
            continue
        n, c = shape[:2]
        interleaved = F.group_norm(
            x.reshape(n, c // groups, groups, *shape[2:]).transpose(1, 2).reshape(shape), groups
        ).reshape(n, groups, c // groups, *shape[2:]).transpose(1, 2).reshape(shape)
        flat = x.reshape(n, groups, -1)
        per_shape = (1, c) + (1,) * (x.ndim - 2)
        unbiased = ((flat - flat.mean(-1, keepdim=True)) / torch.sqrt(flat.var(-1, keepdim=True, correction=1) + 1e-5)).reshape(shape)
        pooled = flat.transpose(0, 1).reshape(groups, -1)  # [G, N * C/G * positions]
        across_batch = (
            (flat - pooled.mean(-1).view(1, groups, 1)) / torch.sqrt(pooled.var(-1, correction=0).view(1, groups, 1) + 1e-5)
        ).reshape(shape)
        centred = flat - flat.mean(-1, keepdim=True)
        biased_std = torch.sqrt(flat.var(-1, keepdim=True, correction=0))
        no_eps = (centred / biased_std).reshape(shape)
        eps_outside = (centred / (biased_std + 1e-5)).reshape(shape)
        wrong = {
            "eps is missing: when a group's variance is tiny (here below eps) the division blows the values up; "
            "eps is added to the variance before the square root": no_eps * weight.reshape(per_shape) + bias.reshape(per_shape),
            "eps belongs inside the square root, added to the variance, not added to the standard deviation":
            eps_outside * weight.reshape(per_shape) + bias.reshape(per_shape),
            "the variance must be the biased one (divide by the number of values, correction=0), as "
            "F.group_norm does; you used the unbiased variance": unbiased * weight.reshape(per_shape) + bias.reshape(per_shape),
            "you forgot to apply weight and bias (per channel: normalised * weight + bias)": F.group_norm(x, groups, eps=1e-5),
            "a group is made of CONSECUTIVE channels (group 0 is channels 0 .. C/G - 1); your grouping put "
            "channels c, c + G, c + 2G, ... together": interleaved * weight.reshape(per_shape) + bias.reshape(per_shape),
            "the statistics of a group include all its channels AND positions of one sample; you normalised each "
            "channel on its own (that is InstanceNorm)": F.group_norm(x, c, weight, bias, 1e-5),
            "the statistics are per sample: do not pool the batch dimension N into a group's mean and "
            "variance": across_batch * weight.reshape(per_shape) + bias.reshape(per_shape),
        }
        for hint, value in wrong.items():
            if value is not None and torch.allclose(got, value, atol=1e-6):
                raise AssertionError(f"{label}: {hint}")
        raise AssertionError(
            f"{label}: your output differs from F.group_norm by up to {(got - want).abs().max().item():.3g}"
        )
