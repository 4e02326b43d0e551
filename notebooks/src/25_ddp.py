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
# # 25 · Distributed data parallel (DDP)
#
# Until now one Python process trained one model. **Data parallelism** runs
# several copies of the same program, each on its own slice of the data, and
# keeps their models identical by averaging the gradients after every
# backward pass. That is what `torch.nn.parallel.DistributedDataParallel`
# (DDP) does, and it is how most models are trained on more than one GPU.
#
# This machine has CPUs only, and that is enough: the `gloo` backend runs
# every collective operation on CPU tensors, so we can start real
# multi-process jobs on one computer, look at what each process prints, and
# check the claims with numbers. On GPUs the same code uses the `nccl`
# backend; the choice is automatic.
#
# **What you will learn**
# - processes, ranks, world size, local rank and the rendezvous; what
#   `torchrun` puts in each process's environment;
# - why a notebook launches modules (entry points in `helpers.distributed`)
#   and cannot hand a function defined in itself to other processes;
# - the collectives `all_reduce`, `broadcast`, `all_gather`,
#   `reduce_scatter` and `barrier`, rank by rank;
# - DDP over 2 processes with batch B each takes **the same step** as one
#   process with batch 2B, and the three ways to break that;
# - gradient accumulation with `no_sync()`, with the all-reduces counted;
#   the learning rate for a larger global batch (the linear scaling rule);
# - `DistributedSampler` and why `set_epoch` matters; DDP on real MNIST;
#   downloading a dataset once (rank 0 first, then a barrier);
# - DataParallel vs DDP; the multi-node `torchrun` command; why an
#   `mp.spawn` script under `torchrun` starts N x N processes;
# - surviving a crashed worker: elastic restarts plus checkpoints, with
#   nothing lost; and what a failing rank looks like from the notebook.
#
# **Prerequisites:** chapters 05 (the MNIST MLP), 10 (optimizers) and 14
# (saving and loading checkpoints).
#
# **Estimated time:** 60 minutes.

# %% tags=["parameters"]
NPROC = 2  # processes (ranks) per job
LAUNCH_TIMEOUT = 300  # seconds before a job is stopped (every rank killed) and an error raised
EQUIV_STEPS = 5  # SGD steps of the equivalence check
EQUIV_BATCH = 16  # batch size per rank in the equivalence check (one process gets NPROC times this)
ACCUMULATE = 4  # micro-batches per optimizer step in the gradient-accumulation check (>= 2)
TRAIN_EPOCHS = 2  # epochs of DDP training on MNIST (>= 2 to see set_epoch at work)
TRAIN_IMAGES = 20_000  # the first N MNIST training images (60,000 max)
BATCH_PER_RANK = 64  # MNIST batch size per rank
LR = 0.05  # SGD learning rate (momentum 0.9) for MNIST
MIN_DDP_ACCURACY = 0.93  # the test accuracy the checks require after DDP training
ELASTIC_STEPS = 60  # planned steps of the fault-tolerance run
CHECKPOINT_EVERY = 20  # rank 0 saves a checkpoint every K steps
FAIL_AT = 45  # rank 1 crashes at this step, on the first attempt only
RUN_ELASTIC = True  # launch the elastic job of section 7 (a crash, a restart, a reference run: the longest launch)
RUN_FAILING_JOB = True  # launch the job with a failing rank of Pitfall 1
SEED = 0

# %% [markdown]
# ## Setup

# %%
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time

import matplotlib.pyplot as plt
import torch
from torch.utils.data.distributed import DistributedSampler

from helpers.device import pick_device, seed_everything
from helpers.distributed import backend
from helpers.distributed.launch import DistributedRunError, torchrun
from helpers.exercises import check, solution  # noqa: F401  (solution: for when you are stuck)
from helpers.paths import ROOT, build_dir, rel
from helpers.report import ChapterReport

generator = seed_everything(SEED)
device = pick_device()
report = ChapterReport("25_ddp")
notebook_start = time.perf_counter()
print(f"torch {torch.__version__}, this notebook's device {device}, {torch.get_num_threads()} CPU threads")
print(f"distributed available: {torch.distributed.is_available()}, gloo: {torch.distributed.is_gloo_available()}, "
      f"nccl: {torch.distributed.is_nccl_available()}")
print(f"backend for {NPROC} ranks on this machine: {backend(NPROC)!r}")

# Every job of this run writes into its own fresh folder, so two runs of this notebook never mix.
(build_dir() / "distributed").mkdir(parents=True, exist_ok=True)
RUN_DIR = tempfile.mkdtemp(prefix="25_ddp-", dir=build_dir() / "distributed")
launch_seconds = {}


def sanitised(text):
    """`text` with the build machine's absolute paths in torch's messages cut to `third_party/...`."""
    return re.sub(r"/[^\s\[\]]*?/(third_party/)", r"\1", text)


def show(result, skip_tracebacks=True):
    """Print what the ranks of a job printed, without torchrun's own log lines and the ranks' tracebacks."""
    for line in result.output.splitlines():
        if not line.startswith("[rank "):
            continue  # torchrun's log lines (warnings, the failure summary)
        if skip_tracebacks and "]: " in line.split("] ", 1)[1][:12]:
            continue  # "[rank 1] [rank1]: Traceback ..." lines: shown separately where they matter
        print(line)


# %% [markdown]
# ## 1. Processes, ranks and the rendezvous
#
# A distributed job is a set of ordinary processes running the same program.
# Each knows three numbers:
#
# - **world size**: how many processes the job has;
# - **rank**: this process's number, `0 .. world_size - 1`, unique in the
#   whole job (rank 0 usually does the printing and saving);
# - **local rank**: its number *on this machine*, which picks its GPU
#   (`cuda:<local rank>`); with one machine it equals the rank.
#
# Before they can exchange tensors the processes must find each other: the
# **rendezvous**. One process hosts a small key-value store (a `TCPStore`)
# at an address and port that all of them know, `MASTER_ADDR` and
# `MASTER_PORT`; each registers there, and once all `world_size` have
# arrived, the backend (gloo or NCCL) connects them directly.
#
# `torchrun` (`python -m torch.distributed.run`) does the bookkeeping: it
# starts `--nproc-per-node` copies of a program, sets those numbers in each
# one's environment, watches them, and restarts or stops them all when one
# fails. The course's launcher, `helpers.distributed.launch.torchrun`, runs it
# as a subprocess from the notebook with:
#
# - a rendezvous port on the loopback address (`127.0.0.1`) that is **free
#   right now** (`free_port()` binds to port 0 and lets the system choose),
#   so two notebooks running at once cannot collide;
# - `OMP_NUM_THREADS` set per rank (2 ranks × 1 thread on our 2 cores);
# - each rank's lines prefixed with `[rank N]` (torchrun's `--tee` and
#   `--log-line-prefix-template`), the logs under `build/distributed/`;
# - a timeout after which **every** rank is killed, and an exception that
#   names the failing rank with its traceback.
#
# Its first job is `helpers.distributed.collectives`: each rank prints what
# torchrun put in its environment, the ranks sum their rank numbers with one
# `all_reduce`, and then they try every collective of section 2 (we read
# those lines there: each launch costs seconds, so one job serves both
# sections).

