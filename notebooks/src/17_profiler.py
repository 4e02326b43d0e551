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
# # 17 · The profiler
#
# "Why is my training slow?" is a question to answer with measurements, not
# guesses. PyTorch ships a profiler, `torch.profiler`, that records every
# operator your code runs: how long it took on the CPU (and on the GPU, when
# there is one), with which input shapes, and how much memory it allocated.
# This chapter profiles a small CNN training on real MNIST images, reads the
# tables and traces the profiler produces, and then uses it for what it is
# for: finding a real bottleneck, fixing it, and measuring the fix.
#
# **What you will learn**
# - `torch.profiler.profile` with `ProfilerActivity.CPU` (and `CUDA` when a
#   GPU is present), and `record_function` labels for your own code;
# - reading `key_averages()` tables: self time versus total time, sorted and
#   grouped by input shape;
# - `schedule(wait, warmup, active, repeat)` with `prof.step()` in a training
#   loop: which steps get recorded, and why the first ones are skipped;
# - exporting a Chrome trace and writing TensorBoard trace files;
# - TensorBoard: the profiler's trace files, and a `SummaryWriter` for
#   plain scalars such as the loss;
# - memory profiling: which operator allocated the most;
# - a starved `DataLoader` found in a profile, fixed two ways, and
#   re-measured over whole epochs: a before/after table;
# - a host synchronisation (`.item()` every step) found with the profiler,
#   traced to its line of code with `with_stack=True`, and removed.
#
# **Prerequisites:** chapters 05 (the training loop on MNIST), 06 (the
# `DataLoader`, workers) and 07 (`transforms.v2` augmentation, augmenting
# whole batches).
#
# **Estimated time:** 60 minutes.

# %% tags=["parameters"]
BATCH_SIZE = 64  # images per training step
TRAIN_IMAGES = 2048  # the first MNIST training images the loaders draw from
PROFILE_STEPS = 4  # training steps in the first (unscheduled) profile
WAIT = 1  # the schedule of the training-loop profile: steps off at the start of each cycle,
WARMUP = 1  # steps profiled but discarded,
ACTIVE = 2  # steps recorded,
REPEAT = 2  # and cycles in all
LOOP_STEPS = 10  # steps the scheduled training loop runs (WAIT + WARMUP + ACTIVE) * REPEAT = 8 of them profile
BOTTLENECK_STEPS = 3  # recorded training steps in each before/after profile (after 1 warm-up step)
TIMED_IMAGES = 256  # images in the epoch each timed call of the before/after table runs (4 batches)
SYNC_STEPS = 4  # training steps in each profile of the host-sync section
SYNC_ROUNDS = 3  # interleaved rounds of the host-sync timing (each round times both loops)
STACK_DEPTH = 5  # innermost stack frames key_averages(group_by_stack_n=...) groups by
MIN_RUN_TIME = 0.5  # seconds of timed runs helpers.bench.measure collects per variant
LABEL_MAX_SHARE = 0.03  # outside a profiler, a step's 3 record_function labels must cost under this fraction of it
LABEL_ROUNDS = 3  # interleaved rounds of that comparison (each times one step and one empty label)
MIN_DATA_SHARE = 0.5  # the starved loop must spend at least this share of a step loading data
MIN_SPEEDUP = 1.3  # the batched fix must make a training pass at least this much faster
MAX_DATA_SHARE_AFTER = 0.5  # after the batched fix, loading must take less than this share of a step
AUG_DRAWS = 256  # draws of each augmentation compared by their statistics
AUG_TOLERANCE = 0.25  # allowed relative gap between the two augmentations' spread statistics
SEED = 0

# %% [markdown]
# ## Setup
#
# The profiler's C++ side (a library called Kineto) writes log lines such
# as `profiler_start` and, on a machine without a GPU,
# `gpuGetDeviceCount failed` straight to the process's standard error,
# below Python, where `warnings.catch_warnings` cannot catch them. They are
# harmless, but they would clutter every cell, so the first lines of the
# setup lower Kineto's and c10's log levels. Both are read when the
# libraries load, so they must be set **before** `import torch`; in a
# script you would set them in the shell instead.

# %%
import os

os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # 6: none of Kineto's levels (0 verbose ... 5 USDT) is printed
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # c10's C++ warnings, such as the allocator's notes

import bisect  # noqa: E402  (the environment variables above must come first)
import copy  # noqa: E402
import json  # noqa: E402
import linecache  # noqa: E402
import math  # noqa: E402
import multiprocessing  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections import defaultdict  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.autograd import DeviceType  # noqa: E402
from torch.profiler import (  # noqa: E402
    ProfilerAction,
    ProfilerActivity,
    _ExperimentalConfig,
    profile,
    record_function,
    schedule,
    supported_activities,
    tensorboard_trace_handler,
)
from torch.utils.data import DataLoader, Dataset  # noqa: E402
from torch.utils.tensorboard import SummaryWriter  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

from helpers.bench import Timing, interleaved, measure, per_round_ratio, speedup, timing_table  # noqa: E402
from helpers.data import mnist  # noqa: E402
from helpers.device import pick_device, seed_everything  # noqa: E402
from helpers.exercises import check, solution  # noqa: E402, F401  (solution: for when you are stuck)
from helpers.paths import build_dir, rel  # noqa: E402
from helpers.report import ChapterReport  # noqa: E402

generator = seed_everything(SEED)
device = pick_device()
report = ChapterReport("17_profiler")
notebook_start = time.perf_counter()
OUT = build_dir() / "profiler"  # everything this chapter writes
shutil.rmtree(OUT, ignore_errors=True)  # a re-run starts clean
OUT.mkdir(parents=True)
FORK = sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()
print(f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} CPU threads; writing to {rel(OUT)}/")

# %% [markdown]
# ## Something to profile
#
# A small CNN (two 3×3 convolutions with max-pooling, then two linear
# layers) trained on the first `TRAIN_IMAGES` MNIST digits. One training
# step is the five steps of chapter 04, with a `record_function` label
# around each phase. `record_function(name)` is a context manager that
# marks a span of your own code; the profiler shows it next to PyTorch's
# operators, so the table can say "the backward pass took this long", not
# only "`aten::convolution_backward` took this long". Outside a profiler
# it is cheap (measured below against a training step, in interleaved
# rounds so that both timings see the same machine), so labels can stay in
# your code.

# %%
raw = mnist(train=True)
images = raw.data[:TRAIN_IMAGES].unsqueeze(1).float().div(255)  # [N, 1, 28, 28] in [0, 1]
labels = raw.targets[:TRAIN_IMAGES]
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081  # derived in chapter 05


def make_model():
    torch.manual_seed(SEED)
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # [B, 8, 14, 14]
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # [B, 16, 7, 7]
        nn.Flatten(), nn.Linear(16 * 7 * 7, 64), nn.ReLU(), nn.Linear(64, 10),
    ).to(device)


