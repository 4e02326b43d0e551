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
#   `at::parallel_for`; timing the result against a Python loop and
#   `torch.softmax`;
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
#   meet: wrong dtype, a non-contiguous tensor, a missing compiler.
#
# **Prerequisites:** chapters 01 (tensors, strides, `.contiguous()`), 16
# (`torch.compile`) and 17 (profiling), and `helpers.bench` for timing.
# Reading C++ helps; writing it is not needed for the exercises.
#
# **Estimated time:** 60 minutes, plus one to three minutes the first time
# the extensions compile.

# %% tags=["parameters"]
CPU_ROWS = 4096  # rows of the CPU benchmark input
CPU_COLS = 512  # columns (the softmax is over each row)
LOOP_ROWS = 256  # rows for the Python-loop baseline (one Python iteration per row: slow)
BENCH_TIME = 0.3  # seconds of timed runs per measurement (helpers.bench.measure)
ONLINE_CHUNK = 64  # chunk length for the online softmax written in PyTorch
BUILD_CUDA = True  # compile the CUDA sources when nvcc is present (1-3 min the first time, then cached)
BUILD_PACKAGE = True  # build extensions/course_kernels with setuptools (about a minute the first time, then cached)
GPU_SHAPES = ((4096, 4096), (65536, 128), (16384, 1024), (1024, 32768), (8, 1_000_000))  # (rows, cols) benchmarked on a GPU
FAST_MIN_RATIO = 0.9  # on a GPU the fast kernel must reach this fraction of torch.softmax's speed on 4096 x 4096
SEED = 0

# %% [markdown]
# ## Setup

# %%
import math
import os
import re
import subprocess
import sys
import tempfile
import time
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
# Here is the whole CPU op (the input checks are in `softmax_common.h`, shown
# further down). `at::parallel_for(begin, end, grain, fn)` splits the rows
# into ranges and runs `fn` on PyTorch's intra-op thread pool, the same pool
# `torch.set_num_threads` controls; `grain` is the smallest range worth
# giving a thread. `AT_DISPATCH_FLOATING_TYPES` instantiates the template for
# float32 and float64 and picks one from the tensor's dtype at run time.


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


show_source("softmax_cpu.cpp", start="namespace {")

# %% [markdown]
# `helpers.kernels.load_cpu_ops()` hands this file, the bindings file and
# the flags to `torch.utils.cpp_extension.load_inline`, which writes the
# sources into a build folder, generates a `build.ninja` file, runs the
# compiler through `ninja`, and imports the resulting shared library as a
# Python module. The first build takes a while (PyTorch's headers are large);
# after that, ninja sees nothing changed and the import is nearly instant.
# Before building, the loader checks that a C++ compiler and ninja exist, so
# a missing tool gives one clear error (see *Pitfalls*).

# %%
start = time.perf_counter()
cpu_ops = kernels.load_cpu_ops()
load_s = time.perf_counter() - start
print(f"loaded {cpu_ops.__name__} in {load_s:.1f} s (a long time means it was compiled just now)")
print("build folder:", rel(kernels.extension_dir(kernels.CPU_EXTENSION)))
print("functions:", [name for name in dir(cpu_ops) if not name.startswith("_")])
print(cpu_ops.softmax_cpu.__doc__.splitlines()[0])
assert kernels.load_cpu_ops() is cpu_ops, "a second load in the same process should return the cached module"

# %% [markdown]
# ### Is it right?
#
# The first thing to do with a new kernel is to compare it with an
# implementation you trust, on ordinary inputs and on the awkward ones: a
# single column, a long row, huge values, `-inf` (the way attention masks
# out positions), a row that is all `-inf`. `torch.softmax` is the
# reference. float32 results can differ from it in the last bits because
# the additions happen in a different order; the tolerance allows for that.

# %%
# NBVAL_CHECK_OUTPUT
x_check = torch.randn(CPU_ROWS, CPU_COLS, generator=generator)
diff32 = (cpu_ops.softmax_cpu(x_check) - torch.softmax(x_check, -1)).abs().max().item()
diff64 = (cpu_ops.softmax_cpu(x_check.double()) - torch.softmax(x_check.double(), -1)).abs().max().item()
print(f"float32 input {tuple(x_check.shape)}: max |difference| below 1e-6: {diff32 < 1e-6}")
print(f"float64 input: max |difference| below 1e-12: {diff64 < 1e-12}")
edge = suite.correctness(cpu_ops.softmax_cpu, "cpu")
for row in edge:
    print(f"  {row['case']:<40} {'ok' if row['ok'] else 'MISMATCH'}")
