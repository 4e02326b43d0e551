"""Exercises of chapter 11 (learning-rate schedules): checkers and reference solutions."""

from __future__ import annotations

import math
import numbers

import torch
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR
from torch.utils.data import DataLoader

from . import exercise, expect_type

# --------------------------------------------------------------------------
# 11.warmup_cosine_lr
# --------------------------------------------------------------------------


def _warmup_cosine_lr(step: int, base_lr: float, warmup_steps: int, total_steps: int,
                      start_factor: float, eta_min: float) -> float:
    """The learning rate of optimizer step ``step`` under linear warmup then cosine, as ``SequentialLR`` runs it.

    The schedule is::

        SequentialLR(optimizer, [LinearLR(optimizer, start_factor, 1.0, total_iters=warmup_steps),
                                 CosineAnnealingLR(optimizer, T_max=total_steps - warmup_steps, eta_min=eta_min)],
                     milestones=[warmup_steps])

    stepped once after every optimizer step.

    Args:
        step: the 0-based index of the optimizer step (``step`` scheduler steps have been taken before it).
        base_lr: the optimizer's ``lr``, the peak of the schedule.
        warmup_steps: length of the warmup, >= 1; also the milestone.
        total_steps: warmup plus cosine, > ``warmup_steps``.
        start_factor: the warmup starts at ``start_factor * base_lr`` (0 < start_factor <= 1).
        eta_min: the floor of the cosine.

    Returns:
        A float. During the warmup (``step < warmup_steps``) the lr rises
        linearly, ``base_lr * (start_factor + (1 - start_factor) * step / warmup_steps)``,
        so it never reaches ``base_lr`` inside the warmup; at the milestone the
        cosine starts from its own step 0, at ``base_lr``:
        ``eta_min + (base_lr - eta_min) * (1 + cos(pi * k / T)) / 2`` with
        ``k = step - warmup_steps`` and ``T = total_steps - warmup_steps``.
        Formulas from the PyTorch documentation of ``LinearLR`` and
        ``CosineAnnealingLR`` (SGDR, Loshchilov & Hutter 2017, without restarts).
    """
    if step < warmup_steps:
        return base_lr * (start_factor + (1.0 - start_factor) * step / warmup_steps)
    k, T = step - warmup_steps, total_steps - warmup_steps
    return eta_min + (base_lr - eta_min) * (1.0 + math.cos(math.pi * k / T)) / 2.0


def _sequential_lrs(base_lr, warmup_steps, total_steps, start_factor, eta_min) -> list[float]:
    """The lr of every optimizer step 0 .. total_steps - 1, measured on the real schedulers."""
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=base_lr)
    warmup = LinearLR(optimizer, start_factor=start_factor, end_factor=1.0, total_iters=warmup_steps)
    cosine = CosineAnnealingLR(optimizer, T_max=total_steps - warmup_steps, eta_min=eta_min)
    scheduler = SequentialLR(optimizer, [warmup, cosine], milestones=[warmup_steps])
    lrs = []
    for _ in range(total_steps):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


def _as_float(value, where: str) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise AssertionError(f"{where}: return one float (a learning rate), got {value!r}")
    return float(value)


#: The schedulers that compute the answer for the learner: stepping a real SequentialLR (or an equivalent
#: LambdaLR, OneCycleLR, ChainedScheduler ...) inside the function is not writing the formula.
_SCHEDULER_SHORTCUTS = tuple(
    f"torch.optim.lr_scheduler.{name}"
    for name in ("LinearLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts", "SequentialLR", "LambdaLR",
                 "MultiplicativeLR", "OneCycleLR", "ChainedScheduler")
)


