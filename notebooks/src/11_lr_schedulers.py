# ---
# jupyter:
#   jupytext:
#     formats: ipynb,src//py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: PyTorch course (.venv)
#     language: python
#     name: pytorch-course
# ---

# %% [markdown]
# # 11 · Learning-rate schedules
#
# The learning rate is the one setting that matters most in training, and
# the best value is not the same all the way through a run. At the start,
# the weights are random and the gradients are large and unreliable, so a
# big step can throw the model somewhere bad. In the middle, a large rate
# covers ground fast. At the end, the same large rate makes the weights
# bounce around a minimum instead of settling into it. A **learning-rate
# schedule** changes the rate as training goes on. In PyTorch a scheduler
# object from `torch.optim.lr_scheduler` does this: each call to
# `scheduler.step()` writes a new value into the optimizer's
# `param_groups[i]["lr"]`.
#
# **What you will learn**
# - the common schedules, `StepLR`, `CosineAnnealingLR`,
#   `CosineAnnealingWarmRestarts`, `OneCycleLR`, linear warmup then cosine
#   with `SequentialLR` and as one `LambdaLR`, and `ReduceLROnPlateau`, all in
#   one figure, checked against their closed-form formulas;
# - stepping per batch or per epoch, and the bug of stepping a per-batch
#   schedule once per epoch;
# - why `optimizer.step()` comes before `scheduler.step()`, the warning
#   PyTorch gives otherwise, and the learning rate you lose;
# - `get_last_lr()`, several parameter groups, chaining schedules, and
#   saving a scheduler's `state_dict` with the optimizer's;
# - `ReduceLROnPlateau(verbose=...)`, which no longer exists, and what to use
#   instead;
# - a real comparison on Fashion-MNIST over several paired seeds: constant
#   learning rates (at the schedules' peak and below it) against cosine,
#   warmup + cosine and OneCycle, with the spread between seeds.
#
# **Prerequisites:** chapters 04 and 05 (the training loop,
# `helpers.training`), chapter 10 (optimizers and their `param_groups`).
#
# **Estimated time:** 40 minutes.

# %% tags=["parameters"]
BASE_LR = 0.1  # the peak learning rate of the schedules we draw
DEMO_EPOCHS = 10  # epochs of the drawn schedules
DEMO_STEPS_PER_EPOCH = 20  # batches per epoch of the drawn schedules
TRAIN_IMAGES = 8000  # Fashion-MNIST training images for the real runs (a random subset)
VAL_IMAGES = 2000  # validation images (the first ones of the test set)
EPOCHS = 4  # epochs of each real run in the comparison
SEEDS = 4  # seeds (initial weights and batch order) per schedule in the comparison
BATCH_SIZE = 128  # images per optimizer step
LR = 0.1  # SGD's peak learning rate in the comparison (momentum 0.9)
HIDDEN = 128  # width of the MLP's hidden layer
WARMUP_FRACTION = 0.1  # share of the steps spent warming up in warmup + cosine
MAX_LOSS_RATIO = 0.95  # in every seed, both schedules must end with at most this times the constant lr's val loss
MIN_SCHEDULE_GAIN = 0.01  # ...and with at least this much more val accuracy, same seed (0.01 = one point)
MIN_GAIN_SE = 2.0  # ...and a mean paired gain of at least this many standard errors of that mean
MIN_SEPARATION = 0.0  # each schedule's worst seed must beat the constant lr's best by more than this
MAX_GAP_FRACTION = 0.5  # OneCycle and warmup + cosine may differ by at most this fraction of their gain
MIN_AHEAD_FRACTION = 1.0  # share of seeds in which warmup + cosine must end with the lower val loss of the two
# (1.0 = every seed: what this run showed, 4 of 4, set after seeing it; 4 seeds cannot give a significant sign test)
MAX_COSINE_GAP_SE = 2.0  # |mean paired gain of cosine - warmup + cosine| must be under this many standard errors
CONSTANT_DIVISORS = (3, 10)  # extra constant-rate arms at LR / 3 and LR / 10, to find the best constant rate
MIN_BEST_GAIN = 0.0  # in every seed, warmup + cosine must beat the best constant rate by more than this accuracy
MIN_BEST_GAIN_SE = 3.0  # ...with a mean paired gain of at least this many standard errors
MIN_MEAN_BEST_GAIN = 0.0  # every schedule's mean paired gain over the best constant rate must exceed this
MIN_SMALLER_RATE_GAIN = 0.01  # the best constant rate must beat the constant LR by this mean accuracy (LR too large)
MAX_FIRST_EPOCH_DEFICIT = 0.01  # after epoch 1 the constant lr may trail the schedules by at most this accuracy
MIN_STEP_RATIO = 3.0  # in the last epoch the constant lr's mean update must be this many times the schedules'
PLATEAU_TRAIN_IMAGES = 1000  # a small training set, so that the validation loss soon stops improving
PLATEAU_EPOCHS = 14  # epochs of the ReduceLROnPlateau run
PLATEAU_PATIENCE = 1  # epochs without improvement that ReduceLROnPlateau tolerates
MIN_PLATEAU_REDUCTIONS = 1  # the checks want at least this many reductions
SEED = 0

# %% [markdown]
# ## Setup

# %%
import io
import math
import statistics
import textwrap
import time
import warnings

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import (
    ChainedScheduler,
    CosineAnnealingLR,
    CosineAnnealingWarmRestarts,
    ExponentialLR,
    LambdaLR,
    LinearLR,
    OneCycleLR,
    ReduceLROnPlateau,
    SequentialLR,
    StepLR,
)
from torch.utils.data import DataLoader, TensorDataset

from helpers.data import fashion_mnist
from helpers.device import pick_device, seed_everything
from helpers.exercises import check, solution  # noqa: F401  (solution: for when you are stuck)
from helpers.report import ChapterReport
from helpers.training import evaluate, train_one_epoch

generator = seed_everything(SEED)
device = pick_device()
report = ChapterReport("11_lr_schedulers")
notebook_start = time.perf_counter()
print(f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} CPU threads")

# %% [markdown]
# ## How a scheduler works
#
# A scheduler wraps an optimizer. When you create it, it stores each
# parameter group's starting rate as `group["initial_lr"]` (its *base* lr)
# and sets the rate for step 0. Then every `scheduler.step()` moves one step
# along the schedule and writes the new rate into `group["lr"]`, which the
# next `optimizer.step()` reads. The scheduler never looks at the model or
# the loss (except `ReduceLROnPlateau`, below); it only counts its own
# `step()` calls, in `scheduler.last_epoch`. The name is historical: it counts
# whatever you step it on, epochs or batches.
#
# To draw a schedule we need no model at all: one dummy parameter, an
# optimizer, and a loop that reads the rate, takes an (empty) optimizer step
# and steps the scheduler, the order every real loop uses:


# %%
def dummy_optimizer(lr=BASE_LR, momentum=0.9):
    """SGD on one dummy parameter: enough for a scheduler to drive."""
    return torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr, momentum=momentum)


def lr_trace(make_scheduler, steps, lr=BASE_LR):
    """The lr that each of `steps` optimizer steps uses, with make_scheduler(optimizer) stepped after each."""
    optimizer = dummy_optimizer(lr)
    scheduler = make_scheduler(optimizer)
    lrs = []
    for _ in range(steps):
        lrs.append(optimizer.param_groups[0]["lr"])  # what this optimizer step uses
        optimizer.step()
        scheduler.step()
    return lrs


TOTAL = DEMO_EPOCHS * DEMO_STEPS_PER_EPOCH  # optimizer steps of the drawn schedules
optimizer = dummy_optimizer()
scheduler = StepLR(optimizer, step_size=3, gamma=0.5)
print("initial_lr stored by the scheduler:", optimizer.param_groups[0]["initial_lr"])
for step in range(7):
    print(f"step {step}: lr {optimizer.param_groups[0]['lr']:.4f}  get_last_lr() {scheduler.get_last_lr()}  "
          f"last_epoch {scheduler.last_epoch}")
    optimizer.step()
    scheduler.step()

