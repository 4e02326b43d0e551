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
# # 19 · Custom autograd functions and operators
#
# Autograd differentiates any composition of PyTorch operations, and most of
# the time that is all you need. This chapter is about the times it is not:
# when the derivative autograd builds is numerically worse than one you can
# write by hand, when you want a backward that does less work or keeps less
# memory, and when part of the computation is code autograd and
# `torch.compile` cannot see into (NumPy, a C++ or CUDA kernel). The tools
# are `torch.autograd.Function`, for a forward/backward pair written in
# Python, and `torch.library.custom_op`, which turns a function into a real
# PyTorch operator that autograd, `torch.func` and `torch.compile` all
# understand.
#
# **What you will learn**
# - why naive softplus overflows in float32, in the forward or only in the
#   gradient, and a stable `autograd.Function` with a hand-written backward;
# - the current style of `autograd.Function`: `forward(*args)` without `ctx`,
#   a separate `setup_context(ctx, inputs, output)`, and `apply`;
# - `ctx.save_for_backward` (and why not `ctx.x = x`), `ctx.needs_input_grad`,
#   `ctx.mark_non_differentiable`, `ctx.set_materialize_grads`;
# - checking a backward with `gradcheck` and `gradgradcheck` in float64, and
#   what they print when a backward is wrong;
# - double backward, and `@once_differentiable` for a backward that cannot be
#   differentiated;
# - `torch.func.vmap` and `torch.func.grad` through a Function
#   (`generate_vmap_rule`, or a hand-written `vmap` rule);
# - `torch.library.custom_op` with a fake kernel and an autograd formula,
#   checked by `torch.library.opcheck`, under `torch.compile(fullgraph=True)`;
# - custom Functions inside a small MNIST model's training step;
# - the errors people hit: an in-place change to a saved tensor, a gradient
#   of the wrong shape, a missing `None`, calling `forward` directly.
#
# **Prerequisites:** chapter 02 (autograd, `create_graph`), chapter 05 (an
# MLP on MNIST), chapter 16 (`torch.compile`: Dynamo, AOTAutograd,
# backends). Chapter 21 (`torch.func`) goes deeper into `vmap` and `grad`.
#
# **Estimated time:** 60 minutes.

# %% tags=["parameters"]
SEED = 0
TRAIN_IMAGES = 10000  # MNIST training images used by the training-step demo (the first ones)
TEST_IMAGES = 2000  # MNIST test images to evaluate on
HIDDEN = 64  # width of the demo MLP's hidden layer
BATCH_SIZE = 128  # images per optimizer step
MNIST_STEPS = 300  # optimizer steps of the MNIST demo
LR = 3e-3  # Adam's learning rate in the MNIST demo
MIN_MNIST_ACCURACY = 0.85  # test accuracy the checks require of the demo MLP (about 0.91 is typical)
COMPILE_BACKEND = "inductor"  # torch.compile backend for the custom op ("aot_eager" skips code generation: quicker)

# %% [markdown]
# ## Setup
#
# As in chapter 16, Inductor's cache folder goes under `build/` (set before
# the first compile), and Inductor compiles in this process. The first
# Inductor compile looks for a CUDA toolkit and logs a warning to stderr
# when it finds one without a GPU; we raise that logger's level so it does
# not clutter the notebook.

# %%
import os

from helpers.paths import build_dir

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(build_dir() / "inductor_cache"))

import gc
import logging
import time
import warnings
import weakref

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch._dynamo
import torch._inductor.config
import torch.nn.functional as F
from torch import nn
from torch.autograd import Function
from torch.autograd.function import once_differentiable
from torch.autograd.gradcheck import GradcheckError

from helpers.data import mnist
from helpers.device import pick_device, seed_everything
from helpers.exercises import check, hint, solution  # noqa: F401  (hint, solution: for when you are stuck)
from helpers.report import ChapterReport

torch._inductor.config.compile_threads = 1
logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)

generator = seed_everything(SEED)
device = pick_device()
report = ChapterReport("19_custom_autograd")
notebook_start = time.perf_counter()
print(f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} CPU threads")
print("this chapter runs its Functions on the CPU: they are small, and the ideas do not depend on the device")

# %% [markdown]
# ## 1. When autograd's derivative is not good enough
#
# **Softplus**, softplus(x) = log(1 + eˣ), is a smooth ReLU; its derivative
# is the sigmoid, σ(x) = 1 / (1 + e⁻ˣ). Written as it reads, it breaks for
# large x in float32: e⁸⁹ is larger than the largest float32 (about
# 3.4·10³⁸), so `exp` returns `inf`, and so does the log.
#
# The usual patch is to switch to the asymptote for large x with
# `torch.where`. The *forward* is then right. The *gradient* is still NaN:
# `torch.where` computes both branches, and its backward sends a zero
# gradient into the branch it did not pick. Autograd then multiplies that
# zero by the derivative of `exp`, which is `inf`, and 0 · ∞ = NaN. The NaN
# in the unused branch flows back into `x.grad`.

# %%
xs = torch.tensor([-100.0, -1.0, 0.0, 1.0, 100.0], requires_grad=True)


def softplus_naive(x):
    return torch.log(1 + torch.exp(x))


def softplus_where(x):
    return torch.where(x > 20, x, torch.log1p(torch.exp(x)))  # forward fixed, gradient not


naive_results = {}
for name, fn in [("naive", softplus_naive), ("torch.where", softplus_where)]:
    y = fn(xs)
    (g,) = torch.autograd.grad(y.sum(), xs)
    naive_results[name] = (y.detach(), g)
    print(f"{name:12s} value at x=100: {y[-1].item()}, gradient at x=100: {g[-1].item()}")

# %%
assert torch.isinf(naive_results["naive"][0][-1]), "the naive forward should overflow to inf at x = 100"
assert naive_results["torch.where"][0][-1] == 100 and torch.isnan(naive_results["torch.where"][1][-1]), (
    "the torch.where version should have the right value but a NaN gradient at x = 100"
)

# %% [markdown]
# A stable forward is max(x, 0) + log1p(e^(−|x|)): `exp` now only sees
# arguments ≤ 0, so it never overflows. Autograd can differentiate that
# expression too, but not well. At x = 0 both max(x, 0) and |x| have a kink,
# and autograd uses a fixed value for each derivative there: 0 for `clamp`
# at its bound and sign(0) = 0 for `abs`. Each is a valid choice on its
# own, but together they give a gradient of 0 at x = 0 instead of the true
# σ(0) = 0.5 (measured below): the kinks cancel in the sum, their
# derivatives do not. It also saves several intermediate tensors for the
# backward. By hand, the derivative is just σ(x), which
# `torch.sigmoid` computes stably from the one saved input. That is the
# motivation for a custom Function: **you** decide what the backward
# computes and what it keeps.
#
# ## 2. `torch.autograd.Function`, the current style
#
# A Function is a class with static methods:
#
# - `forward(x, ...)`: computes the output from the inputs, with ordinary
#   tensor code. It runs with gradient recording off: autograd does not
#   look inside it.
# - `setup_context(ctx, inputs, output)`: stores on `ctx` what backward will
#   need. `inputs` is the tuple of forward's arguments.
# - `backward(ctx, grad_output)`: given the gradient of the loss with
#   respect to the output, returns the gradient with respect to *each*
#   input of forward, in order (chain rule: grad_output · ∂output/∂input).
#
# You call it with `Softplus.apply(x)`, never `Softplus.forward(x)` (see
# Pitfalls). Older code, and many tutorials, write `forward(ctx, x)` with the
# context as first argument and no `setup_context`. That still works for
# plain autograd, but `torch.func` transforms (`vmap`, `grad`, section 7)
# require the split form, so use it for new code.
#
# `generate_vmap_rule = True` is explained in section 7; ignore it for now.


