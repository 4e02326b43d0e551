"""Exercises of chapter 11: realistic wrong answers fail with a hint; right variants pass."""

from __future__ import annotations

import math

import torch

from helpers.exercises import check
from tests.exercise_support import assert_rejected

# --------------------------------------------------------------------------
# 11.warmup_cosine_lr
# --------------------------------------------------------------------------


def _cosine(step, base_lr, warmup_steps, total_steps, eta_min):
    k, T = step - warmup_steps, total_steps - warmup_steps
    return eta_min + (base_lr - eta_min) * (1 + math.cos(math.pi * k / T)) / 2


def test_warmup_from_zero_fails():
    def from_zero(step, base_lr, warmup_steps, total_steps, start_factor, eta_min):
        if step < warmup_steps:
            return base_lr * step / warmup_steps
        return _cosine(step, base_lr, warmup_steps, total_steps, eta_min)

    assert_rejected("11.warmup_cosine_lr", from_zero, "start_factor")


def test_warmup_reaching_the_peak_one_step_early_fails():
    def early_peak(step, base_lr, warmup_steps, total_steps, start_factor, eta_min):
        if step < warmup_steps:
            frac = step / (warmup_steps - 1) if warmup_steps > 1 else 1.0
            return base_lr * (start_factor + (1 - start_factor) * frac)
        return _cosine(step, base_lr, warmup_steps, total_steps, eta_min)

    assert_rejected("11.warmup_cosine_lr", early_peak, "one step too early")


def test_cosine_counting_from_step_zero_of_the_run_fails():
    def global_step(step, base_lr, warmup_steps, total_steps, start_factor, eta_min):
        if step < warmup_steps:
            return base_lr * (start_factor + (1 - start_factor) * step / warmup_steps)
        T = total_steps - warmup_steps
        return eta_min + (base_lr - eta_min) * (1 + math.cos(math.pi * step / T)) / 2

    assert_rejected("11.warmup_cosine_lr", global_step, "own step 0")


def test_cosine_over_total_steps_fails():
    def long_cosine(step, base_lr, warmup_steps, total_steps, start_factor, eta_min):
        if step < warmup_steps:
            return base_lr * (start_factor + (1 - start_factor) * step / warmup_steps)
        k = step - warmup_steps
        return eta_min + (base_lr - eta_min) * (1 + math.cos(math.pi * k / total_steps)) / 2

    assert_rejected("11.warmup_cosine_lr", long_cosine, "T_max")


def test_cosine_with_t_max_the_whole_run_is_described_as_such():
    """T_max = total_steps, counted over the run's steps: the message says what the answer did."""
    def whole_run(step, base_lr, warmup_steps, total_steps, start_factor, eta_min):
        if step < warmup_steps:
            return base_lr * (start_factor + (1 - start_factor) * step / warmup_steps)
        return eta_min + (base_lr - eta_min) * (1 + math.cos(math.pi * step / total_steps)) / 2

    result = assert_rejected("11.warmup_cosine_lr", whole_run, "too long", "spans total_steps, the whole run",
                             "T_max = total_steps - warmup_steps")
    assert "covers only the steps left" not in result.message, result.message


def test_cosine_ignoring_eta_min_fails():
    def no_floor(step, base_lr, warmup_steps, total_steps, start_factor, eta_min):
        return _cosine(step, base_lr, warmup_steps, total_steps, 0.0) if step >= warmup_steps else (
            base_lr * (start_factor + (1 - start_factor) * step / warmup_steps))

    assert_rejected("11.warmup_cosine_lr", no_floor, "eta_min")


def test_cosine_one_step_ahead_fails():
    def ahead(step, base_lr, warmup_steps, total_steps, start_factor, eta_min):
        if step < warmup_steps:
            return base_lr * (start_factor + (1 - start_factor) * step / warmup_steps)
        return _cosine(step + 1, base_lr, warmup_steps, total_steps, eta_min)

    assert_rejected("11.warmup_cosine_lr", ahead, "Off by one")


def test_warmup_cosine_returning_a_tensor_is_accepted():
    def as_tensor(step, base_lr, warmup_steps, total_steps, start_factor, eta_min):
        step_t = torch.tensor(float(step), dtype=torch.float64)
        if step < warmup_steps:
            return base_lr * (start_factor + (1 - start_factor) * step_t / warmup_steps)
        k = step_t - warmup_steps
        return eta_min + (base_lr - eta_min) * (1 + torch.cos(math.pi * k / (total_steps - warmup_steps))) / 2

    assert check("11.warmup_cosine_lr", as_tensor, show=False).passed


