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
# # 12 · Regularisation and normalisation
#
# A network with hundreds of thousands of weights can memorise a thousand images: the
# training accuracy reaches nearly 100 % while the accuracy on new images stays far
# behind. **Regularisation** is everything that narrows that gap without
# adding data; this chapter looks at the two workhorses, dropout and weight
# decay, and at two cheap companions, label smoothing and early stopping.
# **Normalisation** layers (BatchNorm, LayerNorm, GroupNorm,
# InstanceNorm) keep the activations inside a network in a steady range,
# which usually makes training faster and more stable. They differ in one thing only,
# *which values share a mean and a variance*, and that one thing decides how
# they behave with small batches and whether `model.eval()` matters.
#
# **What you will learn**
# - what `nn.Dropout` computes in training and in evaluation mode, and why
#   it scales by 1/(1 − p), checked exactly;
# - how BatchNorm's running statistics are updated (the momentum rule, the
#   unbiased variance), checked by hand, and what goes wrong when a trained
#   BatchNorm network is evaluated without `model.eval()`;
# - the normalisation axes of BatchNorm, LayerNorm, GroupNorm and
#   InstanceNorm on an `[N, C, H, W]` tensor, each checked against
#   hand-computed statistics, with a diagram; and `nn.RMSNorm`, LayerNorm
#   without the mean, checked against its formula;
# - weight decay as L2 regularisation, and AdamW's decoupled form;
# - label smoothing in `nn.CrossEntropyLoss(label_smoothing=...)`, checked
#   against its formula, and what it does to over-confident logits;
# - an overfitting experiment on 1,000 Fashion-MNIST images, over two
#   seeds (more are a parameter away): no regularisation, dropout, weight decay, both, and early
#   stopping written in plain PyTorch, judged by the test loss, with curves;
# - four mistakes: a batch of one in BatchNorm, `F.dropout` that ignores
#   `eval()`, LayerNorm given the wrong shape, and "best" weights kept
#   without a copy.
#
# **Prerequisites:** chapters 03 (`train()`/`eval()`, buffers), 05 (the MLP,
# `helpers.training`), 07 (BatchNorm in a CNN) and 10 (AdamW).
#
# **Estimated time:** 60 minutes.

# %% tags=["parameters"]
TRAIN_IMAGES = 1000  # training images of the overfitting experiment (a random subset of Fashion-MNIST)
VAL_IMAGES = 1000  # other training images held out for the validation curves
TEST_IMAGES = 10000  # test images for the final numbers (the first ones; 10,000 is all of them)
HIDDEN = (256, 256)  # hidden widths of the over-sized MLP (about 270,000 weights for 1,000 images)
EPOCHS = 30  # epochs of each run of the experiment (the most for the early-stopping run)
EXPERIMENT_SEEDS = 2  # seeds per arm (initial weights, batch order, dropout masks): their spread is the noise; 3 or more gauge it better
BATCH_SIZE = 100  # images per optimizer step
LR = 1e-3  # AdamW's learning rate
INPUT_DROPOUT = 0.2  # dropout on the input pixels (Srivastava et al. 2014 use 0.2)
DROPOUT = 0.5  # dropout after each hidden layer (Srivastava et al. 2014 use 0.5)
WEIGHT_DECAY = 5.0  # AdamW's decoupled decay; large because the run is short (see the text)
PATIENCE = 5  # early stopping: epochs without a new best validation loss before the run stops
MIN_TEST_LOSS_MARGIN = 0.1  # each regularised arm's WORST seed must beat the baseline's BEST seed by this test loss
MIN_BASELINE_TRAIN_ACC = 0.98  # the unregularised baseline must reach this training accuracy (it memorises)
MIN_VAL_LOSS_RISE = 0.1  # ... and its final validation loss must exceed its lowest by this much (every seed)
MAX_EARLY_STOP_FRACTION = 0.8  # early stopping must stop within this fraction of EPOCHS (every seed)
MAX_ACC_SHIFT_SHARE = 0.5  # dropout/weight decay/both: mean test-accuracy change below this share of the gap change
MAX_DECAY_NORM_RATIO = 0.75  # weight decay's largest ||W|| must be below this fraction of the baseline's smallest
MAX_LOSS_GAP_RATIO = 0.75  # each regularised arm's largest loss gap must be below this fraction of the baseline's smallest
MIN_ACC_GAP_REDUCTION = 0.03  # dropout + weight decay must shrink the accuracy gap by at least this much (every seed)
OVER_DECAY = 50.0  # the over-regularised arm: ten times WEIGHT_DECAY, one seed
MIN_UNDERFIT_LOSS_RISE = 0.1  # its test loss must exceed the worst seed of "both" by this much
MAX_UNDERFIT_GAP_RATIO = 0.5  # ... while its accuracy gap is below this fraction of the baseline's smallest
MIN_OVER_LOSS_ABOVE_BASELINE = 0.03  # ... its test loss above the baseline's WORST seed by this much
MIN_OVER_GAP_MARGIN = 0.02  # ... its accuracy gap below the smallest gap of every seed of every arm by this much
MIN_WRONG_CONFIDENCE_MARGIN = 0.03  # baseline's mean max-softmax on misclassified test images exceeds every regularised seed's by this
LABEL_SMOOTHING = 0.1  # epsilon of the label-smoothing demonstration (Szegedy et al. 2016 use 0.1)
BN_TRAIN_IMAGES = 6000  # training images for the BatchNorm network of the eval() demonstration
BN_EPOCHS = 2  # its epochs
MAX_LARGE_BATCH_ACC_CHANGE = 0.02  # train() mode with shuffled batches of 500 must stay this close to eval()'s accuracy
SEED = 0

# %% [markdown]
# ## Setup

# %%
import copy
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from matplotlib.colors import ListedColormap
from torch import nn

from helpers.data import fashion_mnist
from helpers.device import pick_device, seed_everything
from helpers.exercises import check, solution  # noqa: F401  (solution: for when you are stuck)
from helpers.models import count_parameters
from helpers.report import ChapterReport

generator = seed_everything(SEED)
device = pick_device()
report = ChapterReport("12_regularization_normalization")
notebook_start = time.perf_counter()
print(f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} CPU threads")

# %% [markdown]
# ## Dropout
#
# `nn.Dropout(p)` sets each element of its input to zero with probability
# `p`, independently, on every forward pass. A unit can then never rely on
# one particular other unit being present, so the network spreads what it
# learns over many units instead of building fragile combinations that only
# fit the training set (Srivastava et al., *Dropout*, JMLR 2014).
#
# Zeroing a fraction `p` of the values would shrink the layer's output by a
# factor (1 − p) on average, and the next layer would see smaller inputs in
# training than at test time, when nothing is dropped. PyTorch therefore
# uses **inverted dropout**: in training mode the elements it keeps are
# multiplied by 1/(1 − p), so the *expected* value of every output equals
# its input. In evaluation mode (`model.eval()`) dropout does nothing at all.
# A tensor of ones makes this visible, since every output is either 0 or
# exactly 1/(1 − p):

# %%
# NBVAL_CHECK_OUTPUT
p = 0.2
dropout = nn.Dropout(p)
ones = torch.ones(1000, 1000)

dropout.train()
torch.manual_seed(SEED)
out = dropout(ones)
values = out.unique().tolist()
scale = torch.tensor(1 / (1 - p)).item()  # 1/(1 - p) rounded to float32, the dtype of the tensors
print(f"train mode, p = {p}: the output takes the values {values}; 1/(1 - p) = {scale}")
print(f"fraction of zeros {(out == 0).float().mean().item():.2f} (p = {p}), mean {out.mean().item():.2f} (input mean 1)")

dropout.eval()
same = dropout(ones)
print(f"eval mode: output equals the input: {torch.equal(same, ones)}; it is the very same tensor: {same is ones}")

# %%
assert values == [0.0, scale], f"train-mode dropout should give only 0 and 1/(1-p), got {values}"
assert abs((out == 0).float().mean().item() - p) < 0.005, "about a fraction p of the elements should be zeroed"
assert abs(out.mean().item() - 1.0) < 0.005, "inverted dropout should keep the mean at 1 (up to sampling noise)"
assert torch.equal(same, ones), "in eval mode dropout must be the identity"

# %% [markdown]
# The mean is kept **in expectation**: one draw is noisy, the average over
# many draws is not. Each output element is 0 with probability p and
# x/(1 − p) otherwise, so its expected value is (1 − p) · x/(1 − p) = x. Here
# we average many dropout draws of a random input, element by element, and
# watch the largest deviation from the input shrink like 1/√draws, as an
# average of independent draws does:

# %%
torch.manual_seed(SEED)
x = torch.randn(200)
dropout.train()
total = torch.zeros_like(x)
draw_counts, deviations = [], []
for k in range(1, 4001):
    total += dropout(x)
    if k in (1, 4, 16, 64, 256, 1024, 4000):
        draw_counts.append(k)
        deviations.append((total / k - x).abs().max().item())
        print(f"average of {k:5d} draws: largest deviation from the input {deviations[-1]:.4f}")
log_k, log_d = torch.tensor(draw_counts).double().log(), torch.tensor(deviations).double().log()
slope = (((log_k - log_k.mean()) * (log_d - log_d.mean())).sum() / (log_k - log_k.mean()).pow(2).sum()).item()
print(f"slope of log(deviation) against log(draws): {slope:.2f} (1/sqrt(draws) would give -0.5)")
assert deviations[-1] < 0.1 * deviations[0], "the average of many dropout draws should approach the input"
assert -0.7 < slope < -0.35, f"the deviation should shrink like 1/sqrt(draws), but the log-log slope is {slope:.2f}"

fig, (ax_mask, ax_dev) = plt.subplots(1, 2, figsize=(9, 3))
dropout_image = nn.Dropout(0.5).train()(torch.ones(16, 16))
ax_mask.imshow(dropout_image.numpy(), cmap="gray", vmin=0, vmax=2)
ax_mask.set(title="Dropout(0.5) on ones(16, 16): black 0, white 2", xticks=[], yticks=[])
ax_dev.loglog(draw_counts, deviations, "o-", label="measured")
ax_dev.loglog(draw_counts, [deviations[0] / k**0.5 for k in draw_counts], "--", label="1/sqrt(draws)")
ax_dev.set(xlabel="dropout draws averaged", ylabel="max |average - input|", title="the mean is kept in expectation")
ax_dev.legend()
ax_dev.grid(alpha=0.3)
plt.show()