# %% [markdown]
# `scheduler.get_last_lr()` returns a list, one rate per parameter group: the
# rate the scheduler set last, which is the one the next `optimizer.step()`
# uses. Reading `optimizer.param_groups[0]["lr"]` gives the same number.
#
# ## The schedules
#
# Below, each schedule runs for `TOTAL` optimizer steps and is stepped after
# every one (per-step stepping; the next section compares it with per-epoch
# stepping). We write `t` for the step and `η₀` for the base lr.
#
# - **`StepLR(step_size, gamma)`**: multiply by `gamma` every `step_size`
#   steps: `η₀ · gamma^⌊t / step_size⌋`. Its relative `MultiStepLR` takes
#   a list of milestones instead: the classic ResNet recipe for CIFAR-10
#   (He et al. 2016) divides the rate by 10 at 32k and again at 48k
#   iterations.
# - **`CosineAnnealingLR(T_max, eta_min)`**: half a cosine wave from `η₀`
#   down to `eta_min` over `T_max` steps:
#   `eta_min + (η₀ − eta_min) · (1 + cos(π t / T_max)) / 2`. No
#   milestones to tune, and it spends a long time at small rates near the end.
# - **`CosineAnnealingWarmRestarts(T_0, T_mult)`** (SGDR, Loshchilov and
#   Hutter 2017): the same curve, restarted at `η₀` after `T_0` steps, then
#   after `T_0·T_mult` more, and so on.
# - **`OneCycleLR(max_lr, total_steps)`** (Smith and Topin 2019): rise from
#   `max_lr / div_factor` (25) to `max_lr` over the first `pct_start` (30 %)
#   of the steps, then fall to `max_lr / (div_factor · final_div_factor)`,
#   both with cosine curves. With an optimizer that has momentum, it also
#   moves the momentum the opposite way. It must know the total number of
#   steps in advance.
# - **Linear warmup, then cosine**: the usual schedule for transformers.
#   `LinearLR(start_factor, end_factor=1, total_iters=W)` ramps from
#   `start_factor · η₀` up; `SequentialLR` hands over to a
#   `CosineAnnealingLR(T_max=TOTAL − W)` at the milestone `W`.
# - **`ReduceLROnPlateau(factor, patience)`**: does not follow a formula in
#   `t`. It watches a metric you pass to `step(metric)`, and multiplies the
#   rate by `factor` when the metric has not improved for more than
#   `patience` calls. Its own section follows; it needs a real metric, so it
#   trains a model.

# %%
WARMUP = max(1, round(WARMUP_FRACTION * TOTAL))
STEP_SIZE = TOTAL // 3
T_0 = TOTAL // 7  # restarts after T_0, then 2*T_0 more steps, then 4*T_0


def warmup_cosine(optimizer, warmup=WARMUP, total=TOTAL, start_factor=0.1):
    warm = LinearLR(optimizer, start_factor=start_factor, end_factor=1.0, total_iters=warmup)
    cosine = CosineAnnealingLR(optimizer, T_max=total - warmup, eta_min=0.0)
    return SequentialLR(optimizer, schedulers=[warm, cosine], milestones=[warmup])


makers = {
    "StepLR": lambda opt: StepLR(opt, step_size=STEP_SIZE, gamma=0.3),
    "CosineAnnealingLR": lambda opt: CosineAnnealingLR(opt, T_max=TOTAL, eta_min=0.0),
    "CosineAnnealingWarmRestarts": lambda opt: CosineAnnealingWarmRestarts(opt, T_0=T_0, T_mult=2),
    "OneCycleLR": lambda opt: OneCycleLR(opt, max_lr=BASE_LR, total_steps=TOTAL),
    "warmup + cosine (SequentialLR)": warmup_cosine,
}
traces = {name: lr_trace(make, TOTAL) for name, make in makers.items()}
for name, lrs in traces.items():
    print(f"{name:31s} first {lrs[0]:.4g}  max {max(lrs):.4g} (step {lrs.index(max(lrs))})  last {lrs[-1]:.3g}")

# %% [markdown]
# ### Checked against the formulas
#
# A schedule is easy to get subtly wrong, so we compare every step with the
# closed-form formula. Note two details the formulas make visible:
# `SequentialLR` switches to the cosine **at** step `W`, so the linear ramp
# itself never reaches `η₀` (it would at step `W`); and the cosine's last
# step `T_max − 1` is one step short of `eta_min`. (The schedulers compute
# most values recursively from the previous one, so we allow float rounding.)


# %%
def cosine(t, T, base=BASE_LR, eta_min=0.0):
    return eta_min + (base - eta_min) * (1 + math.cos(math.pi * t / T)) / 2


def restarts(t, T_0, T_mult=2):
    """(steps since the last restart, length of the current cycle) for SGDR."""
    T_i = T_0
    while t >= T_i:
        t, T_i = t - T_i, T_i * T_mult
    return t, T_i


