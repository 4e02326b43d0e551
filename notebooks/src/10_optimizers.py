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
# # 10 · Optimizers
#
# Every training loop so far ended with `optimizer.step()`. This chapter opens
# that call. An optimizer in `torch.optim` takes the gradients that
# `backward()` left in each parameter's `.grad` and decides how far, and in
# which direction, to move the parameter. The choice matters: on the same
# problem, with the same gradients, plain SGD can crawl where momentum or Adam
# race, and two optimizers that look alike on paper (Adam with weight decay
# and AdamW) make different updates.
#
# **What you will learn**
# - the update rules of SGD, SGD with momentum, Nesterov momentum, Adam and
#   AdamW, in the exact form `torch.optim` uses;
# - how they move on a 2-D test function, drawn as paths over its contours;
# - why AdamW's *decoupled* weight decay is not Adam's `weight_decay` (L2),
#   derived by hand and checked against `torch.optim` to float precision;
# - parameter groups: a learning rate per group, and the usual "no weight
#   decay on biases and norm weights" split, read back from
#   `optimizer.param_groups`;
# - what an optimizer's `state_dict` holds and how to save and restore it so
#   that training continues exactly;
# - `zero_grad(set_to_none=True)` versus `set_to_none=False`, and the
#   parameters that move although they got no gradient;
# - the three implementations of every update (`for` loop, `foreach`,
#   `fused`) and the other switches in a group (`maximize`, `capturable`,
#   `differentiable`);
# - a short race of optimizers on real MNIST data, over several seeds, and
#   the errors people hit.
#
# **Prerequisites:** chapter 02 (autograd, `.grad`), chapter 04 (the
# five-step training loop) and chapter 05 (the MLP on MNIST).
#
# **Estimated time:** 45 minutes.

# %% tags=["parameters"]
SEED = 0
TRAJ_STEPS = 500  # optimizer steps on the 2-D test function
START = (-1.5, 2.0)  # where every path starts
SGD_LR = 1e-3  # learning rate of SGD, momentum and Nesterov on the test function
MOMENTUM = 0.9  # momentum coefficient (mu) for momentum and Nesterov
ADAM_LR = 0.1  # learning rate of Adam and AdamW on the test function
ADAMW_WEIGHT_DECAY = 1e-2  # AdamW's default weight decay
MNIST_STEPS = 300  # training steps of each optimizer in the MNIST race
BATCH_SIZE = 128
HIDDEN = 256  # width of the MLP's hidden layer in the race
MNIST_SGD_LR = 0.05  # learning rate of SGD and SGD with momentum in the race
MNIST_ADAM_LR = 1e-3  # learning rate of Adam and AdamW in the race
MNIST_MAX_LOSS = 0.6  # every optimizer's final training loss must end below this
RACE_SEEDS = 3  # seeds (initialisation and batch order) of the MNIST race; the spread is over these
MIN_GAP_CLOSED = 0.5  # SGD at lr x10 must close at least this share of the SGD-to-momentum gap in every seed
MOMENTUM_LEAD = 0.0  # momentum's worst seed must end at least this much below Adam's best seed (final loss)
SGD_MARGIN = 0.05  # plain SGD's best seed must end at least this far above every other optimizer's worst seed
MAX_ADAMW_GAP = 0.1  # |AdamW - Adam| final loss, as a share of the SGD - Adam gap, must stay below this
SMOOTH = 20  # steps in the moving average of the loss curves

# %% [markdown]
# ## Setup

# %%
import copy
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

import helpers.plotting  # noqa: F401  (the course's small-figure defaults)
from helpers.bench import measure, timing_table
from helpers.data import mnist
from helpers.device import pick_device, seed_everything
from helpers.exercises import check, solution  # noqa: F401  (solution: for when you are stuck)
from helpers.models import MLP
from helpers.paths import build_dir, rel
from helpers.report import ChapterReport

generator = seed_everything(SEED)
device = pick_device()
report = ChapterReport("10_optimizers")
notebook_start = time.perf_counter()
print(f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} CPU threads")

# %% [markdown]
# ## The update rules, as `torch.optim` writes them
#
# Write θ for a parameter, g for its gradient at the current step t
# (1, 2, ...), η for the learning rate (`lr`) and λ for `weight_decay`.
#
# | optimizer | one step |
# | --- | --- |
# | `SGD(lr)` | θ ← θ − η g |
# | `SGD(lr, momentum=μ)` | b ← μ b + g  (b = g at t = 1);  θ ← θ − η b |
# | `SGD(lr, momentum=μ, nesterov=True)` | b ← μ b + g;  θ ← θ − η (g + μ b) |
# | `Adam(lr, betas=(β₁, β₂), eps=ε)` | m ← β₁ m + (1−β₁) g;  v ← β₂ v + (1−β₂) g²;  m̂ = m / (1−β₁ᵗ);  v̂ = v / (1−β₂ᵗ);  θ ← θ − η m̂ / (√v̂ + ε) |
# | `AdamW(..., weight_decay=λ)` | θ ← θ (1 − η λ), then the Adam step |
#
# - **Momentum** keeps a running sum of past gradients, the *momentum buffer*
#   b. Where successive gradients agree, b grows to about g / (1 − μ), ten
#   times g for μ = 0.9, so the step is ten times longer; where they flip
#   sign (across a narrow valley) they cancel. PyTorch keeps η outside the
#   buffer; some papers (Sutskever et al., 2013) put it inside, which is the
#   same while η is constant but not when a schedule changes it.
# - **Nesterov** steps along g + μ b, a "look ahead" that reacts a step
#   earlier when the buffer starts to overshoot.
# - **Adam** divides a running mean of the gradient (m) by the square root of
#   a running mean of its square (v), per element. Each parameter then moves
#   about η per step whatever the scale of its gradient: a parameter with
#   tiny gradients moves as fast as one with huge gradients. Both averages
#   start at 0, and the bias corrections 1 − βᵗ undo that at the start.
# - **Weight decay** pulls parameters towards 0. `SGD` and `Adam` implement
#   it as L2 regularisation, λθ added to the gradient. `AdamW` shrinks the
#   parameter directly, outside the Adam update. A later section shows why
#   that is not the same thing.
#
# Elementwise, this is all an optimizer does. The rest (state per parameter,
# groups, saving) is bookkeeping, and this chapter covers it too.
#
# Two of these statements can be checked in a few lines. Feed a constant
# gradient to SGD with momentum and read its buffer from `optimizer.state`;
# feed Adam the same random gradients at two scales, a thousand times apart,
# and compare the parameters:

# %%
w = torch.zeros(1, requires_grad=True)
sgd_momentum = torch.optim.SGD([w], lr=0.01, momentum=MOMENTUM)
for _ in range(100):
    w.grad = torch.ones(1)  # g = 1 at every step
    sgd_momentum.step()
momentum_buffer = sgd_momentum.state[w]["momentum_buffer"].item()
print(f"momentum buffer after 100 steps of g = 1: {momentum_buffer:.4f} (1 / (1 - mu) = {1 / (1 - MOMENTUM):.4f})")
assert abs(momentum_buffer - 1 / (1 - MOMENTUM)) < 1e-3, "a constant gradient should build a buffer of g / (1 - mu)"

scale_gen = torch.Generator().manual_seed(SEED)
scale_grads = [torch.randn(4, generator=scale_gen) for _ in range(20)]


def after_steps(optimizer_class, scale, **kwargs):
    """The parameters after 20 steps on the fixed gradients multiplied by `scale`."""
    p = torch.zeros(4, requires_grad=True)
    opt = optimizer_class([p], **kwargs)
    for g in scale_grads:
        p.grad = scale * g
        opt.step()
    return p.detach()


for name, cls, lr in (("SGD", torch.optim.SGD, 0.01), ("Adam", torch.optim.Adam, 0.01)):
    small, large = after_steps(cls, 1.0, lr=lr), after_steps(cls, 1000.0, lr=lr)
    print(f"{name:4s}: gradients x1 -> |theta| {small.norm():.4f}, gradients x1000 -> |theta| {large.norm():.4f}")
    if name == "Adam":
        adam_scale_gap = (small - large).abs().max().item()
    else:
        sgd_scale_ratio = (large.norm() / small.norm()).item()
print(f"Adam: largest difference between the two runs {adam_scale_gap:.1e}; SGD: the x1000 run moved {sgd_scale_ratio:.0f}x further")
assert adam_scale_gap < 1e-5, "Adam's update should not depend on the gradient's scale (up to eps)"
assert sgd_scale_ratio > 900, "SGD's update is proportional to the gradient"

