"""Exercises of chapter 24 (PyTorch Lightning).

- ``24.plateau_config``: what ``configure_optimizers`` returns for AdamW with
  a ``ReduceLROnPlateau`` that watches the validation loss. Checked with
  Lightning's own parser, so its real error messages come back as hints.
- ``24.optimizer_steps``: how many optimizer steps (``trainer.global_step``)
  a run makes, given the data size, batch size, epochs and
  ``accumulate_grad_batches``. Checked on fixed cases and on one case drawn from a
  seeded ``random.Random`` (the same case on every run) against a tiny real
  ``Trainer`` (``_trainer_global_step``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import random
import warnings

import torch
from torch import nn

from helpers.exercises import Hint, exercise, expect_type

# --------------------------------------------------------------------------
# 24.plateau_config
# --------------------------------------------------------------------------


def _plateau_config(model: nn.Module, lr: float) -> dict:
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=1)
    return {
        "optimizer": optimizer,
        "lr_scheduler": {"scheduler": scheduler, "monitor": "val_loss", "interval": "epoch", "frequency": 1},
    }


def _parse_like_lightning(conf):
    """Lightning 2.x's own parsing of a ``configure_optimizers`` result (automatic optimisation).

    Returns (optimizers, scheduler configs); a MisconfigurationException becomes an AssertionError hint.
    """
    from lightning.pytorch.core.optimizer import (
        _configure_optimizers,
        _configure_schedulers_automatic_opt,
        _validate_optimizers_attached,
    )
    from lightning.pytorch.utilities.exceptions import MisconfigurationException

    try:
        optimizers, schedulers, monitor = _configure_optimizers(conf)
        configs = _configure_schedulers_automatic_opt(schedulers, monitor)
        _validate_optimizers_attached(optimizers, configs)
    except MisconfigurationException as exc:
        raise AssertionError(f"Lightning rejects this configuration: {exc}") from None
    return optimizers, configs


@exercise(
    "24.plateau_config",
    task="plateau_config(model, lr) returns what configure_optimizers should return: an AdamW over "
    "model.parameters() with learning rate lr, and a ReduceLROnPlateau (mode 'min', factor 0.5, patience 1, every "
    "other setting at its default: threshold 1e-4 'rel', cooldown 0, min_lr 0, eps 1e-8) that Lightning steps once "
    "per epoch with the logged 'val_loss'.",
    reference=_plateau_config,
    hint="Return the same kind of dict as the chapter's configure_optimizers: the optimizer, and under "
         "'lr_scheduler' a scheduler dict that says when to step it, here once per epoch. "
         "ReduceLROnPlateau needs one more key in that dict, naming the logged metric that Lightning "
         "should pass to it, and it must be built on the very optimizer you return.",
)
def _test_plateau_config(candidate) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    conf = candidate(model, 0.01)
    if conf is None:
        raise AssertionError("return the configuration (your function returned None)")
    if isinstance(conf, torch.optim.Optimizer):
        raise AssertionError("return the optimizer AND the scheduler; an optimizer alone has no ReduceLROnPlateau")
    optimizers, configs = _parse_like_lightning(conf)
    if len(optimizers) != 1:
        raise AssertionError(f"expected one optimizer, got {len(optimizers)}")
    optimizer = optimizers[0]
    if type(optimizer) is not torch.optim.AdamW:
        raise AssertionError(
            f"the optimizer should be torch.optim.AdamW, got {type(optimizer).__name__} "
            "(Adam's weight_decay is L2 in the gradient, AdamW's is decoupled: chapter 10)"
        )
    if optimizer.param_groups[0]["lr"] != 0.01:
        raise AssertionError(f"use the lr argument: the optimizer's learning rate is {optimizer.param_groups[0]['lr']}, not 0.01")
    given = {id(p) for p in model.parameters()}
    inside = {id(p) for group in optimizer.param_groups for p in group["params"]}
    if inside != given:
        raise AssertionError("the optimizer should hold exactly model.parameters()")
    if len(configs) != 1:
        raise AssertionError(f"expected one learning-rate scheduler, got {len(configs)}")
    config = configs[0]
    scheduler = config.scheduler
    if not isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
        raise AssertionError(f"the scheduler should be a ReduceLROnPlateau, got {type(scheduler).__name__}")
    if scheduler.optimizer is not optimizer:
        raise AssertionError("build the scheduler on the very optimizer you return, not on a second optimizer")
    if config.monitor != "val_loss":
        raise AssertionError(f"the scheduler should watch 'val_loss' (the name validation_step logs), got monitor={config.monitor!r}")
    if scheduler.mode != "min":
        raise AssertionError("a loss should go down: ReduceLROnPlateau(mode='min'); mode='max' is for accuracies")
    if scheduler.factor != 0.5 or scheduler.patience != 1:
        raise AssertionError(f"use factor=0.5 and patience=1, got factor={scheduler.factor} and patience={scheduler.patience}")
    changed = [f"{name}={got!r} (default {want!r})" for name, got, want in (
        ("threshold", scheduler.threshold, 1e-4), ("threshold_mode", scheduler.threshold_mode, "rel"),
        ("cooldown", scheduler.cooldown, 0), ("min_lr", scheduler.min_lrs, [0]), ("eps", scheduler.eps, 1e-8),
    ) if got != want]
    if changed:
        raise Hint(
            f"your ReduceLROnPlateau changes settings the task leaves at their defaults: {', '.join(changed)}",
            "cooldown waits that many epochs after each cut before counting bad epochs again, and threshold decides "
            "what counts as an improvement: each changes when the learning rate drops. Pass only mode, factor and "
            "patience.",
        )
    if config.interval != "epoch" or config.frequency != 1:
        raise AssertionError(
            f"step the scheduler once per epoch ('interval': 'epoch', 'frequency': 1), got interval={config.interval!r} "
            f"and frequency={config.frequency}: 'val_loss' only exists after each validation, at the end of an epoch"
        )


# --------------------------------------------------------------------------
# 24.optimizer_steps
# --------------------------------------------------------------------------


def _optimizer_steps(num_samples: int, batch_size: int, epochs: int, accumulate_grad_batches: int = 1, drop_last: bool = False) -> int:
    batches = num_samples // batch_size if drop_last else math.ceil(num_samples / batch_size)
    # Lightning also steps at the end of an epoch when fewer than accumulate_grad_batches batches are left.
    return epochs * math.ceil(batches / accumulate_grad_batches)


_STEP_CASES = [
    # (num_samples, batch_size, epochs, accumulate_grad_batches, drop_last)
    (6400, 64, 3, 1, False),  # everything divides
    (5000, 64, 2, 1, False),  # a smaller last batch: 79 batches
    (5000, 64, 2, 1, True),  # ... dropped: 78 batches
    (5000, 64, 3, 4, False),  # 79 batches -> 20 steps per epoch (the last one after 3 batches)
    (5000, 64, 3, 4, True),  # 78 batches -> 20 steps per epoch (the last one after 2 batches)
    (6400, 64, 2, 5, False),  # 100 batches -> 20 steps
    (100, 200, 4, 3, False),  # one (small) batch per epoch, still one step
    (1000, 32, 5, 8, False),  # 32 batches -> 4 steps
    (1000, 32, 1, 7, True),  # 31 batches -> 5 steps
]


def _trainer_global_step(num_samples: int, batch_size: int, epochs: int, accumulate_grad_batches: int, drop_last: bool) -> int:
    """``trainer.global_step`` of a real, tiny Lightning run: the ground truth for ``24.optimizer_steps``.

    A ``Linear(2, 1)`` trained with SGD on ``num_samples`` random samples (a ``DataLoader`` with
    ``batch_size`` and ``drop_last``, no shuffling), on the CPU, without validation, logging or
    checkpoints. Lightning's warnings and log lines are kept out of the learner's output, and the
    global random state is left as it was. Takes a fraction of a second once Lightning is imported.
    """
    import lightning as L  # slow to import: only when this check runs

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric")]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            torch.manual_seed(0)
            data = torch.utils.data.TensorDataset(torch.randn(num_samples, 2), torch.randn(num_samples, 1))
            loader = torch.utils.data.DataLoader(data, batch_size=batch_size, drop_last=drop_last)
            trainer = L.Trainer(max_epochs=epochs, accumulate_grad_batches=accumulate_grad_batches, accelerator="cpu",
                                devices=1, limit_val_batches=0, logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False)
            trainer.fit(Tiny(), train_dataloaders=loader)
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
    return trainer.global_step


_RANDOM_CASE_SEED = 24  # the checker's extra case: the same one on every run, so a verdict never changes between runs


def _random_step_case(rng: random.Random) -> tuple[int, int, int, int, bool]:
    """(num_samples, batch_size, epochs, accumulate_grad_batches, drop_last), small enough for a quick real run."""
    batch_size = rng.randint(2, 16)
    return rng.randint(batch_size, 12 * batch_size), batch_size, rng.randint(1, 2), rng.randint(1, 5), rng.random() < 0.5


@exercise(
    "24.optimizer_steps",
    task="optimizer_steps(num_samples, batch_size, epochs, accumulate_grad_batches=1, drop_last=False) returns "
    "(as a Python int) trainer.global_step after Lightning trains for `epochs` epochs on a DataLoader of num_samples samples "
    "(that batch_size and drop_last) with that accumulate_grad_batches. The checker also compares it with a "
    "real Trainer on one more case, drawn with a fixed seed.",
    reference=_optimizer_steps,
    hint="count the batches one epoch yields first, then the optimizer steps Lightning makes over them; "
    "mind the last, smaller batch and the last, incomplete group of batches",
)
def _test_optimizer_steps(candidate) -> None:
    floats = []  # (call, value): a float is judged by its value first, then refused for its type

    def answer(n, b, e, k, drop):
        got = candidate(n, b, e, k, drop)
        call = f"optimizer_steps({n}, {b}, {e}, {k}, drop_last={drop})"
        if isinstance(got, float) and math.isfinite(got):
            floats.append((call, got))
        else:
            expect_type(got, int, call)
        return got

    for n, b, e, k, drop in _STEP_CASES:
        got = answer(n, b, e, k, drop)
        want = _optimizer_steps(n, b, e, k, drop)
        if got == want:
            continue
        args = f"optimizer_steps({n}, {b}, {e}, {k}, drop_last={drop})"
        if got != int(got):
            raise Hint(f"{args} returned {got}: a number of optimizer steps is a whole number.",
                       "a smaller last batch is still one batch, and an incomplete group of batches still gets one "
                       "step: each counts once, never as a fraction (math.ceil rounds up)")
        got = int(got)
        batches = n // b if drop else math.ceil(n / b)
        if not drop and got == e * math.ceil((n // b) / k):
            raise Hint(f"{args} = {got}, expected {want}: with drop_last=False your count misses the last, smaller batch.",
                       "a DataLoader with drop_last=False yields the leftover samples as one more, smaller batch")
        if drop and got == e * math.ceil(math.ceil(n / b) / k):
            raise Hint(f"{args} = {got}, expected {want}: with drop_last=True you still counted the last, smaller batch.",
                       "drop_last=True discards the leftover samples that do not fill a batch")
        if got == e * (batches // k) or got == (e * batches) // k:
            raise Hint(f"{args} = {got}, expected {want}: your count misses the step at the end of an epoch that ends "
                       "in the middle of an accumulation group.",
                       "Lightning steps the optimizer after the last batch of every epoch with the gradients it has, "
                       "even when that group holds fewer than accumulate_grad_batches batches")
        if got == e * batches:
            raise Hint(f"{args} = {got}, expected {want}: that is one step per batch, as if accumulate_grad_batches were 1.",
                       "with accumulate_grad_batches=k Lightning adds up the gradients of k batches, then steps once")
        if got == math.ceil(batches / k):
            raise Hint(f"{args} = {got}, expected {want}: that is the count of one epoch.",
                       "global_step keeps counting over all the epochs of a fit")
        if got == math.ceil(e * batches / k):
            raise Hint(f"{args} = {got}, expected {want}: your accumulation groups run on across the end of an epoch, "
                       "but accumulation restarts in every epoch.",
                       "count the steps of one epoch (with its last, incomplete group), then scale by the epochs")
        raise AssertionError(f"{args} = {got}, expected {want}")

    n, b, e, k, drop = _random_step_case(random.Random(_RANDOM_CASE_SEED))  # (111, 13, 1, 2, False)
    want = _trainer_global_step(n, b, e, k, drop)
    got = answer(n, b, e, k, drop)
    if got != want:
        raise Hint(f"optimizer_steps({n}, {b}, {e}, {k}, drop_last={drop}) = {got:g}, but a real Lightning Trainer "
                   f"made {want} optimizer steps (trainer.global_step) on that case.",
                   "compare your count with Lightning's for this case by hand: batches per epoch, then steps per epoch")
    if floats:  # every count right, but the task asks for an int
        call, value = floats[0]
        expect_type(value, int, f"{call} = {value!r}: the count")
