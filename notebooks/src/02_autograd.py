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
# # Chapter 02: Autograd
#
# Training a network means nudging every weight in the direction that lowers
# the loss, and for that you need the derivative of the loss with respect to
# each weight. PyTorch's **autograd** computes those derivatives for you: as
# your code runs, it records what it did, and `backward()` walks that record in
# reverse applying the chain rule. This chapter opens the box so that the
# behaviour you will meet later (gradients that pile up, errors about in-place
# operations, `no_grad` blocks in every evaluation loop) makes sense.
#
# **What you will learn**
#
# - how autograd records a computational graph: `requires_grad`, leaf tensors,
#   `grad_fn` and `next_functions`;
# - what `backward()` computes and where it stores the result (`.grad`), and
#   why a second `backward()` needs `retain_graph=True`;
# - why gradients accumulate across `backward()` calls, and the two ways to
#   reset them (`.grad = None` and `.grad.zero_()`);
# - how to switch recording off: `torch.no_grad()` versus `torch.inference_mode()`,
#   and `detach()`;
# - the older spellings you will still read, `.data` and `Variable`, and why
#   an update through `.data` can give silently wrong gradients;
# - how to write a gradient-descent step by hand under `no_grad` (exercise 4);
# - `backward(gradient=...)` for non-scalar outputs, i.e. the vector-Jacobian
#   product, and where `torch.func` fits;
# - higher-order derivatives with `create_graph=True` and `torch.autograd.grad`;
# - how exact autograd is, measured against hand-derived derivatives and
#   finite differences, and how `torch.autograd.gradcheck` uses finite
#   differences to test a gradient;
# - the errors learners really hit, with their real messages and their fixes,
#   and anomaly detection (`torch.autograd.detect_anomaly()`), which points at
#   the forward operation behind one.
#
# **Prerequisites**: chapter 00 (environment) and chapter 01 (tensors).
#
# **Estimated time**: about 90 minutes (four exercises included). The part
# of section 6 marked "Going further (optional)" can be skipped on a first
# reading.

# %% tags=["parameters"]
SEED = 0  # for seed_everything, as in every chapter (only one pitfall draws random numbers)
GRID_POINTS = 201  # points on the x grid of the derivative plots

# %% [markdown]
# ## Setup
#
# `helpers.plotting` sets small figure defaults; the chapter's headline
# numbers go into a `ChapterReport`. Autograd works the same on every device,
# so the tiny scalar examples stay on the CPU; the plotting grid uses the
# device that `pick_device` chose.
#
# This chapter reproduces many errors on purpose. `expect_error` runs a block
# that must fail: it prints the error as `Type: message`, and asserts that it
# is the error the text promises (its type and a piece of its message), so the
# notebook stops if a PyTorch release changes or removes it.

# %%
import inspect  # noqa: F401  (inspect.getsource(solution(...)) shows a reference solution's code)
import json
import math
import subprocess
import sys
import types
import warnings
from contextlib import contextmanager

import matplotlib.pyplot as plt
import torch

import helpers.plotting  # noqa: F401  (small, 72-dpi figure defaults)
from helpers.device import pick_device, seed_everything
from helpers.exercises import check, hint, solution  # noqa: F401  (hint, solution: for the exercises)
from helpers.report import ChapterReport

seed_everything(SEED)
device = pick_device()
report = ChapterReport("02_autograd")
print(f"torch {torch.__version__}, device for the plotting grid: {device}")


@contextmanager
def expect_error(kind, fragment):
    """Run the block, which must raise `kind` with `fragment` in its message; print the error.

    Yields a namespace whose `.error` is the caught exception, for later checks.
    """
    caught = types.SimpleNamespace(error=None)
    try:
        yield caught
    except kind as err:
        print(f"{type(err).__name__}: {err}")
        assert fragment in str(err), f"expected {fragment!r} in the message, got: {err}"
        caught.error = err
    else:
        raise AssertionError(f"expected {kind.__name__} ({fragment!r}), but the block ran without error")


# %% [markdown]
# ## 1. The computational graph
#
# A tensor created with `requires_grad=True` asks autograd to track it. Every
# operation on such a tensor produces a result that remembers **how it was
# made**: its `grad_fn` attribute is the node of the graph that knows the
# derivative of that operation. Tensors you create yourself are **leaf
# tensors** (`is_leaf` is `True`, `grad_fn` is `None`); they are the inputs
# of the graph, typically the weights of a model.
#
# We start with a small function, $z = (x + y)^2$, at $x = 3$,
# $y = 4$.

# %%
# NBVAL_CHECK_OUTPUT
x = torch.tensor(3.0, requires_grad=True)
y = torch.tensor(4.0, requires_grad=True)
s = x + y
z = s**2

for name, t in [("x", x), ("y", y), ("s", s), ("z", z)]:
    fn = type(t.grad_fn).__name__ if t.grad_fn is not None else None
    print(f"{name}: value={t.item():5.1f}  requires_grad={t.requires_grad}  is_leaf={t.is_leaf}  grad_fn={fn}")

# %% [markdown]
# Each `grad_fn` points to the nodes that produced its inputs through
# `next_functions`, a tuple of `(node, input_index)` pairs. Following those
# links from `z` walks the whole graph backwards. The walk ends at
# `AccumulateGrad` nodes: one per leaf, and their job is to add the incoming
# gradient to the leaf's `.grad`. (Printing a node directly shows a memory
# address, so the helper below records only the class names.)

# %%
# NBVAL_CHECK_OUTPUT
leaf_names = {id(x): "x", id(y): "y"}


def walk_graph(node, depth=0, parent=None, found=None):
    """Every node below `node`, depth first, as (label, depth, index of its parent)."""
    found = [] if found is None else found
    label = type(node).__name__
    if hasattr(node, "variable"):  # an AccumulateGrad node holds its leaf
        label += f"\nwrites {leaf_names.get(id(node.variable), '?')}.grad"
    found.append((label, depth, parent))
    here = len(found) - 1
    for child, _ in node.next_functions:
        if child is not None:
            walk_graph(child, depth + 1, here, found)
    return found


graph = walk_graph(z.grad_fn)
for label, depth, _ in graph:
    print("    " * depth + label.replace("\n", "  -> "))
kinds = [label.split("\n")[0] for label, _, _ in graph]
assert kinds == ["PowBackward0", "AddBackward0", "AccumulateGrad", "AccumulateGrad"], (
    f"the graph of (x + y)**2 should be Pow <- Add <- one AccumulateGrad per leaf, got {kinds}"
)

# %% [markdown]
# The same walk, drawn. The grey box is the tensor `z = (x + y)**2` itself;
# its `grad_fn` is the `PowBackward0` node. The arrows follow `next_functions`,
# which is the direction the gradient travels during `backward()`: from the
# output `z` to the leaves.

# %%
def draw_graph(ax, nodes, root_label):
    """Draw the (label, depth, parent) list of `walk_graph`, depth from left to right."""
    columns: dict[int, list[int]] = {}
    for i, (_, depth, _) in enumerate(nodes):
        columns.setdefault(depth, []).append(i)
    where = {}
    for depth, members in columns.items():
        for k, i in enumerate(members):
            where[i] = (depth + 1, (len(members) - 1) / 2 - k)
    where[-1] = (0, 0.0)  # the output tensor itself
    box = {"boxstyle": "round,pad=0.4", "fc": "white", "ec": "0.3"}
    texts = {-1: ax.text(*where[-1], root_label, ha="center", va="center", bbox={**box, "fc": "0.9"}, fontsize=9)}
    for i, (label, _, _) in enumerate(nodes):
        texts[i] = ax.text(*where[i], label, ha="center", va="center", bbox=box, fontsize=9)
    for i, (_, _, parent) in enumerate(nodes):
        start = -1 if parent is None else parent
        ax.annotate("", where[i], where[start], arrowprops={
            "arrowstyle": "-|>", "color": "0.3", "patchA": texts[start].get_bbox_patch(),
            "patchB": texts[i].get_bbox_patch(), "shrinkA": 2, "shrinkB": 2})
    ax.set(xlim=(-0.6, max(columns) + 1.6), ylim=(-1.0, 1.0))
    ax.axis("off")


fig, ax = plt.subplots(figsize=(9, 2.4))
root_label, *_ = graph[0]
draw_graph(ax, [(f"{root_label}\n= z.grad_fn", *graph[0][1:]), *graph[1:]], "z")
ax.set_title("The backward graph of z, from the walk over z.grad_fn.next_functions")
plt.show()

# %% [markdown]
# A tensor that does not require grad (a constant, or the input data) leaves
# no trace in the graph: its slot in `next_functions` is `None`, because there
# is nothing to send a gradient to.

# %%
# NBVAL_CHECK_OUTPUT
c = torch.tensor(10.0)  # requires_grad=False by default
w = x * c
print("w.grad_fn:", type(w.grad_fn).__name__)
print("inputs of MulBackward0:", [type(n).__name__ if n is not None else None for n, _ in w.grad_fn.next_functions])

# %% [markdown]
# ## 2. `backward()`
#
# `z.backward()` runs the chain rule from `z` down to every leaf and stores
# $\partial z / \partial \text{leaf}$ in the leaf's `.grad`. By hand:
# $\partial z/\partial x = 2(x + y) \cdot 1 = 2 \cdot 7 = 14$, and by symmetry
# $\partial z/\partial y = 14$ as well.

# %%
# NBVAL_CHECK_OUTPUT
z.backward()
print(f"dz/dx = {x.grad.item():g}")
print(f"dz/dy = {y.grad.item():g}")
_ = report.record("d/dx (x+y)^2 at (3, 4)", x.grad.item())

# %% [markdown]
# Only leaves get a `.grad`. The intermediate `s` had a gradient flow through
# it, but autograd does not keep it, to save memory. Reading `s.grad` returns
# `None` and emits a warning (captured and printed here); if you need it, call
# `s.retain_grad()` **before** `backward()`.

