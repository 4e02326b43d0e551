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
# # 16 · torch.compile
#
# `torch.compile(model)` is one line, and you will often read that it makes
# a model about twice as fast. Sometimes it does; sometimes it gains nothing
# and costs many seconds of compiling first. This chapter opens the box:
# what the compiler does with your Python, what it produces, and when that
# pays off. Every speed and time figure below is **measured in this run**
# with `helpers.bench` (warm-up, repeats, median), on the machine that made
# these outputs; none is copied from anywhere.
#
# **What you will learn**
# - the three stages: **Dynamo** captures an FX graph from Python bytecode,
#   **AOTAutograd** turns it into ATen forward and backward graphs,
#   **Inductor** generates fused C++ (CPU) or Triton (GPU) kernels; you will
#   read each one's output, with `torch._dynamo.explain`, custom backends,
#   `TORCH_LOGS` and Inductor's generated code;
# - the backends `eager`, `aot_eager` and `inductor`, and what each isolates;
#   the modes `default`, `reduce-overhead` and `max-autotune`;
# - graph breaks, provoked, explained and removed, and `fullgraph=True`;
# - guards, recompilation, and `dynamic=True`;
# - compiling a whole training step;
# - compile time vs steady-state time: the break-even point, and the
#   Inductor cache that makes the second compile cheap;
# - the honest table: a fused elementwise chain against a transformer block.
#
# **Prerequisites:** chapters 02 (autograd), 03 (`nn.Module`), 05 (the
# training loop) and 09 (the transformer block).
#
# **Estimated time:** 60 minutes.

# %% tags=["parameters"]
CHAIN_SIZE = 1_000_000  # elements of the elementwise-chain benchmark (float32: 4 MB)
BLOCK_SHAPE = (8, 64, 128)  # (batch, tokens, d_model) for the transformer block benchmark
N_HEADS = 4  # attention heads of that block
TRAIN_STEPS = 5  # steps of the eager vs compiled training comparison
TRAIN_STEP_BACKEND = "inductor"  # backend for the compiled training step ("aot_eager" skips code generation: quicker)
MIN_RUN_TIME = 0.5  # seconds of timed calls per measurement (helpers.bench.measure)
MIN_CHAIN_SPEEDUP = 1.3  # what the checks require of the compiled elementwise chain (about 4x is typical on CPU)
BATCH_SIZES = (2, 3, 4, 5, 6, 7)  # batch sizes of the recompilation experiment
SEED = 0

# %% [markdown]
# ## Setup
#
# Inductor keeps what it compiled in a cache folder on disk. By default
# that folder is under the system temp folder; the course keeps it in
# `build/` instead (the Makefile exports `TORCHINDUCTOR_CACHE_DIR`, and this
# cell sets it when it is unset), so that `make clean` clears it. It must be
# set before the first compile.

# %%
import os

from helpers.paths import build_dir, rel

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(build_dir() / "inductor_cache"))

import contextlib
import dataclasses
import io
import re
import time
import warnings

import matplotlib.pyplot as plt
import torch
import torch._dynamo
import torch._inductor.config
import torch._inductor.utils
import torch.nn.functional as F
from functorch.compile import make_boxed_func
from torch import nn
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.utils import counters

from helpers.bench import measure, speedup, timing_table
from helpers.device import pick_device, seed_everything
from helpers.exercises import check, solution  # noqa: F401  (solution: for when you are stuck)
from helpers.models import TransformerBlock
from helpers.report import ChapterReport

# Inductor compiles kernels in a pool of worker processes by default. On a 2-core machine that
# gains nothing, and compiling in this process keeps all of its messages in this notebook.
torch._inductor.config.compile_threads = 1

generator = seed_everything(SEED)
device = pick_device()
report = ChapterReport("16_torch_compile")
notebook_start = time.perf_counter()
print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads; pick_device() chose {device}")
print("this chapter measures on the CPU; a CUDA cell at the end runs where a GPU and Triton exist")
print("Inductor cache:", rel(os.environ["TORCHINDUCTOR_CACHE_DIR"]))

# %% [markdown]
# Compiler messages are long and full of file paths. This small helper
# shortens them for printing: it drops the prefix of torch's log lines
# (level, time, process id, source line), replaces file paths with a short
# name, and keeps the first lines.


# %%
def tidy(text, max_lines=12):
    """`text` without log prefixes, absolute paths and memory addresses, cut to max_lines lines."""
    text = re.sub(r"(?m)^[VIWED]\d{4} [\d:.]+ \d+ \S+\] (\[[^\]]*\] )*", "", text)  # torch log prefixes
    text = re.sub(r'File "[^"]*"', 'File "<cell>"', text)
    text = re.sub(r"\S*ipykernel_\d+/\d+\.py(:\d+)?", "<cell>", text)  # a notebook cell's file name
    text = re.sub(r"(?<![\w:/])(/[\w.@+-]+){2,}/?(:\d+)?", "<path>", text)
    text = re.sub(r"0x[0-9a-fA-F]+", "0x...", text)
    lines = [line.rstrip() for line in text.strip().splitlines()]
    return "\n".join(lines[:max_lines] + (["..."] if len(lines) > max_lines else []))


# %% [markdown]
# ## The claim, measured
#
# Our first test subject is a chain of elementwise operations on a vector of
# a million numbers, the kind of code that activation functions, normalisation
# and loss functions are made of:


# %%
def chain(x):
    return F.gelu(x * 1.5 + 0.5).sin() * x.sigmoid() + x.tanh()


x = torch.randn(CHAIN_SIZE, generator=generator)
eager_chain = measure(lambda: chain(x), label="eager", min_run_time=MIN_RUN_TIME)
print(eager_chain)

# %% [markdown]
# Now the one line. `torch.compile` returns at once: nothing is compiled
# until the first call, which therefore takes much longer than the others.
# We time that first call (compile plus one run) with a plain clock, and the
# later calls with `measure`. The counters in `torch._dynamo.utils.counters`
# say whether Inductor found this graph in its cache on disk (a *hit*, from
# an earlier run that used the same cache folder) or had to compile it (a
# *miss*).

