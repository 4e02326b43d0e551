"""Exercises of chapter 00 (environment): ``00.seed_all`` and ``00.to_device``."""

from __future__ import annotations

import importlib
import random
from collections import namedtuple
from collections.abc import Callable

import numpy as np
import torch

from . import Hint, exercise
from .guards import Shortcut

# --------------------------------------------------------------------------
# 00.seed_all
# --------------------------------------------------------------------------


def _seed_all_reference(seed: int) -> None:
    """Seed Python's ``random``, NumPy's global generator and torch's global generator with ``seed``."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _draws() -> tuple[list[float], list[float], list[float]]:
    """Three numbers each from torch's global generator, ``random`` and NumPy's global ``np.random``."""
    return torch.rand(3).tolist(), [random.random() for _ in range(3)], np.random.rand(3).tolist()


#: Seeds that must all give different numbers: neighbours (123, 124), 0 and 1, and seeds that
#: agree in their lowest 8 bits (44 and 300), 16 bits (300 and 300 + 2**16) and 30 bits
#: (300 and 300 + 2**30), so that shrinking the seed (seed & 0xFF, seed % 2**16) shows.
#: All stay below 2**32: torch's CPU generator (a Mersenne Twister, mt19937) keeps only the
#: lowest 32 bits of a seed (CUDA's Philox generator keeps 64).
_DISTINCT_SEEDS = (123, 124, 7, 0, 1, 2024, 44, 300, 300 + 2**16, 300 + 2**30)

#: Seeds whose streams must be exactly those of a fresh generator seeded with them; the last
#: two lie in [2**31, 2**32), so that ``seed % 2**31`` (or a signed 32-bit cast) shows too.
#: NumPy's legacy ``np.random.seed`` accepts exactly this range, [0, 2**32).
_REFERENCE_SEEDS = (0, 5, 1009 + 5, 2**31 + 5, 2**32 - 2)

#: Which generator each part of ``_draws`` comes from, and the family of calls that seeds it
#: (the fuller hint names the family, not the call: finding it is part of the exercise).
_STREAMS = ((0, "torch.rand(3)", "torch's global generator", "torch's own seeding function"),
            (1, "random.random()", "Python's random module", "the random module's own seeding function"),
            (2, "np.random.rand(3)", "NumPy's global generator", "the seeding function of NumPy's global generator"))

#: What the fuller hint adds when a stream does not repeat: the trap that each one sets.
_NOT_REPEATING = {
    2: " The legacy np.random functions (np.random.rand, ...) share that one global generator; "
       "np.random.default_rng(seed) makes a new, separate Generator and leaves the global one as it was.",
}


def _reference_draws(seed: int) -> tuple[list[float], list[float], list[float]]:
    """What a fresh torch.Generator, random.Random and np.random.RandomState seeded with ``seed`` give first."""
    fresh = random.Random(seed)
    return (torch.rand(3, generator=torch.Generator().manual_seed(seed)).tolist(),
            [fresh.random() for _ in range(3)],
            np.random.RandomState(seed).rand(3).tolist())


def _short(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.4f}" for v in values) + "]"


def _agreeing_low_bits(a: int, b: int) -> int:
    """How many of the lowest bits two different seeds share (44 and 300 share 8)."""
    diff = a ^ b
    return (diff & -diff).bit_length() - 1


#: The same job done by Lightning (installed with the course). Lazy: importing lightning takes
#: seconds, and a learner who never imported it cannot be calling it (see helpers.exercises.guards).
_LIGHTNING_SEEDING = tuple(
    Shortcut(name, lazy=True)
    for name in ("lightning.seed_everything", "lightning.fabric.seed_everything", "lightning.pytorch.seed_everything",
                 "lightning.fabric.utilities.seed.seed_everything", "lightning_fabric.seed_everything",
                 "lightning_fabric.utilities.seed.seed_everything", "pytorch_lightning.seed_everything")
)

#: timm (installed with the course, for chapter 13's weights) seeds the same three generators.
_TIMM_SEEDING = tuple(Shortcut(name, lazy=True) for name in ("timm.utils.random_seed", "timm.utils.random.random_seed"))


@exercise(
    "00.seed_all",
    "write seed_all(seed) that seeds torch's global generator, Python's random module and NumPy's global "
    "generator (np.random) with seed itself: afterwards torch.rand, random.random and np.random.rand give "
    "exactly what a fresh generator seeded with seed gives, so the same seed gives the same numbers and "
    "different seeds different ones.",
    _seed_all_reference,
    shortcuts=("helpers.device.seed_everything", *_LIGHTNING_SEEDING, *_TIMM_SEEDING),
    goal="the seeding",
    hint="Each library keeps a random generator of its own, with its own state, and seeding one leaves the "
         "others as they were: seed each of the three (torch's global generator, Python's random module, "
         "NumPy's global generator) once, each with its own library's seeding function, and pass each the "
         "seed exactly as given.",
)
def _test_seed_all(seed_all: Callable[[int], None]) -> None:
    # Leave the learner's random streams as they were before the check.
    torch_state, py_state, np_state = torch.get_rng_state(), random.getstate(), np.random.get_state()
    try:
        seed_all(123)
        first = _draws()
        # Use up some numbers in between, as real code would.
        torch.rand(10)
        random.random()
        np.random.rand(10)
        seed_all(123)
        again = _draws()
        draws = {}
        for seed in _DISTINCT_SEEDS:
            seed_all(seed)
            draws[seed] = _draws()
        exact = {}
        for seed in _REFERENCE_SEEDS:
            seed_all(seed)
            exact[seed] = _draws()
    finally:
        torch.set_rng_state(torch_state)
        random.setstate(py_state)
        np.random.set_state(np_state)
    # One generator at a time, in the order of _STREAMS: repeats, depends on the seed, is the seed's own stream.
    for index, call, generator, seeding in _STREAMS:
        if first[index] != again[index]:
            raise Hint(
                f"after seed_all(123), {call} gave {_short(first[index])}; after seed_all(123) again it gave "
                f"{_short(again[index])}. The same seed should give the same numbers.",
                f"{call} draws from {generator}. Each library keeps its own generator, with its own state: "
                f"seed each one, here with {seeding}.{_NOT_REPEATING.get(index, '')}",
            )
        streams: dict[tuple, list[int]] = {}
        for seed, got in draws.items():
            streams.setdefault(tuple(got[index]), []).append(seed)
        if len(streams) == 1:
            raise Hint(
                f"seed_all gave the same {call} numbers for every one of the seeds {list(_DISTINCT_SEEDS)}: "
                "the numbers should depend on the seed.",
                f"Pass the seed argument itself on to {seeding}, not a fixed number.",
            )
        for seeds in streams.values():
            if len(seeds) > 1:
                a, b = seeds[:2]
                shared = _agreeing_low_bits(a, b)
                nudge = (f" These two seeds agree in their lowest {shared} bits and differ only above them."
                         if shared >= 8 else "")
                raise Hint(
                    f"seed_all({a}) and seed_all({b}) gave the same {call} numbers, "
                    f"{_short(draws[a][index])}: different seeds should give different numbers.{nudge}",
                    f"Give {seeding} the seed unchanged: shrinking it (seed & 0xFF, seed % 2**16, "
                    "seed // 100) maps many seeds to one stream.",
                )
        for seed, got in exact.items():
            want = _reference_draws(seed)
            if got[index] != want[index]:
                raise Hint(
                    f"after seed_all({seed}), {call} gave {_short(got[index])}, but {generator} seeded with {seed} "
                    f"starts with {_short(want[index])}: seed_all(seed) should seed it with seed itself.",
                    f"Give {seeding} the seed unchanged, for every seed up to 2**32 - 1: no offset, no "
                    "multiplier, no seed % 2**31 or other shrinking, no conversion to another type.",
                )


# --------------------------------------------------------------------------
# 00.to_device
# --------------------------------------------------------------------------


def _to_device_reference(batch, device):
    """Move every tensor inside ``batch`` to ``device``; keep everything else as is.

    ``batch`` may nest dicts, lists, tuples and namedtuples; each container
    comes back as the same type (a new container: the input is not modified),
    as ``torch.utils.data.default_collate`` keeps them. A namedtuple is a
    tuple subclass with ``_fields``; it is rebuilt with ``type(batch)(*items)``
    because its constructor takes the fields one by one.
    """
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {key: _to_device_reference(value, device) for key, value in batch.items()}
    if isinstance(batch, list):
        return [_to_device_reference(item, device) for item in batch]
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(_to_device_reference(item, device) for item in batch))
    if isinstance(batch, tuple):
        return tuple(_to_device_reference(item, device) for item in batch)
    return batch


#: A namedtuple in the example batch, as a Dataset returning named fields would give it.
Box = namedtuple("Box", ["corners", "label"])


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
        "box": Box(corners=torch.tensor([[0, 0, 2, 3]]), label="cat"),
        "ids": ids,
        # Deeper than two levels, so that a walk hard-coded to two levels misses tensors: a dict inside a
        # dict (a tensor at depth 3) and a list of tuples inside a dict inside a dict (tensors at depth 4).
        "views": {
            "meta": {"scale": torch.tensor([1.0, 0.5])},
            "crops": [(torch.ones(1, 2), "left"), (torch.zeros(1, 2, dtype=torch.int64), None)],
        },
    }
    return batch


def _list_batches():
    """Batches whose top level is a list or a tuple of dicts, as a custom collate_fn may return them."""
    samples = [{"x": torch.arange(4), "id": 7}, {"x": torch.ones(2, 2), "id": 8, "tags": ("a", torch.tensor([1]))}]
    return {"a list of dicts": samples, "a tuple of dicts": tuple(samples)}


def _kind(obj) -> str:
    return f"{type(obj).__name__} (a namedtuple)" if isinstance(obj, tuple) and hasattr(obj, "_fields") else type(obj).__name__


def _first_values(t: torch.Tensor) -> list:
    return t.detach().flatten()[:4].tolist()


def _compare(got, want, where: str, device: torch.device) -> None:
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            raise Hint(
                f"{where} should be a tensor, got {type(got).__name__}.",
                "Where the input holds a tensor, the output holds that tensor moved: not a container around it, "
                "nor something else in its place.",
            )
        if got.device.type != device.type:
            nested = "; it is nested inside another container" if where.count("[") > 1 else ""
            raise Hint(
                f"{where} is on {got.device}, expected {device}{nested}.",
                "Move every tensor you find to the device argument you were given, also those nested inside "
                "lists, tuples and dicts at any depth: a function that calls itself on each item of a container "
                "reaches them all.",
            )
        if got.shape != want.shape or got.dtype != want.dtype:
            raise Hint(
                f"{where} changed from shape {tuple(want.shape)} {want.dtype} to {tuple(got.shape)} {got.dtype}: "
                "only the device should change.",
                "Leave the dtype alone: Tensor.to given only a device keeps it, while .float(), .double() or a "
                "dtype argument change it.",
            )
        if device.type != "meta" and not torch.equal(got.cpu(), want.cpu()):
            raise Hint(
                f"{where} starts with {_first_values(got)} after the move, but the tensor given starts with "
                f"{_first_values(want)}: moving a tensor keeps its values.",
                "Move the tensor you were given (Tensor.to copies its values to the device); torch.zeros_like "
                "and torch.empty_like make a new tensor of the same shape with other values.",
            )
        return
    if isinstance(want, dict):
        if type(got) is not type(want):  # exactly: a dict subclass (OrderedDict, defaultdict) is another kind
            raise Hint(
                f"{where} should stay a {type(want).__name__}, got {type(got).__name__}.",
                "Check for a dict with isinstance and build a new dict from its items, with the same keys.",
            )
        if list(got) != list(want):
            raise Hint(
                f"{where} should keep the keys {list(want)}, got {list(got)}.",
                "Keep every key, in its order, whatever its value is: a value that is not a tensor is kept "
                "as it is, not dropped.",
            )
        for key in want:
            _compare(got[key], want[key], f"{where}[{key!r}]", device)
        return
    if isinstance(want, (list, tuple)):
        if type(got) is not type(want):
            raise Hint(
                f"{where} should stay a {_kind(want)}, got {_kind(got)}.",
                "Rebuild each container as the type it was, with an isinstance check for each kind: a list "
                "stays a list, a tuple a tuple, and a namedtuple the same namedtuple class. A namedtuple "
                "is a tuple too, and its constructor differs.",
            )
        if len(got) != len(want):
            raise Hint(
                f"{where} should keep its {len(want)} items, got {len(got)}.",
                "Keep every item, tensor or not, in its place.",
            )
        for i, (g, w) in enumerate(zip(got, want)):
            _compare(g, w, f"{where}[{i}]", device)
        return
    if got is not want:
        got_text = repr(got) if type(got) is type(want) else f"a {type(got).__name__}"
        raise Hint(
            f"{where} is {want!r}, not a tensor, and should come back untouched (the same object), got {got_text}.",
            "Return anything that is not a tensor, dict, list or tuple as it is (a str is a sequence too: "
            "do not loop over it).",
        )


def _snapshot(obj):
    """The same nesting of new containers around the very same leaves."""
    if isinstance(obj, dict):
        return {key: _snapshot(value) for key, value in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_snapshot(item) for item in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_snapshot(item) for item in obj)
    return obj


def _unchanged(now, before, where: str) -> None:
    """Raise if the learner's function modified its input ``before`` in place."""
    hint = Hint(
        f"your function changed its input in place ({where}).",
        "Build and return new containers instead, because the caller may still need the CPU batch.",
    )
    if isinstance(before, dict):
        if not (isinstance(now, dict) and list(now) == list(before)):
            raise hint
        for key in before:
            _unchanged(now[key], before[key], f"{where}[{key!r}]")
    elif isinstance(before, (list, tuple)):
        if not (type(now) is type(before) and len(now) == len(before)):
            raise hint
        for i, (n, b) in enumerate(zip(now, before)):
            _unchanged(n, b, f"{where}[{i}]")
    elif now is not before or (isinstance(before, torch.Tensor) and before.device.type != "cpu"):
        raise hint


