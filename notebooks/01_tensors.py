# %% [markdown]
# # 01 · Tensors
#
# A tensor is PyTorch's array: a block of numbers of one *dtype*, on one
# *device*, seen through a *shape*. Everything later in the course (autograd,
# layers, data loading, distributed training) is built from tensors, so this
# chapter looks at them closely: how to make them, how their memory is laid out,
# and the rules by which tensors of different shapes combine.
#
# **What you will learn**
#
# - creating tensors: `torch.tensor`, `zeros`, `arange`, `linspace`, `rand` with a generator, the `*_like` functions;
# - dtypes and devices, and which dtype a mixed operation returns (type promotion);
# - strides and contiguity: why `view` sometimes fails where `reshape` works;
# - changing shapes with `squeeze`, `unsqueeze` and `permute`;
# - broadcasting: the rule that lets a `[4, 1]` tensor meet a `[5]` tensor;
# - indexing, boolean masks and `torch.where`;
# - NumPy interop, and which conversions share memory.
#
# **Prerequisites**: chapter 00 (devices and seeding). Some NumPy helps but is not required.
#
# **Estimated time**: 45 minutes.

# %% tags=["parameters"]
SEED = 0  # seed for the random tensors of this chapter

# %% [markdown]
# ## Setup

# %%
import warnings

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F

from helpers import plotting  # noqa: F401  (sets the course's figure defaults)
from helpers.device import pick_device, seed_everything
from helpers.exercises import check, solution  # noqa: F401  (solution: for when you are stuck)
from helpers.report import ChapterReport

seed_everything(SEED)
device = pick_device()
report = ChapterReport("01_tensors")
print(f"device: {device}")

# %% [markdown]
# ## 1. Creating tensors
#
# `torch.tensor` copies data from Python lists (or NumPy arrays) into a new
# tensor and infers the dtype: whole numbers become `int64`, numbers with a
# decimal point become `float32`. Every tensor knows its `shape`, `dtype` and `device`.

# %%
# NBVAL_CHECK_OUTPUT
a = torch.tensor([[1, 2, 3], [4, 5, 6]])
print(a)
print(f"shape {tuple(a.shape)}, dtype {a.dtype}, device {a.device}, {a.ndim} dimensions, {a.numel()} elements")
print(torch.tensor([0.5, 1.0]).dtype, torch.tensor([True, False]).dtype)

# %% [markdown]
# Factory functions build tensors from a shape or a range. Note the two
# ways to make a range: `arange(start, end, step)` leaves out `end`, like
# Python's `range`; `linspace(start, end, steps)` includes both ends and takes the *number* of points.

# %%
# NBVAL_CHECK_OUTPUT
print(torch.zeros(2, 3))
print(torch.full((2, 2), 7))
print(torch.eye(3, dtype=torch.int64))
print(torch.arange(0, 10, 3))
print(torch.linspace(0, 1, steps=5))

# %% [markdown]
# Random tensors come from a generator. Passing your own `torch.Generator`
# makes the numbers repeatable without touching the global generator (chapter 00).
# `rand` is uniform on [0, 1), `randn` standard normal, `randint(low, high)` whole numbers with `high` left out.

# %%
g = torch.Generator().manual_seed(SEED)
print(torch.rand(2, 3, generator=g))
print(torch.randn(2, 3, generator=g))
print(torch.randint(0, 10, (2, 5), generator=g))

# %% [markdown]
# The `*_like` functions make a new tensor with the same shape, dtype and
# device as an existing one, which saves repeating all three:

# %%
# NBVAL_CHECK_OUTPUT
template = torch.tensor([[1.5, 2.5], [3.5, 4.5]], dtype=torch.float64)
for made in (torch.zeros_like(template), torch.ones_like(template), torch.full_like(template, 9)):
    print(made.tolist(), made.dtype)

# %% [markdown]
# ## 2. dtype and device
#
# The dtype decides how each element is stored: `float32` (the default for
# floating point, 4 bytes), `float64` (8), `float16`/`bfloat16` (2), `int64`
# (the default for integers and for class labels), `uint8` (images), `bool` (masks).
# Convert with `.to(dtype)` or the shortcuts `.float()`, `.long()`, `.bool()`.