onecycle_peak = round(0.3 * TOTAL) - 1  # OneCycleLR's first phase ends at step pct_start * total_steps - 1
formulas = {
    "StepLR": lambda t: BASE_LR * 0.3 ** (t // STEP_SIZE),
    "CosineAnnealingLR": lambda t: cosine(t, TOTAL),
    "CosineAnnealingWarmRestarts": lambda t: cosine(*restarts(t, T_0)),
    "warmup + cosine (SequentialLR)": lambda t: (
        BASE_LR * (0.1 + 0.9 * t / WARMUP) if t < WARMUP else cosine(t - WARMUP, TOTAL - WARMUP)
    ),
}
max_formula_error = 0.0
for name, formula in formulas.items():
    error = max(abs(lr - formula(t)) for t, lr in enumerate(traces[name]))
    max_formula_error = max(max_formula_error, error)
    print(f"{name:31s} largest |scheduler - formula| over {TOTAL} steps: {error:.1e}")
one = traces["OneCycleLR"]
print(f"OneCycleLR: starts at max_lr/25 = {BASE_LR / 25:.4g}: {one[0]:.4g}; peak {one[onecycle_peak]:.4g} at step "
      f"{onecycle_peak}; ends at max_lr/25/1e4 = {BASE_LR / 25e4:.3g}: {one[-1]:.3g}")
_ = report.record("largest |scheduler - closed-form formula|", max_formula_error, "", digits=20)

# %%
assert max_formula_error < 1e-9 * BASE_LR, f"a schedule differs from its formula by {max_formula_error:.2e}"
assert math.isclose(one[0], BASE_LR / 25) and math.isclose(one[onecycle_peak], BASE_LR), "OneCycle's start or peak"
assert math.isclose(one[-1], BASE_LR / 25 / 1e4, rel_tol=1e-6), "OneCycle should end at max_lr / 25 / 1e4"
sequential = traces["warmup + cosine (SequentialLR)"]
assert max(sequential[:WARMUP]) < BASE_LR and sequential[WARMUP] == BASE_LR, "the peak is at the milestone"
assert all(traces["CosineAnnealingWarmRestarts"][t] == BASE_LR for t in (0, T_0, 3 * T_0)), "restarts at base lr"

# %% [markdown]
# ### Warmup + cosine as one `LambdaLR`
#
# Most transformer training code does not chain two schedulers. It writes
# the whole schedule as one function of the step and hands it to
# **`LambdaLR(optimizer, lr_lambda)`**, which sets every group's rate to
# `base_lr · lr_lambda(t)` at step `t`. The function returns a *factor*,
# not a rate, so one lambda serves groups with different base rates. This
# is the form of Hugging Face's `get_cosine_schedule_with_warmup`, for
# example, which warms up from a factor of 0 and decays to 0. A lambda is
# the way to write a schedule that PyTorch has no class for, and since
# `LambdaLR` computes each rate directly from `t` (not from the previous
# rate, as `LinearLR` and `CosineAnnealingLR` do), the value at any step is
# exactly the formula. Below, the same warmup + cosine as the
# `SequentialLR` above (warmup from `0.1 · η₀`), and the variant that
# starts from 0:


# %%
def warmup_cosine_factor(step, warmup=WARMUP, total=TOTAL, start_factor=0.1):
    """LambdaLR's factor at `step`: linear from start_factor up to 1 over `warmup` steps, then cosine to 0."""
    if step < warmup:
        return start_factor + (1.0 - start_factor) * step / warmup
    progress = (step - warmup) / (total - warmup)  # 0 at the end of the warmup, 1 at the end of training
    return 0.5 * (1.0 + math.cos(math.pi * progress))


lambda_trace = lr_trace(lambda opt: LambdaLR(opt, lr_lambda=warmup_cosine_factor), TOTAL)
from_zero = lr_trace(lambda opt: LambdaLR(opt, lr_lambda=lambda t: warmup_cosine_factor(t, start_factor=0.0)), TOTAL)
lambda_vs_sequential = max(abs(a - b) for a, b in zip(lambda_trace, sequential))
check_steps = (0, 1, WARMUP // 2, WARMUP - 1, WARMUP, (WARMUP + TOTAL) // 2, TOTAL - 1)
print("step  LambdaLR     closed form  SequentialLR")
for t in check_steps:
    print(f"{t:4d}  {lambda_trace[t]:.9f}  {formulas['warmup + cosine (SequentialLR)'](t):.9f}  {sequential[t]:.9f}")
print(f"largest |LambdaLR - SequentialLR| over {TOTAL} steps: {lambda_vs_sequential:.1e}")
print(f"starting from a factor of 0: step 0 uses lr {from_zero[0]}, step 1 uses {from_zero[1]:.4g}")
saved_lambdas = LambdaLR(dummy_optimizer(), lr_lambda=warmup_cosine_factor).state_dict()["lr_lambdas"]
print(f"what LambdaLR.state_dict() keeps of a plain function: lr_lambdas = {saved_lambdas}")

# %%
closed_form = formulas["warmup + cosine (SequentialLR)"]
assert all(math.isclose(lambda_trace[t], closed_form(t), rel_tol=1e-12, abs_tol=1e-15) for t in check_steps), (
    "LambdaLR should give base_lr * lr_lambda(t) at optimizer step t"
)
assert lambda_vs_sequential < 1e-9 * BASE_LR, f"LambdaLR and SequentialLR differ by {lambda_vs_sequential:.1e}"
assert from_zero[0] == 0.0 and from_zero[WARMUP] == BASE_LR, "the variant starts at lr 0 and peaks at the milestone"
assert saved_lambdas == [None], "a plain function is not saved in LambdaLR's state_dict"

# %% [markdown]
# The two constructions agree to float rounding at every step. Two things to
# know about the lambda form. Warming up from a factor of 0 makes the first
# optimizer step use a rate of exactly 0: the weights do not move (with
# Adam the moment estimates are still updated from that batch, so the step
# is not entirely lost). `LinearLR` itself does not start from 0: its
# default `start_factor` is 1/3. And
# `state_dict()` does not save a plain function or lambda (`None` above, as
# the `LambdaLR` documentation says; only callable *objects* have their
# attributes saved): the step count is saved, so a resumed run must build
# the scheduler with the same function again before loading the state.
#
# ## ReduceLROnPlateau, driven by a real metric
#
# `ReduceLROnPlateau` reacts to training instead of following a clock. We
# train a small MLP on only `PLATEAU_TRAIN_IMAGES` Fashion-MNIST images, so
# that the validation loss soon stops improving, and step the scheduler once
# per epoch **with the validation loss**. With `patience=1` it cuts the rate
# (here by `factor=0.3`) after two epochs in a row without a new best loss.
# It stores no schedule, only `best`, `num_bad_epochs` (reset to 0 after
# each cut) and a cooldown counter.
#
# The data is Fashion-MNIST (Xiao et al. 2017): 28×28 greyscale photos of ten
# kinds of clothing, harder than MNIST's digits. We take a random subset of
# the training images and the first images of the test set for validation,
# as tensors, normalised with the training subset's mean and standard
# deviation (chapter 05).

# %%
train_raw, test_raw = fashion_mnist(train=True), fashion_mnist(train=False)
subset = torch.randperm(len(train_raw), generator=torch.Generator().manual_seed(SEED))[:TRAIN_IMAGES]
train_pixels = train_raw.data[subset].float().div(255).flatten(1)  # [N, 784] in [0, 1]
MEAN, STD = train_pixels.mean().item(), train_pixels.std().item()
train_x, train_y = (train_pixels - MEAN) / STD, train_raw.targets[subset]
val_x = (test_raw.data[:VAL_IMAGES].float().div(255).flatten(1) - MEAN) / STD
val_y = test_raw.targets[:VAL_IMAGES]
val_loader = DataLoader(TensorDataset(val_x, val_y), batch_size=1000)
print(f"{len(train_x):,} training and {len(val_x):,} validation images, {train_x.shape[1]} pixels each; "
      f"mean {MEAN:.3f}, std {STD:.3f}")


def make_mlp(seed=SEED):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(784, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 10)).to(device)


# %%
small_loader = DataLoader(TensorDataset(train_x[:PLATEAU_TRAIN_IMAGES], train_y[:PLATEAU_TRAIN_IMAGES]),
                          batch_size=50, shuffle=True, generator=torch.Generator().manual_seed(SEED))
model = make_mlp()
optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
plateau = ReduceLROnPlateau(optimizer, mode="min", factor=0.3, patience=PLATEAU_PATIENCE)
plateau_lrs, plateau_val_losses = [], []
for epoch in range(PLATEAU_EPOCHS):
    plateau_lrs.append(plateau.get_last_lr()[0])  # the lr this epoch trains with
    train_one_epoch(model, small_loader, optimizer, device=device)
    val_loss, val_acc = evaluate(model, val_loader, device=device)
    plateau_val_losses.append(val_loss)
    plateau.step(val_loss)  # after validation: it needs the metric
    new_lr = plateau.get_last_lr()[0]
    note = f"  -> lr reduced to {new_lr:.3g}" if new_lr < plateau_lrs[-1] else ""
    print(f"epoch {epoch:2d}  lr {plateau_lrs[-1]:.3g}  val loss {val_loss:.4f}  best {plateau.best:.4f}  "
          f"bad epochs {plateau.num_bad_epochs}{note}")
reductions = sum(b < a for a, b in zip(plateau_lrs, plateau_lrs[1:] + [plateau.get_last_lr()[0]]))
_ = report.record("ReduceLROnPlateau reductions", reductions, "")

# %%
assert reductions >= MIN_PLATEAU_REDUCTIONS, f"ReduceLROnPlateau reduced the lr {reductions} times"
assert all(b in (a, a * 0.3) or math.isclose(b, a * 0.3) for a, b in zip(plateau_lrs, plateau_lrs[1:])), (
    "each epoch's lr should be the previous one, or that times factor"
)

# %% [markdown]
# Notice the line that reports a change: that is our own `if`, comparing
# `get_last_lr()` before and after `step()`. Older code passes
# `verbose=True` to get such a message from the scheduler; that argument no
# longer exists (see *Pitfalls*).
#
# ## Every schedule in one figure

# %%
fig, axes = plt.subplots(2, 3, figsize=(9, 4.8), sharey=False)
for ax, (name, lrs) in zip(axes.flat, traces.items()):
    ax.plot(range(TOTAL), lrs, color="C0", label="SequentialLR" if "SequentialLR" in name else name)
    ax.set_title(name, fontsize=9)
    ax.set_xlabel("optimizer step", fontsize=8)
    ax.set_ylabel("lr", fontsize=8)
ax = axes.flat[4]  # warmup + cosine: the two LambdaLR versions on top
ax.plot(range(TOTAL), lambda_trace, "--", color="C1", label="LambdaLR, same lambda")
ax.plot(range(TOTAL), from_zero, ":", color="C2", label="LambdaLR from factor 0")
ax.set_title("warmup + cosine", fontsize=9)
ax.legend(fontsize=6)
ax = axes.flat[5]
epochs_axis = range(PLATEAU_EPOCHS)
ax.step(epochs_axis, plateau_lrs, where="post", color="C0", label="lr")
ax.set(title="ReduceLROnPlateau (real training)", xlabel="epoch", ylabel="lr")
ax.title.set_fontsize(9)
ax.xaxis.label.set_fontsize(8)
ax.yaxis.label.set_fontsize(8)
twin = ax.twinx()
twin.plot(epochs_axis, plateau_val_losses, "o-", color="C1", markersize=3, label="val loss")
twin.set_ylabel("validation loss", fontsize=8, color="C1")
for a in list(axes.flat) + [twin]:
    a.tick_params(labelsize=7)
    a.grid(alpha=0.3)
fig.tight_layout()
plt.show()
into_cycle, cycle_length = restarts(TOTAL - 1, T_0)
full_cycles = [T_0 * 2**i for i in range(3)]
print(f"CosineAnnealingWarmRestarts over {TOTAL} steps: cycles of {full_cycles} steps add up to {sum(full_cycles)}; "
      f"the last step is step {into_cycle} of a cycle of {cycle_length}, "
      f"at lr {traces['CosineAnnealingWarmRestarts'][-1]:.4g}")
assert traces["CosineAnnealingWarmRestarts"][-1] > 0.9 * BASE_LR, "the warm-restart run should end just after a restart"
assert sum(full_cycles) < TOTAL, "the first three cycles should end before the run does"

# %% [markdown]
# The five clock-driven schedules share a shape language: start high (or
# ramp up to high), spend the middle there, end low. `StepLR` does it in
# jumps, the cosine smoothly; warm restarts repeat the descent, which gives
# several "end of training" snapshots in one run, but only if training stops
# at the end of a cycle: here the first three cycles (printed above) end
# a few steps before the run does, so the last steps of the run belong to a
# new cycle and use nearly `η₀` (choose the total length as `T_0 · (1 + T_mult + T_mult² + …)`).
# OneCycle and warmup + cosine add a ramp at the start, where the weights
# are random and large steps are least trustworthy. `ReduceLROnPlateau` cut the rate only after
# two epochs in a row without a new best validation loss (orange); the later
# cuts came while the loss stayed somewhat above its best, at times still
# edging down, but never below it.
#
# ## Per-step or per-epoch stepping
#
# A schedule counts `scheduler.step()` calls, so its length parameters
# (`T_max`, `step_size`, `total_steps`, milestones) are in **whatever unit you
# step it in**. Stepping once per epoch with `T_max=epochs` is fine; the rate
# is then constant within an epoch, a staircase. Stepping after every batch
# with `T_max=epochs * steps_per_epoch` draws the same curve smoothly. The
# trouble starts when the two units are mixed:
#
# - a per-step schedule (`total_steps=epochs * steps_per_epoch`) stepped
#   **once per epoch** has only advanced `epochs` of its steps when training
#   ends. OneCycle is then still in its warmup: the run never sees the high
#   rate, nor the final anneal;
# - the reverse, `T_max=epochs` stepped after every batch, runs through the
#   cosine many times: `CosineAnnealingLR` keeps following the cosine wave
#   beyond `T_max`, back up to `η₀`, with no error.
#
# We record the rate that each batch of a `DEMO_EPOCHS`-epoch run would use:


# %%
def per_batch_lrs(make_scheduler, step_every_batch, epochs=DEMO_EPOCHS, steps_per_epoch=DEMO_STEPS_PER_EPOCH):
    """The lr of every batch when the scheduler steps after each batch, or once at the end of each epoch."""
    optimizer = dummy_optimizer()
    scheduler = make_scheduler(optimizer)
    lrs = []
    for _epoch in range(epochs):
        for _batch in range(steps_per_epoch):
            lrs.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            if step_every_batch:
                scheduler.step()
        if not step_every_batch:
            scheduler.step()
    return lrs


cosine_per_step = per_batch_lrs(lambda opt: CosineAnnealingLR(opt, T_max=TOTAL), step_every_batch=True)
cosine_per_epoch = per_batch_lrs(lambda opt: CosineAnnealingLR(opt, T_max=DEMO_EPOCHS), step_every_batch=False)
cosine_mixed = per_batch_lrs(lambda opt: CosineAnnealingLR(opt, T_max=DEMO_EPOCHS), step_every_batch=True)
onecycle_per_step = per_batch_lrs(lambda opt: OneCycleLR(opt, max_lr=BASE_LR, total_steps=TOTAL), True)
onecycle_per_epoch = per_batch_lrs(lambda opt: OneCycleLR(opt, max_lr=BASE_LR, total_steps=TOTAL), False)

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3))
ax1.plot(cosine_per_step, label="T_max=steps, per step")
ax1.plot(cosine_per_epoch, label="T_max=epochs, per epoch")
ax1.plot(cosine_mixed, alpha=0.6, label="T_max=epochs, per step (bug)")
ax1.set(title="CosineAnnealingLR", xlabel="batch", ylabel="lr")
ax2.plot(onecycle_per_step, label="total_steps=steps, per step")
ax2.plot(onecycle_per_epoch, label="total_steps=steps, per epoch (bug)")
ax2.set(title="OneCycleLR", xlabel="batch", ylabel="lr")
for ax in (ax1, ax2):
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
fig.tight_layout()
plt.show()
print(f"OneCycle stepped per epoch: highest lr {max(onecycle_per_epoch):.4f} of max_lr {BASE_LR}, "
      f"last batch {onecycle_per_epoch[-1]:.4f}")
