"""Exercises of chapter 26: realistic wrong answers fail with a hint (the generic checks are in test_exercises.py)."""

from __future__ import annotations

import math

from helpers.exercises import check, hint, solution
from tests.exercise_support import assert_rejected

# --------------------------------------------------------------------------
# 26.local_shard_shapes
# --------------------------------------------------------------------------


def _with_sizes(shape, world, dim, sizes):
    if dim is None:
        return [tuple(shape)] * world
    return [tuple(n if i == dim else s for i, s in enumerate(shape)) for n in sizes]


def test_local_shard_shapes_floor_division_fails():
    def floor(shape, world, dim):
        return _with_sizes(shape, world, dim, [shape[dim] // world] * world if dim is not None else None)

    result = assert_rejected("26.local_shard_shapes", floor, "n // world", "remainder")
    assert "ceil" not in result.message, f"the first tier names the mistake, not the fix: {result.message}"


def test_local_shard_shapes_array_split_fails():
    def array_split(shape, world, dim):
        if dim is None:
            return [tuple(shape)] * world
        n = shape[dim]
        return _with_sizes(shape, world, dim, [n // world + (r < n % world) for r in range(world)])

    result = assert_rejected("26.local_shard_shapes", array_split, "array_split")
    assert "ceil" not in result.message, f"the first tier names the mistake, not the fix: {result.message}"
    fuller = hint("26.local_shard_shapes", show=False)
    assert "torch.chunk" in fuller and "ceil" not in fuller, f"the fuller hint points to torch.chunk's rule: {fuller}"


def test_local_shard_shapes_torch_chunk_without_empty_ranks_fails():
    import torch

    def chunked(shape, world, dim):
        if dim is None:
            return [tuple(shape)] * world
        return [tuple(c.shape) for c in torch.empty(shape).chunk(world, dim=dim)]

    assert_rejected("26.local_shard_shapes", chunked, "one shape per rank")


def test_local_shard_shapes_torch_chunk_with_empty_ranks_is_accepted():
    import torch

    def chunked(shape, world, dim):  # the task names torch.chunk's rule: using it, empty ranks added, is fine
        if dim is None:
            return [tuple(shape)] * world
        out = [tuple(c.shape) for c in torch.empty(shape, device="meta").chunk(world, dim=dim)]
        return out + [tuple(0 if i == dim else s for i, s in enumerate(shape))] * (world - len(out))

    assert check("26.local_shard_shapes", chunked, show=False).passed


def test_local_shard_shapes_without_empty_ranks_fails():
    def no_empty(shape, world, dim):
        if dim is None:
            return [tuple(shape)] * world
        n = shape[dim]
        chunk = -(-n // world)
        sizes = [min(chunk, n - r * chunk) for r in range(world) if n - r * chunk > 0]
        return _with_sizes(shape, len(sizes), dim, sizes)

    assert_rejected("26.local_shard_shapes", no_empty, "one shape per rank")


def test_local_shard_shapes_dtensor_shard_helper_is_a_shortcut():
    from torch.distributed.tensor import Shard

    def helper(shape, world, dim):
        if dim is None:
            return [tuple(shape)] * world
        sizes = [Shard(dim)._local_shard_size_and_offset(shape[dim], world, r)[0] for r in range(world)]
        return _with_sizes(shape, world, dim, sizes)

    assert_rejected("26.local_shard_shapes", helper, "yourself", "_local_shard_size_and_offset")


def test_local_shard_shapes_dtensor_static_helper_is_a_shortcut():
    from torch.distributed.tensor import Shard

    def static(shape, world, dim):
        if dim is None:
            return [tuple(shape)] * world
        sizes = [Shard.local_shard_size_and_offset(shape[dim], world, r)[0] for r in range(world)]
        return _with_sizes(shape, world, dim, sizes)

    assert_rejected("26.local_shard_shapes", static, "yourself", "local_shard_size_and_offset")
    assert isinstance(Shard.__dict__["local_shard_size_and_offset"], staticmethod)  # put back as it was
    assert Shard.local_shard_size_and_offset(5, 2, 1) == (2, 3)


def test_local_shard_shapes_dtensor_utils_is_a_shortcut():
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset

    def utils(shape, world, dim):
        if dim is None:
            return [tuple(shape)] * world
        return [tuple(_compute_local_shape_and_global_offset(shape, (world,), [r], [Shard(dim)])[0]) for r in range(world)]

    assert_rejected("26.local_shard_shapes", utils, "yourself", "compute_local_shape_and_global_offset")


def test_local_shard_shapes_sharding_replicate_fails():
    def replicate_sharded(shape, world, dim):
        return solution("26.local_shard_shapes")(shape, world, 0 if dim is None else dim)

    assert_rejected("26.local_shard_shapes", replicate_sharded, "full copy")


def test_local_shard_shapes_lists_fail():
    # the task asks for a list of tuples (one shape per rank, like x.shape); lists of lists are refused
    def as_lists(shape, world, dim):
        return [list(s) for s in solution("26.local_shard_shapes")(shape, world, dim)]

    assert_rejected("26.local_shard_shapes", as_lists, "should be a tuple of ints, got a list")


def test_local_shard_shapes_torch_sizes_are_accepted():
    import torch

    def as_sizes(shape, world, dim):
        return [torch.Size(s) for s in solution("26.local_shard_shapes")(shape, world, dim)]

    assert check("26.local_shard_shapes", as_sizes, show=False).passed


def test_local_shard_shapes_tuple_of_tuples_fails():
    def as_tuple(shape, world, dim):
        return tuple(solution("26.local_shard_shapes")(shape, world, dim))

    assert_rejected("26.local_shard_shapes", as_tuple, "should be a Python list, got tuple")


# --------------------------------------------------------------------------
# 26.per_rank_bytes
# --------------------------------------------------------------------------


def _elements(shapes, world, strategy):
    if strategy == "ddp":
        return sum(math.prod(s) for s in shapes)
    return sum(math.ceil(s[0] / world) * math.prod(s[1:]) for s in shapes)


def test_per_rank_bytes_params_only_fails():
    assert_rejected("26.per_rank_bytes", lambda shapes, world, strategy: 4 * _elements(shapes, world, strategy), "only the parameters")


def test_per_rank_bytes_without_optimizer_state_fails():
    assert_rejected("26.per_rank_bytes", lambda shapes, world, strategy: 8 * _elements(shapes, world, strategy), "exp_avg")


def test_per_rank_bytes_ignoring_padding_fails():
    def no_padding(shapes, world, strategy):
        total = 16 * sum(math.prod(s) for s in shapes)
        return total if strategy == "ddp" else total // world

    assert_rejected("26.per_rank_bytes", no_padding, "padding")


def test_per_rank_bytes_ddp_divided_by_world_fails():
    def ddp_sharded(shapes, world, strategy):
        return 16 * sum(math.ceil(s[0] / world) * math.prod(s[1:]) for s in shapes)

    assert_rejected("26.per_rank_bytes", ddp_sharded, "full model")


def test_per_rank_bytes_fsdp_like_ddp_fails():
    assert_rejected("26.per_rank_bytes", lambda shapes, world, strategy: 16 * sum(math.prod(s) for s in shapes), "DDP's figure")