#: Library functions that walk nested containers for the learner (the exercise asks for that walk).
#: ``torch.utils._pytree`` is PyTorch's private module for it: tree_map does the whole exercise, and
#: flattening (tree_flatten, or tree_leaves / tree_iter with tree_structure) followed by rebuilding
#: (tree_unflatten, or the spec's own ``unflatten`` method) does it too. The method cannot be patched
#: (it lives on a class), so the functions that hand out the leaves and the spec are refused instead.
#: ``_broadcast_to_and_flatten(batch, spec)`` is a private route to the leaves (with ``spec.unflatten``
#: it rebuilds the batch), as was ``_tree_flatten_helper`` in older releases (torch 2.14 has none). Each name is refused only where the module has it, since a name that
#: resolves to nothing would stop the checker.
_PYTREE_WALK_NAMES = ("tree_map", "tree_map_", "tree_map_only", "tree_map_only_", "tree_map_with_path",
                      "tree_flatten", "tree_flatten_with_path", "tree_unflatten", "tree_leaves",
                      "tree_leaves_with_path", "tree_iter", "tree_structure", "arg_tree_leaves",
                      "_broadcast_to_and_flatten", "_tree_flatten_helper")


def _pytree_walks(module_name: str) -> tuple[str, ...]:
    """The names of ``_PYTREE_WALK_NAMES`` that ``module_name`` defines, as dotted names; () if it does not import.

    ``torch.utils._cxx_pytree`` (the same API on the C++ library optree) imports only where the optional
    package ``optree`` is installed.
    """
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return ()
    return tuple(f"{module_name}.{name}" for name in _PYTREE_WALK_NAMES if callable(getattr(module, name, None)))