print(f"cosine with T_max in epochs, stepped per batch: back at the base lr "
      f"{sum(math.isclose(lr, BASE_LR) for lr in cosine_mixed)} times")

# %%
epoch_starts = range(0, TOTAL, DEMO_STEPS_PER_EPOCH)
assert all(math.isclose(cosine_per_epoch[b], cosine_per_step[b], abs_tol=1e-12) for b in epoch_starts), (
    "per-epoch and per-step cosine should agree at the start of every epoch"
)
assert all(len(set(cosine_per_epoch[b:b + DEMO_STEPS_PER_EPOCH])) == 1 for b in epoch_starts), "a staircase"
assert max(onecycle_per_epoch) < 0.2 * BASE_LR, "stepped per epoch, OneCycle should never get near max_lr"
assert onecycle_per_epoch[-1] > onecycle_per_epoch[0], "...and it should still be rising when training ends"

# %% [markdown]
# Both curves on the left agree at the start of every epoch: per-epoch
# stepping is a coarser version of the same schedule, which is fine for long
# runs with many epochs. Schedules with a short warmup or a one-off shape
# (OneCycle, warmup + cosine) are usually stepped per batch, and then every
# length must be counted in batches: **optimizer steps**, to be exact, which
# is fewer than batches with gradient accumulation (Exercise 2).
#
# ## `optimizer.step()` first, then `scheduler.step()`
#
# Before PyTorch 1.1 the scheduler was stepped at the *start* of an epoch.
# Since 1.1 the rule is: `optimizer.step()` first, `scheduler.step()` after
# it. The scheduler sets the rate for step 0 when it is created, so if you
# step it before the optimizer has used that rate, the first value of the
# schedule is never used. PyTorch watches for this: creating a scheduler
# wraps `optimizer.step` so it can tell whether it ran, and the first
# `scheduler.step()` warns if it did not. Here is a five-step warmup, in both
# orders, recording the rate each `optimizer.step()` really uses:


# %%
def used_lrs(scheduler_first, steps=6):
    """The lr of each optimizer step for a LinearLR warmup, with the two calls in either order."""
    optimizer = dummy_optimizer()
    scheduler = LinearLR(optimizer, start_factor=0.1, total_iters=5)
    lrs = []
    for _ in range(steps):
        if scheduler_first:
            scheduler.step()  # wrong place
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        if not scheduler_first:
            scheduler.step()  # right place
    return lrs


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    right_order = used_lrs(scheduler_first=False)
print(f"optimizer.step(), then scheduler.step(): {len(caught)} warnings; lrs used {[round(x, 4) for x in right_order]}")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    wrong_order = used_lrs(scheduler_first=True)
print(f"scheduler.step(), then optimizer.step(): {len(caught)} warning; lrs used {[round(x, 4) for x in wrong_order]}")
for w in caught:
    print(f"\n{w.category.__name__}:")
    print(textwrap.fill(str(w.message), 100))

# %%
assert not [w for w in caught if "before `optimizer.step()`" not in str(w.message)], "only the order warning"
assert any(issubclass(w.category, UserWarning) and "before `optimizer.step()`" in str(w.message) for w in caught), (
    "PyTorch should warn when scheduler.step() comes first"
)
assert wrong_order[:-1] == right_order[1:], "the wrong order uses the schedule shifted by one step"
assert right_order[0] not in wrong_order, "the first value of the schedule is skipped"

# %% [markdown]
# In the wrong order the first rate, `0.1 · η₀ = 0.01`, is never used: the
# whole schedule is shifted one step early, and the warning appears once, at
# the first `scheduler.step()`. With per-epoch stepping that is a whole
# epoch lost. The fix is the order in every loop of this course:
#
# ```python
# for x, y in loader:
#     loss = loss_fn(model(x), y)
#     optimizer.zero_grad()
#     loss.backward()
#     optimizer.step()
#     scheduler.step()     # per-step schedule: here
# # scheduler.step()       # per-epoch schedule: here instead, after the epoch
# ```
#
# You can also see this warning when the order is right: with mixed
# precision, `torch.amp.GradScaler(device)` (chapter 15) skips
# `optimizer.step()` when the first batch's gradients overflow in float16,
# so the scheduler is stepped before any optimizer step happened. There it
# is harmless.
#
# ## More than one group, chaining, and saving
#
# ### `get_last_lr()` with several parameter groups
#
# With several parameter groups (chapter 10: for example a smaller rate for
# a pretrained backbone than for a new head), the scheduler scales every
# group's own base lr by the same schedule, and `get_last_lr()` has one entry
# per group:

# %%
# NBVAL_CHECK_OUTPUT
backbone, head = nn.Linear(4, 4), nn.Linear(4, 2)
optimizer = torch.optim.SGD([{"params": backbone.parameters(), "lr": 0.01},
                             {"params": head.parameters(), "lr": 0.1}], momentum=0.9)
scheduler = CosineAnnealingLR(optimizer, T_max=4)
for step in range(5):
    print(f"step {step}: get_last_lr() = {[round(lr, 5) for lr in scheduler.get_last_lr()]}")
    optimizer.step()
    scheduler.step()

# %% [markdown]
# ### Two schedules at once: `ChainedScheduler`
#
# `SequentialLR` runs schedules one after another. `ChainedScheduler` runs
# them **at the same time**: each `step()` steps all of them, and their
# effects multiply, because each scheduler updates the current `lr` with its
# own factor. Warmup combined with exponential decay from the first step:

# %%
optimizer = dummy_optimizer()
warm = LinearLR(optimizer, start_factor=0.25, total_iters=4)
decay = ExponentialLR(optimizer, gamma=0.9)
chained = ChainedScheduler([warm, decay], optimizer=optimizer)
chained_lrs = []
for _ in range(8):
    chained_lrs.append(chained.get_last_lr()[0])
    optimizer.step()
    chained.step()
expected = [BASE_LR * (0.25 + 0.75 * min(t, 4) / 4) * 0.9**t for t in range(8)]
print("chained:                       ", [round(x, 5) for x in chained_lrs])
print("linear factor x 0.9**t formula:", [round(x, 5) for x in expected])
assert all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(chained_lrs, expected)), "the factors should multiply"

# %% [markdown]
# Creating two schedulers on one optimizer and calling both `step()`s does
# the same thing; `ChainedScheduler` packs them into one object, with one
# `state_dict`. Only schedulers that compute the new rate from the current
# one combine like this. `ReduceLROnPlateau` fits neither wrapper: it needs
# the metric in `step(metric)`, so `SequentialLR` and `ChainedScheduler`
# both refuse it with a `ValueError` (pitfall 4 shows it).
#
# ### Saving a scheduler with the optimizer
#
# A scheduler has state: the step count, and for some of them more (the
# warm-restart cycle, `ReduceLROnPlateau`'s best value and counters). To
# resume a run, save `scheduler.state_dict()` next to the model's and the
# optimizer's, and load all of them into objects **built the same way as at
# the start** (chapter 14 does full checkpoints). We stop a warmup + cosine
# run halfway, save to an in-memory file, resume in fresh objects, and
# compare with a run that never stopped:


# %%
def build(lr=BASE_LR):
    """A model, optimizer and warmup + cosine scheduler, as at the start of a run."""
    torch.manual_seed(SEED)
    net = nn.Linear(4, 1)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    return net, opt, warmup_cosine(opt)


