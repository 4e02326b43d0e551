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
# # 24 · PyTorch Lightning
#
# Since chapter 04 we have written the training loop ourselves: move the
# batch to the device, forward, loss, `zero_grad`, `backward`, `step`, then
# validate, step the scheduler, save a checkpoint, log the numbers. Every
# project needs the same loop, and every project gets some detail of it
# wrong sooner or later. **PyTorch Lightning** (`import lightning as L`) is a
# library that owns that loop. You write *what* happens to one batch, in a
# `LightningModule`; the `Trainer` does the looping, the device placement,
# the checkpoints, the logging, mixed precision, gradient clipping and
# accumulation, and resuming an interrupted run.
#
# This chapter trains a small MLP on Fashion-MNIST both ways, with the same
# data, seed, optimizer and epochs, and checks that they agree.
#
# **What you will learn**
# - a `LightningDataModule` (`prepare_data`, `setup`, the three dataloaders)
#   on real data, with a validation split made by a fixed generator;
# - a `LightningModule` (`training_step`, `validation_step`, `test_step`,
#   `configure_optimizers` with a scheduler dict) and `self.log`;
# - callbacks: `ModelCheckpoint`, `EarlyStopping` (we watch it stop) and
#   `LearningRateMonitor`; writing a callback of your own;
# - loggers: `CSVLogger` (the curves are plotted from its file) and
#   `TensorBoardLogger`;
# - the Trainer flags `precision="bf16-mixed"`, `gradient_clip_val` and
#   `accumulate_grad_batches`, each checked;
# - resuming from a checkpoint with `ckpt_path`, why a resumed run replayed
#   epoch 0's batch order, and a sampler that fixes it; `trainer.test(ckpt_path="best")`;
# - `L.seed_everything(seed, workers=True)` and `deterministic=True`;
# - three mistakes: a `training_step` that returns nothing, logging a
#   non-scalar, and monitoring a metric that is never logged.
#
# **Prerequisites:** chapters 04 and 05 (the training loop, Fashion-MNIST's
# sister MNIST), 10 and 11 (optimizers, learning-rate schedulers), 14
# (checkpoints) and 15 (bfloat16 autocast).
#
# **Estimated time:** 60 minutes.

# %% tags=["parameters"]
TRAIN_SIZE = 5000  # training images, drawn from the 60,000 with a fixed generator
VAL_SIZE = 1000  # validation images, drawn from the rest of the 60,000
TEST_SIZE = 10_000  # test images (the first ones; 10,000 = all)
BATCH_SIZE = 64  # images per batch
HIDDEN = (128,)  # hidden widths of the MLP
LR = 1e-3  # Adam's learning rate at the start
LR_STEP_EPOCHS = 2  # StepLR halves the learning rate every this many epochs
EPOCHS = 3  # epochs of the side-by-side comparison and of the precision runs
MAX_EPOCHS = 15  # upper limit of the early-stopping run
PATIENCE = 2  # EarlyStopping: epochs without a better val_loss before stopping
EXPECT_EARLY_STOP = True  # assert that early stopping stops before MAX_EPOCHS
CLIP_VAL = 1.5  # gradient_clip_val (max gradient norm) of the clipping run
ACCUMULATE = 4  # accumulate_grad_batches of the clipping run
RESUME_FIRST_EPOCHS = 1  # the "interrupted" run trains this many epochs
RESUME_TOTAL_EPOCHS = 2  # the resumed run continues up to this many epochs
RESUME_BATCHES = 10  # training batches per epoch in the resume runs (limit_train_batches), to keep them short
REPRO_BATCHES = 20  # training batches of each reproducibility run
MIN_TEST_ACCURACY = 0.80  # test accuracy the checks require (chance is 0.10)
ACC_TOLERANCE = 0.02  # largest allowed |test accuracy(plain loop) - test accuracy(Lightning)|
BF16_TOLERANCE = 0.03  # largest allowed |test accuracy(32-true) - test accuracy(bf16-mixed)|
TIMING_ROUNDS = 5  # rounds of the timing comparison; each round times the three runs once, in a rotating order
TIMING_BATCHES = 20  # training batches of each timed run (plus the whole validation set)
SEED = 0

# %% [markdown]
# ## Setup
#
# Lightning talks a lot: a progress bar per epoch, a table of the model's
# layers, lines such as "GPU available: False", tips, and warnings such as
# a `PossibleUserWarning` that the dataloaders have few workers. In a
# notebook that gets in the way (and this course's build refuses anything
# on stderr), so we turn it down here, once: the Trainer gets
# `enable_progress_bar=False` and `enable_model_summary=False`; Lightning's
# Python loggers (`lightning.pytorch`, `lightning.fabric`) only pass on
# errors; and `quietly()` below collects any warning instead of printing it,
# so that we can print a one-line summary where it matters.

# %%
import contextlib
import copy
import csv
import io
import itertools
import logging
import math
import os
import re
import shutil
import statistics
import textwrap
import time
import warnings
from pathlib import Path

import lightning as L
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import (
    Callback,
    EarlyStopping,
    LearningRateMonitor,
    ModelCheckpoint,
)
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from torch.utils.data import DataLoader, TensorDataset, random_split

from helpers.data import fashion_mnist
from helpers.device import pick_device, seed_everything
from helpers.exercises import check, solution  # noqa: F401  (solution: for when you are stuck)
from helpers.models import MLP, count_parameters
from helpers.paths import build_dir, rel
from helpers.report import ChapterReport

for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
    logging.getLogger(name).setLevel(logging.ERROR)

captured_warnings = []  # the message of every warning caught by quietly(), in order


@contextlib.contextmanager
def quietly():
    """Collect warnings (and anything written to stderr) instead of showing them; yields the list of this block's."""
    mine = []
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(io.StringIO()) as err:
        warnings.simplefilter("always")
        try:
            yield mine
        finally:
            mine.extend(str(w.message) for w in caught)
            if err.getvalue().strip():
                mine.append(f"(stderr) {err.getvalue().strip()}")
            captured_warnings.extend(mine)


def summarise_warnings(messages, width=110):
    """One line per distinct message, shortened, with how often it came."""
    counts = {}
    for m in messages:
        counts[m] = counts.get(m, 0) + 1
    return [f"  {n}x {textwrap.shorten(m, width)}" for m, n in counts.items()]


generator = seed_everything(SEED)
device = pick_device()
report = ChapterReport("24_lightning")
RUNS = build_dir() / "lightning" / "24_lightning"  # every log and checkpoint of this chapter
shutil.rmtree(RUNS, ignore_errors=True)  # a re-run starts clean (no stale checkpoints or version_1 folders)
RUNS.mkdir(parents=True)
print(f"torch {torch.__version__}, lightning {L.__version__}, device {device}, {torch.get_num_threads()} CPU threads")
print(f"logs and checkpoints go to {rel(RUNS)}/")

# %% [markdown]
# ## The data: a `LightningDataModule`
#
# A **`LightningDataModule`** gathers everything about the data in one
# class, so that the same data can be handed to any model and any Trainer.
# It has a fixed set of methods, which the Trainer calls for you:
#
# | method | called | does |
# | --- | --- | --- |
# | `prepare_data()` | once, in one process | download or copy files; no state on `self` (other processes would not see it) |
# | `setup(stage)` | in every process, before `fit`/`validate`/`test` | read the data, split it, build the datasets |
# | `train_dataloader()`, `val_dataloader()`, `test_dataloader()` | by the loops | return a `DataLoader` |
#
# The split into training and validation images must be the same every
# time, or a resumed run would validate on images it trained on. So
# `random_split` gets its own generator seeded with `SEED`, independent of
# anything else that draws random numbers. The training loader shuffles
# with its own seeded generator too, so that the plain loop below can be
# given exactly the same batches. Like chapter 05, `setup` converts the
# images to one normalised tensor once, which is much faster than a per-image
# transform on a small CPU. `num_workers=0`: loading from a tensor in
# memory gains nothing from worker processes.


# %%
class FashionMNISTDataModule(L.LightningDataModule):
    """Fashion-MNIST as float tensors [N, 1, 28, 28], normalised with the training images' mean and std."""

    def __init__(self, train_size, val_size, test_size=None, batch_size=64, seed=0):
        super().__init__()
        self.train_size, self.val_size, self.test_size = train_size, val_size, test_size
        self.batch_size, self.seed = batch_size, seed
        self.train_set = None

    def prepare_data(self):
        fashion_mnist(train=True)  # makes sure the files are in data/ (mirror or download, md5-checked)
        fashion_mnist(train=False)

    def setup(self, stage=None):
        if self.train_set is not None:  # the Trainer calls setup before every fit/test: do the work once
            return
        train_raw, test_raw = fashion_mnist(train=True), fashion_mnist(train=False)
        rest = len(train_raw) - self.train_size - self.val_size
        split = torch.Generator().manual_seed(self.seed)  # the split depends on the seed only
        train_idx, val_idx, _ = random_split(range(len(train_raw)), [self.train_size, self.val_size, rest], generator=split)
        images = train_raw.data.float().div(255).unsqueeze(1)  # uint8 [60000, 28, 28] -> float [60000, 1, 28, 28]
        train_idx, val_idx = torch.tensor(list(train_idx)), torch.tensor(list(val_idx))
        self.mean, self.std = images[train_idx].mean().item(), images[train_idx].std().item()  # training images only

        def normalised(x):
            return (x - self.mean) / self.std

        self.train_set = TensorDataset(normalised(images[train_idx]), train_raw.targets[train_idx])
        self.val_set = TensorDataset(normalised(images[val_idx]), train_raw.targets[val_idx])
        test_images = test_raw.data[: self.test_size].float().div(255).unsqueeze(1)
        self.test_set = TensorDataset(normalised(test_images), test_raw.targets[: self.test_size])

    def train_dataloader(self):
        order = torch.Generator().manual_seed(self.seed)  # a fresh generator: every call gives the same batches
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, generator=order, num_workers=0)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=512, num_workers=0)

    def test_dataloader(self):
        return DataLoader(self.test_set, batch_size=512, num_workers=0)


