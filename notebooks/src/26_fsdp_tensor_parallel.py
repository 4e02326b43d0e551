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
# # 26 · FSDP2, tensor parallelism and distributed checkpoints
#
# Chapter 25's DDP keeps a **full copy** of the model, its gradients and its
# optimizer state on every process. That stops working when the model no
# longer fits on one device. This chapter splits the model itself across
# processes, in the two ways large models are trained today:
#
# - **FSDP** (fully sharded data parallel): each rank stores only a slice of
#   every parameter, gradient and optimizer buffer, and gathers the full
#   weights of one layer just before it runs;
# - **tensor parallelism** (TP): each rank computes only a slice of every
#   matrix multiplication, and the ranks exchange partial results.
#
# Both are built on one abstraction, the **DTensor**: a tensor together
# with a description of how it is laid out over a grid of processes (a
# **device mesh**). We look at DTensor first, then FSDP2, TP, **pipeline
# parallelism** (the model cut by layers), FSDP and TP at once on a 2-D
# mesh, and finally **distributed checkpoints** (DCP), which save a sharded
# model at one world size and load it at another.
#
# **What you will learn**
# - `init_device_mesh` and DTensor placements (`Shard(0)`, `Shard(1)`,
#   `Replicate()`), drawn rank by rank, and `full_tensor()`;
# - FSDP2's `fully_shard` with a `MixedPrecisionPolicy`; checking it against
#   one process with SGD, and negative controls that the check must fail;
# - how many bytes of full-size weights, gradients and communication
#   buffers a rank really holds during forward and backward (measured), and
#   what `reshard_after_forward` changes;
# - tensor parallelism with `ColwiseParallel` and `RowwiseParallel` for an
#   MLP and a transformer block, and why column-then-row needs one all-reduce;
# - pipeline parallelism with `torch.distributed.pipelining` (GPipe and 1F1B
#   schedules on 2 stages);
# - a 2-D mesh: tensor parallelism inside, FSDP across;
# - `torch.distributed.checkpoint`: save sharded at 2 processes, load in 1
#   and in 4;
# - the legacy forms (FSDP1, `torch.distributed._tensor`): the FSDP1 → FSDP2
#   mapping of options and what 2.14 warns about.
#
# **Prerequisites:** chapter 25 (process groups, `torchrun`, DDP, the
# course launcher `helpers.distributed.launch.torchrun`), chapter 09
# (transformer blocks) and chapter 14 (state dicts).
#
# **Estimated time:** 90 minutes.

# %% tags=["parameters"]
BATCH = 256  # MNIST images in the FSDP batch, split evenly over the ranks
FSDP_STEPS = 3  # optimizer steps of each FSDP / DDP run (the AdamW runs and the SGD runs)
SGD_LR = 0.1  # learning rate of the plain-SGD runs that check equality (SGD shows a wrong gradient scale; Adam hides it)
HIDDEN = (256, 128)  # hidden widths of the MLP that FSDP shards (any widths: the memory checks use FSDP's padded sizes)
MATRIX_SHAPE = (5, 4)  # the small matrix whose placements we draw (5 rows: an uneven split on 2 ranks)
TP_D_MODEL = 32  # width of the tensor-parallel transformer block (its 4 heads split over the ranks)
PIPELINE_MICROBATCHES = 4  # microbatches of the 2-stage pipeline (its batch is 16)
RUN_2D = True  # run the 4-process job: FSDP x TP, and the checkpoint loaded at world size 4 (the slowest launch)
MESH_2D_STEPS = 2  # SGD steps on the 2-D mesh
PARALLEL_TOL = 1e-5  # largest |difference| allowed between a float32 parallel run and one process
BF16_LOSS_TOL = 0.05  # largest |loss difference| allowed between the bfloat16 FSDP run and float32
RUN_FAILING_JOB = True  # launch the job that fails on purpose in Pitfalls (chapter 25 shows failing jobs in depth)
LAUNCH_TIMEOUT = 300  # seconds before a launched job is stopped
SEED = 0

# %% [markdown]
# ## Setup
#
# Every distributed program in this chapter is a small module in
# `helpers/distributed/` (`mesh_placements`, `fsdp_memory`, `tp_check`,
# `pipeline_check`, `mesh_2d`): other processes cannot import a function defined in a
# notebook. `torchrun(...)` from chapter 25 starts it on 2 (or 4) local
# processes with the gloo backend (NCCL where there is one GPU per rank),
# waits for it and returns what it printed; each job writes the values the
# notebook checks to JSON or `torch.save` files under `build/`. Read the
# modules next to this notebook: the code that matters is short.

# %%
import inspect
import json
import math
import shutil
import subprocess
import sys
import time
import warnings

import matplotlib.pyplot as plt
import torch
import torch.distributed as dist
import torch.distributed._composable as composable  # FSDP1's NO_SHARD replacement lives here (the name check below)
import torch.distributed.checkpoint as dcp
import torch.distributed.fsdp as fsdp_api
from matplotlib.patches import Rectangle
from torch.distributed.checkpoint import state_dict as dcp_state_dict
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import wrap as fsdp1_wrap
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

from helpers.data import mnist
from helpers.device import pick_device, seed_everything
from helpers.distributed import backend
from helpers.distributed.launch import DistributedRunError, torchrun
from helpers.exercises import check, solution  # noqa: F401  (solution: for when you are stuck)
from helpers.models import MLP
from helpers.paths import build_dir, rel
from helpers.report import ChapterReport

generator = seed_everything(SEED)
device = pick_device()
report = ChapterReport("26_fsdp_tensor_parallel")
OUT = build_dir() / "ch26"
OUT.mkdir(parents=True, exist_ok=True)
launch_seconds = {}  # job name -> wall seconds of its launch (one sample each)
# backend(n): nccl only when there is a GPU for each of the n local ranks, else gloo; the jobs below use 2 and 4 ranks
print(f"torch {torch.__version__}, this notebook on {device}; jobs on 2 ranks use {backend(2)}, on 4 ranks {backend(4)}")
print("results go to", rel(OUT))


def launch(module, *args, nproc=2):
    """Run helpers.distributed.<module> on nproc ranks; print rank 0's lines; keep the wall time."""
    result = torchrun(f"helpers.distributed.{module}", *args, nproc=nproc, timeout=LAUNCH_TIMEOUT)
    launch_seconds[module] = result.seconds
    print("\n".join(f"[rank 0] {line}" for line in result.rank_lines(0)))
    return result


# %% [markdown]
# ## Device meshes and DTensor placements
#
# A **device mesh** (`torch.distributed.device_mesh.DeviceMesh`) arranges the
# ranks of a job in a grid: `init_device_mesh("cpu", (2,))` is a row of two,
# `init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))` a 2×2 grid
# whose dimensions have names. A **DTensor**
# (`torch.distributed.tensor.DTensor`) is a tensor with a global shape, a
# mesh, and one **placement** per mesh dimension that says how the global
# tensor is laid out along it:
#
# - `Shard(d)`: split along tensor dimension `d`; each rank stores one piece;
# - `Replicate()`: every rank stores the whole tensor;
# - `Partial()`: every rank stores a tensor of the full shape, and the true
#   value is their sum (what a matrix multiply leaves before its all-reduce).
#
# `distribute_tensor(t, mesh, [Shard(0)])` turns a full tensor (the same on
# every rank) into a DTensor; `dt.to_local()` is this rank's piece, and
# `dt.full_tensor()` gathers the pieces back into the full tensor on every
# rank. The job below distributes a small 5×4 matrix three ways on 2
# processes; every rank reports its local piece and where it starts.

# %%
placements_dir = OUT / "placements"
result = launch("mesh_placements", "--out", str(placements_dir), "--rows", str(MATRIX_SHAPE[0]), "--cols", str(MATRIX_SHAPE[1]))
placed = json.loads((placements_dir / "placements.json").read_text())
print(f"\nlaunch took {result.seconds:.1f} s (1 sample); mesh: {placed['mesh']}")

# %% [markdown]
# `torch.distributed.tensor.debug.visualize_sharding(dt)` prints such a
# layout as a table, but needs the `tabulate` or `rich` package, which the
# course does not install. So we draw it from what each rank reported: each
# cell of the matrix is coloured by the rank that stores it; under
# `Replicate()` both ranks store every cell.

# %%
RANK_COLOURS = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
PLACEMENTS = ("Shard(0)", "Shard(1)", "Replicate()")
fig, axes = plt.subplots(1, 3, figsize=(9, 3.2))
for ax, label in zip(axes, PLACEMENTS):
    info = placed["placements"][label]
    rows, cols = placed["rows"], placed["cols"]
    for shard in info["ranks"]:
        (r0, c0), (nr, nc) = shard["offset"], shard["shape"]
        replicated = label == "Replicate()"
        for i in range(nr):
            for j in range(nc):
                width = 1 / placed["world"] if replicated else 1  # replicated: each rank fills a strip of the cell
                x = c0 + j + (shard["rank"] * width if replicated else 0)
                ax.add_patch(Rectangle((x, r0 + i), width, 1, color=RANK_COLOURS[shard["rank"]], alpha=0.55))
    for i in range(rows):
        for j in range(cols):
            ax.text(j + 0.5, i + 0.5, int(placed["matrix"][i][j]), ha="center", va="center", fontsize=8)
    ax.set(xlim=(0, cols), ylim=(rows, 0), xticks=[], yticks=[], title=label, aspect="equal")
handles = [Rectangle((0, 0), 1, 1, color=RANK_COLOURS[r], alpha=0.55) for r in range(placed["world"])]
fig.legend(handles, [f"rank {r}" for r in range(placed["world"])], loc="lower center", ncol=placed["world"])
fig.suptitle("Which rank stores which cell of the matrix")
fig.tight_layout(rect=(0, 0.08, 1, 1))
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
for label in PLACEMENTS:
    info = placed["placements"][label]
    shards = ", ".join(f"rank {s['rank']}: {tuple(s['shape'])} at {tuple(s['offset'])}" for s in info["ranks"])
    print(f"{label:12} global {tuple(info['dtensor_shape'])} -> {shards}; full_tensor() == original: {info['full_tensor_equal']}")

