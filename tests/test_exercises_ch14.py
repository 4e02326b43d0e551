"""Exercises of chapter 14: realistic wrong answers fail with a hint (the generic checks are in test_exercises.py)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from helpers.checkpoint import set_rng_state
from helpers.exercises import check, hint, solution
from tests.exercise_support import assert_rejected

# --------------------------------------------------------------------------
# 14.state_dict_diff
# --------------------------------------------------------------------------


def _diff(a, b, same):
    out = {"missing": [k for k in a if k not in b], "unexpected": [k for k in b if k not in a], "shape": [], "changed": []}
    for k in a:
        if k in b:
            if a[k].shape != b[k].shape:
                out["shape"].append(k)
            elif not same(a[k], b[k]):
                out["changed"].append(k)
    return out


def test_diff_with_allclose_fails():
    assert_rejected("14.state_dict_diff", lambda a, b: _diff(a, b, lambda x, y: torch.allclose(x, y)), "torch.equal", "allclose")


def test_diff_by_identity_fails():
    assert_rejected("14.state_dict_diff", lambda a, b: _diff(a, b, lambda x, y: x is y), "is")


def test_diff_ignoring_dtype_fails():
    assert_rejected("14.state_dict_diff", lambda a, b: _diff(a, b, torch.equal), "dtype")


def test_diff_without_shape_check_fails():
    def no_shape(a, b):
        out = {"missing": [k for k in a if k not in b], "unexpected": [k for k in b if k not in a], "shape": []}
        out["changed"] = [k for k in a if k in b and (a[k].dtype != b[k].dtype or not torch.equal(a[k], b[k]))]
        return out

    assert_rejected("14.state_dict_diff", no_shape, "shape")


def test_diff_listing_a_shape_mismatch_also_as_changed_fails():
    def shape_and_changed(a, b):  # two independent checks where the second should be skipped
        out = {"missing": [k for k in a if k not in b], "unexpected": [k for k in b if k not in a], "shape": [], "changed": []}
        for k in a:
            if k in b:
                if a[k].shape != b[k].shape:
                    out["shape"].append(k)
                if a[k].dtype != b[k].dtype or not torch.equal(a[k], b[k]):
                    out["changed"].append(k)
        return out

    result = assert_rejected("14.state_dict_diff", shape_and_changed, "under 'changed', but their shapes differ", "'shape' only")
    assert "is` or id()" not in result.message, result.message


def test_diff_treating_nan_as_equal_to_itself_fails():
    def nan_equal(x, y):
        return x.dtype == y.dtype and torch.allclose(x, y, rtol=0, atol=0, equal_nan=True)

    assert_rejected("14.state_dict_diff", lambda a, b: _diff(a, b, nan_equal), "NaN", "torch.equal")


def test_diff_comparing_bits_misses_the_nan_rule():
    def same_bits(x, y):
        return x.dtype == y.dtype and torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8))

    assert_rejected("14.state_dict_diff", lambda a, b: _diff(a, b, same_bits), "NaN")


def test_diff_with_missing_and_unexpected_swapped_fails():
    def swapped(a, b):
        out = solution("14.state_dict_diff")(a, b)
        out["missing"], out["unexpected"] = out["unexpected"], out["missing"]
        return out

    assert_rejected("14.state_dict_diff", swapped, "swapped")


def test_diff_with_wrong_keys_fails():
    def load_state_dict_names(a, b):
        out = solution("14.state_dict_diff")(a, b)
        return {"missing_keys": out["missing"], "unexpected_keys": out["unexpected"], "shape": out["shape"], "changed": out["changed"]}

    assert_rejected("14.state_dict_diff", load_state_dict_names, "exactly the keys")


def test_diff_returning_sets_or_sorted_lists_is_accepted():
    def as_sets(a, b):
        return {k: sorted(v) for k, v in solution("14.state_dict_diff")(a, b).items()}

    assert check("14.state_dict_diff", as_sets, show=False).passed


# --------------------------------------------------------------------------
# 14.resume
# --------------------------------------------------------------------------


def _partial_resume(*, model=True, optimizer=True, scheduler=True, scaler=True, rng=True, offset=0):
    def resume(checkpoint, m, o, s, sc):
        if model:
            m.load_state_dict(checkpoint["model"])
        if optimizer:
            o.load_state_dict(checkpoint["optimizer"])
        if scheduler:
            s.load_state_dict(checkpoint["scheduler"])
        if scaler:
            sc.load_state_dict(checkpoint["scaler"])
        if rng:
            set_rng_state(checkpoint["rng"])
        return checkpoint["step"] + offset

    return resume


@pytest.mark.parametrize(
    ("left_out", "words"),
    [
        ("rng", ("torch random-number generator", "dropout")),
        ("scheduler", ("scheduler restarted",)),
        ("optimizer", ("optimizer's state", "moving averages")),
        ("scaler", ("GradScaler", "not restored")),
        ("model", ("model's weights", "random initial weights")),
    ],
)
def test_resume_forgetting_one_piece_fails_with_a_hint_that_names_no_code(left_out, words):
    assert_rejected("14.resume", _partial_resume(**{left_out: False}), *words)
    fuller = hint("14.resume", show=False)  # the second tier: names the concept, not the line to write
    assert f"checkpoint[{left_out!r}]" in fuller or left_out == "model", fuller
    for code in (".load_state_dict(", "set_rng_state(", "set_state(", "setstate("):
        assert code not in fuller, f"the fuller hint should not paste the solution's code ({code!r}): {fuller}"


def test_resume_returning_the_next_step_plus_one_fails():
    assert_rejected("14.resume", _partial_resume(offset=1), "continues at step")


def test_resume_returning_the_step_as_a_tensor_fails():
    ref = solution("14.resume")

    def tensor_step(checkpoint, model, optimizer, scheduler, scaler):
        return torch.tensor(ref(checkpoint, model, optimizer, scheduler, scaler))

    assert_rejected("14.resume", tensor_step, "Python int, got Tensor")


def test_resume_returning_nothing_fails():
    def no_return(checkpoint, m, o, s, sc):
        _partial_resume()(checkpoint, m, o, s, sc)

    assert_rejected("14.resume", no_return, "None")


def _resume_with_rng(restore_rng):
    def resume(checkpoint, m, o, s, sc):
        _partial_resume(rng=False)(checkpoint, m, o, s, sc)
        restore_rng(checkpoint["rng"])
        return checkpoint["step"]

    return resume


def test_resume_restoring_only_the_torch_rng_fails():
    only_torch = _resume_with_rng(lambda rng: torch.set_rng_state(rng["torch"]))
    assert_rejected("14.resume", only_torch, "Python's random and NumPy's", "only torch's")


def test_resume_forgetting_only_pythons_rng_fails():
    without_python = _resume_with_rng(lambda rng: set_rng_state({k: v for k, v in rng.items() if k != "python"}))
    assert_rejected("14.resume", without_python, "Python's random global generator")


def test_resume_forgetting_only_numpys_rng_fails():
    without_numpy = _resume_with_rng(lambda rng: set_rng_state({k: v for k, v in rng.items() if k != "numpy"}))
    assert_rejected("14.resume", without_numpy, "NumPy's global generator")


def test_resume_checker_leaves_the_global_generators_alone():
    def draws():
        return random.random(), np.random.rand(3).tolist(), torch.rand(3).tolist()

    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    expected = draws()
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    assert check("14.resume", solution("14.resume"), show=False).passed
    assert draws() == expected


# --------------------------------------------------------------------------
# 14.inference_state
# --------------------------------------------------------------------------


def test_inference_converting_integer_buffers_fails():
    assert_rejected("14.inference_state", lambda ckpt, dtype: {k: v.to(dtype) for k, v in ckpt["model"].items()}, "integer buffer")


def test_inference_keeping_views_fails():
    def views(ckpt, dtype):
        return {k: v.to(dtype) if v.is_floating_point() else v for k, v in ckpt["model"].items()}

    result = assert_rejected("14.inference_state", views, "views into a larger buffer", "memory of its own")
    assert ".clone()" not in result.message, "the hint names the concept, not the code"


def test_inference_views_into_one_shared_buffer_fail():
    """Every float tensor a view into one torch.cat buffer: the file is compact, but the tensors are not."""
    def one_buffer(ckpt, dtype):
        floats = [v for v in ckpt["model"].values() if v.is_floating_point()]
        flat = torch.cat([v.to(dtype).flatten() for v in floats])
        out, start = {}, 0
        for k, v in ckpt["model"].items():
            if v.is_floating_point():
                out[k] = flat[start:start + v.numel()].view(v.shape)
                start += v.numel()
            else:
                out[k] = v.clone()
        return out

    result = assert_rejected("14.inference_state", one_buffer, "views into a larger storage", "hidden.weight", "bytes")
    assert "clone" not in result.message, "the hint names the concept, not the code"


def test_inference_keeping_the_whole_checkpoint_fails():
    def everything(ckpt, dtype):
        return {k: v.clone() for k, v in ckpt["model"].items()} | {"optimizer": ckpt["optimizer"]}

    assert_rejected("14.inference_state", everything, "extra")


def test_inference_converting_in_place_fails():
    def in_place(ckpt, dtype):
        for k, v in ckpt["model"].items():
            if v.is_floating_point():
                ckpt["model"][k] = v.to(dtype).clone()
        return ckpt["model"]

    assert_rejected("14.inference_state", in_place, "unchanged")


def _maybe_shared(v, dtype):
    """Converts floats, and copies only what is a view into a larger buffer: the rest may be the checkpoint's own tensor."""
    t = v.to(dtype) if v.is_floating_point() else v
    return t.clone() if t.untyped_storage().nbytes() > t.nbytes else t


