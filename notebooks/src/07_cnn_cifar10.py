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
# # 07 · A CNN on CIFAR-10
#
# Chapter 05's MLP flattened each image into a list of unrelated numbers. A
# **convolutional neural network** (CNN) keeps the image a grid: each layer
# slides small filters over it, so the same pattern detector is used at
# every position and neighbouring pixels are looked at together. This chapter
# trains a small CNN on CIFAR-10, colour photographs of ten kinds of objects,
# and then loads a ResNet-20 that others trained much longer, with its
# published weights, to see what a well-trained CNN reaches.
#
# **What you will learn**
# - CIFAR-10 as tensors, and data augmentation with `torchvision.transforms.v2`
#   (a grid of augmented images), plus a fast per-image augmentation on whole
#   batches;
# - the shape arithmetic of convolution and pooling, checked against real
#   layers, and a walk through a VGG-style network layer by layer;
# - training that network, with BatchNorm, on the data at hand, and spatial
#   dropout (`nn.Dropout2d`) for feature maps;
# - loading published weights safely (`torch.load(weights_only=True)`,
#   `strict=True`), the `module.` prefix, and input normalisation;
# - feature maps (with forward hooks) and a confusion matrix;
# - three mistakes: forgetting `model.eval()` with BatchNorm, the wrong
#   channel order, and a checkpoint whose keys do not match.
#
# **Prerequisites:** chapters 01 to 05 (tensors, autograd, `nn.Module`,
# the training loop, `helpers.training`).
#
# **Estimated time:** 65 minutes.

# %% tags=["parameters"]
EPOCHS = 3  # passes over the training images
BATCH_SIZE = 64  # images per optimizer step
LR = 2e-3  # AdamW's learning rate in the first epoch (a cosine schedule lowers it towards 0, reached after the last)
WEIGHT_DECAY = 5e-4  # AdamW's decoupled weight decay
WIDTHS = (16, 32, 64)  # channels of the three VGG stages (VGGNet's default (32, 64, 128) costs 4x more)
TRAIN_IMAGES = 6000  # train on at most the first this many training images; None: all (4,000 in the subset, 50,000 in the full set)
TEST_IMAGES = 2000  # test on at most the first this many test images; None: all (1,000 in the subset, 10,000 in the full set)
MIN_CNN_ACCURACY = 0.40  # the CNN's test accuracy the checks require (chance is 0.10)
MAX_TRAIN_TEST_GAP = 0.10  # largest train-minus-test accuracy the checks allow (holds for the default short run)
GROUP_CHECK_ACCURACY = 0.35  # check that our CNN finds the vehicles easier only when its test accuracy reaches this
MIN_VEHICLE_MARGIN = 0.05  # ... and then by at least this much (vehicle accuracy minus animal accuracy)
MIN_RESNET_ACCURACY = 0.90  # the pretrained ResNet-20's test accuracy the checks require
MIN_AUGMENT_SPEEDUP = 2.0  # how many times faster augment_batch must be than the per-image v2 pipeline
MIN_CROP_FLIP_SPEEDUP = 1.0  # ... and than v2 crop + flip alone, per image, on the same float tensors (it must win)
EXTRA_DEPTHS = ()  # also evaluate these pretrained ResNets, e.g. (32, 44, 56): seconds each on a CPU
SEED = 0

# %% [markdown]
# ## Setup

# %%
import copy
import math
import textwrap
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present
from torch.utils.data import DataLoader, TensorDataset
from torchvision.transforms import v2

from helpers.data import CIFAR10_CLASSES, cifar10, resnet_cifar_checkpoint
from helpers.device import pick_device, seed_everything
from helpers.exercises import check, solution  # noqa: F401  (solution: for when you are stuck)
from helpers.models import (
    RESNET_CIFAR_MEAN,
    RESNET_CIFAR_STD,
    ResNetCIFAR,
    VGGNet,
    count_parameters,
    load_resnet_cifar,
)
from helpers.plotting import image_grid, plot_confusion_matrix, plot_history
from helpers.report import ChapterReport
from helpers.training import confusion_matrix, evaluate, fit, predict

generator = seed_everything(SEED)
device = pick_device()
report = ChapterReport("07_cnn_cifar10")
notebook_start = time.perf_counter()
print(f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} CPU threads")

# %% [markdown]
# ## The data
#
# CIFAR-10 (Krizhevsky, 2009) has 60,000 colour images of 32×32 pixels in
# ten classes: 50,000 for training and 10,000 for testing. The full set is a
# 170 MB download. So that the course also runs offline, its data mirror
# carries a **subset** of it: 4,000 training and 1,000 test images, with
# their original pixels and labels. `helpers.data.cifar10(train)` uses the
# full set where it is on disk or can be downloaded, and the subset
# otherwise, and tells you which one you got. Every figure below depends on
# it, so the notebook prints it, with the number of images it has and the
# number it trains on. Training time grows with the number of images, and
# the full set has 12.5 times as many as the subset, so each epoch would
# take about 12.5 times as long. So by default the chapter trains on at
# most `TRAIN_IMAGES = 6000` of them: all 4,000 of the subset, or the first
# 6,000 of the full set's 50,000. `TRAIN_IMAGES = None` trains on all of
# them. The test images cost time too: `fit` evaluates the network on them
# after every epoch, and the ResNet below evaluates them once more. So the
# chapter tests on at most `TEST_IMAGES = 2000`: all 1,000 of the subset, or
# the first 2,000 of the full set's 10,000 (`TEST_IMAGES = None` uses all of
# them, which makes every evaluation 5 times longer than with 2,000).

# %%
train_raw, which = cifar10(train=True)
test_raw, test_which = cifar10(train=False)
assert which == test_which, "training and test images should come from the same version"
_ = report.record("CIFAR-10 data in use", which)
data_name = "the full set" if which == "full" else "the offline subset"
n_train = len(train_raw) if TRAIN_IMAGES is None else min(TRAIN_IMAGES, len(train_raw))
n_test = len(test_raw) if TEST_IMAGES is None else min(TEST_IMAGES, len(test_raw))
print(f"data in use: CIFAR-10, {data_name} (which = {which!r}), "
      f"{len(train_raw):,} training / {len(test_raw):,} test images; "
      f"training on {n_train:,} of them (TRAIN_IMAGES = {TRAIN_IMAGES}), "
      f"testing on {n_test:,} (TEST_IMAGES = {TEST_IMAGES})")
print(f".data:    numpy {train_raw.data.shape} {train_raw.data.dtype}  (N, height, width, channels)")
print(f".targets: a list of {len(train_raw.targets):,} ints")
print("training images per class:", torch.bincount(torch.tensor(train_raw.targets)).tolist())

# %% [markdown]
# The pixels are stored **channels last** (HWC: height, width, channel), the
# way image files and NumPy do it. PyTorch's convolution layers want
# **channels first**: `[N, C, H, W]`. Keep this in mind; *Pitfalls* shows
# what happens when they get mixed up.
#
# A look at the first 16 training images. `helpers.plotting.image_grid`
# stretches every image to full contrast, which suits feature maps (below)
# but would hide the brightness and contrast changes of the augmentations
# we look at next; this small function draws the true colours instead:


# %%
def show_rgb(images, titles=None, ncols=8, cell_inches=1.1, suptitle=None):
    """Draw RGB images [N, 3, H, W] (uint8 0-255 or float 0-1) with their true colours, in a grid."""
    images = images.detach().cpu()
    if images.is_floating_point():
        images = images.clamp(0, 1)
    nrows = math.ceil(len(images) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(ncols * cell_inches, nrows * cell_inches * 1.15), squeeze=False)
    for i, ax in enumerate(axes.flat):
        ax.axis("off")
        if i < len(images):
            ax.imshow(images[i].permute(1, 2, 0).numpy(), interpolation="nearest")  # matplotlib wants HWC
            if titles is not None and titles[i]:
                ax.set_title(titles[i], fontsize=8)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


first = torch.from_numpy(train_raw.data[:16]).permute(0, 3, 1, 2)  # HWC -> CHW
show_rgb(first, titles=[CIFAR10_CLASSES[t] for t in train_raw.targets[:16]], cell_inches=1.0)
plt.show()

# %% [markdown]
# ### As tensors, once
#
# As in chapter 05, we convert the images to one float tensor up front
# instead of running a per-image pipeline in every epoch: `permute` moves
# the channels first, and dividing by 255 maps the pixels to [0, 1]. Then
# the per-channel mean and standard deviation of the *training* images,
# for normalisation (chapter 05 derived MNIST's single pair the same way).


# %%
def to_tensors(raw, limit):
    """The first `limit` images (None = all) as float [N, 3, 32, 32] in [0, 1], and labels int64 [N]."""
    images = torch.from_numpy(raw.data[:limit]).permute(0, 3, 1, 2).float().div(255).contiguous()
    return images, torch.tensor(raw.targets[:limit])