# %% [markdown]
# Adam's two runs agree to float rounding (only ε = 1e-8 in the denominator
# sees the scale), while SGD's step grows with the gradient. That is the
# sense of "about η per element whatever the gradient's scale"; it is the
# *sign and consistency* of the gradients that sets Adam's step, not their
# size.
#
# ## Paths on a 2-D test function
#
# To *see* optimizers move we need a function of two parameters, so that a
# path is a line on a map. We use the **Rosenbrock function**
# f(x, y) = (1 − x)² + 100 (y − x²)², a standard test for optimizers because
# it is hard in the way neural networks are hard. Its minimum, f = 0 at
# (1, 1), lies at the bottom of a long, narrow, curved valley. Across the
# valley the walls are steep (curvature in the hundreds), along it the floor
# is almost flat: the problem is badly *conditioned*. A learning rate small
# enough not to blow up across the valley is tiny for the walk along it.
# (A tilted quadratic bowl would show the conditioning too, but not the
# curve, which defeats simple momentum's inertia; the Beale function has
# flat plateaus that mostly test patience.)
#
# Each optimizer starts at `START` and takes `TRAJ_STEPS` steps. SGD and its
# momentum variants share one learning rate, `SGD_LR`, set at the edge of
# stability of plain SGD: on a quadratic, gradient descent diverges along a
# direction of curvature c once lr > 2 / c, and at `START` the largest
# curvature (the top eigenvalue of the Hessian, measured below) is about
# 2100, so 2 / c is about 1e-3. A later cell sweeps SGD's learning rate to
# show how narrow the window is. Adam's steps have a different unit (at most
# about `lr` per coordinate), so it gets its own.


# %%
def rosenbrock(p):
    """f(x, y) = (1 - x)^2 + 100 (y - x^2)^2 for p = [x, y] (any leading batch dims)."""
    x, y = p[..., 0], p[..., 1]
    return (1 - x) ** 2 + 100 * (y - x**2) ** 2


MINIMUM = torch.tensor([1.0, 1.0])


def optimize_path(make_optimizer, steps=TRAJ_STEPS, start=START):
    """Run one optimizer on the Rosenbrock function; return the path [steps + 1, 2] and f per step."""
    p = torch.tensor(start, requires_grad=True)
    optimizer = make_optimizer([p])
    path, values = [p.detach().clone()], []
    for _ in range(steps):
        loss = rosenbrock(p)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        path.append(p.detach().clone())
        values.append(loss.item())
    return torch.stack(path), values


optimizers_2d = {
    "SGD": lambda ps: torch.optim.SGD(ps, lr=SGD_LR),
    "momentum": lambda ps: torch.optim.SGD(ps, lr=SGD_LR, momentum=MOMENTUM),
    "Nesterov": lambda ps: torch.optim.SGD(ps, lr=SGD_LR, momentum=MOMENTUM, nesterov=True),
    "Adam": lambda ps: torch.optim.Adam(ps, lr=ADAM_LR),
    "AdamW": lambda ps: torch.optim.AdamW(ps, lr=ADAM_LR, weight_decay=ADAMW_WEIGHT_DECAY),
}
hessian_at_start = torch.autograd.functional.hessian(rosenbrock, torch.tensor(START))
curvature = torch.linalg.eigvalsh(hessian_at_start).max().item()
print(f"largest curvature at START: {curvature:.0f}, so 2 / c = {2 / curvature:.2e} (SGD_LR = {SGD_LR:g})")
assert 0.5 < SGD_LR * curvature / 2 < 2, "SGD_LR should sit near 2 / c, the edge of stability at START"

paths, curves, final_distance = {}, {}, {}
for name, make in optimizers_2d.items():
    paths[name], curves[name] = optimize_path(make)
    final_distance[name] = (paths[name][-1] - MINIMUM).norm().item()
    report.record(f"Rosenbrock distance to minimum, {name}", final_distance[name], digits=3)
    x, y = paths[name][-1].tolist()
    print(f"{name:9s} ends at ({x:6.3f}, {y:6.3f}), distance to (1, 1): {final_distance[name]:.3f}")

# %%
colors = {"SGD": "tab:gray", "momentum": "tab:blue", "Nesterov": "tab:cyan", "Adam": "tab:red", "AdamW": "tab:orange"}
fig, (ax_map, ax_loss) = plt.subplots(1, 2, figsize=(9, 3.6))
xs, ys = torch.meshgrid(torch.linspace(-2, 2, 200), torch.linspace(-1, 3, 200), indexing="xy")
zs = rosenbrock(torch.stack([xs, ys], dim=-1))
ax_map.contour(xs.numpy(), ys.numpy(), zs.numpy(), levels=torch.logspace(-1, 3.5, 12).numpy(), colors="0.7", linewidths=0.7)
for name, path in paths.items():
    ax_map.plot(path[:, 0].numpy(), path[:, 1].numpy(), color=colors[name], lw=1.2, label=name)
    ax_map.plot(*path[-1].tolist(), "o", color=colors[name], ms=5)  # where it ended
ax_map.plot(*START, "ko", ms=4)
ax_map.plot(1, 1, "k*", ms=10)
ax_map.set(xlim=(-2, 2), ylim=(-1, 3), xlabel="x", ylabel="y", title=f"Rosenbrock, {TRAJ_STEPS} steps from {START}")
ax_map.legend(fontsize=7, loc="lower right")
for name, values in curves.items():
    ax_loss.semilogy(values, color=colors[name], lw=1.2, label=name)
ax_loss.set(xlabel="step", ylabel="f(x, y)", title="value along the path")
plt.show()

# %% [markdown]
# What the picture shows (the next cell measures each point):
#
# - **SGD** (grey) drops down the steep wall into the valley and then creeps
#   along its floor: after `TRAJ_STEPS` steps it has closed less than a
#   third of the distance from `START` to the minimum. Along the floor the
#   gradient is tiny, and the learning rate cannot simply be raised, because
#   across the valley larger steps overshoot (the sweep below shows it).
# - **Momentum** (blue) and **Nesterov** (cyan) add up the small, consistent
#   push along the floor into long strides, while the gradients across the
#   valley flip sign and cancel out in the buffer. Nesterov's first step is
#   g + μb = 1.9 g, which at this edge-of-stability learning rate overshoots
#   across the valley (the zig-zag, and the early spike in its value to many
#   times the starting value); it still ends closest to the minimum of the
#   five optimizers (the sweep below finds a lucky plain-SGD run that ends
#   closer).
# - **Adam** (red) moves at most about `lr` per coordinate per step whatever
#   the gradient's size, so it leaves the steep start without going uphill:
#   its value never rises above the starting one. Its steps are not fixed at
#   `lr`, though: along the curved floor the gradient's component across the
#   valley flips sign from step to step, so that part of m cancels while v
#   stays large, and m̂ / √v̂ falls well below 1. In its last 100 steps Adam
#   moves more than ten times less per step than `lr`, and it is still
#   approaching (1, 1) when the run ends: its final point is its closest.
#   With a constant learning rate Adam need not settle exactly on a
#   minimum; a decaying learning rate (chapter 11) is the usual remedy.
# - **AdamW** (orange) is Adam plus a pull towards (0, 0). On a toy function
#   there is nothing to regularise, so here the decay only holds it back: it
#   ends further from (1, 1) than Adam.
#
# These are statements about this function, this start and these learning
# rates: a function with a different shape, or other learning rates,
# reorders the table. The robust lesson is that on an ill-conditioned valley,
# plain SGD at a learning rate near its stability limit is by far the
# slowest.

# %%
start_distance = (torch.tensor(START) - MINIMUM).norm().item()
sgd_progress = 1 - final_distance["SGD"] / start_distance
print(f"SGD closed {sgd_progress:.0%} of the distance from START to (1, 1)")
for name in ("momentum", "Nesterov", "Adam", "AdamW"):
    assert final_distance[name] < final_distance["SGD"] / 2, (
        f"{name} ended {final_distance[name]:.3f} from the minimum, not clearly closer than plain SGD "
        f"({final_distance['SGD']:.3f}); check the learning rates and TRAJ_STEPS"
    )
for name, path in paths.items():
    assert torch.isfinite(path).all(), f"{name} diverged: lower its learning rate"
assert sgd_progress < 1 / 3, f"SGD closed {sgd_progress:.0%} of the way, not 'less than a third'"
nesterov_spike = max(curves["Nesterov"][:50]) / curves["Nesterov"][0]
print(f"Nesterov's value peaks at {nesterov_spike:.0f}x its starting value in the first 50 steps")
assert nesterov_spike > 5, "Nesterov should overshoot early at this learning rate"
assert min(final_distance, key=final_distance.get) == "Nesterov", "Nesterov should end closest to (1, 1) of the five"
assert max(curves["Adam"]) <= curves["Adam"][0], "Adam's value should never rise above the starting value"
adam_max_step = (paths["Adam"][1:] - paths["Adam"][:-1]).abs().max().item()
print(f"Adam's largest step in any coordinate: {adam_max_step:.4f} (lr = {ADAM_LR})")
assert adam_max_step <= 1.01 * ADAM_LR, "Adam's steps should stay within about lr per coordinate"
adam_distance = (paths["Adam"] - MINIMUM).norm(dim=1)
adam_late_step = (paths["Adam"][-100:] - paths["Adam"][-101:-1]).norm(dim=1).mean().item()
print(f"Adam: mean step over the last 100 steps {adam_late_step:.4f} (lr = {ADAM_LR}, {ADAM_LR / adam_late_step:.0f}x less); "
      f"closest to (1, 1) at step {adam_distance.argmin().item()} of {TRAJ_STEPS}")
assert adam_distance[-1] <= adam_distance.min(), "Adam should still be approaching (1, 1): its last point the closest"
assert adam_late_step < ADAM_LR / 10, f"Adam's late steps ({adam_late_step:.4f}) should be far below lr"
assert final_distance["AdamW"] > final_distance["Adam"], "on the toy function, AdamW's decay should hold it back"
print("every optimizer ends at least twice as close to (1, 1) as plain SGD")