# %%
# NBVAL_CHECK_OUTPUT
x = torch.tensor([1.7, -2.2, 3.9])
for t in (x, x.to(torch.float16), x.double(), x.long(), x.bool()):
    print(f"{str(t.dtype):14s} {t.element_size()} byte(s) each  {t.tolist()}")

# %% [markdown]
# Converting to an integer dtype truncates towards zero (−2.2 → −2); converting to
# `bool` gives `True` for every non-zero value. `.tolist()` turns the elements into
# Python floats, which shows what each dtype really stores: the nearest float32 to 1.7
# is 1.7000000476837158, and float16, with only about three significant digits, stores 1.7001953125.
#
# **Type promotion.** When an operation mixes dtypes, PyTorch computes in a
# dtype that can hold both, following three rules:
#
# 1. a higher *category* wins: bool < integer < floating point < complex;
# 2. within a category, the larger dtype wins (`float32` + `float64` → `float64`);
# 3. a Python number or a 0-dimensional tensor only counts through its category: it never makes a float32 tensor float64.
#
# `torch.result_type` tells you the answer without computing anything.

# %%
# NBVAL_CHECK_OUTPUT
i64 = torch.tensor([1, 2])
f32 = torch.tensor([1.0, 2.0])
f64 = torch.tensor([1.0, 2.0], dtype=torch.float64)
u8 = torch.tensor([1, 2], dtype=torch.uint8)
i8 = torch.tensor([1, 2], dtype=torch.int8)
cases = {
    "int64 + int64": i64 + i64,
    "int64 + float32": i64 + f32,
    "float32 + float64": f32 + f64,
    "uint8 + int8": u8 + i8,
    "int64 + 2.5 (a Python float)": i64 + 2.5,
    "float32 + 0-dim float64 tensor": f32 + torch.tensor(2.0, dtype=torch.float64),
    "int64 / int64 (true division)": i64 / i64,
    "int64 // int64 (floor division)": i64 // i64,
}
for what, result in cases.items():
    print(f"{what:32s} -> {result.dtype}")
print(torch.result_type(f32, f64))

# %% [markdown]
# `uint8` + `int8` gives `int16`, because neither of the two can hold all the
# values of the other. And `/` is true division, so two integer tensors give floats; `//` (floor division) stays integer.
#
# **Device.** A tensor's `device` says where its memory is. Create tensors directly
# on the device you picked (`device=`) rather than on the CPU and then moving them:
# it saves a copy. `.to(device)` returns the tensor itself when it is already there.

# %%
on_device = torch.zeros(2, 3, device=device)
moved = torch.zeros(2, 3).to(device)
print(on_device.device, moved.device, moved.to(device) is moved)

# %% [markdown]
# ## 3. Memory layout: `view`, `reshape` and strides
#
# A tensor's elements live in a flat, one-dimensional block of memory, its
# *storage*. The shape says how to read that block as rows and columns, and the
# *strides* say how many elements to skip in storage to move one step along each
# dimension. For a 3 × 4 tensor stored row by row, moving one row skips 4
# elements and moving one column skips 1, so element `[i, j]` sits at position `4*i + 1*j`.

# %%
# NBVAL_CHECK_OUTPUT
x = torch.arange(12).reshape(3, 4)
print(x)
print(f"shape {tuple(x.shape)}, stride {x.stride()}, contiguous {x.is_contiguous()}")
i, j = 2, 1
print(f"x[{i}, {j}] = {x[i, j].item()} = storage[{i}*{x.stride(0)} + {j}*{x.stride(1)}] = {x.flatten()[i * x.stride(0) + j * x.stride(1)].item()}")

# %% [markdown]
# A tensor is *contiguous* when its strides are exactly those of a fresh tensor of
# its shape: the last dimension moves by 1, and each earlier one by the size of everything after it.
#
# **Transposing copies nothing.** `x.t()` (or `x.transpose(0, 1)`) returns a tensor
# that shares `x`'s storage and only swaps the strides. That makes it free, but the
# result is no longer contiguous: walking along its last dimension jumps 4 elements at a time.

# %%
def same_storage(p: torch.Tensor, q: torch.Tensor) -> bool:
    """True when two tensors read from the same block of memory."""
    return p.untyped_storage().data_ptr() == q.untyped_storage().data_ptr()


# %%
# NBVAL_CHECK_OUTPUT
xt = x.t()
print(xt)
print(f"shape {tuple(xt.shape)}, stride {xt.stride()}, contiguous {xt.is_contiguous()}, shares x's storage {same_storage(x, xt)}")