dm = FashionMNISTDataModule(TRAIN_SIZE, VAL_SIZE, TEST_SIZE, BATCH_SIZE, SEED)
dm.prepare_data()
dm.setup("fit")  # the Trainer would call these two itself; we call them to look at the data first
batches_per_epoch = len(dm.train_dataloader())
print(f"train {len(dm.train_set):,}, val {len(dm.val_set):,}, test {len(dm.test_set):,} images; {batches_per_epoch} training batches per epoch")
print(f"normalisation from the training images: mean {dm.mean:.4f}, std {dm.std:.4f}")

# %% [markdown]
# The fixed generator makes the split a function of the seed alone. A
# second data module draws exactly the same images, and the validation
# images never appear among the training images:

# %%
# NBVAL_CHECK_OUTPUT
again = FashionMNISTDataModule(TRAIN_SIZE, VAL_SIZE, TEST_SIZE, BATCH_SIZE, SEED)
again.setup("fit")
same_split = torch.equal(again.train_set.tensors[1], dm.train_set.tensors[1]) and torch.equal(again.val_set.tensors[0], dm.val_set.tensors[0])
x_train, x_val = dm.train_set.tensors[0].flatten(1), dm.val_set.tensors[0].flatten(1)
overlap = (torch.cdist(x_val[:200], x_train).amin(dim=1) == 0).sum().item()  # identical images, among the first 200 val images
print(f"same split from a second data module: {same_split}")
print(f"first 200 validation images also in the training set: {overlap}")
print("training images per class:", torch.bincount(dm.train_set.tensors[1], minlength=10).tolist())
assert same_split, "the split should depend on SEED only"
assert overlap == 0, "validation images must not be training images"
del again

# %% [markdown]
# ## The model: a `LightningModule`
#
# A **`LightningModule`** is an `nn.Module` with a few more methods that
# describe training. We wrap the course's MLP (chapter 05) in one, without
# dropout, so that the comparison with the plain loop later involves no
# random numbers besides the initial weights and the batch order:
#
# - `training_step(batch, batch_idx)` computes the loss of one batch and
#   **returns** it. Lightning then calls `zero_grad`, `backward` and
#   `optimizer.step()` for us: this is *automatic optimisation*.
# - `validation_step` and `test_step` compute metrics. Lightning calls them
#   in `eval()` mode without autograd (inside `torch.inference_mode()`, or
#   `torch.no_grad()` with `Trainer(inference_mode=False)`), and sets
#   `train()` again afterwards: chapter 05's "forgot `model.eval()`" cannot
#   happen.
# - `self.log(name, value)` records a scalar. With `on_epoch=True` Lightning
#   averages it over the epoch, weighted by the batch size (the per-step
#   values get the suffix `_step`, the averages `_epoch`). In validation
#   and test the default is already `on_epoch=True`.
# - `configure_optimizers` returns the optimizer and, in the **scheduler
#   dict**, the learning-rate scheduler with when to step it: `"interval":
#   "epoch"` (or `"step"`, for schedules per optimizer step like OneCycle),
#   `"frequency"`, and `"monitor"` for `ReduceLROnPlateau` (exercise 1).
#   Here a `StepLR` halves the learning rate every `LR_STEP_EPOCHS` epochs,
#   which gives `LearningRateMonitor` something to show.
#
# `save_hyperparameters()` stores the constructor's arguments in
# `self.hparams` and in every checkpoint. The wrapped model is left out
# (`ignore=["model"]`): its weights are saved with the state dict anyway.


# %%
class LitClassifier(L.LightningModule):
    """A classifier (any nn.Module mapping images to logits) trained with cross-entropy, Adam and StepLR."""

    def __init__(self, model, lr=1e-3, lr_step_epochs=2):
        super().__init__()
        self.save_hyperparameters(ignore=["model"])
        self.model = model
        self.logits_dtype = None  # the dtype the forward pass produced (set in training_step), for the precision section
        self.modes_seen = {"train": set(), "val": set()}  # (module.training, autograd enabled) inside each step

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch  # already on the right device: Lightning moved the batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.logits_dtype = logits.dtype
        self.modes_seen["train"].add((self.training, torch.is_grad_enabled()))
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        self.log("train_acc", (logits.argmax(dim=1) == y).float().mean(), on_step=False, on_epoch=True)
        return loss  # automatic optimisation: Lightning does zero_grad, backward and step with it

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.modes_seen["val"].add((self.training, torch.is_grad_enabled()))
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(dim=1) == y).float().mean())

    def test_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("test_loss", F.cross_entropy(logits, y))
        self.log("test_acc", (logits.argmax(dim=1) == y).float().mean())

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=self.hparams.lr_step_epochs, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch", "frequency": 1}}


def new_mlp(seed=SEED):
    """The chapter's MLP, with its initial weights drawn from `seed`."""
    torch.manual_seed(seed)
    return MLP(in_features=28 * 28, hidden=HIDDEN, num_classes=10, dropout=0.0)


lit = LitClassifier(new_mlp(), LR, LR_STEP_EPOCHS)
print(lit)
print(f"{count_parameters(lit):,} parameters; hparams: {dict(lit.hparams)}")

# %% [markdown]
# ## Training with callbacks and loggers
#
# The Trainer's behaviour is extended with **callbacks**, objects whose
# methods (`on_train_epoch_end`, `on_validation_end`, ...) the Trainer calls
# at fixed points. Three built-in ones:
#
# - **`ModelCheckpoint`** saves a checkpoint after each validation and keeps
#   the `save_top_k` best ones by the `monitor`ed metric (`mode="min"` for a
#   loss); `save_last=True` also keeps `last.ckpt`, the latest state, for
#   resuming. `filename` may contain the logged metrics.
# - **`EarlyStopping`** stops training when the monitored metric has not
#   improved for `patience` validations. Our learning rate keeps shrinking,
#   so on 5,000 images the validation loss levels off after a few epochs,
#   and the run should stop well before `MAX_EPOCHS`.
# - **`LearningRateMonitor`** logs each optimizer's learning rate
#   (`lr-Adam`).
#
# **Loggers** receive everything passed to `self.log`. We give the Trainer
# two: `CSVLogger` writes a plain `metrics.csv`, and `TensorBoardLogger`
# writes the event files that TensorBoard shows (`tensorboard --logdir
# build/lightning`). And `EpochTimer` is a callback of our own that times
# each epoch (training and validation); the timing section below uses it.
# This run's epochs are not timed: they include the loggers' and the
# checkpoints' file writes, which the plain loop below does not do.


# %%
class EpochTimer(Callback):
    """Seconds per training epoch (including its validation), in self.seconds."""

    def __init__(self):
        self.seconds = []

    def on_train_epoch_start(self, trainer, pl_module):
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module):
        self.seconds.append(time.perf_counter() - self._start)


checkpoint = ModelCheckpoint(
    dirpath=RUNS / "checkpoints",
    filename="epoch{epoch:02d}-val_loss{val_loss:.4f}",
    auto_insert_metric_name=False,  # we wrote the names into filename ourselves
    monitor="val_loss",
    mode="min",
    save_top_k=2,
    save_last=True,
)
early_stop = EarlyStopping(monitor="val_loss", mode="min", patience=PATIENCE)
csv_logger = CSVLogger(save_dir=RUNS, name="csv", version="main")
tb_logger = TensorBoardLogger(save_dir=RUNS, name="tensorboard", version="main")
main_trainer = L.Trainer(
    max_epochs=MAX_EPOCHS,
    accelerator=device.type,  # "cpu", "cuda" or "mps": Lightning moves the model and every batch there
    devices=1,
    logger=[csv_logger, tb_logger],
    callbacks=[checkpoint, early_stop, LearningRateMonitor(logging_interval="epoch")],
    enable_progress_bar=False,
    enable_model_summary=False,
)
seed_everything(SEED)
main_model = LitClassifier(new_mlp(), LR, LR_STEP_EPOCHS)
with quietly() as caught:
    main_trainer.fit(main_model, datamodule=dm)
epochs_run = main_trainer.current_epoch
print(f"trained {epochs_run} of at most {MAX_EPOCHS} epochs, {main_trainer.global_step} optimizer steps")
print(f"early stopping: stopped_epoch = {early_stop.stopped_epoch} (0 = it never stopped the run), "
      f"epochs without improvement = {early_stop.wait_count}")
