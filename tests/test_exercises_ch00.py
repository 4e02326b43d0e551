"""Exercises of chapter 00: more wrong answers that must fail, shortcuts, and the two hint tiers.

The first wrong answers of 00.seed_all and 00.to_device are in tests/test_exercises_ch00_ch01.py.
"""

from __future__ import annotations

import random
from collections import namedtuple

import numpy as np
import pytest
import torch

from helpers import exercises
from helpers.exercises import check, hint, solution
from tests.exercise_support import assert_rejected

# ---------------------------------------------------------------- 00.seed_all


def _keeps_the_low_byte(seed):
    random.seed(seed & 0xFF)
    torch.manual_seed(seed & 0xFF)


def _keeps_the_low_16_bits(seed):
    random.seed(seed)
    torch.manual_seed(seed % 2**16)


def _calls_the_course_helper(seed):
    from helpers.device import seed_everything

    seed_everything(seed)


def _seeds_a_private_generator(seed):  # the global generator that torch.rand uses stays unseeded
    random.seed(seed)
    torch.Generator().manual_seed(seed)


@pytest.mark.parametrize(
    ("wrong", "fragments"),
    [
        (_keeps_the_low_byte, ("seed_all(44) and seed_all(300) gave the same", "lowest 8 bits")),
        (_keeps_the_low_16_bits, ("seed_all(300) and seed_all(65836) gave the same torch.rand(3)", "lowest 16 bits")),
        (_calls_the_course_helper, ("write the seeding yourself", "helpers.device.seed_everything")),
        (_seeds_a_private_generator, ("torch.rand(3) gave",)),
    ],
)
def test_seed_all_more_wrong_answers_fail(wrong, fragments):
    assert_rejected("00.seed_all", wrong, *fragments)


def test_seed_all_lambda_that_masks_the_seed_fails():
    """The answer a reviewer found passing: both generators seeded with the seed's low byte."""
    assert_rejected("00.seed_all", lambda s: (random.seed(s & 0xFF), torch.manual_seed(s & 0xFF)), "lowest 8 bits")


def test_seed_all_first_hint_states_the_case_not_the_fix(monkeypatch):
    def torch_only(seed):
        torch.manual_seed(seed)

    monkeypatch.delitem(exercises._failures, "00.seed_all", raising=False)  # a first attempt in this session
    first = check("00.seed_all", torch_only, show=False).message
    assert "random.random() gave" in first and "random.seed" not in first, first
    assert 'hint("00.seed_all") gives a fuller hint' in first and "Hint:" not in first, first
    fuller = hint("00.seed_all", show=False)
    assert "each library keeps its own generator" in fuller.lower() and "random module" in fuller, fuller
    assert "random.seed" not in fuller, f"the fuller hint should name the family, not the call: {fuller}"
    second = check("00.seed_all", torch_only, show=False).message
    assert "Hint:" in second and "seed each one" in second, second


def test_seed_all_fuller_hint_for_a_shrunk_seed_names_the_mistake():
    check("00.seed_all", _keeps_the_low_byte, show=False)
    assert "seed & 0xFF" in hint("00.seed_all", show=False)


def _shrinks_mod_2_31(seed):
    random.seed(seed % 2**31)
    torch.manual_seed(seed % 2**31)


def _shrinks_mod_1009(seed):  # the reviewer's example: distinct on small seeds, 1009 + 5 meets 5
    random.seed(seed % 1009)
    torch.manual_seed(seed % 1009)


def _string_seed(seed):  # repeatable and seed-dependent, but not random's stream for seed
    random.seed(str(seed))
    torch.manual_seed(seed)


@pytest.mark.parametrize(
    ("wrong", "fragments"),
    [
        (_shrinks_mod_2_31, ("after seed_all(2147483653), torch.rand(3) gave", "seed % 2**31")),
        (_shrinks_mod_1009, ("seed_all(",)),
        (_string_seed, ("after seed_all(0), random.random() gave", "seed itself")),
    ],
)
def test_seed_all_answers_off_the_reference_streams_fail(wrong, fragments):
    assert_rejected("00.seed_all", wrong, *fragments)


