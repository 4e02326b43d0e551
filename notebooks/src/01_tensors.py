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
# - creating tensors: `torch.tensor`, `zeros`, `arange`, `linspace`, `rand` with a generator, the `*_like` functions,
#   and the older forms still in circulation (`torch.Tensor(...)`, `torch.range`, `set_default_tensor_type`);
# - dtypes and devices, and which dtype a mixed operation returns (type promotion);
# - strides and contiguity: why `view` sometimes fails where `reshape` works;
# - changing shapes with `squeeze`, `unsqueeze` and `permute`;
# - broadcasting: the rule that lets a `[4, 1]` tensor meet a `[5]` tensor;
# - indexing, boolean masks and `torch.where`;
# - reductions along a `dim` and why `keepdim` matters; `argmax` and `max`'s (values, indices);
# - matrix products (`@`, also with 1-D operands, `mm`, `bmm`, `einsum`) against element-wise `*`;
# - joining and splitting (`cat`, `stack`, `chunk`, `split`), and `gather`/`scatter_` to pick or write one entry per row
#   (and why a cross-entropy written by hand from probabilities can return `inf`);
# - the trailing-underscore convention for in-place operations;
# - NumPy interop, and which conversions share memory.
#
# **Prerequisites**: chapter 00 (devices and seeding). Some NumPy helps but is not required.
#
# **Estimated time**: 90 minutes.

# %% tags=["parameters"]
SEED = 0  # seed for the random tensors of this chapter

# %% [markdown]
# ## Setup

# %%
import itertools
import math
import warnings

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.patches import Rectangle

from helpers import plotting  # noqa: F401  (sets the course's figure defaults)
from helpers.device import pick_device, seed_everything
from helpers.exercises import check, hint, solution  # noqa: F401  (hint, solution: for when you are stuck)
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
# `rand` is uniform on [0, 1), `randn` standard normal, `randint(low, high)` whole numbers with `high` left out
# (10,000 draws from `randint(0, 10)` show both ends: 0 occurs, 10 never does).

# %%
global_state = torch.get_rng_state()
rng = torch.Generator().manual_seed(SEED)
uniform = torch.rand(2, 3, generator=rng)
print(uniform)
print(torch.randn(2, 3, generator=rng))
ints = torch.randint(0, 10, (10_000,), generator=rng)
print(f"randint(0, 10), 10,000 draws: first ten {ints[:10].tolist()}, min {ints.min().item()}, max {ints.max().item()}")
assert torch.equal(torch.get_rng_state(), global_state), "drawing from our own generator should leave the global one alone"
again = torch.rand(2, 3, generator=torch.Generator().manual_seed(SEED))
assert torch.equal(again, uniform), "a new generator with the same seed should give the same numbers"
assert ints.max() == 9, f"randint(0, 10) should reach 9 but leave out 10; the largest of 10,000 draws is {ints.max().item()}"
assert ints.min() == 0, f"randint(0, 10) should include 0; the smallest of 10,000 draws is {ints.min().item()}"

# %% [markdown]
# The `*_like` functions make a new tensor with the same shape, dtype and
# device as an existing one, which saves repeating all three:

# %%
# NBVAL_CHECK_OUTPUT
template = torch.tensor([[1.5, 2.5], [3.5, 4.5]], dtype=torch.float64)
for made in (torch.zeros_like(template), torch.ones_like(template), torch.full_like(template, 9)):
    print(made.tolist(), made.dtype)
    assert (made.shape, made.dtype, made.device) == (template.shape, template.dtype, template.device), "a *_like copies all three"

# %% [markdown]
# ### Going further (optional): older forms you will still meet
#
# *Skip this on a first reading: nothing later in the chapter depends on it.* Code written for early
# versions of PyTorch, and many tutorials copied from it, create tensors in three ways that have since
# been replaced:
#
# - `torch.Tensor(...)`, the class called like a function (the *legacy constructor*). It always
#   makes the default float dtype, even from whole numbers, and a single integer means a *size*:
#   `torch.Tensor(3)` is three uninitialised floats (whatever the memory held), not the number 3.
#   It takes no `dtype=` and raises no warning, so it is easy to miss. Use `torch.tensor(data)`
#   for data, and `torch.zeros(size)` (or `torch.empty(size)`, if you will overwrite every element) for a shape.
# - `torch.range(start, end)` *includes* `end`, and without `dtype=` it returns the default float dtype
#   (float32 unless you change it), even for whole-number arguments. It is deprecated, and warns that it
#   "will be removed in a future release". `torch.arange` leaves `end` out, like Python's `range`, and
#   infers `int64` from whole numbers.
# - `torch.set_default_tensor_type(torch.DoubleTensor)` set the default dtype (and, with
#   `torch.cuda.FloatTensor`, the device) by naming a tensor type. It is deprecated since PyTorch 2.1;
#   `torch.set_default_dtype` (section 2) and `torch.set_default_device` each set one of the two.
#
# A fourth form is not deprecated but warns: `torch.tensor(t)` on something that is already a tensor.
# It copies, but the copy would also drop `t`'s autograd history (chapter 02) without saying so, so
# PyTorch asks you to say what you mean: `t.detach().clone()` for a plain copy.
#
# The cells below take these one at a time. First the legacy constructor, next to `torch.tensor`: from
# the same list it makes floats, and from a single integer a tensor of that *size*.

# %%
# NBVAL_CHECK_OUTPUT
with warnings.catch_warnings(record=True) as legacy_caught:
    warnings.simplefilter("always")
    legacy_data, legacy_size = torch.Tensor([1, 2]), torch.Tensor(3)
print(f"torch.Tensor([1, 2]) -> {legacy_data.tolist()} {legacy_data.dtype}   torch.tensor([1, 2]) -> {torch.tensor([1, 2]).dtype}")
print(f"torch.Tensor(3)      -> shape {tuple(legacy_size.shape)}, uninitialised   "
      f"torch.tensor(3) -> shape {tuple(torch.tensor(3).shape)}, value {torch.tensor(3).item()}")
assert legacy_data.dtype == torch.float32 and torch.tensor([1, 2]).dtype == torch.int64, "torch.Tensor should make floats, torch.tensor int64"
assert legacy_size.shape == (3,) and torch.tensor(3).shape == (), "torch.Tensor(3) is a size, torch.tensor(3) a value"
assert not legacy_caught, f"the legacy constructor should not warn, it gave {[str(w.message) for w in legacy_caught]}"

# %% [markdown]
# Asking the legacy constructor for a dtype fails. Its error message goes on to list every form it
# accepts (a size, data, a storage or a tensor, each at most with `device=`); the cell prints only the
# start of the first line, and checks that the message blames the `dtype` keyword and that none of the forms takes it.

# %%
try:
    torch.Tensor([1, 2], dtype=torch.int64)
    raise AssertionError("the legacy constructor should refuse dtype=")
except TypeError as err:
    legacy_error = f"{type(err).__name__}: {err}"
print(f"torch.Tensor([1, 2], dtype=torch.int64) -> {legacy_error.splitlines()[0].split(', but expected')[0]}, ...")
print("fix: torch.tensor([1, 2], dtype=torch.int64), or torch.tensor([1, 2]) since whole numbers give int64 anyway")
assert "keywords were incorrect: dtype" in legacy_error, legacy_error
accepted_forms = [line.strip() for line in legacy_error.splitlines() if line.strip().startswith("* (")]
assert accepted_forms and not any("dtype" in form for form in accepted_forms), f"no accepted form should take dtype=: {accepted_forms}"

# %% [markdown]
# The two deprecated functions warn. Some PyTorch warnings appear only once per process, so the cell
# turns on `torch.set_warn_always` while it runs, to show them every time it is run.

# %%
# NBVAL_CHECK_OUTPUT
warn_always_before = torch.is_warn_always_enabled()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    torch.set_warn_always(True)
    try:
        old_range = torch.range(0, 3)
        torch.set_default_tensor_type(torch.FloatTensor)  # float32 on the CPU, the default already: nothing changes
    finally:
        torch.set_warn_always(warn_always_before)
print(f"torch.range(0, 3)  -> {old_range.tolist()} {old_range.dtype}")
print(f"torch.arange(0, 3) -> {torch.arange(0, 3).tolist()} {torch.arange(0, 3).dtype}")
old_form_warnings = [str(w.message).split(" (Triggered")[0] for w in caught]  # the cut drops a C++ source path
for w, message in zip(caught, old_form_warnings):
    print(f"{w.category.__name__}: {message}")
assert old_range.tolist() == [0.0, 1.0, 2.0, 3.0] and torch.arange(0, 3).tolist() == [0, 1, 2], "range includes the end, arange does not"
assert old_range.dtype == torch.get_default_dtype() and torch.arange(0, 3).dtype == torch.int64, "range makes the default float dtype from ints, arange int64"
assert any("torch.range is deprecated and will be removed in a future release" in m for m in old_form_warnings), old_form_warnings
assert any("set_default_tensor_type() is deprecated as of PyTorch 2.1" in m and "set_default_dtype" in m and "set_default_device" in m
           for m in old_form_warnings), old_form_warnings
assert torch.get_default_dtype() == torch.float32 and torch.empty(1).device.type == "cpu", "the defaults should be unchanged"

# %% [markdown]
# And `torch.tensor` on a tensor copies, with a warning that names the explicit form:

# %%
# NBVAL_CHECK_OUTPUT
source_tensor = torch.tensor([1.5, 2.5])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    copy_constructed = torch.tensor(source_tensor)
print(f"torch.tensor(t)      -> {copy_constructed.tolist()}, a copy: {copy_constructed.data_ptr() != source_tensor.data_ptr()}")
print(f"t.detach().clone()   -> {source_tensor.detach().clone().tolist()}, no warning")
for w in caught:
    print(f"{w.category.__name__}: {str(w.message).split(' (Triggered')[0]}")
assert torch.equal(copy_constructed, source_tensor) and copy_constructed.data_ptr() != source_tensor.data_ptr(), "torch.tensor(t) should copy"
assert any(w.category is UserWarning and "To copy construct from a tensor" in str(w.message)
           and "sourceTensor.detach().clone()" in str(w.message) for w in caught), [str(w.message) for w in caught]