# %%
for label, info in placed["placements"].items():
    assert info["full_tensor_equal"], f"{label}: full_tensor() did not give back the original matrix"
    assert info["dtensor_shape"] == list(MATRIX_SHAPE), f"{label}: a DTensor's shape is the global shape, got {info['dtensor_shape']}"
rows_per_rank = [s["shape"][0] for s in placed["placements"]["Shard(0)"]["ranks"]]
assert sum(rows_per_rank) == MATRIX_SHAPE[0], f"the Shard(0) pieces should cover all rows once, got {rows_per_rank}"
assert rows_per_rank == [len(c) for c in torch.arange(MATRIX_SHAPE[0]).chunk(2)], "Shard(0) should split like torch.chunk"

# %% [markdown]
# Five rows on two ranks do not split evenly: `Shard` follows `torch.chunk`,
# so rank 0 gets `ceil(5 / 2) = 3` rows and rank 1 the remaining 2. A
# DTensor's `.shape` is always the *global* shape; only `to_local()` shows
# the piece. The first exercise asks you to predict these pieces.

# %% [markdown]
# ## FSDP2: `fully_shard`
#
# DDP replicates everything. For training with AdamW in float32 each
# parameter element costs 16 bytes on **every** rank: 4 for the weight, 4
# for its gradient, 8 for AdamW's two moment buffers (`exp_avg`,
# `exp_avg_sq`). (DDP also keeps its gradient buckets for the all-reduce,
# another 4 bytes per element unless `gradient_as_bucket_view=True`; the
# counts below include only the four tensors.) **FSDP** (Zhao et al. 2023,
# after ZeRO by Rajbhandari et al. 2020) shards all of them: each rank keeps
# 1/world of every tensor and, wrapped layer by layer, holds a layer's full
# weights only around its forward and its backward, and the layer's full
# gradients only until they are reduce-scattered (measured below).
#
# `torch.distributed.fsdp.fully_shard(module)` (FSDP2) does this in place:
# it replaces each parameter of `module` with a DTensor sharded `Shard(0)`
# over the mesh, and adds hooks that
#
# 1. before the module's forward, **all-gather** its parameters into full
#    tensors (and free them again afterwards),
# 2. before its backward, all-gather them again (and start gathering the
#    unit that backward needs next: *prefetching*),
# 3. after its backward, **reduce-scatter** the gradients: sum them over the
#    ranks and leave each rank only its own shard, divided by the world size.
#
# The optimizer is built after `fully_shard`, on the sharded parameters, so
# its state is sharded too. Calling `fully_shard` on each layer first and on
# the root last makes each layer its own unit, so the forward gathers one
# layer at a time (the backward one plus the prefetched one):
#
# ```python
# for layer in model.modules():
#     if isinstance(layer, nn.Linear):
#         fully_shard(layer, mp_policy=policy)
# fully_shard(model, mp_policy=policy)
# optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
# ```
#
# `MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)`
# gathers the parameters in bfloat16 and computes forward and backward in
# it, but reduces gradients in float32 and keeps the sharded parameters (the
# ones the optimizer updates) in float32. Unlike `torch.autocast` (chapter
# 15) it casts at module boundaries, not per operation.
#
# The job `fsdp_memory` trains the chapter-05 MLP on the same batch of real
# MNIST images, each distributed run with every rank on half of the batch:
#
# - with **AdamW** (what large models are trained with): one process on the
#   whole batch (the reference), DDP, FSDP in float32 and FSDP with the
#   bfloat16 policy. These runs give the bytes each rank stores, the
#   bfloat16 comparison and the checkpoint of the DCP section;
# - with **plain SGD** (no momentum), for the equality checks. SGD's update
#   is `lr * gradient`, so a gradient that is wrong by any factor moves the
#   weights by that factor. Adam's update `m / (sqrt(v) + eps)` divides a
#   constant factor out, except through `eps`: with AdamW, a gradient summed
#   over the ranks instead of averaged (twice too large on 2 ranks) shows
#   only in the weights whose gradients are about as small as `eps` (the
#   table below says how many did here). The SGD runs also measure how many
#   bytes of full-size tensors each rank holds during the forward and the
#   backward of their first step.
#
# The notebook picks the batch and hands it over as a file.

# %%
train_set = mnist(train=True)
images = train_set.data[:BATCH].float().div(255).sub(0.1307).div(0.3081).reshape(BATCH, -1)  # chapter 05's normalisation
fsdp_dir = OUT / "fsdp"
fsdp_dir.mkdir(parents=True, exist_ok=True)
torch.save({"x": images, "y": train_set.targets[:BATCH].clone()}, fsdp_dir / "batch.pt")
checkpoint_dir = OUT / "checkpoint_world2"
shutil.rmtree(checkpoint_dir, ignore_errors=True)  # a re-run starts from an empty folder (DCP would overwrite with a warning)
result = launch(
    "fsdp_memory", "--data", str(fsdp_dir / "batch.pt"), "--out", str(fsdp_dir), "--steps", str(FSDP_STEPS),
    "--hidden", *map(str, HIDDEN), "--checkpoint", str(checkpoint_dir), "--sgd-lr", str(SGD_LR), "--tol", str(PARALLEL_TOL),
)
fsdp = json.loads((fsdp_dir / "fsdp.json").read_text())
sgd_runs = fsdp["sgd"]
print(f"\nlaunch took {result.seconds:.1f} s (1 sample)")

# %% [markdown]
# The parameters of the FSDP model are DTensors sharded on dimension 0; each
# rank's piece is half of each weight (`nn.Linear.weight` is
# `[out_features, in_features]`):

# %%
# NBVAL_CHECK_OUTPUT
print("parameter type after fully_shard:", fsdp["fsdp_fp32"]["param_type"])
for name, (placements, shape, local) in fsdp["fsdp_fp32"]["placements"].items():
    print(f"{name:13} {placements:18} global {tuple(shape)!s:11} local {tuple(local)}")
print("sharded parameters under the bfloat16 policy are stored as", fsdp["fsdp_bf16"]["param_dtype"])

# %% [markdown]
# ### Equal to one process, and two bugs the same check catches
#
# Each SGD run compares, after its first `backward()`, every parameter's
# full gradient (FSDP: gathered from the shards with `full_tensor()`) with
# the one-process gradient of the whole batch, and after `FSDP_STEPS` steps
# every full parameter. Two runs are wrong on purpose (**negative
# controls**): if the comparison passed them, it would prove nothing.
#
# - `fsdp_sum`: FSDP with `set_force_sum_reduction_for_comms(True)` and
#   `set_gradient_divide_factor(1.0)` on every unit, so the reduce-scatter
#   sums the ranks' gradients and divides by 1 instead of by the world size;
# - `no_allreduce`: each rank trains a plain copy on its half of the batch
#   and never communicates.
#
# `grad scale` is the least-squares factor `s` in `grad ≈ s · reference grad`
# over all elements: 1 for a correct run, the world size for a sum.

# %%
print(f"SGD (lr {fsdp['sgd_lr']}), {fsdp['steps']} steps; tolerance {PARALLEL_TOL:.0e}")
print(f"{'run':15}{'max |grad diff|':>17}{'grad scale':>12}{'max |param diff|':>18}{'params off by > tol':>21}")
for name in ("ddp", "fsdp", "fsdp_keep", "fsdp_root_only", "fsdp_sum", "no_allreduce"):
    r = sgd_runs[name]
    print(f"{name:15}{r['grad_diff']:>17.1e}{r['grad_scale']:>12.3f}{r['max_diff']:>18.1e}{r['fraction_over_tol']:>20.1%}")
adamw_sum, adamw_small = fsdp["fsdp_sum_adamw"], fsdp["fsdp_sum_adamw_small_eps"]
adamw_sum_loss_gap = max(abs(a - b) for a, b in zip(adamw_sum["losses"], fsdp["reference"]["losses"]))
print(f"\nthe same sum under AdamW (eps 1e-08): max |param diff| {adamw_sum['max_diff']:.1e}, params off by > tol "
      f"{adamw_sum['fraction_over_tol']:.2%}, max |loss diff| {adamw_sum_loss_gap:.1e} (loss tolerance {10 * PARALLEL_TOL:.0e})")
print(f"the same sum under AdamW with eps {adamw_small['eps']:.0e}: max |param diff| {adamw_small['max_diff']:.1e}, "
      f"params off by > tol {adamw_small['fraction_over_tol']:.2%}: the parameter check "
      f"{'passes' if adamw_small['max_diff'] < PARALLEL_TOL else 'fails'} a wrong reduction")
bf16_gap = max(abs(a - b) for a, b in zip(fsdp["fsdp_bf16"]["losses"], fsdp["reference"]["losses"]))
print(f"AdamW runs: DDP max |param diff| {fsdp['ddp']['max_diff']:.1e}, FSDP float32 {fsdp['fsdp_fp32']['max_diff']:.1e}, "
      f"FSDP bfloat16 max |loss diff| {bf16_gap:.1e}")

# %%
for name in ("ddp", "fsdp", "fsdp_keep", "fsdp_root_only"):
    r = sgd_runs[name]
    assert r["grad_diff"] < PARALLEL_TOL, f"{name}: the first gradients differ from one process by {r['grad_diff']:.1e}"
    assert r["max_diff"] < PARALLEL_TOL, f"{name}: the parameters after SGD differ from one process by {r['max_diff']:.1e}"
    assert abs(r["grad_scale"] - 1) < 1e-4, f"{name}: the gradients are {r['grad_scale']:.4f} x the reference's, not 1 x"
for name in ("fsdp_sum", "no_allreduce"):  # the negative controls: the same comparison must fail them
    r = sgd_runs[name]
    assert r["grad_diff"] > 100 * PARALLEL_TOL, f"{name}: a wrong reduction passed the gradient check ({r['grad_diff']:.1e})"
    assert r["max_diff"] > 100 * PARALLEL_TOL, f"{name}: a wrong reduction passed the parameter check ({r['max_diff']:.1e})"
