"""Chapter 26: pipeline parallelism (``torch.distributed.pipelining``) checked against one process.

Run under torchrun with 2 processes (one pipeline stage each)::

    python -m torch.distributed.run --nproc-per-node 2 -m helpers.distributed.pipeline_check --out build/x

The chapter does not launch this module on its own: ``helpers.distributed.tp_check --pipeline``
calls :func:`compare_schedules` in the same 2-process job, to save a launch.

The model is ``Sequential(Linear(d, 4d), ReLU, Linear(4d, 4d), ReLU, Linear(4d, classes))``,
built with the same seed on every rank. Rank 0 keeps modules ``0, 1`` (stage 0),
rank 1 modules ``2, 3, 4`` (stage 1), each wrapped in a
``torch.distributed.pipelining.PipelineStage``. For each schedule
(``ScheduleGPipe``: all forwards, then all backwards; ``Schedule1F1B``: one
forward, one backward, alternating) one ``step`` splits the batch into
``n_microbatches`` microbatches, sends activations forward and their
gradients backward between the ranks (point-to-point ``send`` / ``recv``),
and accumulates the parameter gradients, divided by the number of
microbatches (``scale_grads=True``). The last stage's output, the mean of
its microbatch losses and every parameter gradient are compared with the
unsplit model run in one process on the whole batch. A third run with
``scale_grads=False`` shows what the division is for.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from helpers.distributed.common import gather_object, process_group, run_main, write_json

#: Which modules of the Sequential each of the two stages holds.
STAGE_MODULES = ((0, 1), (2, 3, 4))


def make_model(d: int = 16, classes: int = 8) -> nn.Sequential:
    """The small MLP that is cut into two pipeline stages (modules 0-1 and 2-4)."""
    return nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, 4 * d), nn.ReLU(), nn.Linear(4 * d, classes))


def compare_schedules(device: torch.device, microbatches: int = 4, batch: int = 16, d: int = 16, seed: int = 0) -> dict:
    """Run one training step of each schedule on 2 ranks and compare with one process (call on every rank).

    Needs an initialised 2-rank process group. Returns, on every rank, a dict
    ``{run: {"output_diff", "loss", "reference_loss", "grad_diff", "grad_scale", "stage_params", ...}}``
    with the largest absolute differences (the output and loss come from the
    last stage, the gradient difference is the largest over both stages) and
    the least-squares factor between the pipeline's gradients and the
    reference's (1 when equal). Runs: ``"ScheduleGPipe"``, ``"Schedule1F1B"``
    and ``"ScheduleGPipe, scale_grads=False"``, whose gradients are the *sum*
    of the microbatch gradients (``microbatches`` times too large for a loss
    that averages), the setting to use with a summing loss.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != len(STAGE_MODULES):
        raise ValueError(f"the pipeline has {len(STAGE_MODULES)} stages: run it on {len(STAGE_MODULES)} ranks, not {world}")
    if batch % microbatches:
        raise ValueError(f"a batch of {batch} does not split into {microbatches} equal microbatches")
    torch.manual_seed(seed)  # same weights, inputs and targets on every rank
    full = make_model(d).to(device)
    x = torch.randn(batch, d, device=device)
    y = torch.randint(0, 8, (batch,), device=device)
    reference = copy.deepcopy(full)
    ref_out = reference(x)
    ref_loss = F.cross_entropy(ref_out, y)
    ref_loss.backward()
    ref_grads = dict(reference.named_parameters())

    results = {}
    runs = (("ScheduleGPipe", ScheduleGPipe, True), ("Schedule1F1B", Schedule1F1B, True),
            ("ScheduleGPipe, scale_grads=False", ScheduleGPipe, False))  # the last: a sum over microbatches
    for label, schedule_class, scale_grads in runs:
        model = copy.deepcopy(full)
        part = nn.Sequential()
        for i in STAGE_MODULES[rank]:
            part.add_module(str(i), model[i])  # keep the original names ("2.weight") to match the reference
        stage = PipelineStage(part, stage_index=rank, num_stages=world, device=device)
        schedule = schedule_class(stage, n_microbatches=microbatches, loss_fn=F.cross_entropy, scale_grads=scale_grads)
        losses: list = []
        if rank == 0:
            out = schedule.step(x)  # the first stage feeds the input; it gets no output back
        else:
            out = schedule.step(target=y, losses=losses)  # the last stage gets the targets, computes the losses
        grad_diff = max((p.grad - ref_grads[n].grad).abs().max().item() for n, p in part.named_parameters())
        dot = sum((p.grad * ref_grads[n].grad).sum().item() for n, p in part.named_parameters())
        norm = sum((ref_grads[n].grad ** 2).sum().item() for n, _ in part.named_parameters())
        mine = {"grad_diff": grad_diff, "params": [n for n, _ in part.named_parameters()], "dot": dot, "norm": norm}
        if rank == world - 1:
            mine.update(output_diff=(out - ref_out).abs().max().item(), loss=torch.stack(losses).mean().item(),
                        microbatch_losses=len(losses))
        everyone = gather_object(mine)
        last = everyone[-1]
        results[label] = {
            "grad_scale": sum(r["dot"] for r in everyone) / sum(r["norm"] for r in everyone),
            "output_diff": last["output_diff"], "loss": round(last["loss"], 6), "reference_loss": round(ref_loss.item(), 6),
            "microbatch_losses": last["microbatch_losses"], "grad_diff": max(r["grad_diff"] for r in everyone),
            "stage_params": [r["params"] for r in everyone], "microbatches": microbatches,
        }
    return results


@record
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--microbatches", type=int, default=4)
    args = parser.parse_args()
    with process_group() as ctx:
        results = compare_schedules(ctx.device, microbatches=args.microbatches)
        for name, r in results.items():
            print(f"{name}: max |output diff| {r['output_diff']:.1e}, max |grad diff| {r['grad_diff']:.1e}")
        write_json(Path(args.out) / "pipeline.json", results, ctx)


if __name__ == "__main__":
    run_main(main)