# %% [markdown]
# Older papers describe the other convention: keep the values unscaled in
# training and multiply by (1 − p) at test time. Both give the same expected
# values; the inverted form leaves the test-time network untouched, which is
# why frameworks use it. Remember the `p` in PyTorch is the probability of
# *dropping*, not of keeping (the original paper and TensorFlow 1's
# `tf.nn.dropout(keep_prob=...)` use the keep probability).
#
# For images, `nn.Dropout2d` drops whole channels instead of single pixels:
# neighbouring pixels of a feature map are so alike that dropping one of
# them removes almost no information (Tompson et al., 2015).
#
# ## BatchNorm and its running statistics
#
# `nn.BatchNorm2d(C)` (Ioffe & Szegedy, 2015) normalises each channel with
# the mean and variance of the current batch, over the images and all
# positions: n = N · H · W values per channel. Then it scales and shifts
# with two learned parameters per channel, `weight` (γ) and `bias` (β):
#
# $$y = \frac{x - \mu_\text{batch}}{\sqrt{\sigma^2_\text{batch} + \varepsilon}}\,\gamma + \beta .$$
#
# At test time there may be no batch (one image), and a prediction should
# not depend on which other images are in it. So during training BatchNorm
# also keeps **running averages** of the batch statistics, two *buffers*
# (chapter 03) that the optimizer does not touch, and `eval()` mode
# normalises with them instead. After every training-mode forward pass:
#
# $$\text{running} \leftarrow (1 - m)\cdot\text{running} + m\cdot\text{batch statistic},\qquad m = \texttt{momentum} = 0.1 .$$
#
# Two details are easy to get wrong:
#
# - `momentum` is the weight of the **new** batch, the opposite of an
#   optimizer's momentum (where 0.9 means "keep 90 % of the old");
# - the normalisation uses the *biased* batch variance (divided by n), but
#   `running_var` stores the *unbiased* one (divided by n − 1), because it
#   estimates the variance of the whole data set from a sample.
#
# `running_mean` starts at 0, `running_var` at 1, and `num_batches_tracked`
# counts the batches. Let us feed three batches of `[4, 3, 2, 2]` (n = 16
# values per channel, so n/(n − 1) = 16/15 is easy to see) and redo every
# number by hand:

# %%
torch.manual_seed(SEED)
bn = nn.BatchNorm2d(3)  # momentum=0.1, eps=1e-5, weight 1, bias 0
print("buffers:", {name: tuple(b.shape) for name, b in bn.named_buffers()})
batches = [torch.randn(4, 3, 2, 2) * (k + 1) + 2 * k for k in range(3)]

hand_mean, hand_var = torch.zeros(3), torch.ones(3)
bn.train()
for k, xb in enumerate(batches, start=1):
    y = bn(xb)
    batch_mean = xb.mean(dim=(0, 2, 3))  # one value per channel
    biased_var = xb.var(dim=(0, 2, 3), correction=0)  # divided by n: used to normalise
    unbiased_var = xb.var(dim=(0, 2, 3), correction=1)  # divided by n - 1: goes into running_var
    hand_mean = 0.9 * hand_mean + 0.1 * batch_mean
    hand_var = 0.9 * hand_var + 0.1 * unbiased_var
    hand_y = (xb - batch_mean.view(1, 3, 1, 1)) / torch.sqrt(biased_var.view(1, 3, 1, 1) + bn.eps)
    wrong_y = (xb - batch_mean.view(1, 3, 1, 1)) / torch.sqrt(unbiased_var.view(1, 3, 1, 1) + bn.eps)
    assert torch.allclose(y, hand_y, atol=1e-5), "training mode should normalise with the biased batch variance"
    assert not torch.allclose(y, wrong_y, atol=1e-3), "... and not with the unbiased one"
    print(f"after batch {k}: running_mean {[round(v, 4) for v in bn.running_mean.tolist()]}, "
          f"by hand {[round(v, 4) for v in hand_mean.tolist()]}")
    print(f"{'':15}running_var  {[round(v, 4) for v in bn.running_var.tolist()]}, "
          f"by hand {[round(v, 4) for v in hand_var.tolist()]}")

# %%
assert torch.allclose(bn.running_mean, hand_mean, atol=1e-6), "running_mean should follow (1-m)*old + m*batch_mean"
assert torch.allclose(bn.running_var, hand_var, atol=1e-6), "running_var should follow the rule with the UNBIASED variance"
assert bn.num_batches_tracked.item() == 3, "num_batches_tracked counts the training-mode forward passes"
bn.eval()
eval_y = bn(batches[0])
hand_eval_y = (batches[0] - hand_mean.view(1, 3, 1, 1)) / torch.sqrt(hand_var.view(1, 3, 1, 1) + bn.eps)
assert torch.allclose(eval_y, hand_eval_y, atol=1e-5), "eval mode should normalise with the running statistics"
print("eval mode normalises with running_mean and running_var: checked")

# %% [markdown]
# With `momentum=None` BatchNorm keeps a plain cumulative average instead:
# batch k gets weight 1/k, so after k batches the running mean is the
# average of the k batch means. That suits a final pass over the training
# data to re-estimate the statistics (for example after averaging weights):

# %%
cumulative = nn.BatchNorm2d(3, momentum=None).train()
for xb in batches:
    cumulative(xb)
average_of_means = torch.stack([xb.mean(dim=(0, 2, 3)) for xb in batches]).mean(dim=0)
print("momentum=None: running_mean", [round(v, 4) for v in cumulative.running_mean.tolist()],
      "= the average of the batch means", [round(v, 4) for v in average_of_means.tolist()])
assert torch.allclose(cumulative.running_mean, average_of_means, atol=1e-6)

# %% [markdown]
# ### A trained network, evaluated in the wrong mode
#
# Now the real consequence. We train a small MLP with `BatchNorm1d` after
# each hidden layer on Fashion-MNIST (28×28 greyscale photos of clothes in
# ten classes, Xiao et al. 2017; harder than MNIST digits) and evaluate it
# on the test set in several ways. `BatchNorm1d` on `[N, features]`
# normalises each feature over the batch, exactly as `BatchNorm2d` does per
# channel. First the data, as one normalised tensor (chapter 05's recipe):

# %%
train_raw, test_raw = fashion_mnist(train=True), fashion_mnist(train=False)
CLASSES = train_raw.classes
all_train = train_raw.data.float() / 255
PIXEL_MEAN, PIXEL_STD = all_train.mean().item(), all_train.std().item()
all_train = (all_train - PIXEL_MEAN) / PIXEL_STD  # [60000, 28, 28]
all_train_y = train_raw.targets
test_x = ((test_raw.data.float() / 255 - PIXEL_MEAN) / PIXEL_STD)[:TEST_IMAGES]
test_y = test_raw.targets[:TEST_IMAGES]
print(f"Fashion-MNIST: {len(all_train):,} training and {len(test_x):,} test images; pixel mean {PIXEL_MEAN:.4f}, "
      f"std {PIXEL_STD:.4f}")
print("classes:", ", ".join(CLASSES))


# %%
def batches_of(x, y, batch_size, generator=None):
    """Mini-batches (x, y) of two tensors, shuffled when a generator is given."""
    order = torch.randperm(len(y), generator=generator) if generator is not None else torch.arange(len(y))
    for index in order.split(batch_size):
        yield x[index], y[index]


seed_everything(SEED)
bn_net = nn.Sequential(
    nn.Flatten(),
    nn.Linear(784, 256, bias=False), nn.BatchNorm1d(256), nn.ReLU(),  # no bias: BatchNorm subtracts the mean anyway
    nn.Linear(256, 256, bias=False), nn.BatchNorm1d(256), nn.ReLU(),
    nn.Linear(256, 10),
).to(device)
bn_optimizer = torch.optim.AdamW(bn_net.parameters(), lr=LR)
bn_x, bn_y = all_train[:BN_TRAIN_IMAGES], all_train_y[:BN_TRAIN_IMAGES]
for _ in range(BN_EPOCHS):
    bn_net.train()
    for xb, yb in batches_of(bn_x, bn_y, 64, generator):
        loss = F.cross_entropy(bn_net(xb.to(device)), yb.to(device))
        bn_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        bn_optimizer.step()
print(f"trained on {len(bn_y):,} images for {BN_EPOCHS} epochs")


# %% [markdown]
# `helpers.training.evaluate` calls `model.eval()` first. To show the
# mistake we need an evaluation that leaves the mode alone; it runs on a
# **copy**, because every training-mode forward pass also updates the
# running statistics, and we do not want the test images to leak into the
# model. We compare four ways of evaluating the same weights:
#
# - `eval()` mode, in batches of 500 (the right way; in eval mode the batch
#   size changes the logits only by float rounding, as we check);
# - training mode, with shuffled batches of 500: the batch statistics are
#   close to the data set's, so little changes;
# - training mode, with batches of 8: the statistics of 8 images are noisy;
# - training mode, with the test images **sorted by class** in batches of
#   100: every batch holds one kind of clothing. This is what happens when
#   a test set is stored in class order, or a service predicts a batch of
#   similar requests.

# %%
@torch.no_grad()
def predictions_as_is(net, images, batch_size, order=None):
    """Predicted classes for images, in batches, with net in whatever mode it is in (no eval() call)."""
    order = torch.arange(len(images)) if order is None else order
    preds = torch.empty(len(images), dtype=torch.long)
    for index in order.split(batch_size):
        preds[index] = net(images[index].to(device)).argmax(dim=1).cpu()
    return preds


bn_net.eval()
eval_preds = predictions_as_is(bn_net, test_x, 500)
with torch.no_grad():  # eval mode: the first 200 test images in one batch, and one image at a time
    logits_batched = bn_net(test_x[:200].to(device)).cpu()
    logits_single = torch.cat([bn_net(image.to(device)).cpu() for image in test_x[:200].split(1)])
BATCH_SIZE_ATOL = 1e-4  # different batch sizes may use different kernels: equal up to float32 rounding
top_two = logits_batched.topk(2, dim=1).values
clear = (top_two[:, 0] - top_two[:, 1]) > BATCH_SIZE_ATOL  # images whose top class rounding cannot flip
flipped = ((logits_batched.argmax(dim=1) != logits_single.argmax(dim=1)) & clear).sum().item()
print(f"eval() mode, batch of 200 vs batches of 1: largest logit difference "
      f"{(logits_batched - logits_single).abs().max().item():.1e}, {flipped} of {int(clear.sum())} clear predictions differ")
assert torch.allclose(logits_batched, logits_single, atol=BATCH_SIZE_ATOL), "in eval mode the batch size must not change the logits"
assert flipped == 0, f"in eval mode the batch size changed {flipped} predictions with a clear top class"
careless = copy.deepcopy(bn_net).train()  # the mistake, on a copy
shuffled = torch.randperm(len(test_y), generator=torch.Generator().manual_seed(SEED))
by_class = torch.argsort(test_y, stable=True)
settings = {
    "eval() mode, any batch size": eval_preds,
    "train() mode, shuffled batches of 500": predictions_as_is(careless, test_x, 500, shuffled),
    "train() mode, shuffled batches of 8": predictions_as_is(careless, test_x, 8, shuffled),
    "train() mode, batches of 100 sorted by class": predictions_as_is(careless, test_x, 100, by_class),
}
bn_accuracy = {name: (preds == test_y).float().mean().item() for name, preds in settings.items()}
for name, acc in bn_accuracy.items():
    changed = (settings[name] != eval_preds).float().mean().item()
    print(f"{name:46s} test accuracy {acc:6.1%}   predictions that differ from eval(): {changed:6.1%}")
