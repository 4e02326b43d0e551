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

It then checks gradient accumulation over ``--accumulate`` K micro-batches of B
per rank (float64), counting the gradient all-reduces with a DDP communication
hook (one hook call per gradient bucket and backward pass):

- ``no_sync``: the first K-1 backward passes inside ``ddp.no_sync()``, the last
  one outside; hook calls per micro-batch, and the largest difference between
  the accumulated gradients and those of one DDP backward pass over the K*B
  samples per rank (the large-batch step);
- ``sync_every_step``: the same accumulation without ``no_sync``;
- ``local_spread``: how far the ranks' gradients are apart after the K-1
  ``no_sync`` passes (local sums, not yet averaged) and after the last one.

Rank 0 writes ``<out>/equivalence.json``: ``{"cases": {name: {"max_abs_diff": ...,
"dtype": ...} or {"error": ...}}, "accumulation": {...}, "world_size", "batch_per_rank", "steps"}``.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
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


def flat_grad(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.detach().reshape(-1) for p in model.parameters()])


def rank_spread(flat: torch.Tensor) -> float:
    """Largest difference of ``flat`` between any rank and rank 0 (0.0: identical on every rank)."""
    copies = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(copies, flat)
    return max((c - copies[0]).abs().max().item() for c in copies)


def accumulate(ctx: Context, k: int, b: int, seed: int, use_no_sync: bool) -> dict:
    """K micro-batches of B per rank, gradients accumulated, all-reduces counted by a comm hook (float64)."""
    world = ctx.world_size
    xs, ys = make_data(1, k * world * b, seed + 1)  # one global batch of K*W*B samples
    x, y = xs[0].to(ctx.device), ys[0].to(ctx.device)
    mine = [slice((j * world + ctx.rank) * b, (j * world + ctx.rank + 1) * b) for j in range(k)]  # micro-batch j, this rank
    loss_fn = nn.CrossEntropyLoss()
    calls: list[int] = []

    def counting_hook(state, bucket):
        calls.append(bucket.index())
        return default_hooks.allreduce_hook(state, bucket)  # the all-reduce (and division by W) DDP does by default

    ddp = DDP(make_model("none", seed).to(torch.float64).to(ctx.device))
    ddp.register_comm_hook(None, counting_hook)  # state None: the default process group
    per_micro_batch, spread_before_last = [], None
    for j in range(k):
        last = j == k - 1
        with ddp.no_sync() if use_no_sync and not last else contextlib.nullcontext():
            before = len(calls)
            (loss_fn(ddp(x[mine[j]]), y[mine[j]]) / k).backward()  # each loss / K: the sum is the mean over K*B
            per_micro_batch.append(len(calls) - before)
        if j == k - 2:
            spread_before_last = rank_spread(flat_grad(ddp.module))
    accumulated = flat_grad(ddp.module)

    big = DDP(make_model("none", seed).to(torch.float64).to(ctx.device))  # the large-batch step: K*B per rank at once
    rows = torch.cat([torch.arange(s.start, s.stop) for s in mine]).to(ctx.device)
    loss_fn(big(x[rows]), y[rows]).backward()
    return {
        "hook_calls_per_micro_batch": per_micro_batch,
        "max_abs_diff_vs_large_batch": (accumulated - flat_grad(big.module)).abs().max().item(),
        "rank_spread_before_last": spread_before_last,
        "rank_spread_after_last": rank_spread(accumulated),
    }


@record
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--batch", type=int, default=16, help="batch size per rank (B)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--accumulate", type=int, default=4, help="micro-batches per optimizer step (K >= 2)")
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
        accumulation = {
            "no_sync": accumulate(ctx, args.accumulate, args.batch, args.seed, use_no_sync=True),
            "sync_every_step": accumulate(ctx, args.accumulate, args.batch, args.seed, use_no_sync=False),
            "accumulate": args.accumulate,
        }
        if ctx.is_main:
            for name in ("no_sync", "sync_every_step"):
                a = accumulation[name]
                print(f"{name:<16} all-reduce hook calls per micro-batch {a['hook_calls_per_micro_batch']}, "
                      f"max |grad diff| vs large batch = {a['max_abs_diff_vs_large_batch']:.3g}", flush=True)
        write_json(
            args.out / "equivalence.json",
            {"cases": results, "accumulation": accumulation, "world_size": ctx.world_size, "batch_per_rank": args.batch, "steps": args.steps, "backend": ctx.backend},
            ctx,
        )


if __name__ == "__main__":
    run_main(main)