assert abs(sgd_runs["fsdp_sum"]["grad_scale"] - fsdp["world"]) < 1e-3, "summing over the ranks should scale the gradient by the world size"
assert sgd_runs["fsdp_sum"]["fraction_over_tol"] > 0.5, "under SGD a doubled gradient should move most parameters"
assert adamw_sum["fraction_over_tol"] < 0.05, "AdamW was expected to hide a constant gradient factor in almost every parameter"
# Whether the few weights with gradients near eps give the sum away depends on the run (the model, the
# steps): printed, not asserted. The default run's first AdamW line shows that they did.
print("AdamW's parameter check", "caught" if adamw_sum["max_diff"] > PARALLEL_TOL else "missed", "the sum in this run")
assert adamw_sum_loss_gap < 10 * PARALLEL_TOL, f"the AdamW sum run's losses differ by {adamw_sum_loss_gap:.1e}: a loss check would catch it"
assert adamw_small["max_diff"] < PARALLEL_TOL, \
    f"with eps {adamw_small['eps']:.0e} the sum was expected to pass the parameter check, but it is off by {adamw_small['max_diff']:.1e}"
for name in ("ddp", "fsdp_fp32"):  # the AdamW runs of the same job
    assert fsdp[name]["max_diff"] < PARALLEL_TOL, f"{name} (AdamW) differs from one process by {fsdp[name]['max_diff']:.2e}"
assert bf16_gap < BF16_LOSS_TOL, f"the bfloat16 run's losses are {bf16_gap:.3f} away from float32's"
_ = report.record("FSDP SGD max |grad diff| vs 1 process", float(f"{sgd_runs['fsdp']['grad_diff']:.2g}"), digits=12)
_ = report.record("FSDP sum-not-mean max |grad diff| (negative control)", float(f"{sgd_runs['fsdp_sum']['grad_diff']:.2g}"), digits=12)
_ = report.record("FSDP bf16 max |loss diff| vs fp32", float(f"{bf16_gap:.2g}"), digits=12)

# %% [markdown]
# How to read the table:
#
# - **Correct runs.** DDP and the three FSDP variants agree with one
#   process to float rounding (a few 1e-9, far below the 1e-5 tolerance),
#   in the gradients and in the weights after the SGD steps: each rank's
#   gradient of its half-batch mean loss, averaged over the ranks, is the
#   gradient of the whole batch's mean loss. Where the weights are gathered
#   (the three FSDP variants differ only in that) changes nothing.
# - **The negative controls fail.** The sum doubles every gradient (grad
#   scale 2.000 on 2 ranks) and SGD turns that into weights off by orders of
#   magnitude more than the tolerance; without the all-reduce each rank
#   follows its own half-batch gradient.
# - **Why not AdamW.** Doubling the gradient doubles `m` and `sqrt(v)`, so
#   AdamW's update `2m / (2 sqrt(v) + eps)` is the correct one with `eps`
#   halved: the sum acts only where a gradient is about as small as `eps`
#   (1e-8). In the default run that was enough to give it away, through few
#   weights: a small fraction of them, those whose gradients are near `eps`,
#   moved by more than `PARALLEL_TOL` (the fraction and the largest
#   difference are on the first AdamW line; the verdict line printed with
#   the checks says whether your run caught it), while the losses changed by less than the loss
#   tolerance the assert uses, `10 * PARALLEL_TOL`. With `eps = 1e-12` the
#   same wrong reduction leaves every weight within `PARALLEL_TOL` (the
#   second AdamW line, asserted): the check passes it. SGD is the check here
#   because it does not hinge on `eps`: twice the gradient is twice every
#   update.
# - **bfloat16.** With the mixed-precision policy the losses agree only to
#   a few digits (the gap is on the last line printed): bfloat16 keeps
#   8 significant bits, so forward and backward are rounded, even though the
#   parameters and the gradient reduction stay float32. On a GPU bfloat16 is
#   the usual setting (it halves the all-gather traffic and uses the tensor
#   cores); on a CPU it is here only to show the API.

# %% [markdown]
# ### What each rank stores, and what it holds during forward and backward
#
# First the layout: the bytes of the local pieces each rank keeps between
# steps (parameter shards, gradient shards, AdamW's two moment buffers),
# added up from the tensors' sizes in the AdamW runs. That FSDP's sum is
# 1/world of DDP's follows from the placements above (it holds by
# construction, so it is printed, not claimed); the second exercise derives
# it.

# %%
kinds = ("params", "grads", "optim_state")
ddp_bytes = [sum(r[k] for k in kinds) for r in fsdp["ddp"]["bytes"]]
fsdp_bytes = [sum(r[k] for k in kinds) for r in fsdp["fsdp_fp32"]["bytes"]]
print(f"{fsdp['n_params']:,} parameters, {fsdp['world']} ranks")
print(f"{'':6}{'params':>12}{'grads':>12}{'AdamW state':>14}{'total':>12}")
for name in ("ddp", "fsdp_fp32"):
    for rank, r in enumerate(fsdp[name]["bytes"]):
        print(f"{name.split('_')[0].upper():5} rank {rank}: " + "".join(f"{r[k] / 1e6:>10.3f} MB" for k in kinds)
              + f"{sum(r[k] for k in kinds) / 1e6:>10.3f} MB")
print(f"FSDP / DDP bytes kept per rank (the layout): {max(fsdp_bytes) / max(ddp_bytes):.4f} (1 / world = {1 / fsdp['world']:.4f})")

# %% [markdown]
# A sum of shard sizes cannot show what FSDP costs in memory *while it
# runs*: to compute a layer, a rank needs that layer's full weights, and in
# backward it also produces the layer's full gradients. So the SGD runs
# **measure** it, in their first step. `UnshardedBytes` in
# `helpers/distributed/fsdp_memory.py` counts the storages of three kinds of
# full-size tensors alive on rank 0:
#
# - **params**: the unsharded (plain, non-DTensor) parameters. FSDP frees
#   one by resizing its storage to 0 bytes, so the count is what is really
#   allocated, with FSDP's padding (dimension 0 rounded up to a multiple of
#   the world size);
# - **grads**: the gradients of those unsharded parameters, which exist
#   from the moment autograd writes them until the unit's reduce-scatter;
# - **buffers**: FSDP's flat communication buffers, the all-gather outputs
#   and the reduce-scatter inputs it still holds. These are read from
#   FSDP2's private state (`FSDPState._fsdp_param_groups`, `_comm_ctx`),
#   which may change between releases.
#
# It samples them before and after each `Linear`'s forward (hooks
# registered after `fully_shard`, so they run after FSDP's own), between
# forward and backward, when each layer's output gradient arrives (a tensor
# hook that runs after FSDP's pre-backward hook), when autograd has written
# each parameter's gradient (a post-accumulate-grad hook, before FSDP's
# post-backward reduce-scatter), and after the backward. Activations are not
# counted. On GPUs the usual measurement is `torch.cuda.max_memory_allocated()`
# on each rank, which counts everything; this count isolates what FSDP
# gathers. Three FSDP variants:
#
# - `fsdp`: `fully_shard` on each `Linear` and on the root, with the default
#   `reshard_after_forward=None`, which means `True` for every unit except
#   the root: a layer is freed right after its forward and gathered again
#   for its backward (FSDP1's `FULL_SHARD`, ZeRO-3);
# - `fsdp_keep`: the same with `reshard_after_forward=False`: the gathered
#   weights stay until the backward has used them, which saves the second
#   all-gather and costs memory (FSDP1's `SHARD_GRAD_OP`, ZeRO-2);
# - `fsdp_root_only`: `fully_shard` on the root only: one unit, the whole
#   model gathered at once.

# %%
param_bytes, layer_bytes = fsdp["param_bytes"], fsdp["layer_bytes"]
padded = fsdp["padded_layer_bytes"]  # what FSDP allocates for a gathered layer: dim 0 padded to a multiple of the world size
padded_param_bytes = sum(padded.values())
measured_runs = ("ddp", "fsdp", "fsdp_keep", "fsdp_root_only")
timeline = {name: sgd_runs[name]["unsharded"] for name in measured_runs}  # per moment: [label, params, grads, buffers]
labels = [s[0].replace("module.", "") for s in timeline["fsdp"]]  # DDP's modules are called module.net.1, ...
assert all([s[0].replace("module.", "") for s in timeline[n]] == labels for n in measured_runs), "the runs were sampled at different moments"
in_forward = [i for i, label in enumerate(labels) if label.startswith(("pre ", "post "))]
in_backward = [i for i, label in enumerate(labels) if label.startswith(("backward ", "grad "))]


def total(sample):
    """Full-size bytes of one sample: parameters + gradients + FSDP's buffers."""
    return sample[1] + sample[2] + sample[3]


print(f"full-size parameter bytes alive on rank 0 (the whole model: {param_bytes:,} B; the layers: {layer_bytes})")
print(f"{'when':30}" + "".join(f"{name:>16}" for name in timeline))
for i, label in enumerate(labels):
    print(f"{label:30}" + "".join(f"{samples[i][1]:>16,}" for samples in timeline.values()))
print(f"\neverything full-size in the fsdp run (rank 0, bytes):\n{'when':30}{'params':>11}{'grads':>11}{'buffers':>11}{'total':>12}")
for label, sample in zip(labels, timeline["fsdp"]):
    print(f"{label:30}" + "".join(f"{v:>11,}" for v in sample[1:]) + f"{total(sample):>12,}")

# %%
peak = {name: {"forward": max(total(s[i]) for i in in_forward), "backward": max(total(s[i]) for i in in_backward)}
        for name, s in timeline.items()}
forward_params = {name: max(s[i][1] for i in in_forward) for name, s in timeline.items()}
at = {name: dict(zip(labels, s)) for name, s in timeline.items()}  # run -> label -> sample
sharded = sgd_runs["fsdp"]["sharded_bytes"]
print(f"{'peak full-size bytes (rank 0)':30}{'forward':>12}{'backward':>12}")
for name in measured_runs:
    print(f"{name:30}{peak[name]['forward']:>12,}{peak[name]['backward']:>12,}")
