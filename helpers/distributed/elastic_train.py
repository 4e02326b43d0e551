"""Entry point: DDP training that survives a crash, with torchrun's restarts and checkpoints.

Run with ``torchrun("helpers.distributed.elastic_train", "--out", folder, "--ckpt", ckpt_folder,
max_restarts=1)`` and an empty ``ckpt_folder``.

- Every ``--every`` steps rank 0 saves ``{"model", "optimizer", "step"}`` with
  :func:`helpers.checkpoint.save_checkpoint` (atomic, checksummed), then all
  ranks meet at a barrier, so a checkpoint that exists is complete.
- At start, every rank loads the newest valid checkpoint, if any, and resumes
  after its step.
- On the first attempt only (``TORCHELASTIC_RESTART_COUNT == 0``), rank
  ``--fail-rank`` raises ``RuntimeError`` at step ``--fail-at``: torchrun stops
  the other ranks and, with ``max_restarts >= 1``, starts the whole group again.
- The batch of step s is a function of s alone (a generator seeded with
  ``seed + s``), so the resumed run sees exactly the batches the crashed run
  would have seen.
- After finishing, the ranks train the same model again from scratch with no
  crash and no checkpoint (the reference), and rank 0 compares the two.

Rank 0 writes ``<out>/elastic.json``: ``restart_count``, ``resumed_from``, ``final_step``,
``planned_steps``, ``steps_this_attempt``, ``max_abs_diff`` (vs the uninterrupted run),
``checkpoints`` (steps on disk), ``final_loss``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

from ..checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from .common import Context, process_group, run_main, write_json

FEATURES, CLASSES, DATASET = 20, 4, 2048


def dataset(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed synthetic classification problem (a random linear teacher)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(DATASET, FEATURES, generator=gen)
    teacher = torch.randn(FEATURES, CLASSES, generator=gen)
    return x, (x @ teacher).argmax(dim=1)


def batch_of_step(step: int, seed: int, global_batch: int) -> torch.Tensor:
    """Indices of the global batch of ``step``: a function of the step only, so a resumed run repeats it."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return torch.randint(0, DATASET, (global_batch,), generator=gen)


def new_model(seed: int, ctx: Context) -> tuple[DDP, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES)).to(ctx.device)
    ddp = DDP(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    return ddp, torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)


def train(ctx: Context, args, *, ckpt_dir: Path | None, crash: bool) -> tuple[nn.Module, int, int, float]:
    """Train to ``args.steps``; returns (model, step resumed from, steps run here, last loss)."""
    x, y = dataset(args.seed)
    ddp, opt = new_model(args.seed, ctx)
    start = 0
    if ckpt_dir is not None:
        latest = latest_checkpoint(ckpt_dir)  # every rank reads the same file (rank 0 wrote it before a barrier)
        if latest is not None:
            state = load_checkpoint(latest, map_location=ctx.device)
            ddp.module.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            start = int(state["step"])
            print(f"resumed from {latest.name} (step {start})", flush=True)
    loss_fn = nn.CrossEntropyLoss()
    b = args.batch
    loss = torch.tensor(float("nan"))
    for step in range(start, args.steps):
        if crash and ctx.rank == args.fail_rank and step == args.fail_at:
            raise RuntimeError(f"rank {ctx.rank} crashed at step {step} (on purpose, first attempt only)")
        idx = batch_of_step(step, args.seed, ctx.world_size * b)[ctx.rank * b : (ctx.rank + 1) * b]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x[idx].to(ctx.device)), y[idx].to(ctx.device))
        loss.backward()
        opt.step()
        done = step + 1
        if ckpt_dir is not None and done % args.every == 0:
            if ctx.is_main:
                save_checkpoint({"model": ddp.module.state_dict(), "optimizer": opt.state_dict(), "step": done}, ckpt_dir, done)
                print(f"step {done}: checkpoint saved", flush=True)
            dist.barrier()  # nobody moves on (or crashes) before the checkpoint is complete
    return ddp.module, start, args.steps - start, loss.item()


@record
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--ckpt", required=True, type=Path, help="checkpoint folder (empty at the first start)")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every", type=int, default=20, help="checkpoint every K steps")
    parser.add_argument("--fail-at", type=int, default=45, help="step at which --fail-rank crashes (first attempt)")
    parser.add_argument("--fail-rank", type=int, default=1)
    parser.add_argument("--batch", type=int, default=32, help="batch size per rank")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    with process_group() as ctx:
        print(f"attempt {ctx.restart_count} (TORCHELASTIC_RESTART_COUNT={ctx.restart_count}) started", flush=True)
        model, resumed_from, ran, last_loss = train(ctx, args, ckpt_dir=args.ckpt, crash=ctx.restart_count == 0)
        print(f"finished: {ran} steps in this attempt, final step {args.steps}", flush=True)
        reference, _, _, _ = train(ctx, args, ckpt_dir=None, crash=False)  # uninterrupted, from scratch
        diff = max((p - q).abs().max().item() for p, q in zip(model.parameters(), reference.parameters()))
        write_json(
            args.out / "elastic.json",
            {
                "restart_count": ctx.restart_count,
                "resumed_from": resumed_from,
                "steps_this_attempt": ran,
                "final_step": resumed_from + ran,
                "planned_steps": args.steps,
                "fail_at": args.fail_at,
                "fail_rank": args.fail_rank,
                "every": args.every,
                "max_abs_diff": diff,
                "final_loss": last_loss,
                "checkpoints": [int(p.stem.split("-")[1]) for p in list_checkpoints(args.ckpt)],
            },
            ctx,
        )


if __name__ == "__main__":
    run_main(main)