model = make_model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def train_step(x, y):
    """One optimisation step on the batch (x, y), each phase under its own label."""
    x, y = x.to(device), y.to(device)
    with record_function("forward"):
        loss = F.cross_entropy(model(x), y)
    with record_function("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with record_function("optimizer"):
        optimizer.step()
    return loss


x0 = (images[:BATCH_SIZE] - MNIST_MEAN) / MNIST_STD
y0 = labels[:BATCH_SIZE]
print(f"one batch: x {tuple(x0.shape)}, y {tuple(y0.shape)}; first loss {train_step(x0, y0).item():.3f}")


def empty_label():
    with record_function("label"):
        pass


STEP, LABEL = "one train_step (3 labels inside)", "enter + leave an empty record_function"
label_rounds = interleaved({STEP: lambda: train_step(x0, y0), LABEL: empty_label},
                           rounds=LABEL_ROUNDS, min_run_time=MIN_RUN_TIME / 2)
print("round  train_step (median, IQR, calls)    empty label (median, IQR, calls)    3 labels / step")
for r, (step_t, label_t) in enumerate(zip(label_rounds[STEP], label_rounds[LABEL]), start=1):
    print(f"{r:5}  {step_t.median_ms:7.2f} ms {step_t.iqr_s * 1e3:5.2f} ms {step_t.calls:6}    "
          f"{label_t.median_s * 1e6:7.2f} us {label_t.iqr_s * 1e6:5.2f} us {label_t.calls:6}    "
          f"{3 * label_t.median_s / step_t.median_s:14.2%}")
label_share = 3 * per_round_ratio(label_rounds, LABEL, STEP)
print(f"the 3 labels of a step cost {label_share:.2%} of it (median of {LABEL_ROUNDS} interleaved rounds, no profiler)")
assert label_share < LABEL_MAX_SHARE, f"outside a profiler, 3 labels should cost under {LABEL_MAX_SHARE:.0%} of a step"

# %% [markdown]
# ## A first profile
#
# `profile(activities=[...])` records everything that runs inside the
# `with` block. `ProfilerActivity.CPU` records the operators as the CPU
# runs them; `ProfilerActivity.CUDA` (or `XPU`, ... for other
# accelerators) adds the device's kernels, which run asynchronously and
# have their own timeline. The cell picks the activity that matches
# `device` and keeps it only if `torch.profiler.supported_activities()`
# lists it, so the same code profiles a CPU or a GPU run. The time and
# memory fields it sorts by have device-generic names
# (`self_device_time_total`, `self_device_memory_usage`). `record_shapes=True` also
# stores each operator's input shapes (used below). We profile
# `PROFILE_STEPS` steps; the first step above was left out on purpose,
# because a first call pays one-time costs (memory pools, lazy setup) that
# say nothing about the steady state.

# %%
device_activity = None if device.type == "cpu" else getattr(ProfilerActivity, device.type.upper(), None)  # CUDA, XPU, ...
activities = [ProfilerActivity.CPU]
if device_activity is not None and device_activity in supported_activities():
    activities.append(device_activity)
ON_DEVICE = len(activities) > 1  # the profile also holds the accelerator's kernels
print(f"device {device}: profiling {[a.name for a in activities]}")
SORT_KEY = "self_device_time_total" if ON_DEVICE else "self_cpu_time_total"

with profile(activities=activities, record_shapes=True) as prof:
    for _ in range(PROFILE_STEPS):
        train_step(x0, y0)
averages = prof.key_averages()
print(f"{len(prof.events()):,} events recorded, {len(averages)} distinct names")


def cpu_rows(averages):
    """The CPU-side rows of key_averages(): on a GPU, a label can also have a device-side row of the same name."""
    return [e for e in averages if e.device_type == DeviceType.CPU]

# %% [markdown]
# `prof.events()` is every single event; `key_averages()` groups them by
# name and sums them up. Its `table()` prints the result. Two kinds of time
# appear in every row:
#
# - **CPU total**: from entering the operator to leaving it, *including*
#   the operators it called. `forward` has a large total, because the whole
#   forward pass runs inside it.
# - **Self CPU**: the total minus the time spent in child operators: the
#   work done in this operator itself. The self times add up to the
#   profile's total, so **sort by self time to find where time goes**.
#
# `row_limit` keeps the table short and `max_name_column_width` keeps it
# narrow:

# %%
print(averages.table(sort_by=SORT_KEY, row_limit=10, max_name_column_width=34))

# %% [markdown]
# Apart from labels (ours, and `Optimizer.step#SGD.step`, which the
# optimizer adds itself), the rows are the layers' heavy arithmetic: the
# convolutions (`aten::mkldnn_convolution` is the CPU implementation behind
# `nn.Conv2d`, through oneDNN) and their backward
# (`aten::convolution_backward`), the pooling, the matrix products of the
# linear layers (`aten::mm`, `aten::addmm`) and the ReLUs (`aten::clamp_min`,
# and `aten::threshold_backward` for their gradient), and the loss's
# log-softmax (`aten::_log_softmax`); which of them make the
# ten rows, and in what order, changes from run to run and machine to
# machine. (In a GPU run, sort by device time, as `SORT_KEY`
# does: the CPU then spends its own time launching kernels, and the
# kernels' time is on the device.) The labels' self times are small next to
# their totals: they mostly *contain* work. The same numbers as attributes,
# to use in code:

# %%
by_name = {e.key: e for e in cpu_rows(averages)}  # one row per name: the CPU side
label_ms = {name: by_name[name].cpu_time_total / 1e3 for name in ("forward", "backward", "optimizer")}
for name, ms in label_ms.items():
    print(f"{name:10s} {by_name[name].count} calls, CPU total {ms:7.2f} ms, self {by_name[name].self_cpu_time_total / 1e3:5.2f} ms")
top = max(averages, key=lambda e: e.self_cpu_time_total)
self_sum = sum(e.self_cpu_time_total for e in averages)
print(f"largest self CPU time: {top.key} ({top.self_cpu_time_total / self_sum:.0%} of all self time)")
_ = report.record("top operator by self CPU time", top.key)

# %% [markdown]
# The next cell checks these claims: each label appears once per step and
# contains operators, the largest self time is an operator's, and the three
# largest are the layers' arithmetic. Self times are wall-clock times, so
# a moment in which the machine ran another process inflates whatever was
# running then, a label's Python as much as an operator. The claims about
# the largest self times are therefore checked step by step, from
# `prof.events()`, and must hold in all steps but one (three of four), not
# only in the sums over all steps.

# %%
for name in ("forward", "backward", "optimizer"):
    assert by_name[name].count == PROFILE_STEPS, f"the {name!r} label should appear once per step"
    assert by_name[name].self_cpu_time_total < by_name[name].cpu_time_total, f"{name!r} contains child operators"
# On a GPU the CPU's self time goes to launching kernels (cudaLaunchKernel rows), so these two are CPU-run claims.
cpu_run = not ON_DEVICE
HEAVY = {"aten::convolution_backward", "aten::mkldnn_convolution", "aten::mm", "aten::addmm", "aten::max_pool2d_with_indices",
         "aten::max_pool2d_with_indices_backward", "aten::clamp_min", "aten::threshold_backward",
         "aten::_log_softmax", "aten::_log_softmax_backward_data"}  # the layers' own arithmetic, and the loss's
LABEL_NAMES = {"forward", "backward", "optimizer"}  # their self time is the Python between the operators they hold


def is_label(name):
    """Our record_function labels and the ones PyTorch adds (Optimizer.step#SGD.step, ProfilerStep#n): not operators."""
    return name in LABEL_NAMES or "#" in name or name.startswith("Optimizer.")


def step_self_times(prof):
    """Self CPU time (us) per name in each profiled step: one {name: us} per step, a step starting at its forward label."""
    events = [e for e in prof.events() if e.device_type == DeviceType.CPU]
    starts = sorted(e.time_range.start for e in events if e.name == "forward")
    steps = [defaultdict(float) for _ in starts]
    for e in events:
        k = bisect.bisect_right(starts, e.time_range.start) - 1
        if k >= 0:
            steps[k][e.name] += e.self_cpu_time_total
    return steps


steps = step_self_times(prof)
step_top = [max(s, key=s.get) for s in steps]
step_top3 = [sorted((n for n in s if not is_label(n)), key=s.get, reverse=True)[:3] for s in steps]
print("largest self time, step by step:", ", ".join(step_top))
most = PROFILE_STEPS - max(1, PROFILE_STEPS // 4)  # all steps but one (3 of 4), not on average
assert not cpu_run or sum(n.startswith("aten::") for n in step_top) >= most, \
    f"the largest self time should be a PyTorch operator, not a label, in all steps but one: {step_top}"
assert not cpu_run or sum(set(t) <= HEAVY for t in step_top3) >= most, \
    f"the three largest operators by self time should be the layers' (or the loss's) arithmetic in all steps but one: {step_top3}"
assert label_ms["backward"] > label_ms["optimizer"], "the backward pass should cost more than the SGD update"

# %% [markdown]
# ### Grouped by input shape
#
# An operator name often hides several different calls: our network runs
# `aten::conv2d` twice per step, on `[64, 1, 28, 28]` and on
# `[64, 8, 14, 14]`. `key_averages(group_by_input_shape=True)` keeps one
# row per (name, input shapes) pair and adds an *Input Shapes* column. It
# needs `record_shapes=True` when profiling; without it every shape is
# empty and nothing is split.

# %%
by_shape = prof.key_averages(group_by_input_shape=True)
print(by_shape.table(sort_by=SORT_KEY, row_limit=6, max_name_column_width=26, max_shapes_column_width=44))

# %%
conv_shapes = {str(e.input_shapes[0]) for e in by_shape if e.key == "aten::conv2d"}
print("aten::conv2d was called on inputs of shape:", sorted(conv_shapes))
assert conv_shapes == {str([BATCH_SIZE, 1, 28, 28]), str([BATCH_SIZE, 8, 14, 14])}, conv_shapes

# %% [markdown]
# This is how you find, for example, that one layer of a model is slow
# because of its shape, or that a variable-length batch recompiles or
# reallocates for every new length.
#
# ## Profiling a training loop with a schedule
#
# Profiling every step of a long run makes the profiler's own cost and
# output huge. A **schedule** records only some steps. You call
# `prof.step()` at the end of every iteration; the profiler counts steps
# from 0 and asks the schedule what to do with each:
#
# - `skip_first` steps (default 0) are ignored once, at the very start;
# - then each cycle has `wait` steps where the profiler is off,
# - `warmup` steps where it runs but throws the results away (its own
#   start-up costs would otherwise land in the first recorded step),
# - and `active` steps that are recorded. At the end of each cycle the
#   `on_trace_ready` callback gets the profiler, to print or save the
#   cycle's results;
# - `repeat` cycles in all (0: until the loop ends).
#
# The schedule is a plain function from step number to a `ProfilerAction`,
# so we can print what it will do before we run it. Our loop runs
# `LOOP_STEPS` steps with `WAIT, WARMUP, ACTIVE, REPEAT`:

# %%
loop_schedule = schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=REPEAT)
actions = [loop_schedule(step) for step in range(LOOP_STEPS)]
planned = [step for step, action in enumerate(actions) if action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)]
print(f"schedule(wait={WAIT}, warmup={WARMUP}, active={ACTIVE}, repeat={REPEAT}):")
for step, action in enumerate(actions):
    print(f"  step {step:2d}: {action.name}")

