"""Exercises of chapter 14 (saving, loading, checkpoints): checkers and reference solutions."""

from __future__ import annotations

import io
import random
import warnings
from collections import OrderedDict

import torch
from torch import nn

from ..checkpoint import rng_state, set_rng_state
from . import Hint, exercise, expect_type

# --------------------------------------------------------------------------
# 14.state_dict_diff
# --------------------------------------------------------------------------

_DIFF_KEYS = ("missing", "unexpected", "shape", "changed")


def _state_dict_diff(a: dict, b: dict) -> dict[str, list[str]]:
    """How state_dict ``b`` differs from state_dict ``a``.

    Args:
        a: the reference, e.g. ``model.state_dict()`` (name -> tensor).
        b: the other one, e.g. a checkpoint's ``"model"`` entry.

    Returns:
        A dict with four lists of key names:

        - ``"missing"``: in ``a`` but not in ``b`` (what ``a``'s model would
          report as missing keys when loading ``b``), in ``a``'s order;
        - ``"unexpected"``: in ``b`` but not in ``a``, in ``b``'s order;
        - ``"shape"``: in both, with different shapes;
        - ``"changed"``: in both with the same shape, but a different dtype or
          values that are not exactly equal (``torch.equal``, no tolerance), in
          ``a``'s order. Being a value comparison, ``0.0`` equals ``-0.0`` and a
          NaN never equals itself, so a tensor holding NaN counts as changed
          even against an identical copy.

        Neither input is modified.
    """
    diff: dict[str, list[str]] = {key: [] for key in _DIFF_KEYS}
    for key, x in a.items():
        if key not in b:
            diff["missing"].append(key)
        elif x.shape != b[key].shape:
            diff["shape"].append(key)
        elif x.dtype != b[key].dtype or not torch.equal(x, b[key]):
            diff["changed"].append(key)
    diff["unexpected"] = [key for key in b if key not in a]
    return diff


def _diff_case(g: torch.Generator):
    a = OrderedDict(
        [
            ("encoder.weight", torch.randn(4, 3, generator=g)),
            ("encoder.bias", torch.randn(4, generator=g)),
            ("norm.weight", torch.ones(4)),
            ("norm.running_mean", torch.randn(4, generator=g)),
            ("norm.num_batches_tracked", torch.tensor(12)),
            ("head.weight", torch.randn(2, 4, generator=g)),
            ("head.bias", torch.zeros(2)),
        ]
    )
    b = OrderedDict((k, v.clone()) for k, v in a.items())  # equal values, different tensor objects
    return a, b