# %%
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    print("s.grad:", s.grad)
print("warning:", str(caught[0].message).split(". ")[0] + ".")

x2 = torch.tensor(3.0, requires_grad=True)
s2 = x2 + 4.0
s2.retain_grad()
(s2**2).backward()
print("with retain_grad(): s.grad =", s2.grad.item())
assert s2.grad.item() == 14.0, "dz/ds = 2s = 14 at s = 7"

# %% [markdown]
# After `backward()` the graph is freed: its nodes drop the intermediate
# values they saved, again to save memory. A second `backward()` through the
# same graph therefore fails.

# %%
a = torch.tensor(2.0, requires_grad=True)
out = a.exp() * a
out.backward()
with expect_error(RuntimeError, "Trying to backward through the graph a second time"):
    out.backward()

# %% [markdown]
# The fix the message names: `retain_graph=True` on the first call keeps the
# saved values, so the second call works. It does not reset anything, so the
# second call **adds** the same gradient again (section 3). You rarely need
# this: usually each step runs the forward pass again and builds a fresh graph.
# Here $\frac{d}{da}(a e^a) = e^a(1 + a) = 3e^2$ at $a = 2$.

# %%
# NBVAL_CHECK_OUTPUT
a = torch.tensor(2.0, requires_grad=True)
out = a.exp() * a
out.backward(retain_graph=True)  # keep the saved values for another pass
first = a.grad.item()
out.backward()  # works now
print(f"after the first backward:  a.grad = {first:.3f}  (3e^2 = {3 * math.exp(2):.3f})")
print(f"after the second backward: a.grad = {a.grad.item():.3f}")
assert math.isclose(first, 3 * math.exp(2), rel_tol=1e-6), f"d/da (a e^a) at 2 should be 3e^2, got {first}"
assert math.isclose(a.grad.item(), 2 * first, rel_tol=1e-6), "the second backward should add the same gradient again"

# %% [markdown]
# ## 3. Gradients accumulate
#
# `backward()` **adds** to `.grad`; it never overwrites it. That is deliberate:
# when a tensor is used in several places, or when you split a large batch into
# micro-batches (chapter 15), the total gradient is the sum of the pieces. The
# price is that you must reset `.grad` yourself between training steps. Here
# the loss $w^2$ has gradient $2w = 4$ at $w = 2$, yet `.grad` keeps growing:

# %%
# NBVAL_CHECK_OUTPUT
w = torch.tensor(2.0, requires_grad=True)
for step in range(3):
    loss = w**2
    loss.backward()
    print(f"after backward #{step + 1}: w.grad = {w.grad.item():g}")
assert w.grad.item() == 12.0, "three backward passes of 4 each should add up to 12"

# %% [markdown]
# Adding is what you want whenever one gradient is computed in pieces. The
# gradient is linear in the loss (the gradient of a sum is the sum of the
# gradients), so calling `backward()` on each piece and letting `.grad` add
# them up gives the gradient of the whole. Two common pieces: several losses
# of one model, each backpropagated on its own, and the micro-batches of a
# batch too large to fit in memory at once. Here the mean squared error of a
# line $\hat y = k x$ through four points, as one batch and as two halves of
# two points, each contributing its share of the mean:

# %%
# NBVAL_CHECK_OUTPUT
xb = torch.tensor([1.0, 2.0, 3.0, 4.0])
yb = torch.tensor([2.0, 4.5, 5.5, 8.0])
k = torch.tensor(1.5, requires_grad=True)
((k * xb - yb) ** 2).mean().backward()
whole_batch = k.grad.item()
k.grad = None
for part_x, part_y in zip(xb.split(2), yb.split(2)):
    (((k * part_x - part_y) ** 2).sum() / len(xb)).backward()  # this half's share of the mean
    print(f"after the half {part_x.tolist()}: k.grad = {k.grad.item():g}")
print(f"one backward over the whole batch: k.grad = {whole_batch:g}")
assert math.isclose(k.grad.item(), whole_batch, rel_tol=1e-6), (
    f"the two halves' gradients should add up to the whole batch's, {k.grad.item()} vs {whole_batch}"
)

# %% [markdown]
# There are two ways to reset:
#
# - `w.grad = None` drops the tensor; the next `backward()` allocates a fresh
#   one. This is what `optimizer.zero_grad()` does by default
#   (`set_to_none=True`); its documentation says this "will in general have
#   lower memory footprint, and can modestly improve performance".
# - `w.grad.zero_()` fills the existing tensor with zeros in place. Use it when
#   code relies on `.grad` staying the same tensor object.
#
# Either way the next `backward()` gives the right answer, 4.

# %%
# NBVAL_CHECK_OUTPUT
w.grad = None
print("after w.grad = None:", w.grad)
(w**2).backward()
print("next backward gives:", w.grad.item())

same_object = w.grad
w.grad.zero_()
print("after w.grad.zero_():", w.grad.item(), "| same tensor object:", w.grad is same_object)
(w**2).backward()
print("next backward gives:", w.grad.item())
assert w.grad.item() == 4.0, f"after zero_() the next backward should give 4, got {w.grad.item()}"
assert w.grad is same_object, "zero_() and the next backward should keep the same .grad tensor object"

# %% [markdown]
# The two are not the same for an optimizer. The same documentation warns that
# `torch.optim` optimizers "have a different behavior if the gradient is 0 or
# None": a parameter whose `.grad` is `None` is skipped altogether, while one
# with a zero gradient still takes a step. With weight decay, which pulls
# every weight towards 0 at each step, the difference shows. Two parameters
# of value 1, SGD with `lr=0.1` and `weight_decay=0.5`, one step:

# %%
# NBVAL_CHECK_OUTPUT
p_none = torch.nn.Parameter(torch.tensor(1.0))  # .grad is None: it received no gradient
p_zero = torch.nn.Parameter(torch.tensor(1.0))
p_zero.grad = torch.zeros(())  # a gradient of exactly 0
torch.optim.SGD([p_none, p_zero], lr=0.1, weight_decay=0.5).step()
print(f".grad None: {p_none.item():.3f} (skipped)")
print(f".grad 0:    {p_zero.item():.3f} (decayed: 1 - 0.1 * 0.5 * 1)")
assert p_none.item() == 1.0, "SGD should leave a parameter whose .grad is None untouched"
assert math.isclose(p_zero.item(), 0.95, rel_tol=1e-6), f"a zero gradient should still decay 1 to 0.95, got {p_zero.item()}"

# %% [markdown]
# ## 4. Switching the recording off: `no_grad`, `inference_mode`, `detach`
#
# Recording costs memory (every saved intermediate) and time. Three tools turn
# it off, for different jobs.
#
# **`torch.no_grad()`** is a context manager (and decorator) inside which
# results do not require grad and have no `grad_fn`. Evaluation loops use it,
# and so does every `torch.optim` optimizer when it updates the weights (its
# `step` runs with gradients disabled by default, `differentiable=False`): an
# update is not part of the model's
# computation, and updating a leaf that requires grad in place is refused
# outside `no_grad`. The message still says "Variable", the pre-2018 name for
# a tensor that autograd tracks (see the end of this section).

# %%
w = torch.tensor(2.0, requires_grad=True)
(w**2).backward()
with expect_error(RuntimeError, "a leaf Variable that requires grad is being used in an in-place operation"):
    w -= 0.1 * w.grad  # an SGD step, written naively

with torch.no_grad():
    w -= 0.1 * w.grad  # the same step, not recorded
print(f"w after the step: {w.item():.2f}, still a leaf: {w.is_leaf}, requires_grad: {w.requires_grad}")
assert math.isclose(w.item(), 1.6, rel_tol=1e-6), f"2 - 0.1 * 4 should be 1.6, got {w.item()}"
assert w.is_leaf and w.requires_grad, "an update under no_grad should leave w a leaf that requires grad"

# %% [markdown]
# **`torch.inference_mode()`** goes further. In the words of its
# documentation: "Compared to `no_grad`, it removes additional overhead by
# disabling view tracking and version counter bumps" (the version counter
# appears in section 8). The tensors it creates are marked as *inference
# tensors*.

# %%
# NBVAL_CHECK_OUTPUT
with torch.no_grad():
    a = x * 2
with torch.inference_mode():
    b = x * 2
print(f"under no_grad:        requires_grad={a.requires_grad}, grad_fn={a.grad_fn}, is_inference={a.is_inference()}")
print(f"under inference_mode: requires_grad={b.requires_grad}, grad_fn={b.grad_fn}, is_inference={b.is_inference()}")
assert not a.is_inference(), "a tensor made under no_grad should be a normal tensor, not an inference tensor"
assert b.is_inference(), "a tensor made under inference_mode should be an inference tensor"

# %% [markdown]
# The price: the documentation says inference tensors "cannot be used in
# computations recorded by autograd". What PyTorch enforces is narrower, and
# worth knowing precisely. An operation whose backward does not need `b`
# works: the derivative of $b + \text{weight}$ with respect to `weight` is 1
# whatever `b` is, so `AddBackward0` saves nothing. An operation whose
# backward needs `b` fails: $b \cdot \text{weight}$ has derivative $b$, so
# `MulBackward0` would have to save `b` for the backward pass, and that is
# refused. So is an in-place change of an inference tensor outside inference
# mode (inference tensors have no version counter to bump), and the cell
# shows a detail worth knowing: the error comes after the change was made, so
# catching it does not undo it. Follow the documented rule rather
# than the narrower enforced one: whether a later computation happens to save
# the tensor is an implementation detail of each operation.