print(f"best val_loss {checkpoint.best_model_score.item():.4f} in {Path(checkpoint.best_model_path).name}")
print(f"{len(caught)} warnings caught during fit:", *summarise_warnings(caught) or ["  none"], sep="\n")
print("(module.training, autograd on) seen inside the steps:", {k: sorted(v) for k, v in main_model.modes_seen.items()})
assert main_model.modes_seen == {"train": {(True, True)}, "val": {(False, False)}}, "Lightning should switch eval/no-grad for validation and back"

# %% [markdown]
# The `LeafSpec` warnings caught during `fit` come from Lightning's code, not ours:
# torch 2.14 deprecates `torch.utils._pytree.LeafSpec` (a `FutureWarning`),
# and Lightning 2.6 still creates one in
# `lightning/pytorch/utilities/_pytree.py`. They are harmless, and there is
# nothing to change in your own code.
#
# `EarlyStopping.stopped_epoch` is the (0-based) epoch after which it
# stopped the run, and `trainer.current_epoch` the number of epochs that
# ran. With `min_delta=0` (the default), "not improved" means "not lower
# than the best so far", so the run stops exactly `PATIENCE` epochs after
# the best epoch, the one `ModelCheckpoint` kept as best:

# %%
best_epoch = int(re.search(r"epoch(\d+)", Path(checkpoint.best_model_path).name).group(1))
stopped_early = early_stop.stopped_epoch > 0
if EXPECT_EARLY_STOP:
    assert stopped_early and epochs_run < MAX_EPOCHS, f"EarlyStopping should have stopped before {MAX_EPOCHS} epochs"
if stopped_early:
    assert epochs_run == early_stop.stopped_epoch + 1, "current_epoch counts the epochs run, stopped_epoch is 0-based"
    assert early_stop.stopped_epoch - best_epoch == PATIENCE, "the run should stop PATIENCE epochs after the best one"
    assert early_stop.wait_count >= PATIENCE
else:
    print(f"early stopping did not trigger within {MAX_EPOCHS} epochs (fine for short runs)")
print(f"best epoch {best_epoch}, stopped after epoch {early_stop.stopped_epoch}: patience {PATIENCE}")
_ = report.record("epochs run before early stopping", epochs_run, "epochs")
_ = report.record("best epoch (0-based)", best_epoch)

# %% [markdown]
# ### The checkpoints
#
# `ModelCheckpoint` kept the two best checkpoints and `last.ckpt`. A
# Lightning checkpoint is a dictionary saved with `torch.save`; it holds far
# more than the weights: the epoch and `global_step`, the optimizer's and
# the scheduler's state, every callback's state (early stopping's counter,
# the checkpoint callback's best scores), the loops' progress and the
# hyperparameters. It contains only tensors, numbers, strings and
# dictionaries, so `torch.load(weights_only=True)`, the safe way of
# chapter 14, can read it.
#
# Note which epoch `last.ckpt` holds. In Lightning 2.6 a `ModelCheckpoint`
# with a `monitor` writes `last.ckpt` only when it also writes a top-k
# checkpoint, so `last.ckpt` is the newest epoch that made the top 2, not
# necessarily the final epoch. For a checkpoint at the end of every epoch,
# to resume from, add a second `ModelCheckpoint` without a `monitor`: it
# saves after every epoch (keeping the newest, `save_top_k=1`), and with
# `save_last=True` its `last.ckpt` follows along. The resume section below
# uses one.

# %%
# NBVAL_CHECK_OUTPUT
saved = sorted(p.name for p in (RUNS / "checkpoints").iterdir())
print(f"{len(saved)} files in {rel(RUNS / 'checkpoints')}")
last = torch.load(RUNS / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
print("keys:", list(last))
print("callback states:", [re.sub(r"\{.*", "", k) for k in last["callbacks"]])
print("hyper_parameters:", dict(last["hyper_parameters"]))
top_k_epochs = [int(re.search(r"epoch(\d+)", name).group(1)) for name in saved if name != "last.ckpt"]
assert len(top_k_epochs) == min(2, epochs_run) and "last.ckpt" in saved, "save_top_k=2 best checkpoints plus last.ckpt"
assert last["epoch"] == max(top_k_epochs), "last.ckpt is written together with the newest top-k checkpoint"
print("last.ckpt holds the newest of the top-k epochs:", last["epoch"] == max(top_k_epochs))

# %%
# which epochs made the top 2 depends on the training path (another CPU may round differently), so no output check here
print(f"the top {len(top_k_epochs)} are epochs {sorted(top_k_epochs)}; last.ckpt holds epoch {last['epoch']}, global_step {last['global_step']}")

# %% [markdown]
# ### Testing the best checkpoint
#
# After `fit`, the model in memory holds the weights of the *last* epoch,
# `PATIENCE` epochs past the best one. `trainer.test(ckpt_path="best")`
# first loads the checkpoint that `ModelCheckpoint` ranked best, then runs
# `test_step` over the test loader:

# %%
with quietly():
    main_test = main_trainer.test(main_model, datamodule=dm, ckpt_path="best", verbose=False)[0]
print(f"tested {rel(main_trainer.ckpt_path)}")
print(f"test loss {main_test['test_loss']:.4f}, test accuracy {main_test['test_acc']:.2%}")
assert Path(main_trainer.ckpt_path) == Path(checkpoint.best_model_path), "test should use the best checkpoint"
assert main_test["test_acc"] >= MIN_TEST_ACCURACY, f"test accuracy {main_test['test_acc']:.3f} < {MIN_TEST_ACCURACY}"
_ = report.record("test accuracy, best checkpoint (early-stopping run)", 100 * main_test["test_acc"], "%")

# %% [markdown]
# ## Reading the logs
#
# ### The CSV file
#
# `CSVLogger` writes one row per logging event into `metrics.csv`, with a
# column for every name ever logged and empty cells elsewhere: a row every
# `log_every_n_steps` (50) steps for `train_loss_step`, a row per epoch for
# the epoch averages, one for the validation metrics, one for `lr-Adam`.
# The `csv` module is all we need to read it back per epoch:

# %%
metrics_csv = Path(csv_logger.log_dir) / "metrics.csv"
with open(metrics_csv, newline="") as f:
    rows = list(csv.DictReader(f))
print(f"{rel(metrics_csv)}: {len(rows)} rows")
print("columns:", ", ".join(rows[0].keys()))


def per_epoch(rows, column):
    """{epoch: value} from the rows where `column` is filled in."""
    return {int(r["epoch"]): float(r[column]) for r in rows if r.get(column) and r.get("epoch")}


train_loss, val_loss = per_epoch(rows, "train_loss_epoch"), per_epoch(rows, "val_loss")
train_acc, val_acc = per_epoch(rows, "train_acc"), per_epoch(rows, "val_acc")  # on_epoch only: no suffix
lrs = [float(r["lr-Adam"]) for r in rows if r.get("lr-Adam")]  # logged at the start of each epoch
assert list(val_loss) == list(range(epochs_run)), "one validation row per epoch"
assert abs(min(val_loss.values()) - checkpoint.best_model_score.item()) < 1e-6, "the CSV's best val_loss is the checkpoint's"
assert lrs[: 2 * LR_STEP_EPOCHS] == [LR] * LR_STEP_EPOCHS + [LR / 2] * LR_STEP_EPOCHS or len(lrs) < 2 * LR_STEP_EPOCHS

fig, (ax_loss, ax_acc, ax_lr) = plt.subplots(1, 3, figsize=(10, 3))
ax_loss.plot(list(train_loss), list(train_loss.values()), "o-", label="train")
ax_loss.plot(list(val_loss), list(val_loss.values()), "o-", label="validation")
ax_acc.plot(list(train_acc), list(train_acc.values()), "o-", label="train")
ax_acc.plot(list(val_acc), list(val_acc.values()), "o-", label="validation")
for ax in (ax_loss, ax_acc):
    ax.axvline(best_epoch, color="grey", ls="--", lw=1, label="best (checkpoint)")
    ax.set_xlabel("epoch")
    ax.legend(fontsize=7)
ax_loss.set_title("cross-entropy loss")
ax_acc.set_title("accuracy")
ax_lr.step(range(len(lrs)), lrs, where="post")
ax_lr.set_yscale("log")
ax_lr.set_title("lr-Adam (LearningRateMonitor)")
ax_lr.set_xlabel("epoch")
fig.tight_layout()
plt.show()

# %% [markdown]
# The training loss keeps falling while the validation loss flattens: the
# halved learning rates make each epoch's gains smaller and the model
# starts to fit the 5,000 training images more than it generalises. Early
# stopping cut the run `PATIENCE` epochs after the best one, and the
# checkpoint from the dashed line is the one we tested.
#
# ### The TensorBoard files
#
# `TensorBoardLogger` wrote the same scalars as event files (a binary
# format of protocol buffers). Their names hold the time, the machine's
# name and the process id, which we hide here. `tensorboard --logdir
# build/lightning` shows them in a browser; we read them back with
# TensorBoard's own reader to see what is inside:

# %%
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

tb_dir = Path(tb_logger.log_dir)
event_files = sorted(tb_dir.glob("events.out.tfevents.*"))
tags = set()
for path in event_files:
    shown = re.sub(r"tfevents\..*", "tfevents.<time>.<host>.<pid>.<n>", path.name)
    print(f"{rel(tb_dir)}/{shown}  ({path.stat().st_size:,} bytes)")
    with quietly():
        events = EventAccumulator(str(path))
        events.Reload()
    tags |= set(events.Tags()["scalars"])
print("scalar tags:", ", ".join(sorted(tags)))
print("hparams.yaml:", (tb_dir / "hparams.yaml").read_text().strip().replace("\n", "; "))
hp_values = []
for path in event_files:
    with quietly():
        events = EventAccumulator(str(path))
        events.Reload()
    if "hp_metric" in events.Tags()["scalars"]:
        hp_values += [e.value for e in events.Scalars("hp_metric")]
print("values of hp_metric:", hp_values)
assert event_files, "TensorBoardLogger should have written an event file"
assert {"train_loss_epoch", "val_loss", "val_acc", "lr-Adam", "test_acc"} <= tags, f"missing scalars in {sorted(tags)}"
assert hp_values and set(hp_values) == {-1.0}, f"hp_metric should be TensorBoardLogger's placeholder -1, got {hp_values}"

# %% [markdown]
# Two tags were never logged by us: `epoch`, which Lightning adds to every
# row of metrics it hands to a logger (the CSV's `epoch` column), and
# `hp_metric`, a placeholder of -1 that `TensorBoardLogger` writes with the
# hyperparameters (`default_hp_metric=True`) so that TensorBoard's HParams
# tab has a column; log a real `hp_metric` or pass `default_hp_metric=False`.

# %% [markdown]
# ## The plain loop and Lightning, side by side
#
# What exactly did the Trainer do for us? Here is the same training written
# as a plain PyTorch loop, the way chapters 04 and 05 wrote it, with the
# same model, initial weights, batches, optimizer, scheduler and number of
# epochs:


# %%
def plain_training(model, dm, epochs, lr, lr_step_epochs, device, max_batches=None):
    """The loop Lightning runs for LitClassifier, written out (without checkpoints and logging).

    max_batches: train on only the first this many batches of each epoch (None: all), like limit_train_batches.
    Returns the validation loss and the wall-clock seconds of each epoch (training plus validation).
    """
    model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=lr_step_epochs, gamma=0.5)
    train_loader = dm.train_dataloader()  # one loader for all epochs: its generator gives a new order each epoch
    val_losses, seconds = [], []
    for _epoch in range(epochs):
        start = time.perf_counter()
        model.train()
        for x, y in itertools.islice(train_loader, max_batches):
            x, y = x.to(device), y.to(device)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            total = sum(F.cross_entropy(model(x.to(device)), y.to(device), reduction="sum").item() for x, y in dm.val_dataloader())
        val_losses.append(total / len(dm.val_set))
        scheduler.step()  # once per epoch, after the optimizer steps
        seconds.append(time.perf_counter() - start)
    return val_losses, seconds


