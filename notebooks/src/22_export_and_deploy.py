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
# # 22 · TorchScript, torch.export and ONNX
#
# A trained model inside a notebook is a Python object: to run it, you need
# Python, PyTorch and the source code of its class. Deploying it somewhere
# else (a server written in C++, a phone, a browser, another team's
# inference runtime) needs a **self-contained artefact**: a file that holds
# the computation and the weights, which something other than your Python
# code can load and run. This chapter makes four such artefacts from the same
# small MNIST model, checks that each computes what the model computes, and
# times them.
#
# **What you will learn**
# - TorchScript, the old way: `torch.jit.trace` vs `torch.jit.script`, and the
#   trap of a trace that silently freezes one branch of an `if`; `freeze`,
#   `optimize_for_inference`, saving and loading a `.pt`; and the deprecation
#   warnings that torch 2.14 prints for all of it;
# - `torch.export`, the current way: an `ExportedProgram` with dynamic batch
#   sizes (`Dim`), reading its graph, its graph signature and its range
#   constraints, saving and loading a `.pt2`; what export refuses
#   (data-dependent `if`) and the fix, `torch.cond`;
# - ONNX with the dynamo exporter (`torch.onnx.export(..., dynamo=True)`),
#   checked with `onnx.checker` and run in **onnxruntime** at several batch
#   sizes, with the largest difference from PyTorch measured;
# - AOTInductor: the exported program compiled ahead of time into a package
#   whose compiled library runs the whole forward pass in one call: no
#   Python per module or operator, and no compiling when a process starts
#   (called from Python, only the wrapping of the inputs and outputs is
#   Python; called from C++, none of it is);
# - serving: the `.pt2`, `.onnx` and AOTInductor files loaded by a fresh
#   process in which importing the course's code fails, answering requests,
#   with its answers checked against the model; and what serves models in
#   production today (TorchServe is in limited maintenance);
# - a latency table timed in interleaved rounds: eager, `torch.compile`, the
#   exported program, onnxruntime and AOTInductor;
# - pitfalls with their real messages: a dimension specialised away, an
#   operator ONNX cannot express, a non-tensor output, and exporting a model
#   still in training mode.
#
# **Prerequisites:** chapters 03 (`nn.Module`), 05 (the MNIST MLP) and 16
# (`torch.compile`: Dynamo, graphs, guards, `torch.cond` and `torch.where`).
#
# **Estimated time:** 60 minutes.

# %% tags=["parameters"]
TRAIN_IMAGES = 19_200  # MNIST training images for the model: one epoch of 150 steps at BATCH_SIZE
BATCH_SIZE = 128  # images per optimizer step
HIDDEN = (256, 128)  # hidden widths of the MLP
MIN_TEST_ACCURACY = 0.90  # the trained MLP's test accuracy the checks require (chance is 0.10)
MAX_BATCH = 1024  # the largest batch the exported program and the ONNX model accept
CHECK_BATCHES = [1, 7, 256]  # batch sizes of the parity checks (all <= MAX_BATCH)
BENCH_BATCHES = [1, 256]  # batch sizes of the latency table
BENCH_ROUNDS = 3  # interleaved timing rounds: every runner once per round, the order reversed every other round
MIN_RUN_TIME = 0.1  # seconds of timed calls per runner and round (helpers.bench.measure)
PARITY_ATOL = 1e-4  # largest absolute difference in logits accepted between PyTorch and another runtime
RUN_COMPILE = True  # time torch.compile too (its first call compiles: about 10 s on 2 cores)
RUN_AOTI = True  # build an AOTInductor package (compiles C++: the slowest cell, tens of seconds on 2 cores)
SERVE_TIMEOUT = 120  # seconds the fresh serving process may take to start, load every artefact and answer
SEED = 0

# %% [markdown]
# ## Setup
#
# `torch.compile` and AOTInductor keep what they compiled in Inductor's cache
# folder; as in chapter 16, the course keeps that folder in `build/` (set
# before the first compile). All the files this chapter writes go to
# `build/22_export/`.

# %%
import os

from helpers.paths import build_dir, rel

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(build_dir() / "inductor_cache"))

import contextlib
import io
import json
import logging
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import onnx
import onnxruntime
import torch
import torch._inductor.config
from torch import nn
from torch.export import Dim
from torch.utils.data import DataLoader, TensorDataset

import helpers.plotting  # noqa: F401  (small figures)
from helpers.bench import measure
from helpers.data import mnist
from helpers.device import pick_device, seed_everything
from helpers.exercises import check, solution  # noqa: F401  (solution: for when you are stuck)
from helpers.models import MLP
from helpers.report import ChapterReport
from helpers.training import fit

torch._inductor.config.compile_threads = 1  # compile in this process: no worker pool on a 2-core machine

generator = seed_everything(SEED)
device = pick_device()
report = ChapterReport("22_export_and_deploy")
notebook_start = time.perf_counter()
out_dir = build_dir() / "22_export"
out_dir.mkdir(parents=True, exist_ok=True)
print(f"torch {torch.__version__}, onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}, "
      f"{torch.get_num_threads()} CPU threads")
print(f"pick_device() chose {device}; this chapter exports and times on the CPU, the usual deployment target")
print("artefacts go to", rel(out_dir))

# %% [markdown]
# Exporters are chatty: they log warnings, print progress and raise errors
# several screens long, full of file paths and colour codes. Two small
# helpers keep that readable. `quietly()` runs a noisy step with its console
# output captured (and torch's log lines switched off), and `tidy()` shortens
# a message for printing.


# %%
@contextlib.contextmanager
def quietly():
    """Run a noisy step: its stdout, stderr and log lines go into the yielded StringIO."""
    captured = io.StringIO()
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            yield captured
    finally:
        logging.disable(logging.NOTSET)