# %%
job_dir = os.path.join(RUN_DIR, "env_and_collectives")
first_job = torchrun("helpers.distributed.collectives", "--out", job_dir, nproc=NPROC, timeout=LAUNCH_TIMEOUT)
launch_seconds["collectives"] = first_job.seconds
print("command:", " ".join(first_job.command[:3]), "...", " ".join(rel(a) if a.startswith(str(ROOT)) else a for a in first_job.command[-4:]))
print(f"finished in {first_job.seconds:.1f} s (one wall-clock sample), exit code {first_job.returncode}; logs in {first_job.log_dir}\n")
for line in first_job.output.splitlines():
    if line.startswith("[rank ") and "=" in line and " -> " not in line:  # the environment part; " -> " lines are section 2's
        print(line)

# %% [markdown]
# Both ranks print at once, so their lines interleave in whatever order the
# operating system ran them: a distributed program's output is never in a
# fixed order. `RunResult.rank_lines(rank)` picks one rank's lines. Rank 0
# also gathered every rank's environment (with `all_gather_object`) and wrote
# it to a JSON file, and the checks below read that file rather than the
# printed text:

# %%
env = json.load(open(os.path.join(job_dir, "env.json")))
ranks = env["ranks"]
assert [r["RANK"] for r in ranks] == [str(k) for k in range(NPROC)], f"ranks should be 0..{NPROC - 1}: {ranks}"
assert {r["WORLD_SIZE"] for r in ranks} == {str(NPROC)}, "every rank should see the same WORLD_SIZE"
assert [r["LOCAL_RANK"] for r in ranks] == [r["RANK"] for r in ranks], "on one machine LOCAL_RANK equals RANK"
assert len({(r["MASTER_ADDR"], r["MASTER_PORT"]) for r in ranks}) == 1, "all ranks must meet at one address"
assert len({r["pid"] for r in ranks}) == NPROC, "each rank is a separate process"
assert env["sum_of_ranks"] == sum(range(NPROC)), "all_reduce should have summed the ranks"
assert first_job.rank_lines(1)[0].startswith("RANK=1"), "rank_lines(1) should start with rank 1's first line"
for r in ranks:
    print(f"rank {r['RANK']}: pid {r['pid']}, LOCAL_RANK={r['LOCAL_RANK']}, MASTER_ADDR={r['MASTER_ADDR']}, "
          f"restart count {r['TORCHELASTIC_RESTART_COUNT']}")
_ = report.record("seconds for one 2-rank launch (collectives; a single wall-clock sample)", round(first_job.seconds, 1), "s")

# %% [markdown]
# Each rank is its own process (different pids) with its own Python
# interpreter, its own copy of the model and its own memory. They share
# nothing but what they send each other. Starting one costs an interpreter
# start and `import torch` in every rank, and this job does almost no other
# work, so the seconds above are mostly start-up; that is why this chapter
# starts only a handful of jobs.
#
# `MASTER_ADDR` and `MASTER_PORT` are what the ranks' process group connects
# to; torchrun's c10d rendezvous (on the port we chose) hands them out.
# `MASTER_ADDR` is rank 0's host name as `socket.getfqdn()` gives it
# (`localhost` on the machine that built this notebook; your machine's name
# elsewhere), not the rendezvous address `127.0.0.1`. The
# entry point then joins the group. Every entry point in
# `helpers.distributed` follows one pattern
# (`helpers.distributed.common.process_group`):
#
# ```python
# @record                                   # writes this rank's traceback to torchrun's error file
# def main():
#     rank = int(os.environ["RANK"]); world_size = int(os.environ["WORLD_SIZE"])
#     dist.init_process_group(backend(), timeout=timedelta(seconds=60))   # reads MASTER_ADDR/PORT
#     try:
#         ...                               # the work
#     finally:
#         dist.destroy_process_group()
# ```
#
# `backend()` returns `"nccl"` when CUDA is available with at least one GPU
# per local rank, and `"gloo"` otherwise. The timeout bounds how long a rank
# waits for the others, at the rendezvous and in every collective, so a
# missing rank becomes an error rather than a hang.
#
# **Why modules, not notebook functions?** To start a function in another
# process, Python pickles it, and pickle stores a function **by reference**:
# its module and its name, not its code. The new process imports the module
# and looks the name up. A function defined in a notebook lives in the
# kernel's `__main__`, which the new process does not have, so it cannot be
# found (*Pitfalls* shows the exact error). `torch.multiprocessing.spawn`
# (`mp.spawn(fn, args=..., nprocs=2)`) therefore works from a notebook only
# with a function imported from a file, e.g. one in `helpers`; it then also
# falls to you to set `MASTER_ADDR`/`MASTER_PORT` and pass the rank to
# `init_process_group`. Running modules under `torchrun`, as here, is the
# form that carries over unchanged to a cluster.

# %% [markdown]
# ## 2. Collectives
#
# A **collective** is an operation that every rank of the group calls, and
# that completes only when all have called it. The ones data parallelism is
# built from, with each rank `r` starting from `x = [r + 1, 10 (r + 1)]`:
#
# | operation | what every rank holds afterwards |
# |---|---|
# | `all_reduce(x, op=SUM)` (or `MAX`, `AVG`, ...) | the element-wise sum (max, mean) over ranks |
# | `broadcast(x, src=0)` | rank 0's `x` |
# | `all_gather_single(out, x)` | every rank's `x`, concatenated in rank order |
# | `reduce_scatter_single(out, x)` | chunk `r` of the sum over ranks, on rank `r` only |
# | `all_to_all_single(out, x)` | chunk `r` of every rank's `x`, on rank `r` |
# | `barrier()` | nothing; nobody continues until everybody arrives |
#
# In torch 2.14 `all_gather_single` and `reduce_scatter_single` are the
# names of the tensor forms (`all_gather_into_tensor` and
# `reduce_scatter_tensor` still work, with a `FutureWarning`). Gloo
# supports all of them on CPU tensors. DDP needs only `all_reduce` (plus a
# `broadcast` at the start); chapter 26's sharding uses `all_gather` and
# `reduce_scatter`. The job of section 1 (`helpers.distributed.collectives`)
# called each once; here is what each rank held afterwards:

# %%
for rank in range(NPROC):
    print(f"--- rank {rank} ---")
    print("\n".join(line for line in first_job.rank_lines(rank) if " -> " in line))

# %% [markdown]
# Every rank printed its own copy of each result, and the checks below
# compare them with what the table says, computed here in one process from
# the starting values:

# %%
coll = json.load(open(os.path.join(job_dir, "collectives.json")))["results"]
starts = torch.tensor(coll["start"])  # [NPROC, 2]: rank r's starting x
expected = {
    "all_reduce SUM": [starts.sum(0)] * NPROC,
    "all_reduce MAX": [starts.amax(0)] * NPROC,
    "all_reduce AVG": [starts.mean(0)] * NPROC,
    "all_reduce SUM / world": [starts.mean(0)] * NPROC,
    "broadcast from 0": [starts[0]] * NPROC,
    "all_gather_single": [starts.reshape(-1)] * NPROC,
    # rank k contributed cat([x_k * 1, x_k * 2, ...]); chunk r of the sum is (r + 1) * sum_k x_k
    "reduce_scatter_single": [(r + 1) * starts.sum(0) for r in range(NPROC)],
    "all_to_all_single + sum": [(r + 1) * starts.sum(0) for r in range(NPROC)],
}
for op, want in expected.items():
    got = coll[op]
    assert not isinstance(got[0], str), f"{op} failed on this backend: {got[0]}"
    for r in range(NPROC):
        assert torch.allclose(torch.tensor(got[r]), want[r].float()), f"{op} on rank {r}: got {got[r]}, expected {want[r].tolist()}"
assert coll["barrier"] == ["all ranks arrived"] * NPROC, "every rank should have passed the barrier"
print(f"all {len(expected) + 1} collectives gave the expected result on all {NPROC} ranks")

# %% [markdown]
# Note `all_reduce SUM / world` equals `all_reduce AVG`: that is exactly what
# DDP does with gradients (a SUM, then a division by the world size, the
# form every backend supports). And `reduce_scatter` gives the same result
# as an `all_to_all` followed by a local sum; the real collective sends as
# many bytes per rank, but it adds the pieces as they arrive, so it never
# holds every rank's piece at once.

# %% [markdown]
# ## 3. DDP: the same step as one big batch
#
# `DistributedDataParallel(model)` does three things:
#
# 1. at construction, it **broadcasts** rank 0's parameters and buffers, so
#    every replica starts identical;
# 2. during `backward()`, hooks on the parameters collect the gradients into
#    buckets (about 25 MB each) and start an **all_reduce** of each bucket
#    as soon as it is full, overlapping communication with the rest of the
#    backward pass;
# 3. each gradient is divided by the world size, so after `backward()`
#    every rank holds **the mean of the ranks' gradients**.
#
# The optimizer then takes the same step on every rank, and the replicas
# stay identical without ever sending parameters again.
#
# Why this equals one process with the whole batch: with a loss that
# averages over its batch, rank `r`'s gradient is
# $g_r = \frac{1}{B}\sum_{i \in r} \nabla \ell_i$, and
#
# $$\frac{1}{W}\sum_{r=1}^{W} g_r = \frac{1}{WB}\sum_{i=1}^{WB} \nabla \ell_i,$$
#
# the gradient of the mean loss over all $WB$ samples. So DDP on 2 ranks
# with batch B each should give the parameters of one process with batch 2B,
# step after step, up to rounding. `helpers.distributed.ddp_equivalence`
# trains both for a few SGD steps (momentum 0.9): the DDP model on 2 ranks,
# and, on rank 0, a plain copy on the concatenated batches. It also tries
# three variations that break the equality:

# %%
eq_dir = os.path.join(RUN_DIR, "equivalence")
result = torchrun("helpers.distributed.ddp_equivalence", "--out", eq_dir, "--steps", str(EQUIV_STEPS),
                  "--batch", str(EQUIV_BATCH), "--accumulate", str(ACCUMULATE), "--seed", str(SEED),
                  nproc=NPROC, timeout=LAUNCH_TIMEOUT)
launch_seconds["ddp_equivalence"] = result.seconds
show(result)
equivalence = json.load(open(os.path.join(eq_dir, "equivalence.json")))
cases = equivalence["cases"]

# %%
diff32, diff64 = cases["float32"]["max_abs_diff"], cases["float64"]["max_abs_diff"]
assert diff32 < 1e-6, f"DDP (2 x {EQUIV_BATCH}) and one process ({2 * EQUIV_BATCH}) should match in float32: max diff {diff32:.3g}"
assert diff64 < 1e-12, f"in float64 they should match to rounding: max diff {diff64:.3g}"
assert cases["sum_loss"]["max_abs_diff"] > 1e-3, "with reduction='sum' DDP's steps should differ from one process's"
assert cases["batchnorm"]["max_abs_diff"] > 1e-4, "BatchNorm with per-rank statistics should change the result"
print(f"DDP {NPROC} x {EQUIV_BATCH} vs one process x {NPROC * EQUIV_BATCH}, after {EQUIV_STEPS} SGD steps:")
print(f"  float32 max |diff| = {diff32:.2g}, float64 max |diff| = {diff64:.2g}")
_ = report.record("DDP vs one process, max |param diff| (float32)", f"{diff32:.1e}")

# %% [markdown]
# The float32 difference is a few units of rounding: the two compute the same
# mean in a different order. When does the equality break?
#
# - **Summed losses** (`reduction="sum"`): each rank's gradient is a sum over
#   B samples, and DDP still *averages* over ranks, so every step is 1/W of
#   the single-process step. Use mean losses (or scale the learning rate).
# - **BatchNorm** normalises with the statistics of the rank's own B
#   samples, not of all WB. `nn.SyncBatchNorm.convert_sync_batchnorm(model)`
#   computes them across ranks, on accelerators only: its forward pass
#   accepts CUDA, HPU, XPU and PrivateUse1 (custom backend) tensors
#   (`torch/nn/modules/batchnorm.py` in 2.14), and DDP refuses it in a CPU
#   model. The job recorded DDP's error on this CPU:

# %%
print("sum_loss   max |diff| =", f"{cases['sum_loss']['max_abs_diff']:.3g}")
print("batchnorm  max |diff| =", f"{cases['batchnorm']['max_abs_diff']:.3g}")
sync = cases["syncbatchnorm"]
if "error" in sync:
    print("syncbatchnorm on", equivalence["backend"], "->", sync["error"])
else:
    assert sync["max_abs_diff"] < 1e-9, f"SyncBatchNorm should restore the equality: {sync['max_abs_diff']:.3g}"
    print(f"syncbatchnorm max |diff| = {sync['max_abs_diff']:.2g} (statistics over all ranks restore the equality)")

