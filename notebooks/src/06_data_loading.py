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
# # 06 · Data loading
#
# Chapter 05 wrapped MNIST in a `DataLoader` and never looked inside it. This
# chapter opens the box. A `DataLoader` is three parts that you can replace
# one by one: a **dataset** that produces samples, a **sampler** that decides
# which samples and in what order, and a **collate function** that glues
# samples into a batch. Around them, optional **worker processes** prepare
# batches in the background while your training loop runs.
#
# **What you will learn**
# - map-style datasets (`__getitem__`) vs `IterableDataset` (`__iter__`), and
#   why an `IterableDataset` must split its work between workers itself, with
#   `torch.utils.data.get_worker_info`;
# - how worker processes start (`fork`, `spawn`), and why the code they run
#   must be importable, with the real error when it is not;
# - a real off-by-a-remainder bug in that split, and the fix, proven with a
#   count of every sample;
# - rebalancing an imbalanced dataset with `WeightedRandomSampler` and with a
#   `Sampler` of our own;
# - batching sequences of different lengths with a `collate_fn` and
#   `pad_sequence`;
# - what `num_workers`, `pin_memory`, `persistent_workers` and
#   `prefetch_factor` do, measured on this machine;
# - seeding workers, so that random augmentations really are random, and
#   reproducible.
#
# **Prerequisites:** chapters 01 to 05 (chapter 05 for MNIST and
# `transforms.v2`).
#
# **Estimated time:** 55 minutes.

# %% tags=["parameters"]
STREAM_SAMPLES = 1001  # MNIST images streamed through the IterableDataset (odd on purpose)
IMBALANCE_MAX = 2000  # images of the most common class in the imbalanced set
IMBALANCE_RATIO = 0.05  # size of the rarest class / size of the most common class
REBALANCED_DRAWS = 20000  # samples drawn by each rebalancing sampler
BALANCE_TOLERANCE = 0.01  # allowed |class frequency - 1/10| after rebalancing
THROUGHPUT_SAMPLES = 1024  # MNIST images per timed epoch in the loader benchmark
TIMED_EPOCHS = 2  # epochs timed per loader setting
TIMED_SETTINGS = None  # rows of the loader table to time (a list of their labels); None: all six
MIN_WORKER_SPEEDUP = 1.1  # on a quiet machine, num_workers=1 must beat num_workers=0 by this factor with a training step
BATCH_SIZE = 128
START_METHOD = None  # how worker processes start: "spawn", "fork" or "forkserver"; None: the platform's default
SEED = 0

# %% [markdown]
# ## Setup
#
# Everything that runs inside a worker process comes from the course module
# `helpers.loading`; the section on workers shows why, and prints each piece
# of its code where we use it. Worker processes start with the method
# `START_METHOD` names, by default this platform's own: `fork` on Linux
# (up to Python 3.13), `spawn` on macOS and Windows.

# %%
import codecs
import contextlib
import inspect
import io
import math
import multiprocessing
import os
import re
import sys
import time
import warnings
from collections import Counter

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.colors import ListedColormap
from torch import nn
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import (
    DataLoader,
    Dataset,
    Sampler,
    Subset,
    TensorDataset,
    WeightedRandomSampler,
    get_worker_info,
)
from torchvision.transforms import v2

from helpers.data import mnist
from helpers.device import pick_device, seed_everything
from helpers.exercises import check, hint, solution  # noqa: F401  (hint, solution: for when you are stuck)
from helpers.loading import (
    ImageStream,
    IndexedImages,
    PrecomputedShards,
    RandomShift,
    naive_shard,
    seed_worker,
    strided_shard,
    worker_stderr,
)
from helpers.report import ChapterReport

generator = seed_everything(SEED)
device = pick_device()
report = ChapterReport("06_data_loading")
notebook_start = time.perf_counter()

if START_METHOD is not None:
    torch.multiprocessing.set_start_method(START_METHOD, force=True)
START = torch.multiprocessing.get_start_method()  # what DataLoader workers use unless told otherwise
WORKERS = 2  # worker processes for the demonstrations
print(f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} CPU threads")
print(f"Python {sys.version_info.major}.{sys.version_info.minor} on {sys.platform}: worker processes start with "
      f"{START!r} (available here: {', '.join(multiprocessing.get_all_start_methods())})")

# %% [markdown]
# ## Map-style datasets and iterable datasets
#
# A **map-style** dataset knows its length and returns sample `i` on request:
# it implements `__len__` and `__getitem__`. Every torchvision dataset is one.
# Because any sample can be fetched in any order, the `DataLoader` can
# shuffle, and the *sampler*, running in the main process, decides which
# indices go into which batch.
#
# An **iterable-style** dataset (`IterableDataset`) implements only
# `__iter__`: it yields samples one after another, like lines read from a
# file, rows from a database cursor or records from a network stream, where
# "give me sample 7,391" is expensive or impossible. There is no index, so
# there is no sampler and no `shuffle=True`; the dataset alone decides the
# order.
#
# We use the first `STREAM_SAMPLES` MNIST training images for both kinds.
# The map-style one is three lines:

# %%
train_raw = mnist(train=True)
images = train_raw.data[:STREAM_SAMPLES].unsqueeze(1).float() / 255  # [N, 1, 28, 28] in [0, 1]
labels = train_raw.targets[:STREAM_SAMPLES]


class MnistMap(Dataset):
    """Map-style: item i is (i, image i, label i)."""

    def __len__(self):
        return len(labels)

    def __getitem__(self, i):
        return i, images[i], labels[i]


map_set = MnistMap()
i, image, label = map_set[7]
print(f"len(map_set) = {len(map_set)}; map_set[7] = ({i}, image {tuple(image.shape)}, label {label.item()})")

# %% [markdown]
# ## Worker processes, and where their code must live
#
# With `num_workers=2`, the `DataLoader` starts two worker processes, and
# each gets its **own copy** of the dataset object. A copy travels to a new
# process in one of three ways (the *start method*):
#
# - `fork` (the default on Linux up to Python 3.13) copies the whole running
#   main process, the notebook's classes, functions and variables included;
# - `spawn` (the default on macOS and Windows) starts a fresh Python and
#   sends it the dataset **pickled**. Pickle stores an object's class by its
#   module and name, and the fresh process must **import** it. A class
#   defined in a notebook lives in the module `__main__`, which the fresh
#   process cannot import;
# - `forkserver` (the Linux default from Python 3.14) forks workers from a
#   fresh server process, and needs importable code just like `spawn`.
#
# `DataLoader(multiprocessing_context=...)` picks the start method for one
# loader. Here is `MnistMap`, defined above in this notebook, sent to a
# worker started with `spawn`. The worker dies while unpickling it; the
# main process only learns that the worker "exited unexpectedly", and the
# worker's own traceback goes to the stderr it inherited from the kernel
# (the terminal that runs Jupyter, or with a recent `ipykernel` the cell's
# stderr). `helpers.loading.worker_stderr` catches that stderr, so that we
# can print both messages (the process id is replaced by `<pid>`):

# %%
failed = None
with worker_stderr() as worker_said:
    try:
        next(iter(DataLoader(map_set, batch_size=32, num_workers=1, multiprocessing_context="spawn")))
    except RuntimeError as err:
        failed = f"{type(err).__name__}: {re.sub(r'[0-9]{2,}', '<pid>', str(err))}"
print("main process:", failed)
print("the worker:  ", worker_said.last_line() or "(its traceback went to the terminal that runs Jupyter)")
assert failed is not None, "a notebook-defined dataset should not reach a spawned worker"
if sys.platform == "linux":  # the spawned worker inherits fd 2, so worker_stderr must have caught its traceback
    assert "Can't get attribute 'MnistMap'" in worker_said.text, f"the worker's error was not caught: {worker_said.text!r}"

# %% [markdown]
# The fix is to put what the workers run into a module that a fresh Python
# can import: a `.py` file next to your notebook, or a package such as this
# course's `helpers`. `helpers.loading` holds the same dataset, except
# that it keeps the tensors it serves as attributes (a module cannot see the
# notebook's variables, and attributes are pickled along with the object):

# %%
# NBVAL_CHECK_OUTPUT
print(inspect.getsource(IndexedImages))

# %% [markdown]
# The same `spawn` loader now works. The `DataLoader` hands out the batches
# of indices from the sampler in the main process, batch 0 to worker 0,
# batch 1 to worker 1, batch 2 to worker 0, and so on, so for a map-style
# dataset every index is fetched exactly once (the seeding section below
# shows which worker made which batch):

# %%
# NBVAL_CHECK_OUTPUT
spawn_loader = DataLoader(IndexedImages(images, labels), batch_size=32, num_workers=WORKERS,
                          multiprocessing_context="spawn")
start = time.perf_counter()
batches = iter(spawn_loader)
seen = Counter(next(batches)[0].tolist())
spawn_first = time.perf_counter() - start  # start the workers, then wait for the first batch
seen.update(i for ids, _, _ in batches for i in ids.tolist())
print(f"map-style, {WORKERS} workers started with spawn: {len(seen)} distinct ids, "
      f"each seen {set(seen.values())} time(s), {sum(seen.values())} in all")