def tidy(text, max_lines=8):
    """`text` without colour codes, absolute paths and memory addresses, cut to max_lines non-blank lines."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(text))
    text = re.sub(r"(?<![\w:/])(/[\w.@+-]+){2,}/?(:\d+)?", "<path>", text)
    text = re.sub(r"0x[0-9a-fA-F]+", "0x...", text)
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    return "\n".join(lines[:max_lines] + (["..."] if len(lines) > max_lines else []))


def show_error(err, max_lines=6):
    print(tidy(f"{type(err).__name__}: {err}", max_lines=max_lines))


def kilobytes(path):
    return os.path.getsize(path) / 1024


# %% [markdown]
# ## The model to deploy
#
# Chapter 05's MLP, trained for one short epoch on real MNIST digits (the
# first `TRAIN_IMAGES` training images, normalised as in chapter 05). It has
# dropout, which will matter in the pitfalls.

# %%
def mnist_tensors(raw, count=None):
    images = raw.data[:count].float().div(255).sub(0.1307).div(0.3081).unsqueeze(1)  # [N, 1, 28, 28]
    return images, raw.targets[:count]


train_x, train_y = mnist_tensors(mnist(train=True), TRAIN_IMAGES)
test_x, test_y = mnist_tensors(mnist(train=False))
train_loader = DataLoader(TensorDataset(train_x, train_y), batch_size=BATCH_SIZE, shuffle=True, generator=generator)
test_loader = DataLoader(TensorDataset(test_x, test_y), batch_size=1000)

model = MLP(hidden=HIDDEN, dropout=0.2)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
history = fit(model, train_loader, test_loader, optimizer, epochs=1)
model.eval()  # from now on: inference
test_accuracy = history.val_acc[-1]
print(f"{len(train_loader)} steps; test accuracy {test_accuracy:.2%}")
_ = report.record("MLP test accuracy", 100 * test_accuracy, "%", digits=2)

# %%
assert test_accuracy >= MIN_TEST_ACCURACY, (
    f"the MLP reached {test_accuracy:.2%} on the test set, below MIN_TEST_ACCURACY={MIN_TEST_ACCURACY:.0%}: did training run?"
)
example = test_x[:8].clone()  # the example input every exporter below traces with: 8 real digits (why clone: below)
with torch.no_grad():
    reference_logits = model(example)

# %% [markdown]
# ## TorchScript: trace and script
#
# TorchScript (2018) was PyTorch's first answer to deployment. It turns a
# module into a `ScriptModule`: a program in a small, statically typed
# subset of Python that a C++ runtime (`libtorch`) can load and run. There
# are two ways to get one, and they differ in exactly the way that matters:
#
# - `torch.jit.trace(model, example)` **runs** the model once on the example
#   and records the tensor operations that happened. Python itself is not
#   recorded: a loop becomes its unrolled body, and an `if` becomes whichever
#   branch this example took.
# - `torch.jit.script(model)` **compiles the source code** of `forward`, so
#   `if` and `for` stay in the program.
#
# To see the difference we need a model whose path depends on the *values*
# of its input. This one scales inputs larger than 1 into [-1, 1] before a
# linear layer, and leaves small inputs alone:


# %%
class Rescale(nn.Module):
    """A linear layer on inputs scaled into [-1, 1] when their largest |value| is above 1."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 2)

    def forward(self, x):
        peak = x.abs().max()
        if peak > 1.0:  # data-dependent control flow: depends on the values in x
            x = x / peak
        return self.linear(x)


rescale = Rescale().eval()
small = torch.tensor([[0.2, -0.5, 0.1, 0.3]])  # |values| <= 1: the `if` is not taken
large = torch.tensor([[3.0, -8.0, 1.0, 4.0]])  # the `if` is taken

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    traced = torch.jit.trace(rescale, (small,))
seen = {}
for w in caught:
    seen.setdefault((w.category.__name__, str(w.message)), None)
for category, message in seen:
    print(f"{category}: {message}")

# %% [markdown]
# Two kinds of warning. The `FutureWarning`s say that TorchScript is
# deprecated (more on that below). The `TracerWarning` is the one to read
# carefully: "Converting a tensor to a Python boolean might cause the trace to
# be incorrect". The tracer saw `if peak > 1.0` turn a tensor into a Python
# `bool`, and could only record the outcome. It is a *warning*: the trace is
# made anyway, and for an input that takes the other branch it is simply
# wrong:

# %%
with torch.no_grad():
    right, from_trace = rescale(large), traced(large)
print("eager model on the large input:", right)
print("traced model on the large input:", from_trace)
trace_error = (right - from_trace).abs().max().item()
print(f"largest difference: {trace_error:.2f}")
assert trace_error > 0.1, "the trace should have frozen the small-input branch and be wrong for the large input"
assert torch.allclose(traced(small), rescale(small)), "the trace is right for inputs like its example"

# %% [markdown]
# `torch.jit.script` compiles the source instead; its `.code` shows the `if`
# kept as a real branch (`prim::If` in the graph), so both inputs give the
# right answer:

# %%
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    scripted = torch.jit.script(rescale)
print(scripted.code.strip())
print("warning:", *sorted({str(w.message) for w in caught}))
with torch.no_grad():
    for name, x in (("small", small), ("large", large)):
        same = torch.allclose(scripted(x), rescale(x))
        print(f"scripted == eager on the {name} input: {same}")
        assert same, f"the scripted model should match eager on the {name} input"

# %% [markdown]
# ### TorchScript is deprecated
#
# Every `torch.jit` call above warned. The documentation says the same:
# the TorchScript pages of PyTorch's docs open with "TorchScript is
# deprecated, please use torch.export instead", and the docstrings of the
# installed `torch.jit` functions mark the deprecation with its release
# (printed below). In 2.14 each entry point also warns at run time, with a
# `FutureWarning` that names its replacements:
#
# - for **speed inside Python**, `torch.compile` (chapter 16): it captures
#   graphs from ordinary Python, with no subset of the language to keep to;
# - for **deployment**, `torch.export` (next section): a complete, Python-free
#   graph, which ONNX, AOTInductor and ExecuTorch (phones and small devices)
#   all start from.
#
# You will still meet TorchScript in existing code and model zoos, so the
# rest of this section shows the pieces you will see there: `freeze`,
# `optimize_for_inference` and saving. We script the trained MLP.
# **Freezing** (`torch.jit.freeze`, on a module in eval mode) turns its
# parameters into constants inside the graph and removes what inference does
# not need; `optimize_for_inference` freezes and then also applies CPU
# rewrites (such as fusing operations, or oneDNN layouts for convolutions).

# %%
deprecated = re.search(r"deprecated:: ([\d.]+)\s+(.+)", torch.jit.freeze.__doc__)
assert deprecated, "torch.jit.freeze's docstring should carry a `deprecated::` note"
print(f"torch.jit.freeze's docstring: deprecated since {deprecated.group(1)}: {deprecated.group(2).strip()}")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    scripted_mlp = torch.jit.script(model)
    frozen_mlp = torch.jit.freeze(scripted_mlp)
    optimized_mlp = torch.jit.optimize_for_inference(torch.jit.script(model))
print(*sorted({str(w.message) for w in caught}), sep="\n")
print("parameters held by the scripted module:", len(list(scripted_mlp.parameters())))
print("parameters held by the frozen module:  ", len(list(frozen_mlp.parameters())))
kinds = [node.kind() for node in frozen_mlp.graph.nodes() if node.kind() != "prim::Constant"]
print("operations in the frozen graph:", kinds)
assert not list(frozen_mlp.parameters()), "the frozen module should hold no parameters"
assert not any("dropout" in kind for kind in kinds), f"freezing should remove the eval-mode dropouts: {kinds}"

# %% [markdown]
# The frozen graph holds no parameters (they are constants now), and the
# dropouts are gone: in eval mode they do nothing, and freezing knows it.
# Saving a `ScriptModule` writes code and weights into one `.pt` file (a zip
# archive), which `torch.jit.load` (or `torch::jit::load` in C++) reads back
# without the `MLP` class:

# %%
script_path = out_dir / "mlp_scripted.pt"
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    torch.jit.save(scripted_mlp, script_path)
    loaded_script = torch.jit.load(script_path)
print(*sorted({str(w.message) for w in caught}), sep="\n")
with torch.no_grad():
    for name, candidate in (("loaded .pt", loaded_script), ("frozen", frozen_mlp), ("optimized", optimized_mlp)):
        diff = (candidate(example) - reference_logits).abs().max().item()
        print(f"{name:>10}: largest difference from eager {diff:.1e}")
        assert diff <= PARITY_ATOL, f"the {name} TorchScript module differs from eager by {diff:.1e}"
print(f"{rel(script_path)}: {kilobytes(script_path):.0f} KB")
_ = report.record("TorchScript .pt size", kilobytes(script_path), "KB", digits=1)

