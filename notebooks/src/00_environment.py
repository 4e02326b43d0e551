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
# - how to read the course's preflight report, the *doctor* (`make doctor`), and what each of its verdicts means;
# - how to seed every random number generator at once, and what seeding does and does not promise;
# - which parts of the PyTorch ecosystem are current and which are not (torchtext, torchaudio, video decoding);
# - the error you get when one operation mixes devices, and how `Module.to` differs from `Tensor.to`;
# - how the course's tests prove that every notebook runs (nbval, the papermill smoke run, the exercise tests).
#
# **Prerequisites**: Python (functions, dicts, `import`, `with`); no PyTorch yet. This is the first chapter.
#
# **Estimated time**: about 70 minutes to read and run (the cells themselves take well under a minute),
# plus 25 minutes for the two exercises. Section 1 and the doctor's table in section 5 are reference
# material you can skim on a first pass, and section 8 is for whoever maintains a copy of the course.

# %% tags=["parameters"]
SEED = 0  # the seed used throughout the chapter
MATMUL_SIZE = 512  # side of the square matrices in the threads timing
ROUNDS = 4  # timing rounds; the two thread counts take turns, in the order A B, then B A (ABBA)
MIN_RUN_TIME = 0.2  # seconds of timed matrix products per setting and round (Timer.blocked_autorange)

# %% [markdown]
# ## Setup
#
# Every chapter starts the same way: imports, a seed, a device, and a
# `ChapterReport` that collects the chapter's headline figures for
# `build/report.md`. This chapter explains each of these lines.

# %%
import contextlib
import os
import platform
import random

import matplotlib.pyplot as plt
import numpy as np
import torch
import torchvision

import helpers.plotting  # noqa: F401  (small, 72-dpi figure defaults)
from helpers.device import (
    PINNED,
    STATUS_MEANING,
    cgroup_cpu_quota,
    doctor,
    gpu_packages,
    installed_size_gb,
    pick_device,
    seed_everything,
    usable_cpus,
)
from helpers.exercises import check, hint, solution  # noqa: F401  (hint, solution: for when you are stuck)
from helpers.paths import ROOT, build_dir
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
# as separate packages. It also runs on a machine without a GPU, on the CPU (section 2
# prints which build this run has, and whether it found a GPU); it is just a large download.
#
# ```bash
# python -m pip install torch==2.14.1 torchvision==0.29.1
# ```
#
# **pip, CPU-only wheel.** From PyTorch's own package index. It has no CUDA
# support and pulls in none of the NVIDIA packages, which on Linux take more disk than
# torch itself (measured below): the right choice for a laptop without an NVIDIA GPU,
# a CI machine, or a Docker image that never sees a GPU.
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
# from conda-forge and then installs `requirements.txt` with pip, so the pins are the same.
# The last line registers the environment as the Jupyter kernel the notebooks ask for: their
# metadata names the kernel `pytorch-course` (shown as "PyTorch course (.venv)"), and without it
# Jupyter would ask you to pick a kernel, or run them in another environment:
#
# ```bash
# conda env create -f environment.yml
# conda activate pytorch-course
# python -m ipykernel install --user --name pytorch-course --display-name "PyTorch course (.venv)"
# ```
#
# Older material says `conda install pytorch torchvision -c pytorch`. Do not use it: PyTorch
# deprecated its own `pytorch` conda channel, and 2.5 was the last release published there
# (pytorch/pytorch issue #138506), so that command cannot give you 2.14. Use pip (inside a
# conda environment if you like), or the community-built `pytorch` package of the
# `conda-forge` channel, after checking that it offers the version you need.
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
from packaging.requirements import Requirement

pins = {}
for line in requirements:
    text = line.split("#", 1)[0].strip()
    if text and not text.startswith("-"):
        req = Requirement(text)
        pins[req.name] = str(req.specifier).removeprefix("==")
assert all(pins.get(name) == version for name, version in PINNED.items()), (
    f"requirements.txt pins {pins.get('torch')}/{pins.get('torchvision')}, the helpers expect {PINNED}")
if env_file.is_file():
    assert "-r requirements.txt" in pip_part, f"environment.yml's pip step should install requirements.txt: {pip_part}"
    assert env_spec["channels"] == ["conda-forge"], f"environment.yml should take Python from conda-forge: {env_spec['channels']}"

# %% [markdown]
# Wheels from PyTorch's own index name their build in a *local version label* after a `+`
# (`2.14.1+cpu`, `2.14.1+cu130`). The pin `torch==2.14.1` ignores the label, so after you install
# the CPU-only wheel, the pin in `requirements.txt` is already satisfied, and pip leaves the installed
# wheel in place. pip compares versions by the rules the `packaging` library implements; the cell asks
# it whether each version satisfies the pin:

# %%
# NBVAL_CHECK_OUTPUT
from packaging.specifiers import SpecifierSet

pin = SpecifierSet("==2.14.1")
satisfies = {version: version in pin for version in ("2.14.1+cpu", "2.14.1+cu130", "2.14.1", "2.14.0")}
for version, ok in satisfies.items():
    print(f"{version:13s} satisfies torch==2.14.1: {ok}")
assert satisfies == {"2.14.1+cpu": True, "2.14.1+cu130": True, "2.14.1": True, "2.14.0": False}, (
    f"a == pin should ignore the +build suffix and nothing else: {satisfies}"
)

# %% [markdown]
# Which build does *this* environment have, and what does it cost in disk? The CUDA build
# declares its GPU libraries (NVIDIA's CUDA packages, and Triton, the compiler `torch.compile`
# uses on GPUs) as dependencies in its package metadata, and pip installs them and what they
# pull in. `helpers.device.gpu_packages()` follows those declarations through the installed
# metadata and adds up the disk they take (packages torch does not ask for are not counted).
# The CPU-only wheel declares none; on Linux, the CUDA build's outweigh torch itself. The
# asserts check whichever of the two this machine has.

# %%
from importlib import metadata

gpu = gpu_packages("torch")
torch_gb = installed_size_gb("torch")
print(f"torch {metadata.version('torch')}: {torch_gb:.1f} GB on disk")
print(f"GPU packages torch declares: {len(gpu.declared)}; with what they pull in, {len(gpu.installed)} installed: {gpu.gb:.1f} GB")
if torch.version.cuda is None:
    assert not gpu.declared, f"a CPU-only torch, yet it declares GPU packages: {gpu.declared}"
elif platform.system() == "Linux":
    assert gpu.gb > torch_gb, f"the CUDA build's GPU packages ({gpu.gb:.1f} GB) should outweigh torch ({torch_gb:.1f} GB)"

# %% [markdown]
# ## 2. Versions
#
# When you ask for help, or compare results with someone else, these are the
# numbers to quote. `torch.version.cuda` is the CUDA version torch was *built*
# with (`None` for the CPU-only wheel); it says nothing about whether a GPU is present.
#
# Read the build from `torch.version.cuda`, not from the version string. PyPI accepts no local
# version labels, so the default wheel's *metadata* (what pip reports) says plain `2.14.1`, while
# `torch.__version__`, written into `torch/version.py` when the wheel was built, may still end in
# `+cu130`. A wheel from PyTorch's own index carries the label in both. The cell prints both, says
# whether they differ, and checks that they name the same release.

# %%
from packaging.version import Version

pip_sees = metadata.version("torch")
print(f"python              {platform.python_version()}")
print(f"torch (pip's view)  {pip_sees}   <- the package metadata, what `pip show torch` prints")
print(f"torch.__version__   {torch.__version__}")
print(f"torchvision         {torchvision.__version__}")
print(f"numpy               {np.__version__}")
print(f"torch.version.cuda  {torch.version.cuda}")
print(f"CUDA usable         {torch.cuda.is_available()}   <- usable now, not merely present (section 3)")
if torch.version.hip:  # a ROCm build (AMD GPUs) answers through the torch.cuda names too
    build_kind, gpu_kind = f"ROCm {torch.version.hip} build", "AMD"