# %% [markdown]
# Now the real loop. `on_trace_ready` is any callable that takes the
# profiler. Ours does two things at the end of each cycle: it writes the
# cycle's trace with `tensorboard_trace_handler` (next section), and it
# notes which steps the cycle holds. The profiler wraps each step in a
# label `ProfilerStep#N`, so the step numbers can be read from the events.
# The data comes from a plain shuffled `DataLoader`, each batch normalised
# on the way.

# %%
TB_DIR = OUT / "tensorboard"
write_trace = tensorboard_trace_handler(str(TB_DIR), worker_name="course")  # worker_name: else host name + pid
recorded_cycles = []


def on_cycle_done(p):
    write_trace(p)
    steps = sorted({int(e.trace_name.split("#")[1]) for e in p.events() if e.trace_name.startswith("ProfilerStep#")})
    recorded_cycles.append(steps)


def endless(loader):
    """Batches from loader, epoch after epoch."""
    while True:
        yield from loader


plain_loader = DataLoader(list(zip(images, labels)), batch_size=BATCH_SIZE, shuffle=True, generator=generator)
batches = endless(plain_loader)
with warnings.catch_warnings(record=True) as caught:  # see pitfall 2
    warnings.simplefilter("always")
    with profile(activities=activities, schedule=loop_schedule, on_trace_ready=on_cycle_done) as prof:
        for _ in range(LOOP_STEPS):
            x, y = next(batches)
            train_step((x - MNIST_MEAN) / MNIST_STD, y)
            prof.step()  # tell the profiler a step ended
loop_warnings = [f"{w.category.__name__}: {w.message}" for w in caught]
for message in loop_warnings:
    print(message)
print("steps recorded, per cycle:", recorded_cycles)

# %%
# NBVAL_CHECK_OUTPUT
recorded = [step for cycle in recorded_cycles for step in cycle]
print(f"recorded steps {recorded}; planned by the schedule {planned}")
assert recorded == planned, "the profiler should record exactly the steps the schedule marks RECORD"
assert len(recorded_cycles) == REPEAT, f"expected {REPEAT} cycles, each handed to on_trace_ready"

# %% [markdown]
# Each cycle skipped `WAIT` step(s), warmed up on the next, and recorded
# the `ACTIVE` after that; after `REPEAT` cycles the profiler stayed off.
# Exercise 2 asks you to predict these step numbers for any schedule.
#
# ## Traces: Chrome / Perfetto and TensorBoard
#
# A table sums everything up; a **trace** keeps every event on a timeline,
# one row per thread (and per GPU stream), so you can see what ran when,
# what waited, and where the gaps are. `prof.export_chrome_trace(path)`
# writes the Chrome trace-event JSON format. To look at it, open
# `chrome://tracing` in Chrome or Chromium, or https://ui.perfetto.dev in
# any browser (it runs locally in the page; the file is not uploaded), and
# load the file. Keys `w`/`s` zoom, `a`/`d` pan.
#
# We profile two more steps and export them. A trace is plain JSON, so we
# can also read it ourselves:

# %%
with profile(activities=activities, record_shapes=True) as prof:
    for _ in range(2):
        train_step(x0, y0)
trace_path = OUT / "two_steps.json"
prof.export_chrome_trace(str(trace_path))
trace = json.loads(trace_path.read_text())
spans = [e for e in trace["traceEvents"] if e.get("ph") == "X"]  # "X": a complete event, with start and duration
print(f"{rel(trace_path)}: {trace_path.stat().st_size / 1024:.0f} KB, {len(spans):,} timed events")
print("the first events by start time:")
for event in sorted(spans, key=lambda e: e["ts"])[:8]:
    print(f"  {event['name']:32s} category {event['cat']:16s} {event['dur']:9.1f} us")

# %%
assert trace_path.stat().st_size > 0 and len(spans) > 0, "the exported trace should hold timed events"
assert {"forward", "backward", "optimizer"} <= {e["name"] for e in spans}, "our labels should be in the trace"
_ = report.record("Chrome trace size, two steps", round(trace_path.stat().st_size / 1024), "KB")

# %% [markdown]
# Each event has a name, a category (`cpu_op` for PyTorch operators,
# `user_annotation` for our `record_function` labels), a start `ts` and a
# duration `dur` in microseconds, and, with `record_shapes=True`, its input
# shapes under `args`. A trace grows fast: the file above holds two small
# steps, about half its size per step. That is another reason for a
# schedule with few active steps.
#
# `tensorboard_trace_handler(dir)` wrote one such file per cycle of the
# scheduled loop above, named `<worker>.<time in ns>.pt.trace.json` (we
# set the worker name; by default it is the host name and process id, so
# that the processes of a distributed job do not overwrite each other):

# %%
tb_files = sorted(TB_DIR.iterdir())
for path in tb_files:
    print(f"{rel(path)}  ({path.stat().st_size / 1024:.0f} KB)")
assert len(tb_files) == REPEAT and all(p.name.endswith(".pt.trace.json") for p in tb_files), "one trace per cycle"

# %% [markdown]
# These are Chrome traces too, so Perfetto opens them. The folder is what
# the TensorBoard profiler plugin reads: with `pip install torch-tb-profiler`
# (it is not part of this course's environment), `tensorboard --logdir
# build/profiler/tensorboard` shows them in a PyTorch Profiler tab. The
# plugin is no longer actively developed, and PyTorch's documentation
# points to Perfetto and the Chrome trace viewer as well.
#
# ### Scalars with `SummaryWriter`
#
# TensorBoard itself (installed here) is more often used for the numbers a
# run produces over time: the loss, the learning rate, a step time.
# `torch.utils.tensorboard.SummaryWriter(log_dir)` appends them to an
# *event file* in `log_dir`; `add_scalar(tag, value, step)` writes one
# point, and `tensorboard --logdir build/profiler/scalars` draws one curve
# per tag. We log the loss and the wall time of a few training steps (one
# `perf_counter` reading per step: a logged value to watch for drift, not a
# benchmark, which needs warm-up and repeats, as `measure` does), then
# read the event file back with TensorBoard's own reader,
# `EventAccumulator`, to check what it holds. Pass plain Python numbers:
# given a tensor, `add_scalar` calls `.item()` on it, a host sync (see the
# last section).

# %%
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

SCALAR_DIR = OUT / "scalars"
logged = []
with SummaryWriter(log_dir=str(SCALAR_DIR)) as writer:
    for step in range(PROFILE_STEPS):
        start = time.perf_counter()
        loss = train_step(x0, y0).item()
        writer.add_scalar("loss/train", loss, step)
        writer.add_scalar("time/step_ms", 1e3 * (time.perf_counter() - start), step)
        logged.append(loss)
event_files = list(SCALAR_DIR.glob("events.out.tfevents.*"))  # the name holds the host name and process id
reader = EventAccumulator(str(SCALAR_DIR))
reader.Reload()
read_back = reader.Scalars("loss/train")
print(f"{len(event_files)} event file in {rel(SCALAR_DIR)}/, {event_files[0].stat().st_size} bytes; tags {reader.Tags()['scalars']}")
for point, value in zip(read_back, logged):
    print(f"  step {point.step}: loss/train {point.value:.4f} (logged {value:.4f})")

# %%
assert len(event_files) == 1 and event_files[0].stat().st_size > 0, "SummaryWriter should write one non-empty event file"
assert sorted(reader.Tags()["scalars"]) == ["loss/train", "time/step_ms"], reader.Tags()["scalars"]
assert [p.step for p in read_back] == list(range(PROFILE_STEPS)), "one point per step, at the step we gave"
assert all(math.isclose(p.value, v, rel_tol=1e-6) for p, v in zip(read_back, logged)), (
    "the event file stores each value as float32: it should read back equal to 6 digits"
)

# %% [markdown]
# ## Memory profiling
#
# `profile_memory=True` records every allocation and free of tensor
# memory, attributed to the operator that made it. The table gains two
# columns:
#
# - **CPU Mem**: memory allocated by the operator *and its children*,
#   minus what they freed;
# - **Self CPU Mem**: the same for the operator alone. Negative values are
#   memory freed, such as the activations that the backward pass releases.
#
# (On a GPU the matching columns are *CUDA Mem* and *Self CUDA Mem*, and
# the fields `device_memory_usage` and `self_device_memory_usage`.) Sorted
# by self memory, the table shows which operators allocate the most:

# %%
MEM_KEY = "self_device_memory_usage" if ON_DEVICE else "self_cpu_memory_usage"
with profile(activities=activities, profile_memory=True, record_shapes=True) as prof:
    train_step(x0, y0)
