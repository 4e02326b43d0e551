"""helpers.data: resolution order, md5 checks, atomic writes, the offline error."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import torch

from helpers import data
from helpers.paths import data_dir

from .conftest import shared_mirror


def test_copies_and_decompresses_from_the_mirror(toy_dataset, monkeypatch):
    spec, mirror, contents = toy_dataset
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(mirror))
    root = data.ensure("toy")
    assert root == data_dir()
    for relpath, blob in contents.items():
        assert (root / relpath).read_bytes() == blob
    assert not list(root.rglob("*.part")), "temporary files must not be left behind"


def test_second_call_uses_data_folder_without_the_mirror(toy_dataset, monkeypatch):
    spec, mirror, contents = toy_dataset
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(mirror))
    data.ensure("toy")
    monkeypatch.delenv("COURSE_DATA_MIRROR")
    assert data.status("toy") == "ready"
    assert (data.ensure("toy") / "toy/b.txt").read_bytes() == contents["toy/b.txt"]


def test_corrupt_local_file_is_reported_by_name_and_replaced(toy_dataset, monkeypatch):
    spec, mirror, contents = toy_dataset
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(mirror))
    root = data.ensure("toy")
    (root / "toy/a.bin").write_bytes(b"truncated")
    with pytest.warns(data.CorruptFileWarning, match=r"toy/a\.bin"):
        data.ensure("toy")
    assert (root / "toy/a.bin").read_bytes() == contents["toy/a.bin"]


def test_corrupt_file_is_never_used_when_no_source_can_replace_it(toy_dataset, monkeypatch):
    spec, mirror, contents = toy_dataset
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(mirror))
    root = data.ensure("toy")
    (root / "toy/b.txt").write_bytes(b"garbage")
    monkeypatch.delenv("COURSE_DATA_MIRROR")
    with pytest.warns(data.CorruptFileWarning), pytest.raises(data.DataUnavailableError):
        data.ensure("toy")
    assert not (root / "toy/b.txt").exists(), "the corrupt file must be removed, not kept"


def test_corrupt_mirror_file_is_rejected_and_not_written(toy_dataset, monkeypatch):
    spec, mirror, contents = toy_dataset
    (mirror / "toy" / "b.txt").write_bytes(b"not what the md5 says")
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(mirror))
    with pytest.raises(data.DataUnavailableError, match=r"b\.txt: md5"):
        data.ensure("toy")
    assert not (data_dir() / "toy/b.txt").exists()
    assert not list(data_dir().rglob("*.part"))


def test_offline_error_names_dataset_places_and_fixes(toy_dataset, monkeypatch):
    spec, _, _ = toy_dataset
    monkeypatch.setitem(data.REGISTRY, "toy", dataclasses.replace(spec, download=lambda root: None))
    with pytest.raises(data.DataUnavailableError) as info:
        data.ensure("toy")
    msg = str(info.value)
    assert "'toy'" in msg
    assert str(data_dir()) in msg
    assert "COURSE_DATA_MIRROR is not set" in msg
    assert "COURSE_OFFLINE=1" in msg
    assert "make data" in msg and "export COURSE_DATA_MIRROR" in msg


def test_mirror_only_dataset_does_not_suggest_a_download(toy_dataset):
    with pytest.raises(data.DataUnavailableError) as info:
        data.ensure("toy")
    assert "only from the course mirror" in str(info.value) and "make data" not in str(info.value)


def test_corrupt_gzip_in_the_mirror_is_named_not_a_crash(toy_dataset, monkeypatch):
    spec, mirror, _ = toy_dataset
    gz = mirror / "toy" / "a.bin.gz"
    blob = bytearray(gz.read_bytes())
    blob[len(blob) // 2] ^= 0xFF  # damage the deflate stream
    gz.write_bytes(bytes(blob))
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(mirror))
    with pytest.raises(data.DataUnavailableError, match=r"toy/a\.bin\.gz is corrupt"):
        data.ensure("toy")
    assert (data_dir() / "toy/b.txt").is_file(), "the good file is still copied"
    assert not list(data_dir().rglob("*.part"))


def test_missing_mirror_folder_is_said_once(toy_dataset, monkeypatch, tmp_path):
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(tmp_path / "nowhere"))
    with pytest.raises(data.DataUnavailableError) as info:
        data.ensure("toy")
    assert str(info.value).count("no such folder") == 1


def test_written_files_are_not_private(toy_dataset, monkeypatch):
    spec, mirror, _ = toy_dataset
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(mirror))
    old = os.umask(0o022)
    try:
        root = data.ensure("toy")
    finally:
        os.umask(old)
    assert (root / "toy/a.bin").stat().st_mode & 0o777 == 0o644


def test_download_is_the_last_resort(toy_dataset, monkeypatch):
    spec, mirror, contents = toy_dataset
    monkeypatch.delenv("COURSE_OFFLINE")

    def fake_download(root: Path) -> None:
        for relpath, blob in contents.items():
            (root / relpath).parent.mkdir(parents=True, exist_ok=True)
            (root / relpath).write_bytes(blob)

    monkeypatch.setitem(data.REGISTRY, "toy", dataclasses.replace(spec, download=fake_download))
    assert (data.ensure("toy") / "toy/a.bin").read_bytes() == contents["toy/a.bin"]


def test_failed_download_is_explained(toy_dataset, monkeypatch):
    spec, _, _ = toy_dataset
    monkeypatch.delenv("COURSE_OFFLINE")

    def no_network(root: Path) -> None:
        raise OSError("Name or service not known")

    monkeypatch.setitem(data.REGISTRY, "toy", dataclasses.replace(spec, download=no_network))
    with pytest.raises(data.DataUnavailableError, match="download: failed .*Name or service not known"):
        data.ensure("toy")


def test_atomic_write_leaves_destination_untouched_on_bad_md5(tmp_path):
    dest = tmp_path / "file.bin"
    dest.write_bytes(b"old content")
    with pytest.raises(data.ChecksumError):
        data._write_atomically(dest, lambda tmp: tmp.write_bytes(b"new content"), md5="0" * 32)
    assert dest.read_bytes() == b"old content"
    assert [p.name for p in tmp_path.iterdir()] == ["file.bin"]


def test_unknown_dataset_lists_known_ones(isolated_dirs):
    with pytest.raises(KeyError, match="mnist"):
        data.ensure("imagenet")


def test_status_reports_each_source(toy_dataset, monkeypatch):
    spec, mirror, _ = toy_dataset
    assert data.status("toy") == "unavailable", "no download address: only a mirror can provide it"
    monkeypatch.setitem(data.REGISTRY, "toy", dataclasses.replace(spec, download=lambda root: None))
    assert data.status("toy") == "offline"
    monkeypatch.delenv("COURSE_OFFLINE")
    assert data.status("toy") == "download"
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(mirror))
    assert data.status("toy") == "mirror"


def test_every_registered_file_has_an_md5_and_a_source():
    for spec in data.REGISTRY.values():
        assert spec.files, spec.name
        for f in spec.files:
            assert len(f.md5) == 32 and int(f.md5, 16) >= 0, f.path
            assert f.mirror


@pytest.mark.skipif(shared_mirror() is None, reason="the course mirror ../shared/datasets is not beside this checkout")
@pytest.mark.parametrize("name, cls, n_train", [("mnist", "mnist", 60_000), ("fashion-mnist", "fashion_mnist", 60_000)])
def test_real_mnist_family_from_the_shared_mirror(isolated_dirs, monkeypatch, name, cls, n_train):
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(shared_mirror()))
    train = getattr(data, cls)(train=True)
    test = getattr(data, cls)(train=False)
    assert len(train) == n_train and len(test) == 10_000
    assert tuple(train.data.shape[1:]) == (28, 28)
    assert set(train.targets.unique().tolist()) == set(range(10))
    # every produced file matches the manifest
    for f in data.REGISTRY[name].files:
        assert data.md5sum(data_dir() / f.path) == f.md5


@pytest.mark.skipif(shared_mirror() is None, reason="the course mirror ../shared/datasets is not beside this checkout")
def test_cifar_falls_back_to_the_subset_offline(isolated_dirs, monkeypatch):
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(shared_mirror()))
    train, which = data.cifar10(train=True)
    test, _ = data.cifar10(train=False)
    assert which == "subset"
    assert len(train) == 4000 and len(test) == 1000
    assert train.data.shape == (4000, 32, 32, 3) and train.data.dtype.name == "uint8"
    img, label = test[0]
    assert img.size == (32, 32) and img.mode == "RGB" and 0 <= label < 10
    counts = torch.bincount(torch.tensor(train.targets), minlength=10)
    assert counts.min() > 300, "the subset's classes are roughly balanced"
    with pytest.raises(data.DataUnavailableError):
        data.cifar10(allow_subset=False)


def test_cifar_with_a_mirror_never_tries_the_network(isolated_dirs, monkeypatch):
    if shared_mirror() is None:
        pytest.skip("needs the course mirror")
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(shared_mirror()))
    monkeypatch.delenv("COURSE_OFFLINE")

    def no_download(root):
        raise AssertionError("the full CIFAR-10 download must not be attempted when the subset is at hand")

    monkeypatch.setitem(data.REGISTRY, "cifar10", dataclasses.replace(data.REGISTRY["cifar10"], download=no_download))
    assert data.cifar10(train=False)[1] == "subset"


def test_cifar_reader_decodes_channel_planes(tmp_path):
    import pickle

    import numpy as np

    img = np.zeros((2, 3, 32, 32), dtype=np.uint8)
    img[0, 0] = 255  # first image pure red
    img[1, 2] = 255  # second pure blue
    with open(tmp_path / "b", "wb") as fh:
        pickle.dump({"data": img.reshape(2, 3072), "labels": [3, 7]}, fh)
    ds = data.CifarBatches(tmp_path, ["b"])
    assert ds[0][0].getpixel((5, 5)) == (255, 0, 0) and ds[1][0].getpixel((0, 31)) == (0, 0, 255)
    assert ds.targets == [3, 7]


@pytest.mark.skipif(shared_mirror() is None, reason="needs the course mirror")
def test_tiny_shakespeare(isolated_dirs, monkeypatch):
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(shared_mirror()))
    text = data.tiny_shakespeare()
    assert len(text) == 1_115_394 and text.startswith("First Citizen:")
