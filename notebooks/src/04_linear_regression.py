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
# # 04 · Linear regression from scratch
#
# We fit a straight line, `y = w·x + b`, to noisy points three times over. Each
# version hands one more job to PyTorch, so you can see exactly what each
# piece of the library does for you:
#
# 1. **manual gradients**: we derive dL/dw and dL/db with pen and paper and
#    apply them ourselves;
# 2. **autograd**: PyTorch computes the same gradients with `backward()`;
# 3. **`nn.Linear` + `torch.optim.SGD` + `nn.MSELoss`**: the form every later
#    chapter uses, built around the *five-step training loop*.
#
# Then we vary two choices that every training run makes: the learning rate
# (too small crawls, too large diverges, and the data decide where the limit
# lies), and how many samples each step looks at (all of them, or a
# mini-batch).
#
# **What you will learn**
# - how gradient descent fits a model, and the MSE gradients behind it;
# - `requires_grad`, `backward()`, why updates happen under `torch.no_grad()`,
#   and why gradients must be zeroed;
# - the five-step loop: forward, loss, `zero_grad`, `backward`, `step`;
# - why a learning rate is slow, right or divergent: the stability limit
#   2/λ_max, computed from the data;
# - full-batch gradient descent versus mini-batch stochastic gradient
#   descent (SGD), and what an epoch is;
# - three classic mistakes, reproduced with their real symptoms.
#
# **Prerequisites:** chapters 01 (tensors, broadcasting), 02 (autograd) and
# 03 (`nn.Module`).
#
# **Estimated time:** 45 minutes.

# %% tags=["parameters"]
N_SAMPLES = 1000  # number of (x, y) points
STEPS = 150  # gradient-descent steps for each version
LR = 0.1  # learning rate
NOISE_STD = 0.5  # standard deviation of the Gaussian noise added to y
TOLERANCE = 0.1  # how close the fitted w and b must come to the true 3 and 2
CONVERGED = 0.01  # a run has "converged" when its loss is within this fraction of the noise floor
SWEEP_LRS = (1e-3, 1e-2, 1e-1)  # the learning-rate sweep; it adds 0.5, 0.9 and 1.1 times the stability limit
BATCH_SIZE = 20  # samples per mini-batch in the mini-batch SGD comparison
SGD_EPOCHS = 20  # passes over the data for both methods in that comparison
SLOW_KEPT = 0.5  # the smallest sweep rate must still hold more than this share of its excess loss after STEPS steps
JITTER_SE = (0.7, 3.0)  # mini-batch SGD's parameter jitter at LR must lie between these many standard errors
JITTER_CHAINS = 64  # independent mini-batch SGD runs over which the parameter jitter is measured
JITTER_RATIO = (2.0, 5.0)  # jitter at LR over jitter at LR/10 must lie in this range (theory: √10 ≈ 3.2)
SGD_WIN_FACTOR = 3  # mini-batch SGD must converge in at most 1/this many epochs as the best full-batch rate
FLAT_B_TOLERANCE = 1e-3  # after training on the broadcast loss (pitfall 3), b must be this close to mean(y)
SGD_STEP_RATIO = (0.5, 2.0)  # at the same LR, mini-batch steps to converge over full-batch steps must lie in this range
SEED = 0

# %% [markdown]
# ## Setup

# %%
import warnings

import matplotlib.pyplot as plt
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import helpers.plotting  # noqa: F401  (small, 72-dpi figure defaults)
from helpers.device import pick_device, seed_everything
from helpers.exercises import check, solution  # noqa: F401  (solution: for when you are stuck)
from helpers.report import ChapterReport

generator = seed_everything(SEED)
device = pick_device()
report = ChapterReport("04_linear_regression")
print(f"torch {torch.__version__}, device {device}")

# %% [markdown]
# Each training step here is a handful of operations on a thousand numbers,
# far too little work to keep an accelerator busy, so this chapter keeps
# every tensor on the CPU, whatever `pick_device` found. Chapter 05 moves its
# model and data to `device` for training.

# %% [markdown]
# ## The data
#
# We make the data ourselves, so we know the answer: `y = 3x + 2` plus Gaussian
# noise of standard deviation `NOISE_STD`, with `x` drawn uniformly from
# [-1, 1]. Both tensors have shape `[N, 1]`: one row per sample, one column
# per feature. That is the layout `nn.Linear` expects, and keeping `y` in the
# same shape as the predictions avoids a nasty broadcasting bug (see
# *Pitfalls*).

# %%
# NBVAL_CHECK_OUTPUT
TRUE_W, TRUE_B = 3.0, 2.0
x = torch.rand(N_SAMPLES, 1, generator=generator) * 2 - 1
y = TRUE_W * x + TRUE_B + NOISE_STD * torch.randn(N_SAMPLES, 1, generator=generator)
print("x:", tuple(x.shape), x.dtype, " y:", tuple(y.shape), y.dtype)

# %% [markdown]
# Even the true line does not fit these points exactly: its loss is the mean
# of the squared noise we added, about `NOISE_STD² = 0.25`. We call it the
# **noise floor**. No line can do much better, so it is the yardstick for
# "converged" below: a loss within `CONVERGED` (1 %) of it.

# %%
noise_floor = ((TRUE_W * x + TRUE_B - y) ** 2).mean().item()
print(f"noise floor (the MSE of the true line on these points): {noise_floor:.4f}")

# %% [markdown]
# How close can any method get to 3 and 2? With noise, the best-fitting line
# of *this* sample differs from the true one. Statistics gives the typical
# size of that difference, the standard error: about
# `NOISE_STD / (sqrt(N) · std(x))` for the slope and `NOISE_STD / sqrt(N)` for
# the intercept. Our `TOLERANCE` should be several standard errors, so that
# the checks below test the training code and not the luck of the draw.

# %%
se_w = NOISE_STD / (N_SAMPLES**0.5 * x.std().item())
se_b = NOISE_STD / N_SAMPLES**0.5
print(f"standard error of w ≈ {se_w:.3f}, of b ≈ {se_b:.3f}; TOLERANCE = {TOLERANCE}")
print(f"TOLERANCE is {TOLERANCE / se_w:.1f} standard errors of w and {TOLERANCE / se_b:.1f} of b")

# %% [markdown]
# All three versions start from the same point, `w = 0` and `b = 0`, and take
# the same `STEPS` steps with the same learning rate. They compute the same
# numbers in slightly different ways, so their loss curves should lie on top
# of each other. We will check that.

# %%
W0, B0 = 0.0, 0.0

# %% [markdown]
# ## Version 1: gradients by hand
#
# The model predicts $\hat y_i = w x_i + b$. The loss is the mean squared
# error (MSE) over the $N$ samples:
#
# $$L(w, b) = \frac{1}{N} \sum_{i=1}^{N} (w x_i + b - y_i)^2 .$$
#
# Write $r_i = w x_i + b - y_i$ for the residual of sample $i$. By the chain
# rule, $\partial r_i^2 / \partial w = 2 r_i \cdot \partial r_i / \partial w = 2 r_i x_i$
# and $\partial r_i^2 / \partial b = 2 r_i \cdot 1$. Averaging over the samples:
#
# $$\frac{\partial L}{\partial w} = \frac{2}{N} \sum_i r_i\, x_i ,
# \qquad
# \frac{\partial L}{\partial b} = \frac{2}{N} \sum_i r_i .$$
#
# The gradient points uphill, so *gradient descent* steps the other way,
# scaled by the learning rate: $w \leftarrow w - \text{LR} \cdot \partial L/\partial w$,
# and the same for $b$. Here `w` and `b` are plain tensors: PyTorch records
# nothing, and we do all the calculus ourselves.


