"""Exercises of chapter 22 (TorchScript, torch.export and ONNX)."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings

import torch
from torch import nn

from . import Hint, exercise


@contextlib.contextmanager
def _quiet():
    """Keep export's console output and torch's log lines out of the learner's notebook."""
    captured = io.StringIO()
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            yield captured
    finally:
        logging.disable(logging.NOTSET)


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {' '.join(lines[:3])}"[:400]


# --------------------------------------------------------------------------
# 22.rescale_no_branch
# --------------------------------------------------------------------------


def _rescale_with_if(x: torch.Tensor) -> torch.Tensor:
    """The chapter's rescaling, with a Python ``if`` on a tensor value (traces wrongly)."""
    peak = x.abs().max()
    if peak > 1.0:
        return x / peak
    return x


def _rescale_no_branch(x: torch.Tensor) -> torch.Tensor:
    """``x / max|x|`` when ``max|x| > 1``, else ``x`` unchanged; for any float tensor, without a Python branch.

    Dividing by ``max(max|x|, 1)`` gives both cases in one expression, so
    ``torch.jit.trace`` and ``torch.export`` record a graph that is right for
    every input (``torch.where(peak > 1, x / peak, x)`` works too).
    """
    return x / x.abs().max().clamp(min=1.0)


_RESCALE_IDEA = (
    "A trace records tensor operations only: a Python bool or number taken from a tensor is a constant in it. "
    "Keep the peak a tensor and let tensor operations make the choice, so that both cases are one expression in "
    "the graph: either a divisor that equals the peak when the peak is above 1 and 1 otherwise, or both results "
    "computed and one of them selected element by element by a boolean tensor."
)


