"""Exercises of chapter 00 (environment): ``00.seed_all`` and ``00.to_device``."""

from __future__ import annotations

import random
from collections.abc import Callable

import torch

from . import exercise

# --------------------------------------------------------------------------
# 00.seed_all
# --------------------------------------------------------------------------


def _seed_all_reference(seed: int) -> None:
    """Seed Python's ``random`` and torch's global generator with ``seed``."""
    random.seed(seed)
    torch.manual_seed(seed)


def _draws() -> tuple[list[float], list[float]]:
    """Three numbers from torch's global generator and three from ``random``."""
    return torch.rand(3).tolist(), [random.random() for _ in range(3)]


#: Seeds that must all give different numbers, neighbours among them.
_DISTINCT_SEEDS = (123, 124, 7, 0, 1, 2024)


@exercise(
    "00.seed_all",
    "write seed_all(seed) so that, after calling it, torch.rand and random.random "
    "give the same numbers for the same seed and different numbers for different seeds.",
    _seed_all_reference,
)
def _test_seed_all(seed_all: Callable[[int], None]) -> None:
    # Leave the learner's random streams as they were before the check.
    torch_state, py_state = torch.get_rng_state(), random.getstate()
    try:
        seed_all(123)
        torch_a, py_a = _draws()
        # Use up some numbers in between, as real code would.
        torch.rand(10)
        random.random()
        seed_all(123)
        torch_b, py_b = _draws()
        # Several seeds, neighbours among them: each must give its own numbers
        # (seed // 100 or seed % 2 would map several of them to one stream).
        draws = {}
        for seed in _DISTINCT_SEEDS:
            seed_all(seed)
            draws[seed] = _draws()
    finally:
        torch.set_rng_state(torch_state)
        random.setstate(py_state)
    assert torch_a == torch_b, (
        "torch.rand gave different numbers after seed_all(123) twice: "
        "seed torch's global generator with torch.manual_seed(seed)."
    )
    assert py_a == py_b, (
        "random.random gave different numbers after seed_all(123) twice: "
        "Python's random module has its own generator; seed it with random.seed(seed)."
    )
    for index, which, call in ((0, "torch.rand", "torch.manual_seed"), (1, "random.random", "random.seed")):
        streams: dict[tuple, list[int]] = {}
        for seed, got in draws.items():
            streams.setdefault(tuple(got[index]), []).append(seed)
        if len(streams) == 1:
            raise AssertionError(
                f"seed_all gave the same {which} numbers for the seeds {list(_DISTINCT_SEEDS)}: "
                f"pass the seed argument to {call} instead of a fixed number."
            )
        for seeds in streams.values():
            if len(seeds) > 1:
                raise AssertionError(
                    f"seed_all({seeds[0]}) and seed_all({seeds[1]}) gave the same {which} numbers: every "
                    f"seed should give its own numbers, so pass the seed on to {call} unchanged."
                )


# --------------------------------------------------------------------------
# 00.to_device
# --------------------------------------------------------------------------


def _to_device_reference(batch, device):
    """Move every tensor inside ``batch`` to ``device``; keep everything else as is.

    ``batch`` may nest dicts, lists and tuples; each container comes back as
    the same type (a new container: the input is not modified).
    """
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {key: _to_device_reference(value, device) for key, value in batch.items()}
    if isinstance(batch, list):
        return [_to_device_reference(item, device) for item in batch]
    if isinstance(batch, tuple):
        return tuple(_to_device_reference(item, device) for item in batch)
    return batch