def run_steps(net, opt, sched, steps):
    lrs = []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        loss = net(torch.ones(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return lrs


half = TOTAL // 2
uninterrupted = run_steps(*build(), TOTAL)

net, opt, sched = build()
first_half = run_steps(net, opt, sched, half)
buffer = io.BytesIO()
torch.save({"model": net.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict()}, buffer)
print("scheduler.state_dict() keys:", sorted(sched.state_dict()))

buffer.seek(0)
checkpoint = torch.load(buffer, weights_only=True)
net2, opt2, sched2 = build()  # fresh objects, built exactly as at the start
net2.load_state_dict(checkpoint["model"])
opt2.load_state_dict(checkpoint["optimizer"])
sched2.load_state_dict(checkpoint["scheduler"])
resumed = first_half + run_steps(net2, opt2, sched2, TOTAL - half)

net3, opt3, sched3 = build()  # the mistake: the scheduler's state is not restored
net3.load_state_dict(checkpoint["model"])
opt3.load_state_dict(checkpoint["optimizer"])
forgot = first_half + run_steps(net3, opt3, sched3, TOTAL - half)
print(f"resumed with the scheduler state:    identical lrs to the uninterrupted run: {resumed == uninterrupted}")
print(f"resumed without the scheduler state: lr climbs to {max(forgot[half:]):.3g} ({max(forgot[half:]) / BASE_LR:.1f}x "
      f"the peak), last step {forgot[-1]:.3g} instead of {uninterrupted[-1]:.3g}")

fig, ax = plt.subplots(figsize=(9, 2.6))
ax.plot(uninterrupted, label="uninterrupted", linewidth=3, alpha=0.5)
ax.plot(resumed, "--", label="resumed with scheduler state")
ax.plot(forgot, ":", label="resumed without scheduler state")
ax.axvline(half, color="grey", linewidth=0.8)
ax.set(xlabel="optimizer step", ylabel="lr", title="saving and resuming warmup + cosine")
ax.legend(fontsize=7)
ax.grid(alpha=0.3)
plt.show()

# %%
assert resumed == uninterrupted, "a resumed run should use exactly the same lrs"
assert max(forgot[half:]) > 2 * BASE_LR, "without its state, the warmup should scale the restored lr far up"
assert forgot[-1] > 0.1 * BASE_LR > 100 * uninterrupted[-1], "...and the run should end far from the annealed lr"
assert forgot[-1] > 1000 * uninterrupted[-1], "...thousands of times above the annealed lr"

# %% [markdown]
# Without its state, the new scheduler believes it is at step 0, while the
# optimizer's `lr` is the restored mid-run value. Most schedulers compute the
# next rate from the *current* one (`LinearLR` multiplies it by its warmup
# ratios, whose product over the warmup is `1 / start_factor`), so the rate climbs to
# almost ten times the restored value, far above the peak, with no error. Then the
# cosine starts over from the base lr and the run ends at a rate thousands of
# times too high. `torch.load(..., weights_only=True)` (chapter 07)
# accepts a scheduler's `state_dict`, since it holds only numbers, lists and
# dicts. Keep the order of the constructor calls as at the start: creating a
# scheduler writes into the optimizer's `lr`, so load the optimizer's and
# scheduler's states after both objects exist, as above.
#
# ## A real comparison on Fashion-MNIST
#
# Does a schedule help? We train the same MLP on `TRAIN_IMAGES`
# Fashion-MNIST images with SGD (momentum 0.9) and the same peak rate `LR`,
# under four schedules, all stepped after every batch:
#
# - **constant**: `LR` all the way (no scheduler);
# - **cosine**: `CosineAnnealingLR(T_max=...)` from `LR` down to 0, no warmup;
# - **warmup + cosine**: `SequentialLR` of a linear warmup over the first
#   `WARMUP_FRACTION` of the steps, from `0.1 · LR`, then the cosine;
# - **OneCycle**: `OneCycleLR(max_lr=LR, total_steps=...)` with its
#   defaults. It differs from warmup + cosine in more than one way: a longer
#   warmup (30 % of the steps) from `LR / 25`, a final rate of `LR / 25 / 1e4`
#   instead of 0, and, because `cycle_momentum=True` by default, it also
#   overrides SGD's momentum of 0.9, moving it from 0.95 down to 0.85 while
#   the rate rises and back up while it falls (printed below).
#
# A constant rate equal to the schedules' peak is an easy opponent: `LR`
# is a good peak but not necessarily a good rate to keep to the end. So we
# also run the constant rate at `LR / 3` and `LR / 10` (`CONSTANT_DIVISORS`)
# and compare the schedules with the **best** of the three constant rates
# as well. Picking that best one on the same validation images favours the
# constant rate slightly, which makes the comparison stricter, not looser.
#
# One run says little: a different initialisation or batch order moves the
# final accuracy by about as much as the schedules differ from one another.
# So each schedule
# runs with `SEEDS` seeds. A seed fixes the initial weights and the batch
# order, and for a given seed all four schedules start from the same
# weights and see the same batches, so the differences *within* a seed are
# paired comparisons. We report the mean ± the sample standard deviation
# over the seeds. The training loop is the five-step loop of chapter 04 plus
# one line, the scheduler step after the optimizer step. In the last epoch
# it also records how far each optimizer step moves the weights (the norm of
# the change of all parameters), to see how much they still move at the end.

# %%
train_loader = DataLoader(TensorDataset(train_x, train_y), batch_size=BATCH_SIZE, shuffle=True)
steps_per_epoch = len(train_loader)
comparison_steps = EPOCHS * steps_per_epoch  # optimizer steps of each run (and scheduler steps)
seeds = [SEED + i for i in range(SEEDS)]
print(f"{steps_per_epoch} batches per epoch x {EPOCHS} epochs = {comparison_steps} optimizer steps; seeds {seeds}")

schedules = {
    "constant": lambda opt: None,
    "cosine": lambda opt: CosineAnnealingLR(opt, T_max=comparison_steps, eta_min=0.0),
    "warmup + cosine": lambda opt: warmup_cosine(opt, warmup=max(1, round(WARMUP_FRACTION * comparison_steps)),
                                                 total=comparison_steps),
    "OneCycle": lambda opt: OneCycleLR(opt, max_lr=LR, total_steps=comparison_steps),
}
constant_rates = {"constant": LR} | {f"constant LR/{d}": LR / d for d in CONSTANT_DIVISORS}
probe = dummy_optimizer(lr=LR, momentum=0.9)
probe_scheduler = OneCycleLR(probe, max_lr=LR, total_steps=comparison_steps)
onecycle_momenta = []
for _ in range(comparison_steps):
    onecycle_momenta.append(probe.param_groups[0]["momentum"])
    probe.step()
    probe_scheduler.step()
print(f"OneCycleLR on SGD(momentum=0.9): momentum at step 0 {onecycle_momenta[0]:.3f}, lowest "
      f"{min(onecycle_momenta):.3f} (step {onecycle_momenta.index(min(onecycle_momenta))}), "
      f"last step {onecycle_momenta[-1]:.3f}")
assert math.isclose(onecycle_momenta[0], 0.95) and 0.85 - 1e-9 <= min(onecycle_momenta) < 0.9, (
    "OneCycleLR should override SGD's momentum of 0.9, starting at 0.95 and cycling down towards 0.85"
)


def flat_params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def train_run(make_scheduler, seed, lr=LR):
    model = make_mlp(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    scheduler = make_scheduler(optimizer)
    order = torch.Generator().manual_seed(seed)  # the same batches for every schedule of this seed
    lrs, val_acc, val_loss, last_moves = [], [], [], []
    for epoch in range(EPOCHS):
        model.train()
        for x, y in DataLoader(train_loader.dataset, batch_size=BATCH_SIZE, shuffle=True, generator=order):
            x, y = x.to(device), y.to(device)
            lrs.append(optimizer.param_groups[0]["lr"])
            before = flat_params(model) if epoch == EPOCHS - 1 else None
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if scheduler is not None:
                scheduler.step()  # per step: after every optimizer step
            if before is not None:
                last_moves.append((flat_params(model) - before).norm().item())
        loss_v, acc_v = evaluate(model, val_loader, device=device)
        val_loss.append(loss_v)
        val_acc.append(acc_v)
    return {"lrs": lrs, "val_acc": val_acc, "val_loss": val_loss, "last_move": statistics.fmean(last_moves)}


def mean_std(values):
    """Mean and sample standard deviation (0 for a single value)."""
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


runs = {name: [train_run(make, seed) for seed in seeds] for name, make in schedules.items()}
for name, rate in constant_rates.items():
    if name not in runs:  # the smaller constant rates: no scheduler, same seeds
        runs[name] = [train_run(lambda opt: None, seed, lr=rate) for seed in seeds]
final_acc = {name: [run["val_acc"][-1] for run in rs] for name, rs in runs.items()}
final_loss = {name: [run["val_loss"][-1] for run in rs] for name, rs in runs.items()}
best_constant = max(constant_rates, key=lambda n: statistics.fmean(final_acc[n]))  # by mean final val accuracy
print(f"final validation accuracy and loss over {SEEDS} seeds (mean ± std, [min, max]):")
for name in runs:
    (acc_m, acc_s), (loss_m, loss_s) = mean_std(final_acc[name]), mean_std(final_loss[name])
    print(f"  {name:16s} accuracy {acc_m:.1%} ± {acc_s:.1%} [{min(final_acc[name]):.1%}, {max(final_acc[name]):.1%}]"
          f"   loss {loss_m:.3f} ± {loss_s:.3f} [{min(final_loss[name]):.3f}, {max(final_loss[name]):.3f}]")
    _ = report.record(f"{name} final val accuracy (mean of {SEEDS} seeds)", 100 * acc_m, "%", digits=1)
    _ = report.record(f"{name} final val accuracy (std over seeds)", 100 * acc_s, "points", digits=1)
first_epoch_acc = {name: statistics.fmean(run["val_acc"][0] for run in rs) for name, rs in runs.items()}
last_move = {name: statistics.fmean(run["last_move"] for run in rs) for name, rs in runs.items()}
drops = {name: sum(b < a for run in rs for a, b in zip(run["val_acc"], run["val_acc"][1:])) for name, rs in runs.items()}
print("after epoch 1, mean accuracy: " + ", ".join(f"{n} {a:.1%}" for n, a in first_epoch_acc.items()))
print("after epoch 1, the constant lr's mean accuracy minus that of " + ", ".join(
    f"{n}: {first_epoch_acc['constant'] - first_epoch_acc[n]:+.1%}" for n in ("warmup + cosine", "OneCycle")))
print("last epoch, mean length of one optimizer step (norm of the weight change): "
      + ", ".join(f"{n} {m:.4f}" for n, m in last_move.items()))
print(f"epoch-to-epoch drops in val accuracy, out of {SEEDS * (EPOCHS - 1)}: "
      + ", ".join(f"{n} {d}" for n, d in drops.items()))
p_acc = statistics.fmean(final_acc["constant"])
binomial_se = math.sqrt(p_acc * (1 - p_acc) / len(val_y))
print(f"binomial standard error of one accuracy near {p_acc:.0%} on {len(val_y)} validation images: {binomial_se:.1%}")
print(f"best constant rate (mean final val accuracy): {best_constant}, lr {constant_rates[best_constant]:.3g}")
seed_spread = statistics.fmean(mean_std(final_acc[n])[1] for n in runs)
schedule_means = [statistics.fmean(final_acc[n]) for n in ("cosine", "warmup + cosine", "OneCycle")]
print(f"spread between seeds (std of final accuracy, mean over the {len(runs)} arms): {seed_spread:.1%}; the three "
      f"schedules' means differ by up to {max(schedule_means) - min(schedule_means):.1%}; their smallest lead over "
      f"the constant lr: {min(schedule_means) - statistics.fmean(final_acc['constant']):+.1%}, over the best constant "
      f"rate: {min(schedule_means) - statistics.fmean(final_acc[best_constant]):+.1%}")

# %%
fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(9, 3))
epochs_axis = range(1, EPOCHS + 1)
for i, (name, rs) in enumerate(runs.items()):
    ax1.plot(rs[0]["lrs"], label=name)
    for ax, key, scale in ((ax2, "val_loss", 1), (ax3, "val_acc", 100)):
        per_epoch = [mean_std([scale * run[key][e] for run in rs]) for e in range(EPOCHS)]
        ax.errorbar([e + 0.05 * (i - (len(runs) - 1) / 2) for e in epochs_axis], [m for m, _ in per_epoch],
                    yerr=[s for _, s in per_epoch], fmt="o-", capsize=3, markersize=3, label=name)
ax1.set(xlabel="optimizer step", ylabel="lr", title="learning rate")
ax2.set(xlabel="epoch", ylabel="validation loss", title=f"val loss, mean ± std of {SEEDS}")
ax3.set(xlabel="epoch", ylabel="validation accuracy (%)", title=f"val accuracy, mean ± std of {SEEDS}")
for ax in (ax1, ax2, ax3):
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    ax.title.set_fontsize(9)
fig.tight_layout()
plt.show()

# %% [markdown]
# The error bars are the spread between seeds; the cell before the figure
# prints it next to the differences among the three schedules and their
# lead over the constant rates. Because the seeds are paired, the cleaner
# test is per seed: did the schedule beat the constant rate *with the same
# initial weights and batches*? Below are the per-seed differences in final
# validation loss (as a ratio) and accuracy, for each schedule against the
# constant rate at `LR` and against the best constant rate, and for
# OneCycle against warmup + cosine, with the standard error of each mean
# difference (std / √seeds):

# %%
def paired(a, b):
    """Per-seed loss ratios a/b and accuracy gains a - b of two schedules' final validation results."""
    ratios = [la / lb for la, lb in zip(final_loss[a], final_loss[b])]
    gains = [xa - xb for xa, xb in zip(final_acc[a], final_acc[b])]
    return ratios, gains


def standard_error(values):
    return mean_std(values)[1] / math.sqrt(len(values))


schedule_names = ("cosine", "warmup + cosine", "OneCycle")
pairs = [(n, "constant") for n in schedule_names] + [("OneCycle", "warmup + cosine")]
if best_constant != "constant":
    pairs += [(n, best_constant) for n in schedule_names]
for a, b in pairs:
    ratios, gains = paired(a, b)
    (ratio_m, ratio_s), (gain_m, gain_s) = mean_std(ratios), mean_std(gains)
    print(f"{a} vs {b}:\n  loss ratio per seed {[round(r, 3) for r in ratios]}, mean {ratio_m:.3f} ± {ratio_s:.3f}"
          f" (standard error {standard_error(ratios):.3f})\n"
          f"  accuracy gain per seed {[round(100 * g, 1) for g in gains]} points, "
          f"mean {100 * gain_m:+.1f} ± {100 * gain_s:.1f} (standard error {100 * standard_error(gains):.1f}), "
          f"range {100 * min(gains):+.1f} to {100 * max(gains):+.1f}")
for name in ("warmup + cosine", "OneCycle"):
    print(f"{name}: worst seed {min(final_acc[name]):.1%} against the constant lr's best seed "
          f"{max(final_acc['constant']):.1%}")
gain_wc = paired("warmup + cosine", "constant")[1]
gain_cos = paired("cosine", "constant")[1]
cosine_gap = [c - w for c, w in zip(gain_cos, gain_wc)]  # per seed: cosine's accuracy - warmup + cosine's
cosine_share = statistics.fmean(gain_cos) / statistics.fmean(gain_wc) if statistics.fmean(gain_wc) else math.nan
gap_ratios, gap_gains = paired("OneCycle", "warmup + cosine")
gain_loss = min(1 - statistics.fmean(paired(n, "constant")[0]) for n in ("warmup + cosine", "OneCycle"))
gain_acc = min(statistics.fmean(paired(n, "constant")[1]) for n in ("warmup + cosine", "OneCycle"))
gap_loss = statistics.fmean(gap_ratios) - 1
wc_ahead = sum(r > 1 for r in gap_ratios) / len(gap_ratios)


def sign_test_p(wins, n):
    """Two-sided sign test: the chance of a split at least this lopsided if each seed were a fair coin."""
    k = max(wins, n - wins)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k, n + 1)) / 2**n)


