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
# # 16 · torch.compile
#
# `torch.compile(model)` is one line, and you will often read that it makes
# a model about twice as fast. Sometimes it does; sometimes it gains nothing
# and costs seconds of compiling first. This chapter opens the box:
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
# - the backends `eager`, `aot_eager` and `inductor`, and what each isolates,
#   timed in interleaved rounds with page faults counted (why a baseline
#   measured minutes earlier misleads); the modes `default`,
#   `reduce-overhead` and `max-autotune`;
# - graph breaks, provoked, explained and removed, and `fullgraph=True`;
#   `torch.compiler.disable` and `torch.compiler.allow_in_graph`;
# - guards, recompilation, and `dynamic=True`;
# - compiling a whole training step;
# - compile time vs steady-state time: the break-even point, and the
#   Inductor cache that makes the second compile cheap;
# - the honest table: a fused elementwise chain against a transformer block,
#   and Inductor's freezing for CPU inference.
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
MIN_CHAIN_SPEEDUP = 1.3  # what the checks require of the compiled elementwise chain over plain eager on an accelerator
MIN_CPU_CHAIN_SPEEDUP = 1.0  # ... and on the CPU, where the gain depends on eager's page faults (1.24x in a busy CI run)
BATCH_SIZES = (2, 3, 4, 5, 6, 7)  # batch sizes of the recompilation experiment
CHAIN_ROUNDS = 3  # interleaved rounds of the chain's first timing, eager against compiled
BACKEND_ROUNDS = 3  # interleaved rounds of the other comparisons (each times every variant once)
MAX_SAME_WORK_RATIO = 2.5  # how far apart (either way) the checks allow the default and reduce-overhead modes' same kernel
MIN_VS_OUT = 0.85  # backend='eager'/'aot_eager' time over the out= variant's: eager's kernels cannot beat it by much
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
os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # the profiler's C++ library (Kineto) then prints nothing to stderr

import contextlib
import io
import re
import resource
import time
import warnings
from pathlib import Path

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

from helpers.bench import measure
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
print("this chapter measures on the CPU; its last section also runs on an accelerator where there is one")
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


def cache_state():
    """Say whether the compiles since counters.clear() found Inductor's FX graph cache warm or cold."""
    hits, misses = counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]
    if misses:
        return f"cold: {misses} FX graph cache miss(es), compiled from scratch"
    return f"warm: {hits} FX graph cache hit(s), code loaded from disk" if hits else "FX graph cache not used"


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
eager_alone = measure(lambda: chain(x), label="eager, timed alone", min_run_time=MIN_RUN_TIME)
print(eager_alone)

# %% [markdown]
# That is one `measure` call: its median and IQR describe the calls *within*
# it. A speed-up is a ratio of two such timings, and on a shared machine the
# speed changes from minute to minute, so two timings taken one after the
# other can differ because the machine changed. The chapter therefore
# compares variants in **interleaved rounds**: `BACKEND_ROUNDS` rounds, each
# timing every variant once, and a ratio is the median over the rounds of
# that round's ratio, so both sides of each ratio saw the same machine.
# `round_summary` prints one row per variant: the median of its rounds, the
# range over the rounds, and its speed-up over the baseline in the same
# rounds. That speed-up is the median of the per-round ratios, so it need
# not equal the ratio of the two medians printed beside it: when the rounds
# disagree (a wide range column), the two can differ noticeably.


# %%
def minor_page_faults():
    """Minor page faults of this process so far (the kernel's count, via getrusage)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def faults_per_call(fn, calls=10):
    """Page faults per call of fn(), over `calls` calls after one warm-up call."""
    fn()
    before = minor_page_faults()
    for _ in range(calls):
        fn()
    return (minor_page_faults() - before) / calls


def interleaved(fns, args, n_rounds, faults=None):
    """Time each of fns (name -> callable) on `args` once per round, n_rounds rounds: name -> [Timing, ...].

    Each variant sees the machine at the same moments as the others. When `faults` is a dict, it also
    collects each variant's page faults per call, once per round (faults_per_call, above)."""
    timings = {name: [] for name in fns}
    for r in range(n_rounds):
        for name, fn in fns.items():
            if faults is not None:
                faults.setdefault(name, []).append(faults_per_call(lambda fn=fn: fn(*args)))
            timings[name].append(measure(lambda fn=fn: fn(*args), label=f"{name}, round {r + 1}",
                                         min_run_time=MIN_RUN_TIME / 2))
    return timings


def per_round_ratio(timings, slow, fast):
    """Median over the rounds of (slow's median / fast's median), each pair from the same round."""
    return torch.tensor([a.median_s / b.median_s for a, b in zip(timings[slow], timings[fast])]).median().item()


def median_round(timings, slow, fast):
    """(slow's median, fast's median) in seconds, from the round whose ratio is per_round_ratio's median.

    Their ratio is exactly the printed speed-up (torch's median of an even count is the lower middle
    value, so it is always one round's ratio)."""
    ratios = torch.tensor([a.median_s / b.median_s for a, b in zip(timings[slow], timings[fast])])
    r = int(ratios.median(dim=0).indices)
    return timings[slow][r].median_s, timings[fast][r].median_s


def median_of_rounds(round_timings):
    """The median over the rounds of one variant's per-round medians, in seconds."""
    return torch.tensor([t.median_s for t in round_timings]).median().item()


def round_summary(timings, baseline):
    """One line per variant: median and range of its rounds, speed-up over `baseline` in the same rounds."""
    def ms(seconds):
        return f"{seconds * 1e3:.3g} ms"

    lines = [f"{'variant':26} {'median':>9} {'range of rounds':>19}  {'speed-up':>8} {'range':>11}  calls"]
    for name, ts in timings.items():
        ratios = [b.median_s / t.median_s for t, b in zip(ts, timings[baseline])]
        lines.append(f"{name:26} {ms(median_of_rounds(ts)):>9} {ms(min(t.median_s for t in ts)):>9}-"
                     f"{ms(max(t.median_s for t in ts)):<9}  {per_round_ratio(timings, baseline, name):7.2f}x "
                     f"{min(ratios):5.2f}-{max(ratios):.2f}x  {sum(t.calls for t in ts):5}")
    return "\n".join(lines)

