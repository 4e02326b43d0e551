"""helpers.device: device choice, seeding, the doctor."""

from __future__ import annotations

import random

import pytest
import torch

from helpers.device import doctor, pick_device, seed_everything


def test_automatic_choice_prefers_accelerators(monkeypatch):
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    expected = "cuda" if torch.cuda.is_available() else ("mps" if torch.backends.mps.is_available() else "cpu")
    assert pick_device().type == expected


def test_automatic_choice_falls_back_to_cpu(monkeypatch):
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert pick_device() == torch.device("cpu")


def test_environment_variable_and_explicit_choice(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    assert pick_device() == torch.device("cpu")
    assert pick_device("cpu") == torch.device("cpu")


def test_missing_cuda_device_is_a_clear_error():
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(RuntimeError, match=rf"cuda:{n}.*{n} usable CUDA device"):
        pick_device(f"cuda:{n}")


def test_nonsense_device_name():
    with pytest.raises(ValueError, match="not a device name"):
        pick_device("banana")


def test_seeding_reproduces_python_and_torch_draws():
    seed_everything(7)
    first = (random.random(), torch.rand(3))
    seed_everything(7)
    second = (random.random(), torch.rand(3))
    assert first[0] == second[0] and torch.equal(first[1], second[1])
    g = seed_everything(8)
    assert not torch.equal(torch.rand(3), second[1])
    assert torch.equal(torch.rand(2, generator=g), torch.rand(2, generator=torch.Generator().manual_seed(8)))


@pytest.mark.parametrize("bad", [-1, 2**63, True, 1.5])
def test_bad_seed_rejected(bad):
    with pytest.raises(ValueError, match=r"\[0, 2\*\*63\)"):
        seed_everything(bad)


def test_doctor_survives_a_data_folder_that_does_not_exist_yet(isolated_dirs, monkeypatch):
    monkeypatch.setenv("COURSE_DATA_DIR", str(isolated_dirs / "no" / "such" / "deep" / "dir"))
    assert any(c.name == "disk" and c.status == "ok" for c in doctor(datasets=()).checks)


def test_doctor_passes_with_data_in_reach(isolated_dirs, monkeypatch):
    monkeypatch.delenv("COURSE_OFFLINE")  # data would be downloaded: a warning, not a failure
    report = doctor(datasets=("mnist",))
    names = [c.name for c in report.checks]
    for expected in ("python", "torch", "torchvision", "cuda", "c++ compiler", "ninja", "nvcc", "disk", "data: mnist"):
        assert expected in names
    assert report.ok
    assert str(report).splitlines()[-1].startswith("verdict: READY")


def test_doctor_warns_when_a_dataset_is_unreachable(isolated_dirs):
    report = doctor(datasets=("mnist",))  # offline, no mirror, empty data/
    assert report.ok, "a missing dataset breaks some chapters, not the environment"
    assert "with warnings" in report.verdict and "data: mnist" in report.verdict
    assert "make data" in str(report)


def test_doctor_fails_on_a_too_old_python(monkeypatch):
    import helpers.device as dev

    monkeypatch.setattr(dev.sys, "version_info", (3, 9, 0))
    report = doctor(datasets=())
    assert not report.ok and "NOT READY: fix python" in report.verdict