memory = prof.key_averages()
print(memory.table(sort_by=MEM_KEY, row_limit=6, max_name_column_width=34))

# %%
LABELS = ("forward", "backward", "optimizer")
allocations = sorted(
    ((e.key, getattr(e, MEM_KEY) / 2**20) for e in memory if e.key not in LABELS and e.key != "aten::empty"),
    key=lambda item: -item[1],
)
top_alloc_name, top_alloc_mb = allocations[0]
activation_mb = BATCH_SIZE * 8 * 28 * 28 * 4 / 2**20  # the first convolution's output, float32
empty = next(e for e in memory if e.key == "aten::empty")
print(f"aten::empty: {getattr(empty, MEM_KEY) / 2**20:.2f} MB in {empty.count} calls, for the operators that called it")
for name, mb in allocations[:3]:
    print(f"{name:36s} {mb:6.2f} MB in one step")
relu_mb = BATCH_SIZE * (8 * 28 * 28 + 16 * 14 * 14 + 64) * 4 / 2**20  # the three ReLU outputs, float32
print(f"by hand: the three ReLU outputs, {BATCH_SIZE} x (8x28x28 + 16x14x14 + 64) floats = {relu_mb:.2f} MB")
_ = report.record("largest allocating operator", top_alloc_name)
_ = report.record("its allocation per step", top_alloc_mb, "MB", digits=2)

# %%
assert top_alloc_mb > 0 and top_alloc_name.startswith("aten::"), (top_alloc_name, top_alloc_mb)
assert top_alloc_mb >= activation_mb, "the top allocator should allocate at least one full-size activation"
if device.type == "cpu":
    assert abs(top_alloc_mb - relu_mb) < 0.01 * relu_mb, "on the CPU the top allocation should be one copy of the ReLU outputs"
    pool_values_mb = BATCH_SIZE * (8 * 14 * 14 + 16 * 7 * 7) * 4 / 2**20  # the two pooling outputs, float32
    pool_mb = dict(allocations)["aten::max_pool2d_with_indices"]
    assert abs(pool_mb - 3 * pool_values_mb) < 0.01 * pool_mb, "max-pooling should allocate its values plus int64 indices"

# %% [markdown]
# `aten::empty` tops the raw table because it *is* the allocation: many
# operators (the convolutions among them) create their output by calling
# it, so their memory shows up as `aten::empty`'s self memory, and in
# their own *CPU Mem* column. Looking past it, the largest allocators
# allocate exactly the activation sizes we can compute by hand: ReLU's
# output (`aten::clamp_min`) and its gradient in the backward pass
# (`aten::threshold_backward`) are one full copy of each activation.
# A picture of the two rankings, time and memory, for this training step:

# %%
time_rows = sorted(averages, key=lambda e: e.self_cpu_time_total, reverse=True)[:6]
fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(9, 3))
ax_t.barh([e.key for e in time_rows][::-1], [e.self_cpu_time_total / 1e3 / PROFILE_STEPS for e in time_rows][::-1])
ax_t.set_xlabel("self CPU time per step (ms)")
ax_t.set_title("where the time goes")
ax_m.barh([name for name, _ in allocations[:6]][::-1], [mb for _, mb in allocations[:6]][::-1], color="tab:orange")
ax_m.set_xlabel("memory allocated in one step (MB)")
ax_m.set_title("where the memory goes")
for ax in (ax_t, ax_m):
    ax.tick_params(axis="y", labelsize=7)
plt.show()

# %% [markdown]
# Max-pooling also allocates more than its small output suggests: it
# keeps the *indices* of the maxima (int64, twice the size of float32
# values) for the backward pass, so on the CPU its allocation is three
# times the size of its output values (the check above). Memory profiling is how you find such
# things; chapter 18 is about reducing them.
#
# ## A real bottleneck: a starved DataLoader
#
# Now a training loop as it is often written. A `Dataset` opens each image
# and runs a random augmentation in `__getitem__`, here
# `v2.RandomAffine` (rotation up to ±15°, shift up to 10 %, scale 0.9 to
# 1.1; a classic for handwritten digits), and a `DataLoader` with the
# default `num_workers=0` calls it 64 times per batch, in the main process,
# while the model waits.


# %%
class AugmentedMNIST(Dataset):
    """MNIST images with a random affine augmentation per sample, as float [1, 28, 28] normalised."""

    def __init__(self, mnist_set, n):
        self.mnist_set, self.n = mnist_set, n
        self.transform = v2.Compose([
            v2.ToImage(),  # PIL image -> uint8 tensor [1, 28, 28]
            v2.RandomAffine(degrees=15, translate=(0.1, 0.1), scale=(0.9, 1.1)),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize([MNIST_MEAN], [MNIST_STD]),
        ])

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        image, label = self.mnist_set[i]  # a PIL image and an int
        return self.transform(image), label


starved_loader = DataLoader(AugmentedMNIST(raw, TRAIN_IMAGES), batch_size=BATCH_SIZE, shuffle=True, drop_last=True)

# %% [markdown]
# We profile `BOTTLENECK_STEPS` steps (after one warm-up step), with one
# label around fetching the batch and one around the training step. The
# `DataLoader` also labels itself: its `__next__` appears as
# `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`.


# %%
def profile_loop(loader, steps):
    """Profile `steps` training steps fed by `loader` (after one warm-up step); return the profiler."""
    batches = endless(loader)
    with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=steps, repeat=1)) as prof:
        for _ in range(1 + steps):
            with record_function("load batch"):
                x, y = next(batches)
            with record_function("train step"):
                train_step(x, y)
            prof.step()
    return prof


def loop_breakdown(prof, steps):
    """Milliseconds per step spent under the 'load batch' and 'train step' labels."""
    totals = {e.key: e.cpu_time_total / 1e3 / steps for e in cpu_rows(prof.key_averages())}
    return {"load batch": totals["load batch"], "train step": totals["train step"]}


prof = profile_loop(starved_loader, BOTTLENECK_STEPS)
top_level = [e for e in cpu_rows(prof.key_averages()) if e.key in ("load batch", "train step") or e.key.startswith("enumerate(")]
for e in sorted(top_level, key=lambda e: -e.cpu_time_total):
    print(f"{e.key:58s} {e.cpu_time_total / 1e3 / BOTTLENECK_STEPS:7.1f} ms per step (mean of {BOTTLENECK_STEPS} profiled)")
before = loop_breakdown(prof, BOTTLENECK_STEPS)
data_share_before = before["load batch"] / (before["load batch"] + before["train step"])
print(f"share of each step spent loading data: {data_share_before:.0%}")
_ = report.record("data-loading share, per-sample augmentation", 100 * data_share_before, "%", digits=1)

# %% [markdown]
# Where inside the loading? The ten largest self times of the whole loop
# (summed over the `BOTTLENECK_STEPS` profiled steps):

# %%
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10, max_name_column_width=44))

# %%
assert data_share_before >= MIN_DATA_SHARE, (
    f"the profile should show the loop starved by data loading: {data_share_before:.0%} of each step, "
    f"expected at least {MIN_DATA_SHARE:.0%}"
)

# %% [markdown]
# That is the bottleneck, in the profiler's own numbers: more than half of
# every step goes into preparing the batch, and the model, the part we
# care about, waits. The table also says where. The largest self time is
# the `enumerate(DataLoader)` row itself: time inside the loader that no
# operator accounts for, the Python of 64 separate `__getitem__` calls.
# Apart from the model's own operators and one `aten::bmm` per sample (the
# aside below), the rest is spread over many small operators, each called
# hundreds of times per step (`aten::copy_`,
# `aten::view`, `aten::empty`, ...: the last column counts the calls of all
# `BOTTLENECK_STEPS` steps).
#
# *An aside on one row.* The model has no `aten::bmm` (a batched matrix
# product), yet the loader calls it 64 times per step: torchvision's
# `RandomAffine` builds its sampling grid in `_affine_grid` as one product
# of the 784 pixel coordinates, `[1, 784, 3]`, with a `[1, 3, 2]` matrix,
# microseconds of arithmetic. On a busy machine this tiny product has been
# seen to cost milliseconds per call in the loader, because with more than
# one intra-op thread the math library may split it over the thread pool
# and wait for sleeping threads. The next cells check for that: they profile
# the loader alone, time the same product with `measure` on one thread,
# and, if the loader's bmm is more than `SLOW_BMM` times slower, test
# whether one thread makes the samples faster.

# %%
augmented = AugmentedMNIST(raw, TRAIN_IMAGES)
with profile(activities=activities, record_shapes=True) as p:
    for i in range(BATCH_SIZE):
        augmented[i]