@exercise(
    "11.warmup_cosine_lr",
    "return lr(step, base_lr, warmup_steps, total_steps, start_factor, eta_min): the learning rate that optimizer "
    "step `step` (0-based) uses under SequentialLR([LinearLR(start_factor, 1.0, total_iters=warmup_steps), "
    "CosineAnnealingLR(T_max=total_steps - warmup_steps, eta_min)], milestones=[warmup_steps]), stepped after every "
    "optimizer step.",
    reference=_warmup_cosine_lr,
    shortcuts=_SCHEDULER_SHORTCUTS,
    goal="the warmup + cosine formula",
    hint="Treat it as two pieces split at the milestone, using the formulas of 'The schedules': before it, "
         "LinearLR's factor moves in a straight line from start_factor towards 1 and reaches 1 only at "
         "step warmup_steps; from the milestone on, CosineAnnealingLR starts at its own step 0, at "
         "base_lr, and runs half a cosine down to eta_min over the steps left after the warmup.",
)
def _test_warmup_cosine_lr(candidate) -> None:
    cases = [  # base_lr, warmup_steps, total_steps, start_factor, eta_min
        (0.1, 5, 30, 0.1, 0.0),
        (1.0, 10, 100, 0.01, 0.0),
        (3e-4, 4, 20, 0.25, 1e-5),
        (0.5, 1, 12, 0.5, 0.05),
        (2.0, 7, 8, 0.2, 0.1),
    ]
    for base_lr, warmup, total, start, eta_min in cases:
        args = dict(base_lr=base_lr, warmup_steps=warmup, total_steps=total, start_factor=start, eta_min=eta_min)
        want = _sequential_lrs(base_lr, warmup, total, start, eta_min)
        for step, expected in enumerate(want):
            got = _as_float(candidate(step, **args), f"step {step} with {args}")
            if math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-12 * base_lr):
                continue
            where = f"step {step} with {args}: SequentialLR gives {expected:.6g}, you returned {got:.6g}"
            if step < warmup:
                if math.isclose(got, base_lr * step / warmup, rel_tol=1e-6) or (step == 0 and got == 0):
                    raise AssertionError(f"{where}. The warmup starts at start_factor * base_lr, not at 0")
                if warmup > 1 and math.isclose(got, base_lr * (start + (1 - start) * step / (warmup - 1)), rel_tol=1e-6):
                    raise AssertionError(
                        f"{where}. Your ramp reaches base_lr one step too early: LinearLR reaches end_factor only "
                        "after total_iters steps, at step warmup_steps, which is already the milestone"
                    )
                raise AssertionError(f"{where} (inside the warmup: a straight line from start_factor * base_lr "
                                     "towards base_lr, which it would reach at step warmup_steps)")
            k, T = step - warmup, total - warmup
            if math.isclose(got, (base_lr - eta_min) * (1 + math.cos(math.pi * k / T)) / 2, rel_tol=1e-6) and eta_min:
                raise AssertionError(f"{where}. Your cosine decays towards 0 and ignores eta_min, its floor")
            if math.isclose(got, eta_min + (base_lr - eta_min) * (1 + math.cos(math.pi * step / T)) / 2, rel_tol=1e-6):
                raise AssertionError(f"{where}. Your cosine counts the run's steps; at the milestone "
                                     "CosineAnnealingLR is only at its own step 0")
            if math.isclose(got, eta_min + (base_lr - eta_min) * (1 + math.cos(math.pi * k / total)) / 2, rel_tol=1e-6) \
                    or math.isclose(got, eta_min + (base_lr - eta_min) * (1 + math.cos(math.pi * step / total)) / 2,
                                    rel_tol=1e-6):
                raise AssertionError(f"{where}. Your cosine is too long: it spans total_steps, the whole run, "
                                     "while the CosineAnnealingLR of the task has T_max = total_steps - warmup_steps, "
                                     "only the steps left after the warmup")
            if T > 1 and math.isclose(got, eta_min + (base_lr - eta_min) * (1 + math.cos(math.pi * (k + 1) / T)) / 2,
                                      rel_tol=1e-6):
                raise AssertionError(f"{where}. Off by one: at step warmup_steps (the milestone) the cosine is at its "
                                     "step 0, which is base_lr")
            raise AssertionError(where)


# --------------------------------------------------------------------------
# 11.total_steps
# --------------------------------------------------------------------------