def _example_batch():
    """A nested batch as a DataLoader with a custom collate_fn might yield it.

    Its numbers come from a private generator, so building it leaves torch's
    global random stream alone.
    """
    image = torch.rand(2, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    label = torch.tensor([3, 1])
    mask = torch.tensor([[True, False], [True, True]])
    ids = ["a-17", "b-04"]
    batch = {
        "image": image,
        "target": {"label": label, "weight": 0.5},
        "extras": [mask, "note", 3],
        "pair": (torch.zeros(3, dtype=torch.float64), None),
        "ids": ids,
    }
    return batch


def _compare(got, want, where: str, device: torch.device) -> None:
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{where} should be a tensor, got {type(got).__name__}"
        assert got.device.type == device.type, (
            f"{where} is on {got.device}, expected {device}: call .to(device) with the device argument "
            "you were given on every tensor you find, also those nested inside lists, tuples and dicts."
        )
        assert got.shape == want.shape and got.dtype == want.dtype, (
            f"{where} changed from shape {tuple(want.shape)} {want.dtype} to {tuple(got.shape)} {got.dtype}: "
            "only the device should change."
        )
        return
    if isinstance(want, dict):
        assert isinstance(got, dict), f"{where} should stay a dict, got {type(got).__name__}"
        assert list(got) == list(want), f"{where} should keep the keys {list(want)}, got {list(got)}"
        for key in want:
            _compare(got[key], want[key], f"{where}[{key!r}]", device)
        return
    if isinstance(want, (list, tuple)):
        kind = type(want).__name__
        assert type(got) is type(want), (
            f"{where} should stay a {kind}, got {type(got).__name__}: "
            "rebuild each container with its own type (a tuple stays a tuple)."
        )
        assert len(got) == len(want), f"{where} should keep its {len(want)} items, got {len(got)}"
        for i, (g, w) in enumerate(zip(got, want)):
            _compare(g, w, f"{where}[{i}]", device)
        return
    got_text = repr(got) if type(got) is type(want) else f"a {type(got).__name__}"
    assert got is want, (
        f"{where} is {want!r}, not a tensor, and should come back untouched (the same object), got {got_text}. "
        "Return anything that is not a tensor, dict, list or tuple as it is (a str is a sequence too: "
        "do not loop over it)."
    )


def _snapshot(obj):
    """The same nesting of new containers around the very same leaves."""
    if isinstance(obj, dict):
        return {key: _snapshot(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_snapshot(item) for item in obj)
    return obj


def _unchanged(now, before, where: str) -> None:
    """Raise if the learner's function modified its input ``before`` in place."""
    hint = (
        f"your function changed its input in place ({where}): build and return new containers "
        "instead, because the caller may still need the CPU batch."
    )
    if isinstance(before, dict):
        assert isinstance(now, dict) and list(now) == list(before), hint
        for key in before:
            _unchanged(now[key], before[key], f"{where}[{key!r}]")
    elif isinstance(before, (list, tuple)):
        assert type(now) is type(before) and len(now) == len(before), hint
        for i, (n, b) in enumerate(zip(now, before)):
            _unchanged(n, b, f"{where}[{i}]")
    else:
        assert now is before, hint
        if isinstance(before, torch.Tensor):
            assert before.device.type == "cpu", hint


@exercise(
    "00.to_device",
    "write to_device(batch, device) that returns a copy of batch, a tensor or a dict/list/tuple "
    "nesting tensors and other values, with every tensor moved to device and everything else unchanged.",
    _to_device_reference,
)
def _test_to_device(to_device: Callable) -> None:
    # The meta device exists on every machine and is never the tensors' own
    # device, so returning the input unchanged cannot pass.
    meta = torch.device("meta")
    single = torch.arange(3)
    moved = to_device(single, meta)
    assert moved is not None, "to_device returned None: return the moved tensor or batch."
    _compare(moved, single, "to_device(tensor, device)", meta)

    batch = _example_batch()
    before = _snapshot(batch)
    result = to_device(batch, meta)
    assert result is not None, "to_device returned None: return the moved batch."
    _compare(result, before, "batch", meta)
    _unchanged(batch, before, "batch")

    # Now to the CPU, given as a string, with float64 tensors: an answer that ignores
    # `device` (always "meta", say) or changes the dtype cannot pass.
    cpu = torch.device("cpu")
    batch = {"x": torch.linspace(0, 1, 5, dtype=torch.float64), "pair": (torch.eye(2, dtype=torch.float64), "id")}
    before = _snapshot(batch)
    result = to_device(batch, "cpu")
    assert result is not None, "to_device returned None: return the moved batch."
    _compare(result, before, 'batch (to "cpu")', cpu)
    _unchanged(batch, before, "batch")