@torch.no_grad()
def test_accuracy(model, dm, device):
    model.eval().to(device)
    correct = sum((model(x.to(device)).argmax(dim=1) == y.to(device)).sum().item() for x, y in dm.test_dataloader())
    return correct / len(dm.test_set)


plain_model = new_mlp()
plain_val, _ = plain_training(plain_model, dm, EPOCHS, LR, LR_STEP_EPOCHS, device)
plain_acc = test_accuracy(plain_model, dm, device)
print(f"plain loop: {EPOCHS} epochs, val loss per epoch {[round(v, 4) for v in plain_val]}, test accuracy {plain_acc:.2%}")

# %% [markdown]
# And the Lightning version: the `LitClassifier` from above, a Trainer, one
# call. Read the two next to each other:
#
# | the plain loop | Lightning |
# | --- | --- |
# | `model.to(device)`, `x.to(device)` in every step | `Trainer(accelerator=..., devices=...)` moves the model and each batch |
# | `for epoch ...: for x, y in loader:` | `Trainer(max_epochs=...)` and `trainer.fit(model, datamodule=dm)` |
# | `zero_grad()`, `loss.backward()`, `optimizer.step()` | `training_step` returns the loss |
# | `model.eval()`, `torch.no_grad()`, a loop over the validation loader, `model.train()` | `validation_step`; Lightning switches the modes |
# | `scheduler.step()` after each epoch | the scheduler dict: `"interval": "epoch"` |
# | `torch.save({...})` of model, optimizer, epoch; keeping the best | `ModelCheckpoint` |
# | comparing with the best loss, `break` | `EarlyStopping` |
# | `print`, writing files for plots | `self.log` and the loggers |
# | `torch.autocast`, `clip_grad_norm_`, counting batches to accumulate | `precision=`, `gradient_clip_val=`, `accumulate_grad_batches=` |
# | loading model, optimizer, scheduler, epoch and step to continue | `trainer.fit(..., ckpt_path=...)` |

# %%
def quiet_trainer(**kwargs):
    """A Trainer on this chapter's device with no logger, checkpoints, progress bar or model summary; kwargs add or override."""
    settings = dict(accelerator=device.type, devices=1, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
    return L.Trainer(**(settings | kwargs))


lightning_trainer = quiet_trainer(max_epochs=EPOCHS)
lightning_model = LitClassifier(new_mlp(), LR, LR_STEP_EPOCHS)
with quietly():
    lightning_trainer.fit(lightning_model, datamodule=dm)
    lightning_val = lightning_trainer.callback_metrics["val_loss"].item()  # read it before test() replaces the metrics
    lightning_acc = lightning_trainer.test(lightning_model, datamodule=dm, verbose=False)[0]["test_acc"]
weight_diff = max((a - b.cpu()).abs().max().item() for a, b in zip(plain_model.cpu().parameters(), lightning_model.model.cpu().parameters()))
print(f"Lightning:  last val loss {lightning_val:.4f}, test accuracy {lightning_acc:.2%}")
print(f"plain loop: last val loss {plain_val[-1]:.4f}, test accuracy {plain_acc:.2%}")
print(f"largest difference between the two models' weights: {weight_diff:.1e}")

# %%
if device.type == "cpu":
    # one process, the same CPU kernels on the same shapes in the same order: the result is bit-for-bit the same
    assert weight_diff == 0.0, f"on the CPU the plain loop and Lightning should give identical weights, differ by {weight_diff:.3g}"
else:
    print(f"on {device.type} the weights are not required to be identical (kernels may sum in another order)")
assert abs(plain_acc - lightning_acc) <= ACC_TOLERANCE, (
    f"plain loop {plain_acc:.3f} vs Lightning {lightning_acc:.3f}: they should agree within {ACC_TOLERANCE}"
)
assert abs(plain_val[-1] - lightning_val) < 0.02, "the last validation losses should agree"
_ = report.record("test accuracy, plain loop", 100 * plain_acc, "%")
_ = report.record("test accuracy, Lightning", 100 * lightning_acc, "%")
_ = report.record("largest weight difference plain vs Lightning", weight_diff)

# %% [markdown]
# Same initial weights, same batches in the same order, same operations:
# on a CPU the two runs agree to the last bit (the largest weight
# difference above is exactly 0, and the check requires it). On a GPU we
# require only the accuracy tolerance: some CUDA kernels (cuBLAS's choice of
# algorithm, atomic additions in backward passes) may sum in a different
# order, and Adam carries any rounding difference forward. Lightning
# is not magic, it runs the loop you would write. What it adds is the
# bookkeeping around the loop (hooks, `self.log`, the result collection);
# the timing table at the end of the precision section below measures what
# that costs for this tiny model on this machine. That bookkeeping does not
# touch the weights, so we expect its cost per step to stay about the same
# for a larger model, and its share of an epoch to shrink as the steps
# themselves get longer; this chapter does not measure that.
#
# ## Precision: `bf16-mixed`
#
# `Trainer(precision=...)` chooses the number format. The default is
# `"32-true"`: float32 everywhere. `"bf16-mixed"` keeps the weights and the
# optimizer in float32 but runs the forward pass under `torch.autocast`
# with bfloat16 (chapter 15): matrix multiplications get bfloat16 inputs,
# while the ops on autocast's float32 list, such as `cross_entropy`, run in
# float32 (others, such as a `sum` of a bfloat16 tensor, stay in bfloat16).
# On the CPU the
# autocast dtype is bfloat16; `"16-mixed"` (float16 with a `GradScaler`)
# is for GPUs. bfloat16 has float32's range, so no loss scaling is
# needed. It saves time and memory only where the hardware has fast
# bfloat16 arithmetic (recent GPUs, CPUs with AMX or AVX-512 BF16) and the
# matrix products are large enough to matter; elsewhere the extra
# conversions can make it *slower* (chapter 15). We measure it rather than
# guess: first the accuracy and the dtypes here, then the time, next to the
# plain loop's, in the subsection after this one.

# %%
bf16_trainer = quiet_trainer(max_epochs=EPOCHS, precision="bf16-mixed")
bf16_model = LitClassifier(new_mlp(), LR, LR_STEP_EPOCHS)
with quietly() as caught:
    bf16_trainer.fit(bf16_model, datamodule=dm)
    bf16_acc = bf16_trainer.test(bf16_model, datamodule=dm, verbose=False)[0]["test_acc"]
weight_dtype = next(bf16_model.parameters()).dtype
plugin = bf16_trainer.precision_plugin
print(f"precision plugin: {type(plugin).__name__}(precision={plugin.precision!r}, device={plugin.device!r}), scaler: {plugin.scaler}")
print(f"inside training_step the logits were {bf16_model.logits_dtype}; the weights stayed {weight_dtype}")
print(f"test accuracy after {EPOCHS} epochs: 32-true {lightning_acc:.2%}, bf16-mixed {bf16_acc:.2%}")
assert bf16_model.logits_dtype == torch.bfloat16, "under bf16-mixed the forward pass should produce bfloat16"
assert weight_dtype == torch.float32, "mixed precision keeps float32 weights"
assert abs(bf16_acc - lightning_acc) <= BF16_TOLERANCE, f"bf16 accuracy {bf16_acc:.3f} vs float32 {lightning_acc:.3f}"
_ = report.record("test accuracy, bf16-mixed", 100 * bf16_acc, "%")

# %% [markdown]
# The two accuracies are close (the check allows `BF16_TOLERANCE`):
# bfloat16's 8 significant bits are enough for the forward pass of a
# classifier.
#
# ### Timing the three, alternated
#
# A time measured in one stretch and compared with another measured a
# minute later also compares whatever else the machine was doing in each
# minute. So we time short runs of equal length (`TIMING_BATCHES` training
# batches, then the whole validation set, each from fresh weights) of the
# plain loop, Lightning with `32-true` and Lightning with `bf16-mixed`, one
# after another, `TIMING_ROUNDS` times, rotating which goes first, and take
# the median of each round's ratio. `EpochTimer` times only the epoch, not
# the Trainer's set-up before it.


# %%
def timed_lightning_run(precision):
    """Seconds of one Lightning epoch of TIMING_BATCHES training batches plus validation, from fresh weights."""
    timer = EpochTimer()
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=TIMING_BATCHES, num_sanity_val_steps=0,
                            precision=precision, callbacks=[timer])
    with quietly():
        trainer.fit(LitClassifier(new_mlp(), LR, LR_STEP_EPOCHS), datamodule=dm)
    return timer.seconds[0]


