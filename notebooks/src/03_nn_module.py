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
# - parameters vs buffers (`nn.Parameter`, `register_buffer` and `nn.Buffer`,
#   `persistent=False`), and why `model.to(...)` needs no assignment while
#   `x.to(...)` does, and when it replaces the Parameter objects;
# - the containers `nn.Sequential`, `nn.ModuleList` and `nn.ModuleDict`, and
#   why a plain Python list of layers silently breaks a model;
# - `state_dict()` and `load_state_dict()`, including the errors `strict`
#   loading gives;
# - what `train()` and `eval()` change, shown on dropout and batch norm;
# - forward hooks, to look at activations inside a model;
# - functional (`F.relu`, `F.dropout`) vs module (`nn.ReLU`, `nn.Dropout`)
#   forms, and the `F.dropout` call that keeps dropping in `eval()`;
# - weight initialisation with `torch.nn.init` and `model.apply`: what
#   PyTorch does by default, and how the scale of the initial weights decides
#   whether activations and gradients vanish, explode or stay put through
#   a deep stack of layers;
# - counting parameters, checked against a hand calculation.
#
# **Prerequisites**: chapters 01 (tensors) and 02 (autograd).
#
# **Estimated time**: 90 minutes.

# %% tags=["parameters"]
SEED = 0  # seed for weight initialisation and random inputs
BATCH = 8  # batch size of the example inputs
DEPTH = 25  # Linear + activation pairs in section 9's initialisation experiment (allowed range: section 9's first cell)
WIDTH = 256  # features of every layer in that experiment, 64..512
STAT_BATCH = 64  # random inputs pushed through it, at least 32
SCALE_BAND = 4.0  # measured activation/gradient scale over DEPTH layers must be within this factor of the prediction
BAND_SEEDS = 5  # seeds over which the Kaiming + ReLU scale is checked against SCALE_BAND

# %% [markdown]
# ## Setup

# %%
import copy
import inspect
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

import helpers.models
import helpers.plotting  # noqa: F401  (small, 72-dpi figure defaults)
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
# (through `__call__`, which also runs any hooks; section 7).
#
# The interesting part happens on assignment. `nn.Module.__setattr__` looks at
# what you assign to `self`: an `nn.Parameter` (a tensor subclass that
# requires grad by default) is recorded as a **parameter**, and an `nn.Module`
# is recorded as a **submodule**: they go into the module's own dictionaries
# `_parameters` and `_modules`, not into the instance's `__dict__` (what
# `vars(module)` shows), and `nn.Module.__getattr__` finds them there.
# Everything else is an ordinary attribute in `__dict__`. That bookkeeping is
# why `super().__init__()` must come first (see the pitfalls), and why the
# container you put layers in matters (section 3).

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
print(f"output shape: {tuple(tiny(torch.randn(BATCH, 4)).shape)}")
in_dict = [k for k in ("hidden", "scale", "note") if k in vars(tiny)]
print(f"_parameters: {list(tiny._parameters)} | _modules: {list(tiny._modules)} | in __dict__: {in_dict}")
assert [n for n, _ in tiny.named_parameters()] == ["scale", "hidden.weight", "hidden.bias"], "scale, then hidden's two"
assert isinstance(tiny.scale, torch.Tensor) and tiny.scale.requires_grad, "an nn.Parameter is a tensor that requires grad"
assert "hidden" in tiny._modules and "hidden" not in vars(tiny), "__setattr__ should file a submodule under _modules"
assert "scale" in tiny._parameters and "scale" not in vars(tiny), "__setattr__ should file a Parameter under _parameters"
assert "note" in vars(tiny) and "note" not in tiny._modules, "anything else should stay an ordinary attribute"

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
# The module below has one of each. `.to()` takes a dtype, a device or both.
# A device move takes every registered tensor; a dtype change casts only the
# floating-point (and complex) ones, so an integer buffer keeps its dtype
# (BatchNorm's counter, below). We start with a dtype change,
# `.to(torch.float64)`, which every machine can do.

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
        return (x - self.running_mean) * self.weight + self.plain


kinds = Kinds()
print(f"parameters():   {[n for n, _ in kinds.named_parameters()]}")
print(f"buffers():      {[n for n, _ in kinds.named_buffers()]}")
print(f"state_dict():   {list(kinds.state_dict())}")

kinds.to(torch.float64)
for name in ["weight", "running_mean", "scratch", "plain"]:
    print(f"after .to(float64): {name:12s} is {getattr(kinds, name).dtype}")
assert [n for n, _ in kinds.named_parameters()] == ["weight"], "only the nn.Parameter is a parameter"
assert list(kinds.state_dict()) == ["weight", "running_mean"], "the parameter and the persistent buffer are saved"
assert kinds.weight.dtype == kinds.running_mean.dtype == kinds.scratch.dtype == torch.float64, ".to() converts all three"

# %% [markdown]
# The plain attribute stayed `float32`. A device move leaves it behind too. To
# see one without a GPU we use the **`meta`** device, which every PyTorch build
# has: a meta tensor carries a shape and a dtype but no data (PyTorch uses it
# to build large models before allocating their memory). After
# `.to("meta")` the plain attribute is still on the CPU, so `forward`, which
# combines it with the moved tensors, mixes two devices, and PyTorch refuses.
# On a GPU, `model.to("cuda")` leaves it behind in the same way. The fix is to
# register it, as a buffer with `persistent=False` if it need not be saved.

# %%
# NBVAL_CHECK_OUTPUT
on_meta = Kinds().to("meta")
for name in ["weight", "running_mean", "scratch", "plain"]:
    print(f"after .to('meta'): {name:12s} is on {getattr(on_meta, name).device}")
x_meta = torch.empty(BATCH, 3, device="meta")  # an input on the model's new device
mixed_error = None
try:
    on_meta(x_meta)
except RuntimeError as err:
    mixed_error = f"{type(err).__name__}: {err}"
    print(f"forward: {mixed_error}")


class KindsFixed(nn.Module):
    """Kinds with its plain tensor registered as a non-persistent buffer."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3))
        self.register_buffer("running_mean", torch.zeros(3))
        self.register_buffer("scratch", torch.zeros(3), persistent=False)
        self.register_buffer("plain", torch.zeros(3), persistent=False)  # the fix

    forward = Kinds.forward


fixed_out = KindsFixed().to("meta")(x_meta)
print(f"fixed: forward on meta gives a tensor on {fixed_out.device} of shape {tuple(fixed_out.shape)}")
assert on_meta.weight.is_meta and on_meta.running_mean.is_meta and on_meta.scratch.is_meta, "registered tensors move"
assert not on_meta.plain.is_meta, "a plain tensor attribute stays where it was"
assert mixed_error is not None and "device" in mixed_error, "a forward mixing meta and CPU tensors should raise"
assert fixed_out.is_meta, "with the tensor registered as a buffer, forward should run on the new device"

# %% [markdown]
# Since PyTorch 2.5 a buffer can also be declared the way a parameter is: assign
# an `nn.Buffer(tensor, persistent=True)` to an attribute, and `__setattr__`
# registers it exactly as `register_buffer` would (the attribute then reads back
# as a plain `torch.Tensor`; `nn.Buffer` is only the marker). Both spellings
# give the same module:

# %%
# NBVAL_CHECK_OUTPUT
class KindsWithBuffer(nn.Module):
    """KindsFixed, with its buffers declared as nn.Buffer attributes."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3))
        self.running_mean = nn.Buffer(torch.zeros(3))
        self.scratch = nn.Buffer(torch.zeros(3), persistent=False)
        self.plain = nn.Buffer(torch.zeros(3), persistent=False)

    forward = Kinds.forward


with_buffer, with_register = KindsWithBuffer(), KindsFixed()
for label, module in [("nn.Buffer:      ", with_buffer), ("register_buffer:", with_register)]:
    print(f"{label} buffers {[n for n, _ in module.named_buffers()]} | state_dict {list(module.state_dict())}")
print(f"type of the attribute after assignment: {type(with_buffer.running_mean).__name__}")
assert type(with_buffer.running_mean) is torch.Tensor, "an nn.Buffer should read back as a plain torch.Tensor"
assert [n for n, _ in with_buffer.named_buffers()] == [n for n, _ in with_register.named_buffers()], "same buffers"
assert list(with_buffer.state_dict()) == list(with_register.state_dict()) == ["weight", "running_mean"], (
    "persistent=False should keep an nn.Buffer out of the state_dict, as with register_buffer"
)

# %% [markdown]
# **`Module.to()` changes the module; `Tensor.to()` returns a new tensor.** We
# wrote `kinds.to(torch.float64)` above without assigning the result, and the
# module changed. That is how `Module.to()` is defined: it converts the
# module's parameters and buffers and returns the module itself, so
# `model = model.to(device)` and a bare `model.to(device)` do the same thing.
#
# Whether each parameter stays the same `nn.Parameter` **object** depends on
# the conversion. For a dtype change between ordinary dense tensors `.to()`
# puts the converted data into the old Parameter object; for a move to `meta`
# it makes a **new** Parameter. A move between the CPU and a GPU should keep
# the object too: that follows from the `Module._apply` rule in the "Going
# further" note below (CPU and GPU dense tensors pass its test), and the cell
# after next asserts it only where an accelerator exists. An optimizer holds
# Parameter objects, so the safe habit is to move the model first and build
# the optimizer afterwards. The next cell measures the dtype change and the
# `meta` move, which every machine can run (its last two rows are explained in
# the "Going further" note).
#
# `Tensor.to()` never changes its tensor. It returns a converted copy (or the
# tensor itself when nothing needs converting), so a bare `x.to(device)` on a
# line of its own is a silent no-op, a classic bug in a training loop: write
# `x = x.to(device)`.

# %%
# NBVAL_CHECK_OUTPUT
lin = nn.Linear(3, 2)
weight_before = lin.weight
opt = torch.optim.SGD(lin.parameters(), lr=0.1)
returned = lin.to(torch.float64)  # no assignment needed
print(f"Module.to returns the same module:   {returned is lin}")
print(f"its weight is now {lin.weight.dtype} and the same {type(lin.weight).__name__} object: "
      f"{lin.weight is weight_before}")
