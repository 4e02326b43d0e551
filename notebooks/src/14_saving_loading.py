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
# # 14 · Saving, loading and checkpoints
#
# Training takes minutes to weeks, and machines crash, jobs get pre-empted,
# laptops run out of battery. This chapter is about getting a model, and a
# whole training run, safely onto disk and back: what to save, how to load
# files you did not write without running code hidden in them, how to write
# a file so that a crash half-way cannot destroy the last good copy, and
# how to resume a run so that it continues exactly as if nothing had happened.
#
# **What you will learn**
# - `state_dict` vs pickling a whole model, and what breaks with the pickle;
# - why `torch.load(weights_only=True)`, the default since PyTorch 2.6,
#   matters: a crafted file is refused, demonstrated with a harmless payload;
#   `torch.serialization.add_safe_globals` for your own trusted types;
# - `safetensors`, the format for weights you share with other people: no
#   pickle at all, so loading cannot run code;
# - `map_location`: loading a GPU checkpoint on a CPU-only machine;
# - loading a big model without a second copy in memory: the `meta`
#   device, `torch.load(mmap=True)` and `load_state_dict(assign=True)`;
# - atomic writes (a temporary file, `fsync`, `os.replace`) and checksums;
# - a full checkpoint: model, optimizer, scheduler, `GradScaler`, step,
#   random-generator states and the data order;
# - a run interrupted and resumed that reproduces the uninterrupted run's
#   losses **exactly**, and what goes wrong when one piece is forgotten;
# - keeping the last K checkpoints, and falling back past a corrupt one
#   (`helpers.checkpoint`).
#
# **Prerequisites:** chapters 03 (`nn.Module`, `state_dict`), 05 (training
# on MNIST), 06 (DataLoader and its generator), 10 and 11 (optimizers and
# learning-rate schedulers).
#
# **Estimated time:** 50 minutes.

# %% tags=["parameters"]
TRAIN_SAMPLES = 6400  # MNIST training images used for the resume experiment
BATCH_SIZE = 64  # images per optimizer step (the last incomplete batch of an epoch is dropped)
EPOCHS = 3  # passes over TRAIN_SAMPLES
HIDDEN = (256,)  # hidden widths of the MLP (chapter 05's helpers.models.MLP)
DROPOUT = 0.2  # dropout uses the global random generator: the checkpoint must restore it
LR = 3e-3  # AdamW's peak learning rate under a one-cycle schedule
CHECKPOINT_EVERY = 30  # save a checkpoint every this many optimizer steps (and after the last)
KEEP_LAST = 3  # keep only this many newest checkpoints
CRASH_AT = 230  # the first run "crashes" just before this step (0-based); must be >= CHECKPOINT_EVERY
GROWTH_INTERVAL = 20  # GradScaler doubles its loss scale after this many steps without inf/nan (default 2000)
MIN_SKIPPED = 2  # the fp16 run should skip at least this many steps for overflowing gradients
USE_AMP = True  # fp16 autocast + GradScaler; False trains in float32 (the scaler is then disabled and its state is {})
LEAVE_OUT_STEPS = 10  # each "resume without one piece" run stops this many steps after resuming (at least 2)
BIG_WIDTH = 2048  # the model of the mmap section: two BIG_WIDTH x BIG_WIDTH linear layers (2048: 32 MiB)
SEED = 0

# %% [markdown]
# ## Setup

# %%
import copy
import dataclasses
import io
import itertools
import json
import os
import pickle
import re
import struct
import sys
import tempfile
import time
import types
import warnings
from contextlib import contextmanager, redirect_stdout
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import psutil
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from helpers.data import mnist
from helpers.device import pick_device, seed_everything
from helpers.exercises import check, solution  # noqa: F401  (solution: for when you are stuck)
from helpers.models import MLP
from helpers.paths import build_dir, rel
from helpers.report import ChapterReport

seed_everything(SEED)
device = pick_device()
report = ChapterReport("14_saving_loading")
notebook_start = time.perf_counter()
work = build_dir() / "ch14"  # everything this chapter writes goes here
work.mkdir(parents=True, exist_ok=True)
for old in work.glob("**/*"):  # a re-run starts from an empty folder
    if old.is_file():
        old.unlink()
print(f"torch {torch.__version__}, device {device}; files go to {rel(work)}/")


def kib(path):
    """Size of a file in KiB, rounded to 0.1."""
    return round(os.path.getsize(path) / 1024, 1)