# %%
counters.clear()
compiled_chain = torch.compile(chain)
start = time.perf_counter()
y_compiled = compiled_chain(x)
first_call_s = time.perf_counter() - start
first_cache = "miss" if counters["inductor"]["fxgraph_cache_miss"] else "hit"
compiled_timing = measure(lambda: compiled_chain(x), label="compiled (inductor)", min_run_time=MIN_RUN_TIME)
chain_speedup = speedup(eager_chain, compiled_timing)
print(f"first call: {first_call_s:.1f} s (Inductor's graph cache: {first_cache})")
print(timing_table([eager_chain, compiled_timing]))
report.record("elementwise chain speed-up", chain_speedup, "x", digits=2)
_ = report.record("first compiled call in the process", first_call_s, "s", digits=2)

# %%
max_diff = (y_compiled - chain(x)).abs().max().item()
print(f"largest difference from eager: {max_diff:.1e}")
assert max_diff < 1e-4, f"the compiled chain differs from eager by {max_diff:.1e}"
assert chain_speedup > MIN_CHAIN_SPEEDUP, (
    f"the compiled elementwise chain ran only {chain_speedup:.2f}x faster than eager (expected > {MIN_CHAIN_SPEEDUP}x): "
    "was the machine very busy? Rerun, or raise MIN_RUN_TIME"
)

# %% [markdown]
# Several times faster once compiled, after a first call that cost seconds.
# Both halves of that sentence matter, and the rest of the chapter explains
# both. First, what happened in those seconds.
#
# ## Stage 1: Dynamo captures an FX graph
#
# `torch.compile` does not read your source code. **TorchDynamo** hooks
# into CPython's frame evaluation (PEP 523): when the compiled function is
# called, Dynamo interprets its *bytecode* itself, one instruction at a
# time. Ordinary Python (arithmetic on ints, `if` on a Python bool, loops
# over a list) it simply runs, at trace time. Each PyTorch operation on a
# tensor it records instead of running, into an **FX graph**: a plain list
# of operations that `torch.fx` can print, inspect and transform.
#
# A *backend* is the function that receives that graph. The `backend`
# argument of `torch.compile` accepts any callable `backend(gm,
# example_inputs)` that returns something to run instead of the graph. One
# that prints the graph and then runs it unchanged is four lines:


# %%
def printing_backend(gm, example_inputs):
    """A torch.compile backend: print Dynamo's FX graph, then run it as it is."""
    print(f"Dynamo's FX graph, for inputs {[tuple(t.shape) for t in example_inputs]}:")
    print(gm.code.strip())
    return gm.forward


torch._dynamo.reset()  # forget earlier compiles, so the next call compiles again
_ = torch.compile(chain, backend=printing_backend)(x)

# %% [markdown]
# Each line is one operation, with the Python names Dynamo gave the
# intermediate results. Method calls (`sin`, `sigmoid`) and functions
# (`gelu`) are recorded alike; the constants 1.5 and 0.5 are baked in.
# `torch._dynamo.explain` runs the same capture and reports on it: how many
# graphs, how many **graph breaks** (places where Dynamo had to stop the
# graph and fall back to Python; more below), why, and the **guards**.

# %%
explanation = torch._dynamo.explain(chain)(x)
print(f"graphs: {explanation.graph_count}, graph breaks: {explanation.graph_break_count}, "
      f"operations: {explanation.op_count}")
kinds = sorted({f"{guard.name or '(global state)'}: {guard.create_fn_name()}" for guard in explanation.out_guards})
print(f"{len(explanation.out_guards)} guards, on:", *kinds, sep="\n  ")
assert explanation.graph_count == 1 and explanation.graph_break_count == 0

# %% [markdown]
# (`op_count` counts function calls such as `gelu` and the arithmetic
# operators; method calls such as `.sin()` are in the graph but not in
# that count.) A **guard** is a cheap check that Dynamo runs before every
# call to decide whether the compiled code still applies: is `x` still a
# tensor of the same dtype, device, shape and strides (`TENSOR_MATCH`), is
# `F` still the module it saw (`MODULE_MATCH`), is grad mode the same
# (`GRAD_MODE`)? When a guard fails, Dynamo compiles again (a
# *recompilation*, measured later in this chapter).
#
# ### `TORCH_LOGS`
#
# You can also make torch print what each stage does, without writing a
# backend: run your script as `TORCH_LOGS="graph_code,output_code" python
# train.py` (`graph_breaks`, `recompiles`, `guards`, `dynamic` and `+dynamo`
# are other useful names). Inside a notebook, `torch._logging.set_logs` does
# the same. The logs go to stderr, which a stored notebook must not contain,
# so we catch them with `contextlib.redirect_stderr` and print the
# beginning, tidied:

# %%
captured = io.StringIO()
with contextlib.redirect_stderr(captured):
    torch._logging.set_logs(graph_code=True)  # the same as TORCH_LOGS="graph_code"
    torch._dynamo.reset()
    torch.compile(chain, backend="eager")(x)
    torch._logging.set_logs()  # back to the defaults
graph_log = [line for line in tidy(captured.getvalue(), max_lines=100).splitlines()
             if line.strip() and "=====" not in line and "TRACED GRAPH" not in line and "class GraphModule" not in line]
print("\n".join(graph_log[:8]))

# %% [markdown]
# The log adds what the printed code leaves out: each value's dtype, shape
# and strides (`"f32[1000000][1]cpu"`), and the source line each operation
# came from.
#
# ## Stage 2: AOTAutograd
#
# Dynamo's graph holds PyTorch-level calls such as `F.gelu` and `x @ w`.
# **AOTAutograd** ("ahead-of-time autograd") traces that graph down to
# **ATen**, the library of primitive operators under every PyTorch
# function (`aten.mm`, `aten.gelu`, ...), and it runs autograd *at compile
# time*: when an input requires a gradient it produces the backward graph
# too, then splits the work into a forward graph and a backward graph, and
# decides what the forward must save for the backward. It also
# *functionalises* the graph: in-place operations become out-of-place ones,
# which makes the graph much easier to optimise.
#
# The helper `aot_autograd(fw_compiler=..., bw_compiler=...)` builds a
# backend that runs AOTAutograd and hands each of the two graphs to a
# compiler of our choice. Ours prints the graph and runs it as it is
# (`make_boxed_func` adapts it to the calling convention AOTAutograd uses):