# %% [markdown]
# ## torch.export
#
# `torch.export.export(model, args)` captures the whole model as one graph of
# ATen operations, the primitive operators under every PyTorch function
# (chapter 16's AOTAutograd stage). Unlike a trace it **refuses to guess**:
# where the graph would depend on values it cannot see, it stops with an
# error instead of a warning. Unlike `torch.compile` it has no fallback to
# Python: there is one graph or there is an error. The result, an
# `ExportedProgram`, is what the rest of the deployment tools consume.
#
# By default every size of the example input is **baked in**: exported with
# a batch of 8, the program would accept only batches of 8. `dynamic_shapes`
# says which dimensions may vary, and within which range. It mirrors the
# arguments of `forward` (the MLP's is called `x`): for each input, a dict
# from dimension index to a `Dim`, a named symbolic size.

# %%
batch = Dim("batch", min=1, max=MAX_BATCH)
start = time.perf_counter()
with quietly():
    exported = torch.export.export(model, (example,), dynamic_shapes={"x": {0: batch}})
export_s = time.perf_counter() - start
print(f"exported in {export_s:.1f} s: {type(exported).__name__}")

graph_code = exported.graph_module.print_readable(print_output=False, include_stride=False, include_device=False)
graph_lines = [re.sub(r";\s+[\w ,=]+= None$", "", line.rstrip()) for line in graph_code.splitlines()
               if line.strip() and not line.strip().startswith("#")]
print("\n".join(graph_lines[:6] + ["    ..."] + graph_lines[-2:]))

# %% [markdown]
# Read the graph top down. `forward` takes the weights **as inputs**
# (`p_net_1_weight`, ...) followed by the real input `x`, whose batch size is
# a symbol (`s` followed by a number) instead of 8. Each line is one ATen
# operator (`aten.linear`, `aten.relu`, `aten.dropout` with its training flag
# baked in as `False`) with the shape of its result. There is no Python
# left: no `nn.Module`, no `if`, no method calls.
#
# The **graph signature** says what each input and output of that function
# is: `PARAMETER` (and `BUFFER`, for running statistics and the like) inputs
# are filled from the program's `state_dict`, a `USER_INPUT` is what you
# pass, and a `USER_OUTPUT` is what you get back. (A model that changes a
# buffer in `forward` gets an extra `BUFFER_MUTATION` output: the pitfalls
# show one.)

# %%
# NBVAL_CHECK_OUTPUT
signature = exported.graph_signature
for spec in signature.input_specs:
    print(f"input  {spec.arg.name:<16} {spec.kind.name:<12} {spec.target or ''}")
for spec in signature.output_specs:
    print(f"output {spec.arg.name:<16} {spec.kind.name}")
print("user inputs:", signature.user_inputs, " user outputs:", len(signature.user_outputs))

# %% [markdown]
# `range_constraints` records the range of each symbolic size, here the
# `Dim` we declared. A call with a size outside it is refused at run time.

# %%
(batch_symbol, batch_range), = exported.range_constraints.items()
print(f"range_constraints: {{{batch_symbol}: [{batch_range.lower}, {batch_range.upper}]}}")
assert (int(batch_range.lower), int(batch_range.upper)) == (1, MAX_BATCH), "the batch should range over 1..MAX_BATCH"

# %% [markdown]
# ### Saving and loading a `.pt2`
#
# `torch.export.save` writes the program (graph, signature, constraints and
# weights) into a `.pt2` archive; `torch.export.load` reads it back, again
# without the `MLP` class. `.module()` turns an `ExportedProgram` into a
# callable `nn.Module`. We check the loaded program against eager PyTorch at
# every batch size in `CHECK_BATCHES`.
#
# The archive also keeps the example inputs (`exported.example_inputs`).
# That is why `example` was made with `.clone()`: a slice such as
# `test_x[:8]` is a *view* that shares the storage of all 10,000 test
# images, and saving a view saves its whole storage (the cell measures
# both with `torch.save`).

# %%
export_path = out_dir / "mlp.pt2"
torch.export.save(exported, export_path)
loaded_program = torch.export.load(export_path)
exported_module = loaded_program.module()
export_diff = 0.0
with torch.no_grad():
    for size in CHECK_BATCHES:
        images = test_x[:size]
        diff = (exported_module(images) - model(images)).abs().max().item()
        export_diff = max(export_diff, diff)
        print(f"batch {size:>4}: largest difference from eager {diff:.1e}")
print(f"{rel(export_path)}: {kilobytes(export_path):.0f} KB")
saved = {}
for name, tensor in (("the view test_x[:8]", test_x[:8]), ("its clone", example)):
    buffer = io.BytesIO()
    torch.save(tensor, buffer)
    saved[name] = buffer.tell() / 1024
print("torch.save of", ", of ".join(f"{name}: {kb:,.0f} KB" for name, kb in saved.items()))
assert saved["the view test_x[:8]"] > 100 * saved["its clone"], "saving a view should save its whole storage"
report.record("torch.export .pt2 size", kilobytes(export_path), "KB", digits=1)
_ = report.record("torch.export parity (max abs diff)", export_diff, "", digits=8)

# %%
assert export_diff <= PARITY_ATOL, f"the loaded .pt2 differs from eager by {export_diff:.1e} (> PARITY_ATOL={PARITY_ATOL})"

# %% [markdown]
# What happens outside the declared range, or with an image of the wrong
# size? The program's guards stop the call with a message naming the check
# that failed:

# %%
refused = []
for label, bad in (("a batch above MAX_BATCH", torch.zeros(MAX_BATCH + 1, 1, 28, 28)),
                   ("images of 28x27 pixels", torch.zeros(4, 1, 28, 27))):
    try:
        exported_module(bad)
        print(f"{label}: accepted (unexpected)")
    except Exception as err:  # noqa: BLE001
        refused.append(label)
        print(f"{label}: ", end="")
        show_error(err)
assert len(refused) == 2, f"the program's guards should refuse both inputs; refused only {refused}"

# %% [markdown]
# ### Data-dependent control flow: export says no
#
# The `Rescale` model that fooled the tracer cannot fool `torch.export`: it
# needs to know whether `peak > 1.0` to choose a branch, the value is not
# known while tracing, and export stops with an error
# (`GuardOnDataDependentSymNode`) that points at the line:

# %%
try:
    with quietly():
        torch.export.export(rescale, (small,))
except Exception as err:  # noqa: BLE001
    show_error(err, max_lines=2)
    where = re.search(r'line \d+, in forward\n\s+(.+)', str(err))
    print("at:", where.group(1) if where else "(line not shown)")

# %% [markdown]
# The fix is to make the branch part of the graph. `torch.cond(pred,
# true_fn, false_fn, operands)` is a control-flow operator: both branches
# are captured as subgraphs, and the choice is made at run time, on the
# tensor `pred`. (The branches must not return an input unchanged, hence
# `x.clone()`.) When both branches are cheap, computing both and choosing
# with `torch.where` works too; the first exercise asks for a version
# without any branch.


# %%
class RescaleCond(Rescale):
    def forward(self, x):
        peak = x.abs().max()
        x = torch.cond(peak > 1.0, lambda x, peak: x / peak, lambda x, peak: x.clone(), (x, peak))
        return self.linear(x)


rescale_cond = RescaleCond().eval()
rescale_cond.load_state_dict(rescale.state_dict())
with quietly():
    cond_program = torch.export.export(rescale_cond, (small,))
