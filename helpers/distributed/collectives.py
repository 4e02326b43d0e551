"""Entry point: the environment torchrun gives each rank, then the collectives of ``torch.distributed``.

Run with ``torchrun("helpers.distributed.collectives", "--out", folder)``. Each rank
first prints ``NAME=value`` for the variables torchrun set (one launch serves both
of chapter 25's first sections), and rank 0 writes them, gathered from every rank, to ``<out>/env.json``
(``{"ranks": [...], "sum_of_ranks": ..., "backend": ...}``). Then every
rank starts from ``x = [rank + 1, 10 * (rank + 1)]`` (so rank 0 holds [1, 10],
rank 1 holds [2, 20], ...) and prints its result after each operation. Rank 0
writes ``<out>/collectives.json``: ``{op: [result of rank 0, result of rank 1, ...]}``
(gathered with ``all_gather_object``), and for an operation the backend does not
implement, ``{"unsupported": "<error message>"}``.
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

def start_value(rank: int, device: torch.device) -> torch.Tensor:
    return torch.tensor([rank + 1.0, 10.0 * (rank + 1)], device=device)


def run_all(rank: int, world: int, device: torch.device) -> dict[str, object]:
    """Every collective once; returns ``{op: this rank's result as a list}`` or ``{op: "unsupported: ..."}``."""
    results: dict[str, object] = {}

    def show(op: str, value) -> None:
        value = value.tolist() if isinstance(value, torch.Tensor) else value
        results[op] = value
        print(f"{op:<26} -> {value}", flush=True)

    def attempt(op: str, fn) -> None:
        try:
            show(op, fn())
        except (RuntimeError, ValueError, NotImplementedError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            results[op] = f"unsupported: {type(err).__name__}: {first}"
            print(f"{op:<26} -> {results[op]}", flush=True)

    show("start", start_value(rank, device))

    def all_reduce(op):
        x = start_value(rank, device)
        dist.all_reduce(x, op=op)  # in place: every rank ends with the same reduced tensor
        return x

    attempt("all_reduce SUM", lambda: all_reduce(dist.ReduceOp.SUM))
    attempt("all_reduce MAX", lambda: all_reduce(dist.ReduceOp.MAX))
    attempt("all_reduce AVG", lambda: all_reduce(dist.ReduceOp.AVG))

    def sum_then_divide():
        x = start_value(rank, device)
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
        return x / world  # what DDP does with gradients: the mean over ranks

    attempt("all_reduce SUM / world", sum_then_divide)

    def broadcast():
        x = start_value(rank, device)
        dist.broadcast(x, src=0)  # rank 0's tensor overwrites everyone's
        return x

    attempt("broadcast from 0", broadcast)

    def all_gather():
        out = torch.empty(world * 2, device=device)
        dist.all_gather_single(out, start_value(rank, device))  # rank r's tensor lands in slot r
        return out

    attempt("all_gather_single", all_gather)

    def reduce_scatter():
        # each rank contributes world * 2 numbers; chunk r of the SUM goes to rank r
        x = torch.cat([start_value(rank, device) * (chunk + 1) for chunk in range(world)])
        out = torch.empty(2, device=device)
        dist.reduce_scatter_single(out, x, op=dist.ReduceOp.SUM)
        return out

    attempt("reduce_scatter_single", reduce_scatter)

    def reduce_scatter_by_all_to_all():
        # the same result from all_to_all: send chunk r to rank r, then sum what arrived
        x = torch.cat([start_value(rank, device) * (chunk + 1) for chunk in range(world)])
        received = torch.empty_like(x)
        dist.all_to_all_single(received, x)
        return received.view(world, 2).sum(dim=0)

    attempt("all_to_all_single + sum", reduce_scatter_by_all_to_all)

    def barrier():
        dist.barrier()  # nobody leaves until everybody has arrived
        return "all ranks arrived"

    attempt("barrier", barrier)
    return results


@record
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, type=Path, help="folder for env.json and collectives.json")
    args = parser.parse_args(argv)
    env = {name: os.environ.get(name, "") for name in VARIABLES}
    env["pid"] = os.getpid()
    for name in VARIABLES:
        print(f"{name}={env[name]}", flush=True)
    with process_group() as ctx:
        total = torch.tensor([float(ctx.rank)], device=ctx.device)
        dist.all_reduce(total)  # SUM by default: every rank ends with 0 + 1 + ... + (world_size - 1)
        print(f"backend={ctx.backend} all_reduce(rank) = {total.item():g}", flush=True)
        environments: list[dict | None] = [None] * ctx.world_size
        dist.all_gather_object(environments, env)
        write_json(args.out / "env.json", {"ranks": environments, "sum_of_ranks": total.item(), "backend": ctx.backend}, ctx)
        mine = run_all(ctx.rank, ctx.world_size, ctx.device)
        everyone: list[dict | None] = [None] * ctx.world_size
        dist.all_gather_object(everyone, mine)
        table = {op: [ranks[op] for ranks in everyone] for op in mine}
        write_json(args.out / "collectives.json", {"backend": ctx.backend, "world_size": ctx.world_size, "results": table}, ctx)


if __name__ == "__main__":
    run_main(main)
