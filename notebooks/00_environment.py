# %% [markdown]
# # 00 · Environment, devices and the doctor
#
# Before any tensor maths, make sure the machine is ready: the right PyTorch
# is installed, you know which device your tensors will live on, and random
# numbers can be reproduced when you need them to be.
#
# **What you will learn**
#
# - how to install PyTorch with pip or conda, and how the CUDA build differs from the CPU-only wheel;
# - how the course picks a device (CUDA, then MPS, then the CPU) and how to override it;
# - how to read the versions that matter, and what `torch.get_num_threads` / `set_num_threads` control;
# - how to read the course's preflight report, the *doctor* (`make doctor`);
# - how to seed every random number generator at once, and what seeding does and does not promise.
#
# **Prerequisites**: Python (functions, dicts, `import`); no PyTorch yet. This is the first chapter.
#
# **Estimated time**: 20 minutes.

# %% tags=["parameters"]
SEED = 0  # the seed used throughout the chapter
MATMUL_SIZE = 1024  # side of the square matrices in the threads timing
REPEATS = 5  # timed matrix products per thread setting (the median is shown)

# %% [markdown]
# ## Setup
#
# Every chapter starts the same way: imports, a seed, a device, and a
# `ChapterReport` that collects the chapter's headline figures for
# `build/report.md`. This chapter explains each of these lines.

# %%
import os
import platform
import random
import statistics
import time

import numpy as np
import torch
import torchvision

from helpers.device import PINNED, doctor, pick_device, seed_everything
from helpers.exercises import check, solution  # noqa: F401  (solution: for when you are stuck)
from helpers.paths import ROOT
from helpers.report import ChapterReport

seed_everything(SEED)
device = pick_device()
report = ChapterReport("00_environment")
print(f"device: {device}")

# %% [markdown]
# ## 1. Installing PyTorch
#
# PyTorch is one Python package, `torch`, plus companion packages such as
# `torchvision` (datasets, image transforms and models). There are three common ways
# to install it. Each command pins the exact versions this course was made with,
# because the stored outputs of the notebooks depend on them.
#
# **pip, default wheel from PyPI.** On Linux this is the *CUDA build*: it can
# use an NVIDIA GPU, and pip also installs NVIDIA's CUDA libraries (cuBLAS, cuDNN, NCCL, …)
# as separate packages. It works on a machine without a GPU too; it is just a large download.
#
# ```bash
# python -m pip install torch==2.14.1 torchvision==0.29.1
# ```
#
# **pip, CPU-only wheel.** From PyTorch's own package index. It has no CUDA
# support and pulls in no NVIDIA packages, so it is far smaller: the right choice
# for a laptop without an NVIDIA GPU, a CI machine, or a Docker image that never sees a GPU.
#
# ```bash
# python -m pip install torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cpu
# ```
#
# A specific CUDA version comes from the same index with another suffix,
# for example `--index-url https://download.pytorch.org/whl/cu130` for CUDA 13.0.
# The selector on [pytorch.org](https://pytorch.org/get-started/locally/) lists the suffixes for each release.
# You need an NVIDIA *driver* recent enough for that CUDA version; you do *not*
# need the CUDA toolkit (`nvcc`) unless you compile your own CUDA code (chapter 20).
#
# **conda.** Create the course environment from `environment.yml`. It takes Python
# from conda-forge and then installs `requirements.txt` with pip, so the pins are the same:
#
# ```bash
# conda env create -f environment.yml
# conda activate pytorch-course
# ```
#
# Older material says `conda install pytorch torchvision -c pytorch`. Do not use it: PyTorch
# stopped publishing to its `pytorch` conda channel after release 2.5, so that command cannot
# give you 2.14. Use pip (inside a conda environment if you like) or the `pytorch`
# package of the community channel `conda-forge`.
#
# **The course's own way.** `make run` and `make test` create `.venv` from
# `requirements.txt` by themselves (`make setup`), and register the Jupyter kernel
# "PyTorch course (.venv)" that these notebooks run in.
#
# Here are the pins, read from the files themselves:

# %%
import yaml

