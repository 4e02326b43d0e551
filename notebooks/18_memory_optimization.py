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
# - gradient accumulation and bfloat16 autocast as memory levers, measured;
# - 8-bit Adam from bitsandbytes against `torch.optim.Adam`: state bytes and
#   training curves on MNIST;
# - the CUDA memory snapshot, for when a GPU is present.
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
TIMING_SECONDS = 0.5  # seconds of timed runs per measurement (helpers.bench.measure)
MNIST_STEPS = 300  # training steps per optimizer in the 8-bit Adam comparison
MNIST_BATCH = 128  # MNIST images per step
MNIST_HIDDEN = (256,)  # hidden widths of the MNIST MLP
LR = 1e-3  # learning rate of both Adams
MIN_STATE_RATIO = 3.5  # torch Adam's state must be at least this many times 8-bit Adam's
LOSS_TOLERANCE = 0.1  # the two Adams' final training losses may differ by at most this much
SEED = 0

# %% [markdown]
# ## Setup

# %%
import copy
import time
import warnings
from functools import partial

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

import helpers.plotting  # noqa: F401  (the course's figure defaults)
from helpers.bench import measure, timing_table
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
MB = 2**20
print(f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} CPU threads, CUDA available: {has_cuda}")

# %% [markdown]
# The byte counts in this chapter do not depend on the device: a float32
# tensor of a million elements takes 4 MB wherever it lives. So the
# measurements run on the CPU, where they are exact and repeatable, and the
# cells that need a GPU (the CUDA allocator's own figures and the memory
# snapshot) run in addition when one is present.
#
# ## The model: a deep stack of residual blocks
#
# Each block is the feed-forward half of a transformer layer:
# `x + Linear(GELU(Linear(LayerNorm(x))))`, widening to `4 * WIDTH` in the
# middle. Stacking `DEPTH` of them gives a network that is deep but cheap,
# the shape where activation memory dominates.


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


parts = {b: breakdown(b) for b in BREAKDOWN_BATCHES}
print(f"{'batch':>6s} " + " ".join(f"{name:>12s}" for name in parts[BREAKDOWN_BATCHES[0]]) + f" {'total':>10s}")
for b, part in parts.items():
    print(f"{b:6d} " + " ".join(f"{v / MB:9.2f} MB" for v in part.values()) + f" {sum(part.values()) / MB:7.2f} MB")

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
# ### On a GPU: the allocator's own figure
#
# On CUDA, PyTorch's caching allocator keeps statistics:
# `torch.cuda.memory_allocated()` is what tensors use now, and
# `torch.cuda.max_memory_allocated()` the peak since the last
# `torch.cuda.reset_peak_memory_stats()`. The peak of a step is higher than
# our sum: it also holds temporary buffers, and the gradients and the
# activations coexist during backward.

# %%
if has_cuda:
    gpu_model = make_stack().cuda()
    gpu_optimizer = torch.optim.Adam(gpu_model.parameters(), lr=LR)
    gpu_x = x_batch.cuda()
    for _step in range(2):  # the second step has the state and the gradients from the start
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        gpu_model(gpu_x).square().mean().backward()
        gpu_optimizer.step()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    print(f"CUDA step: {before / MB:.2f} MB allocated before the step, peak {peak / MB:.2f} MB")
    print(f"counted on the CPU: parameters + gradients + state + activations = {sum(main.values()) / MB:.2f} MB")
    _ = report.record("CUDA peak of one Adam step", round(peak / MB, 2), "MB")
    del gpu_model, gpu_optimizer, gpu_x
else:
    print("no CUDA device: skipping torch.cuda.max_memory_allocated (the byte counts above hold on any device)")

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


variants = {"no checkpointing": forward_plain, "checkpoint per block": forward_per_block}
variants.update({f"checkpoint_sequential, segments={s}": forward_segments(s) for s in SEGMENTS})


def grads_of(forward, model, x):
    """One forward and backward through `forward(model, x)`; the gradients as a list of tensors."""
    model.zero_grad(set_to_none=True)
    forward(model, x).square().mean().backward()
    return [p.grad.clone() for p in model.parameters()]


def train_step(forward, model, x):
    model.zero_grad(set_to_none=True)
    forward(model, x).square().mean().backward()


ckpt = {}
reference_grads = grads_of(forward_plain, stack, x_batch)
for name, forward in variants.items():
    _, nbytes = saved_bytes(partial(forward, stack, x_batch), stack)
    grads = grads_of(forward, stack, x_batch)
    max_diff = max((g - r).abs().max().item() for g, r in zip(grads, reference_grads))
    identical = all(torch.equal(g, r) for g, r in zip(grads, reference_grads))
    timing = measure(partial(train_step, forward, stack, x_batch), label=name, min_run_time=TIMING_SECONDS)
    ckpt[name] = {"bytes": nbytes, "max_diff": max_diff, "identical": identical, "timing": timing}