# %% [markdown]
# ## 2. dtype and device
#
# The dtype decides how each element is stored: `float32` (the default for
# floating point, 4 bytes), `float64` (8), `float16`/`bfloat16` (2), `int64`
# (the default for integers and for class labels), `uint8` (images), `bool` (masks).
# Convert with `.to(dtype)` or the shortcuts `.float()`, `.long()`, `.bool()`.

# %%
# NBVAL_CHECK_OUTPUT
decimals = torch.tensor([1.7, -2.2, 3.9])
for converted in (decimals, decimals.to(torch.float16), decimals.double(), decimals.long(), decimals.bool()):
    print(f"{str(converted.dtype):14s} {converted.element_size()} byte(s) each  {converted.tolist()}")

# %% [markdown]
# Converting to an integer dtype truncates towards zero (−2.2 → −2); converting to
# `bool` gives `True` for every non-zero value. `.tolist()` turns the elements into
# Python floats, which shows what each dtype really stores: the nearest float32 to 1.7
# is 1.7000000476837158, and float16, with only about three significant digits, stores 1.7001953125.
#
# **Type promotion.** When an arithmetic operation mixes dtypes, PyTorch picks the result dtype by a
# rule that fits in two lines:
#
# 1. the higher *category* wins (bool < integer < floating point < complex), and within a category the larger size;
# 2. only tensors with at least one dimension count for size: a 0-dim tensor (shape `()`, such as a loss or
#    `x.sum()`) or a Python number counts only when its category is higher than theirs.
#
# When a 0-dim tensor or a Python number does raise the category, it brings a dtype: a 0-dim tensor its own
# (`int64` + 0-dim `float64` → `float64`), a Python `float` the default dtype (`int64` + 2.5 → `float32`), a
# Python `int` `int64`. When it does not, it is ignored: a Python `2.5` leaves a `float16` tensor `float16`,
# and a 0-dim `float64` leaves a `float32` tensor `float32`. PyTorch never looks at values: a `uint8` tensor
# plus the Python int 300 stays `uint8` (and wraps around). The exact wording of the rule, from PyTorch's
# documentation, is in the optional block at the end of this section, with a function that applies it and is
# tested against PyTorch on 520 pairs of operands.

# %% [markdown]
# `torch.result_type(a, b)` gives PyTorch's own answer without computing anything. Each row of the
# table below is computed two ways, the dtype of `left + right` and `torch.result_type`, and both must
# agree with the `stated` column, which is what the text above says.

# %%
# NBVAL_CHECK_OUTPUT
i64 = torch.tensor([1, 2])
i32 = torch.tensor([1, 2], dtype=torch.int32)
u8 = torch.tensor([1, 2], dtype=torch.uint8)
i8 = torch.tensor([1, 2], dtype=torch.int8)
b1 = torch.tensor([True, False])
f16 = torch.tensor([1.0, 2.0], dtype=torch.float16)
f32 = torch.tensor([1.0, 2.0])
f64 = torch.tensor([1.0, 2.0], dtype=torch.float64)
zero_dim_f64 = torch.tensor(1.5, dtype=torch.float64)
zero_dim_f16 = torch.tensor(1.5, dtype=torch.float16)
zero_dim_i64 = torch.tensor(1)
zero_dim_f32 = torch.tensor(1.5)
cases = [  # (operation, left operand, right operand, the dtype stated in the text, why)
    ("int64 + int64", i64, i64, torch.int64, "same dtype"),
    ("int64 + float32", i64, f32, torch.float32, "higher category wins"),
    ("float32 + float64", f32, f64, torch.float64, "larger size wins"),
    ("uint8 + int8", u8, i8, torch.int16, "smallest dtype that holds both"),
    ("bool + int8", b1, i8, torch.int8, "higher category wins"),
    ("int32 + 5 (Python int)", i32, 5, torch.int32, "Python int, same category: ignored"),
    ("uint8 + 300 (Python int)", u8, 300, torch.uint8, "values are not inspected"),
    ("bool + 5 (Python int)", b1, 5, torch.int64, "Python int, higher category: int64"),
    ("int64 + 2.5 (Python float)", i64, 2.5, torch.float32, "Python float, higher category: default dtype"),
    ("float16 + 2.5 (Python float)", f16, 2.5, torch.float16, "Python float, same category: ignored"),
    ("int32 + 0-dim int64", i32, zero_dim_i64, torch.int32, "0-dim, same category: ignored"),
    ("float32 + 0-dim float64", f32, zero_dim_f64, torch.float32, "0-dim, same category: ignored"),
    ("int64 + 0-dim float64", i64, zero_dim_f64, torch.float64, "0-dim, higher category: its own dtype"),
    ("int64 + 0-dim float16", i64, zero_dim_f16, torch.float16, "0-dim, higher category: its own dtype"),
    ("0-dim float32 + 0-dim float64", zero_dim_f32, zero_dim_f64, torch.float64, "no dimensioned tensor: the 0-dim ones decide"),
]
for what, left, right, stated, why in cases:
    computed = (left + right).dtype
    assert torch.result_type(left, right) == computed, f"{what}: result_type disagrees with the computed dtype"
    assert computed == stated, f"{what}: the text says {stated}, PyTorch computed {computed}"
    print(f"{what:30s} -> {str(computed):14s} {why}")
print(f"uint8 [1, 2] + 300 = {(u8 + 300).tolist()}")
assert (u8 + 300).tolist() == [45, 46], "uint8 arithmetic should wrap modulo 256: 301 -> 45"

# %% [markdown]
# `uint8` + `int8` gives `int16` because neither of the two can hold all the values of the
# other (`uint8` has no negative numbers, `int8` nothing above 127), so the result is the
# smallest dtype that holds both. `uint8` + 300 stays `uint8`, so 1 + 300 = 301 wraps around
# to 301 − 256 = 45. The last row of the table: when no operand has a dimension, the 0-dim
# tensors take the place of the dimensioned ones in rule 2, and the larger size wins among them.
#
# Division goes further: `/` is true division, so two
# integer tensors give the default float dtype, even though their promoted type is `int64`;
# `//` (floor division) stays integer.

# %%
# NBVAL_CHECK_OUTPUT
print(f"torch.result_type(int64, int64) -> {torch.result_type(i64, i64)}")
print(f"int64 / int64  -> {(i64 / i64).dtype}")
print(f"int64 // int64 -> {(i64 // i64).dtype}")
assert torch.result_type(i64, i64) == torch.int64 and (i64 / i64).dtype == torch.get_default_dtype(), "/ should give floats"
assert (i64 // i64).dtype == torch.int64, "// should stay integer"

# %% [markdown]
# **Device.** A tensor's `device` says where its memory is. Create tensors directly
# on the device you picked (`device=`) rather than on the CPU and then moving them. `.to(other_device)`
# returns a new tensor on that device, a second tensor besides the CPU one; `.to(device)` onto the device the
# tensor is already on returns the tensor itself, so nothing is copied (and when `device` is the CPU, the two
# ways end with the same single tensor). The cell checks both, using the `meta` device (which every machine
# has: shapes and dtypes, no data) as the "other" device.

# %%
on_device = torch.zeros(2, 3, device=device)
moved = torch.zeros(2, 3).to(device)
elsewhere = moved.to("meta")
print(f"device= {on_device.device}, .to(device) {moved.device}; .to(its own device) is the same tensor: {moved.to(device) is moved}")
print(f".to('meta') is the same tensor: {elsewhere is moved}, device {elsewhere.device}")
assert on_device.device == moved.device, "both ways should end on the same device"
assert moved.to(device) is moved, ".to() onto the tensor's own device should return the tensor itself"
assert elsewhere is not moved and elsewhere.device.type == "meta", ".to() onto another device should return a new tensor there"
assert moved.to(torch.float64) is not moved, ".to() that changes something should return a new tensor"

# %% [markdown]
# ### Going further (optional): the promotion rule as code
#
# *Skip this on a first reading: nothing later in the chapter depends on it.* The Tensor Attributes page
# of PyTorch's documentation, section "Type Promotion"
# ([docs.pytorch.org/docs/stable/tensor_attributes.html#type-promotion-doc](https://docs.pytorch.org/docs/stable/tensor_attributes.html#type-promotion-doc)),
# sorts the operands into three *kinds*, in order of priority: **dimensioned tensors** (at least one
# dimension), **zero-dimensional tensors** and **Python numbers**. It gives the result as the smallest dtype
# that meets three conditions:
#
# 1. if a Python number is of a higher category than all the tensors, the result has room for
#    that category at its default size: a Python `float` counts as `torch.get_default_dtype()`
#    (float32 unless you change it), a Python `int` as `int64`;
# 2. if a 0-dim tensor is of a higher category than all the dimensioned tensors, the result holds
#    the 0-dim tensors of that category: their own dtype counts, size included;
# 3. if no 0-dim tensor is of a higher category, the result holds all the dimensioned tensors,
#    the larger size winning within a category (`float32` + `float64` → `float64`).
#
# These three rules are short enough to write as a function, and checking that function against PyTorch
# on many pairs of operands is a test of whether the rules are stated right.
#
# `promote` below takes the operands, sorts them by kind, combines the dtypes *within* each kind with
# `torch.promote_types(d1, d2)` (PyTorch's table of the smallest dtype that holds both: same category,
# larger size; `uint8` and `int8` → `int16`), and then lets a lower kind count only when its category
# is higher. It covers bool, integer and floating
# point; complex numbers add a case this chapter leaves out.

# %%
def category(dtype: torch.dtype) -> int:
    """0 for bool, 1 for the integer dtypes, 2 for the floating-point dtypes."""
    if dtype == torch.bool:
        return 0
    return 2 if dtype.is_floating_point else 1


def kind_and_dtype(operand) -> tuple[int, torch.dtype]:
    """The operand's kind (2 dimensioned tensor, 1 zero-dim tensor, 0 Python number) and the dtype it counts as."""
    if isinstance(operand, torch.Tensor):
        return (2 if operand.ndim > 0 else 1), operand.dtype
    if isinstance(operand, bool):  # test bool before int: in Python, True is an int too
        return 0, torch.bool
    if isinstance(operand, int):
        return 0, torch.int64
    return 0, torch.get_default_dtype()  # a Python float


def promote(*operands) -> torch.dtype:
    """The dtype that arithmetic on ``operands`` returns, by the three rules above."""
    per_kind = {}
    for operand in operands:
        kind, dtype = kind_and_dtype(operand)
        per_kind[kind] = torch.promote_types(per_kind[kind], dtype) if kind in per_kind else dtype
    result = None
    for kind in (2, 1, 0):  # dimensioned tensors, then 0-dim tensors, then Python numbers
        if kind not in per_kind:
            continue
        if result is None:  # the highest kind present decides first (rule 3)
            result = per_kind[kind]
        elif category(per_kind[kind]) > category(result):  # a lower kind counts only with a higher category (rules 1, 2)
            result = torch.promote_types(result, per_kind[kind])
    return result


# %% [markdown]
# `promote` gives PyTorch's answer on every row of the table above:

# %%
# NBVAL_CHECK_OUTPUT
promote_wrong = [what for what, left, right, stated, why in cases if promote(left, right) != (left + right).dtype]
print(f"promote() matches the computed dtype on {len(cases) - len(promote_wrong)} of {len(cases)} rows of the table")
assert not promote_wrong, f"promote() disagrees with PyTorch on {promote_wrong}"

# %% [markdown]
# The Python float of rule 1 follows the *default* dtype, so changing the default changes rule 1's
# answer, while a 0-dim tensor keeps its own dtype; `promote` reads the default dtype too:

# %%
# NBVAL_CHECK_OUTPUT
previous_default = torch.get_default_dtype()
torch.set_default_dtype(torch.float64)
try:
    with_python_float = (i64 + 2.5).dtype
    with_zero_dim_f32 = (i64 + zero_dim_f32).dtype
    promote_says = (promote(i64, 2.5), promote(i64, zero_dim_f32))
finally:
    torch.set_default_dtype(previous_default)
print(f"default float64: int64 + 2.5 -> {with_python_float}, int64 + 0-dim float32 -> {with_zero_dim_f32}")
print(f"default {previous_default}: int64 + 2.5 -> {(i64 + 2.5).dtype}")
assert with_python_float == torch.float64, "a Python float should follow the default dtype"
assert with_zero_dim_f32 == torch.float32, "a 0-dim tensor should keep its own dtype, whatever the default"
assert promote_says == (with_python_float, with_zero_dim_f32), f"promote() should follow the default dtype as PyTorch does, gave {promote_says}"
assert torch.get_default_dtype() == torch.float32, "the default dtype should be restored"

# %% [markdown]
# The table checks the cases the text names. A wider test: every pair drawn from ten dtypes (bool, five
# integer and four floating-point ones), each as a dimensioned and as a 0-dim tensor, and three Python
# numbers (`True`, `5`, `2.5`), leaving out pairs of two numbers, which are not tensor arithmetic. That
# makes 20 tensors and 3 numbers, 23 × 23 − 3 × 3 = 520 pairs, and on each one `promote` must agree with
# `torch.result_type` and with the dtype of the computed sum.

# %%
# NBVAL_CHECK_OUTPUT
grid_dtypes = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
               torch.float16, torch.bfloat16, torch.float32, torch.float64]