train_01, train_y = to_tensors(train_raw, n_train)
test_01, test_y = to_tensors(test_raw, n_test)
CIFAR_MEAN = train_01.mean(dim=(0, 2, 3))  # one value per channel: R, G, B
CIFAR_STD = train_01.std(dim=(0, 2, 3))
assert (len(train_y), len(test_y)) == (n_train, n_test), "the tensors should hold the images announced above"
print(f"used here: {n_train:,} of the {len(train_raw):,} training images, {n_test:,} of the {len(test_raw):,} test images")
print(f"training tensor {tuple(train_01.shape)}, test tensor {tuple(test_01.shape)}")
print("per-channel mean:", [round(v, 4) for v in CIFAR_MEAN.tolist()])
print("per-channel std: ", [round(v, 4) for v in CIFAR_STD.tolist()])
print("values often quoted for the full training set: mean [0.4914, 0.4822, 0.4465], std [0.247, 0.2435, 0.2616]")


def normalise(images, mean, std):
    """(images - mean) / std, per channel, for images [N, 3, H, W]."""
    return (images - torch.as_tensor(mean).view(1, 3, 1, 1)) / torch.as_tensor(std).view(1, 3, 1, 1)


train_x = normalise(train_01, CIFAR_MEAN, CIFAR_STD)
test_x = normalise(test_01, CIFAR_MEAN, CIFAR_STD)

# %%
quoted_mean, quoted_std = torch.tensor([0.4914, 0.4822, 0.4465]), torch.tensor([0.2470, 0.2435, 0.2616])
assert (CIFAR_MEAN - quoted_mean).abs().max() < 0.03 and (CIFAR_STD - quoted_std).abs().max() < 0.03, (
    "the per-channel statistics should be close to the full training set's"
)

# %% [markdown]
# ## Data augmentation
#
# A few thousand training images are few for a network with tens of
# thousands of weights (and even the full set's 50,000 are not many): with
# enough epochs it could memorise them (this chapter does not run that long). **Data augmentation** shows the
# network a slightly different version of each image in every epoch, made
# with changes that do not alter the label: a cat shifted by a few pixels,
# mirrored, or in different light is still a cat. The aim is a training set
# that is in effect larger, and a network that learns to ignore those
# changes; this chapter does not run a control without augmentation, so it
# does not measure how much that helps here.
#
# `torchvision.transforms.v2` is the current transforms API; torchvision's
# documentation recommends it over the older `torchvision.transforms`, which
# still works. Each transform is
# a callable that draws its random parameters anew on every call. The grid
# applies a few common ones to the same four training images, one column
# per transform:
#
# - `RandomCrop(32, padding=4)`: pad 4 black pixels on every side, then cut
#   a random 32×32 window: a shift of up to 4 pixels. The standard CIFAR
#   augmentation, with the horizontal flip.
# - `RandomHorizontalFlip()`: mirror left-right with probability 0.5 (here
#   `p=1`, always). Vertical flips are usually left out for photos:
#   upside-down ships are rare in CIFAR-10's test images too.
# - `ColorJitter`: random brightness, contrast, saturation and hue.
# - `RandomRotation(15)`: up to ±15 degrees; the corners fill with black.
# - `RandomResizedCrop(32, scale=(0.5, 1))`: zoom in on a random part.
# - `RandomErasing(p=1)`: Random Erasing (Zhong et al., 2017; AAAI 2020)
#   overwrites a random rectangle of 2 % to 33 % of the image (with 0, black,
#   by default; `value="random"` fills it with noise as in the paper), so that
#   the network cannot rely on a single part of the object. It is similar to
#   Cutout (DeVries & Taylor, 2017), which blanks a fixed-size square.
# - `AutoAugment(CIFAR10)`: the policy that Cubuk et al. (2019) searched for
#   CIFAR-10. It holds 25 sub-policies of two operations each (such as
#   "rotate, then translate"), every operation with its own probability and
#   strength; each call picks one sub-policy at random and applies it.

# %%
augmentations = {
    "original": v2.Identity(),
    "RandomCrop\npadding=4": v2.RandomCrop(32, padding=4),
    "HorizontalFlip\np=1": v2.RandomHorizontalFlip(p=1.0),
    "ColorJitter": v2.ColorJitter(brightness=0.5, contrast=0.5, saturation=0.5, hue=0.1),
    "RandomRotation\n15°": v2.RandomRotation(15),
    "RandomResized\nCrop": v2.RandomResizedCrop(32, scale=(0.5, 1.0)),
    "RandomErasing": v2.RandomErasing(p=1.0),
    "AutoAugment\nCIFAR10": v2.AutoAugment(v2.AutoAugmentPolicy.CIFAR10),
}
torch.manual_seed(SEED)  # v2 transforms draw from torch's global random generator
examples = [0, 4, 7, 9]
cells, titles = [], []
for row, index in enumerate(examples):
    image = torch.from_numpy(train_raw.data[index]).permute(2, 0, 1)  # uint8 [3, 32, 32]
    for name, transform in augmentations.items():
        cells.append(transform(image))
        titles.append(name if row == 0 else "")
show_rgb(torch.stack(cells), titles=titles, ncols=len(augmentations), cell_inches=0.95)
plt.show()

# %% [markdown]
# In the usual setup these transforms run per image, inside the dataset:
# `cifar10(train=True, transform=pipeline)`, and a `DataLoader` calls the
# pipeline for each image of each batch, every epoch:

# %%
per_image_pipeline = v2.Compose(
    [
        v2.ToImage(),  # PIL image -> uint8 tensor [3, 32, 32]
        v2.RandomCrop(32, padding=4),
        v2.RandomHorizontalFlip(),
        v2.ToDtype(torch.float32, scale=True),  # uint8 0-255 -> float 0-1
        v2.Normalize(mean=CIFAR_MEAN.tolist(), std=CIFAR_STD.tolist()),
    ]
)
print("one image through the pipeline:", tuple(per_image_pipeline(train_raw[0][0]).shape))

# %% [markdown]
# ### Augmenting whole batches
#
# That is a lot of Python per image on a 2-core CPU, for the same training
# images every epoch. The two standard augmentations are cheap to do for a
# whole batch of tensors at once. Can we simply call the v2 transforms on a
# batch `[B, 3, 32, 32]`? They accept it, but they draw **one** set of random
# parameters per call and apply it to every image in the batch:

# %%
torch.manual_seed(SEED)
batch = train_x[:BATCH_SIZE]
flip = v2.RandomHorizontalFlip()
for call in range(5):
    out = flip(batch)
    n_flipped = sum(torch.equal(o, b.flip(-1)) for o, b in zip(out, batch))
    print(f"RandomHorizontalFlip on a batch, call {call}: {n_flipped} of {len(batch)} images flipped")
    assert n_flipped in (0, len(batch)), "expected all or none"
crop = v2.RandomCrop(32, padding=4)
padding_masks = crop(torch.ones(BATCH_SIZE, 3, 32, 32)) == 0  # where the black border ended up
same_shift = all(torch.equal(mask, padding_masks[0]) for mask in padding_masks)
print(f"RandomCrop on a batch: every image shifted by the same offset: {same_shift}")
assert same_shift

# %% [markdown]
# All or nothing: the network would see whole batches shifted the same
# way, which is much less variety than it should get. So here is the same
# augmentation with tensor operations, drawn **independently for every
# image**:
#
# - **crop**: `F.pad` adds the 4-pixel border to the whole batch; then each
#   image gets its own random top-left corner. Advanced indexing with three
#   index tensors (image, row, column) cuts all the windows in one go;
# - **flip**: one random bit per image; `torch.where` picks the flipped or
#   the original image.
#
# Our images are normalised, so the zero padding is the *average* colour
# rather than black; either works.


# %%
def augment_batch(images, generator, padding=4):
    """Random crop with zero padding, then a random horizontal flip, drawn per image.

    images: float [B, C, H, W] -> a new float [B, C, H, W].
    """
    B, C, H, W = images.shape
    padded = F.pad(images, (padding, padding, padding, padding))  # [B, C, H + 2p, W + 2p]
    top = torch.randint(0, 2 * padding + 1, (B,), generator=generator)
    left = torch.randint(0, 2 * padding + 1, (B,), generator=generator)
    rows = (top[:, None] + torch.arange(H))[:, :, None]  # [B, H, 1]
    cols = (left[:, None] + torch.arange(W))[:, None, :]  # [B, 1, W]
    which_image = torch.arange(B)[:, None, None]  # [B, 1, 1]
    # The three index tensors broadcast to [B, H, W]; the channel slice ':' becomes the last dimension.
    cropped = padded[which_image, :, rows, cols].permute(0, 3, 1, 2).contiguous()  # [B, C, H, W]
    flip = torch.rand(B, generator=generator) < 0.5
    return torch.where(flip[:, None, None, None], cropped.flip(-1), cropped)