# %%
weight = torch.tensor(5.0, requires_grad=True)
(b + weight).backward()  # allowed: AddBackward0 saves neither input
print("(b + weight).backward() works: weight.grad =", weight.grad.item())
assert weight.grad.item() == 1.0, f"d/dweight (b + weight) should be 1, got {weight.grad.item()}"
weight.grad = None
with expect_error(RuntimeError, "Inference tensors cannot be saved for backward"):
    (b * weight).backward()  # refused: MulBackward0 would save b
with torch.inference_mode():
    scratch = torch.zeros(())  # another inference tensor, to change in place
with expect_error(RuntimeError, "Inplace update to inference tensor outside InferenceMode is not allowed"):
    scratch.add_(1)
print("after the refused scratch.add_(1), scratch =", scratch.item())
assert scratch.item() == 1.0, f"the error is raised after the addition is done, so scratch should be 1, got {scratch.item()}"

# %% [markdown]
# Both messages name the same two fixes: make a normal copy with `.clone()`
# outside inference mode, or use `no_grad` in the first place when the results
# will be reused for training. Either way the gradient of
# $b \cdot \text{weight}$ with respect to `weight` is $b = 6$.

# %%

(b.clone() * weight).backward()  # fix 1: a normal tensor with the same values
print("with b.clone():", weight.grad.item())
assert weight.grad.item() == 6.0, f"with b.clone() the gradient should be b = 6, got {weight.grad.item()}"
weight.grad = None
(a * weight).backward()  # fix 2: a tensor made under no_grad is a normal tensor
print("with the no_grad result:", weight.grad.item())
assert weight.grad.item() == 6.0, f"with the no_grad result the gradient should be 6, got {weight.grad.item()}"

# %% [markdown]
# **`t.detach()`** returns a new tensor that shares `t`'s memory but is cut
# off from the graph: autograd treats it as a constant. Two common uses:
# converting to NumPy (which refuses tensors that require grad) and a *stop
# gradient*, where part of an expression should not be differentiated.
#
# With $f = x \cdot \text{detach}(x)$ the second factor is a constant 3, so
# $df/dx = 3$, not $2x = 6$:

# %%
# NBVAL_CHECK_OUTPUT
x = torch.tensor(3.0, requires_grad=True)
d = x.detach()
print("detach shares memory:", d.data_ptr() == x.data_ptr(), "| requires_grad:", d.requires_grad)

with expect_error(RuntimeError, "Can't call numpy() on Tensor that requires grad"):
    x.numpy()
print("x.detach().numpy() =", x.detach().numpy())

(x * x).backward()
print("d/dx x*x          =", x.grad.item())
assert x.grad.item() == 6.0, f"d/dx x*x at 3 should be 2x = 6, got {x.grad.item()}"
x.grad = None
(x * x.detach()).backward()
print("d/dx x*x.detach() =", x.grad.item())
assert x.grad.item() == 3.0, "x.detach() should act as the constant 3"

# %% [markdown]
# ### Older spellings: `.data` and `Variable`
#
# Code written before PyTorch 0.4 (2018), and many tutorials copied from it,
# use two older forms.
#
# **`.data`**, as in `w.data -= lr * w.grad`, was how weights were updated
# before `no_grad` existed. Like `detach()`, `t.data` shares `t`'s memory and
# is cut off from the graph, with one difference: `detach()` shares `t`'s
# version counter, `.data` does not. So autograd sees an in-place change made
# through `detach()`, and does **not** see one made through `.data`. Take
# `sigmoid`, whose backward reuses its saved output $y$ as $y(1 - y)$
# (section 8 looks at saved values in detail), and double that output
# through `.data`:

# %%
# NBVAL_CHECK_OUTPUT
x = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
y = x.sigmoid()
y.data.mul_(2)  # y now holds 2*sigmoid(x), but SigmoidBackward0 is not told
y.sum().backward()  # no error
sig = torch.sigmoid(x.detach())
print("version of y after y.data.mul_(2):", y._version)
assert y._version == 0, "a change through .data should not bump y's version counter"
print("autograd's gradient:       ", x.grad)
print("d/dx sum(sigmoid(x)):      ", sig * (1 - sig))
print("d/dx sum(2 * sigmoid(x)):  ", 2 * sig * (1 - sig))
assert not torch.allclose(x.grad, sig * (1 - sig)) and not torch.allclose(x.grad, 2 * sig * (1 - sig)), (
    "the gradient after y.data.mul_(2) should be neither derivative"
)
assert torch.allclose(x.grad, 2 * sig * (1 - 2 * sig)), "the backward should have used the overwritten y: y(1 - y), y = 2 sigmoid"

# %% [markdown]
# No error, and a gradient that is the derivative of nothing you wrote: the
# backward used the overwritten value, $y(1 - y)$ with $y = 2\sigma(x)$. The
# same change made through `detach()` is caught:

# %%
x = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
y = x.sigmoid()
y.detach().mul_(2)  # detach() shares y's version counter
print("version of y after y.detach().mul_(2):", y._version)
assert y._version == 1, "a change through detach() should bump y's version counter"
with expect_error(RuntimeError, "modified by an inplace operation"):
    y.sum().backward()

# %% [markdown]
# Here the change went to a tensor that the backward pass needed, and `.data`
# hid it. A weight update through `.data` after `backward()` is harmless, but
# between a forward and its backward it would hide the same kind of change.
# So write weight updates as `with torch.no_grad(): w -= lr * w.grad`, as
# above: the version counter then still catches a change made too early.
#
# **`Variable`**: before 0.4, a tensor that autograd tracked had to be wrapped
# in `torch.autograd.Variable`. Tensor and Variable have since been merged:
# `Variable(t)` still works, but returns a plain `torch.Tensor`. Its
# `volatile=True` flag, the old way to switch recording off, has been replaced
# by `torch.no_grad()`: passing it only warns. The old word survives in error
# messages such as "a leaf Variable that requires grad" above.

# %%
# NBVAL_CHECK_OUTPUT
t = torch.tensor([1.0, 2.0])
old = torch.autograd.Variable(t, requires_grad=True)
print(f"Variable(t, requires_grad=True): type {type(old).__name__}, requires_grad={old.requires_grad}, is_leaf={old.is_leaf}")
assert type(old) is torch.Tensor, f"Variable(...) should return a plain torch.Tensor, got {type(old)}"

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    volatile = torch.autograd.Variable(t, volatile=True)
print("volatile=True warns:", caught[0].message)
assert "no_grad" in str(caught[0].message), f"the volatile warning should point to no_grad: {caught[0].message}"
assert not volatile.requires_grad, "Variable(t, volatile=True) should give a tensor that does not require grad"

# %% [markdown]
# ## 5. Non-scalar outputs: `backward(gradient=...)`
#
# A loss is a scalar, so "the gradient" is unambiguous. For a vector output
# $y = f(x)$ with $y \in \mathbb{R}^m$, $x \in \mathbb{R}^n$, the derivative is
# the $m \times n$ **Jacobian** $J_{ij} = \partial y_i / \partial x_j$.
# Autograd never builds $J$. One backward pass computes a **vector-Jacobian
# product** $v^\top J$ for a vector $v$ you choose (the weight of each
# output), and that is exactly what the chain rule needs. Building all of
# $J$ takes $m$ such passes, one per row (measured below). For a scalar
# output $v$ is simply 1, which is why `loss.backward()` needs no argument.
# For a vector output, autograd refuses to guess:

# %%
def products(t):
    """(t0 t1, t1 t2, t2 t0): a map from R^3 to R^3 with a Jacobian easy to write by hand."""
    return torch.stack([t[0] * t[1], t[1] * t[2], t[2] * t[0]])


x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
y = products(x)
with expect_error(RuntimeError, "grad can be implicitly created only for scalar outputs"):
    y.backward()

# %% [markdown]
# By hand, at $x = (1, 2, 3)$:
#
# $$J = \begin{pmatrix} x_1 & x_0 & 0 \\ 0 & x_2 & x_1 \\ x_2 & 0 & x_0 \end{pmatrix}
#     = \begin{pmatrix} 2 & 1 & 0 \\ 0 & 3 & 2 \\ 3 & 0 & 1 \end{pmatrix}.$$
#
# With $v = (1, 10, 100)$, $v^\top J = (2 + 300,\ 1 + 30,\ 20 + 100) = (302, 31, 120)$.
# `backward(gradient=v)` stores exactly that in `x.grad`. We compare it with the
# full Jacobian from `torch.autograd.functional.jacobian`, which builds $J$ one
# row at a time, one vector-Jacobian product per row (exercise 3 below).

# %%
# NBVAL_CHECK_OUTPUT
v = torch.tensor([1.0, 10.0, 100.0])
y.backward(gradient=v)
J = torch.autograd.functional.jacobian(products, x.detach())
print("J =\n", J)
print("x.grad   =", x.grad)
print("v @ J    =", v @ J)
assert torch.equal(J, torch.tensor([[2.0, 1.0, 0.0], [0.0, 3.0, 2.0], [3.0, 0.0, 1.0]])), "J differs from the hand calculation"
assert torch.equal(x.grad, v @ J), "backward(gradient=v) should equal the vector-Jacobian product v^T J"

# %% [markdown]
# The cost, counted: a hook on an intermediate tensor runs once per backward
# pass through it. `backward(gradient=v)` makes one pass; the full Jacobian of
# this $m = 3$ output map makes three.

# %%
# NBVAL_CHECK_OUTPUT
passes = []


def counted_products(t):
    """`products`, with a hook that records each backward pass through its input."""
    u = t * 1.0
    u.register_hook(lambda grad: passes.append(1))
    return products(u)


t = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
counted_products(t).backward(gradient=v)
vjp_passes, passes = len(passes), []
torch.autograd.functional.jacobian(counted_products, t.detach())
jacobian_passes = len(passes)
print(f"backward passes for v^T J: {vjp_passes}; for the whole J: {jacobian_passes}")
assert (vjp_passes, jacobian_passes) == (1, 3), "one pass for a VJP, one per output row for the Jacobian"