loader_ops = p.key_averages(group_by_input_shape=True)
print(loader_ops.table(sort_by="self_cpu_time_total", row_limit=4, max_name_column_width=20, max_shapes_column_width=44))
loader_rows = sorted(cpu_rows(loader_ops), key=lambda e: e.self_cpu_time_total, reverse=True)
bmm_row = next(e for e in loader_rows if e.key == "aten::bmm")
grid_points, grid_theta = torch.randn(1, 784, 3), torch.randn(1, 2, 3).transpose(1, 2)  # the shapes of _affine_grid
threads = torch.get_num_threads()
torch.set_num_threads(1)
try:
    tight = measure(lambda: grid_points.bmm(grid_theta), label="the same bmm, 1 thread", min_run_time=MIN_RUN_TIME)
finally:
    torch.set_num_threads(threads)  # the rest of the chapter runs with the usual thread count
bmm_in_loader_s = bmm_row.self_cpu_time_total / 1e6 / bmm_row.count
bmm_slowdown = bmm_in_loader_s / tight.median_s
print(f"aten::bmm {bmm_row.input_shapes}: {1e6 * bmm_in_loader_s:,.0f} us per call in the loader, "
      f"with {threads} threads; {1e6 * tight.median_s:.1f} us on one thread ({bmm_slowdown:,.0f}x)")
_ = report.record("aten::bmm per call in the per-sample loader / on one thread", bmm_slowdown, "x", digits=0)

# %%
top_loader_ops = [e.key for e in loader_rows[:3]]
assert bmm_row.input_shapes == [[1, 784, 3], [1, 3, 2]], f"the bmm should be torchvision's affine grid: {bmm_row.input_shapes}"
assert bmm_row.count == BATCH_SIZE, f"the loader should call the grid's bmm once per sample: {bmm_row.count} calls for {BATCH_SIZE} samples"
# The ratio is rough: the loader's figure is profiler self time, which includes the profiler's own per-operator
# overhead (microseconds), the other a measure() timing without the profiler; hence a generous threshold.
SLOW_BMM = 10  # a bmm this many times slower in the loader than on one thread is worth a look
print(f"the loader's top three self times: {top_loader_ops}")

# %% [markdown]
# If the thread pool is the cause, the same samples on one thread must be
# faster by about the bmm's excess cost (if it were the product's own
# arithmetic, one thread would not help). The test, timed with `measure`
# (`BATCH_SIZE // 8` samples per call), prints its verdict and asserts
# nothing: the effect comes and goes with the machine's load, and on a
# quiet machine one thread can even be the slower (the other operators
# lose their second thread too):

