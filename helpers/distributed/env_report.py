"""Entry point: each rank prints what torchrun put in its environment, then they all agree on a sum.

Run it with ``torchrun("helpers.distributed.env_report", "--out", folder)``.
Rank 0 writes ``<out>/env.json``: ``{"ranks": [{"RANK": ..., ...}, ...], "sum_of_ranks": ...}``,
gathered from every rank with ``all_gather_object``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from .common import process_group, run_main, write_json

#: The variables torchrun sets for each rank that a training script reads.
VARIABLES = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
    "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID", "OMP_NUM_THREADS",
)  # fmt: skip


@record
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, type=Path, help="folder for env.json")
    args = parser.parse_args(argv)
    env = {name: os.environ.get(name, "") for name in VARIABLES}
    env["pid"] = os.getpid()
    for name in VARIABLES:
        print(f"{name}={env[name]}")
    with process_group() as ctx:
        total = torch.tensor([float(ctx.rank)], device=ctx.device)
        dist.all_reduce(total)  # SUM by default: every rank ends with 0 + 1 + ... + (world_size - 1)
        print(f"backend={ctx.backend} all_reduce(rank) = {total.item():g}")
        everyone: list[dict | None] = [None] * ctx.world_size
        dist.all_gather_object(everyone, env)
        write_json(args.out / "env.json", {"ranks": everyone, "sum_of_ranks": total.item(), "backend": ctx.backend}, ctx)


if __name__ == "__main__":
    run_main(main)