augmented = augment_batch(train_x[:1].expand(16, -1, -1, -1), torch.Generator().manual_seed(SEED))
shown = augmented * CIFAR_STD.view(1, 3, 1, 1) + CIFAR_MEAN.view(1, 3, 1, 1)  # undo the normalisation to draw
show_rgb(shown, ncols=8, cell_inches=0.9, suptitle="augment_batch on 16 copies of the first training image")
plt.show()

# %% [markdown]
# Each copy got its own shift and flip. To check that with numbers rather
# than by eye, we augment a probe batch of 64 identical "images" whose
# pixels hold their own position, `32 · row + column + 1`. Along a row of
# the result the numbers run up by 1 (not flipped) or down by 1 (flipped),
# and every different crop window gives a different image. The same probe
# goes through the v2 crop and flip, called on the whole batch, for
# comparison:

# %%
# NBVAL_CHECK_OUTPUT
probe = (torch.arange(32 * 32, dtype=torch.float32) + 1).view(1, 1, 32, 32).expand(64, 3, 32, 32)


def flips_and_distinct(out):
    """How many of the augmented probes run backwards along a row (flipped), and how many differ."""
    steps = out[:, 0, 16, 8:24].diff(dim=1)  # the middle of the middle row: inside the image for any shift
    assert ((steps == 1).all(dim=1) | (steps == -1).all(dim=1)).all(), "every row should run up or down by 1"
    return int((steps == -1).all(dim=1).sum()), len(torch.unique(out.flatten(1), dim=0))


n_flipped, n_distinct = flips_and_distinct(augment_batch(probe, torch.Generator().manual_seed(SEED)))
torch.manual_seed(SEED)  # the v2 transforms draw from torch's global generator
v2_crop_flip = v2.Compose([v2.RandomCrop(32, padding=4), v2.RandomHorizontalFlip()])
v2_flipped, v2_distinct = flips_and_distinct(v2_crop_flip(probe))
print(f"augment_batch on 64 copies: {n_flipped} of 64 flipped, {n_distinct} distinct results")
print(f"v2 crop + flip on the batch: {v2_flipped} of 64 flipped, {v2_distinct} distinct result(s)")
assert 0 < n_flipped < 64 and n_distinct > 32, "augment_batch should draw a flip and a crop for every image"
assert v2_flipped in (0, 64) and v2_distinct == 1, "v2 on a batch should apply one draw to every image"

# %% [markdown]
# How much faster is it than the per-image pipeline? The per-image pipeline
# does more than crop and flip: `ToImage`, `ToDtype` and `Normalize` run for
# every image, every epoch, where the batch version works on tensors that
# were converted and normalised once, up front. So we time it twice: the whole
# pipeline, as a `DataLoader` would run it, and, like for like, only the v2
# crop and flip, per image, on the same normalised tensors that
# `augment_batch` gets. Each on the same 1,024 images, one call at a time, on
# one thread (as in a `DataLoader` worker), keeping the fastest call of each
# over three passes over the images:
# other programs on the machine can only slow a call down, so the minimum
# is the time that says most about the code (the advice of Python's
# `timeit`):

# %%
n_timed = min(1024, len(train_raw), len(train_x))


def fastest_seconds(fn, calls, passes=3):
    """The fastest wall time, in seconds, of fn(i) over the given call arguments, in `passes` passes."""
    best = math.inf
    for _ in range(passes):
        for i in calls:
            start = time.perf_counter()
            fn(i)
            best = min(best, time.perf_counter() - start)
    return best


threads = torch.get_num_threads()
torch.set_num_threads(1)
per_image_ms = 1000 * n_timed * fastest_seconds(lambda i: per_image_pipeline(train_raw[i][0]), range(n_timed))
crop_flip_ms = 1000 * n_timed * fastest_seconds(lambda i: v2_crop_flip(train_x[i]), range(n_timed))
starts = range(0, n_timed, BATCH_SIZE)
batch_ms = 1000 * len(starts) * fastest_seconds(lambda k: augment_batch(train_x[k : k + BATCH_SIZE], generator), starts)
torch.set_num_threads(threads)
augment_speedup, crop_flip_speedup = per_image_ms / batch_ms, crop_flip_ms / batch_ms
print(f"{n_timed} images, augment_batch in batches of {BATCH_SIZE}: {batch_ms:.0f} ms")
print(f"  per-image v2 pipeline (ToImage, crop, flip, ToDtype, Normalize): {per_image_ms:4.0f} ms, "
      f"{augment_speedup:4.1f} times the batch time (the checks require > MIN_AUGMENT_SPEEDUP = {MIN_AUGMENT_SPEEDUP})")
print(f"  per-image v2 crop + flip only, on the same float tensors:      {crop_flip_ms:4.0f} ms, "
      f"{crop_flip_speedup:4.1f} times the batch time (the checks require > MIN_CROP_FLIP_SPEEDUP = {MIN_CROP_FLIP_SPEEDUP})")
_ = report.record("augment_batch speed-up over the per-image v2 pipeline", augment_speedup, "x", digits=1)
_ = report.record("augment_batch speed-up over per-image v2 crop + flip", crop_flip_speedup, "x", digits=1)
assert augment_speedup > MIN_AUGMENT_SPEEDUP, (
    f"augment_batch was only {augment_speedup:.1f}x faster than the per-image pipeline, "
    f"less than MIN_AUGMENT_SPEEDUP = {MIN_AUGMENT_SPEEDUP}"
)
assert crop_flip_speedup > MIN_CROP_FLIP_SPEEDUP, (
    f"augment_batch was only {crop_flip_speedup:.1f}x faster than v2 crop + flip per image on the same tensors, "
    f"less than MIN_CROP_FLIP_SPEEDUP = {MIN_CROP_FLIP_SPEEDUP}"
)

# %% [markdown]
# The batch version wins on both counts. Against the whole pipeline it
# saves the per-image conversions as well; like for like, on the crop and
# flip alone, a few large tensor operations still beat a thousand small
# calls, each of which pays Python's and the transform's overhead. The
# ratios depend on the machine and on what else runs on it (a busy machine
# can shrink the like-for-like ratio a lot), so the like-for-like check
# requires only that the batch version wins (`MIN_CROP_FLIP_SPEEDUP` = 1),
# and the whole-pipeline check a margin (`MIN_AUGMENT_SPEEDUP`); compare the
# numbers on your own machine.
#
# To feed `helpers.training.fit`, which loops over any iterable of
# `(x, y)` batches, a small class shuffles the tensors and augments each
# batch on the way out. `len()` gives the number of batches, like a
# `DataLoader`.


# %%
class AugmentedBatches:
    """Shuffled mini-batches (x, y) of two tensors, x passed through augment_batch; new draws every epoch.

    `first_image_versions` lists, for every pass that ran to the end, the augmented
    version of image 0 that it served, so that we can check the draws differ between epochs.
    """

    def __init__(self, images, labels, batch_size, generator):
        self.images, self.labels = images, labels
        self.batch_size, self.generator = batch_size, generator
        self.first_image_versions = []

    def __len__(self):
        return math.ceil(len(self.labels) / self.batch_size)

    def __iter__(self):
        order = torch.randperm(len(self.labels), generator=self.generator)
        for start in range(0, len(order), self.batch_size):
            index = order[start : start + self.batch_size]
            x = augment_batch(self.images[index], self.generator)
            if (index == 0).any():
                first_image = x[index == 0][0].clone()
            yield x, self.labels[index]
        self.first_image_versions.append(first_image)


train_batches = AugmentedBatches(train_x, train_y, BATCH_SIZE, generator)
test_loader = DataLoader(TensorDataset(test_x, test_y), batch_size=500)
x, y = next(iter(train_batches))
print(f"{len(train_batches)} batches per epoch; one batch: x {tuple(x.shape)} {x.dtype}, y {tuple(y.shape)} {y.dtype}")

# %% [markdown]
# ## Convolution shapes
#
# `nn.Conv2d(in_channels, out_channels, kernel_size)` slides
# `out_channels` filters, each of shape `[in_channels, k, k]`, over the
# input. At every position a filter gives one number: the sum of its weights
# times the pixels under it, over all input channels. The output is one map
# per filter: `[N, out_channels, H_out, W_out]`. Its spatial size follows from
# four settings:
#
# - `padding` p: zeros added on each side;
# - `stride` s: the step between two positions;
# - `dilation` d: the spacing between the kernel's taps, so a 3×3 kernel
#   with d = 2 spans 5 pixels: d·(k − 1) + 1 in general;
# - the kernel size k.
#
# The number of positions where the (dilated) kernel fits is
#
# $$H_\text{out} = \left\lfloor \frac{H_\text{in} + 2p - d\,(k-1) - 1}{s} \right\rfloor + 1,$$
#
# and the same for the width. Pooling layers (`nn.MaxPool2d`,
# `nn.AvgPool2d`) use the same formula; they take the maximum or the mean
# of the window, separately per channel, and have no weights. Let us check
# the formula against real layers:


# %%
# NBVAL_CHECK_OUTPUT
def formula(size, kernel, stride=1, padding=0, dilation=1):
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


settings = [  # (input size, kernel, stride, padding, dilation, what it is)
    (32, 3, 1, 1, 1, "3x3, padding 1: size kept ('same')"),
    (32, 3, 1, 0, 1, "3x3, no padding: loses a border"),
    (32, 3, 2, 1, 1, "3x3, stride 2: halves"),
    (31, 3, 2, 1, 1, "odd input, stride 2: floor"),
    (32, 5, 1, 2, 1, "5x5, padding 2"),
    (224, 7, 2, 3, 1, "ImageNet ResNet stem"),
    (32, 3, 1, 2, 2, "3x3, dilation 2, padding 2"),
    (32, 2, 2, 0, 1, "2x2 window, stride 2: pooling"),
]
print(f"{'in':>4} {'k':>2} {'s':>2} {'p':>2} {'d':>2} | {'formula':>7} {'Conv2d':>7} {'MaxPool2d':>9} | setting")
for size, k, s, p, d, what in settings:
    x = torch.zeros(1, 3, size, size)
    conv = nn.Conv2d(3, 8, k, stride=s, padding=p, dilation=d)(x).shape[-1]
    assert formula(size, k, s, p, d) == conv
    if p <= k // 2:  # MaxPool2d refuses padding wider than half its window
        pool = nn.MaxPool2d(k, stride=s, padding=p, dilation=d)(x).shape[-1]
        assert formula(size, k, s, p, d) == pool
    else:
        pool = "-"
    print(f"{size:>4} {k:>2} {s:>2} {p:>2} {d:>2} | {formula(size, k, s, p, d):>7} {conv:>7} {pool:>9} | {what}")

# %% [markdown]
# Two rules of thumb come out of the table: a 3×3 convolution with
# padding 1 keeps the size, and stride 2 (or a 2×2 pooling window) halves it,
# rounding down. VGG-style networks are built from exactly these two.
#
# A convolution's parameters do not depend on the image size at all:
# `out_channels × in_channels × k × k` weights plus `out_channels` biases.
# That weight sharing is why a CNN needs far fewer parameters than an MLP
# for the same image.

# %%
# NBVAL_CHECK_OUTPUT
conv = nn.Conv2d(3, 16, kernel_size=3, padding=1)
print(f"Conv2d(3, 16, 3): weight {tuple(conv.weight.shape)}, bias {tuple(conv.bias.shape)}, "
      f"{count_parameters(conv)} parameters = 16*3*3*3 + 16 = {16 * 3 * 3 * 3 + 16}")
print(f"Linear from a flattened 3x32x32 image to 16 outputs: {count_parameters(nn.Linear(3 * 32 * 32, 16)):,} parameters")
assert count_parameters(conv) == 16 * 3 * 3 * 3 + 16

# %% [markdown]
# ## A VGG-style network with BatchNorm
#
# The VGG networks (Simonyan & Zisserman, 2015) showed that a stack of
# plain 3×3 convolutions goes a long way. Our small version has three
# **stages**; each is two 3×3 convolutions that keep the size, then a 2×2
# max-pool that halves it, while the number of channels doubles from stage
# to stage. Every convolution is followed by **BatchNorm** and a ReLU.
#
# `nn.BatchNorm2d(C)` normalises each of the C channels to mean 0 and
# variance 1, then scales and shifts it with two learned parameters per
# channel. During training it uses the mean and variance of the current
# batch (over the images and all positions) and keeps running averages of
# them; in `eval()` mode it uses those running averages instead. This keeps
# the activations in a steady range however the weights before them change;
# in practice it lets deep networks train in fewer steps and with higher
# learning rates (Ioffe & Szegedy, 2015), though why it helps so much is
# still debated (Santurkar et al., 2018). Because
# BatchNorm subtracts the mean anyway, the convolution before it needs no
# bias (`bias=False`).
#
# After the last stage, `AdaptiveAvgPool2d(1)` averages each channel over
# all positions (*global average pooling*), so the classifier sees one
# number per channel whatever the image size. During training,
# `nn.Dropout(0.3)` then zeroes each of those numbers with probability 0.3
# and scales the others by 1/(1 − 0.3), so that the classifier cannot lean
# on any single channel; in `eval()` mode it passes everything through
# (chapter 12 treats dropout in depth). Written out:


# %%
def vgg_stage(in_channels, out_channels):
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False),  # keeps H x W
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
        nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),  # halves H x W
    )


widths = tuple(WIDTHS)
written_out_features = nn.Sequential(*[vgg_stage(i, o) for i, o in zip((3, *widths[:-1]), widths)])
written_out_head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.3), nn.Linear(widths[-1], 10))

# %% [markdown]
# `helpers.models.VGGNet` is this network, kept for reuse; with the same
# widths it has the same layers:

# %%
# NBVAL_CHECK_OUTPUT
model = VGGNet(widths=widths, num_classes=10, dropout=0.3)
same = repr(model.features) == repr(written_out_features) and repr(model.head) == repr(written_out_head)
print("VGGNet has the same layers as the written-out network:", same)
assert same

# %% [markdown]
# Here is what happens to one image on its way through, layer by layer.
# Watch the shapes: the 3×3 convolutions change only the number of channels,
# each max-pool halves the height and width, and the head turns 64 maps
# of 4×4 into 10 class scores.

# %%
# NBVAL_CHECK_OUTPUT
def describe(layer):
    """A short name for a layer, e.g. 'Conv2d 16->32 3x3 pad 1'."""
    if isinstance(layer, nn.Conv2d):
        k, p = layer.kernel_size[0], layer.padding[0]
        return f"Conv2d {layer.in_channels}->{layer.out_channels} {k}x{k} pad {p}"
    if isinstance(layer, nn.Linear):
        return f"Linear {layer.in_features}->{layer.out_features}"
    if isinstance(layer, nn.BatchNorm2d):
        return f"BatchNorm2d({layer.num_features})"
    if isinstance(layer, nn.MaxPool2d):
        return f"MaxPool2d({layer.kernel_size})"
    return type(layer).__name__


x = torch.zeros(1, 3, 32, 32)
print(f"{'':14}{'layer':<26}{'output shape':>17}{'parameters':>12}")
print(f"{'':14}{'input':<26}{str(tuple(x.shape)):>17}")
model.eval()  # BatchNorm uses its running statistics; the walk does not change them
with torch.no_grad():
    for name, layer in model.named_modules():
        if len(list(layer.children())) == 0:  # leaves only: the actual layers
            x = layer(x)
            print(f"{name:<14}{describe(layer):<26}{str(tuple(x.shape)):>17}{count_parameters(layer):>12,}")
n_params = count_parameters(model)
print(f"{'':14}{'total':<43}{n_params:>12,}")
report.record("CNN parameters", n_params)
assert x.shape == (1, 10)

# %% [markdown]
# Each stage also widens what one position "sees". One 3×3 convolution
# looks at 3×3 input pixels; a second on top sees 5×5; after a pool, every
# step of the next layer is 2 input pixels. Exercise 1 computes this
# *receptive field* exactly.
#
# ### Dropout for feature maps: `nn.Dropout2d`
#
# The head's dropout acts on 64 pooled numbers, one per channel. Inside the
# convolutional stages, plain `nn.Dropout` would zero single activations of
# a feature map, and there it removes less than it seems: neighbouring
# activations of a map come from overlapping patches of a smooth image and
# are strongly correlated, so much of a zeroed one can be recovered from its
# neighbours, which the next 3×3 convolution sees. Tompson et al. (2015,
# "Efficient object localization using convolutional networks") made that
# argument and proposed **spatial dropout**, `nn.Dropout2d`: it zeroes whole
# feature maps, one random draw per (image, channel) pair, and scales the
# kept maps by 1/(1 − p). First, how correlated are neighbours? The maps of
# our network's first convolution (and BatchNorm) for 64 training images.
# The network is not trained yet (its weights are the random initial ones,
# and BatchNorm in `eval()` mode still has its initial statistics); the
# correlation comes from the images, whose neighbouring pixels are alike,
# and from the overlap of the 3×3 windows (neighbours share 6 of 9 inputs);
# this cell does not measure how much each contributes:

# %%
with torch.no_grad():
    first_maps = model.features[0][:2](train_x[:64])  # Conv2d + BatchNorm2d: [64, 16, 32, 32]
left, right = first_maps[..., :-1], first_maps[..., 1:]  # each activation and its right-hand neighbour
neighbour_r = torch.stack([torch.corrcoef(torch.stack([left[:, c].flatten(), right[:, c].flatten()]))[0, 1]
                           for c in range(first_maps.shape[1])])