requirements = (ROOT / "requirements.txt").read_text().splitlines()
print(f"requirements.txt: {[line for line in requirements if line.startswith(('torch==', 'torchvision=='))]}")
env_file = ROOT / "environment.yml"
if env_file.is_file():
    env_spec = yaml.safe_load(env_file.read_text())
    pip_part = next(dep["pip"] for dep in env_spec["dependencies"] if isinstance(dep, dict))
    print(f"environment.yml:  conda environment {env_spec['name']!r}, whose pip step installs {pip_part}")
print(f"versions the helpers expect: {PINNED}")

# %% [markdown]
# A wheel's version carries its build after a `+`: `2.14.1+cpu` is the CPU-only wheel,
# `2.14.1+cu130` the CUDA 13.0 build. A pin such as `torch==2.14.1` ignores that
# suffix, so both builds satisfy `requirements.txt`. That is why you can install the
# CPU-only wheel first and then `pip install -r requirements.txt`: pip keeps the wheel you chose.

# %%
from packaging.specifiers import SpecifierSet

pin = SpecifierSet("==2.14.1")
for version in ("2.14.1+cpu", "2.14.1+cu130", "2.14.1", "2.14.0"):
    print(f"{version:13s} satisfies torch==2.14.1: {version in pin}")

# %% [markdown]
# Which build does *this* environment have? The CUDA build lists its NVIDIA
# libraries as dependencies; the loop below adds up how much disk they take here.
# (On a CPU-only wheel the list is empty.)

# %%
from importlib import metadata


def installed_size_gb(dist) -> float:
    return sum(f.size or 0 for f in (dist.files or [])) / 1e9


gpu_dists = [
    d for d in metadata.distributions()
    if d.metadata["Name"].lower().startswith(("nvidia", "cuda", "triton"))
]
print(f"torch {torch.__version__}: {installed_size_gb(metadata.distribution('torch')):.1f} GB on disk")
print(f"{len(gpu_dists)} NVIDIA/CUDA/Triton packages beside it: {sum(map(installed_size_gb, gpu_dists)):.1f} GB")

# %% [markdown]
# ## 2. Versions
#
# When you ask for help, or compare results with someone else, these are the
# numbers to quote. `torch.version.cuda` is the CUDA version torch was *built*
# with (`None` for the CPU-only wheel); it says nothing about whether a GPU is present.

# %%
print(f"python       {platform.python_version()}")
print(f"torch        {torch.__version__}")
print(f"torchvision  {torchvision.__version__}")
print(f"numpy        {np.__version__}")
print(f"CUDA build   {torch.version.cuda}")
print(f"GPU present  {torch.cuda.is_available()}")

# %% [markdown]
# ## 3. Choosing a device
#
# Every tensor lives on a *device*: `cpu`, `cuda` (an NVIDIA GPU; `cuda:0`,
# `cuda:1`, … when there are several), or `mps` (the GPU of an Apple-silicon Mac).
# An operation runs on the device of its inputs, and all of them must be on the
# same one. So a program decides once where its tensors go, and every chapter
# does that with `helpers.device.pick_device()`. It returns the first that applies of:
#
# 1. the device you pass, `pick_device("cpu")`;
# 2. the environment variable `COURSE_DEVICE`, so you can force a device for a whole run without editing notebooks;
# 3. CUDA, when a usable NVIDIA GPU is present: the fastest and best-supported accelerator;
# 4. MPS, on Apple silicon: a real speed-up for most models, though a few operations are not implemented there;
# 5. the CPU, which always works.
#
# Asking for a device that is not there is an error, not a silent fallback:
# you should know when your "GPU run" is really on the CPU.

# %%
print(f"automatic choice:          {pick_device()}")
print(f"explicit choice:           {pick_device('cpu')}")

saved = os.environ.get("COURSE_DEVICE")
os.environ["COURSE_DEVICE"] = "cpu"
try:
    print(f"with COURSE_DEVICE=cpu:    {pick_device()}")
finally:  # put the environment back as it was
    if saved is None:
        del os.environ["COURSE_DEVICE"]
    else:
        os.environ["COURSE_DEVICE"] = saved

# %% [markdown]
# Using the device: create tensors on it with `device=`, or move existing ones
# with `.to(device)`. `.to` returns a new tensor (or the same one, when it is
# already there); it never changes the tensor in place.

