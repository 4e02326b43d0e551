"""Chapter 26: DTensor placements on a 1-D device mesh, shard by shard.

Run under torchrun (any world size; the chapter uses 2)::

    python -m torch.distributed.run --nproc-per-node 2 -m helpers.distributed.mesh_placements --out build/x

Every rank builds the same small matrix ``arange(rows * cols)``, distributes
it with ``Shard(0)``, ``Shard(1)`` and ``Replicate()`` over
``init_device_mesh(device_type, (world,))``, and reports its local shard: shape,
values and where the shard starts in the global matrix. Rank 0 writes
``placements.json``::

    {"world": 2, "rows": 5, "cols": 4, "matrix": [[...]],
     "placements": {"Shard(0)": {"ranks": [{"rank": 0, "shape": [3, 4], "offset": [0, 0],
                                             "values": [[...]]}, ...],
                                  "full_tensor_equal": true, "dtensor_shape": [5, 4]}, ...}}

``--mesh-size N`` asks for a mesh of N devices instead of the world size (a
mismatch fails: the chapter shows the error).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

from helpers.distributed.common import gather_object, process_group, run_main, write_json


def _local_offset(dtensor, rank: int) -> list[int]:
    """Where this rank's local shard starts in the global tensor (row, column), on a 1-D mesh.

    ``Shard(d)`` splits dimension ``d`` the way ``torch.chunk`` does: chunks of
    ``ceil(n / world)``, the last ones shorter or empty.
    """
    offset = [0] * dtensor.ndim
    for placement in dtensor.placements:
        if isinstance(placement, Shard):
            n, world = dtensor.shape[placement.dim], dtensor.device_mesh.size()
            offset[placement.dim] = min(rank * -(-n // world), n)
    return offset



@record
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder (under build/)")
    parser.add_argument("--rows", type=int, default=5)
    parser.add_argument("--cols", type=int, default=4)
    parser.add_argument("--mesh-size", type=int, default=None, help="devices in the mesh (default: the world size)")
    args = parser.parse_args()
    with process_group() as ctx:
        rank, world, device_type = ctx.rank, ctx.world_size, ctx.device.type
        mesh = init_device_mesh(device_type, (args.mesh_size or world,))
        matrix = torch.arange(args.rows * args.cols, dtype=torch.float32).reshape(args.rows, args.cols)
        results = {}
        for label, placement in (("Shard(0)", Shard(0)), ("Shard(1)", Shard(1)), ("Replicate()", Replicate())):
            dt = distribute_tensor(matrix.to(device_type), mesh, [placement])
            local = dt.to_local()
            mine = {"rank": rank, "shape": list(local.shape), "offset": _local_offset(dt, rank), "values": local.cpu().tolist()}
            equal = bool(torch.equal(dt.full_tensor().cpu(), matrix))
            results[label] = {
                "ranks": gather_object(mine),
                "full_tensor_equal": equal,
                "dtensor_shape": list(dt.shape),
                "placements": str(dt.placements),
            }
            print(f"{label}: local shape {tuple(local.shape)} at offset {tuple(mine['offset'])}, full_tensor() equal: {equal}")
        if rank == 0:
            write_json(Path(args.out) / "placements.json",
                       {"world": world, "rows": args.rows, "cols": args.cols, "mesh": str(mesh),
                        "matrix": matrix.tolist(), "placements": results})


if __name__ == "__main__":
    run_main(main)
