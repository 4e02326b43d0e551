"""Device choice, seeding, and the preflight "doctor" report (chapter 00, ``make doctor``)."""

from __future__ import annotations

import functools
import importlib
import logging
import math
import os
import platform
import random
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from .paths import ROOT, data_dir, mirror_dir, mirror_url

__all__ = [
    "STAND_INS",
    "STATUS_MEANING",
    "Check",
    "DEVICE_TYPES",
    "DoctorReport",
    "chapters_using",
    "available_devices",
    "cgroup_cpu_quota",
    "doctor",
    "import_without_cuda_home_log",
    "pick_device",
    "seed_everything",
    "usable_cpus",
]

#: Versions the stored notebook outputs were produced with (requirements.txt).
PINNED = {"torch": "2.14.1", "torchvision": "0.29.1"}


def import_without_cuda_home_log(module: str):
    """Import ``module`` (e.g. ``"torch.utils.cpp_extension"``) and return it, silencing one log line.

    The first import of ``torch.utils.cpp_extension`` (directly, or through
    ``torch.utils.benchmark``) logs "No CUDA runtime is found, using
    CUDA_HOME=..." on a machine with a CUDA toolkit but no GPU. That is not a
    problem (compiling CUDA code needs no GPU), and in a notebook it lands on
    stderr, so the ``torch.utils.cpp_extension`` logger is raised to ERROR for
    the import only. Raises ``ImportError`` like ``importlib.import_module``.
    """
    log = logging.getLogger("torch.utils.cpp_extension")
    previous = log.level
    log.setLevel(logging.ERROR)
    try:
        return importlib.import_module(module)
    finally:
        log.setLevel(previous)


#: The device types ``pick_device`` accepts: those the chapters run on, plus Intel's XPU where present.
DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu")


def _xpu_available() -> bool:
    xpu = getattr(torch, "xpu", None)
    return bool(xpu is not None and xpu.is_available())


def available_devices() -> list[str]:
    """The devices ``pick_device`` would accept on this machine, e.g. ``["cpu", "cuda:0", "cuda:1"]``.

    Always starts with ``"cpu"``; then each usable CUDA device, ``"mps"`` where
    Apple's GPU backend is usable, and each XPU where ``torch.xpu.is_available()``.
    """
    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        found.append("mps")
    if _xpu_available():
        found += [f"xpu:{i}" for i in range(torch.xpu.device_count())]
    return found


def pick_device(prefer: str | None = None) -> torch.device:
    """Choose where tensors should live.

    Order: ``prefer`` if given, else ``$COURSE_DEVICE`` if set (read on every
    call), else CUDA, then Apple's MPS, then the CPU. A device that is asked
    for must be there: there is no silent fallback to the CPU.

    Args:
        prefer: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``, ``"xpu"`` (Intel
            GPUs, only where ``torch.xpu.is_available()``), or ``None`` for the
            automatic choice (which never picks XPU: the chapters are tested on
            CUDA, MPS and the CPU).

    Returns:
        A ``torch.device``.

    Raises:
        ValueError: ``prefer`` is not a device name torch understands, or names a
            device type the course does not run on (``"meta"``, ``"ipu"``, ...);
            the message lists the accepted types.
        RuntimeError: the requested device is not available on this machine
            (the message lists the devices this machine has).
    """
    wanted = prefer if prefer is not None else (os.environ.get("COURSE_DEVICE", "").strip() or None)
    if wanted is None:
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    source = "" if prefer is not None else " (from COURSE_DEVICE)"
    choices = "'cpu', 'cuda', 'cuda:N', 'mps' or 'xpu'"
    try:
        device = torch.device(wanted)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"{wanted!r}{source} is not a device name; use {choices}") from exc
    if device.type not in DEVICE_TYPES:
        raise ValueError(
            f"{wanted!r}{source} is a device type torch knows, but not one the course runs on; use {choices}"
        )
    here = f"this machine has: {', '.join(available_devices())}"
    fallback = "unset COURSE_DEVICE" if prefer is None else "pass prefer=None"
    index = device.index or 0
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if index >= count:
            raise RuntimeError(
                f"asked for {device}{source} but this machine has {count} usable CUDA device(s) ({here}); "
                f"{fallback} for the automatic choice"
            )
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            raise RuntimeError(
                f"asked for {device}{source} but MPS is not available: it needs a Mac with Apple silicon, "
                f"macOS 14 or newer and a native arm64 Python ({here})"
            )
        if index != 0:
            raise RuntimeError(f"asked for {device}{source} but MPS has one device, mps:0 ({here})")
    elif device.type == "xpu":
        count = torch.xpu.device_count() if _xpu_available() else 0
        if index >= count:
            raise RuntimeError(
                f"asked for {device}{source} but this machine has {count} usable XPU device(s) ({here}); "
                f"{fallback} for the automatic choice"
            )
    return device


