"""Offline-first datasets and weights, every file md5-checked.

Each dataset is a :class:`DatasetSpec`: the files the course needs (paths
relative to ``data/``), the md5 each must have, where the same file sits in the
offline mirror, and how to download it. :func:`ensure` resolves a dataset in
this order (``COURSE_DESIGN.md``, "Data"):

1. ``data/`` (or ``$COURSE_DATA_DIR``): used if the md5 matches;
2. ``$COURSE_DATA_MIRROR``: copied, or gunzipped for ``.gz``, into ``data/``
   through a temporary file that is md5-checked before an atomic rename. An
   ``http://`` or ``https://`` value is a mirror served over HTTP (a
   classroom's ``make serve-mirror``), fetched with timeouts, retries and
   resume by :mod:`helpers.http_mirror`;
3. a download (torchvision's own for MNIST and Fashion-MNIST), skipped when
   ``COURSE_OFFLINE=1``.

A file whose md5 is wrong is reported with a :class:`CorruptFileWarning` naming
it, deleted and replaced; it is never used. When every source fails,
:class:`DataUnavailableError` says which dataset, where it looked and how to
fix it.

Checksums are the published ones: MNIST (LeCun et al.) and Fashion-MNIST
(Xiao et al. 2017) as torchvision 0.29 lists them for the uncompressed files;
the rest from ``shared/datasets/MANIFEST.md``.

Command line (``make data``)::

    python -m helpers.data fetch --all     # or: fetch mnist fashion-mnist
    python -m helpers.data list
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import re
import shutil
import sys
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .paths import atomic_write, data_dir, mirror_dir, mirror_url, rel

__all__ = [
    "ChecksumError",
    "CorruptFileWarning",
    "DataUnavailableError",
    "DatasetSpec",
    "FileSpec",
    "REGISTRY",
    "ensure",
    "fashion_mnist",
    "file_digest",
    "md5sum",
    "mnist",
    "status",
    "CIFAR10_CLASSES",
    "CifarBatches",
    "cifar10",
    "resnet_cifar_checkpoint",
    "tiny_shakespeare",
]


class DataUnavailableError(RuntimeError):
    """No source could provide a dataset; the message lists where we looked and the fixes."""


class ChecksumError(RuntimeError):
    """A file's md5 differs from the published one."""


class CorruptFileWarning(UserWarning):
    """A file on disk failed its md5 check and is being replaced (it is never used)."""


@dataclass(frozen=True)
class FileSpec:
    """One file of a dataset.

    Attributes:
        path: where the file must end up, relative to ``data/``.
        md5: hex md5 of that final (uncompressed) file.
        mirror: its path inside ``$COURSE_DATA_MIRROR``; a name ending in
            ``.gz`` is decompressed on the way.
        url: optional direct download address (used when the dataset has no
            torchvision downloader).
    """

    path: str
    md5: str
    mirror: str
    url: str | None = None


@dataclass(frozen=True)
class DatasetSpec:
    """A named dataset (or weight file set) and how to obtain it."""

    name: str
    description: str
    files: tuple[FileSpec, ...]
    #: Fetches the files into a given data folder, or ``None`` to fetch each
    #: :attr:`FileSpec.url` directly.
    download: Callable[[Path], None] | None = field(default=None, compare=False)
    #: True when the course works without it (something else stands in,
    #: e.g. the CIFAR-10 subset for the full set).
    optional: bool = False


# --------------------------------------------------------------------------
# Checksums and atomic writes
# --------------------------------------------------------------------------


def md5sum(path: Path | str, chunk_bytes: int = 1 << 20) -> str:
    """Hex md5 digest of a file, read in ``chunk_bytes`` chunks.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
    """
    return file_digest(path, "md5", chunk_bytes)


def file_digest(path: Path | str, algorithm: str, chunk_bytes: int = 1 << 20) -> str:
    """Hex digest of a file with ``hashlib`` algorithm ``algorithm`` (e.g. ``"md5"``, ``"sha256"``), read in chunks.

    (``hashlib.file_digest`` does this from Python 3.11; the course supports 3.10.)

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: ``algorithm`` is not one hashlib knows.
    """
    digest = hashlib.new(algorithm, usedforsecurity=False)
    with open(path, "rb") as fh:
        while block := fh.read(chunk_bytes):
            digest.update(block)
    return digest.hexdigest()


