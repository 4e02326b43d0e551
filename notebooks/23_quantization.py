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
# - a measured table of file size, CPU latency and accuracy, and why int8 is
#   not automatically faster.
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
CALIBRATION_IMAGES = 512  # CIFAR-10 training images run through the observers (static PTQ)
CALIBRATION_BATCH = 64  # images per calibration batch
PITFALL_TEST_IMAGES = 250  # CIFAR-10 test images for the calibration pitfall's extra PTQ runs (the first ones)
QAT_WEIGHT_BITS = 2  # weight bits of the QAT vs PTQ comparison (int8 is too easy to show a difference)
QAT_STEPS = 200  # fine-tuning steps, with fake quantisation (QAT) and without (the PTQ baseline)
QAT_LR = 1e-4  # Adam's learning rate while fine-tuning
BENCH_BATCH = 64  # batch size of the latency measurements
MIN_RUN_TIME = 0.3  # seconds of timed runs per latency measurement (helpers.bench.measure)
COMPILE = False  # also time the PT2E model under torch.compile (inductor): minutes of compiling on 2 cores
MAX_ACCURACY_DROP = 0.02  # int8 may lose at most this much accuracy (absolute) in the checks
MAX_SIZE_RATIO = 0.4  # an int8 file must be smaller than this fraction of the float32 file
MAX_LSTM_MSE_RATIO = 1.5  # the int8 LSTM's test MSE may be at most this many times the float one
MAX_QAT_DROP = 0.006  # QAT at QAT_WEIGHT_BITS may lose at most this much accuracy vs the fine-tuned float32 MLP
MIN_QAT_GAIN = 0.0  # QAT must beat PTQ at QAT_WEIGHT_BITS by at least this much accuracy
SEED = 0

# %% [markdown]
# ## Setup
#
# torchao is PyTorch's library for quantisation and other low-precision
# work; it replaces `torch.ao.quantization`. Importing it makes
# `torch.utils._pytree` log a warning about `register_constant()` on Enum
# subclasses (torchao 0.18 with torch 2.14; harmless). It goes to stderr, so
# we catch it and print it once, and keep that logger quiet afterwards
# because parts of torchao imported later log the same line.

# %%
import contextlib
import copy
import io
import logging
import math
import os
import time
import warnings

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
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
        Int8DynamicActivationInt8WeightConfig,
        Int8DynamicActivationIntxWeightConfig,
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

generator = seed_everything(SEED)
device = pick_device()
report = ChapterReport("23_quantization")
notebook_start = time.perf_counter()
out_dir = build_dir() / "23_quantization"
out_dir.mkdir(parents=True, exist_ok=True)
print(f"torch {torch.__version__}, torchao {torchao.__version__}, device {device}, {torch.get_num_threads()} CPU threads")
print("everything below runs on the CPU: the int8 kernels compared here are CPU kernels")

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

# %% [markdown]
# Each bit halves the step, so the error falls by about half per bit (a
# straight line on the log scale). The channels' ranges differ by a factor
# of more than ten, and per-channel scales make the error several times
# smaller at every bit width. At 8 bits the error is under 1% even per
# tensor; at 2 to 4 bits the choices matter.

# %%
per_tensor_8 = errors["per-tensor, symmetric"][-1]
per_channel_8 = errors["per-channel, symmetric"][-1]
assert per_channel_8 < per_tensor_8, "per-channel scales should give a smaller error than one scale for the tensor"
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


rows = []  # the summary table at the end: one dict per model and method
mnist_bench = mnist_test_x[:BENCH_BATCH]
mlp_float_bytes = file_size(mlp, "mlp_float32")
mlp_float_time = latency(mlp, mnist_bench, "MLP float32")
rows.append(dict(model="MLP", method="float32", bytes=mlp_float_bytes, ms=mlp_float_time.median_ms, metric=mlp_float_acc))
mlp_dynamic_bytes = file_size(mlp_dynamic, "mlp_int8_dynamic_torchao")
mlp_dynamic_time = latency(mlp_dynamic, mnist_bench, "MLP int8 dynamic (torchao)")
rows.append(dict(model="MLP", method="int8 dynamic, torchao", bytes=mlp_dynamic_bytes, ms=mlp_dynamic_time.median_ms,
                 metric=mlp_dynamic_acc))