# %%
x = torch.ones(2, 3, device=device)
y = torch.arange(3).to(device)
print(x.device, y.device, (x + y).device)
print(f"x.to(device) is x: {x.to(device) is x}")

# %% [markdown]
# PyTorch itself has a device-neutral API in `torch.accelerator`. With
# `check_available=True`, `current_accelerator` returns the accelerator that is
# really usable, or `None`; without it, it only reports what torch was *built* for.

# %%
print(f"built for:        {torch.accelerator.current_accelerator()}")
print(f"usable right now: {torch.accelerator.current_accelerator(check_available=True)}")

# %% [markdown]
# ## 4. CPU threads
#
# On the CPU, one large operation (a matrix product, a convolution) is split
# across several threads. `torch.get_num_threads()` is how many threads such an
# *intra-op* parallel operation may use; `torch.set_num_threads(n)` changes it for
# this process. By default torch sets it from the CPU cores it finds (the doctor's
# `threads` line in section 5 shows both numbers). `torch.get_num_interop_threads()`
# is a separate pool that runs *independent* operations side by side; you rarely
# need to change it, and `torch.set_num_interop_threads` works only once, before any such work starts.
#
# The environment variables `OMP_NUM_THREADS` and `MKL_NUM_THREADS` set the
# same limits before Python starts. Lower them when several processes share a
# machine (for example DataLoader workers or parallel test runs): by default each
# process assumes it owns every core, and together they oversubscribe it.

# %%
print(f"intra-op threads: {torch.get_num_threads()}, inter-op threads: {torch.get_num_interop_threads()}, logical CPUs: {os.cpu_count()}")

# %% [markdown]
# The timing below multiplies two `MATMUL_SIZE × MATMUL_SIZE` matrices with one
# thread and with the default number. The exact figures depend on the machine
# and on what else is running; the point is that `set_num_threads` is a real
# knob that changes how much of the CPU one process uses. On an otherwise idle machine,
# more threads make a large product faster; on a machine busy with other work, extra
# threads mostly wait for cores that are taken, and can even make the product slower.

# %%
default_threads = torch.get_num_threads()
a = torch.rand(MATMUL_SIZE, MATMUL_SIZE)
b = torch.rand(MATMUL_SIZE, MATMUL_SIZE)


def median_matmul_ms(threads: int) -> float:
    torch.set_num_threads(threads)
    a @ b  # warm-up: the first call pays one-off costs
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


try:
    timings = {n: median_matmul_ms(n) for n in sorted({1, default_threads})}
finally:
    torch.set_num_threads(default_threads)  # always restore the default
for n, ms in timings.items():
    print(f"{n} thread(s): {ms:7.1f} ms per {MATMUL_SIZE}x{MATMUL_SIZE} matmul")
if len(timings) > 1:
    print(f"speed-up with {default_threads} threads: {timings[1] / timings[default_threads]:.2f}x")
print(f"threads restored to {torch.get_num_threads()}")

# %% [markdown]
# ## 5. The doctor: a preflight report
#
# `helpers.device.doctor()` checks everything the course needs and returns a
# report; printing it gives one line per check. From a terminal, `make doctor`
# (or `python -m helpers.device`) prints the same report. Each line starts with a status:
#
# | status | meaning |
# | --- | --- |
# | `OK` | as required |
# | `INFO` | fine, just so you know (for example: no GPU, so GPU-only cells will skip) |
# | `WARN` | works, but something will be slower, skipped or different from the stored outputs |
# | `FAIL` | some chapters will break; the `fix:` line below it says what to do |
#
# and the checks are:
#
# | check | what it looks at |
# | --- | --- |
# | `python` | Python 3.10 or newer |
# | `torch`, `torchvision` | the installed versions against the pins (a different version still works, but numbers may differ from the stored outputs) |
# | `cuda` | usable NVIDIA GPUs and their names, or which CUDA version torch was built for |
# | `mps` | whether Apple's GPU backend is usable |
# | `threads` | the intra-op threads from section 4 and the logical CPUs |
# | `c++ compiler`, `ninja` | needed to build C++ extensions in chapter 20 |
# | `nvcc` | the CUDA compiler, needed only for the CUDA kernels of chapter 20 |
# | `disk` | free space where `data/` and `build/` live |
# | `data: …` | for each dataset: already in `data/`, copied from the offline mirror, downloaded on first use, or not available at all |
#
# The last line is the verdict: `READY` when nothing failed or warned.