def _write_atomically(dest: Path, fill: Callable[[Path], None], md5: str) -> None:
    """Write ``dest`` through a temporary sibling that must match ``md5`` first.

    ``fill(tmp_path)`` writes the content; see :func:`helpers.paths.atomic_write`.

    Raises:
        ChecksumError: the written content has the wrong md5 (``dest`` is untouched).
    """

    def verify(tmp: Path) -> None:
        got = md5sum(tmp)
        if got != md5:
            raise ChecksumError(f"{dest.name}: md5 {got}, expected {md5}")

    atomic_write(dest, fill, verify)


def _copy_from_mirror(src: Path, dest: Path, md5: str) -> None:
    def fill(tmp: Path) -> None:
        opener = gzip.open if src.suffix == ".gz" else open
        with opener(src, "rb") as fin, open(tmp, "wb") as fout:
            shutil.copyfileobj(fin, fout, length=1 << 20)

    _write_atomically(dest, fill, md5)


def _download_url(url: str, dest: Path, md5: str) -> None:
    from torch.hub import download_url_to_file

    _write_atomically(dest, lambda tmp: download_url_to_file(url, str(tmp), progress=False), md5)


def _fetch_over_http(base_url: str, files: list[FileSpec], root: Path, notes: list[str], quiet: bool) -> list[FileSpec]:
    """Fetch ``files`` from the HTTP mirror at ``base_url`` into ``root``; return those that failed.

    Each file is asked for under its mirror name (``.gz`` decompressed on the
    way), then, after a 404, under its ``data/`` name (a served ``data/``
    folder). Each failure adds one line to ``notes`` naming the file, the URL
    and what happened.
    """
    from .http_mirror import MirrorDownloadError, fetch, url_for

    failed = []
    for k, f in enumerate(files):
        names = [f.mirror] + ([f.path] if f.path != f.mirror else [])
        for i, name in enumerate(names):
            try:
                fetch(url_for(base_url, name), root / f.path, f.md5, name=f.path, gunzip=name.endswith(".gz"))
                if not quiet:
                    print(f"fetched {name} from {base_url}")
                break
            except MirrorDownloadError as exc:
                if exc.status == 404 and i + 1 < len(names):
                    continue  # not under the mirror's name: try the data/ layout
                failed.append(f)
                tried = f" (after a 404 for {names[0]})" if i else ""
                notes.append(f"HTTP mirror: {exc}{tried}")
                if exc.unreachable:  # the others would wait just as long: stop here
                    rest = files[k + 1:]
                    failed.extend(rest)
                    if rest:
                        notes.append(f"HTTP mirror: {len(rest)} more file(s) not tried; is `make serve-mirror` "
                                     f"running there, and is COURSE_DATA_MIRROR={base_url} right?")
                    return failed
                break
            except OSError as exc:  # data/ not writable, disk full
                failed.append(f)
                notes.append(f"data folder {root}: {f.path}: {exc.strerror or exc}")
                break
    return failed


def _is_valid(target: Path, spec: FileSpec) -> bool:
    """True if ``target`` exists with the right md5; a corrupt file is reported (and later replaced)."""
    if not target.is_file():
        return False
    try:
        got = md5sum(target)
    except FileNotFoundError:  # another process is replacing it right now
        return False
    if got == spec.md5:
        return True
    warnings.warn(
        f"corrupt file {rel(target)}: md5 {got}, expected {spec.md5}; fetching a fresh copy (it will not be used)",
        CorruptFileWarning,
        stacklevel=4,
    )
    return False


def _remove_if_corrupt(target: Path, spec: FileSpec) -> None:
    """Delete ``target`` unless it is (by now) valid: a corrupt file must not linger to be used."""
    try:
        if target.is_file() and md5sum(target) != spec.md5:
            target.unlink(missing_ok=True)
    except OSError:  # read-only folder, or someone else removed it first
        pass


# --------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------


def _torchvision_download(cls_name: str) -> Callable[[Path], None]:
    def download(root: Path) -> None:
        import torchvision.datasets as tvd

        cls = getattr(tvd, cls_name)
        for train in (True, False):
            cls(root=str(root), train=train, download=True)

    return download


def _idx_files(folder: str, md5s: dict[str, str]) -> tuple[FileSpec, ...]:
    return tuple(
        FileSpec(path=f"{folder}/raw/{name}", md5=md5, mirror=f"{folder}/raw/{name}.gz")
        for name, md5 in md5s.items()
    )


