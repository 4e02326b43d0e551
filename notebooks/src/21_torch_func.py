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
# # 21 · torch.func
#
# Autograd (chapter 02) works on tensors: you call `loss.backward()` and
# gradients appear in `.grad`. `torch.func` works on **functions**: `grad(f)`
# is a new function that returns the gradient of `f`, `vmap(f)` is a new
# function that runs `f` over a whole batch, and the two can be stacked in
# any order. This style, borrowed from JAX, makes some things short that are
# awkward with `.backward()` (and, in some of the cases this chapter times,
# faster than the loop they replace): a gradient *per example*, many models
# evaluated as one, full Jacobians and Hessians, and gradients of gradients
# for meta-learning.
#
# **What you will learn**
# - `vmap`: write a function for one example, run it on a batch; `in_dims`,
#   `out_dims`, nesting, the `randomness=` argument, and the "performance
#   drop" warning of ops without a batching rule;
# - `grad` and `grad_and_value` on a model's parameters, with
#   `torch.func.functional_call`;
# - `jacrev`, `jacfwd` and `hessian`, and when forward mode wins (timed);
# - per-sample gradients on MNIST, checked against a loop and timed (the core
#   of DP-SGD);
# - a whole ensemble of MLPs trained and evaluated as one model with
#   `stack_module_state`, and when that is faster than a loop (timed);
# - MAML, a meta-learning method, on sine-wave regression: an initialisation
#   that adapts to a new task in a few gradient steps, against two baselines;
# - the errors `vmap` raises for in-place writes, `.item()`, non-scalar
#   `grad` and BatchNorm's running statistics; `chunk_size=` for memory;
# - the old `functorch` names and their `torch.func` replacements.
#
# **Prerequisites:** chapter 02 (autograd), chapter 03 (`nn.Module`,
# `state_dict`), chapter 05 (the MNIST MLP) and chapter 10 (optimizers).
#
# **Estimated time:** 60 minutes.

# %% tags=["parameters"]
TIMING_SECONDS = 0.5  # seconds of timed runs per measurement (after a warm-up); tables show median, IQR, counts
JAC_FEW = 16  # the small side of the tall and wide Jacobians
JAC_MANY = 2048  # the large side
JAC_ROUNDS = 3  # interleaved rounds of the Jacobian timings (each TIMING_SECONDS / JAC_ROUNDS per row, 1 thread)
MIN_JAC_SPEEDUP = 2.0  # the right mode must beat the other by this factor (median of the rounds; 14-17x in our runs)
PSG_BATCH = 128  # MNIST images for the per-sample gradients
PSG_HIDDEN = (128, 64)  # hidden widths of the MLP used for per-sample gradients
N_MODELS = 10  # models in the ensemble
ENSEMBLE_HIDDEN = (64,)  # hidden widths of each ensemble member
ENSEMBLE_TRAIN = 12000  # MNIST training images for the ensemble (the first ones)
ENSEMBLE_EPOCHS = 1  # passes over them
MIN_ENSEMBLE_ACCURACY = 0.85  # test accuracy the ensemble must reach
MANY_MODELS = 100  # members of the second ensemble configuration (timed only, not trained)
MANY_HIDDEN = 16  # hidden width of each of those members
MANY_BATCH = 16  # images they all predict at once
MIN_MANY_SPEEDUP = 1.5  # vmap must beat the loop by this factor on MANY_MODELS tiny members (3-5x in our runs)
MIN_GAIN_GAP = 1.25  # the tiny members' speed-up must exceed the 10-member ensemble's by this factor (3x in our runs)
META_STEPS = 800  # MAML meta-training steps
META_BATCH = 10  # sine tasks per meta-step
K_SHOT = 10  # labelled points per task for adaptation (and as many for the meta-loss)
INNER_LR = 0.01  # learning rate of the adaptation steps
META_LR = 3e-3  # Adam's learning rate for the meta-parameters
ADAPT_STEPS = 10  # adaptation steps at test time
TEST_TASKS = 100  # held-out sine tasks
MAX_ADAPTED_RATIO = 0.5  # post-adaptation loss / pre-adaptation loss must be below this
MIN_BASELINE_RATIO = 1.5  # each baseline's post-adaptation loss must exceed MAML's by this factor
SEED = 0

# %% [markdown]
# ## Setup

# %%
import copy
import re
import time
import warnings

import functorch  # the old package, for the migration table at the end
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.functional import hessian as autograd_hessian
from torch.autograd.functional import jacobian as autograd_jacobian
from torch.func import (
    functional_call,
    grad,
    grad_and_value,
    hessian,
    jacfwd,
    jacrev,
    jvp,
    stack_module_state,
    vmap,
)

from helpers.bench import measure, speedup, timing_table
from helpers.data import mnist
from helpers.device import pick_device, seed_everything
from helpers.exercises import check, solution  # noqa: F401  (solution: for when you are stuck)
from helpers.models import MLP, count_parameters
from helpers.report import ChapterReport

generator = seed_everything(SEED)
device = pick_device()
report = ChapterReport("21_torch_func")
notebook_start = time.perf_counter()
print(f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} CPU threads")


def timed(label, fn, **kwargs):
    """A helpers.bench.Timing of fn() (median, IQR, number of calls and blocks), after a warm-up."""
    return measure(fn, label=label, **{"min_run_time": TIMING_SECONDS, **kwargs})


# %% [markdown]
# The MNIST parts (per-sample gradients, the ensemble) run on `device`,
# which `pick_device()` chooses: a GPU when there is one, else the CPU (the
# first line above says which one made the stored outputs). The small
# examples (Jacobians, MAML) run on the CPU. Every timing compares two ways
# of doing the same work on the same device; on another device the ratios
# change, so read them from the tables, not from the prose.
#
# ## vmap: write it for one example, run it on a batch
#
# A function written for **one** example is usually the clearest one to
# write. Here is a linear layer for one input vector `x` of shape `[in]`:
# `W @ x + b`. `vmap(f)` returns a new function that accepts a batch and
# applies `f` to every example, without a Python loop: it pushes the batch
# dimension through every operation inside `f` (each PyTorch operator has a
# *batching rule* that says how).
#
# `in_dims` says, for each argument, which dimension is the batch (`0`
# here for `x`) or `None` for an argument shared by all examples (`W` and
# `b`). The result is the explicit batched computation `X @ W.T + b`:

# %%
# NBVAL_CHECK_OUTPUT
def linear_one(x, W, b):
    """One example: x [in], W [out, in], b [out] -> [out]."""
    return W @ x + b


X = torch.randn(32, 5)  # a batch of 32 examples
W, b = torch.randn(3, 5), torch.randn(3)
batched = vmap(linear_one, in_dims=(0, None, None))(X, W, b)
explicit = X @ W.T + b
print("linear_one on one example:", tuple(linear_one(X[0], W, b).shape))
print("vmap(linear_one) on the batch:", tuple(batched.shape))
print("equal to X @ W.T + b:", torch.allclose(batched, explicit, atol=1e-6))

# %%
assert torch.allclose(batched, explicit, atol=1e-6), "vmap over the batch should equal the batched matrix product"
assert torch.allclose(batched[7], linear_one(X[7], W, b)), "row 7 of the batch should be example 7 on its own"

# %% [markdown]
# `in_dims` can point at any dimension: with the examples stored as
# *columns* of `XT` (`[5, 32]`), `in_dims=1` takes them from there.
# `out_dims` does the same for the result: where to put the batch dimension
# in the output. And since `vmap(f)` is again a function of one example,
# `vmap` **nests**: the inner `vmap` maps over the rows of `B`, the outer over
# the rows of `A`, so `dot` (two vectors to one number) becomes the matrix of
# all pairwise dot products, `A @ B.T`:

