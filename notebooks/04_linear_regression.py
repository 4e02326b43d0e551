# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
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
# **What you will learn**
# - how gradient descent fits a model, and the MSE gradients behind it;
# - `requires_grad`, `backward()`, why updates happen under `torch.no_grad()`,
#   and why gradients must be zeroed;
# - the five-step loop: forward, loss, `zero_grad`, `backward`, `step`;
# - three classic mistakes, reproduced with their real symptoms.
#
# **Prerequisites:** chapters 01 (tensors, broadcasting), 02 (autograd) and
# 03 (`nn.Module`).
#
# **Estimated time:** 30 minutes.

# %% tags=["parameters"]
N_SAMPLES = 1000  # number of (x, y) points
STEPS = 150  # gradient-descent steps for each version
LR = 0.1  # learning rate
NOISE_STD = 0.5  # standard deviation of the Gaussian noise added to y
TOLERANCE = 0.1  # how close the fitted w and b must come to the true 3 and 2
SEED = 0

# %% [markdown]
# ## Setup

# %%
import warnings

import matplotlib.pyplot as plt
import torch
from torch import nn

from helpers.device import pick_device, seed_everything
from helpers.exercises import check, solution  # noqa: F401  (solution: for when you are stuck)
from helpers.report import ChapterReport

generator = seed_everything(SEED)
device = pick_device()
report = ChapterReport("04_linear_regression")
print(f"torch {torch.__version__}, device {device}")

# %% [markdown]
# Linear regression on a thousand points is far too small for an accelerator
# to help: launching work on a GPU costs more than the arithmetic. This
# chapter therefore keeps every tensor on the CPU, whatever `pick_device`
# found. Chapter 05 moves its model and data to `device` for training.

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
# The loss levels off near `NOISE_STD² = 0.25`: that is the noise we added,
# which no straight line can explain.
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
# nearly all PyTorch code you will read, is these five lines in this order:
#
# 1. **forward**: `prediction = model(x)`
# 2. **loss**: `loss = loss_fn(prediction, y)`
# 3. **zero_grad**: `optimizer.zero_grad()`, clearing last step's gradients
# 4. **backward**: `loss.backward()`, filling `.grad` of every parameter
# 5. **step**: `optimizer.step()`, updating the parameters from their `.grad`
#
# Steps 3 to 5 replace the `no_grad` block and the `.zero_()` calls of
# version 2. `zero_grad` may also come first in the loop; what matters is
# that it runs before `backward`. By default it sets the gradients to `None`
# instead of filling them with zeros, which saves memory and a kernel launch.

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
ax_loss.axhline(NOISE_STD**2, color="gray", lw=1, label="noise variance")
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

# %% [markdown]
# The fitted line is not exactly `3x + 2`, and should not be: it is the best
# line for *these* noisy points, off by about one standard error. All three
# versions agree with each other to float precision.
#
# ## Checks
#
# What this chapter claims, asserted:

# %%
for name, (w_fit, b_fit) in results.items():
    assert abs(w_fit - TRUE_W) < TOLERANCE, f"{name}: w = {w_fit:.4f} is not within {TOLERANCE} of {TRUE_W}"
    assert abs(b_fit - TRUE_B) < TOLERANCE, f"{name}: b = {b_fit:.4f} is not within {TOLERANCE} of {TRUE_B}"
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
for step in range(STEPS):
    loss = ((w * x + b - y) ** 2).mean()
    no_zero_losses.append(loss.item())
    loss.backward()  # adds to whatever is already in w.grad
    if step < 4:
        true_dw, _ = manual_gradients(w.detach(), b.detach(), x, y)
        print(f"step {step}: w.grad = {w.grad.item():8.4f}   true dL/dw = {true_dw.item():8.4f}")
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
ax.axhline(NOISE_STD**2, color="gray", lw=1, label="noise variance")
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
# the spread of `y` rather than how well the line fits. Training on it would
# flatten the line towards `w = 0`. **Fix:** make the shapes match, with
# `y.unsqueeze(1)` or `prediction.squeeze(1)`, and check shapes when a loss
# looks strange.

# %%
assert len(caught) == 1 and "different to the input size" in str(caught[0].message)
assert wrong_loss > 10 * right_loss, "the broadcast loss should be far larger than the correct one"

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
# answer. Stack the inputs into a design matrix `A = [x, 1]` of shape `[N, 2]`
# (the column of ones multiplies `b`). The least-squares solution of
# `A @ [w, b] ≈ y` is what `torch.linalg.lstsq(A, y.unsqueeze(1))` returns.
# Write `closed_form_fit(x, y)` for 1-D tensors `x` and `y` of shape `[N]`,
# returning `(w, b)` as Python floats. Then compare it with the three
# versions above.


# %%
def closed_form_fit(x, y):
    """Return (w, b), the least-squares line y ≈ w*x + b, for x and y of shape [N]."""
    raise NotImplementedError


# %%
result = check("04.closed_form_fit", closed_form_fit)

# %% [markdown]
# ### Exercise 2: MSE gradients with several features
#
# Generalise the hand derivation to `D` input features: `x` has shape
# `[N, D]`, `w` shape `[D]`, `b` is a 0-dim tensor, and the prediction is
# `x @ w + b` (shape `[N]`, like `y`). Write `mse_gradients(w, b, x, y)`
# returning `(dw, db)`, the gradients of `L = mean((x @ w + b - y)**2)`,
# without calling `backward()`. The checker compares your answer with
# autograd. Hint: the residual vector `r = x @ w + b - y` plays the same role
# as above, and a matrix product can do the sum over samples.


# %%
def mse_gradients(w, b, x, y):
    """Return (dw [D], db []), the gradients of mean((x @ w + b - y)**2), computed by hand."""
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
# - Check shapes: `[N]` against `[N, 1]` broadcasts silently to `[N, N]`.
#
# **Next:** chapter 05 runs the same five-step loop on real data: a
# multi-layer perceptron classifying MNIST digits, with the loop packaged in
# `helpers.training` so it can be reused.

# %%
report.finish()