_CIFAR_SUBSET_MD5 = {
    "batches.meta": "c7887b21c2c9cf6b57156fab3ae51020",
    "data_batch_1": "980d0519e9539144d244d7349fc74431",
    "data_batch_2": "f7e2cab15e40e2e375cef429f4d9f24b",
    "data_batch_3": "b7f8c2afd79992c063422b56aeb36086",
    "data_batch_4": "1cf5bbf7ea04d600fd15fd53be1dbc31",
    "data_batch_5": "8f3a5e9f2889edca7e38fa0a5353e2e9",
    "test_batch": "9822ba4685d4c0c891b02bb582f30df5",
}
_RESNET_MD5 = {
    "resnet20-12fca82f.th": "1f38c81cdebd6bcce9b03d082161a36c",
    "resnet32-d509ac18.th": "1b290d0b1aad139b0f2be36cf1fa4846",
    "resnet44-014dd654.th": "953c35969bce8e16eba14f6de91ef262",
    "resnet56-4bfd9763.th": "48a2383e717f38f02934658ab8d4d9a2",
}
# Published by Yerlan Idelbayev (BSD-2-Clause), github.com/akamaster/pytorch_resnet_cifar10.
_RESNET_URL = "https://github.com/akamaster/pytorch_resnet_cifar10/raw/master/pretrained_models/"

# torchvision 0.29's CIFAR10.train_list / test_list / meta.
_CIFAR_FULL_MD5 = {
    "batches.meta": "5ff9c542aee3614f3951f8cda6e48888",
    "data_batch_1": "c99cafc152244af753f735de768cd75f",
    "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "data_batch_4": "634d18415352ddfa80567beed471001a",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "test_batch": "40351d587109b95175f43aff81a1287e",
}

REGISTRY: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec(
            "mnist",
            "MNIST handwritten digits, 60,000 train + 10,000 test, 28x28 grey",
            _idx_files(
                "MNIST",
                {
                    "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
                    "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
                    "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
                    "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
                },
            ),
            _torchvision_download("MNIST"),
        ),
        DatasetSpec(
            "fashion-mnist",
            "Fashion-MNIST clothing images, 60,000 train + 10,000 test, 28x28 grey",
            _idx_files(
                "FashionMNIST",
                {
                    "train-images-idx3-ubyte": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
                    "train-labels-idx1-ubyte": "9018921c3c673c538a1fc5bad174d6f9",
                    "t10k-images-idx3-ubyte": "8181f5470baa50b63fa0f6fddb340f0a",
                    "t10k-labels-idx1-ubyte": "15d484375f8d13e6eb1aabb0c3f46965",
                },
            ),
            _torchvision_download("FashionMNIST"),
        ),
        DatasetSpec(
            "cifar10",
            "CIFAR-10, full: 50,000 train + 10,000 test images, 32x32 RGB (170 MB download)",
            tuple(
                FileSpec(path=f"cifar-10-batches-py/{name}", md5=md5, mirror=f"cifar-10-batches-py/{name}")
                for name, md5 in _CIFAR_FULL_MD5.items()
            ),
            _torchvision_download("CIFAR10"),
            optional=True,
        ),
        DatasetSpec(
            "cifar10-subset",
            "CIFAR-10 offline subset: 4,000 train + 1,000 test images, 32x32 RGB (mirror only)",
            tuple(
                FileSpec(
                    path=f"CIFAR10-subset/cifar-10-batches-py/{name}",
                    md5=md5,
                    mirror=f"CIFAR10-subset/cifar-10-batches-py/{name}",
                )
                for name, md5 in _CIFAR_SUBSET_MD5.items()
            ),
            optional=True,  # the full set (downloadable) stands in for it
        ),
        DatasetSpec(
            "resnet-cifar10",
            "ResNet-20/32/44/56 CIFAR-10 weights (He et al. 2016, option A), BSD-2-Clause",
            tuple(
                FileSpec(
                    path=f"weights/resnet-cifar10/{name}",
                    md5=md5,
                    mirror=f"weights/resnet-cifar10/{name}",
                    url=_RESNET_URL + name,
                )
                for name, md5 in _RESNET_MD5.items()
            ),
        ),
        DatasetSpec(
            "tinyshakespeare",
            "Tiny Shakespeare, 1,115,394 characters of plain text",
            (
                FileSpec(
                    path="text/tinyshakespeare.txt",
                    md5="6fb458f1232090904fb40fe944165e91",
                    mirror="text/tinyshakespeare.txt",
                    url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
                ),
            ),
        ),
    )
}