def test_seed_all_reference_matches_fresh_generators_up_to_2_32():
    from helpers.exercises.ch00 import _REFERENCE_SEEDS

    assert any(2**31 <= s < 2**32 for s in _REFERENCE_SEEDS), "no seed in [2**31, 2**32) is checked"
    assert check("00.seed_all", solution("00.seed_all"), show=False).passed


def _lightning_seeding_answers():
    import lightning
    import lightning.fabric.utilities.seed as fabric_seed
    import lightning_fabric
    import pytorch_lightning

    return [
        lambda s: lightning.pytorch.seed_everything(s, verbose=False),
        lambda s: lightning.seed_everything(s, verbose=False),
        lambda s: fabric_seed.seed_everything(s, verbose=False),
        lambda s: lightning_fabric.seed_everything(s, verbose=False),
        lambda s: pytorch_lightning.seed_everything(s, verbose=False),
    ]


@pytest.mark.parametrize("index", range(5))
def test_seed_all_lightning_seed_everything_is_refused(index):
    answer = _lightning_seeding_answers()[index]
    assert_rejected("00.seed_all", answer, "write the seeding yourself", "seed_everything")


def test_seed_all_lightning_imported_inside_the_answer_is_refused():
    def imports_lightning(seed):
        from lightning.pytorch import seed_everything

        seed_everything(seed, verbose=False)

    assert_rejected("00.seed_all", imports_lightning, "write the seeding yourself", "seed_everything")


def test_seed_all_fabric_static_seed_everything_is_refused():
    # Fabric.seed_everything is a staticmethod that calls Lightning's seed_everything from inside Lightning
    from lightning.fabric import Fabric

    assert_rejected("00.seed_all", lambda s: Fabric.seed_everything(s, verbose=False),
                    "write the seeding yourself", "seed_everything")


def test_seed_all_check_restores_the_seed_everything_name():
    import helpers.device

    before = helpers.device.seed_everything
    check("00.seed_all", _calls_the_course_helper, show=False)
    assert helpers.device.seed_everything is before


def _forgets_numpy(seed):  # torch and random right, NumPy's global generator never seeded
    random.seed(seed)
    torch.manual_seed(seed)


def _numpy_default_rng(seed):  # a new NumPy Generator: the global np.random stream stays unseeded
    random.seed(seed)
    torch.manual_seed(seed)
    np.random.default_rng(seed)


def _numpy_shrunk_seed(seed):
    random.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(seed % 2**31)


def _numpy_fixed_seed(seed):
    random.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(0)


@pytest.mark.parametrize(
    ("wrong", "fragments"),
    [
        (_forgets_numpy, ("after seed_all(123), np.random.rand(3) gave", "The same seed should give the same numbers")),
        (_numpy_default_rng, ("after seed_all(123), np.random.rand(3) gave",)),
        (_numpy_shrunk_seed, ("after seed_all(2147483653), np.random.rand(3) gave", "seed itself")),
        (_numpy_fixed_seed, ("same np.random.rand(3) numbers for every one of the seeds",)),
    ],
)
def test_seed_all_numpy_mistakes_fail(wrong, fragments):
    assert_rejected("00.seed_all", wrong, *fragments)


def test_seed_all_fuller_hint_for_default_rng_names_the_global_generator():
    check("00.seed_all", _numpy_default_rng, show=False)
    fuller = hint("00.seed_all", show=False)
    assert "NumPy's global generator" in fuller and "default_rng" in fuller, fuller
    assert "np.random.seed" not in fuller, f"the fuller hint should name the family, not the call: {fuller}"


def test_seed_all_reference_seeds_numpy_like_a_fresh_random_state():
    solution("00.seed_all")(2**32 - 2)
    assert np.random.rand(3).tolist() == np.random.RandomState(2**32 - 2).rand(3).tolist()


def test_seed_all_check_leaves_the_numpy_stream_alone():
    np.random.seed(5)
    expected = np.random.rand(2).tolist()
    np.random.seed(5)
    check("00.seed_all", solution("00.seed_all"), show=False)
    assert np.random.rand(2).tolist() == expected


