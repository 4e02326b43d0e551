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
# - what `backward()` computes and where it stores the result (`.grad`);
# - why gradients accumulate across `backward()` calls, and the two ways to
#   reset them (`.grad = None` and `.grad.zero_()`);
# - how to switch recording off: `torch.no_grad()` versus `torch.inference_mode()`,
#   and `detach()`;
# - `backward(gradient=...)` for non-scalar outputs, i.e. the vector-Jacobian
#   product;
# - higher-order derivatives with `create_graph=True` and `torch.autograd.grad`;
# - the errors learners really hit, with their real messages and their fixes.
#
# **Prerequisites**: chapter 00 (environment) and chapter 01 (tensors).
#
# **Estimated time**: 45 minutes.

# %% tags=["parameters"]
SEED = 0  # seed for the few random numbers below
GRID_POINTS = 201  # points on the x grid of the derivative plots

# %% [markdown]
# ## Setup
#
# `helpers.plotting` sets small figure defaults; the chapter's headline
# numbers go into a `ChapterReport`. Autograd works the same on every device,
# so the tiny scalar examples stay on the CPU; the plotting grid uses the
# device that `pick_device` chose.

# %%
import math
import warnings

import matplotlib.pyplot as plt
import torch

import helpers.plotting  # noqa: F401  (small, 72-dpi figure defaults)
from helpers.device import pick_device, seed_everything
from helpers.exercises import check, solution  # noqa: F401  (solution: for when you are stuck)
from helpers.report import ChapterReport

seed_everything(SEED)
device = pick_device()
report = ChapterReport("02_autograd")
print(f"torch {torch.__version__}, device for the plotting grid: {device}")

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
# address, so the helper below prints only the class names.)

# %%
# NBVAL_CHECK_OUTPUT
leaf_names = {id(x): "x", id(y): "y"}


def show_graph(node, depth=0):
    """Print the backward graph below `node`, one node per line."""
    label = type(node).__name__
    if hasattr(node, "variable"):  # an AccumulateGrad node holds its leaf
        label += f"  -> writes {leaf_names.get(id(node.variable), '?')}.grad"
    print("    " * depth + label)
    for child, _ in node.next_functions:
        if child is not None:
            show_graph(child, depth + 1)


show_graph(z.grad_fn)

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

# %% [markdown]
# After `backward()` the graph is freed: its nodes drop the intermediate
# values they saved, again to save memory. A second `backward()` through the
# same graph therefore fails. Pass `retain_graph=True` to the first call when
# you really need to go through a graph twice (you rarely do: usually you
# rebuild the graph by running the forward pass again).

# %%
a = torch.tensor(2.0, requires_grad=True)
out = a.exp() * a
out.backward()
try:
    out.backward()
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")

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

# %% [markdown]
# There are two ways to reset:
#
# - `w.grad = None` drops the tensor. The next `backward()` allocates a fresh
#   one instead of adding to zeros, which saves a memory write, and optimizers
#   skip parameters whose `.grad` is `None`. This is what
#   `optimizer.zero_grad()` does by default (`set_to_none=True`).
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

# %% [markdown]
# ## 4. Switching the recording off: `no_grad`, `inference_mode`, `detach`
#
# Recording costs memory (every saved intermediate) and time. Three tools turn
# it off, for different jobs.
#
# **`torch.no_grad()`** is a context manager (and decorator) inside which
# results do not require grad and have no `grad_fn`. Evaluation loops use it,
# and so does every optimizer when it updates the weights: an update is not
# part of the model's computation, and updating a leaf that requires grad in
# place is refused outside `no_grad`:

# %%
w = torch.tensor(2.0, requires_grad=True)
(w**2).backward()
try:
    w -= 0.1 * w.grad  # an SGD step, written naively
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")

with torch.no_grad():
    w -= 0.1 * w.grad  # the same step, not recorded
print(f"w after the step: {w.item():.2f}, still a leaf: {w.is_leaf}, requires_grad: {w.requires_grad}")

# %% [markdown]
# **`torch.inference_mode()`** goes further: besides not recording, it skips
# the bookkeeping that would let a tensor take part in autograd later (version
# counters, view tracking), which makes pure inference a little faster. The
# tensors it creates are marked as *inference tensors*.

# %%
# NBVAL_CHECK_OUTPUT
with torch.no_grad():
    a = x * 2
with torch.inference_mode():
    b = x * 2