# %% [markdown]
# Now the one line. `torch.compile` returns at once: nothing is compiled
# until the first call, which therefore takes much longer than the others.
# We time that first call (compile plus one run) with a plain clock, once
# (so every compile time in this chapter is **one sample**, noisier than the
# medians), and the later calls in `CHAIN_ROUNDS` interleaved rounds against eager, counting
# each variant's page faults per call in every round (`faults_per_call`, above: the kernel's count of
# fresh memory pages handed to the process; more on them in the backends section). The counters in `torch._dynamo.utils.counters`
# say whether Inductor found this graph in its cache on disk (a *hit*, from
# an earlier run that used the same cache folder: a **warm-cache** compile)
# or had to compile it (a *miss*: a **cold** compile). A compile time means
# little without saying which, so every one printed below says it
# (`cache_state()`, defined in the setup cell).

# %%
counters.clear()
compiled_chain = torch.compile(chain)
start = time.perf_counter()
y_compiled = compiled_chain(x)
first_call_s = time.perf_counter() - start
first_cache = cache_state()
chain_faults = {}
chain_rounds = interleaved({"eager": chain, "compiled (inductor)": compiled_chain}, (x,), CHAIN_ROUNDS, chain_faults)
chain_speedup = per_round_ratio(chain_rounds, "eager", "compiled (inductor)")  # THE chain speed-up of this chapter
# per-call times of the round whose ratio is that median: t_eager / t_compiled == chain_speedup
t_eager, t_compiled = median_round(chain_rounds, "eager", "compiled (inductor)")
eager_spread = max(t.median_s for t in chain_rounds["eager"]) / min(t.median_s for t in chain_rounds["eager"])
print(f"first call, the process's first compile: {first_call_s:.1f} s (1 sample; {first_cache})")
print(round_summary(chain_rounds, "eager"))
print(f"\n{'variant':26} page faults per call, each round")
for name, counts in chain_faults.items():
    print(f"{name:26} {' '.join(f'{f:7.0f}' for f in counts)}")
print(f"eager's slowest round took {eager_spread:.2f}x its fastest; the median round ({t_eager * 1e3:.3g} ms eager, "
      f"{t_compiled * 1e3:.3g} ms compiled) gives the speed-up {chain_speedup:.2f}x")
report.record("elementwise chain speed-up", chain_speedup, "x", digits=2)
_ = report.record("first compiled call in the process", first_call_s, "s", digits=2)

# %%
max_diff = (y_compiled - chain(x)).abs().max().item()
print(f"largest difference from eager: {max_diff:.1e}")
assert max_diff < 1e-4, f"the compiled chain differs from eager by {max_diff:.1e}"
assert abs(t_eager / t_compiled - chain_speedup) < 1e-6 * chain_speedup, "the median round must give the speed-up"
assert chain_speedup > MIN_CPU_CHAIN_SPEEDUP, (
    f"the compiled elementwise chain ran only {chain_speedup:.2f}x faster than eager (expected > {MIN_CPU_CHAIN_SPEEDUP}x): "
    "was the machine very busy? Rerun, or raise MIN_RUN_TIME"
)

# %% [markdown]
# Faster once compiled (by the speed-up in the table, the median of the
# rounds; the check requires only that it is faster, `MIN_CPU_CHAIN_SPEEDUP`
# = 1, because on a busy machine the figure falls a long way: 1.24x in one
# of our CI runs, with another test beside it), after a first
# call that took far longer than any later one (its line gives the time).
# Note the baseline: this speed-up is over **plain eager**, which allocates
# a new tensor for every intermediate result. How much that costs depends on
# the state of the heap: when `malloc` hands out fresh pages, every first
# write to one is a page fault (the fault rows), so eager's own time can
# move a lot from round to round (the line under the tables gives its
# slowest round over its fastest in this run), and the ratio's range with it, while
# the compiled chain, which allocates only its output, faults little. The headline is
# therefore a figure over a baseline that depends on the heap. The backends section
# below separates the two sources of the gain with a baseline that
# allocates nothing: Inductor's speed-up over that one (fusion alone) is
# the steadier figure. This one ratio, over plain eager, is the chain's
# headline speed-up below: in the honest table, the GPU section and the
# break-even plot, which uses the per-call times of the round that gave
# this median ratio (printed above), so that its lines agree with it. Both halves of the
# first sentence matter, and the rest of the chapter explains both. First,
# what happened during that first call.
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
# new tensor back (4 MB each with the default `CHAIN_SIZE`). When those
# passes go to main memory, the memory traffic is the bottleneck (the code
# is *memory-bound*), and doing the work in one pass saves most of it. Not
# allocating the intermediate tensors at all saves the rest; the next
# section separates the two, and shows that the first depends on the CPU.
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
# Their timings side by side are a lesson in measuring. `eager` and
# `aot_eager` run exactly eager's ATen kernels, so any large gap between
# them and eager is either a cost outside the kernels or a change of the
# machine between the measurements. Timed one after another, minutes apart,
# two timings can differ for a reason no kernel made (another process
# started, the CPU changed its clock), and their IQRs cannot show it: an
# IQR only describes the spread *within* one `measure` call, never drift
# between two calls.
#
# Two things can differ between variants that run the same kernels. One is
# the machine (drift), which interleaved rounds remove. The other is
# memory: every eager operator allocates a new 4 MB result, and `malloc`
# can serve blocks that size with fresh pages from the operating system,
# whose first write is a **page fault** (the kernel then hands over a
# zeroed 4 KB page). `resource.getrusage(...).ru_minflt` counts them. How
# many a variant sees depends on the state of the heap, so it can differ
# between eager and `aot_eager` even though their kernels are identical. A
# variant that writes into preallocated buffers (`out=`) runs the same
# kernels with no allocation at all, and its buffers also stay warm in the
# CPU caches between calls: it is meant to time eager's kernels with that
# cost removed. We time all five variants in interleaved rounds, count faults in
# each round, and compare eager timed alone at the top of the chapter with
# eager in these rounds, which shows how far eager's own time moved during
# this run (with the machine, or with the state of the heap).


# %%
buffers = [torch.empty_like(x) for _ in range(3)]