def test_inference_sharing_memory_with_the_checkpoint_fails():
    result = assert_rejected(
        "14.inference_state", lambda ckpt, dtype: {k: _maybe_shared(v, dtype) for k, v in ckpt["model"].items()},
        "share memory with the checkpoint", "memory of their own",
    )
    assert "num_batches_tracked" in result.message, result.message
    assert ".clone()" not in result.message, "the hint names the concept, not the code"


def test_inference_sharing_only_the_integer_buffer_fails():
    def int_buffer_shared(ckpt, dtype):
        return {k: v.to(dtype).clone() if v.is_floating_point() else v for k, v in ckpt["model"].items()}

    result = assert_rejected("14.inference_state", int_buffer_shared, "share memory", "integer buffers")
    assert "float16" in result.message and "num_batches_tracked" in result.message, result.message


def test_resume_always_loading_the_scaler_state_fails_on_a_disabled_scalers_checkpoint():
    """Pitfall 3: {} from a disabled scaler, loaded into an enabled one, raises RuntimeError (issue 17)."""
    result = assert_rejected("14.resume", _partial_resume(), "GradScaler disabled", "raised RuntimeError")
    assert "if checkpoint" not in result.message, "tier 1 names the case, not the fix"


def test_resume_giving_a_disabled_scaler_a_made_up_state_fails():
    def made_up(checkpoint, m, o, s, sc):
        state = checkpoint["scaler"] or {"scale": 1.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                                         "growth_interval": 2, "_growth_tracker": 0}
        _partial_resume()({**checkpoint, "scaler": state}, m, o, s, sc)
        return checkpoint["step"]

    assert_rejected("14.resume", made_up, "should keep its fresh state")


def test_resume_skipping_an_empty_scaler_state_is_accepted():
    def skipping(checkpoint, m, o, s, sc):
        _partial_resume(scaler=False)(checkpoint, m, o, s, sc)
        if len(checkpoint["scaler"]) > 0:
            sc.load_state_dict(checkpoint["scaler"])
        return checkpoint["step"]

    assert check("14.resume", skipping, show=False).passed


def test_resume_task_states_the_disabled_scaler_case():
    from helpers.exercises import EXERCISES

    assert "'scaler': {}" in EXERCISES["14.resume"].task