# %%
class Softplus(Function):
    """softplus(x) = log(1 + exp(x)), stable for any float32 x; backward: grad * sigmoid(x)."""

    generate_vmap_rule = True  # see section 7

    @staticmethod
    def forward(x):
        return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.sigmoid(x)  # differentiable torch ops: double backward works (section 6)


y = Softplus.apply(xs)
(g,) = torch.autograd.grad(y.sum(), xs)
print("values:   ", [round(v, 4) for v in y.tolist()])
print("gradients:", [round(v, 4) for v in g.tolist()])
print("grad_fn of the output:", type(y.grad_fn).__name__)

# %% [markdown]
# The output's `grad_fn` is a node named after the class: during backward,
# autograd calls our `backward` there. Now a careful comparison over the
# whole range [−100, 100] in float32 against a float64 reference (in float64
# the naive formula is fine up to x ≈ 709):

# %%
def softplus_stable_autograd(x):
    return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))  # Softplus's forward, differentiated by autograd


SOFTPLUS_VERSIONS = [("naive", softplus_naive), ("torch.where", softplus_where),
                     ("autograd of the stable formula", softplus_stable_autograd), ("custom Function", Softplus.apply)]
grid = (torch.arange(-2000, 2001) * 0.05).requires_grad_()  # [-100, 100] in steps of 0.05, with x = 0 exactly
x64 = grid.detach().double()
ref_value, ref_grad = torch.log1p(torch.exp(x64)), torch.sigmoid(x64)
curves = {}
for name, fn in SOFTPLUS_VERSIONS:
    y = fn(grid)
    (g,) = torch.autograd.grad(y.sum(), grid)
    curves[name] = (y.detach(), g)
    value_err = (y.detach().double() - ref_value).abs().max().item()
    grad_err = (g.double() - ref_grad).abs().max().item()
    print(f"{name:30s} max |value - float64|: {value_err:9.2e}   max |gradient - float64|: {grad_err:9.2e}"
          f"   non-finite gradients: {(~torch.isfinite(g)).sum().item()}")
custom_value_err = (curves["custom Function"][0].double() - ref_value).abs().max().item()
custom_grad_err = (curves["custom Function"][1].double() - ref_grad).abs().max().item()
_ = report.record("softplus: max |gradient - float64| (custom Function, float32)", custom_grad_err, digits=10)

# %%
assert torch.isfinite(curves["custom Function"][0]).all() and torch.isfinite(curves["custom Function"][1]).all(), (
    "the custom Function should be finite everywhere on [-100, 100]"
)
assert custom_value_err < 1e-4 and custom_grad_err < 1e-6, (
    f"the custom Function should match float64 (value error {custom_value_err:.1e}, gradient error {custom_grad_err:.1e})"
)
assert (~torch.isfinite(curves["torch.where"][1])).sum() > 0, "the torch.where version should have NaN gradients"
stable_autograd_grad_err = (curves["autograd of the stable formula"][1].double() - ref_grad).abs().max().item()
assert abs(stable_autograd_grad_err - 0.5) < 1e-6, (
    f"autograd of the stable formula should be off by 0.5 at the grid point x = 0, got {stable_autograd_grad_err:.2e}"
)

# %% [markdown]
# The stable formula under autograd is finite everywhere; its one wrong
# point is x = 0. We evaluate both versions there, and count the tensors
# each saves for its backward with `torch.autograd.graph.saved_tensors_hooks`
# (its pack hook is called once per tensor saved):

# %%
# NBVAL_CHECK_OUTPUT
saved_counts, grads_at_zero = {}, {}
for name, fn in [("autograd of the stable formula", softplus_stable_autograd), ("custom Function", Softplus.apply)]:
    x_zero = torch.zeros(1, requires_grad=True)
    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t, saved=packed: saved.append(t) or t, lambda t: t):
        y = fn(x_zero)
    (g,) = torch.autograd.grad(y.sum(), x_zero)
    saved_counts[name], grads_at_zero[name] = len(packed), g.item()
    print(f"{name:30s} gradient at x = 0: {g.item():.4f} (sigmoid(0) = 0.5)   tensors saved for backward: {len(packed)}")

# %%
assert abs(grads_at_zero["autograd of the stable formula"] - 0.5) > 0.4, (
    f"autograd of the stable formula should be off by about 0.5 at x = 0, got {grads_at_zero}"
)
assert abs(grads_at_zero["custom Function"] - 0.5) < 1e-6, f"the custom Function should give sigmoid(0) = 0.5: {grads_at_zero}"
assert saved_counts["custom Function"] == 1 < saved_counts["autograd of the stable formula"], (
    f"the custom Function should save only x, autograd of the formula more: {saved_counts}"
)

# %%
fig, axes = plt.subplots(1, 2, figsize=(9, 3))
for name, style in [("naive", "-"), ("torch.where", "--"), ("autograd of the stable formula", "-."), ("custom Function", ":")]:
    value, g = curves[name]
    axes[0].plot(grid.detach(), value.clamp(max=150), style, label=name)  # inf drawn at the top
    axes[1].plot(grid.detach(), torch.where(torch.isfinite(g), g, torch.tensor(-0.1)), style, label=name)
axes[0].set(title="softplus(x) in float32 (inf clipped to 150)", xlabel="x")
axes[1].set(title="gradient (NaN drawn at -0.1)", xlabel="x")
axes[1].legend(fontsize=7)
fig.tight_layout()
plt.show()

# %% [markdown]
# The naive forward jumps to `inf` at x ≈ 88.7, where e^x leaves float32;
# both naive gradients become NaN from the same point on. Autograd of the
# stable formula is right except at the single grid point x = 0 (the dip in
# the right panel: its largest gradient error is 0.5, see the table above).
# The custom Function follows the float64 reference everywhere.
#
# ## 3. `ctx.save_for_backward`, and why not `ctx.x = x`
#
# `ctx.save_for_backward(*tensors)` is the way to keep **inputs or outputs**
# for backward (`ctx.saved_tensors` gives them back). Two reasons not to just
# write `ctx.x = x`:
#
# - **Version checks.** Every tensor has a version counter that each
#   in-place operation increments. A saved tensor remembers the version it
#   was saved at, and backward raises an error if it changed, instead of
#   computing a gradient from the wrong values. A plain attribute has no such
#   check (Pitfall 1 shows the silent wrong gradient).
# - **No reference cycles.** The output points to its `grad_fn`, which *is*
#   the `ctx` object. If `ctx` in turn holds the output as an attribute, the
#   two keep each other alive after you drop them, and the memory waits for
#   Python's garbage collector. `save_for_backward` stores the output in a
#   form that does not create that cycle.
#
# Other values (shapes, Python numbers, flags) can go on `ctx` as plain
# attributes. Here is the cycle, observed with a weak reference while the
# garbage collector is paused:


# %%
class KeepsOutputOnCtx(Function):
    @staticmethod
    def forward(x):
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.out = output  # the mistake: output -> grad_fn (= ctx) -> output

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * 2


class SavesOutput(KeepsOutputOnCtx):
    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)


big_input = torch.randn(1_000_000, requires_grad=True)
alive_after_del = {}
gc.disable()
try:
    for cls in (KeepsOutputOnCtx, SavesOutput):
        out = cls.apply(big_input)
        ref = weakref.ref(out)
        del out
        alive_after_del[cls.__name__] = ref() is not None
        gc.collect()
        print(f"{cls.__name__:17s} output still alive after `del`: {alive_after_del[cls.__name__]}, "
              f"after gc.collect(): {ref() is not None}")
finally:
    gc.enable()

# %%
assert alive_after_del == {"KeepsOutputOnCtx": True, "SavesOutput": False}, (
    f"ctx.out = output should keep the 4 MB output alive until gc runs; save_for_backward should not: {alive_after_del}"
)

# %% [markdown]
# ## 4. `ctx.needs_input_grad`: skip work nobody asked for
#
# `backward` must return one gradient per input, but not every input needs
# one: the input images of a network, frozen weights, or a tensor that does
# not require grad. `ctx.needs_input_grad` is a tuple of booleans, one per
# forward argument; return `None` where it is `False` and skip the work.
#
# A linear layer, y = x Wᵀ + b, makes the point: the gradient for x and the
# gradient for W are each a matrix multiplication, as large as the forward
# one. We count the matrix multiplications the backward actually does:

# %%
backward_matmuls = {"done": 0, "skipped": 0}


class LinearFunction(Function):
    """y = x @ weight.T + bias for x [B, in], weight [out, in], bias [out]; backward skips unneeded grads."""

    @staticmethod
    def forward(x, weight, bias):
        return x @ weight.T + bias

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight, bias = inputs
        ctx.save_for_backward(x, weight)

    @staticmethod
    def backward(ctx, grad_output):
        x, weight = ctx.saved_tensors
        grad_x = grad_weight = grad_bias = None
        for needed in ctx.needs_input_grad[:2]:
            backward_matmuls["done" if needed else "skipped"] += 1
        if ctx.needs_input_grad[0]:
            grad_x = grad_output @ weight  # [B, out] @ [out, in] -> [B, in]
        if ctx.needs_input_grad[1]:
            grad_weight = grad_output.T @ x  # [out, B] @ [B, in] -> [out, in]
        if ctx.needs_input_grad[2]:
            grad_bias = grad_output.sum(dim=0)  # bias was broadcast over the batch: sum it back
        return grad_x, grad_weight, grad_bias


lin_x = torch.randn(8, 5, dtype=torch.float64)
lin_w = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
lin_b = torch.randn(3, dtype=torch.float64, requires_grad=True)
for label, x_requires_grad in [("input needs no grad (e.g. images)", False), ("input needs grad (a hidden layer)", True)]:
    backward_matmuls.update(done=0, skipped=0)
    LinearFunction.apply(lin_x.clone().requires_grad_(x_requires_grad), lin_w, lin_b).sum().backward()
    print(f"{label:35s} backward matmuls done: {backward_matmuls['done']}, skipped: {backward_matmuls['skipped']}")

# %%
# NBVAL_CHECK_OUTPUT
reference_linear = F.linear(lin_x, lin_w, lin_b)
print("same output as F.linear:", torch.allclose(LinearFunction.apply(lin_x, lin_w, lin_b), reference_linear))
print("gradcheck with x, weight, bias all requiring grad:",
      torch.autograd.gradcheck(LinearFunction.apply, (lin_x.clone().requires_grad_(), lin_w, lin_b)))
print("gradcheck with x constant:", torch.autograd.gradcheck(LinearFunction.apply, (lin_x, lin_w, lin_b)))

# %% [markdown]
# In the MNIST demo (section 9) the first layer's input is the images, so
# every training step skips one of the two equal-size matrix
# multiplications of that layer's backward (grad_x, [B, out] @ [out, in], and
# grad_W, [out, B] @ [B, in], each take B·in·out multiply-adds).
#
# ## 5. Outputs without gradients: `mark_non_differentiable`, `set_materialize_grads`
#
# Some outputs are not differentiable: an index, a mask, a count. Returning
# `(values, indices)` of a row-wise maximum is the classic case. Calling
# `ctx.mark_non_differentiable(indices)` in `setup_context` tells autograd
# so: the indices come out with `requires_grad=False`, as `torch.max` does.
#
# `backward` still receives one gradient argument per output. By default
# autograd **materialises** the missing ones as zero tensors, so that
# backward can do arithmetic with them without checking. With
# `ctx.set_materialize_grads(False)` they arrive as `None` instead, which
# saves allocating zeros when a Function has several outputs and a loss
# uses only some of them; backward must then handle `None`.

# %%
received = {}


class MaxWithIndex(Function):
    """Row-wise maximum of x [B, n]: (values [B], indices [B]); the indices are not differentiable."""

    @staticmethod
    def forward(x):
        values, indices = x.max(dim=-1)
        return values, indices

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        _, indices = output
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.input_shape = x.shape  # not a tensor: a plain attribute is fine

    @staticmethod
    def backward(ctx, grad_values, grad_indices):
        received[type(ctx).__name__.removesuffix("Backward")] = grad_indices  # ctx is the graph node "<Function>Backward"
        (indices,) = ctx.saved_tensors
        grad_x = grad_values.new_zeros(ctx.input_shape)
        return grad_x.scatter(-1, indices.unsqueeze(-1), grad_values.unsqueeze(-1))  # the gradient goes to the max


class MaxWithIndexNoMaterialize(MaxWithIndex):
    @staticmethod
    def setup_context(ctx, inputs, output):
        MaxWithIndex.setup_context(ctx, inputs, output)
        ctx.set_materialize_grads(False)


scores = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.5, 0.2]], requires_grad=True)
for cls in (MaxWithIndex, MaxWithIndexNoMaterialize):
    values, indices = cls.apply(scores)
    (grad_scores,) = torch.autograd.grad(values.sum(), scores)
print(f"values.requires_grad = {values.requires_grad}, indices.requires_grad = {indices.requires_grad}")
print("gradient w.r.t. scores:", grad_scores.tolist())
for name, got in received.items():
    print(f"{name}: backward received grad_indices = {got!r}")

# %%
assert not indices.requires_grad and values.requires_grad
assert torch.equal(grad_scores, torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])), "the gradient should go to each maximum"
assert isinstance(received["MaxWithIndex"], torch.Tensor) and received["MaxWithIndexNoMaterialize"] is None, (
    "materialised grads should arrive as zeros, non-materialised ones as None"
)

# %% [markdown]
# ## 6. Checking a backward: `gradcheck` and `gradgradcheck`
#
# A hand-written backward is code you can get wrong, and a wrong gradient
# does not crash: the model just trains badly. `torch.autograd.gradcheck(fn,
# inputs)` compares your backward, column by column, with finite
# differences (f(x + ε) − f(x − ε)) / 2ε. `gradgradcheck` does the same for
# the gradient of the gradient (section 6b). Use **float64** inputs: with
# float32's 7 digits, finite differences are too noisy, and `gradcheck`
# says so:

# %%
checks = {}
for name, fn, inputs in [
    ("Softplus", Softplus.apply, (torch.randn(6, dtype=torch.float64, requires_grad=True),)),
    ("LinearFunction", LinearFunction.apply, (lin_x.clone().requires_grad_(), lin_w, lin_b)),
    ("MaxWithIndex", lambda x: MaxWithIndex.apply(x)[0], (torch.randn(4, 5, dtype=torch.float64, requires_grad=True),)),
]:
    checks[f"gradcheck {name}"] = torch.autograd.gradcheck(fn, inputs)
checks["gradgradcheck Softplus"] = torch.autograd.gradgradcheck(Softplus.apply, (torch.randn(6, dtype=torch.float64, requires_grad=True),))
checks["gradgradcheck LinearFunction"] = torch.autograd.gradgradcheck(
    LinearFunction.apply, (lin_x.clone().requires_grad_(), lin_w, lin_b)
)
for name, passed in checks.items():
    print(f"{name:30s} {passed}")
_ = report.record("gradcheck/gradgradcheck runs passed (float64)", sum(checks.values()))

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        torch.autograd.gradcheck(Softplus.apply, (torch.randn(6, requires_grad=True),))
    except GradcheckError as err:
        print(f"\nin float32, even the correct Softplus fails: {type(err).__name__}: {str(err).splitlines()[0]}")
for w in caught:
    print(f"and gradcheck warned: {w.category.__name__}: {str(w.message).strip()}")

# %%
assert all(checks.values()), f"every check should pass in float64: {checks}"

# %% [markdown]
# Now a backward with a plausible mistake: σ(−x) instead of σ(x), a sign
# error. (Both are between 0 and 1 and equal at x = 0, so spot checks at zero
# would not notice.) `gradcheck` raises a `GradcheckError` that shows the
# numerical and the analytical Jacobian side by side; the first lines:


# %%
class SoftplusSignError(Softplus):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.sigmoid(-x)  # wrong: sigma(-x) = 1 - sigma(x)


try:
    torch.autograd.gradcheck(SoftplusSignError.apply, (torch.linspace(-2, 2, 3, dtype=torch.float64, requires_grad=True),))
    sign_error_caught = False
except GradcheckError as err:
    sign_error_caught = True
    lines = str(err).splitlines()
    print(f"{type(err).__name__}: " + "\n".join(lines[:7]))
assert sign_error_caught, "gradcheck should reject the sign error"

# %% [markdown]
# The numerical Jacobian has σ(x) = 0.12, 0.5, 0.88 on its diagonal, the
# analytical one σ(−x) = 0.88, 0.5, 0.12: the middle entry agrees, the
# others betray the sign.
#
# ### 6b. Double backward
#
# Our `Softplus.backward` computes `grad_output * torch.sigmoid(x)` with
# ordinary differentiable operations. When you ask for a gradient with
# `create_graph=True`, autograd records those operations too, so the
# gradient can be differentiated again: softplus'' = σ(x)(1 − σ(x)). This is
# what Hessian-vector products, gradient penalties and meta-learning need.

# %%
x2 = torch.tensor([-3.0, 0.0, 2.0], dtype=torch.float64, requires_grad=True)
(first,) = torch.autograd.grad(Softplus.apply(x2).sum(), x2, create_graph=True)
(second,) = torch.autograd.grad(first.sum(), x2)
analytic = torch.sigmoid(x2) * (1 - torch.sigmoid(x2))
print("second derivative:", [round(v, 6) for v in second.tolist()])
print("σ(x)(1 - σ(x)):   ", [round(v, 6) for v in analytic.tolist()])
assert torch.allclose(second, analytic, atol=1e-12), "the second derivative should be sigma(x)(1 - sigma(x))"

# %% [markdown]
# A backward cannot always be differentiated: it may call NumPy or a
# compiled kernel, or update buffers in place. Then decorate it with
# `@once_differentiable`. It runs backward with gradient recording off and
# makes any attempt to differentiate through it fail with a clear error,
# rather than silently return a wrong second derivative. The error appears
# when the second backward reaches the node:


# %%
class SoftplusOnce(Softplus):
    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.sigmoid(x)


x2b = torch.tensor([-3.0, 0.0, 2.0], dtype=torch.float64, requires_grad=True)
(first_once,) = torch.autograd.grad(SoftplusOnce.apply(x2b).pow(2).sum(), x2b, create_graph=True)
try:
    first_once.sum().backward()
    once_error = None
except RuntimeError as err:
    once_error = err
    print(f"{type(err).__name__}: {err}")
assert once_error is not None and "once_differentiable" in str(once_error)

# %% [markdown]
# (We squared the output first: the incoming gradient 2·softplus(x) then
# depends on x, so the second backward has to pass through the Function's
# backward. With a plain `.sum()` the first gradient's graph would not
# involve it, and autograd would complain instead that the gradient does
# not require grad.)
#
# ## 7. `vmap` and `torch.func` through a Function
#
# `torch.func.vmap(fn)` runs `fn` over a batch dimension as if in a loop,
# but in one call; `torch.func.grad(fn)` returns a function that computes the
# gradient (chapter 21). Both *transform* the code they run, so they must
# know what a custom Function does with a batch. Two ways to tell them:
#
# - `generate_vmap_rule = True` (as in our `Softplus`): `vmap` then runs
#   forward, `setup_context` and backward themselves on batched tensors.
#   That works when they are written with PyTorch operations only (no
#   NumPy, no `.item()`, no data-dependent Python control flow) and do
#   nothing batch-unaware, such as reading `x.shape[0]` as the batch size.
# - a hand-written `vmap(info, in_dims, *args)` staticmethod, for a forward
#   that `vmap` cannot see into. It receives the inputs with their batch
#   dimension (`in_dims` says where it is, `None` for unbatched inputs) and
#   returns the batched output and where its batch dimension is.
#
# Either way the Function must use the split `setup_context` style. First,
# the two errors you get otherwise:


# %%
class DoubleOldStyle(Function):  # the old combined style: forward(ctx, x)
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * 2


class DoubleNoVmapRule(Function):  # the current style, but no vmap support declared
    @staticmethod
    def forward(x):
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * 2


vmap_errors = {}
for cls in (DoubleOldStyle, DoubleNoVmapRule):
    try:
        torch.func.vmap(cls.apply)(torch.randn(3, 2))
    except RuntimeError as err:
        vmap_errors[cls.__name__] = err
        print(f"{cls.__name__}: {type(err).__name__}: {err}\n")
assert len(vmap_errors) == 2

# %% [markdown]
# `Softplus` declares `generate_vmap_rule = True`, so `vmap` and `grad` work.
# Next, a Function whose forward calls NumPy (opaque to `vmap`), with a
# hand-written rule: softplus is elementwise, so the batched result is just
# the function applied to the whole batched tensor, with the batch
# dimension where it was.