def last_level_cache_mib():
    """The largest CPU cache of core 0 in MiB, from Linux's sysfs (e.g. "107520K"); 'unknown' elsewhere."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip()
        scale = {"K": 1 / 1024, "M": 1, "G": 1024}.get(text[-1:])
        sizes.append(float(text[:-1]) * scale if scale else float(text) / 2**20)
    return f"{max(sizes):.0f}" if sizes else "unknown"


def chain_out(x):
    """chain(x) with the same ATen kernels, writing into preallocated buffers (no allocation per call)."""
    a, b, c = buffers
    torch.mul(x, 1.5, out=a)
    torch.add(a, 0.5, out=a)
    torch._C._nn.gelu(a, out=b)  # private: the public F.gelu has no out=; this is the ATen op it calls
    torch.sin(b, out=b)
    torch.sigmoid(x, out=a)
    torch.mul(b, a, out=b)
    torch.tanh(x, out=a)
    return torch.add(b, a, out=c)


torch._dynamo.reset()
variants = {
    "eager": chain,
    "eager, out= buffers": chain_out,
    "backend='eager'": torch.compile(chain, backend="eager"),
    "backend='aot_eager'": torch.compile(chain, backend="aot_eager"),
    "backend='inductor'": torch.compile(chain),
}
reference = chain(x)
for name, fn in variants.items():
    out = fn(x)
    if name == "backend='inductor'":
        inductor_diff = (out - reference).abs().max().item()
        print(f"{name:20}: largest difference from eager {inductor_diff:.1e}")
    else:
        assert torch.equal(out, reference), f"{name} changed the result"
        print(f"{name:20}: output identical to eager")

faults = {}
frames_before = counters["frames"]["total"]  # frames Dynamo has compiled (or tried to) so far
rounds = interleaved(variants, (x,), BACKEND_ROUNDS, faults)
compiled_in_rounds = counters["frames"]["total"] - frames_before
print(round_summary(rounds, "eager"))
print(f"\n{'variant':24} page faults per call, each round")
for name in variants:
    print(f"{name:24} {' '.join(f'{f:7.0f}' for f in faults[name])}")

same_kernels_variants = ("backend='eager'", "backend='aot_eager'")
time_vs_eager = {name: per_round_ratio(rounds, name, "eager") for name in same_kernels_variants}
time_vs_out = {name: per_round_ratio(rounds, name, "eager, out= buffers") for name in same_kernels_variants}
alloc_cost = per_round_ratio(rounds, "eager", "eager, out= buffers")
fusion_vs_out = per_round_ratio(rounds, "eager, out= buffers", "backend='inductor'")
drift = eager_alone.median_s / median_of_rounds(rounds["eager"])
print()
for name in same_kernels_variants:
    print(f"{name}: {time_vs_eager[name]:.2f}x eager's time, {time_vs_out[name]:.2f}x the out= variant's time")
print(f"eager / eager with out= buffers: {alloc_cost:.2f}x the time (allocation, page faults, cold caches)")
print(f"Inductor's speed-up over eager without allocations: {fusion_vs_out:.2f}x")
print(f"frames Dynamo compiled during the timed rounds: {compiled_in_rounds}")
print(f"this CPU's largest cache: {last_level_cache_mib()} MiB; x and the out= variant's three buffers: "
      f"{4 * x.nbytes / 2**20:.0f} MiB")
print(f"drift: eager timed alone at the top took {drift:.2f}x the time of eager in these rounds "
      f"({eager_alone.median_s * 1e3:.3g} ms against {median_of_rounds(rounds['eager']) * 1e3:.3g} ms)")
report.record("aot_eager time / eager time (interleaved)", time_vs_eager["backend='aot_eager'"], "x", digits=2)
report.record("eager time / eager with out= buffers", alloc_cost, "x", digits=2)
_ = report.record("inductor speed-up over eager with out= buffers", fusion_vs_out, "x", digits=2)

# %%
assert inductor_diff < 1e-4
out_faults = max(faults["eager, out= buffers"])
assert out_faults < 1, f"preallocated out= buffers should not fault, got {out_faults:.1f} per call"
assert compiled_in_rounds == 0, f"the timed calls recompiled {compiled_in_rounds} frame(s): that is extra work"
for name in same_kernels_variants:
    assert time_vs_out[name] > MIN_VS_OUT, (
        f"{name} ran {1 / time_vs_out[name]:.2f}x faster than eager with no allocation at all "
        f"(allowed: {1 / MIN_VS_OUT:.2f}x, noise): it runs the same kernels, so memory cannot explain that"
    )

# %% [markdown]
# Read the tables together. Interleaved, `backend='eager'` and
# `backend='aot_eager'` are never faster than the `out=` variant by more
# than noise: their time over the `out=` variant's is above `MIN_VS_OUT`
# (checked), because nothing that runs eager's kernels can beat the
# same kernels with no allocation at all. Nor did they do extra work
# while they were timed: Dynamo compiled no frame during the rounds
# (checked with its counter), so every call ran the graph already
# compiled. Above that floor either can land anywhere, slower or faster
# than eager, by a factor of two or more (it depends on the heap, and on the
# thread count), so no upper bound on their time is checked; the two printed lines under the tables say where each
# landed in this run, against eager and against the `out=` variant; a
# compiled variant that runs eager's kernels can even beat eager, when it
# happens to allocate more cheaply. Since the kernels are the same, such a
# gap comes from memory or noise, not from different work. The page-fault
# counts vary from round to round and from variant to variant; compare a
# row's faults with its times to see how far they go together. Even where
# they rank the variants in the same order as their times, the counts are
# not proportional to the differences in time, so they are a clue to the
# memory cost, not a measurement of it. The `out=` variant, which removes
# allocation altogether (no faults in any round, checked), is meant to give
# its price: eager's time over the `out=` time, printed above (its
# explanation in brackets: allocation, page faults and cold caches
# together). That ratio can come out near 1, when `malloc` reuses freed
# blocks and eager faults little; when it is large, a large share of
# eager's time is not its kernels' work at all. The fault count of a
# round alone does not predict the ratio: compare the round in which eager
# faulted least with the range of the ratio. The drift line compares the same eager function timed at two
# moments of this run, and so do the eager rows of the chain's first
# table, at the top, and of this one (compare their medians and their
# ranges of rounds): whatever they show is a
# difference that no kernel made, from the machine or from the state of
# the heap, and it is why each table's speed-ups hold only for its own
# rounds (compare Inductor's speed-up over eager in the two tables). A variant
# that never faults does not depend on the state of the heap, which makes
# the `out=` variant the steadier baseline. Compare variants in
# interleaved rounds, never against a baseline measured long before, and
# when two variants run the same kernels, give both the same allocation
# behaviour (the `out=` variant) before you call a difference a speed-up.
#
# What did fusion alone buy? The line "Inductor's speed-up over eager
# without allocations" compares Inductor with the fair baseline, eager's
# kernels with no allocation cost. That figure, not the speed-up over plain
# eager at the top, is what fusion alone bought; the rest of the headline is
# eager's allocation cost (Inductor allocates only its one output) and the
# drift between the two tables. Fusion alone is **not** checked to be a
# gain, because it depends on the CPU. One fused loop reads `x` once and
# writes once, where eager's eight kernels read and write 4 MB each; that
# saves time when those passes go to main memory. A CPU whose last-level
# cache holds all of eager's tensors (this CPU's is printed above)
# serves the eight passes from the cache, the chain is then limited by its
# arithmetic (`erf`, `sin`, `tanh`, `exp`), and Inductor's vectorised
# formulas for those can be slower than ATen's. The cache size alone does
# not decide it: in earlier runs on a CPU with a 105 MB L3, Inductor took
# about 1.2-1.3x the time of the `out=` variant, and on other machines
# fusion alone gained 1.7x and more, with tensors that fit in their cache
# too (this run's figure is the line above). `eager` and `aot_eager` are bit-identical
# to eager; Inductor changes the last bits of the result, because it computes GELU,
# `sigmoid` and `tanh` with its own vectorised formulas; compare compiled
# outputs with `torch.allclose`, never `torch.equal`.
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
#   libraries) at compile time and keeps the fastest; that makes compiles
#   far longer, so we only describe it here. (`"max-autotune-no-cudagraphs"`
#   is the same without CUDA graphs.)
#
# The default and `reduce-overhead`, measured on the chain:

# %%
def kernel_lines(code):
    """The generated kernels' names and the C++ lines of their loop bodies, from Inductor's output code."""
    return (sorted(set(re.findall(r"^(cpp_fused_\w+) = ", code, flags=re.M))),
            [line.strip() for line in code.splitlines() if re.match(r"\s*auto tmp\d+ = ", line)])


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    counters.clear()
    start = time.perf_counter()
    reduce_overhead = torch.compile(chain, mode="reduce-overhead")  # compiled once: its first call, code captured
    _, ro_code = torch._inductor.utils.run_and_get_code(reduce_overhead, x)
    ro_first_s = time.perf_counter() - start
    ro_cache = cache_state()
for w in caught:
    print("warning:", tidy(str(w.message), max_lines=2))
same_kernels = kernel_lines("\n".join(ro_code)) == kernel_lines(code)  # `code`: the default mode's, from stage 3
inductor_again = variants["backend='inductor'"]
mode_rounds = interleaved({"mode='default'": inductor_again, "mode='reduce-overhead'": reduce_overhead}, (x,), BACKEND_ROUNDS)
mode_ratio = per_round_ratio(mode_rounds, "mode='default'", "mode='reduce-overhead'")
print(f"reduce-overhead: first call {ro_first_s:.1f} s (1 sample; {ro_cache}); same kernels as the default mode: {same_kernels}")
print(round_summary(mode_rounds, "mode='default'"))
print(f"reduce-overhead's speed-up over default, median of the rounds: {mode_ratio:.2f}x")
_ = report.record("reduce-overhead vs default (CPU)", mode_ratio, "x", digits=2)

# %%
assert same_kernels, "on a CPU, reduce-overhead should generate the default mode's kernels"
assert 1 / MAX_SAME_WORK_RATIO < mode_ratio < MAX_SAME_WORK_RATIO, (
    "the same kernel timed very differently in the two modes: was the machine very busy?"
)

# %% [markdown]
# On a CPU the two modes generate the same kernel (checked line by line
# above), so whatever gap the table shows between them is not the kernel's
# work: it is the machine's noise or a cost outside the kernel. The range
# column says whether the rounds agreed on its direction.
#
# ## Compile time: the cache, and the break-even point
#
# The chain's first compiled call, at the top of the chapter, took far
# longer than a call (its line gives the time). Part of that is paid once per process
# (importing the compiler's modules, checking the C++ compiler); the rest is
# Dynamo's trace and AOTAutograd, plus, when nothing is cached, Inductor's
# code generation and the C++ compiler. Inductor keeps its results on disk, in the **FX graph cache**
# (`torch._inductor.config.fx_graph_cache`, on by default) under the cache
# folder printed in the setup cell, so whether that first call compiled
# anything depends on earlier runs: its line says whether it was warm (a
# cache *hit*) or cold (a *miss*).
#
# To measure both cases every time, we compile the chain twice more.
# First **cold**: `torch._inductor.utils.fresh_cache(dir=...)` points
# Inductor at a new, empty cache folder (here inside `build/`, deleted
# afterwards), so everything is compiled from scratch. Then **warm**:
# `torch._dynamo.reset()` throws away everything compiled *in this
# process*, and we compile again with the course's cache folder, which
# holds this graph since the first call. Dynamo still traces the function,
# but Inductor finds the finished code on disk. A new process (the next
# run of a training script) finds it on disk the same way, after paying
# the once-per-process cost again: when the first call was warm too, the
# difference between it and this warm compile is that cost (checked).

# %%
print("FX graph cache on:", torch._inductor.config.fx_graph_cache, "| folder:", rel(os.environ["TORCHINDUCTOR_CACHE_DIR"]))
# t_eager, t_compiled: the chain's per-call times from the median round at the top

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
print(f"cold compile (empty cache, cache misses: {cold_misses}): {cold_compile_s:6.2f} s (1 sample)")
print(f"warm compile (after torch._dynamo.reset(), cache hits: {warm_hits}): {warm_compile_s:6.2f} s (1 sample)")
report.record("cold compile (empty cache)", cold_compile_s, "s", digits=2)
report.record("warm-cache compile", warm_compile_s, "s", digits=2)
_ = report.record("cold vs warm compile", cold_compile_s / warm_compile_s, "x", digits=1)

# %%
assert cold_misses >= 1, "the compile with an empty cache folder should have missed the FX graph cache"
assert warm_hits >= 1, "the second compile should have found the graph in Inductor's FX graph cache"
assert warm_compile_s < cold_compile_s, "a compile from the cache should be quicker than one from scratch"
if first_cache.startswith("warm"):
    assert first_call_s > warm_compile_s, "the process's first warm compile should pay one-time costs on top"

# %% [markdown]
# Now the economics. A compiled function costs its compile time once, then
# less per call than eager. After `n` calls, eager has cost
# `n × t_eager` and compiled `t_compile + n × t_compiled`; compiling pays
# off from the first `n` where the second is smaller: the **break-even
# point**. The plot draws both lines from the measured times, for the cold
# and the warm compile. The per-call times are those of the median round of
# the chain's interleaved rounds at the top (their ratio is the headline
# speed-up), so the eager line is plain eager, with its allocations, whose
# rounds can vary widely (the range column there); each compile time is one sample. The break-even points are therefore
# approximate (a rerun moves them):

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
ax.set(xlabel="calls", ylabel="total seconds", title=f"elementwise chain: break-even after about {break_even_cold} calls (cold)")
ax.legend(fontsize=8)
plt.show()
print(f"break-even, approximately: {break_even_cold} calls with the cold compile, {break_even_warm} with a warm cache "
      f"(chain speed-up {chain_speedup:.2f}x from the interleaved rounds)")
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
# call needs proportionally more calls, and one that gains nothing, or runs
# slower compiled (as the transformer block below can: see its table),
# never breaks even.
#
# ## The honest table: a transformer block
#
# The chain was the best case: nothing but elementwise work, all of it fused
# into one kernel, over a baseline that allocates eight tensors per call.
# Chapter 09's `TransformerBlock` is a more typical model: two LayerNorms,
# attention, and an MLP. We first ask the profiler (chapter 17 explains it)
# where its eager time goes, then compile it for inference (`eval()`,
# `no_grad`), keep the generated code to see what Inductor did with it, and
# time eager and compiled in interleaved rounds, as the chain:

# %%
torch.manual_seed(SEED)
batch, tokens, d_model = BLOCK_SHAPE
block = TransformerBlock(d_model, N_HEADS).eval()
tokens_in = torch.randn(batch, tokens, d_model, generator=generator)
compiled_block = torch.compile(block)
counters.clear()
with torch.no_grad():
    start = time.perf_counter()
    block_out, block_code = torch._inductor.utils.run_and_get_code(compiled_block, tokens_in)
    block_first_s = time.perf_counter() - start
    block_cache = cache_state()
    block_rounds = interleaved({"eager": block, "compiled": compiled_block}, (tokens_in,), BACKEND_ROUNDS)
    block_diff = (block_out - block(tokens_in)).abs().max().item()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            block(tokens_in)
self_time = {e.key: e.self_cpu_time_total for e in prof.key_averages()}
library_ops = [op for op in self_time if re.search(r"addmm|\bmm\b|bmm|scaled_dot_product", op)]
library_share = sum(self_time[op] for op in library_ops) / sum(self_time.values())
block_speedup = per_round_ratio(block_rounds, "eager", "compiled")
block_src = "\n".join(block_code)
fused = sorted(set(re.findall(r"^(cpp_fused_\w+) = ", block_src, flags=re.M)))
library_calls = re.findall(r"(extern_kernels\.\w+|torch\.ops\.\w+\.\w+)(?:\.default)?\(", block_src)
top_ops = sorted(self_time, key=self_time.get, reverse=True)[:6]
print(f"eager block, profiler: {library_share:.0%} of the operators' self CPU time is in {sorted(library_ops)}")
print("largest shares:", ", ".join(f"{op} {self_time[op] / sum(self_time.values()):.0%}" for op in top_ops))
print(f"first call {block_first_s:.1f} s (1 sample; {block_cache}); largest difference from eager {block_diff:.1e}")
print(f"generated code: {len(fused)} fused C++ kernels, and {len(library_calls)} calls into libraries: "
      f"{sorted(set(library_calls))}")
report.record("transformer block speed-up", block_speedup, "x", digits=2)
_ = report.record("transformer block compile (first call)", block_first_s, "s", digits=1)

# %%
assert block_diff < 1e-3, f"the compiled block differs from eager by {block_diff:.1e}"
assert len(library_calls) >= 4, "the block's matrix products should run in library kernels"
assert 0 < library_share < 1, f"the profiler found no library share to report ({library_share:.0%})"
assert block_speedup < chain_speedup, (
    f"the transformer block gained {block_speedup:.2f}x, no less than the elementwise chain's {chain_speedup:.2f}x"
)

# %% [markdown]
# Both measurements side by side, from this run:

# %%
print("elementwise chain\n" + round_summary(chain_rounds, "eager"))
print("\ntransformer block\n" + round_summary(block_rounds, "eager"))
print(f"\nelementwise chain: {chain_speedup:.2f}x; transformer block: {block_speedup:.2f}x "
      f"(medians of interleaved rounds; this machine, {torch.get_num_threads()} threads)")

# %% [markdown]
# The block gains far less than the chain, if anything (checked: its speed-up, printed
# above, is below the chain's), and whether it gains at all depends on the
# machine, the shapes and the load: a speed-up below 1 means the compiled
# block was slower than eager, and a range of rounds on both sides of 1
# means the two were not reliably different. The profiler and the generated
# code show why. The profiler splits the eager block's time between library
# kernels (matrix products and attention: the printed share) and the rest
# (LayerNorm, additions, GELU, copies between layouts), which is what
# Inductor can fuse; the split itself moves with the thread count and the
# machine's load, which is why we print it rather than check a figure. Inductor
# fused the block's LayerNorms, the GELU and the residual additions into a
# few C++ kernels, but it handed the four `Linear` layers to `addmm` (MKL or
# oneDNN) and the attention to PyTorch's fused attention kernel for CPU:
# the same routines that eager PyTorch calls. Those routines are already
# highly tuned, so fusing the remainder can save at most the remainder's
# share of the time. The
# same reasoning applies to convolution networks. On a GPU the picture can
# shift in compile's favour, because there every separate elementwise kernel costs
# a launch and a trip through GPU memory, but the rule is the same:
# **compile speeds up the memory-bound glue between the big operators, not
# the big operators themselves**. Measure before you claim a speed-up.
#
# ### Freezing, for CPU inference
#
# For inference the weights never change, yet the compiled block above
# still receives every parameter as an input on every call. With
# `torch._inductor.config.freezing = True` (an eval model, under
# `torch.no_grad()`), Inductor treats the parameters as **constants**: it
# folds computations that depend only on them, and on a CPU it can repack
# the `Linear` weights once, at compile time, into the layout the oneDNN/MKL
# kernels prefer. Use it for a deployed inference model, never while
# training (the frozen weights would not follow an optimizer step). We
# compare the signature and library calls of the two generated modules,
# and time frozen against unfrozen in interleaved rounds.
# (The counters show no FX graph cache lookup for the frozen graph: it was
# compiled in full.)

# %%
def graph_inputs(code):
    """The names the generated `call(args)` unpacks: the compiled graph's run-time inputs."""
    return re.search(r"^\s+(.*?),? = args$", code, flags=re.M).group(1).split(", ")