# %%
def show_graph(title):
    def compiler(gm, example_inputs):
        print(f"--- {title} ---")
        print(gm.code.strip())
        return make_boxed_func(gm.forward)

    return compiler


def loss_fn(inputs, weight):
    return F.gelu(inputs @ weight).sum()


inputs = torch.randn(4, 8, generator=generator)
weight = torch.randn(8, 3, generator=generator, requires_grad=True)
torch._dynamo.reset()
aot_backend = aot_autograd(fw_compiler=show_graph("forward graph (ATen)"), bw_compiler=show_graph("backward graph (ATen)"))
loss = torch.compile(loss_fn, backend=aot_backend)(inputs, weight)
loss.backward()  # the backward graph is compiled (and printed) at the first backward
expected = torch.autograd.grad(loss_fn(inputs, weight), weight)[0]
print("gradient equals eager autograd:", torch.allclose(weight.grad, expected, atol=1e-5))
assert torch.allclose(weight.grad, expected, atol=1e-5)

# %% [markdown]
# Read the two graphs together. The forward returns the loss *and* the
# tensors the backward needs (`primals_1`, the input, and `mm`, the result of
# the matrix product): that is autograd's saved-tensor bookkeeping, decided
# once, at compile time. The backward graph is ordinary ATen code:
# `gelu_backward`, a transpose and a matrix product for the gradient of
# `weight`, and `None` for the input, which needs no gradient.
#
# ## Stage 3: Inductor generates code
#
# **Inductor**, the default backend, takes AOTAutograd's graphs and writes
# new code for them: C++ with OpenMP and vector instructions on a CPU, Triton
# kernels on a GPU. Its most important optimisation is **fusion**: a run of
# elementwise operations becomes one loop that reads each input element
# once, computes everything in registers, and writes the result once.
# Matrix products and convolutions it usually hands to the vendor libraries
# (MKL, oneDNN, cuBLAS) as "extern kernels".
#
# `torch._inductor.utils.run_and_get_code(fn, *args)` compiles and runs
# `fn`, and returns the Python module Inductor generated. We print the names
# of the kernels it defines, and the heart of the one kernel:

# %%
_, generated = torch._inductor.utils.run_and_get_code(torch.compile(chain), x)
code = "\n".join(generated)
kernels = sorted(set(re.findall(r"^(cpp_fused_\w+) = ", code, flags=re.M)))
print(f"{len(generated)} generated module, {len(code.splitlines())} lines; kernels: {kernels}")
body = [line.strip() for line in code.splitlines() if re.match(r"\s*auto tmp\d+ = ", line)]
print("\n".join(body[:12] + ["..."] + body[-3:]))

# %%
# NBVAL_CHECK_OUTPUT
print("fused kernels:", len(kernels))
assert len(kernels) == 1, f"expected the whole chain fused into one kernel, got {kernels}"

# %% [markdown]
# One kernel for the whole chain, with a name that lists what it fused
# (`add`, `gelu`, `mul`, `sigmoid`, `sin`, `tanh`). Inside, `tmp0` is
# loaded from memory once (`Vectorized<float>::loadu`: 8 or 16 floats per
# instruction), every later `tmp` is a register, and GELU has been expanded
# into its formula with `erf`. Eager PyTorch runs the same chain as eight
# separate operators, and each reads its inputs from memory and writes a
# new tensor back (4 MB each with the default `CHAIN_SIZE`). For such simple arithmetic the memory traffic is the
# bottleneck (the code is *memory-bound*), so doing the work in one pass is
# where the speed-up comes from.
#
# ## Backends: what each one isolates
#
# The three stages can be switched on one at a time, which is how you find
# which one is to blame when a compiled model is wrong or slow:
#
# | backend | Dynamo | AOTAutograd | Inductor | use it to |
# | --- | --- | --- | --- | --- |
# | `"eager"` | yes | no | no | test graph capture alone: the graph runs with ordinary PyTorch |
# | `"aot_eager"` | yes | yes | no | add AOTAutograd (ATen, functionalisation, the backward graph), still without code generation |
# | `"inductor"` (default) | yes | yes | yes | the real thing |
#
# If a bug appears with `inductor` but not with `aot_eager`, it is in the
# generated code; if it already appears with `eager`, it is in how your
# Python was captured. (`torch._dynamo.list_backends()` lists the others.)
# The timings and outputs side by side:

# %%
torch._dynamo.reset()
backends = {name: torch.compile(chain, backend=name) for name in ("eager", "aot_eager")}
backend_timings = [eager_chain]
reference = chain(x)
for name, fn in backends.items():
    same = torch.equal(fn(x), reference)
    print(f"backend {name!r:12}: output identical to eager: {same}")
    assert same, f"backend {name!r} changed the result"
    backend_timings.append(measure(lambda fn=fn: fn(x), label=f"backend='{name}'", min_run_time=MIN_RUN_TIME))
inductor_again = torch.compile(chain)  # from the cache: the same code as above
inductor_diff = (inductor_again(x) - reference).abs().max().item()
print(f"backend 'inductor'   : largest difference from eager {inductor_diff:.1e}")
backend_timings.append(measure(lambda: inductor_again(x), label="backend='inductor'", min_run_time=MIN_RUN_TIME))
print(timing_table(backend_timings))
assert inductor_diff < 1e-4

