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
# # 18 · Memory optimisation
#
# "CUDA out of memory" is the error that ends more training runs than any
# other. Before reaching for a bigger GPU, it pays to know **where the
# memory goes** and which lever moves which part of it. This chapter
# measures everything it claims: every byte count below comes from the
# tensors of this run, and every speed figure from `helpers.bench`.
#
# **What you will learn**
# - the four parts of training memory: parameters, gradients, optimizer
#   state and activations, counted from the tensors themselves, and
#   activations measured exactly with `torch.autograd.graph.saved_tensors_hooks`;
# - activation checkpointing with `torch.utils.checkpoint.checkpoint` and
#   `checkpoint_sequential` on a deep stack: memory and step time with and
#   without, per number of segments, and proof that the gradients do not
#   change;
# - why `checkpoint` needs an explicit `use_reentrant` (and what goes wrong
#   without it);
# - what checkpointing really costs: forward calls, FLOPs and dispatched
#   operations counted, and why a small model pays more time than FLOPs;
# - gradient accumulation and bfloat16 autocast as memory levers, measured;
# - offloading saved activations with `torch.autograd.graph.save_on_cpu`, and
#   fusing the optimizer step into backward with
#   `Tensor.register_post_accumulate_grad_hook`;
# - 8-bit Adam from bitsandbytes against `torch.optim.Adam`: state bytes and
#   training curves on MNIST (and its paged optimizers);
# - the allocator's view on an accelerator: `memory_allocated` vs
#   `memory_reserved`, `memory_summary`, `expandable_segments`, and the CUDA
#   memory snapshot.
#
# **Prerequisites:** chapters 02 (autograd), 05 (an MLP on MNIST), 10
# (optimizers) and 15 (mixed precision).
#
# **Estimated time:** 45 minutes.

# %% tags=["parameters"]
WIDTH = 64  # features per residual block of the deep stack
DEPTH = 24  # residual blocks in the deep stack
BATCH_SIZE = 128  # samples per step on the deep stack
BREAKDOWN_BATCHES = (32, 128, 512)  # batch sizes in the memory-breakdown figure
SEGMENTS = (1, 2, 4, 8, 24)  # checkpoint_sequential segment counts to measure (each at most DEPTH)
MICRO_BATCHES = 4  # gradient accumulation: BATCH_SIZE is split into this many micro-batches
TIMING_SECONDS = 1.2  # seconds of timed runs per variant, split over TIMING_ROUNDS interleaved rounds
TIMING_ROUNDS = 4  # rounds of interleaved measurements: every variant is timed once per round
TIME_BAND = 0.25  # checkpoint_sequential(segments=1) must time within this fraction (+ IQR) of the plain step
MAX_RATIO_IQR = 0.5  # time-ratio claims are asserted only when the per-round ratios agree this well (IQR / median)
MNIST_STEPS = 300  # training steps per optimizer in the 8-bit Adam comparison
MNIST_BATCH = 128  # MNIST images per step
MNIST_HIDDEN = (256,)  # hidden widths of the MNIST MLP
LR = 1e-3  # learning rate of both Adams
MIN_STATE_RATIO = 3.5  # torch Adam's state must be at least this many times 8-bit Adam's
LOSS_RTOL = 0.05  # 8-bit Adam's final training loss may differ from torch Adam's by this fraction of it
ACCURACY_POINTS = 0.75  # ... and its test accuracy by at most this many percentage points
SEED = 0

# %% [markdown]
# ## Setup

# %%
import contextlib
import copy
import io
import os
import pickle
import subprocess
import sys
import time
import warnings
from functools import partial

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint, checkpoint_sequential, set_checkpoint_early_stop
from torch.utils.flop_counter import FlopCounterMode

import helpers.plotting  # noqa: F401  (the course's figure defaults)
from helpers.bench import Timing, measure, timing_table
from helpers.data import mnist
from helpers.device import pick_device, seed_everything
from helpers.exercises import check, solution  # noqa: F401  (solution: for when you are stuck)
from helpers.models import MLP
from helpers.paths import build_dir, rel
from helpers.report import ChapterReport

generator = seed_everything(SEED)
device = pick_device()
report = ChapterReport("18_memory_optimization")
notebook_start = time.perf_counter()
has_cuda = torch.cuda.is_available()
# The accelerator (CUDA, XPU, MPS, ...) if one is present: the allocator cells below use the
# device-generic torch.accelerator memory API, so they run on any of them.
accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
MB = 2**20
print(f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} CPU threads, accelerator: {accelerator}")

# %% [markdown]
# The byte counts in this chapter do not depend on the device: a float32
# tensor of a million elements takes 4 MB wherever it lives. So the
# measurements run on the CPU, where they are exact and repeatable, and the
# cells that need an accelerator (the allocator's own figures, the memory
# snapshot) run in addition when one is present. They take the device as a
# parameter and use `torch.accelerator`, so they work on any accelerator
# backend; only the CUDA-specific tools (`memory_summary`, the snapshot) are
# guarded by `torch.cuda.is_available()`.
#
# ## The model: a deep stack of residual blocks
#
# Each block is the feed-forward half of a transformer layer:
# `x + Linear(GELU(Linear(LayerNorm(x))))`, widening to `4 * WIDTH` in the
# middle. Stacking `DEPTH` of them gives a network that is deep but cheap,
# the shape where activation memory grows fastest: it scales with depth
# and batch and soon outweighs the rest (the breakdown below shows from
# which batch size on).


# %%
class Block(nn.Module):
    """x + fc2(gelu(fc1(norm(x)))): [B, width] -> [B, width]."""

    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


def make_stack(width=WIDTH, depth=DEPTH, seed=SEED):
    """A fresh nn.Sequential of `depth` Blocks, with the same weights for the same seed."""
    torch.manual_seed(seed)
    return nn.Sequential(*[Block(width) for _ in range(depth)])


stack = make_stack()
x_batch = torch.randn(BATCH_SIZE, WIDTH, generator=generator)
n_params = sum(p.numel() for p in stack.parameters())
print(f"{DEPTH} blocks of width {WIDTH}: {n_params:,} parameters; input batch {tuple(x_batch.shape)}")

# %% [markdown]
# ## Where the memory goes
#
# During training, four kinds of tensors take memory:
#
# 1. **parameters**: the weights themselves;
# 2. **gradients**: one `.grad` per parameter, same shape and dtype,
#    allocated by the first `backward()`;
# 3. **optimizer state**: SGD with momentum keeps one buffer per parameter,
#    Adam two (`exp_avg`, `exp_avg_sq`) plus a `step` counter;
# 4. **activations**: the intermediate results of the forward pass that
#    autograd keeps because the backward pass needs them. Their size grows
#    with the batch and the depth; the other three do not depend on the
#    batch at all.
#
# The first three we can count straight from the tensors: `numel() *
# element_size()` is a tensor's size in bytes. Activations are harder: they
# live inside the autograd graph. But autograd lets us watch them being
# saved. `torch.autograd.graph.saved_tensors_hooks(pack, unpack)` calls
# `pack(tensor)` for every tensor an operation saves for backward, and
# `unpack` when backward reads it. Our `pack` notes each tensor's storage
# (its memory block) and returns the tensor unchanged. Three details make
# the count exact:
#
# - a saved tensor may be a *view* (for example the transposed weight that
#   `Linear` saves), so we count the underlying `untyped_storage()`;
# - two operations may save the same tensor (one layer's output is the next
#   layer's input), so we count each storage once, keyed by its address;
# - parameters are saved too (a `Linear` needs its weight to compute the
#   input's gradient), but they are memory anyway, so we leave them out.


# %%
def saved_tensors(run, model):
    """Call run() and return (its result, {storage address: (bytes, dtype, shape)}) of what autograd saved.

    Storages of `model`'s parameters are left out; each storage is listed once.
    """
    param_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in param_storages:
            saved[storage.data_ptr()] = (storage.nbytes(), tensor.dtype, tuple(tensor.shape))
        return tensor  # keep the tensor itself: we only watch

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        result = run()
    return result, saved


def saved_bytes(run, model):
    """(result of run(), bytes of the distinct activations autograd saved for backward)."""
    result, saved = saved_tensors(run, model)
    return result, sum(nbytes for nbytes, _, _ in saved.values())


def tensor_bytes(tensors):
    """Total bytes of an iterable of tensors."""
    return sum(t.numel() * t.element_size() for t in tensors)