# %%
def some_samples():
    for i in range(BATCH_SIZE // 8):
        augmented[i]


per_thread_count = [measure(some_samples, label=f"per-sample augmentation, {threads} thread{'s' if threads > 1 else ''}", min_run_time=MIN_RUN_TIME)]
torch.set_num_threads(1)
try:
    per_thread_count.append(measure(some_samples, label="per-sample augmentation, 1 thread", min_run_time=MIN_RUN_TIME))
finally:
    torch.set_num_threads(threads)  # the rest of the chapter runs with the usual thread count
print(timing_table(per_thread_count))
one_thread_speedup = speedup(*per_thread_count)
_ = report.record(f"speed-up of per-sample augmentation, 1 thread instead of {threads}", one_thread_speedup, "x", digits=1)

# %%
if threads > 1 and bmm_slowdown > SLOW_BMM:
    gap = per_thread_count[0].median_s - per_thread_count[1].median_s
    beyond = abs(gap) > per_thread_count[0].iqr_s + per_thread_count[1].iqr_s
    print(f"bmm {bmm_slowdown:.0f}x its one-thread time in the loader; one thread made the samples "
          f"{one_thread_speedup:.2f}x as fast: " + ("beyond the IQRs" if beyond else "within the IQRs, no measurable effect"))
elif threads == 1:
    print(f"the notebook runs on one thread here: the thread-pool test does not apply (bmm {bmm_slowdown:.0f}x its one-thread time)")
else:
    print(f"no slow bmm in this run ({bmm_slowdown:.0f}x, {threads} threads): nothing to explain")

# %% [markdown]
# The line above says whether this run showed the anomaly. PyTorch's
# `DataLoader` calls `torch.set_num_threads(1)` in each worker process
# (`torch/utils/data/_utils/worker.py`), so workers avoid it too. One
# thread for the whole process would slow down the model's own operators,
# so the standard fixes for a starved loader are these two:
#
# 1. **Do the work on whole batches.** Keep the images as one uint8
#    tensor, index a batch, and augment all 64 images with a few tensor
#    operations. For affine transforms that is `F.affine_grid`, which turns
#    one 2×3 matrix *per image* into sampling grids, and `F.grid_sample`,
#    which samples all images at once (chapter 07 did the same for crops
#    and flips). The per-sample Python overhead disappears, one product
#    serves 64 images, and the work moves to wherever the batch is, a GPU
#    included.
# 2. **Load in parallel.** `num_workers=2` runs `__getitem__` in two
#    worker processes, which prepare the next batches while the main
#    process trains; `persistent_workers=True` keeps them alive between
#    epochs instead of starting new ones each time (chapter 06).
#
# Fix 1, written out:


# %%
def random_affine_batch(x, generator, degrees=15.0, translate=0.1, scale=(0.9, 1.1)):
    """Per-image random rotation, shift and scale of x: float [B, C, H, W] -> float [B, C, H, W].

    The same ranges as v2.RandomAffine(degrees, (translate, translate), scale); pixels that come from
    outside the image are 0.
    """
    B = x.shape[0]

    def uniform(low, high):
        return low + (high - low) * torch.rand(B, generator=generator)

    angle = uniform(-degrees, degrees) * math.pi / 180
    zoom = uniform(*scale)
    # grid coordinates run from -1 to 1 across the image, so a shift of a fraction f of the width is 2f
    shift_x, shift_y = uniform(-2 * translate, 2 * translate), uniform(-2 * translate, 2 * translate)
    cos, sin = torch.cos(angle) / zoom, torch.sin(angle) / zoom
    theta = torch.stack([torch.stack([cos, -sin, shift_x], 1), torch.stack([sin, cos, shift_y], 1)], 1)  # [B, 2, 3]
    grid = F.affine_grid(theta.to(x.device), list(x.shape), align_corners=False)  # [B, H, W, 2]
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


class BatchAugmented:
    """Shuffled batches (x, y) from uint8 images [N, 1, 28, 28], augmented and normalised a batch at a time."""

    def __init__(self, uint8_images, labels, batch_size, generator):
        self.images, self.labels = uint8_images, labels
        self.batch_size, self.generator = batch_size, generator

    def __len__(self):
        return len(self.labels) // self.batch_size

    def __iter__(self):
        order = torch.randperm(len(self.labels), generator=self.generator)
        for k in range(len(self)):
            index = order[k * self.batch_size : (k + 1) * self.batch_size]
            x = self.images[index].float().div(255)
            yield (random_affine_batch(x, self.generator) - MNIST_MEAN) / MNIST_STD, self.labels[index]


uint8_images = raw.data[:TRAIN_IMAGES].unsqueeze(1)  # [N, 1, 28, 28] uint8, as stored
batched_loader = BatchAugmented(uint8_images, labels, BATCH_SIZE, generator)

# %% [markdown]
# Before trusting a fix, check that it still does the same job. Eight
# draws of each augmentation on the same image (undoing the normalisation
# to draw them):

# %%
sample = 5  # the index of the image we augment
torch.manual_seed(SEED)  # v2 transforms draw from the global generator
per_sample = torch.stack([augmented[sample][0] for _ in range(8)])
batched = random_affine_batch(images[sample : sample + 1].expand(8, -1, -1, -1), torch.Generator().manual_seed(SEED))
shown = torch.cat([per_sample * MNIST_STD + MNIST_MEAN, batched])
fig, axes = plt.subplots(2, 8, figsize=(9, 2.6))
for ax, image in zip(axes.flat, shown):
    ax.imshow(image[0].clamp(0, 1), cmap="gray", vmin=0, vmax=1)
    ax.axis("off")
axes[0, 0].set_title("v2.RandomAffine, one image at a time", fontsize=9, loc="left")
axes[1, 0].set_title("random_affine_batch, the whole batch at once", fontsize=9, loc="left")
plt.show()
assert batched.shape == (8, 1, 28, 28) and not torch.equal(batched[0], batched[1]), "each image gets its own draw"

# %% [markdown]
# Pictures are not a check of the ranges. Two statistics are: the spread
# of the ink's centre of mass (the shift: ±10 % of 28 pixels moves it by a
# standard deviation of about 1.6 pixels, more with rotation), and the
# spread of the total ink (the zoom: a scale of 0.9 to 1.1 changes the
# area by up to ±20 %). Over `AUG_DRAWS` draws of each augmentation on the
# same image they should agree within `AUG_TOLERANCE`; a shift scale off by
# two, or a forgotten division by `zoom`, would not. (The per-sample draws
# run on one thread, which on a busy machine avoids a slow `aten::bmm`: see
# above.)


# %%
def augmentation_stats(x):
    """Std of the centre of mass (x and y, pixels) and relative std of the total ink of images x [N, 1, H, W]."""
    ink = x.clamp(0, 1)[:, 0]
    mass = ink.sum((1, 2))
    coords = torch.arange(ink.shape[-1], dtype=ink.dtype)
    cx, cy = (ink.sum(1) * coords).sum(1) / mass, (ink.sum(2) * coords).sum(1) / mass
    return {"centre x std (px)": cx.std().item(), "centre y std (px)": cy.std().item(),
            "ink std / mean": (mass.std() / mass.mean()).item()}


torch.set_num_threads(1)
try:
    draws_v2 = torch.stack([augmented[sample][0] for _ in range(AUG_DRAWS)]) * MNIST_STD + MNIST_MEAN
finally:
    torch.set_num_threads(threads)
draws_batched = random_affine_batch(images[sample : sample + 1].expand(AUG_DRAWS, -1, -1, -1), torch.Generator().manual_seed(SEED))
stats_v2, stats_batched = augmentation_stats(draws_v2), augmentation_stats(draws_batched)
print(f"{'over ' + str(AUG_DRAWS) + ' draws':20s} {'v2.RandomAffine':>16s} {'random_affine_batch':>20s}")
for name in stats_v2:
    print(f"{name:20s} {stats_v2[name]:16.3f} {stats_batched[name]:20.3f}")
gaps = {name: abs(stats_batched[name] / stats_v2[name] - 1) for name in stats_v2}
assert max(gaps.values()) < AUG_TOLERANCE, f"the batched augmentation should match v2.RandomAffine's spreads: gaps {gaps}"

# %% [markdown]
# Fix 2 is a change of two arguments. Worker processes need `fork` to see
# classes defined in a notebook (chapter 06), so elsewhere the cell falls
# back to `num_workers=0` and says so. (This loader is used only for the
# timings below, which run whole epochs of `TIMED_IMAGES` images.)

# %%
workers = 2 if FORK else 0
worker_loader = DataLoader(
    AugmentedMNIST(raw, TIMED_IMAGES), batch_size=BATCH_SIZE, shuffle=True, drop_last=True,
    num_workers=workers, persistent_workers=workers > 0, multiprocessing_context="fork" if FORK else None,
)
print(f"worker loader: num_workers={workers}" + ("" if FORK else " ('fork' is not available here: no workers)"))

# %% [markdown]
# ### Re-profiled
#
# The same profile of the batched version:

# %%
prof = profile_loop(batched_loader, BOTTLENECK_STEPS)
after = loop_breakdown(prof, BOTTLENECK_STEPS)
data_share_after = after["load batch"] / (after["load batch"] + after["train step"])
print(f"ms per step, mean of {BOTTLENECK_STEPS} profiled steps")
print(f"{'':24s} {'load batch':>10s} {'train step':>10s} {'data share':>10s}")
for name, parts in (("per-sample augmentation", before), ("batched augmentation", after)):
    share = parts["load batch"] / (parts["load batch"] + parts["train step"])
    print(f"{name:24s} {parts['load batch']:10.1f} {parts['train step']:10.1f} {share:10.0%}")
_ = report.record("data-loading share, batched augmentation", 100 * data_share_after, "%", digits=1)
assert data_share_after < data_share_before / 2, "the batched augmentation should cut the data share at least in half"
assert data_share_after < MAX_DATA_SHARE_AFTER, (
    f"after the fix the model, not loading, should take most of a step: data share {data_share_after:.0%}"
)

# %% [markdown]
# ### Re-measured
#
# A profile shows where time goes, but the profiler adds its own overhead
# to every operator. The verdict on a fix is a plain timing without the
# profiler: `helpers.bench.measure` times one **whole epoch** per call (the
# loader iterated to exhaustion, `TIMED_IMAGES` images), after two warm-up
# calls (the second, timed, sizes the blocks), in at least five timed
# blocks, and reports the median and the
# spread over the blocks. A whole epoch is the honest unit for a worker
# loader: stopping after a few batches would leave batches the workers had
# already started in flight, paid for but never used, and would hide the
# wait for the first batches at the start of every epoch. The worker loader
# keeps its workers between epochs (`persistent_workers=True`).


# %%
def training_epoch(loader):
    """One epoch: a training step on every batch of loader."""
    for x, y in loader:
        train_step(x, y)


torch.manual_seed(SEED)
variants = {
    "per-sample, num_workers=0": DataLoader(
        AugmentedMNIST(raw, TIMED_IMAGES), batch_size=BATCH_SIZE, shuffle=True, drop_last=True),
    f"per-sample, num_workers={workers}": worker_loader,
    "batched augmentation": BatchAugmented(uint8_images[:TIMED_IMAGES], labels[:TIMED_IMAGES], BATCH_SIZE, generator),
}
epoch_batches = {name: len(loader) for name, loader in variants.items()}
timings = [measure(lambda loader=loader: training_epoch(loader), label=name, min_run_time=MIN_RUN_TIME)
           for name, loader in variants.items()]
variants.clear()
del worker_loader  # its persistent workers stop when the last reference to the loader goes
print(f"one epoch of {TIMED_IMAGES} images ({epoch_batches} batches of {BATCH_SIZE}):")
print(timing_table(timings))
starved_t, worker_t, batched_t = timings
profile_ratio = sum(before.values()) / sum(after.values())  # ms per step in the profiles, before / after
print(f"per-step ratio the profiles predicted for the batched fix: {profile_ratio:.1f}x")
assert profile_ratio > 1, f"the profiles should also show the batched loop faster per step: {profile_ratio:.2f}x"
batched_speedup = speedup(starved_t, batched_t)
worker_speedup = speedup(starved_t, worker_t)
_ = report.record("speed-up, batched augmentation", batched_speedup, "x", digits=2)
_ = report.record(f"speed-up, num_workers={workers}", worker_speedup, "x", digits=2)

# %%
assert set(epoch_batches.values()) == {TIMED_IMAGES // BATCH_SIZE}, f"every variant should run the same epoch: {epoch_batches}"
assert all(t.blocks >= 5 for t in timings), "each median should rest on at least five timed blocks"
assert batched_speedup >= MIN_SPEEDUP, (
    f"the batched augmentation should make the epoch at least {MIN_SPEEDUP}x faster, "
    f"measured {batched_speedup:.2f}x"
)

# %% [markdown]
# The batched augmentation removes the bottleneck: in its profile loading
# takes less than `MAX_DATA_SHARE_AFTER` of a step (checked above), so the
# loop is now limited by the model, and the epoch runs faster by the
# factor in the table (the check asks only for `MIN_SPEEDUP`, to leave
# room for a busy machine). The profiles' per-step ratio points the same
# way; the two figures are not expected to match: the profiler adds its
# own overhead to every operator it records, the model's as well as the
# loader's, so it changes the two loops by different amounts, and the
# profiles cover a few steps after a warm-up step, the timing whole epochs.
# What the workers gain depends on the machine, so the chapter asserts
# nothing about it: read their line of the table, whose speed-up can even
# fall below 1. They run the same per-sample augmentation in other
# processes, each with one thread (so without the slow `aten::bmm` of a
# busy machine), and they help only as far as there are CPU cores the
# training process is not using: this notebook was built on two, where two
# workers and the training process compete for the same cores. Workers
# need no change to the dataset; batched tensor operations remove the work
# itself (the batched row's speed-up is checked above).
#
# The measurement habit matters more than this particular fix: profile,
# find the largest share, change one thing, and measure again without the
# profiler.
#
# ## A second bottleneck: a host sync in the loop
#
# A line found in many training loops:
# `running_loss += loss.item()`, every step. `.item()` copies one number
# from the tensor to Python, so it must wait until that number exists:
# on a GPU, the CPU stops queueing work and **synchronises** with the
# device, which loses the overlap that makes asynchronous execution fast
# (the CPU can no longer prepare step *n+1* while the GPU runs step *n*).
# Other calls that sync the same way: `.tolist()`, `.cpu()`, `float(t)`,
# `print(t)`, `if t > 0:` on a device tensor. On the CPU the copy is
# cheap and there is nothing to overlap, so here we measure what the
# profiler shows on every device: the sync's own operators,
# `aten::item` and the `aten::_local_scalar_dense` it calls, counted per
# step.


# %%
# On the device already, so that train_step's x.to(device) is a no-op: a copy from pageable CPU memory per
# step would synchronise by itself and hide the sync we are looking for.
sync_batches = [(((images[k : k + BATCH_SIZE] - MNIST_MEAN) / MNIST_STD).to(device), labels[k : k + BATCH_SIZE].to(device))
                for k in range(0, SYNC_STEPS * BATCH_SIZE, BATCH_SIZE)]


def epoch_loss_item(batches):
    """Mean training loss over batches, read with .item() after every step (a host sync per step)."""
    running = 0.0
    for x, y in batches:
        loss = train_step(x, y)
        running += loss.item()
    return running / len(batches)


def epoch_loss_on_device(batches):
    """The same mean, summed on the device and read once at the end (one host sync)."""
    running = torch.zeros((), device=device)
    for x, y in batches:
        loss = train_step(x, y)
        running += loss.detach()
    return running.item() / len(batches)


SYNC_OPS = ("aten::item", "aten::_local_scalar_dense")


def sync_calls(loop):
    """Profile loop(sync_batches); return {op: calls} for the host-sync operators, and the runtime's sync calls.

    The second count is of the accelerator runtime's synchronising calls (on CUDA cudaStreamSynchronize and
    friends, recorded as CPU-side runtime events); it is 0 on the CPU, where there is no runtime.
    """
    with profile(activities=activities) as p:
        loop(sync_batches)
    rows = cpu_rows(p.key_averages())
    counts = {e.key: e.count for e in rows}
    runtime_syncs = sum(e.count for e in rows if e.key.startswith("cuda") and "Synchronize" in e.key)
    return {op: counts.get(op, 0) for op in SYNC_OPS}, runtime_syncs


epoch_loss_item(sync_batches[:1])  # warm-up
syncs_before, runtime_syncs_before = sync_calls(epoch_loss_item)
syncs_after, runtime_syncs_after = sync_calls(epoch_loss_on_device)
print(f"{'calls in ' + str(SYNC_STEPS) + ' steps':28s} {SYNC_OPS[0]:>12s} {SYNC_OPS[1]:>28s}")
for name, counts in (("loss.item() every step", syncs_before), ("summed on device", syncs_after)):
    print(f"{name:28s} {counts[SYNC_OPS[0]]:12d} {counts[SYNC_OPS[1]]:28d}")
if device.type == "cuda":
    print(f"CUDA runtime synchronize calls: {runtime_syncs_before} per-step loop, {runtime_syncs_after} summed on device")
    assert runtime_syncs_before >= SYNC_STEPS > runtime_syncs_after, (
        f"each .item() should synchronise the stream once: {runtime_syncs_before} vs {runtime_syncs_after} calls"
    )

# %% [markdown]
# One sync per step before, one per epoch after. On a large profile you
# would not know in advance which line calls `aten::item`. That is what
# `with_stack=True` is for: it records the Python call stack of every
# operator, file, line and function, and `key_averages(group_by_stack_n=n)`
# keeps one row per (operator, innermost `n` frames), so one operator
# called from two places gets two rows. In torch 2.14.1 the operators'
# stacks come back empty unless the profiler's experimental config also
# asks for verbose records, `experimental_config=_ExperimentalConfig(verbose=True)`
# (imported from `torch.profiler`; the leading underscore marks it private,
# so this may change in another release); the cell measures both. Each frame
# reads `file(line): function`, where, for the functions called while the
# profiler ran, `line` is the line the function **starts** on (its `def`),
# not the line inside it that made the call: the stack names the function
# to look in. The `Source Location` column of `table()` prints these
# frames with their file paths; we print the frames of our own functions
# instead, with the source line they point at (frames of notebook cells
# name a temporary file, whose lines `linecache` still holds).


# %%
FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<function>\S+)$")  # "file.py(12): train_step"
OUR_CODE = {f.__name__: f.__code__.co_filename for f in (epoch_loss_item, epoch_loss_on_device, train_step)}


def our_frames(stack):
    """The frames of `stack` inside this notebook's functions, as 'function (line n: source)', no paths."""
    frames = []
    for entry in stack:
        m = FRAME.match(entry)
        if m and m["function"] in OUR_CODE:
            source = linecache.getline(OUR_CODE[m["function"]], int(m["line"])).strip()
            frames.append(f"{m['function']} (line {m['line']}: {source})")
    return frames


def stacked_profile(**config):
    with profile(activities=activities, with_stack=True, **config) as p:
        epoch_loss_item(sync_batches)
    return p


plain_stacks = stacked_profile()
n_plain = sum(1 for e in plain_stacks.events() if e.stack)
prof = stacked_profile(experimental_config=_ExperimentalConfig(verbose=True))
n_verbose = sum(1 for e in prof.events() if e.stack)
print(f"events with a stack: {n_plain} with with_stack=True alone, {n_verbose:,} of {len(prof.events()):,} with verbose=True")
by_stack = prof.key_averages(group_by_stack_n=STACK_DEPTH)
for op in ("aten::item", "aten::conv2d"):
    for e in by_stack:
        if e.key == op:
            module = next((f for f in e.stack if f.startswith("nn.Module: ")), "")
            print(f"{op:14s} {e.count:3d} calls  {module:22s} <- {' <- '.join(our_frames(e.stack)) or '(below our code)'}")

# %%
item_rows = [e for e in by_stack if e.key == "aten::item"]
conv_rows = [e for e in by_stack if e.key == "aten::conv2d"]
assert syncs_before == {op: SYNC_STEPS for op in SYNC_OPS}, f"one sync per step expected: {syncs_before}"
assert syncs_after == {op: 1 for op in SYNC_OPS}, f"one sync per epoch expected after the fix: {syncs_after}"
assert n_plain == 0 < n_verbose, "with_stack=True alone should leave the op stacks empty in this torch; verbose fills them"
first_line = epoch_loss_item.__code__.co_firstlineno
assert len(item_rows) == 1 and item_rows[0].count == SYNC_STEPS, "one stack, one call per step, for aten::item"
assert FRAME.match(item_rows[0].stack[1])["function"] == "epoch_loss_item", "the frame above aten::item should be our loop"
assert our_frames(item_rows[0].stack)[0].startswith(f"epoch_loss_item (line {first_line}: def epoch_loss_item"), (
    f"the stack should name the loop's function, at its def line: {our_frames(item_rows[0].stack)}"
)
assert len(conv_rows) == 2 and {e.count for e in conv_rows} == {SYNC_STEPS}, (
    "grouped by stack, the two Conv2d layers' calls should fall into two rows, one call per step each"
)
_ = report.record("host syncs per step, .item() every step vs summed on device",
                  f"{syncs_before['aten::item'] / SYNC_STEPS:.0f} vs {syncs_after['aten::item'] / SYNC_STEPS:.3g}")

# %% [markdown]
# And the fix computes the same number: from the same weights, both loops
# return the same mean loss (up to float32 rounding; the on-device sum is
# float32, the Python one float64).

# %%
start_state = copy.deepcopy((model.state_dict(), optimizer.state_dict()))


def restore_start():
    """Put model and optimizer back to start_state (a fresh copy: the optimizer would otherwise adopt, and then
    update in place, start_state's own momentum buffers)."""
    model.load_state_dict(start_state[0])
    optimizer.load_state_dict(copy.deepcopy(start_state[1]))


mean_item = epoch_loss_item(sync_batches)
restore_start()
mean_on_device = epoch_loss_on_device(sync_batches)
print(f"mean loss over {SYNC_STEPS} steps: {mean_item:.6f} with .item() per step, {mean_on_device:.6f} summed on device")
assert math.isclose(mean_item, mean_on_device, rel_tol=1e-5), "the two loops should compute the same mean loss"

# %% [markdown]
# The `aten::item` row names `epoch_loss_item` as the function that called
# it, directly (no torch frame in between), and the stack also splits `aten::conv2d` into one row per `nn.Module`, the
# two convolution layers: stack grouping tells apart calls of one operator
# that shape grouping might not.
#
# Is the fix worth it? The timing below runs on whatever `device` is. On
# the CPU the two loops do the same work apart from `SYNC_STEPS - 1` more
# `.item()` calls, each a few microseconds, so we expect no difference
# worth asserting, and assert none: on the CPU, read any gap in the table
# against its IQR column, the spread between timed blocks. To make the
# comparison fair, every timed call first restores the same starting
# weights and optimizer state (`restore_start`, the same small cost in
# both), so both loops do identical arithmetic, and the two variants take
# turns over `SYNC_ROUNDS` rounds (in alternating order), so a machine that
# gets busier or quieter during the cell affects both alike; the table
# shows the median over rounds of each round's median and IQR. The cell
# prints whether the gap between the two exceeds their IQRs; on a CPU a
# gap within them is noise, and even one beyond them says more about the
# machine than about a few extra microsecond-sized `.item()` calls. On a
# GPU the table shows what the
# per-step sync costs; how much depends on how long each step keeps the
# GPU busy, so the cell prints (and records) the ratio and checks only that removing the
# syncs does not make the loop noticeably (10 %) slower; the sync itself
# is what the cell above counted, in the CUDA runtime's own
# `cudaStreamSynchronize` calls. (On CUDA, `torch.cuda.set_sync_debug_mode("warn")`
# makes every synchronising call warn, another way to find them.)

# %%
def from_start(loop):
    """loop(sync_batches), from the same starting weights and optimizer state on every call."""
    def call():
        restore_start()
        return loop(sync_batches)
    return call


sync_variants = (("loss.item() every step", epoch_loss_item), ("summed on device", epoch_loss_on_device))
per_round = {name: [] for name, _ in sync_variants}
for r in range(SYNC_ROUNDS):
    for name, loop in (sync_variants if r % 2 == 0 else sync_variants[::-1]):  # A B, B A, ...: drift hits both
        per_round[name].append(measure(from_start(loop), label=name, min_run_time=MIN_RUN_TIME / SYNC_ROUNDS))
sync_timings = [Timing(label=name, median_s=statistics.median(t.median_s for t in ts),
                       iqr_s=statistics.median(t.iqr_s for t in ts),
                       calls=sum(t.calls for t in ts), blocks=sum(t.blocks for t in ts)) for name, ts in per_round.items()]
restore_start()
print(f"{SYNC_STEPS} training steps on {device}, median of {SYNC_ROUNDS} interleaved round(s):")
print(timing_table(sync_timings))
sync_speedup = speedup(*sync_timings)
sync_gap_s = abs(sync_timings[0].median_s - sync_timings[1].median_s)
sync_noise_s = max(t.iqr_s for t in sync_timings)
beyond_iqr = sync_gap_s > sync_noise_s
print(f"gap {1e3 * sync_gap_s:.2f} ms, {'more' if beyond_iqr else 'no more'} than the larger IQR ({1e3 * sync_noise_s:.2f} ms)"
      + ("" if device.type != "cpu" else ": noise on the CPU" if not beyond_iqr else ": on the CPU, the machine, not the syncs"))
if device.type != "cpu":
    _ = report.record(f"speed-up, one sync per epoch instead of per step ({device.type})", sync_speedup, "x", digits=2)
    assert sync_speedup > 0.9, f"removing the per-step sync should not slow the loop down: {sync_speedup:.2f}x"

# %% [markdown]
# ## Pitfalls
#
# ### 1. A schedule without `prof.step()`
#
# The schedule only moves when you call `prof.step()`. Forget it, and the
# profiler stays at step 0, in the `wait` phase, for the whole loop; it
# never records, and asking for the results fails:

# %%
# NBVAL_CHECK_OUTPUT
try:
    with profile(activities=activities, schedule=schedule(wait=1, warmup=1, active=2)) as prof:
        for _ in range(6):
            train_step(x0, y0)  # ... and no prof.step()
    prof.key_averages()
except AssertionError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# **Fix:** call `prof.step()` once at the end of every iteration, as in the
# training loop above (or pass no schedule, to record everything).
#
# ### 2. `repeat` > 1 and `key_averages()` after the loop
#
# After the loop, `prof.key_averages()` holds the events of the **last**
# cycle only: the profiler clears them at the end of each cycle, once
# `on_trace_ready` has had them. PyTorch warns about it when a second
# cycle begins, but only once per process (torch keeps a set of the
# warnings it has shown), so in this notebook the warning appeared when our
# scheduled loop began its second cycle, and not here. The cell prints the
# one recorded there:

# %%
# NBVAL_CHECK_OUTPUT
def count_steps(acc_events):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=2, repeat=2),
                     acc_events=acc_events) as p:
            for _ in range(6):
                train_step(x0, y0)
                p.step()
        n = {e.key: e.count for e in cpu_rows(p.key_averages())}["forward"]
    return n, [f"{w.category.__name__}: {w.message}" for w in caught]