grid = [torch.ones(2, dtype=d) for d in grid_dtypes] + [torch.ones((), dtype=d) for d in grid_dtypes] + [True, 5, 2.5]
pairs = [(p, q) for p, q in itertools.product(grid, grid) if isinstance(p, torch.Tensor) or isinstance(q, torch.Tensor)]
disagree = [(p, q) for p, q in pairs if promote(p, q) != torch.result_type(p, q) or promote(p, q) != (p + q).dtype]
print(f"promote() agrees with torch.result_type and with the computed dtype on {len(pairs) - len(disagree)} of {len(pairs)} pairs")
assert len(pairs) == 520 and not disagree, f"promote() and PyTorch disagree on {len(disagree)} pairs, e.g. {disagree[:2]}"
_ = report.record("promote() agrees with torch.result_type", len(pairs) - len(disagree), f"of {len(pairs)} operand pairs")

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
# The figure draws the one storage that `x` and `xt` share as a strip of 12 cells, and the
# order in which each of them reads it when you go through its elements row by row: position
# `i * stride[0] + j * stride[1]` for `i` in rows, `j` in columns. `x` walks the strip from left to
# right. `xt` reads each of its rows as three cells 4 apart, then steps 7 back to start the next row.
# Each cell shows its value and when it is read; its colour says which row of the tensor reads it.
# The arcs above trace the first row, the dashed arcs below each step on to the next row.

# %%
def read_order(t: torch.Tensor) -> list[int]:
    """Storage positions a 2-D tensor visits, row by row: offset + i * stride(0) + j * stride(1)."""
    rows, cols = t.shape
    return [t.storage_offset() + i * t.stride(0) + j * t.stride(1) for i in range(rows) for j in range(cols)]


storage = x.flatten()  # x is contiguous, so this is its storage in order
assert read_order(x) == list(range(12)), "a contiguous tensor reads its storage in order"
assert torch.equal(storage[read_order(xt)], xt.reshape(-1)), "reading storage in xt's order should give xt row by row"
assert np.diff(read_order(xt)).tolist() == [4, 4, -7] * 3 + [4, 4], "xt should read 4 apart within a row and step 7 back between rows"