# %% [markdown]
# `torch.autograd.functional` is the older interface: functions that take a
# function and tensors and return tensors. Its `jacobian` has a `vectorize`
# flag that computes all the rows in one batched call, and the documentation
# of that flag says "This feature is experimental. Please consider using
# `torch.func.jacrev` or `torch.func.jacfwd` instead if you are looking for
# something less experimental and more performant." **`torch.func`** is the
# newer interface, of function transforms: `torch.func.jacrev`, `torch.func.jacfwd`
# and `torch.func.hessian` turn a function into the function that returns its
# Jacobian or Hessian. The two Jacobians differ in how they build it:
#
# - `jacrev` uses **reverse mode**: one vector-Jacobian product (a backward
#   pass, as above) per **row**, so $m$ of them for $m$ outputs, batched with
#   `vmap`. It is the cheaper one when there are few outputs and many inputs,
#   as for a loss (one output, millions of weights: one backward pass).
# - `jacfwd` uses **forward mode**: one Jacobian-vector product $J u$ (a
#   derivative carried forward alongside the computation) per **column**, so
#   $n$ of them for $n$ inputs. It is the cheaper one when there are few inputs
#   and many outputs.
#
# The first use of forward mode in a process imports a module inside torch
# that still calls the deprecated `torch.jit.script`, which emits a
# `FutureWarning` that is not about your code. The cell below captures the
# warnings of each call on its own and checks that only `jacfwd` warns, and
# only about that (run the cell again and it prints none: the module is
# imported by then). Both agree with the row-by-row Jacobian; for
# $g(x) = x_0 x_1 x_2$ the Hessian is $\begin{pmatrix} 0 & x_2 & x_1 \\ x_2 & 0 & x_0 \\ x_1 & x_0 & 0 \end{pmatrix}$.
# Chapter 21 covers `torch.func` in depth (`vmap`, per-example gradients,
# forward mode, when each is faster).

# %%
with warnings.catch_warnings(record=True) as caught_rev:  # each call's warnings captured on their own
    warnings.simplefilter("always")
    J_rev = torch.func.jacrev(products)(x.detach())
with warnings.catch_warnings(record=True) as caught_fwd:  # the first forward-mode call of a process warns
    warnings.simplefilter("always")
    J_fwd = torch.func.jacfwd(products)(x.detach())
with warnings.catch_warnings(record=True) as caught_hessian:
    warnings.simplefilter("always")
    H = torch.func.hessian(lambda t: t[0] * t[1] * t[2])(x.detach())
jit_warnings = [w for w in caught_fwd if w.category is FutureWarning and "torch.jit.script" in str(w.message)]
assert not caught_rev and not caught_hessian, (
    f"jacrev and hessian should not warn: {[str(w.message) for w in caught_rev + caught_hessian]}"
)
assert len(jit_warnings) == len(caught_fwd), (
    f"jacfwd warned about something other than torch's own torch.jit.script use: {[str(w.message) for w in caught_fwd]}"
)
for message in sorted({f"{w.category.__name__}: {w.message}" for w in jit_warnings}):
    print(f"(captured around jacfwd, from inside torch: {message})")
print("jacrev == row-by-row J:", torch.equal(J_rev, J), "| jacfwd == J:", torch.equal(J_fwd, J))
print("hessian of x0*x1*x2 at (1, 2, 3):\n", H)
assert torch.equal(J_rev, J) and torch.equal(J_fwd, J), "torch.func's Jacobians should equal the row-by-row one"
assert torch.equal(H, torch.tensor([[0.0, 3.0, 2.0], [3.0, 0.0, 1.0], [2.0, 1.0, 0.0]])), f"unexpected Hessian {H}"

# %% [markdown]
# `y.sum().backward()` is the same as `y.backward(gradient=torch.ones_like(y))`:
# the derivative of a sum with respect to each $y_i$ is 1, so both send
# $v = \mathbf{1}$ into the graph. When each $y_i$ depends only on $x_i$ (any
# elementwise function), $J$ is diagonal and $\mathbf{1}^\top J$ is the vector
# of derivatives $f'(x_i)$. For $\sin$ on four points that is $\cos x_i$.

# %%
# NBVAL_CHECK_OUTPUT
x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
products(x).sum().backward()
via_sum = x.grad
x.grad = None
y = products(x)
y.backward(gradient=torch.ones_like(y))
print("y.sum().backward():                    ", via_sum)
print("y.backward(gradient=torch.ones_like(y)):", x.grad)
assert torch.equal(via_sum, x.grad), "y.sum().backward() and backward(gradient=ones) should give the same x.grad"

pts = torch.tensor([0.0, 0.5, 1.0, 2.0], requires_grad=True)
torch.sin(pts).sum().backward()
print("d/dx sum(sin(x)) at", pts.detach().tolist(), "->", pts.grad)
assert torch.equal(pts.grad, torch.cos(pts.detach())), "for an elementwise f, 1^T J should be f'(x_i) = cos(x_i)"

# %% [markdown]
# That is how the next section differentiates a whole grid of points with one
# call.
#
# ## 6. Higher-order derivatives: `create_graph=True`
#
# `torch.autograd.grad(outputs, inputs)` returns the gradients instead of
# adding them to `.grad`, which is handier when the gradient is itself a value
# you want to compute with. By default the backward pass is not recorded, so
# the gradient it returns is a tensor with no `grad_fn`: a constant, as far as
# autograd is concerned. With
# `create_graph=True`, the backward pass is recorded too, and its result can be
# differentiated again.
#
# Take $f(x) = x^4$. Then $f'(x) = 4x^3$ and $f''(x) = 12x^2$.

# %%
# NBVAL_CHECK_OUTPUT
x = torch.tensor(3.0, requires_grad=True)
f = x**4
(df,) = torch.autograd.grad(f, x, create_graph=True)
print(f"f'(3)  = {df.item():g}   (grad_fn={type(df.grad_fn).__name__}: it can be differentiated)")
(d2f,) = torch.autograd.grad(df, x)
print(f"f''(3) = {d2f.item():g}")
print("x.grad is still", x.grad, "(autograd.grad does not touch .grad)")
d1_at_3, d2_at_3 = df.item(), d2f.item()
_ = report.record("d2/dx2 x^4 at 3", d2_at_3)

# %% [markdown]
# Both print 108, and both are right: $4 \cdot 3^3 = 4 \cdot 27 = 108$ and
# $12 \cdot 3^2 = 12 \cdot 9 = 108$. The two functions $4x^3$ and $12x^2$
# happen to meet at $x = 3$ (they are equal where $4x^2(x - 3) = 0$). Some
# sources print 108 twice and call it a day, but a program that printed the
# first derivative twice would show the same thing. So x = 3 alone proves
# nothing; at $x = 2$ the two derivatives differ: $4 \cdot 8 = 32$ and
# $12 \cdot 4 = 48$.

# %%
# NBVAL_CHECK_OUTPUT
x = torch.tensor(2.0, requires_grad=True)
(df,) = torch.autograd.grad(x**4, x, create_graph=True)
(d2f,) = torch.autograd.grad(df, x)
d1_at_2, d2_at_2 = df.item(), d2f.item()
print(f"x = 3: f' = {d1_at_3:g}, f'' = {d2_at_3:g}")
print(f"x = 2: f' = {d1_at_2:g}, f'' = {d2_at_2:g}")

# %% [markdown]
# What does `create_graph=True` record? The backward of `x**4` (node
# `PowBackward0`) computes `grad * 4 * x**3`; with `create_graph=True` those
# operations run on tensors that require grad, so they leave a graph of their
# own, and `f'` is its output. The same walk as in section 1, now from
# `df.grad_fn`:

# %%
# NBVAL_CHECK_OUTPUT
x = torch.tensor(3.0, requires_grad=True)
(df,) = torch.autograd.grad(x**4, x, create_graph=True)
leaf_names[id(x)] = "x"
derivative_graph = walk_graph(df.grad_fn)
for label, depth, _ in derivative_graph:
    print("    " * depth + label.replace("\n", "  -> "))
kinds = [label.split("\n")[0] for label, _, _ in derivative_graph]
assert kinds == ["MulBackward0", "MulBackward1", "PowBackward0", "AccumulateGrad"], (
    f"the graph of f' = grad * 4 * x**3 should be Mul <- Mul (by the scalar 4) <- Pow <- AccumulateGrad, got {kinds}"
)

fig, ax = plt.subplots(figsize=(9, 1.6))
draw_graph(ax, [(f"{derivative_graph[0][0]}\n= df.grad_fn\n(times grad = 1)", *derivative_graph[0][1:]),
                (f"{derivative_graph[1][0]}\n(times 4)", *derivative_graph[1][1:]),
                (f"{derivative_graph[2][0]}\n(x**3)", *derivative_graph[2][1:]), *derivative_graph[3:]], "df = f'(x)")
ax.set_title("The graph that create_graph=True records for f'(x) = 4x^3; backward through it gives f''")
plt.show()

# %% [markdown]
# The backward pass through this graph differentiates $4x^3$, which gives
# $12x^2$: that is the second `autograd.grad` call above. Its leaf is the same
# `x`, which is why the second derivative is taken with respect to `x` again.

# %% [markdown]
# Without `create_graph=True`, the first gradient is a constant as far as
# autograd is concerned, and asking for its derivative fails:

# %%
x = torch.tensor(3.0, requires_grad=True)
(df_const,) = torch.autograd.grad(x**4, x)
print("grad_fn of the first derivative:", df_const.grad_fn)
with expect_error(RuntimeError, "does not require grad and does not have a grad_fn"):
    torch.autograd.grad(df_const, x)

