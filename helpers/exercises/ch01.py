"""Exercises of chapter 01 (tensors): ``01.pairwise_sq_dists``, ``01.one_hot`` and ``01.softmax``.

Every failure is a two-tier :class:`~helpers.exercises.Hint`: the first wrong answer hears the
case, the expected against the actual value or shape, and a nudge; the code that fixes it comes
only on a second failure or from ``hint("01.name")``.

The first two exercises ask for broadcasting and indexing without Python loops, and their
checkers test that in two ways (see :mod:`helpers.exercises.loops`). Every checker
calls the candidate on copies of its inputs and fails an answer that changes them in place.

Library shortcuts are refused through :mod:`helpers.exercises.guards`: by name, and for the ATen
operators that do the work (``aten._softmax``, ``aten._cdist_forward``, ...) whichever torch function
the learner's code reaches them through (``Shortcut(..., reached=True)``). ``01.softmax`` also refuses
log-sum-exp (``torch.logsumexp``, ``aten.logsumexp``): ``exp(x - logsumexp(x))`` is a softmax whose
overflow-safe shift the library does for the learner; and the cumulative ``torch.logcumsumexp``, whose
last entry along ``dim`` is that log-sum-exp. One-hot rows read out of an
identity matrix are found by their values (:class:`_IdentityRows`), however the identity was built, and
also when it is scaled, shifted, complemented or has its rows reordered (:func:`_one_hot_table`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import Hint, Shortcut, exercise
from .loops import ops_issued, python_loop

# --------------------------------------------------------------------------
# What the checkers share: a tensor result, the same dtype, untouched inputs (loops: .loops)
# --------------------------------------------------------------------------

def _expect_tensor(got, what: str) -> None:
    if not isinstance(got, torch.Tensor):
        raise Hint(f"{what} should return a torch.Tensor, got {type(got).__name__}.",
                   "Build the result from tensor operations on the inputs and return it, not a list or a number.")


def _aten(*ops: str, reached: bool = False, does: str = "") -> tuple[Shortcut, ...]:
    """Shortcuts for ATen operators by name: ``torch.ops.aten.NAME`` and (by the guard) each of its overloads."""
    return tuple(Shortcut(f"torch.ops.aten.{op}", reached=reached, does=does) for op in ops)


def _same_dtype(got: torch.Tensor, want: torch.dtype) -> None:
    if got.dtype != want:
        raise Hint(
            f"{want} inputs should give a {want} result (the same dtype as the inputs), got {got.dtype}.",
            "Leave the dtype alone: no .double(), .float() or dtype= argument; arithmetic on the inputs "
            "keeps their dtype by itself.",
        )


# --------------------------------------------------------------------------
# 01.pairwise_sq_dists
# --------------------------------------------------------------------------


def _run_untouched(fn: Callable, inputs: tuple[torch.Tensor, ...], label: str, names: str = "ab"):
    """Call ``fn`` on copies of ``inputs``; fail with a hint if it changed one of them in place."""
    copies = tuple(t.clone() for t in inputs)
    got = fn(*copies)
    changed = [name for name, t, c in zip(names, inputs, copies) if not torch.equal(t, c)]
    if changed:
        which = " and ".join(changed)
        raise Hint(
            f"for {label}, your function changed its input {which} in place; the caller's tensors must stay "
            "as they were (and a result computed from a changed input is not the one asked for).",
            "Compute new tensors: out-of-place arithmetic (a - b, x ** 2, .sum()) makes new ones, while "
            "a.mul_(...), a -= ... or a[...] = ... write into the caller's a.",
        )
    return got


def _pairwise_sq_dists_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Squared Euclidean distances between the rows of ``a`` [N, D] and ``b`` [M, D] -> [N, M].

    ``a[:, None, :]`` has shape [N, 1, D] and ``b[None, :, :]`` has [1, M, D];
    their difference broadcasts to [N, M, D], and summing the squares over the
    last dimension leaves [N, M].
    """
    diff = a[:, None, :] - b[None, :, :]
    return (diff**2).sum(dim=-1)


#: PyTorch's own pairwise distances: the public functions, the private ``torch._euclidean_dist``
#: (what ``torch.cdist`` uses for larger inputs), ``pdist`` (all pairs within one tensor: the
#: ``a``-to-``b`` block of ``pdist(cat([a, b]))`` is the answer), Python decompositions, and the
#: ATen operators: ``cdist`` by name (it is decomposed before dispatch), and the three operators that
#: do the work wherever the learner's code reaches them from.
_LIBRARY_DISTANCES = (
    "torch.cdist", "torch._euclidean_dist", "torch.pdist", "torch._decomp.decompositions._euclidean_dist",
    "torch.nn.functional.pairwise_distance", "torch.nn.PairwiseDistance",
    *_aten("cdist", "pdist"),
    *_aten("pairwise_distance", reached=True),
    *_aten("_cdist_forward", "_euclidean_dist", "_pdist_forward", reached=True),
)