def seed_everything(seed: int = 0) -> torch.Generator:
    """Seed Python's ``random``, NumPy (if installed) and torch (CPU and all GPUs).

    Args:
        seed: any non-negative int below 2**63.

    Returns:
        A fresh CPU ``torch.Generator`` seeded with ``seed``, handy for a
        ``DataLoader(generator=...)``.

    Raises:
        ValueError: ``seed`` is negative.

    Bit-identical results across runs also need deterministic kernels
    (``torch.use_deterministic_algorithms(True)``, chapter 15).
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ValueError(f"seed must be an int in [0, 2**63), got {seed!r}")
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # numpy is optional for torch
        pass
    torch.manual_seed(seed)  # also seeds every CUDA device
    g = torch.Generator()
    g.manual_seed(seed)
    return g


# --------------------------------------------------------------------------
# Doctor
# --------------------------------------------------------------------------


#: What each status means. Chapter 00's legend says the same; tests/test_device.py checks each rule.
STATUS_MEANING = {
    "ok": "as required",
    "info": "fine as it is, nothing to do: something optional is absent (a GPU, nvcc, or an optional "
    "dataset whose stand-in is in reach); cells that need a missing GPU or nvcc print one line and skip",
    "warn": "nothing is known to break, but something differs from the tested setup or from what you "
    "probably want: numbers may differ from the stored outputs, a dataset will be downloaded on first use "
    "(a network is needed then), a GPU is there but torch cannot use it, torch runs more threads than it "
    "has CPUs, or free disk is low",
    "fail": "at least one chapter will stop with an error; the line names the chapters where it knows them, "
    "and its fix says what to do",
}

#: Optional datasets and the one that stands in for each: ``helpers.data.cifar10``
#: uses the full CIFAR-10 where it can and falls back to the offline subset.
STAND_INS = {"cifar10": "cifar10-subset", "cifar10-subset": "cifar10"}


@dataclass
class Check:
    """One line of the doctor report.

    ``status`` is one of :data:`STATUS_MEANING`: ``"ok"``, ``"info"`` (fine,
    nothing to do), ``"warn"`` (nothing known to break, but not the tested
    setup) or ``"fail"`` (a chapter will stop with an error). ``fix`` is a
    hint for anything other than ok; ``chapters`` names the chapters (``"05"``,
    ...) that a failed check stops, where known.

    Raises:
        ValueError: ``status`` is not one of the four.
    """

    name: str
    status: str
    detail: str
    fix: str = ""
    chapters: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.status not in STATUS_MEANING:
            raise ValueError(f"status must be one of {list(STATUS_MEANING)}, got {self.status!r}")


@dataclass
class DoctorReport:
    """The doctor's checks, with the verdict they add up to (print it to read it)."""

    checks: list[Check]

    @property
    def ok(self) -> bool:
        """True when no check failed (warnings and infos do not count)."""
        return all(c.status != "fail" for c in self.checks)

    @property
    def blocked_chapters(self) -> list[str]:
        """The chapters named by failed checks, sorted (empty when none failed)."""
        return sorted({ch for c in self.checks if c.status == "fail" for ch in c.chapters})

    @property
    def verdict(self) -> str:
        """``"NOT READY: fix ..."`` if a check failed, ``"READY, with warnings about ..."`` if one warned, else ``"READY"``."""
        fails = [c.name for c in self.checks if c.status == "fail"]
        warns = [c.name for c in self.checks if c.status == "warn"]
        if fails:
            blocked = self.blocked_chapters
            return f"NOT READY: fix {', '.join(fails)}" + (
                f" (chapters that will stop with an error: {', '.join(blocked)})" if blocked else ""
            )
        if warns:
            return f"READY, with warnings about {', '.join(warns)}"
        return "READY"

    def __str__(self) -> str:
        width = max(len(c.name) for c in self.checks)
        lines = []
        for c in self.checks:
            lines.append(f"[{c.status.upper():4s}] {c.name:{width}s}  {c.detail}")
            if c.fix and c.status != "ok":
                lines.append(f"       {'':{width}s}  fix: {c.fix}")
        lines.append(f"verdict: {self.verdict}")
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle):  # IPython display
        p.text(str(self))