def headline(err):
    """The line of a long torch.load error that says what was refused, without terminal colour codes."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err))
    return next((line.strip() for line in text.splitlines() if "WeightsUnpickler error" in line), text.splitlines()[0])


# %% [markdown]
# ## What to save: the `state_dict`
#
# A model's `state_dict()` (chapter 03) is an ordered dict from names to
# tensors: every parameter and every buffer (such as BatchNorm's running
# mean). It holds the *numbers*, not the code. `torch.save` writes it to a
# file, a zip archive with one entry per tensor storage plus a small pickle
# that says how they fit together; `torch.load` reads it back, and
# `load_state_dict` copies the numbers into a model that you built with
# your own code:

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(SEED)
model = MLP(hidden=(128,), dropout=0.0)
weights_file = work / "mlp_weights.pt"
torch.save(model.state_dict(), weights_file)

for name, tensor in model.state_dict().items():
    print(f"{name:14s} {str(tuple(tensor.shape)):11s} {tensor.dtype}")
n_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
print(f"{n_bytes:,} bytes of numbers; the file has {os.path.getsize(weights_file):,} bytes")

restored = MLP(hidden=(128,), dropout=0.0)  # new random weights...
print(restored.load_state_dict(torch.load(weights_file, weights_only=True)))  # ...replaced by the saved ones
x = torch.randn(5, 1, 28, 28)
same_outputs = torch.equal(model(x), restored(x))
print("same outputs:", same_outputs)

# %%
assert same_outputs, "a model loaded from its state_dict should compute exactly what the saved one did"

# %% [markdown]
# `load_state_dict` returned `<All keys matched successfully>`: it is
# `strict=True` by default and raises if a name is missing or unexpected
# (chapter 07 showed that error and why `strict=False` is rarely the fix).
#
# One detail of `torch.save`: it saves **storages**, the memory blocks
# behind tensors, not just the elements you see. A tensor that is a view
# (a slice, `view`, `split`) drags its whole storage into the file:

# %%
# NBVAL_CHECK_OUTPUT
big = torch.zeros(1_000_000)  # 4 MB
buffer_view, buffer_copy = io.BytesIO(), io.BytesIO()
torch.save(big[:10], buffer_view)
torch.save(big[:10].clone(), buffer_copy)
print(f"10 floats saved as a view of a 4 MB tensor: {len(buffer_view.getvalue()):,} bytes")
print(f"the same 10 floats after .clone():            {len(buffer_copy.getvalue()):,} bytes")

# %% [markdown]
# That is also why two entries that share memory stay shared after loading;
# exercise 2 uses it.
#
# ## The alternative: pickling the whole model, and what breaks
#
# `torch.save(model, path)` also works: it pickles the module object
# itself. But Python's pickle does not store a class's code, only its
# **import path**, such as `mymodels.Net`, plus the object's attributes.
# Loading imports that path again. Rename the class, move it to another
# file, or change its attributes, and old files stop loading.
#
# To show it without touching real files, we make a small module
# `course_models_v1` in memory, as if `course_models_v1.py` existed, with a
# class `Net`, and pickle a `Net`:

# %%
source = '''
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)
'''
models_v1 = types.ModuleType("course_models_v1")
exec(source, models_v1.__dict__)
sys.modules["course_models_v1"] = models_v1  # what `import course_models_v1` would do

torch.manual_seed(SEED)
net = models_v1.Net()
whole_file, net_weights_file = work / "whole_model.pt", work / "net_weights.pt"
torch.save(net, whole_file)  # the whole object
torch.save(net.state_dict(), net_weights_file)  # just the numbers
print("pickle refers to the class by:", f"{type(net).__module__}.{type(net).__qualname__}")

# %% [markdown]
# First surprise: the default `torch.load` refuses the whole-model file,
# because the class is not on its list of safe types (the next section
# explains why). With `weights_only=False` it loads, today:

# %%
try:
    torch.load(whole_file)
except pickle.UnpicklingError as err:
    print(f"{type(err).__name__}: ... {headline(err)}")
print("weights_only=False:", type(torch.load(whole_file, weights_only=False)).__name__)

# %% [markdown]
# Now a harmless refactor: the module is renamed to `course_models`, as
# happens when a project is tidied up. The file still names
# `course_models_v1`:

# %%
# NBVAL_CHECK_OUTPUT
del sys.modules["course_models_v1"]  # the old module name no longer exists
models_v2 = types.ModuleType("course_models")
exec(source, models_v2.__dict__)
sys.modules["course_models"] = models_v2

try:
    torch.load(whole_file, weights_only=False)
except ModuleNotFoundError as err:
    pickle_error = err
    print(f"{type(err).__name__}: {err}")

renamed = models_v2.Net()
print("state_dict into the renamed class:", renamed.load_state_dict(torch.load(net_weights_file, weights_only=True)))

# %%
assert isinstance(pickle_error, ModuleNotFoundError), "the whole-model pickle should fail once its module is renamed"
assert torch.equal(renamed.fc.weight, net.fc.weight), "the state_dict should load into the renamed class"

# %% [markdown]
# The state_dict file does not care where the class lives: it is just names
# and tensors, and you choose which code to load it into. That is why the
# rule is **save `state_dict()`s, never whole models**. (To ship a model
# *with* its code, use a format made for it: `torch.export` in chapter 22.)
#
# ## `weights_only=True`: loading without running code
#
# A pickle is a small program for a stack machine. Its instructions can
# import any function and call it: that is how it rebuilds objects. An
# object decides what those instructions are through its `__reduce__`
# method, which returns "call this function with these arguments". A
# crafted file can therefore run anything when it is loaded: delete files,
# open a network connection, install a back door. Model files are passed
# around the internet all the time, so this was a real attack route.
#
# Since PyTorch 2.6, `torch.load` defaults to `weights_only=True`: it
# unpickles with a restricted unpickler that only accepts tensors, plain
# containers and numbers, and a short list of torch types, and refuses
# every other import. Here is a crafted file with a harmless payload: its
# `__reduce__` asks for a call to `print`. A real attack would name
# `os.system` instead.


# %%
class Payload:
    """Pickles as 'call print(...)'; a stand-in for something nasty."""

    def __reduce__(self):
        return (print, ("!!! the payload ran: this could have been any function !!!",))


crafted_file = work / "crafted.pt"
torch.save({"weights": torch.ones(3), "surprise": Payload()}, crafted_file)

# %% [markdown]
# Before loading a file you do not trust, you can ask which imports its
# pickle needs, without running any of them:

# %%
# NBVAL_CHECK_OUTPUT
print(torch.serialization.get_unsafe_globals_in_checkpoint(crafted_file))

# %% [markdown]
# Loading it the default way. We capture everything `torch.load` prints, to
# prove that nothing ran:

# %%
# NBVAL_CHECK_OUTPUT
captured = io.StringIO()
with redirect_stdout(captured):
    try:
        torch.load(crafted_file)  # weights_only=True by default
        refused = None
    except pickle.UnpicklingError as err:
        refused = err
print(f"{type(refused).__name__}: ... {headline(refused)}")
print(f"printed during the load: {captured.getvalue()!r}")

# %% [markdown]
# Refused, and nothing printed. The full message (shown shortened here)
# also says that `weights_only=False` would work, "only if you trust the
# source". Here is what that does with our file:

# %%
captured = io.StringIO()
with redirect_stdout(captured):
    unsafe = torch.load(crafted_file, weights_only=False)
print(f"printed during the load: {captured.getvalue()!r}")
print("and the 'surprise' entry is now:", unsafe["surprise"])

# %%
assert refused is not None and "print" in str(refused), "weights_only=True should refuse the print global"
assert "payload ran" in captured.getvalue(), "weights_only=False executes the payload"

# %% [markdown]
# The function ran *while loading*, before any of your code could look at
# the result; `"surprise"` is `None`, what `print` returned. Never use
# `weights_only=False` on a file you did not make yourself.
#
# ### Your own types: `add_safe_globals`
#
# Sometimes a checkpoint legitimately holds a type of your own, such as a
# dataclass with the run's configuration. `weights_only=True` refuses it
# too. If you trust the type, allow exactly that type, not everything, with
# `torch.serialization.add_safe_globals([...])` (for the whole process) or
# the context manager `torch.serialization.safe_globals([...])` (for one
# block):


# %%
@dataclasses.dataclass
class TrainConfig:
    lr: float
    batch_size: int
    hidden: tuple


config_file = work / "with_config.pt"
torch.save({"config": TrainConfig(LR, BATCH_SIZE, HIDDEN), "weights": torch.zeros(2)}, config_file)
try:
    torch.load(config_file)
except pickle.UnpicklingError as err:
    print(f"{type(err).__name__}: ... {headline(err)}")

torch.serialization.add_safe_globals([TrainConfig])
print("after add_safe_globals:", torch.load(config_file)["config"])

# %% [markdown]
# The simpler way out is to not need it: store `dataclasses.asdict(config)`,
# a plain dict, and rebuild the dataclass after loading. The checkpoints
# below do that.
#
# ### `safetensors`: weights for other people
#
# `weights_only=True` makes a pickle safe by refusing most of what pickle
# can do. The `safetensors` format (from Hugging Face, a common format for
# models published on its Hub) avoids pickle altogether: a file is an
# 8-byte length, a JSON header with each tensor's name, dtype, shape and
# byte range, then the raw bytes. A reader parses JSON and copies bytes;
# there are no instructions that could call a function. Use it when you
# publish weights or load weights that someone else published; keep
# `torch.save` for your own training checkpoints, which also hold the
# optimizer's nested state, numbers and strings.
#
# `save_file` takes a flat dict of tensors (the `state_dict`) and an
# optional `metadata` dict of strings; `load_file` returns the dict:

# %%
# NBVAL_CHECK_OUTPUT
st_file = work / "mlp_weights.safetensors"
save_file(model.state_dict(), st_file, metadata={"hidden": "128", "source": "chapter 14"})
header_bytes = struct.unpack("<Q", st_file.read_bytes()[:8])[0]  # the first 8 bytes: the header's length
header = json.loads(st_file.read_bytes()[8 : 8 + header_bytes])
for key, entry in header.items():
    print(f"{key:14s} {dict(sorted(entry.items()))}")  # sorted: the metadata's order is not fixed

from_st = load_file(st_file)
st_equal = from_st.keys() == model.state_dict().keys() and all(torch.equal(from_st[k], v) for k, v in model.state_dict().items())
print("load_file gives back the same tensors:", st_equal)
print("into the model:", restored.load_state_dict(from_st))  # the same load_state_dict as for a torch.save file

# %% [markdown]
# `safe_open` reads the header and hands out one tensor at a time, which is
# how a big model can be loaded shard by shard:

# %%
# NBVAL_CHECK_OUTPUT
with safe_open(st_file, framework="pt") as f:
    print("keys:", list(f.keys()), "metadata:", dict(sorted(f.metadata().items())))
    one = f.get_tensor("net.3.bias")
print("net.3.bias alone:", tuple(one.shape), torch.equal(one, model.net[3].bias))

# %% [markdown]
# The price of the safety is that the format holds tensors and strings
# only. A dataclass, a number, or the crafted `Payload` from above is
# refused when you save, and so are two names that share one storage
# (tied weights: save one of them, or use `safetensors.torch.save_model`):

# %%
# NBVAL_CHECK_OUTPUT
st_refusals = {}
tied = torch.ones(3)
for what, obj in [("a dataclass", {"config": TrainConfig(LR, BATCH_SIZE, HIDDEN)}), ("a number", {"step": 300}),
                  ("the crafted Payload", {"surprise": Payload()}), ("two names, one storage", {"a": tied, "b": tied})]:
    try:
        save_file(obj, work / "refused.safetensors")
        st_refusals[what] = None
    except (ValueError, TypeError, RuntimeError) as err:
        st_refusals[what] = err
        print(f"{what:23s} {type(err).__name__}: {' '.join(str(err).split())[:90]}")

# %%
w_start, w_end = header["net.1.weight"]["data_offsets"]
assert header["net.1.weight"]["dtype"] == "F32" and w_end - w_start == 128 * 784 * 4, "the header should give dtype and byte range"
assert os.path.getsize(st_file) == 8 + header_bytes + max(e["data_offsets"][1] for k, e in header.items() if k != "__metadata__"), (
    "the file should be the length, the header and the raw bytes, nothing else"
)
assert header["__metadata__"] == {"hidden": "128", "source": "chapter 14"}, "the metadata should be stored as given"
assert st_equal, "a safetensors round trip should give back the exact tensors"
assert all(err is not None for err in st_refusals.values()), f"safetensors should refuse non-tensors and shared storage: {st_refusals}"
assert not (work / "refused.safetensors").exists(), "a refused save should not leave a file"

# %% [markdown]
# So there are two safe paths: `safetensors` when only tensors travel, and
# `torch.load(weights_only=True)` when the file must also hold the plain
# Python values of a training checkpoint.
#
# ## `map_location`: a GPU checkpoint on a CPU machine
#
# Each tensor storage in the file records the device it was saved from,
# such as `cuda:0`, and `torch.load` puts it back there. On a machine
# without that GPU the load fails. `map_location` tells `torch.load` where
# to put the storages instead: a device (`"cpu"`, `torch.device("cuda:0")`),
# a dict that renames devices (`{"cuda:1": "cuda:0"}`), or a function.
#
# To see the failure on any machine, the cell makes a file that *claims*
# its tensor was saved from a GPU this machine does not have: `cuda:0` on
# a machine without CUDA, or on a CUDA machine the GPU one past the last
# (`cuda:2` where there are two). It swaps the function that `torch.save`
# asks for each storage's device tag, so the file is the same as one saved
# from that GPU. (With an accelerator, the cell first saves a tensor from
# it for real, which loads back onto it without `map_location`.)

# %%
if device.type != "cpu":
    real_file = work / "from_accelerator.pt"
    torch.save({"weight": torch.arange(4.0, device=device)}, real_file)
    print(f"saved from {device}, loaded without map_location onto:", torch.load(real_file)["weight"].device)

missing_gpu = f"cuda:{torch.cuda.device_count()}" if torch.cuda.is_available() else "cuda:0"  # not on this machine
gpu_file = work / "from_missing_gpu.pt"
real_location_tag = torch.serialization.location_tag
torch.serialization.location_tag = lambda storage: missing_gpu  # pretend every storage lives on that GPU
try:
    torch.save({"weight": torch.arange(4.0)}, gpu_file)
finally:
    torch.serialization.location_tag = real_location_tag

print(f"a file saved from {missing_gpu}, which this machine does not have:")
try:
    plain = torch.load(gpu_file)
    map_error = None
    print("  no map_location: loaded onto", plain["weight"].device)
except RuntimeError as err:
    map_error = err
    print(f"  {type(err).__name__}: {err}")
on_cpu = torch.load(gpu_file, map_location="cpu")
print("  map_location='cpu':", on_cpu["weight"], "on", on_cpu["weight"].device)

# %%
assert map_error is not None, f"loading a file saved from {missing_gpu}, a device this machine lacks, should fail"
assert on_cpu["weight"].device.type == "cpu" and torch.equal(on_cpu["weight"], torch.arange(4.0)), (
    "map_location='cpu' should bring the saved values onto the CPU"
)

# %% [markdown]
# A good habit is to always load with `map_location="cpu"` and then move
# the model with `.to(device)`: the load works everywhere, and it does not
# briefly allocate a second copy of the weights on GPU 0. `load_state_dict`
# copies values into the model's existing tensors, wherever they are, so
# the loaded dict may be on any device. (`helpers.checkpoint.load_checkpoint`
# uses `map_location="cpu"` by default.)
#
# ## Big models: loading without a second copy
#
# The usual recipe, build the model and then `load_state_dict(torch.load(path))`,
# holds the weights **twice**: once as the freshly initialised parameters,
# once as the loaded dict, until `load_state_dict` has copied one into the
# other. For a model that barely fits in memory, that is the difference
# between loading and crashing. Three tools remove both extra copies:
#
# - `with torch.device("meta"):` builds the model on the **meta** device,
#   whose tensors have shapes and dtypes but no memory and no values: the
#   random initialisation is skipped;
# - `torch.load(path, mmap=True)` maps the file into memory instead of
#   reading it: a tensor's bytes come from the file (through the operating
#   system's page cache) only when they are touched;
# - `load_state_dict(sd, assign=True)` makes the loaded tensors the model's
#   parameters instead of copying them into the existing ones (which would
#   be impossible anyway: a meta tensor has no memory to copy into).
#
# We measure it on a model of two `BIG_WIDTH` x `BIG_WIDTH` layers, with
# the process's **anonymous** memory: its resident memory (RSS) minus the
# pages that come from files. The memory-mapped weights are file pages,
# shared with the page cache, so they do not count as a copy that this
# process made.


# %%
def anonymous_mib():
    """This process's resident memory that is not backed by a file, in MiB (psutil; Linux has the split)."""
    info = psutil.Process().memory_info()
    return (info.rss - getattr(info, "shared", 0)) / 2**20