@exercise(
    "14.state_dict_diff",
    "return {'missing': [...], 'unexpected': [...], 'shape': [...], 'changed': [...]}: the keys of state_dict a "
    "absent from b, the keys of b absent from a, the keys in both with different shapes, and the keys in both with "
    "the same shape but a different dtype or values that are not exactly equal (no tolerance; as in torch.equal, a "
    "NaN never equals itself, so a tensor holding NaN counts as changed).",
    reference=_state_dict_diff,
    hint="Walk a's keys in order and ask three questions of each: is it in b at all, do the shapes agree, "
         "and do dtype and values agree exactly (torch.equal); then walk b for the keys that a lacks. "
         "Compare shapes before values, since == broadcasts a [1, 4] against a [4], and compare dtypes "
         "separately, since torch.equal promotes them.",
)
def _test_state_dict_diff(candidate) -> None:
    g = torch.Generator().manual_seed(14)

    def run(label, a, b, want):
        a_before = [(k, v.clone()) for k, v in a.items()]
        got = candidate(a, b)
        if got is None:
            raise AssertionError("return the dict of four lists (your function returned None)")
        if not isinstance(got, dict) or set(got) != set(_DIFF_KEYS):
            keys = sorted(got) if isinstance(got, dict) else type(got).__name__
            raise AssertionError(f"return a dict with exactly the keys {list(_DIFF_KEYS)}; got {keys}")
        if [k for k, _ in a_before] != list(a) or any(not _unchanged(v, a[k]) for k, v in a_before):
            raise AssertionError("leave the input state_dicts unchanged")
        for name in _DIFF_KEYS:
            values = list(got[name])
            if any(not isinstance(v, str) for v in values):
                raise AssertionError(f"got[{name!r}] should list key names (str), got {values!r}")
            if len(set(values)) != len(values):
                raise AssertionError(f"got[{name!r}] lists a key twice: {values}")
        got_sets = {name: set(got[name]) for name in _DIFF_KEYS}
        want_sets = {name: set(want[name]) for name in _DIFF_KEYS}
        if got_sets == want_sets:
            return
        if got_sets["missing"] == want_sets["unexpected"] and got_sets["unexpected"] == want_sets["missing"] and want_sets["missing"]:
            raise AssertionError(
                f"{label}: 'missing' and 'unexpected' are swapped. a is the reference (your model): 'missing' are "
                f"keys of a that b lacks, 'unexpected' keys of b that a lacks, as in load_state_dict's report"
            )
        shape_as_changed = got_sets["changed"] & want_sets["shape"]
        if shape_as_changed:
            raise AssertionError(
                f"{label}: you list {sorted(shape_as_changed)} under 'changed', but their shapes differ "
                f"({[(tuple(a[k].shape), tuple(b[k].shape)) for k in sorted(shape_as_changed)]}). A key whose shapes "
                "differ belongs under 'shape' only: 'changed' is for tensors of the same shape"
            )
        if want_sets["shape"] and not got_sets["shape"] & want_sets["shape"]:
            raise AssertionError(
                f"{label}: {sorted(want_sets['shape'])} should be under 'shape': the tensors have different shapes "
                f"{[tuple(a[k].shape) for k in want['shape']]} vs {[tuple(b[k].shape) for k in want['shape']]}. "
                "Compare .shape before comparing values (== broadcasts a [1, 4] against a [4])"
            )
        wrongly_changed = got_sets["changed"] - want_sets["changed"]
        if wrongly_changed:
            raise AssertionError(
                f"{label}: you report {sorted(wrongly_changed)} as changed, but they hold equal values in "
                "different tensor objects. Compare values with torch.equal, not with `is` or id()"
            )
        missed = want_sets["changed"] - got_sets["changed"]
        nan_missed = {k for k in missed if a[k].is_floating_point() and bool(a[k].isnan().any())}
        if nan_missed:
            raise AssertionError(
                f"{label}: {sorted(nan_missed)} holds NaN, and you did not report it as changed. The task compares "
                "values as torch.equal does: NaN is not equal to anything, itself included, so the tensor counts as "
                "changed even against an identical copy"
            )
        dtype_missed = {k for k in missed if a[k].dtype != b[k].dtype}
        if dtype_missed:
            raise AssertionError(
                f"{label}: {sorted(dtype_missed)} changed dtype ({a[next(iter(dtype_missed))].dtype} -> "
                f"{b[next(iter(dtype_missed))].dtype}) but you did not report it: torch.equal promotes dtypes "
                "before comparing, so check x.dtype != y.dtype as well"
            )
        if missed:
            raise AssertionError(
                f"{label}: {sorted(missed)} changed by a tiny amount and you missed it. A checkpoint's values are "
                "either exactly equal or not: compare with torch.equal; allclose / isclose hide small changes"
            )
        raise AssertionError(f"{label}: expected {want}, got { {k: list(v) for k, v in got.items()} }")

    a, b = _diff_case(g)
    run("two equal state_dicts (cloned tensors)", a, b, {k: [] for k in _DIFF_KEYS})

    a, b = _diff_case(g)
    b["head.weight"] = torch.nextafter(b["head.weight"], torch.full_like(b["head.weight"], 1e9))  # one ulp up
    b["norm.running_mean"][2] += 0.5
    run("two values changed", a, b, {"missing": [], "unexpected": [], "shape": [], "changed": ["norm.running_mean", "head.weight"]})

    a, b = _diff_case(g)
    del b["head.bias"]
    b["classifier.bias"] = torch.zeros(2)
    run("a renamed layer", a, b, {"missing": ["head.bias"], "unexpected": ["classifier.bias"], "shape": [], "changed": []})

    a, b = _diff_case(g)
    b["head.weight"] = torch.randn(5, 4, generator=g)  # 5 classes instead of 2
    b["encoder.bias"] = b["encoder.bias"].clone().unsqueeze(0)  # [1, 4]: same values, broadcasts against [4]
    run("new shapes", a, b, {"missing": [], "unexpected": [], "shape": ["encoder.bias", "head.weight"], "changed": []})

    a, b = _diff_case(g)
    b["norm.running_mean"] = b["norm.running_mean"].double()
    run("a buffer saved in float64", a, b, {"missing": [], "unexpected": [], "shape": [], "changed": ["norm.running_mean"]})

    a, b = _diff_case(g)
    a["norm.running_mean"][1] = float("nan")  # a diverged run; b gets an identical copy
    b["norm.running_mean"] = a["norm.running_mean"].clone()
    run("a buffer holding NaN, against an identical copy", a, b,
        {"missing": [], "unexpected": [], "shape": [], "changed": ["norm.running_mean"]})

    a = _diff_case(g)[0]
    run("a against an empty dict", a, {}, {"missing": list(a), "unexpected": [], "shape": [], "changed": []})