fig, axes = plt.subplots(2, 1, figsize=(9, 3.6))
row_colors = ["#c6dbef", "#fdd0a2", "#c7e9c0", "#dadaeb"]  # light blue, orange, green, purple: rows 0-3 of the tensor
arc_color = "#2171b5"  # the first row's arcs, a darker shade of its cells' blue
for ax, (reader, name) in zip(axes, [(x, "x"), (xt, "xt = x.t()")]):
    order = read_order(reader)
    n_cols = reader.shape[1]
    for pos in range(12):
        step = order.index(pos)  # when this cell is read, counting from 0
        ax.add_patch(Rectangle((pos - 0.45, -0.4), 0.9, 0.8, facecolor=row_colors[step // n_cols], edgecolor="black"))
        ax.text(pos, 0.14, str(storage[pos].item()), ha="center", va="center", fontsize=11, fontweight="bold")
        ax.text(pos, -0.18, f"read {step + 1}", ha="center", va="center", fontsize=9)
    for step, (here, there) in enumerate(zip(order, order[1:])):
        if step + 1 < n_cols:  # within the tensor's first row: an arc above
            ax.annotate("", xy=(there, 0.42), xytext=(here, 0.42), arrowprops=dict(
                arrowstyle="->", color=arc_color, lw=1.4, connectionstyle="arc3,rad=-0.3"))
        elif (step + 1) % n_cols == 0:  # on to the next row of the tensor: a dashed arc below
            bend = 0.6 if there > here else -0.15  # curve downwards either way; a short step needs a rounder arc
            ax.annotate("", xy=(there, -0.45), xytext=(here, -0.45), arrowprops=dict(
                arrowstyle="->", color="gray", lw=1, linestyle="--", connectionstyle=f"arc3,rad={bend}"))
    ax.set_xlim(-0.7, 11.7)
    ax.set_ylim(-1.25, 1.35)
    ax.set_yticks([])
    ax.set_xticks(range(12))
    ax.tick_params(labelsize=8)
    ax.set_title(f"{name}: shape {tuple(reader.shape)}, stride {reader.stride()}; reads positions {order[:7]}...", fontsize=10)
axes[1].set_xlabel("position in the shared storage (colour: which row of the tensor reads the cell; arcs above: "
                   "the first row; dashed: on to the next row)", fontsize=9)
fig.tight_layout()
plt.show()

# %% [markdown]
# **`view`** reinterprets the same storage with a new shape. It never copies, so
# it only works when the new shape can be expressed with strides over the existing
# layout. On a contiguous tensor it always can, and the result shares memory: writing through the view changes the original.

# %%
# NBVAL_CHECK_OUTPUT
as_2x6 = x.view(2, 6)
print(as_2x6)
print(f"stride {as_2x6.stride()}, shares x's storage {same_storage(x, as_2x6)}")
x2 = x.clone()  # a private copy, so that x itself stays unchanged
x2.view(-1)[0] = 100  # -1: "whatever size makes the element count match"
print(x2[0])

# %% [markdown]
# The transposed `xt` cannot be flattened that way: reading it row by row means
# visiting storage positions 0, 4, 8, 1, 5, 9, …, which no single stride can
# describe. `view` refuses with an error that points to the fix.
#
# This chapter shows many such errors. `error_message` runs an operation that should fail
# inside `try`/`except` and returns the error as `"ErrorType: message"`; if the operation
# does not fail after all, it stops the notebook, so every error shown here is also checked.

# %%
def error_message(op, expected: type[Exception] = RuntimeError) -> str:
    """Run ``op()``, which should raise ``expected``, and return the error as 'ErrorType: message'."""
    try:
        op()
    except expected as err:
        return f"{type(err).__name__}: {err}"
    raise AssertionError(f"expected {expected.__name__}, but the operation succeeded")


# %%
view_error = error_message(lambda: xt.view(12))
print(view_error)

# %% [markdown]
# The rule is not "contiguous only". `view` needs the new shape to be expressible with strides over
# the existing layout, and some shapes are, even for `xt`: splitting its first dimension (size 4,
# stride 1) into 2 × 2 gives strides 2 and 1, so `xt.view(2, 2, 3)` works and shares memory. What fails
# is merging dimensions whose elements are not evenly spaced in storage, as flattening `xt` would.

# %%
# NBVAL_CHECK_OUTPUT
split_view = xt.view(2, 2, 3)
print(f"xt.view(2, 2, 3): stride {split_view.stride()}, shares x's storage {same_storage(x, split_view)}, "
      f"xt contiguous {xt.is_contiguous()}")
assert not xt.is_contiguous() and same_storage(x, split_view), "a view of the non-contiguous xt should share its storage"
assert split_view.stride() == (2, 1, 4) and torch.equal(split_view, xt.reshape(2, 2, 3)), "splitting a dimension needs no copy"

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
vec = torch.tensor([1.0, 2.0, 3.0])
print("vec                ", tuple(vec.shape))
print("vec.unsqueeze(0)   ", tuple(vec.unsqueeze(0).shape))
print("vec.unsqueeze(1)   ", tuple(vec.unsqueeze(1).shape))
print("vec[None, :, None] ", tuple(vec[None, :, None].shape))
y = torch.zeros(1, 3, 1, 2)
print("y                  ", tuple(y.shape))
print("y.squeeze()        ", tuple(y.squeeze().shape))
print("y.squeeze(0)       ", tuple(y.squeeze(0).shape))
print("y.squeeze((0, 2))  ", tuple(y.squeeze((0, 2)).shape))

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
assert reversed_all.shape == (3, 2, 8) and batch_of_matrices.mT.shape == (8, 3, 2), ".T reverses all, .mT swaps the last two"
assert any("deprecated" in str(w.message) for w in caught), "x.T on a 3-D tensor should warn that it is deprecated"

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
fig, axes = plt.subplots(1, 3, figsize=(9, 3))
panels = [
    (col.expand(4, 5), (1, 4), "col [4, 1], stretched to [4, 5]"),
    (row.expand(4, 5), (5, 1), "row [5] = [1, 5], stretched to [4, 5]"),
    (table, (5, 4), "col + row: [4, 5]"),
]
for ax, (shown, (real_w, real_h), title) in zip(axes, panels):
    ax.imshow(shown.numpy(), cmap="viridis", vmin=0, vmax=table.max().item())
    for (row_i, col_j), value in np.ndenumerate(shown.numpy()):
        virtual = col_j >= real_w or row_i >= real_h  # stretched: not stored in memory
        ax.text(col_j, row_i, str(value), ha="center", va="center", fontsize=11,
                color="white" if value < 25 else "black", alpha=0.45 if virtual else 1.0)
        if virtual:
            ax.add_patch(Rectangle((col_j - 0.5, row_i - 0.5), 1, 1, color="white", alpha=0.55, linewidth=0))
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
# (`mean(dim=0)` averages down the rows; section 7 covers reductions.)

# %%
# NBVAL_CHECK_OUTPUT
data = torch.tensor([[1.0, 10.0, 100.0], [3.0, 30.0, 300.0]])  # [N=2, 3]
print((data - data.mean(dim=0)).tolist())  # [2, 3] - [3] -> [2, 3]
image = torch.ones(3, 2, 2) * torch.tensor([1.0, 2.0, 3.0]).view(3, 1, 1)  # channel c filled with c+1
mean = torch.tensor([1.0, 2.0, 3.0]).view(3, 1, 1)
print((image - mean).abs().sum().item())

# %% [markdown]
# When no dimension pair fits the rule, the error names the first position that failed. Shapes are
# compared from the right, but the position is numbered from the left: for `[2, 3] + [4, 5]` the last
# dimensions, 3 against 5, fail first, and the message calls that dimension 1.

# %%
# NBVAL_CHECK_OUTPUT
broadcast_error = error_message(lambda: torch.ones(2, 3) + torch.ones(4, 5))
print(broadcast_error)
assert "tensor a (3)" in broadcast_error and "tensor b (5)" in broadcast_error, broadcast_error
assert "non-singleton dimension 1" in broadcast_error, "the last dimension of a 2-D shape is dimension 1, counted from the left"

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
paired = m[rows, cols]  # m[0, 4], m[1, 3], m[2, 2], m[3, 1]
print(paired, f"copy: {not same_storage(m, paired)}")

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
# The two side by side, on the same `m` and `mask`: a mask *selects* (a 1-D copy, as long as
# the number of hits), `torch.where` *chooses* (the shape of `m`, with 0 where the mask is `False`).

# %%
picked, chosen = m[mask], torch.where(mask, m, 0)
assert picked.ndim == 1 and picked.numel() == int(mask.sum()), f"m[mask] should be 1-D with one entry per hit, got {tuple(picked.shape)}"
assert chosen.shape == m.shape, f"torch.where should keep m's shape {tuple(m.shape)}, got {tuple(chosen.shape)}"
fig, axes = plt.subplots(1, 4, figsize=(9, 3), gridspec_kw={"width_ratios": [5, 5, 7, 5]})
panels = [(m, "m [4, 5]"), (mask.int(), "mask = m % 3 == 0"), (picked[None], f"m[mask]: 1-D copy [{picked.numel()}]"),
          (chosen, "torch.where(mask, m, 0) [4, 5]")]
for ax, (shown, title) in zip(axes, panels):
    ax.imshow(shown.numpy(), cmap="Greens" if shown is not panels[1][0] else "Greys", vmin=0, vmax=max(1, int(shown.max())) * 1.6)
    for (row_i, col_j), value in np.ndenumerate(shown.numpy()):
        ax.text(col_j, row_i, str(value), ha="center", va="center", fontsize=9)
    ax.set_title(title, fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])
fig.suptitle("A boolean mask selects (a 1-D copy); torch.where chooses element-wise (the shape is kept)", fontsize=10)
plt.show()

# %% [markdown]
# ## 7. Reductions and products
#
# Three kinds of operation fill a model's code: *reductions* (a loss is the mean over
# a batch, a prediction is the `argmax` over classes), *matrix products* (every
# linear layer), and *joining and picking* pieces of tensors. This section covers the
# tools for each, and the shape rules that decide what comes out.
#
# ### Reductions along a dimension
#
# `sum`, `mean`, `max`, `min`, `prod`, `std`, `argmax` and their relatives combine many
# elements into one. Without `dim` they reduce the whole tensor to a 0-dim tensor. With
# `dim=d` they reduce only along dimension `d`, and **that dimension disappears from the
# shape**: a `[3, 4]` tensor summed over `dim=0` (down the rows) gives one value per column, shape `[4]`.

# %%
# NBVAL_CHECK_OUTPUT
r = torch.tensor([[3.0, 1.0, 4.0, 1.0], [5.0, 9.0, 2.0, 6.0], [2.0, 7.0, 8.0, 3.0]])  # [3, 4]
print(f"r.sum()                    = {r.sum().item():g}, shape {tuple(r.sum().shape)}")
print(f"r.sum(dim=0)               = {r.sum(dim=0).tolist()}, shape {tuple(r.sum(dim=0).shape)}")
print(f"r.sum(dim=1)               = {r.sum(dim=1).tolist()}, shape {tuple(r.sum(dim=1).shape)}")
print(f"r.sum(dim=1, keepdim=True) = {r.sum(dim=1, keepdim=True).tolist()}, shape {tuple(r.sum(dim=1, keepdim=True).shape)}")
print(f"r.mean(dim=0)              = {[round(m, 4) for m in r.mean(dim=0).tolist()]}")
assert r.sum().shape == (), "a reduction without dim should give a 0-dim tensor"
assert r.sum(dim=0).shape == (4,) and r.sum(dim=1).shape == (3,), "the reduced dimension should disappear"
assert r.sum(dim=1, keepdim=True).shape == (3, 1), "keepdim=True should keep the reduced dimension as size 1"
assert r.sum(dim=0).tolist() == [sum(r[i, j].item() for i in range(3)) for j in range(4)], "dim=0 should add down each column"
assert r.sum(dim=1).tolist() == [sum(r[i, j].item() for j in range(4)) for i in range(3)], "dim=1 should add along each row"
torch.testing.assert_close(r.mean(dim=0), r.sum(dim=0) / r.shape[0])

# %% [markdown]
# The figure shows which axis collapses: `dim=0` squeezes the three rows into one
# row of column totals, `dim=1` squeezes the four columns into one column of row totals.

# %%
def draw_cells(ax, values, x0, y0, color, fmt="{:g}", highlight=(), highlight_color="gold", fontsize=11):
    """Draw a 2-D tensor as a grid of labelled squares with its top-left cell at (x0, y0).

    Cells whose (row, column) is in ``highlight`` are drawn in ``highlight_color``.
    """
    for (i, j), value in np.ndenumerate(values.numpy()):
        face = highlight_color if (i, j) in highlight else color
        ax.add_patch(Rectangle((x0 + j - 0.5, y0 + i - 0.5), 1, 1, facecolor=face, edgecolor="black"))
        ax.text(x0 + j, y0 + i, fmt.format(value), ha="center", va="center", fontsize=fontsize)


fig, ax = plt.subplots(figsize=(8, 3.6))
draw_cells(ax, r, 0, 0, "lightsteelblue")
draw_cells(ax, r.sum(dim=0, keepdim=True), 0, 3.8, "navajowhite")  # [1, 4], drawn below r
draw_cells(ax, r.sum(dim=1, keepdim=True), 5.3, 0, "navajowhite")  # [3, 1], drawn right of r
for j in range(4):  # dim=0: each column's three values fall into one
    ax.annotate("", xy=(j, 3.2), xytext=(j, 2.6), arrowprops=dict(arrowstyle="->", color="darkred"))
for i in range(3):  # dim=1: each row's four values fall into one
    ax.annotate("", xy=(4.7, i), xytext=(3.6, i), arrowprops=dict(arrowstyle="->", color="darkred"))
ax.text(4.2, 3.8, "r.sum(dim=0): the rows (dim 0) collapse\nshape [4]; [1, 4] with keepdim=True", va="center", fontsize=10)
ax.text(6.2, 1.0, "r.sum(dim=1): the columns (dim 1) collapse\nshape [3]; [3, 1] with keepdim=True", va="center", fontsize=10)
for j in range(4):  # the index labels belong to the blue block r only
    ax.text(j, -0.8, f"j={j}", ha="center", va="center", fontsize=9)
for i in range(3):
    ax.text(-0.8, i, f"i={i}", ha="center", va="center", fontsize=9)
ax.text(1.5, -1.35, "dim 1 (column index j) of r", ha="center", va="center", fontsize=10)
ax.text(-1.55, 1.0, "dim 0 (row index i) of r", ha="center", va="center", rotation=90, fontsize=10)
ax.set_xlim(-2.0, 12.0)
ax.set_ylim(4.5, -1.7)
ax.set_aspect("equal")
ax.set_axis_off()
ax.set_title("Reducing the [3, 4] tensor r (blue) along each dimension: the sums in orange", fontsize=10)
plt.show()

# %% [markdown]
# `max` and `min` with a `dim` return *two* tensors: the largest values and where they
# are. The result is a named tuple (`torch.return_types.max`) with fields `values` and
# `indices`, so you can unpack it or use the names. `argmax(dim=...)` gives only the
# indices, `amax(dim=...)` only the values. Without `dim`, `max()` returns one 0-dim tensor,
# and `argmax()` an index into the *flattened* tensor (`torch.unravel_index` turns it back into a row and a column).

# %%
# NBVAL_CHECK_OUTPUT
best = r.max(dim=1)
print(f"{type(best).__module__}.{type(best).__name__}: values {best.values.tolist()}, indices {best.indices.tolist()}")
values, indices = best  # a tuple: it unpacks
print(f"r.argmax(dim=1) = {r.argmax(dim=1).tolist()}, r.amax(dim=1) = {r.amax(dim=1).tolist()}")
flat = r.argmax()
print(f"r.max() = {r.max().item():g}, r.argmax() = {flat.item()} (flattened), row and column {[t.item() for t in torch.unravel_index(flat, r.shape)]}")
assert isinstance(best, tuple) and torch.equal(values, best.values), "max(dim=...) should return a (values, indices) tuple"
assert torch.equal(indices, r.argmax(dim=1)) and torch.equal(values, r.amax(dim=1)), "max(dim) should agree with argmax and amax"
assert torch.equal(r[torch.arange(3), indices], values), "each index should point at its row's largest value"
assert r.flatten()[flat] == r.max() and flat.item() == 1 * r.shape[1] + 1, "argmax() without dim should index the flattened tensor"

# %% [markdown]
# **Why `keepdim=True` matters.** A reduction is often followed by broadcasting the
# result back against the tensor it came from, for example to turn each row of counts
# into fractions that sum to 1. Dividing `[3, 4]` by the `[3]` of row sums fails:
# right-aligned, 4 meets 3. With `keepdim=True` the sums are `[3, 1]`, which broadcasts
# along each row as intended.

# %%
print(error_message(lambda: r / r.sum(dim=1)))
fractions = r / r.sum(dim=1, keepdim=True)  # [3, 4] / [3, 1]
print(f"with keepdim: row sums {fractions.sum(dim=1).tolist()}")
torch.testing.assert_close(fractions.sum(dim=1), torch.ones(3))

# %% [markdown]
# A **square** tensor is worse: there `[3, 3] / [3]` broadcasts without complaint,
# but the `[3]` lines up with the *last* dimension, so column `j` is divided by the sum of
# row `j`. Nothing fails; the rows just do not sum to 1. `keepdim=True` (or
# `.unsqueeze(1)` after the fact) is the fix:

# %%
# NBVAL_CHECK_OUTPUT
counts = torch.tensor([[1.0, 1.0, 2.0], [0.0, 2.0, 2.0], [3.0, 3.0, 6.0]])  # row sums 4, 4, 12
wrong = counts / counts.sum(dim=1)  # [3, 3] / [3]: divides column j by the sum of row j
right = counts / counts.sum(dim=1, keepdim=True)  # [3, 3] / [3, 1]: divides row i by its own sum
print(f"without keepdim: row sums {[round(s, 4) for s in wrong.sum(dim=1).tolist()]}")
print(f"with keepdim:    row sums {[round(s, 4) for s in right.sum(dim=1).tolist()]}")
assert not torch.allclose(wrong.sum(dim=1), torch.ones(3)), "without keepdim the rows should NOT sum to 1"
torch.testing.assert_close(right.sum(dim=1), torch.ones(3))
assert torch.equal(right, counts / counts.sum(dim=1).unsqueeze(1)), "unsqueeze(1) should fix it the same way"

# %% [markdown]
# ### Matrix products
#
# `*` multiplies element by element (with broadcasting); `@`, the same as
# `torch.matmul`, is the matrix product: entry `[i, j]` of `A @ B` is
# `sum_k A[i, k] * B[k, j]`, so the inner sizes must match, `[n, k] @ [k, m] → [n, m]`.
# Even on two square matrices, where both work, they compute different things:

# %%
# NBVAL_CHECK_OUTPUT
S = torch.tensor([[1, 2], [3, 4]])
print(f"S * S = {(S * S).tolist()}   (each entry squared)")
print(f"S @ S = {(S @ S).tolist()}   (rows times columns)")
A = torch.arange(6.0).reshape(2, 3)
B = torch.arange(12.0).reshape(3, 4)
C = A @ B
print(f"A {tuple(A.shape)} @ B {tuple(B.shape)} -> {tuple(C.shape)};  C[1, 2] = {C[1, 2].item():g}")
assert (S * S).tolist() == [[1, 4], [9, 16]] and (S @ S).tolist() == [[7, 10], [15, 22]], "* and @ should differ"
assert C.shape == (2, 4), "[2, 3] @ [3, 4] should give [2, 4]"
assert C[1, 2].item() == sum(A[1, k].item() * B[k, 2].item() for k in range(3)), "C[i, j] should be row i of A times column j of B"
assert torch.equal(C, torch.matmul(A, B)), "@ is torch.matmul"

# %% [markdown]
# Their errors differ too: `*` complains about broadcasting, `@` about the inner sizes.

# %%
print(f"A * B: {error_message(lambda: A * B)}")
print(f"A @ A: {error_message(lambda: A @ A)}")
print(f"fix: A @ A.mT has shape {tuple((A @ A.mT).shape)}")

# %% [markdown]
# There are stricter relatives. `torch.mm` takes exactly two 2-D tensors, and
# `torch.bmm` exactly two 3-D tensors with the same batch size: `[b, n, k]` and
# `[b, k, m]` give `[b, n, m]`, one matrix product per batch entry. Neither broadcasts,
# which makes them useful when you want a wrong shape to fail:

# %%
product_rng = torch.Generator().manual_seed(SEED)
X = torch.randn(5, 2, 3, generator=product_rng)  # a batch of five [2, 3] matrices
Y = torch.randn(5, 3, 4, generator=product_rng)  # a batch of five [3, 4] matrices
batched = torch.bmm(X, Y)
print(f"bmm: {tuple(X.shape)} x {tuple(Y.shape)} -> {tuple(batched.shape)}")
torch.testing.assert_close(batched, torch.stack([X[b] @ Y[b] for b in range(5)]))
print(f"mm on 3-D:         {error_message(lambda: torch.mm(X, B))}")
print(f"bmm on 2-D:        {error_message(lambda: torch.bmm(A, B))}")
print(f"bmm, batch 5 vs 1: {error_message(lambda: torch.bmm(X, Y[:1]))}")
print(f"@ broadcasts it:   {tuple(X.shape)} @ {tuple(Y[:1].shape)} -> {tuple((X @ Y[:1]).shape)}")

# %% [markdown]
# `@` is the flexible one. It treats all dimensions but the last two as *batch*
# dimensions and broadcasts them with the rule of section 5, while the last two
# follow the matrix rule. So a batch `[b, n, k]` times one weight matrix `[k, m]` uses
# the same matrix for every batch entry (a linear layer applied to a batch of sequences
# computes exactly this; `F.linear` stores the weight as `[m, k]`, hence the `.mT`), and batch shapes `[2, 1]` and `[3]` broadcast to `[2, 3]`:

# %%
# NBVAL_CHECK_OUTPUT
W = torch.randn(3, 4, generator=product_rng)
shared_w = X @ W  # [5, 2, 3] @ [3, 4]
print(f"{tuple(X.shape)} @ {tuple(W.shape)} -> {tuple(shared_w.shape)}")
P = torch.randn(2, 1, 2, 3, generator=product_rng)
Q = torch.randn(3, 3, 4, generator=product_rng)
PQ = P @ Q  # batch [2, 1] with batch [3]; matrices [2, 3] @ [3, 4]
print(f"{tuple(P.shape)} @ {tuple(Q.shape)} -> {tuple(PQ.shape)}")
assert shared_w.shape == (5, 2, 4), "a [k, m] matrix should be applied to every entry of the batch"
torch.testing.assert_close(shared_w, torch.stack([X[b] @ W for b in range(5)]))
torch.testing.assert_close(F.linear(X, W.mT), shared_w)
assert PQ.shape == (2, 3, 2, 4), "batch dimensions [2, 1] and [3] should broadcast to [2, 3]"
torch.testing.assert_close(PQ, torch.stack([torch.stack([P[i, 0] @ Q[j] for j in range(3)]) for i in range(2)]))

# %% [markdown]
# `@` also takes **1-D operands**. A 1-D left operand `[k]` is treated as a row `[1, k]`, a 1-D
# right operand as a column `[k, 1]`; after the product that added dimension is removed again.
# So `[k] @ [k]` is the dot product, a 0-dim tensor; `[n, k] @ [k]` gives `[n]` (a matrix times a
# vector); `[k] @ [k, m]` gives `[m]`:

# %%
# NBVAL_CHECK_OUTPUT
u = torch.tensor([1.0, 2.0, 3.0])  # [3]
dot = u @ u
matrix_vector = A @ u  # [2, 3] @ [3]
vector_matrix = u @ B  # [3] @ [3, 4]
print(f"[3] @ [3]       -> shape {tuple(dot.shape)}, value {dot.item():g} (the dot product)")
print(f"[2, 3] @ [3]    -> shape {tuple(matrix_vector.shape)}, {matrix_vector.tolist()}")
print(f"[3] @ [3, 4]    -> shape {tuple(vector_matrix.shape)}, {vector_matrix.tolist()}")
assert dot.shape == () and dot.item() == 1 + 4 + 9 and torch.equal(dot, torch.dot(u, u)), "[k] @ [k] should be the 0-dim dot product"
assert matrix_vector.shape == (2,) and torch.equal(matrix_vector, (A @ u.unsqueeze(1)).squeeze(1)), "a 1 is appended to the right operand, then removed"
assert vector_matrix.shape == (4,) and torch.equal(vector_matrix, (u.unsqueeze(0) @ B).squeeze(0)), "a 1 is prepended to the left operand, then removed"

# %% [markdown]
# **`einsum`** writes a product as index labels: every label that appears in the
# inputs but not in the output is summed over. Attention (chapter 09) needs the dot
# product of every query with every key in each batch entry, `scores[b, n, m] = sum_d
# q[b, n, d] * k[b, m, d]`, which reads directly as `"bnd,bmd->bnm"`; with `@` it is `q @ k.mT`.

# %%
q = torch.randn(5, 2, 3, generator=product_rng)  # batch 5, 2 queries of size 3
k = torch.randn(5, 4, 3, generator=product_rng)  # batch 5, 4 keys of size 3
attn_scores = torch.einsum("bnd,bmd->bnm", q, k)
print(f"einsum('bnd,bmd->bnm'): {tuple(q.shape)}, {tuple(k.shape)} -> {tuple(attn_scores.shape)}")
torch.testing.assert_close(attn_scores, q @ k.mT)
torch.testing.assert_close(attn_scores[3, 1, 2], (q[3, 1] * k[3, 2]).sum())

# %% [markdown]
# ### Joining and splitting
#
# `torch.cat` joins tensors along an **existing** dimension (all other sizes must
# match); `torch.stack` puts same-shaped tensors along a **new** dimension, as
# if each were `unsqueeze`d first. `chunk(n)` cuts a tensor into at most `n` equal pieces (the
# last one smaller when the size does not divide), while `split(size)` cuts it into pieces of
# `size` rows, and also accepts a list of sizes. `torch.tensor_split(x, n)` always returns exactly `n`
# pieces, as even as they can be (the first ones one row larger). All three return views.

# %%
# NBVAL_CHECK_OUTPUT
top, bottom = torch.zeros(2, 3), torch.ones(2, 3)
print(f"cat dim 0:   {tuple(torch.cat([top, bottom]).shape)}    cat dim 1:   {tuple(torch.cat([top, bottom], dim=1).shape)}")
print(f"stack dim 0: {tuple(torch.stack([top, bottom]).shape)}  stack dim 2: {tuple(torch.stack([top, bottom], dim=2).shape)}")
rows10 = torch.arange(10)
sizes = {
    "chunk(3)": [len(c) for c in rows10.chunk(3)],
    "split(3)": [len(c) for c in rows10.split(3)],
    "split(4)": [len(c) for c in rows10.split(4)],
    "split([2, 3, 5])": [len(c) for c in rows10.split([2, 3, 5])],
    "arange(6).chunk(4)": [len(c) for c in torch.arange(6).chunk(4)],
    "tensor_split(arange(6), 4)": [len(c) for c in torch.tensor_split(torch.arange(6), 4)],
}
for what, pieces in sizes.items():
    print(f"{what:26s} -> piece sizes {pieces}")
assert torch.cat([top, bottom]).shape == (4, 3) and torch.stack([top, bottom]).shape == (2, 2, 3), "cat joins, stack adds a dimension"
assert torch.equal(torch.stack([top, bottom]), torch.cat([top.unsqueeze(0), bottom.unsqueeze(0)])), "stack = unsqueeze, then cat"
assert sizes["chunk(3)"] == [4, 4, 2] and sizes["split(3)"] == [3, 3, 3, 1], "chunk takes a count, split a size"
assert sizes["arange(6).chunk(4)"] == [2, 2, 2], "chunk(4) of 6 rows gives only 3 pieces"
assert sizes["tensor_split(arange(6), 4)"] == [2, 2, 1, 1], "tensor_split(x, 4) of 6 rows should give exactly 4 pieces"
assert all(same_storage(rows10, piece) for piece in (rows10.chunk(3)[1], rows10.split(4)[2], torch.tensor_split(rows10, 4)[3])), \
    "pieces of chunk, split and tensor_split should be views"

# %% [markdown]
# The figure draws the same operations on numbered blocks: two `[2, 3]` blocks joined three ways
# (blue: the first block, holding 0 to 5; orange: the second, 6 to 11), and 10 rows cut three ways,
# one colour per piece.

# %%
first_block, second_block = torch.arange(6).reshape(2, 3), torch.arange(6, 12).reshape(2, 3)
joined = {
    "cat, dim=0": torch.cat([first_block, second_block], dim=0),
    "cat, dim=1": torch.cat([first_block, second_block], dim=1),
    "stack, dim=0": torch.stack([first_block, second_block], dim=0),
}
cut = {
    "chunk(3)": rows10.chunk(3),
    "split(4)": rows10.split(4),
    "tensor_split(x, 4)": torch.tensor_split(rows10, 4),
}
assert [tuple(t.shape) for t in joined.values()] == [(4, 3), (2, 6), (2, 2, 3)], "cat keeps the number of dimensions, stack adds one"
assert torch.equal(joined["stack, dim=0"][1], second_block) and torch.equal(joined["cat, dim=1"][:, 3:], second_block), \
    "the second block should sit below, to the right, or as entry [1] of the new dimension"
assert [[len(p) for p in pieces] for pieces in cut.values()] == [[4, 4, 2], [4, 4, 2], [3, 3, 2, 2]], "piece sizes of 10 rows"

fig, (ax_join, ax_cut) = plt.subplots(1, 2, figsize=(9, 3.2), gridspec_kw={"width_ratios": [1.15, 1]})
placements = [("cat, dim=0", 0, 0.5), ("cat, dim=1", 4.2, 0.5), ("stack, dim=0", 4.2, 4.0)]
for name, x0, y0 in placements:
    result = joined[name]
    slices = [result] if result.ndim == 2 else list(result)
    for k, piece in enumerate(slices):
        orange = {(i, j) for (i, j), v in np.ndenumerate(piece.numpy()) if v >= 6}
        draw_cells(ax_join, piece, x0 + 3.6 * k, y0, "lightsteelblue", highlight=orange, highlight_color="sandybrown", fontsize=8)
        if result.ndim == 3:
            ax_join.text(x0 + 3.6 * k + 1, y0 + 2.0, f"[{k}]", ha="center", va="center", fontsize=8)
    ax_join.text(x0 - 0.5, y0 - 0.85, f"{name} -> {list(result.shape)}", fontsize=9, va="center")
ax_join.set_xlim(-0.7, 11.0)
ax_join.set_ylim(6.6, -0.9)
ax_join.set_aspect("equal")
ax_join.set_axis_off()
ax_join.set_title("joining two [2, 3] blocks (blue, orange)", fontsize=10)

piece_colors = ["lightsteelblue", "sandybrown", "palegreen", "plum"]
for row, (name, pieces) in enumerate(cut.items()):
    y, x, start = 2.2 * row, 0.0, 0
    for k, piece in enumerate(pieces):
        for value in piece.tolist():
            ax_cut.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, facecolor=piece_colors[k], edgecolor="black"))
            ax_cut.text(x, y, str(value), ha="center", va="center", fontsize=8)
            x += 1
        x += 0.35  # a gap between pieces
    ax_cut.text(-0.5, y - 0.9, f"{name}: pieces of {[len(p) for p in pieces]} rows", fontsize=9, va="center")