def test_seed_all_general_hint_names_the_idea_not_the_code(monkeypatch):
    from helpers.exercises import EXERCISES

    monkeypatch.delitem(exercises._fuller, "00.seed_all", raising=False)  # before any attempt
    general = EXERCISES["00.seed_all"].hint
    assert hint("00.seed_all", show=False) == general
    assert "own" in general and "NumPy" in general and "Python's random" in general, general
    for code in ("manual_seed(", "random.seed(", "np.random.seed(", "seed_everything"):
        assert code not in general, f"the general hint pastes {code!r}: {general}"


# ---------------------------------------------------------------- 00.to_device


def _walk(batch, leaf, tuple_of=lambda obj, items: type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)):
    """A correct walk over dicts, lists and (named)tuples that applies ``leaf`` to each tensor."""
    if isinstance(batch, torch.Tensor):
        return leaf(batch)
    if isinstance(batch, dict):
        return {k: _walk(v, leaf, tuple_of) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return tuple_of(batch, [_walk(v, leaf, tuple_of) for v in batch])
    return batch


def _zeros_like(batch, device):
    return _walk(batch, lambda t: torch.zeros_like(t, device=device))


def _empty_like(batch, device):
    return _walk(batch, lambda t: torch.empty_like(t, device=device))


def _namedtuples_become_tuples(batch, device):
    return _walk(batch, lambda t: t.to(device), tuple_of=lambda obj, items: type(obj)(items) if isinstance(obj, list) else tuple(items))


def _with_pytree(batch, device):
    from torch.utils._pytree import tree_map_only

    return tree_map_only(torch.Tensor, lambda t: t.to(device), batch)


def _with_pytree_module(batch, device):
    import torch.utils._pytree as pytree

    leaves, spec = pytree.tree_flatten(batch)
    return pytree.tree_unflatten([x.to(device) if isinstance(x, torch.Tensor) else x for x in leaves], spec)


def _dicts_become_ordered_dicts(batch, device):
    from collections import OrderedDict

    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):  # an OrderedDict passes isinstance(..., dict), but it is another type
        return OrderedDict((k, _dicts_become_ordered_dicts(v, device)) for k, v in batch.items())
    if isinstance(batch, (list, tuple)):
        items = [_dicts_become_ordered_dicts(v, device) for v in batch]
        return type(batch)(*items) if hasattr(batch, "_fields") else type(batch)(items)
    return batch


@pytest.mark.parametrize(
    ("wrong", "fragments"),
    [
        (_zeros_like, ("after the move", "keeps its values")),
        (_empty_like, ("keeps its values",)),
        (_namedtuples_become_tuples, ("should stay a Box (a namedtuple), got tuple",)),
        (_with_pytree, ("walk over nested containers yourself", "tree_map_only")),
        (_with_pytree_module, ("walk over nested containers yourself", "tree_flatten")),
        (_dicts_become_ordered_dicts, ("should stay a dict, got OrderedDict",)),
    ],
)
def test_to_device_more_wrong_answers_fail(wrong, fragments):
    assert_rejected("00.to_device", wrong, *fragments)


def test_to_device_reference_keeps_a_namedtuple_as_default_collate_does():
    Point = namedtuple("Point", ["x", "label"])
    moved = solution("00.to_device")({"p": Point(torch.ones(2), "a")}, "meta")
    assert type(moved["p"]) is Point and moved["p"].x.device.type == "meta" and moved["p"].label == "a"
    collated = torch.utils.data.default_collate([Point(torch.ones(2), 1), Point(torch.zeros(2), 2)])
    assert type(collated) is Point, "default_collate no longer keeps namedtuples: the exercise text says it does"


def test_to_device_fuller_hint_names_the_namedtuple_case_without_the_fix():
    check("00.to_device", _namedtuples_become_tuples, show=False)
    fuller = hint("00.to_device", show=False)
    assert "a tuple too" in fuller and "constructor differs" in fuller, fuller
    for giveaway in ("_fields", "positional", "first", "type(x)(*", "type(batch)(*"):
        assert giveaway not in fuller, f"the fuller hint gives away how to rebuild a namedtuple ({giveaway!r}): {fuller}"