timed_runs = {
    "plain loop": lambda: plain_training(new_mlp(), dm, 1, LR, LR_STEP_EPOCHS, device, max_batches=TIMING_BATCHES)[1][0],
    "32-true": lambda: timed_lightning_run("32-true"),
    "bf16-mixed": lambda: timed_lightning_run("bf16-mixed"),
}
names = list(timed_runs)
timed_seconds = {name: [] for name in names}
for r in range(TIMING_ROUNDS):
    for name in names[r % 3:] + names[:r % 3]:  # rotate the order, so no run is always first or last
        timed_seconds[name].append(timed_runs[name]())
lightning_ratio = statistics.median(lt / pl for lt, pl in zip(timed_seconds["32-true"], timed_seconds["plain loop"]))
bf16_ratio = statistics.median(bf / lt for bf, lt in zip(timed_seconds["bf16-mixed"], timed_seconds["32-true"]))
print(f"{TIMING_ROUNDS} alternating rounds, each run {min(TIMING_BATCHES, len(dm.train_dataloader()))} training batches "
      f"+ {len(dm.val_dataloader())} validation batches:")
print(f"{'run':>11s} {'median s':>9s} {'min s':>7s} {'max s':>7s}")
for name in names:
    print(f"{name:>11s} {statistics.median(timed_seconds[name]):9.3f} {min(timed_seconds[name]):7.3f} {max(timed_seconds[name]):7.3f}")
print(f"Lightning (32-true) / plain loop: {lightning_ratio:.2f}x; bf16-mixed / 32-true: {bf16_ratio:.2f}x "
      f"(medians of {TIMING_ROUNDS} per-round ratios, on this {device.type})")
_ = report.record("time Lightning (32-true) / plain loop, median of alternating rounds", lightning_ratio, "x")
_ = report.record("time bf16-mixed / 32-true, median of alternating rounds", bf16_ratio, "x")

# %% [markdown]
# The first ratio prices Lightning's bookkeeping on a model whose steps
# are tiny: a ratio of 2 would mean that half of each Lightning step is
# Lightning's own work rather than the model's arithmetic. The second,
# bf16-mixed against 32-true, is this machine's answer for this model, and
# for a model this small it says little about bfloat16 itself, since the
# share of each step that is bookkeeping (the first ratio) is not touched
# by the number format. Each ratio is a median over the rounds, and the
# min and max columns show how much single runs moved. bfloat16
# pays off when large matrix products dominate and the hardware has fast
# bfloat16 units (GPUs with bfloat16 tensor cores, CPUs with AMX); measure
# your own model before you switch a run to `bf16-mixed`.
#
# ## Gradient clipping and accumulation as Trainer flags
#
# Two more things a plain loop does by hand:
#
# - **Gradient clipping** (chapter 10): `gradient_clip_val=CLIP_VAL` with
#   `gradient_clip_algorithm="norm"` rescales all gradients together so
#   that their total L2 norm is at most `CLIP_VAL` (this chapter's
#   parameter, 1.5 here; Lightning's own default is `None`, no clipping),
#   just before each optimizer step (`"value"` would clamp every element to
#   ±`CLIP_VAL` instead).
# - **Gradient accumulation**: `accumulate_grad_batches=4` adds up the
#   gradients of 4 batches and steps the optimizer once, which trains like
#   a batch 4 times larger on the memory of one batch. Lightning divides
#   each batch's loss by 4 (`ClosureResult.from_training_step_output` in
#   `lightning/pytorch/loops/optimization/automatic.py`), so the summed
#   gradient is the mean. If an epoch ends in the middle of a group, it
#   steps with what it has, each loss still divided by 4, so that last
#   gradient comes out smaller. Both are checked after the clipping run.
#
# Flags are easy to set and easy to mistype, so we check that they did
# what they say. A LightningModule may override the hook
# `configure_gradient_clipping`; ours measures the total gradient norm
# before and after calling Lightning's clipping. It runs once per optimizer
# step, so counting its calls also counts the steps.


# %%
def total_grad_norm(parameters):
    """L2 norm of all gradients together, as clip_grad_norm_ computes it."""
    return torch.linalg.vector_norm(torch.stack([p.grad.detach().norm() for p in parameters if p.grad is not None])).item()


class ClipProbe(LitClassifier):
    """LitClassifier that records the gradient norm before and after Lightning's gradient clipping."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.norms_before, self.norms_after = [], []

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        self.norms_before.append(total_grad_norm(self.parameters()))
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)  # Lightning clips here
        self.norms_after.append(total_grad_norm(self.parameters()))


clip_trainer = quiet_trainer(
    max_epochs=1,
    gradient_clip_val=CLIP_VAL,
    gradient_clip_algorithm="norm",
    accumulate_grad_batches=ACCUMULATE,
)
clip_model = ClipProbe(new_mlp(), LR, LR_STEP_EPOCHS)
with quietly():
    clip_trainer.fit(clip_model, datamodule=dm)
before, after = torch.tensor(clip_model.norms_before), torch.tensor(clip_model.norms_after)
expected_steps = math.ceil(batches_per_epoch / ACCUMULATE)  # per epoch; the last group may be smaller
print(f"{batches_per_epoch} batches, accumulate_grad_batches={ACCUMULATE}: {clip_trainer.global_step} optimizer steps "
      f"(ceil({batches_per_epoch}/{ACCUMULATE}) = {expected_steps})")
print(f"gradient norm before clipping: median {before.median():.3f}, max {before.max():.3f}; "
      f"{(before > CLIP_VAL).sum().item()} of {len(before)} steps above {CLIP_VAL}")
print(f"gradient norm after clipping:  max {after.max():.4f}")

# %%
assert clip_trainer.global_step == expected_steps == len(before), "one optimizer step per ACCUMULATE batches (rounded up)"
assert (after <= CLIP_VAL * (1 + 1e-4)).all(), "after clipping no step may have a gradient norm above gradient_clip_val"
assert (before > CLIP_VAL).any(), f"no gradient norm exceeded {CLIP_VAL}: lower CLIP_VAL to see clipping at work"
unclipped = before <= CLIP_VAL
assert torch.allclose(after[unclipped], before[unclipped], rtol=1e-5), "norms below the limit must stay as they were"
_ = report.record("optimizer steps per epoch with accumulate_grad_batches", clip_trainer.global_step, "steps")
_ = report.record("share of steps clipped", (before > CLIP_VAL).float().mean().item())

fig, ax = plt.subplots(figsize=(9, 2.8))
ax.plot(before, ".-", label="before clipping")
ax.plot(after, ".-", label="after clipping")
ax.axhline(CLIP_VAL, color="grey", ls="--", lw=1, label=f"gradient_clip_val = {CLIP_VAL}")
ax.set_xlabel("optimizer step")
ax.set_ylabel("total gradient norm")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# Every step whose gradient norm was above `CLIP_VAL` was scaled down to
# exactly `CLIP_VAL`; the others were left alone. (The stock hook
# `on_before_optimizer_step` would have shown only the "before" curve:
# Lightning calls it before it clips.)
#
# ### What accumulation computes
#
# That hook is the right place to look at accumulation, though: it runs
# once per optimizer step, after the group's last backward pass and before
# the step. A probe keeps each batch, and at each step the gradients and
# the weights they were computed at. Without clipping, with
# `accumulate_grad_batches=ACCUMULATE` and an epoch cut to `ACCUMULATE`
# batches plus a partial group of half as many (`limit_train_batches`), we
# compare each step's gradient with a single backward pass of the mean loss
# over the same samples, at the same weights:


# %%
class AccumulationProbe(LitClassifier):
    """LitClassifier that keeps each training batch, and the gradients and weights at each optimizer step."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batches, self.step_grads, self.step_weights = [], [], []

    def training_step(self, batch, batch_idx):
        self.batches.append([t.detach().clone() for t in batch])
        return super().training_step(batch, batch_idx)

    def on_before_optimizer_step(self, optimizer):  # after the group's last backward, before the step
        self.step_grads.append([p.grad.detach().clone() for p in self.model.parameters()])
        self.step_weights.append(copy.deepcopy(self.model.state_dict()))