def _stepped(make, step, base_lr):
    """The lr of optimizer step `step` when make(optimizer) is stepped after every optimizer step."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=base_lr)
    scheduler = make(optimizer)
    for _ in range(step):
        optimizer.step()
        scheduler.step()
    return optimizer.param_groups[0]["lr"]


def test_warmup_cosine_by_stepping_sequential_lr_is_refused():
    from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR

    def by_library(step, base_lr, warmup_steps, total_steps, start_factor, eta_min):
        return _stepped(lambda opt: SequentialLR(
            opt, [LinearLR(opt, start_factor=start_factor, total_iters=warmup_steps),
                  CosineAnnealingLR(opt, T_max=total_steps - warmup_steps, eta_min=eta_min)],
            milestones=[warmup_steps]), step, base_lr)

    assert_rejected("11.warmup_cosine_lr", by_library, "yourself", "LinearLR")


def test_warmup_cosine_by_stepping_lambda_lr_is_refused():
    from torch.optim.lr_scheduler import LambdaLR

    def by_lambda(step, base_lr, warmup_steps, total_steps, start_factor, eta_min):
        def factor(t):
            if t < warmup_steps:
                return start_factor + (1 - start_factor) * t / warmup_steps
            k, T = t - warmup_steps, total_steps - warmup_steps
            return (eta_min + (base_lr - eta_min) * (1 + math.cos(math.pi * k / T)) / 2) / base_lr
        return _stepped(lambda opt: LambdaLR(opt, factor), step, base_lr)

    assert_rejected("11.warmup_cosine_lr", by_lambda, "yourself", "LambdaLR")


def test_warmup_cosine_returning_a_list_fails():
    def as_list(step, base_lr, warmup_steps, total_steps, start_factor, eta_min):
        return [base_lr]

    assert_rejected("11.warmup_cosine_lr", as_list, "float")


# --------------------------------------------------------------------------
# 11.total_steps
# --------------------------------------------------------------------------


def test_total_steps_ignoring_drop_last_fails():
    def always_ceil(epochs, dataset_size, batch_size, drop_last, accumulation_steps):
        return epochs * math.ceil(math.ceil(dataset_size / batch_size) / accumulation_steps)

    assert_rejected("11.total_steps", always_ceil, "drop_last")


def test_total_steps_ignoring_accumulation_fails():
    def per_batch(epochs, dataset_size, batch_size, drop_last, accumulation_steps):
        batches = dataset_size // batch_size if drop_last else math.ceil(dataset_size / batch_size)
        return epochs * batches

    assert_rejected("11.total_steps", per_batch, "accumulation")


def test_total_steps_dropping_the_leftover_group_fails():
    def floor_groups(epochs, dataset_size, batch_size, drop_last, accumulation_steps):
        batches = dataset_size // batch_size if drop_last else math.ceil(dataset_size / batch_size)
        return epochs * (batches // accumulation_steps)

    assert_rejected("11.total_steps", floor_groups, "leftover")


def test_total_steps_grouping_across_epochs_fails():
    def across_epochs(epochs, dataset_size, batch_size, drop_last, accumulation_steps):
        batches = dataset_size // batch_size if drop_last else math.ceil(dataset_size / batch_size)
        return math.ceil(epochs * batches / accumulation_steps)

    assert_rejected("11.total_steps", across_epochs, "every epoch")


def test_total_steps_minus_one_fails():
    def minus_one(epochs, dataset_size, batch_size, drop_last, accumulation_steps):
        batches = dataset_size // batch_size if drop_last else math.ceil(dataset_size / batch_size)
        return epochs * math.ceil(batches / accumulation_steps) - 1

    assert_rejected("11.total_steps", minus_one, "minus one")


def test_total_steps_one_epoch_fails():
    def one_epoch(epochs, dataset_size, batch_size, drop_last, accumulation_steps):
        batches = dataset_size // batch_size if drop_last else math.ceil(dataset_size / batch_size)
        return math.ceil(batches / accumulation_steps)

    assert_rejected("11.total_steps", one_epoch, "epochs")


def test_total_steps_float_division_fails():
    def float_count(epochs, dataset_size, batch_size, drop_last, accumulation_steps):
        return epochs * dataset_size / batch_size / accumulation_steps

    assert_rejected("11.total_steps", float_count, "int")


def test_total_steps_right_count_as_a_float_fails():
    """OneCycleLR(total_steps=6.0) raises ValueError: the right count as a float is not an answer."""
    def as_float(epochs, dataset_size, batch_size, drop_last, accumulation_steps):
        batches = dataset_size // batch_size if drop_last else math.ceil(dataset_size / batch_size)
        return float(epochs * math.ceil(batches / accumulation_steps))

    assert_rejected("11.total_steps", as_float, "should be a Python int, got float")


def test_total_steps_as_a_tensor_fails():
    def as_tensor(epochs, dataset_size, batch_size, drop_last, accumulation_steps):
        batches = dataset_size // batch_size if drop_last else -(-dataset_size // batch_size)
        return torch.tensor(epochs * -(-batches // accumulation_steps))

    assert_rejected("11.total_steps", as_tensor, "Python int, got Tensor")


def test_total_steps_with_a_real_loader_is_accepted():
    from torch.utils.data import DataLoader

    def with_loader(epochs, dataset_size, batch_size, drop_last, accumulation_steps):
        loader = DataLoader(range(dataset_size), batch_size=batch_size, drop_last=drop_last)
        return epochs * -(-len(loader) // accumulation_steps)

    assert check("11.total_steps", with_loader, show=False).passed