def _unchanged(before: torch.Tensor, after: torch.Tensor) -> bool:
    """Same dtype, shape and values, NaN matching NaN (to see whether a candidate modified its input)."""
    if before.dtype != after.dtype or before.shape != after.shape:
        return False
    return bool(((before == after) | (before.isnan() & after.isnan())).all())


# --------------------------------------------------------------------------
# 14.resume
# --------------------------------------------------------------------------


def _resume(checkpoint: dict, model: nn.Module, optimizer, scheduler, scaler) -> int:
    """Restore everything a training run needs from ``checkpoint``; return the step to continue from.

    Args:
        checkpoint: a dict with ``"model"``, ``"optimizer"``, ``"scheduler"``
            and ``"scaler"`` (their ``state_dict()``s), ``"step"`` (optimizer
            steps already taken, int) and ``"rng"`` (from
            :func:`helpers.checkpoint.rng_state`).
        model, optimizer, scheduler, scaler: freshly built objects of the same
            kinds, e.g. in a new process after a crash.

    Returns:
        ``checkpoint["step"]``: the index of the next step to run.

    A run with the GradScaler disabled saves ``"scaler": {}`` (the chapter's pitfall 3); an enabled
    scaler refuses to load that, so an empty state is skipped and the fresh scaler keeps its own.
    """
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    if checkpoint["scaler"]:
        scaler.load_state_dict(checkpoint["scaler"])
    set_rng_state(checkpoint["rng"])
    return checkpoint["step"]


_RESUME_STEPS, _CRASH_AT = 12, 5


def _resume_objects(seed: int):
    import numpy as np

    torch.manual_seed(seed)  # every global generator, as a new process's seed_everything would
    random.seed(seed)
    np.random.seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", growth_interval=2)  # enabled, so that its state changes
    return model, optimizer, scheduler, scaler


def _resume_train(model, optimizer, scheduler, scaler, start: int, stop: int) -> list[torch.Tensor]:
    import numpy as np

    losses = []
    model.train()
    for step in range(start, stop):
        g = torch.Generator().manual_seed(1000 + step)  # the data of each step depends only on the step
        x, y = torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
        # "augmentation" from the other global generators, as real pipelines do:
        x = x * (1.0 + 0.1 * random.random()) + torch.from_numpy(np.random.normal(0.0, 0.05, size=(8, 6))).float()
        loss = nn.functional.cross_entropy(model(x), y)  # dropout draws from the global torch RNG
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        losses.append(loss.detach())
    return losses


@exercise(
    "14.resume",
    "write resume(checkpoint, model, optimizer, scheduler, scaler) -> int: restore the model, optimizer, scheduler, "
    "GradScaler and random-generator states from the checkpoint dict (keys 'model', 'optimizer', 'scheduler', "
    "'scaler', 'step', 'rng') into the fresh objects, and return the step to continue from. A checkpoint written "
    "with the GradScaler disabled holds 'scaler': {} (pitfall 3); resumed into an enabled scaler, that scaler "
    "keeps its fresh state.",
    reference=_resume,
    hint="Each of the four objects has a state_dict() for saving and a matching load_state_dict() that "
         "restores it (section 'A full checkpoint, and resuming exactly'). The random generators need "
         "restoring too, all of them, with the helpers.checkpoint function that undoes rng_state(), and "
         "the saved step is already the index of the next step to run.",
)
def _test_resume(candidate) -> None:
    import numpy as np

    states = random.getstate(), np.random.get_state(), torch.get_rng_state()  # the learner's, put back afterwards
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _check_resume(candidate)
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])