# %% [markdown]
# - **Dropout** draws a random mask on each rank from that rank's generator;
#   one process with 2B samples draws a different mask, so the two runs
#   agree only in distribution. (Seed the ranks differently on purpose, e.g.
#   `seed + rank`, for dropout and augmentation; if they all draw the same
#   masks, the extra ranks add less than new data.)
# - **Uneven batches**: DDP averages the ranks' gradients, not the samples'.
#   A last batch of 6 samples on one rank and 2 on the other gives each of
#   those 2 samples a weight of 1/4 in the averaged gradient, twice the 1/8
#   that one process with all 8 would give, and three times the 1/12 of
#   each sample on the other rank (exercise 2). `DistributedSampler` pads
#   the dataset so that every rank gets the same number of samples.
#
# ### Gradient accumulation and `no_sync()`
#
# When the batch you want does not fit in memory, you accumulate: K
# backward passes over K micro-batches add their gradients into `.grad`,
# then one optimizer step (each loss divided by K, so the sum is the mean).
# Under DDP every backward pass all-reduces the gradients, K times per step,
# where once would do: all-reduce is linear, so averaging K times and adding
# gives the same sum as adding and averaging once. `ddp.no_sync()` is a
# context manager that skips the all-reduce: backward passes inside it only
# add to the local `.grad`, and the next backward pass outside it all-reduces
# the accumulated sum.
#
# ```python
# for j, (x, y) in enumerate(micro_batches):          # K of them
#     last = j == K - 1
#     with contextlib.nullcontext() if last else ddp.no_sync():
#         (loss_fn(ddp(x), y) / K).backward()
# optimizer.step(); optimizer.zero_grad()
# ```
#
# To count the all-reduces, the job registered a **communication hook**
# (`ddp.register_comm_hook(state, hook)`): DDP calls `hook(state, bucket)`
# for each gradient bucket instead of its own all-reduce, and ours counts
# the call, then runs DDP's default (`default_hooks.allreduce_hook`, an
# all-reduce and a division by the world size). The model (804 parameters)
# fills one bucket, so one call is one all-reduce. It compared the
# accumulated gradients with those of one backward pass over all K micro-batches
# at once (the large-batch step), in float64:

# %%
acc = equivalence["accumulation"]
for name in ("no_sync", "sync_every_step"):
    a = acc[name]
    print(f"{name:<16} all-reduces per micro-batch {a['hook_calls_per_micro_batch']}, "
          f"max |grad - large-batch grad| = {a['max_abs_diff_vs_large_batch']:.2g}, "
          f"ranks' grads apart before the last micro-batch: {a['rank_spread_before_last']:.2g}, after: {a['rank_spread_after_last']:.2g}")
with_no_sync, every_step = acc["no_sync"], acc["sync_every_step"]
assert with_no_sync["hook_calls_per_micro_batch"] == [0] * (ACCUMULATE - 1) + [1], "no_sync: one all-reduce, on the last micro-batch only"
assert every_step["hook_calls_per_micro_batch"] == [1] * ACCUMULATE, "without no_sync every backward pass all-reduces"
assert with_no_sync["max_abs_diff_vs_large_batch"] < 1e-12, "accumulated gradients should equal the large-batch gradients"
assert every_step["max_abs_diff_vs_large_batch"] < 1e-12, "all-reduce is linear: syncing every time gives the same sum"
assert with_no_sync["rank_spread_before_last"] > 1e-3, "inside no_sync each rank holds only its own, local gradients"
assert with_no_sync["rank_spread_after_last"] == 0.0, "after the last backward every rank holds the same averaged gradient"
_ = report.record(f"all-reduces per {ACCUMULATE}-micro-batch step, with / without no_sync",
                  f"{sum(with_no_sync['hook_calls_per_micro_batch'])} / {sum(every_step['hook_calls_per_micro_batch'])}")

# %% [markdown]
# With `no_sync` the job all-reduced once per optimizer step instead of
# `ACCUMULATE` times, and the gradients are those of the large batch to
# float64 rounding, as they are without it: `no_sync` saves communication,
# it does not change the result. In between, the ranks' gradients differ
# (each holds only its own sum), so never step the optimizer inside
# `no_sync`. Lightning's `accumulate_grad_batches` (chapter 24) uses
# `no_sync` for you under its DDP strategy.
#
# ### The learning rate and the global batch
#
# With W ranks of batch B, the optimizer takes one step per W·B samples.
# Moving a run from one process with batch B to W ranks therefore cuts the
# number of steps per epoch by W. The **linear scaling rule** (Goyal et al.,
# *Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour*, 2017): when
# the batch is multiplied by k, multiply the learning rate by k. The
# argument: k SGD steps of rate η on batches $B_1..B_k$ move the weights by
# $-\eta \sum_j g_{B_j}(w_{t+j})$; one step of rate kη on their union moves
# them by $-k\eta \, g_{B_1 \cup .. \cup B_k}(w_t) = -\eta \sum_j g_{B_j}(w_t)$.
# The two agree as long as the gradient barely changes over k small steps,
# that is, while the steps are small. We can measure that in this process
# (DDP's step is the large-batch step, as shown above): plain SGD on a small
# classifier, k = 4 (think of 4 ranks), 10 large steps, compared with the
# 40 small steps they replace, for several base rates η:

# %%
K_SCALE, SMALL_BATCH, LARGE_STEPS = 4, 16, 10
base_rates = [0.01, 0.03, 0.1, 0.3, 1.0]
gen = torch.Generator().manual_seed(SEED)
x_lr = torch.randn(LARGE_STEPS * K_SCALE * SMALL_BATCH, 20, generator=gen, dtype=torch.float64)
y_lr = (x_lr @ torch.randn(20, 4, generator=gen, dtype=torch.float64)).argmax(1)  # labels from a random linear teacher


def sgd_weights(lr, batch):
    """Plain SGD over x_lr in consecutive batches; returns the final weights as one vector."""
    torch.manual_seed(SEED)
    model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)).double()
    start = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for i in range(0, len(x_lr), batch):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x_lr[i:i + batch]), y_lr[i:i + batch]).backward()
        opt.step()
    return start, torch.cat([p.detach().reshape(-1) for p in model.parameters()])


scaled_dev, unscaled_dev = [], []
for lr in base_rates:
    start, small = sgd_weights(lr, SMALL_BATCH)
    moved = (small - start).norm()
    scaled_dev.append(((sgd_weights(K_SCALE * lr, K_SCALE * SMALL_BATCH)[1] - small).norm() / moved).item())
    unscaled_dev.append(((sgd_weights(lr, K_SCALE * SMALL_BATCH)[1] - small).norm() / moved).item())
print(f"distance from {K_SCALE * LARGE_STEPS} steps of batch {SMALL_BATCH}, as a share of how far those steps moved the weights:")
print(f"{'base lr':>8s} {'batch x4, lr x4':>16s} {'batch x4, same lr':>18s}")
for lr, d_s, d_u in zip(base_rates, scaled_dev, unscaled_dev):
    print(f"{lr:8g} {d_s:16.3f} {d_u:18.3f}")
assert scaled_dev[0] < 0.1 * unscaled_dev[0], "with small steps, scaling the rate with the batch should track the small-batch run"
assert scaled_dev[-1] > unscaled_dev[-1], (
    f"at lr {base_rates[-1]} the scaled run should end farther from the small-batch run than the unscaled one")

fig, ax = plt.subplots(figsize=(9, 3))
ax.plot(base_rates, scaled_dev, "o-", label=f"batch x{K_SCALE}, lr x{K_SCALE} (linear scaling rule)")
ax.plot(base_rates, unscaled_dev, "s-", label=f"batch x{K_SCALE}, same lr")
ax.set_xscale("log")
ax.set_xlabel("base learning rate (batch 16)")
ax.set_ylabel("relative distance")
ax.set_title(f"Final weights vs {K_SCALE * LARGE_STEPS} small-batch SGD steps")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
_ = report.record(f"linear scaling rule, relative distance at lr {base_rates[0]} (scaled / unscaled)",
                  f"{scaled_dev[0]:.3f} / {unscaled_dev[0]:.3f}")