report.record("C++ softmax: max |diff| vs torch.softmax (float32)", f"{diff32:.1e}")
assert diff32 < 1e-6 and diff64 < 1e-12, f"the C++ op disagrees with torch.softmax: {diff32:.2e} (fp32), {diff64:.2e} (fp64)"
assert all(row["ok"] for row in edge), f"edge cases failed: {[row['case'] for row in edge if not row['ok']]}"

# %% [markdown]
# The last case deserves a word. In a row where every entry is `-inf` the
# maximum is `-inf` and `x - max` is `-inf - (-inf)`, which is NaN, so the
# op returns NaN, exactly like `torch.softmax` (PyTorch's fused attention
# kernels choose differently and return zeros there). This op matches
# `torch.softmax`; the tests in `tests/test_kernels.py` pin that down.

# %% [markdown]
# ### Is it fast?
#
# Three ways to compute the same thing, timed with `helpers.bench.measure`
# (warm-up, repeats, median). The Python loop does one row per iteration
# with PyTorch calls, the way you might first write a custom per-row op; it
# runs on fewer rows (`LOOP_ROWS`) because it is slow, so the table compares
# it per row.


# %%
def softmax_python_loop(x):
    """Row by row in Python: correct, but one interpreted iteration (and 4 small ops) per row."""
    out = torch.empty_like(x)
    for i, row in enumerate(x):
        e = torch.exp(row - row.max())
        out[i] = e / e.sum()
    return out


x_loop = x_check[:LOOP_ROWS].contiguous()
assert torch.allclose(softmax_python_loop(x_loop), torch.softmax(x_loop, -1), atol=1e-6)
t_loop = measure(lambda: softmax_python_loop(x_loop), label=f"Python loop, {LOOP_ROWS} rows", min_run_time=BENCH_TIME)
t_cpp_small = measure(lambda: cpu_ops.softmax_cpu(x_loop), label=f"C++ op, {LOOP_ROWS} rows", min_run_time=BENCH_TIME)
t_cpp = measure(lambda: cpu_ops.softmax_cpu(x_check), label=f"C++ op, {CPU_ROWS} rows", min_run_time=BENCH_TIME)
t_torch = measure(lambda: torch.softmax(x_check, -1), label=f"torch.softmax, {CPU_ROWS} rows", min_run_time=BENCH_TIME)
print(f"input: rows x {CPU_COLS} float32, {torch.get_num_threads()} threads")
print(timing_table([t_loop, t_cpp_small, t_cpp, t_torch]))
per_row = {t.label.split(",")[0]: t.median_s / rows * 1e6 for t, rows in [(t_loop, LOOP_ROWS), (t_cpp, CPU_ROWS), (t_torch, CPU_ROWS)]}
print("microseconds per row:", {k: round(v, 2) for k, v in per_row.items()})
cpp_vs_loop = t_loop.median_s / t_cpp_small.median_s
cpp_vs_torch = t_torch.median_s / t_cpp.median_s
_ = report.record("C++ op speed-up over the Python row loop", round(cpp_vs_loop, 1), "x")
_ = report.record("C++ op speed relative to torch.softmax (CPU)", round(cpp_vs_torch, 2), "x")

# %%
fig, ax = plt.subplots(figsize=(9, 2.6))
ax.barh(list(per_row), list(per_row.values()), color=["tab:gray", "tab:blue", "tab:green"])
ax.set_xscale("log")
ax.set_xlabel("microseconds per row (log scale; lower is faster)")
ax.set_title(f"Softmax over rows of {CPU_COLS} float32 values, CPU")
for i, v in enumerate(per_row.values()):
    ax.text(v, i, f" {v:.2g}", va="center")
fig.tight_layout()
plt.show()

# %%
assert cpp_vs_loop > 2, f"the compiled op should beat a Python loop over rows clearly; it is only {cpp_vs_loop:.1f}x faster"