def _check_resume(candidate) -> None:
    import numpy as np

    objects = _resume_objects(seed=0)
    reference = _resume_train(*objects, 0, _RESUME_STEPS)
    final_reference = {k: v.clone() for k, v in objects[0].state_dict().items()}

    objects = _resume_objects(seed=0)
    _resume_train(*objects, 0, _CRASH_AT)
    model, optimizer, scheduler, scaler = objects
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict(),
        "step": _CRASH_AT,
        "rng": rng_state(),
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    checkpoint = torch.load(buffer, weights_only=True)  # as if read back from disk
    saved_rng = checkpoint["rng"]["torch"].clone()
    saved_python, saved_numpy = random.getstate(), np.random.get_state()

    fresh = _resume_objects(seed=99)  # the "new process": other random states, other initial weights
    torch.manual_seed(777)
    step = candidate(checkpoint, *fresh)
    model, optimizer, scheduler, scaler = fresh

    restores = "Each of these objects has a state_dict() when saving and a matching method that restores it."
    if step is None:
        raise AssertionError("return the step to continue from (checkpoint['step']); your function returned None")
    expect_type(step, int, "the step you returned")
    if step != _CRASH_AT:
        raise AssertionError(
            f"return the index of the next step to run: the checkpoint was saved after {_CRASH_AT} steps "
            f"(steps 0..{_CRASH_AT - 1}), so training continues at step {_CRASH_AT}; you returned {step!r}"
        )
    if any(not torch.equal(p, checkpoint["model"][k]) for k, p in model.state_dict().items()):
        raise Hint(
            "after your resume, the model's weights differ from the checkpoint's: the fresh model still has its "
            "random initial weights.",
            f"The model's weights are saved in checkpoint['model']. {restores}",
        )
    opt_state = optimizer.state_dict()["state"]
    if not opt_state or not torch.equal(opt_state[0]["exp_avg"], checkpoint["optimizer"]["state"][0]["exp_avg"]):
        raise Hint(
            "the optimizer's state (AdamW's moving averages of the gradients and their squares, its step counts) "
            "was not restored, so the next updates behave like those at the start of a new run.",
            f"It is saved in checkpoint['optimizer']. {restores}",
        )
    if scheduler.last_epoch != checkpoint["scheduler"]["last_epoch"] or scheduler.get_last_lr() != checkpoint["scheduler"]["_last_lr"]:
        raise Hint(
            f"the learning-rate scheduler restarted (last_epoch {scheduler.last_epoch}, learning rate "
            f"{scheduler.get_last_lr()}) instead of continuing (last_epoch {checkpoint['scheduler']['last_epoch']}, "
            f"{checkpoint['scheduler']['_last_lr']}).",
            f"Its position in the schedule is saved in checkpoint['scheduler']. {restores}",
        )
    if scaler.get_scale() != checkpoint["scaler"]["scale"]:
        raise Hint(
            f"the GradScaler's loss scale is {scaler.get_scale()}, a fresh scaler's, but the run had reached "
            f"{checkpoint['scaler']['scale']}: the scaler was not restored.",
            f"Its scale and growth tracker are saved in checkpoint['scaler']. {restores}",
        )
    rng_more = (
        "checkpoint['rng'] holds the states of Python's, NumPy's and torch's global generators (and CUDA's) "
        "as helpers.checkpoint.rng_state() saved them; that module has the function that restores them all."
    )
    if not torch.equal(torch.get_rng_state(), saved_rng):
        raise Hint(
            "the global torch random-number generator was not restored, so dropout will draw different masks "
            "than the uninterrupted run.",
            rng_more,
        )
    if random.getstate() != saved_python or not _same_numpy_state(np.random.get_state(), saved_numpy):
        which = [name for name, ok in (("Python's random", random.getstate() == saved_python),
                                       ("NumPy's", _same_numpy_state(np.random.get_state(), saved_numpy))) if not ok]
        raise Hint(
            f"{' and '.join(which)} global generator was not restored, only torch's: augmentation or sampling "
            "that draws from it differs from the uninterrupted run.",
            rng_more,
        )
    resumed = _resume_train(model, optimizer, scheduler, scaler, step, _RESUME_STEPS)
    for offset, (got, want) in enumerate(zip(resumed, reference[_CRASH_AT:])):
        if not torch.equal(got, want):
            raise AssertionError(
                f"after resuming, the loss of step {_CRASH_AT + offset} is {got.item():.8f}, the uninterrupted run's "
                f"{want.item():.8f}: something else must be restored"
            )
    if any(not torch.equal(p, final_reference[k]) for k, p in model.state_dict().items()):
        raise AssertionError("the final weights differ from the uninterrupted run's")
    _check_resume_disabled_scaler(candidate, checkpoint)