def one_backward(weights, batches):
    """The gradients of the mean loss over all samples of `batches`, from one backward pass at `weights`."""
    model = new_mlp().to(device)
    model.load_state_dict(weights)
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    F.cross_entropy(model(x), y).backward()
    return [p.grad for p in model.parameters()]


partial_group = max(1, ACCUMULATE // 2)  # batches in the last, partial group (ACCUMULATE >= 2)
acc_trainer = quiet_trainer(
    max_epochs=1,
    limit_train_batches=ACCUMULATE + partial_group,
    limit_val_batches=0,
    accumulate_grad_batches=ACCUMULATE,  # and no gradient_clip_val: nothing changes the gradients
)
acc_model = AccumulationProbe(new_mlp(), LR, LR_STEP_EPOCHS)
with quietly():
    acc_trainer.fit(acc_model, datamodule=dm)
groups = [acc_model.batches[:ACCUMULATE], acc_model.batches[ACCUMULATE:]]
single = [one_backward(w, g) for w, g in zip(acc_model.step_weights, groups)]
first_rel = max((a - b).abs().max().item() for a, b in zip(acc_model.step_grads[0], single[0])) / max(b.abs().max().item() for b in single[0])
last_scale = [((a * b).sum() / (b * b).sum()).item() for a, b in zip(acc_model.step_grads[1], single[1])]  # per parameter
last_rel = max((a - partial_group / ACCUMULATE * b).abs().max().item() for a, b in zip(acc_model.step_grads[1], single[1])) / max(
    b.abs().max().item() for b in single[1])
print(f"{len(acc_model.batches)} batches of {[len(b[1]) for b in acc_model.batches]} samples -> {acc_trainer.global_step} optimizer steps")
print(f"step 1 ({ACCUMULATE} batches): largest |accumulated - one backward pass| / largest gradient = {first_rel:.1e}")
print(f"step 2 ({partial_group} batches): accumulated gradient / one backward pass, per parameter: "
      f"{[round(r, 4) for r in last_scale]} (= {partial_group}/{ACCUMULATE}), rest {last_rel:.1e}")

# %%
assert acc_trainer.global_step == 2 == len(acc_model.step_grads), "a full group, then the partial group at the end of the epoch"
assert len({len(b[1]) for b in acc_model.batches}) == 1, "equal batches: the mean of the batch means is the mean over all samples"
assert first_rel < 1e-5, f"the accumulated gradient should be the mean-loss gradient up to float32 rounding, off by {first_rel:.2g}"
assert all(abs(r - partial_group / ACCUMULATE) < 1e-5 for r in last_scale), f"the partial group should be scaled by {partial_group}/{ACCUMULATE}"
assert last_rel < 1e-5, f"the partial group's gradient should be {partial_group}/{ACCUMULATE} of the mean-loss gradient, off by {last_rel:.2g}"

# %% [markdown]
# The first step's gradient is the gradient of the mean loss over all
# `ACCUMULATE` batches, up to float32 rounding (the sum is taken in another
# order). The last, partial group's gradient points the same way but is
# `partial_group / ACCUMULATE` as long, because each of its losses was
# still divided by `ACCUMULATE`: a gradient scaled down, not a wrong one
# (with plain SGD, a proportionally smaller last step).
#
# ## Resuming from a checkpoint
#
# A long run gets interrupted: a time limit on a shared cluster, a crash,
# a laptop lid. Resuming means more than loading the weights: the optimizer
# (Adam's moment estimates and step count), the scheduler, the epoch and
# step counters, and the callbacks' states must all continue where they
# were. `trainer.fit(model, datamodule=dm, ckpt_path=...)` restores all of
# it from a checkpoint. We simulate the interruption with a run of
# `RESUME_FIRST_EPOCHS` epochs, then continue it to `RESUME_TOTAL_EPOCHS`
# with a *new* model object and a *new* Trainer, as after a restart. To keep
# these runs short, each epoch is cut to its first `RESUME_BATCHES` batches
# (`limit_train_batches`; Lightning counts such an epoch as complete). A small
# callback looks at the state at the moment training resumes.


# %%
class ResumeProbe(Callback):
    """Records the step, epoch and optimizer state when training (re)starts, and each epoch's first labels."""

    def __init__(self):
        self.first_labels = {}  # {epoch: labels of the first 10 images of its first batch}

    def on_train_start(self, trainer, pl_module):
        state = trainer.optimizers[0].state_dict()["state"]
        self.global_step, self.epoch = trainer.global_step, trainer.current_epoch
        self.adam_step = state[0]["step"].item() if state else 0
        self.exp_avg = state[0]["exp_avg"].cpu().clone() if state else None
        self.lr = trainer.optimizers[0].param_groups[0]["lr"]

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == 0:
            self.first_labels[trainer.current_epoch] = batch[1][:10].tolist()


def resume_trainer(max_epochs, probe, checkpoint_dir):
    return quiet_trainer(
        max_epochs=max_epochs,
        limit_train_batches=RESUME_BATCHES,  # short epochs: resuming works the same on a cut epoch
        limit_val_batches=1,
        enable_checkpointing=True,
        callbacks=[probe, ModelCheckpoint(dirpath=checkpoint_dir, save_last=True)],  # no monitor: saves every epoch
    )


def interrupted_and_resumed(datamodule, checkpoint_dir):
    """RESUME_FIRST_EPOCHS epochs, then a new model and Trainer continue from last.ckpt to RESUME_TOTAL_EPOCHS."""
    first_probe, resumed_probe = ResumeProbe(), ResumeProbe()
    with quietly():
        resume_trainer(RESUME_FIRST_EPOCHS, first_probe, checkpoint_dir).fit(LitClassifier(new_mlp(), LR, 1), datamodule=datamodule)
    saved_files = sorted(p.name for p in checkpoint_dir.iterdir())
    checkpoint = torch.load(checkpoint_dir / "last.ckpt", map_location="cpu", weights_only=True)  # read it before it is replaced
    with quietly():
        resumed = resume_trainer(RESUME_TOTAL_EPOCHS, resumed_probe, checkpoint_dir)
        resumed_model = LitClassifier(new_mlp(seed=SEED + 1), LR, 1)  # other initial weights: the checkpoint must replace them
        resumed.fit(resumed_model, datamodule=datamodule, ckpt_path=checkpoint_dir / "last.ckpt")
    return first_probe, resumed_probe, resumed, resumed_model, saved_files, checkpoint


# lr_step_epochs=1: the learning rate halves every epoch
first_probe, resumed_probe, resumed, _, saved_files, interrupted = interrupted_and_resumed(dm, RUNS / "resume")
print("checkpoints after the interrupted run:", saved_files)
print(f"interrupted run: last.ckpt saved at the end of epoch {interrupted['epoch']} (0-based), global_step {interrupted['global_step']}, "
      f"Adam's step count {interrupted['optimizer_states'][0]['state'][0]['step'].item():.0f}")
print(f"fresh run started at:   global_step {first_probe.global_step}, epoch {first_probe.epoch}, Adam step {first_probe.adam_step:.0f}, lr {first_probe.lr:g}")
print(f"resumed run started at: global_step {resumed_probe.global_step}, epoch {resumed_probe.epoch}, Adam step {resumed_probe.adam_step:.0f}, lr {resumed_probe.lr:g}")
print(f"resumed run ended at:   global_step {resumed.global_step}, {resumed.current_epoch} epochs")

# %%
saved_state = interrupted["optimizer_states"][0]["state"][0]
assert first_probe.global_step == 0 and first_probe.adam_step == 0, "a fresh run starts from zero"
resume_steps = min(RESUME_BATCHES, batches_per_epoch)  # optimizer steps per (cut) epoch
assert resumed_probe.global_step == interrupted["global_step"] == RESUME_FIRST_EPOCHS * resume_steps, "the step counter continues"
assert resumed_probe.epoch == RESUME_FIRST_EPOCHS, "training continues with the next epoch"
assert resumed_probe.adam_step == saved_state["step"].item(), "Adam's step count is restored"
assert torch.equal(resumed_probe.exp_avg, saved_state["exp_avg"]), "Adam's first moment is restored exactly"
assert resumed_probe.lr == LR * 0.5**RESUME_FIRST_EPOCHS, "the scheduler's learning rate is restored"
assert resumed.global_step == RESUME_TOTAL_EPOCHS * resume_steps, "the resumed run ends where an uninterrupted one would"
_ = report.record("global_step when the run resumed", resumed_probe.global_step, "steps")

# %% [markdown]
# The resumed run picked up at the saved step, epoch, learning rate and
# Adam state, even though its model object started from different random
# weights. (The checkpoint's `epoch` is the 0-based epoch at whose end it
# was saved; the loops' progress stored with it says that this epoch was
# complete, so the resumed run starts with the next one.)
#
# ### The resumed run replays epoch 0's order
#
# One thing did not continue: the order of the batches. `ResumeProbe` also
# noted the labels of the first 10 images of each epoch. Compare the
# resumed run's first epoch with the interrupted run's first epoch, and
# with what an uninterrupted run's loader would have given in that epoch:

# %%
# NBVAL_CHECK_OUTPUT
loader = dm.train_dataloader()  # what one uninterrupted fit iterates: one loader, epoch after epoch
uninterrupted_labels = [next(iter(loader))[1][:10].tolist() for _ in range(RESUME_TOTAL_EPOCHS)]
resumed_epoch = RESUME_FIRST_EPOCHS  # the first epoch the resumed run trained
print(f"epoch 0, interrupted run:                      {first_probe.first_labels[0]}")
print(f"epoch {resumed_epoch}, resumed run:                         {resumed_probe.first_labels[resumed_epoch]}")
print(f"epoch {resumed_epoch}, what an uninterrupted run would see: {uninterrupted_labels[resumed_epoch]}")
print("loader state in the checkpoint:", "combined_loader" in interrupted["loops"]["fit_loop"]["state_dict"])
assert first_probe.first_labels[0] == uninterrupted_labels[0], "the probe should see the loader's first batch"
assert resumed_probe.first_labels[resumed_epoch] == first_probe.first_labels[0], "expected the resumed run to replay epoch 0's order"
assert uninterrupted_labels[resumed_epoch] != uninterrupted_labels[0], "an uninterrupted run shuffles anew each epoch"

# %% [markdown]
# The cause is in our `train_dataloader`, together with what a checkpoint
# holds. `train_dataloader()` builds a fresh generator seeded with `SEED`
# on every call. In one `fit`, Lightning calls it once, and the loader's
# `RandomSampler` draws a new permutation from that same generator at the
# start of every epoch: epoch 1 gets the generator's second permutation. A
# new Trainer calls `train_dataloader()` again, gets a generator in its
# initial state, and so its first epoch (epoch 1) gets the *first*
# permutation, epoch 0's. The checkpoint cannot help: Lightning stores a
# loader's state only for a loader with `state_dict()` and
# `load_state_dict()` (such as torchdata's `StatefulDataLoader`), and
# `torch.utils.data.DataLoader` has neither (the `False` above).
#
# The standard fix makes the order a function of the epoch, not of how
# many epochs this process has run: a sampler that shuffles with a
# generator seeded by `seed + epoch`, with a `set_epoch(epoch)` method.
# Lightning's fit loop calls `set_epoch` on the training loader's sampler
# at the start of every epoch, with the epoch counter it restored from the
# checkpoint (`_set_sampler_epoch` in `lightning/pytorch/loops/fit_loop.py`).
# It is the scheme of `DistributedSampler` (chapter 25), here for one
# process. A plain loop calls `set_epoch` itself.


# %%
class EpochShuffleSampler(torch.utils.data.Sampler):
    """A permutation of range(n) that depends on seed + epoch only; set_epoch(epoch) chooses the epoch."""

    def __init__(self, n, seed=0):
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __len__(self):
        return self.n

    def __iter__(self):
        order = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.n, generator=order).tolist())