print(f"file: {mlp_float_bytes / 1e3:,.0f} kB -> {mlp_dynamic_bytes / 1e3:,.0f} kB "
      f"({mlp_dynamic_bytes / mlp_float_bytes:.2f}x), e.g. {rel(out_dir / 'mlp_int8_dynamic_torchao.pt')}")
print(mlp_float_time)
print(mlp_dynamic_time)

# %% [markdown]
# The file is about a quarter of the size: one byte per weight instead of
# four, plus one float scale per output channel. The accuracy barely moves.
# Now compare the two timings above. Expect the int8 model to be *slower*
# on a CPU, several times over when the notebook was built. That is not a
# measuring mistake. In eager mode on a CPU, torchao's int8 linear
# multiplies the int8 matrices by converting them to int32 and calling a
# plain `torch.matmul` (`safe_int_mm` in `torchao/kernel/intmm.py`), and
# there are no fast int32 matrix kernels; its fast int8 kernels are the
# CUDA ones (`torch._int_mm`) and the code `torch.compile` generates.
# Quantising each batch of activations also costs time. Whether int8 is
# faster depends on three things:
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
# kernels, so its timing is the one to compare with float32.

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
                 ms=mlp_legacy_time.median_ms, metric=mlp_legacy_acc))
rows.append(dict(model="LSTM", method="float32", bytes=lstm_float_bytes, ms=lstm_float_time.median_ms, metric=lstm_float_mse))
rows.append(dict(model="LSTM", method="int8 dynamic, legacy torch.ao", bytes=lstm_dynamic_bytes,
                 ms=lstm_dynamic_time.median_ms, metric=lstm_dynamic_mse))
print(f"LSTM: test MSE {lstm_float_mse:.5f} -> {lstm_dynamic_mse:.5f}, file {lstm_float_bytes / 1e3:.0f} kB -> "
      f"{lstm_dynamic_bytes / 1e3:.0f} kB ({lstm_dynamic_bytes / lstm_float_bytes:.2f}x)")
print(f"MLP (legacy): accuracy {mlp_legacy_acc:.2%}, file {mlp_legacy_bytes / mlp_float_bytes:.2f}x of float32")
for t in (lstm_float_time, lstm_dynamic_time, mlp_float_time, mlp_legacy_time):
    print(t)

# %% [markdown]
# The legacy MLP calls fbgemm's int8 matrix multiply, so its latency tells
# you what real int8 kernels do on this particular CPU: far faster than
# torchao's eager int8 path, and about as fast as float32 or faster,
# depending on the CPU's int8 instructions and the layer sizes. Timings of a few milliseconds are noisy on a shared machine,
# so read the medians and their IQRs together, and rerun the cell before
# trusting a small difference. The LSTM's time goes into the step-by-step
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

# %% [markdown]
# The accuracy is within a fraction of a point. What does the converted
# model look like? A graph in which each convolution's input goes through
# `quantize_per_tensor` → `dequantize_per_tensor`, and its weight is an int8
# constant with per-channel scales that is dequantised before a float
# convolution. This **reference representation** computes exactly what the
# int8 model computes, but in float: run eagerly it does all the float work
# of the original *plus* the quantise and dequantise ops, so expect it to be
# slower (it was, when the notebook was built; compare the two timings
# below). The int8
# kernels come in when a backend lowers the pattern
# `dequantize → conv → quantize` to a single int8 convolution: for x86 that
# is `torch.compile` (inductor with oneDNN), which fuses those patterns;
# other backends (ExecuTorch for phones, for instance) do their own lowering.

# %%
cifar_bench = cifar_x[:BENCH_BATCH]
resnet_float_time = latency(resnet_float, cifar_bench, "ResNet-20 float32")
resnet_int8_time = latency(resnet_int8, cifar_bench, "ResNet-20 int8 PT2E, eager")
print(resnet_float_time)
print(resnet_int8_time)
if COMPILE:
    with torch.no_grad():
        start = time.perf_counter()
        resnet_float_compiled = torch.compile(resnet_float)
        resnet_float_compiled(cifar_bench)
        resnet_int8_compiled = torch.compile(resnet_int8)
        resnet_int8_compiled(cifar_bench)
        print(f"compiling both took {time.perf_counter() - start:.0f} s")
    print(latency(resnet_float_compiled, cifar_bench, "ResNet-20 float32, compiled"))
    print(latency(resnet_int8_compiled, cifar_bench, "ResNet-20 int8 PT2E, compiled"))
