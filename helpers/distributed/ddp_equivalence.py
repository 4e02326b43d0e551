"""Entry point: DDP over W ranks with batch B each takes the same steps as one process with batch W*B.

Run with ``torchrun("helpers.distributed.ddp_equivalence", "--out", folder)``.
Every rank builds the same data (seeded): for step s, a batch of W*B samples,
of which rank r takes rows ``r*B:(r+1)*B``. The ranks train a DDP-wrapped
model with SGD (momentum 0.9) for ``--steps`` steps. Rank 0 also trains a
plain copy of the same model, in one process, on the whole W*B batches, and
compares the parameters. This is done for:

- ``float32`` and ``float64`` with ``CrossEntropyLoss(reduction="mean")``: they match;
- ``sum_loss``: ``reduction="sum"``; DDP still *averages* gradients over ranks,
  so each step is 1/W of the single-process step: they differ;
- ``batchnorm``: a ``BatchNorm1d`` layer normalises with the statistics of
  each rank's B samples instead of all W*B: they differ;
- ``syncbatchnorm``: ``nn.SyncBatchNorm`` computes the statistics over all
  ranks (on GPU only; on CPU the error it raises is recorded).

Rank 0 writes ``<out>/equivalence.json``: ``{"cases": {name: {"max_abs_diff": ...,
"dtype": ...} or {"error": ...}}, "world_size", "batch_per_rank", "steps"}``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

from .common import Context, process_group, run_main, write_json

FEATURES, CLASSES = 20, 4


def make_model(norm: str, seed: int) -> nn.Module:
    torch.manual_seed(seed)  # the same initial weights on every rank (DDP would broadcast rank 0's anyway)
    layers: list[nn.Module] = [nn.Linear(FEATURES, 32)]
    if norm == "batchnorm":
        layers.append(nn.BatchNorm1d(32))
    elif norm == "syncbatchnorm":
        layers.append(nn.SyncBatchNorm(32))
    layers += [nn.ReLU(), nn.Linear(32, CLASSES)]
    return nn.Sequential(*layers)


def make_data(steps: int, global_batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(steps, global_batch, FEATURES, generator=gen, dtype=torch.float64)
    y = torch.randint(0, CLASSES, (steps, global_batch), generator=gen)
    return x, y


def train(model: nn.Module, xs, ys, loss_fn, lr: float) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    for x, y in zip(xs, ys):
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()  # under DDP, backward also all-reduces (averages) the gradients
        opt.step()


def run_case(ctx: Context, *, dtype: torch.dtype, reduction: str, norm: str, args) -> dict:
    world, b = ctx.world_size, args.batch
    xs, ys = make_data(args.steps, world * b, args.seed)
    xs = xs.to(dtype)
    mine = slice(ctx.rank * b, (ctx.rank + 1) * b)  # this rank's share of every global batch
    loss_fn = nn.CrossEntropyLoss(reduction=reduction)

    base = make_model(norm, args.seed).to(dtype)
    # the one-process reference, trained by rank 0 alone, with the same initial weights; plain BatchNorm
    # stands in for SyncBatchNorm there (one process has nothing to synchronise with)
    single = make_model("batchnorm" if norm == "syncbatchnorm" else norm, args.seed).to(dtype)
    ddp = DDP(base.to(ctx.device), device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    train(ddp, xs[:, mine].to(ctx.device), ys[:, mine].to(ctx.device), loss_fn, args.lr)

    diff = 0.0
    if ctx.is_main:
        train(single, xs, ys, loss_fn, args.lr)  # the whole W*B batch at every step
        single_params = dict(single.named_parameters())
        for name, p in ddp.module.named_parameters():
            diff = max(diff, (p.detach().cpu() - single_params[name].detach()).abs().max().item())
    dist.barrier()
    return {"max_abs_diff": diff, "dtype": str(dtype).removeprefix("torch.")}


@record
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--batch", type=int, default=16, help="batch size per rank (B)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    cases = {
        "float32": dict(dtype=torch.float32, reduction="mean", norm="none"),
        "float64": dict(dtype=torch.float64, reduction="mean", norm="none"),
        "sum_loss": dict(dtype=torch.float64, reduction="sum", norm="none"),
        "batchnorm": dict(dtype=torch.float64, reduction="mean", norm="batchnorm"),
        "syncbatchnorm": dict(dtype=torch.float64, reduction="mean", norm="syncbatchnorm"),
    }
    results = {}
    with process_group() as ctx:
        for name, case in cases.items():
            try:
                results[name] = run_case(ctx, args=args, **case)
            except ValueError as err:  # SyncBatchNorm on CPU tensors
                results[name] = {"error": f"{type(err).__name__}: {err}"}
                dist.barrier()
            shown = results[name].get("max_abs_diff", results[name].get("error"))
            if ctx.is_main:
                print(f"{name:<14} DDP vs one process: {shown if isinstance(shown, str) else f'max |diff| = {shown:.3g}'}", flush=True)
        write_json(
            args.out / "equivalence.json",
            {"cases": results, "world_size": ctx.world_size, "batch_per_rank": args.batch, "steps": args.steps, "backend": ctx.backend},
            ctx,
        )


if __name__ == "__main__":
    run_main(main)