def _spec(name: str) -> DatasetSpec:
    key = name.lower().replace("_", "-")
    if key not in REGISTRY:
        raise KeyError(f"unknown dataset {name!r}; known datasets: {', '.join(REGISTRY)}")
    return REGISTRY[key]


def _offline() -> bool:
    return os.environ.get("COURSE_OFFLINE", "").strip().lower() in {"1", "true", "yes"}


# --------------------------------------------------------------------------
# Resolution
# --------------------------------------------------------------------------


def ensure(name: str, *, quiet: bool = True) -> Path:
    """Make every file of dataset ``name`` present and md5-valid under ``data/``.

    Args:
        name: a key of :data:`REGISTRY`, e.g. ``"mnist"`` or ``"fashion-mnist"``.
        quiet: if False, print one line per file copied or downloaded.

    Returns:
        The data folder (pass it as ``root=`` to torchvision datasets).

    Raises:
        KeyError: ``name`` is not a known dataset.
        DataUnavailableError: neither ``data/``, the mirror nor a download
            could provide a valid copy. The message names the dataset, the
            places tried and the two fixes.

    Warns:
        CorruptFileWarning: for each file on disk whose md5 was wrong
            (it is deleted and replaced, never used).
    """
    spec = _spec(name)
    root = data_dir()
    missing = [f for f in spec.files if not _is_valid(root / f.path, f)]
    if not missing:
        return root

    notes: list[str] = [f"data folder {root}: missing {', '.join(Path(f.path).name for f in missing)}"]
    mirror, url = mirror_dir(), mirror_url()
    if url is not None:
        missing = _fetch_over_http(url, missing, root, notes, quiet)
        if not missing:
            return root
    elif mirror is None:
        notes.append("mirror: COURSE_DATA_MIRROR is not set")
    else:
        still = []
        if not mirror.is_dir():
            notes.append(f"mirror {mirror}: no such folder")
            still = missing
        for f in missing if mirror.is_dir() else []:
            src = mirror / f.mirror
            try:
                if not src.is_file():
                    raise FileNotFoundError(f"{f.mirror} not found")
                _copy_from_mirror(src, root / f.path, f.md5)
                if not quiet:
                    print(f"copied {f.mirror} from the mirror")
            except (ChecksumError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
                still.append(f)
                notes.append(f"mirror {mirror}: {f.mirror} is corrupt ({exc})")
            except OSError as exc:  # unreadable mirror, or data/ not writable
                still.append(f)
                where = "data folder" if str(root) in str(getattr(exc, "filename", "") or "") else f"mirror {mirror}"
                notes.append(f"{where}: {f.mirror}: {exc.strerror or exc}")
        missing = still
        if not missing:
            return root

    if _offline():
        notes.append("download: skipped because COURSE_OFFLINE=1")
    else:
        try:
            for f in missing:  # a downloader may trust any file that is present
                _remove_if_corrupt(root / f.path, f)
            if spec.download is not None:
                spec.download(root)
            else:
                for f in missing:
                    if f.url is None:
                        raise RuntimeError(f"{f.path} has no download address (mirror only)")
                    _download_url(f.url, root / f.path, f.md5)
                    if not quiet:
                        print(f"downloaded {Path(f.path).name}")
            missing = [f for f in missing if not _is_valid(root / f.path, f)]
            if not missing:
                return root
            notes.append("download: finished but files are still missing or corrupt")
        except Exception as exc:  # network errors come in many types
            notes.append(f"download: failed ({type(exc).__name__}: {exc})")

    for f in missing:
        _remove_if_corrupt(root / f.path, f)
    looked = "\n".join(f"  - {n}" for n in dict.fromkeys(notes))
    mirror_fix = (
        "point COURSE_DATA_MIRROR at a copy of the course mirror, e.g.\n"
        "     `export COURSE_DATA_MIRROR=../shared/datasets`, then re-run."
    ) if url is None else (
        f"check the HTTP mirror COURSE_DATA_MIRROR={url}: the lines above say what it answered; the machine\n"
        "     serving it runs `make serve-mirror` and prints the address to use. Then re-run."
    )
    if spec.download is not None or all(f.url for f in spec.files):
        fixes = (
            "How to fix (either one):\n"
            "  1. with a network, run `make data` once (it downloads every dataset into data/);\n"
            f"  2. offline, {mirror_fix}"
        )
    else:
        fixes = f"How to fix: this dataset comes only from the course mirror:\n  {mirror_fix}"
    raise DataUnavailableError(
        f"Dataset {spec.name!r} ({spec.description}) is not available.\n"
        f"Looked in:\n{looked}\n{fixes}"
    )


def status(name: str) -> str:
    """Where dataset ``name`` would come from, without copying anything.

    Returns:
        ``"ready"`` (all files in ``data/``; md5 not re-checked here),
        ``"mirror"`` (copyable from ``$COURSE_DATA_MIRROR``; for an HTTP
        mirror, assumed without asking it),
        ``"download"`` (needs a network), ``"offline"`` (downloadable, but
        ``COURSE_OFFLINE=1``) or ``"unavailable"`` (only a mirror has it).
    """
    spec = _spec(name)
    root, mirror = data_dir(), mirror_dir()
    if all((root / f.path).is_file() for f in spec.files):
        return "ready"
    if mirror is not None and all((mirror / f.mirror).is_file() for f in spec.files):
        return "mirror"
    if mirror_url() is not None:
        return "mirror"  # an HTTP mirror is not asked here (no network in status()); ensure() asks it
    if spec.download is None and not all(f.url for f in spec.files):
        return "unavailable"
    return "offline" if _offline() else "download"


# --------------------------------------------------------------------------
# Datasets as torchvision objects
# --------------------------------------------------------------------------


def mnist(train: bool = True, transform=None, target_transform=None):
    """Real MNIST as a ``torchvision.datasets.MNIST`` (resolved offline-first).

    Items are ``(PIL.Image 28x28 mode "L", int label 0-9)`` unless
    ``transform`` converts them. ``.data`` is a uint8 tensor ``[N, 28, 28]``
    and ``.targets`` an int64 tensor ``[N]`` (N = 60,000 or 10,000).

    Raises:
        DataUnavailableError: see :func:`ensure`.
    """
    from torchvision.datasets import MNIST

    root = ensure("mnist")
    return MNIST(str(root), train=train, transform=transform, target_transform=target_transform)


def fashion_mnist(train: bool = True, transform=None, target_transform=None):
    """Real Fashion-MNIST as a ``torchvision.datasets.FashionMNIST``; like :func:`mnist`.

    Raises:
        DataUnavailableError: see :func:`ensure`.
    """
    from torchvision.datasets import FashionMNIST

    root = ensure("fashion-mnist")
    return FashionMNIST(str(root), train=train, transform=transform, target_transform=target_transform)


CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


class CifarBatches:
    """CIFAR-10 read from its python pickle batches: a map-style dataset.

    torchvision's ``CIFAR10`` insists on the md5s of the full set, so the
    offline subset needs this small reader of the same layout: each batch
    file is a pickled dict with ``data`` (uint8 ``[n, 3072]``, the red plane,
    then green, then blue, each 32x32 row-major) and ``labels`` (n ints).

    Attributes:
        data: uint8 numpy array ``[N, 32, 32, 3]`` (HWC, like torchvision's).
        targets: list of N ints in 0..9.
        classes: the 10 class names.

    Items are ``(PIL.Image RGB 32x32, int label)`` before ``transform``.

    Raises:
        FileNotFoundError: a batch file is missing.
        ValueError: a batch does not have the expected layout.
    """

    def __init__(self, folder: Path, files: list[str], transform=None, target_transform=None) -> None:
        import pickle

        import numpy as np

        arrays, labels = [], []
        for name in files:
            with open(folder / name, "rb") as fh:
                batch = pickle.load(fh, encoding="latin1")  # md5-checked before we get here
            data = np.asarray(batch["data"], dtype=np.uint8)
            if data.ndim != 2 or data.shape[1] != 3072 or len(batch["labels"]) != len(data):
                raise ValueError(f"{name}: expected data [n, 3072] and n labels, got {data.shape} and {len(batch['labels'])}")
            arrays.append(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
            labels.extend(int(v) for v in batch["labels"])
        self.data = np.concatenate(arrays)
        self.targets = labels
        self.classes = list(CIFAR10_CLASSES)
        self.transform = transform
        self.target_transform = target_transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int):
        from PIL import Image

        img, target = Image.fromarray(self.data[index]), self.targets[index]
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target

    def __repr__(self) -> str:
        return f"CifarBatches({len(self)} images, 32x32 RGB, 10 classes)"


def cifar10(train: bool = True, transform=None, target_transform=None, *, allow_subset: bool = True):
    """CIFAR-10: the full set where it is on disk or downloadable, else the offline subset.

    Order: the full set in ``data/cifar-10-batches-py`` (md5-checked); the
    offline subset (4,000 train / 1,000 test images, Krizhevsky 2009 pixels)
    when it is in ``data/`` or the mirror, since a mirror means "work
    offline"; otherwise a download of the full set (skipped when
    ``COURSE_OFFLINE=1``), falling back to the subset. ``make data`` with a
    network fetches the full set. Full data is never replaced by the subset.

    Returns:
        ``(dataset, which)``: a :class:`CifarBatches` and ``"full"`` or ``"subset"``.

    Raises:
        DataUnavailableError: neither the full set nor the subset is available
            (or the full set is not and ``allow_subset`` is False).
    """
    full = REGISTRY["cifar10"]
    full_on_disk = all((data_dir() / f.path).is_file() for f in full.files)
    # A mirror (or a subset already in data/) means "work offline": do not wait on a 170 MB download.
    offline_source = status("cifar10-subset") in ("ready", "mirror")
    try:
        if not full_on_disk and (offline_source or not allow_subset):
            if not allow_subset:
                ensure("cifar10")  # raises if it cannot be had
            raise DataUnavailableError("full CIFAR-10 not on disk; using the offline subset")
        root = ensure("cifar10")
        which, folder = "full", root / "cifar-10-batches-py"
    except DataUnavailableError:
        if not allow_subset:
            raise
        root = ensure("cifar10-subset")
        which, folder = "subset", root / "CIFAR10-subset" / "cifar-10-batches-py"
    files = [f"data_batch_{i}" for i in range(1, 6)] if train else ["test_batch"]
    return CifarBatches(folder, files, transform, target_transform), which


def resnet_cifar_checkpoint(depth: int = 20) -> Path:
    """Path of the published ResNet-``depth`` CIFAR-10 weights (depth 20, 32, 44 or 56).

    The file (Idelbayev, BSD-2-Clause; see ``shared/datasets/MANIFEST.md``)
    is a dict with ``state_dict`` (keys prefixed ``module.``) and
    ``best_prec1``; load it with ``torch.load(path, weights_only=True)``.

    Raises:
        ValueError: another depth.
        DataUnavailableError: see :func:`ensure`.
    """
    names = {int(re.match(r"resnet(\d+)-", Path(f.path).name).group(1)): f.path for f in REGISTRY["resnet-cifar10"].files}
    if depth not in names:
        raise ValueError(f"no published weights for ResNet-{depth}; choose one of {sorted(names)}")
    return ensure("resnet-cifar10") / names[depth]


def tiny_shakespeare() -> str:
    """The Tiny Shakespeare text (1,115,394 characters, md5-checked) as one string.

    Raises:
        DataUnavailableError: see :func:`ensure`.
    """
    return (ensure("tinyshakespeare") / "text" / "tinyshakespeare.txt").read_text(encoding="utf-8")


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.data", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    fetch = sub.add_parser("fetch", help="copy or download datasets into data/")
    fetch.add_argument("names", nargs="*", help=f"any of: {', '.join(REGISTRY)}")
    fetch.add_argument("--all", action="store_true", help="every dataset")
    sub.add_parser("list", help="show each dataset and where it would come from")
    args = parser.parse_args(argv)

    if args.cmd == "list":
        for name, spec in REGISTRY.items():
            print(f"{name:16s} {status(name):9s} {spec.description}")
        return 0
    names = list(REGISTRY) if args.all or not args.names else args.names
    failed = 0
    for name in names:
        try:
            root = ensure(name, quiet=False)
            print(f"{name}: ok ({rel(root)})")
        except DataUnavailableError as exc:
            if REGISTRY[name].optional:
                print(f"{name}: skipped (optional; {REGISTRY[name].description})")
                continue
            failed += 1
            print(f"{name}: FAILED\n{exc}", file=sys.stderr)
        except KeyError as exc:
            failed += 1
            print(f"{name}: FAILED: {exc}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