counters.clear()
with torch.no_grad(), torch._inductor.config.patch(freezing=True):
    start = time.perf_counter()
    frozen_block = torch.compile(block)  # compiled once: its first call, code captured
    frozen_out, frozen_code = torch._inductor.utils.run_and_get_code(frozen_block, tokens_in)
    frozen_first_s = time.perf_counter() - start
    frozen_cache = cache_state()
    frozen_rounds = interleaved({"compiled": compiled_block, "compiled + frozen": frozen_block}, (tokens_in,),
                                BACKEND_ROUNDS)
frozen_speedup = per_round_ratio(frozen_rounds, "compiled", "compiled + frozen")
frozen_src = "\n".join(frozen_code)
frozen_diff = (frozen_out - block_out).abs().max().item()
frozen_calls = sorted(set(re.findall(r"(extern_kernels\.\w+|torch\.ops\.\w+\.\w+)(?:\.default)?\(", frozen_src)))
print(f"run-time inputs: {len(graph_inputs(block_src))} without freezing, {len(graph_inputs(frozen_src))} frozen")
print(f"frozen: first call {frozen_first_s:.1f} s (1 sample; {frozen_cache}); library calls {frozen_calls}; "
      f"largest difference from the unfrozen output {frozen_diff:.1e}")
print(round_summary(frozen_rounds, "compiled"))
_ = report.record("frozen vs unfrozen compiled block (interleaved)", frozen_speedup, "x", digits=2)