# %% [markdown]
# **`view`** reinterprets the same storage with a new shape. It never copies, so
# it only works when the new shape can be expressed with strides over the existing
# layout. On a contiguous tensor it always can, and the result shares memory: writing through the view changes the original.

# %%
# NBVAL_CHECK_OUTPUT
v = x.view(2, 6)
print(v)
print(f"stride {v.stride()}, shares x's storage {same_storage(x, v)}")
x2 = x.clone()  # a private copy, so that x itself stays unchanged
x2.view(-1)[0] = 100  # -1: "whatever size makes the element count match"
print(x2[0])

# %% [markdown]
# The transposed `xt` cannot be flattened that way: reading it row by row means
# visiting storage positions 0, 4, 8, 1, 5, 9, …, which no single stride can
# describe. `view` refuses with an error that points to the fix:

# %%
try:
    xt.view(12)
except RuntimeError as err:
    view_error = f"{type(err).__name__}: {err}"
    print(view_error)

# %% [markdown]
# There are two fixes. `.contiguous()` copies the elements into a fresh storage in
# row-major order, after which `view` works. `reshape` does the same in one step:
# it returns a view when one is possible and a copy otherwise. The values are the same either way.

# %%
# NBVAL_CHECK_OUTPUT
fixed_view = xt.contiguous().view(12)
fixed_reshape = xt.reshape(12)
print(fixed_reshape)
print(f"equal: {torch.equal(fixed_view, fixed_reshape)}")
print(f"reshape of contiguous x shares memory:  {same_storage(x, x.reshape(12))}")
print(f"reshape of transposed xt shares memory: {same_storage(xt, fixed_reshape)}")

# %% [markdown]
# So which one should you use? `reshape` when you only want the new shape.
# `view` when you rely on sharing memory (for example to write into a tensor
# through a different shape), because it fails loudly instead of silently copying.
#
# ## 4. `squeeze`, `unsqueeze` and `permute`
#
# Dimensions of size 1 carry no data but matter a lot for how tensors combine.
# `unsqueeze(d)` inserts one at position `d`; indexing with `None` does the same
# inline. `squeeze()` removes every size-1 dimension, `squeeze(d)` only dimension `d`
# (and a tuple of dimensions works too).

# %%
# NBVAL_CHECK_OUTPUT
v = torch.tensor([1.0, 2.0, 3.0])
print("v                ", tuple(v.shape))
print("v.unsqueeze(0)   ", tuple(v.unsqueeze(0).shape))
print("v.unsqueeze(1)   ", tuple(v.unsqueeze(1).shape))
print("v[None, :, None] ", tuple(v[None, :, None].shape))
y = torch.zeros(1, 3, 1, 2)
print("y                ", tuple(y.shape))
print("y.squeeze()      ", tuple(y.squeeze().shape))
print("y.squeeze(0)     ", tuple(y.squeeze(0).shape))
print("y.squeeze((0, 2))", tuple(y.squeeze((0, 2)).shape))

# %% [markdown]
# `permute` reorders all dimensions at once. The classic use: images on disk and in
# matplotlib are height × width × channels (HWC), while PyTorch's convolutions want channels first (CHW).
# Like `transpose`, `permute` only reorders the strides: no copy, and the result is not contiguous.

# %%
# NBVAL_CHECK_OUTPUT
hwc = torch.arange(2 * 3 * 4).reshape(2, 3, 4)  # height 2, width 3, 4 channels
chw = hwc.permute(2, 0, 1)
print(f"HWC shape {tuple(hwc.shape)} stride {hwc.stride()}")
print(f"CHW shape {tuple(chw.shape)} stride {chw.stride()}  contiguous {chw.is_contiguous()}  shares memory {same_storage(hwc, chw)}")
print(f"channel 1 as an image:\n{chw[1]}")

# %% [markdown]
# For a batch of matrices, swap the last two dimensions with `x.mT` or
# `x.transpose(-2, -1)`. Older code uses `x.T` for this, but `.T` reverses *all*
# dimensions and is meant for 2-D tensors; on other dimensions it is deprecated and warns:

# %%
batch_of_matrices = torch.zeros(8, 2, 3)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    reversed_all = batch_of_matrices.T
print(f".T  -> {tuple(reversed_all.shape)}   .mT -> {tuple(batch_of_matrices.mT.shape)}")
for w in caught:  # the message ends with a note on where in torch's C++ source it was raised
    print(f"{w.category.__name__}: {str(w.message).split(' (Triggered')[0]}")

# %% [markdown]
#
# ## 5. Broadcasting
#
# Element-wise operations (`+`, `*`, `==`, `torch.where`, …) accept tensors of
# different shapes when the shapes are *compatible*. PyTorch then behaves as if the
# smaller tensor were repeated to the larger shape, without copying anything.
# The rule, applied to the shapes written **right-aligned**:
#
# 1. compare the dimensions from the last one backwards; where one shape is shorter, treat its missing leading dimensions as 1;
# 2. two sizes are compatible when they are equal or when one of them is 1;
# 3. the result takes the larger size in each position; a size-1 dimension is stretched to match.
#
# **Worked example.** A column `col` of shape `[4, 1]` plus a row `row` of shape `[5]`:

# %%
def show_alignment(**shapes) -> None:
    """Print shapes right-aligned, the way broadcasting compares them."""
    width = max(len(s) for s in shapes.values())
    for name, shape in shapes.items():
        cells = ["  "] * (width - len(shape)) + [f"{n:2d}" for n in shape]
        print(f"{name:8s} [ {'  '.join(cells)} ]")


# %%
# NBVAL_CHECK_OUTPUT
col = (torch.arange(4) * 10).unsqueeze(1)  # shape [4, 1]: 0, 10, 20, 30 down a column
row = torch.arange(5)  # shape [5]: 0 ... 4 along a row
table = col + row
show_alignment(col=col.shape, row=row.shape, result=table.shape)
print(table)
print(torch.broadcast_shapes(col.shape, row.shape))

# %% [markdown]
# Right-aligned, `row` has no first dimension, so it counts as 1. In the first
# position 4 meets 1, in the second 1 meets 5: each pair has a 1, so the shapes are
# compatible, and the result is `[4, 5]`. Entry `[i, j]` is `col[i, 0] + row[j]`
# = `10*i + j`, so the tens digit is the row and the units digit the column.
# This is an *outer sum*: every element of one vector combined with every element of the other.

# %%
from matplotlib.patches import Rectangle

fig, axes = plt.subplots(1, 3, figsize=(9, 3))
panels = [
    (col.expand(4, 5), (1, 4), "col [4, 1], stretched to [4, 5]"),
    (row.expand(4, 5), (5, 1), "row [5] = [1, 5], stretched to [4, 5]"),
    (table, (5, 4), "col + row: [4, 5]"),
]
for ax, (values, (real_w, real_h), title) in zip(axes, panels):
    ax.imshow(values.numpy(), cmap="viridis", vmin=0, vmax=table.max().item())
    for (r, c), value in np.ndenumerate(values.numpy()):
        virtual = c >= real_w or r >= real_h  # stretched: not stored in memory
        ax.text(c, r, str(value), ha="center", va="center", fontsize=11,
                color="white" if value < 25 else "black", alpha=0.45 if virtual else 1.0)
        if virtual:
            ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, color="white", alpha=0.55, linewidth=0))
    ax.add_patch(Rectangle((-0.5, -0.5), real_w, real_h, fill=False, edgecolor="red", linewidth=2))
    ax.set_title(title, fontsize=10)
    ax.set_xticks(range(5))
    ax.set_yticks(range(4))
fig.suptitle("Broadcasting: red = the elements really stored; faded = read again through a stretched size-1 dimension", fontsize=10)
plt.show()

# %% [markdown]
# "Stretched" never means copied. `expand` makes the stretching explicit and shows
# how: the stretched dimension gets stride 0, so every step along it reads the same element again.

# %%
# NBVAL_CHECK_OUTPUT
stretched = col.expand(4, 5)
print(f"col.expand(4, 5): shape {tuple(stretched.shape)}, stride {stretched.stride()}, shares col's storage {same_storage(col, stretched)}")
print(stretched)

# %% [markdown]
# Broadcasting does real work in everyday code. Standardising each column of a data
# matrix subtracts a `[3]` mean from an `[N, 3]` matrix; normalising an image per
# channel needs the statistics shaped `[3, 1, 1]`, so that they line up with the channel dimension of `[3, H, W]`.

