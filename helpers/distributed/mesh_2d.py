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

With ``--checkpoint DIR --full-state FILE`` the same 4-process job also loads
the DCP checkpoint that ``helpers.distributed.fsdp_memory`` saved at world
size 2 into the chapter's MLP (``--hidden``) sharded with ``fully_shard`` over
all 4 ranks, with a fresh AdamW, and compares every full parameter and AdamW
moment with the full tensors in ``FILE``; the result goes to ``mesh_2d.json``
under ``"dcp_world4"``.
"""

from __future__ import annotations

import argparse
import copy
import logging
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import parallelize_module

from helpers.distributed.common import gather_object, process_group, run_main, write_json
from helpers.distributed.tp_check import BLOCK_PLAN, TPBlock
from helpers.models import MLP


def load_resharded(checkpoint: str, full_state: str, hidden: tuple[int, ...], device_type: str, seed: int) -> dict:
    """Load a DCP checkpoint of the chapter's MLP + AdamW into a ``fully_shard`` model over every rank of this job.

    Returns (on every rank) whether the freshly initialised weights differed
    from the saved ones before the load, whether every full parameter and
    every AdamW ``exp_avg`` / ``exp_avg_sq`` equals the saved full tensors
    (``torch.equal``) after it, and each rank's local shapes.
    """
    world = dist.get_world_size()
    mesh = init_device_mesh(device_type, (world,))
    torch.manual_seed(seed + 1)  # different initial weights: the load must overwrite them
    model = MLP(784, hidden, 10, dropout=0.0).to(device_type)
    for layer in model.modules():
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    saved = torch.load(full_state, weights_only=True)
    differed = any(not torch.equal(p.full_tensor().cpu(), saved["model"][n]) for n, p in model.named_parameters())
    model_sd, optim_sd = get_state_dict(model, optimizer)  # creates AdamW's (sharded) state for DCP to fill
    dcp.load({"model": model_sd, "optim": optim_sd}, checkpoint_id=checkpoint)  # each rank reads the pieces it needs
    set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd)
    weights = all(torch.equal(p.full_tensor().cpu(), saved["model"][n]) for n, p in model.named_parameters())
    moments = all(torch.equal(optimizer.state[p][b].full_tensor().cpu(), saved["optim"]["state"][n][b])
                  for n, p in model.named_parameters() for b in ("exp_avg", "exp_avg_sq"))
    local = gather_object({n: list(p.to_local().shape) for n, p in model.named_parameters()})
    return {"world": world, "differed_before_load": differed, "weights_equal": weights, "moments_equal": moments,
            "local_shapes": local, "n_tensors": len(model_sd)}


@record
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--tp", type=int, default=2, help="size of the tensor-parallel dimension")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", default=None, help="a DCP checkpoint of the chapter's MLP to load at this world size")
    parser.add_argument("--full-state", default=None, help="torch.save'd full tensors to compare the load with")
    parser.add_argument("--hidden", type=int, nargs="+", default=[256, 128], help="the MLP's hidden widths (of the checkpoint)")
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
        params = {n: {"placements": str(p.placements), "shape": list(p.shape), "local_shape": list(p.to_local().shape),
                      # the same placements as data: [class name, dim, split factor] per mesh dimension, and which mesh
                      "kinds": [[type(pl).__name__, getattr(pl, "dim", None), getattr(pl, "split_factor", None)]
                                for pl in p.placements],
                      "mesh_dims": list(p.device_mesh.mesh_dim_names or ())}
                  for n, p in model.named_parameters()}
        # Where FSDP cut a TP piece again (a _StridedShard over dp), gathering over dp alone must give back
        # exactly this rank's TP piece of the weight: compare it with the reference's piece.
        tp_rank = mesh.get_local_rank("tp")
        rebuilt = {}
        for (n, p), q in zip(model.named_parameters(), reference.parameters()):
            if type(p.placements[0]).__name__ == "_StridedShard":
                piece = p.redistribute(p.device_mesh, [Replicate(), p.placements[1]]).to_local()
                want = q.detach().chunk(args.tp, dim=p.placements[1].dim)[tp_rank]
                rebuilt[n] = (piece - want).abs().max().item() if piece.shape == want.shape else float("inf")
        mine = {"rank": rank, "coordinate": mesh.get_coordinate(), "dp_gather_vs_tp_piece": rebuilt,
                "param_bytes": sum(p.to_local().nbytes for p in model.parameters())}
        everyone = gather_object(mine)
        print(f"mesh coordinate (dp, tp) = {tuple(mine['coordinate'])}: attn.q.weight local shape "
              f"{params['attn.q.weight']['local_shape']}, max |param - reference| {diff:.1e}")
        resharded = None
        if args.checkpoint:
            resharded = load_resharded(args.checkpoint, args.full_state, tuple(args.hidden), device_type, args.seed)
            print(f"DCP checkpoint saved at world size 2 loaded at world size {world}: weights equal "
                  f"{resharded['weights_equal']}, AdamW moments equal {resharded['moments_equal']}")
        if rank == 0:
            write_json(Path(args.out) / "mesh_2d.json", {
                "dcp_world4": resharded,
                "world": world, "mesh": mesh.mesh.tolist(), "dim_names": list(mesh.mesh_dim_names),
                "losses": losses, "reference_losses": [round(v.item(), 6) for v in ref_losses],
                "max_diff": diff, "params": params, "ranks": everyone,
                "full_param_bytes": sum(p.nbytes for p in reference.parameters()),
            })


if __name__ == "__main__":
    run_main(main)
