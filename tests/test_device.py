"""helpers.device: device choice, seeding, the doctor."""

from __future__ import annotations

import random

import pytest
import torch

import helpers.device as dev
from helpers import data
from helpers.device import (
    STAND_INS,
    STATUS_MEANING,
    Check,
    DoctorReport,
    doctor,
    pick_device,
    seed_everything,
)


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


# --------------------------------------------------------------------------
# The doctor's verdicts follow its legend (STATUS_MEANING, chapter 00):
# FAIL = a chapter will stop with an error, WARN = nothing known to break but
# not the tested setup, INFO = nothing to do.
# --------------------------------------------------------------------------


@pytest.fixture
def tools(monkeypatch):
    """Pretend every external tool is installed; tests remove the ones they want missing."""
    missing: set[str] = set()

    def fake_version_of(cmd):
        name = cmd[0].rsplit("/", 1)[-1]
        return None if name in missing else f"{name} 1.0"

    monkeypatch.setattr(dev, "_version_of", fake_version_of)
    return missing


@pytest.fixture
def pinned_versions(monkeypatch):
    """Make the installed versions the pinned ones, so a test sees only what it changes."""
    import torchvision

    monkeypatch.setitem(dev.PINNED, "torch", torch.__version__.split("+")[0])
    monkeypatch.setitem(dev.PINNED, "torchvision", torchvision.__version__.split("+")[0])


def _check(report, name):
    (found,) = [c for c in report.checks if c.name == name]
    return found


def _put_in_data_dir(folder, name):
    """Create (empty) every file of dataset ``name`` under ``folder``: helpers.data.status then says "ready"."""
    for f in data.REGISTRY[name].files:
        (folder / f.path).parent.mkdir(parents=True, exist_ok=True)
        (folder / f.path).write_bytes(b"")


def test_legend_and_verdict_rules():
    assert list(STATUS_MEANING) == ["ok", "info", "warn", "fail"]
    with pytest.raises(ValueError, match="status must be one of"):
        Check("x", "error", "not a status")
    ok, info = Check("a", "ok", ""), Check("b", "info", "")
    warn, fail = Check("c", "warn", ""), Check("d", "fail", "", chapters=("07", "05"))
    assert DoctorReport([ok, info]).verdict == "READY" and DoctorReport([ok, info]).ok
    assert DoctorReport([ok, warn]).verdict == "READY, with warnings about c" and DoctorReport([ok, warn]).ok
    report = DoctorReport([ok, warn, fail])
    assert not report.ok and report.blocked_chapters == ["05", "07"]
    assert report.verdict == "NOT READY: fix d (chapters that will stop with an error: 05, 07)"


def test_a_ready_machine_is_ready(isolated_dirs, tools, pinned_versions):
    _put_in_data_dir(isolated_dirs / "data", "mnist")
    report = doctor(datasets=("mnist",))
    names = [c.name for c in report.checks]
    for expected in ("python", "torch", "torchvision", "cuda", "mps", "threads", "c++ compiler", "ninja", "nvcc", "disk"):
        assert expected in names
    assert {c.status for c in report.checks} <= {"ok", "info"}, str(report)
    assert report.ok and report.verdict == "READY"
    assert str(report).splitlines()[-1] == "verdict: READY"


def test_missing_required_dataset_fails_and_names_its_chapters(isolated_dirs, tools, pinned_versions):
    report = doctor(datasets=("mnist",))  # offline, no mirror, empty data/
    line = _check(report, "data: mnist")
    assert line.status == "fail", "a required dataset that cannot be had stops its chapters: FAIL, by the legend"
    assert "05" in line.chapters and "05" in line.detail and line.chapters == dev.chapters_using("mnist")
    assert "make data" in line.fix and "COURSE_DATA_MIRROR" in line.fix
    assert not report.ok and report.verdict.startswith("NOT READY: fix data: mnist (chapters that will stop")


def test_mirror_only_dataset_without_a_mirror_fails(toy_dataset, tools, pinned_versions, monkeypatch):
    monkeypatch.delenv("COURSE_OFFLINE")  # even with a network: there is no download address
    line = _check(doctor(datasets=("toy",)), "data: toy")
    assert line.status == "fail" and "only the course mirror" in line.detail
    assert "COURSE_DATA_MIRROR" in line.fix and "make data" not in line.fix