# %% [markdown]
# What the numbers say (they were measured in this run, so read your own):
# the compiled op is far faster than the Python loop, which pays the
# interpreter and four small PyTorch calls for every row. Against
# `torch.softmax` it usually **loses** on the CPU: PyTorch's kernel uses SIMD
# instructions (AVX2/AVX-512, 8 or 16 floats per instruction) and a fast
# vectorised `exp`, while ours calls the scalar `std::exp` once per element.
# Writing a kernel is not automatically a speed-up; measuring is how you
# find out.
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
# Each upward step of the maximum (left) is matched by a drop in the sum
# (right): the old terms were rescaled by $e^{m_j - m_{j+1}} < 1$. Between
# steps the sum only grows.
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
# 1. **Uncoalesced loads.** At loop step `j`, the 32 threads of a warp read
#    `x[i * cols + j]` for 32 consecutive rows `i`: addresses `cols * 4`
#    bytes apart. Each float costs its own 32-byte transaction, so 8 times
#    more bytes cross the memory bus than are used.
# 2. **Too little parallelism.** A (64, 4096) input launches 64 threads on a
#    GPU that keeps more than 100,000 in flight. Most of the chip idles, and
#    each thread walks 4096 elements three times in a row.
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
naive_transactions = 32  # 32 addresses in 32 different 32-byte segments
fast_transactions = 32 * 16 // 32  # 32 lanes x 16 bytes = 512 bytes = 16 segments
print(f"bytes fetched per useful byte: naive {naive_transactions * 32 / (32 * 4):.0f}x, fast {fast_transactions * 32 / (32 * 16):.0f}x")

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
# And the host-side wrapper, which runs on the CPU: it checks the input,
# allocates the output, picks the kernel and launches it on PyTorch's
# current CUDA stream (so it is ordered with the surrounding PyTorch work).
# The checks it calls are shared with the CPU op:

# %%
show_source("softmax_cuda.cu", start="at::Tensor softmax_fast(")
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
    print(f"compiled and imported {cuda_ops.__name__} in {time.perf_counter() - start:.1f} s (about a second when cached)")
    print("build folder:", rel(kernels.extension_dir(kernels.CUDA_EXTENSION)))
    print("functions:", [name for name in dir(cuda_ops) if not name.startswith("_")])
elif nvcc_path:
    print("BUILD_CUDA is False: skipping the CUDA compile")

# %% [markdown]
# The module imports even on a machine without a GPU: the shared library
# links against the CUDA runtime, and the runtime only looks for a GPU
# driver when the first CUDA call is made. Calling an op with a CPU tensor is
# refused by the input check before any CUDA call:

# %%
if cuda_ops is not None and not has_gpu:
    try:
        cuda_ops.softmax_fast(torch.randn(4, 8))
    except RuntimeError as err:
        print(f"{type(err).__name__}: {err}")
    torch.testing.assert_close(cuda_ops.softmax_cpu(x_loop), torch.softmax(x_loop, -1))
    print("the CPU op inside the CUDA module works too")
elif cuda_ops is not None:
    print("a GPU is present: the ops run for real in the next cells")
else:
    print("no CUDA module was built, so there is nothing to call")

# %% [markdown]
# ### On a GPU: correctness, then throughput
#
# The next three cells run only where `torch.cuda.is_available()`. On a
# machine without a GPU each prints one line and does nothing else; the
# stored outputs of this notebook say which kind of machine produced them.
# The stored outputs you are reading come from a machine without a GPU, so
# the kernels' correctness on a GPU and their GB/s are not shown here: they
# are unverified until you run this notebook (or `benchmarks/softmax_gpu.py`,
# which runs the same suite and writes a markdown table and JSON) on a GPU.
# Then the figures appear in these cells' outputs and in `build/report.md`.
#
# Correctness: every case of `helpers.kernels.suite.correctness_cases` (one
# column, odd widths, the warp and block paths with and without float4, one
# row of a million, `+-1e30` and `+-3e38`, `-inf` masks, an all `-inf` row),
# and the bad inputs each kernel must refuse.

# %%
if not has_gpu:
    print("no CUDA device: skipping the GPU correctness suite")
elif cuda_ops is None:
    print("the CUDA ops were not built (no nvcc or BUILD_CUDA=False): skipping the GPU correctness suite")