def make_big():
    return nn.Sequential(nn.Linear(BIG_WIDTH, BIG_WIDTH), nn.ReLU(), nn.Linear(BIG_WIDTH, BIG_WIDTH))


torch.manual_seed(SEED)
big_file = work / "big_weights.pt"
big_reference = make_big().state_dict()
torch.save(big_reference, big_file)
big_mib = os.path.getsize(big_file) / 2**20

usual = {}  # anonymous memory above the starting point, after each step of the usual recipe
start_mib = anonymous_mib()
big_model = make_big()
usual["model built"] = anonymous_mib() - start_mib
big_sd = torch.load(big_file, weights_only=True)
usual["file loaded"] = anonymous_mib() - start_mib
big_model.load_state_dict(big_sd)  # copies the loaded values into the parameters
del big_sd
usual["after load_state_dict"] = anonymous_mib() - start_mib  # the loaded dict freed
del big_model

lean = {}
start_mib = anonymous_mib()
with torch.device("meta"):
    lean_model = make_big()
lean["model built"] = anonymous_mib() - start_mib
meta_before = all(p.is_meta for p in lean_model.parameters())
lean_sd = torch.load(big_file, mmap=True, weights_only=True)
lean["file loaded"] = anonymous_mib() - start_mib
lean_model.load_state_dict(lean_sd, assign=True)  # the loaded tensors become the parameters
lean["after load_state_dict"] = anonymous_mib() - start_mib
lean_out = lean_model(torch.ones(2, BIG_WIDTH))  # reads every weight from the mapped file
lean["after a forward pass"] = anonymous_mib() - start_mib

print(f"file: {big_mib:.1f} MiB; anonymous memory grown by (MiB):")
print(f"{'':22s} {'usual':>7s} {'meta + mmap + assign':>21s}")
for step in lean:
    print(f"{step:22s} {f'{usual[step]:.1f}' if step in usual else '-':>7s} {lean[step]:21.1f}")
print("(usual: the loaded dict is deleted after load_state_dict; lean: assign=True, nothing is copied)")
print("parameters on the meta device before loading:", meta_before)