def _namedtuple_from_one_iterable(batch, device):  # type(batch)(generator): right for tuple and list only
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: _namedtuple_from_one_iterable(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_namedtuple_from_one_iterable(v, device) for v in batch)
    return batch


def test_to_device_namedtuple_built_from_one_iterable_gets_a_hint():
    """Box(generator) raises TypeError inside the answer; the learner gets a Hint, not only the raw error."""
    exercises._failures.pop("00.to_device", None)
    first = assert_rejected("00.to_device", _namedtuple_from_one_iterable, "Box.__new__() missing",
                            "a namedtuple's constructor takes the fields as separate arguments",
                            'hint("00.to_device")').message
    fuller = hint("00.to_device", show=False)
    assert "unpack" in fuller, fuller
    for code in ("*(", "type(batch)(", "_make("):
        assert code not in first and code not in fuller, f"the hint pastes code ({code!r}): {first} / {fuller}"


def _forgets_tuples(batch, device):  # dicts and lists only: a tuple comes back as it was, its tensors unmoved
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: _forgets_tuples(v, device) for k, v in batch.items()}
    if isinstance(batch, list):
        return [_forgets_tuples(v, device) for v in batch]
    return batch


def _moves_numbers_too_everywhere(batch, device):  # turns 0.5 and 3 into tensors on the device
    if isinstance(batch, (int, float)) and not isinstance(batch, bool):
        return torch.as_tensor(batch).to(device)
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: _moves_numbers_too_everywhere(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        items = [_moves_numbers_too_everywhere(v, device) for v in batch]
        return type(batch)(*items) if hasattr(batch, "_fields") else type(batch)(items)
    return batch


def _drops_non_tensor_entries(batch, device):  # keeps only the dict keys whose value holds a tensor
    if isinstance(batch, dict):
        moved = {k: _drops_non_tensor_entries(v, device) for k, v in batch.items()}
        return {k: v for k, v in moved.items() if isinstance(v, (torch.Tensor, dict, list, tuple))}
    return _walk(batch, lambda t: t.to(device))


def _dict_of_values_becomes_a_list(batch, device):
    if isinstance(batch, dict):
        return [_dict_of_values_becomes_a_list(v, device) for v in batch.values()]
    return _walk(batch, lambda t: t.to(device))


@pytest.mark.parametrize(
    ("wrong", "fragments"),
    [
        (_forgets_tuples, ("batch['pair'][0] is on cpu, expected meta", "nested")),
        (_moves_numbers_too_everywhere, ("batch['target']['weight'] is 0.5, not a tensor", "untouched")),
        (_drops_non_tensor_entries, ("batch['target'] should keep the keys ['label', 'weight']",)),
        (_dict_of_values_becomes_a_list, ("should stay a dict, got list",)),
    ],
)
def test_to_device_realistic_wrong_answers_fail(wrong, fragments):
    assert_rejected("00.to_device", wrong, *fragments)


def test_to_device_realistic_wrong_answers_have_fuller_hints_without_the_fix():
    """Each wrong answer above gets a second tier that names the idea and pastes no line of the reference."""
    import inspect

    from helpers.exercises.ch00 import _to_device_reference

    source = inspect.getsource(_to_device_reference)
    body = source.split('"""')[-1]  # the code after the docstring
    lines = [line.strip() for line in body.splitlines() if len(line.strip()) >= 12 and not line.strip().startswith("#")]
    lines += [line.split(" #")[0].strip() for line in lines if " #" in line]
    assert len(lines) >= 6, lines
    wrong_answers = (_forgets_tuples, _moves_numbers_too_everywhere, _drops_non_tensor_entries,
                     _dict_of_values_becomes_a_list, _namedtuples_become_tuples, _zeros_like)
    for wrong in wrong_answers:
        check("00.to_device", wrong, show=False)
        fuller = hint("00.to_device", show=False)
        assert len(fuller) > 40 and not fuller.startswith("no fuller hint"), f"{wrong.__name__}: {fuller}"
        pasted = [line for line in lines if line in fuller]
        assert not pasted, f"the fuller hint for {wrong.__name__} pastes the reference: {pasted}"
        for fragment in ("batch.to(device)", "tensor.to(device)", "type(batch)(", "type(x)("):
            assert fragment not in fuller, f"the fuller hint for {wrong.__name__} pastes {fragment!r}: {fuller}"


def test_to_device_general_hint_names_the_idea():
    from helpers.exercises import EXERCISES

    general = EXERCISES["00.to_device"].hint
    assert "call itself" in general and "same type" in general, general
    assert ".to(" not in general and "isinstance(" not in general, f"the general hint pastes code: {general}"


def _with_recursive_to(batch, device):
    from torch.distributed.utils import _recursive_to

    return _recursive_to(batch, torch.device(device), False)[0]


def _with_to_kwargs(batch, device):
    from torch.distributed.utils import _to_kwargs

    return _to_kwargs((batch,), None, torch.device(device), False)[0][0][0]  # ((inputs,),), ({},)


def _with_apply_to_tensors(batch, device):
    import torch.distributed.utils as dist_utils

    return dist_utils._apply_to_tensors(lambda t: t.to(device), batch)


def _with_tree_structure(batch, device):
    import torch.utils._pytree as pytree

    spec = pytree.tree_structure(batch)
    return spec.unflatten([x.to(device) if isinstance(x, torch.Tensor) else x for x in pytree.tree_leaves(batch)])


def _with_flatten_and_spec_unflatten(batch, device):
    from torch.utils._pytree import tree_flatten

    leaves, spec = tree_flatten(batch)
    return spec.unflatten([x.to(device) if isinstance(x, torch.Tensor) else x for x in leaves])


def _with_tree_map(batch, device):
    from torch.utils import _pytree

    return _pytree.tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, batch)