# %% [markdown]
# Keeping the rate while growing the batch takes k times fewer steps at the
# same rate, and ends far from the small-batch run (the last column).
# Scaling the rate tracks the small-batch run closely while the steps are
# small (the first row, checked), and breaks down when kη is large: in the
# row of base rate 1 (kη = 4) the scaled run ends farther from the
# small-batch run than the unscaled one (checked), because the gradient
# changes within what would have been k small steps. That is the
# rule's limit. Goyal et al. found it fails early in training, when the
# network changes fastest, and add a **warm-up**: start at the small-batch
# rate η and raise it linearly to kη over the first epochs (5 in the
# paper), then follow the usual schedule.
# In the paper this held, for ResNet-50 on ImageNet with momentum SGD, up to
# a global batch of 8192 (k = 32 over their 256); larger batches lost
# accuracy. The rule comes from SGD's update; adaptive optimizers such as
# Adam rescale the gradient themselves, and the argument does not carry
# over. With W ranks in PyTorch, a warm-up is one scheduler:

# %%
# NBVAL_CHECK_OUTPUT
W, base_lr, warmup_steps = NPROC, 0.05, 5
opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=W * base_lr)  # the target rate: W x base_lr
warmup = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1 / W, total_iters=warmup_steps)
rates = []
for _ in range(warmup_steps + 2):
    rates.append(round(opt.param_groups[0]["lr"], 6))
    opt.step()
    warmup.step()
print(f"{W} ranks, base lr {base_lr}: lr per step {rates}")
assert rates[0] == base_lr and rates[warmup_steps:] == [W * base_lr] * 2, "warm-up should go from base_lr to W x base_lr"

# %% [markdown]
# ## 4. `DistributedSampler` and `set_epoch`
#
# Each rank must see a *different* part of the data. `DistributedSampler`
# shuffles the indices with a generator seeded by `seed + epoch` (the same
# permutation on every rank), pads the list to a multiple of the world size,
# and hands rank `r` every W-th index starting at `r`. It does not need a
# process group, so we can ask it in this notebook what each rank of a
# 2-rank job would get from a dataset of 12 items:

# %%
# NBVAL_CHECK_OUTPUT
toy = range(12)
for rank in range(2):
    sampler = DistributedSampler(toy, num_replicas=2, rank=rank, shuffle=True, seed=0)
    with_set = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        with_set.append(list(sampler))
    frozen = DistributedSampler(toy, num_replicas=2, rank=rank, shuffle=True, seed=0)
    without_set = [list(frozen) for epoch in range(3)]
    print(f"rank {rank} with set_epoch:    {with_set}")
    print(f"rank {rank} without set_epoch: {without_set}")
    assert len({tuple(e) for e in with_set}) == 3, "set_epoch should give a new order every epoch"
    assert len({tuple(e) for e in without_set}) == 1, "without set_epoch every epoch repeats epoch 0's order"

# %% [markdown]
# Without `set_epoch` the "shuffle" is the same every epoch: each rank sees
# the same samples in the same order, forever, and a rank never meets the
# other rank's half. Nothing fails; the model just trains a little worse.
# Call `sampler.set_epoch(epoch)` at the top of every epoch.
#
# `helpers.distributed.ddp_train` puts it all together on real MNIST: the
# chapter-05 MLP (one hidden layer of 128), wrapped in DDP, a
# `DistributedSampler` per rank, SGD; rank 0 evaluates on the 10,000 test
# images. It also records which samples each rank saw first in each epoch,
# with `set_epoch` and with a sampler that never gets it. (The ranks inherit
# the notebook's environment, so they find MNIST where the notebook does.)

# %%
train_dir = os.path.join(RUN_DIR, "ddp_train")
result = torchrun("helpers.distributed.ddp_train", "--out", train_dir, "--epochs", str(TRAIN_EPOCHS),
                  "--train-size", str(TRAIN_IMAGES), "--batch", str(BATCH_PER_RANK), "--lr", str(LR),
                  "--seed", str(SEED), nproc=NPROC, timeout=LAUNCH_TIMEOUT)
launch_seconds["ddp_train"] = result.seconds
show(result)
trained = json.load(open(os.path.join(train_dir, "ddp_train.json")))

# %%
heads, frozen_heads = trained["first_indices"], trained["first_indices_without_set_epoch"]
assert trained["accuracy"] >= MIN_DDP_ACCURACY, f"DDP-trained MLP reached {trained['accuracy']:.3f} < {MIN_DDP_ACCURACY}"
assert trained["overlap"] == 0, f"the ranks shared {trained['overlap']} samples in an epoch; each should see its own part"
assert trained["covered"] == trained["train_size"], "together the ranks should cover the whole training set"
assert trained["replica_max_diff"] == 0.0, f"replicas drifted apart by {trained['replica_max_diff']:.3g}"
assert all(len({tuple(e) for e in frozen_heads[r]}) == 1 for r in frozen_heads), "without set_epoch the order should repeat"
assert all(len({tuple(e) for e in heads[r]}) == TRAIN_EPOCHS for r in heads), "with set_epoch each epoch should differ"
for r in heads:
    print(f"rank {r}: first samples per epoch with set_epoch {heads[r]}, without {frozen_heads[r]}")
print(f"{trained['samples_per_rank']:,} samples per rank and epoch in {trained['steps_per_epoch']} steps of "
      f"{BATCH_PER_RANK}; global batch {NPROC * BATCH_PER_RANK}")
print(f"replicas identical after training: max difference {trained['replica_max_diff']}")
print(f"test accuracy {trained['accuracy']:.4f}")
_ = report.record("DDP MNIST test accuracy", round(100 * trained["accuracy"], 2), "%")

# %% [markdown]
# ### Download once: rank 0 first, then a barrier
#
# Every rank runs the same script, so every rank runs its "download the
# dataset unless it is there" line, at about the same time. The first rank
# to get there finds no file and starts writing it; a rank arriving a moment
# later finds the file *present* but half-written, and loads a truncated
# dataset (or two ranks both download and write the same file at once). The
# fix is to let rank 0 go first while the others wait at a barrier:
#
# ```python
# if rank != 0:
#     dist.barrier()          # wait until rank 0 has the data
# dataset = get_dataset()     # rank 0 downloads; the others find it complete
# if rank == 0:
#     dist.barrier()          # let the others go
# ```
#
# `ddp_train` wraps this in a context manager, `rank_zero_first(ctx)`,
# and loads MNIST inside it. Before training, the same job tried both
# patterns on a fake "download": 8 chunks of 64 KiB written straight into
# the file, 0.06 s apart. A real race happens or not depending on timing;
# to make the naive pattern go wrong on every run, the job forces the bad
# interleaving with two barriers inside the fake download, for this
# demonstration only: rank 0 writes its first chunk and waits, the other
# ranks run "download unless it is there" and read the file, then rank 0
# writes the rest. Each rank then checked whether the file it would load
# was complete:

