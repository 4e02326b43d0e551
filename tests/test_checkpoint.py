"""helpers.checkpoint: atomic, verified, pruned checkpoints and RNG states."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from helpers import checkpoint as ck
from helpers.checkpoint import (
    CheckpointError,
    CheckpointWarning,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
    verify_checkpoint,
)


def _state(step: int) -> dict:
    torch.manual_seed(step)
    model = nn.Linear(8, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(3, 8)).sum().backward()
    optimizer.step()
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step, "note": "x", "rng": rng_state()}


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def test_round_trip(tmp_path):
    state = _state(7)
    path = save_checkpoint(state, tmp_path / "run", step=7)
    assert path.name == "ckpt-00000007.pt" and path.parent == tmp_path / "run"
    assert _names(path.parent) == ["ckpt-00000007.pt", "ckpt-00000007.pt.sha256"]
    sidecar = (path.parent / "ckpt-00000007.pt.sha256").read_text()
    assert sidecar == f"{verify_checkpoint(path)}  ckpt-00000007.pt\n", "sha256sum-compatible sidecar"
    loaded = load_checkpoint(path)
    assert loaded["step"] == 7 and loaded["note"] == "x"
    for key, value in state["model"].items():
        assert torch.equal(loaded["model"][key], value)
    assert loaded["optimizer"]["param_groups"] == state["optimizer"]["param_groups"]
    assert torch.equal(loaded["optimizer"]["state"][0]["exp_avg"], state["optimizer"]["state"][0]["exp_avg"])
    assert torch.load(path, weights_only=True)["step"] == 7, "plain torch.load still reads the file"


def test_keep_last_prunes_oldest_after_saving(tmp_path):
    for step in (10, 20, 30, 40, 50):
        save_checkpoint({"step": step}, tmp_path, step=step, keep_last=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt-00000040.pt", "ckpt-00000050.pt"]
    assert len(list(tmp_path.glob("*.sha256"))) == 2, "pruning removes the checksum files too"
    assert latest_checkpoint(tmp_path).name == "ckpt-00000050.pt"


def test_prefixes_are_separate_and_the_new_one_is_never_pruned(tmp_path):
    for step in (10, 20, 30):
        save_checkpoint({"step": step}, tmp_path, step=step, keep_last=2)
    save_checkpoint({"best": True}, tmp_path, step=5, keep_last=1, prefix="best")
    assert [p.name for p in list_checkpoints(tmp_path, "best")] == ["best-00000005.pt"]
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt-00000020.pt", "ckpt-00000030.pt"]
    # Resumed from an earlier step: the checkpoint just written survives, the highest others are kept.
    save_checkpoint({"step": 15}, tmp_path, step=15, keep_last=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt-00000015.pt", "ckpt-00000020.pt", "ckpt-00000030.pt"]


def test_overwriting_a_step_replaces_file_and_checksum(tmp_path):
    save_checkpoint({"v": 1}, tmp_path, step=3)
    path = save_checkpoint({"v": 2}, tmp_path, step=3)
    assert load_checkpoint(path)["v"] == 2
    assert _names(tmp_path) == ["ckpt-00000003.pt", "ckpt-00000003.pt.sha256"]


def test_crash_during_write_leaves_previous_checkpoints_and_no_temp_files(tmp_path, monkeypatch):
    for step in (1, 2):
        save_checkpoint(_state(step), tmp_path, step=step, keep_last=2)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    real_save = torch.save

    def half_then_crash(obj, f, *args, **kwargs):
        import io

        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)
        f.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
        raise KeyboardInterrupt("simulated crash half-way through torch.save")

    monkeypatch.setattr(torch, "save", half_then_crash)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(_state(3), tmp_path, step=3, keep_last=2)
    monkeypatch.setattr(torch, "save", real_save)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before, "old checkpoints untouched, nothing new left"
    assert latest_checkpoint(tmp_path).name == "ckpt-00000002.pt"
    assert load_checkpoint(latest_checkpoint(tmp_path))["step"] == 2


def test_unpicklable_state_raises_and_changes_nothing(tmp_path):
    save_checkpoint({"step": 1}, tmp_path, step=1)
    before = _names(tmp_path)
    with pytest.raises(Exception):  # noqa: B017 - pickle raises AttributeError or PicklingError depending on the object
        save_checkpoint({"f": lambda: 0}, tmp_path, step=2)
    assert _names(tmp_path) == before


def test_truncated_checkpoint_is_detected_and_latest_falls_back(tmp_path):
    for step in (1, 2, 3):
        save_checkpoint(_state(step), tmp_path, step=step)
    newest = tmp_path / "ckpt-00000003.pt"
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"ckpt-00000003\.pt is corrupt.*latest_checkpoint"):
        load_checkpoint(newest)
    with pytest.warns(CheckpointWarning, match="ckpt-00000003"):
        fallback = latest_checkpoint(tmp_path)
    assert fallback.name == "ckpt-00000002.pt" and load_checkpoint(fallback)["step"] == 2
    assert latest_checkpoint(tmp_path, valid_only=False) == newest


def test_bit_flip_is_detected(tmp_path):
    path = save_checkpoint(_state(1), tmp_path, step=1)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint(path)


def test_missing_file_or_checksum_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "ckpt-00000001.pt")
    path = save_checkpoint({"step": 1}, tmp_path, step=1)
    (tmp_path / "ckpt-00000001.pt.sha256").unlink()
    with pytest.raises(CheckpointError, match="no checksum file"):
        load_checkpoint(path)
    (tmp_path / "ckpt-00000001.pt.sha256").write_text("not a digest\n")
    with pytest.raises(CheckpointError, match="malformed"):
        load_checkpoint(path)
    assert isinstance(CheckpointError("x"), RuntimeError)


def test_unsafe_content_is_refused_with_a_checkpoint_error(tmp_path):
    path = save_checkpoint({"acc": np.float64(0.5)}, tmp_path, step=1)  # a NumPy scalar needs an unsafe global
    with pytest.raises(CheckpointError, match="weights_only=True.*add_safe_globals") as info:
        load_checkpoint(path)
    assert "numpy" in str(info.value) and info.value.__cause__ is not None


def test_empty_or_missing_folder(tmp_path):
    assert list_checkpoints(tmp_path / "nope") == [] and latest_checkpoint(tmp_path / "nope") is None
    (tmp_path / "ckpt-1.pt").write_bytes(b"x")  # not 8 digits: not ours
    (tmp_path / ".ckpt-00000001.pt.abc.part").write_bytes(b"x")  # a leftover temp file
    assert list_checkpoints(tmp_path) == []


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"step": -1}, "step"),
        ({"step": 1.0}, "step"),
        ({"step": True}, "step"),
        ({"step": 1, "keep_last": 0}, "keep_last"),
        ({"step": 1, "keep_last": 2.5}, "keep_last"),
        ({"step": 1, "prefix": ""}, "prefix"),
        ({"step": 1, "prefix": "a/b"}, "prefix"),
        ({"step": 1, "prefix": ".hidden"}, "prefix"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        save_checkpoint({"x": 1}, tmp_path, **kwargs)
    assert not tmp_path.exists() or _names(tmp_path) == []


def test_state_must_be_a_dict(tmp_path):
    with pytest.raises(TypeError, match="dict"):
        save_checkpoint([1, 2], tmp_path, step=1)


def test_rng_state_round_trip_through_weights_only_file(tmp_path):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    np.random.standard_normal()  # leaves a cached gaussian in NumPy's state
    path = save_checkpoint({"rng": rng_state()}, tmp_path, step=0)
    expected = (random.random(), np.random.standard_normal(3).tolist(), np.random.rand(), torch.rand(3))
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    set_rng_state(load_checkpoint(path)["rng"])
    got = (random.random(), np.random.standard_normal(3).tolist(), np.random.rand(), torch.rand(3))
    assert got[:3] == expected[:3] and torch.equal(got[3], expected[3])


def test_rng_state_does_not_consume_randomness():
    torch.manual_seed(0)
    rng_state()
    a = torch.rand(2)
    torch.manual_seed(0)
    assert torch.equal(torch.rand(2), a)


def test_set_rng_state_validates():
    with pytest.raises(TypeError):
        set_rng_state([1])
    with pytest.raises(ValueError, match="unknown"):
        set_rng_state({"jax": 1})
    with pytest.raises(ValueError, match="torch"):
        set_rng_state({"torch": torch.zeros(3)})
    with pytest.raises(ValueError, match="python"):
        set_rng_state({"python": (3, "abc")})


def test_cuda_states_without_cuda_warn(monkeypatch):
    monkeypatch.setattr(ck.torch.cuda, "is_available", lambda: False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        set_rng_state({"cuda": [torch.zeros(16, dtype=torch.uint8)]})
    assert any("CUDA is not available" in str(w.message) for w in caught)