kept_ddp, kept_fsdp = ddp_bytes[0], fsdp_bytes[0]  # the layout: params, grads, AdamW state (rank 0)
state_forward = (kept_fsdp + peak["fsdp"]["forward"]) / kept_ddp
state_backward = (kept_fsdp + peak["fsdp"]["backward"]) / kept_ddp
print(f"\ntraining state on rank 0 with AdamW (float32), DDP: {kept_ddp:,} B (its layout: weights, gradients, AdamW's moments)")
print(f"FSDP at its forward peak:  shards {kept_fsdp:,} B + full-size {peak['fsdp']['forward']:,} B = {state_forward:.3f} x DDP")
print(f"FSDP at its backward peak: shards {kept_fsdp:,} B + full-size {peak['fsdp']['backward']:,} B = {state_backward:.3f} x DDP")
print(f"parameters alone at the forward peak: FSDP shards {sharded:,} B + gathered {forward_params['fsdp']:,} B "
      f"= {sharded + forward_params['fsdp']:,} B; DDP {param_bytes:,} B")
_ = report.record("FSDP forward peak full-size bytes (measured)", peak["fsdp"]["forward"], "B")
_ = report.record("FSDP backward peak full-size bytes (measured)", peak["fsdp"]["backward"], "B")
_ = report.record("FSDP training state at forward peak / DDP (measured)", round(state_forward, 3), "x")
_ = report.record("FSDP training state at backward peak / DDP (measured)", round(state_backward, 3), "x")

# %%
fig, (ax_tl, ax_check) = plt.subplots(1, 2, figsize=(9, 3.4))
for (name, samples), style in zip(timeline.items(), ("k-", "C0-", "C1--", "C2:")):
    ax_tl.step(range(len(samples)), [total(s) / 1e6 for s in samples], style, where="mid", marker="o", ms=3, label=name)
short = [lb.replace("between forward and backward", "fwd|bwd").replace("backward ", "bwd ") for lb in labels]
ax_tl.set_xticks(range(len(labels)), short, rotation=70, fontsize=6)
ax_tl.set(xlabel="moment in the first SGD step", ylabel="MB full-size (params+grads+buffers)", title="Full-size bytes alive (rank 0)")
ax_tl.legend(fontsize=7)
checked = ("ddp", "fsdp", "fsdp_keep", "fsdp_root_only", "fsdp_sum", "no_allreduce")
ax_check.bar(range(len(checked)), [sgd_runs[n]["grad_diff"] for n in checked],
             color=["tab:blue"] * 4 + ["tab:red"] * 2)
ax_check.axhline(PARALLEL_TOL, color="k", ls="--", lw=1, label=f"tolerance {PARALLEL_TOL:.0e}")
ax_check.set_xticks(range(len(checked)), checked, rotation=30, fontsize=7)
ax_check.set(yscale="log", ylabel="max |grad - one process|", title="Gradient check (red: bugs on purpose)")
ax_check.legend(fontsize=7)
plt.tight_layout()
plt.show()

# %%
largest = max(padded.values())
layers = list(padded)  # in forward order
between = {name: at[name]["between forward and backward"] for name in measured_runs}
assert all(s[1] == param_bytes for s in timeline["ddp"]), "DDP should hold the full-size weights at every moment"
assert forward_params["fsdp"] == largest, f"FSDP should gather one layer at a time: {forward_params['fsdp']:,} B, largest layer {largest:,} B"
assert peak["fsdp"]["forward"] == 2 * largest, \
    f"in forward FSDP was expected to hold a layer and its all-gather output ({2 * largest:,} B), measured {peak['fsdp']['forward']:,} B"
assert total(between["fsdp"]) == 0, f"with reshard_after_forward=True nothing should stay gathered after forward, found {total(between['fsdp']):,} B"
assert between["fsdp_keep"][1] == padded_param_bytes, "with reshard_after_forward=False every layer should stay gathered until backward"
assert forward_params["fsdp_root_only"] == padded_param_bytes, "one FSDP unit (the root only) gathers the whole model at once"
for earlier, later in zip(layers, layers[1:]):  # backward runs the later layer first and prefetches the earlier one
    s = at["fsdp"][f"backward {later}"]
    assert s[1] == padded[later] and s[3] >= padded[earlier], \
        f"at {later}'s backward FSDP should hold {later} gathered and {earlier} prefetched: params {s[1]:,} B, buffers {s[3]:,} B"
assert max(s[2] for s in timeline["fsdp"]) == max(layer_bytes.values()), \
    "in backward a layer's full gradients should exist before its reduce-scatter, one layer at a time"
assert peak["fsdp"]["backward"] > peak["fsdp"]["forward"], "FSDP's backward was expected to need more full-size memory than its forward"
assert all(total(at[n]["after backward"]) == 0 for n in ("fsdp", "fsdp_keep", "fsdp_root_only")), \
    "after the backward FSDP should have freed every full-size tensor it made"
assert sharded == fsdp["fsdp_fp32"]["bytes"][0]["params"], "the shards measured should be the layout's parameter bytes"
assert 0.5 < state_forward < 1 and 0.5 < state_backward < 1, \
    f"FSDP's training state at its peaks was expected between DDP's half and DDP's: {state_forward:.3f}, {state_backward:.3f}"
assert sharded + forward_params["fsdp"] > param_bytes, "with one dominant layer on 2 ranks FSDP's parameters at the forward peak were expected above DDP's"

# %% [markdown]
# What the measurement shows:
#
# - **Forward: one layer at a time, held twice.** With a unit per `Linear`,
#   the unsharded weights peak at exactly the largest layer (`net.1`, 784 →
#   256) and drop to 0 after each layer. But FSDP also keeps the layer's
#   flat all-gather output until the *next* layer has copied its own out (so
#   that, on a GPU, that copy overlaps the next all-gather; with
#   synchronous gloo the rule is the same), so the **forward peak** is
#   twice the largest layer (asserted). Between forward and backward nothing
#   is left (the root holds no parameters of its own).
# - **Backward holds more.** FSDP's pre-backward hook gathers a layer and
#   *prefetches* the next one in backward order: at `backward net.3` the
#   buffers hold `net.1`'s all-gather output as well as `net.5`'s
#   reduce-scatter input, which FSDP keeps until the next layer's
#   reduce-scatter. Then autograd writes the layer's full gradients, which
#   live until its post-backward reduce-scatter. The backward peak (at
#   `net.1`: its weights, its full gradients and `net.3`'s reduce-scatter
#   buffer) is above the forward peak (both printed above).
# - **`reshard_after_forward=False`** keeps every layer until its backward:
#   the whole model is alive between forward and backward, as in DDP, in
#   exchange for one all-gather per layer instead of two. That is a
#   memory-for-communication trade, usually made for the root (the default)
#   or for the last layers, which backward needs first.
# - **Wrapping matters.** With `fully_shard` on the root only, the whole
#   model is gathered for the whole forward: the per-layer calls are what
#   make the peak small.
# - **FSDP is not always much smaller.** AdamW's moments stay sharded all
#   the time; the gradients are full-size for one layer at a time; the
#   weights for one or two. Against DDP's 16 bytes per parameter (plus DDP's
#   gradient buckets, another 4 bytes per parameter unless
#   `gradient_as_bucket_view=True`, not counted here), FSDP's training state
#   at its peaks is only a little smaller here (the two ratios printed
#   above), far from the 1/2 of the layout, because one layer holds most of
#   the weights; counting the weights alone, FSDP's forward peak is even
#   above DDP's. Both sides count the gradients (shards for FSDP) as kept;
#   `zero_grad(set_to_none=True)` frees them before the forward in either
#   case. FSDP pays off with many units of similar size and more ranks: with
#   U equal units of P parameters in all and N ranks, about `16 P / N` bytes
#   of shards plus a few units' worth of full-size tensors (up to four of
#   `4 P / U` bytes in this backward: a layer's weights and gradients, the
#   prefetched layer and a reduce-scatter buffer), instead of `16 P`.
#
# What FSDP pays instead of memory is communication: an all-gather per unit
# in forward and in backward, and a reduce-scatter per unit for the
# gradients.

# %% [markdown]
# ### From FSDP1 to FSDP2
#
# Before `fully_shard` there was `torch.distributed.fsdp.FullyShardedDataParallel`
# (FSDP1), a wrapper module that flattens each unit's parameters into one
# `FlatParameter`. The `fully_shard` documentation page asks FSDP1 users to
# consider migrating, and links the migration guide in PyTorch's FSDP2
# tutorial ("Getting Started with Fully Sharded Data Parallel (FSDP2)",
# section "FSDP1-to-FSDP2 migration guide"). In FSDP2 the parameters stay
# separate DTensors with their original names, so optimizers, state dicts
# and tensor parallelism work on them directly (the Pitfalls show what 2.14
# prints when you use FSDP1). Most FSDP1 arguments have an FSDP2 form:
#
# | FSDP1 (`FullyShardedDataParallel(...)`) | FSDP2 (`fully_shard(...)`) |
# |---|---|
# | `auto_wrap_policy=ModuleWrapPolicy({Block})` | call `fully_shard(block)` on each block yourself, then on the root |
# | `sharding_strategy=ShardingStrategy.FULL_SHARD` | `reshard_after_forward=True` (the default for non-root units) |
# | `sharding_strategy=ShardingStrategy.SHARD_GRAD_OP` | `reshard_after_forward=False` |
# | `sharding_strategy=ShardingStrategy.HYBRID_SHARD` | `mesh=init_device_mesh(..., (replicas, shards))`: a 2-D mesh, replicate over dim 0, shard over dim 1 |
# | `sharding_strategy=ShardingStrategy.NO_SHARD` | no sharding at all: use DDP (`DistributedDataParallel`), or the composable `torch.distributed._composable.replicate` |
# | (no FSDP1 form) | `reshard_after_forward=8` (an int): after forward, reshard to groups of 8 ranks (e.g. one machine), so backward all-gathers within the smaller group |
# | `param_init_fn=...` (initialise meta-device modules when wrapping) | build on `torch.device("meta")`, `fully_shard`, then `model.to_empty(device=...)` and each module's `reset_parameters()` |
# | `sync_module_states=True` (broadcast rank 0's weights) | `set_model_state_dict(model, full_sd, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))` from `torch.distributed.checkpoint.state_dict` |
# | `backward_prefetch=BackwardPrefetch.BACKWARD_PRE` | always on (implicit prefetch); explicit: `module.set_modules_to_backward_prefetch([...])` |
# | `forward_prefetch=True` | `module.set_modules_to_forward_prefetch([...])` |
# | `mixed_precision=MixedPrecision(param_dtype, reduce_dtype, buffer_dtype)` | `mp_policy=MixedPrecisionPolicy(param_dtype, reduce_dtype, output_dtype, cast_forward_inputs)` (buffers are not cast) |
# | `cpu_offload=CPUOffload(offload_params=True)` | `offload_policy=CPUOffloadPolicy()` |
# | `with model.no_sync():` | `model.set_requires_gradient_sync(False)` |
# | `FSDP.state_dict_type(...)` | `torch.distributed.checkpoint.state_dict.get_state_dict` / `set_state_dict` |
#
# The cell checks that every FSDP2 name in the table exists in the
# installed PyTorch, and every FSDP1 name too (that `reshard_after_forward`
# takes an int is read from `fully_shard`'s signature).

