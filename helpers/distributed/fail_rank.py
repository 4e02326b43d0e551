"""Entry point for the pitfalls and the tests: one rank fails on purpose, or every rank hangs.

``--fail-rank R``: rank R raises ``ValueError`` after joining the group, while the
others wait in a barrier (torchrun then stops them). ``--hang S``: every rank sleeps
S seconds without ever finishing the barrier (to show the launcher's timeout).
"""

from __future__ import annotations

import argparse
import time

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from .common import process_group, run_main


def load_shard(rank: int) -> None:
    """Stands in for real work that goes wrong on one rank only (a corrupt file, a bad batch, ...)."""
    raise ValueError(f"shard {rank} is corrupt (raised on purpose by helpers.distributed.fail_rank)")


@record
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--hang", type=float, default=0.0)
    args = parser.parse_args(argv)
    with process_group() as ctx:
        print(f"rank {ctx.rank} of {ctx.world_size} started", flush=True)
        if args.hang:
            time.sleep(args.hang)
        if ctx.rank == args.fail_rank:
            load_shard(ctx.rank)
        dist.barrier()
        print(f"rank {ctx.rank} passed the barrier", flush=True)


if __name__ == "__main__":
    run_main(main)