def _with_pytree_swallowing_the_refusal(batch, device):
    import torch.utils._pytree as pytree

    try:
        return pytree.tree_map_only(torch.Tensor, lambda t: t.to(device), batch)
    except AssertionError:  # the guard's refusal, caught: the use is still recorded
        return solution("00.to_device")(batch, device)


def _with_broadcast_to_and_flatten(batch, device, _structure=torch.utils._pytree.tree_structure):
    # The spec comes from a default argument, which the guard does not rebind, so that only the private
    # helper that hands out the leaves can stop this answer.
    import torch.utils._pytree as pytree

    spec = _structure(batch)
    leaves = pytree._broadcast_to_and_flatten(batch, spec)
    return spec.unflatten([x.to(device) if isinstance(x, torch.Tensor) else x for x in leaves])


def _with_fx_map_aggregate(batch, device):
    from torch.fx.node import map_aggregate

    return map_aggregate(batch, lambda x: x.to(device) if isinstance(x, torch.Tensor) else x)


_LIBRARY_WALKS = [
    (_with_recursive_to, "torch.distributed.utils._recursive_to"),
    (_with_to_kwargs, "torch.distributed.utils._to_kwargs"),
    (_with_apply_to_tensors, "torch.distributed.utils._apply_to_tensors"),
    (_with_tree_structure, "torch.utils._pytree.tree_structure"),
    (_with_flatten_and_spec_unflatten, "torch.utils._pytree.tree_flatten"),
    (_with_tree_map, "torch.utils._pytree.tree_map"),
    (_with_pytree_swallowing_the_refusal, "torch.utils._pytree.tree_map_only"),
    (_with_broadcast_to_and_flatten, "torch.utils._pytree._broadcast_to_and_flatten"),
]


@pytest.mark.parametrize(("walk", "name"), _LIBRARY_WALKS, ids=[name for _, name in _LIBRARY_WALKS])
def test_to_device_library_walks_are_correct_but_refused(walk, name):
    """Each of these is a right answer (the checker's own test passes it unguarded), so only the guard stops it."""
    from helpers.exercises import _get

    _get("00.to_device").test(walk)  # the same checks, without the shortcut guard: a correct walk
    assert_rejected("00.to_device", walk, "walk over nested containers yourself", name)