# %%
# NBVAL_CHECK_OUTPUT
data = torch.tensor([[1.0, 10.0, 100.0], [3.0, 30.0, 300.0]])  # [N=2, 3]
print((data - data.mean(dim=0)).tolist())  # [2, 3] - [3] -> [2, 3]
image = torch.ones(3, 2, 2) * torch.tensor([1.0, 2.0, 3.0]).view(3, 1, 1)  # channel c filled with c+1
mean = torch.tensor([1.0, 2.0, 3.0]).view(3, 1, 1)
print((image - mean).abs().sum().item())

# %% [markdown]
# When no dimension pair fits the rule, the error names the first position that failed:

# %%
try:
    torch.ones(3) + torch.ones(4)
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# ## 6. Indexing, boolean masks and `torch.where`
#
# Indexing works as in NumPy. Integers and slices (`start:stop:step`, `...` for
# "all remaining dimensions") give *views*: they share memory with the original.

# %%
# NBVAL_CHECK_OUTPUT
m = torch.arange(20).reshape(4, 5)
print(m)
print("m[1]       ", m[1])
print("m[:, 2]    ", m[:, 2])
print("m[-1, ::2] ", m[-1, ::2])
print("m[1:3, 3:] ", m[1:3, 3:].tolist())
print("m[..., 0]  ", m[..., 0])
print(f"a slice shares memory: {same_storage(m, m[1:3, 3:])}")

# %% [markdown]
# Indexing with integer *tensors* (advanced indexing) picks arbitrary elements and
# returns a copy. With one index tensor per dimension, they are paired up
# element by element: `m[rows, cols]` is `[m[rows[0], cols[0]], m[rows[1], cols[1]], …]`.

# %%
# NBVAL_CHECK_OUTPUT
print(m[torch.tensor([0, 2])])  # rows 0 and 2
rows, cols = torch.tensor([0, 1, 2, 3]), torch.tensor([4, 3, 2, 1])
picked = m[rows, cols]  # m[0, 4], m[1, 3], m[2, 2], m[3, 1]
print(picked, f"copy: {not same_storage(m, picked)}")

# %% [markdown]
# A **boolean mask** of the same shape selects the elements where it is `True`,
# returned as a 1-D copy (the number of hits is not known in advance, so no shape
# could be kept). Assigning through a mask writes in place.

# %%
# NBVAL_CHECK_OUTPUT
mask = m % 3 == 0
print(mask.int())
print(f"{mask.sum().item()} multiples of 3: {m[mask]}, a copy: {not same_storage(m, m[mask])}")
masked = m.clone()
masked[mask] = -1
print(masked)

# %% [markdown]
# `torch.where(condition, a, b)` chooses element-wise between two tensors (or
# numbers), and broadcasts all three. It keeps the shape, unlike a mask. With
# only a condition, it returns the indices where the condition holds, one tensor per dimension.

# %%
# NBVAL_CHECK_OUTPUT
z = torch.tensor([[-2, 5, 0], [7, -1, 3]])
print(torch.where(z > 0, z, 0))  # negative and zero entries replaced by 0
print(torch.where(z >= 0, z, -z))  # the absolute value, written as a choice
print(torch.where(z < 0))

# %% [markdown]
# ## 7. NumPy interop and shared memory
#
# PyTorch and NumPy convert both ways, and whether the result **shares memory**
# with its source depends on the function:
#
# | conversion | shares memory? |
# | --- | --- |
# | `torch.from_numpy(array)` | yes (the tensor uses the array's buffer) |
# | `tensor.numpy()` | yes, for a CPU tensor |
# | `torch.as_tensor(array)` | yes when dtype and device already match, else copies |
# | `torch.tensor(array)` | no, always copies |
#
# Sharing is fast (no copy, whatever the size) but means a change on one side shows up on the other:

# %%
# NBVAL_CHECK_OUTPUT
array = np.arange(4, dtype=np.float32)
shared = torch.from_numpy(array)
copied = torch.tensor(array)
array[0] = 100.0  # change the NumPy array...
print(f"numpy array: {array}")
print(f"from_numpy:  {shared}")  # ...and the tensor sees it
print(f"tensor():    {copied}")  # the copy does not
shared[1] = -5.0  # and the other way round
print(f"numpy array after writing through the tensor: {array}")

