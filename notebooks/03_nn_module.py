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
# # Chapter 03: nn.Module
#
# Chapter 02 differentiated a handful of loose tensors. A real model has
# millions of weights, plus state that is not trained (BatchNorm's running
# statistics), plus behaviour that changes between training and evaluation
# (dropout). `torch.nn.Module` is the class that organises all of it: a module
# **registers** its parameters, buffers and submodules, so that one call finds
# every weight for the optimizer (`parameters()`), moves everything to a device
# (`.to()`), saves and restores everything (`state_dict()`), and switches every
# layer between training and evaluation behaviour (`train()`/`eval()`).
#
# **What you will learn**
#
# - parameters vs buffers (`nn.Parameter`, `register_buffer`, `persistent=False`);
# - the containers `nn.Sequential`, `nn.ModuleList` and `nn.ModuleDict`, and
#   why a plain Python list of layers silently breaks a model;
# - `state_dict()` and `load_state_dict()`, including the errors `strict`
#   loading gives;
# - what `train()` and `eval()` change, shown on dropout and batch norm;
# - forward hooks, to look at activations inside a model;
# - counting parameters, checked against a hand calculation.
#
# **Prerequisites**: chapters 01 (tensors) and 02 (autograd).
#
# **Estimated time**: 45 minutes.

# %% tags=["parameters"]
SEED = 0  # seed for weight initialisation and random inputs
BATCH = 8  # batch size of the example inputs

# %% [markdown]
# ## Setup

# %%
import copy

import torch
from torch import nn

import helpers.models
from helpers.device import pick_device, seed_everything
from helpers.exercises import check, solution  # noqa: F401  (solution: for when you are stuck)
from helpers.models import MLP
from helpers.report import ChapterReport

seed_everything(SEED)
device = pick_device()
report = ChapterReport("03_nn_module")
print(f"torch {torch.__version__}, device: {device}")

# %% [markdown]
# ## 1. A module registers what you assign to it
#
# You write a module by subclassing `nn.Module`, creating layers in
# `__init__` and using them in `forward`. Calling `model(x)` runs `forward`
# (through `__call__`, which also runs any hooks; section 6).
#
# The interesting part happens on assignment. `nn.Module.__setattr__` looks at
# what you assign to `self`: an `nn.Parameter` (a tensor subclass that
# requires grad by default) is recorded as a **parameter**, and an `nn.Module`
# is recorded as a **submodule**. Everything else is an ordinary attribute.
# That bookkeeping is why `super().__init__()` must come first (see the
# pitfalls), and why the container you put layers in matters (section 3).

# %%
# NBVAL_CHECK_OUTPUT
class TinyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(4, 3)  # a submodule, with its own weight and bias
        self.scale = nn.Parameter(torch.ones(3))  # a parameter of TinyNet itself
        self.note = "just an attribute"  # not registered

    def forward(self, x):
        return self.hidden(x).relu() * self.scale


tiny = TinyNet()
print(tiny)
for name, p in tiny.named_parameters():
    print(f"{name:15s} shape={tuple(p.shape)}  requires_grad={p.requires_grad}")
print("output shape:", tuple(tiny(torch.randn(BATCH, 4)).shape))

# %% [markdown]
# Parameter names are dotted paths through the submodules (`hidden.weight`).
# They are the names you will see in `state_dict()`, in optimizer parameter
# groups and in error messages.
#
# ## 2. Parameters vs buffers
#
# Some state belongs to the model but must **not** be trained: BatchNorm's
# running mean, a fixed normalisation constant, a causal mask. Such tensors
# are **buffers**, registered with `self.register_buffer(name, tensor)`. The
# difference shows up in four places:
#
# | kind | `parameters()` (so the optimizer trains it) | `state_dict()` (saved) | moved by `.to()` |
# | --- | --- | --- | --- |
# | `nn.Parameter` | yes | yes | yes |
# | buffer | no | yes | yes |
# | buffer with `persistent=False` | no | no | yes |
# | plain tensor attribute | no | no | **no** |
#
# The module below has one of each. This machine may have no GPU, so we use a
# dtype change, `.to(torch.float64)`, as a stand-in for a device move: `.to()`
# converts exactly the same set of tensors in both cases.

# %%
# NBVAL_CHECK_OUTPUT
class Kinds(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(3))
        self.register_buffer("running_mean", torch.zeros(3))
        self.register_buffer("scratch", torch.zeros(3), persistent=False)
        self.plain = torch.zeros(3)

    def forward(self, x):
        return (x - self.running_mean) * self.weight