# %% [markdown]
# `eager` and `aot_eager` give bit-identical results, because they run the
# same ATen operators as plain PyTorch. They should also time about the same
# as plain eager: the same operators, plus a few microseconds of guard
# checks per call, so a larger gap in the table is noise from the machine.
# Only Inductor's generated code changes the speed. It also changes the
# last bits of the result, because it computes GELU, `sigmoid` and `tanh`
# with its own vectorised formulas; compare compiled outputs with
# `torch.allclose`, never `torch.equal`.
#
# ## Modes
#
# `mode=` tells Inductor how hard to try:
#
# - `"default"`: a balance of compile time and speed.
# - `"reduce-overhead"`: additionally records the whole graph as a **CUDA
#   graph** and replays it, which removes the per-kernel launch cost of the
#   CPU driving the GPU; it helps small batches on a GPU most. CUDA graphs do
#   not exist on the CPU, so there it compiles the same code as the default.
# - `"max-autotune"`: benchmarks several implementations of each matrix
#   product and convolution (Triton and C++ templates against the vendor
#   libraries) at compile time and keeps the fastest; compiles take minutes,
#   not seconds, so we only describe it here. (`"max-autotune-no-cudagraphs"`
#   is the same without CUDA graphs.)
#
# The default and `reduce-overhead`, measured on the chain:

# %%
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    reduce_overhead = torch.compile(chain, mode="reduce-overhead")
    start = time.perf_counter()
    reduce_overhead(x)
    ro_first_s = time.perf_counter() - start
for w in caught:
    print("warning:", tidy(str(w.message), max_lines=2))
ro_timing = measure(lambda: reduce_overhead(x), label="mode='reduce-overhead'", min_run_time=MIN_RUN_TIME)
default_timing = measure(lambda: inductor_again(x), label="mode='default'", min_run_time=MIN_RUN_TIME)
print(f"reduce-overhead: first call {ro_first_s:.1f} s")
print(timing_table([eager_chain, default_timing, ro_timing]))
_ = report.record("reduce-overhead vs default (CPU)", speedup(default_timing, ro_timing), "x", digits=2)

# %% [markdown]
# On a CPU the two modes run the same kernel, so any difference between
# them above is noise.
#
# ## Compile time: the cache, and the break-even point
#
# The first call above cost seconds. Part of that is paid once per process
# (importing the compiler's modules, checking the C++ compiler); the rest is
# Dynamo's trace, AOTAutograd, Inductor's code generation and the C++
# compiler. Inductor keeps its results on disk, in the **FX graph cache**
# (`torch._inductor.config.fx_graph_cache`, on by default) under the cache
# folder printed in the setup cell, so whether that first call compiled
# anything depends on earlier runs: the line above says whether it was a
# cache *hit* or *miss*.
#
# To measure both cases every time, we compile the chain twice more.
# First **cold**: `torch._inductor.utils.fresh_cache(dir=...)` points
# Inductor at a new, empty cache folder (here inside `build/`, deleted
# afterwards), so everything is compiled from scratch. Then **warm**:
# `torch._dynamo.reset()` throws away everything compiled *in this
# process*, and we compile again with the course's cache folder, which
# holds this graph since the first call. Dynamo still traces the function,
# but Inductor finds the finished code on disk. The same happens in a new
# process, for example the next time you run a training script.

# %%
print("FX graph cache on:", torch._inductor.config.fx_graph_cache, "| folder:", rel(os.environ["TORCHINDUCTOR_CACHE_DIR"]))
t_eager, t_compiled = eager_chain.median_s, compiled_timing.median_s

torch._dynamo.reset()
counters.clear()
with torch._inductor.utils.fresh_cache(dir=str(build_dir())):  # an empty cache folder, removed afterwards
    cold_compiled = torch.compile(chain)
    start = time.perf_counter()
    cold_compiled(x)
    cold_compile_s = time.perf_counter() - start - t_compiled  # compile time: the first call less one run
cold_misses = counters["inductor"]["fxgraph_cache_miss"]

torch._dynamo.reset()
counters.clear()
warm_compiled = torch.compile(chain)
start = time.perf_counter()
warm_compiled(x)
warm_compile_s = time.perf_counter() - start - t_compiled
warm_hits = counters["inductor"]["fxgraph_cache_hit"]
print(f"cold compile (empty cache, cache misses: {cold_misses}): {cold_compile_s:6.2f} s")
print(f"warm compile (after torch._dynamo.reset(), cache hits: {warm_hits}): {warm_compile_s:6.2f} s")
report.record("cold compile (empty cache)", cold_compile_s, "s", digits=2)
report.record("warm-cache compile", warm_compile_s, "s", digits=2)
_ = report.record("cold vs warm compile", cold_compile_s / warm_compile_s, "x", digits=1)

# %%
assert cold_misses >= 1, "the compile with an empty cache folder should have missed the FX graph cache"
assert warm_hits >= 1, "the second compile should have found the graph in Inductor's FX graph cache"
assert warm_compile_s < cold_compile_s, "a compile from the cache should be quicker than one from scratch"

# %% [markdown]
# Now the economics. A compiled function costs its compile time once, then
# less per call than eager. After `n` calls, eager has cost
# `n × t_eager` and compiled `t_compile + n × t_compiled`; compiling pays
# off from the first `n` where the second is smaller: the **break-even
# point**. The plot draws both lines from the measured times, for the cold
# and the warm compile:

# %%
calls = torch.arange(0, int(2 * cold_compile_s / (t_eager - t_compiled)) + 2, dtype=torch.float64)
eager_total = calls * t_eager
cold_total = cold_compile_s + calls * t_compiled
warm_total = warm_compile_s + calls * t_compiled
# the first n >= 1 where the compiled total has caught up with eager:
break_even_cold = int(calls[(cold_total <= eager_total) & (calls >= 1)].min())
break_even_warm = int(calls[(warm_total <= eager_total) & (calls >= 1)].min())
fig, ax = plt.subplots(figsize=(9, 3))
ax.plot(calls, eager_total, label=f"eager: {t_eager * 1e3:.1f} ms per call")
ax.plot(calls, cold_total, label=f"compiled, cold: {cold_compile_s:.1f} s + {t_compiled * 1e3:.1f} ms per call")
ax.plot(calls, warm_total, label=f"compiled, warm cache: {warm_compile_s:.2f} s + {t_compiled * 1e3:.1f} ms per call")
ax.axvline(break_even_cold, color="gray", linestyle=":")
ax.set(xlabel="calls", ylabel="total seconds", title=f"elementwise chain: break-even after {break_even_cold} calls (cold)")
ax.legend(fontsize=8)
plt.show()
print(f"break-even: {break_even_cold} calls with the cold compile, {break_even_warm} with a warm cache")
report.record("break-even calls (cold compile)", break_even_cold)
_ = report.record("break-even calls (warm cache)", break_even_warm)