# %%
# NBVAL_CHECK_OUTPUT
t = torch.ones(3)
back = t.numpy()
t.add_(1)  # in-place: the array sees it
print(f"tensor {t}, its .numpy() {back}")
print(f"as_tensor, same dtype, shares:     {torch.as_tensor(array).data_ptr() == shared.data_ptr()}")
print(f"as_tensor, other dtype, shares:    {torch.as_tensor(array, dtype=torch.float64).data_ptr() == shared.data_ptr()}")
print(f"NumPy's default float64 stays float64: {torch.from_numpy(np.zeros(2)).dtype}")

# %% [markdown]
# Two consequences. NumPy creates `float64` by default and the conversion keeps it,
# while PyTorch layers use `float32`: convert with `.float()` (see the pitfalls).
# And `.numpy()` only works on the CPU, where NumPy lives; a tensor on any other device
# needs `.cpu()` first. The `meta` device exists on every machine, so it shows the error anywhere:

# %%
try:
    torch.ones(2, device="meta").numpy()
except TypeError as err:
    print(f"{type(err).__name__}: {err}")
print(torch.ones(2, device=device).cpu().numpy())

# %% [markdown]
# ## Checks
#
# What this chapter must show: the worked broadcasting example, the failing `view`
# on a non-contiguous tensor with its fix, and that `from_numpy` shares memory.

# %%
expected = torch.tensor([[10 * r + c for c in range(5)] for r in range(4)])
assert table.shape == (4, 5), f"[4, 1] + [5] should broadcast to (4, 5), got {tuple(table.shape)}"
assert torch.equal(table, expected), "col + row should equal the outer sum 10*i + j"
assert stretched.stride() == (1, 0), "an expanded dimension should have stride 0"

assert not xt.is_contiguous(), "a transposed tensor should not be contiguous"
assert "view size is not compatible with input tensor's size and stride" in view_error, view_error
assert torch.equal(xt.contiguous().view(12), xt.reshape(12)), "contiguous().view and reshape should agree"
assert torch.equal(xt.reshape(12), torch.tensor([0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]))

check_array = np.zeros(3, dtype=np.float32)
check_tensor = torch.from_numpy(check_array)
check_array[2] = 7.0
assert check_tensor[2].item() == 7.0, "from_numpy should share memory with the array"
check_tensor[0] = 3.0
assert check_array[0] == 3.0, "writes through the tensor should reach the array"
assert torch.tensor(check_array)[1].item() == 0.0 and not np.shares_memory(torch.tensor(check_array).numpy(), check_array), "torch.tensor should copy"

report.record("broadcast [4,1] + [5]", "x".join(map(str, table.shape)))
report.record("view on transposed tensor", "RuntimeError (reshape works)")
report.record("from_numpy shares memory", "yes")
print("all checks passed")

# %% [markdown]
# ## Pitfalls
#
# **Broadcasting you did not ask for.** A model outputs predictions of shape `[N]`,
# the targets come as `[N, 1]`. Their difference broadcasts to `[N, N]`, so every
# prediction is compared with every target, and the "loss" is a perfectly
# plausible-looking but wrong number. No error is raised. `F.mse_loss` at least warns:

# %%
pred = torch.tensor([1.0, 2.0, 3.0, 4.0])  # [4]
target = torch.tensor([[1.0], [2.0], [3.0], [4.0]])  # [4, 1]: the prediction is perfect
print(f"(pred - target) has shape {tuple((pred - target).shape)}; mean squared error {((pred - target) ** 2).mean().item():.2f}")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    loss = F.mse_loss(pred, target)
for w in caught:
    print(f"{w.category.__name__}: {w.message}")
print(f"fix: make the shapes equal -> {F.mse_loss(pred, target.squeeze(1)).item():.2f}")

# %% [markdown]
# **`squeeze()` with a batch of one.** `squeeze()` without an argument removes
# *every* size-1 dimension, including a batch dimension that happens to be 1.
# Name the dimension you mean:

# %%
# NBVAL_CHECK_OUTPUT
scores = torch.tensor([[0.7]])  # [batch=1, 1 output]
print(f"squeeze():  shape {tuple(scores.squeeze().shape)}  <- the batch dimension is gone too")
print(f"squeeze(1): shape {tuple(scores.squeeze(1).shape)}")