# %%
race = trained["download_race"]
for name, outcome in race.items():
    print(f"{name:<16} downloaded by ranks {outcome['downloaded_by']}, incomplete file read by ranks {outcome['incomplete_on']}")
naive, guarded = race["naive"], race["rank_zero_first"]
assert naive["downloaded_by"] == [0], "naive: the file existed when the other ranks looked, so only rank 0 downloaded"
assert naive["incomplete_on"] == list(range(1, NPROC)), "naive: every other rank read the half-written file"
assert guarded["downloaded_by"] == [0], "with rank_zero_first only rank 0 should download"
assert guarded["incomplete_on"] == [], "with rank_zero_first every rank should read the complete file"

# %% [markdown]
# In the naive pattern every other rank found the file present, skipped
# the download, and read a truncated file: the torn read. (A rank that
# looks before rank 0 has created the file downloads it a second time
# instead, writing the same file at once.) With the barrier, rank 0 alone
# downloaded and every rank read the whole file. Write the file atomically
# as well (to a temporary name, then `os.replace`, as
# `helpers.checkpoint.save_checkpoint` does), so that a crash mid-download
# never leaves a partial file that looks complete. On several machines, the
# barrier guards a *shared* folder; with a local disk per machine, let local
# rank 0 of each machine download instead.

# %%
fig, ax = plt.subplots(figsize=(9, 3))
names = list(launch_seconds)
ax.barh(names, [launch_seconds[n] for n in names], color="tab:blue")
ax.set_xlabel("seconds (launch, start-up and work; 1 sample each)")
ax.set_title("Wall time of each torchrun job so far (single wall-clock samples)")
ax.invert_yaxis()
fig.tight_layout()
plt.show()

# %% [markdown]
# On this CPU the two ranks share the same 2 cores, and we did not time
# DDP against one process: it is the *mechanics* we are checking. With one
# GPU per rank the ranks compute in parallel and the gradient all-reduce is
# the extra work.
# Each bar is one wall-clock measurement of one launch (1 sample, so
# expect other programs on the machine to move it). The `ddp_train` bar
# holds more than training: the download-race demonstration and the
# spawned children of pitfall 3 (below) ran in the same job. The bars
# also show the fixed cost of a job: `collectives` does almost no work, yet
# takes seconds to start.

# %% [markdown]
# ## 5. DataParallel vs DDP
#
# `torch.nn.DataParallel(model)` is the older way to use several GPUs: **one
# process**, one Python thread per GPU. On every forward pass it copies the
# model from GPU 0 to the others, splits the batch, runs the replicas in
# threads, gathers the outputs on GPU 0, and reduces the gradients there.
# So all the Python work competes for one interpreter lock (the GIL), GPU 0
# does extra work and holds extra memory, and the model is copied again on
# every step. It works on one machine only.
#
# DDP runs **one process per GPU**: no shared GIL, no per-step model copy
# (replicas stay in sync through the averaged gradients), all-reduce
# overlapped with the backward pass, and the same program scales to many
# machines. PyTorch's documentation recommends DDP even on a single machine;
# `DataParallel` remains only for old code. (Chapter 07 met its one trace
# in practice: checkpoints whose keys start with `module.`. DDP adds the
# same prefix; save `ddp.module.state_dict()` to avoid it.)

# %% [markdown]
# ## 6. Many machines
#
# Nothing in the entry points is specific to one machine: only the launch
# changes. On each of, say, 2 machines with 4 GPUs each, run the same
# command (shown, not run here):
#
# ```bash
# torchrun --nnodes 2 --nproc-per-node 4 \
#     --rdzv-backend c10d --rdzv-endpoint head-node:29400 --rdzv-id my-job-42 \
#     --max-restarts 3 \
#     -m helpers.distributed.ddp_train --out /shared/run-42
# ```
#
# - `--nnodes 2`: machines in the job (or `1:4` for an elastic range);
#   `--nproc-per-node 4`: processes (GPUs) per machine;
# - `--rdzv-backend c10d`: the rendezvous built into torch, at
#   `--rdzv-endpoint`, the host:port of one machine all others can reach;
# - `--rdzv-id`: the same id on every machine; it tells jobs apart;
# - `--max-restarts 3`: restart the whole group up to 3 times on failure.
#
# (A comment cannot follow the `\` that continues a shell line, which is why
# the options are explained here and not beside the command.)
#
# The ranks are then 0-7 and `WORLD_SIZE=8`; `LOCAL_RANK` is 0-3 on each
# machine and picks the GPU, and `GROUP_RANK` is the machine's number. With
# the c10d rendezvous the machines' numbers are assigned as they arrive;
# with the static form (`--node-rank 0` on the head node, `1` on the other,
# plus `--master-addr head-node --master-port 29500`) you number them
# yourself. The port must be open between the machines, and
# `/shared/run-42` must be a folder every machine sees (for checkpoints).

# %% [markdown]
# ## 7. Surviving a crash: elastic restarts and checkpoints
#
# When one rank dies (a bad node, an out-of-memory error, a kill by the
# scheduler), the others find out in their next collective. With gloo the
# dead rank's closed socket is seen at once: a rank waiting for it fails
# with "Connection closed by peer" (pitfall 1 below shows the message).
# With NCCL a rank can instead hang in the collective until its timeout or
# NCCL's watchdog ends it. Meanwhile torchrun notices the dead process and
# stops the remaining ranks (sometimes before their own error, as the
# output below says), and, with
# `--max-restarts N`, starts the **whole group** again, up to N times. The
# new processes know nothing of the old ones, so the program must resume
# from a checkpoint. `helpers.distributed.elastic_train`:
#
# - every K steps, rank 0 saves model, optimizer and step with
#   `helpers.checkpoint.save_checkpoint` (atomic, checksummed), then all
#   ranks meet at a `barrier`, so every checkpoint on disk is complete;
# - at start, every rank loads the newest valid checkpoint
#   (`latest_checkpoint`) and continues from its step;
# - the batch of step s depends only on s (a generator seeded with
#   `seed + s`), so the resumed run sees exactly the batches the crashed run
#   would have seen;
# - rank 1 raises at step `FAIL_AT`, but only when
#   `TORCHELASTIC_RESTART_COUNT` is 0 (the first attempt);
# - after finishing, the ranks train the same model again from scratch with
#   no crash (the reference), and rank 0 compares the two.

# %%
if not RUN_ELASTIC:
    print("RUN_ELASTIC is False: skipping the elastic job and its checks")
