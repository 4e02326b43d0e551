"""Chapter 26: FSDP2 (``fully_shard``) against DDP and a single process, then a DCP checkpoint.

Run under torchrun (the chapter uses 2 processes)::

    python -m torch.distributed.run --nproc-per-node 2 -m helpers.distributed.fsdp_memory \
        --data build/x/batch.pt --out build/x --steps 3 --checkpoint build/x/ckpt

``--data`` is a ``torch.save``'d dict ``{"x": float [N, 784], "y": int64 [N]}``
(N divisible by the world size); rank r trains on the r-th contiguous block
of N / world rows, so the mean of the ranks' mean losses is the whole batch's
mean loss.

Every rank builds the same ``helpers.models.MLP(784, (256, 128), 10,
dropout=0)`` (same seed) and trains copies of it with AdamW for ``--steps``
steps, four ways:

- ``reference``: one process, the whole batch (what the others must match);
- ``ddp``: ``DistributedDataParallel``, a full replica per rank;
- ``fsdp_fp32``: ``fully_shard`` on each ``Linear`` and on the root, float32;
- ``fsdp_bf16``: the same with ``MixedPrecisionPolicy(param_dtype=bfloat16,
  reduce_dtype=float32)``.

Rank 0 writes ``fsdp.json``: per-rank bytes of parameters, gradients and
AdamW state (local shards only), the losses of every step, each run's largest
parameter difference from the reference, and the placements of the sharded
parameters. With ``--checkpoint DIR`` the float32 FSDP model and its
optimizer are saved with ``torch.distributed.checkpoint.save`` (sharded: each
rank writes its own shards), and rank 0 also writes the full tensors to
``full_state.pt`` (``{"model": {...}, "optim": {...}}``) to compare a reload with.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

from helpers.distributed.common import (
    gather_object,
    process_group,
    run_main,
    save_rank0,
    write_json,
)
from helpers.models import MLP


def _local(t: torch.Tensor) -> torch.Tensor:
    """The part of ``t`` this rank stores: the local shard of a DTensor, else ``t`` itself."""
    return t.to_local() if isinstance(t, DTensor) else t


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t


def _nbytes(tensors) -> int:
    return sum(_local(t).numel() * _local(t).element_size() for t in tensors)


def memory_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes this rank holds for parameters, gradients and optimizer state (local shards only)."""
    params = list(model.parameters())
    state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    return {
        "params": _nbytes(params),
        "grads": _nbytes(p.grad for p in params if p.grad is not None),
        "optim_state": _nbytes(state),
    }


def train(model, batch_x, batch_y, steps, lr, reduce_losses: bool) -> list[float]:
    """AdamW steps on one batch: (the loss of each step, averaged over the ranks when ``reduce_losses``; the optimizer)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(batch_x).float(), batch_y)
        loss.backward()
        optimizer.step()
        value = loss.detach().clone()
        if reduce_losses:
            dist.all_reduce(value, op=dist.ReduceOp.AVG if dist.get_backend() == "nccl" else dist.ReduceOp.SUM)
            if dist.get_backend() != "nccl":
                value /= dist.get_world_size()
        losses.append(round(value.item(), 6))
    return losses, optimizer


def max_diff(model: nn.Module, reference: nn.Module) -> float:
    """Largest absolute difference between ``model``'s full parameters and the reference's."""
    return max((_full(p).detach().float() - q.detach()).abs().max().item() for p, q in zip(model.parameters(), reference.parameters()))



@record
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--hidden", type=int, nargs="+", default=[256, 128])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", default=None, help="folder for a DCP checkpoint of the float32 FSDP run")
    args = parser.parse_args()
    with process_group() as ctx:
        rank, world, device_type = ctx.rank, ctx.world_size, ctx.device.type
        data = torch.load(args.data, weights_only=True)
        x, y = data["x"].to(device_type), data["y"].to(device_type)
        if len(x) % world:
            raise ValueError(f"the batch of {len(x)} rows does not split evenly over {world} ranks")
        per_rank = len(x) // world
        local_x, local_y = x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]

        torch.manual_seed(args.seed)  # the same initial weights on every rank
        base = MLP(784, tuple(args.hidden), 10, dropout=0.0).to(device_type)
        results: dict = {"world": world, "steps": args.steps, "batch": len(x), "n_params": sum(p.numel() for p in base.parameters())}

        reference = copy.deepcopy(base)
        ref_losses, _ = train(reference, x, y, args.steps, args.lr, reduce_losses=False)
        results["reference"] = {"losses": ref_losses}

        ddp = DistributedDataParallel(copy.deepcopy(base))
        losses, opt = train(ddp, local_x, local_y, args.steps, args.lr, reduce_losses=True)
        results["ddp"] = {"losses": losses, "bytes": gather_object(memory_bytes(ddp, opt)),
                          "max_diff": max_diff(ddp.module, reference)}
        del ddp, opt

        for name, policy in (("fsdp_fp32", MixedPrecisionPolicy()),
                             ("fsdp_bf16", MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))):
            model = copy.deepcopy(base)
            for layer in model.modules():
                if isinstance(layer, nn.Linear):
                    fully_shard(layer, mp_policy=policy)  # each Linear: one all-gather unit
            fully_shard(model, mp_policy=policy)  # the root: whatever is left, and the last reduce
            losses, opt = train(model, local_x, local_y, args.steps, args.lr, reduce_losses=True)
            first = next(model.parameters())
            results[name] = {
                "losses": losses,
                "bytes": gather_object(memory_bytes(model, opt)),
                "max_diff": max_diff(model, reference),
                "param_type": type(first).__name__,
                "param_dtype": str(first.dtype),
                "placements": {n: [str(p.placements), list(p.shape), list(p.to_local().shape)] for n, p in model.named_parameters()},
            }
            print(f"{name}: losses {losses}, max |param - reference| {results[name]['max_diff']:.2e}")
            if name == "fsdp_fp32" and args.checkpoint:
                model_sd, optim_sd = get_state_dict(model, opt)  # DTensors: each rank holds its shards
                dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=args.checkpoint)
                full = StateDictOptions(full_state_dict=True, cpu_offload=True)  # gathered to rank 0 only
                full_model, full_optim = get_state_dict(model, opt, options=full)
                if rank == 0:
                    save_rank0(Path(args.out) / "full_state.pt", {"model": full_model, "optim": full_optim})
                results["checkpoint_keys"] = sorted(model_sd)
            del model, opt
        if rank == 0:
            write_json(Path(args.out) / "fsdp.json", results)


if __name__ == "__main__":
    run_main(main)