# %%
health = doctor()
print(health)

# %% [markdown]
# The report is also an object you can test in code, which is how the checks
# below use it: `health.ok` is `False` as soon as one check failed.

# %%
print(f"checks: {len(health.checks)}, ok: {health.ok}")
print(f"needing attention: {[c.name for c in health.checks if c.status in ('warn', 'fail')] or 'none'}")
for figure, value in [("device", str(device)), ("doctor verdict", health.verdict), ("torch", torch.__version__)]:
    report.record(figure, value)

# %% [markdown]
# `make doctor` runs `python -m helpers.device`, whose `main()` prints the same
# report and returns the program's exit status: 0 when no check failed and 1
# otherwise, so a script or CI job can stop early on a broken machine. Here it is
# called in this process, with its printout captured:

# %%
import contextlib
import io

from helpers.device import main as doctor_main  # what `make doctor` runs

with contextlib.redirect_stdout(io.StringIO()) as printed:
    exit_status = doctor_main()
print(f"exit status {exit_status}; last line printed: {printed.getvalue().strip().splitlines()[-1]}")

# %% [markdown]
# ## 6. Seeding
#
# Random numbers in PyTorch come from *generators*: a global one per device, plus
# any `torch.Generator` you create. Python's `random` and NumPy have generators of
# their own. Seeding sets a generator's starting state, so that the same sequence
# of calls gives the same numbers again, which is what you want when you debug, compare
# two models fairly, or store the outputs of a notebook.
#
# `seed_everything(seed)` seeds Python's `random`, NumPy and torch (the CPU and
# every GPU) in one call, and returns a fresh `torch.Generator` with the same seed
# for code that takes a `generator=` argument.

# %%
seed_everything(SEED)
first = torch.rand(3)
seed_everything(SEED)
again = torch.rand(3)
later = torch.rand(3)  # no reseed: the stream simply continues
print(f"after seeding:       {first}")
print(f"after seeding again: {again}")
print(f"without reseeding:   {later}")

# %%
seed_everything(SEED)
draws_a = (random.random(), np.random.rand(), torch.randn(2).tolist())
seed_everything(SEED)
draws_b = (random.random(), np.random.rand(), torch.randn(2).tolist())
print(f"random, numpy and torch agree after reseeding: {draws_a == draws_b}")

# %% [markdown]
# A generator of your own keeps its stream separate from the global one, so
# other code that draws numbers cannot shift yours:

# %%
g = seed_everything(SEED)
mine = torch.rand(3, generator=g)
g = seed_everything(SEED)
torch.rand(100)  # someone else draws from the global generator in between
mine_again = torch.rand(3, generator=g)
print(f"own generator unaffected: {torch.equal(mine, mine_again)}")

# %% [markdown]
# Seeding makes the *random numbers* repeat. It does not by itself make every
# result bit-identical: some GPU kernels add numbers in a varying order. Chapter 15
# covers `torch.use_deterministic_algorithms(True)` for that.
#
# ## Checks
#
# What this chapter must show: a device was picked, the doctor passes, and seeded draws repeat.

# %%
assert device.type in {"cpu", "cuda", "mps"}, f"pick_device() returned {device}, expected cpu, cuda or mps"
assert health.ok, f"the doctor found a problem, see its report above: {health.verdict}"
assert torch.equal(first, again), "two draws after seed_everything(SEED) differ"
assert not torch.equal(again, later), "the generator did not advance between draws"
assert draws_a == draws_b, "random, NumPy or torch did not repeat after reseeding"
assert torch.equal(mine, mine_again), "a private torch.Generator was disturbed by global draws"
print(f"device {device}, doctor {health.verdict}, seeding reproducible")

# %% [markdown]
# ## Pitfalls
#
# **Asking for a device that does not exist.** `pick_device` refuses, and says
# what the machine has. (The index asked for below is one past the last GPU, so
# it is missing on every machine.)