def t_value(values):
    """Paired t statistic: mean / standard error (inf-free: 0 when there is no spread and no mean)."""
    se = standard_error(values)
    return statistics.fmean(values) / se if se > 0 else (0.0 if statistics.fmean(values) == 0 else math.inf)


wc_wins = sum(r > 1 for r in gap_ratios)
print(f"plain cosine's mean gain is {cosine_share:.2f} of warmup + cosine's; cosine - warmup + cosine per seed "
      f"{[round(100 * g, 1) for g in cosine_gap]} points, mean {100 * statistics.fmean(cosine_gap):+.1f} "
      f"(standard error {100 * standard_error(cosine_gap):.1f}, t = {t_value(cosine_gap):.1f})")
print(f"OneCycle's val loss is {gap_loss:+.1%} above warmup + cosine's on average (paired t = "
      f"{t_value([r - 1 for r in gap_ratios]):.1f} with {SEEDS - 1} degrees of freedom); warmup + cosine lower in "
      f"{wc_wins} of {SEEDS} seeds (two-sided sign test p = {sign_test_p(wc_wins, SEEDS):.3f}; "
      f"with {SEEDS} seeds it cannot go below {sign_test_p(SEEDS, SEEDS):.3f}); the smaller of the two schedules' "
      f"gains over the constant lr: {gain_loss:.1%} of its loss, {100 * gain_acc:.1f} accuracy points")
gain_peak = {n: statistics.fmean(paired(n, "constant")[1]) for n in schedule_names}
for name in schedule_names:
    _, best_gains = paired(name, best_constant)
    print(f"{name} vs the best constant rate ({best_constant}): ahead in {sum(g > 0 for g in best_gains)} of "
          f"{SEEDS} seeds, mean {100 * statistics.fmean(best_gains):+.1f} points (t = {t_value(best_gains):.1f}, "
          f"{SEEDS - 1} degrees of freedom), against {100 * gain_peak[name]:+.1f} over the constant lr at LR")