# %% [markdown]
# ### `torch.autograd.grad`, not `backward(create_graph=True)`
#
# `backward(create_graph=True)` also records the backward pass, but it stores
# the recorded derivative in `x.grad`, and PyTorch warns about that. It warns
# only once per process, so the cell below makes that call in a fresh Python
# process, captures the warning there and prints it (the cell then shows it on
# every run). The graph behind
# `x.grad` ends in the `AccumulateGrad` node of `x`, which holds `x`, so `x`
# refers to its `.grad`, which refers back to `x`: a reference cycle. Part of
# it lives in C++ objects that Python's garbage collector does not see, so the
# graph and its saved tensors stay in memory until the cycle is broken by
# resetting the gradient (`x.grad = None`), as the warning itself says. Since `.grad` also accumulates (section 3), a second
# derivative taken this way needs a reset between the passes too.
# `torch.autograd.grad(..., create_graph=True)` returns the derivative and
# leaves `.grad` alone, which avoids both problems: that is why this chapter
# (and the warning itself) uses it for higher-order derivatives.

# %%
# NBVAL_CHECK_OUTPUT
BACKWARD_CREATE_GRAPH_DEMO = """
import json, warnings
import torch
x = torch.tensor(3.0, requires_grad=True)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    (x**4).backward(create_graph=True)
print(json.dumps([str(w.message) for w in caught]))
"""
# PyTorch gives this warning once per process: a fresh Python shows it on every run of this cell
fresh = subprocess.run([sys.executable, "-c", BACKWARD_CREATE_GRAPH_DEMO], capture_output=True, text=True, timeout=120)
assert fresh.returncode == 0, f"the fresh-process demonstration failed: {fresh.stderr[-500:]}"
cycle_warnings = [line.split(" (Triggered internally")[0] for line in json.loads(fresh.stdout)]
print("backward(create_graph=True) warned:", cycle_warnings[0] if cycle_warnings else None)
x = torch.tensor(3.0, requires_grad=True)
with warnings.catch_warnings(record=True):  # the same call here, for its graph (this process may have warned already)
    warnings.simplefilter("always")
    (x**4).backward(create_graph=True)
leaf_names[id(x)] = "x"
behind_grad = [label.replace("\n", " -> ") for label, _, _ in walk_graph(x.grad.grad_fn)]
print(f"x.grad = {x.grad.item():g}, and the graph behind it reaches:", behind_grad[-1])
assert cycle_warnings and "reference cycle" in cycle_warnings[0] and "autograd.grad" in cycle_warnings[0], (
    f"backward(create_graph=True) should warn about a reference cycle and recommend autograd.grad, got {cycle_warnings}"
)
assert behind_grad[-1] == "AccumulateGrad -> writes x.grad", f"the graph of x.grad should end at x itself: {behind_grad}"
x.grad = None  # breaks the cycle

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    (df,) = torch.autograd.grad(x**4, x, create_graph=True)
print(f"autograd.grad: f' = {df.item():g}, x.grad = {x.grad}, warnings: {len(caught)}")
assert x.grad is None and not caught, "torch.autograd.grad should leave x.grad alone and not warn"

# %% [markdown]
# ### A picture: derivatives on a grid
#
# Using the diagonal-Jacobian trick from section 5, one `autograd.grad` call
# on `f(xs).sum()` gives $f'$ at every grid point, and a second call gives
# $f''$. For $x^4$, drawn below, the curves of $f'$ and $f''$ touch at $x = 0$
# (both are 0 there, and $f' - f'' = 4x^2(x - 3)$ has a double root, so
# neither passes the other) and cross at $x = 3$, which is the coincidence
# above. The checks of section 7 compare the grid with $4x^3$ and $12x^2$ and
# test the sign of $f' - f''$ on both sides of 3.

# %%
def grid_derivatives(f, xs):
    """f, f' and f'' of an elementwise f at every point of the 1-d tensor xs."""
    xs = xs.detach().requires_grad_(True)
    ys = f(xs)
    (d1,) = torch.autograd.grad(ys.sum(), xs, create_graph=True)
    (d2,) = torch.autograd.grad(d1.sum(), xs)
    return ys.detach(), d1.detach(), d2.detach()


xs_poly = torch.linspace(-1.0, 3.5, GRID_POINTS, device=device)
poly = grid_derivatives(lambda t: t**4, xs_poly)
xp = xs_poly.cpu()
x = torch.tensor(0.0, requires_grad=True)
(df,) = torch.autograd.grad(x**4, x, create_graph=True)
(d2f,) = torch.autograd.grad(df, x)
d1_at_0, d2_at_0 = df.item(), d2f.item()
print(f"x = 0: f' = {d1_at_0:g}, f'' = {d2_at_0:g}")
assert (d1_at_0, d2_at_0) == (0.0, 0.0), f"f' and f'' of x^4 should both be 0 at x = 0, got {(d1_at_0, d2_at_0)}"

fig, ax = plt.subplots(figsize=(9, 3))
for values, label in zip(poly, ["$x^4$", "$f'$ = $4x^3$", "$f''$ = $12x^2$"]):
    ax.plot(xp, values.cpu(), label=label)
ax.plot([2, 2], [32, 48], "k:", lw=1)
ax.plot([3], [108], "ko", ms=5)
ax.plot([0], [0], "ko", ms=4)
ax.annotate("f' = f'' = 108 at x = 3", (3, 108), (0.6, 125), fontsize=9, arrowprops={"arrowstyle": "->"})
ax.annotate("x = 2: 32 vs 48", (2, 40), (0.6, 75), fontsize=9, arrowprops={"arrowstyle": "->"})
ax.annotate("f' = f'' = 0 at x = 0", (0, 0), (-0.9, 40), fontsize=9, arrowprops={"arrowstyle": "->"})
ax.set(title="$x^4$ and its first and second derivatives by autograd", xlabel="x", ylabel="value", ylim=(-20, 160))
ax.legend(fontsize=8, loc="upper left")
plt.show()

# %% [markdown]
# How exact are these derivatives? Autograd does not approximate: each
# operation's backward applies that operation's derivative formula, and the
# chain rule multiplies them together. To test that, compare autograd with a
# derivative worked out by hand, for a function whose derivative autograd has
# to assemble from several operations,
#
# $$g(x) = \sin x \; e^{-x^2/4}, \qquad
#   g'(x) = e^{-x^2/4}\left(\cos x - \tfrac{x}{2}\sin x\right), \qquad
#   g''(x) = e^{-x^2/4}\left(\left(\tfrac{x^2}{4} - \tfrac{3}{2}\right)\sin x - x\cos x\right),$$
#
# on a grid from $-2\pi$ to $2\pi$ in float64 (on the CPU, which has float64
# on every machine). Autograd should match the hand formulas to float64
# rounding, about $10^{-16}$. As a control, the same comparison applied to a
# hand derivative with one chain-rule term forgotten, $e^{-x^2/4}\cos x$, must
# fail by far more: a check that would pass a wrong derivative tests nothing.

# %%
def g(t):
    return torch.sin(t) * torch.exp(-(t**2) / 4)


def g_prime(t):  # by hand: product rule, chain rule
    return torch.exp(-(t**2) / 4) * (torch.cos(t) - t / 2 * torch.sin(t))


def g_second(t):  # by hand: g_prime differentiated once more
    return torch.exp(-(t**2) / 4) * ((t**2 / 4 - 1.5) * torch.sin(t) - t * torch.cos(t))


xs_g = torch.linspace(-2 * math.pi, 2 * math.pi, GRID_POINTS, dtype=torch.float64)
_, g_d1, g_d2 = grid_derivatives(g, xs_g)
hand_error = max((g_d1 - g_prime(xs_g)).abs().max().item(), (g_d2 - g_second(xs_g)).abs().max().item())
forgotten_term = (torch.exp(-(xs_g**2) / 4) * torch.cos(xs_g) - g_prime(xs_g)).abs().max().item()
print(f"float64, {GRID_POINTS} points: largest |autograd - hand formula| for g' and g'': {hand_error:.1e}")
print(f"control: a hand g' without the -x/2 sin x term is off by up to {forgotten_term:.2f}")
assert hand_error < 1e-12, f"autograd's g' and g'' should match the hand formulas to float64 rounding, off by {hand_error:.1e}"
assert forgotten_term > 1e-3, f"the control should be far from g', but it is off by only {forgotten_term:.1e}"

# %% [markdown]
# What autograd replaces is finite differences, and they make two errors that
# pull in opposite directions as the step $h$ shrinks. For the central
# difference $(f(x + h) - f(x - h)) / 2h$:
#
# - **truncation**, from the formula itself, is $f'''(\xi)\,h^2/6$ for some
#   $\xi$ within $h$ of $x$. For $\sin$ it is exactly
#   $\cos x\,(\sin h / h - 1) \approx -\cos x \cdot h^2/6$, so at most about
#   $h^2/6$ on the grid: $1.7 \cdot 10^{-3}$ at $h = 0.1$.
# - **rounding**: in float32, $x \pm h$ and the values of $\sin$ are each
#   rounded to the nearest float32 number. The numerator subtracts two nearly
#   equal numbers, so its rounding error does not shrink with $h$, and dividing
#   by $2h$ magnifies it: this error grows like $1/h$.
#
# On log-log axes the error against $h$ is therefore a V: a line of slope 2
# on the right, a noisy slope of $-1$ on the left, and a floor where they
# meet that no step gets below. The sweep tries steps from $10^{-5}$ to 1,
# evenly spaced on a log scale, in float32 on a grid of $\sin$ (the device's
# grid from $-2\pi$ to $2\pi$), and measures each error against $\cos x$
# computed in float64. It fits the two slopes by least squares on the
# log-log values. Autograd's float32 $\sin'$ is measured against the same
# float64 reference.