def _check_resume_disabled_scaler(candidate, checkpoint: dict) -> None:
    """Pitfall 3: a checkpoint of a run without a GradScaler (``"scaler": {}``), resumed into an enabled one."""
    no_scaler = {**checkpoint, "scaler": {}}
    fresh = _resume_objects(seed=99)
    want = fresh[3].state_dict()  # the fresh, enabled scaler's own state
    where = ("for a checkpoint written with the GradScaler disabled (its 'scaler' entry is {}, as in the chapter's "
             "pitfall 3), resumed into an enabled scaler")
    more = ("A disabled scaler has no state to save; an enabled one refuses to load an empty state. Restore the "
            "scaler only when the checkpoint holds a state for it, and let the fresh scaler start from its own "
            "default scale otherwise.")
    try:
        candidate(no_scaler, *fresh)
    except RuntimeError as exc:
        raise Hint(f"{where}, your function raised RuntimeError: {str(exc).splitlines()[0]}", more) from exc
    got = fresh[3].state_dict()
    if got != want:
        raise Hint(f"{where}, the scaler should keep its fresh state {want}; after your resume it is {got}", more)
    if any(not torch.equal(p, checkpoint["model"][k]) for k, p in fresh[0].state_dict().items()):
        raise AssertionError(f"{where}, the model's weights were not restored")


def _same_numpy_state(a: tuple, b: tuple) -> bool:
    """Two np.random.get_state() tuples (name, keys array, pos, has_gauss, cached_gaussian) are equal."""
    import numpy as np

    return a[0] == b[0] and np.array_equal(a[1], b[1]) and tuple(a[2:]) == tuple(b[2:])


# --------------------------------------------------------------------------
# 14.inference_state
# --------------------------------------------------------------------------