# %% [markdown]
# ### How narrow plain SGD's window is
#
# Why not give SGD a larger learning rate? Here is the same run at a few
# multiples of `SGD_LR`, with the largest value f reached along the way
# (above f(`START`) means the path went uphill: it bounced off a valley wall).

# %%
SWEEP = (0.5, 1.0, 1.5, 1.9, 2.0, 2.1, 2.5)  # multiples of SGD_LR
sweep, sweep_paths = {}, {}
for factor in SWEEP:
    path, values = optimize_path(lambda ps, f=factor: torch.optim.SGD(ps, lr=f * SGD_LR))
    finite = torch.isfinite(path).all().item() and all(v < float("inf") for v in values)
    distance = (path[-1] - MINIMUM).norm().item() if finite else float("inf")
    sweep[factor] = (finite, max(values), distance)
    sweep_paths[factor] = path
    if factor == 1.0:
        sgd_monotone = all(b <= a for a, b in zip(values, values[1:]))
    peak = f"{max(values):10.1f}" if finite else "       inf"
    print(f"lr = {factor:3.1f} x SGD_LR: diverged {not finite!s:5s}  largest f {peak}  distance to (1, 1) {distance:.3f}")

# %%
fig, ax = plt.subplots(figsize=(9, 3))
ax.contour(xs.numpy(), ys.numpy(), zs.numpy(), levels=torch.logspace(-1, 3.5, 12).numpy(), colors="0.7", linewidths=0.7)
sweep_colors = plt.cm.viridis(torch.linspace(0, 0.9, len(SWEEP)).numpy())
for color, (factor, path) in zip(sweep_colors, sweep_paths.items()):
    inside = torch.isfinite(path).all(dim=1) & (path[:, 0].abs() < 2.5) & (path[:, 1].abs() < 3.5)
    shown = path[: int(inside.long().cumprod(dim=0).sum())]  # a diverging path: draw it until it leaves the map
    label = f"{factor:g}x" + ("" if sweep[factor][0] else " (diverged)")
    ax.plot(shown[:, 0].numpy(), shown[:, 1].numpy(), color=color, lw=0.9, label=label)
ax.plot(*START, "ko", ms=4)
ax.plot(1, 1, "k*", ms=10)
ax.set(xlim=(-2, 2), ylim=(-1, 3), xlabel="x", ylabel="y", title="plain SGD at multiples of SGD_LR")
ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
plt.show()

# %%
f_start = curves["SGD"][0]
assert sgd_monotone, "at SGD_LR plain SGD's value should go down at every step"
assert sweep[1.5][0] and sweep[1.5][1] > 10 * f_start, "at 1.5 x SGD_LR SGD should bounce off the walls"
assert not sweep[2.1][0] and not sweep[2.5][0], "at 2.1 x and 2.5 x SGD_LR plain SGD should diverge"
assert sweep[2.0][0] and sweep[2.0][2] < sweep[1.0][2], "the lucky 2 x run should end closer than SGD_LR"
assert sweep[1.9][0] and sweep[1.9][2] > 5 * sweep[2.0][2], (
    "if 1.9 x ends about as close as 2 x, the 2 x result is not luck at the edge"
)
assert sweep[1.9][1] >= 0.5 * sweep[2.0][1], "at 1.9 x the path should bounce about as hard as at 2 x"
assert sweep[2.0][2] < final_distance["Nesterov"], "the lucky 2 x run should end closer than Nesterov"
print(f"largest f on the way: {sweep[1.9][1]:.0f} at 1.9 x, {sweep[2.0][1]:.0f} at 2 x (start: {f_start:.1f})")

# %% [markdown]
# At `SGD_LR` the value goes down at every step; at 1.5× the path bounces
# off the valley walls, to values many times the start; at 2.1× and 2.5× it
# diverges to infinity. At 2×, a violent bounce happens to land in the
# valley further along, and that run ends closer to (1, 1) than any of the
# five optimizers above. The neighbours show what that is worth: at 1.9× the
# path bounces about as hard (its largest f is at least half the 2× run's,
# printed above) and ends several times further away, and at 2.1× it
# diverges. On a non-quadratic function the "2 / c" limit is local, and a
# path that climbs that far uphill on the way is luck at the edge of
# divergence, not a setting to rely on. Momentum gets its long strides
# without that gamble.

# %% [markdown]
# ## Adam with `weight_decay` is not AdamW
#
# Weight decay is meant to shrink every weight by the same small fraction
# each step, so that weights that the data does not support fade away. For
# plain SGD, adding λθ to the gradient (L2 regularisation) does exactly
# that: θ ← θ − η(g + λθ) = θ(1 − ηλ) − ηg.
#
# For Adam it does not. `torch.optim.Adam(weight_decay=λ)` adds λθ to the
# gradient *before* the moment estimates, so the decay is divided by √v̂ like
# everything else. A parameter with large gradients has a large √v̂, and its
# decay is divided down to almost nothing; a parameter with tiny gradients
# has its decay blown up. Loshchilov and Hutter ("Decoupled Weight Decay
# Regularization", ICLR 2019) proposed AdamW: keep the gradient clean and
# shrink the parameter separately. PyTorch writes that shrink as the factor
# (1 − ηλ), with η the current learning rate, so a learning-rate schedule
# scales the decay too. (The paper multiplies λ by the schedule's multiplier
# but not by the base learning rate, so a λ quoted from a paper may need
# converting.)
#
# Here are both updates written out from the formulas, side by side. The
# only difference is where λ enters:


# %%
def adam_l2_step(param, grad, m, v, step, lr, betas, eps, weight_decay):
    """torch.optim.Adam(weight_decay=...) for one tensor: the decay goes through the gradient."""
    beta1, beta2 = betas
    grad = grad + weight_decay * param  # L2: decay enters the moment estimates
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad**2
    m_hat, v_hat = m / (1 - beta1**step), v / (1 - beta2**step)
    return param - lr * m_hat / (v_hat.sqrt() + eps), m, v


def adamw_step(param, grad, m, v, step, lr, betas, eps, weight_decay):
    """torch.optim.AdamW for one tensor: the decay shrinks the parameter directly."""
    beta1, beta2 = betas
    param = param * (1 - lr * weight_decay)  # decoupled: the gradient is left alone
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad**2
    m_hat, v_hat = m / (1 - beta1**step), v / (1 - beta2**step)
    return param - lr * m_hat / (v_hat.sqrt() + eps), m, v


# %% [markdown]
# Now we feed the same parameter and the same sequence of gradients to the
# hand-written steps and to `torch.optim`, in float32 as in real training.
# The gradients are random numbers, not derived from a loss, so that both
# optimizers see exactly the same gradients even after their parameters
# drift apart. Setting `p.grad` by hand and calling `step()` is allowed:
# the optimizer only reads `.grad`.

# %%
ADAM_KW = dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
gen = torch.Generator().manual_seed(SEED)
theta0 = torch.randn(6, generator=gen)
grads = [torch.randn(6, generator=gen) for _ in range(20)]


def torch_path(optimizer_class, **kwargs):
    """Parameters after each step of a torch.optim optimizer fed the fixed gradients."""
    p = theta0.clone().requires_grad_(True)
    optimizer = optimizer_class([p], **kwargs)
    out = []
    for g in grads:
        p.grad = g.clone()
        optimizer.step()
        out.append(p.detach().clone())
    return out


def hand_path(step_fn, **kwargs):
    """Parameters after each step of a hand-written update fed the same gradients."""
    p, m, v = theta0.clone(), torch.zeros(6), torch.zeros(6)
    out = []
    for t, g in enumerate(grads, start=1):
        p, m, v = step_fn(p, g, m, v, t, **kwargs)
        out.append(p)
    return out


def max_diff(a, b):
    return max((x - y).abs().max().item() for x, y in zip(a, b))


by_torch = {"Adam + L2": torch_path(torch.optim.Adam, **ADAM_KW), "AdamW": torch_path(torch.optim.AdamW, **ADAM_KW)}
by_hand = {"Adam + L2": hand_path(adam_l2_step, **ADAM_KW), "AdamW": hand_path(adamw_step, **ADAM_KW)}
hand_vs_torch = {name: max_diff(by_hand[name], by_torch[name]) for name in by_torch}
adam_vs_adamw = max_diff(by_torch["Adam + L2"], by_torch["AdamW"])
for name, diff in hand_vs_torch.items():
    print(f"{name:9s}: hand-written vs torch.optim, largest difference over {len(grads)} steps: {diff:.1e}")
print(f"Adam + L2 vs AdamW (both torch.optim), largest difference: {adam_vs_adamw:.1e}")
first = (by_torch["Adam + L2"][0] - by_torch["AdamW"][0]).abs().max().item()
print(f"   ... already after the first step: {first:.1e}")
report.record("hand-written Adam/AdamW vs torch.optim, max difference", max(hand_vs_torch.values()), digits=10)
_ = report.record("Adam+L2 vs AdamW, max parameter difference", adam_vs_adamw, digits=5)