# %%
# NBVAL_CHECK_OUTPUT
columns = vmap(linear_one, in_dims=(1, None, None))(X.T, W, b)  # examples along dim 1 of the input
batch_last = vmap(linear_one, in_dims=(0, None, None), out_dims=1)(X, W, b)  # batch along dim 1 of the output
print("in_dims=1:", tuple(columns.shape), " out_dims=1:", tuple(batch_last.shape))


def dot(u, v):
    """Two vectors [d] -> a scalar."""
    return (u * v).sum()


A, B = torch.randn(4, 6), torch.randn(7, 6)
pairwise = vmap(vmap(dot, in_dims=(None, 0)), in_dims=(0, None))(A, B)  # [4, 7]
print("nested vmap of dot:", tuple(pairwise.shape))
print("equal to A @ B.T:", torch.allclose(pairwise, A @ B.T, atol=1e-5))

# %%
assert torch.allclose(columns, explicit, atol=1e-6) and torch.allclose(batch_last, explicit.T, atol=1e-6)
assert torch.allclose(pairwise, A @ B.T, atol=1e-5), "the nested vmap should give all pairwise dot products"

# %% [markdown]
# Arguments can also be tuples, lists or dicts of tensors (PyTorch calls
# such nestings *pytrees*): `in_dims=0` applies to every tensor inside, and
# a dict of parameters can be shared with `None`. That is how we will pass a
# model's parameters below.
#
# ### When an operator has no batching rule
#
# Most operators have a batching rule. For those that do not, `vmap` falls
# back to a slow path: it runs the operator once per example in a loop, in
# C++, and stacks the results. The answer is still right, and PyTorch warns
# you. `torch.histc` (a histogram) is one such operator in
# torch 2.14: here is a histogram per row, the warning captured and printed,
# and the result compared with a Python loop:

# %%
# NBVAL_CHECK_OUTPUT
values = torch.rand(6, 1000, generator=torch.Generator().manual_seed(SEED))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    histograms = vmap(lambda row: torch.histc(row, bins=5, min=0, max=1))(values)
fallback = [w for w in caught if "performance drop" in str(w.message)]
for w in fallback:
    print(f"{w.category.__name__}: {str(w.message).split(' (Triggered internally')[0]}")  # drop the C++ source path
looped = torch.stack([torch.histc(row, bins=5, min=0, max=1) for row in values])
print("shape", tuple(histograms.shape), "| equal to a loop over the rows:", torch.equal(histograms, looped))

# %%
assert fallback, "torch.histc inside vmap was expected to warn about the fallback (has it gained a batching rule?)"
assert torch.equal(histograms, looped), "the fallback path must still give the right answer"

# %% [markdown]
# The warning is about speed, not correctness: the fallback is a loop,
# so you lose what `vmap` is for, but nothing else. If the operator sits in
# a hot path, look for an equivalent with a batching rule (here, for
# example, `torch.bucketize` followed by a one-hot sum), or accept the loop.
# To keep a notebook's output clean, filter exactly this message with
# `warnings.filterwarnings("ignore", message="There is a performance drop")`
# rather than all warnings.
#
# ### Randomness inside vmap
#
# Should dropout inside `vmap` draw one mask for the whole batch, or one per
# example? `vmap` refuses to guess: by default (`randomness="error"`) any
# random operation raises. `randomness="same"` draws once and shares it;
# `randomness="different"` draws independently per example. (Ensembles
# usually want `"different"`; `"same"` is for when every example must see
# the same noise.)

# %%
# NBVAL_CHECK_OUTPUT
ones = torch.ones(4, 8)
try:
    vmap(lambda row: F.dropout(row, p=0.5))(ones)
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")
torch.manual_seed(SEED)
same = vmap(lambda row: F.dropout(row, p=0.5), randomness="same")(ones)
different = vmap(lambda row: F.dropout(row, p=0.5), randomness="different")(ones)
print("randomness='same':      rows identical:", all(torch.equal(r, same[0]) for r in same))
print("randomness='different': rows identical:", all(torch.equal(r, different[0]) for r in different))

# %%
assert all(torch.equal(r, same[0]) for r in same), "'same' should share one dropout mask across the batch"
assert not all(torch.equal(r, different[0]) for r in different), "'different' should draw a mask per example"

# %% [markdown]
# ## grad and grad_and_value on a model's parameters
#
# `grad(f)` returns a function that computes the gradient of `f` with
# respect to its first argument (`argnums` chooses others). `f` must return
# a scalar. To differentiate a *model* this way, its parameters must be an
# argument of a function. `torch.func.functional_call(model, params, args)`
# runs `model(*args)` with the tensors in the dict `params` in place of its
# own parameters, which stay untouched. So the loss becomes a plain function
# of a dict of parameters.
#
# We load a small batch of real MNIST digits (chapter 05's data, normalised
# the same way) and an MLP from `helpers.models`, without dropout:

# %%
# NBVAL_CHECK_OUTPUT
train_raw, test_raw = mnist(train=True), mnist(train=False)


def mnist_tensors(raw, count):
    """The first `count` images as normalised float [N, 1, 28, 28] and labels int64 [N]."""
    images = (raw.data[:count].float() / 255 - 0.1307) / 0.3081
    return images.unsqueeze(1), raw.targets[:count]


images, labels = mnist_tensors(train_raw, PSG_BATCH)
torch.manual_seed(SEED)
model = MLP(hidden=PSG_HIDDEN, dropout=0.0).to(device)
images, labels = images.to(device), labels.to(device)
params = {name: p.detach() for name, p in model.named_parameters()}
print(f"batch {tuple(images.shape)}, MLP with {count_parameters(model):,} parameters in {len(params)} tensors")


def batch_loss(params, x, y):
    """The mean cross-entropy of the model with parameters `params` on a batch."""
    return F.cross_entropy(functional_call(model, params, (x,)), y)


grads = grad(batch_loss)(params, images, labels)  # a dict like params
grads_again, loss_value = grad_and_value(batch_loss)(params, images, labels)  # the same, and the loss
print({name: tuple(g.shape) for name, g in list(grads.items())[:2]}, "...")

# %% [markdown]
# `grad_and_value` returns the gradient and the loss in one pass, which is
# what a training step needs. The same numbers come out of the classic
# `loss.backward()`:

# %%
model.zero_grad()
classic_loss = F.cross_entropy(model(images), labels)
classic_loss.backward()
grad_difference = max((grads[n] - p.grad).abs().max().item() for n, p in model.named_parameters())
print(f"loss {loss_value.item():.4f} (backward: {classic_loss.item():.4f}); "
      f"largest gradient difference {grad_difference:.1e}")

# %%
assert torch.allclose(loss_value, classic_loss), "grad_and_value should return the same loss as the module"
for name, p in model.named_parameters():
    assert torch.allclose(grads[name], p.grad, atol=1e-6), f"grad disagrees with loss.backward() for {name}"
    assert torch.equal(grads[name], grads_again[name]), "grad and grad_and_value should agree"