@functools.lru_cache(maxsize=4)
def _chapter_table(path: str, mtime_ns: int) -> dict:
    """``chapters.yaml`` parsed once per version of the file (the mtime is part of the key)."""
    import yaml

    with open(path, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}


def chapters_using(dataset: str) -> tuple[str, ...]:
    """The chapters (``"05"``, ``"06"``, ...) whose row in ``notebooks/chapters.yaml`` lists ``dataset``.

    Returns ``()`` when no chapter lists it, or when ``chapters.yaml`` is not
    there (``helpers`` installed without the notebooks).
    """
    table_file = ROOT / "notebooks" / "chapters.yaml"
    if not table_file.is_file():
        return ()
    table = _chapter_table(str(table_file), table_file.stat().st_mtime_ns)
    return tuple(
        stem.split("_", 1)[0] for stem, meta in table.items() if dataset in ((meta or {}).get("datasets") or ())
    )


def _version_of(cmd: list[str]) -> str | None:
    exe = shutil.which(cmd[0])
    if exe is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (out.stdout or out.stderr).strip().splitlines()
    # nvcc prints its release on the last line; compilers and ninja on the first
    useful = [ln for ln in lines if "release" in ln] or lines
    return useful[0].strip() if useful else "found"


def _version_check(name: str, have: str) -> Check:
    want = PINNED[name]
    if have.split("+")[0] == want:
        return Check(name, "ok", have)
    return Check(
        name,
        "warn",
        f"{have}, not the tested {want}: numbers will differ from the stored outputs",
        "run `make setup` to get the pinned version in .venv",
    )


#: How ``helpers.data.status`` answers rank: in reach offline, reachable with a network, out of reach.
_REACH = {"ready": 0, "mirror": 0, "download": 1, "offline": 2, "unavailable": 2}


def _chapter_list(chapters: tuple[str, ...]) -> str:
    return f"chapters {', '.join(chapters)}" if chapters else "the chapters that use it"


def _data_check(name: str, where: dict[str, str], mirror_set: bool) -> Check:
    """The doctor's line for dataset ``name``; ``where`` maps each dataset to ``helpers.data.status``."""
    from . import data

    label = f"data: {name}"
    detail = {
        "ready": "in data/",
        "mirror": "will be copied from COURSE_DATA_MIRROR",
        "download": "not in data/; will be downloaded on first use",
        "offline": "not in data/, not in a mirror, and downloads are off (COURSE_OFFLINE=1)",
        "unavailable": "not in data/, and only the course mirror has it (there is no download)",
    }[where[name]]
    if _REACH[where[name]] == 0:
        return Check(label, "ok", detail)

    stand_in = STAND_INS.get(name) if data.REGISTRY[name].optional else None
    chapters = tuple(sorted(set(chapters_using(name)) | set(chapters_using(stand_in) if stand_in else ())))
    stand_in_reach = _REACH[where[stand_in]] if stand_in is not None else 2
    # the chapters take the stand-in when it is in reach, and when only it (not this one) needs a download
    if stand_in_reach == 0 or (stand_in_reach == 1 and where[name] != "download"):
        # helpers.data.cifar10 takes an offline stand-in without trying a download, so say only that
        used = f"chapters use {stand_in} ({'in reach' if stand_in_reach == 0 else 'downloadable'})"
        return Check(
            label,
            "info",
            f"not in data/; {used}" if stand_in_reach == 0 else f"{detail}; {used}",
            "nothing needed"
            + ("" if where[name] == "unavailable" else f"; for {name} itself, run `make data` with a network"),
        )
    if where[name] == "download":
        return Check(
            label,
            "warn",
            f"{detail} by {_chapter_list(chapters)} (they stop with an error if there is no network then)",
            "nothing needed with a network; to work offline later, run `make data` once now, "
            "or set COURSE_DATA_MIRROR to a copy of the course mirror",
        )
    if stand_in is not None:
        detail += f"; its stand-in {stand_in} cannot be had either"
    lacking = " (the one set lacks this dataset)" if mirror_set else ""
    if where[name] == "unavailable":
        fix = f"set COURSE_DATA_MIRROR to a copy of the course mirror{lacking}, e.g. ../shared/datasets"
    else:
        fix = (
            f"with a network, unset COURSE_OFFLINE and run `make data` once; offline, set COURSE_DATA_MIRROR "
            f"to a copy of the course mirror{lacking}"
        )
    return Check(label, "fail", f"{detail}: {_chapter_list(chapters)} cannot run", fix, chapters)


