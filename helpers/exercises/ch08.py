"""Chapter 08 (RNN, LSTM, GRU): exercise checkers and reference solutions.

Exercises:

- ``08.lstm_param_count``: ``lstm_param_count(input_size, hidden_size, num_layers) -> int``,
  the number of parameters of ``nn.LSTM(input_size, hidden_size, num_layers)``
  by formula, without building the module (building any module that holds parameters inside the answer is
  refused: an ``nn.LSTM`` or another recurrent layer or cell, ``nn.Linear``, ``nn.Conv1d``, a module class of
  the learner's own); the sizes are drawn afresh at every check.
- ``08.make_windows``: ``make_windows(series, T, horizon, stride) -> (X [N, T, 1], y [N, horizon])``,
  windows of ``T`` values starting every ``stride`` steps and the ``horizon`` values that
  follow each, built with one indexing operation (no Python loop; no ``Tensor.unfold``/``as_strided``,
  ``F.unfold`` (im2col) or convolution, refused at the ATen level wherever the answer reaches them).
- ``08.last_valid_output``: ``last_valid_output(output, lengths) -> [B, H]``, the
  output of each padded sequence at its last real (non-padding) time step, without a
  Python loop.

Every failure is a two-tier :class:`~helpers.exercises.Hint`: the first wrong answer
hears the case and what is wrong (one bias vector instead of two, an off-by-one window
count, the padded last step); what fixes it (the parts to count, the indexing to use) comes only on a
second failure or from ``hint("08.name")``. "No Python loop" is checked in the answer's
source (:func:`helpers.exercises.loops.python_loop`, plus, for ``08.make_windows``, calls to
``map``/``filter``/``reduce``, loops in disguise) and by counting the operators it issues for
two sizes (:func:`helpers.exercises.loops.ops_issued`): one indexing operation issues the same
number of operators for 16 windows as for 76, a loop one or more per window.
``08.make_windows`` also requires that the windows keep the series' autograd history, which
rules out rebuilding them from Python numbers (``tolist()``) where no operator is counted.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from contextlib import contextmanager

import torch
from torch import nn

from . import Hint, Shortcut, exercise, expect_type
from .loops import ops_issued, python_loop

__all__ = ["last_valid_output", "lstm_param_count", "make_windows"]


# --------------------------------------------------------------------------
# Reference solutions
# --------------------------------------------------------------------------


def lstm_param_count(input_size: int, hidden_size: int, num_layers: int = 1) -> int:
    """Parameters of ``nn.LSTM(input_size, hidden_size, num_layers)`` (unidirectional, with biases).

    Each layer has four gates (input, forget, cell candidate, output). Each
    gate has an input weight ``[h, in]``, a recurrent weight ``[h, h]`` and,
    in PyTorch, two bias vectors ``b_ih`` and ``b_hh`` of size ``h`` (cuDNN's
    layout): ``4 * (h * (in + h) + 2 * h)``. The first layer reads
    ``input_size`` features; every later layer reads the ``hidden_size``
    outputs of the layer below.
    """
    h = hidden_size
    total = 0
    for layer in range(num_layers):
        fan_in = input_size if layer == 0 else h
        total += 4 * (h * (fan_in + h) + 2 * h)
    return total


def make_windows(series: torch.Tensor, T: int, horizon: int = 1, stride: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Windows of ``T`` consecutive values of ``series``, one every ``stride`` steps, and the ``horizon`` values after each.

    Args:
        series: float ``[L]``.
        T: window length (inputs per sample).
        horizon: values to predict after each window.
        stride: steps between the starts of two consecutive windows (1: every window).

    Returns:
        ``X`` float ``[N, T, 1]`` and ``y`` float ``[N, horizon]`` with
        ``N = (L - T - horizon) // stride + 1``: ``X[i, :, 0] = series[s : s + T]`` and
        ``y[i] = series[s + T : s + T + horizon]`` for ``s = i * stride``.
    """
    n = (len(series) - T - horizon) // stride + 1
    starts = torch.arange(n, device=series.device) * stride  # [N]
    w = series[starts[:, None] + torch.arange(T + horizon, device=series.device)]  # [N, T + horizon], one gather
    return w[:, :T].unsqueeze(-1), w[:, T:]