def test_dataset_in_the_mirror_is_ok(toy_dataset, tools, pinned_versions, monkeypatch):
    _, mirror, _ = toy_dataset
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(mirror))
    report = doctor(datasets=("toy",))
    assert _check(report, "data: toy").status == "ok" and report.verdict == "READY"


def test_dataset_to_download_warns(isolated_dirs, tools, pinned_versions, monkeypatch):
    monkeypatch.delenv("COURSE_OFFLINE")  # a new learner with a network and no data yet
    report = doctor(datasets=("mnist",))
    line = _check(report, "data: mnist")
    assert line.status == "warn" and "downloaded on first use" in line.detail and "05" in line.detail
    assert report.ok and report.verdict == "READY, with warnings about data: mnist"


def test_optional_dataset_with_its_stand_in_in_reach_is_info(isolated_dirs, tools, pinned_versions):
    _put_in_data_dir(isolated_dirs / "data", "cifar10-subset")
    report = doctor(datasets=("cifar10", "cifar10-subset"))
    assert _check(report, "data: cifar10").status == "info"
    assert _check(report, "data: cifar10-subset").status == "ok"
    assert report.verdict == "READY"


def test_optional_datasets_with_neither_in_reach_fail(isolated_dirs, tools, pinned_versions):
    report = doctor(datasets=("cifar10",))  # offline: no full set, and no subset either
    line = _check(report, "data: cifar10")
    assert line.status == "fail" and "cifar10-subset cannot be had either" in line.detail
    assert set(dev.chapters_using("cifar10-subset")) <= set(line.chapters) and line.chapters
    assert not report.ok


def test_every_optional_dataset_has_a_stand_in():
    for name, spec in data.REGISTRY.items():
        if spec.optional:
            assert STAND_INS.get(name) in data.REGISTRY, f"optional dataset {name} has no stand-in in STAND_INS"


def test_chapters_using_reads_the_chapter_table():
    assert "05" in dev.chapters_using("mnist") and "00" not in dev.chapters_using("mnist")
    assert dev.chapters_using("no-such-dataset") == ()


def test_missing_compiler_or_ninja_fails_for_chapter_20(isolated_dirs, tools, pinned_versions):
    tools.update({"c++", "g++", "clang++"})
    report = doctor(datasets=())
    assert _check(report, "c++ compiler").status == "fail" and report.blocked_chapters == ["20"]
    tools.clear()
    tools.add("ninja")
    report = doctor(datasets=())
    assert _check(report, "ninja").status == "fail" and not report.ok and "20" in report.verdict


def test_missing_nvcc_is_info(isolated_dirs, tools, pinned_versions):
    tools.add("nvcc")  # on PATH and under CUDA_HOME alike: the fake answers by the program's name
    report = doctor(datasets=())
    assert _check(report, "nvcc").status == "info" and report.verdict == "READY"


def test_no_gpu_is_info(isolated_dirs, tools, pinned_versions, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    report = doctor(datasets=())
    assert _check(report, "cuda").status == "info" and _check(report, "mps").status == "info"
    assert report.verdict == "READY"


def test_other_torch_version_warns(isolated_dirs, tools, pinned_versions, monkeypatch):
    monkeypatch.setitem(dev.PINNED, "torch", "0.0.1")
    report = doctor(datasets=())
    line = _check(report, "torch")
    assert line.status == "warn" and "0.0.1" in line.detail and "make setup" in line.fix
    assert report.ok and report.verdict == "READY, with warnings about torch"


def test_low_disk_warns(isolated_dirs, tools, pinned_versions):
    report = doctor(datasets=(), min_free_gb=1e12)  # a petabyte: no disk has that free
    assert _check(report, "disk").status == "warn" and report.verdict == "READY, with warnings about disk"


def test_doctor_fails_on_a_too_old_python(monkeypatch, tools, pinned_versions):
    monkeypatch.setattr(dev.sys, "version_info", (3, 9, 0))
    report = doctor(datasets=())
    assert not report.ok and report.verdict == "NOT READY: fix python"


def test_make_doctor_exit_status_follows_the_verdict(isolated_dirs, tools, pinned_versions, monkeypatch, capsys):
    assert dev.main() == 1, "offline, no mirror, empty data/: required datasets fail, so `make doctor` must exit 1"
    assert "verdict: NOT READY" in capsys.readouterr().out
    monkeypatch.delenv("COURSE_OFFLINE")  # downloads allowed: warnings only
    assert dev.main() == 0
    assert "verdict: READY, with warnings" in capsys.readouterr().out
