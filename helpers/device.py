"""Device choice, seeding, and the preflight "doctor" report (chapter 00, ``make doctor``)."""

from __future__ import annotations

import importlib
import logging
import os
import platform
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass

import torch

from .paths import data_dir, mirror_dir

__all__ = ["Check", "DoctorReport", "doctor", "import_without_cuda_home_log", "pick_device", "seed_everything"]

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


def pick_device(prefer: str | None = None) -> torch.device:
    """Choose where tensors should live.

    Order: ``prefer`` if given, else ``$COURSE_DEVICE`` if set, else CUDA,
    then Apple's MPS, then the CPU.

    Args:
        prefer: ``"cuda"``, ``"cuda:1"``, ``"mps"``, ``"cpu"`` or ``None`` for automatic.

    Returns:
        A ``torch.device``.

    Raises:
        ValueError: ``prefer`` is not a device string torch understands.
        RuntimeError: the requested device is not available on this machine
            (the message says what is available instead).
    """
    wanted = prefer if prefer is not None else (os.environ.get("COURSE_DEVICE", "").strip() or None)
    if wanted is None:
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(wanted)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"{wanted!r} is not a device name; use 'cpu', 'cuda', 'cuda:0' or 'mps'") from exc
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = device.index or 0
        if index >= count:
            raise RuntimeError(
                f"asked for {device} but this machine has {count} usable CUDA device(s); "
                "unset COURSE_DEVICE or pass prefer=None to fall back to the CPU"
            )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise RuntimeError("asked for 'mps' but MPS is not available (it needs Apple silicon and macOS 12.3+)")
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


@dataclass
class Check:
    """One line of the doctor report.

    ``status`` is ``"ok"``, ``"info"`` (fine, just so you know), ``"warn"``
    (works, but something will be slower or skipped) or ``"fail"`` (chapters
    will break). ``fix`` is a hint for anything other than ok.
    """

    name: str
    status: str
    detail: str
    fix: str = ""


@dataclass
class DoctorReport:
    checks: list[Check]

    @property
    def ok(self) -> bool:
        """True when no check failed."""
        return all(c.status != "fail" for c in self.checks)

    @property
    def verdict(self) -> str:
        fails = [c.name for c in self.checks if c.status == "fail"]
        warns = [c.name for c in self.checks if c.status == "warn"]
        if fails:
            return f"NOT READY: fix {', '.join(fails)}"
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
        f"{have} (the stored outputs were made with {want})",
        "run `make setup` to get the pinned version in .venv",
    )


def doctor(datasets: tuple[str, ...] | None = None, min_free_gb: float = 2.0) -> DoctorReport:
    """Check this machine for the course and return a report (print it to read it).

    Checks: Python >= 3.10, the pinned torch and torchvision, CUDA and MPS,
    CPU threads, a C++ compiler and ninja (for chapter 20's extensions), nvcc,
    free disk under ``data/``, and where each dataset would come from.

    Args:
        datasets: which datasets to look for (default: all in the registry).
        min_free_gb: warn below this much free disk, in GB (10**9 bytes).

    Returns:
        A :class:`DoctorReport`; ``report.ok`` is False if anything failed.
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

    if torch.cuda.is_available():
        names = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        checks.append(Check("cuda", "ok", f"{torch.cuda.device_count()} device(s): {names}"))
    else:
        built = torch.version.cuda or "none"
        checks.append(
            Check(
                "cuda",
                "info",
                f"no CUDA device (torch built for CUDA {built}); GPU-only cells will skip",
                "nothing needed: every chapter runs on the CPU",
            )
        )
    mps = torch.backends.mps.is_available()
    checks.append(Check("mps", "ok" if mps else "info", "available" if mps else "not available (Apple silicon only)"))
    checks.append(
        Check("threads", "ok", f"torch uses {torch.get_num_threads()} of {os.cpu_count()} logical CPUs")
    )

    cxx = _version_of(["c++", "--version"]) or _version_of(["g++", "--version"]) or _version_of(["clang++", "--version"])
    checks.append(
        Check("c++ compiler", "ok", cxx)
        if cxx
        else Check(
            "c++ compiler",
            "warn",
            "none found; chapter 20's C++ extension cells will fail",
            "Debian/Ubuntu: `apt install g++`; macOS: `xcode-select --install`; Windows: Visual Studio Build Tools",
        )
    )
    venv_ninja = os.path.join(os.path.dirname(sys.executable), "ninja")  # pip's ninja, if not on PATH
    ninja = _version_of(["ninja", "--version"]) or _version_of([venv_ninja, "--version"])
    checks.append(
        Check("ninja", "ok", ninja)
        if ninja
        else Check("ninja", "warn", "not found; torch.utils.cpp_extension needs it", "`pip install ninja` in .venv")
    )
    cuda_home = os.environ.get("CUDA_HOME") or ("/usr/local/cuda" if os.path.isdir("/usr/local/cuda") else None)
    nvcc = _version_of(["nvcc", "--version"]) or (
        _version_of([os.path.join(cuda_home, "bin", "nvcc"), "--version"]) if cuda_home else None
    )
    checks.append(
        Check("nvcc", "ok", nvcc)
        if nvcc
        else Check("nvcc", "info", "not found; CUDA kernels cannot be compiled here", "install the CUDA toolkit and set CUDA_HOME")
    )

    folder = data_dir()
    probe = folder
    while not probe.exists() and probe != probe.parent:  # data/ may not exist yet
        probe = probe.parent
    free_gb = shutil.disk_usage(probe).free / 1e9
    checks.append(
        Check("disk", "ok", f"{free_gb:.1f} GB free for data/ and build/")
        if free_gb >= min_free_gb
        else Check("disk", "warn", f"only {free_gb:.1f} GB free", f"free at least {min_free_gb:g} GB")
    )

    mirror = mirror_dir()
    for name in datasets or tuple(data.REGISTRY):
        where = data.status(name)
        detail = {
            "ready": "in data/",
            "mirror": "will be copied from COURSE_DATA_MIRROR",
            "download": "will be downloaded on first use (needs a network)",
            "offline": "not available offline (COURSE_OFFLINE=1)",
            "unavailable": "not in data/, and only the course mirror has it",
        }[where]
        # a missing dataset breaks only the chapters that use it: a warning, not a failure
        status = "ok" if where in ("ready", "mirror") else "warn"
        fix = "" if status == "ok" else (
            "run `make data` with a network, or set COURSE_DATA_MIRROR to the course mirror"
            + ("" if mirror is None else " (the one set lacks this dataset)")
        )
        if status != "ok" and data.REGISTRY[name].optional:
            status, fix = "info", "nothing needed (optional; a stand-in is used); `make data` with a network fetches it"
        checks.append(Check(f"data: {name}", status, detail, fix))
    return DoctorReport(checks)


def main() -> int:
    """``make doctor``: print the report; exit status 1 if any check failed."""
    report = doctor()
    print(report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