_PYTREE_SHORTCUTS = (*_pytree_walks("torch.utils._pytree"), *_pytree_walks("torch.utils._cxx_pytree"))


def _distributed_walks() -> tuple[str, ...]:
    """``torch.distributed.utils``'s private walks: ``_recursive_to(batch, device, False)[0]`` is the exercise.

    ``_to_kwargs`` calls ``_recursive_to`` (a call from inside torch, which the guard allows), so it is
    named too; ``_apply_to_tensors(fn, batch)`` is the walk with any function. Only where the module
    imports: a torch built without distributed support may lack it, and a name that resolves to nothing
    would stop the checker.
    """
    try:
        import torch.distributed.utils  # noqa: F401  (already imported by ``import torch`` where it exists)
    except ImportError:
        return ()
    return tuple(f"torch.distributed.utils.{name}" for name in ("_recursive_to", "_to_kwargs", "_apply_to_tensors"))


#: torch.fx's walk over nested arguments: ``map_aggregate(batch, fn)`` rebuilds tuples (namedtuples
#: included), lists and dicts around ``fn`` of every leaf, which is the whole exercise with
#: ``fn = lambda t: t.to(device) if isinstance(t, torch.Tensor) else t``.
_FX_WALKS = ("torch.fx.node.map_aggregate",)