else:
    gpu_ok = True
    for name in ("softmax_naive", "softmax_fast"):
        fn = getattr(cuda_ops, name)
        checks = suite.correctness(fn, "cuda", max_cols=suite.NAIVE_MAX_COLS if name == "softmax_naive" else None)
        refused = suite.check_rejections(fn, "cuda")
        print(f"{name}:")
        for r in checks:
            print(f"  {r['case']:<40} max|diff| {r['max_abs_diff']:.1e}  {'ok' if r['ok'] else 'MISMATCH'}")
        for r in refused:
            print(f"  refuses {r['input']:<28} {'ok' if r['ok'] else 'NOT REFUSED'}: {r['message'][:90]}")
        gpu_ok = gpu_ok and all(r["ok"] for r in checks + refused)
    assert gpu_ok, "a CUDA kernel failed the correctness suite (see the lines above)"

# %% [markdown]
# Throughput. Softmax does almost no arithmetic per byte, so its speed is
# set by memory bandwidth. The fair unit is **effective bandwidth**: the
# bytes the op must move (read the input once, write the output once:
# `2 * rows * cols * 4` for float32) divided by the time. `y.copy_(x)` moves
# exactly those bytes with no arithmetic at all, so its GB/s is the ceiling
# for this device, and "fraction of copy" says how close a kernel gets.

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
    print("no GPU benchmark of 4096 x 4096 ran: skipping the throughput checks")
else:
    head = {r["op"]: r for r in bench_rows if tuple(r["shape"]) == (4096, 4096)}
    fast_vs_torch = head["fast"]["gbps"] / head["torch.softmax"]["gbps"]
    fast_vs_naive = head["fast"]["gbps"] / head["naive"]["gbps"]
    _ = report.record("GPU 4096x4096: fast kernel GB/s", round(head["fast"]["gbps"]), "GB/s")
    _ = report.record("GPU 4096x4096: copy GB/s", round(head["copy (y.copy_(x))"]["gbps"]), "GB/s")
    _ = report.record("GPU 4096x4096: fast / torch.softmax speed", round(fast_vs_torch, 2), "x")
    _ = report.record("GPU 4096x4096: fast / naive speed", round(fast_vs_naive, 1), "x")
    print(f"fast = {fast_vs_torch:.2f}x torch.softmax, {fast_vs_naive:.1f}x naive, {head['fast']['of_copy']:.0%} of copy")
    assert fast_vs_torch >= FAST_MIN_RATIO, f"the fast kernel reaches only {fast_vs_torch:.2f}x torch.softmax's speed (need {FAST_MIN_RATIO})"
    assert fast_vs_naive > 1, f"the fast kernel should beat the naive one; it is {fast_vs_naive:.2f}x its speed"

# %% [markdown]
# ## The same sources as an installable package
#
# `load_inline` suits notebooks. To give the op to other people you build it
# once into a package. `extensions/course_kernels/setup.py` does that with
# `setuptools`: `CppExtension` (or `CUDAExtension` when nvcc and a GPU are
# there, or `COURSE_KERNELS_CUDA=1` forces it) describes the module and its
# sources, which are the very files in `helpers/kernels` (referenced, not
# copied), and `BuildExtension` supplies PyTorch's include paths and compiler
# flags. Building needs the installed torch, so it runs without build
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
package_sources = [package_dir / "setup.py", *(kernels.KERNEL_DIR / f for f in ("softmax_cpu.cpp", "bindings.cpp", "softmax_cuda.cu", "softmax_common.h"))]


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
    print("functions:", [name for name in dir(course_kernels) if not name.startswith("_")])

# %%
if course_kernels is None:
    print("no package was built (BUILD_PACKAGE=False): nothing to compare")
else:
    same = torch.equal(course_kernels.softmax_cpu(x_check), cpu_ops.softmax_cpu(x_check))
    print(f"package op == inline-loaded op, bit for bit: {same}")
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
# ## Summary
#
# - `load_inline` compiles C++/CUDA sources into a Python module, caching the
#   build; `setup.py` with `CppExtension`/`CUDAExtension` and `BuildExtension`
#   makes the same sources an installable package.
# - Check inputs on the host with `TORCH_CHECK` (device, dtype, dims,
#   non-empty, contiguity) and say what to do in the message: C++ does not
#   protect you from reading memory as the wrong type or in the wrong order.
# - `at::parallel_for` spreads independent rows over PyTorch's threads. A
#   compiled loop beats a Python loop by far; beating `torch.softmax` needs
#   the vector instructions PyTorch already uses.
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