cond_lines = [line.strip() for line in cond_program.graph_module.code.splitlines() if "cond" in line]
print("\n".join(re.sub(r";\s+[\w ,=]+= None$", "", line) for line in cond_lines))
with torch.no_grad():
    for name, x in (("small", small), ("large", large)):
        same = torch.allclose(cond_program.module()(x), rescale(x))
        print(f"exported torch.cond model == eager Rescale on the {name} input: {same}")
        assert same, f"the torch.cond version should match the original on the {name} input"

# %% [markdown]
# ## ONNX
#
# **ONNX** (Open Neural Network Exchange) is a file format for models that
# many runtimes read: onnxruntime (Microsoft's, on CPUs, GPUs and phones),
# TensorRT, OpenVINO, browsers (onnxruntime-web), and more. Its operators are
# standardised in numbered *opsets*. In torch 2.14, `torch.onnx.export` uses
# the **dynamo exporter** by default (`dynamo=True`): it runs
# `torch.export` first, then translates each ATen operator into ONNX
# operators (with `onnxscript`). So it takes the same `dynamic_shapes`, and
# refuses the same models. The older TorchScript-based exporter
# (`dynamo=False`) is deprecated with TorchScript.
#
# By default the weights go to a separate `.onnx.data` file next to the
# model (`external_data=True`, needed above ONNX's 2 GB limit for one file);
# for a small model one self-contained file is handier. `input_names` and
# `output_names` name the graph's inputs and outputs, which is how a runtime
# addresses them.

# %%
onnx_path = out_dir / "mlp.onnx"
start = time.perf_counter()
with quietly() as console:
    onnx_program = torch.onnx.export(
        model, (example,), onnx_path, dynamo=True, dynamic_shapes={"x": {0: batch}},
        input_names=["images"], output_names=["logits"], external_data=False, verbose=False,
    )
onnx_export_s = time.perf_counter() - start
print(f"exported in {onnx_export_s:.1f} s ({len(console.getvalue().splitlines())} console lines captured)")
print(f"{rel(onnx_path)}: {kilobytes(onnx_path):.0f} KB")
_ = report.record("ONNX file size", kilobytes(onnx_path), "KB", digits=1)

# %% [markdown]
# `onnx.checker.check_model` validates the file against the ONNX
# specification (with `full_check=True` it also infers every shape). The
# graph is the MLP in ONNX's operators: `Gemm` is a matrix product plus
# bias, and the dropouts are gone, as they should be in eval mode. The batch
# dimension is the symbol `batch`, the name of our `Dim`.

# %%
# NBVAL_CHECK_OUTPUT
onnx_model = onnx.load(onnx_path)
onnx.checker.check_model(onnx_model, full_check=True)


def dims(value_info):
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


print("opset:", onnx_model.opset_import[0].version)
print("inputs: ", [(v.name, dims(v)) for v in onnx_model.graph.input])
print("outputs:", [(v.name, dims(v)) for v in onnx_model.graph.output])
print("operators:", [node.op_type for node in onnx_model.graph.node])

# %% [markdown]
# onnxruntime loads the file into an `InferenceSession`. It takes NumPy
# arrays by input name and returns a list of arrays. We give it as many
# threads as PyTorch uses, so that the timings below compare like with like.
# By default its idle worker threads keep *spinning* (busy-waiting for the
# next call, to answer it sooner), which on a small machine takes the cores
# from everything else in the process, PyTorch's own threads included; the
# session option `session.intra_op.allow_spinning = "0"` makes them sleep.
# Then we compare its logits with PyTorch's at several batch sizes:

# %%
options = onnxruntime.SessionOptions()
options.intra_op_num_threads = torch.get_num_threads()
options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # idle threads sleep, not spin
session = onnxruntime.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
print("session inputs:", [(i.name, i.shape) for i in session.get_inputs()])
onnx_diff = 0.0
with torch.no_grad():
    for size in CHECK_BATCHES:
        images = test_x[:size]
        (logits,) = session.run(["logits"], {"images": images.numpy()})
        diff = float(np.abs(logits - model(images).numpy()).max())
        onnx_diff = max(onnx_diff, diff)
        print(f"batch {size:>4}: output {logits.shape}, largest difference from PyTorch {diff:.1e}")
_ = report.record("ONNX Runtime parity (max abs diff)", onnx_diff, "", digits=8)

# %%
assert onnx_diff <= PARITY_ATOL, f"onnxruntime differs from PyTorch by {onnx_diff:.1e} (> PARITY_ATOL={PARITY_ATOL})"

# %% [markdown]
# The differences are not zero, and that is expected: onnxruntime uses its
# own matrix-product kernels, which add the same numbers in a different
# order, and float32 rounding depends on the order. Differences near 1e-6
# on logits of size about 10 are rounding; differences of 1e-2 would be a
# bug. That is why a parity check compares against a stated tolerance, not
# for equality.
#
# ## AOTInductor
#
# `torch.compile` compiles in the Python process, at the first call, every
# time the process starts. **AOTInductor** (ahead-of-time Inductor) runs the
# same compiler once, on an `ExportedProgram`, and writes the result, a
# compiled shared library plus the weights, into a `.pt2` package.
# `torch._inductor.aoti_load_package` loads it in Python; the same package
# runs from C++ (`torch::inductor::AOTIModelPackageLoader`) with no Python at
# all. Compiling means running a C++ compiler, which is why this is the
# slowest cell of the chapter (and why `RUN_AOTI` can switch it off).

# %%
aoti_path = out_dir / "mlp_aoti.pt2"
aoti_runner = None
if RUN_AOTI:
    start = time.perf_counter()
    with quietly():
        torch._inductor.aoti_compile_and_package(exported, package_path=str(aoti_path))
    aoti_compile_s = time.perf_counter() - start
    aoti_runner = torch._inductor.aoti_load_package(str(aoti_path))
    aoti_diff = 0.0
    with torch.no_grad():
        for size in CHECK_BATCHES:
            images = test_x[:size]
            aoti_diff = max(aoti_diff, (aoti_runner(images) - model(images)).abs().max().item())
    print(f"compiled and packaged in {aoti_compile_s:.0f} s; {rel(aoti_path)}: {kilobytes(aoti_path):.0f} KB")
    print(f"largest difference from eager over batches {CHECK_BATCHES}: {aoti_diff:.1e}")
    report.record("AOTInductor compile time", aoti_compile_s, "s", digits=3)
    report.record("AOTInductor package size", kilobytes(aoti_path), "KB", digits=1)
    report.record("AOTInductor parity (max abs diff)", aoti_diff, "", digits=8)
    assert aoti_diff <= PARITY_ATOL, f"the AOTInductor package differs from eager by {aoti_diff:.1e}"
else:
    print("RUN_AOTI is False: skipping the AOTInductor package (it compiles C++ for tens of seconds)")

# %% [markdown]
# ## Serving the artefact from a fresh process
#
# The point of an artefact is that the process that serves it is not the
# process that trained it. `helpers/serve_exported.py` is a minimal model
# server: it loads the files it is given, then reads requests from stdin
# (one JSON line per request, a batch of images), and writes one JSON line
# per answer with every runtime's logits. We start it as a **new Python
# process** with `python -I` (isolated mode: neither the script's folder
# nor `PYTHONPATH` is on `sys.path`). That alone would not keep the
# course's code out: `helpers` is installed into the environment (in
# editable mode), so an isolated Python can still import it. The server's
# first act is therefore to block it: `sys.modules["helpers"] = None` (and
# the same for `notebooks` and `tests`) makes every later `import helpers`
# fail with an `ImportError`. Only then does it load the files. It reports
# whether `helpers` could be found before the block, what `import helpers`
# raises after loading, and which course modules it has imported. So what
# this measures is precise: the server does not import the course's code,
# and importing it would fail; a file that needed the `MLP` class or the
# training code to load or run would have failed here. The requests are
# test images the parity checks above did not use; the notebook then
# compares the server's answers with its own model.