#: Lightning's walks over a batch (lazy, like _LIGHTNING_SEEDING): move_data_to_device does the whole
#: exercise, apply_to_collection(batch, torch.Tensor, fn) the walk.
_LIGHTNING_WALKS = tuple(
    Shortcut(name, lazy=True)
    for name in ("lightning.fabric.utilities.apply_func.move_data_to_device",
                 "lightning.fabric.utilities.move_data_to_device", "lightning.pytorch.utilities.move_data_to_device",
                 "lightning_fabric.utilities.apply_func.move_data_to_device",
                 "lightning_fabric.utilities.move_data_to_device", "pytorch_lightning.utilities.move_data_to_device",
                 "lightning_utilities.apply_to_collection", "lightning_utilities.core.apply_func.apply_to_collection",
                 # the private function that does apply_to_collection's work
                 "lightning_utilities.core.apply_func._apply_to_collection_slow")
)


def _moved(to_device: Callable, batch, device):
    """``to_device(batch, device)``, with a namedtuple rebuilt from one iterable told apart from other crashes.

    ``Box(generator)`` raises ``TypeError: Box.__new__() missing 1 required positional argument``: the
    learner's code called the namedtuple's constructor the way ``tuple(iterable)`` is called.
    """
    try:
        return to_device(batch, device)
    except TypeError as exc:
        text = str(exc)
        fields = ", ".join(Box._fields)
        if not text.startswith(f"{Box.__name__}.__new__() missing") or "required positional argument" not in text:
            raise
        raise Hint(
            f"your code raised TypeError: {text}. It rebuilt the namedtuple {Box.__name__} from a single "
            f"argument holding all the items, as tuple(items) is called; but a namedtuple's constructor takes "
            f"the fields as separate arguments, {Box.__name__}({fields}), so the other fields went missing.",
            "Pass the moved items to the namedtuple's constructor one field per argument: unpack them into "
            "the call (a namedtuple also has a classmethod that builds one from an iterable).",
        ) from exc