# %% [markdown]
# ## Jacobians and Hessians: jacrev, jacfwd, hessian
#
# For a function from `n` inputs to `m` outputs the **Jacobian** is the
# `m × n` matrix of all partial derivatives. There are two ways to build it:
#
# - `jacrev` (reverse mode, what `backward` does) gets one **row** per
#   backward pass: a vector-Jacobian product. It needs `m` of them, one per
#   output.
# - `jacfwd` (forward mode) gets one **column** per forward pass: a
#   Jacobian-vector product (`jvp`), pushing a tangent through the function
#   alongside the values. It needs `n` of them, one per input.
#
# Both use `vmap` to do those passes as one batched pass. `hessian(f)` is
# `jacfwd(jacrev(f))`: forward over reverse, usually the fastest way to the
# matrix of second derivatives. First, all three against the older
# `torch.autograd.functional` API, and one Jacobian-vector product with
# `jvp(f, (x,), (v,))`, which returns `f(x)` and `J v` (one column's worth
# of work, for any direction `v`).
#
# The first use of forward mode in a session makes torch 2.14 load internal
# decompositions, which calls the deprecated `torch.jit.script` and emits a
# `FutureWarning` from inside PyTorch. It is not about your code; we capture
# it here so you know it when you see it:

# %%
def f_vec(x):
    """R^3 -> R^2, a small example."""
    return torch.stack([x[0] * x[1].sin(), x[2] ** 2 * x.sum()])


def f_scalar(x):
    """R^4 -> R."""
    return (x.sin() * x.roll(1)).sum() + x.pow(3).sum()