fig, ax = plt.subplots(figsize=(9, 3))
stages = list(lean)
positions = np.arange(len(stages))
usual_bars = ax.bar(positions - 0.2, [usual.get(step, 0.0) for step in stages], width=0.4, label="usual recipe")
lean_bars = ax.bar(positions + 0.2, [lean[step] for step in stages], width=0.4, label="meta + mmap + assign")
ax.bar_label(usual_bars, labels=[f"{usual[step]:.0f}" if step in usual else "not run" for step in stages], fontsize=8)
ax.bar_label(lean_bars, labels=[f"{lean[step]:.0f}" for step in stages], fontsize=8)
ax.axhline(big_mib, color="k", lw=0.8, ls="--", label=f"one copy of the weights ({big_mib:.0f} MiB)")
ax.set_xticks(positions, stages)
ax.set(xlabel="stage", ylabel="anonymous memory grown (MiB)", ylim=(0, 1.25 * max(usual.values())),
       title="loading a big model: memory after each stage")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# Where do the parameters live now? On Linux, `/proc/self/maps` lists
# every memory mapping of the process; the weights' addresses should lie
# inside the one of the checkpoint file, and each parameter should be the
# very tensor that `torch.load` returned:

# %%
if sys.platform == "linux":
    file_ranges = [tuple(int(h, 16) for h in line.split()[0].split("-"))
                   for line in Path("/proc/self/maps").read_text().splitlines() if line.endswith(os.path.realpath(big_file))]
    in_file = all(any(lo <= p.data_ptr() < hi for lo, hi in file_ranges) for p in lean_model.parameters())
    print(f"mappings of {big_file.name}: {len(file_ranges)}; every parameter inside one: {in_file}")
same_tensor = all(p.data_ptr() == lean_sd[name].data_ptr() for name, p in lean_model.named_parameters())
lean_equal = all(torch.equal(lean_model.state_dict()[k], v) for k, v in big_reference.items())
print(f"parameters are the loaded tensors (no copy): {same_tensor}; values equal to the saved ones: {lean_equal}")
trainable = all(isinstance(p, nn.Parameter) and p.requires_grad for p in lean_model.parameters())
print("still trainable parameters:", trainable)

# %%
assert usual["file loaded"] > 1.5 * big_mib, f"the usual recipe should hold two copies ({usual}, file {big_mib:.1f} MiB)"
assert sys.platform != "linux" or max(lean.values()) < 0.1 * big_mib, f"meta + mmap + assign should make no copy of the weights ({lean})"
assert meta_before, "a model built under torch.device('meta') should have only meta parameters"
assert same_tensor and lean_equal and trainable, "assign=True should make the memory-mapped tensors the (trainable) parameters"
assert sys.platform != "linux" or in_file, "the parameters should live inside the file's memory mapping"
del lean_model, lean_sd, lean_out, big_reference

# %% [markdown]
# The usual recipe peaked at two copies; the lean one made none, and the
# forward pass read the weights straight from the mapped file. Two
# details: `mmap=True` needs the zip format that `torch.save` writes by
# default, and the mapping is private (copy-on-write): training the model
# copies each page it changes into the process and never writes to the
# file. Buffers that are not in the `state_dict` (non-persistent ones)
# stay on the meta device and must be set by hand. Moving the model to a
# GPU with `.to(device)` copies the weights there as usual; the saving is
# in CPU memory.
#
# ## Atomic writes: never lose the last good file
#
# `torch.save(obj, path)` opens `path` for writing, which **empties** the
# old file, then writes the new content piece by piece. If the process dies
# in between (a power cut, the job scheduler's kill, Ctrl-C, a full disk),
# the old checkpoint is already gone and the new one is incomplete. We
# simulate a crash in the middle of `torch.save` with an object that
# raises while it is being pickled:


# %%
class PowerCut:
    def __reduce__(self):
        raise RuntimeError("simulated power cut during torch.save")


good_file = work / "latest.pt"
torch.save(model.state_dict(), good_file)
print(f"a good checkpoint: {kib(good_file)} KiB")
try:
    torch.save({"model": model.state_dict(), "crash": PowerCut()}, good_file)
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")
print(f"after the crash: {kib(good_file)} KiB left")
naive_error = None
try:
    torch.load(good_file)
except RuntimeError as err:
    naive_error = err
    print(f"{type(err).__name__}: {str(err).split('. ')[0]}.")
assert naive_error is not None, "the interrupted plain torch.save should have destroyed the old file"

# %% [markdown]
# Both the old and the new checkpoint are lost. The standard cure has
# three steps:
#
# 1. write to a **temporary file in the same folder** (so that the next
#    step is a rename within one file system);
# 2. `flush()` Python's buffer and `os.fsync()` the file, so the bytes are
#    on the disk and not only in the operating system's cache;
# 3. `os.replace(tmp, path)`: a rename, which POSIX systems (Linux, macOS)
#    guarantee to be atomic; Windows also replaces the file in one step on
#    the same drive, with a weaker formal guarantee. Anyone opening `path`
#    sees either the complete old file or the complete new one, never a
#    mixture.
#
# (For the rename itself to survive a power cut, the folder must be synced
# too; `helpers.checkpoint` does that on POSIX. The small function below
# leaves it out to stay readable.)


