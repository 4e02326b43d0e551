"""Multi-process training for chapters 25 and 26: a launcher and the entry points it runs.

A notebook cannot hand a function defined in itself to other processes (they
would have to import it by name, and a notebook is not importable), so every
distributed program of the course is a module in this package, run under
``torchrun`` by :func:`helpers.distributed.launch.torchrun`::

    from helpers.distributed.launch import torchrun
    result = torchrun("helpers.distributed.collectives", "--out", str(out_dir), nproc=2)
    print(result.output)

Modules:

- :mod:`helpers.distributed.launch`  ``torchrun`` as a subprocess: free port, per-rank
  prefixes, logs under ``build/distributed/``, timeouts that kill every rank,
  :class:`~helpers.distributed.launch.DistributedRunError` with the failing rank's traceback
- :mod:`helpers.distributed.common`  what each rank does first and last: read
  RANK/WORLD_SIZE/LOCAL_RANK, pick the backend, ``init_process_group`` with a bounded
  timeout, ``destroy_process_group``; rank 0 writes results atomically
- entry points of chapter 25: ``collectives`` (with the environment report), ``ddp_equivalence``,
  ``ddp_train``, ``elastic_train``, ``fail_rank``
- entry points of chapter 26: ``fsdp_memory`` (FSDP2 against DDP and one process, then a DCP
  checkpoint), ``mesh_placements`` (DTensor shards on a 1-D mesh), ``tp_check`` (tensor
  parallelism; with ``--pipeline`` also ``pipeline_check``'s GPipe and 1F1B schedules),
  ``mesh_2d`` (FSDP over ``dp`` and tensor parallelism over ``tp`` on a 2 x 2 mesh)
- ``sleeper``: a rank that prints its environment and sleeps, for the launcher's tests

Importing this package does not import torch.
"""

from __future__ import annotations

import os

__all__ = ["backend", "local_world_size"]


def local_world_size() -> int:
    """How many ranks run on this machine: ``$LOCAL_WORLD_SIZE`` (set by torchrun), else 1."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def backend(local_world: int | None = None) -> str:
    """The process-group backend to use here: ``"nccl"`` or ``"gloo"``.

    ``"nccl"`` when CUDA is available and there is at least one GPU per local
    rank (NCCL wants one GPU per process), otherwise ``"gloo"``, which runs on
    CPU tensors everywhere.

    Args:
        local_world: number of ranks on this machine; defaults to
            :func:`local_world_size` (``$LOCAL_WORLD_SIZE``).
    """
    import torch

    local_world = local_world_size() if local_world is None else local_world
    if torch.cuda.is_available() and torch.cuda.device_count() >= local_world:
        return "nccl"
    return "gloo"