# %% [markdown]
# With a cold compile, the compiled chain needs many calls (how many: the
# line above) before it has paid for itself. That is nothing for a training
# run of thousands of steps, or a server answering requests all day; it is a
# loss for a script that calls the function only a few times, or for a
# notebook cell you run once. The warm cache moves the break-even point a
# long way down, which is why the cache folder is worth keeping between runs
# (and `make clean` is the way to clear it). A function that gains less per
# call, such as the transformer block below, needs proportionally more calls,
# and one that gains nothing never breaks even.
#
# ## The honest table: a transformer block
#
# The chain was the best case: nothing but memory-bound elementwise work.
# Chapter 09's `TransformerBlock` is a more typical model: two LayerNorms,
# attention, and an MLP. Most of its time goes into matrix products
# (the Q/K/V and output projections, the attention scores, the MLP's two
# `Linear` layers). We compile it for inference (`eval()`, `no_grad`) and
# keep the generated code to see what Inductor did with it:

# %%
torch.manual_seed(SEED)
batch, tokens, d_model = BLOCK_SHAPE
block = TransformerBlock(d_model, N_HEADS).eval()
tokens_in = torch.randn(batch, tokens, d_model, generator=generator)
compiled_block = torch.compile(block)
with torch.no_grad():
    start = time.perf_counter()
    block_out, block_code = torch._inductor.utils.run_and_get_code(compiled_block, tokens_in)
    block_first_s = time.perf_counter() - start
    block_eager = measure(lambda: block(tokens_in), label="transformer block, eager", min_run_time=MIN_RUN_TIME)
    block_compiled = measure(lambda: compiled_block(tokens_in), label="transformer block, compiled", min_run_time=MIN_RUN_TIME)
    block_diff = (block_out - block(tokens_in)).abs().max().item()
block_src = "\n".join(block_code)
fused = sorted(set(re.findall(r"^(cpp_fused_\w+) = ", block_src, flags=re.M)))
library_calls = re.findall(r"(extern_kernels\.\w+|torch\.ops\.\w+\.\w+)(?:\.default)?\(", block_src)
block_speedup = speedup(block_eager, block_compiled)
print(f"first call {block_first_s:.1f} s; largest difference from eager {block_diff:.1e}")
print(f"generated code: {len(fused)} fused C++ kernels, and {len(library_calls)} calls into libraries: "
      f"{sorted(set(library_calls))}")
report.record("transformer block speed-up", block_speedup, "x", digits=2)
_ = report.record("transformer block compile (first call)", block_first_s, "s", digits=1)

# %%
assert block_diff < 1e-3, f"the compiled block differs from eager by {block_diff:.1e}"
assert len(library_calls) >= 4, "the block's matrix products should run in library kernels"

# %% [markdown]
# Both measurements side by side, from this run:

# %%
print(timing_table([dataclasses.replace(eager_chain, label="elementwise chain, eager"),
                    dataclasses.replace(compiled_timing, label="elementwise chain, compiled")]))
print()
print(timing_table([block_eager, block_compiled]))
print(f"\nelementwise chain: {chain_speedup:.2f}x; transformer block: {block_speedup:.2f}x "
      f"(this machine, {torch.get_num_threads()} threads)")

# %% [markdown]
# The chain gains several times; the block gains little, nothing, or even
# loses time (on the
# machine that made these outputs, look at the numbers above; on yours they
# may differ a little either way). The generated code shows why: Inductor
# fused the block's LayerNorms, the GELU and the residual additions into a
# few C++ kernels, but it handed the four `Linear` layers to `addmm` (MKL or
# oneDNN) and the attention to PyTorch's fused attention kernel for CPU:
# the same routines that eager PyTorch calls. Those routines are already
# as fast as the CPU allows, and they are most of the block's time, so
# fusing the small remainder can only save a small fraction. The
# same happens with convolution networks. On a GPU the picture shifts in
# compile's favour, because there every separate elementwise kernel costs
# a launch and a trip through GPU memory, but the rule is the same:
# **compile speeds up the memory-bound glue between the big operators, not
# the big operators themselves**. Measure before you claim a speed-up.
#
# ## Recompilation and dynamic shapes
#
# Guards check shapes, so what happens when the batch size changes? A
# backend that counts its calls tells us how often Dynamo compiled, and with
# which inputs. We call a small function with batch sizes `BATCH_SIZES`,
# three ways: the default (`dynamic=None`), `dynamic=False` and
# `dynamic=True`:

# %%
# NBVAL_CHECK_OUTPUT
compiled_graphs = []


def counting_backend(gm, example_inputs):
    """Record each graph Dynamo compiles (with its input shapes, symbolic ones as names), then run it."""
    compiled_graphs.append([tuple(t.shape) if isinstance(t, torch.Tensor) else t for t in example_inputs])
    return gm.forward


def scale_rows(x):
    return (x * 2).relu().sum(dim=1)


compiles = {}
for dynamic in (None, False, True):
    torch._dynamo.reset()
    compiled_graphs.clear()
    fn = torch.compile(scale_rows, backend=counting_backend, dynamic=dynamic)
    for b in BATCH_SIZES:
        fn(torch.randn(b, 16))
    compiles[dynamic] = len(compiled_graphs)
    print(f"dynamic={dynamic!s:5}: {len(BATCH_SIZES)} batch sizes -> {len(compiled_graphs)} compiles; "
          f"inputs of each graph: {compiled_graphs}")

# %% [markdown]
# - `dynamic=False`: every new batch size fails the shape guard and is
#   compiled again, for that one size.
# - Default: the first call compiles for the exact shape (a *static* graph,
#   which lets Inductor unroll and specialise). When the guard fails on a
#   new size, Dynamo marks that dimension dynamic ("automatic dynamic
#   shapes") and compiles once more, for any size: the graph then takes the
#   size as a symbol (`s77` or similar) and the shape guard becomes a range
#   check. Two compiles, however many sizes follow.
# - `dynamic=True`: symbolic sizes from the first call, so one compile.
#   Every dimension is a symbol here, even the 16 that never changes;
#   `torch._dynamo.mark_dynamic(x, 0)` marks a single dimension instead.
#
# Sizes 0 and 1 are always specialised (broadcasting behaves differently for
# them), so a batch of 1 gets its own graph. Dynamic graphs can be a little
# slower than static ones; the default is a good compromise, and
# `dynamic=False` is only worth it when the shapes really never change.