ax_cut.set_xlim(-0.8, 11.4)
ax_cut.set_ylim(5.3, -1.6)
ax_cut.set_aspect("equal")
ax_cut.set_axis_off()
ax_cut.set_title("cutting rows10 = arange(10)", fontsize=10)
plt.show()

# %% [markdown]
# Note the last rows of the printout. `chunk(n)` uses pieces of `ceil(size / n)` rows, so on 10 rows
# `chunk(3)` is the same as `split(4)`, and it can return *fewer* than `n` pieces: 6 rows in
# chunks of `ceil(6 / 4) = 2` make 3 pieces, not 4. When the number of pieces matters (one per
# worker, say), use `tensor_split(x, n)`: the same 6 rows in exactly 4 pieces, `[2, 2, 1, 1]`; or
# `split` with explicit sizes. `stack` refuses tensors of different shapes, and `cat` tensors that
# differ outside the joined dimension:

# %%
print(f"stack: {error_message(lambda: torch.stack([A, B]))}")
print(f"cat:   {error_message(lambda: torch.cat([A, B]))}")

# %% [markdown]
# ### Picking one entry per row: `gather` and `scatter_`
#
# A classifier gives a `[B, C]` tensor of class probabilities; a loss needs, for each
# row, only the probability of that row's target class. `gather(dim, index)` does that:
# along `dim=1`, `out[i, j] = probs[i, index[i, j]]`. The index must have as many
# dimensions as the input, so the `[B]` targets become `[B, 1]` with `unsqueeze(1)`, and
# the result is `[B, 1]`. Advanced indexing with `torch.arange(B)` for the rows (section 6) gives the same numbers as `[B]`.

