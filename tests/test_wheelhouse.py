"""helpers/wheelhouse.py: offline installs from a folder of wheels, tested with a tiny wheelhouse built here."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers.paths import ROOT

SCRIPT = ROOT / "helpers" / "wheelhouse.py"


def _wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A minimal pure-Python wheel (PEP 427) holding module ``name`` with VERSION = version."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": f"VERSION = {version!r}\n",
        f"{dist}/METADATA": "Metadata-Version: 2.1\n"
        f"Name: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name_in_zip, text in files.items():
            zf.writestr(name_in_zip, text)
    return path


def _run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=120)


@pytest.fixture
def house(tmp_path):
    folder = tmp_path / "wheels"
    _wheel(folder, "coursetiny", "1.0", requires=("coursedep==2.0",))
    _wheel(folder, "coursedep", "2.0")
    return folder


def test_install_uses_only_the_wheelhouse_and_the_pins(house, tmp_path):
    (tmp_path / "req.txt").write_text("coursetiny\n")
    (tmp_path / "constraints.txt").write_text("coursetiny==1.0\ncoursedep==2.0\n")
    _wheel(house, "coursetiny", "9.0")  # a newer wheel the constraints must keep out
    site = tmp_path / "site"
    proc = _run("install", house, "--quiet", "--target", site, "-r", tmp_path / "req.txt", "-c", tmp_path / "constraints.txt")
    assert proc.returncode == 0, proc.stderr
    assert (site / "coursetiny.py").read_text() == "VERSION = '1.0'\n" and (site / "coursedep.py").is_file()


def test_a_missing_wheel_names_the_package_and_the_fix(house, tmp_path):
    (tmp_path / "req.txt").write_text("coursetiny==1.0\nnot-in-the-house==3.1\n")
    proc = _run("install", house, "--target", tmp_path / "site", "-r", tmp_path / "req.txt")
    assert proc.returncode != 0
    assert f"the wheelhouse {house} has no wheel for not-in-the-house==3.1" in proc.stderr, proc.stderr
    assert "make wheelhouse DIR=" in proc.stderr
    assert not (tmp_path / "site" / "coursetiny.py").exists(), "nothing may be half-installed"


def test_an_empty_or_absent_wheelhouse_is_refused_before_pip_runs(tmp_path):
    for folder in (tmp_path / "absent", tmp_path):
        proc = _run("install", folder, "coursetiny")
        assert proc.returncode == 1 and "holds no wheels" in proc.stderr and "make wheelhouse DIR=" in proc.stderr


def test_build_fills_a_wheelhouse_from_another_source(house, tmp_path):
    # `make wheelhouse` runs `pip wheel` against PyPI; here the source is a local folder, with no network.
    out = tmp_path / "usb"
    proc = _run("build", out, "--no-index", "--find-links", house, "coursetiny==1.0")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.glob("*.whl")) == ["coursedep-2.0-py3-none-any.whl", "coursetiny-1.0-py3-none-any.whl"]


def test_usage():
    proc = _run("unpack")
    assert proc.returncode == 2 and "build DIR" in proc.stderr