else:
    elastic_dir = os.path.join(RUN_DIR, "elastic")
    ckpt_dir = os.path.join(RUN_DIR, "elastic_ckpt")
    shutil.rmtree(ckpt_dir, ignore_errors=True)  # the first attempt must start from nothing
    result = torchrun("helpers.distributed.elastic_train", "--out", elastic_dir, "--ckpt", ckpt_dir,
                      "--steps", str(ELASTIC_STEPS), "--every", str(CHECKPOINT_EVERY), "--fail-at", str(FAIL_AT),
                      "--seed", str(SEED), nproc=NPROC, max_restarts=1, timeout=LAUNCH_TIMEOUT)
    launch_seconds["elastic_train"] = result.seconds
    show(result)
    elastic = json.load(open(os.path.join(elastic_dir, "elastic.json")))
    crash = [f for f in result.failures() if f.attempt == 0]
    print(f"\nfirst attempt: rank {crash[0].rank} failed first; its traceback (last lines):")
    print("\n".join(crash[0].traceback.splitlines()[-3:]))
    others = [f for f in crash if f.rank != crash[0].rank]
    if others:
        print(f"the other rank then failed with: {sanitised(others[0].last_line)[:110]}...")
    else:
        print("the other rank left no error of its own: torchrun stopped it before its next collective failed")

# %%
if not RUN_ELASTIC:
    print("RUN_ELASTIC is False: nothing to check")