print(f"under no_grad:        requires_grad={a.requires_grad}, grad_fn={a.grad_fn}, is_inference={a.is_inference()}")
print(f"under inference_mode: requires_grad={b.requires_grad}, grad_fn={b.grad_fn}, is_inference={b.is_inference()}")

# %% [markdown]
# The price: an inference tensor may never enter a computation that autograd
# records. Using `b` in a graph later fails as soon as autograd would need to
# save it for the backward pass. The error names both fixes: make a normal
# copy with `.clone()` outside inference mode, or use `no_grad` in the first
# place when the results will be reused for training.

# %%
weight = torch.tensor(5.0, requires_grad=True)
try:
    (b * weight).backward()
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")

(b.clone() * weight).backward()  # fix 1: a normal tensor with the same values
print("with b.clone():", weight.grad.item())
weight.grad = None
(a * weight).backward()  # fix 2: a tensor made under no_grad is a normal tensor
print("with the no_grad result:", weight.grad.item())

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

try:
    x.numpy()
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")
print("x.detach().numpy() =", x.detach().numpy())

(x * x).backward()
print("d/dx x*x          =", x.grad.item())
x.grad = None
(x * x.detach()).backward()
print("d/dx x*x.detach() =", x.grad.item())

# %% [markdown]
# ## 5. Non-scalar outputs: `backward(gradient=...)`
#
# A loss is a scalar, so "the gradient" is unambiguous. For a vector output
# $y = f(x)$ with $y \in \mathbb{R}^m$, $x \in \mathbb{R}^n$, the derivative is
# the $m \times n$ **Jacobian** $J_{ij} = \partial y_i / \partial x_j$.
# Autograd never builds $J$. It computes a **vector-Jacobian product**
# $v^\top J$ for a vector $v$ you choose (the weight of each output): this is
# far cheaper, and it is exactly what the chain rule needs. For a scalar output
# $v$ is simply 1, which is why `loss.backward()` needs no argument. For a
# vector output, autograd refuses to guess:

# %%
x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
y = torch.stack([x[0] * x[1], x[1] * x[2], x[2] * x[0]])
try:
    y.backward()
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# By hand, at $x = (1, 2, 3)$:
#
# $$J = \begin{pmatrix} x_1 & x_0 & 0 \\ 0 & x_2 & x_1 \\ x_2 & 0 & x_0 \end{pmatrix}
#     = \begin{pmatrix} 2 & 1 & 0 \\ 0 & 3 & 2 \\ 3 & 0 & 1 \end{pmatrix}.$$
#
# With $v = (1, 10, 100)$, $v^\top J = (2 + 300,\ 1 + 30,\ 20 + 100) = (302, 31, 120)$.
# `backward(gradient=v)` stores exactly that in `x.grad`. We compare it with the
# full Jacobian from `torch.autograd.functional.jacobian` (which builds $J$ one
# row at a time, using one vector-Jacobian product per row: exercise 3 below).

# %%
# NBVAL_CHECK_OUTPUT
v = torch.tensor([1.0, 10.0, 100.0])
y.backward(gradient=v)
J = torch.autograd.functional.jacobian(lambda t: torch.stack([t[0] * t[1], t[1] * t[2], t[2] * t[0]]), x.detach())
print("J =\n", J)
print("x.grad   =", x.grad)
print("v @ J    =", v @ J)
assert torch.equal(x.grad, v @ J), "backward(gradient=v) should equal the vector-Jacobian product v^T J"

# %% [markdown]
# `y.sum().backward()` is the same as `y.backward(gradient=torch.ones_like(y))`.
# When each $y_i$ depends only on $x_i$ (any elementwise function), $J$ is
# diagonal and $\mathbf{1}^\top J$ is the vector of derivatives
# $f'(x_i)$. That is how the next section differentiates a whole grid of points
# with one call.
#
# ## 6. Higher-order derivatives: `create_graph=True`
#
# `torch.autograd.grad(outputs, inputs)` returns the gradients instead of
# adding them to `.grad`, which is handier when the gradient is itself a value
# you want to compute with. By default the backward pass is not recorded, so
# the gradient it returns is a plain number with no `grad_fn`. With
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
def first_and_second(f, x0):
    """(f'(x0), f''(x0)) by autograd, as Python floats."""
    t = torch.tensor(x0, requires_grad=True)
    (g,) = torch.autograd.grad(f(t), t, create_graph=True)
    (g2,) = torch.autograd.grad(g, t)
    return g.item(), g2.item()