x3, x4 = torch.randn(3, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    J_fwd = jacfwd(f_vec)(x3)
for message in sorted({f"{w.category.__name__}: {w.message}" for w in caught}):
    print(f"captured {sum(f'{w.category.__name__}: {w.message}' == message for w in caught)} times: {message}")
J_rev = jacrev(f_vec)(x3)
J_old = autograd_jacobian(f_vec, x3)
value, J_v = jvp(f_vec, (x3,), (torch.ones(3, dtype=torch.float64),))
H_new = hessian(f_scalar)(x4)
H_old = autograd_hessian(f_scalar, x4)
print("Jacobian", tuple(J_rev.shape), "| Hessian", tuple(H_new.shape))
print("max |jacrev - jacfwd| =", f"{(J_rev - J_fwd).abs().max():.1e}",
      "| max |jacrev - autograd.functional.jacobian| =", f"{(J_rev - J_old).abs().max():.1e}",
      "| max |hessian - autograd.functional.hessian| =", f"{(H_new - H_old).abs().max():.1e}")

# %%
assert torch.allclose(J_rev, J_old) and torch.allclose(J_fwd, J_old), "jacrev and jacfwd should match autograd"
assert torch.allclose(H_new, H_old), "torch.func.hessian should match torch.autograd.functional.hessian"
assert torch.allclose(H_new, H_new.T), "a Hessian of a smooth function is symmetric"
assert torch.allclose(J_v, J_rev.sum(1)) and torch.allclose(value, f_vec(x3)), "jvp along ones = the row sums of J"

# %% [markdown]
# ### When forward mode wins
#
# The rule follows from the counts above: reverse mode costs about one
# backward pass per **output**, forward mode one forward pass per **input**.
# So a **tall** Jacobian (few inputs, many outputs) is cheap in forward
# mode, and a **wide** one (many inputs, few outputs; a loss over many
# parameters is the extreme case, with one output) is cheap in reverse mode.
# We time both on `tanh(M @ x)` with `M` of shape `[JAC_MANY, JAC_FEW]`
# (tall) and `[JAC_FEW, JAC_MANY]` (wide), on one CPU thread, as for the
# tiny ensemble below. The two modes take turns in `JAC_ROUNDS` rounds, so
# that a burst of load from other programs tends to hit both; each line
# gives a median, its interquartile range, and how many calls and blocks it
# rests on, and the speed-up we keep is the median over the rounds:

# %%
M_tall = torch.randn(JAC_MANY, JAC_FEW) / JAC_FEW**0.5
M_wide = torch.randn(JAC_FEW, JAC_MANY) / JAC_MANY**0.5


def tall(x):
    return torch.tanh(M_tall @ x)


def wide(x):
    return torch.tanh(M_wide @ x)


jac_speedups = {}
for shape_name, fn, x, slow, fast in (("tall", tall, torch.randn(JAC_FEW), jacrev, jacfwd),
                                      ("wide", wide, torch.randn(JAC_MANY), jacfwd, jacrev)):
    assert torch.allclose(jacrev(fn)(x), jacfwd(fn)(x), atol=1e-5), f"jacrev and jacfwd disagree on the {shape_name} Jacobian"
    dims = f"{JAC_MANY} x {JAC_FEW}" if shape_name == "tall" else f"{JAC_FEW} x {JAC_MANY}"
    print(f"{shape_name} Jacobian ({dims}), 1 thread:")
    ratios = []
    for round_index in range(JAC_ROUNDS):
        t_slow, t_fast = (timed(jac.__name__, lambda jac=jac, fn=fn, x=x: jac(fn)(x),
                                min_run_time=TIMING_SECONDS / JAC_ROUNDS, num_threads=1) for jac in (slow, fast))
        ratios.append(speedup(t_slow, t_fast))
        print(f"  round {round_index + 1}: {t_slow} | {t_fast} | {fast.__name__} {ratios[-1]:.1f}x faster")
    jac_speedups[shape_name] = torch.tensor(ratios).median().item()  # the lower median for an even count
    print(f"  median over the {JAC_ROUNDS} rounds: {fast.__name__} {jac_speedups[shape_name]:.1f}x faster")
tall_speedup, wide_speedup = jac_speedups["tall"], jac_speedups["wide"]
_ = report.record("jacfwd speed-up over jacrev, tall Jacobian (1 thread)", tall_speedup, "x", digits=1)
_ = report.record("jacrev speed-up over jacfwd, wide Jacobian (1 thread)", wide_speedup, "x", digits=1)

# %%
assert tall_speedup > MIN_JAC_SPEEDUP, (
    f"forward mode should win on the tall Jacobian by more than {MIN_JAC_SPEEDUP}x (median speed-up {tall_speedup:.2f}x)"
)
assert wide_speedup > MIN_JAC_SPEEDUP, (
    f"reverse mode should win on the wide Jacobian by more than {MIN_JAC_SPEEDUP}x (median speed-up {wide_speedup:.2f}x)"
)

# %% [markdown]
# Each mode wins where it should (the lines above; the assert requires a
# factor `MIN_JAC_SPEEDUP` of the median over the rounds). We timed one ratio of the two sizes,
# `JAC_MANY / JAC_FEW`; the margin depends on it, and on how busy the
# machine is. This is why `backward`
# (reverse mode) trains networks: a loss is a function from millions of
# parameters to one number, the widest Jacobian there is. Forward mode is
# the tool for few inputs and many outputs, such as the sensitivity of a
# whole output image to a handful of knobs, and for Hessian-vector products
# (Exercise 2).
#
# ## Per-sample gradients
#
# `loss.backward()` on a batch gives the gradient of the **mean** loss: the
# per-example gradients are summed away inside the backward pass. Some
# methods need each example's own gradient. The best-known is **DP-SGD**
# (differentially private SGD, Abadi et al. 2016): it clips every example's
# gradient to a maximum norm before averaging, so that no single training
# example can move the model much, and then adds noise. Others are
# per-example gradient norms for spotting mislabelled or unusual examples,
# and some importance-sampling methods.
#
# The naive way is a loop with batch size 1. The `torch.func` way composes
# the pieces we have: write the loss of **one** example as a function of the
# parameters, take its `grad`, and `vmap` that over the batch, sharing the
# parameters (`in_dims=(None, 0, 0)`). Inside `vmap` each example has lost
# its batch dimension, so we add a batch of one for the model with
# `unsqueeze(0)`:

# %%
def example_loss(params, x, y):
    """Loss of ONE example: x [1, 28, 28], y a scalar label."""
    logits = functional_call(model, params, (x.unsqueeze(0),))  # [1, 10]
    return F.cross_entropy(logits, y.unsqueeze(0))


per_sample_grad = vmap(grad(example_loss), in_dims=(None, 0, 0))


def per_sample_loop(images, labels):
    """The same with a Python loop and .backward(), one example at a time."""
    out = {name: [] for name, _ in model.named_parameters()}
    for x, y in zip(images, labels):
        model.zero_grad()
        F.cross_entropy(model(x.unsqueeze(0)), y.unsqueeze(0)).backward()
        for name, p in model.named_parameters():
            out[name].append(p.grad.clone())
    return {name: torch.stack(g) for name, g in out.items()}


psg_vmap = per_sample_grad(params, images, labels)
psg_loop = per_sample_loop(images, labels)
psg_difference = max((psg_vmap[n] - psg_loop[n]).abs().max().item() for n in params)
print({name: tuple(g.shape) for name, g in list(psg_vmap.items())[:2]}, "...")
print(f"largest difference between vmap(grad) and the loop: {psg_difference:.1e}")

# %%
for name in params:
    assert torch.allclose(psg_vmap[name], psg_loop[name], atol=1e-5), f"per-sample gradients disagree for {name}"
    assert torch.allclose(psg_vmap[name].mean(0), grads[name], atol=1e-5), "their mean should be the batch gradient"

# %% [markdown]
# Each gradient now has a leading batch dimension, and their mean is the
# ordinary batch gradient from before (also checked). How much faster is
# `vmap`? `TIMING_SECONDS` seconds of runs each:

# %%
t_loop = timed(f"{PSG_BATCH} per-sample gradients, loop of .backward()", lambda: per_sample_loop(images, labels))
t_vmap = timed(f"{PSG_BATCH} per-sample gradients, vmap(grad)", lambda: per_sample_grad(params, images, labels))
psg_speedup = speedup(t_loop, t_vmap)
print(timing_table([t_loop, t_vmap]))
_ = report.record("per-sample gradients, vmap(grad) speed-up over a loop", psg_speedup, "x", digits=1)

# %%
assert psg_speedup > 1, f"vmap(grad) should beat the Python loop (speed-up {psg_speedup:.2f}x)"

# %% [markdown]
# All `PSG_BATCH` examples go through at once, so every intermediate tensor
# has `PSG_BATCH` times its single-example size. When that does not fit in
# memory, `vmap(..., chunk_size=k)` computes `k` examples at a time, one
# chunk after another, and concatenates (`chunk_size=1` is a loop). The
# result is the same:

# %%
chunked = vmap(grad(example_loss), in_dims=(None, 0, 0), chunk_size=max(1, PSG_BATCH // 4))(params, images, labels)
chunked_difference = max((chunked[n] - psg_vmap[n]).abs().max().item() for n in params)
print(f"chunk_size={max(1, PSG_BATCH // 4)}: largest difference from the unchunked per-sample gradients {chunked_difference:.1e}")
assert chunked_difference < 1e-6, "chunk_size must not change the result"

# %% [markdown]
# The speed-up comes from doing one batched pass instead of `PSG_BATCH`
# small ones, each with its Python and dispatch overhead. The per-sample
# gradients hold `PSG_BATCH` copies of every weight matrix, which is one
# reason DP-SGD is costly for large models. The spread of their sizes is
# what clipping acts on:

# %%
psg_norms = torch.stack([g.flatten(start_dim=1).norm(dim=1) for g in psg_vmap.values()], dim=1).norm(dim=1)
clip_at = psg_norms.median().item()
fig, ax = plt.subplots(figsize=(9, 2.8))
ax.bar(range(PSG_BATCH), psg_norms.cpu(), color=["tab:red" if n > clip_at else "tab:blue" for n in psg_norms])
ax.axhline(clip_at, color="k", ls="--", lw=1, label=f"a clipping bound (here the median, {clip_at:.2f})")
ax.set(xlabel="example in the batch", ylabel="gradient norm", title="per-example gradient norms (untrained MLP)")
ax.legend()
plt.show()
print(f"per-example gradient norms: min {psg_norms.min():.2f}, median {clip_at:.2f}, max {psg_norms.max():.2f}")

# %% [markdown]
# The norms vary from example to example. DP-SGD bounds each of them: with
# this bound, the examples in red would be scaled down to it, the others
# kept as they are. Exercise 1 writes the clipping.
#
# ## Model ensembles as one model
#
# An **ensemble** averages the predictions of several models trained from
# different random starts; it is usually more accurate than its members on
# average, and often than the best of them.
# Training and evaluating them one by one runs `N_MODELS` small models in
# turn. `torch.func.stack_module_state` stacks the parameters of several
# models of the same architecture, tensor by tensor, along a new leading
# dimension; `vmap` over that dimension then runs all models as one batched
# model. The stacked tensors are new leaves with `requires_grad=True`, so a
# normal optimizer can train them.
#
# `functional_call` needs a module to describe the computation; a copy on
# the `meta` device (shapes, no data) is enough, since every tensor comes
# from the stacked dict:

# %%
# NBVAL_CHECK_OUTPUT
train_x, train_y = mnist_tensors(train_raw, ENSEMBLE_TRAIN)
test_x, test_y = mnist_tensors(test_raw, None)
train_x, train_y, test_x, test_y = train_x.to(device), train_y.to(device), test_x.to(device), test_y.to(device)
torch.manual_seed(SEED)
members = [MLP(hidden=ENSEMBLE_HIDDEN, dropout=0.0).to(device) for _ in range(N_MODELS)]  # different random inits
stacked_params, stacked_buffers = stack_module_state(members)
skeleton = copy.deepcopy(members[0]).to("meta")


def member_logits(params, buffers, x):
    """One member's logits for a batch x [B, 1, 28, 28] -> [B, 10]."""
    return functional_call(skeleton, (params, buffers), (x,))


ensemble_logits = vmap(member_logits, in_dims=(0, 0, None))  # every member sees the same batch -> [N_MODELS, B, 10]
print({name: tuple(p.shape) for name, p in stacked_params.items()})
print("ensemble output:", tuple(ensemble_logits(stacked_params, stacked_buffers, train_x[:5]).shape))

# %% [markdown]
# Training: one optimizer over the stacked tensors, one forward pass for
# all members, and the **sum** of the members' mean losses, so that each
# member receives exactly the gradient it would get if trained on its own.
# Adam works element by element, so this should be the same as training each
# member separately; we check it by training a copy of member 0 alone, with
# its own Adam, on the same batches for the first few steps. So that the
# members differ by more than their starting points,
# each also gets its own order of the training images: the batch gets a
# member dimension too (`[N_MODELS, 128, 1, 28, 28]`), and `in_dims=(0, 0, 0)`
# gives member `i` slice `i` of everything.

# %%
SOLO_STEPS = 5  # steps of member 0 trained alone, for the check
optimizer = torch.optim.Adam(stacked_params.values(), lr=1e-3)
solo = copy.deepcopy(members[0])  # member 0 as it starts, trained on its own below
solo_optimizer = torch.optim.Adam(solo.parameters(), lr=1e-3)
batch_order = torch.Generator().manual_seed(SEED)
start = time.perf_counter()
train_ensemble = vmap(member_logits, in_dims=(0, 0, 0))  # member i, its own batch i
step = 0
for _epoch in range(ENSEMBLE_EPOCHS):
    orders = torch.stack([torch.randperm(len(train_y), generator=batch_order) for _ in range(N_MODELS)])
    for idx in orders.split(128, dim=1):  # idx: [N_MODELS, B] image indices
        logits = train_ensemble(stacked_params, stacked_buffers, train_x[idx])  # [N_MODELS, B, 10]
        loss = F.cross_entropy(logits.flatten(0, 1), train_y[idx].flatten()) * N_MODELS
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if step <= SOLO_STEPS:  # member 0 alone, on its own slice of the same batch
            solo_loss = F.cross_entropy(solo(train_x[idx[0]]), train_y[idx[0]])
            solo_optimizer.zero_grad()
            solo_loss.backward()
            solo_optimizer.step()
        if step == SOLO_STEPS:
            solo_difference = max((stacked_params[n][0] - p).abs().max().item() for n, p in solo.named_parameters())
print(f"trained {N_MODELS} MLPs at once in {time.perf_counter() - start:.1f} s (one wall-clock run, not a benchmark)")
print(f"after {SOLO_STEPS} steps, member 0 of the stack vs member 0 trained alone: largest parameter difference "
      f"{solo_difference:.1e}")
assert solo_difference < 1e-5, (
    f"training the stack should equal training each member alone (difference {solo_difference:.1e} after {SOLO_STEPS} steps)"
)

# %% [markdown]
# Evaluation, vmapped and looped: copy each member's slice of the stacked
# tensors back into its own module, run the modules one by one, and compare.
# Then the ensemble's accuracy (averaged probabilities) against its members':

# %%
with torch.no_grad():
    for i, member in enumerate(members):
        member.load_state_dict({name: p[i] for name, p in stacked_params.items()})
    probs_vmap = ensemble_logits(stacked_params, stacked_buffers, test_x).softmax(-1)  # [N_MODELS, N_test, 10]
    probs_loop = torch.stack([member(test_x).softmax(-1) for member in members])
    t_ens_loop = timed(f"{N_MODELS} members, loop", lambda: [member(test_x) for member in members])
    t_ens_vmap = timed(f"{N_MODELS} members, vmap", lambda: ensemble_logits(stacked_params, stacked_buffers, test_x))
ensemble_difference = (probs_vmap - probs_loop).abs().max().item()
member_acc = (probs_vmap.argmax(-1) == test_y).float().mean(dim=1)  # [N_MODELS]
ensemble_acc = (probs_vmap.mean(0).argmax(-1) == test_y).float().mean().item()
ensemble_speedup = speedup(t_ens_loop, t_ens_vmap)
print(f"largest difference vmapped vs looped probabilities: {ensemble_difference:.1e}")
print(f"prediction of {len(test_y):,} test images:")
print(timing_table([t_ens_loop, t_ens_vmap]))
print(f"members: {member_acc.min():.2%} to {member_acc.max():.2%} (mean {member_acc.mean():.2%}); "
      f"ensemble {ensemble_acc:.2%}")
_ = report.record("ensemble prediction, vmap speed-up over a loop", ensemble_speedup, "x", digits=1)
_ = report.record("ensemble test accuracy", 100 * ensemble_acc, "%", digits=2)
_ = report.record("mean member test accuracy", 100 * member_acc.mean().item(), "%", digits=2)

fig, ax = plt.subplots(figsize=(9, 2.6))
ax.bar(range(N_MODELS), 100 * member_acc.cpu(), color="tab:blue", label="members")
ax.axhline(100 * ensemble_acc, color="tab:red", lw=2, label="ensemble (averaged probabilities)")
ax.set(xlabel="member", ylabel="test accuracy (%)", ylim=(100 * member_acc.min().item() - 3, 100 * ensemble_acc + 2))
ax.legend(loc="lower right")
plt.show()

# %%
assert ensemble_difference < 1e-5, "the vmapped ensemble should give the same probabilities as the loop"
assert ensemble_acc >= MIN_ENSEMBLE_ACCURACY, f"ensemble accuracy {ensemble_acc:.2%} below {MIN_ENSEMBLE_ACCURACY:.0%}"
assert ensemble_acc >= member_acc.mean().item(), "the ensemble should be at least as accurate as its average member"

# %% [markdown]
# Look at the measured speed-up above before believing any rule of thumb.
# Here each member's call is a few matrix products on 10,000 images: large
# enough work that the per-call overhead a loop pays is a small part of it,
# so one batched call gains little, and it can even lose. Where the overhead
# does dominate, batching should pay. A second configuration tests that:
# `MANY_MODELS` members of width `MANY_HIDDEN` (untrained: only the speed
# matters), predicting one small batch of `MANY_BATCH` images, on one CPU
# thread:

# %%
torch.manual_seed(SEED)
many = [MLP(hidden=(MANY_HIDDEN,), dropout=0.0).to(device) for _ in range(MANY_MODELS)]
many_params, many_buffers = stack_module_state(many)
many_skeleton = copy.deepcopy(many[0]).to("meta")
many_logits = vmap(lambda p, b, x: functional_call(many_skeleton, (p, b), (x,)), in_dims=(0, 0, None))
small_batch = test_x[:MANY_BATCH]
with torch.no_grad():
    many_difference = (many_logits(many_params, many_buffers, small_batch) - torch.stack([m(small_batch) for m in many])).abs().max().item()
    t_many_loop = timed(f"{MANY_MODELS} members, loop", lambda: [m(small_batch) for m in many], num_threads=1)
    t_many_vmap = timed(f"{MANY_MODELS} members, vmap", lambda: many_logits(many_params, many_buffers, small_batch), num_threads=1)
many_speedup = speedup(t_many_loop, t_many_vmap)
print(f"prediction of {MANY_BATCH} images by {MANY_MODELS} MLPs of width {MANY_HIDDEN}, 1 thread "
      f"(vmap vs loop: largest difference {many_difference:.1e}):")
print(timing_table([t_many_loop, t_many_vmap]))
_ = report.record(f"{MANY_MODELS} tiny members, vmap speed-up over a loop", many_speedup, "x", digits=1)

# %%
assert many_difference < 1e-5, "the vmapped tiny ensemble should match the loop"
assert many_speedup > MIN_MANY_SPEEDUP, (
    f"with {MANY_MODELS} tiny members, vmap should beat the loop by more than {MIN_MANY_SPEEDUP}x, got {many_speedup:.2f}x"
)
assert many_speedup > MIN_GAIN_GAP * ensemble_speedup, (
    f"vmap should gain more on {MANY_MODELS} tiny members ({many_speedup:.2f}x) than on {N_MODELS} members and "
    f"{len(test_y):,} images ({ensemble_speedup:.2f}x), by a factor {MIN_GAIN_GAP}"
)

# %% [markdown]
# With many tiny models and a small batch, the loop is mostly per-call
# overhead (Python, dispatch, `MANY_MODELS` small kernels), and the single
# batched call wins clearly (the speed-up column), and by more than for the
# ten members on 10,000 images (the assert requires a factor `MIN_GAIN_GAP`
# between the two speed-ups). On a GPU we would expect the same with more
# force, since each small kernel launch leaves most of the device idle; we
# have not measured that here.
#
# ## MAML: meta-learning with grad of grad
#
# **MAML** (model-agnostic meta-learning, Finn et al. 2017) learns an
# initialisation from which a model adapts to a *new* task in a few gradient
# steps. The classic demonstration: each task is a sine wave
# `y = a·sin(x + φ)` with amplitude `a` in [0.1, 5] and phase `φ` in [0, π];
# the model sees only `K_SHOT` points of a new wave.
#
# One meta-step, for a batch of tasks:
# 1. **inner loop**: from the meta-parameters θ, take a gradient step on
#    the task's `K_SHOT` *support* points: θ' = θ − α ∇L_support(θ);
# 2. **outer loss**: the loss of θ' on `K_SHOT` other *query* points of the
#    same task;
# 3. update θ with the gradient of the outer loss, averaged over tasks.
#
# Step 3 differentiates *through* step 1, which contains a gradient: a
# gradient of a gradient (second order). With `torch.func` the inner step is
# `grad(loss)` on a dict of parameters, and the outer `.backward()`
# differentiates through it, because `torch.func.grad` composes with
# ordinary autograd. `vmap` runs the tasks of a meta-batch as one. (First-
# order MAML would detach the inner gradient, `g = {k: v.detach() for k, v
# in g.items()}`; it is cheaper and often nearly as good. Here we do full
# **second-order** MAML, and check below that its meta-gradient really
# differs from the first-order one.)
#
# The network is tiny (layers of 40 units), so each operation takes
# microseconds. We run the meta-training on one thread with
# `torch.set_num_threads(1)`, a common choice for work this small (we did
# not time the alternative), and restore the setting afterwards.
#
# For comparison we also train the usual baseline of Finn et al.: the same
# network **pretrained on all tasks** at once, as ordinary regression on
# the pooled points of the same task stream, with the same optimizer and
# number of steps.

# %%
sine_net = nn.Sequential(nn.Linear(1, 40), nn.ReLU(), nn.Linear(40, 40), nn.ReLU(), nn.Linear(40, 1))  # Finn et al.'s net


def sample_tasks(n_tasks, gen):
    """n_tasks sine waves: support x, y and query x, y, each [n_tasks, K_SHOT, 1]; plus (amplitude, phase)."""
    amplitude = torch.empty(n_tasks, 1, 1).uniform_(0.1, 5.0, generator=gen)
    phase = torch.empty(n_tasks, 1, 1).uniform_(0.0, torch.pi, generator=gen)
    x = torch.empty(n_tasks, 2 * K_SHOT, 1).uniform_(-5.0, 5.0, generator=gen)
    y = amplitude * torch.sin(x + phase)
    return x[:, :K_SHOT], y[:, :K_SHOT], x[:, K_SHOT:], y[:, K_SHOT:], (amplitude, phase)


def sine_loss(params, x, y):
    return F.mse_loss(functional_call(sine_net, params, (x,)), y)


def adapt(params, x_support, y_support, steps):
    """`steps` plain gradient steps on the support set, starting from `params`."""
    for _ in range(steps):
        g = grad(sine_loss)(params, x_support, y_support)
        params = {name: p - INNER_LR * g[name] for name, p in params.items()}
    return params


def meta_loss(params, x_support, y_support, x_query, y_query):
    """One task: adapt one step on the support set, then the loss on the query set."""
    return sine_loss(adapt(params, x_support, y_support, steps=1), x_query, y_query)


torch.manual_seed(SEED)
threads = torch.get_num_threads()
torch.set_num_threads(1)  # 40-unit layers: too small to split across threads (see the note above)
meta_params = {name: p.detach().clone().requires_grad_() for name, p in sine_net.named_parameters()}
initial_params = {name: p.detach().clone() for name, p in meta_params.items()}  # for comparison, below
meta_optimizer = torch.optim.Adam(meta_params.values(), lr=META_LR)
task_gen = torch.Generator().manual_seed(SEED)
pretrained_params = {name: p.detach().clone().requires_grad_() for name, p in initial_params.items()}
pretrain_optimizer = torch.optim.Adam(pretrained_params.values(), lr=META_LR)
pretrain_gen = torch.Generator().manual_seed(SEED)  # the same stream of tasks as MAML's
meta_curve = []
start = time.perf_counter()
for _step in range(META_STEPS):
    xs, ys, xq, yq, _ = sample_tasks(META_BATCH, task_gen)
    loss = vmap(meta_loss, in_dims=(None, 0, 0, 0, 0))(meta_params, xs, ys, xq, yq).mean()
    meta_optimizer.zero_grad()
    loss.backward()
    meta_optimizer.step()
    meta_curve.append(loss.item())
print(f"{META_STEPS} meta-steps of {META_BATCH} tasks in {time.perf_counter() - start:.1f} s (one wall-clock run)")
for _step in range(META_STEPS):  # the pretrained baseline: every point of every task, one regression
    pxs, pys, pxq, pyq, _ = sample_tasks(META_BATCH, pretrain_gen)
    pooled_loss = sine_loss(pretrained_params, torch.cat([pxs, pxq]).flatten(0, 1), torch.cat([pys, pyq]).flatten(0, 1))
    pretrain_optimizer.zero_grad()
    pooled_loss.backward()
    pretrain_optimizer.step()
torch.set_num_threads(threads)


def meta_loss_first_order(params, x_support, y_support, x_query, y_query):
    """meta_loss with the inner gradient detached: first-order MAML."""
    g = grad(sine_loss)(params, x_support, y_support)
    adapted = {name: p - INNER_LR * g[name].detach() for name, p in params.items()}
    return sine_loss(adapted, x_query, y_query)


meta_grads = {}
for order, fn in (("second-order", meta_loss), ("first-order", meta_loss_first_order)):
    order_loss = vmap(fn, in_dims=(None, 0, 0, 0, 0))(meta_params, xs, ys, xq, yq).mean()
    meta_grads[order] = torch.cat([g.flatten() for g in torch.autograd.grad(order_loss, list(meta_params.values()))])
order_difference = ((meta_grads["second-order"] - meta_grads["first-order"]).norm() / meta_grads["second-order"].norm()).item()
print(f"last meta-batch: |second-order - first-order meta-gradient| / |second-order| = {order_difference:.2e}")
_ = report.record("MAML: relative difference of second- and first-order meta-gradients", order_difference, "", digits=4)
assert order_difference > 1e-4, (
    f"the second-order meta-gradient should differ from the first-order one (relative difference {order_difference:.1e}): "
    "is the inner gradient part of the graph?"
)

# %% [markdown]
# Now the test: `TEST_TASKS` new sine waves, never seen in training. For
# each we measure the query loss of the meta-learned initialisation as it
# is (**pre-adaptation**) and after `ADAPT_STEPS` gradient steps on the
# task's `K_SHOT` support points (**post-adaptation**), also vmapped over the
# tasks. For comparison, the same procedure from the two baselines: the
# network pretrained on all tasks, and its original random initialisation:

# %%
xs, ys, xq, yq, (amp, phase) = sample_tasks(TEST_TASKS, torch.Generator().manual_seed(SEED + 1))
learned = {name: p.detach() for name, p in meta_params.items()}
adaptation = {}
pretrained = {name: p.detach() for name, p in pretrained_params.items()}
for start_name, start_params in (("MAML initialisation", learned), ("pretrained on all tasks", pretrained),
                                 ("random initialisation", initial_params)):
    pre = vmap(sine_loss, in_dims=(None, 0, 0))(start_params, xq, yq).mean().item()
    post = vmap(lambda a, b, c, d, p=start_params: sine_loss(adapt(p, a, b, ADAPT_STEPS), c, d))(xs, ys, xq, yq).mean().item()
    adaptation[start_name] = (pre, post)
print(f"{'query MSE on ' + str(TEST_TASKS) + ' new tasks':34s} {'pre':>7s} {'post':>7s} {'post/pre':>9s}")
for start_name, (pre, post) in adaptation.items():
    print(f"{start_name:34s} {pre:7.3f} {post:7.3f} {post / pre:9.2f}")
pre_loss, post_loss = adaptation["MAML initialisation"]
adapted_ratio = post_loss / pre_loss
_ = report.record("MAML query MSE before adaptation", pre_loss, "", digits=3)
_ = report.record(f"MAML query MSE after {ADAPT_STEPS} steps", post_loss, "", digits=3)
_ = report.record("MAML post/pre adaptation loss ratio", adapted_ratio, "", digits=3)
_ = report.record(f"pretrained baseline query MSE after {ADAPT_STEPS} steps", adaptation["pretrained on all tasks"][1], "", digits=3)

# %%
assert adapted_ratio < MAX_ADAPTED_RATIO, (
    f"after {ADAPT_STEPS} steps the query loss should drop below {MAX_ADAPTED_RATIO} of the pre-adaptation loss, "
    f"got {adapted_ratio:.2f}: did meta-training run long enough?"
)
for baseline in ("pretrained on all tasks", "random initialisation"):
    baseline_post = adaptation[baseline][1]
    assert baseline_post > MIN_BASELINE_RATIO * post_loss, (
        f"after {ADAPT_STEPS} steps MAML's query loss ({post_loss:.3f}) should be below the {baseline} baseline's "
        f"({baseline_post:.3f}) by a factor {MIN_BASELINE_RATIO}"
    )

# %% [markdown]
# The meta-learned initialisation is not a good model of any single wave
# (its pre-adaptation loss is high: it predicts something like the average
# wave), but a few steps on ten points fit a new wave well: after the same
# `ADAPT_STEPS` steps its query loss is lower than both baselines' (see the
# table; the assert requires a factor `MIN_BASELINE_RATIO`). The pretrained
# network has learned the tasks' average, not how to adapt; compare the
# post/pre column. A look at three test tasks, and the meta-training curve:

# %%
grid = torch.linspace(-5, 5, 200).view(1, -1, 1)
fig, axes = plt.subplots(1, 4, figsize=(12, 2.8))
with torch.no_grad():
    for k, ax in enumerate(axes[:3]):
        adapted_1 = adapt(learned, xs[k], ys[k], 1)
        adapted_k = adapt(learned, xs[k], ys[k], ADAPT_STEPS)
        ax.plot(grid[0, :, 0], (amp[k] * torch.sin(grid + phase[k]))[0, :, 0], "k", lw=2, label="truth")
        ax.plot(grid[0, :, 0], functional_call(sine_net, learned, (grid[0],))[:, 0], "--", color="tab:gray", label="pre-adaptation")
        ax.plot(grid[0, :, 0], functional_call(sine_net, adapted_1, (grid[0],))[:, 0], color="tab:orange", label="after 1 step")
        ax.plot(grid[0, :, 0], functional_call(sine_net, adapted_k, (grid[0],))[:, 0], color="tab:red",
                label=f"after {ADAPT_STEPS} steps")
        ax.scatter(xs[k, :, 0], ys[k, :, 0], color="tab:blue", zorder=3, s=15, label=f"{K_SHOT} support points")
        ax.set_title(f"test task {k}", fontsize=9)
axes[0].legend(fontsize=6, loc="lower left")
window = max(1, META_STEPS // 20)  # average the noisy per-step losses over windows
smooth = torch.tensor(meta_curve).unfold(0, window, window).mean(1)
axes[3].plot(torch.arange(len(smooth)) * window, smooth)
axes[3].set(title="meta-training (query loss)", xlabel="meta-step", yscale="log")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Pitfalls
#
# ### 1. Writing in place into a tensor that is not batched
#
# Inside `vmap`, a tensor you create (`torch.zeros(4)`) has no batch
# dimension, while the inputs do. Writing a batched value into it in place
# cannot work: there is one `out` for the whole batch, but one value per
# example to put in it. Filling a preallocated buffer is the common way to
# hit this:

# %%
# NBVAL_CHECK_OUTPUT
def first_two_buffered(row):
    out = torch.zeros(2)
    out[0] = row[0]  # in place: a batched value into an unbatched tensor
    out[1] = row[1]
    return out


rows = torch.randn(3, 5)
try:
    vmap(first_two_buffered)(rows)
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# **Fix:** build the result out of place (`torch.stack`, `torch.cat`,
# `torch.where`), or create the buffer from the input so that it is batched
# too (`torch.zeros_like(row[:2])` or `row.new_zeros(2)`):

# %%
# NBVAL_CHECK_OUTPUT
def first_two(row):
    return torch.stack([row[0], row[1]])


def first_two_batched_buffer(row):
    out = torch.zeros_like(row[:2])  # derived from the batched input: batched as well
    out[0] = row[0]
    out[1] = row[1]
    return out


print(torch.equal(vmap(first_two)(rows), rows[:, :2]), torch.equal(vmap(first_two_batched_buffer)(rows), rows[:, :2]))

# %% [markdown]
# ### 2. `.item()` and Python control flow on a tensor
#
# Inside `vmap` a tensor stands for a whole batch of values, so it cannot
# become one Python number, and an `if` on it cannot take one branch:

# %%
# NBVAL_CHECK_OUTPUT
def scale_by_total(row):
    return row / row.sum().item()


def absolute_if(row):
    return row if row.sum() > 0 else -row


for fn in (scale_by_total, absolute_if):
    try:
        vmap(fn)(rows)
    except RuntimeError as err:
        print(f"{fn.__name__}: {type(err).__name__}: {err}")

# %% [markdown]
# **Fix:** stay in tensors: `row / row.sum()`, and
# `torch.where(row.sum() > 0, row, -row)` computes both branches and picks
# per example.

# %%
fixed_scale = vmap(lambda row: row / row.sum())(rows)
fixed_abs = vmap(lambda row: torch.where(row.sum() > 0, row, -row))(rows)
assert torch.allclose(fixed_scale, rows / rows.sum(1, keepdim=True))
assert torch.equal(fixed_abs, torch.where(rows.sum(1, keepdim=True) > 0, rows, -rows))
print("tensor versions run under vmap and match the batched formulas")

# %% [markdown]
# ### 3. `grad` of a function that does not return a scalar
#
# `grad` is for scalar functions, like `backward()` without an argument. A
# per-example loss with `reduction="none"` returns a vector:

# %%
# NBVAL_CHECK_OUTPUT
def unreduced_loss(params, x, y):
    return F.cross_entropy(functional_call(model, params, (x,)), y, reduction="none")  # [B]


try:
    grad(unreduced_loss)(params, images, labels)
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# **Fix:** reduce to a scalar (`.mean()` for the batch gradient), or, if
# you wanted one gradient per element, that is a Jacobian (`jacrev`), or
# per-sample gradients with `vmap(grad(...))` as above.
#
# ### 4. BatchNorm in training mode under `vmap`
#
# In training mode, `BatchNorm` updates its running mean and variance in
# place. Under `vmap` over a model whose buffers are not batched, each
# example (here, a group of 3 rows) would write its own statistics into one
# shared buffer: the same problem as pitfall 1, and `vmap` refuses:

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(SEED)
bn_model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))  # training mode
groups = torch.randn(5, 3, 4)  # 5 groups of 3 examples, each normalised with its own batch statistics
try:
    vmap(bn_model)(groups)
    bn_error = None
except RuntimeError as err:
    bn_error = err
    print(f"{type(err).__name__}: {err}")
assert bn_error is not None

# %% [markdown]
# **Fix:** if you do not need the running statistics (eval mode),
# `torch.func.replace_all_batch_norm_modules_(model)` switches every
# BatchNorm in the model to `track_running_stats=False`, in place: each
# call normalises with its own batch statistics and writes nothing.

# %%
# NBVAL_CHECK_OUTPUT
torch.func.replace_all_batch_norm_modules_(bn_model)
bn_out = vmap(bn_model)(groups)
print("running_mean:", bn_model[1].running_mean, "| output", tuple(bn_out.shape),
      "| group 2 equals the model on group 2 alone:", torch.allclose(bn_out[2], bn_model(groups[2]), atol=1e-6))
assert torch.allclose(bn_out[2], bn_model(groups[2]), atol=1e-6)

# %% [markdown]
# If you do want running statistics, one set per model, stack the models
# with `stack_module_state`, as for the ensemble: then the buffers are
# batched too, and each member writes only its own slice. Three such models,
# each given its own group of examples, against copies of them run alone:

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(SEED)
bn_members = [nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8)) for _ in range(3)]  # training mode
bn_alone = copy.deepcopy(bn_members)
bn_params, bn_buffers = stack_module_state(bn_members)
bn_skeleton = copy.deepcopy(bn_members[0]).to("meta")
vmap(lambda p, b, x: functional_call(bn_skeleton, (p, b), (x,)))(bn_params, bn_buffers, groups[:3])
for member, group in zip(bn_alone, groups[:3]):
    member(group)