# %%
serve_script = Path(helpers.plotting.__file__).with_name("serve_exported.py")
serve_args = [sys.executable, "-I", str(serve_script), "--pt2", str(export_path), "--onnx", str(onnx_path),
              "--threads", str(torch.get_num_threads())]
if aoti_runner is not None:
    serve_args += ["--aoti", str(aoti_path)]
requests, first = [], 1000  # images 1000.. of the test set
for i, size in enumerate(CHECK_BATCHES):
    requests.append({"id": i, "images": test_x[first : first + size].flatten(1).tolist()})
    first += size
start = time.perf_counter()
served = subprocess.run(serve_args, input="".join(json.dumps(r) + "\n" for r in requests),
                        capture_output=True, text=True, timeout=SERVE_TIMEOUT, cwd=out_dir)
serve_s = time.perf_counter() - start
if served.returncode != 0:
    raise RuntimeError(f"the server exited with {served.returncode}:\n{tidy(served.stderr, max_lines=20)}")
ready, *replies = [json.loads(line) for line in served.stdout.splitlines()]
stderr_lines = [re.sub(r"^[IWEF]\d{4} [\d:.]+\s+\d+ ", "", line)  # drop the log prefix: level, date, time, process id
                for line in tidy(served.stderr, max_lines=5).splitlines()]
print(f"one server process: started, loaded {len(ready['load_s'])} artefacts and answered {len(replies)} requests "
      f"in {serve_s:.1f} s; its stderr held {len(served.stderr.splitlines())} "
      f"line{'' if len(served.stderr.splitlines()) == 1 else 's'}{':' if stderr_lines else ''}")
for line in stderr_lines:
    print("   ", line)
print("loading took (first load, then the same file again):",
      {name: f"{secs:.2f} s, {ready['reload_s'][name]:.2f} s" for name, secs in ready["load_s"].items()})
print("course packages findable before the server blocked them:", ready["course_importable"])
print("`import helpers` in the server, after loading:", ready["course_import"]["helpers"])
print("course modules imported by the server:", ready["course_modules"])
serve_diff, serve_agree = {}, {}
with torch.no_grad():
    for request, reply in zip(requests, replies):
        assert reply["id"] == request["id"], "the answers came back out of order"
        expected = model(torch.tensor(request["images"]).view(-1, 1, 28, 28))
        for name, logits in reply["logits"].items():
            diff = (torch.tensor(logits) - expected).abs().max().item()
            serve_diff[name] = max(serve_diff.get(name, 0.0), diff)
            same = reply["predictions"][name] == expected.argmax(dim=1).tolist()
            serve_agree[name] = serve_agree.get(name, True) and same
for name in serve_diff:
    print(f"{name:>18}: largest logit difference from the notebook's model {serve_diff[name]:.1e}, "
          f"same predicted digits for all {sum(CHECK_BATCHES)} images: {serve_agree[name]}")
_ = report.record("fresh-process server: largest logit difference", max(serve_diff.values()), "", digits=8)

# %%
assert ready["course_modules"] == [], f"the server imported course code: {ready['course_modules']}"
assert ready["course_import"]["helpers"].startswith(("ImportError", "ModuleNotFoundError")), (
    f"`import helpers` should fail in the server, but gave: {ready['course_import']['helpers']}"
)
assert len(replies) == len(requests), f"{len(requests)} requests, {len(replies)} answers"
assert "Traceback" not in served.stderr, f"the server's stderr holds a traceback:\n{tidy(served.stderr, max_lines=20)}"
for name, diff in serve_diff.items():
    assert diff <= PARITY_ATOL, f"{name} in the fresh process differs from the model by {diff:.1e}"
    assert serve_agree[name], f"{name} in the fresh process predicted other digits than the model"

# %% [markdown]
# The files are enough: a process with PyTorch and onnxruntime installed,
# in which our code cannot even be imported, gives the model's answers.
# What the server wrote to stderr is printed above, tidied: on a machine
# without CUDA it is a warning that `torch.utils.cpp_extension` logs when
# it finds no CUDA runtime, information rather than an error (the cell
# checks that stderr holds no traceback).
# Read the load times with care. The first load of each kind includes the
# imports PyTorch makes lazily on first use (the `.pt2` deserialiser, the
# AOTInductor loader and what they pull in), so the first figures depend
# on which runtime happens to load first; the second load of the same file
# (printed after it) is the file's own cost. A real server pays both once
# at start-up, and does a warm-up call before taking traffic, as this one
# does.
#
# ### What serves models in production
#
# A real server adds what this one leaves out: HTTP or gRPC endpoints,
# **dynamic batching** (grouping requests that arrive close together into
# one batch), several model versions, workers per GPU, health checks and
# metrics. Those are the serving frameworks' job, and the landscape has
# changed:
#
# - **TorchServe**, the PyTorch project's own server, is in **limited
#   maintenance**: since 2025 its repository and documentation say it is no
#   longer actively maintained, with no planned updates, bug fixes, new
#   features or security patches. Do not start new work on it.
# - **NVIDIA Triton Inference Server** serves many formats side by side
#   through backends (PyTorch, ONNX Runtime, TensorRT and others), with
#   dynamic batching and model ensembles.
# - **KServe** runs model servers on Kubernetes (an `InferenceService`
#   resource, with autoscaling). Its documentation lists `kserve-torchserve`
#   among its built-in runtimes for the `pytorch` model format, so with
#   TorchServe in limited maintenance, check which runtime a KServe
#   deployment actually uses.
# - **Ray Serve** and **BentoML** are Python-first: you write the request
#   handler in Python around whichever runtime you load (one of the files
#   above, for instance), and they handle scaling, batching and deployment.
# - **ONNX Runtime** is a runtime, not a server, but it is what many
#   servers (Triton among them) run ONNX files with.
# - For large language models, dedicated engines handle what a generic
#   server does not (the key-value cache, batching requests of different
#   lengths token by token): **vLLM** and **SGLang**, and Hugging Face's
#   **Text Generation Inference** (TGI). This part of the landscape changes
#   quickly: read a project's repository for its maintenance status before
#   you build on it.
#
# Whichever you choose, the artefact is the interface: an exported program,
# an AOTInductor package or an ONNX file, checked for parity like this
# chapter did.