print(f'the optimizer built before still holds it: {opt.param_groups[0]["params"][0] is lin.weight}')

t = torch.zeros(3)
t.to(torch.float64)  # the pitfall: the converted copy is thrown away
print(f"after a bare t.to(float64), t is    {t.dtype}")
t64 = t.to(torch.float64)
print(f"t64 = t.to(float64) is a new tensor: {t64 is not t} | t64: {t64.dtype} | t: {t.dtype}")
print(f"t.to(float32) on a float32 t returns t itself: {t.to(torch.float32) is t}")

assert returned is lin and lin.weight.dtype == torch.float64, "Module.to should convert in place and return self"
assert lin.weight is weight_before and isinstance(lin.weight, nn.Parameter), "the Parameter object should survive .to"


def keeps_parameter(conversion, overwrite=False, swap=False):
    """Whether nn.Linear(3, 2).to(conversion) keeps its weight object, under the two torch.__future__ switches."""
    saved = (torch.__future__.get_overwrite_module_params_on_conversion(),
             torch.__future__.get_swap_module_params_on_conversion())
    torch.__future__.set_overwrite_module_params_on_conversion(overwrite)
    torch.__future__.set_swap_module_params_on_conversion(swap)
    try:
        layer = nn.Linear(3, 2)
        before = layer.weight
        layer.to(conversion)
        return layer.weight is before
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(saved[0])
        torch.__future__.set_swap_module_params_on_conversion(saved[1])


kept = {
    ".to(torch.float64)": keeps_parameter(torch.float64),
    ".to('meta')": keeps_parameter("meta"),
    ".to(torch.float64), overwrite switch on": keeps_parameter(torch.float64, overwrite=True),
    ".to('meta'), swap switch on": keeps_parameter("meta", swap=True),
}
for label, same in kept.items():
    print(f"{label:40s} same Parameter object: {same}")
assert kept == {".to(torch.float64)": True, ".to('meta')": False, ".to(torch.float64), overwrite switch on": False,
                ".to('meta'), swap switch on": True}, f"unexpected Parameter identities after .to(): {kept}"
assert not torch.__future__.get_overwrite_module_params_on_conversion(), "the overwrite switch should be restored"
assert not torch.__future__.get_swap_module_params_on_conversion(), "the swap switch should be restored"
assert t.dtype == torch.float32 and t64.dtype == torch.float64 and t64 is not t, "Tensor.to should return a new tensor"
assert t.to(torch.float32) is t, "Tensor.to should return the tensor itself when nothing changes"

# %% [markdown]
# The CPU/GPU move itself needs an accelerator. The next cell makes it when
# the machine has one; on a CPU-only machine, such as the one that produced
# the stored outputs, it prints that it skipped, and the claim for a CPU/GPU
# move rests on the `Module._apply` rule below, not on a measurement here.

# %%
if torch.accelerator.is_available():
    accelerator = torch.accelerator.current_accelerator()
    lin_move = nn.Linear(3, 2)
    weight_on_cpu = lin_move.weight
    lin_move.to(accelerator)
    kept_to_accelerator = lin_move.weight is weight_on_cpu and lin_move.weight.device.type == accelerator.type
    lin_move.to("cpu")
    kept_back = lin_move.weight is weight_on_cpu and lin_move.weight.device.type == "cpu"
    print(f"nn.Linear(3, 2).to('{accelerator.type}'): same Parameter object: {kept_to_accelerator}; "
          f"back .to('cpu'): {kept_back}")
    assert kept_to_accelerator and kept_back, "a CPU <-> accelerator move should keep the Parameter object"
    left_behind = Kinds().to(accelerator)
    assert left_behind.plain.device.type == "cpu", "a plain tensor attribute should stay on the CPU after .to()"
    print(f"Kinds().to('{accelerator.type}'): the plain attribute stays on {left_behind.plain.device}")
else:
    print("no accelerator on this machine: the CPU <-> GPU move was skipped")

# %% [markdown]
# *Going further.* The rule lives in `Module._apply`, which `.to()` calls: it
# assigns `param.data = new` when the private test
# `torch._has_compatible_shallow_copy_type(param, new)` passes, and otherwise
# wraps `new` in a new Parameter. Two global switches in `torch.__future__`
# change it, as the last two rows printed by the `keeps_parameter` cell show:
# `set_overwrite_module_params_on_conversion(True)` makes a new Parameter for
# every conversion, and `set_swap_module_params_on_conversion(True)` uses
# `torch.utils.swap_tensors`, which keeps the Python object even across a move
# to `meta`. That cell restores both switches.

# %% [markdown]
# BatchNorm is the classic module with both kinds: `weight` and `bias` are
# trained; `running_mean`, `running_var` and `num_batches_tracked` are
# buffers, updated during training by the forward pass itself, not by the
# optimizer. `num_batches_tracked` is an integer counter, which shows what a
# dtype change leaves alone: `.to(torch.float64)` casts the floating-point
# tensors and leaves the counter `int64`, a device move takes the counter
# along, and an integer target dtype is refused outright.

# %%
# NBVAL_CHECK_OUTPUT
bn = nn.BatchNorm1d(4)
print(f"parameters: {[(n, tuple(p.shape)) for n, p in bn.named_parameters()]}")
print(f"buffers:    {[(n, tuple(b.shape)) for n, b in bn.named_buffers()]}")
bn.to(torch.float64)
bn_dtypes = {n: str(t.dtype) for n, t in bn.state_dict().items()}
print(f"after .to(float64): {bn_dtypes}")
bn_meta = nn.BatchNorm1d(4).to("meta")
print(f"after .to('meta'): num_batches_tracked is on {bn_meta.num_batches_tracked.device}")
int_error = None
try:
    nn.BatchNorm1d(4).to(torch.int64)
except TypeError as err:
    int_error = f"{type(err).__name__}: {err}"
    print(f".to(torch.int64): {int_error}")
assert [n for n, _ in bn.named_buffers()] == ["running_mean", "running_var", "num_batches_tracked"], "BatchNorm's buffers"
assert bn.weight.dtype == bn.running_var.dtype == torch.float64, ".to(float64) should cast the floating-point tensors"
assert bn.num_batches_tracked.dtype == torch.int64, ".to(float64) should leave the integer counter int64"
assert bn_meta.num_batches_tracked.is_meta, "a device move should take the integer counter along"
assert int_error is not None and "floating point" in int_error, ".to(an integer dtype) should be refused"

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
    print(f"{type(model).__name__} {list(model.state_dict())}")
print(f"Sequential output: {tuple(seq(x).shape)}")
print(f"Residual output:   {tuple(Residual()(x).shape)}")
print(f'MultiHead outputs: {tuple(MultiHead()(x, "classify").shape)} {tuple(MultiHead()(x, "regress").shape)}')
assert list(seq.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"], "Sequential numbers its layers"
assert len(Residual().state_dict()) == 6, "ModuleList registers its 3 layers (weight and bias each)"
assert sorted(MultiHead().state_dict())[:2] == ["body.bias", "body.weight"] and len(MultiHead().state_dict()) == 6, (
    "ModuleDict registers its heads by name"
)

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
            x = layer(x).tanh()  # tanh, not ReLU: no unit can go dead, so every registered layer gets a gradient
        return self.out(x)


torch.manual_seed(SEED)
broken = ListNet()
print(f"forward works, output shape: {tuple(broken(x).shape)}")

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
    print(f"1. parameters(): {[n for n, _ in model.named_parameters()]}")
    before = [layer.weight.detach().clone() for layer in hidden]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(x).pow(2).mean().backward()
    opt.step()
    changed = [not torch.equal(b, layer.weight) for b, layer in zip(before, hidden)]
    print(f"2. hidden weights changed by opt.step(): {changed}")
    model.to(torch.float64)
    dtypes = [layer.weight.dtype for layer in hidden]
    print(f"3. after .to(float64): hidden dtypes {[str(d) for d in dtypes]}")
    print(f"4. state_dict(): {list(model.state_dict())}")
    model.to(torch.float32)
    return changed, dtypes


broken_changed, broken_dtypes = audit(broken, x)

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
            x = layer(x).tanh()
        return self.out(x)


torch.manual_seed(SEED)
fixed = FixedNet()
fixed_changed, fixed_dtypes = audit(fixed, x)

# %%
assert len(list(broken.parameters())) == 2, "the list-based model should expose only out.weight and out.bias"
assert len(list(fixed.parameters())) == 8, "with ModuleList, 3 hidden layers x 2 tensors + 2 output tensors = 8"
assert not any(broken_changed) and all(fixed_changed), "only registered layers should be updated by the optimizer"
assert set(broken_dtypes) == {torch.float32} and set(fixed_dtypes) == {torch.float64}, ".to() should reach registered layers only"
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
loaded = clone.load_state_dict(net.state_dict())
print(loaded)
net.eval()
clone.eval()
print(f"same outputs: {torch.equal(net(x), clone(x))}")
assert not loaded.missing_keys and not loaded.unexpected_keys and torch.equal(net(x), clone(x)), "the copy should match"

# %% [markdown]
# By default loading is **strict**: every key the model expects must be
# present, and no extra key is allowed. A mismatch raises a `RuntimeError`
# that lists the missing and unexpected keys, which is the usual sign that the
# architecture changed, or that the checkpoint was saved from a wrapper (for
# instance DDP adds a `module.` prefix to every name, chapter 25).

# %%
other = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))  # no BatchNorm: layer indices shift
strict_error = ""
try:
    other.load_state_dict(net.state_dict())
except RuntimeError as err:
    strict_error = f"{type(err).__name__}: {err}"
    print(strict_error)
assert "Missing key(s)" in strict_error and "Unexpected key(s)" in strict_error, "strict loading should list both"

