"""Exercises of chapter 24: realistic wrong answers fail with a hint (the generic checks are in test_exercises.py)."""

from __future__ import annotations

import math
import random

import pytest
import torch

from helpers.exercises import check
from helpers.exercises.ch24 import (
    _STEP_CASES,
    _optimizer_steps,
    _random_step_case,
    _trainer_global_step,
)
from tests.exercise_support import assert_rejected

# --------------------------------------------------------------------------
# 24.plateau_config
# --------------------------------------------------------------------------


def _adamw(model, lr):
    return torch.optim.AdamW(model.parameters(), lr=lr)


def _plateau(opt, **kw):
    return torch.optim.lr_scheduler.ReduceLROnPlateau(opt, **{"mode": "min", "factor": 0.5, "patience": 1, **kw})


def test_plateau_without_monitor_fails():
    def no_monitor(model, lr):
        opt = _adamw(model, lr)
        return {"optimizer": opt, "lr_scheduler": _plateau(opt)}

    assert_rejected("24.plateau_config", no_monitor, "monitor")


def test_plateau_as_two_lists_fails():
    def lists(model, lr):
        opt = _adamw(model, lr)
        return [opt], [_plateau(opt)]

    assert_rejected("24.plateau_config", lists, "monitor")


def test_plateau_top_level_monitor_is_accepted():
    def top_level(model, lr):
        opt = _adamw(model, lr)
        return {"optimizer": opt, "lr_scheduler": _plateau(opt), "monitor": "val_loss"}

    assert check("24.plateau_config", top_level, show=False).passed


def test_plateau_on_another_optimizer_fails():
    def two_optimizers(model, lr):
        opt = _adamw(model, lr)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": _plateau(_adamw(model, lr)), "monitor": "val_loss"}}

    assert_rejected("24.plateau_config", two_optimizers, "optimizer")


def test_plateau_with_adam_fails():
    def adam(model, lr):
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": _plateau(opt), "monitor": "val_loss"}}

    assert_rejected("24.plateau_config", adam, "AdamW")


def test_plateau_hard_coded_lr_fails():
    def default_lr(model, lr):
        opt = torch.optim.AdamW(model.parameters())
        return {"optimizer": opt, "lr_scheduler": {"scheduler": _plateau(opt), "monitor": "val_loss"}}

    assert_rejected("24.plateau_config", default_lr, "lr argument")


def test_plateau_mode_max_fails():
    def mode_max(model, lr):
        opt = _adamw(model, lr)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": _plateau(opt, mode="max"), "monitor": "val_loss"}}

    assert_rejected("24.plateau_config", mode_max, "mode='min'")


def test_plateau_with_a_cooldown_fails():
    def cooldown(model, lr):
        opt = _adamw(model, lr)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": _plateau(opt, cooldown=2), "monitor": "val_loss"}}

    assert_rejected("24.plateau_config", cooldown, "cooldown=2", "default 0")


def test_plateau_with_an_absolute_threshold_fails():
    def threshold(model, lr):
        opt = _adamw(model, lr)
        scheduler = _plateau(opt, threshold=0.01, threshold_mode="abs")
        return {"optimizer": opt, "lr_scheduler": {"scheduler": scheduler, "monitor": "val_loss"}}

    assert_rejected("24.plateau_config", threshold, "threshold=0.01", "threshold_mode='abs'")


def test_plateau_with_defaults_spelled_out_is_accepted():
    def explicit(model, lr):
        opt = _adamw(model, lr)
        scheduler = _plateau(opt, threshold=1e-4, threshold_mode="rel", cooldown=0, min_lr=0.0, eps=1e-8)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": scheduler, "monitor": "val_loss"}}

    assert check("24.plateau_config", explicit, show=False).passed


def test_plateau_per_step_fails():
    def per_step(model, lr):
        opt = _adamw(model, lr)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": _plateau(opt), "monitor": "val_loss", "interval": "step"}}

    assert_rejected("24.plateau_config", per_step, "epoch")