# %%
# NBVAL_CHECK_OUTPUT
logits = torch.tensor([[2.0, 0.5, -1.0], [0.1, 0.2, 3.0], [1.0, 1.0, 1.0], [-2.0, 4.0, 0.0]])  # B=4, C=3
probs = logits.softmax(dim=1)
targets = torch.tensor([0, 2, 1, 0])
B = probs.shape[0]  # the batch size, 4
picked = probs.gather(1, targets.unsqueeze(1))  # [B, 1]
indexed = probs[torch.arange(B), targets]  # [B]
print(f"probs.gather(1, targets.unsqueeze(1)): shape {tuple(picked.shape)}, values {[round(p, 4) for p in picked.squeeze(1).tolist()]}")
print(f"probs[torch.arange(B), targets]:       shape {tuple(indexed.shape)}, values {[round(p, 4) for p in indexed.tolist()]}")
assert picked.shape == (B, 1) and indexed.shape == (B,), "gather should keep the index's shape [B, 1], indexing give [B]"
assert torch.equal(picked.squeeze(1), indexed), "gather and advanced indexing should pick the same entries"
assert all(picked[i, 0] == probs[i, targets[i]] for i in range(B)), "row i should hold probs[i, targets[i]]"
torch.testing.assert_close(-picked.log().mean(), F.cross_entropy(logits, targets))
print(f"-log of the picked probabilities, averaged: {-picked.log().mean().item():.4f} = F.cross_entropy {F.cross_entropy(logits, targets).item():.4f}")