# %% [markdown]
# The hand-written formulas agree with `torch.optim` to float32 rounding
# (the check allows 1e-6; the printed difference shows how close this
# machine came, and for one CPU tensor `torch.optim` runs nearly the same
# operations; its `foreach` and `fused` code paths, measured later, may
# differ in the last bits), while the two optimizers
# disagree from the first step, by far more. `torch.optim.Adam` also accepts
# `decoupled_weight_decay=True`, which turns it into AdamW exactly:

# %%
decoupled = torch_path(torch.optim.Adam, decoupled_weight_decay=True, **ADAM_KW)
same_as_adamw = all(torch.equal(a, b) for a, b in zip(decoupled, by_torch["AdamW"]))
print("Adam(decoupled_weight_decay=True) gives bit-identical parameters to AdamW:", same_as_adamw)

# %%
for name, diff in hand_vs_torch.items():
    assert diff < 1e-6, f"the hand-written {name} step differs from torch.optim by {diff:.2e}"
assert adam_vs_adamw > max(1e-3, 1000 * max(hand_vs_torch.values())), (
    f"Adam + L2 and AdamW should clearly differ, but differ by only {adam_vs_adamw:.1e}"
)
assert first > max(1e-4, 1000 * max(hand_vs_torch.values())), "Adam + L2 and AdamW should differ after one step"

assert same_as_adamw, "Adam(decoupled_weight_decay=True) should equal AdamW"

# %% [markdown]
# ### Why it matters: decay that depends on the gradient's scale
#
# The difference is not just numerical noise; it changes *which* weights get
# regularised. Take two weights, both starting at 1.0. One gets noisy
# gradients of size about 0.001 (say, a rarely useful feature), the other of
# size about 10. We run each optimizer twice on the same gradients, once
# with weight decay and once without, and measure how much further the decay
# pulled each weight towards 0:

# %%
DECAY_STEPS = 50
scales = torch.tensor([1e-3, 10.0])  # gradient size of weight 0 and weight 1
noise = [torch.randn(2, generator=gen) * scales for _ in range(DECAY_STEPS)]


def final_weights(optimizer_class, **kwargs):
    """The two weights after DECAY_STEPS steps on the noisy gradients."""
    w = torch.ones(2, requires_grad=True)
    optimizer = optimizer_class([w], **kwargs)
    for g in noise:
        w.grad = g.clone()
        optimizer.step()
    return w.detach()


decay_effect = {}
for name, cls in (("Adam + L2", torch.optim.Adam), ("AdamW", torch.optim.AdamW)):
    with_decay = final_weights(cls, lr=0.01, weight_decay=0.1)
    without = final_weights(cls, lr=0.01, weight_decay=0.0)
    decay_effect[name] = without - with_decay  # how far the decay alone moved each weight
    small, large = decay_effect[name].tolist()
    print(f"{name:9s}: the decay moved the small-gradient weight by {small:.5f}, the large-gradient weight by {large:.5f}")

fig, ax = plt.subplots(figsize=(6, 2.6))
bar_x = torch.arange(2).float()
for offset, (name, effect) in zip((-0.2, 0.2), decay_effect.items()):
    ax.bar((bar_x + offset).numpy(), effect.numpy(), width=0.4, label=name,
           color=colors["Adam"] if name == "Adam + L2" else colors["AdamW"])
ax.set_xticks(bar_x.numpy(), ["small gradients (~0.001)", "large gradients (~10)"])
ax.set(yscale="log", ylabel="pull towards 0 by the decay", title=f"what weight decay 0.1 did in {DECAY_STEPS} steps")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# With AdamW the decay takes about the same share of both weights, roughly
# `DECAY_STEPS × lr × weight_decay` = 5 % of their value: decay is a fixed
# fraction per step, whatever the gradients do. With Adam + L2 the
# small-gradient weight is pulled towards 0 about ten times further than
# AdamW pulls it, and the large-gradient weight about ten times less,
# because λθ ≈ 0.1 is huge next to gradients of 0.001 and negligible next
# to gradients of 10. That is why AdamW, not Adam with `weight_decay`, is
# the usual choice for training transformers, and why a `weight_decay` value
# tuned for one does not carry over to the other.

# %%
ratio_l2 = decay_effect["Adam + L2"][0] / decay_effect["Adam + L2"][1]
ratio_w = decay_effect["AdamW"][0] / decay_effect["AdamW"][1]
print(f"small-gradient / large-gradient decay: Adam + L2 {ratio_l2:.0f}x, AdamW {ratio_w:.2f}x")
report.record("Adam+L2 decay ratio, small vs large gradients", ratio_l2.item(), "x", digits=1)
assert 0.8 < ratio_w < 1.25, f"AdamW should decay both weights alike, ratio {ratio_w:.2f}"
assert ratio_l2 > 5, f"Adam + L2 should decay the small-gradient weight much more, ratio {ratio_l2:.2f}"
expected_share = DECAY_STEPS * 0.01 * 0.1  # steps x lr x weight_decay
small_vs_adamw = (decay_effect["Adam + L2"][0] / decay_effect["AdamW"][0]).item()
large_vs_adamw = (decay_effect["AdamW"][1] / decay_effect["Adam + L2"][1]).item()
print(f"Adam + L2 vs AdamW: small-gradient weight {small_vs_adamw:.1f}x further, large-gradient weight "
      f"{large_vs_adamw:.1f}x less far; AdamW's share {decay_effect['AdamW'].tolist()} vs {expected_share:.2f}")
assert all(0.8 * expected_share < d < 1.25 * expected_share for d in decay_effect["AdamW"].tolist()), (
    "AdamW should take about steps x lr x weight_decay of each weight"
)
assert 5 < small_vs_adamw < 20, f"'about ten times further' is false: {small_vs_adamw:.1f}x"
assert 5 < large_vs_adamw < 20, f"'about ten times less' is false: {large_vs_adamw:.1f}x"

# %% [markdown]
# ## Parameter groups
#
# An optimizer does not hold one list of parameters but a list of **groups**,
# `optimizer.param_groups`. Each group is a dict with its own `params` and
# its own copy of every hyperparameter (`lr`, `weight_decay`, `betas`, ...).
# A value given in a group's dict wins; anything left out is filled in from
# the optimizer's keyword arguments, its *defaults*. Learning-rate
# schedulers (chapter 11) work by rewriting `group["lr"]` before each step.
#
# ### A learning rate per group
#
# Fine-tuning a pretrained network (chapter 13) typically gives the
# pretrained body a small learning rate and the new head a larger one:

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(SEED)
net = nn.Sequential(
    nn.Linear(16, 32), nn.LayerNorm(32), nn.ReLU(),  # "body"
    nn.Linear(32, 4),  # "head"
)
body, head = net[:3], net[3]
optimizer = torch.optim.AdamW(
    [
        {"params": body.parameters(), "lr": 1e-4},  # its own lr
        {"params": head.parameters()},  # lr from the defaults below
    ],
    lr=1e-3,
    weight_decay=0.01,
)
for i, group in enumerate(optimizer.param_groups):
    shapes = [tuple(p.shape) for p in group["params"]]
    print(f"group {i}: lr {group['lr']}, weight_decay {group['weight_decay']}, params {shapes}")
print("hyperparameters per group:", sorted(k for k in optimizer.param_groups[0] if k != "params"))

# %%
assert [g["lr"] for g in optimizer.param_groups] == [1e-4, 1e-3], "the head group should take lr from the defaults"
assert [len(g["params"]) for g in optimizer.param_groups] == [4, 2], "body: 2 Linear + 2 LayerNorm tensors; head: 2"

# %% [markdown]
# ### No weight decay on biases and norm weights
#
# Weight decay pulls weights towards 0 to keep the model simple. That makes
# sense for weight *matrices*. It makes little sense for a bias (it only
# shifts an output) or for the scale γ of a LayerNorm or BatchNorm, whose
# natural value is 1, not 0. So common practice (Google's BERT code,
# nanoGPT, timm's `param_groups_weight_decay`) puts those in a second group
# with `weight_decay=0.0`.
#
# One way to sort them: look at the module each parameter belongs to.


# %%
def split_by_module(model, weight_decay):
    """Decay the weights of Linear/Conv layers; no decay for biases and normalisation layers."""
    norm_types = (nn.LayerNorm, nn.BatchNorm1d, nn.BatchNorm2d, nn.GroupNorm)
    decay, no_decay = [], []
    for module in model.modules():
        for pname, p in module.named_parameters(recurse=False):
            if isinstance(module, norm_types) or pname == "bias":
                no_decay.append(p)
            else:
                decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


WD, LR = 0.1, 1e-2
optimizer = torch.optim.AdamW(split_by_module(net, WD), lr=LR)
names = {id(p): n for n, p in net.named_parameters()}
for i, group in enumerate(optimizer.param_groups):
    print(f"group {i}: weight_decay {group['weight_decay']}, lr {group['lr']}: {[names[id(p)] for p in group['params']]}")

# %% [markdown]
# The check reads everything back from `optimizer.param_groups`: every
# parameter of the model is in exactly one group, the matrices decay, the
# rest does not.