# %% [markdown]
# `strict=False` loads whatever matches by name and returns the lists instead
# of raising. It is meant for deliberate partial loading (a pretrained body
# with a new head, as in transfer learning, chapter 13). Shapes are always
# checked: a name that matches with a different shape is an error even with
# `strict=False`.

# %%
# NBVAL_CHECK_OUTPUT
result = other.load_state_dict(net.state_dict(), strict=False)
print(f"missing:    {result.missing_keys}")
print(f"unexpected: {result.unexpected_keys}")
shape_error = ""
try:
    nn.Linear(3, 2).load_state_dict(nn.Linear(4, 2).state_dict(), strict=False)
except RuntimeError as err:
    shape_error = f"{type(err).__name__}: {err}"
    print(shape_error)
assert result.missing_keys and result.unexpected_keys, "strict=False should return what did not match"
assert "size mismatch" in shape_error, "a shape mismatch should raise even with strict=False"

# %% [markdown]
# Read the returned lists: with `strict=False` a complete mismatch also
# "succeeds", loading nothing. Here every name of the checkpoint carries a
# `module.` prefix, which is what a model saved from inside a
# `DistributedDataParallel` wrapper looks like (chapter 25):

# %%
# NBVAL_CHECK_OUTPUT
target = nn.Linear(4, 2)
target_before = copy.deepcopy(target.state_dict())
prefixed = {"module." + k: v for k, v in nn.Linear(4, 2).state_dict().items()}
mismatch = target.load_state_dict(prefixed, strict=False)
print(f"missing:    {mismatch.missing_keys}")
print(f"unexpected: {mismatch.unexpected_keys}")
changed_by_load = [k for k, v in target.state_dict().items() if not torch.equal(v, target_before[k])]
print(f"tensors changed by the load: {changed_by_load}")
assert mismatch.missing_keys == ["weight", "bias"] and not changed_by_load, "a complete mismatch should load nothing"

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
print(f'state_dict() taken earlier: {alias["bias"].item()}')
print(f'deepcopy taken earlier:     {frozen["bias"].item()}')
assert alias["bias"].data_ptr() == layer.bias.data_ptr(), "state_dict() tensors share the parameter's memory"
assert alias["bias"].item() == 42.0 and frozen["bias"].item() == 0.0, "only the deep copy keeps the old value"

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
flags = {name or "(model)": m.training for name, m in model.named_modules()}
print(f"training flags: {flags}")

model.train()
train_equal = torch.equal(model(x), model(x))
model.eval()
eval_equal = torch.equal(model(x), model(x))
print(f"flags after eval(): {set(m.training for m in model.modules())}")
print(f"two passes equal in train mode: {train_equal}")
print(f"two passes equal in eval mode:  {eval_equal}")
assert not any(m.training for m in model.modules()), "eval() should reach every submodule"
assert not train_equal, "in train mode dropout should make two passes over the same input differ"
assert eval_equal, "in eval mode two passes over the same input should be equal"

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
count_eval, mean_changed_eval = bn.num_batches_tracked.item(), not torch.equal(mean_before, bn.running_mean)
print(f"eval forward:  num_batches_tracked {count_before} -> {count_eval} | running_mean changed: {mean_changed_eval}")
model.train()
model(x)
count_train, mean_changed_train = bn.num_batches_tracked.item(), not torch.equal(mean_before, bn.running_mean)
print(f"train forward: num_batches_tracked {count_before} -> {count_train} | running_mean changed: {mean_changed_train}")

bn_only = nn.BatchNorm1d(4)
other_batch = torch.cat([x[:1], 10 * x[1:]])  # same row 0, different other rows
row0_same_train = torch.allclose(bn_only(x)[0], bn_only(other_batch)[0])
print(f"train mode, row 0 same in two different batches: {row0_same_train}")
bn_only.eval()
row0_same_eval = torch.allclose(bn_only(x)[0], bn_only(other_batch)[0])
print(f"eval mode,  row 0 same in two different batches: {row0_same_eval}")
assert count_eval == count_before and not mean_changed_eval, "an eval() forward must leave BatchNorm's buffers alone"
assert count_train == count_before + 1 and mean_changed_train, "a train() forward should update BatchNorm's buffers"
assert not row0_same_train and row0_same_eval, "only in train mode should a row depend on the rest of its batch"

# %% [markdown]
# What is `num_batches_tracked` for? It counts the training-mode forward
# passes. With the default `momentum=0.1` the running statistics are an
# exponential moving average, `running = (1 - momentum) * running + momentum * batch`,
# and the counter is only bookkeeping. With `momentum=None`, BatchNorm uses the
# counter instead: the factor becomes `1 / num_batches_tracked`, which makes
# the running mean the plain **cumulative average** of all the batch means so
# far (and the running variance that of the unbiased batch variances). Three
# batches with different means:

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(SEED)
batches = [torch.randn(BATCH, 4) + shift for shift in (0.0, 2.0, 4.0)]
bn_ema, bn_cumulative = nn.BatchNorm1d(4, affine=False), nn.BatchNorm1d(4, affine=False, momentum=None)
for batch in batches:
    bn_ema(batch)
    bn_cumulative(batch)
batch_means = torch.stack([batch.mean(0) for batch in batches])
batch_vars = torch.stack([batch.var(0, unbiased=True) for batch in batches])
ema = torch.zeros(4)
for mean in batch_means:
    ema = 0.9 * ema + 0.1 * mean
print(f"num_batches_tracked: {bn_cumulative.num_batches_tracked.item()}")
print(f"momentum=None, running_mean: {[round(v, 3) for v in bn_cumulative.running_mean.tolist()]}")
print(f"mean of the 3 batch means:   {[round(v, 3) for v in batch_means.mean(0).tolist()]}")
print(f"momentum=0.1,  running_mean: {[round(v, 3) for v in bn_ema.running_mean.tolist()]}")
assert bn_cumulative.num_batches_tracked.item() == len(batches), "the counter should count the training forwards"
assert torch.allclose(bn_cumulative.running_mean, batch_means.mean(0), atol=1e-5), "momentum=None: a cumulative average"
assert torch.allclose(bn_cumulative.running_var, batch_vars.mean(0), atol=1e-5), "momentum=None: average of unbiased vars"
assert torch.allclose(bn_ema.running_mean, ema, atol=1e-5), "momentum=0.1: an exponential moving average from 0"

# %% [markdown]
# Note what `eval()` does **not** do: it does not turn off autograd. Outputs
# still require grad and still build a graph. For evaluation you want both,
# `model.eval()` for the layers and `torch.no_grad()` (or `inference_mode()`)
# for autograd, which is exactly what `helpers.training.evaluate` does.

# %%
# NBVAL_CHECK_OUTPUT
model.eval()
grad_after_eval = model(x).requires_grad
print(f"eval() only:           requires_grad = {grad_after_eval}")
with torch.no_grad():
    grad_under_no_grad = model(x).requires_grad
print(f"eval() + no_grad():    requires_grad = {grad_under_no_grad}")
assert grad_after_eval and not grad_under_no_grad, "eval() leaves autograd on; no_grad() turns it off"

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
n_recorded = len(shapes)

for h in handles:
    h.remove()
shapes.clear()
model(x)
print(f"after remove(): {shapes}")
assert n_recorded == len(model) and shapes == {}, "each layer's hook should fire once, and never after remove()"

# %% [markdown]
# A forward hook that **returns** something other than `None` replaces the
# module's output with it: useful on purpose, a surprise by accident (a
# `lambda` that builds a tuple of two `append` calls returns that tuple). Write
# observing hooks as functions that return nothing.

# %%
# NBVAL_CHECK_OUTPUT
relu = nn.ReLU()
handle = relu.register_forward_hook(lambda module, inputs, output: output * 0)
replaced = relu(torch.ones(3))
handle.remove()
print(f"output with a hook that returns output * 0: {replaced.tolist()} | "
      f"after remove(): {relu(torch.ones(3)).tolist()}")
assert replaced.tolist() == [0.0, 0.0, 0.0], "a hook's return value should replace the output"

# %% [markdown]
# `register_forward_pre_hook` runs before `forward` (and can change the
# inputs); `register_full_backward_hook` sees the gradients flowing through a
# module during `backward()`, and section 9 uses it.
#
# ## 8. Functional and module forms
#
# Most layers without weights exist twice: as a module in `torch.nn`
# (`nn.ReLU`, `nn.Dropout`, `nn.Softmax`) and as a function in
# `torch.nn.functional`, imported as `F` by convention (`F.relu`, `F.dropout`,
# `F.softmax`). The module's `forward` just calls the function, as the
# installed source shows:

# %%
# NBVAL_CHECK_OUTPUT
for cls in (nn.ReLU, nn.Dropout):
    body = [line.strip() for line in inspect.getsource(cls.forward).splitlines() if "return" in line]
    print(f"{cls.__name__}.forward: {body[0]}")
print("F.dropout" + str(inspect.signature(F.dropout)))

# %% [markdown]
# So the two forms compute the same numbers (for dropout, given the same
# random state), and neither has parameters:

# %%
z = torch.randn(BATCH, 16)
same_relu = torch.equal(F.relu(z), nn.ReLU()(z))
torch.manual_seed(SEED)
dropped_f = F.dropout(z, p=0.5, training=True)
torch.manual_seed(SEED)
dropped_m = nn.Dropout(p=0.5).train()(z)
same_dropout = torch.equal(dropped_f, dropped_m)
n_params = sum(p.numel() for m in (nn.ReLU(), nn.Dropout(0.5)) for p in m.parameters())
print(f"F.relu(z) equals nn.ReLU()(z):                         {same_relu}")
print(f"F.dropout(z, 0.5) equals nn.Dropout(0.5)(z), same seed: {same_dropout} "
      f"({(dropped_f == 0).float().mean().item():.0%} of the entries dropped)")
print(f"parameters in nn.ReLU() and nn.Dropout(0.5): {n_params}")
assert same_relu and same_dropout, "the module and functional forms should compute the same numbers"
assert (dropped_f == 0).any() and not torch.equal(dropped_f, z), "dropout should really have dropped something"
assert n_params == 0, "stateless layers have no parameters"