print(f"correlation of horizontally neighbouring activations, per map: median {neighbour_r.median():.2f}, "
      f"lowest {neighbour_r.min():.2f} (16 maps of the first convolution)")
assert neighbour_r.median() > 0.5, "neighbouring activations should be strongly correlated"

# %% [markdown]
# Now the two layers side by side on eight of those images, in training
# mode (both are identities in `eval()` mode). For each of the 8 × 16 maps
# we count whether it came out zeroed whole, untouched, or partly zeroed.
# Then, for every zeroed activation, we try to recover its value from what
# the layer kept: the mean of its kept neighbours above, below, left and
# right in the same map (times 1 − p, which undoes the scaling of the kept
# ones), and measure how well that estimate follows the true value
# (correlation, over all the zeroed activations that have a kept neighbour):

# %%
p_drop = 0.3
maps = first_maps[:8]  # [8, 16, 32, 32]
assert (maps != 0).all(), "the demonstration needs maps without exact zeros"
cross = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]).view(1, 1, 3, 3)  # the 4 neighbours


def recover_from_neighbours(out, p):
    """For each zeroed activation of out [N, C, H, W]: the mean of its kept 4-neighbours in its map, times 1 - p.

    Returns (share of the zeroed activations with at least one kept neighbour,
    correlation of the estimates with the true values of `maps` there, or nan without any).
    """
    flat = out.reshape(-1, 1, *out.shape[2:])  # every map on its own: neighbours never cross maps
    kept = (flat != 0).float()
    total = F.conv2d(flat * (1 - p), cross, padding=1)  # sum of the kept neighbours, unscaled
    n_kept = F.conv2d(kept, cross, padding=1)
    zeroed = flat == 0
    usable = zeroed & (n_kept > 0)
    share = usable.sum().item() / zeroed.sum().item()
    if not usable.any():
        return share, float("nan")
    estimate = (total / n_kept.clamp(min=1))[usable]
    truth = maps.reshape(-1, 1, *maps.shape[2:])[usable]
    return share, torch.corrcoef(torch.stack([estimate, truth]))[0, 1].item()


torch.manual_seed(SEED)
drop_counts, recovered = {}, {}
for layer in (nn.Dropout(p_drop), nn.Dropout2d(p_drop)):
    out = layer.train()(maps)
    zero = (out == 0).flatten(2)  # [N, C, H*W]
    whole, untouched = zero.all(dim=2), (~zero).all(dim=2)
    scaled = torch.allclose(out.flatten(2)[~zero], maps.flatten(2)[~zero] / (1 - p_drop))
    name = type(layer).__name__
    drop_counts[name] = (int(whole.sum()), int(untouched.sum()), int((~whole & ~untouched).sum()), scaled)
    recovered[name] = recover_from_neighbours(out, p_drop)
    print(f"{name:9s} p={p_drop}: of {whole.numel()} maps {drop_counts[name][0]:3d} zeroed whole, "
          f"{drop_counts[name][1]:3d} untouched, {drop_counts[name][2]:3d} partly zeroed; "
          f"{zero.float().mean():.1%} of the activations zeroed, the rest scaled by 1/(1 - p): {scaled}")
for name, (share, r) in recovered.items():
    print(f"{name:9s} zeroed activations with a kept neighbour in their map: {share:6.1%}; "
          f"correlation of the neighbours' estimate with the true value: " + ("-" if math.isnan(r) else f"{r:.2f}"))
assert drop_counts["Dropout2d"][2] == 0 and min(drop_counts["Dropout2d"][:2]) > 0 and drop_counts["Dropout2d"][3], (
    "Dropout2d should zero whole maps (so no zeroed activation keeps a neighbour in its map) and scale the kept ones"
)
assert drop_counts["Dropout"][2] == maps.shape[0] * maps.shape[1] and drop_counts["Dropout"][3], (
    "Dropout should zero single activations in every map"
)
assert torch.equal(nn.Dropout2d(p_drop).eval()(maps), maps), "in eval() mode Dropout2d passes everything through"
assert recovered["Dropout"][0] > 0.9 and recovered["Dropout"][1] > 0.7, (
    f"after nn.Dropout most zeroed activations should be recoverable from their neighbours: {recovered['Dropout']}"
)

# %% [markdown]
# After plain `Dropout`, almost every zeroed activation still has kept
# neighbours in its map, and their mean follows the lost value closely (the
# correlation printed above): much of what was dropped is still there for
# the next layer. `Dropout2d` leaves no map half-dropped: a channel is
# either gone for that image or kept whole, so nothing of a dropped map
# survives to fill it in from, and the next layer must not rely on any
# single feature map. (Whether that makes a trained network generalise
# better is a separate question, which this chapter does not measure.) To use it in
# this network you would end a stage with it, for example
# `nn.Sequential(vgg_stage(16, 32), nn.Dropout2d(0.1))`. We train the
# network as it is: `helpers.models.VGGNet` keeps dropout in the head only.
#
# ## Training
#
# The five-step loop of chapters 04 and 05, through `helpers.training.fit`,
# with three choices:
#
# - **AdamW**: Adam with *decoupled* weight decay, which shrinks the weights
#   a little at every step (chapter 10 explains how this differs from
#   Adam's L2 penalty);
# - a **cosine schedule** (`CosineAnnealingLR` with `T_max=EPOCHS`) from
#   `LR` towards 0, stepped once per epoch by `fit`: the first epoch trains
#   at `LR`, the last at a small but non-zero rate (the `lr` of each epoch's
#   line below), and 0 is reached only after the last epoch;
# - the augmented batches from above, freshly drawn every epoch.
#
# As in chapter 05 we watch the test images after each epoch, only to look.

# %%
seed_everything(SEED)
model = VGGNet(widths=widths, num_classes=10, dropout=0.3).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS)
start = time.perf_counter()
history = fit(model, train_batches, test_loader, optimizer, epochs=EPOCHS, device=device, scheduler=scheduler)
train_seconds = time.perf_counter() - start
_ = report.record("CNN training seconds", train_seconds, "s", digits=1)
_ = report.record("CNN training images", n_train)
print(f"training took {train_seconds:.1f} s on {n_train:,} images ({train_seconds / EPOCHS:.1f} s per epoch, "
      "including the test evaluation)")
final_lr = optimizer.param_groups[0]["lr"]
print(f"learning rate: {history.lr[0]:.1e} in the first epoch, {history.lr[-1]:.1e} in the last, "
      f"{final_lr:.1e} after it")
assert history.lr[0] == LR and (EPOCHS == 1 or 0 < history.lr[-1] < LR) and final_lr < 1e-12, (
    "the cosine schedule should start at LR, stay above 0 through the last epoch and reach 0 after it"
)
versions = torch.stack(train_batches.first_image_versions)  # [EPOCHS, 3, 32, 32]
n_versions = len(torch.unique(versions.flatten(1), dim=0))
print(f"training image 0 was served in {n_versions} different augmented version(s) over the {EPOCHS} epoch(s)")
assert len(versions) == EPOCHS, f"fit should have run {EPOCHS} full passes, got {len(versions)}"
if EPOCHS > 1:
    assert n_versions > 1, "every epoch should draw new crops and flips, but image 0 came out the same every time"

# %%
plot_history(history, title=f"VGG-style CNN on CIFAR-10 ({which}: {n_train:,} training images)", val_label="test")
plt.show()

# %%
cnn_preds, _ = predict(model, test_loader, device=device)  # eval() mode; the confusion matrix below reuses them
cnn_acc = (cnn_preds == test_y).float().mean().item()
report.record("CNN test accuracy", 100 * cnn_acc, "%", digits=1)
print(f"CNN test accuracy {cnn_acc:.1%} on {len(test_y):,} test images (chance: 10%)")

# %%
assert cnn_acc >= MIN_CNN_ACCURACY, (
    f"CNN test accuracy {cnn_acc:.1%} is below {MIN_CNN_ACCURACY:.0%}: train longer (EPOCHS) or on more images"
)
n_plain = min(n_train, 2000)  # enough for a rounded percentage, and quick with the full set
plain_train_acc = evaluate(model, DataLoader(TensorDataset(train_x[:n_plain], train_y[:n_plain]), batch_size=500),
                           device=device)[1]
print(f"last epoch, as fit measured it: train accuracy {history.train_acc[-1]:.1%}, test accuracy {history.val_acc[-1]:.1%}")
print(f"the final model in eval() mode on {n_plain:,} plain (not augmented) training images: {plain_train_acc:.1%}")
gap = plain_train_acc - cnn_acc
curve_gap = max(abs(t - v) for t, v in zip(history.train_acc, history.val_acc))
print(f"generalisation gap, plain training images minus test images: {100 * gap:+.1f} points")
print(f"largest distance between the two curves over the epochs: {100 * curve_gap:.1f} points")
assert gap < MAX_TRAIN_TEST_GAP, (
    f"training accuracy runs {gap:.1%} ahead of test accuracy, more than MAX_TRAIN_TEST_GAP = {MAX_TRAIN_TEST_GAP}: "
    "the network is overfitting (the default short run stays within it; a longer run may need a larger value)"
)
assert curve_gap < MAX_TRAIN_TEST_GAP, (
    f"the training and test curves are {curve_gap:.1%} apart at one epoch, more than MAX_TRAIN_TEST_GAP"
)

