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
# # 20 · C++ and CUDA extensions
#
# Everything so far used operations PyTorch already has. Sometimes you need
# one it lacks, or one that does in a single pass what a chain of PyTorch
# calls does in several. Then you write it in C++ (for the CPU) or CUDA (for
# an NVIDIA GPU), compile it against PyTorch's headers, and call it from
# Python like any other function. This chapter does that for one operation,
# the row-wise **softmax**, three times: a C++ CPU op, the naive CUDA kernel
# that tutorials often show, and a fast CUDA kernel. The sources live in
# `helpers/kernels/` as ordinary `.cpp`, `.cu` and `.h` files.
#
# **What you will learn**
# - compiling and loading C++ with `torch.utils.cpp_extension.load_inline`;
#   input checks with `TORCH_CHECK`; splitting rows over threads with
#   `at::parallel_for` (which needs `-fopenmp`);
# - making the CPU kernel fast one measured step at a time, from the scalar
#   loop to SIMD with `at::vec::Vectorized<float>` and its vectorised `exp`,
#   against a Python loop and `torch.softmax`;
# - making a kernel a real PyTorch operator: a schema with `TORCH_LIBRARY`,
#   a kernel per backend with `TORCH_LIBRARY_IMPL`, a fake kernel and an
#   autograd formula registered from Python, all checked by
#   `torch.library.opcheck`; and what a function bound with pybind11 alone
#   cannot do (gradients, `torch.compile`, `torch.export`);
# - the online softmax (Milakov and Gimelshein, 2018): the maximum and the
#   sum in one pass, derived, then checked in plain PyTorch;
# - how a CUDA kernel is organised (threads, warps, blocks), why one thread
#   per row is slow (uncoalesced memory access, too few threads), and what
#   the fast kernel does instead (a warp or block per row, warp shuffles,
#   float4 loads);
# - compiling CUDA code with `nvcc`, which needs no GPU, and what runs when
#   a GPU is there: a correctness suite and a bandwidth benchmark;
# - building the same sources as an installable package with `setuptools`;
# - where builds are cached, what the `lock` file is, and the errors you will
#   meet: wrong dtype, a non-contiguous tensor, a missing compiler, and two
#   `load_inline` mistakes common in published examples.
#
# **Prerequisites:** chapters 01 (tensors, strides, `.contiguous()`), 16
# (`torch.compile`) and 17 (profiling), and `helpers.bench` for timing.
# Reading C++ helps; exercise 3 asks you to write a short C++ op, and the
# chapter's own kernels show every piece it needs.
#
# **Estimated time:** 60 minutes, plus a minute or two the first time the
# extensions compile (each build cell prints its time).

# %% tags=["parameters"]
CPU_ROWS = 4096  # rows of the CPU benchmark input
CPU_COLS = 4096  # columns (the softmax is over each row)
LOOP_ROWS = 256  # rows for the Python-loop baseline (one Python iteration per row: slow)
LOOP_MIN_SPEEDUP = 2.0  # the compiled op must beat the Python row loop by at least this factor on LOOP_ROWS rows
BENCH_TIME = 0.3  # seconds of timed runs per measurement (helpers.bench.measure)
ONLINE_CHUNK = 64  # chunk length for the online softmax written in PyTorch
VEC_MIN_SPEEDUP = 2.0  # on one thread, the at::vec kernel must be at least this many times faster than the scalar loop
ONLINE_SLOWER = True  # assert that on one thread the online kernel (two exps per element) is slower than three passes
EXP_MIN_SHARE = 0.25  # exp must take at least this fraction of the threaded scalar loop's time
FLOAT_SUM_MAX = 1.5  # summing in float may make the scalar loop at most this many times faster than summing in double
THREAD_MIN_SPEEDUP = 1.3  # with >= 2 threads, 2 threads must run the scalar loop on a cache-resident block this many times faster than 1
TORCH_RATIO_MIN = 0.35  # on one thread, the at::vec op must reach at least this fraction of torch.softmax's speed
ROUNDS = 3  # interleaved rounds of the one-thread comparison (each round times every kernel once, in a rotated order)
RUN_INDUCTOR = True  # compile a tiny function around the op once with the inductor backend (C++ code generation: seconds, more with a cold Inductor cache)
BUILD_MISTAKES = True  # compile the two broken load_inline examples of the Pitfalls (a few seconds each, every run)
BUILD_CUDA = True  # compile the CUDA sources when nvcc is present (tens of seconds the first time on 2 cores, then cached)
BUILD_PACKAGE = True  # build extensions/course_kernels with setuptools (about a minute the first time, then cached)
GPU_SHAPES = ((4096, 4096), (65536, 128), (16384, 1024), (1024, 32768), (8, 1_000_000))  # (rows, cols) benchmarked on a GPU
SEED = 0

# %% [markdown]
# ## Setup

# %%
import ctypes
import inspect
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from filelock import FileLock

from helpers import kernels
from helpers.bench import measure, timing_table
from helpers.device import pick_device, seed_everything
from helpers.exercises import check, solution  # noqa: F401  (solution: for when you are stuck)
from helpers.kernels import KernelBuildError, suite
from helpers.paths import ROOT, build_dir, rel
from helpers.report import ChapterReport

generator = seed_everything(SEED)
device = pick_device()
report = ChapterReport("20_cpp_cuda_extensions")
has_gpu = torch.cuda.is_available()
print(f"torch {torch.__version__} (built for CUDA {torch.version.cuda}), device {device}, {torch.get_num_threads()} CPU threads")
print(f"CUDA GPU visible: {has_gpu}")

# %% [markdown]
# ## Why write an extension?
#
# A PyTorch operation such as `torch.softmax` is a Python call that lands in
# C++ (the *dispatcher* picks the kernel for the tensor's device and dtype)
# and runs compiled code over the whole tensor. You reach for your own
# compiled code when:
#
# - **the operation does not exist**, or exists only as a chain of small
#   calls, each of which reads and writes the whole tensor (memory traffic is
#   what limits most GPU code: *fusing* the chain into one kernel can make it
#   several times faster);
# - **a Python loop is the only way to express it** (per-row logic, a
#   custom recurrence): Python runs one interpreted step per element or row;
#   C++ runs the same loop compiled, and on many threads;
# - **you want to study or tune a kernel** the way this chapter does.
#
# Before writing one, try `torch.compile` (chapter 16): it fuses chains of
# element-wise and reduction ops into generated kernels for you. Hand-written
# kernels are for what it cannot do, or cannot do well enough.
#
# There are two ways to build an extension, and this chapter shows both:
#
# | | `load_inline` / `load` (JIT) | `setup.py` with `CppExtension` / `CUDAExtension` |
# |---|---|---|
# | when it compiles | at the first call, in your process | once, when the package is built |
# | where the result lives | a cache folder (here `build/torch_extensions/`) | a wheel, installed like any package |
# | suits | notebooks, experiments, tests | shipping the op to other people |
#
# ## A C++ op, loaded inline
#
# Here is the first version of the CPU kernel, the textbook loop (the input
# checks are in `softmax_common.h`, shown further down): per row, one loop
# for the maximum, one for `exp(x - max)` and its sum, one to divide.
# `at::parallel_for(begin, end, grain, fn)` splits the rows into ranges and
# runs `fn` on PyTorch's intra-op thread pool, the same pool
# `torch.set_num_threads` controls; `grain` is the smallest range worth
# giving a thread. The template is compiled for float32 and float64
# (`scalar_t`); `acc_t` is the type the sum is accumulated in (double
# here). Ignore the `kExp` and `kParallel` switches for now: they serve the
# measurements below.


# %%
def show_source(filename, start=None, stop=None, max_lines=60):
    """Print the lines of helpers/kernels/<filename> from the first line containing `start`
    up to (not including) the first later line containing `stop`."""
    lines = kernels.source(filename).splitlines()
    first = next((i for i, line in enumerate(lines) if start in line), 0) if start else 0
    last = next((i for i in range(first + 1, len(lines)) if stop in lines[i]), len(lines)) if stop else len(lines)
    shown = lines[first:last]
    print(f"// helpers/kernels/{filename}, lines {first + 1}-{first + min(len(shown), max_lines)} of {len(lines)}")
    print("\n".join(shown[:max_lines]))
    if len(shown) > max_lines:
        print(f"// ... {len(shown) - max_lines} more lines")


show_source("softmax_cpu.cpp", start="// --------------------------------------------------------------- scalar",
            stop="// ------------------------------------------------------------ vectorised")

# %% [markdown]
# `helpers.kernels.load_cpu_ops()` hands this file, `ops.cpp` and
# `bindings.cpp` (both shown below) and the flags to
# `torch.utils.cpp_extension.load_inline`, which writes the sources into a
# build folder, generates a `build.ninja` file, runs the compiler through
# `ninja`, and imports the resulting shared library as a Python module. The
# first build takes a while (PyTorch's headers are large); after that, ninja
# sees nothing changed and the import is nearly instant. Before building,
# the loader checks that a C++ compiler and ninja exist, so a missing tool
# gives one clear error (see *Pitfalls*). The flags are `-O3`, `-fopenmp` and
# the SIMD flags for this CPU; why the last two matter is measured in
# *Is it fast?*.

# %%
start = time.perf_counter()
cpu_ops = kernels.load_cpu_ops()
load_s = time.perf_counter() - start
print(f"loaded {cpu_ops.__name__} in {load_s:.1f} s (a long time means it was compiled just now)")
print("build folder:", rel(kernels.extension_dir(kernels.CPU_EXTENSION)))
print("functions:", [name for name in dir(cpu_ops) if not name.startswith("_")])
print(cpu_ops.softmax_cpu.__doc__.splitlines()[0])
print("compiled with flags:", " ".join(kernels.CFLAGS + kernels.cpu_vec_flags()))
print("build info:", cpu_ops.cpu_build_info())
# Is Sleef, at::vec's vectorised exp, really there? Its header ships with torch's headers,
# its code inside libtorch_cpu: ask the loader for the symbol the build info names.
torch_lib = Path(torch.__file__).parent
sleef_symbol = {"AVX512": "Sleef_expf16_u10", "AVX2": "Sleef_expf8_u10"}.get(torch.backends.cpu.get_cpu_capability())
if sleef_symbol is None:
    print("no AVX2/AVX-512 here: at::vec falls back to std::exp, Sleef is not used")
else:
    libtorch_cpu = ctypes.CDLL(str(next((torch_lib / "lib").glob("libtorch_cpu.*"))))
    sleef_ok = (torch_lib / "include" / "sleef.h").is_file() and hasattr(libtorch_cpu, sleef_symbol)
    print(f"Sleef: include/sleef.h present and libtorch_cpu exports {sleef_symbol}: {sleef_ok}")
    assert sleef_ok and sleef_symbol in cpu_ops.cpu_build_info(), f"Sleef's {sleef_symbol} is not available in this build"
assert kernels.load_cpu_ops() is cpu_ops, "a second load in the same process should return the cached module"

# %% [markdown]
# ### Is it right?
#
# The first thing to do with a new kernel is to compare it with an
# implementation you trust, on ordinary inputs and on the awkward ones: a
# single column, a long row, huge values, `-inf` (the way attention masks
# out positions), a row that is all `-inf`, a NaN, a `+inf`. `torch.softmax`
# is the reference. (The cases are `helpers.kernels.suite`'s, which the CUDA
# kernels meet later; its tolerances are explained there.) float32 results can differ from it in the last bits because
# the additions happen in a different order; the tolerance allows for that.