# %% [markdown]
# The difference is what the surrounding `nn.Module` can see. A module form is
# registered: it appears in `print(model)` and `named_modules()`, it can carry
# a hook (section 7), and `train()`/`eval()` reach it, because it reads its
# own `self.training`. A function knows only what you pass it, and
# `F.dropout`'s `training` argument **defaults to `True`**. Three versions of
# the same block:

# %%
class ModuleForm(nn.Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.act = nn.ReLU()
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return self.drop(self.act(self.fc(x)))


class FunctionalForm(nn.Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.p = p

    def forward(self, x):
        return F.dropout(F.relu(self.fc(x)), self.p)  # the bug: training=True by default


class FunctionalFixed(FunctionalForm):
    def forward(self, x):
        return F.dropout(F.relu(self.fc(x)), self.p, training=self.training)  # the fix


torch.manual_seed(SEED)
blocks = {"nn.ReLU, nn.Dropout": ModuleForm(), "F.dropout(h, p)": FunctionalForm(), "F.dropout(h, p, self.training)": FunctionalFixed()}
for block in blocks.values():
    block.load_state_dict(blocks["nn.ReLU, nn.Dropout"].state_dict())  # same names, same weights
print(blocks["nn.ReLU, nn.Dropout"])
print(blocks["F.dropout(h, p)"])
for label, block in blocks.items():
    names, count = [n for n, _ in block.named_modules()], sum(p.numel() for p in block.parameters())
    print(f"{label:31s} named_modules: {names}  parameters: {count}")

# %% [markdown]
# Now each block in training and in evaluation mode, on a batch large enough
# for the fractions to be precise. We count the share of the positive ReLU
# outputs that come out as zero, that is, what dropout removed:

# %%
z_big = torch.randn(1024, 16)


def dropped_share(block, x):
    """Share of the positive ReLU outputs of block.fc(x) that the block's output sets to zero."""
    with torch.no_grad():
        kept = F.relu(block.fc(x))
        out = block(x)
    positive = kept > 0
    return (out[positive] == 0).float().mean().item(), out, kept


dropped = {}
for label, block in blocks.items():
    share_train, _, _ = dropped_share(block.train(), z_big)
    share_eval, out_eval, kept_eval = dropped_share(block.eval(), z_big)
    dropped[label] = (share_train, share_eval)
    print(f"{label:31s} dropped in train(): {share_train:.0%}   in eval(): {share_eval:.0%}")
    if label == "F.dropout(h, p)":
        survivors = out_eval != 0
        scaled_by_2 = torch.allclose(out_eval[survivors], 2 * kept_eval[survivors])
print(f"in eval(), the survivors of the buggy block are still scaled by 1/(1-p) = 2: {scaled_by_2}")
buggy = blocks["F.dropout(h, p)"].eval()
with torch.no_grad():
    buggy_repeatable = torch.equal(buggy(z_big), buggy(z_big))
print(f"two eval() passes of the buggy block give the same output: {buggy_repeatable}")

# %%
for label, (share_train, _) in dropped.items():
    assert 0.4 < share_train < 0.6, f"{label}: dropout with p=0.5 should drop about half in train(), got {share_train:.2f}"
assert dropped["nn.ReLU, nn.Dropout"][1] == 0 and dropped["F.dropout(h, p, self.training)"][1] == 0, (
    "the module form and the fixed functional form should not drop anything in eval()"
)
assert 0.4 < dropped["F.dropout(h, p)"][1] < 0.6 and scaled_by_2, "F.dropout(h, p) should keep dropping in eval()"
assert not buggy_repeatable, "the buggy block's eval() output should change from call to call"

# %% [markdown]
# `eval()` set `training = False` on all three blocks, but the buggy one never
# reads it: it still drops about half of its units (and doubles the rest) at
# evaluation time, so its test predictions are noisy and differ from call to
# call. Nothing raises. The rule of thumb: stateless, mode-independent
# functions (`F.relu`, `F.softmax`, `F.cross_entropy`) are fine, and common,
# inside `forward`; anything with parameters or with train/eval behaviour is
# clearer as a module, and if you do call `F.dropout`, pass
# `training=self.training`.
#
# ## 9. Weight initialisation
#
# Every layer starts from random weights, and their **scale** decides whether
# a deep network can train at all. A `Linear` layer computes
# $z_i = \sum_j W_{ij} h_j$ over its `fan_in` inputs. With independent
# weights of mean 0 and variance $\sigma^2$ (and zero bias),
# $\operatorname{Var}(z_i) = \text{fan\_in}\,\sigma^2\,\mathbb{E}[h_j^2]$, and
# ReLU keeps the positive half of a symmetric $z$, so
# $\mathbb{E}[\mathrm{relu}(z)^2] = \operatorname{Var}(z)/2$. Each
# `Linear + ReLU` therefore multiplies the scale of the activations (their
# root mean square, and with it their standard deviation) by
#
# $$\sqrt{\text{fan\_in}\,\sigma^2 / 2}.$$
#
# In the experiment below, with `DEPTH` layers, a factor of 0.5 per layer
# shrinks the signal from the first layer to the last $2^{\text{DEPTH} - 1}$
# times and a factor of 2 blows it up as much (the cell below prints these
# numbers for the current `DEPTH`). The backward pass multiplies
# the gradient by the transposed weights at every layer, with the same factor
# (`fan_out` in place of `fan_in`; here the two are equal): vanishing and
# exploding gradients. Two standard choices keep the factor at 1:
#
# - **Kaiming (He) initialisation** for ReLU: $\sigma^2 = 2/\text{fan\_in}$
#   (He, Zhang, Ren and Sun, "Delving Deep into Rectifiers", ICCV 2015,
#   arXiv:1502.01852).
# - **Xavier (Glorot) initialisation** for tanh, which is close to the
#   identity near 0: $\sigma^2 = 2/(\text{fan\_in} + \text{fan\_out})$, a
#   compromise between the forward and the backward pass (Glorot and Bengio,
#   "Understanding the difficulty of training deep feedforward neural
#   networks", AISTATS 2010). PyTorch multiplies it by a `gain`;
#   `nn.init.calculate_gain("tanh")` is its recommended $5/3$.
#
# The experiment of this section checks these predictions for a stack of
# `DEPTH` layers of width `WIDTH`. First, the parameter ranges over which its
# checks were tried; outside them the predictions need not hold:

# %%
# each assert names the parameters that are out of range, and why the predictions need them
assert 64 <= WIDTH <= 512 and STAT_BATCH >= 32, f"section 9 supports WIDTH 64..512 and STAT_BATCH >= 32, got {WIDTH}, {STAT_BATCH}"
assert DEPTH >= 10, f"section 9 needs DEPTH >= 10, so that the default init's activations can level off; got {DEPTH}"
assert DEPTH <= WIDTH // 6, (
    f"DEPTH={DEPTH} is too deep for WIDTH={WIDTH}: the random scatter of section 9's measured ratios around their "
    f"predictions grows with DEPTH / WIDTH, and beyond WIDTH // 6 = {WIDTH // 6} the SCALE_BAND checks can fail by chance"
)
assert math.sqrt(WIDTH / 2) ** DEPTH < torch.finfo(torch.float32).max / 10, (
    f"DEPTH={DEPTH} is too deep for WIDTH={WIDTH}: N(0, 1²) weights multiply the activations by about "
    f"sqrt(WIDTH/2) = {math.sqrt(WIDTH / 2):.1f} per layer, and {DEPTH} layers would overflow float32"
)
assert (0.01 * math.sqrt(WIDTH / 2)) ** DEPTH > torch.finfo(torch.float32).tiny, (
    f"DEPTH={DEPTH} is too deep for WIDTH={WIDTH}: N(0, 0.01²) weights multiply the activations by about "
    f"0.01 sqrt(WIDTH/2) = {0.01 * math.sqrt(WIDTH / 2):.3f} per layer, and {DEPTH} layers would underflow float32"
)
print(f"over the {DEPTH - 1} steps from layer 1 to layer {DEPTH}: a factor 0.5 per layer gives "
      f"0.5^{DEPTH - 1} = {0.5 ** (DEPTH - 1):.1e} (a factor 2 gives {2.0 ** (DEPTH - 1):.1e})")

# %% [markdown]
# **What PyTorch does by default.** `nn.Linear.reset_parameters`, which the
# constructor calls, reads (installed torch source):

# %%
# NBVAL_CHECK_OUTPUT
source = inspect.getsource(nn.Linear.reset_parameters)
print("\n".join(line.strip() for line in source.splitlines() if "init." in line))
a = math.sqrt(5)
gain = nn.init.calculate_gain("leaky_relu", a)  # sqrt(2 / (1 + a**2)) = sqrt(1/3)
bound = gain * math.sqrt(3 / WIDTH)  # kaiming_uniform_ draws U(-bound, bound), bound = gain * sqrt(3 / fan_in)
print(f"gain = {gain:.6f} = sqrt(1/3) = {math.sqrt(1 / 3):.6f}")
print(f"bound for fan_in = {WIDTH}: {bound:.6f} = 1/sqrt(fan_in) = {1 / math.sqrt(WIDTH):.6f}")
print(f"calculate_gain('relu') = {nn.init.calculate_gain('relu'):.6f} = sqrt(2), "
      f"calculate_gain('tanh') = {nn.init.calculate_gain('tanh'):.6f} = 5/3")
assert math.isclose(nn.init.calculate_gain("tanh"), 5 / 3) and math.isclose(nn.init.calculate_gain("relu"), math.sqrt(2)), (
    "calculate_gain should give 5/3 for tanh and sqrt(2) for ReLU"
)
assert math.isclose(gain, math.sqrt(1 / 3)), "calculate_gain('leaky_relu', sqrt(5)) should be sqrt(2 / (1 + 5)) = sqrt(1/3)"

# %% [markdown]
# `kaiming_uniform_` with `a = sqrt(5)` is a roundabout way of writing
# $U(-1/\sqrt{\text{fan\_in}},\ 1/\sqrt{\text{fan\_in}})$, the rule older
# versions of PyTorch wrote out directly and keep for backward compatibility
# (see pytorch/pytorch issues 1667 and 57109); the bias is drawn from the same
# range. Drawing that uniform by hand from the same seed gives the same
# weights. Its variance is $\text{bound}^2/3 = 1/(3\,\text{fan\_in})$, a sixth
# of Kaiming's $2/\text{fan\_in}$, so the factor above is
# $\sqrt{1/6} \approx 0.41$ per `Linear + ReLU` of equal widths and zero
# biases; over the `DEPTH` layers of the experiment below to
# $0.41^{\text{DEPTH} - 1}$ (the next cell prints it for the current
# `DEPTH`), which the experiment checks against its measured gradients. `nn.Conv2d` uses the same rule, with
# $\text{fan\_in} = \text{in\_channels} \times \text{kernel height} \times \text{kernel width}$.

# %%
torch.manual_seed(SEED)
default_linear = nn.Linear(WIDTH, WIDTH)
torch.manual_seed(SEED)
by_hand = torch.empty(WIDTH, WIDTH).uniform_(-1 / math.sqrt(WIDTH), 1 / math.sqrt(WIDTH))
same_draw = torch.allclose(default_linear.weight, by_hand, rtol=1e-6, atol=0.0)
default_std = default_linear.weight.std().item()
print(f"nn.Linear's weight equals uniform_(-1/sqrt(fan_in), 1/sqrt(fan_in)) from the same seed: {same_draw}")
print(f"std of the default weights {default_std:.4f}: 1/sqrt(3 fan_in) = {1 / math.sqrt(3 * WIDTH):.4f}, "
      f"Kaiming's sqrt(2/fan_in) = {math.sqrt(2 / WIDTH):.4f}")
print(f"predicted shrink of the default init + ReLU over {DEPTH} layers: sqrt(1/6)^{DEPTH - 1} = "
      f"{math.sqrt(1 / 6) ** (DEPTH - 1):.1e}")
assert same_draw, "nn.Linear's default weight should be U(-1/sqrt(fan_in), 1/sqrt(fan_in))"
assert default_linear.bias.abs().max() <= 1 / math.sqrt(WIDTH), "the default bias should lie in the same range"
assert abs(default_std * math.sqrt(3 * WIDTH) - 1) < 0.02, f"default weight std {default_std:.4f} should be 1/sqrt(3 fan_in)"
conv = nn.Conv2d(16, 32, kernel_size=3)  # fan_in = 16 * 3 * 3 = 144
conv_bound = 1 / math.sqrt(16 * 3 * 3)
print(f"Conv2d(16, 32, 3): largest |weight| {conv.weight.abs().max().item():.4f} <= 1/sqrt(144) = {conv_bound:.4f}, "
      f"std {conv.weight.std().item():.4f} vs 1/sqrt(3 * 144) = {conv_bound / math.sqrt(3):.4f}")
assert conv.weight.abs().max() <= conv_bound and abs(conv.weight.std().item() / (conv_bound / math.sqrt(3)) - 1) < 0.05, (
    "Conv2d's default should be U(-1/sqrt(fan_in), 1/sqrt(fan_in)) too"
)

# %% [markdown]
# **`torch.nn.init` and `model.apply`.** The functions in `torch.nn.init`
# fill a tensor in place (hence the trailing underscore) and run under
# `torch.no_grad()` internally, so they work directly on parameters and do
# not enter the autograd graph: `normal_(w, mean, std)`, `uniform_(w, a, b)`,
# `zeros_(w)`, `kaiming_normal_(w, mode="fan_in", nonlinearity="relu")` and
# `kaiming_uniform_` (same variance, uniform shape), `xavier_uniform_(w, gain)`
# and `xavier_normal_`. To initialise a whole model, write a function of one
# module that picks the layers it wants by type, and pass it to
# `model.apply(fn)`, which calls `fn` on every submodule, at every depth, then
# on the model itself, and returns the model:

# %%
def linear_init(weight_init):
    """Return a function for model.apply: weight_init(weight) and zero bias on every nn.Linear."""

    def init_fn(m):
        if isinstance(m, nn.Linear):  # apply visits every module; change only the Linear layers
            weight_init(m.weight)
            if m.bias is not None:  # a Linear built with bias=False has none
                nn.init.zeros_(m.bias)

    return init_fn


def deep_stack(activation, depth=DEPTH, width=WIDTH):
    """depth x (Linear(width, width), activation()), with PyTorch's default initialisation."""
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), activation()]
    return nn.Sequential(*layers)