# %% [markdown]
# Clearly above chance after a few epochs, but far from what CIFAR-10
# allows. The training and test curves stay within `MAX_TRAIN_TEST_GAP` of
# each other at every epoch (the largest distance is printed above). Note what the
# training curve measures: `fit` averages the accuracy over each epoch's
# batches, in training mode, on augmented images with dropout switched on,
# while the weights are still changing. The fair comparison with the test
# accuracy is the final model in `eval()` mode on plain training images
# (the second line above): the gap between those two is what tells you
# whether the network memorises its training images, and in this short run
# it stays below `MAX_TRAIN_TEST_GAP` (train much longer on few images and
# it grows). The usual ways to go further are more images, more epochs and
# a wider, deeper network (`TRAIN_IMAGES`, `EPOCHS`, `WIDTHS`). They cost
# far more compute than this notebook's budget, so for the rest of the
# chapter we borrow a network that someone already trained on all 50,000
# images.
#
# ## A pretrained ResNet-20
#
# He et al. (2016) introduced residual networks (ResNets): each block adds
# its input to its output, `relu(x + F(x))`, so the block only has to learn
# a correction `F`, and the gradient has a direct path back through the
# addition. That is what made networks with dozens or hundreds of layers
# trainable. Section 4.2 of the paper describes a small family for CIFAR-10:
# a 3×3 convolution with 16 channels, then three stages of n blocks with 16,
# 32 and 64 channels, global average pooling and a linear layer, 6n + 2
# layers in all. Where a block halves the size and doubles the channels, its
# shortcut subsamples `x` and pads the new channels with zeros ("option A":
# no parameters). `helpers.models.ResNetCIFAR` is the course's definition of
# it; ResNet-20 is n = 3.
#
# Yerlan Idelbayev trained these networks on the full CIFAR-10 and published
# the weights (BSD-2-Clause); the course mirror has a copy.
# `helpers.data.resnet_cifar_checkpoint(20)` returns the file's path.
#
# ### Loading a checkpoint safely
#
# `torch.load` reads a file written by `torch.save`, which uses Python's
# `pickle`. Unpickling can run arbitrary code, so a checkpoint from the
# internet could do anything to your machine. `weights_only=True` (the
# default since torch 2.6; we write it out) allows only tensors and plain
# containers such as dicts, lists and numbers, and refuses anything else.

# %%
# NBVAL_CHECK_OUTPUT
checkpoint = torch.load(resnet_cifar_checkpoint(20), map_location="cpu", weights_only=True)
keys = list(checkpoint["state_dict"])
print("the file holds:", {k: type(v).__name__ for k, v in checkpoint.items()})
print(f"best_prec1 = {checkpoint['best_prec1']:.2f} (the best test accuracy in %, as the training script recorded it)")
print(f"state_dict: {len(keys)} tensors, first keys {keys[:3]}")
print(f"our ResNetCIFAR(20):     first keys {list(ResNetCIFAR(20).state_dict())[:3]}")

# %% [markdown]
# The names match except for a `module.` at the front. The model was
# trained wrapped in `nn.DataParallel`, which splits every batch across
# several GPUs. The wrapper stores the real network as its attribute
# `.module`, so the wrapper's `state_dict()` names every tensor
# `module.<name>`, and saving that is what puts the prefix in the file:

# %%
# NBVAL_CHECK_OUTPUT
tiny = nn.Linear(2, 2)
print("nn.Linear:                 ", list(tiny.state_dict()))
print("nn.DataParallel(nn.Linear):", list(nn.DataParallel(tiny).state_dict()))
print("torch.compile(nn.Linear):  ", list(torch.compile(tiny).state_dict()))

# %% [markdown]
# The same happens with `DistributedDataParallel` (also a `.module`
# wrapper, chapter 25) and with `torch.compile`, whose wrapper keeps the
# original as `._orig_mod`. The clean habit is to save
# `model.module.state_dict()` (or the unwrapped model's); when loading
# someone else's file you strip the prefix. PyTorch has a utility for that,
# `consume_prefix_in_state_dict_if_present`, which edits the dict in place.
# Then `load_state_dict(..., strict=True)` (the default) checks that every
# key of the model gets a tensor of the right shape and no key is left
# over:

# %%
# NBVAL_CHECK_OUTPUT
state = dict(checkpoint["state_dict"])  # a copy: the utility edits it in place
consume_prefix_in_state_dict_if_present(state, "module.")
print("after stripping:", list(state)[:3])
resnet_by_hand = ResNetCIFAR(20)
print(resnet_by_hand.load_state_dict(state, strict=True))
print(f"ResNet-20: {count_parameters(resnet_by_hand):,} parameters")

# %% [markdown]
# `helpers.models.load_resnet_cifar(depth)` does exactly these steps (and
# calls `eval()`). It gives the same tensors:

# %%
resnet = load_resnet_cifar(20)
by_hand, helper = resnet_by_hand.state_dict(), resnet.state_dict()
same_weights = by_hand.keys() == helper.keys() and all(torch.equal(by_hand[k], helper[k]) for k in by_hand)
print("load_resnet_cifar(20) has the same tensors as our step-by-step load:", same_weights, "| eval mode:", not resnet.training)
assert same_weights and not resnet.training
resnet = resnet.to(device)

# %% [markdown]
# ### Normalise as the model was trained
#
# A pretrained network expects its inputs prepared exactly as during its
# training. Idelbayev's training script normalised CIFAR-10 with the
# **ImageNet** statistics (mean 0.485, 0.456, 0.406 and std 0.229, 0.224,
# 0.225), a habit carried over from ImageNet models, not CIFAR-10's own
# statistics. The first convolution and BatchNorm of the network were fitted
# to inputs scaled that way, so we must use the same constants, kept as
# `RESNET_CIFAR_MEAN` and `RESNET_CIFAR_STD`:

# %%
print("RESNET_CIFAR_MEAN", RESNET_CIFAR_MEAN, " RESNET_CIFAR_STD", RESNET_CIFAR_STD)
resnet_test = DataLoader(TensorDataset(normalise(test_01, RESNET_CIFAR_MEAN, RESNET_CIFAR_STD), test_y), batch_size=500)
start = time.perf_counter()
resnet_preds, targets = predict(resnet, resnet_test, device=device)  # eval() mode, no gradients
resnet_seconds = time.perf_counter() - start
resnet_acc = (resnet_preds == targets).float().mean().item()
report.record("ResNet-20 test accuracy", 100 * resnet_acc, "%", digits=1)
print(f"ResNet-20 test accuracy {resnet_acc:.1%} on {len(test_y):,} test images ({data_name}), "
      f"evaluated in {resnet_seconds:.1f} s")

# %%
assert resnet_acc >= MIN_RESNET_ACCURACY, (
    f"the pretrained ResNet-20 scored {resnet_acc:.1%}, below {MIN_RESNET_ACCURACY:.0%}: "
    "check the normalisation and that the weights loaded with strict=True"
)

# %% [markdown]
# What if the inputs are prepared differently? The same weights, four ways.
# This comparison and the pitfalls below use at most the first 500 test
# images, to stay quick: the evaluation above prints how long one pass over
# the test images in use took here:

# %%
n_demo = min(500, len(test_y))
demo_01, demo_y = test_01[:n_demo], test_y[:n_demo]
demo_acc = (resnet_preds[:n_demo] == demo_y).float().mean().item()  # as trained: from the predictions above
variants = {
    "CIFAR-10's own statistics": normalise(demo_01, CIFAR_MEAN, CIFAR_STD),
    "no normalisation, pixels in [0, 1]": demo_01,
    "no normalisation, pixels in [0, 255]": demo_01 * 255,
}
normalisation_acc = {"ImageNet statistics (as trained)": demo_acc}
for name, images in variants.items():
    normalisation_acc[name] = evaluate(resnet, DataLoader(TensorDataset(images, demo_y), batch_size=500), device=device)[1]
print(f"ResNet-20 on {n_demo:,} test images")
for name, acc in normalisation_acc.items():
    print(f"{name:38s} {acc:6.1%}")

# %%
for name in ("no normalisation, pixels in [0, 1]", "no normalisation, pixels in [0, 255]"):
    assert normalisation_acc[name] < demo_acc - 0.2, f"{name}: skipping the normalisation should cost a lot"