# %%
def save_atomically(obj, path):
    """torch.save(obj, path) such that a crash leaves either the old or the new file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # 1. same folder
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()  # 2. Python's buffer -> the OS
            os.fsync(f.fileno())  #    the OS cache -> the disk
        os.replace(tmp, path)  # 3. the atomic switch
    except BaseException:  # also KeyboardInterrupt
        os.unlink(tmp)
        raise


save_atomically(model.state_dict(), good_file)
try:
    save_atomically({"model": model.state_dict(), "crash": PowerCut()}, good_file)
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")
survived = torch.load(good_file)
print(f"after the crash: {kib(good_file)} KiB, loads fine: {torch.equal(survived['net.1.weight'], model.net[1].weight)}")
print("files in the folder:", sorted(p.name for p in work.iterdir() if p.name.startswith(".latest")))

# %%
assert torch.equal(survived["net.1.weight"], model.net[1].weight), "the atomic save should keep the old file"
assert not list(work.glob(".latest.pt.*")), "no temporary file should be left behind"

# %% [markdown]
# `helpers.checkpoint.save_checkpoint(state, folder, step)` does exactly
# this, and two things more, which the rest of the chapter uses:
#
# - it stores the file's **sha256** in a small file beside it
#   (`ckpt-00000300.pt.sha256`, the format of the `sha256sum` tool), and
#   `load_checkpoint` checks it before calling `torch.load(weights_only=True)`;
#   we will see below why `torch.load` alone does not notice damage;
# - it keeps only the newest `keep_last` checkpoints, deleting older ones
#   only *after* the new one is safely in place.
#
# ## A full checkpoint, and resuming exactly
#
# To continue a training run as if it had never stopped, the weights are
# not enough. Everything that influences the next step must be saved:
#
# | what | why |
# | --- | --- |
# | `model.state_dict()` | the weights and buffers |
# | `optimizer.state_dict()` | AdamW's running averages of the gradients and their squares, and its step count; without them the first steps after resuming behave like the first steps of a new run |
# | `scheduler.state_dict()` | where the learning rate is in its schedule; a fresh scheduler starts the warm-up again |
# | `scaler.state_dict()` | `torch.amp.GradScaler`'s current loss scale and how many steps it has gone without an overflow (fp16 training); an empty dict when it is disabled |
# | the step (and epoch) | where to continue |
# | random-generator states | dropout masks and augmentation draw from the global generators (Python, NumPy, torch, CUDA) |
# | the data order | which samples the rest of the epoch will still see |
#
# ### The data
#
# Real MNIST digits (`TRAIN_SAMPLES` of them), normalised as in chapter 05,
# in a `DataLoader` with `shuffle=True`:

# %%
mnist_train = mnist(train=True)
images = mnist_train.data[:TRAIN_SAMPLES].float().div(255).sub(0.1307).div(0.3081).unsqueeze(1)  # [N, 1, 28, 28]
train_set = TensorDataset(images, mnist_train.targets[:TRAIN_SAMPLES])
steps_per_epoch = len(train_set) // BATCH_SIZE
total_steps = steps_per_epoch * EPOCHS
print(f"{len(train_set):,} images, {steps_per_epoch} steps per epoch, {total_steps} steps in {EPOCHS} epochs")
assert CHECKPOINT_EVERY <= CRASH_AT < total_steps, "CRASH_AT must lie after the first checkpoint and before the end"

# %% [markdown]
# **Making the data order resumable.** A shuffling `DataLoader` draws a
# new permutation each epoch from a random generator. If that is the global
# one, the order after resuming depends on everything else that drew from
# it. So each epoch gets its own generator, seeded from `SEED` and the epoch
# number: the order of epoch *e* is then a function of *e* alone. To resume
# at step `s` we recreate the loader of epoch `s // steps_per_epoch` and
# skip its first `s % steps_per_epoch` batches. Skipping by iterating is
# cheap for tensors in memory; for data that is expensive to load, skip
# indices in the sampler instead, or use a loader that saves its own
# position (`StatefulDataLoader` in the `torchdata` package).
#
# One more trap: without `generator=`, a `DataLoader` also draws its base
# seed for worker processes from the *global* torch generator each time an
# epoch starts, which shifts every dropout mask after it. With its own
# generator it leaves the global one alone.


# %%
def epoch_loader(epoch):
    """The shuffled loader of one epoch: its order depends only on SEED and epoch."""
    g = torch.Generator().manual_seed(SEED * 1_000_003 + epoch)
    return DataLoader(train_set, batch_size=BATCH_SIZE, shuffle=True, drop_last=True, generator=g)


def batches_from(step):
    """The batches of the run from global step `step` to the end, in the same order as a run from step 0."""
    first_epoch, skip = divmod(step, steps_per_epoch)
    for epoch in range(first_epoch, EPOCHS):
        yield from itertools.islice(epoch_loader(epoch), skip if epoch == first_epoch else 0, None)


# %% [markdown]
# ### Training with checkpoints
#
# The model, optimizer, scheduler and scaler are built by one function, so
# that a "new process" after a crash can build them again. The step runs
# in float16 under `torch.autocast` with a `torch.amp.GradScaler` (chapter
# 15 explains both) on every device, the CPU included. On a CPU that is
# unusual (bfloat16, the CPU's usual low precision, needs no scaler); we
# do it so that the scaler has a state worth saving. The scaler multiplies
# the loss by its *scale* before `backward`; when a gradient overflows to
# `inf`, it skips that optimizer step and halves the scale, and after
# `growth_interval` steps without an overflow it doubles the scale. With
# `GROWTH_INTERVAL` = 20 instead of the default 2000, this short run goes
# through that cycle several times, as a long run does.

# %%
print(f"mixed precision (fp16 autocast + GradScaler) on {device.type}:", "on" if USE_AMP else "off")


@contextmanager
def skipped_first_step_is_expected():
    """Silence one warning, inside this block only: if the scaler skips the very first optimizer step
    (inf gradients), the scheduler's first step comes "before optimizer.step()". That is expected here."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=re.escape("Detected call of `lr_scheduler.step()` before `optimizer.step()`"), category=UserWarning
        )
        yield


def make_training(init_seed):
    """A fresh model, AdamW optimizer, one-cycle scheduler and GradScaler."""
    torch.manual_seed(init_seed)
    model = MLP(hidden=HIDDEN, dropout=DROPOUT).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=LR, total_steps=total_steps)
    scaler = torch.amp.GradScaler(device.type, growth_interval=GROWTH_INTERVAL, enabled=USE_AMP)
    return model, optimizer, scheduler, scaler


def full_checkpoint(model, optimizer, scheduler, scaler, step):
    """Everything needed to continue after `step` optimizer steps, as plain tensors, dicts and numbers."""
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict(),
        "step": step,
        "epoch": step // steps_per_epoch,
        "rng": rng_state(),  # Python, NumPy, torch (and CUDA) generators, in a weights_only-safe form
        "config": dataclasses.asdict(TrainConfig(LR, BATCH_SIZE, HIDDEN)),
    }


class SimulatedCrash(Exception):
    pass


def train(model, optimizer, scheduler, scaler, losses, start_step=0, crash_at=None, checkpoint_dir=None, data_from=None,
          scales=None, stop_step=None):
    """Train from start_step to the end (or to stop_step); losses[step] = that step's loss. Optionally checkpoint, or crash.

    data_from: take the batches from this step's position instead (only for a broken resume, below).
    scales: if a dict, scales[step] = the loss scale step `step` used (so scales[total_steps] is the scale after the last).
    """
    model.train()
    data = batches_from(start_step if data_from is None else data_from)
    for step, (x, y) in zip(range(start_step, total_steps if stop_step is None else stop_step), data):
        if step == crash_at:
            raise SimulatedCrash(f"the process died before step {step}")
        x, y = x.to(device), y.to(device)
        with torch.autocast(device.type, dtype=torch.float16, enabled=USE_AMP):
            loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        if scales is not None:
            scales[step] = scaler.get_scale()
        scaler.scale(loss).backward()
        with skipped_first_step_is_expected():
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
        if scales is not None:
            scales[step + 1] = scaler.get_scale()  # after update(): a skip at the last step counts too
        losses[step] = loss.detach().float().cpu()
        done = step + 1  # optimizer steps taken so far
        if checkpoint_dir is not None and (done % CHECKPOINT_EVERY == 0 or done == total_steps):
            save_checkpoint(full_checkpoint(model, optimizer, scheduler, scaler, done), checkpoint_dir, done, keep_last=KEEP_LAST)


# %% [markdown]
# First the reference: one uninterrupted run, no checkpoints.

# %%
reference_losses, reference_scales = {}, {}
train(*make_training(init_seed=SEED), reference_losses, scales=reference_scales)
scale_list = [reference_scales[s] for s in range(total_steps + 1)]  # before each step, and after the last
skipped = sum(later < now for now, later in itertools.pairwise(scale_list))  # a halved scale = a skipped step
print(f"uninterrupted: {len(reference_losses)} steps, "
      f"loss {reference_losses[0].item():.3f} -> {reference_losses[total_steps - 1].item():.3f}")
print(f"loss scale: {scale_list[0]:.0f} at the start, between {min(scale_list):.0f} and {max(scale_list):.0f}; "
      f"{skipped} optimizer steps skipped for inf/nan gradients")
_ = report.record("fp16 steps skipped by the GradScaler", skipped, f"/{total_steps}")
assert not USE_AMP or (skipped >= MIN_SKIPPED and max(scale_list) > scale_list[0]), (
    f"with GROWTH_INTERVAL={GROWTH_INTERVAL} the scale should both grow and back off ({skipped} skipped steps)"
)

# %% [markdown]
# Now the same run, with the same seed, checkpointing every
# `CHECKPOINT_EVERY` steps into `build/ch14/run/`, until it "crashes":

# %%
# NBVAL_CHECK_OUTPUT
run_dir = work / "run"
crashed_losses = {}
try:
    train(*make_training(init_seed=SEED), crashed_losses, crash_at=CRASH_AT, checkpoint_dir=run_dir)
except SimulatedCrash as err:
    print(f"{type(err).__name__}: {err}")
print("checkpoints on disk:", [p.name for p in list_checkpoints(run_dir)])

# %% [markdown]
# A new process would now start from nothing. We imitate that: other
# random states everywhere, and a model, optimizer, scheduler and scaler
# built with a different seed, so that anything we forget to restore shows
# up. Then the resume, piece by piece:

# %%
seed_everything(SEED + 12345)  # the new process's generators are somewhere else entirely
model, optimizer, scheduler, scaler = make_training(init_seed=SEED + 1)