# %%
decay_ids = {id(p) for p in optimizer.param_groups[0]["params"]}
no_decay_ids = {id(p) for p in optimizer.param_groups[1]["params"]}
assert decay_ids.isdisjoint(no_decay_ids), "a parameter is in both groups"
assert decay_ids | no_decay_ids == {id(p) for p in net.parameters()}, "a parameter is in no group"
assert all(p.ndim == 2 for p in optimizer.param_groups[0]["params"]), "only weight matrices should decay"
assert [g["weight_decay"] for g in optimizer.param_groups] == [WD, 0.0]
print(f"{len(decay_ids)} tensors decay, {len(no_decay_ids)} do not")

# %% [markdown]
# To see the groups at work, give every parameter a gradient of exactly
# zero and take one step. Adam's update is then 0 (m = 0), so all that moves
# is the decoupled decay: the decay group shrinks by exactly the factor
# (1 − lr × weight_decay), the other group stays put.

# %%
before = {n: p.detach().clone() for n, p in net.named_parameters()}
for p in net.parameters():
    p.grad = torch.zeros_like(p)
optimizer.step()
for n, p in net.named_parameters():
    if torch.equal(p.detach(), before[n]):
        print(f"{n:9s} unchanged")
    else:
        print(f"{n:9s} multiplied by {(p.detach().norm() / before[n].norm()).item():.6f}")
for p in optimizer.param_groups[0]["params"]:
    assert torch.allclose(p.detach(), before[names[id(p)]] * (1 - LR * WD)), "decay group: shrink by (1 - lr * wd)"
for p in optimizer.param_groups[1]["params"]:
    assert torch.equal(p.detach(), before[names[id(p)]]), "no-decay group: unchanged"

# %% [markdown]
# Looking at module types needs a list of every normalisation class. A
# shorter rule that works for almost any model is in exercise 2.
#
# ## Saving and restoring an optimizer
#
# Adam is not a function of the current gradient alone: it carries m, v and
# the step count t from step to step. Resuming training with a fresh Adam
# resets them, and the bias correction thinks it is step 1 again: the first
# steps after a "resume" are then different (here larger, as
# measured below). So a
# checkpoint stores `optimizer.state_dict()` next to `model.state_dict()`.
#
# Let us train a small model for a few steps and look inside:

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(SEED)
x_toy = torch.randn(64, 16)
y_toy = torch.randint(0, 4, (64,))


def make_model_and_optimizer():
    torch.manual_seed(SEED)
    m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    return m, torch.optim.Adam(m.parameters(), lr=1e-2)


def train_step(m, opt):
    loss = F.cross_entropy(m(x_toy), y_toy)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


model, optimizer = make_model_and_optimizer()
for _ in range(5):
    train_step(model, optimizer)
state = optimizer.state_dict()
print("state_dict keys:", list(state))
print("param_groups[0]:", {k: v for k, v in state["param_groups"][0].items() if k in ("lr", "betas", "eps", "weight_decay", "params")})
for index, entry in state["state"].items():
    parts = [f"{k}: {v.item():g}" if v.ndim == 0 else f"{k}: {tuple(v.shape)}" for k, v in entry.items()]
    print(f"state[{index}] ->", ", ".join(parts))

# %% [markdown]
# Two parts:
#
# - `param_groups`: the hyperparameters of each group, with the parameters
#   replaced by integer indices 0, 1, 2, ... in the order the optimizer got
#   them (tensors are not saved twice, and indices survive a model rebuild);
# - `state`: per parameter index, Adam's `step` (a 0-d tensor, here 5),
#   `exp_avg` (m) and `exp_avg_sq` (v), each the shape of the parameter. So
#   Adam keeps two extra copies of the model: its state takes twice the
#   memory of the weights, as the next cell counts (chapter 18 measures what
#   that means on a GPU).

# %%
weight_elements = sum(p.numel() for p in model.parameters())
state_elements = sum(v.numel() for entry in optimizer.state.values() for k, v in entry.items() if k != "step")
print(f"weights: {weight_elements} elements; Adam's exp_avg + exp_avg_sq: {state_elements} elements "
      f"({state_elements / weight_elements:.0f}x)")
assert state_elements == 2 * weight_elements, "Adam's state should be two tensors the size of each parameter"

# %% [markdown]
#
# Now a checkpoint round trip. We save both state dicts with `torch.save`,
# then build a *fresh* model and optimizer, load them, and take one more step
# on each. `torch.load` uses `weights_only=True` by default, which accepts
# both state dicts: they hold only tensors, numbers, strings and tuples.

# %%
checkpoint_path = build_dir() / "10_optimizers" / "checkpoint.pt"
checkpoint_path.parent.mkdir(parents=True, exist_ok=True)
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, checkpoint_path)
print(f"saved {rel(checkpoint_path)} ({checkpoint_path.stat().st_size / 1024:.0f} KiB)")

restored_model, restored_optimizer = make_model_and_optimizer()
checkpoint = torch.load(checkpoint_path)
restored_model.load_state_dict(checkpoint["model"])
restored_optimizer.load_state_dict(checkpoint["optimizer"])

forgetful_model, forgetful_optimizer = make_model_and_optimizer()
forgetful_model.load_state_dict(checkpoint["model"])  # weights restored, optimizer state not

weights_before = [p.detach().clone() for p in model.parameters()]
for m, opt in ((model, optimizer), (restored_model, restored_optimizer), (forgetful_model, forgetful_optimizer)):
    train_step(m, opt)
step_sizes = {
    label: torch.cat([(p.detach() - w).flatten() for p, w in zip(m.parameters(), weights_before)]).abs()
    for label, m in (("continued", model), ("fresh Adam", forgetful_model))
}
for label, sizes in step_sizes.items():
    print(f"step 6, {label:10s}: mean |change| per weight {sizes.mean():.2e}, largest {sizes.max():.2e} (lr = 1e-2)")
identical = all(torch.equal(a, b) for a, b in zip(model.parameters(), restored_model.parameters()))
forgetful_gap = max((a - b).abs().max().item() for a, b in zip(model.parameters(), forgetful_model.parameters()))
print("after one more step, restored model == original:", identical)
print(f"with a fresh optimizer instead, the weights differ by up to {forgetful_gap:.2e}")
_ = report.record("weight gap one step after resuming with a fresh Adam", forgetful_gap, digits=6)

# %%
assert identical, "model + optimizer restored from the checkpoint should take a bit-identical next step"
assert forgetful_gap > 1e-4, "a fresh Adam (m = v = 0, step 1) should take a different step"
assert restored_optimizer.state_dict()["state"][0]["step"].item() == 6, "the restored step count continues"
at_lr = ((step_sizes["fresh Adam"] - 1e-2).abs() < 1e-5).float().mean().item()
print(f"fresh Adam: {at_lr:.1%} of the weights moved by lr to within 0.1 %")
assert at_lr > 0.9, "a first Adam step should move (nearly) every weight by lr"
assert step_sizes["fresh Adam"].mean() > 1.1 * step_sizes["continued"].mean(), "the fresh step should be larger"

# %% [markdown]
# The restored pair continues bit for bit. The one with a fresh optimizer
# takes a "first" Adam step, in which m̂ / √v̂ = g / |g| is ±1 for every
# element (unless |g| is tiny next to ε or exactly 0, as behind a dead ReLU):
# nearly every weight moves by `lr`, as the share printed above shows. The
# original's step 6 uses m and v averaged over six gradients instead, where
# gradients that disagree from step to step partly cancel in m, so its mean
# step per weight is smaller (after only five steps, by a modest margin). Chapter 14 builds a full checkpoint on this
# (scheduler, scaler, RNG states, atomic writes).
#
# ## `zero_grad(set_to_none=True)` versus `False`
#
# `optimizer.zero_grad()` resets the gradients before the next `backward()`.
# Since PyTorch 2.0 its default is `set_to_none=True`: it sets each `.grad`
# to `None` instead of filling it with zeros. That frees the gradient memory
# until `backward()` needs it, and saves a kernel that writes zeros. It also
# changes behaviour, because `torch.optim` **skips parameters whose `.grad`
# is `None`**, while a tensor of zeros is a gradient like any other.
#
# That matters whenever a parameter gets no gradient in some step: a branch
# of the model that is not used for this batch, an embedding row that does
# not occur, a frozen layer. Below, parameters `a` and `b` both take part in
# step 1; in step 2 only `a` is used.


# %%
def second_step_of_b(make_optimizer, set_to_none):
    """.grad of b after zero_grad, and b after step 1 and after step 2 (where b is not used)."""
    a = nn.Parameter(torch.ones(3))
    b = nn.Parameter(torch.ones(3))
    opt = make_optimizer([a, b])
    x = torch.tensor([1.0, 2.0, 3.0])
    ((a * x).sum() + (b * x).sum()).backward()  # step 1: both used
    opt.step()
    b_after_1 = b.detach().clone()
    opt.zero_grad(set_to_none=set_to_none)
    grad_seen = b.grad
    (a * x).sum().backward()  # step 2: b is not used, backward gives it no gradient
    opt.step()
    return grad_seen, b_after_1, b.detach().clone()