_BROADCAST_FIX = (
    "Insert size-1 axes (with None in an index, or unsqueeze) so that a reads as [N, 1, D] and b as "
    "[1, M, D]: right-aligned, N meets 1 and 1 meets M, so their difference broadcasts to [N, M, D]. "
    "Square that and reduce over D, the last dimension."
)


@exercise(
    "01.pairwise_sq_dists",
    "write pairwise_sq_dists(a, b): for a [N, D] and b [M, D], return the [N, M] tensor whose entry "
    "[i, j] is ((a[i] - b[j]) ** 2).sum(), in the same dtype as the inputs. Use broadcasting: no Python "
    "loops and no torch.cdist; leave a and b unchanged.",
    _pairwise_sq_dists_reference,
    shortcuts=_LIBRARY_DISTANCES,
    goal="the pairwise distances with broadcasting",
    hint=_BROADCAST_FIX,
)
def _test_pairwise_sq_dists(pairwise_sq_dists: Callable) -> None:
    loop = python_loop(pairwise_sq_dists)
    if loop is not None:
        raise Hint(f"your function has {loop}; this exercise asks for broadcasting, which handles every "
                   "pair (i, j) at once, with no Python loops.", _BROADCAST_FIX)
    g = torch.Generator().manual_seed(0)
    # (N, M, D): square, N != M, D = 1, a single row, and a larger case.
    # The last case passes transposed views (not contiguous in memory: .view() on them raises).
    for n, m, d in [(3, 3, 2), (4, 6, 3), (5, 2, 1), (1, 7, 4), (40, 30, 16), (6, 5, 3)]:
        a = torch.randn(n, d, generator=g, dtype=torch.float64)
        b = torch.randn(m, d, generator=g, dtype=torch.float64)
        if (n, m, d) == (6, 5, 3):
            a, b = torch.randn(d, n, generator=g, dtype=torch.float64).T, torch.randn(d, m, generator=g, dtype=torch.float64).T
        want = torch.cdist(a, b) ** 2  # from the originals, before the candidate sees any tensor
        got = _run_untouched(pairwise_sq_dists, (a, b), f"a {(n, d)} and b {(m, d)}")
        _expect_tensor(got, "pairwise_sq_dists(a, b)")
        _same_dtype(got, a.dtype)
        if got.shape != (n, m):
            raise Hint(
                f"for a of shape {(n, d)} and b of shape {(m, d)} the result should have shape {(n, m)}, "
                f"got {tuple(got.shape)}. Which shapes must a and b take so that their difference has "
                "shape [N, M, D]?",
                _BROADCAST_FIX,
            )
        got64 = got.to(torch.float64)
        if torch.allclose(got64, want, rtol=1e-6, atol=1e-8):
            continue
        if torch.allclose(got64, want.sqrt(), rtol=1e-6, atol=1e-8):
            raise Hint(
                f"for a {(n, d)} and b {(m, d)} your entries are the distances between the rows, not their "
                f"squares: entry [0, 0] should be {want[0, 0].item():.4g}, got {got64[0, 0].item():.4g}.",
                "Leave out the square root: the sum of the squared differences is the answer.",
            )
        error = (got64 - want).abs()
        i, j = divmod(int(error.argmax()), m)
        raise Hint(
            f"for a {(n, d)} and b {(m, d)} some entries are off by up to {error.max().item():.3g}: entry "
            f"[{i}, {j}] should be {want[i, j].item():.4g}, got {got64[i, j].item():.4g}.",
            "Entry [i, j] is ((a[i] - b[j]) ** 2).sum(): square the differences first, then sum over D only.",
        )
    # float32 in, float32 out: no silent change of dtype either way.
    a32 = torch.randn(4, 3, generator=g)
    want32 = torch.cdist(a32, a32[:2]) ** 2
    got = _run_untouched(pairwise_sq_dists, (a32, a32[:2]), "float32 a (4, 3) and b (2, 3)")
    _expect_tensor(got, "pairwise_sq_dists(a, b)")
    _same_dtype(got, torch.float32)
    if not torch.allclose(got, want32, rtol=1e-4, atol=1e-4):
        raise Hint("for float32 inputs a (4, 3) and b (2, 3) the values are wrong, although float64 inputs worked.",
                   "Compute in the inputs' own dtype, with no .double() or .float() on the way.")
    # No loops anywhere (also in functions it calls): the operator count must not grow with N, M, D.
    small = ops_issued(pairwise_sq_dists, torch.randn(4, 2, generator=g), torch.randn(3, 2, generator=g))
    large = ops_issued(pairwise_sq_dists, torch.randn(12, 5, generator=g), torch.randn(9, 5, generator=g))
    if large != small:
        raise Hint(
            f"your function issued {small} tensor operations for N=4, M=3, D=2 and {large} for N=12, M=9, "
            "D=5: the count grows with the sizes, so something loops over rows or columns.",
            _BROADCAST_FIX,
        )