class _AsModule(nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


@exercise(
    "22.rescale_no_branch",
    "write rescale_no_branch(x): x divided by its largest absolute value when that value is above 1, "
    "x unchanged otherwise, for any float tensor, with no Python `if` on a tensor value, so that "
    "torch.jit.trace and torch.export record a graph that is right for both kinds of input.",
    reference=_rescale_no_branch,
    hint=_RESCALE_IDEA,
)
def _test_rescale_no_branch(candidate) -> None:
    g = torch.Generator().manual_seed(22)
    small = torch.rand(3, 4, generator=g) * 1.6 - 0.8  # every |value| < 1: unchanged
    large = torch.randn(3, 4, generator=g) * 5  # scaled into [-1, 1]
    cases = {
        "a small matrix (every |value| below 1)": small,
        "a large matrix": large,
        "a vector whose largest |value| is negative (-4)": torch.tensor([-4.0, 1.0, 2.0]),
        "a vector whose largest |value| is exactly 1": torch.tensor([0.5, -1.0, 0.25]),
    }
    for label, x in cases.items():
        want = _rescale_with_if(x.clone())
        got = candidate(x.clone())
        if not isinstance(got, torch.Tensor):
            raise AssertionError(f"return a tensor; for {label} you returned {type(got).__name__}")
        if got.shape != x.shape:
            raise AssertionError(f"for {label} of shape {tuple(x.shape)} keep the shape; you returned {tuple(got.shape)}")
        if not torch.allclose(got, want, atol=1e-6):
            if torch.allclose(got, x / x.abs().max()):
                raise AssertionError(f"for {label} you divided by the peak; when max|x| <= 1, return x unchanged")
            if torch.allclose(got, x / x.max()) and x.max() != x.abs().max():
                raise AssertionError(f"for {label} you divided by x.max(); divide by the largest ABSOLUTE value, x.abs().max()")
            raise AssertionError(f"for {label} expected {want}, got {got}")
    # The real test: a trace made with one kind of input must be right for the other.
    for traced_on, other in (("small", "large"), ("large", "small")):
        example, probe = (small, large) if traced_on == "small" else (large, small)
        with warnings.catch_warnings(record=True) as caught, _quiet():
            warnings.simplefilter("always")
            traced = torch.jit.trace(candidate, (example.clone(),))
        # Judged by the traced graph's values on both kinds of input, not by the tracer's warnings: a harmless
        # one ("torch.tensor results are registered as constants") fires for correct answers too.
        got_example, got_probe = traced(example.clone()), traced(probe.clone())
        right = (torch.allclose(got_example, _rescale_with_if(example.clone()), atol=1e-6)
                 and torch.allclose(got_probe, _rescale_with_if(probe.clone()), atol=1e-6))
        if not right:
            tracer = [str(w.message).strip().splitlines()[0] for w in caught
                      if issubclass(w.category, torch.jit.TracerWarning) and str(w.message).strip()]
            # the warning that explains a frozen branch (a tensor turned into a Python bool or number) first
            tracer.sort(key=lambda text: not text.startswith("Converting a tensor"))
            said = f" (torch.jit.trace warned: {tracer[0]})" if tracer else ""
            raise Hint(
                f"traced with a {traced_on} input, your function gives wrong values for a {other} input{said}: "
                "the trace froze one branch. A Python `if` on a tensor value, or a number taken out with .item(), "
                "is decided once, while tracing, and the trace keeps only that outcome.",
                _RESCALE_IDEA,
            )
    try:
        with _quiet():
            program = torch.export.export(_AsModule(candidate), (small.clone(),))
    except Exception as err:  # noqa: BLE001  (any export failure is the learner's to see)
        raise AssertionError(f"torch.export.export could not export your function: {_first_line(err)}") from err
    if not torch.allclose(program.module()(large.clone()), _rescale_with_if(large.clone()), atol=1e-6):
        raise AssertionError("exported with a small input, your function is wrong for a large one: avoid Python branches")


# --------------------------------------------------------------------------
# 22.dynamic_shapes_spec
# --------------------------------------------------------------------------


class MaskedMeanScorer(nn.Module):
    """The exercise's model: one score per sequence, the mean over its unmasked positions.

    Shapes: ``x`` float ``[B, T, 16]``, ``mask`` bool ``[B, T]`` (True = a real
    position) -> float ``[B]``.
    """

    def __init__(self, features: int = 16) -> None:
        super().__init__()
        self.proj = nn.Linear(features, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        scores = self.proj(x).squeeze(-1).masked_fill(~mask, 0.0)
        return scores.sum(1) / mask.sum(1).clamp(min=1)


def _dynamic_shapes_for(max_batch: int, max_len: int) -> dict:
    """``dynamic_shapes`` for ``MaskedMeanScorer``: batch 1..max_batch and length 1..max_len, shared by both inputs.

    One ``Dim`` per size, used in both inputs (x and mask must agree on B and
    T); the feature size (16) stays static because ``nn.Linear`` fixes it.
    """
    from torch.export import Dim

    batch = Dim("batch", min=1, max=max_batch)
    length = Dim("length", min=1, max=max_len)
    return {"x": {0: batch, 1: length}, "mask": {0: batch, 1: length}}


def _inputs(batch: int, length: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    mask = torch.rand(batch, length, generator=g) > 0.3
    mask[:, 0] = True
    return torch.randn(batch, length, 16, generator=g), mask


def _x_entry(spec, index: int):
    """What the learner's spec gives x's dimension ``index`` (a Dim, a Dim.AUTO / Dim.DYNAMIC hint, ...), or None."""
    x_spec = spec.get("x") if isinstance(spec, dict) else (spec[0] if isinstance(spec, (list, tuple)) and spec else None)
    if isinstance(x_spec, dict):
        return x_spec.get(index)
    if isinstance(x_spec, (list, tuple)) and index < len(x_spec):
        return x_spec[index]
    return None


def _accepts(program, x, mask) -> bool:
    try:
        with _quiet():
            program.module()(x, mask)
    except Exception:  # noqa: BLE001  (a guard failure: AssertionError or RuntimeError)
        return False
    return True


def _size_ranges(program) -> list[tuple[int, str, int, int | float]]:
    """(x's dimension, which size, lower bound, upper bound) of x's dynamic batch and length, from the program's
    range constraints."""
    user_inputs = program.graph_signature.user_inputs
    x_node = next((n for n in program.graph.nodes if n.op == "placeholder" and n.name == user_inputs[0]), None)
    if x_node is None or "val" not in x_node.meta:
        return []
    ranges = []
    for index, (label, size) in enumerate(zip(("batch size", "length"), x_node.meta["val"].shape[:2])):
        if not isinstance(size, torch.SymInt):
            continue  # static: the calls below refuse the other sizes
        bounds = program.range_constraints.get(size.node.expr)
        if bounds is not None:
            upper = bounds.upper
            ranges.append((index, label, int(bounds.lower), int(upper) if upper.is_finite else float("inf")))
    return ranges


@exercise(
    "22.dynamic_shapes_spec",
    "write dynamic_shapes_for(max_batch, max_len): the dynamic_shapes argument for "
    "torch.export.export(MaskedMeanScorer(), (x, mask), dynamic_shapes=...), with x [B, T, 16] and mask [B, T], "
    "so that the exported program accepts every batch size 1..max_batch and every length 1..max_len, "
    "and refuses larger ones.",
    reference=_dynamic_shapes_for,
    hint="Extend the torch.export section's spec, a dict keyed by forward's argument names that maps a "
         "dimension index to a torch.export.Dim with min and max: make one Dim for the batch and one for "
         "the length and reuse the very same objects in both x and mask, since the two must agree. Leave "
         "x's feature dimension out, because nn.Linear fixes it. A bare Dim.AUTO or Dim.DYNAMIC sets no upper "
         "bound; called with min= and max= they take bounds, but export still records their range from 2 "
         "(sizes 0 and 1 are specialised), while a named Dim keeps the min you give it.",
)
def _test_dynamic_shapes_spec(candidate) -> None:
    from torch.export.dynamic_shapes import _DimHint  # Dim.AUTO / Dim.DYNAMIC, called or not

    g = torch.Generator().manual_seed(22)
    torch.manual_seed(22)
    model = MaskedMeanScorer().eval()
    for max_batch, max_len in ((32, 20), (8, 64)):
        spec = candidate(max_batch, max_len)
        example = _inputs(3, 5, g)
        try:
            with _quiet():
                program = torch.export.export(model, example, dynamic_shapes=spec)
        except Exception as err:  # noqa: BLE001
            text = str(err)
            hint = ""
            if "must always be equal" in text:
                hint = " Use ONE Dim object for the batch (and one for the length) in both x and mask: they must agree"
            elif "specialized it to be a constant (16)" in text:
                hint = " The feature size (dim 2 of x) is fixed by nn.Linear(16, 1): leave it static"
            elif "specialized it to be a constant" in text:
                hint = " Every input that shares the batch must say so: give mask the same Dims as x"
            raise AssertionError(f"for ({max_batch}, {max_len}) export failed: {_first_line(err)}.{hint}") from err
        for batch, length in ((1, 1), (max_batch, max_len), (2, max_len), (max_batch, 1)):
            x, mask = _inputs(batch, length, g)
            if not _accepts(program, x, mask):
                raise AssertionError(
                    f"for ({max_batch}, {max_len}) the exported program refuses batch {batch}, length {length}: "
                    "each Dim should span min=1 to the maximum, inclusive"
                )
            with _quiet():
                same = torch.allclose(program.module()(x, mask), model(x, mask), atol=1e-5)
            if not same:
                raise AssertionError(f"batch {batch}, length {length}: the exported program gives other values than the model")
        for batch, length, what in ((max_batch + 1, 5, "batch"), (4, max_len + 1, "length")):
            if _accepts(program, *_inputs(batch, length, g)):
                raise AssertionError(
                    f"for ({max_batch}, {max_len}) the exported program accepts {what} {max(batch, length)}, above the "
                    f"maximum: give the Dim max={'max_batch' if what == 'batch' else 'max_len'} (a bare Dim.AUTO or "
                    "Dim.DYNAMIC sets no upper bound)"
                )
        # The program's own record of each size's range: a Dim with min=2 still runs batch 1 (export does not
        # guard the lower bound at run time), so calling it cannot tell.
        for index, label, lower, upper in _size_ranges(program):
            entry = _x_entry(spec, index)
            if lower == 2 and isinstance(entry, _DimHint) and (entry.min is None or entry.min <= 1):
                asked = "min=1" if entry.min is not None else "no min"
                raise Hint(
                    f"for ({max_batch}, {max_len}) the exported program records the {label} as {lower}..{upper} "
                    f"(program.range_constraints), although your spec gives x's {label} a Dim.{entry.type.name} "
                    f"with {asked}: for these hinted dimensions torch.export specialises the sizes 0 and 1 (the "
                    f"0/1 specialisation) and records the range from 2, so {label} 1 is outside the program's "
                    f"declared range; the task asks for every {label} from 1",
                    "a named torch.export.Dim('...', min=1, max=...) is recorded with the lower bound you give "
                    "it; share one such object between x and mask",
                )
            if lower > 1:
                raise AssertionError(
                    f"for ({max_batch}, {max_len}) the exported program records the {label} as {lower}..{upper} "
                    f"(program.range_constraints): its lower bound {lower} leaves out {label} 1, and the task asks "
                    f"for every {label} from 1"
                )