# %%
class NumpySoftplus(Function):
    """Softplus computed in NumPy (np.logaddexp(0, x)); vmap support by a hand-written rule."""

    @staticmethod
    def forward(x):
        return torch.from_numpy(np.logaddexp(0.0, x.numpy(force=True))).to(x.device)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.sigmoid(x)

    @staticmethod
    def vmap(info, in_dims, x):
        # elementwise: run on the whole batched tensor; the output's batch dimension is where x's was
        return NumpySoftplus.apply(x), in_dims[0]


batch = torch.randn(5, 7, dtype=torch.float64) * 30
loop = torch.stack([Softplus.apply(row) for row in batch])
vmap_results = {
    "Softplus (generated rule)": torch.func.vmap(Softplus.apply)(batch),
    "NumpySoftplus (hand-written rule)": torch.func.vmap(NumpySoftplus.apply)(batch),
    "NumpySoftplus, batch dim 1": torch.func.vmap(NumpySoftplus.apply, in_dims=1, out_dims=1)(batch.T.contiguous()).T,
}
for name, got in vmap_results.items():
    print(f"vmap {name:35s} equals the loop: {torch.allclose(got, loop, atol=1e-12)}")

per_row_grad = torch.func.vmap(torch.func.grad(lambda row: Softplus.apply(row).sum()))(batch)
print("vmap(grad(sum of softplus)) equals sigmoid:", torch.allclose(per_row_grad, torch.sigmoid(batch), atol=1e-12))

# %%
assert all(torch.allclose(got, loop, atol=1e-12) for got in vmap_results.values()), "vmap should equal the loop"
assert torch.allclose(per_row_grad, torch.sigmoid(batch), atol=1e-12), "torch.func.grad through Softplus should give sigmoid"

# %% [markdown]
# ## 8. `torch.library.custom_op`: an operator that `torch.compile` understands
#
# An `autograd.Function` is enough for eager PyTorch. `torch.compile`,
# `torch.export` and the other tracing tools need more: while tracing they
# run your code on **fake tensors**, tensors with a shape, dtype and device
# but no data, to learn the output's metadata. Code they cannot read, such as
# a C++ or CUDA kernel (chapter 20 builds some), a third-party library, or
# NumPy, cannot run on fake tensors. Here is such a kernel: a stable
# softplus in NumPy that raises on any floating-point overflow instead of
# returning a silent `inf`:


# %%
def numpy_softplus_kernel(x: torch.Tensor) -> torch.Tensor:
    """softplus(x) = log(1 + e^x) computed by NumPy on a copy of x (opaque to autograd and to Dynamo)."""
    a = x.numpy(force=True)  # force=True: detach (and copy to the CPU) first
    with np.errstate(over="raise"):
        out = np.logaddexp(0.0, a)
    return torch.from_numpy(out).to(x.device)


# %% [markdown]
# Used as it is, two things go wrong. Autograd cannot see through NumPy, so
# the gradient is silently lost: the output does not require grad, and a
# `backward` fails far from the cause. And `torch.compile(fullgraph=True)`
# refuses it. (Dynamo can translate many NumPy functions into PyTorch
# operations, but not `np.errstate`, and never a C++ kernel; without
# `fullgraph=True` it would fall back to eager Python at that point, a graph
# break.)

# %%
pitfall_x = torch.randn(4, 3, requires_grad=True)
out = numpy_softplus_kernel(pitfall_x)
print(f"eager: output.requires_grad = {out.requires_grad}")
try:
    out.sum().backward()
except RuntimeError as err:
    print(f"  backward: {type(err).__name__}: {err}")
torch._dynamo.reset()
try:
    torch.compile(numpy_softplus_kernel, fullgraph=True, backend="eager")(pitfall_x)
    compile_error = None
except torch._dynamo.exc.Unsupported as err:
    compile_error = err
    print(f"compiled: {type(err).__name__}: " + "\n".join(str(err).splitlines()[:2]))
assert not out.requires_grad and compile_error is not None

# %% [markdown]
# `torch.library.custom_op("namespace::name", mutates_args=())` turns the
# function into a real operator, `torch.ops.course19.softplus`. The type
# annotations define its schema (`Tensor x -> Tensor`); `mutates_args=()`
# promises that it changes none of its inputs. Then we register two more
# things:
#
# - a **fake kernel** (`@op.register_fake`): given fake inputs, return an
#   empty tensor with the output's shape, dtype and device. This is what
#   tracing runs instead of the NumPy code.
# - an **autograd formula** (`op.register_autograd(backward,
#   setup_context=...)`), with the same `setup_context` and `backward` as a
#   Function. The backward must be written in PyTorch operations (or other
#   custom ops), so that it can be traced as well.
#
# Re-running this cell is safe: defining a custom op with a name that
# already exists replaces the earlier definition (the lower-level
# `torch.library.Library(..., "DEF").define(...)` raises instead). We reset
# Dynamo's cache too, so no compiled code keeps using a replaced op. All ops
# of this chapter live in the `course19` namespace, so they cannot collide
# with another chapter's.

# %%
torch._dynamo.reset()


@torch.library.custom_op("course19::softplus", mutates_args=())
def softplus_op(x: torch.Tensor) -> torch.Tensor:
    """Stable softplus, computed by the NumPy kernel."""
    return numpy_softplus_kernel(x)


@softplus_op.register_fake
def _(x):
    return torch.empty_like(x)  # same shape, dtype, device; no data, no NumPy


def _softplus_setup_context(ctx, inputs, output):
    (x,) = inputs
    ctx.save_for_backward(x)


def _softplus_backward(ctx, grad_output):
    (x,) = ctx.saved_tensors
    return grad_output * torch.sigmoid(x)


softplus_op.register_autograd(_softplus_backward, setup_context=_softplus_setup_context)
print(softplus_op, "is", torch.ops.course19.softplus.default, "with schema", torch.ops.course19.softplus.default._schema)

# %% [markdown]
# `torch.library.opcheck(op, args)` tests the registrations against each
# other on real inputs, and returns a dict of results (it raises on the
# first failure):
#
# - `test_schema`: the op really does not mutate its inputs or return an
#   alias of them, as the schema claims;
# - `test_autograd_registration`: autograd is registered properly for inputs
#   that require grad;
# - `test_faketensor`: the fake kernel's output metadata (shape, dtype,
#   strides, device) equals the real kernel's;
# - `test_aot_dispatch_dynamic`: the op traces through AOTAutograd (what
#   `torch.compile` uses), with dynamic shapes, and gives the eager results
#   and gradients.

# %%
opcheck_results = {}
for label, args in [
    ("float32 [8, 5], requires grad", (torch.randn(8, 5, requires_grad=True),)),
    ("float64 [3], large values", (torch.tensor([-500.0, 0.0, 500.0], dtype=torch.float64, requires_grad=True),)),
]:
    results = torch.library.opcheck(softplus_op, args)
    opcheck_results[label] = results
    print(f"{label}: {results}")
n_opcheck_passed = sum(status == "SUCCESS" for results in opcheck_results.values() for status in results.values())
_ = report.record("opcheck tests passed", n_opcheck_passed)

# %%
assert all(status == "SUCCESS" for results in opcheck_results.values() for status in results.values())

# %% [markdown]
# A fake kernel that gets the metadata wrong is caught by `test_faketensor`.
# Here one that forgets the second dimension, registered on a scratch op:


# %%
@torch.library.custom_op("course19::softplus_bad_fake", mutates_args=())
def softplus_bad_fake(x: torch.Tensor) -> torch.Tensor:
    return numpy_softplus_kernel(x)