# %%
n_params = len(list(block.parameters()))
assert len(graph_inputs(block_src)) == n_params + 1, "unfrozen: every parameter is an input, plus the tokens"
assert len(graph_inputs(frozen_src)) == 1, "frozen: the tokens should be the only run-time input"
assert frozen_diff < 1e-3, f"freezing changed the output by {frozen_diff:.1e}"

# %% [markdown]
# Frozen, the graph takes only the tokens; the weights live in the
# compiled module as constants, and the `Linear` layers now call a kernel
# that uses weights packed at compile time (`mkl._mkl_linear` on this
# machine) instead of `addmm`. Whether that is faster depends on the CPU and
# the shapes; the table gives this machine's ratio, from interleaved rounds
# (the range column shows how much the rounds agree; when it lies on both
# sides of 1, freezing made no reliable difference, and the two medians may
# even point the other way than the speed-up column). We check only that
# freezing computes the same result; measure the speed on your own model.
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
# them), so a batch of 1 gets its own graph. Dynamic graphs may be a little
# slower than static ones (fewer constants to specialise on); the default is a good compromise, and
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
# ### Choosing what Dynamo traces: `disable` and `allow_in_graph`
#
# Two decorators change how Dynamo treats one function, and they do
# opposite things. `torch.compiler.disable(fn)` keeps `fn` **out** of
# compilation: Dynamo ends the graph before the call, `fn` runs as plain
# eager Python, and a new graph starts after it. Use it for code that
# should never be traced: logging, a check that talks to the outside world,
# a piece that breaks the compiler. `torch.compiler.allow_in_graph(fn)`
# puts `fn` **into** the graph as one opaque call, without Dynamo looking
# inside; AOTAutograd and Inductor still trace through it. It is an escape
# hatch for a function Dynamo handles badly but whose body is plain tensor
# code; PyTorch's docs warn that it skips Dynamo's safety checks (a side
# effect inside it, such as appending to a list, may run at the wrong time
# or not at all), so most users should prefer a custom operator.
#
# The same function, three ways. `torch.compiler.is_compiling()` is `True`
# while Dynamo traces code and `False` when code runs eagerly, so the
# disabled version can report where it ran:


# %%
def top_magnitude(y):
    return y.abs().max()


def normalise_sin(x, helper):
    y = x.sin()
    return y.cos() / helper(y)


disabled_seen = []


@torch.compiler.disable
def top_magnitude_disabled(y):
    disabled_seen.append(torch.compiler.is_compiling())
    return y.abs().max()


@torch.compiler.allow_in_graph  # registers this function object; `top_magnitude` stays traceable
def top_magnitude_allowed(y):
    return y.abs().max()


kept_graphs = []


def keeping_backend(gm, example_inputs):
    """Keep each FX graph Dynamo captures, then run it unchanged."""
    kept_graphs.append(gm)
    return gm.forward


helper_graphs = {}
for name, helper in (("plain", top_magnitude), ("disable", top_magnitude_disabled), ("allow_in_graph", top_magnitude_allowed)):
    torch._dynamo.reset()
    kept_graphs.clear()
    out = torch.compile(lambda x, helper=helper: normalise_sin(x, helper), backend=keeping_backend)(x_small)
    assert torch.allclose(out, normalise_sin(x_small, top_magnitude)), f"{name} changed the result"
    helper_graphs[name] = len(kept_graphs)
    nodes = [getattr(node.target, "__name__", str(node.target)) for gm in kept_graphs for node in gm.graph.nodes
             if node.op in ("call_function", "call_method")]
    print(f"{name:15}: {len(kept_graphs)} graph(s), operations {nodes}")
    helper_graphs[name, "nodes"] = nodes
print("the disabled helper ran while compiling:", disabled_seen)

# %%
assert [helper_graphs[name] for name in ("plain", "disable", "allow_in_graph")] == [1, 2, 1], helper_graphs
assert {"abs", "max"} <= set(helper_graphs["plain", "nodes"]), "plain: Dynamo should trace into the helper"
assert not {"abs", "max"} & set(helper_graphs["disable", "nodes"]), "disable: the helper's operations stay out"
assert not {"abs", "max"} & set(helper_graphs["allow_in_graph", "nodes"]), "allow_in_graph: one opaque call"
assert disabled_seen == [False], "the disabled function should have run once, eagerly"
assert any(node.target is top_magnitude_allowed for gm in kept_graphs for node in gm.graph.nodes), (
    "allow_in_graph: the helper itself should be a node of the graph"
)

# %% [markdown]
# Plain, Dynamo traced into `top_magnitude` and recorded `abs` and `max`.
# Disabled, the graph broke around the call (two graphs, and the function
# ran eagerly, `is_compiling()` `False`); `torch._dynamo.explain` names the
# break "Skip calling `torch.compiler.disable()`d function". With
# `allow_in_graph`, one graph again, in which the helper is a single node
# calling the function itself, where the plain version had its operations.
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
    torch._logging.set_logs(graph_breaks=True)  # the same as TORCH_LOGS="graph_breaks": every break, where
    step_explanation = torch._dynamo.explain(make_train_step(probe_model, probe_optimizer))(train_x[0], train_y[0])
    torch._logging.set_logs()
print(f"graphs: {step_explanation.graph_count}, graph breaks: {step_explanation.graph_break_count}")
for reason in step_explanation.break_reasons:
    print("explain's break reason:", reason.reason.splitlines()[0])