# %% [markdown]
# The last line is the cross-entropy loss that chapter 05 trains with, written by hand:
# the mean of `-log(probability of the target class)`. It agrees here, but it is not safe in general:
# when a logit is far below the largest one, its probability rounds to 0 in float32, and the log of
# 0 is `-inf`. `F.cross_entropy` never takes the log of a probability. It applies `log_softmax`
# (then picks and averages), which computes `log p = x - logsumexp(x)` directly, without ever forming
# `p`, and computes `logsumexp` so that `exp` cannot overflow (exercise 3 meets that problem); so a tiny
# probability still has a finite log.
# A model that is very sure of the wrong class shows the difference:

# %%
# NBVAL_CHECK_OUTPUT
confident = torch.tensor([[200.0, 0.0]])  # very sure of class 0...
wrong_class = torch.tensor([1])  # ...but the target is class 1
hand_loss = -confident.softmax(dim=1).gather(1, wrong_class.unsqueeze(1)).log().mean()
library_loss = F.cross_entropy(confident, wrong_class)
smallest_f32 = 2.0**-149  # float32's smallest positive (subnormal) number
print(f"softmax {confident.softmax(dim=1).tolist()}: p(class 1) = exp(-200), about {math.exp(-200):.1e}, "
      f"below float32's smallest positive number 2^-149 = {smallest_f32:.1e}, so it rounds to 0")
print(f"by hand: {hand_loss.item()}   F.cross_entropy: {library_loss.item():g}")
assert torch.tensor(smallest_f32).item() == smallest_f32 and torch.tensor(smallest_f32 / 2).item() == 0.0, "2^-149 should be float32's smallest positive number"
assert confident.softmax(dim=1)[0, 1].item() == 0.0, "p(class 1) = exp(-200) should round to 0 in float32"
assert torch.isinf(hand_loss) and torch.isfinite(library_loss), "the hand-written loss should be inf (-log 0), F.cross_entropy finite"
torch.testing.assert_close(library_loss, F.nll_loss(confident.log_softmax(dim=1), wrong_class))  # log_softmax, then pick
torch.testing.assert_close(library_loss, -(confident - confident.logsumexp(dim=1, keepdim=True))[0, 1])
torch.testing.assert_close(library_loss, torch.tensor(200.0))

# %% [markdown]
# Forgetting the `unsqueeze` is the usual mistake with `gather`:

# %%
print(error_message(lambda: probs.gather(1, targets)))

# %% [markdown]
# `scatter_(dim, index, src)` is the inverse: it *writes* `src[i, j]` to position
# `[i, index[i, j]]` (for `dim=1`) of the tensor it is called on. Scattering the picked
# probabilities into a zero tensor puts each one back where `gather` found it. (Exercise 2,
# one-hot rows, is another case of writing one entry per row.)

# %%
# NBVAL_CHECK_OUTPUT
put_back = torch.zeros_like(probs).scatter_(1, targets.unsqueeze(1), picked)
by_hand = torch.zeros_like(probs)
for i in range(B):
    by_hand[i, targets[i]] = probs[i, targets[i]]
print([[round(p, 4) for p in row] for row in put_back.tolist()])
assert torch.equal(put_back, by_hand), "scatter_ should write picked[i] to [i, targets[i]] and leave the rest zero"
assert torch.equal(put_back.gather(1, targets.unsqueeze(1)), picked), "gather after scatter_ should give back the picked values"

# %%
chosen = {(i, targets[i].item()) for i in range(B)}
fig, ax = plt.subplots(figsize=(9, 3.2))
three_figures = "{:.3g}"  # 3 significant figures: the small probability 0.00243 does not show as 0.00
draw_cells(ax, probs, 0, 0, "lightsteelblue", fmt=three_figures, highlight=chosen, fontsize=9)
draw_cells(ax, picked, 4.5, 0, "gold", fmt=three_figures, fontsize=9)
draw_cells(ax, put_back, 7, 0, "white", fmt=three_figures, highlight=chosen, fontsize=9)
for i in range(B):  # the gold cells show where each value is picked from and written to
    ax.annotate("", xy=(3.95, i), xytext=(2.55, i), arrowprops=dict(arrowstyle="->", color="darkred"))
    ax.annotate("", xy=(6.45, i), xytext=(5.05, i), arrowprops=dict(arrowstyle="->", color="darkgreen"))
ax.text(1, -0.95, f"probs {list(probs.shape)}", ha="center", fontsize=10)
ax.text(4.5, -0.95, f"picked {list(picked.shape)}", ha="center", fontsize=10)
ax.text(8, -0.95, f"put_back {list(put_back.shape)}", ha="center", fontsize=10)
for i in range(B):
    ax.text(-0.8, i, f"target {targets[i].item()}", ha="right", va="center", fontsize=9)
ax.set_xlim(-2.6, 9.8)
ax.set_ylim(3.7, -1.3)
ax.set_aspect("equal")
ax.set_axis_off()
ax.set_title(f"gather(1, targets.unsqueeze(1)) picks column targets[i] of row i (gold) into a [{B}, 1] column;\n"
             "scatter_(1, targets.unsqueeze(1), picked) writes each value back to that column of a zero tensor", fontsize=10)
plt.show()

# %% [markdown]
# ### In-place operations: the trailing underscore
#
# A method whose name ends in `_` (`add_`, `mul_`, `zero_`, `scatter_`, `clamp_`, …) changes
# its tensor in place and returns that same tensor; the version without `_` returns a new one.
# `x += 1` is in place too, while `x = x + 1` makes a new tensor and rebinds the name. Two
# things show it: the address of the first element (`data_ptr()`), and `_version`, an internal
# counter that PyTorch increments on every in-place change.

# %%
# NBVAL_CHECK_OUTPUT
original = torch.zeros(3)
address, version = original.data_ptr(), original._version
acc = original
fresh = acc.add(1)
print(f"acc.add(1):  new memory {fresh.data_ptr() != address}, acc still {acc.tolist()}, version +{original._version - version}")
returned = acc.add_(1)
print(f"acc.add_(1): same memory {acc.data_ptr() == address}, acc now {acc.tolist()}, version +{original._version - version}, returns acc itself {returned is acc}")
acc += 1
print(f"acc += 1:    same memory {acc.data_ptr() == address}, acc now {acc.tolist()}, version +{original._version - version}")
acc = acc + 1
print(f"acc = acc + 1: same memory {acc.data_ptr() == address}; the name now points to a new tensor, the old one holds {original.tolist()}")
assert fresh.data_ptr() != address and original.tolist() == [2.0, 2.0, 2.0], "add should leave its input alone; add_ and += should change it"
assert returned is original, "add_ should return the very tensor it changed"
assert original._version == version + 2, "two in-place changes (add_ and +=) should bump _version twice"
assert acc.data_ptr() != address, "x = x + 1 should allocate a new tensor"

# %% [markdown]
# An in-place operation cannot change the dtype of its tensor, because the result must
# fit the memory that is already there. So where type promotion (section 2) would go up a
# category, the in-place version refuses, while the out-of-place one promotes:

# %%
counts_i64 = torch.tensor([1, 2, 3])
print(error_message(lambda: counts_i64.add_(0.5)))
print(f"out of place: counts_i64.add(0.5).dtype -> {counts_i64.add(0.5).dtype}")

# %% [markdown]
# In-place operations save memory, but they overwrite values. Autograd (next chapter)
# keeps some intermediate tensors for the backward pass, and refuses to differentiate
# through one that was changed in place after it was saved; chapter 02 reproduces that
# error ("modified by an inplace operation"). So use the plain forms by default, and the `_`
# forms where you mean to update a tensor you own, such as a running total.

# %% [markdown]
# ## 8. NumPy interop and shared memory
#
# PyTorch and NumPy convert both ways, and whether the result **shares memory**
# with its source depends on the function:
#
# | conversion | shares memory? |
# | --- | --- |
# | `torch.from_numpy(array)` | yes (the tensor uses the array's buffer) |
# | `tensor.numpy()` | yes, for a CPU tensor; refuses a tensor that requires grad (see below) |
# | `tensor.detach().numpy()`, `tensor.numpy(force=True)` | yes, for a CPU tensor, also one that requires grad |
# | `torch.as_tensor(array)` | yes when dtype and device already match, else copies |
# | `torch.tensor(array)` | no, always copies |
#
# Sharing copies nothing, whatever the size, but it means a change on one side shows up on the other:

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
ones_t = torch.ones(3)
back = ones_t.numpy()
ones_t.add_(1)  # in-place: the array sees it
print(f"tensor {ones_t}, its .numpy() {back}")
print(f"as_tensor, same dtype, shares:     {torch.as_tensor(array).data_ptr() == shared.data_ptr()}")
print(f"as_tensor, other dtype, shares:    {torch.as_tensor(array, dtype=torch.float64).data_ptr() == shared.data_ptr()}")
print(f"NumPy's default float64 stays float64: {torch.from_numpy(np.zeros(2)).dtype}")

# %% [markdown]
# Two consequences. NumPy creates `float64` by default and the conversion keeps it,
# while PyTorch layers use `float32`: convert with `.float()` (see the pitfalls).
# And `.numpy()` only works on the CPU, where NumPy lives; a tensor on any other device
# needs `.cpu()` first. The `meta` device exists on every machine, so it shows the error anywhere:

# %%
print(error_message(lambda: torch.ones(2, device="meta").numpy(), TypeError))
print(torch.ones(2, device=device).cpu().numpy())