else:
    print("COMPILE = False: skipping torch.compile of the PT2E model (minutes of compiling on 2 CPU cores; set it to True)")

# %% [markdown]
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
# The graph module still carries the original float parameters (the
# convolution weights, the BatchNorm parameters and statistics) as
# attributes, though no node of the graph reads them any more: convert
# folded BatchNorm into the weights and stored those as new int8 constants.
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
rows.append(dict(model="ResNet-20", method="float32", bytes=resnet_float_bytes, ms=resnet_float_time.median_ms,
                 metric=resnet_float_acc))
rows.append(dict(model="ResNet-20", method="int8 static PT2E (eager)", bytes=resnet_int8_bytes,
                 ms=resnet_int8_time.median_ms, metric=resnet_int8_acc))

# %% [markdown]
# For deployment you would save the whole program instead, with
# `torch.export.save(torch.export.export(resnet_int8, ...), "model.pt2")`,
# which keeps the graph as well as the weights.
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


mlp_tuned = fine_tune(copy.deepcopy(mlp), QAT_STEPS, seed=SEED + 1)
mlp_tuned_acc = mnist_accuracy(mlp_tuned)
mlp_ptq = copy.deepcopy(mlp_tuned)
quantize_(mlp_ptq, qat_config)
mlp_ptq_acc = mnist_accuracy(mlp_ptq)

mlp_qat = copy.deepcopy(mlp)
quantize_(mlp_qat, QATConfig(qat_config, step="prepare"))
print("after prepare:", type(mlp_qat.net[1]).__name__, "with", type(mlp_qat.net[1].weight_fake_quantizer).__name__)
start = time.perf_counter()
fine_tune(mlp_qat, QAT_STEPS, seed=SEED + 1)
qat_seconds = time.perf_counter() - start
mlp_qat_fake_acc = mnist_accuracy(mlp_qat)
quantize_(mlp_qat, QATConfig(qat_config, step="convert"))
mlp_qat_acc = mnist_accuracy(mlp_qat)
print("after convert:", type(mlp_qat.net[1]).__name__, "with weight", type(mlp_qat.net[1].weight).__name__)
print(f"{QAT_STEPS} QAT steps took {qat_seconds:.1f} s")
ptq_drop, qat_drop = mlp_tuned_acc - mlp_ptq_acc, mlp_tuned_acc - mlp_qat_acc
print(f"float32, fine-tuned (the baseline):        {mlp_tuned_acc:.2%}")
print(f"PTQ, int{QAT_WEIGHT_BITS} weights:                       {mlp_ptq_acc:.2%}  ({-100 * ptq_drop:+.2f} points)")
print(f"QAT, fake-quantised (before convert):      {mlp_qat_fake_acc:.2%}")
print(f"QAT, int{QAT_WEIGHT_BITS} weights after convert:         {mlp_qat_acc:.2%}  ({-100 * qat_drop:+.2f} points)")
mlp_qat_bytes = file_size(mlp_qat, f"mlp_int{QAT_WEIGHT_BITS}_qat")
mlp_qat_time = latency(mlp_qat, mnist_bench, f"MLP int{QAT_WEIGHT_BITS} weights, QAT")
rows.append(dict(model="MLP", method="float32, fine-tuned (*)", bytes=file_size(mlp_tuned, "mlp_float32_tuned"),
                 ms=float("nan"), metric=mlp_tuned_acc))
rows.append(dict(model="MLP", method=f"int{QAT_WEIGHT_BITS} weights, PTQ (*)", bytes=file_size(mlp_ptq, "mlp_ptq"),
                 ms=float("nan"), metric=mlp_ptq_acc))
rows.append(dict(model="MLP", method=f"int{QAT_WEIGHT_BITS} weights, QAT (*)", bytes=mlp_qat_bytes, ms=mlp_qat_time.median_ms,
                 metric=mlp_qat_acc))

# %% [markdown]
# Compare each quantised model with the *fine-tuned* float32 model, not
# with the original: all three had the same `QAT_STEPS` extra steps, which
# by themselves raise the accuracy. The fake-quantised model and the
# converted one agree: QAT simulated exactly the rounding that convert then
# applied. With 2-bit weights (four levels per output channel) PTQ loses
# accuracy, while QAT stays close to the fine-tuned float32 model (the
# points printed above). On this easy task the difference between the two
# is under a point, because the MLP tolerates coarse weights well; on
# harder tasks and larger models the gap at 2 to 4 bits is usually much
# larger. The price of QAT is training time (the fake quantisers slow each
# step down) and having the training data and loop at hand; with int8 on
# most models, PTQ is enough.
#
# ## The table