# %% [markdown]
# ## How fast is each one?
#
# The same model, the same inputs, five ways of running it, timed with
# `helpers.bench.measure` (warm-up, repeats, median) at `BENCH_BATCHES`.
# All PyTorch calls run under `torch.no_grad()`, as inference should.
# `torch.compile` is asked for `dynamic=True`, like the exported program,
# so that one compile serves every batch size; its first call (the compile)
# is done once before the timings.
#
# A machine's speed drifts while a cell runs (other programs, the clock,
# the caches), and timing the runners one after the other would hand each
# drift to whichever runner was being timed. So they take turns:
# `BENCH_ROUNDS` rounds, every runner once per round, in the order A B C D
# E, then E D C B A, and so on. The table shows, for each runner, its round
# with the median time (a real measurement, with its IQR and sample
# counts); each round's median is printed under it. Each runner is then
# compared with eager **round by round**: the speed-up of a round is
# eager's median in that round over the runner's median in the same round,
# and the table's `speed-up` column is the median of those per-round
# speed-ups. Noise alone makes the rounds agree in sign quite often (three
# coin flips come out all heads or all tails one time in four), so a
# verdict needs more than agreement: in **every** round the two medians
# must differ, in the same direction, by more than the two IQRs together
# (the spread of each one's samples). Anything less gets "no verdict". A
# row whose IQR is larger than its median is flagged: its samples spread
# more than the quantity measured, so it says nothing about speed.

# %%
runners = {"eager": model, "exported (.module())": exported_module}
if RUN_COMPILE:
    compiled_model = torch.compile(model, dynamic=True)
    start = time.perf_counter()
    with quietly(), torch.no_grad():
        compiled_model(example)
    print(f"torch.compile's first call: {time.perf_counter() - start:.1f} s")
    runners["torch.compile"] = compiled_model
else:
    print("RUN_COMPILE is False: skipping torch.compile in the table")
if aoti_runner is not None:
    runners["AOTInductor"] = aoti_runner


def torch_call(runner, images):
    def call():
        with torch.no_grad():
            return runner(images)

    return call


def onnx_call(images):
    feed = {"images": images.numpy()}
    return lambda: session.run(["logits"], feed)


def noisy(timing):
    """True when the spread of a measurement's samples exceeds the measurement."""
    return timing.iqr_s > timing.median_s


def round_outcome(base, other):
    """'faster' or 'slower' when `other`'s median lies beyond `base`'s by more than their two IQRs together, else '~'."""
    margin = base.iqr_s + other.iqr_s
    if other.median_s < base.median_s - margin:
        return "faster"
    if other.median_s > base.median_s + margin:
        return "slower"
    return "~"


def latency_table(rows, speedups):
    """Each runner's median round (median, IQR, calls, blocks) and the median of its per-round speed-ups."""
    width = max(len(t.label) for t in rows)
    lines = [f"{'what':<{width}}  {'median':>10}  {'IQR':>9}  {'calls':>6}  {'blocks':>6}  {'speed-up':>8}"]
    for t, q in zip(rows, speedups):
        lines.append(f"{t.label:<{width}}  {t.median_s * 1e6:>7,.1f} us  {t.iqr_s * 1e6:>6,.1f} us  "
                     f"{t.calls:>6}  {t.blocks:>6}  {q:>7.2f}x")
    return "\n".join(lines)