plain = ckpt["no checkpointing"]
print(f"{'variant':36s} {'saved activations':>18s} {'of plain':>9s} {'step time':>10s} {'slower':>7s} {'grads':>14s}")
for name, r in ckpt.items():
    grads_note = "bit-identical" if r["identical"] else f"diff {r['max_diff']:.1e}"
    print(f"{name:36s} {r['bytes'] / MB:15.2f} MB {r['bytes'] / plain['bytes']:9.1%} "
          f"{r['timing'].median_ms:7.1f} ms {r['timing'].median_s / plain['timing'].median_s:6.2f}x {grads_note:>14s}")

# %% [markdown]
# The same timings in `helpers.bench`'s table (medians over repeated steps,
# with their spread):

# %%
print(timing_table([r["timing"] for r in ckpt.values()]))

# %%
fig, (ax_mem, ax_time) = plt.subplots(1, 2, figsize=(9, 3))
seg_names = [f"checkpoint_sequential, segments={s}" for s in SEGMENTS]
ax_mem.plot(SEGMENTS, [ckpt[n]["bytes"] / MB for n in seg_names], "o-", label="checkpoint_sequential")
ax_mem.axhline(plain["bytes"] / MB, color="gray", ls="--", label="no checkpointing")
ax_mem.axhline(ckpt["checkpoint per block"]["bytes"] / MB, color="tab:green", ls=":", label="per block")
ax_mem.set(xscale="log", xlabel="segments", ylabel="MB", title="saved activations after forward", ylim=(0, None))
ax_mem.set_xticks(SEGMENTS, [str(s) for s in SEGMENTS])
ax_mem.legend(fontsize=8)
ax_time.plot(SEGMENTS, [ckpt[n]["timing"].median_ms for n in seg_names], "o-", label="checkpoint_sequential")
ax_time.axhline(plain["timing"].median_ms, color="gray", ls="--", label="no checkpointing")
ax_time.axhline(ckpt["checkpoint per block"]["timing"].median_ms, color="tab:green", ls=":", label="per block")
ax_time.set(xscale="log", xlabel="segments", ylabel="ms per step", title="forward + backward time", ylim=(0, None))
ax_time.set_xticks(SEGMENTS, [str(s) for s in SEGMENTS])
ax_time.legend(fontsize=8)
plt.show()

per_block = ckpt["checkpoint per block"]
_ = report.record("saved activations, no checkpointing", round(plain["bytes"] / MB, 2), "MB")
_ = report.record("saved activations, checkpoint per block", round(per_block["bytes"] / MB, 2), "MB")
_ = report.record("checkpoint per block: memory saved", round(100 * (1 - per_block["bytes"] / plain["bytes"]), 1), "%")
_ = report.record("checkpoint per block: step-time ratio", round(per_block["timing"].median_s / plain["timing"].median_s, 2), "x")

# %% [markdown]
# How to read it:
#
# - **Per block**, only each block's input is kept: one `[batch, width]`
#   tensor instead of about ten, so the saved activations fall to about a
#   tenth. The price is one extra forward pass, roughly a third more
#   compute per step (a backward costs about two forwards).
# - **`checkpoint_sequential` with s segments** keeps the inputs of the
#   first s − 1 segments plus all activations of the last segment, which it
#   does not checkpoint. With **1 segment nothing is checkpointed at all**:
#   the memory is exactly that of the plain model. The more segments, the
#   less is kept, down to the per-block figure.
# - During backward, the segment being recomputed briefly holds its own
#   activations again; so the true peak is the saved bytes above plus one
#   segment's worth (DEPTH / s blocks). That favours a middle ground, about
#   √DEPTH segments, when the peak matters rather than the resting memory.
# - The gradients are unchanged: the recomputation runs the same operations
#   on the same inputs. (`checkpoint` also restores the random-number state,
#   `preserve_rng_state=True`, so dropout draws the same masks the second
#   time.)
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
more = [ckpt[n]["bytes"] for n in seg_names]
assert all(a >= b for a, b in zip(more, more[1:])), "more segments should never keep more activations"
print("checkpointing: less memory, same gradients")

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


def accumulate_step(model, batches):
    """Gradients of one optimizer step from a list of equal-sized batches; returns the largest saved bytes."""
    model.zero_grad(set_to_none=True)
    largest = 0
    for xb in batches:
        out, nbytes = saved_bytes(partial(model, xb), model)
        (out.square().mean() / len(batches)).backward()  # / k: the mean over the whole batch
        largest = max(largest, nbytes)
    return largest