# %%
print(f"{'model':10s} {'method':32s} {'file kB':>8s} {'vs float':>8s} {'ms/batch':>9s}  accuracy or test MSE")
float_bytes = {}
for row in rows:
    if row["method"] == "float32":
        float_bytes[row["model"]] = row["bytes"]
    ratio = row["bytes"] / float_bytes[row["model"]]
    ms = "-" if math.isnan(row["ms"]) else f"{row['ms']:.2f}"
    metric = f"MSE {row['metric']:.5f}" if row["model"] == "LSTM" else f"{row['metric']:.2%}"
    print(f"{row['model']:10s} {row['method']:32s} {row['bytes'] / 1e3:8.0f} {ratio:7.2f}x {ms:>9s}  {metric}")
print(f"latency: median of one batch of {BENCH_BATCH} on {torch.get_num_threads()} CPU threads, eager mode")
print(f"(*) fine-tuned for {QAT_STEPS} more steps: compare these rows with each other, not with the first MLP rows")

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

# %% [markdown]
# ## Checks
#
# What the chapter claims: int8 keeps the accuracy within
# `MAX_ACCURACY_DROP`, and makes the file smaller than `MAX_SIZE_RATIO` of
# the float32 one, for each method; the int8 LSTM forecasts nearly as well;
# at `QAT_WEIGHT_BITS`-bit weights QAT stays within `MAX_QAT_DROP` of the
# fine-tuned float32 MLP and does at least as well as PTQ. No speed-up is
# asserted: it depends on the machine, as the table shows.

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
assert qat_drop <= MAX_QAT_DROP, (
    f"QAT at int{QAT_WEIGHT_BITS} weights lost {qat_drop:.2%} against the fine-tuned float32 MLP, "
    f"more than MAX_QAT_DROP = {MAX_QAT_DROP}"
)
assert mlp_qat_acc >= mlp_ptq_acc + MIN_QAT_GAIN, (
    f"QAT ({mlp_qat_acc:.2%}) should beat PTQ ({mlp_ptq_acc:.2%}) by at least {MIN_QAT_GAIN} at int{QAT_WEIGHT_BITS} weights"
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
# Two images were about as good as the full calibration set when the
# notebook was built: this
# network's activation ranges
# vary little from image to image, and the x86 quantizer's activation
# observer looks at a histogram, not only at the extremes. Do not count on
# that; a few hundred representative inputs cost seconds. Calibrating on
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
# for signed `num_bits`-bit integers, as in the worked example: widen
# `[x.min(), x.max()]` to include 0, `scale = (hi - lo) / (qmax - qmin)`,
# `zero_point = qmin - round(lo / scale)` (an int),
# `q = clamp(round(x / scale) + zero_point, qmin, qmax)` (an integer tensor).


# %%
def quantize_asymmetric(x, num_bits):
    raise NotImplementedError("compute lo, hi, scale, zero_point, then q")


result = check("23.quantize_asymmetric", quantize_asymmetric)

# %% [markdown]
# ### 2. Symmetric per-channel scales
#
# Write `per_channel_scales(weight, num_bits)` returning one scale per
# output channel (dim 0), for a Linear weight `[out, in]` or a convolution
# weight `[out, in, kh, kw]`: the largest absolute value of the channel
# divided by `(qmax - qmin) / 2` (127.5 for int8, the convention of torchao
# and PyTorch's observers).


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
# - **QAT** simulates the rounding during fine-tuning; at low bit widths,
#   where PTQ loses accuracy, it keeps the model close to float32.
# - Files shrink to about a quarter (measure them: a converted graph can keep
#   its float weights). Speed depends on kernels and hardware: in eager mode
#   on a CPU only the legacy fbgemm path runs int8 kernels; torchao's int8
#   and the PT2E reference graph need `torch.compile` (or another backend)
#   to be fast.
#
# **Next:** chapter 24 packs the training loop of this course into PyTorch
# Lightning.

# %%
print(f"notebook ran in {time.perf_counter() - notebook_start:.0f} s")
report.finish()
