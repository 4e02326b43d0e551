"""Chapter 26: tensor parallelism (``parallelize_module``) checked against one process.

Run under torchrun (the chapter uses 2 processes; the hidden sizes and the
number of heads must divide by the world size)::

    python -m torch.distributed.run --nproc-per-node 2 -m helpers.distributed.tp_check --out build/x

Two models, each built with the same seed on every rank and copied before it
is parallelised, so the parallel and the single-process model have the same
weights:

- ``mlp``: ``Linear(d, h) -> ReLU -> Linear(h, d)`` with ``ColwiseParallel`` on
  the first ``Linear`` and ``RowwiseParallel`` on the second;
- ``block``: :class:`TPBlock`, a pre-LayerNorm transformer block whose
  attention has separate q/k/v projections (colwise: each rank computes
  ``heads / world`` whole heads) and an output projection (rowwise), and whose
  MLP is colwise then rowwise.

For each, the forward output and, after ``backward()``, every parameter's
full gradient are compared with the single-process model; ``CommDebugMode``
counts the collectives of one forward. Rank 0 writes ``tp.json``.

With ``--pipeline`` the same job (2 ranks) then runs
:func:`helpers.distributed.pipeline_check.compare_schedules` (a 2-stage
pipeline, ``ScheduleGPipe`` and ``Schedule1F1B``) and rank 0 writes
``pipeline.json`` next to ``tp.json``: one launch for both chapters' sections.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from helpers.distributed.common import process_group, run_main, write_json


class TPBlock(nn.Module):
    """A pre-LayerNorm transformer block written so tensor parallelism can split it by heads.

    Unlike ``helpers.models.TransformerBlock`` (one fused ``qkv`` projection,
    reshaped with the full head count), q, k and v are separate ``Linear``
    layers and the heads are counted from the tensor's own width
    (``view(B, T, -1, head_dim)``), so the same code runs on the full model and
    on a shard that holds only some of the heads.

    Shapes: ``[B, T, d_model]`` -> ``[B, T, d_model]`` (causal attention).
    """

    def __init__(self, d_model: int = 32, n_heads: int = 4) -> None:
        super().__init__()
        self.head_dim = d_model // n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = nn.ModuleDict({name: nn.Linear(d_model, d_model) for name in ("q", "k", "v", "o")})
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.ModuleDict({"fc1": nn.Linear(d_model, 4 * d_model), "fc2": nn.Linear(4 * d_model, d_model)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        h = self.ln1(x)
        q, k, v = (self.attn[n](h).view(B, T, -1, self.head_dim).transpose(1, 2) for n in ("q", "k", "v"))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [B, heads (local), T, head_dim]
        x = x + self.attn["o"](y.transpose(1, 2).reshape(B, T, -1))
        return x + self.mlp["fc2"](F.gelu(self.mlp["fc1"](self.ln2(x))))


#: Which Linear gets which style: column-parallel into the heads / hidden units, row-parallel out of them.
BLOCK_PLAN = {
    "attn.q": ColwiseParallel(),
    "attn.k": ColwiseParallel(),
    "attn.v": ColwiseParallel(),
    "attn.o": RowwiseParallel(),
    "mlp.fc1": ColwiseParallel(),
    "mlp.fc2": RowwiseParallel(),
}
MLP_PLAN = {"0": ColwiseParallel(), "2": RowwiseParallel()}


def compare(reference: nn.Module, plan: dict, mesh, x: torch.Tensor) -> dict:
    """Parallelise a copy of ``reference`` with ``plan``; compare outputs and gradients with it."""
    # Imported here, not at the top, like compare_schedules below: they pull in Dynamo and Inductor (about
    # 1.5 s per process), which mesh_2d's four ranks, importing this module only for TPBlock and BLOCK_PLAN, skip.
    from torch.distributed.tensor.debug import CommDebugMode

    parallel = parallelize_module(copy.deepcopy(reference), mesh, plan)
    with CommDebugMode() as comm:
        out = parallel(x)
    counts = {str(op).split(".")[-1]: n for op, n in comm.get_comm_counts().items()}
    want = reference(x)
    weights = torch.linspace(-1, 1, want.numel(), device=want.device).view_as(want)  # a loss that touches every output
    (out * weights).sum().backward()
    (want * weights).sum().backward()
    grad_diff, params = 0.0, {}
    for (name, p), q in zip(parallel.named_parameters(), reference.parameters()):
        full = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
        grad_diff = max(grad_diff, (full - q.grad).abs().max().item())
        local = p.to_local() if isinstance(p, DTensor) else p
        params[name] = {"placements": str(p.placements) if isinstance(p, DTensor) else "plain tensor",
                        "shape": list(p.shape), "local_shape": list(local.shape)}
    return {
        "output_is_dtensor": isinstance(out, DTensor),
        "output_diff": (out - want).abs().max().item(),
        "grad_diff": grad_diff,
        "forward_collectives": counts,
        "params": params,
        "local_param_bytes": sum((p.to_local() if isinstance(p, DTensor) else p).nbytes for p in parallel.parameters()),
        "full_param_bytes": sum(p.nbytes for p in reference.parameters()),
    }


@record
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--d-model", type=int, default=32)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pipeline", action="store_true", help="also run the 2-stage pipeline check (pipeline.json)")
    parser.add_argument("--microbatches", type=int, default=4, help="microbatches of the pipeline check")
    args = parser.parse_args()
    with process_group() as ctx:
        rank, world, device_type = ctx.rank, ctx.world_size, ctx.device.type
        mesh = init_device_mesh(device_type, (world,), mesh_dim_names=("tp",))
        d = args.d_model
        torch.manual_seed(args.seed)  # same weights and inputs on every rank
        mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d)).to(device_type)
        block = TPBlock(d, args.heads).to(device_type)
        x_mlp = torch.randn(8, d, device=device_type)
        x_block = torch.randn(2, 6, d, device=device_type)
        results = {"world": world, "mlp": compare(mlp, MLP_PLAN, mesh, x_mlp), "block": compare(block, BLOCK_PLAN, mesh, x_block)}
        for name in ("mlp", "block"):
            r = results[name]
            print(f"{name}: max |output diff| {r['output_diff']:.1e}, max |grad diff| {r['grad_diff']:.1e}, "
                  f"forward collectives {r['forward_collectives']}")
        if rank == 0:
            write_json(Path(args.out) / "tp.json", results)
        if args.pipeline:
            # Imported here because mesh_2d imports this module (see compare above).
            from helpers.distributed.pipeline_check import compare_schedules

            pipeline = compare_schedules(ctx.device, microbatches=args.microbatches, seed=args.seed)
            for name, r in pipeline.items():
                print(f"pipeline {name}: max |output diff| {r['output_diff']:.1e}, max |grad diff| {r['grad_diff']:.1e}")
            write_json(Path(args.out) / "pipeline.json", pipeline, ctx)


if __name__ == "__main__":
    run_main(main)