# %%
# NBVAL_CHECK_OUTPUT
x_check = torch.randn(CPU_ROWS, CPU_COLS, generator=generator)
diff32 = (kernels.softmax_cpu(x_check) - torch.softmax(x_check, -1)).abs().max().item()
diff64 = (kernels.softmax_cpu(x_check.double()) - torch.softmax(x_check.double(), -1)).abs().max().item()
print(f"float32 input {tuple(x_check.shape)}: max |difference| below 1e-6: {diff32 < 1e-6}")
print(f"float64 input: max |difference| below 1e-12: {diff64 < 1e-12}")
edge = suite.correctness(kernels.softmax_cpu, "cpu")
label_width = max(len(row["case"]) for row in edge)
for row in edge:
    print(f"  {row['case']:<{label_width}}  {'ok' if row['ok'] else 'MISMATCH'}")
report.record("C++ softmax: max |diff| vs torch.softmax (float32)", f"{diff32:.1e}")
assert diff32 < 1e-6 and diff64 < 1e-12, f"the C++ op disagrees with torch.softmax: {diff32:.2e} (fp32), {diff64:.2e} (fp64)"
assert all(row["ok"] for row in edge), f"edge cases failed: {[row['case'] for row in edge if not row['ok']]}"

# %% [markdown]
# Three cases deserve a word. In a row where every entry is `-inf` the
# maximum is `-inf` and `x - max` is `-inf - (-inf)`, which is NaN, so the
# op returns NaN, exactly like `torch.softmax` (PyTorch's fused attention
# kernels choose differently and return zeros there). A `+inf` entry is the
# row's maximum, and `inf - inf` is NaN again: `torch.softmax` returns a NaN
# row, not a one-hot row, and so does this op. A NaN anywhere makes its row
# NaN and leaves the other rows alone. This op matches `torch.softmax` on all
# three; `tests/test_kernels.py` and `tests/test_kernel_suite.py` pin that
# down.

# %% [markdown]
# ### Is it fast? From the scalar loop to SIMD, one measured step at a time
#
# First the baseline every compiled kernel should beat: a Python loop that
# does one row per iteration with PyTorch calls, the way you might first
# write a custom per-row op. It runs on fewer rows (`LOOP_ROWS`) because it
# is slow, so it is compared per row.


# %%
def softmax_python_loop(x):
    """Row by row in Python: correct, but one interpreted iteration (and 4 small ops) per row."""
    out = torch.empty_like(x)
    for i, row in enumerate(x):
        e = torch.exp(row - row.max())
        out[i] = e / e.sum()
    return out


variant = torch.ops.course.softmax_cpu_variant  # one of the kernels of softmax_cpu.cpp, by name (float32)
x_loop = x_check[:LOOP_ROWS].contiguous()
assert torch.allclose(softmax_python_loop(x_loop), torch.softmax(x_loop, -1), atol=1e-6)
t_loop = measure(lambda: softmax_python_loop(x_loop), label=f"Python loop, {LOOP_ROWS} rows", min_run_time=BENCH_TIME)
t_loop_cpp = measure(lambda: variant(x_loop, "scalar_serial"), label=f"C++ scalar loop, {LOOP_ROWS} rows", min_run_time=BENCH_TIME)
t_loop_op = measure(lambda: kernels.softmax_cpu(x_loop), label=f"C++ op (at::vec), {LOOP_ROWS} rows", min_run_time=BENCH_TIME)
print(f"input: {LOOP_ROWS} x {CPU_COLS} float32, {torch.get_num_threads()} threads")
print(timing_table([t_loop, t_loop_cpp, t_loop_op]))
op_vs_loop = t_loop.median_s / t_loop_op.median_s
scalar_vs_loop = t_loop.median_s / t_loop_cpp.median_s
print(f"C++ scalar loop: {scalar_vs_loop:.1f}x the Python loop's speed; the op (at::vec): {op_vs_loop:.1f}x")
_ = report.record("C++ op speed-up over the Python row loop", round(op_vs_loop, 1), "x")
_ = report.record("C++ scalar loop speed-up over the Python row loop", round(scalar_vs_loop, 1), "x")
assert op_vs_loop > LOOP_MIN_SPEEDUP, (
    f"the compiled op should beat a Python loop over rows clearly; it is only {op_vs_loop:.1f}x faster")

# %% [markdown]
# Each of the loop's four PyTorch calls is itself a compiled, vectorised
# kernel over a whole row, so with rows of `CPU_COLS` floats the
# interpreter's cost per row is spread over many elements. Compare the first
# two rows of the table: a C++ loop that calls the scalar `std::exp` per
# element is faster only by a small factor (the line "C++ scalar loop: ..."
# gives the ratio; it is printed, not asserted, because it is small and
# moves with the machine's load), because
# the Python loop's per-row calls are vectorised and the C++ loop is not.
# Compiling a loop is not what makes it fast. The op, vectorised too, is far
# ahead (the cell asserts more than 2x). With short rows the Python loop's
# fixed cost per row would weigh more (not measured here).

# %% [markdown]
# Now against `torch.softmax` on the full input, starting from the scalar
# loop on one thread, as the first build of this op ran (the line "scalar
# loop on one thread: ..." under the table gives its ratio to
# `torch.softmax`). Before changing code, find out where the time goes. Three suspects: the threads (is `at::parallel_for`
# really splitting the rows? is the grain wrong?), `exp` (`std::exp` is
# called one float at a time), and the sum in double (a conversion per
# element). `softmax_cpu.cpp` keeps each suspect as a variant of the same
# kernel, and two **probes** that are not softmaxes: the loop with `exp`
# left out (it times everything except `exp`), and a bare
# `torch.empty_like(x).fill_(0)`, which times allocating and first touching
# the output, the floor for any op that returns a new tensor.
#
# The threads first. Code compiled without `-fopenmp` has no `_OPENMP`
# macro, and PyTorch's header then compiles `at::parallel_for` into a plain
# call on the calling thread: no error, no warning, one core. Here are the
# lines of the installed torch that decide it:

# %%
parallel_header = Path(torch.__file__).parent / "include" / "ATen" / "Parallel-inl.h"
header_lines = parallel_header.read_text().splitlines()
first = next(i for i, line in enumerate(header_lines) if "#ifdef INTRA_OP_PARALLEL" in line)
print(f"// torch/include/ATen/Parallel-inl.h, lines {first + 1}-{first + 12} (INTRA_OP_PARALLEL is defined only under _OPENMP)")
print("\n".join(header_lines[first : first + 12]))
threads_used = cpu_ops.parallel_threads_used(CPU_ROWS, CPU_COLS)
grain = max(1, 32768 // CPU_COLS)
print(f"\nthis build: at::parallel_for hands {CPU_ROWS} rows (grain {grain} rows) to {threads_used} thread(s); torch.get_num_threads() = {torch.get_num_threads()}")
expected_threads = 1 if CPU_ROWS <= grain else min(torch.get_num_threads(), math.ceil(CPU_ROWS / grain))
assert threads_used == expected_threads, f"at::parallel_for used {threads_used} threads, expected {expected_threads}: is -fopenmp missing?"

# %% [markdown]
# The first build of this chapter had no `-fopenmp`, so it ran every row on
# one thread whatever `torch.set_num_threads` said. The variant
# `scalar_serial` runs the same loop the same way (it calls the body for all
# rows directly, which is what `at::parallel_for` compiles to without
# OpenMP). It is a reconstruction, compiled with this chapter's flags (`-O3`
# and the SIMD flags), so it stands for the first build's threading, not for
# its exact speed. The grain is not the problem: with `grain` rows as the smallest
# piece there are far more pieces than threads. Now the timings
# (`helpers.bench.measure`: warm-up, then the median over `blocks` timed
# blocks of `calls` calls in all):

# %%
x_bench = x_check  # (CPU_ROWS, CPU_COLS) float32
steps = [
    ("1. scalar loop, one thread (as the first build ran)", lambda: variant(x_bench, "scalar_serial")),
    ("2. + threads (built with -fopenmp)", lambda: variant(x_bench, "scalar")),
    ("   probe: 2 with the sum in float", lambda: variant(x_bench, "scalar_float_sum")),
    ("   probe: 2 without exp (not a softmax)", lambda: variant(x_bench, "scalar_no_exp")),
    ("3. + at::vec SIMD and Sleef exp (the op)", lambda: variant(x_bench, "vec")),
    ("4. at::vec, online max and sum", lambda: variant(x_bench, "vec_online")),
    ("torch.softmax", lambda: torch.softmax(x_bench, -1)),
    ("   probe: empty_like(x).fill_(0) only", lambda: torch.empty_like(x_bench).fill_(0.0)),
]
for name in ("scalar_serial", "scalar", "scalar_float_sum", "vec", "vec_online"):
    torch.testing.assert_close(variant(x_bench, name), torch.softmax(x_bench, -1), atol=1e-6, rtol=1e-5)
timings = {label: measure(fn, label=label, min_run_time=BENCH_TIME) for label, fn in steps}
t = list(timings.values())
t_serial, t_scalar, t_float_sum, t_no_exp, t_vec, t_online, t_torch, t_alloc = t
print(f"input: {CPU_ROWS} x {CPU_COLS} float32, {torch.get_num_threads()} threads, {cpu_ops.cpu_build_info().split(';')[0]}")
print(timing_table(t, baseline=t_serial))
vec_vs_serial = t_serial.median_s / t_vec.median_s
vec_vs_torch = t_torch.median_s / t_vec.median_s
serial_vs_torch = t_torch.median_s / t_serial.median_s
print(f"scalar loop on one thread: {serial_vs_torch:.2f}x torch.softmax's speed")
print(f"threads: step 2 is {t_serial.median_s / t_scalar.median_s:.2f}x step 1 on {torch.get_num_threads()} thread(s)")
print(f"the op (at::vec, all threads): {vec_vs_serial:.1f}x step 1 (one thread); ratio to torch.softmax's speed: {vec_vs_torch:.2f}")
print(f"online (4) against three passes (3): {t_vec.median_s / t_online.median_s:.2f}x the speed")
print(f"allocation and first touch of the output alone: {t_alloc.median_s / t_torch.median_s:.0%} of torch.softmax's time")
_ = report.record("CPU softmax 4096x4096: scalar loop on one thread (as the first build ran) relative to torch.softmax", round(serial_vs_torch, 2), "x")
_ = report.record("CPU softmax 4096x4096, all threads: at::vec op / torch.softmax speed ratio", round(vec_vs_torch, 2), "x")
_ = report.record("CPU softmax 4096x4096: the op (all threads) over step 1 (scalar loop, one thread)", round(vec_vs_serial, 1), "x")

# %%
fig, ax = plt.subplots(figsize=(9, 3.4))
labels = [label.strip() for label in timings][::-1]
values = [timing.median_s * 1e3 for timing in timings.values()][::-1]
colours = ["tab:gray" if "probe" in label else ("tab:green" if label == "torch.softmax" else "tab:blue") for label in labels]
ax.barh(labels, values, color=colours)
ax.set_xscale("log")
ax.set(xlabel="milliseconds per call (log scale; lower is faster)", title=f"CPU softmax of a {CPU_ROWS} x {CPU_COLS} float32 tensor, step by step")
ax.tick_params(axis="y", labelsize=8)
for i, v in enumerate(values):
    ax.text(v, i, f" {v:.3g}", va="center", fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# That table runs on all threads, and threads share the machine with
# whatever else runs on it: on a busy machine a parallel kernel waits for
# its slowest thread, and the 64 MB output of every call is freshly mapped
# memory (see the last probe). To compare the kernels' own work, here they
# are on one thread, on the first eighth of the rows (an 8 MB output, small
# enough for the allocator to keep and reuse between calls), with
# `torch.softmax` on one thread beside them. They are timed in `ROUNDS`
# interleaved rounds (every kernel once per round, the order rotated), and
# each ratio is the median of the per-round ratios, so a change in the
# machine's load during the cell shifts all of them alike instead of one
# row. Then the threads once more, on the same block: the `scalar` loop on
# 2 threads against 1.

# %%
x_block = x_bench[: max(1, CPU_ROWS // 8)]
block_fns = {name: (lambda name=name: variant(x_block, name))
             for name in ("scalar_serial", "scalar", "scalar_float_sum", "scalar_no_exp", "vec", "vec_online")}
block_fns["torch.softmax"] = lambda: torch.softmax(x_block, -1)
# ROUNDS interleaved rounds: in each, every kernel is timed once, in an order rotated by one per round, so a
# change in the machine's load hits all of them alike; a ratio is the median of the per-round ratios.
rounds = {name: [] for name in block_fns}
for r in range(ROUNDS):
    order = list(block_fns)[r % len(block_fns):] + list(block_fns)[: r % len(block_fns)]
    for name in order:
        rounds[name].append(measure(block_fns[name], label=f"{name}, 1 thread, {x_block.shape[0]} x {CPU_COLS}",
                                    min_run_time=BENCH_TIME / 2, num_threads=1))


def round_ratio(slow, fast):
    """Median over the rounds of slow's time / fast's time, each ratio from one round."""
    return statistics.median(a.median_s / b.median_s for a, b in zip(rounds[slow], rounds[fast]))


# the table shows each kernel's median round (by its median time): its calls and blocks are that round's
one_thread = {name: sorted(ts, key=lambda t: t.median_s)[len(ts) // 2] for name, ts in rounds.items()}
print(f"{ROUNDS} interleaved rounds; each kernel's median round:")
print(timing_table(list(one_thread.values()), baseline=one_thread["scalar_serial"]))
vec_speedup_1 = round_ratio("scalar_serial", "vec")
online_vs_vec_1 = round_ratio("vec_online", "vec")
vec_vs_torch_1 = round_ratio("torch.softmax", "vec")
exp_share = 1 - round_ratio("scalar_no_exp", "scalar")  # the fraction of the loop's time that goes away without exp
float_sum_gain = round_ratio("scalar", "scalar_float_sum")
print(f"one thread, median of {ROUNDS} round ratios: at::vec is {vec_speedup_1:.1f}x the scalar loop; the online kernel takes {online_vs_vec_1:.2f}x the three-pass kernel's time")
print(f"one thread: ratio of the at::vec op's speed to torch.softmax's: {vec_vs_torch_1:.2f}")
print(f"one thread: exp's share of the scalar loop's time: {exp_share:.0%}; float sum instead of double: {float_sum_gain:.2f}x")
_ = report.record("CPU softmax, one thread: at::vec speed-up over the scalar loop", round(vec_speedup_1, 1), "x")
_ = report.record(f"CPU softmax {x_block.shape[0]}x{CPU_COLS}, one thread: at::vec op / torch.softmax speed ratio", round(vec_vs_torch_1, 2), "x")
assert exp_share >= EXP_MIN_SHARE, f"leaving exp out removed only {exp_share:.0%} of the scalar loop's time (need {EXP_MIN_SHARE:.0%}): exp is not the large cost the text says"
assert float_sum_gain < FLOAT_SUM_MAX, f"a float sum made the loop {float_sum_gain:.2f}x faster (limit {FLOAT_SUM_MAX}): the double sum is a real cost here"
assert vec_speedup_1 >= VEC_MIN_SPEEDUP, f"on one thread the at::vec kernel is only {vec_speedup_1:.1f}x the scalar loop (need {VEC_MIN_SPEEDUP})"
assert vec_vs_torch_1 >= TORCH_RATIO_MIN, f"on one thread the at::vec op runs at only {vec_vs_torch_1:.2f}x torch.softmax's speed (need {TORCH_RATIO_MIN})"
if ONLINE_SLOWER:
    assert online_vs_vec_1 > 1, f"the online kernel was not slower than three passes on one thread ({online_vs_vec_1:.2f}x): revisit the prose"
if torch.get_num_threads() >= 2:
    scalar_threads = {n: measure(lambda: variant(x_block, "scalar"), label=f"scalar, {n} thread(s), {x_block.shape[0]} x {CPU_COLS}",
                                 min_run_time=BENCH_TIME, num_threads=n) for n in (1, 2)}
    print(timing_table(list(scalar_threads.values()), baseline=scalar_threads[1]))
    thread_speedup = scalar_threads[1].median_s / scalar_threads[2].median_s
    print(f"threads on the block: 2 threads run the scalar loop {thread_speedup:.2f}x as fast as 1")
    _ = report.record(f"CPU scalar loop {x_block.shape[0]}x{CPU_COLS}: 2 threads / 1 thread speed-up", round(thread_speedup, 2), "x")
    assert thread_speedup >= THREAD_MIN_SPEEDUP, f"2 threads ran the scalar loop only {thread_speedup:.2f}x as fast as 1 (need {THREAD_MIN_SPEEDUP}): is at::parallel_for splitting the rows?"
else:
    print("one thread only (torch.get_num_threads() == 1): the 2-thread speed-up is not measured in this run")

# %% [markdown]
# Read the two tables and the lines under them (your run's numbers):
#
# - **Step 1 → 2, threads.** The same loop, now really split over the
#   threads. On the full input the line "threads: step 2 is ..." mixes the
#   threads' gain with the cost of the output's freshly mapped 64 MB (see
#   *The floor* below), and on a shared machine a parallel loop also waits
#   for its slowest thread; it is printed, not asserted. On the block, whose
#   output the allocator reuses, the line "threads on the block" gives the
#   gain of 2 threads over 1, and the cell asserts at least
#   `THREAD_MIN_SPEEDUP` (only when torch has 2 threads or more; with one
#   thread, as in CI, it is not measured).
# - **Where step 2's time goes.** The probe without `exp` shows `exp`'s
#   share of the loop (the line "one thread: exp's share", from the
#   interleaved rounds; the cell asserts at least `EXP_MIN_SHARE`; on all
#   threads the probe rows of the first table are less steady and can even
#   point the other way).
#   The double sum is not the cost: summing in float changes the time by
#   little (the line's "float sum instead of double"; the cell asserts under
#   `FLOAT_SUM_MAX`). The double sum is therefore kept in
#   the scalar loop, which now serves float64, where it costs nothing extra.
# - **Step 3, SIMD.** The one-thread table shows what SIMD buys for the same
#   work (the cell asserts at least `VEC_MIN_SPEEDUP` times). Two lines give
#   the ratio of the op's speed to `torch.softmax`'s: "the op (at::vec, all threads): ... ratio"
#   on the full input with all threads, and "one thread: ratio ..." on the
#   block (the cell asserts at least `TORCH_RATIO_MIN`). The second is the
#   fairer comparison of the two kernels: on the full input a large share
#   of `torch.softmax`'s time can be the allocation of its output (the line
#   "allocation and first touch" gives this run's share; its probe row is
#   noisy, so read it with the row's IQR), which both ops pay alike. `at::vec::Vectorized<float>` is PyTorch's portable
#   SIMD type: a register of 16 floats with AVX-512 (8 with AVX2), with
#   `loadu`, `store`, `maximum`, arithmetic and `exp()`, which calls
#   **Sleef**'s vectorised `exp` (`Sleef_expf16_u10`, accurate to 1 ULP).
#   Sleef ships inside torch's `libtorch_cpu` and its header with torch's
#   includes, and the build info line above names the one compiled in. The
#   header picks the SIMD implementation from a macro, `CPU_CAPABILITY_AVX512`
#   or `CPU_CAPABILITY_AVX2`; without one (and the matching `-mavx512f` or
#   `-mavx2` flags) `Vectorized<float>` is a plain array and `exp()` calls
#   `std::exp` per element, so `helpers.kernels.cpu_vec_flags()` passes the
#   level torch itself uses on this CPU (`torch.backends.cpu.get_cpu_capability()`).
#   The sum is added up in float within each lane for 64 vectors at a
#   time, then moved into a double total: each float partial sum holds at
#   most 64 terms and the rest of the adding happens in double, at the cost
#   of one store every 64 vectors (a float-only sum would round across the
#   whole row).
# - **Step 4, online.** The online softmax (derived in the next section)
#   finds the maximum and the sum in one pass, but on the CPU it must
#   compute `exp` twice per element (once for the sum, again to write `y`)
#   where three passes compute it once. A 4096-float row (16 KB) stays in
#   the core's cache between passes, so re-reading it is cheap and the
#   extra `exp` is not: on one thread the online kernel is the slower one
#   (the one-thread table; the cell asserts it). It pays where reading
#   memory costs more than arithmetic, as on a GPU (below). The op uses the
#   three-pass kernel.
# - **The floor.** glibc's allocator hands blocks above 32 MB back to the
#   system when they are freed, so a 64 MB output is fresh memory that the
#   operating system must map and zero on every call. The probe
#   `empty_like(x).fill_(0)` does only that; the line "allocation and first
#   touch" gives its share of `torch.softmax`'s time. Both ops pay it, and
#   no kernel that returns a new tensor can go below that row.
#
# `softmax_cpu` (the op) runs step 3 for float32 and the scalar loop for
# float64:

# %%
show_source("softmax_cpu.cpp", start="// Three passes, like the scalar loop", stop="// Online softmax: one pass")

# %% [markdown]
# ## From a pybind11 function to a PyTorch operator
#
# `cpu_ops.softmax_cpu` is a C++ function bound to Python with **pybind11**
# alone (`bindings.cpp`, `PYBIND11_MODULE`). That is how most extension
# tutorials and many published repositories still do it, and it is the
# older way: to Python it is an opaque built-in function. PyTorch's
# **dispatcher**, the layer every `torch.*` operator goes through (autograd,
# then the kernel for the tensor's device), never sees it. Three
# consequences, measured:

# %%
x_small = torch.randn(4, 8, generator=generator, requires_grad=True)
y_old = cpu_ops.softmax_cpu(x_small)
print(f"1. gradients: the output of a requires_grad input has requires_grad={y_old.requires_grad}, grad_fn={y_old.grad_fn}")
try:
    y_old.sum().backward()
except RuntimeError as err:
    print(f"   backward(): {type(err).__name__}: {err}")


def pybind_way(x):
    return cpu_ops.softmax_cpu(x * 2.0) + 1.0


def operator_way(x):
    return torch.ops.course.softmax(x * 2.0) + 1.0


torch._dynamo.reset()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    explained_old = torch._dynamo.explain(pybind_way)(torch.randn(4, 8))
    torch._dynamo.reset()  # forget explain's compiled frames, so that fullgraph=True traces again
    try:
        torch.compile(pybind_way, fullgraph=True, backend="eager")(torch.randn(4, 8))
        fullgraph_error = None
    except torch._dynamo.exc.Unsupported as err:
        fullgraph_error = err
print(f"2. torch.compile: {explained_old.graph_count} graphs, {explained_old.graph_break_count} graph break(s); with fullgraph=True:")
print("   " + "\n   ".join(f"{type(fullgraph_error).__name__}: {fullgraph_error}".splitlines()[:2])[:400])
print(f"   (Dynamo also warned {len(caught)} time(s): {str(caught[0].message).splitlines()[0][:60]}...)" if caught else "")


class PybindModel(torch.nn.Module):
    def forward(self, x):
        return pybind_way(x)


try:
    torch.export.export(PybindModel(), (torch.randn(4, 8),))
    export_error = None
except RuntimeError as err:
    export_error = err
print(f"3. torch.export: {type(export_error).__name__}: {str(export_error).splitlines()[0]}")
print("   " + str(export_error).splitlines()[1][:160])
assert y_old.grad_fn is None and not y_old.requires_grad, "the pybind11 function was expected to lose the autograd graph"
assert explained_old.graph_break_count >= 1 and fullgraph_error is not None, "the pybind11 call was expected to break the graph"
assert export_error is not None, "torch.export was expected to fail on the pybind11 call"

# %% [markdown]
# The gradient is not wrong, it is **silently absent**: a model that used
# this function in its forward pass would train every parameter before it
# with a gradient of zero (none at all reaches them), and nothing would
# complain until `backward()` found no graph. Under `torch.compile`, Dynamo
# cannot trace into compiled code, so it stops the graph before the call and
# starts a new one after it (a *graph break*); `fullgraph=True` turns that
# into the error above. `torch.export`, which traces with fake tensors (no
# data), even runs the kernel on one and fails on the missing data.
#
# **The operator way.** `ops.cpp` registers the same kernels with the
# dispatcher. `TORCH_LIBRARY(course, m)` declares each operator's
# **schema**, its name and signature in PyTorch's schema language
# (`softmax(Tensor x) -> Tensor`: one tensor in, a new tensor out, nothing
# mutated); `TORCH_LIBRARY_IMPL(course, CPU, m)` registers the CPU kernel
# for it, and the CUDA build adds `TORCH_LIBRARY_IMPL(course, CUDA, m)`. The
# operator is then `torch.ops.course.softmax`, and the dispatcher picks the
# kernel from the tensor's device. A namespace may be *defined* by only one
# `TORCH_LIBRARY` block among all the libraries a process loads, which is
# why the CUDA build carries only its `TORCH_LIBRARY_IMPL` block (compiled
# with `-DCOURSE_CUDA_ONLY`) and the installable package uses its own
# namespace. A second definition fails at load time; Python's
# `torch.library.Library("course", "DEF")` is the same registration as a
# `TORCH_LIBRARY` block, so it shows the message without a compile:

# %%
show_source("ops.cpp", start="#ifndef COURSE_CUDA_ONLY", max_lines=30)
try:
    torch.library.Library(kernels.NAMESPACE, "DEF")
    second_definition = None
except RuntimeError as err:
    second_definition = err
print(f"\n{type(second_definition).__name__}: {str(second_definition).split('  Previous registration')[0]}")
assert second_definition is not None and "Only a single TORCH_LIBRARY" in str(second_definition), "a second definition should fail"

# %% [markdown]
# Two parts are registered from Python, in `helpers.kernels.register_python_parts`:
#
# - a **fake kernel** (`torch.library.register_fake`): given tensors that
#   have a shape, dtype and device but no data, it returns an output with
#   the right metadata. `torch.compile` and `torch.export` trace with such
#   tensors (chapter 19). Ours checks everything the real kernel checks
#   that depends only on metadata (dtype, 2-D, non-empty, contiguous), then
#   returns `torch.empty_like(x)`. The dtype rule: the dtypes of the kernel
#   for the tensor's device (float32 or float64 on the CPU, float32 on CUDA);
#   a tensor on the `meta` device does not say which kernel will run, so it
#   may have the dtypes of either.
# - an **autograd formula** (`torch.library.register_autograd`). With
#   $y = \mathrm{softmax}(x)$ over a row, $\partial y_i / \partial x_j =
#   y_i(\delta_{ij} - y_j)$, so for an upstream gradient $g$,
#   $\partial L / \partial x_j = \sum_i g_i y_i (\delta_{ij} - y_j) =
#   y_j \,(g_j - \sum_i g_i y_i)$: in PyTorch,
#   `y * (g - (g * y).sum(-1, keepdim=True))`. It needs only the output
#   $y$, which `setup_context` saves.
#
# A notebook cell or a module can run twice. In torch 2.14 a second
# registration does not fail, it stacks one more on the dispatcher that
# replaces the first (earlier releases refused a second fake kernel with an
# error), so the function first asks the dispatcher whether the op already
# has a `Meta` kernel (which `register_fake` adds) and an `Autograd`
# kernel, and registers only what is missing:

# %%
print(inspect.getsource(kernels.register_python_parts).split('"""')[2].strip())
print()
print(inspect.getsource(kernels._softmax_backward).strip())
print("registered by a second call:", kernels.register_python_parts())
# The fake kernel on meta tensors (no data): shape and dtype out, the kernel's metadata checks in.
meta_float64 = torch.ops.course.softmax(torch.empty(4, 8, dtype=torch.float64, device="meta"))
print(f"fake kernel, float64 meta input: {tuple(meta_float64.shape)} {meta_float64.dtype} on {meta_float64.device}")
for label, bad in [("empty", torch.empty(0, 8, device="meta")), ("float16", torch.empty(4, 8, dtype=torch.half, device="meta"))]:
    try:
        torch.ops.course.softmax(bad)
        fake_error = None
    except RuntimeError as err:
        fake_error = err
    print(f"fake kernel, {label} meta input: {type(fake_error).__name__}: {str(fake_error).splitlines()[0]}")
    assert fake_error is not None, f"the fake kernel accepted a {label} input that the real kernel refuses"

# %% [markdown]
# Now the same three checks through the operator, plus
# `torch.library.opcheck`, which tests the registration itself: the schema
# against what the kernel does (no hidden mutation or aliasing), the fake
# kernel against the real one, the autograd registration, and a trace
# through AOTAutograd with dynamic shapes. Gradients are compared with
# `torch.softmax`'s, and `torch.autograd.gradcheck` compares the formula
# with finite differences in float64.

# %%
# NBVAL_CHECK_OUTPUT
y_new = torch.ops.course.softmax(x_small)
upstream = torch.randn(4, 8, generator=generator)
(grad_op,) = torch.autograd.grad(y_new, x_small, upstream)
(grad_ref,) = torch.autograd.grad(torch.softmax(x_small, -1), x_small, upstream)
grad_diff = (grad_op - grad_ref).abs().max().item()
x64 = torch.randn(6, 10, dtype=torch.float64, generator=generator, requires_grad=True)
grad_ok = torch.autograd.gradcheck(torch.ops.course.softmax, (x64,))
print(f"1. gradients: grad_fn={type(y_new.grad_fn).__name__}; max |grad - torch.softmax's grad| below 1e-6: {grad_diff < 1e-6}")
print(f"   gradcheck (float64, finite differences): {grad_ok}")
checks = torch.library.opcheck(torch.ops.course.softmax, (torch.randn(5, 33, generator=generator, requires_grad=True),))
print("   opcheck:", checks)

graphs = []


def counting_backend(gm, example_inputs):
    """A torch.compile backend that keeps each FX graph it receives and runs it as it is."""
    graphs.append(gm)
    return gm.forward


torch._dynamo.reset()
explained_new = torch._dynamo.explain(operator_way)(torch.randn(4, 8))
compiled = torch.compile(operator_way, fullgraph=True, backend=counting_backend)
x_in = torch.randn(4, 8, generator=generator)
same = torch.equal(compiled(x_in), operator_way(x_in))
calls = [str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"]
print(f"2. torch.compile: {explained_new.graph_count} graph, {explained_new.graph_break_count} graph breaks;"
      f" fullgraph=True compiled {len(graphs)} graph calling {calls}; result equal to eager: {same}")
x_grad = torch.randn(4, 8, generator=generator, requires_grad=True)
(grad_compiled,) = torch.autograd.grad(torch.compile(operator_way, fullgraph=True, backend="aot_eager")(x_grad), x_grad, upstream)
(grad_eager,) = torch.autograd.grad(torch.softmax(x_grad * 2.0, -1) + 1.0, x_grad, upstream)
compiled_grad_diff = (grad_compiled - grad_eager).abs().max().item()
print(f"   backward through the compiled graph (aot_eager backend) matches torch.softmax's: {compiled_grad_diff < 1e-5}")


class OperatorModel(torch.nn.Module):
    def forward(self, x):
        return operator_way(x)


exported = torch.export.export(OperatorModel(), (torch.randn(4, 8),))
print("3. torch.export:", [str(node.target) for node in exported.graph.nodes if node.op == "call_function"])
assert y_new.grad_fn is not None and grad_diff < 1e-6, f"the operator's gradient differs from torch.softmax's by {grad_diff:.2e}"
assert grad_ok, "gradcheck failed: the autograd formula disagrees with finite differences"
assert all(v == "SUCCESS" for v in checks.values()), f"opcheck failed: {checks}"
assert explained_new.graph_break_count == 0 and len(graphs) == 1 and same, "the operator should compile into one graph with no break"
assert compiled_grad_diff < 1e-5, f"the compiled backward differs from torch.softmax's by {compiled_grad_diff:.2e}"
assert "course.softmax.default" in [str(node.target) for node in exported.graph.nodes], "the exported graph should call course.softmax"

# %% [markdown]
# The graph Dynamo captured calls `course.softmax` as one node between the
# multiply and the add; the exported program does too (`.default` is the
# op's only overload). The backends used here, a counting function and then
# `aot_eager`, run the graph without generating code, which keeps the cell
# fast on a CPU. With `inductor`, the default, the op stays an opaque call
# and Inductor generates code for what is around it. Here it is once, on a
# tiny function with two element-wise ops on each side of the op (`torch._inductor.utils.run_and_get_code`
# returns the generated Python wrapper):

# %%
def around_op(x):
    return torch.ops.course.softmax(x * 2.0 + 1.0) * 3.0 - 1.0


if not RUN_INDUCTOR:
    print("RUN_INDUCTOR is False: skipping the inductor compile")
else:
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    x_ind = torch.randn(4, 8, generator=generator)
    start = time.perf_counter()
    y_ind, (wrapper_code,) = run_and_get_code(torch.compile(around_op, fullgraph=True), x_ind)
    ind_s = time.perf_counter() - start
    call_body = wrapper_code.split("def call(self, args):")[1].split("return (")[0]
    generated = re.findall(r"^(cpp_fused_\w+) = async_compile", wrapper_code, flags=re.M)
    print(f"compiled with inductor in {ind_s:.0f} s; the wrapper's call(), its comments and checks left out:")
    print("\n".join("   " + line.strip() for line in call_body.splitlines()
                    if line.strip() and not line.strip().startswith(("#", "assert", "args.clear", "arg0_1,", "assert_size_stride"))))
    ind_diff = (y_ind - around_op(x_ind)).abs().max().item()
    print(f"generated kernels: {generated}; max |compiled - eager| = {ind_diff:.1e}")
    assert "torch.ops.course.softmax.default(" in call_body, "inductor should call the op as it is, an opaque call"
    assert len(generated) == 2, f"expected one generated kernel before the op and one after it, got {generated}"
    assert ind_diff <= 1e-6, f"the inductor-compiled function differs from eager by {ind_diff:.2e}"

# %% [markdown]
# Inductor generated two C++ kernels, each *fusing* two element-wise ops
# (multiply and add before, multiply and subtract after: one pass over the
# data each, instead of two), and calls `torch.ops.course.softmax.default`
# between them, as it is. It cannot fuse across the op: to Inductor the
# op's code is a black box, known only by its schema and its fake kernel.
# From here on, `kernels.softmax_cpu` goes through the operator, and
# `kernels.softmax` is the operator for any device that has a kernel.
#
# ## The online softmax
#
# Softmax of a row $x_1 \dots x_n$ is $y_j = e^{x_j - m} / d$ with
# $m = \max_k x_k$ and $d = \sum_k e^{x_k - m}$. Subtracting $m$ changes
# nothing mathematically (it cancels) but keeps every exponent $\le 0$, so
# $e^{x}$ cannot overflow float32 (which it does above $x \approx 88.7$).
# The textbook algorithm reads the row three times: once for $m$, once for
# $d$, once to write $y$.
#
# Milakov and Gimelshein (*Online normalizer calculation for softmax*, 2018)
# compute $m$ and $d$ **together in one pass**. Keep, after the first $j$
# elements, $m_j = \max_{k \le j} x_k$ and $d_j = \sum_{k \le j} e^{x_k - m_j}$.
# When $x_{j+1}$ arrives, the new maximum is $m_{j+1} = \max(m_j, x_{j+1})$,
# and every old term has to be re-expressed relative to it:
#
# $$d_{j+1} = \sum_{k \le j+1} e^{x_k - m_{j+1}}
#           = e^{m_j - m_{j+1}} \sum_{k \le j} e^{x_k - m_j} + e^{x_{j+1} - m_{j+1}}
#           = d_j \, e^{m_j - m_{j+1}} + e^{x_{j+1} - m_{j+1}}.$$
#
# If the maximum did not change, the factor $e^{m_j - m_{j+1}}$ is 1; if it
# grew, the factor shrinks the old sum. The same algebra merges two partial
# results $(m_a, d_a)$ and $(m_b, d_b)$ of two parts of a row:
# $m = \max(m_a, m_b)$, $d = d_a e^{m_a - m} + d_b e^{m_b - m}$. That is what
# lets many GPU threads each summarise their own slice of a row and then
# combine. One pass for $(m, d)$ plus one to write $y$: two reads and a write
# per element instead of three reads and a write.
#
# Here is the recurrence in plain PyTorch, a chunk of the row at a time (a
# GPU thread does it one element at a time), checked against
# `torch.softmax`. The one special case: while everything seen is `-inf`,
# $m_j - m_{j+1}$ would be $-\infty - (-\infty)$ = NaN, so the state is left
# as it is.


# %%
def online_softmax(row, chunk):
    """Softmax of a 1-D tensor with the online max/sum recurrence over chunks; also returns the states."""
    m = torch.tensor(-math.inf, dtype=row.dtype)
    d = torch.tensor(0.0, dtype=row.dtype)
    states = []
    for start in range(0, len(row), chunk):
        part = row[start : start + chunk]
        m_new = torch.maximum(m, part.max())
        if m_new > -math.inf:  # else: everything so far is -inf; keep (m, d) = (-inf, 0)
            d = d * torch.exp(m - m_new) + torch.exp(part - m_new).sum()
            m = m_new
        states.append((m.item(), d.item()))
    return torch.exp(row - m) / d, states


row = torch.randn(16 * ONLINE_CHUNK, generator=generator, dtype=torch.float64) * 3
row[: ONLINE_CHUNK // 2] = -math.inf  # a masked start
y_online, states = online_softmax(row, ONLINE_CHUNK)
online_diff = (y_online - torch.softmax(row, 0)).abs().max().item()
print(f"{len(states)} chunks of {ONLINE_CHUNK}; max |online - torch.softmax| = {online_diff:.1e}")
assert online_diff < 1e-12, f"the online softmax should equal torch.softmax (float64), differs by {online_diff:.2e}"
report.record("online softmax (PyTorch, float64): max |diff| vs torch.softmax", f"{online_diff:.1e}")

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3))
ax1.step(range(1, len(states) + 1), [s[0] for s in states], where="post")
ax1.set(title="running maximum m", xlabel="chunks read")
ax2.step(range(1, len(states) + 1), [s[1] for s in states], where="post", color="tab:orange")
ax2.set(title="running sum d = sum exp(x - m)", xlabel="chunks read")
fig.tight_layout()
plt.show()

# %% [markdown]
# At each upward step of the maximum (left) the old sum is rescaled by
# $e^{m_j - m_{j+1}} < 1$ before the new chunk's terms are added, so at
# those chunks the sum (right) grows less than it otherwise would, and it
# falls when the rescaling outweighs the new terms. Between steps the sum
# only grows.
#
# ## CUDA: threads, warps, blocks
#
# A CUDA **kernel** is a function that runs on the GPU once per **thread**,
# and thousands of threads run at the same time. Threads are grouped:
#
# - a **warp** is 32 threads that execute the same instruction together.
#   When they load memory, the hardware combines their 32 addresses into as
#   few 32-byte transactions as possible: if the addresses are consecutive,
#   32 floats come in 4 transactions (**coalesced**); if they are far apart,
#   32 transactions, most of each wasted. Warps can also swap registers
#   directly: `__shfl_xor_sync(mask, v, k)` gives each lane the `v` of lane
#   `lane ^ k`, so 5 exchanges (k = 16, 8, 4, 2, 1) combine all 32 values.
# - a **block** is up to 1024 threads (several warps) that run on one
#   streaming multiprocessor and share fast on-chip **shared memory**; they
#   wait for each other with `__syncthreads()`.
# - the **grid** is all the blocks of one launch: `kernel<<<blocks, threads>>>(...)`.
#
# ### The naive kernel: one thread per row
#
# This is the version often published: thread `i` handles row `i` alone,
# with three loops over it, like the C++ op.

# %%
show_source("softmax_cuda.cu", start="// ---------------------------------------------------------------- naive", stop="// ----------------------------------------------------------------- fast")

# %% [markdown]
# It is correct, and slow, for two reasons:
#
# 1. **Uncoalesced access.** Neighbouring threads of a warp handle
#    neighbouring rows, so at loop step `j` the 32 threads read
#    `x[i * cols + j]` for 32 consecutive `i`: addresses a whole row
#    (`cols * 4` bytes) apart. A warp-wide load then touches 32 different
#    128-byte cache lines, where a coalesced load of 32 consecutive floats
#    touches one. The memory system serves the warp line by line: 32 requests
#    for 128 useful bytes. (How many *bytes* finally come from DRAM depends on
#    whether those lines are still in cache at the next steps `j + 1, j + 2,
#    ...`; the number of requests per load does not.)
# 2. **Too few threads.** There is one thread per row: a (4096, 4096) input
#    launches only 4096 threads (16 blocks of 256, the launch in
#    `softmax_naive`), and each walks its 4096 elements three times in a
#    loop. An H200 has 132 streaming multiprocessors (SMs), each able to hold
#    2048 threads at once (270,336 in all): 16 blocks keep at most 16 SMs
#    busy, and 128 warps are far too few to keep enough loads in flight to
#    hide the several hundred cycles a DRAM access takes.
#
# The picture below shows which addresses one warp touches in its first
# load, for an input of 32 rows of 64 floats, under the two schemes (the
# fast one with float4 loads: each thread reads 4 neighbouring floats).

# %%
rows_demo, cols_demo = 32, 64
naive_touch = torch.zeros(rows_demo, cols_demo)
naive_touch[:, 0] = 1  # step 0: thread i reads x[i, 0]
fast_touch = torch.zeros(rows_demo, cols_demo)
fast_touch[0, :] = 1  # lane l reads x[0, 4l : 4l + 4]: 32 lanes x 4 floats = 128 floats; here the row is 64
fig, axes = plt.subplots(1, 2, figsize=(9, 3))
for ax, touch, title in [(axes[0], naive_touch, "naive: a warp's 32 loads\n(one per row, cols*4 bytes apart)"),
                         (axes[1], fast_touch, "fast: a warp's loads\n(one row, consecutive bytes)")]:
    ax.imshow(touch, cmap="Blues", aspect="auto", vmin=0, vmax=1)
    ax.set(title=title, xlabel="column", ylabel="row")
fig.tight_layout()
plt.show()
# Byte addresses of one warp-wide load, for a row of 4096 floats; which 128-byte cache lines they touch.
naive_addresses = [lane * 4096 * 4 for lane in range(32)]  # lane i reads x[i, 0]: one row apart
fast_addresses = [lane * 16 + k for lane in range(32) for k in range(0, 16, 4)]  # lane l reads x[0, 4l : 4l + 4]
naive_lines, fast_lines = len({a // 128 for a in naive_addresses}), len({a // 128 for a in fast_addresses})
print(f"128-byte cache lines touched by one warp-wide load: naive {naive_lines} (for 128 bytes used), fast {fast_lines} (for 512 bytes used)")
naive_cu = kernels.source("softmax_cuda.cu").split("launch_softmax_naive(")[1].split("launch_softmax_fast(")[0]
naive_block = int(re.search(r"const int threads = (\d+);", naive_cu).group(1))  # the naive launch
naive_blocks = math.ceil(4096 / naive_block)  # one thread per row
print(f"the naive kernel on a (4096, 4096) input: {naive_blocks} blocks of {naive_block} = {naive_blocks * naive_block} threads;"
      f" an H200 holds 132 SMs x 2048 = {132 * 2048} threads")
assert (naive_blocks, naive_block) == (16, 256), f"softmax_cuda.cu changed the naive launch: update the prose ({naive_blocks} x {naive_block})"

# %% [markdown]
# ### The fast kernel: a warp or a block per row, one pass for max and sum
#
# - **Work split.** Rows of up to 1024 columns get one warp each (4 rows per
#   block); longer rows get a whole block (256 to 1024 threads). Thread `t`
#   handles elements `t, t + T, t + 2T, ...` (T threads per row), so at
#   every step neighbouring threads read neighbouring addresses: coalesced.
# - **Vectorised loads.** When `cols % 4 == 0` and both pointers are 16-byte
#   aligned, every row starts on a 16-byte boundary and the kernel reads
#   `float4`s: one instruction fetches 16 bytes, which means fewer
#   instructions for the same bytes. Otherwise (`cols = 4099`, or a view that
#   starts one float into a buffer) it falls back to one float per load. A
#   template parameter `kVec` compiles both versions.
# - **Online max/sum.** Each thread keeps its own $(m, d)$ with the
#   recurrence above (one `expf` per element), the warp merges them with
#   `__shfl_xor_sync`, and in the block version the first warp merges the
#   warps' results through shared memory. Then every thread writes its
#   elements as `expf(x - m) / d`.
# - **Special values.** `-inf` entries add nothing; an all `-inf` row gives
#   NaN like `torch.softmax`; a NaN poisons its row like `torch.softmax`.
#   Values as large as float32's maximum (3.4e38) cannot overflow because
#   `expf` only ever sees `x - m <= 0`.

# %%
show_source("softmax_cuda.cu", start="// Add one element v", stop="// Pass 1 over one row")
print()
show_source("softmax_cuda.cu", start="// One block per row", stop="bool aligned16", max_lines=40)

# %% [markdown]
# The rest runs on the CPU, in two files. The **launcher**, at the end of
# `softmax_cuda.cu`, takes raw pointers and sizes, picks the kernel and its
# launch shape, and queues it on a stream. The **host wrapper**,
# `softmax_cuda_host.cpp`, is the `at::Tensor` function Python calls: it
# checks the input (with the checks the CPU op uses), allocates the output,
# makes the input's GPU the current device, and calls the launcher on
# PyTorch's current CUDA stream, so the kernel is ordered with the
# surrounding PyTorch work.
#
# The split is there for the compile time. `nvcc` hands every header a
# `.cu` file includes to the host C++ compiler as well as to its own front
# end, and PyTorch's tensor headers are large, so `softmax_cuda.cu`
# includes only the CUDA runtime and `softmax_cuda.h`, which declares the
# launchers with plain C++ types. The ordinary C++ compiler handles the
# ATen side. The build cell below reads, from ninja's log in the build
# folder, how long each of the two compiles took.

# %%
show_source("softmax_cuda.cu", start="cudaError_t course_cuda::launch_softmax_fast(")
print()
show_source("softmax_cuda_host.cpp", start="at::Tensor softmax_fast(")
print()
show_source("softmax_common.h", start="inline void check_softmax_input", stop="}  // namespace course")

# %% [markdown]
# ### Compiling the CUDA sources
#
# `nvcc`, the CUDA compiler, needs no GPU: it only needs to be told which
# GPU architectures to generate code for. PyTorch reads that from the
# environment variable `TORCH_CUDA_ARCH_LIST` (for example `"9.0"` for
# H100/H200, `"8.0"` for A100, `"8.6"` for RTX 30xx). If it is unset, PyTorch
# asks the visible GPUs; with no GPU it has nobody to ask, so
# `helpers.kernels` then uses one default arch, `"9.0"`. `CUDA_HOME` tells
# PyTorch where the toolkit is (`/usr/local/cuda` is also its default
# guess). The flags are `-O3` and `-lineinfo` (maps instructions to source
# lines for the Nsight profiler at no run-time cost); not `--use_fast_math`,
# whose approximate `expf` would not speed up a memory-bound kernel and
# whose relaxed handling of special values would change results.

# %%
nvcc_path = None
try:
    nvcc_path = kernels.check_toolchain(cuda=True)["nvcc"]
    nvcc_version = subprocess.run([nvcc_path, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-2]
    print(f"nvcc found: {nvcc_version}")
    print(f"arch list that will be used: {kernels.cuda_arch_list()}")
except KernelBuildError as err:
    print(f"no CUDA toolkit here, so the CUDA sources cannot be compiled: {err}")

cuda_ops = None
if nvcc_path and BUILD_CUDA:
    start = time.perf_counter()
    cuda_ops = kernels.load_cuda_ops()
    print(f"built (or loaded from the build cache) and imported {cuda_ops.__name__} in {time.perf_counter() - start:.1f} s")
    print("build folder:", rel(kernels.extension_dir(kernels.CUDA_EXTENSION)))
    print("functions:", [name for name in dir(cuda_ops) if not name.startswith("_")])
    # .ninja_log: one line per output, "start_ms end_ms mtime output hash", from the build that made it.
    ninja_log = kernels.extension_dir(kernels.CUDA_EXTENSION) / ".ninja_log"
    compile_s = {}
    for line in ninja_log.read_text().splitlines()[1:] if ninja_log.is_file() else []:
        begin_ms, end_ms, _, output = line.split("\t")[:4]
        compile_s[output] = (int(end_ms) - int(begin_ms)) / 1000
    if {"cuda.cuda.o", "main.o"} <= compile_s.keys():
        print(f"compile times of the build: nvcc, softmax_cuda.cu: {compile_s['cuda.cuda.o']:.1f} s;"
              f" C++ compiler, ops.cpp + bindings.cpp + softmax_cuda_host.cpp: {compile_s['main.o']:.1f} s")
        assert compile_s["cuda.cuda.o"] < compile_s["main.o"], "nvcc took longer than the C++ side: has softmax_cuda.cu gained an ATen header?"
elif nvcc_path:
    print("BUILD_CUDA is False: skipping the CUDA compile")

# %% [markdown]
# The module imports even on a machine without a GPU: the shared library
# links against the CUDA runtime, and the runtime only looks for a GPU
# driver when the first CUDA call is made. Calling the CUDA kernel directly
# with a CPU tensor is refused by its input check before any CUDA call.
#
# Both builds are now loaded in this process, and they share the one
# operator: the CPU build defined `course::softmax` and registered its CPU
# kernel, the CUDA build added a CUDA kernel to it (and `softmax_naive`'s).
# `torch._C._dispatch_has_kernel_for_dispatch_key` asks the dispatcher which
# kernels an operator has:

# %%
if cuda_ops is not None:
    try:
        cuda_ops.softmax_fast(torch.randn(4, 8))
    except RuntimeError as err:
        print(f"{type(err).__name__}: {err}")
    keys = ("CPU", "CUDA", "Meta", "Autograd")
    for op in ("course::softmax", "course::softmax_naive"):
        has = {key: torch._C._dispatch_has_kernel_for_dispatch_key(op, key) for key in keys}
        print(f"{op:<22}", ", ".join(f"{key}: {'yes' if v else 'no'}" for key, v in has.items()))
    assert torch._C._dispatch_has_kernel_for_dispatch_key("course::softmax", "CUDA"), "the CUDA build should add a CUDA kernel"
    torch.testing.assert_close(torch.ops.course.softmax(x_loop), torch.softmax(x_loop, -1))
    print("torch.ops.course.softmax on a CPU tensor still runs the CPU kernel, with both builds loaded")
else:
    print("no CUDA module was built, so there is nothing to call")

# %% [markdown]
# ### On a GPU: correctness, then throughput
#
# A correctness suite is worth something only if it can fail. The first
# version of this one compared with an *absolute* tolerance of 1e-6, on
# values that lie in [0, 1]: on a row of a million entries every value is
# about 1e-6, so a kernel that lost one block's partial sum, and was wrong
# everywhere in that row, still passed (the next cells show it).
# `helpers.kernels.suite` now compares each result with `torch.softmax` of
# the same input in float64, and checks two things:
#
# - every entry within a **relative** tolerance, plus a small absolute floor
#   (1e-12) for entries too small for their relative error to mean anything;
# - every **row sums to 1**, within `2 U sqrt(n) + 16 U` for a row of `n`
#   entries, where `U` = 2⁻²⁴ is float32's unit round-off. The
#   rounding errors of a float32 sum of `n` positive terms add up like a
#   random walk, to about `U sqrt(n)` (the worst summation order, one thread
#   adding left to right as the naive kernel does, measured at most
#   0.7 `U sqrt(n)` on rows of 1,025 to 1,000,000). An error in the sum
#   scales the whole row, and this check sees it. The relative tolerance
#   is that bound plus `32 U` for the roundings of `x - max`, `exp` and the
#   division.
#
# The cases: the edge cases of *Is it right?* above, plus seeded random
# widths around every width at which `softmax_fast` changes its kernel or
# its launch (read from `softmax_cuda.cu`: a warp per row up to 1024
# columns, then a block of 256 threads up to 4096, 512 up to 16384, 1024
# beyond), each on both sides with widths that are and are not multiples of
# 4 (float4 or scalar loads), and a contiguous view that starts one float
# into its buffer, which is not 16-byte aligned and so takes the scalar
# path. `tests/test_kernel_suite.py` checks that these switch points are
# still the ones in the `.cu` file.
#
# The suite takes the op and the device as parameters, so the next cell runs
# on every machine: on a GPU over the two CUDA kernels; without one over the
# C++ CPU op, which exercises the suite's code but says nothing about the
# CUDA kernels.

# %%
print(f"row-sum tolerance: {suite.row_sum_tolerance(1024):.1e} at 1024 columns, {suite.row_sum_tolerance(1_000_000):.1e}"
      f" at 1,000,000; absolute floor {suite.ATOL:g}")
print("widths around the switch points:", suite.switch_point_widths(SEED))


def run_suite(name, fn, device, max_cols=None):
    """Run the correctness cases and the bad-input checks on ``fn``; print a summary; return what failed."""
    checks = suite.correctness(fn, device, max_cols=max_cols, seed=SEED)
    refused = suite.check_rejections(fn, device)
    failed = [r["case"] for r in checks if not r["ok"]] + [f"accepts {r['input']}" for r in refused if not r["ok"]]
    worst = max(checks, key=lambda r: r["tol_used"])
    print(f"{name} on {device}: {len(checks)} cases and {len(refused)} bad inputs, {len(failed)} failures;"
          f" the closest case ({worst['case']}) used {worst['tol_used']:.0%} of its tolerance")
    for case in failed:
        print("  FAILED:", case)
    return failed


if has_gpu and cuda_ops is not None:
    suite_targets = {"softmax_naive": (cuda_ops.softmax_naive, suite.NAIVE_MAX_COLS), "softmax_fast": (cuda_ops.softmax_fast, None)}
    suite_device = "cuda"
else:
    print("no CUDA device (or no CUDA build): running the suite on the C++ CPU op instead;"
          " the CUDA kernels' correctness is UNVERIFIED in this run")
    suite_targets, suite_device = {"softmax_cpu": (cpu_ops.softmax_cpu, None)}, "cpu"
suite_failures = {name: run_suite(name, fn, suite_device, max_cols) for name, (fn, max_cols) in suite_targets.items()}
assert not any(suite_failures.values()), f"a kernel failed the correctness suite: {suite_failures}"

# %% [markdown]
# Does the suite fail a wrong kernel? `suite.BROKEN_KERNELS` holds three
# "kernels" written with PyTorch ops, each with a bug a hand-written GPU
# kernel really has: one drops the partial sum of the last 4096-wide block
# of a long row (an off-by-one in the loop that merges the blocks); one
# keeps a running maximum but forgets to rescale the running sum when it
# grows, so it normalises with a stale maximum; one is right but 1e-5 too
# large on every row longer than 1024. They run on the CPU, on every
# machine, and the suite must fail each of them; the last line compares the
# old absolute check with the new one on the lost partial sum.

# %%
# NBVAL_CHECK_OUTPUT
caught = {name: [r["case"] for r in suite.correctness(fn, "cpu", seed=SEED) if not r["ok"]] for name, fn in suite.BROKEN_KERNELS.items()}
n_cases = len(suite.correctness_cases("cpu", SEED))
for name, cases in caught.items():
    print(f"{name:<30} fails {len(cases):>2} of {n_cases} cases, e.g. {cases[0] if cases else 'none'}")
long_row = suite.correctness_cases("cpu", SEED)["one very long row (1, 1000000)"]
lost = suite.lost_partial_sum(long_row)
old_diff = (lost - torch.softmax(long_row, -1)).abs().max().item()
lost_verdict = suite.compare(lost, long_row)
print(f"lost partial sum on the 1,000,000-wide row: max |diff| {old_diff:.1e}, so the old absolute 1e-6 check says"
      f" {'pass' if old_diff <= 1e-6 else 'fail'}; the row sums to 1 - {lost_verdict['worst_row_sum_err']:.1e}"
      f" (tolerance {lost_verdict['sum_tol']:.1e}), so the suite says {'pass' if lost_verdict['ok'] else 'fail'}")
assert all(caught.values()), f"the suite passed a broken kernel: {[name for name, cases in caught.items() if not cases]}"
assert old_diff <= 1e-6 and not lost_verdict["ok"], "expected: the old check misses the lost partial sum, the new one catches it"

# %% [markdown]
# The 1e-5 error is caught at widths from 1025 to about 5,800, where the row-sum
# tolerance is below 1e-5, and not on the million-wide row: there the
# float32 round-off of a correct kernel is itself about that large, and no
# float32 test can tell the two apart. (`tests/test_kernel_suite.py` also
# shows that a correct float32 softmax with the worst summation order uses
# less than half of every tolerance.)

# %% [markdown]
# Throughput. Softmax does almost no arithmetic per byte, so its speed is
# set by memory bandwidth. The fair unit is **effective bandwidth**: the
# bytes the op must move (read the input once, write the output once:
# `2 * rows * cols * 4` for float32) divided by the time. `y.copy_(x)` moves
# exactly those bytes with no arithmetic at all, so its GB/s is the ceiling
# for this device, and "fraction of copy" says how close a kernel gets.
#
# The same method runs on the CPU first, on every machine, over the
# `(CPU_ROWS / 8, CPU_COLS)` block: `suite.benchmark` times `torch.softmax`,
# the C++ op and the copy with `helpers.bench.measure`, and its table says
# how many calls and timed blocks each median rests on.

# %%
cpu_bench_rows = suite.benchmark({"torch.softmax": lambda x: torch.softmax(x, -1), "C++ op (course.softmax)": kernels.softmax_cpu},
                                 shapes=[tuple(x_block.shape)], device="cpu", min_run_time=BENCH_TIME)
print(f"CPU, {torch.get_num_threads()} thread(s), float32")
print(suite.markdown_table(cpu_bench_rows))
cpu_of_copy = {r["op"]: r["of_copy"] for r in cpu_bench_rows}
_ = report.record(f"CPU {x_block.shape[0]}x{CPU_COLS}: C++ op GB/s as a fraction of copy", round(cpu_of_copy["C++ op (course.softmax)"], 2), "x")
assert [r["op"] for r in cpu_bench_rows] == ["copy (y.copy_(x))", "torch.softmax", "C++ op (course.softmax)"]
assert all(r["blocks"] >= 5 and r["calls"] >= r["blocks"] for r in cpu_bench_rows), "every median should rest on at least 5 timed blocks"

# %% [markdown]
# On a GPU the shapes are `GPU_SHAPES`. The last, (8, 1,000,000), has only
# 8 rows: the fast kernel gives each row one block, so it launches 8 blocks,
# which keep 8 of an H200's 132 SMs busy, and it should sit far below copy,
# for the same "too few threads" reason as the naive kernel above. The
# next two cells need a GPU; without one each prints one line saying what
# stays unverified. `benchmarks/softmax_gpu.py` runs the same suite and
# benchmark as a script on a GPU machine and writes a markdown table and
# JSON; in a run of this notebook on a GPU the figures appear in these
# cells' outputs and in `build/report.md`.

# %%
if not (has_gpu and cuda_ops is not None):
    print("no CUDA device (or no CUDA build): skipping the GPU benchmark")
    bench_rows = []
else:
    bench_rows = suite.benchmark(
        {"torch.softmax": lambda x: torch.softmax(x, -1), "naive": cuda_ops.softmax_naive, "fast": cuda_ops.softmax_fast},
        shapes=GPU_SHAPES, device="cuda", min_run_time=BENCH_TIME,
    )
    print(f"{torch.cuda.get_device_name()}, float32")
    print(suite.markdown_table(bench_rows))
    labels = [f"{r}x{c}" for r, c in GPU_SHAPES]
    fig, ax = plt.subplots(figsize=(9, 3))
    for k, op in enumerate(["copy (y.copy_(x))", "torch.softmax", "fast", "naive"]):
        vals = [next((b["gbps"] for b in bench_rows if b["op"] == op and tuple(b["shape"]) == s), 0) for s in GPU_SHAPES]
        ax.bar([i + 0.2 * k for i in range(len(labels))], vals, width=0.2, label=op)
    ax.set_xticks([i + 0.3 for i in range(len(labels))], labels)
    ax.set(ylabel="GB/s (effective)", title="Softmax throughput against copy bandwidth")
    ax.legend(fontsize=8)
    fig.tight_layout()
    plt.show()

# %%
if not bench_rows or (4096, 4096) not in [tuple(r["shape"]) for r in bench_rows]:
    print("no GPU benchmark of 4096 x 4096 ran: the GB/s figures and the claim that the fast kernel beats the naive one"
          " are UNVERIFIED in this run")
else:
    head = {r["op"]: r for r in bench_rows if tuple(r["shape"]) == (4096, 4096)}
    fast_vs_torch = head["fast"]["gbps"] / head["torch.softmax"]["gbps"]
    fast_vs_naive = head["fast"]["gbps"] / head["naive"]["gbps"]
    _ = report.record("GPU 4096x4096: fast kernel GB/s", round(head["fast"]["gbps"]), "GB/s")
    _ = report.record("GPU 4096x4096: torch.softmax GB/s", round(head["torch.softmax"]["gbps"]), "GB/s")
    _ = report.record("GPU 4096x4096: naive kernel GB/s", round(head["naive"]["gbps"]), "GB/s")
    _ = report.record("GPU 4096x4096: copy GB/s", round(head["copy (y.copy_(x))"]["gbps"]), "GB/s")
    _ = report.record("GPU 4096x4096: fast / torch.softmax speed", round(fast_vs_torch, 2), "x")
    _ = report.record("GPU 4096x4096: fast / naive speed", round(fast_vs_naive, 1), "x")
    print(f"fast = {fast_vs_torch:.2f}x torch.softmax, {fast_vs_naive:.1f}x naive, {head['fast']['of_copy']:.0%} of copy")
    assert fast_vs_naive > 1, f"the fast kernel should beat the naive one; it is {fast_vs_naive:.2f}x its speed"

# %% [markdown]
# Only "fast beats naive" is asserted: the two reasons above predict it on
# any GPU. How the fast kernel compares with `torch.softmax` and with the
# copy depends on the GPU and on the shape, so those ratios are recorded
# (in `build/report.md`) and printed, not required.

# %% [markdown]
# ## The same sources as an installable package
#
# `load_inline` suits notebooks. To give the op to other people you build it
# once into a package. `extensions/course_kernels/setup.py` does that with
# `setuptools`: `CppExtension` (or `CUDAExtension` when nvcc and a GPU are
# there, or `COURSE_KERNELS_CUDA=1` forces it) describes the module and its
# sources, which are the very files in `helpers/kernels` (referenced, not
# copied), with the inline build's flags, and `BuildExtension` supplies
# PyTorch's include paths. Its operators live in their own namespace,
# `torch.ops.course_kernels`, set with `-DCOURSE_NS=course_kernels`: this
# notebook loads the package and the inline build in one process, and one
# namespace can have only one `TORCH_LIBRARY` block. The package binds no
# Python functions: in place of `bindings.cpp` it compiles `py_module.cpp`,
# an empty module whose import loads the library and so runs the
# registrations (the pattern of PyTorch's custom-operator tutorial), and
# callers use `torch.ops.course_kernels.softmax`; pybind11's headers, slow
# to compile, stay out of the package build. Building needs the installed torch, so it runs without build
# isolation. The usual commands would be
# `pip wheel --no-build-isolation --no-deps -w build/wheels extensions/course_kernels`
# and `pip install` of the wheel. So that this notebook never changes the
# course's virtual environment, it runs the `build_ext` step only, with the
# result placed in `build/ext_site/`, and imports it from there. A second run
# skips the build when the module is newer than every source.

# %%
print(Path(ROOT / "extensions/course_kernels/setup.py").read_text().split('"""', 2)[2].strip())

# %%
package_dir = ROOT / "extensions" / "course_kernels"
ext_site = build_dir() / "ext_site"
ext_temp = build_dir() / "ext_temp"
package_sources = [package_dir / "setup.py", kernels.KERNEL_DIR / "__init__.py",
                   *(kernels.KERNEL_DIR / f for f in (*kernels.CPU_SOURCES, *kernels.CUDA_CPP_SOURCES, *kernels.CUDA_SOURCES, *kernels.HEADERS, "py_module.cpp"))]


def built_module():
    return next(iter(sorted(ext_site.glob("course_kernels*.so"))), None)


def tidy(line):
    """A build log line without this machine's folders (so the stored output has no absolute paths)."""
    line = line.replace(sys.prefix, "<venv>").replace(str(ROOT), "<root>")
    return re.sub(r"/(root|home/[^/\s]+)/\S*", "<path>", line)[:140]


course_kernels = None
if not BUILD_PACKAGE:
    print("BUILD_PACKAGE is False: skipping the package build")
else:
    so = built_module()
    if so is not None and so.stat().st_mtime > max(p.stat().st_mtime for p in package_sources):
        print(f"{rel(so)} is newer than its sources: nothing to build")
    else:
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "setup.py", "build_ext", "--build-lib", str(ext_site), "--build-temp", str(ext_temp)],
            cwd=package_dir, capture_output=True, text=True,
            env={**os.environ, "MAX_JOBS": "2", "CUDA_HOME": kernels.cuda_home() or ""},
        )
        # Keep the build's own lines; drop torch's log lines (e.g. "W1130 ... No CUDA runtime is found").
        log = [line for line in (proc.stdout + proc.stderr).strip().splitlines() if not re.match(r"[WIE]\d{4} ", line)]
        print(f"setup.py build_ext exited with {proc.returncode} after {time.perf_counter() - start:.0f} s; last lines of its log:")
        print("\n".join("  " + tidy(line) for line in log[-4:]))
        assert proc.returncode == 0, "the package build failed; the log lines above say why"
    if str(ext_site) not in sys.path:
        sys.path.insert(0, str(ext_site))
    import course_kernels

    print("imported course_kernels from", rel(Path(course_kernels.__file__).parent))
    print("its Python functions:", [name for name in dir(course_kernels) if not name.startswith("_")],
          "; operators it registered:", [f"course_kernels::{op}" for op in ("softmax", "softmax_naive", "softmax_cpu_variant")
                                          if torch._C._dispatch_has_kernel_for_dispatch_key(f"course_kernels::{op}", "CPU")])

# %%
if course_kernels is None:
    print("no package was built (BUILD_PACKAGE=False): nothing to compare")
else:
    same = torch.equal(torch.ops.course_kernels.softmax(x_check), torch.ops.course.softmax(x_check))
    print(f"package operator torch.ops.course_kernels.softmax == torch.ops.course.softmax, bit for bit: {same}")
    assert same, "the installed package and load_inline compiled the same source; their results should be identical"

# %% [markdown]
# ## Where builds live, and the lock file
#
# `load_inline` keeps each extension in its own folder: the generated
# `main.cpp` (and `cuda.cu`), `build.ninja`, the object files, the `.so`,
# and a file named `lock`. `helpers.kernels` puts these folders in
# `$TORCH_EXTENSIONS_DIR` when it is set (the Makefile sets it to
# `build/torch_extensions`), else in `build/torch_extensions/`, never in your
# home folder. The notebook, the tests and `benchmarks/softmax_gpu.py` use
# the same names, sources and flags, so whichever compiles first does the
# work for the others.

# %%
for name in (kernels.CPU_EXTENSION, kernels.CUDA_EXTENSION):
    folder = kernels.extension_dir(name)
    if folder.is_dir():
        files = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
        print(f"{rel(folder)}: {', '.join(files)}")
        print(f"  lock: {kernels.lock_status(name)}")

# %% [markdown]
# **The lock.** Two processes building the same extension at once would
# overwrite each other's files, so the build takes an operating-system lock
# on `<folder>/lock` first; the second process waits, then finds the build
# done. In torch 2.14 this is an `flock`-style lock: when the holder dies,
# even by `kill -9`, the kernel releases it, and a `lock` *file* left behind
# is harmless. (Older releases used a lock that was the file's mere
# existence: a build killed midway left the file, and every later
# `load_inline` of that extension waited **forever**, printing nothing.
# You may still meet that in older environments; deleting the file fixed
# it.) What can still block you today is a live process that holds the
# lock and never finishes, such as a notebook kernel frozen in the middle of
# a build. `helpers.kernels` therefore waits at most
# `$COURSE_KERNEL_LOCK_TIMEOUT` seconds (1800 by default) and then raises an
# error naming the file, and `clear_stale_lock(name)` deletes a lock file
# that nobody holds (it refuses to delete a held one). `make clean` removes
# all of `build/`. Here is all of it on a throwaway folder, not on a real
# build:

# %%
with tempfile.TemporaryDirectory() as tmp:
    fake = Path(tmp) / "demo_ext"
    fake.mkdir()
    (fake / "lock").write_text("")  # what a killed build leaves behind
    print("after a killed build:", kernels.lock_status("demo_ext", tmp))
    print(f"waiting for it takes {kernels.wait_for_lock('demo_ext', tmp, timeout_s=2):.1f} s (nobody holds it)")
    with FileLock(str(fake / "lock")):  # now play a frozen process that holds it
        print("while held:", kernels.lock_status("demo_ext", tmp))
        try:
            kernels.wait_for_lock("demo_ext", tmp, timeout_s=1, poll_s=0.2)
        except KernelBuildError as err:
            print(f"{type(err).__name__}: {str(err).replace(tmp, '<tmp>')}")
        try:
            kernels.clear_stale_lock("demo_ext", tmp)
        except KernelBuildError as err:
            print(f"{type(err).__name__}: {str(err).replace(tmp, '<tmp>')}")
    print("released; clear_stale_lock deleted it:", kernels.clear_stale_lock("demo_ext", tmp))
    print("now:", kernels.lock_status("demo_ext", tmp))

# %% [markdown]
# ## Pitfalls
#
# **1. The wrong dtype.** The CPU op accepts float32 and float64. Passing
# half precision (or integers) fails in the input check, before any C++ loop
# reads memory as the wrong type. Without that check, `data_ptr<float>()`
# would raise a less helpful error, and a kernel given a raw pointer would
# read garbage silently. The fix is in the message:

# %%
x_half = x_check[:4].half()
try:
    cpu_ops.softmax_cpu(x_half)
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")
print("fixed:", cpu_ops.softmax_cpu(x_half.float()).dtype)

# %% [markdown]
# **2. Forgetting `.contiguous()`.** A C++ kernel that walks memory as
# `x[r * cols + j]` assumes the rows are laid out one after another. A
# transpose (or `x[:, ::2]`, or `expand`) is a *view* with other strides
# (chapter 01): the same numbers, visited in a different order. A kernel
# without a contiguity check returns a wrong answer without any error; ours
# refuses, and `.contiguous()` makes a packed copy.

# %%
x_t = x_check[:8, :16].t()
print("shape", tuple(x_t.shape), "strides", x_t.stride(), "contiguous:", x_t.is_contiguous())
try:
    cpu_ops.softmax_cpu(x_t)
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")
fixed = cpu_ops.softmax_cpu(x_t.contiguous())
assert torch.allclose(fixed, torch.softmax(x_t, -1), atol=1e-6)
print("fixed with .contiguous(): matches torch.softmax")

# %% [markdown]
# **3. No compiler.** On a fresh laptop or a slim Docker image there may be
# no C++ compiler, no ninja, or no CUDA toolkit. `load_inline` would then fail
# deep inside a subprocess call. `helpers.kernels.check_toolchain` looks
# first and says what to install. Here it is pointed at a compiler that does
# not exist, through the `CXX` variable (nothing is uninstalled):

# %%
saved_cxx = os.environ.get("CXX")
os.environ["CXX"] = "g++-does-not-exist"
try:
    kernels.check_toolchain()
except KernelBuildError as err:
    print(f"{type(err).__name__}: {err}")
finally:
    if saved_cxx is None:
        os.environ.pop("CXX")
    else:
        os.environ["CXX"] = saved_cxx
print("with the real compiler:", {k: Path(v).name for k, v in kernels.check_toolchain().items()})

# %% [markdown]
# **4. Two `load_inline` mistakes from published examples.** `load_inline`
# writes the pybind11 module definition itself when you pass
# `functions=[...]`. Many examples online *also* write their own
# `PYBIND11_MODULE` block, which then defines the module twice; others list a
# name in `functions` that the source does not define (a typo, or a function
# that lives in the `.cu` part and was never declared in the C++ part). Both
# fail at compile time, and the message is buried in the compiler's log.
# Here are the real messages, from the tiniest source that shows each (only
# pybind11's header, `no_implicit_headers=True`, so that each failed build
# costs seconds; with the usual `torch/extension.h` the errors are the same):

# %%
from torch.utils.cpp_extension import load_inline  # noqa: E402  (imported by helpers.kernels already: no log line)

TINY = "#include <pybind11/pybind11.h>\nint add_one(int x) { return x + 1; }\n"
MISTAKES = {
    "PYBIND11_MODULE and functions= together": (
        TINY + 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add_one", &add_one); }\n', ["add_one"]),
    "a functions= name the source lacks": (TINY, ["add_onee"]),
}


def compile_errors(name, cpp, functions):
    """Build `cpp` with load_inline; return the compiler's `error:` lines (paths shortened), or [] if it built."""
    folder = kernels.extension_dir(name)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        load_inline(name, [cpp], functions=functions, no_implicit_headers=True,
                                              with_pytorch_error_handling=False, build_directory=str(folder))
    except RuntimeError as err:
        return [re.sub(r"\S*/main\.cpp", "main.cpp", line) for line in str(err).splitlines() if ": error:" in line]
    return []


if not BUILD_MISTAKES:
    print("BUILD_MISTAKES is False: skipping the two failing builds")
else:
    found = {}
    for k, (label, (cpp, functions)) in enumerate(MISTAKES.items(), start=1):
        start = time.perf_counter()
        found[label] = compile_errors(f"course_mistake_{k}", cpp, functions)
        print(f"{label} (functions={functions}), {time.perf_counter() - start:.0f} s:")
        print("\n".join("  " + line for line in found[label]))
    redefinition, undeclared = found.values()
    assert any("redefinition of" in line and "PyInit_" in line for line in redefinition), f"expected a redefinition of PyInit_: {redefinition}"
    assert any("add_onee" in line and "not declared" in line for line in undeclared), f"expected 'add_onee' not declared: {undeclared}"

# %% [markdown]
# The first: `PYBIND11_MODULE` expands into a few functions named after the
# module (`PyInit_<name>` is the one Python calls on import), so two blocks
# are two definitions of each. The fix is to pick one: either drop your
# `PYBIND11_MODULE` and keep `functions=`, or keep it and pass no
# `functions`. The second: the generated `m.def("add_onee", add_onee, ...)`
# names something that does not exist; the compiler even suggests the right
# name. Better still, skip pybind11 for tensors altogether and register an
# operator, as above.
#
# Two more you may meet. An `nvcc` whose *major* version differs from the
# CUDA version torch was built with (`torch.version.cuda`) makes
# `BuildExtension` (the `setup.py` route) refuse to build, because the two
# CUDA runtimes could clash; a minor difference only logs a warning.
# `load_inline` does not compare the versions at all, so there a mismatch
# shows up later, as a compile or import error. Either way, install the
# matching toolkit. And editing a `.cu` file while a notebook kernel has the
# old module imported changes nothing until you restart the kernel: Python
# cannot unload a shared library.
#
# ## Exercises
#
# **1. The online softmax step.** Write `online_update(m, d, chunk)`: given
# the running maximum `m` and the running sum `d` (both 0-dim float64
# tensors; at the start `-inf` and `0`) and the next chunk of a row (a 1-D
# tensor), return the new `(m, d)`. Remember the case where everything seen
# so far is `-inf`.


# %%
def online_update(m, d, chunk):
    # Your code here: return (m_new, d_new).
    raise NotImplementedError


result = check("20.online_update", online_update)

# %% [markdown]
# **2. Achieved bandwidth.** Write `softmax_gbps(rows, cols, seconds,
# dtype=torch.float32)`: the effective GB/s of a row-wise softmax over a
# (rows, cols) tensor that took `seconds`, counting the bytes it must read
# and write. (For scale: a 4096 x 4096 float32 softmax in 50 microseconds
# would be about 2,700 GB/s; an H100's memory peaks at about 3,350 GB/s.)


# %%
def softmax_gbps(rows, cols, seconds, dtype=torch.float32):
    # Your code here.
    raise NotImplementedError


result = check("20.softmax_gbps", softmax_gbps)

# %% [markdown]
# **3. A C++ op: row-wise L2 normalisation.** Write, in a Python string,
# the C++ source of `at::Tensor l2_normalize_rows(const at::Tensor& x,
# double eps)`, which returns `y` with `y[r] = x[r] / max(||x[r]||_2, eps)`
# for every row `r`, what `F.normalize(x, p=2.0, dim=1, eps=eps)` computes.
# The checker tests:
#
# - input checks: `TORCH_CHECK`s that refuse, with a RuntimeError whose
#   message names what is expected, a tensor that is not on the CPU
#   (mention "CPU"), a dtype other than float32 or float64 (mention
#   "float32"), one that is not 2-D ("2-D"), one that is not contiguous
#   ("contiguous");
# - the rows split over threads with `at::parallel_for` (from
#   `<ATen/Parallel.h>`): a (4096, 512) input runs on 2 threads, where the
#   ranges your function receives do not start at row 0. The checker
#   records the ranges `at::parallel_for` hands out and requires that one
#   call splits the 4096 rows into at least two ranges that cover them. So
#   choose the grain (the third argument, the fewest rows worth a thread)
#   from the row length, as this chapter's kernels do (about 32k elements
#   per piece): a grain as large as the number of rows never splits. Once,
#   it also runs your function for the last range only, and requires every
#   other row to come out unwritten: the work must happen inside the
#   function `at::parallel_for` calls, on the rows of its range, not in a
#   loop beside it and not from row 0;
# - the loop is yours: the op may allocate its output (`at::empty_like`)
#   but call no other tensor operation. The checker refuses `at::` library
#   calls in the source, and records every operator the op dispatches while
#   it runs (with a `TorchDispatchMode`, which sees calls made from C++
#   too), so `x.norm()` is refused as well;
# - float32 and float64, the result in the input's dtype, the input left
#   unchanged, a row of zeros giving zeros.
#
# Write only the function and its `#include`s: `<ATen/core/Tensor.h>`
# (`at::Tensor`), `<ATen/ops/empty_like.h>`, `<ATen/Parallel.h>` and
# `<ATen/Dispatch.h>`; `<ATen/ATen.h>` has them all but takes about three
# times as long to compile. The checker appends a `TORCH_LIBRARY` block that
# registers it, and compiles it with `load_inline` into
# `build/torch_extensions/`, once per distinct source (15 to 30 seconds; the
# same source again is instant), with `-fopenmp`, without which
# `at::parallel_for` runs everything on one thread. A compile error comes
# back as a hint with the first errors and your line numbers.


# %%
def l2_normalize_rows_source():
    # Your code here: return the C++ source as a string, for example
    # return r"""
    # #include <ATen/Dispatch.h>
    # #include <ATen/Parallel.h>
    # #include <ATen/core/Tensor.h>
    # #include <ATen/ops/empty_like.h>
    # at::Tensor l2_normalize_rows(const at::Tensor& x, double eps) { ... }
    # """
    raise NotImplementedError


result = check("20.l2_normalize_rows", l2_normalize_rows_source)

# %% [markdown]
# ## Summary
#
# - `load_inline` compiles C++/CUDA sources into a Python module, caching the
#   build; `setup.py` with `CppExtension`/`CUDAExtension` and `BuildExtension`
#   makes the same sources an installable package.
# - Check inputs on the host with `TORCH_CHECK` (device, dtype, dims,
#   non-empty, contiguity) and say what to do in the message: C++ does not
#   protect you from reading memory as the wrong type or in the wrong order.
# - Register kernels as operators: a schema with `TORCH_LIBRARY` (one block
#   per namespace per process), kernels per backend with
#   `TORCH_LIBRARY_IMPL`, a fake kernel and an autograd formula from Python,
#   and check it all with `torch.library.opcheck`. A function bound with
#   pybind11 alone silently drops gradients, breaks `torch.compile` graphs
#   and cannot be exported.
# - `at::parallel_for` spreads independent rows over PyTorch's threads, but
#   only in code compiled with `-fopenmp`. A compiled scalar loop beats a
#   Python loop of vectorised PyTorch calls on long rows by only a small
#   factor (measured above); coming near `torch.softmax` needs what it uses: SIMD
#   (`at::vec::Vectorized`, with the `CPU_CAPABILITY` flags) and a
#   vectorised `exp` (Sleef). Measure each step, with probes that remove one
#   suspect at a time, before changing code.
# - With `load_inline`, write either `functions=` or your own
#   `PYBIND11_MODULE`, never both.
# - On a GPU, memory access decides speed: coalesced, vectorised loads and
#   enough threads. The online softmax reads the row once for max and sum
#   together, and its merge rule lets threads combine partial results with
#   warp shuffles and shared memory.
# - Report GPU speed as effective GB/s, next to the device's copy bandwidth.
# - Builds live in `build/torch_extensions/`; a left-over `lock` file is
#   harmless in torch 2.14, a held one means a process is (or was) building.
#
# Next, chapter 21 leaves the kernels and goes the other way, up to
# function transforms: `torch.func`'s `vmap` and `grad` turn per-example code
# into batched code without writing any kernel at all.

# %%
report.finish()