@exercise(
    "00.to_device",
    "write to_device(batch, device) that returns a copy of batch, a tensor or a dict/list/tuple/namedtuple "
    "nesting tensors and other values, with every tensor moved to device and everything else unchanged "
    "(write the walk over the containers yourself).",
    _to_device_reference,
    shortcuts=(*_PYTREE_SHORTCUTS, *_distributed_walks(), *_FX_WALKS, *_LIGHTNING_WALKS),
    goal="the walk over nested containers",
    hint="Let the function call itself: a tensor is moved; a dict, list or tuple (or namedtuple) is rebuilt as "
         "the same type from its items, each passed through the function again; anything else comes back as it is.",
)
def _test_to_device(to_device: Callable) -> None:
    # The meta device exists on every machine and is never the tensors' own
    # device, so returning the input unchanged cannot pass.
    meta = torch.device("meta")
    single = torch.arange(3)
    moved = _moved(to_device, single, meta)
    assert moved is not None, "to_device returned None: return the moved tensor or batch."
    _compare(moved, single, "to_device(tensor, device)", meta)

    batch = _example_batch()
    before = _snapshot(batch)
    result = _moved(to_device, batch, meta)
    assert result is not None, "to_device returned None: return the moved batch."
    _compare(result, before, "batch", meta)
    _unchanged(batch, before, "batch")

    # The top level need not be a dict.
    for kind, batch in _list_batches().items():
        before = _snapshot(batch)
        result = _moved(to_device, batch, meta)
        assert result is not None, f"to_device returned None for {kind}: return the moved batch."
        _compare(result, before, f"to_device({kind})", meta)
        _unchanged(batch, before, "batch")

    # Now to the CPU, given as a string, with float64 tensors: an answer that ignores
    # `device` (always "meta", say), changes the dtype, or makes new tensors with
    # other values (zeros_like) cannot pass: here the values are compared too.
    cpu = torch.device("cpu")
    batch = {
        "x": torch.linspace(0, 1, 5, dtype=torch.float64),
        "pair": (torch.eye(2, dtype=torch.float64), "id"),
        "box": Box(corners=torch.tensor([[1, 2, 5, 7]]), label=None),
    }
    before = _snapshot(batch)
    result = _moved(to_device, batch, "cpu")
    assert result is not None, "to_device returned None: return the moved batch."
    _compare(result, before, 'batch (to "cpu")', cpu)
    _unchanged(batch, before, "batch")

    # A tensor in the middle of an autograd graph (a model's output, say) must stay in it: moving keeps
    # requires_grad, while .detach() or .data cut the graph, and backward() would then never reach the model.
    weight = torch.ones(3, dtype=torch.float64, requires_grad=True)
    moved = _moved(to_device, {"out": weight * 2, "id": 1}, "cpu")
    if isinstance(moved, dict) and isinstance(moved.get("out"), torch.Tensor) and not moved["out"].requires_grad:
        raise Hint(
            "a tensor that requires grad came back with requires_grad=False: the move cut it out of the autograd graph.",
            "Move each tensor with Tensor.to(device), which autograd records; .detach(), .data or a new tensor made "
            "from its values lose the graph, and backward() would never reach the model.",
        )