#: Where Linux's NVIDIA kernel driver shows itself when it is loaded (tests point this elsewhere).
NVIDIA_PROC_DIR = "/proc/driver/nvidia"

#: The wheel index of the CUDA build the course pins (its suffix is torch.version.cuda without the dot).
CUDA_WHEEL_INDEX = "https://download.pytorch.org/whl/cu130"


def _nvidia_driver_signs() -> list[str]:
    """Signs of an NVIDIA GPU driver on this machine: ``nvidia-smi`` on PATH, the Linux driver's /proc folder."""
    signs = []
    if shutil.which("nvidia-smi"):
        signs.append("nvidia-smi is on PATH")
    if os.path.isdir(NVIDIA_PROC_DIR):
        signs.append(f"{NVIDIA_PROC_DIR} exists")
    return signs


def _cuda_check() -> Check:
    """OK with usable GPUs; WARN when an NVIDIA driver is there but torch cannot use CUDA; else INFO."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:  # e.g. "The NVIDIA driver on your system is too old"
        warnings.simplefilter("always")
        usable = torch.cuda.is_available()
    if usable:
        names = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        return Check("cuda", "ok", f"{torch.cuda.device_count()} device(s): {names}")
    built = torch.version.cuda
    signs = _nvidia_driver_signs()
    if not signs:
        return Check(
            "cuda",
            "info",
            f"no CUDA device (torch built for CUDA {built or 'none'}); GPU-only cells will skip",
            "nothing needed: every chapter runs on the CPU",
        )
    said = f"; torch said: {str(caught[0].message).strip()}" if caught else ""
    if built is None:
        return Check(
            "cuda",
            "warn",
            f"an NVIDIA driver is here ({', '.join(signs)}), but this torch is the CPU-only build, "
            "so every chapter runs on the CPU",
            f"install the CUDA build: `pip install torch=={PINNED['torch']} torchvision=={PINNED['torchvision']} "
            f"--index-url {CUDA_WHEEL_INDEX}` (on Linux the default wheel from PyPI is a CUDA build too); "
            "`nvidia-smi` shows the highest CUDA version the driver supports, and an older one needs the "
            "matching cuXY index",
        )
    return Check(
        "cuda",
        "warn",
        f"an NVIDIA driver is here ({', '.join(signs)}), but torch (built for CUDA {built}) cannot use a GPU{said}",
        f"run `nvidia-smi`: the driver must support CUDA {built} (its header shows the highest CUDA version it "
        "supports); update the driver, or install a torch build for an older CUDA; also check that "
        "CUDA_VISIBLE_DEVICES does not hide the GPUs",
    )


def _mps_check() -> Check:
    """OK where MPS is usable; on a Mac where it is not, WARN with the reason; elsewhere INFO."""
    if torch.backends.mps.is_available():
        return Check("mps", "ok", "available")
    needs = "MPS needs a Mac with Apple silicon (M1 or later), macOS 14 or newer, and a native arm64 Python"
    if platform.system() != "Darwin":
        return Check("mps", "info", "not available (Apple's GPU, on Macs only)", f"nothing needed here; {needs}")
    reasons = []
    if platform.machine() != "arm64":
        reasons.append(f"this Python runs as {platform.machine()} (an Intel build, or under Rosetta)")
    release = platform.mac_ver()[0]
    if release and int(release.split(".")[0]) < 14:
        reasons.append(f"macOS {release} is older than 14")
    if not torch.backends.mps.is_built():
        reasons.append("this torch was built without MPS")
    return Check(
        "mps",
        "warn",
        f"not available on this Mac: {'; '.join(reasons) or 'torch.backends.mps.is_available() is False'}",
        f"{needs}: check `python -c 'import platform; print(platform.machine())'` says arm64; "
        "the chapters run on the CPU meanwhile",
    )


#: Where Linux mounts the cgroup file system, and the file that names this process's cgroups
#: (module attributes, read on every call, so tests can point them at a made-up tree).
CGROUP_ROOT = "/sys/fs/cgroup"
PROC_SELF_CGROUP = "/proc/self/cgroup"

#: Where cgroup v1 mounts the ``cpu`` controller, under :data:`CGROUP_ROOT` (distributions differ).
_CGROUP_V1_CPU_MOUNTS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def _cgroup_paths(proc_cgroup: str | os.PathLike) -> tuple[str, str]:
    """This process's cgroup path in the v2 hierarchy and in v1's ``cpu`` controller ("/" when unknown).

    Each line of ``/proc/self/cgroup`` reads ``hierarchy-id:controllers:path``; v2 is the line
    ``0::path``, v1's cpu controller the line whose controllers include ``cpu``.
    """
    v2 = v1 = "/"
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return v2, v1
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            v2 = path or "/"
        elif "cpu" in controllers.split(","):
            v1 = path or "/"
    return v2, v1


def _up_to(base: Path, path: str) -> list[Path]:
    """``base/path`` and each folder above it, up to ``base`` itself."""
    folders = [base]
    for part in [p for p in path.split("/") if p and p not in (".", "..")]:
        folders.append(folders[-1] / part)
    return folders[::-1]


def _read_quota(text: str, period_text: str | None = None) -> float | None:
    """CPUs from a v2 ``cpu.max`` ("200000 100000", "max 100000"), or a v1 quota and period in µs.

    None for no limit ("max", or -1 in v1) and for anything that does not parse.
    """
    fields = text.split() if period_text is None else [text.strip(), period_text.strip()]
    if len(fields) != 2 or fields[0] in ("max", "-1"):
        return None
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def cgroup_cpu_quota(root: str | os.PathLike | None = None, proc_cgroup: str | os.PathLike | None = None) -> float | None:
    """The CPU bandwidth limit of this process's cgroup, in CPUs (quota / period); None when there is none.

    Containers (Docker ``--cpus``, Kubernetes CPU limits) and systemd's ``CPUQuota=`` cap a
    process's CPU time with the Linux CFS bandwidth controller rather than with its affinity
    mask, so ``os.sched_getaffinity`` still lists every core. The limit lives in files of the
    cgroup file system (Linux kernel docs, ``admin-guide/cgroup-v2.rst`` and ``scheduler/sched-bwc.rst``):

    - cgroup v2: ``cpu.max`` holds ``"$MAX $PERIOD"`` in µs, ``"max 100000"`` for no limit;
    - cgroup v1: ``cpu.cfs_quota_us`` (``-1`` for no limit) and ``cpu.cfs_period_us``, in the
      ``cpu`` controller's folder (``cpu/``, or ``cpu,cpuacct/``).

    The process's own cgroup (from ``proc_cgroup``) and every cgroup above it up to ``root`` are
    read, since any of them may carry the limit; the smallest limit found wins. Missing files,
    unreadable files and content that does not parse are ignored: this never raises.

    Args:
        root: the cgroup mount point (default :data:`CGROUP_ROOT`, ``/sys/fs/cgroup``).
        proc_cgroup: the file naming this process's cgroups (default :data:`PROC_SELF_CGROUP`).

    Returns:
        The limit in CPUs, a float such as 1.5 (``150000 100000``), or None without a limit,
        off Linux, or when nothing could be read.
    """
    root = Path(CGROUP_ROOT if root is None else root)
    v2_path, v1_path = _cgroup_paths(PROC_SELF_CGROUP if proc_cgroup is None else proc_cgroup)

    def read(file: Path) -> str | None:
        try:
            return file.read_text()
        except (OSError, UnicodeDecodeError):
            return None

    limits = []
    for folder in _up_to(root, v2_path):
        text = read(folder / "cpu.max")
        if text is not None:
            limits.append(_read_quota(text))
    for mount in _CGROUP_V1_CPU_MOUNTS:
        for folder in _up_to(root / mount, v1_path):
            quota, period = read(folder / "cpu.cfs_quota_us"), read(folder / "cpu.cfs_period_us")
            if quota is not None and period is not None:
                limits.append(_read_quota(quota, period))
    found = [limit for limit in limits if limit is not None]
    return min(found) if found else None


def usable_cpus(cgroup_root: str | os.PathLike | None = None, proc_cgroup: str | os.PathLike | None = None) -> int:
    """CPUs this process may keep busy: its affinity mask, capped by its cgroup's CPU quota.

    The affinity count is ``os.sched_getaffinity(0)`` where the OS has it (Linux), else
    ``os.cpu_count()``; it differs from the machine's count under ``taskset`` or in CI jobs pinned
    to some cores. A container limited with a CPU *quota* (``docker run --cpus=2``) keeps every
    core in its mask but gets only quota / period CPUs of time (:func:`cgroup_cpu_quota`); that
    figure, rounded up, caps the count. Never below 1, never raises.

    Args:
        cgroup_root, proc_cgroup: passed to :func:`cgroup_cpu_quota` (defaults: the real files).
    """
    if hasattr(os, "sched_getaffinity"):
        cpus = len(os.sched_getaffinity(0))
    else:
        cpus = os.cpu_count() or 1
    quota = cgroup_cpu_quota(cgroup_root, proc_cgroup)
    if quota is not None:
        cpus = min(cpus, math.ceil(quota))
    return max(cpus, 1)


@dataclass(frozen=True)
class GpuPackages:
    """What :func:`gpu_packages` found.

    Attributes:
        declared: the GPU packages the distribution itself requires on this platform (canonical names).
        installed: each installed package of the closure (declared ones and what they pull in), with its size
            on disk in GB (10**9 bytes, from the files its metadata lists).
    """

    declared: tuple[str, ...]
    installed: dict[str, float]

    @property
    def gb(self) -> float:
        """Their total size on disk, in GB."""
        return sum(self.installed.values())


#: Name prefixes of the GPU packages a CUDA build of torch declares: NVIDIA's CUDA libraries
#: (``nvidia-cublas-cu13``, …, and the ``cuda-toolkit`` metapackage) and Triton, torch.compile's GPU compiler.
GPU_PACKAGE_PREFIXES = ("nvidia-", "cuda-", "triton")


def installed_size_gb(name: str) -> float:
    """Disk taken by the installed distribution ``name``, in GB (the sizes its RECORD lists; 0 if none)."""
    from importlib import metadata

    return sum(f.size or 0 for f in (metadata.distribution(name).files or [])) / 1e9


def gpu_packages(name: str = "torch") -> GpuPackages:
    """The GPU packages distribution ``name`` declares, and everything they pull in, as installed here.

    Reads the package metadata only (``importlib.metadata``), never imports anything. A requirement
    counts when its environment marker holds on this platform, or holds for one of the *extras* asked
    of its package: ``cuda-toolkit[cublas,cudart,...]`` pulls in NVIDIA's libraries only through such
    extras, so they are followed too (PEP 508 markers, evaluated by ``packaging``). Packages that are
    not installed are skipped; packages you installed yourself but torch does not ask for are not counted.

    The CPU-only wheel declares none (``declared`` is empty); the Linux CUDA wheel from PyPI declares the
    NVIDIA libraries and Triton, which together take more disk than torch itself.

    Raises:
        importlib.metadata.PackageNotFoundError: ``name`` is not installed.
    """
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    def requires(dist: str, extras: frozenset) -> list[tuple[str, frozenset]]:
        found = []
        for text in metadata.requires(dist) or []:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
                found.append((canonicalize_name(req.name), frozenset(req.extras)))
        return found

    roots = [(n, x) for n, x in requires(name, frozenset()) if n.startswith(GPU_PACKAGE_PREFIXES)]
    installed: dict[str, float] = {}
    done: set[tuple[str, frozenset]] = set()
    todo = list(roots)
    while todo:
        dist, extras = todo.pop()
        if (dist, extras) in done:
            continue
        done.add((dist, extras))
        try:
            installed[dist] = installed_size_gb(dist)
        except metadata.PackageNotFoundError:
            continue
        todo += requires(dist, extras)
    return GpuPackages(tuple(sorted({n for n, _ in roots})), installed)


def _threads_check() -> Check:
    """OK while torch's intra-op threads fit the CPUs this process may use; WARN above that."""
    threads, cpus, logical = torch.get_num_threads(), usable_cpus(), os.cpu_count()
    detail = f"torch uses {threads} thread(s); this process may run on {cpus} of {logical} logical CPUs"
    quota = cgroup_cpu_quota()
    if quota is not None and math.ceil(quota) <= cpus:  # the quota is what set the count
        detail += f" (its cgroup's CPU quota is {quota:g} CPUs)"
    if threads <= cpus:
        return Check("threads", "ok", detail)
    return Check(
        "threads",
        "warn",
        f"{detail}: the extra threads compete for the cores, which can slow large operations down "
        "(chapter 00, section 4, measures what waiting threads cost)",
        f"set OMP_NUM_THREADS={cpus} before starting Python, or call torch.set_num_threads({cpus})",
    )