assert sorted(seen) == list(range(STREAM_SAMPLES)) and set(seen.values()) == {1}

# %% [markdown]
# Starting a spawned worker costs more than forking one: the new Python must
# import torch and your modules before it can make a batch, while a forked
# worker already has them. Here is the time to the first batch, from
# creating the iterator, for both (`fork` exists on Linux and macOS, not on
# Windows). The forked workers get the notebook's own `MnistMap`: they find
# it in their copy of the main process.

# %%
timings = {"spawn": spawn_first}
if "fork" in multiprocessing.get_all_start_methods():
    start = time.perf_counter()
    ids, _, _ = next(iter(DataLoader(map_set, batch_size=32, num_workers=WORKERS, multiprocessing_context="fork")))
    timings["fork"] = time.perf_counter() - start
    print(f"fork, with the notebook's MnistMap: first batch holds ids {ids[0].item()} to {ids[-1].item()}")
for method, seconds in timings.items():
    print(f"first batch with {WORKERS} workers started by {method!r}: {1000 * seconds:5.0f} ms")
if "fork" in timings:
    assert timings["spawn"] > 2 * timings["fork"], f"spawning should cost more than forking: {timings}"

# %% [markdown]
# So from here on, everything that goes to a worker (datasets, shard
# functions, a `worker_init_fn`) is imported from `helpers.loading`, the cells
# print its code, and the loaders use this platform's start method, `START`.
# The checks and the printed results are the same with every start method
# (the course's test `tests/test_ch06_spawn.py` runs the chapter with
# `START_METHOD="spawn"` and compares them with the stored ones).
#
# An `IterableDataset` has no indices to hand out. Each worker simply calls
# `iter()` on its copy of the dataset, so a stream that ignores the workers
# is read once **per worker**. Inside a worker,
# `torch.utils.data.get_worker_info()` returns the worker's `id`, the
# `num_workers`, its `seed` and its copy of the `dataset`; in the main
# process it returns `None`. The stream below uses it to split (**shard**) the
# indices with a `shard` function that we pass in, and yields the worker's id
# with each sample so that we can see who produced what. What a worker did
# comes back as data, through the loader, and the main process prints it.
# A worker's own `print` is a poor report: depending on the start method
# and the Jupyter version it lands in the notebook or in the terminal that
# runs Jupyter, interleaved in whatever order the processes happen to run.

# %%
# NBVAL_CHECK_OUTPUT
print(inspect.getsource(ImageStream))


# %%
def stream(n, shard, num_workers, batch_size=4, batch_sizes=None):
    """Run the first n images through ImageStream and a DataLoader; return {sample id: [worker ids that yielded it]}.

    A dict passed as `batch_sizes` receives {worker id: [size of each batch it made]}.
    """
    loader = DataLoader(ImageStream(images[:n], labels[:n], shard), batch_size=batch_size, num_workers=num_workers)
    yielded = {}
    for ids, workers, _, _ in loader:
        for i, w in zip(ids.tolist(), workers.tolist()):
            yielded.setdefault(i, []).append(w)
        if batch_sizes is not None:
            batch_sizes.setdefault(workers[0].item(), []).append(len(ids))
    return yielded


print("get_worker_info() in the main process:", get_worker_info())

# %% [markdown]
# Forgetting to shard is the first mistake. Each of the two workers yields
# all 12 samples, so the loader produces 24, every one twice, and an epoch
# silently counts double:

# %%
# NBVAL_CHECK_OUTPUT
no_shard = stream(12, shard=None, num_workers=WORKERS)
print({i: ws for i, ws in no_shard.items()})
print("yielded", sum(len(ws) for ws in no_shard.values()), "samples for a dataset of 12")
assert all(sorted(ws) == [0, 1] for ws in no_shard.values()), "without sharding every worker yields everything"

# %% [markdown]
# ### The remainder bug
#
# The split that most people write first gives every worker a contiguous
# block of `n // num_workers` samples:

# %%
# NBVAL_CHECK_OUTPUT
print(inspect.getsource(naive_shard))

# %% [markdown]
# It looks right and it is right whenever `n` divides evenly. But `//`
# rounds down: 11 samples for 2 workers makes blocks of 5, and sample 10
# belongs to nobody. Nothing fails, no warning appears: the epoch is just
# one sample short, and the samples at the end of the stream are never
# trained on (with `num_workers=k`, up to `k - 1` of them). Here it is, run
# through two real `DataLoader` workers:

# %%
# NBVAL_CHECK_OUTPUT
def missing_and_repeated(yielded, n):
    counts = Counter({i: len(ws) for i, ws in yielded.items()})
    return [i for i in range(n) if counts[i] == 0], [i for i in range(n) if counts[i] > 1]


naive_small = stream(11, naive_shard, num_workers=WORKERS)
missing, repeated = missing_and_repeated(naive_small, 11)
print(f"11 samples, {WORKERS} workers: yielded {sum(map(len, naive_small.values()))}, "
      f"missing {missing}, repeated {repeated}")
assert missing == [10] and repeated == [], "the naive split drops the last 11 % 2 samples"

# %% [markdown]
# ### The fix
#
# Two splits cover everything. **Strided** sharding gives worker `w` the
# indices `w, w + num_workers, w + 2·num_workers, ...`, that is
# `range(worker_id, n, num_workers)`: every index belongs to exactly one
# worker, whatever `n` is. **Contiguous** blocks also work if their size is
# rounded *up* (`math.ceil(n / num_workers)`), with the last block cut at
# `n`; they suit files that are best read front to back. They are not
# always fair, though: 10 samples on 4 workers make blocks of 3, 3, 3 and 1
# (exercise 1 asks for a fair version).

# %%
# NBVAL_CHECK_OUTPUT
print(inspect.getsource(strided_shard))

# %% [markdown]
# The figure shows who yielded each of the 11 samples, for both splits:
# one colour per worker, and white for a sample nobody yielded.

# %%
fixed_small = stream(11, strided_shard, num_workers=WORKERS)
fig, axes = plt.subplots(2, 1, figsize=(7, 2.8))
for ax, (name, yielded) in zip(axes, [("n // num_workers (bug)", naive_small), ("strided (fix)", fixed_small)]):
    owner = np.full((1, 11), np.nan)
    for i, ws in yielded.items():
        owner[0, i] = ws[0]
    ax.imshow(owner, cmap=ListedColormap(["tab:blue", "tab:orange"]), vmin=-0.5, vmax=1.5)
    for i in range(11):
        ax.text(i, 0, "?" if np.isnan(owner[0, i]) else f"w{int(owner[0, i])}",
                ha="center", va="center", fontsize=8, color="black" if np.isnan(owner[0, i]) else "white")
    ax.set_xticks(range(11))
    ax.set_yticks([])
    ax.set_title(name, fontsize=9)
axes[1].set_xlabel("sample id (w0, w1: the worker that yielded it; ?: nobody did)")
plt.show()
assert missing_and_repeated(fixed_small, 11) == ([], []), "the strided split must yield each of the 11 samples once"

# %% [markdown]
# Now the proof on the real stream: all `STREAM_SAMPLES` images (an odd
# number, so the naive split for 2 workers would drop one) through a
# `DataLoader` with `num_workers=2`. We count how often each sample id
# arrives, and check that the sorted ids are exactly `0, 1, ..., n-1`, each
# once:

# %%
# NBVAL_CHECK_OUTPUT
naive_stream = stream(STREAM_SAMPLES, naive_shard, num_workers=WORKERS, batch_size=32)
fixed_sizes = {}
fixed_stream = stream(STREAM_SAMPLES, strided_shard, num_workers=WORKERS, batch_size=32, batch_sizes=fixed_sizes)
for name, yielded in [("naive", naive_stream), ("strided", fixed_stream)]:
    counts = Counter({i: len(ws) for i, ws in yielded.items()})
    missing, repeated = missing_and_repeated(yielded, STREAM_SAMPLES)
    per_worker = Counter(w for ws in yielded.values() for w in ws)
    print(f"{name:8s} {WORKERS} workers: {sum(counts.values())} of {STREAM_SAMPLES} samples yielded, "
          f"per worker {dict(sorted(per_worker.items()))}, missing {missing}, repeated {repeated}")
assert missing_and_repeated(naive_stream, STREAM_SAMPLES)[0] == list(range(STREAM_SAMPLES - STREAM_SAMPLES % WORKERS,
                                                                          STREAM_SAMPLES)), "the naive split drops the remainder"

# %%
counts = Counter({i: len(ws) for i, ws in fixed_stream.items()})
assert sorted(counts) == list(range(STREAM_SAMPLES)), "the strided stream must yield every id"
assert set(counts.values()) == {1}, f"some ids were yielded more than once: {counts.most_common(3)}"
exactly_once = sum(1 for c in counts.values() if c == 1)
report.record("samples yielded exactly once (2 workers)", exactly_once)
print(f"{exactly_once} of {STREAM_SAMPLES} samples yielded exactly once with num_workers={WORKERS}")