clears_warning = [m for m in loop_warnings if "acc_events=True" in m]
print("\n".join(clears_warning))
n_last, messages = count_steps(acc_events=False)
n_all, _ = count_steps(acc_events=True)
print(f"'forward' steps in key_averages(): {n_last} with the default, {n_all} with acc_events=True")
print(f"warnings raised by this cell's first profile: {len(messages)} (shown once per process)")
assert (n_last, n_all) == (2, 4), "the default should keep the last cycle only, acc_events=True both"
assert len(clears_warning) == 1, f"the scheduled loop's second cycle should have warned that events are cleared: {loop_warnings}"
assert not any("acc_events=True" in m for m in messages), "torch shows this warning once per process"

# %% [markdown]
# **Fix:** read each cycle in `on_trace_ready` (as our loop did), or pass
# `acc_events=True` to keep the events of all cycles. (In our scheduled
# loop the warning was harmless, because `on_cycle_done` read each cycle
# as it ended.)
#
# ### 3. A misspelt sort key
#
# `table(sort_by=...)` takes the name of an attribute of the averaged
# events, such as `self_cpu_time_total` or `cpu_memory_usage`, not the
# column title:

# %%
# NBVAL_CHECK_OUTPUT
try:
    memory.table(sort_by="self_cpu_time")