d1_at_3, d2_at_3 = first_and_second(lambda t: t**4, 3.0)
d1_at_2, d2_at_2 = first_and_second(lambda t: t**4, 2.0)
print(f"x = 3: f' = {d1_at_3:g}, f'' = {d2_at_3:g}")
print(f"x = 2: f' = {d1_at_2:g}, f'' = {d2_at_2:g}")
_ = report.record("d2/dx2 x^4 at 3", d2_at_3)

# %% [markdown]
# Without `create_graph=True`, the first gradient is a constant as far as
# autograd is concerned, and asking for its derivative fails:

# %%
x = torch.tensor(3.0, requires_grad=True)
(df_const,) = torch.autograd.grad(x**4, x)
print("grad_fn of the first derivative:", df_const.grad_fn)
try:
    torch.autograd.grad(df_const, x)
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# ### A picture: derivatives on a grid
#
# Using the diagonal-Jacobian trick from section 5, one `autograd.grad` call
# on `f(xs).sum()` gives $f'$ at every grid point, and a second call gives
# $f''$. Left: $x^4$ with its autograd derivatives; the curves of $f'$ and
# $f''$ cross at $x = 0$ and $x = 3$, which is the coincidence above. Right:
# $\sin x$, whose derivatives we know exactly ($\cos x$ and $-\sin x$), drawn
# as dashed lines under the autograd curves. Autograd does not approximate
# (no finite differences): each operation's backward applies that operation's
# exact derivative formula (sin's multiplies by $\cos x$), so the curves agree
# to float rounding.

# %%
def grid_derivatives(f, xs):
    """f, f' and f'' of an elementwise f at every point of the 1-d tensor xs."""
    xs = xs.detach().requires_grad_(True)
    ys = f(xs)
    (d1,) = torch.autograd.grad(ys.sum(), xs, create_graph=True)
    (d2,) = torch.autograd.grad(d1.sum(), xs)
    return ys.detach(), d1.detach(), d2.detach()


xs_poly = torch.linspace(-1.0, 3.5, GRID_POINTS, device=device)
xs_sin = torch.linspace(-2 * math.pi, 2 * math.pi, GRID_POINTS, device=device)
poly = grid_derivatives(lambda t: t**4, xs_poly)
trig = grid_derivatives(torch.sin, xs_sin)

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.2))
xp = xs_poly.cpu()
for values, label in zip(poly, ["$x^4$", "$f'$ = $4x^3$", "$f''$ = $12x^2$"]):
    ax1.plot(xp, values.cpu(), label=label)
ax1.plot([2, 2], [32, 48], "k:", lw=1)
ax1.plot([3], [108], "ko", ms=5)
ax1.annotate("f' = f'' = 108 at x = 3", (3, 108), (0.2, 125), fontsize=9, arrowprops={"arrowstyle": "->"})
ax1.annotate("x = 2: 32 vs 48", (2, 40), (0.2, 60), fontsize=9, arrowprops={"arrowstyle": "->"})
ax1.set(title="$x^4$ and its autograd derivatives", xlabel="x", ylim=(-20, 160))
ax1.legend(fontsize=8, loc="upper left")

xt = xs_sin.cpu()
for values, exact, label in zip(trig, [torch.sin(xt), torch.cos(xt), -torch.sin(xt)], ["sin x", "f' (autograd)", "f'' (autograd)"]):
    ax2.plot(xt, values.cpu(), label=label, lw=2, alpha=0.6)
    ax2.plot(xt, exact, "--", color="k", lw=0.8)
ax2.set(title="sin x: autograd (colour) vs exact (dashed)", xlabel="x")
ax2.legend(fontsize=8, loc="lower left")
plt.show()

trig_error = max((trig[1].cpu() - torch.cos(xt)).abs().max().item(), (trig[2].cpu() + torch.sin(xt)).abs().max().item())
print(f"largest difference between autograd and the exact derivatives of sin: {trig_error:.1e}")

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
assert trig_error < 1e-5, f"autograd derivatives of sin differ from cos/-sin by {trig_error:.1e}"
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
# wrong. Autograd prevents that: every tensor has a version counter that each
# in-place operation increments (`t._version`, an internal attribute shown here
# for teaching), and the backward pass checks that the version it saved is the
# version it finds.

# %%
x = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
y = x.sigmoid()
print("version of y after sigmoid:", y._version)
y.mul_(2)  # in place: overwrites the output that SigmoidBackward saved
print("version of y after mul_:  ", y._version)
try:
    y.sum().backward()
    inplace_error = None
except RuntimeError as err:
    inplace_error = err
    print(f"{type(err).__name__}: {err}")