# %% [markdown]
# Two more things to know about iterable datasets with workers. First,
# each worker makes its **own batches** from its own shard, so the last
# batch of *each* worker may be short (with `drop_last=True`, each worker
# may drop one). In the strided run above, with batches of 32:

# %%
# NBVAL_CHECK_OUTPUT
for w, sizes in sorted(fixed_sizes.items()):
    print(f"worker {w}: {len(sizes)} batches, sizes {dict(sorted(Counter(sizes).items(), reverse=True))}")
for w, sizes in fixed_sizes.items():
    shard_size = len(strided_shard(STREAM_SAMPLES, w, WORKERS))
    assert sizes == [32] * (shard_size // 32) + ([shard_size % 32] if shard_size % 32 else []), (
        f"worker {w} should batch its own {shard_size} samples: {sizes}"
    )

# %% [markdown]
# Second, by default the `DataLoader` returns batches in a fixed
# round-robin order of the workers, so a slow worker holds the others up.
# `in_order=False` lets whichever batch is ready first through, at the
# price of a non-deterministic order.
#
# ## Samplers: rebalancing an imbalanced dataset
#
# A **sampler** yields the indices the `DataLoader` fetches. `shuffle=True`
# is just `RandomSampler`; `shuffle=False` is `SequentialSampler`. Writing
# your own is the standard way to change *which* samples a model sees.
#
# A common reason is class imbalance. We build an imbalanced training set
# from real MNIST: the most common digit keeps `IMBALANCE_MAX` images and
# each following digit keeps geometrically fewer, down to
# `IMBALANCE_MAX * IMBALANCE_RATIO` for the digit 9. (Real datasets look like
# this: fraud is rarer than honest payments, rare diseases rarer than common
# ones.) A model trained on it with plain shuffling would see the digit 0
# many times more often than the digit 9, and could learn that guessing 0
# pays (this chapter does not train on it).

# %%
# NBVAL_CHECK_OUTPUT
keep_per_class = [round(IMBALANCE_MAX * IMBALANCE_RATIO ** (c / 9)) for c in range(10)]
keep = torch.cat([(train_raw.targets == c).nonzero().squeeze(1)[:n] for c, n in enumerate(keep_per_class)])
imbalanced = TensorDataset(train_raw.data[keep].unsqueeze(1), train_raw.targets[keep])  # uint8 images
targets = train_raw.targets[keep]
class_counts = torch.bincount(targets, minlength=10)
print(f"{len(imbalanced)} images; per class: {class_counts.tolist()}")
print(f"most common / rarest class: {class_counts.max().item() / class_counts.min().item():.0f}x")


# %% [markdown]
# **`WeightedRandomSampler`** draws `num_samples` indices, each index `i`
# with probability proportional to `weights[i]`, with replacement. Giving
# each sample the weight `1 / (size of its class)` makes every class's total
# weight the same, so each draw picks each class with probability 1/10.
# Note that the weights are **per sample** (shape `[N]`), not per class: a
# common mistake is to pass the 10 class weights, which makes the sampler
# draw only the indices 0 to 9.
#
# Our own sampler takes a different route. A `Sampler` subclass needs
# `__iter__`, which yields indices, and usually `__len__`. This one is
# *stratified*: each epoch it takes exactly `num_samples / 10` indices from
# every class, cycling through a fresh random permutation of the class, so
# that a rare image is repeated as evenly as possible rather than at random,
# and then shuffles them all together. A sampler runs in the main process
# (the workers receive only the indices it yields), so unlike a dataset it
# may live in the notebook whatever the start method.


# %%
class ClassBalancedSampler(Sampler[int]):
    """Each epoch: exactly num_samples // C indices from each of the C classes, shuffled together.

    Within a class, indices come from back-to-back random permutations, so each sample of a
    rare class is repeated (almost) the same number of times.
    """

    def __init__(self, targets, num_samples, generator=None):
        self.by_class = [(targets == c).nonzero().squeeze(1) for c in targets.unique()]
        self.per_class = num_samples // len(self.by_class)
        self.generator = generator

    def __len__(self):
        return self.per_class * len(self.by_class)

    def __iter__(self):
        chosen = []
        for members in self.by_class:
            rounds = math.ceil(self.per_class / len(members))
            order = torch.cat([torch.randperm(len(members), generator=self.generator) for _ in range(rounds)])
            chosen.append(members[order[: self.per_class]])
        chosen = torch.cat(chosen)
        yield from chosen[torch.randperm(len(chosen), generator=self.generator)].tolist()


sample_weights = 1.0 / class_counts[targets].double()  # [N]: one weight per sample
samplers = {
    "shuffle=True (no rebalancing)": None,
    "WeightedRandomSampler": WeightedRandomSampler(sample_weights, num_samples=REBALANCED_DRAWS,
                                                   replacement=True, generator=generator),
    "ClassBalancedSampler": ClassBalancedSampler(targets, REBALANCED_DRAWS, generator=generator),
}
frequencies, drawn = {}, {}
for name, sampler in samplers.items():
    loader = DataLoader(imbalanced, batch_size=256, sampler=sampler, shuffle=sampler is None, generator=generator)
    seen_labels = torch.cat([y for _, y in loader])
    frequencies[name] = torch.bincount(seen_labels, minlength=10).double() / len(seen_labels)
    drawn[name] = len(seen_labels)
    print(f"{name:30s} {drawn[name]:6d} samples; class frequencies (%): "
          f"{[round(100 * f, 1) for f in frequencies[name].tolist()]}")

# %%
fig, ax = plt.subplots(figsize=(9, 3))
width = 0.27
for k, (name, freq) in enumerate(frequencies.items()):
    ax.bar(np.arange(10) + (k - 1) * width, 100 * freq.numpy(), width, label=name)
ax.axhline(10, color="black", linestyle="--", linewidth=1, label="uniform (10 %)")
ax.set(xlabel="digit", ylabel="share of the samples drawn (%)", xticks=range(10),
       title=f"class frequencies before and after rebalancing ({len(imbalanced)} images, {REBALANCED_DRAWS} draws)")
ax.legend(fontsize=8)
plt.show()

# %%
uniform = 1 / 10
deviation = {name: (freq - uniform).abs().max().item() for name, freq in frequencies.items()}
for name, dev in deviation.items():
    print(f"{name:30s} largest |frequency - 10 %| = {100 * dev:5.2f} points")
for name in ("WeightedRandomSampler", "ClassBalancedSampler"):
    assert deviation[name] <= BALANCE_TOLERANCE, (
        f"{name}: a class frequency is {100 * deviation[name]:.2f} points from 10 %, "
        f"more than the tolerance of {100 * BALANCE_TOLERANCE:.1f}"
    )
assert deviation["shuffle=True (no rebalancing)"] > BALANCE_TOLERANCE, "the original set should be imbalanced"
assert deviation["ClassBalancedSampler"] < 1e-9, "the stratified sampler should be balanced exactly"
_ = report.record("rebalanced max deviation from uniform", 100 * deviation["WeightedRandomSampler"], "points", digits=2)

# %% [markdown]
# `WeightedRandomSampler` is balanced only **on average**: each draw is an
# independent coin toss, so a class's count wobbles by about
# √(N · 0.1 · 0.9) draws around N / 10 (the standard deviation of a binomial
# count), a fraction of a percentage point of the N draws here. The
# stratified sampler is balanced **exactly**, by construction.

# %%
wobble = math.sqrt(REBALANCED_DRAWS * 0.1 * 0.9) / REBALANCED_DRAWS  # one standard deviation, as a share
print(f"expected wobble of a class share with {REBALANCED_DRAWS} independent draws: {100 * wobble:.2f} points; "
      f"largest measured: {100 * deviation['WeightedRandomSampler']:.2f} points")
assert 0 < deviation["WeightedRandomSampler"] < 5 * wobble, (
    f"WeightedRandomSampler should be balanced on average but not exactly: {100 * deviation['WeightedRandomSampler']:.2f} "
    f"points from 10 %, against a standard deviation of {100 * wobble:.2f}"
)

# %% [markdown]
# Both samplers repeat the rare images many times, but not in the same way.
# `WeightedRandomSampler` draws with replacement, so an image comes back a
# random number of times, and a common class is not even covered: drawing
# `k` times from `n` images leaves each one unseen with probability
# `(1 - 1/n) ** k`, about 1/e ≈ 37 % when `k ≈ n`, as for the digit 0 here.
# The stratified sampler goes through a whole permutation of a class before
# it repeats any image. Here is one fresh epoch of each: how many distinct
# images of the digits 0 and 9 were drawn, and how often each nine was.