@softplus_bad_fake.register_fake
def _(x):
    return x.new_empty(x.shape[0])  # wrong: drops the other dimensions


try:
    torch.library.opcheck(softplus_bad_fake, (torch.randn(8, 5),))
    bad_fake_error = None
except Exception as err:
    bad_fake_error = err
    print(f"{type(err).__name__}: {err}")
assert bad_fake_error is not None and "test_faketensor" in str(bad_fake_error)

# %% [markdown]
# Now the op inside a compiled function with `fullgraph=True` (any graph
# break would be an error), forward and backward. The default backend,
# Inductor, generates C++ code on the CPU, so the first call takes seconds
# (chapter 16); the `COMPILE_BACKEND` parameter can select `"aot_eager"`,
# which traces the same graphs but skips code generation.


# %%
def loss_with_op(x, weight):
    hidden = softplus_op(x @ weight)  # our op between ordinary PyTorch operations
    return hidden.pow(2).mean()


torch._dynamo.reset()
compiled_loss = torch.compile(loss_with_op, fullgraph=True, backend=COMPILE_BACKEND)
op_x = torch.randn(64, 32)
op_w = (torch.randn(32, 16) / 32**0.5).requires_grad_()
start = time.perf_counter()
compiled_value = compiled_loss(op_x, op_w)
(compiled_grad,) = torch.autograd.grad(compiled_value, op_w)
compile_seconds = time.perf_counter() - start
eager_value = loss_with_op(op_x, op_w)
(eager_grad,) = torch.autograd.grad(eager_value, op_w)
value_diff = (compiled_value - eager_value).abs().item()
grad_diff = ((compiled_grad - eager_grad).abs().max() / eager_grad.abs().max()).item()
print(f"backend {COMPILE_BACKEND!r}: first call with backward {compile_seconds:.1f} s (one wall-clock run, not a benchmark)")
print(f"loss eager {eager_value.item():.4f}, compiled {compiled_value.item():.4f}; "
      f"largest gradient difference {grad_diff:.1e} (relative to the largest gradient)")
_ = report.record(f"custom op under torch.compile ({COMPILE_BACKEND}): max relative gradient difference", grad_diff, digits=8)

# %%
assert torch.isfinite(compiled_value) and torch.isfinite(compiled_grad).all()
assert value_diff <= 1e-4 * abs(eager_value.item()) and grad_diff < 1e-4, (
    f"compiled and eager should agree (loss difference {value_diff:.1e}, gradient difference {grad_diff:.1e})"
)

# %% [markdown]
# What did the compiler see? A backend built with `aot_autograd` hands its
# `fw_compiler` and `bw_compiler` the forward and backward graphs that
# AOTAutograd traced (as `torch.fx.GraphModule`s, in ATen operators). Ours
# record them and run them as they are (`make_boxed_func` adapts a plain
# function to the calling convention AOTAutograd expects):

# %%
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

captured_graphs = {}


def recording_compiler(kind):
    def compiler(graph_module, example_inputs):
        captured_graphs[kind] = graph_module
        return make_boxed_func(graph_module.forward)

    return compiler


torch._dynamo.reset()
recording_backend = aot_autograd(fw_compiler=recording_compiler("forward"), bw_compiler=recording_compiler("backward"))
recorded_value = torch.compile(loss_with_op, fullgraph=True, backend=recording_backend)(op_x, op_w)
torch.autograd.grad(recorded_value, op_w)
graph_ops = {kind: [str(node.target) for node in gm.graph.nodes if node.op == "call_function"]
             for kind, gm in captured_graphs.items()}
for kind, ops in graph_ops.items():
    print(f"{kind:8s} graph: {', '.join(ops)}")

# %%
forward_targets = [node.target for node in captured_graphs["forward"].graph.nodes]
backward_targets = [node.target for node in captured_graphs["backward"].graph.nodes]
assert torch.ops.course19.softplus.default in forward_targets, f"the forward graph should call our op: {graph_ops['forward']}"
assert torch.ops.aten.sigmoid.default in backward_targets and torch.ops.course19.softplus.default not in backward_targets, (
    f"the backward graph should use our formula (sigmoid), not the op: {graph_ops['backward']}"
)

# %% [markdown]
# The forward graph calls `course19.softplus` as one opaque node between
# the matrix multiplication and the square: Dynamo did not read the NumPy
# code. The backward graph has no softplus at all, but `sigmoid` and the
# multiplications of our registered formula: AOTAutograd took the backward
# from `register_autograd`. With Inductor, these are the graphs it generates
# code for. That is the general recipe for any kernel that PyTorch cannot
# see into: wrap it in a `custom_op`, give it a fake kernel and (if it needs
# gradients) an autograd formula, and check all three with `opcheck`.
# Chapter 20 registers its C++ and CUDA kernels the same way, with the
# schema declared in C++ (`TORCH_LIBRARY`) in place of `custom_op`.
#
# `custom_op` or `autograd.Function`? A Function is quicker to write and
# enough for eager code. Under `torch.compile`, Dynamo traces *into* its
# forward and backward. That works for ordinary PyTorch code (`Softplus`),
# and even for `NumpySoftplus`: Dynamo translates common NumPy calls such as
# `np.logaddexp` into PyTorch operations (its `torch._numpy` layer), so both
# compile with `fullgraph=True`:

# %%
function_x = torch.randn(6, dtype=torch.float64)
compiled_functions = {}
for cls in (Softplus, NumpySoftplus):
    torch._dynamo.reset()
    compiled = torch.compile(lambda t, cls=cls: cls.apply(t), fullgraph=True, backend="eager")
    compiled_functions[cls.__name__] = torch.allclose(compiled(function_x), cls.apply(function_x))
    print(f"torch.compile(fullgraph=True) of {cls.__name__}.apply: compiled, equals eager: {compiled_functions[cls.__name__]}")
assert compiled_functions == {"Softplus": True, "NumpySoftplus": True}, compiled_functions

# %% [markdown]
# What Dynamo cannot trace is code it cannot read or translate: the
# `np.errstate` block of `numpy_softplus_kernel` above (the `Unsupported`
# error), a C++ or CUDA kernel, another library's compiled code. Inside a
# Function that is a graph break (an error with `fullgraph=True`); as a
# custom op it is a first-class operator, one node in the graph.
#
# ## 9. Custom Functions in a real training step: MNIST
#
# Finally, both Functions of this chapter inside a small MLP trained on real
# MNIST images: `LinearFunction` for the two layers and `Softplus` as the
# activation. First we check, at the first batch, that it computes the same
# loss and gradients as the same network built from `nn.Linear` and
# `F.softplus`; then we train it and count the backward matrix
# multiplications that `needs_input_grad` skipped.

# %%
train_raw, test_raw = mnist(train=True), mnist(train=False)


def mnist_tensors(raw, limit):
    """The first `limit` images as float [N, 784] normalised with MNIST's mean and std, and int64 labels [N]."""
    images = raw.data[:limit].float().div(255).sub(0.1307).div(0.3081).flatten(1)
    return images, raw.targets[:limit]