# %%
assert compiles[False] == len(BATCH_SIZES), f"dynamic=False: one compile per size expected, got {compiles[False]}"
assert compiles[None] == min(2, len(BATCH_SIZES)), f"default: static, then one dynamic compile; got {compiles[None]}"
assert compiles[True] == 1, f"dynamic=True: one compile expected, got {compiles[True]}"

# %% [markdown]
# ## Graph breaks and `fullgraph=True`
#
# Dynamo cannot put everything in a graph. When it meets something it
# cannot trace, it ends the current graph, lets Python run that piece, and
# starts a new graph after it: a **graph break**. The program stays correct,
# but every break splits the fusion opportunities, adds a trip through
# Python, and is one more place for guards and recompiles. The most common
# causes are *data-dependent* Python: an `if` on a tensor's value, `.item()`
# or `.tolist()`, and printing a tensor. Here is a function with one:


# %%
def clip_then_cos(x):
    y = x.sin()
    if y.sum() > 0:  # Python `if` on a tensor value: only known when the code runs
        y = y * 0.5
    return y.cos()


x_small = torch.randn(8, generator=generator)
explanation = torch._dynamo.explain(clip_then_cos)(x_small)
print(f"graphs: {explanation.graph_count}, graph breaks: {explanation.graph_break_count}")
for reason in explanation.break_reasons:
    print("break reason:", tidy(reason.reason, max_lines=3))

# %% [markdown]
# Two graphs around one break: Dynamo cannot know at trace time which way
# the `if` will go, because that depends on the numbers in `x`. By default
# this is silent. `fullgraph=True` turns a graph break into an error, which
# is what you want when you expect one graph (and what `torch.export`,
# chapter 22, always requires):

# %%
torch._dynamo.reset()
try:
    torch.compile(clip_then_cos, fullgraph=True, backend="eager")(x_small)
except Exception as err:  # torch._dynamo.exc.Unsupported
    print(f"{type(err).__name__}: {tidy(str(err), max_lines=9)}")

# %% [markdown]
# The message names the cause and suggests the fixes. The usual one is to
# compute both branches and choose with `torch.where`, which is an
# operation *on tensors* and so can live in the graph. Here the choice is one
# scale factor for the whole tensor:


# %%
def clip_then_cos_no_break(x):
    y = x.sin()
    y = y * torch.where(y.sum() > 0, 0.5, 1.0)  # the decision stays inside the graph
    return y.cos()


explanation = torch._dynamo.explain(clip_then_cos_no_break)(x_small)
print(f"graphs: {explanation.graph_count}, graph breaks: {explanation.graph_break_count}")
torch._dynamo.reset()
fullgraph_fn = torch.compile(clip_then_cos_no_break, fullgraph=True, backend="eager")
for sign in (1, -1):  # an input where the branch is taken, and one where it is not
    probe = sign * torch.linspace(0.1, 1.5, 8)
    assert torch.allclose(fullgraph_fn(probe), clip_then_cos(probe)), "the rewrite must compute the same thing"
print("fullgraph=True compiles, and the rewrite agrees with the original on both branches")
assert explanation.graph_break_count == 0

# %% [markdown]
# For branches that do different *work*, not just scale differently,
# `torch.cond(pred, true_fn, false_fn, operands)` captures both branches
# as subgraphs.
#
# ## Compiling a training step
#
# Training is where compile is most often used, so compile the whole step:
# zero the gradients, forward, loss, backward, optimizer step. We give
# `torch.compile` the entire function and look at what Dynamo makes of it
# first. A small MLP, synthetic data and plain SGD keep it quick:


# %%
def make_model_and_optimizer():
    torch.manual_seed(SEED)
    model = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 10))
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def make_train_step(model, optimizer):
    def train_step(inputs, targets):
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return train_step


train_x = torch.randn(TRAIN_STEPS, 64, 32, generator=generator)
train_y = torch.randint(0, 10, (TRAIN_STEPS, 64), generator=generator)
probe_model, probe_optimizer = make_model_and_optimizer()
log = io.StringIO()
with contextlib.redirect_stderr(log):  # explain also logs a note about the optimizer's profiler markers
    step_explanation = torch._dynamo.explain(make_train_step(probe_model, probe_optimizer))(train_x[0], train_y[0])
print(f"graphs: {step_explanation.graph_count}, graph breaks: {step_explanation.graph_break_count}")
for reason in step_explanation.break_reasons:
    print("break reason:", reason.reason.splitlines()[0])

# %% [markdown]
# Dynamo splits the step into several graphs, first at `loss.backward()`:
# by default it does not trace the call into the autograd engine. That costs less than it sounds. The
# first graph (zero_grad, forward, loss) goes through AOTAutograd, which
# has already built and compiled the *backward graph* for it, so
# `loss.backward()` runs compiled code too; the graph after the break is
# the optimizer's update, compiled as well (one fused loop updates all the
# parameters). Now train the same model from the same
# initial weights, eager and compiled, on the same batches, and compare the
# losses step by step:

# %%
eager_model, eager_optimizer = make_model_and_optimizer()
eager_step = make_train_step(eager_model, eager_optimizer)
compiled_model, compiled_optimizer = make_model_and_optimizer()
compiled_step = torch.compile(make_train_step(compiled_model, compiled_optimizer), backend=TRAIN_STEP_BACKEND)
torch._dynamo.reset()
eager_losses = [eager_step(train_x[i], train_y[i]).item() for i in range(TRAIN_STEPS)]
log = io.StringIO()
with contextlib.redirect_stderr(log):
    start = time.perf_counter()
    compiled_losses = [compiled_step(train_x[0], train_y[0]).item()]
    step_first_s = time.perf_counter() - start
    compiled_losses += [compiled_step(train_x[i], train_y[i]).item() for i in range(1, TRAIN_STEPS)]
