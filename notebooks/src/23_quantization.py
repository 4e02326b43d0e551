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
# # 23 · Quantisation
#
# A trained network stores its weights as 32-bit floats. Most of those bits
# are noise as far as the predictions are concerned: the same network with
# 8-bit integer weights (and often 8-bit activations) makes nearly the same
# predictions from a file about four times smaller, and on hardware with
# integer matrix instructions it can run faster. This chapter quantises three
# models the course has met: the MNIST MLP of chapter 05, an LSTM forecaster
# like chapter 08's, and the pretrained CIFAR-10 ResNet-20 of chapter 07.
#
# **What you will learn**
# - the affine mapping `q = round(x / scale) + zero_point`, symmetric vs
#   asymmetric, per-tensor vs per-channel, worked by hand and checked against
#   torchao; how the error grows as the bits shrink;
# - **dynamic** int8 quantisation of `nn.Linear` with torchao's `quantize_`,
#   and of an LSTM with the legacy `torch.ao.quantization.quantize_dynamic`;
# - **static** post-training quantisation (PTQ) with calibration, the PT2E
#   way: `torch.export`, `prepare_pt2e`, calibration batches, `convert_pt2e`;
# - **quantisation-aware training** (QAT): fake quantisation during
#   fine-tuning, compared with PTQ of the same model;
# - lowering the int8 PT2E model to oneDNN's int8 kernels with
#   `torch.compile` and Inductor's **freezing**, and what the generated code
#   calls;
# - **weight-only** int8 (and, on a CUDA GPU, int4) with torchao under
#   `torch.compile`;
# - a measured table of file size, CPU latency (eager and compiled) and
#   accuracy, and why int8 is not automatically faster.
#
# **Prerequisites:** chapters 05 (the MLP, `helpers.training`), 07 (ResNet-20
# and its normalisation), 08 (LSTMs), 16 (`torch.compile`, timing with
# `helpers.bench`) and 22 (`torch.export`).
#
# **Estimated time:** 60 minutes.

# %% tags=["parameters"]
TRAIN_IMAGES = 30000  # MNIST training images for the MLP (the first ones); None = all 60,000
MNIST_TEST_IMAGES = None  # MNIST test images to evaluate on; None = all 10,000
EPOCHS = 2  # passes of the MLP over its training images
BATCH_SIZE = 128  # images per optimizer step
LR = 1e-3  # Adam's learning rate for the MLP
LSTM_STEPS = 300  # optimizer steps of the LSTM forecaster
LSTM_HIDDEN = 64  # hidden size of the LSTM
CIFAR_TEST_IMAGES = None  # CIFAR-10 test images for the ResNet-20; None = all available
CALIBRATION_IMAGES = 256  # CIFAR-10 training images run through the observers (static PTQ)
CALIBRATION_BATCH = 64  # images per calibration batch
PITFALL_TEST_IMAGES = 250  # CIFAR-10 test images for the calibration pitfall's extra PTQ runs (the first ones)
QAT_WEIGHT_BITS = 2  # weight bits of the QAT vs PTQ comparison (int8 is too easy to show a difference)
QAT_STEPS = 100  # fine-tuning steps, with fake quantisation (QAT) and without (the PTQ baseline)
QAT_SEEDS = 3  # independent fine-tuning runs (different batches) of the QAT vs PTQ comparison
QAT_LR = 1e-4  # Adam's learning rate while fine-tuning
BENCH_BATCH = 64  # batch size of the latency measurements
MIN_RUN_TIME = 0.2  # seconds of timed runs per latency measurement (helpers.bench.measure)
COMPILE_ROUNDS = 3  # interleaved rounds of the compiled ResNet-20 and batch-1 MLP timings (a verdict needs all to agree)
COMPILE = True  # also run ResNet-20 and the weight-only MLPs under torch.compile (inductor): about 30 s of compiling on 2 cores
WO_ATOL = 0.1  # largest logit difference accepted between a compiled weight-only model and the same model in eager mode (bfloat16)
MAX_ACCURACY_DROP = 0.02  # int8 may lose at most this much accuracy (absolute) in the checks
MAX_SIZE_RATIO = 0.4  # an int8 file must be smaller than this fraction of the float32 file
MAX_LSTM_MSE_RATIO = 1.5  # the int8 LSTM's test MSE may be at most this many times the float one
MAX_QAT_DROP = 0.01  # QAT at QAT_WEIGHT_BITS may lose at most this much accuracy vs the fine-tuned float32 MLP, in any seed (loose)
MIN_QAT_GAIN = 0.0  # the mean over the seeds of QAT - PTQ accuracy at QAT_WEIGHT_BITS must exceed this
MAX_QAT_P = 0.01  # largest one-sided p-value accepted for "QAT gets more images right than PTQ" (paired sign test)
SEED = 0

# %% [markdown]
# ## Setup
#
# torchao is PyTorch's library for quantisation and other low-precision
# work; it replaces `torch.ao.quantization`. Importing it makes
# `torch.utils._pytree` log a warning about `register_constant()` on Enum
# subclasses (torchao 0.18 with torch 2.14; harmless). It goes to stderr, so
# we catch it and print it once, and keep that logger quiet afterwards
# because parts of torchao imported later log the same line. The last line
# of the output lists this CPU's int8 and bfloat16 instruction sets and its
# caches, which the timing sections below refer to.

# %%
import contextlib
import copy
import io
import logging
import math
import os
import re
import time
import warnings
from collections import Counter
from pathlib import Path

import matplotlib.pyplot as plt
import torch
import torch._inductor.config
import torch.nn.functional as F
from torch import nn
from torch._inductor.utils import run_and_get_code
from torch.utils.data import DataLoader, TensorDataset

from helpers.bench import measure
from helpers.data import cifar10, mnist
from helpers.device import pick_device, seed_everything
from helpers.exercises import check, solution  # noqa: F401  (solution: for when you are stuck)
from helpers.models import (
    MLP,
    RESNET_CIFAR_MEAN,
    RESNET_CIFAR_STD,
    RNNForecaster,
    load_resnet_cifar,
)
from helpers.paths import build_dir, rel
from helpers.report import ChapterReport
from helpers.training import evaluate, fit


class KeepRecords(logging.Handler):
    """A logging handler that keeps the records in a list instead of printing them."""

    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


pytree_log = logging.getLogger("torch.utils._pytree")
kept = KeepRecords()
pytree_log.addHandler(kept)
pytree_log.propagate = False  # while importing: to our list, not to stderr
captured = io.StringIO()
with contextlib.redirect_stderr(captured):  # and anything else printed to stderr meanwhile
    import torchao
    from torchao.quantization import (
        Int4WeightOnlyConfig,
        Int8DynamicActivationInt8WeightConfig,
        Int8DynamicActivationIntxWeightConfig,
        Int8WeightOnlyConfig,
        MappingType,
        PerAxis,
        quantize_,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )
    from torchao.quantization.qat import QATConfig
    from torchao.quantization.quant_primitives import (
        choose_qparams_affine,
        dequantize_affine,
        quantize_affine,
    )
pytree_log.removeHandler(kept)
pytree_log.propagate = True
pytree_log.setLevel(logging.ERROR)  # parts of torchao imported later log the same line: keep it quiet
for record in kept.records[:1]:
    print(f"logged while importing torchao ({record.levelname}, {record.name}): {record.getMessage()[:100]}...")
if captured.getvalue():
    print("also printed to stderr while importing:", captured.getvalue().strip()[:200])

torch._inductor.config.compile_threads = 1  # compile in this process: no worker pool on a 2-core machine
generator = seed_everything(SEED)
device = pick_device()
report = ChapterReport("23_quantization")
notebook_start = time.perf_counter()
out_dir = build_dir() / "23_quantization"
out_dir.mkdir(parents=True, exist_ok=True)
print(f"torch {torch.__version__}, torchao {torchao.__version__}, device {device}, {torch.get_num_threads()} CPU threads")
print("everything below runs on the CPU (the int8 kernels compared are CPU kernels), "
      f"except the weight-only section, which runs on {device}")