def _total_steps(epochs: int, dataset_size: int, batch_size: int, drop_last: bool, accumulation_steps: int) -> int:
    """How many optimizer steps a run takes: the ``total_steps`` that ``OneCycleLR`` needs.

    The loop is the usual one with gradient accumulation: the DataLoader
    yields ``ceil(dataset_size / batch_size)`` micro-batches per epoch, or
    ``floor(...)`` with ``drop_last=True``; the optimizer steps after every
    ``accumulation_steps`` micro-batches, and once more at the end of an
    epoch for a leftover, shorter group (``if (i + 1) % accumulation_steps
    == 0 or i + 1 == len(loader)``). The count starts afresh in every epoch.

    Returns:
        An int: ``epochs * ceil(batches_per_epoch / accumulation_steps)``.
    """
    batches = dataset_size // batch_size if drop_last else math.ceil(dataset_size / batch_size)
    return epochs * math.ceil(batches / accumulation_steps)


def _simulated_steps(epochs, dataset_size, batch_size, drop_last, accumulation_steps) -> int:
    """Count the optimizer steps of the loop with a real DataLoader's len()."""
    loader = DataLoader(range(dataset_size), batch_size=batch_size, drop_last=drop_last)
    steps = 0
    for _ in range(epochs):
        for i in range(len(loader)):
            if (i + 1) % accumulation_steps == 0 or i + 1 == len(loader):
                steps += 1
    return steps


@exercise(
    "11.total_steps",
    "return total_steps(epochs, dataset_size, batch_size, drop_last, accumulation_steps): the number of optimizer "
    "steps (= scheduler steps, OneCycleLR's total_steps) of a run that steps after every accumulation_steps "
    "micro-batches and once more at the end of an epoch for a leftover group, as a Python int.",
    reference=_total_steps,
    hint="Count one epoch first: how many batches the DataLoader yields (rounded up, or rounded down when "
         "drop_last drops the short last batch), then how many groups of accumulation_steps those batches "
         "make, a short leftover group counting too. The count restarts in every epoch, so multiply by the "
         "number of epochs only at the end, and return an int.",
)
def _test_total_steps(candidate) -> None:
    cases = [  # epochs, dataset_size, batch_size, drop_last, accumulation_steps
        (1, 1000, 100, False, 1),
        (3, 1000, 128, False, 1),
        (3, 1000, 128, True, 1),
        (2, 60000, 64, True, 4),
        (5, 1000, 128, False, 4),
        (4, 50000, 96, False, 8),
        (10, 257, 32, False, 3),
        (2, 100, 128, False, 2),
    ]
    for epochs, n, b, drop_last, accum in cases:
        args = dict(epochs=epochs, dataset_size=n, batch_size=b, drop_last=drop_last, accumulation_steps=accum)
        want = _simulated_steps(**args)
        got = candidate(**args)
        # OneCycleLR(total_steps=6.0) raises: the count must be a Python int, not a float (or a tensor) equal to one
        expect_type(got, int, f"{args}: your count of steps ({got!r:.40})")
        if got == want:
            continue
        where = f"{args}: the training loop takes {want} optimizer steps, you returned {got}"
        full = math.ceil(n / b)
        dropped = n // b
        batches = dropped if drop_last else full
        if got == epochs * math.ceil((full if drop_last else dropped) / accum):
            raise AssertionError(f"{where}. Your count of batches per epoch gets drop_last the wrong way round: "
                                 "which setting keeps the last, short batch?")
        if accum > 1 and got == epochs * batches:
            raise AssertionError(f"{where}. With gradient accumulation the optimizer steps once per "
                                 "accumulation_steps micro-batches, not once per batch")
        if accum > 1 and got == epochs * (batches // accum):
            raise AssertionError(f"{where}. Your count leaves out the leftover micro-batches at the end of an "
                                 "epoch, which also end with an optimizer step (the `i + 1 == len(loader)` test)")
        if accum > 1 and got == math.ceil(epochs * batches / accum):
            raise AssertionError(f"{where}. Your groups run across epoch boundaries, but the accumulation count "
                                 "restarts in every epoch: the last group of an epoch steps on its own")
        if got == epochs * batches - 1 or got == want - 1:
            raise AssertionError(f"{where}. Count every optimizer step: OneCycleLR wants total_steps = the number "
                                 "of scheduler.step() calls, not that number minus one")
        if epochs > 1 and got == want // epochs:
            raise AssertionError(f"{where}. Multiply by the number of epochs")
        raise AssertionError(where)