assert normalisation_acc["CIFAR-10's own statistics"] > demo_acc - 0.02, "CIFAR-10's statistics should cost little"
assert normalisation_acc["no normalisation, pixels in [0, 255]"] < 0.2, "raw 0-255 pixels should leave it near chance (10 %)"

# %% [markdown]
# CIFAR-10's own statistics happen to be close to ImageNet's, so they cost
# little or nothing (the table above; on 500 images one point is five
# images, within the noise of either arm). Leaving the normalisation out
# shifts every input far from what the first layers were fitted to, and
# the accuracy collapses; raw 0-255 pixels
# leave the network about as accurate as guessing (10 %). No error, no
# warning: only the accuracy tells you.
#
# The deeper members of the family (ResNet-32, -44 and -56) are published
# too. Set `EXTRA_DEPTHS` to evaluate them here; each costs several seconds
# more on a CPU:

# %%
if EXTRA_DEPTHS:
    print(f"{'ResNet-20':10s} {count_parameters(resnet):>9,} parameters  {resnet_acc:6.1%}  {resnet_seconds:5.1f} s")
for depth in EXTRA_DEPTHS:
    deeper = load_resnet_cifar(depth).to(device)
    start = time.perf_counter()
    acc = evaluate(deeper, resnet_test, device=device)[1]
    print(f"ResNet-{depth:<3d} {count_parameters(deeper):>9,} parameters  {acc:6.1%}  {time.perf_counter() - start:5.1f} s")
    del deeper
if not EXTRA_DEPTHS:
    print("EXTRA_DEPTHS is empty: set it to e.g. (32, 44, 56) to compare the deeper ResNets")

# %% [markdown]
# ## Feature maps
#
# What does a CNN compute on the way? A **forward hook**
# (`register_forward_hook`, chapter 03) is a function that PyTorch calls
# with a layer's input and output each time the layer runs; we use it to
# keep the output of the first convolution (16 maps of 32×32) and of the
# last stage (64 maps of 8×8) for one test image. Each map is one filter's
# response at every position: bright where the filter's pattern is present.


# %%
activations = {}


def keep_output(name):
    def hook(module, inputs, output):
        activations[name] = output.detach().cpu()

    return hook


handles = [
    resnet.conv1.register_forward_hook(keep_output("conv1")),
    resnet.layer3.register_forward_hook(keep_output("layer3")),
]
index = 3
with torch.no_grad():
    probabilities = resnet(resnet_test.dataset.tensors[0][index : index + 1].to(device)).softmax(dim=1)[0].cpu()
for handle in handles:
    handle.remove()  # hooks stay until removed
predicted = probabilities.argmax().item()
print(f"test image {index}: true class {CIFAR10_CLASSES[test_y[index]]}, predicted {CIFAR10_CLASSES[predicted]} "
      f"({probabilities[predicted]:.0%})")
print({name: tuple(a.shape) for name, a in activations.items()})
show_rgb(test_01[index : index + 1], ncols=1, cell_inches=1.5)
plt.show()
image_grid(activations["conv1"][0], ncols=8, cell_inches=0.9, suptitle="conv1: 16 feature maps, 32x32")
plt.show()
image_grid(activations["layer3"][0, :16], ncols=8, cell_inches=0.9, suptitle="layer3: the first 16 of 64 maps, 8x8")
plt.show()

# %% [markdown]
# The first layer's maps are still recognisably the image: edges in
# different directions, colour contrasts, light and dark areas. The last
# stage's maps are coarse (8×8) and abstract: each position summarises a
# large part of the image, and the channels respond to combinations that
# matter for telling the classes apart. Global average pooling then reduces
# each of these 64 maps to one number for the classifier.
#
# ## Where the models go wrong: a confusion matrix
#
# As in chapter 05, `cm[true, predicted]` counts the test images of each
# true class by predicted class (the colours are on a log scale):

# %%
cm = confusion_matrix(resnet_preds, targets, num_classes=10)  # predictions from above
plot_confusion_matrix(cm, class_names=CIFAR10_CLASSES, title=f"pretrained ResNet-20, {len(targets):,} test images")
plt.show()

# %%
cnn_cm = confusion_matrix(cnn_preds, test_y, num_classes=10)  # our CNN's predictions from above
print(f"{'class':12s} {'our CNN':>8s} {'ResNet-20':>10s}")
for c, name in enumerate(CIFAR10_CLASSES):
    print(f"{name:12s} {cnn_cm[c, c] / cnn_cm[c].sum():8.0%} {cm[c, c] / cm[c].sum():10.0%}")
vehicles = [CIFAR10_CLASSES.index(c) for c in ("airplane", "automobile", "ship", "truck")]
animals = [c for c in range(10) if c not in vehicles]
group_acc = {}
for model_name, matrix in (("our CNN", cnn_cm), ("ResNet-20", cm)):
    for group, classes in (("vehicles", vehicles), ("animals", animals)):
        group_acc[model_name, group] = (matrix.diagonal()[classes].sum() / matrix[classes].sum()).item()
    print(f"{model_name}: vehicles {group_acc[model_name, 'vehicles']:.0%}, animals {group_acc[model_name, 'animals']:.0%}")
off_diagonal = cm.clone().fill_diagonal_(0)
t, p = divmod(off_diagonal.argmax().item(), 10)
print(f"ResNet-20's most common mistake: {CIFAR10_CLASSES[t]} taken for {CIFAR10_CLASSES[p]} ({off_diagonal[t, p]} times)")

# %%
assert cm.sum() == len(test_y) and abs(cm.diagonal().sum() / len(test_y) - resnet_acc) < 1e-6
assert group_acc["ResNet-20", "animals"] < group_acc["ResNet-20", "vehicles"], "the animals should be the harder group"
assert t in animals and p in animals, "the most common mistake should be between two animals"
cnn_margin = group_acc["our CNN", "vehicles"] - group_acc["our CNN", "animals"]
if cnn_acc >= GROUP_CHECK_ACCURACY:
    print(f"our CNN ({cnn_acc:.1%} >= GROUP_CHECK_ACCURACY = {GROUP_CHECK_ACCURACY}): vehicles ahead by "
          f"{100 * cnn_margin:+.1f} points, checked against MIN_VEHICLE_MARGIN = {MIN_VEHICLE_MARGIN}")
    assert cnn_margin >= MIN_VEHICLE_MARGIN, (
        f"our CNN should find the vehicles easier too, by at least {MIN_VEHICLE_MARGIN:.0%}; "
        f"the margin was {cnn_margin:+.1%}"
    )
else:
    print(f"our CNN ({cnn_acc:.1%} < GROUP_CHECK_ACCURACY = {GROUP_CHECK_ACCURACY}) is too close to chance "
          f"to compare the groups: vehicles minus animals {100 * cnn_margin:+.1f} points, not checked")

# %% [markdown]
# For the ResNet the animals are the harder group in this run (checked), and its most common mistake
# mixes up two of them; a likely reason is that animals vary more in pose
# and look more alike at 32×32 pixels. Our briefly trained CNN makes
# mistakes everywhere. Once it is well above chance (at least
# `GROUP_CHECK_ACCURACY`), the vehicles come out ahead for it too, by at
# least `MIN_VEHICLE_MARGIN` (the line above says which case ran and by how
# much); a run of one epoch on few images may be too close to chance to
# tell the groups apart.
#
# ## Pitfalls
#
# ### 1. Forgetting `model.eval()` with BatchNorm
#
# In training mode BatchNorm normalises with the statistics of the current
# batch. Evaluate in small batches without `model.eval()`, and each image's
# prediction depends on the few other images it happens to share a batch
# with. We evaluate a copy of the ResNet in training mode with batches of 8,
# without `evaluate` (which calls `eval()` for us):


# %%
@torch.no_grad()
def accuracy_as_is(net, images, labels, batch_size):
    """Accuracy of net in whatever mode it is in (no eval() call), in batches of batch_size."""
    correct = 0
    for k in range(0, len(labels), batch_size):
        correct += (net(images[k : k + batch_size].to(device)).argmax(dim=1).cpu() == labels[k : k + batch_size]).sum().item()
    return correct / len(labels)


careless = copy.deepcopy(resnet).train()  # the mistake: still in training mode
demo_inputs = normalise(demo_01, RESNET_CIFAR_MEAN, RESNET_CIFAR_STD)
acc_train_mode = accuracy_as_is(careless, demo_inputs, demo_y, batch_size=8)
print(f"ResNet-20 in eval() mode:                  {demo_acc:.1%}")
print(f"ResNet-20 in train() mode, batches of 8:   {acc_train_mode:.1%}")
drift = (careless.bn1.running_mean - resnet.bn1.running_mean).abs().max().item()
print(f"and the running statistics changed: bn1.running_mean moved by up to {drift:.3f}")
assert acc_train_mode < demo_acc - 0.03 and drift > 0