alone_means = torch.stack([member[1].running_mean for member in bn_alone])
stacked_means = bn_buffers["1.running_mean"]
print("stacked running_mean", tuple(stacked_means.shape), "| equal to each model run alone:",
      torch.allclose(stacked_means, alone_means, atol=1e-6), "| members differ:",
      not torch.allclose(stacked_means[0], stacked_means[1]))
assert torch.allclose(stacked_means, alone_means, atol=1e-6), "each stacked member should update its own running mean"
assert not torch.allclose(stacked_means[0], stacked_means[1]), "members saw different groups: their statistics should differ"

# %% [markdown]
# ## From functorch to torch.func
#
# Older code and tutorials import these transforms from the separate
# `functorch` package, which was merged into PyTorch as `torch.func` in
# PyTorch 2.0. Its names still exist and warn with a `FutureWarning` that
# names the replacement. `make_functional` and `combine_state_for_ensemble`
# have no same-named successor: their job is done by `functional_call` with
# a dict of parameters, and by `stack_module_state`, as in this chapter:

# %%
# NBVAL_CHECK_OUTPUT
small = nn.Linear(3, 2)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    functorch.vmap(torch.sin)(torch.randn(4, 3))
    functorch.grad(lambda t: t.sin().sum())(torch.randn(3))
    functorch.make_functional(small)
    functorch.combine_state_for_ensemble([small, copy.deepcopy(small)])