def _quartiles(values):
    q = torch.tensor(values, dtype=torch.float64).quantile(torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    return q[1].item(), (q[2] - q[0]).item()


def lower_quartile(values):
    """The 25th percentile of a list of floats."""
    return torch.tensor(values, dtype=torch.float64).quantile(0.25).item()


def interleaved(fns, rounds=TIMING_ROUNDS, seconds=TIMING_SECONDS, per_round=False):
    """Time each of `fns` ({label: callable}) in `rounds` alternating rounds with helpers.bench.measure.

    A load that comes and goes on a shared machine then hits every variant alike. Returns
    ({label: Timing}, {label: (median, IQR) of the per-round time ratios to the first label}); a
    Timing's median and IQR are over its round medians, so its `blocks` column counts rounds.
    With per_round=True a third dict gives {label: list of the per-round ratios}.
    """
    runs_of = {label: [] for label in fns}
    for _ in range(rounds):
        for label, fn in fns.items():
            runs_of[label].append(measure(fn, label=label, min_run_time=seconds / rounds))
    timings, ratios, round_ratios = {}, {}, {}
    first = runs_of[next(iter(fns))]
    for label, runs in runs_of.items():
        median, iqr = _quartiles([t.median_s for t in runs])
        timings[label] = Timing(label, median, iqr, calls=sum(t.calls for t in runs), blocks=rounds)
        round_ratios[label] = [t.median_s / f.median_s for t, f in zip(runs, first)]
        ratios[label] = _quartiles(round_ratios[label])
    return (timings, ratios, round_ratios) if per_round else (timings, ratios)


# %% [markdown]
# What does one block save? The list below is what autograd keeps for one
# block and a batch of `BATCH_SIZE`:

# %%
# NBVAL_CHECK_OUTPUT
_, one_block = saved_tensors(lambda: stack[0](x_batch), stack[0])
for nbytes, dtype, shape in one_block.values():
    print(f"{str(shape):12s} {str(dtype):14s} {nbytes / 1024:8.1f} KiB")
block_bytes = sum(nbytes for nbytes, _, _ in one_block.values())
print(f"one block: {block_bytes / 1024:.1f} KiB = {block_bytes / (4 * BATCH_SIZE * WIDTH):.2f} x (batch x width) floats")

# %% [markdown]
# Reading it from the top: the block's input (LayerNorm needs it), the
# per-row mean and reciprocal standard deviation (LayerNorm), the
# normalised input (`fc1` needs it for its weight's gradient), `fc1`'s output
# (GELU needs its input) and GELU's output (`fc2` needs it). About ten
# `[batch, width]` floats per block, most of it in the 4x-wide middle.
#
# Now the full breakdown for one training step with Adam. We run one real
# step and count the gradients and the optimizer state from the tensors
# that exist afterwards.

# %%
def breakdown(batch_size):
    """Bytes of parameters, gradients, Adam state and saved activations for one training step."""
    model = make_stack()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    x = torch.randn(batch_size, WIDTH, generator=torch.Generator().manual_seed(SEED))
    out, activations = saved_bytes(lambda: model(x), model)
    out.square().mean().backward()
    optimizer.step()
    state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    return {
        "parameters": tensor_bytes(model.parameters()),
        "gradients": tensor_bytes(p.grad for p in model.parameters()),
        "Adam state": tensor_bytes(state),
        "activations": activations,
    }


# NBVAL_CHECK_OUTPUT
parts = {b: breakdown(b) for b in BREAKDOWN_BATCHES}
print(f"{'batch':>6s} " + " ".join(f"{name:>12s}" for name in parts[BREAKDOWN_BATCHES[0]]) + f" {'total':>10s}")
for b, part in parts.items():
    print(f"{b:6d} " + " ".join(f"{v / MB:9.2f} MB" for v in part.values()) + f" {sum(part.values()) / MB:7.2f} MB")

# %%
fig, ax = plt.subplots(figsize=(7, 3))
bottom = [0.0] * len(parts)
for name, colour in zip(parts[BREAKDOWN_BATCHES[0]], ("tab:blue", "tab:orange", "tab:green", "tab:red")):
    heights = [part[name] / MB for part in parts.values()]
    ax.bar([str(b) for b in parts], heights, bottom=bottom, label=name, color=colour)
    bottom = [b + h for b, h in zip(bottom, heights)]
ax.set(xlabel="batch size", ylabel="MB", title=f"one Adam step, {DEPTH} blocks of width {WIDTH}")
ax.legend(loc="upper left", fontsize=8)
plt.show()

main = parts[BATCH_SIZE] if BATCH_SIZE in parts else breakdown(BATCH_SIZE)
for name, value in main.items():
    _ = report.record(f"{name} (batch {BATCH_SIZE})", round(value / MB, 2), "MB")

# %% [markdown]
# Parameters, gradients and Adam state stand in the fixed ratio 1 : 1 : 2
# (Adam's two moments per weight, plus 4 bytes of `step` per tensor);
# together that is **16 bytes per parameter** in float32, before a single
# activation. Activations scale with the batch and soon dominate. The checks
# below confirm the counts against the formulas:

# %%
params_bytes = 4 * n_params
assert main["parameters"] == params_bytes and main["gradients"] == params_bytes, "float32: 4 bytes per parameter"
assert main["Adam state"] == 2 * params_bytes + 4 * len(list(stack.parameters())), "Adam: 2 moments + a 4-byte step"
small, large = parts[BREAKDOWN_BATCHES[0]], parts[BREAKDOWN_BATCHES[-1]]
scale = BREAKDOWN_BATCHES[-1] / BREAKDOWN_BATCHES[0]
assert abs(large["activations"] / small["activations"] - scale) < 0.01 * scale, "activations should scale with the batch"
assert all(large[k] == small[k] for k in ("parameters", "gradients", "Adam state")), "the rest does not depend on the batch"

# %% [markdown]
# ### On an accelerator: the allocator's own figures
#
# On a GPU, PyTorch does not call the driver for every tensor: its
# **caching allocator** requests large blocks (segments) from the device
# and hands out pieces of them. A freed tensor's memory goes back to the
# cache, not to the device, so the next allocation of that size is free of
# driver calls. That is why there are two figures:
#
# - `torch.accelerator.memory_allocated()`: bytes occupied by live tensors
#   now (`max_memory_allocated()` is the peak since
#   `reset_peak_memory_stats()`);
# - `torch.accelerator.memory_reserved()`: bytes the allocator holds from
#   the device, live tensors plus its cache. This, plus the CUDA context, is
#   what `nvidia-smi` shows, and it never falls below `memory_allocated`.
#   `torch.accelerator.empty_cache()` hands the unused cache back.
#
# On CUDA, `torch.cuda.memory_summary()` prints both, per pool, with
# allocation counts, as a table. What the peak of a step must hold at least:
# at the end of the forward, the parameters, the Adam state and all saved
# activations are alive together (the previous step's gradients were freed
# by `zero_grad(set_to_none=True)`), so the peak can be no lower than their
# sum; temporary buffers add to it. Whether it also exceeds our sum of all
# four parts depends on how many gradients exist before the activations are
# freed, so the cell prints both instead of asserting either. It also checks
# for a leak: deleting the model and the optimizer must give back at least
# their parameters, gradients and state.


# %%
def allocator_step_figures(device):
    """Two Adam steps of the deep stack on `device`; the allocator's figures in bytes (accelerators only).

    Asserts that the peak holds parameters + Adam state + activations (counted on the CPU in `main`),
    and that deleting the model and optimizer frees at least their parameters, gradients and state.
    """
    acc = torch.accelerator
    acc.synchronize()
    start = acc.memory_allocated()
    model = make_stack().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    x = x_batch.to(device)
    for _step in range(2):  # the second step has the state and the gradients from the start
        acc.synchronize()
        acc.reset_peak_memory_stats()
        before = acc.memory_allocated()
        optimizer.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        optimizer.step()
        acc.synchronize()
    figures = {"before step": before - start, "peak of step": acc.max_memory_allocated() - start}
    del model, optimizer, x
    figures["allocated after del"] = acc.memory_allocated() - start
    figures["reserved after del"] = acc.memory_reserved()
    acc.empty_cache()
    figures["reserved after empty_cache"] = acc.memory_reserved()
    lower = main["parameters"] + main["Adam state"] + main["activations"]
    assert figures["peak of step"] >= lower, f"the peak {figures['peak of step']} should hold params + state + activations {lower}"
    fixed = main["parameters"] + main["gradients"] + main["Adam state"]
    freed = figures["before step"] - figures["allocated after del"]
    assert freed >= fixed, f"del model, optimizer freed only {freed} of {fixed} bytes: something keeps them alive"
    return figures


if accelerator is not None:
    figures = allocator_step_figures(accelerator)
    for name, value in figures.items():
        print(f"{name:28s} {value / MB:8.2f} MB")
    print(f"counted on the CPU: parameters + state + activations = "
          f"{(main['parameters'] + main['Adam state'] + main['activations']) / MB:.2f} MB; all four parts {sum(main.values()) / MB:.2f} MB")
    _ = report.record("accelerator peak of one Adam step", round(figures["peak of step"] / MB, 2), "MB")
    if has_cuda:
        print("\n".join(torch.cuda.memory_summary(abbreviated=True).splitlines()[:16]))
else:
    print("no accelerator: skipping torch.accelerator.memory_allocated / memory_reserved (the byte counts above hold on any device)")

# %% [markdown]
# **Fragmentation and `expandable_segments`.** The cache can hold plenty of
# free bytes and still fail an allocation: if the free space is scattered
# over many segments in pieces smaller than the request, a new segment is
# needed, and that can run out of memory while `memory_reserved` is far
# above `memory_allocated`. This happens when tensor sizes keep changing
# (variable sequence lengths, growing batches). The allocator option
# `expandable_segments:True` lets a segment grow in place (it maps more
# physical pages into a reserved virtual range), so allocations of changing
# size reuse one growing segment instead of splitting many. It is set
# through an environment variable before the first CUDA allocation; in
# torch 2.14 the variable is `PYTORCH_ALLOC_CONF` (the older
# `PYTORCH_CUDA_ALLOC_CONF` is still read for backward compatibility):
#
# ```
# PYTORCH_ALLOC_CONF=expandable_segments:True python train.py
# ```
#
# The cell below shows the settings of this run and, on CUDA, runs the
# pattern of a batch that keeps growing twice, in fresh processes (the
# setting is read once, at the first allocation) with
# `expandable_segments` off and on: it frees a tensor and then allocates one
# slightly larger, 40 times. Without expandable segments the freed block is
# too small for the next request, so the allocator reserves a new segment
# each time and caches the old one; with them, the allocator is designed
# to grow the one segment in place (on CUDA the cell asserts that the
# cache reserved but not allocated is not larger with the setting on). Compare the cache that is reserved but not allocated
# (`max_memory_reserved` against the final `memory_allocated`) of the two
# lines; on a CPU-only run the cell only prints the settings.

# %%
GROWING_BATCH = """
import torch
t = None
for i in range(1, 41):
    t = None  # free the previous batch, then allocate a slightly larger one
    t = torch.empty(i * 2**20, dtype=torch.float32, device="cuda")
torch.cuda.synchronize()
print(torch.cuda.max_memory_reserved(), torch.cuda.memory_allocated())
"""
print({name: os.environ.get(name, "(not set)") for name in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")})
idle_cache = {}  # setting -> peak reserved minus final allocated bytes
if has_cuda:
    for setting in ("expandable_segments:False", "expandable_segments:True"):
        env = {**os.environ, "PYTORCH_ALLOC_CONF": setting}
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        run = subprocess.run([sys.executable, "-c", GROWING_BATCH], env=env, capture_output=True, text=True, timeout=300)
        reserved, allocated = (int(v) for v in run.stdout.split())
        idle_cache[setting] = reserved - allocated
        print(f"{setting:27s} peak reserved {reserved / MB:7.0f} MB, allocated at the end {allocated / MB:5.0f} MB, "
              f"reserved minus allocated {(reserved - allocated) / MB:7.0f} MB")
    assert idle_cache["expandable_segments:True"] <= idle_cache["expandable_segments:False"], (
        f"expandable segments should not leave more cache reserved but unallocated: {idle_cache}")
else:
    print("no CUDA device: the allocator settings only affect the CUDA caching allocator")

# %% [markdown]
# ## Activation checkpointing
#
# Activations are the part we can trade for time. **Activation
# checkpointing** (also called gradient checkpointing or rematerialisation)
# runs a part of the network without keeping its activations, keeping only
# its input; during backward it runs that part's forward pass again to
# recreate them, just before they are needed. Memory falls; each
# checkpointed part runs its forward twice.
#
# PyTorch offers two entry points:
#
# - `checkpoint(fn, *args, use_reentrant=False)` wraps one call: here, each
#   block separately;
# - `checkpoint_sequential(sequential, segments, input, use_reentrant=False)`
#   cuts an `nn.Sequential` into `segments` consecutive parts of
#   `len(sequential) // segments` modules (the last part takes any
#   remainder) and checkpoints **all but the last**: backward needs the last
#   part's activations first, so recomputing them would gain nothing.
#
# Always pass `use_reentrant=False`; *Pitfalls* shows why.


# %%
def forward_plain(model, x):
    return model(x)


def forward_per_block(model, x):
    for block in model:
        x = checkpoint(block, x, use_reentrant=False)
    return x


def forward_segments(segments):
    def forward(model, x):
        return checkpoint_sequential(model, segments, x, use_reentrant=False)

    return forward


def forward_per_block_no_rng(model, x):
    for block in model:
        x = checkpoint(block, x, use_reentrant=False, preserve_rng_state=False)
    return x


variants = {"no checkpointing": forward_plain, "checkpoint per block": forward_per_block,
            "per block, preserve_rng_state=False": forward_per_block_no_rng}
variants.update({f"checkpoint_sequential, segments={s}": forward_segments(s) for s in SEGMENTS})


def grads_of(forward, model, x):
    """One forward and backward through `forward(model, x)`; the gradients as a list of tensors."""
    model.zero_grad(set_to_none=True)
    forward(model, x).square().mean().backward()
    return [p.grad.clone() for p in model.parameters()]


def train_step(forward, model, x):
    model.zero_grad(set_to_none=True)
    forward(model, x).square().mean().backward()


class OpCounter(TorchDispatchMode):
    """Counts the ATen operations dispatched inside it (forward, backward and recomputation alike)."""

    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def step_cost(forward, model, x):
    """One training step, counted: {"block calls": Block.forward calls, "flops": FLOPs, "ops": ATen ops}."""
    calls = [0]
    handles = [block.register_forward_pre_hook(lambda module, args: calls.__setitem__(0, calls[0] + 1)) for block in model]
    with FlopCounterMode(display=False) as flops, OpCounter() as ops:
        train_step(forward, model, x)
    for handle in handles:
        handle.remove()
    return {"block calls": calls[0], "flops": flops.get_total_flops(), "ops": ops.ops}


ckpt = {}
reference_grads = grads_of(forward_plain, stack, x_batch)
for name, forward in variants.items():
    _, nbytes = saved_bytes(partial(forward, stack, x_batch), stack)
    grads = grads_of(forward, stack, x_batch)
    max_diff = max((g - r).abs().max().item() for g, r in zip(grads, reference_grads))
    identical = all(torch.equal(g, r) for g, r in zip(grads, reference_grads))
    ckpt[name] = {"bytes": nbytes, "max_diff": max_diff, "identical": identical, **step_cost(forward, stack, x_batch)}
# Timed interleaved: every round times each variant once, so a load on the machine hits them alike.
step_timings, step_ratios, step_round_ratios = interleaved(
    {name: partial(train_step, forward, stack, x_batch) for name, forward in variants.items()}, per_round=True)
for name in ckpt:
    ckpt[name]["timing"], ckpt[name]["time ratio"] = step_timings[name], step_ratios[name]

plain = ckpt["no checkpointing"]
block_input_bytes = 4 * BATCH_SIZE * WIDTH  # what a checkpointed segment keeps: its input


def segment_formula(s):
    """(saved bytes, extra FLOPs) of checkpoint_sequential with s segments, from one block's figures."""
    per_segment = DEPTH // s  # the first s - 1 segments; the last takes the rest and is not checkpointed
    last = DEPTH - (s - 1) * per_segment
    rerun = (s - 1) * (per_segment * block_forward_flops - fc2_flops)  # early stop: each segment's last fc2 skipped
    return (s - 1) * block_input_bytes + last * block_bytes, rerun


with FlopCounterMode(display=False) as forward_flops:
    stack(x_batch)
block_forward_flops = forward_flops.get_total_flops() // DEPTH  # fc1 and fc2 (LayerNorm, GELU: no FLOPs counted)
fc2_flops = 2 * BATCH_SIZE * 4 * WIDTH * WIDTH  # one [B, 4W] @ [4W, W] product

# %%
# NBVAL_CHECK_OUTPUT
print(f"{'variant':36s} {'saved activations':>18s} {'of plain':>9s} {'block calls':>11s} {'FLOPs':>6s} {'ops':>6s} {'grads':>14s}")
for name, r in ckpt.items():
    grads_note = "bit-identical" if r["identical"] else f"diff {r['max_diff']:.1e}"
    print(f"{name:36s} {r['bytes'] / MB:15.2f} MB {r['bytes'] / plain['bytes']:9.1%} {r['block calls']:11d} "
          f"{r['flops'] / plain['flops']:5.2f}x {r['ops'] / plain['ops']:5.2f}x {grads_note:>14s}")

# %% [markdown]
# "FLOPs" and "ops" are the step's floating-point operations
# (`torch.utils.flop_counter.FlopCounterMode`) and dispatched ATen
# operations (a `TorchDispatchMode` that counts them), relative to the plain
# step; "block calls" counts `Block.forward` calls with a forward pre-hook.
# The step times come from `helpers.bench.measure`, **interleaved**: in
# each of `TIMING_ROUNDS` rounds every variant is timed once, so a load
# that comes and goes on the machine slows all of them alike. The table
# gives the median and IQR over the rounds ("blocks" counts rounds here;
# "speed-up" below 1 means slower); the last column is the median and IQR of
# the per-round ratio to the plain step, measured in the same round:

# %%
table = timing_table([r["timing"] for r in ckpt.values()]).splitlines()
print(f"{table[0]}  {'time / plain (IQR)':>20s}")
for line, r in zip(table[1:], ckpt.values()):
    print(f"{line}  {r['time ratio'][0]:11.2f}x ({r['time ratio'][1]:.2f})")

# %%
fig, (ax_mem, ax_time) = plt.subplots(1, 2, figsize=(9, 3))
seg_names = [f"checkpoint_sequential, segments={s}" for s in SEGMENTS]
ax_mem.plot(SEGMENTS, [ckpt[n]["bytes"] / MB for n in seg_names], "o-", label="checkpoint_sequential")
ax_mem.axhline(plain["bytes"] / MB, color="gray", ls="--", label="no checkpointing")
ax_mem.axhline(ckpt["checkpoint per block"]["bytes"] / MB, color="tab:green", ls=":", label="per block")
ax_mem.set(xscale="log", xlabel="segments", ylabel="MB", title="saved activations after forward", ylim=(0, None))
ax_mem.set_xticks(SEGMENTS, [str(s) for s in SEGMENTS])
ax_mem.legend(fontsize=8)
ax_time.errorbar(SEGMENTS, [ckpt[n]["time ratio"][0] for n in seg_names], yerr=[ckpt[n]["time ratio"][1] / 2 for n in seg_names],
                 fmt="o-", capsize=3, label="checkpoint_sequential")
ax_time.axhline(1.0, color="gray", ls="--", label="no checkpointing")
ax_time.axhline(ckpt["checkpoint per block"]["time ratio"][0], color="tab:green", ls=":", label="per block")
ax_time.set(xscale="log", xlabel="segments", ylabel="step time / plain", title="forward + backward time (bars: IQR)",
            ylim=(0, None))
ax_time.set_xticks(SEGMENTS, [str(s) for s in SEGMENTS])
ax_time.legend(fontsize=8)
plt.show()

per_block = ckpt["checkpoint per block"]
_ = report.record("saved activations, no checkpointing", round(plain["bytes"] / MB, 2), "MB")
_ = report.record("saved activations, checkpoint per block", round(per_block["bytes"] / MB, 2), "MB")
_ = report.record("checkpoint per block: memory saved", round(100 * (1 - per_block["bytes"] / plain["bytes"]), 1), "%")

# %% [markdown]
# How to read it:
#
# - **Per block**, only each block's input is kept: one `[batch, width]`
#   tensor instead of about ten, so the saved activations fall to about a
#   tenth.
# - **`checkpoint_sequential` with s segments** keeps the inputs of the
#   first s − 1 segments plus all activations of the last segment, which it
#   does not checkpoint: (s − 1) block inputs + (DEPTH − (s − 1)·⌊DEPTH/s⌋)
#   whole blocks, a formula the checks below compare with every row. With
#   **1 segment nothing is checkpointed at all**: the memory is exactly that
#   of the plain model. The more segments, the less is kept, but even
#   `segments=DEPTH` stays above the per-block figure: its last block is
#   the uncheckpointed last segment and keeps all of its activations
#   (about ten inputs' worth instead of one).
# - During backward, the segment being recomputed briefly holds its own
#   activations again, so the peak of backward is higher than the saved
#   bytes above, by up to one segment's worth (DEPTH / s blocks). The
#   textbook consequence is a middle ground of about √DEPTH segments when
#   the peak matters rather than the resting memory; we do not measure the
#   peak of backward here (on an accelerator, `max_memory_allocated` around
#   the backward call shows it).
# - The gradients are unchanged: the recomputation runs the same operations
#   on the same inputs. (`checkpoint` also restores the random-number state,
#   `preserve_rng_state=True`, so dropout draws the same masks the second
#   time.)
#
# ### What the recomputation costs
#
# The price is recomputation, and the counters show it: with a checkpoint
# per block, every block's `forward` runs twice per step (2 × DEPTH calls).
# A textbook estimate says that costs a third more compute, since a backward
# costs about two forwards (a `Linear` needs two matrix products in backward,
# one in forward). The measured FLOPs grow by less, because the
# non-reentrant checkpoint **stops recomputing early**: it reruns a segment
# only until it has regenerated the last tensor that backward needs, then
# aborts. In our block nothing saves `fc2`'s output (the residual sum saves
# nothing), so the **last** `fc2` product of each checkpointed segment is
# never rerun. The `fc2`s inside a segment are rerun: their output is the
# next block's input, which that block's LayerNorm saves. So a checkpointed
# segment of L blocks costs L forwards minus one `fc2` product, and
# `segments=8` (7 checkpointed segments of 3 blocks) reruns more than the
# checkpoint per block (24 one-block segments, each skipping its `fc2`).
# The recomputation reruns LayerNorm, `fc1` and GELU in every checkpointed
# block. Turning early stopping
# off (`torch.utils.checkpoint.set_checkpoint_early_stop(False)`) gives the
# full extra forward:

# %%
with set_checkpoint_early_stop(False):
    no_early_stop = step_cost(forward_per_block, stack, x_batch)
textbook_ratio = (plain["flops"] + forward_flops.get_total_flops()) / plain["flops"]
early_ratio, full_ratio = per_block["flops"] / plain["flops"], no_early_stop["flops"] / plain["flops"]
time_ratio, time_ratio_iqr = per_block["time ratio"]  # median and IQR of the per-round ratios
time_ratio_q1 = lower_quartile(step_round_ratios["checkpoint per block"])  # 3 rounds in 4 are above it
time_spread = time_ratio_iqr / time_ratio  # relative IQR: do the rounds agree well enough to decide?
ops_ratio = per_block["ops"] / plain["ops"]
no_rng_ratio, no_rng_iqr = ckpt["per block, preserve_rng_state=False"]["time ratio"]
nearer = "the op ratio" if abs(time_ratio - ops_ratio) < abs(time_ratio - early_ratio) else "the FLOP ratio"
print(f"plain step: forward {forward_flops.get_total_flops() / 1e6:.0f} MFLOP, forward + backward {plain['flops'] / 1e6:.0f} MFLOP")
print(f"checkpoint per block, FLOPs vs plain: early stop (default) {early_ratio:.3f}x, "
      f"early stop off {full_ratio:.3f}x, one full extra forward {textbook_ratio:.3f}x")
print(f"checkpoint per block: {ops_ratio:.2f}x the ATen ops, step time {time_ratio:.2f}x (IQR {time_ratio_iqr:.2f}, "
      f"lower quartile {time_ratio_q1:.2f}, {TIMING_ROUNDS} interleaved rounds): nearer {nearer}")
ops_verdict = ("above" if time_ratio - time_ratio_iqr > ops_ratio else "below" if time_ratio + time_ratio_iqr < ops_ratio
               else "within the noise of")
print(f"the step-time ratio is {ops_verdict} the op ratio on this run")
rng_verdict = ("faster than" if no_rng_ratio + no_rng_iqr < time_ratio else "slower than" if no_rng_ratio - no_rng_iqr > time_ratio
               else "within the noise of")
print(f"per block with preserve_rng_state=False: {no_rng_ratio:.2f}x (IQR {no_rng_iqr:.2f}) the plain step, "
      f"{rng_verdict} the default per-block checkpoint on this run")
_ = report.record("checkpoint per block: FLOP ratio", round(early_ratio, 3), "x")
_ = report.record("checkpoint per block: step-time ratio", round(time_ratio, 2), "x")

# %% [markdown]
# With a checkpoint per block, early stopping saves exactly one `fc2`
# product per block; for every row of `checkpoint_sequential` the extra
# FLOPs equal (s − 1) × (⌊DEPTH/s⌋ block forwards − one `fc2`). Both are
# asserted below. Step time grows by more than the FLOPs on this model
# (compare the timing table with the FLOP ratio). The check below asserts
# that the lower quartile of the per-round time ratio exceeds the FLOP
# ratio (so at least three rounds in four do), when the rounds agree well
# enough to decide (IQR of the ratio at most `MAX_RATIO_IQR` of its
# median); otherwise it prints that the timing was too noisy and leaves the
# time claims unchecked. The line printed by the checks says which
# happened on this run. A block of width 64 on a batch of 128 is tiny:
# each operation takes microseconds, so the number of operations weighs as
# much as their FLOPs (the printout says which ratio the time ratio is
# nearer on this run). The op count grows much faster than the FLOPs: the
# recomputation reruns the cheap operations too (LayerNorm, GELU, the
# additions), and checkpointing adds its own bookkeeping per call
# (detaching the input, saving and restoring the random-number state, the
# saved-tensor hooks that trigger the recomputation, the Python around it).
# That bookkeeping costs time but dispatches few or no ATen operations, so
# the time ratio can exceed even the op ratio; the printout above says
# whether it did on this run. One piece of it can be switched off:
# `preserve_rng_state=False` skips saving and restoring the random-number
# state (safe here: the block draws no random numbers; with dropout it
# would change the gradients). The extra row in the table times it, and
# the last printed line compares it with the default.
# On a large model, where the matrix products dominate the step, the time
# ratio should come closer to the FLOP ratio; we do not measure that here,
# but it means a figure measured on a toy model overstates the cost.
#
# The checks:

# %%
for name, r in ckpt.items():
    assert r["max_diff"] <= 1e-6, f"{name}: the gradients should not change with checkpointing (max diff {r['max_diff']})"
assert per_block["bytes"] < 0.25 * plain["bytes"], "checkpointing every block should keep far fewer activations"
if 1 in SEGMENTS:
    assert ckpt["checkpoint_sequential, segments=1"]["bytes"] == plain["bytes"], "one segment checkpoints nothing"
for s in SEGMENTS:
    if s > 1:
        assert ckpt[f"checkpoint_sequential, segments={s}"]["bytes"] < plain["bytes"], f"{s} segments should save memory"
        recomputed = (s - 1) * (DEPTH // s)  # every segment but the last runs its blocks twice
        calls = ckpt[f"checkpoint_sequential, segments={s}"]["block calls"]
        assert calls == DEPTH + recomputed, f"{s} segments: expected {DEPTH + recomputed} block calls, got {calls}"
    formula_bytes, formula_flops = segment_formula(s)
    r = ckpt[f"checkpoint_sequential, segments={s}"]
    assert r["bytes"] == formula_bytes, f"{s} segments: {r['bytes']} saved bytes, the formula says {formula_bytes}"
    assert r["flops"] - plain["flops"] == formula_flops, f"{s} segments: {r['flops'] - plain['flops']} extra FLOPs, formula {formula_flops}"
assert per_block["bytes"] == DEPTH * block_input_bytes, "per block: only each block's input is kept"
more = [ckpt[n]["bytes"] for n in seg_names]
assert all(a >= b for a, b in zip(more, more[1:])), "more segments should never keep more activations"
assert plain["block calls"] == DEPTH and per_block["block calls"] == 2 * DEPTH, "per block: every forward runs twice"
assert no_early_stop["flops"] - plain["flops"] == forward_flops.get_total_flops(), "without early stop: one full extra forward"
assert no_early_stop["flops"] - per_block["flops"] == DEPTH * fc2_flops, "early stop should skip exactly fc2's product in each block"
assert early_ratio < textbook_ratio, "early stopping should make the recomputation cheaper than a full forward"
assert ops_ratio > early_ratio + 0.2, "checkpointing should add far more operations than FLOPs"
if time_spread <= MAX_RATIO_IQR:  # the timing claims, when the rounds agree well enough to decide them
    assert time_ratio_q1 > early_ratio, (
        f"checkpoint per block: step time {time_ratio:.2f}x (lower quartile {time_ratio_q1:.2f}) should exceed the FLOP ratio {early_ratio:.2f}x")
    if 1 in SEGMENTS:  # a sanity check of the timing itself: segments=1 runs the plain model
        one, one_iqr = ckpt["checkpoint_sequential, segments=1"]["time ratio"]
        assert abs(one - 1) <= TIME_BAND + one_iqr, f"segments=1 does the plain work but timed {one:.2f}x (IQR {one_iqr:.2f})"
    print(f"timing checked: per-round ratio lower quartile {time_ratio_q1:.2f} > FLOP ratio {early_ratio:.2f} "
          f"(relative IQR {time_spread:.2f} <= {MAX_RATIO_IQR})")
else:
    print(f"timing too noisy to decide (ratio IQR {time_spread:.2f} of the median > {MAX_RATIO_IQR}): time claims not checked on this run")
print("checkpointing: less memory, same gradients, one (early-stopped) extra forward per checkpointed block")

# %% [markdown]
# ## Gradient accumulation
#
# Activations scale with the batch, so a batch of B can also be processed as
# k **micro-batches** of B/k: forward and backward each one, let the
# gradients add up in `.grad` (chapter 02), and step the optimizer once.
# Only one micro-batch's activations exist at a time. To get exactly the
# gradient of the whole batch, scale each micro-batch's loss by 1/k, because
# the loss is a mean over the batch.

# %%
assert BATCH_SIZE % MICRO_BATCHES == 0, "BATCH_SIZE must split into MICRO_BATCHES equal parts"
micro = BATCH_SIZE // MICRO_BATCHES


def accumulate_step(model, batches, watch=False):
    """Gradients of one optimizer step from a list of equal-sized batches.

    With watch=True, the forward passes run under our saved-tensor hooks and the largest saved bytes
    of a micro-batch is returned; with watch=False (for timing: the hooks cost time) it returns None.
    """
    model.zero_grad(set_to_none=True)
    largest = 0
    for xb in batches:
        if watch:
            out, nbytes = saved_bytes(partial(model, xb), model)
            largest = max(largest, nbytes)
        else:
            out = model(xb)
        (out.square().mean() / len(batches)).backward()  # / k: the mean over the whole batch
    return largest if watch else None


# Separate tensors, as a DataLoader with batch_size=micro would deliver them. (Slices of x_batch
# would be views that share its storage, and our storage-based count would charge each the whole batch.)
micro_batches = [chunk.clone() for chunk in x_batch.chunk(MICRO_BATCHES)]
full_bytes = accumulate_step(stack, [x_batch], watch=True)  # memory: one pass with the hooks
full_grads = [p.grad.clone() for p in stack.parameters()]
micro_bytes = accumulate_step(stack, micro_batches, watch=True)
micro_grads = [p.grad.clone() for p in stack.parameters()]
accum_diff = max((a - b).abs().max().item() for a, b in zip(full_grads, micro_grads))
accum_close = all(torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(full_grads, micro_grads))
# time: other passes, without the hooks
accum_timings, accum_ratios = interleaved({f"1 batch of {BATCH_SIZE}": lambda: accumulate_step(stack, [x_batch]),
                                            f"{MICRO_BATCHES} micro-batches of {micro}": lambda: accumulate_step(stack, micro_batches)})
t_full, t_micro = accum_timings.values()
accum_time, accum_iqr = list(accum_ratios.values())[1]
print(f"saved activations: batch of {BATCH_SIZE}: {full_bytes / MB:.2f} MB; micro-batch of {micro}: {micro_bytes / MB:.2f} MB "
      f"({full_bytes / micro_bytes:.2f}x less)")
print(f"largest gradient difference: {accum_diff:.1e}")
print(timing_table([t_full, t_micro]))
accum_verdict = ("slower than" if accum_time - accum_iqr > 1 else "faster than" if accum_time + accum_iqr < 1
                 else "within the noise of")
print(f"{MICRO_BATCHES} micro-batches took {accum_time:.2f}x (IQR {accum_iqr:.2f}) the time of one batch, per round: "
      f"{accum_verdict} one batch on this run")
_ = report.record("gradient accumulation: activation memory ratio", round(full_bytes / micro_bytes, 2), "x")

# %%
assert abs(full_bytes / micro_bytes - MICRO_BATCHES) < 0.05 * MICRO_BATCHES, "k micro-batches should keep 1/k of the activations"
assert accum_close, f"accumulated gradients should equal the full-batch gradients (max diff {accum_diff:.1e})"

# %% [markdown]
# The same gradients for a k-th of the activation memory. What it does to
# the time depends on the machine and the model (the table: timed
# interleaved, without our saved-tensor hooks; the last line says whether
# the ratio's IQR clears 1 on this run, and no assert rests on it). Each
# micro-batch dispatches the same operations as the full batch, so k
# micro-batches pay k times the fixed per-operation cost, and smaller matrix
# products usually use the hardware less well; on a small CPU model the
# smaller working set can fit the caches better and win some of that back.
# The last line above says which way it went on this run. Two cautions:
# BatchNorm sees only the micro-batch (its statistics get noisier), and the
# loss must be scaled by 1/k (or the learning rate divided by k).
#
# ## Automatic mixed precision: half-size activations
#
# Chapter 15 used `torch.autocast` for speed. It saves memory too: inside
# autocast, matrix products run in bfloat16 and return bfloat16 tensors, so
# the activations they produce, and that autograd saves, take 2 bytes per
# element instead of 4. The parameters stay float32 (so do their gradients
# and the optimizer state): autocast casts a *copy* of each weight to
# bfloat16 for the product. We measure on the CPU, where bfloat16 autocast
# works on any processor:

# %%
_, saved_fp32 = saved_tensors(lambda: stack(x_batch), stack)
with torch.autocast("cpu", dtype=torch.bfloat16):
    amp_out, saved_bf16 = saved_tensors(lambda: stack(x_batch), stack)
weight_shapes = {tuple(p.shape) for p in stack.parameters()} | {tuple(p.shape)[::-1] for p in stack.parameters()}


def split_saved(saved):
    """Bytes of saved tensors by kind: activations per dtype, and bfloat16 copies of weights."""
    kinds = {}
    for nbytes, dtype, shape in saved.values():
        kind = "bf16 weight copies" if dtype == torch.bfloat16 and shape in weight_shapes else f"{dtype} activations"
        kinds[kind] = kinds.get(kind, 0) + nbytes
    return kinds


amp_total = sum(n for n, _, _ in saved_bf16.values())
fp32_total = sum(n for n, _, _ in saved_fp32.values())
print(f"float32 forward:   {fp32_total / MB:6.2f} MB saved  {split_saved(saved_fp32)}")
print(f"bfloat16 autocast: {amp_total / MB:6.2f} MB saved  " + str({k: f"{v / MB:.2f} MB" for k, v in split_saved(saved_bf16).items()}))
amp_out.square().mean().backward()
print("parameter dtypes:", {str(p.dtype) for p in stack.parameters()}, "| gradient dtypes:", {str(p.grad.dtype) for p in stack.parameters()})
amp_activations = amp_total - split_saved(saved_bf16).get("bf16 weight copies", 0)
print(f"activations alone (without the weight copies): {amp_activations / fp32_total:.1%} of float32")
_ = report.record("bf16 autocast: saved activations vs float32", round(amp_activations / fp32_total, 3), "x")
_ = report.record("bf16 autocast: all saved tensors vs float32", round(amp_total / fp32_total, 3), "x")

# %%
assert amp_activations < 0.7 * fp32_total, "bfloat16 autocast should shrink the saved activations"
assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in stack.parameters()), (
    "autocast must leave the parameters and their gradients in float32"
)

# %% [markdown]
# The activations shrink to a bit more than half. Not all of them turn
# bfloat16: the residual stream `x + ...` stays float32 (adding a bfloat16
# result to a float32 tensor gives float32), so the block inputs that
# LayerNorm saves, with its per-row statistics, keep 4 bytes per element.
# Autocast also saves the **bfloat16 copies of the weights** it made for the
# products (one per weight and forward pass); they scale with the model, not
# the batch, so with a large batch they matter less. On a GPU, the same
# comparison with the allocator's peak:

# %%
def forward_peaks(device):
    """Allocator peak of one forward on `device` (an accelerator), float32 vs bfloat16 autocast, in bytes."""
    acc = torch.accelerator
    model, x = make_stack().to(device), x_batch.to(device)
    peaks = {}
    for label, use_amp in (("float32", False), ("bf16 autocast", True)):
        model.zero_grad(set_to_none=True)
        acc.synchronize()
        acc.reset_peak_memory_stats()
        base = acc.memory_allocated()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp):
            out = model(x)
        acc.synchronize()
        peaks[label] = acc.max_memory_allocated() - base  # the forward's allocations: mostly activations
        out.float().square().mean().backward()
        del out
    return peaks


if accelerator is not None:
    peaks = forward_peaks(accelerator)
    print({k: f"{v / MB:.2f} MB" for k, v in peaks.items()})
    assert peaks["bf16 autocast"] < peaks["float32"], "bf16 autocast should lower the forward's peak"
    _ = report.record("accelerator bf16 autocast: forward peak vs float32", round(peaks["bf16 autocast"] / peaks["float32"], 3), "x")
else:
    print("no accelerator: skipping the max_memory_allocated comparison of float32 and bf16 autocast")

# %% [markdown]
# ## Offloading saved activations: `save_on_cpu`
#
# When the activations do not fit on the GPU but host memory is plentiful,
# they can wait in CPU memory until backward needs them.
# `torch.autograd.graph.save_on_cpu(pin_memory=False, device_type="cuda")`
# (its defaults) is a ready-made pair of saved-tensor hooks: its `pack`
# copies every tensor autograd saves to the CPU, its `unpack` copies it back
# to the tensor's device during backward. It trades device memory for
# host-device transfers. The two settings of `pin_memory` take different
# paths (we read them in `torch/autograd/graph.py` of this version):
#
# - `pin_memory=False`: `pack` returns `tensor.cpu()`, which for a tensor
#   already on the CPU is the tensor itself, so on a CPU-only machine
#   nothing is copied;
# - `pin_memory=True`: `pack` allocates a new CPU tensor with
#   `torch.empty(..., pin_memory=...)` (page-locked when the backend named
#   by `device_type` is available, so the copy can be asynchronous) and
#   fills it with `copy_`: a full copy of every saved tensor, **even on the
#   CPU**.
#
# We wrap its `pack` to watch what each setting does on `device`:


# %%
def offload_forward(device, offload, pin_memory=False):
    """Forward of the deep stack on `device`, optionally under save_on_cpu(pin_memory=pin_memory).

    Returns (output, list of (device of the saved tensor, device it is kept on, kept storage is the
    original storage, bytes)), and the accelerator bytes allocated by the forward (None on the CPU).
    """
    model, x = make_stack().to(device), x_batch.to(device)
    packed = []
    # device_type names the backend whose pinned memory pack uses. Not "cpu" for a CPU run:
    # torch.cpu.is_available() is True, so pin_memory=True would ask for pinned memory and fail
    # without an accelerator; with "cuda" there, pack falls back to ordinary memory.
    hooks = torch.autograd.graph.save_on_cpu(pin_memory=pin_memory, device_type=device.type if device.type != "cpu" else "cuda")
    inner_pack = hooks.pack_hook

    def watching_pack(tensor):
        original_device, kept = inner_pack(tensor)
        same = kept.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()
        packed.append((tensor.device, kept.device, same, tensor.untyped_storage().nbytes()))
        return original_device, kept

    hooks.pack_hook = watching_pack  # read by save_on_cpu's __enter__
    on_accelerator = device.type != "cpu"
    if on_accelerator:
        torch.accelerator.synchronize()
        base = torch.accelerator.memory_allocated()
    with hooks if offload else contextlib.nullcontext():
        out = model(x)
    allocated = torch.accelerator.memory_allocated() - base if on_accelerator else None
    out.square().mean().backward()  # unpack copies them back
    grads = [p.grad.to("cpu") for p in model.parameters()]
    return packed, allocated, grads


packed, offloaded_alloc, offload_grads = offload_forward(device, offload=True)
pinned_packed, _, pinned_grads = offload_forward(device, offload=True, pin_memory=True)
_, plain_alloc, plain_grads = offload_forward(device, offload=False)
kept_on = {str(kept) for _, kept, _, _ in packed}
copied = sum(nbytes for _, _, same, nbytes in packed if not same)
pinned_copies = sum(not same for _, _, same, _ in pinned_packed)
for label, entries in (("pin_memory=False", packed), ("pin_memory=True ", pinned_packed)):
    new = [nbytes for _, _, same, nbytes in entries if not same]
    print(f"device {device}, save_on_cpu({label}): packed {len(entries)} saved tensors, kept on "
          f"{ {str(kept) for _, kept, _, _ in entries} }; new copies: {len(new)} ({sum(new) / MB:.2f} MB of storages)")
if offloaded_alloc is not None:
    print(f"allocated on {device} after the forward: {plain_alloc / MB:.2f} MB plain, {offloaded_alloc / MB:.2f} MB with save_on_cpu")
assert kept_on == {"cpu"}, "save_on_cpu keeps every saved tensor on the CPU"
assert all(torch.equal(a, b) for a, b in zip(offload_grads, plain_grads)), "offloading must not change the gradients"
assert all(torch.equal(a, b) for a, b in zip(pinned_grads, plain_grads)), "pin_memory=True must not change the gradients"
assert pinned_copies == len(pinned_packed), "pin_memory=True should pack every saved tensor into a new CPU tensor"
if device.type == "cpu":
    assert copied == 0, "on the CPU, save_on_cpu(pin_memory=False) should copy nothing (tensor.cpu() returns the tensor itself)"
else:
    assert offloaded_alloc < plain_alloc, "save_on_cpu should lower the device memory held after the forward"

# %% [markdown]
# On the CPU, with `pin_memory=False` every packed tensor is the original
# storage: nothing moves; with `pin_memory=True` every one is a new copy, so
# it costs a copy of all saved tensors for nothing. On a GPU, the saved
# tensors leave the device (note that parameters are
# saved too, so each forward also copies the weights it uses; combine
# `save_on_cpu` with checkpointing or use it on the activation-heavy part of
# a model only). The cost is bandwidth: every saved byte crosses the PCIe
# or NVLink bus twice per step.
#
# ## Fusing the optimizer step into backward
#
# In an ordinary step, `backward()` fills every `.grad`, and only then does
# `optimizer.step()` run: at the end of backward, all gradients, as many
# bytes as the parameters, are alive at once. If each parameter is
# updated **as soon as its gradient is ready**, and its gradient freed
# right away, at most a few gradients exist at any moment.
# `Tensor.register_post_accumulate_grad_hook(hook)` calls `hook(param)`
# just after backward has accumulated `param.grad`; with one optimizer per
# parameter, the hook steps it and sets the gradient to `None` (the recipe
# of the PyTorch tutorial "How to save memory by fusing the optimizer step
# into the backward pass"). We count the bytes of live `.grad` tensors each
# time a gradient becomes ready:


# %%
def grads_alive_peak(fused):
    """One Adam step of the deep stack; (largest bytes of live .grad tensors during backward, model)."""
    model = make_stack()
    params = list(model.parameters())
    peak = [0]

    def watch(param):
        peak[0] = max(peak[0], tensor_bytes(p.grad for p in params if p.grad is not None))

    if fused:
        optimizers = {p: torch.optim.Adam([p], lr=LR) for p in params}

        def step_now(param):
            watch(param)
            optimizers[param].step()
            param.grad = None  # freed right after its step

        handles = [p.register_post_accumulate_grad_hook(step_now) for p in params]
    else:
        optimizer = torch.optim.Adam(params, lr=LR)
        handles = [p.register_post_accumulate_grad_hook(watch) for p in params]
    model(x_batch).square().mean().backward()
    if not fused:
        optimizer.step()
    for handle in handles:
        handle.remove()
    return peak[0], model


ordinary_peak, ordinary_model = grads_alive_peak(fused=False)
fused_peak, fused_model = grads_alive_peak(fused=True)
largest_param = max(tensor_bytes([p]) for p in stack.parameters())
step_diff = max((a - b).abs().max().item() for a, b in zip(ordinary_model.parameters(), fused_model.parameters()))
print(f"live gradients at the peak: ordinary step {ordinary_peak / MB:.2f} MB, fused into backward {fused_peak / MB:.3f} MB "
      f"(the largest parameter: {largest_param / MB:.3f} MB)")
print(f"largest parameter difference after one step: {step_diff:.1e}")
_ = report.record("fused optimizer step: peak live gradients", round(fused_peak / MB, 3), "MB")
assert ordinary_peak == params_bytes, "an ordinary step has all gradients alive at the end of backward"
assert fused_peak == largest_param, "fused: only the gradient being stepped should be alive"
assert step_diff < 1e-6, f"the fused step should update the parameters as an ordinary Adam step does (diff {step_diff:.1e})"

# %% [markdown]
# The same update, with the gradients' memory reduced to one parameter's.
# The limits: there is no moment when all gradients exist, so gradient
# clipping by the global norm and gradient accumulation do not work this
# way; and one optimizer per parameter means no multi-tensor (`foreach`)
# kernels across parameters.
#
# ## 8-bit optimizer state: bitsandbytes
#
# Adam's state is twice the size of the model. **8-bit Adam** (Dettmers et
# al. 2022, "8-bit Optimizers via Block-wise Quantization") stores both
# moments as one byte per element: each block of 256 values is scaled by its
# own largest magnitude (`absmax`, one float32 per block) and mapped through
# a non-uniform 256-entry code (`qmap`). The update itself is computed in
# float32, block by block. `bitsandbytes.optim.Adam8bit` is a drop-in
# replacement for `torch.optim.Adam`; small tensors (fewer than
# `min_8bit_size = 4096` elements, such as biases) keep float32 state.
#
# We train the same MLP on MNIST twice, from the same initial weights on the
# same batches, once with each optimizer. Warnings and the lines
# bitsandbytes writes to stderr (for example optional kernels it could not
# load) are captured and printed.
#
# bitsandbytes has a second memory lever: **paged optimizers**
# (`bnb.optim.PagedAdamW`, `PagedAdamW8bit`, ...). They keep the optimizer
# state in CUDA unified memory, which the driver pages out to CPU memory
# when the GPU runs short and back in when the step needs it, so a memory
# spike (one unusually long batch) slows a step down instead of ending the
# run with an out-of-memory error. They need a CUDA GPU; we only name them.

# %%
stderr_lines = io.StringIO()
with warnings.catch_warnings(record=True) as bnb_warnings, contextlib.redirect_stderr(stderr_lines):
    warnings.simplefilter("always")
    try:
        import bitsandbytes as bnb
    except ImportError as err:
        bnb = None
        print(f"bitsandbytes is not available ({err}): skipping the 8-bit Adam comparison")
for w in bnb_warnings:
    print(f"warning while importing bitsandbytes: {w.category.__name__}: {w.message}")
for line in stderr_lines.getvalue().splitlines():
    print(f"bitsandbytes on stderr: {line}")
if bnb is not None:
    print(f"bitsandbytes {bnb.__version__}")

train_set, test_set = mnist(train=True), mnist(train=False)
mnist_x = ((train_set.data.float() / 255 - 0.1307) / 0.3081).flatten(1)
mnist_y = train_set.targets
test_x = ((test_set.data.float() / 255 - 0.1307) / 0.3081).flatten(1)
test_y = test_set.targets
batch_order = torch.randint(0, len(mnist_y), (MNIST_STEPS, MNIST_BATCH), generator=torch.Generator().manual_seed(SEED))
other_order = torch.randint(0, len(mnist_y), (MNIST_STEPS, MNIST_BATCH), generator=torch.Generator().manual_seed(SEED + 1))
torch.manual_seed(SEED)
initial_mlp = MLP(784, MNIST_HIDDEN, 10, dropout=0.0)


def train_mnist(make_optimizer, order=batch_order):
    """Train a copy of initial_mlp on the batches `order` ([steps, batch] indices); return (model, optimizer, losses)."""
    model = copy.deepcopy(initial_mlp)
    optimizer = make_optimizer(model.parameters())
    losses = []
    for idx in order:
        loss = F.cross_entropy(model(mnist_x[idx]), mnist_y[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model, optimizer, losses


def step_only(make_optimizer):
    """A callable running optimizer.step() alone, on fixed gradients of one MNIST batch (for timing)."""
    model = copy.deepcopy(initial_mlp)
    optimizer = make_optimizer(model.parameters())
    F.cross_entropy(model(mnist_x[batch_order[0]]), mnist_y[batch_order[0]]).backward()
    return optimizer.step


def state_bytes(optimizer):
    """Bytes of every tensor in optimizer.state (bitsandbytes keeps `step` as a plain int)."""
    return tensor_bytes(v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v))


@torch.no_grad()
def test_accuracy(model):
    return (model(test_x).argmax(1) == test_y).float().mean().item()


runs = {"torch.optim.Adam": lambda params: torch.optim.Adam(params, lr=LR)}
if bnb is not None:
    runs["bitsandbytes Adam8bit"] = lambda params: bnb.optim.Adam8bit(params, lr=LR)
results = {}
train_stderr = io.StringIO()
with warnings.catch_warnings(record=True) as train_warnings, contextlib.redirect_stderr(train_stderr):
    warnings.simplefilter("always")
    for name, make in runs.items():
        model, optimizer, losses = train_mnist(make)
        results[name] = {"state": state_bytes(optimizer), "losses": losses,
                         "accuracy": test_accuracy(model), "optimizer": optimizer}
    # The spread of torch Adam itself: the same model trained on another order of batches.
    other_model, _, other_losses = train_mnist(runs["torch.optim.Adam"], order=other_order)
    step_timings, step_ratios = interleaved({name: step_only(make) for name, make in runs.items()})
for w in train_warnings:
    print(f"warning during training: {w.category.__name__}: {w.message}")
for line in train_stderr.getvalue().splitlines():
    print(f"stderr during training: {line}")
tail = max(1, MNIST_STEPS // 5)
for name, r in results.items():
    r["final"] = sum(r["losses"][-tail:]) / tail
    print(f"{name:22s} state {r['state'] / 1024:8.1f} KiB  final loss (mean of last {tail} steps) {r['final']:.4f}  "
          f"test accuracy {r['accuracy']:.2%}")
other_final, other_accuracy = sum(other_losses[-tail:]) / tail, test_accuracy(other_model)
print(f"{'torch Adam, other order':22s} {'':19s}  final loss (mean of last {tail} steps) {other_final:.4f}  "
      f"test accuracy {other_accuracy:.2%}")
print("optimizer.step() alone, on fixed gradients (interleaved rounds):")
print(timing_table(list(step_timings.values())))

# %% [markdown]
# The training loop is not timed: it includes the forward, the backward and
# the data indexing, which are the same for both. The table times
# `optimizer.step()` alone.
#
# What exactly does 8-bit Adam keep for the first weight matrix?

# %%
if bnb is not None:
    eight_bit = results["bitsandbytes Adam8bit"]["optimizer"]
    first_weight = next(iter(eight_bit.state))
    print(f"parameter {tuple(first_weight.shape)} {first_weight.dtype}")
    first_state = eight_bit.state[first_weight]
    for key, value in first_state.items():
        shown = f"{str(tuple(value.shape)):12s} {str(value.dtype):14s} {value.numel() * value.element_size():9,d} bytes" if torch.is_tensor(value) else f"{type(value).__name__} (not a tensor)"
        print(f"  {key:8s} {shown}")
    blocks_of_256 = -(-first_weight.numel() // 256)
    for moment in ("1", "2"):
        assert first_state[f"state{moment}"].dtype == torch.uint8, "8-bit Adam keeps each moment in one byte per element"
        assert first_state[f"state{moment}"].shape == first_weight.shape, "one byte per weight"
        assert first_state[f"absmax{moment}"].numel() == blocks_of_256, "one float32 absmax per block of 256 values"
else:
    print("bitsandbytes is not available: no 8-bit state to show")

# %%
if bnb is not None:
    adam_r, bnb_r = results["torch.optim.Adam"], results["bitsandbytes Adam8bit"]
    state_ratio = adam_r["state"] / bnb_r["state"]
    fig, (ax_state, ax_loss) = plt.subplots(1, 2, figsize=(9, 3))
    ax_state.bar(list(results), [r["state"] / 1024 for r in results.values()], color=["tab:blue", "tab:orange"])
    ax_state.set(ylabel="KiB", title=f"optimizer state ({state_ratio:.2f}x smaller)")
    window = max(1, MNIST_STEPS // 20)
    for name, r in results.items():
        smooth = torch.tensor(r["losses"]).unfold(0, window, 1).mean(1)
        ax_loss.plot(range(window, MNIST_STEPS + 1), smooth, label=name)
    ax_loss.set(xlabel="step", ylabel=f"loss (mean of {window} steps)", title="MNIST training loss")
    ax_loss.legend(fontsize=8)
    plt.show()
    print(f"state: {adam_r['state']:,} bytes (torch) vs {bnb_r['state']:,} bytes (8-bit): {state_ratio:.2f}x smaller")
    loss_gap, accuracy_gap = abs(adam_r["final"] - bnb_r["final"]), 100 * abs(adam_r["accuracy"] - bnb_r["accuracy"])
    order_gap = abs(adam_r["final"] - other_final)
    print(f"final loss: 8-bit vs torch Adam differ by {loss_gap:.4f} ({loss_gap / adam_r['final']:.1%} of torch's); "
          f"torch Adam on another batch order differs by {order_gap:.4f}")
    print(f"test accuracy: 8-bit vs torch Adam differ by {accuracy_gap:.2f} points "
          f"(another batch order: {100 * abs(adam_r['accuracy'] - other_accuracy):.2f} points)")
    bnb_step, bnb_step_iqr = step_ratios["bitsandbytes Adam8bit"]
    print(f"optimizer.step() on {device}: 8-bit Adam took {bnb_step:.2f}x (IQR {bnb_step_iqr:.2f}) torch Adam's time per round")
    _ = report.record("8-bit Adam: state smaller by", round(state_ratio, 2), "x")
    _ = report.record("final loss, torch Adam", round(adam_r["final"], 4))
    _ = report.record("final loss, 8-bit Adam", round(bnb_r["final"], 4))
    _ = report.record("test accuracy, 8-bit Adam", round(100 * bnb_r["accuracy"], 2), "%")

# %%
if bnb is not None:
    assert state_ratio > MIN_STATE_RATIO, f"8-bit state should be about 4x smaller, got {state_ratio:.2f}x"
    assert loss_gap <= LOSS_RTOL * adam_r["final"], (
        f"8-bit Adam's final loss {bnb_r['final']:.4f} should be within {LOSS_RTOL:.0%} of torch Adam's {adam_r['final']:.4f}")
    assert accuracy_gap <= ACCURACY_POINTS, f"test accuracies differ by {accuracy_gap:.2f} points (at most {ACCURACY_POINTS})"

# %% [markdown]
# Close to 4x, but not quite (the `state:` line gives the ratio): the large
# first weight matrix keeps two bytes per weight instead of eight, plus its
# two 256-entry `qmap`s and one float32 `absmax` per 256 values for each
# moment; the output layer's weight (10 x 256, below `min_8bit_size`) and
# the biases keep full float32 state. The
# final losses agree within `LOSS_RTOL` of torch Adam's and the test
# accuracies within `ACCURACY_POINTS` points (both asserted); the printout
# sets the gap beside the one between two batch orders of torch Adam
# itself, the noise any comparison of two runs has to clear. The speed of
# the step is a separate question: bitsandbytes is built for GPUs, where
# fused CUDA kernels do the quantised update in one pass, and the timing
# table above (the step alone, on fixed gradients) shows what its CPU path
# costs against torch's Adam on this machine. For a model of a billion
# parameters, the state saving is about 6 GB.
#
# ## The CUDA memory snapshot
#
# When a GPU runs out of memory, a byte count is not enough: you want to see
# which allocation, from which line of code, was live at the peak. The CUDA
# caching allocator can record every allocation and free with its Python
# stack: `torch.cuda.memory._record_memory_history()` starts recording,
# `torch.cuda.memory._dump_snapshot(path)` writes a pickle, and
# `_record_memory_history(enabled=None)` stops. Drag the file onto
# <https://pytorch.org/memory_viz> (it runs in your browser; nothing is
# uploaded) to see the memory over time, one coloured band per tensor. (The
# leading underscore marks the API as private: it may change between
# versions.)

# %%
if has_cuda:
    snapshot_path = build_dir() / "18_memory_snapshot.pickle"
    snapshot_path.parent.mkdir(parents=True, exist_ok=True)
    gpu_model = make_stack().cuda()
    gpu_optimizer = torch.optim.Adam(gpu_model.parameters(), lr=LR)
    gpu_x = x_batch.cuda()
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    for _step in range(3):
        gpu_optimizer.zero_grad(set_to_none=True)
        forward_segments(4 if DEPTH >= 4 else 1)(gpu_model, gpu_x).square().mean().backward()
        gpu_optimizer.step()
    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(str(snapshot_path))
    torch.cuda.memory._record_memory_history(enabled=None)
    snapshot = pickle.loads(snapshot_path.read_bytes())
    events = sum(len(trace) for trace in snapshot["device_traces"])
    assert snapshot["segments"] and events > 0, "the snapshot should hold segments and a trace of allocations"
    print(f"memory snapshot of 3 checkpointed Adam steps: {rel(snapshot_path)} ({snapshot_path.stat().st_size / 1024:.0f} KiB, "
          f"{len(snapshot['segments'])} segments, {events} trace events); open it at https://pytorch.org/memory_viz")
    del gpu_model, gpu_optimizer, gpu_x
else:
    print("no CUDA device: skipping the memory snapshot (it records the CUDA caching allocator, which the CPU does not use)")

# %% [markdown]
# ## Pitfalls
#
# ### 1. `checkpoint` without `use_reentrant`
#
# `checkpoint` has two implementations. The old **reentrant** one
# (`use_reentrant=True`) runs the recomputation as a nested backward call; it
# has known limits. The newer **non-reentrant** one (`use_reentrant=False`)
# uses saved-tensor hooks and is the one PyTorch recommends. The
# documentation has long said that omitting the argument would become an
# error. What does torch 2.14 actually do?

# %%
layer = make_stack(depth=2)
x_no_grad = torch.randn(8, WIDTH, generator=torch.Generator().manual_seed(1))  # an input batch: no requires_grad
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        out = checkpoint(layer[0], x_no_grad)  # no use_reentrant
        print("no exception: checkpoint returned a tensor of shape", tuple(out.shape))
    except Exception as err:
        print(f"{type(err).__name__}: {err}")
for w in caught:
    print(f"{w.category.__name__}: {w.message}")
omitted_warns = any("use_reentrant" in str(w.message) for w in caught)

# %% [markdown]
# In torch 2.14 it still only **warns** (despite the "Starting in PyTorch
# 2.9" in the message; we checked `torch/utils/checkpoint.py` of this
# version) and silently picks the old default, `use_reentrant=True`. The
# second warning is the symptom of what that default does here. The reentrant
# version only computes gradients for a checkpointed part if one of its
# *inputs* requires grad; the parameters inside do not count. The first
# block's input is the data batch, which never requires grad, so the first
# block gets **no gradients at all**, with nothing but a `UserWarning`:

# %%
layer.zero_grad(set_to_none=True)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    layer[1](checkpoint(layer[0], x_no_grad, use_reentrant=True)).square().mean().backward()
for w in caught:
    print(f"{w.category.__name__}: {w.message}")
reentrant_grad = layer[0].fc1.weight.grad
print(f"use_reentrant=True:  block 0 fc1.weight.grad is {'None' if reentrant_grad is None else 'set'}, "
      f"block 1 fc1.weight.grad is {'None' if layer[1].fc1.weight.grad is None else 'set'}")

layer.zero_grad(set_to_none=True)
layer[1](checkpoint(layer[0], x_no_grad, use_reentrant=False)).square().mean().backward()
fixed_grad = layer[0].fc1.weight.grad.clone()
layer.zero_grad(set_to_none=True)
layer(x_no_grad).square().mean().backward()
print(f"use_reentrant=False: block 0 fc1.weight.grad is set, equal to the plain model's: "
      f"{torch.allclose(fixed_grad, layer[0].fc1.weight.grad, atol=1e-7)}")

# %%
assert omitted_warns, "omitting use_reentrant should warn"
assert reentrant_grad is None, "the reentrant checkpoint should have skipped block 0's parameters"
assert torch.allclose(fixed_grad, layer[0].fc1.weight.grad, atol=1e-7), "use_reentrant=False should give the plain gradients"

# %% [markdown]
# A model trained like this never updates its first block, and the loss may
# still go down, so it is easy to miss. **Fix:** always pass
# `use_reentrant=False` (to `checkpoint` and to `checkpoint_sequential`);
# turn warnings into errors in tests (`-W error::UserWarning`) to catch the
# omission.
#
# ### 2. A validation loop that keeps every graph
#
# Summing losses without `torch.no_grad()` keeps the autograd graph of every
# batch alive, and with it every batch's saved activations, until the sum
# is freed. We measure what the graph holds after five validation batches:

# %%
with torch.no_grad():  # the data: five batches, made once
    val_batches = [torch.randn(BATCH_SIZE, WIDTH, generator=torch.Generator().manual_seed(k)) for k in range(5)]


def validation_total(model):
    total = 0.0
    for xb in val_batches:
        total += model(xb).square().mean()  # the mistake: a tensor with a graph, five times
    return total


total, leaked = saved_bytes(lambda: validation_total(stack), stack)
print(f"without no_grad: total.requires_grad={total.requires_grad}; the graph holds {leaked / MB:.2f} MB of activations")
with torch.no_grad():
    total, kept = saved_bytes(lambda: validation_total(stack), stack)
print(f"with no_grad:    total.requires_grad={total.requires_grad}; the graph holds {kept / MB:.2f} MB")
del total
assert leaked > 4 * plain["bytes"] and kept == 0

# %% [markdown]
# Five batches' worth of activations, never used. **Fix:** evaluate under
# `torch.no_grad()` (or `torch.inference_mode()`), and accumulate Python
# numbers with `loss.item()`, not tensors.
#
# ## Exercises
#
# Each exercise has a stub for you to fill in, then a checker cell that
# prints **PASSED**, **NOT YET** with a hint, or **TODO** while the stub
# still raises `NotImplementedError`. If you are stuck,
# `solution("18.adam_state_bytes")` returns the reference solution.
#
# ### Exercise 1: Adam's state, predicted
#
# Write `adam_state_bytes(model)`: how many bytes will
# `torch.optim.Adam(model.parameters())` keep in `optimizer.state` after
# one step? Compute it from the parameters alone, with Python arithmetic on
# their metadata (`numel()`, `element_size()`, `dtype`, `requires_grad`):
# the checker refuses any tensor your function creates, even a scalar such
# as `torch.tensor(0.0)`. Think about: which
# tensors Adam keeps per parameter (the breakdown section lists them), their
# dtype, and what happens to a parameter with `requires_grad=False`. The
# checker builds float32, bfloat16 and float64 models, one with a frozen
# layer, and compares your answer with a real Adam step.


# %%
def adam_state_bytes(model):
    """Bytes in torch.optim.Adam(model.parameters()).state after one step, predicted without creating a tensor."""
    raise NotImplementedError


# %%
result = check("18.adam_state_bytes", adam_state_bytes)
if result.passed:
    print(f"the deep stack: predicted {adam_state_bytes(stack):,} bytes, measured {main['Adam state']:,} bytes")

# %% [markdown]
# ### Exercise 2: activation bytes from the shapes
#
# Write `saved_activation_bytes(batch, sizes, activation)` for a float32 MLP
# `Linear(sizes[0], sizes[1]) -> act -> Linear(sizes[1], sizes[2]) -> act ->
# ... -> Linear(sizes[-2], sizes[-1])` and an input `[batch, sizes[0]]`
# that does not require grad: the bytes of activations autograd saves for
# backward, parameters not counted, each tensor once (as our `saved_bytes`
# counts them). `activation` is `"relu"`, `"tanh"`, `"sigmoid"`, `"gelu"` or
# `"silu"`. Find out what each layer saves before you write the formula:
# run one `Linear` and one of each activation under the chapter's
# `saved_tensors` and read the shapes, and remember that a tensor saved by
# two layers is stored once. The checker measures real MLPs with
# `saved_tensors_hooks`; your function itself predicts from the shapes and
# creates no tensor (the checker refuses one).


# %%
def saved_activation_bytes(batch, sizes, activation):
    """Bytes of activations autograd saves in the forward pass of the MLP described above (no tensor created here)."""
    raise NotImplementedError


# %%
result = check("18.saved_activation_bytes", saved_activation_bytes)
if result.passed:
    sizes = [784, *MNIST_HIDDEN, 10]
    _, measured = saved_bytes(lambda: initial_mlp(mnist_x[:MNIST_BATCH].clone()), initial_mlp)
    print(f"the MNIST MLP {sizes}, batch {MNIST_BATCH}: predicted {saved_activation_bytes(MNIST_BATCH, sizes, 'relu'):,} "
          f"bytes, measured {measured:,} bytes")

# %% [markdown]
# ## Summary
#
# - Training memory has four parts. Parameters, gradients and optimizer
#   state are fixed by the model (16 bytes per parameter for float32 Adam);
#   activations grow with batch and depth and usually dominate.
# - `saved_tensors_hooks` measures activation memory exactly on any device,
#   counting each saved storage once; on an accelerator,
#   `torch.accelerator.max_memory_allocated` with `reset_peak_memory_stats`
#   gives the allocator's peak, `memory_reserved` what its cache holds,
#   `expandable_segments` fights fragmentation, and the CUDA memory snapshot
#   shows who allocated what.
# - Activation checkpointing trades at most one extra forward per
#   checkpointed block (less with early stopping: the last `fc2` product of
#   each checkpointed segment is skipped; LayerNorm, `fc1`, GELU and the
#   inner `fc2`s are rerun) for most of the activation memory, with
#   identical gradients. On this small model the time cost is above what
#   the FLOPs suggest (asserted when the timing rounds agree well enough;
#   the checks print whether they did), since the extra operations and the
#   checkpoint's own bookkeeping weigh as much as the arithmetic. `checkpoint_sequential`
#   never checkpoints its last segment (1 segment = no checkpointing).
#   Always pass `use_reentrant=False`: without it, torch 2.14 warns and
#   falls back to the reentrant version, which can silently skip gradients.
# - Gradient accumulation divides activation memory by the number of
#   micro-batches for the same gradients; bfloat16 autocast shrinks the
#   saved activations while the weights stay float32.
# - `save_on_cpu` moves saved activations to host memory (with
#   `pin_memory=False` a no-op on the CPU; `pin_memory=True` copies every
#   saved tensor even there); an optimizer step fused into backward with
#   `register_post_accumulate_grad_hook` keeps only one gradient alive.
# - 8-bit Adam cuts the optimizer state close to 4x (small tensors keep
#   float32 state); here its final loss and
#   test accuracy matched torch Adam's within the asserted tolerances.
#
# **Next:** chapter 19 extends autograd itself with custom
# `autograd.Function`s, including choosing what to save for backward.

# %%
print(f"notebook ran in {time.perf_counter() - notebook_start:.0f} s")
report.finish()