sites = re.findall(r"Graph break in user code at (\S+):(\d+)", log.getvalue())
explanations = re.findall(r"Explanation: (.*)", log.getvalue())
print("the graph_breaks log:")
for (path, line), why in zip(sites, explanations):
    where = "this notebook" if "ipykernel" in path else "torch/" + path.split("/torch/")[-1]
    print(f"  break at {where}, line {line}: {why.strip()[:110]}")
logged = [(path.replace("\\", "/"), why) for (path, _), why in zip(sites, explanations)]
assert step_explanation.graph_break_count == step_explanation.graph_count - 1, "explain counts graphs minus one"
assert any("zero_grad" in why for _, why in logged), f"the log should name the zero_grad break: {logged}"
assert any("backward" in why for _, why in logged), f"the log should name the backward() break: {logged}"
assert any(path.endswith("optim/optimizer.py") for path, _ in logged), f"the log should show optimizer.py: {logged}"

# %% [markdown]
# Dynamo splits the step into several graphs. `explain` and the
# `graph_breaks` log count different things. `explain`'s
# `graph_break_count` is simply its number of graphs minus one (that is how
# `torch._dynamo.explain` computes it, checked), and it lists a reason only
# for a graph whose compilation a break triggered. The log lists every
# place where Dynamo stopped tracing (three sites, checked), including those
# where no graph was compiled: a break with no tensor operations before it
# in its frame, such as the `zero_grad` call on the step's first line
# (a function Dynamo skips), produces no graph, so it shows in the log but
# adds nothing to `explain`'s figures. The call to
# `optimizer.zero_grad` is one that Dynamo's developers marked not to trace
# (it runs as plain Python between graphs); `loss.backward()` is not traced
# into the autograd engine by default; and `optimizer.step()` contains a
# deliberate `torch._dynamo.graph_break()` (in torch/optim/optimizer.py)
# that separates the update from the graph before it. That costs less than
# it sounds. The
# graph with the forward and the loss goes through AOTAutograd, which
# has already built and compiled the *backward graph* for it, so
# `loss.backward()` runs compiled code too; the graph after the break is
# the optimizer's update, compiled as well. Now train the same model from the same
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
counters.clear()
with contextlib.redirect_stderr(log):
    start = time.perf_counter()
    compiled_losses = [compiled_step(train_x[0], train_y[0]).item()]
    step_first_s = time.perf_counter() - start
    step_cache = cache_state()
    compiled_losses += [compiled_step(train_x[i], train_y[i]).item() for i in range(1, TRAIN_STEPS)]
print(f"{'step':>4}  {'eager loss':>10}  {'compiled loss':>13}")
for i, (a, b) in enumerate(zip(eager_losses, compiled_losses)):
    print(f"{i:>4}  {a:10.5f}  {b:13.5f}")
weight_diff = max((p - q).abs().max().item() for p, q in zip(eager_model.parameters(), compiled_model.parameters()))
print(f"backend {TRAIN_STEP_BACKEND!r}: first compiled step {step_first_s:.1f} s (1 sample; {step_cache})")
print(f"largest weight difference after {TRAIN_STEPS} steps: {weight_diff:.1e}")
_ = report.record("training step compile (first step)", step_first_s, "s", digits=1)

# %%
assert all(abs(a - b) <= 1e-4 * max(1.0, abs(a)) for a, b in zip(eager_losses, compiled_losses)), (
    f"compiled training diverged from eager: {eager_losses} vs {compiled_losses}"
)
assert weight_diff < 1e-4, f"the weights after compiled training differ from eager by {weight_diff:.1e}"

# %% [markdown]
# The same losses (within 1e-4 relative, checked) and the same weights
# (within 1e-4): compiled training is the same training, up to the rounding
# differences we saw before. The time per
# step, eager against compiled, on these batches:

# %%
step_rounds = interleaved({"eager": eager_step, "compiled": compiled_step}, (train_x[0], train_y[0]), BACKEND_ROUNDS)
step_speedup = per_round_ratio(step_rounds, "eager", "compiled")
print(round_summary(step_rounds, "eager"))
_ = report.record("training step speed-up (interleaved)", step_speedup, "x", digits=2)

# %% [markdown]
# (These extra steps keep training both models on one batch; they only
# serve the timing.) Whether compile gains anything on a training step
# depends on how much of the step is matrix products (library kernels
# either way) and how much is elementwise glue and Python overhead between
# them; for a model this small, on a CPU, the compiled step can also be
# slower (a speed-up below 1). The table gives this run's ratio, and its
# range column how far the rounds agree. Weigh it against a first compiled
# step that is far slower than the others (its line above gives the time). Set `TRAIN_STEPS` higher to see how
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
# lets Dynamo trace `.item()` as a symbolic value. In torch 2.14 (the
# cell below prints what the installed torch does) `fullgraph=True` already traces `.item()` that way
# even with that flag off, which is why the error above names the `print`;
# this is current behaviour, not a documented promise, so it may change
# between releases: set the flag when you rely on it.

# %%
def only_item(x):
    return x / x.abs().max().item()


torch._dynamo.reset()
with contextlib.redirect_stderr(io.StringIO()):
    item_breaks = torch._dynamo.explain(only_item)(x_small).graph_break_count
try:
    item_out = torch.compile(only_item, fullgraph=True, backend="eager")(x_small)
    item_fullgraph = f"compiles, result equal to eager: {torch.allclose(item_out, only_item(x_small))}"
except Exception as err:  # what a torch that does not capture .item() under fullgraph=True raises
    item_fullgraph = f"{type(err).__name__}: {tidy(str(err), max_lines=2)}"
print(f"torch {torch.__version__}, capture_scalar_outputs={torch._dynamo.config.capture_scalar_outputs}: "
      f"explain finds {item_breaks} graph break(s) at .item(); under fullgraph=True: {item_fullgraph}")
assert item_breaks >= 1, "without fullgraph, .item() should break the graph"

# %%
explanation = torch._dynamo.explain(lambda x: x.sin() / x.sin().abs().max())(x_small)
print("graph breaks without the print and .item():", explanation.graph_break_count)
assert explanation.graph_break_count == 0

# %% [markdown]
# ### 2. The recompilation limit
#
# Someone sets `dynamic=False` "for speed" on a model whose inputs are
# sequences of varying length. Every new length is a recompile, and after
# `torch._dynamo.config.recompile_limit` of them (printed below) Dynamo gives up on
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
# breaks**, and with a finite gradient with respect to `x` (also where the
# maximum is 0). The checker runs `torch._dynamo.explain` on your function,
# compares it with the original on inputs where each branch is taken, and
# backpropagates through it. Hiding the original from Dynamo with
# `allow_in_graph` or `torch.compiler.disable` does not count.


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
# smallest number of calls `n >= 1`, as a Python `int`, after which the
# compiled function has cost no more in total than eager (`compile_s + n *
# compiled_s <= n * eager_s`), or `None` when that never happens. A tiny
# saving per call puts `n` in the tens of millions, so compute it: the checker
# wants each answer in well under a second. The cell then applies it
# to this run's measurements, which must agree with the plot above.


