"""Chapter 08 (RNN, LSTM, GRU): exercise checkers and reference solutions.

Exercises:

- ``08.lstm_param_count``: ``lstm_param_count(input_size, hidden_size, num_layers) -> int``,
  the number of parameters of ``nn.LSTM(input_size, hidden_size, num_layers)``
  by formula.
- ``08.make_windows``: ``make_windows(series, T, horizon) -> (X [N, T, 1], y [N, horizon])``,
  every window of ``T`` values and the ``horizon`` values that follow it.
- ``08.last_valid_output``: ``last_valid_output(output, lengths) -> [B, H]``, the
  output of each padded sequence at its last real (non-padding) time step.

Each checker raises ``AssertionError("hint")`` for a wrong answer (see
:func:`helpers.exercises.check`); the hints name the usual mistakes (one bias
vector instead of two, an off-by-one window count, the padded last step).
"""

from __future__ import annotations

import torch
from torch import nn

from . import exercise

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


def make_windows(series: torch.Tensor, T: int, horizon: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Every window of ``T`` consecutive values of ``series`` and the ``horizon`` values after it.

    Args:
        series: float ``[L]``.
        T: window length (inputs per sample).
        horizon: values to predict after each window.

    Returns:
        ``X`` float ``[N, T, 1]`` and ``y`` float ``[N, horizon]`` with
        ``N = L - T - horizon + 1``: ``X[i, :, 0] = series[i : i + T]`` and
        ``y[i] = series[i + T : i + T + horizon]``.
    """
    w = series.unfold(0, T + horizon, 1)  # [N, T + horizon], a view with stride 1 between windows
    return w[:, :T].unsqueeze(-1).clone(), w[:, T:].clone()


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

_LSTM_CONFIGS = [(1, 32, 1), (10, 20, 1), (3, 1, 1), (7, 5, 3), (64, 128, 2), (128, 64, 2), (16, 16, 4)]


def _real_lstm_count(i: int, h: int, layers: int) -> int:
    return sum(p.numel() for p in nn.LSTM(i, h, num_layers=layers).parameters())


def _formula(i: int, h: int, layers: int, gates: int = 4, biases: int = 2, later_input: str = "h") -> int:
    total = 0
    for layer in range(layers):
        fan_in = i if layer == 0 or later_input == "i" else h
        total += gates * (h * (fan_in + h) + biases * h)
    return total


@exercise(
    "08.lstm_param_count",
    "return the number of parameters of nn.LSTM(input_size, hidden_size, num_layers) by formula "
    "(four gates, each with an input weight, a recurrent weight and PyTorch's two bias vectors).",
    reference=lstm_param_count,
)
def _test_lstm_param_count(candidate) -> None:
    for i, h, layers in _LSTM_CONFIGS:
        want = _real_lstm_count(i, h, layers)
        got = candidate(i, h, layers)
        try:
            got = int(got)
        except (TypeError, ValueError) as exc:
            raise AssertionError(f"return an int, got {type(got).__name__}") from exc
        if got == want:
            continue
        where = f"for nn.LSTM({i}, {h}, num_layers={layers}) "
        if got == _formula(i, h, layers, biases=1):
            raise AssertionError(
                where + f"you counted one bias vector per gate ({got}); PyTorch keeps two, "
                "bias_ih and bias_hh, so the count is 4 * (h * (i + h) + 2 * h) per layer"
            )
        if got == _formula(i, h, layers, biases=0):
            raise AssertionError(where + f"you left out the biases ({got}): each layer has bias_ih and bias_hh, 4 * h each")
        if got == _formula(i, h, layers, gates=3):
            raise AssertionError(where + f"{got} is a GRU's count (three gates); an LSTM has four")
        if got == _formula(i, h, 1):
            raise AssertionError(where + f"you counted only the first layer ({got}); add the other {layers - 1} layer(s)")
        if got == _formula(i, h, layers, later_input="i"):
            raise AssertionError(
                where + f"{got}: layers after the first read the hidden_size outputs of the layer below, "
                "not input_size features"
            )
        raise AssertionError(where + f"the count is {want}, you returned {got}; list lstm.named_parameters() to see the shapes")


# --------------------------------------------------------------------------
# 08.make_windows
# --------------------------------------------------------------------------


def _as_pair(result) -> tuple[torch.Tensor, torch.Tensor]:
    try:
        X, y = result
    except (TypeError, ValueError) as exc:
        raise AssertionError("return a pair (X, y) of tensors") from exc
    if not (isinstance(X, torch.Tensor) and isinstance(y, torch.Tensor)):
        raise AssertionError(f"X and y must be tensors, got {type(X).__name__} and {type(y).__name__}")
    return X, y


@exercise(
    "08.make_windows",
    "return (X, y) for a 1-d series: X [N, T, 1] holds every window of T consecutive values and "
    "y [N, horizon] the horizon values right after each window, N = len(series) - T - horizon + 1.",
    reference=make_windows,
)
def _test_make_windows(candidate) -> None:
    series = torch.arange(10, dtype=torch.float32)
    X, y = _as_pair(candidate(series.clone(), 3, 2))
    n = 10 - 3 - 2 + 1
    if X.ndim == 2 and tuple(X.shape) == (n, 3):
        raise AssertionError(f"X has shape {tuple(X.shape)}; add a feature dimension of size 1 (X.unsqueeze(-1)) to get [N, T, 1]")
    if X.shape[0] in (n - 1, n + 1):
        raise AssertionError(
            f"off by one: series of length 10 with T=3 and horizon=2 gives {n} windows "
            f"(N = L - T - horizon + 1), you made {X.shape[0]}; the last window's target ends exactly at the series' end"
        )
    assert tuple(X.shape) == (n, 3, 1), f"X should have shape [N, T, 1] = {[n, 3, 1]}, got {list(X.shape)}"
    assert tuple(y.shape) == (n, 2), f"y should have shape [N, horizon] = {[n, 2]}, got {list(y.shape)}"
    assert X.is_floating_point() and y.is_floating_point(), f"keep the series' float dtype, got {X.dtype} and {y.dtype}"
    if torch.equal(X[0, :, 0], series[:3]) and torch.equal(y[0], series[2:4]):
        raise AssertionError("y overlaps the window: y[0] must start right after X[0], at series[T] (here [3., 4.], not [2., 3.])")
    assert torch.equal(X[0, :, 0], series[:3]), f"X[0] should be series[0:3] = [0, 1, 2], got {X[0, :, 0].tolist()}"
    assert torch.equal(y[0], series[3:5]), f"y[0] should be series[3:5] = [3, 4], got {y[0].tolist()}"
    assert torch.equal(X[-1, :, 0], series[5:8]) and torch.equal(y[-1], series[8:10]), (
        f"the last window should be [5, 6, 7] -> [8, 9], got {X[-1, :, 0].tolist()} -> {y[-1].tolist()}"
    )
    want_X = torch.stack([series[i : i + 3] for i in range(n)]).unsqueeze(-1)
    assert torch.equal(X, want_X), "window i must be series[i : i + T]: consecutive windows move by one step"
    # another length, horizon 1 and random values
    g = torch.Generator().manual_seed(8)
    series = torch.randn(25, generator=g)
    X, y = _as_pair(candidate(series.clone(), 5, 1))
    want_X, want_y = make_windows(series, 5, 1)
    assert X.shape == want_X.shape and y.shape == want_y.shape, (
        f"for L=25, T=5, horizon=1 expected X {list(want_X.shape)} and y {list(want_y.shape)}, "
        f"got {list(X.shape)} and {list(y.shape)}"
    )
    assert torch.equal(X, want_X) and torch.equal(y, want_y), "wrong values for L=25, T=5, horizon=1"


# --------------------------------------------------------------------------
# 08.last_valid_output
# --------------------------------------------------------------------------


@exercise(
    "08.last_valid_output",
    "return output[b, lengths[b] - 1] for every sequence b of a padded batch-first output "
    "[B, T, H], as a tensor [B, H] (lengths is an int64 tensor [B]).",
    reference=last_valid_output,
)
def _test_last_valid_output(candidate) -> None:
    B, T, H = 3, 5, 2
    # output[b, t] = [10 * b + t, -(10 * b + t)]: every value tells where it came from
    code = (10 * torch.arange(B)[:, None] + torch.arange(T)[None, :]).float()
    output = torch.stack([code, -code], dim=-1)
    lengths = torch.tensor([3, 1, 4])
    got = candidate(output.clone(), lengths.clone())
    want = output[torch.arange(B), lengths - 1]
    if not isinstance(got, torch.Tensor):
        raise AssertionError(f"return a tensor [B, H], got {type(got).__name__}")
    assert tuple(got.shape) == (B, H), f"the result should have shape [B, H] = {[B, H]}, got {list(got.shape)}"
    if torch.equal(got, output[:, -1]):
        raise AssertionError("output[:, -1] is the last time step of the padded batch, which is padding for the shorter sequences")
    if torch.equal(got, output[torch.arange(B), lengths]):
        raise AssertionError("off by one: a sequence of length n has its last real step at index n - 1")
    assert torch.equal(got, want), f"for lengths {lengths.tolist()} expected rows {want[:, 0].tolist()} (as 10 * b + t), got {got[:, 0].tolist()}"
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
    assert isinstance(got, torch.Tensor) and got.shape == h_n[-1].shape, (
        f"for an LSTM output [5, 6, 4] the result should be [5, 4], got {getattr(got, 'shape', type(got).__name__)}"
    )
    assert torch.allclose(got, h_n[-1], atol=1e-6), (
        "on a real LSTM output with lengths [6, 2, 4, 6, 1] the result should equal h_n of the packed run"
    )