assert inplace_error is not None and "modified by an inplace operation" in str(inplace_error), (
    "expected autograd to refuse a backward pass through a tensor modified in place"
)

# %% [markdown]
# The message tells you the shape and type of the tensor (`[torch.FloatTensor [3]]`),
# which operation saved it (`output 0 of Sigmoid`) and the version mismatch.
# The fix is to make a new tensor instead of overwriting the saved one:
# `y = y * 2` rather than `y.mul_(2)`. The gradient is then correct,
# $2\sigma(x)(1 - \sigma(x))$:

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

# %% [markdown]
# ## 9. Exercises
#
# Each exercise has a stub that raises `NotImplementedError`, and a checker
# cell that prints `[TODO]` until you write your answer, then `[PASSED]` or
# `[NOT YET]` with a hint. Replace the `raise` line with your code and re-run
# both cells. If you are stuck, `solution("02.derivative")` (import it with
# `from helpers.exercises import solution`) returns the reference function;
# `inspect.getsource` shows its code.
#
# **Exercise 1: `derivative(f, x)`.** Return $f'(x)$ as a Python float,
# computed by autograd. `f` takes and returns a 0-d tensor and uses torch
# operations, such as `torch.sin` or `t**3`. The checker tries several
# functions, and insists that `f` is called with a tensor that requires grad
# (so finite differences do not count).

# %%
def derivative(f, x: float) -> float:
    """Return f'(x) as a Python float, computed by autograd.

    Make x a tensor with requires_grad=True, evaluate f on it, then use
    backward() or torch.autograd.grad, and return the result with .item().
    """
    raise NotImplementedError


# %%
result = check("02.derivative", derivative)

# %% [markdown]
# **Exercise 2: `second_derivative(f, x)`.** Return $f''(x)$ as a Python
# float. The checker tests $x^4$ at $x = 3$ (108), but also at $x = 2$ (48),
# along with $\sin$, $\exp$ and others, so an answer that returns the first
# derivative fails.

# %%
def second_derivative(f, x: float) -> float:
    """Return f''(x) as a Python float, computed by autograd.

    Take the first derivative with torch.autograd.grad(..., create_graph=True),
    then differentiate that result with respect to x again.
    """
    raise NotImplementedError


# %%
result = check("02.second_derivative", second_derivative)

# %% [markdown]
# **Exercise 3: `jacobian(f, x)`.** For `f` mapping a 1-d tensor `[n]` to a
# 1-d tensor `[m]`, return the Jacobian `[m, n]`, built row by row: row `i` is
# the vector-Jacobian product with $v = e_i$ (1 at position `i`, 0 elsewhere).
# Use `y.backward(gradient=v, retain_graph=True)` or
# `torch.autograd.grad(y, x, grad_outputs=v, retain_graph=True)`. Watch out
# for section 3: `.grad` accumulates.

# %%
def jacobian(f, x: torch.Tensor) -> torch.Tensor:
    """Return the [m, n] Jacobian of f at x, one vector-Jacobian product per row.

    x is a 1-d float tensor [n] that does not require grad: start from
    x = x.detach().requires_grad_(True). Row i is the gradient of f(x)[i].
    """
    raise NotImplementedError


# %%
result = check("02.jacobian", jacobian)

# %% [markdown]
# ## Summary
#
# - Operations on tensors that require grad record a graph of `grad_fn` nodes,
#   linked by `next_functions`, ending in one `AccumulateGrad` per leaf.
# - `backward()` applies the chain rule through that graph and **adds** the
#   result to each leaf's `.grad`; reset with `.grad = None` (what
#   `optimizer.zero_grad()` does) or `.grad.zero_()`.
# - `no_grad` stops recording (optimizer updates, evaluation);
#   `inference_mode` also drops autograd's bookkeeping, and its tensors cannot
#   enter a recorded computation later; `detach()` cuts one tensor out of the
#   graph.
# - For a non-scalar output, `backward(gradient=v)` computes the
#   vector-Jacobian product $v^\top J$.
# - `create_graph=True` records the backward pass so that a derivative can be
#   differentiated again. For $x^4$ at $x = 3$ the first and second derivatives
#   are both 108; at $x = 2$ they are 32 and 48.
# - Modifying in place a tensor that a node saved for backward is caught by
#   the version counter; make a new tensor instead.
#
# **Next**: chapter 03 packages parameters into `nn.Module`s, so that
# `model.parameters()` hands every leaf tensor to an optimizer, and chapter 04
# uses this chapter's `backward()` and `no_grad()` to write a training loop by
# hand.

# %%
report.finish()