def last_valid_output(output: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The output of each sequence at its last real time step.

    Args:
        output: float ``[B, T, H]``, batch-first outputs of a padded batch.
        lengths: int64 ``[B]``, the real length of each sequence (1 .. T).

    Returns:
        float ``[B, H]``: row ``b`` is ``output[b, lengths[b] - 1]``.
    """
    rows = torch.arange(output.shape[0], device=output.device)
    return output[rows, lengths.to(output.device) - 1]


# --------------------------------------------------------------------------
# 08.lstm_param_count
# --------------------------------------------------------------------------


def _lstm_configs() -> list[tuple[int, int, int]]:
    """Sizes (input_size, hidden_size, num_layers) drawn afresh at every check, so no table of answers passes.

    One layer with input_size != hidden_size, a layer of hidden size 1, and stacks of 2 to 4
    layers whose input size differs from the hidden size. A draw is kept only if every usual mistake
    gives a count of its own, so the hint names the mistake that was made.
    """
    g = torch.Generator()
    g.seed()  # a fresh, unpredictable seed; check() runs inside fork_rng, so no stream moves

    def draw(low: int, high: int) -> int:
        return int(torch.randint(low, high + 1, (1,), generator=g))

    def telling(i: int, h: int, layers: int) -> bool:
        # Every known wrong formula must give its own count, so the hint names the mistake made.
        counts = [_formula(i, h, layers), _formula(i, h, layers, biases=1), _formula(i, h, layers, biases=0),
                  _formula(i, h, layers, gates=3)]
        if layers > 1:
            counts += [_formula(i, h, 1), _formula(i, h, layers, later_input="i")]
        return len(set(counts)) == len(counts)

    def fresh(layers: int, i_range: tuple[int, int], h_range: tuple[int, int]) -> tuple[int, int, int]:
        while True:
            i, h = draw(*i_range), draw(*h_range)
            if i != h and telling(i, h, layers):
                return i, h, layers

    configs = [fresh(layers, (1, 64), (2, 48)) for layers in (1, 1, 2, 3, draw(2, 4))]
    configs.append(fresh(1, (2, 16), (1, 1)))  # a layer of hidden size 1
    return configs


def _real_lstm_count(i: int, h: int, layers: int) -> int:
    return sum(p.numel() for p in nn.LSTM(i, h, num_layers=layers).parameters())


def _formula(i: int, h: int, layers: int, gates: int = 4, biases: int = 2, later_input: str = "h") -> int:
    total = 0
    for layer in range(layers):
        fan_in = i if layer == 0 or later_input == "i" else h
        total += gates * (h * (fan_in + h) + biases * h)
    return total


_SHAPES_NUDGE = (
    "Build a small nn.LSTM in a separate cell (outside your function) and print the shape of every "
    "entry of named_parameters(): weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, then _l1 for the next layer."
)


def _built(name: str) -> Shortcut:
    return Shortcut(name, does=f"building `{name}` and counting its parameters")


#: Modules whose parameters could be counted instead of the formula: every recurrent layer and cell
#: (``nn.RNNBase``/``nn.RNNCellBase`` cover their torch subclasses; ``nn.GRU`` has 3/4 of the LSTM's count and
#: ``nn.RNN`` 1/4, so either one scaled gives the answer), and ``nn.Linear`` (one ``nn.Linear(i, 4 * h)`` plus
#: one ``nn.Linear(h, 4 * h)`` per layer hold exactly an LSTM layer's weights and biases; ``nn.LazyLinear``
#: is a subclass) and ``nn.Bilinear``. Any other module that holds parameters (``nn.Conv1d(i, 4 * h, 1)`` plus
#: ``nn.Conv1d(h, 4 * h, 1)`` also hold an LSTM layer's count, and so can a module class of the learner's own)
#: is caught by :func:`_modules_built`, which sees every parameter registered while the answer runs.
_COUNTING_MODULES = tuple(_built(f"torch.nn.{name}") for name in (
    "LSTM", "GRU", "RNN", "RNNBase", "LSTMCell", "GRUCell", "RNNCell", "RNNCellBase", "Linear", "Bilinear",
))


@contextmanager
def _modules_built():
    """Record the class of every module that registers a parameter inside the block: a list of class names.

    Uses PyTorch's global ``register_module_parameter_registration_hook``, so it sees any ``nn.Module`` subclass
    (a torch layer or the learner's own) that holds parameters; a module without parameters is not recorded.
    """
    names: list[str] = []

    def hook(module, name, param):
        names.append(type(module).__name__)

    handle = nn.modules.module.register_module_parameter_registration_hook(hook)
    try:
        yield names
    finally:
        handle.remove()


#: What one layer holds, named part by part (the fuller hint): the count follows from it, but the hint
#: leaves the arithmetic, and the closed formula, to the learner.
_LAYER_PARTS = (
    "One LSTM layer holds four gate blocks (i, f, g, o). Each block has an input weight of shape "
    "[hidden_size, the layer's input size], a recurrent weight of shape [hidden_size, hidden_size], and two "
    "bias vectors of hidden_size each (PyTorch keeps both b_ih and b_hh). PyTorch stacks the four blocks in "
    "weight_ih_l0, weight_hh_l0, bias_ih_l0 and bias_hh_l0."
)


@exercise(
    "08.lstm_param_count",
    "return the number of parameters of nn.LSTM(input_size, hidden_size, num_layers) by formula, without "
    "building the module (four gates, each with an input weight, a recurrent weight and PyTorch's two bias vectors).",
    reference=lstm_param_count,
    shortcuts=_COUNTING_MODULES,
    goal="the parameter count (from the formula, without building an nn.LSTM)",
    hint="Count per gate block: an input weight, a recurrent weight and the biases; an LSTM has four blocks. "
         + _SHAPES_NUDGE,
)
def _test_lstm_param_count(candidate) -> None:
    for i, h, layers in _lstm_configs():
        want = _real_lstm_count(i, h, layers)
        with _modules_built() as built:
            got = candidate(i, h, layers)
        if built:
            raise Hint(f"for nn.LSTM({i}, {h}, num_layers={layers}) your function built a module with parameters "
                       f"({', '.join(sorted(set(built)))}) and counted those: this exercise asks for the count from "
                       "the formula, without building any module.", _SHAPES_NUDGE)
        expect_type(got, int, f"lstm_param_count({i}, {h}, {layers})")
        if got == want:
            continue
        where = f"for nn.LSTM({i}, {h}, num_layers={layers}) you returned {got}, "
        if got == _formula(i, h, layers, biases=1):
            raise Hint(where + "the count with one bias vector per gate block; look at the names of an LSTM's biases.",
                       "PyTorch keeps two bias vectors per layer, bias_ih and bias_hh, each with one entry per "
                       "hidden unit and gate block. " + _LAYER_PARTS)
        if got == _formula(i, h, layers, biases=0):
            raise Hint(where + "the count without any biases.",
                       "Each layer also has two bias vectors, bias_ih and bias_hh. " + _LAYER_PARTS)
        if got == _formula(i, h, layers, gates=3):
            raise Hint(where + "a GRU's count: how many gate blocks does an LSTM have?",
                       "An LSTM has four gate blocks (i, f, g, o), a GRU three (r, z, n). " + _LAYER_PARTS)
        if got == _formula(i, h, 1):
            raise Hint(where + f"the count of the first layer only; there are {layers}.",
                       "Add one layer's count per layer, and mind what each layer reads: the first reads "
                       "input_size features, every later one the hidden_size outputs of the layer below. " + _LAYER_PARTS)
        if got == _formula(i, h, layers, later_input="i"):
            raise Hint(where + "as if every layer read input_size features: what does the second layer read?",
                       "Layers after the first read the hidden_size outputs of the layer below, so the input "
                       "weight of each of their gate blocks is [hidden_size, hidden_size], not [hidden_size, input_size].")
        raise Hint(where + f"which is too {'high' if got > want else 'low'}.", _SHAPES_NUDGE)


# --------------------------------------------------------------------------
# 08.make_windows
# --------------------------------------------------------------------------


def _as_pair(result) -> tuple[torch.Tensor, torch.Tensor]:
    try:
        X, y = result
    except (TypeError, ValueError) as exc:
        raise Hint("return a pair (X, y) of tensors.", "End with `return X, y`.") from exc
    if not (isinstance(X, torch.Tensor) and isinstance(y, torch.Tensor)):
        raise Hint(f"X and y must be tensors, got {type(X).__name__} and {type(y).__name__}.",
                   "Index the series with a tensor of positions: the result is a tensor.")
    return X, y


_GATHER_FIX = (
    "Indexing a 1-d tensor with a 2-d integer tensor returns a 2-d tensor of the same shape, so one "
    "indexing operation can pick every window at once if you first build a grid of positions, one row per "
    "window. Broadcasting builds such a grid from two 1-d pieces: where each window starts, and how far "
    "into its window each column is. Split the picked rows into inputs and targets; the inputs still "
    "need a feature dimension of size 1."
)

#: Calls that run a Python loop for you: ``map(f, xs)`` is a loop written as a call.
_LOOP_CALLS = ("map", "filter", "reduce", "starmap", "accumulate")


def _loop_call(fn: Callable) -> str | None:
    """Describe the first call to ``map``/``filter``/``reduce``/... in ``fn``'s own source, e.g. "a call to map() (line 3 of f)".

    A complement to :func:`helpers.exercises.loops.python_loop`, which looks for ``for``/``while``
    and comprehensions only. Matches a bare name (``map(...)``) or an attribute
    (``itertools.starmap(...)``). Like ``python_loop``, it returns None when the source
    cannot be read, and for a lambda only the lambda expressions of its source line count.
    """
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None
    roots = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda)] if fn.__name__ == "<lambda>" else [tree]
    for root in roots:
        for node in ast.walk(root):
            if isinstance(node, ast.Call):
                called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                if called in _LOOP_CALLS:
                    return f"a call to {called}() (line {node.lineno} of {fn.__name__}), which is a Python loop"
    return None


def _aten(*ops: str, reached: bool = False, does: str = "") -> tuple[Shortcut, ...]:
    """Shortcuts for ATen operators by name: ``torch.ops.aten.NAME`` and (by the guard) each of its overloads."""
    return tuple(Shortcut(f"torch.ops.aten.{op}", reached=reached, does=does) for op in ops)


_VIEW_DOES = "a strided view of the series (`unfold`/`as_strided`: every window without indexing)"
_IM2COL_DOES = "`F.unfold` (im2col: it copies every sliding block of its input into a column)"
_CONV_DOES = "a convolution with an identity kernel (it copies every window of the series into an output channel)"

#: Library routes to the windows. The Python names are refused when the learner calls them; the ATen
#: operators that do the work (as dispatched in torch 2.14: ``Tensor.unfold`` -> ``aten.unfold``,
#: ``F.unfold``/``nn.Unfold`` -> ``aten.im2col``, ``F.conv1d``/``nn.Conv1d``/``F.conv2d`` -> ``aten.convolution``)
#: are refused wherever the learner's code reaches them from (``reached=True``). ``conv1d``/``conv2d``/
#: ``_convolution_mode`` are composite (decomposed before dispatch), so they are refused by name only.
#: ``Tensor.unfold`` is named on its own, so its message names it, not ``F.unfold``.
_WINDOW_SHORTCUTS = (
    *_aten("unfold", "unfold_copy", "as_strided", "as_strided_copy", reached=True, does=_VIEW_DOES),
    *_aten("im2col", reached=True, does=_IM2COL_DOES),
    *_aten("conv1d", "conv2d", "_convolution_mode", does=_CONV_DOES),
    *_aten("convolution", "_convolution", reached=True, does=_CONV_DOES),
    Shortcut("torch.nn.functional.unfold", does=_IM2COL_DOES), Shortcut("torch.nn.Unfold", does=_IM2COL_DOES),
    "torch.Tensor.unfold", "torch.Tensor.as_strided", "torch.as_strided",
)


@exercise(
    "08.make_windows",
    "return (X, y) for a 1-d series: X [N, T, 1] holds windows of T consecutive values starting every stride "
    "steps and y [N, horizon] the horizon values right after each window, N = (len(series) - T - horizon) // stride + 1; "
    "one indexing operation, no Python loop, and no library routine that cuts the windows for you "
    "(Tensor.unfold, as_strided, F.unfold, a convolution).",
    reference=make_windows,
    shortcuts=_WINDOW_SHORTCUTS,
    goal="the windows (with one indexing operation)",
    hint=_GATHER_FIX,
)
def _test_make_windows(candidate) -> None:
    loop = python_loop(candidate) or _loop_call(candidate)
    if loop is not None:
        raise Hint(f"your function has {loop}; this exercise asks for one indexing operation that picks every "
                   "window at once, with no Python loop.", _GATHER_FIX)
    series = torch.arange(12, dtype=torch.float32)
    X, y = _as_pair(candidate(series.clone(), 3, 2, 2))
    n = (12 - 3 - 2) // 2 + 1  # 4 windows: starts 0, 2, 4, 6
    case = "for the series 0., 1., ..., 11. with T=3, horizon=2, stride=2"
    if X.ndim == 2 and tuple(X.shape) == (n, 3):
        raise Hint(f"{case} X has shape {tuple(X.shape)}, but it should be [N, T, 1]: one feature per step.",
                   "An RNN layer reads [N, T, F]: a series of single numbers has F = 1, a trailing feature dimension of size 1.")
    if X.shape[0] == 12 - 3 - 2 + 1:
        raise Hint(f"{case} you made {X.shape[0]} windows, one per step: the windows should start every stride steps.",
                   "The i-th window starts at i * stride, so there are (L - T - horizon) // stride + 1 of them.")
    if X.shape[0] in (n - 1, n + 1):
        raise Hint(f"off by one: {case} there are {n} windows, you made {X.shape[0]}.",
                   "N = (L - T - horizon) // stride + 1: the last window's target may end exactly at the series' end.")
    if tuple(X.shape) != (n, 3, 1) or tuple(y.shape) != (n, 2):
        raise Hint(f"{case} X should be {[n, 3, 1]} and y {[n, 2]}, got {list(X.shape)} and {list(y.shape)}.",
                   "N = (L - T - horizon) // stride + 1 windows; X holds T values each, y horizon values each.")
    if not (X.is_floating_point() and y.is_floating_point()):
        raise Hint(f"keep the series' float dtype, got {X.dtype} and {y.dtype}.",
                   "Index the float series itself; the positions are int64, the values stay float.")
    if torch.equal(X[0, :, 0], series[:3]) and torch.equal(y[0], series[2:4]):
        raise Hint(f"{case} y overlaps the window: y[0] is {y[0].tolist()}, it should start right after X[0].",
                   "y[i] starts at position start + T, not start + T - 1.")
    want_X, want_y = make_windows(series, 3, 2, 2)
    if not torch.equal(X, want_X):
        raise Hint(f"{case} the windows should be {want_X[:, :, 0].tolist()}, got {X[:, :, 0].tolist()}.",
                   "Window i holds series[i * stride : i * stride + T].")
    if not torch.equal(y, want_y):
        raise Hint(f"{case} the targets should be {want_y.tolist()}, got {y.tolist()}.",
                   "y[i] holds series[i * stride + T : i * stride + T + horizon].")
    # a horizon shorter than the stride: the last window's target may end on the series' last value even though
    # (L - T) // stride windows would stop one short (L=12, T=3, horizon=1, stride=2: 5 windows, not 4)
    series = torch.arange(12, dtype=torch.float32)
    X, y = _as_pair(candidate(series.clone(), 3, 1, 2))
    want_X, want_y = make_windows(series, 3, 1, 2)
    if X.shape[0] != want_X.shape[0]:
        n, last = want_X.shape[0], int(want_X[-1, 0, 0])
        missing = (f": the last window, {want_X[-1, :, 0].tolist()} with target {want_y[-1].tolist()}, is missing"
                   if X.shape[0] == n - 1 and X.shape[1:] == want_X.shape[1:] and torch.equal(X, want_X[:-1]) else "")
        raise Hint(f"for the series 0., 1., ..., 11. with T=3, horizon=1, stride=2 there are {n} windows (starts "
                   f"0, 2, ..., {last}), you made {X.shape[0]}{missing}.",
                   "N = (L - T - horizon) // stride + 1 counts the starts s = 0, stride, 2 * stride, ... for which "
                   "s + T + horizon <= L: the target's end, not only the window's, decides the count.")
    # another length, stride 1 (the chapter's case), horizon 1, random values; and a stride that does not divide
    g = torch.Generator().manual_seed(8)
    series = torch.randn(25, generator=g)
    for T, horizon, stride in ((5, 1, 1), (4, 3, 5), (5, 1, 3)):
        X, y = _as_pair(candidate(series.clone(), T, horizon, stride))
        want_X, want_y = make_windows(series, T, horizon, stride)
        case = f"for a random series of length 25, T={T}, horizon={horizon}, stride={stride}"
        if X.shape != want_X.shape or y.shape != want_y.shape:
            raise Hint(f"{case} expected X {list(want_X.shape)} and y {list(want_y.shape)}, "
                       f"got {list(X.shape)} and {list(y.shape)}.",
                       "N = (L - T - horizon) // stride + 1, rounded down: a last window without its full target is dropped.")
        if not (torch.equal(X, want_X) and torch.equal(y, want_y)):
            raise Hint(f"{case} the values are wrong.", "Window i starts at i * stride; check the columns you split.")
    # no loop hidden in a helper (or in torch.stack/torch.cat of many slices): one indexing operation issues
    # the same number of operators for 16 windows as for 76; a loop issues one or more per window
    few = ops_issued(candidate, torch.arange(20, dtype=torch.float32), 3, 2, 1)  # N = 16
    many = ops_issued(candidate, torch.arange(80, dtype=torch.float32), 3, 2, 1)  # N = 76
    if many != few:
        raise Hint(f"your function issues {few} tensor operations for 16 windows and {many} for 76: the count grows "
                   "with the number of windows, so something loops over them (a helper, map, or stacking slices).",
                   _GATHER_FIX)
    # ... nor over the steps of a window or of its target (stacking T shifted slices of the series):
    # the same 16 windows, with T = 9 instead of 3, or horizon = 8 instead of 2
    for T, horizon in ((9, 2), (3, 8)):
        count = ops_issued(candidate, torch.arange(10 + T + horizon, dtype=torch.float32), T, horizon, 1)
        if count != few:
            raise Hint(f"your function issues {few} tensor operations for 16 windows with T=3, horizon=2 and {count} "
                       f"for 16 windows with T={T}, horizon={horizon}: the count grows with the length of a window "
                       "or of its target, so something loops over the time steps (a helper, or stacking shifted slices).",
                       _GATHER_FIX)
    # the windows must be picked out of the series tensor, not rebuilt from Python numbers (tolist()),
    # where no operator is issued per window and the count above cannot see a loop
    series = torch.arange(20, dtype=torch.float32).requires_grad_()
    X, y = _as_pair(candidate(series, 3, 2, 1))
    if not (X.requires_grad and y.requires_grad):
        raise Hint("for a series with requires_grad=True your X and y carry no autograd history: they were "
                   "rebuilt from Python numbers (tolist(), a list, NumPy) instead of indexing the series tensor.",
                   _GATHER_FIX)


# --------------------------------------------------------------------------
# 08.last_valid_output
# --------------------------------------------------------------------------

_PAIRED_INDEX_FIX = (
    "Paired advanced indexing: two integer index tensors of the same length B, one for the batch "
    "dimension and one for the time dimension, are paired entry by entry and pick one element per pair, "
    "so each row gets its own time step and the result is [B, H]. Which time step is a sequence's last "
    "real one, given its length? (Tensor.gather along the time dimension is another route.)"
)


@exercise(
    "08.last_valid_output",
    "return output[b, lengths[b] - 1] for every sequence b of a padded batch-first output "
    "[B, T, H], as a tensor [B, H] (lengths is an int64 tensor [B]), without a Python loop.",
    reference=last_valid_output,
    hint=_PAIRED_INDEX_FIX,
)
def _test_last_valid_output(candidate) -> None:
    loop = python_loop(candidate)
    if loop is not None:
        raise Hint(f"your function has {loop}; this exercise asks for one indexing operation that picks every "
                   "row's step at once, with no Python loop.", _PAIRED_INDEX_FIX)
    B, T, H = 3, 5, 2
    # output[b, t] = [10 * b + t, -(10 * b + t)]: every value tells where it came from
    code = (10 * torch.arange(B)[:, None] + torch.arange(T)[None, :]).float()
    output = torch.stack([code, -code], dim=-1)
    lengths = torch.tensor([3, 1, 4])
    got = candidate(output.clone(), lengths.clone())
    want = output[torch.arange(B), lengths - 1]
    if not isinstance(got, torch.Tensor):
        raise Hint(f"return a tensor [B, H], got {type(got).__name__}.", "Index the output tensor: the result is a tensor.")
    case = f"for output [3, 5, 2] whose entry [b, t] is (10 * b + t, -(10 * b + t)) and lengths {lengths.tolist()}"
    if tuple(got.shape) != (B, H):
        raise Hint(f"{case} the result should have shape [B, H] = {[B, H]}, got {list(got.shape)}.",
                   "One index per row picks one time step per row: " + _PAIRED_INDEX_FIX)
    if torch.equal(got, output[:, -1]):
        raise Hint(f"{case} you returned output[:, -1], the last padded step, which is padding for the shorter sequences.",
                   _PAIRED_INDEX_FIX)
    if torch.equal(got, output[torch.arange(B), lengths.clamp(max=T - 1)]):
        raise Hint(f"off by one: {case} a sequence of length n has its last real step at index n - 1.",
                   "Time steps are numbered from 0, so a length counts one more than the index of the last real step.")
    if not torch.equal(got, want):
        raise Hint(f"{case} expected first columns {want[:, 0].tolist()} (as 10 * b + t), got {got[:, 0].tolist()}.",
                   _PAIRED_INDEX_FIX)
    # sizes of 1: the result must be [B, H] exactly, also when B or H is 1 (a bare squeeze() drops them)
    for shape, lens in (((1, 4, 1), [2]), ((1, 4, 3), [3]), ((3, 4, 1), [2, 4, 1])):
        output = torch.arange(float(torch.Size(shape).numel())).view(shape)
        lengths = torch.tensor(lens)
        got = candidate(output.clone(), lengths.clone())
        want = output[torch.arange(shape[0]), lengths - 1]
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape):
            squeezed = isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(want.squeeze().shape)
            got_desc = list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise Hint(f"for output {list(shape)} and lengths {lens} the result should have shape [B, H] = "
                       f"{list(want.shape)}, got {got_desc}"
                       + (": a squeeze() with no dimension named drops every dimension of size 1, B and H included."
                          if squeezed else "."),
                       "Keep B and H even when they are 1: if you added a dimension of size 1 for the time step, "
                       "remove only that one, by naming it in squeeze(dim), or index so that no extra dimension appears.")
        if not torch.equal(got, want):
            raise Hint(f"for output {list(shape)} and lengths {lens} expected {want.tolist()}, got {got.tolist()}.",
                       _PAIRED_INDEX_FIX)
    # no loop hidden in a helper: the number of operators must not grow with B
    small = ops_issued(candidate, torch.zeros(2, 6, 3), torch.tensor([1, 6]))
    large = ops_issued(candidate, torch.zeros(12, 6, 3), torch.arange(12) % 6 + 1)
    if large != small:
        raise Hint(f"your function issues {small} tensor operations for B=2 and {large} for B=12: the count grows "
                   "with the batch, so something loops over the rows.", _PAIRED_INDEX_FIX)
    # ... nor over the time steps (a mask per step, added up): the same B = 2 with T = 20 instead of 6
    longer = ops_issued(candidate, torch.zeros(2, 20, 3), torch.tensor([1, 20]))
    if longer != small:
        raise Hint(f"your function issues {small} tensor operations for T=6 and {longer} for T=20: the count grows "
                   "with the number of time steps, so something loops over them.", _PAIRED_INDEX_FIX)
    # the real use: equals h_n of a packed run of an LSTM
    g = torch.Generator().manual_seed(8)
    lengths = torch.tensor([6, 2, 4, 6, 1])
    x = torch.randn(5, 6, 3, generator=g)
    torch.manual_seed(8)
    lstm = nn.LSTM(3, 4, batch_first=True)
    with torch.no_grad():
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        _, (h_n, _) = lstm(packed)
        out, _ = lstm(x)
        got = candidate(out, lengths.clone())
    if not (isinstance(got, torch.Tensor) and got.shape == h_n[-1].shape):
        raise Hint(f"for an LSTM output [5, 6, 4] the result should be [5, 4], got {getattr(got, 'shape', type(got).__name__)}.",
                   _PAIRED_INDEX_FIX)
    if not torch.allclose(got, h_n[-1], atol=1e-6):
        raise Hint("on a real LSTM output with lengths [6, 2, 4, 6, 1] the result should equal h_n of the packed run.",
                   _PAIRED_INDEX_FIX)
