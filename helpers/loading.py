"""What chapter 06's ``DataLoader`` worker processes run: datasets, shard functions, a ``worker_init_fn``.

Why these live in a module and not in the notebook: a worker process gets the
dataset, the ``worker_init_fn`` and the ``collate_fn`` by pickling, and pickle
stores a class or function by its module and name. With the ``fork`` start
method (Linux up to Python 3.13) the worker is a copy of the notebook's process
and finds them anyway. With ``spawn`` (macOS, Windows) and ``forkserver``
(Linux from Python 3.14) the worker is a fresh Python that must *import* them,
and a notebook's definitions live in its ``__main__``, which a fresh process
cannot import: the worker dies with ``AttributeError: Can't get attribute ...
on <module '__main__'>``. Everything here is importable, so it works with every
start method. Chapter 06 prints the source of each piece where it uses it.

Nothing here prints from a worker: what a worker did (its id, what it drew)
travels back through the loader as data, and the main process prints it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

__all__ = [
    "IndexedImages",
    "ImageStream",
    "PrecomputedShards",
    "RandomShift",
    "WorkerStderr",
    "naive_shard",
    "seed_worker",
    "strided_shard",
    "worker_stderr",
]

#: ``shard(n, worker_id, num_workers)`` -> the indices of ``range(n)`` that one worker reads.
ShardFn = Callable[[int, int, int], Sequence[int]]


class IndexedImages(Dataset):
    """Map-style: item ``i`` is ``(i, images[i], labels[i])``.

    Args:
        images: float tensor ``[N, C, H, W]``.
        labels: int64 tensor ``[N]``.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        return i, self.images[i], self.labels[i]


class ImageStream(IterableDataset):
    """Streams ``(index, worker id, image, label)`` for the images in order, like reading one file.

    ``shard(n, worker_id, num_workers)`` returns the indices one worker reads
    (``n = len(labels)``); ``None`` means every worker reads everything (no
    sharding at all). In the main process (``num_workers=0``) the stream
    yields everything, with worker id -1.

    Args:
        images: tensor ``[N, ...]``.
        labels: int64 tensor ``[N]``.
        shard: an importable function (or picklable object) as above, or ``None``.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, shard: ShardFn | None = None) -> None:
        self.images, self.labels, self.shard = images, labels, shard

    def __iter__(self) -> Iterator:
        n = len(self.labels)
        info = get_worker_info()  # None in the main process
        if info is None or self.shard is None:
            indices, worker = range(n), (-1 if info is None else info.id)
        else:
            indices, worker = self.shard(n, info.id, info.num_workers), info.id
        for i in indices:
            yield i, worker, self.images[i], self.labels[i]


def naive_shard(n: int, worker_id: int, num_workers: int) -> range:
    """Contiguous blocks of n // num_workers samples. BUG: drops the last n % num_workers samples."""
    per_worker = n // num_workers
    start = worker_id * per_worker
    return range(start, start + per_worker)


def strided_shard(n: int, worker_id: int, num_workers: int) -> range:
    """Worker w reads w, w + num_workers, w + 2 * num_workers, ...: every index exactly once."""
    return range(worker_id, n, num_workers)


class PrecomputedShards:
    """A shard function's answers for every worker, computed in the main process and sent as plain data.

    A shard function defined in a notebook cannot travel to a ``spawn`` worker,
    but the ranges it returns can: call it here for each worker id, then pass
    this object as ``ImageStream(shard=...)``.

    Args:
        shard: any callable ``shard(n, worker_id, num_workers)``.
        n: stream length.
        num_workers: the loader's ``num_workers`` (>= 1).

    Raises:
        ValueError: when called for another ``n`` or ``num_workers`` than it was made for.
    """

    def __init__(self, shard: ShardFn, n: int, num_workers: int) -> None:
        self.n, self.num_workers = n, num_workers
        self.parts = [list(shard(n, w, num_workers)) for w in range(num_workers)]

    def __call__(self, n: int, worker_id: int, num_workers: int) -> list[int]:
        if (n, num_workers) != (self.n, self.num_workers):
            raise ValueError(
                f"these shards were computed for n={self.n} and {self.num_workers} workers, "
                f"not n={n} and {num_workers} workers"
            )
        return self.parts[worker_id]


class RandomShift(Dataset):
    """Images rolled by a random (dy, dx) in -3..3, drawn from the dataset's own NumPy generator.

    Item ``i`` is a dict (``default_collate`` batches dicts key by key):

    - ``"image"``: ``images[i]`` rolled by ``shift`` (float ``[C, H, W]``);
    - ``"shift"``: int64 ``[2]``, drawn from ``self.rng``, the generator the
      dataset owns (``np.random.default_rng(seed)``, made in ``__init__``);
    - ``"global_shift"``: int64 ``[2]``, drawn from NumPy's *global* generator
      (``np.random.randint``), which the ``DataLoader`` re-seeds in every worker;
    - ``"worker"``: the id of the worker that made the item (-1 in the main process);
    - ``"torch_seed"``: ``torch.initial_seed()`` where the item was made (in a
      worker: ``base_seed + worker id``);
    - ``"pid"``: the operating-system process id (``os.getpid()``) of the
      process that made the item, to tell a restarted worker from a kept one.
    """

    def __init__(self, images: torch.Tensor, seed: int = 0) -> None:
        self.images = images
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> dict:
        dy, dx = (int(v) for v in self.rng.integers(-3, 4, size=2))
        info = get_worker_info()
        return {
            "image": torch.roll(self.images[i], shifts=(dy, dx), dims=(1, 2)),
            "shift": torch.tensor([dy, dx]),
            "global_shift": torch.from_numpy(np.random.randint(-3, 4, size=2).astype(np.int64)),
            "worker": -1 if info is None else info.id,
            "torch_seed": torch.initial_seed(),
            "pid": os.getpid(),
        }


def seed_worker(worker_id: int) -> None:
    """worker_init_fn: give this worker's copy of the dataset its own generator.

    ``torch.initial_seed()`` is this worker's torch seed, ``base_seed + worker_id``,
    which the ``DataLoader`` draws from its ``generator`` (PyTorch's
    reproducibility notes, "DataLoader").
    """
    dataset = get_worker_info().dataset
    dataset.rng = np.random.default_rng(torch.initial_seed())


@dataclass
class WorkerStderr:
    """What processes wrote to file descriptor 2 inside :func:`worker_stderr` (``text``, filled on exit)."""

    text: str = ""

    def last_line(self) -> str:
        """The last non-empty line (a traceback's last line is the exception), or ``""``."""
        lines = [line for line in self.text.splitlines() if line.strip()]
        return lines[-1] if lines else ""


@contextlib.contextmanager
def worker_stderr() -> Iterator[WorkerStderr]:
    """Collect what this process and the worker processes it starts write to stderr (fd 2).

    A worker that fails before it can report back prints its traceback to the
    stderr it inherited: in a notebook that is the terminal running Jupyter (or
    the cell's stderr), and the loader itself only says that the worker "exited
    unexpectedly". Inside this block, fd 2 points at a temporary file, so the
    worker's own message can be read and printed (``.text``, ``.last_line()``).
    Where the operating system does not pass the redirected fd 2 on to child
    processes, ``.text`` stays empty.
    """
    captured = WorkerStderr()
    with tempfile.TemporaryFile(mode="w+b") as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.text = sink.read().decode("utf-8", errors="replace")