# %%
def manual_gradients(w, b, x, y):
    """dL/dw and dL/db of the MSE, from the formulas above."""
    residual = w * x + b - y  # [N, 1]
    n = x.shape[0]
    return 2 / n * (residual * x).sum(), 2 / n * residual.sum()


w = torch.tensor(W0)
b = torch.tensor(B0)
manual_losses = []
for _step in range(STEPS):
    prediction = w * x + b
    loss = ((prediction - y) ** 2).mean()
    manual_losses.append(loss.item())
    dw, db = manual_gradients(w, b, x, y)
    w = w - LR * dw
    b = b - LR * db
w_manual, b_manual = w.item(), b.item()
print(f"manual:   w = {w_manual:.4f}, b = {b_manual:.4f}, final loss {manual_losses[-1]:.4f}")

# %% [markdown]
# The loss levels off at the noise floor, the part of `y` that no straight
# line can explain. It ends a hair *below* it: the best line for these
# particular points fits a little of their noise too. (The *Checks* assert
# that all three versions end within `CONVERGED` of the floor.)
#
# ## Version 2: autograd
#
# Deriving gradients by hand stops being practical once a model has more than
# a few parameters. Autograd (chapter 02) does it for us. We create `w` and
# `b` with `requires_grad=True`; PyTorch then records every operation on
# them, and `loss.backward()` walks that record backwards and stores
# dL/dw in `w.grad` and dL/db in `b.grad`.
#
# Before training, let us check that autograd agrees with our derivation at
# the starting point:

# %%
w = torch.tensor(W0, requires_grad=True)
b = torch.tensor(B0, requires_grad=True)
loss = ((w * x + b - y) ** 2).mean()
loss.backward()
dw_manual, db_manual = manual_gradients(w.detach(), b.detach(), x, y)
print(f"autograd: dL/dw = {w.grad.item():.5f}, dL/db = {b.grad.item():.5f}")
print(f"by hand:  dL/dw = {dw_manual.item():.5f}, dL/db = {db_manual.item():.5f}")
gradients_agree = torch.allclose(w.grad, dw_manual) and torch.allclose(b.grad, db_manual)
print("torch.allclose:", gradients_agree)

# %% [markdown]
# Two details in the training loop matter:
#
# - **The update runs under `torch.no_grad()`.** `w` is a *leaf* tensor that
#   requires grad: autograd owns it. Changing it in place while autograd is
#   recording is an error (see *Pitfalls*), and we do not want the update
#   itself to become part of the next step's graph anyway. Inside
#   `torch.no_grad()`, the subtraction is a plain change of value.
# - **The gradients are zeroed after each update.** `backward()` *adds* into
#   `.grad` rather than overwriting it (useful for accumulating gradients over
#   several batches, chapter 15). Forget to reset it and every step uses the
#   sum of all past gradients (see *Pitfalls*).
#
# We also compare autograd's gradient with the hand-derived one at every step.

# %%
w = torch.tensor(W0, requires_grad=True)
b = torch.tensor(B0, requires_grad=True)
autograd_losses = []
worst_gradient_gap = 0.0
for _step in range(STEPS):
    loss = ((w * x + b - y) ** 2).mean()
    autograd_losses.append(loss.item())
    loss.backward()  # fills w.grad and b.grad
    dw_manual, db_manual = manual_gradients(w.detach(), b.detach(), x, y)
    gap = max((w.grad - dw_manual).abs().item(), (b.grad - db_manual).abs().item())
    worst_gradient_gap = max(worst_gradient_gap, gap)
    gradients_agree = gradients_agree and torch.allclose(w.grad, dw_manual) and torch.allclose(b.grad, db_manual)
    with torch.no_grad():
        w -= LR * w.grad
        b -= LR * b.grad
    w.grad.zero_()
    b.grad.zero_()
w_autograd, b_autograd = w.item(), b.item()
print(f"autograd: w = {w_autograd:.4f}, b = {b_autograd:.4f}, final loss {autograd_losses[-1]:.4f}")
print(f"largest |autograd - manual| gradient difference over {STEPS} steps: {worst_gradient_gap:.1e}")

# %% [markdown]
# ## Version 3: `nn.Linear`, `nn.MSELoss` and `torch.optim.SGD`
#
# Now the library does everything but the loop:
#
# - `nn.Linear(1, 1)` holds the parameters (`weight` of shape `[1, 1]`,
#   `bias` of shape `[1]`) and computes `x @ weight.T + bias`;
# - `nn.MSELoss()` computes the mean squared error;
# - `torch.optim.SGD` performs the update `p -= lr * p.grad` for every
#   parameter, under `no_grad`, and `zero_grad()` resets the gradients.
#
# `nn.Linear` starts from random values; we set them to `W0` and `B0` so that
# all three versions begin at the same point.

# %%
model = nn.Linear(1, 1)
with torch.no_grad():
    model.weight.fill_(W0)
    model.bias.fill_(B0)
loss_fn = nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=LR)
print(model)
print({name: tuple(p.shape) for name, p in model.named_parameters()})

# %% [markdown]
# This is **the five-step loop**. Every training loop in this course, and in
# nearly all PyTorch code you will read, is these five lines:
#
# 1. **forward**: `prediction = model(x)`
# 2. **loss**: `loss = loss_fn(prediction, y)`
# 3. **zero_grad**: `optimizer.zero_grad()`, clearing last step's gradients
# 4. **backward**: `loss.backward()`, filling `.grad` of every parameter
# 5. **step**: `optimizer.step()`, updating the parameters from their `.grad`
#
# Steps 3 to 5 replace the `no_grad` block and the `.zero_()` calls of
# version 2. `zero_grad` may sit anywhere before `backward`: first in the
# loop, or last after `step` (as in PyTorch's "Optimizing Model Parameters"
# tutorial); what matters is that it runs before the next `backward`. By default it sets the gradients to `None`
# instead of filling them with zeros, which saves memory and a kernel launch
# (we print `.grad` after a `zero_grad()` below).

# %%
linear_losses = []
for _step in range(STEPS):
    prediction = model(x)  # 1. forward
    loss = loss_fn(prediction, y)  # 2. loss
    optimizer.zero_grad()  # 3. zero_grad
    loss.backward()  # 4. backward
    optimizer.step()  # 5. step
    linear_losses.append(loss.item())
w_linear, b_linear = model.weight.item(), model.bias.item()
print(f"nn.Linear: w = {w_linear:.4f}, b = {b_linear:.4f}, final loss {linear_losses[-1]:.4f}")

# %%
last_grad = model.weight.grad.clone()
print("after backward():  model.weight.grad =", model.weight.grad)  # tiny: the fit is near the minimum
optimizer.zero_grad()
print("after zero_grad(): model.weight.grad =", model.weight.grad)
assert last_grad.abs().item() < 1e-2, f"after {STEPS} steps the gradient should be tiny (it starts near -2), not {last_grad.item():.2e}"
assert model.weight.grad is None, "zero_grad() should set the gradients to None by default"

# %% [markdown]
# ## The three versions side by side
#
# The three loss curves overlap: the same starting point, the same gradients
# and the same updates give the same path. The dashed and dotted lines sit
# exactly on the solid one. The largest gap between any two curves is
# printed under the figure.

