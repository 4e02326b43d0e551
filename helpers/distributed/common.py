"""What every rank of a course entry point does first and last.

::

    from torch.distributed.elastic.multiprocessing.errors import record
    from helpers.distributed.common import process_group, run_main, write_json

    @record
    def main() -> None:
        with process_group() as ctx:          # init_process_group(backend(), timeout=60 s)
            ...                               # ctx.rank, ctx.world_size, ctx.local_rank, ctx.device
            write_json(out_dir / "result.json", {...}, ctx)   # rank 0 only, atomically
        # destroy_process_group() has run, even after an exception

    if __name__ == "__main__":
        run_main(main)                        # a finished rank skips interpreter shutdown
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ..paths import atomic_write, atomic_write_text
from . import backend

__all__ = ["Context", "env_int", "process_group", "save_rank0", "write_json"]

#: How long collectives and the initial rendezvous wait for the other ranks before failing.
DEFAULT_TIMEOUT = timedelta(seconds=60)


def env_int(name: str, default: int | None = None) -> int:
    """An integer environment variable torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, ...)."""
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise RuntimeError(f"{name} is not set: run this module under torchrun (helpers.distributed.launch.torchrun)")
        return default
    return int(value)


@dataclass(frozen=True)
class Context:
    """Who this process is in the job."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    backend: str
    device: torch.device
    restart_count: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0


@contextlib.contextmanager
def process_group(timeout: timedelta = DEFAULT_TIMEOUT) -> Iterator[Context]:
    """Join the job's default process group (bounded ``timeout``), yield a :class:`Context`, always destroy it.

    The backend comes from :func:`helpers.distributed.backend`; with NCCL each
    rank uses ``cuda:<LOCAL_RANK>``, with gloo the CPU.

    The ranks meet in the key-value store at ``MASTER_ADDR:MASTER_PORT`` (the
    ``env://`` rendezvous), under a key prefix that names the restart attempt.
    With torchrun's c10d rendezvous that store belongs to torchrun and outlives
    the ranks, so after a restart it still holds the addresses the crashed
    attempt's ranks published; without the prefix a new rank can read an old,
    dead address and fail with "Connection refused" (it happened on a busy machine).
    """
    rank = env_int("RANK")
    world_size = env_int("WORLD_SIZE")
    local_rank = env_int("LOCAL_RANK")
    local_world = env_int("LOCAL_WORLD_SIZE", world_size)
    restart = env_int("TORCHELASTIC_RESTART_COUNT", 0)
    name = backend(local_world)
    try:
        store, _, _ = next(dist.rendezvous("env://", rank, world_size, timeout=timeout))
        store = dist.PrefixStore(f"course/attempt_{restart}", store)
        if name == "nccl":
            device = torch.device("cuda", local_rank)
            torch.cuda.set_device(device)
            dist.init_process_group(name, store=store, rank=rank, world_size=world_size, timeout=timeout, device_id=device)
        else:
            device = torch.device("cpu")
            dist.init_process_group(name, store=store, rank=rank, world_size=world_size, timeout=timeout)
    except BaseException:  # a rank that cannot join is a root cause too: time-stamp it like any other failure
        mark_failure_time()
        raise
    try:
        yield Context(rank, world_size, local_rank, local_world, name, device, restart)
    except BaseException:
        mark_failure_time()
        raise
    finally:
        dist.destroy_process_group()


#: File beside torchrun's per-rank ``error.json`` that holds when the rank's error happened.
FAILED_AT = "failed_at"


def mark_failure_time() -> None:
    """Note, beside this rank's torchrun error file, the moment its error happened.

    ``@record`` writes ``error.json`` only after the exception has left
    ``main``, that is after ``destroy_process_group`` has closed the
    connections, and by then the other ranks may already have failed *because*
    of it and written their own error files. This earlier time stamp lets
    :func:`helpers.distributed.launch.rank_failures` name the rank that failed first.
    """
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file:
        try:
            atomic_write_text(Path(error_file).with_name(FAILED_AT), f"{time.time():.6f}\n")
        except OSError:
            pass


def write_json(path: str | os.PathLike, data: Any, ctx: Context | None = None) -> None:
    """Write ``data`` as JSON to ``path`` atomically; only on rank 0 when ``ctx`` is given."""
    if ctx is not None and not ctx.is_main:
        return
    atomic_write_text(Path(path), json.dumps(data, indent=2, sort_keys=True) + "\n")


def save_rank0(path: str | os.PathLike, obj: Any, ctx: Context | None = None) -> None:
    """``torch.save(obj)`` to ``path`` atomically; only on rank 0 when ``ctx`` is given."""
    if ctx is not None and not ctx.is_main:
        return
    atomic_write(Path(path), lambda tmp: torch.save(obj, tmp))


def gather_object(obj: Any) -> list:
    """Every rank's ``obj`` (any picklable value), in rank order, on every rank.

    A thin wrapper over ``dist.all_gather_object``; needs an initialised
    process group (a ``RuntimeError`` from torch otherwise).
    """
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def run_main(main) -> None:
    """Run an entry point's ``main()``; when it returns, end the rank at once with status 0.

    A finished rank skips the interpreter's shutdown. There, torch's C++
    background threads can, rarely, abort a rank whose work is complete
    ("terminate called without an active exception", then SIGABRT: seen once
    in CI, in ``tp_check`` after both ranks had printed their results), which
    turns a successful job into a failed one. Output is flushed first; files
    the entry point wrote are already closed. An exception from ``main()``
    propagates as usual, so ``@record`` writes the rank's error file and the
    exit status is 1.
    """
    main()
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