print(f"{'step':>4}  {'eager loss':>10}  {'compiled loss':>13}")
for i, (a, b) in enumerate(zip(eager_losses, compiled_losses)):
    print(f"{i:>4}  {a:10.5f}  {b:13.5f}")
weight_diff = max((p - q).abs().max().item() for p, q in zip(eager_model.parameters(), compiled_model.parameters()))
print(f"backend {TRAIN_STEP_BACKEND!r}: first compiled step {step_first_s:.1f} s; largest weight difference after {TRAIN_STEPS} steps: {weight_diff:.1e}")
_ = report.record("training step compile (first step)", step_first_s, "s", digits=1)

# %%
assert all(abs(a - b) <= 1e-4 * max(1.0, abs(a)) for a, b in zip(eager_losses, compiled_losses)), (
    f"compiled training diverged from eager: {eager_losses} vs {compiled_losses}"
)
assert weight_diff < 1e-4, f"the weights after compiled training differ from eager by {weight_diff:.1e}"

# %% [markdown]
# The same losses to every printed digit, and the same weights: compiled
# training is the same training. The differences left are the rounding
# differences we saw before, which grow only slowly over steps. The time per
# step, eager against compiled, on these batches:

# %%
x0, y0 = train_x[0], train_y[0]
step_eager = measure(lambda: eager_step(x0, y0), label="training step, eager", min_run_time=MIN_RUN_TIME)
step_compiled = measure(lambda: compiled_step(x0, y0), label="training step, compiled", min_run_time=MIN_RUN_TIME)
print(timing_table([step_eager, step_compiled]))
_ = report.record("training step speed-up", speedup(step_eager, step_compiled), "x", digits=2)

# %% [markdown]
# (These extra steps keep training both models on one batch; they only
# serve the timing.) A small model on a CPU is mostly matrix products, so
# expect a modest gain at best, and possibly none (the table shows this
# run's), for a compile of several seconds: the transformer block's lesson
# again. Set `TRAIN_STEPS` higher to see how
# the losses keep agreeing.
#
# ## Pitfalls
#
# ### 1. A `print` or `.item()` in `forward`
#
# Debugging prints and `.item()` calls creep into models, and each one is a
# graph break. Dynamo warns about `.item()` on stderr (caught here), says
# nothing about the `print`, and runs both correctly, just slower. With
# `fullgraph=True` the `print` becomes an error:


# %%
def forward_with_debugging(x):
    y = x.sin()
    print("largest activation:", y.abs().max())  # a forgotten debugging print
    scale = y.abs().max().item()  # a Python float: leaves the graph
    return y / scale


log = io.StringIO()
with contextlib.redirect_stderr(log):
    explanation = torch._dynamo.explain(forward_with_debugging)(x_small)
print(f"graph breaks: {explanation.graph_break_count}; the warning Dynamo logged:")
print(tidy(log.getvalue(), max_lines=3))
torch._dynamo.reset()
try:
    torch.compile(forward_with_debugging, fullgraph=True, backend="eager")(x_small)
except Exception as err:  # torch._dynamo.exc.Unsupported
    print(f"\n{type(err).__name__}: {tidy(str(err), max_lines=3)}")
assert explanation.graph_break_count >= 2

# %% [markdown]
# **Fix:** move printing out of the compiled function (print what it
# returns), and keep values as tensors: `y / y.abs().max()` divides by a 0-d
# tensor, no Python float needed. When you really need a Python number
# inside the graph, `torch._dynamo.config.capture_scalar_outputs = True`
# lets Dynamo trace `.item()` as a symbolic value (under `fullgraph=True`
# torch 2.14 already does that for `.item()`, which is why only the `print`
# was reported above).

# %%
explanation = torch._dynamo.explain(lambda x: x.sin() / x.sin().abs().max())(x_small)
print("graph breaks without the print and .item():", explanation.graph_break_count)
assert explanation.graph_break_count == 0

# %% [markdown]
# ### 2. The recompilation limit
#
# Someone sets `dynamic=False` "for speed" on a model whose inputs are
# sequences of varying length. Every new length is a recompile, and after
# `torch._dynamo.config.recompile_limit` of them (8) Dynamo gives up on
# that function: it logs a warning and runs it **eagerly** from then on,
# silently slower. `torch._dynamo.config.fail_on_recompile_limit_hit = True`
# makes that an error instead, which is how we show it here:

# %%
torch._dynamo.reset()
print("recompile_limit:", torch._dynamo.config.recompile_limit)
fixed_shapes = torch.compile(scale_rows, dynamic=False, backend="eager")
log = io.StringIO()
with contextlib.redirect_stderr(log), torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
    try:
        for length in range(2, 20):
            fixed_shapes(torch.randn(length, 16))
    except Exception as err:
        print(f"at length {length}: {type(err).__name__}: {tidy(str(err), max_lines=2)}")
print("the warning logged with it:\n" + tidy(log.getvalue(), max_lines=3))

# %% [markdown]
# **Fix:** leave `dynamic` at its default, which switches to a dynamic graph
# at the second size, as we saw; or pad the inputs to a few fixed lengths
# (buckets) so that only a handful of shapes ever occur.
# `TORCH_LOGS="recompiles"` prints the reason for every recompile, which is
# the first thing to look at when a compiled model is mysteriously slow.
#
# ### 3. A global that changes
#
# Dynamo reads Python values such as globals and attributes at trace time
# and bakes them into the graph, with a guard on their value. Change such a
# global between calls, for example a flag or a mode switch, and each
# change is caught by the guard and recompiled. The result stays correct,
# but every flip may cost a compile. `TORCH_LOGS="recompiles"` (here
# `set_logs(recompiles=True)`) shows which guard failed:

# %%
USE_SHIFT = True


def maybe_shift(x):
    return x * 2 if USE_SHIFT else x - 1