drift = (careless[2].running_mean - bn_net[2].running_mean).abs().max().item()
print(f"the copy's running_mean moved by up to {drift:.3f}: evaluating in train() mode changed the model")

fig, ax = plt.subplots(figsize=(9, 2.6))
ax.barh(list(bn_accuracy)[::-1], [100 * a for a in bn_accuracy.values()][::-1], color=["tab:red", "tab:orange", "tab:orange", "tab:green"])
ax.set(xlabel="test accuracy (%)", xlim=(0, 100), title="the same trained weights, evaluated four ways")
ax.grid(axis="x", alpha=0.3)
plt.show()

# %%
acc_eval = bn_accuracy["eval() mode, any batch size"]
acc_sorted = bn_accuracy["train() mode, batches of 100 sorted by class"]
acc_small = bn_accuracy["train() mode, shuffled batches of 8"]
report.record("BatchNorm net test accuracy, eval() mode", 100 * acc_eval, "%", digits=1)
report.record("same net in train() mode, batches of 8", 100 * acc_small, "%", digits=1)
report.record("same net in train() mode, class-sorted batches", 100 * acc_sorted, "%", digits=1)
assert acc_sorted < acc_eval - 0.2, "class-sorted batches in train() mode should cost a lot of accuracy"
assert acc_small < acc_eval, "noisy statistics of 8 images should cost accuracy"
assert acc_sorted < acc_small, "class-sorted batches should do more damage than small shuffled ones"
acc_large = bn_accuracy["train() mode, shuffled batches of 500"]
changed_large = (settings["train() mode, shuffled batches of 500"] != eval_preds).float().mean().item()
changed_small = (settings["train() mode, shuffled batches of 8"] != eval_preds).float().mean().item()
assert abs(acc_large - acc_eval) < MAX_LARGE_BATCH_ACC_CHANGE, "shuffled batches of 500 should change the accuracy little"
assert changed_large < changed_small, "batches of 500 should change fewer predictions than batches of 8"
assert drift > 0, "train-mode forward passes update the running statistics"

# %% [markdown]
# With batches sorted by class, BatchNorm subtracts the mean of *that class*
# from every image in the batch: exactly the information the classifier
# needed is removed, and the accuracy collapses. With small shuffled batches
# the damage is smaller, but the probabilities **depend on the batch-mates**,
# the other images that happened to share the batch; the share of test
# predictions that changed with shuffled batches of 8 is printed in the
# table above ("predictions that differ from eval()"). Here is one test image
# (the first one the network is not sure about), predicted in training
# mode together with three different sets of seven other test images:

# %%
with torch.no_grad():
    eval_probs = F.softmax(bn_net.eval()(test_x.to(device)), dim=1).cpu()
unsure = ((eval_probs.max(dim=1).values > 0.5) & (eval_probs.max(dim=1).values < 0.9)).nonzero()
target = unsure[0].item() if len(unsure) else 0
others = torch.cat([torch.arange(target), torch.arange(target + 1, len(test_y))])
with torch.no_grad():
    p_eval = eval_probs[target, test_y[target]].item()
    probabilities = []
    for trial in range(3):
        mates = others[torch.randperm(len(others), generator=torch.Generator().manual_seed(trial))[:7]]
        batch = torch.cat([test_x[target : target + 1], test_x[mates]])
        probs = F.softmax(careless(batch.to(device)), dim=1)[0].cpu()
        probabilities.append(probs[test_y[target]].item())
        print(f"train() mode, batch-mates set {trial}: P({CLASSES[test_y[target]]}) = {probabilities[-1]:.3f}, "
              f"predicted {CLASSES[probs.argmax()]}")
print(f"test image {target}, eval() mode, alone or in any batch:  P({CLASSES[test_y[target]]}) = {p_eval:.3f}")
spread = max(probabilities) - min(probabilities)
_ = report.record("spread of one image's probability across batch-mates (train mode)", spread, digits=3)

# %%
assert spread > 0.01, "in train() mode one image's prediction should depend on its batch-mates"
still_tracked = bn_net.eval()(test_x[:2].to(device)).requires_grad
print(f"after eval(), the output still requires grad: {still_tracked}")
assert still_tracked, "eval() does not switch off autograd"