_ = report.record("warmup + cosine gain over the best constant lr (mean over seeds)",
                  100 * statistics.fmean(paired("warmup + cosine", best_constant)[1]), "points", digits=1)
_ = report.record("warmup + cosine gain over constant lr (mean over seeds)", 100 * statistics.fmean(gain_wc),
                  "points", digits=1)
_ = report.record("plain cosine gain as a share of warmup + cosine's", cosine_share, "", digits=2)
_ = report.record("OneCycle val loss above warmup + cosine's (mean over seeds)", 100 * gap_loss, "%", digits=1)

# %%
for name in ("warmup + cosine", "OneCycle"):
    ratios, gains = paired(name, "constant")
    assert max(ratios) <= MAX_LOSS_RATIO, (
        f"{name} ended with up to {max(ratios):.2f}x the constant lr's validation loss (same seed)"
    )
    assert min(gains) >= MIN_SCHEDULE_GAIN, (
        f"{name} ended {min(gains):+.1%} against the constant lr in one seed; expected >= {MIN_SCHEDULE_GAIN:+.1%}"
    )
    assert statistics.fmean(gains) >= MIN_GAIN_SE * standard_error(gains), (
        f"{name}'s mean gain {statistics.fmean(gains):+.2%} is under {MIN_GAIN_SE} standard errors "
        f"({standard_error(gains):.2%})"
    )
    separation = min(final_acc[name]) - max(final_acc["constant"])
    assert separation > MIN_SEPARATION, f"{name}'s worst seed is {separation:+.1%} from the constant lr's best"
    assert first_epoch_acc["constant"] >= first_epoch_acc[name] - MAX_FIRST_EPOCH_DEFICIT, (
        f"after epoch 1 the constant lr trails {name} by {first_epoch_acc[name] - first_epoch_acc['constant']:.1%}"
    )
    assert last_move["constant"] >= MIN_STEP_RATIO * last_move[name], (
        f"last-epoch step length: constant {last_move['constant']:.4f}, {name} {last_move[name]:.4f}"
    )
assert abs(statistics.fmean(cosine_gap)) <= MAX_COSINE_GAP_SE * standard_error(cosine_gap), (
    f"cosine - warmup + cosine = {statistics.fmean(cosine_gap):+.2%} per seed on average, more than "
    f"{MAX_COSINE_GAP_SE} standard errors ({standard_error(cosine_gap):.2%}): the warmup does matter here"
)
smaller_rate_gain = statistics.fmean(final_acc[best_constant]) - statistics.fmean(final_acc["constant"])
assert smaller_rate_gain >= MIN_SMALLER_RATE_GAIN, (
    f"the best constant rate ({best_constant}) is only {smaller_rate_gain:+.2%} above the constant LR on average"
)
best_gains_wc = paired("warmup + cosine", best_constant)[1]
assert min(best_gains_wc) > MIN_BEST_GAIN, (
    f"warmup + cosine ended {min(best_gains_wc):+.1%} against the best constant rate ({best_constant}) in one seed"
)
assert statistics.fmean(best_gains_wc) >= MIN_BEST_GAIN_SE * standard_error(best_gains_wc), (
    f"warmup + cosine's mean gain over {best_constant}, {statistics.fmean(best_gains_wc):+.2%}, is under "
    f"{MIN_BEST_GAIN_SE} standard errors ({standard_error(best_gains_wc):.2%})"
)
for name in schedule_names:
    mean_best_gain = statistics.fmean(paired(name, best_constant)[1])
    assert mean_best_gain > MIN_MEAN_BEST_GAIN, f"{name} is {mean_best_gain:+.2%} against {best_constant} on average"
assert wc_ahead >= MIN_AHEAD_FRACTION, f"warmup + cosine had the lower val loss in only {wc_ahead:.0%} of the seeds"
assert abs(gap_loss) <= MAX_GAP_FRACTION * abs(gain_loss), (
    f"OneCycle vs warmup + cosine: loss {gap_loss:+.1%}, not small next to the {gain_loss:.1%} gain"
)
assert abs(statistics.fmean(gap_gains)) <= MAX_GAP_FRACTION * abs(gain_acc), (
    f"OneCycle - warmup + cosine = {statistics.fmean(gap_gains):+.2%}, not small next to the {gain_acc:+.2%} gain"
)

# %% [markdown]
# With the same peak rate, both warmup + cosine and OneCycle ended ahead
# of the constant rate at `LR` **in every seed**, by at least
# `MIN_SCHEDULE_GAIN` in accuracy and with at most `MAX_LOSS_RATIO` times
# its validation loss. The mean paired gain is at least `MIN_GAIN_SE`
# standard errors, and even the worst seed of either schedule beat the best
# seed of that constant rate (the ranges above).
#
# That opponent is weak, though: `LR` held to the end is too large, and the
# best of the three constant rates (named in the output above) beat it by
# at least `MIN_SMALLER_RATE_GAIN` in mean accuracy. Against that best
# constant rate the schedules' gain shrinks, as the printed lines "vs the best constant rate" show.
# Warmup + cosine still beat it in every seed (by more than `MIN_BEST_GAIN`)
# with a mean paired gain of at least `MIN_BEST_GAIN_SE` standard errors;
# every schedule's mean gain over it is above `MIN_MEAN_BEST_GAIN`, but for
# plain cosine and OneCycle read the printed seed counts and t values before
# calling it more than a tendency. So a large part of the gain over the
# constant rate at `LR` is just a lower average rate; what remains is what
# the schedule's shape adds, on this small budget.
#
# The constant rate at `LR` is not badly off at the start: after the first
# epoch it was at most `MAX_FIRST_EPOCH_DEFICIT` behind warmup + cosine and
# OneCycle (the printed differences say by how much, and which way). The
# first epoch is 1/`EPOCHS` of the steps: OneCycle's warmup (30 % of the
# steps) had not ended by then, and warmup + cosine's (`WARMUP_FRACTION`)
# had ended only partway through the epoch. The difference at the end goes
# with the anneal: in the last epoch each optimizer step of the constant
# rate at `LR` still moved the weights at least `MIN_STEP_RATIO` times as
# far as a step of either schedule, whose rate is by then well below its
# peak and falling to its floor. That fits the usual explanation, that
# small final steps let the weights settle near a minimum instead of
# bouncing around it; the run measures the step lengths, not the
# mechanism. The step lengths of the smaller constant rates are printed
# with the others, for comparison. The epoch-to-epoch drops in
# accuracy counted above are too few to tell the schedules apart on that
# score.
#
# Where does the gain come from? The plain cosine, with no warmup and a
# fixed momentum of 0.9, ended within `MAX_COSINE_GAP_SE` standard errors
# of warmup + cosine (the paired difference, its standard error and the
# share of the gain are printed above). On this budget the warmup made no
# difference that four seeds can detect; the decay carries the gain.
# Warmup is usually motivated by larger rates, larger models and adaptive
# optimizers such as Adam (it is standard in transformer training), none of
# which this run tests.
#
# OneCycle against warmup + cosine: in this run warmup + cosine ended with
# the lower validation loss in every seed (`MIN_AHEAD_FRACTION` is set to
# what we saw), so it was **consistently but slightly better**: a few per
# cent of the loss, at most `MAX_GAP_FRACTION` of either schedule's gain
# over the constant rate at `LR`, and small next to the gain in accuracy
# too. How strong is "every seed"? The printed sign test gives its
# two-sided p, and with `SEEDS` = 4 even 4 of 4 cannot go below 0.125,
# which is not significant at the usual 5 %. The paired t (printed, with
# its degrees of freedom) is large, but with so few seeds it leans on the
# differences being roughly normal. The run cannot say which of OneCycle's
# differences (longer warmup from `LR / 25`, momentum cycling, a floor
# above 0) costs that bit, and a gap this small may not survive another
# setup. Keep in mind, too, that every run is scored on the same
# `VAL_IMAGES` validation images: a fresh set of that size would move each
# accuracy by about the binomial standard error printed above, which the
# paired differences largely cancel but the absolute numbers do not.
#
# ## Pitfalls
#
# ### 1. `ReduceLROnPlateau(verbose=True)`
#
# Many tutorials create schedulers with `verbose=True` so they print each
# change. The argument was deprecated in torch 2.2 and has since been
# removed from every scheduler; in torch 2.14 it is an ordinary unknown
# keyword argument:

# %%
# NBVAL_CHECK_OUTPUT
optimizer = dummy_optimizer()
try:
    ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=2, verbose=True)
except TypeError as err:
    print(f"{type(err).__name__}: {err}")
try:
    StepLR(optimizer, step_size=10, verbose=True)
except TypeError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# **Fix:** drop `verbose` and log the rate yourself: read
# `scheduler.get_last_lr()` (one value per parameter group) or
# `optimizer.param_groups[i]["lr"]` after `step()`, and print or log it
# when it changes, as the `ReduceLROnPlateau` run above does:

# %%
# NBVAL_CHECK_OUTPUT
optimizer = dummy_optimizer()
scheduler = ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=2)
for epoch, val_loss in enumerate([1.0, 0.8, 0.81, 0.82, 0.83, 0.7]):
    before = scheduler.get_last_lr()
    scheduler.step(val_loss)
    if scheduler.get_last_lr() != before:
        print(f"epoch {epoch}: val loss {val_loss}, lr {before[0]:.4g} -> {scheduler.get_last_lr()[0]:.4g}")