# Separate tensors, as a DataLoader with batch_size=micro would deliver them. (Slices of x_batch
# would be views that share its storage, and our storage-based count would charge each the whole batch.)
micro_batches = [chunk.clone() for chunk in x_batch.chunk(MICRO_BATCHES)]
full_bytes = accumulate_step(stack, [x_batch])
full_grads = [p.grad.clone() for p in stack.parameters()]
micro_bytes = accumulate_step(stack, micro_batches)
micro_grads = [p.grad.clone() for p in stack.parameters()]
accum_diff = max((a - b).abs().max().item() for a, b in zip(full_grads, micro_grads))
accum_close = all(torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(full_grads, micro_grads))
t_full = measure(lambda: accumulate_step(stack, [x_batch]), label=f"1 batch of {BATCH_SIZE}", min_run_time=TIMING_SECONDS)
t_micro = measure(lambda: accumulate_step(stack, micro_batches), label=f"{MICRO_BATCHES} micro-batches of {micro}",
                  min_run_time=TIMING_SECONDS)
print(f"saved activations: batch of {BATCH_SIZE}: {full_bytes / MB:.2f} MB; micro-batch of {micro}: {micro_bytes / MB:.2f} MB "
      f"({full_bytes / micro_bytes:.2f}x less)")
print(f"largest gradient difference: {accum_diff:.1e}")
print(timing_table([t_full, t_micro]))
_ = report.record("gradient accumulation: activation memory ratio", round(full_bytes / micro_bytes, 2), "x")

# %%
assert abs(full_bytes / micro_bytes - MICRO_BATCHES) < 0.05 * MICRO_BATCHES, "k micro-batches should keep 1/k of the activations"
assert accum_close, f"accumulated gradients should equal the full-batch gradients (max diff {accum_diff:.1e})"

# %% [markdown]
# The same gradients for a k-th of the activation memory; the cost is time,
# because small matrix products use the hardware less well. Two cautions:
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
if has_cuda:
    gpu_model = make_stack().cuda()
    gpu_x = x_batch.cuda()
    peaks = {}
    for label, use_amp in (("float32", False), ("bf16 autocast", True)):
        gpu_model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
            out = gpu_model(gpu_x)
        torch.cuda.synchronize()
        peaks[label] = torch.cuda.max_memory_allocated() - base  # the forward's allocations: mostly activations
        out.float().square().mean().backward()
        del out
    print({k: f"{v / MB:.2f} MB" for k, v in peaks.items()})
    _ = report.record("CUDA bf16 autocast: forward peak vs float32", round(peaks["bf16 autocast"] / peaks["float32"], 3), "x")
    del gpu_model, gpu_x
else:
    print("no CUDA device: skipping the max_memory_allocated comparison of float32 and bf16 autocast")

# %% [markdown]
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
# same batches, once with each optimizer. Warnings that bitsandbytes may
# emit are captured and printed.

# %%
with warnings.catch_warnings(record=True) as bnb_warnings:
    warnings.simplefilter("always")
    try:
        import bitsandbytes as bnb
    except ImportError as err:
        bnb = None
        print(f"bitsandbytes is not available ({err}): skipping the 8-bit Adam comparison")
for w in bnb_warnings:
    print(f"warning while importing bitsandbytes: {w.category.__name__}: {w.message}")
if bnb is not None:
    print(f"bitsandbytes {bnb.__version__}")

train_set, test_set = mnist(train=True), mnist(train=False)
mnist_x = ((train_set.data.float() / 255 - 0.1307) / 0.3081).flatten(1)
mnist_y = train_set.targets
test_x = ((test_set.data.float() / 255 - 0.1307) / 0.3081).flatten(1)
test_y = test_set.targets
batch_order = torch.randint(0, len(mnist_y), (MNIST_STEPS, MNIST_BATCH), generator=torch.Generator().manual_seed(SEED))
torch.manual_seed(SEED)
initial_mlp = MLP(784, MNIST_HIDDEN, 10, dropout=0.0)