kinds = Kinds()
print("parameters():  ", [n for n, _ in kinds.named_parameters()])
print("buffers():     ", [n for n, _ in kinds.named_buffers()])
print("state_dict():  ", list(kinds.state_dict()))

kinds.to(torch.float64)
for name in ["weight", "running_mean", "scratch", "plain"]:
    print(f"after .to(float64): {name:12s} is {getattr(kinds, name).dtype}")

# %% [markdown]
# The plain attribute stayed `float32`. On a GPU machine, `model.to("cuda")`
# would likewise leave it on the CPU, and the first `forward` that mixes it
# with CUDA tensors would fail with a device mismatch.
#
# BatchNorm is the classic module with both kinds: `weight` and `bias` are
# trained; `running_mean`, `running_var` and `num_batches_tracked` are
# buffers, updated during training by the forward pass itself, not by the
# optimizer.

# %%
# NBVAL_CHECK_OUTPUT
bn = nn.BatchNorm1d(4)
print("parameters:", [(n, tuple(p.shape)) for n, p in bn.named_parameters()])
print("buffers:   ", [(n, tuple(b.shape)) for n, b in bn.named_buffers()])

# %% [markdown]
# ## 3. Containers: `Sequential`, `ModuleList`, `ModuleDict`
#
# - `nn.Sequential(a, b, c)` is a module whose `forward` feeds each layer's
#   output to the next. Use it when the data flow really is a straight line.
# - `nn.ModuleList([...])` holds modules and registers them, but has no
#   `forward`: you write the loop yourself, which allows residual connections,
#   weight sharing or anything else.
# - `nn.ModuleDict({...})` registers modules by name, handy for several heads
#   chosen at run time.
#
# All three register their contents, so their parameters appear under
# numbered or named paths:

# %%
# NBVAL_CHECK_OUTPUT
seq = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


class Residual(nn.Module):
    def __init__(self, width=4, depth=3):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x).relu()  # a residual connection: not a straight line
        return x


class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 8)
        self.heads = nn.ModuleDict({"classify": nn.Linear(8, 3), "regress": nn.Linear(8, 1)})

    def forward(self, x, task):
        return self.heads[task](self.body(x).relu())


x = torch.randn(BATCH, 4)
for model in [seq, Residual(), MultiHead()]:
    print(type(model).__name__, list(model.state_dict()))
print("Sequential output:", tuple(seq(x).shape))
print("Residual output:  ", tuple(Residual()(x).shape))
print("MultiHead outputs:", tuple(MultiHead()(x, "classify").shape), tuple(MultiHead()(x, "regress").shape))

# %% [markdown]
# ## 4. The plain-list pitfall
#
# Because registration happens in `__setattr__`, a module only sees what you
# assign to it **directly**. A Python `list` is an ordinary attribute: the
# layers inside it are invisible. Nothing fails at construction and the
# forward pass works, so the bug is silent. Here is a model that keeps its
# hidden layers in a list and its output layer as a proper attribute:

# %%
class ListNet(nn.Module):
    def __init__(self, width=4, depth=3):
        super().__init__()
        self.hidden = [nn.Linear(width, width) for _ in range(depth)]  # the bug
        self.out = nn.Linear(width, 1)

    def forward(self, x):
        for layer in self.hidden:
            x = layer(x).relu()
        return self.out(x)


torch.manual_seed(SEED)
broken = ListNet()
print("forward works, output shape:", tuple(broken(x).shape))

# %% [markdown]
# Now four things that silently go wrong.
#
# 1. `parameters()` misses the hidden layers, so
# 2. the optimizer never sees them: after a training step they are unchanged;
# 3. `.to()` does not move (here: convert) them;
# 4. `state_dict()` lacks them, so a saved checkpoint would lose them.

# %%
# NBVAL_CHECK_OUTPUT
def audit(model, x):
    """Print what parameters(), an optimizer step, .to() and state_dict() see of `model`."""
    hidden = model.hidden
    print("1. parameters():", [n for n, _ in model.named_parameters()])
    before = [layer.weight.detach().clone() for layer in hidden]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(x).pow(2).mean().backward()
    opt.step()
    changed = [not torch.equal(b, layer.weight) for b, layer in zip(before, hidden)]
    print("2. hidden weights changed by opt.step():", changed)
    model.to(torch.float64)
    print("3. after .to(float64): hidden dtypes", [str(layer.weight.dtype) for layer in hidden])
    print("4. state_dict():", list(model.state_dict()))
    model.to(torch.float32)
    return changed