# %% [markdown]
# **Integer overflow wraps around.** Arithmetic on `uint8` images stays in `uint8`
# and wraps modulo 256, without an error. Convert to a wider dtype first:

# %%
# NBVAL_CHECK_OUTPUT
pixels = torch.tensor([100, 200, 250], dtype=torch.uint8)
print(f"uint8 + 100:       {pixels + 100}")
print(f"int16 + 100:       {pixels.to(torch.int16) + 100}")
print(f"float, scaled:     {pixels.float() / 255}")

# %% [markdown]
# **float64 from NumPy meets a float32 layer.** Data made with NumPy is `float64`
# unless you say otherwise; weights are `float32`. A matrix product refuses to mix them:

# %%
features = torch.from_numpy(np.random.default_rng(SEED).random((2, 3)))  # float64
weights = torch.randn(3, 2)  # float32
try:
    features @ weights
except RuntimeError as err:
    print(f"{type(err).__name__}: {err}")
print(f"fix: features.float() @ weights -> {(features.float() @ weights).dtype}")

# %% [markdown]
# **Random `*_like` of an integer tensor.** `rand_like` and `randn_like` draw
# floating-point numbers, so they refuse an integer template. Pass a dtype:

# %%
labels = torch.tensor([0, 2, 1])
try:
    torch.rand_like(labels)
except NotImplementedError as err:
    print(f"{type(err).__name__}: {err}")
print(f"fix: torch.rand_like(labels, dtype=torch.float32).shape -> {tuple(torch.rand_like(labels, dtype=torch.float32).shape)}")

# %% [markdown]
# ## Exercises
#
# Replace each `raise NotImplementedError` with your code, then run the checker
# cell below it: it prints `PASSED`, a hint (`NOT YET`), or `TODO` while the stub
# is untouched, and never stops the notebook. Stuck? `solution("01.pairwise_sq_dists")`
# returns the reference solution (`import inspect; print(inspect.getsource(solution("01.pairwise_sq_dists")))` shows it).
#
# **Exercise 1: `pairwise_sq_dists`.** Given `a` of shape `[N, D]` (N points in D
# dimensions) and `b` of shape `[M, D]`, return the `[N, M]` tensor whose entry
# `[i, j]` is the squared Euclidean distance `((a[i] - b[j]) ** 2).sum()`, in
# the same dtype as the inputs. Use broadcasting, no Python loops. Hint: which shapes must `a` and `b` take so that
# their difference has shape `[N, M, D]`? (This is the core of k-nearest-neighbours and k-means.)

# %%
def pairwise_sq_dists(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Squared Euclidean distances between the rows of a [N, D] and b [M, D], as [N, M]."""
    raise NotImplementedError


# %%
result = check("01.pairwise_sq_dists", pairwise_sq_dists)

# %% [markdown]
# **Exercise 2: `one_hot`.** Classification labels are class indices, `int64` of
# shape `[N]`. Return their *one-hot* encoding: a `float32` tensor of shape
# `[N, num_classes]` that is 1.0 at `[i, labels[i]]` and 0.0 everywhere else. Start
# from `torch.zeros` and write the ones with a single indexing assignment
# (section 6 shows how two index tensors pair up). `num_classes` sets the width,
# even if the largest class does not occur in `labels`.

# %%
def one_hot(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """float32 [N, num_classes]: 1.0 at [i, labels[i]], 0.0 elsewhere."""
    raise NotImplementedError


# %%
result = check("01.one_hot", one_hot)

# %% [markdown]
# ## Summary
#
# - A tensor is a storage (a flat block of memory) read through a shape and strides, with one dtype and one device.
# - Mixed dtypes promote by category, then size; Python numbers and 0-dim tensors only count by category.
# - `view` never copies and so fails on layouts like a transpose; `reshape` copies when it must.
#   `transpose`, `permute`, `expand`, slicing and `view` all share memory with their source.
# - Broadcasting compares shapes right-aligned; sizes must match or be 1, and size-1 dimensions stretch with stride 0.
# - Slices are views; integer-tensor and boolean-mask indexing make copies; `torch.where` selects element-wise.
# - `from_numpy` and `.numpy()` share memory, `torch.tensor` copies.
#
# **Next**: chapter 02 lets tensors remember how they were computed, so that
# PyTorch can differentiate through those computations: autograd.

# %%
report.finish()