# --------------------------------------------------------------------------
# 01.one_hot
# --------------------------------------------------------------------------


def _one_hot_reference(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """float32 [N, num_classes] with a 1.0 at ``[i, labels[i]]`` and 0.0 elsewhere.

    Advanced indexing with two index tensors of length N writes one entry per row.
    """
    out = torch.zeros(labels.shape[0], num_classes, dtype=torch.float32, device=labels.device)
    out[torch.arange(labels.shape[0], device=labels.device), labels] = 1.0
    return out


class _IdentityRows(TorchDispatchMode):
    """Notes an operator that reads entries of a table of ready-made one-hot rows (``I[labels]``, ``gather``, ...).

    An identity matrix's rows are one-hot rows, however it was built (``torch.ones(C).diag()``,
    ``diag_embed``, ``fill_diagonal_``, a comparison of two ``arange``, NumPy's ``eye``), and so are the
    rows of ``2 * I``, ``1 - I`` or ``I.flip(1)`` after a fixed map back: so the test is on the values
    (:func:`_one_hot_table`). Writing into a tensor by index (``out[rows, labels] = 1.0``, ``scatter_``)
    is not reading, and is not noted.
    """

    READS = {torch.ops.aten.index, torch.ops.aten._unsafe_index, torch.ops.aten.index_select,
             torch.ops.aten.embedding, torch.ops.aten._embedding_bag, torch.ops.aten._embedding_bag_forward_only,
             torch.ops.aten.gather, torch.ops.aten.take, torch.ops.aten.take_along_dim}

    def __init__(self, num_classes: int):
        super().__init__()
        self.num_classes = num_classes
        self.table: str | None = None  # what was read, e.g. "[5, 5]"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        source = args[0] if args else None
        if self.table is None and func.overloadpacket in self.READS:
            self.table = _one_hot_table(source, self.num_classes)
        return func(*args, **(kwargs or {}))


def _one_hot_table(t, num_classes: int) -> str | None:
    """Describe ``t`` (e.g. ``"[5, 5]"``) when it is a table of one-hot rows up to a fixed map, else None.

    Such a table is 2-D, at least 2 x 2, and all its entries but one per row and per column share one
    value (the background); the ``min(rows, cols)`` others sit in distinct rows and columns. That is an
    identity matrix (or a rectangular slice of one), scaled, shifted, complemented (``1 - I``) or with its
    rows or columns reordered. A tensor of 3 or more dimensions counts when it repeats one such table
    (``I.expand(N, C, C)``); a 1-D one when its ``num_classes``-wide rows form one (``I.flatten()``).
    """
    if not isinstance(t, torch.Tensor) or t.is_complex() or t.layout != torch.strided or t.numel() == 0:
        return None
    t = t.detach()
    if t.ndim == 1:
        if t.numel() % num_classes:
            return None
        table, what = t.reshape(-1, num_classes), f"[{t.numel()}] (flattened)"
    elif t.ndim == 2:
        table, what = t, f"[{t.shape[0]}, {t.shape[1]}]"
    else:
        stack = t.reshape(-1, *t.shape[-2:])
        if not bool((stack == stack[:1]).all()):
            return None
        table, what = stack[0], f"[{t.shape[-2]}, {t.shape[-1]}] (expanded to {list(t.shape)})"
    if min(table.shape) < 2:
        return None
    values = table.flatten()
    background = (values.to(torch.uint8) if values.dtype == torch.bool else values).mode().values
    marked = table != background
    if int(marked.sum()) != min(table.shape) or int(marked.sum(0).max()) > 1 or int(marked.sum(1).max()) > 1:
        return None
    return what


def _vector_argument(args: tuple, kwargs: dict) -> bool:
    """Is the first argument of ``numpy.diag(v)`` / ``numpy.diagflat(v)`` 1-D (which builds a diagonal matrix)?"""
    import numpy as np

    v = args[0] if args else kwargs.get("v")
    return v is not None and np.ndim(v) == 1


_PAIRED_INDEX_FIX = (
    "Index a tensor of zeros with two index tensors at once, one that counts the rows (torch.arange) "
    "and labels for the columns: section 6 shows that they pair up element by element, so a single "
    "assignment writes exactly one 1.0 per row. (scatter_ along dim 1, or comparing labels as a column "
    "with every class index by broadcasting, also works.)"
)


@exercise(
    "01.one_hot",
    "write one_hot(labels, num_classes): for int64 class indices of shape [N], return a float32 tensor "
    "of shape [N, num_classes] with 1.0 at [i, labels[i]] and 0.0 elsewhere. No Python loops, no "
    "F.one_hot, no rows of an identity matrix (torch's or NumPy's).",
    _one_hot_reference,
    shortcuts=(
        "torch.nn.functional.one_hot", "torch._decomp.decompositions.one_hot", *_aten("one_hot"),
        Shortcut("torch.eye", does="`torch.eye` (its rows are one-hot rows, ready-made)"),
        # NumPy's identity matrices, indexed in NumPy where no torch mode sees the rows being read
        Shortcut("numpy.eye", does="`numpy.eye` (its rows are one-hot rows, ready-made)"),
        Shortcut("numpy.identity", does="`numpy.identity` (its rows are one-hot rows, ready-made)"),
        *(Shortcut(f"numpy.{name}", when=_vector_argument,
                   does=f"`numpy.{name}` of a vector (a diagonal matrix: for a vector of ones, its rows are one-hot "
                        "rows, ready-made)")
          for name in ("diag", "diagflat")),
        # OneHotCategorical(...).mode and .sample() call F.one_hot from inside torch, which the
        # direct-call rule would allow; its enumerate_support() is an identity matrix
        Shortcut("torch.distributions.Distribution",
                 does="a `torch.distributions` distribution (OneHotCategorical makes one-hot rows)"),
    ),
    goal="the one-hot encoding",
    hint=_PAIRED_INDEX_FIX,
)
def _test_one_hot(one_hot: Callable) -> None:
    loop = python_loop(one_hot)
    if loop is not None:
        raise Hint(f"your function has {loop}; this exercise asks for tensor operations that write every "
                   "row's 1.0 at once, with no Python loops.", _PAIRED_INDEX_FIX)
    cases = [
        # the largest class (4) never occurs: num_classes, not labels.max() + 1, sets the width
        (torch.tensor([0, 3, 3, 1]), 5),
        (torch.tensor([2, 0, 1]), 3),
        (torch.tensor([1]), 2),
        # num_classes alone sets the width: an empty batch still has num_classes columns, and one label
        # of class 0 still gets a row of 10
        (torch.tensor([], dtype=torch.int64), 4),
        (torch.tensor([0]), 10),
        (torch.randint(0, 10, (50,), generator=torch.Generator().manual_seed(0)), 10),
    ]
    for labels, num_classes in cases:
        given = labels.clone()
        n = labels.shape[0]
        # Only where a label repeats: then the answer's own one-hot result is not a table of distinct
        # one-hot rows, so reading from it (unusual, but right) is not mistaken for reading an identity.
        reads = _IdentityRows(num_classes)
        try:
            if len(set(given.tolist())) < n:
                with reads:
                    got = one_hot(labels, num_classes)
            else:
                got = one_hot(labels, num_classes)
        except (IndexError, RuntimeError) as exc:
            if n == 0 and "numel() == 0" in str(exc):  # labels.max() of no labels
                raise Hint(
                    f"for no labels (an empty int64 tensor) and num_classes={num_classes}, your function raised "
                    f"{type(exc).__name__}: {exc}. An empty batch should give an empty result of shape "
                    f"{(0, num_classes)}; nothing about the width should depend on the labels' values.",
                    "The width comes from the num_classes argument alone: do not read labels.max() at all.",
                ) from exc
            said = str(exc)  # IndexError from indexing; scatter_ and gather: "Expected dtype int64 for index"
            if not ("must be long" in said or ("Expected dtype" in said and "for index" in said)):
                raise
            raise Hint(
                f"for labels {given.tolist()[:8]}{'...' if n > 8 else ''} your function used a floating-point "
                f"tensor as an index ({type(exc).__name__}: {exc}). Index tensors hold integers (or bools), "
                "and labels already are int64.",
                "Use labels as they come, as an index; only the tensor of ones and zeros that you return "
                "is float32.",
            ) from exc
        if reads.table is not None:
            raise Hint(
                f"for num_classes={num_classes} your function indexes a {reads.table} identity matrix (or one "
                "that is scaled, shifted or has its rows reordered: all entries but one per row are equal): "
                "its rows are one-hot rows, ready-made, so picking them skips the work this exercise asks for.",
                "Compute the entries from labels instead. " + _PAIRED_INDEX_FIX,
            )
        _expect_tensor(got, "one_hot(labels, num_classes)")
        if got.shape != (n, num_classes):
            raise Hint(
                f"for {n} labels and num_classes={num_classes} the result should have shape "
                f"{(n, num_classes)}, got {tuple(got.shape)}: one row per label, one column per class, "
                "whether or not every class occurs in labels.",
                "The width comes from the num_classes argument, not from labels.max() + 1: a class that no "
            "label uses still gets its column of zeros.",
            )
        if got.dtype != torch.float32:
            raise Hint(f"the result should be float32 (losses and matrix products want floats), got {got.dtype}.",
                       "torch.zeros makes float32 by default (the default dtype); a comparison gives bool and "
                       "integer arithmetic int64, so convert those with .float() or .to(torch.float32).")
        if not torch.equal(labels, given):
            raise Hint("your function changed the labels tensor in place: leave its input alone.",
                       "Read labels as an index; write only into the new tensor you return.")
        want = torch.eye(num_classes)[given]
        if not torch.equal(got, want):
            row = int((got != want).any(dim=1).nonzero()[0])
            ones = int((got[row] != 0).sum())
            nudge = {0: "it has no 1.0 at all", 1: "its 1.0 is in the wrong column"}.get(
                ones, f"it has {ones} non-zero entries; each row needs exactly one 1.0, in its own label's column")
            raise Hint(
                f"for labels {given.tolist()[:8]}{'...' if n > 8 else ''} and num_classes={num_classes}, row {row} "
                f"(label {int(given[row])}) should be {want[row].tolist()}, got {got[row].tolist()}: {nudge}.",
                _PAIRED_INDEX_FIX,
            )
    # No loops anywhere (also in functions it calls): the operator count must not grow with N or num_classes.
    g = torch.Generator().manual_seed(1)
    small = ops_issued(one_hot, torch.randint(0, 5, (4,), generator=g), 5)
    large = ops_issued(one_hot, torch.randint(0, 12, (40,), generator=g), 12)
    if large != small:
        raise Hint(
            f"your function issued {small} tensor operations for 4 labels and 5 classes, and {large} for 40 "
            "labels and 12 classes: the count grows with the sizes, so something loops over rows or classes.",
            _PAIRED_INDEX_FIX,
        )


# --------------------------------------------------------------------------
# 01.softmax
# --------------------------------------------------------------------------


def _softmax_reference(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Softmax of ``x`` along ``dim``: ``exp(x) / exp(x).sum(dim)``, same shape and dtype as ``x``.

    Subtracting the maximum along ``dim`` first leaves the result unchanged
    (numerator and denominator are both multiplied by ``exp(-max)``) and keeps
    ``exp`` from overflowing: float32 ``exp`` is ``inf`` above about 88.7.
    ``keepdim=True`` keeps the reduced dimension as size 1, so the maximum and
    the sum broadcast back along ``dim``. ``x`` itself is left unchanged.
    """
    shifted = x - x.amax(dim=dim, keepdim=True)
    e = shifted.exp()
    return e / e.sum(dim=dim, keepdim=True)


#: PyTorch's own softmax. By name: the public functions (Tensor.softmax and Tensor.log_softmax
#: come with the torch.* names), softmin (softmax of -x), the modules (nn.Softmax calls F.softmax
#: from inside torch, so it is named as a class), torch.distributions (a Categorical normalises its
#: logits: Categorical(logits=x).probs is softmax(x), and .logits its log), the private torch._*
#: spellings and the Python references in torch._refs and torch._decomp. At dispatch level, whatever
#: the learner's code reaches them through (torch.masked.softmax, F.gumbel_softmax, attention, ...):
#: the ATen operators that compute a softmax, each with every overload. Composite ones
#: (aten.softmax.int) are decomposed before dispatch, so they are named too, for a direct call.
#: tests/test_exercises_ch01.py calls each route. log-sum-exp is refused too, by name and as the ATen
#: operator whatever reaches it: exp(x - logsumexp(x)) is a softmax whose overflow-safe shift
#: torch.logsumexp does for you, and that shift is what this exercise is about. So is torch.logcumsumexp,
#: whose last entry along dim is the log-sum-exp.
_LOGSUMEXP_DOES = "log-sum-exp (`torch.logsumexp` subtracts the maximum before exp, the step this exercise asks for)"
_LOGCUMSUMEXP_DOES = ("cumulative log-sum-exp (the last entry of `torch.logcumsumexp` along dim is the "
                      "log-sum-exp, overflow-safe shift included)")
_LIBRARY_SOFTMAX = (
    "torch.softmax", "torch.log_softmax", "torch.special.softmax", "torch.special.log_softmax",
    "torch.nn.functional.softmax", "torch.nn.functional.log_softmax", "torch.nn.functional.softmin",
    "torch.nn.Softmax", "torch.nn.LogSoftmax", "torch.nn.Softmin",
    Shortcut("torch.distributions.Distribution",
             does="a `torch.distributions` distribution (it turns logits into normalised probabilities)"),
    "torch._softmax", "torch._log_softmax", "torch._safe_softmax", "torch._masked_softmax",
    "torch._refs.softmax", "torch._refs.log_softmax", "torch._refs.special.softmax", "torch._refs.special.log_softmax",
    "torch._refs.nn.functional.softmax", "torch._refs.nn.functional.log_softmax", "torch._refs.nn.functional.softmin",
    "torch._decomp.decompositions._softmax", "torch._decomp.decompositions._log_softmax",
    "torch._decomp.decompositions.safe_softmax",
    *_aten("softmax", "log_softmax"),
    *_aten("_softmax", "_log_softmax", "_safe_softmax", "_masked_softmax", "_sparse_softmax", "_sparse_log_softmax",
           reached=True),
    Shortcut("torch.logsumexp", does=_LOGSUMEXP_DOES),
    Shortcut("torch.special.logsumexp", does=_LOGSUMEXP_DOES),
    Shortcut("torch._refs.logsumexp", does=_LOGSUMEXP_DOES),
    Shortcut("torch.ops.aten.logsumexp", reached=True, does=_LOGSUMEXP_DOES),
    # the last entry of a cumulative log-sum-exp along dim is the log-sum-exp itself
    Shortcut("torch._logcumsumexp", does=_LOGCUMSUMEXP_DOES),
    *_aten("logcumsumexp", "_logcumsumexp", reached=True, does=_LOGCUMSUMEXP_DOES),
    Shortcut("torch.logcumsumexp", does=_LOGCUMSUMEXP_DOES),  # also stands for Tensor.logcumsumexp
)


def _run_softmax(softmax: Callable, x: torch.Tensor, dim: int, label: str):
    """Call the candidate on a copy of ``x``; turn a broadcasting error into a hint about keepdim."""
    given = x.clone()
    try:
        got = softmax(given, dim)
    except RuntimeError as exc:
        if isinstance(exc, NotImplementedError) or "must match the size of tensor" not in str(exc):
            raise
        raise Hint(
            f"for {label}, broadcasting failed ({exc}). A reduction along dim={dim} removes that "
            "dimension, so its result no longer lines up with x.",
            "Reduce with keepdim=True, for the maximum and for the sum: the reduced dimension stays as "
            "size 1 and broadcasts back against x along dim.",
        ) from exc
    if not torch.equal(given, x):
        raise Hint(f"for {label}, your function changed x in place: the caller's tensor must stay as it was.",
                   "Make the shifted values a new tensor (out-of-place subtraction), not x.sub_(...) or x -= ....")
    return got


_SHIFT_IDEA = (
    "Softmax is shift invariant: subtracting one number c from every entry of a slice along dim multiplies "
    "numerator and denominator by the same exp(-c), so the result does not change. Which c, chosen for each "
    "slice, makes the largest exponent of that slice exactly 0? With it no exp can overflow, and the slice's "
    "sum is at least 1, so it cannot underflow to 0 either."
)


def _slice_name(index: tuple[int, ...], ndim: int, dim: int) -> str:
    """'row 1' for a 2-D x reduced along its columns, 'column 2' along its rows, else 'the slice at (i, j)'."""
    if ndim == 2:
        return f"row {index[0]}" if dim % 2 == 1 else f"column {index[0]}"
    return f"the slice at {index} (x with dim={dim} left out)"


def _explain_not_finite(x: torch.Tensor, got: torch.Tensor, dim: int, label: str) -> None:
    """Raise the Hint for a result with inf or nan: a slice whose exps all underflowed, or exp overflowing.

    A slice comes out nan in every entry, with no overflow, when every one of its exps underflowed to 0
    (0 / 0): float32 exp is 0 below about -104. One shift for the whole tensor (its overall maximum) does
    that to a slice whose entries all lie far below that maximum, and that is what the first message
    names. An overflow instead leaves 0 (finite / inf) beside the nans, or happens in a slice whose exp
    overflows as given.
    """
    all_nan = got.isnan().all(dim=dim)  # 0 / 0 in every entry; an overflow leaves finite / inf = 0 beside its nans
    fits = torch.isfinite(x.exp()).all(dim=dim)  # exp of the slice as given does not overflow
    emptied = (x - x.amax()).exp().sum(dim=dim) == 0  # what one shift for the whole tensor leaves
    starved = all_nan & fits & emptied
    if bool(starved.any()):
        index = tuple(int(i) for i in starved.nonzero()[0])
        where = _slice_name(index, x.ndim, dim)
        raise Hint(
            f"for {label}, {where} of your result is nan, although exp of that slice's own entries does not "
            f"overflow: every exp in that slice underflowed to 0 (exp of a large negative number is 0; in float32, "
            "below about -104), so its "
            "sum was 0 and 0 / 0 is nan. That is what one shift for the whole tensor does (subtracting, say, "
            "the largest entry of all of x): a slice whose entries all lie far below that value loses all of them.",
            "Each slice along dim needs its own shift. " + _SHIFT_IDEA,
        )
    _name_a_shift_that_still_overflows(x, got, dim, label)
    raise Hint(
        f"for {label} your result contains inf or nan: exp overflowed (float32 exp is inf above about "
        "88.7), and inf / inf is nan. Softmax does not change when the same number c is subtracted from "
        "every entry of a slice along dim: numerator and denominator are both multiplied by exp(-c).",
        "Choose c for each slice on its own. " + _SHIFT_IDEA,
    )


def _name_a_shift_that_still_overflows(x: torch.Tensor, got: torch.Tensor, dim: int, label: str) -> None:
    """Raise the Hint when ``got`` is exp(x - c) normalised along ``dim``, for c a per-slice statistic other than the max.

    Such a c (the slice's mean, median or smallest entry) does cancel, but it leaves exponents x - c far above
    0 in a slice with a wide spread, such as [1000, 999, 998, 0], and those overflow.
    """
    statistics = {
        "mean": lambda: x.mean(dim=dim, keepdim=True),
        "median": lambda: x.median(dim=dim, keepdim=True).values,
        "smallest entry": lambda: x.amin(dim=dim, keepdim=True),
    }
    for name, statistic in statistics.items():
        c = statistic()
        e = (x - c).exp()
        if not torch.allclose(got, e / e.sum(dim=dim, keepdim=True), rtol=1e-4, atol=1e-4, equal_nan=True):
            continue
        top = (x - c).amax(dim=dim)
        index = tuple(int(i) for i in (top == top.max()).nonzero()[0])
        raise Hint(
            f"for {label} your result contains inf or nan: you subtract each slice's {name} along dim={dim}, a "
            f"shift that cancels, but exp still overflowed: in {_slice_name(index, x.ndim, dim)}, x - c reaches "
            f"{top.max().item():.4g}, and float32 exp is inf above about 88.7. c must be the largest entry of "
            "the slice, not its mean or median (or smallest entry).",
            _SHIFT_IDEA,
        )


def _looks_clamped(x: torch.Tensor, got: torch.Tensor, dim: int, tol: float) -> tuple[float, float, float] | None:
    """Two different entries of one slice along ``dim`` with the same (non-negligible) value in ``got``, or None.

    Softmax is strictly increasing within a slice (the ratio of two entries is exp(x_i - x_j)), so distinct
    inputs never share an output; a cap on x (``x.clamp(max=80)``) makes the capped entries tie.
    """
    xs, gs = x.movedim(dim, -1).reshape(-1, x.shape[dim]), got.movedim(dim, -1).reshape(-1, x.shape[dim])
    for xr, gr in zip(xs, gs):
        for i in range(xr.numel()):
            for j in range(i + 1, xr.numel()):
                if xr[i] != xr[j] and gr[i] > tol and abs(float(gr[i] - gr[j])) <= tol * float(gr[i]):
                    return float(xr[i]), float(xr[j]), float(gr[i])
    return None


def _name_a_clamp(x: torch.Tensor, got: torch.Tensor, dim: int, label: str, tol: float) -> None:
    """Raise the Hint when two different entries of a slice came out equal: x was clamped (capped) before exp."""
    tie = _looks_clamped(x, got, dim, tol)
    if tie is None:
        return
    a, b, value = tie
    raise Hint(
        f"for {label}, the entries {a:.6g} and {b:.6g} of one slice along dim={dim} both came out as "
        f"{value:.4g}, although softmax keeps them apart (their ratio is exp({a:.6g} - {b:.6g})). A cap on x, "
        "such as x.clamp(max=...) before exp, does that: it avoids the overflow but changes the values, while "
        "subtracting one number from the whole slice avoids it too, and cancels out.",
        _SHIFT_IDEA,
    )


def _shift_along(x: torch.Tensor, other: int, dim: int) -> torch.Tensor:
    """exp(x - max along ``other``), normalised along ``dim``: what a maximum taken along the wrong dim gives."""
    e = (x - x.amax(dim=other, keepdim=True)).exp()
    return e / e.sum(dim=dim, keepdim=True)


def _name_a_shift_along_another_dim(softmax: Callable, x: torch.Tensor, got: torch.Tensor, dim: int, label: str,
                                    tol: float) -> None:
    """Raise the Hint when ``got`` is exp(x - max along another dimension), normalised along ``dim``.

    Such a shift differs between the entries of one slice along ``dim``, so it does not cancel: the
    values still sum to 1 but are wrong (``x.amax(dim=-1, keepdim=True)`` with a sum along ``dim=0``).
    A match on ``x`` alone can be chance (on the float32 logits up to 1000 other wrong answers agree with
    it to 1e-4), so the candidate must also match it on a float64 probe of the same shape, where that
    formula and softmax differ clearly.
    """
    along = dim % x.ndim
    probe = torch.randn(x.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64) * 3
    for other in range(x.ndim):
        if other == along:
            continue
        if not torch.allclose(got, _shift_along(x, other, dim), rtol=tol, atol=tol):
            continue
        wrong = _shift_along(probe, other, dim)
        if (wrong - torch.softmax(probe, dim=dim)).abs().max() < 1e-3:
            continue  # the probe cannot tell the two apart
        on_probe = _run_softmax(softmax, probe, dim, f"a float64 x of shape {list(x.shape)}, dim={dim}")
        if isinstance(on_probe, torch.Tensor) and on_probe.shape == probe.shape and torch.allclose(
                on_probe.to(torch.float64), wrong, rtol=1e-8, atol=1e-8):
            raise Hint(
                f"for {label}, your values match a softmax shifted by the maximum along dim={other} (or "
                f"{other - x.ndim}) while the sum runs along dim={dim}: that maximum differs between the "
                f"entries of one slice along dim={dim}, so it does not cancel between numerator and denominator.",
                "Take the maximum along the same dim as the sum (the dim argument, not a fixed -1), with "
                "keepdim=True: then every slice is shifted by one number, which cancels.",
            )


@exercise(
    "01.softmax",
    "write softmax(x, dim): exp(x) / exp(x).sum(dim) along dim, for a float tensor x of any shape, "
    "with the same shape and dtype as x and finite even for entries as large as 1000 (float32 exp "
    "overflows above about 88.7). Leave x unchanged; no library softmax and no logsumexp.",
    _softmax_reference,
    shortcuts=_LIBRARY_SOFTMAX,
    goal="softmax",
    hint=_SHIFT_IDEA,
)
def _test_softmax(softmax: Callable) -> None:
    g = torch.Generator().manual_seed(1)
    cases = [
        # (label, x, dim): non-square first (a missing keepdim fails loudly), then a square
        # matrix (a missing keepdim broadcasts along the wrong dimension without an error),
        # other dims, 3-D, and logits large enough to overflow exp.
        ("x of shape [4, 3], dim=1", torch.randn(4, 3, generator=g, dtype=torch.float64) * 3, 1),
        ("a square x of shape [3, 3], dim=1", torch.randn(3, 3, generator=g, dtype=torch.float64) * 3, 1),
        ("a square x of shape [3, 3], dim=0", torch.randn(3, 3, generator=g, dtype=torch.float64) * 3, 0),
        ("x of shape [2, 3, 5], dim=-1", torch.randn(2, 3, 5, generator=g, dtype=torch.float64), -1),
        ("x of shape [2, 3, 5], dim=1", torch.randn(2, 3, 5, generator=g, dtype=torch.float64), 1),
        ("float32 logits up to 1000, dim=1", torch.tensor([[1000.0, 999.0, 998.0, 0.0], [-1000.0, -1001.0, 50.0, 60.0]]), 1),
        # a permuted view: not contiguous in memory, so merging its dimensions with .view() raises
        ("a permuted (non-contiguous) x of shape [2, 3, 5], dim=-1",
         torch.randn(3, 5, 2, generator=g, dtype=torch.float64).permute(2, 0, 1), -1),
        # masked logits, as in attention: exp(-inf) = 0, so a masked entry gets probability exactly 0
        ("logits with -inf (masked) entries, dim=1",
         torch.tensor([[2.0, float("-inf"), 1.0], [float("-inf"), 0.5, float("-inf")]], dtype=torch.float64), 1),
    ]
    for label, x, dim in cases:
        want = torch.softmax(x, dim=dim)
        got = _run_softmax(softmax, x, dim, label)
        _expect_tensor(got, "softmax(x, dim)")
        if got.shape != x.shape:
            raise Hint(f"for {label} the result should keep the shape {tuple(x.shape)}, got {tuple(got.shape)}: "
                       "softmax rescales the values along dim, it does not remove dim.",
                       "Divide the exponentials by their sum along dim taken with keepdim=True; the division "
                       "keeps x's shape.")
        if got.dtype != x.dtype:
            raise Hint(f"for {label} the result should stay {x.dtype}, got {got.dtype}.",
                       "Leave the dtype alone: no .float() or .double(); arithmetic on x keeps its dtype.")
        if not torch.isfinite(got).all():
            _explain_not_finite(x, got, dim, label)
        sums = got.sum(dim=dim)
        if not torch.allclose(sums, torch.ones_like(sums), atol=1e-5):
            raise Hint(
                f"for {label} the values along dim={dim} should sum to 1, but they sum to values from "
                f"{sums.min().item():.4g} to {sums.max().item():.4g}.",
                f"Divide by the sum over dim={dim} with keepdim=True, so that it broadcasts back along that "
                "same dimension.",
            )
        worst = (got - want).abs().max().item()
        # float32 tolerates the rounding of other correct formulas (exp(x - logsumexp) at x ~ 1000)
        tol = 1e-4 if x.dtype == torch.float32 else 1e-8
        if not torch.allclose(got, want, rtol=tol, atol=tol):
            _name_a_clamp(x, got, dim, label, tol)
            _name_a_shift_along_another_dim(softmax, x, got, dim, label, tol)
            raise Hint(f"for {label} some values are off by up to {worst:.3g}, although they sum to 1.",
                       f"Each entry should be exp(x) divided by the sum of exp(x) along dim={dim}.")