broken_changed = audit(broken, x)

# %% [markdown]
# The fix is one word: `nn.ModuleList` registers its contents, and everything
# works.

# %%
# NBVAL_CHECK_OUTPUT
class FixedNet(nn.Module):
    def __init__(self, width=4, depth=3):
        super().__init__()
        self.hidden = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))  # the fix
        self.out = nn.Linear(width, 1)

    def forward(self, x):  # unchanged
        for layer in self.hidden:
            x = layer(x).relu()
        return self.out(x)


torch.manual_seed(SEED)
fixed = FixedNet()
fixed_changed = audit(fixed, x)

# %%
assert len(list(broken.parameters())) == 2, "the list-based model should expose only out.weight and out.bias"
assert len(list(fixed.parameters())) == 8, "with ModuleList, 3 hidden layers x 2 tensors + 2 output tensors = 8"
assert not any(broken_changed) and all(fixed_changed), "only registered layers should be updated by the optimizer"
assert len(fixed.state_dict()) == 8 and len(broken.state_dict()) == 2, "state_dict should follow registration"

# %% [markdown]
# ## 5. `state_dict` and `load_state_dict`
#
# `model.state_dict()` is an ordered dictionary from names to tensors: every
# parameter and every persistent buffer. It holds no code and no structure, so
# it is what you save (chapter 14 covers files and checkpoints), and
# `load_state_dict` copies the tensors into a model that has the same names and
# shapes.

# %%
# NBVAL_CHECK_OUTPUT
def make_net():
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))


net = make_net()
for name, t in net.state_dict().items():
    print(f"{name:25s} {str(tuple(t.shape)):8s} {t.dtype}")

# %% [markdown]
# Loading into a freshly built copy of the same architecture reports that all
# keys matched, and the copy then computes the same outputs:

# %%
# NBVAL_CHECK_OUTPUT
clone = make_net()
print(clone.load_state_dict(net.state_dict()))
net.eval()
clone.eval()
print("same outputs:", torch.equal(net(x), clone(x)))

# %% [markdown]
# By default loading is **strict**: every key the model expects must be
# present, and no extra key is allowed. A mismatch raises a `RuntimeError`
# that lists the missing and unexpected keys, which is the usual sign that the
# architecture changed, or that the checkpoint was saved from a wrapper (for
# instance DDP adds a `module.` prefix to every name, chapter 25).

# %%
other = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))  # no BatchNorm: layer indices shift
try:
    other.load_state_dict(net.state_dict())
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# `strict=False` loads whatever matches by name and returns the lists instead
# of raising. It is meant for deliberate partial loading (a pretrained body
# with a new head, as in transfer learning, chapter 13); read the returned lists, because with
# `strict=False` a complete mismatch also "succeeds" without loading anything.
# Shapes are always checked: a name that matches with a different shape is an
# error even with `strict=False`.

# %%
# NBVAL_CHECK_OUTPUT
result = other.load_state_dict(net.state_dict(), strict=False)
print("missing:   ", result.missing_keys)
print("unexpected:", result.unexpected_keys)
try:
    nn.Linear(3, 2).load_state_dict(nn.Linear(4, 2).state_dict(), strict=False)
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# One more property worth knowing: the tensors in a `state_dict` **share
# memory** with the model. A "snapshot of the best model so far" taken with
# `state_dict()` alone keeps changing as training continues. Copy it
# (`copy.deepcopy`, or `{k: v.clone() ...}`) to freeze it.

# %%
# NBVAL_CHECK_OUTPUT
layer = nn.Linear(2, 1)
with torch.no_grad():
    layer.bias.fill_(0.0)
alias = layer.state_dict()
frozen = copy.deepcopy(layer.state_dict())
with torch.no_grad():
    layer.bias.fill_(42.0)  # "training" continues
print("state_dict() taken earlier:", alias["bias"].item())
print("deepcopy taken earlier:    ", frozen["bias"].item())

# %% [markdown]
# ## 6. `train()` and `eval()`
#
# Every module has a `training` flag. `model.train()` and `model.eval()` set
# it on the module **and all its submodules**. Only layers whose behaviour
# differs read it. The two common ones:
#
# - `nn.Dropout(p)` in training zeroes each element with probability `p` and
#   scales the rest by `1/(1-p)`; in evaluation it is the identity.
# - `nn.BatchNorm` in training normalises with the statistics of the current
#   batch and updates its running buffers; in evaluation it uses the running
#   buffers and leaves them alone.
#
# So in training mode two passes over the same input differ, and in
# evaluation mode they are equal:

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(SEED)
model = nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 2))
print("training flags:", {name or "(model)": m.training for name, m in model.named_modules()})

