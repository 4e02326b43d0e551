"""Installing the course with no network, from a folder of wheels (a workshop's USB stick).

On a machine with internet, with the same operating system, CPU
architecture and Python version as the learners' machines::

    make wheelhouse DIR=/media/usb/wheels     # every pinned package, as wheels (about 6 GB with torch)

then on each learner's machine, offline::

    make setup WHEELHOUSE=/media/usb/wheels   # pip install --no-index --find-links, same pins

This file runs as a script (``python helpers/wheelhouse.py ...``) before the
course is installed, so it uses the standard library only. It wraps pip and
turns pip's "No matching distribution" into an error that names the package
and says how to fix the wheelhouse.

    python helpers/wheelhouse.py build DIR [pip wheel arguments...]
    python helpers/wheelhouse.py install DIR [pip install arguments...]
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
_MISSING = re.compile(r"No matching distribution found for ([^\s;]+)")
_NO_VERSION = re.compile(r"Could not find a version that satisfies the requirement ([^\s;]+)")


def build_command(folder: Path, pip_args: list[str]) -> list[str]:
    """The ``pip wheel`` command that fills ``folder`` with wheels for ``pip_args`` (requirements, -c constraints)."""
    return [*PIP, "wheel", "--wheel-dir", str(folder), *pip_args]


def install_command(folder: Path, pip_args: list[str]) -> list[str]:
    """The ``pip install`` command that installs ``pip_args`` from ``folder`` only (``--no-index --find-links``)."""
    return [*PIP, "install", "--no-index", "--find-links", str(folder), *pip_args]


def missing_packages(pip_output: str) -> list[str]:
    """The requirements pip could not find (``torch==2.14.1``, ...), in order, each once."""
    found = _MISSING.findall(pip_output) + _NO_VERSION.findall(pip_output)
    return list(dict.fromkeys(found))


def install(folder: Path, pip_args: list[str]) -> int:
    """Run :func:`install_command`; on a missing wheel, print which one and the fix. Returns pip's exit status (1 for a missing folder)."""
    if not folder.is_dir() or not any(folder.glob("*.whl")):
        print(f"WHEELHOUSE={folder} holds no wheels (.whl files). Fill it on a machine with internet "
              f"(same OS and Python {sys.version_info.major}.{sys.version_info.minor}): "
              f"make wheelhouse DIR={folder}", file=sys.stderr)
        return 1
    proc = subprocess.run(install_command(folder, pip_args), capture_output=True, text=True)
    sys.stdout.write(proc.stdout)
    if proc.returncode == 0:
        return 0
    missing = missing_packages(proc.stdout + proc.stderr)
    if not missing:
        sys.stderr.write(proc.stderr)
        return proc.returncode
    tail = [line for line in proc.stderr.splitlines() if line.startswith("ERROR")][-2:]
    print("\n".join(tail), file=sys.stderr)
    print(f"the wheelhouse {folder} has no wheel for {', '.join(missing)} that fits this machine "
          f"(Python {sys.version_info.major}.{sys.version_info.minor}, {sys.platform}). "
          f"Fill it again with `make wheelhouse DIR={folder}` on a machine with internet and the same OS, "
          "CPU architecture and Python version, then rerun `make setup WHEELHOUSE=...`", file=sys.stderr)
    return proc.returncode


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] not in ("build", "install"):
        print(__doc__.rsplit("\n\n", 1)[-1], file=sys.stderr)
        return 2
    command, folder, pip_args = args[0], Path(args[1]).expanduser().resolve(), args[2:]
    if command == "build":
        folder.mkdir(parents=True, exist_ok=True)
        return subprocess.run(build_command(folder, pip_args)).returncode
    return install(folder, pip_args)


if __name__ == "__main__":
    sys.exit(main())