# %%
missing = f"cuda:{torch.cuda.device_count()}"
try:
    pick_device(missing)
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# A name that is not a device at all is a different mistake, and a different error:

# %%
try:
    pick_device("gpu")
except ValueError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# **Moving a tensor to `"cuda"` without a GPU.** Code copied from a GPU machine
# often says `.to("cuda")` or `.cuda()`. On a machine without one, torch raises.
# The message depends on the build: a CUDA build looks for the NVIDIA driver, the
# CPU-only wheel says it was not compiled with CUDA. The fix is to use the
# `device` you picked instead of a hard-coded name.

# %%
if not torch.cuda.is_available():
    try:
        torch.ones(2).to("cuda")
    except (RuntimeError, AssertionError) as err:
        print(f"{type(err).__name__}: {err}")
    print(f"fix: torch.ones(2).to(device) -> {torch.ones(2).to(device).device}")
else:
    print("CUDA is available here, so .to('cuda') works: nothing to show")

# %% [markdown]
# **Mixing devices in one operation.** All tensor inputs of an operation must be on
# the same device; torch never moves them for you. The `meta` device, which
# stores only shapes and dtypes and no data, exists on every machine, so it can
# show the error anywhere:

# %%
on_meta = torch.ones(3, device="meta")
on_cpu = torch.ones(3)
try:
    on_meta + on_cpu
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")
print(f"fix: move one of them first -> {(on_meta + on_cpu.to('meta')).device}")

# %% [markdown]
# One exception surprises people: a 0-dimensional CPU tensor (a single number)
# is treated like a Python number and may be combined with a tensor on any device.

# %%
print((on_meta + torch.tensor(2.0)).device)

# %% [markdown]
# ## Exercises
#
# Each exercise is a function to complete. Replace `raise NotImplementedError`
# with your code and run the checker cell below it: it prints `PASSED`, a hint
# (`NOT YET`), or `TODO` while the stub is untouched. It never stops the notebook.
# If you are stuck, `solution("00.seed_all")` returns the reference solution
# (print its source with `import inspect; print(inspect.getsource(solution("00.seed_all")))`).
#
# **Exercise 1: `seed_all`.** Write your own small `seed_everything`: after
# `seed_all(seed)`, both `torch.rand` and `random.random` must give the same numbers
# for the same seed, and different numbers for different seeds.

# %%
def seed_all(seed: int) -> None:
    """Seed torch's global generator and Python's `random` module with `seed`."""
    raise NotImplementedError


# %%
result = check("00.seed_all", seed_all)

# %% [markdown]
# **Exercise 2: `to_device`.** A DataLoader often yields a *batch* that is not a
# single tensor but a dict, list or tuple of them, sometimes nested, with other
# values mixed in (ids, strings, numbers). Write `to_device(batch, device)` that
# returns a new batch of the same shape, with every tensor moved to `device` and
# every other value left as it is. A dict stays a dict, a list a list, a tuple a tuple;
# the input must not be modified. The checker moves to the `meta` device, so
# returning the batch unchanged cannot pass by accident.

# %%
def to_device(batch, device):
    """Return `batch` with every tensor inside it (in dicts, lists, tuples) moved to `device`."""
    raise NotImplementedError


# %%
result = check("00.to_device", to_device)

# %% [markdown]
# ## Summary
#
# - Install with pip (the default wheel is the CUDA build on Linux; `--index-url .../whl/cpu` gives the
#   smaller CPU-only wheel) or conda from `environment.yml`; the course pins torch 2.14.1 and torchvision 0.29.1.
# - `pick_device()` chooses CUDA, then MPS, then the CPU; `COURSE_DEVICE` or an argument overrides it,
#   and a missing device is an error rather than a silent fallback.
# - `torch.get_num_threads()` / `set_num_threads(n)` control how many CPU threads one operation uses.
# - `doctor()` (or `make doctor`) checks the machine line by line and ends with a verdict.
# - `seed_everything(seed)` makes Python, NumPy and torch draws repeat; a private `torch.Generator`
#   keeps a stream of its own.
#
# **Next**: chapter 01 creates tensors on the device picked here, and looks at
# what a tensor really is: a block of memory plus a shape, strides and a dtype.

# %%
report.finish()