def _inference_state(checkpoint: dict, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The part of a training checkpoint that inference needs, compact and in ``dtype``.

    Args:
        checkpoint: a training checkpoint with a ``"model"`` state_dict (and
            usually an optimizer, scheduler, RNG states, ... that inference
            does not need).
        dtype: a floating-point dtype, e.g. ``torch.float16`` or ``torch.float32``.

    Returns:
        A new dict with the keys of ``checkpoint["model"]`` only: floating-point
        tensors converted to ``dtype``, other tensors (e.g. BatchNorm's int64
        ``num_batches_tracked``) with their dtype unchanged. Each tensor owns
        exactly its own elements (``torch.save`` of a view writes the view's
        whole underlying storage), so the saved file holds nothing extra. The
        checkpoint is left unchanged.
    """
    out = {}
    for key, value in checkpoint["model"].items():
        if value.is_floating_point():
            value = value.to(dtype)
        out[key] = value.detach().clone(memory_format=torch.contiguous_format)
    return out


def _inference_case() -> dict:
    g = torch.Generator().manual_seed(140)
    flat = torch.randn(64 * 32 + 32 + 10 * 64 + 10 + 20_000, generator=g)  # one big buffer, as some optimizers keep
    sizes = [64 * 32, 32, 10 * 64, 10]
    w1, b1, w2, b2 = torch.split(flat[: sum(sizes)], sizes)
    model = OrderedDict(
        [
            ("hidden.weight", w1.view(32, 64)),  # views into `flat`
            ("hidden.bias", b1),
            ("norm.running_mean", torch.randn(32, generator=g)),
            ("norm.num_batches_tracked", torch.tensor(300)),
            ("out.weight", w2.view(10, 64)),
            ("out.bias", b2),
        ]
    )
    exp_avg = {i: torch.randn(5000, generator=g) for i in range(4)}
    return {"model": model, "optimizer": {"state": exp_avg, "param_groups": []}, "step": 300, "rng": {"torch": torch.get_rng_state()}}


def _saved_bytes(obj) -> int:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return len(buffer.getvalue())


@exercise(
    "14.inference_state",
    "write inference_state(checkpoint, dtype) -> dict: the entries of checkpoint['model'] only, floating-point tensors "
    "converted to dtype, other tensors unchanged, each a compact copy (no view into a larger storage, no memory "
    "shared with the checkpoint's tensors), the "
    "checkpoint left unchanged.",
    reference=_inference_state,
    hint="Loop over checkpoint['model'] only and convert just the tensors for which is_floating_point() "
         "holds; then make every result an independent, contiguous copy. .to(dtype) hands back the very "
         "same tensor when the dtype already matches (always for integer buffers), and a view keeps its "
         "base's whole storage, which torch.save writes in full: the 4 MB file for 10 floats of section "
         "'What to save'.",
)
def _test_inference_state(candidate) -> None:
    shared_memory = None  # (dtype, keys) of the first result that shares memory with the checkpoint
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        checkpoint = _inference_case()
        before = {k: v.clone() for k, v in checkpoint["model"].items()}
        got = candidate(checkpoint, dtype)
        if got is None:
            raise AssertionError("return the new dict (your function returned None)")
        if not isinstance(got, dict):
            raise AssertionError(f"return a dict of name -> tensor, got {type(got).__name__}")
        if any(not torch.equal(v, before[k]) or v.dtype != before[k].dtype for k, v in checkpoint["model"].items()):
            raise AssertionError("leave the checkpoint unchanged: convert copies, not the checkpoint's own tensors (no in-place .half_())")
        if set(got) != set(before):
            extra = sorted(set(got) - set(before))
            raise AssertionError(
                f"keep exactly the keys of checkpoint['model'] (the model's state_dict); "
                f"{'extra: ' + str(extra) if extra else 'missing: ' + str(sorted(set(before) - set(got)))}"
            )
        for key, original in before.items():
            value = got[key]
            if not isinstance(value, torch.Tensor):
                raise AssertionError(f"got[{key!r}] should be a tensor, got {type(value).__name__}")
            if not original.is_floating_point():
                if value.dtype != original.dtype:
                    raise AssertionError(
                        f"{key!r} is an integer buffer ({original.dtype}); converting it to {value.dtype} changes its meaning "
                        "and load_state_dict would copy it back anyway: convert only tensors where .is_floating_point()"
                    )
            elif value.dtype != dtype:
                raise AssertionError(f"{key!r} should be {dtype}, got {value.dtype}")
            if not torch.equal(value, original.to(value.dtype)):
                raise AssertionError(f"the values of {key!r} changed beyond the dtype conversion")
        compact = _saved_bytes(_inference_state(_inference_case(), dtype))
        size = _saved_bytes(got)
        if size > compact + 4096:
            raise AssertionError(
                f"with dtype={dtype} your result saves to {size:,} bytes, a compact copy to {compact:,}. Some tensors "
                "are views into a larger buffer, and torch.save writes a view's whole storage (and .to(dtype) returns "
                "the tensor itself when the dtype already matches): each result needs memory of its own"
            )
        # Views that together fill one buffer of their own save compactly, but are still views into a larger storage.
        in_larger = [key for key, value in got.items() if value.untyped_storage().nbytes() > value.nbytes]
        if in_larger:
            key = in_larger[0]
            raise Hint(
                f"with dtype={dtype}, {len(in_larger)} of your tensors are views into a larger storage: {key!r} has "
                f"{got[key].nbytes:,} bytes of elements, its storage {got[key].untyped_storage().nbytes():,} bytes. The "
                "task asks for compact copies, each owning exactly its own elements, not slices of one shared buffer.",
                "A view shares its storage with its base; loading or saving one of them alone carries the whole "
                "buffer, and changing one changes the others. Give every entry a storage of its own: "
                "untyped_storage().nbytes() equal to the tensor's nbytes.",
            )
        checkpoint_memory = {v.untyped_storage().data_ptr() for v in checkpoint["model"].values()} - {0}
        shared = [key for key, value in got.items() if value.untyped_storage().data_ptr() in checkpoint_memory]
        if shared and shared_memory is None:
            shared_memory = (dtype, shared)
    if shared_memory is not None:  # reported after the size checks of every dtype, which are more specific
        dtype, shared = shared_memory
        raise AssertionError(
            f"with dtype={dtype}, {shared} share memory with the checkpoint's own tensors: changing one changes the "
            "other, and the result is not a copy. .to(dtype) returns the tensor itself when the dtype already "
            "matches (always for integer buffers), so those results need memory of their own as well"
        )
