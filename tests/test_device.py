"""helpers.device: device choice, seeding, the doctor."""

from __future__ import annotations

import random
import re
import shutil

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


@pytest.mark.parametrize("name", ["meta", "ipu", "hpu"])
def test_device_types_the_course_does_not_run_on_are_refused(name):
    with pytest.raises(ValueError, match=rf"'{name}' is a device type torch knows, but not one the course runs on.*'cpu'"):
        pick_device(name)


def test_xpu_only_where_torch_can_use_it(monkeypatch):
    monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match=r"asked for xpu but this machine has 0 usable XPU.*this machine has: cpu"):
        pick_device("xpu")
    monkeypatch.setattr(torch.xpu, "is_available", lambda: True)
    monkeypatch.setattr(torch.xpu, "device_count", lambda: 1)
    assert pick_device("xpu") == torch.device("xpu")
    assert "xpu:0" in dev.available_devices()
    with pytest.raises(RuntimeError, match="xpu:1 but this machine has 1 usable XPU"):
        pick_device("xpu:1")


def test_missing_mps_names_what_it_needs(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match=r"MPS is not available: it needs a Mac with Apple silicon, macOS 14 or newer"):
        pick_device("mps")


def test_a_missing_device_from_the_environment_says_where_it_came_from(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", f"cuda:{torch.cuda.device_count()}")
    with pytest.raises(RuntimeError, match=r"\(from COURSE_DEVICE\).*unset COURSE_DEVICE"):
        pick_device()
    monkeypatch.setenv("COURSE_DEVICE", "meta")
    with pytest.raises(ValueError, match=r"'meta' \(from COURSE_DEVICE\)"):
        pick_device()


def test_available_devices_lists_only_usable_ones(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
    assert dev.available_devices() == ["cpu"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert dev.available_devices() == ["cpu", "cuda:0", "cuda:1"]
    assert pick_device("cuda:1") == torch.device("cuda:1")


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


class FakeTools(set):
    """The programs named in the set are missing. ``output`` is what the others print as their version
    (default: ``"<name> 1.0"``; nvcc: the CUDA release torch was built with). ``driver`` holds the signs
    of an NVIDIA driver that exist: ``"nvidia-smi"`` (on PATH) and ``"proc"`` (/proc/driver/nvidia)."""

    def __init__(self):
        super().__init__()
        self.output = {"nvcc": f"Cuda compilation tools, release {torch.version.cuda or '13.0'}, V0"}
        self.driver: set[str] = set()


@pytest.fixture
def tools(monkeypatch, tmp_path):
    """Pretend every external tool is installed and no NVIDIA driver is; tests change what they need."""
    fake = FakeTools()

    def fake_version_of(cmd):
        name = cmd[0].rsplit("/", 1)[-1]
        return None if name in fake else fake.output.get(name, f"{name} 1.0")

    real_which = shutil.which

    def fake_which(name, *args, **kwargs):
        if name == "nvidia-smi":
            return "/usr/bin/nvidia-smi" if "nvidia-smi" in fake.driver else None
        return real_which(name, *args, **kwargs)

    proc = tmp_path / "proc-driver-nvidia"

    class Driver(set):
        def add(self, sign):
            super().add(sign)
            if sign == "proc":
                proc.mkdir(exist_ok=True)

    fake.driver = Driver()
    monkeypatch.setattr(dev, "_version_of", fake_version_of)
    monkeypatch.setattr(dev.shutil, "which", fake_which)
    monkeypatch.setattr(dev, "NVIDIA_PROC_DIR", str(proc))
    return fake


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


def test_optional_dataset_with_its_stand_in_in_reach_is_info(isolated_dirs, tools, pinned_versions, monkeypatch):
    _put_in_data_dir(isolated_dirs / "data", "cifar10-subset")
    monkeypatch.delenv("COURSE_OFFLINE")  # with a network the full set is downloadable, yet never downloaded
    report = doctor(datasets=("cifar10", "cifar10-subset"))
    line = _check(report, "data: cifar10")
    assert line.status == "info" and line.detail == "not in data/; chapters use cifar10-subset (in reach)"
    assert "downloaded" not in line.detail, "helpers.data.cifar10 takes the subset in reach without a download"
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


# -- accelerators, threads and nvcc: the install failures the doctor names -----


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


@pytest.fixture
def one_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Fake GPU")


@pytest.mark.parametrize("sign", ["nvidia-smi", "proc"])
def test_nvidia_driver_with_a_cpu_only_torch_warns(isolated_dirs, tools, pinned_versions, no_gpu, monkeypatch, sign):
    monkeypatch.setattr(torch.version, "cuda", None)
    tools.driver.add(sign)
    report = doctor(datasets=())
    line = _check(report, "cuda")
    assert line.status == "warn" and "CPU-only build" in line.detail
    assert "--index-url https://download.pytorch.org/whl/cu" in line.fix and dev.PINNED["torch"] in line.fix
    assert report.ok and report.verdict == "READY, with warnings about cuda"


def test_nvidia_driver_that_cuda_cannot_use_warns(isolated_dirs, tools, pinned_versions, no_gpu, monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    tools.driver.add("nvidia-smi")
    line = _check(doctor(datasets=()), "cuda")
    assert line.status == "warn" and "built for CUDA 13.0" in line.detail and "cannot use a GPU" in line.detail
    assert "nvidia-smi" in line.fix and "driver" in line.fix and "CUDA_VISIBLE_DEVICES" in line.fix


def test_no_gpu_and_no_driver_is_info(isolated_dirs, tools, pinned_versions, no_gpu):
    line = _check(doctor(datasets=()), "cuda")
    assert line.status == "info" and "nothing needed" in line.fix


def test_usable_gpu_is_ok(isolated_dirs, tools, pinned_versions, one_gpu):
    line = _check(doctor(datasets=()), "cuda")
    assert line.status == "ok" and line.detail == "1 device(s): Fake GPU"


def test_mps_off_a_mac_is_info_with_what_it_needs(isolated_dirs, tools, pinned_versions, no_gpu, monkeypatch):
    monkeypatch.setattr(dev.platform, "system", lambda: "Linux")
    line = _check(doctor(datasets=()), "mps")
    assert line.status == "info" and "Apple silicon" in line.fix and "arm64" in line.fix and "macOS 14" in line.fix


@pytest.mark.parametrize(
    ("machine", "release", "reason"),
    [("x86_64", "15.1", "runs as x86_64"), ("arm64", "13.6", "macOS 13.6 is older than 14")],
)
def test_mps_unusable_on_a_mac_warns_with_the_reason(isolated_dirs, tools, pinned_versions, no_gpu, monkeypatch,
                                                     machine, release, reason):
    monkeypatch.setattr(dev.platform, "system", lambda: "Darwin")
    monkeypatch.setattr(dev.platform, "machine", lambda: machine)
    monkeypatch.setattr(dev.platform, "mac_ver", lambda: (release, ("", "", ""), machine))
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: True)
    line = _check(doctor(datasets=()), "mps")
    assert line.status == "warn" and reason in line.detail and "native arm64 Python" in line.fix


@pytest.fixture
def no_cgroup_limit(tmp_path, monkeypatch):
    """Point the cgroup files at an empty folder, so the real machine's CPU quota cannot interfere."""
    monkeypatch.setattr(dev, "CGROUP_ROOT", str(tmp_path / "no-cgroup"))
    monkeypatch.setattr(dev, "PROC_SELF_CGROUP", str(tmp_path / "no-proc-self-cgroup"))


@pytest.fixture
def cgroup(tmp_path, monkeypatch):
    """A made-up cgroup tree: ``cgroup(files, own="0::/")`` writes ``{relative path: text or bytes}``.

    Returns the (root, proc_cgroup) pair to pass to usable_cpus; the process sees 8 CPUs in its affinity mask.
    """
    monkeypatch.setattr(dev.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    root, proc = tmp_path / "cgroup", tmp_path / "proc-self-cgroup"
    root.mkdir()

    def make(files: dict, own: str = "0::/\n") -> tuple[str, str]:
        for relative, content in files.items():
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content if isinstance(content, bytes) else content.encode())
        proc.write_text(own)
        return str(root), str(proc)

    return make


@pytest.mark.parametrize(
    ("cpu_max", "cpus"),
    [("200000 100000\n", 2), ("150000 100000\n", 2), ("50000 100000\n", 1), ("1600000 100000\n", 8),
     ("max 100000\n", 8)],
)
def test_usable_cpus_follows_a_cgroup_v2_quota(cgroup, cpu_max, cpus):
    """docker run --cpus=2 writes "200000 100000"; the quota rounds up (1.5 CPUs keep 2 busy); "max" is no limit."""
    assert dev.usable_cpus(*cgroup({"cpu.max": cpu_max})) == cpus


def test_the_quota_never_raises_the_affinity_count(cgroup, monkeypatch):
    root, proc = cgroup({"cpu.max": "400000 100000"})
    monkeypatch.setattr(dev.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)  # taskset -c 0,1
    assert dev.usable_cpus(root, proc) == 2 and dev.cgroup_cpu_quota(root, proc) == 4.0


@pytest.mark.parametrize(
    ("files", "cpus"),
    [({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 3),
     ({"cpu,cpuacct/cpu.cfs_quota_us": "50000", "cpu,cpuacct/cpu.cfs_period_us": "100000"}, 1),
     ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, 8),  # v1's "no limit"
     ({"cpu/cpu.cfs_quota_us": "300000\n"}, 8)],  # a quota without its period is not read
)
def test_usable_cpus_follows_a_cgroup_v1_quota(cgroup, files, cpus):
    assert dev.usable_cpus(*cgroup(files, own="2:cpuacct:/\n1:cpu:/\n")) == cpus


def test_the_quota_of_a_parent_cgroup_counts_too(cgroup):
    """On a host the process sits deep in the tree (0::/user.slice/...): any folder above it may set the limit."""
    files = {"cpu.max": "max 100000", "user.slice/cpu.max": "100000 100000", "user.slice/job/cpu.max": "max 100000"}
    root, proc = cgroup(files, own="0::/user.slice/job\n")
    assert dev.usable_cpus(root, proc) == 1
    v1 = {"cpu/docker/cpu.cfs_quota_us": "200000", "cpu/docker/cpu.cfs_period_us": "100000"}
    root, proc = cgroup(v1, own="4:cpu,cpuacct:/docker/abc\n")  # /docker/abc itself is not mounted here
    assert dev.usable_cpus(root, proc) == 2


@pytest.mark.parametrize(
    "files",
    [{}, {"cpu.max": "banana"}, {"cpu.max": ""}, {"cpu.max": "max"}, {"cpu.max": "100000 0"},
     {"cpu.max": "-5 100000"}, {"cpu.max": "1e5 100000"}, {"cpu.max": b"\xff\xfe 100000"},
     {"cpu.max/inside": "a folder where a file should be"},
     {"cpu/cpu.cfs_quota_us": "lots", "cpu/cpu.cfs_period_us": "100000"}],
    ids=["missing", "word", "empty", "no-period", "zero-period", "negative", "float", "not-utf8", "folder", "v1-word"],
)
def test_unreadable_or_garbage_cgroup_files_are_ignored(cgroup, files):
    root, proc = cgroup(files)
    assert dev.cgroup_cpu_quota(root, proc) is None
    assert dev.usable_cpus(root, proc) == 8


def test_a_missing_cgroup_tree_or_proc_file_is_no_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(dev.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert dev.usable_cpus(tmp_path / "absent", tmp_path / "absent-too") == 3
    (tmp_path / "garbled").write_bytes(b"\x00\xff::::\nnot a cgroup line\n")
    assert dev.usable_cpus(tmp_path / "absent", tmp_path / "garbled") == 3


def test_the_doctor_names_the_quota_that_limits_the_cpus(isolated_dirs, tools, pinned_versions,
                                                         cgroup, monkeypatch):
    root, proc = cgroup({"cpu.max": "150000 100000"})
    monkeypatch.setattr(dev, "CGROUP_ROOT", root)
    monkeypatch.setattr(dev, "PROC_SELF_CGROUP", proc)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 8)
    line = _check(doctor(datasets=()), "threads")
    assert line.status == "warn" and "may run on 2 of" in line.detail and "CPU quota is 1.5 CPUs" in line.detail, line
    assert "OMP_NUM_THREADS=2" in line.fix


def test_usable_cpus_follows_the_affinity_mask(no_cgroup_limit, monkeypatch):
    monkeypatch.setattr(dev.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert dev.usable_cpus() == 3
    monkeypatch.delattr(dev.os, "sched_getaffinity", raising=False)  # macOS and Windows have no affinity call
    monkeypatch.setattr(dev.os, "cpu_count", lambda: 5)
    assert dev.usable_cpus() == 5


def test_more_threads_than_usable_cpus_warns(no_cgroup_limit, isolated_dirs, tools, pinned_versions, monkeypatch):
    monkeypatch.setattr(dev.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(dev.os, "cpu_count", lambda: 64)  # a big machine, but this process may use two cores
    monkeypatch.setattr(torch, "get_num_threads", lambda: 64)
    line = _check(doctor(datasets=()), "threads")
    assert line.status == "warn" and "2 of 64 logical CPUs" in line.detail and "OMP_NUM_THREADS=2" in line.fix
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert _check(doctor(datasets=()), "threads").status == "ok"


@pytest.mark.parametrize(
    ("nvcc_release", "torch_cuda", "status"),
    [("13.0", "13.0", "ok"), ("13.2", "13.0", "ok"), ("12.8", None, "ok"), ("12.8", "13.0", "warn")],
)
def test_nvcc_major_version_against_torch_without_a_gpu(isolated_dirs, tools, pinned_versions, no_gpu, monkeypatch,
                                                        nvcc_release, torch_cuda, status):
    monkeypatch.setattr(torch.version, "cuda", torch_cuda)
    tools.output["nvcc"] = f"Cuda compilation tools, release {nvcc_release}, V{nvcc_release}.1"
    report = doctor(datasets=())
    line = _check(report, "nvcc")
    assert line.status == status, str(report)
    if nvcc_release == "13.2":
        assert "minor difference only logs a warning" in line.detail
    if status == "warn":
        assert "CUDA 12.8, but torch was built with CUDA 13.0" in line.detail and "load_inline" in line.detail
        assert "CUDA_HOME" in line.fix and report.ok


def test_nvcc_major_mismatch_with_a_gpu_fails_chapter_20(isolated_dirs, tools, pinned_versions, one_gpu, monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    tools.output["nvcc"] = "Cuda compilation tools, release 12.4, V12.4.131"
    report = doctor(datasets=())
    line = _check(report, "nvcc")
    assert line.status == "fail" and line.chapters == ("20",) and "chapter 20's CUDA build stops" in line.detail
    assert not report.ok and report.blocked_chapters == ["20"]


def test_the_real_nvcc_prints_a_release_the_doctor_can_read():
    """The comparison above needs "release X.Y" in nvcc's output; an unreadable line would pass as OK unchecked."""
    nvcc = dev._version_of(["nvcc", "--version"])
    if nvcc is None:
        pytest.skip("no nvcc on PATH")
    assert re.search(r"release \d+\.\d+", nvcc), f"nvcc's version line has no release number: {nvcc!r}"


def _fake_metadata(monkeypatch, requires: dict[str, list[str]], sizes: dict[str, int]):
    """importlib.metadata answering from `requires` (name -> requirement strings) and `sizes` (name -> bytes)."""
    from importlib import metadata
    from types import SimpleNamespace

    def fake_requires(name):
        if name not in requires:
            raise metadata.PackageNotFoundError(name)
        return requires[name]

    def fake_distribution(name):
        if name not in sizes:
            raise metadata.PackageNotFoundError(name)
        return SimpleNamespace(files=[SimpleNamespace(size=sizes[name])])

    monkeypatch.setattr(metadata, "requires", fake_requires)
    monkeypatch.setattr(metadata, "distribution", fake_distribution)


def test_gpu_packages_follows_declared_gpu_packages_and_their_extras(monkeypatch):
    _fake_metadata(monkeypatch, requires={
        "torch": ["filelock", "nvidia-cublas-cu13==13.0.1; platform_system == 'Linux'",
                  "cuda-toolkit[cublas,cudart]==13.0; platform_system == 'Linux'", "triton==3.5; platform_system == 'Linux'",
                  "nvidia-never-here; platform_system == 'NoSuchOS'", "opt-einsum; extra == 'opt-einsum'"],
        "nvidia-cublas-cu13": ["nvidia-cuda-nvrtc-cu13"],
        "cuda-toolkit": ["nvidia-cuda-runtime; extra == 'cudart'", "nvidia-cufft; extra == 'cufft'"],
        "triton": [], "nvidia-cuda-nvrtc-cu13": [], "nvidia-cuda-runtime": [], "nvidia-cufft": [], "filelock": [],
    }, sizes={"torch": 10**9, "nvidia-cublas-cu13": 5 * 10**8, "cuda-toolkit": 0, "triton": 2 * 10**8,
              "nvidia-cuda-nvrtc-cu13": 10**8, "nvidia-cuda-runtime": 10**7, "nvidia-cufft": 9 * 10**9, "filelock": 10**6})
    if dev.platform.system() != "Linux":
        pytest.skip("the fake markers are written for Linux")
    found = dev.gpu_packages("torch")
    assert found.declared == ("cuda-toolkit", "nvidia-cublas-cu13", "triton")  # not the marker for another OS
    # through an extra asked of cuda-toolkit (cudart) and a plain dependency (nvrtc); not cufft (not asked), not filelock
    assert set(found.installed) == {"cuda-toolkit", "nvidia-cublas-cu13", "triton", "nvidia-cuda-nvrtc-cu13",
                                    "nvidia-cuda-runtime"}
    assert found.gb == pytest.approx(0.5 + 0.2 + 0.1 + 0.01)


def test_gpu_packages_of_a_cpu_only_torch_is_empty(monkeypatch):
    _fake_metadata(monkeypatch, requires={"torch": ["filelock", "sympy>=1.13"]}, sizes={"torch": 10**9})
    found = dev.gpu_packages("torch")
    assert found.declared == () and found.installed == {} and found.gb == 0


def test_gpu_packages_matches_the_installed_torch():
    found = dev.gpu_packages()
    if torch.version.cuda is None:
        assert found.declared == (), f"a CPU-only torch declares GPU packages: {found.declared}"
    else:
        assert found.declared, "a CUDA build of torch declares no GPU packages"