model.train()
train_equal = torch.equal(model(x), model(x))
model.eval()
eval_equal = torch.equal(model(x), model(x))
print("flags after eval():", set(m.training for m in model.modules()))
print(f"two passes equal in train mode: {train_equal}")
print(f"two passes equal in eval mode:  {eval_equal}")

# %% [markdown]
# BatchNorm's buffers show the other half: a forward pass in training mode
# updates the running statistics (and counts the batch); one in evaluation
# mode does not. In training mode a sample's output also depends on the other
# samples in its batch; in evaluation mode it does not.

# %%
# NBVAL_CHECK_OUTPUT
bn = model[1]
count_before, mean_before = bn.num_batches_tracked.item(), bn.running_mean.clone()
model.eval()
model(x)
print("eval forward:  num_batches_tracked", count_before, "->", bn.num_batches_tracked.item(),
      "| running_mean changed:", not torch.equal(mean_before, bn.running_mean))
model.train()
model(x)
print("train forward: num_batches_tracked", count_before, "->", bn.num_batches_tracked.item(),
      "| running_mean changed:", not torch.equal(mean_before, bn.running_mean))

bn_only = nn.BatchNorm1d(4)
first_row_alone_in_batch = bn_only(x)[0]
first_row_other_batch = bn_only(torch.cat([x[:1], 10 * x[1:]]))[0]
print("train mode, row 0 same in two different batches:", torch.allclose(first_row_alone_in_batch, first_row_other_batch))
bn_only.eval()
print("eval mode,  row 0 same in two different batches:", torch.allclose(bn_only(x)[0], bn_only(torch.cat([x[:1], 10 * x[1:]]))[0]))

# %% [markdown]
# Note what `eval()` does **not** do: it does not turn off autograd. Outputs
# still require grad and still build a graph. For evaluation you want both,
# `model.eval()` for the layers and `torch.no_grad()` (or `inference_mode()`)
# for autograd, which is exactly what `helpers.training.evaluate` does.

# %%
# NBVAL_CHECK_OUTPUT
model.eval()
print("eval() only:           requires_grad =", model(x).requires_grad)
with torch.no_grad():
    print("eval() + no_grad():    requires_grad =", model(x).requires_grad)

# %%
model.train()
assert not torch.equal(model(x), model(x)), "in train mode dropout should make two passes differ"
model.eval()
assert torch.equal(model(x), model(x)), "in eval mode two passes over the same input should be equal"

# %% [markdown]
# ## 7. Forward hooks
#
# A forward hook is a function that a module calls after its `forward`, with
# the module, its inputs and its output. Hooks let you look inside a model
# without editing it: record activation shapes or statistics, extract
# features, debug NaNs. `register_forward_hook` returns a **handle**; call
# `handle.remove()` when you are done, or the hook keeps running (and keeps
# any tensors it stores alive).

# %%
# NBVAL_CHECK_OUTPUT
shapes = {}


def record_shape(name):
    def hook(module, inputs, output):
        shapes[name] = tuple(output.shape)

    return hook


handles = [m.register_forward_hook(record_shape(name)) for name, m in model.named_children()]
model(x)
for name, shape in shapes.items():
    print(f"{name}: {type(model[int(name)]).__name__:12s} -> {shape}")

for h in handles:
    h.remove()
shapes.clear()
model(x)
print("after remove():", shapes)

# %% [markdown]
# `register_forward_pre_hook` runs before `forward` (and can change the
# inputs); `register_full_backward_hook` sees the gradients flowing through a
# module during `backward()`.
#
# ## 8. Counting parameters
#
# The parameter count tells you how much memory the weights need and how big
# a model is compared to others. It must match what you can work out on paper,
# so let's do it by hand for a small MNIST-sized network:
#
# `Flatten -> Linear(784, 256) -> BatchNorm1d(256) -> ReLU -> Dropout -> Linear(256, 10)`
#
# - `Linear(784, 256)`: a weight `[256, 784]` and a bias `[256]`:
#   $784 \times 256 + 256 = 200{,}704 + 256 = 200{,}960$.
# - `BatchNorm1d(256)`: `weight` $256$ + `bias` $256$ $= 512$. Its buffers
#   (`running_mean` 256, `running_var` 256, `num_batches_tracked` 1) are
#   **not** parameters.
# - `Flatten`, `ReLU`, `Dropout`: no parameters.
# - `Linear(256, 10)`: $256 \times 10 + 10 = 2{,}570$.
#
# Total: $200{,}960 + 512 + 2{,}570 = 204{,}042$.