# %% [markdown]
# `.numpy()` also refuses a tensor that **requires grad**, such as a model's parameter
# (chapter 02): NumPy cannot record the operations autograd needs, so the tensor must be cut
# out of the graph first. `.detach()` returns a tensor on the same memory that does not require
# grad; `numpy(force=True)` does the detaching (and the `.cpu()`) for you. On the CPU both share memory:

# %%
# NBVAL_CHECK_OUTPUT
needs_grad = torch.ones(3, requires_grad=True)
numpy_error = error_message(lambda: needs_grad.numpy())
print(numpy_error)
detached, forced = needs_grad.detach().numpy(), needs_grad.numpy(force=True)
with torch.no_grad():
    needs_grad.mul_(3)  # change the tensor; both arrays see it
print(f"after needs_grad *= 3: .detach().numpy() {detached}, .numpy(force=True) {forced}")
assert "requires grad" in numpy_error and "detach().numpy()" in numpy_error, numpy_error
assert detached.tolist() == forced.tolist() == [3.0, 3.0, 3.0], "both arrays should share the tensor's memory"

# %% [markdown]
# ## Checks
#
# What this chapter must show: the worked broadcasting example, the failing `view`
# on a non-contiguous tensor with its fix, and that `from_numpy` shares memory (while `torch.tensor` copies).

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
check_copy = torch.tensor(check_array)
check_array[1] = 5.0  # after the copy was made
assert check_tensor[1].item() == 5.0 and check_copy[1].item() == 0.0, "torch.tensor should copy: a later change of the array must not reach it"
assert not np.shares_memory(check_copy.numpy(), check_array), "torch.tensor should copy into its own memory"

report.record("broadcast [4,1] + [5]", "x".join(map(str, table.shape)))
report.record("view on transposed tensor", view_error.split(":")[0])
report.record("from_numpy: 7.0 written into the array, read through the tensor", check_tensor[2].item())
report.record("int64 tensor + 0-dim float64 tensor / + Python 2.5", f"{(i64 + zero_dim_f64).dtype} / {(i64 + 2.5).dtype}")
report.record("cross-entropy of logits [200, 0], target 1: -log(softmax) by hand / F.cross_entropy",
              f"{hand_loss.item()} / {library_loss.item():g}")
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
assert (pred - target).shape == (4, 4) and loss.item() > 1.0, "the broadcast loss should be [4, 4] and far from 0"
assert any("broadcasting" in str(w.message) for w in caught), "F.mse_loss should warn about the size mismatch"
assert F.mse_loss(pred, target.squeeze(1)).item() == 0.0, "with equal shapes the perfect prediction has loss 0"

# %% [markdown]
# **`squeeze()` with a batch of one.** `squeeze()` without an argument removes
# *every* size-1 dimension, including a batch dimension that happens to be 1.
# Name the dimension you mean:

# %%
# NBVAL_CHECK_OUTPUT
one_score = torch.tensor([[0.7]])  # [batch=1, 1 output]
print(f"squeeze():  shape {tuple(one_score.squeeze().shape)}  <- the batch dimension is gone too")
print(f"squeeze(1): shape {tuple(one_score.squeeze(1).shape)}")

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
print(error_message(lambda: features @ weights))
print(f"fix: features.float() @ weights -> {(features.float() @ weights).dtype}")

# %% [markdown]
# **Random `*_like` of an integer tensor.** `rand_like` and `randn_like` draw
# floating-point numbers, so they refuse an integer template. Pass a dtype:

# %%
labels = torch.tensor([0, 2, 1])
print(error_message(lambda: torch.rand_like(labels), NotImplementedError))
print(f"fix: torch.rand_like(labels, dtype=torch.float32).shape -> {tuple(torch.rand_like(labels, dtype=torch.float32).shape)}")

# %% [markdown]
# ## Exercises
#
# Replace each `raise NotImplementedError` with your code, then run the checker
# cell below it: it prints `PASSED`, `NOT YET` with what went wrong, or `TODO` while the stub
# is untouched, and never stops the notebook. The first `NOT YET` names the case that failed, what
# was expected and what came back; a second one, or `hint("01.pairwise_sq_dists")`, adds a fuller
# hint. Stuck? `solution("01.pairwise_sq_dists")` returns the reference solution
# (`import inspect; print(inspect.getsource(solution("01.pairwise_sq_dists")))` shows it).
# The checkers refuse the library functions that would do an exercise for you, and Python loops
# where an exercise asks for whole-tensor operations.
#
# **Exercise 1: `pairwise_sq_dists`.** Given `a` of shape `[N, D]` (N points in D
# dimensions) and `b` of shape `[M, D]`, return the `[N, M]` tensor whose entry
# `[i, j]` is the squared Euclidean distance `((a[i] - b[j]) ** 2).sum()`, in
# the same dtype as the inputs, and leave `a` and `b` unchanged. Use broadcasting: no Python loops,
# no `torch.cdist`. (This is the core of k-nearest-neighbours and k-means.)

# %%
def pairwise_sq_dists(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Squared Euclidean distances between the rows of a [N, D] and b [M, D], as [N, M]."""
    raise NotImplementedError


# %%
result = check("01.pairwise_sq_dists", pairwise_sq_dists)

# %% [markdown]
# **Exercise 2: `one_hot`.** Classification labels are class indices, `int64` of
# shape `[N]`. Return their *one-hot* encoding: a `float32` tensor of shape
# `[N, num_classes]` that is 1.0 at `[i, labels[i]]` and 0.0 everywhere else; `num_classes`
# sets the width, even if the largest class does not occur in `labels`. No Python loops, no
# `F.one_hot`, and no rows picked from an identity matrix (`torch.eye(num_classes)[labels]`, or
# NumPy's `np.eye`: its rows are one-hot rows already). Sections 5-7 have the tools.

# %%
def one_hot(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """float32 [N, num_classes]: 1.0 at [i, labels[i]], 0.0 elsewhere."""
    raise NotImplementedError


# %%
result = check("01.one_hot", one_hot)

# %% [markdown]
# **Exercise 3: `softmax`.** Write `softmax(x, dim)` for a float tensor `x` of any shape:
# `exp(x)` divided by the sum of `exp(x)` along `dim`, so that the values along `dim` are
# positive and sum to 1 (the probabilities of section 7 came from `logits.softmax(dim=1)`).
# Return the same shape and dtype as `x`, finite even for entries as large as 1000, and leave `x`
# unchanged; use no library softmax and no `logsumexp` (it does the hard part for you). The hard part:
# float32 `exp` overflows to `inf` between 88 and 89, and `inf / inf` is `nan`, so the formula as
# written fails on large entries, as the cell below shows. A first failed check names a fact about
# softmax that gets around it.

# %%
# NBVAL_CHECK_OUTPUT
edge = torch.tensor([88.0, 89.0])
large = torch.tensor([1000.0, 999.0])
as_written = large.exp() / large.exp().sum()
print(f"float32 exp({edge.tolist()}) = {[f'{v:.3g}' for v in edge.exp().tolist()]}")
print(f"exp(x) / exp(x).sum() for x = {large.tolist()}: {as_written.tolist()}")
assert torch.isfinite(edge[0].exp()) and torch.isinf(edge[1].exp()), "float32 exp should overflow between 88 and 89"
assert torch.isnan(as_written).all(), "the formula as written should give nan (inf / inf) on entries near 1000"


# %%
def softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """exp(x) / exp(x).sum(dim), computed without overflow; same shape and dtype as x."""
    raise NotImplementedError


# %%
result = check("01.softmax", softmax)

# %% [markdown]
# ## Summary
#
# - A tensor is a storage (a flat block of memory) read through a shape and strides, with one dtype and one device.
# - Create with `torch.tensor` (data) and the factories. Older forms: `torch.Tensor(...)` always makes the
#   default float dtype and reads a single int as a size; `torch.range` (deprecated) includes `end` and makes
#   the default float dtype even from ints, where `torch.arange` leaves `end` out and gives `int64`;
#   `set_default_tensor_type` is deprecated since 2.1 in favour of `set_default_dtype` and `set_default_device`.
# - Type promotion ranks operands as dimensioned tensors > 0-dim tensors > Python numbers, and categories as
#   bool < integer < floating point < complex. A lower-ranked operand matters only when its category is higher:
#   a 0-dim tensor then brings its own dtype (`int64` + 0-dim `float64` → `float64`), a Python float the default
#   dtype (`int64` + 2.5 → `float32`). Within a category, the dimensioned tensors decide the size.
# - `view` never copies, so it needs a shape the existing strides can express: it cannot flatten the transposed
#   `xt`, but `xt.view(2, 2, 3)` works, non-contiguous as `xt` is. `reshape` copies when it must.
#   `transpose`, `permute`, `expand`, slicing and `view` all share memory with their source.
# - Broadcasting compares shapes right-aligned; sizes must match or be 1, and size-1 dimensions stretch with stride 0.
# - Slices are views; integer-tensor and boolean-mask indexing make copies; `torch.where` chooses element-wise.
# - A reduction with `dim=d` removes dimension `d`; `keepdim=True` keeps it as size 1 so the result broadcasts
#   back (`x / x.sum(dim=1, keepdim=True)`). `max(dim=...)` returns `(values, indices)`.
# - `*` is element-wise, `@` the matrix product with broadcast batch dimensions (a 1-D operand gets a 1 added,
#   then removed: `[k] @ [k]` is 0-dim); `mm` and `bmm` are strict 2-D and 3-D versions; `einsum` spells out the indices.
# - `cat` joins along an existing dimension, `stack` along a new one; `chunk` takes a count (and may return fewer
#   pieces), `split` a size, `tensor_split` an exact count;
#   `gather` picks one entry per row, `scatter_` writes one. A loss is computed from `log_softmax`, never as the log
#   of a probability that may have rounded to 0 (`F.cross_entropy` does this for you).
# - A trailing `_` means in place: same memory, `_version` goes up, and the dtype cannot change.
# - `from_numpy` and `.numpy()` share memory, `torch.tensor` copies; a tensor that requires grad needs `.detach()` first.
#
# **Next**: chapter 02 lets tensors remember how they were computed, so that
# PyTorch can differentiate through those computations: autograd.

# %%
report.finish()