timings, rounds, verdicts = {}, {}, {}
bench_start = time.perf_counter()
for size in BENCH_BATCHES:
    images = test_x[:size]
    calls = {name: torch_call(runner, images) for name, runner in runners.items()}
    calls["onnxruntime"] = onnx_call(images)
    per_round = {name: [] for name in calls}
    for r in range(BENCH_ROUNDS):
        for name in (list(calls) if r % 2 == 0 else list(calls)[::-1]):  # A B C D E, then E D C B A, ...
            per_round[name].append(measure(calls[name], label=f"{name}, batch {size}", min_run_time=MIN_RUN_TIME))
    rounds[size] = per_round
    timings[size] = [sorted(ts, key=lambda t: t.median_s)[len(ts) // 2] for ts in per_round.values()]
    ratios = {name: [base.median_s / t.median_s for base, t in zip(per_round["eager"], ts)]
              for name, ts in per_round.items()}  # eager's time over the runner's, round by round
    print(latency_table(timings[size], [float(np.median(q)) for q in ratios.values()]))
    print("  speed-up: the median over the rounds of (eager's median / this runner's median) in the same round")
    for timing, ts in zip(timings[size], per_round.values()):
        flag = "   <- IQR > median: too noisy to read, rerun the cell" if noisy(timing) else ""
        print(f"  {timing.label:<31} rounds: " + ", ".join(f"{t.median_s * 1e6:,.0f}{'*' if noisy(t) else ''}" for t in ts)
              + f" us{flag}")
    for name, ts in per_round.items():
        if name == "eager":
            continue
        outcomes = [round_outcome(base, t) for base, t in zip(per_round["eager"], ts)]
        if any(noisy(t) for t in ts + per_round["eager"]):
            verdict = "no verdict (a round's IQR exceeds its median)"
        elif set(outcomes) == {"faster"}:
            verdict = "faster than eager in every round, beyond both IQRs"
        elif set(outcomes) == {"slower"}:
            verdict = "slower than eager in every round, beyond both IQRs"
        else:
            verdict = (f"no verdict (faster in {outcomes.count('faster')}, slower in {outcomes.count('slower')}, "
                       f"within the two IQRs in {outcomes.count('~')} of {len(outcomes)} rounds)")
        verdicts[(name, size)] = verdict
        print(f"  batch {size}, {name} vs eager, round by round: "
              + ", ".join(f"{q:.2f}x{'' if o == '~' else ' ' + o[0].upper()}" for q, o in zip(ratios[name], outcomes))
              + f" -> {verdict}")
    print("  (* marks a round whose IQR exceeds its median; F or S a round faster or slower than eager by more than"
          " the two IQRs together)\n")
    for timing in timings[size]:
        report.record(f"latency {timing.label}", timing.median_s * 1e6, "us", digits=1)
print(f"{BENCH_ROUNDS} rounds timed in {time.perf_counter() - bench_start:.0f} s")
_ = report.record("latency rows with IQR > median", sum(noisy(t) for row in timings.values() for t in row), "")

# %%
fig, axes = plt.subplots(1, len(BENCH_BATCHES) + 1, figsize=(9, 3))
for ax, size in zip(axes, BENCH_BATCHES):
    names = [t.label.rsplit(",", 1)[0] for t in timings[size]]
    ax.barh(names, [t.median_s * 1e6 for t in timings[size]], color="tab:blue")
    ax.set_title(f"batch {size}: median latency")
    ax.set_xlabel("microseconds per call")
    ax.invert_yaxis()
    if size != BENCH_BATCHES[0]:
        ax.set_yticklabels([])
sizes = {".pt (TorchScript)": script_path, ".pt2 (export)": export_path, ".onnx": onnx_path}
if aoti_runner is not None:
    sizes[".pt2 (AOTI)"] = aoti_path
axes[-1].barh(list(sizes), [kilobytes(p) for p in sizes.values()], color="tab:orange")
axes[-1].set_title("file size")
axes[-1].set_xlabel("KB")
axes[-1].invert_yaxis()
plt.show()
weight_kb = sum(p.numel() * p.element_size() for p in model.parameters()) / 1024
print(f"the weights alone: {weight_kb:.0f} KB of float32")
for name, path in sizes.items():
    if name != ".pt2 (AOTI)":
        assert weight_kb <= kilobytes(path) <= 1.25 * weight_kb, f"{name} is {kilobytes(path):.0f} KB, not mostly the weights"
if aoti_runner is not None:
    assert kilobytes(aoti_path) > kilobytes(export_path), "the AOTInductor package should add a compiled library"

# %% [markdown]
# Read the verdict lines this run printed, not a rule of thumb; what
# follows is what to expect and why, and the lines say whether this
# machine agreed. For a model this small, a batch of one takes
# microseconds, and much of that is overhead per call: Python, the module
# system, dispatching each operator. The runtimes that run the whole
# forward pass in compiled code, in one call from Python (onnxruntime,
# AOTInductor's compiled library), have the least of it, so batch 1 is
# where they should beat eager if they beat it anywhere. `torch.compile` still enters Python on every call (its guards
# check each input before the compiled code runs), so for a model this
# small it need not beat eager at all. The exported program's `.module()`
# is meant for checking, not for speed: it is an `nn.Module` whose
# `forward` is generated Python code that calls the ATen operators one by
# one, so it pays at least eager's per-call overhead, plus the guards on
# its input; expect it no faster than eager, and at a batch of one, where
# that overhead is most of the call, possibly clearly slower (its verdict
# line says where it landed here). At a large batch the three matrix
# products dominate, and what differs is mostly each runtime's matrix
# kernels and how it uses the threads. The file sizes are mostly the
# weights (about 1 MB of float32 here); the AOTInductor package adds the
# compiled library (the figure's cell checks both).
#
# Timings on a shared machine are noisy: a large IQR next to a median
# means other programs competed for the cores, and parallel kernels that
# wait for each other suffer most. A flagged row, or a row far out of line
# with the others (say, eager many times slower at a large batch than the
# same matrix products run by another runtime), is more likely such a
# collision than a property of the runtime: run the cell again before you
# conclude anything. The only check on speed is therefore a robust one:
# every runtime returns in well under a second for one image.

# %%
slowest = max(t.median_s for row in timings.values() for t in row if t.label.endswith(f"batch {BENCH_BATCHES[0]}"))
assert slowest < 1.0, f"one call at batch {BENCH_BATCHES[0]} took {slowest:.2f} s: something is very wrong"

# %% [markdown]
# ## Pitfalls
#
# The first pitfall of this chapter, the trace that freezes one branch with
# only a `TracerWarning`, is in the TorchScript section above. Four more.
#
# ### A dimension specialised away
#
# You declare the batch dynamic, but the code fixes it. A common way: a
# `reshape` that hard-codes the batch size of the training script. Export
# notices that your code makes the batch a constant and refuses, with a
# `Constraints violated` error that says what it found, and suggests (only)
# giving up the dynamic size:


# %%
class HardCodedBatch(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(784, 10)

    def forward(self, x):
        return self.linear(x.reshape(8, 784))  # 8: the batch size of the training script


try:
    with quietly():
        torch.export.export(HardCodedBatch(), (example,), dynamic_shapes={"x": {0: batch}})
except Exception as err:  # noqa: BLE001
    show_error(err, max_lines=5)

# %% [markdown]
# The fix is to let the size come from the tensor: `x.reshape(x.shape[0],
# -1)` or `x.flatten(1)`. Then export succeeds with the dynamic batch:


# %%
class FromTheTensor(HardCodedBatch):
    def forward(self, x):
        return self.linear(x.flatten(1))


with quietly():
    fixed = torch.export.export(FromTheTensor(), (example,), dynamic_shapes={"x": {0: batch}})
print("exported; batch range:", [(int(r.lower), int(r.upper)) for r in fixed.range_constraints.values()])

# %% [markdown]
# ### ONNX: an output that is not a tensor, an operator ONNX lacks
#
# An ONNX graph has tensor inputs and tensor outputs, nothing else. A
# `forward` that also returns a string (a label, a version tag) exports
# fine with `torch.export`, but the ONNX translation fails. The error is a
# long report; its "Exception summary" is the part to read. Do not expect a
# message written for you: the first line is an *internal* error of the
# exporter, `AttributeError: 'str' object has no attribute 'name'` (its
# translator took the string for a graph value, which has a `.name`). The
# useful clue is the second line, the node it failed on: the `return` with
# `'probabilities'` in it.


# %%
def onnx_summary(err, max_lines=2):
    """The 'Exception summary' lines of a torch.onnx export error."""
    text = tidy(err, max_lines=200)
    summary = text.split("## Exception summary", 1)[-1]
    lines = [line for line in summary.splitlines() if line.strip() and "⬆" not in line]
    return f"{type(err).__name__}: " + "\n".join(lines[:max_lines])


class WithLabel(nn.Module):
    def forward(self, x):
        return x.softmax(-1), "probabilities"


try:
    with quietly():
        torch.onnx.export(WithLabel(), (torch.randn(2, 3),), dynamo=True, verbose=False)
except Exception as err:  # noqa: BLE001
    print(onnx_summary(err))

# %% [markdown]
# Fix: return only tensors, and keep labels and other metadata in your
# serving code (or in the ONNX model's `metadata_props`). Second case: an
# ATen operator with no ONNX translation. Eigenvalues are one:


# %%
class Eigen(nn.Module):
    def forward(self, x):
        return torch.linalg.eigvals(x).real


try:
    with quietly():
        torch.onnx.export(Eigen(), (torch.randn(3, 3),), dynamo=True, verbose=False)
except Exception as err:  # noqa: BLE001
    print(onnx_summary(err))

# %% [markdown]
# `No ONNX function found for aten.linalg_eig`. The ways out: compute that
# part outside the model; rewrite it with operators that ONNX has; or
# supply a translation yourself with
# `torch.onnx.export(..., custom_translation_table={torch.ops.aten.linalg_eig.default: my_onnxscript_fn})`.
#
# ### Exporting a model still in training mode
#
# `model.eval()` matters to exporters as much as to evaluation (chapter
# 07). An exported graph bakes in the mode the model was in: export in
# training mode and the dropouts stay switched **on** in the deployed file.
# Its outputs are then random, and differ from the evaluated model's:

# %%
model.train()  # the mistake: forgot model.eval() after training
with quietly():
    exported_in_training = torch.export.export(model, (example,), dynamic_shapes={"x": {0: batch}})
model.eval()
train_mode_program = exported_in_training.module()
with torch.no_grad():
    first, second = train_mode_program(example), train_mode_program(example)
mode_diff = (first - reference_logits).abs().max().item()
print("dropout in the graph:", [node.args[1:] for node in exported_in_training.graph.nodes
                                if node.target == torch.ops.aten.dropout.default])
print(f"largest difference from the eval-mode model: {mode_diff:.2f}; "
      f"two calls on the same input agree: {torch.equal(first, second)}")
assert mode_diff > 1e-2 and not torch.equal(first, second), "a training-mode export should keep dropout active"

# %% [markdown]
# The arguments show it: `(0.2, True)`, dropout with p=0.2 and `train=True`.
# With BatchNorm (chapter 12) the mistake is harder to see, because nothing
# looks random: two calls on the same batch agree. But in training mode
# BatchNorm normalises each channel with the mean and variance of the batch
# it is given (and updates its running statistics), so a sample's answer
# depends on which other samples share its batch. A batch of one shows it
# most plainly. With a single value per channel (one sample after a
# `Linear` layer, or a 1x1 feature map) there is no variance to take, and
# eager PyTorch refuses with a `ValueError`. With a larger feature map the
# call runs and normalises the one image with its own pixels' statistics:
# each channel comes out with mean 0 and standard deviation 1, whatever the
# image, far from what the layer computes in eval mode. And the exported
# program does not keep eager's check: exported in training mode with a
# dynamic batch, it accepts a batch of one sample and normalises it to
# zeros (plus BatchNorm's learned shift, zero in this fresh layer), for any
# input. The cell measures each of these:

# %%
bn_image = nn.BatchNorm2d(4).train()  # running statistics still at their start: mean 0, variance 1
linear_bn = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8)).train()
sample = torch.randn(1, 4)
with torch.no_grad():
    in_two_batches = [linear_bn(torch.cat([sample, torch.randn(4, 4)]))[0] for _ in range(2)]  # other companions
batch_gap = (in_two_batches[0] - in_two_batches[1]).abs().max().item()
print(f"eager, the same sample in two batches of 5: its outputs differ by up to {batch_gap:.2f}")
bn_refused = []
for label, layer, shape in (("eager, one sample after a Linear", linear_bn, (1, 4)),
                            ("eager, one 1x1 feature map", bn_image, (1, 4, 1, 1))):
    try:
        layer(torch.randn(shape))
        print(f"{label}: ran (unexpected)")
    except ValueError as err:
        bn_refused.append(label)
        print(f"{label}: {type(err).__name__}: {err}")
image = torch.randn(1, 4, 5, 5, generator=torch.Generator().manual_seed(SEED)) * 3 + 2  # mean about 2, std about 3
with torch.no_grad():
    alone = bn_image(image)
    in_eval = bn_image.eval()(image)
channel_mean, channel_std = alone.mean(dim=(0, 2, 3)), alone.std(dim=(0, 2, 3), unbiased=False)
train_eval_gap = (alone - in_eval).abs().max().item()
print(f"eager, one 5x5 image: per-channel mean within {channel_mean.abs().max():.0e} of 0, per-channel std "
      f"{channel_std.min():.3f} to {channel_std.max():.3f}; largest difference from eval mode {train_eval_gap:.1f}")
with quietly():
    bn_program = torch.export.export(linear_bn, (torch.randn(5, 4),), dynamic_shapes={"input": {0: Dim("n", min=1, max=64)}})
with torch.no_grad():
    one_sample = [bn_program.module()(torch.randn(1, 4) * 5) for _ in range(3)]
bn_peak = max(out.abs().max().item() for out in one_sample)
print(f"exported in training mode, 3 random batches of one sample: largest |output| {bn_peak:.0e}")
assert batch_gap > 0.1, f"in training mode a sample's output should depend on its batch; it moved by {batch_gap:.2e}"
assert len(bn_refused) == 2, f"eager BatchNorm in training mode should refuse one value per channel; refused only {bn_refused}"
assert torch.allclose(channel_mean, torch.zeros(4), atol=1e-4) and torch.allclose(channel_std, torch.ones(4), atol=1e-3), (
    "a training-mode BatchNorm should normalise a single image with its own statistics (mean 0, std 1 per channel)"
)
assert train_eval_gap > 1.0, f"training and eval mode should differ clearly on one image, not by {train_eval_gap:.2f}"
assert bn_peak < 1e-3, f"the training-mode export should map a batch of one sample to (about) zeros, got {bn_peak:.2e}"

# %% [markdown]
# The graph signature gives the mode away, once the program is lowered
# with `run_decompositions()` to the functional core-ATen form that
# backends consume (ONNX and AOTInductor do this for you): the running
# statistics become `BUFFER_MUTATION` outputs.

# %%
# NBVAL_CHECK_OUTPUT
with_batchnorm = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU())
for mode in ("train", "eval"):
    getattr(with_batchnorm, mode)()
    with quietly():
        program = torch.export.export(with_batchnorm, (torch.randn(5, 4),)).run_decompositions()
    kinds = sorted({spec.kind.name for spec in program.graph_signature.output_specs})
    print(f"exported in {mode} mode: outputs {kinds}")