kaiming_relu = linear_init(lambda w: nn.init.kaiming_normal_(w, mode="fan_in", nonlinearity="relu"))

torch.manual_seed(SEED)
stack = deep_stack(nn.ReLU)
visited = []
stack.apply(lambda m: visited.append(type(m).__name__))
returned = stack.apply(kaiming_relu)
w0 = stack[0].weight
print(f"apply visited {len(visited)} modules: {visited.count('Linear')} Linear, {visited.count('ReLU')} ReLU, "
      f"and last the {visited[-1]} itself; it returned the model: {returned is stack}")
print(f"layer 0 after kaiming_normal_: weight std {w0.std().item():.4f} (sqrt(2/{WIDTH}) = {math.sqrt(2 / WIDTH):.4f}), "
      f"bias all zero: {bool((stack[0].bias == 0).all())}")
print(f"still a trainable leaf: {w0.requires_grad and w0.is_leaf} | grad_fn: {w0.grad_fn}")
assert len(visited) == len(list(stack.modules())) == 2 * DEPTH + 1 and visited[-1] == "Sequential", "apply visits all"
assert abs(w0.std().item() * math.sqrt(WIDTH / 2) - 1) < 0.02, "kaiming_normal_ should give std sqrt(2/fan_in)"
assert all((m.bias == 0).all() for m in stack if isinstance(m, nn.Linear)), "every bias should be zero"
assert w0.is_leaf and w0.requires_grad and w0.grad_fn is None, "nn.init should not put the weight into a graph"

# %% [markdown]
# **Activations and gradients through depth.** The experiment: a stack of
# `DEPTH` layers `Linear(WIDTH, WIDTH)` (25 layers of width 256 with the
# defaults), each followed by ReLU (or, in a second stack, tanh), a batch of
# `STAT_BATCH` random inputs (64 by default), and four
# initialisations: $N(0, 0.01^2)$ and $N(0, 1^2)$ (normal distributions
# written with their variance, so standard deviations 0.01 and 1; the labels
# below write them the same way), the scheme made for the
# activation (Kaiming for ReLU, Xavier with gain 5/3 for tanh), and PyTorch's
# default. Forward hooks (section 7) record the standard deviation of every
# activation layer's output, and full backward hooks the standard deviation of
# the gradient that reaches it. The backward pass starts from the same random
# gradient for every model, so only the weights differ. The table's two ratio
# columns each follow the direction the signal travels: for the activations
# the last layer over the first (**last/first**), for the gradient, which
# flows backward, the first layer over the last (**first/last**). Below 1 the
# signal vanishes, above 1 it explodes.

# %%
def scale_profile(model, x, upstream):
    """Std per activation layer of its output (forward) and of the gradient reaching it (backward).

    Returns (forward_std, backward_std, output): two float64 tensors [number of activation
    layers], first layer first, and the model's output. The backward pass starts from `upstream`.
    """
    forward_std, backward_std = [], []

    def on_forward(module, inputs, output):
        forward_std.append(output.double().std().item())

    def on_backward(module, grad_input, grad_output):
        backward_std.append(grad_output[0].double().std().item())

    acts = [m for m in model if not isinstance(m, nn.Linear)]
    handles = [m.register_forward_hook(on_forward) for m in acts]
    handles += [m.register_full_backward_hook(on_backward) for m in acts]
    try:
        out = model(x)
        out.backward(upstream)
    finally:
        for h in handles:
            h.remove()
    # backward visits the last layer first
    return torch.tensor(forward_std, dtype=torch.float64), torch.tensor(backward_std[::-1], dtype=torch.float64), out.detach()


ACTIVATIONS = {"ReLU": nn.ReLU, "tanh": nn.Tanh}
WEIGHT_INITS = {  # per activation: name -> what to do to each weight (None: keep PyTorch's default)
    "ReLU": {
        "N(0, 0.01²)": lambda w: nn.init.normal_(w, mean=0.0, std=0.01),
        "N(0, 1²)": lambda w: nn.init.normal_(w, mean=0.0, std=1.0),
        "Kaiming": lambda w: nn.init.kaiming_normal_(w, mode="fan_in", nonlinearity="relu"),
        "PyTorch default": None,
    },
    "tanh": {
        "N(0, 0.01²)": lambda w: nn.init.normal_(w, mean=0.0, std=0.01),
        "N(0, 1²)": lambda w: nn.init.normal_(w, mean=0.0, std=1.0),
        "Xavier, gain 5/3": lambda w: nn.init.xavier_uniform_(w, gain=nn.init.calculate_gain("tanh")),
        "PyTorch default": None,
    },
}

torch.manual_seed(SEED)
stat_x = torch.randn(STAT_BATCH, WIDTH)
upstream = torch.randn(STAT_BATCH, WIDTH)
profiles, stacks = {}, {}
for act_name, inits in WEIGHT_INITS.items():
    for init_name, weight_init in inits.items():
        torch.manual_seed(SEED)
        stack = deep_stack(ACTIVATIONS[act_name])
        if weight_init is not None:
            stack.apply(linear_init(weight_init))
        stacks[act_name, init_name] = stack  # kept for the checks below
        profiles[act_name, init_name] = scale_profile(stack, stat_x, upstream)