# %%
xs_sin = torch.linspace(-2 * math.pi, 2 * math.pi, GRID_POINTS, device=device)
trig = grid_derivatives(torch.sin, xs_sin)  # float32, like the finite differences
xs_cpu = xs_sin.cpu()
cos_ref = torch.cos(xs_cpu.double())  # the exact derivative at the float32 grid points, to float64 rounding
steps = torch.logspace(-5, 0, 201)  # float32, like the grid
x_plus, x_minus = xs_cpu + steps[:, None], xs_cpu - steps[:, None]  # one row per step h
sin_plus, sin_minus = torch.sin(x_plus), torch.sin(x_minus)
fd_error = (((sin_plus - sin_minus) / (2 * steps[:, None])).double() - cos_ref).abs().amax(dim=1)
truncation = cos_ref.abs().max().item() * steps.double() ** 2 / 6  # the h^2/6 prediction
trig_error = (trig[1].cpu().double() - cos_ref).abs().max().item()  # autograd's sin', float32


def loglog_slope(mask):
    """Least-squares slope of log10(error) against log10(h) over the steps in mask."""
    logs_h, logs_err = steps[mask].double().log10(), fd_error[mask].log10()
    design = torch.stack([logs_h, torch.ones_like(logs_h)], dim=1)
    return torch.linalg.lstsq(design, logs_err[:, None]).solution[0].item()


best = int(fd_error.argmin())
best_h, best_err = steps[best].item(), fd_error[best].item()
at_tenth = int((steps - 0.1).abs().argmin())
truncation_ratio = fd_error[at_tenth].item() / truncation[at_tenth].item()
right_slope, left_slope = loglog_slope(steps >= 3e-2), loglog_slope(steps <= 1e-4)
small = steps <= 1e-3
rise = fd_error[small].min().item() / best_err
print(f"{len(steps)} steps. h = {steps[at_tenth].item():.3g}: error {fd_error[at_tenth].item():.3e}, h^2/6 predicts "
      f"{truncation[at_tenth].item():.3e} (ratio {truncation_ratio:.4f})")
print(f"fitted slopes: {right_slope:.2f} for h >= 3e-2 (truncation), {left_slope:.2f} for h <= 1e-4 (rounding)")
print(f"best step of the sweep: h = {best_h:.2e}, error {best_err:.1e}")
print(f"smallest error with h <= 1e-3: {fd_error[small].min().item():.1e} ({rise:.1f} times the best)")
print(f"autograd's float32 sin' on the same grid: largest error {trig_error:.1e} "
      f"(float32 spacing just below 1: {2.0**-24:.1e})")
assert abs(truncation_ratio - 1) < 0.01, f"at h = 0.1 the error should be the truncation h^2/6 within 1%, ratio {truncation_ratio:.4f}"
assert abs(right_slope - 2) < 0.1, f"the truncation arm should have slope 2 on log-log axes, fitted {right_slope:.2f}"
assert abs(left_slope + 1) < 0.2, f"the rounding arm should have slope -1 on log-log axes, fitted {left_slope:.2f}"
assert rise > 2, f"the error should rise again below h = 1e-3, but the smallest there is only {rise:.1f}x the best"
assert best_err > 1e-6, f"the best central difference in float32 should still be off by more than 1e-6, got {best_err:.1e}"
# CPU: below the float32 spacing just below 1 (2^-24); CUDA documents its float32 cos to 2 ulp (2 * eps = 2^-22 allowed)
trig_bound = 2.0**-24 if device.type == "cpu" else 2 * torch.finfo(torch.float32).eps
assert trig_error < trig_bound, f"autograd's float32 sin' should be off by the float32 rounding of cos only, got {trig_error:.1e}"
assert trig_error < best_err / 10, "autograd's error should be far below the best central difference"
_ = report.record("float32 central differences of sin: best step h", f"{best_h:.1e}")
_ = report.record("float32 central differences of sin: error at the best h", f"{best_err:.1e}")
_ = report.record("float32 autograd sin': largest error", f"{trig_error:.1e}")

# %%
fig, ax = plt.subplots(figsize=(9, 3.2))
ax.loglog(steps, fd_error, lw=1.2, label="central difference, float32")
ax.loglog(steps, truncation, "k--", lw=0.8, label="truncation $h^2/6$")
ax.axhline(trig_error, color="C2", lw=1.2, ls=":", label="autograd, float32")
ax.plot([best_h], [best_err], "ko", ms=4)
ax.annotate(f"best: h = {best_h:.1e}", (best_h, best_err), (3e-2, 1e-6), fontsize=8, arrowprops={"arrowstyle": "->"})
ax.set(title="sin': error of float32 central differences vs step h", xlabel="step h",
       ylabel="largest |error| on the grid", ylim=(1e-8, 1e3))
ax.legend(fontsize=8, loc="upper right", frameon=False)
plt.show()

# %% [markdown]
# The printed numbers bear out the picture. At $h = 0.1$ the error is the
# truncation, $h^2/6$, to well within 1%, and the right arm's fitted slope is
# close to 2; the left arm's is close to $-1$. The best step of the sweep
# still leaves an error above $10^{-6}$ (where it sits exactly depends on how
# $x \pm h$ happens to round), and below $h = 10^{-3}$ the error climbs again.
# Autograd's float32 $\sin'$ (the dotted line) is the float32 $\cos$ of each
# grid point, so it is off only by how accurately the device computes one
# float32 $\cos$: on the CPU, by less than the float32 spacing just below 1
# (printed above; the check asserts exactly that, error $< 2^{-24}$), and CUDA
# documents its float32 `cos` to within 2 units in the last place (the check
# allows $2 \cdot 2^{-23}$ on a GPU). Either way that is more than an order of magnitude below the best
# that any step achieves. (The optional part at the end of this section looks at which
# rounding dominates the left arm.)
#
# ### Finite differences as a test: `gradcheck`
#
# Finite differences are too inaccurate to train with, but they are an
# independent way to *test* a gradient. `torch.autograd.gradcheck(f, inputs)`
# compares autograd's Jacobian with central differences (step `eps=1e-6`,
# tolerances `atol=1e-5`, `rtol=1e-3`), and is meant for float64 inputs: in
# float32 a step of $10^{-6}$ lies far out on the rounding arm of the V, and
# the error there is larger than those tolerances (shown below). It returns
# `True`, or raises `GradcheckError` showing both Jacobians. It passes for
# `products` and for `g`. It fails for a function whose gradient is wrong:
# one that changes `sigmoid`'s output through `.data`, the silent bug of
# section 4.

# %%
point = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
passed_products = torch.autograd.gradcheck(products, (point,))
passed_g = torch.autograd.gradcheck(g, (xs_g[::20].clone().requires_grad_(True),))
print(f"gradcheck(products): {passed_products} | gradcheck(g): {passed_g}")
assert passed_products is True and passed_g is True, "gradcheck should pass for functions autograd differentiates correctly"


def doubled_sigmoid_via_data(t):
    """2 * sigmoid(t) in value, but the doubling goes through .data, hidden from autograd (section 4)."""
    y = t.sigmoid()
    y.data.mul_(2)
    return y


with expect_error(RuntimeError, "Jacobian mismatch") as caught_gradcheck:
    torch.autograd.gradcheck(doubled_sigmoid_via_data, (torch.tensor([-1.0, 0.0, 2.0], dtype=torch.float64, requires_grad=True),))
assert type(caught_gradcheck.error).__name__ == "GradcheckError", f"expected a GradcheckError, got {caught_gradcheck.error!r}"

# %% [markdown]
# The "numerical" Jacobian is the derivative of what the function computes,
# $2\sigma(x)(1 - \sigma(x))$ on the diagonal; the "analytical" one is what
# autograd's backward returned, $y(1 - y)$ with the overwritten $y = 2\sigma(x)$
# (the same wrong numbers as in section 4). Chapter 19 uses `gradcheck` on
# hand-written backward functions, where such mistakes are easy to make.
#
# Now the same correct `products` in float32. `gradcheck` warns that the input
# is not double precision and then fails. It prints both matrices transposed,
# as $J^\top$ with one row per input (compare the analytical one with the $J$
# of section 5), and the numerical one is visibly off, because float32 numbers between 2 and 4
# are $2.4 \cdot 10^{-7}$ apart, a quarter of the step $h = 10^{-6}$, so
# $x \pm h$ is not represented exactly. The cell also
# measures the error of float32 central differences with that step against
# the exact $J$ of section 5, and compares it with the tolerance
# `atol + rtol * |J|`.

# %%
point32 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)  # float32, the default
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with expect_error(RuntimeError, "Jacobian mismatch") as caught_float32:
        torch.autograd.gradcheck(products, (point32,))
precision = [str(w.message) for w in caught if "double precision" in str(w.message)]
print("\ngradcheck warned:", precision[0] if precision else None)
assert type(caught_float32.error).__name__ == "GradcheckError", f"expected a GradcheckError, got {caught_float32.error!r}"
assert precision, f"gradcheck should warn about a float32 input, got {[str(w.message) for w in caught]}"

eps = 1e-6  # gradcheck's default step
J_exact = torch.tensor([[2.0, 1.0, 0.0], [0.0, 3.0, 2.0], [3.0, 0.0, 1.0]])
numerical32 = torch.stack(
    [(products(point32.detach() + eps * e) - products(point32.detach() - eps * e)) / (2 * eps) for e in torch.eye(3)], dim=1
)
error32 = (numerical32 - J_exact).abs()
tolerance = 1e-5 + 1e-3 * J_exact.abs()
print(f"float32 central differences, eps = {eps:g}: largest |error| {error32.max().item():.3f}, "
      f"largest tolerance {tolerance.max().item():.4f}; entries over tolerance: {int((error32 > tolerance).sum())} of 9")
