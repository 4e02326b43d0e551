"""Exercises of chapter 26 (FSDP2, tensor parallelism, distributed checkpoints): checkers and references."""

from __future__ import annotations

import contextlib
import math

import torch

from . import Hint, Shortcut, exercise, expect_type
from .guards import ShortcutUsed

# --------------------------------------------------------------------------
# 26.local_shard_shapes
# --------------------------------------------------------------------------


def _local_shard_shapes(shape: tuple[int, ...], world_size: int, dim: int | None) -> list[tuple[int, ...]]:
    """The local shape each rank holds when a tensor of ``shape`` is distributed over a 1-D mesh.

    Args:
        shape: the global shape, e.g. ``(5, 4)``.
        world_size: ranks in the mesh.
        dim: ``d`` for ``Shard(d)``, ``None`` for ``Replicate()``.

    Returns:
        One tuple per rank, in rank order. ``Shard(d)`` splits dimension ``d``
        like ``torch.chunk``: every rank gets ``ceil(n / world_size)`` rows of
        it except at the end, where the last ranks get fewer, possibly zero
        (DTensor's ``Shard`` placement). ``Replicate()`` gives every rank the
        whole shape.
    """
    if dim is None:
        return [tuple(shape) for _ in range(world_size)]
    n = shape[dim]
    chunk = math.ceil(n / world_size)
    shapes = []
    for rank in range(world_size):
        size = max(0, min(chunk, n - rank * chunk))
        shapes.append(tuple(size if i == dim else s for i, s in enumerate(shape)))
    return shapes


def _as_shapes(value, label) -> list[tuple[int, ...]]:
    """The answer, checked to be what the task states: a list with one tuple of ints per rank."""
    expect_type(value, list, f"{label}: your result")
    for shape in value:
        if not isinstance(shape, tuple):
            raise Hint(f"{label}: each rank's shape should be a tuple of ints, got a {type(shape).__name__} ({shape!r}).",
                       "A shape is a tuple, like x.shape or torch.Size; tuple(...) makes one from a list.")
        odd = next((s for s in shape if not isinstance(s, int) or isinstance(s, bool)), None)
        if odd is not None:
            raise Hint(f"{label}: the shape {shape!r} should hold Python ints, but it holds a {type(odd).__name__}.",
                       "Sizes are plain Python ints, as in x.shape; int(...) turns a number into one.")
    return [tuple(shape) for shape in value]


# DTensor's own placement helpers compute the local sizes: refused. torch.chunk is not: the task names its rule,
# and the trap (one shape per rank, empty shards included) stays the learner's. lazy=True: torch.distributed.tensor
# is imported only when this exercise is checked, not when every chapter's exercises are registered.
_SHARD_HELPERS = (
    "torch.distributed.tensor.Shard._local_shard_size_and_offset",
    "torch.distributed.tensor.Shard._split_tensor",
    "torch.distributed.tensor._utils.compute_local_shape_and_global_offset",
    "torch.distributed.tensor._utils._compute_local_shape_and_global_offset",
)
_LOCAL_SHAPE_SHORTCUTS = tuple(Shortcut(name, lazy=True) for name in (_SHARD_HELPERS if torch.distributed.is_available() else ()))
#: Static methods of Shard, which the shortcut guard does not rebind: every DTensor route to the local
#: sizes goes through one of them, so any call during the answer is refused (see _no_shard_statics).
_SHARD_STATICS = ("local_shard_size_and_offset", "_custom_chunk", "_split_tensor_helper")


@contextlib.contextmanager
def _no_shard_statics():
    """Record calls of Shard's static split helpers while the answer runs; refuse the answer if it reached one."""
    if not torch.distributed.is_available():
        yield
        return
    from torch.distributed.tensor import Shard

    called: list[str] = []
    saved = {name: Shard.__dict__[name] for name in _SHARD_STATICS if isinstance(Shard.__dict__.get(name), staticmethod)}

    def recorder(name, fn):
        def record(*args, **kwargs):
            called.append(name)
            return fn(*args, **kwargs)
        return staticmethod(record)

    for name, original in saved.items():
        setattr(Shard, name, recorder(name, original.__func__))
    try:
        yield
    finally:
        for name, original in saved.items():
            setattr(Shard, name, original)
    if called:
        raise ShortcutUsed(f"this exercise asks you to write the local shard shapes yourself; `Shard.{called[0]}`, "
                           "which your code reached through DTensor's placement helpers, does it for you.")