print(f"{'':5s} {'initialisation':16s} {'activation std: layer 1':>24s} {f'layer {DEPTH}':>9s} {'last/first':>10s}"
      f"   {'gradient std: layer 1':>22s} {f'layer {DEPTH} (= upstream)':>22s} {'first/last':>10s}   {'|tanh| > 0.99':>13s}")
for (act_name, init_name), (fwd, bwd, out) in profiles.items():
    saturated = f"{(out.abs() > 0.99).double().mean().item():13.0%}" if act_name == "tanh" else ""
    print(f"{act_name:5s} {init_name:16s} {fwd[0]:24.2g} {fwd[-1]:9.2g} {fwd[-1] / fwd[0]:10.1e}"
          f"   {bwd[0]:22.2g} {bwd[-1]:22.2g} {bwd[0] / bwd[-1]:10.1e}   {saturated}")
upstream_std = upstream.double().std().item()
print(f"(the gradient reaching layer {DEPTH} is the upstream gradient itself, std {upstream_std:.4f}, the same "
      "for every model by design: the first/last column is in effect the layer-1 gradient std over it)")
assert all(abs(bwd[-1].item() - upstream_std) < 1e-9 for _, bwd, _ in profiles.values()), (
    f"the gradient reaching layer {DEPTH} should be the shared upstream gradient in every model"
)