zero_grad_cases = {
    "SGD, momentum 0.9": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "SGD, weight_decay 0.1": lambda ps: torch.optim.SGD(ps, lr=0.1, weight_decay=0.1),
    "Adam": lambda ps: torch.optim.Adam(ps, lr=0.1),
}
moved = {}
for name, make in zero_grad_cases.items():
    for set_to_none in (True, False):
        grad_seen, b1, b2 = second_step_of_b(make, set_to_none)
        moved[name, set_to_none] = (b2 - b1).abs().max().item()
        shown = "None" if grad_seen is None else f"tensor({grad_seen.tolist()})"
        print(f"{name:22s} set_to_none={set_to_none!s:5s}: b.grad after zero_grad = {shown:22s}"
              f" b moved in step 2 by {moved[name, set_to_none]:.4f}")

# %% [markdown]
# With `set_to_none=True`, `b.grad` stays `None` through step 2 and every
# optimizer leaves `b` exactly where it was. With `set_to_none=False`,
# `b.grad` is a tensor of zeros, the optimizer treats b as "gradient 0", and
# b moves anyway: the momentum buffer keeps it going, weight decay shrinks
# it, and Adam keeps stepping along its running mean m. Which one you want
# depends on the model, but you should know which one you get. Code that
# reads `.grad` after `zero_grad()` (gradient norms, logging) must also
# handle `None`.

# %%
for name in zero_grad_cases:
    assert moved[name, True] == 0.0, f"{name}: with .grad = None the optimizer must skip b"
    assert moved[name, False] > 1e-3, f"{name}: with a zero .grad, b should still move"
print("grad None: b skipped by every optimizer; grad zeros: b moved by every optimizer")

# %% [markdown]
# ## The other switches in a group: `foreach`, `fused`, `maximize`, ...
#
# The parameter-group printout earlier listed more hyperparameters than the
# update rules use. Most of them choose *how* the update is computed, not
# *what* it is:
#
# - `foreach` and `fused` pick the implementation. The default, a `for` loop
#   over the parameters, launches a few small operations per tensor.
#   `foreach=True` uses the `torch._foreach_*` multi-tensor operations, which
#   update a whole list of tensors per call (fewer kernel launches, at the
#   cost of about one extra copy of the parameters in peak memory).
#   `fused=True` runs the whole update in one kernel per group of tensors
#   on CUDA (one vectorised loop per tensor on the CPU); it
#   exists for `Adam`, `AdamW` and `SGD` (on CPU, CUDA, MPS and a few other
#   devices) and for `Adagrad` (CPU and CUDA only). When you pass neither, `torch.optim` picks `foreach`
#   if every parameter is on CUDA (or another device with foreach kernels)
#   and the `for` loop otherwise; it never picks `fused` by itself (the
#   documentation calls it too new to be the default).
# - `maximize=True` climbs instead of descending: the step uses −g.
# - `capturable=True` keeps the step counter on the accelerator and avoids
#   host synchronisation, so that the step can be captured in a CUDA graph
#   or compiled; it is slower otherwise. `differentiable=True` lets autograd
#   run *through* `step()` (for meta-learning); it is slower too.
# - `amsgrad=True` (Adam, AdamW) keeps the running maximum of v (Reddi et
#   al., 2018) and divides by its square root, bias-corrected as v̂ is;
#   PyTorch takes the maximum of the raw v, then applies the correction
#   1 − β₂ᵗ.
#
# The three implementations must compute the same update. We check that on
# this chapter's MNIST MLP, feeding each the same gradients, and time one
# `step()` of each with `helpers.bench.measure`:

# %%
impl_net = MLP(in_features=784, hidden=(HIDDEN,), num_classes=10, dropout=0.0).to(device)
impl_gen = torch.Generator().manual_seed(SEED)
impl_grads = [[torch.randn(p.shape, generator=impl_gen).to(device) for p in impl_net.parameters()] for _ in range(10)]
implementations = {"for loop": dict(foreach=False), "foreach": dict(foreach=True), "fused": dict(fused=True)}
impl_params, impl_timings = {}, []
for label, kwargs in implementations.items():
    net_copy = copy.deepcopy(impl_net)
    opt = torch.optim.Adam(net_copy.parameters(), lr=1e-3, **kwargs)
    for step_grads in impl_grads:
        for p, g in zip(net_copy.parameters(), step_grads):
            p.grad = g.clone()
        opt.step()
    impl_params[label] = [p.detach().clone() for p in net_copy.parameters()]
    impl_timings.append(measure(opt.step, label=f"Adam step, {label}", min_run_time=0.2,
                                num_threads=1 if device.type == "cpu" else None))
impl_gap = {label: max((a - b).abs().max().item() for a, b in zip(impl_params["for loop"], ps))
            for label, ps in impl_params.items()}
for label, gap in impl_gap.items():
    print(f"{label:8s}: largest difference from the for loop after {len(impl_grads)} steps {gap:.1e}")
print(timing_table(impl_timings))
disturbed = [t.label for t in impl_timings
             if t.iqr_s > t.median_s or t.median_s > 20 * impl_timings[0].median_s]
if disturbed:  # an IQR above its median, or a median 20x the for loop's (far more than the method can cost), is load
    print("timings disturbed by load (rerun on a quiet machine):", ", ".join(disturbed))
default_opt = torch.optim.Adam(impl_net.parameters())
print("defaults in the group before the first step: foreach", default_opt.param_groups[0]["foreach"],
      "| fused", default_opt.param_groups[0]["fused"])

# %%
for label, gap in impl_gap.items():
    assert gap < 1e-6, f"the {label} implementation should compute the for loop's update, differs by {gap:.1e}"
p_max = torch.tensor([0.5], requires_grad=True)
climber = torch.optim.SGD([p_max], lr=0.1, maximize=True)
(-(p_max - 2.0) ** 2).sum().backward()  # a hill with its top at 2
climber.step()
print(f"maximize=True: p went from 0.5 to {p_max.item():.2f}, uphill towards 2")
assert p_max.item() > 0.5, "maximize=True should step up the gradient"

# %% [markdown]
# The three agree to float32 rounding (not always bit for bit: `fused`
# orders the arithmetic its own way). The timing table shows the medians on
# this machine, with the number of calls and blocks they rest on; on a CPU
# they are taken with one thread (`measure(..., num_threads=1)`, which sets
# and then restores the thread count), so that the three compare like for
# like. A shared machine makes them noisy, so we assert nothing about them,
# and the cell prints a warning when a spread (IQR) exceeds its median or a
# median is more than 20 times the for loop's (all three do the same
# arithmetic, so a gap that large can only be load). On a CPU, `foreach` has no
# multi-tensor kernels and falls back to a loop inside each operation, so
# it saves no kernel launches there; whatever difference the table shows
# for it comes from the overhead around the arithmetic, not from fewer
# kernels, and need not carry over to another machine. `fused` on the CPU is a
# different kind of code: one vectorised pass over each parameter that
# reads and writes θ, m and v once, instead of a chain of separate
# element-wise operations that each walk the whole tensor, so it can be
# faster even where launches cost nothing. The launch savings of `foreach`
# are meant for accelerators, where each small kernel launch costs
# microseconds; the CPU numbers here say nothing about a GPU. `None` in both
# fields means "decide at the first `step()`" by the rule above.
#
# One more tool lives between `backward()` and `step()` rather than inside
# the optimizer: gradient clipping, `torch.nn.utils.clip_grad_norm_`, which
# rescales every `.grad` when their total norm is too large. Chapter 15
# measures it.
#
# ## A race on real data: MNIST
#
# Toy functions are good for pictures; here is the same comparison on a
# real network. Each optimizer trains the same freshly initialised MLP (one
# hidden layer of `HIDDEN` units, chapter 05) on the same `MNIST_STEPS`
# mini-batches, in the same order. We pre-convert MNIST to one normalised
# tensor as in chapter 05, and take each shuffled mini-batch by indexing that
# tensor directly, which is what a `DataLoader` over a `TensorDataset` does,
# minus its per-sample overhead. SGD and momentum share a learning rate; with
# μ = 0.9 momentum's effective step is about ten times longer, so we also
# run plain SGD with a ten times larger learning rate, `MNIST_SGD_LR / (1 −
# μ)`, to separate "momentum" from "a longer step". Adam and AdamW use their
# usual 1e-3. None of these learning rates is tuned.
#
# One run is one draw of the initialisation and the batch order, and some
# gaps between optimizers are not much larger than the differences between
# draws, so every optimizer runs with `RACE_SEEDS` seeds (the same seeds for
# all), and we report the mean and the spread (min to max) over them.

# %%
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081  # derived in chapter 05
train_raw, test_raw = mnist(train=True), mnist(train=False)
train_x = ((train_raw.data.float() / 255 - MNIST_MEAN) / MNIST_STD).unsqueeze(1)
test_x = ((test_raw.data.float() / 255 - MNIST_MEAN) / MNIST_STD).unsqueeze(1)
SGD_LONG_LR = MNIST_SGD_LR / (1 - MOMENTUM)

race_optimizers = {
    "SGD": lambda ps: torch.optim.SGD(ps, lr=MNIST_SGD_LR),
    "SGD, lr x10": lambda ps: torch.optim.SGD(ps, lr=SGD_LONG_LR),
    "momentum": lambda ps: torch.optim.SGD(ps, lr=MNIST_SGD_LR, momentum=MOMENTUM),
    "Adam": lambda ps: torch.optim.Adam(ps, lr=MNIST_ADAM_LR),
    "AdamW": lambda ps: torch.optim.AdamW(ps, lr=MNIST_ADAM_LR, weight_decay=0.01),
}
colors["SGD, lr x10"] = "tab:green"