# %%
repeats = {}  # sampler -> per class: how many times each image of that class was drawn this epoch
for name in ("WeightedRandomSampler", "ClassBalancedSampler"):
    drawn_counts = torch.bincount(torch.tensor(list(samplers[name])), minlength=len(targets))  # a fresh epoch
    repeats[name] = [drawn_counts[targets == c] for c in range(10)]
    zeros, nines = repeats[name][0], repeats[name][9]
    print(f"{name:22s} digit 0: {(zeros > 0).sum().item():4d} of {len(zeros)} images seen;  "
          f"digit 9: {(nines > 0).sum().item()} of {len(nines)} seen, each {nines.min().item()} to "
          f"{nines.max().item()} times (mean {nines.double().mean().item():.1f})")
zeros = repeats["WeightedRandomSampler"][0]
expected_seen = 1 - (1 - 1 / len(zeros)) ** zeros.sum().item()  # share of the zeros that k draws with replacement reach
print(f"expected share of the zeros seen after {zeros.sum().item()} draws with replacement from {len(zeros)}: "
      f"{expected_seen:.0%}; measured {(zeros > 0).double().mean().item():.0%}")

# %%
balanced_spread = [(r.max() - r.min()).item() for r in repeats["ClassBalancedSampler"]]
per_nine = (REBALANCED_DRAWS // 10) / class_counts[9].item()  # draws of the digit 9 per image, on average
assert max(balanced_spread) <= 1, f"ClassBalancedSampler should repeat a class's images evenly (max - min <= 1): {balanced_spread}"
assert (repeats["ClassBalancedSampler"][9] > 0).sum().item() == class_counts[9].item(), "every nine should be drawn"
assert (repeats["WeightedRandomSampler"][9].max() - repeats["WeightedRandomSampler"][9].min()).item() > 1, (
    "WeightedRandomSampler should repeat the nines a random, uneven number of times"
)
for name in repeats:
    mean_nine = repeats[name][9].double().mean().item()
    assert abs(mean_nine / per_nine - 1) < 0.15, f"{name}: each nine drawn {mean_nine:.1f} times, expected about {per_nine:.1f}"
seen_zeros = {name: (r[0] > 0).sum().item() for name, r in repeats.items()}
assert seen_zeros["WeightedRandomSampler"] < seen_zeros["ClassBalancedSampler"], (
    f"drawing with replacement should miss some zeros that the stratified sampler draws: {seen_zeros}"
)
assert abs((zeros > 0).double().mean().item() - expected_seen) < 0.05, "the zeros seen should follow 1 - (1 - 1/n) ** k"

# %% [markdown]
# Oversampling does not create information: the model sees the same
# nines (the count printed above) over and over, and can overfit them. Random augmentation
# (chapter 07) makes the repeats differ a little. The alternative that leaves
# the sampler alone is to weight the *loss* instead,
# `F.cross_entropy(logits, y, weight=class_weights)`. Which works better
# depends on the data; a sampler makes the rare classes show up in many more
# batches, where the loss weights only rescale the few that appear.
#
# ## Collating sequences of different lengths
#
# After the sampler has picked a batch of indices and the dataset has
# produced the samples, the **collate function** turns a list of samples
# into one batch. The default, `default_collate`, stacks tensors with
# `torch.stack`, which needs them all to have the same shape. Text, audio and
# time series do not. Our text: the lines of "The Zen of Python" that
# ships with every Python, encoded as one integer id per character. Id 0 is
# kept free to mean "padding".

# %%
# NBVAL_CHECK_OUTPUT
with contextlib.redirect_stdout(io.StringIO()):  # `import this` prints the poem; we only want the text
    import this
zen_lines = [line for line in codecs.decode(this.s, "rot13").splitlines() if line.strip()]
PAD = 0
char_to_id = {c: i + 1 for i, c in enumerate(sorted(set("".join(zen_lines))))}  # ids 1.., 0 = padding
line_ids = [torch.tensor([char_to_id[c] for c in line]) for line in zen_lines]
print(f"{len(zen_lines)} lines, {len(char_to_id)} distinct characters; lengths: {[len(t) for t in line_ids]}")
print(repr(zen_lines[3]), "->", line_ids[3][:12].tolist(), "...")

# %% [markdown]
# `default_collate` fails on them with the error you will meet sooner or
# later:

# %%
# NBVAL_CHECK_OUTPUT
try:
    next(iter(DataLoader(line_ids, batch_size=4)))
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# The fix is a collate function that **pads** every sequence to the longest
# one in the batch with `torch.nn.utils.rnn.pad_sequence`, and returns the
# true **lengths** as well, because the model must know which positions are
# padding (a recurrent network through `pack_padded_sequence` in chapter 08,
# a transformer through a padding mask in chapter 09). Note `batch_first=True`:
# the default, `False`, returns `[max_len, batch]`, the layout of old RNN
# code. With `num_workers > 0` the `collate_fn` runs in the workers, so it
# too must come from a module under `spawn`; the loaders here use the main
# process.


# %%
def pad_collate(batch):
    """List of 1-D int64 tensors -> (padded [B, max_len] int64, lengths [B] int64)."""
    lengths = torch.tensor([len(seq) for seq in batch])
    padded = pad_sequence(batch, batch_first=True, padding_value=PAD)
    return padded, lengths


text_loader = DataLoader(line_ids, batch_size=4, shuffle=True, collate_fn=pad_collate, generator=generator)
random_epoch = list(text_loader)  # one epoch of random batches, kept to compare with bucketing below
for padded, lengths in random_epoch:
    pad_share = (padded == PAD).float().mean().item()
    print(f"padded {tuple(padded.shape)}, lengths {lengths.tolist()}, {pad_share:.0%} padding")

# %% [markdown]
# A boolean mask of the real positions comes straight from the lengths, and
# padding back off gives the original lines:

# %%
# NBVAL_CHECK_OUTPUT
padded, lengths = pad_collate(line_ids[:3])
mask = torch.arange(padded.shape[1]) < lengths.unsqueeze(1)  # [B, max_len], True = real character
id_to_char = {i: c for c, i in char_to_id.items()}
print("padded:", tuple(padded.shape), "lengths:", lengths.tolist(), "real positions per row:", mask.sum(1).tolist())
print("last 6 ids of row 0:", padded[0, -6:].tolist())
for row, n in zip(padded, lengths):
    assert "".join(id_to_char[i] for i in row[:n].tolist()) in zen_lines
assert torch.equal(mask, padded != PAD), "padding is exactly where the mask is False"

# %% [markdown]
# Random batches mix short and long lines, so much of each batch can be
# padding, computed on and thrown away. Grouping lines of similar length
# (**bucketing**) cuts the waste. A `batch_sampler` yields whole batches of
# indices; here a simple one: sort by length, cut into batches, shuffle the
# batches. We compare its padding with that of the random epoch printed
# above.

# %%
def padding_share(batches):
    """Share of the positions that are padding, over an iterable of (padded, lengths) batches."""
    real = total = 0
    for padded, lengths in batches:
        real, total = real + lengths.sum().item(), total + padded.numel()
    return 1 - real / total


by_length = sorted(range(len(line_ids)), key=lambda i: len(line_ids[i]))
buckets = [by_length[i: i + 4] for i in range(0, len(by_length), 4)]
buckets = [buckets[i] for i in torch.randperm(len(buckets), generator=generator).tolist()]
bucketed_loader = DataLoader(line_ids, batch_sampler=buckets, collate_fn=pad_collate)
random_padding, bucketed_padding = padding_share(random_epoch), padding_share(bucketed_loader)
print(f"padding with the random batches above: {random_padding:.0%} of the positions")
print(f"padding with length buckets:          {bucketed_padding:.0%} of the positions")
assert bucketed_padding < random_padding, "batches of similar lengths should need less padding"

# %% [markdown]
# ## Loader settings, measured
#
# Now the knobs that change *how fast* batches arrive. The pipeline is a
# realistic one: MNIST images through a per-sample `transforms.v2` pipeline
# with a random crop (the augmentation is random, so, unlike chapter 05, the
# work cannot be done once up front: it must run anew every epoch). The
# settings:
#
# - `num_workers`: how many worker processes prepare batches. With 0, the
#   main process does all the work itself, between training steps;
# - `pin_memory=True`: put each batch in page-locked ("pinned") memory, from
#   which a copy to a CUDA GPU is faster and can run asynchronously
#   (`.to(device, non_blocking=True)`). Without an accelerator it does
#   nothing (PyTorch says so in a warning, printed below);
# - `persistent_workers=True`: keep the workers alive between epochs, instead
#   of starting new ones each time you iterate over the loader;
# - `prefetch_factor`: how many batches each worker prepares ahead
#   (default 2, so 2 × `num_workers` batches are in flight).
#
# Each setting runs `TIMED_EPOCHS` epochs over `THROUGHPUT_SAMPLES` images,
# timed from creating the iterator (which starts the workers) to the last
# batch. The second column repeats the run with a training step of a small
# CNN after each batch: that is the "own work" of the main process, the
# situation in which workers can help by preparing the next batch
# meanwhile. The last columns show how long the first batch of each epoch
# took to arrive. Timings depend on the machine and on what else runs on
# it, so the cell first prints the load average (on Unix: how many
# processes wanted a core, averaged over the last minute), and the verdict
# after the figure uses it to decide whether this run can be judged at all.
#
# One more choice: every worker process runs torch with a single thread
# (the `DataLoader` calls `torch.set_num_threads(1)` in each worker, so that
# workers do not fight over the cores). For the table we give the main
# process one thread too. Every setting then does its per-image work the
# same way, and on two cores the split is clear: one core for the training
# step, the other free for a worker. (Two threads for the training step
# *plus* workers would ask for more cores than there are.)

# %%
augment = v2.Compose([
    v2.ToImage(),
    v2.RandomCrop(28, padding=2),
    v2.ToDtype(torch.float32, scale=True),
    v2.Normalize(mean=[0.1307], std=[0.3081]),
])
timing_set = Subset(mnist(train=True, transform=augment), range(THROUGHPUT_SAMPLES))
main_threads = torch.get_num_threads()
torch.set_num_threads(1)  # restored after the table

cnn = nn.Sequential(
    nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(32 * 7 * 7, 10),
).to(device)
cnn_optimizer = torch.optim.SGD(cnn.parameters(), lr=0.01)


def train_step(x, y):
    loss = F.cross_entropy(cnn(x), y)
    cnn_optimizer.zero_grad()
    loss.backward()
    cnn_optimizer.step()


def synchronize():
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(settings, with_training):
    """Samples per second over TIMED_EPOCHS epochs, the first-batch wait of each epoch (s), and whether batches were pinned."""
    loader = DataLoader(timing_set, batch_size=BATCH_SIZE, shuffle=True, generator=generator, **settings)
    n, first_batch, pinned = 0, [], False
    start = time.perf_counter()
    for _ in range(TIMED_EPOCHS):
        epoch_start = time.perf_counter()
        for b, (x, y) in enumerate(loader):
            if b == 0:
                first_batch.append(time.perf_counter() - epoch_start)
                pinned = x.is_pinned()
            x = x.to(device, non_blocking=loader.pin_memory)
            y = y.to(device, non_blocking=loader.pin_memory)
            if with_training:
                train_step(x, y)
            n += len(y)
    synchronize()
    seconds = time.perf_counter() - start
    del loader  # shuts persistent workers down
    return n / seconds, first_batch, pinned


x0, y0 = next(iter(DataLoader(timing_set, batch_size=BATCH_SIZE)))
train_step(x0.to(device), y0.to(device))  # warm-up
synchronize()
start = time.perf_counter()
for _ in range(3):
    train_step(x0.to(device), y0.to(device))
synchronize()
step_ms = (time.perf_counter() - start) / 3 * 1000
print(f"one training step of the CNN on a batch of {BATCH_SIZE}: {step_ms:.0f} ms")

# %%
settings_table = [  # (label, DataLoader keyword arguments, also time it with a training step?)
    ("num_workers=0", dict(num_workers=0), True),
    ("num_workers=1", dict(num_workers=1), True),
    ("num_workers=2", dict(num_workers=2), True),
    ("2 + pin_memory", dict(num_workers=2, pin_memory=True), False),
    ("2 + persistent_workers", dict(num_workers=2, persistent_workers=True), False),
    ("2 + prefetch_factor=4", dict(num_workers=2, prefetch_factor=4), False),
]
if TIMED_SETTINGS is not None:
    unknown = set(TIMED_SETTINGS) - {label for label, _, _ in settings_table}
    assert not unknown and "num_workers=0" in TIMED_SETTINGS, f"TIMED_SETTINGS: unknown {unknown}, or no num_workers=0"
    settings_table = [row for row in settings_table if row[0] in TIMED_SETTINGS]
print(f"worker processes start with {START!r}")
usable_cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None  # Unix only
load_note = (f"load average {load_before:.1f} on {usable_cores} cores" if load_before is not None
             else f"{usable_cores} cores, no load average on this platform")
print(f"before timing: {load_note}")
results = {}  # label -> (samples/s loading only, samples/s with a training step or None, first-batch waits, pinned)
table_start = time.perf_counter()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for label, settings, with_training in settings_table:
        loading, first, pinned = measure(settings, with_training=False)
        training = measure(settings, with_training=True)[0] if with_training else None
        results[label] = (loading, training, first, pinned)
table_seconds = time.perf_counter() - table_start
torch.set_num_threads(main_threads)
warned = sorted({str(w.message) for w in caught})
for message in warned:
    print(f"warning: {message}")

base_loading, base_training, _, _ = results["num_workers=0"]
print(f"\n{'setting':24s} {'loading only':>14s} {'+ training step':>16s} {'first batch of each epoch':>26s}")
print(f"{'':24s} {'samples/s':>14s} {'samples/s':>16s} {'ms':>26s}")
for label, (loading, training, first, _) in results.items():
    train_text = f"{training:9.0f} ({training / base_training:.2f}x)" if training else f"{'-':>16s}"
    first_text = " / ".join(f"{1000 * s:.0f}" for s in first)
    print(f"{label:24s} {loading:6.0f} ({loading / base_loading:.2f}x) {train_text:>16s} {first_text:>26s}")
load_ms = 1000 * BATCH_SIZE / base_loading
overlap_bound = (load_ms + step_ms) / max(load_ms, step_ms)  # (load + train) / max(load, train): the best case
print(f"\nper batch: loading in the main process {load_ms:.0f} ms, one training step {step_ms:.0f} ms "
      f"(table measured in {table_seconds:.1f} s)")
if "num_workers=1" in results:
    print(f"a worker that loads while the main process trains could make the '+ training step' column up to "
          f"{overlap_bound:.2f}x faster, if a core is free for it; measured: "
          f"{results['num_workers=1'][1] / base_training:.2f}x with num_workers=1")
restarted = {k: r[2][-1] for k, r in results.items() if k in ("num_workers=2", "2 + pin_memory", "2 + prefetch_factor=4")}
if TIMED_EPOCHS >= 2 and "2 + persistent_workers" in results and restarted:
    persistent_ms = 1000 * results["2 + persistent_workers"][2][-1]
    print(f"first batch of epoch 2: {persistent_ms:.0f} ms with persistent workers; "
          f"{1000 * min(restarted.values()):.0f} to {1000 * max(restarted.values()):.0f} ms "
          f"in the other two-worker rows, which start new workers")
    print(f"what a restart costs, from the workers section: first batch of {WORKERS} new workers "
          + ", ".join(f"{1000 * sec:.0f} ms with {method!r}" for method, sec in timings.items())
          + f"; one batch loaded in the main process: {load_ms:.0f} ms")

# %%
labels_order = list(results)
fig, ax = plt.subplots(figsize=(9, 3))
rows_y = np.arange(len(labels_order))
ax.barh(rows_y + 0.2, [results[k][0] for k in labels_order], 0.4, label="loading only")
trained = [k for k in labels_order if results[k][1]]
ax.barh([labels_order.index(k) - 0.2 for k in trained], [results[k][1] for k in trained], 0.4, label="+ training step")
for k in labels_order:
    if not results[k][1]:
        ax.text(0, labels_order.index(k) - 0.2, " + training step: not timed", va="center", fontsize=7, color="gray")
ax.set_yticks(rows_y, labels_order)
ax.invert_yaxis()
ax.set(xlabel="samples per second (higher is better)",
       title=f"DataLoader settings on {device.type}, workers by {START!r} ({load_note})")
ax.legend(fontsize=8)
plt.show()

if "num_workers=1" in results:
    worker_gain = results["num_workers=1"][1] / base_training
    _ = report.record("num_workers=1 / num_workers=0, samples/s with a training step", worker_gain, "x", digits=2)
if "num_workers=2" in results:
    _ = report.record("num_workers=2 / num_workers=0, samples/s loading only",
                      results["num_workers=2"][0] / base_loading, "x", digits=2)

# %% [markdown]
# How to read the table. The cell below prints the verdict on this run. It
# judges the timings only when the load average left a core free for a
# worker: at most the number of usable cores minus one, because the
# notebook's own process is one of those counted. Then it checks the two
# claims that this section makes, each in the case where it must hold. On a
# busy machine it says so and judges nothing, because the timings then
# measure the other programs as much as the loader.
#
# - **`num_workers=1`, loading only**, does the same work as
#   `num_workers=0`, just in another process, plus the cost of starting that
#   process and sending each batch back through shared memory. It cannot be
#   much faster. A worker pays off when the main process **has its own
#   work** to overlap with: in the "+ training step" column the worker
#   prepares batch *k + 1* while the main process trains on batch *k*, so an
#   epoch takes about the longer of the two times instead of their sum. The
#   lines under the table work out that best case from the two times, next
#   to what was measured. The verdict checks that `num_workers=1` beats
#   `num_workers=0` by at least `MIN_WORKER_SPEEDUP` in that column when
#   the machine was quiet, workers start by `fork` (cheap), an epoch has at
#   least 8 batches to overlap, and the best case leaves room for that gain
#   (on a GPU the training step is so short that it does not).
# - **`num_workers=2`** can load up to twice as fast, but only if two cores
#   are idle, and the main process needs one too (in the second column, for
#   the training step). When other programs keep the cores busy, extra
#   workers have nothing to gain, and their start-up and hand-over costs can
#   make them lose. A good rule: start with the number of free cores, then
#   measure.
# - **Worker start-up** shows in the first-batch column. Creating an
#   iterator starts the workers, and the first batch must wait until a worker
#   has produced it; without `persistent_workers` that happens every epoch.
#   A forked worker starts quickly; a spawned one is a fresh Python that
#   imports torch and your modules first (the section on workers measured
#   both, printed again on the last line under the table). With `spawn`,
#   and epochs as short as these, the start-up can cost more than the
#   epoch's loading, and every worker row except `persistent_workers` pays
#   it again each epoch. `persistent_workers=True` pays it once (the seeding
#   section below checks with process ids that epoch 2 really runs in epoch
#   1's workers). Under `spawn` the verdict checks that its epoch-2 first
#   batch takes less than half as long as that of any row that restarts its
#   workers. With `fork` a restart costs about as much as a batch or two, so
#   one run may not show the gap, and the verdict does not judge it.
# - **`pin_memory`** only matters with an accelerator. Without one
#   the `DataLoader` warns (printed above the table) and ignores it, so that
#   row does exactly the work of plain `num_workers=2`; the verdict checks
#   that its batches were not pinned, and uses the gap between the two rows
#   as a yardstick of this run's noise. On a GPU, pin and use
#   `.to(device, non_blocking=True)`, as `measure` does.
# - **`prefetch_factor`** is meant for when the time per batch varies (a slow
#   disk, images of very different sizes): a deeper queue can absorb the
#   bumps (not measured here). MNIST
#   batches all cost about the same, so here a deeper queue has little to
#   absorb and mostly holds more memory; the verdict compares its gap to
#   plain `num_workers=2` with the noise yardstick.

# %%
MIN_BATCHES_TO_JUDGE = 8  # with fewer batches per epoch, a worker's start-up outweighs what it can overlap
batches_per_epoch = math.ceil(THROUGHPUT_SAMPLES / BATCH_SIZE)


def reason_not_to_judge(*conditions):
    """The first reason whose condition holds, or None when the timings may be judged."""
    return next((why for holds, why in conditions if holds), None)


if load_before is None:
    busy = "this platform has no load average (os.getloadavg), so nothing says whether a core was free"
elif load_before > usable_cores - 1:  # the notebook itself is one of the processes counted
    busy = (f"the load average, {load_before:.1f}, left no core free for a worker (it must be at most "
            f"{usable_cores} usable cores - 1 for the notebook itself): the timings measure the other programs "
            "as much as the loader")
else:
    busy = None
print(f"{load_note}, workers by {START!r}, batches per epoch: {batches_per_epoch}; "
      + ("quiet enough to judge the timings" if busy is None else "the timings are not judged"))

why_not = reason_not_to_judge(
    ("num_workers=1" not in results, "its row was not timed (TIMED_SETTINGS)"),
    (busy is not None, busy),
    (START != "fork", f"workers start with {START!r}, and only a forked worker starts quickly next to an epoch"),
    (batches_per_epoch < MIN_BATCHES_TO_JUDGE,
     f"an epoch has {batches_per_epoch} batches, fewer than {MIN_BATCHES_TO_JUDGE}, so start-up outweighs the overlap"),
    (overlap_bound < 1 + 2 * (MIN_WORKER_SPEEDUP - 1),
     f"the best case, {overlap_bound:.2f}x, leaves no room for {MIN_WORKER_SPEEDUP:.2f}x: loading and the training "
     "step are too unequal for an overlap to matter"),
)
if why_not:
    print(f"num_workers=1 with a training step beats num_workers=0: not judged, because {why_not}")
else:
    print(f"num_workers=1 with a training step: {worker_gain:.2f}x the samples/s of num_workers=0 "
          f"(best case {overlap_bound:.2f}x), checked to be at least {MIN_WORKER_SPEEDUP:.2f}x")
    assert worker_gain >= MIN_WORKER_SPEEDUP, (
        f"on a quiet machine one worker should overlap loading with the training step: {worker_gain:.2f}x, "
        f"less than MIN_WORKER_SPEEDUP = {MIN_WORKER_SPEEDUP:.2f}x (best case {overlap_bound:.2f}x)"
    )

why_not = reason_not_to_judge(
    ("2 + persistent_workers" not in results or not restarted, "the two-worker rows were not timed (TIMED_SETTINGS)"),
    (TIMED_EPOCHS < 2, "only one epoch was timed (TIMED_EPOCHS), so no worker was restarted"),
    (busy is not None, busy),
    (START != "spawn", f"workers start with {START!r}, whose restart is too cheap to stand out in one run"),
)
if why_not:
    print(f"persistent workers reach epoch 2's first batch in under half the time: not judged, because {why_not}")
else:
    print(f"epoch 2's first batch: {persistent_ms:.0f} ms with persistent workers, at least "
          f"{1000 * min(restarted.values()):.0f} ms with a restart: checked to be under half")
    assert persistent_ms / 1000 < 0.5 * min(restarted.values()), (
        f"under spawn, persistent workers should skip the restart: epoch 2's first batch took {persistent_ms:.0f} ms, "
        f"against {1000 * min(restarted.values()):.0f} ms for a row that restarts its workers"
    )

if "2 + pin_memory" in results and "num_workers=2" in results:
    pinned = results["2 + pin_memory"][3]
    noise = abs(results["2 + pin_memory"][0] / results["num_workers=2"][0] - 1)
    if not torch.accelerator.is_available():
        assert not pinned and any("pin_memory" in m for m in warned), "without an accelerator pin_memory is ignored, with a warning"
        print(f"pin_memory: batches not pinned (no accelerator), so the row repeats num_workers=2's work; "
              f"their gap, {noise:.0%}, is this run's noise")
    else:
        print(f"pin_memory: batches pinned: {pinned}; {noise:.0%} from plain num_workers=2")
    if "2 + prefetch_factor=4" in results:
        gap = results["2 + prefetch_factor=4"][0] / results["num_workers=2"][0] - 1
        print(f"prefetch_factor=4: {gap:+.0%} against plain num_workers=2, "
              + ("within" if abs(gap) <= noise else "beyond") + f" the {noise:.0%} of noise")


# %% [markdown]
# ## Seeding workers
#
# Random augmentations need random numbers in the workers, and there is a
# classic trap: a worker's random number generators start from whatever
# state came along with it. A forked worker is a copy of the main process,
# **generator states included**; a spawned one is a fresh Python whose
# generators seed themselves at start-up, except those that travel inside the
# pickled dataset. So the `DataLoader` re-seeds the generators it knows
# about in every worker, with every start method: `torch`'s and Python's
# `random` with `base_seed + worker_id`, and, since PyTorch 1.9, NumPy's
# global generator (`np.random.seed`, from `base_seed` and `worker_id`).
# `base_seed` is drawn from the loader's `generator=` (or the global torch
# generator) every time an iterator is created, so workers started for a new
# epoch get new seeds. (Before 1.9, NumPy's global generator was *not*
# re-seeded: under `fork` every worker inherited the same state and produced
# the same "random" augmentations, the bug many old blog posts describe;
# under `spawn` each worker's NumPy seeded itself from the operating system,
# so the draws differed but could not be reproduced.)
#
# A generator that **your dataset owns**, such as
# `np.random.default_rng(seed)` created in `__init__`, travels into every
# worker inside the dataset (copied by `fork`, pickled with its state by
# `spawn`), and nobody re-seeds it. `RandomShift` draws a random shift for
# each image from such a generator and, for comparison, a second one from
# NumPy's global generator; each item also says which worker made it, and
# that worker's torch seed:

# %%
# NBVAL_CHECK_OUTPUT
print(inspect.getsource(RandomShift))


# %%
# NBVAL_CHECK_OUTPUT
def draws_per_batch(dataset, epochs=2, pids=None, **loader_args):
    """[epoch][batch] -> {"worker", "torch_seed", "shift", "global_shift"} for batches of 4 from WORKERS workers.

    A list passed as `pids` receives, for each epoch, the set of process ids that made its items.
    """
    loader = DataLoader(dataset, batch_size=4, num_workers=WORKERS, **loader_args)
    draws = []
    for _ in range(epochs):
        draws.append([])
        if pids is not None:
            pids.append(set())
        for batch in loader:
            if pids is not None:
                pids[-1].update(batch["pid"].tolist())
            (worker,) = set(batch["worker"].tolist())  # the 4 items of a batch come from one worker
            draws[-1].append({"worker": worker, "torch_seed": batch["torch_seed"][0].item(),
                              "shift": [tuple(s) for s in batch["shift"].tolist()],
                              "global_shift": [tuple(s) for s in batch["global_shift"].tolist()]})
    return draws


buggy_pids = []  # per epoch: the process ids of the workers that made the batches
buggy = draws_per_batch(RandomShift(images[:16]), pids=buggy_pids, generator=torch.Generator().manual_seed(SEED))
for epoch, batches in enumerate(buggy, start=1):
    for b, d in enumerate(batches):
        print(f"epoch {epoch}, batch {b} (worker {d['worker']}): own {d['shift']}  np.random {d['global_shift']}")

# %% [markdown]
# Batch 0 comes from worker 0 and batch 1 from worker 1, and they got the
# **same** shifts from the dataset's own generator; so did batches 2 and 3.
# Worse, epoch 2 repeats epoch 1 exactly: each epoch's new workers get a
# fresh copy of the main process's dataset, whose generator is still in its
# initial state. Half of the "random" augmentations are duplicates, and none
# changes between epochs. The `np.random` column, drawn in the same workers
# from NumPy's global generator, differs between the workers and between
# the epochs: the `DataLoader` re-seeded that one.

# %%
own = [[d["shift"] for d in batches] for batches in buggy]
global_draws = [[d["global_shift"] for d in batches] for batches in buggy]
assert [d["worker"] for d in buggy[0]] == [0, 1, 0, 1], "the batches should come from the two workers in turn"
assert own[0][0] == own[0][1] and own[0][2] == own[0][3], "both workers draw the same shifts from the dataset's generator"
assert own[0] == own[1], "epoch 2 repeats epoch 1"
assert global_draws[0][0] != global_draws[0][1], "NumPy's global generator should differ between the workers"
assert global_draws[0] != global_draws[1], "NumPy's global generator should be re-seeded for every epoch's workers"


# %% [markdown]
# The same duplicates as a picture: each image is one digit rolled by a
# shift that a worker drew from the dataset's own generator in epoch 1, one
# row per worker. Equal shifts give equal images, so the two rows are
# identical.

# %%
def plot_worker_shifts(draws, title):
    """One row per worker: the epoch-1 shifts it drew from the dataset's generator, applied to one digit."""
    digit = images[0]
    fig, axes = plt.subplots(WORKERS, 8, figsize=(9, 2.6))
    for w in range(WORKERS):
        shifts = [s for d in draws[0] if d["worker"] == w for s in d["shift"]][:8]
        for ax, (dy, dx) in zip(axes[w], shifts):
            ax.imshow(torch.roll(digit, shifts=(dy, dx), dims=(1, 2))[0].numpy(), cmap="gray")
            ax.set_title(f"({dy}, {dx})", fontsize=7)
        for ax in axes[w]:
            ax.set_xticks([])
            ax.set_yticks([])
        axes[w, 0].set_ylabel(f"worker {w}", fontsize=8)
    fig.suptitle(title, fontsize=9)
    plt.show()
    return [[s for d in draws[0] if d["worker"] == w for s in d["shift"]] for w in range(WORKERS)]


rows = plot_worker_shifts(buggy, "dataset-owned generator, no worker_init_fn: (dy, dx) drawn by each worker in epoch 1")
assert rows[0] == rows[1], "the two rows of the figure should be the same shifts"

# %% [markdown]
# The fix is a `worker_init_fn`, which the `DataLoader` calls in each worker
# as it starts, after seeding torch. There, `torch.initial_seed()` returns
# that worker's torch seed, `base_seed + worker_id`: different for each
# worker, and derived from the loader's `generator`, so reproducible. We
# re-create the dataset's generator from it (the worker's copy of the
# dataset is `get_worker_info().dataset`). `np.random.default_rng` accepts
# any non-negative integer as its seed (it hashes it with `SeedSequence`),
# so the 64-bit torch seed goes in as it is. PyTorch's reproducibility notes
# show the same pattern for NumPy's *global* generator and `random`, with
# `np.random.seed(torch.initial_seed() % 2**32)`. The `% 2**32` is needed,
# with every version: a worker's torch seed is a 64-bit integer (printed
# below, with the fixed loader), and the legacy `np.random.seed` accepts
# only 0 to 2**32 - 1. (The `DataLoader`'s own re-seeding of NumPy avoids
# the limit by expanding `base_seed` and `worker_id` into four 32-bit words.)

# %%
# NBVAL_CHECK_OUTPUT
print(inspect.getsource(seed_worker))

# %% [markdown]
# This time the loader keeps its workers for both epochs
# (`persistent_workers=True`, one start-up per run instead of one per
# epoch). Then `seed_worker` runs once per worker, and epoch 2 continues
# each worker's generator. Without persistent workers, epoch 2's new
# workers would get a new `base_seed` and be seeded afresh. Either way the
# epochs differ.

# %%
# NBVAL_CHECK_OUTPUT
def run_seeded(seed, pids=None):
    """Two epochs of shuffled batches of draws, from a loader whose generator is seeded with `seed`."""
    return draws_per_batch(RandomShift(images[:16]), pids=pids, shuffle=True, worker_init_fn=seed_worker,
                           persistent_workers=True, generator=torch.Generator().manual_seed(seed))


fixed_pids = []
fixed_a, fixed_b, other_seed = run_seeded(SEED, fixed_pids), run_seeded(SEED), run_seeded(SEED + 1)
for b, d in enumerate(fixed_a[0]):
    print(f"epoch 1, batch {b} (worker {d['worker']}, torch seed {d['torch_seed']}): shifts {d['shift']}")
print("epoch 2, batch 0:", fixed_a[1][0]["shift"])
print("two runs with generator seed", SEED, "give identical batches:", fixed_a == fixed_b)
print("a run with seed", SEED + 1, "gives different batches:", fixed_a != other_seed)

# %%
own = [[d["shift"] for d in batches] for batches in fixed_a]
seeds = {d["worker"]: d["torch_seed"] for d in fixed_a[0]}
assert fixed_a == fixed_b, "two runs with the same generator seed must give identical batches"
assert fixed_a != other_seed, "a different generator seed should give different batches"
assert seeds[1] - seeds[0] == 1, f"the workers' torch seeds should be base_seed + worker_id, got {seeds}"
assert own[0][0] != own[0][1], "with seed_worker the two workers must draw different shifts"
assert own[0] != own[1], "with seed_worker each epoch must draw new shifts"

# %%
rows = plot_worker_shifts(fixed_a, "with worker_init_fn=seed_worker: (dy, dx) drawn by each worker in epoch 1")
assert rows[0] != rows[1], "with seed_worker the two rows of the figure should differ"

# %% [markdown]
# Did `persistent_workers=True` really keep the processes? Each item also
# carries `os.getpid()` of the process that made it. Over the two epochs,
# the plain loader of the buggy run and the persistent one of this run
# were served by these worker processes (their ids vary from run to run, so
# we print only how many there were and whether epoch 2 reused epoch 1's):

# %%
# NBVAL_CHECK_OUTPUT
main_pid = os.getpid()
for name, pids in [("persistent_workers=False", buggy_pids), ("persistent_workers=True", fixed_pids)]:
    print(f"{name}: {len(pids[0])} worker processes in epoch 1, {len(pids[1])} in epoch 2, "
          f"{len(pids[0] | pids[1])} started in all; epoch 2 reused epoch 1's: {pids[1] == pids[0]}")
assert all(main_pid not in p and len(p) == WORKERS for p in buggy_pids + fixed_pids), "every epoch runs in WORKERS workers"
assert buggy_pids[0].isdisjoint(buggy_pids[1]), "without persistent_workers, each epoch should start new workers"
assert fixed_pids[0] == fixed_pids[1], "with persistent_workers=True, epoch 2 should run in epoch 1's workers"

# %% [markdown]
# And the `% 2**32` of the reproducibility notes, with that worker seed:

# %%
# NBVAL_CHECK_OUTPUT
worker_seed = seeds[0]
print(f"worker 0's torch seed: {worker_seed} ({worker_seed.bit_length()} bits; 2**32 = {2**32})")
try:
    np.random.seed(worker_seed)
except ValueError as err:
    print(f"np.random.seed(torch seed) -> {type(err).__name__}: {err}")
np.random.seed(worker_seed % 2**32)
print("np.random.seed(torch seed % 2**32) works; np.random.default_rng(torch seed) too:",
      isinstance(np.random.default_rng(worker_seed), np.random.Generator))

# %% [markdown]
# The `generator=` argument matters twice: it seeds the shuffling (the
# sampler) *and* it is where `base_seed` comes from. Without it, both come
# from the global torch generator, which any other code in your program may
# have advanced, so two runs agree only if everything before them was
# identical too.
#
# ## Pitfalls
#
# We met most of them above; in short:
#
# 1. **An `IterableDataset` without sharding** yields everything once per
#    worker; **sharding with `n // num_workers`** silently drops the
#    remainder. Count the ids once, as we did.
# 2. **`default_collate` on variable-length samples** raises
#    `RuntimeError: stack expects each tensor to be equal size`; write a
#    `collate_fn` that pads and returns the lengths.
# 3. **Per-class weights passed to `WeightedRandomSampler`**: it wants one
#    weight per *sample*, and it raises no error when given 10 numbers: it
#    draws indices 0 to 9 (shown below).
# 4. **A dataset, `collate_fn` or `worker_init_fn` defined in the notebook,
#    with `spawn` or `forkserver`** (macOS, Windows, and Linux from Python
#    3.14): the worker dies with `AttributeError: Can't get attribute ...`
#    and the loader reports only `RuntimeError: DataLoader worker ... exited
#    unexpectedly`. Move the code that workers run into an importable
#    module, and send data rather than notebook functions (as
#    `PrecomputedShards` does in exercise 1). In a script, `spawn` also
#    re-imports your main file in every worker: keep the code that iterates
#    over loaders under `if __name__ == "__main__":` (Python's
#    `multiprocessing` guide, "Safe importing of main module").
# 5. **A generator owned by the dataset** repeats in every worker and every
#    epoch, with every start method; re-seed it in a `worker_init_fn` from
#    `torch.initial_seed()`.
#
# And one more: **`shuffle=True` on an `IterableDataset`** is refused,
# because there are no indices to shuffle. Shuffle inside the stream (for
# example with a buffer of samples), or use a map-style dataset.

# %%
# NBVAL_CHECK_OUTPUT
try:
    DataLoader(ImageStream(images[:10], labels[:10], strided_shard), shuffle=True)
except ValueError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# Pitfall 3 raises nothing, which is what makes it dangerous. Given the 10
# per-class weights `1 / class size`, `WeightedRandomSampler` treats them as
# the weights of 10 *samples* and draws only the indices 0 to 9. In our
# imbalanced set those are ten images of the digit 0 (it is sorted by
# class), so the "rebalanced" loader serves nothing but zeros. The fix
# gives each sample the weight of its class, `class_weights[targets]`:

# %%
# NBVAL_CHECK_OUTPUT
class_weights = 1.0 / class_counts.double()  # [10]: one weight per class
wrong = list(WeightedRandomSampler(class_weights, num_samples=1000, generator=torch.Generator().manual_seed(SEED)))
print(f"10 class weights: indices drawn {sorted(set(wrong))}, digits {dict(Counter(targets[wrong].tolist()))}")
fixed = torch.tensor(list(WeightedRandomSampler(class_weights[targets], num_samples=1000,
                                                generator=torch.Generator().manual_seed(SEED))))
print(f"{len(targets)} per-sample weights: {len(set(fixed.tolist()))} distinct indices among 1000 draws, "
      f"{len(set(targets[fixed].tolist()))} digits")
assert set(wrong) <= set(range(10)), "per-class weights should make the sampler draw only the indices 0..9"
assert set(targets[wrong].tolist()) == {0}, "indices 0..9 of the imbalanced set are all zeros"
assert torch.equal(class_weights[targets], sample_weights), "class_weights[targets] is the per-sample weighting used above"
assert fixed.max().item() >= 10 and len(set(targets[fixed].tolist())) == 10, "per-sample weights should reach every digit"

# %% [markdown]
# ## Exercises
#
# Each exercise has a stub for you to fill in, then a checker cell. The
# checker prints **PASSED**, **NOT YET** with a hint, or **TODO** while the
# stub still raises `NotImplementedError`; it never stops the notebook. If
# you are stuck, `hint("06.shard_range")` gives a fuller hint after a failed
# check, and `solution("06.shard_range")` returns the reference solution
# (read it with `inspect.getsource`).
#
# ### Exercise 1: fair contiguous shards
#
# Strided sharding is correct, but a worker that reads every second record
# of a file jumps around in it. Write `shard_range(n, worker_id, num_workers)`
# that returns **one contiguous `range`** per worker (a `range` object, not a
# list of its indices), such that:
#
# - together, the workers cover `0, 1, ..., n-1`, each index exactly once;
# - worker 0 has the first block, worker 1 the next one, and so on;
# - the split is **fair**: the block sizes of any two workers differ by at
#   most 1 (an epoch lasts as long as its busiest worker).
#
# The checker tries many combinations of `n` and `num_workers`, including
# more workers than samples. The `n // num_workers` split from this chapter
# fails it, and so does rounding every block up to `ceil(n / num_workers)`:
# 10 samples on 4 workers become blocks of 3, 3, 3 and 1. Write the
# arithmetic yourself: library functions that split into near-equal parts
# (`torch.tensor_split`, `torch.chunk`, `numpy.array_split`) are refused.
# When it passes, the cell streams `STREAM_SAMPLES` images through
# two workers with your shards. Your function lives in the notebook, so a
# spawned worker could not import it: `helpers.loading.PrecomputedShards`
# calls it here, in the main process, for each worker id, and the workers
# receive the resulting ranges, which are plain data.


# %%
def shard_range(n, worker_id, num_workers):
    """The contiguous block of range(n), as a range, that worker `worker_id` of `num_workers` should read."""
    raise NotImplementedError


# %%
result = check("06.shard_range", shard_range)
if result.passed:
    yours = stream(STREAM_SAMPLES, PrecomputedShards(shard_range, STREAM_SAMPLES, WORKERS), num_workers=WORKERS,
                   batch_size=32)
    print("your shards with 2 workers, (missing, repeated):", missing_and_repeated(yours, STREAM_SAMPLES))

# %% [markdown]
# ### Exercise 2: partial rebalancing
#
# Balancing the classes completely, as above, draws the rarest digit as
# often as the most common one, so each of its few images comes back many
# times per epoch, and the model may overfit them.
# Work on long-tailed recognition (Kang et al., "Decoupling Representation
# and Classifier for Long-Tailed Recognition", ICLR 2020) samples class `c`
# with probability proportional to `n_c ** q`, where `n_c` is the number of
# samples of class `c`: `q = 1` keeps the data's own frequencies, `q = 0`
# balances the classes, and `q = 0.5` ("square-root sampling") lies in
# between.
#
# Write `sampling_weights(targets, num_classes, power)`: given int64 labels
# `targets` of shape `[N]` with values in `0..num_classes-1` and the
# exponent `power` (the `q` above), return a float tensor of shape `[N]`,
# one weight per sample, with which `WeightedRandomSampler` draws class `c`
# with probability `n_c ** power / (sum of n_k ** power over the classes)`.
# Some classes may not occur at all. The `1 / n_c` weights above are the
# case `power = 0` only; work out what a single sample must weigh so that
# its whole class gets its share. When it passes, the cell feeds your weights
# with `power = 0.5` to a `WeightedRandomSampler` on the imbalanced MNIST set.


# %%
def sampling_weights(targets, num_classes, power):
    """One weight per sample, such that class c is drawn with probability proportional to n_c ** power.

    Returns a float tensor of shape [N] (not a list).
    """
    raise NotImplementedError


# %%
result = check("06.sampling_weights", sampling_weights)
if result.passed:
    sampler = WeightedRandomSampler(sampling_weights(targets, 10, 0.5), num_samples=REBALANCED_DRAWS,
                                    generator=generator)
    freq = torch.bincount(targets[list(sampler)], minlength=10).double() / REBALANCED_DRAWS
    target = class_counts.double().sqrt() / class_counts.double().sqrt().sum()
    print("class frequencies with your weights (%):", [round(100 * f, 1) for f in freq.tolist()])
    print("n_c ** 0.5, as shares (%):              ", [round(100 * f, 1) for f in target.tolist()])

# %% [markdown]
# ## Summary
#
# - A `DataLoader` = a dataset (which samples exist) + a sampler (which
#   indices, in what order) + a collate function (how samples become a
#   batch), optionally fed by worker processes.
# - Map-style datasets are sharded by the sampler automatically; an
#   `IterableDataset` must shard itself with `get_worker_info()`. Count the
#   ids: `range(worker_id, n, num_workers)` yields each exactly once, while
#   `n // num_workers` blocks drop the remainder.
# - Workers get their dataset by `fork` (a copy of the process) or `spawn`
#   (a fresh Python that unpickles it, so its class must be importable).
#   Keep what workers run in a module, send data rather than notebook
#   functions, and return what a worker did through the loader instead of
#   printing it there.
# - `WeightedRandomSampler` with per-sample weights `1 / class size`
#   rebalances classes on average; a custom `Sampler` can make it exact.
#   Both repeat rare samples.
# - `pad_sequence(batch_first=True)` in a `collate_fn` batches
#   variable-length sequences; return the lengths too, and bucket by length
#   to waste less on padding.
# - Workers help when there are free cores and the main process has its own
#   work to overlap with loading; on a busy machine they can lose, so judge
#   timings only with the load average in view. `pin_memory` is for CUDA;
#   `persistent_workers` saves a start-up per epoch (a spawned worker starts
#   much more slowly than a forked one); `prefetch_factor` absorbs uneven
#   batch times. Measure on your machine.
# - Worker RNGs: torch, `random` and NumPy's global generator are seeded per
#   worker with every start method; a generator your dataset owns is not,
#   so re-seed it in a `worker_init_fn` from `torch.initial_seed()`, and pass
#   `generator=` to the `DataLoader` for reproducible runs.
#
# **Next:** chapter 07 trains a convolutional network on CIFAR-10, with
# random augmentations running in exactly this kind of pipeline.

# %%
print(f"notebook ran in {time.perf_counter() - notebook_start:.0f} s")
report.finish()