class ResumableDataModule(FashionMNISTDataModule):
    """FashionMNISTDataModule whose training order depends on the epoch, so a resumed run continues it."""

    def train_dataloader(self):
        sampler = EpochShuffleSampler(len(self.train_set), self.seed)
        return DataLoader(self.train_set, batch_size=self.batch_size, sampler=sampler, num_workers=0)


resumable = ResumableDataModule(TRAIN_SIZE, VAL_SIZE, TEST_SIZE, BATCH_SIZE, SEED)
resumable.setup("fit")
reference_probe = ResumeProbe()
reference_model = LitClassifier(new_mlp(), LR, 1)
with quietly():
    resume_trainer(RESUME_TOTAL_EPOCHS, reference_probe, RUNS / "uninterrupted").fit(reference_model, datamodule=resumable)
_, fixed_probe, _, fixed_model, _, _ = interrupted_and_resumed(resumable, RUNS / "resume_fixed")
fixed_diff = max((a - b).abs().max().item() for a, b in zip(reference_model.cpu().parameters(), fixed_model.cpu().parameters()))
print(f"epoch {resumed_epoch}, uninterrupted run: {reference_probe.first_labels[resumed_epoch]}")
print(f"epoch {resumed_epoch}, resumed run:       {fixed_probe.first_labels[resumed_epoch]}")
print(f"largest weight difference, resumed vs uninterrupted after {RESUME_TOTAL_EPOCHS} epochs: {fixed_diff:.1e}")

# %%
assert fixed_probe.first_labels[resumed_epoch] == reference_probe.first_labels[resumed_epoch], "the resumed run should continue the order"
assert reference_probe.first_labels[resumed_epoch] != reference_probe.first_labels[0], "each epoch should have its own order"
if device.type == "cpu":
    assert fixed_diff == 0.0, f"resumed and uninterrupted runs should end with identical weights on the CPU, differ by {fixed_diff:.3g}"
_ = report.record("largest weight difference, resumed vs uninterrupted (epoch-seeded sampler)", fixed_diff)

# %% [markdown]
# Now the resumed run sees the batches the uninterrupted one saw, and on
# the CPU it ends with the very same weights (a difference of exactly 0).
# The other runs of this chapter keep the first data module: they are
# never resumed, and the comparison with the plain loop needs only that
# both iterate the same loader in the same way. Two more things are *not* in a
# Lightning checkpoint by default: the random number generators' states
# and the position inside an epoch. So resume from checkpoints saved at the
# end of an epoch (as here), and expect a resumed run with dropout or
# random augmentation to be close to, not bit-identical with, an
# uninterrupted one, unless you save and restore the RNG states too
# (`helpers.checkpoint.rng_state` from chapter 14).
#
# ## Reproducibility: `L.seed_everything` and `deterministic=True`
#
# The course's `helpers.device.seed_everything(seed)` seeds Python's
# `random`, NumPy and torch. `L.seed_everything(seed, workers=True)` seeds
# the same three and, in addition, records the seed in environment
# variables (`PL_GLOBAL_SEED`, and `PL_SEED_WORKERS=1` with `workers=True`).
# The Trainer then gives every `DataLoader` it runs a `worker_init_fn` that
# derives a distinct, reproducible seed for each worker process, so random
# augmentations in workers (`num_workers > 0`) repeat from run to run too.
# `Trainer(deterministic=True)` calls
# `torch.use_deterministic_algorithms(True)` (chapter 15): an operation
# without a deterministic implementation then raises an error instead of
# running. Two runs with the same seed then give bit-identical weights,
# and, as a control, a run with `SEED + 1` must not. Each run trains
# `REPRO_BATCHES` batches of an MLP with dropout, so random numbers are
# drawn in every step:

# %%
def seeded_run(seed, deterministic=True):
    L.seed_everything(seed, workers=True)
    model = LitClassifier(MLP(in_features=28 * 28, hidden=HIDDEN, num_classes=10, dropout=0.2), LR, LR_STEP_EPOCHS)
    trainer = quiet_trainer(
        max_epochs=1,
        limit_train_batches=REPRO_BATCHES,
        limit_val_batches=0,
        deterministic=deterministic or None,  # None: Lightning leaves torch's switch alone
    )
    with quietly():
        trainer.fit(model, datamodule=dm)
    return model


def same_weights(m1, m2):
    return all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))


run_plain = seeded_run(SEED, deterministic=False)  # first, before deterministic=True flips the switch
run_other, run_a, run_b = seeded_run(SEED + 1), seeded_run(SEED), seeded_run(SEED)
identical, differs = same_weights(run_a, run_b), not same_weights(run_a, run_other)
print(f"PL_GLOBAL_SEED={os.environ.get('PL_GLOBAL_SEED')}, PL_SEED_WORKERS={os.environ.get('PL_SEED_WORKERS')}")
print(f"deterministic algorithms on: {torch.are_deterministic_algorithms_enabled()}")
print(f"seed {SEED} twice, deterministic=True: bit-identical weights: {identical}")
print(f"seed {SEED + 1} (the control): weights differ from seed {SEED}'s: {differs}")
print(f"seed {SEED} without deterministic=True, on {device.type}: identical to the deterministic run: {same_weights(run_a, run_plain)}")
assert identical, "same seed, same data, deterministic=True: the weights should be identical"
assert differs, "another seed draws other initial weights and dropout masks: the weights should differ"
if device.type == "cpu":
    assert same_weights(run_a, run_plain), "on the CPU these kernels are deterministic already: the seed alone should suffice"