def cpu_features():
    """Which int8 and bfloat16 instruction sets /proc/cpuinfo lists ({name: bool}), and core 0's data cache size
    per level from /sys ({"L2": "1024K", ...}); empty dicts where they cannot be read (not Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
        features = {name: name in flags for name in ("avx512_vnni", "avx_vnni", "amx_int8", "avx512_bf16", "amx_bf16")}
    except OSError:
        features = {}
    caches = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        with contextlib.suppress(OSError):
            level, kind, size = ((index / n).read_text().strip() for n in ("level", "type", "size"))
            if kind != "Instruction":
                caches[f"L{level}"] = size
    return features, caches


cpu_flags, cpu_caches = cpu_features()
has_vnni = cpu_flags.get("avx512_vnni", False) or cpu_flags.get("avx_vnni", False) or cpu_flags.get("amx_int8", False)
has_native_bf16 = cpu_flags.get("avx512_bf16", False) or cpu_flags.get("amx_bf16", False)
print(f"CPU: PyTorch's kernels use {torch.backends.cpu.get_cpu_capability()}; instruction sets in /proc/cpuinfo: "
      + (", ".join(f"{k} {'yes' if v else 'no'}" for k, v in cpu_flags.items()) or "not readable here")
      + "; caches of core 0: " + (", ".join(f"{k} {v}" for k, v in cpu_caches.items()) or "not readable here"))

# %% [markdown]
# ## What quantisation is
#
# **Affine quantisation** maps a float `x` to an integer `q` with two numbers,
# a **scale** (a positive float: how much one integer step is worth) and a
# **zero point** (the integer that stands for 0.0):
#
# ```
# q = clamp(round(x / scale) + zero_point, qmin, qmax)      quantise
# x̂ = (q - zero_point) * scale                               dequantise
# ```
#
# For int8, `[qmin, qmax] = [-128, 127]`. The scale and zero point are chosen
# so that the range of the data `[lo, hi]` fills the integer range:
#
# - **asymmetric**: `scale = (hi - lo) / (qmax - qmin)` and
#   `zero_point = qmin - round(lo / scale)`, so `lo` lands on `qmin` and `hi`
#   on `qmax`. Good for data that is not centred, like ReLU outputs (all
#   ≥ 0). The range is first widened to include 0, so that 0.0 (padding,
#   the zeros of a ReLU) is represented exactly.
# - **symmetric**: `zero_point = 0` and `scale = max|x| / ((qmax - qmin) / 2)`.
#   Half the integer range is wasted on data that is all positive, but the
#   integer arithmetic is simpler (no zero-point terms), which is why weights
#   are usually quantised symmetrically.
#
# A worked example, by hand, for five numbers and int8 asymmetric:
# `lo = -0.6`, `hi = 1.9`, so `scale = 2.5 / 255 ≈ 0.0098` and
# `zero_point = -128 - round(-0.6 / 0.0098) = -128 - round(-61.2) = -67`.
# Then `0.3` becomes `round(30.6) - 67 = -36`, and comes back as
# `(-36 + 67) * 0.0098 ≈ 0.304`: the error is at most half a step.

# %%
# NBVAL_CHECK_OUTPUT
x = torch.tensor([-0.6, 0.0, 0.3, 1.0, 1.9])
qmin, qmax = -128, 127
lo, hi = min(x.min().item(), 0.0), max(x.max().item(), 0.0)
scale = (hi - lo) / (qmax - qmin)
zero_point = qmin - round(lo / scale)
q_by_hand = [max(qmin, min(qmax, round(v / scale) + zero_point)) for v in x.tolist()]
x_back = [(qi - zero_point) * scale for qi in q_by_hand]
print(f"scale = {scale:.6f}, zero_point = {zero_point}")
print("x        ", [round(v, 4) for v in x.tolist()])
print("q        ", q_by_hand)
print("x back   ", [round(v, 4) for v in x_back])
print(f"max error {max(abs(a - b) for a, b in zip(x.tolist(), x_back)):.5f} <= scale / 2 = {scale / 2:.5f}")

# %% [markdown]
# torchao's primitives do the same. `block_size` says which elements share
# one scale: the whole tensor's shape means one scale for the tensor
# (**per-tensor**); `(1, n)` for a weight `[out, n]` means one per row
# (**per-channel**).

# %%
# NBVAL_CHECK_OUTPUT
ao_scale, ao_zp = choose_qparams_affine(x, MappingType.ASYMMETRIC, x.shape, torch.int8)
ao_q = quantize_affine(x, x.shape, ao_scale, ao_zp, torch.int8)
print(f"torchao: scale = {ao_scale.item():.6f}, zero_point = {ao_zp.item()}, q = {ao_q.tolist()} ({ao_q.dtype})")
assert math.isclose(ao_scale.item(), scale, rel_tol=1e-6) and ao_zp.item() == zero_point, "scale/zero point differ from torchao"
assert ao_q.tolist() == q_by_hand, "the hand-computed integers differ from torchao's quantize_affine"
print("the hand computation matches torchao")

# %% [markdown]
# ### Per-tensor vs per-channel, and how the error grows with fewer bits
#
# A weight matrix has one row per output channel, and the rows can have very
# different ranges. With one scale for the whole tensor, the channel with the
# largest weights sets the step size, and the channels with small weights
# get only a few integer levels. Per-channel quantisation gives each output
# channel its own scale. It costs one float per channel, nothing for a
# layer with thousands of weights per channel.
#
# Here is a real weight, the first convolution of the pretrained ResNet-20
# of chapter 07 (`[16, 3, 3, 3]`), quantised with 2 to 8 bits, per-tensor
# (symmetric and asymmetric) and per-channel (symmetric). The error is the
# root-mean-square difference relative to the weights' own RMS.

# %%
resnet_float = load_resnet_cifar(20)
weight = resnet_float.conv1.weight.detach()


def relative_error(w, bits, mapping, per_channel):
    """RMS(w - dequantize(quantize(w))) / RMS(w) for signed `bits`-bit integers."""
    block = (1, *w.shape[1:]) if per_channel else tuple(w.shape)
    lo_q, hi_q = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    s, zp = choose_qparams_affine(w, mapping, block, torch.int8, quant_min=lo_q, quant_max=hi_q)
    q = quantize_affine(w, block, s, zp, torch.int8, quant_min=lo_q, quant_max=hi_q)
    w_hat = dequantize_affine(q, block, s, zp, torch.int8, quant_min=lo_q, quant_max=hi_q)
    return ((w - w_hat).pow(2).mean().sqrt() / w.pow(2).mean().sqrt()).item()


bit_range = list(range(2, 9))
schemes = {
    "per-tensor, asymmetric": (MappingType.ASYMMETRIC, False),
    "per-tensor, symmetric": (MappingType.SYMMETRIC, False),
    "per-channel, symmetric": (MappingType.SYMMETRIC, True),
}
errors = {name: [relative_error(weight, b, m, pc) for b in bit_range] for name, (m, pc) in schemes.items()}

fig, axes = plt.subplots(1, 2, figsize=(9, 3))
for name, errs in errors.items():
    axes[0].semilogy(bit_range, errs, marker="o", label=name)
axes[0].set(xlabel="bits", ylabel="relative RMS error", title="conv1 of ResNet-20: error vs bits")
axes[0].legend(fontsize=8)
axes[1].bar(range(weight.shape[0]), weight.abs().flatten(1).amax(dim=1))
axes[1].set(xlabel="output channel", ylabel="max |w|", title="each channel's range")
fig.tight_layout()
plt.show()
for name, errs in errors.items():
    print(f"{name:24s} 8 bits: {errs[-1]:.4f}   4 bits: {errs[2]:.3f}")
channel_ranges = weight.abs().flatten(1).amax(dim=1)
range_spread = (channel_ranges.max() / channel_ranges.min()).item()
per_bit = (errors["per-channel, symmetric"][2] / errors["per-channel, symmetric"][-1]) ** (1 / 4)
gains = [t / c for t, c in zip(errors["per-tensor, symmetric"], errors["per-channel, symmetric"])]
print(f"largest / smallest channel range: {range_spread:.1f}; per-channel error falls {per_bit:.2f}x per bit from 4 to 8 bits")
print("per-tensor / per-channel error (symmetric), 2..8 bits:", [round(g, 2) for g in gains])

# %% [markdown]
# Each bit halves the step, so the error falls by about half per bit (a
# straight line on the log scale; the factor per bit is printed above). The
# channels' ranges differ by a factor of more than ten, and per-channel
# scales make the error smaller at every bit width, by the factors printed:
# less than two for this small layer, because its largest channels hold
# most of the weight energy. At 8 bits the error is about 1% even per
# tensor; at 2 to 4 bits the choices matter.

# %%
per_tensor_8 = errors["per-tensor, symmetric"][-1]
per_channel_8 = errors["per-channel, symmetric"][-1]
assert all(g > 1 for g in gains), f"per-channel scales should give a smaller error at every bit width: {gains}"
assert all(g < 2 for g in gains), f"the prose says per-channel gains less than two here: {gains}"
assert range_spread > 10, f"the channels' ranges differ by only {range_spread:.1f}x, not more than ten"
assert 1.6 < per_bit < 2.5, f"each bit should roughly halve the error; it fell {per_bit:.2f}x per bit"
assert per_tensor_8 < 0.02, f"8-bit per-tensor error {per_tensor_8:.4f} is not about 1%"
assert all(a > b for a, b in zip(errors["per-channel, symmetric"], errors["per-channel, symmetric"][1:])), (
    "the error should shrink with every extra bit"
)
_ = report.record("conv1 int8 error, per-tensor / per-channel", round(per_tensor_8 / per_channel_8, 2), "x")

# %% [markdown]
# ## Dynamic quantisation of an MLP
#
# **Dynamic** quantisation stores the weights as int8 ahead of time and
# quantises each batch of activations on the fly, with a scale computed from
# that batch (here per row, "per token"). Nothing needs to be known about
# the activations in advance, so there is no calibration step: it is the
# easiest method, and it suits models whose time goes into `nn.Linear` (MLPs,
# transformers, LSTMs).
#
# First the model: chapter 05's MLP (784 → 512 → 256 → 10), trained briefly
# on MNIST.

# %%
train_raw, test_raw = mnist(train=True), mnist(train=False)


def mnist_tensors(raw, limit):
    """The first `limit` images as normalised float [N, 1, 28, 28] (chapter 05's constants) and labels."""
    images = raw.data[:limit].float().div(255).sub(0.1307).div(0.3081).unsqueeze(1)
    return images, raw.targets[:limit]


mnist_x, mnist_y = mnist_tensors(train_raw, TRAIN_IMAGES)
mnist_test_x, mnist_test_y = mnist_tensors(test_raw, MNIST_TEST_IMAGES)
train_loader = DataLoader(TensorDataset(mnist_x, mnist_y), batch_size=BATCH_SIZE, shuffle=True, generator=generator)
test_loader = DataLoader(TensorDataset(mnist_test_x, mnist_test_y), batch_size=1000)

mlp = MLP()
history = fit(mlp, train_loader, test_loader, torch.optim.Adam(mlp.parameters(), lr=LR), epochs=EPOCHS)
mlp.eval()


def mnist_accuracy(model):
    return evaluate(model, test_loader)[1]


mlp_float_acc = mnist_accuracy(mlp)
print(f"float32 MLP: test accuracy {mlp_float_acc:.2%} on {len(mnist_test_y):,} images")

# %% [markdown]
# torchao's entry point is `quantize_(model, config)`: it walks the model
# and replaces, **in place**, the weight of every `nn.Linear` by a tensor
# subclass that holds int8 data and scales. The config chooses the recipe;
# `Int8DynamicActivationInt8WeightConfig` is int8 weights (symmetric, per
# output channel) and int8 activations quantised per row at run time. The
# model is still an `nn.Module` with `nn.Linear` layers; only the weights'
# type changed.

# %%
mlp_dynamic = copy.deepcopy(mlp)
quantize_(mlp_dynamic, Int8DynamicActivationInt8WeightConfig())
print(mlp_dynamic.net[1])
print("weight type:", type(mlp_dynamic.net[1].weight).__name__, "| int8 data:", mlp_dynamic.net[1].weight.qdata.dtype,
      tuple(mlp_dynamic.net[1].weight.qdata.shape), "| scales:", tuple(mlp_dynamic.net[1].weight.scale.shape))
mlp_dynamic_acc = mnist_accuracy(mlp_dynamic)
with torch.no_grad():
    probe = mnist_test_x[:256]
    max_logit_diff = (mlp_dynamic(probe) - mlp(probe)).abs().max().item()
print(f"int8 dynamic MLP: test accuracy {mlp_dynamic_acc:.2%} (float32 {mlp_float_acc:.2%}); "
      f"largest logit difference on 256 images {max_logit_diff:.3f}")

# %% [markdown]
# ### Size on disk and latency
#
# The size that matters is the file you ship: we `torch.save` each
# `state_dict` into `build/` and read its size. Latency is measured with
# `helpers.bench.measure` on one batch of `BENCH_BATCH` images, inside
# `torch.inference_mode()`.

# %%
def file_size(model, name):
    """Bytes of torch.save(model.state_dict()) written to build/23_quantization/<name>.pt."""
    path = out_dir / f"{name}.pt"
    torch.save(model.state_dict(), path)
    return os.path.getsize(path)


def latency(model, example, label):
    with torch.inference_mode():
        return measure(lambda: model(example), label=label, min_run_time=MIN_RUN_TIME)


def slower_or_faster(base, other, base_name):
    """'slower than' / 'faster than' `base_name` when `other`'s median lies beyond `base`'s median by more than
    the two IQRs together; otherwise 'no clear difference from' it."""
    margin = base.iqr_s + other.iqr_s
    if other.median_s > base.median_s + margin:
        return f"slower than {base_name}"
    if other.median_s < base.median_s - margin:
        return f"faster than {base_name}"
    return f"no clear difference from {base_name} (the medians differ by less than the two IQRs together)"


rows = []  # the summary table at the end: one dict per model and method
mnist_bench = mnist_test_x[:BENCH_BATCH]
mlp_float_bytes = file_size(mlp, "mlp_float32")
mlp_float_time = latency(mlp, mnist_bench, "MLP float32")
rows.append(dict(model="MLP", method="float32", bytes=mlp_float_bytes, timing=mlp_float_time, metric=mlp_float_acc))
mlp_dynamic_bytes = file_size(mlp_dynamic, "mlp_int8_dynamic_torchao")
mlp_dynamic_time = latency(mlp_dynamic, mnist_bench, "MLP int8 dynamic (torchao)")
rows.append(dict(model="MLP", method="int8 dynamic, torchao", bytes=mlp_dynamic_bytes, timing=mlp_dynamic_time,
                 metric=mlp_dynamic_acc))
print(f"file: {mlp_float_bytes / 1e3:,.0f} kB -> {mlp_dynamic_bytes / 1e3:,.0f} kB "
      f"({mlp_dynamic_bytes / mlp_float_bytes:.2f}x), e.g. {rel(out_dir / 'mlp_int8_dynamic_torchao.pt')}")
print(mlp_float_time)
print(mlp_dynamic_time)
print(f"here, in eager mode, torchao's int8 MLP takes {mlp_dynamic_time.median_s / mlp_float_time.median_s:.2f}x the "
      f"float32 time: {slower_or_faster(mlp_float_time, mlp_dynamic_time, 'float32')}")

# %% [markdown]
# The file is about a quarter of the size: one byte per weight instead of
# four, plus one float scale per output channel. The accuracy barely moves.
# Now the two timings (the last line above compares them, with their IQRs):
# in eager mode torchao's int8 model is often *slower* than float32 on a
# CPU. Where that happens it is not a measuring mistake, and the integer
# product itself is not the culprit: on a CPU torchao's int8 linear does call an int8 matrix
# kernel, `torch._int_mm` (oneDNN's; on CPUs with AVX512-VNNI but no AMX it
# first shifts the activations to uint8 to use VNNI, see
# `_int_scaled_matmul_cpu` in `torchao/kernel/intmm.py`). Around that one
# kernel, eager mode runs several others, each a full pass over memory:
# finding each row's scale, quantising the activations, correcting and
# converting the int32 result, rescaling it; plus the Python dispatch of a
# tensor subclass on every call. For matrices this small that overhead
# outweighs what the int8 product saves; `torch.compile` can fuse those
# steps. Whether int8 is faster depends on three things:
#
# - **kernels**: an int8 matrix multiply that really uses 8-bit arithmetic
#   (fbgemm and oneDNN on x86, cuBLAS/CUTLASS on NVIDIA GPUs);
# - **hardware**: x86 CPUs with VNNI (AVX512-VNNI or AVX-VNNI) or AMX do
#   int8 dot products at two to four times the float rate; older CPUs do not;
# - **batch size and layer size**: with small layers or small batches the
#   time goes into overhead (quantising activations, launching kernels),
#   not into arithmetic. int8 weights help most where the model is limited
#   by memory bandwidth, such as generating text one token at a time with a
#   large model.
#
# The legacy eager-mode path of the next section calls fbgemm's int8
# kernels with the activation quantisation fused in, so its timing is the
# one to compare with float32.

# %% [markdown]
# ## The legacy path: `torch.ao.quantization`, and an LSTM
#
# Before torchao, PyTorch's quantisation lived in `torch.ao.quantization`:
# eager-mode quantisation (`quantize_dynamic`, `prepare`/`convert` with
# `QuantStub`s) and FX-graph-mode quantisation (`prepare_fx`/`convert_fx`).
# It is **deprecated** and being removed in favour of torchao (its warning,
# below, even names a release that has passed; in torch 2.14 it still
# works). New code should use torchao. There is one thing torchao does not
# cover: it has no LSTM path. `quantize_dynamic` has int8 versions of
# `nn.LSTM` and `nn.GRU`, so for a recurrent model the legacy path is still
# what there is.
#
# The model: chapter 08's task, forecasting the next value of a noisy sine
# wave from the previous 30 values, with `helpers.models.RNNForecaster`.

# %%
def sine_windows(n_series, gen, length=200, window=30, noise=0.1):
    """Windows [N, window, 1] of noisy sine waves and the value after each [N, 1] (chapter 08's data)."""
    freq = torch.empty(n_series, 1).uniform_(0.02, 0.08, generator=gen)
    phase = torch.empty(n_series, 1).uniform_(0, 2 * math.pi, generator=gen)
    series = torch.sin(2 * math.pi * freq * torch.arange(length) + phase) + noise * torch.randn(n_series, length, generator=gen)
    w = series.unfold(1, window + 1, 1).reshape(-1, window + 1)
    return w[:, :window].unsqueeze(-1), w[:, window:]


sine_gen = torch.Generator().manual_seed(SEED)
sine_x, sine_y = sine_windows(200, sine_gen)
sine_test_x, sine_test_y = sine_windows(30, sine_gen)
lstm = RNNForecaster("lstm", hidden_size=LSTM_HIDDEN)
optimizer = torch.optim.Adam(lstm.parameters(), lr=1e-2)
for _ in range(LSTM_STEPS):
    idx = torch.randint(len(sine_x), (64,), generator=sine_gen)
    loss = F.mse_loss(lstm(sine_x[idx]), sine_y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
lstm.eval()


@torch.no_grad()
def sine_mse(model):
    return F.mse_loss(model(sine_test_x), sine_test_y).item()


lstm_float_mse = sine_mse(lstm)
print(f"LSTM forecaster after {LSTM_STEPS} steps: test MSE {lstm_float_mse:.4f} "
      f"(the noise alone gives about {0.1**2:.4f}; predicting the last value gives "
      f"{F.mse_loss(sine_test_x[:, -1], sine_test_y).item():.4f})")

# %% [markdown]
# `quantize_dynamic(model, {types}, dtype=torch.qint8)` returns a new model
# in which every module of the listed types is swapped for its dynamically
# quantised version. We quantise the LSTM forecaster, and, for comparison
# with torchao, the MLP as well. The deprecation warnings are caught and
# each different one is printed once:

# %%
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    lstm_dynamic = torch.ao.quantization.quantize_dynamic(lstm, {nn.LSTM, nn.Linear}, dtype=torch.qint8)
    mlp_legacy = torch.ao.quantization.quantize_dynamic(mlp, {nn.Linear}, dtype=torch.qint8)
    lstm_dynamic_mse = sine_mse(lstm_dynamic)
    mlp_legacy_acc = mnist_accuracy(mlp_legacy)
seen = set()
for w in caught:
    first_sentence = str(w.message).strip().split(". ")[0].rstrip(".") + "."
    if first_sentence not in seen:
        seen.add(first_sentence)
        print(f"{w.category.__name__}: {first_sentence}")
print(f"{len(caught)} warnings in all, {len(seen)} different ones")
print(lstm_dynamic)

# %% [markdown]
# Two different warnings: `torch.ao.quantization` itself is deprecated, and
# so are the quantized tensor dtypes (`torch.qint8`, `torch.quint8`) it is
# built on. Now the measurements:

# %%
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the same deprecation warnings again, shown above
    lstm_float_bytes = file_size(lstm, "lstm_float32")
    lstm_dynamic_bytes = file_size(lstm_dynamic, "lstm_int8_dynamic_legacy")
    lstm_float_time = latency(lstm, sine_test_x[:BENCH_BATCH], "LSTM float32")
    lstm_dynamic_time = latency(lstm_dynamic, sine_test_x[:BENCH_BATCH], "LSTM int8 dynamic (legacy)")
    mlp_legacy_bytes = file_size(mlp_legacy, "mlp_int8_dynamic_legacy")
    mlp_legacy_time = latency(mlp_legacy, mnist_bench, "MLP int8 dynamic (legacy)")
rows.append(dict(model="MLP", method="int8 dynamic, legacy torch.ao", bytes=mlp_legacy_bytes,
                 timing=mlp_legacy_time, metric=mlp_legacy_acc))
rows.append(dict(model="LSTM", method="float32", bytes=lstm_float_bytes, timing=lstm_float_time, metric=lstm_float_mse))
rows.append(dict(model="LSTM", method="int8 dynamic, legacy torch.ao", bytes=lstm_dynamic_bytes,
                 timing=lstm_dynamic_time, metric=lstm_dynamic_mse))
print(f"LSTM: test MSE {lstm_float_mse:.5f} -> {lstm_dynamic_mse:.5f}, file {lstm_float_bytes / 1e3:.0f} kB -> "
      f"{lstm_dynamic_bytes / 1e3:.0f} kB ({lstm_dynamic_bytes / lstm_float_bytes:.2f}x)")
print(f"MLP (legacy): accuracy {mlp_legacy_acc:.2%}, file {mlp_legacy_bytes / mlp_float_bytes:.2f}x of float32")
for t in (lstm_float_time, lstm_dynamic_time, mlp_float_time, mlp_legacy_time):
    print(t)

# %% [markdown]
# The legacy MLP calls fbgemm's int8 matrix multiply, so its latency tells
# you what one fused int8 kernel per layer does on this particular CPU:
# compare it with torchao's eager line and with float32 above; the order
# depends on the CPU's int8 instructions and the layer sizes. Timings of a
# millisecond or so are noisy on a shared machine, so read the medians and
# their IQRs together, and rerun the cell before trusting a small
# difference. The LSTM's time goes into the step-by-step
# recurrence over 30 time steps of small matrices, where per-step overhead
# is a large part of the cost.

# %% [markdown]
# ## Static post-training quantisation of ResNet-20 (PT2E)
#
# **Static** quantisation also runs the *activations* in int8, with scales
# fixed ahead of time. Those scales need the range of every activation, so
# we run some real inputs through the model first and record the ranges:
# **calibration**. No training, no labels: a few hundred images are enough.
# For convolutional networks this is the method of choice: their time goes
# into convolutions, and dynamic quantisation does not cover them.
#
# The current PyTorch way is **PT2E** (PyTorch 2 export quantisation), in
# `torchao.quantization.pt2e`:
#
# 1. `torch.export.export(model, example_inputs)` captures the model as a
#    graph (in `eval()` mode: `load_resnet_cifar` returns it that way);
# 2. `prepare_pt2e(graph, quantizer)` inserts **observers** where the
#    quantizer says int8 should go. `X86InductorQuantizer` describes what
#    the x86 int8 kernels support: per-channel symmetric weights, per-tensor
#    asymmetric activations, with BatchNorm folded into the convolutions;
# 3. calibration: run batches through the prepared model;
# 4. `convert_pt2e` replaces the observers by quantise/dequantise pairs with
#    the recorded scales, and stores the weights as int8.
#
# The inputs are normalised with the constants the weights were trained
# with (chapter 07).

# %%
cifar_test_raw, which = cifar10(train=False)
cifar_train_raw, _ = cifar10(train=True)
report.record("CIFAR-10 data in use", which)


def cifar_tensors(raw, limit):
    """The first `limit` images as float [N, 3, 32, 32], normalised for the pretrained ResNet."""
    images = torch.from_numpy(raw.data[:limit]).permute(0, 3, 1, 2).float().div(255)
    mean, std = torch.tensor(RESNET_CIFAR_MEAN).view(1, 3, 1, 1), torch.tensor(RESNET_CIFAR_STD).view(1, 3, 1, 1)
    return (images - mean) / std, torch.tensor(raw.targets[:limit])


cifar_x, cifar_y = cifar_tensors(cifar_test_raw, CIFAR_TEST_IMAGES)
calibration_x, _ = cifar_tensors(cifar_train_raw, CALIBRATION_IMAGES)  # training images, never the test set


@torch.no_grad()
def cifar_accuracy(model, limit=None):
    """Accuracy on the first `limit` test images (all of them when None), in batches of 250."""
    images, labels = cifar_x[:limit], cifar_y[:limit]
    logits = torch.cat([model(images[i : i + 250]) for i in range(0, len(images), 250)])
    return (logits.argmax(dim=1) == labels).float().mean().item()


resnet_float_acc = cifar_accuracy(resnet_float)
print(f"CIFAR-10 ({which}): {len(cifar_y):,} test images; ResNet-20 float32 accuracy {resnet_float_acc:.2%}")

# %% [markdown]
# The exported graph has a fixed batch size unless we say otherwise;
# `dynamic_shapes` marks dimension 0 as a batch dimension so that the
# quantised model accepts any batch size.


# %%
def static_ptq(model, calibration_batches):
    """Export `model`, insert x86 observers, run the calibration batches, convert to int8."""
    batch = torch.export.Dim("batch", min=1, max=1024)
    exported = torch.export.export(model, (calibration_x[:2],), dynamic_shapes=({0: batch},)).module()
    quantizer = X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(exported, quantizer)
    with torch.no_grad():
        for images in calibration_batches:
            prepared(images)
    return convert_pt2e(prepared)


calibration_batches = list(calibration_x.split(CALIBRATION_BATCH))
start = time.perf_counter()
resnet_int8 = static_ptq(resnet_float, calibration_batches)
ptq_seconds = time.perf_counter() - start
resnet_int8_acc = cifar_accuracy(resnet_int8)
print(f"export + prepare + calibrate on {len(calibration_x)} images ({len(calibration_batches)} batches) + convert: "
      f"{ptq_seconds:.1f} s")
print(f"ResNet-20 accuracy: float32 {resnet_float_acc:.2%}, int8 static {resnet_int8_acc:.2%}")
n_quant = sum("quantize_per_tensor" in str(n.target) for n in resnet_int8.graph.nodes)
n_weights = sum(v.dtype == torch.int8 for v in resnet_int8.state_dict().values())
print(f"the converted graph: {n_quant} activation quantise/dequantise ops, {n_weights} int8 weight tensors")
n_bn_modules = sum(isinstance(m, nn.BatchNorm2d) for m in resnet_float.modules())
n_bn_ops = sum("batch_norm" in str(n.target) for n in resnet_int8.graph.nodes)
print(f"BatchNorm: {n_bn_modules} BatchNorm2d layers in the float32 model, {n_bn_ops} batch_norm ops in the converted "
      "graph (folded into the convolutions' weights and biases)")
assert n_bn_modules > 0 and n_bn_ops == 0, "prepare_pt2e should have folded every BatchNorm into its convolution"

# %% [markdown]
# The accuracy stays within `MAX_ACCURACY_DROP` (checked below; the two
# numbers are printed above). What does the converted
# model look like? A graph in which each convolution's input goes through
# `quantize_per_tensor` → `dequantize_per_tensor`, and its weight is an int8
# constant with per-channel scales that is dequantised before a float
# convolution. This **reference representation** computes exactly what the
# int8 model computes, but in float. It is not the float model plus extra
# ops: `prepare_pt2e` folded every BatchNorm into the convolution before it
# (the line above counts them), so run eagerly the reference graph does
# *less* float work than the float32 model (no BatchNorm passes) and more
# small ops (the quantise and dequantise pairs). Which of the two wins in
# eager mode depends on the machine (a line below the timings says which
# did here), and neither says anything about int8 arithmetic, which the
# reference graph never does. The int8 kernels come in when a
# backend lowers each pattern `dequantize → conv → quantize` to a single
# int8 convolution. For x86 that backend is Inductor, through
# `torch.compile`, with one setting that is easy to miss:
# **freezing**, `torch._inductor.config.freezing = True` (or the environment
# variable `TORCHINDUCTOR_FREEZING=1`; off by default). The int8 rewrites
# that torchao registers for Inductor (`torchao/quantization/pt2e/inductor_passes/x86.py`)
# are *freezing* passes: they treat the weights as constants, so that a
# weight can be repacked once for oneDNN's int8 convolution. Without
# freezing, Inductor compiles the reference graph as it is: a float
# convolution surrounded by quantise and dequantise kernels. Other backends
# (ExecuTorch for phones, for instance) do their own lowering.
#
# We time four versions at one batch of `BENCH_BATCH` images: float32 and
# int8, each in eager mode and compiled with freezing. The two compiled
# models decide the verdict, so they are timed in `COMPILE_ROUNDS`
# interleaved rounds (float32 then int8, then int8 then float32, ...), and
# a verdict is printed only when every round agrees. To show *what* was
# compiled, `torch._inductor.utils.run_and_get_code` runs the first call and
# returns the code Inductor generated; we count the operators it calls
# (call sites only: a name followed by `(`).
# The compiled models are also evaluated on the whole test set, in batches of
# `BENCH_BATCH` (the last one padded) so that they never see a new shape and
# never recompile.

# %%
cifar_bench = cifar_x[:BENCH_BATCH]
resnet_float_time = latency(resnet_float, cifar_bench, "ResNet-20 float32, eager")
resnet_int8_time = latency(resnet_int8, cifar_bench, "ResNet-20 int8 PT2E, eager")


@torch.inference_mode()
def cifar_accuracy_fixed_batch(model):
    """Accuracy on the whole test set in batches of exactly BENCH_BATCH (the last one zero-padded)."""
    correct = 0
    for i in range(0, len(cifar_x), BENCH_BATCH):
        images = cifar_x[i : i + BENCH_BATCH]
        padded = torch.cat([images, images.new_zeros(BENCH_BATCH - len(images), *images.shape[1:])])
        correct += (model(padded)[: len(images)].argmax(dim=1) == cifar_y[i : i + BENCH_BATCH]).sum().item()
    return correct / len(cifar_x)


@contextlib.contextmanager
def frozen_compiling():
    """Inductor's freezing on, its console log lines off, and warnings collected in the yielded list.
    Everything that calls a compiled model runs inside it: a recompile outside would warn on stderr."""
    logging.disable(logging.WARNING)
    try:
        with torch._inductor.config.patch(freezing=True), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield caught
    finally:
        logging.disable(logging.NOTSET)


def compile_and_list_ops(model, example):
    """torch.compile `model` and run it once on `example` (the compile happens here); return
    (compiled model, seconds for that first call, Counter of the operators the generated code calls)."""
    compiled = torch.compile(model)
    start = time.perf_counter()
    with torch.inference_mode():
        _, codes = run_and_get_code(compiled, example)
    seconds = time.perf_counter() - start
    calls = re.findall(r"torch\.ops\.(\w+\.\w+)(?:\.\w+)?\(|extern_kernels\.(\w+)\(", "\n".join(codes))
    return compiled, seconds, Counter(namespaced or extern for namespaced, extern in calls)


compiled_resnets = {}  # name -> (Timing of the median round, accuracy, Counter of operator calls)
if COMPILE:
    compiled_models, compiled_rounds = {}, {}
    with frozen_compiling() as caught:
        for name, model in (("float32", resnet_float), ("int8 static PT2E", resnet_int8)):
            compiled_models[name], seconds, ops = compile_and_list_ops(model, cifar_bench)
            compiled_resnets[name] = (None, cifar_accuracy_fixed_batch(compiled_models[name]), ops)
            compiled_rounds[name] = []
            print(f"{name}: first call (compiling) {seconds:.0f} s; the generated code calls {dict(ops)}")
        for r in range(COMPILE_ROUNDS):
            for name in (list(compiled_models) if r % 2 == 0 else list(compiled_models)[::-1]):
                compiled_rounds[name].append(latency(compiled_models[name], cifar_bench, f"ResNet-20 {name}, compiled"))
    for message in sorted({f"{w.category.__name__}: {str(w.message)[:90]}" for w in caught}):
        print("   warned while compiling:", message)
    for name, ts in compiled_rounds.items():
        median_round = sorted(ts, key=lambda t: t.median_s)[len(ts) // 2]
        compiled_resnets[name] = (median_round, *compiled_resnets[name][1:])
else:
    print("COMPILE = False: skipping torch.compile (tens of seconds of compiling on 2 CPU cores; set it to True)")
print(resnet_float_time)
print(resnet_int8_time)
print(f"eager: the int8 reference graph takes {resnet_int8_time.median_s / resnet_float_time.median_s:.2f}x the time of "
      f"the float32 model: {slower_or_faster(resnet_float_time, resnet_int8_time, 'float32')} (it has no BatchNorm, "
      f"but {n_quant} quantise/dequantise ops, and float convolutions)")
if COMPILE:
    for r in range(COMPILE_ROUNDS):
        print(f"round {r + 1}:", "; ".join(str(ts[r]) for ts in compiled_rounds.values()))
    pairs = list(zip(compiled_rounds["float32"], compiled_rounds["int8 static PT2E"]))
    ratios = [i.median_s / f.median_s for f, i in pairs]
    words = {slower_or_faster(f, i, "float32").split(" (")[0] for f, i in pairs}  # beyond both IQRs, round by round
    float_c, int8_c = compiled_resnets["float32"][0], compiled_resnets["int8 static PT2E"][0]
    if words == {"faster than float32"}:
        compiled_verdict = "faster in every round (by more than the two IQRs)"
    elif words == {"slower than float32"}:
        compiled_verdict = "NOT faster: slower in every round (by more than the two IQRs)"
    else:
        compiled_verdict = "no verdict (the rounds disagree, or differ by less than their IQRs)"
    print(f"int8 compiled / float32 compiled, round by round: {', '.join(f'{q:.2f}x' for q in ratios)} -> int8 "
          f"{compiled_verdict} on this CPU ({torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} "
          f"threads, batch {BENCH_BATCH}); median rounds: float32 {float_c.median_ms:.1f} ms (IQR "
          f"{float_c.iqr_s * 1e3:.1f} ms), int8 {int8_c.median_ms:.1f} ms (IQR {int8_c.iqr_s * 1e3:.1f} ms)")
    print("int8 dot-product instructions (VNNI) on this CPU: "
          + ("unknown (cpuinfo not readable)" if not cpu_flags else "yes" if has_vnni else "no")
          + "".join(f", {k} {'yes' if cpu_flags[k] else 'no'}" for k in ("avx512_vnni", "avx_vnni", "amx_int8")
                    if k in cpu_flags))

# %% [markdown]
# Start with the verdict line ("int8 compiled / float32 compiled, round by
# round"): it says whether, *once both are compiled*, int8 beat float32 on
# this CPU in every round by more than the noise, lost in every round, or
# gave no verdict. That comparison decides whether quantising for speed
# pays; the eager timings above do not. When int8 wins, two things can
# account for it. It moves fewer bytes: int8 weights and int8 activations
# between the convolutions are a quarter of the float32 ones. And it can do
# more arithmetic per instruction: on x86 CPUs with VNNI (`avx512_vnni` or
# `avx_vnni`) or AMX, one instruction multiplies and adds groups of four
# 8-bit numbers into 32-bit sums, where float32 fits one number per lane;
# the line under the verdict says whether this CPU lists them. Without
# them, oneDNN's int8 convolution falls back to slower instruction
# sequences, and the quantise and requantise steps are extra work; small
# layers (ResNet-20 on 32×32 images has 16 to 64 channels per layer) leave
# a larger share of the time to that overhead, large ones (ResNet-50 at
# 224×224) a smaller share. This machine's answer is the verdict line, and
# on a busy shared machine the rounds can disagree.
#
# Then the operator counts, which show what was compiled. The compiled
# float32 model calls oneDNN's float convolution
# (`mkldnn._convolution_pointwise`, with the ReLU or the residual addition
# fused in); the compiled int8 model calls oneDNN's int8 convolution
# (`onednn.qconv_pointwise`, and `onednn.qconv2d_pointwise` for a
# convolution fused with the residual addition) once per convolution of the
# network, and `onednn.qlinear_pointwise` for the classifier. That is the
# lowering; the checks below assert one int8 convolution per `nn.Conv2d`.
#
# Eager int8 PT2E (the reference graph) is not meant to be fast: it is the
# float model with BatchNorm folded away and quantise and dequantise ops
# added, so its eager timing against float32 says something about those
# two changes, and nothing about int8 arithmetic.
#
# ### Saving the int8 ResNet: a file bigger than the float one
#
# Save the converted model's `state_dict` the same way as before, and the
# int8 file is *larger* than the float32 one:

# %%
resnet_float_bytes = file_size(resnet_float, "resnet20_float32")
resnet_int8_full_bytes = file_size(resnet_int8, "resnet20_int8_full")
by_dtype = {}
for value in resnet_int8.state_dict().values():
    by_dtype[str(value.dtype)] = by_dtype.get(str(value.dtype), 0) + value.numel() * value.element_size()
print(f"float32 state_dict {resnet_float_bytes / 1e3:,.0f} kB, converted model's state_dict {resnet_int8_full_bytes / 1e3:,.0f} kB")
print("bytes by dtype in the converted state_dict:", {k: f"{v / 1e3:,.0f} kB" for k, v in by_dtype.items()})

# %% [markdown]
# The graph module still carries the original float weights as attributes
# (the convolutions', for instance: the cell below prints the first names
# it deletes), though no node of the graph reads them any more:
# `prepare_pt2e` folded BatchNorm into them, and convert stored the results
# as new int8 constants.
# The attributes the graph uses are the targets of its `get_attr` nodes. We
# delete the others, check that the model gives the same outputs, and save
# again:

# %%
used = {node.target for node in resnet_int8.graph.nodes if node.op == "get_attr"}
unused = [name for name in resnet_int8.state_dict() if name not in used]
with torch.no_grad():
    before = resnet_int8(cifar_bench)
for name in unused:
    owner, _, attr = name.rpartition(".")
    delattr(resnet_int8.get_submodule(owner), attr)
with torch.no_grad():
    same_outputs = torch.equal(before, resnet_int8(cifar_bench))
resnet_int8_bytes = file_size(resnet_int8, "resnet20_int8_static")
print(f"deleted {len(unused)} unused float tensors (e.g. {unused[:3]}); outputs unchanged: {same_outputs}")
print(f"int8 file: {resnet_int8_bytes / 1e3:,.0f} kB = {resnet_int8_bytes / resnet_float_bytes:.2f}x of float32")
rows.append(dict(model="ResNet-20", method="float32", bytes=resnet_float_bytes, timing=resnet_float_time,
                 metric=resnet_float_acc))
rows.append(dict(model="ResNet-20", method="int8 static PT2E (eager)", bytes=resnet_int8_bytes,
                 timing=resnet_int8_time, metric=resnet_int8_acc))
for name, (timing, accuracy, _) in compiled_resnets.items():
    rows.append(dict(model="ResNet-20", method=f"{'int8 PT2E' if 'int8' in name else name}, compiled (freezing)",
                     bytes=resnet_int8_bytes if "int8" in name else resnet_float_bytes, timing=timing, metric=accuracy))

# %% [markdown]
# For deployment you would save the whole program instead, with
# `torch.export.save(torch.export.export(resnet_int8, ...), "model.pt2")`,
# which keeps the graph as well as the weights.
#
# ## Weight-only quantisation under `torch.compile`
#
# Large language models spend most of their inference time *reading
# weights*: generating one token multiplies a few activation vectors by
# every weight matrix, so the time is set by memory bandwidth, not by
# arithmetic. **Weight-only** quantisation stores the weights in int8 (or
# int4) and keeps the activations in bfloat16; a kernel reads the small
# weights and converts them on the fly. torchao's configs are
# `Int8WeightOnlyConfig()` (int8, one scale per output channel) and
# `Int4WeightOnlyConfig(group_size=32, int4_packing_format="tile_packed_to_4d")`
# (int4, one scale and zero point per group of 32 inputs, packed for the
# CUDA "tinygemm" kernel; torchao 0.18 has no CPU packing for this config,
# so int4 runs only where there is a CUDA GPU).
#
# The fast kernels come from compiling. Inductor rewrites "bfloat16
# activations × int8 weight converted to bfloat16, times the scales" into
# one call of `aten._weight_int8pack_mm` (a lowering pattern in
# `torch/_inductor/fx_passes/quantization.py`; its check accepts only
# bfloat16 activations, on CPU, CUDA or XPU devices, and the operator has
# CPU and CUDA kernels). We run the MNIST MLP in bfloat16 on `device` (the
# GPU when there is one; the second line of the Setup output says which),
# quantise copies, and compile each one, along with the float32 MLP (the
# baseline of bfloat16 itself). The timings are one image at a time, the case in which, for a
# large model, reading the weights sets the time; they run in
# `COMPILE_ROUNDS` interleaved rounds, as for the compiled ResNets, and a
# verdict needs every round to agree by more than the two IQRs.

# %%
wo_dtype = torch.bfloat16
mlp_bf16 = copy.deepcopy(mlp).to(device=device, dtype=wo_dtype)
wo_models = {"float32": copy.deepcopy(mlp).to(device), "bfloat16": mlp_bf16}  # float32: the baseline of bfloat16 itself
wo_models["int8 weight-only"] = copy.deepcopy(mlp_bf16)
quantize_(wo_models["int8 weight-only"], Int8WeightOnlyConfig())
if device.type == "cuda":
    wo_models["int4 weight-only"] = copy.deepcopy(mlp_bf16)
    quantize_(wo_models["int4 weight-only"], Int4WeightOnlyConfig(group_size=32, int4_packing_format="tile_packed_to_4d"))
else:
    print(f"int4 weight-only: skipped on {device.type} (tile_packed_to_4d needs a CUDA GPU of compute capability 8.0+)")


def wo_input(name, images):
    """`images` on `device`, in the activation dtype of model `name` (float32 for the float32 model)."""
    return images.to(device=device, dtype=torch.float32 if name == "float32" else wo_dtype)


@torch.inference_mode()
def wo_accuracy(name, model):
    """MNIST test accuracy of model `name` on `device`, in batches of 1000 (eager)."""
    correct = 0
    for i in range(0, len(mnist_test_x), 1000):
        logits = model(wo_input(name, mnist_test_x[i : i + 1000]))
        correct += (logits.argmax(dim=1).cpu() == mnist_test_y[i : i + 1000]).sum().item()
    return correct / len(mnist_test_x)


def median_round(timings):
    """The Timing whose median is the median of the rounds' medians."""
    return sorted(timings, key=lambda t: t.median_s)[len(timings) // 2]


def verdict_over_rounds(base_rounds, other_rounds, base_name):
    """'faster than' / 'slower than' `base_name` 'in every round' when each round's medians differ by more than
    that round's two IQRs together, in the same direction; otherwise 'no verdict'."""
    words = {slower_or_faster(b, o, base_name).split(" (")[0] for b, o in zip(base_rounds, other_rounds)}
    if len(words) == 1 and not next(iter(words)).startswith("no clear"):
        return f"{next(iter(words))} in every round (by more than the two IQRs)"
    return f"no verdict against {base_name} (the rounds disagree, or differ by less than their IQRs)"


wo_results, wo_compiled = {}, {}
for name, model in wo_models.items():
    row = dict(bytes=file_size(model, f"mlp_{name.replace(' ', '_')}"), accuracy=wo_accuracy(name, model))
    if COMPILE:
        one_image = wo_input(name, mnist_test_x[:1])
        with frozen_compiling() as caught:  # freezing on, as above
            wo_compiled[name], seconds, ops = compile_and_list_ops(model, one_image)
            with torch.inference_mode():
                row["compiled_diff"] = (wo_compiled[name](one_image) - model(one_image)).abs().max().item()
        row["ops"] = ops
        print(f"{name}: first call {seconds:.0f} s; generated code calls {dict(ops)}")
        for message in sorted({f"{w.category.__name__}: {str(w.message)[:90]}" for w in caught}):
            print("   warned while compiling:", message)
    wo_results[name] = row
for name, row in wo_results.items():
    print(f"{name:17s} file {row['bytes'] / 1e3:5.0f} kB  accuracy {row['accuracy']:.2%}")
if COMPILE:  # batch 1, interleaved rounds (the order reversed every other round), as for the compiled ResNets
    wo_rounds = {name: [] for name in wo_compiled}
    with frozen_compiling():
        for r in range(COMPILE_ROUNDS):
            for name in (list(wo_compiled) if r % 2 == 0 else list(wo_compiled)[::-1]):
                one_image = wo_input(name, mnist_test_x[:1])
                wo_rounds[name].append(latency(wo_compiled[name], one_image, f"MLP {name}, compiled, batch 1"))
    for r in range(COMPILE_ROUNDS):
        print(f"round {r + 1}:", "; ".join(str(ts[r]).replace(", compiled, batch 1", "") for ts in wo_rounds.values()))
    for name, ts in wo_rounds.items():
        wo_results[name]["timing"] = median_round(ts)
    wo_verdicts = {
        ("int8 weight-only", "bfloat16"): verdict_over_rounds(wo_rounds["bfloat16"], wo_rounds["int8 weight-only"], "bfloat16"),
        ("int8 weight-only", "float32"): verdict_over_rounds(wo_rounds["float32"], wo_rounds["int8 weight-only"], "float32"),
        ("bfloat16", "float32"): verdict_over_rounds(wo_rounds["float32"], wo_rounds["bfloat16"], "float32"),
    }
    print(f"compiled, batch 1, on {device.type} ({torch.get_num_threads()} threads):")
    for (name, base), verdict in wo_verdicts.items():
        ratios = [o.median_s / b.median_s for b, o in zip(wo_rounds[base], wo_rounds[name])]
        print(f"   {name} / {base}, round by round: {', '.join(f'{q:.2f}x' for q in ratios)} -> {name} {verdict}")
    if device.type == "cpu":
        print("   native bfloat16 instructions on this CPU: "
              + ("unknown (cpuinfo not readable)" if not cpu_flags else "yes" if has_native_bf16 else "no")
              + "".join(f", {k} {'yes' if cpu_flags[k] else 'no'}" for k in ("avx512_bf16", "amx_bf16") if k in cpu_flags))
if COMPILE:  # the trap: the same int8 weight-only MLP, but with float32 activations
    mlp_wo_float32 = copy.deepcopy(mlp).to(device)
    quantize_(mlp_wo_float32, Int8WeightOnlyConfig())
    with frozen_compiling():
        _, seconds, wo_float32_ops = compile_and_list_ops(mlp_wo_float32, mnist_test_x[:1].to(device))
    print(f"int8 weight-only with float32 activations, compiled with freezing: first call {seconds:.0f} s; "
          f"generated code calls {dict(wo_float32_ops)}")

# %% [markdown]
# The int8 weight-only file is about half the bfloat16 one (one byte per
# weight instead of two, plus a scale per output channel), and the accuracy
# stays within `MAX_ACCURACY_DROP` (checked below). The compiled int8 model
# calls `_weight_int8pack_mm` once per `nn.Linear` (checked below, on
# whichever device ran: this build's is printed at the top), and the
# compiled bfloat16 and float32 models call the ordinary matrix kernels
# (their operator lists are printed).
#
# Now the three verdict lines ("... round by round ..."). They say what these
# kernels cost *here*, on a model far smaller than the ones weight-only
# quantisation was built for. Read bfloat16 against float32 first: bfloat16
# halves the bytes of every weight, but it is a fast baseline only where
# the hardware computes in bfloat16 and the library's kernel for this shape
# makes use of it. The line after the verdicts says whether this CPU lists native
# bfloat16 instructions (`avx512_bf16` or AMX); without them oneDNN
# emulates bfloat16 with float32 instructions and conversions. With or
# without them, one image makes each layer a matrix-vector product, with
# little arithmetic for faster instructions to save and the same fixed
# costs per call. So when int8 weight-only beats bfloat16, that is not yet
# a win for int8: the line against float32 is the fair comparison. Where
# int8 weight-only beats float32 too, a likely reason is the bytes: it
# reads one byte per weight instead of four. These weights are small (the
# file sizes above, from about 0.5 to 2 MB; compare them with the cache
# sizes printed at the top), so which cache level each version's weights
# fit in can decide the comparison on a model this size; the saving in
# bytes read matters most when the weights do not fit in any cache, as
# with a language model of billions of parameters, which is what these
# configs were built for.
#
# The trap is the last line above: with float32
# activations Inductor's pattern does not match (it requires bfloat16), so
# the generated code calls no int8 kernel, only the float matrix product
# (on the CPU `mkl._mkl_linear`, once per layer). With freezing on, the
# int8-to-float conversion of each weight is done once, at compile time, so
# that model silently computes with float weights again (checked below).
#
# ## Quantisation-aware training
#
# Post-training quantisation rounds the weights of a model that never saw
# rounding. **Quantisation-aware training** (QAT) fine-tunes the model with
# the rounding simulated in the forward pass (**fake quantisation**:
# quantise, then dequantise right away, still in float), so the weights
# settle where rounding hurts least. Rounding has a zero gradient almost
# everywhere; the backward pass treats it as the identity instead (the
# "straight-through estimator").
#
# At 8 bits the MLP lost almost nothing, so there is little for QAT to win.
# We therefore go to `QAT_WEIGHT_BITS`-bit weights (per output channel,
# int8 activations per row) with torchao's
# `Int8DynamicActivationIntxWeightConfig`, the same recipe for both:
#
# - **PTQ**: fine-tune a copy of the MLP for `QAT_STEPS` steps in float (so
#   both models get the same extra training), then quantise;
# - **QAT**: `quantize_(model, QATConfig(config, step="prepare"))` swaps
#   each `nn.Linear` for a `FakeQuantizedLinear`; fine-tune for the same
#   steps on the same batches; then `QATConfig(config, step="convert")`
#   swaps them back and applies the real quantisation.
#
# torchao stores these low-bit weights one per int8 byte
# (`IntxUnpackedToInt8Tensor`, the format meant for export), so the file is
# no smaller than int8; packing two 4-bit values per byte is a separate
# format.

# %%
qat_config = Int8DynamicActivationIntxWeightConfig(
    weight_dtype=getattr(torch, f"int{QAT_WEIGHT_BITS}"), weight_granularity=PerAxis(0)
)


def fine_tune(model, steps, seed):
    """`steps` Adam steps at QAT_LR on MNIST batches drawn with `seed` (the same batches for every model)."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=QAT_LR)
    model.train()
    for _ in range(steps):
        idx = torch.randint(len(mnist_x), (BATCH_SIZE,), generator=gen)
        loss = F.cross_entropy(model(mnist_x[idx]), mnist_y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@torch.no_grad()
def mnist_correct(model):
    """Bool [N]: which MNIST test images `model` classifies correctly."""
    return torch.cat([model(images).argmax(dim=1) == labels for images, labels in test_loader])


def qat_vs_ptq(seed, verbose=False):
    """One paired run: fine-tune in float then quantise (PTQ), and fine-tune with fake quantisation then
    convert (QAT), both on the batches drawn with `seed`. Returns the models, accuracies and, per test
    image, whether PTQ and QAT got it right."""
    tuned = fine_tune(copy.deepcopy(mlp), QAT_STEPS, seed=seed)
    ptq = copy.deepcopy(tuned)
    quantize_(ptq, qat_config)
    qat = copy.deepcopy(mlp)
    quantize_(qat, QATConfig(qat_config, step="prepare"))
    if verbose:
        print("after prepare:", type(qat.net[1]).__name__, "with", type(qat.net[1].weight_fake_quantizer).__name__)
    start = time.perf_counter()
    fine_tune(qat, QAT_STEPS, seed=seed)
    seconds = time.perf_counter() - start
    fake_acc = mnist_accuracy(qat)
    quantize_(qat, QATConfig(qat_config, step="convert"))
    if verbose:
        print("after convert:", type(qat.net[1]).__name__, "with weight", type(qat.net[1].weight).__name__)
        print(f"{QAT_STEPS} QAT steps took {seconds:.1f} s")
    ptq_right, qat_right = mnist_correct(ptq), mnist_correct(qat)
    return dict(tuned=tuned, ptq=ptq, qat=qat, tuned_acc=mnist_accuracy(tuned), ptq_acc=ptq_right.float().mean().item(),
                fake_acc=fake_acc, qat_acc=qat_right.float().mean().item(),
                qat_only=int((qat_right & ~ptq_right).sum()), ptq_only=int((ptq_right & ~qat_right).sum()))


qat_runs = [qat_vs_ptq(SEED + 1 + i, verbose=(i == 0)) for i in range(QAT_SEEDS)]
print(f"{'seed':>4s} {'float32 tuned':>14s} {f'PTQ int{QAT_WEIGHT_BITS}':>9s} {'QAT fake-q':>11s} "
      f"{f'QAT int{QAT_WEIGHT_BITS}':>9s} {'QAT - PTQ':>10s} {'only QAT right':>15s} {'only PTQ right':>15s}")
for i, run in enumerate(qat_runs):
    print(f"{SEED + 1 + i:4d} {run['tuned_acc']:14.2%} {run['ptq_acc']:9.2%} {run['fake_acc']:11.2%} "
          f"{run['qat_acc']:9.2%} {100 * (run['qat_acc'] - run['ptq_acc']):+9.2f}p {run['qat_only']:15d} {run['ptq_only']:15d}")
qat_gains = [run["qat_acc"] - run["ptq_acc"] for run in qat_runs]
qat_drops = [run["tuned_acc"] - run["qat_acc"] for run in qat_runs]
fake_vs_convert = max(abs(run["fake_acc"] - run["qat_acc"]) for run in qat_runs)
mlp_tuned_acc = sum(run["tuned_acc"] for run in qat_runs) / QAT_SEEDS
mlp_ptq_acc = sum(run["ptq_acc"] for run in qat_runs) / QAT_SEEDS
mlp_qat_acc = sum(run["qat_acc"] for run in qat_runs) / QAT_SEEDS
qat_mean_gain = mlp_qat_acc - mlp_ptq_acc
qat_wins = sum(g > 0 for g in qat_gains)
print(f"mean over {QAT_SEEDS} seeds: float32 {mlp_tuned_acc:.2%}, PTQ {mlp_ptq_acc:.2%}, QAT {mlp_qat_acc:.2%}; "
      f"QAT - PTQ {100 * qat_mean_gain:+.2f} points, from {100 * min(qat_gains):+.2f} to "
      f"{100 * max(qat_gains):+.2f} between seeds")
print(f"per seed: QAT beat PTQ in {qat_wins} of {QAT_SEEDS} seeds, tied in {sum(g == 0 for g in qat_gains)}, "
      f"lost in {sum(g < 0 for g in qat_gains)} (printed, not asserted: the mean and the sign test below are the claims)")
# The paired comparison: only the images on which the two models disagree say which is better.
qat_only, ptq_only = sum(run["qat_only"] for run in qat_runs), sum(run["ptq_only"] for run in qat_runs)
discordant = qat_only + ptq_only
qat_p = sum(math.comb(discordant, k) for k in range(qat_only, discordant + 1)) / 2**discordant if discordant else 1.0
print(f"pooled over the seeds: {qat_only} (image, seed) pairs right only with QAT, {ptq_only} right only with PTQ; "
      f"one-sided exact sign test (McNemar) p = {qat_p:.1e}")
mlp_tuned, mlp_ptq, mlp_qat = qat_runs[0]["tuned"], qat_runs[0]["ptq"], qat_runs[0]["qat"]
mlp_qat_bytes = file_size(mlp_qat, f"mlp_int{QAT_WEIGHT_BITS}_qat")
rows.append(dict(model="MLP", method="float32, fine-tuned (*)", bytes=file_size(mlp_tuned, "mlp_float32_tuned"),
                 timing=None, metric=mlp_tuned_acc))
rows.append(dict(model="MLP", method=f"int{QAT_WEIGHT_BITS} weights, PTQ (*)", bytes=file_size(mlp_ptq, "mlp_ptq"),
                 timing=None, metric=mlp_ptq_acc))
rows.append(dict(model="MLP", method=f"int{QAT_WEIGHT_BITS} weights, QAT (*)", bytes=mlp_qat_bytes, timing=None,
                 metric=mlp_qat_acc))

# %% [markdown]
# Compare each quantised model with the *fine-tuned* float32 model of the
# same seed, not with the original: all three had the same `QAT_STEPS`
# extra steps on the same batches, which by themselves raise the accuracy.
# One run with a gap of a few tenths of a point would prove little (a
# different draw of batches moves the accuracies by about that much; the
# spread between seeds is printed next to the mean gap), and even three
# seeds that all agree are weak evidence on their own (three coin flips
# agree one time in four). The stronger evidence is **paired**: both
# models classify the same test images, and only the images on which they
# disagree say which one is better. Pooled over the seeds, the table
# counts the images only QAT got right and those only PTQ got right; if
# the two methods were equally good, each disagreement would go either way
# with probability one half, and the exact sign test (McNemar's test)
# gives the probability of a split at least this lopsided. The pooled test
# treats the (image, seed) pairs as independent, which they are not quite
# (each seed scores the same ten thousand images), so read the p-value as
# "this gap is far beyond which images happen to flip", for this model and
# test set; it is not a general law. The checks require the mean gain over
# the seeds to be positive (above `MIN_QAT_GAIN`) and the sign test's
# p-value to be at most `MAX_QAT_P`; how many seeds QAT won is printed
# above but not asserted, because a single seed's gap of a tenth of a point
# can change sign when the fine-tuning takes another floating-point path
# (a different thread count, another CPU). A loose bound holds in every
# seed: QAT stays within `MAX_QAT_DROP` of the fine-tuned float32 model.
# The fake-quantised model and the converted one
# agree to a few test images (checked): QAT simulated the rounding that
# convert then applied. On this easy task the gap is small, because the
# MLP tolerates coarse weights well. The price of QAT is training time
# (the fake quantisers slow each step down) and having the training data
# and loop at hand; with int8 on most models, PTQ is enough.
#
# ## The table

# %%
print(f"{'model':10s} {'method':32s} {'file kB':>8s} {'vs float':>8s} {'ms/batch':>9s} {'IQR ms':>7s} {'calls':>6s} "
      f"{'blocks':>6s}  accuracy or test MSE")
float_bytes = {}
for row in rows:
    if row["method"] == "float32":
        float_bytes[row["model"]] = row["bytes"]
    ratio = row["bytes"] / float_bytes[row["model"]]
    t = row["timing"]
    timed = ("-", "-", "-", "-") if t is None else (f"{t.median_ms:.2f}", f"{t.iqr_s * 1e3:.2f}", t.calls, t.blocks)
    metric = f"MSE {row['metric']:.5f}" if row["model"] == "LSTM" else f"{row['metric']:.2%}"
    print(f"{row['model']:10s} {row['method']:32s} {row['bytes'] / 1e3:8.0f} {ratio:7.2f}x {timed[0]:>9s} {timed[1]:>7s} "
          f"{timed[2]:>6} {timed[3]:>6}  {metric}")
print(f"latency: median of one batch of {BENCH_BATCH} on {torch.get_num_threads()} CPU threads (helpers.bench.measure: "
      "the median and IQR are over the blocks, each block the mean of calls / blocks calls in a row; compiled rows: "
      f"the median of {COMPILE_ROUNDS} interleaved rounds); eager mode unless 'compiled'")
print(f"(*) fine-tuned for {QAT_STEPS} more steps: compare these rows with each other, not with the first MLP rows; "
      f"accuracy: mean of {QAT_SEEDS} seeds; not timed: torchao stores int{QAT_WEIGHT_BITS} weights one per byte "
      "(IntxUnpackedToInt8Tensor, a format for export), and in eager mode it dequantises them on every call, so its "
      "latency would measure that conversion, not low-bit kernels")

# %%
_ = report.record("MLP float32 accuracy", round(100 * mlp_float_acc, 2), "%")
_ = report.record("MLP int8 dynamic (torchao) accuracy", round(100 * mlp_dynamic_acc, 2), "%")
_ = report.record("MLP int8 file size vs float32", round(mlp_dynamic_bytes / mlp_float_bytes, 3), "x")
_ = report.record("MLP int8 dynamic latency, torchao eager", round(mlp_dynamic_time.median_ms, 2), "ms")
_ = report.record("MLP int8 dynamic latency, legacy fbgemm", round(mlp_legacy_time.median_ms, 2), "ms")
_ = report.record("MLP float32 latency", round(mlp_float_time.median_ms, 2), "ms")
_ = report.record("LSTM int8 / float32 test MSE", round(lstm_dynamic_mse / lstm_float_mse, 3), "x")
_ = report.record("LSTM int8 file size vs float32", round(lstm_dynamic_bytes / lstm_float_bytes, 3), "x")
_ = report.record("ResNet-20 float32 accuracy", round(100 * resnet_float_acc, 2), "%")
_ = report.record("ResNet-20 int8 static PT2E accuracy", round(100 * resnet_int8_acc, 2), "%")
_ = report.record("ResNet-20 int8 file size vs float32", round(resnet_int8_bytes / resnet_float_bytes, 3), "x")
_ = report.record("MLP fine-tuned float32 accuracy", round(100 * mlp_tuned_acc, 2), "%")
_ = report.record(f"MLP int{QAT_WEIGHT_BITS}-weight PTQ accuracy", round(100 * mlp_ptq_acc, 2), "%")
_ = report.record(f"MLP int{QAT_WEIGHT_BITS}-weight QAT accuracy", round(100 * mlp_qat_acc, 2), "%")
_ = report.record(f"QAT - PTQ, smallest of {QAT_SEEDS} seeds", round(100 * min(qat_gains), 2), "points")
_ = report.record(f"QAT - PTQ, mean of {QAT_SEEDS} seeds", round(100 * qat_mean_gain, 2), "points")
_ = report.record("QAT beat PTQ in this many seeds", f"{qat_wins} of {QAT_SEEDS}")
_ = report.record("QAT vs PTQ: (image, seed) pairs right only with QAT", qat_only, "")
_ = report.record("QAT vs PTQ: (image, seed) pairs right only with PTQ", ptq_only, "")
_ = report.record("QAT vs PTQ: one-sided sign-test p-value", f"{qat_p:.1e}")
_ = report.record("ResNet-20 float32 latency, eager", round(resnet_float_time.median_ms, 2), "ms")
_ = report.record("ResNet-20 int8 PT2E latency, eager", round(resnet_int8_time.median_ms, 2), "ms")
for name, (timing, accuracy, _) in compiled_resnets.items():
    _ = report.record(f"ResNet-20 {name} latency, compiled", round(timing.median_ms, 2), "ms")
    _ = report.record(f"ResNet-20 {name} accuracy, compiled", round(100 * accuracy, 2), "%")
for name, row in wo_results.items():
    _ = report.record(f"MLP {name} accuracy ({device.type})", round(100 * row["accuracy"], 2), "%")
    if "timing" in row:
        _ = report.record(f"MLP {name} latency, compiled, batch 1 ({device.type})", round(row["timing"].median_ms, 3), "ms")
if COMPILE:
    for (name, base), verdict in wo_verdicts.items():
        _ = report.record(f"MLP {name} vs {base}, compiled, batch 1", verdict.split(" (")[0])

# %% [markdown]
# ## Checks
#
# What the chapter claims: int8 keeps the accuracy within
# `MAX_ACCURACY_DROP`, and makes the file smaller than `MAX_SIZE_RATIO` of
# the float32 one, for each method; the int8 LSTM forecasts nearly as well;
# at `QAT_WEIGHT_BITS`-bit weights QAT stays within `MAX_QAT_DROP` of the
# fine-tuned float32 MLP in every seed and beats PTQ on average over the
# seeds, with the paired sign test's p-value at most `MAX_QAT_P`;
# compiled with freezing, the int8 ResNet-20 runs one oneDNN int8
# convolution per `nn.Conv2d` and keeps its accuracy; int8 weight-only
# halves the bfloat16 file, keeps the accuracy, and compiles to one
# `_weight_int8pack_mm` per `nn.Linear` with bfloat16 activations and to
# none with float32 activations; each compiled weight-only model matches
# its eager version to within `WO_ATOL` (the line above "all checks
# passed" prints the differences). No timing is asserted (on a shared machine
# even a ratio of ten can flip when other programs take the cores): speed
# depends on the machine, as the verdict lines and the table show.

# %%
for name, before_acc, after_acc in [
    ("MLP, int8 dynamic (torchao)", mlp_float_acc, mlp_dynamic_acc),
    ("MLP, int8 dynamic (legacy)", mlp_float_acc, mlp_legacy_acc),
    ("ResNet-20, int8 static PT2E", resnet_float_acc, resnet_int8_acc),
]:
    assert before_acc - after_acc <= MAX_ACCURACY_DROP, (
        f"{name}: accuracy fell from {before_acc:.2%} to {after_acc:.2%}, more than MAX_ACCURACY_DROP = {MAX_ACCURACY_DROP}"
    )
for name, small, large in [
    ("MLP, int8 dynamic (torchao)", mlp_dynamic_bytes, mlp_float_bytes),
    ("MLP, int8 dynamic (legacy)", mlp_legacy_bytes, mlp_float_bytes),
    ("LSTM, int8 dynamic (legacy)", lstm_dynamic_bytes, lstm_float_bytes),
    ("ResNet-20, int8 static PT2E", resnet_int8_bytes, resnet_float_bytes),
]:
    assert small < MAX_SIZE_RATIO * large, f"{name}: the int8 file is {small / large:.2f}x of float32, not < {MAX_SIZE_RATIO}"
assert lstm_dynamic_mse <= MAX_LSTM_MSE_RATIO * lstm_float_mse, (
    f"the int8 LSTM's test MSE {lstm_dynamic_mse:.5f} is more than {MAX_LSTM_MSE_RATIO}x the float one {lstm_float_mse:.5f}"
)
assert same_outputs, "deleting the unused float attributes changed the PT2E model's outputs"
assert resnet_int8_full_bytes > resnet_int8_bytes, "the converted state_dict should shrink once the unused tensors are gone"
assert resnet_int8_full_bytes > resnet_float_bytes, "the converted state_dict (with its unused floats) should be bigger than float32"
assert max(qat_drops) <= MAX_QAT_DROP, (
    f"QAT at int{QAT_WEIGHT_BITS} weights lost up to {max(qat_drops):.2%} against the fine-tuned float32 MLP "
    f"(per seed: {[round(d, 4) for d in qat_drops]}), more than MAX_QAT_DROP = {MAX_QAT_DROP}"
)
assert qat_mean_gain > MIN_QAT_GAIN, (
    f"QAT should beat PTQ on average at int{QAT_WEIGHT_BITS} weights: mean QAT - PTQ {qat_mean_gain:+.4f} is not "
    f"above MIN_QAT_GAIN = {MIN_QAT_GAIN} (per seed: {[round(g, 4) for g in qat_gains]})"
)
assert qat_p <= MAX_QAT_P, (
    f"paired over the test images, QAT was right alone {qat_only} times and PTQ {ptq_only} times: sign-test "
    f"p = {qat_p:.3g} > MAX_QAT_P = {MAX_QAT_P}, not evidence that QAT beats PTQ"
)
assert fake_vs_convert <= 0.001, f"fake-quantised and converted QAT models differ by {fake_vs_convert:.2%} in accuracy"
if COMPILE:
    n_convs = sum(isinstance(m, nn.Conv2d) for m in resnet_float.modules())
    int8_ops = compiled_resnets["int8 static PT2E"][2]
    n_qconv = sum(v for k, v in int8_ops.items() if k.startswith("onednn.qconv"))
    assert n_qconv == n_convs, f"compiled int8 ResNet-20 calls {n_qconv} oneDNN int8 convolutions for {n_convs} Conv2d: {dict(int8_ops)}"
    assert not any(k.startswith("onednn.q") for k in compiled_resnets["float32"][2]), "the float model should have no int8 ops"
    for name, (_, accuracy, _) in compiled_resnets.items():
        assert resnet_float_acc - accuracy <= MAX_ACCURACY_DROP, f"compiled {name} ResNet-20: accuracy {accuracy:.2%}"
bf16_row = wo_results["bfloat16"]
if COMPILE:
    print(f"compiled vs eager MLP, largest logit difference on one image (at most WO_ATOL = {WO_ATOL}): "
          + ", ".join(f"{name} {row['compiled_diff']:.4f}" for name, row in wo_results.items()))
for name, row in wo_results.items():
    assert bf16_row["accuracy"] - row["accuracy"] <= MAX_ACCURACY_DROP, f"{name} MLP: accuracy {row['accuracy']:.2%}"
    if COMPILE:
        assert row["compiled_diff"] <= WO_ATOL, f"compiled {name} MLP differs from eager by {row['compiled_diff']:.3f}"
assert wo_results["int8 weight-only"]["bytes"] < 0.6 * bf16_row["bytes"], "int8 weight-only should about halve the bfloat16 file"
if COMPILE:  # on the CPU and on CUDA alike: Inductor's weight-only pattern accepts both
    n_linear = sum(isinstance(m, nn.Linear) for m in mlp.modules())
    ops = wo_results["int8 weight-only"]["ops"]
    assert ops["_weight_int8pack_mm"] == n_linear, (
        f"int8 weight-only on {device.type} should compile to one _weight_int8pack_mm per Linear: {dict(ops)}"
    )
    assert "_weight_int8pack_mm" not in bf16_row["ops"], "the bfloat16 model should not call the int8 kernel"
    assert "_weight_int8pack_mm" not in wo_float32_ops, (
        f"with float32 activations the weight-only pattern should not match: {dict(wo_float32_ops)}"
    )
    if device.type == "cpu":
        assert wo_float32_ops["mkl._mkl_linear"] == n_linear, (
            f"with float32 activations each Linear should become a float matrix product: {dict(wo_float32_ops)}"
        )
print("all checks passed")

# %% [markdown]
# ## Pitfalls
#
# ### Calling a quantised model with the wrong input
#
# The PT2E model was exported for normalised float32 images; handing it the
# raw uint8 pixels fails at the first quantise op:

# %%
raw_images = torch.from_numpy(cifar_test_raw.data[:4]).permute(0, 3, 1, 2)  # uint8 [4, 3, 32, 32]
try:
    resnet_int8(raw_images)
except Exception as err:  # noqa: BLE001  (show whatever the model raises)
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# The fix is the same preprocessing as in calibration: float, scaled to
# [0, 1], normalised. The same goes for torchao's int8 `Linear`, which
# accepts float32, float16 and bfloat16 but not float64:

# %%
mean, std = torch.tensor(RESNET_CIFAR_MEAN).view(1, 3, 1, 1), torch.tensor(RESNET_CIFAR_STD).view(1, 3, 1, 1)
with torch.no_grad():
    print("fixed: logits of shape", tuple(resnet_int8((raw_images.float() / 255 - mean) / std).shape))
try:
    mlp_dynamic(mnist_test_x[:4].double())
except Exception as err:  # noqa: BLE001
    print(f"{type(err).__name__}: {err}")
with torch.no_grad():
    print("fixed: logits of shape", tuple(mlp_dynamic(mnist_test_x[:4].double().float()).shape))

# %% [markdown]
# ### Calibrating on too little, or on the wrong data
#
# The scales of the activations come only from the calibration batches. How
# much data is enough, and what happens when it is not preprocessed like
# the real inputs? We calibrate again with 2 images, and with images that
# were not normalised (pixels in [0, 1]), and measure. To save time, these
# comparisons use the first `PITFALL_TEST_IMAGES` test images only:

# %%
calibration_tests = {
    f"{len(calibration_x)} normalised images (above)": cifar_accuracy(resnet_int8, PITFALL_TEST_IMAGES),
    "2 normalised images": cifar_accuracy(static_ptq(resnet_float, [calibration_x[:2]]), PITFALL_TEST_IMAGES),
    f"{len(calibration_x)} images, not normalised": cifar_accuracy(
        static_ptq(resnet_float, [(b * std + mean) for b in calibration_batches]), PITFALL_TEST_IMAGES
    ),
}
pitfall_float_acc = cifar_accuracy(resnet_float, PITFALL_TEST_IMAGES)
print(f"accuracy on the first {len(cifar_y[:PITFALL_TEST_IMAGES])} test images; float32: {pitfall_float_acc:.2%}")
for name, acc in calibration_tests.items():
    print(f"calibrated on {name:34s} accuracy {acc:.2%}")

# %% [markdown]
# Compare the first two "calibrated on" lines: two images can come
# surprisingly close to the full calibration set, when the network's
# activation ranges vary little from image to image (these accuracies are on only
# `PITFALL_TEST_IMAGES` images, so a difference of a point or two is within
# noise). Do not count on it; a few hundred representative inputs cost
# seconds. Calibrating on
# data that is not preprocessed like the real inputs is a real failure: the
# recorded ranges are wrong, real activations are clipped or squeezed into
# a few levels, and the accuracy collapses, with no error message. The fix
# is to calibrate with the exact preprocessing of inference, on data
# like the data the model will see.

# %%
assert calibration_tests[f"{len(calibration_x)} images, not normalised"] < pitfall_float_acc - 0.1, (
    "calibrating on unnormalised images should cost a lot of accuracy"
)

# %% [markdown]
# ### An int8 file that is bigger than the float one
#
# Shown above: the `state_dict` of a PT2E-converted graph still holds the
# original float parameters next to the new int8 ones. Measure the file;
# do not assume it shrank.
#
# ### Quantising before training is finished
#
# `quantize_` changes the model in place, and a quantised model is for
# inference: torchao's int8 weights are not parameters you can keep
# training with an optimizer. Quantise a copy (`copy.deepcopy`) once
# training is done, or use QAT, which is made for training.

# %% [markdown]
# ## Exercises
#
# ### 1. Asymmetric quantisation from min and max
#
# Write `quantize_asymmetric(x, num_bits)` returning `(q, scale, zero_point)`
# for asymmetric per-tensor quantisation to signed `num_bits`-bit integers
# (`num_bits` from 2 to 16), as in the worked example at the start of the chapter (the range of `x`
# widened to include 0, then mapped onto `[qmin, qmax]`): `scale` a Python
# float, `zero_point` a Python int, `q` an integer tensor (an integer dtype
# such as `torch.int32`) of the shape of `x`. Write it with plain tensor
# operations; torchao's `choose_qparams_affine` and `quantize_affine`,
# PyTorch's observers (`MinMaxObserver`, ...) and its quantize and
# fake-quantize functions (`torch.quantize_per_tensor`,
# `torch.fake_quantize_per_tensor_affine`, ...) are refused here.


# %%
def quantize_asymmetric(x, num_bits):
    raise NotImplementedError("compute lo, hi, scale, zero_point, then q")


result = check("23.quantize_asymmetric", quantize_asymmetric)

# %% [markdown]
# ### 2. Symmetric per-channel scales
#
# Write `per_channel_scales(weight, num_bits)` returning the symmetric
# scale of each output channel (dim 0), for a Linear weight `[out, in]` or a
# convolution weight `[out, in, kh, kw]`, with the convention of torchao and
# PyTorch's observers described in "What quantisation is" (for int8, a
# channel's largest magnitude maps to 127.5). The same functions as in
# exercise 1 (torchao's primitives, PyTorch's observers such as
# `PerChannelMinMaxObserver`, its quantize and fake-quantize functions) are
# refused here too.


# %%
def per_channel_scales(weight, num_bits):
    raise NotImplementedError("reduce |weight| over every dimension except 0")


result = check("23.per_channel_scales", per_channel_scales)

# %% [markdown]
# ## Summary
#
# - Quantisation stores numbers as integers with a scale and a zero point;
#   per-channel scales and more bits make the error smaller, and each bit
#   halves it.
# - **Dynamic** int8 (torchao `quantize_` with
#   `Int8DynamicActivationInt8WeightConfig`) needs no data: weights in int8,
#   activations quantised per batch. For LSTMs the only path is the legacy
#   `torch.ao.quantization.quantize_dynamic`, deprecated like the rest of
#   `torch.ao.quantization`.
# - **Static** PTQ with PT2E (`torch.export` → `prepare_pt2e` → calibrate →
#   `convert_pt2e`) quantises activations too, with ranges from calibration
#   data that must be preprocessed like the real inputs.
# - The PT2E graph is a reference: `torch.compile` with
#   `torch._inductor.config.freezing = True` lowers it to oneDNN int8
#   convolutions (without freezing it stays float). Whether that beats
#   compiled float32 depends on the CPU and the layer sizes: the verdict
#   line above is this machine's answer.
# - **Weight-only** int8/int4 (`Int8WeightOnlyConfig`,
#   `Int4WeightOnlyConfig`) keeps bfloat16 activations and shrinks the
#   weights; compiled, it calls int8-weight kernels, but only with bfloat16
#   activations (with float32 the int8 kernel is not used at all). It is
#   made for models whose weights do not fit in any cache, so that reading
#   them sets the time (generating text with a large language model). On a
#   small MLP, compare it with compiled float32 as well as bfloat16: a
#   bfloat16 kernel is not necessarily faster than float32, even on a CPU
#   with bfloat16 instructions (the verdict lines above).
# - **QAT** simulates the rounding during fine-tuning; at 2-bit weights it
#   beat PTQ on average over the seeds tried (the per-seed count is
#   printed), and got more of the same test images right, well beyond
#   image-level noise (paired sign test), on this easy task and by a small
#   margin.
# - Files shrink to about a quarter (measure them: a converted graph can keep
#   its float weights). Speed depends on kernels and hardware: in eager mode
#   torchao's int8 linear calls an int8 kernel but pays for the separate
#   quantise and rescale steps around it, and the PT2E reference graph runs
#   in float (with BatchNorm folded away); `torch.compile` (or another
#   backend) is what lowers them to int8 kernels.
#
# **Next:** chapter 24 packs the training loop of this course into PyTorch
# Lightning.

# %%
print(f"notebook ran in {time.perf_counter() - notebook_start:.0f} s")
report.finish()