# %%
fully_shard_args = set(inspect.signature(fsdp_api.fully_shard).parameters)
reshard_annotation = str(inspect.signature(fsdp_api.fully_shard).parameters["reshard_after_forward"].annotation)
fsdp2_names = {
    "fully_shard arguments": ({"mesh", "reshard_after_forward", "mp_policy", "offload_policy"}, fully_shard_args),
    "FSDPModule methods": ({"set_modules_to_backward_prefetch", "set_modules_to_forward_prefetch", "set_requires_gradient_sync",
                            "set_reshard_after_forward", "unshard", "reshard"}, set(dir(fsdp_api.FSDPModule))),
    "MixedPrecisionPolicy fields": ({"param_dtype", "reduce_dtype", "output_dtype", "cast_forward_inputs"},
                                    set(inspect.signature(fsdp_api.MixedPrecisionPolicy).parameters)),
    "torch.distributed.fsdp": ({"fully_shard", "FSDPModule", "MixedPrecisionPolicy", "CPUOffloadPolicy"}, set(dir(fsdp_api))),
    "state_dict helpers": ({"set_model_state_dict", "get_state_dict", "set_state_dict", "StateDictOptions"}, set(dir(dcp_state_dict))),
    "StateDictOptions fields": ({"full_state_dict", "broadcast_from_rank0"}, set(inspect.signature(dcp_state_dict.StateDictOptions).parameters)),
    "nn.Module / nn.Linear methods": ({"to_empty", "reset_parameters"}, set(dir(torch.nn.Linear))),
    "NO_SHARD replacements": ({"replicate", "DistributedDataParallel"}, set(dir(composable)) | set(dir(torch.nn.parallel))),
}
fsdp1_names = {
    "FullyShardedDataParallel arguments": ({"auto_wrap_policy", "sharding_strategy", "backward_prefetch", "forward_prefetch",
                                            "mixed_precision", "cpu_offload", "param_init_fn", "sync_module_states"},
                                           set(inspect.signature(fsdp_api.FullyShardedDataParallel).parameters)),
    "ShardingStrategy": ({"FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "NO_SHARD"}, set(fsdp_api.ShardingStrategy.__members__)),
    "BackwardPrefetch": ({"BACKWARD_PRE", "BACKWARD_POST"}, set(fsdp_api.BackwardPrefetch.__members__)),
    "MixedPrecision fields": ({"param_dtype", "reduce_dtype", "buffer_dtype"}, set(inspect.signature(fsdp_api.MixedPrecision).parameters)),
    "wrap policies": ({"ModuleWrapPolicy", "transformer_auto_wrap_policy"}, set(dir(fsdp1_wrap))),
}
for title, names in (("FSDP2", fsdp2_names), ("FSDP1", fsdp1_names)):
    for where, (wanted, present) in names.items():
        missing = wanted - present
        assert not missing, f"{title}: {where} lacks {sorted(missing)} in torch {torch.__version__}"
        print(f"{title} {where:36} all present: {', '.join(sorted(wanted))}")
assert "int" in reshard_annotation, f"fully_shard's reshard_after_forward no longer takes an int: {reshard_annotation}"
print(f"FSDP2 reshard_after_forward accepts: {reshard_annotation}")

# %% [markdown]
# ## Tensor parallelism
#
# FSDP still runs every layer in full on every rank; it only stores the
# weights in pieces. **Tensor parallelism** (Shoeybi et al. 2019,
# Megatron-LM) splits the computation itself. Take the MLP
# `y = relu(x W1ᵀ) W2ᵀ` on 2 ranks:
#
# - **Column-wise** split of the first layer: rank r holds half of W1's
#   output features (`nn.Linear.weight` is `[out, in]`, so `Shard(0)` of the
#   weight). With the full input `x` it computes half of the hidden units,
#   `h_r = relu(x W1_rᵀ)`, with no communication: ReLU works element by
#   element, so each rank can apply it to its own half.
# - **Row-wise** split of the second layer: rank r holds the columns of W2
#   that read exactly those hidden units (`Shard(1)` of the weight). It
#   computes `h_r W2_rᵀ`, a full-size output that is only a *partial sum*
#   (placement `Partial()`); the true output is the sum over ranks: **one
#   all-reduce**.
#
# So column then row costs one all-reduce per MLP in forward (and, by the
# same argument, one in backward for the gradient of `x`; the job below
# counts the forward only). In the other order, row-wise first
# would leave a partial sum *before* the ReLU, and relu(a + b) is not
# relu(a) + relu(b): a second all-reduce would be needed in the middle.
#
# `torch.distributed.tensor.parallel.parallelize_module(model, mesh, plan)`
# applies such a plan: `{"0": ColwiseParallel(), "2": RowwiseParallel()}` for
# `nn.Sequential(Linear, ReLU, Linear)`. In a transformer block the q, k and
# v projections are column-wise (each rank gets whole attention heads, so
# attention itself needs no communication), the output projection is
# row-wise, and the MLP is column-wise then row-wise: **two** all-reduces per
# block. The attention code must count heads from the local width
# (`view(B, T, -1, head_dim)`), because each rank sees only its heads; that
# is why `tp_check` defines its own small `TPBlock` with separate q/k/v
# projections instead of the course's `TransformerBlock`, whose fused `qkv`
# projection would be split across q and k.
#
# The job builds both models with the same seed on every rank, parallelises
# a copy, and compares the forward output and, after `backward()`, every
# parameter's full gradient with the unsplit model. `CommDebugMode` counts
# the collectives of one forward pass.

# %%
tp_dir = OUT / "tp"
result = launch("tp_check", "--out", str(tp_dir), "--d-model", str(TP_D_MODEL),
                "--pipeline", "--microbatches", str(PIPELINE_MICROBATCHES))  # the pipeline section below reads this job too
tp = json.loads((tp_dir / "tp.json").read_text())
pipe = json.loads((tp_dir / "pipeline.json").read_text())
print(f"\nlaunch took {result.seconds:.1f} s (1 sample)")

# %%
# NBVAL_CHECK_OUTPUT
for model_name in ("mlp", "block"):
    print(f"{model_name}: collectives in one forward: {tp[model_name]['forward_collectives']}; output is a DTensor: {tp[model_name]['output_is_dtensor']}")
    for name, p in tp[model_name]["params"].items():
        if name.endswith("weight"):
            print(f"   {name:15} {p['placements']:17} global {tuple(p['shape'])!s:10} local {tuple(p['local_shape'])}")

# %%
for model_name in ("mlp", "block"):
    r = tp[model_name]
    print(f"{model_name}: max |output diff| {r['output_diff']:.1e}, max |gradient diff| {r['grad_diff']:.1e}, "
          f"parameter bytes per rank {r['local_param_bytes']:,} of {r['full_param_bytes']:,}")
    assert r["output_diff"] < PARALLEL_TOL, f"tensor-parallel {model_name}: outputs differ by {r['output_diff']:.1e}"
    assert r["grad_diff"] < PARALLEL_TOL, f"tensor-parallel {model_name}: gradients differ by {r['grad_diff']:.1e}"
assert tp["mlp"]["forward_collectives"] == {"all_reduce": 1}, "column- then row-wise should need exactly one all-reduce"
assert tp["block"]["forward_collectives"] == {"all_reduce": 2}, "a TP transformer block needs one all-reduce for attention, one for the MLP"
_ = report.record("TP MLP max |output diff|", float(f"{tp['mlp']['output_diff']:.2g}"), digits=12)
_ = report.record("TP block max |grad diff|", float(f"{tp['block']['grad_diff']:.2g}"), digits=12)

# %% [markdown]
# The LayerNorms stay plain, replicated tensors (they are cheap and need the
# full feature vector), and the row-wise layers' biases are `Replicate()`:
# the bias is added once, after the all-reduce. The parallel output is an
# ordinary tensor again because `RowwiseParallel` converts its output back
# (`use_local_output=True`). `SequenceParallel` would go one step further and
# also split the LayerNorm's activations along the sequence dimension.

# %% [markdown]
# ## Pipeline parallelism
#
# The third way to split a model cuts it **by layers**: rank 0 holds the
# first layers (stage 0), rank 1 the rest (stage 1), and the activations
# travel from one to the next with point-to-point `send`/`recv`, the
# gradients of those activations back. Run naively, one stage always waits
# for the other. A pipeline **schedule** splits the batch into
# **microbatches** so that both stages can work at once, on different
# microbatches (Huang et al. 2019, GPipe; for 1F1B, Narayanan et al. 2021,
# "Memory-Efficient Pipeline-Parallel DNN Training", PipeDream-Flush):
#
# - `ScheduleGPipe`: all microbatches forward, then all backward; every
#   stage keeps the activations of all microbatches until its backward;
# - `Schedule1F1B`: after a short warm-up each stage alternates one forward
#   and one backward, so by design it holds the activations of at most
#   about `num_stages` microbatches at a time (not measured here). It is
#   the synchronous form with a flush at the end of every step, so all
#   microbatches see the same weights; the 1F1B of the original PipeDream
#   (Narayanan et al. 2019) is asynchronous and stashes several versions of
#   the weights instead.
#
# `torch.distributed.pipelining` provides both. Each rank wraps its part of
# the model in a `PipelineStage`, the schedule gets the stage, the number of
# microbatches and a loss function, and `schedule.step(...)` runs one
# training step (the first stage passes the input, the last the targets):
#
# ```python
# stage = PipelineStage(my_layers, stage_index=rank, num_stages=2, device=device)
# schedule = ScheduleGPipe(stage, n_microbatches=4, loss_fn=F.cross_entropy)
# if rank == 0:
#     schedule.step(x)
# else:
#     losses = []
#     output = schedule.step(target=y, losses=losses)   # one loss per microbatch
# ```
#
# The gradients accumulate over the microbatches and are divided by their
# number (`scale_grads=True`, the default), matching a loss that averages.
# The TP job above ran this too (`pipeline_check.compare_schedules`, the
# same 2 processes, gloo on CPU): a 5-layer MLP cut after its first ReLU,
# one step of each schedule, compared with the unsplit model in one process
# on the whole batch of 16. A third run sets `scale_grads=False`.

# %%
# NBVAL_CHECK_OUTPUT
for name, r in pipe.items():
    print(f"{name:33} stages hold {r['stage_params'][0]} | {r['stage_params'][1]}")

# %%
for name, r in pipe.items():
    print(f"{name:33} max |output diff| {r['output_diff']:.1e}, mean microbatch loss {r['loss']:.6f} "
          f"(one process {r['reference_loss']:.6f}), max |grad diff| {r['grad_diff']:.1e}, grad scale {r['grad_scale']:.3f}")
for name in ("ScheduleGPipe", "Schedule1F1B"):
    r = pipe[name]
    assert r["microbatch_losses"] == PIPELINE_MICROBATCHES, f"{name}: expected one loss per microbatch, got {r['microbatch_losses']}"
    assert r["output_diff"] < PARALLEL_TOL, f"{name}: the pipeline's output differs from one process by {r['output_diff']:.1e}"
    assert abs(r["loss"] - r["reference_loss"]) < PARALLEL_TOL, f"{name}: the mean microbatch loss differs from the batch loss"
    assert r["grad_diff"] < PARALLEL_TOL, f"{name}: the pipeline's gradients differ from one process by {r['grad_diff']:.1e}"
unscaled = pipe["ScheduleGPipe, scale_grads=False"]
assert unscaled["grad_diff"] > 100 * PARALLEL_TOL, "without scale_grads the gradients should not match a mean loss"
assert abs(unscaled["grad_scale"] - PIPELINE_MICROBATCHES) < 1e-3, \
    f"scale_grads=False should leave the sum over {PIPELINE_MICROBATCHES} microbatches, got {unscaled['grad_scale']:.3f} x"
_ = report.record("pipeline (GPipe, 1F1B) max |grad diff| vs 1 process",
                  float(f"{max(pipe[n]['grad_diff'] for n in ('ScheduleGPipe', 'Schedule1F1B')):.2g}"), digits=12)

# %% [markdown]
# Both schedules give the single-process output and gradients on CPU with
# gloo: the schedule changes *when* each microbatch runs, not what is
# computed. Without the division the gradients are exactly the number of
# microbatches times too large (grad scale 4.000 with 4 microbatches):
# `scale_grads=False` is for a loss that sums over the batch. What the
# schedule buys is time, and it needs real parallel devices to show: with
# S stages and M microbatches each stage idles for about (S - 1) of the
# M + S - 1 slots (the "bubble"), so more microbatches mean less idling. On
# 2 shared CPU cores this chapter does not time it.

# %% [markdown]
# ## A 2-D mesh: TP inside, FSDP across
#
# Large jobs combine FSDP and TP. With 4 ranks in a 2×2 mesh named
# `("dp", "tp")`, ranks `[[0, 1], [2, 3]]`: each row (0 and 1; 2 and 3) is a
# tensor-parallel group that shares one half of the batch and splits every
# matrix multiply; each column (0 and 2; 1 and 3) is a data-parallel group
# across which FSDP shards what TP left. TP goes inside, where ranks talk
# at every layer (on real hardware: within one machine, over fast links),
# FSDP outside:
#
# ```python
# mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
# model = parallelize_module(model, mesh["tp"], plan)
# for layer in (...):
#     fully_shard(layer, mesh=mesh["dp"])
# fully_shard(model, mesh=mesh["dp"])
# ```
#
# Each parameter then has two placements, one per mesh dimension. The job
# trains `TPBlock` for a few SGD steps and compares every full parameter
# with one process trained on the whole batch. The same 4 processes then
# load the FSDP job's checkpoint at world size 4, for the DCP section
# below (one launch instead of two).

# %%
if RUN_2D:
    mesh_dir = OUT / "mesh_2d"
    result = launch("mesh_2d", "--out", str(mesh_dir), "--steps", str(MESH_2D_STEPS), "--checkpoint", str(checkpoint_dir),
                    "--full-state", str(fsdp_dir / "full_state.pt"), "--hidden", *map(str, HIDDEN), nproc=4)
    mesh2d = json.loads((mesh_dir / "mesh_2d.json").read_text())
    print(f"\nlaunch took {result.seconds:.1f} s (1 sample); mesh {mesh2d['mesh']} with dimensions {mesh2d['dim_names']}")
    for name in ("attn.q.weight", "attn.o.weight", "attn.o.bias", "ln1.weight"):
        p = mesh2d["params"][name]
        print(f"{name:14} {p['placements']:45} global {tuple(p['shape'])!s:9} local {tuple(p['local_shape'])}")
    print("parameter bytes per rank:", [r["param_bytes"] for r in mesh2d["ranks"]], "of", mesh2d["full_param_bytes"])
    print("losses 2-D:", mesh2d["losses"], " one process:", mesh2d["reference_losses"])
    assert mesh2d["max_diff"] < PARALLEL_TOL, f"the 2-D mesh's parameters differ from one process by {mesh2d['max_diff']:.1e}"
    # the placements the next paragraph explains, checked on the job's JSON ([class, dim, split factor] per mesh dim)
    tp_size = len(mesh2d["mesh"][0])
    for name, p in mesh2d["params"].items():
        if name.startswith(("attn.q.", "attn.k.", "attn.v.", "mlp.fc1.")):  # column-wise: TP and FSDP both split dim 0
            want, mesh_dims = [["_StridedShard", 0, tp_size], ["Shard", 0, None]], ["dp", "tp"]
        elif name in ("attn.o.weight", "mlp.fc2.weight"):  # row-wise: TP splits dim 1, FSDP then dim 0
            want, mesh_dims = [["Shard", 0, None], ["Shard", 1, None]], ["dp", "tp"]
        elif name in ("attn.o.bias", "mlp.fc2.bias"):  # RowwiseParallel leaves the bias whole on every tp rank
            want, mesh_dims = [["Shard", 0, None], ["Replicate", None, None]], ["dp", "tp"]
        else:  # the LayerNorms: not tensor-parallel, so FSDP's 1-D dp mesh only
            assert name.startswith(("ln1.", "ln2.")), f"unexpected parameter {name}"
            want, mesh_dims = [["Shard", 0, None]], ["dp"]
        assert p["kinds"] == want and p["mesh_dims"] == mesh_dims, f"{name}: {p['placements']} on {p['mesh_dims']}, expected {want} on {mesh_dims}"
    o = mesh2d["params"]["attn.o.weight"]
    assert math.prod(o["local_shape"]) * len(mesh2d["ranks"]) == math.prod(o["shape"]), "each rank should hold a quarter of attn.o.weight"
    print(f"placements of all {len(mesh2d['params'])} parameters as expected (split factor {tp_size} = the tp size)")
    # Each rank gathered every _StridedShard parameter over dp only and compared it with its TP piece of the
    # one-process weight: the rows FSDP spread over dp must come back as that one contiguous piece.
    strided = {n for n, p in mesh2d["params"].items() if p["kinds"][0][0] == "_StridedShard"}
    rebuilt = [r["dp_gather_vs_tp_piece"] for r in mesh2d["ranks"]]
    worst = max(d for r in rebuilt for d in r.values())
    assert strided and all(set(r) == strided for r in rebuilt), "every rank should have gathered every _StridedShard parameter"
    assert worst < PARALLEL_TOL, f"gathering over dp did not give back the TP piece: largest difference {worst:.1e}"
    print(f"gathered over dp alone, each of the {len(strided)} _StridedShard parameters equals the rank's TP piece of the "
          f"one-process weight on all {len(rebuilt)} ranks (largest difference {worst:.1e})")
    _ = report.record("2-D mesh max |param diff|", float(f"{mesh2d['max_diff']:.2g}"), digits=12)
else:
    print("RUN_2D is False: skipping the 4-process job (FSDP x TP, and the checkpoint at world size 4)")

# %% [markdown]
# How to read the placements: `attn.o.weight` is `(Shard(dim=0), Shard(dim=1))`:
# TP split its columns (row-wise layer) and FSDP then split its rows over
# `dp`, so each rank holds a quarter. For the column-wise q/k/v projections
# both splits fall on dimension 0. FSDP cut each TP piece in two, so the
# rows one `dp` index holds are not one contiguous block of the global
# weight but one block inside each TP piece; DTensor records that as
# `_StridedShard(dim=0, sf=2)` (split factor 2, the size of `tp`), and
# gathering over `dp` alone rebuilds exactly the TP piece (the cell above
# gathers each such parameter that way on every rank and compares it with
# the rank's piece of the one-process weight). `RowwiseParallel`
# leaves the biases of the row-wise layers whole on every `tp` rank
# (`Replicate()` over `tp`; FSDP still splits them over `dp`). The
# LayerNorm weights are not tensor-parallel, so they are DTensors on the
# 1-D `dp` mesh only, and are replicated across `tp`. The cell above checks
# all of these placements on the job's JSON.

# %% [markdown]
# ## Distributed checkpoints (DCP)
#
# `torch.save(model.state_dict())` on a sharded model would either save
# only one rank's pieces or first gather everything on one rank, which is
# exactly what does not fit. `torch.distributed.checkpoint` (DCP) saves in
# parallel: every rank writes its own shards to its own file, and a
# `.metadata` file records which piece of which tensor is where. When
# loading, each rank reads exactly the pieces its *new* layout needs, so a
# checkpoint saved on 2 ranks loads on 1, 4 or 64, with any placements.
#
# The FSDP job above saved its float32 model and AdamW state at world size 2:
#
# ```python
# model_sd, optim_sd = get_state_dict(model, optimizer)    # DTensor values, FQN keys
# dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=checkpoint_dir)
# ```
#
# `torch.distributed.checkpoint.state_dict.get_state_dict` gives both state
# dicts with parameter names as keys (a plain `optimizer.state_dict()` keys
# its state by integer index), and works the same for FSDP, TP, DDP and
# plain models. Rank 0 also gathered the full tensors with
# `StateDictOptions(full_state_dict=True, cpu_offload=True)` into
# `full_state.pt`, for comparison.

# %%
# NBVAL_CHECK_OUTPUT
for path in sorted(checkpoint_dir.iterdir()):
    print(f"{path.name:14} {'one per rank: its shards' if path.suffix == '.distcp' else 'which piece of which tensor is where'}")

# %% [markdown]
# Now load it into one process, the notebook itself, which has no process
# group at all: `dcp.load` notices that and reads as a single process (it
# says so in a warning, which we capture and print). The model and
# optimizer are fresh and plain; `get_state_dict` creates AdamW's state
# buffers so that DCP has tensors to load into, `dcp.load` fills them in
# place, and `set_state_dict` puts them back into the model and optimizer.

# %%
assert not dist.is_initialized(), "this cell shows loading without a process group"
torch.manual_seed(SEED + 1)  # different initial weights: the load must overwrite them
single = MLP(784, HIDDEN, 10, dropout=0.0)
single_opt = torch.optim.AdamW(single.parameters(), lr=1e-3)
start = time.perf_counter()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    model_sd, optim_sd = get_state_dict(single, single_opt)
    dcp.load({"model": model_sd, "optim": optim_sd}, checkpoint_id=checkpoint_dir)
    set_state_dict(single, single_opt, model_state_dict=model_sd, optim_state_dict=optim_sd)
load_seconds = time.perf_counter() - start
for w in caught:
    print(f"{w.category.__name__}: {w.message}")

saved = torch.load(fsdp_dir / "full_state.pt", weights_only=True)
weights_equal = all(torch.equal(single.state_dict()[k], v) for k, v in saved["model"].items())
moments_equal = all(
    torch.equal(single_opt.state[p][buf], saved["optim"]["state"][name][buf])
    for name, p in single.named_parameters() for buf in ("exp_avg", "exp_avg_sq")
)
print(f"loaded at world size 1 in {load_seconds:.2f} s (1 sample): weights equal {weights_equal}, AdamW moments equal {moments_equal}")

# %%
assert weights_equal, "the weights loaded at world size 1 differ from the ones saved at world size 2"
assert moments_equal, "AdamW's exp_avg / exp_avg_sq loaded at world size 1 differ from the saved ones"
with torch.no_grad():
    logits = single(images[:8])
assert torch.isfinite(logits).all(), "the reloaded model should run"
_ = report.record("DCP world 2 -> 1 round trip equal", "yes" if weights_equal and moments_equal else "no")

# %% [markdown]
# The same calls load into a model sharded over **4** ranks: the 4-process
# job of the 2-D section built the MLP with different initial weights,
# sharded it with `fully_shard` over all 4 ranks and a fresh AdamW, and
# loaded the checkpoint saved at world size 2. Each rank asks for its own
# pieces, which now cut the saved shards at other places (`net.5.weight`
# has 10 rows: 5 + 5 when saved, 3 + 3 + 3 + 1 now), and DCP reads the
# overlapping parts. Every rank then gathered each parameter and AdamW
# moment with `full_tensor()` and compared it with the full tensors that
# were saved.

# %%
if RUN_2D:
    world4 = mesh2d["dcp_world4"]
    for rank, shapes in enumerate(world4["local_shapes"]):
        print(f"world size {world4['world']}, rank {rank}: net.5.weight {tuple(shapes['net.5.weight'])}, net.1.weight {tuple(shapes['net.1.weight'])}")
    print(f"fresh weights differed before the load: {world4['differed_before_load']}; after it: weights equal "
          f"{world4['weights_equal']}, AdamW moments equal {world4['moments_equal']} ({world4['n_tensors']} tensors)")
    assert world4["differed_before_load"], "the fresh model already had the saved weights: the load would prove nothing"
    assert world4["weights_equal"], "the weights loaded at world size 4 differ from the ones saved at world size 2"
    assert world4["moments_equal"], "AdamW's moments loaded at world size 4 differ from the ones saved at world size 2"
    rows = [s["net.5.weight"][0] for s in world4["local_shapes"]]
    assert rows == [len(c) for c in torch.arange(10).chunk(world4["world"])], f"net.5.weight's rows at world size 4: {rows}"
    _ = report.record("DCP world 2 -> 4 round trip equal", "yes" if world4["weights_equal"] and world4["moments_equal"] else "no")
else:
    print("RUN_2D is False: the checkpoint was not loaded at world size 4")

# %% [markdown]
# This is what makes **resharding** (resuming a job on a different number of
# GPUs) routine, and why DCP rather than `torch.save` is the format for
# sharded training.

# %% [markdown]
# ## Pitfalls
#
# DTensor needs a process group even to experiment with. A group of one
# process is enough, and cheap to make in a notebook: `init_process_group`
# with `world_size=1` and an in-memory `HashStore` (no port, no other
# process). The cell checks first, so running it twice is harmless; the
# group is destroyed at the end of this section.

# %%
if not dist.is_initialized():
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
print("in-process group: world size", dist.get_world_size())

# %% [markdown]
# **1. A mesh bigger than the job.** The mesh shape must multiply out to the
# number of ranks (here 1):

# %%
try:
    init_device_mesh("cpu", (2,))
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")
mesh1 = init_device_mesh("cpu", (dist.get_world_size(),))  # the fix: size the mesh from the world size
print("fixed:", mesh1)

# %% [markdown]
# In a launched job the same mistake stops every rank. The launcher raises
# `DistributedRunError`, which names the rank that failed first and its
# exception (the full traceback is in the error text and in the per-rank
# logs under `build/distributed/`):

# %%
if RUN_FAILING_JOB:
    try:
        torchrun("helpers.distributed.mesh_placements", "--out", str(OUT / "bad_mesh"), "--mesh-size", "4", nproc=2,
                 timeout=LAUNCH_TIMEOUT)
    except DistributedRunError as err:
        print(f"{type(err).__name__}: {str(err).splitlines()[0]}")
        print(f"  rank {err.root_cause.rank}: {err.root_cause.last_line}")
        launch_seconds["failing job"] = err.result.seconds
    else:
        raise AssertionError("a mesh of 4 devices on 2 ranks should have failed")
else:
    print("RUN_FAILING_JOB is False: skipping the launched failing job")

# %% [markdown]
# **2. Mixing a DTensor with a plain tensor.** An operation on a DTensor
# must know the placement of every operand; a plain `torch.Tensor` has none,
# so DTensor refuses rather than guess:

# %%
dt = distribute_tensor(torch.arange(6.0).reshape(3, 2), mesh1, [Shard(0)])
try:
    dt + torch.ones(3, 2)
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")
ones = distribute_tensor(torch.ones(3, 2), mesh1, [Replicate()])  # the fix: make it a DTensor too
print("fixed:", (dt + ones).full_tensor().tolist(), "placements of the sum:", (dt + ones).placements)

# %% [markdown]
# **3. Loading a checkpoint into a different model.** DCP reshards freely,
# but the *global* shapes must match. A model with a 300-unit first layer
# cannot take the 256-unit checkpoint. Note that DCP's error,
# `CheckpointException`, derives from `BaseException`, not `Exception`: a
# bare `except Exception` does not catch it. Its text carries each failing
# rank's traceback; the last line says what went wrong:

# %%
wrong = MLP(784, (300, *HIDDEN[1:]), 10, dropout=0.0)
try:
    dcp.load({"model": wrong.state_dict()}, checkpoint_id=checkpoint_dir)
except CheckpointException as err:
    print(f"{type(err).__name__}: {str(err).strip().splitlines()[-1]}")
right = MLP(784, HIDDEN, 10, dropout=0.0)  # the fix: the architecture the checkpoint was saved from
right_sd = right.state_dict()
dcp.load({"model": right_sd}, checkpoint_id=checkpoint_dir)  # only the model: a subset of what was saved is fine
print("fixed: loaded", len(right_sd), "tensors")

# %% [markdown]
# **4. The legacy APIs, and what PyTorch 2.14 says about them.** Neither
# legacy form stops working, and neither says much. Importing the private
# `torch.distributed._tensor` emits no warning in 2.14: its modules
# `_tensor/api.py` and `_tensor/placement_types.py` carry a "TODO: throw
# warnings when this module imported", and the package gives back the very
# same classes as `torch.distributed.tensor`. This notebook has imported
# those modules long ago (DCP imports them), so a fresh Python process does
# the imports, with every warning shown (`-W always`) and recorded, and
# reports what it saw. Constructing
# `FullyShardedDataParallel` emits no deprecation warning either; on a
# world of one it only says it falls back to `NO_SHARD`. The deprecation
# appears when you use FSDP1's state-dict API, `FSDP.state_dict_type(...)`,
# as a `FutureWarning` that names the replacement. For FSDP1 the cell
# captures every warning of each step (on this in-process world of one) and
# prints it once.

# %%
def show_warnings(title, caught):
    """Print each distinct warning captured by warnings.catch_warnings(record=True), once."""
    distinct = dict.fromkeys(f"{w.category.__name__}: {w.message}" for w in caught)
    print(f"{title}: {len(distinct)} distinct warning(s)")
    for line in distinct:
        print("   ", line)
    return [w.category for w in caught]


LEGACY_IMPORT = """
import json, sys, warnings
import torch
before = sorted(m for m in sys.modules if m.startswith("torch.distributed._tensor"))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch.distributed._tensor, torch.distributed._tensor.api, torch.distributed._tensor.placement_types
from torch.distributed.tensor import DTensor
print(json.dumps({"loaded_before": before, "same_class": torch.distributed._tensor.DTensor is DTensor,
                  "warnings": [f"{w.category.__name__}: {w.message}" for w in caught]}))
"""
child = subprocess.run([sys.executable, "-W", "always", "-c", LEGACY_IMPORT], capture_output=True, text=True, timeout=120)
assert child.returncode == 0, f"the fresh process failed: {child.stderr[-500:]}"
legacy_import = json.loads(child.stdout.strip().splitlines()[-1])
print("fresh process: import torch.distributed._tensor, ._tensor.api, ._tensor.placement_types: "
      f"{len(legacy_import['warnings'])} warning(s) recorded, {len(child.stderr.strip().splitlines())} line(s) on stderr")
for line in legacy_import["warnings"]:
    print("   ", line)
print("    imported before (must be none):", legacy_import["loaded_before"] or "none")
print("    torch.distributed._tensor.DTensor is torch.distributed.tensor.DTensor:", legacy_import["same_class"])

FSDP1 = fsdp_api.FullyShardedDataParallel
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    legacy = FSDP1(torch.nn.Linear(4, 4), device_id=torch.device("cpu"))
    legacy(torch.randn(2, 4)).sum().backward()
construct_categories = show_warnings("FullyShardedDataParallel(...), forward and backward", caught)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with FSDP1.state_dict_type(legacy, fsdp_api.StateDictType.FULL_STATE_DICT):
        legacy_sd = legacy.state_dict()
state_dict_categories = show_warnings("FSDP.state_dict_type(...) and state_dict()", caught)

# %%
assert not legacy_import["loaded_before"], "the fresh process had torch.distributed._tensor loaded already: the check saw nothing"
assert legacy_import["same_class"], "torch.distributed._tensor should re-export the public DTensor"
assert FutureWarning in state_dict_categories, "FSDP.state_dict_type() was expected to warn that it is being deprecated"
assert FutureWarning not in construct_categories and DeprecationWarning not in construct_categories, \
    "constructing FSDP1 now emits a deprecation warning: update the prose above"
assert not legacy_import["warnings"] and "_tensor" not in child.stderr, \
    f"importing torch.distributed._tensor now warns: update the prose above ({legacy_import['warnings']}, {child.stderr[-300:]})"
del legacy, legacy_sd

# %%
dist.destroy_process_group()
print("in-process group destroyed:", not dist.is_initialized())

# %% [markdown]
# (With the process group in place, `dcp.load` in pitfall 3 ran as a
# world of one; without it, as in the DCP section, it falls back to a
# single process by itself.)
#
# ## Exercises
#
# **26.1 Local shard shapes.** Write `local_shard_shapes(shape, world_size,
# dim)` that returns, in rank order, the local shape each rank holds (a
# list with one tuple of ints per rank, like `x.shape`) when a
# tensor of `shape` is distributed over a 1-D mesh of `world_size` ranks
# with `Shard(dim)`, or with `Replicate()` when `dim` is `None`. Remember
# how five rows split over two ranks above, and that a rank's piece can be
# empty. DTensor's own placement helpers (`Shard`'s methods,
# `compute_local_shape_and_global_offset`) are refused here.

# %%
def local_shard_shapes(shape, world_size, dim):
    """One tuple per rank: the local shape of a DTensor with placement Shard(dim) (or Replicate() if dim is None)."""
    raise NotImplementedError("your code here")


result = check("26.local_shard_shapes", local_shard_shapes)

# %% [markdown]
# The rule you wrote is the one the job used: compare with what the ranks
# reported for the 5×4 matrix.

# %%
# NBVAL_CHECK_OUTPUT
reference_shapes = solution("26.local_shard_shapes")
for label, dim in (("Shard(0)", 0), ("Shard(1)", 1), ("Replicate()", None)):
    reported = [tuple(s["shape"]) for s in placed["placements"][label]["ranks"]]
    predicted = reference_shapes(tuple(MATRIX_SHAPE), placed["world"], dim)
    assert reported == predicted, f"{label}: the ranks reported {reported}, the rule predicts {predicted}"
    print(f"{label:12} reported {reported} == predicted")

# %% [markdown]
# **26.2 Bytes per rank.** Write `per_rank_bytes(shapes, world_size,
# strategy)`: the bytes rank 0 holds when training with AdamW in float32
# (parameter, gradient, `exp_avg`, `exp_avg_sq`; ignore the `step`
# counters), for a model with parameter `shapes`, under `"ddp"` or
# `"fsdp"`. FSDP shards each parameter on dimension 0 like `Shard(0)`.

# %%
def per_rank_bytes(shapes, world_size, strategy):
    """Bytes on rank 0 for parameters + gradients + AdamW's two moments, float32, 'ddp' or 'fsdp'."""
    raise NotImplementedError("your code here")


result = check("26.per_rank_bytes", per_rank_bytes)

# %% [markdown]
# Again the formula meets the job's count of the local pieces (a sum of
# `numel * element_size`, which also contains AdamW's 4-byte `step`
# counters, one per parameter tensor):

# %%
shapes = [tuple(s) for _, s, _ in fsdp["fsdp_fp32"]["placements"].values()]
steps_bytes = 4 * len(shapes)
for strategy, measured in (("ddp", ddp_bytes[0]), ("fsdp", fsdp_bytes[0])):
    predicted = solution("26.per_rank_bytes")(shapes, fsdp["world"], strategy)
    print(f"{strategy}: predicted {predicted:,} B + {steps_bytes} B of step counters, counted from the local pieces {measured:,} B")
    assert predicted + steps_bytes == measured, f"{strategy}: the formula and the bytes of the job's local pieces disagree"

# %% [markdown]
# ## Summary
#
# - A **device mesh** arranges ranks in a grid; a **DTensor** is a global
#   tensor plus one placement per mesh dimension (`Shard(d)`, `Replicate()`,
#   `Partial()`). `Shard` splits like `torch.chunk`; `full_tensor()` gathers.
# - **FSDP2** (`fully_shard`) shards parameters, gradients and optimizer
#   state, so between steps each rank keeps 1/N of DDP's bytes, at the
#   price of an all-gather per unit in forward and backward and a
#   reduce-scatter of the gradients. While it runs it also holds full-size
#   tensors, measured: in forward the largest layer and its all-gather
#   output; in backward more (a layer, its full gradients, the prefetched
#   next layer, a reduce-scatter buffer); with `reshard_after_forward=False`
#   every layer until its backward. The wrapping decides the peak: with one
#   dominant layer FSDP's training state here is barely below DDP's.
# - Checked with SGD, FSDP and DDP match one process to float rounding, and
#   the same check fails a sum-instead-of-mean reduction and a missing
#   all-reduce. Under AdamW the sum showed (in the default run) only in the
#   few weights whose gradients are near `eps`, not in the loss, and with a
#   smaller `eps` not at all. A `MixedPrecisionPolicy` computes in bfloat16 and reduces in
#   float32.
# - **Tensor parallelism** splits the matrix multiplies: `ColwiseParallel`
#   then `RowwiseParallel` needs one all-reduce per MLP, two per transformer
#   block, and the results equal the single-process model.
# - **Pipeline parallelism** (`PipelineStage` + `ScheduleGPipe` /
#   `Schedule1F1B`) cuts the model by layers; on 2 gloo processes its output
#   and gradients equal one process, with the gradients divided by the
#   number of microbatches (`scale_grads`).
# - A **2-D mesh** combines FSDP and TP: TP inside (`mesh["tp"]`), FSDP
#   across (`mesh["dp"]`).
# - **DCP** saves each rank's shards in parallel and loads them into any
#   other layout: saved on 2 processes, loaded on 1 and on 4 here, equal
#   tensor for tensor.
# - FSDP1 (`FullyShardedDataParallel`) and `torch.distributed._tensor` are
#   the legacy forms of `fully_shard` and `torch.distributed.tensor`; most
#   FSDP1 options map to an FSDP2 argument or method (the table), and 2.14
#   warns only about FSDP1's state-dict API.
#
# This is the last chapter of the course, and the start of large-scale
# training. Where to go from here: pipeline schedules with several stages
# per rank (`ScheduleInterleaved1F1B`) and their timing on real devices; the
# same code on GPUs with NCCL, where overlapping the all-gathers
# with computation is what makes FSDP fast; and PyTorch's torchtitan
# project, which combines FSDP2, tensor, pipeline and context parallelism
# with DCP checkpoints for training large language models.

# %%
print("wall seconds of each launch (1 sample each, on a shared machine):")
for name, seconds in launch_seconds.items():
    print(f"{name:16} {seconds:5.1f} s")
two_process = [s for n, s in launch_seconds.items() if n not in ("mesh_2d", "failing job")]  # the failing job stops early
_ = report.record("seconds per 2-process launch (1 sample each)", round(sum(two_process) / len(two_process), 1), "s")
if "mesh_2d" in launch_seconds:
    _ = report.record("seconds for the 4-process launch (1 sample)", round(launch_seconds["mesh_2d"], 1), "s")

# %%
report.finish()
