"""Shared fixtures. Tests never touch the real data/ or build/ unless they say so."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import pytest

from helpers import data
from helpers.paths import ROOT

SHARED_MIRROR = ROOT.parent / "shared" / "datasets"


@pytest.fixture
def isolated_dirs(tmp_path, monkeypatch):
    """Empty data/ and build/ folders, no mirror, downloads disabled."""
    data_dir = tmp_path / "data"
    build_dir = tmp_path / "build"
    monkeypatch.setenv("COURSE_DATA_DIR", str(data_dir))
    monkeypatch.setenv("COURSE_BUILD_DIR", str(build_dir))
    monkeypatch.delenv("COURSE_DATA_MIRROR", raising=False)
    monkeypatch.setenv("COURSE_OFFLINE", "1")
    return tmp_path


@pytest.fixture
def toy_dataset(isolated_dirs, monkeypatch):
    """A two-file dataset "toy" registered for the test, with a mirror holding both files.

    One mirror file is gzip-compressed (decompressed on copy), one is plain.
    Returns ``(spec, mirror_folder, contents)`` where contents maps each
    final relative path to its bytes.
    """
    mirror = isolated_dirs / "mirror"
    (mirror / "toy").mkdir(parents=True)
    contents = {"toy/a.bin": b"alpha" * 1000, "toy/b.txt": b"bravo\n" * 50}
    with gzip.open(mirror / "toy" / "a.bin.gz", "wb") as fh:
        fh.write(contents["toy/a.bin"])
    (mirror / "toy" / "b.txt").write_bytes(contents["toy/b.txt"])
    spec = data.DatasetSpec(
        "toy",
        "a toy dataset for tests",
        (
            data.FileSpec("toy/a.bin", hashlib.md5(contents["toy/a.bin"]).hexdigest(), "toy/a.bin.gz"),
            data.FileSpec("toy/b.txt", hashlib.md5(contents["toy/b.txt"]).hexdigest(), "toy/b.txt"),
        ),
    )
    monkeypatch.setitem(data.REGISTRY, "toy", spec)
    return spec, mirror, contents


def shared_mirror() -> Path | None:
    return SHARED_MIRROR if (SHARED_MIRROR / "MANIFEST.md").is_file() else None