def race(make_optimizer, seed):
    """Training losses per step and the final test accuracy of a fresh MLP (init and batch order from seed)."""
    torch.manual_seed(seed)
    net = MLP(in_features=784, hidden=(HIDDEN,), num_classes=10, dropout=0.0).to(device)
    opt = make_optimizer(net.parameters())
    order = torch.Generator().manual_seed(seed)  # the same batches for every optimizer
    epochs = -(-MNIST_STEPS * BATCH_SIZE // len(train_x))  # enough shuffled passes for all the steps
    perm = torch.cat([torch.randperm(len(train_x), generator=order) for _ in range(epochs)])
    losses = []
    net.train()
    for step in range(MNIST_STEPS):
        idx = perm[step * BATCH_SIZE: (step + 1) * BATCH_SIZE]
        x, y = train_x[idx].to(device), train_raw.targets[idx].to(device)
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    net.eval()
    with torch.no_grad():
        test_acc = (net(test_x.to(device)).argmax(dim=1).cpu() == test_raw.targets).float().mean().item()
    return losses, test_acc


def smooth(values, k=SMOOTH):
    """Moving average over the last k values (shorter at the start)."""
    return [sum(values[max(0, i - k + 1): i + 1]) / len(values[max(0, i - k + 1): i + 1]) for i in range(len(values))]


race_seeds = [SEED + i for i in range(RACE_SEEDS)]
race_curves, race_final, race_acc = {}, {}, {}  # per optimizer: one entry per seed
for name, make in race_optimizers.items():
    runs = [race(make, seed) for seed in race_seeds]
    race_curves[name] = torch.tensor([smooth(losses) for losses, _ in runs])  # [seeds, steps]
    race_final[name] = race_curves[name][:, -1]
    race_acc[name] = torch.tensor([acc for _, acc in runs])
    report.record(f"MNIST test accuracy after {MNIST_STEPS} steps, {name} (mean of {RACE_SEEDS} seeds)",
                  100 * race_acc[name].mean().item(), "%", digits=2)
    loss, acc = race_final[name], race_acc[name]
    print(f"{name:11s} final training loss (last {SMOOTH} steps) {loss.mean():.3f} [{loss.min():.3f}, {loss.max():.3f}]"
          f"   test accuracy {acc.mean():.2%} [{acc.min():.2%}, {acc.max():.2%}]   ({RACE_SEEDS} seeds: mean [min, max])")

# %%
fig, ax = plt.subplots(figsize=(9, 3))
for name, curves_per_seed in race_curves.items():
    ax.plot(curves_per_seed.mean(dim=0), color=colors[name], lw=1.2, label=name)
    ax.fill_between(range(MNIST_STEPS), curves_per_seed.min(dim=0).values, curves_per_seed.max(dim=0).values,
                    color=colors[name], alpha=0.2, lw=0)
ax.set(yscale="log", xlabel="step", ylabel=f"training loss ({SMOOTH}-step average)",
       title=f"MNIST MLP, batch {BATCH_SIZE}, {RACE_SEEDS} seeds (band: min to max)")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# Measured over the seeds (the next cell checks each statement):
#
# - Plain SGD is last in every seed, by a wide margin at this budget: its
#   best seed ends more than `SGD_MARGIN` above every other optimizer's
#   worst seed (the margin is printed below).
# - SGD with a ten times larger learning rate closes most of that gap to
#   momentum (more than `MIN_GAP_CLOSED` of it in every seed): on this
#   problem much of what momentum buys is simply a longer effective step,
#   η / (1 − μ). (On the Rosenbrock
#   valley that trick was not available: 2.1× already diverged.)
# - At these learning rates momentum ends below Adam in every seed: its
#   worst seed is below Adam's best. With one
#   untuned learning rate per optimizer that is a statement about these
#   settings, not a ranking of the optimizers.
# - AdamW with its weight decay of 0.01 is almost indistinguishable from
#   Adam over so few steps (its curve hides Adam's): the decay shrinks the
#   weights by a factor (1 − lr × λ) = (1 − 1e-5) per step; what that adds
#   up to over `MNIST_STEPS` steps is printed below.

# %%
sgd_gap_closed = (race_final["SGD"] - race_final["SGD, lr x10"]) / (race_final["SGD"] - race_final["momentum"])
adamw_vs_adam = (race_final["AdamW"] - race_final["Adam"]).abs().max().item()
sgd_vs_adam = (race_final["SGD"] - race_final["Adam"]).min().item()
others_worst = max(race_final[name].max().item() for name in race_optimizers if name != "SGD")
sgd_margin = race_final["SGD"].min().item() - others_worst
momentum_lead = race_final["Adam"].min().item() - race_final["momentum"].max().item()
print(f"plain SGD's best seed minus the worst seed of any other optimizer: {sgd_margin:.3f}; "
      f"Adam's best seed minus momentum's worst: {momentum_lead:.3f}")
decay_shrink = 1 - (1 - MNIST_ADAM_LR * 0.01) ** MNIST_STEPS
print(f"share of the SGD-to-momentum gap closed by lr x10, per seed: {[f'{v:.0%}' for v in sgd_gap_closed.tolist()]}")
print(f"largest |AdamW - Adam| final loss over the seeds: {adamw_vs_adam:.4f} (SGD - Adam, smallest: {sgd_vs_adam:.3f}); "
      f"AdamW's decay alone shrinks a weight by {decay_shrink:.2%} in {MNIST_STEPS} steps")
_ = report.record("share of the SGD-momentum gap closed by SGD at lr/(1-mu), worst seed", 100 * sgd_gap_closed.min().item(), "%", digits=0)
for name in race_optimizers:
    assert (race_final[name] < MNIST_MAX_LOSS).all(), (
        f"{name} ended at a training loss of {race_final[name].max():.3f} in some seed, above {MNIST_MAX_LOSS}"
    )
for name in race_optimizers:
    if name != "SGD":
        assert (race_final[name] < race_final["SGD"]).all(), f"{name} should end below plain SGD in every seed"
assert (sgd_gap_closed > MIN_GAP_CLOSED).all(), (
    f"SGD at lr / (1 - mu) should close more than {MIN_GAP_CLOSED:.0%} of the gap to momentum in every seed"
)
assert sgd_margin > SGD_MARGIN, (
    f"plain SGD's best seed should end more than {SGD_MARGIN} above every other optimizer's worst seed, "
    f"margin {sgd_margin:.3f}"
)
assert momentum_lead > MOMENTUM_LEAD, (
    f"at these learning rates momentum's worst seed should end below Adam's best seed, lead {momentum_lead:.3f}"
)
assert adamw_vs_adam < MAX_ADAMW_GAP * sgd_vs_adam, "AdamW and Adam should be almost indistinguishable at this budget"

# %% [markdown]
# ## Pitfalls
#
# ### 1. Passing the same generator to two optimizers
#
# `model.parameters()` returns a *generator*, which can be read only once.
# An optimizer reads it to the end, so a second optimizer (or a second
# parameter group) built from the same object gets nothing:

# %%
# NBVAL_CHECK_OUTPUT
params = net.parameters()
sgd = torch.optim.SGD(params, lr=0.1)
try:
    adam = torch.optim.Adam(params, lr=1e-3)
except ValueError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# **Fix:** call `model.parameters()` again each time, or turn it into a list
# once, `params = list(model.parameters())`, which can be read many times.
#
# ### 2. Forgetting the parentheses
#
# `model.parameters` without `()` is the method, not the parameters:

# %%
# NBVAL_CHECK_OUTPUT
try:
    torch.optim.SGD(net.parameters, lr=0.1)
except TypeError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# ### 3. The same parameter in two groups
#
# Building groups by hand makes it easy to list a parameter twice, for
# example "all parameters with `lr=1e-3`" plus "the head with `lr=1e-2`".
# Which learning rate should the head get? PyTorch refuses to guess:

# %%
# NBVAL_CHECK_OUTPUT
try:
    torch.optim.SGD([{"params": net.parameters()}, {"params": head.parameters(), "lr": 1e-2}], lr=1e-3)
except ValueError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# **Fix:** make the groups disjoint, e.g. split by name or by identity:

# %%
# NBVAL_CHECK_OUTPUT
head_ids = {id(p) for p in head.parameters()}
rest = [p for p in net.parameters() if id(p) not in head_ids]
fixed = torch.optim.SGD([{"params": rest}, {"params": head.parameters(), "lr": 1e-2}], lr=1e-3)
print("groups:", [(len(g["params"]), g["lr"]) for g in fixed.param_groups])

# %% [markdown]
# ### 4. Loading a state_dict into a differently grouped optimizer
#
# An optimizer `state_dict` refers to parameters by position in its groups,
# so it only loads into an optimizer built with the same groups in the same
# order. Our checkpoint came from a one-group Adam:

# %%
# NBVAL_CHECK_OUTPUT
other_model, _ = make_model_and_optimizer()
two_groups = torch.optim.Adam([{"params": other_model[0].parameters()}, {"params": other_model[2].parameters()}], lr=1e-2)
try:
    two_groups.load_state_dict(checkpoint["optimizer"])
except ValueError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# **Fix:** build the optimizer exactly as when it was saved (same groups,
# same parameter order: keep the code that builds it in one function, as
# `make_model_and_optimizer` does above), then load.
#
# ### 5. Moving the model after creating the optimizer
#
# A common rule says to move the model to the GPU *before* creating the
# optimizer. For an optimizer that has not stepped yet it does not matter:
# `Module.to()` replaces each parameter's `.data` and keeps the same
# `Parameter` objects (unless
# `torch.__future__.set_overwrite_module_params_on_conversion(True)` is
# set), so an optimizer created first still holds the right tensors. The
# move below goes to `device` when it is an accelerator, and to float64 on
# a CPU-only machine, which exercises the same code path:

# %%
move_to = device if device.type != "cpu" else torch.float64
moving = nn.Linear(4, 2)
opt_first = torch.optim.SGD(moving.parameters(), lr=0.1)
moving.to(move_to)
same_object = opt_first.param_groups[0]["params"][0] is moving.weight
print(f"moved to {move_to}; optimizer still holds the model's weight: {same_object}")
moving(torch.randn(3, 4).to(moving.weight)).sum().backward()
opt_first.step()
print("step ran; weight", moving.weight.dtype, "on", moving.weight.device.type)
assert same_object, "Module.to() should keep the same Parameter objects"

# %% [markdown]
# What is *not* fine is moving the model after the optimizer has state (m,
# v, momentum buffers): `Module.to()` does not touch the optimizer, so its
# state stays where it was, and the next step mixes the two. On a CPU-only
# machine (the float64 move) that step fails with a dtype mismatch, and the
# cell asserts it. On an accelerator the cell asserts only that the state
# was left on the old device; what the step then does (an error, or an
# implicit copy on some code paths) depends on the device and the
# implementation, so the cell prints it rather than asserting it:

# %%
late = nn.Linear(4, 2)
opt_late = torch.optim.Adam(late.parameters(), lr=0.1)
late(torch.randn(3, 4)).sum().backward()
opt_late.step()  # now exp_avg and exp_avg_sq exist, in float32 on the CPU
late.to(move_to)
state_of = opt_late.state[late.weight]["exp_avg"]
print(f"after .to({move_to}): weight {late.weight.dtype} on {late.weight.device.type}"
      f" | exp_avg {state_of.dtype} on {state_of.device.type}")
opt_late.zero_grad()
late(torch.randn(3, 4).to(late.weight)).sum().backward()
state_left_behind = (state_of.dtype, state_of.device) != (late.weight.dtype, late.weight.device)
late_error = None
try:
    opt_late.step()
    print("step ran without an error; exp_avg now", opt_late.state[late.weight]["exp_avg"].device.type)
except Exception as err:  # noqa: BLE001 - the error type depends on the device
    late_error = err
    print(f"{type(err).__name__}: {err}")
reloaded = torch.optim.Adam(late.parameters(), lr=0.1)
reloaded.load_state_dict(opt_late.state_dict())
reloaded_state = reloaded.state[late.weight]["exp_avg"]
print(f"after load_state_dict: exp_avg {reloaded_state.dtype} on {reloaded_state.device.type}")
assert state_left_behind, ".to() on the model should leave the optimizer's state where it was"
if device.type == "cpu":
    assert isinstance(late_error, RuntimeError), "a step with float32 state and float64 parameters should fail"
assert (reloaded_state.dtype, reloaded_state.device) == (late.weight.dtype, late.weight.device), (
    "load_state_dict should cast the state to each parameter's dtype and device"
)

# %% [markdown]
# **Fix:** move the model first and create the optimizer after, or save the
# optimizer's `state_dict` and load it into one built for the moved model:
# `load_state_dict` casts the floating-point state to each parameter's
# device and dtype.
#
# ## Exercises
#
# Each exercise has a stub for you to fill in, then a checker cell. The
# checker prints **PASSED**, **NOT YET** with a hint, or **TODO** while the
# stub still raises `NotImplementedError`; it never stops the notebook. If
# you are stuck, `solution("10.sgd_step")` returns the reference solution.
#
# ### Exercise 1: SGD with momentum, by hand
#
# Write `sgd_step(param, grad, buf, lr, momentum, weight_decay, nesterov)`,
# one step of `torch.optim.SGD` (with its default `dampening=0`) for one
# tensor. `buf` is the momentum buffer after the previous step, or `None`
# before the first step. Return `(new_param, new_buf)` as new tensors
# (none of them one of the inputs or a view of one), leaving `param`, `grad`
# and `buf` unchanged; with `momentum == 0` return `(new_param, None)`. Use
# the table at the top of the chapter, and remember that SGD's weight decay
# is L2: `weight_decay * param` is added to the gradient first. Write the
# update with tensor arithmetic: `torch.optim.SGD`, the functions of
# `torch.optim.sgd` (public or private) and `torch._fused_sgd_` are refused.
# The checker compares you with `torch.optim.SGD` over several steps,
# changing `lr` between them as a scheduler would.


# %%
def sgd_step(param, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
    """Return (new_param, new_buf) after one torch.optim.SGD step, as new tensors (the inputs left unchanged, none returned)."""
    raise NotImplementedError


# %%
result = check("10.sgd_step", sgd_step)
if result.passed:  # replay the momentum path on the Rosenbrock function with your step
    p, buf = torch.tensor(START), None
    for _ in range(TRAJ_STEPS):
        q = p.clone().requires_grad_(True)
        rosenbrock(q).backward()
        p, buf = sgd_step(p, q.grad, buf, SGD_LR, MOMENTUM)
    print(f"your momentum path ends {(p - paths['momentum'][-1]).abs().max().item():.1e} from torch's")

# %% [markdown]
# ### Exercise 2: decay and no-decay groups for any model
#
# Write `decay_param_groups(model, weight_decay)` that returns two parameter
# groups, `[{"params": decay, "weight_decay": weight_decay}, {"params":
# no_decay, "weight_decay": 0.0}]`. Use a rule that needs no list of layer
# types: parameters with 2 or more dimensions (weight matrices, convolution
# kernels, embeddings) decay; those with fewer (biases, norm scales and
# shifts) do not. Leave out frozen parameters (`requires_grad=False`), and
# list each parameter once, even one shared by two modules (tied weights).
# The checker uses a model whose layers have neutral names (`a`, `b`, ...),
# with an embedding tied to the output layer, BatchNorm, LayerNorm, RMSNorm,
# a PReLU (its learned slopes are a 1-D weight that is neither a bias nor a
# norm), a Linear without bias, and a frozen layer: decide by shape, not by
# name.


# %%
def decay_param_groups(model, weight_decay):
    """Return [decay group, no-decay group] for torch.optim.AdamW."""
    raise NotImplementedError


# %%
result = check("10.decay_groups", decay_param_groups)
if result.passed:
    groups = decay_param_groups(net, 0.1)
    print("for this chapter's net:", [(len(g["params"]), g["weight_decay"]) for g in groups])

# %% [markdown]
# ## Summary
#
# - An optimizer turns `.grad` into a parameter update. SGD steps along −g;
#   momentum along a running sum of gradients (η outside the buffer in
#   PyTorch); Nesterov along g + μb; Adam along m̂ / (√v̂ + ε), about `lr`
#   per element whatever the gradient's scale.
# - On an ill-conditioned valley (Rosenbrock), plain SGD at a learning rate
#   near its stability limit crawls, and a larger one bounces or diverges;
#   momentum and Adam get much closer in the same number of steps. On MNIST,
#   over several seeds, plain SGD is last too, and a ten times larger SGD
#   learning rate closes most of its gap to momentum.
# - `Adam(weight_decay=λ)` is L2: the decay passes through the division by
#   √v̂, so it depends on the gradient's scale. `AdamW` (or
#   `Adam(decoupled_weight_decay=True)`) shrinks every weight by (1 − ηλ) per
#   step. We derived both by hand and matched `torch.optim` to float32
#   precision.
# - `param_groups` carry per-group hyperparameters; the usual split exempts
#   biases and norm weights from weight decay, and a parameter may be in only
#   one group.
# - `optimizer.state_dict()` holds per-parameter state (Adam: `step`,
#   `exp_avg`, `exp_avg_sq`) and the groups; restoring it makes training
#   continue bit for bit, while a fresh optimizer does not.
# - `zero_grad()` sets `.grad` to `None` by default, and optimizers skip
#   such parameters; with zero tensors, momentum, weight decay and Adam still
#   move them.
# - `foreach` and `fused` change how the update is computed, not what
#   (checked to float32 rounding); without either flag `torch.optim` uses
#   `foreach` when every parameter is on CUDA and a `for` loop otherwise.
#   Gradient clipping happens between `backward()` and `step()` (chapter 15).
#
# **Next:** chapter 11 changes `group["lr"]` during training with
# learning-rate schedules (step, cosine, warm-up, OneCycle) and shows the
# right order of `optimizer.step()` and `scheduler.step()`.

# %%
print(f"notebook ran in {time.perf_counter() - notebook_start:.0f} s")
report.finish()