train_x, train_y = mnist_tensors(train_raw, TRAIN_IMAGES)
test_x, test_y = mnist_tensors(test_raw, TEST_IMAGES)
print(f"MNIST: {len(train_y):,} training and {len(test_y):,} test images, as {tuple(train_x.shape[1:])} vectors")


class CustomLinear(nn.Module):
    """nn.Linear's parameters and initialisation, computed by LinearFunction."""

    def __init__(self, in_features, out_features):
        super().__init__()
        reference = nn.Linear(in_features, out_features)
        self.weight = nn.Parameter(reference.weight.detach().clone())
        self.bias = nn.Parameter(reference.bias.detach().clone())

    def forward(self, x):
        return LinearFunction.apply(x, self.weight, self.bias)


class CustomMLP(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc1, self.fc2 = CustomLinear(784, hidden), CustomLinear(hidden, 10)

    def forward(self, x):
        return self.fc2(Softplus.apply(self.fc1(x)))


torch.manual_seed(SEED)
model = CustomMLP(HIDDEN).to(device)
reference_model = nn.Sequential(nn.Linear(784, HIDDEN), nn.Softplus(), nn.Linear(HIDDEN, 10)).to(device)
with torch.no_grad():
    for ref_layer, layer in zip([reference_model[0], reference_model[2]], [model.fc1, model.fc2]):
        ref_layer.weight.copy_(layer.weight)
        ref_layer.bias.copy_(layer.bias)

first_x, first_y = train_x[:BATCH_SIZE].to(device), train_y[:BATCH_SIZE].to(device)
loss_custom = F.cross_entropy(model(first_x), first_y)
loss_reference = F.cross_entropy(reference_model(first_x), first_y)
grads_custom = torch.autograd.grad(loss_custom, list(model.parameters()))
grads_reference = torch.autograd.grad(loss_reference, list(reference_model.parameters()))
mnist_grad_diff = max((a - b).abs().max().item() for a, b in zip(grads_custom, grads_reference))
print(f"first batch: loss {loss_custom.item():.4f} (custom) vs {loss_reference.item():.4f} (nn modules); "
      f"largest gradient difference {mnist_grad_diff:.1e}")
assert abs(loss_custom.item() - loss_reference.item()) < 1e-5 and mnist_grad_diff < 1e-5, (
    "the custom MLP should compute the same loss and gradients as the nn.Linear/nn.Softplus one"
)

# %%
optimizer = torch.optim.Adam(model.parameters(), lr=LR)
batch_generator = torch.Generator().manual_seed(SEED)
backward_matmuls.update(done=0, skipped=0)
losses = []
start = time.perf_counter()
model.train()
for _step in range(MNIST_STEPS):
    index = torch.randint(len(train_y), (BATCH_SIZE,), generator=batch_generator)
    loss = F.cross_entropy(model(train_x[index].to(device)), train_y[index].to(device))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
train_seconds = time.perf_counter() - start
model.eval()
with torch.no_grad():
    test_accuracy = (model(test_x.to(device)).argmax(dim=1).cpu() == test_y).float().mean().item()
print(f"{MNIST_STEPS} steps in {train_seconds:.1f} s (one wall-clock run, not a benchmark); test accuracy {test_accuracy:.1%}")
print(f"backward matmuls done: {backward_matmuls['done']}, skipped thanks to needs_input_grad: {backward_matmuls['skipped']} "
      f"(one per step: the gradient w.r.t. the input images)")
_ = report.record("MNIST MLP with custom Functions: test accuracy", 100 * test_accuracy, "%", digits=1)
_ = report.record("backward matmuls skipped by needs_input_grad", backward_matmuls["skipped"])

# %%
assert test_accuracy >= MIN_MNIST_ACCURACY, f"test accuracy {test_accuracy:.1%} is below {MIN_MNIST_ACCURACY:.0%}"
assert backward_matmuls["skipped"] == MNIST_STEPS, "each step should skip exactly the input-gradient matmul of fc1"
assert backward_matmuls["done"] == 3 * MNIST_STEPS, "each step should do 3 matmuls: fc1's weight, fc2's input and weight"

# %%
fig, ax = plt.subplots(figsize=(9, 3))
ax.plot(losses, alpha=0.4, label="per step")
window = max(1, len(losses) // 20)
smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
ax.plot(np.arange(window - 1, len(losses)), smooth, label=f"mean of {window} steps")
ax.set(title="MNIST MLP built from LinearFunction and Softplus", xlabel="step", ylabel="training loss")
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Pitfalls
#
# ### 1. Changing a saved tensor in place
#
# Backward needs the saved values as they were in forward. Change one in
# place after forward (here the weight, as a careless manual update would)
# and `save_for_backward`'s version check stops the backward:

# %%
# NBVAL_CHECK_OUTPUT
w_pitfall = torch.randn(3, 5, requires_grad=True)
out = LinearFunction.apply(torch.randn(4, 5), w_pitfall, torch.zeros(3))
with torch.no_grad():
    w_pitfall.mul_(2)  # in place, after forward saved w_pitfall
try:
    out.sum().backward()
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")


# %% [markdown]
# With `ctx.x = x` instead of `save_for_backward`, there is no check: the
# backward quietly uses the changed values, and the gradient is wrong:


# %%
class LinearOnCtx(LinearFunction):
    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.x, ctx.weight, _ = inputs  # the mistake: no version check

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output @ ctx.weight, grad_output.T @ ctx.x, grad_output.sum(dim=0)


x_pitfall = torch.randn(4, 5)
w_pitfall = torch.randn(3, 5, requires_grad=True)
correct_grad = torch.ones(4, 3).T @ x_pitfall  # d(sum of outputs)/dW with the x used in forward
out = LinearOnCtx.apply(x_pitfall, w_pitfall, torch.zeros(3))
x_pitfall.mul_(2)  # changed after forward
out.sum().backward()
print(f"no error, but the gradient is off by up to {(w_pitfall.grad - correct_grad).abs().max().item():.2f}")
assert not torch.allclose(w_pitfall.grad, correct_grad)

# %% [markdown]
# **Fix:** save tensors with `ctx.save_for_backward`; when you really must
# change a tensor after forward, clone it first (`w = w * 2`, not `w.mul_(2)`)
# or finish the backward first.
#
# ### 2. A gradient of the wrong shape
#
# Each gradient must have the shape of its input. Writing the matrix product
# for the weight's gradient the other way round gives `[in, out]` instead of
# `[out, in]`:


# %%
class LinearTransposedGrad(LinearFunction):
    @staticmethod
    def backward(ctx, grad_output):
        x, weight = ctx.saved_tensors
        return grad_output @ weight, x.T @ grad_output, grad_output.sum(dim=0)  # wrong: x.T @ g is [in, out]


# %%
# NBVAL_CHECK_OUTPUT
try:
    LinearTransposedGrad.apply(torch.randn(4, 5), torch.randn(3, 5, requires_grad=True), torch.zeros(3)).sum().backward()
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# **Fix:** write the shapes next to each gradient, as in `LinearFunction`.
# Beware that autograd *accepts* a gradient that it can sum down to the
# input's shape by broadcasting rules: returning `grad_output` ([B, out])
# for the bias ([out]) is summed over the batch silently, which is right for
# a bias but hides other mistakes; `gradcheck` finds those.
#
# ### 3. Forgetting `None` for non-tensor inputs
#
# `backward` returns one value per argument of `forward`, tensors *and*
# others (numbers, flags, shapes): `None` for each that has no gradient.

# %%
# NBVAL_CHECK_OUTPUT
class Scale(Function):
    @staticmethod
    def forward(x, factor):
        return x * factor

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.factor = inputs[1]  # a Python float: a plain attribute

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.factor  # wrong: one value for two inputs


try:
    Scale.apply(torch.randn(3, requires_grad=True), 2.0).sum().backward()
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# **Fix:** `return grad_output * ctx.factor, None`.
#
# ### 4. Calling `forward` instead of `apply`
#
# `Softplus.forward(x)` is just a static method: it computes the value, but
# no custom node enters the graph. If forward is made of PyTorch operations,
# autograd records *those* and differentiates them its own way, so your
# backward (and its stability) is silently skipped; if forward is opaque,
# the gradient is lost. The `grad_fn` shows which one you got:

# %%
# NBVAL_CHECK_OUTPUT
x_apply = torch.tensor([100.0], requires_grad=True)
backward_matmuls.update(done=0, skipped=0)
via_forward = LinearFunction.forward(torch.randn(2, 5), w_pitfall, torch.zeros(3))
via_apply = LinearFunction.apply(torch.randn(2, 5), w_pitfall, torch.zeros(3))
print("LinearFunction.forward(...).grad_fn:", type(via_forward.grad_fn).__name__)
print("LinearFunction.apply(...).grad_fn:  ", type(via_apply.grad_fn).__name__)
via_forward.sum().backward()
print("backward calls of LinearFunction after backward through .forward:", backward_matmuls["done"] + backward_matmuls["skipped"])
print("NumpySoftplus.forward(x).requires_grad:", NumpySoftplus.forward(x_apply).requires_grad)

# %% [markdown]
# **Fix:** always `YourFunction.apply(...)`; in a module, wrap it in
# `forward` as `CustomLinear` does. Treating the Function as an object is no
# better: instantiating one gives a `DeprecationWarning`, and calling the
# instance raises a `RuntimeError` (that call style belonged to the legacy,
# non-static Functions):

# %%
# NBVAL_CHECK_OUTPUT
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    softplus_instance = Softplus()
for warning in caught:
    print(f"Softplus(): {warning.category.__name__}: {warning.message}")
try:
    softplus_instance(x_apply)
    instance_call_error = None
except RuntimeError as err:
    instance_call_error = err
    print(f"Softplus()(x): {type(err).__name__}: {err}")
assert any(issubclass(w.category, DeprecationWarning) for w in caught), "instantiating a Function should warn"
assert instance_call_error is not None and "Legacy autograd function" in str(instance_call_error)


# %% [markdown]
# ## Exercises
#
# Each exercise has a stub for you to fill in, then a checker cell that
# prints **PASSED**, **NOT YET** with a hint, or **TODO** while the stub
# still raises `NotImplementedError`. If you are stuck,
# `solution("19.logsumexp")` returns the reference solution.
#
# ### Exercise 1: a stable log-sum-exp
#
# Write `LogSumExp`, an `autograd.Function` in the current style, computing
# lse(x) = log Σᵢ exp(xᵢ) over the **last** dimension (x [..., n] →
# [...]), without calling `torch.logsumexp`, `log_softmax` or `softmax` in
# the forward (the checker refuses them). It must be stable: rows like
# [1000, 1000, −1000] give 1000.69, not `inf`. Write the backward by hand:
# work out ∂lse/∂xᵢ, and multiply by the incoming gradient (no
# `torch.autograd.grad`, `.backward()` or `enable_grad` inside it). Keep the
# tensors backward needs as section 3 does, not as `ctx` attributes. A fully
# masked row, all −∞ (as in attention with every key
# masked), must give −∞, as `torch.logsumexp` does, and a gradient of 0
# for that row (`torch.logsumexp`'s own backward gives NaN there, which
# would spread to every parameter). The checker runs `gradcheck` in float64
# and tries large float32 inputs and masked rows; `hint("19.logsumexp")`
# gives a fuller hint.


# %%
class LogSumExp(Function):
    @staticmethod
    def forward(x):
        raise NotImplementedError

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError

    @staticmethod
    def backward(ctx, grad_output):
        raise NotImplementedError


# %%
result = check("19.logsumexp", LogSumExp)
if result.passed:
    print("LogSumExp of [1000, 1000, -1000]:", LogSumExp.apply(torch.tensor([1000.0, 1000.0, -1000.0])).item())

# %% [markdown]
# ### Exercise 2: a fake kernel
#
# The checker defines a custom op `course19::exercise_pairwise_sqdist(x, y)`
# whose kernel computes in NumPy the squared distance between every row of
# x [N, D] and every row of y [M, D]: an [N, M] tensor with the inputs'
# dtype. Write its fake kernel `pairwise_sqdist_fake(x, y)`: it receives
# fake tensors (no data, so no NumPy and no `.item()`) and returns an empty
# tensor with the right shape, dtype and device. The checker registers it
# with `register_fake` and runs `torch.library.opcheck`, and also calls it on
# tensors on the `meta` device (metadata only), where the output must be on
# `meta` too.


# %%
def pairwise_sqdist_fake(x, y):
    """The metadata of the [N, M] output, for x [N, D] and y [M, D]."""
    raise NotImplementedError


# %%
result = check("19.fake_kernel", pairwise_sqdist_fake)

# %% [markdown]
# ## Summary
#
# - Naive formulas can overflow in float32 in the forward, or only in the
#   gradient: the `torch.where` patch fixes softplus's value but its
#   gradient is still NaN, because 0 · ∞ = NaN in the unused branch. A
#   custom `autograd.Function` with a stable forward and a hand-written
#   backward (σ(x)) matched float64 over [−100, 100]; autograd of the same
#   stable formula was off by 0.5 at x = 0 and saved more tensors.
# - Current style: `forward(*args)` without ctx, `setup_context(ctx, inputs,
#   output)`, `backward(ctx, *grads)` returning one value per input (`None`
#   for non-tensors), called with `.apply`.
# - `ctx.save_for_backward` checks versions and avoids reference cycles;
#   `ctx.needs_input_grad` skips unneeded gradients (one of fc1's two
#   equal-size backward matmuls per MNIST step here); `mark_non_differentiable` for indices;
#   `set_materialize_grads(False)` passes `None` instead of zeros.
# - Check every backward with `gradcheck` and `gradgradcheck` in float64. A
#   backward made of differentiable operations supports double backward;
#   mark one that is not with `@once_differentiable`.
# - `vmap` and `grad` need the split style plus `generate_vmap_rule = True`
#   (PyTorch-only code) or a hand-written `vmap` rule.
# - `torch.library.custom_op` + `register_fake` + `register_autograd`,
#   verified by `opcheck`, makes opaque code an operator that
#   `torch.compile(fullgraph=True)` keeps as one node, with the registered
#   backward in the backward graph (we captured both graphs).
#
# **Next:** chapter 20 moves the same ideas into compiled kernels: C++ and
# CUDA code loaded with `load_inline`, with its own input checks, registered
# as operators and benchmarked against PyTorch's.

# %%
print(f"notebook ran in {time.perf_counter() - notebook_start:.0f} s")
report.finish()