def _nvcc_check(nvcc: str | None) -> Check:
    """``nvcc``'s version line against ``torch.version.cuda``: a different major version stops chapter 20's CUDA build."""
    if not nvcc:
        return Check(
            "nvcc",
            "info",
            "not found: chapter 20 skips compiling its CUDA kernels",
            "only for CUDA kernels: install the CUDA toolkit and set CUDA_HOME",
        )
    found = re.search(r"release (\d+)\.(\d+)", nvcc)
    built = torch.version.cuda
    if found is None or built is None:
        return Check("nvcc", "ok", nvcc)
    have, want = f"{found[1]}.{found[2]}", built
    if found[1] == want.split(".")[0]:
        minor = "" if have == want else f" (torch was built with CUDA {want}: a minor difference only logs a warning)"
        return Check("nvcc", "ok", nvcc + minor)
    detail = (
        f"{nvcc}: CUDA {have}, but torch was built with CUDA {want}; torch.utils.cpp_extension refuses a "
        "different major version when it builds CUDA sources"
    )
    fix = (
        f"install a CUDA {want.split('.')[0]}.x toolkit, to match torch, and point CUDA_HOME at it; or install "
        f"the torch build for CUDA {found[1]}.x from its wheel index (the selector on pytorch.org lists them)"
    )
    if torch.cuda.is_available():
        return Check("nvcc", "fail", f"{detail}, so chapter 20's CUDA build stops", fix, ("20",))
    return Check(
        "nvcc",
        "warn",
        f"{detail}; without a GPU, chapter 20 compiles its CUDA kernels with load_inline, which does not "
        "compare the versions, so a mismatch can show up there as a compile or import error",
        fix,
    )