# %% [markdown]
# Fix: call `model.eval()` before any export (trace, script, `torch.export`,
# ONNX), and check parity against the model in eval mode, as this chapter
# did for each artefact.
#
# ## Exercises
#
# ### 1. Rescale without a branch
#
# Write `rescale_no_branch(x)`: `x / max|x|` when the largest absolute value
# of `x` is above 1, and `x` unchanged otherwise, with no Python `if` on a
# tensor value. The checker traces your function with a small input and runs
# the trace on a large one (and the other way round), then exports it. Hint:
# the tracer records tensor operations, not Python decisions, so the choice
# between the two cases has to be made by tensor operations.


# %%
def rescale_no_branch(x):
    raise NotImplementedError("your code here")


result = check("22.rescale_no_branch", rescale_no_branch)

# %% [markdown]
# ### 2. Declare the dynamic shapes of a two-input model
#
# `MaskedMeanScorer` (from `helpers.exercises.ch22`) scores sequences:
# `forward(x, mask)` with `x` of shape `[B, T, 16]` and a boolean `mask` of
# shape `[B, T]`. Write `dynamic_shapes_for(max_batch, max_len)`, returning
# the `dynamic_shapes` argument with which `torch.export.export(model, (x,
# mask), dynamic_shapes=...)` gives a program that accepts every batch size
# 1..max_batch and every length 1..max_len, and refuses larger ones. Think
# about which sizes the two inputs share, and which size the model fixes.

# %%
from helpers.exercises.ch22 import MaskedMeanScorer  # noqa: E402,F401  (the model, to try your spec on)


def dynamic_shapes_for(max_batch, max_len):
    raise NotImplementedError("your code here")


result = check("22.dynamic_shapes_spec", dynamic_shapes_for)

# %% [markdown]
# ## Summary
#
# - `torch.jit.trace` records one run: an `if` on tensor values becomes
#   whichever branch the example took, with only a `TracerWarning`;
#   `torch.jit.script` compiles the source and keeps both branches.
#   TorchScript (including `freeze`, `optimize_for_inference`, `jit.save` and
#   `jit.load`) is deprecated in 2.14: `torch.compile` replaces it for speed,
#   `torch.export` for deployment.
# - `torch.export.export` gives an `ExportedProgram`: one ATen graph, a
#   graph signature (parameters, buffers, user inputs, outputs and buffer
#   mutations) and range constraints for the `Dim`s you declared. It refuses
#   what it cannot capture (data-dependent `if`: use `torch.cond` or
#   `torch.where`; a dimension your code fixes), and its guards refuse
#   inputs outside the declared shapes. `.pt2` files save and load it.
# - The dynamo ONNX exporter starts from `torch.export`; `onnx.checker`
#   validates the file; onnxruntime ran it at each batch size it was
#   checked at within the stated tolerance of PyTorch (the largest
#   difference is recorded above).
# - AOTInductor compiles an exported program ahead of time into a package
#   that loads in Python or C++.
# - The artefacts served from a fresh process, in which importing the
#   course's code fails, gave the model's answers within the tolerance. Production
#   serving adds batching, endpoints and scaling: Triton, KServe, Ray Serve
#   or BentoML, and vLLM or SGLang for language models; TorchServe is in
#   limited maintenance.
# - Which runtime is fastest depends on the model and the batch size: the
#   table and verdict lines above (interleaved rounds, a verdict only where
#   every round differs beyond both IQRs, noisy rows flagged)
#   are this machine's answer for this model.
# - Export in `eval()` mode, and check parity of every artefact against the
#   model with a tolerance.
#
# **Next:** chapter 23 makes models smaller and faster another way:
# quantisation to 8-bit integers, measured for size, latency and accuracy.

# %%
print(f"notebook ran in {time.perf_counter() - notebook_start:.0f} s")
report.finish()