def test_plateau_wrong_metric_fails():
    def val_acc(model, lr):
        opt = _adamw(model, lr)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": _plateau(opt), "monitor": "val_acc"}}

    assert_rejected("24.plateau_config", val_acc, "val_loss")


def test_plateau_default_factor_fails():
    def defaults(model, lr):
        opt = _adamw(model, lr)
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": "val_loss"}}

    assert_rejected("24.plateau_config", defaults, "factor=0.5")


def test_plateau_optimizer_only_fails():
    assert_rejected("24.plateau_config", _adamw, "scheduler")


# --------------------------------------------------------------------------
# 24.optimizer_steps
# --------------------------------------------------------------------------


def test_steps_floor_of_accumulation_fails():
    def floor_steps(n, b, e, k=1, drop_last=False):
        batches = n // b if drop_last else math.ceil(n / b)
        return e * (batches // k)

    assert_rejected("24.optimizer_steps", floor_steps, "middle of an accumulation group")


def test_steps_always_dropping_last_batch_fails():
    def always_floor(n, b, e, k=1, drop_last=False):
        return e * math.ceil((n // b) / k)

    assert_rejected("24.optimizer_steps", always_floor, "drop_last=False")


def test_steps_ignoring_drop_last_fails():
    def never_drop(n, b, e, k=1, drop_last=False):
        return e * math.ceil(math.ceil(n / b) / k)

    assert_rejected("24.optimizer_steps", never_drop, "drop_last=True")


def test_steps_ignoring_accumulation_fails():
    def every_batch(n, b, e, k=1, drop_last=False):
        return e * (n // b if drop_last else math.ceil(n / b))

    assert_rejected("24.optimizer_steps", every_batch, "accumulate_grad_batches")


def test_steps_rounding_over_all_epochs_fails():
    def across_epochs(n, b, e, k=1, drop_last=False):
        batches = n // b if drop_last else math.ceil(n / b)
        return math.ceil(e * batches / k)

    assert_rejected("24.optimizer_steps", across_epochs, "restarts in every epoch")


def test_steps_one_epoch_only_fails():
    def one_epoch(n, b, e, k=1, drop_last=False):
        return math.ceil((n // b if drop_last else math.ceil(n / b)) / k)

    assert_rejected("24.optimizer_steps", one_epoch, "one epoch")


def test_steps_float_division_fails():
    def fractional(n, b, e, k=1, drop_last=False):
        return e * n / b / k

    assert_rejected("24.optimizer_steps", fractional, "whole number")


def test_steps_samples_over_effective_batch_is_accepted():
    def effective_batch(n, b, e, k=1, drop_last=False):
        batches = n // b if drop_last else -(-n // b)
        return e * -(-batches // k)

    assert check("24.optimizer_steps", effective_batch, show=False).passed


def test_steps_right_on_the_fixed_cases_only_fails():
    """An answer that knows the fixed cases by heart is caught by the seeded extra case, run on a real Trainer."""
    table = {case: _optimizer_steps(*case) for case in _STEP_CASES}

    def memorised(n, b, e, k=1, drop_last=False):
        return table.get((n, b, e, k, drop_last), -1)  # never right on a case it does not know

    assert_rejected("24.optimizer_steps", memorised, "real Lightning Trainer")


@pytest.mark.parametrize("case", [(5000 // 10, 64 // 4, 2, 4, False), (50, 16, 1, 3, True), (33, 8, 2, 5, False)]
                         + [_random_step_case(random.Random(seed)) for seed in range(3)])
def test_reference_matches_a_real_trainer(case):
    """The checker's ground truth: the reference formula equals a real Trainer's global_step."""
    assert _optimizer_steps(*case) == _trainer_global_step(*case), case


def test_optimizer_steps_as_a_float_fails():
    def as_float(num_samples, batch_size, epochs, accumulate_grad_batches=1, drop_last=False):
        batches = num_samples // batch_size if drop_last else math.ceil(num_samples / batch_size)
        return float(epochs * math.ceil(batches / accumulate_grad_batches))

    assert_rejected("24.optimizer_steps", as_float, "the count should be a Python int, got float")