assert torch.are_deterministic_algorithms_enabled(), "deterministic=True should have left the process-wide switch on"
torch.use_deterministic_algorithms(False)  # deterministic=True changed a process-wide switch: reset it

# %% [markdown]
# The runs draw random numbers in every step and still agree to the last
# bit, while one more seed changes the result: the seed is what makes them
# repeat. On the CPU the seed alone is enough (the run without
# `deterministic=True` matched too): the CPU kernels used here always sum
# in the same order. `deterministic=True` matters on GPUs, where some
# kernels (those using atomic additions, such as `torch.index_add` or the
# backward of an embedding on CUDA) may sum in a different order from run
# to run; with the flag they pick a deterministic implementation or raise.
# Note also that `deterministic=True` flips a setting of the whole process,
# which stays on after `fit` returns; the last line turns it off again.
#
# ## Pitfalls
#
# ### 1. A `training_step` that returns nothing
#
# In automatic optimisation Lightning steps the optimizer with the loss
# that `training_step` **returns**. Forget the `return` and there is no
# error: returning `None` is how you *skip* a batch on purpose. So
# nothing is learned, and the only sign is a warning, which a quiet
# notebook may well hide:

# %%
class NoReturn(LitClassifier):
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)  # ... and no `return loss`


def short_trainer(**kwargs):
    """A few batches only: limit_train_batches / limit_val_batches cut each epoch short."""
    return quiet_trainer(**(dict(max_epochs=1, limit_train_batches=5, limit_val_batches=1) | kwargs))


broken = NoReturn(new_mlp(), LR)
initial = copy.deepcopy(broken.model.state_dict())
trainer = short_trainer()
with quietly() as caught:
    trainer.fit(broken, datamodule=dm)
unchanged = all(torch.equal(initial[k], v) for k, v in broken.model.state_dict().items())
print(f"fit finished without an error; global_step {trainer.global_step}; weights unchanged: {unchanged}")
print("the warning:", *[textwrap.shorten(m, 100) for m in caught if "returned `None`" in m])
assert unchanged, "without a returned loss no optimizer step may change the weights"

# %% [markdown]
# The fix is `return loss`. The counter `global_step` went up anyway: a
# "step" happened, with no gradients. Treat a constant training loss or
# unchanged weights as the symptom, and do not silence that warning for
# good.
#
# ### 2. Logging a tensor with more than one element
#
# `self.log` records scalars. Passing the per-sample losses
# (`reduction="none"`), or a whole batch of predictions, fails at once:

# %%
class LogsAVector(LitClassifier):
    def training_step(self, batch, batch_idx):
        x, y = batch
        per_sample = F.cross_entropy(self(x), y, reduction="none")  # shape [B]
        self.log("train_loss", per_sample)
        return per_sample.mean()


try:
    with quietly():
        short_trainer().fit(LogsAVector(new_mlp(), LR), datamodule=dm)
except ValueError as err:
    message = re.sub(r"tensor\(\[.*?\]\)", "tensor([...])", str(err), flags=re.S)  # the error prints all 64 values
    print(f"{type(err).__name__}: {message}")

# %% [markdown]
# The fix is in the message: log a scalar, here `per_sample.mean()`. (To
# keep track of a metric over a whole epoch, such as an F1 score, log a
# `torchmetrics` metric object; Lightning then accumulates it correctly.)
#
# ### 3. Monitoring a metric that is never logged
#
# `ModelCheckpoint`, `EarlyStopping` and `ReduceLROnPlateau` find their
# metric by its *name*, among what `self.log` recorded. A typo, or a name
# only logged in another stage, is caught after the first validation:

# %%
try:
    with quietly():
        short_trainer(callbacks=[ModelCheckpoint(dirpath=RUNS / "typo", monitor="val_los")], enable_checkpointing=True).fit(
            LitClassifier(new_mlp(), LR), datamodule=dm
        )
except Exception as err:  # lightning's MisconfigurationException
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# The message lists the names that *were* logged; use one of them
# (`monitor="val_loss"`). Note also `train_loss_step` and
# `train_loss_epoch`: with `on_step=True, on_epoch=True` the logged name
# gets a suffix, so a callback watching a training metric must say which
# one it means.
#
# ## Exercises
#
# ### 1. A scheduler dict for `ReduceLROnPlateau`
#
# `ReduceLROnPlateau` (chapter 11) lowers the learning rate when a metric
# stops improving, so it must be stepped with that metric, and Lightning
# must know which logged name to pass it. Write `plateau_config(model, lr)`
# returning what `configure_optimizers` should return: an `AdamW` over
# `model.parameters()` with learning rate `lr`, and a `ReduceLROnPlateau`
# (`mode="min"`, `factor=0.5`, `patience=1`, every other setting at its
# default: `threshold`, `threshold_mode`, `cooldown`, `min_lr`, `eps`)
# stepped once per epoch with the logged `"val_loss"`. The checker parses your answer with Lightning's
# own code, so Lightning's messages come back as hints.


# %%
def plateau_config(model, lr):
    raise NotImplementedError("build the optimizer, the scheduler and the dict")


# %%
result = check("24.plateau_config", plateau_config)

# %% [markdown]
# ### 2. How many optimizer steps?
#
# `trainer.global_step` counts optimizer steps, not batches, and a
# scheduler with `"interval": "step"` (OneCycle, warm-up) must know in
# advance how many there will be. Write `optimizer_steps(num_samples,
# batch_size, epochs, accumulate_grad_batches=1, drop_last=False)`: the
# `global_step` (a Python `int`) after `epochs` epochs over a `DataLoader` of `num_samples`
# samples with that `batch_size` and `drop_last`, trained with that
# `accumulate_grad_batches`. The clipping run above is one data point; the
# checker also runs a tiny real `Trainer` on one more case (drawn with a
# fixed seed, so the verdict is the same on every run) and compares.


# %%
def optimizer_steps(num_samples, batch_size, epochs, accumulate_grad_batches=1, drop_last=False):
    raise NotImplementedError("count batches per epoch, then optimizer steps")


# %%
result = check("24.optimizer_steps", optimizer_steps)
reference_steps = solution("24.optimizer_steps")(TRAIN_SIZE, BATCH_SIZE, 1, ACCUMULATE)
assert reference_steps == clip_trainer.global_step, "the reference formula should match what the Trainer did"

# %% [markdown]
# ## Summary
#
# - A `LightningDataModule` puts the data's preparation, split and
#   loaders in one reusable class; a fixed generator makes the split
#   reproducible.
# - A `LightningModule` says what happens to one batch (`training_step`
#   returns the loss) and which optimizer and scheduler to use (the
#   scheduler dict); the `Trainer` runs the loop, and trained exactly the
#   same model as our plain loop (on the CPU bit for bit), given the same
#   weights and batches.
# - Callbacks extend the loop: `ModelCheckpoint` kept the best epochs,
#   `EarlyStopping` stopped `PATIENCE` epochs after the best one,
#   `LearningRateMonitor` logged the schedule, and two small callbacks of
#   our own timed epochs and inspected a resumed run.
# - `self.log` feeds every logger: we plotted the curves from
#   `CSVLogger`'s `metrics.csv` and read `TensorBoardLogger`'s event files.
# - `precision="bf16-mixed"`, `gradient_clip_val` and
#   `accumulate_grad_batches` are one flag each; we checked that the forward
#   pass ran in bfloat16, that the gradient norms were capped, how many
#   optimizer steps ran, and that an accumulated gradient equals one
#   backward pass over the same samples (a partial last group: scaled down). Whether bfloat16 is faster depends on the hardware:
#   measure it.
# - `trainer.fit(..., ckpt_path=...)` resumes the weights, optimizer,
#   scheduler, counters and callbacks, but not a plain `DataLoader`'s
#   shuffle: a sampler seeded by `seed + epoch` with `set_epoch` made the
#   resumed run end with the uninterrupted run's weights.
#   `trainer.test(ckpt_path="best")` tests the best checkpoint, not the
#   last weights.
# - `L.seed_everything(seed, workers=True)` plus `deterministic=True` made
#   two runs bit-identical, and another seed changed the weights; on the
#   CPU the seed alone was enough, while the flag matters for some GPU kernels.
#
# **Next:** chapter 25 trains on several processes with
# DistributedDataParallel. With Lightning that is `Trainer(devices=2,
# strategy="ddp")`; chapter 25 shows what happens underneath: ranks,
# collectives and the `DistributedSampler`.

# %%
print(f"{len(captured_warnings)} warnings were caught in this notebook ({len(set(captured_warnings))} distinct)")
report.finish()