# %%
fig, (ax_loss, ax_fit) = plt.subplots(1, 2, figsize=(10, 3.6))
steps = range(1, STEPS + 1)
ax_loss.plot(steps, manual_losses, lw=5, alpha=0.35, label="1. manual gradients")
ax_loss.plot(steps, autograd_losses, "--", lw=2, label="2. autograd")
ax_loss.plot(steps, linear_losses, ":", lw=2.5, color="k", label="3. nn.Linear + SGD")
ax_loss.axhline(noise_floor, color="gray", lw=1, label="noise floor")
ax_loss.set(xlabel="step", ylabel="MSE loss", yscale="log", title="loss curves (they overlap)")
ax_loss.legend()
ax_loss.grid(alpha=0.3)

ax_fit.scatter(x[:, 0], y[:, 0], s=4, alpha=0.3, label="data")
line_x = torch.linspace(-1, 1, 2)
ax_fit.plot(line_x, TRUE_W * line_x + TRUE_B, color="gray", lw=4, alpha=0.6, label=f"truth: {TRUE_W:g}x + {TRUE_B:g}")
ax_fit.plot(line_x, w_linear * line_x + b_linear, "r--", lw=2, label=f"fit: {w_linear:.3f}x + {b_linear:.3f}")
ax_fit.set(xlabel="x", ylabel="y", title="data and fitted line")
ax_fit.legend()
plt.show()

curves = torch.tensor([manual_losses, autograd_losses, linear_losses])
largest_gap = (curves.max(dim=0).values - curves.min(dim=0).values).max().item()
print(f"largest gap between the three loss curves: {largest_gap:.1e}")

# %%
results = {
    "manual": (w_manual, b_manual),
    "autograd": (w_autograd, b_autograd),
    "nn.Linear": (w_linear, b_linear),
}
for name, (w_fit, b_fit) in results.items():
    print(f"{name:10s} w = {w_fit:.4f} (|w-3| = {abs(w_fit - TRUE_W):.4f})   b = {b_fit:.4f} (|b-2| = {abs(b_fit - TRUE_B):.4f})")
report.record("fitted w", w_linear)
report.record("fitted b", b_linear)
print(report)
errors_in_se = abs(w_linear - TRUE_W) / se_w, abs(b_linear - TRUE_B) / se_b
print(f"nn.Linear's fit is off by {errors_in_se[0]:.1f} standard errors in w and {errors_in_se[1]:.1f} in b")

# %% [markdown]
# The fitted line is not exactly `3x + 2`, and should not be: it is the best
# line for *these* noisy points, off by about one standard error (the checks
# require less than three). All three versions agree with each other to
# float precision.

# %% [markdown]
# ## Choosing the learning rate: slow, converging, divergent
#
# Every version above used `LR = 0.1`. Why that value? For linear
# regression, theory answers exactly, because the MSE is a *quadratic*
# function of the parameters θ = (w, b). Stack the inputs into the design
# matrix A = [x, 1] of shape `[N, 2]`, so that the predictions are A θ. Then
#
# $$L(\theta) = \frac{1}{N}\lVert A\theta - y\rVert^2, \qquad
# \nabla L = \frac{2}{N} A^\top (A\theta - y), \qquad
# H = \frac{2}{N} A^\top A ,$$
#
# where H, the **Hessian** (the matrix of second derivatives), is the same at
# every θ. One gradient-descent step changes the distance to the minimum θ*
# by a fixed matrix: θ − θ* ← (I − lr·H)(θ − θ*). Along each eigenvector of
# H, whose eigenvalue λ is the curvature of the loss in that direction, the
# distance is multiplied by (1 − lr·λ) at every step. It shrinks only when
# |1 − lr·λ| < 1, that is when 0 < lr < 2/λ. Every direction has to shrink,
# so gradient descent converges exactly when
#
# $$\text{lr} < \frac{2}{\lambda_{\max}} ,$$
#
# the **stability limit**. Above it, the steepest direction overshoots by
# more than it corrects, and the error grows by |1 − lr·λ_max| > 1 per step.
# Below it, the flattest direction sets the pace: it shrinks by only
# (1 − lr·λ_min) per step, so a tiny learning rate crawls.
#
# Here are H and its eigenvalues, computed from our data. We check the
# formula against autograd, which can differentiate the loss twice.
# `torch.func.jacrev(f)` returns a new function that computes the gradient
# of `f` (by reverse mode, as `backward()` does); applying `jacrev` to that
# function again gives the matrix of second derivatives.
# (`torch.func.hessian(f)` computes the same matrix with forward mode for
# the outer derivative; its documentation lists both.) We ask for H at two
# different points θ: for a quadratic loss both must equal 2/N·AᵀA.


# %%
def loss_of(theta):
    """The MSE of the line theta[0]·x + theta[1], as a function of theta [2]."""
    return ((theta[0] * x + theta[1] - y) ** 2).mean()


design = torch.cat([x, torch.ones_like(x)], dim=1)  # A = [x, 1], shape [N, 2]
hessian = 2 * design.T @ design / N_SAMPLES  # [2, 2]
points = {"θ = (0, 0)": torch.zeros(2), "θ = (3, 2)": torch.tensor([TRUE_W, TRUE_B])}
autograd_hessian = torch.func.jacrev(torch.func.jacrev(loss_of))  # theta [2] -> its Hessian [2, 2]
hessian_gaps = {name: (autograd_hessian(theta) - hessian).abs().max().item() for name, theta in points.items()}
lam_min, lam_max = torch.linalg.eigvalsh(hessian).tolist()  # eigvalsh: ascending, for symmetric matrices
lr_limit = 2 / lam_max
print("H = 2/N·AᵀA =", [[round(v, 4) for v in row] for row in hessian.tolist()])
for name, gap in hessian_gaps.items():
    print(f"autograd's Hessian at {name}: largest difference from 2/N·AᵀA {gap:.1e}")
print(f"eigenvalues: λ_min = {lam_min:.4f}, λ_max = {lam_max:.4f}")
print(f"stability limit 2/λ_max = {lr_limit:.4f}")
_ = report.record("stability limit 2/λ_max", lr_limit)

# %%
for name, gap in hessian_gaps.items():
    assert gap < 1e-5, f"autograd's Hessian at {name} differs from 2/N·AᵀA by {gap:.1e}"
assert abs(hessian[0, 0] - 2 / 3) < 0.1 and abs(hessian[0, 1]) < 0.1 and abs(hessian[1, 1] - 2) < 1e-6, (
    f"H = {hessian.tolist()} is not close to diag(2/3, 2), the value for x uniform on [-1, 1]"
)

# %% [markdown]
# H is almost diagonal: its entries are 2·mean(x²) ≈ 2/3 for w, exactly 2
# for b, and 2·mean(x) ≈ 0 off the diagonal (x is uniform on [-1, 1]). So
# the bias is the steepest direction, λ_max ≈ 2, and the limit is close to 1.
#
# Now the sweep. We train the same `nn.Linear` from the same start for the
# same `STEPS` steps with each rate of `SWEEP_LRS`, plus three rates derived
# from the limit: 0.5 × (that is 1/λ_max), 0.9 × and 1.1 × 2/λ_max.