def test_to_device_fx_map_aggregate_is_refused_as_a_walk():
    """torch.fx's walk rebuilds dicts and lists as its immutable subclasses; it is refused for the walk itself."""
    from torch.fx.immutable_collections import immutable_dict

    assert isinstance(_with_fx_map_aggregate({"x": torch.ones(1)}, "cpu"), immutable_dict)
    assert_rejected("00.to_device", _with_fx_map_aggregate, "walk over nested containers yourself",
                    "torch.fx.node.map_aggregate")


def _with_cxx_pytree(batch, device):
    from torch.utils import _cxx_pytree

    return _cxx_pytree.tree_map_only(torch.Tensor, lambda t: t.to(device), batch)


def _with_cxx_pytree_flatten(batch, device):
    import torch.utils._cxx_pytree as cxx_pytree

    leaves, spec = cxx_pytree.tree_flatten(batch)
    return cxx_pytree.tree_unflatten([x.to(device) if isinstance(x, torch.Tensor) else x for x in leaves], spec)


@pytest.mark.parametrize(("walk", "name"), [(_with_cxx_pytree, "tree_map_only"), (_with_cxx_pytree_flatten, "tree_flatten")])
def test_to_device_cxx_pytree_walks_are_refused_where_they_import(walk, name):
    """torch.utils._cxx_pytree needs the optional package optree; where it imports, its walks are refused too."""
    pytest.importorskip("torch.utils._cxx_pytree", reason="needs the optional package optree", exc_type=ImportError)
    from helpers.exercises import EXERCISES

    EXERCISES["00.to_device"].test(walk)  # a correct walk, without the guard
    assert_rejected("00.to_device", walk, "walk over nested containers yourself", f"torch.utils._cxx_pytree.{name}")


def test_to_device_pytree_shortcuts_exist_in_the_installed_torch():
    """Every refused pytree name resolves (a name that resolves to nothing would stop the checker)."""
    import importlib

    from helpers.exercises.ch00 import _PYTREE_SHORTCUTS

    assert "torch.utils._pytree._broadcast_to_and_flatten" in _PYTREE_SHORTCUTS
    for dotted in _PYTREE_SHORTCUTS:
        module, _, attr = dotted.rpartition(".")
        assert callable(getattr(importlib.import_module(module), attr)), dotted


def test_to_device_shortcut_guard_restores_the_distributed_walks():
    import torch.distributed.utils as dist_utils

    before = dist_utils._recursive_to, dist_utils._apply_to_tensors
    check("00.to_device", _with_recursive_to, show=False)
    assert (dist_utils._recursive_to, dist_utils._apply_to_tensors) == before


def test_to_device_shortcut_names_are_restored():
    import torch.utils._pytree as pytree

    before = pytree.tree_map_only
    check("00.to_device", _with_pytree, show=False)
    assert pytree.tree_map_only is before


def test_to_device_lightning_walks_are_refused():
    # through the modules, as a notebook's top-level `from ... import` (its globals are patched too) would see them
    import lightning.fabric.utilities.apply_func as fabric_apply
    import lightning_utilities.core.apply_func as utilities_apply

    assert_rejected("00.to_device", lambda batch, device: fabric_apply.move_data_to_device(batch, device),
                    "the walk over nested containers", "move_data_to_device")
    assert_rejected("00.to_device",
                    lambda batch, device: utilities_apply.apply_to_collection(batch, torch.Tensor, lambda t: t.to(device)),
                    "the walk over nested containers", "apply_to_collection")
    assert_rejected("00.to_device", fabric_apply.move_data_to_device, "move_data_to_device")  # handed over itself


def test_to_device_lightning_data_hook_is_refused():
    # the LightningModule hook that moves a batch: it calls move_data_to_device from inside Lightning
    from lightning.pytorch.core.hooks import DataHooks

    assert_rejected("00.to_device", lambda batch, device: DataHooks().transfer_batch_to_device(batch, device, 0),
                    "the walk over nested containers", "move_data_to_device")