path = latest_checkpoint(run_dir)  # the newest checkpoint whose checksum verifies
checkpoint = load_checkpoint(path, map_location="cpu")  # weights_only=True inside
model.load_state_dict(checkpoint["model"])
optimizer.load_state_dict(checkpoint["optimizer"])  # moves the state to the parameters' device
scheduler.load_state_dict(checkpoint["scheduler"])
scaler.load_state_dict(checkpoint["scaler"])
set_rng_state(checkpoint["rng"])  # last, so nothing above can move the generators again
resume_step = checkpoint["step"]
print(f"resuming from {path.name}: step {resume_step} (epoch {checkpoint['epoch']}, "
      f"{resume_step % steps_per_epoch} batches into it), learning rate {scheduler.get_last_lr()[0]:.2e}")
print(f"checkpoint: {kib(path)} KiB; keys {list(checkpoint)}")

resumed_losses = {}
train(model, optimizer, scheduler, scaler, resumed_losses, start_step=resume_step, checkpoint_dir=run_dir)
final_model = model

# %% [markdown]
# The steps between the checkpoint and the crash were computed twice, once
# by each process. Stitched together, does the interrupted run equal the
# uninterrupted one? We compare the losses' bit patterns (each float32
# viewed as an int32), which is stricter than `==` (for which `0.0 == -0.0`):

# %%
def same_bits(a, b):
    """True if two float32 tensors hold the same bit patterns, element for element."""
    return torch.equal(a.view(torch.int32), b.view(torch.int32))


reference = torch.stack([reference_losses[s] for s in range(total_steps)])
stitched = torch.stack([crashed_losses[s] for s in range(resume_step)] + [resumed_losses[s] for s in range(resume_step, total_steps)])
redone = range(resume_step, CRASH_AT)
identical = same_bits(stitched, reference)
redone_identical = all(same_bits(crashed_losses[s], resumed_losses[s]) for s in redone)
max_difference = (stitched - reference).abs().max().item()
print(f"{total_steps} losses, interrupted at {CRASH_AT} and resumed from {resume_step}: "
      f"bit-identical to the uninterrupted run: {identical} (largest difference {max_difference})")
print(f"the {len(redone)} steps computed by both processes agree too: {redone_identical}")
bits_equal = stitched.view(torch.int32) == reference.view(torch.int32)
_ = report.record("resumed run: steps bit-identical to uninterrupted", int(bits_equal.sum()), f"/{total_steps}")
_ = report.record("resumed run: largest loss difference", max_difference)

# %%
assert identical, f"resuming should reproduce every loss exactly; largest difference {max_difference}"
assert redone_identical, "the steps between the checkpoint and the crash should repeat exactly"

# %% [markdown]
# ### What each forgotten piece costs
#
# Each line below resumes from the same checkpoint but leaves one thing
# out, runs `LEAVE_OUT_STEPS` steps, and compares their losses with the
# uninterrupted run's. "First difference" is the first step whose loss is
# not bit-identical; the last column is the largest |difference| over
# those steps. (The runs are kept short because the main claims below are
# about the first two resumed steps.) For the run without the scaler's
# state we also record the loss scale at every step.


# %%
def resume_without(left_out, scales=None):
    """Resume from `checkpoint` but skip one piece; return the losses of LEAVE_OUT_STEPS steps from resume_step on.

    scales: if a dict, filled with the loss scale of each step, as in `train`.
    """
    seed_everything(SEED + 12345)
    model, optimizer, scheduler, scaler = make_training(init_seed=SEED + 1)
    model.load_state_dict(checkpoint["model"])
    if left_out != "optimizer state":
        optimizer.load_state_dict(checkpoint["optimizer"])
    if left_out != "scheduler state":
        scheduler.load_state_dict(checkpoint["scheduler"])
    if left_out != "GradScaler state":
        scaler.load_state_dict(checkpoint["scaler"])
    if left_out != "random-generator states":
        set_rng_state(checkpoint["rng"])
    losses = {}
    data_from = resume_step - resume_step % steps_per_epoch if left_out.startswith("data position") else None
    train(model, optimizer, scheduler, scaler, losses, start_step=resume_step, data_from=data_from, stop_step=leave_out_stop,
          scales=scales)
    return torch.stack([losses[s] for s in range(resume_step, leave_out_stop)])


assert LEAVE_OUT_STEPS >= 2, "the checks below look at the first two resumed steps"
leave_out_stop = min(resume_step + LEAVE_OUT_STEPS, total_steps)
assert leave_out_stop >= resume_step + 2, "the resume step should leave at least two steps to run"
partial, deviations = {}, {}
left_outs = ["random-generator states", "scheduler state", "optimizer state", "GradScaler state",
             "data position (restart the epoch)"]
if not USE_AMP:  # a disabled scaler has no state to forget
    left_outs.remove("GradScaler state")
if resume_step % steps_per_epoch == 0:  # resumed at the start of an epoch: there is nothing to skip
    left_outs.remove("data position (restart the epoch)")
fresh_scales = {}  # the loss scales of the run that resumes with a fresh GradScaler
print(f"steps {resume_step} to {leave_out_stop - 1}:")
print(f"{'left out':36s} {'first difference':>16s} {'largest |difference|':>21s}")
for left_out in left_outs:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        losses = resume_without(left_out, scales=fresh_scales if left_out == "GradScaler state" else None)
    for w in caught:
        print(f"  {w.category.__name__}: {w.message}")
    differs = (losses.view(torch.int32) != reference[resume_step:leave_out_stop].view(torch.int32)).nonzero()
    first = resume_step + differs[0].item() if len(differs) else None
    partial[left_out] = first
    deviations[left_out] = (losses - reference[resume_step:leave_out_stop]).abs()
    print(f"{left_out:36s} {first if first is not None else 'none':>16} {deviations[left_out].max().item():21.4f}")
    key = left_out.split(" (")[0]
    _ = report.record(f"resume without {key}: first differing step", first if first is not None else -1)
if USE_AMP:
    print(f"loss scale in the checkpoint: {checkpoint['scaler']['scale']:.0f} "
          f"({checkpoint['scaler']['_growth_tracker']} steps since its last change); "
          f"a fresh GradScaler starts at {torch.amp.GradScaler(device.type).get_scale():.0f}")
    resumed_range = range(resume_step, leave_out_stop + 1)  # before each resumed step, and after the last
    for label, scales in [("uninterrupted", reference_scales), ("fresh GradScaler", fresh_scales)]:
        seen = [scales[s] for s in resumed_range]
        halvings = sum(later < now for now, later in itertools.pairwise(seen))
        print(f"  {label:17s} loss scale per step: {' '.join(f'{v:.0f}' for v in seen[:-1])}; "
              f"{halvings} skipped step(s)")
    scaler_first = partial["GradScaler state"]
    if scaler_first is None:
        print("  without the GradScaler state, no resumed loss differed in these steps")
    elif scaler_first == resume_step + 1:
        print(f"  without the GradScaler state the first changed loss is the second resumed one (step {scaler_first})")
    else:
        print(f"  without the GradScaler state the first changed loss is at step {scaler_first} "
              f"(resumed step number {scaler_first - resume_step + 1})")

# %%
# The first resumed step whose update the uninterrupted run applied: a step whose gradients overflowed
# is skipped by the GradScaler (its scale halves after it), and a skipped update cannot show a changed
# learning rate or optimizer state.
first_update = resume_step
while USE_AMP and first_update < leave_out_stop - 1 and reference_scales[first_update + 1] < reference_scales[first_update]:
    first_update += 1
print(f"first resumed step with an applied update: {first_update} "
      f"({first_update - resume_step} skipped for overflow before it)")
for left_out, first in partial.items():
    assert first is not None, f"leaving out the {left_out} should change a loss within {LEAVE_OUT_STEPS} resumed steps"
    if left_out != "GradScaler state":  # the scaler's effect depends on rounding and overflow: see below
        assert first <= first_update + 1, f"leaving out the {left_out} should change a loss by the step after the first update"