assert scheduler.get_last_lr() == [BASE_LR * 0.5] == [optimizer.param_groups[0]["lr"]]

# %% [markdown]
# ### 2. `ReduceLROnPlateau.step()` without the metric
#
# Swapping a `StepLR` for a `ReduceLROnPlateau` and keeping the bare
# `scheduler.step()` fails: this scheduler needs to be told the metric.

# %%
# NBVAL_CHECK_OUTPUT
try:
    scheduler.step()
except TypeError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# **Fix:** `scheduler.step(val_loss)` after validation, once per epoch
# (`mode="max"` for a metric that should grow, such as accuracy).
# `helpers.training.fit` does this when it is given a `ReduceLROnPlateau`.
#
# ### 3. Stepping OneCycle past `total_steps`
#
# `OneCycleLR` needs the exact number of steps up front. Count too few
# (here: forgetting the last, short batch of each epoch) and the run crashes
# in its last epoch, after all the time spent on the others:

# %%
# NBVAL_CHECK_OUTPUT
dataset_size = 1000
too_few = EPOCHS * (dataset_size // BATCH_SIZE)  # forgot the last, short batch of each epoch
optimizer = dummy_optimizer()
scheduler = OneCycleLR(optimizer, max_lr=BASE_LR, total_steps=too_few)
batches_per_epoch = math.ceil(dataset_size / BATCH_SIZE)
steps_taken = 0
try:
    for _epoch in range(EPOCHS):
        for _batch in range(batches_per_epoch):
            optimizer.step()
            scheduler.step()
            steps_taken += 1
except ValueError as err:
    print(f"after {steps_taken} of {EPOCHS * batches_per_epoch} steps: {type(err).__name__}: {err}")

# %% [markdown]
# Counting too many raises nothing, which is worse: the run ends before the
# final anneal, at a rate far above the intended one. **Fix:** compute
# `total_steps` from the real loader, `EPOCHS * len(loader)` (adjusted for
# gradient accumulation, Exercise 2), or pass `epochs=` and
# `steps_per_epoch=len(loader)` and let `OneCycleLR` multiply.
#
# ### 4. `ReduceLROnPlateau` inside `SequentialLR` or `ChainedScheduler`
#
# A tempting way to write "warm up, then reduce on plateau" is to put a
# `ReduceLROnPlateau` after a `LinearLR` in a `SequentialLR`. The wrappers
# call every scheduler's `step()` without arguments, which this one cannot
# take, so they refuse it when they are built:

# %%
# NBVAL_CHECK_OUTPUT
optimizer = dummy_optimizer()
for wrapper in (SequentialLR, ChainedScheduler):
    warm, plateau_scheduler = LinearLR(optimizer, total_iters=5), ReduceLROnPlateau(optimizer)
    try:
        if wrapper is SequentialLR:
            SequentialLR(optimizer, schedulers=[warm, plateau_scheduler], milestones=[5])
        else:
            ChainedScheduler([warm, plateau_scheduler], optimizer=optimizer)
    except ValueError as err:
        print(textwrap.fill(f"{type(err).__name__}: {err}", 110))

# %% [markdown]
# **Fix:** step them yourself: call the warmup's `step()` after each
# optimizer step while `scheduler.last_epoch < warmup_steps`, and from then
# on `plateau.step(val_loss)` after each validation.
#
# ## Exercises
#
# Each exercise has a stub for you to fill in, then a checker cell that
# prints **PASSED**, **NOT YET** with a hint, or **TODO** while the stub
# still raises `NotImplementedError`. If you are stuck,
# `solution("11.warmup_cosine_lr")` returns the reference solution.
#
# ### Exercise 1: warmup + cosine as a formula
#
# Write `warmup_cosine_lr(step, base_lr, warmup_steps, total_steps,
# start_factor, eta_min)`: the rate that optimizer step `step` (counted from
# 0) uses under
# `SequentialLR([LinearLR(start_factor, 1.0, total_iters=warmup_steps),
# CosineAnnealingLR(T_max=total_steps - warmup_steps, eta_min)],
# milestones=[warmup_steps])`, stepped after every optimizer step. The
# checker compares your values with the real schedulers at every step of
# several settings. A formula like this is what you need to log or plot a
# schedule without an optimizer, or to implement it in a framework that has
# no `SequentialLR`. When it passes, the cell compares it with the schedule
# drawn above.


# %%
def warmup_cosine_lr(step, base_lr, warmup_steps, total_steps, start_factor, eta_min):
    """The lr of optimizer step `step` (0-based) under linear warmup, then cosine (SequentialLR)."""
    raise NotImplementedError


# %%
result = check("11.warmup_cosine_lr", warmup_cosine_lr)
if result.passed:
    mine = [warmup_cosine_lr(t, BASE_LR, WARMUP, TOTAL, 0.1, 0.0) for t in range(TOTAL)]
    print(f"largest difference from the drawn schedule: {max(abs(a - b) for a, b in zip(mine, sequential)):.1e}")

# %% [markdown]
# ### Exercise 2: how many steps does OneCycle need?
#
# Write `total_steps(epochs, dataset_size, batch_size, drop_last,
# accumulation_steps)`: the number of optimizer steps, and so of
# `scheduler.step()` calls, that this loop makes, as a Python `int`:
#
# ```python
# loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=drop_last)
# for epoch in range(epochs):
#     for i, (x, y) in enumerate(loader):
#         (loss_fn(model(x), y) / accumulation_steps).backward()   # gradients add up
#         if (i + 1) % accumulation_steps == 0 or i + 1 == len(loader):
#             optimizer.step()
#             scheduler.step()
#             optimizer.zero_grad()
# ```
#
# Mind `drop_last` (is the last, short batch kept?) and the leftover group
# of micro-batches at the end of each epoch. The checker compares with a
# count over a real `DataLoader`. When it passes, the cell checks that your
# count makes a `OneCycleLR` finish exactly.


# %%
def total_steps(epochs, dataset_size, batch_size, drop_last, accumulation_steps):
    """The number of optimizer steps of the loop above, as a Python int (OneCycleLR refuses a float)."""
    raise NotImplementedError


# %%
result = check("11.total_steps", total_steps)
if result.passed:
    n = total_steps(3, 1000, 128, False, 4)  # 8 batches per epoch, groups of 4 -> 2 steps per epoch
    optimizer = dummy_optimizer()
    scheduler = OneCycleLR(optimizer, max_lr=BASE_LR, total_steps=n)
    for _ in range(n):
        last_lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        scheduler.step()
    print(f"OneCycleLR with total_steps={n}: ran {n} steps without an error; the last one used lr "
          f"{last_lr:.3g} = max_lr / 25 / 1e4 = {BASE_LR / 25e4:.3g}")

# %% [markdown]
# ## Summary
#
# - A scheduler writes `optimizer.param_groups[i]["lr"]` at every
#   `scheduler.step()`; read the current value with `get_last_lr()` or from
#   the param group. It counts its own `step()` calls, in whatever unit you
#   call it.
# - `StepLR`, `CosineAnnealingLR`, `CosineAnnealingWarmRestarts`,
#   `OneCycleLR` and warmup + cosine (`SequentialLR` of `LinearLR` and
#   `CosineAnnealingLR`) follow closed-form curves, checked here step by
#   step; at the milestone `SequentialLR` starts the cosine at the base lr.
#   `ReduceLROnPlateau` follows a metric: `step(val_loss)`.
# - Give every length in the unit you step in. A per-batch schedule stepped
#   once per epoch barely moves (OneCycle never leaves its warmup);
#   `T_max` in epochs stepped per batch oscillates.
# - `optimizer.step()` first, then `scheduler.step()`; the reverse order
#   warns and skips the first value of the schedule.
# - `verbose=` is gone from the schedulers (a `TypeError` in torch 2.14):
#   log `get_last_lr()` yourself.
# - Save `scheduler.state_dict()` with the model's and optimizer's; a
#   resumed run then uses exactly the same rates.
# - `LambdaLR(optimizer, lr_lambda)` writes any schedule as a factor of the
#   base lr per step; warmup + cosine that way matches `SequentialLR` to
#   float rounding. Its `state_dict` does not save a plain function.
# - On Fashion-MNIST, with the same peak rate, warmup + cosine and OneCycle
#   ended ahead of a constant rate at that peak in each of the seeds, beyond
#   the spread between seeds. Against the best of three constant rates the
#   gain is smaller, and warmup + cosine still beat it in every seed; a plain
#   cosine without warmup ended within the noise of warmup + cosine, and
#   warmup + cosine was ahead of OneCycle in every seed, but only slightly
#   (mean ± std in the report below).
# - `ReduceLROnPlateau` cannot go into `SequentialLR` or `ChainedScheduler`
#   (a `ValueError`); step it yourself with the metric.
#
# **Next:** chapter 12 turns to regularisation and normalisation: dropout,
# BatchNorm and its relatives, and weight decay.

# %%
print(f"notebook ran in {time.perf_counter() - notebook_start:.0f} s")
report.finish()