@exercise(
    "26.local_shard_shapes",
    "given a global shape, a world size and a placement (dim=d for Shard(d), dim=None for Replicate()), "
    "return the local shape on each rank, as a list of tuples of ints in rank order (DTensor splits like "
    "torch.chunk). DTensor's own placement helpers (Shard's methods, compute_local_shape_and_global_offset) are "
    "refused.",
    reference=_local_shard_shapes,
    shortcuts=_LOCAL_SHAPE_SHORTCUTS,
    goal="the local shard shapes",
    hint="Shard(d) splits dimension d the way torch.chunk does, as the five rows on two ranks showed: "
         "every rank gets the rounded-up share until the rows run out, so the last ranks may get fewer "
         "rows or none, while every other dimension stays whole. Return one tuple per rank, empty shards "
         "included; Replicate() gives every rank the full shape.",
)
def _test_local_shard_shapes(candidate) -> None:
    cases = [
        ((6, 4), 2, 0),
        ((5, 4), 2, 0),
        ((5, 4), 2, 1),
        ((5, 4), 2, None),
        ((5, 4), 4, 0),  # chunks of 2: 2, 2, 1, 0
        ((10, 3), 4, 0),  # chunks of 3: 3, 3, 3, 1
        ((3, 7, 2), 8, 1),
        ((2, 3), 4, 0),  # more ranks than rows
    ]
    for shape, world, dim in cases:
        label = f"shape {shape}, world size {world}, " + ("Replicate()" if dim is None else f"Shard({dim})")
        want = _local_shard_shapes(shape, world, dim)
        with _no_shard_statics():
            answer = candidate(shape, world, dim)
        got = _as_shapes(answer, label)
        if got == want:
            continue
        if len(got) != world:
            raise AssertionError(f"{label}: return one shape per rank ({world} of them), also for ranks whose shard is empty; got {len(got)}")
        if dim is not None and [s[dim] for s in got] == [shape[dim] // world + (r < shape[dim] % world) for r in range(world)]:
            raise Hint(f"{label}: your sizes differ by at most one from rank to rank, like numpy.array_split or a "
                       f"round-robin deal; DTensor's Shard does not split that way. Expected {want}, got {got}",
                       "Shard(d) splits the way torch.chunk does: look up torch.chunk's rule for the size of each "
                       "chunk, and what it leaves for the last ranks when the rows run out.")
        if dim is not None and all(s[dim] == shape[dim] // world for s in got):
            raise Hint(f"{label}: every rank got n // world rows, so the remainder rows are lost "
                       f"(the pieces no longer add up to {shape[dim]}). Expected {want}, got {got}",
                       "No row may be dropped: Shard(d) splits like torch.chunk, so see how torch.chunk sizes its "
                       "chunks when n does not divide evenly.")
        if dim is None:
            raise AssertionError(f"{label}: Replicate() gives every rank a full copy: expected {want}, got {got}")
        raise AssertionError(f"{label}: expected {want}, got {got}")


# --------------------------------------------------------------------------
# 26.per_rank_bytes
# --------------------------------------------------------------------------


def _per_rank_bytes(shapes: list[tuple[int, ...]], world_size: int, strategy: str) -> int:
    """Bytes that rank 0 holds for training with AdamW in float32, under DDP or FSDP.

    Args:
        shapes: the model's parameter shapes, e.g. ``[(256, 784), (256,)]``.
        world_size: ranks.
        strategy: ``"ddp"`` (every rank a full replica) or ``"fsdp"``
            (``fully_shard``: each parameter split on dim 0 like ``Shard(0)``;
            rank 0 holds ``ceil(shape[0] / world_size)`` rows of each).

    Returns:
        An int: 4 bytes per element each for the parameter, its gradient and
        AdamW's two moment buffers (``exp_avg``, ``exp_avg_sq``): 16 bytes per
        element held. AdamW's scalar ``step`` counters are ignored.
    """
    if strategy == "ddp":
        elements = sum(math.prod(s) for s in shapes)
    elif strategy == "fsdp":
        elements = sum(math.ceil(s[0] / world_size) * math.prod(s[1:]) for s in shapes)
    else:
        raise ValueError(f"strategy must be 'ddp' or 'fsdp', got {strategy!r}")
    return 16 * elements


@exercise(
    "26.per_rank_bytes",
    "return the bytes rank 0 holds when training with AdamW in float32 (parameters + gradients + exp_avg + "
    "exp_avg_sq) for parameter shapes `shapes`, `world_size` ranks and strategy 'ddp' or 'fsdp' "
    "(FSDP shards each parameter on dim 0 like Shard(0)).",
    reference=_per_rank_bytes,
    hint="Count the elements that rank 0 holds, then four float32 tensors for each of them: the parameter, "
         "its gradient and AdamW's two moments. Under DDP every rank holds the whole model; under FSDP "
         "rank 0 holds its Shard(0) piece of each parameter, by the rule of exercise 26.1, and since rank "
         "0's piece is the largest, dividing the total by world_size undercounts when dim 0 does not "
         "divide evenly.",
)
def _test_per_rank_bytes(candidate) -> None:
    mlp = [(256, 784), (256,), (128, 256), (128,), (10, 128), (10,)]  # the chapter's MLP
    odd = [(10, 3), (10,), (5, 10), (5,)]  # dim 0 not divisible by 4: padding shows
    cases = [(odd, 4, "ddp"), (odd, 4, "fsdp"), (mlp, 2, "ddp"), (mlp, 2, "fsdp"), (mlp, 8, "fsdp")]
    for shapes, world, strategy in cases:
        label = f"{strategy} on {world} ranks with shapes {shapes}"
        want = _per_rank_bytes(shapes, world, strategy)
        got = candidate([tuple(s) for s in shapes], world, strategy)
        if isinstance(got, float) and got.is_integer():
            got = int(got)
        if not isinstance(got, int) or isinstance(got, bool):
            raise AssertionError(f"{label}: return an int number of bytes, got {got!r}")
        if got == want:
            continue
        if strategy == "ddp" and got == _per_rank_bytes(shapes, world, "fsdp"):
            raise AssertionError(f"{label}: under DDP every rank holds the full model, gradients and optimizer state; "
                                 f"the world size does not shrink it")
        elements = want // 16
        if got == 4 * elements:
            raise AssertionError(f"{label}: you counted only the parameters ({got} bytes); training also holds a "
                                 f"gradient and AdamW's exp_avg and exp_avg_sq of the same size: 16 bytes per element")
        if got == 12 * elements:
            raise AssertionError(f"{label}: 12 bytes per element is one tensor short: parameter, gradient, exp_avg "
                                 f"and exp_avg_sq are four float32 tensors, 16 bytes per element")
        if got == 8 * elements:
            raise AssertionError(f"{label}: parameters and gradients only; add AdamW's two moment buffers (exp_avg, exp_avg_sq)")
        if strategy == "fsdp":
            total = sum(math.prod(s) for s in shapes)
            if got == 16 * total:
                raise AssertionError(f"{label}: that is DDP's figure; FSDP keeps only a 1/world_size shard of each tensor per rank")
            if got in (16 * total // world, round(16 * total / world)):
                raise AssertionError(f"{label}: total / world_size ignores padding: Shard(0) gives rank 0 "
                                     f"ceil(shape[0] / world_size) rows of each parameter (a 10-row weight on 4 ranks: 3 rows)")
        if strategy == "ddp" and got < 16 * sum(math.prod(s) for s in shapes):
            raise AssertionError(f"{label}: under DDP every rank holds the full model, gradients and optimizer state; "
                                 f"the world size does not shrink it")
        raise AssertionError(f"{label}: expected {want} bytes, got {got}")