def _walk_to_depth(levels):
    """A walk that stops after ``levels`` levels of containers, as hard-coded nested loops would.

    ``levels=2`` is the hard-coded two-level walk: for the top container, for each container inside it,
    move the tensors found there; a tensor three containers deep comes back unmoved.
    """
    def walk(batch, device, level=0):
        if isinstance(batch, torch.Tensor):
            return batch.to(device)
        if level == levels:  # as deep as the hard-coded loops go
            return batch
        if isinstance(batch, dict):
            return {k: walk(v, device, level + 1) for k, v in batch.items()}
        if isinstance(batch, (list, tuple)):
            items = [walk(v, device, level + 1) for v in batch]
            return type(batch)(*items) if hasattr(batch, "_fields") else type(batch)(items)
        return batch

    return walk


_two_level_walk, _three_level_walk = _walk_to_depth(2), _walk_to_depth(3)


def _dict_at_the_top_only(batch, device):  # recursive, but assumes the batch itself is a dict
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    return {k: _walk(v, lambda t: t.to(device)) for k, v in batch.items()}


@pytest.mark.parametrize(
    ("wrong", "fragments"),
    [
        (_two_level_walk, ("batch['views']['meta']['scale'] is on cpu, expected meta", "nested")),
        (_three_level_walk, ("batch['views']['crops'][0][0] is on cpu, expected meta",)),
        (_dict_at_the_top_only, ("raised AttributeError", "'list' object has no attribute 'items'")),
    ],
)
def test_to_device_walks_without_recursion_fail(wrong, fragments):
    """The example batch nests tensors 3 and 4 levels deep, and two batches have a list or tuple at the top."""
    assert_rejected("00.to_device", wrong, *fragments)


def test_to_device_two_level_walk_handles_the_shallow_batches():
    """The mutant above is a real two-level walk: it moves everything up to depth 2, so depth is what catches it."""
    from helpers.exercises.ch00 import _list_batches

    batch = {"a": torch.ones(1), "b": {"c": torch.ones(1)}, "d": [torch.ones(1)]}
    moved = _two_level_walk(batch, "meta")
    assert all(t.device.type == "meta" for t in (moved["a"], moved["b"]["c"], moved["d"][0]))
    for kind, top in _list_batches().items():  # depth 2 moved, depth 3 (inside the "tags" tuple) not
        moved = _two_level_walk(top, "meta")
        assert moved[1]["x"].device.type == "meta" and moved[1]["tags"][1].device.type == "cpu", kind


@pytest.mark.parametrize("path", ["timm.utils", "timm.utils.random"])
def test_seed_all_timm_random_seed_is_refused(path):
    import importlib

    random_seed = importlib.import_module(path).random_seed  # torch.manual_seed, np.random.seed, random.seed

    def answer(seed):
        random_seed(seed)

    assert_rejected("00.seed_all", answer, "write the seeding yourself", "random_seed")


def test_to_device_that_detaches_fails():
    def detaching(batch, device):  # right containers and values, but cut out of the autograd graph
        if isinstance(batch, torch.Tensor):
            return batch.detach().to(device)
        if isinstance(batch, dict):
            return {k: detaching(v, device) for k, v in batch.items()}
        if isinstance(batch, tuple) and hasattr(batch, "_fields"):
            return type(batch)(*(detaching(v, device) for v in batch))
        if isinstance(batch, (list, tuple)):
            return type(batch)(detaching(v, device) for v in batch)
        return batch

    assert_rejected("00.to_device", detaching, "requires_grad", "autograd graph")


def test_to_device_through_lightnings_private_walk_is_refused():
    from lightning_utilities.core.apply_func import _apply_to_collection_slow

    def answer(batch, device):
        return _apply_to_collection_slow(batch, torch.Tensor, lambda t: t.to(device))

    assert_rejected("00.to_device", answer, "write the walk over nested containers yourself")