# %%
def train_full_batch(lr, steps):
    """Full-batch gradient descent with nn.Linear and SGD from (W0, B0).

    Returns the loss on all samples before each step and after the last one
    (steps + 1 values), and the final (w, b).
    """
    line = nn.Linear(1, 1)
    with torch.no_grad():
        line.weight.fill_(W0)
        line.bias.fill_(B0)
    sgd = torch.optim.SGD(line.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = loss_fn(line(x), y)
        sgd.zero_grad()
        loss.backward()
        sgd.step()
        losses.append(loss.item())
    with torch.no_grad():
        losses.append(loss_fn(line(x), y).item())
    return losses, (line.weight.item(), line.bias.item())


def steps_to_converge(losses):
    """Index of the first loss within CONVERGED of the noise floor (None if it never gets there)."""
    return next((i for i, v in enumerate(losses) if v <= (1 + CONVERGED) * noise_floor), None)


sweep_lrs = [*SWEEP_LRS, 0.5 * lr_limit, 0.9 * lr_limit, 1.1 * lr_limit]
sweep = {lr: train_full_batch(lr, STEPS)[0] for lr in sweep_lrs}
initial_loss = sweep[sweep_lrs[0]][0]
print(f"{'lr':>8s} {'lr/limit':>9s} {'final loss':>11s}  steps to converge")
for lr, losses in sweep.items():
    reached = steps_to_converge(losses)
    print(f"{lr:8.4f} {lr / lr_limit:9.3f} {losses[-1]:11.4g}  {'not within ' + str(STEPS) if reached is None else reached}")

# %%
sweep_best = min(min(losses) for losses in sweep.values())  # L*, the lowest loss any run reached
fig, ax = plt.subplots(figsize=(9, 3.4))
for lr, losses in sweep.items():
    excess = (torch.tensor(losses, dtype=torch.float64) - sweep_best).clamp_min(1e-12)
    ax.plot(excess, lw=1.6, label=f"lr = {lr:.3g} ({lr / lr_limit:.3g} × limit)")
ax.set(xlabel="step", ylabel="excess loss L − L* (log scale)", yscale="log", ylim=(1e-9, 100 * initial_loss),
       title=f"the same regression, {STEPS} full-batch steps per learning rate")
ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# The plot shows the excess loss L − L*, the loss minus the lowest loss any
# run reached, on a log axis. There each component of the error shrinks by
# the factor |1 − lr·λ| per step, so the excess loss falls along a straight
# line whose slope is set by the slowest component, max |1 − lr·λ|, until it
# hits float32 rounding near 1e-7 of the loss (the floor of the converged
# curves). Three regimes, as the theory predicts:
#
# - **too small** (1e-3): after `STEPS` steps the loss is still far above
#   the floor (most of its starting excess is left: the share is printed
#   below);
# - **converging** (`LR` = 0.1 up to just below the limit): the loss
#   reaches the noise floor, and never goes up on the way (each error
#   component only shrinks);
# - **divergent** (just above the limit): after a first step down, the loss
#   blows up and leaves the top of the plot; its final value is in the
#   table.
#
# 0.01 sits in between: it removes most of the excess, slowly. The theory also
# bounds *how* slowly. The loss above its minimum L* is a weighted average
# of the components' squared errors, so after T steps it has kept between
# min(|1 − lr·λ|)^{2T} and max(|1 − lr·λ|)^{2T} of its starting excess, the
# min and max taken over the two eigenvalues λ_min and λ_max. (For the two
# slow rates, lr·λ < 1, so these are (1 − lr·λ_max)^{2T} and (1 − lr·λ_min)^{2T}.) We
# take L* as the lowest loss any run reached (the final losses of the
# converged runs agree to within 0.01 %) and check the two slow rates
# against those bounds:

# %%
best_loss = min(min(losses) for losses in sweep.values())
converged_finals = [losses[-1] for lr, losses in sweep.items() if LR <= lr < lr_limit]
spread = (max(converged_finals) - min(converged_finals)) / best_loss
print(f"L* = {best_loss:.6f}; the converged runs' final losses differ by {spread:.1e} of it")
assert spread < 1e-4, f"the converged runs should agree on the minimum, but differ by {spread:.1e}"
theory = {}
for lr in sweep_lrs[:2]:
    kept = (sweep[lr][-1] - best_loss) / (initial_loss - best_loss)
    factors = [abs(1 - lr * lam) for lam in (lam_min, lam_max)]
    low, high = min(factors) ** (2 * STEPS), max(factors) ** (2 * STEPS)
    theory[lr] = (kept, low, high)
    print(f"lr = {lr:g}: kept {kept:.3f} of the excess loss after {STEPS} steps; theory: between {low:.3f} and {high:.3f}")

# %%
for lr, losses in sweep.items():
    stable = lr < lr_limit
    assert (losses[-1] < losses[0]) == stable, (
        f"lr = {lr:.4g} is {'below' if stable else 'above'} the limit {lr_limit:.4f}, but the loss went "
        f"from {losses[0]:.3g} to {losses[-1]:.3g}"
    )
    if stable:
        rises = sum(later > earlier + 1e-6 for earlier, later in zip(losses, losses[1:]))
        assert rises == 0, f"lr = {lr:.4g} is below the limit, yet the loss rose on {rises} steps"
    else:
        assert losses[1] < losses[0], f"lr = {lr:.4g}: the first step should still lower the loss ({losses[0]:.3g} -> {losses[1]:.3g})"
for lr, (kept, low, high) in theory.items():
    assert low - 1e-3 <= kept <= high + 1e-3, f"lr = {lr:g} kept {kept:.4f} of its excess loss, outside the theory's [{low:.4f}, {high:.4f}]"
kept_slow, kept_middle = theory[SWEEP_LRS[0]][0], theory[SWEEP_LRS[1]][0]
assert kept_slow > SLOW_KEPT, (
    f"lr = {SWEEP_LRS[0]:g} should still hold more than {SLOW_KEPT:.0%} of its excess loss, but kept only {kept_slow:.2f}"
)
assert kept_middle < SLOW_KEPT < kept_slow, (
    f"lr = {SWEEP_LRS[1]:g} should keep less than {SLOW_KEPT:.0%} of the excess ({kept_middle:.2f} kept), "
    f"lr = {SWEEP_LRS[0]:g} more ({kept_slow:.2f} kept)"
)
for lr in sweep_lrs:
    if LR <= lr < lr_limit:
        assert steps_to_converge(sweep[lr]) is not None, f"lr = {lr:.4g} did not converge within {STEPS} steps"
print("sweep checks passed")

# %% [markdown]
# The largest safe rate is not the fastest one. At 0.9 × the limit the error
# along the steepest direction flips sign every step and shrinks by only
# |1 − 1.8| = 0.8 per step, while lr = 1/λ_max removes it in a single step
# (1 − lr·λ_max = 0); the table shows 1/λ_max converging in fewer steps.
# The spread of the curvatures, the **condition number** λ_max/λ_min
# (printed below: λ_max/λ_min ≈ 2/0.69, close to 3, because the bias
# direction is three times steeper than the slope's for x uniform on
# [-1, 1]), decides how slowly the flattest direction must move when
# the steepest one has to stay stable. Chapter 10 meets optimizers designed
# around that problem.

# %%
fastest, edge = steps_to_converge(sweep[0.5 * lr_limit]), steps_to_converge(sweep[0.9 * lr_limit])
assert fastest is not None and edge is not None, (
    f"STEPS = {STEPS} is too few for lr = 1/λ_max ({fastest}) and 0.9 × the limit ({edge}) to converge; raise STEPS"
)
print(f"steps to converge: lr = 1/λ_max {fastest}, lr = 0.9 × limit {edge}; condition number {lam_max / lam_min:.2f}")
assert fastest < edge, f"lr = 1/λ_max took {fastest} steps, 0.9 × the limit {edge}: the larger rate should be slower here"
assert 2 < lam_max / lam_min < 4, f"the condition number should be close to 3 for x uniform on [-1, 1], not {lam_max / lam_min:.2f}"

# %% [markdown]
# ## Full-batch gradient descent and mini-batch SGD
#
# So far every step used all N samples. Three terms:
#
# - **full-batch gradient descent**: each step uses the gradient of the loss
#   over all N samples. It is exact, and costs a pass over the data per step.
# - **mini-batch stochastic gradient descent (SGD)**: each step uses the
#   gradient over a random batch of B samples. It is a noisy estimate of the
#   full gradient (right on average, off in any one step) computed from B/N
#   of the samples, so with B/N of the arithmetic (on a problem this small,
#   fixed per-step overheads dominate the wall time instead). With B = 1 it is SGD in the strict sense; in practice "SGD" means
#   mini-batches. `torch.optim.SGD` with its defaults (no momentum, weight
#   decay or dampening) is only the update rule `p -= lr * p.grad`, so it
#   serves both: what changes is the loss you call `backward()` on.
# - an **epoch**: one pass over the whole data set. Full-batch descent makes
#   one step per epoch; mini-batch SGD makes N/B steps.
#
# We give both the same budget, `SGD_EPOCHS` epochs (the same number of
# samples through the model), the same learning rate `LR` and the same start.
# A `DataLoader` over a `TensorDataset` deals out shuffled batches of
# `BATCH_SIZE`; chapter 05 uses the same pair for MNIST. After every step we
# also measure the loss on *all* the data, the number we care about.

# %%
full_batch_losses, _ = train_full_batch(LR, SGD_EPOCHS)  # one step per epoch

line = nn.Linear(1, 1)
with torch.no_grad():
    line.weight.fill_(W0)
    line.bias.fill_(B0)
sgd = torch.optim.SGD(line.parameters(), lr=LR)
batches = DataLoader(TensorDataset(x, y), batch_size=BATCH_SIZE, shuffle=True, generator=torch.Generator().manual_seed(SEED))
with torch.no_grad():
    sgd_losses = [loss_fn(line(x), y).item()]  # the loss on all samples, before each step and after the last
batch_losses = []  # the loss on each step's mini-batch: what a training loop sees
for _epoch in range(SGD_EPOCHS):
    for x_batch, y_batch in batches:
        loss = loss_fn(line(x_batch), y_batch)
        sgd.zero_grad()
        loss.backward()
        sgd.step()
        batch_losses.append(loss.item())
        with torch.no_grad():
            sgd_losses.append(loss_fn(line(x), y).item())
w_sgd, b_sgd = line.weight.item(), line.bias.item()
steps_per_epoch = len(batches)
print(f"full batch: {SGD_EPOCHS} epochs = {SGD_EPOCHS} steps; mini-batch: {SGD_EPOCHS} epochs = "
      f"{SGD_EPOCHS * steps_per_epoch} steps of {BATCH_SIZE} samples")


def epochs_to_converge(losses, steps_per_epoch):
    """Epochs until the loss is first within CONVERGED of the noise floor (inf if never)."""
    reached = steps_to_converge(losses)
    return float("inf") if reached is None else reached / steps_per_epoch


sgd_epochs = epochs_to_converge(sgd_losses, steps_per_epoch)
full_epochs = epochs_to_converge(full_batch_losses, 1)
sgd_steps = steps_to_converge(sgd_losses)  # steps, not epochs: the same count for both methods
full_steps = steps_to_converge(train_full_batch(LR, STEPS)[0])  # full batch at the same LR, given STEPS steps
best_sweep_epochs = min(epochs_to_converge(losses, 1) for lr, losses in sweep.items() if lr < lr_limit)
def epochs_text(epochs, budget):
    return f"{epochs:g}" if epochs != float("inf") else f"not within {budget}"


print(f"epochs to come within {CONVERGED:.0%} of the noise floor: mini-batch {epochs_text(sgd_epochs, SGD_EPOCHS)}, "
      f"full batch at lr = {LR:g} {epochs_text(full_epochs, SGD_EPOCHS)}, "
      f"full batch at the sweep's best rate {epochs_text(best_sweep_epochs, STEPS)}")
print(f"steps to converge at lr = {LR:g}: mini-batch {sgd_steps}, full batch {full_steps}")
_ = report.record("mini-batch SGD: epochs to converge", sgd_epochs)

# %%
fig, (ax_all, ax_end) = plt.subplots(1, 2, figsize=(10, 3.4))
sgd_epoch_axis = torch.arange(len(sgd_losses)) / steps_per_epoch
ax_all.plot(range(SGD_EPOCHS + 1), full_batch_losses, "o-", ms=3, label="full batch (1 step/epoch)")
ax_all.plot(sgd_epoch_axis, sgd_losses, lw=1, label=f"mini-batch, B = {BATCH_SIZE}")
ax_all.axhline(noise_floor, color="gray", lw=1, ls="--", label="noise floor")
ax_all.set(xlabel="epochs (passes over the data)", ylabel="loss on all samples (log)", yscale="log",
           title=f"same budget, same lr = {LR:g}")
ax_all.set_yticks([0.25, 0.5, 1, 2, 4, 8], labels=["0.25", "0.5", "1", "2", "4", "8"])
ax_all.yaxis.set_minor_formatter(plt.NullFormatter())
ax_all.legend(fontsize=8)
last = 5 * steps_per_epoch  # the last five epochs
ax_end.plot(sgd_epoch_axis[-last:], batch_losses[-last:], lw=0.8, alpha=0.5, color="tab:orange", label="loss on the mini-batch")
ax_end.plot(sgd_epoch_axis[-last:], sgd_losses[-last:], lw=1.5, color="tab:orange", label="loss on all samples")
ax_end.axhline(noise_floor, color="gray", lw=1, ls="--", label="noise floor")
ax_end.set(xlabel="epochs", ylabel="MSE loss", title="mini-batch SGD, last five epochs")
ax_end.legend(fontsize=8)
plt.show()

# %% [markdown]
# Counted in *steps*, the two methods are alike: at the same rate `LR`,
# mini-batch SGD needs about as many steps to reach the floor as full-batch
# descent (printed above; the check accepts a ratio in `SGD_STEP_RATIO`),
# because each noisy step moves the parameters about as far on average as
# an exact one. The win is the *cost* of a step: a mini-batch step looks at
# B samples instead of N, so one pass over the data buys N/B steps (50 with
# the defaults) instead of one. Counted in epochs, mini-batches therefore
# reach the floor within the first few epochs, while full-batch descent at
# `LR` does not get there within `SGD_EPOCHS`; even at the best rate of the
# sweep, a different and much larger one, full-batch descent needs at least
# `SGD_WIN_FACTOR` times more epochs (printed above; asserted below). The
# price is noise: the loss on all samples does not
# settle but jitters above its minimum, and the mini-batch loss that a
# training loop logs (faint line) jumps around far more, because each batch
# holds different points. (At the scale of the right panel the loss on all
# samples looks flat: its jitter is far smaller, as measured here.)

# %%
def fraction_of_rises(losses):
    """Fraction of steps after which the loss is higher than before."""
    pairs = list(zip(losses, losses[1:]))
    return sum(later > earlier + 1e-6 for earlier, later in pairs) / len(pairs)


sgd_tail = torch.tensor(sgd_losses[-steps_per_epoch:])
full_tail = torch.tensor(sweep[sweep_lrs[-2]][-steps_per_epoch:])  # a converged full-batch run, last steps
print(f"steps on which the loss on all samples went up: full batch {fraction_of_rises(full_batch_losses):.0%}, "
      f"mini-batch {fraction_of_rises(sgd_losses):.0%}")
print(f"std of the loss on all samples over the last {steps_per_epoch} steps: mini-batch {sgd_tail.std():.1e}, "
      f"converged full batch {full_tail.std():.1e}")
print(f"std of the mini-batch losses over the last epoch: {torch.tensor(batch_losses[-steps_per_epoch:]).std():.3f}")
print(f"final parameters: mini-batch w = {w_sgd:.4f}, b = {b_sgd:.4f}; full batch (version 3) w = {w_linear:.4f}, b = {b_linear:.4f}")
print(f"difference in standard errors: w {abs(w_sgd - w_linear) / se_w:.1f}, b {abs(b_sgd - b_linear) / se_b:.1f}")

# %%
assert sgd_epochs < full_epochs and SGD_WIN_FACTOR * sgd_epochs <= best_sweep_epochs, (
    f"mini-batch SGD took {sgd_epochs:g} epochs to converge, full batch {full_epochs:g} at lr = {LR:g} and "
    f"{best_sweep_epochs:g} at the sweep's best rate: mini-batches should need at most 1/{SGD_WIN_FACTOR} as many"
)
assert sgd_steps is not None and full_steps is not None, f"both methods should converge at lr = {LR:g} ({sgd_steps}, {full_steps})"
assert full_epochs == float("inf"), f"full batch at lr = {LR:g} should not converge within {SGD_EPOCHS} epochs ({full_epochs:g})"
low, high = SGD_STEP_RATIO
assert low <= sgd_steps / full_steps <= high, (
    f"at lr = {LR:g} mini-batch SGD took {sgd_steps} steps and full batch {full_steps}: per step they should be "
    f"alike (ratio {low} to {high}), the difference being only what a step costs"
)
assert fraction_of_rises(full_batch_losses) == 0, "full-batch descent below the limit should never raise the loss"
assert fraction_of_rises(sgd_losses) > 0.25, "mini-batch SGD's loss should go up on a good share of its steps"
assert sgd_tail.std() > 10 * full_tail.std(), "mini-batch SGD's loss should jitter far more than converged full-batch descent's"
assert torch.tensor(batch_losses[-steps_per_epoch:]).std() > 10 * sgd_tail.std(), (
    "the mini-batch losses should scatter far more than the loss on all samples"
)
print("mini-batch checks passed")

# %% [markdown]
# Mini-batch SGD ends close to the full-batch answer but not on it: with a
# constant learning rate every step still follows one batch, so the
# parameters keep jittering around the minimum. How far, and how does that
# depend on the learning rate? For batches drawn independently at random
# (with replacement), the standard result for a quadratic loss is that the
# stationary spread of the parameters grows like the square root of the
# learning rate: each step adds noise proportional to lr, while the pull back
# to the minimum per step is also proportional to lr, so the variance scales
# like lr²/lr = lr. A ten times smaller rate should shrink the jitter by
# about √10 ≈ 3.2.
#
# Measuring that takes care: at lr/10 the slope w relaxes over about
# 1/(lr·λ_min) ≈ 150 steps, so a window of a few hundred steps sees only a
# few independent swings and underestimates the spread. We therefore run
# `JITTER_CHAINS` independent chains side by side (w and b become vectors,
# one entry per chain, and each chain draws its own i.i.d. batch of
# `BATCH_SIZE` with `torch.randint`), let each rate settle for ten
# relaxation times, measure for ten more, and take the standard deviation
# of w and b over all chains and steps, in standard errors (the statistical
# uncertainty of the fit itself):


# %%
def iid_sgd_jitter(lr, chains):
    """Jitter (in standard errors) of ``chains`` independent mini-batch SGD runs with i.i.d. batches.

    All chains start at the full-batch fit, settle for ten relaxation times
    10/(lr·λ_min), and are then measured for as long again; the standard
    deviation pools every chain and every measured step.
    """
    w_chains = torch.full((chains,), w_linear, requires_grad=True)
    b_chains = torch.full((chains,), b_linear, requires_grad=True)
    chain_sgd = torch.optim.SGD([w_chains, b_chains], lr=lr)
    draws = torch.Generator().manual_seed(SEED + 1)
    settle = int(10 / (lr * lam_min))
    path = []
    for step in range(2 * settle):
        idx = torch.randint(N_SAMPLES, (chains, BATCH_SIZE), generator=draws)  # one batch per chain
        prediction = w_chains[:, None] * x[idx, 0] + b_chains[:, None]  # [chains, BATCH_SIZE]
        loss = ((prediction - y[idx, 0]) ** 2).mean(dim=1).sum()  # the sum: each chain gets its own gradient
        chain_sgd.zero_grad()
        loss.backward()
        chain_sgd.step()
        if step >= settle:
            path.append(torch.stack([w_chains, b_chains], dim=1).detach())
    std_w, std_b = torch.cat(path).std(dim=0).tolist()
    return settle, (std_w / se_w, std_b / se_b)


jitter = {}
for lr in (LR, LR / 10):
    settle, jitter[lr] = iid_sgd_jitter(lr, JITTER_CHAINS)
    print(f"lr = {lr:g}: {JITTER_CHAINS} chains, {settle} steps to settle and {settle} measured: jitter "
          f"w {jitter[lr][0]:.2f}, b {jitter[lr][1]:.2f} standard errors")
ratios = [fast / slow for fast, slow in zip(jitter[LR], jitter[LR / 10])]
print(f"jitter at lr = {LR:g} divided by jitter at lr = {LR / 10:g}: w {ratios[0]:.2f}, b {ratios[1]:.2f} "
      f"(√10 = {10**0.5:.2f})")
offsets = abs(w_sgd - w_linear) / se_w, abs(b_sgd - b_linear) / se_b
print(f"final parameters of the shuffled run (lr = {LR:g}) minus the full-batch fit, in standard errors: "
      f"w {offsets[0]:.1f}, b {offsets[1]:.1f}")
_ = report.record("jitter ratio lr / (lr/10), w", ratios[0])

# %%
low, high = JITTER_SE
assert all(low < j < high for j in jitter[LR]), (
    f"at lr = {LR:g} the parameters should jitter by {low} to {high} standard errors, not {jitter[LR]}"
)
assert max(offsets) < 3, f"mini-batch SGD ended {max(offsets):.1f} standard errors from the full-batch fit, more than its jitter explains"
low, high = JITTER_RATIO
assert all(low < r < high for r in ratios), (
    f"a ten times smaller learning rate should shrink the jitter by about √10 ({low} to {high}), not by {ratios}"
)

# %% [markdown]
# At the constant rate `LR` the parameters wander by about one to two and a
# half standard errors in this run (printed above; the check accepts the
# wider band `JITTER_SE`): as much as the
# uncertainty that the noise in the data puts on the best line itself. The
# final parameters of the shuffled run sit within three standard errors of
# the full-batch fit. A ten times smaller rate shrinks the jitter by a factor
# close to √10 (printed above; the checks accept `JITTER_RATIO`, since a
# finite number of correlated steps still leaves sampling noise in a
# standard deviation). That is why training schedules lower the learning
# rate towards the end (chapter 11). (The shuffled epochs of a `DataLoader`
# are not quite the i.i.d. case, since within one epoch every sample is used
# once; we measured only the i.i.d. one.) Real data sets have millions of samples, where a full-batch step
# would cost a pass over all of them: every model in the rest of the course
# trains on mini-batches.
#
# ## Checks
#
# The sections above assert their own claims as they go. These are the
# chapter's core claims: the three versions recover w ≈ 3 and b ≈ 2, reach
# the noise floor, and agree with each other.

# %%
for name, (w_fit, b_fit) in results.items():
    assert abs(w_fit - TRUE_W) < TOLERANCE, f"{name}: w = {w_fit:.4f} is not within {TOLERANCE} of {TRUE_W}"
    assert abs(b_fit - TRUE_B) < TOLERANCE, f"{name}: b = {b_fit:.4f} is not within {TOLERANCE} of {TRUE_B}"
    off_w, off_b = abs(w_fit - TRUE_W) / se_w, abs(b_fit - TRUE_B) / se_b
    assert max(off_w, off_b) < 3, f"{name}: the fit is {max(off_w, off_b):.1f} standard errors from the truth, more than luck explains"
for name, final_loss in [("manual", manual_losses[-1]), ("autograd", autograd_losses[-1]), ("nn.Linear", linear_losses[-1])]:
    assert abs(final_loss / noise_floor - 1) < CONVERGED, (
        f"{name}: final loss {final_loss:.4f} is not within {CONVERGED:.0%} of the noise floor {noise_floor:.4f}"
    )
    assert final_loss < noise_floor, f"{name}: the fitted line should end a hair below the noise floor, not at {final_loss:.5f}"
assert gradients_agree, "autograd's gradients differ from the hand-derived ones"
assert largest_gap < 1e-4, f"the three versions should follow the same path, but their losses differ by {largest_gap:.2e}"
print("all checks passed")

# %% [markdown]
# ## Pitfalls
#
# ### 1. Forgetting to zero the gradients
#
# `backward()` adds to `.grad`. Here is version 2 without the two `.zero_()`
# calls. For the first few steps we print what is stored in `w.grad` next to
# the true gradient at that point: the stored value is the running sum of
# every gradient so far.

# %%
w = torch.tensor(W0, requires_grad=True)
b = torch.tensor(B0, requires_grad=True)
no_zero_losses = []
sum_of_true = 0.0  # the sum of the true dL/dw over the steps so far
for step in range(STEPS):
    loss = ((w * x + b - y) ** 2).mean()
    no_zero_losses.append(loss.item())
    loss.backward()  # adds to whatever is already in w.grad
    if step < 4:
        true_dw, _ = manual_gradients(w.detach(), b.detach(), x, y)
        sum_of_true += true_dw.item()
        print(f"step {step}: w.grad = {w.grad.item():8.4f}   true dL/dw = {true_dw.item():8.4f}   "
              f"sum of the true ones so far = {sum_of_true:8.4f}")
        assert abs(w.grad.item() - sum_of_true) < 1e-4, "w.grad should hold the running sum of the true gradients"
    with torch.no_grad():
        w -= LR * w.grad
        b -= LR * b.grad
    # BUG: no w.grad.zero_() / b.grad.zero_() here
tail = no_zero_losses[-50:]
print(f"\nwithout zeroing: loss over the last 50 steps swings between {min(tail):.3f} and {max(tail):.3f}")
print(f"                 final w = {w.item():.4f}, b = {b.item():.4f}")
print(f"with zeroing:    loss settles at {autograd_losses[-1]:.3f}; w = {w_autograd:.4f}, b = {b_autograd:.4f}")

# %%
fig, ax = plt.subplots(figsize=(9, 3))
ax.plot(steps, autograd_losses, label="gradients zeroed\nevery step")
ax.plot(steps, no_zero_losses, label="gradients never\nzeroed")
ax.axhline(noise_floor, color="gray", lw=1, label="noise floor")
ax.set(xlabel="step", ylabel="MSE loss", yscale="log", title="forgetting zero_grad")
ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# The stored gradient is the sum of all past gradients, so each step keeps
# pushing in directions that were right several steps ago. The parameters
# overshoot and swing back and forth (it behaves like a heavy ball with no
# friction), and the loss never settles: whatever value it happens to have
# at the last step is luck, and `w` and `b` end wherever the swing left them.
# Nothing crashes, which is what makes this bug dangerous.
# **Fix:** call `optimizer.zero_grad()` (or `.grad.zero_()`) once per step,
# before `backward()`.

# %%
assert max(tail) > 2 * autograd_losses[-1], "without zeroing, the loss should keep swinging well above the fitted loss"

# %% [markdown]
# ### 2. Updating a parameter outside `torch.no_grad()`
#
# Writing the update as plain Python arithmetic fails straight away:

# %%
# NBVAL_CHECK_OUTPUT
w = torch.tensor(W0, requires_grad=True)
loss = ((w * x + TRUE_B - y) ** 2).mean()
loss.backward()
try:
    w -= LR * w.grad  # autograd is recording, and w is a leaf that requires grad
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")
else:
    raise AssertionError("an in-place update of a leaf that requires grad should raise while autograd records")

# %% [markdown]
# Autograd refuses in-place changes to a leaf that requires grad while it is
# recording: the change would have to become part of the graph, and the
# parameter would no longer be a leaf whose `.grad` is filled. Writing
# `w = w - LR * w.grad` does not raise, but it is worse: the new `w` is the
# *output* of an operation, not a leaf, so the next `backward()` does not
# fill its `.grad`:

# %%
# NBVAL_CHECK_OUTPUT
w_new = w - LR * w.grad
print("w_new.is_leaf:", w_new.is_leaf, "| w_new.grad_fn:", type(w_new.grad_fn).__name__)
w.grad = None
((w_new * x + TRUE_B - y) ** 2).mean().backward()
with warnings.catch_warnings(record=True) as caught:  # reading .grad of a non-leaf warns
    warnings.simplefilter("always")
    grad_after = w_new.grad
print("after the next backward(): w_new.grad is", grad_after, "| the gradient went to the old w:", w.grad is not None)
print("PyTorch warns:", str(caught[0].message).split(". ")[0] if caught else "nothing")
assert not w_new.is_leaf and grad_after is None and w.grad is not None, "w_new should be a non-leaf without .grad"
assert caught, "reading .grad of a non-leaf tensor should warn"

# %% [markdown]
# **Fix:** update under `with torch.no_grad():`, as in version 2, or let
# `optimizer.step()` do it, as in version 3.
#
# ### 3. Shapes that broadcast: `[N]` targets against `[N, 1]` predictions
#
# Targets often arrive as a flat vector `[N]` while `nn.Linear` predicts
# `[N, 1]`. `prediction - y` then broadcasts (chapter 01) to an `[N, N]`
# matrix: every prediction minus *every* target. The loss is a number, so the
# code runs, but it is the wrong number. `mse_loss` warns about it; we
# capture the warning to show it:

# %%
y_flat = y.squeeze(1)  # shape [N]
with torch.no_grad():
    prediction = model(x)  # shape [N, 1], from the trained model
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wrong_loss = nn.functional.mse_loss(prediction, y_flat)
    right_loss = nn.functional.mse_loss(prediction, y)
    print("broadcast shape:", tuple((prediction - y_flat).shape))
for warning in caught:
    print(f"{warning.category.__name__}: {warning.message}")
print(f"loss with y of shape [N]:    {wrong_loss.item():.4f}  (wrong)")
print(f"loss with y of shape [N, 1]: {right_loss.item():.4f}")

# %% [markdown]
# The wrong loss compares each prediction with every target, so it measures
# the spread of `y` rather than how well the line fits. Its minimum is a
# flat line: mean over i and j of (w·xᵢ + b − yⱼ)² is smallest when every
# prediction equals the mean of y, that is w = 0. Training on it really does
# flatten the line. We continue from the fitted line for `STEPS` more steps
# on the broadcast loss, using the first 100 points to keep it quick (the
# broadcast matrix has N² entries):

# %%
flattened = nn.Linear(1, 1)
with torch.no_grad():
    flattened.weight.fill_(w_linear)
    flattened.bias.fill_(b_linear)
flat_optimizer = torch.optim.SGD(flattened.parameters(), lr=LR)
x_few, y_few = x[:100], y_flat[:100]  # y_few has shape [100]: the bug
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the same broadcasting warning, once per step
    for _step in range(STEPS):
        loss = nn.functional.mse_loss(flattened(x_few), y_few)
        flat_optimizer.zero_grad()
        loss.backward()
        flat_optimizer.step()
w_flat, b_flat = flattened.weight.item(), flattened.bias.item()
print(f"before: w = {w_linear:.4f}, |b - mean(y)| = {abs(b_linear - y_few.mean().item()):.4f}")
print(f"after {STEPS} steps on the broadcast loss: w = {w_flat:.4f}, b = {b_flat:.4f}  (mean of y: {y_few.mean():.4f}, "
      f"|b - mean(y)| = {abs(b_flat - y_few.mean().item()):.4f})")

# %% [markdown]
# The slope has melted away, from about 3 to about 0, and the intercept has
# moved onto the mean of `y` (to within `FLAT_B_TOLERANCE`, from a start
# about 0.08 away; both gaps are printed above):
# the model now predicts the same number for every input. **Fix:** make the shapes
# match, with `y.unsqueeze(1)` or `prediction.squeeze(1)`, and check shapes
# when a loss looks strange.

# %%
assert len(caught) == 1 and "different to the input size" in str(caught[0].message)
assert wrong_loss > 10 * right_loss, "the broadcast loss should be far larger than the correct one"
assert abs(w_flat) < TOLERANCE, f"training on the broadcast loss should flatten the line, but w = {w_flat:.4f}"
# The fitted intercept already lies within TOLERANCE = 0.1 of mean(y) (this sample's mean(x) is near 0), so
# only a tolerance well below that start gap shows that training moved b onto mean(y).
assert abs(b_linear - y_few.mean().item()) > 10 * FLAT_B_TOLERANCE, "the start should be away from mean(y), or this check proves nothing"
assert abs(b_flat - y_few.mean().item()) < FLAT_B_TOLERANCE, f"b = {b_flat:.4f} should approach mean(y) = {y_few.mean():.4f}"

# %% [markdown]
# ## Exercises
#
# Each exercise has a stub for you to fill in, then a checker cell. The
# checker prints **PASSED**, **NOT YET** with a hint, or **TODO** while the
# stub still raises `NotImplementedError`; it never stops the notebook. If
# you are stuck, `solution("04.closed_form_fit")` returns the reference
# solution (read it with `inspect.getsource`).
#
# ### Exercise 1: the closed-form fit
#
# Gradient descent is general, but linear regression also has an exact
# answer: the θ = (w, b) that minimises ‖Aθ − y‖² with the design matrix
# `A` of the learning-rate section. PyTorch's least-squares solver,
# `torch.linalg.lstsq`, computes it (its documentation says which shapes it
# expects and what it returns). Write `closed_form_fit(x, y)` for 1-D
# tensors `x` and `y` of shape `[N]`, returning `(w, b)` as Python floats (the checker refuses tensors).
# The answer is the exact minimiser, so no gradient descent and no `torch.optim`
# optimizer (the checker refuses them: an iterative fit only approaches it).
# Then compare it with the three versions above.


# %%
def closed_form_fit(x, y):
    """Return (w, b), the least-squares line y ≈ w*x + b, for x and y of shape [N]."""
    raise NotImplementedError


# %%
result = check("04.closed_form_fit", closed_form_fit)

# %%
try:
    w_exact, b_exact = closed_form_fit(x.squeeze(1), y.squeeze(1))
except NotImplementedError:
    print("closed_form_fit is still a stub: fill it in to compare it with the three versions")
else:
    for name, (w_fit, b_fit) in results.items():
        print(f"{name:10s} w - w_exact = {w_fit - w_exact:+.1e}, b - b_exact = {b_fit - b_exact:+.1e}")

# %% [markdown]
# ### Exercise 2: MSE gradients with several features
#
# Generalise the hand derivation to `D` input features: `x` has shape
# `[N, D]`, `w` shape `[D]`, `b` is a 0-dim tensor, and the prediction is
# `x @ w + b` (shape `[N]`, like `y`). Write `mse_gradients(w, b, x, y)`
# returning `(dw, db)`, the gradients of `L = mean((x @ w + b - y)**2)`,
# derived by hand: the checker compares your answer with autograd's, and
# refuses an answer that calls autograd itself (`backward()`,
# `torch.autograd.grad`, `torch.func.grad`, ...) or that estimates the
# gradient by finite differences (evaluating the loss at nudged weights).
# Hint: the residual vector
# `r = x @ w + b - y` plays the same role as above, and a matrix product can
# do the sum over samples.


# %%
def mse_gradients(w, b, x, y):
    """Return (dw [D], db []) as tensors (db 0-dim, not a Python float): the gradients of mean((x @ w + b - y)**2), by hand."""
    raise NotImplementedError


# %%
result = check("04.mse_gradients", mse_gradients)

# %% [markdown]
# ## Summary
#
# - Gradient descent repeats: predict, measure the loss, compute the gradient,
#   step against it. For the MSE of a line, dL/dw = (2/N) Σ rᵢxᵢ and
#   dL/db = (2/N) Σ rᵢ, and autograd computes exactly these numbers.
# - Parameters are leaves with `requires_grad=True`; update them under
#   `torch.no_grad()` (or with an optimizer), and zero their gradients every
#   step, because `backward()` accumulates.
# - The five-step loop, forward, loss, `zero_grad`, `backward`, `step`, is
#   the core of all training in PyTorch.
# - On a quadratic loss, gradient descent converges exactly when
#   lr < 2/λ_max, the largest eigenvalue of the Hessian (here 2·AᵀA/N);
#   far below the limit it crawls, above it the loss explodes.
# - Full-batch descent takes one exact step per epoch; mini-batch SGD takes
#   N/B noisy ones. At the same rate both need about as many steps, but a
#   mini-batch step uses B/N of the samples, so per pass over the data SGD
#   gets much further; it ends jittering around the minimum rather than on it.
# - Check shapes: `[N]` against `[N, 1]` broadcasts silently to `[N, N]`.
#
# **Next:** chapter 05 runs the same five-step loop on real data: a
# multi-layer perceptron classifying MNIST digits, with the loop packaged in
# `helpers.training` so it can be reused.

# %%
report.finish()