else:
    last_checkpoint = (FAIL_AT // CHECKPOINT_EVERY) * CHECKPOINT_EVERY
    assert result.returncode == 0, "the job should have finished after the restart"
    assert result.restarts == 1 and elastic["restart_count"] == 1, f"expected one restart, got {elastic['restart_count']}"
    assert crash and crash[0].rank == 1 and "crashed at step" in crash[0].last_line, "rank 1's crash should be the root cause"
    assert elastic["resumed_from"] == last_checkpoint, f"should resume from step {last_checkpoint}, not {elastic['resumed_from']}"
    assert elastic["final_step"] == ELASTIC_STEPS, f"final step {elastic['final_step']} != planned {ELASTIC_STEPS}"
    # gloo on the CPU repeats every step bit for bit; on GPUs (NCCL) the reduction order may vary, so allow rounding there
    elastic_tol = 0.0 if backend(NPROC) == "gloo" else 1e-6
    assert elastic["max_abs_diff"] <= elastic_tol, f"resumed run differs from an uninterrupted one by {elastic['max_abs_diff']:.3g}"
    print(f"restarts: {elastic['restart_count']}; resumed from step {elastic['resumed_from']}, "
          f"ran {elastic['steps_this_attempt']} more steps, final step {elastic['final_step']} of {ELASTIC_STEPS}")
    print(f"max |difference| from an uninterrupted run: {elastic['max_abs_diff']:.3g}")
    print(f"checkpoints on disk (steps): {elastic['checkpoints']}")
    _ = report.record("elastic run: restarts", elastic["restart_count"])
    _ = report.record("elastic run: final step", elastic["final_step"])
    _ = report.record("elastic run: max |param diff| vs uninterrupted", f"{elastic['max_abs_diff']:.1e}")

# %% [markdown]
# Nothing was lost: the steps between the last checkpoint and the crash
# (with the defaults, steps 41 to 45) were done again, with the same batches, and the
# final parameters equal those of a run that never crashed (exactly, with
# gloo on the CPU: asserted above). Three things
# made that possible: a checkpoint that holds *everything* the next step
# depends on (the optimizer's momentum too; with dropout, the RNG states),
# a data order that is a function of the step, and a checkpoint that is
# complete before anyone can crash past it (atomic write, then barrier).
# A restart costs a new start-up of every rank plus the lost steps, so pick
# K to balance the cost of saving against the work you are willing to redo.

# %% [markdown]
# ## Pitfalls
#
# ### 1. A rank fails and there are no restarts
#
# `helpers.distributed.fail_rank --fail-rank 1` makes rank 1 raise while
# rank 0 waits in a `barrier`. Rank 0 then fails too ("Connection closed by
# peer"), which is a *consequence*. The launcher reads each rank's error
# file (written by `@record`) and names the rank that failed **first**, with
# its traceback:

# %%
if not RUN_FAILING_JOB:
    print("RUN_FAILING_JOB is False: skipping the job with a failing rank")
else:
    failed = None
    try:
        torchrun("helpers.distributed.fail_rank", "--fail-rank", "1", nproc=NPROC, timeout=LAUNCH_TIMEOUT)
    except DistributedRunError as err:
        failed = err
        lines = sanitised(str(err)).splitlines()
        print(f"{type(err).__name__}: " + "\n".join(lines[:2] + ["    ..."] + lines[-4:]))

# %% [markdown]
# Look for the root cause, not the last error: in a collective, every other
# rank fails *because* one did. The launcher also checked that no process
# outlived the job; we can confirm it for each process it saw (torchrun and
# each rank, which torchrun starts in a process group of its own):

# %%
def process_is_gone(pid):
    """True if no process with this id runs any more (checked in /proc; a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


if RUN_FAILING_JOB:
    assert failed is not None, "the job with a failing rank should have raised DistributedRunError"
    assert failed.root_cause.rank == 1, f"rank 1 should be named as the root cause, not {failed.root_cause.rank}"
    assert "shard 1 is corrupt" in str(failed), "the message should include rank 1's own error"
    left = [pid for pid in failed.result.pids if not process_is_gone(pid)]
    assert not left, f"processes left behind: {left}"
    print(f"root cause: rank {failed.root_cause.rank}: {failed.root_cause.last_line}")
    print(f"processes the launcher saw: {len(failed.result.pids)}; still running: {len(left)}")

# %% [markdown]
# The fix is in the rank's code, so read its traceback (the full logs are in
# the folder the message names). For failures that are *not* bugs (a lost
# machine, a preempted job), launch with `max_restarts` and checkpoints, as
# in section 7. And keep the `timeout` of `init_process_group` bounded: a
# rank that waits forever for a dead peer is worse than one that fails.
#
# ### 2. Spawning a function defined in the notebook
#
# `mp.spawn(train, nprocs=2)` pickles `train` for each new process. We can
# watch what pickle stores, and what a fresh Python process makes of it (the
# same thing a spawned process does first):

# %%
def train(rank):
    return rank * rank


payload = pickle.dumps(train)
print("what pickle stored:", [part for part in (b"__main__", b"train") if part in payload], f"({len(payload)} bytes, no code)")
child = subprocess.run([sys.executable, "-c", "import pickle, sys; pickle.loads(sys.stdin.buffer.read())"],
                       input=payload, capture_output=True, timeout=60)
error_line = child.stderr.decode().strip().splitlines()[-1]  # the child's own "Type: message" line
assert child.returncode != 0 and "Can't get attribute 'train'" in error_line, child.stderr.decode()
print("in the new process:", error_line)

# %% [markdown]
# The new process has no `train` in its `__main__`. The fix: put the function
# in a module and import it. A function from `helpers` pickles as its
# module path, and a fresh process (with the course on its path) finds it:

# %%
payload = pickle.dumps(rel)  # helpers.paths.rel
child = subprocess.run([sys.executable, "-c", "import pickle, sys; print(pickle.loads(sys.stdin.buffer.read()))"],
                       input=payload, capture_output=True, timeout=60, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
assert child.returncode == 0, child.stderr.decode()
print("unpickled in a new process:", child.stdout.decode().split(" at ")[0].strip() + ">")

# %% [markdown]
# ### 3. An `mp.spawn` script under `torchrun`
#
# Many tutorials start their ranks themselves: `mp.spawn(main, args=(W,),
# nprocs=W)` starts W processes, each calling `main(rank, W)`. `torchrun`
# *also* starts the processes: it runs W copies of the script. Run such a
# script under `torchrun --nproc-per-node W`, and each of the W copies
# spawns W more: W x W workers, whose ranks (0..W-1 from `mp.spawn`'s
# index) repeat once per copy, all meeting at the `MASTER_PORT` torchrun
# exported. The `ddp_train` job of section 4 did exactly that before it
# started (each rank launched 2 children with
# `torch.multiprocessing.start_processes`, the function `mp.spawn` calls,
# with the cheaper `"fork"` start method); each child recorded its process
# id, its parent and the `RANK` it inherited:

# %%
spawned = trained["spawned"]
children, parents = spawned["children"], spawned["torchrun_ranks"]
for c in sorted(children, key=lambda c: (c["inherited_RANK"], c["index"])):
    port = "the ranks' own" if c["inherited_MASTER_PORT"] == spawned["master_port"] else "another"
    print(f"spawned child: parent is torchrun's rank {parents.index(c['parent'])}, inherited RANK={c['inherited_RANK']}, "
          f"MASTER_PORT {port}, mp.spawn index {c['index']}")
print(f"torchrun started {len(parents)} processes; they started {len(children)} more, "
      f"with {len({c['pid'] for c in children})} distinct process ids")
assert len({c["pid"] for c in children}) == NPROC * NPROC, f"expected {NPROC} x {NPROC} spawned processes"
assert {c["parent"] for c in children} == set(parents), "every torchrun rank should have spawned its own children"
assert all(c["inherited_RANK"] == str(parents.index(c["parent"])) for c in children), "each child inherits its parent's RANK"
assert sorted(c["index"] for c in children) == sorted(list(range(NPROC)) * NPROC), "each copy reuses the indices 0..W-1"
assert {c["inherited_MASTER_PORT"] for c in children} == {spawned["master_port"]}, "all children inherit torchrun's MASTER_PORT"
_ = report.record(f"processes spawned by an mp.spawn-style script under torchrun ({NPROC} ranks)", len(children))

# %% [markdown]
# The children here only recorded themselves and exited; we did not let
# them call `init_process_group`, since inside this job they would meet at
# the real ranks' rendezvous. What W x W processes claiming W ranks at one
# address then do depends on the script and on timing (a process can fail
# to bind a port another one holds, or duplicate ranks can wait for each
# other until the timeout); we did not measure it. So a script is written
# for one launcher or the other: under `torchrun`,
# read `RANK`, `LOCAL_RANK` and `WORLD_SIZE` from the environment and do
# not spawn; with `mp.spawn`, run it with plain `python`.
#
# ### 4. Forgetting `set_epoch`
#
# Shown in section 4: nothing fails, but each rank replays the same order
# every epoch. And two smaller ones:
#
# - **Printing or saving on every rank**: W copies of each line, W writers
#   racing on one file. Guard with `if rank == 0:`, and write atomically.
# - **Rank-dependent control flow**: if only rank 0 calls a collective (say
#   an `all_reduce` inside `if rank == 0:`), the others never join it, and
#   rank 0 waits until the timeout. Every rank must call every collective,
#   in the same order, with tensors of the same shape.

# %% [markdown]
# ## Exercises
#
# Both run in this process: they compute what the ranks of a job would get.
#
# **1.** Write `sampler_indices(n, world_size, rank)`: the list of indices
# (a Python `list` of `int`s)
# `DistributedSampler(dataset of length n, num_replicas=world_size,
# rank=rank, shuffle=False, drop_last=False)` yields. (Padding and
# round-robin dealing, as described in section 4; careful when
# `n < world_size`.)

# %%
def sampler_indices(n, world_size, rank):
    raise NotImplementedError("write sampler_indices")


result = check("25.sampler_indices", sampler_indices)

# %% [markdown]
# **2.** Write `ddp_gradient(model, batches, loss_fn)`: given one `(x, y)`
# batch per rank (they may differ in size), return the gradients (one tensor
# per parameter, in `model.parameters()` order) that every rank holds after
# DDP's backward pass. The parameters may already hold a `.grad` from an
# earlier step: return the gradient of these batches alone.
# `torch.autograd.grad(loss, params)` returns gradients without touching
# `.grad`.

# %%
def ddp_gradient(model, batches, loss_fn):
    raise NotImplementedError("write ddp_gradient")


result = check("25.ddp_gradient", ddp_gradient)

# %% [markdown]
# ## Summary
#
# - A distributed job is W processes; each has a **rank**, knows the **world
#   size**, and uses its **local rank** to pick its GPU. They find each other
#   at a **rendezvous** (`MASTER_ADDR`/`MASTER_PORT`); `torchrun` sets all of
#   this in their environment. A free port on loopback keeps two jobs apart.
# - Notebooks launch **modules** (`helpers.distributed.*`) under torchrun:
#   a function defined in a notebook is pickled by name and cannot be found
#   by another process.
# - Collectives (`all_reduce`, `broadcast`, `all_gather`, `reduce_scatter`,
#   `barrier`) are called by every rank; gloo runs them on CPU, NCCL on GPU,
#   chosen automatically.
# - DDP broadcasts the initial weights and **averages gradients** in
#   backward, so W ranks with batch B take the step of one process with
#   batch WB (checked: the parameters agree to float32 rounding). Summed losses,
#   per-rank BatchNorm and dropout break the equality.
# - Gradient accumulation under DDP: `no_sync()` on all but the last
#   micro-batch cut the all-reduces from K to 1 per step (counted with a
#   comm hook), with the large-batch gradients either way.
# - The linear scaling rule (Goyal et al. 2017): batch x k, learning rate
#   x k, with a warm-up; it tracked k small SGD steps while the steps were
#   small, and stopped tracking them when they were large.
# - `DistributedSampler` gives each rank its own part of the data; call
#   `set_epoch(epoch)` or every epoch repeats the same order. Rank 0
#   downloads first while the others wait at a barrier; without it (the
#   race forced to happen), the other rank read a half-written file.
# - An `mp.spawn` script under `torchrun` started N x N processes: use one
#   launcher, not both.
# - With `max_restarts` and checkpoints a job survives a crashed worker and
#   ends with the parameters of a run that never crashed. A failing job
#   without restarts raises `DistributedRunError` naming the first rank that
#   failed, and leaves no process behind.
#
# **Next:** chapter 26 keeps the same launcher and entry-point pattern but
# stops replicating the model: FSDP2 shards parameters, gradients and
# optimizer state across ranks (built on `all_gather` and `reduce_scatter`),
# tensor parallelism splits single layers, and distributed checkpoints save
# and load sharded state.

# %%
shutil.rmtree(RUN_DIR, ignore_errors=True)  # the per-rank logs stay under build/distributed/<entry point>/
print(f"notebook ran in {time.perf_counter() - notebook_start:.0f} s")
report.finish()