torch._dynamo.reset()
compiled_graphs.clear()
shifted = torch.compile(maybe_shift, backend=counting_backend)
log = io.StringIO()
with contextlib.redirect_stderr(log):
    torch._logging.set_logs(recompiles=True)
    for flag in (True, False, True, False):
        USE_SHIFT = flag
        assert torch.equal(shifted(x_small), maybe_shift(x_small)), "recompiled code must follow the global"
    torch._logging.set_logs()
print(f"4 calls, flag flipped 3 times -> {len(compiled_graphs)} compiles")
print(tidy("\n".join(line for line in log.getvalue().splitlines() if "Recompiling" in line or "G['" in line), max_lines=2))
assert len(compiled_graphs) == 2, "one graph per value of the flag"

# %% [markdown]
# Two compiles here, one per value, because Dynamo keeps both versions.
# A global that takes many values (a step counter, a Python float that a
# schedule changes) is worse: it runs into the recompile limit of
# pitfall 2. **Fix:** pass such values as arguments, as tensors when they
# change often (a 0-d tensor is data, not a constant); keep Python flags for
# things that are fixed for the whole run.
#
# ## Exercises
#
# Each exercise has a stub for you to fill in, then a checker cell that
# prints **PASSED**, **NOT YET** with a hint, or **TODO** while the stub
# still raises `NotImplementedError`. If you are stuck,
# `solution("16.no_graph_break")` returns the reference solution.
#
# ### Exercise 1: remove the graph breaks
#
# `normalise_positive` below works, but `torch._dynamo.explain` finds graph
# breaks in it. Write `normalise_positive_no_break(x)` that returns the same
# values for every float tensor `x` of any shape, in **one graph with no
# breaks**. The checker runs `torch._dynamo.explain` on your function and
# compares it with the original on inputs where each branch is taken.


# %%
def normalise_positive(x):
    """x / max(x) if the largest element is positive; x shifted to have a zero maximum otherwise."""
    top = x.max().item()
    if top > 0:
        return x / top
    return x - top


explanation = torch._dynamo.explain(normalise_positive)(x_small)
print(f"the original: {explanation.graph_count} graphs, {explanation.graph_break_count} graph breaks")


def normalise_positive_no_break(x):
    """The same values as normalise_positive(x), without graph breaks."""
    raise NotImplementedError


# %%
result = check("16.no_graph_break", normalise_positive_no_break)

# %% [markdown]
# ### Exercise 2: the break-even point
#
# Write `break_even_calls(compile_s, eager_s, compiled_s)`: given the
# compile time and the seconds per call eager and compiled, return the
# smallest number of calls `n >= 1` after which the compiled function has
# cost no more in total than eager (`compile_s + n * compiled_s <= n *
# eager_s`), or `None` when that never happens. The cell then applies it
# to this run's measurements, which must agree with the plot above.


# %%
def break_even_calls(compile_s, eager_s, compiled_s):
    """Smallest n >= 1 with compile_s + n * compiled_s <= n * eager_s, or None if there is none."""
    raise NotImplementedError


# %%
result = check("16.break_even_calls", break_even_calls)
if result.passed:
    print(f"break-even for this run's chain: {break_even_calls(cold_compile_s, t_eager, t_compiled)} calls "
          f"(the plot: {break_even_cold}); for the transformer block: "
          f"{break_even_calls(block_first_s - block_compiled.median_s, block_eager.median_s, block_compiled.median_s)}")

# %% [markdown]
# ## On a GPU
#
# On a CUDA device Inductor writes Triton kernels instead of C++, and
# `mode="reduce-overhead"` adds CUDA graphs. The cell below times the chain
# there when a GPU (and Triton, which Inductor needs for it) is present.

# %%
from torch.utils._triton import has_triton

if torch.cuda.is_available() and has_triton():
    x_gpu = x.to("cuda")
    torch._dynamo.reset()
    gpu_compiled = torch.compile(chain)
    gpu_compiled(x_gpu)
    gpu_eager = measure(lambda: chain(x_gpu), label="chain on GPU, eager", min_run_time=MIN_RUN_TIME)
    gpu_fused = measure(lambda: gpu_compiled(x_gpu), label="chain on GPU, compiled", min_run_time=MIN_RUN_TIME)
    print(timing_table([gpu_eager, gpu_fused]))
    assert torch.allclose(gpu_compiled(x_gpu), chain(x_gpu), atol=1e-4)
    _ = report.record("elementwise chain speed-up (GPU)", speedup(gpu_eager, gpu_fused), "x", digits=2)
else:
    print("no CUDA device with Triton: skipping the GPU timing of the chain")

# %% [markdown]
# ## Summary
#
# - `torch.compile` has three stages: **Dynamo** captures FX graphs from
#   Python bytecode, guarded by cheap checks; **AOTAutograd** lowers them to
#   ATen and builds the backward graph ahead of time; **Inductor** generates
#   fused C++ or Triton code and calls vendor libraries for matrix products.
#   Backends `eager` and `aot_eager` switch the later stages off, to find
#   which one is at fault.
# - It pays where work is memory-bound: the elementwise chain ran several
#   times faster here. A transformer block, whose time goes into matrix
#   products that are already library calls, gained little, nothing or
#   even lost time. The measured table above, not a slogan, is the answer
#   for your model.
# - The first call compiles, for seconds; the break-even point is many
#   calls away (the plot above gives this run's number). Inductor's FX graph cache (in `build/` for this
#   course) makes later compiles of the same graph much cheaper.
# - Graph breaks (data-dependent `if`, `.item()`, `print`) split the graph
#   silently; `torch._dynamo.explain` lists them, `fullgraph=True` makes
#   them errors, `torch.where` (or `torch.cond`) removes them.
# - Guards trigger recompiles: the default compiles a new batch size once
#   more, dynamically; `dynamic=False` compiles every size and hits the
#   recompile limit; changing globals recompile too.
# - A whole training step compiles, breaking at `backward()`, and trains
#   to the same losses as eager.
#
# **Next:** chapter 17 uses the profiler to see where time really goes, the
# tool to reach for before (and after) reaching for `torch.compile`.

# %%
print(f"notebook ran in {time.perf_counter() - notebook_start:.0f} s")
report.finish()