assert (error32 > tolerance).any(), "some float32 central difference should miss gradcheck's tolerance"
_ = report.record("gradcheck step 1e-6 in float32: largest |error| of the numerical Jacobian", f"{error32.max().item():.3f}")

# %% [markdown]
# ### Going further (optional): where the rounding comes from
#
# This part can be skipped on a first reading; nothing later depends on it.
# Two things are rounded on the left arm of the V. The arguments $x \pm h$
# are rounded to the nearest float32 number, and for $4 \le |x| < 8$ those are
# $4.8 \cdot 10^{-7}$ apart, so the step actually taken is not exactly $2h$;
# and the values of $\sin$ are rounded, to numbers $6 \cdot 10^{-8}$ apart
# near 1. To see which dominates, divide instead by the step actually taken,
# $(x + h) - (x - h)$ computed exactly in float64: that removes the rounding
# of $x \pm h$ and leaves only that of $\sin$. The cell prints the median, over
# the steps $h \le 10^{-3}$, of the ratio between the two errors.

# %%
taken = x_plus.double() - x_minus.double()  # the step actually taken, exact in float64
fd_error_taken = ((sin_plus.double() - sin_minus.double()) / taken - cos_ref).abs().amax(dim=1)
from_arguments = (fd_error[small] / fd_error_taken[small]).median().item()
print(f"h <= 1e-3, median of error / error with the step actually taken: {from_arguments:.1f}")
assert from_arguments > 2, f"rounding x +- h should dominate the rounding error, but removing it gains only {from_arguments:.1f}x"

fig, ax = plt.subplots(figsize=(9, 3.2))
ax.loglog(steps, fd_error, lw=1.2, label="divided by 2h (as written)")
ax.loglog(steps, fd_error_taken, lw=0.8, alpha=0.8, label="divided by the step actually taken")
ax.loglog(steps, truncation, "k--", lw=0.8, label="truncation $h^2/6$")
ax.set(title="sin', float32 central differences: the rounding of x +- h", xlabel="step h",
       ylabel="largest |error| on the grid", ylim=(1e-8, 1e3))
ax.legend(fontsize=8, loc="upper right", frameon=False)
plt.show()

# %% [markdown]
# Dividing by the step actually taken lowers the left arm by the median factor
# printed above: most of the rounding error comes from rounding $x \pm h$ at
# $|x|$ up to $2\pi$, not from rounding $\sin$.

# %% [markdown]
# ## 7. Checks
#
# What this chapter claims, as assertions. If one of them fails, the message
# says what went wrong.

# %%
x = torch.tensor(3.0, requires_grad=True)
y = torch.tensor(4.0, requires_grad=True)
((x + y) ** 2).backward()
assert x.grad.item() == 14.0, f"d/dx (x+y)^2 at (3, 4) should be 2*(3+4) = 14, got {x.grad.item()}"
assert y.grad.item() == 14.0, f"d/dy (x+y)^2 at (3, 4) should be 14, got {y.grad.item()}"

assert d1_at_3 == 108.0, f"f'(3) for x^4 should be 4*27 = 108, got {d1_at_3}"
assert d2_at_3 == 108.0, f"f''(3) for x^4 should be 12*9 = 108, got {d2_at_3}"
assert (d1_at_2, d2_at_2) == (32.0, 48.0), f"at x = 2, x^4 should give f' = 32 and f'' = 48, got {(d1_at_2, d2_at_2)}"

assert torch.allclose(poly[1], 4 * xs_poly**3, rtol=1e-5, atol=1e-4), "grid f' of x^4 differs from 4x^3"
assert torch.allclose(poly[2], 12 * xs_poly**2, rtol=1e-5, atol=1e-4), "grid f'' of x^4 differs from 12x^2"
gap = (poly[1] - poly[2]).cpu()  # 4x^3 - 12x^2 = 4x^2 (x - 3)
assert (gap[xp < 3 - 1e-3] <= 1e-4).all() and (gap[xp > 3 + 1e-3] > 0).all(), "f' - f'' should be <= 0 below 3 and > 0 above"
print("all checks passed")

# %% [markdown]
# ## 8. Pitfalls
#
# ### "modified by an inplace operation"
#
# To compute a backward pass, a node often needs values from the forward pass,
# which it **saves**. `sigmoid` saves its *output*, because
# $\sigma'(x) = \sigma(x)(1 - \sigma(x))$. If you then change that output in
# place (`mul_`, `add_`, `relu_`, `+=`, `y[0] = ...`), the saved value is no
# longer what the forward pass produced and the gradient would be silently
# wrong (as it was with `.data` in section 4). Autograd prevents that: every
# tensor has a version counter that each in-place operation increments
# (`t._version`, an internal attribute shown here for teaching), and the
# backward pass checks that the version it saved is the version it finds.

# %%
x = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
y = x.sigmoid()
print("version of y after sigmoid:", y._version)
y.mul_(2)  # in place: overwrites the output that SigmoidBackward0 saved
print("version of y after mul_:  ", y._version)
with expect_error(RuntimeError, "modified by an inplace operation"):
    y.sum().backward()

# %% [markdown]
# The message tells you the shape and type of the tensor (`[torch.FloatTensor [3]]`),
# the operation that produced it (`output 0 of Sigmoid`; the node that saved
# it for the backward pass is that operation's backward node,
# `SigmoidBackward0`) and the version mismatch. It does not tell you which
# line of your code made the in-place change, and nor does the anomaly
# detection its hint suggests. In anomaly mode autograd records, for every
# node, the traceback of the forward line that created it, and when a backward
# node fails it warns with that traceback: it points at the **forward
# operation whose saved value was overwritten**, and the in-place change is
# that line or one after it.
#
# There are two spellings. The hint names
# `torch.autograd.set_detect_anomaly(True, check_nan=False)`, which works as a
# call (anomaly mode on from then on) or as a context manager;
# `torch.autograd.detect_anomaly()`, used here, is a context manager for one
# block. Both take `check_nan`, True by default: it also
# raises as soon as a backward computation produces a NaN, and
# `check_nan=False` skips that check. `detect_anomaly` warns on entry that it
# "will increase the runtime and should only be enabled for debugging". Both
# warnings are captured here; we print the first line of the second and the
# line of code it points at.

# %%
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with torch.autograd.detect_anomaly():
        x = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
        y = x.sigmoid()
        y.mul_(2)
        with expect_error(RuntimeError, "modified by an inplace operation") as in_anomaly_mode:
            y.sum().backward()
messages = [str(w.message) for w in caught]
entering = next(m for m in messages if m.startswith("Anomaly Detection has been enabled"))
anomaly = next(m for m in messages if m.startswith("Error detected in"))
code_lines = [line.strip() for line in anomaly.splitlines() if line.startswith("    ")]
print()
print("on entry, detect_anomaly warned:", entering)
print("on the error, it warned:", anomaly.splitlines()[0])
last_line = code_lines[-1] if code_lines else ""
print("  ... and the last line of its traceback is:", last_line)
assert "increase the runtime" in entering, f"detect_anomaly's warning on entry should mention the runtime: {entering}"
assert "SigmoidBackward0" in anomaly, f"the anomaly warning should name SigmoidBackward0: {anomaly}"
assert "sigmoid" in last_line, f"the traceback should end at the forward sigmoid line, got {code_lines[-1:]}"
assert "changed in there or anywhere later" in str(in_anomaly_mode.error), (
    f"in anomaly mode the error should say the change is at that line or later: {in_anomaly_mode.error}"
)

# %% [markdown]
# The traceback points at `y = x.sigmoid()`, the forward operation whose
# saved output was overwritten, and the error's hint now says so: the
# variable "was changed in there or anywhere later". Here that is the
# `y.mul_(2)` on the next line. The fix is to make a new tensor instead of
# overwriting the saved one: `y = y * 2` rather than `y.mul_(2)`. The gradient
# is then correct, $2\sigma(x)(1 - \sigma(x))$:

# %%
x = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
y = x.sigmoid()
y = y * 2  # out of place: the saved sigmoid output is untouched
y.sum().backward()
sig = torch.sigmoid(x.detach())
expected = 2 * sig * (1 - sig)
print("autograd:", x.grad)
print("by hand: ", expected)
assert torch.allclose(x.grad, expected), "after the fix, the gradient should be 2*sigmoid*(1-sigmoid)"

# %% [markdown]
# Not every in-place operation is an error: only one that overwrites a value
# some node saved. `x * 2` saves nothing of its output (its derivative is the
# constant 2), so modifying that output in place is fine:

# %%
x = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
y = x * 2
y.add_(1)  # fine: MulBackward0 (by a constant) did not save y
y.sum().backward()
print("gradient:", x.grad)
assert torch.equal(x.grad, torch.full((3,), 2.0)), "d/dx sum(2x + 1) is 2 everywhere"

# %% [markdown]
# ### A "weight" that is not a leaf
#
# A common way to make small initial weights is to scale random numbers. Put
# `requires_grad=True` on the random tensor and scale it afterwards, and the
# scaled tensor is the **result of an operation**: it has a `grad_fn`, it is not
# a leaf, and so `backward()` does not store its gradient. The leaf is the
# unscaled random tensor: it still exists (the graph holds it) and receives a
# `.grad`, but you kept no name for it. Reading `w.grad` gives `None` and the
# warning of section 2, and an optimizer refuses it outright:

# %%
# NBVAL_CHECK_OUTPUT
w = torch.randn(3, requires_grad=True) * 0.01  # the product is made by MulBackward0
(w**2).sum().backward()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    grad_read = w.grad
print(f"is_leaf={w.is_leaf}, grad_fn={type(w.grad_fn).__name__}, w.grad={grad_read}")
print("warning:", str(caught[0].message).split(". ")[0] + ".")
assert grad_read is None and not w.is_leaf, "a scaled tensor should be a non-leaf with no .grad"
lost_leaf = w.grad_fn.next_functions[0][0].variable  # the AccumulateGrad node below MulBackward0 holds it
print(f"the leaf below it: is_leaf={lost_leaf.is_leaf}, has a .grad: {lost_leaf.grad is not None}, "
      f".grad is 0.01 * 2w: {torch.allclose(lost_leaf.grad, 0.01 * 2 * w.detach())}")