assert not USE_AMP or checkpoint["scaler"]["scale"] != torch.amp.GradScaler(device.type).get_scale(), (
    "the saved loss scale should differ from a fresh scaler's"
)
for left_out in {"random-generator states", "data position (restart the epoch)"} & set(partial):
    assert partial[left_out] == resume_step, f"leaving out the {left_out} should change the very first resumed loss"
for left_out in {"scheduler state", "optimizer state"} & set(partial):
    assert partial[left_out] == first_update + 1, (
        f"leaving out the {left_out} should first change the loss after the first applied update (step {first_update + 1})"
    )
if "GradScaler state" in partial:  # the scale only enters backward, so the first resumed loss cannot change
    assert partial["GradScaler state"] > resume_step, "a fresh GradScaler should not change the first resumed loss"
for left_out, deviation in deviations.items():
    assert deviation[-1] > 0, f"leaving out the {left_out}: the run should still differ {len(deviation)} steps after resuming"

# %%
fig, axes = plt.subplots(1, 2, figsize=(9, 3))
steps = torch.arange(total_steps)
axes[0].plot(steps, reference, lw=1, color="0.6", label="uninterrupted")
axes[0].plot(range(CRASH_AT), [crashed_losses[s].item() for s in range(CRASH_AT)], lw=1, ls="--", color="C0", label="first process")
axes[0].plot(range(resume_step, total_steps), [resumed_losses[s].item() for s in range(resume_step, total_steps)],
             lw=1, ls=":", color="C3", label="resumed process")
axes[0].axvline(CRASH_AT, color="k", lw=0.8)
axes[0].axvline(resume_step, color="C3", lw=0.8)
axes[0].set(xlabel="step", ylabel="training loss", title="three runs, one curve", yscale="log")
axes[0].legend(fontsize=8)
resumed_steps = np.arange(resume_step, leave_out_stop)
for left_out, deviation in deviations.items():
    shown = deviation.numpy().copy()
    shown[shown == 0] = np.nan  # an exact match has no place on a log axis
    axes[1].plot(resumed_steps, shown, marker="o", ms=3, lw=1, label=left_out.split(" (")[0])
axes[1].set(xlabel="step", ylabel="|loss - uninterrupted|", yscale="log",
            title="one piece left out (full resume: 0)")
axes[1].legend(fontsize=7)
fig.tight_layout()
plt.show()

# %% [markdown]
# On the left, the three curves lie on top of each other (the black line
# marks the crash, the red one the checkpoint the second process resumed
# from): the full resume matched every loss bit for bit. On the right,
# each omission; an exact match is not drawn, so the lines of the
# optimizer, scheduler and scaler start later.
#
# A different dropout mask or a different batch changes the very first
# resumed loss; the optimizer's and the scheduler's state only act on the
# *update* after that loss, so their damage shows one step later, or later
# still when the uninterrupted run skipped that update because its
# gradients overflowed (the line "first resumed step with an applied
# update" above says whether it did: the checks expect the change in the
# loss after that step). The
# scaler's state also acts only on updates, so its damage can show one
# step later at the earliest; the lines printed under the table say at
# which step it did in this run, and list both runs' loss scales. Its
# case is the least obvious: multiplying by a power of two is exact in
# floating point unless a number overflows or becomes too small for fp16
# (it then loses bits or becomes zero). So a fresh scale changes an update
# only when some small fp16 gradient underflows under one scale and not
# under the other, or when one run's gradients overflow, so that it skips
# its step and halves its scale, and the other run's do not (the printed
# counts of skipped steps tell which of the two it was). Once any
# loss differs the runs drift apart: every omission still differs at the
# last step shown. None of these raises an error: a resumed
# run that is merely "about as good" hides them. The exact comparison above is cheap and is
# worth keeping as a test for your own training code.
#
# ## Corrupt checkpoints, and keeping the last K
#
# The folder now holds the newest `KEEP_LAST` checkpoints, each with its
# checksum file; the older ones were deleted after each new save:

# %%
# NBVAL_CHECK_OUTPUT
for p in sorted(run_dir.iterdir()):
    print(p.name)

# %% [markdown]
# Files get damaged: a copy that stopped early, a full disk during a
# non-atomic save, a flaky network file system, a flipped bit. How does
# plain `torch.load` react? First a truncated copy, then a single flipped
# bit inside a weight:

# %%
newest, previous = list_checkpoints(run_dir)[-1], list_checkpoints(run_dir)[-2]
damaged = work / "truncated_copy.pt"
damaged.write_bytes(newest.read_bytes()[: os.path.getsize(newest) // 2])
try:
    torch.load(damaged)
except Exception as err:
    print(f"truncated: {type(err).__name__}: {err}")

flipped = work / "bitflip_copy.pt"
raw = bytearray(newest.read_bytes())
final_weights = final_model.state_dict()
name = next(k for k, v in final_weights.items() if v.dim() == 2)
offset = raw.find(final_weights[name].detach().cpu().numpy().tobytes()[:64])  # where that weight's numbers start
assert offset > 0, "the weight's bytes should be found in the file"
raw[offset + 3] ^= 0x40  # one bit of the first float's exponent
flipped.write_bytes(bytes(raw))
silently = torch.load(flipped, map_location="cpu")["model"][name]
print(f"bit flip: loaded without complaint; {name}[0, 0] was {final_weights[name][0, 0].item():.6f}, "
      f"is now {silently[0, 0].item():.6g}")

# %% [markdown]
# The truncated file at least fails, with a message that names neither the
# file nor an earlier checkpoint to use instead. The flipped bit loads
# silently, and the model now holds an absurd weight that wrecks its
# outputs (or turns them into `inf` and `nan`), maybe hours later. The sha256 checksum catches both. We damage the
# newest checkpoint itself:

# %%
newest.write_bytes(newest.read_bytes()[: os.path.getsize(newest) // 2])  # truncate the real thing
try:
    load_checkpoint(newest)
except CheckpointError as err:
    corrupt_error = err
    print(f"{type(err).__name__}: {err}")

# %%
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    fallback = latest_checkpoint(run_dir)
for w in caught:
    print(f"{w.category.__name__}: {w.message}")
recovered = load_checkpoint(fallback)
print(f"latest_checkpoint fell back to {fallback.name} (step {recovered['step']})")

# %%
assert isinstance(corrupt_error, CheckpointError) and newest.name in str(corrupt_error), "the error should name the file"
assert fallback == previous and recovered["step"] == int(previous.stem.split("-")[1]), "should fall back to the previous checkpoint"
assert not torch.equal(silently, final_weights[name].cpu()), "the bit flip should have changed a weight"
_ = report.record("full checkpoint size", kib(previous), "KiB")

# %% [markdown]
# `keep_last` is what makes this fallback possible: with only one
# checkpoint, a damaged file means starting over. Keep at least two; keep
# more if a checkpoint could be valid as a file but bad as a model (say,
# saved just after the loss became `nan`).
#
# ## Pitfalls
#
# ### 1. A NumPy value in the checkpoint
#
# `best_accuracy = np.mean(correct)` looks like a float but is a NumPy
# scalar. Save it, and the default `torch.load` refuses the whole file,
# because NumPy's types are not on its safe list:

# %%
# NBVAL_CHECK_OUTPUT
numpy_file = work / "numpy_value.pt"
best_accuracy = np.mean(np.array([1.0, 1.0, 0.0, 1.0]))
torch.save({"model": model.state_dict(), "best_accuracy": best_accuracy}, numpy_file)
try:
    torch.load(numpy_file)
except pickle.UnpicklingError as err:
    print(f"{type(err).__name__}: ... {headline(err)}")

# %% [markdown]
# **Fix:** store Python numbers (`float(best_accuracy)` or `.item()`) and
# tensors (`torch.as_tensor(array)`), never NumPy objects. That is also
# why `rng_state()` stores NumPy's generator state as a tensor.

# %%
torch.save({"model": model.state_dict(), "best_accuracy": float(best_accuracy)}, numpy_file)
print("best_accuracy:", torch.load(numpy_file)["best_accuracy"])

# %% [markdown]
# ### 2. `state_dict()` returns references, not a snapshot
#
# Keeping "the best weights so far" with `best = model.state_dict()` keeps
# nothing: the dict holds the model's live tensors, and the next optimizer
# step changes them in place:

# %%
torch.manual_seed(SEED)
net = MLP(hidden=(32,), dropout=0.0)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
best = net.state_dict()  # the mistake
best_copy = copy.deepcopy(net.state_dict())  # the fix
before = net.net[1].weight.detach().clone()
F.cross_entropy(net(images[:32]), train_set.tensors[1][:32]).backward()
opt.step()
print("weights changed by the step:             ", not torch.equal(net.net[1].weight, before))
print("best = state_dict() still the old values:", torch.equal(best["net.1.weight"], before))
print("deepcopy still the old values:           ", torch.equal(best_copy["net.1.weight"], before))
assert not torch.equal(best["net.1.weight"], before), "state_dict() should share the live tensors, so it changed"
assert torch.equal(best_copy["net.1.weight"], before), "the deepcopy should keep the old values"

# %% [markdown]
# **Fix:** `copy.deepcopy(model.state_dict())` (or
# `{k: v.detach().clone() for k, v in ...}`), or save it to disk right away.
#
# ### 3. Loading a disabled `GradScaler`'s state into an enabled one
#
# A checkpoint written by a run with the scaler disabled (float32 or
# bfloat16 training, or `USE_AMP = False`) holds `scaler: {}`.
# Resume it with the scaler enabled for fp16, and:

# %%
# NBVAL_CHECK_OUTPUT
print("a disabled scaler's state:", torch.amp.GradScaler("cpu", enabled=False).state_dict())
try:
    torch.amp.GradScaler("cpu", enabled=True).load_state_dict({})
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# **Fix:** resume with the same precision settings, or load the scaler's
# state only when it is not empty (`if checkpoint["scaler"]: ...`), letting
# the new scaler start from its default scale.
#
# ## Exercises
#
# Each exercise has a stub for you to fill in, then a checker cell that
# prints **PASSED**, **NOT YET** with a hint, or **TODO** while the stub
# still raises `NotImplementedError`. If you are stuck,
# `solution("14.state_dict_diff")` returns the reference solution.
#
# ### Exercise 1: what differs between two state_dicts?
#
# Write `state_dict_diff(a, b)`, which returns a dict with four lists of
# key names: `"missing"` (in `a`, not in `b`), `"unexpected"` (in `b`, not
# in `a`), `"shape"` (in both, with different shapes) and `"changed"` (in
# both with the same shape, but a different dtype or different values).
# Think of `a` as your model's state_dict and `b` as a checkpoint. Values
# count as changed unless they are exactly equal: no tolerance. Equal
# means equal values, as `torch.equal` compares them, so a NaN never
# equals itself: a tensor holding NaN counts as changed even against an
# identical copy (a NaN in a checkpoint is worth reporting). When it passes, the cell compares the final weights
# of the resumed run with the checkpoint that `latest_checkpoint` fell back
# to above (the newest one that still verifies, not the one the run resumed
# from).


# %%
def state_dict_diff(a, b):
    """{'missing': [...], 'unexpected': [...], 'shape': [...], 'changed': [...]} of b relative to a."""
    raise NotImplementedError


# %%
result = check("14.state_dict_diff", state_dict_diff)
if result.passed:
    diff = state_dict_diff({k: v.cpu() for k, v in final_model.state_dict().items()}, recovered["model"])
    print({k: len(v) for k, v in diff.items()}, "of", len(recovered["model"]), "tensors")

# %% [markdown]
# ### Exercise 2: a checkpoint for inference only
#
# A training checkpoint carries the optimizer's state (for AdamW, two more
# tensors per parameter), the scheduler, the random states... Inference
# needs only the weights, often in half precision. Write
# `inference_state(checkpoint, dtype)`: return a new dict with only the
# entries of `checkpoint["model"]`; floating-point tensors converted to
# `dtype`, other tensors (such as BatchNorm's integer `num_batches_tracked`)
# unchanged. Each tensor must be a compact copy that shares no memory with
# the checkpoint's tensors, not a view into a larger buffer (remember the
# 4 MB file for 10 floats), and the checkpoint must not change. When it passes, the cell saves the checkpoint that
# `latest_checkpoint` fell back to (the newest that verifies) in float16 and
# compares the sizes.


# %%
def inference_state(checkpoint, dtype):
    """Only checkpoint['model'], floating tensors in `dtype`, each a compact copy."""
    raise NotImplementedError


# %%
result = check("14.inference_state", inference_state)
if result.passed:
    small_file = work / "inference_fp16.pt"
    save_atomically(inference_state(recovered, torch.float16), small_file)
    print(f"training checkpoint {kib(fallback)} KiB -> inference weights in float16 {kib(small_file)} KiB")

# %% [markdown]
# ### Exercise 3: resume, from memory
#
# Without scrolling up: write `resume(checkpoint, model, optimizer,
# scheduler, scaler)`, which restores every piece of a checkpoint dict with
# the keys `"model"`, `"optimizer"`, `"scheduler"`, `"scaler"`, `"step"` and
# `"rng"` into freshly built objects, and returns the step to continue
# from. The checker trains a small network with dropout, "crashes", calls
# your function, continues, and compares every loss with an uninterrupted
# run. It also resumes a checkpoint written with the scaler disabled
# (`"scaler": {}`, pitfall 3) into an enabled scaler, which should then keep
# its fresh state.


# %%
def resume(checkpoint, model, optimizer, scheduler, scaler):
    """Restore everything from `checkpoint`; return the step to continue from (a Python int)."""
    raise NotImplementedError


# %%
result = check("14.resume", resume)

# %% [markdown]
# ## Summary
#
# - Save `state_dict()`s, not whole models: a pickled model refers to its
#   class by import path and breaks when the code moves; a state_dict is
#   names and tensors that load into whatever code you choose.
# - `torch.load` defaults to `weights_only=True`, which only unpickles
#   tensors, containers and numbers. A crafted file is refused before it can
#   run anything; `weights_only=False` would run it while loading. Allow
#   your own trusted types with `torch.serialization.add_safe_globals`, or
#   store plain dicts instead; `get_unsafe_globals_in_checkpoint` inspects a
#   file without loading it.
# - Share weights as `safetensors` (`save_file`/`load_file`): a JSON header
#   and raw bytes, no pickle, so loading cannot run code; it holds only
#   tensors and string metadata, and refuses anything else when saving.
# - To load a big model without a second copy, build it under
#   `torch.device("meta")`, load with `torch.load(path, mmap=True)` and
#   `load_state_dict(sd, assign=True)`: here the usual recipe grew the
#   process by two copies of the weights at its peak, the lean one by none.
# - `map_location="cpu"` loads a GPU checkpoint anywhere; move the model
#   afterwards.
# - Write checkpoints atomically (temporary file in the same folder, `fsync`,
#   `os.replace`), verify them with a checksum (a flipped bit loads silently
#   otherwise), and keep the last few, so a damaged newest file costs only
#   the steps since the one before.
# - A full checkpoint holds the model, optimizer, scheduler and scaler
#   states, the step, the random-generator states and the data position.
#   With all of them, an interrupted run continues bit for bit as if it had
#   never stopped; leave one out and the resumed losses soon differ (the
#   random states and the data at once, the optimizer and scheduler one
#   update later, the scaler one update later at the earliest).
#   `helpers.checkpoint` packages this for the later chapters.
#
# **Next:** chapter 15 turns to mixed precision (the `autocast` and
# `GradScaler` used above), numerical stability, and making two runs
# bit-identical from the start.

# %%
print(f"notebook ran in {time.perf_counter() - notebook_start:.0f} s")
report.finish()