# %%
# NBVAL_CHECK_OUTPUT
net = nn.Sequential(
    nn.Flatten(), nn.Linear(784, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Dropout(0.2), nn.Linear(256, 10)
)
by_hand = (784 * 256 + 256) + (256 + 256) + (256 * 10 + 10)

for name, m in net.named_children():
    own = sum(p.numel() for p in m.parameters())
    buf = sum(b.numel() for b in m.buffers())
    print(f"{name}: {type(m).__name__:12s} parameters {own:>7,}   buffers {buf:>4,}")
total = sum(p.numel() for p in net.parameters())
in_state_dict = sum(t.numel() for t in net.state_dict().values())
print(f"total parameters:      {total:,}   (by hand: {by_hand:,})")
print(f"numbers in state_dict: {in_state_dict:,}   (parameters + 513 buffer elements)")
_ = report.record("parameters of the worked example", total)

# %% [markdown]
# Counting the `state_dict` would overcount by BatchNorm's 513 buffer elements:
# count `parameters()`. Freezing a layer (`requires_grad_(False)`, used for
# transfer learning in chapter 13) does not remove its parameters, it only
# makes them non-trainable, so "trainable" is a separate count. `helpers.models`
# has a `count_parameters(model, trainable_only=False)` for later chapters
# (exercise 1 asks you to write it yourself).

# %%
# NBVAL_CHECK_OUTPUT
net[1].requires_grad_(False)  # freeze the first Linear
trainable = sum(p.numel() for p in net.parameters() if p.requires_grad)
print(f"after freezing Linear(784, 256): trainable {trainable:,} = {by_hand:,} - {784 * 256 + 256:,}")
n_all = helpers.models.count_parameters(net)
n_trainable = helpers.models.count_parameters(net, trainable_only=True)
print(f"helpers.models.count_parameters: all {n_all:,}, trainable {n_trainable:,}")
_ = net[1].requires_grad_(True)

# %% [markdown]
# The same arithmetic for the `MLP` that chapter 05 trains on MNIST
# (`784 -> 512 -> 256 -> 10`, dropout has no parameters):
# $(784 \cdot 512 + 512) + (512 \cdot 256 + 256) + (256 \cdot 10 + 10) = 401{,}920 + 131{,}328 + 2{,}570 = 535{,}818$.

# %%
# NBVAL_CHECK_OUTPUT
mlp = MLP(in_features=784, hidden=(512, 256), num_classes=10)
mlp_count = helpers.models.count_parameters(mlp)
print(f"MLP parameters: {mlp_count:,}")

# %% [markdown]
# ## 9. Checks

# %%
assert total == by_hand == 204_042, f"the worked example should have 784*256+256 + 2*256 + 256*10+10 = 204,042 parameters, got {total:,}"
assert in_state_dict == total + 2 * 256 + 1, "state_dict should hold the parameters plus BatchNorm's 513 buffer elements"
assert trainable == 204_042 - 200_960, f"freezing Linear(784, 256) should leave 3,082 trainable parameters, got {trainable:,}"
assert mlp_count == (784 * 512 + 512) + (512 * 256 + 256) + (256 * 10 + 10) == 535_818, "MLP count differs from the hand calculation"
assert [n for n, _ in kinds.named_buffers()] == ["running_mean", "scratch"], "both buffers should be registered"
assert "scratch" not in kinds.state_dict(), "a persistent=False buffer must not be in state_dict"
assert kinds.plain.dtype == torch.float32, ".to() must not touch a plain tensor attribute"
print("all checks passed")

# %% [markdown]
# ## 10. Pitfalls
#
# The plain-list pitfall (section 4) and a forgotten `eval()` (section 6) are
# the two that cost the most debugging time. Two more, with their real
# messages:
#
# **Forgetting `super().__init__()`.** The registration machinery lives in
# `nn.Module.__init__`; assigning a submodule before it has run fails:

# %%
class NoSuper(nn.Module):
    def __init__(self):
        self.fc = nn.Linear(2, 2)  # super().__init__() was never called


try:
    NoSuper()
except AttributeError as err:
    print(f"{type(err).__name__}: {err}")


class WithSuper(nn.Module):
    def __init__(self):
        super().__init__()  # the fix: first line of every __init__
        self.fc = nn.Linear(2, 2)


print("fixed:", [n for n, _ in WithSuper().named_parameters()])

# %% [markdown]
# **An optimizer over nothing.** If every layer is hidden in a plain list,
# `parameters()` is empty and the optimizer refuses to be built, which is the
# loud version of section 4's bug. The fix is again `nn.ModuleList`.

# %%
class AllInAList(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = [nn.Linear(2, 2), nn.Linear(2, 2)]


try:
    torch.optim.SGD(AllInAList().parameters(), lr=0.1)
except ValueError as err:
    print(f"{type(err).__name__}: {err}")


class AllInAModuleList(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])


opt = torch.optim.SGD(AllInAModuleList().parameters(), lr=0.1)
print("fixed: the optimizer has", len(opt.param_groups[0]["params"]), "parameter tensors")

# %% [markdown]
# ## 11. Exercises
#
# Each exercise has a stub that raises `NotImplementedError`, and a checker
# cell that prints `[TODO]` until you write your answer, then `[PASSED]` or
# `[NOT YET]` with a hint. If you are stuck, `solution("03.build_mlp")` (from
# `helpers.exercises import solution`) returns the reference; read it with
# `inspect.getsource`.
#
# **Exercise 1: `count_parameters(model, trainable_only=False)`.** Return the
# number of scalar parameters as an int; with `trainable_only=True`, count only
# those with `requires_grad`. The checker uses a model with a frozen layer and
# with buffers: buffers must not be counted.

# %%
def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Return the number of scalar parameters of model (buffers excluded).

    With trainable_only=True, count only parameters whose requires_grad is True.
    """
    raise NotImplementedError


# %%
result = check("03.count_parameters", count_parameters)

# %% [markdown]
# **Exercise 2: `build_mlp(sizes)`.** Return a module for
# `Linear(sizes[0], sizes[1]) -> ReLU -> ... -> Linear(sizes[-2], sizes[-1])`:
# a ReLU between consecutive Linear layers and **no** activation after the
# last one (its outputs are logits, which may be negative). The checker
# verifies the parameter count, the output shape, that outputs can be
# negative, and that the layers are registered.

# %%
def build_mlp(sizes: list[int]) -> nn.Module:
    """Return Linear -> ReLU -> ... -> Linear for the given layer sizes.

    sizes = [in, hidden_1, ..., out]; len(sizes) - 1 Linear layers, a ReLU
    between consecutive ones, nothing after the last.
    """
    raise NotImplementedError


# %%
result = check("03.build_mlp", build_mlp)

# %% [markdown]
# **Exercise 3: `Standardize(mean, std)`.** Write a module whose `forward`
# returns `(x - mean) / std` for inputs `[B, F]`, storing `mean` and `std`
# (tensors `[F]`) as buffers named `mean` and `std`. They must be saved in the
# `state_dict` and follow `.to()`, but must not be parameters (an optimizer
# would change them).

# %%
class Standardize(nn.Module):
    """(x - mean) / std, with mean and std kept as buffers."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor):
        super().__init__()
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


# %%
result = check("03.standardize", Standardize)

# %% [markdown]
# ## Summary
#
# - `nn.Module` registers what you assign to it: `nn.Parameter`s, submodules,
#   and buffers from `register_buffer`. Registration is what makes
#   `parameters()`, `.to()`, `state_dict()` and `train()`/`eval()` reach
#   everything.
# - Buffers are saved and moved but not trained; `persistent=False` keeps one
#   out of the `state_dict`. A plain tensor attribute gets none of this.
# - Keep layers in `nn.Sequential`, `nn.ModuleList` or `nn.ModuleDict`, never
#   in a plain list or dict.
# - `load_state_dict` is strict by default and lists missing and unexpected
#   keys; `strict=False` returns them instead. A `state_dict` shares memory
#   with the model: deep-copy it to snapshot.
# - `train()`/`eval()` switch dropout and batch norm; `eval()` does not turn
#   off autograd.
# - Forward hooks observe a model from outside; remove their handles.
# - A parameter count is simple arithmetic: `in*out + out` per Linear,
#   `2*features` per BatchNorm, buffers excluded.
#
# **Next**: chapter 04 fits a linear regression three ways, ending with
# `nn.Linear` and an optimizer fed by `model.parameters()`.

# %%
report.finish()