# %%
def break_even_calls(compile_s, eager_s, compiled_s):
    """Smallest int n >= 1 with compile_s + n * compiled_s <= n * eager_s, or None if there is none."""
    raise NotImplementedError


# %%
result = check("16.break_even_calls", break_even_calls)
if result.passed:
    # compare like with like: the chain's compile from the same cache state as the block's first call
    block_warm = block_cache.startswith("warm")
    chain_compile_s = warm_compile_s if block_warm else cold_compile_s
    block_eager_s, block_compiled_s = median_round(block_rounds, "eager", "compiled")
    print(f"break-even, {'warm' if block_warm else 'cold'} cache, compile times 1 sample each: chain "
          f"{break_even_calls(chain_compile_s, t_eager, t_compiled)} calls (the plot: "
          f"{break_even_warm if block_warm else break_even_cold}); transformer block "
          f"{break_even_calls(block_first_s - block_compiled_s, block_eager_s, block_compiled_s)}")

# %% [markdown]
# ## On a GPU
#
# On a CUDA device Inductor writes Triton kernels instead of C++, and
# `mode="reduce-overhead"` adds CUDA graphs. Where this notebook runs on
# an accelerator that Inductor can generate code for (CUDA and XPU need
# Triton), the cell below times the chain there, eager, compiled and
# compiled with `reduce-overhead`, in interleaved rounds, and checks that
# the compiled chain beats eager by more than `MIN_CHAIN_SPEEDUP`. Without
# one it says so and points to the CPU figure from the top of the chapter.

# %%
from torch.utils._triton import has_triton

accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
if accelerator is None or (accelerator.type in ("cuda", "xpu") and not has_triton()):
    print(f"no accelerator Inductor can generate code for ({accelerator or 'none found'}); this chapter's figure is "
          f"the CPU one from the top: the compiled chain ran {chain_speedup:.2f}x faster than eager")
else:
    x_dev = x.to(accelerator)
    torch._dynamo.reset()
    dev_variants = {"eager": chain, "compiled": torch.compile(chain),
                    "compiled, reduce-overhead": torch.compile(chain, mode="reduce-overhead")}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name, fn in dev_variants.items():
            dev_diff = (fn(x_dev) - chain(x_dev)).abs().max().item()
            assert dev_diff < 1e-4, f"{name} on {accelerator} differs from eager by {dev_diff:.1e}"
        dev_rounds = interleaved(dev_variants, (x_dev,), BACKEND_ROUNDS)
    for w in caught:
        print("warning:", tidy(str(w.message), max_lines=2))
    dev_speedup = per_round_ratio(dev_rounds, "eager", "compiled")
    print(f"the chain on {accelerator.type}\n" + round_summary(dev_rounds, "eager"))
    _ = report.record("elementwise chain speed-up (accelerator)", dev_speedup, "x", digits=2)
    assert dev_speedup > MIN_CHAIN_SPEEDUP, (
        f"on {accelerator.type} the compiled chain ran only {dev_speedup:.2f}x faster than eager"
    )

# %% [markdown]
# Where that ran on a GPU, the gain has the same cause as on the CPU (one
# pass over memory instead of eight), plus seven kernel launches saved per
# call; the table, not this sentence, gives the figure, and the
# `reduce-overhead` row shows what replaying a CUDA graph adds on top.
#
# ## Summary
#
# - `torch.compile` has three stages: **Dynamo** captures FX graphs from
#   Python bytecode, guarded by cheap checks; **AOTAutograd** lowers them to
#   ATen and builds the backward graph ahead of time; **Inductor** generates
#   fused C++ or Triton code and calls vendor libraries for matrix products.
#   Backends `eager` and `aot_eager` switch the later stages off, to find
#   which one is at fault. They run eager's kernels, so compare them with
#   eager in interleaved rounds: they were never faster, beyond noise
#   (`MIN_VS_OUT`, checked), than an `out=` variant that allocates nothing,
#   and compiled nothing while timed (checked). Above that floor either
#   can come out slower or faster than eager (the table says which); such a
#   gap comes from memory (allocation and page faults) or noise, and one
#   measured minutes apart can be drift as well.
# - It pays where work is memory-bound: the elementwise chain gained the
#   most here, over plain eager (the headline figure). Against an eager
#   variant that allocates nothing (fusion alone) the gain depends on the
#   CPU: it vanished on one CPU whose cache held the tensors, and not on
#   another whose cache held them too. A transformer
#   block, whose eager time goes mostly into matrix products and attention
#   that stay library calls, gained less (checked), possibly nothing, or
#   it even ran slower compiled (its table says). The measured table above, not a slogan, is the
#   answer for your model.
# - The first call compiles, which takes seconds from a cold cache; after
#   a cold compile the break-even point is many calls away, with a warm cache far fewer (the
#   line under the plot gives this run's approximate numbers). Inductor's FX
#   graph cache (in `build/` for this course) makes later, **warm-cache**
#   compiles of the same graph much
#   cheaper than a **cold** one; say which one you timed.
# - Graph breaks (data-dependent `if`, `.item()`, `print`) split the graph
#   silently; `torch._dynamo.explain` lists them, `fullgraph=True` makes
#   them errors, `torch.where` (or `torch.cond`) removes them.
#   `torch.compiler.disable` keeps a function out of the graph on purpose;
#   `torch.compiler.allow_in_graph` puts one in as a single opaque call.
# - For CPU inference, `torch._inductor.config.freezing = True` turns the
#   weights into constants of the compiled code (measure whether it helps).
# - Guards trigger recompiles: the default compiles a new batch size once
#   more, dynamically; `dynamic=False` compiles every size and hits the
#   recompile limit; changing globals recompile too.
# - A whole training step compiles, breaking around `zero_grad`,
#   `backward()` and inside `optimizer.step()`, and trains to the same
#   losses as eager.
#
# **Next:** chapter 17 uses the profiler to see where time really goes, the
# tool to reach for before (and after) reaching for `torch.compile`.

# %%
print(f"notebook ran in {time.perf_counter() - notebook_start:.0f} s")
report.finish()