def doctor(datasets: tuple[str, ...] | None = None, min_free_gb: float = 2.0) -> DoctorReport:
    """Check this machine for the course and return a report (print it to read it).

    Checks: Python >= 3.10, the pinned torch and torchvision, CUDA and MPS,
    CPU threads, a C++ compiler and ninja (for chapter 20's extensions), nvcc,
    free disk under ``data/``, and where each dataset would come from. Each
    status follows :data:`STATUS_MEANING` (``tests/test_device.py`` tests each rule):

    - ``"fail"``, naming the chapters it stops: a missing compiler or ninja; a
      required dataset that cannot be had (not in ``data/``, not in the mirror,
      and no download allowed or possible); an ``nvcc`` whose CUDA major version
      differs from ``torch.version.cuda`` on a machine with a usable GPU.
    - ``"warn"``: a dataset that will be downloaded on first use; an NVIDIA
      driver (``nvidia-smi`` on PATH or ``/proc/driver/nvidia``) while CUDA is
      not usable (a CPU-only wheel, a driver too old for the build); a Mac where
      MPS is not usable; more torch threads than ``os.sched_getaffinity(0)``
      CPUs; that ``nvcc`` mismatch without a GPU; low disk.
    - ``"info"``: no GPU and no sign of one, no nvcc, an optional dataset whose
      stand-in is in reach.

    Args:
        datasets: which datasets to look for (default: all in the registry).
        min_free_gb: warn below this much free disk, in GB (10**9 bytes).

    Returns:
        A :class:`DoctorReport`; ``report.ok`` is False if anything failed.

    Raises:
        KeyError: a name in ``datasets`` is not in ``helpers.data.REGISTRY``.
    """
    import torchvision

    from . import data

    checks: list[Check] = []
    py = platform.python_version()
    checks.append(
        Check("python", "ok", py)
        if sys.version_info >= (3, 10)
        else Check("python", "fail", py, "install Python 3.10 or newer (3.11 is what CI uses)")
    )
    checks.append(_version_check("torch", torch.__version__))
    checks.append(_version_check("torchvision", torchvision.__version__))

    checks.append(_cuda_check())
    checks.append(_mps_check())
    checks.append(_threads_check())

    cxx = _version_of(["c++", "--version"]) or _version_of(["g++", "--version"]) or _version_of(["clang++", "--version"])
    checks.append(
        Check("c++ compiler", "ok", cxx)
        if cxx
        else Check(
            "c++ compiler",
            "fail",
            "none found: chapter 20 stops at its first C++ build",
            "Debian/Ubuntu: `apt install g++`; macOS: `xcode-select --install`; Windows: Visual Studio Build Tools",
            ("20",),
        )
    )
    venv_ninja = os.path.join(os.path.dirname(sys.executable), "ninja")  # pip's ninja, if not on PATH
    ninja = _version_of(["ninja", "--version"]) or _version_of([venv_ninja, "--version"])
    checks.append(
        Check("ninja", "ok", ninja)
        if ninja
        else Check(
            "ninja",
            "fail",
            "not found: torch.utils.cpp_extension needs it, so chapter 20 stops at its first C++ build",
            "`pip install ninja` in .venv",
            ("20",),
        )
    )
    cuda_home = os.environ.get("CUDA_HOME") or ("/usr/local/cuda" if os.path.isdir("/usr/local/cuda") else None)
    nvcc = _version_of(["nvcc", "--version"]) or (
        _version_of([os.path.join(cuda_home, "bin", "nvcc"), "--version"]) if cuda_home else None
    )
    checks.append(_nvcc_check(nvcc))

    folder = data_dir()
    probe = folder
    while not probe.exists() and probe != probe.parent:  # data/ may not exist yet
        probe = probe.parent
    free_gb = shutil.disk_usage(probe).free / 1e9
    checks.append(
        Check("disk", "ok", f"{free_gb:.1f} GB free for data/ and build/")
        if free_gb >= min_free_gb
        else Check("disk", "warn", f"only {free_gb:.1f} GB free (below {min_free_gb:g} GB)", f"free at least {min_free_gb:g} GB")
    )

    names = tuple(datasets) if datasets is not None else tuple(data.REGISTRY)
    # a stand-in is looked up too, so an optional dataset knows whether the chapters can do without it
    where = {n: data.status(n) for n in dict.fromkeys(names + tuple(STAND_INS[n] for n in names if n in STAND_INS))}
    mirror_set = mirror_dir() is not None or mirror_url() is not None
    checks.extend(_data_check(n, where, mirror_set) for n in names)
    return DoctorReport(checks)


def main() -> int:
    """``make doctor``: print the report; exit status 1 if any check failed."""
    report = doctor()
    print(report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