# %% [markdown]
# Two kinds of damage: the accuracy drops, and every forward pass in
# training mode also updates the running averages, so the copy's BatchNorm
# statistics now come from the test images; a model you only meant to
# evaluate has changed. (That is why we used a copy.) **Fix:** `model.eval()`
# before evaluating, and `torch.no_grad()` (or `inference_mode()`) to skip
# the gradient bookkeeping; `helpers.training.evaluate` does both.
#
# ### 2. The wrong channel order
#
# Converting NumPy images with `torch.from_numpy` keeps their HWC layout.
# Given `[8, 32, 32, 3]`, `Conv2d` reads 32 channels of 32×3 pixels:

# %%
# NBVAL_CHECK_OUTPUT
hwc = torch.from_numpy(test_raw.data[:8]).float() / 255  # [8, 32, 32, 3]
try:
    resnet(hwc.to(device))
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# That one at least fails loudly. The quiet version is to "fix" the shape
# with `reshape` (or `view`) instead of `permute`: the shape is then right,
# but the numbers are in the wrong places, so every "image" is a scramble of
# the real one:

# %%
hwc_demo = torch.from_numpy(test_raw.data[:n_demo]).float() / 255  # [n_demo, 32, 32, 3]
scrambled = hwc_demo.reshape(-1, 3, 32, 32)  # wrong: right shape, wrong pixels
fixed = hwc_demo.permute(0, 3, 1, 2)  # right: move the channel dimension
assert torch.equal(fixed, demo_01)
acc_scrambled = accuracy_as_is(resnet, normalise(scrambled, RESNET_CIFAR_MEAN, RESNET_CIFAR_STD), demo_y, 500)
print(f"reshape instead of permute: test accuracy {acc_scrambled:.1%} (with permute: {demo_acc:.1%})")
assert acc_scrambled < demo_acc - 0.3

# %% [markdown]
# **Fix:** `permute(0, 3, 1, 2)` (or `v2.ToImage()` for one image), and a
# quick look at a converted image with `show_rgb` or `image_grid` before
# training on it.
#
# ### 3. Loading a checkpoint with the `module.` prefix
#
# Loading the file's `state_dict` as it is into the plain model fails, and
# the error lists every key twice: once as missing (the model's names), once
# as unexpected (the file's names). Shortened:

# %%
# NBVAL_CHECK_OUTPUT
try:
    ResNetCIFAR(20).load_state_dict(checkpoint["state_dict"])
except RuntimeError as err:
    print(type(err).__name__ + ":")
    for line in str(err).splitlines():
        print(textwrap.shorten(line, 150, placeholder=" ..."))

# %% [markdown]
# The tempting "fix" is `strict=False`. It silences the error by loading
# nothing: every key is ignored, and the model keeps its random
# initialisation. `load_state_dict` returns what it skipped, so look:

# %%
random_resnet = ResNetCIFAR(20)
before = copy.deepcopy(random_resnet.state_dict())
skipped = random_resnet.load_state_dict(checkpoint["state_dict"], strict=False)
unchanged = all(torch.equal(before[k], v) for k, v in random_resnet.state_dict().items())
print(f"strict=False: {len(skipped.missing_keys)} missing and {len(skipped.unexpected_keys)} unexpected keys, no error")
print(f"every tensor of the model still has its random initial value: {unchanged}")
acc_random = evaluate(random_resnet.to(device), DataLoader(TensorDataset(demo_inputs, demo_y), batch_size=500), device=device)[1]
print(f"test accuracy of that 'loaded' model: {acc_random:.1%}")
assert set(skipped.unexpected_keys) == set(checkpoint["state_dict"]), "strict=False should have skipped every key of the file"
assert unchanged and acc_random < 0.3, "the 'loaded' model should still be the random one"

# %% [markdown]
# **Fix:** strip the prefix (above, or Exercise 2) and keep `strict=True`.
# Use `strict=False` only on purpose, for example to load a backbone without
# its classifier, and then check `missing_keys` and `unexpected_keys`.
#
# ## Exercises
#
# Each exercise has a stub for you to fill in, then a checker cell that
# prints **PASSED**, **NOT YET** with a hint, or **TODO** while the stub
# still raises `NotImplementedError`. If you are stuck,
# `solution("07.receptive_field")` returns the reference solution.
#
# ### Exercise 1: the receptive field
#
# Write `receptive_field(layers)`. `layers` lists a stack of convolution or
# pooling layers from input to output, one `(kernel, stride, dilation)`
# tuple each; return the side length, in input pixels, of the square that
# one output pixel depends on (padding does not change it). Worked examples
# to test your idea on:
#
# - one 3×3 convolution, `[(3, 1, 1)]`: 3 pixels;
# - two stacked 3×3 convolutions, `[(3, 1, 1), (3, 1, 1)]`: 5 pixels (the
#   second one's 3 positions each see 3 pixels, and neighbours overlap);
# - a 3×3 convolution with dilation 2, `[(3, 1, 2)]`: 5 pixels;
# - a 3×3 convolution, a 2×2 max-pool with stride 2, and a 3×3
#   convolution, `[(3, 1, 1), (2, 2, 1), (3, 1, 1)]`: 8 pixels;
# - no layers at all, `[]`: 1 pixel (the input itself).
#
# Work in one dimension and draw a row of pixels for the conv–pool–conv
# example: that is where the stride matters. The checker compares your answer with the
# receptive field it measures with autograd on real `nn.Conv2d` stacks,
# including random ones. Your function must work the number out from the
# kernel sizes, strides and dilations: measuring it the checker's way
# (running convolution or pooling layers, or autograd, inside your function)
# is refused. When it passes, the cell prints the receptive field of our VGG
# network.


# %%
def receptive_field(layers):
    """Side length in input pixels (a Python int) seen by one output pixel of layers [(kernel, stride, dilation), ...]."""
    raise NotImplementedError


# %%
result = check("07.receptive_field", receptive_field)
if result.passed:
    vgg_layers = [(3, 1, 1), (3, 1, 1), (2, 2, 1)] * len(widths)
    print(f"our VGG network: each position of the last stage sees {receptive_field(vgg_layers)}x"
          f"{receptive_field(vgg_layers)} input pixels")

# %% [markdown]
# ### Exercise 2: strip a prefix, without surprises
#
# Write `strip_prefix(state_dict, prefix)`, a version of
# `consume_prefix_in_state_dict_if_present` that leaves its input alone: it
# returns a **new** dict, in the same order, in which every key that
# *starts* with `prefix` loses it (once), and every other key is unchanged.
# The values must be the very same tensor objects, not copies. Watch out:
# `key.replace(prefix, "")` also changes a name such as
# `"module.mlp.submodule.weight"`, and `key.lstrip("module.")` does
# something else entirely. When it passes, the cell loads the checkpoint
# with your function.


# %%
def strip_prefix(state_dict, prefix):
    """Return a new dict with `prefix` removed from the start of every key that has it."""
    raise NotImplementedError


# %%
result = check("07.strip_prefix", strip_prefix)
if result.passed:
    print(ResNetCIFAR(20).load_state_dict(strip_prefix(checkpoint["state_dict"], "module."), strict=True))

# %% [markdown]
# ## Summary
#
# - CIFAR-10's pixels come channels last (HWC); PyTorch wants `[N, C, H, W]`:
#   `permute`, never `reshape`. The notebook prints which data set it
#   found (full or offline subset), how many images it has, and how many it
#   trained and tested on.
# - `transforms.v2` transforms draw new random parameters on every call;
#   called on a batch, they apply one draw to all images. Per-image random
#   crops and flips for a whole batch take a few tensor operations.
# - Convolution and pooling share one size formula,
#   ⌊(H + 2p − d(k − 1) − 1)/s⌋ + 1: 3×3 with padding 1 keeps the size,
#   stride 2 halves it.
# - A VGG-style network stacks 3×3 convolutions with BatchNorm and ReLU, and
#   halves the size while doubling the channels. Trained briefly on the data
#   at hand (at most `TRAIN_IMAGES` images) it is clearly above chance; the
#   published ResNet-20 scores at least `MIN_RESNET_ACCURACY` on the test
#   images.
# - Inside convolutional stages, `nn.Dropout2d` (spatial dropout) zeroes
#   whole feature maps per image; plain `nn.Dropout` zeroes single
#   activations, whose strongly correlated neighbours still carry much of
#   what was dropped (measured above).
# - Load weights with `torch.load(weights_only=True)` and
#   `load_state_dict(strict=True)`; strip a `module.` prefix left by
#   `DataParallel` rather than reach for `strict=False`; prepare inputs as
#   the model was trained (here: ImageNet statistics).
# - BatchNorm makes `model.eval()` essential: in training mode predictions
#   depend on the batch, and the running statistics change.
#
# **Next:** chapter 08 moves from grids to sequences: recurrent networks
# (RNN, LSTM, GRU) that forecast a signal and generate text.

# %%
print(f"notebook ran in {time.perf_counter() - notebook_start:.0f} s")
report.finish()