assert lost_leaf.is_leaf and torch.allclose(lost_leaf.grad, 0.02 * w.detach()), (
    "the unscaled random tensor should be a leaf whose .grad is d/dr sum((0.01 r)^2) = 0.02 w"
)
with expect_error(ValueError, "can't optimize a non-leaf Tensor"):
    torch.optim.SGD([w], lr=0.1)

# %% [markdown]
# The fix: make the values first, then ask for gradients, so the tensor
# autograd tracks is the one you keep. `requires_grad_()` switches it on in
# place (or wrap the tensor in `nn.Parameter`, chapter 03).

# %%
# NBVAL_CHECK_OUTPUT
w = (torch.randn(3) * 0.01).requires_grad_()  # scale first: w is a leaf
(w**2).sum().backward()
print(f"is_leaf={w.is_leaf}, grad_fn={w.grad_fn}, w.grad is 2w: {torch.allclose(w.grad, 2 * w.detach())}")
assert w.is_leaf and torch.allclose(w.grad, 2 * w.detach()), "after the fix w should be a leaf with .grad = 2w"

# %% [markdown]
# ### Integer tensors cannot require grad
#
# A derivative needs values that can change by a little, so only
# floating-point and complex tensors can require grad. An integer tensor is
# refused at once. The fix is a floating-point dtype (the default `float32`,
# or `float64`); integer data such as class labels never needs gradients.

# %%
with expect_error(RuntimeError, "Only Tensors of floating point and complex dtype can require gradients"):
    torch.zeros(3, dtype=torch.long, requires_grad=True)
fixed = torch.zeros(3, requires_grad=True)  # float32
print("with the default dtype:", fixed.dtype, "requires_grad:", fixed.requires_grad)
assert fixed.requires_grad and fixed.dtype.is_floating_point, "a float tensor should accept requires_grad=True"

# %% [markdown]
# ## 9. Exercises
#
# Each exercise has a stub that raises `NotImplementedError`, and a checker
# cell that prints `[TODO]` until you write your answer, then `[PASSED]` or
# `[NOT YET]` with what went wrong. Replace the `raise` line with your code and
# re-run both cells. After a failed check, `hint("02.derivative")` gives a
# fuller hint (a second failed attempt shows it too); if you are stuck,
# `solution("02.derivative")` returns the reference function, and
# `inspect.getsource(solution("02.derivative"))` shows its code. `hint`,
# `solution` and `inspect` are imported in the setup cell.
#
# **Exercise 1: `derivative(f, x)`.** Return $f'(x)$ as a Python float,
# computed by autograd. `f` takes and returns a 0-d tensor and uses torch
# operations, such as `torch.sin` or `t**3`. The checker tries several
# functions, and insists that `f` is called only at `x` itself, with a real
# floating-point tensor, and at least once on a tensor that requires grad (so
# finite differences and the complex-step trick do not count). Use
# `backward()` or `torch.autograd.grad`: the library functions that hand you a
# derivative (`torch.func.grad`, `torch.autograd.functional.*`, and their
# aliases in the older `functorch` package) are refused, here as in exercise
# 2.

# %%
def derivative(f, x: float) -> float:
    """Return f'(x) as a Python float, computed by autograd.

    f maps a 0-d float tensor to a 0-d tensor; x is a Python float.
    """
    raise NotImplementedError


# %%
result = check("02.derivative", derivative)

# %% [markdown]
# **Exercise 2: `second_derivative(f, x)`.** Return $f''(x)$ as a Python
# float, by differentiating autograd's first derivative (section 6). The
# checker tests $x^4$ at $x = 3$ (108), but also at $x = 2$ (48), along with
# $\sin$, $\exp$ and others, so an answer that returns the first derivative
# fails. Section 6 shows why `torch.autograd.grad` is the tool for both
# passes. Library functions that compute second derivatives for you
# (`torch.autograd.functional.hessian`, `torch.func.hessian`,
# `torch.func.grad` twice) are refused.

# %%
def second_derivative(f, x: float) -> float:
    """Return f''(x) as a Python float, computed by autograd.

    f maps a 0-d float tensor to a 0-d tensor; x is a Python float.
    """
    raise NotImplementedError


# %%
result = check("02.second_derivative", second_derivative)

# %% [markdown]
# **Exercise 3: `jacobian(f, x)`.** For `f` mapping a 1-d tensor `[n]` to a
# 1-d tensor `[m]`, return the Jacobian `[m, n]`, built row by row: row `i` is
# the vector-Jacobian product with $v = e_i$ (1 at position `i`, 0 elsewhere),
# as in section 5, computed with `backward()` or `torch.autograd.grad`. The
# library functions that build the whole Jacobian
# (`torch.autograd.functional.jacobian`, `torch.func.jacrev`/`jacfwd`,
# `vmap`, forward mode) are refused, and so are the library vector-Jacobian
# products called once per row (`torch.func.vjp`,
# `torch.autograd.functional.vjp`).

# %%
def jacobian(f, x: torch.Tensor) -> torch.Tensor:
    """Return the [m, n] Jacobian of f at x: J[i, j] = d f(x)[i] / d x[j].

    x is a 1-d float tensor [n] that does not require grad; f(x) is a 1-d tensor [m].
    """
    raise NotImplementedError


# %%
result = check("02.jacobian", jacobian)

# %% [markdown]
# **Exercise 4: `sgd_step(params, lr)`.** The heart of every training loop
# (chapter 04 writes one): given a list of leaf tensors that require grad and
# hold a `.grad` from `backward()`, update each one in place,
# $p \leftarrow p - \text{lr} \cdot p.\text{grad}$, without recording the
# update and not through `.data`, which hides the change from autograd's
# version counter (both in section 4), leave alone a tensor whose `.grad` is
# `None` (section 3), and then reset every `.grad` to `None` or zero so that
# the next `backward()` does not add to it. Return nothing. The checker runs two steps
# with different gradients and learning rates, and checks that the tensors
# are the same leaf tensors afterwards, still requiring grad and with no
# `grad_fn`. `torch.optim` is refused: write the update yourself.

# %%
def sgd_step(params: list, lr: float) -> None:
    """Update each leaf tensor p in params in place, p <- p - lr * p.grad (not through .data), then reset every .grad.

    params: leaf tensors that require grad; a .grad of None means "no gradient, leave p alone".
    lr: the learning rate, a Python float.
    """
    raise NotImplementedError


# %%
result = check("02.sgd_step", sgd_step)

# %% [markdown]
# ## Summary
#
# - Operations on tensors that require grad record a graph of `grad_fn` nodes,
#   linked by `next_functions`, ending in one `AccumulateGrad` per leaf.
# - `backward()` applies the chain rule through that graph, **adds** the
#   result to each leaf's `.grad`, and frees the graph (`retain_graph=True`
#   keeps it). Reset with `.grad = None` (what `optimizer.zero_grad()` does,
#   and a `None` gradient makes the optimizer skip the parameter) or
#   `.grad.zero_()`.
# - `no_grad` stops recording (optimizer updates, evaluation);
#   `inference_mode` also drops autograd's bookkeeping (view tracking, version
#   counters), and its tensors should stay out of recorded computations: one
#   that autograd would save for backward (`b * weight`) or change in place is
#   refused, though `b + weight` happens to work; `detach()` cuts one tensor out of the
#   graph. `.data` does the same but hides in-place changes from autograd,
#   which gives silently wrong gradients; `Variable` is now just `Tensor`.
#   A hand-written SGD step (exercise 4) updates each weight in place under
#   `no_grad`, then resets `.grad`.
# - For a non-scalar output, `backward(gradient=v)` computes the
#   vector-Jacobian product $v^\top J$ in one backward pass. The full Jacobian
#   by reverse mode takes one backward pass per output row (`torch.func.jacrev`,
#   cheaper for few outputs); by forward mode, one Jacobian-vector product per
#   input column (`torch.func.jacfwd`, cheaper for few inputs); chapter 21.
# - `create_graph=True` records the backward pass so that a derivative can be
#   differentiated again; use it with `torch.autograd.grad`, since
#   `backward(create_graph=True)` leaves a reference cycle through `.grad`
#   (PyTorch warns). For $x^4$ at $x = 3$ the first and second derivatives
#   are both 108; at $x = 2$ they are 32 and 48. Autograd applies each
#   operation's derivative formula: it matches a hand-derived derivative to
#   float64 rounding, while float32 central differences of sin are off by more
#   than $10^{-6}$ at every step from $10^{-5}$ to 1 (truncation $h^2/6$,
#   slope 2 on log-log axes, on one side; rounding $\propto 1/h$, slope $-1$,
#   on the other). In float64, finite differences make a good test of a
#   gradient: `torch.autograd.gradcheck`.
# - A tensor made by an operation (`torch.randn(3, requires_grad=True) * 0.01`)
#   is not a leaf and gets no `.grad`; only floating-point and complex tensors
#   can require grad.
# - Modifying in place a tensor that a node saved for backward is caught by
#   the version counter; anomaly detection (`detect_anomaly()` or
#   `set_detect_anomaly(True)`) points at the forward operation whose saved
#   value was overwritten, and the change is there or later; make a new tensor
#   instead.
#
# **Next**: chapter 03 packages parameters into `nn.Module`s, so that
# `model.parameters()` hands every leaf tensor to an optimizer, and chapter 04
# uses this chapter's `backward()` and `no_grad()` to write a training loop by
# hand.

# %%
report.finish()
