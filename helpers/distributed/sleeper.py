"""Entry point for the launcher's tests: each rank prints its environment, then sleeps (it never imports torch).

``python -m helpers.distributed.sleeper --seconds S`` under torchrun. It does not join a
process group, so it starts in a fraction of a second; the tests use it to check the
per-rank prefixes, the environment torchrun sets, and that a timeout stops every rank.
``--seconds 0`` exits at once (a successful job).
"""

from __future__ import annotations

import argparse
import os
import time

#: Printed by every rank as ``NAME=value`` (torchrun sets all but the last).
VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=600.0)
    args = parser.parse_args(argv)
    for name in VARIABLES:
        print(f"{name}={os.environ.get(name, '')}", flush=True)
    print(f"pid {os.getpid()} sleeping {args.seconds:g} s", flush=True)
    time.sleep(args.seconds)


if __name__ == "__main__":
    main()