# %%
STYLES = {  # colour, line style, marker: lines that meet stay apart (N(0, 1²) and Xavier in the tanh forward panel)
    "N(0, 0.01²)": ("tab:blue", ":", "v"), "N(0, 1²)": ("tab:red", "--", "x"), "Kaiming": ("tab:green", "-", "o"),
    "Xavier, gain 5/3": ("tab:green", "-", "o"), "PyTorch default": ("tab:gray", "-.", "s"),
}
fig, axes = plt.subplots(2, 2, figsize=(9, 5.6), sharex=True)
layers = range(1, DEPTH + 1)
step = max(1, DEPTH // 6)
for row, act_name in enumerate(ACTIVATIONS):
    for i, init_name in enumerate(WEIGHT_INITS[act_name]):
        fwd, bwd, _ = profiles[act_name, init_name]
        colour, line, marker = STYLES[init_name]
        style = {"color": colour, "linestyle": line, "marker": marker, "markersize": 4,
                 "markevery": (i * step // 4, step), "label": init_name}
        axes[row, 0].semilogy(layers, fwd, **style)
        axes[row, 1].semilogy(layers, bwd, **style)
    axes[row, 0].set(title=f"Linear + {act_name}: forward", ylabel="std of activations")
    axes[row, 1].set(title=f"Linear + {act_name}: backward", ylabel="std of gradient at layer")
    axes[row, 0].legend(fontsize=7, loc="best")
saturated_share = (profiles["tanh", "N(0, 1²)"][2].abs() > 0.99).double().mean().item()
axes[1, 0].annotate(f"N(0, 1²): std stays near 1, but {saturated_share:.0%}\nof the last layer's units are saturated",
                    (DEPTH, profiles["tanh", "N(0, 1²)"][0][-1]), (DEPTH * 0.45, 1e-5), fontsize=8, color="tab:red",
                    arrowprops={"arrowstyle": "->", "color": "tab:red"})
for ax in axes[1]:
    ax.set_xlabel(f"layer (of {DEPTH}, width {WIDTH})")
fig.suptitle("Activation and gradient scale through depth, by initialisation (log scale)", fontsize=10)
plt.show()

# %% [markdown]
# What the table and the figure show, one line per initialisation. The cell
# below checks each line against the arithmetic at the start of this section
# (for any parameters within the ranges this section's first cell accepts)
# and prints the predicted and the measured numbers.
#
# - **$N(0, 0.01^2)$ + ReLU**: factor $0.01\sqrt{\text{fan\_in}/2}$, well below 1: activations and gradients vanish, and the first layers get essentially no gradient.
# - **$N(0, 1^2)$ + ReLU**: factor $\sqrt{\text{fan\_in}/2}$, well above 1: both explode, on their way to float32's largest value, $3.4 \times 10^{38}$.
# - **Kaiming + ReLU**: factor 1: both ratios stay within a factor `SCALE_BAND` of 1 (and the activation ratio does for `BAND_SEEDS` seeds, further down).
# - **PyTorch default + ReLU**: the gradient shrinks by $\sqrt{1/6} \approx 0.41$ per layer; the activations level off at a small constant, held there by the random biases.
# - **$N(0, 0.01^2)$ + tanh**: tanh is close to the identity for such small inputs, so the factor is $0.01\sqrt{\text{fan\_in}}$: both vanish.
# - **$N(0, 1^2)$ + tanh**: the activation std stays near 1, which looks healthy, but most units are **saturated** ($|h| > 0.99$), and the gradient explodes.
# - **Xavier (gain 5/3) + tanh**: steady activations with few saturated units; the gradient still grows, slowly.
# - **PyTorch default + tanh**: the gradient shrinks by $\sqrt{1/3} \approx 0.58$ per layer, more slowly than with ReLU but still vanishing; the activations level off, as with ReLU.
#
# Where the default's level and the tanh gradient predictions come from is
# derived in the "Going further" note after the cell.

# %%
def ratio(act_name, init_name):
    """(last / first activation std, first / last gradient std) for one stack."""
    fwd, bwd, _ = profiles[act_name, init_name]
    return (fwd[-1] / fwd[0]).item(), (bwd[0] / bwd[-1]).item()


def near(measured, predicted):
    """True when measured is within a factor SCALE_BAND of predicted."""
    return 1 / SCALE_BAND < measured / predicted < SCALE_BAND


def tanh_gradient_prediction(init_name):
    """Predicted first / last gradient std of a tanh stack: the product, over layers 2..DEPTH, of
    std(weight) * sqrt(fan_out) * rms(1 - h**2), with h that layer's tanh output on stat_x."""
    stack, derivative_rms = stacks["tanh", init_name], []

    def on_forward(module, inputs, output):
        derivative_rms.append((1 - output.double() ** 2).pow(2).mean().sqrt().item())

    handles = [m.register_forward_hook(on_forward) for m in stack if isinstance(m, nn.Tanh)]
    try:
        with torch.no_grad():
            stack(stat_x)
    finally:
        for h in handles:
            h.remove()
    linears = [m for m in stack if isinstance(m, nn.Linear)]
    return math.prod(m.weight.std().item() * math.sqrt(m.out_features) * d
                     for m, d in zip(linears[1:], derivative_rms[1:]))


LEVEL_BAND = 1.5  # a levelled-off activation std must be within this factor of the bias-driven level (any WIDTH)
n = DEPTH - 1  # layer-to-layer steps between the first and the last activation layer
relu_factor = {"N(0, 0.01²)": 0.01 * math.sqrt(WIDTH / 2), "N(0, 1²)": 1.0 * math.sqrt(WIDTH / 2), "Kaiming": 1.0}
for init_name, factor in relu_factor.items():
    fwd_ratio, bwd_ratio = ratio("ReLU", init_name)
    print(f"ReLU, {init_name:11s}: predicted {factor:.3f}^{n} = {factor**n:8.1e}; "
          f"measured forward {fwd_ratio:8.1e}, backward {bwd_ratio:8.1e}")
    assert near(fwd_ratio, factor**n) and near(bwd_ratio, factor**n), (
        f"ReLU + {init_name}: activation ratio {fwd_ratio:.2e} and gradient ratio {bwd_ratio:.2e} should be within "
        f"a factor {SCALE_BAND} of sqrt(fan_in sigma^2 / 2)^{n} = {factor**n:.2e}"
    )
huge_fwd = profiles["ReLU", "N(0, 1²)"][0][-1].item()
layers_to_overflow = math.log(torch.finfo(torch.float32).max / huge_fwd) / math.log(relu_factor["N(0, 1²)"])
print(f"ReLU, N(0, 1²)   : activation std {huge_fwd:.1e} at layer {DEPTH}; float32 overflows at "
      f"{torch.finfo(torch.float32).max:.1e}, about {layers_to_overflow:.0f} more layers of x{relu_factor['N(0, 1²)']:.1f}")
default_fwd, default_bwd = ratio("ReLU", "PyTorch default")
print(f"ReLU, default    : predicted backward sqrt(1/6)^{n} = {math.sqrt(1 / 6) ** n:8.1e}; "
      f"measured forward {default_fwd:8.1e}, backward {default_bwd:8.1e}")
assert near(default_bwd, math.sqrt(1 / 6) ** n), f"default init: gradient ratio {default_bwd:.2e} vs sqrt(1/6)^{n}"
torch.manual_seed(SEED)
no_bias = deep_stack(nn.ReLU)  # the same default weights as the "PyTorch default" stack above
for m in no_bias:
    if isinstance(m, nn.Linear):
        nn.init.zeros_(m.bias)
with torch.no_grad():
    no_bias_fwd = (no_bias(stat_x).std() / no_bias[:2](stat_x).std()).item()
print(f"ReLU, default weights, zero biases: measured forward {no_bias_fwd:8.1e}")
assert near(no_bias_fwd, math.sqrt(1 / 6) ** n), "without biases the default's activations should shrink like sqrt(1/6)^(DEPTH-1)"
assert default_fwd > SCALE_BAND * math.sqrt(1 / 6) ** n, (
    f"default init + ReLU: with biases the activations (x{default_fwd:.1e}) should not follow sqrt(1/6)^{n}"
)
default_acts = profiles["ReLU", "PyTorch default"][0]
mid = DEPTH // 2
default_mid, default_last = default_acts[mid - 1].item(), default_acts[-1].item()
relu_level = math.sqrt(2 / (5 * WIDTH) * (1 / 2 - 1 / (2 * math.pi)))  # sqrt(q* (1/2 - 1/(2 pi))), q* = 2/(5 fan_in)
print(f"ReLU, default, with biases: activation std {default_mid:.4f} at layer {mid}, {default_last:.4f} at layer "
      f"{DEPTH}; predicted level sqrt(2/(5 fan_in) (1/2 - 1/(2 pi))) = {relu_level:.4f}")
assert all(1 / LEVEL_BAND < level / relu_level < LEVEL_BAND for level in (default_mid, default_last)), (
    f"default init + ReLU: the activations at layers {mid} and {DEPTH} ({default_mid:.4f}, {default_last:.4f}) should "
    f"have levelled off within a factor {LEVEL_BAND} of the bias-driven level {relu_level:.4f}"
)

saturated_large = (profiles["tanh", "N(0, 1²)"][2].abs() > 0.99).double().mean().item()
saturated_xavier = (profiles["tanh", "Xavier, gain 5/3"][2].abs() > 0.99).double().mean().item()
tanh_large_fwd, tanh_large_bwd = ratio("tanh", "N(0, 1²)")
tanh_large_last = profiles["tanh", "N(0, 1²)"][0][-1].item()
xavier_fwd, xavier_bwd = ratio("tanh", "Xavier, gain 5/3")
xavier_growth = xavier_bwd ** (1 / n)
tanh_predicted = {init_name: tanh_gradient_prediction(init_name) for init_name in WEIGHT_INITS["tanh"]}
for init_name, predicted in tanh_predicted.items():
    measured = ratio("tanh", init_name)[1]
    print(f"tanh, {init_name:16s}: gradient first/last predicted from rms(1 - h^2) {predicted:8.1e} "
          f"(x{predicted ** (1 / n):.3f} per layer), measured {measured:8.1e} (x{measured ** (1 / n):.3f} per layer)")
    assert near(measured, predicted), (
        f"tanh + {init_name}: the gradient ratio {measured:.2e} should follow the product of "
        f"std(W) sqrt(fan_out) rms(1 - h^2) over the layers, {predicted:.2e}"
    )
tanh_small_fwd, tanh_small_bwd = ratio("tanh", "N(0, 0.01²)")  # tanh(z) ~ z near 0: factor sigma * sqrt(fan_in)
print(f"tanh, N(0, 0.01²): predicted {0.01 * math.sqrt(WIDTH):.3f}^{n} = {(0.01 * math.sqrt(WIDTH)) ** n:8.1e}; "
      f"measured forward {tanh_small_fwd:8.1e}, backward {tanh_small_bwd:8.1e}")
assert near(tanh_small_fwd, (0.01 * math.sqrt(WIDTH)) ** n) and near(tanh_small_bwd, (0.01 * math.sqrt(WIDTH)) ** n), (
    "tanh with N(0, 0.01²): activations and gradients should shrink like (0.01 sqrt(fan_in))^(DEPTH-1)"
)
print(f"tanh, N(0, 1²): activation std {tanh_large_last:.2f} at layer {DEPTH} (x{tanh_large_fwd:.2f} from layer 1), "
      f"{saturated_large:.0%} of the last layer's units saturated, gradient x{tanh_large_bwd ** (1 / n):.2f} per layer")
print(f"tanh, Xavier : {saturated_xavier:.0%} saturated, activations x{xavier_fwd:.2f} over {DEPTH} layers; "
      f"the gradient grows by x{xavier_growth:.3f} per layer, about {xavier_growth - 1:.0%}, or x{xavier_bwd:.1f} "
      f"over the {n} steps from layer {DEPTH} back to layer 1")
assert tanh_large_last > 0.8 and abs(tanh_large_fwd - 1) < 0.2, (
    f"tanh with N(0, 1²): the activation std should stay near 1 (got {tanh_large_last:.2f}, x{tanh_large_fwd:.2f})"
)
assert saturated_large > 0.5, f"tanh with N(0, 1²): most last-layer units should be saturated, got {saturated_large:.0%}"
assert saturated_xavier < 0.1 and near(xavier_fwd, 1.0), "tanh with Xavier: few saturated units, roughly constant scale"
assert 1.05 < xavier_growth < 1.15, (
    f"tanh with Xavier: the gradient should grow by about 5 to 15% per layer, got x{xavier_growth:.3f}"
)
assert tanh_large_bwd > SCALE_BAND * xavier_bwd, (
    f"tanh: the gradient should grow far more with N(0, 1²) (x{tanh_large_bwd:.1e}) than with Xavier (x{xavier_bwd:.1f})"
)
tanh_default_fwd, tanh_default_bwd = ratio("tanh", "PyTorch default")  # variance 1/(3 fan_in): sqrt(1/3)
tanh_default_last = profiles["tanh", "PyTorch default"][0][-1].item()
tanh_level = math.sqrt(1 / (2 * WIDTH))  # q* = 1/(2 fan_in), tanh close to the identity there
print(f"tanh, default   : predicted backward sqrt(1/3)^{n} = {math.sqrt(1 / 3) ** n:8.1e}; measured backward "
      f"{tanh_default_bwd:8.1e}, forward {tanh_default_fwd:8.1e}; activation std {tanh_default_last:.4f} at layer "
      f"{DEPTH}, predicted level sqrt(1/(2 fan_in)) = {tanh_level:.4f}")
assert near(tanh_default_bwd, math.sqrt(1 / 3) ** n), (
    f"tanh with the default init: the gradient ratio {tanh_default_bwd:.2e} should follow sqrt(1/3)^{n}"
)
assert tanh_default_fwd > SCALE_BAND * math.sqrt(1 / 3) ** n, (
    f"tanh with the default init: with biases the activations (x{tanh_default_fwd:.1e}) should not follow sqrt(1/3)^{n}"
)
assert 1 / LEVEL_BAND < tanh_default_last / tanh_level < LEVEL_BAND, (
    f"tanh with the default init: the last activation std {tanh_default_last:.4f} should have levelled off within "
    f"a factor {LEVEL_BAND} of the bias-driven level {tanh_level:.4f}"
)

# %% [markdown]
# Xavier with gain 5/3 keeps tanh's *activations* at a steady scale, not
# exactly its gradients: the cell printed by how much they grow per layer and
# over the whole stack, and checks that it is between 5 and 15% per layer,
# in line with the $\operatorname{rms}(1 - h^2)$ prediction. That is mild next
# to $N(0, 1^2)$'s explosion and the vanishing rows, but not flat.
#
# *Going further: the derivations behind the checks.*
#
# - **The default's activations with ReLU.** With the same weights and zero
#   biases the activations do shrink by 0.41 per layer (the cell measures that
#   on a copy of the stack with zeroed biases). But every layer adds its random
#   bias, drawn from $U(\pm 1/\sqrt{\text{fan\_in}})$, of variance
#   $1/(3\,\text{fan\_in})$. The variance $q$ of a layer's input to ReLU then
#   follows $q \leftarrow q/6 + 1/(3\,\text{fan\_in})$ (the weights carry
#   $\text{fan\_in} \cdot \frac{1}{3\,\text{fan\_in}} \cdot \frac{q}{2}$ from the previous layer)
#   and settles where the two balance, at $q^* = 2/(5\,\text{fan\_in})$. ReLU
#   turns that into an output standard deviation of
#   $\sqrt{q^*\,(1/2 - 1/(2\pi))}$, the standard deviation of the positive part
#   of a normal variable. The cell checks the middle and the last layer
#   against it, within a factor `LEVEL_BAND`.
# - **The default's activations with tanh.** With tanh close to the identity,
#   $q \leftarrow q/3 + 1/(3\,\text{fan\_in})$ settles at
#   $q^* = 1/(2\,\text{fan\_in})$, an output standard deviation of about
#   $\sqrt{q^*}$.
# - **Gradients through tanh.** tanh passes the gradient on multiplied by its
#   derivative, $\tanh'(z) = 1 - \tanh(z)^2 = 1 - h^2$ for an output $h$:
#   close to 1 for small outputs, close to 0 for saturated ones. So each
#   `Linear + tanh` multiplies the gradient by
#   $\sigma\sqrt{\text{fan\_out}} \times \operatorname{rms}(1 - h^2)$, the root
#   mean square taken over that layer's outputs; `tanh_gradient_prediction`
#   computes this product from the recorded outputs of each tanh stack. For
#   $N(0, 1^2)$, $\sigma\sqrt{\text{fan\_out}} = \sqrt{\text{fan\_out}}$ (16 for
#   width 256) is far more than saturation takes away; for Xavier it is the
#   gain, 5/3, whatever the width, and $\operatorname{rms}(1 - h^2)$ at that
#   activation scale does not bring the product all the way down to 1.

# %% [markdown]
# The Kaiming result should not depend on a lucky seed. The same stack with
# `BAND_SEEDS` draws of weights (forward pass only). The first, seed `SEED`,
# is the Kaiming stack and the input `stat_x` of the table above, so its ratio
# is the one the table printed and the chapter records; every other seed
# draws new weights and a new input.

# %%
kaiming_ratios = []
for seed in range(SEED, SEED + BAND_SEEDS):
    torch.manual_seed(seed)
    stack = deep_stack(nn.ReLU).apply(kaiming_relu)
    x_seed = stat_x if seed == SEED else torch.randn(STAT_BATCH, WIDTH)
    with torch.no_grad():
        kaiming_ratios.append((stack(x_seed).std() / stack[:2](x_seed).std()).item())
ratios_text = ", ".join(f"{r:.2f}" for r in kaiming_ratios)
print(f"Kaiming + ReLU, last/first activation std over seeds {SEED}..{SEED + BAND_SEEDS - 1}: {ratios_text}")
assert all(near(r, 1.0) for r in kaiming_ratios), f"Kaiming + ReLU should keep the scale within a factor {SCALE_BAND}"
assert math.isclose(kaiming_ratios[0], ratio("ReLU", "Kaiming")[0], rel_tol=1e-5), (
    f"seed {SEED} should rebuild the table's Kaiming stack: ratio {kaiming_ratios[0]:.4f} vs "
    f"{ratio('ReLU', 'Kaiming')[0]:.4f} in the table"
)
_ = report.record(f"activation std ratio, layer {DEPTH} / layer 1, Kaiming + ReLU", ratio("ReLU", "Kaiming")[0], digits=2)
# two significant figures of a number far below 1: round to 1 - floor(log10(x)) decimals
_ = report.record(f"gradient std ratio, layer 1 / layer {DEPTH}, PyTorch default + ReLU", default_bwd,
                  digits=1 - math.floor(math.log10(default_bwd)))

# %% [markdown]
# **Why the default matters.** Every `nn.Linear` you create starts from it
# unless you change it, and it is not Kaiming: in a plain deep ReLU stack it
# loses a factor of 0.41 per layer in the gradient. Deeper models in later
# chapters also rely on normalisation layers (BatchNorm in chapter 07's
# VGG-style network, chapter 12) and residual connections (chapter 07's
# ResNet-20), which are designed to keep activations at a workable scale. When
# you stack many plain layers yourself, initialise for the activation, as
# above: `kaiming_normal_(w, nonlinearity="relu")` before ReLU,
# `xavier_uniform_(w, gain=calculate_gain("tanh"))` before tanh.
#
# ## 10. Counting parameters
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
# has a `count_parameters(model, trainable_only=False)` for later chapters.
# Exercise 1 asks you to write it yourself, so its checker refuses the helper,
# whether you pass it or call it (`tests/test_exercises_ch03.py` checks both).

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
# ## 11. Checks

# %%
assert total == by_hand == 204_042, f"the worked example should have 784*256+256 + 2*256 + 256*10+10 = 204,042 parameters, got {total:,}"
assert in_state_dict == total + 2 * 256 + 1, "state_dict should hold the parameters plus BatchNorm's 513 buffer elements"
assert trainable == 204_042 - 200_960, f"freezing Linear(784, 256) should leave 3,082 trainable parameters, got {trainable:,}"
assert mlp_count == (784 * 512 + 512) + (512 * 256 + 256) + (256 * 10 + 10) == 535_818, "MLP count differs from the hand calculation"
assert [n for n, _ in kinds.named_buffers()] == ["running_mean", "scratch"], "both buffers should be registered"
assert "scratch" not in kinds.state_dict(), "a persistent=False buffer must not be in state_dict"
assert kinds.plain.dtype == torch.float32, ".to() must not touch a plain tensor attribute"
assert n_all == total and n_trainable == trainable, "helpers.models.count_parameters should agree with the sums above"
print("all checks passed")

# %% [markdown]
# ## 12. Pitfalls
#
# Four silent bugs are shown above, where they belong: layers in a plain list
# (section 4), a forgotten `eval()` (section 6), a bare `x.to(device)` whose
# result is thrown away (section 2) and `F.dropout` without
# `training=self.training` (section 8). Three more raise an error; here are
# their real messages.
#
# **Forgetting `super().__init__()`.** The registration machinery lives in
# `nn.Module.__init__`; assigning a submodule before it has run fails:

# %%
class NoSuper(nn.Module):
    def __init__(self):
        self.fc = nn.Linear(2, 2)  # super().__init__() was never called


no_super_error = None
try:
    NoSuper()
except AttributeError as err:
    no_super_error = f"{type(err).__name__}: {err}"
    print(no_super_error)
assert no_super_error is not None, "assigning a submodule before super().__init__() should raise"


class WithSuper(nn.Module):
    def __init__(self):
        super().__init__()  # the fix: first line of every __init__
        self.fc = nn.Linear(2, 2)


print(f"fixed: {[n for n, _ in WithSuper().named_parameters()]}")

# %% [markdown]
# **An optimizer over nothing.** If every layer is hidden in a plain list,
# `parameters()` is empty and the optimizer refuses to be built, which is the
# loud version of section 4's bug. The fix is again `nn.ModuleList`.

# %%
class AllInAList(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = [nn.Linear(2, 2), nn.Linear(2, 2)]


empty_error = None
try:
    torch.optim.SGD(AllInAList().parameters(), lr=0.1)
except ValueError as err:
    empty_error = f"{type(err).__name__}: {err}"
    print(empty_error)
assert empty_error is not None, "an optimizer over no parameters should refuse to be built"


class AllInAModuleList(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])


opt = torch.optim.SGD(AllInAModuleList().parameters(), lr=0.1)
print(f'fixed: the optimizer has {len(opt.param_groups[0]["params"])} parameter tensors')

# %% [markdown]
# **Initialising a parameter in place without `no_grad`.** A parameter is a
# leaf that requires grad, and autograd refuses an in-place change to such a
# tensor outside `torch.no_grad()`, so a hand-written `m.weight.normal_(...)`
# fails. Use `torch.nn.init` (which wraps its work in `no_grad`) or your own
# `with torch.no_grad():`.

# %%
layer = nn.Linear(4, 3)
inplace_error = None
try:
    layer.weight.normal_(0.0, 0.01)
except RuntimeError as err:
    inplace_error = f"{type(err).__name__}: {err}"
    print(inplace_error)
with torch.no_grad():
    layer.weight.normal_(0.0, 0.01)  # the fix, by hand
nn.init.normal_(layer.weight, mean=0.0, std=0.01)  # the fix, with nn.init
print(f"fixed: still a trainable leaf: {layer.weight.is_leaf and layer.weight.requires_grad}")
assert inplace_error is not None and "in-place" in inplace_error, "an in-place init outside no_grad should raise"

# %% [markdown]
# ## 13. Exercises
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
# would change them), and `forward` must compute with them as they are when
# it runs: the checker converts your module with `.to()`, loads other values
# of `mean` and `std` with `load_state_dict` (any other buffer of yours left
# as it was), and expects the output to follow.

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
# **Exercise 4: `init_for_relu(model)`.** Section 9's `linear_init` handled
# one kind of layer. Extend the idea to convolutions: for every `nn.Linear`
# **and every `nn.Conv2d`** in `model`, at any depth, draw the weight with
# Kaiming (He) initialisation for ReLU, standard deviation
# $\sqrt{2/\text{fan\_in}}$, and set the bias, where the layer has one, to
# zero. `fan_in` is the number of inputs that one output sums over:
# `in_features` for a `Linear`; for a `Conv2d` (chapter 07), whose weight has
# the shape `[out_channels, in_channels, kernel_height, kernel_width]`, each
# output value sums over a kernel-sized window of every input channel, so
# $\text{fan\_in} = \text{in\_channels} \times \text{kernel height} \times
# \text{kernel width}$, as section 9 noted. Leave every other layer alone,
# its parameters and its buffers; change the parameters in place (the checker
# looks at the model it passed you) and return that model. The checker's
# model has an `Embedding`, a `LayerNorm` and a `BatchNorm2d` (both given
# random parameters, and the BatchNorm random running statistics, so that
# resetting them shows), a `Linear` without bias, a `Conv2d` with a
# non-square kernel, and layers inside nested submodules.

# %%
def init_for_relu(model: nn.Module) -> nn.Module:
    """Kaiming (He) weights for ReLU and zero biases in every nn.Linear and nn.Conv2d of model, in place; return model."""
    raise NotImplementedError


# %%
result = check("03.init_for_relu", init_for_relu)

# %% [markdown]
# ## Summary
#
# - `nn.Module` registers what you assign to it: `nn.Parameter`s, submodules,
#   and buffers from `register_buffer`. Registration is what makes
#   `parameters()`, `.to()`, `state_dict()` and `train()`/`eval()` reach
#   everything.
# - Buffers are saved and moved but not trained; `persistent=False` keeps one
#   out of the `state_dict`. Register one with `register_buffer` or, since
#   PyTorch 2.5, by assigning an `nn.Buffer`. A plain tensor attribute gets
#   none of this. BatchNorm's `num_batches_tracked` counts training batches;
#   with `momentum=None` it turns the running statistics into cumulative
#   averages.
# - Keep layers in `nn.Sequential`, `nn.ModuleList` or `nn.ModuleDict`, never
#   in a plain list or dict (the audit above shows what a list hides).
# - `load_state_dict` is strict by default and lists missing and unexpected
#   keys; `strict=False` returns them instead. A `state_dict` shares memory
#   with the model: deep-copy it to snapshot.
# - `train()`/`eval()` switch dropout and batch norm; `eval()` does not turn
#   off autograd.
# - `Module.to()` converts the module and returns it; a dtype change casts
#   only its floating-point tensors, a device move takes them all. It keeps
#   the same Parameter objects for a dtype change (measured here) and, by the
#   same `Module._apply` rule, for a CPU/GPU move (asserted only where an
#   accelerator exists), but makes new ones for `.to("meta")` (or under
#   `torch.__future__`'s overwrite switch): build the optimizer after moving
#   the model.
#   `Tensor.to()` returns a new tensor, so write `x = x.to(device)`.
# - Forward hooks observe a model from outside; remove their handles, and
#   return nothing from an observing hook.
# - `F.relu` and `nn.ReLU` compute the same thing; only modules show up in
#   `print(model)`, take hooks and follow `train()`/`eval()`. `F.dropout`
#   needs `training=self.training`, or it keeps dropping in evaluation.
# - Initial weight scale compounds through depth: each `Linear + ReLU`
#   multiplies activations and gradients by $\sqrt{\text{fan\_in}\,\sigma^2/2}$.
#   Kaiming ($2/\text{fan\_in}$) keeps it near 1 for ReLU, forward and
#   backward. Xavier with gain 5/3 keeps tanh's activations near their scale,
#   but its gradient still grows, by roughly 10% per layer here (the check
#   accepts 5 to 15%). PyTorch's default
#   $U(\pm 1/\sqrt{\text{fan\_in}})$ shrinks the gradient by 0.41 per layer
#   with ReLU (its biases hold the activations at a small, constant level).
#   Apply an init with `model.apply(fn)` and the in-place `nn.init` functions;
#   for a convolution, `fan_in` counts the kernel window of every input channel.
# - A parameter count is simple arithmetic: `in*out + out` per Linear,
#   `2*features` per BatchNorm, buffers excluded.
#
# **Next**: chapter 04 fits a linear regression three ways, ending with
# `nn.Linear` and an optimizer fed by `model.parameters()`.

# %%
report.finish()