migration = {}
for w in caught:
    found = re.search(r"`(functorch\.\w+)` is deprecated.*?Please use `?([\w.]+)`?", str(w.message))
    if found and issubclass(w.category, FutureWarning):
        migration[found.group(1)] = found.group(2)
for old, new in migration.items():
    print(f"{old:36s} -> {new}")
assert len(migration) == 4, f"each functorch call should warn and name its replacement: {migration}"


# %% [markdown]
# ## Exercises
#
# Each exercise has a stub for you to fill in, then a checker cell that
# prints **PASSED**, **NOT YET** with a hint, or **TODO** while the stub
# still raises `NotImplementedError`. If you are stuck,
# `solution("21.clip_per_sample")` returns the reference solution.
#
# ### Exercise 1: per-sample gradient clipping (DP-SGD)
#
# Write `clip_per_sample(per_sample_grads, max_norm)`. `per_sample_grads`
# is a dict like `psg_vmap` above: parameter name → tensor `[B, ...]`. For
# each example, compute **one** L2 norm over all of its parameter tensors
# together, scale that example's gradients by `min(1, max_norm / (norm +
# 1e-6))`, and return the average over the batch, a dict name → tensor
# without the batch dimension. (DP-SGD would then add Gaussian noise; leave
# that out.) Do not change the input. When it passes, the cell clips the
# MNIST per-sample gradients at their median norm.