def train_mnist(make_optimizer):
    """Train a copy of initial_mlp on the fixed batches; return (model, optimizer, losses, seconds)."""
    model = copy.deepcopy(initial_mlp)
    optimizer = make_optimizer(model.parameters())
    losses = []
    start = time.perf_counter()
    for idx in batch_order:
        loss = F.cross_entropy(model(mnist_x[idx]), mnist_y[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model, optimizer, losses, time.perf_counter() - start


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
with warnings.catch_warnings(record=True) as train_warnings:
    warnings.simplefilter("always")
    for name, make in runs.items():
        model, optimizer, losses, seconds = train_mnist(make)
        results[name] = {"state": state_bytes(optimizer), "losses": losses, "seconds": seconds,
                         "accuracy": test_accuracy(model), "optimizer": optimizer}
for w in train_warnings:
    print(f"warning during training: {w.category.__name__}: {w.message}")
tail = max(1, MNIST_STEPS // 5)
for name, r in results.items():
    r["final"] = sum(r["losses"][-tail:]) / tail
    print(f"{name:22s} state {r['state'] / 1024:8.1f} KiB  final loss (mean of last {tail} steps) {r['final']:.4f}  "
          f"test accuracy {r['accuracy']:.2%}  {1e3 * r['seconds'] / MNIST_STEPS:.1f} ms per step")

# %% [markdown]
# What exactly does 8-bit Adam keep for the first weight matrix?

# %%
# NBVAL_CHECK_OUTPUT
if bnb is not None:
    eight_bit = results["bitsandbytes Adam8bit"]["optimizer"]
    first_weight = next(iter(eight_bit.state))
    print(f"parameter {tuple(first_weight.shape)} {first_weight.dtype}")
    for key, value in eight_bit.state[first_weight].items():
        shown = f"{str(tuple(value.shape)):12s} {str(value.dtype):14s} {value.numel() * value.element_size():9,d} bytes" if torch.is_tensor(value) else f"{type(value).__name__} (not a tensor)"
        print(f"  {key:8s} {shown}")

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
    print(f"final loss difference: {abs(adam_r['final'] - bnb_r['final']):.4f}")
    _ = report.record("8-bit Adam: state smaller by", round(state_ratio, 2), "x")
    _ = report.record("final loss, torch Adam", round(adam_r["final"], 4))
    _ = report.record("final loss, 8-bit Adam", round(bnb_r["final"], 4))
    _ = report.record("test accuracy, 8-bit Adam", round(100 * bnb_r["accuracy"], 2), "%")

# %%
if bnb is not None:
    assert state_ratio > MIN_STATE_RATIO, f"8-bit state should be about 4x smaller, got {state_ratio:.2f}x"
    assert abs(adam_r["final"] - bnb_r["final"]) < LOSS_TOLERANCE, "8-bit Adam should train about as well as Adam"

# %% [markdown]
# Almost exactly 4x: two bytes per weight instead of eight, plus one float32
# `absmax` per 256 values and the small float32 state of the biases. The
# training curves lie on top of each other: the block-wise quantisation
# error is small next to the noise of the mini-batches. Compare the
# milliseconds per step above too: bitsandbytes is built for GPUs, where
# fused CUDA kernels do the quantised update in one pass; its CPU path can
# be slower than torch's Adam. For a model of a billion parameters, the
# saving is about 6 GB of optimizer state.
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
    print(f"memory snapshot of 3 checkpointed Adam steps: {rel(snapshot_path)} ({snapshot_path.stat().st_size / 1024:.0f} KiB)")
    print("open it at https://pytorch.org/memory_viz")
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
# one step? Compute it from the parameters alone. Think about: which
# tensors Adam keeps per parameter (the breakdown section lists them), their
# dtype, and what happens to a parameter with `requires_grad=False`. The
# checker builds float32, bfloat16 and float64 models, one with a frozen
# layer, and compares your answer with a real Adam step.


# %%
def adam_state_bytes(model):
    """Bytes in torch.optim.Adam(model.parameters()).state after one step."""
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
# `"silu"`. Hints: each `Linear` saves its input, to compute its weight's
# gradient. The derivative of ReLU, tanh and sigmoid can be computed from
# their *output*; that of GELU and SiLU needs their *input*. The checker
# measures real MLPs with `saved_tensors_hooks`.


# %%
def saved_activation_bytes(batch, sizes, activation):
    """Bytes of activations autograd saves in the forward pass of the MLP described above."""
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
#   counting each saved storage once; on CUDA, `max_memory_allocated` with
#   `reset_peak_memory_stats` gives the allocator's peak, and the memory
#   snapshot shows who allocated what.
# - Activation checkpointing trades one extra forward for most of the
#   activation memory, with identical gradients. `checkpoint_sequential`
#   never checkpoints its last segment (1 segment = no checkpointing).
#   Always pass `use_reentrant=False`: without it, torch 2.14 warns and
#   falls back to the reentrant version, which can silently skip gradients.
# - Gradient accumulation divides activation memory by the number of
#   micro-batches for the same gradients; bfloat16 autocast shrinks the
#   saved activations while the weights stay float32.
# - 8-bit Adam cuts the optimizer state about 4x and trains as well as Adam
#   here.
#
# **Next:** chapter 19 extends autograd itself with custom
# `autograd.Function`s, including choosing what to save for backward.

# %%
print(f"notebook ran in {time.perf_counter() - notebook_start:.0f} s")
report.finish()