else:
    build_kind, gpu_kind = (f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build"), "NVIDIA"
print(f"this run:           {build_kind}, {'with' if torch.cuda.is_available() else 'without'} a usable {gpu_kind} GPU")
assert Version(pip_sees).public == Version(torch.__version__).public, (
    f"pip sees torch {pip_sees} but the imported torch is {torch.__version__}: two installs mixed up"
)
pip_label, runtime_label = Version(pip_sees).local, Version(torch.__version__).local
if pip_label == runtime_label:
    print(f"labels: the same in both ({runtime_label or 'none'}), as for a wheel from PyTorch's own index"
          + (" or a build without a label" if runtime_label is None else ""))
elif pip_label is None:
    print(f"labels: +{runtime_label} only in torch.__version__, removed from the metadata: the pattern of the default wheel from PyPI")
else:
    print(f"labels differ: +{pip_label} in the metadata, +{runtime_label} in torch.__version__")
print(f"the build, without guessing from labels: torch.version.cuda = {torch.version.cuda}")

# %% [markdown]
# Whichever line the cell printed for the labels, only `torch.version.cuda` (and, on AMD's
# ROCm builds, `torch.version.hip`) says which build this is without guessing.
#
# When you report a bug to PyTorch, its issue template asks for the output of
# `python -m torch.utils.collect_env`, which prints all of these and more (OS, compilers,
# driver, related packages). It takes a few seconds, so this chapter does not run it.

# %% [markdown]
# ## 3. Choosing a device
#
# Every tensor lives on a *device*: `cpu`, `cuda` (an NVIDIA GPU; `cuda:0`,
# `cuda:1`, … when there are several), or `mps` (the GPU of an Apple-silicon Mac).
# An operation runs on the device of its inputs, and all of them must be on the
# same one (with one exception, a 0-dim CPU tensor, shown in *Pitfalls*). So a program decides once where its tensors go, and every chapter
# does that with `helpers.device.pick_device()`. It returns the first that applies of:
#
# 1. the device you pass, `pick_device("cpu")`;
# 2. the environment variable `COURSE_DEVICE`, read on every call, so you can force a device for a whole
#    run without editing notebooks;
# 3. CUDA, when a usable NVIDIA GPU is present: the accelerator PyTorch supports most completely;
# 4. MPS, on a Mac with Apple silicon and macOS 14+ (PyTorch's MPS notes): Apple's GPU, though a few
#    operations are not implemented there yet (*Pitfalls* has a note on a misleading macOS error);
# 5. the CPU, which every build supports.
#
# It accepts `cpu`, `cuda` (or `cuda:N` for the N-th GPU), `mps`, and `xpu` (Intel's GPUs) where
# `torch.xpu.is_available()`; the automatic choice never takes XPU, because the chapters are tested
# on the other three. Other device types torch knows, such as `meta`, are refused: no chapter runs on them.
# Asking for a device that is not there is an error, not a silent fallback
# (see *Pitfalls*): you should know when your "GPU run" is really on the CPU.
#
# To try the environment variable without leaving it set, the chapter uses a small
# context manager that sets variables for the length of a `with` block and then puts
# back what was there before. Section 5 uses it again to break the doctor on purpose.
#
# On a machine without a GPU, `COURSE_DEVICE=cpu` gives the same answer as the automatic
# choice, so it would not show that the variable is read at all. The cell therefore also asks,
# through the variable, for a CUDA device one past the last GPU (`cuda:0` on a machine without
# one), which no machine has: `pick_device()` must refuse it, on every machine.

# %%
@contextlib.contextmanager
def temporary_env(**values):
    """Inside the `with` block, set each variable to its str value, or unset it for None; restore afterwards."""
    saved = {name: os.environ.get(name) for name in values}

    def apply(settings):
        for name, value in settings.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    apply(values)
    try:
        yield
    finally:
        apply(saved)


device_before = os.environ.get("COURSE_DEVICE")
print(f"automatic choice:          {pick_device()}")
print(f"explicit choice:           {pick_device('cpu')}")
with temporary_env(COURSE_DEVICE="cpu"):
    print(f"with COURSE_DEVICE=cpu:    {pick_device()}")
    assert pick_device().type == "cpu", "COURSE_DEVICE=cpu was ignored"

missing = f"cuda:{torch.cuda.device_count()}"  # one past the last GPU: missing on every machine
env_error = None
with temporary_env(COURSE_DEVICE=missing):
    try:
        pick_device()
    except RuntimeError as err:
        env_error = f"{type(err).__name__}: {err}"
print(f"with COURSE_DEVICE={missing}: {env_error}")
assert env_error is not None, f"pick_device() ignored COURSE_DEVICE={missing}: it returned a device instead of refusing"
assert os.environ.get("COURSE_DEVICE") == device_before, "temporary_env did not restore COURSE_DEVICE"

# %% [markdown]
# Using the device: create tensors on it with `device=`, or move existing ones
# with `.to(device)`. The same method name does two different things:
#
# - `Tensor.to(...)` returns a **new** tensor on the new device or with the new dtype, and
#   leaves the original where and what it was. (When nothing would change, it returns
#   the tensor itself.) So you must keep the result: `x = x.to(device)`.
# - `Module.to(...)` (a layer or a whole model) changes the module **in place** and returns
#   the same module object, so `model.to(device)` on a line of its own is enough. A device
#   moves every parameter and buffer; a dtype converts only the floating-point ones. Chapter 03
#   looks at parameters and buffers, and at what `Module.to` does to each, in depth.
#
# The cell checks both with a dtype change, which works on every machine.

# %%
# NBVAL_CHECK_OUTPUT
x = torch.ones(2, 3, device=device)
y = torch.arange(3).to(device)
print(f"x, y and x + y on the picked device: {[v.device.type == device.type for v in (x, y, x + y)]}")

t = torch.ones(2)
t2 = t.to(torch.float64)
print(f"Tensor.to: t2 is t: {t2 is t}; t stays {t.dtype}, t2 is {t2.dtype}; t.to(t.dtype) is t: {t.to(t.dtype) is t}")

m = torch.nn.Linear(2, 2)
m2 = m.to(torch.float64)
print(f"Module.to: m2 is m: {m2 is m}; its weight is now {m.weight.dtype}")

assert t2 is not t and t.dtype == torch.float32 and t2.dtype == torch.float64, (
    "Tensor.to should return a new float64 tensor and leave the original float32"
)
assert t.to(t.dtype) is t and x.to(device) is x, "Tensor.to with nothing to change should return the tensor itself"
assert m2 is m and m.weight.dtype == torch.float64, "Module.to should convert the module itself and return it"
bn = torch.nn.BatchNorm1d(2).to(torch.float64)  # a dtype leaves integer buffers alone
assert bn.weight.dtype == torch.float64 and bn.num_batches_tracked.dtype == torch.int64, (
    "Module.to(dtype) should convert floating-point parameters and buffers only")
layer = torch.nn.Linear(2, 2)  # float32, so that it can go to any device (MPS has no float64)
assert layer.to(device) is layer and layer.weight.device.type == device.type, "Module.to(device) should move the module itself"

# %% [markdown]
# PyTorch itself has a device-neutral API in `torch.accelerator`. With
# `check_available=True`, `current_accelerator` returns the accelerator that is
# really usable, or `None`; without it, it only reports what torch was *built* for.
# The cell puts that to the test: a tensor can be made on the usable one; where there is
# none, making a tensor on the built-for device fails. (A CPU-only wheel is built for no
# accelerator at all, and both answers are `None`.)

# %%
built_for = torch.accelerator.current_accelerator()
accelerator = torch.accelerator.current_accelerator(check_available=True)
print(f"built for:        {built_for}")
print(f"usable right now: {accelerator}")
if accelerator is not None:
    assert torch.ones(1, device=accelerator).device.type == accelerator.type, f"{accelerator} is not usable"
    print(f"a tensor on {accelerator}: made")
elif built_for is not None:
    try:
        torch.ones(1, device=built_for)
    except (RuntimeError, AssertionError) as err:
        print(f"a tensor on {built_for}, which is built for but not usable: {type(err).__name__} (Pitfalls shows the message)")
    else:
        raise AssertionError(f"a tensor on {built_for} was made, yet current_accelerator(check_available=True) is None")
else:
    assert torch.version.cuda is None and torch.version.hip is None, "built for no accelerator, yet a CUDA/ROCm build"
    print("a CPU-only build: torch knows no accelerator here")

# %% [markdown]
# ## 4. CPU threads
#
# On the CPU, one large operation (a matrix product, a convolution) is split
# across several threads. `torch.get_num_threads()` is how many threads such an
# *intra-op* parallel operation may use; `torch.set_num_threads(n)` changes it for
# this process. Its default is the number of *physical* cores (builds with Intel's MKL, such as the Linux
# x86-64 wheels, use MKL's default instead), and `OMP_NUM_THREADS` overrides it (*Going further* at the end
# of this section says where the default comes from). The number that
# matters is how many CPUs this *process* may run on: in a container, a CI job or under
# `taskset` that can be fewer than the machine has. Two different Linux mechanisms limit it:
#
# - the *affinity mask*, the set of cores the process may be scheduled on (`taskset`, CI jobs pinned
#   to some cores): Python reads it with `os.sched_getaffinity(0)` (`os.cpu_count()` counts the whole
#   machine);
# - a *CPU quota* of the process's cgroup, which is how `docker run --cpus=2` and Kubernetes CPU limits
#   work: every core stays in the mask, but the process gets only `quota / period` CPUs' worth of time.
#   The cgroup file system holds it: `/sys/fs/cgroup/cpu.max` reads `200000 100000` for two CPUs
#   (`max 100000` means no limit) under cgroup v2, and `cpu.cfs_quota_us` / `cpu.cfs_period_us` hold
#   the same two numbers under v1. torch's default is computed from the cores, not from the quota
#   (this run cannot show it without a container; the made-up cgroup below shows the quota rule).
#
# `helpers.device.usable_cpus()` takes the affinity count, capped by the quota rounded up
# (`helpers.device.cgroup_cpu_quota()` reads it); the doctor's `threads` line in section 5 warns
# when torch's threads exceed that. `torch.get_num_interop_threads()` is a separate pool that runs
# *independent* operations side by side; you rarely need to change it.
#
# The environment variable `OMP_NUM_THREADS` sets the intra-op default before Python
# starts (the course's test commands run with `OMP_NUM_THREADS=1`). The cell checks that torch
# follows it when it is set and `MKL_NUM_THREADS` is not: when both are set, torch's default takes
# `MKL_NUM_THREADS`, so the check would test the wrong variable. Lower it when several processes share a
# machine (for example parallel test runs, or several experiments started side by side): by default each
# process sizes its pool for all the cores it may run on, and together they ask for more threads than
# there are cores. DataLoader worker processes are the exception: torch sets one thread in each
# (`torch.set_num_threads(1)` in `torch/utils/data/_utils/worker.py`).

# %%
print(f"intra-op threads: {torch.get_num_threads()}, inter-op threads: {torch.get_num_interop_threads()}")
quota = cgroup_cpu_quota()
print(f"CPUs this process may use: {usable_cpus()}, logical CPUs of the machine: {os.cpu_count()}, "
      f"cgroup CPU quota: {'none' if quota is None else f'{quota:g} CPUs'}")
omp, mkl = os.environ.get("OMP_NUM_THREADS"), os.environ.get("MKL_NUM_THREADS")
if omp and not mkl:
    assert torch.get_num_threads() == int(omp), f"OMP_NUM_THREADS={omp}, but torch uses {torch.get_num_threads()} threads"
    print(f"OMP_NUM_THREADS={omp} is set, and torch follows it")
elif omp:
    print(f"OMP_NUM_THREADS={omp} and MKL_NUM_THREADS={mkl} are both set: torch uses {torch.get_num_threads()} "
          "threads (its default takes MKL_NUM_THREADS), so the OMP_NUM_THREADS check is skipped")
else:
    print("OMP_NUM_THREADS is not set here: torch chose its own default")
worker_source = open(os.path.join(os.path.dirname(torch.__file__), "utils", "data", "_utils", "worker.py")).read()
assert "torch.set_num_threads(1)" in worker_source, "torch's DataLoader worker no longer sets one thread"

# %% [markdown]
# To see the quota rule without a container, the cell below writes a made-up cgroup tree
# into a temporary folder under `build/`, with a `cpu.max` of `150000 100000` (1.5 CPUs of
# time per period), and points `usable_cpus` at it instead of the real `/sys/fs/cgroup`. A
# process that may keep only 1.5 CPUs busy is counted as 2 (rounded up), unless its affinity
# mask already allows fewer; `max 100000` lifts the limit.

# %%
import tempfile
from pathlib import Path

affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
with tempfile.TemporaryDirectory(dir=build_dir()) as fake_cgroup:
    fake_root = Path(fake_cgroup)
    own_cgroup = fake_root / "proc-self-cgroup"  # stands in for /proc/self/cgroup
    own_cgroup.write_text("0::/\n")  # cgroup v2, the process at the top of the (container's) tree
    (fake_root / "cpu.max").write_text("150000 100000\n")
    limited = usable_cpus(fake_root, own_cgroup), cgroup_cpu_quota(fake_root, own_cgroup)
    (fake_root / "cpu.max").write_text("max 100000\n")
    unlimited = usable_cpus(fake_root, own_cgroup), cgroup_cpu_quota(fake_root, own_cgroup)
print(f"affinity mask: {affinity} CPU(s)")
print(f"cpu.max '150000 100000': quota {limited[1]} CPUs -> usable_cpus() = {limited[0]}")
print(f"cpu.max 'max 100000':    no quota ({unlimited[1]}) -> usable_cpus() = {unlimited[0]}")
assert limited == (min(affinity, 2), 1.5), f"a 1.5-CPU quota should cap {affinity} CPUs at 2: {limited}"
assert unlimited == (affinity, None), f"'max' is no limit, so the affinity count should stand: {unlimited}"

# %% [markdown]
# The timing below multiplies two `MATMUL_SIZE × MATMUL_SIZE` matrices with one thread and
# with two (or one, where this process may use only one CPU: then there is nothing to compare).
# Two, not torch's default, so that it runs the same under `OMP_NUM_THREADS=1`, as in the
# course's tests. It uses `torch.utils.benchmark.Timer`, PyTorch's own timer:
# `Timer(..., num_threads=n)` sets the thread count for the measurement and restores it
# afterwards. `blocked_autorange` first times blocks of 1, 10, 100, … products until one block
# is long enough to time reliably (that estimate doubles as the warm-up), then repeats blocks of
# that size for at least `MIN_RUN_TIME` seconds and reports the median time per product. The two
# settings take turns, `ROUNDS` times, in the order 1, 2, then 2, 1 (ABBA), so that a slow drift
# of the machine, or a burst of other work, does not land on one setting only.
#
# Whether two threads are faster depends on whether the process gets two cores while they run,
# which depends on what else the machine is doing. A parallel matrix product splits the work into
# one share per thread and returns only when every share is done, so it is only as fast as its
# slowest thread: if the scheduler takes one thread's core away for a while, the other finishes its
# share and then *waits*. The OpenMP runtime of the Linux wheels (GNU libgomp) has a waiting thread
# spin for a short time before it sleeps (its documentation of `OMP_WAIT_POLICY`), which burns CPU
# time without doing any of the product. So the cell measures, for each setting:
#
# - the *cores obtained*: the CPU time the process used (`time.process_time()`, summed over its
#   threads) divided by the wall time, over all the timings of that setting;
# - the *CPU time per product*: that CPU time divided by the number of products run (the function
#   the timer calls counts them, warm-up blocks included). The arithmetic of one product is the same
#   for any thread count, so when this grows with two threads, the extra CPU per product is spinning
#   threads, or threads slowed by sharing a core or cache (two hardware threads of one hyper-threaded
#   core, a lower clock with two cores busy, a shared cache or memory bus); the timing cannot tell
#   these apart;
# - and, before it starts, the machine's 1-minute load average (`os.getloadavg()`, where the system has it).
#
# The line after the timings names whichever of these explains the result: the cores obtained, extra
# CPU per product, or the load (the thresholds are in the code's comments). The cell asserts only what
# PyTorch promises: the thread count takes effect, and is restored. In the figure, the number in brackets
# under each bar is the cores that setting obtained: below 1 for one thread means that even a single
# thread did not have a CPU to itself, because other work was running.
# (These are timings of a shared machine: the stored numbers are one run's, and yours will differ.)

# %%
import time

from helpers.device import import_without_cuda_home_log

benchmark = import_without_cuda_home_log("torch.utils.benchmark")  # silences a harmless CUDA_HOME log line

default_threads = torch.get_num_threads()
many = min(2, usable_cpus())
settings = sorted({1, many})
a = torch.rand(MATMUL_SIZE, MATMUL_SIZE)
b = torch.rand(MATMUL_SIZE, MATMUL_SIZE)
seen_threads = {n: set() for n in settings}
products_run = {n: 0 for n in settings}  # every call, the timer's warm-up and estimation blocks included


def product(n):
    seen_threads[n].add(torch.get_num_threads())  # what torch uses while the timer runs
    products_run[n] += 1
    return a @ b


load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None  # 1-minute load average
runs = {n: [] for n in settings}  # one torch.utils.benchmark Measurement per round
cpu_s = {n: 0.0 for n in settings}  # CPU time of the process while timing n threads
wall_s = {n: 0.0 for n in settings}
for round_ in range(ROUNDS):
    for n in settings if round_ % 2 == 0 else settings[::-1]:  # ABBA
        timer = benchmark.Timer("product(n)", globals={"product": product, "n": n}, num_threads=n)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        runs[n].append(timer.blocked_autorange(min_run_time=MIN_RUN_TIME))
        cpu_s[n] += time.process_time() - cpu0
        wall_s[n] += time.perf_counter() - wall0

median_ms = {n: 1000 * float(np.median([m.median for m in runs[n]])) for n in settings}
cores = {n: cpu_s[n] / wall_s[n] for n in settings}
cpu_ms = {n: 1000 * cpu_s[n] / products_run[n] for n in settings}  # CPU time per product, all threads together
samples = {n: sum(len(m.times) * m.number_per_run for m in runs[n]) for n in settings}
load_text = f"{load_before:.2f}" if load_before is not None else "not available here"
print(f"CPUs this process may use: {usable_cpus()}; 1-minute load average before the timing: {load_text}")
for n in settings:
    per_round = ", ".join(f"{1000 * m.median:.1f}" for m in runs[n])
    print(f"{n} thread(s): {median_ms[n]:6.1f} ms per {MATMUL_SIZE}x{MATMUL_SIZE} product "
          f"(median of {ROUNDS} rounds: {per_round} ms; {samples[n]} products timed); "
          f"cores obtained: {cores[n]:.2f}; CPU time per product: {cpu_ms[n]:.1f} ms ({products_run[n]} products run)")
# How the line after the timings is chosen (it only reads the numbers; nothing here is asserted):
# - speed: "faster" from a 1.2x speed-up, "slower" below 1/1.2, "about the same" in between;
# - cores: "consistent with the cores" when faster and the two-thread timings obtained more than
#   ENOUGH_CORES; a faster run on fewer cores is set against the cores the one-thread timings obtained
#   (on a shared machine, one thread may get even less than a core);
# - CPU: called extra when the CPU time per product grew EXTRA_CPU times or more, otherwise just printed;
# - load: named when the 1-minute load average was at least the usable CPUs before the timing;
# - none of these: said so, when it was not faster although it had the cores and no extra CPU.
ENOUGH_CORES = 1.2  # cores obtained above which two threads had (most of) two cores
EXTRA_CPU = 1.5  # growth of the CPU time per product from which the line names it as extra CPU
if len(settings) > 1:
    ratio = median_ms[1] / median_ms[many]
    cpu_growth = cpu_ms[many] / cpu_ms[1]
    if ratio >= 1.2:
        speed = f"faster with {many} threads"
    elif ratio > 1 / 1.2:
        speed = f"about the same with {many} threads"
    else:
        speed = f"slower with {many} threads ({1 / ratio:.1f}x the time)"
    reasons = []
    if cores[many] > ENOUGH_CORES and ratio >= 1.2:
        reasons.append(f"consistent with the {cores[many]:.2f} cores the {many}-thread timings obtained")
    elif ratio >= 1.2 and cores[many] > cores[1]:  # faster, on fewer cores than threads
        reasons.append(f"the {many}-thread timings obtained only {cores[many]:.2f} cores, but more than the "
                       f"{cores[1]:.2f} of the one-thread timings: on this shared machine, two threads got "
                       "more of the CPUs than one did")
    elif ratio >= 1.2:
        reasons.append(f"the {many}-thread timings obtained {cores[many]:.2f} cores, the one-thread timings "
                       f"{cores[1]:.2f}")
    elif cores[many] > ENOUGH_CORES:
        reasons.append(f"although the {many}-thread timings obtained {cores[many]:.2f} cores")
    else:
        reasons.append(f"the {many}-thread timings obtained only {cores[many]:.2f} cores")
    if cpu_growth >= EXTRA_CPU:
        reasons.append(f"extra CPU per product, {cpu_growth:.1f}x that of one thread: spinning threads, or threads "
                       "slowed by sharing a core or cache")
    else:
        reasons.append(f"CPU time per product {cpu_growth:.2f}x that of one thread")
    if load_before is not None and load_before >= usable_cpus():
        reasons.append(f"the machine was busy before the timing (load {load_before:.2f} on {usable_cpus()} CPUs)")
    if ratio < 1.2 and cores[many] > ENOUGH_CORES and cpu_growth < EXTRA_CPU:
        reasons.append("neither the cores nor extra CPU explain it: a product this size may be too small to split well")
    print(f"speed-up from 1 to {many} threads: {ratio:.2f}x, {speed}; " + "; ".join(reasons))
    _ = report.record(f"matmul speed-up, 1 -> {many} threads", round(ratio, 2), "x")
    _ = report.record(f"cores obtained during the {many}-thread timing", round(cores[many], 2), "cores")
    _ = report.record(f"CPU time per product, {many} threads against 1", round(cpu_growth, 2), "x")
    if load_before is not None:
        _ = report.record("1-minute load average before the timing", round(load_before, 2), "")
else:
    print("this process may use only one CPU, so there is nothing to compare: the comparison is skipped")
print(f"threads during the timings: {seen_threads}; restored afterwards to {torch.get_num_threads()}")
assert all(seen_threads[n] == {n} for n in settings), f"Timer(num_threads=n) did not run with n threads: {seen_threads}"
assert torch.get_num_threads() == default_threads, "the thread count was not restored after the timing"

fig, (ax_wall, ax_cpu) = plt.subplots(1, 2, figsize=(9, 3))
labels = [f"{n} ({cores[n]:.1f} cores obtained)" for n in settings]
colors = ["tab:gray", "tab:blue"][: len(settings)]
ax_wall.bar(labels, [median_ms[n] for n in settings], color=colors)
for i, n in enumerate(settings):
    ax_wall.plot([i] * ROUNDS, [1000 * m.median for m in runs[n]], "k.", label="one round" if i == 0 else None)
ax_wall.set_xlabel("intra-op threads (cores obtained)")
ax_wall.set_ylabel("wall ms per product (median)")
ax_wall.set_title("time to the result")
ax_wall.legend(loc="best", fontsize=8)
ax_cpu.bar(labels, [cpu_ms[n] for n in settings], color=colors)
ax_cpu.set_xlabel("intra-op threads (cores obtained)")
ax_cpu.set_ylabel("CPU ms per product (all threads)")
ax_cpu.set_title("CPU time spent, all threads together")
fig.suptitle(f"{MATMUL_SIZE}x{MATMUL_SIZE} float32 matmul, this run (load {load_text})", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# **Going further: where the default thread count comes from.** Without `OMP_NUM_THREADS` or
# `MKL_NUM_THREADS`, ATen's `intraop_default_num_threads()` asks c10's
# `TaskThreadPoolBase::defaultNumThreads()`, which takes the number of cores the cpuinfo library
# reports when it is smaller than the number of logical processors (so the second hardware thread of a
# hyper-threaded core is not counted; on Apple silicon only the performance cores count). Builds with
# MKL take `mkl_get_max_threads()` instead. When both variables are set, `MKL_NUM_THREADS` wins.
# `torch.__config__.parallel_info()` prints the parallel backend, the thread counts and the variables.

# %% [markdown]
# ## 5. The doctor: a preflight report
#
# `helpers.device.doctor()` checks everything the course needs and returns a
# report; printing it gives one line per check. From a terminal, `make doctor`
# (or `python -m helpers.device`) prints the same report. Each line starts with a
# status, and each status has one meaning. The legend below is printed from
# `helpers.device.STATUS_MEANING`, the text the doctor's code keeps beside its rules.
# Printing a text proves nothing about behaviour, though: what keeps the rules and the
# legend in step is `tests/test_device.py`, which builds a machine for each rule (a missing
# compiler, an NVIDIA driver with a CPU-only torch, an `nvcc` of another CUDA major version,
# more threads than CPUs, data out of reach, …) and asserts the status the legend gives it.
# This section then runs the doctor on this machine and on a few made-up ones.

# %%
# NBVAL_CHECK_OUTPUT
for status, meaning in STATUS_MEANING.items():
    print(f"{status.upper():4s}  {meaning}")

# %% [markdown]
# The checks are:
#
# | check | what it looks at | when it is not OK |
# | --- | --- | --- |
# | `python` | Python 3.10 or newer | FAIL |
# | `torch`, `torchvision` | the installed versions against the pins | WARN: not the tested versions, so numbers will differ from the stored outputs |
# | `cuda` | usable NVIDIA GPUs and their names, or which CUDA version torch was built for | INFO without a GPU: every chapter runs on the CPU. WARN when an NVIDIA driver is there (`nvidia-smi` on PATH, or `/proc/driver/nvidia`) but torch cannot use CUDA: a CPU-only wheel, or a driver too old for the build; the fix says which |
# | `mps` | whether Apple's GPU backend is usable | INFO off a Mac, with what MPS needs; WARN on a Mac where it is not usable (an x86_64 Python under Rosetta, macOS older than 14) |
# | `threads` | the intra-op threads from section 4 against the CPUs this process may use | WARN when torch runs more threads than that |
# | `c++ compiler`, `ninja` | needed to build the C++ extension of chapter 20 | FAIL: chapter 20 stops at its first build |
# | `nvcc` | the CUDA compiler, needed only for the CUDA kernels of chapter 20, and its CUDA version against `torch.version.cuda` | INFO when absent: chapter 20 skips those cells. A different *major* version: FAIL on a GPU machine (`torch.utils.cpp_extension` refuses to build CUDA sources, chapter 20 stops), WARN without a GPU |
# | `disk` | free space where `data/` and `build/` live | WARN below 2 GB |
# | `data: …` | for each dataset: in `data/`, copyable from the offline mirror, downloadable on first use, or out of reach | see below |
#
# A dataset the chapters need is OK when it is in `data/` or in the mirror
# (`COURSE_DATA_MIRROR`). When it will be *downloaded on first use*, that is a WARN: nothing
# is broken on a machine with a network, but the chapters that use it (the line names them)
# will stop if the network is gone by then. When it is out of reach (not in `data/`, not in
# the mirror, and no download allowed or possible), the chapters that use it will stop with an
# error, so by the legend it is a FAIL: the line names those chapters, and its `fix:` says how
# to get the data (`make data` once with a network, or `COURSE_DATA_MIRROR` pointing at a copy
# of the course mirror). An optional dataset (the full CIFAR-10 and the offline CIFAR-10
# subset stand in for each other) is INFO while its stand-in is in reach. The chapters then
# use the stand-in and do not try a download (`helpers.data.cifar10` takes the subset when it
# is in `data/` or in the mirror), which is what the line says.
#
# The last line is the verdict: `NOT READY` as soon as one check FAILs (it names the checks
# and the chapters that will stop), `READY, with warnings about …` when something WARNs,
# and `READY` otherwise.

# %%
health = doctor()
print(health)

# %% [markdown]
# A line that is not OK has a `fix:` line under it, saying what to do (for INFO, often that nothing is
# needed); an OK line has none, as there is nothing to fix. The *Checks* below assert that every line
# that is not OK, here and on the made-up machines that follow, has a fix.
#
# The report is also an object you can test in code: `health.ok` is `False` as
# soon as one check failed, and `health.verdict` is the last line.

# %%
print(f"checks: {len(health.checks)}, ok: {health.ok}")
print(f"needing attention: {[c.name for c in health.checks if c.status in ('warn', 'fail')] or 'none'}")
for figure, value in [("device", str(device)), ("doctor verdict", health.verdict), ("torch", torch.__version__)]:
    report.record(figure, value)

# %% [markdown]
# A report that says READY is only worth something if it would say otherwise on a
# machine that is not ready. So the cell below runs the doctor on two machines made
# up for the purpose, using `temporary_env` and an empty temporary data folder under
# `build/` (both undone when the `with` block ends):
#
# - *a new learner with a network*: no data yet, no mirror, downloads allowed;
# - *offline, no data, no mirror*: `COURSE_OFFLINE=1`, as on a plane, or in CI (which is offline) if the mirror were missing.
#
# To keep the output short it asks about one dataset, MNIST, and prints its line
# and the verdict for each.

# %%
mirror_before = os.environ.get("COURSE_DATA_MIRROR")
made_up = {}
with tempfile.TemporaryDirectory(dir=build_dir()) as empty_data:
    no_data = {"COURSE_DATA_DIR": empty_data, "COURSE_DATA_MIRROR": None}
    with temporary_env(**no_data, COURSE_OFFLINE=None):
        made_up["new learner with a network"] = doctor(datasets=("mnist",))
    with temporary_env(**no_data, COURSE_OFFLINE="1"):
        made_up["offline, no data, no mirror"] = doctor(datasets=("mnist",))
assert os.environ.get("COURSE_DATA_MIRROR") == mirror_before, "temporary_env did not restore COURSE_DATA_MIRROR"

for name, made_up_report in made_up.items():
    (mnist_line,) = [c for c in made_up_report.checks if c.name == "data: mnist"]
    print(f"{name}:")
    print(f"  [{mnist_line.status.upper()}] {mnist_line.detail}")
    print(f"  fix: {mnist_line.fix}")
    print(f"  verdict: {made_up_report.verdict}")

# %% [markdown]
# Read the two verdicts against the legend. The learner with a network is told that
# the data will be downloaded and by which chapters: a warning, because nothing fails
# on that machine (this is what a fresh clone on a laptop sees). Offline, the same
# missing data is a FAIL: the chapters it lists would stop with an error, and the fix
# says what to do before starting them. The *Checks* below assert both verdicts, so a
# doctor that called everything READY would fail this notebook.
#
# A third made-up machine needs no faking at all: ask torch for more threads than this
# process has CPUs (section 4), run the doctor, and put the thread count back.

# %%
too_many = usable_cpus() + 2
torch.set_num_threads(too_many)
try:
    oversubscribed = doctor(datasets=())
finally:
    torch.set_num_threads(default_threads)
(threads_line,) = [c for c in oversubscribed.checks if c.name == "threads"]
print(f"with torch.set_num_threads({too_many}):")
print(f"  [{threads_line.status.upper()}] {threads_line.detail}")
print(f"  fix: {threads_line.fix}")

# %% [markdown]
#
# `make doctor` runs `python -m helpers.device`, whose `main()` prints the same
# report and returns the program's exit status: 0 when no check failed and 1
# otherwise, so a script or CI job can stop early on a broken machine. Here it is
# called in this process, with its printout captured, on this machine and on the
# offline machine from above:

# %%
import io

from helpers.device import main as doctor_main  # what `make doctor` runs


def run_make_doctor() -> tuple[int, str]:
    """Run `make doctor`'s main() in this process; return its exit status and its last printed line."""
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        status = doctor_main()
    return status, printed.getvalue().strip().splitlines()[-1]


exit_status, last_line = run_make_doctor()
with tempfile.TemporaryDirectory(dir=build_dir()) as empty_data:
    with temporary_env(COURSE_DATA_DIR=empty_data, COURSE_DATA_MIRROR=None, COURSE_OFFLINE="1"):
        broken_exit_status, broken_last_line = run_make_doctor()
print(f"this machine:      exit status {exit_status}; {last_line}")
print(f"offline, no data:  exit status {broken_exit_status}; {broken_last_line.split(' (chapters')[0]} (…)")

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
if accelerator is not None:  # torch.manual_seed seeds every GPU as well
    seed_everything(SEED)
    on_gpu = torch.rand(3, device=accelerator)
    seed_everything(SEED)
    assert torch.equal(on_gpu, torch.rand(3, device=accelerator)), f"{accelerator} draws did not repeat after reseeding"
    print(f"{accelerator.type} draws repeat after reseeding too")

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
fresh = torch.Generator().manual_seed(SEED)
assert torch.equal(mine, torch.rand(3, generator=fresh)), "seed_everything's generator is not seeded with SEED"

# %% [markdown]
# Seeding makes the *random numbers* repeat. It does not by itself make every
# result bit-identical: some GPU kernels may add numbers in a different order from
# run to run. Chapter 15 covers `torch.use_deterministic_algorithms(True)` for that.
#
# ## 7. What is current in the ecosystem, and what is not
#
# Tutorials on the web are of every age, and some import packages that are no
# longer developed. Three things to know before you copy one (each checked against
# the projects' own documentation at the time of writing; where this environment can
# confirm a fact, the cell below asserts it):
#
# - **torchtext is discontinued.** Its documentation says development has stopped
#   and that 0.18 (April 2024) is its last stable release; the 0.18 release notes say
#   it was built for torch 2.3.0. Each torchtext release requires one exact torch
#   version (0.17.2 requires `torch==2.2.2`, for example), so pip cannot install it
#   beside torch 2.14 without downgrading torch. Code that imports torchtext (its
#   vocabularies, tokenizers, datasets) needs rewriting. What replaces it depends on the job: a plain
#   Python tokenizer and vocabulary with a `torch.utils.data` `Dataset` and
#   `pad_sequence` (what chapters 08 and 09 do, with `helpers.models.CharVocab`);
#   Hugging Face's `tokenizers` and `datasets` libraries for real subword tokenizers and
#   corpora; and, for data loading beyond `DataLoader`, torchdata: its
#   `StatefulDataLoader` (a drop-in `DataLoader` with `state_dict()`/`load_state_dict()`,
#   to resume mid-epoch) and `torchdata.nodes` (beta). torchdata itself changed course:
#   0.10 removed the DataPipes and DataLoader2 that older tutorials use.
# - **torchaudio is in maintenance.** From version 2.9 its documentation calls it
#   a maintenance phase: APIs deprecated in 2.8 were removed, and decoding and
#   encoding of audio and video moved to **TorchCodec**. `torchaudio.load` and
#   `torchaudio.save` still exist, but call TorchCodec underneath, and the torchaudio
#   documentation recommends porting to TorchCodec's own API.
# - **Video decoding left torchvision too.** torchvision deprecated its video decoding and
#   encoding in 0.22 in favour of TorchCodec (the deprecation message, still shipped in
#   `torchvision/io/_video_deprecation_warning.py`, says so), and has since taken `read_video`,
#   `write_video` and `VideoReader` out of the open-source `torchvision.io`: the pinned 0.29.1 has
#   none of them. Image decoding (`torchvision.io.decode_image`) stays.
#
# None of these packages is a dependency of the course: the course's tests
# (`tests/test_ecosystem.py`) check that torchtext is neither pinned nor installed and that no
# chapter imports it. What this environment can confirm, the cell prints and checks: whether
# torchtext is importable here, what the installed torchvision's deprecation message says, and
# that the pinned torchvision has no video reader but still decodes images.

# %%
import importlib.util
import re

vision_public = Version(torchvision.__version__).public
print(f"torchtext importable here: {importlib.util.find_spec('torchtext') is not None}")
video_api = {name: hasattr(torchvision.io, name) for name in ("read_video", "write_video", "VideoReader")}
print(f"torchvision {torchvision.__version__}: in torchvision.io: {video_api}, "
      f"decode_image: {hasattr(torchvision.io, 'decode_image')}")
notice = Path(torchvision.__file__).parent / "io" / "_video_deprecation_warning.py"
if notice.is_file():
    deprecated_in = re.search(r"deprecated from version (\d+\.\d+)", notice.read_text())
    print(f"its deprecation message: video decoding and encoding deprecated from version "
          f"{deprecated_in[1] if deprecated_in else '(not found)'}")
    assert deprecated_in and deprecated_in[1] == "0.22", f"the deprecation message no longer names 0.22: {deprecated_in}"
if vision_public == PINNED["torchvision"]:  # what the text says about the pinned version
    assert not any(video_api.values()), f"torchvision {vision_public} still has {video_api}"
assert importlib.util.find_spec("torchtext") is None, "torchtext is importable here, which the text says it is not"
png = torchvision.io.encode_png(torch.tensor([[[0, 255], [128, 64]]], dtype=torch.uint8))  # a 1x2x2 image
assert torch.equal(torchvision.io.decode_image(png), torch.tensor([[[0, 255], [128, 64]]], dtype=torch.uint8)), (
    "torchvision.io.decode_image should give back the image that encode_png encoded")

# %% [markdown]
# ## 8. For maintainers: how the course proves that its notebooks run
#
# The outputs stored in `notebooks/*.ipynb` come from a real run, but a stored output only says
# that the notebook ran once, somewhere. What keeps the course honest is `make test`, which CI
# (`.ci/run`) calls after installing everything from scratch, offline (`COURSE_OFFLINE=1`, datasets
# from the mirror in `COURSE_DATA_MIRROR`). It is a single pytest command, the `test` target of the
# `Makefile`, and it collects four kinds of test:
#
# | kind | where | what it does | it fails when |
# | --- | --- | --- | --- |
# | nbval | `notebooks/*.ipynb`, collected because of `--nbval-lax` | executes each stored notebook again, top to bottom, in a kernel of the current environment (`--nbval-current-env`), with its default parameters | a cell raises, so every `assert` of a chapter is a test; or a cell whose first line is `# NBVAL_CHECK_OUTPUT` prints something other than its stored output. In lax mode no other output is compared, so timings may differ |
# | papermill smoke run | `tests/test_notebooks_run.py`, through `helpers.runner.run_chapter(stem, smoke=True)` | executes each notebook once more with the tiny `smoke:` parameters of `notebooks/chapters.yaml`, which papermill writes into a cell after the one tagged `parameters` | a cell raises, a code cell never ran, the notebook did not reach `report.finish()`, or it recorded no headline figure: a notebook whose work was all skipped does not pass as a run |
# | exercise tests | `tests/test_exercises.py` and `tests/test_exercises_chNN*.py` | runs every checker on its reference solution and on the untouched stub, then on known wrong answers and library shortcuts | the reference fails, the stub does not read "not attempted", or a wrong answer or shortcut passes (each test also names the words its hint must contain) |
# | sources and helpers | `tests/test_notebook_sources.py`, `tests/test_device.py`, … | checks that each `.py` source and its `.ipynb` hold the same cells in the chapter's anatomy, and unit-tests the helpers (the doctor's rules on made-up machines, `usable_cpus` on made-up cgroup trees) | a pair drifts apart, or a helper misbehaves |
#
# `--dist loadfile` with two workers (`-n 2`) keeps the cells of one notebook in one kernel, in order;
# at the end, the root `conftest.py` prints the seconds each notebook took in both runs, which is how CI
# stays inside its time budget. After the tests, `.ci/run` calls `make check`: ruff, the pairs in sync,
# and `../shared/tools/check_notebooks.py`, which refuses stored outputs with text on stderr, absolute
# paths or memory addresses.
#
# To check one chapter after editing it, regenerate it (`make notebooks NB=00`, which executes the
# `.py` and rewrites the `.ipynb`), then run its share of each kind:
#
# ```bash
# OMP_NUM_THREADS=1 .venv/bin/python -m pytest --nbval-lax --nbval-current-env notebooks/00_environment.ipynb
# OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_notebooks_run.py -k 00_environment
# .venv/bin/python -m pytest tests/test_exercises.py tests/test_exercises_ch00.py tests/test_exercises_ch00_ch01.py
# .venv/bin/python -m pytest tests/test_notebook_sources.py tests/test_device.py
# ```
#
# The cell reads the files the table cites, prints what they say for this chapter, and checks the
# table against them: if the `Makefile` or `.ci/run` changed, this section would be out of date, and
# the notebook fails.

# %%
import jupytext

makefile, ci_script = ROOT / "Makefile", ROOT / ".ci" / "run"
if makefile.is_file():
    test_recipe = makefile.read_text().split("\ntest: setup\n", 1)[1].splitlines()[0].strip()
    print(f"Makefile, test target:\n  {test_recipe}")
    for part in ("pytest", "--nbval-lax", "--nbval-current-env", "--dist loadfile", "tests notebooks"):
        assert part in test_recipe, f"`make test` no longer has {part!r}: the table above is out of date"
if ci_script.is_file():
    ci_text = ci_script.read_text()
    ci_steps = [line.strip() for line in ci_text.splitlines() if line.strip().startswith("make ")]
    print(f".ci/run: sets COURSE_OFFLINE=1: {'COURSE_OFFLINE=1' in ci_text}; then runs {ci_steps}")
    assert ci_steps == ["make setup", "make test", "make check"] and "COURSE_OFFLINE=1" in ci_text, ci_steps
chapter_table = yaml.safe_load((ROOT / "notebooks" / "chapters.yaml").read_text())
print(f"notebooks/chapters.yaml, smoke parameters of this chapter: {chapter_table['00_environment']['smoke']}")
source = ROOT / "notebooks" / "src" / "00_environment.py"
if source.is_file():
    code_cells = [c.source for c in jupytext.read(source).cells if c.cell_type == "code"]
    compared = sum(c.startswith("# NBVAL_CHECK_OUTPUT") for c in code_cells)
    asserting = sum("assert " in c for c in code_cells)
    print(f"this chapter: {len(code_cells)} code cells; nbval compares the output of {compared}, "
          f"and {asserting} contain an assert")
exercise_tests = sorted(path.name for path in (ROOT / "tests").glob("test_exercises_ch00*.py"))
print(f"tests of this chapter's exercises: test_exercises.py, {', '.join(exercise_tests)}")

# %% [markdown]
# ## Checks
#
# What this chapter must show: the automatic device choice agrees with what torch reports as usable, the doctor finds
# nothing on this machine that stops this chapter (and nothing at all in CI), and its verdicts follow its legend on the made-up ones (each line that is not OK says how to fix it), and seeded draws repeat.

# %%
new_learner = made_up["new learner with a network"]
offline = made_up["offline, no data, no mirror"]
(new_learner_mnist,) = [c for c in new_learner.checks if c.name == "data: mnist"]
(offline_mnist,) = [c for c in offline.checks if c.name == "data: mnist"]

if os.environ.get("COURSE_DEVICE") is None:  # the automatic choice: the usable accelerator if CUDA or MPS, else the CPU
    expected_type = accelerator.type if accelerator is not None and accelerator.type in ("cuda", "mps") else "cpu"
    assert device.type == expected_type, (
        f"pick_device() chose {device}, but torch.accelerator reports {accelerator}: expected {expected_type}"
    )
# What stops *this* notebook must not be there. A check that fails only for a later chapter (no C++ compiler,
# which chapter 20 needs, say) is in the report above and `make doctor` fails on it, but it should not stop
# Run All before the exercises. In CI (CI=true) every check must pass.
stops_here = [c.name for c in health.checks if c.status == "fail" and (not c.chapters or "00" in c.chapters)]
assert not stops_here, f"the doctor found a problem that stops this chapter, see its report above: {stops_here}"
if os.environ.get("CI") == "true":
    assert health.ok, f"CI: the doctor found a problem, see its report above: {health.verdict}"
without_fix = [(where, c.name) for where, r in [("this machine", health), *made_up.items(), ("too many threads", oversubscribed)]
               for c in r.checks if c.status != "ok" and not c.fix.strip()]
assert not without_fix, f"every line that is not OK should say how to fix it; these have no fix: {without_fix}"
assert last_line == f"verdict: {health.verdict}", f"make doctor should end with this machine's verdict: {last_line!r}"
for status, verdict_line in ((exit_status, last_line), (broken_exit_status, broken_last_line)):
    assert status == (1 if verdict_line.startswith("verdict: NOT READY") else 0), (
        f"make doctor's exit status should follow the verdict it printed: {status} after {verdict_line!r}"
    )
assert new_learner_mnist.status == "warn" and new_learner.ok and new_learner.verdict.startswith("READY, with warnings"), (
    f"data to download should be a WARN and leave the machine READY: {new_learner_mnist.status}, {new_learner.verdict!r}"
)
assert offline_mnist.status == "fail" and not offline.ok and offline.verdict.startswith("NOT READY"), (
    f"data out of reach stops chapters, so by the legend it is a FAIL: {offline_mnist.status}, {offline.verdict!r}"
)
assert "05" in offline_mnist.chapters and "05" in offline.verdict, "the FAIL should name the chapters that cannot run"
assert "make data" in offline_mnist.fix and "COURSE_DATA_MIRROR" in offline_mnist.fix, "the FAIL's fix should say how"
assert threads_line.status == "warn" and f"OMP_NUM_THREADS={usable_cpus()}" in threads_line.fix, (
    f"{too_many} threads on {usable_cpus()} CPUs should be a WARN whose fix names the right count: {threads_line}"
)
assert f"torch uses {too_many} thread(s)" in threads_line.detail, (
    f"the doctor should read the thread count in force when it runs ({too_many}): {threads_line.detail}"
)
assert broken_exit_status == 1 and broken_last_line.startswith("verdict: NOT READY"), (
    f"make doctor should exit 1 on the offline machine without data, got {broken_exit_status}: {broken_last_line}"
)
assert torch.equal(first, again), "two draws after seed_everything(SEED) differ"
assert not torch.equal(again, later), "the generator did not advance between draws"
assert draws_a == draws_b, "random, NumPy or torch did not repeat after reseeding"
assert torch.equal(mine, mine_again), "a private torch.Generator was disturbed by global draws"
print(f"device {device}, doctor {health.verdict}, seeding reproducible")

# %% [markdown]
# ## Pitfalls
#
# **Asking for a device that does not exist, or one the course does not run on.**
# `pick_device` refuses, and says what the machine has or what it accepts. The CUDA index
# asked for is one past the last GPU, so it is missing on every machine; `gpu` is not a
# device name at all; `meta` is a real torch device (below), but no chapter runs on it.

# %%
for wanted in (f"cuda:{torch.cuda.device_count()}", "gpu", "meta"):
    try:
        pick_device(wanted)
    except (RuntimeError, ValueError) as err:
        print(f"pick_device({wanted!r}) -> {type(err).__name__}: {err}")
    else:
        raise AssertionError(f"pick_device({wanted!r}) should refuse")

# %% [markdown]
# **"MPS is supported on macOS 14.0+", seen on macOS 14 or newer.** Recent releases refuse to make a
# tensor on MPS with ``RuntimeError: The MPS backend is supported on macOS 14.0+. Current OS version can
# be queried using `sw_vers` ``. There are reports of this message on macOS versions that meet the
# requirement (pytorch/pytorch issue #177819). If you see it on macOS 14 or newer, check that
# `torch.backends.mps.is_built()` is `True` and that Python runs natively on arm64 (`platform.machine()`
# says `arm64`, not `x86_64` under Rosetta). If it says `x86_64`, install a native arm64 Python (the
# python.org installer or an arm64 conda), then in a new environment made with it install the macOS arm64
# wheel, which `pip install torch==2.14.1` picks there. Otherwise, see that issue. The message is compiled
# only into the macOS builds, so this Linux run cannot reproduce it.
#
# **Moving a tensor to `"cuda"` without a GPU.** Code copied from a GPU machine
# often says `.to("cuda")` or `.cuda()`. On a machine without one, torch raises.
# The message depends on the build: a CUDA build looks for the NVIDIA driver and
# raises a `RuntimeError`; the CPU-only wheel raises
# `AssertionError: Torch not compiled with CUDA enabled` (`tests/test_ecosystem.py` checks
# that this text is in the installed torch). The fix is to use the `device` you picked
# instead of a hard-coded name.

# %%
if not torch.cuda.is_available():
    try:
        torch.ones(2).to("cuda")
    except (RuntimeError, AssertionError) as err:
        print(f"{type(err).__name__}: {err}")
        expected = RuntimeError if torch.version.cuda or torch.version.hip else AssertionError
        assert type(err) is expected, f"a {build_kind} should raise {expected.__name__}, not {type(err).__name__}"
    else:
        raise AssertionError(".to('cuda') worked on a machine where torch.cuda.is_available() is False")
    print(f"fix: torch.ones(2).to(device) -> {torch.ones(2).to(device).device}")
else:
    print("CUDA is available here, so .to('cuda') works: nothing to show")

# %% [markdown]
# **Mixing devices in one operation.** All tensor inputs of an operation must be on
# the same device; torch never moves them for you. On a GPU machine this is a common
# mistake: the model is on the GPU and a batch is still on the CPU, or the other way
# round. Where CUDA or MPS is usable (`accelerator`, section 3), the cell below adds a
# tensor on it to one on the CPU and prints the real error. Without one, it prints the
# message torch raises on a GPU machine, clearly labelled as a quotation.
#
# Elementwise operations (`+`, `*`, `torch.where`, …) check devices in one place in
# PyTorch's C++ core (TensorIterator) and say:
#
# > `RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!`
#
# Many other operations, among them the matrix product inside `nn.Linear`, check in
# generated code and name the argument and the operator's internal name:
#
# > `RuntimeError: Expected all tensors to be on the same device, but got <argument> is on cpu, different from other tensors on cuda:0 (when checking argument in method <operator>)`
#
# For `nn.Linear` the argument is typically `mat1` (the input) and the operator
# `wrapper_CUDA_addmm`. Answers on the web often quote the older wording of this second
# message, `... found at least two devices, cuda:0 and cpu! (when checking argument for
# argument mat1 in method wrapper_CUDA_addmm)`. The fixed parts of both messages are
# string constants in torch's C++ library; `tests/test_ecosystem.py` checks that the
# installed torch 2.14 has both quoted here, and no longer has the old wording.

# %%
if accelerator is not None:
    try:
        torch.ones(3, device=accelerator) + torch.ones(3)
    except RuntimeError as err:
        message = f"{type(err).__name__}: {err}"
    else:
        raise AssertionError(f"adding a {accelerator} tensor to a CPU tensor did not raise")
    print(f"this run, on {accelerator}:")
    print(message)
    assert message.startswith("RuntimeError: Expected all tensors to be on the same device"), message
    print(f"fix: move one of them first -> {(torch.ones(3, device=accelerator) + torch.ones(3).to(accelerator)).device}")
else:
    print("No CUDA or MPS device here, so the error cannot be produced in this run.")
    print(f"What torch {Version(torch.__version__).public} raises on a CUDA machine (quoted, not produced here):")
    print("  RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!")

# %% [markdown]
# The `meta` device, which stores only shapes and dtypes and no data, exists on every
# machine, so the same mistake can be *run* anywhere. Its device check is written elsewhere in
# torch, so the wording differs from the C++ messages above; the rule and the fix are the same,
# and the cell checks the rule: a `RuntimeError` that names both devices.

# %%
on_meta = torch.ones(3, device="meta")
on_cpu = torch.ones(3)
try:
    on_meta + on_cpu
except RuntimeError as err:
    meta_message = f"{type(err).__name__}: {err}"
else:
    raise AssertionError("adding a meta tensor to a CPU tensor did not raise")
print(meta_message)
assert "cpu" in meta_message and "meta" in meta_message, f"the error should name both devices: {meta_message}"
print(f"fix: move one of them first -> {(on_meta + on_cpu.to('meta')).device}")

# %% [markdown]
# One exception surprises people: a 0-dimensional CPU tensor (a single number, such as
# a loss you computed on the CPU) is treated like a Python number and may be combined with
# a tensor on any device. The result stays on the other tensor's device.

# %%
scalar = torch.tensor(2.0)  # 0-dimensional, on the CPU
print(f"meta + 0-dim CPU tensor -> {(on_meta + scalar).device}")
assert (on_meta + scalar).device.type == "meta", "a 0-dim CPU tensor should combine with a tensor on another device"
if accelerator is not None:
    print(f"{accelerator.type} + 0-dim CPU tensor -> {(torch.ones(3, device=accelerator) + scalar).device}")
    assert (torch.ones(3, device=accelerator) + scalar).device.type == accelerator.type

# %% [markdown]
# ## Exercises
#
# Each exercise is a function to complete. Replace `raise NotImplementedError`
# with your code and run the checker cell below it: it prints `PASSED`, a hint
# (`NOT YET`), or `TODO` while the stub is untouched. It never stops the notebook.
# After a failed check, `hint("00.seed_all")` gives a fuller hint (the idea, not the code). If you are
# still stuck, `solution("00.seed_all")` returns the reference solution
# (print its source with `import inspect; print(inspect.getsource(solution("00.seed_all")))`).
#
# **Exercise 1: `seed_all`.** Write your own small `seed_everything` (without calling
# it, Lightning's `seed_everything` or timm's `random_seed`: the checker refuses them): `seed_all(seed)` seeds
# torch's default generator (`torch.default_generator`, the global one that `torch.rand` and
# `torch.manual_seed` use), Python's `random` module and NumPy's global generator (the one the
# legacy `np.random.*` functions share) with `seed` itself, so that afterwards `torch.rand`,
# `random.random` and `np.random.rand` give exactly what a fresh generator seeded with `seed`
# gives (for NumPy, `np.random.RandomState(seed)`). `hint("00.seed_all")` gives the idea in words
# before you start. The checker compares with those streams for seeds up to 2³² − 1, and tries
# neighbouring seeds and seeds that differ only in their high bits, such as 300 and 300 + 2¹⁶.
# It stays below 2³²: torch's CPU generator (a Mersenne Twister, mt19937) keeps only the
# lowest 32 bits of a seed, so larger seeds could not all be told apart on the CPU (CUDA's
# generator, Philox, keeps all 64), and NumPy's legacy seeding refuses seeds of 2³² and above.
# The cell below shows the first half: on the CPU, seeds 5 and 5 + 2³² give the same draws.

# %%
# NBVAL_CHECK_OUTPUT
draws = []
for big_seed in (5, 5 + 2**32):
    torch.manual_seed(big_seed)
    draws.append(torch.rand(3))
print(f"torch.rand(3) after manual_seed(5) and manual_seed(5 + 2**32): identical {torch.equal(*draws)}")
assert torch.equal(*draws), "the CPU generator should keep only the lowest 32 bits of a seed"
try:
    np.random.seed(2**32)
except ValueError:
    print("np.random.seed(2**32) raises ValueError, as the text says")
else:
    raise AssertionError("NumPy's legacy seeding accepted a seed of 2**32")
if torch.cuda.is_available():  # Philox keeps all 64 bits
    cuda_draws = []
    for big_seed in (5, 5 + 2**32):
        torch.cuda.manual_seed(big_seed)
        cuda_draws.append(torch.rand(3, device="cuda").cpu())
    assert not torch.equal(*cuda_draws), "CUDA's generator should tell seeds 5 and 5 + 2**32 apart"


# %%
def seed_all(seed: int) -> None:
    """Seed torch's default generator, Python's `random` module and NumPy's global generator with `seed`."""
    raise NotImplementedError


# %%
result = check("00.seed_all", seed_all)

# %% [markdown]
# **Exercise 2: `to_device`.** A DataLoader often yields a *batch* that is not a
# single tensor but a dict, list or tuple of them, sometimes nested, with other
# values mixed in (ids, strings, numbers). Write `to_device(batch, device)` that
# returns a new batch of the same shape, with every tensor moved to `device` and
# every other value left as it is. A dict stays a dict, a list a list, a tuple a tuple,
# and a namedtuple the same namedtuple (`torch.utils.data.default_collate` keeps
# namedtuples too); the input must not be modified. The checker moves to the `meta` device,
# so returning the batch unchanged cannot pass by accident, and then to the CPU, where it
# also compares the values.
#
# Write the walk over the containers yourself. PyTorch has walks in private modules:
# `torch.utils._pytree` (`tree_map_only(torch.Tensor, fn, batch)` would do the whole exercise, and
# so would flattening the batch and rebuilding it from its spec), its twin `torch.utils._cxx_pytree`
# (the same functions on the optree library, where that optional package is installed), and `torch.distributed.utils`
# (`_recursive_to`, which DistributedDataParallel uses to move its inputs); Lightning has
# `move_data_to_device` and `apply_to_collection`. The checker refuses them, because here the walk
# is the point. `hint("00.to_device")` gives the idea in words before you start.

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
#   CPU-only wheel without the NVIDIA packages) or conda from `environment.yml`; the course pins torch 2.14.1
#   and torchvision 0.29.1. PyTorch's own conda channel stopped at 2.5.
# - The build is `torch.version.cuda` (`None` for the CPU-only wheel); the `+cu130` label of the version
#   string is missing from a PyPI wheel's metadata, so do not rely on it.
# - `pick_device()` chooses CUDA, then MPS, then the CPU; `COURSE_DEVICE` (read on every call) or an
#   argument overrides it. It accepts cpu, cuda, mps, and xpu where torch can use it; a missing device is
#   an error rather than a silent fallback.
# - `Tensor.to` returns a new tensor and leaves the original alone; `Module.to` changes the module in place
#   and returns it (chapter 03 shows what it does to parameters and buffers).
# - All inputs of one operation must be on one device: "Expected all tensors to be on the same device…".
# - `torch.get_num_threads()` / `set_num_threads(n)` control how many CPU threads one operation uses
#   (default: the physical cores, or MKL's default in MKL builds; `OMP_NUM_THREADS` overrides it). Keep
#   them at or below the CPUs the process may use: its affinity mask (`os.sched_getaffinity(0)`), capped by
#   its cgroup's CPU quota in a container (`cpu.max`), which `helpers.device.usable_cpus()` combines.
#   Whether more threads are faster depends on the cores the process obtains while they run. To see it,
#   `torch.utils.benchmark.Timer(num_threads=n)` measures the wall time per product; the cores obtained are
#   the CPU time (`time.process_time()`) divided by the wall time; and the CPU time per product shows
#   extra CPU spent when threads spin or share a core or cache.
# - `doctor()` (or `make doctor`) checks the machine line by line. FAIL means a chapter will stop with an
#   error (a missing compiler, data out of reach, an `nvcc` of another CUDA major version on a GPU machine),
#   WARN that nothing is known to break but the setup differs from the tested one or from what you probably
#   want (an NVIDIA driver with a CPU-only torch, too many threads), INFO that nothing needs doing; the
#   verdict follows. `tests/test_device.py` tests each rule.
# - `seed_everything(seed)` makes Python, NumPy and torch draws repeat; a private `torch.Generator`
#   keeps a stream of its own.
# - torchtext is discontinued (last release built for torch 2.3); torchaudio is in maintenance, and audio and
#   video decoding now live in TorchCodec.
# - `make test` is one pytest command: nbval re-executes every stored notebook (its asserts and
#   `# NBVAL_CHECK_OUTPUT` cells are the checks), `tests/test_notebooks_run.py` runs each with its smoke
#   parameters through papermill and refuses one that did not really run, and the exercise tests prove each
#   checker passes its reference and refuses known wrong answers. CI (`.ci/run`) runs it offline from scratch.
#
# **Next**: chapter 01 creates tensors on the device picked here, and looks at
# what a tensor really is: a block of memory plus a shape, strides and a dtype.

# %%
report.finish()