# %%
def clip_per_sample(per_sample_grads, max_norm):
    """Clip each example's gradient to norm <= max_norm, then average over the batch."""
    raise NotImplementedError


# %%
result = check("21.clip_per_sample", clip_per_sample)
if result.passed:
    clipped = clip_per_sample(psg_vmap, clip_at)
    clipped_norm = torch.sqrt(sum(g.pow(2).sum() for g in clipped.values()))
    plain_norm = torch.sqrt(sum(g.pow(2).sum() for g in grads.values()))
    print(f"norm of the batch gradient: {plain_norm:.3f}; clipped at {clip_at:.2f} per example: {clipped_norm:.3f}")

# %% [markdown]
# ### Exercise 2: a Hessian-vector product without the Hessian
#
# The Hessian of a function of `n` variables has `n²` entries: for a model
# with a million parameters, far too many to build. Many methods only need
# its product with a vector, `H(x) v`, and that costs a small multiple of
# one gradient (Pearlmutter 1994). Write `hvp(f, x, v)` by composing
# `torch.func` transforms, **forward over reverse**, exactly and without
# building `H`. `x` can have any shape; return a tensor of the same shape.
# The checker compares with the exact product on a few functions, one of
# them with 100,000 variables (a Hessian of 10¹⁰ entries), and refuses the
# shortcuts: `hessian`, `jacfwd`/`jacrev`, `vjp`, `torch.autograd.grad` and
# `torch.autograd.functional`. Finite differences of the gradient are not
# exact enough to pass, and an exact product computed in reverse mode twice
# (`grad` of `grad`, or `backward(create_graph=True)` then a second
# `backward`) is refused too: the checker looks for a forward-mode (`jvp`)
# computation.