# %% [markdown]
# **The rule:** `model.eval()` before evaluating or predicting, and
# `model.train()` before training again. `eval()` switches every submodule:
# dropout off, BatchNorm on its running statistics. It does not turn off
# gradients; add `torch.no_grad()` or `torch.inference_mode()` for that.
#
# ## Which values share statistics: Batch, Layer, Group and InstanceNorm
#
# All four layers compute (x − mean)/√(var + ε) with the *biased* variance
# and then apply a learned scale and shift. They differ in the set of values
# that one mean and variance are computed over. For an activation tensor
# `[N, C, H, W]`:
#
# | layer | statistics over | one mean per | depends on the batch? |
# | --- | --- | --- | --- |
# | `nn.BatchNorm2d(C)` | N, H, W | channel | yes (running averages in eval) |
# | `nn.LayerNorm([C, H, W])` | C, H, W | sample | no |
# | `nn.GroupNorm(G, C)` | C/G channels, H, W | sample and group | no |
# | `nn.InstanceNorm2d(C)` | H, W | sample and channel | no |
#
# Only BatchNorm mixes different samples, so it is the only one whose
# output for an image depends on the rest of the batch, that needs running
# statistics, and that behaves differently in `eval()` mode. LayerNorm,
# GroupNorm (Wu & He, 2018) and InstanceNorm (Ulyanov et al., 2016) treat
# every sample on its own, so they work the same with a batch of 1 and
# in both modes (InstanceNorm only with its default
# `track_running_stats=False`; with `True` it keeps running statistics like
# BatchNorm and uses them in `eval()`). That is why transformers use LayerNorm (there over the
# last dimension only: `nn.LayerNorm(d_model)` on `[N, T, d_model]`, one
# mean per token), and detection and segmentation models with tiny batches
# use GroupNorm.
#
# Let us check every row against statistics computed by hand, with
# `torch.mean` and `torch.var` over the stated dimensions:

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(SEED)
N, C, H, W, G = 4, 6, 3, 3, 3
x = torch.randn(N, C, H, W) * 2 + 1
x_grouped = x.reshape(N, G, C // G, H, W)  # group g holds the consecutive channels g*C/G ... (g+1)*C/G - 1


def normalise_over(t, dims):
    """(t - mean) / sqrt(biased var + eps) with the statistics taken over dims."""
    return (t - t.mean(dim=dims, keepdim=True)) / torch.sqrt(t.var(dim=dims, keepdim=True, correction=0) + 1e-5)


layers = {
    "BatchNorm2d(6)": (nn.BatchNorm2d(C), normalise_over(x, (0, 2, 3)), C),
    "LayerNorm([6, 3, 3])": (nn.LayerNorm([C, H, W]), normalise_over(x, (1, 2, 3)), N),
    "GroupNorm(3, 6)": (nn.GroupNorm(G, C), normalise_over(x_grouped, (2, 3, 4)).reshape(N, C, H, W), N * G),
    "InstanceNorm2d(6)": (nn.InstanceNorm2d(C), normalise_over(x, (2, 3)), N * C),
}
print(f"x: {tuple(x.shape)} = [N, C, H, W]")
print(f"{'layer':22s} {'sets of statistics':>18s} {'values per set':>15s} {'max |layer - hand|':>19s}")
for name, (layer, by_hand, n_sets) in layers.items():
    layer.train()
    diff = (layer(x) - by_hand).abs().max().item()
    assert diff < 1e-5, f"{name}: the layer's output differs from the hand-computed normalisation by {diff:.2e}"
    print(f"{name:22s} {n_sets:18d} {x.numel() // n_sets:15d} {'< 1e-5':>19s}")

# %% [markdown]
# (At initialisation every layer's scale is 1 and its shift 0, and
# `InstanceNorm2d` has no affine parameters unless `affine=True`, so the
# outputs are the bare normalisations.) A second check: only BatchNorm
# changes between the modes, and only BatchNorm gives a different output for
# a sample when the other samples of the batch change:

# %%
# NBVAL_CHECK_OUTPUT
other = torch.cat([x[:1], torch.randn(N - 1, C, H, W) * 5])  # same first sample, different batch-mates
for name, (layer, _, _) in layers.items():
    layer.train()
    train_out, first_with_others = layer(x), layer(other)[:1]
    layer.eval()
    eval_out = layer(x)
    mode_matters = not torch.allclose(train_out, eval_out, atol=1e-5)
    mates_matter = not torch.allclose(train_out[:1], first_with_others, atol=1e-5)
    print(f"{name:22s} eval() changes the output: {mode_matters!s:5s}   batch-mates change sample 0: {mates_matter}")
    assert mode_matters == mates_matter == name.startswith("BatchNorm")

# %% [markdown]
# The diagram colours the elements of one `[N, C, H, W]` tensor by the set
# of statistics they belong to: one row per sample, one block of H·W
# positions per channel. The colours are not drawn by hand: the gradient of
# one output element with respect to the input is non-zero exactly on the
# values that share its statistics, so autograd tells us which elements
# belong together, and we check that against the table above.

# %%
def statistics_sets(name, N, C, H, W, G):
    """An int tensor [N, C, H, W]: the index of the set of statistics each element belongs to."""
    n = torch.arange(N).view(N, 1, 1, 1).expand(N, C, H, W)
    c = torch.arange(C).view(1, C, 1, 1).expand(N, C, H, W)
    return {"BatchNorm": c, "LayerNorm": n, "GroupNorm": n * G + c // (C // G), "InstanceNorm": n * C + c}[name]


def sharing_with(layer, shape, element):
    """Bool [N, C, H, W]: the inputs that output `element` depends on (non-zero gradient)."""
    x = torch.randn(shape, requires_grad=True)
    layer.train()(x)[element].backward()
    return x.grad != 0


dn, dc, dh, dw, dg = 4, 6, 2, 2, 3  # a small tensor for the drawing
demo_layers = {
    "BatchNorm": nn.BatchNorm2d(dc), "LayerNorm": nn.LayerNorm([dc, dh, dw]),
    "GroupNorm": nn.GroupNorm(dg, dc), "InstanceNorm": nn.InstanceNorm2d(dc),
}
torch.manual_seed(SEED)
fig, axes = plt.subplots(2, 2, figsize=(9, 4.6), layout="constrained")
palette = ListedColormap(plt.get_cmap("tab20").colors + plt.get_cmap("tab20b").colors)
for ax, (name, layer) in zip(axes.flat, demo_layers.items()):
    sets = statistics_sets(name, dn, dc, dh, dw, dg)
    for element in [(0, 0, 0, 0), (2, 3, 1, 0), (3, 5, 1, 1)]:
        measured = sharing_with(layer, (dn, dc, dh, dw), element)
        assert torch.equal(measured, sets == sets[element]), f"{name}: the diagram disagrees with autograd"
    ax.imshow(sets.reshape(dn, dc * dh * dw).numpy() % palette.N, cmap=palette, vmin=0, vmax=palette.N - 1, aspect="auto")
    for boundary in range(1, dc):
        ax.axvline(boundary * dh * dw - 0.5, color="white", linewidth=2)
    ax.set_xticks([c * dh * dw + (dh * dw - 1) / 2 for c in range(dc)], [f"C{c}" for c in range(dc)])
    ax.set_yticks(range(dn), [f"N{n}" for n in range(dn)])
    ax.set_title(f"{name}: {int(sets.max()) + 1} sets of statistics", fontsize=10)
fig.suptitle(f"one colour = one mean and variance; each channel block holds its H·W = {dh * dw} positions ({dg} groups)")
plt.show()

# %% [markdown]
# Read the columns and rows: BatchNorm colours by column block (a channel
# across all samples), LayerNorm by row (a whole sample), GroupNorm by
# row and pair of channels, InstanceNorm by single cell block (one channel of
# one sample). GroupNorm with G = 1 is LayerNorm over (C, H, W), and with
# G = C it is InstanceNorm (apart from the shape of the affine parameters);
# Exercise 3 writes GroupNorm by hand.
#
# ### RMSNorm: LayerNorm without the mean
#
# `nn.RMSNorm(d)` (Zhang & Sennrich, 2019) normalises the same values as
# `nn.LayerNorm(d)`, the last dimension of each token, but skips the
# re-centring: it divides by the root mean square and multiplies by a learned
# per-feature `weight`, with no mean subtracted and no bias,
#
# $$y = \frac{x}{\sqrt{\tfrac{1}{d}\sum_i x_i^2 + \varepsilon}}\,\gamma ,$$
#
# where `eps=None` (the default) means ε = `torch.finfo(x.dtype).eps`. The
# paper argues that LayerNorm's benefit comes from the re-scaling, not the
# re-centring; dropping the mean saves one reduction per token, and many
# recent language models (T5, whose "LayerNorm" is this, and LLaMA) use it in
# place of LayerNorm.
# The two agree only when a token's mean is already 0. We check the formula
# and that difference on tokens whose mean is about 3 (the LayerNorm is
# built with RMSNorm's ε, `torch.finfo(float32).eps`, instead of its default
# 10⁻⁵, so that on centred tokens nothing but rounding separates them):

# %%
torch.manual_seed(SEED)
d_model = 8
tokens = torch.randn(2, 3, d_model) + 3  # [N, T, d_model]; every token's mean is about 3, not 0
rms_norm = nn.RMSNorm(d_model)  # eps=None: machine epsilon of the input's dtype
eps = torch.finfo(tokens.dtype).eps  # RMSNorm's default eps; LayerNorm gets the same, so only the mean differs
layer_norm = nn.LayerNorm(d_model, eps=eps, bias=False)  # the same parameters (LayerNorm has a bias by default)
with torch.no_grad():
    rms_norm.weight.copy_(torch.rand(d_model) + 0.5)  # a non-trivial scale, so the check covers it too
    layer_norm.weight.copy_(rms_norm.weight)
    rms_formula = tokens / torch.sqrt(tokens.pow(2).mean(dim=-1, keepdim=True) + eps) * rms_norm.weight
    rms_out, ln_out = rms_norm(tokens), layer_norm(tokens)
    centred = tokens - tokens.mean(dim=-1, keepdim=True)
    rms_centred, ln_centred = rms_norm(centred), layer_norm(centred)
    unit_rms = nn.RMSNorm(d_model)(tokens)  # weight 1: the bare normalisation
print("parameters: RMSNorm", [n for n, _ in rms_norm.named_parameters()],
      "| nn.LayerNorm(d) by default", [n for n, _ in nn.LayerNorm(d_model).named_parameters()])
print(f"max |RMSNorm - formula|: {(rms_out - rms_formula).abs().max().item():.1e}")
print(f"RMSNorm with weight 1: per-token RMS {unit_rms.pow(2).mean(-1).sqrt().mean().item():.3f}, "
      f"per-token mean {unit_rms.mean(-1).mean().item():.3f} (LayerNorm's is 0)")
print(f"max |RMSNorm - LayerNorm|: tokens with mean ~3 {(rms_out - ln_out).abs().max().item():.3f}, "
      f"the same tokens centred {(rms_centred - ln_centred).abs().max().item():.1e}")

# %%
assert torch.allclose(rms_out, rms_formula, atol=1e-6), "RMSNorm should equal x / sqrt(mean(x^2) + eps) * weight"
assert torch.allclose(unit_rms.pow(2).mean(-1), torch.ones(2, 3), atol=1e-4), "RMSNorm output should have RMS 1"
assert unit_rms.mean(-1).abs().min() > 0.5, "RMSNorm should NOT remove a token's mean"
assert (rms_out - ln_out).abs().max() > 0.5, "on inputs with non-zero mean RMSNorm and LayerNorm should differ"
assert torch.allclose(rms_centred, ln_centred, atol=1e-5), "on zero-mean inputs (same eps) they should agree"

# %% [markdown]
# ## Weight decay
#
# Weight decay pulls every weight towards zero a little at every step. With
# plain SGD it is the same as adding an **L2 penalty** (λ/2)·‖w‖² to the
# loss: its gradient is λ·w, which `torch.optim.SGD(weight_decay=λ)` adds to
# each gradient for you. Smaller weights make a smoother function that
# cannot bend around every training point, which is why it regularises.
# One step each way, on a random linear regression:

# %%
torch.manual_seed(SEED)
features, targets_reg = torch.randn(32, 5), torch.randn(32)
w0 = torch.randn(5)
lam, lr = 0.1, 0.05


def one_sgd_step(weight_decay, penalty):
    w = w0.clone().requires_grad_(True)
    optimizer = torch.optim.SGD([w], lr=lr, weight_decay=weight_decay)
    loss = F.mse_loss(features @ w, targets_reg) + penalty * 0.5 * w.pow(2).sum()
    loss.backward()
    optimizer.step()
    return w.detach()


with_decay = one_sgd_step(weight_decay=lam, penalty=0.0)
with_penalty = one_sgd_step(weight_decay=0.0, penalty=lam)
print(f"SGD(weight_decay={lam}):          {[round(v, 5) for v in with_decay.tolist()]}")
print(f"SGD on loss + {lam}/2 * ||w||^2:   {[round(v, 5) for v in with_penalty.tolist()]}")
assert torch.allclose(with_decay, with_penalty, atol=1e-6), "for SGD, weight_decay must equal an L2 penalty"

# %% [markdown]
# For Adam the two are **not** the same. Adam divides each gradient by a
# running estimate of its size, and that division also rescales the λ·w
# term, so weights with large gradients are hardly decayed (measured below).
# `torch.optim.AdamW` (Loshchilov & Hutter, 2019) *decouples* the decay: it
# multiplies the weights by (1 − lr·λ) before the Adam step, whatever the
# gradient. Chapter 10 derives both updates in full; here one consequence is
# enough. With a zero gradient, AdamW shrinks every weight by exactly
# (1 − lr·λ), in proportion to its size; Adam with `weight_decay` feeds λ·w
# through its normalisation and moves every weight by about lr, large or
# small:

# %%
def one_zero_gradient_step(optimizer_class, weight_decay, lr=1e-3):
    w = torch.tensor([4.0, 0.5, -0.01])
    w.requires_grad_(True)
    optimizer = optimizer_class([w], lr=lr, weight_decay=weight_decay)
    w.grad = torch.zeros_like(w)
    optimizer.step()
    return w.detach()


start_w = torch.tensor([4.0, 0.5, -0.01])
adamw_w = one_zero_gradient_step(torch.optim.AdamW, weight_decay=0.1)
adam_w = one_zero_gradient_step(torch.optim.Adam, weight_decay=0.1)
print(f"start:                           {[round(v, 6) for v in start_w.tolist()]}")
print(f"AdamW(lr=1e-3, weight_decay=0.1): {[round(v, 6) for v in adamw_w.tolist()]}  (x {1 - 1e-3 * 0.1})")
print(f"Adam(lr=1e-3, weight_decay=0.1):  {[round(v, 6) for v in adam_w.tolist()]}  (each moved by about 1e-3)")
assert torch.allclose(adamw_w, start_w * (1 - 1e-3 * 0.1), rtol=0, atol=1e-7), "AdamW: w * (1 - lr * wd)"
assert torch.allclose(adam_w, start_w - 1e-3 * start_w.sign(), atol=1e-6), "Adam + L2: w - lr * sign(w)"

# %% [markdown]
# Now the case that matters in training: two weights that both start at
# 1.0, one with large, noisy gradients (standard deviation 10) and one with
# tiny ones (10⁻³), drawn afresh at every step. We run 200 steps with and
# without `weight_decay=0.1` on the same gradient draws and call the
# difference between the two end points the **decay effect** on each
# weight. Adam adds λ·w = 0.1 to each gradient before dividing by the
# gradient's running size: next to gradients of size 10 that is a 1 %
# nudge, next to 10⁻³ it is the whole step. AdamW's shrinking ignores the
# gradient, so both weights should lose the same 1 − (1 − lr·λ)^200:

# %%
def decay_effect(optimizer_class, steps=200, lr=1e-3, weight_decay=0.1):
    """w(no decay) - w(decay) after `steps` steps on the same noisy gradients of scales [10, 1e-3]; w starts at 1."""
    ends = []
    for wd in (0.0, weight_decay):
        noise = torch.Generator().manual_seed(SEED)  # the same gradient draws with and without decay
        w = torch.ones(2, requires_grad=True)
        optimizer = optimizer_class([w], lr=lr, weight_decay=wd)
        for _ in range(steps):
            w.grad = torch.randn(2, generator=noise) * torch.tensor([10.0, 1e-3])
            optimizer.step()
        ends.append(w.detach())
    return ends[0] - ends[1]


adam_effect, adamw_effect = decay_effect(torch.optim.Adam), decay_effect(torch.optim.AdamW)
predicted_effect = 1 - (1 - 1e-3 * 0.1) ** 200
for label, effect in (("Adam(weight_decay)", adam_effect), ("AdamW", adamw_effect)):
    print(f"{label:19s} decay effect: large-gradient weight {effect[0].item():.4f}, "
          f"small-gradient weight {effect[1].item():.4f}")
print(f"AdamW's prediction for both: 1 - (1 - lr * wd)^200 = {predicted_effect:.4f}")
assert torch.allclose(adamw_effect, torch.full((2,), predicted_effect), rtol=0.05), (
    f"AdamW should decay both weights by about {predicted_effect:.4f}, whatever their gradients: {adamw_effect}"
)
assert adam_effect[0] < 0.25 * adamw_effect[0], (
    f"Adam's L2 term should be diluted on the large-gradient weight: {adam_effect[0]:.4f} vs AdamW {adamw_effect[0]:.4f}"
)
assert adam_effect[1] > 4 * adamw_effect[1], (
    f"Adam's L2 term should dominate the small-gradient weight: {adam_effect[1]:.4f} vs AdamW {adamw_effect[1]:.4f}"
)

# %% [markdown]
# Adam's decay is about ten times weaker than AdamW's on the weight with
# large gradients and about ten times stronger on the one with tiny
# gradients (printed above): the L2 term's strength depends on the gradient
# history, which is what decoupling removes.

# %% [markdown]
# So with AdamW the strength of the pull is the product lr·λ per step: a
# weight left alone by the gradient shrinks by a factor e^(−lr·λ·steps). The
# usual values (λ = 0.01 to 0.1) are meant for runs of tens of thousands of
# steps. Our experiment below has only a few hundred (printed below) at lr = 10⁻³, so it needs
# a λ of a few units to have a visible effect: what carries over between
# runs is lr·λ·steps, not λ alone.
#
# Which parameters to decay? Usually only the weight matrices: biases and
# the scales and shifts of normalisation layers are few, do not make the
# function more complex, and pulling a LayerNorm scale towards 0 would
# switch the layer off. The common recipe (chapter 10 shows it with
# `param_groups`) puts every parameter with one dimension into a group with
# `weight_decay=0`:


# %%
def decay_groups(model, weight_decay):
    """Two parameter groups: matrices (and conv kernels) decayed, vectors (biases, norm scales) not."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


groups = decay_groups(bn_net, WEIGHT_DECAY)
print(f"decayed: {sum(p.numel() for p in groups[0]['params']):,} values in {len(groups[0]['params'])} tensors; "
      f"not decayed: {sum(p.numel() for p in groups[1]['params']):,} values in {len(groups[1]['params'])} tensors")
experiment_steps = EPOCHS * -(-TRAIN_IMAGES // BATCH_SIZE)
print(f"the experiment below: {experiment_steps} steps; lr * weight_decay * steps = {LR * WEIGHT_DECAY * experiment_steps:.2f}, "
      f"so an undisturbed weight keeps a factor {(1 - LR * WEIGHT_DECAY) ** experiment_steps:.2f}")

# %% [markdown]
# ## Label smoothing
#
# Cross-entropy against a one-hot target is lowest when the correct class
# gets probability 1, which needs its logit to be *infinitely* far above the
# others: a network that fits its training set keeps growing its logits, and
# grows confident where it is wrong too. **Label smoothing** (Szegedy et al.,
# *Rethinking the Inception architecture*, 2016) trains against a softened
# target instead: probability 1 − ε + ε/C on the true class and ε/C on each
# of the other C − 1 classes. `nn.CrossEntropyLoss(label_smoothing=ε)` (also
# `F.cross_entropy(..., label_smoothing=ε)`) implements it, which is the same
# as mixing the usual loss with the loss against a uniform target:
#
# $$\ell = (1-\varepsilon)\,\bigl(-\log p_y\bigr) + \varepsilon\cdot\frac{1}{C}\sum_{c=1}^{C}\bigl(-\log p_c\bigr).$$
#
# It is one argument, costs nothing, and is a common part of image
# classification recipes, usually with ε = 0.1, the paper's value. First the
# formula, by hand:

# %%
torch.manual_seed(SEED)
logits = torch.randn(16, 10) * 3
labels = torch.randint(0, 10, (16,))
smoothed = nn.CrossEntropyLoss(label_smoothing=LABEL_SMOOTHING)(logits, labels)
log_p = F.log_softmax(logits, dim=1)
by_hand = (1 - LABEL_SMOOTHING) * F.nll_loss(log_p, labels) + LABEL_SMOOTHING * (-log_p).mean(dim=1).mean()
plain = F.cross_entropy(logits, labels)
print(f"CrossEntropyLoss(label_smoothing={LABEL_SMOOTHING}): {smoothed.item():.5f}; "
      f"(1 - eps) * NLL + eps * mean_c(-log p_c): {by_hand.item():.5f}; plain cross-entropy {plain.item():.5f}")
assert torch.allclose(smoothed, by_hand, atol=1e-6), "label smoothing should equal (1-eps)*NLL + eps*mean_c(-log p_c)"
assert not torch.allclose(smoothed, plain, atol=1e-3), "with eps > 0 the loss should differ from plain cross-entropy"

# %% [markdown]
# What it does to a confident prediction: give the true class a logit m
# above the other nine (all 0) and vary the margin m. Plain cross-entropy
# keeps falling as m grows, so its gradient always asks for a larger
# margin. With label smoothing the loss has a minimum at a finite margin,
# where softmax gives exactly the smoothed target: p_y / p_other = e^m =
# (1 − ε + ε/C)/(ε/C), so m* = ln 91 ≈ 4.5 for ε = 0.1 and C = 10. Beyond
# it, the gradient pushes the logits back together:

# %%
margins = torch.linspace(0, 12, 241)  # steps of 0.05
margin_logits = torch.zeros(len(margins), 10)
margin_logits[:, 0] = margins  # class 0 is the true class, `margin` above the other nine
margin_labels = torch.zeros(len(margins), dtype=torch.long)
plain_curve = F.cross_entropy(margin_logits, margin_labels, reduction="none")
smooth_curve = F.cross_entropy(margin_logits, margin_labels, reduction="none", label_smoothing=LABEL_SMOOTHING)
classes = 10
best_margin = margins[smooth_curve.argmin()].item()
predicted_margin = torch.log(torch.tensor((1 - LABEL_SMOOTHING + LABEL_SMOOTHING / classes)
                                          / (LABEL_SMOOTHING / classes))).item()
confident = torch.tensor([[12.0] + [0.0] * 9], requires_grad=True)  # margin 12: far past m*
F.cross_entropy(confident, torch.tensor([0]), label_smoothing=LABEL_SMOOTHING).backward()
print(f"plain cross-entropy: {plain_curve[0].item():.3f} at margin 0, {plain_curve[-1].item():.1e} at margin 12, "
      f"falling all the way: {bool((plain_curve.diff() < 0).all())}")
print(f"label smoothing {LABEL_SMOOTHING}: lowest loss {smooth_curve.min().item():.3f} at margin {best_margin:.2f}; "
      f"formula ln((1 - eps + eps/C) / (eps/C)) = {predicted_margin:.2f}")
print(f"at margin 12 with smoothing, d loss / d (true logit) = {confident.grad[0, 0].item():+.4f} (> 0: shrink it)")

fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(margins, plain_curve, label="plain cross-entropy")
ax.plot(margins, smooth_curve, label=f"label_smoothing={LABEL_SMOOTHING}")
ax.axvline(predicted_margin, color="grey", linestyle=":", label=f"m* = {predicted_margin:.2f} (formula)")
ax.set(xlabel="margin m of the true logit over the nine others", ylabel="loss", title="label smoothing caps confidence")
ax.grid(alpha=0.3)
ax.legend(fontsize=8)
plt.show()

# %%
assert (plain_curve.diff() < 0).all(), "plain cross-entropy should fall monotonically as the margin grows"
assert abs(best_margin - predicted_margin) <= 0.05, f"smoothed loss minimum at {best_margin}, formula {predicted_margin:.3f}"
smoothed_target = torch.full((classes,), LABEL_SMOOTHING / classes)
smoothed_target[0] += 1 - LABEL_SMOOTHING
target_entropy = -(smoothed_target * smoothed_target.log()).sum()
assert abs(smooth_curve.min() - target_entropy) < 1e-3, "the smoothed loss's floor is the smoothed target's entropy"
assert smooth_curve[-1] > smooth_curve.min() + 0.1, "past m*, label smoothing should make a larger margin cost more"
assert confident.grad[0, 0] > 0, "past m*, the gradient should push the true logit down"

# %% [markdown]
# The price: the smoothed loss never reaches 0 (its floor is the entropy of
# the smoothed target, 0.50 here, asserted above), so do not compare a
# smoothed loss with a plain one; compare models by accuracy or by the plain
# loss. Label smoothing changes only the training objective: evaluate with
# the plain cross-entropy.
#
# ## An overfitting experiment
#
# Now the regularisers at work. We take **1,000** random Fashion-MNIST
# training images and an MLP far too large for them (two hidden layers of
# 256: about 270 weights per training image), and train it with the same
# data, optimizer (AdamW, lr 10⁻³) and number of epochs, changing only the
# regularisation. Five **arms**:
#
# 1. **baseline**: no dropout, no weight decay;
# 2. **dropout**: 0.2 on the input pixels and 0.5 after each hidden layer,
#    the recipe of Srivastava et al.;
# 3. **weight decay**: AdamW's decoupled decay on the weight matrices;
# 4. **both**;
# 5. **early stopping**: the baseline, stopped once the validation loss has
#    not improved for `PATIENCE` epochs, with the weights of its best epoch
#    restored. Its run *is* the baseline's up to that epoch, so instead of
#    training it again a monitor inside each baseline run copies the best
#    weights and notes the stopping epoch.
#
# A sixth run, one seed with ten times the weight decay, shows what too
# much regularisation does.
#
# After every epoch we measure, in `eval()` mode, the loss and accuracy on
# the training images and on 1,000 *other* training images held out
# for validation; early stopping uses only the validation loss, so the test
# set stays untouched until the end. Each arm runs with `EXPERIMENT_SEEDS`
# seeds, two by default (the seed sets the initial weights, the batch order and the dropout
# masks; arms with the same seed start from the same weights), because one
# run of each would leave us unable to tell a real effect from luck. Two
# seeds give only a rough idea of the spread; `EXPERIMENT_SEEDS = 3` or
# more gauge it better, each seed adding about half again to the run time.
#
# What to judge them by? A smaller **gap** between training and test
# performance is what regularisation is for, but a gap can also shrink
# because the network learns *less*: a network that underfits has no gap at
# all. So the verdict is the **test loss**: a regulariser helped only if the
# network does better on new images.

# %%
split = torch.randperm(len(all_train_y), generator=torch.Generator().manual_seed(SEED))
train_index, val_index = split[:TRAIN_IMAGES], split[TRAIN_IMAGES : TRAIN_IMAGES + VAL_IMAGES]
small_x, small_y = all_train[train_index], all_train_y[train_index]
val_x, val_y = all_train[val_index], all_train_y[val_index]
print(f"training subset {tuple(small_x.shape)}, validation {tuple(val_x.shape)}, test {tuple(test_x.shape)}")
print("training images per class:", torch.bincount(small_y, minlength=10).tolist())


def make_mlp(input_dropout, dropout):
    """Flatten -> Dropout -> [Linear -> ReLU -> Dropout] * len(HIDDEN) -> Linear (a dropout of 0 is the identity)."""
    layers, width = [nn.Flatten(), nn.Dropout(input_dropout)], 784
    for hidden in HIDDEN:
        layers += [nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout)]
        width = hidden
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


@torch.no_grad()
def loss_and_accuracy(model, x, y):
    """Mean cross-entropy and accuracy of model on tensors x, y, in eval() mode, in batches of 1000."""
    model.eval()
    logits = torch.cat([model(xb.to(device)).cpu() for xb in x.split(1000)])
    return F.cross_entropy(logits, y).item(), (logits.argmax(dim=1) == y).float().mean().item()


print(f"the MLP has {count_parameters(make_mlp(0.0, 0.0)):,} parameters for {TRAIN_IMAGES:,} training images")

# %%
def train_arm(input_dropout, dropout_p, weight_decay, seed, patience=None):
    """Train one MLP on (small_x, small_y) for EPOCHS epochs; returns (curve, model, monitor).

    curve holds per-epoch lists train_loss, train_acc, val_loss, val_acc. With patience set, an
    early-stopping monitor watches the validation loss: it keeps a copy of the best weights and notes the
    epoch at which a run with early stopping would have stopped (`patience` epochs without a new lowest
    validation loss). Training continues to EPOCHS, so one run gives both the full curve and the stopped
    model: monitor = {"stop_epoch", "best_epoch", "best_state"} (None without patience).
    """
    seed_everything(seed)  # the initial weights and the dropout masks
    model = make_mlp(input_dropout, dropout_p).to(device)
    optimizer = torch.optim.AdamW(decay_groups(model, weight_decay), lr=LR)
    order = torch.Generator().manual_seed(seed)  # the batch order
    curve = {"train_loss": [], "train_acc": [], "val_loss": [], "val_acc": []}
    monitor = None if patience is None else {"stop_epoch": EPOCHS, "best_epoch": None, "best_state": None}
    best_val, waited, stopped = float("inf"), 0, False
    for epoch in range(1, EPOCHS + 1):
        model.train()
        for xb, yb in batches_of(small_x, small_y, BATCH_SIZE, order):
            loss = F.cross_entropy(model(xb.to(device)), yb.to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        for split_name, (xs, ys) in {"train": (small_x, small_y), "val": (val_x, val_y)}.items():
            split_loss, split_acc = loss_and_accuracy(model, xs, ys)
            curve[f"{split_name}_loss"].append(split_loss)
            curve[f"{split_name}_acc"].append(split_acc)
        if monitor is None or stopped:
            continue
        if curve["val_loss"][-1] < best_val:  # a new best: remember these weights
            best_val, waited = curve["val_loss"][-1], 0
            monitor["best_epoch"] = epoch
            monitor["best_state"] = copy.deepcopy(model.state_dict())  # a COPY: state_dict() returns the live tensors
        else:
            waited += 1
            if waited == patience:  # early stopping would stop here; the monitor freezes
                monitor["stop_epoch"], stopped = epoch, True
    return curve, model, monitor


@torch.no_grad()
def final_results(model, curve_epochs):
    """Training and test numbers of a trained model, as one dict of results."""
    train_loss, train_acc = loss_and_accuracy(model, small_x, small_y)
    model.eval()
    logits = torch.cat([model(xb.to(device)).cpu() for xb in test_x.split(1000)])
    probs = F.softmax(logits, dim=1)
    wrong = probs.argmax(dim=1) != test_y
    test_loss, test_acc = F.cross_entropy(logits, test_y).item(), 1 - wrong.float().mean().item()
    return {
        "train_acc": train_acc, "test_acc": test_acc, "acc_gap": train_acc - test_acc,
        "train_loss": train_loss, "test_loss": test_loss, "loss_gap": test_loss - train_loss,
        "wrong_confidence": probs.max(dim=1).values[wrong].mean().item(),  # mean max-softmax where it is wrong
        "weight_norm": torch.sqrt(sum(p.pow(2).sum() for p in model.parameters() if p.ndim >= 2)).item(),
        "epochs": curve_epochs,
    }


arms = {  # name: (input dropout, hidden dropout, weight decay, early-stopping patience)
    "baseline": (0.0, 0.0, 0.0, PATIENCE),  # the early-stopping monitor rides along in the baseline's runs
    "dropout": (INPUT_DROPOUT, DROPOUT, 0.0, None),
    "weight decay": (0.0, 0.0, WEIGHT_DECAY, None),
    "both": (INPUT_DROPOUT, DROPOUT, WEIGHT_DECAY, None),
}
seeds = [SEED + k for k in range(EXPERIMENT_SEEDS)]
curves = {name: [] for name in (*arms, "early stopping")}
results = {name: [] for name in (*arms, "early stopping")}
for name, (input_dropout, dropout_p, weight_decay, patience) in arms.items():
    for seed in seeds:
        curve, model, monitor = train_arm(input_dropout, dropout_p, weight_decay, seed, patience)
        curves[name].append(curve)
        results[name].append(final_results(model, EPOCHS))
        if monitor is not None:  # the early-stopping arm: the baseline's best weights, restored from the copy
            model.load_state_dict(monitor["best_state"])
            stop = monitor["stop_epoch"]
            curves["early stopping"].append({key: values[:stop] for key, values in curve.items()})
            results["early stopping"].append({
                **final_results(model, stop), "best_epoch": monitor["best_epoch"],
                "restored_val_loss": loss_and_accuracy(model, val_x, val_y)[0],
            })
    train_accs = ", ".join(f"{r['train_acc']:.1%}" for r in results[name])
    print(f"{name:14s} seeds {seeds}: train acc [{train_accs}]")
print(f"early stopping (monitor in the baseline runs): stopped after epochs {[r['epochs'] for r in results['early stopping']]}, "
      f"restored epochs {[r['best_epoch'] for r in results['early stopping']]}")
over_curve, over_model, _ = train_arm(0.0, 0.0, OVER_DECAY, SEED)  # the over-regularised arm, one seed
over = final_results(over_model, EPOCHS)
print(f"over-regularised (weight decay {OVER_DECAY}, seed {SEED}): train acc {over['train_acc']:.1%}, "
      f"test acc {over['test_acc']:.1%}, test loss {over['test_loss']:.3f}")
print(f"{len(arms)} arms x {len(seeds)} seeds + 1 over-regularised run trained")

# %%
colors = {"baseline": "tab:red", "dropout": "tab:blue", "weight decay": "tab:green", "both": "tab:purple",
          "early stopping": "black"}
epochs = range(1, EPOCHS + 1)


def seed_mean(name, key):
    """The per-epoch mean over seeds of one curve of an arm that ran all EPOCHS."""
    return [sum(values) / len(values) for values in zip(*(curve[key] for curve in curves[name]))]


fig, (ax_acc, ax_loss) = plt.subplots(1, 2, figsize=(9, 3.4), layout="constrained")
for name in ("baseline", "dropout", "weight decay", "both"):
    ax_acc.plot(epochs, [100 * a for a in seed_mean(name, "train_acc")], "--", color=colors[name])
    ax_acc.plot(epochs, [100 * a for a in seed_mean(name, "val_acc")], "-", color=colors[name], label=name)
    ax_loss.plot(epochs, seed_mean(name, "train_loss"), "--", color=colors[name])
    ax_loss.plot(epochs, seed_mean(name, "val_loss"), "-", color=colors[name], label=name)
for k, r in enumerate(results["early stopping"]):
    stop_curve = curves["early stopping"][k]["val_loss"]
    ax_loss.plot(epochs, curves["baseline"][k]["val_loss"], "-", color="tab:red", linewidth=0.6, alpha=0.6,
                 label="baseline validation, per seed" if k == 0 else None)
    ax_loss.plot(r["epochs"], stop_curve[-1], "x", color="black", label="early stop: stopped" if k == 0 else None)
    ax_loss.plot(r["best_epoch"], stop_curve[r["best_epoch"] - 1], "o", mfc="none", color="black",
                 label="early stop: restored" if k == 0 else None)
ax_acc.set(xlabel="epoch", ylabel="accuracy (%)", title="accuracy: train dashed, validation solid")
ax_loss.set(xlabel="epoch", ylabel="cross-entropy", title="loss: train dashed, validation solid", ylim=(0, None))
for ax in (ax_acc, ax_loss):
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
fig.suptitle(f"an MLP with {count_parameters(make_mlp(0.0, 0.0)):,} weights on {TRAIN_IMAGES:,} Fashion-MNIST "
             f"images (mean of {len(seeds)} seeds)")
plt.show()
for name in ("baseline", "dropout", "weight decay", "both"):
    lowest = [min(range(EPOCHS), key=c["val_loss"].__getitem__) for c in curves[name]]
    print(f"{name:12s} validation loss lowest after epoch {[e + 1 for e in lowest]} "
          f"({[round(c['val_loss'][e], 3) for c, e in zip(curves[name], lowest)]}), "
          f"after epoch {EPOCHS}: {[round(c['val_loss'][-1], 3) for c in curves[name]]}")

# %% [markdown]
# The final numbers, on the real test set, as the mean over the seeds with
# the range [lowest, highest] in brackets. The **accuracy gap** is the
# training accuracy minus the test accuracy; the **loss gap** is the test
# loss minus the training loss; ‖W‖ is the size (L2 norm) of all weight
# matrices together; the last column is the number of epochs trained:

# %%
def per_seed(name, key):
    """One result of an arm, as a list over the seeds."""
    return [r[key] for r in results[name]]


def mean_range(name, key, fmt):
    """'mean [min, max]' of one result over the seeds of an arm."""
    seed_values = per_seed(name, key)
    mean = sum(seed_values) / len(seed_values)
    return f"{format(mean, fmt)} [{format(min(seed_values), fmt)}, {format(max(seed_values), fmt)}]"


print(f"{len(seeds)} seeds per arm; mean [min, max]")
print(f"{'arm':14s} {'test loss':>21s} {'conf. when wrong':>21s} {'test acc':>21s} {'acc gap':>21s} "
      f"{'loss gap':>21s} {'||W||':>18s} {'epochs':>6s}")
for name in results:
    print(f"{name:14s} {mean_range(name, 'test_loss', '.3f'):>21s} {mean_range(name, 'wrong_confidence', '.3f'):>21s} "
          f"{mean_range(name, 'test_acc', '.1%'):>21s} {mean_range(name, 'acc_gap', '.1%'):>21s} "
          f"{mean_range(name, 'loss_gap', '.3f'):>21s} {mean_range(name, 'weight_norm', '.1f'):>18s} "
          f"{per_seed(name, 'epochs')}")
    mean = {key: sum(r[key] for r in results[name]) / len(seeds) for key in ("test_loss", "test_acc", "acc_gap", "loss_gap")}
    report.record(f"{name}: test loss (mean of {len(seeds)} seeds)", mean["test_loss"], digits=3)
    report.record(f"{name}: test accuracy (mean)", 100 * mean["test_acc"], "%", digits=1)
    report.record(f"{name}: train-test accuracy gap (mean)", 100 * mean["acc_gap"], "points", digits=1)
    report.record(f"{name}: test-train loss gap (mean)", mean["loss_gap"], digits=3)
print(f"{'too much decay':14s} {over['test_loss']:21.3f} {over['wrong_confidence']:21.3f} {over['test_acc']:21.1%} "
      f"{over['acc_gap']:21.1%} {over['loss_gap']:21.3f} {over['weight_norm']:18.1f} (seed {SEED}, weight decay {OVER_DECAY})")
_ = report.record("over-regularised: test loss (one seed)", over["test_loss"], digits=3)

# %%
base_best = min(per_seed("baseline", "test_loss"))
for name in ("dropout", "weight decay", "both", "early stopping"):
    worst = max(per_seed(name, "test_loss"))
    assert worst < base_best - MIN_TEST_LOSS_MARGIN, (
        f"{name}: its worst seed's test loss {worst:.3f} is not {MIN_TEST_LOSS_MARGIN} below the baseline's best "
        f"seed {base_best:.3f}: no improvement on new images beyond the seed spread"
    )
for name in ("dropout", "weight decay", "both"):
    assert max(per_seed(name, "loss_gap")) < MAX_LOSS_GAP_RATIO * min(per_seed("baseline", "loss_gap")), (
        f"{name}: loss gaps {per_seed(name, 'loss_gap')} not below {MAX_LOSS_GAP_RATIO} x the baseline's "
        f"{per_seed('baseline', 'loss_gap')}"
    )
assert max(per_seed("both", "acc_gap")) < min(per_seed("baseline", "acc_gap")) - MIN_ACC_GAP_REDUCTION, (
    f"dropout + weight decay: accuracy gaps {per_seed('both', 'acc_gap')} are not {MIN_ACC_GAP_REDUCTION:.0%} below "
    f"the baseline's {per_seed('baseline', 'acc_gap')}"
)
assert min(per_seed("baseline", "train_acc")) > MIN_BASELINE_TRAIN_ACC, "the baseline should memorise its training set"
for curve in curves["baseline"]:
    assert curve["val_loss"][-1] > min(curve["val_loss"]) + MIN_VAL_LOSS_RISE, (
        f"the baseline's validation loss should rise after its minimum: lowest {min(curve['val_loss']):.3f}, "
        f"final {curve['val_loss'][-1]:.3f}"
    )
assert max(per_seed("weight decay", "weight_norm")) < MAX_DECAY_NORM_RATIO * min(per_seed("baseline", "weight_norm")), (
    f"weight decay should leave visibly smaller weight matrices: ||W|| {per_seed('weight decay', 'weight_norm')} "
    f"against the baseline's {per_seed('baseline', 'weight_norm')}"
)
for k, r in enumerate(results["early stopping"]):
    stopped = curves["early stopping"][k]["val_loss"]
    assert abs(r["restored_val_loss"] - min(stopped)) < 1e-6, (
        f"the restored model's validation loss {r['restored_val_loss']:.4f} is not the best one {min(stopped):.4f}"
    )
    assert r["epochs"] <= MAX_EARLY_STOP_FRACTION * EPOCHS, f"early stopping trained {r['epochs']} of {EPOCHS} epochs"
base_acc = sum(per_seed("baseline", "test_acc")) / len(seeds)
base_gap = sum(per_seed("baseline", "acc_gap")) / len(seeds)
for name in ("dropout", "weight decay", "both", "early stopping"):
    acc_shift = abs(sum(per_seed(name, "test_acc")) / len(seeds) - base_acc)
    gap_shift = abs(sum(per_seed(name, "acc_gap")) / len(seeds) - base_gap)
    assert acc_shift <= MAX_ACC_SHIFT_SHARE * gap_shift, (
        f"{name}: the mean test accuracy moved by {acc_shift:.1%}, not much less than the gap ({gap_shift:.1%})"
    )
for name in ("dropout", "weight decay", "both", "early stopping"):
    assert max(per_seed(name, "wrong_confidence")) < min(per_seed("baseline", "wrong_confidence")) - MIN_WRONG_CONFIDENCE_MARGIN, (
        f"{name}: mean max-softmax on misclassified test images {per_seed(name, 'wrong_confidence')} is not "
        f"{MIN_WRONG_CONFIDENCE_MARGIN} below the baseline's {per_seed('baseline', 'wrong_confidence')}"
    )
assert over["acc_gap"] < MAX_UNDERFIT_GAP_RATIO * min(per_seed("baseline", "acc_gap")), (
    f"too much weight decay should shrink the accuracy gap: {over['acc_gap']:.1%} vs the baseline's "
    f"{per_seed('baseline', 'acc_gap')}"
)
assert over["test_loss"] > max(per_seed("both", "test_loss")) + MIN_UNDERFIT_LOSS_RISE, (
    f"too much weight decay should underfit: test loss {over['test_loss']:.3f} not above dropout + weight decay's "
    f"{per_seed('both', 'test_loss')} by {MIN_UNDERFIT_LOSS_RISE}"
)
assert over["test_loss"] > max(per_seed("baseline", "test_loss")) + MIN_OVER_LOSS_ABOVE_BASELINE, (
    f"too much weight decay should be worse on new images than no regularisation: test loss {over['test_loss']:.3f} "
    f"not above the baseline's {per_seed('baseline', 'test_loss')} by {MIN_OVER_LOSS_ABOVE_BASELINE}"
)
smallest_arm_gap = min(min(per_seed(name, "acc_gap")) for name in results)
assert over["acc_gap"] < smallest_arm_gap - MIN_OVER_GAP_MARGIN, (
    f"too much weight decay should have the smallest accuracy gap of the table: {over['acc_gap']:.1%} not "
    f"{MIN_OVER_GAP_MARGIN:.0%} below the smallest seed of the other arms, {smallest_arm_gap:.1%}"
)
print("every regularised arm beat the baseline's test loss on every seed; early stopping restored its best epoch")


def mean_of(name, key):
    """The mean over the seeds of one result of an arm."""
    return sum(per_seed(name, key)) / len(seeds)


lowest_epochs = [min(range(EPOCHS), key=c["val_loss"].__getitem__) + 1 for c in curves["baseline"]]
val_rise = [c["val_loss"][-1] - min(c["val_loss"]) for c in curves["baseline"]]
print(f"baseline: lowest validation loss after epochs {lowest_epochs}, final minus lowest {[round(v, 3) for v in val_rise]}")
print(f"test loss: baseline {mean_of('baseline', 'test_loss'):.3f}; dropout {mean_of('dropout', 'test_loss'):.3f}, "
      f"weight decay {mean_of('weight decay', 'test_loss'):.3f}, both {mean_of('both', 'test_loss'):.3f}, "
      f"early stopping {mean_of('early stopping', 'test_loss'):.3f}; too much decay {over['test_loss']:.3f}")
print(f"||W||: weight decay / baseline = {mean_of('weight decay', 'weight_norm') / mean_of('baseline', 'weight_norm'):.2f}")
print(f"accuracy gap: baseline {mean_of('baseline', 'acc_gap'):.1%}, both {mean_of('both', 'acc_gap'):.1%}, "
      f"early stopping {mean_of('early stopping', 'acc_gap'):.1%}, too much decay {over['acc_gap']:.1%}")
shifts = {name: mean_of(name, "test_acc") - mean_of("baseline", "test_acc") for name in ("dropout", "weight decay", "both", "early stopping")}
print("test accuracy minus the baseline's:", ", ".join(f"{name} {shift:+.1%}" for name, shift in shifts.items()),
      f"(the baseline's seeds span {max(per_seed('baseline', 'test_acc')) - min(per_seed('baseline', 'test_acc')):.1%})")

# %% [markdown]
# What the curves and the table show (the numbers quoted are printed above):
#
# - The **baseline** memorises: its training accuracy ends above
#   `MIN_BASELINE_TRAIN_ACC` and its training loss falls towards zero, while
#   the validation loss reaches its lowest point early (the epochs are
#   printed under the table) and then *rises* again on every seed, by more
#   than `MIN_VAL_LOSS_RISE` (asserted). The network becomes ever more
#   confident on new images, including where it is wrong: its mean
#   max-softmax on the misclassified test images ("conf. when wrong") is the
#   highest of all arms.
# - **Dropout**, **weight decay** and **both** lower the *test loss*, and
#   every seed of each beats every seed of the baseline by at least
#   `MIN_TEST_LOSS_MARGIN` (asserted): the improvement is larger than the
#   seed spread. Weight decay does it visibly through the size of the
#   weights (the ‖W‖ ratio is printed above and asserted below
#   `MAX_DECAY_NORM_RATIO`). Together they shrink the accuracy gap on every
#   seed (asserted).
# - **Early stopping** is a monitor inside the baseline's own runs: it keeps a
#   deep copy of the weights of the best validation epoch and notes where a
#   run with patience `PATIENCE` would have stopped (the last column), well
#   before the end (asserted). The restored weights give exactly the best
#   validation loss (asserted), and their test loss beats the baseline's
#   on every seed as well.
# - The *test accuracy* moves much less than the gap, for each of the four
#   regularised arms (asserted through `MAX_ACC_SHIFT_SHARE`; the shifts
#   are printed next to the baseline's seed spread). What regularisation
#   changes here is mostly the confidence: every regularised seed is less
#   confident on its mistakes than every baseline seed (asserted), which the
#   loss measures and the accuracy does not. It cannot invent the
#   information that 1,000 images do not contain; more data (or
#   augmentation, chapter 07) is the stronger cure.
# - **Too much** regularisation underfits: with ten times the weight decay
#   (one seed, the last row) the accuracy gap falls below half the
#   baseline's, and below every seed of every other arm, yet the test loss
#   is far *worse* than with dropout and weight decay together, and worse
#   even than the baseline's worst seed (all asserted). A small gap alone proves nothing; that is why the checks
#   judge the arms by the test loss.
#
# ## Pitfalls
#
# ### 1. A batch of one in BatchNorm, in training mode
#
# With a single sample per batch, `BatchNorm1d` would compute the variance
# of one value. PyTorch refuses:

# %%
# NBVAL_CHECK_OUTPUT
bn_net.train()
try:
    bn_net(test_x[:1].to(device))
except ValueError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# It happens in two places. In evaluation code: the fix is `model.eval()`.
# And in training, when the last batch of an epoch holds one sample
# (e.g. 1,025 images in batches of 64): the fix is
# `DataLoader(..., drop_last=True)` for the training loader. (`BatchNorm2d`
# accepts one image, since it still has H·W values per channel, but the
# statistics of one image are poor.)

# %%
bn_net.eval()
with torch.no_grad():
    print("after bn_net.eval(): one image ->", CLASSES[bn_net(test_x[:1].to(device)).argmax().item()],
          f"(true: {CLASSES[test_y[0]]})")
    one_image = nn.BatchNorm2d(3).train()(torch.randn(1, 3, 4, 4))
print(f"BatchNorm2d in train() mode accepts one image [1, 3, 4, 4]: output {tuple(one_image.shape)}, "
      "statistics over its 16 positions")

# %% [markdown]
# ### 2. `F.dropout` that ignores `eval()`
#
# The functional form `F.dropout(x, p)` has a third argument, `training`,
# whose default is **True**. It knows nothing about the module's mode, so a
# `forward` written with it keeps dropping in `eval()` mode. No error, just
# predictions that change from call to call:


# %%
class LeakyDropoutNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(784, 64), nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(F.dropout(F.relu(self.fc1(x.flatten(1))), p=0.5))  # the bug: training=True always


class FixedDropoutNet(LeakyDropoutNet):
    def forward(self, x):
        return self.fc2(F.dropout(F.relu(self.fc1(x.flatten(1))), p=0.5, training=self.training))


images = test_x[:16]
for cls in (LeakyDropoutNet, FixedDropoutNet):
    torch.manual_seed(SEED)
    net = cls().eval()
    with torch.no_grad():
        repeatable = torch.equal(net(images), net(images))
    print(f"{cls.__name__:16s} in eval() mode: two calls give the same output: {repeatable}")
    assert repeatable == (cls is FixedDropoutNet)

# %% [markdown]
# **Fix:** pass `training=self.training`, or better, create an
# `nn.Dropout` module in `__init__`: `model.eval()` reaches every
# submodule and switches it off.
#
# ### 3. LayerNorm given the wrong shape
#
# `nn.LayerNorm(normalized_shape)` normalises over the **last**
# `len(normalized_shape)` dimensions, and those must match exactly. Given
# `nn.LayerNorm(C)` for a `[N, C, H, W]` tensor, it looks for C at the end:

# %%
# NBVAL_CHECK_OUTPUT
try:
    nn.LayerNorm(C)(x)
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# The error is lucky. When W happens to equal C, the same line runs and
# silently normalises each row of pixels over its width instead:

# %%
square = torch.randn(2, 8, 5, 8)  # C = 8 and W = 8
wrong = nn.LayerNorm(8)(square)  # runs: statistics over W only
right = nn.LayerNorm([8, 5, 8])(square)  # statistics over C, H, W
print(f"LayerNorm(8) ran on {tuple(square.shape)}; largest difference from LayerNorm([8, 5, 8]): "
      f"{(wrong - right).abs().max().item():.2f}")
assert not torch.allclose(wrong, right, atol=1e-3)

# %% [markdown]
# **Fix:** say which dimensions you mean: `nn.LayerNorm([C, H, W])` for
# per-sample statistics over a whole feature map (or `nn.GroupNorm(1, C)`,
# with one scale per channel instead of one per element), or move the
# channels last, `x.permute(0, 2, 3, 1)`, for `nn.LayerNorm(C)` over the
# channels at each position (as ConvNeXt does).
#
# ### 4. Keeping the "best" weights without a copy
#
# Early stopping needs the weights of the best epoch, and the obvious line,
# `best = model.state_dict()`, keeps nothing: `state_dict()` returns the
# model's own tensors (detached, but sharing their storage), so every later
# optimizer step, which updates the parameters in place, changes `best` too:

# %%
torch.manual_seed(SEED)
net = nn.Linear(4, 1)
step_optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
best_alias = net.state_dict()  # the bug
best_copy = copy.deepcopy(net.state_dict())  # the fix
before = net.weight.detach().clone()
net(torch.randn(8, 4)).pow(2).mean().backward()
step_optimizer.step()
print(f"after one more step, the weights changed: {not torch.equal(net.weight, before)}")
print(f"state_dict() kept the old weights: {torch.equal(best_alias['weight'], before)}; "
      f"it shares memory with the parameter: {best_alias['weight'].data_ptr() == net.weight.data_ptr()}")
print(f"copy.deepcopy(state_dict()) kept them: {torch.equal(best_copy['weight'], before)}")
assert not torch.equal(best_alias["weight"], before) and torch.equal(best_copy["weight"], before)

# %% [markdown]
# **Fix:** `copy.deepcopy(model.state_dict())`, as `train_arm` does (or
# `{k: v.clone() for k, v in model.state_dict().items()}`); for large
# models save the best checkpoint to disk instead (chapter 14).
#
# ## Exercises
#
# Each exercise has a stub for you to fill in, then a checker cell that
# prints **PASSED**, **NOT YET** with a hint, or **TODO** while the stub
# still raises `NotImplementedError`. If you are stuck,
# `solution("12.inverted_dropout")` returns the reference solution.
#
# ### Exercise 1: inverted dropout with a given mask
#
# Write `inverted_dropout(x, keep, p)`: `keep` is a bool tensor of x's shape,
# True where an element survives; `p` is the drop probability, with
# 0 ≤ p < 1. Return what
# `nn.Dropout(p)` would return in training mode with that mask, as a new
# tensor (leave `x` alone). Use tensor arithmetic: the library's dropout
# kernels (`torch.ops.aten.native_dropout_backward`, `torch._masked_scale`,
# ...) are refused.


# %%
def inverted_dropout(x, keep, p):
    """x with the elements where keep is False set to 0, and the others scaled for dropout probability p (0 <= p < 1)."""
    raise NotImplementedError


# %%
result = check("12.inverted_dropout", inverted_dropout)

# %% [markdown]
# ### Exercise 2: BatchNorm's running statistics
#
# Write `bn_running_stats(batches, momentum)`: given a list of
# `[N, C, H, W]` tensors, return `(running_mean, running_var)`, each `[C]`,
# that a fresh `nn.BatchNorm2d(C, momentum=momentum)` holds after seeing
# these batches in training mode. `momentum=None` means the cumulative
# average. Do not use BatchNorm itself, its kernels (such as
# `torch.batch_norm_update_stats` or `torch.ops.aten._native_batch_norm_legit`)
# or another library normalisation; the checker compares with BatchNorm.


# %%
def bn_running_stats(batches, momentum):
    """(running_mean, running_var) of a fresh BatchNorm2d after the given training-mode batches."""
    raise NotImplementedError


# %%
result = check("12.bn_running_stats", bn_running_stats)

# %% [markdown]
# ### Exercise 3: GroupNorm by hand
#
# Write `group_norm(x, num_groups, weight, bias, eps=1e-5)` for `x` of
# shape `[N, C, *]` (any number of spatial dimensions, also none) without
# `nn.GroupNorm`, `F.group_norm` or another library normalisation
# (`F.layer_norm`, `F.rms_norm`, `nn.RMSNorm`, ...), nor their kernels
# (`torch.ops.aten.native_group_norm`, `native_layer_norm`, the batch-norm
# ones, ...). Group g holds the consecutive channels
# g·C/G to (g + 1)·C/G − 1; `weight` and `bias` have one value per channel.
# The checker compares with `F.group_norm`. When it passes, the cell also
# uses your function as LayerNorm and as InstanceNorm.


# %%
def group_norm(x, num_groups, weight, bias, eps=1e-5):
    """GroupNorm of x [N, C, *]: per-sample, per-group statistics, then a per-channel scale and shift."""
    raise NotImplementedError


# %%
result = check("12.group_norm", group_norm)
if result.passed:
    ones_c, zeros_c = torch.ones(C), torch.zeros(C)
    as_layer_norm = torch.allclose(group_norm(x, 1, ones_c, zeros_c), nn.LayerNorm([C, H, W])(x), atol=1e-5)
    as_instance_norm = torch.allclose(group_norm(x, C, ones_c, zeros_c), nn.InstanceNorm2d(C)(x), atol=1e-5)
    print(f"your group_norm with G = 1 equals LayerNorm([C, H, W]): {as_layer_norm}; "
          f"with G = C it equals InstanceNorm2d: {as_instance_norm}")

# %% [markdown]
# ## Summary
#
# - `nn.Dropout(p)` zeroes elements with probability p and scales the rest
#   by 1/(1 − p) in training mode (inverted dropout), so every output keeps
#   its input's value in expectation; in `eval()` mode it is the identity.
#   `F.dropout` needs `training=self.training`.
# - BatchNorm normalises with the batch's mean and *biased* variance, and
#   keeps running averages, `(1 − momentum)·old + momentum·new`, with the
#   *unbiased* variance; `eval()` switches to them. Evaluating a trained
#   BatchNorm network in training mode makes predictions depend on the
#   batch: with class-sorted batches the accuracy collapsed, and the
#   running statistics changed.
# - BatchNorm shares statistics over (N, H, W), LayerNorm over (C, H, W),
#   GroupNorm over (C/G, H, W) and InstanceNorm over (H, W); only BatchNorm
#   mixes samples, so only it depends on the batch; it and InstanceNorm with
#   `track_running_stats=True` (not the default) also depend on the mode.
# - Weight decay is an L2 penalty for SGD; AdamW decouples it and shrinks
#   the weights by (1 − lr·λ) per step, so what matters is lr·λ·steps.
#   Decay weight matrices, not biases or normalisation parameters.
# - `nn.RMSNorm` is LayerNorm without the mean and the bias: x divided by
#   its root mean square, times a weight; the two agree only on zero-mean
#   inputs.
# - `CrossEntropyLoss(label_smoothing=ε)` mixes the usual loss with the loss
#   against a uniform target, (1 − ε)·NLL + ε·mean_c(−log p_c); it gives the
#   logits a finite best margin instead of an infinite one.
# - On 1,000 images an over-sized MLP memorises. Dropout, weight decay,
#   both, and early stopping (best validation loss, patience, the best
#   `state_dict` restored from a copy) each lowered the *test loss* on every
#   one of the seeds (checked). A smaller train–test gap alone would not
#   prove that: the over-regularised run (ten times the weight decay) had
#   the smallest gap in the table and the highest test loss, above even the
#   baseline's (checked: its gap is below half the baseline's and below every
#   seed of every other arm, its test loss above that of dropout with weight
#   decay and above the baseline's worst seed). The test accuracy moved
#   little; what fell was the confidence on mistakes (the mean top
#   probability on misclassified images, lower for every regularised arm on
#   every seed, checked).
#
# **Next:** chapter 13 attacks the small-data problem from the other side:
# instead of constraining a network trained from scratch, it starts from
# one pretrained on a large data set (transfer learning).

# %%
print(f"notebook ran in {time.perf_counter() - notebook_start:.0f} s")
report.finish()