except AttributeError as err:
    print(f"{type(err).__name__}: {err}")
print(memory.table(sort_by="self_cpu_time_total", row_limit=1, max_name_column_width=30).splitlines()[1].split()[:3])

# %% [markdown]
# **Fix:** use `self_cpu_time_total`, `cpu_time_total`,
# `self_cpu_memory_usage`, ... (on a GPU: `self_device_time_total`,
# `self_device_memory_usage`; the older `self_cuda_*` names are deprecated,
# and the averaged events of torch 2.14 no longer have them).
#
# ## Exercises
#
# Each exercise has a stub for you to fill in, then a checker cell that
# prints **PASSED**, **NOT YET** with a hint, or **TODO** while the stub
# still raises `NotImplementedError`. If you are stuck,
# `solution("17.top_ops")` returns the reference solution.
#
# ### Exercise 1: the top operators
#
# Write `top_ops(averages, k)`: given the result of `prof.key_averages()`,
# return the names (`.key`) of the `k` entries with the largest **self**
# CPU time (`.self_cpu_time_total`), largest first; all of them if there
# are fewer than `k`. The checker uses a real profile; when it passes, the
# cell prints the top three operators of our first profile.


# %%
def top_ops(averages, k):
    """Names of the k entries of `averages` with the largest self CPU time, largest first."""
    raise NotImplementedError


# %%
result = check("17.top_ops", top_ops)
if result.passed:
    print("top 3 by self CPU time:", top_ops(averages, 3))

# %% [markdown]
# ### Exercise 2: which steps does a schedule record?
#
# Write `recorded_steps(wait, warmup, active, repeat, skip_first, num_steps)`:
# the sorted list of step numbers (counting from 0) that
# `schedule(wait=..., warmup=..., active=..., repeat=..., skip_first=...)`
# records in a loop of `num_steps` iterations that calls `prof.step()`
# at the end of each. Remember: `skip_first` steps come once, at the
# start; each cycle is `wait`, then `warmup`, then `active` steps; and
# `repeat=0` means "cycle until the loop ends". Do not call the profiler:
# work it out. The checker runs the real profiler with the same schedules
# and compares.


# %%
def recorded_steps(wait, warmup, active, repeat, skip_first, num_steps):
    """Step numbers (0-based) recorded by the schedule within num_steps steps."""
    raise NotImplementedError


# %%
result = check("17.recorded_steps", recorded_steps)
if result.passed:
    print("schedule(wait=2, warmup=1, active=2, repeat=0, skip_first=3), 15 steps:", recorded_steps(2, 1, 2, 0, 3, 15))

# %% [markdown]
# ## Summary
#
# - `profile(activities=[ProfilerActivity.CPU] (+ CUDA))` records every
#   operator; `record_function("name")` labels your own code, and the
#   `DataLoader` labels itself.
# - In `key_averages().table()`, **self** time is the operator's own work
#   and adds up to the total; sort by it (`sort_by="self_cpu_time_total"`)
#   to find where time goes. `record_shapes=True` plus
#   `group_by_input_shape=True` splits an operator by input shape.
# - `schedule(wait, warmup, active, repeat, skip_first)` with `prof.step()`
#   records only the steps you choose; `on_trace_ready` gets each cycle;
#   `acc_events=True` keeps all cycles.
# - `export_chrome_trace` writes a timeline for `chrome://tracing` or
#   Perfetto; `tensorboard_trace_handler` writes one per cycle for
#   `tensorboard --logdir`.
# - `profile_memory=True` attributes allocations to operators (the *Mem*
#   columns); `aten::empty` is the allocation itself, and the largest
#   allocators were the activations and their gradients.
# - The starved `DataLoader` showed up as the largest share of each step.
#   Its cost is spread over thousands of small operator calls, per-sample
#   overhead; on a busy machine a tiny `aten::bmm` inside torchvision's
#   affine grid can also stall, waiting for a pool thread (checked when it
#   happens). Batching the augmentation removed the bottleneck, and a plain timing of
#   whole epochs without the profiler confirmed the speed-up (the figures
#   are in the report below).
# - A `.item()` per step is a host sync per step: `aten::item` /
#   `aten::_local_scalar_dense` counted in a profile find it,
#   `with_stack=True` (with the verbose experimental config, in torch
#   2.14.1) and `key_averages(group_by_stack_n=n)` name the function that
#   calls it, and summing on the device reads the number once.
# - `SummaryWriter.add_scalar` logs plain numbers for TensorBoard;
#   `EventAccumulator` reads them back.
#
# **Next:** chapter 18 takes the memory columns further: where the memory
# of training goes (parameters, gradients, optimizer state, activations)
# and how checkpointing, accumulation and mixed precision reduce it.

# %%
print(f"notebook ran in {time.perf_counter() - notebook_start:.0f} s")
report.finish()