# %%
def hvp(f, x, v):
    """H(x) v for a scalar function f, with the shape of x."""
    raise NotImplementedError


# %%
result = check("21.hvp", hvp)
if result.passed:
    direction = torch.randn(4, dtype=torch.float64)
    print("hvp(f_scalar) vs hessian(f_scalar) @ v:", torch.allclose(hvp(f_scalar, x4, direction), H_new @ direction))

# %% [markdown]
# ## Summary
#
# - `torch.func` transforms functions: `vmap(f)` batches a function written
#   for one example (`in_dims`, `out_dims`, nesting); `grad(f)` and
#   `grad_and_value(f)` return gradient functions; they compose freely.
# - An operator without a batching rule still works under `vmap`, through a
#   per-example loop, with a "performance drop" warning (`torch.histc` in
#   torch 2.14). Random operations need `randomness="same"` or
#   `"different"`.
# - `functional_call(model, params, args)` turns a module into a function of
#   its parameters; its gradients equal `loss.backward()`'s.
# - `jacrev` needs a pass per output, `jacfwd` a pass per input: forward mode
#   wins for tall Jacobians, reverse mode for wide ones (see the timing
#   table); `hessian` is forward over reverse.
# - Per-sample gradients are `vmap(grad(loss_of_one_example))`: equal to a
#   loop, and faster (the speed-up measured above); DP-SGD clips them.
# - `stack_module_state` plus `vmap` runs and trains an ensemble of models as
#   one, exactly as if each were trained alone; it gained more over a loop
#   for many tiny models on a small batch than for ten models on 10,000
#   images (the two timing tables; checked with a margin).
# - MAML differentiates through an inner gradient step (its meta-gradient
#   differs from the first-order one); after meta-training a few steps on ten
#   points fit a new sine wave better than from a network pretrained on all
#   tasks or from a random initialisation.
# - Inside `vmap`: no in-place writes of batched values into unbatched
#   tensors (BatchNorm's running statistics included:
#   `replace_all_batch_norm_modules_`), no `.item()`, no `if` on tensors;
#   `grad` needs a scalar; `chunk_size=` trades speed for memory.
#
# **Next:** chapter 22 turns trained models into deployable artefacts with
# `torch.export` and ONNX.

# %%
print(f"notebook ran in {time.perf_counter() - notebook_start:.0f} s")
report.finish()
