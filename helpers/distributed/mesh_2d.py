"""Chapter 26: a 2-D device mesh, FSDP over ``dp`` and tensor parallelism over ``tp``.

Run under torchrun with 4 processes (a 2 x 2 mesh)::

    python -m torch.distributed.run --nproc-per-node 4 -m helpers.distributed.mesh_2d --out build/x

``init_device_mesh(device_type, (dp, tp), mesh_dim_names=("dp", "tp"))`` puts
ranks ``[[0, 1], [2, 3]]`` in a grid: ranks in one row form a tensor-parallel
group (they hold different parts of each weight and see the same data), ranks
in one column form a data-parallel group (they see different halves of the
batch). The model is ``helpers.distributed.tp_check.TPBlock``: first
``parallelize_module`` over ``mesh["tp"]`` (inside), then ``fully_shard`` over
``mesh["dp"]`` (outside). After ``--steps`` SGD steps every parameter's full
tensor is compared with the same block trained in one process on the whole
batch. Rank 0 writes ``mesh_2d.json`` (placements, local shapes, per-rank
parameter bytes, losses, largest difference).
"""

from __future__ import annotations

import argparse
import copy
import logging
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import parallelize_module

from helpers.distributed.common import gather_object, process_group, run_main, write_json
from helpers.distributed.tp_check import BLOCK_PLAN, TPBlock


@record
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--tp", type=int, default=2, help="size of the tensor-parallel dimension")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    # Two messages that this script does not need: FSDP warns that a module returned a view (we never
    # change it in place), and DTensor logs that gathering a 2-D sharded tensor takes two all-gathers.
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module")
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    with process_group() as ctx:
        rank, world, device_type = ctx.rank, ctx.world_size, ctx.device.type
        if world % args.tp:
            raise ValueError(f"world size {world} does not divide into tensor-parallel groups of {args.tp}")
        mesh = init_device_mesh(device_type, (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))
        dp_rank, dp_size = mesh.get_local_rank("dp"), mesh.size(0)

        torch.manual_seed(args.seed)  # same weights, inputs and targets on every rank
        reference = TPBlock(32, 4).to(device_type)
        x = torch.randn(4 * dp_size, 6, 32, device=device_type)
        target = torch.randn_like(x)
        rows = slice(dp_rank * 4, (dp_rank + 1) * 4)  # this dp group's part of the batch

        model = parallelize_module(copy.deepcopy(reference), mesh["tp"], BLOCK_PLAN)  # inside: TP
        for layer in (*model.attn.values(), *model.mlp.values()):
            fully_shard(layer, mesh=mesh["dp"])  # outside: FSDP over the dp dimension
        fully_shard(model, mesh=mesh["dp"])

        # plain SGD: Adam divides by sqrt(v), which turns float rounding in tiny gradients into
        # visible differences; SGD keeps the comparison about the sharding, not about Adam
        ref_opt = torch.optim.SGD(reference.parameters(), lr=args.lr)
        opt = torch.optim.SGD(model.parameters(), lr=args.lr)
        losses, ref_losses = [], []
        for _ in range(args.steps):
            for m, o, xs, ts, log in ((reference, ref_opt, x, target, ref_losses), (model, opt, x[rows], target[rows], losses)):
                o.zero_grad(set_to_none=True)
                loss = F.mse_loss(m(xs), ts)
                loss.backward()
                o.step()
                log.append(loss.detach().clone())
        # the sharded model's loss: the mean over the dp groups (every tp rank of a group has the same value)
        for value in losses:
            dist.all_reduce(value, group=mesh.get_group("dp"))
        losses = [round(v.item() / dp_size, 6) for v in losses]
        diff = max((p.full_tensor() - q).abs().max().item() for p, q in zip(model.parameters(), reference.parameters()))
        params = {n: {"placements": str(p.placements), "shape": list(p.shape), "local_shape": list(p.to_local().shape)}
                  for n, p in model.named_parameters()}
        mine = {"rank": rank, "coordinate": mesh.get_coordinate(),
                "param_bytes": sum(p.to_local().nbytes for p in model.parameters())}
        everyone = gather_object(mine)
        print(f"mesh coordinate (dp, tp) = {tuple(mine['coordinate'])}: attn.q.weight local shape "
              f"{params['attn.q.weight']['local_shape']}, max |param - reference| {diff:.1e}")
        if rank == 0:
            write_json(Path(args.out) / "mesh_2d.json", {
                "world": world, "mesh": mesh.mesh.tolist(), "dim_names": list(mesh.mesh_dim_names),
                "losses": losses, "reference_losses": [round(v.item(), 6) for v in ref_losses],
                "max_diff": diff, "params": params, "ranks": everyone,
                "full_param_bytes": sum(p.nbytes for p in reference.parameters()),
            })


if __name__ == "__main__":
    run_main(main)
